"""The simulator's names and defaults, in a module that imports nothing.

The CLI builds its options from these at import time; keeping them here lets `lambdadnn --help`
answer without loading numpy, SymPy or Pyomo.
"""

# Planners that see only the belief; `clairvoyant` is told the truth (simulator.strategies).
BASELINE_NAMES = ("naive", "ldnn-alg1", "ldnn-alg1-q", "power-tuning", "sample-search")
# `lambdadnn-adaptive` starts from `lambdadnn`'s plan and re-plans at every check
# (`simulator.adaptive`). `lambdadnn-batch` is no per-job strategy: it plans the waiting jobs
# together over a rolling horizon (`simulator.batch`).
BATCH_NAME = "lambdadnn-batch"
# Run in the independent world only (`--truth-file`): `hindsight`, the best static plan of
# each job in hindsight (`simulator.hindsight`), and two strategies that re-plan as the job
# runs (`simulator.replan`): a Siren-like deep-RL policy and a scale-out autoscaler.
HINDSIGHT_NAME = "hindsight"
WORLD_ONLY_NAMES = ("replan-heuristic", "siren", HINDSIGHT_NAME)
STRATEGY_NAMES = (
    "lambdadnn", "lambdadnn-mean", "lambdadnn-adaptive", BATCH_NAME, *BASELINE_NAMES,
    "clairvoyant", *WORLD_ONLY_NAMES,
)
DEFAULT_GUARANTEE = 0.999  # the planning quantile of every strategy that plans for one
DEFAULT_POOL_SIZE = 50_000  # λDNN's simulation (paper, Sec. 6)
ARRIVALS = ("poisson", "bursty", "diurnal")  # `generate_trace(arrival=...)`
MIXES = ("paper", "heavy")  # `generate_trace(mix=...)`
# What `compare` runs when no strategy is named: everything the engine chosen runs.
MODEL_STRATEGY_NAMES = tuple(name for name in STRATEGY_NAMES if name not in WORLD_ONLY_NAMES)
WORLD_STRATEGY_NAMES = tuple(
    name for name in STRATEGY_NAMES if name not in (BATCH_NAME, "clairvoyant")
)
