"""The context the model pays: tool definitions and instructions stay within their token budgets,
measured on the real server through the in-memory client (the figures `python -m bench` prints)."""

from __future__ import annotations

import pytest

from bench.context import INSTRUCTIONS_MAX, TOOLS_MAX, measure_context, render_context

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_tools_the_model_sees_and_instructions_fit_their_budgets() -> None:
    figures = await measure_context()
    assert figures["tools"] == 18
    assert figures["model_tokens"] <= TOOLS_MAX, render_context(figures)
    assert figures["instructions_tokens"] <= INSTRUCTIONS_MAX, render_context(figures)
    # outputSchema is kept (scripts read the structured fields), so the full list is larger.
    assert figures["tools_list_tokens"] > figures["model_tokens"]


async def test_every_tool_says_when_to_use_it_in_a_short_description() -> None:
    figures = await measure_context()
    for name, tokens in figures["per_tool"].items():
        assert tokens <= 200, f"{name}: {tokens} tokens"
