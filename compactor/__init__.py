"""compactor: lossless working memory for LLM agents, served over MCP stdio.

The domain core is `Store`; the MCP server (`compactor.mcp`) and the CLI
(`compactor.cli`) are thin adapters over it.
"""

import typing as _typing

from .errors import CompactorError, InvalidArgumentError, NotFoundError, PersistenceError, StateCorruptError

if _typing.TYPE_CHECKING:
    from .models import Item
    from .store import Store, StoreInput

__version__ = "0.1.0"

# Imported on first use: `python -m compactor` as a stdio relay (sharing/relay.py) never needs them,
# and the store's modules and numpy are most of a process's start-up memory.
_LAZY = {"Item": ".models", "Store": ".store", "StoreInput": ".store"}


def __getattr__(name: str) -> _typing.Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'compactor' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "CompactorError",
    "InvalidArgumentError",
    "Item",
    "NotFoundError",
    "PersistenceError",
    "StateCorruptError",
    "Store",
    "StoreInput",
    "__version__",
]
