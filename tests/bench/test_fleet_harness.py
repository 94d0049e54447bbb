"""The fleet harness of bench_scale/bench_rss/bench_shards (benchmarks/fleet.py): the
figures it reads from outside the controllers, and bench_scale's group run at a tiny size.
Behaviour only; the envelope itself is measured by benchmarks/bench_scale.py."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

import bench_scale  # noqa: E402
import fleet  # noqa: E402

INF = math.inf


def snap(t: float, decisions: dict[str, float], lag: dict[float, float], cpu: float) -> object:
    return fleet.Snapshot(t, decisions, lag, cpu, math.nan)


def test_quantile_interpolates_within_the_bucket_holding_the_rank() -> None:
    buckets = {0.25: 50.0, 0.5: 100.0, INF: 100.0}
    assert fleet.histogram_quantile(0.5, buckets) == pytest.approx(0.25)
    assert fleet.histogram_quantile(0.99, buckets) == pytest.approx(0.25 + 0.25 * 49 / 50)
    assert fleet.histogram_quantile(0.1, buckets) == pytest.approx(0.25 * 10 / 50)


def test_quantile_past_the_last_bound_is_that_bound_and_no_data_is_nan() -> None:
    assert fleet.histogram_quantile(0.99, {1.0: 90.0, 2.5: 90.0, INF: 100.0}) == 2.5
    assert math.isnan(fleet.histogram_quantile(0.99, {1.0: 0.0, INF: 0.0}))


def test_group_figures_sum_replicas_and_count_an_undecided_target_as_zero() -> None:
    lag0 = {0.5: 0.0, 1.0: 0.0, INF: 0.0}
    start = [snap(0.0, {"fleet/a": 10}, lag0, 5.0), snap(0.0, {"fleet/b": 3}, lag0, 1.0)]
    end = [
        snap(10.0, {"fleet/a": 20}, {0.5: 8.0, 1.0: 10.0, INF: 10.0}, 8.0),
        snap(10.0, {"fleet/b": 13}, {0.5: 5.0, 1.0: 9.0, INF: 10.0}, 2.0),
    ]
    row = fleet.group_figures(["fleet/a", "fleet/b", "fleet/c"], start, end)
    assert row["min_decisions_per_target_s"] == 0.0  # fleet/c never decided
    assert row["targets_below_0_9_per_s"] == 1
    assert row["decisions_per_target_s"] == pytest.approx(round(2 / 3, 3))
    assert row["decisions_within_1s"] == pytest.approx(19 / 20)
    assert row["cpu_cores"] == pytest.approx(0.4)  # (3 + 1) CPU-s over 10 s
    assert row["cpu_cores_by_replica"] == [0.3, 0.1]


def test_lease_writes_count_writes_not_reads() -> None:
    calls = {"put leases": 5.0, "create leases": 1.0, "get leases": 7.0, "watch leases": 2.0}
    calls |= {"list leases": 3.0, "patch leases": 1.0, "put deployments": 9.0}
    assert fleet.lease_writes(calls) == 7.0


def test_replicas_below_one_or_fewer_shards_than_replicas_are_refused() -> None:
    with pytest.raises(SystemExit):
        bench_scale.parse_args(["--replicas", "0"])
    with pytest.raises(SystemExit):
        bench_scale.parse_args(["--replicas", "3", "--shards", "2"])
    assert bench_scale.parse_args(["--replicas", "3"]).shards == 6


@pytest.fixture(scope="module")
def two_replicas(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    out = tmp_path_factory.mktemp("scale") / "scale.json"
    sizes = ["--targets", "6", "--replicas", "2", "--shards", "4"]
    timing = ["--warmup", "0.5", "--duration", "2", "--settle-limit", "60"]
    bench_scale.main([*sizes, *timing, "--out", str(out)])
    doc = json.loads(out.read_text())
    assert len(doc["rows"]) == 1
    row: dict[str, object] = doc["rows"][0]
    return row


def test_two_replicas_split_the_shards_and_decide_every_target(
    two_replicas: dict[str, object],
) -> None:
    row = two_replicas
    assert row["replicas"] == 2 and row["flags"] == "--shards 4 --shard-scope held"
    held = row["shards_held"]
    assert isinstance(held, list) and sum(held) == 4  # each shard held by one replica
    min_rate = row["min_decisions_per_target_s"]
    assert isinstance(min_rate, float) and min_rate > 0  # every target decided
    by_replica = row["cpu_cores_by_replica"]
    assert isinstance(by_replica, list) and len(by_replica) == 2
    assert isinstance(row["lease_writes_per_s"], float) and row["lease_writes_per_s"] > 0


def test_a_new_row_replaces_the_row_of_its_configuration_only(
    two_replicas: dict[str, object],
) -> None:
    old = {**two_replicas, "targets": 7}
    same = {**two_replicas, "decisions_per_target_s": -1.0}
    rows = bench_scale.merge_rows([old, same], [two_replicas])
    assert len(rows) == 2 and {r["targets"] for r in rows} == {6, 7}
    assert all(r["decisions_per_target_s"] != -1.0 for r in rows)


def test_the_envelope_row_is_the_median_run_with_every_run_listed() -> None:
    figures = dict.fromkeys(bench_scale.RUN_FIGURES, 0.0)
    runs = [
        figures | {"min_decisions_per_target_s": m, "cpu_cores": c}
        for m, c in ((0.95, 0.7), (0.3, 0.4), (0.8, 0.6))
    ]
    row = bench_scale.median_run(runs)
    assert row["min_decisions_per_target_s"] == 0.8 and row["cpu_cores"] == 0.6
    assert [r["min_decisions_per_target_s"] for r in row["runs"]] == [0.95, 0.3, 0.8]
