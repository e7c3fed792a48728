"""The human commands against a PostgreSQL database (--database or COMPACTOR_DATABASE_URL):
status, export, import and doctor, through the real command line."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from compactor.store import Store
from tests.conftest import server_command, server_env

pytestmark = pytest.mark.slow  # CLI processes


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        server_command(*args), env=env or server_env(), capture_output=True, text=True, timeout=120, check=False
    )


def test_status_export_import_and_doctor_work_on_a_database(pg_url: str, tmp_path: Path):
    s = Store(state_dir=tmp_path / "state")
    ids = {s.store("team memory on PostgreSQL").item.id, s.store("the second note").item.id}
    s.close()
    exported = tmp_path / "all.json"
    assert cli("export", "--state-dir", str(tmp_path / "state"), "-o", str(exported)).returncode == 0

    done = cli("import", str(exported), "--database", pg_url)
    assert done.returncode == 0, done.stderr
    assert "Imported 2 items" in done.stdout

    done = cli("status", "--database", pg_url, "--json")
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    assert status["active_items"] == 2 and status["state_dir"].startswith("postgresql://compactor@")

    again = tmp_path / "again.json"
    done = cli("export", "--database", pg_url, "-o", str(again))
    assert done.returncode == 0, done.stderr
    assert {rec["id"] for rec in json.loads(again.read_text())["items"]} == ids

    env = {**server_env(), "COMPACTOR_DATABASE_URL": pg_url}
    done = cli("doctor", "--json", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["healthy"] and report["facts"]["items"]["total"] == 2
    assert {"database", "load", "index", "lineage"} <= set(report["checks"])


def test_doctor_on_a_database_compactor_never_used_creates_nothing(pg_url: str):
    done = cli("doctor", "--database", pg_url)
    assert done.returncode == 0, done.stderr
    assert "empty database" in done.stdout
    import psycopg

    with psycopg.connect(pg_url) as conn:
        row = conn.execute("SELECT to_regclass('compactor_schema')").fetchone()
    assert row == (None,)


_NO_PSYCOPG = '''
import sys


class _NoPsycopg:
    """Makes psycopg unimportable, as on an install without the postgres extra."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"psycopg", "psycopg_binary", "psycopg_c"}:
            raise ImportError(f"No module named {name!r}")
        return None


sys.meta_path.insert(0, _NoPsycopg())
'''


@pytest.mark.parametrize("argv", [("status",), ("list",), ("export",), ()], ids=["status", "list", "export", "serve"])
def test_database_without_the_driver_is_one_line_naming_the_extra(tmp_path: Path, argv: tuple[str, ...]):
    """Issue 38 point 10: `display_url` imported psycopg first, so a 25-line traceback."""
    (tmp_path / "sitecustomize.py").write_text(_NO_PSYCOPG)
    env = server_env()
    env["PYTHONPATH"] = f"{tmp_path}:{env['PYTHONPATH']}"
    done = subprocess.run(
        server_command(*argv, "--database", "postgresql://app:pw@127.0.0.1:1/db"),
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert 'pip install "compactor[postgres]"' in done.stderr


@pytest.mark.parametrize("argv", [("status",), ("doctor",), ()], ids=["status", "doctor", "serve"])
def test_a_malformed_database_url_never_echoes_its_password(argv: tuple[str, ...]):
    """libpq quotes a bad percent-escape back: 'invalid percent-encoded token: "Sup3rSecretPw%zz"'."""
    done = subprocess.run(
        server_command(*argv, "--database", "postgresql://app:Sup3rSecretPw%zz@127.0.0.1:1/db"),
        env=server_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "Sup3rSecretPw" not in done.stdout + done.stderr
    assert "127.0.0.1" in done.stdout + done.stderr  # it still says which database
