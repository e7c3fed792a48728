"""compose.yaml, tested without a container engine: its command lines run directly. The .env
line from its header makes both secrets privately; the compactor service's command, with the
environment compose would give it, serves a real PostgreSQL over HTTP and wants the token; the
postgres service's healthcheck command answers for a running server."""

from __future__ import annotations

import re
import shutil
import stat
import subprocess
from pathlib import Path

import httpx2
import pytest
import yaml

from tests.conftest import ROOT, server_env
from tests.support.pg_cluster import PG_BIN_DIRS
from tests.system.test_http import free_port, http_server

COMPOSE = ROOT / "compose.yaml"
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
ACCEPT = {"Accept": "application/json, text/event-stream"}


def interpolate(text: str, env: dict[str, str]) -> str:
    """compose's ${VAR} and ${VAR:?message}: a missing variable is an error, as in compose."""

    def one(m: re.Match[str]) -> str:
        name = m.group(1)
        assert name in env, f"compose would stop: {name} is not set"
        return env[name]

    return re.sub(r"\$\{(\w+)(?::\?[^}]*)?\}", one, text)


def test_the_env_line_makes_both_secrets_private(tmp_path: Path):
    line = next(
        ln.lstrip("# ").strip() for ln in COMPOSE.read_text().splitlines() if "> .env" in ln and "openssl" in ln
    )
    subprocess.run(["bash", "-c", line], cwd=tmp_path, check=True)
    env = dict(ln.split("=", 1) for ln in (tmp_path / ".env").read_text().splitlines())
    assert len(env["POSTGRES_PASSWORD"]) == 32 and len(env["COMPACTOR_TOKEN"]) == 64
    assert stat.S_IMODE((tmp_path / ".env").stat().st_mode) == 0o600


@pytest.mark.slow  # a server process
def test_the_compactor_service_serves_the_database_behind_the_token(pg_cluster, tmp_path: Path):
    url = pg_cluster.new_database()
    dbname = url.rsplit("/", 1)[1]
    secrets = {"POSTGRES_PASSWORD": "pw-for-a-trust-cluster", "COMPACTOR_TOKEN": "f" * 64}
    services = yaml.safe_load(interpolate(COMPOSE.read_text(), secrets))["services"]
    svc = services["compactor"]
    assert svc["ports"] == ["127.0.0.1:8765:8765"] and "--port" in svc["command"]
    assert svc["command"][svc["command"].index("--port") + 1] == "8765"
    env = dict(svc["environment"])
    # The service's network name and port, as this machine reaches the test cluster.
    env["COMPACTOR_DATABASE_URL"] = env["COMPACTOR_DATABASE_URL"].replace(
        "@postgres:5432/compactor", f"@127.0.0.1:{pg_cluster.port}/{dbname}"
    )
    port = free_port()  # 8765 may be taken here; compose maps it inside the container
    command = [*svc["command"], "--port", str(port)]
    base = {**server_env(), **env}
    with http_server(*command[4:], env=base, argv=command[:4]) as mcp_url:
        assert httpx2.post(mcp_url, json=INIT, headers=ACCEPT).status_code == 401
        ok = httpx2.post(mcp_url, json=INIT, headers={**ACCEPT, "Authorization": f"Bearer {'f' * 64}"})
        assert ok.status_code == 200 and "compactor" in ok.text


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


def test_the_readme_lines_make_the_env_and_read_the_token_back(tmp_path: Path):
    block = (ROOT / "README.md").read_text().split("## Team memory", 1)[1].split("```bash\n", 1)[1].split("```")[0]
    env_line, up, claude = block.strip().splitlines()
    assert up == "docker compose up -d" and claude.startswith("claude mcp add --transport http compactor https://")
    subprocess.run(["bash", "-c", env_line], cwd=tmp_path, check=True)
    token = dict(ln.split("=", 1) for ln in (tmp_path / ".env").read_text().splitlines())["COMPACTOR_TOKEN"]
    header = claude.split("--header ", 1)[1]
    shown = subprocess.run(["bash", "-c", f"printf %s {header}"], cwd=tmp_path, capture_output=True, text=True)
    assert shown.stdout == f"Authorization: Bearer {token}"
