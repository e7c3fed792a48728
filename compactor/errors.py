"""compactor's exceptions.

    CompactorError                 base: everything the domain raises on purpose
    ├── InvalidArgumentError       the caller's arguments are wrong; nothing changed
    ├── NotFoundError              no item with that id
    ├── PersistenceError           the state dir or database could not be written; nothing changed
    │   ├── WriteConflictError     another server wrote first (retry: the next try catches up)
    │   ├── WriteLockTimeoutError  the writers' lock was not free within the wait a write allows
    │   └── AmbiguousCommitError   the connection went while committing: applied or not, unknown
    ├── AccessDeniedError          the caller's token may not use that project, or only reads
    ├── StateCorruptError          a state file or row cannot be read; startup stops
    └── OutputRefusedError         an export would follow a symlink or replace a file

Messages are written for the model that will read them: they say what to do next.
"""

# An id up to this long is echoed in an error: every valid id is (constants.ID_MAX_CHARS).
# A longer one (a paste, a resource URI) is described by its length, never sent back.
ID_ECHO_CHARS = 64


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
        return f"No item with id {self.shown_id}. Ids are case-sensitive; use `query` or `list` to find the right one."

    @property
    def shown_id(self) -> str:
        """The id as an error may echo it."""
        if len(self.item_id) <= ID_ECHO_CHARS:
            return repr(self.item_id)
        return f"of {len(self.item_id):,} characters (ids have at most {ID_ECHO_CHARS})"


class PersistenceError(CompactorError):
    """Writing to the state dir failed (disk full, read-only, ...). The store is unchanged."""


class WriteConflictError(PersistenceError):
    """Another server appended between this one's catch-up and its write. Nothing was stored,
    memory is sound: the call is worth running again, which catches up first."""


class WriteLockTimeoutError(PersistenceError):
    """Another call or server held the writers' lock longer than a write may wait. Nothing was
    stored and memory is sound: a busy or stalled writer, not a failing disk."""


class WouldWaitError(WriteLockTimeoutError):
    """A call run where it must not wait (`Store.at_once`) found a lock held: it did nothing, and
    its caller runs it again where waiting is harmless (a server's worker thread)."""


class AccessDeniedError(CompactorError):
    """The calling person's token does not open that project, or may only read. Nothing
    changed."""


class AmbiguousCommitError(PersistenceError):
    """The database connection was lost while a write committed: it may or may not have been
    applied. Memory stays as it was before the call; the next call's catch-up shows which."""


class StateCorruptError(CompactorError):
    """A state file exists but cannot be loaded. Never overwritten automatically."""


class OutputRefusedError(CompactorError):
    """An export target is a symlink, or a file that may only be replaced when told to."""
