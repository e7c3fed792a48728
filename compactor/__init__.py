"""compactor: lossless working memory for LLM agents, served over MCP stdio.

The domain core is `Store`; the MCP server (`compactor.mcp`) and the CLI
(`compactor.cli`) are thin adapters over it.
"""

from .errors import CompactorError, InvalidArgumentError, NotFoundError, PersistenceError, StateCorruptError
from .models import Item
from .store import Store, StoreInput

__version__ = "0.1.0"

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
