"""Derive the revisit queries of ISSUE 7 from real agent trajectories.

A revisit is a turn where the agent goes back to something an earlier tool result showed:
it re-reads a file, re-runs a command, or hits an error line it has seen before. Each revisit
carries the query the agent could have asked its memory at that moment (its thought and its
command, never any tool output) and the seqs of the earlier events that answer it.

`python -m evals.revisits` regenerates evals/data/revisits.jsonl byte for byte.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shlex
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parent.parent
REVISITS_FILE = REPO_ROOT / "evals" / "data" / "revisits.jsonl"
CORPUS_ENV = "COMPACTOR_CORPUS"

# ---- tuning constants (the lead may move these to compactor/constants.py) ----
# Commands whose output is the content of the files they name (mini-swe-agent reads with these).
READERS = frozenset({"cat", "nl", "head", "tail", "sed", "grep", "egrep", "fgrep", "rg", "awk", "less", "more"})
# grep flags that print names or counts instead of lines of the file.
GREP_NO_CONTENT_FLAGS = frozenset({"-l", "-L", "-c", "-q", "--files-with-matches", "--count", "--quiet"})
# An error line shorter than this ("error: 1") is too generic to call the same error.
MIN_ERROR_LINE_CHARS = 12
# ------------------------------------------------------------------------------

REVISIT_TYPES = ("file_reread", "command_rerun", "error_repeat")
COMMAND_KINDS = frozenset({"action", "code", "edit"})
RESULT_KINDS = frozenset({"observation", "error"})

_EXCEPTION_LINE = re.compile(
    r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]*(?:Error|Exception|Warning|Exit|Interrupt|Failure|"
    r"ImproperlyConfigured|DoesNotExist|NotFound)\b(?::.*)?$"
)
_PYTEST_LINE = re.compile(r"^(?:E\s+\S|FAILED\s+\S|ERROR\s+\S)")
_OTHER_ERROR_LINE = re.compile(r"(?:\berror:\s|No such file or directory)", re.IGNORECASE)
_HEX_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")
_EXIT_LINE = re.compile(r"^\[exit -?\d+\]$")


@dataclass(frozen=True)
class Event:
    traj: str
    seq: int
    step: int
    kind: str
    content: str
    files: tuple[str, ...]


@dataclass(frozen=True)
class Revisit:
    traj: str
    seq: int
    step: int
    type: str
    query: str
    relevant: tuple[int, ...]
    detail: str

    def to_json(self) -> str:
        record = {
            "traj": self.traj,
            "seq": self.seq,
            "step": self.step,
            "type": self.type,
            "query": self.query,
            "relevant": list(self.relevant),
            "detail": self.detail,
        }
        return json.dumps(record, ensure_ascii=False)

    @staticmethod
    def from_json(line: str) -> Revisit:
        raw = json.loads(line)
        return Revisit(
            traj=str(raw["traj"]),
            seq=int(raw["seq"]),
            step=int(raw["step"]),
            type=str(raw["type"]),
            query=str(raw["query"]),
            relevant=tuple(int(s) for s in raw["relevant"]),
            detail=str(raw["detail"]),
        )


def default_corpus() -> Path:
    """The corpus path: $COMPACTOR_CORPUS, else ../shared/corpus next to the repo, else /work/shared."""
    env = os.environ.get(CORPUS_ENV)
    if env:
        return Path(env)
    beside = REPO_ROOT.parent / "shared" / "corpus" / "trajectories.jsonl"
    if beside.exists():
        return beside
    return Path("/work/shared/corpus/trajectories.jsonl")


def load_events(path: Path) -> list[Event]:
    events: list[Event] = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            raw = json.loads(line)
            events.append(
                Event(
                    traj=str(raw["traj"]),
                    seq=int(raw["seq"]),
                    step=int(raw["step"]),
                    kind=str(raw["kind"]),
                    content=str(raw["content"]),
                    files=tuple(str(f) for f in raw.get("files", ())),
                )
            )
    return events


def group_trajectories(events: Iterable[Event]) -> dict[str, list[Event]]:
    """Trajectories in order of first appearance, each sorted by seq."""
    groups: dict[str, list[Event]] = {}
    for event in events:
        groups.setdefault(event.traj, []).append(event)
    for evs in groups.values():
        evs.sort(key=lambda e: e.seq)
    return groups


def normalize_command(command: str) -> str:
    return " ".join(command.split())


def normalize_line(line: str) -> str:
    # Object addresses differ between runs of the same failure.
    return _HEX_ADDRESS.sub("0x?", " ".join(line.split()))


def _shell_tokens(command: str) -> list[str]:
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        return list(lexer)
    except ValueError:  # unbalanced quotes: a plain split is good enough to classify
        return command.split()


def _segments(tokens: Sequence[str]) -> list[list[str]]:
    segments: list[list[str]] = [[]]
    for tok in tokens:
        if tok in {"|", "||", "&&", ";", "&", ";;"}:
            segments.append([])
        else:
            segments[-1].append(tok)
    return [s for s in segments if s]


def is_reader(command: str) -> bool:
    """True when the command prints the content of the files it names (cat, sed -n, nl, grep ...)."""
    segments = [s for s in _segments(_shell_tokens(command)) if s[0] != "cd"]
    if not segments:
        return False
    first = segments[0]
    word = Path(first[0]).name
    if word not in READERS:
        return False
    targets = [first[i + 1] for i, tok in enumerate(first[:-1]) if tok in {">", ">>"}]
    if any(t != "/dev/null" for t in targets):
        return False
    flags = [tok for tok in first[1:] if tok.startswith("-")]
    if word == "sed" and any(f.startswith("-i") or f == "--in-place" for f in flags):
        return False
    return not (word in {"grep", "egrep", "fgrep", "rg"} and any(f in GREP_NO_CONTENT_FLAGS for f in flags))


def _output_lines(result: Event) -> list[str]:
    """The result's output lines, without its `$ command` header and `[exit N]` marker."""
    lines = result.content.split("\n")
    if lines and lines[0].startswith("$ "):
        lines = lines[1:]
    if lines and _EXIT_LINE.match(lines[0].strip()):
        lines = lines[1:]
    return lines


def _exited_ok(result: Event) -> bool:
    lines = result.content.split("\n", 2)
    return not (len(lines) > 1 and _EXIT_LINE.match(lines[1].strip()))


def shows_file(result: Event, command: Event | None, path: str) -> bool:
    """Did this tool result show (part of) the content of `path`?"""
    if path not in result.files:
        return False
    if (
        command is not None
        and command.kind == "action"
        and path in command.files
        and is_reader(command.content)
        and _exited_ok(result)
    ):
        return True
    # grep -r style "path:line:text" lines, or a diff of the file.
    prefixes = tuple(f"{p}:" for p in (path, f"./{path}", f"/testbed/{path}"))
    diff_heads = (f"+++ b/{path}", f"--- a/{path}")
    return any(line.startswith(prefixes) or line.startswith(diff_heads) for line in _output_lines(result))


def key_error_line(content: str) -> str | None:
    """The line that names the error: the last exception / pytest / `error:` line of the output."""
    lines = content.split("\n")
    if lines and lines[0].startswith("$ "):
        lines = lines[1:]
    key: str | None = None
    for raw in lines:
        line = raw.strip()
        if _EXCEPTION_LINE.match(line) or _PYTEST_LINE.match(line) or _OTHER_ERROR_LINE.search(line):
            norm = normalize_line(line)
            if len(norm) >= MIN_ERROR_LINE_CHARS:
                key = norm
    return key


def _query_text(thought: Event | None, command: Event) -> str:
    parts = [e.content.strip() for e in (thought, command) if e is not None]
    return "\n".join(p for p in parts if p)


@dataclass
class _Turn:
    step: int
    thought: Event | None = None
    command: Event | None = None
    result: Event | None = None


def _turns(events: Sequence[Event]) -> list[_Turn]:
    turns: dict[int, _Turn] = {}
    for e in events:
        turn = turns.setdefault(e.step, _Turn(step=e.step))
        if e.kind == "thought" and turn.thought is None:
            turn.thought = e
        elif e.kind in COMMAND_KINDS and turn.command is None:
            turn.command = e
        elif e.kind in RESULT_KINDS and turn.result is None:
            turn.result = e
    return [turns[s] for s in sorted(turns)]


@dataclass
class _History:
    """What the earlier turns of one trajectory showed; a turn is learned only after it is judged."""

    shown_by_path: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    results_by_command: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    result_lines: list[tuple[int, frozenset[str]]] = field(default_factory=list)

    def revisits(self, turn: _Turn) -> list[Revisit]:
        cmd, result = turn.command, turn.result
        if cmd is None or turn.step == 0:
            return []
        query = _query_text(turn.thought, cmd)
        found: list[Revisit] = []

        def add(event: Event, kind: str, relevant: Iterable[int], detail: str) -> None:
            rel = tuple(sorted(relevant))
            found.append(Revisit(event.traj, event.seq, event.step, kind, query, rel, detail))

        norm = normalize_command(cmd.content)
        reread = [p for p in cmd.files if p in self.shown_by_path] if cmd.kind == "action" else []
        if reread and is_reader(cmd.content):
            add(cmd, "file_reread", {s for p in reread for s in self.shown_by_path[p]}, " ".join(reread))
        elif cmd.kind in {"action", "code"} and norm in self.results_by_command:
            add(cmd, "command_rerun", self.results_by_command[norm], norm[:200])
        key = key_error_line(result.content) if result is not None and result.kind == "error" else None
        if result is not None and key is not None:
            relevant = [seq for seq, lines in self.result_lines if key in lines]
            if relevant:
                add(result, "error_repeat", relevant, key)
        return found

    def learn(self, turn: _Turn) -> None:
        cmd, result = turn.command, turn.result
        if result is None:
            return
        if cmd is not None and cmd.kind in {"action", "code"}:
            self.results_by_command[normalize_command(cmd.content)].append(result.seq)
        for path in result.files:
            if shows_file(result, cmd, path):
                self.shown_by_path[path].append(result.seq)
        self.result_lines.append((result.seq, frozenset(map(normalize_line, _output_lines(result)))))


def derive(events: Sequence[Event]) -> list[Revisit]:
    """The revisits of one trajectory, in seq order. Only earlier turns are looked at."""
    history = _History()
    out: list[Revisit] = []
    for turn in _turns(events):
        out.extend(history.revisits(turn))
        history.learn(turn)
    return sorted(out, key=lambda r: (r.seq, REVISIT_TYPES.index(r.type)))


def derive_all(events: Iterable[Event]) -> list[Revisit]:
    """All revisits, by trajectory name then seq, whatever the order of the input."""
    out: list[Revisit] = []
    for _, evs in sorted(group_trajectories(events).items()):
        out.extend(derive(evs))
    return out


def render(revisits: Iterable[Revisit]) -> str:
    return "".join(r.to_json() + "\n" for r in revisits)


def load_revisits(path: Path = REVISITS_FILE) -> list[Revisit]:
    with path.open(encoding="utf-8") as fh:
        return [Revisit.from_json(line) for line in fh if line.strip()]


def count_by_type(revisits: Iterable[Revisit]) -> dict[str, int]:
    counts = Counter(r.type for r in revisits)
    return {t: counts.get(t, 0) for t in REVISIT_TYPES}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--corpus", type=Path, default=None, help="trajectories.jsonl (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=REVISITS_FILE)
    parser.add_argument("--check", action="store_true", help="exit 1 if --out differs from a regeneration")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")

    corpus: Path = args.corpus or default_corpus()
    revisits = derive_all(load_events(corpus))
    text = render(revisits)
    out: Path = args.out
    if args.check:
        same = out.exists() and out.read_text(encoding="utf-8") == text
        log.info("%s is %s", out, "up to date" if same else "STALE: run python -m evals.revisits")
        return 0 if same else 1
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    counts = count_by_type(revisits)
    log.info(
        "%d revisits from %s -> %s (%s)",
        len(revisits),
        corpus,
        out,
        ", ".join(f"{t} {n}" for t, n in counts.items()),
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
