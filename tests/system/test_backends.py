"""The durability promises for both backends, the state dir and PostgreSQL (the `backend`
fixture): several writer processes at once lose nothing, and a writer killed with SIGKILL at
any moment (mid-transaction included) loses nothing it acknowledged and half of no bulk_store.
The writers are real processes (tests/support/backend_writer.py) that print a line only after a call
returned, so every printed id is an acknowledged write.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import anyio
import pytest

from compactor.store import Store, StoreInput
from tests.conftest import ROOT, server_env
from tests.support.backend_writer import content

WRITERS = 3
CALLS = 150
KILL_ROUNDS = 12
BULK = 60  # items per bulk_store: big enough that a kill can land inside its write


class Writer:
    def __init__(self, backend: dict[str, str], name: str, count: int, bulk: int = 0) -> None:
        self.name = name
        self.acked: dict[str, str] = {}  # id -> content
        self.bulks: list[list[str]] = []
        self.done = False
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.backend_writer", json.dumps(backend), name, str(count), str(bulk)],
            cwd=ROOT,
            env=server_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.ready = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        k = 0
        for line in self.proc.stdout:
            kind, _, rest = line.strip().partition(" ")
            if kind == "ready":
                self.ready.set()
            elif kind == "ack":
                self.acked[rest] = content(self.name, k)
                k += 1
            elif kind == "bulk":
                ids = rest.split(",")
                self.bulks.append(ids)
                self.acked.update({i: content(self.name, k, j) for j, i in enumerate(ids)})
                k += 1
            elif kind == "done":
                self.done = True

    def wait(self, timeout: float = 300) -> None:
        self.proc.wait(timeout)
        self._reader.join(10)
        stderr = self.proc.stderr.read() if self.proc.stderr else ""
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()
        assert self.done or self.proc.returncode == -signal.SIGKILL, f"writer {self.name} failed: {stderr}"

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_writer_processes_at_once_lose_nothing(backend: dict[str, str]):
    writers = [Writer(backend, f"w{n}", CALLS, bulk=5) for n in range(WRITERS)]
    for w in writers:
        w.wait()
    expected = {i: c for w in writers for i, c in w.acked.items()}
    assert len(expected) == WRITERS * (CALLS // 3 * 5 + (CALLS - CALLS // 3))
    s = Store(**backend)
    try:
        got = {i: s.get(i).content for i in s.ids()}
    finally:
        s.close()
    lost = expected.keys() - got.keys()
    assert not lost, f"{len(lost)} acknowledged writes lost"
    assert {i: got[i] for i in expected} == expected
    print(f"\n{WRITERS} writer processes x {CALLS} calls on {next(iter(backend))}: lost 0 of {len(expected)}")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_writers_killed_mid_transaction_lose_nothing_acknowledged(backend: dict[str, str]):
    """SIGKILL one of two writers at a random moment, many times: every acknowledged id is
    there with its exact content, and each bulk_store is all there or not at all."""
    rng = random.Random(18)
    acked: dict[str, str] = {}
    bulks: list[list[str]] = []
    for rnd in range(KILL_ROUNDS):
        victim = Writer(backend, f"k{rnd}", 10_000, bulk=BULK)
        calm = Writer(backend, f"c{rnd}", 20)
        assert victim.ready.wait(60), "the writer did not start"
        time.sleep(rng.uniform(0.05, 0.6))
        victim.kill()
        victim.wait()
        calm.wait()
        for w in (victim, calm):
            acked.update(w.acked)
            bulks.extend(w.bulks)
        s = Store(**backend)  # loads after every kill: the state is always loadable
        try:
            have = set(s.ids())
            missing = acked.keys() - have
            assert not missing, f"round {rnd}: {len(missing)} acknowledged writes lost"
            assert all(s.get(i).content == c for i, c in acked.items())
            # An unacknowledged bulk_store (cut by the kill) is whole or absent, never half.
            new = have - acked.keys()
            by_writer = [i for i in new if s.get(i).content.startswith(f"writer k{rnd} ")]
            calls = {s.get(i).content.split(" part ")[0] for i in by_writer}
            for call in calls:
                parts = [i for i in by_writer if s.get(i).content.startswith(call + " part ")]
                assert len(parts) in (1, BULK), f"round {rnd}: {call} stored {len(parts)} of {BULK}"
        finally:
            s.close()
    assert all(len(b) == BULK for b in bulks)
    print(f"\n{KILL_ROUNDS} SIGKILLs on {next(iter(backend))}: {len(acked)} acknowledged, lost 0")


def test_a_background_snapshot_and_a_restart_keep_every_write(backend: dict[str, str]):
    s = Store(**backend)
    first = s.bulk_store([StoreInput(f"before {i}") for i in range(50)]).items
    anyio.run(s.snapshot_async)
    after = s.store("after the snapshot").item.id
    s.close()
    s2 = Store(**backend)
    try:
        assert set(s2.ids()) == {*(i.id for i in first), after}
    finally:
        s2.close()


def test_two_stores_see_each_others_writes_and_forgets(backend: dict[str, str]):
    a, b = Store(**backend), Store(**backend)
    try:
        x = a.store("written by a: pelican").item.id
        assert [h.item.id for h in b.query("pelican")] == [x]  # query catches up under the lock
        y = b.store("written by b: heron").item.id
        assert a.get(y).content == "written by b: heron"
        anyio.run(b.snapshot_async)
        a.store("after b's snapshot")
        a.forget(x)
        assert [h.item.id for h in b.query("pelican")] == []
        assert x not in b.ids() and len(b.ids()) == 2
    finally:
        a.close()
        b.close()


def test_backend_fixture_names_both(tmp_path: Path, backend: dict[str, str]):
    assert set(backend) <= {"state_dir", "database"}
