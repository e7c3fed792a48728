"""The Docker image's entrypoint exits on stdin EOF: run the exact command the Dockerfile's
ENTRYPOINT (and CMD) name, with the `compactor` console script of the environment running the
tests, close its stdin, and check it exits 0 promptly."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, server_env
from tests.support.stdio_client import StdioServer


def instruction(dockerfile: str, name: str) -> list[str] | None:
    """The last ENTRYPOINT or CMD, in exec form (a JSON array) or shell form."""
    found: list[str] | None = None
    logical = dockerfile.replace("\\\n", " ")
    for line in logical.splitlines():
        stripped = line.strip()
        if stripped.upper().startswith(name + " "):
            value = stripped[len(name) :].strip()
            if value.startswith("["):
                parsed = json.loads(value)
                assert isinstance(parsed, list) and all(isinstance(p, str) for p in parsed), value
                found = parsed
            else:
                found = ["/bin/sh", "-c", value]
    return found


@pytest.mark.slow
def test_dockerfile_entrypoint_exits_on_stdin_eof(tmp_path):
    dockerfile = (ROOT / "Dockerfile").read_text()
    entrypoint = instruction(dockerfile, "ENTRYPOINT")
    cmd = instruction(dockerfile, "CMD") or []
    assert entrypoint, "the Dockerfile has no ENTRYPOINT"
    assert entrypoint[0] == "compactor", f"expected the compactor console script, got {entrypoint}"
    script = Path(sys.executable).parent / "compactor"
    assert script.exists(), f"{script} is missing: install the project (`pip install -e .`) to get the console script"

    argv = [str(script), *entrypoint[1:], *cmd, "--state-dir", str(tmp_path / "data")]
    with open(tmp_path / "stderr", "w+b") as err:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=server_env())
        started = time.monotonic()
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.close()
        try:
            code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise AssertionError(f"`{shlex.join(argv)}` did not exit within 60 s of stdin closing") from None
        finally:
            out = proc.stdout.read()
            proc.stdout.close()
        err.seek(0)
        assert code == 0, err.read().decode(errors="replace")
    assert out == b""  # nothing on the protocol channel without a request
    assert time.monotonic() - started < 60


def test_instruction_parsing_handles_both_forms():
    text = 'FROM x\nENTRYPOINT ["compactor", "--log-level", "INFO"]\nCMD --state-dir /data \\\n  --budget 5000\n'
    assert instruction(text, "ENTRYPOINT") == ["compactor", "--log-level", "INFO"]
    assert instruction(text, "CMD") == ["/bin/sh", "-c", "--state-dir /data    --budget 5000"]


def test_base_image_is_pinned_by_digest():
    dockerfile = (ROOT / "Dockerfile").read_text()
    [base] = [line.split()[1] for line in dockerfile.splitlines() if line.startswith("FROM ")]
    assert re.fullmatch(r"python:3\.11\.\d+-slim@sha256:[0-9a-f]{64}", base), base
    assert "To update" in dockerfile and "imagetools inspect" in dockerfile


def test_the_dependencies_are_pinned_to_what_the_tests_run_on():
    """constraints.txt holds every runtime dependency at this environment's version, and the
    Dockerfile's pip install uses it."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import write_constraints
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    assert (ROOT / "constraints.txt").read_text() == write_constraints.render(), (
        "constraints.txt is stale: run python scripts/write_constraints.py"
    )
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "constraints.txt" in next(ln for ln in dockerfile.splitlines() if ln.startswith("COPY pyproject.toml"))
    assert 'RUN PIP_CONSTRAINT=constraints.txt pip install ".${EXTRAS}"' in dockerfile


@pytest.mark.slow  # pip resolves against the index
def test_the_dockerfile_pip_line_resolves_to_exactly_the_pins(tmp_path):
    """The RUN line as the image runs it (the files the Dockerfile copies, EXTRAS="[postgres]"),
    resolved by pip without installing: every package it would install is pinned, at its pin."""
    for name in ("pyproject.toml", "README.md", "constraints.txt"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "compactor", tmp_path / "compactor", ignore=shutil.ignore_patterns("__pycache__"))
    line = next(ln for ln in (ROOT / "Dockerfile").read_text().splitlines() if "pip install" in ln)
    command = line.removeprefix("RUN ").split(" \\", 1)[0].replace("${EXTRAS}", "[postgres]")
    report = tmp_path / "report.json"
    done = subprocess.run(
        ["bash", "-c", f"{command} --dry-run --ignore-installed --quiet --report {report}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=280,
        env={**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    pins = dict(ln.split("==") for ln in (tmp_path / "constraints.txt").read_text().splitlines() if "==" in ln)
    from packaging.utils import canonicalize_name

    installs = json.loads(report.read_text())["install"]
    resolved = {canonicalize_name(i["metadata"]["name"]): i["metadata"]["version"] for i in installs}
    assert resolved.pop("compactor")
    assert resolved == pins


@pytest.mark.slow
def test_a_rootless_client_of_the_image_lands_in_its_default_scope(tmp_path):
    """The image's working directory is /app, no project of anyone's: its ENV names the scope of a
    client that sends no roots."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    image_env = dict(
        ln.split(None, 1)[1].split("=", 1) for ln in dockerfile.splitlines() if ln.startswith("ENV COMPACTOR_")
    )
    assert image_env == {"COMPACTOR_DEFAULT_SCOPE": "default"}
    entrypoint = instruction(dockerfile, "ENTRYPOINT") or []
    app = tmp_path / "app"  # stands for /app
    app.mkdir()
    script = Path(sys.executable).parent / "compactor"
    proc = subprocess.Popen(
        [str(script), *entrypoint[1:], "--state-dir", str(tmp_path / "data")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**server_env(), **image_env},
        cwd=app,
    )
    with StdioServer(process=proc) as srv:
        assert srv.ok("status")["scope"] == "default"


@pytest.mark.slow
def test_a_bind_mount_the_image_user_cannot_write_stops_with_what_to_do(request):
    """`-v $PWD/data:/data` gives the container a directory owned by the host user; the image
    runs as uid 10001. The entrypoint must say to pass --user, not fail on the first write."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    entrypoint = instruction(dockerfile, "ENTRYPOINT") or []
    script = Path(sys.executable).parent / "compactor"
    host = Path(tempfile.mkdtemp(prefix="compactor-bind-"))  # /tmp: any uid can reach it
    request.addfinalizer(lambda: shutil.rmtree(host, ignore_errors=True))
    host.chmod(0o755)
    data = host / "data"
    data.mkdir(mode=0o755)
    argv = [str(script), *entrypoint[1:], "--state-dir", str(data)]
    if os.getuid() == 0:
        # As in the container: the directory belongs to another uid than the process's. Root
        # keeps its uid (so it can still run a checkout in a private directory) but loses every
        # capability, so the owner's 0755 stops its writes as it stops uid 10001's.
        os.chown(data, 10001, 10001)
        argv = ["setpriv", "--bounding-set=-all", "--inh-caps=-all", *argv]
    else:
        data.chmod(0o555)
    proc = subprocess.run(argv, input=b"", capture_output=True, env=server_env(), timeout=60)
    err = proc.stderr.decode()
    assert proc.returncode == 1, err
    assert err.startswith(f"compactor: cannot start: --state-dir {data} is owned by uid"), err
    assert "--user $(id -u):$(id -g)" in err
    assert "Traceback" not in err and proc.stdout == b""
    assert list(data.iterdir()) == []
