"""File views: tool output that shows a file's lines, recognised from the command that made it.

Pure, no I/O. At store time `detect` reads an item's command (the `$ cmd`
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

`ViewIndex` finds the views of the paths a query names (`view_query.parse_query` reads them): by
basename, and a dotted module name (``pkg.mod``) by the path's stem. Paths match when one's
components end the other's (``/repo/pkg/mod.py``, ``pkg/mod.py`` and ``mod.py`` are one file).
The command lines themselves are read by `commands.py`.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from .analyze import composed
from .commands import (
    ASSIGNMENT,
    GREPS,
    PATHLIKE,
    READERS,
    RUNNERS,
    WRAPPERS,
    Lines,
    Read,
    after_cd,
    clean_path,
    file_operand,
    narrow,
    program_of,
    reader_of,
    split_commands,
    split_flags,
)

# A command line longer than this is a script, not a command that shows a file.
VIEW_COMMAND_CHARS: Final = 2_000
# Output lines read for line numbers and the files a grep names: a view's span is decided by
# its first and last numbered lines, and a listing longer than this is cut anyway.
VIEW_SCAN_LINES: Final = 2_000
# A grep over a tree that hits more files than this is a search listing, not a view of each.
VIEW_MAX_PATHS: Final = 8

_EXIT_LINE = re.compile(r"\[exit -?\d+\]\s*$")
# What a reader prints on stderr when it cannot show the file.
_READ_FAILURE = re.compile(
    r"No such file or directory|Is a directory|cannot open|can't read|Permission denied|"
    r"invalid object name|does not exist in|fatal: "
)
_NUMBERED = re.compile(r"\s*(\d+)(?:\t|\s{1,2}\S|\s*$)")  # nl / cat -n: "   580\tcode"
_GREP_NUMBERED = re.compile(r"(\d+)[:-]")  # grep -n on one file: "42:code", "43-context"
_GREP_PREFIXED = re.compile(r"([^\s:]+):(?:(\d+)[:-])?")  # several files: "path:42:code" or "path:code"
_SED_ADDRESS = re.compile(r"^\s*(\d+)\s*(?:,\s*(\d+))?\s*[a-zA-Z]")


@dataclass(frozen=True, slots=True)
class FileView:
    """What an item shows of files: the program, the paths and, when known, the lines."""

    command: str  # "cat", "sed", "nl", "head", "tail", "awk", "grep", "rg", "bat", "git show", "write", "edit"
    paths: tuple[str, ...]
    lines: Lines | None = None


def _output_lines(read: Read, output: str) -> tuple[list[str], Lines | None]:
    """Paths named in a grep's output (when it searched several files), and the lines the
    output numbers (nl, cat -n, grep -n on one file): its first and last numbered rows, as
    these programs number in file order."""
    rows = output.split("\n", VIEW_SCAN_LINES)[:VIEW_SCAN_LINES]
    # The last numbered row is looked for at the output's end: read from the head only, an
    # 8,999-line `cat -n` claimed lines 1-2000.
    tail = output.rsplit("\n", VIEW_SCAN_LINES)[-VIEW_SCAN_LINES:]
    if read.recursive or len(read.paths) > 1:
        named: dict[str, None] = {}
        if read.command in GREPS:
            for row in rows:
                m = _GREP_PREFIXED.match(row)
                if m and PATHLIKE.fullmatch(m.group(1)):
                    named[m.group(1)] = None
        return list(named), None
    pattern = _GREP_NUMBERED if read.command in GREPS else _NUMBERED
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


def view_of_command(line: str, output: str, strict: bool) -> FileView | None:
    """The view a reader command line and its output make, or None."""
    cwd, cmds = after_cd(split_commands(line))
    if not cmds or not _shows_output(output):
        return None
    paths: dict[str, None] = {}
    lines: Lines | None = None
    command = ""
    for pipeline in cmds:
        read = reader_of(*program_of(pipeline[0]), strict=strict)
        if read is None:
            return None  # a reader next to anything else: the output is not only the file
        narrowed = read.lines
        for seg in pipeline[1:]:
            narrowed, ok = narrow(narrowed, *program_of(seg))
            if not ok:
                return None
        named, numbered = _output_lines(read, output) if len(cmds) == 1 else ([], None)
        if read.recursive:
            found = [clean_path(p, cwd) for p in named]
            if not found and read.paths and all("." in posixpath.basename(p) for p in read.paths):
                found = [clean_path(p, cwd) for p in read.paths]
        else:
            found = [clean_path(p, cwd) for p in read.paths]
        for p in found:
            if p:
                paths[p] = None
        # What the output numbers is exact; the command's own range is what it asked for.
        lines = numbered if numbered is not None and (read.numbered or read.command in GREPS) else narrowed
        command = command or read.command
    if not paths or len(paths) > VIEW_MAX_PATHS:
        return None
    return FileView(command, tuple(paths), lines if len(cmds) == 1 and len(paths) == 1 else None)


def edit_of_command(line: str, body: str) -> FileView | None:
    """A command stored with its own text that writes a file: a heredoc or echo/printf sent
    whole into it with `>` (the whole file), or `sed -i`/`perl -i` on it (its numeric lines)."""
    cwd, cmds = after_cd(split_commands(line))
    if len(cmds) != 1 or len(cmds[0]) != 1:
        return None
    prog, args = program_of(cmds[0][0])
    if prog in {"cat", "tee", "echo", "printf"}:
        heredoc = any(a.startswith("<<") for a in args)
        target: list[str] = []
        for i, word in enumerate(args[:-1]):
            if word in {">", ">|"}:
                target.append(args[i + 1])
        if prog == "tee" and not target and heredoc:
            target = [a for a in args if not a.startswith(("-", "<")) and file_operand(a, True)][:1]
        if prog in {"cat", "tee"} and not (heredoc and body.strip()):
            return None
        paths = [clean_path(p, cwd) for p in target if file_operand(p, True)]
        return FileView("write", (paths[0],), (1, 0)) if len(paths) == 1 and paths[0] else None
    if prog in {"sed", "perl"}:
        operands, flags = split_flags(prog, args)
        if not any(f.startswith("-i") or f == "--in-place" or (prog == "perl" and "i" in f) for f, _ in flags):
            return None
        scripts = [v for f, v in flags if f == "-e"]
        if not scripts and operands:
            scripts, operands = [operands[0]], operands[1:]
        paths = [clean_path(o, cwd) for o in operands if file_operand(o, True)]
        if not paths or len(paths) > VIEW_MAX_PATHS:
            return None
        lines: Lines | None = None
        m = _SED_ADDRESS.match(scripts[0]) if scripts and prog == "sed" else None
        if m and len(paths) == 1:
            first = int(m.group(1))
            lines = (first, int(m.group(2)) if m.group(2) else first)
        return FileView("edit", tuple(dict.fromkeys(paths)), lines)
    return None


# What a command line that shows or writes a file can start with: checked on its first word
# before it is parsed, as most of what is stored is prose or runs something else.
_OPENERS: Final = READERS | {"git", "cd", "tee", "echo", "printf", "perl"} | WRAPPERS


def _may_show(line: str) -> bool:
    first = line.split(None, 1)[:1]
    return bool(first) and (posixpath.basename(first[0]) in _OPENERS or bool(ASSIGNMENT.match(first[0])))


def detect(content: str, summary: str | None = None) -> FileView | None:
    """The files an item shows, or None: from a `$ cmd` echo opening the content, a summary
    that is the command (`$ cmd` or a reader command line naming a path) of the content, or a
    command stored with its own text (a reader and its output, a write or an edit)."""
    head, _, rest = content.lstrip("\n").partition("\n")
    head = head.strip()
    if len(head) > VIEW_COMMAND_CHARS:
        return None
    if head.startswith("$ "):
        return view_of_command(head[2:], rest, strict=False) if _may_show(head[2:]) else None
    if summary is not None:
        command = summary.strip()
        if command.startswith("$ ") and "\n" not in command:
            output = rest if head == command else content
            return view_of_command(command[2:], output, strict=False) if _may_show(command[2:]) else None
        if (
            command
            and command != head
            and "\n" not in command
            and len(command) <= VIEW_COMMAND_CHARS
            and _may_show(command)
        ):
            found = view_of_command(command, content, strict=True)
            if found is not None:
                return found
    if not head or head.endswith("\\") or not _may_show(head):
        return None
    if "<<" in head or ">" in head or " -i" in head:
        return edit_of_command(head, rest)
    program = program_of(head.split(None, 1)[:1])[0]
    if program in READERS or head.startswith("git show "):
        # A command followed by another command is a script of several, not a command and its output.
        following = rest.lstrip("\n").split(None, 1)[:1]
        if following and posixpath.basename(following[0]) in READERS | RUNNERS | {"cd"}:
            return None
        return view_of_command(head, rest, strict=True)
    return None


def _components(path: str) -> tuple[str, ...]:
    # Composed (NFC): a name listed by macOS (its accents apart) is the same file typed composed.
    return tuple(p for p in composed(path).lower().split("/") if p and p not in {".", "..", "~"})


def _stem(name: str) -> str:
    stem = name.rsplit(".", 1)[0] if "." in name.lstrip(".") else name
    return stem or name


def basename_key(word: str) -> str:
    """The `ViewIndex` key a query word naming a file finds its views under (its basename)."""
    return word.rstrip("/").rsplit("/", 1)[-1].lower()


def module_key(word: str) -> str:
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
