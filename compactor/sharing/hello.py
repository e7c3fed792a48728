"""The hello that opens every connection to the shared host, both ways: one JSON line each.

The relay says {"scope": ..., "pid": ...} (the project of its working directory) as soon as it
connects; the host answers {"pid": ...} and only then serves MCP on the connection. A host that
closes without answering was stopping (or serves a replaced state dir): the relay starts a new
one. Nothing follows the host's hello until the client's first message, so a reply with more
after it is no host's.

Import-light, as the relay is: the relay's side uses a blocking socket, and the host's side
imports anyio only when it runs (in the host, which has it loaded already).
"""

from __future__ import annotations

import json
import os
import socket
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    import anyio.abc

# Bytes per read of a relayed connection: a pipe's default capacity.
SHARED_READ_BYTES: Final = 1 << 16

# The relay says hello right after connecting: a host waits this long for it, and takes a line
# of at most this many bytes (a scope is a path).
HELLO_TIMEOUT_S = 10.0
HELLO_MAX_BYTES = 1 << 16
# Bytes per read of the host's answer: a pid, a few dozen bytes.
_ANSWER_READ_BYTES = 4096


def _line(value: dict[str, Any]) -> bytes:
    return json.dumps(value).encode() + b"\n"


def say_hello(sock: socket.socket, scope: str, timeout: float) -> dict[str, Any] | None:
    """The relay's side: say hello and read the host's; None when the host closed first (it was
    stopping) or answered with anything but one JSON object."""
    sock.sendall(_line({"scope": scope, "pid": os.getpid()}))
    sock.settimeout(timeout)
    data = b""
    while b"\n" not in data:
        try:
            chunk = sock.recv(_ANSWER_READ_BYTES)
        except (ConnectionError, TimeoutError):
            return None
        if not chunk:
            return None
        data += chunk
    sock.settimeout(None)
    line, _, rest = data.partition(b"\n")
    if rest:  # the host speaks only after the client's first message: nothing can follow the hello
        return None
    try:
        reply = json.loads(line)
    except ValueError:
        return None
    return reply if isinstance(reply, dict) else None


async def hear_hello(stream: anyio.abc.SocketStream) -> tuple[dict[str, Any], bytes]:
    """The host's side: the relay's hello and whatever came after it in the same reads. Raises
    ValueError for a line that is too long or not a JSON object, TimeoutError past
    HELLO_TIMEOUT_S, anyio.EndOfStream when the relay closed first."""
    import anyio

    data = b""
    with anyio.fail_after(HELLO_TIMEOUT_S):
        while b"\n" not in data:
            if len(data) > HELLO_MAX_BYTES:
                raise ValueError("hello too long")
            data += await stream.receive(SHARED_READ_BYTES)
    line, _, rest = data.partition(b"\n")
    hello = json.loads(line)
    if not isinstance(hello, dict):
        raise ValueError("hello is not an object")
    return hello, rest


async def answer_hello(stream: anyio.abc.SocketStream) -> None:
    """The host's answer: from now on the connection is an MCP session."""
    await stream.send(_line({"pid": os.getpid()}))
