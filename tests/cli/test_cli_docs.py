"""docs/cli.md is generated from the argparse parsers (python -m compactor.cli.docs) and
kept in step with them."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tests.test_readme import parser_commands

DOC = ROOT / "docs" / "cli.md"


@pytest.mark.slow
def test_docs_cli_md_is_what_the_generator_writes_from_the_parsers():
    generated_with = DOC.read_text(encoding="utf-8").split("Python ", 1)[1].split(".", 2)
    run = subprocess.run(
        [sys.executable, "-m", "compactor.cli.docs", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    if (generated_with[0], generated_with[1]) == (str(sys.version_info.major), str(sys.version_info.minor)):
        assert run.returncode == 0, run.stderr
        assert run.stdout == ""
    else:
        # argparse lays help out differently across Python versions; the content must still be there.
        assert run.returncode in (0, 1)


def test_docs_cli_md_documents_every_command_and_option():
    doc = DOC.read_text(encoding="utf-8")
    for command in parser_commands():
        assert f"## `compactor {command}`" in doc, command
    for flag in ("--state-dir", "--json", "--dry-run", "--repair", "--max-archive-tokens", "--force", "--yes"):
        assert flag in doc, flag


def test_docs_cli_md_check_fails_on_a_stale_file(tmp_path, monkeypatch):
    from compactor.cli import docs

    stale = tmp_path / "cli.md"
    stale.write_text("old\n", encoding="utf-8")
    monkeypatch.setattr(docs, "DOC", stale)
    assert docs.main(["--check"]) == 1
    assert docs.main([]) == 0
    assert docs.main(["--check"]) == 0
