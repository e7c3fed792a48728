"""Redaction coverage: credential shapes caught / missed, near-misses changed, and false positives
on the real-agent corpus.

Run: python -m evals.redaction [path/to/trajectories.jsonl]
     python -m evals.redaction --sample tests/data/corpus_sample.jsonl [corpus]  (rewrite the sample)

The sample is what tests keep of the corpus (MIT, see its README) so they run without it: every
line near a credential-like word, with one line of context, each distinct window once.

A corpus hit counts as a false positive unless it is in REVIEWED: hits read by a person and judged
to be literal passwords (test fixtures such as `'password1': 'password123'`), which `redact` is
meant to replace. Any new hit is printed so it can be judged.
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

from compactor.content.redact import redact
from evals.revisits import default_corpus
from evals.secret_shapes import NEAR_MISSES, SHAPES

# (trajectory, seq): literal passwords in Django test code, replaced on purpose.
REVIEWED: frozenset[tuple[str, int]] = frozenset(
    {
        ("django__django-13741", 11),
        ("django__django-13741", 22),
        ("django__django-13741", 24),
        ("django__django-16333", 11),
        ("django__django-16333", 42),
        ("django__django-16333", 86),
    }
)


_RISKY = re.compile(
    r"passw|token|secret|api_?key|credential|basic |authoriz|bearer|curl |mysql|sshpass|redis-cli|://[^/\s]*@"
    r"|eyJ|machine |AccountKey|-----BEGIN|sk_|hf_|npm_|AIza|glpat|SK[0-9a-f]|:\d+:\S+:\S+:|--pass| -p\S| -u ",
    re.IGNORECASE,
)


def write_sample(corpus_path: Path, out: Path) -> int:
    seen: set[str] = set()
    rows: list[str] = []
    for line in corpus_path.read_text(encoding="utf-8").splitlines():
        event = json.loads(line)
        lines = event["content"].splitlines()
        keep = sorted({j for i, text in enumerate(lines) if _RISKY.search(text) for j in (i - 1, i, i + 1)})
        window: list[str] = []
        for j in keep:
            if 0 <= j < len(lines):
                if window and j - 1 not in keep:
                    window.append("...")
                window.append(lines[j][:400])
        text = "\n".join(window)
        if window and text not in seen:
            seen.add(text)
            rows.append(json.dumps({"traj": event["traj"], "seq": event["seq"], "text": text}, ensure_ascii=False))
    out.write_text("".join(row + "\n" for row in rows), encoding="utf-8")
    return len(rows)


def shapes() -> tuple[list[str], list[str]]:
    """Names of the shapes caught (secret gone) and missed."""
    caught: list[str] = []
    missed: list[str] = []
    for shape in SHAPES:
        out, _ = redact(shape.text)
        (missed if shape.secret in out else caught).append(shape.name)
    return caught, missed


def near_misses_changed() -> list[str]:
    return [text for text in NEAR_MISSES if redact(text)[0] != text]


def corpus(path: Path) -> tuple[int, list[str], float]:
    """Events in the corpus, descriptions of unreviewed hits, and CPU seconds spent."""
    events = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    false_positives: list[str] = []
    start = time.process_time()
    for event in events:
        out, found = redact(event["content"])
        if not found or (event["traj"], event["seq"]) in REVIEWED:
            continue
        changed = [
            f"    - {a.strip()[:140]}\n    + {b.strip()[:140]}"
            for a, b in zip(event["content"].splitlines(), out.splitlines(), strict=False)
            if a != b
        ]
        kinds = [(r.kind, r.count) for r in found]
        false_positives.append(f"  {event['traj']} #{event['seq']} ({event['kind']}) {kinds}\n" + "\n".join(changed))
    return len(events), false_positives, time.process_time() - start


def main(argv: list[str]) -> int:
    if argv[:1] == ["--sample"]:
        n = write_sample(Path(argv[2]) if len(argv) > 2 else default_corpus(), Path(argv[1]))
        print(f"wrote {n} windows to {argv[1]}")
        return 0
    caught, missed = shapes()
    print(f"credential shapes: {len(caught)} of {len(SHAPES)} caught, {len(missed)} missed")
    for name in missed:
        print(f"  missed: {name}")
    changed = near_misses_changed()
    print(f"near-misses changed: {len(changed)} of {len(NEAR_MISSES)}")
    for text in changed:
        print(f"  changed: {text!r} -> {redact(text)[0]!r}")
    path = Path(argv[0]) if argv else default_corpus()
    if not path.exists():
        print(f"corpus: {path} not found (set COMPACTOR_CORPUS)")
        return 0
    n, false_positives, seconds = corpus(path)
    print(
        f"corpus: {n} events, {len(REVIEWED)} reviewed hits, {len(false_positives)} false positives "
        f"({seconds * 1000:.0f} ms CPU)"
    )
    for fp in false_positives:
        print(fp)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
