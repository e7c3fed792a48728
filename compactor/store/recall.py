"""Recall: a context assembled within `recall_tokens` in groups (pinned, related to the task,
recent work, summaries, the most valuable of the rest), rendered one line per entry, with the
nodes that need the agent's text.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Collection, Iterable
from operator import itemgetter
from typing import Final, NamedTuple

from .. import bounds
from .. import constants as C
from ..errors import InvalidArgumentError
from ..models import Item
from ..render import budget_line, counted, recall_line
from ..search import scoring
from ..summaries.condense import depth_instruction, gist
from .dag import NEEDS_TEXT_LIMIT, _Dag
from .paging import _Paging
from .records import Recall
from .search import _Search
from .state import scope_key

# Reserved in recall's cap for its closing "Left out: ..." line.
RECALL_FOOTER_TOKENS: Final = 100
# Reserved per group header of recall ("Recent work (12, newest first; ...):" is ~20 tokens).
RECALL_HEADER_TOKENS: Final = 24
# Recall asks the search for limit * this many hits for its task group: the group skips hits already
# shown and older views of a file, and the cap ends it long before the last hit.
RECALL_TASK_FETCH: Final = 3
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

# The groups of a recall, in the order shown; each header states its ordering and its score.
_GROUPS = ("pinned", "task", "errors", "recent", "decisions", "summaries", "valuable")
_HEADERS = {
    "pinned": "Pinned ({n}, newest first):",
    "task": "Related to the task ({n}, best match first; score = search relevance):",
    "errors": "Open errors ({n}, newest first; no later success on the same command or file):",
    "recent": "Recent work ({n}, newest first; one entry per file or command, its newest view):",
    "decisions": "Decisions ({n}, newest first):",
    "summaries": "Summaries of older work ({n}, newest first; expand(id) for their items):",
    "valuable": "Most valuable of the rest ({n}, highest first; score = retention):",
}
_FOLD = re.compile(r"\s+")
_FILEISH = re.compile(r"/|\b[\w-]+\.[A-Za-z]\w{0,5}\b")  # a path or a file name: the line is a view of it
_PATH = re.compile(r"[\w.~/+-]*(?:/[\w.+-]+|\.[A-Za-z]\w{0,5})")  # one argument that names a file
_CHAIN = re.compile(r"&&|;|\|\|")
_EXCEPTION = re.compile(r"^(?:E +)?((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception)\b.*)$", re.M)
_HEX = re.compile(r"0x[0-9a-fA-F]+")
_DUP_FD = re.compile(r"\d?>&\d")  # 2>&1: where errors go, not a write to a file
# A later item that says an error is fixed and quotes its exception line settles it, as a later
# success of the same command does (an agent stores "Fixed KeyError: 'currency' by ...").
_FIXED = re.compile(r"\b(?:fix(?:ed|es)?|resolved|solved)\b", re.I)
# Newest fix notes an open error is checked against: the recall window's few, not a scan.
_FIX_NOTES_MAX = 50


def _file_of(command: str) -> str:
    """The one file a shell command shows or writes whole: a reader of one file (`cat a.py`,
    `sed -n 1,9p a.py`, `nl -ba a.py | sed ...`) or a write by redirect (`cat <<EOF > a.py`);
    "" for anything else (a search, an in-place edit, a run)."""
    head = command.split("|", 1)[0]
    parts = [p.strip() for p in _CHAIN.split(head)]
    part = next((p for p in parts if p and not p.startswith("cd ")), "")
    words = [w for w in part.split() if not _DUP_FD.fullmatch(w)]
    if not words or words[0].rsplit("/", 1)[-1] not in RECALL_FILE_READERS:
        return ""
    if any(w.startswith("<<") for w in words):  # a here-document written to a file: its whole new text
        targets = [
            nxt if w == ">" else w[1:] for w, nxt in zip(words, [*words[1:], ""], strict=True) if w.startswith(">")
        ]
        target = targets[0].strip("'\"") if len(targets) == 1 and not targets[0].startswith(">") else ""
        return target if _PATH.fullmatch(target) else ""
    if any(w.startswith(("-i", "--in-place", ">")) or ">" in w for w in words[1:]):
        return ""  # an in-place edit or an append: not a view of the file
    paths = [w.strip("'\"") for w in words[1:] if not w.startswith("-")]
    paths = [w for w in paths if _PATH.fullmatch(w)]
    return paths[0] if len(paths) == 1 else ""


def _subject_of(first: str, whole: bool) -> str:
    """What an item whose first line is `first` is a view of (`whole`: that line is all of it)."""
    command = first.startswith("$ ")
    if not command and not whole and not _FILEISH.search(first):
        return ""  # prose: two notes that open alike are still two notes
    line = _FOLD.sub(" ", first.removeprefix("$ ").strip())
    path = _file_of(line)
    return f"file {path}" if path else line.lower()


def _subject(it: Item) -> str:
    """What an item is a view of: a file (the newest view of a file stands for it: a `cat a.py`,
    a `sed -n 5,9p a.py`, a heredoc that wrote a.py), else a command (a command `pytest x` and its
    output `$ pytest x`), else, for a one-line item, its text; "" for prose."""
    text = (it.content or "").lstrip()
    end = text.find("\n", 0, RECALL_VIEW_KEY_CHARS)
    if end < 0:
        first, whole = text[:RECALL_VIEW_KEY_CHARS], len(text) <= RECALL_VIEW_KEY_CHARS
    else:
        first, whole = text[:end], len(text) - end < RECALL_VIEW_KEY_CHARS and text[end:].isspace()
    return _subject_of(first.rstrip(), whole)


def _error_line(text: str) -> str:
    """The last exception line of an error's output (`KeyError: 'currency'`), addresses masked:
    what tells two failures of one command apart; "" when there is none."""
    found = _EXCEPTION.findall(text[-RECALL_ERROR_TAIL_CHARS:])
    return _HEX.sub("0x?", found[-1].strip())[:RECALL_VIEW_KEY_CHARS] if found else ""


def _fixed_by(exception: str, notes: Iterable[str]) -> bool:
    """Whether a newer note that says something is fixed quotes an error's exception line."""
    return bool(exception) and any(exception in note for note in notes)


def _is_bare(it: Item) -> bool:
    """A command alone on its line (`cat a.py`), without the output that would show the file."""
    text = it.content
    return len(text) <= RECALL_VIEW_KEY_CHARS and "\n" not in text.strip() and not text.lstrip().startswith("$ ")


def _is_error(it: Item) -> bool:
    return it.content_type == "error" or "error" in it.tags


class _Facts(NamedTuple):
    """What recall reads from an item, worked out once per item version: its subject, whether
    it is a bare command or an error, and its unscored entry with that entry's tokens."""

    item: Item
    subject: str  # a command's failures are told apart by their exception line
    command: str  # the subject without that line: what a later success settles
    bare: bool
    error: bool
    exception: str  # an error's exception line, spacing folded ("" for any other item)
    says_fixed: bool  # a note that says something is fixed (it may settle an older error)
    line: str
    line_tokens: int


class _Recall(_Paging, _Search, _Dag):
    """Recall assembly and rendering."""

    # Item id -> its facts; an entry counts only while it is for the item version in memory.
    _facts_cache: dict[str, _Facts] | None = None

    def _facts(self, window: list[Item]) -> list[_Facts]:
        cache = self._facts_cache
        if cache is None or len(cache) > RECALL_SUBJECT_CACHE:
            cache = self._facts_cache = {}
        out = []
        for it in window:
            f = cache.get(it.id)
            if f is None or f.item is not it:
                command = "" if it.depth else _subject(it)
                error = _is_error(it)
                exception = _error_line(it.content) if error else ""
                line = exception if command and not command.startswith("file ") else ""
                subject = f"{command} => {line}" if line else command
                fixed = not error and _FIXED.search(it.content) is not None
                f = _Facts(it, subject, command, _is_bare(it), error, _FOLD.sub(" ", exception), fixed, "", -1)
                cache[it.id] = f
            out.append(f)
        return out

    def _entry(self, it: Item, score: float | None) -> tuple[str, int]:
        """An item's recall line and its tokens, the line counted once per item version. A score
        is a word of its own (" 12.34" between the id and the tags), so it adds its own tokens;
        the rendered whole is counted exactly before recall returns."""
        cache = self._facts_cache if self._facts_cache is not None else {}
        f = cache.get(it.id)
        if f is not None and f.item is it and f.line_tokens >= 0:
            line, cost = f.line, f.line_tokens
        else:
            line = recall_line(it, None)
            cost = self.counter.count(line)
            if f is not None and f.item is it:
                cache[it.id] = f._replace(line=line, line_tokens=cost)
        if score is None:
            return line, cost
        mark = f" {score:.2f}"
        return recall_line(it, score), cost + self.counter.count(mark)

    def recall(
        self, limit: int = 20, query: str | None = None, scope: str | None = None, exclude: Collection[str] = ()
    ) -> Recall:
        """A context assembled within `recall_tokens`, in groups an agent can scan: pinned items,
        items related to the task (`query`), open errors (no later success on the same command or
        file), recent work (one entry per file or command, its newest view), decisions, summaries
        of older work, then the most valuable of the rest. Each group has one ordering and at most
        one kind of score, stated in its header; no item appears twice, and a file or command is
        shown by its newest view wherever it appears; `limit` bounds each group's entries but the
        last, which fills what is left of the token cap (so a small limit cannot leave the cap
        half used); the cap bounds the whole. Ids in `exclude` are left out (the caller shows
        them otherwise)."""
        if not 1 <= limit <= C.LIST_LIMIT_MAX:
            raise InvalidArgumentError(bounds.must_be("limit", bounds.integer(1, C.LIST_LIMIT_MAX), limit))
        with self._read():
            s = self._s
            now = self._clock()
            cap = self.settings.recall_tokens
            count = self.counter.count
            scopes = self._scopes(scope)
            seqs = self._visible_seqs("active", scopes)
            # Items the caller shows apart (`exclude`) are neither shown here nor left out.
            apart = sum(
                1
                for i in set(exclude)
                if (it := s.items.get(i)) is not None
                and it.tier == "active"
                and (scopes is None or scope_key(it.scope) in scopes)
            )
            active_count = len(seqs) - apart
            text = (query or "").strip()
            head = budget_line(s.used, self.settings.token_budget, len(s.order["active"]), len(s.order["archived"]))
            groups: dict[str, list[tuple[Item, float | None, str]]] = {g: [] for g in _GROUPS}
            shown: set[str] = set(exclude)
            views: set[str] = set()
            left_out: list[str] = []
            # Header and footer are part of the output the cap bounds.
            tokens = count(head) + RECALL_FOOTER_TOKENS

            # One walk over the newest items: what each is a view of, the newest view of each
            # file or command, open errors, decisions and summaries, newest first.
            window = [s.items[s.by_seq[q]] for q in reversed(seqs[-RECALL_SCAN_MAX:])]
            facts: dict[str, _Facts] = {}
            newest: dict[str, Item] = {}
            succeeded: set[str] = set()
            fix_notes: list[Item] = []  # newer items that say something is fixed
            # An error with no later success on its command or file, and how many fix notes are
            # newer: whether one of those settles it is asked only of the errors recall shows.
            errors: list[tuple[Item, int]] = []
            decisions: list[Item] = []
            summaries: list[Item] = []
            recent: list[Item] = []
            bare: dict[str, Item] = {}  # a command with no output yet: not a view of what it shows
            commands: set[str] = set()  # the commands or files of the views shown
            for f in self._facts(window):
                it, key, command, is_bare, is_error = f.item, f.subject, f.command, f.bare, f.error
                if it.pinned:
                    continue
                if it.depth:
                    summaries.append(it)
                    continue
                facts[it.id] = f
                recent.append(it)
                if is_error:
                    if not command or command not in succeeded:
                        errors.append((it, len(fix_notes)))
                else:
                    if command and not is_bare:
                        # A later success on the same command or file settles the error; the
                        # command typed again without its output yet does not.
                        succeeded.add(command)
                    if f.says_fixed and len(fix_notes) < _FIX_NOTES_MAX:
                        fix_notes.append(it)
                if it.content_type == "decision":
                    decisions.append(it)
                if key:
                    (bare if is_bare else newest).setdefault(key, it)
            for key, it in bare.items():
                newest.setdefault(key, it)

            def take(group: str, it: Item, score: float | None, until: float) -> bool:
                """Add `it` (or, for an older view of a file or command, its newest view) to
                `group` if it is new and fits under `until` tokens; False when the group or the
                share is full (the caller stops feeding it)."""
                nonlocal tokens
                key = (facts.get(it.id) or self._facts([it])[0]).subject
                if key:
                    if key in views:
                        return True  # this file or command is already shown
                    it = newest.get(key, it)
                f = facts.get(it.id) or self._facts([it])[0]
                if f.bare and f.command in commands:
                    return True  # a command typed again, without output: a view of it is shown
                if it.id in shown:
                    return True
                entries = groups[group]
                if len(entries) >= limit and group != "valuable":
                    return False
                line, cost = self._entry(it, score)
                cost += 0 if entries else RECALL_HEADER_TOKENS
                if tokens + cost > until:
                    left_out.append(it.id)
                    return False
                entries.append((it, score, line))
                shown.add(it.id)
                if key:
                    views.add(key)
                    commands.add(f.command)
                tokens += cost
                return True

            pinned = sorted(
                (it for it in map(s.items.__getitem__, s.pinned) if scopes is None or scope_key(it.scope) in scopes),
                key=lambda it: -it.seq,
            )
            for it in pinned:
                if not take("pinned", it, None, cap):
                    break
            if text:
                share = tokens + cap * self._tuning.recall_task_share
                for h in self._search(text, [], min(C.QUERY_LIMIT_MAX, limit * RECALL_TASK_FETCH), True, scopes):
                    if not h.item.pinned and not take("task", h.item, h.score, share):
                        break
            texts: dict[str, str] = {}  # fix notes, spacing folded: made only when an error asks

            def folded(note: Item) -> str:
                if note.id not in texts:
                    texts[note.id] = _FOLD.sub(" ", note.content)
                return texts[note.id]

            share = tokens + cap * self._tuning.recall_errors_share
            for it, newer_notes in errors:
                if _fixed_by(facts[it.id].exception, map(folded, fix_notes[:newer_notes])):
                    continue
                if not take("errors", it, None, share):
                    break
            share = tokens + (cap - tokens) * self._tuning.recall_recent_share
            for it in recent:
                if not take("recent", it, None, share):
                    break
            share = tokens + (cap - tokens) * self._tuning.recall_decisions_share
            for it in decisions:
                if not take("decisions", it, None, share):
                    break
            for it in summaries[:limit]:
                if not take("summaries", it, None, cap):
                    break
            if tokens < cap and len(groups["recent"]) < limit:  # the rest of the cap: more recent work
                for it in recent:
                    if not take("recent", it, None, cap):
                        break
            if tokens < cap - RECALL_HEADER_TOKENS:
                # Retention is dominated by importance: score only the most important of the newest
                # RECALL_SCAN_MAX (older work is what the summaries group stands for).
                retention = scoring.retention
                candidates = heapq.nlargest(
                    limit * RECALL_VALUABLE_CANDIDATES,
                    ((it.importance, it.seq, it) for it in window if it.id not in shown and not it.pinned),
                    key=itemgetter(0, 1),
                )
                scored = ((retention(it, now), it.seq, it) for _, _, it in candidates)
                for r, _, it in sorted(scored, key=itemgetter(0, 1), reverse=True):
                    if not take("valuable", it, r, cap):
                        break

            while True:
                rendered, needs = self._render_recall(head, groups, left_out, active_count, cap, scope, apart)
                tokens = count(rendered)
                last = next((g for g in reversed(_GROUPS) if groups[g]), None)
                if tokens <= cap or last is None:
                    break
                # Headers and the footer cost more than reserved: drop the lowest-priority entry.
                left_out.insert(0, groups[last].pop()[0].id)
            ordered = [e for g in _GROUPS for e in groups[g]]
            shown_pinned = [e[0] for e in groups["pinned"]]
            items = [(e[0], e[1] or 0.0) for g in _GROUPS[1:] for e in groups[g]]
            # A query's archived hits are shown too; `more` counts the active items left out.
            more = max(active_count - sum(e[0].tier == "active" for e in ordered), 0)
            return Recall(
                pinned=shown_pinned,
                items=items,
                lines=[e[2] for e in ordered],
                more=more,
                tokens=tokens,
                left_out=[i for i in dict.fromkeys(left_out) if i not in shown][:20],
                needs_text=needs,
                text=rendered,
            )

    def _render_recall(
        self,
        head: str,
        groups: dict[str, list[tuple[Item, float | None, str]]],
        left_out: list[str],
        active_count: int,
        cap: int,
        scope: str | None,
        apart: int = 0,
    ) -> tuple[str, list[str]]:
        body = [head]
        for g in _GROUPS:
            entries = groups[g]
            if entries:
                body.append(_HEADERS[g].format(n=len(entries)))
                body.extend(e[2] for e in entries)
        n_shown = sum(len(v) for v in groups.values())
        if not n_shown:
            if not self._s.items:
                body.append("Memory is empty.")
            elif not active_count and apart:
                body.append(f"No active items besides the {counted(apart, 'item')} shown apart.")
            elif not active_count:
                body.append(f"No active items in scope {self.scope!r} (other projects' items exist; scope='all').")
            else:
                body.append("No active items fit within recall_tokens.")
        more = active_count - sum(e[0].tier == "active" for v in groups.values() for e in v)
        if more > 0:
            shown = {e[0].id for v in groups.values() for e in v}
            sample = ", ".join([i for i in dict.fromkeys(left_out) if i not in shown][:8])
            body.append(
                f"Left out: {counted(more, 'active item')}{' (e.g. ' + sample + ')' if sample else ''}. "
                f"Reach {'it' if more == 1 else 'them'} with query(...), get(id), or expand(<summary id>)."
            )
        needs: list[str] = []
        waiting = self._needs_text(scope)
        used = self.counter.count("\n".join(body)) if waiting else 0
        for node_id in waiting:
            block = self._needs_text_block(self._s.items[node_id], children=5)
            cost = self.counter.count(block) + 1
            if used + cost > cap:
                break
            body.append(block)
            needs.append(node_id)
            used += cost
        return "\n".join(body), needs

    def _needs_text_block(self, node: Item, children: int = 8) -> str:
        """What an agent needs to write a node's text: the depth's instruction and previews."""
        kids = [self._s.items[c] for c in node.children if c in self._s.items]
        lines = [
            f"Summary {node.id} (d{node.depth}, {len(kids)} children) needs text. {depth_instruction(node.depth)} "
            f"Write it with update(id={node.id!r}, summary=...)."
        ]
        lines.extend(f"  - {c.id}: {gist(c, 100)}" for c in kids[:children])
        if len(kids) > children:
            lines.append(f"  - … {len(kids) - children} more: expand({node.id!r})")
        return "\n".join(lines)

    def needs_text_blocks(self, limit: int = NEEDS_TEXT_LIMIT, scope: str | None = None) -> list[tuple[Item, str]]:
        """Nodes with stand-in text in the read scope (`_scopes`), each with what its text needs."""
        with self._read():
            return [
                (self._s.items[n], self._needs_text_block(self._s.items[n])) for n in self._needs_text(scope)[:limit]
            ]
