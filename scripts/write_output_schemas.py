"""Rewrite compactor/mcp/output_schemas.py from the tools' reply models (compactor/mcp/schemas.py).
Run it after changing a reply model: tests/mcp/test_contract.py fails until the file matches.

    python scripts/write_output_schemas.py
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from compactor.mcp import sdk  # noqa: E402
from compactor.mcp.contract import derived_output_schemas, reply_model  # noqa: E402
from compactor.mcp.server import build_server  # noqa: E402
from compactor.store import Store  # noqa: E402

HEAD = '''"""The tools' output schemas as the server publishes them: what the SDK derives from each tool's
reply model (schemas.py), without titles and descriptions (contract.lean_output). Deriving them
took ~14 ms of every start, so they are kept here. Written by scripts/write_output_schemas.py;
tests/mcp/test_contract.py checks that they are still exactly what the models give."""

from typing import Any

'''

WITH = '''

def _with(names: tuple[str, ...], schema: dict[str, Any]) -> dict[str, Any]:
    """A tool's schema with the definitions it refers to, first, as the SDK publishes them."""
    return {"$defs": {name: DEFS[name] for name in names}, **schema} if names else schema


'''


def source(schemas: dict[str, dict[str, Any]], models: dict[str, str]) -> str:
    """The module: each definition several reply models share (`$defs`) written once, in DEFS;
    each reply model's schema once, in REPLIES; then which model each tool replies with."""
    defs: dict[str, Any] = {}
    replies: dict[str, dict[str, Any]] = {}
    for name, schema in schemas.items():
        if replies.setdefault(models[name], schema) != schema:
            raise SystemExit(f"the reply model {models[name]} gave two schemas")
        for model, definition in schema.get("$defs", {}).items():
            if defs.setdefault(model, definition) != definition:
                raise SystemExit(f"two reply models named {model} publish different schemas")
    entries = []
    for model, schema in replies.items():
        own = tuple(schema.get("$defs", {}))
        rest = {key: value for key, value in schema.items() if key != "$defs"}
        entries.append(f"{model!r}: _with({own!r}, {rest!r})")
    tools = ", ".join(f"{name!r}: REPLIES[{model!r}]" for name, model in models.items())
    return (
        HEAD
        + f"DEFS: dict[str, dict[str, Any]] = {defs!r}"
        + WITH
        + "REPLIES: dict[str, dict[str, Any]] = {"
        + ", ".join(entries)
        + "}\n\n"
        + "# Tools that reply alike share one dict here: build_server gives each server its own copy.\n"
        + f"OUTPUT_SCHEMAS: dict[str, dict[str, Any]] = {{{tools}}}\n"
    )


def main() -> None:
    server = build_server(Store())
    schemas = derived_output_schemas(server)
    models = {tool.name: reply_model(tool.fn).__name__ for tool in sdk.registered_tools(server)}
    path = ROOT / "compactor" / "mcp" / "output_schemas.py"
    path.write_text(source(schemas, models))
    subprocess.run([sys.executable, "-m", "ruff", "format", "-q", str(path)], check=True)
    print(f"wrote {path.relative_to(ROOT)}: {len(schemas)} tools")


if __name__ == "__main__":
    main()
