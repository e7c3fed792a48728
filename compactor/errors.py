"""compactor's exceptions.

    CompactorError                 base: everything the domain raises on purpose
    ├── InvalidArgumentError       the caller's arguments are wrong; nothing changed
    ├── NotFoundError              no item with that id
    ├── PersistenceError           the state dir or database could not be written; nothing changed
    ├── StateCorruptError          a state file or row cannot be read; startup stops
    └── OutputRefusedError         an export would follow a symlink or replace a file

Messages are written for the model that will read them: they say what to do next.
"""


class CompactorError(Exception):
    """Base class for errors compactor raises deliberately."""


class InvalidArgumentError(CompactorError, ValueError):
    """The caller passed something invalid. The store is unchanged."""


class NotFoundError(CompactorError, KeyError):
    """No item has the given id."""

    def __init__(self, item_id: str) -> None:
        super().__init__(item_id)
        self.item_id = item_id

    def __str__(self) -> str:
        return f"No item with id {self.item_id!r}. Ids are case-sensitive; use `query` or `list` to find the right one."


class PersistenceError(CompactorError):
    """Writing to the state dir failed (disk full, read-only, ...). The store is unchanged."""


class StateCorruptError(CompactorError):
    """A state file exists but cannot be loaded. Never overwritten automatically."""


class OutputRefusedError(CompactorError):
    """An export target is a symlink, or a file that may only be replaced when told to."""
