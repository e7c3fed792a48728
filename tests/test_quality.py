"""Lint and strict typing are part of the test command, so CI enforces them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)


def test_ruff_check_is_clean():
    proc = run(str(BIN / "ruff"), "check", "compactor", "tests", "bench", "evals")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_format_is_clean():
    proc = run(str(BIN / "ruff"), "format", "--check", "compactor", "tests", "bench", "evals")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_strict_is_clean():
    proc = run(sys.executable, "-m", "mypy", "--strict", "compactor")
    assert proc.returncode == 0, proc.stdout + proc.stderr
