"""`re.search(pattern, text)` decided by our lazy automaton, in time linear in the text.

A JSON schema's `patternProperties` applies a pattern's subschema to every property name
the pattern finds a match in, as the validator decides it: Python's `re.search`. Asked of
Python's `re` itself, a pattern a client wrote could backtrack for minutes on one name
(`^(a+)+$` against 25 `a`s and a `!`: 2 s, doubling with each `a`) inside one C call, holding
the GIL: every other client's request waited, and no compile timeout could stop it (a
stranger's stall hunt). The same question put to a DFA reads each byte of the name once; our
lazy automaton builds the states the name reaches, with a `checkpoint` after each
derivative (work_slices.py), so a compile thread keeps to the scheduler's windows.

Search is a whole match of a wider regex: each top-level alternative of the pattern gets any
text before it unless it opens with `^` or `\\A`, and any text after it unless it closes with
`$` (which also matches before a last newline, as Python's does) or `\\Z`.
"""

from __future__ import annotations

import threading

from .lazy_byte_dfa import LazyByteDFA
from .python_regex import portable_regex
from .regex_dfa import EmptyLanguage, RegexError, _top_level_branches, shown_regex, unescaped

_ANY_TEXT = r"[\s\S]*"
# Each thread's automata of the patterns it searched lately (a schema's patterns are asked
# about each listed name; an automaton grows as it is used, and is not shared across threads).
_KEPT_PER_THREAD = 64


class _Kept(threading.local):
    automata: dict[str, LazyByteDFA | None] | None = None  # (None: the pattern matches no text)


_kept = _Kept()


def search_regex(pattern: str) -> tuple[str, str]:
    """(a regex whose whole matches are the texts `pattern` finds a match in, the pattern
    without the anchors at its alternatives' ends), both in Python's syntax; an anchor
    anywhere else is left for the reader to refuse. RegexError for an unbalanced parenthesis."""
    branches = _top_level_branches(pattern)
    if branches is None:
        portable_regex(pattern)  # (Python's own message says where)
        raise RegexError(f"invalid regex {shown_regex(pattern)}: unbalanced parenthesis")
    wider, bodies = [], []
    for branch in branches:
        head = 1 if branch.startswith("^") else 2 if branch.startswith("\\A") else 0
        body, tail = branch[head:], _ANY_TEXT
        if body.endswith("$") and unescaped(body[:-1]):
            body, tail = body[:-1], "\\n?"
        elif body.endswith("\\Z") and unescaped(body[:-2]):
            body, tail = body[:-2], ""
        wider.append(("" if head else _ANY_TEXT) + f"(?:{body})" + tail)
        bodies.append(body)
    return "|".join(wider), "|".join(bodies)


def searches(pattern: str, text: str) -> bool:
    """Whether `re.search(pattern, text)` finds a match, decided in time linear in `text`.

    Raises RegexError (regex_dfa's, naming the problem) for a pattern Python's `re` cannot
    read or our automata do not support (lookarounds, backreferences, inner anchors, inline
    flags), and for a text holding a lone surrogate, which no UTF-8 automaton reads."""
    automata = _kept.automata
    if automata is None:
        automata = _kept.automata = {}
    if pattern not in automata:
        if len(automata) >= _KEPT_PER_THREAD:
            automata.clear()
        wider, bodies = search_regex(pattern)
        for text_read in (bodies, wider):  # (what our automata cannot read, named in the client's words)
            try:
                written: str | None = portable_regex(text_read)
            except EmptyLanguage:  # (`[^\s\S]`: no text holds a match, as re.search says)
                written = None
                break
            except RegexError as e:
                raise RegexError(str(e).replace(shown_regex(text_read), shown_regex(pattern))) from None
        automata[pattern] = None if written is None else LazyByteDFA.from_regex(written)
    dfa = automata[pattern]
    if dfa is None:
        return False
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        raise RegexError(f"{text!r} holds a lone surrogate: no UTF-8 text does") from None
    return dfa.matches(data)
