"""How an argument's allowed values and a wrong value are said: one sentence, "NAME must be
ALLOWED, got VALUE.", shared by the tool contract (which reads ALLOWED from a tool's schema) and
the Store's own checks (which build it from constants.py), so one violation reads the same
whichever of them catches it."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any, Final

# A wrong argument is echoed in the error up to this many characters: enough to recognise it,
# never a large paste sent back into the model's context.
ARG_ECHO_CHARS: Final = 40


def number(value: Any) -> str:
    """A bound as it is written in a sentence: 1,000 for an integer, 0.2 for a float."""
    return f"{value:,}" if isinstance(value, int) else repr(value)


def span(lo: Any = None, hi: Any = None) -> str:
    """' from LO to HI', ' of at least LO', ' of at most HI' or ''."""
    if lo is not None and hi is not None:
        return f" from {number(lo)} to {number(hi)}"
    if lo is not None:
        return f" of at least {number(lo)}"
    if hi is not None:
        return f" of at most {number(hi)}"
    return ""


def integer(lo: Any = None, hi: Any = None) -> str:
    return "an integer" + span(lo, hi)


def finite(lo: Any = None, hi: Any = None) -> str:
    return "a finite number" + span(lo, hi)


def string(lo: int | None = None, hi: int | None = None) -> str:
    """A string with its length limits (a minimum of 0 or 1 characters goes unsaid)."""
    if lo and hi is not None:
        return f"a string of {lo:,} to {hi:,} characters"
    if hi is not None:
        return f"a string of at most {hi:,} characters"
    if lo:
        return f"a string of at least {lo:,} characters"
    return "a string"


def one_of(values: Iterable[Any]) -> str:
    return "one of " + ", ".join(repr(v) for v in values)


def either(parts: Sequence[str]) -> str:
    """'A', 'A or B', 'A, B or C'."""
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " or " + parts[-1]


def or_null(allowed: str) -> str:
    """An optional argument: None (null) leaves it as it is."""
    return either([allowed, "null"])


def describe_value(value: Any) -> str:
    """What was sent, briefly and without echoing much of it back."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, int | float):
        text = repr(value)
        return f"the number {text}" if len(text) <= ARG_ECHO_CHARS else f"a number of {len(text):,} digits"
    if isinstance(value, str):
        if len(value) <= ARG_ECHO_CHARS:
            return f"the string {value!r}"
        return f"a string of {len(value):,} characters"
    if isinstance(value, list | tuple):
        return f"a list of {len(value):,} item{'s' if len(value) != 1 else ''}"
    if isinstance(value, dict):
        return "an object"
    return f"a value of type {type(value).__name__}"


def must_be(name: str, allowed: str, value: Any) -> str:
    """The sentence for a wrong value: 'importance must be an integer from 1 to 10, got the
    number 11.'"""
    return f"{name} must be {allowed}, got {describe_value(value)}."
