"""The README documents every CLI subcommand and gives working Claude Code hook settings."""

from __future__ import annotations

import json
import re

from compactor import cli
from tests.conftest import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")


def parser_commands() -> list[str]:
    parser = cli.build_parser()
    action = next(a for a in parser._actions if a.dest == "command")
    names: list[str] = []
    for name, sub in action.choices.items():  # type: ignore[union-attr]
        nested = [a for a in sub._actions if getattr(a, "choices", None) and a.dest == "hook_event"]
        if nested:
            names += [f"{name} {event}" for event in nested[0].choices]
        else:
            names.append(name)
    return names


def test_every_subcommand_is_documented():
    commands = parser_commands()
    assert len(commands) >= 14
    missing = [c for c in commands if f"`compactor {c}" not in README]
    assert not missing, f"not in the README's command table: {missing}"


def test_readme_shows_real_output_of_status_tree_export_and_a_hook():
    session = README.split("```console", 1)[1].split("```", 1)[0]
    for command, output in (
        ("$ compactor status", "Budget   "),
        ("$ compactor tree", " d1 "),
        ("$ compactor export", "Wrote "),
        ("compactor hook pre-compact", "stored 5 digest items"),
        ("compactor hook session-start", '{"hookSpecificOutput": {"hookEventName": "SessionStart"'),
    ):
        assert command in session and output in session.split(command, 1)[1], command


def test_hook_settings_block_is_valid_and_complete():
    blocks = [json.loads(b) for b in re.findall(r"```json\n(.*?)```", README, re.S)]
    hooks = next(b["hooks"] for b in blocks if "hooks" in b)
    start = hooks["SessionStart"]
    assert {e["matcher"] for e in start} >= {"startup", "resume", "compact"}
    for entry in start:
        assert all(h["type"] == "command" and "compactor hook session-start" in h["command"] for h in entry["hooks"])
    [pre] = hooks["PreCompact"]
    assert pre["hooks"][0]["command"].startswith("compactor hook pre-compact")
