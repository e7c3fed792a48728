"""The benchmark harness: corpus, percentiles, report writer, helpers, and a smoke run."""

import json
import math
import os
import re
import shlex
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench import corpus, proc
from bench.measure import label_specs, persistence_fields, server_command, snapshot_ms_from_status
from bench.report import ROWS, lookup, ratio, render, write_json
from bench.stats import percentile, summarize

ROOT = Path(__file__).resolve().parents[2]


# --- corpus -------------------------------------------------------------------------------------


def test_corpus_is_deterministic_for_a_seed_and_differs_across_seeds() -> None:
    first = corpus.generate(7, 300)
    assert first == corpus.generate(7, 300)
    assert [i.content for i in first] != [i.content for i in corpus.generate(8, 300)]


def test_corpus_does_not_depend_on_the_hash_seed() -> None:
    script = (
        "import hashlib; from bench import corpus; items = corpus.generate(3, 200); "
        "qs = corpus.make_queries(items, range(200), 50, 3); "
        "print(hashlib.sha256(repr((items, qs)).encode()).hexdigest())"
    )
    digests = set()
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(ROOT)}
        out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
        digests.add(out.stdout.strip())
    assert len(digests) == 1


def test_corpus_lengths_are_log_normal_within_bounds() -> None:
    lengths = [len(i.content) for i in corpus.generate(11, 3000)]
    assert min(lengths) >= corpus.MIN_CHARS
    assert max(lengths) <= corpus.MAX_CHARS
    logs = [math.log(n) for n in lengths]
    # The median of a log-normal is exp(mu); clamping and cutting at boundaries move it a little.
    assert 0.7 * corpus.LENGTH_MEDIAN_CHARS < statistics.median(lengths) < 1.3 * corpus.LENGTH_MEDIAN_CHARS
    assert 0.7 * corpus.LENGTH_SIGMA < statistics.stdev(logs) < 1.3 * corpus.LENGTH_SIGMA
    # Log-lengths roughly symmetric: mean and median of the logs close together.
    assert abs(statistics.mean(logs) - statistics.median(logs)) < 0.2
    assert sum(n > 2000 for n in lengths) > 0


def test_corpus_has_every_kind_and_the_kind_specific_texts() -> None:
    items = corpus.generate(5, 2000)
    kinds = {i.kind for i in items}
    assert kinds == set(corpus.KINDS)
    errors = "\n".join(i.content for i in items if i.kind == "error")
    assert "Traceback (most recent call last)" in errors
    assert "goroutine" in errors
    assert "    at " in errors
    code = "\n".join(i.content for i in items if i.kind == "code")
    assert "def " in code
    assert "func (" in code
    assert "export " in code
    assert any(i.content.startswith("$ ") for i in items if i.kind == "tool_output")
    assert any(i.content.startswith("Decision:") for i in items if i.kind == "decision")
    assert any(re.search(r"\w+/\w+\.\w+", i.content) for i in items if i.kind == "prose")


def test_near_duplicates_are_near() -> None:
    items = corpus.generate(9, 2000)
    pairs = [(i, items[i.duplicate_of]) for i in items if i.duplicate_of is not None]
    assert 0.02 * len(items) < len(pairs) < 0.08 * len(items)

    def jaccard(a: str, b: str) -> float:
        x, y = set(a.lower().split()), set(b.lower().split())
        return len(x & y) / len(x | y)

    near = sum(jaccard(dup.content, orig.content) > 0.7 for dup, orig in pairs)
    assert near >= 0.9 * len(pairs)


def test_store_args_follow_the_tool_contract() -> None:
    for item in corpus.generate(2, 500):
        args = item.store_args()
        assert args["content"] == item.content
        assert 1 <= args["importance"] <= 10
        assert set(args) <= {"content", "summary", "tags", "importance", "pinned"}
        assert isinstance(args.get("tags", []), list | str)


def test_queries_come_from_their_target_item() -> None:
    items = corpus.generate(4, 1000)
    queries = corpus.make_queries(items, range(len(items)), 200, 4)
    assert len(queries) == 200
    for query in queries:
        target_terms = set(corpus.terms(items[query.target].content))
        words = query.text.lower().split()
        assert words
        assert all(w in target_terms for w in words), (query, items[query.target].content)


def test_queries_use_rare_terms() -> None:
    items = corpus.generate(6, 1000)
    doc_freq: dict[str, int] = {}
    for item in items:
        for term in set(corpus.terms(item.content)):
            doc_freq[term] = doc_freq.get(term, 0) + 1
    queries = corpus.make_queries(items, range(len(items)), 200, 6)
    rarest = [min(doc_freq[w] for w in q.text.lower().split()) for q in queries]
    # Most queries carry a term that at most a few items share.
    assert statistics.median(rarest) <= 3


# --- percentiles --------------------------------------------------------------------------------


@given(st.lists(st.floats(min_value=-1e6, max_value=1e6), min_size=2, max_size=200), st.integers(1, 99))
def test_percentile_matches_statistics_inclusive_quantiles(values: list[float], p: int) -> None:
    expected = statistics.quantiles(values, n=100, method="inclusive")[p - 1]
    assert math.isclose(percentile(values, p), expected, rel_tol=1e-9, abs_tol=1e-6)


@given(st.lists(st.floats(min_value=-1e6, max_value=1e6), min_size=1, max_size=50))
def test_percentile_ends_are_min_and_max(values: list[float]) -> None:
    assert percentile(values, 0) == min(values)
    assert percentile(values, 100) == max(values)


def test_percentile_rejects_empty_and_out_of_range() -> None:
    with pytest.raises(ValueError, match="empty"):
        percentile([], 50)
    with pytest.raises(ValueError, match=r"within 0\.\.100"):
        percentile([1.0], 101)
    with pytest.raises(ValueError, match=r"within 0\.\.100"):
        percentile([1.0], -1)


def test_summarize_known_sample() -> None:
    s = summarize([float(n) for n in range(1, 101)])
    assert s["n"] == 100
    assert s["p50"] == 50.5
    assert math.isclose(s["p99"], 99.01)
    assert s["max"] == 100
    assert s["mean"] == 50.5
    assert summarize([]) == {"n": 0.0}


# --- report -------------------------------------------------------------------------------------


def _report() -> dict[str, Any]:
    server = {
        "store": {"p50": 3.0, "p99": 9.0},
        "bulk": {"items_per_s": 1000.0},
        "query": {"p50": 4.0, "p99": 8.0, "hit_rate": 0.95},
        "recall": {"p50": 2.0},
        "compact": {"ms": 120.0},
        "snapshot": {"ms": 40.0, "stall_ms": 12.0, "stall_max_ms": 15.0},
        "shutdown_ms": 300.0,
        "cold_start": {"median_ms": 900.0},
        "rss": {"peak_mib": 90.0},
        "paired_floor": {"store": {"p50": 2.0, "p99": 3.0}, "bulk": {"items_per_s": 4000.0}},
        "errors": ["stall: RuntimeError: boom"],
    }
    floor = {
        "store": {"p50": 1.0, "p99": 3.0},
        "bulk": {"items_per_s": 4000.0},
        "query": {"p50": 1.0, "p99": 2.0},
        "recall": {"p50": 1.0},
        "compact": {"ms": 1.0},
        "snapshot": {"stall_ms": 4.0, "stall_max_ms": 5.0},
        "shutdown_ms": 150.0,
        "cold_start": {"median_ms": 600.0},
        "rss": {"peak_mib": 60.0},
        "errors": [],
    }
    block = {
        "size": 1000,
        "plan": {"batch": 100, "store_calls": 30, "queries": 30, "recalls": 10, "cold_starts": 1},
        "corpus": {"items_stored": 1030},
        "servers": {"compactor": server},
        "floor": floor,
    }
    meta = {"seed": 1, "quick": True, "python": "3.11", "mcp": "2.3.0", "cpus": 2}
    return {"meta": meta, "sizes": [block]}


def test_ratio_semantics() -> None:
    assert ratio(3.0, 2.0, "time") == 1.5
    assert ratio(90.0, 60.0, "memory") == 1.5
    assert ratio(1000.0, 4000.0, "throughput") == 4.0  # four times slower than the floor
    assert ratio(0.95, 1.0, "rate") is None
    assert ratio(None, 1.0, "time") is None
    assert ratio(1.0, 0.0, "time") is None


def test_lookup_walks_dotted_paths_and_ignores_non_numbers() -> None:
    result = _report()["sizes"][0]["servers"]["compactor"]
    assert lookup(result, "store.p50") == 3.0
    assert lookup(result, "store.p75") is None
    assert lookup(result, "errors") is None
    assert lookup({"a": {"b": True}}, "a.b") is None


def test_render_prints_values_and_ratios_against_the_paired_floor() -> None:
    text = render(_report())
    lines = {line.split("  ")[0]: line for line in text.splitlines()}
    for row in ROWS:
        assert row.label in lines
    assert lines["store p50 (ms)"].split()[-3:] == ["3.00", "1.50x", "1.00"]  # paired floor 2.0
    assert lines["query p50 (ms)"].split()[-3:] == ["4.00", "4.00x", "1.00"]  # global floor
    assert lines["bulk_store (items/s)"].split()[-3:] == ["1,000", "4.00x", "4,000"]
    assert lines["query hit rate (top 10)"].split()[-3:] == ["95.0%", "-", "-"]
    assert lines["snapshot, as status reports (ms)"].split()[-3:] == ["40.00", "-", "-"]
    assert "! compactor: stall: RuntimeError: boom" in text
    assert "N = 1,000" in text


def test_write_json_round_trips(tmp_path: Path) -> None:
    report = _report()
    out = tmp_path / "nested" / "r.json"
    write_json(report, out)
    assert json.loads(out.read_text()) == report
    assert not list(out.parent.glob("*.tmp"))


# --- measure helpers ----------------------------------------------------------------------------


def test_server_command_appends_flags_or_fills_placeholders(tmp_path: Path) -> None:
    assert server_command("srv -x", tmp_path, 1.0, True) == [
        "srv",
        "-x",
        "--state-dir",
        str(tmp_path),
        "--snapshot-interval",
        "1",
    ]
    assert server_command("srv -x", tmp_path, 1.0, False) == ["srv", "-x"]
    assert server_command("srv --data {state_dir} -i {snapshot_interval}", tmp_path / "a b", 0.5, True) == [
        "srv",
        "--data",
        str(tmp_path / "a b"),
        "-i",
        "0.5",
    ]


def test_label_specs_are_short_and_unique() -> None:
    labels = label_specs(
        [
            "/v/bin/python -m compactor",
            "/opt/go/compaction-mcp --x",
            "python bench/_devstub.py",
            "p -m compactor",
        ]
    )
    assert list(labels) == ["compactor", "compaction-mcp", "_devstub", "compactor#2"]


def test_snapshot_duration_is_found_in_status() -> None:
    status = {"persistence": {"dir": "/d", "last_snapshot_at": 17.0, "last_snapshot_ms": 42.5, "journal_bytes": 10}}
    assert snapshot_ms_from_status(status) == (42.5, "persistence.last_snapshot_ms")
    assert snapshot_ms_from_status({"snapshot_duration_s": 0.25}) == (250.0, "snapshot_duration_s")
    assert snapshot_ms_from_status({"tokens_used": 5}) is None
    assert set(persistence_fields(status)) == {
        "persistence.dir",
        "persistence.last_snapshot_at",
        "persistence.last_snapshot_ms",
        "persistence.journal_bytes",
    }


def test_proc_finds_a_child_and_its_peak_memory() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; b = bytearray(30 << 20); time.sleep(30)"])
    try:
        deadline = 200
        while deadline and (proc.status_kib(child.pid, "VmHWM") or 0) < 30 << 10:
            subprocess.run(["sleep", "0.05"], check=True)
            deadline -= 1
        assert child.pid in proc.my_children()
        assert proc.parent_of(child.pid) == os.getpid()
        peak = proc.peak_rss_mib([child.pid])
        assert peak is not None
        assert peak >= 30
    finally:
        child.kill()
        child.wait()
    assert proc.peak_rss_mib([child.pid]) is None


# --- smoke run ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_smoke_run_against_the_dev_stub(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    stub = f"{shlex.quote(sys.executable)} {shlex.quote(str(ROOT / 'bench' / '_devstub.py'))}"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COMPACTOR_BENCH_CALL_TIMEOUT": "60"}
    run = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--sizes", "200", "--server", stub, "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads(out.read_text())
    block = report["sizes"][0]
    server, floor = block["servers"]["_devstub"], block["floor"]
    assert server["errors"] == []
    assert floor["errors"] == []
    assert server["store"]["n"] == 30
    assert server["store"]["p50"] > 0
    assert server["bulk"]["items"] == 200
    assert server["bulk"]["ids_returned"] is True
    assert server["query"]["checked"] == 30
    assert server["query"]["hit_rate"] > 0.5
    assert server["compact"]["reply"]["tokens_after"] < server["compact"]["reply"]["tokens_before"]
    assert len(server["compact"]["runs_ms"]) == 1  # --quick: one run on one copy of the state
    assert server["compact"]["ms"] == server["compact"]["runs_ms"][0]
    assert floor["compact"]["ms"] is not None
    assert server["snapshot"]["source"] == "status persistence.last_snapshot_ms"
    assert server["snapshot"]["calls"]["store"]["n"] > 5
    assert server["snapshot"]["calls"]["get"]["n"] > 5
    assert server["cold_start"]["median_ms"] > 0
    assert server["rss"]["peak_mib"] > 10
    assert floor["store"]["n"] == 30  # the paired no-op calls
    assert floor["cold_start"]["median_ms"] > 0
    assert floor["rss"]["peak_mib"] > 10
    assert "store p50 (ms)" in run.stdout
    assert "x floor" in run.stdout


@pytest.mark.slow
@pytest.mark.parametrize("client", ["raw", "sdk"])
def test_both_clients_report_the_same_reply(client: str, tmp_path: Path) -> None:
    import anyio

    from bench.session import CLIENTS, ToolCallError

    command = [sys.executable, str(ROOT / "bench" / "noop_server.py")]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    async def go() -> None:
        with (tmp_path / "err.log").open("w") as errlog:
            async with CLIENTS[client](command, env, errlog) as conn:
                assert await conn.list_tools() == ["noop"]
                reply = await conn.call("noop", {"payload": "abc", "text_bytes": 100, "struct_bytes": 300})
                assert reply.ms > 0
                assert reply.data["received"] == 3
                assert reply.text_bytes == 100
                assert 250 <= reply.struct_bytes <= 350
                with pytest.raises(ToolCallError):
                    await conn.call("noop", {"text_bytes": "not a number"})
                assert conn.peak_rss_mib() is not None
            assert conn.closed_ms > 0

    anyio.run(go)


@pytest.mark.slow
def test_recall_latency_over_stdio_reports_each_query_kind() -> None:
    """bench.recall_latency --stdio (ISSUE 19's latency over stdio) runs end to end on a few items."""
    out = subprocess.run(
        [sys.executable, "-m", "bench.recall_latency", "300", "--stdio", "--runs", "3"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().split("\n")
    assert [ln.split(":")[0] for ln in lines] == ["300 items over stdio, no query", "300 items over stdio, query"]
    for ln in lines:
        m = re.search(r"p50 ([\d.]+) ms .* server CPU ([\d.]+) ms a call, (\d+) tokens", ln)
        assert m and float(m[1]) > 0 and 0 < int(m[3]) <= 2_000, ln


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_team_bench_measures_three_configurations_with_their_floors(pg_cluster: Any, tmp_path: Path) -> None:
    """`python -m bench --database URL --transport streamable-http`: one run, three rows."""
    out = tmp_path / "team.json"
    done = subprocess.run(
        [
            *(sys.executable, "-m", "bench", "--database", pg_cluster.url(), "--transport", "streamable-http"),
            *("--quick", "--sizes", "100", "--out", str(out)),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(out.read_text())["team"]["sizes"]["100"]
    assert set(rows) == {"stdio + state dir", "stdio + PostgreSQL", "HTTP + PostgreSQL"}
    for row in rows.values():
        assert row["query"]["p50"] > 0 and row["floor_query"]["p50"] > 0 and row["store"]["p50"] > 0
    assert "goal <= 2x" in done.stdout
