"""Who is calling and what they may reach: a `Caller` (a person of a team server's tokens file)
is set on the Store for one call (`Store.serving`). A read reaches the caller's projects plus
"global" (what belongs to every project); an item of another project is "not found", so its
existence does not leak; a read-only caller's call may record accesses but change nothing.
Without a caller (stdio, the CLI, a server with no tokens file) everything is reachable.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import AccessDeniedError

# Patch fields a read records (query, recall): an access, not a change of memory.
ACCESS_FIELDS: frozenset[str] = frozenset({"last_accessed_at", "access_count"})
# A token's project list that opens every project.
EVERY_PROJECT = "*"


@dataclass(frozen=True, slots=True)
class Caller:
    """`projects`: the project scopes this caller may use, None for every one ("*")."""

    name: str
    projects: frozenset[str] | None
    write: bool

    @classmethod
    def of(cls, name: str, projects: Iterable[str], write: bool) -> Caller:
        wanted = frozenset(projects)
        return cls(name, None if EVERY_PROJECT in wanted else wanted, write)

    def opens(self, scope: str) -> bool:
        """Whether `scope` is one of this caller's projects (the Store adds "global")."""
        return self.projects is None or scope in self.projects

    def check_project(self, scope: str) -> str:
        """`scope` if this caller may use it as a project; else AccessDeniedError. Only a
        caller of every project may store into "global", which every project reads."""
        if self.projects is None or scope in self.projects:
            return scope
        mine = ", ".join(sorted(self.projects)) or "none"
        raise AccessDeniedError(
            f"{self.name}'s token may not use project {scope!r}; its projects: {mine}. "
            "Pass one of them as scope (or scope='all' to read all of them)."
        )

    def check_write(self) -> None:
        if not self.write:
            raise AccessDeniedError(f"{self.name}'s token is read-only: it can read memory but not change it.")
