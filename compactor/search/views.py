"""File views: tool output that shows a file's lines, recognised from the command that made it.

Pure and regex/shlex based, no I/O. At store time `detect` reads an item's command (the `$ cmd`
echo that opens a tool result, a summary that is a command line, or a command stored with its
own text) and says which files it shows and, when it can tell, which lines:

- readers: ``cat``, ``nl``, ``head``, ``tail``, ``sed -n``, ``awk``, ``grep``/``egrep``/``fgrep``/
  ``rg`` (not ``-l``/``-c``/``-q``), ``bat``, ``git show REV:path``, alone or piped into ``sed -n``
  / ``head`` / ``tail`` / ``grep``;
- the agent's own edits: a heredoc or ``echo``/``printf`` written to a file with ``>`` (the whole
  file), ``sed -i`` / ``perl -i`` (the lines it addresses, when numeric).

Lines come from what the output itself numbers (``nl``, ``cat -n``, ``grep -n``) when it does,
else from the command (``sed -n 'A,Bp'``, ``head -n N``, ``tail -n +K``). A result that failed
(``[exit N]``, ``No such file or directory``) or printed nothing is no view, and neither is
anything else a shell prints: ``ls``, ``find``, ``pytest``, ``git status``, ``grep -l``.

`parse_query` reads the same things from a query (a bare path, a reader command, ``file.py:42``,
"lines 10-20"), and `ViewIndex` finds the views of the paths a query names: by basename, and a
dotted module name (``pkg.mod``) by the path's stem. Paths match when one's components end the
other's (``/repo/pkg/mod.py``, ``pkg/mod.py`` and ``mod.py`` are one file).
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Container, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from .analyze import WORD_CHARS, composed

# A command line longer than this is a script, not a command that shows a file.
VIEW_COMMAND_CHARS: Final = 2_000
# Output lines read for line numbers and the files a grep names: a view's span is decided by
# its first and last numbered lines, and a listing longer than this is cut anyway.
VIEW_SCAN_LINES: Final = 2_000
# A grep over a tree that hits more files than this is a search listing, not a view of each.
VIEW_MAX_PATHS: Final = 8

# A view's lines: (first, last), 1-based and inclusive; last 0 means "to the end of the file".
Lines = tuple[int, int]

READERS: Final = frozenset({"cat", "nl", "head", "tail", "sed", "awk", "grep", "egrep", "fgrep", "rg", "bat"})
_GREPS: Final = frozenset({"grep", "egrep", "fgrep", "rg"})
# grep flags that print names, counts or nothing instead of lines.
_GREP_NO_LINES: Final = frozenset(
    {"-l", "-L", "-c", "-q", "--files-with-matches", "--files-without-match", "--count", "--quiet", "--silent"}
)
_GREP_SHORT_NO_LINES: Final = frozenset("lLcq")
# Flags whose value is the next word (not a file): grep/rg, head/tail, nl, cat has none.
_VALUE_FLAGS: Final = {
    "grep": frozenset({"-e", "-f", "-A", "-B", "-C", "-m", "--include", "--exclude", "--exclude-dir"}),
    "rg": frozenset({"-e", "-f", "-A", "-B", "-C", "-m", "-g", "-t", "-T", "--glob", "--type", "--type-not"}),
    "head": frozenset({"-n", "-c"}),
    "tail": frozenset({"-n", "-c"}),
    "nl": frozenset({"-b", "-d", "-f", "-h", "-i", "-l", "-n", "-s", "-v", "-w"}),
    "awk": frozenset({"-F", "-v", "-f"}),
    "sed": frozenset({"-e", "-f", "-l"}),
    "bat": frozenset({"-r", "--line-range", "-l", "--language", "--style", "-H", "--highlight-line"}),
}
# Words that start a command but run or list rather than show a file: a query line opening with
# one names its paths as arguments ("python repro.py" asks for the run's output, not the file).
# fmt: off
_RUNNERS: Final = frozenset({
    "python", "python2", "python3", "pytest", "py.test", "ipython", "node", "deno", "bun", "ruby", "perl",
    "php", "java", "go", "cargo", "make", "cmake", "bash", "sh", "zsh", "npm", "npx", "yarn", "pnpm", "pip",
    "pip3", "uv", "tox", "nox", "coverage", "mypy", "ruff", "flake8", "pylint", "black", "isort", "ls",
    "find", "git", "rm", "cp", "mv", "mkdir", "touch", "chmod", "chown", "echo", "printf", "wc", "diff",
    "which", "export", "source", "curl", "wget", "docker", "kubectl", "xargs", "sort", "uniq", "env", "time",
    "timeout", "du", "df", "ps", "kill", "tar", "unzip", "gcc", "clang", "javac", "jest", "mocha",
})
# fmt: on
_SEPARATORS: Final = frozenset({"|", "||", "&&", ";", "&", "|&"})
_REDIRECTS: Final = frozenset({">", ">>", "<", "&>", ">&", ">|", "<<", "<<<", "<<-", "<&"})
_WRAPPERS: Final = frozenset({"sudo", "command", "time", "nice", "nohup", "stdbuf"})

_ASSIGNMENT = re.compile(r"[A-Za-z_]\w*=")
# A shell word: unquoted characters and quoted strings run together, or a run of operators.
_WORD = re.compile(r"""(?:[^\s;&|<>'"]|'[^']*'|"[^"]*")+|[;&|<>]+""")
_QUOTED = re.compile(r"'([^']*)'|\"([^\"]*)\"")
_EXIT_LINE = re.compile(r"\[exit -?\d+\]\s*$")
# What a reader prints on stderr when it cannot show the file.
_READ_FAILURE = re.compile(
    r"No such file or directory|Is a directory|cannot open|can't read|Permission denied|"
    r"invalid object name|does not exist in|fatal: "
)
_NUMBERED = re.compile(r"\s*(\d+)(?:\t|\s{1,2}\S|\s*$)")  # nl / cat -n: "   580\tcode"
_GREP_NUMBERED = re.compile(r"(\d+)[:-]")  # grep -n on one file: "42:code", "43-context"
_GREP_PREFIXED = re.compile(r"([^\s:]+):(?:(\d+)[:-])?")  # several files: "path:42:code" or "path:code"
_SED_RANGE = re.compile(r"^\s*(\d+|\$)\s*(?:,\s*(\+?)(\d+|\$)\s*)?([pd])?\s*$")
_SED_ADDRESS = re.compile(r"^\s*(\d+)\s*(?:,\s*(\d+))?\s*[a-zA-Z]")
_AWK_RANGE = re.compile(r"NR\s*>=?\s*(\d+)\s*&&\s*NR\s*<=?\s*(\d+)|NR\s*==\s*(\d+)\s*,\s*NR\s*==\s*(\d+)")
_GIT_SHOW_OBJECT = re.compile(r"[^\s:]*:(.+)")
# A word character of a path is analyze.py's, combining marks included: a Hindi file name is
# one path, not pieces cut at each vowel sign.
_WC = WORD_CHARS
_PATHLIKE = re.compile(rf"[{_WC}.@+~-]*(?:/[{_WC}.@+~-]+)+/?|[{_WC}@+~-][{_WC}.@+~-]*\.[A-Za-z0-9_]{{1,10}}")
_GLOB = re.compile(r"[*?\[\]{}$`]")
# Query side: a compound word (as analyze.py tokenises), a path:line[-line], and "lines 10-20".
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
class FileView:
    """What an item shows of files: the program, the paths and, when known, the lines."""

    command: str  # "cat", "sed", "nl", "head", "tail", "awk", "grep", "rg", "bat", "git show", "write", "edit"
    paths: tuple[str, ...]
    lines: Lines | None = None


@dataclass(frozen=True, slots=True)
class ViewQuery:
    """What a query names: paths (as written), the lines it asks about, if any, and the symbols
    it asks to see in them (a grep's pattern, a `name` in backticks), as they are written."""

    paths: tuple[str, ...]
    lines: Lines | None = None
    symbols: tuple[str, ...] = ()


# --- commands ---------------------------------------------------------------------------------


def _words(line: str) -> list[str]:
    """Shell words, with runs of ; & | < > as words of their own (shlex's punctuation_chars):
    a regex for lines without backslashes (shlex costs ~100 us a line, paid on every store),
    shlex itself for the rest."""
    if "\\" not in line:
        if not _WORD.sub("", line).strip():  # every character is in a word or is a space
            found = _WORD.findall(line)
            return [_QUOTED.sub(_unquote, w) if ("'" in w or '"' in w) else w for w in found]
        return line.split()  # an unclosed quote: the line of a heredoc'd script, or prose
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|<>")
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        return list(lexer)
    except ValueError:
        return line.split()


def _unquote(m: re.Match[str]) -> str:
    return m.group(1) if m.group(1) is not None else m.group(2)


def _commands(line: str) -> list[list[list[str]]]:
    """A command line as commands (split on && ; ||), each a pipeline (split on |) of words."""
    out: list[list[list[str]]] = [[[]]]
    for word in _words(line):
        if word in {"|", "|&"}:
            out[-1].append([])
        elif word in _SEPARATORS:
            out.append([[]])
        else:
            out[-1][-1].append(word)
    return [[seg for seg in cmd if seg] for cmd in out if any(cmd)]


def _program(seg: list[str]) -> tuple[str, list[str]]:
    """The program a segment runs (basename; `git show` as one word) and its arguments."""
    i = 0
    while i < len(seg) and (_ASSIGNMENT.match(seg[i]) or seg[i] in _WRAPPERS):
        i += 1
    if i >= len(seg):
        return "", []
    prog = posixpath.basename(seg[i])
    args = seg[i + 1 :]
    if prog == "git" and args and args[0] == "show":
        return "git show", args[1:]
    return prog, args


def _clean(path: str, cwd: str) -> str:
    if cwd and not path.startswith(("/", "~")):
        path = posixpath.join(cwd, path)
    path = posixpath.normpath(path) if path else path
    return "" if path in {".", "/", ".."} else path


def _file_operand(word: str, strict: bool) -> bool:
    if not word or word.startswith("-") or _GLOB.search(word) or word in _REDIRECTS or word == "/dev/null":
        return False
    return bool(_PATHLIKE.fullmatch(word)) if strict else "\n" not in word


@dataclass(slots=True)
class _Read:
    """One reader segment: its program, operands and what it says about lines."""

    command: str
    paths: list[str]
    lines: Lines | None
    numbered: bool  # the output numbers its lines (nl, cat -n, grep -n on one file)
    recursive: bool  # grep over directories: the files are named in the output


def _split_flags(prog: str, args: list[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """Operands, and (flag, value) pairs with the value of a flag that takes one."""
    takes = _VALUE_FLAGS.get("grep" if prog in {"egrep", "fgrep"} else prog, frozenset())
    operands: list[str] = []
    flags: list[tuple[str, str]] = []
    i = 0
    redirected = False
    while i < len(args):
        word = args[i]
        if word in _REDIRECTS:
            target = args[i + 1] if i + 1 < len(args) else ""
            # shlex splits "2>&1" into "2", ">&", "1": a bare number before the operator is its fd.
            fd = operands.pop() if operands and operands[-1].isdigit() else ""
            if word == "<":
                operands.append(target)  # `cat < file` reads the file
            elif word in {">", ">>", "&>", ">|"} and fd in {"", "1"} and target != "/dev/null":
                redirected = True  # the output went to a file, not here
            i += 2
            continue
        if word == "--":
            operands.extend(args[i + 1 :])
            break
        if word.startswith("-") and len(word) > 1 and not (prog in {"head", "tail"} and word[1:].isdigit()):
            name, eq, value = word.partition("=")
            if name in takes and not eq:
                flags.append((name, args[i + 1] if i + 1 < len(args) else ""))
                i += 2
                continue
            if not name.startswith("--") and len(name) > 2 and name[:2] in takes:  # -n20, -A5, -ba
                flags.append((name[:2], name[2:]))
            else:
                flags.append((name, value))
            i += 1
            continue
        if word.startswith("-") and prog in {"head", "tail"}:
            flags.append(("-n", word[1:]))
            i += 1
            continue
        operands.append(word)
        i += 1
    if redirected:
        flags.append((">", ""))
    return operands, flags


def _int(text: str) -> int | None:
    return int(text) if text.isdigit() else None


def _sed_lines(script: str) -> Lines | None:
    """Lines a `sed -n` script prints: 'A,Bp', 'Ap', 'A,+Np', 'A,$p', or several joined by ';'."""
    spans: list[Lines] = []
    for part in script.split(";"):
        if not part.strip():
            continue
        m = _SED_RANGE.match(part)
        if m is None or (m.group(4) or "p") != "p":
            return None
        first = 1 if m.group(1) == "$" else int(m.group(1))
        if m.group(3) is None:
            last = first
        elif m.group(3) == "$":
            last = 0
        else:
            last = first + int(m.group(3)) if m.group(2) else int(m.group(3))
        spans.append((first, last))
    if not spans:
        return None
    return (min(a for a, _ in spans), 0 if any(b == 0 for _, b in spans) else max(b for _, b in spans))


def _reader(prog: str, args: list[str], strict: bool) -> _Read | None:
    """A reader segment, or None when it is not one (or prints no file lines)."""
    if prog == "git show":
        paths = [m.group(1) for a in args if (m := _GIT_SHOW_OBJECT.fullmatch(a)) and not a.startswith("-")]
        paths = [p for p in paths if _file_operand(p, strict)]
        return _Read("git show", paths, (1, 0), False, False) if paths else None
    if prog not in READERS:
        return None
    operands, flags = _split_flags(prog, args)
    names = {f for f, _ in flags}
    if ">" in names:
        return None  # written to a file: the output is not here
    lines: Lines | None = None
    numbered = False
    recursive = False
    if prog == "sed":
        if any(f.startswith("-i") or f == "--in-place" for f in names):
            return None
        scripts = [v for f, v in flags if f == "-e"]
        if not scripts and operands:
            scripts, operands = [operands[0]], operands[1:]
        lines = _sed_lines(";".join(scripts)) if "-n" in names or "--quiet" in names else (1, 0)
    elif prog == "awk":
        if not any(f == "-f" for f in names) and operands:
            program, operands = operands[0], operands[1:]
            m = _AWK_RANGE.search(program)
            if m:
                first, last = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
                lines = (int(first), int(last))
    elif prog in _GREPS:
        for f in names:
            if f in _GREP_NO_LINES or (not f.startswith("--") and _GREP_SHORT_NO_LINES & set(f[1:])):
                return None
        if not names & {"-e", "-f"} and operands:
            operands = operands[1:]  # the pattern
        short = "".join(f[1:] for f in names if not f.startswith("--"))
        recursive = prog == "rg" or "r" in short or "R" in short or "--recursive" in names
        numbered = "n" in short or "--line-number" in names
        if recursive and operands and all("." in posixpath.basename(o) for o in operands):
            recursive = len(operands) > 1  # rg/grep -r on one file name: that file
    elif prog == "head":
        count = [v for f, v in flags if f == "-n"]
        n = _int(count[-1]) if count else 10
        if not any(f == "-c" for f in names) and n:
            lines = (1, n)
    elif prog == "tail":
        count = [v for f, v in flags if f == "-n"]
        if count and count[-1].startswith("+") and count[-1][1:].isdigit():
            lines = (int(count[-1][1:]), 0)
    elif prog == "nl":
        numbered = True
        lines = (1, 0)
    elif prog == "cat":
        numbered = bool({"-n", "-b", "--number"} & names)
        lines = (1, 0)
    elif prog == "bat":
        ranges = [v for f, v in flags if f in {"-r", "--line-range"}]
        if ranges and ":" in ranges[-1]:
            a, _, b = ranges[-1].partition(":")
            lines = (_int(a) or 1, _int(b) or 0)
        else:
            lines = (1, 0)
    paths = [o for o in operands if _file_operand(o, strict)]
    if not paths and not recursive:
        return None
    return _Read(prog, paths, lines, numbered, recursive)


def _narrow(lines: Lines | None, prog: str, args: list[str]) -> tuple[Lines | None, bool]:
    """What a filter after the reader (`| sed -n`, `| head`, `| tail`, `| grep`) leaves of its
    lines; False when the segment is not such a filter (the output is then something else)."""
    operands, flags = _split_flags(prog, args)
    names = {f for f, _ in flags}
    if prog == "sed" and ("-n" in names or "--quiet" in names) and not any(f.startswith("-i") for f in names):
        scripts = [v for f, v in flags if f == "-e"] or operands[:1]
        sub = _sed_lines(";".join(scripts))
        if sub is None or lines is None:
            return None, True
        return _shift(lines, sub), True
    if prog == "head":
        count = [v for f, v in flags if f == "-n"]
        n = _int(count[-1]) if count else 10
        if n is None or lines is None:
            return None, True
        return _shift(lines, (1, n)), True
    if prog == "tail":
        count = [v for f, v in flags if f == "-n"]
        n = _int(count[-1]) if count else 10
        if lines is None or n is None or lines[1] == 0:
            return None, True
        return (max(lines[0], lines[1] - n + 1), lines[1]), True
    if prog in _GREPS and not (names & _GREP_NO_LINES):
        return None, True
    if prog in {"cat", "less", "more", "expand"}:
        return lines, True
    return None, False


def _shift(outer: Lines, inner: Lines) -> Lines:
    """Lines `inner` of a stream that starts at file line outer[0] and ends at outer[1]."""
    first = outer[0] + inner[0] - 1
    last = 0 if inner[1] == 0 else outer[0] + inner[1] - 1
    if outer[1]:
        last = outer[1] if last == 0 else min(last, outer[1])
    return (first, last)


def _output_lines(read: _Read, output: str) -> tuple[list[str], Lines | None]:
    """Paths named in a grep's output (when it searched several files), and the lines the
    output numbers (nl, cat -n, grep -n on one file): its first and last numbered rows, as
    these programs number in file order."""
    rows = output.split("\n", VIEW_SCAN_LINES)[:VIEW_SCAN_LINES]
    # The last numbered row is looked for at the output's end: read from the head only, an
    # 8,999-line `cat -n` claimed lines 1-2000.
    tail = output.rsplit("\n", VIEW_SCAN_LINES)[-VIEW_SCAN_LINES:]
    if read.recursive or len(read.paths) > 1:
        named: dict[str, None] = {}
        if read.command in _GREPS:
            for row in rows:
                m = _GREP_PREFIXED.match(row)
                if m and _PATHLIKE.fullmatch(m.group(1)):
                    named[m.group(1)] = None
        return list(named), None
    pattern = _GREP_NUMBERED if read.command in _GREPS else _NUMBERED
    first = next((int(m.group(1)) for row in rows if (m := pattern.match(row))), None)
    if first is None:
        return [], None
    last = next((int(m.group(1)) for row in reversed(tail) if (m := pattern.match(row))), first)
    return [], (min(first, last), max(first, last))


def _shows_output(output: str) -> bool:
    text = output.strip()
    if not text:
        return False
    first = text.split("\n", 1)[0]
    return not (_EXIT_LINE.match(first) or _READ_FAILURE.search(first))


def _after_cd(cmds: list[list[list[str]]]) -> tuple[str, list[list[list[str]]]]:
    """The directory leading `cd`s move to (relative to the start), and the commands after them."""
    cwd = ""
    while cmds and cmds[0] and _program(cmds[0][0])[0] == "cd":
        args = _program(cmds[0][0])[1]
        cwd = _clean(args[0], cwd) if args else ""
        cmds = cmds[1:]
    return cwd, cmds


def _view_of_command(line: str, output: str, strict: bool) -> FileView | None:
    """The view a reader command line and its output make, or None."""
    cwd, cmds = _after_cd(_commands(line))
    if not cmds or not _shows_output(output):
        return None
    paths: dict[str, None] = {}
    lines: Lines | None = None
    command = ""
    for pipeline in cmds:
        read = _reader(*_program(pipeline[0]), strict=strict)
        if read is None:
            return None  # a reader next to anything else: the output is not only the file
        narrowed = read.lines
        for seg in pipeline[1:]:
            narrowed, ok = _narrow(narrowed, *_program(seg))
            if not ok:
                return None
        named, numbered = _output_lines(read, output) if len(cmds) == 1 else ([], None)
        if read.recursive:
            found = [_clean(p, cwd) for p in named]
            if not found and read.paths and all("." in posixpath.basename(p) for p in read.paths):
                found = [_clean(p, cwd) for p in read.paths]
        else:
            found = [_clean(p, cwd) for p in read.paths]
        for p in found:
            if p:
                paths[p] = None
        # What the output numbers is exact; the command's own range is what it asked for.
        lines = numbered if numbered is not None and (read.numbered or read.command in _GREPS) else narrowed
        command = command or read.command
    if not paths or len(paths) > VIEW_MAX_PATHS:
        return None
    return FileView(command, tuple(paths), lines if len(cmds) == 1 and len(paths) == 1 else None)


# --- the agent's own edits --------------------------------------------------------------------


def _edit_of_command(line: str, body: str) -> FileView | None:
    """A command stored with its own text that writes a file: a heredoc or echo/printf sent
    whole into it with `>` (the whole file), or `sed -i`/`perl -i` on it (its numeric lines)."""
    cwd, cmds = _after_cd(_commands(line))
    if len(cmds) != 1 or len(cmds[0]) != 1:
        return None
    prog, args = _program(cmds[0][0])
    if prog in {"cat", "tee", "echo", "printf"}:
        heredoc = any(a.startswith("<<") for a in args)
        target: list[str] = []
        for i, word in enumerate(args[:-1]):
            if word in {">", ">|"}:
                target.append(args[i + 1])
        if prog == "tee" and not target and heredoc:
            target = [a for a in args if not a.startswith(("-", "<")) and _file_operand(a, True)][:1]
        if prog in {"cat", "tee"} and not (heredoc and body.strip()):
            return None
        paths = [_clean(p, cwd) for p in target if _file_operand(p, True)]
        return FileView("write", (paths[0],), (1, 0)) if len(paths) == 1 and paths[0] else None
    if prog in {"sed", "perl"}:
        operands, flags = _split_flags(prog, args)
        if not any(f.startswith("-i") or f == "--in-place" or (prog == "perl" and "i" in f) for f, _ in flags):
            return None
        scripts = [v for f, v in flags if f == "-e"]
        if not scripts and operands:
            scripts, operands = [operands[0]], operands[1:]
        paths = [_clean(o, cwd) for o in operands if _file_operand(o, True)]
        if not paths or len(paths) > VIEW_MAX_PATHS:
            return None
        lines: Lines | None = None
        m = _SED_ADDRESS.match(scripts[0]) if scripts and prog == "sed" else None
        if m and len(paths) == 1:
            first = int(m.group(1))
            lines = (first, int(m.group(2)) if m.group(2) else first)
        return FileView("edit", tuple(dict.fromkeys(paths)), lines)
    return None


# --- an item ----------------------------------------------------------------------------------


# What a command line that shows or writes a file can start with: checked on its first word
# before it is parsed, as most of what is stored is prose or runs something else.
_OPENERS: Final = READERS | {"git", "cd", "tee", "echo", "printf", "perl"} | _WRAPPERS


def _may_show(line: str) -> bool:
    first = line.split(None, 1)[:1]
    return bool(first) and (posixpath.basename(first[0]) in _OPENERS or bool(_ASSIGNMENT.match(first[0])))


def detect(content: str, summary: str | None = None) -> FileView | None:
    """The files an item shows, or None: from a `$ cmd` echo opening the content, a summary
    that is the command (`$ cmd` or a reader command line naming a path) of the content, or a
    command stored with its own text (a reader and its output, a write or an edit)."""
    head, _, rest = content.lstrip("\n").partition("\n")
    head = head.strip()
    if len(head) > VIEW_COMMAND_CHARS:
        return None
    if head.startswith("$ "):
        return _view_of_command(head[2:], rest, strict=False) if _may_show(head[2:]) else None
    if summary is not None:
        command = summary.strip()
        if command.startswith("$ ") and "\n" not in command:
            output = rest if head == command else content
            return _view_of_command(command[2:], output, strict=False) if _may_show(command[2:]) else None
        if (
            command
            and command != head
            and "\n" not in command
            and len(command) <= VIEW_COMMAND_CHARS
            and _may_show(command)
        ):
            found = _view_of_command(command, content, strict=True)
            if found is not None:
                return found
    if not head or head.endswith("\\") or not _may_show(head):
        return None
    if "<<" in head or ">" in head or " -i" in head:
        return _edit_of_command(head, rest)
    program = _program(head.split(None, 1)[:1])[0]
    if program in READERS or head.startswith("git show "):
        # A command followed by another command is a script of several, not a command and its output.
        following = rest.lstrip("\n").split(None, 1)[:1]
        if following and posixpath.basename(following[0]) in READERS | _RUNNERS | {"cd"}:
            return None
        return _view_of_command(head, rest, strict=True)
    return None


# --- queries ----------------------------------------------------------------------------------


def _components(path: str) -> tuple[str, ...]:
    # Composed (NFC): a name listed by macOS (its accents apart) is the same file typed composed.
    return tuple(p for p in composed(path).lower().split("/") if p and p not in {".", "..", "~"})


def _stem(name: str) -> str:
    stem = name.rsplit(".", 1)[0] if "." in name.lstrip(".") else name
    return stem or name


def _first_words(line: str) -> list[str]:
    """The words of a command line's first command, leading `cd DIR &&`s aside (a line of `cd`s
    alone: its last)."""
    cmds = _commands(line) if "&&" in line else [[line.split()]]
    cmds = _after_cd(cmds)[1] or cmds[-1:]
    return cmds[0][0] if cmds and cmds[0] else []


def _is_command(line: str) -> bool:
    """Whether a line (or a span in backticks) is a command line: a program that shows, runs or
    lists, with at least one argument (a program named alone is a tool, not a command)."""
    first = _first_words(line)
    program = _program(first)[0] if len(first) >= 2 else ""
    return program in READERS or program in _RUNNERS or program in {"git show", "perl"} or _runs_a_program(first)


# A reader named inside a sentence ("Running sed -n '40,60p' pkg/core.py again"): its name as a
# word of its own, then shell tokens (quotes kept) up to its last file operand.
_PROSE_READER: Final = re.compile(r"(?<![\w/.`'\"-])(cat|nl|head|tail|sed|awk|grep|egrep|fgrep|rg|bat)\s")
_RAW_TOKEN: Final = re.compile(r"""(?:[^\s'"]|'[^']*'|"[^"]*")+""")
# Readers whose first operand is a script or a pattern, not a file.
_SCRIPTED: Final = frozenset({"sed", "awk", "grep", "egrep", "fgrep", "rg"})
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
        elif _PATHLIKE.fullmatch(bare):
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
        line = raw.strip().removeprefix("$ ")
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
    if known is not None and not any(_basename_key(w) in known or _module_key(w) in known for w in words):
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
        program = _program(first)[0] if first else ""
        if program in READERS or program in {"git show", "perl"} or line.startswith("git show "):
            commands = True
            view = _view_of_command(line, "shown", strict=True) or _edit_of_command(line, "shown")
            if view is not None:
                shown.update(dict.fromkeys(view.paths))
                shown_lines = shown_lines or (view.lines if view.lines != (1, 0) else None)
                greps.update(dict.fromkeys(_grep_patterns(line)))
            continue
        if program in _RUNNERS or _runs_a_program(first):
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
    for command in _commands(line):
        for seg in command:
            prog, args = _program(seg)
            if prog not in _GREPS:
                continue
            operands, flags = _split_flags(prog, args)
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
    return words[0].startswith(("./", "../", "/")) and not all(_PATHLIKE.fullmatch(w) for w in words)


def _basename_key(word: str) -> str:
    return word.rstrip("/").rsplit("/", 1)[-1].lower()


def _module_key(word: str) -> str:
    """A dotted module name's last part (`pkg.sub.mod` -> `mod`), keyed apart from basenames."""
    return "\0" + word.rsplit(".", 1)[-1].lower() if "." in word and "/" not in word else ""


def overlaps(a: Lines | None, b: Lines | None) -> bool:
    """Whether two line spans share a line; an open end (0) runs to the end of the file."""
    if a is None or b is None:
        return False
    a_end = a[1] or 1 << 62
    b_end = b[1] or 1 << 62
    return a[0] <= b_end and b[0] <= a_end


def covers(outer: Lines | None, inner: Lines | None) -> bool:
    """Whether `outer` holds every line of `inner` (a whole-file view holds every region)."""
    if outer is None or inner is None:
        return False
    o_end = outer[1] or 1 << 62
    i_end = inner[1] or 1 << 62
    return outer[0] <= inner[0] and i_end <= o_end


def _suffix_match(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    n = min(len(a), len(b))
    return n > 0 and a[-n:] == b[-n:]


class ViewIndex:
    """Item ids of file views by basename and by stem, kept in step with the items."""

    __slots__ = ("_by_key",)

    def __init__(self) -> None:
        # key -> {item id: the view's paths as component tuples}
        self._by_key: dict[str, dict[str, list[tuple[str, ...]]]] = {}

    def __len__(self) -> int:
        return len(self._by_key)

    def keys(self) -> frozenset[str]:
        return frozenset(self._by_key)

    def __contains__(self, key: object) -> bool:
        return key in self._by_key

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ViewIndex) and self._by_key == other._by_key

    __hash__ = None  # type: ignore[assignment]

    @staticmethod
    def _keys(path: str) -> Iterator[tuple[str, tuple[str, ...]]]:
        parts = _components(path)
        if parts:
            yield parts[-1], parts
            stem = _stem(parts[-1])
            yield "\0" + stem, (*parts[:-1], stem)

    def add(self, item_id: str, paths: Sequence[str]) -> None:
        for path in paths:
            for key, parts in self._keys(path):
                self._by_key.setdefault(key, {}).setdefault(item_id, []).append(parts)

    def remove(self, item_id: str, paths: Sequence[str]) -> None:
        for path in paths:
            for key, _ in self._keys(path):
                ids = self._by_key.get(key)
                if ids is not None:
                    ids.pop(item_id, None)
                    if not ids:
                        del self._by_key[key]

    def lookup(self, paths: Iterable[str], newest: int | None = None) -> set[str]:
        """Ids of the views of any of `paths` (a path, a basename, or a dotted module name);
        with `newest`, at most that many a path, the last added first (an agent re-reads a file
        tens of times: the newest views are the ones worth finding)."""
        out: set[str] = set()
        for word in paths:
            wanted: list[tuple[str, tuple[str, ...]]] = []
            want = _components(word)
            if want:
                wanted.append((want[-1], want))
            if "." in word and "/" not in word:
                dotted = tuple(p for p in word.lower().split(".") if p)
                if len(dotted) >= 2:
                    wanted.append(("\0" + dotted[-1], dotted))
            for key, parts in wanted:
                found = 0
                views = self._by_key.get(key, {})
                for item_id in reversed(views):
                    if any(_suffix_match(parts, seen) for seen in views[item_id]):
                        out.add(item_id)
                        found += 1
                        if newest is not None and found >= newest:
                            break
        return out


def describe(command: str | None, paths: Sequence[str], lines: Sequence[int]) -> str:
    """One line naming what an item shows: "shows django/x.py lines 10-20 (sed)"."""
    if not paths:
        return ""
    span = ""
    if len(lines) == 2:
        first, last = lines
        span = f" lines {first}-" + (str(last) if last else "end") if (first, last) != (1, 0) else " (whole file)"
    return f"shows {', '.join(paths)}{span}" + (f" ({command})" if command else "")
