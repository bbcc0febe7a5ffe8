"""`predict_run()`: the model's time for a run as it was actually launched.

A launch may run other figures than the plan's: an edited iteration count, an integer local
batch, a shorter invocation limit (`--timeout-s`). The prediction comes from the one compiled
model (`models.performance`) with its parameters set so that the model's run is that run: a
fixed local batch b_lf = local_batch with b_g^max = n·local_batch (so b_g = n·local_batch),
n_t·e = iterations·n·local_batch (so k = iterations) and L = timeout − margin. Nothing of the
equations is restated here.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..inputs.files import brief
from ..models import performance as model
from .errors import InstanceError
from .instance import MAX_INTEGER, MAX_SECONDS, Instance
from .instance_validation import non_negative_number, plan_size, positive_number


@dataclass(frozen=True)
class RunPrediction:
    """The model's seconds for one run, by cause (they add up to `time_s`), and its restarts."""

    time_s: float
    restarts: int
    startup_s: float
    load_s: float
    compute_s: float
    communication_s: float
    restart_overhead_s: float


def predict_run(
    instance: Instance, *, functions: int, memory_mb: int, local_batch: float,
    iterations: float, timeout_s: float | None = None, timeout_margin_s: float | None = None,
) -> RunPrediction:
    """The model's time for `functions` × `memory_mb` MB training `iterations` iterations of
    `local_batch` samples per function, each invocation limited to `timeout_s` less
    `timeout_margin_s` (the platform's when None). Raises `InstanceError` naming the argument
    that is out of range, or when the model has no valid time for the plan (R or B_f^s ≤ 0)."""
    n, m = plan_size(functions, memory_mb)
    batch = positive_number("local_batch", local_batch, MAX_INTEGER)
    if batch < 1:
        raise InstanceError(f"`local_batch` must be at least 1 sample, got {batch:g}")
    steps = positive_number("iterations", iterations, MAX_INTEGER)
    platform = instance.platform
    timeout = platform.timeout_s if timeout_s is None else positive_number(
        "timeout_s", timeout_s, MAX_SECONDS
    )
    margin = platform.timeout_margin_s if timeout_margin_s is None else non_negative_number(
        "timeout_margin_s", timeout_margin_s, MAX_SECONDS
    )
    if margin >= timeout:
        raise InstanceError(
            f"`timeout_margin_s` ({margin:g}) must be less than `timeout_s` ({timeout:g}); it is "
            "the part of each invocation kept for checkpointing"
        )
    global_batch = n * batch
    params = {
        **instance.parameters(), "b_lf": batch, "b_gmax": global_batch,
        "n_t": steps * global_batch, "e": 1.0, "L": timeout - margin,
    }
    figures = model.evaluate(params, n, m)
    if not bool(figures.valid):
        raise InstanceError(
            f"`memory_mb` {m}: instance {brief(instance.name)} gives no valid time for "
            f"{n} × {m} MB (its rate or storage bandwidth is not positive there); "
            "`lambdadnn evaluate` says which"
        )
    return RunPrediction(
        time_s=float(figures.time),
        restarts=int(figures.restarts),
        startup_s=float(figures.t_startup),
        load_s=float(figures.t_load),
        compute_s=float(figures.t_comp_total),
        communication_s=float(figures.t_comm_total),
        restart_overhead_s=float(figures.t_restart),
    )
