"""SIGKILL the server at random moments, 100 times: nothing acknowledged is lost, the state
always loads, and bulk_store is all or nothing across the crash.

Each round starts a real server process on the state dir (forked from tests/support/zygote.py so that a
start costs milliseconds, not the SDK's import time), drives a random mix of store, bulk_store,
compact and forget over its stdio, and kills it from another thread after a random delay, so
the kill lands mid-call, mid-fsync, mid-snapshot (some rounds snapshot every 0.05 s) or between
calls. A call counts as acknowledged only if its reply was read. After the kill the dir is
checked by the doctor and loaded, and compared with what was acknowledged.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from compactor import doctor
from compactor.persistence import statedir as statedir_mod
from compactor.store import Store
from tests.conftest import ROOT, server_env
from tests.support.stdio_client import StdioServer

ROUNDS = 100
ROUNDS_PER_DIR = 25  # a fresh dir now and then keeps each load (and so each round) fast
MAX_CALLS = 20
BIG_BULK = 300  # some bulk_stores are large so the kill can land inside their write


class Zygote:
    """Client of tests/support/zygote.py: one pre-imported process that forks servers on request."""

    def __init__(self, log: Path) -> None:
        self._ctrl, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._log = open(log, "wb")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.zygote", str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            env=server_env(),
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
        )
        theirs.close()

    def spawn(self, argv: list[str], conn: socket.socket) -> int:
        socket.send_fds(self._ctrl, [json.dumps(argv).encode()], [conn.fileno()])
        ready, _, _ = select.select([self._ctrl], [], [], 60)
        assert ready, "the zygote did not answer"
        return int(json.loads(self._ctrl.recv(64)))

    def close(self) -> None:
        self._ctrl.close()
        self.proc.wait(20)
        self._log.close()


class ForkedServer(StdioServer):
    """StdioServer's protocol over a socket to a zygote child instead of a subprocess pipe."""

    def __init__(self, zygote: Zygote, *args: str) -> None:
        self.sock, theirs = socket.socketpair()
        self._pid = zygote.spawn(list(args), theirs)
        theirs.close()
        self._id = 0
        self._buf = b""
        self.initialize("pytest")

    @property
    def pid(self) -> int:
        return self._pid

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_message(self, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no reply from the server")
            ready, _, _ = select.select([self.sock], [], [], left)
            if ready:
                chunk = self.sock.recv(1 << 16)
                if not chunk:
                    raise EOFError("server closed the connection")
                self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)  # type: ignore[no-any-return]

    def kill_now(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self._pid, signal.SIGKILL)

    def kill(self) -> None:
        self.kill_now()
        self.wait_gone()

    def wait_gone(self) -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                os.kill(self._pid, 0)
            except ProcessLookupError:
                self.sock.close()
                return
            time.sleep(0.002)
        raise AssertionError(f"server {self._pid} did not die")

    def stop(self) -> None:
        self.kill()


@dataclass
class Model:
    """What the client knows: acknowledged items and forgets, and calls whose fate is open."""

    present: dict[str, str] = field(default_factory=dict)  # id -> exact content
    forgotten: dict[str, str] = field(default_factory=dict)
    open_stores: list[str] = field(default_factory=list)  # contents of unacknowledged stores
    open_bulks: list[list[str]] = field(default_factory=list)
    open_forgets: list[str] = field(default_factory=list)


@dataclass
class Tally:
    rounds: int = 0
    acked_calls: int = 0
    acked_items: int = 0
    killed_mid_call: int = 0
    dropped: int = 0
    lost: list[str] = field(default_factory=list)
    # How long the calls of rounds that ran to the end took: the kill window follows them, so
    # kills keep landing inside calls on a machine of any speed.
    busy_seconds: list[float] = field(default_factory=list)

    def kill_window(self) -> float:
        # 1.5x the recent mean: the rounds that ran to the end are the shorter ones.
        recent = self.busy_seconds[-15:]
        return max(0.05, 1.5 * sum(recent) / len(recent)) if recent else 0.35


def words(rng: random.Random, n: int) -> str:
    return " ".join(f"w{rng.randrange(10**7)}" for _ in range(n))


def play_round(zygote: Zygote, d: Path, rnd: int, rng: random.Random, model: Model, tally: Tally) -> None:
    # --no-share: the SIGKILL must hit the process that holds the store, not a relay to it.
    args = ["--state-dir", str(d), "--log-level", "ERROR", "--no-share"]
    if rng.random() < 0.5:
        args += ["--snapshot-interval", "0.05"]
    if rng.random() < 0.3:
        args += ["--budget", "2000"]  # auto-compaction on most writes
    srv = ForkedServer(zygote, *args)
    killer = threading.Timer(rng.uniform(0.0, tally.kill_window()), srv.kill_now)
    started = time.monotonic()
    killer.start()
    counter = iter(range(10**9))
    try:
        if rng.random() < 0.25:
            # Tight limits (they persist in the dir): drops past max_archive_tokens must all
            # reach the forget ledger, crash or not.
            srv.ok(
                "configure",
                max_archive_tokens=rng.choice([1_000, 3_000, 20_000]),
                max_items=rng.choice([10, 40, 100_000]),
            )
        for _ in range(rng.randint(1, MAX_CALLS)):
            roll = rng.random()
            if roll < 0.4:
                text = f"r{rnd} c{next(counter)} store {words(rng, 8)}"
                model.open_stores.append(text)
                reply = srv.ok("store", content=text, importance=rng.randint(1, 10))
                model.open_stores.remove(text)
                model.present[reply["id"]] = text
                tally.acked_items += 1
            elif roll < 0.65:
                n = BIG_BULK if rng.random() < 0.15 else rng.randint(2, 30)
                texts = [f"r{rnd} c{next(counter)} bulk {words(rng, 6)}" for _ in range(n)]
                model.open_bulks.append(texts)
                reply = srv.ok("bulk_store", items=[{"content": t} for t in texts])
                model.open_bulks.remove(texts)
                model.present.update(zip(reply["ids"], texts, strict=True))
                tally.acked_items += n
            elif roll < 0.8 and model.present:
                victim = rng.choice(sorted(model.present))
                model.open_forgets.append(victim)
                result = srv.call("forget", id=victim)
                model.open_forgets.remove(victim)
                if result.get("isError"):
                    # Only legitimate if a later call dropped it past max_archive_tokens: verify
                    # checks the ledger for it like for any other missing item.
                    assert "No item with id" in result["content"][0]["text"], result
                else:
                    assert result["structuredContent"]["forgotten"] is True
                    model.forgotten[victim] = model.present.pop(victim)
            else:
                srv.ok("compact", target_usage=rng.choice([0.0, 0.2, 0.5]))
            tally.acked_calls += 1
        tally.busy_seconds.append(time.monotonic() - started)
        time.sleep(rng.uniform(0.0, 0.15))  # idle: a background snapshot may be running
    except (EOFError, ConnectionResetError, BrokenPipeError, TimeoutError):
        tally.killed_mid_call += 1
    finally:
        killer.cancel()
        srv.kill()
    verify(d, rnd, model, tally)


def dropped_ids(d: Path) -> set[str]:
    """Ids the forget ledger records as dropped past max_archive_tokens (a torn last line from
    the kill is skipped, as the server does)."""
    try:
        lines = (d / statedir_mod.FORGET_LEDGER).read_bytes().splitlines()
    except FileNotFoundError:
        return set()
    out: set[str] = set()
    for raw_line in lines:
        try:
            entry = json.loads(raw_line)
        except ValueError:
            continue
        if entry.get("reason") == "max_archive_tokens":
            out.add(entry["id"])
    return out


def verify(d: Path, rnd: int, model: Model, tally: Tally) -> None:
    report = doctor.check(d)
    if not report.healthy:
        tally.lost.append(f"round {rnd}: doctor: {doctor.render(report)}")
    s = Store(state_dir=d)  # the state loads (or this raises and fails the test)
    try:
        raw = {it.id: it.content for it in s.iter_items() if it.depth == 0}
    finally:
        s.close()
    by_text: dict[str, list[str]] = {}
    for item_id, text in raw.items():
        by_text.setdefault(text, []).append(item_id)
    for text, ids in by_text.items():
        if len(ids) > 1:
            tally.lost.append(f"round {rnd}: {text[:30]!r} stored {len(ids)} times")
    # A forget cut by the kill either happened or not; settle it before judging the rest.
    for item_id in model.open_forgets:
        if item_id not in raw:
            model.forgotten[item_id] = model.present.pop(item_id)
    ledger = dropped_ids(d)
    for item_id, text in list(model.present.items()):
        if item_id not in raw and item_id in ledger:
            model.forgotten[item_id] = model.present.pop(item_id)  # dropped past the archive bound, on record
            tally.dropped += 1
        elif raw.get(item_id) != text:
            tally.lost.append(f"round {rnd}: acknowledged {item_id} {'changed' if item_id in raw else 'lost'}")
    for item_id, text in model.forgotten.items():
        if item_id in raw or text in by_text:
            tally.lost.append(f"round {rnd}: forgotten {item_id} came back")
    # Calls cut by the kill: each either happened entirely or not at all.
    for text in model.open_stores:
        if text in by_text:
            model.present[by_text[text][0]] = text
    for texts in model.open_bulks:
        landed = [t for t in texts if t in by_text]
        if landed and len(landed) != len(texts):
            tally.lost.append(f"round {rnd}: bulk_store of {len(texts)} half applied ({len(landed)} present)")
        for t in landed:
            model.present[by_text[t][0]] = t
    model.open_stores.clear()
    model.open_bulks.clear()
    model.open_forgets.clear()
    # Nothing appears that the client never sent.
    known = set(model.present.values())
    strays = [t for t in by_text if t not in known]
    if strays:
        tally.lost.append(f"round {rnd}: {len(strays)} unexpected items, e.g. {strays[0][:40]!r}")
    tally.rounds += 1


@pytest.fixture
def zygote(tmp_path: Path) -> Iterator[Zygote]:
    z = Zygote(tmp_path / "zygote.log")
    yield z
    z.close()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_kill9_rounds_lose_nothing_acknowledged(tmp_path: Path, zygote: Zygote):
    rng = random.Random(int(os.environ.get("KILL9_SEED", "20_261_130")))
    tally = Tally()
    began = time.monotonic()
    model = Model()
    d = tmp_path / "state-0"
    for rnd in range(ROUNDS):
        if rnd and rnd % ROUNDS_PER_DIR == 0:
            shutil.rmtree(d)
            d = tmp_path / f"state-{rnd}"
            model = Model()
        play_round(zygote, d, rnd, rng, model, tally)
    elapsed = time.monotonic() - began
    assert not tally.lost, "\n".join(tally.lost[:20])
    assert tally.rounds == ROUNDS
    assert tally.killed_mid_call >= ROUNDS // 4, "the kills rarely hit a call in flight: the test lost its edge"
    print(
        f"\nkill -9: {tally.rounds} rounds, {tally.acked_calls} acknowledged calls "
        f"({tally.acked_items} items), {tally.killed_mid_call} kills mid-call, {tally.dropped} dropped past "
        f"max_archive_tokens (all in the ledger), lost 0, in {elapsed:.1f} s"
    )


@pytest.mark.slow
def test_zygote_children_are_real_servers(tmp_path: Path, zygote: Zygote):
    """The harness itself: a forked child serves, persists, and dies to SIGKILL like the command."""
    d = tmp_path / "state"
    srv = ForkedServer(zygote, "--state-dir", str(d), "--no-share")
    item = srv.ok("store", content="kept across a kill")["id"]
    assert srv.ok("status")["persistence"]["state_dir"] == str(d)
    pid = srv.pid
    srv.kill()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    s = Store(state_dir=d)
    assert s.get(item).content == "kept across a kill"
    s.close()


class _Killed(BaseException):
    """Stands for SIGKILL at one precise instruction: nothing after it runs."""


@pytest.mark.slow
def test_a_drop_is_never_silent_even_if_the_process_dies_mid_call(state_dir: Path, monkeypatch: pytest.MonkeyPatch):
    """Limits never delete (issue 13): with tight limits no call even reaches the forget
    ledger, so there is no window between a drop and its entry to die in. A kill at the
    ledger write would raise; every stored item must be present after a restart."""
    from compactor.persistence.statedir import StateDir

    rng = random.Random(7)
    s = Store(state_dir=state_dir)
    s.configure(token_budget=1_000, max_archive_tokens=2_000)
    ids: list[str] = []

    def killed(self: StateDir, entries: list[dict[str, Any]]) -> None:
        raise _Killed

    monkeypatch.setattr(StateDir, "append_ledger", killed)
    for _ in range(300):
        ids.append(s.store(words(rng, 60)).item.id)
    s.close()
    monkeypatch.undo()
    again = Store(state_dir=state_dir)
    present = set(again.ids())
    again.close()
    assert set(ids) <= present and not dropped_ids(state_dir)
    assert doctor.check(state_dir).healthy
