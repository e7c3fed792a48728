"""Search: BM25 candidates re-ranked by retention and recency, summary nodes that only repeat
a hit left out, and the access updates a query makes.
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
import logging
import unicodedata
from collections.abc import Callable
from typing import Any, Final

from ..errors import WriteLockTimeoutError
from ..models import ContentType, Item
from ..search import scoring
from ..search.analyze import is_prose
from ..search.index import IndexHit
from ..search.topk import Weights
from ..search.view_query import named_command, parse_query, query_lines, tick_commands
from ..search.views import covers, overlaps
from .journaled import _Journaled
from .records import Hit
from .state import scope_key

# Re-rank the BM25 top max(limit * 3, 30) with retention: deep enough for the bounded lift
# (Rank.max_factor) to matter only between near-ties, shallow enough for the index to prune the rest.
RERANK_DEPTH: Final = 3
RERANK_MIN: Final = 30
# The newest views of a named file that are lifted: an agent re-reads one file tens of times,
# and the oldest of those views are the least likely to be what it goes back for.
VIEW_LIFT_MAX: Final = 16
# A one-line item longer than this is a note, not a command line another item can open with.
ECHO_MAX_CHARS: Final = 500

# What a conversation's turns are: words, not code, a tool's output or an error (a question an
# agent asks itself before running a command is followed by the command, not an answer).
_WORDS: Final[frozenset[ContentType]] = frozenset({"prose", "decision"})
# The end of an item looked at for its question mark: contents run to megabytes.
_TAIL_CHARS: Final = 64
# What a chat writes after a question mark: closing quotes and brackets, a smiley's signs, and
# (by Unicode category: other symbols, modifiers, format characters) emoji and their joiners.
_AFTER_A_QUESTION: Final = frozenset("\"':;-=^")  # closing brackets are category Pe
_SYMBOLS: Final = frozenset({"So", "Sk", "Cf", "Pe", "Pf", "Mn"})

log = logging.getLogger(__name__)

# How long a query waits for the writers' lock to record its access before leaving it to the
# next hold: not at all, in effect (a query must not queue behind writers).
ACCESS_TRY_S = 0.001


def _command_of(line: str) -> str:
    """A command line as written, its `$ ` prompt and spacing aside: what an echo and a re-run
    compare."""
    return " ".join(line.removeprefix("$ ").split())


def _is_words(item: Item) -> bool:
    """An item of words a person wrote (not a summary node, code, a tool's output or an error)."""
    return not item.depth and item.content_type in _WORDS


def _is_question(item: Item) -> bool:
    """Words ending in a question: a turn that hands the word to the other speaker. What may
    follow the question mark: a closing quote or bracket, an emoji or other symbol ("How was
    Paris? :)", 'She asked "why?"')."""
    if not _is_words(item):
        return False
    tail = item.content[-_TAIL_CHARS:].rstrip()
    while tail and (tail[-1] in _AFTER_A_QUESTION or unicodedata.category(tail[-1]) in _SYMBOLS):
        tail = tail[:-1].rstrip()
    return tail.endswith("?")


class _Search(_Journaled):
    """Query ranking and access updates."""

    # Whether a query counts as an access of its hits (journaled); the CLI's reads turn it off.
    record_access: bool = True

    def _search(
        self, text: str, tag_list: list[str], limit: int, include_archived: bool, scopes: frozenset[str] | None
    ) -> list[Hit]:
        s, tuning = self._s, self._tuning
        rank, weights = tuning.rank, tuning.bm25
        prose = bool(text) and is_prose(text)  # a question in words (the recency prior, replies)
        if prose and tuning.prose_recency_prior != rank.recency_prior:
            rank = dataclasses.replace(rank, recency_prior=tuning.prose_recency_prior)
        now = self._clock()
        allowed: set[str] | None = None

        def accept(item_id: str) -> bool:
            if allowed is not None and item_id not in allowed:
                return False
            item = s.items[item_id]
            if scopes is not None and scope_key(item.scope) not in scopes:
                return False
            return include_archived or item.tier == "active"

        if not text:
            return self._by_tags(tag_list, limit, accept, now)  # the ranks hold only the tags' items
        if tag_list:
            allowed = set()
            for tag in tag_list:
                allowed |= s.by_tag.get(tag.lower(), set()) | s.by_tag.get(tag, set())

        # Retention and the recency prior lift a BM25 score by at most rank.max_factor,
        # so the final top `limit` is drawn from the BM25 top few times `limit`: a hit below
        # that would need a relevance far under the leaders' to overtake them, which the bound
        # rules out in practice, and the index can prune everything deeper.
        fetch = max(limit * RERANK_DEPTH, RERANK_MIN)
        # Asking the filter about every candidate costs more than the ranking itself; skip it
        # when it would accept everything (one scope, nothing archived or archived wanted).
        accepts_all = (
            allowed is None
            and (include_archived or not s.order["archived"])
            and (scopes is None or s.scope_order.keys() <= scopes)
        )
        weighed: list[tuple[str, int]] = []  # the query's terms, for the hits' matched terms
        raw = s.index.search(
            text,
            limit=fetch,
            accept=None if accepts_all else accept,
            with_matched=False,
            weights=weights,
            terms_out=weighed,
        )
        replies: dict[str, str] = {}  # reply id -> the question it gained from
        if prose and tuning.reply_weight and raw:
            raw = self._with_replies(text, raw, None if accepts_all else accept, weights, replies)
        lifts: dict[str, float] = {}
        mentioned = self._lift_reruns(text, raw, lifts, tuning.rerun_lift) if tuning.rerun_lift != 1.0 else []
        if len(s.views):
            asked = tick_commands(text, mentioned) if mentioned else text
            for item_id, factor in self._view_lifts(asked).items():
                lifts[item_id] = max(lifts.get(item_id, 1.0), factor)
        if lifts:
            # Views of the named file are candidates even when BM25 alone ranks them deeper.
            have = {h.doc_id for h in raw}
            wanted = {i for i in lifts if i not in have and (accepts_all or accept(i))}
            if wanted:
                raw.extend(s.index.score_docs(text, sorted(wanted), None if accepts_all else accept, weights=weights))
                raw.sort(key=lambda h: -h.score)
        bound = rank.max_factor * max(lifts.values(), default=1.0)
        newest = s.next_seq - 1

        def score(relevance: float, it: Item) -> float:
            return scoring.rank_score(relevance, it, now, newer=newest - it.seq, rank=rank) * lifts.get(it.id, 1.0)

        scored: list[tuple[float, Item]] = []
        leaders: list[float] = []  # min-heap of the `limit` best final scores so far; leaders[0] is the cut
        for h in raw:  # BM25 best first: once even the largest lift cannot reach the cut, stop
            if len(leaders) == limit and h.score * bound * (1.0 + 1e-12) < leaders[0]:
                break
            it = s.items[h.doc_id]
            final = score(h.score, it)
            scored.append((final, it))
            if len(leaders) < limit:
                heapq.heappush(leaders, final)
            elif final > leaders[0]:
                heapq.heapreplace(leaders, final)
        scored.sort(key=lambda pair: (-pair[0], -pair[1].seq))
        echoes = self._echoes(scored, limit) if tuning.echo_factor != 1.0 else set()
        if echoes:
            # Demoting an echo lowers the cut, so the hits past the early stop are scored too.
            for h in raw[len(scored) :]:
                it = s.items[h.doc_id]
                scored.append((score(h.score, it), it))
            factor = tuning.echo_factor
            scored = [(final * factor if it.id in echoes else final, it) for final, it in scored]
            scored.sort(key=lambda pair: (-pair[0], -pair[1].seq))
        top = scored[:limit]
        if any(it.depth and it.id in self._covering(top) for _, it in top):
            # A summary node found with an item it covers only repeats extracts of that item, whose
            # hit names it (covered_by): leave the node out. That lowers the cut, so the hits past
            # the early stop are scored too.
            for h in raw[len(scored) :]:
                it = s.items[h.doc_id]
                scored.append((score(h.score, it), it))
            scored.sort(key=lambda pair: (-pair[0], -pair[1].seq))
            dropped: set[str] = set()
            while True:
                top = [pair for pair in scored if pair[1].id not in dropped][:limit]
                covering = self._covering(top)
                newly = {it.id for _, it in top if it.depth and it.id in covering} - dropped
                if not newly:
                    break
                dropped |= newly
        matched = s.index.matched_terms(
            [it.id for _, it in top], text, None if accepts_all else accept, weights=weights, terms=weighed
        )
        return [Hit(it, final, terms, replies.get(it.id)) for (final, it), terms in zip(top, matched, strict=True)]

    def _by_tags(self, tag_list: list[str], limit: int, accept: Callable[[str], bool], now: float) -> list[Hit]:
        """A query by tags alone: the `limit` items of those tags with the best rank score (the
        newest first among equals), read best bound first from the tag ranks (`tag_keys`),
        stopping once no bound left can reach the `limit`-th best score. The bounds are the
        default `Rank`'s: a Store tuned otherwise scores every item of the tags."""
        s, rank = self._s, self._tuning.rank
        exact_bounds = rank == scoring.RANK
        best: list[tuple[float, int, str]] = []  # min-heap of the best `limit` (score, seq, id)
        for neg_bound, _, item_id in s.tag_keys(name for tag in tag_list for name in (tag.lower(), tag)):
            if exact_bounds and len(best) == limit and -neg_bound < best[0][0]:
                break
            if not accept(item_id):
                continue
            it = s.items[item_id]
            entry = (scoring.rank_score(1.0, it, now, rank=rank), it.seq, item_id)
            if len(best) < limit:
                heapq.heappush(best, entry)
            elif entry > best[0]:
                heapq.heapreplace(best, entry)
        return [Hit(s.items[i], score, ()) for score, _, i in sorted(best, reverse=True)]

    def _with_replies(
        self,
        text: str,
        raw: list[IndexHit],
        accept: Callable[[str], bool] | None,
        weights: Weights,
        replies: dict[str, str],
    ) -> list[IndexHit]:
        """`raw` with each reply to a question among its best `reply_sources` matches gaining
        that question's score times `reply_weight`: in a conversation the answer is the turn
        after the question ("How did the home visit go?" - "Bernadette came round ..."), and
        shares few words with it. A question is words (not code, output or an error) ending in
        "?"; its reply the next item stored in its project, words too, neither a summary node.
        A reply the query did not reach is scored and added. `replies` receives each reply's
        question (the best-scoring one, when two lend to one reply: never, in practice)."""
        s, tuning = self._s, self._tuning
        items = s.items
        lent: dict[str, float] = {}
        for h in raw[: int(tuning.reply_sources)]:
            question = items[h.doc_id]
            if not _is_question(question):
                continue
            reply = self._next_in_scope(question)
            if reply is None or not _is_words(reply):
                continue
            if h.score * tuning.reply_weight > lent.get(reply.id, 0.0):
                lent[reply.id] = h.score * tuning.reply_weight
                replies[reply.id] = question.id
        if not lent:
            return raw
        have = {h.doc_id for h in raw}
        missing = sorted(i for i in lent if i not in have and (accept is None or accept(i)))
        own = {h.doc_id: h.score for h in s.index.score_docs(text, missing, accept, weights=weights)} if missing else {}
        out = [h._replace(score=h.score + lent[h.doc_id]) if h.doc_id in lent else h for h in raw]
        out += [IndexHit(i, own.get(i, 0.0) + lent[i], ()) for i in missing]
        out.sort(key=lambda h: -h.score)
        return out

    def _next_in_scope(self, item: Item) -> Item | None:
        """The item stored next in `item`'s project, active or archived: on a server that many
        projects share, the next item stored at all may be another project's."""
        s = self._s
        per = s.scope_order.get(scope_key(item.scope), {})
        after = [seqs[i] for seqs in per.values() if (i := bisect.bisect_right(seqs, item.seq)) < len(seqs)]
        return s.items[s.by_seq[min(after)]] if after else None

    def _lift_reruns(self, text: str, raw: list[Any], lifts: dict[str, float], lift: float) -> list[str]:
        """Lift the candidates that are the output of a command the query names on a line of
        its own, in backticks, or (`rerun_in_prose`) as written inside a sentence: an output
        stored with its `$ cmd` line opens with it. Only the candidates already fetched are
        looked at (no index of first lines). Returns the commands found inside sentences."""
        commands = {_command_of(line) for line in query_lines(text)}
        commands = {c for c in commands if len(c) <= ECHO_MAX_CHARS}
        flat = " ".join(text.split()) if self._tuning.rerun_in_prose else ""
        mentioned: list[str] = []
        if not commands and not flat:
            return mentioned
        items = self._s.items
        for h in raw:
            it = items[h.doc_id]
            content = it.content
            if it.depth or not (content.startswith("$ ") or content[:1].isspace()):
                continue
            head = content[: ECHO_MAX_CHARS + 64].lstrip()  # a slice: contents run to megabytes
            if not head.startswith("$ "):
                continue
            cut = head.find("\n", 0, ECHO_MAX_CHARS + 3)
            cmd = _command_of(head[: cut if cut >= 0 else len(head)])
            named = None if cmd in commands or not flat else named_command(flat, cmd)
            if cmd not in commands and named is None:
                continue
            lifts[it.id] = max(lifts.get(it.id, 1.0), lift)
            if named is not None:
                mentioned.append(named)
        return mentioned

    def _echoes(self, scored: list[tuple[float, Item]], limit: int) -> set[str]:
        """The one-line items of the top `limit` whose line opens another candidate: a command
        stored alone, behind the output stored with its `$ cmd` line, holds nothing that output
        does not, and the output is what a re-run looks for."""
        lines: dict[str, str] = {}
        for _, it in scored[:limit]:
            line = it.content.strip()
            if not it.depth and len(line) <= ECHO_MAX_CHARS and "\n" not in line:
                lines.setdefault(_command_of(line), it.id)
        found: set[str] = set()
        if not lines:
            return found
        for _, it in scored:
            body = it.content[: ECHO_MAX_CHARS + 64].lstrip()  # a slice: contents run to megabytes
            cut = body.find("\n", 0, ECHO_MAX_CHARS + 3)
            if it.depth or cut < 0:
                continue  # a one-line item opens nothing; a summary node repeats, it does not answer
            echo = lines.get(_command_of(body[:cut]))
            if echo is not None:
                found.add(echo)
        return found

    def _view_lifts(self, text: str) -> dict[str, float]:
        """Item id -> score multiplier for the file views of the paths a query names: a view of
        the file ranks ahead of items that only mention it, one showing the lines asked for
        further ahead, and an older view whose lines a newer view of the file also shows gets
        a smaller lift (the newest view of a region first)."""
        s, tuning = self._s, self._tuning
        query = parse_query(text, known=s.views)
        if query is None:
            return {}
        found = sorted((s.items[i] for i in s.views.lookup(query.paths, VIEW_LIFT_MAX)), key=lambda it: -it.seq)
        # The views that hold a symbol the query names (a grep's pattern, a `name`): those show
        # what it asks for, another view of the same file does not. Told apart only when some do.
        holders = {it.id for it in found if any(sym in it.content for sym in query.symbols)}
        lifts: dict[str, float] = {}
        newer: list[Item] = []
        for it in found[:VIEW_LIFT_MAX]:
            lines = (it.file_lines[0], it.file_lines[1]) if len(it.file_lines) == 2 else None
            shown = set(it.file_paths)
            if any(
                covers((n.file_lines[0], n.file_lines[1]), lines) and shown & set(n.file_paths)
                for n in newer
                if len(n.file_lines) == 2
            ):
                lifts[it.id] = tuning.view_superseded_lift
                continue
            if it.file_command == "edit":
                # An edit names the lines it changed but does not show them.
                lifts[it.id] = tuning.view_edit_lift
                continue
            newer.append(it)
            lift = tuning.view_path_lift
            if query.lines is not None and overlaps(lines, query.lines):
                lift *= tuning.view_range_lift
            if it.id in holders:
                lift *= tuning.view_symbol_lift
            lifts[it.id] = lift
        return lifts

    def _covering(self, hits: list[tuple[float, Item]]) -> set[str]:
        """Every summary node above the hits in the DAG: O(hits * depth), never the store."""
        items = self._s.items
        seen: set[str] = set()
        stack = [p for _, it in hits for p in it.parents]
        while stack:
            node_id = stack.pop()
            if node_id not in seen and node_id in items:
                seen.add(node_id)
                stack.extend(items[node_id].parents)
        return seen

    def _touch(self, ids: list[str]) -> None:
        """A query is an access: recorded under the writers' lock when it is free now, else
        with this server's next hold of it (`_Journaled._locked` flushes what is noted), so a
        query never waits for writers. Not recorded when `record_access` is off (a command that
        only reads)."""
        if not ids or not self.record_access:
            return
        self._note_accesses(ids)
        backend = self._backend
        if backend is None or backend.held_here:
            # Memory of this process alone, or a read that holds the writers' lock itself (a
            # state dir's catch-up takes it when it is free): record it in that hold.
            with self._locked():
                self._flush_accesses()
            return
        try:
            with self._locked(wait_s=ACCESS_TRY_S):
                pass  # taking the lock flushes what is noted
        except WriteLockTimeoutError as exc:
            log.debug("access times kept for the next hold of the writers' lock: %s", exc)
