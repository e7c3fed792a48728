"""Hypothesis fuzzing of every tool's arguments through the SDK's in-process client.

Each example opens a session on a copy of a seeded, persistent state dir (raw items, summary
nodes, a pin, a forgotten child) and calls EVERY tool once, in random order, plus a few extra
random calls, with arguments that are valid, wrong in type, huge, odd unicode (lone surrogates,
RTL and bidi controls, control characters), negative, NaN or infinite, unknown ids, oversized
arrays, or missing, plus an unknown extra argument now and then.

Expected: every call returns a result (a tool error or a success), never an exception from the
protocol layer; after every error the store is exactly as before (all item fields, settings,
tokens used); the session still answers afterwards; and what is on disk loads back to exactly
what is in memory.

What the in-process client can send: NaN and infinity leave it as JSON null (pydantic's JSON
mode), so they arrive as "missing" (see the protocol-abuse tests for raw NaN on the wire). Lone
surrogates do reach the tools in-process; over stdio the SDK rejects the whole message as
invalid JSON before any tool sees it (tests/system/test_protocol_abuse.py).
"""

from __future__ import annotations

import shutil
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any, ClassVar

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client

from compactor import constants as C
from compactor.mcp import build_server
from compactor.store import Store, StoreInput

# Every tool and its arguments. The test fails if the server's list differs, so a new tool or
# argument cannot go unfuzzed.
TOOLS: dict[str, tuple[str, ...]] = {
    "recall": ("limit", "query", "scope"),
    "store": ("content", "summary", "tags", "importance", "pinned", "scope"),
    "bulk_store": ("items",),
    "query": ("query", "tags", "limit", "include_archived", "scope"),
    "get": ("id", "offset"),
    "status": (),
    "compact": ("target_usage",),
    "update": ("id", "summary", "content", "tags", "importance"),
    "pin": ("id",),
    "unpin": ("id",),
    "restore": ("id",),
    "forget": ("id",),
    "expand": ("id", "offset", "limit"),
    "dissolve": ("id",),
    "tree": ("root", "max_depth"),
    "list": ("offset", "limit", "tier", "scope"),
    "export": ("summaries_only", "tier", "format", "cursor", "scope"),
    "configure": (
        "token_budget",
        "auto_compact",
        "auto_compact_threshold",
        "recall_tokens",
        "max_items",
        "max_archive_tokens",
    ),
}
# In-range values for the numeric arguments; out-of-range and wrong-typed ones come from `junk`.
RANGES = {
    "limit": (1, C.LIST_LIMIT_MAX),
    "offset": (0, 300),
    "importance": (1, 10),
    "max_depth": (1, 10),
    "token_budget": (C.BUDGET_MIN, 200_000),
    "recall_tokens": (100, C.RECALL_TOKENS_MAX),
    "max_items": (10, 500),
    "max_archive_tokens": (1_000, 100_000),
}
EXAMPLES = 24
EXTRA_CALLS = 4

# --- strategies -------------------------------------------------------------------------------
surrogate = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
control = st.characters(min_codepoint=0, max_codepoint=0x1F) | st.sampled_from(
    ["\x7f", "\x85", "\u2028", "\u2029", "\ufeff", "\u200b", "\u0000"]
)
bidi = st.sampled_from(["\u202e", "\u202b", "\u2067", "\u200f", "\u061c"])
rtl_words = st.sampled_from(["שלום עולם", "مرحبا بالعالم", "\u202egnp.exe", "abc\u202edef", "ܐܒܓ"])
odd_text = st.text(alphabet=st.one_of(st.characters(), surrogate, control, bidi), max_size=120) | rtl_words
plain_text = st.text(alphabet="abcdefghij klmnop,", min_size=1, max_size=60)
huge_text = st.builds(
    lambda ch, n: ch * n,
    st.sampled_from(["x", "é", "🙂", "\u202e", "\x00", "a,"]),
    st.sampled_from([65, 2_001, C.MAX_SUMMARY_CHARS + 1, C.MAX_CONTENT_BYTES // 4, C.MAX_CONTENT_BYTES + 1]),
)
with_surrogate = st.tuples(plain_text, surrogate, plain_text).map("".join)
_TEXTS = {"odd": odd_text, "plain": plain_text, "surrogate": with_surrogate, "huge": huge_text}
texts = st.sampled_from(sorted(_TEXTS)).flatmap(lambda k: _TEXTS[k])
numbers = (
    st.integers(min_value=-(2**70), max_value=2**70)
    | st.sampled_from([0, -1, 1, 10, 11, 200, 201, 2**31, -(2**63), 2**63])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([float("nan"), float("inf"), -float("inf"), 0.5, -0.0, 1e308])
)
scalars = st.none() | st.booleans() | numbers | texts
junk = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=8,
)
oversized = st.sampled_from(
    [[{"content": f"x{i}"} for i in range(C.BULK_MAX_ITEMS + 1)], ["t"] * 10_000, list(range(5_000))]
)


def id_strategy(ids: list[str], nodes: list[str]) -> st.SearchStrategy[Any]:
    unknown = st.from_regex(r"[a-z0-9][a-z0-9_-]{2,20}", fullmatch=True)
    return st.sampled_from(ids) | st.sampled_from(nodes) | unknown | st.sampled_from(["", "a" * 65]) | odd_text


def bulk_items() -> st.SearchStrategy[Any]:
    item = st.fixed_dictionaries(
        {"content": texts},
        optional={
            "summary": texts,
            "tags": texts | st.lists(texts, max_size=3),
            "importance": numbers,
            "pinned": st.booleans() | junk,
            "bogus": junk,
        },
    )
    arrays = st.lists(item | junk, min_size=0, max_size=4)
    return arrays | arrays.map(_json_or_junk) | oversized | st.sampled_from(["[", "[{}]", "null", "{}"])


def _json_or_junk(value: Any) -> Any:
    import json

    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return "not json"


def arg_strategy(name: str, ids: list[str], nodes: list[str]) -> st.SearchStrategy[Any]:
    valid: st.SearchStrategy[Any]
    if name in ("content", "summary", "query"):
        valid = texts
    elif name == "tags":
        valid = texts | st.lists(texts, max_size=6) | oversized
    elif name == "scope":
        valid = st.sampled_from(["global", "all", "/work/other-project", "", "ALL"]) | texts
    elif name in ("id", "root"):
        valid = id_strategy(ids, nodes)
    elif name == "items":
        valid = bulk_items()
    elif name == "tier":
        valid = st.sampled_from(["active", "archived", "all", "ALL", ""])
    elif name == "format":
        valid = st.sampled_from(["json", "markdown", "xml"])
    elif name == "cursor":
        valid = st.sampled_from(["MQ", "MTA", "LTE", "!!", "ZZZZZZZZ"]) | odd_text
    elif name in ("pinned", "include_archived", "auto_compact", "summaries_only"):
        valid = st.booleans()
    elif name == "target_usage":
        valid = st.floats(min_value=0, max_value=1)
    elif name == "auto_compact_threshold":
        valid = st.floats(min_value=0.2, max_value=1)
    elif name in RANGES:
        lo, hi = RANGES[name]
        valid = st.integers(lo, hi)
    else:
        raise AssertionError(f"no strategy for argument {name!r}")
    # Mostly well-typed, so that calls get past schema validation into the Store too.
    # (Hypothesis favours the first of sampled_from's choices, so "valid" leads.)
    return st.sampled_from(["valid", "valid", "valid", "junk"]).flatmap(lambda k: valid if k == "valid" else junk)


@st.composite
def arguments(draw: st.DrawFn, tool: str, ids: list[str], nodes: list[str]) -> dict[str, Any]:
    args: dict[str, Any] = {}
    for name in TOOLS[tool]:
        if draw(st.sampled_from(["given", "given", "given", "given", "missing"])) == "missing":
            continue  # required or not
        args[name] = draw(arg_strategy(name, ids, nodes))
    if draw(st.sampled_from(["no", *["no"] * 8, "extra"])) == "extra":
        args[draw(st.sampled_from(["bogus", "ID", "__proto__", ""]))] = draw(junk)
    return args


# --- the store under test ---------------------------------------------------------------------
def fingerprint(store: Store) -> tuple[Any, ...]:
    items = sorted((it.to_record() for it in store.iter_items()), key=lambda r: r["id"])
    return (repr(items), repr(store.settings.to_record()), store.tokens_used, len(store))


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str], list[str]]:
    d = tmp_path_factory.mktemp("fuzz") / "state"
    s = Store(state_dir=d, budget=3_000)
    texts_ = [f"note {i} on topic{i % 5}: " + " ".join(f"w{i}x{j}" for j in range(25)) for i in range(45)]
    ids = [
        it.id
        for it in s.bulk_store([StoreInput(t, summary=f"s{i}" if i % 3 else None) for i, t in enumerate(texts_)]).items
    ]
    s.compact(0.2)
    s.pin(ids[-1])
    s.forget(ids[0])  # leaves gone_children on a summary
    nodes = [it.id for it in s.iter_items() if it.depth]
    raw = [i for i in ids[1:] if i in set(s.ids())]
    s.close()
    assert nodes and raw
    return d, raw, nodes


class Tally:
    cases = 0
    errors = 0
    opaque = 0
    per_tool: ClassVar[Counter[str]] = Counter()


async def run_session(store: Store, calls: list[tuple[str, dict[str, Any]]]) -> None:
    async with Client(build_server(store), mode="legacy") as c:
        for tool, args in calls:
            before = fingerprint(store)
            with anyio.fail_after(60):
                result = await c.call_tool(tool, args)  # an exception here is a protocol crash
            Tally.cases += 1
            Tally.per_tool[tool] += 1
            assert result.content, (tool, args)
            if result.is_error:
                Tally.errors += 1
                text = result.content[0].text  # type: ignore[union-attr]
                if text == f"Error executing tool {tool}":
                    Tally.opaque += 1  # an exception the tool did not expect: the SDK hides its message
                assert "pydantic" not in text and "validation error" not in text, (tool, text[:500])
                assert fingerprint(store) == before, f"{tool} failed but changed the store: {args!r:.300}"
            else:
                assert result.structured_content is not None, (tool, result)
        still = await c.call_tool("status", {})
        assert not still.is_error


@pytest.mark.slow
@pytest.mark.timeout(900)  # passing takes ~15 s; shrinking a failure with 1 MiB inputs takes minutes
def test_fuzz_every_tool(base_dir: tuple[Path, list[str], list[str]]):
    base, ids, nodes = base_dir

    async def listed() -> dict[str, set[str]]:
        s = Store()
        async with Client(build_server(s), mode="legacy") as c:
            return {t.name: set(t.input_schema.get("properties", {})) for t in (await c.list_tools()).tools}

    assert anyio.run(listed) == {k: set(v) for k, v in TOOLS.items()}, "update TOOLS: the server's tools changed"

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        order = data.draw(st.permutations(sorted(TOOLS)))
        order += data.draw(st.lists(st.sampled_from(sorted(TOOLS)), max_size=EXTRA_CALLS))
        calls = [(tool, data.draw(arguments(tool, ids, nodes), label=tool)) for tool in order]
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(tmp) / "state"
            shutil.copytree(base, d)
            store = Store(state_dir=d)
            try:
                anyio.run(run_session, store, calls)
                memory = fingerprint(store)
            finally:
                store.close()
            again = Store(state_dir=d)
            try:
                assert fingerprint(again) == memory, "what loads from disk differs from what was in memory"
            finally:
                again.close()

    run()
    print(
        f"\nfuzz: {Tally.cases} tool calls ({Tally.errors} tool errors, {Tally.cases - Tally.errors} successes), "
        f"0 protocol crashes, {Tally.opaque} errors without a message, {len(Tally.per_tool)} tools"
    )
    assert set(Tally.per_tool) == set(TOOLS)
    assert Tally.cases >= EXAMPLES * len(TOOLS)
    assert 0 < Tally.errors < Tally.cases  # both paths exercised
