"""Raw protocol abuse over a real `compactor` subprocess: what no well-behaved client sends.

After every abuse the server must still answer a normal tools/call, and its stdout must carry
only JSON-RPC lines. Where JSON-RPC 2.0 / MCP requires an error reply we assert it; where the
MCP SDK (mcp 2.3) answers nothing, we assert that too and say so, because it is the SDK's stdio
transport, not our code, that decides:

- A line that is not valid JSON gets -32700 (Parse error); valid JSON that is not a JSON-RPC
  message object (an array, a number, a string, null, "jsonrpc": "1.0", params that are not an
  object) gets -32600 (Invalid Request), with the request's id when it can be
  read, else null (JSON-RPC 2.0 section 5.1). The SDK's stdio reader drops such lines silently;
  compactor's transport wrapper (server._run_stdio) answers them.
- Valid messages that need no answer (an unknown notification, a response or error the server
  never asked for) get none; the SDK also reads a request with an object or null id as a
  notification, so that gets none either.
- A JSON string with a lone surrogate escape ("\\ud800") fails the SDK's JSON parser: the whole
  message is refused (-32600) with the request's id, so the client does not wait forever; lone
  surrogates never reach a tool.
- The SDK's parser accepts the non-JSON literals NaN and Infinity; the tools' schemas then
  reject them as a tool error ("finite number").
- Invalid UTF-8 bytes are refused (-32700, with the request's id and where the bad byte is),
  never stored as replacement characters (U+FFFD) behind a success reply.
- A client that never reads its replies stops being read from (backpressure): the server's
  memory stays flat, and every reply is delivered once the client reads again.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from bench import proc
from tests.support.stdio_client import StdioServer

BIG = 50 << 20  # the 50 MB line of the issue


@pytest.fixture(scope="module")
def srv() -> Iterator[StdioServer]:
    server = StdioServer("--log-level", "ERROR")
    yield server
    server.stop()


_next_id = iter(range(10_000, 10**9))


def exchange(srv: StdioServer, raw: bytes, timeout: float = 60.0) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Send `raw`, then a normal tools/call; return (what came before its reply, its reply).

    The SDK answers protocol errors as soon as it reads the line, before it reads the next one,
    so any reply to `raw` arrives before the follow-up's."""
    srv.send_raw(raw)
    probe = next(_next_id)
    srv.send({"jsonrpc": "2.0", "id": probe, "method": "tools/call", "params": {"name": "status", "arguments": {}}})
    before: list[dict[str, Any]] = []
    while True:
        msg = srv.read_message(timeout)
        assert msg.get("jsonrpc") == "2.0", msg
        if msg.get("id") == probe:
            assert "result" in msg and not msg["result"].get("isError"), msg
            return before, msg
        before.append(msg)


def active_items(srv: StdioServer) -> int:
    return int(srv.ok("status")["active_items"])


def line(obj: Any) -> bytes:
    return json.dumps(obj).encode() + b"\n"


PARSE_ERRORS = {
    "garbage": b"hello world\n",
    "empty line": b"\n",
    "truncated JSON": b'{"jsonrpc": "2.0", "id": 5, "method": "tools/ca\n',
    "NUL bytes": b"\x00\x00\x00\n",
}
INVALID = {
    "JSON array": b"[1, 2, 3]\n",
    "batch (removed from MCP in 2025-06-18)": line([{"jsonrpc": "2.0", "id": 7, "method": "ping"}]),
    "JSON number": b"42\n",
    "JSON string": b'"hi"\n',
    "JSON null": b"null\n",
    "jsonrpc 1.0": line({"jsonrpc": "1.0", "id": 20, "method": "ping"}),
    "params not an object": line({"jsonrpc": "2.0", "id": 13, "method": "tools/call", "params": "x"}),
    "lone surrogate escape": b'{"jsonrpc":"2.0","id":18,"method":"tools/call","params":'
    b'{"name":"store","arguments":{"content":"a\\ud800b"}}}\n',
    "100k-deep nesting": b"[" * 100_000 + b"]" * 100_000 + b"\n",
}
IGNORED = {
    # The SDK's message model reads a request whose id is not a string or number as a
    # notification (the id is dropped), so nothing is run and nothing is answered.
    "null id": line({"jsonrpc": "2.0", "id": None, "method": "ping"}),
    "unknown notification": line({"jsonrpc": "2.0", "method": "nosuch/notification"}),
    "a response the server never asked for": line({"jsonrpc": "2.0", "id": 999, "result": {}}),
    "an error the server never asked for": line({"jsonrpc": "2.0", "id": 998, "error": {"code": 1, "message": "x"}}),
}
# A request id must be a string or an integer (JSON-RPC 2.0 section 4): the SDK reads these as
# notifications and would answer nothing; compactor's reader answers Invalid Request, id null.
BAD_IDS = {
    "object id": line({"jsonrpc": "2.0", "id": {"a": 1}, "method": "ping"}),
    "array id": line({"jsonrpc": "2.0", "id": [1], "method": "ping"}),
    "boolean id": line({"jsonrpc": "2.0", "id": True, "method": "tools/call", "params": {"name": "status"}}),
    "fractional id": line({"jsonrpc": "2.0", "id": 1.5, "method": "ping"}),
}
DROPPED = {**PARSE_ERRORS, **INVALID, **IGNORED, **BAD_IDS}


@pytest.mark.parametrize("raw", PARSE_ERRORS.values(), ids=PARSE_ERRORS.keys())
def test_a_line_that_is_not_json_gets_a_parse_error(srv: StdioServer, raw: bytes):
    count = active_items(srv)
    before, _ = exchange(srv, raw)
    assert len(before) == 1, before
    assert before[0]["error"]["code"] == -32700 and before[0]["id"] is None
    assert active_items(srv) == count


@pytest.mark.parametrize("raw", INVALID.values(), ids=INVALID.keys())
def test_json_that_is_not_a_message_gets_invalid_request(srv: StdioServer, raw: bytes):
    count = active_items(srv)
    before, _ = exchange(srv, raw)
    assert len(before) == 1, before
    assert before[0]["error"]["code"] in (-32600, -32700)
    assert active_items(srv) == count


def test_invalid_request_keeps_the_id_it_can_read(srv: StdioServer):
    before, _ = exchange(srv, INVALID["params not an object"])
    assert before == [
        {
            "jsonrpc": "2.0",
            "id": 13,
            "error": {"code": -32600, "message": "Invalid Request: not a valid JSON-RPC message"},
        }
    ]


@pytest.mark.parametrize("raw", IGNORED.values(), ids=IGNORED.keys())
def test_messages_that_need_no_answer_get_none(srv: StdioServer, raw: bytes):
    count = active_items(srv)
    before, _ = exchange(srv, raw)
    assert before == []
    assert active_items(srv) == count


@pytest.mark.parametrize("raw", BAD_IDS.values(), ids=BAD_IDS.keys())
def test_a_request_whose_id_is_no_string_or_integer_gets_invalid_request_with_id_null(srv: StdioServer, raw: bytes):
    count = active_items(srv)
    before, _ = exchange(srv, raw)
    assert before == [
        {
            "jsonrpc": "2.0",
            "id": None,
            "error": {
                "code": -32600,
                "message": "Invalid Request: a request id must be a string or an integer; nothing was run",
            },
        }
    ]
    assert active_items(srv) == count


def test_unknown_method_is_method_not_found(srv: StdioServer):
    before, _ = exchange(srv, line({"jsonrpc": "2.0", "id": 9, "method": "nosuch/method"}))
    assert before == [
        {"jsonrpc": "2.0", "id": 9, "error": {"code": -32601, "message": "Method not found", "data": "nosuch/method"}}
    ]


def test_tools_call_without_id_is_a_notification_and_is_not_run(srv: StdioServer):
    count = active_items(srv)
    call = {"name": "store", "arguments": {"content": "sent as a notification"}}
    before, _ = exchange(srv, line({"jsonrpc": "2.0", "method": "tools/call", "params": call}))
    assert before == []
    assert active_items(srv) == count


@pytest.mark.parametrize(
    "params",
    [None, {"name": 5}, {"name": "store", "arguments": "not an object"}, {"arguments": {}}, {"name": ["store"]}],
    ids=["missing", "name not a string", "arguments not an object", "no name", "name a list"],
)
def test_malformed_tools_call_params_are_invalid_params(srv: StdioServer, params: Any):
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": 12, "method": "tools/call"}
    if params is not None:
        msg["params"] = params
    count = active_items(srv)
    before, _ = exchange(srv, line(msg))
    assert len(before) == 1 and before[0]["id"] == 12, before
    assert before[0]["error"]["code"] == -32602
    assert active_items(srv) == count


def test_unknown_tool_is_a_tool_error(srv: StdioServer):
    before, _ = exchange(srv, line({"jsonrpc": "2.0", "id": 16, "method": "tools/call", "params": {"name": "nosuch"}}))
    assert len(before) == 1 and before[0]["result"]["isError"] is True
    assert "Unknown tool: nosuch" in before[0]["result"]["content"][0]["text"]


@pytest.mark.parametrize("literal", [b"NaN", b"Infinity", b"-Infinity"])
def test_nan_and_infinity_literals_are_tool_errors(srv: StdioServer, literal: bytes):
    settings = srv.ok("status")
    raw = b'{"jsonrpc":"2.0","id":17,"method":"tools/call","params":{"name":"configure","arguments":'
    raw += b'{"auto_compact_threshold":' + literal + b"}}}\n"
    before, _ = exchange(srv, raw)
    assert len(before) == 1 and before[0]["result"]["isError"] is True, before
    assert "finite number" in before[0]["result"]["content"][0]["text"]
    assert srv.ok("status")["auto_compact_threshold"] == settings["auto_compact_threshold"]


def test_lone_surrogate_escape_is_refused_with_the_request_id(srv: StdioServer):
    count = active_items(srv)
    before, _ = exchange(srv, INVALID["lone surrogate escape"])
    assert before == [
        {
            "jsonrpc": "2.0",
            "id": 18,
            "error": {
                "code": -32600,
                "message": "Invalid Request: the message holds a lone UTF-16 surrogate escape (\\ud800); "
                "nothing was run",
            },
        }
    ]
    assert active_items(srv) == count


def test_invalid_utf8_is_refused_with_the_request_id(srv: StdioServer):
    count = active_items(srv)
    raw = b'{"jsonrpc":"2.0","id":19,"method":"tools/call","params":{"name":"store","arguments":'
    raw += b'{"content":"left \xff\xfe right"}}}\n'
    before, _ = exchange(srv, raw)
    assert len(before) == 1 and before[0]["id"] == 19, before
    at = raw.index(0xFF)
    assert before[0]["error"] == {
        "code": -32700,
        "message": f"Parse error: the message is not valid UTF-8 (byte 0xff at character {at}); nothing was run",
    }
    assert active_items(srv) == count
    # Valid UTF-8, U+FFFD included, is stored exactly.
    item = srv.ok("store", content="left \ufffd \u00e9 \U0001f600 right")["id"]
    assert srv.ok("get", id=item)["content"] == "left \ufffd \u00e9 \U0001f600 right"


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS:")) / 1024


@pytest.mark.slow
def test_a_client_that_never_reads_cannot_grow_the_server():
    """2,000 export calls (~40 KB of reply each) from a client that does not read stdout. Before,
    the server kept reading and held every reply: +130 MB in 5 s. Now it stops reading stdin
    while replies are not drained, and delivers all of them, in order, once the client reads."""
    n = 2_000
    with StdioServer("--log-level", "ERROR") as fresh:
        fresh.ok(
            "bulk_store", items=[{"content": f"item {i} " + "lorem ipsum dolor sit amet " * 40} for i in range(60)]
        )
        base = _rss_mb(fresh.pid)
        call = {"name": "export", "arguments": {}}
        burst = b"".join(
            line({"jsonrpc": "2.0", "id": 100_000 + i, "method": "tools/call", "params": call}) for i in range(n)
        )
        writer = threading.Thread(target=fresh.send_raw, args=(burst,), daemon=True)
        writer.start()
        peak = base
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            time.sleep(0.1)
            peak = max(peak, _rss_mb(fresh.pid))
        assert writer.is_alive(), "the server read every request although no reply was read"
        assert peak - base < 30, f"RSS grew {base:.0f} -> {peak:.0f} MB while the client did not read"
        ids = []
        while len(ids) < n:
            msg = fresh.read_message(30)
            assert "result" in msg and not msg["result"].get("isError"), str(msg)[:300]
            ids.append(msg["id"])
        assert sorted(ids) == [100_000 + i for i in range(n)]  # calls run concurrently: any order, each once
        writer.join(10)
        print(f"\nRSS {base:.0f} -> {peak:.0f} MB while {n:,} replies waited; all delivered in order")


def test_a_line_over_the_cap_is_skipped_with_an_error_that_keeps_its_id(srv: StdioServer):
    count = active_items(srv)
    raw = line({"jsonrpc": "2.0", "id": 30, "method": "tools/call", "params": {"name": "store", "arguments": {}}})
    raw = raw.replace(b'"arguments": {}', b'"arguments": {"content": "' + b"x" * BIG + b'"}')
    started = time.monotonic()
    before, _ = exchange(srv, raw, timeout=120)
    assert len(before) == 1 and before[0]["id"] == 30, before
    assert before[0]["error"]["code"] == -32600
    assert "over 16,777,216 bytes" in before[0]["error"]["message"]
    assert active_items(srv) == count
    print(f"\n50 MB line skipped in {time.monotonic() - started:.1f} s")


def test_a_store_under_the_line_cap_but_over_the_item_limit_is_a_clear_tool_error(srv: StdioServer):
    count = active_items(srv)
    raw = line({"jsonrpc": "2.0", "id": 31, "method": "tools/call", "params": {"name": "store", "arguments": {}}})
    raw = raw.replace(b'"arguments": {}', b'"arguments": {"content": "' + b"x" * (4 << 20) + b'"}')
    # A tool call runs on a worker thread: a later call's reply may overtake this one's, so it
    # is read on its own rather than through `exchange`.
    srv.send_raw(raw)
    before = [srv.read_message(120)]
    assert len(before) == 1 and before[0]["id"] == 31, before
    assert before[0]["result"]["isError"] is True
    assert "the limit is 1,048,576" in before[0]["result"]["content"][0]["text"]
    assert active_items(srv) == count


def test_fifty_megabyte_garbage_line_gets_a_short_error(srv: StdioServer):
    count = active_items(srv)
    before, _ = exchange(srv, b"{" + b"z" * BIG + b"\n", timeout=120)
    assert len(before) == 1 and before[0]["error"]["code"] == -32600 and before[0]["id"] is None
    assert len(json.dumps(before[0])) < 200  # the input is never echoed back
    assert active_items(srv) == count


def _send_huge_line(server: StdioServer, size: int, request_id: int) -> float:
    """Write a `size`-byte tools/call line in 1 MB pieces while sampling the RSS of the process
    that reads it; return the peak growth in MB."""
    reader = hosts_of_or_self(server)
    base = peak = _rss_mb(reader)
    server.send_raw(
        f'{{"jsonrpc": "2.0", "id": {request_id}, "method": "tools/call", "params": {{"name": "store", '.encode()
    )
    server.send_raw(b'"arguments": {"content": "')
    piece = b"y" * (1 << 20)
    for _ in range(size >> 20):
        server.send_raw(piece)
        peak = max(peak, _rss_mb(reader))
    server.send_raw(b'"}}}\n')
    reply = server.read_message(120)
    peak = max(peak, _rss_mb(reader))
    assert reply["id"] == request_id and reply["error"]["code"] == -32600, str(reply)[:300]
    return peak - base


def hosts_of_or_self(server: StdioServer) -> int:
    hosts = proc.shared_hosts([server.pid])
    return hosts[0] if hosts else server.pid


@pytest.mark.slow
def test_a_hundred_megabyte_line_leaves_memory_flat_over_stdio_and_through_the_shared_host(tmp_path):
    with StdioServer("--log-level", "ERROR") as alone:
        grew = _send_huge_line(alone, 100 << 20, 41)
        assert grew < 60, f"a stdio server grew {grew:.0f} MB reading a 100 MB line"
        assert alone.ok("status")["active_items"] == 0
    with StdioServer("--state-dir", str(tmp_path / "state"), "--log-level", "ERROR") as shared:
        assert hosts_of_or_self(shared) != shared.pid  # served by the shared host
        grew = _send_huge_line(shared, 100 << 20, 42)
        assert grew < 60, f"the shared host grew {grew:.0f} MB reading a 100 MB line"
        assert shared.ok("status")["active_items"] == 0
    print(f"\npeak RSS growth reading a 100 MB line: {grew:.0f} MB (shared host)")


@pytest.mark.slow
def test_server_still_works_and_exits_cleanly_after_all_of_it():
    """A fresh server given every abuse in one burst, then a normal store and get, then EOF."""
    with StdioServer("--log-level", "ERROR") as fresh:
        fresh.send_raw(b"".join(DROPPED.values()))
        item = fresh.ok("store", content="after the storm")["id"]
        assert fresh.ok("get", id=item)["content"] == "after the storm"
        fresh.close_stdin()
        assert fresh.wait() == 0
