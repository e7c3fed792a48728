"""The summary DAG: condensation, lineage ids, expand/dissolve/tree, forget, recall."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.errors import InvalidArgumentError
from compactor.models import Item
from compactor.store import Store, StoreInput
from compactor.store import dag as dag_mod
from compactor.summaries import condense
from compactor.summaries import condense as condense_mod
from compactor.summaries.condense import FOOTER_PREFIX, lineage_id, unfamiliar_terms
from tests.conftest import FakeClock, make_item

TOPICS = ["auth/session.py", "db/models/query.py", "KeyError", "parse_config", "redis", "billing/invoice.go"]


def text(seed: int, n: int = 60) -> str:
    rng = random.Random(seed)
    topic = TOPICS[seed % len(TOPICS)]
    return f"{topic}: " + " ".join(f"w{rng.randrange(1_000_000)}" for _ in range(n))


def fill(store: Store, n: int, start: int = 0) -> list[str]:
    return [
        it.id for it in store.bulk_store([StoreInput(text(i), tags=f"t{i % 3}") for i in range(start, start + n)]).items
    ]


def reachable(store: Store) -> set[str]:
    """Everything active, plus everything reachable by expand from an active summary."""
    seen: set[str] = set()
    present = set(store.ids())
    stack = [i for i in present if store.get(i).tier == "active"]
    while stack:
        item_id = stack.pop()
        if item_id in seen:
            continue
        seen.add(item_id)
        stack.extend(c for c in store.get(item_id).children if c in present)
    return seen


def raw_ids(store: Store) -> set[str]:
    return {i for i in store.ids() if store.get(i).depth == 0}


def active_set(store: Store) -> set[str]:
    return {i for i in store.ids() if store.get(i).tier == "active"}


def test_lineage_id_depends_only_on_children():
    assert lineage_id(["b", "a"]) == lineage_id(["a", "b"])
    assert lineage_id(["a", "b"]) != lineage_id(["a", "c"])
    assert lineage_id(["a"]).startswith("s")


def test_compaction_condenses_archive_into_d1_nodes(store: Store):
    store.configure(token_budget=10_000, auto_compact=False)
    ids = fill(store, 60)
    report = store.compact(0.5)
    assert report.condensed
    nodes = [store.get(n) for n in report.condensed]
    assert any(n.depth == 1 for n in nodes)
    for node in nodes:
        assert node.depth >= 1 and node.quality == "extractive"
        assert (node.tier == "active") == (not node.parents)
        assert 2 <= len(node.children) <= dag_mod.CHUNK_SIZE + dag_mod.CHUNK_SIZE // 2
        assert node.content.rstrip().splitlines()[-1].startswith(FOOTER_PREFIX)
        assert node.content_tokens <= condense_mod.NODE_MAX_TOKENS
        for child in node.children:
            assert node.id in store.get(child).parents
            assert store.get(child).tier == "archived"
    assert set(ids) <= reachable(store)
    assert store.tokens_used <= 5_000


def test_footer_names_real_topics(store: Store):
    store.configure(token_budget=3_000, auto_compact=False)
    fill(store, 40)
    report = store.compact(0.3)
    footer = store.get(report.condensed[0]).content.splitlines()[-1]
    assert any(t in footer for t in [*TOPICS, "#t0", "#t1", "#t2"])


def test_groups_are_coherent_neighbours(store: Store):
    store.configure(token_budget=4_000, auto_compact=False)
    a = [
        store.store(f"stripe webhook retries payment_intent {i} " + text(i, 30), tags="billing").item.id
        for i in range(12)
    ]
    b = [
        store.store(f"kubernetes ingress nginx timeout {i} " + text(100 + i, 30), tags="infra").item.id
        for i in range(12)
    ]
    report = store.compact(0.0)
    groups = [set(store.get(n).children) for n in report.condensed if store.get(n).depth == 1]
    assert any(set(a) <= g for g in groups)
    assert any(set(b) <= g for g in groups)
    assert not any(g & set(a) and g & set(b) for g in groups)


def test_d1_overflow_condenses_into_d2_and_dissolve_restores_level(store: Store):
    store.configure(token_budget=20_000, auto_compact=False)
    for round_ in range(10):
        fill(store, 25, start=round_ * 25)
        store.compact(0.1)
    shape = store.dag_shape()
    assert max(shape) >= 2
    d2 = next(n for n in store.roots() if n.depth >= 2)
    before_active = active_set(store)
    kids = store.dissolve(d2.id)
    assert kids
    assert all(k.depth == d2.depth - 1 and k.tier == "active" for k in kids)
    assert active_set(store) == (before_active - {d2.id}) | {k.id for k in kids}


def test_condense_then_dissolve_leaves_active_set_unchanged(store: Store):
    store.configure(token_budget=3_000, auto_compact=False)
    fill(store, 30)
    store.compact(0.6)
    d1 = next(n for n in store.roots() if n.depth == 1)
    before = active_set(store) - {d1.id}
    children = set(d1.children)
    store.dissolve(d1.id)
    assert active_set(store) == before
    for c in children:
        assert store.get(c).tier == "archived" and d1.id not in store.get(c).parents
    # Condensing the same children again gives the same id: no duplicate, no conflict.
    store.compact(0.6)
    again = [n for n in store.roots() if set(n.children) == children]
    assert [n.id for n in again] == [d1.id]


def test_dissolve_refuses_raw_items_and_covered_nodes(store: Store):
    raw = store.store("plain").item
    with pytest.raises(InvalidArgumentError, match="not a summary"):
        store.dissolve(raw.id)
    store.configure(token_budget=20_000, auto_compact=False)
    for round_ in range(10):
        fill(store, 25, start=round_ * 25)
        store.compact(0.1)
    covered = next(store.get(i) for i in store.ids() if store.get(i).depth == 1 and store.get(i).parents)
    with pytest.raises(InvalidArgumentError, match="dissolve that one first"):
        store.dissolve(covered.id)


def test_expand_pages_children(store: Store):
    store.configure(token_budget=3_000, auto_compact=False)
    fill(store, 30)
    store.compact(0.1)
    node = store.roots()[0]
    seen: list[str] = []
    offset = 0
    while True:
        _, kids, total = store.expand(node.id, offset=offset, limit=4)
        seen.extend(k.id for k in kids)
        offset += len(kids)
        if offset >= total:
            break
    assert seen == list(node.children)


def test_query_hits_in_archive_name_their_active_summary(store: Store):
    store.configure(token_budget=3_000, auto_compact=False)
    target = store.store("the flux capacitor needs 1.21 gigawatts").item
    fill(store, 30)
    store.compact(0.1)
    hits = store.query("flux capacitor gigawatts", include_archived=True)
    hit = next(h for h in hits if h.item.id == target.id)
    assert hit.item.tier == "archived"
    path = store.ancestors(hit.item)
    assert path and store.get(path[-1]).tier == "active"
    assert target.id in store.get(path[0]).children


def test_forget_raw_marks_parent_gone_and_rewrites_text(store: Store):
    store.configure(token_budget=3_000, auto_compact=False)
    secret = store.store("zq-secret-marker-771 leaked in a log line").item
    fill(store, 25)
    store.compact(0.0)
    parent_id = store.get(secret.id).parents[0]
    store.forget(secret.id)
    parent = store.get(parent_id)
    assert secret.id in parent.gone_children and parent.quality == "stale"
    assert "zq-secret-marker-771" not in parent.content
    for node_id in store.ids():
        assert "zq-secret-marker-771" not in store.get(node_id).content


def test_forget_on_summary_dissolves_it(store: Store):
    store.configure(token_budget=3_000, auto_compact=False)
    ids = fill(store, 25)
    store.compact(0.1)
    node = store.roots()[0]
    store.forget(node.id)
    assert node.id not in store.ids()
    assert set(node.children) <= set(store.ids())
    assert set(ids) <= set(store.ids())


def test_agent_summary_gets_footer_and_faithfulness_warnings(store: Store):
    store.configure(token_budget=3_000, auto_compact=False)
    fill(store, 25)
    store.compact(0.1)
    node = store.roots()[0]
    res = store.update(node.id, summary="Fixed parse_config in auth/session.py; see ticket 9999 and made_up_function.")
    assert res.item.quality == "agent" and res.item.view == "summary"
    assert res.item.summary is not None and FOOTER_PREFIX in res.item.summary.splitlines()[-1]
    joined = " ".join(res.warnings)
    assert "9999" in joined and "made_up_function" in joined
    assert "parse_config" not in joined or "auth/session.py" not in joined
    assert store.needs_text_blocks() == [] or node.id not in [n.id for n, _ in store.needs_text_blocks()]


def test_unfamiliar_terms():
    assert unfamiliar_terms("uses parse_config and 42 items in a/b.py", ["parse_config 42 a/b.py"]) == []
    assert unfamiliar_terms("calls do_magic", ["nothing"]) == ["do_magic"]


def test_a_name_is_familiar_however_its_accents_were_typed():
    listed, typed = "docs/Re\u0301sume\u0301.md", "docs/R\u00e9sum\u00e9.md"  # as macOS lists it; as typed
    assert unfamiliar_terms(f"rewrote {typed}", [f"$ cat {listed}"]) == []
    assert unfamiliar_terms(f"rewrote {listed}", [f"$ cat {typed}"]) == []
    assert unfamiliar_terms(f"rewrote {typed}", ["$ cat docs/cv.md"]) == [typed]


def _unfamiliar_by_scan(summary: str, sources: list[str]) -> list[str]:
    """The plain definition: every term found in the summary, scanned for in the sources."""
    haystack = "\n".join(sources)
    body = summary.split(FOOTER_PREFIX, maxsplit=1)[0]
    found: dict[str, None] = {}
    for rx in (condense._PATH, condense._ERROR, condense._IDENT, condense._NUMBER):
        for m in rx.finditer(body):
            term = m.group(0).strip(".,:;()'\"`")
            if term and term not in haystack:
                found[term] = None
    return list(found)[:20]


_PIECES = ["parse_config", "do_magic", "a/b.py", "src/x/mod_1.py", "KeyError", "42", "1,000", "os.path.join()",
           "fooBar", "x", "(", ")", ".", "`", "'", "mod_1", "b.py", "\n", " ", " ", "Error"]  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(
    summary=st.lists(st.sampled_from(_PIECES), max_size=60).map("".join),
    source=st.lists(st.sampled_from(_PIECES), max_size=60).map("".join),
    long=st.booleans(),
)
def test_unfamiliar_terms_are_what_a_scan_of_the_sources_finds(summary: str, source: str, long: bool) -> None:
    # Past _SCAN_CHARS the sources are split into words first: the answer must not change.
    sources = [source, "z " * (condense._SCAN_CHARS // 2) if long else ""]
    assert unfamiliar_terms(summary, sources) == _unfamiliar_by_scan(summary, sources)


def test_unfamiliar_terms_reports_the_first_twenty_of_many_new_names_in_order() -> None:
    summary = " ".join(f"check_value_{i}" for i in range(2_000))
    source = "known_name " * 60_000  # long enough for the word set
    assert unfamiliar_terms(summary, [source]) == [f"check_value_{i}" for i in range(20)]


def test_recall_recent_work_newest_first_and_capped(store: Store, clock: FakeClock):
    store.configure(token_budget=4_000)
    for i in range(80):
        clock.advance(10)
        store.store(text(i, 40), summary=f"summary {i}")
    store.configure(recall_tokens=600)
    r = store.recall(limit=30)
    assert r.tokens <= 600
    newest = store.list_items(limit=5).items
    shown = {it.id for it, _ in r.items}
    assert {it.id for it in newest} <= shown
    # Recent work, newest first as its header says (open errors, a group of their own, come before it).
    from tests.support.recall_layout import groups_of

    recent = [store.get(i).seq for i in groups_of(r.text)["Recent work"]]
    assert len(recent) >= 5 and recent == sorted(recent, reverse=True)
    assert r.more > 0 and "Left out" in r.text


def test_dag_survives_restart_with_same_ids(state_dir: Path):
    s = Store(state_dir=state_dir)
    s.configure(token_budget=3_000, auto_compact=False)
    fill(s, 40)
    s.compact(0.1)
    shape, roots = s.dag_shape(), sorted(n.id for n in s.roots())
    s.close()
    s2 = Store(state_dir=state_dir)
    assert s2.dag_shape() == shape and sorted(n.id for n in s2.roots()) == roots
    s2.snapshot()
    s2.close()
    s3 = Store(state_dir=state_dir)
    assert s3.dag_shape() == shape


def _leaf(n: int, content: str, tags: tuple[str, ...] = ()) -> Item:
    return make_item(id=f"i{n}", seq=n, content=content, tags=tags, content_tokens=len(content) // 4)


# The topic patterns as first written (plain greedy runs); condense's are tuned to match the same.
_PLAIN_PATH = re.compile(
    r"(?<![\w/.-])(?:[\w.-]+/)+[\w.-]+|\b[\w-]+\.(?:py|go|ts|tsx|js|rs|java|rb|c|h|cpp|sh|md|json|ya?ml|toml|sql|cfg|ini|txt)\b"
)
_PLAIN_ERROR = re.compile(r"\b[A-Z]\w*(?:Error|Exception|Warning)\b")
_PLAIN_IDENT = re.compile(r"\b(?:[a-z]+_[a-z0-9_]+|[a-z]+[A-Z]\w+|[A-Z][a-z]+[A-Z]\w+|\w+(?:\.\w+){1,3}\(\))")
_TRICKY = [
    "a/b/ c//d e/f/g.py x.y.z.w.v() a_b_c() fooBar.baz() A/B/C/ ./x/ ../y.go -/-/z snake_case_9 camelCase",
    "path/to/file.tsx, and/or x/y. Foo.bar.baz.qux.quux() HTTPError ReadTimeoutError/x KeyError.",
    "config.yaml conf.yml a-b.c-d.md /abs/path/ ~/home/x.cfg URLParser getHTTPResponse x.y()z",
]


def test_tuned_topic_patterns_match_exactly_what_the_plain_ones_match():
    from compactor.summaries import condense
    from tests.search.test_index import _first_contents

    texts = [d[: condense_mod.TOPIC_SCAN_CHARS] for d in _first_contents(800)] + _TRICKY
    pairs = [
        (condense._PATH, _PLAIN_PATH, texts),
        (condense._PATH_NO_SLASH, _PLAIN_PATH, [t for t in texts if "/" not in t]),
        (condense._ERROR, _PLAIN_ERROR, texts),
        (condense._IDENT, _PLAIN_IDENT, texts),
        (condense._IDENT_NO_CALL, _PLAIN_IDENT, [t for t in texts if "()" not in t]),
    ]
    for tuned, plain, sample in pairs:
        assert len(sample) > 100
        for text in sample:
            assert tuned.findall(text) == plain.findall(text), (tuned.pattern, text[:200])


def _reference_topic_counts(children: list[Item]) -> dict[str, int]:
    """What topics() counts, computed the plain way: every plain pattern over every child's text."""
    from collections import Counter

    counts: Counter[str] = Counter()
    for child in children:
        text = child.content if not child.depth else child.content.split(FOOTER_PREFIX)[-1]
        text = text[: condense_mod.TOPIC_SCAN_CHARS] + " " + (child.summary or "")
        found = {
            m.group(0).strip(".,:;()'\"`")
            for rx in (_PLAIN_PATH, _PLAIN_ERROR, _PLAIN_IDENT)
            for m in rx.finditer(text)
        }
        found |= {f"#{t}" for t in child.tags if t not in condense_mod.TYPE_TAGS}
        counts.update(t for t in found if 3 <= len(t) <= 80)
    return dict(counts)


def test_topics_skip_patterns_only_where_they_cannot_match():
    """topics() leaves out the error and call patterns for texts without their literal words;
    on real agent text (errors, calls, paths) it must count exactly what the full scan counts."""
    from compactor.summaries.condense import topics
    from tests.search.test_index import _first_contents

    docs = _first_contents(1000)  # the repository slice keeps 400 chars of each event
    assert sum("()" in d for d in docs) > 20 and sum("Error" in d for d in docs) > 20
    children = [_leaf(n, d, tags=("billing", "code") if n % 3 == 0 else ()) for n, d in enumerate(docs)]
    for start in range(0, len(children), 20):
        group = children[start : start + 20]
        want = _reference_topic_counts(group)
        got = topics(group, limit=10_000)
        assert sorted(got) == sorted(want)
        assert [want[t] for t in got] == sorted(want.values(), reverse=True)


@pytest.mark.slow
def test_topics_order_does_not_depend_on_the_hash_seed(tmp_path: Path):
    """Ties in count are broken by first appearance, not by set order (which follows the
    per-process string hash seed), so the same children give the same footer in any process."""
    import subprocess
    import sys

    script = (
        "from compactor.summaries.condense import topics\n"
        "from tests.summaries.test_dag import _leaf\n"
        "kids = [_leaf(n, ' '.join(f'mod_{n}_{k}/file_{k}.py helper_{n}_{k} Err{n}{k}Error' for k in range(6)))"
        " for n in range(5)]\n"
        "print(topics(kids))\n"
    )
    outputs = set()
    for seed in ("0", "1", "2", "3"):
        env = {"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
        outputs.add(run.stdout)
    assert len(outputs) == 1, outputs
    assert "mod_0_0/file_0.py" in outputs.pop()


def test_recall_groups_fill_the_cap_without_duplicates(store: Store, clock: FakeClock):
    """ISSUE 19: with material to fill it, recall uses most of its cap (the item limit does not cut
    it at half), in groups with one ordering and one kind of score each, no item twice, ids shown."""
    from tests.support.recall_layout import groups_of

    store.configure(token_budget=1_000_000)
    pinned = store.store("Always run the linter before committing.", pinned=True).item.id
    for i in range(300):
        clock.advance(10)
        if i % 3 == 0:
            store.store(f"$ cat src/parser_{i % 30}.py\ndef parse_{i}(raw): return raw.split()", tags=["observation"])
        else:
            store.store(f"step {i}: the tokenizer handles case {i} of the invoice importer", summary=f"step {i}")
    r = store.recall(query="invoice importer tokenizer")
    cap = store.settings.recall_tokens
    assert cap * 0.8 <= r.tokens <= cap
    groups = groups_of(r.text)
    assert list(groups)[:3] == ["Pinned", "Related to the task", "Recent work"]
    assert groups["Pinned"] == [pinned]
    shown = [it.id for it in r.pinned] + [it.id for it, _ in r.items]
    assert shown == [i for v in groups.values() for i in v]
    assert len(shown) > 40  # far more than the old 20-item recall in the same 2,000 tokens
    # One entry per file, its newest view: no parser_N.py shown twice.
    views = [ln.split(": ", 1)[1] for ln in r.lines if "cat src/parser_" in ln]
    assert len(views) == len(set(views))
    # Recent work, newest first as its header says.
    seqs = [store.get(i).seq for i in groups["Recent work"]]
    assert seqs == sorted(seqs, reverse=True)
    # Without a query: no task group, the rest still fills the cap.
    r2 = store.recall()
    g2 = groups_of(r2.text)
    assert "Related to the task" not in g2 and cap * 0.8 <= r2.tokens <= cap


def test_raw_items_archived_as_a_last_resort_are_covered_by_a_summary(store: Store):
    """Compaction's last resort (still over target once the archive is condensed) archives
    the lowest-value active items; a raw one among them gets a d1 node in the archive, as a
    root, like everything eviction archives. It was left with no summary in its lineage
    (found by the long random walks once pins kept more of the budget)."""
    store.configure(token_budget=10_000, auto_compact=False)
    ids = [store.store(f"raw note {i} on the quokka{i} relay and its backoff").item.id for i in range(6)]
    before = store.tokens_used
    with store._txn() as txn:
        store._condense(txn, before // 3, frozenset(), last_resort=True)
    archived = [i for i in ids if store.get(i).tier == "archived"]
    assert archived and store.tokens_used <= before // 3
    for item_id in archived:
        [node_id] = store.get(item_id).parents
        node = store.get(node_id)
        assert node.depth == 1 and node.tier == "archived" and not node.parents and item_id in node.children
    assert set(ids) <= reachable(store) | {c for r in store.roots() for c in store.get(r.id).children}
    assert store.check_derived() == []
