"""The MCP adapter over the Store: `build_server` makes the server, `serve` runs it on stdio.

`server` is the factory; the tools live in one module per concern (`tools_read`,
`tools_memory`, `tools_dag`, `tools_budget`) and share a `ToolKit` (`kit`); `replies` holds the
words several replies share, `schemas` their structured results, `contract` the check of every
call, `resources` the resources and the prompt, and `stdio_runtime` the one use of the SDK's transport internals.
"""

from .server import INSTRUCTIONS, build_server, serve

__all__ = ["INSTRUCTIONS", "build_server", "serve"]
