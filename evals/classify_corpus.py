"""Content types detected on the real corpus, by the corpus's own event kind, plus timings.

Run: PYTHONPATH=. python evals/classify_corpus.py [path/to/trajectories.jsonl]
The corpus kinds (thought, action, observation, ...) are not content types, so this is a sanity
table, not an accuracy score: errors should land on `error`, issue texts on `prose`, and so on.
"""

from __future__ import annotations

import json
import random
import sys
import time
from collections import Counter
from pathlib import Path

from compactor.content.classify import ContentType, auto_tags, detect_type
from evals.revisits import default_corpus

CORPUS = Path(sys.argv[1]) if len(sys.argv) > 1 else default_corpus()


def best_of(n: int, fn, *args) -> tuple[float, float]:
    """Best CPU and wall time of `n` runs, in milliseconds."""
    cpu, wall = float("inf"), float("inf")
    for _ in range(n):
        c, w = time.process_time(), time.perf_counter()
        fn(*args)
        cpu, wall = min(cpu, time.process_time() - c), min(wall, time.perf_counter() - w)
    return cpu * 1000, wall * 1000


def main() -> None:
    events = [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines()]
    table: Counter[tuple[str, str]] = Counter()
    start = time.process_time()
    for event in events:
        table[(event["kind"], detect_type(event["content"]).value)] += 1
    elapsed = time.process_time() - start
    types = [t.value for t in ContentType]
    print(f"{len(events)} events classified in {elapsed * 1000:.0f} ms CPU")
    print("kind".ljust(12) + "".join(t[:11].rjust(12) for t in types))
    for kind in sorted({k for k, _ in table}):
        print(kind.ljust(12) + "".join(str(table[(kind, t)]).rjust(12) for t in types))

    # Corpus text stops at its first traceback; prose with no signal at all is the worst case.
    corpus_text = "\n".join(e["content"] for e in events)[: 1 << 20]
    rng = random.Random(1)
    words = [w for e in events if e["kind"] == "thought" for w in e["content"].split() if w.isalpha()]
    # No "Error"/"FAILED" and no keyword or command ("if", "cat") to open a line: nothing fires.
    keywords = {"if", "for", "while", "with", "try", "else", "except", "def", "class", "import", "from"}
    commands = {
        "cat",
        "ls",
        "cd",
        "echo",
        "grep",
        "rg",
        "sed",
        "awk",
        "git",
        "nl",
        "tar",
        "curl",
        "pytest",
        "mkdir",
    }
    commands |= {"chmod", "chown", "wget", "xargs", "npx"}
    words = [w for w in words if w.islower() and w not in keywords | commands]
    prose = "\n".join(" ".join(rng.choices(words, k=rng.randint(3, 15))) for _ in range(40000))[: 1 << 20]
    for name, text in (("corpus text", corpus_text), ("prose built from corpus words", prose)):
        cpu, wall = best_of(5, lambda t: auto_tags(t, detect_type(t)), text)
        kind = detect_type(text).value
        print(f"1 MiB of {name} ({kind}): detect_type + auto_tags {cpu:.1f} ms CPU, {wall:.1f} ms wall")


if __name__ == "__main__":
    main()
