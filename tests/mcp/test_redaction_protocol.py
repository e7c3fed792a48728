"""Issue 12 through the real protocol: a credential in content, summary and tags is in no reply
and in no state file, over the SDK's in-process client and over a stdio subprocess."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from compactor.mcp import build_server
from compactor.store import Store
from evals.secret_shapes import SHAPES
from tests.support.stdio_client import StdioServer

pytestmark = pytest.mark.anyio

_BY_NAME = {shape.name: shape for shape in SHAPES}
STRIPE = _BY_NAME["stripe secret sk_live_"].secret  # in content
JWT = _BY_NAME["bare jwt"].secret  # in summary
GITHUB = _BY_NAME["github classic pat ghp_"].secret  # in tags
SECRETS = (STRIPE, JWT, GITHUB)
ARGS: dict[str, Any] = {
    "content": f"billing worker charges with {STRIPE} (rotate monthly)",
    "summary": f"billing worker; session was {JWT}",
    "tags": ["billing", GITHUB],
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _assert_nowhere(where: str, data: str | bytes) -> None:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    for secret in SECRETS:
        assert secret not in text and secret.lower() not in text.lower(), (where, secret[:12])


def _state_files(state_dir: Path) -> list[Path]:
    files = [f for f in state_dir.rglob("*") if f.is_file()]
    assert files
    return files


def _check_store_reply(result: dict[str, Any]) -> str:
    _assert_nowhere("store reply", json.dumps(result))
    redacted = {r["kind"]: r["count"] for r in result["redacted"]}
    assert redacted == {"stripe_key": 1, "jwt": 1, "github_token": 1}
    assert result["tags"][0] == "billing"
    return str(result["id"])


async def test_sdk_client_never_sees_or_saves_the_secrets(state_dir: Path) -> None:
    store = Store(state_dir=state_dir)
    async with Client(build_server(store), mode="legacy") as client:

        async def call(tool: str, **args: Any) -> dict[str, Any]:
            with anyio.fail_after(10):
                res = await client.call_tool(tool, args)
            assert not res.is_error
            assert res.structured_content is not None
            _assert_nowhere(f"{tool} text", json.dumps([c.model_dump() for c in res.content]))
            return res.structured_content

        item_id = _check_store_reply(await call("store", **ARGS))
        got = await call("get", id=item_id)
        assert "[REDACTED:stripe_key]" in got["content"]
        _assert_nowhere("get", json.dumps(got))
        for words in ("billing worker", "rotate monthly"):
            _assert_nowhere("query", json.dumps(await call("query", query=words)))
        assert (await call("query", tags=["billing"]))["items"]
    store.close()
    for f in _state_files(state_dir):
        _assert_nowhere(str(f), f.read_bytes())


@pytest.mark.slow
def test_stdio_server_never_returns_or_saves_the_secrets(state_dir: Path) -> None:
    with StdioServer("--state-dir", str(state_dir)) as srv:
        result = srv.call("store", **ARGS)
        assert not result.get("isError")
        _assert_nowhere("store text", result["content"][0]["text"])
        item_id = _check_store_reply(result["structuredContent"])
        got = srv.call("get", id=item_id)
        assert "[REDACTED:stripe_key]" in got["structuredContent"]["content"]
        _assert_nowhere("get", json.dumps(got))
        _assert_nowhere("query", json.dumps(srv.call("query", query="billing worker")))
        scoped = srv.call("store", content="x", scope=f"proj-{GITHUB}")
        assert scoped.get("isError") and "credential" in scoped["content"][0]["text"]
    for f in _state_files(state_dir):
        _assert_nowhere(str(f), f.read_bytes())


# Issue 38: a few of the new families, in content, summary and tags, through both transports.
NEW = {
    name: _BY_NAME[name] for name in ("discord webhook url", "docker login -p", "vault hvs. token", "age secret key")
}
NEW_ARGS: dict[str, Any] = {
    "content": NEW["discord webhook url"].text + "\n" + NEW["docker login -p"].text,
    "summary": "deploy notes: " + NEW["vault hvs. token"].text,
    "tags": ["deploy", NEW["age secret key"].secret],
}


def _assert_no_new_secret(where: str, data: str | bytes) -> None:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    for name, shape in NEW.items():
        assert shape.secret not in text and shape.secret.lower() not in text.lower(), (where, name)


async def test_sdk_client_redacts_the_issue_38_families(state_dir: Path) -> None:
    store = Store(state_dir=state_dir)
    async with Client(build_server(store), mode="legacy") as client:
        with anyio.fail_after(10):
            stored = await client.call_tool("store", NEW_ARGS)
        assert not stored.is_error and stored.structured_content is not None
        redacted = {r["kind"]: r["count"] for r in stored.structured_content["redacted"]}
        assert redacted == {"chat_webhook": 1, "cli_password": 1, "vault_token": 1, "private_key": 1}
        with anyio.fail_after(10):
            got = await client.call_tool("get", {"id": stored.structured_content["id"]})
        _assert_no_new_secret("get", json.dumps([got.structured_content, [c.model_dump() for c in got.content]]))
        assert "[REDACTED:chat_webhook]" in json.dumps(got.structured_content)
    store.close()
    for f in _state_files(state_dir):
        _assert_no_new_secret(str(f), f.read_bytes())


@pytest.mark.slow
def test_stdio_server_redacts_the_issue_38_families(state_dir: Path) -> None:
    with StdioServer("--state-dir", str(state_dir)) as srv:
        result = srv.call("store", **NEW_ARGS)
        assert not result.get("isError")
        _assert_no_new_secret("store", json.dumps(result))
        got = srv.call("get", id=result["structuredContent"]["id"])
        _assert_no_new_secret("get", json.dumps(got))
        assert "[REDACTED:cli_password]" in got["structuredContent"]["content"]
        _assert_no_new_secret("query", json.dumps(srv.call("query", query="deploy notes")))
    for f in _state_files(state_dir):
        _assert_no_new_secret(str(f), f.read_bytes())
