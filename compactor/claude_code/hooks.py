"""Claude Code hooks: restore context when a session starts, save a digest before it compacts
and when it ends.

`session-start` reads the hook's JSON from stdin (`session_id`, `transcript_path`, `cwd`,
`source`: startup, resume, clear or compact) and answers with
`{"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": ...}}`: the
budgeted recall digest, asked with the project's last task when one was saved, plus, after a
compaction or on resume, what the pre-compact hook saved from this very session.

`pre-compact` and `session-end` read the transcript at `transcript_path` (claude_code/transcript.py),
digest it (summaries/digest.py: requirements, decisions, errors, files, open tasks) and store
the digest tagged `session:<id>`, through a Store on the state dir, which coordinates with a
server running on the same dir. Its requirements are where the project's last task comes from.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TextIO

from ..render import preview
from ..store import Store, StoreInput
from ..summaries.digest import Digest, digest
from .transcript import read_transcript

# Claude Code caps the context a hook adds at 10,000 characters (more is cut to a preview):
# stay under it with room for the JSON envelope.
HOOK_CONTEXT_CHARS: Final = 9_000
# The project's last task as recall's query from the SessionStart hook: the recall tool's own bound.
HOOK_TASK_QUERY_CHARS: Final = 2_000
# ... and as shown above that recall, so the agent knows what it was asked with.
HOOK_TASK_PREVIEW_CHARS: Final = 200
# Importance of each digest section: what the user asked for outranks what was tried.
DIGEST_IMPORTANCE: Final = {"requirements": 8, "tasks": 7, "decisions": 7, "errors": 6, "files": 5}

log = logging.getLogger(__name__)

SESSION_TAG = "session:"
ORIGIN_TAG = "claude-code"


def read_payload(stream: TextIO) -> dict[str, Any]:
    """The hook input. Empty or malformed input is logged and read as {}: a hook must never
    break the session it runs in."""
    raw = stream.read()
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except ValueError as exc:
        log.warning("hook input is not JSON (%s); continuing without it", exc)
        return {}
    except RecursionError:  # arrays in arrays, thousands deep: the decoder gives up
        log.warning("hook input is nested too deeply to read; continuing without it")
        return {}
    if not isinstance(value, dict):
        log.warning("hook input is not a JSON object; continuing without it")
        return {}
    return value


def _session_id(payload: dict[str, Any]) -> str:
    value = payload.get("session_id")
    return value.strip() if isinstance(value, str) else ""


def session_tag(session_id: str) -> str:
    # Tags are at most 64 characters; a Claude Code session id is a 36-character UUID.
    return SESSION_TAG + session_id[:56].lower()


# --- SessionStart ---------------------------------------------------------------------------
def session_context(store: Store | None, payload: dict[str, Any], limit: int = HOOK_CONTEXT_CHARS) -> str:
    """The text added to the session: recall, and this session's saved digest when the
    session continues (after a compaction or on resume)."""
    if store is None:
        return "compactor: no memories stored yet; store decisions, errors and requirements as you work."
    sid = _session_id(payload)
    saved = []
    if sid and payload.get("source") in ("compact", "resume"):
        saved = store.query(tags=session_tag(sid), limit=len(DIGEST_IMPORTANCE) * 3, include_archived=True)
    task = last_task(store)
    # What is saved from this session is shown in full below: the recall leaves it out (no item twice).
    recall = store.recall(limit=20, query=task or None, exclude=[hit.item.id for hit in saved])
    parts = ["compactor memory (use the compactor tools query/get/expand for anything not shown):"]
    if task:
        parts.append(f"Recalled for this project's last task: {preview(task, HOOK_TASK_PREVIEW_CHARS)}")
    parts.append(recall.text)
    if saved:
        parts.append("Saved from this session before it was compacted:")
        for hit in sorted(saved, key=lambda h: h.item.seq):
            parts.append(f"[{hit.item.id}] {hit.item.content}")
    text = "\n\n".join(p for p in parts if p)
    if len(text) > limit:
        tail = "\n… (cut to fit; query compactor for the rest)"
        text = text[: limit - len(tail)].rstrip() + tail
    return text


def last_task(store: Store) -> str:
    """The project's last task: the requests of the newest digest the pre-compact or session-end
    hook saved in this project (the session's opening request and its latest one), or "" when
    none was saved. The store's scope is the project."""
    digest = store.latest([ORIGIN_TAG, "requirements"])
    if digest is None:
        return ""
    asks = [ln[2:].strip() for ln in digest.content.split("\n") if ln.startswith("- ")]
    asks = list(dict.fromkeys(a for a in (asks[:1] + asks[-1:]) if a))
    return "\n".join(asks)[:HOOK_TASK_QUERY_CHARS]


def session_start_output(context: str) -> dict[str, Any]:
    return {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": context}}


# --- PreCompact, SessionEnd ------------------------------------------------------------------
@dataclass(slots=True)
class Saved:
    session_id: str
    stored: list[str] = field(default_factory=list)
    already: list[str] = field(default_factory=list)
    sections: dict[str, int] = field(default_factory=dict)
    lines: int = 0
    malformed: int = 0


_TITLES = {
    "requirements": "What the user asked for",
    "decisions": "Decisions made",
    "errors": "Errors hit",
    "files": "Files touched",
    "tasks": "Open tasks",
}


def _project(cwd: str) -> str:
    return os.path.basename(cwd.rstrip("/")) or cwd or "?"


def digest_inputs(d: Digest) -> list[tuple[str, StoreInput]]:
    """One item per non-empty section, with a content-derived id: the same transcript stores
    nothing new the second time."""
    sections: dict[str, list[str]] = {
        "requirements": d.requirements,
        "decisions": d.decisions,
        "errors": d.errors,
        "files": [f"edited {f}" for f in d.files_edited] + [f"read {f}" for f in d.files_read],
        "tasks": d.tasks,
    }
    short = d.session_id[:8] or "unknown"
    out: list[tuple[str, StoreInput]] = []
    for name, lines in sections.items():
        if not lines or (name == "files" and not d.files_edited):
            continue
        # The same head from pre-compact and session-end: a section unchanged since the session
        # compacted is the same item (a content-derived id), not a second copy.
        head = f"{_TITLES[name]} (Claude Code session {short}, project {_project(d.cwd)}):"
        content = head + "\n" + "\n".join(f"- {ln}" for ln in lines)
        summary = preview(f"{_TITLES[name]} in session {short}: " + "; ".join(lines[:4]), 200)
        digest = hashlib.blake2b(f"{d.session_id}\n{name}\n{content}".encode(), digest_size=10).hexdigest()
        tags = [session_tag(d.session_id or "unknown"), ORIGIN_TAG, name]
        inp = StoreInput(
            content=content,
            summary=summary,
            tags=tags,
            importance=DIGEST_IMPORTANCE[name],
            item_id=f"cc-{digest}",
        )
        out.append((name, inp))
    return out


def digest_transcript(path: Path, session_id: str = "", cwd: str = "") -> Digest:
    """The digest of the Claude Code transcript at `path`: read by its reader, then digested."""
    return digest(read_transcript(path), session_id=session_id, cwd=cwd)


def pre_compact(store: Store, payload: dict[str, Any]) -> Saved:
    """Digest the transcript and store it (PreCompact and SessionEnd alike). Raises ValueError
    when there is no transcript."""
    path_value = payload.get("transcript_path")
    if not isinstance(path_value, str) or not path_value:
        raise ValueError("the hook input has no transcript_path")
    path = Path(path_value).expanduser()
    if not path.is_file():
        raise ValueError(f"transcript {path} does not exist")
    cwd = payload.get("cwd") if isinstance(payload.get("cwd"), str) else ""
    d = digest_transcript(path, session_id=_session_id(payload), cwd=str(cwd or ""))
    saved = Saved(session_id=d.session_id, lines=d.lines, malformed=d.malformed)
    inputs = digest_inputs(d)
    if not inputs:
        return saved
    result = store.import_items([inp for _, inp in inputs])
    stored = {it.id for it in result.items}
    for name, inp in inputs:
        saved.sections[name] = inp.content.count("\n- ")
        (saved.stored if inp.item_id in stored else saved.already).append(str(inp.item_id))
    return saved
