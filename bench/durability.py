"""Durability attack harness: do acknowledged writes survive? Measured from outside.

    python -m bench.durability [--quick] [--seed N] [--out FILE.json]

Everything runs as real subprocesses (`sys.executable -m compactor`, this checkout's code via
PYTHONPATH) driven over newline-delimited JSON-RPC on stdio, plus the `compactor` CLI. A write
is acknowledged when its non-error reply was read; only acknowledged writes are owed.

1. multiprocess: P servers on one state dir, each doing W `store` calls mixed with `forget`s,
   CLI writers (`import`, `pin`, `forget --yes`) alongside. After every acknowledged store,
   another server `get`s the id at once (a miss is a stale read). At the end a fresh server
   `get`s every acknowledged id; each forgotten one must be gone and its content in no file.
2. kill9: R rounds; a round starts one or two servers (some with a 0.05 s snapshot interval),
   bursts store / bulk_store (up to 1,000 items) / forget / compact, and SIGKILLs them at a
   random moment. Then `*.tmp` files are listed, `compactor doctor` runs, and a fresh server
   checks every acknowledged item (full `export` pages for all, `get` for this round's and
   for forgotten ids).
3. corruption: one base dir (a snapshot plus journal lines, killed -9) damaged six ways; what
   the server does at start, what `compactor doctor` says, and whether `doctor --repair` gives
   a startable, healthy dir (and how many acknowledged items the repaired dir still has).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCOPE = "bench-durability"
WORDS = (
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
    "november",
    "oscar",
    "papa",
    "quebec",
    "romeo",
    "sierra",
    "tango",
    "uniform",
    "victor",
    "whiskey",
    "xray",
    "yankee",
    "zulu",
    "parser",
    "journal",
    "snapshot",
    "lock",
    "fsync",
    "rotate",
    "replay",
    "budget",
    "compact",
    "archive",
    "summary",
    "token",
    "index",
    "query",
)


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT) + os.pathsep + e.get("PYTHONPATH", "")
    e.pop("COMPACTOR_STATE_DIR", None)
    return e


def server_cmd(state_dir: Path, interval: float = 30.0) -> list[str]:
    return [
        sys.executable,
        "-m",
        "compactor",
        "--state-dir",
        str(state_dir),
        "--scope",
        SCOPE,
        "--snapshot-interval",
        str(interval),
        "--no-share",  # a SIGKILL must hit the process that holds the store, not a relay to it
    ]


def cli(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "compactor", *args],
        capture_output=True,
        text=True,
        env=env(),
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        check=False,
    )


class Content:
    """Unique, credential-free, non-duplicate texts: each carries a marker no other text has."""

    def __init__(self, rng: random.Random, tag: str) -> None:
        self.rng = rng
        self.tag = tag
        self.n = 0

    def marker(self) -> str:
        self.n += 1
        return f"DUR{self.tag}X{self.n:07d}Q"

    def text(self, words: int = 20) -> tuple[str, str]:
        m = self.marker()
        body = " ".join(self.rng.choice(WORDS) for _ in range(words))
        return m, f"{m} {body} n{self.rng.randrange(10**9)}"


class Dead(Exception):
    """The server's stdout closed (killed or exited) before the reply came."""


class Server:
    """One `compactor` stdio subprocess. `call` is thread-safe (one request at a time)."""

    def __init__(self, state_dir: Path, interval: float = 30.0, log: Path | None = None) -> None:
        self.log = log or Path(tempfile.mkstemp(prefix="dur-server-", suffix=".log")[1])
        with open(self.log, "ab") as errf:
            self.proc = subprocess.Popen(
                server_cmd(state_dir, interval),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=errf,
                env=env(),
                cwd=ROOT,
            )
        self._id = 0
        self._buf = b""
        self.lock = threading.Lock()
        self.killed = False

    def start(self, timeout: float = 60.0) -> None:
        reply = self.request(
            "initialize",
            {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "durability", "version": "1"}},
            timeout,
        )
        if "result" not in reply:
            raise Dead(f"initialize failed: {reply}")
        self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def _send(self, msg: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(msg).encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError, OSError) as exc:
            raise Dead(str(exc)) from exc

    def _line(self, timeout: float) -> bytes:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no reply from the server")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                try:
                    chunk = os.read(fd, 1 << 16)
                except OSError as exc:
                    raise Dead(str(exc)) from exc
                if not chunk:
                    raise Dead("server closed stdout")
                self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line

    def request(self, method: str, params: dict[str, Any], timeout: float = 120.0) -> dict[str, Any]:
        with self.lock:
            self._id += 1
            rid = self._id
            self._send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
            while True:
                reply = json.loads(self._line(timeout))
                if reply.get("id") == rid:
                    return reply  # type: ignore[no-any-return]

    def call(self, tool: str, timeout: float = 120.0, **arguments: Any) -> tuple[bool, dict[str, Any]]:
        """(ok, structured content or {"error": text}). Raises Dead if no reply can come."""
        reply = self.request("tools/call", {"name": tool, "arguments": arguments}, timeout)
        res = reply.get("result")
        if res is None:
            return False, {"error": json.dumps(reply.get("error"))}
        if res.get("isError"):
            text = " ".join(c.get("text", "") for c in res.get("content", []))
            return False, {"error": text}
        return True, res.get("structuredContent") or {}

    def kill(self) -> None:
        self.killed = True
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)  # pipes stay open: a thread may still be reading; stop() closes them

    def stop(self, timeout: float = 60.0) -> int:
        if self.proc.poll() is None:
            if self.proc.stdin is not None:
                with contextlib.suppress(BrokenPipeError, OSError):
                    self.proc.stdin.close()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self._close_pipes()
        return self.proc.returncode

    def _close_pipes(self) -> None:
        for s in (self.proc.stdin, self.proc.stdout):
            if s is not None and not s.closed:
                with contextlib.suppress(OSError):
                    s.close()

    def stderr_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""


# ---------------------------------------------------------------- verification


@dataclass
class Ledger:
    """What the harness was told: acknowledged contents, acknowledged forgets, and ids whose
    fate is unknown (a forget sent but its reply never read)."""

    acked: dict[str, str] = field(default_factory=dict)  # id -> content
    markers: dict[str, str] = field(default_factory=dict)  # id -> unique marker in its content
    forgotten: set[str] = field(default_factory=set)
    unsure: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, item_id: str, content: str, marker: str) -> None:
        with self.lock:
            self.acked[item_id] = content
            self.markers[item_id] = marker

    def live(self) -> dict[str, str]:
        return {i: c for i, c in self.acked.items() if i not in self.forgotten and i not in self.unsure}


def export_all(srv: Server) -> dict[str, str]:
    """id -> content of every item, over the `export` tool's pages."""
    out: dict[str, str] = {}
    cursor: str | None = None
    for _ in range(100_000):
        args: dict[str, Any] = {"tier": "all"}
        if cursor:
            args["cursor"] = cursor
        ok, res = srv.call("export", **args)
        if not ok:
            raise RuntimeError(f"export failed: {res}")
        for rec in res.get("items", []):
            out[rec["id"]] = rec.get("content", "")
        cursor = res.get("next_cursor")
        if not cursor:
            break
    return out


@dataclass
class Check:
    lost: list[str] = field(default_factory=list)  # acked, not forgotten, missing or changed
    resurrected: list[str] = field(default_factory=list)  # acked forget, but get still finds it
    gets: int = 0


def verify(
    state_dir: Path,
    ledger: Ledger,
    get_ids: list[str] | None = None,
    use_export: bool = False,
    log: Path | None = None,
    srv: Server | None = None,
) -> Check:
    """A fresh server on the dir (or `srv`, started and not yet used): every live acknowledged
    id must come back with its exact content; every acknowledged forget must stay gone."""
    chk = Check()
    live = ledger.live()
    own = srv is None
    if srv is None:
        srv = Server(state_dir, log=log)
    try:
        if own:
            srv.start()
        exported = export_all(srv) if use_export else None
        ids = list(live) if get_ids is None else [i for i in get_ids if i in live]
        for item_id in ids:
            ok, res = srv.call("get", id=item_id)
            chk.gets += 1
            if not ok or res.get("content") != live[item_id]:
                chk.lost.append(item_id)
        if exported is not None:
            chk.lost.extend(i for i, c in live.items() if exported.get(i) != c and i not in chk.lost)
        for item_id in sorted(ledger.forgotten):
            ok, _ = srv.call("get", id=item_id)
            chk.gets += 1
            if ok:
                chk.resurrected.append(item_id)
    finally:
        srv.stop()
    return chk


def doctor(state_dir: Path, *extra: str) -> tuple[int, str]:
    """(exit code, first error line) of `compactor doctor --json`."""
    r = cli("doctor", "--state-dir", str(state_dir), "--json", *extra)
    r.stdout, r.stderr = r.stdout.replace(str(state_dir), "D"), r.stderr.replace(str(state_dir), "D")
    first = ""
    try:
        rep = json.loads(r.stdout)
        errs = [p for p in rep.get("problems", []) if p.get("severity") == "error"]
        if errs:
            first = f"{errs[0].get('check')}: {errs[0].get('what')}"
    except ValueError:
        first = (r.stderr.strip().splitlines() or r.stdout.strip().splitlines() or [""])[0]
    return r.returncode, first[:240]


def files_containing(state_dir: Path, markers: dict[str, str]) -> list[str]:
    """Ids whose marker occurs in some file of the state dir."""
    blobs = [p.read_bytes() for p in state_dir.rglob("*") if p.is_file()]
    return [i for i, m in markers.items() if any(m.encode() in b for b in blobs)]


def tmp_files(state_dir: Path) -> list[str]:
    return sorted(p.name for p in state_dir.iterdir() if ".tmp" in p.name)


# ---------------------------------------------------------------- 1. multiprocess writers


def _cli_writer(
    state_dir: Path,
    ledger: Ledger,
    server_ids: list[str],
    rng: random.Random,
    tag: str,
    stop: threading.Event,
    st: dict,
) -> None:
    content = Content(rng, tag)
    mine: list[str] = []
    workdir = Path(tempfile.mkdtemp(prefix="dur-cli-"))
    sd = ["--state-dir", str(state_dir), "--scope", SCOPE, "--json"]
    try:
        while not stop.is_set():
            op = rng.random()
            if op < 0.5 or not mine:
                m, body = content.text(12)
                text = f"---\nname: note-{m.lower()}\ndescription: bench note {m}\ntype: project\n---\n{body}"
                path = workdir / f"{m}.md"
                path.write_text(text + "\n")
                r = cli("import", *sd, str(path))
                st["cli_calls"] += 1
                if r.returncode == 0:
                    for item_id in json.loads(r.stdout)["imported"]:
                        ledger.add(item_id, text, m)
                        mine.append(item_id)
                        st["cli_acked"] += 1
                else:
                    st["cli_errors"].append(("import", r.returncode, r.stderr.strip()[-200:]))
            elif op < 0.8 and server_ids:
                r = cli("pin", *sd, rng.choice(server_ids))
                st["cli_calls"] += 1
                if r.returncode not in (0, 1):  # 1: not found (a server forgot it meanwhile)
                    st["cli_errors"].append(("pin", r.returncode, r.stderr.strip()[-200:]))
            else:
                victim = mine.pop(rng.randrange(len(mine)))
                with ledger.lock:
                    ledger.unsure.add(victim)
                r = cli("forget", *sd, "--yes", victim)
                st["cli_calls"] += 1
                if r.returncode == 0 and victim in json.loads(r.stdout)["forgot"]:
                    with ledger.lock:
                        ledger.forgotten.add(victim)
                        ledger.unsure.discard(victim)
                else:
                    st["cli_errors"].append(("forget", r.returncode, r.stderr.strip()[-200:]))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def multiprocess(
    base: Path, procs: int, writes: int, cli_writers: int, seed: int, logdir: Path, deadline_s: float
) -> dict[str, Any]:
    """Writers stop at W stores or after deadline_s seconds, whichever comes first."""
    state_dir = base / f"mp-{procs}"
    rng = random.Random(seed)
    ledger = Ledger()
    servers = [
        Server(state_dir, interval=rng.choice([1.0, 5.0, 30.0]), log=logdir / f"mp{procs}-{i}.log")
        for i in range(procs)
    ]
    errors: list[str] = []
    st: dict[str, Any] = {"cli_calls": 0, "cli_acked": 0, "cli_errors": []}
    counts = {
        "stores": 0,
        "acked": 0,
        "store_errors": 0,
        "forgets": 0,
        "stale_checks": 0,
        "stale": 0,
        "cut_by_deadline": 0,
    }
    clock = threading.Lock()
    server_ids: list[str] = []
    stale_examples: list[str] = []
    t0 = time.monotonic()
    end = t0 + deadline_s
    try:
        for s in servers:
            s.start()

        def writer(i: int) -> None:
            r = random.Random(seed * 1000 + i)
            content = Content(r, f"{procs}P{i}")
            mine: list[str] = []
            me, other = servers[i], servers[(i + 1) % procs]
            try:
                for _ in range(writes):
                    if time.monotonic() > end:
                        with clock:
                            counts["cut_by_deadline"] += 1
                        break
                    m, text = content.text(r.randrange(8, 40))
                    ok, res = me.call("store", content=text, importance=r.randint(1, 9))
                    with clock:
                        counts["stores"] += 1
                    if not ok:
                        with clock:
                            counts["store_errors"] += 1
                        errors.append(f"store on p{i}: {res['error'][:200]}")
                        continue
                    item_id = res["id"]
                    ledger.add(item_id, text, m)
                    mine.append(item_id)
                    with clock:
                        counts["acked"] += 1
                        server_ids.append(item_id)
                    ok2, got = other.call("get", id=item_id)
                    with clock:
                        counts["stale_checks"] += 1
                        if not ok2 or got.get("content") != text:
                            counts["stale"] += 1
                            stale_examples.append(f"{item_id} stored on p{i}, read on p{(i + 1) % procs}: {got}")
                    if r.random() < 0.04 and len(mine) > 3:
                        victim = mine.pop(r.randrange(len(mine)))
                        with ledger.lock:
                            ledger.unsure.add(victim)
                        okf, resf = me.call("forget", id=victim)
                        with clock:
                            counts["forgets"] += 1
                        if okf:
                            with ledger.lock:
                                ledger.forgotten.add(victim)
                                ledger.unsure.discard(victim)
                        else:
                            errors.append(f"forget on p{i}: {resf['error'][:200]}")
            except (Dead, TimeoutError) as exc:
                errors.append(f"p{i} died: {exc}")

        stop = threading.Event()
        threads = [threading.Thread(target=writer, args=(i,)) for i in range(procs)]
        threads += [
            threading.Thread(
                target=_cli_writer,
                args=(state_dir, ledger, server_ids, random.Random(seed + 7 + j), f"{procs}C{j}", stop, st),
            )
            for j in range(cli_writers)
        ]
        for t in threads:
            t.start()
        for t in threads[:procs]:
            t.join()
        stop.set()
        for t in threads[procs:]:
            t.join()
    finally:
        for s in servers:
            s.stop()
    write_s = time.monotonic() - t0
    chk = verify(state_dir, ledger, log=logdir / f"mp{procs}-verify.log")
    leaked = files_containing(state_dir, {i: ledger.markers[i] for i in ledger.forgotten})
    rc, first = doctor(state_dir)
    return {
        "processes": procs,
        "writes_per_process": writes,
        "cli_writers": cli_writers,
        **counts,
        "cli_calls": st["cli_calls"],
        "cli_acked": st["cli_acked"],
        "cli_errors": st["cli_errors"][:10],
        "forgotten_acked": len(ledger.forgotten),
        "unsure": len(ledger.unsure),
        "verified": chk.gets,
        "lost": len(chk.lost),
        "lost_ids": chk.lost[:20],
        "resurrected": len(chk.resurrected),
        "forgotten_content_on_disk": len(leaked),
        "forgotten_on_disk_ids": leaked[:20],
        "stale_examples": stale_examples[:5],
        "errors": errors[:10],
        "doctor_exit": rc,
        "doctor_first_error": first,
        "write_seconds": round(write_s, 1),
        "stores_per_second": round(counts["stores"] / write_s, 1),
    }


# ---------------------------------------------------------------- 2. kill -9 rounds


def _burst(srv: Server, ledger: Ledger, content: Content, rng: random.Random, st: dict, lock: threading.Lock) -> None:
    try:
        for _ in range(rng.randint(5, 40)):
            op = rng.random()
            if op < 0.55:
                m, text = content.text(rng.randrange(5, 30))
                ok, res = srv.call("store", content=text)
                if ok:
                    ledger.add(res["id"], text, m)
                    with lock:
                        st["acked_writes"] += 1
                        st["acked_items"] += 1
                        st["round_ids"].append(res["id"])
            elif op < 0.75:
                n = rng.choice([1, 10, 100, 400, 1000])
                batch = [content.text(rng.randrange(3, 12)) for _ in range(n)]
                ok, res = srv.call("bulk_store", items=[{"content": t} for _, t in batch])
                if ok:
                    for item_id, (m, t) in zip(res["ids"], batch, strict=True):
                        ledger.add(item_id, t, m)
                    with lock:
                        st["acked_writes"] += 1
                        st["acked_items"] += len(batch)
                        st["round_ids"].extend(res["ids"][:20])
            elif op < 0.88:
                with ledger.lock:
                    cands = [i for i in ledger.acked if i not in ledger.forgotten and i not in ledger.unsure]
                if not cands:
                    continue
                victim = rng.choice(cands)
                with ledger.lock:
                    ledger.unsure.add(victim)
                ok, _ = srv.call("forget", id=victim)
                if ok:
                    with ledger.lock:
                        ledger.forgotten.add(victim)
                        ledger.unsure.discard(victim)
                    with lock:
                        st["acked_writes"] += 1
            else:
                ok, _ = srv.call("compact", target_usage=rng.choice([0.3, 0.5, 0.7]))
                if ok:
                    with lock:
                        st["acked_writes"] += 1
    except (Dead, TimeoutError):
        pass


def kill9(base: Path, rounds: int, seed: int, logdir: Path, per_dir: int = 10) -> dict[str, Any]:
    rng = random.Random(seed)
    totals = {
        "rounds": rounds,
        "acked_writes": 0,
        "acked_items": 0,
        "lost": 0,
        "resurrected": 0,
        "doctor_failures": 0,
        "start_failures": 0,
        "tmp_after_kill": 0,
        "tmp_after_next_start": 0,
        "two_server_rounds": 0,
        "fast_snapshot_rounds": 0,
    }
    failures: list[dict[str, Any]] = []
    ledger = Ledger()
    state_dir = base
    for rnd in range(rounds):
        if rnd % per_dir == 0:
            state_dir = base / f"k9-{rnd // per_dir}"
            ledger = Ledger()
        n_srv = 2 if rng.random() < 0.3 else 1
        totals["two_server_rounds"] += n_srv == 2
        st: dict[str, Any] = {"acked_writes": 0, "acked_items": 0, "round_ids": []}
        lock = threading.Lock()
        servers: list[Server] = []
        try:
            for k in range(n_srv):
                interval = rng.choice([0.05, 0.05, 0.3, 30.0])
                totals["fast_snapshot_rounds"] += interval < 0.1 and k == 0
                s = Server(state_dir, interval=interval, log=logdir / f"k9-{rnd}-{k}.log")
                servers.append(s)
                s.start()
        except (Dead, TimeoutError) as exc:
            totals["start_failures"] += 1
            failures.append({"round": rnd, "start": str(exc), "stderr": servers[-1].stderr_text()[-400:]})
            for s in servers:
                s.kill()
                s.stop()
            continue
        threads = [
            threading.Thread(
                target=_burst,
                args=(
                    s,
                    ledger,
                    Content(random.Random(rng.random()), f"R{rnd}S{k}"),
                    random.Random(rng.random()),
                    st,
                    lock,
                ),
            )
            for k, s in enumerate(servers)
        ]
        for t in threads:
            t.start()
        time.sleep(rng.uniform(0.05, 2.5))
        for s in servers:
            s.kill()
        for t in threads:
            t.join(60)
        for s in servers:
            s.stop()
        totals["acked_writes"] += st["acked_writes"]
        totals["acked_items"] += st["acked_items"]
        left = tmp_files(state_dir)
        totals["tmp_after_kill"] += len(left)
        rc, first = doctor(state_dir)
        if rc != 0:
            totals["doctor_failures"] += 1
            failures.append({"round": rnd, "doctor_exit": rc, "doctor": first})
        try:
            chk = verify(state_dir, ledger, get_ids=st["round_ids"], use_export=True, log=logdir / f"k9-{rnd}-v.log")
        except (Dead, TimeoutError, RuntimeError) as exc:
            totals["start_failures"] += 1
            failures.append({"round": rnd, "verify_start": str(exc)})
            continue
        after = tmp_files(state_dir)
        totals["tmp_after_next_start"] += len(after)
        totals["lost"] += len(chk.lost)
        totals["resurrected"] += len(chk.resurrected)
        if chk.lost or chk.resurrected or after:
            failures.append(
                {"round": rnd, "lost": chk.lost[:10], "resurrected": chk.resurrected[:10], "tmp_after_start": after}
            )
    totals["failures"] = failures[:20]
    return totals


# ---------------------------------------------------------------- 3. corruption


def _base_dir(path: Path, seed: int, logdir: Path) -> Ledger:
    """A snapshot (written by a forget) plus journal lines after it, left by a kill -9."""
    rng = random.Random(seed)
    content = Content(rng, "CB")
    ledger = Ledger()
    srv = Server(path, log=logdir / "corrupt-base.log")
    srv.start()
    for _ in range(40):
        m, t = content.text(15)
        ok, res = srv.call("store", content=t)
        assert ok, res
        ledger.add(res["id"], t, m)
    victim = next(iter(ledger.acked))
    ok, _ = srv.call("forget", id=victim)
    assert ok
    ledger.forgotten.add(victim)
    for _ in range(20):
        m, t = content.text(15)
        ok, res = srv.call("store", content=t)
        assert ok, res
        ledger.add(res["id"], t, m)
    srv.kill()
    return ledger


def _flip_in_content(path: Path, marker: str) -> None:
    raw = bytearray(path.read_bytes())
    at = raw.index(marker.encode()) + len(marker) + 2  # a letter of the first word after the marker
    raw[at] = ord("Z") if raw[at] != ord("Z") else ord("Y")
    path.write_bytes(bytes(raw))


def _corruptions(ledger: Ledger) -> dict[str, Any]:
    ids = list(ledger.acked)
    in_snapshot = ledger.markers[ids[5]]  # stored before the forget: in the snapshot
    in_journal = ledger.markers[ids[50]]  # stored after it: a journal line

    def journal_byte(d: Path) -> None:
        _flip_in_content(d / "journal.jsonl", in_journal)

    def snapshot_byte(d: Path) -> None:
        _flip_in_content(d / "snapshot.json", in_snapshot)

    def journal_60(d: Path) -> None:
        j = d / "journal.jsonl"
        os.truncate(j, int(j.stat().st_size * 0.6))

    def journal_deleted(d: Path) -> None:
        (d / "journal.jsonl").unlink()

    def snapshot_deleted(d: Path) -> None:
        (d / "snapshot.json").unlink()

    def torn_tail(d: Path) -> None:
        j = d / "journal.jsonl"
        last = j.read_bytes().rstrip(b"\n").rsplit(b"\n", 1)[-1]
        with open(j, "ab") as f:
            f.write(last[: len(last) // 2])  # half a line, no newline: a crash mid-append

    return {
        "journal: 1 byte changed in a line's content": journal_byte,
        "snapshot: 1 byte changed": snapshot_byte,
        "journal truncated to 60%": journal_60,
        "journal deleted": journal_deleted,
        "snapshot deleted": snapshot_deleted,
        "journal: torn last line (unacknowledged)": torn_tail,
    }


def _try_start(state_dir: Path, ledger: Ledger, log: Path) -> dict[str, Any]:
    srv = Server(state_dir, log=log)
    try:
        srv.start(timeout=60)
    except (Dead, TimeoutError):
        srv.stop()
        err = srv.stderr_text().replace(str(state_dir), "D")
        msg = next((ln for ln in err.splitlines() if "cannot start" in ln), err[-300:])
        return {"starts": False, "message": msg.strip()[:300]}
    chk = verify(state_dir, ledger, srv=srv)
    return {"starts": True, "lost": len(chk.lost), "resurrected": len(chk.resurrected)}


def corruption(base: Path, seed: int, logdir: Path, cases: int | None = None) -> list[dict[str, Any]]:
    """Each damage on a copy of one base dir; `cases` keeps only the last N (the torn line last)."""
    pristine = base / "corrupt-base"
    ledger = _base_dir(pristine, seed, logdir)
    results = []
    damages = list(_corruptions(ledger).items())
    for n, (name, damage) in enumerate(damages[-cases:] if cases else damages):
        a, b = base / f"corrupt-{n}-start", base / f"corrupt-{n}-doctor"
        shutil.copytree(pristine, a)
        damage(a)
        shutil.copytree(a, b)
        start = _try_start(a, ledger, logdir / f"corrupt-{n}-start.log")
        rc, first = doctor(b)
        rep_rc, rep_first = doctor(b, "--repair")
        after_rc, after_first = doctor(b)
        after = _try_start(b, ledger, logdir / f"corrupt-{n}-repaired.log")
        results.append(
            {
                "case": name,
                "server_start": start,
                "doctor_exit": rc,
                "doctor_first_error": first,
                "repair_exit": rep_rc,
                "repair_first_error": rep_first,
                "doctor_after_repair_exit": after_rc,
                "doctor_after_repair_first_error": after_first,
                "start_after_repair": after,
            }
        )
    return results


# ---------------------------------------------------------------- report


def _start_text(s: dict[str, Any]) -> str:
    if s["starts"]:
        return f"starts, lost {s['lost']}" + (f", resurrected {s['resurrected']}" if s["resurrected"] else "")
    return f"refuses: {s['message'][:90]}"


def table(res: dict[str, Any]) -> str:
    secs = ", ".join(f"{k} {v:.0f} s" for k, v in res["scenario_seconds"].items())
    out = [f"seed {res['seed']}  ({res['mode']}, {res['seconds']:.0f} s: {secs})", ""]
    out.append("1. multi-process writers (+ CLI import/pin/forget alongside)")
    out.append(
        "| procs | stores acked | CLI imports acked | forgets acked | lost | resurrected | forgotten on disk "
        "| stale reads / checks | doctor | stores/s (writers cut by deadline) |"
    )
    out.append("|---|---|---|---|---|---|---|---|---|---|")
    for r in res["multiprocess"]:
        out.append(
            f"| {r['processes']} x {r['writes_per_process']} | {r['acked']} | {r['cli_acked']} "
            f"| {r['forgotten_acked']} | {r['lost']} | {r['resurrected']} | {r['forgotten_content_on_disk']} "
            f"| {r['stale']} / {r['stale_checks']} "
            f"| {r['doctor_exit']} | {r['stores_per_second']} ({r['cut_by_deadline']}) |"
        )
    k = res["kill9"]
    out += ["", "2. kill -9 rounds"]
    out.append(
        "| rounds (2-server / 0.05 s snapshots) | acked writes (items) | lost | resurrected | doctor failures "
        "| *.tmp after kill / after next start | start failures |"
    )
    out.append("|---|---|---|---|---|---|---|")
    out.append(
        f"| {k['rounds']} ({k['two_server_rounds']} / {k['fast_snapshot_rounds']}) | {k['acked_writes']} "
        f"({k['acked_items']}) | {k['lost']} | {k['resurrected']} | {k['doctor_failures']} "
        f"| {k['tmp_after_kill']} / {k['tmp_after_next_start']} | {k['start_failures']} |"
    )
    out += ["", "3. corruption"]
    out.append("| case | server at start | doctor (exit: first error) | --repair exit | after repair: doctor, start |")
    out.append("|---|---|---|---|---|")
    for c in res["corruption"]:
        out.append(
            f"| {c['case']} | {_start_text(c['server_start'])} | {c['doctor_exit']}: {c['doctor_first_error'][:90]} "
            f"| {c['repair_exit']} | {c['doctor_after_repair_exit']}, {_start_text(c['start_after_repair'])} |"
        )
    return "\n".join(out)


def lost_total(res: dict[str, Any]) -> int:
    return sum(r["lost"] for r in res["multiprocess"]) + res["kill9"]["lost"]


TINY = {
    "procs": [2],
    "writes": 12,
    "cli_writers": 1,
    "rounds": 2,
    "cases": 1,
    "deadline": 60,
}  # tests/bench/test_bench_durability.py
QUICK = {"procs": [2], "writes": 40, "cli_writers": 1, "rounds": 5, "cases": None, "deadline": 15}
FULL = {"procs": [2, 4, 6], "writes": 300, "cli_writers": 2, "rounds": 40, "cases": None, "deadline": 40}


def run(
    cfg: dict[str, Any],
    seed: int,
    workdir: Path | None = None,
) -> dict[str, Any]:
    """The three scenarios in configuration `cfg` (TINY, QUICK or FULL)."""
    t0 = time.monotonic()
    base = Path(tempfile.mkdtemp(prefix="durability-", dir=workdir))
    logdir = base / "logs"
    logdir.mkdir()
    mp_cfg, writes, cli_writers, rounds = cfg["procs"], cfg["writes"], cfg["cli_writers"], cfg["rounds"]
    res: dict[str, Any] = {
        "seed": seed,
        "mode": "tiny" if cfg is TINY else "quick" if cfg is QUICK else "full",
        "config": {
            "procs": mp_cfg,
            "writes": writes,
            "cli_writers": cli_writers,
            "rounds": rounds,
            "deadline": cfg["deadline"],
        },
        "work_dir": str(base),
    }
    res["multiprocess"] = [
        multiprocess(base, p, writes, cli_writers, seed + p, logdir, cfg["deadline"]) for p in mp_cfg
    ]
    t1 = time.monotonic()
    res["kill9"] = kill9(base, rounds, seed, logdir, per_dir=10)
    t2 = time.monotonic()
    res["corruption"] = corruption(base, seed, logdir, cfg["cases"])
    res["scenario_seconds"] = {
        "multiprocess": round(t1 - t0, 1),
        "kill9": round(t2 - t1, 1),
        "corruption": round(time.monotonic() - t2, 1),
    }
    res["seconds"] = round(time.monotonic() - t0, 1)
    res["lost_total"] = lost_total(res)
    return res


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.durability", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small configuration, well under a minute")
    p.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)  # the test's configuration
    p.add_argument("--seed", type=int, default=None, help="random seed (default: from the clock; printed)")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "durability.json")
    p.add_argument("--keep", action="store_true", help="keep the state dirs and server logs")
    args = p.parse_args(argv)
    seed = args.seed if args.seed is not None else int(time.time()) % 100_000
    print(f"seed {seed}", flush=True)
    res = run(TINY if args.tiny else QUICK if args.quick else FULL, seed)
    print(table(res))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2) + "\n")
    print(f"\nwrote {args.out}")
    if not args.keep and res["lost_total"] == 0:
        shutil.rmtree(res["work_dir"], ignore_errors=True)
    else:
        print(f"state dirs and logs kept in {res['work_dir']}")
    return 1 if res["lost_total"] else 0


if __name__ == "__main__":
    sys.exit(main())
