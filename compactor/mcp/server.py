"""The MCP server's factory: make the MCPServer, prepare each client session (its budget default
and its project root), wrap every tool call (domain errors become tool errors), and register
the tool groups, the resources and the tool contract. `serve` runs it on stdio (and
`http_server.serve_http` over streamable HTTP). No domain logic
lives here or in the tool modules: each tool calls one Store method.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
import warnings
import weakref
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, Final

import anyio
import orjson
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult

from .. import constants as C
from ..errors import CompactorError, WouldWaitError, WriteConflictError
from ..runtime import PROCESS, settle_heap
from ..scope import scope_from_root_uri
from ..store import Store
from . import contract, resources, sdk, tools_budget, tools_dag, tools_memory, tools_read
from .kit import ToolKit
from .output_schemas import OUTPUT_SCHEMAS
from .people import current_caller
from .stdio_runtime import run_stdio as _run_stdio

# A client that advertises roots but never answers must not stall the first tool call.
ROOTS_TIMEOUT_S: Final = 2.0

log = logging.getLogger(__name__)

# The project scope of the connection a call came on, when one process serves several stdio
# clients (sharing/host.py): each relay sends the scope of its own working directory.
CONNECTION_SCOPE: ContextVar[str | None] = ContextVar("compactor_connection_scope", default=None)

INSTRUCTIONS = """\
compactor is your working memory across sessions, kept within a token budget. Compaction never
loses anything: `get(id)` always returns the original.
1. Call `recall` first in every session (with `query` when you know the task).
2. `store` what you will want again: decisions and why, errors and fixes, key code, conclusions.
   Give long content a one-line `summary`.
3. `query` before re-reading a file, re-running a command or debugging a familiar error.
4. When a reply says the budget is high, call `compact`, then `update(id, summary=...)` for the
   items it lists.
5. `pin` what must never fade; `forget` only what must go for good.
"""

# A conflict needs another server to append between our catch-up and our write, all under the
# writers' lock: a second one in a row means something else is wrong, so it is said, not hidden.
WRITE_CONFLICT_TRIES = 3

# The order of tools/list: the order a model meets them in, the workflow of INSTRUCTIONS.
TOOL_ORDER = (
    "recall",
    "store",
    "bulk_store",
    "query",
    "get",
    "status",
    "compact",
    "update",
    "pin",
    "unpin",
    "restore",
    "forget",
    "expand",
    "dissolve",
    "tree",
    "list",
    "export",
    "configure",
)


class _ClientMap:
    """A value per client object, by identity (the SDK's `client_params` is a pydantic model:
    unhashable), held weakly: over HTTP clients come and go, and a new one must not inherit a
    dead one's entry."""

    def __init__(self) -> None:
        self._entries: dict[int, tuple[weakref.ref[Any], str | None]] = {}

    def __contains__(self, client: Any) -> bool:
        entry = self._entries.get(id(client))
        return entry is not None and entry[0]() is client

    def get(self, client: Any) -> str | None:
        return self._entries[id(client)][1] if client in self else None

    def set(self, client: Any, value: str | None) -> None:
        key = id(client)
        self._entries[key] = (weakref.ref(client, lambda _ref: self._entries.pop(key, None)), value)


class _ClientLocks:
    """One lock per client object, by identity and held weakly as `_ClientMap`: a client's calls
    run in the order it sent them (a pipelined store, then a query, reads its own write), while
    different clients' calls overlap on worker threads."""

    def __init__(self) -> None:
        self._entries: dict[int, tuple[weakref.ref[Any], anyio.Lock]] = {}

    def of(self, client: Any) -> anyio.Lock:
        key = id(client)
        entry = self._entries.get(key)
        if entry is None or entry[0]() is not client:
            entry = (weakref.ref(client, lambda _ref: self._entries.pop(key, None)), anyio.Lock())
            self._entries[key] = entry
        return entry[1]


def build_server(
    store: Store, *, name: str = "compactor", scope_fixed: bool = False, **server_options: Any
) -> MCPServer:
    """`scope_fixed`: the project scope was given explicitly, so the client's roots don't move it.
    `server_options` go to MCPServer (the HTTP transport's token verifier and auth settings)."""
    mcp: MCPServer = MCPServer(name, instructions=INSTRUCTIONS, version=_version(), **server_options)

    # Several clients can share this Store (HTTP, the shared stdio host, in-process clients):
    # each one's project scope (from its roots, else the connection's or the server's) is set
    # on the Store before each of its calls, which run one at a time on the event loop.
    seen_clients = _ClientMap()  # client -> the scope its roots gave, or None
    in_order = _ClientLocks()
    base_scope = store.scope

    def client_of(ctx: Context | None) -> Any:
        """What stands for the calling client across its calls: the SDK makes a new session
        object for every request, but each connection keeps the one `client_params` its
        initialize sent (the session itself where there is none)."""
        try:
            if ctx is None:
                return None
            session = ctx.session
            return session.client_params or session
        except (AttributeError, RuntimeError, ValueError):
            return None

    async def prepare(ctx: Context | None, client: Any) -> None:
        """Once per client (`client_of(ctx)`): its budget default and its project root."""
        if ctx is None or client is None or client in seen_clients:
            return
        seen_clients.set(client, None)
        session = ctx.session
        params = session.client_params
        name = params.client_info.name if params is not None else None
        await anyio.to_thread.run_sync(store.adopt_client_budget, name)
        if scope_fixed or params is None or params.capabilities.roots is None:
            return
        try:
            with anyio.fail_after(ROOTS_TIMEOUT_S), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                roots = await session.list_roots()
        except Exception as exc:  # a client that advertises roots but cannot answer keeps the default
            log.info("could not list the client's roots: %r", exc)
            return
        for root in roots.roots:
            scope = scope_from_root_uri(str(root.uri))
            if scope and len(scope) <= C.SCOPE_MAX_CHARS:  # longer, it could not be exported
                seen_clients.set(client, scope)
                return

    async def run(ctx: Context | None, fn: Callable[[], CallToolResult], *, reads: bool = False) -> CallToolResult:
        store.touch()
        client = client_of(ctx)
        await prepare(ctx, client)
        scope = (seen_clients.get(client) or CONNECTION_SCOPE.get() or base_scope) if client is not None else None
        caller = current_caller()  # the person whose token the request carried (HTTP with tokens)
        # A session outside its person's only project works in that project; with several
        # projects, each call names its scope or is refused (Store._scopes).
        only = next(iter(caller.projects)) if caller and caller.projects and len(caller.projects) == 1 else None
        if only is not None and scope != only:
            scope = only

        def call() -> CallToolResult:
            with store.serving(scope, caller):
                for _ in range(WRITE_CONFLICT_TRIES - 1):
                    try:
                        return fn()
                    except WriteConflictError:
                        log.info("another server wrote first; running the call again, caught up")
                return fn()

        def call_at_once() -> CallToolResult | None:
            """A read run here, on the event loop, when it need not wait for anything (a worker
            thread costs a hand-over each way); None when it would wait (nothing was done)."""
            with store.at_once() as here:
                if not here:
                    return None
                try:
                    return call()
                except WouldWaitError:
                    return None

        async def call_off_loop() -> CallToolResult:
            # On a worker thread: a call waiting for the database (or the writers' lock) leaves
            # the event loop to the other sessions.
            if reads and (result := call_at_once()) is not None:
                return result
            return await anyio.to_thread.run_sync(call)

        try:
            if client is None:
                return await call_off_loop()
            async with in_order.of(client):  # one client's calls still run in its order
                return await call_off_loop()
        except CompactorError as exc:
            raise ToolError(str(exc)) from exc
        except (Exception, KeyboardInterrupt, SystemExit):
            raise  # an Exception the SDK reports as a tool error
        except BaseException as exc:
            # A native library's panic (pyo3 raises one as a BaseException) would pass the
            # SDK's handler and end the server, and every session a shared host serves with
            # it. A write's transaction has been undone by now.
            log.error("a tool call failed in a native library", exc_info=exc)
            raise ToolError(f"the call failed inside a library ({type(exc).__name__}); nothing was changed.") from exc

    async def read(ctx: Context | None, fn: Callable[[], CallToolResult]) -> CallToolResult:
        return await run(ctx, fn, reads=True)

    kit = ToolKit(store, run, read)
    for group in (tools_read, tools_memory, tools_dag, tools_budget):
        group.register(kit)
    if set(kit.tools) != set(TOOL_ORDER):
        raise RuntimeError(f"tools defined and TOOL_ORDER differ: {sorted(set(kit.tools) ^ set(TOOL_ORDER))}")
    for tool_name in TOOL_ORDER:
        tool = kit.tools[tool_name]
        # Registered without structured output, then given its reply model (each reply is still
        # validated against it) and its published schema: the SDK would derive that schema
        # from the model again at every start (~14 ms for all tools), output_schemas.py keeps it.
        mcp.add_tool(
            tool.fn,
            name=tool_name,
            annotations=tool.annotations,
            description=tool.description,
            structured_output=False,
        )
        registered = sdk.get_tool(mcp, tool_name)
        assert registered is not None
        meta = registered.fn_metadata
        meta.output_model = contract.reply_model(tool.fn)
        meta.output_schema = orjson.loads(orjson.dumps(OUTPUT_SCHEMAS[tool_name]))  # each server its own copy

    resources.register(mcp, store)
    contract.install(mcp)
    return mcp


def _version() -> str:
    from .. import __version__

    return __version__


async def snapshots(store: Store, interval: float) -> None:
    """Snapshot in the background every `interval` seconds while there is something new (both
    transports run it). Background snapshots leave the search index out; once no call has
    come for a whole interval, a full snapshot saves it too, so that a process killed later
    (before or during its final snapshot) does not make the next start re-index every item."""
    index_failed = False  # not retried until something new is written
    while True:
        await anyio.sleep(interval)
        if store.accesses_pending:  # queries found the writers' lock busy and nothing wrote since
            try:
                await anyio.to_thread.run_sync(store.flush_accesses)
            except Exception as exc:
                log.warning("access times not saved yet: %s", exc)
        if store.dirty:
            index_failed = False
            try:
                await store.snapshot_async()
            except Exception:
                log.exception("background snapshot failed; the journal still holds every change")
            settle_heap(collect=True)
        elif store.needs_final_snapshot and not index_failed and time.monotonic() - store.last_used >= interval:
            # On the event loop, like the final snapshot: a call arriving meanwhile waits
            # (~0.2 s at 10k items), which is why this waits for a quiet spell.
            try:
                await anyio.to_thread.run_sync(store.snapshot)
            except Exception:
                index_failed = True
                log.exception("saving the search index failed; the next start may rebuild it")


async def serve(store: Store, *, snapshot_interval: float = C.SNAPSHOT_INTERVAL_S, scope_fixed: bool = False) -> None:
    """Run the stdio server until stdin closes or SIGTERM/SIGINT, snapshotting in the background
    and once more on the way out."""
    mcp = build_server(store, scope_fixed=scope_fixed)
    PROCESS.start_done()

    async def snapshot_loop() -> None:
        await snapshots(store, snapshot_interval)

    async def on_signal() -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for sig in signals:
                log.info("received %s, shutting down", signal.Signals(sig).name)
                final_snapshot(store)
                # The stdin reader is a worker thread blocked in read(2) that no cancellation
                # can interrupt; every acknowledged call is already fsynced, so leave now.
                sys.stdout.flush()
                os._exit(0)

    try:
        async with anyio.create_task_group() as tg:
            if store.persistent:
                tg.start_soon(snapshot_loop)
            tg.start_soon(on_signal)
            await _run_stdio(mcp)
            tg.cancel_scope.cancel()
    finally:
        final_snapshot(store)


def final_snapshot(store: Store) -> None:
    """How a stdio server ends (in process or as the shared host): save, then close."""
    if store.needs_final_snapshot:
        # A client that closed our stdin sends SIGTERM after a grace period (2 s in the SDK);
        # dying mid-write would lose nothing (the journal has it all) but would throw away the
        # saved index and make the next start rebuild it. Finish first.
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_IGN)
    store.close_with_snapshot()
