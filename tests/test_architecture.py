"""docs/architecture.md cannot drift: every module of the package has a row there, every module
opens with a docstring saying its job, and every import inside the package points to a lower
layer (so there are no cycles and the domain never imports its adapters)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "compactor"
DOC = ROOT / "docs" / "architecture.md"


def modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for path in sorted(PKG.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def documented_layers() -> dict[str, int]:
    rows = re.findall(r"^\| (\d+) \| `([\w.]+)` \|", DOC.read_text(), flags=re.M)
    layers: dict[str, int] = {}
    for layer, name in rows:
        assert name not in layers, f"{name} has two rows in docs/architecture.md"
        layers[name] = int(layer)
    return layers


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that `name` imports (at any place in the file)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in known else target)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m in known and m != name}


def test_every_module_has_a_row_and_every_row_a_module():
    have, rows = set(modules()), set(documented_layers())
    assert not have - rows, f"add these to docs/architecture.md: {sorted(have - rows)}"
    assert not rows - have, f"docs/architecture.md lists modules that do not exist: {sorted(rows - have)}"


def test_every_module_opens_with_a_docstring_saying_its_job():
    missing = [name for name, path in modules().items() if not ast.get_docstring(ast.parse(path.read_text()))]
    assert not missing, f"modules without an opening docstring: {missing}"


def test_imports_point_to_a_lower_layer():
    mods, layers = modules(), documented_layers()
    wrong = [
        f"{name} (layer {layers[name]}) imports {dep} (layer {layers[dep]})"
        for name, path in mods.items()
        for dep in sorted(imports(name, path, set(mods)))
        if layers[dep] >= layers[name]
    ]
    assert not wrong, "imports against docs/architecture.md:\n" + "\n".join(wrong)


def test_the_domain_core_imports_nothing_from_mcp():
    core = [name for name, layer in documented_layers().items() if layer <= 9]
    for name in core:
        tree = ast.parse(modules()[name].read_text())
        for node in ast.walk(tree):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            assert not any(n == "mcp" or n.startswith(("mcp.", "mcp_types")) for n in names), (name, names)


def test_the_doctor_uses_only_public_names_of_the_store():
    """The doctor checks a state dir through the Store's public API, so its check cannot drift
    from how the Store loads and indexes."""
    paths = sorted((PKG / "doctor").glob("*.py"))
    assert {p.name for p in paths} >= {"__init__.py", "checks.py", "report.py", "repair.py"}
    for path in paths:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "store":
                assert node.module == "store", f"doctor/{path.name} imports a store module: {node.module}"
                private = [a.name for a in node.names if a.name.startswith("_")]
                assert not private, f"doctor/{path.name} imports private store names: {private}"
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                raise AssertionError(f"doctor/{path.name} line {node.lineno} reaches a private attribute: .{node.attr}")
