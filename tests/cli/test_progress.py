"""Issue 17.3 and 17.5 through the CLI as a subprocess: progress on a terminal's stderr (never on
a pipe), Ctrl-C in an import that says what was stored and can be finished, fenced markdown
export, MEMORY.md descriptions that are not the title."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from compactor.claude_code.memory_md import entry_from_item
from compactor.render import fence
from tests.conftest import make_item, server_command, server_env


def _export_file(path: Path, n: int) -> Path:
    items = [{"id": f"imp{i:05d}", "content": f"small item number {i} about topic {i % 97}"} for i in range(n)]
    path.write_text(json.dumps({"format": "compactor-export", "version": 1, "items": items}))
    return path


def _cli(*argv: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        server_command(*argv), env=server_env(), capture_output=True, text=True, timeout=120, check=False, **kw
    )


class _PtyRun:
    """The CLI with stderr on a pseudo-terminal (stdout a pipe); what the terminal showed."""

    def __init__(self, *argv: str) -> None:
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen(
            server_command(*argv), env=server_env(), stdout=subprocess.PIPE, stderr=slave, text=True
        )
        os.close(slave)
        self.seen = b""

    def read_until(self, needle: bytes, timeout: float = 60) -> bool:
        deadline = time.monotonic() + timeout
        while needle not in self.seen and time.monotonic() < deadline:
            ready, _, _ = select.select([self.master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(self.master, 4096)
                except OSError:  # EIO: the child closed the terminal
                    return needle in self.seen
                if not chunk:
                    break
                self.seen += chunk
        return needle in self.seen

    def finish(self) -> tuple[int, str, str]:
        out, _ = self.proc.communicate(timeout=120)
        self.read_until(b"\x00", timeout=0.5)  # drain
        os.close(self.master)
        return self.proc.returncode, out, self.seen.decode("utf-8", "replace")


def _count_ids(state: Path) -> list[str]:
    res = _cli("--state-dir", str(state), "export")
    assert res.returncode == 0, res.stderr
    return [it["id"] for it in json.loads(res.stdout)["items"] if not it.get("depth")]


@pytest.mark.slow
def test_import_export_and_doctor_show_progress_on_a_terminal(tmp_path: Path) -> None:
    src = _export_file(tmp_path / "big.json", 3_000)
    state = tmp_path / "state"
    run = _PtyRun("--state-dir", str(state), "import", str(src))
    code, out, err = run.finish()
    assert code == 0, err
    assert "Imported 3000 items" in out
    assert "\rcompactor import: 1,000 of 3,000 items" in err
    assert "compactor import: 3,000 of 3,000 items" in err
    assert "/s" in err and err.rstrip(" ").endswith(("\n", "\r\n"))

    run = _PtyRun("--state-dir", str(state), "export", "-o", str(tmp_path / "out.json"))
    code, _, err = run.finish()
    assert code == 0, err
    assert "compactor export: " in err and " items" in err

    run = _PtyRun("--state-dir", str(state), "doctor")
    code, out, err = run.finish()
    assert "compactor doctor: replaying " in err and "journal lines" in err
    assert "compactor doctor: checking the index" in err


@pytest.mark.slow
def test_no_progress_when_stderr_is_a_pipe(tmp_path: Path) -> None:
    src = _export_file(tmp_path / "big.json", 3_000)
    state = tmp_path / "state"
    res = _cli("--state-dir", str(state), "import", str(src))
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""
    for argv in (["export", "-o", str(tmp_path / "o.json")], ["doctor"]):
        res = _cli("--state-dir", str(state), *argv)
        assert "\r" not in res.stderr and " of " not in res.stderr and "replaying" not in res.stderr


@pytest.mark.slow
def test_ctrl_c_mid_import_says_what_was_stored_and_rerun_finishes(tmp_path: Path) -> None:
    src = _export_file(tmp_path / "big.json", 20_000)
    state = tmp_path / "state"
    run = _PtyRun("--state-dir", str(state), "import", str(src))
    assert run.read_until(b"compactor import: 1,000 of 20,000"), run.seen
    run.proc.send_signal(signal.SIGINT)
    code, _, err = run.finish()
    assert code == 130, err
    assert "compactor import: interrupted after storing " in err
    assert "Run the same command again to finish (items already present are skipped)." in err
    stored = int(err.split("interrupted after storing ")[1].split(" of ")[0].replace(",", ""))
    assert 1_000 <= stored < 20_000 and stored % 1_000 == 0  # whole chunks only
    ids = _count_ids(state)
    assert len(ids) == stored == len(set(ids))

    res = _cli("--state-dir", str(state), "import", str(src))
    assert res.returncode == 0, res.stderr
    assert f"; {stored} were already present" in res.stdout
    ids = _count_ids(state)
    assert len(ids) == 20_000 == len(set(ids))


def test_fence_is_longer_than_any_backtick_run() -> None:
    assert fence("plain") == "```\nplain\n```"
    assert fence("a ```` b", "text").startswith("`````text\n")


@pytest.mark.slow
def test_markdown_export_keeps_content_fenced(tmp_path: Path) -> None:
    state = tmp_path / "state"
    content = "# heading in code\nprint('x')\n```python\nnested = 1\n```\n## not a section either"
    src = tmp_path / "one.json"
    src.write_text(json.dumps({"items": [{"id": "fenced01", "content": content, "summary": "a\n# b"}]}))
    assert _cli("--state-dir", str(state), "import", str(src)).returncode == 0
    res = _cli("--state-dir", str(state), "export", "--format", "markdown")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    start = lines.index("````text")
    # Outside the fence, the only headings are the export's own: the title and one per item.
    outside = lines[:start] + lines[start + 8 :]
    assert [ln for ln in outside if ln.startswith("#")] == [lines[0], next(ln for ln in lines if ln.startswith("## "))]
    assert lines[start + 1 : start + 7] == content.splitlines()
    assert lines[start + 7] == "````"
    assert "**Summary:** a # b" in res.stdout


@pytest.mark.parametrize(
    ("content", "summary"),
    [
        ("Use uv for installs\n\nIt resolves in under a second. Pip took a minute.", None),
        ("Deploy process. Run make deploy from main, never from a branch.", None),
        ("Deploy process\n\nRun make deploy from main.", "Deploy process"),
        ("just one line", None),
        ("# Title here\n\nBody sentence one. Body two.", None),
    ],
)
def test_memory_md_description_is_not_the_title(content: str, summary: str | None) -> None:
    entry = entry_from_item(make_item(id="memdesc01", content=content, summary=summary, importance=8))
    assert entry.description
    assert entry.description.strip(" .…").lower() != entry.name.strip(" .…").lower()
    assert not entry.name.lower().startswith(entry.description.strip(" .…").lower())


@pytest.mark.slow
def test_memory_md_export_index_descriptions_differ_from_titles(tmp_path: Path) -> None:
    state = tmp_path / "state"
    src = tmp_path / "in.json"
    items = [
        {"id": "memtitle1", "content": "Prefer ruff over flake8\n\nIt is one tool and fast.", "importance": 9},
        {"id": "memtitle2", "content": "Tests run with pytest -q. The slow ones are marked.", "importance": 9},
    ]
    src.write_text(json.dumps({"items": items}))
    assert _cli("--state-dir", str(state), "import", str(src)).returncode == 0
    out = tmp_path / "mem"
    res = _cli("--state-dir", str(state), "export", "--format", "memory-md", "-o", str(out))
    assert res.returncode == 0, res.stderr
    index = (out / "MEMORY.md").read_text()
    assert "- [Prefer ruff over flake8](" in index and "— It is one tool and fast." in index
    assert "— The slow ones are marked." in index


def test_mcp_markdown_export_keeps_content_fenced() -> None:
    import anyio
    from mcp import Client

    from compactor.mcp import build_server
    from compactor.store import Store

    store = Store()
    store.store("# not a heading\n```\ncode\n```\nend", summary="a summary\n# not a heading either")

    async def go() -> str:
        async with Client(build_server(store), mode="legacy") as client:
            result = await client.call_tool("export", {"format": "markdown"})
            return str(result.structured_content["text"])

    text = anyio.run(go)
    assert "\n````\n# not a heading\n```\ncode\n```\nend\n````\n" in text
    assert "\n# not a heading" not in text.replace("````\n# not a heading", "")


# --- the one-time re-index of a state dir saved by an older version (ISSUE 40) ---------------

_PROSE = ("retrying the payment charged the card twice", "connection pools timed out", "parsers failed")


def _saved_by_version_3(state: Path) -> None:
    """A state dir whose index an older tokenizer (no stem terms) saved: its prose is indexed again."""
    from compactor.store import Store
    from tests.support.old_tokenizer import tokenizer_version

    with tokenizer_version(3):
        old = Store(state_dir=state)
        for text in _PROSE:
            old.store(text)
        old.close_with_snapshot()


def test_a_load_that_re_indexes_tells_its_progress_and_a_current_one_does_not(tmp_path: Path) -> None:
    from compactor.store import Store

    state = tmp_path / "state"
    _saved_by_version_3(state)
    calls: list[tuple[int, int]] = []
    Store(state_dir=state, load_progress=lambda done, total: calls.append((done, total))).close_with_snapshot()
    assert calls == [(len(_PROSE), len(_PROSE))]
    calls.clear()
    Store(state_dir=state, load_progress=lambda done, total: calls.append((done, total))).close()
    assert calls == []  # saved as this version's: nothing to index again


@pytest.mark.slow
def test_status_and_a_server_start_show_the_re_index_on_a_terminal(tmp_path: Path) -> None:
    state = tmp_path / "state"
    _saved_by_version_3(state)
    piped = _cli("--state-dir", str(state), "status")
    assert piped.returncode == 0 and "re-indexed" not in piped.stderr  # not a terminal: nothing drawn
    _saved_by_version_3(state2 := tmp_path / "state2")
    run = _PtyRun("--state-dir", str(state2), "status")
    code, out, shown = run.finish()
    assert code == 0 and "items" in out
    assert f"compactor status: {len(_PROSE)} of {len(_PROSE)} items re-indexed" in shown
    _saved_by_version_3(state3 := tmp_path / "state3")
    master, slave = pty.openpty()
    server = subprocess.Popen(
        server_command("--state-dir", str(state3), "--no-share"),
        env=server_env(),
        stdin=subprocess.DEVNULL,  # no client: the server loads, then ends
        stdout=subprocess.PIPE,
        stderr=slave,
    )
    os.close(slave)
    seen = b""
    try:
        server.communicate(timeout=60)
        while select.select([master], [], [], 0.5)[0]:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the server closed the terminal
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(master)
    assert f"compactor serve: {len(_PROSE)} of {len(_PROSE)} items re-indexed".encode() in seen
