"""A query word's other words: its English forms (``pools``: ``pool``), the nouns and verbs
derived from it or it from (``deploy``: ``deployment``) and its synonyms among the
abbreviations developers write (``db``: ``database``). The index searches them beside a word
no document it may answer with holds (`index._other_words`).

Rules, not a dictionary: some of what they give is not English, and is simply never found.
"""

import re
from functools import lru_cache
from typing import Final

from .analyze import QUERY_STOPWORDS

# Words whose other words are remembered: a query asks for each of its words, and an agent's
# queries repeat theirs; 4k words of 10-30 short strings each are well under 1 MiB.
_MEMO_WORDS: Final = 4_096

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
    return tuple(sorted(f for f in forms if f not in QUERY_STOPWORDS))


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
    return tuple(sorted(f for f in out if f not in QUERY_STOPWORDS))


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


@lru_cache(maxsize=_MEMO_WORDS)
def other_words(word: str) -> tuple[str, ...]:
    """What a query may search for a lowercase `word` beside it: its synonyms, then its other
    forms and its derived nouns and verbs, each once. Memoised: a query asks for each of its
    words, and an agent's queries repeat their words."""
    return tuple(dict.fromkeys((*synonyms(word), *inflections(word), *derivations(word))))
