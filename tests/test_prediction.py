"""`predict_run()`: the model's time for a run as launched (its n, m, local batch, iterations
and invocation limit), from the one compiled model with adjusted parameters."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from lambdadnn.solver.errors import InstanceError
from lambdadnn.solver.instance import Instance
from lambdadnn.solver.instance_yaml import load_instance
from lambdadnn.solver.pipeline import evaluate, solve
from lambdadnn.solver.prediction import predict_run
from tests.by_hand import hand, problem_of

ROOT = Path(__file__).resolve().parent.parent
CATALOGUE = yaml.safe_load((ROOT / "tests" / "catalogue.yaml").read_text(encoding="utf-8"))
LOCAL = next(e for e in CATALOGUE if e["id"] == "local-vcpu-4-at-the-limit")["instance"]


def local() -> Instance:
    return load_instance(LOCAL)


@pytest.mark.parametrize("entry", CATALOGUE, ids=lambda entry: entry["id"])
def test_an_unedited_plan_is_predicted_as_evaluate_gives_it(entry: dict[str, Any]) -> None:
    plan = solve(entry["instance"], platform=entry.get("platform"),
                 deadline_s=entry.get("deadline_s"))
    run = predict_run(plan.solved_from, functions=plan.functions, memory_mb=plan.memory_mb,
                      local_batch=plan.local_batch, iterations=plan.iterations)
    figures = evaluate(plan.solved_from, functions=plan.functions, memory_mb=plan.memory_mb)
    assert run.time_s == pytest.approx(figures.time_s, rel=1e-12, abs=0)
    assert run.restarts == figures.restarts
    tb = figures.time_breakdown
    assert (run.load_s, run.startup_s) == (tb.load_s, tb.startup_s)
    assert run.compute_s == pytest.approx(tb.compute_s, rel=1e-12, abs=0)
    assert run.communication_s == pytest.approx(tb.communication_s, rel=1e-12, abs=0)
    parts = (run.load_s + run.compute_s + run.communication_s + run.restart_overhead_s
             + run.startup_s)
    assert parts == pytest.approx(run.time_s, rel=1e-12)


def test_a_run_is_the_model_by_hand_for_its_own_batch_and_iterations() -> None:
    """An edited plan (another batch and iteration count than the instance's epochs give) is
    MODEL.md's equations by hand for that batch, with k = the run's iterations."""
    instance = local()
    n, m, batch, iterations = 3, 1500, 20, 777
    run = predict_run(instance, functions=n, memory_mb=m, local_batch=batch,
                      iterations=iterations)
    k = iterations
    expected = hand(dataclasses.replace(
        problem_of(instance), b_lf=batch, b_gmax=n * batch, n_t=k * n * batch, e=1), n, m)
    assert expected.iterations == k and expected.local_batch == batch
    assert run.time_s == pytest.approx(expected.time, rel=1e-12)
    assert run.restarts == expected.restarts
    assert run.compute_s == pytest.approx(k * expected.t_comp, rel=1e-12)
    assert run.communication_s == pytest.approx(k * expected.t_comm, rel=1e-12)


def test_doubling_the_iterations_doubles_the_training_part_only() -> None:
    instance = local()
    runs = [predict_run(instance, functions=4, memory_mb=1769, local_batch=32, iterations=k)
            for k in (300, 600)]
    assert runs[0].restarts == runs[1].restarts == 0
    assert runs[1].compute_s == pytest.approx(2 * runs[0].compute_s, rel=1e-12)
    assert runs[1].communication_s == pytest.approx(2 * runs[0].communication_s, rel=1e-12)
    assert (runs[1].load_s, runs[1].startup_s) == (runs[0].load_s, runs[0].startup_s)
    training = runs[0].compute_s + runs[0].communication_s
    assert runs[1].time_s - runs[0].time_s == pytest.approx(training, rel=1e-12)


def test_a_shorter_invocation_limit_predicts_its_restarts() -> None:
    """`--timeout-s 12` locally: r = ⌈T_train / (12 − margin)⌉ − 1 restarts, each paying the
    restart overhead and a start-up round."""
    instance = local()
    kwargs: dict[str, Any] = {"functions": 2, "memory_mb": 1769, "local_batch": 32,
                              "iterations": 400}
    long = predict_run(instance, **kwargs)
    short = predict_run(instance, **kwargs, timeout_s=12, timeout_margin_s=2)
    t_train = short.load_s + short.compute_s + short.communication_s
    assert long.restarts == 0
    assert short.restarts == math.ceil(t_train / 10) - 1 > 0
    overhead = instance.platform.restart_overhead_s
    assert short.restart_overhead_s == pytest.approx(short.restarts * overhead, rel=1e-12)
    assert short.startup_s == pytest.approx((short.restarts + 1) * long.startup_s, rel=1e-12)
    assert short.time_s > long.time_s
    # Only the margin given: the platform's timeout with it.
    margin_only = predict_run(instance, **kwargs, timeout_margin_s=0)
    assert margin_only.time_s == long.time_s


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"functions": 0}, "`functions` must be a positive integer"),
        ({"memory_mb": 1.5}, "`memory_mb` must be a positive integer"),
        ({"local_batch": 0}, "`local_batch` must be a positive number"),
        ({"local_batch": 0.5}, "`local_batch` must be at least 1 sample, got 0.5"),
        ({"iterations": float("nan")}, "`iterations` must be a positive number"),
        ({"iterations": True}, "`iterations` must be a positive number"),
        ({"timeout_s": -1}, "`timeout_s` must be a positive number"),
        ({"timeout_margin_s": -1}, "`timeout_margin_s` must be a number from 0"),
        ({"timeout_s": 10, "timeout_margin_s": 10},
         "`timeout_margin_s` (10) must be less than `timeout_s` (10)"),
        ({"memory_mb": 10}, "`memory_mb` 10: instance 'digits-local-4-cpus' gives no valid time"),
    ],
)
def test_bad_arguments_are_one_line_naming_them(change: dict[str, Any], message: str) -> None:
    instance = local()
    if change.get("memory_mb") == 10:  # a rate that is negative below 50 MB
        rate = dataclasses.replace(instance.profile.rate, intercept=-10.0)
        instance = dataclasses.replace(
            instance, profile=dataclasses.replace(instance.profile, rate=rate))
    kwargs: dict[str, Any] = {"functions": 2, "memory_mb": 1769, "local_batch": 32,
                              "iterations": 100, **change}
    with pytest.raises(InstanceError) as raised:
        predict_run(instance, **kwargs)
    assert str(raised.value).startswith(message)
    assert "\n" not in str(raised.value)


def test_numpy_numbers_are_numbers() -> None:
    instance = local()
    plain = predict_run(instance, functions=2, memory_mb=1769, local_batch=32, iterations=100)
    given = predict_run(instance, functions=np.int64(2), memory_mb=np.int32(1769),
                        local_batch=np.float64(32), iterations=np.int64(100),
                        timeout_s=np.float32(900))
    assert given == plain
