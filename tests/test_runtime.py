"""Process-wide policy is the Runtime's: the Store asks it, and an embedder can decline it."""

from __future__ import annotations

import gc
import sys

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
