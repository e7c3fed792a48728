"""What a query asks to see: its command lines (written alone, in backticks or inside a
sentence), and the files, lines and symbols they name.

`parse_query` reads from a query what `views.detect` reads from an item (a bare path, a reader
command, ``file.py:42``, "lines 10-20"), for the search to lift the views of those files
(`views.ViewIndex`); `query_lines` and `tick_commands` say which lines of a query are commands.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from .analyze import WORD_CHARS, composed
from .commands import GREPS, PATHLIKE, READERS, RUNNERS, Lines, after_cd, program_of, split_commands, split_flags
from .views import basename_key, edit_of_command, module_key, view_of_command

_WC = WORD_CHARS

# A compound word (as analyze.py tokenises), a path:line[-line], and "lines 10-20".
_QUERY_TOKEN = re.compile(rf"(?:~?/|\.\.?/)?[{_WC}](?:[{_WC}./+@~-]*[{_WC}])?")
_PATH_LINE = re.compile(rf"([{_WC}./+@~-]*[{_WC}]\.\w+|[{_WC}.+@~-]*/[{_WC}./+@~-]*[{_WC}]):(\d+)(?:[-:](\d+))?")
_LINES_PHRASE = re.compile(r"\blines?\s+(\d+)(?:\s*(?:-|\u2013|to|\.\.|through)\s*(\d+))?", re.IGNORECASE)
# A symbol named in prose: a name in backticks (a call's "()" aside), dotted or not.
_TICKED = re.compile(r"`([^`\n]{1,100})`")
# A command in backticks inside prose: as long as a command line an echo is compared on.
_TICKED_COMMAND: Final = re.compile(r"`([^`\n]{1,500})`")
_NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
# A name that is code written bare in prose: snake_case, camelCase or CapWords with an inner
# capital, a dunder ("parse_headers", "getInlines", "QuerySet", "__init__").
_CODE_NAME = re.compile(r"_*[A-Za-z][A-Za-z0-9]*(?:_+[A-Za-z0-9]+)+_*|_*[a-z]+[A-Z]\w*|[A-Z][a-z0-9]+[A-Z]\w*")
# What a grep pattern matches as written once escapes, anchors and wildcards are taken out.
_PATTERN_SPLIT = re.compile(r"\.\*|\.\+|\[[^\]]*\]|\\[|()+?{}]|[*?{}]")
# A symbol shorter than this is in every view of a file ("x", "if").
SYMBOL_MIN_CHARS: Final = 3
# Symbols taken from one query at most: a thought may name many, the first ones say what it is after.
SYMBOLS_MAX: Final = 8


@dataclass(frozen=True, slots=True)
class ViewQuery:
    """What a query names: paths (as written), the lines it asks about, if any, and the symbols
    it asks to see in them (a grep's pattern, a `name` in backticks), as they are written."""

    paths: tuple[str, ...]
    lines: Lines | None = None
    symbols: tuple[str, ...] = ()


def _first_words(line: str) -> list[str]:
    """The words of a command line's first command, leading `cd DIR &&`s aside (a line of `cd`s
    alone: its last)."""
    cmds = split_commands(line) if "&&" in line else [[line.split()]]
    cmds = after_cd(cmds)[1] or cmds[-1:]
    return cmds[0][0] if cmds and cmds[0] else []


def _is_command(line: str) -> bool:
    """Whether a line (or a span in backticks) is a command line: a program that shows, runs or
    lists, with at least one argument (a program named alone is a tool, not a command)."""
    first = _first_words(line)
    program = program_of(first)[0] if len(first) >= 2 else ""
    return program in READERS or program in RUNNERS or program in {"git show", "perl"} or _runs_a_program(first)


# A reader named inside a sentence ("Running sed -n '40,60p' pkg/core.py again"): its name as a
# word of its own, then shell tokens (quotes kept) up to its last file operand.
_PROSE_READER: Final = re.compile(rf"(?<![\w/.`'\"-])({'|'.join(sorted(READERS))})\s")
_RAW_TOKEN: Final = re.compile(r"""(?:[^\s'"]|'[^']*'|"[^"]*")+""")
# Readers whose first operand is a script or a pattern, not a file.
_SCRIPTED: Final = GREPS | {"sed", "awk"}
_SENTENCE_END: Final = ".,;:!?)"  # what ends a sentence after a file name


def _reader_in_prose(line: str) -> str | None:
    """The first reader command a line of prose writes out with a file to read, as written; None
    when none does ("the cat sat", "grep for the error" name no file)."""
    for m in _PROSE_READER.finditer(line):
        end = _reader_end(line, m.end(), m.group(1))
        if end is not None:
            return line[m.start() : end]
    return None


def _reader_end(line: str, at: int, program: str) -> int | None:
    """Where the reader `program` written from `at` on ends: after its last file operand (or the
    script of a reader piped after it), flags and their numbers and its script or pattern
    taken in; None when a word that is none of these comes before any file. Token by token, so
    a long sentence is read only as far as its command goes."""
    tokens = _RAW_TOKEN.finditer(line, at)
    script, end = False, None
    token = next(tokens, None)
    while token is not None:
        word, after = token.group(), next(tokens, None)
        bare = word.rstrip(_SENTENCE_END)
        if word == "|" and after is not None and after.group() in READERS:
            program, script, token = after.group(), False, next(tokens, None)
            continue
        if word.startswith("-") and len(word) > 1:
            if after is not None and after.group().isdigit():
                after = next(tokens, None)  # a flag's number (-n 20, -A 3)
        elif program in _SCRIPTED and not script:
            script = True
            if end is not None:  # a script after a pipe: `nl -ba a.py | sed -n '1,5p'`
                end = token.end()
        elif PATHLIKE.fullmatch(bare):
            end = token.end() - (len(word) - len(bare))
        else:
            break
        token = after
    return end


def query_lines(text: str) -> list[str]:
    """A query's lines, `$ ` prompts and blank lines aside, with each command in backticks inside
    a line of prose ("what did `python repro.py` print?") taken out as a line of its own: it
    asks about that command, as a command line does, and its paths are arguments to it. So is
    the first reader a line of prose writes out with its file ("running sed -n '40,60p' a.py
    again"): it names the lines or the pattern wanted."""
    out: list[str] = []
    for raw in text.split("\n"):
        line = raw.strip().removeprefix("$ ").strip()
        if "`" in line and not _is_command(line):
            for span in dict.fromkeys(_TICKED_COMMAND.findall(line)):
                if _is_command(span.strip()):
                    out.append(span.strip())
                    line = line.replace(f"`{span}`", " ")
            line = line.strip()
        if line and not _is_command(line):
            reader = _reader_in_prose(line)
            if reader is not None:
                out.append(reader)
                line = line.replace(reader, " ").strip()
        if line:
            out.append(line)
    return out


# A `cd DIR && ` opening a command line: a sentence names the command after it.
_CD_PREFIX: Final = re.compile(r"^cd \S+ && ")


def named_command(flat: str, cmd: str) -> str | None:
    """The command line `cmd` as `flat` (a query, its spaces made single) names it, a leading
    `cd DIR && ` aside, when it names it whole: not inside a longer word or path; None when it
    does not. A program alone ("ls") is a word of prose, not a command to find."""
    core = _CD_PREFIX.sub("", cmd)
    if " " not in core:
        return None
    start = flat.find(core)
    while start >= 0:
        end = start + len(core)
        before = flat[start - 1] if start else " "
        after = flat[end] if end < len(flat) else " "
        if not (before.isalnum() or before in "_/.-") and not (after.isalnum() or after in "_/-"):
            return core
        start = flat.find(core, start + 1)
    return None


def tick_commands(text: str, commands: Iterable[str]) -> str:
    """`text` with each of `commands` that a line of prose names put in backticks (spaces as in
    the command), so `parse_query` reads it as the command it is."""
    wanted = [c for c in dict.fromkeys(commands) if c]
    out: list[str] = []
    for line in text.split("\n"):
        flat = " ".join(line.split())
        named = [] if _is_command(flat) else [c for c in wanted if c in flat and f"`{c}`" not in flat]
        ticked: list[str] = []
        for cmd in sorted(named, key=len, reverse=True):  # "python a.py -v" before "python a.py"
            if not any(cmd in longer for longer in ticked):
                flat = flat.replace(cmd, f"`{cmd}`")
                ticked.append(cmd)
        out.append(flat if named else line)
    return "\n".join(out)


def parse_query(text: str, known: Container[str] | None = None) -> ViewQuery | None:
    """The paths a query names and the lines it asks for. When the query holds a command line,
    only its reader commands name files to show: a line that runs something (`python x.py`,
    `pytest tests/`, `git diff`) names its paths as arguments, and the prose around a command
    says why it runs, not what to show. Without a command, the paths of the prose count
    (`pkg/mod.py`, `mod.py:42`, `pkg.mod`, "lines 10-20"). `known`, when given, holds the
    viewed basenames (lowercase): a query naming none of them is answered without parsing."""
    text = composed(text)  # as the paths it is matched against (`_components`)
    words = _QUERY_TOKEN.findall(text)
    if known is not None and not any(basename_key(w) in known or module_key(w) in known for w in words):
        return None
    shown: dict[str, None] = {}
    shown_lines: Lines | None = None
    prose: dict[str, None] = {}
    prose_lines: Lines | None = None
    greps: dict[str, None] = {}
    ticked: dict[str, None] = {}
    commands = False
    for line in query_lines(text):
        first = _first_words(line)
        program = program_of(first)[0] if first else ""
        if program in READERS or program in {"git show", "perl"} or line.startswith("git show "):
            commands = True
            view = view_of_command(line, "shown", strict=True) or edit_of_command(line, "shown")
            if view is not None:
                shown.update(dict.fromkeys(view.paths))
                shown_lines = shown_lines or (view.lines if view.lines != (1, 0) else None)
                greps.update(dict.fromkeys(_grep_patterns(line)))
            continue
        if program in RUNNERS or _runs_a_program(first):
            commands = True
            continue
        for m in _PATH_LINE.finditer(line):
            a, b = int(m.group(2)), int(m.group(3)) if m.group(3) else int(m.group(2))
            prose_lines = prose_lines or (min(a, b), max(a, b))
        m2 = _LINES_PHRASE.search(line)
        if m2 and prose_lines is None:
            a, b = int(m2.group(1)), int(m2.group(2)) if m2.group(2) else int(m2.group(1))
            prose_lines = (min(a, b), max(a, b))
        for w in _QUERY_TOKEN.findall(line):
            if "/" in w or "." in w.strip(".") or (known is not None and w.lower() in known):
                prose[w] = None
        spans = [*_TICKED.findall(line), *(w for w in _QUERY_TOKEN.findall(line) if _CODE_NAME.fullmatch(w))]
        for span in spans:
            name = span.strip().removesuffix("()")
            if _NAME.fullmatch(name) and not (known is not None and name.lower() in known):
                ticked[name] = None  # a file's name in backticks is the file, not a symbol in it
    paths, lines = (shown, shown_lines) if commands else (prose, prose_lines)
    if not paths:
        return None
    # A grep's pattern is what the asker wants to see; else the names the prose puts in backticks.
    symbols = [s for s in (greps or ticked) if len(s) >= SYMBOL_MIN_CHARS and s not in paths]
    return ViewQuery(tuple(paths), lines, tuple(symbols[:SYMBOLS_MAX]))


def _grep_patterns(line: str) -> list[str]:
    """What the grep commands of a command line look for, as the text a matching line holds:
    the pattern's longest stretch free of wildcards, escapes and anchors."""
    out: list[str] = []
    for command in split_commands(line):
        for seg in command:
            prog, args = program_of(seg)
            if prog not in GREPS:
                continue
            operands, flags = split_flags(prog, args)
            if any(f == "-f" for f, _ in flags):
                continue
            for pattern in [v for f, v in flags if f == "-e"] or operands[:1]:
                pieces = _PATTERN_SPLIT.split(pattern.removeprefix("^").removesuffix("$").replace("\\.", "."))
                piece = max(pieces, key=len).strip() if pieces else ""
                if piece:
                    out.append(piece)
    return out


def _runs_a_program(words: Sequence[str]) -> bool:
    """Whether a line's words run a program by its path: `bin/test x`, `./manage.py check`
    (a relative or absolute path with arguments that are not all paths, or an extensionless
    file such as bin/test), rather than name files (`pkg/a.py pkg/b.py`)."""
    if len(words) < 2 or "/" not in words[0]:
        return False
    if "." not in posixpath.basename(words[0]):
        return True
    return words[0].startswith(("./", "../", "/")) and not all(PATHLIKE.fullmatch(w) for w in words)
