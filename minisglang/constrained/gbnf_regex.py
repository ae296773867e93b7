"""A GBNF grammar (llama.cpp's EBNF, what xgrammar reads) as a regex tree, when it is regular in the plainest way.

A structural tag's `grammar` format is a context-free grammar. The fsm backend's automaton
is regular, so it takes a grammar only when no rule refers to itself, directly or through
others: then every rule can be written out in place, and the grammar is a regular
expression. A recursive grammar is refused naming the rule (some recursive grammars are
regular too, `a ::= "x" a | ""`; they are refused all the same: telling which is more than
this reader does).

The dialect (llama.cpp's grammars/README.md): rules `name ::= body`, a body of
alternatives `|` of sequences of elements; an element is a string `"..."` (escapes `\\n
\\r \\t \\\\ \\" \\xHH \\uHHHH \\UHHHHHHHH`), a class `[...]` (`^` negates; ranges `a-z`;
the same escapes), `.` (any character), a rule's name, or a group `( ... )`, each followed
by at most one of `*`, `+`, `?`, `{m}`, `{m,}`, `{m,n}`. `#` starts a comment. The output
is the `root` rule. Anything else (xgrammar's lookahead `(= ...)`, character class
escapes such as `\\d`) is refused by name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .regex_ast import EPSILON, Regex, Shared, alt, chars, concat, lit, repeat

MAX_RULES = 1000
MAX_REPEAT = 1000
_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"', "[": "[", "]": "]", "-": "-", "^": "^"}


class GrammarNotRegular(ValueError):
    """A grammar this reader cannot write as a regex (recursive, or not GBNF it reads).
    `malformed`: the text is no GBNF grammar at all (a string left open, no root rule, a
    rule used but not defined), which no backend serves; otherwise it may be GBNF that
    only this reader does not take (a recursive rule, lookahead, a count past MAX_REPEAT)."""

    def __init__(self, message: str, malformed: bool = False):
        super().__init__(message)
        self.malformed = malformed


# An element of a parsed body: ("text", str) | ("class", ranges) | ("ref", name) | ("alt", [[...], ...])
# and ("repeat", element, low, high).
Element = tuple[Any, ...]


@dataclass
class _Reader:
    text: str
    i: int = 0

    def error(self, what: str, malformed: bool = True) -> GrammarNotRegular:
        line = self.text.count("\n", 0, self.i) + 1
        return GrammarNotRegular(f"{what} (line {line})", malformed)

    def space(self) -> None:
        """Skip whitespace and comments."""
        while self.i < len(self.text):
            c = self.text[self.i]
            if c == "#":
                end = self.text.find("\n", self.i)
                self.i = len(self.text) if end < 0 else end
            elif c.isspace():
                self.i += 1
            else:
                return

    def name(self) -> str | None:
        j = self.i
        while j < len(self.text) and (self.text[j].isalnum() or self.text[j] in "-_"):
            j += 1
        if j == self.i:
            return None
        name, self.i = self.text[self.i : j], j
        return name

    def at_rule_start(self) -> bool:
        """Whether a `name ::=` starts here (the end of the rule before)."""
        keep = self.i
        found = self.name() is not None
        if found:
            self.space()
            found = self.text.startswith("::=", self.i)
        self.i = keep
        return found

    def char(self) -> int:
        """One character of a string or class, escapes read."""
        if self.i >= len(self.text):
            raise self.error("the grammar ends inside a string or a class")
        c = self.text[self.i]
        if c != "\\":
            self.i += 1
            return ord(c)
        if self.i + 1 >= len(self.text):
            raise self.error("an escape at the end of the grammar")
        e = self.text[self.i + 1]
        if e in _ESCAPES:
            self.i += 2
            return ord(_ESCAPES[e])
        size = {"x": 2, "u": 4, "U": 8}.get(e)
        digits = self.text[self.i + 2 : self.i + 2 + (size or 0)]
        if size is None or len(digits) != size or any(d not in "0123456789abcdefABCDEF" for d in digits):
            raise self.error(
                f'the escape \\{e} is not one this reader takes (\\n \\r \\t \\\\ \\" \\xHH \\uHHHH)', malformed=False
            )
        self.i += 2 + size
        code = int(digits, 16)
        if code > 0x10FFFF:
            raise self.error(f"the escape \\{e}{digits} is past the last character")
        return code


def gbnf_regex(text: str) -> Regex:
    """The grammar's `root` as a regex tree; GrammarNotRegular says why it cannot be one."""
    try:
        return _regex(text)
    except RecursionError:
        raise GrammarNotRegular("the grammar nests too deep (groups or rules inside each other)") from None


def _regex(text: str) -> Regex:
    rules = parse_rules(text)
    if "root" not in rules:
        raise GrammarNotRegular("the grammar has no rule named root", malformed=True)
    uses: dict[str, int] = {}
    for body in rules.values():
        for name in _refs(body):
            uses[name] = uses.get(name, 0) + 1
    done: dict[str, Regex] = {}

    def rule(name: str, path: tuple[str, ...]) -> Regex:
        if name in path:
            cycle = " -> ".join((*path[path.index(name) :], name))
            raise GrammarNotRegular(
                f"rule {name!r} refers to itself ({cycle}): a recursive grammar is not written as a regex here"
            )
        if name not in rules:
            raise GrammarNotRegular(f"rule {name!r} is used but not defined", malformed=True)
        if name not in done:
            node = _node(rules[name], lambda ref: rule(ref, (*path, name)))
            done[name] = Shared(node) if uses.get(name, 0) > 1 and node != EPSILON else node
        return done[name]

    return rule("root", ())


def _node(element: Element, ref: Callable[[str], Regex]) -> Regex:
    kind = element[0]
    if kind == "text":
        return lit(element[1])
    if kind == "class":
        return chars(element[1]) if element[1] else _nothing()
    if kind == "ref":
        return ref(element[1])
    if kind == "alt":
        options = [concat(*(_node(e, ref) for e in seq)) for seq in element[1]]
        return alt(options) or _nothing()
    body = _node(element[1], ref)
    return repeat(body, element[2], element[3])


def _nothing() -> Regex:
    raise GrammarNotRegular("a part of the grammar matches no string at all (an empty class)")


def _refs(element: Element) -> list[str]:
    if element[0] == "ref":
        return [element[1]]
    if element[0] == "alt":
        return [r for seq in element[1] for e in seq for r in _refs(e)]
    if element[0] == "repeat":
        return _refs(element[1])
    return []


def parse_rules(text: str) -> dict[str, Element]:
    """The rules of GBNF `text`, name -> body (an "alt" element), in their order."""
    r = _Reader(text)
    rules: dict[str, Element] = {}
    r.space()
    while r.i < len(text):
        name = r.name()
        r.space()
        if name is None or not text.startswith("::=", r.i):
            raise r.error("expected a rule, `name ::= ...`")
        if name in rules:
            raise r.error(f"rule {name!r} is defined twice")
        r.i += 3
        rules[name] = _alternatives(r, nested=False)
        if len(rules) > MAX_RULES:
            raise r.error(f"more than {MAX_RULES} rules", malformed=False)
        r.space()
    return rules


def _alternatives(r: _Reader, nested: bool) -> Element:
    options = [_sequence(r, nested)]
    while r.i < len(r.text) and r.text[r.i] == "|":
        r.i += 1
        options.append(_sequence(r, nested))
    return ("alt", options)


def _sequence(r: _Reader, nested: bool) -> list[Element]:
    out: list[Element] = []
    while True:
        r.space()
        if r.i >= len(r.text) or r.text[r.i] in "|)" or (not nested and r.at_rule_start()):
            if r.i < len(r.text) and r.text[r.i] == ")" and not nested:
                raise r.error("a `)` with no `(`")
            return out
        out.append(_quantified(r, _element(r)))


def _element(r: _Reader) -> Element:
    c = r.text[r.i]
    if c == '"':
        r.i += 1
        codes = []
        while r.i < len(r.text) and r.text[r.i] != '"':
            codes.append(r.char())
        if r.i >= len(r.text):
            raise r.error("a string with no closing quote")
        r.i += 1
        return ("text", "".join(map(chr, codes)))
    if c == "[":
        return ("class", _class(r))
    if c == ".":
        r.i += 1
        return ("class", ((0, 0x10FFFF),))
    if c == "(":
        r.i += 1
        if r.text.startswith(("(=", "(!"), r.i - 1):
            raise r.error("lookahead `(= ...)` is not read here", malformed=False)
        inner = _alternatives(r, nested=True)
        r.space()
        if r.i >= len(r.text) or r.text[r.i] != ")":
            raise r.error("a `(` with no `)`")
        r.i += 1
        return inner
    name = r.name()
    if name is None:
        raise r.error(f"unexpected {c!r}")
    return ("ref", name)


def _class(r: _Reader) -> tuple[tuple[int, int], ...]:
    r.i += 1
    negated = r.text.startswith("^", r.i)
    r.i += negated
    ranges: list[tuple[int, int]] = []
    while r.i < len(r.text) and r.text[r.i] != "]":
        low = r.char()
        high = low
        if r.text.startswith("-", r.i) and not r.text.startswith("-]", r.i):
            r.i += 1
            high = r.char()
            if high < low:
                raise r.error(f"the range {chr(low)!r}-{chr(high)!r} is backwards")
        ranges.append((low, high))
    if r.i >= len(r.text):
        raise r.error("a class with no closing `]`")
    r.i += 1
    if not negated:
        return tuple(ranges)
    out, start = [], 0
    for low, high in sorted(ranges):
        if low > start:
            out.append((start, low - 1))
        start = max(start, high + 1)
    if start <= 0x10FFFF:
        out.append((start, 0x10FFFF))
    return tuple(out)


def _quantified(r: _Reader, element: Element) -> Element:
    r.space()  # (llama.cpp and xgrammar read `"a" *` as `"a"*`)
    if r.i >= len(r.text):
        return element
    c = r.text[r.i]
    if c in "*+?":
        r.i += 1
        return ("repeat", element, 0 if c != "+" else 1, None if c != "?" else 1)
    if c != "{":
        return element
    end = r.text.find("}", r.i)
    body = r.text[r.i + 1 : end] if end > 0 else ""
    low_text, comma, high_text = body.partition(",")
    if end < 0 or not low_text.strip().isdigit() or (high_text.strip() and not high_text.strip().isdigit()):
        raise r.error("a count `{m}`, `{m,}` or `{m,n}` is malformed")
    low = int(low_text)
    high = low if not comma else int(high_text) if high_text.strip() else None
    if (high is not None and high < low) or max(low, high or 0) > MAX_REPEAT:
        raise r.error(
            f"the count {{{body}}} is backwards or past {MAX_REPEAT}", malformed=high is not None and high < low
        )
    r.i = end + 1
    return ("repeat", element, low, high)


__all__ = ["GrammarNotRegular", "gbnf_regex"]
