"""The line reader under both stdio transports (compactor.mcp.stdio_runtime.capped_lines):
lines across chunk boundaries, a line over the cap dropped as it arrives, request ids that
JSON-RPC does not allow replaced by a stand-in that gets Invalid Request."""

from __future__ import annotations

import json

import anyio
from hypothesis import given
from hypothesis import strategies as st

from compactor.mcp import stdio_runtime as R


def _read(data: bytes, chunk: int) -> list[str]:
    pieces = [data[i : i + chunk] for i in range(0, len(data), chunk)]

    async def go() -> list[str]:
        async def receive() -> bytes:
            return pieces.pop(0) if pieces else b""

        return [line async for line in R.capped_lines(receive)]

    return anyio.run(go)


@given(st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=8), st.integers(1, 50))
def test_lines_come_out_whole_whatever_the_chunks(lines: list[bytes], chunk: int):
    data = b"".join(line + b"\n" for line in lines)
    got = _read(data, chunk)
    assert got == [line.decode("utf-8", "surrogateescape") + "\n" for line in lines]


def test_a_line_over_the_cap_becomes_a_stand_in_with_its_id(monkeypatch):
    monkeypatch.setattr(R, "MAX_LINE_BYTES", 1_000)
    huge = b'{"jsonrpc": "2.0", "params": {"id": 5, "x": "' + b"x" * 5_000 + b'"}, "id": 7, "method": "ping"}\n'
    head_id = b'{"jsonrpc": "2.0", "id": "abc", "method": "tools/call", "params": {"x": "' + b"y" * 5_000 + b'"}}\n'
    got = _read(huge + head_id + b'{"jsonrpc": "2.0", "id": 8, "method": "ping"}\n', 64)
    assert [json.loads(line).get("id") for line in got] == [None, "abc", 8]  # 7 comes after the part read
    assert all(R._OVER_CAP in json.loads(line) for line in got[:2])
    reply = R.invalid_message_reply(_validation_error(got[1]))
    assert reply.id == "abc" and "over 1,000 bytes" in reply.error.message


def _validation_error(line: str) -> Exception:
    from mcp_types import jsonrpc_message_adapter

    try:
        jsonrpc_message_adapter.validate_json(line, by_name=False)
    except Exception as exc:
        return exc
    raise AssertionError("the stand-in parsed as a message")


def test_ids_json_rpc_does_not_allow_get_a_stand_in():
    for rid in ({"a": 1}, [1], True, 1.5):
        [line] = _read(json.dumps({"jsonrpc": "2.0", "id": rid, "method": "ping"}).encode() + b"\n", 16)
        assert R._BAD_ID in json.loads(line)
    for rid in ("x", 3, 4.0):
        raw = json.dumps({"jsonrpc": "2.0", "id": rid, "method": "ping"}) + "\n"
        assert _read(raw.encode(), 16) == [raw]
