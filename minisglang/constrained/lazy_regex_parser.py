"""Parsing Python's regex syntax (and the lazy dialect's private groups) into regex_ast.py's tree
(`parse_tree(pattern)`), and from there into the byte-level nodes of lazy_regex.py's
`RegexPool` (`parse_regex(pattern, pool)` -> the root node). A user's regex (`--regex`, a
schema's `pattern` is translated by the compiler instead) takes this path; the JSON Schema
compiler builds its tree directly."""

from __future__ import annotations

import re
import unicodedata
import warnings

from .lazy_regex import (
    _PRIVATE_GROUP,
    AND_SYNTAX,
    DEF_SYNTAX,
    DIFF_SYNTAX,
    EMPTY,
    MEMBERS_SYNTAX,
    REF_SYNTAX,
    TOO_DEEP,
    AutomatonLimitError,
    RegexNode,
    RegexPool,
)
from .python_regex import complement, normalize, posix_class_message, shorthand_ranges
from .regex_ast import (
    EPSILON,
    And,
    Chars,
    Diff,
    Members,
    Regex,
    Seq,
    Shared,
    Text,
    alt,
    lit,
    lower,
    repeat,
)
from .regex_dfa import EmptyLanguage, RegexError, _complement, _strip_anchors, shown_regex
from .work_slices import checkpoint

# ---------------------------------------------------------------------------------------
# Parsing: Python regex syntax -> the tree
# ---------------------------------------------------------------------------------------
# `\\d \\D \\w \\W \\s \\S`: Python's Unicode classes (python_regex.shorthand_ranges, computed
# on first use): `\\w` is 733 ranges, the alternation of their UTF-8 byte sequences.
SHORTHANDS = "dDwWsS"
SINGLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v", "a": "\a"}
ANCHOR_ESCAPES = "AZbB"  # \b is a backspace inside a class, a word boundary outside


# Group boundaries found by one C-speed scan: escapes and classes are skipped whole, so
# the parentheses left are the real ones.
_PAREN_SCAN = re.compile(r"\\.|\[\^?\]?(?:\\.|[^\]\\])*\]|[()]", re.S)
# A run of plain characters (a key's name, a structure's text): no special meaning.
_LITERAL_RUN = re.compile(r"[^\\\[\](){}|.*+?^$\ud800-\udfff]+")  # (a lone surrogate: `literal`)
_QUANTIFIER_START = "*+?{"
_SIMPLE_QUANTIFIERS = {"*": (0, None), "+": (1, None), "?": (0, 1)}
_BOUNDS = re.compile(r"\{(\d*)(,(\d*))?\}")


class _Parser:
    """Recursive descent over a pattern that `re.compile` accepts (see `parse_regex`)."""

    def __init__(self, pattern: str, source: str):
        self.p, self.source, self.i = pattern, source, 0
        self.group_nodes: dict[str, Regex] = {}  # group text -> node: a repeated group is parsed once
        self.group_end: dict[int, int] = {}
        self.definitions: dict[str, Regex] = {}  # (?@def:NAME(...)) -> its Shared node
        stack = []
        for m in _PAREN_SCAN.finditer(pattern):
            if m.group() == "(":
                stack.append(m.start())
            elif m.group() == ")" and stack:
                self.group_end[stack.pop()] = m.start()

    def fail(self, what: str) -> RegexError:
        return RegexError(f"unsupported regex {shown_regex(self.source)}: {what}")

    def parse(self) -> Regex:
        node = self.alternation()
        if self.i != len(self.p):
            raise self.fail(f"unexpected {self.p[self.i]!r} at position {self.i}")
        return node

    def alternation(self) -> Regex:
        branches = [self.sequence()]
        while self.i < len(self.p) and self.p[self.i] == "|":
            self.i += 1
            branches.append(self.sequence())
        out = alt(branches)
        assert out is not None  # (no branch is None)
        return out

    def sequence(self) -> Regex:
        items: list[Regex] = []
        p = self.p
        while self.i < len(p) and p[self.i] not in "|)":
            checkpoint()  # a long regex is parsed on a compile thread that yields to the scheduler
            run = _LITERAL_RUN.match(p, self.i)
            if run is not None:
                # Plain characters read in one step (most of a JSON Schema's regex); the
                # last one stays for `atom` when a quantifier follows it.
                end = run.end()
                if end < len(p) and p[end] in _QUANTIFIER_START:
                    end -= 1
                if end > self.i:
                    items.append(Text(p[self.i : end]))
                    self.i = end
                    continue
            items.append(self.quantified(self.atom()))
        # Not `concat`, which flattens: a group stays one part, so that its node is shared
        # by every place it appears (lazy_regex.RegexPool.concat keeps a head as it is).
        items = [item for item in items if item != EPSILON]
        return items[0] if len(items) == 1 else Seq(tuple(items))

    def quantified(self, node: Regex) -> Regex:
        bounds = self.quantifier()
        if bounds is None:
            return node
        if self.p.startswith("+", self.i):
            raise self.fail(f"possessive quantifier at position {self.i}")
        if self.p.startswith("?", self.i):
            self.i += 1  # lazy: matches the same strings as greedy under fullmatch
        out = repeat(node, *bounds)
        assert out is not None  # (node is never None)
        return out

    def quantifier(self) -> tuple[int, int | None] | None:
        p, i = self.p, self.i
        if i >= len(p):
            return None
        simple = _SIMPLE_QUANTIFIERS.get(p[i])
        if simple is not None:
            self.i += 1
            return simple
        if p[i] == "{":
            m = _BOUNDS.match(p, i)
            if m and (m.group(1) or m.group(2)):  # `{}`, `{,}` and an unclosed `{` are literal
                low = int(m.group(1) or 0)
                high = low if m.group(2) is None else (int(m.group(3)) if m.group(3) else None)
                self.i = m.end()
                return low, high
        return None

    def atom(self) -> Regex:
        c = self.p[self.i]
        if c == "(":
            return self.group()
        if c == "[":
            return self.char_class()
        if c == "\\":
            return self.escape()
        if c == ".":
            self.i += 1
            return Chars(tuple(_complement([(10, 10)])))
        if c in "^$":
            raise self.fail(
                f"anchor {c!r} at position {self.i} (only at the start or end of the regex or of an alternative)"
            )
        self.i += 1
        return self.literal(c)

    def literal(self, ch: str) -> Regex:
        if "\ud800" <= ch <= "\udfff":  # a lone surrogate: read as a class of it (no UTF-8 text holds one)
            return Chars(((ord(ch), ord(ch)),))
        return lit(ch)

    def group(self) -> Regex:
        start, p = self.i, self.p
        end = self.group_end.get(start)
        text = p[start : end + 1] if end is not None else None
        if end is not None and text in self.group_nodes:
            self.i = end + 1
            return self.group_nodes[text]
        if p.startswith(REF_SYNTAX, start):
            if end is None:
                raise self.fail(f"the (?@ref: group at position {start} is not closed")
            name = p[start + len(REF_SYNTAX) : end]
            if name not in self.definitions:
                raise self.fail(f"(?@ref:{name}) at position {start} comes before its (?@def:{name}...)")
            self.i = end + 1
            return self.definitions[name]
        if p.startswith(DEF_SYNTAX, start):
            name_end = p.index("(", start + len(DEF_SYNTAX))
            self.i = name_end + 1
            body = self.alternation()
            if not p.startswith("))", self.i):
                raise self.fail(f"a (?@def: group at position {start} must be (?@def:NAME(R))")
            self.i += 2
            self.definitions[p[start + len(DEF_SYNTAX) : name_end]] = Shared(body)
            return EPSILON
        if p.startswith(MEMBERS_SYNTAX, start) or p.startswith(AND_SYNTAX, start) or p.startswith(DIFF_SYNTAX, start):
            node = self.members_group() if p.startswith(MEMBERS_SYNTAX, start) else self.set_group()
            if text is not None:
                self.group_nodes[text] = node
            return node
        self.i += 1
        if p.startswith("?", self.i):
            ext = p[self.i + 1 : self.i + 3]
            if ext.startswith(":"):
                self.i += 2
            elif ext.startswith("P<"):
                self.i = p.index(">", self.i) + 1  # a named group matches like a plain one
            elif ext.startswith("#"):
                self.i = p.index(")", self.i) + 1  # a comment
                return EPSILON
            elif ext in ("u)", "u:"):  # Unicode matching, which a str pattern has anyway: no flag at all
                self.i += 3
                if ext == "u)":
                    return EPSILON
            else:
                kinds = {
                    "=": "lookahead",
                    "!": "lookahead",
                    "<=": "lookbehind",
                    "<!": "lookbehind",
                    "P=": "group reference",
                    ">": "atomic group",
                    "(": "conditional group",
                }
                name = next((v for k, v in kinds.items() if ext.startswith(k)), "inline flags")
                verb = "are" if name == "inline flags" else "is"
                raise self.fail(f"{name} at position {start} {verb} not supported")
        node = self.alternation()
        self.i += 1  # the closing parenthesis (re.compile checked it is there)
        if text is not None:
            self.group_nodes[text] = node
        return node

    def members_group(self) -> Regex:
        """`(?@members(SEP)(!M)(~M)(&E))` (see MEMBERS_SYNTAX) -> a MEMBERS node."""
        p, start = self.p, self.i
        self.i += len(MEMBERS_SYNTAX)
        separator: Regex | None = None
        extra: Regex | None = None
        members: list[Regex] = []
        required: list[bool] = []
        while p.startswith("(", self.i):
            self.i += 1
            flag = None if separator is None else p[self.i : self.i + 1]
            if flag is not None:
                if flag not in "!~&" or not flag:
                    raise self.fail(
                        f"a (?@members group at position {start}: a member group must start "
                        f"with !, ~ or &, not {flag!r}"
                    )
                self.i += 1
            node = self.alternation()
            if not p.startswith(")", self.i):
                raise self.fail(f"a (?@members group at position {start} is not closed")
            self.i += 1
            if flag is None:
                separator = node
            elif flag == "&":
                if extra is not None:
                    raise self.fail(f"a (?@members group at position {start} has two & groups")
                extra = node
            else:
                members.append(node)
                required.append(flag == "!")
        if separator is None or not p.startswith(")", self.i):
            raise self.fail(f"a (?@members group at position {start} must be (?@members(SEP)(!M)...)")
        self.i += 1
        try:
            return Members(separator, tuple(members), tuple(required), extra)
        except RegexError as e:
            raise self.fail(f"a (?@members group at position {start}: {e}") from None

    def set_group(self) -> Regex:
        """`(?@and(A)(B))` or `(?@diff(A)(B))` -> the intersection or difference of A and B."""
        p, start = self.p, self.i
        intersect = p.startswith(AND_SYNTAX, start)
        self.i += len(AND_SYNTAX if intersect else DIFF_SYNTAX)
        operands = []
        while p.startswith("(", self.i):
            self.i += 1
            operands.append(self.alternation())
            if not p.startswith(")", self.i):
                raise self.fail(f"a private group at position {start} is not closed")
            self.i += 1
        if len(operands) != 2 or not p.startswith(")", self.i):
            raise self.fail(f"a private group at position {start} must be (?@and(A)(B)) or (?@diff(A)(B))")
        self.i += 1
        return (And if intersect else Diff)(*operands)

    def escape(self) -> Regex:
        """An escape outside a class: a character's node or a shorthand's (`\\d`) set."""
        item = self.escaped(in_class=False)
        return self.literal(item) if isinstance(item, str) else Chars(normalize(item))

    def escaped(self, in_class: bool) -> str | list[tuple[int, int]]:
        """The escape at the cursor: one character, or a shorthand's ranges (`\\d`, `\\w`)."""
        p = self.p
        c = p[self.i + 1]
        self.i += 2
        if c in SHORTHANDS:
            return list(shorthand_ranges(c))
        if c == "b" and in_class:
            ch = "\b"
        elif c in ANCHOR_ESCAPES:
            raise self.fail(f"the anchor \\{c} is not supported")
        elif c in SINGLE_ESCAPES:
            ch = SINGLE_ESCAPES[c]
        elif c in "xuU":
            digits = {"x": 2, "u": 4, "U": 8}[c]
            ch = chr(int(p[self.i : self.i + digits], 16))
            self.i += digits
        elif c == "N":
            close = p.index("}", self.i)
            ch = unicodedata.lookup(p[self.i + 1 : close])
            self.i = close + 1
        elif c == "0" or (c in "1234567" and in_class):
            m = re.compile(r"[0-7]{0,2}").match(p, self.i)
            assert m is not None  # it matches the empty string too
            ch = chr(int(c + m.group(), 8))
            self.i = m.end()
        elif c.isdigit():
            m = re.compile(r"[0-7]{2}").match(p, self.i)
            if c in "1234567" and m:  # three octal digits: a character
                ch = chr(int(c + m.group(), 8))
                self.i = m.end()
            else:
                raise self.fail(f"group reference \\{c} is not supported")
        else:
            ch = c  # an escaped punctuation character is itself
        return ch

    def char_class(self) -> Regex:
        p = self.p
        self.i += 1
        negated = p.startswith("^", self.i)
        self.i += negated
        ranges: list[tuple[int, int]] = []
        first = True
        while first or p[self.i] != "]":
            first = False
            if p[self.i] == "\\":
                item = self.escaped(in_class=True)
                if isinstance(item, list):
                    ranges.extend(item)
                    continue
                lo = ord(item)
            else:
                lo = ord(p[self.i])
                self.i += 1
            if p[self.i] == "-" and p[self.i + 1] != "]":
                self.i += 1
                if p[self.i] == "\\":
                    end = self.escaped(in_class=True)
                    if isinstance(end, list):  # `[a-\\d]` (re.compile rejects it first)
                        raise self.fail(f"bad character range at position {self.i}")
                    hi = ord(end)
                else:
                    hi = ord(p[self.i])
                    self.i += 1
                ranges.append((lo, hi))
            else:
                ranges.append((lo, lo))
        self.i += 1
        merged = normalize(ranges)
        return Chars(complement(merged) if negated else merged)


def _check_with_python(pattern: str, body: str, members: bool) -> None:
    """Raise RegexError with Python's message when `re` rejects `body` (the pattern without
    its anchors; `members`: our private groups read as plain groups)."""
    posix = posix_class_message(body)
    if posix is not None:
        raise RegexError(f"unsupported regex {shown_regex(pattern)}: {posix}")
    try:
        with warnings.catch_warnings():  # "possible nested set": we read `[[` as re does today
            warnings.simplefilter("ignore", FutureWarning)
            # Our private groups read as plain ones for this check (`(!M)` is a group
            # starting with a literal "!"): the rest must be a regex Python accepts.
            re.compile(_PRIVATE_GROUP.sub("(?:", body) if members else body)
    except (re.error, OverflowError) as e:  # (OverflowError: a repetition bound past 2**32 - 2)
        raise RegexError(f"invalid regex {shown_regex(pattern)}: {e}") from None
    except RecursionError:  # Python's own parser, on groups nested a few hundred deep
        raise AutomatonLimitError(TOO_DEEP) from None


def parse_tree(pattern: str, members: bool = False) -> Regex:
    """Parse `pattern` (Python syntax, whole-output match) into regex_ast.py's tree.

    With `members`, it also reads the lazy dialect's private groups (what
    `render(tree, "lazy")` writes): `(?@members...)` (MEMBERS_SYNTAX: object members in any
    order), `(?@and(A)(B))` and `(?@diff(A)(B))` (intersection, difference),
    `(?@def:NAME(R))` and `(?@ref:NAME)` (one sub-expression used in many places); a
    user's regex is parsed without, so there `(?@` is the error Python says.
    Raises RegexError for an invalid pattern (Python's message) or an unsupported construct
    (lookarounds, backreferences, inner anchors, possessive quantifiers, inline flags).
    """
    body = _strip_anchors(pattern)
    # A user's regex is judged by Python's parser first: ours assumes a valid pattern. The
    # JSON Schema compiler's regex (`members`) is text it wrote itself from pieces Python's
    # parser already read (a `pattern` keyword's regex is translated from `re`'s own parse
    # tree), so checking the whole again only cost time (a third of a schema's compile);
    # there Python is asked only when our parser fails, for its message.
    if not members:
        _check_with_python(pattern, body, members)
    try:
        return _Parser(body, pattern).parse()
    except RecursionError:
        raise AutomatonLimitError(TOO_DEEP) from None
    except AutomatonLimitError:
        raise
    except (RegexError, LookupError, ValueError, TypeError):  # (not a slice's OutOfTime)
        if members:
            _check_with_python(pattern, body, members)  # Python's message when it rejects the text too
        raise


def lower_checked(tree: Regex, pool: RegexPool, shown: str) -> RegexNode:
    """`lower(tree, pool)`, refusing a regex that matches no string at all (`shown`: how an
    error names it)."""
    node = lower(tree, pool)
    if node.kind == EMPTY:
        raise EmptyLanguage(shown)
    return node


def parse_regex(pattern: str, pool: RegexPool, members: bool = False) -> RegexNode:
    """Parse `pattern` into a node of `pool`: `parse_tree`, then the tree lowered
    (regex_ast.lower). Raises what `parse_tree` raises, and RegexError for a regex that
    matches no string at all."""
    return lower_checked(parse_tree(pattern, members), pool, shown_regex(pattern))
