"""The first minutes with the CLI (issue 17, point 4): a new or empty state dir is an empty
memory, a state dir that is a file says so, every error has one shape, and no log-formatted
line reaches a person. All through the real command line, in a subprocess."""

from __future__ import annotations

import re
import subprocess

import pytest

from compactor.store import Store
from tests.conftest import server_command, server_env

ONE_SHAPE = re.compile(r"compactor [a-z][a-z -]*: [^\n]+\. [A-Z`][^\n]+[.?!]")
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d[ T]\d\d:\d\d|\b(DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.]+:", re.M)


def cli(*argv: str, env: dict[str, str] | None = None, stdin: str = "") -> subprocess.CompletedProcess[str]:
    run_env = server_env() if env is None else env
    run_env.pop("COMPACTOR_STATE_DIR", None)
    return subprocess.run(server_command(*argv), input=stdin, capture_output=True, text=True, env=run_env, timeout=120)


@pytest.mark.slow
def test_status_on_a_new_or_missing_state_dir_is_an_empty_memory(tmp_path):
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    for path in (fresh, tmp_path / "not-yet"):
        res = cli("status", "--state-dir", str(path))
        assert res.returncode == 0, res.stderr
        assert "0 active (0 pinned) · 0 archived" in res.stdout and "nothing stored yet" in res.stdout
        assert res.stderr == ""
        listed = cli("list", "--state-dir", str(path))
        assert listed.returncode == 0 and "No active items" in listed.stdout
    assert not (tmp_path / "not-yet").exists()  # reading never creates a state dir
    assert list(fresh.iterdir()) == []


@pytest.mark.slow
def test_doctor_on_a_fresh_mkdir_is_healthy_or_at_most_warns(tmp_path):
    fresh = tmp_path / "fresh"
    fresh.mkdir(mode=0o755)
    fresh.chmod(0o755)
    res = cli("doctor", "--state-dir", str(fresh))
    assert res.returncode == 0, res.stdout
    assert "ERROR" not in res.stdout and "Healthy" in res.stdout
    assert list(fresh.iterdir()) == []


@pytest.mark.slow
def test_a_state_dir_that_is_a_file_says_so(tmp_path):
    afile = tmp_path / "notes.txt"
    afile.write_text("hello")
    memory = tmp_path / "MEMORY.md"
    memory.write_text("- the user prefers tabs\n")
    for argv in (("status",), ("import", str(memory)), ("hook", "pre-compact")):
        res = cli(*argv, "--state-dir", str(afile), stdin="{}")
        assert res.returncode == 2, (argv, res.stderr)
        assert f"--state-dir {afile} is a file, not a directory. Pass a directory" in res.stderr
        assert "File exists" not in res.stderr
    server = cli("--state-dir", str(afile))
    assert server.returncode == 1
    assert server.stderr.startswith(f"compactor: cannot start: --state-dir {afile} is a file, not a directory.")
    assert afile.read_text() == "hello"


@pytest.mark.slow
def test_every_error_has_one_shape(tmp_path):
    state = tmp_path / "state"
    s = Store(state_dir=state)
    s.store("one item so the dir has state")
    s.close()
    d = str(state)
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{not json")
    cases = [
        ("status",),  # no state dir given
        ("show", "nosuchid", "--state-dir", d),
        ("pin", "nosuchid", "--state-dir", d),
        ("forget", "nosuchid", "--state-dir", d),  # stdin is not a terminal
        ("import", str(tmp_path / "missing.json"), "--state-dir", d),
        ("import", str(bad_json), "--state-dir", d),
        ("export", "--format", "memory-md", "--state-dir", d),
        ("status", "--state-dir", str(tmp_path / "x" / "y"), "--state-dir", str(bad_json / "sub")),
    ]
    for argv in cases:
        res = cli(*argv)
        assert res.returncode in (1, 2), (argv, res.stdout)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and ONE_SHAPE.fullmatch(lines[0]), (argv, res.stderr)
        assert lines[0].startswith(f"compactor {argv[0]}: "), (argv, res.stderr)


@pytest.mark.slow
def test_a_warning_reaches_the_cli_user_as_a_message_not_a_log_line(tmp_path):
    """Loading a journal with a torn last line (a crash mid-write) warns; the CLI says so as
    `compactor status: ...`, not as `2026-... WARNING compactor.persistence.statedir: ...`."""
    state = tmp_path / "state"
    s = Store(state_dir=state)
    s.store("the deploy key rotates every 30 days")
    s.close()
    with (state / "journal.jsonl").open("ab") as f:
        f.write(b'{"partial')
    res = cli("status", "--state-dir", str(state))
    assert res.returncode == 0, res.stderr
    assert not LOG_LINE.search(res.stderr) and not LOG_LINE.search(res.stdout), res.stderr
    [line] = res.stderr.splitlines()
    assert line.startswith("compactor status: ") and "torn last line" in line


@pytest.mark.slow
@pytest.mark.parametrize("share", [True, False])
def test_the_server_typed_at_a_terminal_says_what_it_is_and_ctrl_d_stops_it(tmp_path, share):
    """Run by hand, `compactor` waited on stdin without a word, looking hung. With stdin a
    terminal it says what it is on stderr (stdout stays the protocol's); a client's pipe gets
    no such line."""
    import os
    import pty
    import time

    args = ["--state-dir", str(tmp_path / "state"), *([] if share else ["--no-share"])]
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen(
            server_command(*args), stdin=follower, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=server_env()
        )
        time.sleep(1.5)
        os.write(leader, b"\x04")  # Ctrl-D at the start of a line: end of input
        out, err = proc.communicate(timeout=30)
    finally:
        os.close(leader)
        os.close(follower)
    assert proc.returncode == 0
    assert out == b""
    assert err.decode().startswith("compactor: serving MCP on stdio, for an MCP client to start and talk to")
    piped = subprocess.run(server_command(*args), input=b"", capture_output=True, env=server_env(), timeout=30)
    assert piped.returncode == 0 and b"serving MCP on stdio" not in piped.stderr


@pytest.mark.slow
def test_an_empty_state_dir_or_database_is_refused_and_the_working_directory_left_alone(tmp_path):
    """`--state-dir "$DIR"` with DIR unset made the working directory (a project, say) the
    state dir: the journal, snapshot, lock and log were written into it, and its mode set to
    0700. Refused by the server, the commands and the doctor alike; --database "" too."""
    project = tmp_path / "project"
    project.mkdir()
    project.chmod(0o755)
    runs = [
        ["--state-dir", ""],
        ["status", "--state-dir", ""],
        ["import", str(tmp_path / "x.json"), "--state-dir", ""],
        ["doctor", "--state-dir", ""],
    ]
    for args in runs:
        done = subprocess.run(
            server_command(*args), input="", capture_output=True, text=True, env=server_env(), cwd=project, timeout=60
        )
        assert done.returncode == 2, (args, done.stderr[-300:])
        assert "argument --state-dir: is empty (an unset variable?)" in done.stderr
    done = subprocess.run(
        server_command("--database", ""),
        input="",
        capture_output=True,
        text=True,
        env=server_env(),
        cwd=project,
        timeout=60,
    )
    assert done.returncode == 2
    assert (
        done.stderr.strip()
        == "compactor: cannot start: --database is empty (an unset variable?); pass the database URL."
    )
    assert list(project.iterdir()) == [] and project.stat().st_mode & 0o777 == 0o755
