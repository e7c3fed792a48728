"""The tool contract through the real protocol: the SDK's in-process client and a stdio subprocess.

Every argument is checked strictly (no "7" for 7, no true for 1, no "0.5" for 0.5), an unknown
argument is refused with the accepted ones named, and every such error is one plain sentence
per wrong argument: which argument, what it allows, what was sent; never pydantic's dump.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Annotated, Any

import anyio
import pytest
from mcp import Client
from mcp_types import CallToolResult
from pydantic import ValidationError, create_model

from compactor.mcp import build_server, sdk
from compactor.mcp.contract import derived_output_schema, derived_output_schemas, reply_model
from compactor.mcp.output_schemas import OUTPUT_SCHEMAS
from compactor.mcp.server import TOOL_ORDER
from compactor.store import Store
from tests.support.stdio_client import StdioServer

# (tool, arguments, the whole error text)
REFUSED: list[tuple[str, dict[str, Any], str]] = [
    (
        "store",
        {"content": "abc", "priority": 3},
        "store: unknown argument 'priority'; accepted: content, summary, tags, importance, pinned, scope.",
    ),
    ("status", {"verbose": True}, "status: unknown argument 'verbose'; it takes no arguments."),
    (
        "store",
        {"content": "abc", "importance": "7"},
        "store: importance must be an integer from 1 to 10, got the string '7'.",
    ),
    ("store", {"content": "abc", "importance": True}, "store: importance must be an integer from 1 to 10, got true."),
    (
        "store",
        {"content": "abc", "importance": 7.5},
        "store: importance must be an integer from 1 to 10, got the number 7.5.",
    ),
    (
        "store",
        {"content": "abc", "importance": 11},
        "store: importance must be an integer from 1 to 10, got the number 11.",
    ),
    ("store", {"content": "abc", "pinned": "true"}, "store: pinned must be true or false, got the string 'true'."),
    ("store", {"content": "abc", "pinned": 1}, "store: pinned must be true or false, got the number 1."),
    ("store", {"content": 5}, "store: content must be a string, got the number 5."),
    ("store", {}, "store: content is required: a string."),
    (
        "store",
        {"content": "abc", "tags": ["ok", 3]},
        "store: tags must be a list of strings, a string or null, got a list of 2 items.",
    ),
    (
        "compact",
        {"target_usage": "0.5"},
        "compact: target_usage must be a finite number from 0.0 to 1.0, got the string '0.5'.",
    ),
    ("compact", {"target_usage": True}, "compact: target_usage must be a finite number from 0.0 to 1.0, got true."),
    (
        "configure",
        {"auto_compact": "yes", "token_budget": "5000"},
        "configure: token_budget must be an integer from 1,000 to 100,000,000 or null, got the string '5000'. "
        "configure: auto_compact must be true, false or null, got the string 'yes'.",
    ),
    ("list", {"tier": "bogus"}, "list: tier must be one of 'active', 'archived', 'all', got the string 'bogus'."),
    ("get", {"id": ""}, "get: id must be a string of 1 to 64 characters, got the string ''."),
    (
        "store",
        {"content": "abc", "summary": "s" * 20_001},
        "store: summary must be a string of at most 20,000 characters or null, got a string of 20,001 characters.",
    ),
    (
        "bulk_store",
        {"items": [{"content": "a"}, {"content": "b", "importance": "7"}]},
        "bulk_store: items[1].importance must be an integer from 1 to 10, got the string '7'. Nothing was stored.",
    ),
    (
        "bulk_store",
        {"items": [{"content": "a", "priority": 1}]},
        "bulk_store: unknown field 'items[0].priority'; accepted: content, summary, tags, importance, pinned. "
        "Nothing was stored.",
    ),
    (
        "bulk_store",
        {"items": json.dumps([{"content": "a", "pinned": "yes"}])},
        "bulk_store: items[0].pinned must be true or false, got the string 'yes'. Nothing was stored.",
    ),
    (
        "bulk_store",
        {"items": "[" * 100_000 + "]" * 100_000},
        "bulk_store: items is nested too deeply to read; send a JSON array of flat objects. Nothing was stored.",
    ),
]
IDS = [f"{tool}-{'-'.join(args)}-{i}" for i, (tool, args, _) in enumerate(REFUSED)]

# What JSON clients legitimately send must still pass: an integer for a number, a JSON string
# for a list (the SDK parses those), null for an optional argument.
ACCEPTED: list[tuple[str, dict[str, Any]]] = [
    ("compact", {"target_usage": 1}),
    ("compact", {"target_usage": 0}),
    ("store", {"content": "tags as a JSON string", "tags": '["a", "b"]', "importance": 9, "pinned": False}),
    ("store", {"content": "tags as one string", "tags": "a,b", "summary": None, "scope": None}),
    ("configure", {"auto_compact_threshold": 1, "auto_compact": True}),
    ("bulk_store", {"items": [{"content": "one", "importance": 3, "pinned": True, "tags": ["x"]}]}),
]


def plain(text: str) -> None:
    assert "\n" not in text and "pydantic" not in text and "http" not in text and "type=" not in text, text


# --- in-process --------------------------------------------------------------------------------
async def _call(tool: str, args: dict[str, Any]) -> tuple[bool, str, Store, int]:
    store = Store()
    async with Client(build_server(store), mode="legacy") as c:
        with anyio.fail_after(30):
            res = await c.call_tool(tool, args)
    return bool(res.is_error), res.content[0].text, store, len(store)  # type: ignore[union-attr]


@pytest.mark.parametrize(("tool", "args", "expected"), REFUSED, ids=IDS)
def test_wrong_arguments_are_one_plain_sentence_in_process(tool: str, args: dict[str, Any], expected: str):
    is_error, text, store, count = anyio.run(_call, tool, args)
    assert is_error and text == expected
    plain(text)
    assert count == 0 and store.settings.token_budget == Store().settings.token_budget


@pytest.mark.parametrize(("tool", "args"), ACCEPTED, ids=[t for t, _ in ACCEPTED])
def test_what_json_clients_send_is_still_accepted_in_process(tool: str, args: dict[str, Any]):
    is_error, text, _, _ = anyio.run(_call, tool, args)
    assert not is_error, text


def test_tool_errors_are_worded_by_the_tool_not_the_sdk():
    is_error, text, _, _ = anyio.run(_call, "get", {"id": "nosuch"})
    assert is_error and text.startswith("get: No item with id 'nosuch'."), text


# --- stdio -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def srv() -> Iterator[StdioServer]:
    server = StdioServer("--log-level", "ERROR")
    yield server
    server.stop()


@pytest.mark.parametrize(("tool", "args", "expected"), REFUSED, ids=IDS)
def test_wrong_arguments_are_one_plain_sentence_over_stdio(
    srv: StdioServer, tool: str, args: dict[str, Any], expected: str
):
    before = srv.ok("status")
    result = srv.call(tool, **args)
    assert result["isError"] is True and result["content"][0]["text"] == expected
    after = srv.ok("status")
    assert (after["active_items"], after["token_budget"]) == (before["active_items"], before["token_budget"])


@pytest.mark.parametrize(("tool", "args"), ACCEPTED, ids=[t for t, _ in ACCEPTED])
def test_what_json_clients_send_is_still_accepted_over_stdio(srv: StdioServer, tool: str, args: dict[str, Any]):
    srv.ok(tool, **args)


def test_input_schemas_refuse_unknown_arguments(srv: StdioServer):
    """The published schemas say what the server enforces, so a client can check before sending."""
    tools = srv.request("tools/list")["result"]["tools"]
    assert tools and all(t["inputSchema"].get("additionalProperties") is False for t in tools)


def test_lone_surrogates_are_refused_in_process_as_over_stdio():
    """Over stdio a lone surrogate never reaches a tool (tests/system/test_protocol_abuse.py); in-process
    it would be stored as text that no JSON encoder can write back. Refused the same way."""
    is_error, text, _, count = anyio.run(_call, "store", {"content": "a\ud83db"})
    assert is_error and text == "store: content holds a lone surrogate (U+D83D), which is not Unicode text."
    assert count == 0
    is_error, text, _, count = anyio.run(_call, "bulk_store", {"items": [{"content": "ok", "tags": ["x\udc00"]}]})
    assert is_error and text == "bulk_store: items holds a lone surrogate (U+DC00), which is not Unicode text."
    assert count == 0


# --- output schemas ----------------------------------------------------------------------------
def test_the_kept_output_schemas_are_what_the_reply_models_give():
    """output_schemas.py keeps each tool's published output schema so that a start need not
    derive it; it must stay exactly what the SDK derives from the reply model, made lean."""
    derived = derived_output_schemas(build_server(Store()))
    assert list(OUTPUT_SCHEMAS) == list(TOOL_ORDER)
    stale = [name for name in TOOL_ORDER if derived[name] != OUTPUT_SCHEMAS[name]]
    assert not stale, f"reply models changed for {stale}: run `python scripts/write_output_schemas.py`"


def test_a_changed_reply_model_is_noticed():
    """The comparison above can fail: a field added to a reply model changes the derived schema."""
    server = build_server(Store())
    fn = sdk.get_tool(server, "status").fn  # type: ignore[union-attr]
    model = reply_model(fn)
    wider = create_model("StatusResult", __base__=model, added=(int, ...))

    def status() -> CallToolResult:
        raise NotImplementedError

    status.__annotations__["return"] = Annotated[CallToolResult, wider]  # a real class, not a string
    assert derived_output_schema(status) != OUTPUT_SCHEMAS["status"]
    assert "added" in derived_output_schema(status)["properties"]


def test_tools_list_publishes_the_kept_schemas_in_process_and_over_stdio(srv: StdioServer):
    async def listed() -> dict[str, Any]:
        async with Client(build_server(Store()), mode="legacy") as c:
            return {t.name: t.output_schema for t in (await c.list_tools()).tools}

    assert anyio.run(listed) == OUTPUT_SCHEMAS
    over_stdio = {t["name"]: t["outputSchema"] for t in srv.request("tools/list")["result"]["tools"]}
    assert over_stdio == OUTPUT_SCHEMAS


def test_every_reply_is_still_checked_against_its_model():
    """The tools are registered with their schema kept, not derived; the SDK still validates
    each reply's structured content against the reply model before it leaves the server."""
    server = build_server(Store())
    for tool in sdk.registered_tools(server):
        assert tool.fn_metadata.output_model is reply_model(tool.fn), tool.name
        with pytest.raises(ValidationError):
            tool.fn_metadata.convert_result(CallToolResult(content=[], structured_content={"bogus": 1}))
    ok = anyio.run(_call, "status", {})
    assert not ok[0]
