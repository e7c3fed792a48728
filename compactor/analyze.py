"""Text analysis for search: turns code-heavy agent text into index terms.

An agent searches for what it saw: identifiers, paths, error names, numbers. So a compound
token (``parseHTTPResponse``, ``django/db/models/query.py``, ``os.path.join``, ``max_items``)
is indexed whole *and* by its parts, letting a query match either the exact name or a piece; a
path also by its tails (``models/query.py``), so it matches however it was rooted.
"""

import re
import unicodedata
from functools import lru_cache
from typing import Final

# Combining marks: Python's \w leaves them out, so a Hindi, Bengali or Tamil word broke at each
# vowel sign ("डेटाबेस" gave no term at all), and an accent typed as its own character split
# its word. The marks of the scripts that write words with them count as word characters here.
_MARKS: Final = (
    "\u0300-\u036f\u0483-\u0489\u0591-\u05c7\u0610-\u061a\u064b-\u065f\u0670\u06d6-\u06ed"
    "\u0900-\u0963\u0966-\u0dff\u0e00-\u0eff\u0f00-\u0fff\u1000-\u109f\u1780-\u17ff"
)
# A compound: word characters joined by ``. / - _``, optionally led by ``/``, ``./``, ``../``
# or ``~/`` so absolute and relative paths stay whole. It never ends on a separator, so the
# full stop after "see foo.py." is not part of the token.
_COMPOUND: Final = re.compile(rf"(?:~?/|\.\.?/)?[\w{_MARKS}](?:[\w{_MARKS}./-]*[\w{_MARKS}])?")
# The same on ASCII text (most of what an agent stores), where it finds the same, faster.
_COMPOUND_ASCII: Final = re.compile(r"(?:~?/|\.\.?/)?\w(?:[\w./-]*\w)?")
_PATH_SEP: Final = re.compile(r"/+")
_DOT_SEP: Final = re.compile(r"\.+")
_WORD_SEP: Final = re.compile(r"[-_]+")
# camelCase pieces; an acronym run ends where the next capitalised word starts (HTTPResponse).
_CAMEL: Final = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
_SIMPLE: Final = re.compile(r"[a-z0-9]+")
# Scripts written without spaces between words: Chinese, Japanese, Korean (whose words are
# often compounds), Thai, Lao, Tibetan, Myanmar and Khmer. A sentence is one run of word
# characters, so it would be one term, found only by a query of the whole run. Such a run is
# indexed by its overlapping character pairs (bigrams) and its characters, as search engines
# do without a dictionary; a query uses its pairs, or the character when it is one alone.
_UNSPACED_CHARS: Final = (
    "\u0e00-\u0eff\u0f00-\u0fff\u1000-\u109f\u1100-\u11ff\u1780-\u17ff\u2e80-\u2fdf\u3040-\u30ff"
    "\u3131-\u318e\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\ua960-\ua97f\uac00-\ud7ff\uf900-\ufaff"
    "\uff66-\uff9f\U00020000-\U0003134f"
)
_UNSPACED_RUN: Final = re.compile(f"[{_UNSPACED_CHARS}]+")
# What tokenizer version 1 (\w only, no pairs) made other terms of.
_NEW_IN_2: Final = re.compile(f"[{_UNSPACED_CHARS}{_MARKS}]")

# Which terms this module makes. A saved index records it; a start re-indexes the items whose
# terms an older version made otherwise (`terms_changed`), or rebuilds an index of a version
# it does not know: their terms would not meet a query's.
# 1: before combining marks joined words and unspaced runs were split into character pairs.
# 2: before text was brought to its composed form (NFC): "é" typed as e and an accent, or a
# path from macOS (decomposed), made other terms than the same word composed.
TERMS_VERSION: Final = 3
_MIN_LEN: Final = 2
# Longer runs are blobs (base64, hex dumps, minified code): nobody searches for them whole, and
# one would cost a vocabulary entry of its full size. Their parts are still indexed.
_MAX_LEN: Final = 128
# Expansions are memoised per raw compound: agent text repeats the same names constantly, so a
# dict hit replaces the splitting work for most tokens. Cleared when full to bound memory. Most
# distinct compounds occur once (ids, hashes, new paths), so a larger cache holds mostly those:
# 4k entries (<1 MiB) tokenise about as fast as 50k on both corpora, and each clear of a 50k
# cache left ~10 MiB of the heap free but fragmented, still counted in RSS.
_CACHE_MAX: Final = 4_096
_CACHE_KEY_MAX: Final = 64
_cache: dict[str, tuple[str, ...]] = {}
# English function words, dropped from queries (documents keep them). An agent's query is often
# its whole thought, and in one agent's memory of a few hundred items even "the" keeps a
# noticeable idf: dozens of such words outweighed the one path or identifier that mattered.
# The list is NLTK's English stop words less what the tokenizer never yields (forms with an
# apostrophe, single letters): 145 words.
# fmt: off
QUERY_STOPWORDS: Final = frozenset({
    "about", "above", "after", "again", "against", "ain", "all", "am", "an", "and", "any", "are", "aren", "as",
    "at", "be", "because", "been", "before", "being", "below", "between", "both", "but", "by", "can", "couldn",
    "did", "didn", "do", "does", "doesn", "doing", "don", "down", "during", "each", "few", "for", "from", "further",
    "had", "hadn", "has", "hasn", "have", "haven", "having", "he", "her", "here", "hers", "herself", "him",
    "himself", "his", "how", "if", "in", "into", "is", "isn", "it", "its", "itself", "just", "ll", "ma", "me",
    "mightn", "more", "most", "mustn", "my", "myself", "needn", "no", "nor", "not", "now", "of", "off", "on",
    "once", "only", "or", "other", "our", "ours", "ourselves", "out", "over", "own", "re", "same", "shan", "she",
    "should", "shouldn", "so", "some", "such", "than", "that", "the", "their", "theirs", "them", "themselves",
    "then", "there", "these", "they", "this", "those", "through", "to", "too", "under", "until", "up", "ve", "very",
    "was", "wasn", "we", "were", "weren", "what", "when", "where", "which", "while", "who", "whom", "why", "will",
    "with", "won", "wouldn", "you", "your", "yours", "yourself", "yourselves"
})
# fmt: on


def _camel_parts(segment: str, out: dict[str, None]) -> None:
    out[segment.lower()] = None
    if segment.isascii() and segment != segment.lower() and segment != segment.upper():
        for part in _CAMEL.findall(segment):
            out[part.lower()] = None


def _word_parts(piece: str, out: dict[str, None]) -> None:
    """A piece free of ``/`` and ``.``: split on ``-``/``_``, then on camelCase."""
    if "-" in piece or "_" in piece:
        out[piece.lower()] = None
        for segment in _WORD_SEP.split(piece):
            if segment:
                _camel_parts(segment, out)
    else:
        _camel_parts(piece, out)


def _dotted_parts(piece: str, out: dict[str, None]) -> None:
    """A piece free of ``/``: the whole, its stem (``query`` of ``query.py``), then each part."""
    if "." in piece:
        out[piece.lower()] = None
        stem = piece.rsplit(".", 1)[0].rstrip(".")
        if stem:
            out[stem.lower()] = None
        for part in _DOT_SEP.split(piece):
            if part:
                _word_parts(part, out)
    else:
        _word_parts(piece, out)


def _unspaced_terms(raw: str, query: bool) -> list[str]:
    """Terms of a compound holding unspaced script: each run of it by its bigrams (and, in a
    document, its characters), the text between runs as any other compound."""
    rest = _query_tokens if query else tokenize  # for the text between runs
    out: list[str] = []
    at = 0
    for run in _UNSPACED_RUN.finditer(raw):
        if run.start() > at:
            out.extend(rest(raw[at : run.start()]))
        chars = run.group(0)
        if len(chars) == 1:
            out.append(chars)
        else:
            out.extend(chars[i : i + 2] for i in range(len(chars) - 1))
            if not query:
                out.extend(chars)
        at = run.end()
    if at < len(raw):
        out.extend(rest(raw[at:]))
    return out


def _unspaced(raw: str) -> bool:
    return not raw.isascii() and _UNSPACED_RUN.search(raw) is not None


def unspaced_pair(term: str) -> bool:
    """Whether `term` is a character pair of a script written without spaces: a word's worth
    of meaning, as a word of three letters or more is in other scripts."""
    return len(term) == 2 and not term.isascii() and _UNSPACED_RUN.fullmatch(term) is not None


def terms_changed(version: int, text: str) -> bool:
    """Whether tokenizer `version` (older than TERMS_VERSION) made other terms of `text`."""
    if version not in (1, 2):
        raise ValueError(f"tokenizer version {version!r} is not one this one can bring up to date")
    if text.isascii():
        return False
    return not unicodedata.is_normalized("NFC", text) or (version == 1 and _NEW_IN_2.search(text) is not None)


def composed(text: str) -> str:
    """`text` in its composed form (NFC), so that one word is one term however it was typed.
    ASCII text is returned as it is, unlooked at."""
    return text if text.isascii() else unicodedata.normalize("NFC", text)


def _expand(raw: str) -> tuple[str, ...]:
    if _SIMPLE.fullmatch(raw):
        return (raw,) if _MIN_LEN <= len(raw) <= _MAX_LEN else ()
    if _unspaced(raw):
        return tuple(_unspaced_terms(raw, query=False))
    out: dict[str, None] = {}
    if "/" in raw:
        out[raw.lower()] = None
        parts = [p for p in _PATH_SEP.split(raw) if p and p not in (".", "..", "~")]
        # Every tail of two or more components: the same file is written relative to different
        # roots ("/testbed/django/db/models/query.py", "django/db/models/query.py",
        # "models/query.py"), and a shared tail is far rarer, so far stronger, than its parts.
        # Only the tails short enough to be terms are made (lowercasing never shortens one):
        # making all of them was quadratic, and one path-like run of 1 MB filled gigabytes.
        first, size = len(parts) - 1, len(parts[-1]) if parts else 0
        while first > 0 and size + 1 + len(parts[first - 1]) <= _MAX_LEN:
            first -= 1
            size += 1 + len(parts[first])
        for i in range(first, len(parts) - 1):
            out["/".join(parts[i:]).lower()] = None
        for part in parts:
            _dotted_parts(part, out)
    else:
        _dotted_parts(raw, out)
    return tuple(t for t in out if _MIN_LEN <= len(t) <= _MAX_LEN)


def tokenize(text: str) -> list[str]:
    """Index terms of ``text`` in document order; duplicates are kept (they are term frequencies).

    Each compound contributes its lowercased whole first, then its distinct parts; terms are
    2 to 128 characters long, but for single characters of unspaced scripts.
    """
    cache = _cache
    out: list[str] = []
    extend = out.extend
    for raw in (_COMPOUND_ASCII if text.isascii() else _COMPOUND).findall(composed(text)):
        terms = cache.get(raw)
        if terms is None:
            terms = _expand(raw)
            if len(raw) <= _CACHE_KEY_MAX:
                if len(cache) >= _CACHE_MAX:
                    cache.clear()
                cache[raw] = terms
        extend(terms)
    return out


def _query_tokens(text: str) -> list[str]:
    """A query's terms in order: as a document's, but an unspaced run by its pairs alone."""
    if text.isascii():
        return tokenize(text)
    out: list[str] = []
    for raw in _COMPOUND.findall(composed(text)):
        if _unspaced(raw):  # not from the cache, which holds a document's terms
            out.extend(_unspaced_terms(raw, query=True))
        else:
            out.extend(tokenize(raw))
    return out


# A word a query may hold in another English form than the text it is after ("connection
# pools" for a note on "the connection pool", "failing tests" for "test fails"): letters only,
# at least three (shorter words are acronyms and abbreviations, which have no forms).
_INFLECTABLE: Final = re.compile(r"[a-z]{3,40}")
# A final consonant doubled before -ing/-ed (running, stopped, logging), undone on the way back:
# not l, s or z, which English also doubles at rest (install, pass, buzz).
_DOUBLED: Final = frozenset("bdfgkmnprtv")
_VOWELS: Final = frozenset("aeiouy")


def _bases(word: str) -> set[str]:
    """The forms `word` may be inflected from: itself only when it ends in no inflection (a
    stem must hold a vowel, so ``string`` and ``bring`` are words of their own, and ``-eed``
    is one too: ``speed``)."""
    out: set[str] = set()
    if word.endswith("ies") and len(word) > 4:
        out.add(word[:-3] + "y")
    elif word.endswith("es") and word[:-2].endswith(("s", "x", "z", "ch", "sh")):
        out.update((word[:-2], word[:-1]))  # classes -> class; caches -> cache
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        out.add(word[:-1])
    elif word.endswith("ied") and len(word) > 4:
        return {word[:-3] + "y"}  # copied -> copy
    for suffix in ("ing", "ed"):
        stem = word[: -len(suffix)]
        if word.endswith(suffix) and _VOWELS.intersection(stem):
            out.update((stem, stem + "e"))  # testing -> test, parsing -> parse, used -> use
            if len(stem) >= 4 and stem[-1] == stem[-2] and stem[-1] in _DOUBLED:
                out.add(stem[:-1])  # running -> run
            if not stem.endswith("e"):
                break
            out.add(word)  # speed, need: a word, or a past (agreed) of what the stem + e gives
    return {b for b in out if len(b) >= 3} or {word}


def _forms(base: str) -> set[str]:
    """`base` with its plural or third person, past and -ing endings."""
    out = {base}
    if base.endswith("y") and base[-2] not in _VOWELS:
        out.update((base[:-1] + "ies", base[:-1] + "ied", base + "ing"))
        return out
    out.add(base + "es" if base.endswith(("s", "x", "z", "ch", "sh")) else base + "s")
    if base.endswith("e"):
        out.update((base + "d", base[:-1] + "ing"))
    else:
        out.update((base + "ed", base + "ing"))
        if len(base) <= 4 and base[-1] in _DOUBLED and base[-2] in _VOWELS and base[-3] not in _VOWELS:
            out.update((base + base[-1] + "ed", base + base[-1] + "ing"))  # run -> running
    return out


def inflections(word: str) -> tuple[str, ...]:
    """Other English forms of a lowercase `word` (``pool``: ``pools``; ``parsing``: ``parse``,
    ``parsed``, ``parses``), in sorted order; some are not words, and none is a stop word.
    Nothing for a word that is not ASCII letters, or shorter than three."""
    if not _INFLECTABLE.fullmatch(word):
        return ()
    forms: set[str] = set()
    for base in _bases(word):
        forms.update(_forms(base))
    forms.discard(word)
    return tuple(sorted(f for f in forms if f not in QUERY_STOPWORDS and len(f) <= _MAX_LEN))


def _verbs(noun: str) -> set[str]:
    """The verbs a noun may be derived from (deployment: deploy; connection: connect;
    configuration: configure; validation: validate), some of them not words."""
    if noun.endswith("ment"):
        return {noun[:-4]}
    if noun.endswith("ization"):
        return {noun[:-7] + "ize"}  # serialization
    if noun.endswith("ification"):
        return {noun[:-9] + "ify"}  # verification
    if noun.endswith("ation"):
        stem = noun[:-5]
        return {stem, stem + "e", stem + "ate"}  # information, configuration, validation
    if noun.endswith("ion"):
        stem = noun[:-3]
        return {stem, stem + "e"}  # connection, execution
    return set()


def _nouns(verb: str) -> set[str]:
    """The nouns English derives from a verb by -ion, -ation and -ment, some of them not words."""
    if verb.endswith("ion"):
        return set()
    if verb.endswith("ment"):
        return {verb + "ation"}  # implement, document
    if verb.endswith("ate"):
        return {verb[:-1] + "ion"}  # validate
    if verb.endswith("ize"):
        return {verb[:-1] + "ation"}  # serialize
    if verb.endswith("ify"):
        return {verb[:-1] + "ication"}  # verify
    stem = verb[:-1] if verb.endswith("e") else verb
    return {stem + "ion", stem + "ation", verb + "ment"}  # connect, configure, deploy


def derivations(word: str) -> tuple[str, ...]:
    """The nouns and verbs of a lowercase `word` by -ion, -ation and -ment, with their forms
    (``deploy``: ``deployment``, ``deployments``; ``migrations``: ``migrate``, ``migrated``...),
    in sorted order; some are not words, none is a stop word or one of `inflections(word)`.
    Nothing for a word that is not ASCII letters, or shorter than three."""
    if not _INFLECTABLE.fullmatch(word):
        return ()
    out: set[str] = set()
    for base in _bases(word):
        for verb in _verbs(base):
            if len(verb) >= 4:  # "act" of "action", "opt" of "option": other words
                out.update(_forms(verb))
        for noun in _nouns(base):
            out.update((noun, noun + "s"))
    out.discard(word)
    out.difference_update(inflections(word))
    return tuple(sorted(f for f in out if f not in QUERY_STOPWORDS and len(f) <= _MAX_LEN))


# A query word on its own: a lowercase letter, then letters or digits ("db", "k8s", "pools").
_WORD_ALONE: Final = re.compile(r"[a-z][a-z0-9]{1,39}")
# Abbreviations a developer writes for a word, and the words (lowercase; the plural where it is
# written too): a query in either finds a note in the other ("db password" and "the database
# password"). Only the pairs that stand for one word wherever they appear in code and its talk.
# fmt: off
_ABBREVIATIONS: Final = {
    "app": ("application",), "apps": ("applications",), "arg": ("argument",), "args": ("arguments",),
    "async": ("asynchronous",), "auth": ("authentication", "authorization"), "bool": ("boolean",),
    "cfg": ("config", "configuration"), "conf": ("config", "configuration"), "config": ("configuration",),
    "configs": ("configurations",), "db": ("database",), "dbs": ("databases",), "dep": ("dependency",),
    "deps": ("dependencies",), "dev": ("development",), "dict": ("dictionary",), "dir": ("directory",),
    "dirs": ("directories",), "doc": ("documentation",), "docs": ("documentation",),
    "env": ("environment",), "envs": ("environments",), "err": ("error",), "errs": ("errors",),
    "fn": ("function",), "func": ("function",), "funcs": ("functions",), "impl": ("implementation",),
    "init": ("initialize", "initialization"), "int": ("integer",), "js": ("javascript",),
    "k8s": ("kubernetes",), "lib": ("library",), "libs": ("libraries",), "max": ("maximum",),
    "min": ("minimum",), "msg": ("message",), "msgs": ("messages",), "num": ("number",),
    "param": ("parameter",), "params": ("parameters",), "perf": ("performance",),
    "pg": ("postgres", "postgresql"), "postgres": ("postgresql",), "pkg": ("package",),
    "pkgs": ("packages",), "prod": ("production",), "py": ("python",), "repo": ("repository",),
    "repos": ("repositories",), "req": ("request",), "reqs": ("requests", "requirements"),
    "resp": ("response",), "spec": ("specification",), "specs": ("specifications",), "str": ("string",),
    "sync": ("synchronous", "synchronize"), "tmp": ("temporary",), "temp": ("temporary",),
    "ts": ("typescript",), "var": ("variable",), "vars": ("variables",),
}
# fmt: on


def _both_ways(pairs: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
    out: dict[str, list[str]] = {}
    for short, longs in pairs.items():
        for long in longs:
            out.setdefault(short, []).append(long)
            out.setdefault(long, []).append(short)
    return {word: tuple(dict.fromkeys(others)) for word, others in out.items()}


_SYNONYMS: Final = _both_ways(_ABBREVIATIONS)


def synonyms(word: str) -> tuple[str, ...]:
    """The abbreviations of a lowercase `word`, or the words an abbreviation stands for
    (``db``: ``database``; ``configuration``: ``cfg``, ``conf``, ``config``)."""
    return _SYNONYMS.get(word, ())


@lru_cache(maxsize=_CACHE_MAX)
def other_words(word: str) -> tuple[str, ...]:
    """What a query may search for a lowercase `word` beside it: its synonyms, then its other
    forms and its derived nouns and verbs, each once. Memoised: a query asks for each of its
    words, and an agent's queries repeat their words."""
    return tuple(dict.fromkeys((*synonyms(word), *inflections(word), *derivations(word))))


def query_words(text: str, limit: int | None = None) -> list[str]:
    """The words of a query standing on their own (not parts of a path or identifier), which
    may have other forms or synonyms: distinct, lowercase, in order, stop words left out; the
    first `limit` of them."""
    out: dict[str, None] = {}
    for raw in dict.fromkeys((_COMPOUND_ASCII if text.isascii() else _COMPOUND).findall(composed(text))):
        word = raw.lower()
        if word not in out and _WORD_ALONE.fullmatch(word) and word not in QUERY_STOPWORDS:
            out[word] = None
            if len(out) == limit:
                break
    return list(out)


def query_terms(text: str) -> list[str]:
    """Distinct terms of a query in the order they first appear, stop words left out (all of
    them are kept when the query has nothing else)."""
    terms = list(dict.fromkeys(_query_tokens(text)))
    content = [t for t in terms if t not in QUERY_STOPWORDS]
    return content or terms
