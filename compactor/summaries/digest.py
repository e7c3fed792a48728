"""An extractive digest of a Claude Code transcript (JSONL): what the user asked for, what was
decided, what failed, which files were touched, and what is still open. No model, no I/O
beyond reading the file; every line of the digest is text that appears in the transcript.

Transcript lines are JSON objects with `type` "user" or "assistant" and a `message` whose
`content` is a string or a list of blocks: `text`, `tool_use` (`name`, `input`, `id`) or
`tool_result` (`tool_use_id`, `content`, `is_error`). Anything else (summaries, snapshots,
system lines, malformed JSON) is skipped and counted.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import constants as C
from ..render import preview

_EDIT_TOOLS = {"Edit": "file_path", "MultiEdit": "file_path", "Write": "file_path", "NotebookEdit": "notebook_path"}
_READ_TOOLS = {"Read": "file_path"}
# Text Claude Code injects into user turns: command echoes, reminders, compaction summaries.
_INJECTED = re.compile(
    r"^\s*(?:<command-|<local-command-|<bash-|<user-prompt-submit-hook>|Caveat: |\[Request interrupted"
    r"|This session is being continued from a previous conversation)"
)
# The opening tag of a block Claude Code injects; the block runs to its closing tag.
_TAG_OPEN = re.compile(r"<(system-reminder|command-[\w-]+|local-command-[\w-]+)>")
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9`\"'(])|\n+")
_REQUIREMENT = re.compile(
    r"\b(?:must|should|shall|need(?:s|ed)? to|needs?|want|wants|please|make sure|ensure|don'?t|do not|never"
    r"|always|require[sd]?|has to|have to|can you|could you|let'?s|instead|only|avoid)\b",
    re.I,
)
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


def _lines(path: Path) -> Iterator[str]:
    with open(path, encoding="utf-8", errors="replace") as fh:
        yield from fh


def _blocks(message: Any) -> list[dict[str, Any]]:
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [b for b in content if isinstance(b, dict)]
    return []


def _text_of(content: Any) -> str:
    """A tool_result's content: a string or a list of text (and image) blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text")
    return ""


def _clean(text: str) -> str:
    """`text` without the injected blocks (an opening tag through its closing tag, the first
    one after it). Found with str.find, not one regex: a lazy match to a backreference scanned
    to the end for every opening tag left unclosed, so 20,000 of them took 22 s."""
    kept: list[str] = []
    pos = 0
    unclosed: set[str] = set()  # no closing tag after one opening: none after a later one either
    for m in _TAG_OPEN.finditer(text):
        name = m.group(1)
        if m.start() < pos or name in unclosed:
            continue
        end = text.find(f"</{name}>", m.end())
        if end < 0:
            unclosed.add(name)
            continue
        kept.append(text[pos : m.start()])
        pos = end + len(name) + 3
    kept.append(text[pos:])
    return "".join(kept).strip()


def _sentences(text: str) -> list[str]:
    return [s.strip(" -*\t") for s in _SENTENCE.split(text) if len(s.strip(" -*\t")) >= 8]


def _add(bucket: list[str], seen: set[str], text: str) -> None:
    line = preview(text, C.DIGEST_LINE_CHARS)
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


def _tool_label(name: str, tool_input: Any) -> str:
    if not isinstance(tool_input, dict):
        return name
    for key in ("command", "file_path", "notebook_path", "pattern", "url"):
        value = tool_input.get(key)
        if isinstance(value, str) and value:
            return f"{name} `{preview(value, 80)}`"
    return name


def digest_transcript(path: Path, session_id: str = "", cwd: str = "") -> Digest:
    """Read a transcript line by line and extract its digest. Malformed lines are skipped."""
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

    for raw in _lines(path):
        if not raw.strip():
            continue
        d.lines += 1
        try:
            entry = json.loads(raw)
        except (ValueError, RecursionError):  # RecursionError: nested thousands deep
            d.malformed += 1
            continue
        if not isinstance(entry, dict):
            d.malformed += 1
            continue
        if not d.session_id and isinstance(entry.get("sessionId"), str):
            d.session_id = entry["sessionId"]
        if not d.cwd and isinstance(entry.get("cwd"), str):
            d.cwd = entry["cwd"]
        kind = entry.get("type")
        if kind not in ("user", "assistant") or entry.get("isCompactSummary") or entry.get("isMeta"):
            continue
        for block in _blocks(entry.get("message")):
            btype = block.get("type")
            if kind == "user" and btype == "text":
                text = block.get("text")
                if not isinstance(text, str) or _INJECTED.match(text):
                    continue
                text = _clean(text)
                if not text:
                    continue
                sentences = _sentences(text) or [text]
                # The opening sentence states the task; the rest count when they sound like one.
                picked = sentences[:1] + [s for s in sentences[1:] if _REQUIREMENT.search(s)][:2]
                for s in picked:
                    _add(requirements, seen["req"], s)
            elif kind == "user" and btype == "tool_result":
                label = tools.get(str(block.get("tool_use_id")), "tool")
                if block.get("is_error") is True:
                    line = _error_line(_text_of(block.get("content")))
                    if line:
                        _add(errors, seen["err"], f"{label}: {line}")
            elif kind == "assistant" and btype == "text":
                text = block.get("text")
                if not isinstance(text, str):
                    continue
                for ln in text.splitlines():
                    m = _TODO.match(ln)
                    if m:
                        _add(todo_lines, seen["task"], m.group(1))
                for s in _sentences(_clean(text)):
                    if _DECISION.search(s):
                        _add(decisions, seen["dec"], s)
            elif kind == "assistant" and btype == "tool_use":
                name = str(block.get("name") or "tool")
                tool_input = block.get("input")
                tools[str(block.get("id"))] = _tool_label(name, tool_input)
                if not isinstance(tool_input, dict):
                    continue
                if name in _EDIT_TOOLS and isinstance(tool_input.get(_EDIT_TOOLS[name]), str):
                    edited[_relative(tool_input[_EDIT_TOOLS[name]], d.cwd)] = None
                elif name in _READ_TOOLS and isinstance(tool_input.get(_READ_TOOLS[name]), str):
                    read[_relative(tool_input[_READ_TOOLS[name]], d.cwd)] = None
                elif name == "TodoWrite" and isinstance(tool_input.get("todos"), list):
                    last_todos = [
                        f"[{t.get('status', 'pending')}] {preview(str(t.get('content', '')), C.DIGEST_LINE_CHARS)}"
                        for t in tool_input["todos"]
                        if isinstance(t, dict) and t.get("status") != "completed" and t.get("content")
                    ]

    d.requirements = _keep_ends(requirements, C.DIGEST_MAX_REQUIREMENTS)
    d.decisions = decisions[-C.DIGEST_MAX_DECISIONS :]
    d.errors = errors[-C.DIGEST_MAX_ERRORS :]
    d.files_edited = list(edited)[: C.DIGEST_MAX_FILES]
    d.files_read = [f for f in read if f not in edited][: C.DIGEST_MAX_FILES // 2]
    # The last todo list is the current plan; loose TODO lines from the text come after it.
    tasks = list(last_todos or [])
    tasks += [t for t in todo_lines if t not in tasks]
    d.tasks = tasks[-C.DIGEST_MAX_TASKS :] if last_todos is None else tasks[: C.DIGEST_MAX_TASKS]
    return d
