"""Redactions on the real corpus, printed for eyeballing false positives, plus timings.

Run: PYTHONPATH=. python evals/redact_corpus.py [path/to/trajectories.jsonl]
These are real coding sessions on open-source repositories: almost nothing should be redacted.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from pathlib import Path

from compactor.content.redact import redact
from evals.revisits import default_corpus

CORPUS = Path(sys.argv[1]) if len(sys.argv) > 1 else default_corpus()


def main() -> None:
    events = [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines()]
    kinds: Counter[str] = Counter()
    hits = 0
    start = time.process_time()
    results = [(event, *redact(event["content"])) for event in events]
    elapsed = time.process_time() - start
    for event, out, found in results:
        if not found:
            continue
        hits += 1
        for r in found:
            kinds[r.kind] += r.count
        print(f"{event['traj']} #{event['seq']} ({event['kind']}): {[(r.kind, r.count) for r in found]}")
        for before, after in zip(event["content"].splitlines(), out.splitlines(), strict=False):
            if before != after:
                print(f"   - {before.strip()[:140]}\n   + {after.strip()[:140]}")
    print(f"\n{hits} of {len(events)} events redacted ({hits / len(events):.3%}); by kind: {dict(kinds)}")
    print(
        f"redact over the whole corpus ({sum(len(e['content']) for e in events) / 2**20:.1f} MiB): "
        f"{elapsed * 1000:.0f} ms CPU"
    )
    text = "\n".join(e["content"] for e in events)[: 1 << 20]
    best = min(_timed(text) for _ in range(5))
    print(f"redact 1 MiB of corpus text: {best:.1f} ms CPU (best of 5)")


def _timed(text: str) -> float:
    start = time.process_time()
    redact(text)
    return (time.process_time() - start) * 1000


if __name__ == "__main__":
    main()
