"""An extractive digest of an agent session's transcript: what the user asked for, what was
decided, what failed, which files were touched, and what is still open. No model and no I/O;
every line of the digest is text that appears in the transcript.

The digest reads the events below, in the transcript's order, and knows no agent's file
format: a reader turns one into them (claude_code/transcript.py reads Claude Code's JSONL).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from ..render import preview

# Pre-compact digest: a transcript can be megabytes; these keep each section to a screenful.
DIGEST_LINE_CHARS: Final = 240
DIGEST_MAX_REQUIREMENTS: Final = 15
DIGEST_MAX_DECISIONS: Final = 12
DIGEST_MAX_ERRORS: Final = 10
DIGEST_MAX_FILES: Final = 40
DIGEST_MAX_TASKS: Final = 15

_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9`\"'(])|\n+")
_REQUIREMENT = re.compile(
    r"\b(?:must|should|shall|need(?:s|ed)? to|needs?|want|wants|please|make sure|ensure|don'?t|do not|never"
    r"|always|require[sd]?|has to|have to|can you|could you|let'?s|instead|only|avoid)\b",
    re.I,
)
# A sentence that opens with a verb in the imperative asks for something too ("Keep money as
# Decimal."): the verbs a developer's request opens with.
_IMPERATIVE = re.compile(
    r"^(?:add|allow|avoid|call|cap|change|check|clean|convert|create|delete|document|do|drop|enable|ensure|fix"
    r"|handle|implement|include|keep|leave|limit|log|make|merge|move|prefer|put|raise|read|refactor|reject"
    r"|remove|rename|replace|return|reuse|run|send|set|show|skip|sort|split|start|stop|store|support|test"
    r"|treat|update|use|validate|write)\b",
    re.I,
)
# Sentences taken from the user's first message beyond its opening one (it states the task,
# and every instruction in it is a requirement), and from each later message.
_FIRST_REQUEST_EXTRA = 8
_LATER_REQUEST_EXTRA = 2
_DECISION = re.compile(
    r"\b(?:decid(?:e|ed|ing)|decision|i'?ll use|we'?ll use|i will use|going with|go with|chose|choose|opt(?:ed)? for"
    r"|instead of|rather than|switch(?:ed|ing)? to|the fix is|root cause|fixed by|because|so that|trade-?off)\b",
    re.I,
)
_TODO = re.compile(
    r"^\s*(?:[-*]\s*)?(?:TODO|FIXME|Next steps?|Remaining|Still to do|Open question)\b\s*[:\-]?\s*(.+)", re.I
)
_EXCEPTION = re.compile(r"\b[A-Z]\w*(?:Error|Exception)\b")
_ERROR_LINE = re.compile(
    r"(?:\b[A-Z]\w*(?:Error|Exception)\b|\berror\b|\bfailed\b|\bFAILED\b|\bfatal\b|Traceback|exit code [1-9])", re.I
)


# --- what a transcript reader yields -------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Entry:
    """A line of the transcript that was read, with the session and working directory it names
    ("" when it names none)."""

    session_id: str = ""
    cwd: str = ""


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A line that could not be read: counted, and skipped."""


@dataclass(frozen=True, slots=True)
class Request:
    """What the user typed, with the text the agent's harness injected removed."""

    text: str


@dataclass(frozen=True, slots=True)
class Reply:
    """The agent's text: as written, and with injected text removed."""

    text: str
    cleaned: str


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool the agent called, and how an error line names it ("Bash `pytest -q`")."""

    call_id: str
    label: str


@dataclass(frozen=True, slots=True)
class FileEdited:
    path: str


@dataclass(frozen=True, slots=True)
class FileRead:
    path: str


@dataclass(frozen=True, slots=True)
class Plan:
    """The agent's task list as it set it last: (status, task) of each task not completed."""

    tasks: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class ToolFailed:
    """A tool call's result that is an error, and the text it returned."""

    call_id: str
    output: str


Event = Entry | Unreadable | Request | Reply | ToolCall | FileEdited | FileRead | Plan | ToolFailed


@dataclass(slots=True)
class Digest:
    session_id: str
    cwd: str
    requirements: list[str] = field(default_factory=list)
    decisions: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    files_edited: list[str] = field(default_factory=list)
    files_read: list[str] = field(default_factory=list)
    tasks: list[str] = field(default_factory=list)
    lines: int = 0
    malformed: int = 0

    @property
    def empty(self) -> bool:
        return not (self.requirements or self.decisions or self.errors or self.files_edited or self.tasks)


def _sentences(text: str) -> list[str]:
    return [s.strip(" -*\t") for s in _SENTENCE.split(text) if len(s.strip(" -*\t")) >= 8]


def _add(bucket: list[str], seen: set[str], text: str) -> None:
    line = preview(text, DIGEST_LINE_CHARS)
    key = line.lower()
    if line and key not in seen:
        seen.add(key)
        bucket.append(line)


def _keep_ends(lines: list[str], limit: int) -> list[str]:
    """The first third (the task as first stated) and the most recent rest."""
    if len(lines) <= limit:
        return lines
    head = limit // 3
    return lines[:head] + lines[len(lines) - (limit - head) :]


def _relative(path: str, cwd: str) -> str:
    if cwd and os.path.isabs(path):
        try:
            rel = os.path.relpath(path, cwd)
        except ValueError:
            return path
        if not rel.startswith(".."):
            return rel
    return path


def _error_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    named = [ln for ln in lines if _EXCEPTION.search(ln) and not ln.startswith("Traceback")]
    if named:
        # A traceback ends with the exception it is about; elsewhere the first one says most.
        return named[-1] if any(ln.startswith("Traceback") for ln in lines) else named[0]
    flagged = [ln for ln in lines if _ERROR_LINE.search(ln)]
    return flagged[0] if flagged else (lines[0] if lines else "")


def digest(events: Iterable[Event], session_id: str = "", cwd: str = "") -> Digest:
    """The digest of a transcript read as `events`. `session_id` and `cwd`, when given, win over
    the ones the transcript names; file paths under the working directory are shown relative."""
    d = Digest(session_id=session_id, cwd=cwd)
    seen: dict[str, set[str]] = {k: set() for k in ("req", "dec", "err", "task")}
    requirements: list[str] = []
    decisions: list[str] = []
    errors: list[str] = []
    todo_lines: list[str] = []
    last_todos: list[str] | None = None
    edited: dict[str, None] = {}
    read: dict[str, None] = {}
    tools: dict[str, str] = {}
    requests = 0

    for event in events:
        match event:
            case Entry():
                d.lines += 1
                if not d.session_id and event.session_id:
                    d.session_id = event.session_id
                if not d.cwd and event.cwd:
                    d.cwd = event.cwd
            case Unreadable():
                d.lines += 1
                d.malformed += 1
            case Request(text=text):
                sentences = _sentences(text) or [text]
                # The opening sentence states the task; the rest count when they sound like one.
                extra = _FIRST_REQUEST_EXTRA if not requests else _LATER_REQUEST_EXTRA
                requests += 1
                asks = [s for s in sentences[1:] if _REQUIREMENT.search(s) or _IMPERATIVE.match(s)]
                picked = sentences[:1] + asks[:extra]
                for s in picked:
                    _add(requirements, seen["req"], s)
            case ToolFailed(call_id=call_id, output=output):
                line = _error_line(output)
                if line:
                    _add(errors, seen["err"], f"{tools.get(call_id, 'tool')}: {line}")
            case Reply(text=text, cleaned=cleaned):
                for ln in text.splitlines():
                    m = _TODO.match(ln)
                    if m:
                        _add(todo_lines, seen["task"], m.group(1))
                for s in _sentences(cleaned):
                    if _DECISION.search(s):
                        _add(decisions, seen["dec"], s)
            case ToolCall(call_id=call_id, label=label):
                tools[call_id] = label
            case FileEdited(path=path):
                edited[_relative(path, d.cwd)] = None
            case FileRead(path=path):
                read[_relative(path, d.cwd)] = None
            case Plan(tasks=plan):
                last_todos = [f"[{status}] {preview(task, DIGEST_LINE_CHARS)}" for status, task in plan]

    d.requirements = _keep_ends(requirements, DIGEST_MAX_REQUIREMENTS)
    d.decisions = decisions[-DIGEST_MAX_DECISIONS:]
    d.errors = errors[-DIGEST_MAX_ERRORS:]
    d.files_edited = list(edited)[:DIGEST_MAX_FILES]
    d.files_read = [f for f in read if f not in edited][: DIGEST_MAX_FILES // 2]
    # The last todo list is the current plan; loose TODO lines from the text come after it.
    tasks = list(last_todos or [])
    tasks += [t for t in todo_lines if t not in tasks]
    d.tasks = tasks[-DIGEST_MAX_TASKS:] if last_todos is None else tasks[:DIGEST_MAX_TASKS]
    return d
