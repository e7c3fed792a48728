"""One Tuning value carries every knob an evaluation may turn: an override reaches the code that
uses the knob (nothing copied a module global at import), and a name that tunes nothing is
refused rather than ignored."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from compactor.store import Store
from compactor.store.tuning import Tuning, knob_names, parse_overrides
from tests.conftest import ROOT, server_env

PKG = ROOT / "compactor"


def test_every_knob_name_changes_its_field_and_nothing_else():
    base = Tuning()
    for name in knob_names():
        changed = base.overridden({name: "0.123"})
        assert changed != base, name
        assert base.overridden({name.lower(): 0.123}) == changed, name


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"NO_SUCH_KNOB": "1"}, "no knob named 'NO_SUCH_KNOB'"),
        ({"bm25.nope": "1"}, "no knob named 'bm25.nope'"),
        ({"SUMMARY_WEIGHT": "heavy"}, "takes a number"),
    ],
)
def test_a_name_that_tunes_nothing_or_a_word_is_refused(values: dict[str, str], message: str):
    with pytest.raises(ValueError, match=message):
        Tuning().overridden(values)


def test_overrides_parse_from_name_value_pairs():
    assert parse_overrides(["SUMMARY_WEIGHT=3", " VIEW_PATH_LIFT = 2 "]) == {
        "SUMMARY_WEIGHT": "3",
        "VIEW_PATH_LIFT": "2",
    }
    with pytest.raises(ValueError, match="expected NAME=VALUE"):
        parse_overrides(["SUMMARY_WEIGHT"])


def _scores(tuning: Tuning, query: str) -> dict[str, float]:
    s = Store(tuning=tuning)
    try:
        s.store("the deploy pipeline builds the image", summary="retry budget for charging cards")
        s.store("charging cards failed: the retry budget ran out", tags=["payments"])
        s.store("$ cat -n shop/cart.py\n     1\timport retry\n     2\tdef charge(): ...")
        s.store("notes mention shop/cart.py and the retry of charging")
        return {h.item.content[:20]: h.score for h in s.query(query=query, limit=10)}
    finally:
        s.close()


@pytest.mark.parametrize(
    ("knob", "query"),
    [
        ("SUMMARY_WEIGHT", "retry budget"),
        ("BM25_K1", "retry budget"),
        ("TAG_WEIGHT", "payments"),
        ("RECENCY_PRIOR", "retry"),
        ("RETENTION_WEIGHT", "retry"),
        ("VIEW_PATH_LIFT", "shop/cart.py"),
    ],
)
def test_an_override_reaches_the_ranking(knob: str, query: str):
    """The same store, the same query: a changed knob changes the scores. A knob copied from a
    module at import (what `--set` once silently missed) would leave them as they were."""
    base = _scores(Tuning(), query)
    tuned = _scores(Tuning().overridden({knob: "0.01"}), query)
    assert base.keys() == tuned.keys() and base
    assert base != tuned, f"{knob} did not reach the scores"


def test_an_override_reaches_recall():
    def recall(tuning: Tuning) -> str:
        s = Store(tuning=tuning)
        try:
            for k in range(40):
                s.store(f"step {k}: ran the checkout tests, {k} passed", tags=["work"])
            s.store("Decision: keep money as Decimal", importance=8)
            return s.recall(limit=50, query="checkout tests").text
        finally:
            s.close()

    assert recall(Tuning()) != recall(Tuning().overridden({"RECALL_TASK_SHARE": "0.02"}))


def test_no_module_reads_a_knob_except_through_the_tuning_value():
    """A knob's constant appears only where it is defined and as its field's default."""
    constants = {name for name in knob_names() if not name.startswith(("VIEW_", "RECALL_"))}
    uses: list[str] = []
    for path in sorted(PKG.rglob("*.py")):
        tree = ast.parse(path.read_text())
        defaults = {
            id(node.value)
            for cls in ast.walk(tree)
            if isinstance(cls, ast.ClassDef)
            for node in cls.body
            if isinstance(node, ast.AnnAssign) and node.value is not None
        }
        for node in ast.walk(tree):
            loaded = isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
            if loaded and node.id in constants and id(node) not in defaults:
                uses.append(f"{path.relative_to(ROOT)}:{node.lineno} reads {node.id}")
    assert not uses, "read these through Tuning (store._tuning) instead:\n" + "\n".join(uses)


@pytest.mark.slow
def test_the_evaluations_refuse_a_knob_that_tunes_nothing():
    for module in ("evals.replay", "evals.resume"):
        proc = subprocess.run(
            [sys.executable, "-m", module, "--fast", "--set", "SUMMARY_WEIGT=3"],
            capture_output=True,
            text=True,
            env=server_env(),
            cwd=ROOT,
            timeout=60,
        )
        assert proc.returncode == 2 and "no knob named 'SUMMARY_WEIGT'" in proc.stderr, (module, proc.stderr)


def test_a_store_without_tuning_uses_the_defaults_next_to_the_code():
    from compactor.search import scoring, topk

    t = Tuning()
    assert (t.bm25.k1, t.bm25.summary, t.rank.recency_prior) == (
        topk.BM25_K1,
        topk.SUMMARY_WEIGHT,
        scoring.RECENCY_PRIOR,
    )
    assert Path(sys.modules["compactor.store.tuning"].__file__ or "").name == "tuning.py"
