"""The lossless promise as one property: random sequences of writes, compactions, limits,
restores, pins, dissolves, forgets, CLI commands, export + import, restarts and kills, with
every invariant checked after every step:

- every id not forgotten is gettable with exactly the content last given to it (over stdio,
  and by another process on the same state dir);
- usage is within the budget unless pinned items alone exceed it;
- summary levels are clean: a node of depth d has only children of depth d-1;
- `compactor doctor` calls the state dir healthy;
- the client's process serves in itself or relays to the state dir's shared host, and kills hit
  either one;
- JSON export -> import into a fresh dir -> export is identical in every field.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, precondition, rule

from bench import proc
from compactor import cli, doctor
from compactor.errors import CompactorError
from compactor.store import Store
from tests.support.stdio_client import StdioServer

# Every field that describes an item: all of Item's but the store-local seq and token counts.
FIELDS = (
    "id", "content", "summary", "tags", "importance", "content_type", "tier", "view", "pinned", "scope",
    "depth", "children", "parents", "gone_children", "children_tier", "merged_into", "dup_of", "quality",
    "created_at", "last_accessed_at", "access_count",
)  # fmt: skip

WORDS = [f"{stem}{n}" for stem in ("parser", "config", "handler", "deploy", "cache", "token") for n in range(12)]
text = st.lists(st.sampled_from(WORDS), min_size=3, max_size=60).map(" ".join)


def _cli(*argv: str) -> int:
    try:
        return cli.main(list(argv))
    except SystemExit as exc:
        return int(exc.code or 0)


class LosslessMachine(RuleBasedStateMachine):
    """Tool calls go to a real `compactor` subprocess over stdio; CLI commands run beside it on
    the same state dir; an in-process Store on that dir is the observer the invariants read."""

    ids = Bundle("ids")

    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="lossless-"))
        self.dir = self.tmp / "state"
        self.shared = True  # the default: the client's process relays to the state dir's shared host
        self.server = self._start("--budget", "1500")
        self.store = Store(state_dir=self.dir)
        self.contents: dict[str, str] = {}
        self.forgotten: set[str] = set()
        self.exports = 0

    def _start(self, *extra: str) -> StdioServer:
        # No background snapshots: restart and kill decide when the journal is folded.
        share = () if self.shared else ("--no-share",)
        return StdioServer("--state-dir", str(self.dir), "--snapshot-interval", "3600", *share, *extra)

    def teardown(self) -> None:
        self.server.stop()
        self.store.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _live(self, item_id: str) -> bool:
        return item_id in self.contents

    # --- writes ---------------------------------------------------------------------------------
    @rule(target=ids, body=text, importance=st.integers(1, 10), pinned=st.booleans())
    def store_one(self, body: str, importance: int, pinned: bool) -> str:
        item_id: str = self.server.ok("store", content=body, importance=importance, pinned=pinned and importance > 8)[
            "id"
        ]
        self.contents[item_id] = body
        return item_id

    @rule(bodies=st.lists(text, min_size=2, max_size=25))
    def bulk(self, bodies: list[str]) -> None:
        reply = self.server.ok("bulk_store", items=[{"content": b} for b in bodies])
        self.contents.update(zip(reply["ids"], bodies, strict=True))

    @rule(item_id=ids, body=text)
    def update(self, item_id: str, body: str) -> None:
        if self._live(item_id):
            self.server.ok("update", id=item_id, content=body)
            self.contents[item_id] = body

    @rule(target_usage=st.sampled_from([0.0, 0.3, 0.6, 0.9]))
    def compact(self, target_usage: float) -> None:
        self.server.ok("compact", target_usage=target_usage)

    @rule(budget=st.sampled_from([1_000, 1_500, 4_000]), max_items=st.sampled_from([None, 10, 20]))
    def configure(self, budget: int, max_items: int | None) -> None:
        if max_items is None:
            self.server.ok("configure", token_budget=budget)
        else:
            self.server.ok("configure", token_budget=budget, max_items=max_items, max_archive_tokens=1_000)

    @rule(item_id=ids)
    def restore(self, item_id: str) -> None:
        if self._live(item_id):
            self.server.ok("restore", id=item_id)

    @rule(item_id=ids, pin=st.booleans(), by_cli=st.booleans())
    def pin_or_unpin(self, item_id: str, pin: bool, by_cli: bool) -> None:
        if not self._live(item_id):
            return
        if by_cli:
            assert _cli("pin" if pin else "unpin", item_id, "--state-dir", str(self.dir)) == 0
        else:
            self.server.ok("pin" if pin else "unpin", id=item_id)

    @rule(pick=st.integers(0, 1_000))
    def dissolve(self, pick: int) -> None:
        self.store.status()  # catch up with the server first
        nodes = [it.id for it in self.store.roots() if it.depth]
        if nodes:
            self.server.ok("dissolve", id=nodes[pick % len(nodes)])

    @rule(item_id=consumes(ids), by_cli=st.booleans())
    def forget(self, item_id: str, by_cli: bool) -> None:
        if not self._live(item_id):
            return
        if by_cli:
            assert _cli("forget", item_id, "--yes", "--state-dir", str(self.dir)) == 0
        else:
            assert self.server.ok("forget", id=item_id)["forgotten"] is True
        del self.contents[item_id]
        self.forgotten.add(item_id)

    # --- processes ------------------------------------------------------------------------------
    @rule(shared=st.booleans())
    def restart(self, shared: bool) -> None:
        """A clean stop (stdin closed: the server writes its final snapshot) and a new server,
        relaying to a shared host or serving in its own process."""
        self.server.stop()
        assert self.server.proc.returncode == 0
        self.shared = shared
        self.server = self._start()

    @rule(shared=st.booleans())
    def kill(self, shared: bool) -> None:
        """kill -9 of the client's process. In its own process: no final snapshot, the next
        server replays the journal. A relay: its host sees the session end and saves."""
        self.server.kill()
        self.server.stop()
        self.shared = shared
        self.server = self._start()

    @precondition(lambda self: self.shared)
    @rule()
    def kill_host(self) -> None:
        """kill -9 of the shared host (the process holding the store): its relay ends with an
        error, and the next server replays the journal."""
        [host] = proc.shared_hosts([self.server.pid])
        os.kill(host, signal.SIGKILL)
        assert self.server.wait() == 1
        self.server.stop()
        self.server = self._start()

    @rule()
    def export_import_export(self) -> None:
        self.exports += 1
        first, second = self.tmp / f"a{self.exports}.json", self.tmp / f"b{self.exports}.json"
        fresh = self.tmp / f"fresh{self.exports}"
        assert _cli("export", "--state-dir", str(self.dir), "--scope", "all", "-o", str(first)) == 0
        a = {r["id"]: r for r in json.loads(first.read_text())["items"]}
        if not a:
            assert not self.contents
            return
        assert _cli("import", str(first), "--state-dir", str(fresh)) == 0
        assert _cli("export", "--state-dir", str(fresh), "--scope", "all", "-o", str(second)) == 0
        b = {r["id"]: r for r in json.loads(second.read_text())["items"]}
        assert a.keys() == b.keys()
        for item_id, rec in a.items():
            for key in FIELDS:
                assert rec.get(key) == b[item_id].get(key), (item_id, key)
        shutil.rmtree(fresh)

    # --- invariants -----------------------------------------------------------------------------
    @invariant()
    def nothing_lost(self) -> None:
        for item_id, content in self.contents.items():
            assert self.store.get(item_id).content == content
        for item_id in list(self.contents)[-3:]:  # and through the protocol
            assert self.server.ok("get", id=item_id)["content"] == self.contents[item_id]
        for item_id in self.forgotten:
            with pytest.raises(CompactorError):
                self.store.get(item_id)

    @invariant()
    def within_budget(self) -> None:
        status = self.store.status()
        items = [self.store.get(i) for i in self.store.ids()]
        pinned = sum(it.view_tokens for it in items if it.pinned and it.tier == "active")
        assert status.tokens_used <= status.token_budget or pinned > status.token_budget

    @invariant()
    def levels_clean(self) -> None:
        for item_id in self.store.ids():
            node = self.store.get(item_id)
            for child_id in node.children:
                if child_id in node.gone_children:
                    continue
                assert self.store.get(child_id).depth == node.depth - 1, (item_id, child_id)

    @invariant()
    def doctor_healthy(self) -> None:
        report = doctor.check(self.dir)
        assert report.healthy, doctor.render(report)


LosslessMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("LOSSLESS_EXAMPLES", "10")),
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_lossless_system = pytest.mark.slow(LosslessMachine.TestCase)


@pytest.mark.slow
def test_the_machine_sees_a_lost_item() -> None:
    """The property can fail: an item deleted behind the store's back is caught."""
    machine = LosslessMachine()
    try:
        machine.store_one("parser0 config1 handler2", 5, False)
        victim = next(iter(machine.contents))
        machine.store.status()  # the observer catches up ...
        machine.store._s.items.pop(victim)  # ... and then a bug loses memory
        with pytest.raises(CompactorError):
            machine.nothing_lost()
    finally:
        machine.teardown()
