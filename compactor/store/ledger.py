"""The append-only forget ledger: which ids `forget` and `prune` removed, and when."""

from __future__ import annotations

import logging
from typing import Any, Final

from ..errors import PersistenceError
from .journaled import _Journaled

LEDGER_MEMORY_MAX: Final = 10_000

log = logging.getLogger(__name__)


class _Ledger(_Journaled):
    """The forget ledger."""

    _ledger_mem: list[dict[str, Any]]

    def _ledger_append(self, entries: list[dict[str, Any]]) -> None:
        self._ledger_mem.extend(entries)
        del self._ledger_mem[:-LEDGER_MEMORY_MAX]
        if self._backend is not None:
            try:
                self._backend.append_ledger(entries)
            except PersistenceError as exc:
                log.error("forget ledger not written (entries kept in memory): %s", exc)

    def _ledger_count(self) -> int:
        return self._backend.ledger_count() if self._backend is not None else len(self._ledger_mem)

    def forget_ledger(self, limit: int = 100) -> list[dict[str, Any]]:
        """The newest entries of the append-only forget ledger."""
        if self._backend is not None:
            return self._backend.read_ledger(limit)
        return self._ledger_mem[-limit:]

    def _ledger_entry(self, item_id: str, reason: str, at: float) -> dict[str, Any]:
        """One line of the ledger: the id, why, when, and who asked where a caller is known
        (a team server's person). Never content."""
        caller = self._caller
        entry: dict[str, Any] = {"id": item_id, "reason": reason, "at": at}
        if caller is not None:
            entry["by"] = caller.name
        return entry
