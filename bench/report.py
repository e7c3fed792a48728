"""The results as a table for stdout and as a JSON file."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from bench.context import render_context
from bench.import_time import render_import

Kind = Literal["time", "throughput", "memory", "rate"]


@dataclass(frozen=True)
class Row:
    path: str  # dotted path into a server's result
    label: str
    kind: Kind


ROWS: tuple[Row, ...] = (
    Row("store.p50", "store p50 (ms)", "time"),
    Row("store.p99", "store p99 (ms)", "time"),
    Row("bulk.items_per_s", "bulk_store (items/s)", "throughput"),
    Row("query.p50", "query p50 (ms)", "time"),
    Row("query.p99", "query p99 (ms)", "time"),
    Row("query.hit_rate", "query hit rate (top 10)", "rate"),
    Row("recall.p50", "recall p50 (ms)", "time"),
    Row("compact.ms", "compact to 0.7 (ms)", "time"),
    Row("snapshot.ms", "snapshot, as status reports (ms)", "time"),
    Row("shutdown_ms", "shutdown incl. final snapshot (ms)", "time"),
    Row("snapshot.stall_ms", "snapshot stall, max-p50 (ms)", "time"),
    Row("snapshot.stall_max_ms", "slowest call during snapshots (ms)", "time"),
    Row("cold_start.median_ms", "cold start to 1st query (ms)", "time"),
    Row("first_write.median_ms", "first store after a start (ms)", "time"),
    Row("rss.peak_mib", "peak RSS (MiB)", "memory"),
    Row("rss.cold_mib", "peak RSS, cold start (MiB)", "memory"),
    Row("extra_servers.added_pss_mib", "each of servers 2-4 adds, PSS (MiB)", "memory"),
    Row("extra_servers.rss_mib", "RSS of servers 2-4 (MiB)", "memory"),
)

NOTES = (
    "x floor: the figure divided by the same figure for a no-op tool on the same SDK",
    "  (bench/noop_server.py). Per-call rows: each measured call is paired, in alternating order,",
    "  with a no-op call carrying the same request payload and a reply of the same size, on a",
    "  no-op server running alongside. bulk_store: the floor's throughput divided by the server's.",
    "  1.0 = as cheap as the SDK's own per-call cost; higher = slower or bigger.",
    "compact: budget set to the tokens in use (usage 1.0), auto_compact off, then compact(target_usage=0.7);",
    "  median of runs, each on its own copy of the loaded state.",
    "stall: small store calls and get of the stored item, back to back for a few seconds with",
    "  --snapshot-interval 1 (a snapshot each second);",
    "  max latency minus p50 of the same tool. Floor: the same calls as no-ops (the SDK's own jitter).",
    "shutdown: stdin closed to process exit after the load session (the server writes its snapshot).",
    "first store after a start: a small store before the timed compaction and before the stall loop,",
    "  so that what only a process's first write loads (the token encoding) is timed there.",
    "servers 2-4: started one by one on the loaded state dir beside the first, one query each; what",
    "  each adds to the summed PSS of all of them (shared pages count once), median. A server's",
    "  processes include a detached one it relays to (compactor's shared host), counted once; the",
    "  RSS row is of the processes each further server adds.",
)


def lookup(result: dict[str, Any], path: str) -> float | None:
    node: Any = result
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    if isinstance(node, bool) or not isinstance(node, int | float):
        return None
    return float(node)


def ratio(value: float | None, floor: float | None, kind: Kind) -> float | None:
    """How many times the floor's cost a figure is; None where a ratio means nothing."""
    if value is None or floor is None or kind == "rate":
        return None
    if kind == "throughput":
        return floor / value if value > 0 else None
    return value / floor if floor > 0 else None


def fmt_value(value: float | None, kind: Kind) -> str:
    if value is None:
        return "-"
    if kind == "rate":
        return f"{value * 100:.1f}%"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.2f}" if abs(value) >= 1 else f"{value:.3f}"


def fmt_ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def render_size(block: dict[str, Any]) -> str:
    servers: dict[str, dict[str, Any]] = block["servers"]
    floor: dict[str, Any] = block["floor"]
    plan = block["plan"]
    header = ["measure", *[part for name in servers for part in (name, "x floor")], "floor (no-op)"]
    rows: list[list[str]] = []
    for row in ROWS:
        floor_value = lookup(floor, row.path)
        cells = [row.label]
        for result in servers.values():
            value = lookup(result, row.path)
            paired = lookup(result.get("paired_floor", {}), row.path)
            base = paired if paired is not None else floor_value
            cells += [fmt_value(value, row.kind), fmt_ratio(ratio(value, base, row.kind))]
        cells.append(fmt_value(floor_value, row.kind))
        rows.append(cells)
    widths = [max(len(r[c]) for r in [header, *rows]) for c in range(len(header))]
    lines = [
        f"N = {block['size']:,}  ({block['corpus']['items_stored']:,} items stored: bulk_store of "
        f"{block['size']:,} in batches of {plan['batch']}, then {plan['store_calls']} single stores; "
        f"{plan['queries']} queries, {plan['recalls']} recalls, cold start x{plan['cold_starts']})",
        "  ".join(h.ljust(widths[0]) if i == 0 else h.rjust(widths[i]) for i, h in enumerate(header)),
    ]
    lines.append("-" * len(lines[-1]))
    for cells in rows:
        lines.append("  ".join(c.ljust(widths[0]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(cells)))
    for name, result in [*servers.items(), ("floor", floor)]:
        lines.extend(f"  ! {name}: {error}" for error in result.get("errors", []))
    return "\n".join(lines)


def render(report: dict[str, Any]) -> str:
    meta = report["meta"]
    head = (
        f"compactor benchmark  seed={meta['seed']}  quick={meta['quick']}  "
        f"python {meta['python']}  mcp {meta['mcp']}  cpus={meta['cpus']}"
    )
    blocks = [render_size(block) for block in report["sizes"]]
    if "context" in report:
        blocks.insert(0, render_context(report["context"]))
    if "import" in report:
        blocks.append(render_import(report["import"]))
    return "\n\n".join([head, *blocks, "\n".join(NOTES)]) + "\n"


# The rows README's performance section shows: the goals a user weighs, per size, beside the floor.
README_ROWS: tuple[tuple[str, str], ...] = (
    ("store.p50", "store, median (ms)"),
    ("bulk.items_per_s", "bulk_store (items/s)"),
    ("query.p50", "query, median (ms)"),
    ("compact.ms", "compact to 70% of the budget (ms)"),
    ("cold_start.median_ms", "start to the first answered query (ms)"),
    ("rss.peak_mib", "peak memory, RSS (MiB)"),
    ("extra_servers.added_pss_mib", "each further server on the state dir, PSS (MiB)"),
)


def readme_table(report: dict[str, Any]) -> str:
    """README's performance table from a results JSON: each size's figure and its ratio to the
    floor, then the floor of the largest size; the import of the corpus below it."""
    sizes = report["sizes"]
    head = ["", *[f"{b['size']:,} items" for b in sizes], "floor (no-op)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    kinds = {row.path: row.kind for row in ROWS}
    for path, label in README_ROWS:
        kind = kinds[path]
        cells = [label]
        for block in sizes:
            result = next(iter(block["servers"].values()))
            value = lookup(result, path)
            paired = lookup(result.get("paired_floor", {}), path)
            base = paired if paired is not None else lookup(block["floor"], path)
            r = ratio(value, base, kind)
            cells.append(fmt_value(value, kind) + ("" if r is None else f" ({fmt_ratio(r)})"))
        cells.append(fmt_value(lookup(sizes[-1]["floor"], path), kind))
        lines.append("| " + " | ".join(cells) + " |")
    imported = report.get("import", {})
    out = next(iter(imported.get("servers", {}).values()), {})
    if out.get("seconds") is not None:
        lines += [
            "",
            f"`compactor import` of {imported['items']:,} real agent events: {out['seconds']:.2f} s "
            f"(the CLI's own start: {out['floor_seconds']:.2f} s).",
        ]
    return "\n".join(lines)


def write_json(report: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(report, indent=2, sort_keys=True, default=str) + "\n")
    tmp.replace(path)


# The run README's performance table shows (tests/test_readme.py checks the two agree).
README_RESULTS = Path(__file__).resolve().parent / "data" / "bench-2026-12-03-large-18.json"


def main(argv: list[str] | None = None) -> int:
    """`python -m bench.report [RESULTS.json]`: README's performance table from a results file."""
    import json
    import sys

    args = sys.argv[1:] if argv is None else argv
    path = Path(args[0]) if args else README_RESULTS
    print(readme_table(json.loads(path.read_text())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
