"""The README is for users: two set-up commands, registration by absolute path (Docker too),
every CLI command, working hook settings, the lossless promises; the reference, the benchmark
figures and history live elsewhere."""

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
    session = README.split("## Command line", 1)[1].split("```console", 1)[1].split("```", 1)[0]
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
    [start] = hooks["SessionStart"]  # one entry covers every way a session starts
    assert set(start["matcher"].split("|")) == {"startup", "resume", "clear", "compact"}
    assert all(h["type"] == "command" and "compactor hook session-start" in h["command"] for h in start["hooks"])
    for event, command in (("PreCompact", "compactor hook pre-compact"), ("SessionEnd", "compactor hook session-end")):
        [entry] = hooks[event]
        assert entry["hooks"][0]["command"].startswith("/") and command in entry["hooks"][0]["command"]


def test_two_commands_set_everything_up():
    install = README.split("## Install", 1)[1].split("\n## ", 1)[0]
    user = re.findall(r"```bash\n(.*?)```", install, re.S)
    assert any("pipx install" in b and "compactor status" in b for b in user), "one command for a user"
    assert any("scripts/test" in b for b in user), "one command for the test suite"
    assert (ROOT / "scripts" / "test").stat().st_mode & 0o111
    assert "bash scripts/test" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_registration_uses_an_absolute_path_and_says_how_to_find_it():
    assert "which compactor" in README
    servers = [
        b["mcpServers"]["compactor"]
        for b in (json.loads(x) for x in re.findall(r"```json\n(.*?)```", README, re.S))
        if "mcpServers" in b
    ]
    assert len(servers) == 2  # Claude Code's .mcp.json and Cursor's
    assert all(s["command"].startswith("/") and s["args"][1].startswith("/") for s in servers)
    assert 'claude mcp add compactor -- "$(which compactor)"' in README


def test_docker_form_has_a_claude_line_and_the_bind_mount_fix():
    docker = README.split("### Docker", 1)[1].split("\n## ", 1)[0]
    assert (
        "claude mcp add compactor -- docker run -i --rm -v compactor-data:/data compactor --state-dir /data" in docker
    )
    assert '--user "$(id -u):$(id -g)"' in docker


def test_the_lossless_promises_are_stated():
    for promise in (
        "never out of existence",
        "none of them deletes anything",
        "**Every call ends within budget.**",
        "No setting and no automatic process deletes an item.",
        "removes them only with `--yes`",
        "`forget(id)` | The only deletion",
        "**A full disk makes memory read-only, never unsaved.**",
        "`compactor doctor --repair`",
    ):
        assert promise in README, promise


def test_reference_figures_and_history_live_elsewhere():
    for path in (
        "docs/tools.md",
        "docs/compaction.md",
        "docs/cli.md",
        "docs/architecture.md",
        "bench/RESULTS.md",
        "bench/README.md",
        "CLAUDE.md.example",
    ):
        assert f"({path})" in README, path
        assert (ROOT / path).exists(), path
    # Reference material lives in docs/; the allowance above 16,000 is the performance table,
    # the Claude Code plugin's set-up (its team settings block), and the install and team set-up
    # lines as a new user runs them (the first hour, issue 42).
    assert len(README) < 18_250
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", README), "dated history belongs to git"


def test_the_performance_section_shows_the_current_run_and_no_history():
    """One table, rendered from the results file bench/report.py names as current (the one
    bench/RESULTS.md shows too); no other figures, no dated runs."""
    from bench.report import README_RESULTS, readme_table

    section = README.split("## Performance", 1)[1].split("\n## ", 1)[0]
    assert readme_table(json.loads(README_RESULTS.read_text())) in section
    assert sum(line.startswith("|---") for line in section.splitlines()) == 1
    assert "(bench/RESULTS.md)" in section
    assert README_RESULTS.name in (ROOT / "bench" / "RESULTS.md").read_text(encoding="utf-8")
    assert README.count("## Performance") == 1 and "p50" not in README.replace(section, "")
