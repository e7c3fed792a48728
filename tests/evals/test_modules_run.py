"""Every evaluation still runs as a program, on the corpus slice kept in the repository (the real
corpus need not be there): `python -m evals.NAME` in its smallest mode, and each prints its figures."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import CORPUS_SLICE, ROOT, server_env

SLICE = str(CORPUS_SLICE)


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**server_env(), "COMPACTOR_CORPUS": SLICE}
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "printed"),
    [
        (("evals.replay", "--fast", "--half", "all", "--limit-trajs", "2"), "2 trajectories"),
        (
            (
                "evals.replay",
                "--fast",
                "--half",
                "all",
                "--limit-trajs",
                "2",
                "--derivation",
                "first",
                "--bare-lookups",
            ),
            "file_reread strict",
        ),
        (("evals.replay", "--fast", "--half", "all", "--limit-trajs", "2", "--ask", "question"), "2 trajectories"),
        (("evals.resume", "--fast", "--half", "all", "--limit-trajs", "2", "--cuts", "60"), "60%: recall"),
        (("evals.other_words", "--half", "all"), "exact MRR"),
        (("evals.questions", "--half", "all"), "reworded recall@5"),
        (("evals.questions", "--half", "all", "--textbook"), "(textbook BM25): refers back recall@5"),
        (("evals.questions", "--half", "all", "--as-written", "--budget", "4000"), "reworded recall@5"),
        (("evals.conversations", "--half", "all"), "(compactor, 8 conversations): single recall@5"),
        (("evals.conversations", "--half", "test", "--baseline", "textbook", "--misses", "1"), "want s"),
        (("evals.redaction", SLICE), "credential shapes:"),
        (("evals.redact_corpus", SLICE), "events redacted"),
        (("evals.classify_corpus", SLICE), "detect_type"),
    ],
    ids=lambda v: v[0] if isinstance(v, tuple) else None,
)
def test_each_evaluation_runs_on_the_corpus_slice(args: tuple[str, ...], printed: str) -> None:
    done = run(*args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert printed in done.stdout, done.stdout


@pytest.mark.slow
@pytest.mark.parametrize("name", ["revisits", "revisits2"])
def test_each_revisit_derivation_writes_its_queries(tmp_path: Path, name: str) -> None:
    out = tmp_path / f"{name}.jsonl"
    done = run(f"evals.{name}", "--corpus", SLICE, "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    assert out.read_text(encoding="utf-8").count("\n") > 100  # the slice holds ~190 revisits by either


def test_fast_replay_and_full_replay_share_one_parser() -> None:
    from evals.replay import GENEROUS_BUDGET, TIGHT_BUDGET, _chosen, parse_args

    fast = parse_args(["--fast", "--budgets", "tight", "--set", "VIEW_PATH_LIFT=1.5"])
    assert (fast.fast, fast.budgets, fast.set) == (True, "tight", ["VIEW_PATH_LIFT=1.5"])
    assert _chosen(fast) == ({"tight": TIGHT_BUDGET}, ["first", "second"])
    both = parse_args(["--derivation", "second"])
    assert _chosen(both) == ({"generous": GENEROUS_BUDGET, "tight": TIGHT_BUDGET}, ["second"])
    with pytest.raises(SystemExit):
        parse_args(["--set", "VIEW_PATH_LIFT=1.5"])  # overrides this process's constants: --fast only
