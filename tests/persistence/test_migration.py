"""State dirs written by earlier schema versions load with today's code, exactly.

tests/fixtures/state-v1 was written by the real server at schema version 1 (regenerate only
with tests/fixtures/make_state_v1.py run by a version that writes schema 1). It holds a snapshot
and a non-empty journal after it, summary nodes, a forgotten child, pins and configured
settings; state-v1.expected.json holds what that server reported for each item and setting.

Every future schema change must:
1. bump constants.SCHEMA_VERSION and teach the loader to migrate the previous version;
2. keep every existing fixture and its test here passing (users still have those dirs);
3. add tests/fixtures/make_state_vN.py, its state-vN fixture (written by the new version) and a
   test like test_state_v1_loads_exactly for it.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from mcp import Client

from compactor import doctor
from compactor.mcp import build_server
from compactor.store import Store

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
STATE_V1 = FIXTURES / "state-v1"
EXPECTED_V1 = FIXTURES / "state-v1.expected.json"


def copy_state(src: Path, dst: Path) -> Path:
    """Copy a fixture as a user's dir would be: git keeps neither 0700 nor 0600."""
    shutil.copytree(src, dst)
    os.chmod(dst, 0o700)
    for f in dst.iterdir():
        os.chmod(f, 0o600)
    return dst


@pytest.fixture
def expected() -> dict[str, Any]:
    return json.loads(EXPECTED_V1.read_text())  # type: ignore[no-any-return]


def test_fixture_holds_a_v1_snapshot_and_a_journal_after_it():
    snap = orjson.loads((STATE_V1 / "snapshot.json").read_bytes())
    lines = (STATE_V1 / "journal.jsonl").read_bytes().splitlines()
    header = orjson.loads(lines[0])
    assert snap["schema"] == 1
    assert header["gen"] == snap["gen"]
    assert len(lines) > 1 and all("ops" in orjson.loads(x) for x in lines[1:])
    kinds = {op["op"] for x in lines[1:] for op in orjson.loads(x)["ops"]}
    assert {"put", "patch", "config"} <= kinds
    assert any(r["depth"] for r in snap["items"]) and any(r["gone_children"] for r in snap["items"])


def test_state_v1_loads_exactly(tmp_path: Path, expected: dict[str, Any]):
    d = copy_state(STATE_V1, tmp_path / "state")
    report = doctor.check(d)
    assert report.problems == [], doctor.render(report)
    s = Store(state_dir=d)
    try:
        got = {it.id: it for it in s.iter_items()}
        assert set(got) == set(expected["items"])
        for item_id, want in expected["items"].items():
            record = got[item_id].to_record()
            for key, value in want.items():
                if key == "gone":
                    assert list(record["gone_children"]) == value, item_id
                else:
                    have = list(record[key]) if isinstance(record[key], tuple) else record[key]
                    assert have == value, (item_id, key)
        assert {k: getattr(s.settings, k) for k in expected["settings"]} == expected["settings"]
        assert s.tokens_used == expected["tokens_used"]
    finally:
        s.close()


def test_state_v1_serves_and_takes_new_writes(tmp_path: Path, expected: dict[str, Any]):
    d = copy_state(STATE_V1, tmp_path / "state")
    decision = next(i for i, it in expected["items"].items() if it["summary"] == "chose PostgreSQL")
    node = next(i for i, it in expected["items"].items() if it.get("gone"))

    async def go(store: Store) -> str:
        async with Client(build_server(store), mode="legacy") as c:
            for item_id in (decision, node):
                res = await c.call_tool("get", {"id": item_id})
                assert not res.is_error
                assert res.structured_content is not None
                want = {k: v for k, v in expected["items"][item_id].items() if k != "gone"}
                assert {k: res.structured_content[k] for k in want} == want
            hits = await c.call_tool("query", {"query": "PostgreSQL transactional", "include_archived": True})
            assert hits.structured_content is not None
            assert hits.structured_content["items"][0]["id"] == decision
            tree = await c.call_tool("tree", {})
            assert not tree.is_error
            new = await c.call_tool("store", {"content": "written by today's code into a v1 dir"})
            assert new.structured_content is not None
            return str(new.structured_content["id"])

    s = Store(state_dir=d)
    try:
        new_id = anyio.run(go, s)
    finally:
        s.close()
    again = Store(state_dir=d)
    try:
        assert again.get(new_id).content == "written by today's code into a v1 dir"
        assert set(expected["items"]) | {new_id} == set(again.ids())
        assert again.get(decision).content == expected["items"][decision]["content"]
    finally:
        again.close()
    assert doctor.check(d).healthy
