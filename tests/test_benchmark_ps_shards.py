"""benchmarks/ps_shards.py on tiny traces: the variants it builds are the ones it names, its
bookkeeping agrees with `solve()` called directly, and the catalogue is never dearer nor less
feasible than the single PS it contains (and `--check` says so when it is)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from lambdadnn import solve
from lambdadnn.benchmarks import ps_shards as bench
from lambdadnn.simulator.trace import WORKLOADS, generate_trace
from lambdadnn.solver.instance import Instance
from lambdadnn.solver.instance_validation import DEFAULT_MAX_SHARDS
from lambdadnn.solver.instance_yaml import load_instance, read_yaml
from lambdadnn.solver.shipped import instances_folder


def test_the_variants_change_every_ps_bandwidth_and_nothing_else() -> None:
    nominal = bench.catalogue("nominal")
    half = bench.catalogue("half")
    baseline = bench.catalogue("baseline")
    assert bench.SINGLE_TYPE in nominal["types"]
    for name, entry in nominal["types"].items():
        assert half["types"][name]["bandwidth_mbps"] == entry["bandwidth_mbps"] / 2
        assert baseline["types"][name]["bandwidth_mbps"] == entry["baseline_mbps"]
        for other in (half, baseline):
            rest = {k: v for k, v in other["types"][name].items() if k != "bandwidth_mbps"}
            assert rest == {k: v for k, v in entry.items() if k != "bandwidth_mbps"}
    with pytest.raises(ValueError, match="unknown bandwidth variant"):
        bench.catalogue("double")


@pytest.mark.parametrize("workload", WORKLOADS)
def test_the_single_ps_is_todays_machine_and_one_of_the_catalogues(workload: str) -> None:
    m5 = bench.catalogue("nominal")["types"][bench.SINGLE_TYPE]
    shipped = load_instance(workload)
    for variant, scale in (("nominal", 1.0), ("half", 0.5),
                           ("baseline", m5["baseline_mbps"] / m5["bandwidth_mbps"])):
        single, several = bench.instances(workload, variant)
        ps = single.parameter_server
        assert (ps.shards, ps.message_s) == (1, 0.0)
        assert ps.bandwidth_mbps == m5["bandwidth_mbps"] * scale
        assert ps.price_per_hour == m5["price_per_hour"]
        assert ps.function_bandwidth_mbps == shipped.parameter_server.function_bandwidth_mbps
        assert not single.servers
        types = bench.catalogue(variant)["types"]
        assert len(several.servers) == len(types) * DEFAULT_MAX_SHARDS
        same = [s for s in several.servers
                if (s.bandwidth_mbps, s.function_bandwidth_mbps, s.price_per_hour, s.shards,
                    s.message_s)
                == (ps.bandwidth_mbps, ps.function_bandwidth_mbps, ps.price_per_hour, 1, 0.0)]
        assert [s.type for s in same] == [bench.SINGLE_TYPE]
        # everything but the parameter server is the shipped instance's
        for built in (single, several):
            assert dataclasses.replace(built, parameter_server=shipped.parameter_server,
                                       servers=shipped.servers) == shipped
    raw = read_yaml(instances_folder() / f"{workload}.yaml")
    assert bench.single_in_catalogue(raw["parameter_server"])


SMALL = (("nominal", bench.GUARANTEE), ("half", None), ("baseline", bench.GUARANTEE))
RANGES = ((600, 1200), (150, 300))


@pytest.fixture(scope="module")
def small() -> dict[str, Any]:
    return bench.run(12, seed=5, settings=SMALL, deadline_ranges=RANGES)


def test_on_a_tiny_trace_the_catalogue_is_never_dearer_nor_less_feasible(
    small: dict[str, Any],
) -> None:
    assert [(row["variant"], row["guarantee"], tuple(row["deadlines"]))
            for row in small["settings"]] == [(v, g, r) for v, g in SMALL for r in RANGES]
    assert bench.violations(small) == []
    for row in small["settings"]:
        assert row["jobs"] == 12 and 1 <= row["questions"] <= 12
        assert row["lost"] == row["costlier"] == 0 and row["errors"] == []
        assert row["met_single"] <= row["met_catalogue"] <= row["jobs"]
        assert row["met_both"] == row["met_single"]
        assert row["rescued"] == row["met_catalogue"] - row["met_single"]
        if row["met_both"]:
            assert row["saving"]["min"] >= -bench.COST_RTOL
            assert row["saving"]["min"] <= row["saving"]["median"] <= row["saving"]["max"] < 1
            assert row["saved_usd"] >= -bench.COST_RTOL
        picked = sum(n for counts in row["picks"].values() for n in counts.values())
        assert picked == row["met_catalogue"]
        assert sum(c["jobs"] for c in row["per_workload"].values()) == row["jobs"]
        for counts in row["per_workload"].values():
            assert counts["met_single"] <= counts["met_catalogue"] <= counts["jobs"]
            assert counts["saving_mean"] is None or counts["saving_mean"] >= -bench.COST_RTOL
        assert row["solve_ms_single"] > 0 and row["solve_ms_catalogue"] > 0
    # the tight deadlines at the sustained bandwidth are where the single PS fails
    tight = [row for row in small["settings"] if row["deadlines"] == [150, 300]]
    assert any(row["rescued"] > 0 for row in tight)


def test_its_counts_are_what_solve_answers_job_by_job(small: dict[str, Any]) -> None:
    variant, guarantee = SMALL[2]
    low, high = RANGES[1]
    row = next(r for r in small["settings"]
               if (r["variant"], r["guarantee"], r["deadlines"]) == (variant, guarantee,
                                                                     [low, high]))
    met = {"single": 0, "catalogue": 0}
    picks: dict[str, dict[str, int]] = {}
    for job in generate_trace(12, seed=5, deadlines=(low, high)):
        single, several = bench.instances(job.instance_name, variant)
        for kind, base in (("single", single), ("catalogue", several)):
            plan = solve(_with_epochs(base, job.epochs), deadline_s=job.deadline_s,
                         guarantee=guarantee)
            met[kind] += plan.status == "optimal"
            if kind == "catalogue" and plan.status == "optimal":
                ps = plan.solved_from.parameter_server
                name = f"{ps.type}×{ps.shards}"
                counts = picks.setdefault(job.instance_name, {})
                counts[name] = counts.get(name, 0) + 1
    assert (row["met_single"], row["met_catalogue"]) == (met["single"], met["catalogue"])
    assert row["picks"] == {w: picks[w] for w in sorted(picks)}


def _with_epochs(base: Instance, epochs: int) -> Instance:
    return dataclasses.replace(base, workload=dataclasses.replace(base.workload, epochs=epochs))


def test_a_dearer_or_lost_job_is_a_violation() -> None:
    one = bench.Outcome("optimal", 1.0, None, 1, 0.001)
    dearer = bench.Outcome("optimal", 1.5, "c5n.large", 2, 0.01)
    missed = bench.Outcome("infeasible", 3.0, "c5n.9xlarge", 8, 0.01)
    summary = bench.summarise([("a", one, dearer), ("b", one, missed), ("b", one, missed)])
    assert (summary["costlier"], summary["lost"], summary["met_both"]) == (1, 2, 1)
    assert summary["saving"]["max"] == pytest.approx(-0.5)
    report = {"single_in_catalogue": {"a": True, "b": False},
              "settings": [{"variant": "nominal", "guarantee": None, "deadlines": [1, 2],
                            **summary}]}
    found = bench.violations(report)
    assert any("b: its single PS is not" in text for text in found)
    assert any("a: 1 job(s) whose catalogue plan costs more" in text for text in found)
    assert any("b: 2 job(s) met with 1 PS, missed" in text for text in found)
    assert any("fewer deadlines met with the catalogue (1 < 3)" in text for text in found)


def test_check_exits_1_only_when_the_catalogue_breaks_its_promise(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(bench, "SETTINGS", (("nominal", None),))
    assert bench.main(["--jobs", "3", "--json", "--check"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["violations"] == [] and len(printed["settings"]) == len(bench.DEADLINE_RANGES)

    solve_one = bench._solve

    def dearer(instance: Instance, guarantee: float | None) -> bench.Outcome:
        found = solve_one(instance, guarantee)
        if instance.servers and found.cost_usd is not None:
            return dataclasses.replace(found, cost_usd=found.cost_usd * 1.01)
        return found

    monkeypatch.setattr(bench, "_solve", dearer)
    assert bench.main(["--jobs", "3", "--check"]) == 1
    assert "VIOLATION" in capsys.readouterr().err
    assert bench.main(["--jobs", "3"]) == 0  # reported, but not a failure without --check
