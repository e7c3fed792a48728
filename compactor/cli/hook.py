"""`compactor hook session-start|pre-compact`: Claude Code hook commands (JSON on stdin)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .. import hooks
from .common import EXIT_OK, CliError, Out, add_json, add_state_dir, has_state, opened, state_dir_of


def register(sub: Any) -> None:
    p = sub.add_parser(
        "hook",
        help="Claude Code hooks: session-start, pre-compact",
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


def cmd_session_start(args: argparse.Namespace, out: Out) -> int:
    """SessionStart hook (one matcher: startup|resume|clear|compact). Prints
    {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": ...}} with
    the budgeted recall digest, and after a compaction what pre-compact saved from the session."""
    payload = hooks.read_payload(sys.stdin)
    path = state_dir_of(args)
    if not has_state(path):
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
        f"compactor hook pre-compact: session {saved.session_id or '?'}: stored {len(saved.stored)} digest items "
        f"({parts}); {len(saved.already)} already saved; {saved.malformed} malformed lines skipped."
    )
    return EXIT_OK


def _cwd(payload: object) -> str | None:
    """The project the hook fired in: Claude Code sends its working directory as `cwd`."""
    cwd = payload.get("cwd") if isinstance(payload, dict) else None
    return cwd if isinstance(cwd, str) and cwd else None
