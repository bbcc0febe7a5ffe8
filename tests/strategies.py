"""Hypothesis strategies for instances: valid ones for the model and bounds, junk for the loader.

`instance_mappings()` draws instances in MODEL.md's YAML schema (inline platform) across the
corners that break hand-derived bounds: negative intercepts (low memories invalid), rate
saturation, a memory floor, short timeouts (restarts), free and priced parameter servers,
both batch regimes, and model v2's per-exchange latency and start-up per round (absent, 0 or
positive). Deadlines are drawn against the instance (`deadlines`), mostly where
they change the answer. Grids stay small so the brute-force oracle
answers in milliseconds. `arbitrary_mappings()` draws junk and near-valid mutants for fuzzing
`load_instance`, which must answer every one with an `InstanceError` or an `Instance`.
"""

from __future__ import annotations

import math
from typing import Any

from hypothesis import strategies as st

from tests import oracle

#: Every field the schema knows, by section path ("" is the top level).
SCHEMA: dict[str, tuple[str, ...]] = {
    "": ("name", "platform", "workload", "profile", "parameter_server", "objective", "limits"),
    "platform": (
        "name", "memory_mb", "price_per_gb_second", "price_per_request", "timeout_s",
        "timeout_margin_s", "restart_overhead_s", "max_concurrency",
    ),
    "platform.memory_mb": ("min", "max", "step"),
    "workload": (
        "model_size_mb", "dataset_size_mb", "samples", "epochs", "local_batch",
        "max_global_batch", "min_memory_mb",
    ),
    "profile": ("rate", "storage_bandwidth", "latency_s", "startup"),
    "profile.rate": ("slope", "intercept", "saturates_at_mb"),
    "profile.startup": ("base_s", "per_function_s"),
    "profile.storage_bandwidth": ("slope", "intercept", "max_mbps"),
    "parameter_server": ("bandwidth_mbps", "function_bandwidth_mbps", "price_per_hour"),
    "objective": ("deadline_s",),
    "limits": ("max_functions",),
}

#: Fields whose value may be absent or null.
OPTIONAL: frozenset[str] = frozenset(
    {"name", "limits", "limits.max_functions", "workload.min_memory_mb",
     "profile.rate.saturates_at_mb", "profile.latency_s", "profile.startup"}
)

#: Fields that hold a string (the rest hold numbers or sections).
TEXT_FIELDS: frozenset[str] = frozenset({"name", "platform.name"})

#: Junk integers reach beyond float range (1.8e308), where `float(int)` overflows.
INT_BOUND = 10**400


def _real(low: float, high: float, places: int | None = None) -> st.SearchStrategy[float]:
    """A finite float in [low, high], rounded like a measured value.

    Six significant digits, and `places` decimals when given: intercepts may cross zero, and
    an intercept of 1e-308 would make times overflow to inf, which says nothing about bounds.
    """

    def measured(x: float) -> float:
        x = float(f"{x:.6g}")
        return x if places is None else round(x, places)

    return (
        st.floats(low, high, allow_nan=False, allow_infinity=False)
        .map(measured)
        .filter(lambda x: low <= x <= high)
    )


@st.composite
def _platform(draw: st.DrawFn, max_memory_sizes: int, max_concurrency: int) -> dict[str, Any]:
    """A Lambda-like platform with a small memory grid and a timeout that may force restarts."""
    step = draw(st.sampled_from([1, 8, 16, 64, 128]))
    low = draw(st.integers(64, 1024))
    most = min(max_memory_sizes, (10240 - low) // step + 1)
    sizes = draw(st.integers(1, most))
    timeout = draw(st.one_of(_real(20, 120), _real(120, 900)))
    return {
        "name": "hypothesis-platform",
        "memory_mb": {"min": low, "max": low + step * (sizes - 1), "step": step},
        "price_per_gb_second": draw(
            st.one_of(st.sampled_from([0.0000166667, 0.0000133334]), _real(1e-6, 5e-5))
        ),
        "price_per_request": draw(st.sampled_from([0.0, 0.0000002, 0.000002])),
        "timeout_s": timeout,
        "timeout_margin_s": draw(_real(0, timeout * 0.5)),
        "restart_overhead_s": draw(st.one_of(st.just(0.0), _real(0.5, 30))),
        "max_concurrency": draw(st.integers(1, max_concurrency)),
    }


@st.composite
def _linear(
    draw: st.DrawFn, slope_high: float, intercept_high: float, grid_max: float
) -> dict[str, float]:
    """A profile line `slope * m + intercept` with slope >= 0 that is often negative at low m.

    A negative intercept is drawn through its zero crossing `m0` (intercept = -slope * m0),
    mostly inside the grid, so that the low memories are invalid and the high ones valid as
    in λDNN's ESPCN (crossing at 2,300 MB) and 1D-CNN (88 MB) profiles; a crossing beyond
    the grid leaves the instance without any valid plan, which the solver must also answer.
    """
    slope = draw(st.one_of(st.just(0.0), _real(1e-4, slope_high)))
    if slope == 0.0 or draw(st.booleans()):
        return {"slope": slope, "intercept": draw(_real(0.5, intercept_high, places=3))}
    crossing = draw(_real(1, grid_max * 1.1))
    return {"slope": slope, "intercept": round(-slope * crossing, 6)}


@st.composite
def instance_mappings(
    draw: st.DrawFn, *, max_memory_sizes: int = 400, max_concurrency: int = 300
) -> dict[str, Any]:
    """A valid instance mapping (MODEL.md schema, inline platform) small enough to brute-force.

    At most `max_memory_sizes` memory sizes x `max_concurrency` functions. The ranges bracket
    the four shipped instances (λDNN's Table 5); slopes are >= 0 as the loader requires, while
    intercepts may be negative so that low memories are invalid; the deadline is drawn by
    `deadlines` from what the instance can do.
    """
    platform = draw(_platform(max_memory_sizes, max_concurrency))
    grid_min, grid_max = platform["memory_mb"]["min"], platform["memory_mb"]["max"]
    workload: dict[str, Any] = {
        "model_size_mb": draw(_real(0.1, 200)),
        "dataset_size_mb": draw(_real(1, 2000)),
        "samples": draw(st.integers(100, 100_000)),
        "epochs": draw(st.integers(1, 20)),
        "local_batch": draw(st.integers(1, 256)),
        # Often below n * local_batch for small n (fixed global batch), sometimes far above.
        "max_global_batch": draw(st.integers(1, 4096)),
    }
    if draw(st.booleans()):
        # Mostly inside the grid (the floor binds), now and then below it or above it.
        workload["min_memory_mb"] = draw(_real(max(1.0, grid_min * 0.5), grid_max * 1.05 + 1))
    rate: dict[str, Any] = draw(_linear(0.1, 20, grid_max))
    if draw(st.booleans()):
        rate["saturates_at_mb"] = draw(_real(grid_min * 0.5, grid_max * 1.5))
    mapping: dict[str, Any] = {
        "name": draw(st.text("abcdefghijklmnopqrstuvwxyz-0123456789", min_size=1, max_size=20)),
        "platform": platform,
        "workload": workload,
        "profile": {
            "rate": rate,
            "storage_bandwidth": {
                **draw(_linear(0.01, 30, grid_max)),
                "max_mbps": draw(_real(5, 200)),
            },
        },
        "parameter_server": {
            "bandwidth_mbps": draw(_real(50, 5000)),
            "function_bandwidth_mbps": draw(_real(5, 200)),
            "price_per_hour": draw(st.one_of(st.just(0.0), _real(0.005, 2.0))),
        },
    }
    if draw(st.booleans()):  # k shards of that machine, each message to one costing c_msg
        mapping["parameter_server"]["shards"] = draw(st.integers(1, 4))
        if draw(st.booleans()):
            mapping["parameter_server"]["message_s"] = draw(
                st.one_of(st.just(0.0), _real(1e-4, 0.05)))
    latency = draw(st.sampled_from(["absent", "zero", "drawn", "drawn"]))
    if latency != "absent":
        mapping["profile"]["latency_s"] = (
            0.0 if latency == "zero" else draw(st.one_of(_real(1e-4, 0.05), _real(0.05, 2)))
        )
    startup = draw(st.sampled_from(["absent", "zero", "drawn", "drawn"]))
    if startup != "absent":
        mapping["profile"]["startup"] = (
            {"base_s": 0.0, "per_function_s": 0.0} if startup == "zero" else {
                "base_s": draw(st.one_of(st.just(0.0), _real(0.1, 30))),
                "per_function_s": draw(st.one_of(st.just(0.0), _real(1e-3, 2))),
            }
        )
    if draw(st.booleans()):
        # Often small, so that the limit binds where the optimum would use more functions.
        mapping["limits"] = {"max_functions": draw(st.integers(1, 16) | st.integers(1, 400))}
    mapping["objective"] = {"deadline_s": draw(deadlines(mapping))}
    return mapping


#: The longest deadline the loader accepts (`solver.instance.MAX_SECONDS`, restated).
MAX_DEADLINE_S = 1e9


@st.composite
def deadlines(draw: st.DrawFn, mapping: dict[str, Any]) -> float:
    """A deadline for `mapping` (any deadline of its own is ignored) that matters.

    Measured against the fastest valid plan within the limits, as the independent oracle
    (not the package) computes it: 70% from 1.0001x to 20x its time, log-uniform (feasible,
    and often binding); 20% exactly a random valid plan's time as the oracle computes it, to
    the last bit (the plan itself is then feasible, or within one rounding of it; a relative
    draw when the drawn plan is not valid); 10% below the fastest time (infeasible). Without
    a valid plan, or when times exceed what a deadline may be, seconds to hours regardless.
    """
    fastest = oracle.fastest(mapping)
    t_min = fastest.time_s
    if t_min is None or not 0 < t_min <= MAX_DEADLINE_S / 20:
        return draw(st.one_of(_real(1, 600), _real(600, 20_000)))
    kind = draw(st.sampled_from(["relative"] * 7 + ["plan"] * 2 + ["infeasible"]))
    if kind == "plan":
        problem = oracle.read(mapping, deadline_s=math.inf)
        memory = [m for m in problem.memory().tolist() if m >= problem.min_memory_mb]
        n = draw(st.integers(1, problem.max_functions))
        figures = oracle.grid(problem, n, draw(st.sampled_from(memory)))
        time = float(figures["time"])
        if bool(figures["valid"]) and time <= MAX_DEADLINE_S:
            return time
    if kind == "infeasible":
        return t_min * draw(st.floats(0.05, 0.9999))
    return t_min * math.exp(draw(st.floats(math.log(1.0001), math.log(20.0))))


# --- junk for the loader ------------------------------------------------------------------

#: Mapping keys: any text but line breaks and control characters. The loader echoes unknown
#: keys verbatim, so a key with a newline gives a two-line message (a known bug, see
#: tests/test_loader.py::test_key_with_a_newline_gives_a_one_line_message).
_keys: st.SearchStrategy[str] = st.text(
    st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")), max_size=12
)

_scalars: st.SearchStrategy[Any] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-INT_BOUND, INT_BOUND),
    st.floats(),  # NaN and infinities included
    st.text(max_size=30),
)

#: Nested dicts, lists and scalars with no structure at all.
junk: st.SearchStrategy[Any] = st.recursive(
    _scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.one_of(_keys, st.integers(-5, 5)), children, max_size=4),
    ),
    max_leaves=12,
)


def field_paths(mapping: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted paths of every field present in a mapping, sections and leaves alike."""
    paths: list[str] = []
    for key, value in mapping.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        paths.append(path)
        if isinstance(value, dict):
            paths.extend(field_paths(value, path))
    return paths


def _parent(mapping: dict[str, Any], path: str) -> tuple[dict[str, Any], str]:
    """The section holding `path` and the key within it."""
    *sections, key = path.split(".")
    node = mapping
    for section in sections:
        node = node[section]
    return node, key


def wrong_values(path: str) -> st.SearchStrategy[Any]:
    """Values of the wrong *type* for the field at `path`, which the loader must reject.

    Strings are wrong for numbers and sections but not for `platform` (a name) or text fields;
    mappings are wrong for leaves, None only for required fields; bools are never numbers.
    """
    section = path in SCHEMA
    options: list[st.SearchStrategy[Any]] = [
        st.booleans(),
        st.lists(_scalars, max_size=3),
    ]
    if path in TEXT_FIELDS:
        options.append(st.integers(-1000, 1000) | st.floats(allow_nan=False))
        options.append(st.just("   "))
    elif path == "platform":
        options.append(st.integers(-1000, 1000))
    else:
        options.append(st.text(max_size=10))
        if not section:
            options.append(st.dictionaries(_keys, _scalars, max_size=2))
        else:
            options.append(st.integers(-1000, 1000) | st.floats())
    if path not in OPTIONAL:
        options.append(st.none())
    return st.one_of(*options)


@st.composite
def wrongly_typed(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    """A valid instance with one field replaced by a value of the wrong type, and its path."""
    mapping = draw(instance_mappings(max_memory_sizes=20, max_concurrency=20))
    path = draw(st.sampled_from(field_paths(mapping)))
    node, key = _parent(mapping, path)
    node[key] = draw(wrong_values(path))
    return mapping, path


@st.composite
def with_unknown_key(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    """A valid instance with one key the schema does not know added to one section, and its path."""
    mapping = draw(instance_mappings(max_memory_sizes=20, max_concurrency=20))
    sections = [path for path in ["", *field_paths(mapping)] if path in SCHEMA]
    section = draw(st.sampled_from(sections))
    node = mapping
    for part in section.split(".") if section else []:
        node = node[part]
    known = SCHEMA[section]
    key = draw(
        st.one_of(st.sampled_from(known).map(lambda k: k[:-1] or k + "x"), _keys)
        # Keys that are empty or break lines are shown with repr(): tested on their own.
        .filter(lambda k: k not in known and k.splitlines() == [k])
    )
    node[key] = draw(_scalars)
    return mapping, f"{section}.{key}" if section else key


@st.composite
def _mutant(draw: st.DrawFn) -> dict[str, Any]:
    """A valid instance with one field mutated: wrong type, out-of-range value, junk or deleted."""
    mapping = draw(instance_mappings(max_memory_sizes=20, max_concurrency=20))
    kind = draw(st.sampled_from(["type", "value", "junk", "delete", "unknown", "platform"]))
    if kind == "type":
        return draw(wrongly_typed())[0]
    if kind == "unknown":
        return draw(with_unknown_key())[0]
    if kind == "platform":
        mapping["platform"] = draw(
            st.sampled_from(["aws-lambda-x86_64", "aws-lambda-2020", "../etc/passwd", ""])
            | st.text(max_size=30)
        )
        return mapping
    path = draw(st.sampled_from(field_paths(mapping)))
    node, key = _parent(mapping, path)
    if kind == "delete":
        del node[key]
    elif kind == "junk":
        node[key] = draw(junk)
    else:  # out of range: zero, negative, fractional, enormous, non-finite
        node[key] = draw(
            st.sampled_from([0, -1, -0.5, 0.5, 1.5, 1e308, 10**9, float("inf"), float("nan")])
        )
    return mapping


def arbitrary_mappings() -> st.SearchStrategy[Any]:
    """Anything a caller might hand `load_instance` in place of an instance mapping.

    Pure junk (nested dicts, lists, numbers, bools, None, NaN) and valid instances with one
    field mutated. Top-level strings are left out on purpose: `load_instance` treats a string
    as a file path, which tests/test_loader.py fuzzes separately through real files.
    """
    top_junk = junk.filter(lambda value: not isinstance(value, str))
    return st.one_of(top_junk, _mutant())
