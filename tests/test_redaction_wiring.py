"""Credentials are replaced before anything is indexed or written; the reply says so."""

from __future__ import annotations

from pathlib import Path

from compactor.store import Store, StoreInput
from tests.stdio_client import StdioServer

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


def test_stdio_reply_reports_redaction_and_flag_turns_it_off(state_dir: Path):
    with StdioServer("--state-dir", str(state_dir)) as srv:
        result = srv.call("store", content=f"creds {AWS}")
        assert "Redacted before saving: 1 aws_access_key" in result["content"][0]["text"]
        assert result["structuredContent"]["redacted"] == [{"kind": "aws_access_key", "count": 1}]
    with StdioServer("--no-redact") as srv:
        item_id = srv.ok("store", content=f"creds {AWS}")["id"]
        assert AWS in srv.ok("get", id=item_id)["content"]
