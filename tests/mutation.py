"""`make mutate`: plant known bugs one at a time in a scratch copy and check the tests catch each.

Each mutant is one exact edit of one source file (the original text must occur exactly once,
so the catalogue cannot rot silently) with the test files that exist for that behaviour. The
run copies the repository's files (`git ls-files`, untracked ones included) to a temporary
folder named `lambdadnn`, checks that `import lambdadnn` resolves there, runs every test
file named on the unmutated copy (each must pass), then, two mutants at a time, copies the
tree again, applies one mutant and runs its selection with `PYTHONPATH` pointing at the copy
and a fresh `XDG_CACHE_HOME` (the compiled model is cached by the model modules' text). The
working tree is never touched. A mutant is killed when a test fails or errors, or when its
tests run past the time limit (reported as such); it survives when they pass.

    .venv/bin/python -m tests.mutation            # all mutants; exit 1 if any survives
    .venv/bin/python -m tests.mutation tie-order limits-ignored   # some of them
    .venv/bin/python -m tests.mutation --list     # the catalogue

Hypothesis runs with a fixed seed (`--seed`), so a run is reproducible.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeVar

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "lambdadnn"
JOBS = 2  # the machine's cores
TIMEOUT_FACTOR = 4  # a mutant's tests may take this many times the baseline's time ...
MIN_TIMEOUT_S = 60.0  # ... and at least this long, before it counts as killed by a timeout
BASELINE_TIMEOUT_S = 900.0  # a hang guard only
PLUGIN = Path(__file__).stem  # this module, loaded into each pytest run (`pytest_configure`)


@dataclass(frozen=True)
class Mutant:
    """One planted bug: `original` (exactly once in `path`) becomes `replacement`."""

    name: str
    path: str
    original: str
    replacement: str
    tests: tuple[str, ...]
    description: str


MODELS = "tests/test_models.py"
SOLVE = "tests/test_solve.py"
SELECTION = "tests/test_selection.py"
BOUNDS = "tests/test_bounds.py"
EXACT = "tests/test_exact_deadline.py"
GUARANTEE = "tests/test_guarantee.py"
COMPARE = "tests/test_compare.py"
ENGINE = "tests/test_engine.py"
VCPU = "tests/test_vcpu_limit.py"
PREDICTION = "tests/test_prediction.py"
TIMINGS = "tests/test_timings.py"
FIT = "tests/test_fit.py"
FIT_IDENTIFIED = "tests/test_fit_identified.py"
FIT_GUARANTEE = "tests/test_fit_guarantee.py"
POOL = "tests/test_pool.py"
BASELINES = "tests/test_baselines.py"
TUNERS = "tests/test_tuners.py"
FAILURES = "tests/test_failure_planning.py"
CONTROLLER = "tests/test_controller.py"
ADAPTIVE_SIM = "tests/test_adaptive_simulator.py"
ADAPTIVE_LAUNCH = "tests/test_adaptive_launch.py"
MANY = "tests/test_solve_many.py"
MANY_EXACT = "tests/test_solve_many_exact.py"
HINDSIGHT = "tests/test_hindsight.py"
WORLD_INDEPENDENT = "tests/test_world_independent.py"
WORLD_ENGINE = "tests/test_world_engine.py"
OPTIONS = "tests/test_options.py"
PS_ORACLE = "tests/test_ps_oracle.py"
SHARDS_SIM = "tests/test_simulator_shards.py"

EQUATIONS = "models/equations.py"
NOISE = "models/noise.py"
CANDIDATES = "solver/candidates.py"
ENGINE_PY = "simulator/engine.py"

MUTANTS: tuple[Mutant, ...] = (
    # --- the model (models/equations.py, models/performance.py) ------------------------------
    Mutant("restart-count", EQUATIONS,
           "restarts = sp.Max(0, sp.ceiling(t_train / L) - 1)",
           "restarts = sp.Max(0, sp.ceiling(t_train / L))",
           (MODELS,), "one restart too many: ceil(T_train/L) instead of ceil(T_train/L) - 1"),
    Mutant("latency-once", EQUATIONS,
           "t_latency = 2 * lam",
           "t_latency = lam",
           ("tests/test_model_v2.py",), "model v2: the latency paid once per iteration, not twice"),
    Mutant("startup-once", EQUATIONS,
           "t_startup = (restarts + 1) * startup",
           "t_startup = startup",
           ("tests/test_model_v2.py",), "model v2: the start-up paid once, not every round"),
    Mutant("ps-bandwidth", EQUATIONS,
           "ps_bandwidth = sp.Min(B_fmax, B_p / n)",
           "ps_bandwidth = sp.Min(B_fmax, B_p)",
           (MODELS,), "the PS link is not shared: min(B_f^max, B_p) instead of B_p/n"),
    Mutant("load-per-function", EQUATIONS,
           "t_load = d_t / (n * storage_bandwidth)",
           "t_load = d_t / storage_bandwidth",
           (MODELS, ENGINE), "each function loads the whole dataset: t_load not divided by n"),
    Mutant("request-pricing", EQUATIONS,
           "cost_requests = n * (restarts + 1) * p_req",
           "cost_requests = (restarts + 1) * p_req",
           (MODELS,), "one request per round instead of one per function and round"),
    Mutant("ps-pricing", EQUATIONS,
           "cost_ps = time * p_ps / 3600",
           "cost_ps = time * p_ps / 60",
           (MODELS,), "the PS price per hour charged per minute"),
    Mutant("saturation-ignored", EQUATIONS,
           "rate = alpha1 * sp.Min(m, m_sat) + beta1",
           "rate = alpha1 * m + beta1",
           (MODELS, SOLVE), "the rate keeps growing past `saturates_at_mb`"),
    Mutant("storage-cap-ignored", EQUATIONS,
           "storage_bandwidth = sp.Min(alpha2 * m + beta2, B_s)",
           "storage_bandwidth = alpha2 * m + beta2",
           (MODELS, SOLVE), "the storage bandwidth is not capped at `max_mbps`"),
    Mutant("fixed-global-batch", EQUATIONS,
           "local_batch = sp.Piecewise((b_lf, fixed_local), (b_gmax / n, True))",
           "local_batch = sp.Piecewise((b_lf, fixed_local), (b_lf, True))",
           (MODELS,), "past b_g^max the local batch stays b_lf instead of b_g^max/n"),
    Mutant("cold-starts-per-round", EQUATIONS,
           "time = t_train + t_restart + (restarts + 1) * (startup + c_e)",
           "time = t_train + t_restart + (restarts + 1) * startup + c_e",
           (GUARANTEE, COMPARE), "the expected time counts one cold start, not one per round"),
    Mutant("cold-starts-in-quantile", EQUATIONS,
           "deadline_time = t_train_quantile + restarts_quantile * o + (restarts_quantile + 1) "
           "* (startup + c_q)",
           "deadline_time = t_train_quantile + restarts_quantile * o + (restarts_quantile + 1) "
           "* startup + c_q",
           (GUARANTEE, COMPARE), "the guaranteed time counts one cold start, not one per round"),
    Mutant("quantile-spread-halved", EQUATIONS,
           "t_train_quantile = t_train + z * sp.sqrt(spread_variance)",
           "t_train_quantile = t_train + z * sp.sqrt(spread_variance) / 2",
           (GUARANTEE, COMPARE), "the guarantee plans for half the training time's spread"),
    Mutant("validity-slack", "models/performance.py",
           "BATCH_SLACK = 1e-13",
           "BATCH_SLACK = 0.0",
           (SOLVE,), "no rounding slack: b_l = b_g^max·(1/n) = 1 − 1 ulp is called invalid"),
    Mutant("guarantee-ignored", "models/performance.py",
           'return "time" if noise is None else "deadline_time"',
           'return "time"',
           (GUARANTEE,), "under a guarantee the deadline is checked against the mean time"),
    # --- the noise model (models/noise.py) ----------------------------------------------------
    Mutant("straggler-factor-one", NOISE,
           "self.straggler_mean[index], self.straggler_variance[index],",
           "np.ones(index.shape), self.straggler_variance[index],",
           (GUARANTEE, COMPARE), "planning with s_c = 1: the slowest worker is an average one"),
    Mutant("straggler-variance-dropped", NOISE,
           "self.straggler_mean[index], self.straggler_variance[index],",
           "self.straggler_mean[index], np.zeros(index.shape),",
           (GUARANTEE, COMPARE), "planning without the straggler factor's variance v_c"),
    Mutant("straggler-max-of-one", NOISE,
           "weights = flat * np.power(cdf, flat - 1) * density_dz",
           "weights = np.power(cdf, 0 * flat) * density_dz",
           (GUARANTEE,), "E[max of n workers] computed as one worker's moments"),
    Mutant("cold-start-slowest", NOISE,
           "tail = -np.expm1(math.log(guarantee) / functions)",
           "tail = -np.expm1(math.log(guarantee)) + 0 * functions",
           (GUARANTEE, COMPARE), "the guarantee plans for one cold start's quantile, not the "
           "slowest of n's"),
    Mutant("factor-mean-not-one", NOISE,
           "factors: Array = rng.lognormal(-sigma * sigma / 2, sigma, size)",
           "factors: Array = rng.lognormal(0.0, sigma, size)",
           (GUARANTEE, ENGINE), "noise factors drawn with median 1 instead of mean 1"),
    # --- the solver (solver/) ----------------------------------------------------------------
    Mutant("tie-order", CANDIDATES,
           "order = np.lexsort((memory[tied], functions[tied], time[tied]))",
           "order = np.lexsort((functions[tied], memory[tied], time[tied]))",
           (SOLVE, SELECTION), "equal cost and time go to less memory first, then fewer n"),
    Mutant("tie-tolerance", CANDIDATES,
           "tied = np.flatnonzero(cost <= cost.min() * (1 + TIE_RTOL))",
           "tied = np.flatnonzero(cost <= cost.min())",
           (SOLVE, SELECTION), "no 1e-12 tie tolerance: a 1-ulp cheaper plan beats a faster one"),
    Mutant("fastest-plan", CANDIDATES,
           "return _choices(int(front[0]), rivals, time, fastest)",
           "return _choices(int(front[-1]), rivals, time, fastest)",
           (SOLVE, SELECTION), "with no feasible plan, the answer is the slowest Pareto plan, "
           "not the fastest"),
    Mutant("pruning-too-aggressive", CANDIDATES,
           "(floor <= incumbent * (1 + PRUNE_RTOL))",
           "(floor * 1.01 <= incumbent * (1 + PRUNE_RTOL))",
           (SOLVE,), "the cost lower bound is inflated by 1%: optimal pieces are pruned"),
    Mutant("deadline-strict", CANDIDATES,
           "feasible = (figures[checked] <= deadline_s) & real",
           "feasible = (figures[checked] < deadline_s) & real",
           (EXACT,), "a plan whose time equals the deadline is called infeasible"),
    Mutant("limits-ignored", "solver/instance.py",
           "return concurrency if cap is None else min(cap, concurrency)",
           "return concurrency",
           (SOLVE,), "`limits.max_functions` is ignored"),
    Mutant("box-limit-ignored", "models/bounds.py",
           "n_valid = min(max_functions, math.floor(batch_limit))",
           "n_valid = math.floor(batch_limit)",
           (BOUNDS, SOLVE), "the box of n ignores the concurrency limit"),
    Mutant("box-deadline-strict", "models/bounds.py",
           "meets = envelope <= deadline_s",
           "meets = envelope < deadline_s",
           (EXACT, BOUNDS), "the box drops an n whose fastest time equals the deadline"),
    Mutant("selection-deadline-strict", "solver/selection.py",
           "within = time <= bound",
           "within = time < bound",
           (SELECTION, EXACT), "HiGHS's answer is judged against a strict deadline"),
    # --- the simulator (simulator/engine.py) -------------------------------------------------
    Mutant("engine-barrier", ENGINE_PY,
           "alone: Array = finish.max(axis=1) + volume / flow_cap",
           "alone: Array = finish.mean(axis=1) + volume / flow_cap",
           (ENGINE,), "the barrier waits for the average worker, not the slowest"),
    Mutant("engine-pull-bandwidth", ENGINE_PY,
           "self.pull_s_per_mb = 1 / min(self.flow_cap, self.link / functions)",
           "self.pull_s_per_mb = 1 / self.flow_cap",
           (ENGINE,), "the pulls do not share the PS link"),
    Mutant("engine-load-time", ENGINE_PY,
           "setup = self.load_time()",
           "setup = 0.0",
           (ENGINE,), "the first round does not load the training data"),
    Mutant("engine-restarts", ENGINE_PY,
           "self.usable_s = platform.timeout_s - platform.timeout_margin_s",
           "self.usable_s = platform.timeout_s",
           (ENGINE,), "an invocation works until the timeout, ignoring the margin"),
    Mutant("engine-cold-start", ENGINE_PY,
           "self.noise.cold_start_sigma, count).max())",
           "self.noise.cold_start_sigma, count).min())",
           (ENGINE, COMPARE), "a round waits for the fastest cold start, not the slowest"),
    Mutant("engine-latency", ENGINE_PY,
           "+ 2 * self.latency_s * scales",
           "+ self.latency_s * scales",
           (ENGINE,), "model v2 in the engine: one latency per iteration, not two"),
    Mutant("engine-startup", ENGINE_PY,
           "time_s += seg.end_s + self.startup_s",
           "time_s += seg.end_s",
           (ENGINE,), "model v2 in the engine: no start-up per round"),
    Mutant("engine-request-pricing", ENGINE_PY,
           "requests=invocations,",
           "requests=self.n,",
           (ENGINE,), "requests billed once per function, not per invocation"),
    # --- truth and belief, the strategies, the pool (simulator/, issue 10) -----------------
    Mutant("truth-into-belief", "simulator/pool.py",
           "plan = plan_for(job.instance, job_rng(seed, index, _PLAN_STREAM), noise, measure)",
           "plan = plan_for(true_instance, job_rng(seed, index, _PLAN_STREAM), noise, measure)",
           (POOL, COMPARE), "the planners see the truth instead of the belief"),
    Mutant("truth-ignored", "simulator/pool.py",
           "true_instance = truth.instance(job.instance)",
           "true_instance = job.instance",
           (POOL, COMPARE), "the engine runs the belief: the truth is never used"),
    Mutant("clairvoyant-blind", "simulator/strategies.py",
           'truth=(truth or Truth()) if name == "clairvoyant" else None,',
           "truth=None,",
           (BASELINES, COMPARE), "clairvoyant plans with the belief like everyone else"),
    Mutant("pool-overbooked", "solver/capacity.py",
           "full = np.flatnonzero(self.used[i:] + functions > self.size) + i",
           "full = np.flatnonzero(self.used[i:] > self.size) + i",
           (POOL,), "a stage starts where its functions do not fit beside the others"),
    Mutant("trials-take-no-time", "simulator/pool.py",
           "                start += seconds\n",
           "",
           (POOL,), "a job starts as its trials start: trials cost no time"),
    Mutant("tuner-mean-known", "simulator/tuners.py",
           "k + k * k / samples\n",
           "k\n",
           (TUNERS,), "the tuners forget the error of estimating the mean from N samples"),
    Mutant("alg1-q-mean-test", "simulator/ldnn_alg1.py",
           "figures = evaluate(params, functions, memory, noise)",
           "figures = evaluate(params, functions, memory)",
           (BASELINES,), "ldnn-alg1-q tests the mean time, not lambdadnn's quantile"),
    Mutant("crash-no-lost-work", EQUATIONS,
           "crash_mean_quantile = f_q + o + k_c / 2 * t_iteration",
           "crash_mean_quantile = f_q + o",
           (FAILURES,), "the guaranteed plan forgets the work a crash loses"),
    # --- the vCPU limit, the run prediction (solver/) --------------------------------------
    Mutant("vcpu-row-cap-ignored", "models/bounds.py",
           "row_hi = np.minimum(row_hi, cap)",
           "row_hi = np.maximum(row_hi, cap)",
           (VCPU,), "the bounds let every row n reach the grid's top, past the vCPU limit"),
    Mutant("vcpu-budget-off-by-one", "solver/instance.py",
           "return math.floor(Fraction(self.max_vcpu) * MB_PER_VCPU)",
           "return math.floor(Fraction(self.max_vcpu) * MB_PER_VCPU) - 1",
           (VCPU,), "a plan exactly at max_vcpu is refused"),
    Mutant("vcpu-violation-missed", "solver/pipeline.py",
           "if budget is not None and functions * memory_mb > budget:",
           "if budget is not None and functions * memory_mb > budget + 1769:",
           (VCPU,), "evaluate lets a plan one vCPU over the limit pass as feasible"),
    Mutant("prediction-platform-limit", "solver/prediction.py",
           '"L": timeout - margin,',
           '"L": platform.timeout_s - platform.timeout_margin_s,',
           (PREDICTION,), "a run's prediction ignores the launch's shorter invocation limit"),
    # --- what a launch measures, and the fit (launcher/) ------------------------------------
    Mutant("timings-period-slowest", "launcher/timings.py",
           "period = np.array([min(c + x for c, x in ranks)",
           "period = np.array([max(c + x for c, x in ranks)",
           (TIMINGS,), "an iteration lasts its slowest rank's compute + exchange, which "
                       "counts the first round's start-up skew twice"),
    Mutant("timings-startup-first-rank", "launcher/timings.py",
           "latest[round_] = max(latest.get(round_, -np.inf), float(moment))",
           "latest[round_] = min(latest.get(round_, np.inf), float(moment))",
           (TIMINGS,), "a round starts when its first rank starts, not its last"),
    Mutant("fit-unscaled-covariance", "launcher/fit.py",
           "scale = np.where(norms > 0, 1 / np.where(norms > 0, norms, 1.0), 0.0)",
           "scale = np.ones_like(norms)",
           (FIT,), "standard errors from the unscaled JᵀJ: the small directions are dropped"),
    Mutant("fit-absolute-residuals", "launcher/fit.py",
           "return np.asarray((predicted - tau) / tau, dtype=np.float64)",
           "return np.asarray(predicted - tau, dtype=np.float64)",
           (FIT,), "absolute residuals: the slow trials at small memory dominate the fit"),
    Mutant("fit-huber-scale-fixed", "launcher/fit.py",
           "return max(_HUBER_SCALE, _HUBER_TUNING * _MAD_TO_SD * deviation)",
           "return _HUBER_SCALE",
           (FIT_IDENTIFIED,),
           "Huber's scale fixed at 5%: on a noisy machine too few trials inside it, no error"),
    # --- adaptive execution (solver/adaptive.py, its simulator and launcher) -----------------
    Mutant("adaptive-geometric-mean", "solver/adaptive.py",
           "mean_ratio = float(ratios.mean())",
           "mean_ratio = float(np.exp(np.log(ratios).mean()))",
           (CONTROLLER,), "the factor is the legs' geometric mean ratio: heavy tails vanish"),
    Mutant("adaptive-compute-unobserved", "solver/adaptive.py",
           "found = mean_observation(worker_means / t_comp, self._leg_sd)",
           "found = mean_observation(0 * worker_means / t_comp, self._leg_sd)",
           (CONTROLLER,), "the controller never learns the compute speed"),
    Mutant("adaptive-restart-free", "solver/adaptive.py",
           "restart_s = self.instance.platform.restart_overhead_s * speeds.setup if restart "
           "else 0.0",
           "restart_s = 0.0",
           (CONTROLLER,), "a new plan's restart from the checkpoint is taken to cost nothing"),
    Mutant("adaptive-no-hysteresis", "solver/adaptive.py",
           "MIN_SAVING * carry.cost_usd, MIN_RUN_SAVING * self.decisions[0].cost_usd",
           "0.0, 0.0",
           (CONTROLLER,), "any cheaper plan is taken, however little it saves"),
    Mutant("adaptive-batch-follows-n", "solver/adaptive.py",
           "local_batch=batch, max_global_batch=batch,",
           "local_batch=max(1, batch // 8), max_global_batch=batch,",
           (CONTROLLER, ADAPTIVE_SIM), "the rest of the run keeps the local batch, not the "
                                      "global one"),
    Mutant("adaptive-one-factor-for-all-memory", "solver/adaptive.py",
           "capped = np.minimum(memory_mb, self.saturation_mb)",
           "capped = np.full(self.saturation_mb.size, float(memory_mb))",
           (CONTROLLER,), "the rate's factor learned at one memory is applied at every memory "
                          "(no saturation)"),
    Mutant("adaptive-startup-unlearned", "solver/adaptive.py",
           "setup=belief.setup.observe(\n                    np.array([ratio]))",
           "setup=belief.setup.observe(\n                    np.array([1.0]))",
           (CONTROLLER,), "a round's measured start-up never moves the belief"),
    Mutant("fit-uncertainty-ignored", "solver/pipeline.py",
           "loaded, coverage = corner(given, planning)",
           "loaded, coverage = corner(given, None)",
           (FIT_GUARANTEE,), "`solve` plans a profiled instance as if its fitted values "
                             "were exact"),
    Mutant("fit-run-spread-ignored", "solver/fit_uncertainty.py",
           "factor = math.exp(z * spread)", "factor = 1.0",
           (FIT_GUARANTEE,), "a guaranteed plan covers the parameters' errors but not "
                             "the trials' spread about the fit"),
    Mutant("adaptive-leg-exact", "solver/adaptive.py",
           "self._leg_sd = max(MODEL_SD, run_spread(self.instance.fit))", "self._leg_sd = MODEL_SD",
           (CONTROLLER,), "a leg with little scatter is taken as exact, whatever the "
                          "profile's trials say of this machine's spread"),
    Mutant("adaptive-mean-for-quantile", "solver/adaptive.py",
           "time_s = mean + self._z * (sd if restart else noise_sd)",
           "time_s = mean",
           (CONTROLLER,), "a plan is judged at the posterior mean where the guarantee's "
                          "quantile is needed"),
    Mutant("adaptive-no-crash-check", "simulator/adaptive.py",
           "            check(base_iteration + step.resume_from, step.at_s)\n",
           "",
           (ADAPTIVE_SIM,), "a crash is not a check: the lost time is seen only later"),
    Mutant("adaptive-no-check-checkpoint", "simulator/adaptive.py",
           "            plan.save(done - base_iteration)\n",
           "",
           (ADAPTIVE_SIM,), "a check that keeps the plan does not checkpoint it"),
    Mutant("launch-halt-ignored", "launcher/channel.py",
           'pipe.exists(stop_key, self._key("halt"))',
           "pipe.exists(stop_key)",
           (ADAPTIVE_LAUNCH,), "the launcher's halt never stops the group"),
    Mutant("launch-slice-unweighted", "launcher/worker.py",
           "channel.exchange(rank, iteration, gradient * weight, loss, stop=stop)",
           "channel.exchange(rank, iteration, gradient, loss, stop=stop)",
           (ADAPTIVE_LAUNCH,), "unequal slices of the global batch averaged as if equal"),
    # --- many jobs under one limit (solver/options.py, columns.py, timetable.py, many.py) ----
    Mutant("milp-capacity", "solver/master.py",
           "upper = self.free[rows]\n",
           "upper = self.free[rows] + 1\n",
           (MANY, MANY_EXACT), "the master's capacity rows allow one function more than the "
           "limit"),
    Mutant("milp-half-run", "solver/columns.py",
           "stop = np.searchsorted(self.times, start_s + time_s, side=\"left\")",
           "stop = np.searchsorted(self.times, start_s + time_s / 2, side=\"left\")",
           (MANY, MANY_EXACT), "a run is counted at the moments of its first half only"),
    Mutant("pricing-ignores-duals", "solver/pricing.py",
           "prefix = np.concatenate(([0.0], np.cumsum(prices)))",
           "prefix = np.concatenate(([0.0], np.cumsum(prices * 0)))",
           (MANY_EXACT,), "the pricing prices columns at their cost alone, not the capacity "
           "rows' duals"),
    Mutant("bound-clamped", "solver/many.py",
           "lower_bound_usd=answer.bound_usd,",
           "lower_bound_usd=min(answer.bound_usd, objective),",
           (MANY_EXACT,), "the bound is clamped to the answer's objective"),
    Mutant("column-key-without-n", "solver/columns.py",
           "return list(zip(self.task.tolist(), self.functions.tolist(), self.memory_mb.tolist(),",
           "return list(zip(self.task.tolist(), self.task.tolist(), self.memory_mb.tolist(),",
           (MANY_EXACT,), "a column is known by its job, memory and start, not its functions: "
           "plans differing in n are merged"),
    Mutant("milp-penalty-small", "solver/timetable.py",
           "return np.where(has, dearest + spread, 0.0)",
           "return np.where(has, dearest, 0.0)",
           (MANY, MANY_EXACT), "a missed deadline is priced at the job's dearest option only"),
    Mutant("front-incumbent-falls", "solver/candidates.py",
           "if feasible.any() and ceiling is None:",
           "if feasible.any():",
           (OPTIONS,), "the front's search prunes by the cheapest plan: the front loses points"),
    Mutant("many-recheck-capacity", "solver/many.py",
           "    if top > limit:\n        raise SolverError(\n            f\"re-check failed",
           "    if False:\n        raise SolverError(\n            f\"re-check failed",
           (MANY,), "the exact capacity sweep never fails a schedule"),
    Mutant("many-recheck-deadline", "solver/many.py",
           "    if entry.start_s < entry.submit_s or entry.met != bool(",
           "    if entry.start_s < entry.submit_s and entry.met != bool(",
           (MANY,), "a job marked met is not re-tested against its deadline"),
    Mutant("shards-ignored-in-cost", "models/equations.py",
           "cost_ps = time * k_ps * p_ps / 3600",
           "cost_ps = time * p_ps / 3600",
           (PS_ORACLE,), "the PS is paid for one machine however many shards run"),
    Mutant("shard-nic-not-shared", "models/equations.py",
           "ps_bandwidth = sp.Min(B_fmax, k_ps * B_p / n)",
           "ps_bandwidth = sp.Min(B_fmax, k_ps * B_p)",
           (PS_ORACLE, BOUNDS), "each shard's NIC is not shared by the n functions"),
    Mutant("dominance-without-k", "solver/pipeline.py",
           "bandwidth = k * np.array([server.bandwidth_mbps for server in servers])",
           "bandwidth = np.array([server.bandwidth_mbps for server in servers])",
           (PS_ORACLE, SOLVE), "servers are compared by one shard's bandwidth: more shards "
           "look dominated by fewer"),
    Mutant("ideal-server-slowest", "solver/pipeline.py",
           "bandwidth_mbps=max(server.shards * server.bandwidth_mbps for server in servers),",
           "bandwidth_mbps=min(server.shards * server.bandwidth_mbps for server in servers),",
           (PS_ORACLE,), "the ideal server bounding every server's rows is the slowest: its box "
           "cuts rows the faster servers meet the deadline in"),
    Mutant("ideal-piece-floor-at-top", "solver/pipeline.py",
           "memory[piece_lo[of_row]], star[\"time\"][of_row], star[\"restarts\"][of_row])",
           "memory[piece_hi[of_row]], star[\"time\"][of_row], star[\"restarts\"][of_row])",
           (PS_ORACLE,), "the ideal server's piece floor prices a piece's plans at its largest "
           "memory: it drops pieces whose smaller sizes are cheaper"),
    Mutant("ideal-pieces-empty-kept", "solver/pipeline.py",
           "keep &= (piece_hi >= piece_lo)[of_row]",
           "keep &= (piece_hi >= piece_lo - 1)[of_row]",
           (PS_ORACLE,), "a row narrower than PIECES passes its empty pieces to the search, "
           "whose tops lie below the row's smallest valid memory"),
    Mutant("least-threshold-too-low", "solver/pipeline.py",
           "np.partition(sample, count - 1)[count - 1]",
           "np.partition(sample, count // 2)[count // 2]",
           (PS_ORACLE,), "the seed rows' threshold is taken below the count-th least of the "
           "sample, so rows among the least are left out"),
    Mutant("kind-fronts-without-functions", "solver/candidates.py",
           "bucket = np.searchsorted(self.counts, functions, side=\"right\") - 1",
           "bucket = np.full(np.shape(functions), len(self.counts) - 1)",
           (OPTIONS,), "a server's front drops plans another server's beat in time and cost "
           "though they hold fewer functions (a schedule may need them)"),
    Mutant("front-pruned-by-beaten-plans", "solver/candidates.py",
           "~(beaten.least(found_n[-1], found_t[-1]) < found_c[-1]))",
           "np.ones(len(found_t[-1]), dtype=np.bool_))",
           (OPTIONS,), "a server's front search drops pieces that only plans another "
           "server beats dominate (the front of the unbeaten plans loses points)"),
    Mutant("crossings-without-k", "models/bounds.py",
           'in_comm = (params["B_fmax"] <= params["k_ps"] * params["B_p"] / n) == function_bound',
           'in_comm = (params["B_fmax"] <= params["B_p"] / n) == function_bound',
           (BOUNDS,), "the closed-form n bounds place the PS-bound regime without the shards"),
    Mutant("sim-shard-nic-not-shared", "simulator/engine.py",
           "self.pull_s_per_mb = 1 / min(self.flow_cap, self.shards * self.link / functions)",
           "self.pull_s_per_mb = 1 / min(self.flow_cap, self.shards * self.link)",
           (SHARDS_SIM,), "the simulator gives each shard's flows the whole NIC"),
    Mutant("hindsight-without-crn", "simulator/hindsight.py",
           "runner = WorldRunner(world, seed)",
           "runner = WorldRunner(world, seed + 1)",
           (HINDSIGHT,), "hindsight meets other luck than the strategies it judges: no common "
           "random numbers"),
    Mutant("world-reads-the-model", "simulator/world/engine.py",
           "import numpy as np\n",
           "import numpy as np\n\nfrom lambdadnn.models import performance  # noqa: F401\n",
           (WORLD_INDEPENDENT,), "the independent engine imports the planner's model"),
    Mutant("world-measurement-noise-ignored", "simulator/world/engine.py",
           "if record and measurement is not None and measurement.cv > 0:",
           "if False:",
           (WORLD_ENGINE,), "controllers see the engine's exact timings, not measured ones"),
)

# Mutants the issue asks for whose code does not exist yet.
NOT_YET_APPLICABLE: tuple[tuple[str, str], ...] = ()

Verdict = Literal["passed", "failed", "timeout", "error"]


@dataclass(frozen=True)
class Outcome:
    """How one pytest run ended: `failed` names the first failing test."""

    verdict: Verdict
    seconds: float
    first_failure: str
    output: str


_FAILURE = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.MULTILINE)
_running: set[subprocess.Popen[str]] = set()
_running_lock = threading.Lock()


def check_catalogue(mutants: Iterable[Mutant], root: Path) -> list[str]:
    """Every problem with the catalogue against the sources under `root` (none: an empty list)."""
    problems = []
    seen: set[str] = set()
    for mutant in mutants:
        if mutant.name in seen:
            problems.append(f"{mutant.name}: the name is used twice")
        seen.add(mutant.name)
        source = root / mutant.path
        if not source.is_file():
            problems.append(f"{mutant.name}: {mutant.path} does not exist")
            continue
        count = source.read_text(encoding="utf-8").count(mutant.original)
        if count != 1:
            problems.append(
                f"{mutant.name}: the original text occurs {count} times in {mutant.path} "
                f"(exactly once expected): {mutant.original!r}"
            )
        if mutant.replacement == mutant.original:
            problems.append(f"{mutant.name}: the replacement is the original text")
        problems.extend(
            f"{mutant.name}: test file {test} does not exist"
            for test in mutant.tests if not (root / test).is_file()
        )
    return problems


def copy_sources(root: Path, tree: Path, revision: str | None) -> None:
    """The repository's files into `tree`: as committed at `revision`, or else the working
    tree's as git sees them (tracked, and untracked but not ignored)."""
    tree.mkdir(parents=True)
    if revision is not None:
        archive = subprocess.run(["git", "archive", "--format=tar", revision], cwd=root,
                                 capture_output=True, check=False)
        if archive.returncode != 0:
            raise SystemExit(f"error: `git archive {revision}` failed: "
                             f"{archive.stderr.decode(errors='replace').strip()}")
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(tree, filter="data")
        return
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root, capture_output=True, text=True, check=True,
    ).stdout
    for name in sorted({name for name in listed.split("\0") if name}):
        if (root / name).exists():  # a deleted tracked file is still listed
            target = tree / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / name, target, follow_symlinks=False)


def environment(tree: Path, shared: Path) -> dict[str, str]:
    """`import lambdadnn` resolves to `tree` (PYTHONPATH wins over the editable install's
    finder, which is appended to sys.meta_path), with a cache of its own."""
    cache = tree.parent / "cache"
    cache.mkdir(exist_ok=True)
    env = dict(os.environ)
    # This folder last, so that pytest finds this module as the plugin `PLUGIN` (the copy
    # may be of a revision without it); `tests` itself still resolves to the copy.
    path = os.pathsep.join((str(tree.parent), str(Path(__file__).resolve().parent)))
    env.update(PYTHONPATH=path, XDG_CACHE_HOME=str(cache),
               MPLCONFIGDIR=str(shared / "matplotlib"))
    return env


def resolved_package(tree: Path, shared: Path) -> Path:
    """Where `lambdadnn.models.equations` is imported from, with the mutants' environment."""
    env = environment(tree, shared)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    shown = subprocess.run(
        [sys.executable, "-c", "import lambdadnn.models.equations as m; print(m.__file__)"],
        cwd=tree.parent, env=env, capture_output=True, text=True, timeout=120,
    )
    if shown.returncode != 0:
        raise SystemExit(f"error: importing lambdadnn from the scratch copy failed:\n"
                         f"{shown.stderr.strip()}")
    return Path(shown.stdout.strip())


def run_tests(tree: Path, shared: Path, tests: tuple[str, ...], timeout: float,
              seed: int) -> Outcome:
    """pytest on `tests` inside `tree`; the process group is killed at `timeout`."""
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-rfE",
               "-p", PLUGIN, f"--hypothesis-seed={seed}", *tests]
    started = time.monotonic()
    process = subprocess.Popen(
        command, cwd=tree, env=environment(tree, shared), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True, start_new_session=True,
    )
    with _running_lock:
        _running.add(process)
    try:
        output, _ = process.communicate(timeout=timeout)
        ended: dict[int, Verdict] = {0: "passed", 1: "failed", 2: "failed"}
        verdict = ended.get(process.returncode, "error")
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        verdict = "timeout"
    finally:
        with _running_lock:
            _running.discard(process)
    found = _FAILURE.search(output)
    if verdict == "failed" and found is None:  # exit 1 or 2 without a failing test: a crash
        verdict = "error"
    return Outcome(verdict, time.monotonic() - started, found.group(1) if found else "", output)


def pytest_configure() -> None:
    """Loaded into each run's pytest (`-p mutation`), after conftest.py chose the
    hypothesis profile: the same settings without shrinking, which only shortens a failing
    example and can take a minute, while the run needs only that a test fails."""
    from hypothesis import Phase, settings

    phases = tuple(phase for phase in settings().phases if phase is not Phase.shrink)
    settings.register_profile("mutate", phases=phases)  # the loaded profile is the parent
    settings.load_profile("mutate")


def mutate(tree: Path, mutant: Mutant) -> None:
    """Plant `mutant` in a copy that `check_catalogue` passed (its text occurs once)."""
    source = tree / mutant.path
    text = source.read_text(encoding="utf-8")
    source.write_text(text.replace(mutant.original, mutant.replacement), encoding="utf-8")


def tail(output: str, lines: int = 25) -> str:
    return "\n".join("    " + line for line in output.rstrip().splitlines()[-lines:])


T = TypeVar("T")
R = TypeVar("R")


def in_parallel(function: Callable[[T], R], items: Iterable[T], jobs: int) -> Iterator[R]:
    """`function` over `items`, `jobs` at a time, results in order; Ctrl-C kills the tests."""
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        try:
            yield from pool.map(function, items)
        except KeyboardInterrupt:
            pool.shutdown(wait=False, cancel_futures=True)
            with _running_lock:
                for process in _running:
                    os.killpg(process.pid, signal.SIGKILL)
            raise


@contextmanager
def scratch(base: Path, label: str, pristine: Path) -> Iterator[Path]:
    """A fresh copy of the pristine tree at `<base>/<label>/lambdadnn`, removed afterwards."""
    parent = base / label
    tree = parent / PACKAGE
    shutil.copytree(pristine, tree, symlinks=True)
    try:
        yield tree
    finally:
        shutil.rmtree(parent, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.mutation", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help="mutants to run (default: all)")
    parser.add_argument("--list", action="store_true", help="print the catalogue and exit")
    parser.add_argument("--jobs", type=int, default=JOBS, help=f"parallel runs ({JOBS})")
    parser.add_argument("--seed", type=int, default=0, help="hypothesis seed (0)")
    parser.add_argument("--rev", help="mutate the sources committed at this git revision "
                        "(default: the working tree's files)")
    args = parser.parse_args(argv)
    known = {mutant.name: mutant for mutant in MUTANTS}
    unknown = [name for name in args.names if name not in known]
    if unknown:
        parser.error(f"unknown mutant(s) {', '.join(unknown)}; see --list")
    chosen = [known[name] for name in args.names] if args.names else list(MUTANTS)
    if args.list:
        for mutant in MUTANTS:
            print(f"{mutant.name:28} {mutant.path:24} {mutant.description}")
            print(f"{'':28} tests: {' '.join(mutant.tests)}")
        for name, why in NOT_YET_APPLICABLE:
            print(f"{name:28} {'-':24} not yet applicable: {why}")
        return 0
    started = time.monotonic()
    jobs = max(1, args.jobs)
    with tempfile.TemporaryDirectory(prefix="lambdadnn-mutate-") as temporary:
        base = Path(temporary)
        shared = base / "shared"
        (shared / "matplotlib").mkdir(parents=True)
        pristine = base / "pristine" / PACKAGE
        copy_sources(ROOT, pristine, args.rev)
        problems = check_catalogue(chosen, pristine)
        if problems:
            print("error: the mutant catalogue does not match the sources (fix "
                  "tests/mutation.py):", *problems, sep="\n  ", file=sys.stderr)
            return 2
        print(f"mutation run: {len(chosen)} mutants of "
              f"{'the working tree' if args.rev is None else args.rev}, {jobs} at a time, "
              f"hypothesis seed {args.seed}")
        resolved = resolved_package(pristine, shared)
        print(f"lambdadnn resolves to {resolved.parent.parent} (the scratch copy)")
        if not resolved.is_relative_to(pristine):
            print(f"error: lambdadnn must resolve inside {pristine}", file=sys.stderr)
            return 2

        # Each test file once, unmutated: tests do not depend on which files run with them
        # (and with a fixed seed hypothesis draws the same examples whatever runs before).
        files = list(dict.fromkeys(test for mutant in chosen for test in mutant.tests))

        def baseline(test: str) -> Outcome:
            with scratch(base, f"baseline-{files.index(test)}", pristine) as tree:
                return run_tests(tree, shared, (test,), BASELINE_TIMEOUT_S, args.seed)

        baselines = dict(zip(files, in_parallel(baseline, files, jobs), strict=True))
        for test, outcome in baselines.items():
            print(f"baseline {test}: {outcome.verdict} in {outcome.seconds:.1f} s")
        red = [(test, o) for test, o in baselines.items() if o.verdict != "passed"]
        for test, outcome in red:
            print(f"error: {test} fails without a mutant; fix it first:\n{tail(outcome.output)}",
                  file=sys.stderr)
        if red:
            return 2

        def attempt(mutant: Mutant) -> Outcome:
            usual = sum(baselines[test].seconds for test in mutant.tests)
            limit = max(MIN_TIMEOUT_S, TIMEOUT_FACTOR * usual)
            with scratch(base, f"mutant-{mutant.name}", pristine) as tree:
                mutate(tree, mutant)
                return run_tests(tree, shared, mutant.tests, limit, args.seed)

        killed, survived, broken = 0, [], []
        width = max(len(mutant.name) for mutant in chosen)
        for number, (mutant, outcome) in enumerate(
            zip(chosen, in_parallel(attempt, chosen, jobs), strict=True), start=1
        ):
            if outcome.verdict == "failed":
                verdict = f"killed by {outcome.first_failure}"
            elif outcome.verdict == "timeout":
                verdict = f"killed by timeout (tests ran past {outcome.seconds:.0f} s)"
            elif outcome.verdict == "passed":
                verdict = f"SURVIVED ({mutant.description}; ran {' '.join(mutant.tests)})"
            else:
                verdict = "ERROR: pytest did not run the tests"
            print(f"[{number:2}/{len(chosen)}] {mutant.name:{width}}  {mutant.path:22}  "
                  f"{verdict}  ({outcome.seconds:.1f} s)", flush=True)
            if outcome.verdict in ("failed", "timeout"):
                killed += 1
            elif outcome.verdict == "passed":
                survived.append(mutant.name)
            else:
                broken.append(mutant.name)
                print(tail(outcome.output), file=sys.stderr)
    for name, why in NOT_YET_APPLICABLE:
        print(f"not yet applicable: {name}: {why}")
    print(f"killed {killed}/{len(chosen)} in {time.monotonic() - started:.0f} s"
          + (f"; survived: {', '.join(survived)}" if survived else ""))
    if broken:
        print(f"error: pytest failed to run for {', '.join(broken)}", file=sys.stderr)
        return 2
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
