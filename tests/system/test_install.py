"""The README's install block, run as a new user would: in a clone of this checkout, with a fresh
HOME and a PATH with nothing of ours on it. Its lines up to the "new shell" comment run in one
shell; the rest in a new interactive shell, which finds `compactor` only if the first part made
it reachable. pipx comes from a venv of its own when the machine has none."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"


def install_block() -> tuple[str, str]:
    """The block after the install marker, split at its "new shell" comment."""
    after = README.split("<!-- install:", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    first, _, then = after.partition("# open a new shell")
    assert then, "the install block says when to open a new shell"
    return first, then.split("\n", 1)[1]


def pipx_dir(tmp_path: Path) -> Path:
    """A directory holding `pipx`: the machine's, or a venv's made for this test."""
    found = shutil.which("pipx")
    if found:
        return Path(found).parent
    venv = tmp_path / "pipx-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "pipx"], check=True, timeout=300)
    return venv / "bin"


@pytest.mark.slow  # pipx builds compactor and installs its dependencies into a venv
def test_the_readme_install_block_works_in_a_fresh_home(tmp_path: Path):
    first, then = install_block()
    assert "REPOSITORY-URL" not in first + then
    clone = tmp_path / "clone"
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60
    ).stdout.split(b"\0")
    for name in filter(None, (t.decode() for t in tracked)):
        if (ROOT / name).is_file():  # a file deleted in this checkout and not yet committed is not in it
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, clone / name)
    home = tmp_path / "home"
    home.mkdir()
    # The machine's pip settings (where wheels are) and nothing else of this environment.
    env = {k: v for k, v in os.environ.items() if k.startswith("PIP_") or k in ("LANG", "LC_ALL", "TMPDIR")}
    env["HOME"] = str(home)

    done = subprocess.run(
        ["bash", "-c", first],
        cwd=clone,
        env={**env, "PATH": f"{pipx_dir(tmp_path)}:{SYSTEM_PATH}"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]

    # A new shell: interactive, so it reads the ~/.bashrc pipx ensurepath wrote; no pipx on PATH.
    shell = subprocess.run(
        ["bash", "-i", "-c", then],
        cwd=home,
        env={**env, "PATH": SYSTEM_PATH},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shell.returncode == 0, shell.stdout + shell.stderr
    assert "0 active (0 pinned) · 0 archived" in shell.stdout
    assert f"{home}/.local/share/compactor" in shell.stdout
    assert (home / ".local" / "bin" / "compactor").exists()
