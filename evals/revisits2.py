"""A second revisit derivation, written from scratch with other rules than evals/revisits.py (ISSUE 15.1).

The first derivation asks every revisit with the turn's thought and command. This one asks the
short query an agent would type when it goes back on purpose, and decides what is relevant by
its own rules:

- `file_reread`: an `action` whose first program (after any `cd DIR &&`) is a plain reader (`cat`,
  `head`, `tail`, `nl`, `sed -n` without `-i`, `grep`/`egrep`/`rg` without `-l/-L/-c/-q`) reads a
  path an earlier event showed. Query: the path(s) the command reads, nothing else. Relevant: the
  results (exit 0) of earlier reader commands on that path, and earlier `code`/`edit` commands that
  wrote the whole file with a `>` redirect (a heredoc): the agent's own text of it.
- `command_rerun`: an `action`/`code` command equal to an earlier one that had a result, after
  dropping a leading `cd /testbed &&`, trailing `2>&1` and `| head/tail` limiters, and collapsing
  whitespace; a re-read counts as `file_reread` only. Query: the command as written this time.
  Relevant: the results of those earlier commands.
- `error_repeat`: a result with a Python exception line that has a message (`pkg.SomeError: msg`;
  the first after the last `Traceback` header, else the first; pytest's `E ` dropped; hex
  addresses masked) occurring, as a substring, in an earlier result or in the task text. Query:
  that exception line. Relevant: those earlier events.

Neither query uses text of the relevant earlier events, nor output of the turn itself, with one
exception that is the point of the type: an `error_repeat` query is the exception line the agent
has just met (it is asked after the new output, when the agent wonders "seen this before?").
The paths of a file query are parsed from the agent's own command line (`/testbed/` and `./`
prefixes dropped, relative to a `cd DIR` when there is one), not taken from the corpus `files`.

`python -m evals.revisits2` writes evals/results/revisits2.jsonl (for reading; the replay derives
it on the fly) and prints the counts.
"""

from __future__ import annotations

import argparse
import posixpath
import re
import shlex
import sys
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):  # run as `python evals/revisits2.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evals.revisits import REPO_ROOT, REVISIT_TYPES, Event, Revisit, count_by_type, default_corpus, load_events

PLAIN_READERS = frozenset({"cat", "head", "tail", "nl", "sed", "grep", "egrep", "rg"})
GREP_NAME_FLAGS = frozenset({"-l", "-L", "-c", "-q", "--files-with-matches", "--count", "--quiet"})
# Programs whose first operand is a script or a pattern, not a file.
FIRST_OPERAND_IS_PROGRAM = frozenset({"sed", "grep", "egrep", "rg"})
# Flags of those readers that take a value (the value is not a file).
FLAGS_WITH_VALUE = frozenset({"-n", "-e", "-f", "-A", "-B", "-C", "-m", "--include", "--exclude", "-g"})
MIN_MESSAGE_CHARS = 3
QUERY_MAX_CHARS = 10_000  # the query tool's max_length

_PATHLIKE = re.compile(r"^[\w.@+-]*[/\w@+-]*\.[A-Za-z0-9_]{1,8}$|^[\w.@+-]+(?:/[\w.@+-]+)+$")
_EXCEPTION = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)\s*:\s*(\S.*)$")
_HEX = re.compile(r"0x[0-9a-fA-F]+")
_EXIT_MARK = re.compile(r"^\[exit -?\d+\]$")
_LIMITER = re.compile(r"\s*\|\s*(?:head|tail)(?:\s+-n)?(?:\s+-?\d+)?\s*$")
_CD_TESTBED = re.compile(r"^cd\s+/testbed\s*&&\s*")
_SEPARATORS = frozenset({"|", "||", "&&", ";", "&"})


@dataclass(frozen=True)
class Parsed:
    """What the second derivation reads from a command line."""

    reads: tuple[str, ...]  # paths a plain reader prints (empty when the command is not one)
    writes: tuple[str, ...]  # paths the command writes whole, by a `>` redirect


def _tokens(command: str) -> list[str]:
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        return list(lexer)
    except ValueError:
        return command.split()


def clean_path(path: str, cwd: str = "") -> str:
    if cwd and not path.startswith("/"):
        path = posixpath.join(cwd, path)
    path = posixpath.normpath(path)
    for prefix in ("/testbed/", "./"):
        if path.startswith(prefix):
            path = path[len(prefix) :]
    return "" if path in {".", "/testbed"} else path


def parse_command(command: str) -> Parsed:
    """The files a command reads with a plain reader, and the files it writes whole."""
    first_line = command.split("\n", 1)[0]  # a heredoc body is data, not a command
    segments: list[list[str]] = [[]]
    for tok in _tokens(first_line):
        if tok in _SEPARATORS:
            segments.append([])
        else:
            segments[-1].append(tok)
    segments = [s for s in segments if s]
    cwd = ""
    writes: list[str] = []
    for seg in segments:
        for i, tok in enumerate(seg[:-1]):
            if tok == ">" and seg[i + 1] != "/dev/null":
                writes.append(clean_path(seg[i + 1], cwd))
    while segments and segments[0][0] == "cd":
        cwd = clean_path(segments[0][1], "") if len(segments[0]) > 1 else ""
        segments = segments[1:]
    if not segments:
        return Parsed((), tuple(w for w in writes if w))
    seg = segments[0]
    program = posixpath.basename(seg[0])
    reads: list[str] = []
    redirected = any(t in {">", ">>"} and nxt != "/dev/null" for t, nxt in zip(seg, [*seg[1:], ""], strict=True))
    if program in PLAIN_READERS and not redirected:
        flags = [t for t in seg[1:] if t.startswith("-")]
        bad = (program == "sed" and ("-n" not in flags or any(f.startswith("-i") for f in flags))) or (
            program in {"grep", "egrep", "rg"} and any(f in GREP_NAME_FLAGS for f in flags)
        )
        if not bad:
            operands: list[str] = []
            skip = False
            for t in seg[1:]:
                if skip:
                    skip = False
                    continue
                if t.startswith("-"):
                    skip = t in FLAGS_WITH_VALUE and program != "sed" and t != "-n"
                    continue
                if t in {"<", ">", ">>", "&", "2>&1"} or t == "/dev/null":
                    continue
                operands.append(t)
            if program in FIRST_OPERAND_IS_PROGRAM and operands and not any(f in {"-e", "-f"} for f in flags):
                operands = operands[1:]
            reads = [clean_path(t, cwd) for t in operands if _PATHLIKE.match(t)]
    return Parsed(tuple(dict.fromkeys(p for p in reads if p)), tuple(dict.fromkeys(w for w in writes if w)))


def normalize_rerun(command: str) -> str:
    text = " ".join(command.split())
    text = _CD_TESTBED.sub("", text)
    while True:
        shorter = _LIMITER.sub("", text)
        shorter = re.sub(r"\s*2>&1\s*$", "", shorter)
        if shorter == text:
            return text
        text = shorter


def _squash(text: str) -> str:
    return _HEX.sub("0x?", " ".join(text.split()))


def exception_line(content: str) -> str | None:
    """The Python exception line (with a message) of a tool result, or None."""
    lines = content.split("\n")
    if lines and lines[0].startswith("$ "):
        lines = lines[1:]
    start = 0
    for i, line in enumerate(lines):
        if line.strip().startswith("Traceback (most recent call last)"):
            start = i + 1
    for raw in lines[start:]:
        line = raw.strip()
        if line.startswith("E ") and not raw.startswith(" "):
            line = line[1:].strip()
        m = _EXCEPTION.match(line)
        if m and len(m.group(1).strip()) >= MIN_MESSAGE_CHARS:
            return _squash(line)
    return None


def _exited_zero(result: Event) -> bool:
    parts = result.content.split("\n", 2)
    return not (len(parts) > 1 and _EXIT_MARK.match(parts[1].strip()))


@dataclass
class _Turn:
    step: int
    thought: Event | None = None
    command: Event | None = None
    result: Event | None = None


def _turns(events: Sequence[Event]) -> list[_Turn]:
    turns: dict[int, _Turn] = {}
    for e in events:
        t = turns.setdefault(e.step, _Turn(e.step))
        if e.kind == "thought":
            t.thought = t.thought or e
        elif e.kind in {"action", "code", "edit"}:
            t.command = t.command or e
        elif e.kind in {"observation", "error"}:
            t.result = t.result or e
    return [turns[s] for s in sorted(turns)]


@dataclass
class _Seen:
    showed: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    ran: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    texts: list[tuple[int, str]] = field(default_factory=list)  # earlier results and the task, squashed


def derive2(events: Sequence[Event]) -> list[Revisit]:
    """The second derivation's revisits of one trajectory, in seq order; only earlier turns count."""
    seen = _Seen()
    out: list[Revisit] = []
    for turn in _turns(events):
        cmd, result = turn.command, turn.result
        if turn.step == 0:
            if result is not None:
                seen.texts.append((result.seq, _squash(result.content)))
            continue
        parsed = parse_command(cmd.content) if cmd is not None else Parsed((), ())
        rerun_key = normalize_rerun(cmd.content) if cmd is not None else ""
        if cmd is not None:
            again = [p for p in parsed.reads if p in seen.showed] if cmd.kind == "action" else []
            if again:
                relevant = sorted({s for p in again for s in seen.showed[p]})
                query = " ".join(parsed.reads)
                out.append(Revisit(cmd.traj, cmd.seq, cmd.step, "file_reread", query, tuple(relevant), query))
            elif cmd.kind in {"action", "code"} and rerun_key in seen.ran:
                query = cmd.content.strip()[:QUERY_MAX_CHARS]
                rel = tuple(seen.ran[rerun_key])
                out.append(Revisit(cmd.traj, cmd.seq, cmd.step, "command_rerun", query, rel, rerun_key[:200]))
        if result is not None and result.kind in {"observation", "error"}:
            line = exception_line(result.content)
            if line is not None:
                relevant = [seq for seq, text in seen.texts if line in text]
                if relevant:
                    out.append(
                        Revisit(result.traj, result.seq, result.step, "error_repeat", line, tuple(relevant), line)
                    )
        # Learn the turn only after it is judged.
        if cmd is not None:
            for path in parsed.writes:
                if cmd.kind in {"code", "edit"}:
                    seen.showed[path].append(cmd.seq)
        if result is not None:
            if cmd is not None and cmd.kind in {"action", "code"}:
                seen.ran[rerun_key].append(result.seq)
            if cmd is not None and cmd.kind == "action" and _exited_zero(result):
                for path in parsed.reads:
                    seen.showed[path].append(result.seq)
            seen.texts.append((result.seq, _squash(result.content)))
    return sorted(out, key=lambda r: (r.seq, REVISIT_TYPES.index(r.type)))


def derive2_all(events: Iterable[Event]) -> list[Revisit]:
    groups: dict[str, list[Event]] = defaultdict(list)
    for e in events:
        groups[e.traj].append(e)
    out: list[Revisit] = []
    for traj in sorted(groups):
        out.extend(derive2(sorted(groups[traj], key=lambda e: e.seq)))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The second revisit derivation (ISSUE 15.1).")
    parser.add_argument("--corpus", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "evals" / "results" / "revisits2.jsonl")
    args = parser.parse_args(argv)
    revisits = derive2_all(load_events(args.corpus or default_corpus()))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(r.to_json() + "\n" for r in revisits), encoding="utf-8")
    trajs = {t: len({r.traj for r in revisits if r.type == t}) for t in REVISIT_TYPES}
    print(f"{len(revisits)} revisits: {count_by_type(revisits)} in {trajs} trajectories; wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
