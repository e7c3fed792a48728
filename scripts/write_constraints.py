"""Write constraints.txt: every package `pip install ".[postgres]"` puts in the image, at the
version installed in the environment running this script (the one the tests ran on). The
Dockerfile installs with it, so a rebuild installs the same versions. The build backend pip
fetches to pack compactor itself is not pinned: it decides how our own files are packed, not
which versions run.

    python scripts/write_constraints.py           # rewrite constraints.txt
    python scripts/write_constraints.py --check   # exit 1 if it is not what this environment has
"""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "constraints.txt"
EXTRAS = ("postgres",)  # compose.yaml builds the image with EXTRAS="[postgres]"
HEADER = (
    "# The versions the Dockerfile installs: compactor's runtime dependencies (with [postgres]), as\n"
    "# installed where the tests ran. Written by `python scripts/write_constraints.py`;\n"
    "# tests/system/test_docker_entrypoint.py checks it.\n"
)


def closure() -> dict[str, str]:
    """name -> version for compactor's runtime dependencies, transitively, markers evaluated here."""
    found: dict[str, str] = {}
    seen: set[tuple[str, frozenset[str]]] = set()
    todo: list[tuple[str, tuple[str, ...]]] = [("compactor", EXTRAS)]
    while todo:
        name, extras = todo.pop()
        if (canonicalize_name(name), frozenset(extras)) in seen:
            continue
        seen.add((canonicalize_name(name), frozenset(extras)))
        dist = distribution(name)
        for text in dist.requires or []:
            req = Requirement(text)
            wanted = req.marker is None or any(
                req.marker.evaluate({**default_environment(), "extra": e}) for e in ("", *extras)
            )
            key = canonicalize_name(req.name)
            if not wanted or key == "compactor":
                continue
            try:
                version = distribution(req.name).version
            except PackageNotFoundError:
                raise SystemExit(f"{req.name} is not installed here: install compactor[postgres] first") from None
            found[key] = version
            todo.append((req.name, tuple(req.extras)))
    return found


def render() -> str:
    return HEADER + "".join(f"{name}=={version}\n" for name, version in sorted(closure().items()))


def main() -> int:
    text = render()
    if "--check" in sys.argv[1:]:
        if OUT.read_text() != text:
            print("constraints.txt is not what this environment has: run python scripts/write_constraints.py")
            return 1
        return 0
    OUT.write_text(text)
    print(f"Wrote {OUT}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
