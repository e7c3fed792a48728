"""Process-wide policy is the Runtime's: the Store asks it, and an embedder can decline it."""

from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from compactor import constants as C
from compactor.runtime import PROCESS, Runtime
from compactor.store import Store


def test_bulk_work_pauses_the_collector_and_resumes_it():
    assert gc.isenabled()
    with PROCESS.bulk_work():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_background_write_shortens_the_switch_interval_and_restores_it():
    before = sys.getswitchinterval()
    with PROCESS.background_write():
        assert sys.getswitchinterval() == C.SNAPSHOT_SWITCH_INTERVAL_S
    assert sys.getswitchinterval() == before


def test_an_embedder_can_keep_its_own_policy():
    quiet = Runtime(manage_process=False)
    before = sys.getswitchinterval()
    with quiet.bulk_work(), quiet.background_write():
        assert gc.isenabled() and sys.getswitchinterval() == before
    store = Store(runtime=quiet)
    store.configure(token_budget=1_000)
    for i in range(40):
        store.store(f"note {i} " + "word " * 40)
    assert store.tokens_used <= store.budget and len(store) >= 40


_GIVEN_BACK = """
import sys
from compactor.runtime import tune_allocator

def rss_mib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024

if sys.argv[1] == "tuned":
    assert tune_allocator()
big = bytearray(16 << 20)  # freed, it raises glibc's own threshold to 16 MiB
del big
block = bytearray(4 << 20)  # the size of an index settle's arrays at 10k items
before = rss_mib()
del block
print(before - rss_mib())
"""


def _given_back_mib(mode: str) -> float:
    out = subprocess.run([sys.executable, "-c", _GIVEN_BACK, mode], capture_output=True, text=True, check=True)
    return float(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator is what is tuned")
def test_a_tuned_allocator_gives_a_large_freed_block_back():
    assert _given_back_mib("tuned") >= 3.5
    # Untuned, glibc keeps it (the behaviour the tuning is for).
    assert _given_back_mib("plain") < 1.0


def test_the_server_tunes_the_allocator_before_it_loads_the_store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    import anyio

    from compactor import runtime
    from compactor.cli.serve import run_server

    calls: list[str] = []

    def tune() -> bool:
        calls.append("tune")
        return True

    real_init = Store.__init__

    def init(self: Store, *args: Any, **kwargs: Any) -> None:
        calls.append("load")
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(runtime, "tune_allocator", tune)

    monkeypatch.setattr(Store, "__init__", init)
    monkeypatch.setattr(anyio, "run", lambda *a, **k: None)
    # --no-share: the server loads in this process (the shared host tunes in its own the same way).
    assert run_server(["--state-dir", str(tmp_path / "state"), "--no-share"]) == 0
    assert calls == ["tune", "load"]
