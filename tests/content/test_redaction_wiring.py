"""Credentials are replaced before anything is indexed or written; the reply says so."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from compactor.errors import InvalidArgumentError
from compactor.models import Item
from compactor.store import Store, StoreInput
from tests.conftest import make_item
from tests.support.stdio_client import StdioServer

AWS = "AKIAIOSFODNN7EXAMPLQ"
GH = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"


def test_store_redacts_before_indexing_and_writing(state_dir: Path):
    s = Store(state_dir=state_dir)
    res = s.store(f"deploy with aws key {AWS} then push", summary=f"token {GH}")
    assert AWS not in res.item.content and "[REDACTED:aws_access_key]" in res.item.content
    assert res.item.summary is not None and GH not in res.item.summary
    assert res.redacted == {"aws_access_key": 1, "github_token": 1}
    assert s.query(AWS) == []
    s.snapshot()
    s.store("after")
    for f in state_dir.iterdir():
        data = f.read_bytes()
        assert AWS.encode() not in data and GH.encode() not in data, f


def test_bulk_store_and_update_redact(store: Store):
    res = store.bulk_store([StoreInput(f"a {AWS}"), StoreInput("clean"), StoreInput(f"b {GH}")])
    assert res.redacted == {"aws_access_key": 1, "github_token": 1}
    item = store.store("plain text").item
    upd = store.update(item.id, content=f"now with {AWS}")
    assert AWS not in upd.item.content
    assert any("Redacted" in w for w in upd.warnings)


def test_no_redact_keeps_text(store: Store):
    s = Store(redact_secrets=False)
    res = s.store(f"key {AWS}")
    assert AWS in res.item.content and res.redacted == {}


@pytest.mark.slow
def test_stdio_reply_reports_redaction_and_flag_turns_it_off(state_dir: Path):
    with StdioServer("--state-dir", str(state_dir)) as srv:
        result = srv.call("store", content=f"creds {AWS}")
        assert "Redacted before saving: 1 aws_access_key" in result["content"][0]["text"]
        assert result["structuredContent"]["redacted"] == [{"kind": "aws_access_key", "count": 1}]
    with StdioServer("--no-redact") as srv:
        item_id = srv.ok("store", content=f"creds {AWS}")["id"]
        assert AWS in srv.ok("get", id=item_id)["content"]


# --- tags and scope (issue 12) -------------------------------------------------------------------

GL = "glpat-" + "Xq7Lm2Pz9Rk4Tb8Wn3Yc"


def _on_disk(state_dir: Path) -> bytes:
    return b"".join(f.read_bytes() for f in state_dir.rglob("*") if f.is_file())


def test_tags_holding_a_credential_are_dropped_and_counted(state_dir: Path):
    s = Store(state_dir=state_dir)
    res = s.store("deploy notes", tags=["deploy", GH, "AKIA" + "IOSFODNN7EXAMPLQ"])
    assert res.item.tags[0] == "deploy"
    assert not [t for t in res.item.tags if "ghp_" in t or "akia" in t]
    assert res.redacted == {"github_token": 1, "aws_access_key": 1}
    upd = s.update(res.item.id, tags=f"ops,{GL}")
    assert "ops" in upd.item.tags and not [t for t in upd.item.tags if "glpat" in t]
    assert any("1 gitlab_token" in w for w in upd.warnings)
    s.snapshot()
    s.close()
    data = _on_disk(state_dir).lower()
    assert GH.lower().encode() not in data and GL.lower().encode() not in data


def test_scope_holding_a_credential_is_refused(store: Store):
    with pytest.raises(InvalidArgumentError, match="credential"):
        store.store("x", scope=f"proj-{GH}")
    assert store.store("x", scope="/home/me/proj").item.scope == "/home/me/proj"


def _words(seed: int, n: int = 60) -> str:
    rng = random.Random(seed)
    return " ".join(f"w{rng.randrange(1_000_000)}" for _ in range(n))


def test_forget_takes_back_the_tags_a_merged_duplicate_gave(state_dir: Path):
    s = Store(state_dir=state_dir)
    base = _words(7)
    keep = s.store(base, tags="mine,shared", importance=7).item
    dup = s.store(base + " extra", tags="shared,leaky-tag,codename-orca", importance=3).item
    assert s.compact(target_usage=1.0).deduplicated == [(dup.id, keep.id)]
    survivor = s.get(keep.id)
    assert {"leaky-tag", "codename-orca"} <= set(survivor.tags)
    assert set(survivor.tags_from) == {("leaky-tag", dup.id), ("codename-orca", dup.id)}

    s.forget(dup.id)
    survivor = s.get(keep.id)
    assert survivor.tags[:2] == ("mine", "shared")  # its own, including the one both had
    assert "leaky-tag" not in survivor.tags and "codename-orca" not in survivor.tags
    assert survivor.tags_from == ()
    assert s.query(tags=["codename-orca"]) == []
    s.close()
    assert b"codename-orca" not in _on_disk(state_dir)
    reopened = Store(state_dir=state_dir)
    assert reopened.get(keep.id).tags == survivor.tags


def test_merged_tags_follow_a_chain_and_replay_from_the_journal(state_dir: Path):
    s = Store(state_dir=state_dir)
    base = _words(9)
    a = s.store(base + " a1", tags="from-a", importance=2).item
    b = s.store(base + " b1", tags="from-b", importance=5).item
    assert s.compact(target_usage=1.0).deduplicated == [(a.id, b.id)]
    c = s.store(base + " c1", tags="from-c", importance=9).item
    assert s.compact(target_usage=1.0).deduplicated == [(b.id, c.id)]
    tags_from = set(s.get(c.id).tags_from)
    assert tags_from == {("from-a", a.id), ("from-b", b.id)}
    s.close()  # no snapshot written since: the merges come back from the journal
    replayed = Store(state_dir=state_dir)
    assert set(replayed.get(c.id).tags_from) == tags_from
    replayed.forget(a.id)
    assert "from-a" not in replayed.get(c.id).tags and "from-b" in replayed.get(c.id).tags
    assert "from-a" not in replayed.get(b.id).tags


def test_tags_from_round_trips_and_old_records_load():
    item = make_item(tags=("a", "b"), tags_from=(("b", "x1"),))
    record = json.loads(json.dumps(item.to_record()))
    assert Item.from_record(record) == item
    del record["tags_from"]  # a snapshot written before the field existed
    assert Item.from_record(record).tags_from == ()
