import math

from compactor.search import scoring as scoring_mod
from compactor.search.scoring import (
    MAX_RANK_FACTOR,
    access,
    rank_score,
    recency,
    recency_prior,
    retention,
    retention01,
    size,
)
from tests.conftest import make_item as make

NOW = 1_800_000_000.0


def test_recency_is_a_true_half_life_from_last_access():
    for ctype, half in scoring_mod.HALF_LIFE_S.items():
        it = make(content_type=ctype, last_accessed_at=NOW - half, created_at=NOW - 10 * half)
        assert math.isclose(recency(it, NOW), 0.5)
        assert math.isclose(recency(make(content_type=ctype, last_accessed_at=NOW - 2 * half), NOW), 0.25)


def test_half_lives_match_the_spec():
    assert scoring_mod.HALF_LIFE_S == {
        "error": 1800,
        "decision": 6 * 3600,
        "code": 6 * 3600,
        "prose": 2 * 3600,
        "tool_output": 900,
    }


def test_access_term():
    assert access(0) == 0
    assert math.isclose(access(10), math.log(11) / 5)
    assert access(10_000) == 1.0


def test_formula_and_type_multiplier():
    it = make(importance=8, access_count=3, content_tokens=500, content_type="decision")
    expected = (0.4 * 0.8 + 0.3 * 1.0 + 0.2 * access(3) - 0.1 * size(500)) * 1.3
    assert math.isclose(retention(it, NOW), expected)
    assert scoring_mod.TYPE_MULTIPLIER == {"error": 1.5, "decision": 1.3, "code": 1.2, "prose": 1.0, "tool_output": 0.7}


def test_size_term_matters():
    small = make(content_tokens=20)
    big = make(content_tokens=4_000)
    gap = retention(small, NOW) - retention(big, NOW)
    # Worth more than half an importance point (0.4 * 0.05 = 0.02).
    assert gap > 0.02
    # And it ranks a smaller, slightly less important item above a big one.
    assert retention(make(content_tokens=20, importance=5), NOW) > retention(
        make(content_tokens=6000, importance=6), NOW
    )


def test_summary_view_is_cheaper_and_scored_by_view_tokens():
    it = make(summary="s", summary_tokens=5, content_tokens=3000, view="summary")
    assert it.view_tokens == 5
    assert retention(it, NOW) > retention(make(content_tokens=3000), NOW)


def test_rank_score_is_bounded_by_relevance():
    best = make(importance=10, content_type="error", access_count=1000, content_tokens=1, pinned=True)
    assert 0.0 <= retention01(best, NOW) <= 1.0
    assert rank_score(1.0, best, NOW) <= MAX_RANK_FACTOR + 1e-12
    # Pinned is a boost, not infinity: a much more relevant unpinned item still wins.
    worst = make(importance=1, content_type="tool_output", last_accessed_at=NOW - 86400, content_tokens=8000)
    assert rank_score(2.0, worst, NOW) > rank_score(1.0, best, NOW)
    assert rank_score(1.0, make(pinned=True), NOW) > rank_score(1.0, make(), NOW)


def test_recency_prior_halves_per_half_life_in_items_and_is_bounded():
    assert recency_prior(0) == 1.0 + scoring_mod.RECENCY_PRIOR
    assert recency_prior(scoring_mod.RECENCY_HALF_LIFE_ITEMS) == 1.0 + scoring_mod.RECENCY_PRIOR / 2
    assert recency_prior(-5) == recency_prior(0)  # a clock skew cannot push it past the bound
    values = [recency_prior(n) for n in range(0, 500, 7)]
    assert values == sorted(values, reverse=True)
    assert all(1.0 <= v <= 1.0 + scoring_mod.RECENCY_PRIOR for v in values)


def test_rank_score_applies_the_recency_prior_only_when_asked_and_stays_bounded():
    it = make()
    assert rank_score(1.0, it, NOW, newer=0) == rank_score(1.0, it, NOW) * recency_prior(0)
    best = make(importance=10, content_type="error", access_count=1000, content_tokens=1, pinned=True)
    assert rank_score(1.0, best, NOW, newer=0) <= MAX_RANK_FACTOR + 1e-12
    # The prior breaks near-ties; a clearly better older match still wins.
    assert rank_score(1.0, it, NOW, newer=0) > rank_score(1.2, it, NOW, newer=200)
    assert rank_score(2.0, it, NOW, newer=200) > rank_score(1.0, it, NOW, newer=0)
