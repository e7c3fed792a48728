"""The stdio transport around the SDK's server.

`run_stdio` is `MCPServer.run_stdio_async` plus error replies for unreadable lines, invalid
UTF-8 refused rather than stored changed, and backpressure. The SDK exposes no public way to
do that, so this module runs the SDK's low-level server on streams of its own, through the
accessors of `sdk.py` (the one module that reaches the SDK's private parts).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, Final

import anyio
import anyio.to_thread
import orjson
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp_types import (
    INVALID_REQUEST,
    PARSE_ERROR,
    ErrorData,
    JSONRPCError,
    JSONRPCNotification,
    JSONRPCRequest,
    JSONRPCResponse,
)
from pydantic import ValidationError

from . import sdk

# Requests unanswered or with a reply not yet written to stdout: past this, stdin is not read
# (backpressure), so a client that never reads its replies cannot grow the server's memory.
# Well above what a client pipelines (Claude Code sends tool calls one at a time).
MAX_PENDING_REQUESTS: Final = 32
# Once stdin ends, how long the requests read before it may still run to send their replies
# (a client that pipes its requests and closes stdin still reads them). Every tool returns
# well within it; it only stops a handler stuck on the gone client keeping the process up.
EOF_REPLIES_WAIT_S: Final = 30.0
# A line the SDK's JSON parser refuses is parsed again only up to this size to find its id:
# past it (the 50 MB garbage line) the reply keeps id null rather than spend the time.
MAX_REPARSE_CHARS: Final = 2 << 20

_LONE_SURROGATE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")

# A line longer than this is not read into memory: its bytes are dropped as they arrive and it
# gets an Invalid Request reply. The largest legitimate call is a bulk_store of a few
# 1 MiB items (MAX_CONTENT_BYTES, up to 6x as JSON escapes); a 100 MB line peaked the shared
# host at 705 MiB before.
MAX_LINE_BYTES = 16 << 20
# The start of an over-long line kept to read its request id from.
_HEAD_BYTES = 4_096
# Keys of the stand-in lines `capped_lines` passes the SDK's parser in place of a line it must
# not run: valid JSON that is no JSON-RPC message, answered by `invalid_message_reply`.
_OVER_CAP = "compactor/line-over-cap"
_BAD_ID = "compactor/invalid-id"


def invalid_message_reply(exc: Exception) -> JSONRPCError:
    """JSON-RPC 2.0 section 5.1: a line that is not JSON gets -32700, a JSON value that is not a
    valid message -32600, with the request's id when one can be read, else null.

    Two lines the SDK's parser refuses are readable enough to answer with their id, so that the
    client does not wait forever: bytes that are not UTF-8 (-32700: JSON text is UTF-8), and
    valid JSON holding a lone surrogate escape such as "\\ud83d" (-32600: it is not Unicode
    text). Neither is run: a replacement character stored in place of the sender's text would
    be a silent change to what the agent asked to remember."""
    code, message, request_id = INVALID_REQUEST, "Invalid Request: not a valid JSON-RPC message", None
    if not isinstance(exc, ValidationError):
        return JSONRPCError(jsonrpc="2.0", id=request_id, error=ErrorData(code=code, message=message))
    errors = exc.errors(include_url=False)
    kinds = {err["type"] for err in errors}
    candidates = [err.get("input") for err in errors]
    if kinds & {"json_invalid", "string_unicode"}:
        code, message = PARSE_ERROR, "Parse error: the line is not valid JSON"
        line = errors[0].get("input")
        parsed = _lenient_json(line) if isinstance(line, str) else None
        candidates = [parsed]
        if parsed is not None and "string_unicode" in kinds:
            message = f"Parse error: the message is not valid UTF-8 ({_bad_bytes(str(line))}); nothing was run"
        elif parsed is not None:
            found = _LONE_SURROGATE.search(str(line))
            what = f"a lone UTF-16 surrogate escape ({found.group()})" if found else "text this server cannot read"
            code, message = INVALID_REQUEST, f"Invalid Request: the message holds {what}; nothing was run"
    for value in candidates:
        if isinstance(value, dict) and _OVER_CAP in value:
            code = INVALID_REQUEST
            message = f"Invalid Request: the line is over {MAX_LINE_BYTES:,} bytes; it was skipped and nothing was run"
        elif isinstance(value, dict) and _BAD_ID in value:
            code = INVALID_REQUEST
            message = "Invalid Request: a request id must be a string or an integer; nothing was run"
        if isinstance(value, dict) and isinstance(value.get("id"), str | int) and not isinstance(value["id"], bool):
            request_id = value["id"]
            break
    return JSONRPCError(jsonrpc="2.0", id=request_id, error=ErrorData(code=code, message=message))


def _lenient_json(line: str) -> Any:
    """`line` parsed by Python's json, which accepts lone surrogates, or None if it cannot be."""
    if len(line) > MAX_REPARSE_CHARS:
        return None
    try:
        return json.loads(line)
    except (ValueError, RecursionError):
        return None


def _bad_bytes(line: str) -> str:
    """Where the first undecodable byte is: stdin is read with surrogateescape, which keeps each
    such byte as a code point U+DC80..U+DCFF."""
    for i, ch in enumerate(line):
        if 0xDC80 <= ord(ch) <= 0xDCFF:
            return f"byte 0x{ord(ch) - 0xDC00:02x} at character {i}"
    return "undecodable bytes"


def _top_level_id(head: bytes) -> str | int | None:
    """The "id" member of the JSON object `head` begins, if the part read holds it."""
    text = head.decode("utf-8", "replace")
    decoder = json.JSONDecoder()
    depth, i = 0, 0
    while i < len(text):
        ch = text[i]
        if ch == '"':
            try:
                key, i = decoder.raw_decode(text, i)
            except ValueError:
                return None
            rest = text[i:].lstrip()
            if depth == 1 and key == "id" and rest.startswith(":"):
                try:
                    value, _ = decoder.raw_decode(rest[1:].lstrip())
                except ValueError:
                    return None
                return value if isinstance(value, str | int) and not isinstance(value, bool) else None
            continue
        depth += ch in "{["
        depth -= ch in "}]"
        i += 1
    return None


def _stand_in(key: str, request_id: str | int | None) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, key: True}) + "\n"


def _checked_line(raw: bytes) -> str:
    """A line as text for the SDK's parser, or a stand-in when it is a request whose id is
    neither a string nor an integer: the SDK reads those as notifications and answers
    nothing, where JSON-RPC 2.0 asks for Invalid Request with id null."""
    if b'"id"' in raw:
        try:
            msg = orjson.loads(raw)
        except orjson.JSONDecodeError:
            msg = None  # the SDK's parser says what is wrong with it
        if isinstance(msg, dict) and "method" in msg and "id" in msg:
            rid = msg["id"]
            if isinstance(rid, bool | dict | list) or (isinstance(rid, float) and not rid.is_integer()):
                return _stand_in(_BAD_ID, None)
    return raw.decode("utf-8", "surrogateescape")


async def capped_lines(receive: Callable[[], Awaitable[bytes]], first: bytes = b"") -> AsyncIterator[str]:
    """Lines of the byte chunks `receive` returns (b"" at the end) as text, undecodable bytes
    kept visible (surrogateescape) for `invalid_message_reply`. A line over MAX_LINE_BYTES is
    dropped as it arrives, keeping only its start, and replaced by a stand-in the reply
    explains, with the request's id when its start holds it."""
    buf = bytearray(first)
    start = scanned = 0  # the current line begins at `start`; no newline before `scanned`
    skipped: int | None = None  # bytes of an over-long line dropped so far
    head = b""
    while True:
        nl = buf.find(b"\n", scanned)
        if nl >= 0:
            if skipped is None:
                yield _checked_line(bytes(buf[start : nl + 1]))
            else:
                yield _stand_in(_OVER_CAP, _top_level_id(head))
                skipped = None
            start = scanned = nl + 1
            continue
        if skipped is None and len(buf) - start > MAX_LINE_BYTES:
            head, skipped = bytes(buf[start : start + _HEAD_BYTES]), 0
        if skipped is not None:
            skipped += len(buf) - start
            buf.clear()
            start = scanned = 0
        elif start:
            del buf[:start]
            start = 0
        scanned = len(buf)
        chunk = await receive()
        if not chunk:
            break
        buf += chunk
    if skipped is not None:
        yield _stand_in(_OVER_CAP, _top_level_id(head))
    elif len(buf) > start:
        yield _checked_line(bytes(buf[start:]))


class _FdLines:
    """A file descriptor read as `capped_lines` (a thread per read, as the SDK reads stdin)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def __aiter__(self) -> AsyncIterator[str]:
        return capped_lines(self._read)

    async def _read(self) -> bytes:
        return await anyio.to_thread.run_sync(os.read, self._fd, 1 << 16, abandon_on_cancel=True)


@contextlib.contextmanager
def _stdin_keeping_bad_bytes() -> Iterator[_FdLines | None]:
    """stdin as UTF-8 text whose undecodable bytes stay visible (the SDK replaces them with
    U+FFFD, so a message with them would be stored changed and reported as a success).

    Like the SDK's own claim, fd 0 is pointed at the null device while serving, so that nothing
    else in the process reads the protocol's bytes. None (the SDK's reader) if stdin is unusable."""
    try:
        private = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    except OSError:
        yield None
        return
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    try:
        # Not closed here: the reader thread may still block on it after the transport exits.
        yield _FdLines(private)
    finally:
        os.dup2(private, 0)


async def run_stdio(mcp: MCPServer, stdin: Any = None, stdout: Any = None) -> None:
    """`MCPServer.run_stdio_async`, plus:

    - error replies for lines the SDK's reader cannot parse: the SDK drops them silently, and a
      client that sent a request with an id would wait forever;
    - invalid UTF-8 refused (see `invalid_message_reply`) instead of stored as U+FFFD;
    - backpressure: at most MAX_PENDING_REQUESTS requests are unanswered or have an answer not
      yet written to stdout. A client that never reads its replies stops being read from,
      instead of making the server hold every reply in memory.

    `stdin` and `stdout` replace the process's own (the shared host serves each connection so):
    an async iterable of text lines, and an object with async `write(text)` and `flush()`."""
    if stdin is not None:
        await _serve_lines(mcp, stdin, stdout)
        return
    with _stdin_keeping_bad_bytes() as own_stdin:
        await _serve_lines(mcp, own_stdin, stdout)


async def _serve_lines(mcp: MCPServer, stdin: Any, stdout: Any) -> None:
    lowlevel = sdk.lowlevel(mcp)
    async with stdio_server(stdin=stdin, stdout=stdout) as (read_stream, write_stream):
        send, receive = sdk.create_context_streams[SessionMessage | Exception](0)
        replies, outgoing = sdk.create_context_streams[SessionMessage](0)
        slots = anyio.Semaphore(MAX_PENDING_REQUESTS)
        pending: dict[str | int, int] = {}  # the client's request ids not answered yet

        def answered(request_id: Any) -> None:
            if isinstance(request_id, str | int) and request_id in pending:
                pending[request_id] -= 1
                if not pending[request_id]:
                    del pending[request_id]
                slots.release()

        async def pump() -> None:
            async with send, read_stream:
                async for item in read_stream:
                    if isinstance(item, Exception):
                        await write_stream.send(SessionMessage(invalid_message_reply(item)))
                        continue
                    msg = item.message
                    if isinstance(msg, JSONRPCRequest):
                        await slots.acquire()
                        pending[msg.id] = pending.get(msg.id, 0) + 1
                    elif isinstance(msg, JSONRPCNotification) and msg.method == "notifications/cancelled":
                        answered((msg.params or {}).get("requestId"))  # a cancelled request gets no reply
                    await send.send(item)
                # End of input. The SDK cancels every request still running once its input
                # ends, so a client that writes its requests and then closes stdin (a pipe, a
                # script) would lose the last replies, their writes done but never confirmed.
                # Each unanswered request holds a slot: holding them all means all are answered.
                with anyio.move_on_after(EOF_REPLIES_WAIT_S):
                    for _ in range(MAX_PENDING_REQUESTS):
                        await slots.acquire()

        async def drain() -> None:
            async with write_stream, outgoing:
                async for item in outgoing:
                    await write_stream.send(item)  # returns once stdout's writer has taken it
                    if isinstance(item.message, JSONRPCResponse | JSONRPCError):
                        answered(item.message.id)

        async with anyio.create_task_group() as tg:
            reading = anyio.CancelScope()

            async def read() -> None:
                with reading:
                    await pump()

            tg.start_soon(read)
            tg.start_soon(drain)
            await lowlevel.run(receive, replies, lowlevel.create_initialization_options())
            reading.cancel()  # drain ends by itself once the last reply is out
