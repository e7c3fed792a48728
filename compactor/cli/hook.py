"""`compactor hook session-start|pre-compact|session-end`: Claude Code hook commands (JSON on stdin)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .common import EXIT_OK, CliError, Out, add_json, add_state_dir, database_of, has_state, opened, state_dir_of


def register(sub: Any) -> None:
    p = sub.add_parser(
        "hook",
        help="Claude Code hooks: session-start, pre-compact, session-end",
        description="Run as a Claude Code hook: reads the hook's JSON input on stdin.",
    )
    add_state_dir(p)
    events = p.add_subparsers(dest="hook_event", metavar="EVENT", required=True)

    s = events.add_parser(
        "session-start", help="print recall as SessionStart additionalContext", description=cmd_session_start.__doc__
    )
    add_state_dir(s)
    s.set_defaults(func=cmd_session_start)

    c = events.add_parser("pre-compact", help="store a digest of the transcript", description=cmd_pre_compact.__doc__)
    add_state_dir(c)
    add_json(c)
    c.set_defaults(func=cmd_pre_compact)

    e = events.add_parser(
        "session-end", help="store a digest of the transcript as the session ends", description=cmd_session_end.__doc__
    )
    add_state_dir(e)
    add_json(e)
    e.set_defaults(func=cmd_session_end)


def cmd_session_start(args: argparse.Namespace, out: Out) -> int:
    """SessionStart hook (one matcher: startup|resume|clear|compact). Prints
    {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": ...}} with
    the budgeted recall digest, asked with the project's last task (the requests pre-compact or
    session-end saved last in this project), and after a compaction what pre-compact saved from
    the session."""
    from ..claude_code import hooks  # with the transcript reader: hooks only, not every start of the server

    payload = hooks.read_payload(sys.stdin)
    if database_of(args) is None and not has_state(state_dir_of(args)):
        context = hooks.session_context(None, payload)
    else:
        with opened(args, cwd=_cwd(payload)) as store:
            context = hooks.session_context(store, payload)
    out.stream.write(json.dumps(hooks.session_start_output(context), ensure_ascii=False) + "\n")
    return EXIT_OK


def cmd_pre_compact(args: argparse.Namespace, out: Out) -> int:
    """PreCompact hook. Reads transcript_path (Claude Code's JSONL transcript) and stores an
    extractive digest before the conversation is compacted: what the user asked for, decisions,
    errors, files touched and open tasks, tagged session:<id>. Safe beside a running server."""
    return _save_digest(args, out, "pre-compact")


def cmd_session_end(args: argparse.Namespace, out: Out) -> int:
    """SessionEnd hook. Stores the same digest as pre-compact when a session ends (a section
    pre-compact already saved is not stored twice), so the project's last task is known to the
    next session's session-start even when the session never compacted."""
    return _save_digest(args, out, "session-end")


def _save_digest(args: argparse.Namespace, out: Out, event: str) -> int:
    from ..claude_code import hooks

    payload = hooks.read_payload(sys.stdin)
    with opened(args, create=True, cwd=_cwd(payload)) as store:
        try:
            saved = hooks.pre_compact(store, payload)
        except ValueError as exc:
            raise CliError(f"{exc}. Check the hook input Claude Code sent on stdin") from exc
    if out.json_mode:
        out.json(
            {
                "session_id": saved.session_id,
                "stored": saved.stored,
                "already_present": saved.already,
                "sections": saved.sections,
                "transcript_lines": saved.lines,
                "malformed_lines": saved.malformed,
            }
        )
        return EXIT_OK
    parts = ", ".join(f"{k} {v}" for k, v in saved.sections.items()) or "nothing to save"
    out.line(
        f"compactor hook {event}: session {saved.session_id or '?'}: stored {len(saved.stored)} digest items "
        f"({parts}); {len(saved.already)} already saved; {saved.malformed} malformed lines skipped."
    )
    return EXIT_OK


def _cwd(payload: object) -> str | None:
    """The project the hook fired in: Claude Code sends its working directory as `cwd`."""
    cwd = payload.get("cwd") if isinstance(payload, dict) else None
    return cwd if isinstance(cwd, str) and cwd else None
