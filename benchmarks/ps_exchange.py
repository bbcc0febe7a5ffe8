"""Does sharding the parameter server shorten the exchange? Measured against predicted, per k.

Run as ``.venv/bin/python -m benchmarks.ps_exchange [--shards 1,2,3] [--functions 2]
[--memory-mb 884] [--iterations 200] [--repeats 1] [--nic-mbit R] [--json]``. It launches
the shipped `digits-mlp` workload (301,066 float32 weights: d_m = 1.2 MB per direction,
exchange-bound) locally, exactly as `lambdadnn launch` does (`run_local`: a redis-server per
shard, a worker process per function in its CPU cgroup), once per shard count k with the
same plan and seed, and reports from each launch report:

- the exchange time per iteration (the report's `exchange_s` over the iterations), and per
  shard its median and mean (`shard_exchange_median_s`, `shard_exchange_s`: the worker times
  each shard's push and pull, which run at once, one thread per shard);
- the bytes pushed to and pulled from each shard;
- the final loss, which must be the same for every k (the update is element-wise).

Prediction: no fitted local profile of digits-mlp is stored in this repository (the
calibration's profiles go to its `--out` folder), so B_p is fitted from the k = 1 run, with
λ = 0 and c_msg = 0: the k = 1 exchange per iteration is 2·d_m·n / B_p (push and pull, each
d_m / (B_p / n)), so B_p = 2·d_m·n / x₁. The model per direction with k shards is
d_m / min(B_fmax, k·B_p/n) + λ + k·c_msg; B_fmax is not measured here either, so both
readings are printed: B_fmax = B_p (what `lambdadnn profile` sets locally, where one link is
all it sees) and B_fmax = ∞ (only the shards' NICs bound it). With `--latency-s` the fit
takes that λ instead of 0.

On unix sockets on a 2-core machine the exchange is CPU-bound (most of it is fixed cost), so
that comparison cannot test the per-shard term. `--nic-mbit R` gives each shard a NIC of its
own (`benchmarks.emulated_nics`, root only): its redis-server in a network namespace,
reached over a veth pair shaped by `tc tbf` to R Mbit/s each way, shared by the n workers;
the launch gets the shards' URLs (`run_local(..., redis_urls=...)`). Each k then runs twice
per repeat: on the same links unshaped (`--no-unshaped` skips it), then shaped. The
functions' own side is not shaped, so B_fmax = ∞ throughout, and the prediction is given
for the shaped runs in five ways, each with its relative error (predicted − measured) /
measured:

- (a) fitted: B_p fitted from the shaped k = 1 run(s) as above (λ = `--latency-s`, c_msg = 0);
- (a+) fitted + fixed: B_p fitted from the shaped k = 1 run(s) with the λ and c_msg of (b+)
  (x₁ = 2·(d_m·n/B_p + λ + c_msg)), so that only the transfer is scaled by 1/k;
- (b) nominal: B_p = R/8 MB/s (10⁶ bytes), λ = c_msg = 0 — the model with nothing fitted;
- (b+) nominal + fixed: (b) plus 2·(λ + k·c_msg), where λ and c_msg are fitted (least
  squares over k, c_msg = 0 with one k; both 0 with `--no-unshaped`) to the unshaped runs'
  exchange per iteration
  u_k = 2·(λ + k·c_msg): everything the exchange costs over these links but their rate (it
  also holds the unshaped transfer itself, CPU-bound at a few hundred MB/s, so those bytes
  are counted twice: a few ms too many);
- (c) channel bytes: as (b+), but with the bytes the parameter channel actually moves over a
  shard's link per iteration, one after another (`launcher.channel`: the n ranks push their
  slices, the last one in pulls the n slices with parameters and momentum and pushes both
  back, the other n − 1 pull the parameters): (n + 2)·d_m/k in and (2n + 1)·d_m/k out,
  (3n + 3)·d_m/(k·B_p) per iteration where the model counts 2·n·d_m/(k·B_p) (λDNN's
  parameter server aggregates itself, a Redis shard cannot). The bytes are the launch
  report's own per-shard counts over its iterations, not this formula. Taken one after
  another they overstate the time: the link is full duplex, and one rank's pull of the
  parameters overlaps the other's next push.

R is the rate on the wire: frame headers take about 4.4% of it at the veth's 1,500-byte MTU,
which no prediction here corrects for.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from lambdadnn.benchmarks.emulated_nics import NicError, emulated_nics
from lambdadnn.launcher import LaunchError
from lambdadnn.launcher.local import MAX_LOCAL_FUNCTIONS, run_local
from lambdadnn.launcher.spec import LAMBDA_MEMORY_MB, MAX_SHARDS, LaunchReport, LaunchSpec

WORKLOAD = "digits-mlp"
BYTES_PER_VALUE = 4  # float32


def _model_mb() -> float:
    """d_m: the workload's parameters in MB (10⁶ bytes), as `lambdadnn profile` counts them."""
    from lambdadnn.launcher.workloads import load_workload

    model = load_workload(WORKLOAD, 0).model
    return sum(p.numel() for p in model.parameters()) * BYTES_PER_VALUE / 1e6


def _spec(functions: int, memory_mb: int, iterations: int, shards: int) -> LaunchSpec:
    return LaunchSpec(functions=functions, memory_mb=memory_mb, local_batch=32,
                      iterations=iterations, time_s=60.0, restarts=0,
                      platform="aws-lambda-x86_64", architecture="x86_64", shards=shards)


def measure(report: LaunchReport) -> dict[str, Any]:
    """The figures of one launch that the comparison needs."""
    iterations = max(1, report.iterations)
    return {
        "shards": report.shards,
        "status": report.status,
        "iterations": report.iterations,
        "restarts": report.restarts,
        "measured_time_s": report.measured_time_s,
        "iteration_median_s": report.iteration_median_s,
        "exchange_per_iteration_s": report.exchange_s / iterations,
        "compute_per_iteration_s": report.compute_s / iterations,
        "shard_exchange_median_s": list(report.shard_exchange_median_s),
        "shard_exchange_per_iteration_s": [s / iterations for s in report.shard_exchange_s],
        "shard_pushed_mb": [b / 1e6 for b in report.shard_pushed_bytes],
        "shard_pulled_mb": [b / 1e6 for b in report.shard_pulled_bytes],
        "final_loss": report.final_loss,
        "throttled_share": report.throttled_share,
    }


def predicted_exchange_s(
    model_mb: float, functions: int, shards: int, bandwidth_mbps: float,
    function_bandwidth_mbps: float, latency_s: float, message_s: float = 0.0,
) -> float:
    """Push plus pull per iteration: 2·(d_m / min(B_fmax, k·B_p/n) + λ + k·c_msg)."""
    link = min(function_bandwidth_mbps, shards * bandwidth_mbps / functions)
    return 2 * (model_mb / link + latency_s + shards * message_s)


def fit_bandwidth(model_mb: float, functions: int, exchange_s: float, latency_s: float) -> float:
    """B_p from a 1-shard run's exchange per iteration x₁ = 2·(d_m·n/B_p + λ)."""
    transfer = exchange_s / 2 - latency_s
    if transfer <= 0:
        raise SystemExit(f"the k = 1 exchange ({exchange_s:.4f} s per iteration) is no more "
                         f"than 2·λ = {2 * latency_s:.4f} s: lower --latency-s")
    return model_mb * functions / transfer


def fit_fixed(unshaped: Sequence[tuple[int, float]]) -> tuple[float, float]:
    """λ and c_msg from (k, exchange per iteration) of unshaped runs: the least-squares line
    u_k = 2·λ + 2·c_msg·k (c_msg = 0 when only one k was run)."""
    ks = np.array([k for k, _ in unshaped], dtype=np.float64)
    us = np.array([u for _, u in unshaped], dtype=np.float64)
    if len(np.unique(ks)) < 2:
        return float(us.mean()) / 2, 0.0
    slope, intercept = np.polyfit(ks, us, 1)
    return float(intercept) / 2, float(slope) / 2


def channel_bytes_s(traffic_mb: float, bandwidth_mbps: float) -> float:
    """The transfer time per iteration of `traffic_mb`, the bytes the channel moved over one
    shard's link per iteration (pushed and pulled, as the launch report counts them), one
    phase after another at B_p each way."""
    return traffic_mb / bandwidth_mbps


def _launch(shards: int, spec: LaunchSpec, seed: int, nic_mbit: float | None,
            shaped: bool) -> LaunchReport:
    """One launch: on the launcher's own redis-servers, or on emulated NICs (shaped to
    `nic_mbit`, or not)."""
    if nic_mbit is None:
        return run_local(spec, workload=WORKLOAD, seed=seed)
    with emulated_nics(shards, rate_mbit=nic_mbit if shaped else None) as urls:
        return run_local(spec, workload=WORKLOAD, seed=seed, redis_urls=urls)


def run(shard_counts: list[int], *, functions: int, memory_mb: int, iterations: int,
        repeats: int, seed: int, latency_s: float, nic_mbit: float | None = None,
        unshaped: bool = True) -> dict[str, Any]:
    rows = []
    links = [("unix", False)] if nic_mbit is None else [
        *([("veth unshaped", False)] if unshaped else []), (f"veth {nic_mbit:g} Mbit/s", True)]
    for repeat in range(repeats):
        for shards in shard_counts:
            for link, shaped in links:
                load = os.getloadavg()[0]
                began = time.monotonic()
                report = _launch(shards, _spec(functions, memory_mb, iterations, shards), seed,
                                 nic_mbit, shaped)
                rows.append({"repeat": repeat, "link": link, "shaped": shaped,
                             "load_before": round(load, 2),
                             "wall_s": round(time.monotonic() - began, 2), **measure(report)})
                print(f"k={shards} repeat {repeat} {link}: exchange "
                      f"{rows[-1]['exchange_per_iteration_s'] * 1e3:.1f} ms/iteration",
                      file=sys.stderr)
    model_mb = _model_mb()
    prediction: dict[str, Any] = {"model_mb": model_mb, "latency_s": latency_s,
                                  "nic_mbit": nic_mbit}
    fitted_on = [r for r in rows if r["shards"] == 1 and (nic_mbit is None or r["shaped"])]
    if fitted_on:
        x1 = sum(r["exchange_per_iteration_s"] for r in fitted_on) / len(fitted_on)
        bandwidth = fit_bandwidth(model_mb, functions, x1, latency_s)
        prediction.update(
            source=(f"fitted from the {'shaped ' if nic_mbit is not None else ''}k = 1 "
                    "run(s): no fitted local profile of digits-mlp is stored; "
                    f"λ = {latency_s:g} s and c_msg = 0 assumed"),
            bandwidth_mbps=bandwidth,
            per_k={str(k): {
                "b_fmax_equals_b_p": predicted_exchange_s(model_mb, functions, k, bandwidth,
                                                          bandwidth, latency_s),
                "b_fmax_unbounded": predicted_exchange_s(model_mb, functions, k, bandwidth,
                                                         math.inf, latency_s),
            } for k in shard_counts})
    if nic_mbit is not None:
        _nic_predictions(prediction, rows, model_mb, functions, shard_counts, nic_mbit)
    return {"workload": WORKLOAD, "functions": functions, "memory_mb": memory_mb,
            "iterations": iterations, "seed": seed, "cpus": os.cpu_count(),
            "rows": rows, "prediction": prediction}


def _nic_predictions(prediction: dict[str, Any], rows: list[dict[str, Any]], model_mb: float,
                     functions: int, shard_counts: list[int], nic_mbit: float) -> None:
    """Add (a+), (b), (b+) and (c) per k to `prediction` (see the module docstring), and each
    shaped row's relative errors."""
    nominal = nic_mbit / 8  # Mbit/s → MB/s, 10⁶ bytes
    unshaped = [(r["shards"], r["exchange_per_iteration_s"]) for r in rows if not r["shaped"]]
    latency, message = fit_fixed(unshaped) if unshaped else (0.0, 0.0)
    prediction.update(
        nominal_bandwidth_mbps=nominal,
        fixed_source=(f"λ and c_msg fitted to the {len(unshaped)} unshaped run(s)"
                      if unshaped else "no unshaped run: λ = c_msg = 0"),
        fixed_latency_s=latency, fixed_message_s=message)
    ones = [r["exchange_per_iteration_s"] for r in rows if r["shards"] == 1 and r["shaped"]]
    with_fixed = None
    if ones:
        with_fixed = fit_bandwidth(model_mb, functions, sum(ones) / len(ones),
                                   latency + message)
        prediction["bandwidth_with_fixed_mbps"] = with_fixed
    for k in shard_counts:
        fixed = 2 * (latency + k * message)
        per_k = prediction.setdefault("per_k", {}).setdefault(str(k), {})
        moved = [(sum(r["shard_pushed_mb"]) + sum(r["shard_pulled_mb"])) / k / r["iterations"]
                 for r in rows if r["shards"] == k and r["shaped"] and r["iterations"]]
        if with_fixed is not None:
            per_k["fitted_plus_fixed"] = predicted_exchange_s(
                model_mb, functions, k, with_fixed, math.inf, latency, message)
        per_k.update(
            nominal=predicted_exchange_s(model_mb, functions, k, nominal, math.inf, 0.0),
            nominal_plus_fixed=predicted_exchange_s(model_mb, functions, k, nominal, math.inf,
                                                    latency, message),
            **({"channel_bytes": channel_bytes_s(sum(moved) / len(moved), nominal) + fixed}
               if moved else {}))
    for row in rows:
        if not row["shaped"]:
            continue
        per_k = prediction["per_k"][str(row["shards"])]
        measured = row["exchange_per_iteration_s"]
        row["relative_error"] = {
            name: (per_k[key] - measured) / measured
            for name, key in (("fitted", "b_fmax_unbounded"),
                              ("fitted_plus_fixed", "fitted_plus_fixed"), ("nominal", "nominal"),
                              ("nominal_plus_fixed", "nominal_plus_fixed"),
                              ("channel_bytes", "channel_bytes")) if key in per_k}


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 1e3:.1f}"


def _shard_cells(row: dict[str, Any]) -> tuple[str, str]:
    shards = ", ".join(f"{_ms(m)} / {_ms(x)}" for m, x in zip(
        row["shard_exchange_median_s"], row["shard_exchange_per_iteration_s"], strict=True))
    traffic = ", ".join(f"{p:.0f} / {q:.0f}" for p, q in zip(
        row["shard_pushed_mb"], row["shard_pulled_mb"], strict=True))
    return shards, traffic


def _table(result: dict[str, Any]) -> str:
    prediction = result["prediction"]
    lines = [f"{result['workload']}: {result['functions']} functions × "
             f"{result['memory_mb']} MB, {result['iterations']} iterations, d_m = "
             f"{prediction['model_mb']:.3f} MB"]
    if "bandwidth_mbps" in prediction:
        lines.append(f"B_p = {prediction['bandwidth_mbps']:.1f} MB/s, {prediction['source']}")
    if prediction.get("nic_mbit") is not None:
        return "\n".join([*lines, *_nic_table(result)])
    lines.append("| k | repeat | load | exchange/it (ms) | predicted, B_fmax=B_p (ms) | "
                 "predicted, B_fmax=∞ (ms) | per shard: median / mean (ms) | per shard: "
                 "pushed / pulled (MB) | compute/it (ms) | final loss |")
    lines.append("|---:|---:|---:|---:|---:|---:|---|---|---:|---:|")
    for row in result["rows"]:
        k = row["shards"]
        per_k = prediction.get("per_k", {}).get(str(k), {})
        shards, traffic = _shard_cells(row)
        lines.append(
            f"| {k} | {row['repeat']} | {row['load_before']:.2f} | "
            f"{_ms(row['exchange_per_iteration_s'])} | "
            f"{_ms(per_k.get('b_fmax_equals_b_p'))} | "
            f"{_ms(per_k.get('b_fmax_unbounded'))} | {shards} | {traffic} | "
            f"{_ms(row['compute_per_iteration_s'])} | {row['final_loss']:.6f} |")
    return "\n".join(lines)


def _nic_table(result: dict[str, Any]) -> list[str]:
    """The rows of a `--nic-mbit` run: each prediction with its relative error."""
    prediction = result["prediction"]
    lines = [
        f"NIC per shard: {prediction['nic_mbit']:g} Mbit/s each way = "
        f"{prediction['nominal_bandwidth_mbps']:.2f} MB/s nominal; B_fmax = ∞ (the "
        "functions' side is not shaped)",
        f"fixed part: λ = {prediction['fixed_latency_s'] * 1e3:.2f} ms, c_msg = "
        f"{prediction['fixed_message_s'] * 1e3:.2f} ms, {prediction['fixed_source']}",
        *([f"(a+): B_p = {prediction['bandwidth_with_fixed_mbps']:.2f} MB/s, fitted from the "
           "shaped k = 1 run(s) with that λ and c_msg"]
          if "bandwidth_with_fixed_mbps" in prediction else []),
        "| k | repeat | link | load | exchange/it (ms) | (a) fitted B_p | (a+) fitted B_p + "
        "fixed | (b) nominal | (b+) nominal + fixed | (c) channel bytes + fixed | per shard: "
        "median / mean (ms) | per shard: pushed / pulled (MB) | compute/it (ms) | final loss |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---|---:|---:|",
    ]

    def cell(row: dict[str, Any], key: str, name: str) -> str:
        value = prediction.get("per_k", {}).get(str(row["shards"]), {}).get(key)
        error = row.get("relative_error", {}).get(name)
        if not row["shaped"] or value is None or error is None:
            return "–"
        return f"{_ms(value)} ({error:+.1%})"

    for row in result["rows"]:
        shards, traffic = _shard_cells(row)
        lines.append(
            f"| {row['shards']} | {row['repeat']} | {row['link']} | {row['load_before']:.2f} | "
            f"{_ms(row['exchange_per_iteration_s'])} | "
            f"{cell(row, 'b_fmax_unbounded', 'fitted')} | "
            f"{cell(row, 'fitted_plus_fixed', 'fitted_plus_fixed')} | "
            f"{cell(row, 'nominal', 'nominal')} | "
            f"{cell(row, 'nominal_plus_fixed', 'nominal_plus_fixed')} | "
            f"{cell(row, 'channel_bytes', 'channel_bytes')} | {shards} | {traffic} | "
            f"{_ms(row['compute_per_iteration_s'])} | {row['final_loss']:.6f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=_shard_counts, default=[1, 2, 3],
                        help="the shard counts k to launch, comma-separated")
    parser.add_argument("--functions", type=_whole(1, MAX_LOCAL_FUNCTIONS), default=2)
    parser.add_argument("--memory-mb", type=_whole(*LAMBDA_MEMORY_MB), default=884)
    parser.add_argument("--iterations", type=_whole(1, 1_000_000), default=200)
    parser.add_argument("--repeats", type=_whole(1, 1_000), default=1)
    parser.add_argument("--seed", type=_whole(0, 2**32 - 1), default=0)
    parser.add_argument("--latency-s", type=_seconds, default=0.0,
                        help="λ to fit B_p with (default 0: all of the exchange is transfer)")
    parser.add_argument("--nic-mbit", type=_positive, default=None,
                        help="give each shard its own emulated NIC of this many Mbit/s each "
                             "way (root only; default: unix-socket shards)")
    parser.add_argument("--unshaped", action=argparse.BooleanOptionalAction, default=True,
                        help="with --nic-mbit, also run each k on unshaped links, to fit λ "
                             "and c_msg")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    try:
        result = run(args.shards, functions=args.functions, memory_mb=args.memory_mb,
                     iterations=args.iterations, repeats=args.repeats, seed=args.seed,
                     latency_s=args.latency_s, nic_mbit=args.nic_mbit, unshaped=args.unshaped)
    except KeyboardInterrupt as stopped:  # the launch's own message offers a resume: no
        signum = int(getattr(stopped, "signum", signal.SIGINT))  # Redis outlives a run here
        print(f"error: stopped by {signal.Signals(signum).name}; every launch, worker and "
              "emulated NIC it started is stopped, and no run can be resumed", file=sys.stderr)
        return 128 + signum
    except (LaunchError, NicError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(json.dumps(result) if args.json else _table(result))
    losses = {row["final_loss"] for row in result["rows"]}
    return 0 if len(losses) == 1 else 1


def _whole(low: int, high: int) -> Callable[[str], int]:
    """An argument type: a whole number from `low` to `high`."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a whole number from {low:,} to {high:,}")
        return value
    return parse


def _shard_counts(text: str) -> list[int]:
    """`--shards`: one or more shard counts, each from 1 to `MAX_SHARDS`, comma-separated."""
    parse = _whole(1, MAX_SHARDS)
    counts = [parse(part.strip()) for part in text.split(",") if part.strip()]
    if not counts:
        raise argparse.ArgumentTypeError(f"{text!r} names no shard count; give e.g. 1,2,3")
    return counts


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds ≥ 0")
    return value


def _positive(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of Mbit/s")
    return value


if __name__ == "__main__":
    sys.exit(main())
