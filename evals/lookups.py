"""Strict relevance for file re-reads (ISSUE 40 point 3): of the earlier events that showed the
file, the ones that show what the query asks for.

The first derivation counts every earlier view of a file as an answer to a re-read of it. Seen
from outside, a re-read that names a symbol ("Let's check `find_ordering_name`" with `grep -n
"def find_ordering_name" compiler.py`) or lines (`sed -n '18,35p' expressions.py`) is answered
only by a view whose lines hold that symbol or those lines; another view of the same file that
does not is a wrong first hit. This module decides that from the query and the events' text
alone, by rules of its own (not compactor's view detection):

- the symbols a query names: the patterns of the grep/rg commands of its command line, quoted;
  else the identifiers in backticks of its prose (not paths or file names);
- the lines: `sed -n 'A,Bp'` (alone or after `nl`/`cat -n`), `head -n N`; nothing else;
- an event answers when its text holds one of the symbols (as written), or, the query naming no
  symbol, when the lines it shows (numbered in its output, else its own `sed -n`/`head` range,
  else the whole file for a plain `cat`/`nl`) overlap those asked; a query naming neither is
  answered by every relevant event.

A query none of whose relevant events answers it is left out of the strict score (its file was
never shown where the symbol or lines are).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

_BACKTICK = re.compile(r"`([^`\n]{3,80})`")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*(?:\(\))?")
_FILE_NAME = re.compile(r".*\.(py|pyi|txt|rst|md|cfg|toml|ini|json|yml|yaml|html|js|c|h)$")
_GREP = re.compile(r"""\b(?:grep|egrep|fgrep|rg)\b(?:\s+-[\w-]+(?:\s+\d+)?)*\s+(?:'([^']+)'|"([^"]+)")""")
_SED = re.compile(r"""sed\s+-n\s+['"]?(\d+)\s*,\s*(\d+)p""")
_HEAD = re.compile(r"\bhead\s+-(?:n\s*)?(\d+)\b")
_NUMBERED = re.compile(r"^\s*(\d+)(?:\t|[:-])", re.M)


@dataclass(frozen=True)
class Asked:
    symbols: tuple[str, ...]
    lines: tuple[int, int] | None


def asked(query: str) -> Asked:
    """The symbols and lines a file re-read's query asks for (see the module doc)."""
    lines = query.strip().split("\n")
    command = lines[-1] if lines else ""
    prose = "\n".join(lines[:-1])
    symbols = [a or b for a, b in _GREP.findall(command)]
    if not symbols:
        for span in _BACKTICK.findall(prose):
            word = span.strip().removesuffix("()")
            if _IDENT.fullmatch(word) and "/" not in word and not _FILE_NAME.match(word):
                symbols.append(word)
    span: tuple[int, int] | None = None
    m = _SED.search(command)
    if m:
        span = (int(m.group(1)), int(m.group(2)))
    elif (h := _HEAD.search(command)) is not None:
        span = (1, int(h.group(1)))
    return Asked(tuple(dict.fromkeys(s for s in symbols if len(s) >= 3)), span)


def shown(content: str) -> tuple[int, int] | None:
    """The lines an event shows: numbered in its output, else its own command's range, else the
    whole file (0, 0) for a command that prints it whole; None when it cannot tell."""
    head, _, body = content.partition("\n")
    numbers = [int(n) for n in _NUMBERED.findall(body[:200_000])]
    if numbers:
        return min(numbers), max(numbers)
    m = _SED.search(head)
    if m:
        return int(m.group(1)), int(m.group(2))
    h = _HEAD.search(head)
    if h:
        return 1, int(h.group(1))
    if re.match(r"\$ (cat|nl)\s", head) and "|" not in head:
        return 0, 0
    return None


def answers(content: str, ask: Asked) -> bool:
    if ask.symbols:
        return any(s in content for s in ask.symbols)
    if ask.lines is None:
        return True
    span = shown(content)
    if span is None:
        return False
    if span == (0, 0):
        return True
    return span[0] <= ask.lines[1] and ask.lines[0] <= span[1]


def bare_query(path: str, query: str) -> str | None:
    """A re-read asked as a path and what it looks for, nothing else: "pkg/mod.py parse_headers",
    "pkg/mod.py lines 10-20" (the shape of a lookup typed on purpose); None when the query asks
    for neither a symbol nor lines."""
    ask = asked(query)
    if ask.symbols:
        return f"{path} {ask.symbols[0]}"
    if ask.lines is not None:
        return f"{path} lines {ask.lines[0]}-{ask.lines[1]}"
    return None


def strict_relevant(query: str, relevant: Iterable[int], content_of: Mapping[int, str]) -> tuple[int, ...]:
    """The relevant events (by seq) that show what the query asks for."""
    ask = asked(query)
    return tuple(seq for seq in relevant if seq in content_of and answers(content_of[seq], ask))


# How a revisit may be asked (`evals.replay --fast --ask`): the derivation's own form, or the
# command in backticks inside prose, as people and agents write a command in a sentence.
ASK_SHAPES = ("lines", "ticked", "question", "said")


def asked_as(shape: str, query: str, command: str) -> str:
    """A revisit's query asked another way. "lines" is the derivation's own: the thought, then
    the command on a line of its own. "ticked": the thought, then the command in backticks inside
    a sentence ("... Running `python repro.py` again."). "question": the command in backticks in
    a question, and nothing else ("What did `python repro.py` print last time?"). "said": as
    "ticked", without the backticks ("... Running python repro.py again."). A command of several
    lines, or holding a backtick, is asked as derived."""
    command = command.strip()
    if shape == "lines" or not command or "\n" in command or "`" in command or not query.endswith(command):
        return query
    if shape == "question":
        return f"What did `{command}` print last time?"
    tick = "`" if shape == "ticked" else ""
    return f"{query[: -len(command)].strip()} Running {tick}{command}{tick} again.".lstrip()
