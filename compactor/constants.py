"""Every number that tunes compactor's behaviour, each with where it comes from.

Kept in one place so a reader can see the whole policy at once and a change to it is one diff.
"""

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

# --- retention score: 0.4*importance + 0.3*recency + 0.2*access - 0.1*size, times type -------
W_IMPORTANCE: Final = 0.4
W_RECENCY: Final = 0.3
W_ACCESS: Final = 0.2
W_SIZE: Final = 0.1
# Errors are what an agent most often trips over twice; tool output is the easiest to re-run.
TYPE_MULTIPLIER: Final = {"error": 1.5, "decision": 1.3, "code": 1.2, "prose": 1.0, "tool_output": 0.7}
# Real half-lives (recency = 0.5 ** (age / half_life)), in seconds. An error is hot while the
# agent is fixing it (30 min); decisions and code stay relevant for a working day (6 h).
HALF_LIFE_S: Final = {
    "error": 30 * 60,
    "decision": 6 * 3600,
    "code": 6 * 3600,
    "prose": 2 * 3600,
    "tool_output": 15 * 60,
}
# access = min(ln(1 + n) / 5, 1): saturates at ~147 accesses, so a hot item cannot buy itself
# immortality.
ACCESS_LOG_DIVISOR: Final = 5.0
# size = ln(1 + tokens) / ln(1 + SIZE_SATURATION_TOKENS), capped at 1. On a log scale a
# 20-token note scores ~0.33 and a 4,000-token dump ~0.92, so the 0.1 weight is worth about one
# importance point between them: it matters without drowning importance.
SIZE_SATURATION_TOKENS: Final = 8_000
# Highest possible retention (importance 10, fresh, saturated access, tiny, error type), used to
# normalise retention into [0, 1] when it is mixed into search ranking.
MAX_RETENTION: Final = (W_IMPORTANCE + W_RECENCY + W_ACCESS) * max(TYPE_MULTIPLIER.values())

# --- ranking ------------------------------------------------------------------------------
# Final score = bm25 * (1 + RETENTION_WEIGHT * retention01) * (PIN_BOOST if pinned). Relevance
# leads: retention can lift a result by at most 25% (and a pin by 15% more), enough to break
# near-ties toward fresher, more important items but never to bury the best text match.
RETENTION_WEIGHT: Final = 0.25
PIN_BOOST: Final = 1.15
# A plain query searches the archive too: an archived hit's score is multiplied by
# this, so of two equally relevant items the active one (the agent's current working set) ranks
# first, while an archived item that matches clearly better still outranks it. Bounded at
# 1 / 0.9 = 1.11x: a stronger preference (0.8) cost archived hits recall (see bench/REPLAY.md).
ARCHIVED_RANK_FACTOR: Final = 0.9
# Re-rank the BM25 top max(limit * 3, 30) with retention: deep enough for the bounded lift
# (scoring.MAX_RANK_FACTOR) to matter only between near-ties, shallow enough for the index to prune the rest.
RERANK_DEPTH: Final = 3
RERANK_MIN: Final = 30
# An item without a summary is indexed with its first line (this long at most, cut after a
# whole word) as its summary field: the line a command output or an error starts with is what
# an agent searches for.
HEADLINE_CHARS: Final = 200

# --- near-duplicates ----------------------------------------------------------------------
# Jaccard of word sets above 0.7, as in the reference.
DEDUP_JACCARD: Final = 0.7
# Candidates are items sharing one of their K smallest word hashes: for Jaccard J the chance
# that a true pair shares none is (1 - J) ** K, i.e. < 0.8% at J = 0.7 with K = 4.
DEDUP_SKETCH_K: Final = 4
# A bucket larger than this is a hash of a ubiquitous word; checking it would be O(n).
DEDUP_MAX_BUCKET: Final = 64
# Bottom-64 min-hash signature: Jaccard estimated within ~0.06 (one standard deviation at
# J = 0.7), in 320 bytes an item instead of the whole word set.
DEDUP_SIGNATURE: Final = 64
# The near-duplicate buckets merge the items added since their saved state into its flat
# arrays once there are this many, or an eighth as many as it holds if that is more: what
# waits in dicts costs ~750 bytes an item against ~400 merged, and each merge is O(items), so
# a step that grows with the state keeps their total linear (as INDEX_SETTLE_* for the index).
DEDUP_MERGE_MIN: Final = 4_096
DEDUP_MERGE_SHARE: Final = 8

# --- content ------------------------------------------------------------------------------
MAX_CONTENT_BYTES: Final = 1024 * 1024
MAX_SUMMARY_CHARS: Final = 20_000
MAX_TAGS: Final = 32
MAX_TAG_CHARS: Final = 64
AUTO_TAG_LIMIT: Final = 5
IMPORTANCE_DEFAULT: Final = 5

# --- content types and tags (classify.py) ---------------------------------------------------
# Parsing a bigger JSON blob to decide "tool output" costs more than the label is worth.
JSON_PARSE_LIMIT: Final = 4 * 1024 * 1024
# Tags come from the head: keeps auto_tags ~1 ms on a 1 MiB item; first mentions decide anyway.
TAG_SCAN_CHARS: Final = 64 * 1024

# --- secret redaction (redact.py) ----------------------------------------------------------
MIN_HUMAN_SECRET: Final = 4  # shorter `password=` values are test dummies ("x", "pw"), not credentials
MIN_MACHINE_SECRET: Final = 8  # generated keys/tokens are far longer; 8 keeps short lexer tokens out
MIN_BEARER_TOKEN: Final = 16  # OAuth/JWT bearer tokens are 20+ chars; shorter "Bearer xyz" is prose
MIN_PASSPHRASE_WORDS: Final = 2  # a quoted password with spaces: 2-5 words is a passphrase ...
MAX_PASSPHRASE_WORDS: Final = 5  # ... more reads as a message ("Please enter the new password")
MIN_RANDOM_LETTERS: Final = 20  # letters-only secrets (client_secret=AbXq...) are long; names shorter
MIN_SESSION_COOKIE: Final = 16  # session ids are 26+ characters (PHPSESSID); shorter values are flags
MIN_KNOWN_SECRET: Final = 8  # a literal secret shorter than this would match ordinary text
MAX_PASSES: Final = 4  # text with secrets settles after one pass (a second one confirms); see `redact`

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
PREVIEW_CHARS: Final = 160
RECALL_TOKENS_DEFAULT: Final = 2_000
RECALL_TOKENS_MAX: Final = 20_000
# Reserved in recall's cap for its closing "Left out: ..." line.
RECALL_FOOTER_TOKENS: Final = 100
# Reserved per group header of recall ("Recent work (12, newest first; ...):" is ~20 tokens).
RECALL_HEADER_TOKENS: Final = 24
# A recall entry's preview: one line of ~25 tokens, so 2,000 tokens show ~70 entries (get(id) has the rest).
RECALL_PREVIEW_CHARS: Final = 90
# Share of recall's cap the task-related group may take before recent work (tuned on the tuning half).
RECALL_TASK_SHARE: Final = 0.5
# Recall asks the search for limit * this many hits for its task group: the group skips hits already
# shown and older views of a file, and the cap ends it long before the last hit.
RECALL_TASK_FETCH: Final = 3
# Share of recall's cap that open errors may take: a resumed session's first job, yet never the whole screen.
RECALL_ERRORS_SHARE: Final = 0.15
# Share of what is left that recent work takes before decisions, summaries and the rest (tuned likewise).
RECALL_RECENT_SHARE: Final = 0.8
# Share of what is left after recent work that decisions may take before summaries.
RECALL_DECISIONS_SHARE: Final = 0.5
# How much of an error's end recall reads for its exception line (a traceback ends with it).
RECALL_ERROR_TAIL_CHARS: Final = 4_000
# Programs whose output is the text of the one file they name: such an output is a view of that file.
RECALL_FILE_READERS: Final = frozenset({"cat", "head", "tail", "nl", "sed", "less", "more", "bat"})
# Items whose subject (file or command) recall remembers between calls; its walk covers RECALL_SCAN_MAX,
# so this holds several walks' worth and starts over when full.
RECALL_SUBJECT_CACHE: Final = 8_192
# How much of an item's head names what it is a view of (a command line, a file path).
RECALL_VIEW_KEY_CHARS: Final = 300
# Recall walks at most this many newest items (subjects, open errors, decisions, summaries): its cost
# is bounded at any number of items.
RECALL_SCAN_MAX: Final = 1_000
# Recall scores retention only for limit * this many most important items, not for all (latency).
RECALL_VALUABLE_CANDIDATES: Final = 5
LIST_LIMIT_MAX: Final = 200
QUERY_LIMIT_MAX: Final = 100
NEEDS_SUMMARY_LIMIT: Final = 10
EXPORT_PAGE_CHARS: Final = 60_000
BULK_MAX_ITEMS: Final = 1_000
# A wrong argument is echoed in the error up to this many characters: enough to recognise it,
# never a large paste sent back into the model's context.
ARG_ECHO_CHARS: Final = 40
# Arguments are scanned for lone surrogates this deep: bulk_store's items are a list of objects
# holding a list of tags, so 3 levels; deeper values are refused by the schemas anyway.
ARG_SCAN_DEPTH: Final = 3

# --- stdio transport ----------------------------------------------------------------------
# Requests unanswered or with a reply not yet written to stdout: past this, stdin is not read
# (backpressure), so a client that never reads its replies cannot grow the server's memory.
# Well above what a client pipelines (Claude Code sends tool calls one at a time).
MAX_PENDING_REQUESTS: Final = 32
# Once stdin ends, how long the requests read before it may still run to send their replies
# (a client that pipes its requests and closes stdin still reads them). Every tool returns
# well within it; it only stops a handler stuck on the gone client keeping the process up.
EOF_REPLIES_WAIT_S: Final = 30.0
# A line the SDK's JSON parser refuses is parsed again only up to this size to find its id:
# past it (the 50 MB garbage line) the reply keeps id null rather than spend the time.
MAX_REPARSE_CHARS: Final = 2 << 20

# A client that advertises roots but never answers must not stall the first tool call.
ROOTS_TIMEOUT_S: Final = 2.0

# --- shared host (several stdio clients of one state dir, one store process) --------------
# Bytes per read of a relayed connection: a pipe's default capacity.
SHARED_READ_BYTES: Final = 1 << 16
# The relay's hello is one short JSON line sent right after connecting.
SHARED_HELLO_TIMEOUT_S: Final = 10.0
SHARED_HELLO_MAX_BYTES: Final = 1 << 16
# Connections waiting to be accepted: clients start one at a time, a burst of sessions at most.
SHARED_BACKLOG: Final = 64
# A host whose starting relay never connects (it was killed meanwhile) must not live on.
SHARED_FIRST_CLIENT_TIMEOUT_S: Final = 30.0
# How long a relay waits for a host that another relay is starting: a load that rebuilds a
# 100k-item index takes tens of seconds. Past it the relay serves in its own process.
SHARED_START_TIMEOUT_S: Final = 180.0
# How often a relay looks again while another relay's host is starting.
SHARED_POLL_S: Final = 0.02
# The host's log in the state dir (its stderr is no client's once it starts). Past this size
# the next host start moves it to `.1`, replacing the previous one.
SHARED_LOG: Final = "server.log"
SHARED_LOG_MAX_BYTES: Final = 1 << 20

# --- limits -------------------------------------------------------------------------------
# Active items beyond this many move to the archive (lowest value first): a 100k-token budget
# holds a few thousand items, so this only bites with a huge budget.
MAX_ITEMS_DEFAULT: Final = 100_000
# Crossing it moves more than the excess, a tenth of the limit: the pass that picks them reads
# every active item, so it is paid once per many stores. But at most MAX_ITEMS_SLACK more: one
# store archives and condenses them all (a tenth of the default limit took one store 3.6 s).
MAX_ITEMS_SLACK_SHARE: Final = 10
MAX_ITEMS_SLACK: Final = 1_000
# ~200 MB of text: past it `compactor prune` proposes removing the lowest-value archived raw
# items (nothing is ever deleted automatically). Large enough for 100k typical items.
MAX_ARCHIVE_TOKENS_DEFAULT: Final = 50_000_000
FORGET_LEDGER: Final = "forget-ledger.jsonl"
# When a call's own items do not all fit, the ones kept active leave room for this many nodes:
# the summaries covering the rest condense under pressure down to about one per level.
FIT_RESERVE_NODES: Final = 2
LEDGER_MEMORY_MAX: Final = 10_000

# --- persistence --------------------------------------------------------------------------
SNAPSHOT_INTERVAL_S: Final = 30.0
SCHEMA_VERSION: Final = 1
# Snapshot serialisation yields the GIL between chunks so a concurrent call waits at most one
# chunk's worth of orjson work (~1-2 ms), not the whole store's.
SNAPSHOT_CHUNK_ITEMS: Final = 100
# Blocks from this size up get a mapping of their own (runtime.tune_allocator). 1 MiB: a settle's
# arrays are larger, and a 100k-item query's per-document scores (800 KB) stay on the heap, where
# reusing them costs no page faults. At 10k items it lowered a load's peak RSS by ~9 MiB.
MALLOC_MMAP_THRESHOLD: Final = 1 << 20
# The same inside a write (runtime.Runtime.write_work), where an index merge makes its arrays.
# 256 KiB: at 10k items a load's peak RSS fell from 162-164 to 159 MiB with it process-wide,
# but a 100k-item query then ran 25-50% slower, so reads keep the 1 MiB above.
WRITE_MMAP_THRESHOLD: Final = 1 << 18
# GIL switch interval while a background snapshot is written (Python's default is 5 ms): the
# longest a call on the event loop waits for the writer thread each time it needs the GIL.
SNAPSHOT_SWITCH_INTERVAL_S: Final = 0.0005
# A snapshot being written is flushed to disk every this many bytes (see persist._write_fsynced).
SNAPSHOT_SYNC_BYTES: Final = 4 << 20
# The index file is checksummed at load in this many chunks, each read into one buffer (a
# mapping of its own, above MALLOC_MMAP_THRESHOLD, gone once read), of at least the minimum.
# A start checks it on a thread while it parses the items: each read and CRC call releases the
# GIL, and each time the thread takes it back the parse waits, so a 100k-item file (236 MB)
# read 1 MiB at a time made that start ~250 ms slower than 15 chunks of 16 MiB did; but every
# page of a fresh buffer is a page fault, and a 16 MiB buffer for a 10k-item file (27 MB) made
# its start ~15 ms slower than 1 MiB chunks did. Sixteen chunks suit both.
INDEX_FILE_CHECK_CHUNKS: Final = 16
INDEX_FILE_CHECK_MIN_CHUNK: Final = 1 << 20
# The first settle after a start copies the arrays it grows out of the index file's memory
# map, this many bytes at a time with the map's pages dropped after each (`indexfile.copy_out`):
# what the copy maps stays this small, and a release costs ~0.01-2 ms.
INDEX_FILE_COPY_CHUNK: Final = 1 << 20
# A transaction unmaps the index file's pages it has read every this many ops it applies, and at
# its commit if it applied as many (`indexfile.release`): a compaction's merge of a
# near-duplicate reads ~110 KiB of scattered pages of the file, so at most ~30 MiB of them stay
# resident; a release costs ~2 ms.
INDEX_FILE_RELEASE_OPS: Final = 256

# --- summary DAG --------------------------------------------------------------------------
# 20 archived items to a d1 node and 5 nodes to the next depth, up to depth 4: 20 * 5**3 =
# 2,500 raw items under one d4 node, so a 100k-item archive needs ~40 top-level nodes. Past d4 a
# level is added only when the budget cannot hold the d4 nodes (never by mixing levels).
CHUNK_SIZE: Final = 20
FANOUT: Final = 5
MAX_DEPTH: Final = 4
# A node's text (extractive or written) is capped so that condensing always saves tokens:
# 5 children of up to 300 tokens become one node of at most 300.
NODE_MAX_TOKENS: Final = 300
# Neighbours sharing this share of words (or any non-type tag) belong in one group.
CONDENSE_COHERENCE_JACCARD: Final = 0.08
# ...or at least half of its non-type tags in common with the previous item (one shared
# language tag such as "python" is not a thread of work).
CONDENSE_TAG_JACCARD: Final = 0.5
FOOTER_TOPICS: Final = 8
TOPIC_SCAN_CHARS: Final = 4_000
TYPE_TAGS: Final = frozenset({"error", "code", "decision", "tool_output", "prose"})
FRESH_TAIL: Final = 5
NEEDS_TEXT_LIMIT: Final = 3
DEPTH_INSTRUCTIONS: Final = {
    1: "d1: list the decisions and changes made, each with its reason.",
    2: "d2: goal -> outcome -> what carries forward.",
    3: "d3+: durable context only: architecture, preferences, recurring patterns.",
}

# --- human side: CLI, Claude Code hooks, MEMORY.md ---------------------------------------
# Claude Code caps the context a hook adds at 10,000 characters (more is cut to a preview):
# stay under it with room for the JSON envelope.
HOOK_CONTEXT_CHARS: Final = 9_000
# The project's last task as recall's query from the SessionStart hook: the recall tool's own bound.
HOOK_TASK_QUERY_CHARS: Final = 2_000
# ... and as shown above that recall, so the agent knows what it was asked with.
HOOK_TASK_PREVIEW_CHARS: Final = 200
# Pre-compact digest: a transcript can be megabytes; these keep each section to a screenful.
DIGEST_LINE_CHARS: Final = 240
DIGEST_MAX_REQUIREMENTS: Final = 15
DIGEST_MAX_DECISIONS: Final = 12
DIGEST_MAX_ERRORS: Final = 10
DIGEST_MAX_FILES: Final = 40
DIGEST_MAX_TASKS: Final = 15
# Importance of each digest section: what the user asked for outranks what was tried.
DIGEST_IMPORTANCE: Final = {"requirements": 8, "tasks": 7, "decisions": 7, "errors": 6, "files": 5}
# Claude Code's auto-memory types. Each file is something it chose to keep across sessions, so
# all rank above the default; the user's corrections and profile most, a reference (a pointer
# that is cheap to look up again) least. >= MEMORY_EXPORT_MIN_IMPORTANCE exports them back.
MEMORY_TYPE_IMPORTANCE: Final = {"feedback": 8, "user": 8, "project": 7, "reference": 6}
# Claude Code loads the first 200 lines of MEMORY.md; index lines stay short to be read whole.
MEMORY_INDEX_MAX_LINES: Final = 200
MEMORY_INDEX_LINE_CHARS: Final = 150
# An item this important (or pinned) is exported to a MEMORY.md dir.
MEMORY_EXPORT_MIN_IMPORTANCE: Final = 7
# `show` lists at most this many journal entries, and skips a journal bigger than this.
SHOW_JOURNAL_ENTRIES: Final = 30
SHOW_JOURNAL_MAX_BYTES: Final = 32 * 1024 * 1024

# --- search (ISSUE 7) -----------------------------------------------------------------------
# Measured with the replay of bench/replay.py (100 real agent trajectories, 1,746 revisit
# queries); figures are recall@5 / MRR at the generous budget, with the other levers in place.
# Okapi defaults from Robertson & Zaragoza, "The Probabilistic Relevance Framework" (2009).
# The search index merges the terms and postings written since its last merge into its flat
# arrays (compactor.search.vocab) once there are this many new terms, or a thirty-second as many as it
# already holds if that is more. What waits unmerged (~150 bytes a term in Python objects) is
# memory the process keeps once freed, so the largest wait sets a load's peak. A merge after a
# load grows the arrays in place, O(index) numpy moves and an O(new terms) Python pass, so
# merging more often costs little: at 100k items a merge takes ~0.2 s. At 10k items the
# minimum decides, and 16k terms against 32k ends 4 MiB lower and peaks the same.
INDEX_SETTLE_MIN: Final = 16_384
# Items indexed per `add_many` call when the index is rebuilt (a start without a usable saved index,
# `doctor --repair`): batches share the vocabulary lookups; 1,000 items hold a few MiB of terms.
REBUILD_BATCH: Final = 1_000
INDEX_SETTLE_SHARE: Final = 32
# Settled terms remembered in a dict after a lookup: enough for the words a code-and-prose
# corpus repeats in every document (a few thousand), ~2 MiB at most.
VOCAB_HOT_TERMS: Final = 16_384
# A query word no document holds is also searched as its synonyms (wordforms.synonyms: "database"
# for "db"), its other English forms (wordforms.inflections: "pool" for "pools") and its derived
# nouns and verbs (wordforms.derivations: "deployment" for "deploy"), each at this share of the
# weight a term of its rarity has. Known-item queries of a thought's words with some in other
# words, tuning half (bench.other_words), MRR without / at 0.5 / 0.75 / 1: other forms 0.465 /
# 0.733 / 0.776 / 0.779; derived 0.902 / 0.951 / 0.948 / 0.936; two-word queries with a synonym
# 0.576 / 0.738 / 0.741 / 0.742. Queries in the thoughts' own words and resume_fast did not
# move, replay_fast by 0.003 at most. Not 1: a document holding two of the word's other words
# counts both. Levers tried: bench/REPLAY.md.
OTHER_WORD_WEIGHT: Final = 0.75
# Whether a document the query may find (its scope, its tags) holds a query word is asked of
# that word's newest postings, this many at most: a word every project writes would otherwise
# cost a pass over all its documents for each query in a project that does not.
HELD_SCAN_POSTINGS: Final = 256
# Other words are looked up for the first this many words of a query: an agent's query may be
# its whole thought, and each word brings up to ten forms to look up.
EXPANDED_WORDS: Final = 16
BM25_K1: Final = 1.2
BM25_B: Final = 0.75
# BM25F field weight: a term in the summary counts as this many in an average-length body. A
# summary is a headline (the replay stores a tool output's first line, its command): weights
# 1.5 / 3 / 5 / 8 gave 0.858/0.544, 0.904/0.591, 0.917/0.621, 0.922/0.633. 5 takes most of
# the gain while several body matches can still outvote one summary word.
SUMMARY_WEIGHT: Final = 5.0
# Tags are labels (the agent's, plus a few automatic ones such as the language): kept at the
# old weight; 1 measures the same (0.918/0.623 vs 0.917/0.621).
TAG_WEIGHT: Final = 3.0
# Per-field length normalisation: a summary is text, so the usual b (b = 0 gave 0.909/0.600);
# a tag set is not text.
SUMMARY_B: Final = 0.75
TAG_B: Final = 0.0
# Bounded recency prior on search results, by position rather than by clock: retention's
# recency halves per 15-30 min of wall time, which an agent storing a turn every few seconds
# (or replaying a session) never sees, and which idle time would wrongly age. 20 items are ~7
# agent turns (thought, command, output). 1.5x at most, so a clearly better text match still
# wins. Prior (bound, half-life) 0 / (0.25, 20) / (0.5, 10) / (0.5, 20) / (0.5, 50) / (1, 20):
# 0.917/0.621, 0.925/0.631, 0.927/0.645, 0.931/0.638, 0.930/0.630, 0.927/0.648.
RECENCY_PRIOR: Final = 0.5
RECENCY_HALF_LIFE_ITEMS: Final = 20

# --- reports -----------------------------------------------------------------------------------
# Enough example ids to find the damage without flooding a terminal (doctor, derived checks).
REPORT_EXAMPLES: Final = 10
# A writer holds the lock for one fsync'd append (milliseconds) or one snapshot (well under a
# second for 100k items); 5 s without it means a stuck process, and the doctor reads anyway.
DOCTOR_LOCK_WAIT_S: Final = 5.0

# --- file views (views.py) ------------------------------------------------------------------
# A command line longer than this is a script, not a command that shows a file.
VIEW_COMMAND_CHARS: Final = 2_000
# Output lines read for line numbers and the files a grep names: a view's span is decided by
# its first and last numbered lines, and a listing longer than this is cut anyway.
VIEW_SCAN_LINES: Final = 2_000
# A grep over a tree that hits more files than this is a search listing, not a view of each.
VIEW_MAX_PATHS: Final = 8
# Search: a view of a file the query names has its score multiplied by VIEW_PATH_LIFT, and by
# VIEW_RANGE_LIFT more when it shows the lines the query asks for. Chosen on the tuning half of
# the replay (bench/REPLAY.md has the levels tried): a lift that puts the views of a named file
# first, and still bounded, so a far better text match wins.
VIEW_PATH_LIFT: Final = 3.0
VIEW_RANGE_LIFT: Final = 1.25
# An older view whose lines a newer view of the same file also shows: still a view of the file,
# ahead of mere mentions, but behind the newer one (the newest view of a region first).
VIEW_SUPERSEDED_LIFT: Final = 1.5
# An edit in place (sed -i, perl -i) of a named file: it says which lines changed, not what
# they hold, so it is lifted less than a view that shows them.
VIEW_EDIT_LIFT: Final = 1.0
# The newest views of a named file that are lifted: an agent re-reads one file tens of times,
# and the oldest of those views are the least likely to be what it goes back for.
VIEW_LIFT_MAX: Final = 16

# --- PostgreSQL (compactor.persistence.postgres) -------------------------------------------------------------
# The database schema compactor writes; a newer one is refused (upgrade compactor), an older
# one is migrated at start under PG_MIGRATE_LOCK.
PG_SCHEMA_VERSION: Final = 1
# pg_advisory_lock keys: any constant that other software on the same database is unlikely to
# pick; these spell "cmpw" (writers) and "cmpm" (migrations) in ASCII.
PG_WRITE_LOCK: Final = 0x636D7077
PG_MIGRATE_LOCK: Final = 0x636D706D
# LISTEN/NOTIFY channel on which every journal write and history rewrite is announced.
PG_CHANNEL: Final = "compactor_journal"
# A start against an unreachable database fails after this long with a message instead of
# hanging: long enough for a container's PostgreSQL still starting on a LAN, short for a typo.
PG_CONNECT_TIMEOUT_S: Final = 10

# --- streamable HTTP (compactor.mcp.http_server) -------------------------------------------------
# Where the MCP endpoint lives: the SDK's default, and what clients' docs show.
HTTP_PATH: Final = "/mcp"
HTTP_PORT_DEFAULT: Final = 8765
# A shared bearer token shorter than this is guessable or a placeholder left in a config file;
# `openssl rand -hex 32` gives 64.
TOKEN_MIN_CHARS: Final = 16
