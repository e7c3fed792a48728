"""The Claude Code plugin (.claude-plugin/, hooks/hooks.json, skills/): its manifests, and its MCP
server and hook commands run the way Claude Code runs them, from a clean copy of the checkout,
with `CLAUDE_PLUGIN_ROOT` pointing at it and a throwaway HOME. Claude Code's own CLI (npm
@anthropic-ai/claude-code, installed by scripts/test) validates the plugin, installs it from the
repository's marketplace and checks that its server connects; no model is involved."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from compactor.claude_code.hooks import session_tag
from compactor.mcp.server import TOOL_ORDER
from compactor.store import Store
from tests.conftest import ROOT
from tests.support.cc_transcript import sample
from tests.support.stdio_client import StdioServer

PLUGIN = json.loads((ROOT / ".claude-plugin" / "plugin.json").read_text(encoding="utf-8"))
MARKETPLACE = json.loads((ROOT / ".claude-plugin" / "marketplace.json").read_text(encoding="utf-8"))
HOOKS = json.loads((ROOT / "hooks" / "hooks.json").read_text(encoding="utf-8"))["hooks"]
README = (ROOT / "README.md").read_text(encoding="utf-8")
CLAUDE = ROOT / "node_modules" / ".bin" / "claude"
# One npm install for both: a --no-save install removes the packages an earlier one added.
CLAUDE_INSTALL = (
    "npm install --prefix . --no-save --no-audit --no-fund"
    " @modelcontextprotocol/inspector@2.12.0 @anthropic-ai/claude-code@2.1.332"
)
SID = "5f0c1d2e-7a3b-4c59-9e21-0b8d4f6a7c13"
# The plugin's server and hooks keep memory where the README's manual set-up does.
STATE_DIR = ".local/share/compactor"
# uvx resolves and builds compactor on its first start: minutes on a slow link, not seconds.
FIRST_START_TIMEOUT = 600


def skill_files() -> list[Path]:
    return sorted((ROOT / "skills").glob("*/SKILL.md"))


def frontmatter(path: Path) -> tuple[dict[str, Any], str]:
    text = path.read_text(encoding="utf-8")
    assert text.startswith("---\n"), f"{path}: no frontmatter"
    head, body = text[4:].split("\n---\n", 1)
    return yaml.safe_load(head), body


def readme_hook_commands() -> dict[str, tuple[str | None, str]]:
    """Event -> (matcher, command) of the README's manual hook settings."""
    blocks = [json.loads(b) for b in re.findall(r"```json\n(.*?)```", README, re.S)]
    hooks = next(b["hooks"] for b in blocks if "hooks" in b)
    return {e: (entries[0].get("matcher"), entries[0]["hooks"][0]["command"]) for e, entries in hooks.items()}


def test_manifests_parse_and_name_files_that_exist():
    assert re.fullmatch(r"[a-z0-9-]+", PLUGIN["name"])
    [entry] = MARKETPLACE["plugins"]
    assert MARKETPLACE["owner"]["name"] and entry["name"] == PLUGIN["name"]
    # The marketplace's one plugin is the repository itself.
    assert (ROOT / entry["source"] / ".claude-plugin" / "plugin.json").resolve() == (
        ROOT / ".claude-plugin" / "plugin.json"
    )
    # Components sit where Claude Code looks by default; the manifest names no other place.
    assert not {"hooks", "skills", "commands", "agents"} & set(PLUGIN)
    assert set(HOOKS) == {"SessionStart", "PreCompact", "SessionEnd"}
    assert skill_files(), "no skills/<name>/SKILL.md"
    for path in skill_files():
        meta, body = frontmatter(path)
        assert meta["name"] == path.parent.name and re.fullmatch(r"[a-z0-9-]+", meta["name"])
        assert "recall" in meta["description"] and len(body) > 500
    # `uvx --from ${CLAUDE_PLUGIN_ROOT} compactor` runs the project's `compactor` script.
    server = PLUGIN["mcpServers"]["compactor"]
    assert server["command"] == "uvx" and server["args"][:3] == ["--from", "${CLAUDE_PLUGIN_ROOT}", "compactor"]
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert 'compactor = "compactor.cli:main"' in pyproject.split("[project.scripts]", 1)[1]


def test_hooks_file_carries_the_readme_hook_commands():
    """The same events, matchers, subcommands and state dir as the README's manual settings;
    only the way compactor is started differs."""
    documented = readme_hook_commands()
    assert set(documented) == set(HOOKS)
    server_state = PLUGIN["mcpServers"]["compactor"]["args"][-2:]
    assert server_state == ["--state-dir", "${HOME}/" + STATE_DIR]
    for event, (matcher, command) in documented.items():
        [entry] = HOOKS[event]
        assert entry.get("matcher") == matcher, event
        [hook] = entry["hooks"]
        assert hook["type"] == "command"
        documented_args = command.split("/compactor ", 1)[1]  # after the absolute path to compactor
        assert hook["command"] == f'uvx --from "${{CLAUDE_PLUGIN_ROOT}}" compactor {documented_args}', event
        assert f'--state-dir "$HOME/{STATE_DIR}"' in hook["command"]


def test_the_skill_says_what_claude_md_example_says():
    """Plugin users get CLAUDE.md.example's instructions from the skill, word for word."""
    [path] = skill_files()
    _, body = frontmatter(path)
    rules = (ROOT / "CLAUDE.md.example").read_text(encoding="utf-8").split("\n\n", 2)[1:]
    assert rules and all(part.strip() in body for part in rules)


def test_readme_leads_with_the_plugin_and_shows_the_team_set_up():
    section = README.split("### Claude Code", 1)[1].split("\n### ", 1)[0]
    name, market = PLUGIN["name"], MARKETPLACE["name"]
    add, install = "/plugin marketplace add ", f"/plugin install {name}@{market}"
    assert section.index(add) < section.index(install) < section.index("claude mcp add")
    team = next(
        json.loads(b) for b in re.findall(r"```json\n(.*?)```", section, re.S) if "enabledPlugins" in json.loads(b)
    )
    assert team["enabledPlugins"] == {f"{name}@{market}": True}
    assert team["extraKnownMarketplaces"][market]["source"]["source"] in {"github", "git"}
    assert ".claude/settings.json" in section


# --- run as Claude Code runs them ------------------------------------------------------------


@pytest.fixture(scope="module")
def plugin_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clean copy of the checkout (what git would clone: tracked files plus new, unignored
    ones, so uncommitted work is tested too; no .venv, no node_modules), committed as a git
    repository, and compactor built from it by uvx once: the first start a user sees."""
    root = tmp_path_factory.mktemp("plugin") / "compactor"
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():  # a file deleted but not yet committed is listed too
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, root / name)
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@example.com"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "plugin"]):
        subprocess.run([*git, *args], cwd=root, check=True, capture_output=True)
    home = tmp_path_factory.mktemp("first-start-home")
    res = subprocess.run(
        ["uvx", "--from", str(root), "compactor", "--version"],
        env=plugin_env(root, home),
        capture_output=True,
        text=True,
        timeout=FIRST_START_TIMEOUT,
    )
    assert res.returncode == 0, res.stderr
    return root


def plugin_env(root: Path, home: Path) -> dict[str, str]:
    """What Claude Code gives a plugin's processes: CLAUDE_PLUGIN_ROOT, the user's HOME (a
    throwaway one here) and PATH; not this test run's PYTHONPATH, which would run the checkout
    instead of what uvx built. uv's cache stays the real one so that a test run reuses its builds."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["UV_CACHE_DIR"] = os.environ.get("UV_CACHE_DIR") or str(Path.home() / ".cache" / "uv")
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")  # uvx, pip-installed
    env |= {"HOME": str(home), "CLAUDE_PLUGIN_ROOT": str(root), "DISABLE_TELEMETRY": "1"}
    env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] = "1"
    return env


def expand(value: str, env: dict[str, str]) -> str:
    """Claude Code's ${VAR} expansion in an MCP server's command and args."""
    return re.sub(r"\$\{(\w+)\}", lambda m: env[m.group(1)], value)


def start_plugin_server(env: dict[str, str], cwd: Path) -> StdioServer:
    spec = PLUGIN["mcpServers"]["compactor"]
    command = [expand(spec["command"], env), *(expand(a, env) for a in spec["args"])]
    proc = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=cwd
    )
    return StdioServer(process=proc, client_name="claude-code")


def run_hook(event: str, payload: dict[str, Any], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The plugin's hook command for `event`, through a shell as Claude Code runs it."""
    [entry] = HOOKS[event]
    return subprocess.run(
        ["sh", "-c", entry["hooks"][0]["command"]],
        input=json.dumps({**payload, "hook_event_name": event}),
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


@pytest.mark.slow
def test_plugin_server_answers_initialize_and_tools_list(plugin_root, tmp_path):
    env = plugin_env(plugin_root, tmp_path / "home")
    with start_plugin_server(env, cwd=tmp_path) as server:
        listed = server.request("tools/list")["result"]["tools"]
        assert [t["name"] for t in listed] == list(TOOL_ORDER)
        status = server.ok("status")
    assert status["token_budget"] == 80_000  # the budget for a client named like Claude Code
    assert (tmp_path / "home" / STATE_DIR / "journal.jsonl").exists()


@pytest.mark.slow
def test_plugin_hooks_do_what_the_readme_says(plugin_root, tmp_path):
    """Save before compaction, bring back after it, save at the end, start the next session
    with the project's last task: on the memory the plugin's own server uses."""
    home, project = tmp_path / "home", tmp_path / "shop"
    (project / ".git").mkdir(parents=True)
    env = plugin_env(plugin_root, home)
    with start_plugin_server(env, cwd=project) as server:
        pinned = server.ok("store", content="Always run the linter before committing.", pinned=True)["id"]
    transcript = sample(SID, cwd=str(project)).write(tmp_path / f"{SID}.jsonl")
    event = {"session_id": SID, "transcript_path": str(transcript), "cwd": str(project)}

    saved = run_hook("PreCompact", {**event, "trigger": "auto", "custom_instructions": ""}, env)
    assert saved.returncode == 0, saved.stderr
    assert "stored 5 digest items" in saved.stdout and "1 malformed lines skipped" in saved.stdout

    after = run_hook("SessionStart", {**event, "source": "compact"}, env)
    assert after.returncode == 0, after.stderr
    out = json.loads(after.stdout)["hookSpecificOutput"]  # stdout is the hook's JSON and nothing else
    assert out["hookEventName"] == "SessionStart"
    context = out["additionalContext"]
    assert pinned in context and "Saved from this session" in context
    assert "keep Python 3.9 compatibility" in context and "[pending] Update tests for declined cards" in context

    end = run_hook("SessionEnd", {**event, "reason": "exit"}, env)
    assert end.returncode == 0, end.stderr
    assert "stored 0 digest items" in end.stdout and "5 already saved" in end.stdout  # not stored twice

    nxt = run_hook("SessionStart", {"session_id": "next", "cwd": str(project), "source": "startup"}, env)
    context = json.loads(nxt.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "Recalled for this project's last task: Refactor the checkout flow" in context and pinned in context

    store = Store(state_dir=home / STATE_DIR)
    try:
        assert store.get(pinned).pinned
        digest = store.query(tags=session_tag(SID), limit=20, include_archived=True, scope="all")
        assert len(digest) == 5  # one item a section, in the memory the server answers from
    finally:
        store.close()


def claude(home: Path, root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert CLAUDE.exists(), f"Claude Code's CLI is not installed: run `{CLAUDE_INSTALL}` in {ROOT} (scripts/test does)"
    env = plugin_env(root, home)
    del env["CLAUDE_PLUGIN_ROOT"]  # Claude Code sets it for the plugin's processes itself
    return subprocess.run(
        [str(CLAUDE), *args],
        env=env,
        cwd=home,
        capture_output=True,
        text=True,
        timeout=FIRST_START_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.slow
def test_claude_plugin_validate_passes_on_the_repository(tmp_path):
    res = claude(tmp_path, ROOT, "plugin", "validate", str(ROOT), "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    report = json.loads(res.stdout)
    assert report["success"] and report["manifest"]["type"] == "marketplace"
    assert not report["manifest"]["errors"] and not any(c["errors"] for c in report["contents"])
    provides = report["provides"]
    assert {(h["event"], h["command"]) for h in provides["hooks"]} == {
        (event, entries[0]["hooks"][0]["command"]) for event, entries in HOOKS.items()
    }
    assert [s["name"] for s in provides["mcpServers"]] == ["compactor"]
    assert provides["skills"] == [f"{PLUGIN['name']}:{p.parent.name}" for p in skill_files()]


@pytest.mark.slow
def test_claude_code_installs_the_plugin_and_its_server_connects(plugin_root, tmp_path):
    """The README's two commands, as `claude plugin ...` on the command line, from a clone."""
    home = tmp_path / "home"
    home.mkdir()
    added = claude(home, plugin_root, "plugin", "marketplace", "add", str(plugin_root))
    assert added.returncode == 0, added.stdout + added.stderr
    plugin_id = f"{PLUGIN['name']}@{MARKETPLACE['name']}"
    installed = claude(home, plugin_root, "plugin", "install", plugin_id)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    listed = claude(home, plugin_root, "mcp", "list")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    [line] = [x for x in listed.stdout.splitlines() if x.startswith("plugin:compactor:compactor:")]
    assert f"--state-dir {home}/{STATE_DIR}" in line and line.endswith("✔ Connected"), listed.stdout
