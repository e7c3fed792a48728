"""The measurements: one size, one server (or the no-op floor), through real stdio tool calls.

A server is measured in three sessions on one fresh state dir:

1. load: ``configure(auto_compact=False)``, ``bulk_store`` of N items in batches, single ``store``
   calls (now at ~N items), ``query``, ``recall``, then compaction with the budget set to the tokens
   in use (usage 1.0) down to ``target_usage=0.7``; peak RSS; the shutdown that writes the snapshot.
2. stall: restart with ``--snapshot-interval 1`` and issue small store/query calls back to back for
   a few seconds while the server snapshots the N-item state each second.
3. cold start: spawn, initialize and answer one query with the N-item state dir, several times.

The floor runs the same calls, in the same order and with the same request payloads, as
``noop`` calls against bench/noop_server.py; replies are padded to the sizes the first measured
server sent back.
"""

from __future__ import annotations

import logging
import math
import os
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from bench import corpus, proc
from bench.session import CLIENTS, Conn, Reply, ToolCallError
from bench.stats import median, summarize

logger = logging.getLogger("bench")

REPO_ROOT = Path(__file__).resolve().parent.parent
NOOP_SERVER = REPO_ROOT / "bench" / "noop_server.py"
DEVSTUB_SERVER = REPO_ROOT / "bench" / "_devstub.py"

# --- tuning constants (lead: move to compactor/constants.py if wanted) -------------------------
QUIET_SNAPSHOT_INTERVAL_S = 3600.0  # load and cold-start sessions: no periodic snapshot mid-measure
STALL_SNAPSHOT_INTERVAL_S = 1.0  # stall session: a snapshot of the N-item state every second
COMPACT_TARGET = 0.7  # the compaction target
QUERY_LIMIT = 10  # hit rate is "target in the top 10"
CHARS_PER_TOKEN = 4.0  # only to size the load-phase budget when status gives no token count
EXTRA_SERVERS = 3  # the 2nd, 3rd and 4th server on one state dir (several agent sessions)
# -----------------------------------------------------------------------------------------------

STATUS_FIELDS = ("token_budget", "tokens_used", "active_items", "archived_items", "auto_compact")


@dataclass(frozen=True)
class Plan:
    size: int
    seed: int
    store_calls: int = 300
    queries: int = 300
    recalls: int = 100
    batch: int = 100
    stall_seconds: float = 5.0
    cold_starts: int = 3
    extra_servers: int = EXTRA_SERVERS
    compactions: int = 3  # each on its own copy of the loaded state: the figure is their median
    client: str = "raw"  # a key of session.CLIENTS

    @classmethod
    def for_size(cls, size: int, seed: int, quick: bool, client: str = "raw") -> Plan:
        if quick:
            return cls(
                size,
                seed,
                store_calls=30,
                queries=30,
                recalls=10,
                stall_seconds=1.5,
                cold_starts=1,
                compactions=1,
                extra_servers=1,
                client=client,
            )
        return cls(size, seed, client=client)


@dataclass
class Workload:
    """Everything sent to the servers for one size; identical for every server and the floor."""

    items: list[corpus.Item]
    bulk: list[list[dict[str, Any]]]
    singles: list[dict[str, Any]]
    queries: list[corpus.Query]
    small: list[corpus.Item]

    @classmethod
    def build(cls, plan: Plan) -> Workload:
        items = corpus.generate(plan.seed, plan.size + plan.store_calls)
        loaded = [i.store_args() for i in items[: plan.size]]
        bulk = [loaded[i : i + plan.batch] for i in range(0, len(loaded), plan.batch)]
        singles = [i.store_args() for i in items[plan.size :]]
        queries = corpus.make_queries(items, range(len(items)), plan.queries, plan.seed)
        small = corpus.small_items(plan.seed, 4000)
        return cls(items, bulk, singles, queries, small)


def server_command(spec: str, state_dir: Path, snapshot_interval: float, add_flags: bool) -> list[str]:
    """``{state_dir}`` and ``{snapshot_interval}`` in the spec are filled in; otherwise the
    compactor's flags are appended (unless ``add_flags`` is off, for servers without them)."""
    if "{state_dir}" in spec or "{snapshot_interval}" in spec:
        filled = spec.replace("{state_dir}", shlex.quote(str(state_dir))).replace(
            "{snapshot_interval}", f"{snapshot_interval:g}"
        )
        return shlex.split(filled)
    command = shlex.split(spec)
    if add_flags:
        command += ["--state-dir", str(state_dir), "--snapshot-interval", f"{snapshot_interval:g}"]
    return command


def server_env() -> dict[str, str]:
    """The caller's environment; the repo root goes last on PYTHONPATH so that ``-m compactor``
    finds this checkout's server unless the caller points PYTHONPATH at another one."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH", ""), str(REPO_ROOT)) if p)
    return env


def _floor_spec() -> str:
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(NOOP_SERVER))}"


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(_flatten(value, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): data}


def persistence_fields(status: dict[str, Any]) -> dict[str, Any]:
    return {
        k: v
        for k, v in _flatten(status).items()
        if any(word in k.lower() for word in ("snapshot", "journal", "persist", "state_dir"))
    }


def snapshot_ms_from_status(status: dict[str, Any]) -> tuple[float, str] | None:
    """A snapshot duration the server reports about itself, if it reports one."""
    for key, value in sorted(_flatten(status).items()):
        name = key.lower()
        if "snapshot" not in name or isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if name.endswith(("_ms", "duration_ms", "millis")):
            return float(value), key
        if name.endswith(("duration_s", "_seconds", "duration")):
            return float(value) * 1000.0, key
    return None


def _ids(data: dict[str, Any]) -> list[str] | None:
    """Ids a bulk_store reply names, in input order, if it names them."""
    if isinstance(data.get("ids"), list):
        return [str(i) for i in data["ids"]]
    items = data.get("items")
    if isinstance(items, list) and all(isinstance(i, dict) and "id" in i for i in items):
        return [str(i["id"]) for i in items]
    return None


@dataclass
class _Pairing:
    """A no-op server running next to the measured one.

    Every measured call is paired with a no-op call that carries the same request payload and
    asks for a reply of the same size; the order alternates. Load on this shared machine drifts
    over a run, and pairing makes the drift hit the server and its floor alike.
    """

    conn: Conn
    samples: dict[str, list[float]] = field(default_factory=dict)
    last_sizes: dict[str, tuple[int, int]] = field(default_factory=dict)

    def noop_args(self, args: dict[str, Any], payload: str, sizes: tuple[int, int]) -> dict[str, Any]:
        out: dict[str, Any] = {"payload": payload, "text_bytes": sizes[0], "struct_bytes": sizes[1]}
        if "items" in args:
            out["items"] = args["items"]
        return out

    def summary(self, op: str) -> dict[str, float]:
        return summarize(self.samples.get(op, []))


async def _stall_loop(
    call: Callable[[str, dict[str, Any], str], Awaitable[Reply]], small: Sequence[corpus.Item], seconds: float
) -> dict[str, dict[str, float]]:
    """Small ``store`` calls (each dirties the state, so every interval has a snapshot to write)
    alternating with ``get`` of the item just stored, back to back for ``seconds``.

    Both are cheap and uniform, so their slowest call against their median is the stall, not
    the spread of the calls themselves.
    """
    samples: dict[str, list[float]] = {"store": [], "get": []}
    deadline = time.perf_counter() + seconds
    index = 0
    last_id = ""
    while time.perf_counter() < deadline:
        if index % 2 == 0:
            content = small[(index // 2) % len(small)].content
            reply = await call("store", {"content": content}, content)
            last_id = str(reply.data.get("id", "m0000000000"))
            samples["store"].append(reply.ms)
        else:
            samples["get"].append((await call("get", {"id": last_id}, last_id)).ms)
        index += 1
    return {op: summarize(v) for op, v in samples.items() if v}


def _stall_figures(stats: dict[str, dict[str, float]]) -> dict[str, Any]:
    return {
        "stall_ms": max(s["max"] - s["p50"] for s in stats.values()),
        "stall_max_ms": max(s["max"] for s in stats.values()),
        "calls": stats,
    }


class _Run:
    """What measuring a server and measuring the floor share: state dir, sessions, RSS, errors."""

    def __init__(self, plan: Plan, work: Workload, spec: str, *, add_flags: bool, errlog: TextIO) -> None:
        self.plan = plan
        self.work = work
        self.spec = spec
        self.add_flags = add_flags
        self.errlog = errlog
        self.result: dict[str, Any] = {"command": spec, "errors": []}
        self.rss: dict[str, float | None] = {}

    def _connect(self, state_dir: Path, interval: float) -> Conn:
        return CLIENTS[self.plan.client](
            server_command(self.spec, state_dir, interval, self.add_flags), server_env(), self.errlog
        )

    def _floor_connection(self, state_dir: Path) -> Conn:
        """The no-op server that runs alongside for paired calls (see _Pairing)."""
        return CLIENTS[self.plan.client](
            server_command(_floor_spec(), state_dir.parent / "floor", 0, False), server_env(), self.errlog
        )

    def _error(self, phase: str, exc: BaseException) -> None:
        while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
            exc = exc.exceptions[0]  # the task group's wrapper says nothing; its cause does
        logger.warning("%s: %s failed: %s: %s", self.spec, phase, type(exc).__name__, exc)
        self.result["errors"].append(f"{phase}: {type(exc).__name__}: {exc}")

    async def _first_call(self, conn: Conn, run: int) -> Reply:
        raise NotImplementedError

    async def run(self) -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="compactor-bench-") as tmp:
            state_dir = Path(tmp) / "state"
            for name, phase in (
                ("load", self._load),
                ("compact", self._compacts),
                ("stall", self._stall),
                ("cold start", self._cold_starts),
                ("extra servers", self._extra_servers),
            ):
                try:
                    await phase(state_dir)
                except Exception as exc:  # one failed phase must not lose the others' figures
                    self._error(name, exc)
        peaks = [v for v in self.rss.values() if v is not None]
        self.result["rss"] = {**self.rss, "peak_mib": max(peaks) if peaks else None}
        return self.result

    async def _load(self, state_dir: Path) -> None:
        raise NotImplementedError

    async def _compacts(self, state_dir: Path) -> None:
        raise NotImplementedError

    async def _stall(self, state_dir: Path) -> None:
        raise NotImplementedError

    async def _cold_starts(self, state_dir: Path) -> None:
        """Spawn, initialize and answer one call with the N-item state dir; median of several runs."""
        runs: list[float] = []
        initialize: list[float] = []
        cold_rss: list[float] = []
        for run in range(self.plan.cold_starts):
            conn = self._connect(state_dir, QUIET_SNAPSHOT_INTERVAL_S)
            async with conn:
                await self._first_call(conn, run)
                runs.append((time.perf_counter() - conn.started_at) * 1000)
                initialize.append(conn.opened_ms)
                rss = conn.peak_rss_mib()
                if rss is not None:
                    cold_rss.append(rss)
        self.rss["cold_mib"] = max(cold_rss) if cold_rss else None
        self.result["cold_start"] = {"median_ms": median(runs), "runs_ms": runs, "initialize_ms": initialize}

    async def _extra_servers(self, state_dir: Path) -> None:
        """Servers 2, 3, ... on the same state dir while the first still runs, each answering
        one call: what each adds to the memory of all of them together (their PSS: a page
        they share counts once), and each one's own RSS."""
        conns: list[Conn] = []
        added: list[float] = []
        rss: list[float] = []
        before: float | None = None
        try:
            for run in range(self.plan.extra_servers + 1):
                conn = self._connect(state_dir, QUIET_SNAPSHOT_INTERVAL_S)
                await conn.__aenter__()
                conns.append(conn)
                await self._first_call(conn, run)
                total = proc.pss_mib([p for c in conns for p in c.pids])
                if run and before is not None and total is not None:
                    added.append(total - before)
                    earlier = {p for c in conns[:-1] for p in c.pids}  # a shared host is server 1's
                    mine = [p for p in conn.pids if p not in earlier]
                    own = [v for v in (proc.status_kib(p, "VmRSS") for p in mine) if v is not None]
                    if own:
                        rss.append(max(own) / 1024.0)
                before = total
        finally:
            for conn in reversed(conns):
                await conn.__aexit__(None, None, None)
        self.result["extra_servers"] = {
            "count": len(added),
            "added_pss_mib": median(added) if added else None,
            "added_pss_runs_mib": added,
            "rss_mib": median(rss) if rss else None,
        }

    def _query_text(self, run: int) -> str:
        queries = self.work.queries
        return queries[run % len(queries)].text if queries else "error"


class ServerRun(_Run):
    """Measures one server: load session (paired with the floor), stall session, cold starts."""

    def __init__(self, plan: Plan, work: Workload, spec: str, *, add_flags: bool, errlog: TextIO) -> None:
        super().__init__(plan, work, spec, add_flags=add_flags, errlog=errlog)
        self.pairing: _Pairing | None = None

    async def _call(self, conn: Conn, op: str, index: int, args: dict[str, Any], payload: str = "") -> Reply:
        pairing = self.pairing
        if pairing is None:
            return await conn.call(op, args)
        if index % 2 and op in pairing.last_sizes:
            floor = await pairing.conn.call("noop", pairing.noop_args(args, payload, pairing.last_sizes[op]))
            reply = await conn.call(op, args)
        else:
            reply = await conn.call(op, args)
            floor = await pairing.conn.call(
                "noop", pairing.noop_args(args, payload, (reply.text_bytes, reply.struct_bytes))
            )
        pairing.last_sizes[op] = (reply.text_bytes, reply.struct_bytes)
        pairing.samples.setdefault(op, []).append(floor.ms)
        return reply

    async def _first_call(self, conn: Conn, run: int) -> Reply:
        query = self._query_text(run)
        return await conn.call("query", {"query": query, "limit": QUERY_LIMIT})

    # -- session 1 ------------------------------------------------------------------------------
    async def _load(self, state_dir: Path) -> None:
        floor_conn = self._floor_connection(state_dir)
        async with self._connect(state_dir, QUIET_SNAPSHOT_INTERVAL_S) as conn, floor_conn:
            self.pairing = _Pairing(floor_conn)
            try:
                await conn.list_tools()
                await floor_conn.list_tools()
                await self._configure_for_load(conn)
                ids = await self._bulk(conn)
                ids += await self._singles(conn)
                await self._queries(conn, ids)
                await self._recalls(conn)
                self.rss["load_mib"] = conn.peak_rss_mib()
            finally:
                self._paired_floor()
                self.pairing = None
        self.result["shutdown_ms"] = conn.closed_ms

    def _paired_floor(self) -> None:
        assert self.pairing is not None
        pairing = self.pairing
        bulk_ms = pairing.samples.get("bulk_store", [])
        bulk_items = sum(len(b) for b in self.work.bulk[: len(bulk_ms)])
        compact_ms = pairing.samples.get("compact", [])
        self.result["paired_floor"] = {
            "store": pairing.summary("store"),
            "bulk": {"items_per_s": bulk_items / (sum(bulk_ms) / 1000) if bulk_ms else None},
            "query": pairing.summary("query"),
            "recall": pairing.summary("recall"),
            "compact": {"ms": median(compact_ms) if compact_ms else None, "runs_ms": compact_ms},
        }

    async def _configure_for_load(self, conn: Conn) -> None:
        chars = sum(len(i.content) for i in self.work.items)
        budget = max(100_000, math.ceil(chars / CHARS_PER_TOKEN) * 2)
        try:
            await conn.call("configure", {"auto_compact": False, "token_budget": budget})
        except ToolCallError as exc:
            self._error("configure(token_budget) before load; retried with auto_compact only", exc)
            await conn.call("configure", {"auto_compact": False})

    async def _bulk(self, conn: Conn) -> list[str | None]:
        ids: list[str | None] = []
        batch_ms: list[float] = []
        for index, batch in enumerate(self.work.bulk):
            reply = await self._call(conn, "bulk_store", index, {"items": batch})
            batch_ms.append(reply.ms)
            got = _ids(reply.data)
            ids.extend(got if got is not None and len(got) == len(batch) else [None] * len(batch))
        seconds = sum(batch_ms) / 1000.0
        count = sum(len(b) for b in self.work.bulk)
        self.result["bulk"] = {
            "items": count,
            "batch": self.plan.batch,
            "seconds": seconds,
            "items_per_s": count / seconds if seconds else None,
            "batch_ms": summarize(batch_ms),
            "ids_returned": any(i is not None for i in ids),
        }
        return ids

    async def _singles(self, conn: Conn) -> list[str | None]:
        ids: list[str | None] = []
        latencies: list[float] = []
        for index, args in enumerate(self.work.singles):
            reply = await self._call(conn, "store", index, args, args["content"] + args.get("summary", ""))
            latencies.append(reply.ms)
            ids.append(str(reply.data["id"]) if "id" in reply.data else None)
        self.result["store"] = summarize(latencies)
        return ids

    async def _queries(self, conn: Conn, ids: Sequence[str | None]) -> None:
        latencies: list[float] = []
        checked = hits = 0
        for index, query in enumerate(self.work.queries):
            reply = await self._call(conn, "query", index, {"query": query.text, "limit": QUERY_LIMIT}, query.text)
            latencies.append(reply.ms)
            target = ids[query.target] if query.target < len(ids) else None
            if target is None:
                continue
            checked += 1
            found = [str(i.get("id")) for i in reply.data.get("items", []) if isinstance(i, dict)]
            hits += target in found
        self.result["query"] = {
            **summarize(latencies),
            "checked": checked,
            "hit_rate": hits / checked if checked else None,
        }

    async def _recalls(self, conn: Conn) -> None:
        latencies = [(await self._call(conn, "recall", i, {})).ms for i in range(self.plan.recalls)]
        self.result["recall"] = summarize(latencies)

    # -- compaction: one session per run, each on a fresh copy of the loaded state ---------------
    async def _compacts(self, state_dir: Path) -> None:
        """Compaction changes the state it measures, so each run gets its own copy of the state
        the load session left; the figure is the median of the runs."""
        floor_conn = self._floor_connection(state_dir)
        runs: list[dict[str, Any]] = []
        rss: list[float] = []
        async with floor_conn:
            self.pairing = _Pairing(floor_conn)
            try:
                for run in range(self.plan.compactions):
                    copy = state_dir.parent / f"compact-{run}"
                    shutil.copytree(state_dir, copy)
                    try:
                        async with self._connect(copy, QUIET_SNAPSHOT_INTERVAL_S) as conn:
                            runs.append(await self._compact(conn, run))
                            peak = conn.peak_rss_mib()
                            if peak is not None:
                                rss.append(peak)
                    finally:
                        shutil.rmtree(copy, ignore_errors=True)
            finally:
                compact_ms = self.pairing.samples.get("compact", [])
                self.result.setdefault("paired_floor", {})["compact"] = {
                    "ms": median(compact_ms) if compact_ms else None,
                    "runs_ms": compact_ms,
                }
                self.pairing = None
        self.rss["compact_mib"] = max(rss) if rss else None
        if runs:
            self.result["compact"] = {
                **runs[-1],
                "ms": median([r["ms"] for r in runs]),
                "runs_ms": [r["ms"] for r in runs],
            }

    async def _first_write(self, conn: Conn, run: int) -> float:
        """One small store right after start: the first write of a process may load what
        only writes need (the token encoding), and that is timed here, not in the call after."""
        content = self.work.small[run % len(self.work.small)].content
        ms = (await conn.call("store", {"content": content})).ms
        self.result.setdefault("first_write", {"runs_ms": []})["runs_ms"].append(ms)
        self.result["first_write"]["median_ms"] = median(self.result["first_write"]["runs_ms"])
        return ms

    async def _compact(self, conn: Conn, run: int) -> dict[str, Any]:
        await self._first_write(conn, run)
        status = (await conn.call("status", {})).data
        used = status.get("tokens_used")
        if not isinstance(used, int) or used <= 0:
            used = math.ceil(sum(len(i.content) for i in self.work.items) / CHARS_PER_TOKEN)
        await conn.call("configure", {"token_budget": used, "auto_compact": False})
        reply = await self._call(conn, "compact", run, {"target_usage": COMPACT_TARGET})
        after = (await conn.call("status", {})).data
        return {
            "ms": reply.ms,
            "budget": used,
            "method": f"budget := tokens_used ({used}), auto_compact off, compact(target_usage={COMPACT_TARGET}); "
            "each run on its own copy of the loaded state",
            "reply": {k: v for k, v in reply.data.items() if not isinstance(v, list | dict)},
            "needs_summary": len(reply.data.get("needs_summary") or []),
            "status_after": {k: after.get(k) for k in STATUS_FIELDS},
        }

    # -- session 2 ------------------------------------------------------------------------------
    async def _stall(self, state_dir: Path) -> None:
        sizes: dict[str, tuple[int, int]] = {}

        async with self._connect(state_dir, STALL_SNAPSHOT_INTERVAL_S) as conn:

            async def call(op: str, args: dict[str, Any], _payload: str) -> Reply:
                reply = await conn.call(op, args)
                sizes.setdefault(op, (reply.text_bytes, reply.struct_bytes))
                return reply

            await conn.list_tools()
            await self._first_write(conn, self.plan.compactions)
            before = (await conn.call("status", {})).data
            stats = await _stall_loop(call, self.work.small, self.plan.stall_seconds)
            after = (await conn.call("status", {})).data
            self.rss["stall_mib"] = conn.peak_rss_mib()
        reported = snapshot_ms_from_status(after)
        self.result["snapshot"] = {
            "ms": reported[0] if reported else None,
            "source": f"status {reported[1]}" if reported else "status reports no snapshot duration",
            "seconds": self.plan.stall_seconds,
            "reply_sizes": sizes,
            "status_before": {k: before.get(k) for k in STATUS_FIELDS},
            "status_after": {k: after.get(k) for k in STATUS_FIELDS},
            "persistence_before": persistence_fields(before),
            "persistence_after": persistence_fields(after),
            **_stall_figures(stats),
        }


class FloorRun(_Run):
    """The no-op server's own sessions: stall-phase jitter (and its shutdown), cold start, RSS."""

    def __init__(self, plan: Plan, work: Workload, *, errlog: TextIO, reply_sizes: dict[str, tuple[int, int]]) -> None:
        super().__init__(plan, work, _floor_spec(), add_flags=True, errlog=errlog)
        self.reply_sizes = reply_sizes

    def _noop(self, op: str, payload: str) -> dict[str, Any]:
        text_bytes, struct_bytes = self.reply_sizes.get(op, (0, 0))
        return {"payload": payload, "text_bytes": text_bytes, "struct_bytes": struct_bytes}

    async def _first_call(self, conn: Conn, run: int) -> Reply:
        return await conn.call("noop", self._noop("query", self._query_text(run)))

    async def _load(self, state_dir: Path) -> None:
        """Nothing to load: the no-op's per-call figures come from the pairing."""

    async def _compacts(self, state_dir: Path) -> None:
        """Paired with the server's compaction runs (see ServerRun._compacts)."""

    async def _stall(self, state_dir: Path) -> None:
        async with self._connect(state_dir, STALL_SNAPSHOT_INTERVAL_S) as conn:

            async def call(op: str, _args: dict[str, Any], payload: str) -> Reply:
                return await conn.call("noop", self._noop(op, payload))

            await conn.list_tools()
            stats = await _stall_loop(call, self.work.small, self.plan.stall_seconds)
            self.rss["stall_mib"] = conn.peak_rss_mib()
        self.result["shutdown_ms"] = conn.closed_ms
        self.result["snapshot"] = {"seconds": self.plan.stall_seconds, **_stall_figures(stats)}


async def measure_size(plan: Plan, specs: Sequence[str], *, add_flags: bool, errlog: TextIO) -> dict[str, Any]:
    """Every server, then the floor's own sessions, at one size."""
    started = time.perf_counter()
    work = Workload.build(plan)
    logger.info("N=%d: corpus and queries built in %.1f s", plan.size, time.perf_counter() - started)
    servers: dict[str, dict[str, Any]] = {}
    for label, spec in label_specs(specs).items():
        logger.info("N=%d: measuring %s", plan.size, label)
        servers[label] = await ServerRun(plan, work, spec, add_flags=add_flags, errlog=errlog).run()
    first = next(iter(servers.values()))
    logger.info("N=%d: measuring the floor's own sessions", plan.size)
    sizes = first.get("snapshot", {}).get("reply_sizes", {})
    floor = await FloorRun(plan, work, errlog=errlog, reply_sizes=sizes).run()
    # The floor's per-call figures are the first server's paired no-op calls.
    floor.update(first.get("paired_floor", {}))
    return {
        "size": plan.size,
        "plan": {k: getattr(plan, k) for k in plan.__dataclass_fields__},
        "corpus": {
            "items_stored": plan.size + len(work.singles),
            "chars": sum(len(i.content) for i in work.items),
            "kinds": {k: sum(1 for i in work.items if i.kind == k) for k in corpus.KINDS},
            "near_duplicates": sum(1 for i in work.items if i.duplicate_of is not None),
            "with_summary": sum(1 for i in work.items if i.summary is not None),
        },
        "servers": servers,
        "floor": floor,
    }


def label_specs(specs: Sequence[str]) -> dict[str, str]:
    """A short, unique column label per server command."""
    labels: dict[str, str] = {}
    for spec in specs:
        tokens = shlex.split(spec)
        if "-m" in tokens[:-1]:
            base = tokens[tokens.index("-m") + 1]
        elif Path(tokens[0]).name.startswith("python") and len(tokens) > 1:
            base = Path(next((t for t in tokens[1:] if not t.startswith("-")), tokens[0])).stem
        else:
            base = Path(tokens[0]).stem
        label, n = base, 2
        while label in labels:
            label, n = f"{base}#{n}", n + 1
        labels[label] = spec
    return labels
