"""Texts that stopped the server, ran it out of memory or could not be stored, each well inside
the 1 MiB content limit: a run of a million whitespace characters (tiktoken's pattern gives up
on it with a Rust panic, a BaseException that ended the process), a path-like token of a million
characters (every tail of it was made before the long ones were dropped: hundreds of gigabytes),
and JSON nested 100,000 deep (the classifier's parse raised RecursionError).

Each is stored through a stdio server on a state dir (so through the shared host, with a
second session on it that must keep working), through the SDK's in-memory client, and by the
CLI's import, and read back whole."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from compactor.mcp import build_server
from compactor.store import Store
from tests.conftest import server_command, server_env
from tests.support.stdio_client import StdioServer

TEXTS = {
    "spaces": " " * 999_999 + "x",
    "tabs": "\t" * 999_999 + "y",
    "path": "a/" * 500_000 + "end",
    "mixed": "aZ9_-./" * 140_000,
    # Valid JSON, nested too deeply for Python's decoder: classifying it raised RecursionError.
    "deep-json": "[" * 100_000 + "]" * 100_000,
}
# Generous for a 2-core machine; each took 0.4-0.6 s in-process when fixed, and forever before.
SECONDS = 30


def _read_whole(get: Callable[[int], dict[str, Any]]) -> str:
    """An item's content, page after page as `get` returns it."""
    parts: list[str] = []
    offset: int | None = 0
    while offset is not None:
        page = get(offset)
        parts.append(page["content"])
        offset = page["next_offset"]
    return "".join(parts)


@pytest.mark.slow
@pytest.mark.parametrize("name", TEXTS)
def test_a_stdio_server_stores_it_and_the_session_beside_it_goes_on(tmp_path: Path, name: str) -> None:
    state = str(tmp_path / "state")
    with StdioServer("--state-dir", state) as first, StdioServer("--state-dir", state) as second:
        before = second.ok("store", content="stored by the other session")["id"]
        started = time.monotonic()
        stored = first.call("store", content=TEXTS[name])
        assert time.monotonic() - started < SECONDS
        assert not stored.get("isError"), stored["content"][0]["text"][:300]
        item = stored["structuredContent"]["id"]
        assert stored["structuredContent"]["tokens"] > 0
        assert _read_whole(lambda offset: second.ok("get", id=item, offset=offset)) == TEXTS[name]
        assert second.ok("get", id=before)["content"] == "stored by the other session"
        assert first.ok("status")["active_items"] >= 1


@pytest.mark.slow
def test_the_in_memory_client_stores_them_and_finds_the_path() -> None:
    async def go() -> None:
        async with Client(build_server(Store()), mode="legacy") as c:
            ids = {}
            for name, text in TEXTS.items():
                result = await c.call_tool("store", {"content": text})
                assert not result.is_error, result.content
                ids[name] = result.structured_content["id"]  # type: ignore[index]
            for name, text in TEXTS.items():
                parts: list[str] = []
                offset: int | None = 0
                while offset is not None:  # `get` returns a page at a time
                    got = (await c.call_tool("get", {"id": ids[name], "offset": offset})).structured_content
                    assert got is not None
                    parts.append(got["content"])
                    offset = got["next_offset"]
                assert "".join(parts) == text
            hits = await c.call_tool("query", {"query": "a/a/a/end"})
            assert ids["path"] in [h["id"] for h in hits.structured_content["items"]]  # type: ignore[index]

    anyio.run(go)


@pytest.mark.slow
def test_the_cli_imports_them(tmp_path: Path) -> None:
    export = tmp_path / "export.json"
    items = [{"id": f"odd-{name}", "content": text} for name, text in TEXTS.items()]
    export.write_text(json.dumps({"format": "compactor-export", "version": 1, "items": items}))
    state = str(tmp_path / "state")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            server_command(*args, "--state-dir", state, "--scope", "all")
            if args[0] != "import"
            else server_command(*args, "--state-dir", state),
            env=server_env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    done = cli("import", str(export))
    assert done.returncode == 0, done.stderr[-500:]
    assert f"Imported {len(TEXTS)} items" in done.stdout
    for name, text in TEXTS.items():
        shown = cli("show", f"odd-{name}", "--json")
        assert shown.returncode == 0, shown.stderr[-500:]
        assert json.loads(shown.stdout)["content"] == text


class _Panic(BaseException):
    """What pyo3 raises for a Rust panic: a BaseException, not an Exception."""


def test_a_panic_in_a_native_library_is_a_tool_error_and_the_server_goes_on() -> None:
    """Whatever the next native failure is, it ends one call with a clear error, not the
    server (and with it every session a shared host serves)."""
    store = Store()
    real = store.counter.count

    def count(text: str | None) -> int:
        if text and "PANIC" in text:
            raise _Panic("called `Result::unwrap()` on an `Err` value")
        return real(text)

    store.counter.count = count  # type: ignore[method-assign]

    async def go() -> None:
        async with Client(build_server(store), mode="legacy") as c:
            failed = await c.call_tool("store", {"content": "PANIC in the counter"})
            assert failed.is_error
            assert failed.content[0].text == (  # type: ignore[union-attr]
                "store: the call failed inside a library (_Panic); nothing was changed."
            )
            after = await c.call_tool("store", {"content": "stored after it"})
            assert not after.is_error
            status = await c.call_tool("status", {})
            assert status.structured_content["active_items"] == 1  # type: ignore[index]

    anyio.run(go)
