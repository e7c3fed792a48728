"""Seeded, realistic working-memory corpus and the queries run against it.

Items look like what a coding agent stores: errors with stack traces (Python, Go, JavaScript),
Python/Go/TypeScript code, shell tool output, decisions, and prose full of identifiers and
paths. Lengths are log-normal and clamped to 50..5,000 characters. A few percent are near
duplicates of earlier items (the same error seen twice), so compaction's deduplication has work.

Everything derives from one ``random.Random(seed)``: the same seed gives the same corpus on any
machine and any PYTHONHASHSEED (no set or dict iteration order reaches the output).
"""

from __future__ import annotations

import math
import random
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

# --- tuning constants (lead: move to compactor/constants.py if wanted) -------------------------
LENGTH_MEDIAN_CHARS = 450  # typical stored note/trace; mean ~680 with the sigma below
LENGTH_SIGMA = 0.9  # 5th..95th percentile ~100..2,000 chars, a long tail up to the cap
MIN_CHARS = 50  # the issue's lower bound for item length
MAX_CHARS = 5_000  # the issue's upper bound for item length
NEAR_DUPLICATE_RATE = 0.04  # an agent re-storing the same error/output now and then
PINNED_RATE = 0.01  # agents pin little
NAME_POOL_SIZE = 20_000  # project-specific names (services, customers, hosts): rare per item
KIND_WEIGHTS: dict[str, float] = {  # rough mix of what agents store
    "error": 0.22,
    "code": 0.22,
    "tool_output": 0.22,
    "decision": 0.12,
    "prose": 0.22,
}
SUMMARY_RATE: dict[str, float] = {  # agents summarise errors and decisions more often
    "error": 0.5,
    "code": 0.3,
    "tool_output": 0.2,
    "decision": 0.6,
    "prose": 0.2,
}
# -----------------------------------------------------------------------------------------------

KINDS: tuple[str, ...] = tuple(KIND_WEIGHTS)


def _split(text: str) -> tuple[str, ...]:
    return tuple(text.split())


_WORDS = _split(
    "account invoice ledger tenant billing payment refund order cart checkout shipment parcel "
    "route shard replica cluster node queue topic consumer producer offset partition batch job "
    "worker scheduler cron retry backoff timeout deadline budget quota limit token session cookie "
    "user profile avatar upload bucket object blob chunk manifest snapshot journal index posting "
    "cursor page filter query search rank score vector embedding model feature flag rollout canary "
    "config secret vault cert handshake socket stream buffer frame codec parser lexer render "
    "template layout widget button modal form field schema migration column table row record "
    "event handler listener hook plugin adapter driver client server proxy gateway router "
    "middleware cache entry eviction ttl lease lock mutex semaphore channel pool connection "
    "transaction commit rollback snapshot metric counter gauge histogram trace span log alert "
    "report export import sync merge diff patch build artifact image container volume mount "
    "deploy release version tag branch review pipeline stage step runner agent memory summary "
    "compact archive restore pin budget window context prompt reply tool call result error"
)

_ACRONYMS = ("HTTP", "JSON", "SQL", "API", "URL", "TLS", "GRPC", "UUID", "IO", "DB")

_SYLLABLES = _split(
    "qu or van tel brix mor zen dal kir pha lum nex tor vel sar bri cor dax fen gil hal "
    "jor kas lir mab nor pel quin ras sol tam ulm vor wex yar zol ark bel cyn dor eld"
)

_STOPWORDS = frozenset(
    _split(
        "the and for with that this from into when then than have has was were are not but you "
        "our use used using will would should could after before over under because while which "
        "where there their them they its also only just more most some such each every other"
    )
)

_SHELL_COMMANDS = (
    "ls -la",
    "git status",
    "pytest -q",
    "docker ps",
    "grep -rn",
    "npm install",
    "kubectl get pods",
)


@dataclass(frozen=True)
class Item:
    """One thing an agent stores; ``store_args`` is exactly what goes to ``store``."""

    kind: str
    content: str
    summary: str | None
    tags: list[str] | str | None
    importance: int
    pinned: bool
    duplicate_of: int | None  # index of the earlier item this one nearly repeats

    def store_args(self) -> dict[str, Any]:
        args: dict[str, Any] = {"content": self.content, "importance": self.importance}
        if self.summary is not None:
            args["summary"] = self.summary
        if self.tags is not None:
            args["tags"] = self.tags
        if self.pinned:
            args["pinned"] = True
        return args


class _Gen:
    """Text fragments for one corpus; holds the rng and the name pool."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.names = self._name_pool(NAME_POOL_SIZE)

    def _name_pool(self, size: int) -> list[str]:
        seen: dict[str, None] = {}
        while len(seen) < size:
            parts = self.rng.randint(2, 4)
            seen["".join(self.rng.choice(_SYLLABLES) for _ in range(parts))] = None
        return list(seen)

    # -- words and identifiers -----------------------------------------------------------------
    def word(self) -> str:
        return self.rng.choice(_WORDS)

    def name(self) -> str:
        # Zipf-like: a few names are common, most are rare, as with real project vocabulary.
        index = min(int(self.rng.paretovariate(1.1)) - 1, len(self.names) - 1)
        if self.rng.random() < 0.7:
            index = self.rng.randrange(len(self.names))
        return self.names[index]

    def camel(self) -> str:
        words = [self.word() for _ in range(self.rng.randint(2, 3))]
        if self.rng.random() < 0.2:
            words.insert(self.rng.randint(1, len(words)), self.rng.choice(_ACRONYMS).lower())
        head, *rest = words
        return head + "".join(w.upper() if w.upper() in _ACRONYMS else w.capitalize() for w in rest)

    def pascal(self) -> str:
        ident = self.camel()
        return ident[0].upper() + ident[1:]

    def snake(self) -> str:
        words = [self.word() for _ in range(self.rng.randint(2, 3))]
        if self.rng.random() < 0.3:
            words.append(self.name())
        return "_".join(words)

    def ident(self) -> str:
        return self.rng.choice((self.camel, self.snake, self.pascal))()

    def path(self, ext: str | None = None) -> str:
        ext = ext or self.rng.choice(("py", "go", "ts", "tsx", "yaml", "md", "json"))
        root = self.rng.choice(("src", "internal", "pkg", "app", "services", "lib"))
        parts = [root, self.word(), *([self.name()] if self.rng.random() < 0.4 else [])]
        stem = self.snake() if ext in ("py", "go", "yaml", "md") else self.camel()
        return "/".join([*parts, f"{stem}.{ext}"])

    def hexid(self, n: int = 8) -> str:
        return "".join(self.rng.choice("0123456789abcdef") for _ in range(n))

    def sentence(self) -> str:
        templates = (
            "The {w} in {path} calls {ident} before the {w2} is ready.",
            "{Name} reported that {ident} returns an empty {w} for tenant {name}.",
            "Checked {path}: {ident} already handles the {w} case.",
            "We traced the slow {w} to {ident} holding the {w2} lock.",
            "Need to revisit {ident} once {name} moves to the new {w} service.",
            "See {path} line {n} for how {ident} builds the {w2}.",
            "The {w2} for {name} lives under {path} and is read by {ident}.",
            "Ran the {w} migration on {name}; {ident} now writes {n} rows per batch.",
        )
        return self.rng.choice(templates).format(
            w=self.word(),
            w2=self.word(),
            path=self.path(),
            ident=self.ident(),
            name=self.name(),
            Name=self.name().capitalize(),
            n=self.rng.randint(2, 900),
        )

    # -- kinds -------------------------------------------------------------------------------------
    def python_traceback(self) -> str:
        frames = []
        for _ in range(self.rng.randint(2, 6)):
            frames.append(
                f'  File "/srv/app/{self.path("py")}", line {self.rng.randint(10, 900)}, in {self.snake()}\n'
                f"    {self.snake()} = self.{self.snake()}({self.word()}_id, {self.word()})"
            )
        exc = self.rng.choice(("KeyError", "ValueError", "AttributeError", "TimeoutError", "RuntimeError"))
        return (
            "Traceback (most recent call last):\n"
            + "\n".join(frames)
            + f"\n{exc}: '{self.word()}_{self.name()}' not found in {self.ident()}\n"
        )

    def go_panic(self) -> str:
        lines = [
            "panic: runtime error: invalid memory address or nil pointer dereference",
            f"[signal SIGSEGV: segmentation violation code=0x1 addr=0x{self.hexid(2)} pc=0x{self.hexid(6)}]",
            "",
            f"goroutine {self.rng.randint(1, 400)} [running]:",
        ]
        for _ in range(self.rng.randint(2, 5)):
            pkg = f"github.com/acme/{self.name()}/internal/{self.word()}"
            lines.append(f"{pkg}.(*{self.pascal()}).{self.pascal()}(0xc000{self.hexid(6)}, {{0x{self.hexid(6)}}})")
            lines.append(f"\t/build/{self.path('go')}:{self.rng.randint(10, 700)} +0x{self.hexid(3)}")
        return "\n".join(lines) + "\n"

    def js_stack(self) -> str:
        prop = self.camel()
        lines = [f"TypeError: Cannot read properties of undefined (reading '{prop}')"]
        for _ in range(self.rng.randint(2, 6)):
            lines.append(
                f"    at {self.camel()} (/app/{self.path('ts')}:{self.rng.randint(1, 400)}:{self.rng.randint(1, 80)})"
            )
        lines.append("    at process.processTicksAndRejections (node:internal/process/task_queues:95:5)")
        return "\n".join(lines) + "\n"

    def error(self) -> str:
        return self.rng.choice((self.python_traceback, self.go_panic, self.js_stack))()

    def python_code(self) -> str:
        fn, arg, attr = self.snake(), self.word(), self.snake()
        return (
            f"def {fn}({arg}: {self.pascal()}, *, "
            f"{self.word()}_limit: int = {self.rng.randint(1, 500)}) -> list[str]:\n"
            f'    """{self.sentence()}"""\n'
            f"    result = []\n"
            f"    for {self.word()} in {arg}.{attr}():\n"
            f"        if not {self.snake()}({self.word()}):\n"
            f"            continue\n"
            f"        result.append({self.word()}.{self.snake()})\n"
            f"    return result\n\n"
        )

    def go_code(self) -> str:
        recv, typ = self.word()[0], self.pascal()
        return (
            f"func ({recv} *{typ}) {self.pascal()}(ctx context.Context, {self.camel()} string) error {{\n"
            f"\t{self.camel()}, err := {recv}.{self.camel()}.{self.pascal()}(ctx, {self.camel()})\n"
            f"\tif err != nil {{\n"
            f'\t\treturn fmt.Errorf("{self.word()} {self.name()}: %w", err)\n'
            f"\t}}\n"
            f"\treturn nil\n}}\n\n"
        )

    def ts_code(self) -> str:
        iface = self.pascal()
        return (
            f"export interface {iface} {{\n"
            f"  {self.camel()}: string;\n  {self.camel()}?: number;\n}}\n\n"
            f"export async function {self.camel()}(input: {iface}): Promise<{self.pascal()}[]> {{\n"
            f"  const {self.camel()} = await {self.camel()}(input.{self.camel()});\n"
            f"  return {self.camel()}.filter((x) => x.{self.camel()} !== undefined);\n}}\n\n"
        )

    def code(self) -> str:
        return self.rng.choice((self.python_code, self.go_code, self.ts_code))()

    def tool_output(self) -> str:
        command = self.rng.choice(_SHELL_COMMANDS)
        rng = self.rng
        if command == "ls -la":
            rows = [
                f"-rw-r--r--  1 agent staff {rng.randint(80, 90000):>6} Nov {rng.randint(1, 30):>2} "
                f"{rng.randint(0, 23):02}:{rng.randint(0, 59):02} "
                f"{self.snake()}.{rng.choice(('py', 'go', 'ts'))}"
                for _ in range(rng.randint(3, 10))
            ]
            return f"$ ls -la {self.path().rsplit('/', 1)[0]}\ntotal {rng.randint(8, 400)}\n" + "\n".join(rows) + "\n"
        if command == "git status":
            rows = [f"\tmodified:   {self.path()}" for _ in range(rng.randint(1, 6))]
            return (
                f"$ git status\nOn branch fix/{self.snake()}\nChanges not staged for commit:\n" + "\n".join(rows) + "\n"
            )
        if command == "pytest -q":
            failed = rng.randint(0, 4)
            rows = [f"FAILED tests/test_{self.snake()}.py::test_{self.snake()} - AssertionError" for _ in range(failed)]
            return (
                "$ pytest -q\n"
                + "." * rng.randint(5, 60)
                + "\n"
                + "\n".join(rows)
                + f"\n{failed} failed, {rng.randint(5, 400)} passed in {rng.uniform(0.5, 90):.2f}s\n"
            )
        if command == "docker ps":
            rows = [
                f"{self.hexid(12)}   {self.name()}/{self.word()}:{rng.randint(1, 9)}.{rng.randint(0, 30)}   "
                f"Up {rng.randint(1, 59)} minutes   "
                f"0.0.0.0:{rng.randint(3000, 9999)}->{rng.randint(80, 9000)}/tcp"
                for _ in range(rng.randint(1, 6))
            ]
            return "$ docker ps\nCONTAINER ID   IMAGE   STATUS   PORTS\n" + "\n".join(rows) + "\n"
        if command == "grep -rn":
            target = self.ident()
            rows = [
                f"{self.path()}:{rng.randint(1, 800)}:    {target}({self.word()})" for _ in range(rng.randint(1, 8))
            ]
            return f"$ grep -rn {target} .\n" + "\n".join(rows) + "\n"
        if command == "npm install":
            return (
                f"$ npm install\nnpm WARN deprecated "
                f"{self.name()}@{rng.randint(0, 5)}.{rng.randint(0, 20)}.0: "
                f"use {self.name()} instead\nadded {rng.randint(10, 900)} packages in {rng.randint(2, 60)}s\n"
            )
        rows = [
            f"{self.name()}-{self.word()}-{self.hexid(5)}   1/1   Running   {rng.randint(0, 5)}   {rng.randint(1, 90)}m"
            for _ in range(rng.randint(1, 6))
        ]
        return "$ kubectl get pods\nNAME   READY   STATUS   RESTARTS   AGE\n" + "\n".join(rows) + "\n"

    def decision(self) -> str:
        return (
            f"Decision: use {self.ident()} instead of {self.ident()} "
            f"for the {self.word()} path in {self.path()}. "
            f"Reason: {self.sentence()} Consequence: {self.name()} must call {self.ident()} first. "
        )

    def prose(self) -> str:
        return " ".join(self.sentence() for _ in range(self.rng.randint(1, 3))) + "\n"

    def fragment(self, kind: str) -> Callable[[], str]:
        return {
            "error": self.error,
            "code": self.code,
            "tool_output": self.tool_output,
            "decision": self.decision,
            "prose": self.prose,
        }[kind]

    def summary(self, kind: str, content: str) -> str:
        first = content.strip().splitlines()[0][:80]
        return f"{kind}: {first} ({self.word()} {self.ident()})"

    def tags(self) -> list[str] | str | None:
        if self.rng.random() < 0.5:
            return None
        tags = [self.rng.choice((self.word(), self.name())) for _ in range(self.rng.randint(1, 3))]
        return ",".join(tags) if self.rng.random() < 0.2 else tags


def target_length(rng: random.Random) -> int:
    raw = rng.lognormvariate(math.log(LENGTH_MEDIAN_CHARS), LENGTH_SIGMA)
    return max(MIN_CHARS, min(MAX_CHARS, round(raw)))


def _fit(text: str, length: int) -> str:
    """Cut at a line or word boundary near ``length``, never below MIN_CHARS."""
    if len(text) <= length:
        return text
    cut = text.rfind("\n", MIN_CHARS, length + 1)
    if cut < length * 0.8:
        cut = text.rfind(" ", MIN_CHARS, length + 1)
    if cut < MIN_CHARS:
        cut = length
    kept = text[:cut].rstrip()
    return kept if len(kept) >= MIN_CHARS else text[:length]


def _near_duplicate(rng: random.Random, original: str) -> str:
    """Same text with one number changed and a timestamp line: Jaccard of word sets stays > 0.7."""
    stamp = f"[{rng.randint(0, 23):02}:{rng.randint(0, 59):02}:{rng.randint(0, 59):02}] seen again\n"
    changed = re.sub(r"\d+", lambda m: str(int(m.group()) + 1), original, count=1)
    return _fit(stamp + changed, MAX_CHARS)


def generate(seed: int, count: int) -> list[Item]:
    """``count`` items, deterministic for a given seed."""
    rng = random.Random(seed)
    gen = _Gen(rng)
    kinds = list(KIND_WEIGHTS)
    weights = [KIND_WEIGHTS[k] for k in kinds]
    items: list[Item] = []
    for _ in range(count):
        duplicate_of: int | None = None
        if len(items) >= 10 and rng.random() < NEAR_DUPLICATE_RATE:
            duplicate_of = rng.randrange(len(items))
            kind = items[duplicate_of].kind
            content = _near_duplicate(rng, items[duplicate_of].content)
        else:
            kind = rng.choices(kinds, weights)[0]
            length = target_length(rng)
            make = gen.fragment(kind)
            parts: list[str] = []
            size = 0
            while size < length:
                # Now and then the agent's own note sits next to what it saw.
                note = kind in ("error", "tool_output") and parts and rng.random() < 0.3
                piece = gen.prose() if note else make()
                parts.append(piece)
                size += len(piece)
            content = _fit("".join(parts), length)
        summary = gen.summary(kind, content) if rng.random() < SUMMARY_RATE[kind] else None
        importance = rng.choices(range(1, 11), weights=(2, 3, 5, 8, 12, 8, 6, 4, 2, 1))[0]
        items.append(
            Item(
                kind=kind,
                content=content,
                summary=summary,
                tags=gen.tags(),
                importance=importance,
                pinned=rng.random() < PINNED_RATE,
                duplicate_of=duplicate_of,
            )
        )
    return items


def small_items(seed: int, count: int) -> list[Item]:
    """Short notes (~100-300 chars) for the calls issued while a snapshot runs."""
    rng = random.Random(seed ^ 0x5A5A)
    gen = _Gen(rng)
    return [Item("prose", _fit(gen.prose() + gen.sentence(), 300), None, None, 5, False, None) for _ in range(count)]


# --- queries ------------------------------------------------------------------------------------

_IDENT_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_CAMEL_RE = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")


def terms(text: str, *, compounds: bool = True) -> list[str]:
    """Lowercased words and identifier parts, plus (unless told not to) whole compound identifiers."""
    out: list[str] = []
    for ident in _IDENT_RE.findall(text):
        parts = [p.lower() for chunk in ident.split("_") for p in _CAMEL_RE.findall(chunk)]
        if compounds and len(parts) > 1:
            out.append(ident.lower())
        out.extend(p for p in parts if len(p) > 1)
    return out


@dataclass(frozen=True)
class Query:
    text: str
    target: int  # index of the item the query was made from


def make_queries(items: Sequence[Item], targets: Sequence[int], count: int, seed: int) -> list[Query]:
    """Queries from the rarest words and identifiers of randomly chosen target items.

    Half are "identifier + rare word" (the way an agent searches for a symbol it saw), half are
    the two rarest plain words of the item.
    """
    if not targets:
        return []
    rng = random.Random(seed ^ 0x0C0C)
    doc_freq: Counter[str] = Counter()
    for item in items:
        doc_freq.update(set(terms(item.content)))
    queries: list[Query] = []
    for n in range(count):
        target = targets[rng.randrange(len(targets))]
        content = items[target].content
        idents = sorted(
            {
                i
                for i in _IDENT_RE.findall(content)
                if len(i) >= 6 and not i.endswith("_") and ("_" in i or i.lower() != i)
            },
            key=lambda i: (doc_freq[i.lower()], i),
        )
        words = sorted(
            {t for t in terms(content, compounds=False) if t.isalpha() and len(t) >= 4 and t not in _STOPWORDS},
            key=lambda t: (doc_freq[t], t),
        )
        if n % 2 == 0 and idents:
            rare_word = next((w for w in words if w not in idents[0].lower()), "")
            text = f"{idents[0]} {rare_word}".strip()
        else:
            text = " ".join(words[:2]) or content.split()[0]
        queries.append(Query(text=text, target=target))
    return queries
