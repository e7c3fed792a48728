"""The bounds and defaults a caller can see: what a tool argument, a CLI option or a setting may
be, and what it is when not given. The tools' schemas, the CLI and the Store all publish or check
these, so each is written here only. Knobs that tune behaviour without a caller seeing them live
next to the code they tune, each with its reason; evaluations override those through
`compactor.store.tuning.Tuning`."""

from typing import Final

# --- budget -------------------------------------------------------------------------------
# Claude Code warns at 10k tokens of tool output and its context is ~200k: 80k of working
# memory leaves room for the conversation itself. Cursor's contexts are smaller still.
BUDGET_CLAUDE: Final = 80_000
BUDGET_CURSOR: Final = 60_000
# Same default as the reference server, so instructions written for it keep working.
BUDGET_DEFAULT: Final = 100_000
BUDGET_MIN: Final = 1_000
BUDGET_MAX: Final = 100_000_000

# --- bounds of what a caller may set: the store checks them, the server's schemas and the CLI
# publish them; each is written here only.
IMPORTANCE_MIN: Final = 1
IMPORTANCE_MAX: Final = 10
THRESHOLD_MIN: Final = 0.2  # auto_compact_threshold: lower would compact on nearly every store
THRESHOLD_MAX: Final = 1.0
RECALL_TOKENS_MIN: Final = 100
MAX_ITEMS_MIN: Final = 10
MAX_ITEMS_MAX: Final = 10_000_000
ARCHIVE_TOKENS_MIN: Final = 1_000
ARCHIVE_TOKENS_MAX: Final = 10_000_000_000
TREE_DEPTH_MAX: Final = 10
TARGET_USAGE_MIN: Final = 0.0  # compact(target_usage): a share of the budget
TARGET_USAGE_MAX: Final = 1.0
# An id is 3 to 64 characters of a-z, 0-9, '-' and '_' (a tool accepts any 1 to 64 and answers
# "no item" for the rest); an export cursor is no longer than an id.
ID_MIN_CHARS: Final = 3
ID_MAX_CHARS: Final = 64
# A scope is a project's path or name: far past any real path, short of a pasted document.
SCOPE_MAX_CHARS: Final = 4_096
# Search text: a query is words, not a document; recall's query only picks the task group.
QUERY_MAX_CHARS: Final = 10_000
RECALL_QUERY_MAX_CHARS: Final = 2_000
# `compactor --snapshot-interval`: from busy-test fast to once a day.
SNAPSHOT_INTERVAL_MIN_S: Final = 0.05
SNAPSHOT_INTERVAL_MAX_S: Final = 86_400

# Auto-compaction starts above 90% and stops at 80%: the 10-point gap keeps a burst of stores
# from compacting on every single call (hysteresis), as in the reference.
AUTO_COMPACT_THRESHOLD: Final = 0.9
AUTO_COMPACT_GAP: Final = 0.1
MANUAL_COMPACT_TARGET: Final = 0.7

# --- content ------------------------------------------------------------------------------
MAX_CONTENT_BYTES: Final = 1024 * 1024
MAX_SUMMARY_CHARS: Final = 20_000
MAX_TAGS: Final = 32
MAX_TAG_CHARS: Final = 64
IMPORTANCE_DEFAULT: Final = 5

# --- output bounds ------------------------------------------------------------------------
# Claude Code warns above 10k tokens of tool output; stay well under it (~4 chars a token).
MAX_OUTPUT_CHARS: Final = 24_000
# `get(id, offset=N)` returns the content this many characters at a time, fewer where they
# count more than GET_PAGE_TOKENS (CJK text is ~1 token a character). Claude Code refuses a
# reply over 25k tokens and gives the model the structured result (the content in JSON, its
# escapes included: 20,000 characters of code came to ~9.7k tokens), so an item past ~100 KB
# can only be read there in parts.
GET_PAGE_CHARS: Final = 20_000
GET_PAGE_TOKENS: Final = 8_000
RECALL_TOKENS_DEFAULT: Final = 2_000
RECALL_TOKENS_MAX: Final = 20_000
LIST_LIMIT_MAX: Final = 200
QUERY_LIMIT_MAX: Final = 100
NEEDS_SUMMARY_LIMIT: Final = 10
EXPORT_PAGE_CHARS: Final = 60_000
BULK_MAX_ITEMS: Final = 1_000

# --- limits -------------------------------------------------------------------------------
# Active items beyond this many move to the archive (lowest value first): a 100k-token budget
# holds a few thousand items, so this only bites with a huge budget.
MAX_ITEMS_DEFAULT: Final = 100_000
# ~200 MB of text: past it `compactor prune` proposes removing the lowest-value archived raw
# items (nothing is ever deleted automatically). Large enough for 100k typical items.
MAX_ARCHIVE_TOKENS_DEFAULT: Final = 50_000_000

# --- persistence --------------------------------------------------------------------------
SNAPSHOT_INTERVAL_S: Final = 30.0
# How long a write waits for the writers' lock before it says so (`--lock-wait`): a call
# holds it for milliseconds, so seconds of waiting mean a stalled or stopped server.
LOCK_WAIT_S: Final = 5.0
LOCK_WAIT_MIN_S: Final = 0.1
LOCK_WAIT_MAX_S: Final = 600.0

# --- streamable HTTP (compactor.mcp.http_server) -------------------------------------------------
# Where the MCP endpoint lives: the SDK's default, and what clients' docs show.
HTTP_PATH: Final = "/mcp"
HTTP_PORT_DEFAULT: Final = 8765
# A shared bearer token shorter than this is guessable or a placeholder left in a config file;
# `openssl rand -hex 32` gives 64.
TOKEN_MIN_CHARS: Final = 16
