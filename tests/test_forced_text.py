"""The forced-text bounds (backends/forced_text.py) against xgrammar's own jump search.

The oracle is `find_jump_forward_string` itself: along random walks over a grammar's masks,
the text it finds forced at every state must be no longer than the bound. The bound decides
whether xgrammar's search runs at all; one that undercounts lets a short grammar force
megabytes (a 30-character regex forced 8 MB in one 2.3 s search, and GBNF rules that double
and v2 tags' nested repeats held every client 7-20 s: a stranger's stall hunt).
"""

from __future__ import annotations

import json
import random

import pytest
from grammar_backends import PAD, compiled, mask_row
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import minisglang as sgl
from minisglang.backends.base import InvalidGrammarObject, get_backend_class
from minisglang.backends.forced_text import (
    JUMP_MAX_FORCED_CHARS,
    forced_text_bound,
    format_bound,
    gbnf_bound,
    pattern_bound,
)
from minisglang.constrained.structural_tag_parse import parse_any_structural_tag
from minisglang.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def xgrammar():
    tokenizer = Tokenizer.from_pretrained(sgl.DEFAULT_MODEL_PATH)
    # (compiles on threads: these grammars are small, and no child process need start)
    backend = get_backend_class("xgrammar")(
        tokenizer, tokenizer.vocab_size + PAD, compile_timeout=300.0, compile_in="thread"
    )
    yield backend
    backend.shutdown()


def longest_forced_along_walks(backend, kind: str, text: str, seed: int, walks: int = 3, steps: int = 12) -> int:
    """The longest text xgrammar's search finds forced at any state of `walks` random walks
    (random allowed tokens, EOS never taken) of `text`'s grammar."""
    rng = random.Random(seed)
    width = backend.tokenizer.vocab_size + PAD
    eos = backend.tokenizer.eos_token_id
    longest = 0
    for _ in range(walks):
        g = compiled(backend, kind, text)
        assert not isinstance(g, InvalidGrammarObject), g.message
        for _ in range(steps):
            if g.matcher.is_terminated():
                break
            longest = max(longest, len(g.matcher.find_jump_forward_string()))
            allowed = [t for t in mask_row(g, width).nonzero().flatten().tolist() if t != eos]
            if not allowed:
                break
            g.accept_token(rng.choice(allowed))
    return longest


# Small regexes: literals, a class, concatenation, alternation and repeats with minimums.
REGEX = st.recursive(
    st.sampled_from(["a", "bc", "xyz", "[ab]", "q"]),
    lambda inner: st.one_of(
        st.tuples(inner, inner).map("".join),
        st.tuples(inner, inner).map(lambda p: f"(?:{p[0]}|{p[1]})"),
        st.tuples(inner, st.integers(0, 3), st.integers(0, 2)).map(lambda p: f"(?:{p[0]}){{{p[1]},{p[1] + p[2]}}}"),
        inner.map(lambda p: f"(?:{p})*"),
        inner.map(lambda p: f"(?:{p})?"),
    ),
    max_leaves=8,
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pattern=REGEX, seed=st.integers(0, 1000))
def test_xgrammar_finds_no_regex_forcing_more_than_its_bound(xgrammar, pattern, seed):
    assert longest_forced_along_walks(xgrammar, "regex", pattern, seed) <= pattern_bound(pattern), pattern


# Non-recursive GBNF: rule i is built from strings, a class and the rules before it.
@st.composite
def gbnf(draw) -> str:
    rules: list[str] = []
    for i in range(draw(st.integers(1, 4))):
        refs = [f"r{j}" for j in range(i)]
        element = st.sampled_from(['"a"', '"bc"', "[xy]", *refs]).flatmap(
            lambda e: st.sampled_from([e, f"{e}?", f"{e}*", f"{e}{{2}}", f'({e} | "z")'])
        )
        alternatives = draw(st.lists(st.lists(element, min_size=1, max_size=3).map(" ".join), min_size=1, max_size=2))
        rules.append(f"r{i} ::= " + " | ".join(alternatives))
    return "\n".join([*rules, f"root ::= r{len(rules) - 1}"])


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(grammar=gbnf(), seed=st.integers(0, 1000))
def test_xgrammar_finds_no_gbnf_grammar_forcing_more_than_its_bound(xgrammar, grammar, seed):
    assert longest_forced_along_walks(xgrammar, "ebnf", grammar, seed) <= gbnf_bound(grammar), grammar


def unevaluated_items(n: int, content: dict) -> dict:
    """An array of exactly `n` items, each `content`, written through unevaluatedItems."""
    return {"type": "array", "unevaluatedItems": content, "minItems": n, "maxItems": n}


# Small JSON schemas: required properties, arrays with minItems, enums, consts, patterns.
SCHEMA = st.recursive(
    st.one_of(
        st.just({"type": "null"}),
        st.just({"type": "boolean"}),
        st.sampled_from(["ab", "x|yz{3}", "(?:cd){2}", "x|(?:cd){60}"]).map(
            lambda p: {"type": "string", "pattern": f"^(?:{p})$"}
        ),
        st.lists(st.sampled_from(["a", "bc", 1, None]), min_size=1, max_size=2, unique=True).map(lambda v: {"enum": v}),
        st.sampled_from(["k", 7]).map(lambda v: {"const": v}),
    ),
    lambda inner: st.one_of(
        st.tuples(inner, st.integers(0, 3)).map(
            lambda p: {"type": "array", "items": p[0], "minItems": p[1], "maxItems": p[1] + 1}
        ),
        st.dictionaries(st.sampled_from(["a", "b", "cd"]), inner, min_size=1, max_size=3).map(
            lambda props: {
                "type": "object",
                "properties": props,
                "required": sorted(props),
                "additionalProperties": False,
            }
        ),
    ),
    max_leaves=5,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(schema=SCHEMA, seed=st.integers(0, 1000))
@example(schema={"type": "string", "pattern": "^(?:x|(?:cd){60})$"}, seed=1)  # (a shortest match of 1)
# (a stranger's fuzzer: minItems filled from unevaluatedItems, a DEL xgrammar writes as \u007f,
# a number in e-notation xgrammar writes digit by digit)
@example(schema=unevaluated_items(30, unevaluated_items(30, {"const": "x" * 8})), seed=0)
@example(schema={"const": "\x7f" * 50}, seed=0)
@example(schema={"type": "number", "minimum": 1e308, "maximum": 1e308}, seed=0)
def test_xgrammar_finds_no_schema_forcing_more_than_its_bound(xgrammar, schema, seed):
    text = json.dumps(schema)
    bound = forced_text_bound(xgrammar.enforced_schema(text))
    assert longest_forced_along_walks(xgrammar, "json_schema", text, seed) <= bound, schema


# v2 structural tag formats of constant strings and regexes under sequence, or and repeats.
FORMAT = st.recursive(
    st.one_of(
        st.sampled_from(["a", "bc", "xyz"]).map(lambda v: {"type": "const_string", "value": v}),
        st.sampled_from(["[ab]", "q(?:r|st)", "z{2}"]).map(lambda p: {"type": "regex", "pattern": p}),
    ),
    lambda inner: st.one_of(
        st.lists(inner, min_size=2, max_size=3).map(lambda es: {"type": "sequence", "elements": es}),
        st.lists(inner, min_size=2, max_size=3).map(lambda es: {"type": "or", "elements": es}),
        st.tuples(inner, st.integers(0, 3), st.integers(0, 2)).map(
            lambda p: {"type": "repeat", "min": p[1], "max": p[1] + p[2], "content": p[0]}
        ),
    ),
    max_leaves=6,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fmt=FORMAT, seed=st.integers(0, 1000))
def test_xgrammar_finds_no_structural_tag_format_forcing_more_than_its_bound(xgrammar, fmt, seed):
    text = json.dumps({"type": "structural_tag", "format": fmt})
    bound = format_bound(parse_any_structural_tag(text).format)
    assert longest_forced_along_walks(xgrammar, "structural_tag", text, seed) <= bound, fmt


def test_a_short_grammar_that_forces_megabytes_is_served_by_xgrammar_without_jumps(xgrammar):
    """The stall hunt's three: a regex whose shortest match is one character, rules that
    double twenty times (8 MB), a tag of nested repeats (8 GB). Each compiles, and no jump
    search is made; a short forced text still jumps."""
    doubling = "\n".join(['r0 ::= "abcdefgh"', *(f"r{k} ::= r{k - 1} r{k - 1}" for k in range(1, 21)), "root ::= r20"])
    repeats: dict = {"type": "const_string", "value": "abcdefgh"}
    for _ in range(3):
        repeats = {"type": "repeat", "min": 1000, "max": 1000, "content": repeats}
    tag = json.dumps({"type": "structural_tag", "format": repeats})
    cases = [("regex", "a|b((cdefghij){1000}){1000}"), ("ebnf", doubling), ("structural_tag", tag)]
    assert pattern_bound(cases[0][1]) > JUMP_MAX_FORCED_CHARS and gbnf_bound(doubling) > JUMP_MAX_FORCED_CHARS
    assert gbnf_bound('r ::= "a" r\nroot ::= r') > JUMP_MAX_FORCED_CHARS  # (a recursion: no bound)
    tokenizer = xgrammar.tokenizer
    for kind, text in cases:
        g = compiled(xgrammar, kind, text)
        assert not isinstance(g, InvalidGrammarObject) and not g.jumps, (kind, g)
        assert g.jump_forward(tokenizer) is None
    g = compiled(xgrammar, "ebnf", 'r ::= "ab" "cd"\nroot ::= r r')
    assert g.jumps and g.jump_forward(tokenizer)[0] == b"abcdabcd"
