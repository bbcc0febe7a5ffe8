"""Does sharding the parameter server shorten the exchange? Measured against predicted, per k.

Run as ``.venv/bin/python -m benchmarks.ps_exchange [--shards 1,2,3] [--functions 2]
[--memory-mb 884] [--iterations 200] [--repeats 1] [--json]``. It launches the shipped
`digits-mlp` workload (301,066 float32 weights: d_m = 1.2 MB per direction, exchange-bound)
locally, exactly as `lambdadnn launch` does (`run_local`: a redis-server per shard, a worker
process per function in its CPU cgroup), once per shard count k with the same plan and seed,
and reports from each launch report:

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
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from typing import Any

from lambdadnn.launcher.local import run_local
from lambdadnn.launcher.spec import LaunchReport, LaunchSpec

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


def run(shard_counts: list[int], *, functions: int, memory_mb: int, iterations: int,
        repeats: int, seed: int, latency_s: float) -> dict[str, Any]:
    rows = []
    for repeat in range(repeats):
        for shards in shard_counts:
            load = os.getloadavg()[0]
            began = time.monotonic()
            report = run_local(_spec(functions, memory_mb, iterations, shards),
                               workload=WORKLOAD, seed=seed)
            rows.append({"repeat": repeat, "load_before": round(load, 2),
                         "wall_s": round(time.monotonic() - began, 2), **measure(report)})
            print(f"k={shards} repeat {repeat}: exchange "
                  f"{rows[-1]['exchange_per_iteration_s'] * 1e3:.1f} ms/iteration",
                  file=sys.stderr)
    model_mb = _model_mb()
    ones = [r["exchange_per_iteration_s"] for r in rows if r["shards"] == 1]
    prediction: dict[str, Any] = {"model_mb": model_mb, "latency_s": latency_s}
    if ones:
        x1 = sum(ones) / len(ones)
        bandwidth = fit_bandwidth(model_mb, functions, x1, latency_s)
        prediction.update(
            source=("fitted from the k = 1 run(s): no fitted local profile of digits-mlp is "
                    f"stored; λ = {latency_s:g} s and c_msg = 0 assumed"),
            bandwidth_mbps=bandwidth,
            per_k={str(k): {
                "b_fmax_equals_b_p": predicted_exchange_s(model_mb, functions, k, bandwidth,
                                                          bandwidth, latency_s),
                "b_fmax_unbounded": predicted_exchange_s(model_mb, functions, k, bandwidth,
                                                         math.inf, latency_s),
            } for k in shard_counts})
    return {"workload": WORKLOAD, "functions": functions, "memory_mb": memory_mb,
            "iterations": iterations, "seed": seed, "cpus": os.cpu_count(),
            "rows": rows, "prediction": prediction}


def _table(result: dict[str, Any]) -> str:
    prediction = result["prediction"]
    lines = [f"{result['workload']}: {result['functions']} functions × "
             f"{result['memory_mb']} MB, {result['iterations']} iterations, d_m = "
             f"{prediction['model_mb']:.3f} MB"]
    if "bandwidth_mbps" in prediction:
        lines.append(f"B_p = {prediction['bandwidth_mbps']:.1f} MB/s, {prediction['source']}")
    lines.append("| k | repeat | load | exchange/it (ms) | predicted, B_fmax=B_p (ms) | "
                 "predicted, B_fmax=∞ (ms) | per shard: median / mean (ms) | per shard: "
                 "pushed / pulled (MB) | compute/it (ms) | final loss |")
    lines.append("|---:|---:|---:|---:|---:|---:|---|---|---:|---:|")
    for row in result["rows"]:
        k = row["shards"]
        per_k = prediction.get("per_k", {}).get(str(k), {})

        def ms(value: float | None) -> str:
            return "n/a" if value is None else f"{value * 1e3:.1f}"

        shards = ", ".join(f"{ms(m)} / {ms(x)}" for m, x in zip(
            row["shard_exchange_median_s"], row["shard_exchange_per_iteration_s"], strict=True))
        traffic = ", ".join(f"{p:.0f} / {q:.0f}" for p, q in zip(
            row["shard_pushed_mb"], row["shard_pulled_mb"], strict=True))
        lines.append(
            f"| {k} | {row['repeat']} | {row['load_before']:.2f} | "
            f"{ms(row['exchange_per_iteration_s'])} | {ms(per_k.get('b_fmax_equals_b_p'))} | "
            f"{ms(per_k.get('b_fmax_unbounded'))} | {shards} | {traffic} | "
            f"{ms(row['compute_per_iteration_s'])} | {row['final_loss']:.6f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", default="1,2,3", help="the shard counts k to launch")
    parser.add_argument("--functions", type=int, default=2)
    parser.add_argument("--memory-mb", type=int, default=884)
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--latency-s", type=float, default=0.0,
                        help="λ to fit B_p with (default 0: all of the exchange is transfer)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    counts = [int(k) for k in args.shards.split(",") if k.strip()]
    result = run(counts, functions=args.functions, memory_mb=args.memory_mb,
                 iterations=args.iterations, repeats=args.repeats, seed=args.seed,
                 latency_s=args.latency_s)
    print(json.dumps(result) if args.json else _table(result))
    losses = {row["final_loss"] for row in result["rows"]}
    return 0 if len(losses) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
