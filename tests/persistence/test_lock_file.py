"""The writers' lock holds when its file is deleted while servers run (issue 38, point 6): a
server whose lock file is no longer the one at the path locks the one that is before it writes."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from compactor.store import Store
from tests.support.stdio_client import StdioServer


def test_a_deleted_lock_file_still_excludes_the_writers(state_dir: Path):
    a = Store(state_dir=state_dir)
    a.store("before the lock file went")
    (state_dir / "lock").unlink()
    c = Store(state_dir=state_dir)  # the next server to start makes a new lock file
    done = threading.Event()

    def write() -> None:
        a.store("written by a while c holds the lock")
        done.set()

    with c._locked():
        writer = threading.Thread(target=write)
        writer.start()
        assert not done.wait(0.5), "a wrote while c held the lock"
    writer.join(10)
    assert done.is_set()
    assert c.store("c after a").item.id  # c catches up with a's line, not over it
    a.close()
    c.close()
    again = Store(state_dir=state_dir)
    assert sorted(again.get(i).content for i in again.ids()) == [
        "before the lock file went",
        "c after a",
        "written by a while c holds the lock",
    ]


@pytest.mark.slow
def test_deleting_the_lock_file_under_running_writers_loses_no_acknowledged_write(state_dir: Path):
    acked: list[str] = []
    errors: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()

    def drive(srv: StdioServer, name: str) -> None:
        k = 0
        while not stop.is_set():
            k += 1
            reply = srv.call("store", content=f"{name} write {k}")
            if reply.get("isError"):
                errors.append(reply["content"][0]["text"])
                continue
            with lock:
                acked.append(reply["structuredContent"]["id"])

    args = ("--state-dir", str(state_dir), "--no-share", "--snapshot-interval", "0.5")
    with StdioServer(*args) as a, StdioServer(*args) as b:
        threads = [threading.Thread(target=drive, args=(a, "a")), threading.Thread(target=drive, args=(b, "b"))]
        for t in threads:
            t.start()
        try:
            for round_ in range(3):
                time.sleep(0.7)
                (state_dir / "lock").unlink()
                with StdioServer(*args) as c:  # makes a new lock file, and writes beside a and b
                    for k in range(40):
                        reply = c.ok("store", content=f"c{round_} write {k}")
                        with lock:
                            acked.append(reply["id"])
        finally:
            stop.set()
            for t in threads:
                t.join(30)
    # A call caught mid-way by the deletion is refused (not acknowledged), never lost.
    assert all("was not applied" in e for e in errors), errors[:3]
    again = Store(state_dir=state_dir)
    lost = set(acked) - set(again.ids())
    assert not lost, f"{len(lost)} of {len(acked)} acknowledged writes lost"
    print(f"\n{len(acked)} acknowledged writes, 0 lost, lock file deleted 3 times")


def test_where_inode_numbers_are_not_stable_the_check_is_made_once(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    """Some FUSE mounts give a file another st_ino at each look: the lock cannot be checked so,
    and writing goes on without reopening the lock file at every call."""
    import os

    s = Store(state_dir=state_dir)
    real_fstat = os.fstat
    looks = iter(range(10**6))

    def fstat(fd: int) -> os.stat_result:
        st = list(real_fstat(fd))
        st[1] = 10**9 + next(looks)  # st_ino
        return os.stat_result(st)

    monkeypatch.setattr(os, "fstat", fstat)
    opened: list[object] = []
    real_open = os.open
    monkeypatch.setattr(os, "open", lambda p, *a, **k: (opened.append(p), real_open(p, *a, **k))[1])
    ids = [s.store(f"note {i}").item.id for i in range(5)]
    assert sum(str(p).endswith("lock") for p in opened) == 1
    assert "was replaced" not in caplog.text
    monkeypatch.undo()
    s.close()
    assert sorted(Store(state_dir=state_dir).ids()) == sorted(ids)
