"""Reading a Claude Code transcript (JSONL) into the events a digest reads (summaries/digest.py).

Transcript lines are JSON objects with `type` "user" or "assistant" and a `message` whose
`content` is a string or a list of blocks: `text`, `tool_use` (`name`, `input`, `id`) or
`tool_result` (`tool_use_id`, `content`, `is_error`). Anything else (summaries, snapshots,
system lines) is read for its session id and working directory only; malformed JSON is
counted and skipped. Claude Code's own text in a user turn (command echoes, reminders,
compaction summaries) is not what the user asked for, and is cut here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..render import preview
from ..summaries.digest import (
    Entry,
    Event,
    FileEdited,
    FileRead,
    Plan,
    Reply,
    Request,
    ToolCall,
    ToolFailed,
    Unreadable,
)

_EDIT_TOOLS = {"Edit": "file_path", "MultiEdit": "file_path", "Write": "file_path", "NotebookEdit": "notebook_path"}
_READ_TOOLS = {"Read": "file_path"}
# Text Claude Code injects into user turns: command echoes, reminders, compaction summaries.
_INJECTED = re.compile(
    r"^\s*(?:<command-|<local-command-|<bash-|<user-prompt-submit-hook>|Caveat: |\[Request interrupted"
    r"|This session is being continued from a previous conversation)"
)
# The opening tag of a block Claude Code injects; the block runs to its closing tag.
_TAG_OPEN = re.compile(r"<(system-reminder|command-[\w-]+|local-command-[\w-]+)>")


def read_transcript(path: Path) -> Iterator[Event]:
    """The events of the transcript at `path`, line by line, in its order."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        for raw in fh:
            if raw.strip():
                yield from _events(raw)


def _events(raw: str) -> Iterator[Event]:
    try:
        entry = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: nested thousands deep
        yield Unreadable()
        return
    if not isinstance(entry, dict):
        yield Unreadable()
        return
    session_id, cwd = entry.get("sessionId"), entry.get("cwd")
    yield Entry(session_id if isinstance(session_id, str) else "", cwd if isinstance(cwd, str) else "")
    kind = entry.get("type")
    if kind not in ("user", "assistant") or entry.get("isCompactSummary") or entry.get("isMeta"):
        return
    for block in _blocks(entry.get("message")):
        btype = block.get("type")
        if kind == "user" and btype == "text":
            text = block.get("text")
            if not isinstance(text, str) or _INJECTED.match(text):
                continue
            text = _clean(text)
            if text:
                yield Request(text)
        elif kind == "user" and btype == "tool_result":
            if block.get("is_error") is True:
                yield ToolFailed(str(block.get("tool_use_id")), _text_of(block.get("content")))
        elif kind == "assistant" and btype == "text":
            text = block.get("text")
            if isinstance(text, str):
                yield Reply(text, _clean(text))
        elif kind == "assistant" and btype == "tool_use":
            yield from _tool_use(block)


def _tool_use(block: dict[str, Any]) -> Iterator[Event]:
    name = str(block.get("name") or "tool")
    tool_input = block.get("input")
    yield ToolCall(str(block.get("id")), _tool_label(name, tool_input))
    if not isinstance(tool_input, dict):
        return
    if name in _EDIT_TOOLS and isinstance(tool_input.get(_EDIT_TOOLS[name]), str):
        yield FileEdited(tool_input[_EDIT_TOOLS[name]])
    elif name in _READ_TOOLS and isinstance(tool_input.get(_READ_TOOLS[name]), str):
        yield FileRead(tool_input[_READ_TOOLS[name]])
    elif name == "TodoWrite" and isinstance(tool_input.get("todos"), list):
        yield Plan(
            tuple(
                (str(t.get("status", "pending")), str(t.get("content", "")))
                for t in tool_input["todos"]
                if isinstance(t, dict) and t.get("status") != "completed" and t.get("content")
            )
        )


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


def _tool_label(name: str, tool_input: Any) -> str:
    if not isinstance(tool_input, dict):
        return name
    for key in ("command", "file_path", "notebook_path", "pattern", "url"):
        value = tool_input.get(key)
        if isinstance(value, str) and value:
            return f"{name} `{preview(value, 80)}`"
    return name
