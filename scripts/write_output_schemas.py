"""Rewrite compactor/mcp/output_schemas.py from the tools' reply models (compactor/mcp/schemas.py).
Run it after changing a reply model: tests/test_contract.py fails until the file matches.

    python scripts/write_output_schemas.py
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from compactor.mcp.contract import derived_output_schema  # noqa: E402
from compactor.mcp.server import TOOL_ORDER, build_server  # noqa: E402
from compactor.store import Store  # noqa: E402

HEAD = '''"""The tools' output schemas as the server publishes them: what the SDK derives from each tool's
reply model (schemas.py), without titles and descriptions (contract.lean_output). Deriving them
took ~14 ms of every start, so they are kept here. Written by scripts/write_output_schemas.py;
tests/test_contract.py checks that they are still exactly what the models give."""

from typing import Any

OUTPUT_SCHEMAS: dict[str, dict[str, Any]] = '''


def main() -> None:
    server = build_server(Store())
    tools = {tool.name: tool for tool in server._tool_manager.list_tools()}
    schemas = {name: derived_output_schema(tools[name].fn) for name in TOOL_ORDER}
    path = ROOT / "compactor" / "mcp" / "output_schemas.py"
    path.write_text(HEAD + repr(schemas) + "\n")
    subprocess.run([sys.executable, "-m", "ruff", "format", "-q", str(path)], check=True)
    print(f"wrote {path.relative_to(ROOT)}: {len(schemas)} tools")


if __name__ == "__main__":
    main()
