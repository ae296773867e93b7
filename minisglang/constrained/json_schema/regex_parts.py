"""Regex building blocks: the tree builders of regex_ast.py under the names the rules use, and
regex literals of the compiler's own source read once. Every builder returns a node, or None
for "matches nothing"."""

from __future__ import annotations

import functools

from minisglang.constrained.lazy_regex_parser import parse_tree
from minisglang.constrained.regex_ast import EPSILON, Regex, chars, lit
from minisglang.constrained.regex_ast import alt as _alt
from minisglang.constrained.regex_ast import concat as _concat
from minisglang.constrained.regex_ast import repeat as _repeat

__all__ = [
    "DIGIT",
    "EPSILON",
    "NONZERO_DIGIT",
    "Regex",
    "_alt",
    "_concat",
    "_digit_class",
    "_repeat",
    "chars",
    "lit",
    "rx",
]


@functools.lru_cache(maxsize=1024)
def rx(text: str) -> Regex:
    """A regex written in the compiler's source (a format, a fixed piece of JSON's grammar) as
    a tree. Read once per process: a compile only reuses the node. Our own text is not
    first checked by Python's `re.compile`, as a user's regex is (`members=True` skips it;
    it was half of reading a format in the first compile to use it): the tests compile
    every one with `re`."""
    return parse_tree(text, members=True)


def _digit_class(lo: int, hi: int) -> Regex:
    """One decimal digit lo..hi: 5, [89], [2-5]."""
    return chars([(ord("0") + lo, ord("0") + hi)])


DIGIT = _digit_class(0, 9)
NONZERO_DIGIT = _digit_class(1, 9)
