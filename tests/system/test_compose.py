"""compose.yaml, tested without a container engine: its command lines run directly. The set-up
line from its header makes the token file and .env privately; the compactor service's command,
with the environment compose would give it and its token secret mounted, serves a real PostgreSQL
over HTTP, wants the token and puts a rootless client in the default scope; each service's
healthcheck command answers for a running server and fails without one."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
import yaml

from tests.conftest import ROOT, server_env
from tests.support.pg_cluster import PG_BIN_DIRS
from tests.system.test_http import call, connect, free_port, http_server

COMPOSE = ROOT / "compose.yaml"
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
ACCEPT = {"Accept": "application/json, text/event-stream"}


def interpolate(text: str, env: dict[str, str]) -> str:
    """compose's ${VAR}, ${VAR:?message} and ${VAR:-default}: a missing variable without a
    default is an error, as in compose."""

    def one(m: re.Match[str]) -> str:
        name, default = m.group(1), m.group(2)
        if name in env:
            return env[name]
        assert default is not None, f"compose would stop: {name} is not set"
        return default

    return re.sub(r"\$\{(\w+)(?::\?[^}]*|:-([^}]*))?\}", one, text)


def set_up(directory: Path) -> dict[str, str]:
    """Run the set-up line of compose.yaml's header in `directory`; the .env it wrote."""
    line = next(
        ln.lstrip("# ").strip() for ln in COMPOSE.read_text().splitlines() if "> .env" in ln and "openssl" in ln
    )
    subprocess.run(["bash", "-c", line], cwd=directory, check=True)
    return dict(ln.split("=", 1) for ln in (directory / ".env").read_text().splitlines())


@pytest.mark.slow
def test_the_set_up_line_makes_the_secrets_private_and_their_owner_the_service_user(tmp_path: Path):
    env = set_up(tmp_path)
    assert set(env) == {"POSTGRES_PASSWORD", "COMPACTOR_USER"}  # the token is not in the environment
    assert len(env["POSTGRES_PASSWORD"]) == 32
    token = tmp_path / "compactor-token"
    assert re.fullmatch(r"[0-9a-f]{64}\n", token.read_text())
    for path in (tmp_path / ".env", token):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    # compose bind-mounts a file secret with its host owner and mode: only its owner reads it.
    compose = yaml.safe_load(interpolate(COMPOSE.read_text(), env))
    assert compose["secrets"]["compactor_token"] == {"file": "./compactor-token"}
    svc = compose["services"]["compactor"]
    assert svc["user"] == f"{token.stat().st_uid}:{token.stat().st_gid}" == f"{os.getuid()}:{os.getgid()}"
    assert svc["secrets"] == ["compactor_token"]
    assert "COMPACTOR_TOKEN" not in svc["environment"]


def service_command(svc: dict[str, Any], token_file: Path, port: int) -> list[str]:
    """The service's command as this machine runs it: the secret's mount point is `token_file`,
    and `port` stands for 8765, which may be taken here (compose maps it inside the container)."""
    command = [str(token_file) if a == "/run/secrets/compactor_token" else a for a in svc["command"]]
    assert str(token_file) in command, "the token is not read from its secret"
    command[command.index("--port") + 1] = str(port)
    return command


def healthcheck(svc: dict[str, Any], port: int) -> subprocess.CompletedProcess[str]:
    """The service's healthcheck command, with this environment's Python for the image's."""
    check = svc["healthcheck"]["test"]
    assert check[:2] == ["CMD", "python"]
    argv = [sys.executable, *(a.replace("8765", str(port)) for a in check[2:])]
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, env=server_env())


@pytest.mark.slow  # a server process
def test_the_compactor_service_serves_the_database_behind_the_token(pg_cluster, tmp_path: Path):
    url = pg_cluster.new_database()
    dbname = url.rsplit("/", 1)[1]
    secrets = {**set_up(tmp_path), "POSTGRES_PASSWORD": "pw-for-a-trust-cluster"}
    token = (tmp_path / "compactor-token").read_text().strip()
    services = yaml.safe_load(interpolate(COMPOSE.read_text(), secrets))["services"]
    svc = services["compactor"]
    assert svc["ports"] == ["127.0.0.1:8765:8765"] and "--port" in svc["command"]
    assert svc["command"][svc["command"].index("--port") + 1] == "8765"
    env = dict(svc["environment"])
    # The service's network name and port, as this machine reaches the test cluster.
    env["COMPACTOR_DATABASE_URL"] = env["COMPACTOR_DATABASE_URL"].replace(
        "@postgres:5432/compactor", f"@127.0.0.1:{pg_cluster.port}/{dbname}"
    )
    port = free_port()
    assert healthcheck(svc, port).returncode != 0  # nothing serves yet
    command = service_command(svc, tmp_path / "compactor-token", port)
    base = {k: v for k, v in server_env().items() if not k.startswith("COMPACTOR_")}
    with http_server(*command[4:], env={**base, **env}, argv=command[:4]) as mcp_url:
        assert httpx2.post(mcp_url, json=INIT, headers=ACCEPT).status_code == 401
        ok = httpx2.post(mcp_url, json=INIT, headers={**ACCEPT, "Authorization": f"Bearer {token}"})
        assert ok.status_code == 200 and "compactor" in ok.text
        checked = healthcheck(svc, port)
        assert checked.returncode == 0, checked.stderr

        async def rootless() -> str:
            async with connect(mcp_url, token) as c:
                return str((await call(c, "status"))["scope"])

        assert anyio.run(rootless) == env["COMPACTOR_DEFAULT_SCOPE"] == "team"


@pytest.mark.slow
def test_the_postgres_healthcheck_answers_for_a_running_server(pg_cluster):
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    check = services["postgres"]["healthcheck"]["test"]
    assert check[0] == "CMD"
    tool = next((str(d / check[1]) for d in PG_BIN_DIRS if (d / check[1]).exists()), shutil.which(check[1]))
    assert tool, f"{check[1]} is not installed"
    db = pg_cluster.new_database().rsplit("/", 1)[1]
    argv = [tool, *check[2:], "--host", "127.0.0.1", "--port", str(pg_cluster.port)]
    argv[argv.index("--dbname") + 1] = db
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.slow
def test_the_readme_lines_make_the_secrets_and_read_the_token_back(tmp_path: Path):
    block = (ROOT / "README.md").read_text().split("## Team memory", 1)[1].split("```bash\n", 1)[1].split("```")[0]
    set_up_line, up, claude = block.strip().splitlines()
    assert set_up_line in COMPOSE.read_text()  # the same line as compose.yaml's header
    assert up == "docker compose up -d" and claude.startswith("claude mcp add --transport http compactor https://")
    subprocess.run(["bash", "-c", set_up_line], cwd=tmp_path, check=True)
    token = (tmp_path / "compactor-token").read_text().strip()
    header = claude.split("--header ", 1)[1]
    shown = subprocess.run(["bash", "-c", f"printf %s {header}"], cwd=tmp_path, capture_output=True, text=True)
    assert shown.stdout == f"Authorization: Bearer {token}"
