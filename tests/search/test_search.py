"""Search as an agent uses it: going back to a tool output, a file it read, an error it saw.

Each test fails on the ranking before ISSUE 7 (merged fields, no stop words, no path tails,
no recency prior) and passes now.
"""

from compactor.store import Store
from compactor.store import search as search_mod

_CODE = "\n".join(f"    {i:4d}  value_{i} = compute_{i}(header, options)  # step {i}" for i in range(10, 80))


def _firsts(store: Store, query: str) -> list[str]:
    return [h.item.content.split("\n", 1)[0] for h in store.query(query=query, limit=10)]


def test_a_long_output_whose_first_line_is_the_command_beats_thoughts_naming_its_file(store: Store):
    def put(text: str, tag: str) -> None:  # as the replay stores events: summary = first line
        store.store(text, summary=text.split("\n", 1)[0], tags=[tag])

    put("sed -n '10,80p' pkg/http.py", "action")
    put(f"$ sed -n '10,80p' pkg/http.py\n{_CODE}", "observation")
    put("parse_header in pkg/http.py is where pkg/http.py reads headers; see pkg/http.py.", "thought")
    put("So pkg/http.py builds the header map by hand and pkg/http.py never lowercases keys.", "thought")
    top = _firsts(store, "Let me look at that part of the file again.\nsed -n '10,80p' pkg/http.py")
    # The command matches as well as its output; both come before any thought.
    assert set(top[:2]) == {"$ sed -n '10,80p' pkg/http.py", "sed -n '10,80p' pkg/http.py"}


def test_function_words_of_a_long_query_do_not_outvote_the_name_that_matters(store: Store):
    frames = "\n".join(f'  File "pkg/m{i}.py", line {i}, in f{i}' for i in range(12))
    store.store(f"Traceback (most recent call last):\n{frames}\nKeyError: 'content_type'", tags=["error"])
    for i in range(4):
        store.store(f"What is it that we should do about this, and is it the same as before? I think so {i}.")
    query = "What is it that we should do about this KeyError again, and is it the same one as before?"
    assert _firsts(store, query)[0].startswith("Traceback")


def test_a_path_matches_whichever_root_it_was_written_from(store: Store):
    store.store('  File "/testbed/django/db/models/query.py", line 12, in get\n    raise self.model.DoesNotExist')
    store.store("django/db/models/sql/query.py and django/db/models/fields/__init__.py were fine, models query py")
    assert _firsts(store, "look at django/db/models/query.py")[0].startswith('  File "/testbed/')


def test_of_two_near_equal_matches_the_recent_one_ranks_first(store: Store):
    store.store("pytest tests/system/test_http.py: failed test_parse_header, failed test_parse_header again")
    for i in range(60):
        store.store(f"unrelated note number {i} about the build cache and the docs theme")
    store.store("pytest tests/system/test_http.py: failed test_parse_header")
    assert _firsts(store, "pytest tests/system/test_http.py failed test_parse_header")[0].endswith("test_parse_header")


def test_a_clearly_better_older_match_still_beats_a_weak_recent_one(store: Store):
    store.store("ValueError: invalid literal for int() with base 10: 'abc' in parse_port of pkg/net.py")
    for i in range(60):
        store.store(f"unrelated note number {i} about the build cache and the docs theme")
    store.store("the port is fine now")
    assert _firsts(store, "ValueError invalid literal for int parse_port pkg/net.py")[0].startswith("ValueError")


def test_first_line_counts_as_the_headline_when_there_is_no_summary():
    from compactor.store import Store

    s = Store()
    body = "\n".join(f"  row {i}: value {i * 7} ok" for i in range(400))
    long_output = s.store(f"$ grep -rn frobnicate_widget src/\n{body}").item
    chatter = s.store("maybe grep for frobnicate_widget in src later").item
    order = [h.item.id for h in s.query("grep -rn frobnicate_widget src/")]
    assert order[0] == long_output.id, (order, long_output.id, chatter.id)


def test_rerank_stops_early_without_changing_the_top() -> None:
    """Store._search stops re-ranking BM25 hits once even the largest lift cannot reach the
    current limit-th score; the result must equal re-ranking every fetched hit."""
    import random

    from compactor.search import scoring
    from compactor.store import Store
    from tests.conftest import FakeClock

    clock = FakeClock()
    s = Store(clock=clock)
    rng = random.Random(7)
    words = [f"w{i}" for i in range(40)]
    for _i in range(400):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(3, 30)))
        item = s.store(text, importance=rng.randint(1, 10), pinned=rng.random() < 0.05).item
        clock.advance(rng.uniform(0, 5000))
        if rng.random() < 0.3:
            s.get(item.id)
    for q in ["w1 w2", "w3", "w5 w6 w7 w8", "w10 w39", "w0 w1 w2 w3 w4"]:
        for limit in (1, 5, 10):
            fetch = max(limit * search_mod.RERANK_DEPTH, search_mod.RERANK_MIN)
            now = s._clock()
            newest = s._s.next_seq - 1
            full = sorted(
                (
                    (
                        scoring.rank_score(h.score, s._s.items[h.doc_id], now, newer=newest - s._s.items[h.doc_id].seq),
                        s._s.items[h.doc_id],
                    )
                    for h in s._s.index.search(q, fetch)
                ),
                key=lambda pair: (-pair[0], -pair[1].seq),
            )[:limit]
            got = s._search(q, [], limit, False, None)
            assert [(h.item.id, h.score) for h in got] == [(it.id, f) for f, it in full], (q, limit)
            want_matched = s._s.index.matched_terms([it.id for _, it in full], q)
            assert [h.matched for h in got] == want_matched
