"""What every group of tools shares: the `ToolKit` handed to each group's `register` (the store,
the run wrapper every call goes through, the budget line), the tool annotations, and the
argument types several tools take."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar

from mcp.server.mcpserver import Context
from mcp_types import CallToolResult, ToolAnnotations
from pydantic import Field

from .. import constants as C
from ..store import Store
from . import replies
from . import schemas as S

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
WRITE_IDEMPOTENT = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
DESTRUCTIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)

TagsArg = Annotated[
    list[str] | str | None,
    Field(),
]
ScopeArg = Annotated[
    str | None,
    Field(
        max_length=C.SCOPE_MAX_CHARS,
        description="'all': every project.",
    ),
]
IdArg = Annotated[str, Field(min_length=1, max_length=C.ID_MAX_CHARS)]

Run = Callable[[Context | None, Callable[[], CallToolResult]], Awaitable[CallToolResult]]
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class ToolDef:
    """A tool as its group defined it, before the server registers it."""

    fn: Callable[..., Any]
    annotations: ToolAnnotations
    description: str


@dataclass
class ToolKit:
    """One per server. `run(ctx, fn)` prepares the client's session, calls `fn` and turns a
    domain error into a tool error; `read(ctx, fn)` does the same for a call that only reads
    (the tools annotated read-only, and query), which may then run at once on the event loop;
    `tool(...)` collects a group's tools, which the server then registers in the order it lists
    them."""

    store: Store
    run: Run
    read: Run
    tools: dict[str, ToolDef] = field(default_factory=dict)

    def tool(self, *, name: str, annotations: ToolAnnotations, description: str) -> Callable[[F], F]:
        def define(fn: F) -> F:
            if name in self.tools:
                raise ValueError(f"two tools are named {name!r}")
            self.tools[name] = ToolDef(fn, annotations, description)
            return fn

        return define

    def line(self) -> str:
        """The budget line (with its warnings) that ends every reply of a write."""
        return replies.budget_text(self.store)

    def budget(self) -> S.Budget:
        return replies.budget(self.store)
