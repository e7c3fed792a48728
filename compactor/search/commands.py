"""Shell command lines read as programs: words, pipelines and the commands joined by && ;
||, the program each runs and its flags, the directory leading `cd`s move to, and what a
reader (cat, sed -n, head, grep ...) prints of the files it names.

Pure and regex/shlex based, no I/O: `views.py` reads an item's command with it, and
`view_query.py` a query's.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from dataclasses import dataclass
from typing import Final

from .analyze import WORD_CHARS

# A view's lines: (first, last), 1-based and inclusive; last 0 means "to the end of the file".
Lines = tuple[int, int]
READERS: Final = frozenset({"cat", "nl", "head", "tail", "sed", "awk", "grep", "egrep", "fgrep", "rg", "bat"})
GREPS: Final = frozenset({"grep", "egrep", "fgrep", "rg"})
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
RUNNERS: Final = frozenset({
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
WRAPPERS: Final = frozenset({"sudo", "command", "time", "nice", "nohup", "stdbuf"})
ASSIGNMENT = re.compile(r"[A-Za-z_]\w*=")
# A shell word: unquoted characters and quoted strings run together, or a run of operators.
_WORD = re.compile(r"""(?:[^\s;&|<>'"]|'[^']*'|"[^"]*")+|[;&|<>]+""")
_QUOTED = re.compile(r"'([^']*)'|\"([^\"]*)\"")
_SED_RANGE = re.compile(r"^\s*(\d+|\$)\s*(?:,\s*(\+?)(\d+|\$)\s*)?([pd])?\s*$")
_AWK_RANGE = re.compile(r"NR\s*>=?\s*(\d+)\s*&&\s*NR\s*<=?\s*(\d+)|NR\s*==\s*(\d+)\s*,\s*NR\s*==\s*(\d+)")
_GIT_SHOW_OBJECT = re.compile(r"[^\s:]*:(.+)")
# A word character of a path is analyze.py's, combining marks included: a Hindi file name is
# one path, not pieces cut at each vowel sign.
_WC = WORD_CHARS
PATHLIKE = re.compile(rf"[{_WC}.@+~-]*(?:/[{_WC}.@+~-]+)+/?|[{_WC}@+~-][{_WC}.@+~-]*\.[A-Za-z0-9_]{{1,10}}")
_GLOB = re.compile(r"[*?\[\]{}$`]")


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


def split_commands(line: str) -> list[list[list[str]]]:
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


def program_of(seg: list[str]) -> tuple[str, list[str]]:
    """The program a segment runs (basename; `git show` as one word) and its arguments."""
    i = 0
    while i < len(seg) and (ASSIGNMENT.match(seg[i]) or seg[i] in WRAPPERS):
        i += 1
    if i >= len(seg):
        return "", []
    prog = posixpath.basename(seg[i])
    args = seg[i + 1 :]
    if prog == "git" and args and args[0] == "show":
        return "git show", args[1:]
    return prog, args


def clean_path(path: str, cwd: str) -> str:
    """`path` as the command meant it after its leading `cd`s (`cwd`), normalised; "" for the
    current, root or parent directory, which name no file."""
    if cwd and not path.startswith(("/", "~")):
        path = posixpath.join(cwd, path)
    path = posixpath.normpath(path) if path else path
    return "" if path in {".", "/", ".."} else path


def file_operand(word: str, strict: bool) -> bool:
    """Whether a reader's operand is a file: no flag, glob, redirect or /dev/null; `strict`
    (a command not known to be echoed with its output) also wants it to look like a path."""
    if not word or word.startswith("-") or _GLOB.search(word) or word in _REDIRECTS or word == "/dev/null":
        return False
    return bool(PATHLIKE.fullmatch(word)) if strict else "\n" not in word


@dataclass(slots=True)
class Read:
    """One reader segment: its program, operands and what it says about lines."""

    command: str
    paths: list[str]
    lines: Lines | None
    numbered: bool  # the output numbers its lines (nl, cat -n, grep -n on one file)
    recursive: bool  # grep over directories: the files are named in the output


def split_flags(prog: str, args: list[str]) -> tuple[list[str], list[tuple[str, str]]]:
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


def reader_of(prog: str, args: list[str], strict: bool) -> Read | None:
    """A reader segment, or None when it is not one (or prints no file lines)."""
    if prog == "git show":
        paths = [m.group(1) for a in args if (m := _GIT_SHOW_OBJECT.fullmatch(a)) and not a.startswith("-")]
        paths = [p for p in paths if file_operand(p, strict)]
        return Read("git show", paths, (1, 0), False, False) if paths else None
    if prog not in READERS:
        return None
    operands, flags = split_flags(prog, args)
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
    elif prog in GREPS:
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
    paths = [o for o in operands if file_operand(o, strict)]
    if not paths and not recursive:
        return None
    return Read(prog, paths, lines, numbered, recursive)


def narrow(lines: Lines | None, prog: str, args: list[str]) -> tuple[Lines | None, bool]:
    """What a filter after the reader (`| sed -n`, `| head`, `| tail`, `| grep`) leaves of its
    lines; False when the segment is not such a filter (the output is then something else)."""
    operands, flags = split_flags(prog, args)
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
    if prog in GREPS and not (names & _GREP_NO_LINES):
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


def after_cd(cmds: list[list[list[str]]]) -> tuple[str, list[list[list[str]]]]:
    """The directory leading `cd`s move to (relative to the start), and the commands after them."""
    cwd = ""
    while cmds and cmds[0] and program_of(cmds[0][0])[0] == "cd":
        args = program_of(cmds[0][0])[1]
        cwd = clean_path(args[0], cwd) if args else ""
        cmds = cmds[1:]
    return cwd, cmds
