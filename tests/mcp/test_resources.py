"""MCP beyond tools: the memory:// resources and the `recall` prompt, through the SDK's client."""

from __future__ import annotations

import anyio
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import Implementation

from compactor.mcp import build_server
from compactor.store import Store

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def client(store: Store) -> Client:
    return Client(build_server(store), mode="legacy", client_info=Implementation(name="pytest", version="1"))


async def test_resources_are_listed_and_read(store: Store):
    kept = store.store("We chose argon2id for password hashing.", summary="argon2id for passwords", pinned=True).item
    async with client(store) as c:
        with anyio.fail_after(10):
            listed = await c.list_resources()
            templates = await c.list_resource_templates()
        assert "memory://status" in [str(r.uri) for r in listed.resources]
        assert [t.uri_template for t in templates.resource_templates] == ["memory://items/{id}"]

        status = (await c.read_resource("memory://status")).contents[0]
        assert status.mime_type == "text/plain"
        text = status.text  # type: ignore[union-attr]
        assert f"{store.tokens_used:,} / {store.budget:,} tokens" in text
        assert "1 active (1 pinned)" in text and f"{kept.content_type} " in text and "d0" in text

        item = (await c.read_resource(f"memory://items/{kept.id}")).contents[0]
        body = item.text  # type: ignore[union-attr]
        assert kept.id in body and "argon2id for password hashing" in body and "argon2id for passwords" in body
        assert "History" in body and "Lineage" in body and "pinned" in body

        with pytest.raises(MCPError) as err:
            await c.read_resource("memory://items/nosuchid")
        assert "nosuchid" in str(err.value)


async def test_recall_prompt(store: Store):
    a = store.store("The staging database is on port 6543, not 5432.", importance=7).item
    async with client(store) as c:
        prompts = {p.name: p for p in (await c.list_prompts()).prompts}
        assert "recall" in prompts and prompts["recall"].description
        args = {arg.name: arg for arg in prompts["recall"].arguments or []}
        assert set(args) == {"query"} and args["query"].required is False

        plain = await c.get_prompt("recall")
        [msg] = plain.messages
        assert msg.role == "user" and a.id in msg.content.text  # type: ignore[union-attr]
        assert "Budget:" in msg.content.text  # type: ignore[union-attr]

        asked = await c.get_prompt("recall", {"query": "staging database port"})
        text = asked.messages[0].content.text  # type: ignore[union-attr]
        assert "The task: staging database port" in text and a.id in text


async def test_tools_alone_still_cover_what_resources_show(store: Store):
    """Clients without resources or prompts lose nothing: status, get and recall are tools."""
    async with client(store) as c:
        names = {t.name for t in (await c.list_tools()).tools}
    assert {"status", "get", "recall"} <= names


async def test_a_long_item_uri_is_not_echoed_back(store: Store):
    """A resource id has no schema cap: 5,000 characters came back whole in the error."""
    long_id = "x" * 5_000
    async with client(store) as c:
        with pytest.raises(MCPError) as err:
            await c.read_resource(f"memory://items/{long_id}")
    message = str(err.value)
    assert "x" * 100 not in message and len(message) < 400
    assert "of 5,000 characters (ids have at most 64)" in message
