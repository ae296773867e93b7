"""regex_ast.py: the typed tree between the schema compiler and the automata.

The oracle is a brute-force matcher over the tree itself (`ends`: the positions where a
match of a node starting at `i` may end), checked on every string up to length 4 over a
small alphabet against: the lazy automaton of the lowered tree, the automaton of the tree's
lazy-dialect text parsed back, and `re.fullmatch` on the Python-dialect text.
"""

from __future__ import annotations

import inspect
import itertools
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minisglang.constrained.gbnf_regex import gbnf_regex
from minisglang.constrained.lazy_byte_dfa import LazyByteDFA
from minisglang.constrained.lazy_regex import EMPTY, MAX_NESTING, AutomatonLimitError, RegexPool
from minisglang.constrained.lazy_regex_parser import parse_regex, parse_tree
from minisglang.constrained.regex_ast import (
    EPSILON,
    Alt,
    And,
    Chars,
    Diff,
    Members,
    Regex,
    Repeat,
    Seq,
    Shared,
    Text,
    alt,
    chars,
    concat,
    is_plain,
    lit,
    lower,
    python_text_size,
    render,
    repeat,
    text_size,
)
from minisglang.constrained.regex_dfa import RegexError

ALPHABET = ["a", "b", "é", "-"]
STRINGS = ["".join(t) for n in range(5) for t in itertools.product(ALPHABET, repeat=n)]


def ends(node: Regex, s: str, i: int) -> set[int]:
    """Where a match of `node` that starts at s[i] may end (the oracle: no automaton)."""
    if isinstance(node, Text):
        return {i + len(node.text)} if s.startswith(node.text, i) else set()
    if isinstance(node, Chars):
        return {i + 1} if i < len(s) and any(lo <= ord(s[i]) <= hi for lo, hi in node.ranges) else set()
    if isinstance(node, Seq):
        at = {i}
        for part in node.parts:
            at = {j for k in at for j in ends(part, s, k)}
        return at
    if isinstance(node, Alt):
        return {j for o in node.options for j in ends(o, s, i)}
    if isinstance(node, Repeat):
        out, at, count = set(), {i}, 0
        while at and (node.high is None or count <= node.high):
            if count >= node.low:
                out |= at
            if count > len(s) + node.low:  # every position seen: nothing new can come
                break
            at = {j for k in at for j in ends(node.body, s, k)}
            count += 1
        return out
    if isinstance(node, Shared):
        return ends(node.body, s, i)
    if isinstance(node, (And, Diff)):
        a, b = ends(node.a, s, i), ends(node.b, s, i)
        return a & b if isinstance(node, And) else a - b
    assert isinstance(node, Members)
    out, seen = set(), set()
    todo = [(i, frozenset(), False)]
    while todo:
        pos, written, started = todo.pop()
        if (pos, written, started) in seen:
            continue
        seen.add((pos, written, started))
        if all(written >= {k} or not req for k, req in enumerate(node.required)):
            out.add(pos)
        leads = ends(node.separator, s, pos) if started else {pos}
        for lead in leads:
            for k, m in enumerate(node.members):
                if k not in written:
                    todo += [(j, written | {k}, True) for j in ends(m, s, lead)]
            if node.extra is not None:
                todo += [(j, written, True) for j in ends(node.extra, s, lead)]
    return out


def matches(node: Regex, s: str) -> bool:
    return len(s) in ends(node, s, 0)


leaves = st.one_of(
    st.sampled_from(["a", "b", "ab", "é", "-a"]).map(lit),
    st.lists(
        st.sampled_from([(ord("a"), ord("a")), (ord("a"), ord("b")), (ord("é"), ord("é")), (ord("-"), ord("-"))]),
        min_size=1,
        max_size=2,
    ).map(chars),
    st.just(EPSILON),
)


def composite(children: st.SearchStrategy[Regex]) -> st.SearchStrategy[Regex]:
    def nonempty(nodes: st.SearchStrategy[Regex]) -> st.SearchStrategy[Regex]:
        return nodes.filter(lambda n: not n.nullable)

    return st.one_of(
        st.lists(children, min_size=2, max_size=3).map(lambda ps: concat(*ps)),
        st.lists(children, min_size=2, max_size=3).map(alt),
        st.tuples(children, st.integers(0, 2), st.sampled_from([None, 0, 1, 2, 3])).map(
            lambda t: repeat(t[0], t[1], None if t[2] is None else max(t[1], t[2]))
        ),
        st.tuples(children, children).map(lambda t: And(*t)),
        st.tuples(children, children).map(lambda t: Diff(*t)),
        children.map(Shared),
        st.tuples(
            children,
            st.lists(st.tuples(nonempty(children), st.booleans()), min_size=1, max_size=3),
            st.none() | nonempty(children),
        ).map(lambda t: Members(t[0], tuple(m for m, _ in t[1]), tuple(r for _, r in t[1]), t[2])),
    )


trees = st.recursive(leaves, composite, max_leaves=8).filter(lambda n: n is not None)


def automaton_accepts(node, pool: RegexPool) -> list[bool]:
    dfa = LazyByteDFA(node, pool)
    return [dfa.matches(s.encode("utf-8")) for s in STRINGS]


@settings(max_examples=150, deadline=None)
@given(trees)
def test_lowered_rendered_and_reparsed_trees_match_what_the_tree_means(tree):
    expected = [matches(tree, s) for s in STRINGS]
    pool = RegexPool()
    assert automaton_accepts(lower(tree, pool), pool) == expected
    lazy_text = render(tree, "lazy")
    reparsed = parse_tree(lazy_text, members=True)
    assert [matches(reparsed, s) for s in STRINGS] == expected, lazy_text
    pool = RegexPool()
    assert automaton_accepts(lower(reparsed, pool), pool) == expected, lazy_text
    if is_plain(tree):
        text = render(tree, "python")
        assert [re.fullmatch(text, s) is not None for s in STRINGS] == expected, text
    else:
        with pytest.raises(RegexError, match="only the lazy automaton reads it"):
            render(tree, "python")


@settings(max_examples=100, deadline=None)
@given(trees.filter(is_plain))
def test_a_plain_tree_lowers_to_the_node_its_text_parses_to(tree):
    """Parsing the rendered text and lowering the tree give one node of one pool when the
    text keeps the tree's grouping (a sequence's parts, as the parser reads them)."""
    pool = RegexPool()
    text = render(tree, "python")
    try:
        parsed = parse_regex(text, pool)
    except RegexError:  # the empty language: the tree lowers to EMPTY
        assert lower(tree, pool) is pool.empty
        return
    pool_b = RegexPool()
    assert automaton_accepts(parsed, pool) == automaton_accepts(lower(tree, pool_b), pool_b)


def test_the_builders_simplify_as_the_compiler_always_did():
    a, b = lit("a"), lit("b")
    assert alt([a, None, a]) is a
    assert alt([None]) is None
    assert alt([a, EPSILON]) == Repeat(a, 0, 1)
    assert concat(a, None, b) is None
    assert concat(a, b) == Text("ab")  # neighbouring texts are one
    assert concat(concat(a, chars([(48, 57)])), b) == Seq((a, Chars(((48, 57),)), b))
    assert repeat(None, 0, 3) == EPSILON and repeat(None, 1, 3) is None
    assert repeat(a, 1, 1) is a and repeat(a, 0, 0) == EPSILON
    assert a + b == Text("ab")


@pytest.mark.parametrize(
    "tree, text",
    [
        (concat(lit("{"), repeat(chars([(48, 57)]), 1, None), lit("}")), r"\{[0-9]+\}"),
        (alt([lit("true"), lit("false")]), "(?:true|false)"),
        (repeat(lit("ab"), 2, 5), "(?:ab){2,5}"),
        (repeat(alt([lit("a"), lit("b")]), 0, 1), "(?:a|b)?"),
        (chars([(0, 0x21), (0x23, 0x10FFFF)]), '[^"]'),
        (lit("a.b"), r"a\.b"),
    ],
)
def test_python_text(tree, text):
    assert render(tree) == text


@pytest.mark.parametrize("ranges", [((0, 0x10FFFF),), ((0, 0xD7FF), (0xE000, 0x10FFFF))])
def test_a_class_of_every_character_is_written_as_a_regex(ranges):
    """GBNF's `.` (and `[^]`) is the class of every character: negated, it listed nothing and
    was written `[^]`, which no regex parser reads (the eager fsm backend refused `root ::= .`
    with "unterminated character set")."""
    node = Chars(ranges)
    for dialect in ("python", "lazy"):
        text = render(node, dialect)
        assert all(re.fullmatch(text, c) for c in ("a", "\n", "\x00", "é", "\U0010ffff")), text
        assert parse_tree(text) == Chars(((0, 0x10FFFF),))


def test_lazy_text_writes_a_shared_part_once_named_by_its_text():
    item = Shared(concat(lit("x"), repeat(chars([(48, 57)]), 1, None)))
    tree = concat(lit("["), item, repeat(concat(lit(","), item), 0, None), lit("]"))
    text = render(tree, "lazy")
    assert text.count("(?@def:") == 1 and text.count("(?@ref:") == 2, text
    assert render(tree) == r"\[x[0-9]+(?:,x[0-9]+)*\]"
    assert text_size(tree) >= len(render(tree, "lazy")) - 10


def test_the_python_text_size_counts_each_shared_part_wherever_it_is_used():
    """The Python dialect writes a Shared part in full at each use: `python_text_size` is that
    text's length, worked out without writing it (a chain of 60 doubled parts: 2^60)."""
    item = Shared(concat(lit("x"), repeat(chars([(48, 57)]), 1, None)))
    pair = Shared(alt([concat(item, lit(","), item), lit("-")]))
    tree = concat(lit("["), pair, repeat(concat(lit(";"), pair), 0, 3), lit("]"))
    assert python_text_size(tree) == len(render(tree))
    assert python_text_size(lit("ab")) == 2
    chain = lit("a")
    for _ in range(60):
        chain = Shared(concat(chain, chain))
    assert python_text_size(chain) == 2**60


def test_a_member_that_matches_the_empty_string_is_refused():
    with pytest.raises(RegexError, match="must match a non-empty string"):
        Members(lit(","), (repeat(lit("a"), 0, 1),), (True,))


def test_equal_trees_are_equal_and_hash_alike():
    def build():
        return alt([concat(lit("a"), repeat(chars([(48, 57)]), 0, 3)), And(lit("b"), chars([(97, 98)]))])

    one, two = build(), build()
    assert one is not two and one == two and hash(one) == hash(two)
    assert len({one, two}) == 1


def test_two_deep_equal_trees_compare_without_recursion():
    """Two trees built apart but equal are compared node by node (a dict of definitions, an
    alternation's duplicates). Recursing through `==`, 300 levels ran into Python's recursion
    limit, and in the compiled build a comparison there aborted the whole process ("fatal:
    out of memory": a schema with two equal patterns nested 232 groups deep did it). Every
    kind of node nests here, 7000 deep; a difference at the bottom is still found."""

    def deep(bottom: str) -> Regex:
        node = lit(bottom)
        for _ in range(1000):
            node = Alt((lit("b"), Seq((lit("c"), Repeat(node, 0, None)))))
            node = Members(lit(","), (And(node, lit("x")), lit("y")), (True, False), lit("e"))
            node = Shared(Diff(node, lit("z")))
        return node

    one, two, other = deep("a"), deep("a"), deep("d")
    assert one is not two and one == two and hash(one) == hash(two) and len({one, two}) == 1
    assert one != other and not (one == other)


@pytest.mark.timeout(20)
def test_equal_trees_that_share_sub_trees_compare_each_pair_once():
    """A compiled schema reuses a sub-tree in several places (a member in several
    alternatives): 64 levels of two uses each are 2^64 paths, but only 64 pairs to compare."""

    def shared_twice(bottom: str) -> Regex:
        node = lit(bottom)
        for _ in range(64):
            node = Alt((Seq((lit("a"), node)), Seq((lit("b"), node))))
        return node

    one, two, other = shared_twice("c"), shared_twice("c"), shared_twice("d")
    assert one is not two and one == two and one != other


# A child process: what this guards against killed the process that ran it.
EDGE_OF_THE_STACK = """
from minisglang.constrained.regex_ast import chars, concat, lit, repeat

def at_depth(n, table, key):  # one frame per level
    return at_depth(n - 1, table, key) if n else table.get(key)

found = 0
for i in range(1000):
    one, two = (concat(lit(f"k{i}"), repeat(chars([(48, 57)]), 0, None)) for _ in range(2))
    if abs(hash(one)) < 2**62:  # (hashes this small the compiled build compares natively)
        continue
    found += 1
    for n in range(900, 1000):  # the end of Python's stack met at every point of a lookup
        try:
            assert at_depth(n, {one: 1}, two) == 1
        except RecursionError:
            pass
    if found == 3:
        break
print("survived", found)
"""


def test_equal_trees_looked_up_at_the_end_of_the_stack_raise_recursion_error():
    """A dict lookup that finds an equal tree compares the two; met at the end of Python's
    stack it must raise RecursionError (the schema compiler turns that into "the schema nests
    too deeply"). The compiled build compared the cached hashes there, and mypyc's
    comparison of two large ints aborted the process ("fatal: out of memory")."""
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}  # (MINISGLANG_PURE, if set, picks the build)
    done = subprocess.run(
        [sys.executable, "-c", EDGE_OF_THE_STACK], cwd=root, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.split() == ["survived", "3"], done.stderr[-2000:]


def test_a_node_added_to_something_else_is_a_type_error():
    """`a + b` is `concat(a, b)`; a node after something that is not a node (`sum` starts
    from 0) is a TypeError in both builds (the compiled one recursed to a RecursionError)."""
    assert render(lit("a") + chars([(48, 57)])) == "a[0-9]"
    assert render(sum([lit("a"), lit("b")], EPSILON)) == "ab"
    with pytest.raises(TypeError, match="unsupported operand type"):
        sum([lit("a"), lit("b")])
    with pytest.raises(TypeError):
        "x" + lit("a")
    with pytest.raises(TypeError):
        lit("a") + "x"


def test_a_deep_tree_is_an_automaton_limit_not_a_crash():
    deep = lit("a")
    for _ in range(5000):
        deep = Alt((lit("b"), Seq((lit("c"), deep))))
    with pytest.raises(AutomatonLimitError, match="nests more deeply"):
        lower(deep, RegexPool())
    with pytest.raises(AutomatonLimitError, match="nests more deeply"):
        render(deep)


def test_both_builds_refuse_a_tree_at_the_same_depth():
    """regex_ast is compiled by mypyc too, where a native call has no recursion limit: render
    and lower count their nesting against MAX_NESTING, so a tree 256 nodes deep is read and
    one 257 deep is refused by name in either build (run it with MINISGLANG_PURE=1 too)."""

    def nested(levels: int) -> Regex:  # 2 * levels + 1 nodes deep
        deep = lit("a")
        for _ in range(levels):
            deep = Alt((lit("b"), Seq((lit("c"), deep))))
        return deep

    assert 2 * 127 + 1 <= MAX_NESTING < 2 * 128 + 1
    fits, too_deep = nested(127), nested(128)
    assert lower(fits, RegexPool()).kind != EMPTY
    assert re.fullmatch(render(fits), "c" * 127 + "a") and render(fits, "lazy")
    for dialect in ("python", "lazy"):
        with pytest.raises(AutomatonLimitError, match="nests more deeply"):
            render(too_deep, dialect)
    with pytest.raises(AutomatonLimitError, match="nests more deeply"):
        lower(too_deep, RegexPool())


def test_a_tree_lowers_alike_however_deep_the_callers_stack():
    """The schema compiler lowers an intersection's parts deep inside a nested schema: with
    60 frames of Python's recursion limit left there, a tree 255 nodes deep is still read.
    Walked by recursion, the pure build ran out of frames and refused it as too deep, while
    the compiled build (native calls, no Python frames) read it: the two builds answered a
    schema nested 130 arrays deep around a 120-group pattern intersection differently."""
    fits = lit("a")
    for _ in range(127):
        fits = Alt((lit("b"), Seq((lit("c"), fits))))

    def down(levels: int) -> tuple[object, ...]:  # one frame per level
        if levels:
            return down(levels - 1)
        return lower(fits, RegexPool()).kind, render(fits), render(fits, "lazy")

    kind, python_text, lazy_text = down(sys.getrecursionlimit() - len(inspect.stack(0)) - 60)
    assert kind != EMPTY and python_text == render(fits) and lazy_text == render(fits, "lazy")


def test_a_long_chain_of_shared_parts_needs_no_deep_recursion():
    """An object's member list makes each tail a shared part inside the next: thousands
    deep, rendered one definition at a time. Lowered, such a chain nests one level per part:
    200 parts lower and match; 5000 are refused by name (lazy_regex.MAX_NESTING), never a
    RecursionError or, in the compiled build, a crash."""

    def chain_of(n: int) -> Regex:
        chain = lit("}")
        for i in range(n):
            chain = Shared(concat(lit(f",k{i}"), repeat(chain, 0, 1)))
        return chain

    deep = chain_of(5000)
    text = render(deep, "lazy")
    assert text.count("(?@def:") == 5000 and len(text) == text_size(deep)
    with pytest.raises(AutomatonLimitError, match="nests more deeply"):
        lower(deep, RegexPool())
    pool = RegexPool()
    dfa = LazyByteDFA(lower(chain_of(200), pool), pool)
    assert dfa.matches(b",k199,k198") and dfa.matches(b",k199") and not dfa.matches(b",k198")


def test_a_node_prints_its_text_once_and_a_long_one_only_its_length():
    """The dataclasses' own repr wrote a shared part in full at every use: printing a chain of
    rules that each use the next twice (30 deep: 2^30 copies) never finished, and hung a
    failing test's traceback."""
    chain = "root ::= r0\n" + "\n".join(f"r{i} ::= r{i + 1} r{i + 1}" for i in range(30)) + '\nr30 ::= "ab"'
    assert repr(gbnf_regex(chain)).endswith("characters>")
    assert repr(gbnf_regex('root ::= "a" [b-d]*')) == "Seq('a[b-d]*')"
