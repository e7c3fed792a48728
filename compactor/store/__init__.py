"""The Store, compactor's domain core, split by concern (one module each; see
docs/architecture.md). Everything callers use is re-exported here: import from
`compactor.store`, not from its modules."""

from __future__ import annotations

from .facade import Store
from .inputs import StoreInput
from .records import BulkStored, ExportPage, Hit, ImportedRecords, Page, Pruned, Recall, Status, Stored, Updated
from .state import ALL_SCOPES, GLOBAL_SCOPE, TierFilter, _headline, index_fields, scope_key

__all__ = [
    "ALL_SCOPES",
    "GLOBAL_SCOPE",
    "BulkStored",
    "ExportPage",
    "Hit",
    "ImportedRecords",
    "Page",
    "Pruned",
    "Recall",
    "Status",
    "Store",
    "StoreInput",
    "Stored",
    "TierFilter",
    "Updated",
    "_headline",
    "index_fields",
    "scope_key",
]
