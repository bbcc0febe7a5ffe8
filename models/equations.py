"""The performance and cost model of MODEL.md as SymPy expressions: the one source of truth.

Nothing evaluates these expressions directly: `models.derivation` proves the bounds' facts
on them and prints them, once, as one numpy program (`models.compiled`), which every figure
of every plan then comes from. Importing this module imports SymPy; the solver's hot path
and a cached start-up never do.
"""

from __future__ import annotations

import sympy as sp

# Decision variables: n functions, m MB of memory each.
n = sp.Symbol("n", positive=True)
m = sp.Symbol("m", positive=True)

# Parameters (YAML field in the comment). Intercepts may be negative; slopes are ≥ 0.
d_m = sp.Symbol("d_m", positive=True)  # workload.model_size_mb
d_t = sp.Symbol("d_t", positive=True)  # workload.dataset_size_mb
n_t = sp.Symbol("n_t", positive=True)  # workload.samples
e = sp.Symbol("e", positive=True)  # workload.epochs
b_lf = sp.Symbol("b_lf", positive=True)  # workload.local_batch
b_gmax = sp.Symbol("b_gmax", positive=True)  # workload.max_global_batch
alpha1 = sp.Symbol("alpha1", nonnegative=True)  # profile.rate.slope
beta1 = sp.Symbol("beta1", real=True)  # profile.rate.intercept
m_sat = sp.Symbol("m_sat", positive=True)  # profile.rate.saturates_at_mb (inf if absent)
alpha2 = sp.Symbol("alpha2", nonnegative=True)  # profile.storage_bandwidth.slope
beta2 = sp.Symbol("beta2", real=True)  # profile.storage_bandwidth.intercept
B_s = sp.Symbol("B_s", positive=True)  # profile.storage_bandwidth.max_mbps
B_p = sp.Symbol("B_p", positive=True)  # parameter_server.bandwidth_mbps
B_fmax = sp.Symbol("B_fmax", positive=True)  # parameter_server.function_bandwidth_mbps
p_ps = sp.Symbol("p_ps", nonnegative=True)  # parameter_server.price_per_hour
p_gbs = sp.Symbol("p_gbs", nonnegative=True)  # platform.price_per_gb_second
p_req = sp.Symbol("p_req", nonnegative=True)  # platform.price_per_request
L = sp.Symbol("L", positive=True)  # platform.timeout_s - platform.timeout_margin_s
o = sp.Symbol("o", nonnegative=True)  # platform.restart_overhead_s
# Version 2 (calibration), each 0 when absent so that a v1 instance solves as before.
lam = sp.Symbol("lam", nonnegative=True)  # profile.latency_s: per exchange (push or pull)
s_0 = sp.Symbol("s_0", nonnegative=True)  # profile.startup.base_s: per invocation round
s_1 = sp.Symbol("s_1", nonnegative=True)  # profile.startup.per_function_s: per round and n
# Sharded parameter servers, 1 and 0 for one machine as before: k machines, each holding 1/k
# of the parameters behind its own NIC of B_p shared by the n functions, each paid p_ps, and
# c_msg per message to a shard (a function sends one to each shard per exchange).
k_ps = sp.Symbol("k_ps", positive=True)  # parameter_server.shards
c_msg = sp.Symbol("c_msg", nonnegative=True)  # parameter_server.message_s

PARAMETER_SYMBOLS: tuple[sp.Symbol, ...] = (
    d_m, d_t, n_t, e, b_lf, b_gmax, alpha1, beta1, m_sat, alpha2, beta2, B_s,
    B_p, B_fmax, p_ps, p_gbs, p_req, L, o, lam, s_0, s_1, k_ps, c_msg,
)

# Noise terms, per plan (models/noise.py computes them); EXACT gives MODEL.md's model.
s_c = sp.Symbol("s_c", positive=True)  # E[slowest of n workers' compute factors]
v_c = sp.Symbol("v_c", nonnegative=True)  # its variance
v_b = sp.Symbol("v_b", nonnegative=True)  # variance of an iteration's communication factor
z = sp.Symbol("z", nonnegative=True)  # the guarantee's standard normal quantile
c_e = sp.Symbol("c_e", nonnegative=True)  # expected start-up delay of an invocation round
c_q = sp.Symbol("c_q", nonnegative=True)  # the delay planned for at the guarantee's quantile
# Crashes (MODEL.md, "Failures"): all terms vanish at phi = 0, and the figures are as without.
phi = sp.Symbol("phi", nonnegative=True)  # crashes per function-second (failure_rate_per_hour/3600)
k_c = sp.Symbol("k_c", positive=True)  # iterations between checkpoints (checkpoint_every)
f_e = sp.Symbol("f_e", nonnegative=True)  # expected cold start of one re-invoked function
f_q = sp.Symbol("f_q", nonnegative=True)  # the same planned for under the guarantee (≥ f_e)
a_f = sp.Symbol("a_f", nonnegative=True)  # −ln(1 − p): the crash count's tail constant
NOISE_SYMBOLS: tuple[sp.Symbol, ...] = (s_c, v_c, v_b, z, c_e, c_q, phi, k_c, f_e, f_q, a_f)
EXACT: tuple[float, ...] = (1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0)

# --- the equations, in MODEL.md's order --------------------------------------------------

fixed_local = n * b_lf <= b_gmax
global_batch = sp.Piecewise((n * b_lf, fixed_local), (b_gmax, True))
local_batch = sp.Piecewise((b_lf, fixed_local), (b_gmax / n, True))
iterations = n_t * e / global_batch
rate = alpha1 * sp.Min(m, m_sat) + beta1
storage_bandwidth = sp.Min(alpha2 * m + beta2, B_s)
# A function moves d_m/k to each shard at once: its link caps the sum at B_fmax, and each
# shard's NIC gives it B_p/n, so the k flows together get k·B_p/n.
ps_bandwidth = sp.Min(B_fmax, k_ps * B_p / n)
t_load = d_t / (n * storage_bandwidth)
t_comp = local_batch / rate
t_transfer = 2 * d_m / ps_bandwidth
t_latency = 2 * (lam + k_ps * c_msg)
t_comm = t_transfer + t_latency
t_iteration = t_comp * s_c + t_comm
t_train = t_load + iterations * t_iteration
restarts = sp.Max(0, sp.ceiling(t_train / L) - 1)
# Crashes: n functions crash at n·phi per second of exposure E (training and the restarts'
# overheads, as in the simulator). A crash costs a cold start, the overhead o and on average
# half a checkpoint interval of redone iterations: c. The time lost to crashes is exposed too
# (its cold starts conservatively so), so the exposure B solves B = E + x·B with x = n·phi·c:
# B = E/(1 − x), losing E·x/(1 − x). At x ≥ 1 the run never finishes: the loss is infinite
# (1/max(0, 1 − x)), never negative. Without crashes (phi = 0) it is exactly 0.
crash_cost = f_e + o + k_c / 2 * t_iteration
crash_rate = n * phi
crash_load = crash_rate * crash_cost
t_exposed = t_train + restarts * o
no_crashes = sp.Eq(phi, 0)


def crash_loss(exposure: sp.Expr, load: sp.Expr) -> sp.Expr:
    """Expected seconds lost to crashes over `exposure` at crash load x: E·x/max(0, 1 − x)."""
    loss: sp.Expr = exposure * load / sp.Max(0, 1 - load)
    return loss


def crash_time_bound(count: sp.Expr, mean_cost: sp.Expr, max_cost: sp.Expr) -> sp.Expr:
    """Λc + √(2a·Λ·b·c) + a·b/3 ≥ the p-quantile of the time lost to Poisson(Λ) crashes that
    each lose between 0 and b seconds, c on average (Bernstein's bound for a compound Poisson
    sum, with E[X²] ≤ b·c; a = a_f = −ln(1 − p))."""
    bound: sp.Expr = (
        count * mean_cost + sp.sqrt(2 * a_f * count * max_cost * mean_cost) + a_f * max_cost / 3
    )
    return bound


def crash_loss_quantile(
    exposure: sp.Expr, mean_cost: sp.Expr, max_cost: sp.Expr, rate: sp.Expr
) -> sp.Expr:
    """The bound above over the exposure U, the larger root of U = E + bound(λU): a quadratic
    in √U with leading coefficient 1 − λc (infinite when λc ≥ 1, as the expected loss)."""
    slack = sp.Max(0, 1 - rate * mean_cost)
    spread = sp.sqrt(2 * a_f * rate * max_cost * mean_cost)
    root = (spread + sp.sqrt(spread**2 + 4 * slack * (exposure + a_f * max_cost / 3))) / (
        2 * slack
    )
    sqrt_u = sp.Dummy("sqrt_U", positive=True)  # so that √(λU) is printed as √λ·√U
    loss: sp.Expr = crash_time_bound(rate * sqrt_u**2, mean_cost, max_cost).xreplace(
        {sqrt_u: root}
    )
    return loss


t_crashes = sp.Piecewise((0, no_crashes), (crash_loss(t_exposed, crash_load), True))
# A crash restarts a function from its checkpoint: reported with the timeouts' restarts.
t_restart = restarts * o + t_crashes
# Start-up (process or sandbox start, imports, first pull): per round, growing with n.
startup = s_0 + s_1 * n
t_startup = (restarts + 1) * startup
t_cold = (restarts + 1) * c_e
# The terms paid per round summed as one, the same way in T and in its quantile, so that
# without noise the two agree to the last bit.
time = t_train + t_restart + (restarts + 1) * (startup + c_e)
# Under a guarantee p the deadline is checked against a p-quantile: the k iterations' spread
# adds up (central limit), restarts follow the longer run, start-ups their own quantile.
# t_comm² = t_transfer² + t_latency·(t_latency + 2·t_transfer), written so that without a
# latency the expression, and so every figure's bits, are version 1's.
spread_variance = iterations * (
    t_comp**2 * v_c + t_transfer**2 * v_b + t_latency * (t_latency + 2 * t_transfer) * v_b
)
t_train_quantile = t_train + z * sp.sqrt(spread_variance)
restarts_quantile = sp.Max(0, sp.ceiling(t_train_quantile / L) - 1)
# Crashes under the guarantee: each loses at most b (a cold start planned for at f_q, the
# overhead and a whole checkpoint interval), c_q on average (half an interval); over an
# exposure U their count is Poisson(λU), λ = n·phi, and the time they lose is at most
# crash_time_bound(λU) with probability ≥ p; U solves U = E_q + that bound.
crash_cost_quantile = f_q + o + k_c * t_iteration
crash_mean_quantile = f_q + o + k_c / 2 * t_iteration
crash_load_quantile = crash_rate * crash_mean_quantile
t_exposed_quantile = t_train_quantile + restarts_quantile * o
t_crashes_quantile = sp.Piecewise(
    (0, no_crashes),
    (crash_loss_quantile(t_exposed_quantile, crash_mean_quantile, crash_cost_quantile,
                         crash_rate), True),
)
deadline_time = t_train_quantile + restarts_quantile * o + (restarts_quantile + 1) * (startup + c_q)
deadline_time += t_crashes_quantile
cost_functions = time * n * (m / 1024) * p_gbs
cost_ps = time * k_ps * p_ps / 3600
cost_requests = n * (restarts + 1) * p_req
cost = cost_functions + cost_ps + cost_requests
# Dollars per second of training: cost = time·weight + cost_requests (used by the cost bounds).
weight = n * (m / 1024) * p_gbs + k_ps * p_ps / 3600

FIGURES: dict[str, sp.Expr] = {
    "global_batch": global_batch,
    "local_batch": local_batch,
    "iterations": iterations,
    "rate": rate,
    "storage_bandwidth": storage_bandwidth,
    "t_load": t_load,
    "t_comp_total": iterations * t_comp * s_c,
    "t_comm_total": iterations * t_comm,
    "t_train": t_train,
    "restarts": restarts,
    "t_restart": t_restart,
    "t_startup": t_startup,
    "t_cold": t_cold,
    "time": time,
    "deadline_time": deadline_time,
    "cost_functions": cost_functions,
    "cost_ps": cost_ps,
    "cost_requests": cost_requests,
    "cost": cost,
}
# Figures the solver needs but a plan's report does not.
AUXILIARY: dict[str, sp.Expr] = {
    "weight": weight, "crash_load": crash_load, "crash_load_quantile": crash_load_quantile,
}
