"""Lint and strict typing are part of the test command, so CI enforces them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.slow
def test_ruff_check_is_clean():
    proc = run(str(BIN / "ruff"), "check", "compactor", "tests", "bench", "evals")
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow
def test_ruff_format_is_clean():
    proc = run(str(BIN / "ruff"), "format", "--check", "compactor", "tests", "bench", "evals")
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow
def test_mypy_strict_is_clean():
    proc = run(sys.executable, "-m", "mypy", "--strict", "compactor")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_license_is_an_spdx_expression_that_the_required_setuptools_reads():
    """A TOML table `license = { text = ... }` is deprecated by setuptools (removal dated February
    2027); the SPDX string form needs setuptools 77 (PEP 639), so the build requires it."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert project["project"]["license"] == "MIT"
    assert "setuptools>=77" in project["build-system"]["requires"]
    assert not any(c.startswith("License ::") for c in project["project"].get("classifiers", []))
