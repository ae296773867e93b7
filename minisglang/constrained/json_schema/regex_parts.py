"""Regex building blocks. Every helper returns a regex that is safe to concatenate (an
alternation is always wrapped in a group), or None for "matches nothing"."""
from __future__ import annotations

import re


def _alt(options: list[str | None]) -> str | None:
    """Alternation of the options that match something; None if none does."""
    unique = list(dict.fromkeys(o for o in options if o is not None))
    if not unique:
        return None
    if "" in unique:  # the empty option makes the rest optional
        rest = _alt([o for o in unique if o != ""])
        return "" if rest is None else _repeat(rest, 0, 1)
    return unique[0] if len(unique) == 1 else "(?:" + "|".join(unique) + ")"


def _is_atom(regex: str) -> bool:
    """Whether a quantifier may follow `regex` directly: one (escaped) char or one class."""
    return bool(re.fullmatch(r"\\?.|\\x[0-9a-f]{2}|\\u[0-9a-f]{4}|\[(\\.|[^\]\\])*\]", regex, re.S))


def _repeat(regex: str | None, lo: int, hi: int | None) -> str | None:
    """`regex` repeated lo..hi times (hi None: unbounded)."""
    if regex is None or regex == "":
        return "" if lo == 0 or regex == "" else None
    if hi == 0:
        return ""
    if lo == hi == 1:
        return regex
    atom = regex if _is_atom(regex) else f"(?:{regex})"
    if hi is None:
        return atom + ("*" if lo == 0 else "+" if lo == 1 else f"{{{lo},}}")
    if lo == hi:
        return f"{atom}{{{lo}}}"
    return atom + ("?" if (lo, hi) == (0, 1) else f"{{{lo},{hi}}}")


def _digit_class(lo: int, hi: int) -> str:
    """A class for the decimal digits lo..hi: 5, [89], [2-5]."""
    return str(lo) if lo == hi else f"[{lo}{hi}]" if hi == lo + 1 else f"[{lo}-{hi}]"


def _concat(*parts: str | None) -> str | None:
    """Concatenation; None if any part matches nothing."""
    return None if any(p is None for p in parts) else "".join(parts)
