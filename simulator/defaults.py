"""The simulator's names and defaults, in a module that imports nothing.

The CLI builds its options from these at import time; keeping them here lets `lambdadnn --help`
answer without loading numpy, SymPy or Pyomo.
"""

BASELINE_NAMES = ("naive", "ldnn-alg1", "power-tuning", "sample-search")
STRATEGY_NAMES = ("lambdadnn", *BASELINE_NAMES)
DEFAULT_GUARANTEE = 0.999  # lambdadnn's planning quantile in comparisons
DEFAULT_POOL_SIZE = 50_000  # λDNN's simulation (paper, Sec. 6)
MAX_JOBS = 100_000  # per trace, read or generated: ten times the paper's 10,000-job traces
