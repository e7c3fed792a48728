import random
from typing import Any

import pytest

from compactor.errors import InvalidArgumentError, NotFoundError
from compactor.store import Store, StoreInput
from compactor.store import state as state_mod


def words(seed: int, n: int) -> str:
    """Distinct filler text (near-duplicates would be merged, which other tests cover)."""
    rng = random.Random(seed)
    return " ".join(f"w{rng.randrange(100_000)}" for _ in range(n))


def test_store_returns_id_type_tags_and_tokens(store: Store):
    res = store.store("We decided to use PostgreSQL over MySQL for JSONB.", tags=["db"], importance=7)
    it = res.item
    assert it.content_type == "decision"
    assert it.tags[0] == "db"  # caller's tags first, auto-tags appended
    assert "decision" in it.tags and "postgres" in it.tags
    assert it.content_tokens > 5
    assert store.get(it.id).content.startswith("We decided")


def test_tags_as_comma_separated_string(store: Store):
    it = store.store("note", tags="alpha, beta,,gamma").item
    assert list(it.tags[:3]) == ["alpha", "beta", "gamma"]


@pytest.mark.parametrize("content", ["", "   ", "\n\t "])
def test_empty_content_is_rejected_and_nothing_stored(store: Store, content: str):
    with pytest.raises(InvalidArgumentError, match="non-empty"):
        store.store(content)
    assert len(store) == 0


def test_content_over_one_mib_is_rejected(store: Store):
    with pytest.raises(InvalidArgumentError, match="1 MiB"):
        store.store("x" * (1024 * 1024 + 1))
    assert len(store) == 0
    big = store.store("é" * (512 * 1024 - 1)).item  # 2 bytes a char: just under the limit
    # Larger than the budget: kept, archived under a summary so usage stays within budget.
    assert [i for i in store.ids() if store.get(i).depth == 0] == [big.id]
    assert store.get(big.id).content == big.content
    assert store.tokens_used <= store.budget


@pytest.mark.parametrize("importance", [0, 11, -3])
def test_importance_range(store: Store, importance: int):
    with pytest.raises(InvalidArgumentError, match="importance"):
        store.store("x", importance=importance)


def test_get_unknown_id(store: Store):
    with pytest.raises(NotFoundError, match="No item"):
        store.get("nope")


def test_bulk_store_is_all_or_nothing_and_names_the_index(store: Store):
    store.store("existing")
    with pytest.raises(InvalidArgumentError, match=r"items\[2\]"):
        store.bulk_store([StoreInput("a"), StoreInput("b"), StoreInput("  "), StoreInput("d")])
    assert len(store) == 1
    res = store.bulk_store([StoreInput("a"), StoreInput("b", importance=9)])
    assert len(res.items) == 2
    assert len(store) == 3


def test_update_requires_a_field_and_reindexes(store: Store):
    it = store.store("alpha beta").item
    with pytest.raises(InvalidArgumentError, match="at least one"):
        store.update(it.id)
    store.update(it.id, content="gamma delta")
    assert [h.item.id for h in store.query("gamma")] == [it.id]
    assert store.query("alpha") == []
    before = store.tokens_used
    store.update(it.id, content="gamma delta " * 50)
    assert store.tokens_used > before
    assert store.get(it.id).content_tokens == store.tokens_used


def test_update_summary_and_tags(store: Store):
    it = store.store("some long content about caching layers").item
    store.update(it.id, summary="cache notes", tags=["perf"], importance=9)
    got = store.get(it.id)
    assert got.summary == "cache notes" and got.summary_tokens > 0
    assert got.tags[0] == "perf" and got.importance == 9
    assert [h.item.id for h in store.query("perf")] == [it.id]


def test_pin_unpin_restore_forget(store: Store):
    a = store.store("first thing").item
    store.pin(a.id)
    assert store.get(a.id).pinned
    store.unpin(a.id)
    assert not store.get(a.id).pinned
    store.forget(a.id)
    with pytest.raises(NotFoundError):
        store.get(a.id)
    with pytest.raises(NotFoundError):
        store.forget(a.id)
    assert store.tokens_used == 0


def test_list_newest_first_and_paged(store: Store):
    ids = [store.store(f"item number {i}").item.id for i in range(25)]
    page = store.list_items(limit=10)
    assert [it.id for it in page.items] == ids[::-1][:10]
    assert page.total == 25
    page2 = store.list_items(offset=20, limit=10)
    assert [it.id for it in page2.items] == ids[::-1][20:]
    assert store.list_items(offset=30).items == []
    with pytest.raises(InvalidArgumentError):
        store.list_items(tier="bogus")  # type: ignore[arg-type]


def test_export_pages_with_a_cursor_and_covers_everything(store: Store):
    ids = [store.store(f"record {i} " + "word " * 200).item.id for i in range(30)]
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = store.export(cursor=cursor, page_chars=5_000)
        seen.extend(it.id for it in page.items)
        pages += 1
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == ids
    assert pages > 1
    with pytest.raises(InvalidArgumentError, match="cursor"):
        store.export(cursor="!!notacursor")


def test_query_is_an_access(store: Store, clock):
    it = store.store("kubernetes ingress timeout").item
    clock.advance(100)
    store.query("ingress")
    got = store.get(it.id)
    assert got.access_count == 1
    assert got.last_accessed_at == clock.now


def test_query_tag_filter_keeps_any_tag(store: Store):
    a = store.store("alpha one", tags="red").item
    b = store.store("alpha two", tags="blue").item
    store.store("alpha three", tags="green")
    got = {h.item.id for h in store.query("alpha", tags=["red", "blue"])}
    assert got == {a.id, b.id}
    only_tags = {h.item.id for h in store.query(tags="blue")}
    assert only_tags == {b.id}


def test_a_start_files_no_tags_until_a_tag_filter_asks(state_dir):
    """Filing every item's tags was ~0.14 s of a 100k-item start; changes made before the
    first filter are in it all the same."""
    first = Store(state_dir=state_dir)
    ids = [first.store(f"kestrel note {i}", tags=["bird", f"n{i % 3}"]).item.id for i in range(9)]
    first.close()
    store = Store(state_dir=state_dir)
    assert store._s._by_tag is None
    store.update(ids[0], tags=["moth"])
    store.forget(ids[1])
    late = store.store("kestrel note late", tags=["bird", "moth"]).item
    assert store._s._by_tag is None
    assert {h.item.id for h in store.query(tags="moth")} == {ids[0], late.id}
    assert {h.item.id for h in store.query("kestrel", tags=["bird"], limit=50)} == {*ids[2:], late.id}
    filed: dict[str, set[str]] = {}
    for item in store._s.items.values():
        for tag in item.tags:
            filed.setdefault(tag, set()).add(item.id)
    assert store._s.by_tag == filed
    store.update(late.id, tags=["owl"])  # kept from here on, as before
    assert {h.item.id for h in store.query(tags="owl")} == {late.id}
    assert {h.item.id for h in store.query(tags="moth")} == {ids[0]}


def test_query_needs_text_or_tags(store: Store):
    with pytest.raises(InvalidArgumentError):
        store.query()


def test_word_only_in_tags_is_found(store: Store):
    """Reference bug: tags were not indexed."""
    it = store.store("the content says nothing special", tags=["zebrafish"]).item
    assert [h.item.id for h in store.query("zebrafish")] == [it.id]


def test_tag_match_is_boosted_over_content_match(store: Store):
    in_content = store.store("zebrafish appear once in this long text about other things entirely").item
    in_tags = store.store("a note about other things entirely", tags=["zebrafish"]).item
    order = [h.item.id for h in store.query("zebrafish")]
    assert order == [in_tags.id, in_content.id]


def test_ranking_relevance_first_then_deterministic_ties(store: Store):
    strong = store.store("redis cache eviction policy redis cache", importance=1).item
    weak = store.store("we talked about a cache once", importance=10).item
    order = [h.item.id for h in store.query("redis cache")]
    assert order[0] == strong.id and weak.id in order
    twins = [store.store("identical twin text").item.id for _ in range(2)]
    r1 = [h.item.id for h in store.query("identical twin")]
    r2 = [h.item.id for h in store.query("identical twin")]
    assert r1 == r2 and set(twins) <= set(r1)


def test_archived_hits_by_default_and_left_out_when_asked(store: Store):
    it = store.store("unique flamingo fact").item
    store.configure(token_budget=1_000, auto_compact=False)
    store.store(words(1, 600))
    store.compact(0.0)
    assert store.get(it.id).tier == "archived"
    assert [h for h in store.query("flamingo", include_archived=False) if h.item.tier == "archived"] == []
    hits = [h for h in store.query("flamingo") if h.item.depth == 0]
    assert [h.item.id for h in hits] == [it.id]
    assert hits[0].item.tier == "archived"


def test_recall_shows_pinned_and_caps_tokens(store: Store):
    p = store.store("pinned requirement: always use uv", pinned=True).item
    for i in range(100):
        store.store(f"memory {i} " + "detail " * 40, summary=f"summary of memory {i}")
    r = store.recall(limit=50)
    assert r.pinned[0].id == p.id
    assert r.tokens <= store.settings.recall_tokens
    assert r.more == store.count("active") - len(r.items) - len(r.pinned)
    store.configure(recall_tokens=200)
    small = store.recall(limit=50)
    assert small.tokens <= 200 and small.more > r.more


def test_configure_validates_and_compacts_when_lowered(store: Store):
    for i in range(20):
        store.store(words(i, 100))
    with pytest.raises(InvalidArgumentError):
        store.configure(token_budget=10)
    with pytest.raises(InvalidArgumentError):
        store.configure(auto_compact_threshold=1.5)
    with pytest.raises(InvalidArgumentError):
        store.configure(auto_compact_threshold=float("nan"))
    with pytest.raises(InvalidArgumentError):
        store.compact(float("nan"))
    used = store.tokens_used
    settings, report = store.configure(token_budget=used)  # now at 100% > 90%
    assert report is not None and report.archived
    assert store.tokens_used <= 0.8 * used
    assert settings.budget_source == "configure"


def test_client_budget_and_explicit_budget_wins(clock):
    s = Store(clock=clock)
    assert s.adopt_client_budget("claude-code") and s.budget == 80_000
    s2 = Store(clock=clock)
    s2.adopt_client_budget("cursor-vscode")
    assert s2.budget == 60_000
    s3 = Store(clock=clock)
    assert not s3.adopt_client_budget("some-other-client") and s3.budget == 100_000
    s4 = Store(clock=clock)
    s4.configure(token_budget=5_000)
    assert not s4.adopt_client_budget("claude-code")
    assert s4.budget == 5_000
    s5 = Store(budget=12_345, clock=clock)
    s5.adopt_client_budget("claude-code")
    assert s5.budget == 12_345


def test_import_with_explicit_ids_is_idempotent(store: Store):
    first = store.import_items([StoreInput("alpha", item_id="mem-alpha"), StoreInput("beta", item_id="mem-beta")])
    assert [it.id for it in first.items] == ["mem-alpha", "mem-beta"] and first.skipped == []
    again = store.import_items([StoreInput("alpha", item_id="mem-alpha"), StoreInput("gamma", item_id="mem-gamma")])
    assert [it.id for it in again.items] == ["mem-gamma"] and again.skipped == ["mem-alpha"]
    assert len(store) == 3
    with pytest.raises(InvalidArgumentError, match="explicit id"):
        store.import_items([StoreInput("x", item_id="BAD ID!")])


def test_lone_surrogates_are_a_clear_error_and_store_nothing(store: Store):
    with pytest.raises(InvalidArgumentError, match="lone surrogate"):
        store.store("bad \ud800 text")
    with pytest.raises(InvalidArgumentError, match="lone surrogate"):
        store.store("fine", summary="bad \udfff")
    with pytest.raises(InvalidArgumentError, match="lone surrogate"):
        store.store("fine", tags=["ok", "bad\ud800"])
    item = store.store("fine").item
    with pytest.raises(InvalidArgumentError, match="lone surrogate"):
        store.update(item.id, content="x \ud800")
    assert len(store) == 1 and store.get(item.id).content == "fine"


def test_compaction_runs_without_cyclic_gc_and_restores_it(store: Store, monkeypatch: pytest.MonkeyPatch):
    """Compaction pauses the cyclic collector (its thousands of new objects are acyclic) and
    leaves it as it found it, also when it was already off or the compaction fails."""
    import gc

    from compactor.summaries import planning as compaction

    seen: list[bool] = []
    real_plan = compaction.plan

    def spy(inp: compaction.CompactionInput) -> Any:
        seen.append(gc.isenabled())
        return real_plan(inp)

    monkeypatch.setattr(compaction, "plan", spy)
    for i in range(30):
        store.store(f"note {i} about parse_config and db/models.py " * 20, summary=f"note {i}")
    assert gc.isenabled()
    store.compact(0.1)
    assert seen == [False] and gc.isenabled()
    gc.disable()
    try:
        store.compact(0.1)
        assert not gc.isenabled()
    finally:
        gc.enable()

    def boom(inp: compaction.CompactionInput) -> Any:
        raise RuntimeError("planning failed")

    monkeypatch.setattr(compaction, "plan", boom)
    with pytest.raises(RuntimeError):
        store.compact(0.1)
    assert gc.isenabled()


def test_a_bulk_store_indexes_its_items_as_storing_them_one_by_one_would(tmp_path):
    """bulk_store indexes a call's items in one batch; the index and near-duplicate buckets
    must come out as storing them one at a time gives, in memory and after a reload."""
    words = ["alpha", "beta", "KeyError", "query.py", "max_items", "parseHTTPResponse", "gamma", "delta"]
    rng = random.Random(7)
    inputs = [
        StoreInput(
            " ".join(rng.choice(words) for _ in range(rng.randint(3, 40)))
            + f" item{n}"
            + " spam" * rng.choice([0, 200]),
            summary=rng.choice([None, "alpha summary", "query.py failed"]),
            tags=rng.choice([None, "beta", ["x-tag", "gamma"]]),
            item_id=f"item-{n:03d}",
        )
        for n in range(60)
    ]
    inputs.append(StoreInput(inputs[0].content + " again", item_id="near-dup-000"))
    batched, single = Store(state_dir=tmp_path / "b"), Store(state_dir=tmp_path / "s")
    for st in (batched, single):
        st.configure(auto_compact=False)
    batched.bulk_store(inputs)
    for inp in inputs:
        single.bulk_store([inp])
    assert batched.check_derived() == [] and single.check_derived() == []
    assert batched._s.index.to_state() == single._s.index.to_state()
    assert batched._s.dedup.to_state() == single._s.dedup.to_state()
    assert batched._s.items["near-dup-000"].dup_of == "item-000"
    reopened = Store(state_dir=tmp_path / "b")
    assert reopened.check_derived() == []


def test_a_rolled_back_call_with_batched_puts_leaves_memory_as_it_was(tmp_path):
    """Puts of new items are applied as a batch between other ops; undoing the call (here a
    failed journal write) must still restore every item and derived structure."""
    from compactor.errors import PersistenceError

    store = Store(state_dir=tmp_path)
    store.configure(auto_compact=False)
    old = store.store("alpha beta gamma", tags="keep").item
    before = {i: it.to_record() for i, it in store._s.items.items()}
    built = [
        store._build(StoreInput(f"new item {n} KeyError query.py", item_id=f"new-{n}"), 100 + n, 0.0) for n in range(4)
    ]
    ops = [
        {"op": "put", "item": built[0].to_record()},
        {"op": "put", "item": built[1].to_record()},
        {"op": "patch", "id": "new-0", "set": {"importance": 9}},
        {"op": "del", "id": old.id},
        {"op": "put", "item": built[2].to_record()},
        {"op": "put", "item": built[3].to_record()},
        {"op": "put", "item": old.to_record()},
    ]

    def fail(*_args, **_kwargs):
        raise PersistenceError("disk full")

    def call() -> None:
        with store._txn() as txn:
            txn.apply(ops)
            assert {"new-0", "new-3", old.id} <= set(store._s.items)

    store._backend.append = fail
    with pytest.raises(PersistenceError):
        call()
    assert {i: it.to_record() for i, it in store._s.items.items()} == before
    assert store.check_derived() == []
    assert store.query("KeyError") == []


def test_bulk_store_and_import_count_every_item_s_tokens(tmp_path):
    """Token counts are taken after all of a call's items are built; each must still be the
    count of its own (redacted) content and summary."""
    store = Store(state_dir=tmp_path)
    store.configure(auto_compact=False)
    inputs = [
        StoreInput(f"item {n} " + "word " * n, summary=None if n % 2 else f"summary {n} of it") for n in range(1, 12)
    ]
    res = store.bulk_store(inputs)
    records = [dict(it.to_record(), id=f"copy-{n}") for n, it in enumerate(res.items)]
    imported = store.import_records(records).items
    assert len(imported) == len(res.items)
    for item in [*res.items, *imported]:
        assert item.content_tokens == store.counter.count(item.content) > 0
        assert item.summary_tokens == store.counter.count(item.summary)


class _Refused(RuntimeError):
    """What the patched analysis raises for a marked text."""


@pytest.fixture
def refuse_marked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Indexing a text holding REFUSE raises, as analysing a pathological input can."""
    from compactor.search import index

    real = index.index_tokens

    def index_tokens(text: str) -> tuple[list[str], int]:
        if "REFUSE" in text:
            raise _Refused(text[:20])
        return real(text)

    monkeypatch.setattr(index, "index_tokens", index_tokens)


def _as_it_was(store: Store, contents: set[str]) -> None:
    from tests.store.test_budget_property import derived, kept

    assert {store.get(i).content for i in store.ids()} == contents
    assert kept(store) == derived(store)


@pytest.mark.parametrize("how", ["store", "bulk_store"])
def test_an_input_that_fails_while_indexed_leaves_the_store_as_it_was(
    tmp_path: Any, refuse_marked: None, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The failure itself reaches the caller, not a KeyError from undoing a half-filed item,
    and nothing of the call stays behind: not the item, not its postings, not its buckets.
    The bulk case fails in its second indexing batch, after the first was indexed."""

    monkeypatch.setattr(state_mod, "REBUILD_BATCH", 3)
    store = Store(state_dir=tmp_path / "state")
    before = {store.store(f"kept item {n} about parsers").item.id for n in range(3)}
    contents = {store.get(i).content for i in before}
    batch = [StoreInput(f"new item {n} about parsers") for n in range(5)] + [StoreInput("REFUSE")]
    call = (
        (lambda: store.store("REFUSE this one while it is indexed"))
        if how == "store"
        else (lambda: store.bulk_store(batch))
    )
    with pytest.raises(_Refused):
        call()
    _as_it_was(store, contents)
    assert {h.item.id for h in store.query("parsers", limit=20)} == before
    after = store.store("stored after the failure").item.id
    store.close()
    again = Store(state_dir=tmp_path / "state")
    _as_it_was(again, contents | {"stored after the failure"})
    assert after in again.ids()


def test_a_near_duplicate_filing_that_fails_takes_the_item_out_of_the_index(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from compactor.search.dedup import DedupIndex

    real = DedupIndex.add

    def add(self: DedupIndex, item_id: str, words: Any) -> None:
        words = list(words)
        if "refuse" in words:
            raise _Refused(item_id)
        real(self, item_id, words)

    monkeypatch.setattr(DedupIndex, "add", add)
    store = Store(state_dir=tmp_path / "state")
    kept_id = store.store("kept item about parsers").item.id
    with pytest.raises(_Refused):
        store.store("refuse to file this one")
    _as_it_was(store, {"kept item about parsers"})
    assert [h.item.id for h in store.query("refuse parsers")] == [kept_id]
