"""`compactor import` of the real trajectory corpus (11,646 events) into a fresh state dir,
timed from outside: the command a person runs, interpreter start and final fsync included.

The corpus's events become one JSON export (`{"items": [...]}`, what `compactor export`
writes): content, the event kind as a tag, importance by kind as the replay stores them, and
an id from trajectory and position, so importing twice adds nothing. The floor is the same
command's `status` on an empty state dir: starting the interpreter and the CLI.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.measure import server_env
from bench.stats import median
from evals.replay import DEFAULT_IMPORTANCE, IMPORTANCE_BY_KIND
from evals.revisits import default_corpus, load_events

RUNS = 3
TIMEOUT_S = 600


def export_file(corpus: Path, out: Path) -> int:
    """Write the corpus as a compactor JSON export; returns the number of items."""
    items = [
        {
            "id": f"{event.traj}-{event.seq}".lower(),
            "content": event.content,
            "tags": [event.kind],
            "importance": IMPORTANCE_BY_KIND.get(event.kind, DEFAULT_IMPORTANCE),
            "scope": "corpus",
        }
        for event in load_events(corpus)
    ]
    out.write_text(json.dumps({"items": items}))
    return len(items)


def _timed(command: list[str]) -> tuple[float, str | None]:
    started = time.perf_counter()
    done = subprocess.run(command, env=server_env(), capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    seconds = time.perf_counter() - started
    return seconds, None if done.returncode == 0 else (done.stderr.strip() or f"exit {done.returncode}")[-300:]


def measure_import(specs: list[str], runs: int = RUNS) -> dict[str, Any]:
    """Per server command: median wall seconds of `CMD import FILE --state-dir NEW` and of the
    floor (`CMD status --state-dir EMPTY`), runs alternating between servers."""
    corpus = default_corpus()
    if not corpus.exists():
        return {"error": f"corpus {corpus} not found (set COMPACTOR_CORPUS)"}
    out: dict[str, Any] = {"corpus": str(corpus)}
    with tempfile.TemporaryDirectory(prefix="compactor-bench-import-") as tmp:
        export = Path(tmp) / "corpus.json"
        out["items"] = export_file(corpus, export)
        samples: dict[str, dict[str, list[float]]] = {s: {"import": [], "floor": []} for s in specs}
        errors: dict[str, str] = {}
        for run in range(runs):
            for n, spec in enumerate(specs):
                base = shlex.split(spec)
                state = Path(tmp) / f"state-{n}-{run}"
                seconds, error = _timed([*base, "import", str(export), "--state-dir", str(state)])
                if error:
                    errors[spec] = error
                    continue
                samples[spec]["import"].append(seconds)
                floor, _ = _timed([*base, "status", "--state-dir", str(Path(tmp) / f"empty-{n}-{run}")])
                samples[spec]["floor"].append(floor)
        out["servers"] = {
            spec: {
                "seconds": median(s["import"]) if s["import"] else None,
                "runs": s["import"],
                "floor_seconds": median(s["floor"]) if s["floor"] else None,
                "items_per_s": out["items"] / median(s["import"]) if s["import"] else None,
                "error": errors.get(spec),
            }
            for spec, s in samples.items()
        }
    return out


def render_import(result: dict[str, Any]) -> str:
    if "error" in result:
        return f"compactor import: {result['error']}"
    lines = [f"compactor import of {result['corpus']} ({result['items']:,} events as a JSON export), median of runs:"]
    for spec, r in result["servers"].items():
        if r["seconds"] is None:
            lines.append(f"  {spec}: failed: {r['error']}")
            continue
        lines.append(
            f"  {spec}: {r['seconds']:.2f} s ({r['items_per_s']:,.0f} items/s); "
            f"CLI start floor (status, empty dir) {r['floor_seconds']:.2f} s"
        )
    return "\n".join(lines)
