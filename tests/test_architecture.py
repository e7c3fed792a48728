"""docs/architecture.md cannot drift: every module of the package has a row there, every module
opens with a docstring saying its job, every import inside the package points to a lower layer
(so there are no cycles), and each package imports only the packages its rule below allows (so
the domain never imports its adapters, and the folders are the architecture)."""

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


# The loose modules at the bottom: records, errors, bounds and plain helpers every package may use.
BASE = "base"
# The loose modules that sit above the core: `python -m` and the status and item views for people
# that the CLI, the MCP resources and the memory page share.
TOP = "top"
LOOSE_TOP = {"compactor.__main__", "compactor.report"}
# The package itself: its version (which any module may read) and its public names, the Store's
# among them, imported on first use.
SURFACE = "surface"
# Which packages each package may import (besides its own). The domain core is search, content,
# persistence, summaries and store; the rest are adapters over it.
MAY_IMPORT: dict[str, set[str]] = {
    BASE: set(),
    SURFACE: {BASE, "store"},
    "search": {BASE},
    "content": {BASE},
    "persistence": {BASE},
    "summaries": {BASE, "search"},
    "store": {BASE, "search", "content", "persistence", "summaries"},
    TOP: {BASE, "search", "summaries", "store", "cli"},
    "claude_code": {BASE, "store", "summaries"},
    "doctor": {BASE, "store", "persistence"},
    "mcp": {BASE, TOP, "store", "search", "summaries"},
    "sharing": {BASE, "mcp", "store"},
    "ui": {BASE, TOP, "store", "search", "persistence", "mcp"},
    "cli": {BASE, TOP, "store", "persistence", "mcp", "sharing", "doctor", "claude_code", "ui"},
}
CORE = {BASE, "search", "content", "persistence", "summaries", "store"}


def package_of(name: str) -> str:
    parts = name.split(".")
    if len(parts) > 1 and (PKG / parts[1]).is_dir():
        return parts[1]
    if name == "compactor":
        return SURFACE
    return TOP if name in LOOSE_TOP else BASE


def test_every_package_has_a_rule_and_a_docstring():
    packages = {p.name for p in PKG.iterdir() if (p / "__init__.py").exists()}
    assert packages == set(MAY_IMPORT) - {BASE, TOP, SURFACE}, "give each package of compactor/ a rule here"
    for name in packages:
        assert ast.get_docstring(ast.parse((PKG / name / "__init__.py").read_text())), name


def test_each_package_imports_only_what_its_rule_allows():
    mods = modules()
    wrong = [
        f"{name} ({package_of(name)}) imports {dep} ({package_of(dep)})"
        for name, path in mods.items()
        for dep in sorted(imports(name, path, set(mods)))
        if package_of(dep) not in {package_of(name), SURFACE} and package_of(dep) not in MAY_IMPORT[package_of(name)]
    ]
    assert not wrong, "imports against the package rules:\n" + "\n".join(wrong)


def test_at_most_twelve_modules_stay_loose_and_none_is_over_900_lines():
    loose = [p.name for p in PKG.glob("*.py")]
    assert len(loose) <= 12, loose
    long = {str(p.relative_to(ROOT)): n for p in PKG.rglob("*.py") if (n := len(p.read_text().splitlines())) > 900}
    assert not long, f"split these by job: {long}"


def test_the_domain_core_imports_nothing_from_mcp():
    core = [name for name in documented_layers() if package_of(name) in CORE]
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
