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
STRATEGY_NAMES = (
    "lambdadnn", "lambdadnn-mean", "lambdadnn-adaptive", BATCH_NAME, *BASELINE_NAMES,
    "clairvoyant",
)
DEFAULT_GUARANTEE = 0.999  # the planning quantile of every strategy that plans for one
DEFAULT_POOL_SIZE = 50_000  # λDNN's simulation (paper, Sec. 6)
MAX_JOBS = 100_000  # per trace, read or generated: ten times the paper's 10,000-job traces
ARRIVALS = ("poisson", "bursty", "diurnal")  # `generate_trace(arrival=...)`
MIXES = ("paper", "heavy")  # `generate_trace(mix=...)`
