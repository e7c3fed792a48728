"""Process-wide policy is the Runtime's: the Store asks it, and an embedder can decline it."""

from __future__ import annotations

import contextlib
import gc
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from compactor import runtime as runtime_mod
from compactor.runtime import PROCESS, Runtime
from compactor.search import index as index_mod
from compactor.store import Store, StoreInput


def test_bulk_work_pauses_the_collector_and_resumes_it():
    assert gc.isenabled()
    with PROCESS.bulk_work():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_long_lived_freezes_what_it_made_before_collection_resumes():
    from compactor.runtime import long_lived

    class Node:
        pass

    gc.unfreeze()
    try:
        with long_lived():
            assert not gc.isenabled()
            made = Node()
        assert gc.isenabled()
        assert gc.get_freeze_count() > 0
        assert all(o is not made for o in gc.get_objects())  # frozen: no collection walks it
        gc.unfreeze()
        gc.disable()
        with long_lived():
            pass
        assert not gc.isenabled()  # a caller's own pause is kept
    finally:
        gc.enable()
        gc.unfreeze()


def test_background_write_shortens_the_switch_interval_and_restores_it():
    before = sys.getswitchinterval()
    with PROCESS.background_write():
        assert sys.getswitchinterval() == runtime_mod.SNAPSHOT_SWITCH_INTERVAL_S
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


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator is what is tuned")
def test_a_tuned_allocator_gives_a_large_freed_block_back():
    assert _given_back_mib("tuned") >= 3.5
    # Untuned, glibc keeps it (the behaviour the tuning is for).
    assert _given_back_mib("plain") < 1.0


_WRITE_BLOCK = """
import ctypes
import sys
from compactor.runtime import PROCESS, Runtime, tune_allocator

def rss_mib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024

assert tune_allocator()
# No trimming of the heap's top, which would give back a freed heap block there as well.
ctypes.CDLL(None).mallopt(-1, 1 << 30)  # M_TRIM_THRESHOLD
runtime = Runtime() if sys.argv[1] == "other" else PROCESS  # another runtime was not tuned
out = []
for inside in (True, False):  # not again inside: a freed heap block is reused before a mapping
    with runtime.write_work() if inside else runtime.bulk_work():
        block = bytearray(512 << 10)  # a 10k-item merge's arrays are ~1 MiB
    before = rss_mib()
    del block
    out.append(before - rss_mib())
print(" ".join(f"{x:.2f}" for x in out))
"""


def _write_block_given_back(mode: str) -> list[float]:
    out = subprocess.run([sys.executable, "-c", _WRITE_BLOCK, mode], capture_output=True, text=True, check=True)
    return [float(x) for x in out.stdout.split()]


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator is what is tuned")
def test_a_tuned_process_gives_back_a_middling_block_made_in_a_write():
    """Inside `write_work` a block above WRITE_MMAP_THRESHOLD gets a mapping of its own and is
    given back when freed; outside (a read), the threshold is the higher one again and the
    same block stays in the heap. Only PROCESS, the runtime `tune_allocator` tuned, moves it."""
    assert runtime_mod.WRITE_MMAP_THRESHOLD < 512 << 10 < runtime_mod.MALLOC_MMAP_THRESHOLD
    inside, outside = _write_block_given_back("tuned")
    assert inside >= 0.4 and outside < 0.1
    assert all(x < 0.1 for x in _write_block_given_back("other"))


def test_the_index_merges_inside_write_work_and_a_query_scores_outside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Writes (and the merges they make) run inside `write_work`; a query's scoring, whose
    per-term arrays must stay on the heap, runs outside it (its access-time journal write
    comes after)."""
    from compactor.search.index import BM25Index

    class Spy(Runtime):
        depth = 0

        @contextlib.contextmanager
        def write_work(self) -> Iterator[None]:
            self.depth += 1
            try:
                with super().write_work():
                    yield
            finally:
                self.depth -= 1

    spy = Spy()
    seen: list[tuple[str, int]] = []
    settle, search = BM25Index.settle, BM25Index.search

    def settle_spy(self: BM25Index) -> None:
        seen.append(("settle", spy.depth))
        settle(self)

    def search_spy(self: BM25Index, *args: Any, **kwargs: Any) -> Any:
        seen.append(("search", spy.depth))
        return search(self, *args, **kwargs)

    monkeypatch.setattr(index_mod, "INDEX_SETTLE_MIN", 0)  # a merge at every write
    monkeypatch.setattr(BM25Index, "settle", settle_spy)
    monkeypatch.setattr(BM25Index, "search", search_spy)
    store = Store(state_dir=tmp_path / "state", runtime=spy)
    store.store("the retry loop needs a jittered backoff")
    store.bulk_store([StoreInput("a second note on backoff"), StoreInput("a third note on retries")])
    assert store.query("backoff")
    assert ("settle", 1) in seen and ("search", 0) in seen
    assert all(depth == (kind == "settle") for kind, depth in seen)


def _start_server(monkeypatch: pytest.MonkeyPatch, state_dir: Path, on_load: Callable[[], None]) -> list[Store]:
    """`run_server` on `state_dir` in this process (--no-share; the shared host loads in its own
    the same way), built but given no clients: `on_load()` runs as each Store is begun, and
    the Stores made are returned."""
    from compactor.cli.serve import run_server

    loaded: list[Store] = []
    real_init = Store.__init__

    def init(self: Store, *args: Any, **kwargs: Any) -> None:
        on_load()
        real_init(self, *args, **kwargs)
        loaded.append(self)

    monkeypatch.setattr(Store, "__init__", init)
    # `serve` runs for real up to its clients: it builds the server, then has none to serve.
    from compactor.mcp import server as mcp_server

    async def no_clients(mcp: object) -> None:
        return None

    monkeypatch.setattr(mcp_server, "_run_stdio", no_clients)
    monkeypatch.setattr(mcp_server, "final_snapshot", lambda store: None)
    assert run_server(["--state-dir", str(state_dir), "--no-share"]) == 0
    return loaded


def test_the_server_tunes_the_allocator_before_it_loads_the_store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    from compactor import runtime

    calls: list[str] = []

    def tune() -> bool:
        calls.append("tune")
        return True

    monkeypatch.setattr(runtime, "tune_allocator", tune)
    _start_server(monkeypatch, tmp_path / "state", lambda: calls.append("load"))
    assert calls == ["tune", "load"]


def test_a_start_pauses_collection_until_the_server_is_built():
    class Node:
        pass

    gc.unfreeze()
    try:
        PROCESS.pause_for_start()
        assert not gc.isenabled()
        made = Node()
        PROCESS.start_done()
        assert gc.isenabled() and gc.get_freeze_count() > 0
        assert all(o is not made for o in gc.get_objects())  # frozen, not collected
        PROCESS.start_done()  # without a pause: only a freeze
        assert gc.isenabled()
        gc.disable()
        PROCESS.pause_for_start()
        PROCESS.start_done()
        assert not gc.isenabled()  # a caller's own pause is kept
        gc.enable()
        Runtime(manage_process=False).pause_for_start()
        assert gc.isenabled()
    finally:
        gc.enable()
        gc.unfreeze()


def test_the_server_collects_nothing_from_its_imports_to_its_build(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """The SDK's imports, the load and the build make ~140k lasting objects: no collection walks
    them while they are made (~40 ms of a start); collection resumes once the server is built."""
    from compactor.mcp import server as mcp_server

    states: list[bool] = []
    build = mcp_server.build_server

    def building(*args: Any, **kwargs: Any) -> Any:
        states.append(gc.isenabled())
        return build(*args, **kwargs)

    monkeypatch.setattr(mcp_server, "build_server", building)
    gc.unfreeze()
    try:
        loaded = _start_server(monkeypatch, tmp_path / "state", lambda: states.append(gc.isenabled()))
        assert states == [False, False] and gc.isenabled()
        loaded[0].close()
    finally:
        gc.enable()
        gc.unfreeze()


def test_the_server_freezes_the_store_it_loaded_before_collection_resumes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    """Collection resumed after a load walked every object the load made: at 100k items a
    ~160 ms and a ~120 ms pass before the first reply."""
    seeded = Store(state_dir=tmp_path / "state")
    seeded.bulk_store([StoreInput(f"note {i} on the retry loop") for i in range(50)])
    seeded.close()
    collecting: list[bool] = []
    gc.unfreeze()
    try:
        loaded = _start_server(monkeypatch, tmp_path / "state", lambda: collecting.append(gc.isenabled()))
        assert collecting == [False]
        assert gc.isenabled()
        store = loaded[0]
        assert len(store) == 50
        frozen = {id(store._s), id(store._s.items), *map(id, store._s.items.values())}
        assert not frozen & {id(o) for o in gc.get_objects()}
        store.close()
    finally:
        gc.unfreeze()


def test_the_http_server_resumes_collection_once_built(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """`run_server` pauses collection before the HTTP transport too: serve_http resumes it."""
    import anyio
    import uvicorn

    from compactor.mcp.http_server import serve_http

    async def no_requests(self: object) -> None:
        return None

    monkeypatch.setattr(uvicorn.Server, "serve", no_requests)
    store = Store(state_dir=tmp_path / "state")
    gc.unfreeze()
    try:
        PROCESS.pause_for_start()
        anyio.run(lambda: serve_http(store, host="127.0.0.1", port=0, token=None))
        assert gc.isenabled()
    finally:
        gc.enable()
        gc.unfreeze()


def test_the_http_server_prepares_for_writes_as_it_starts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """Loaded by the first store instead, the token encoding (and the redaction and
    classification rules) held up every call queued behind it; and with anyio's 40 worker
    threads, writes waiting for the writers' lock left queries waiting for a thread."""
    import anyio
    import uvicorn

    from compactor.content.tokens import TokenCounter
    from compactor.mcp.http_server import WORKER_THREADS, serve_http

    store = Store(state_dir=tmp_path / "state", counter=TokenCounter())
    seen: list[bool] = []

    threads: list[float] = []

    async def until_loaded(self: object) -> None:
        for _ in range(500):
            if store.counter.loaded:
                break
            await anyio.sleep(0.01)
        seen.append(store.counter.loaded)
        threads.append(anyio.to_thread.current_default_thread_limiter().total_tokens)

    monkeypatch.setattr(uvicorn.Server, "serve", until_loaded)
    assert not store.counter.loaded
    anyio.run(lambda: serve_http(store, host="127.0.0.1", port=0, token=None))
    assert seen == [True] and store.counter.exact
    # Writes waiting for the writers' lock hold threads; queries get threads of their own.
    assert threads == [WORKER_THREADS] and WORKER_THREADS > 40


def test_stores_and_imports_build_their_items_with_collection_paused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A bulk store or an import makes items, index entries and ops that all outlive it: no
    collection walks them while they are made (~3-4% of a bulk load)."""
    from compactor.store.journaled import _Txn

    seen: list[bool] = []
    apply = _Txn.apply

    def applying(self: _Txn, *args: Any, **kwargs: Any) -> Any:
        seen.append(gc.isenabled())
        return apply(self, *args, **kwargs)

    monkeypatch.setattr(_Txn, "apply", applying)
    store = Store(state_dir=tmp_path / "state")
    store.bulk_store([StoreInput(f"note {i} on the retry loop") for i in range(5)])
    store.store("one more note on the retry loop")
    store.import_records([{"id": "imported0001", "content": "an imported note on backoff"}])
    assert seen and not any(seen) and gc.isenabled()
    store.close()
