"""Text in any script is found by any word of it.

Written without spaces, a Chinese, Japanese, Korean or Thai sentence was one index term, so a
query for a word inside it ("连接池" in "数据库连接池配置错误") found nothing; and a Hindi or
Bengali word broke at each vowel sign, most often into nothing ("डेटाबेस" made no term); and
a word whose accents were typed apart from their letters (decomposed, as macOS names files) was
other terms than the same word composed. Each test fails on the tokenizers before (terms
versions 1 and 2) and passes now: through the SDK's in-memory client, a stdio server, the CLI,
and a state dir whose saved index such a tokenizer made. And a Chinese note's near copies are
found and merged, as an English note's are."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from compactor.mcp import build_server
from compactor.search import dedup as dedup_mod
from compactor.search.index import BM25Index
from compactor.store import Store
from tests.conftest import cli_json
from tests.support.old_tokenizer import tokenizer_version
from tests.support.sdk_calls import stored_and_asked
from tests.support.stdio_client import StdioServer

NOTES = {
    "pool": "数据库连接池配置错误\uff1a最大连接数设置为 5\uff0c导致超时",
    "token": "ユーザー認証のトークンが期限切れになるバグを修正した",
    "korean": "데이터베이스 연결 오류를 수정했습니다",
    "hindi": "डेटाबेस कनेक्शन विफल हो गया",
    "thai": "การเชื่อมต่อฐานข้อมูลล้มเหลว",
    "english": "the connection pool of the database timed out",
    # Accents apart from their letters (decomposed, NFD), as macOS names files, and composed.
    "resume": "Re\u0301sume\u0301 export failed: ~/Documents/Re\u0301sume\u0301.pdf is locked",
    "menu": "the caf\u00e9 menu parser drops na\u00efve dates",
    "irregular": "we bought spare cables for the lab",
}
# A word inside each note, and the note it must find first.
QUERIES = {
    "连接池": "pool",
    "超时": "pool",
    "トークン": "token",
    "期限切れ": "token",
    "데이터베이스": "korean",
    "डेटाबेस": "hindi",
    "कनेक्शन विफल": "hindi",
    "ฐานข้อมูล": "thai",
    "R\u00e9sum\u00e9.pdf": "resume",
    "cafe\u0301 nai\u0308ve": "menu",
    "what did we buy": "irregular",  # "bought": an irregular form, found by its base
}


def test_the_in_memory_client_finds_each_note_by_a_word_inside_it() -> None:
    queries = [*QUERIES, "connection pool"]
    ids, ranked = anyio.run(stored_and_asked, Store(), list(NOTES.values()), queries)
    by_name = dict(zip(NOTES, ids, strict=True))
    for (query, name), hits in zip(QUERIES.items(), ranked[:-1], strict=True):
        assert hits[:1] == [by_name[name]], query
    assert ranked[-1] == [by_name["english"]]  # "connection pool": the one English note, nothing else


@pytest.mark.slow
def test_a_stdio_server_and_the_cli_find_it(tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    with StdioServer("--state-dir", state) as server:
        ids = {name: server.ok("store", content=text)["id"] for name, text in NOTES.items()}
        for query, name in QUERIES.items():
            assert server.ok("query", query=query)["items"][0]["id"] == ids[name], query
        recall = server.ok("recall", query="连接池的超时")
        assert ids["pool"] in [it["id"] for it in recall["items"]]
    for query, name in (("连接池", "pool"), ("R\u00e9sum\u00e9", "resume")):
        assert cli_json("query", query, "--state-dir", state)["items"][0]["id"] == ids[name], query


def _saved_by(version: int, state: Path) -> dict[str, str]:
    with tokenizer_version(version):
        old = Store(state_dir=state)
        ids = {name: old.store(text).item.id for name, text in NOTES.items()}
        if version < 3:
            assert not old.query("R\u00e9sum\u00e9")  # neither finds a decomposed word by the composed one
        elif version == 3:
            assert not [t for t in old._s.index.terms(ids["english"]) if t.startswith("^")]  # nor stem terms
        elif version == 5:
            assert not old.query("what did we buy")  # nor an irregular form by its base
        if version == 1:
            assert not old.query("连接池")  # version 1 finds a CJK note only by its whole run
            assert not old.query("डेटाबेस")  # and a Hindi word not at all
        old.close_with_snapshot()
    saved = (state / "snapshot.json").read_text(encoding="utf-8")
    assert ('"terms":' not in saved) if version == 1 else (f'"terms":{version},' in saved)
    return ids


def _query_then_end(state: Path, query: str) -> tuple[list[str], str]:
    """A stdio server in the client's own process (--no-share): it has ended, with its final
    snapshot, when its stderr closes."""
    server = StdioServer("--state-dir", str(state), "--no-share", "--log-level", "INFO")
    try:
        found = [it["id"] for it in server.ok("query", query=query)["items"]]
        server.close_stdin()
        assert server.wait() == 0
        assert server.proc.stderr is not None
        return found, server.proc.stderr.read().decode()
    finally:
        server.stop()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("version", "first", "reindexed", "then"),
    [
        # Version 1: the notes with CJK, Thai or Hindi text, and the decomposed one; and (as
        # for every version before 4) the notes with a word of prose whose stem is another word.
        (1, ("连接池", "pool"), 9, ("トークン", "token")),
        # Version 2: the decomposed note, and the two English ones; and (as for every version
        # before 5) the notes whose length counted parts: a path, an unspaced run's characters.
        (2, ("R\u00e9sum\u00e9.pdf", "resume"), 8, ("cafe\u0301", "menu")),
        # Version 3: the three notes with English words, now found in other forms (and those of parts).
        (3, ("pools timing", "english"), 8, ("dropped dating", "menu")),
        # Version 4: the notes of parts, and (as for version 5) the one with an irregular form;
        # the other English ones and the Hindi one are measured as they were.
        (4, ("连接池", "pool"), 6, ("pools timing", "english")),
        # Version 5: only the note with an irregular form ("bought", now found by "buy").
        (5, ("what did we buy", "irregular"), 1, ("pools timing", "english")),
    ],
)
def test_an_index_saved_by_an_older_tokenizer_is_brought_up_to_date_not_rebuilt(
    tmp_path: Path, version: int, first: tuple[str, str], reindexed: int, then: tuple[str, str]
) -> None:
    state = tmp_path / "state"
    ids = _saved_by(version, state)
    found, log = _query_then_end(state, first[0])
    assert found[:1] == [ids[first[1]]]
    # Only the notes it made other terms of are indexed again; the rest of the saved index is used as is.
    assert f"saved index of tokenizer version {version}: {reindexed} of 9 items to re-index" in log
    assert "rebuilding" not in log
    assert '"terms":6,' in (state / "snapshot.json").read_text(encoding="utf-8")  # saved as version 6
    found, log = _query_then_end(state, then[0])
    assert found[:1] == [ids[then[1]]] and "tokenizer version" not in log


@pytest.mark.slow
def test_an_index_of_a_tokenizer_version_it_does_not_know_is_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state"
    made_now = BM25Index.to_state

    def saved_as_version_9(index: BM25Index, *, binary: bool = False) -> dict[str, Any]:
        return {**made_now(index, binary=binary), "terms": 9}

    with monkeypatch.context() as patch:
        patch.setattr(BM25Index, "to_state", saved_as_version_9)
        newer = Store(state_dir=state)
        pool = newer.store(NOTES["pool"]).item.id
        newer.close_with_snapshot()
    found, log = _query_then_end(state, "连接池")
    assert found == [pool]
    assert "its terms were made by tokenizer version 9; this one makes 6); rebuilding it from the items" in log


_HAN = "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产"


def _chinese_notes_and_near_copies() -> tuple[list[str], dict[int, str]]:
    # More notes than a near-duplicate bucket holds (DEDUP_MAX_BUCKET): the tag they all share
    # ("prose") then finds no candidates, and only their own words can.
    rng = random.Random(3)
    notes = ["".join(rng.choice(_HAN) for _ in range(60)) for _ in range(dedup_mod.DEDUP_MAX_BUCKET + 36)]
    return notes, {k: notes[k][:30] + "变" + notes[k][31:] for k in (3, 7, 11)}  # one character changed


def _merged_pairs(result: dict[str, Any]) -> set[frozenset[str]]:
    return {frozenset((m["id"], m["merged_into"])) for m in result["merged"]}


def test_near_copies_of_a_chinese_note_are_merged_by_compact_in_memory() -> None:
    """A note with no word of three letters had no near-duplicate sketch: its copies with one
    character changed were never merged (its whole run was one term before that)."""
    notes, copies = _chinese_notes_and_near_copies()

    async def go() -> None:
        async with Client(build_server(Store()), mode="legacy") as c:
            await c.call_tool("configure", {"auto_compact": False})
            stored = await c.call_tool("bulk_store", {"items": [{"content": n} for n in notes]})
            ids = stored.structured_content["ids"]  # type: ignore[index]
            pairs = set()
            for k, text in copies.items():
                copy = (await c.call_tool("store", {"content": text})).structured_content["id"]  # type: ignore[index]
                pairs.add(frozenset((ids[k], copy)))
            result = (await c.call_tool("compact", {"target_usage": 0.9})).structured_content
            assert result is not None and _merged_pairs(result) == pairs

    anyio.run(go)


@pytest.mark.slow
def test_near_copies_of_a_chinese_note_are_merged_by_compact_over_stdio(tmp_path: Path) -> None:
    notes, copies = _chinese_notes_and_near_copies()
    with StdioServer("--state-dir", str(tmp_path / "state")) as server:
        server.ok("configure", auto_compact=False)
        ids = server.ok("bulk_store", items=[{"content": n} for n in notes])["ids"]
        pairs = {frozenset((ids[k], server.ok("store", content=text)["id"])) for k, text in copies.items()}
        assert _merged_pairs(server.ok("compact", target_usage=0.9)) == pairs
