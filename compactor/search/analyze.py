"""Text analysis for search: turns code-heavy agent text into index terms.

An agent searches for what it saw: identifiers, paths, error names, numbers. So a compound
token (``parseHTTPResponse``, ``django/db/models/query.py``, ``os.path.join``, ``max_items``)
is indexed whole *and* by its parts, letting a query match either the exact name or a piece; a
path also by its tails (``models/query.py``), so it matches however it was rooted.
"""

import re
import unicodedata
from typing import Final

import Stemmer

from .irregular import IRREGULAR
from .irregular import WORDS as IRREGULAR_WORDS

# Combining marks: Python's \w leaves them out, so a Hindi, Bengali or Tamil word broke at each
# vowel sign ("डेटाबेस" gave no term at all), and an accent typed as its own character split
# its word. The marks of the scripts that write words with them count as word characters here.
_MARKS: Final = (
    "\u0300-\u036f\u0483-\u0489\u0591-\u05c7\u0610-\u061a\u064b-\u065f\u0670\u06d6-\u06ed"
    "\u0900-\u0963\u0966-\u0dff\u0e00-\u0eff\u0f00-\u0fff\u1000-\u109f\u1780-\u17ff"
)
# A word character, for a regex character class: \w and those marks (the paths of commands.py
# and view_query.py use it too).
WORD_CHARS: Final = rf"\w{_MARKS}"
# A compound: word characters joined by ``. / - _``, optionally led by ``/``, ``./``, ``../``
# or ``~/`` so absolute and relative paths stay whole. It never ends on a separator, so the
# full stop after "see foo.py." is not part of the token.
_COMPOUND: Final = re.compile(rf"(?:~?/|\.\.?/)?[{WORD_CHARS}](?:[{WORD_CHARS}./-]*[{WORD_CHARS}])?")
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
# 3: before a word of prose was indexed by its Snowball stem too (`STEM_MARK`).
# 4: before a field's length counted its words as written rather than its terms (the terms are
# the same; the lengths, which the saved index holds, differ: `index_tokens`).
# 5: before an irregular form ("went", "children") was indexed by its base's stem too.
TERMS_VERSION: Final = 6
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


# A word's stem term is its Snowball English stem behind this mark, which no term the tokenizer
# makes holds: "pooling" and "pools" are both indexed as "^pool" too, a term of its own, so that
# a query scores a stem match apart from (and below) an exact one.
STEM_MARK: Final = "^"
# A word as prose writes it: lowercase or Capitalised letters, three or more (two for the base of
# an irregular form: "go"). An identifier (snake_case, camelCase, dotted, a path) is not stemmed:
# its parts are terms already.
_STEMMABLE: Final = re.compile(r"[A-Za-z][a-z]{1,39}")
# The C Snowball (PyStemmer) stems a word in ~0.13 us; snowballstemmer, its pure-Python twin,
# in ~24 us, which would be most of the cost of indexing prose. Its own cache remembers words.
_STEMMER: Final = Stemmer.Stemmer("english")
_stem_cache: dict[str, tuple[tuple[str, ...], int]] = {}


def stem(word: str) -> str:
    """The Snowball English stem of a lowercase `word`."""
    return str(_STEMMER.stemWord(word))


def _root(raw: str, word: str) -> str | None:
    """The stem a word of prose (`raw` as written, `word` lowercased) is also found by: its
    Snowball stem, or its base's for an irregular form ("went": "go"); None for a stop word or
    anything that is not a word of prose."""
    if word in QUERY_STOPWORDS or not _STEMMABLE.fullmatch(raw) or (len(word) < 3 and word not in IRREGULAR_WORDS):
        return None
    return stem(IRREGULAR.get(word, word))


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
    """Whether tokenizer `version` (older than TERMS_VERSION) made other terms of `text`, or
    gave it another length."""
    if version not in (1, 2, 3, 4, 5):
        raise ValueError(f"tokenizer version {version!r} is not one this one can bring up to date")
    for raw in compounds(text):
        word = raw.lower()
        if word in IRREGULAR and _root(raw, word) is not None:
            return True  # no version before 6 made an irregular form's base stem
    if version == 5:
        return False
    terms, extra = index_tokens(text)
    stems = sum(t.startswith(STEM_MARK) for t in terms)
    if extra > stems:  # a compound of parts: versions before 5 counted each part in the length
        return True
    if stems and version < 4:  # a word with a stem term: no version before 4 made that
        return True
    if version >= 3 or text.isascii():
        return False
    return not unicodedata.is_normalized("NFC", text) or (version == 1 and _NEW_IN_2.search(text) is not None)


def composed(text: str) -> str:
    """`text` in its composed form (NFC), so that one word is one term however it was typed.
    ASCII text is returned as it is, unlooked at."""
    return text if text.isascii() else unicodedata.normalize("NFC", text)


def compounds(text: str) -> list[str]:
    """The compounds of `text` in its composed form, in order (`_COMPOUND`)."""
    return (_COMPOUND_ASCII if text.isascii() else _COMPOUND).findall(composed(text))


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
    for raw in compounds(text):
        terms = cache.get(raw)
        if terms is None:
            terms = _expand(raw)
            if len(raw) <= _CACHE_KEY_MAX:
                if len(cache) >= _CACHE_MAX:
                    cache.clear()
                cache[raw] = terms
        extend(terms)
    return out


def index_tokens(text: str) -> tuple[list[str], int]:
    """`tokenize(text)` with each word of prose whose Snowball stem differs from it followed by
    its stem term (STEM_MARK + stem), and how many of the terms a field's length leaves out.
    A field's length is its words as written: a compound (a path, a dotted or snake_case name)
    is one word, not the whole and every part it is also indexed by, and a stem term is no word
    either. Counting the parts made a tool output full of paths and identifiers several times
    "longer" than a note of as many words, so its matches weighed less for a length it does not
    have (evals/KNOBS.md). A run of unspaced script counts its character pairs, as a query does."""
    cache = _stem_cache
    out: list[str] = []
    extend = out.extend
    extra = 0
    for raw in compounds(text):
        found = cache.get(raw)
        if found is None:
            terms = _cache.get(raw) or _expand(raw)
            word = raw.lower()
            root = _root(raw, word)
            if root is not None and root != word:
                terms = (*terms, STEM_MARK + root)
            words = (len(_unspaced_terms(raw, query=True)) if _unspaced(raw) else 1) if terms else 0
            found = (terms, len(terms) - words)
            if len(raw) <= _CACHE_KEY_MAX:
                if len(cache) >= _CACHE_MAX:
                    cache.clear()
                cache[raw] = found
        extend(found[0])
        extra += found[1]
    return out, extra


def query_stems(text: str) -> list[tuple[str, list[str]]]:
    """For each distinct word of prose in a query that is not a stop word: (the word, the terms
    that find its other forms): its stem term, and the stem itself when that is another word
    ("pools": "^pool" for "pooling" or "pooled", and "pool")."""
    out: dict[str, list[str]] = {}
    for raw in compounds(text):
        word = raw.lower()
        if word in out or (root := _root(raw, word)) is None:
            continue
        out[word] = [STEM_MARK + root] if root == word or len(root) < _MIN_LEN else [STEM_MARK + root, root]
    return list(out.items())


def _query_tokens(text: str) -> list[str]:
    """A query's terms in order: as a document's, but an unspaced run by its pairs alone."""
    if text.isascii():
        return tokenize(text)
    out: list[str] = []
    for raw in compounds(text):
        if _unspaced(raw):  # not from the cache, which holds a document's terms
            out.extend(_unspaced_terms(raw, query=True))
        else:
            out.extend(tokenize(raw))
    return out


# A query word on its own: a lowercase letter, then letters or digits ("db", "k8s", "pools").
_WORD_ALONE: Final = re.compile(r"[a-z][a-z0-9]{1,39}")


# A number as prose writes it: a count, a year, "3rd", "1990s".
_PROSE_NUMBER: Final = re.compile(r"[0-9]+(?:st|nd|rd|th|s)?")
# What a sentence holds and a question in words does not: a command's flag, a prompt, a call,
# an assignment, a backtick span, a pipe, brackets.
_CODE_SIGN: Final = re.compile(r"[`$={}\[\]<>|\\;]|\w\(|(?:^|\s)--?[A-Za-z]")


def _prose_piece(piece: str) -> bool:
    """A word as prose writes it, in any script: letters in lower case, Capitalised or all in
    capitals (an acronym, "APIs" too), or a number; not camelCase, not letters and digits mixed
    (an identifier such as "k8s" or "w12")."""
    if _PROSE_NUMBER.fullmatch(piece):
        return True
    if not piece.isalpha() and not all(c.isalpha() or unicodedata.category(c)[0] == "M" for c in piece):
        return False  # a digit or "_" among letters; a mark (a vowel sign) is part of its letter
    rest = piece[1:]
    return rest == rest.lower() or piece == piece.upper() or (piece[-1] == "s" and piece[:-1] == piece[:-1].upper())


def is_prose(text: str) -> bool:
    """Whether a query is a sentence in words, as people ask ("why did CI fail on the 2nd run
    of the follow-up?"): words in any script, acronyms, numbers and hyphenated words; no path,
    dotted, snake_case or camelCase name, no code sign."""
    words = compounds(text)
    return (
        bool(words)
        and _CODE_SIGN.search(text) is None
        and all(all(_prose_piece(p) for p in w.split("-")) for w in words)
    )


def query_words(text: str, limit: int | None = None) -> list[str]:
    """The words of a query standing on their own (not parts of a path or identifier), which
    may have other forms or synonyms: distinct, lowercase, in order, stop words left out; the
    first `limit` of them."""
    out: dict[str, None] = {}
    for raw in dict.fromkeys(compounds(text)):
        word = raw.lower()
        if word not in out and _WORD_ALONE.fullmatch(word) and word not in QUERY_STOPWORDS:
            out[word] = None
            if len(out) == limit:
                break
    return list(out)


# Text between double quotes (straight or curly) on one line: a phrase the asker means word for
# word ("to be or not"), whose function words are words to find. Bounded: a stray quote mark
# would otherwise make the rest of a long thought a phrase.
_QUOTED: Final = re.compile(r'"([^"\n]{1,200})"|\u201c([^\u201d\n]{1,200})\u201d')


def _quoted_stopwords(text: str) -> frozenset[str]:
    """The stop words a query holds inside quoted text."""
    if '"' not in text and "\u201c" not in text:
        return frozenset()
    words = (w for m in _QUOTED.finditer(text) for w in _query_tokens(m.group(1) or m.group(2)))
    return frozenset(w for w in words if w in QUERY_STOPWORDS)


def query_terms(text: str) -> list[str]:
    """Distinct terms of a query in the order they first appear, stop words left out unless
    quoted (all of them are kept when the query has nothing else)."""
    terms = list(dict.fromkeys(_query_tokens(text)))
    quoted = _quoted_stopwords(text)
    content = [t for t in terms if t not in QUERY_STOPWORDS or t in quoted]
    return content or terms
