"""Structural tag v2 on the fsm backend (constrained/structural_tag_regex.py): the regex against
two oracles, xgrammar's own GrammarMatcher (fed the bytes, then asked whether it may end) and
a direct Python matcher of the semantics, over random format trees and every short string;
the old shape compiled both ways; refusals by name; generation with the bundled model."""

from __future__ import annotations

import functools
import itertools
import json
import re

import pytest
import xgrammar as xgr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from real_tokenizers import load

import minisglang as sgl
from minisglang.backends.base import GrammarError, InvalidGrammarObject, get_backend_class
from minisglang.constrained.json_schema import build_schema_tree
from minisglang.constrained.lazy_byte_dfa import LazyByteDFA
from minisglang.constrained.lazy_regex import RegexPool
from minisglang.constrained.lazy_regex_parser import parse_regex
from minisglang.constrained.regex_ast import lower
from minisglang.constrained.structural_tag import StructuralTagError, parse_structural_tag
from minisglang.constrained.structural_tag_format import (
    AnyTextFormat,
    ConstStringFormat,
    DispatchFormat,
    JSONSchemaFormat,
    OptionalFormat,
    OrFormat,
    PlusFormat,
    RegexFormat,
    RepeatFormat,
    SequenceFormat,
    StarFormat,
    StructuralTagFormat,
    StructuralTagFormatError,
    TagFormat,
    TagsWithSeparatorFormat,
    TriggeredTagsFormat,
    from_legacy,
)
from minisglang.constrained.structural_tag_parse import parse_structural_tag_format
from minisglang.constrained.structural_tag_regex import format_regex


# ------------------------------------------------------------------ the semantics, directly
def reference_accepts(spec: StructuralTagFormat, text: str) -> bool:
    return len(text) in _ends(spec.format, text, 0, None)


def _ends(fmt, s: str, i: int, stops: tuple[str, ...] | None) -> set[int]:
    """Every j such that s[i:j] matches `fmt` (stops: the nearest enclosing tag's ends)."""
    n = len(s)
    if isinstance(fmt, ConstStringFormat):
        return {i + len(fmt.value)} if s.startswith(fmt.value, i) else set()
    if isinstance(fmt, RegexFormat):
        return {j for j in range(i, n + 1) if re.fullmatch(fmt.pattern, s[i:j])}
    if isinstance(fmt, JSONSchemaFormat):  # (the tests' schemas: an enum of scalars)
        values = {json.dumps(v) for v in fmt.json_schema["enum"]}
        return {j for j in range(i, n + 1) if s[i:j] in values}
    if isinstance(fmt, AnyTextFormat):
        bad = (*fmt.excludes, *(stops or ()))
        limit = n if fmt.max_chars is None else min(n, i + fmt.max_chars)
        return {j for j in range(i, limit + 1) if not any(b in s[i:j] for b in bad)}
    if isinstance(fmt, SequenceFormat):
        here = {i}
        for e in fmt.elements:
            here = {j for k in here for j in _ends(e, s, k, stops)}
        return here
    if isinstance(fmt, OrFormat):
        return set().union(*(_ends(e, s, i, stops) for e in fmt.elements))
    if isinstance(fmt, (OptionalFormat, PlusFormat, StarFormat, RepeatFormat)):
        low, high = {OptionalFormat: (0, 1), PlusFormat: (1, None), StarFormat: (0, None)}.get(type(fmt), (0, 0))
        if isinstance(fmt, RepeatFormat):
            low, high = fmt.min, None if fmt.max == -1 else fmt.max
        out, here, count = set(), {i}, 0
        while here and (high is None or count <= high):
            if count >= low:
                out |= here
            new = {j for k in here for j in _ends(fmt.content, s, k, stops)}
            if count >= low and new <= out:
                break
            here, count = new, count + 1
        return out
    if isinstance(fmt, TagFormat):
        return _tag_ends(fmt, s, i)
    if isinstance(fmt, TagsWithSeparatorFormat):
        one = lambda k: set().union(*(_tag_ends(t, s, k) for t in fmt.tags))  # noqa: E731
        first = one(i)
        if fmt.stop_after_first:
            return first | (set() if fmt.at_least_one else {i})
        out, here = set(first), set(first)
        while here:
            here = {j for k in here if s.startswith(fmt.separator, k) for j in one(k + len(fmt.separator))} - out
            out |= here
        return out | (set() if fmt.at_least_one else {i})
    if isinstance(fmt, TriggeredTagsFormat):
        return _triggered_ends(fmt, s, i, stops)
    if isinstance(fmt, DispatchFormat):
        return _dispatch_ends(fmt, s, i, stops)
    raise AssertionError(fmt)


def _dispatch_ends(fmt: DispatchFormat, s: str, i: int, stops) -> set[int]:
    """A scan, as for triggered_tags: a pattern where it first completes starts its rule's
    format (the enclosing tag's ends are not forbidden in the free text)."""
    forbidden = (*(p for p, _ in fmt.rules), *fmt.excludes)

    def dispatch(p: int) -> set[int]:
        for k in range(p + 1, len(s) + 1):
            done = [f for f in forbidden if s[p:k].endswith(f)]
            if done:
                return set().union(*(_ends(f, s, k, stops) for pat, f in fmt.rules if pat == done[0]))
        return set()

    def free_ends(p: int) -> set[int]:
        return {k for k in range(p, len(s) + 1) if not any(f in s[p:k] for f in forbidden)}

    if not fmt.loop:
        return free_ends(i) | dispatch(i)
    out, todo, seen = set(), [i], set()
    while todo:
        q = todo.pop()
        if q not in seen:
            seen.add(q)
            out |= free_ends(q)
            todo.extend(dispatch(q))
    return out


def _tag_ends(tag: TagFormat, s: str, i: int) -> set[int]:
    if not s.startswith(tag.begin, i):
        return set()
    return {
        j + len(e) for j in _ends(tag.content, s, i + len(tag.begin), tag.ends) for e in tag.ends if s.startswith(e, j)
    }


def _triggered_ends(fmt: TriggeredTagsFormat, s: str, i: int, stops) -> set[int]:
    """A scan: free text runs until the first place a trigger, exclude or stop completes; a
    trigger there starts one of its tags."""
    forbidden = (*fmt.triggers, *fmt.excludes, *(stops or ()))

    def free_ends(p: int) -> set[int]:
        return {k for k in range(p, len(s) + 1) if not any(f in s[p:k] for f in forbidden)}

    def dispatch(p: int) -> set[int]:  # where a tag found by the scan from p ends
        for k in range(p + 1, len(s) + 1):
            done = [f for f in forbidden if s[p:k].endswith(f)]
            if done:
                t = done[0]
                if t not in fmt.triggers:
                    return set()
                return set().union(*(_tag_ends(tag, s, k - len(t)) for tag in fmt.tags if fmt.trigger_of(tag) == t))
        return set()

    def loop(p: int) -> set[int]:
        out, todo, seen = set(), [p], set()
        while todo:
            q = todo.pop()
            if q in seen:
                continue
            seen.add(q)
            out |= free_ends(q)
            todo.extend(dispatch(q))
        return out

    if fmt.at_least_one:
        first = set().union(*(_tag_ends(tag, s, i) for tag in fmt.tags))
        return first if fmt.stop_after_first else set().union(*(loop(q) for q in first))
    if fmt.stop_after_first:
        return free_ends(i) | dispatch(i)
    return loop(i)


# ------------------------------------------------------------------ the two automata
def schema_tree(schema, whitespace):
    return build_schema_tree(schema, whitespace=whitespace)


def ours(spec: StructuralTagFormat):
    pool = RegexPool()
    dfa = LazyByteDFA(lower(format_regex(spec, schema_tree), pool), pool)
    return lambda text: dfa.matches(text.encode())


@functools.cache
def _xgrammar_compiler():
    vocab = [bytes([b]) for b in range(256)] + [b""]  # one token per byte, then EOS
    info = xgr.TokenizerInfo(vocab, xgr.VocabType.RAW, vocab_size=257, stop_token_ids=[256])
    return xgr.GrammarCompiler(info, cache_enabled=False)


def xgrammar(spec: StructuralTagFormat):
    compiled = _xgrammar_compiler().compile_structural_tag(spec.to_json())

    def accepts(text: str) -> bool:
        m = xgr.GrammarMatcher(compiled, terminate_without_stop_token=False)
        return m.accept_string(text.encode()) and m.accept_token(256)

    return accepts


def strings(alphabet: str, longest: int) -> list[str]:
    return ["".join(c) for n in range(longest + 1) for c in itertools.product(alphabet, repeat=n)]


def v2(fmt: dict) -> StructuralTagFormat:
    return parse_structural_tag_format({"type": "structural_tag", "format": fmt})


def C(value):
    return {"type": "const_string", "value": value}


def T(begin, content, end):
    return {"type": "tag", "begin": begin, "content": content, "end": end}


ANY = {"type": "any_text"}

CASES = [
    T("<", ANY, "aa"),  # "<aaa": the text "a", then the end (xgrammar: any split)
    T("<", ANY, ["aa", "b"]),
    T("<", {"type": "any_text", "excludes": ["ab"]}, "b"),
    T("<", {"type": "any_text", "max_chars": 2}, ">"),
    {"type": "sequence", "elements": [ANY, C("a")]},  # top level: no stop (.*a)
    {"type": "sequence", "elements": [{"type": "any_text", "excludes": ["a"]}, C("a")]},
    {"type": "triggered_tags", "triggers": ["aa"], "tags": [T("aa<", C(""), ">")]},  # first trigger: "aaa<>" refused
    {"type": "triggered_tags", "triggers": ["ab"], "tags": [T("ab", C("<"), ">")], "excludes": ["ba"]},
    T("<", {"type": "triggered_tags", "triggers": ["ab"], "tags": [T("ab", ANY, ">")]}, "ba"),
    T(
        "<",
        {"type": "triggered_tags", "triggers": ["a"], "tags": [T("a<", C("b"), ">")], "stop_after_first": True},
        ">>",
    ),
    T("<", {"type": "triggered_tags", "triggers": ["a"], "tags": [T("a<", C("b"), ">")], "at_least_one": True}, ">>"),
    # The tag's end also in the excludes: one string (was refused, "'>>' is listed twice")
    T("<", {"type": "triggered_tags", "triggers": ["a"], "tags": [T("a<", C("b"), ">")], "excludes": [">>"]}, ">>"),
    {
        "type": "sequence",
        "elements": [{"type": "triggered_tags", "triggers": ["<"], "tags": [T("<a", C(""), ">")]}, C("a")],
    },
    {"type": "tags_with_separator", "separator": "a", "tags": [T("a", ANY, "b"), T("b", C(""), "a")]},
    {"type": "tags_with_separator", "separator": "", "tags": [T("<", C("a"), ">")], "at_least_one": True},
    {
        "type": "repeat",
        "min": 1,
        "max": 3,
        "content": {"type": "or", "elements": [C("ab"), {"type": "regex", "pattern": "b+"}]},
    },
    T("<", {"type": "sequence", "elements": [ANY, T("a", ANY, "b")]}, ">"),  # each any_text stops at its own tag
    {"type": "star", "content": T("<", {"type": "plus", "content": ANY}, ">")},
    {"type": "dispatch", "rules": [["aa", C("<")], ["b", T("<", ANY, ">")]]},  # first pattern: "aaa<" refused
    T("<", {"type": "dispatch", "rules": [["a", ANY]], "loop": False}, ">"),  # "<b>>": the end is free text
    {"type": "dispatch", "rules": [["<", C("a")]], "excludes": ["b"]},
    {"type": "json_schema", "json_schema": {"enum": [1, "a", None]}},
    T("<", {"type": "grammar", "grammar": 'root ::= x ("|" x)* # two rules\nx ::= "a"{1,2} | [^a<>|]'}, ">"),
]


@pytest.mark.parametrize("fmt", CASES, ids=lambda f: json.dumps(f)[:60])
def test_fixed_formats_agree_with_xgrammar_and_the_semantics(fmt):
    spec = v2(fmt)
    mine, theirs = ours(spec), xgrammar(spec)
    for text in strings('ab<>"1', 4) if "json_schema" in json.dumps(fmt) else strings("ab<>", 5):
        expected = theirs(text)
        assert mine(text) == expected, text
        if "grammar" not in json.dumps(fmt):  # (the direct matcher reads no GBNF: test_gbnf_regex)
            assert reference_accepts(spec, text) == expected, text


# Random format trees over the alphabet "ab<>": every format type but json_schema (below).
TEXTS = st.sampled_from(["", "a", "b", "ab", "<", ">", "<a", "b>"])
NONEMPTY = st.sampled_from(["a", "b", "ab", "ba", "<", ">", "<a", "a>", ">>"])
REGEXES = st.sampled_from(["a*", "[ab]", "b?a", "(ab|b)+", "[^a]"])


def tags(content):
    return st.builds(
        lambda b, c, e: T(b, c, e),
        st.sampled_from(["<", "<a", "<b", "a"]),
        content,
        st.one_of(NONEMPTY, st.lists(NONEMPTY, min_size=1, max_size=2, unique=True)),
    )


def formats():
    leaves = st.one_of(
        st.builds(C, TEXTS),
        st.builds(lambda p: {"type": "regex", "pattern": p}, REGEXES),
        st.builds(
            lambda ex, mc: {"type": "any_text", "excludes": ex, **({"max_chars": mc} if mc is not None else {})},
            st.lists(NONEMPTY, max_size=2, unique=True),
            st.none() | st.integers(0, 3),
        ),
    )

    def grow(inner):
        elements = st.lists(inner, min_size=1, max_size=3)
        flags = {"at_least_one": st.booleans(), "stop_after_first": st.booleans()}
        return st.one_of(
            st.builds(lambda e: {"type": "sequence", "elements": e}, elements),
            st.builds(lambda e: {"type": "or", "elements": e}, elements),
            st.builds(lambda k, c: {"type": k, "content": c}, st.sampled_from(["optional", "plus", "star"]), inner),
            st.builds(
                lambda lo, extra, c: {
                    "type": "repeat",
                    "min": lo,
                    "max": -1 if extra < 0 else lo + extra,
                    "content": c,
                },
                st.integers(0, 2),
                st.integers(-1, 2),
                inner,
            ),
            tags(inner),
            st.builds(
                lambda t, sep, **f: {"type": "tags_with_separator", "tags": t, "separator": sep, **f},
                st.lists(tags(inner), min_size=1, max_size=2),
                TEXTS,
                **flags,
            ),
            st.builds(
                lambda rules, loop, ex: {"type": "dispatch", "rules": rules, "loop": loop, "excludes": ex},
                st.lists(st.tuples(st.sampled_from(["<", "<a", "b>", "a"]), inner).map(list), min_size=1, max_size=2),
                st.booleans(),
                st.lists(st.sampled_from(["b", "ab", ">"]), max_size=1),
            ),
            st.builds(
                lambda trig, t, ex, **f: triggered(trig, t, ex, **f),
                st.sampled_from([["<"], ["<a", "<b"], ["a"], ["<", "b"]]),
                st.lists(tags(inner), min_size=1, max_size=2),
                st.lists(st.sampled_from(["b", "ab", ">"]), max_size=1),
                **flags,
            ),
        )

    return st.recursive(leaves, grow, max_leaves=5)


def triggered(triggers, tags, excludes, **flags):
    """A triggered_tags of the tags that begin with a trigger, and only the triggers that
    begin a tag (one that begins none fails an internal check in xgrammar 0.2.9; the
    xgrammar backend refuses it by name, tested with the old shape)."""
    tags = [tag for tag in tags if any(tag["begin"].startswith(x) for x in triggers)] or [T(triggers[0], C(""), ">")]
    used = [x for x in triggers if any(tag["begin"].startswith(x) for tag in tags)]
    return {"type": "triggered_tags", "triggers": used, "tags": tags, "excludes": excludes, **flags}


def compile_both(fmt):
    """(ours, xgrammar's) for a random format, or None where ours refuses it (by name) or
    xgrammar refuses it too."""
    try:
        spec = v2(fmt)
        mine = ours(spec)
    except StructuralTagFormatError as e:
        assert str(e).startswith("structural_tag.format"), e
        return None
    try:
        theirs = xgrammar(spec)
    except RuntimeError as e:  # what xgrammar refuses we must refuse too, unless named here
        pytest.fail(f"xgrammar refuses what we accept: {e}")
    return spec, mine, theirs


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(formats())
def test_random_formats_agree_with_xgrammar_and_the_semantics_on_every_short_string(fmt):
    both = compile_both(fmt)
    if both is None:
        return
    spec, mine, theirs = both
    for text in strings("ab<>", 4):
        expected = theirs(text)
        assert mine(text) == expected, (text, expected)
        assert reference_accepts(spec, text) == expected, (text, expected)


def test_json_schema_content_is_a_subset_of_xgrammars():
    """Our JSON allows at most one space where JSON allows whitespace, xgrammar's any amount:
    everything we accept, xgrammar accepts; and compact text we both accept."""
    spec = v2(T("<", {"type": "json_schema", "json_schema": {"type": "array", "items": {"enum": [1, 2]}}}, ">"))
    mine, theirs = ours(spec), xgrammar(spec)
    for text in strings("[12, ]<>", 6):
        if mine(text):
            assert theirs(text), text
    for text in ["<[1,2]>", "<[1, 2]>", "<[]>"]:
        assert mine(text) and theirs(text)
    assert not mine("<[1,  2]>") and theirs("<[1,  2]>")
    compact = v2({"type": "json_schema", "json_schema": {"type": "array"}, "max_whitespace_cnt": 0})
    assert ours(compact)("[1,2]") and not ours(compact)("[1, 2]")


OLD_SPECS = [
    ({"structures": [{"begin": "<a>", "schema": {"enum": [1]}, "end": "</a>"}], "triggers": ["<a"]}, "<a>/1b"),
    (
        {
            "structures": [
                {"begin": "aa", "schema": {"enum": [1]}, "end": ">"},
                {"begin": "b", "schema": {"enum": [2]}, "end": ">"},
            ],
            "triggers": ["aa", "b"],
        },
        "ab12>",
    ),
]


@pytest.mark.parametrize("flags", [{}, {"at_least_one": True}, {"stop_after_first": True}])
@pytest.mark.parametrize("old, alphabet", OLD_SPECS)
def test_the_old_shape_reads_the_same_through_the_v2_compiler(old, alphabet, flags):
    """The old spec's own regex (structural_tag.py, lazy form) and its v2 form (from_legacy)
    give the same verdicts: one semantics, two compilers."""
    spec = parse_structural_tag({**old, **flags})
    pool = RegexPool()
    dfa = LazyByteDFA(parse_regex(spec.to_regex(lambda s: _schema_text(s), automaton="lazy"), pool, members=True), pool)
    mine = ours(from_legacy(spec))
    for text in strings(alphabet, 6):
        assert mine(text) == dfa.matches(text.encode()), text


def _schema_text(schema) -> str:
    from minisglang.constrained.json_schema import build_regex_from_schema

    return build_regex_from_schema(json.dumps(schema))


# ------------------------------------------------------------------ the backend
@functools.cache
def backend(name: str, **options):
    tok = load("bundled")
    return get_backend_class(name)(tok, len(tok.token_bytes), **options)


def compiled(name: str, fmt: dict, **options):
    """A compile on this thread (no child processes: a child forked late in a long test
    process was killed at its memory limit)."""
    text = json.dumps({"type": "structural_tag", "format": fmt})
    return backend(name, compile_in="thread", **options)._compile_safely("structural_tag", text)


def walk(grammar, tok, text: str) -> bool:
    m = grammar.copy()
    for token in tok.encode(text):
        try:
            m.accept_token(token)
        except GrammarError:
            return False
    if m.is_terminated():
        return True
    mask = m.allocate_vocab_mask(len(tok.token_bytes), 1)
    m.fill_vocab_mask(mask, 0)
    eos = tok.eos_token_id
    return bool(int(mask[0, eos // 32]) >> (eos % 32) & 1)


TOOL = {
    "type": "triggered_tags",
    "triggers": ["<tool_call>"],
    "tags": [
        T(
            "<tool_call>",
            {
                "type": "json_schema",
                "json_schema": {
                    "type": "object",
                    "properties": {"name": {"const": "get_weather"}, "city": {"type": "string", "maxLength": 8}},
                    "required": ["name", "city"],
                    "additionalProperties": False,
                },
            },
            "</tool_call>",
        )
    ],
}
TOOL_TEXTS = {
    'Let me check. <tool_call>{"name": "get_weather", "city": "Paris"}</tool_call> Done.': True,
    '<tool_call>{"name":"get_weather","city":"Oslo"}</tool_call>': True,
    "no call at all": True,
    '<tool_call>{"name": "get_time", "city": "Paris"}</tool_call>': False,
    "text <tool_call> more": False,
}


@pytest.mark.parametrize("name", ["fsm", "xgrammar"])
def test_both_backends_serve_a_v2_tool_call_spec_alike(name):
    grammar = compiled(name, TOOL)
    assert not isinstance(grammar, InvalidGrammarObject), grammar
    tok = load("bundled")
    for text, expected in TOOL_TEXTS.items():
        assert walk(grammar, tok, text) == expected, (name, text)


@pytest.mark.parametrize(
    "fmt, message",
    [
        (
            {"type": "grammar", "grammar": 'root ::= "(" root ")" | ""'},
            r"structural_tag.format.grammar: the 'fsm' backend takes a grammar only when it is a regular "
            r"expression .* rule 'root' refers to itself \(root -> root\)",
        ),
        (
            T("<", {"type": "token", "token": 3}, ">"),
            r"format.content: the 'fsm' backend does not serve the token-level format 'token'",
        ),
        (
            T({"type": "token", "token": 3}, C("a"), ">"),
            r"format.begin: the 'fsm' backend does not serve the token-level",
        ),
        ({"type": "any_tokens"}, r"token-level format 'any_tokens'"),
        ({"type": "any_text", "max_tokens": 3}, r"format.max_tokens: the 'fsm' backend does not count tokens"),
        ({"type": "json_schema", "json_schema": {}, "style": "qwen_xml"}, r"format.style: .* style 'qwen_xml'"),
        ({"type": "json_schema", "json_schema": {}, "any_order": True}, r"format.any_order"),
        ({"type": "json_schema", "json_schema": {"type": "nope"}}, r"structural_tag.format.json_schema: "),
        ({"type": "regex", "pattern": "(a"}, r"structural_tag.format.pattern: "),
        ({"type": "regex", "pattern": "a{1,2}" * 30_000}, r"format.pattern: regex of 180,000 characters"),
        (T("<", ANY, ""), r"format.content: this format is unlimited .* needs non-empty end strings"),
        (
            {"type": "triggered_tags", "triggers": ["a" * 20_000], "tags": [T("a" * 20_000, C(""), ">")]},
            r"structural_tag.format: 'aaaa.*\(20,000 characters\) is 20,000 bytes long; .* at most 256 bytes",
        ),
        (
            T("<", {"type": "any_text", "excludes": [f"{i:0>200}" for i in range(30)]}, ">"),
            r"format.content: the strings kept out of this free text are 6,001 bytes together; the limit is 4,096",
        ),
        ({"type": "grammar", "grammar": "root ::= " + "(" * 5000 + '"x"' + ")" * 5000}, r"nests too deep"),
        # (no GBNF at all: no backend is suggested, as none serves it)
        (
            {"type": "grammar", "grammar": 'root ::= "x'},
            r"format.grammar: not a GBNF grammar: a string with no closing",
        ),
        (
            {"type": "grammar", "grammar": 'root ::= "x"' + " " * 100_000},
            r"format.grammar: grammar of 100,012 characters",
        ),
        (
            {"type": "triggered_tags", "triggers": ["<"], "excludes": ["a<"], "tags": [T("<", C(""), ">")]},
            r"structural_tag.format: '<' is inside 'a<'",
        ),
        (
            {"type": "triggered_tags", "triggers": ["<"], "excludes": ["<"], "tags": [T("<", C(""), ">")]},
            r"structural_tag.format: '<' is listed twice",  # (xgrammar: the exclude keeps the tag out)
        ),
    ],
)
def test_what_the_fsm_backend_cannot_serve_is_refused_by_name(fmt, message):
    grammar = compiled("fsm", fmt)
    assert isinstance(grammar, InvalidGrammarObject)
    assert re.search(message, grammar.message), grammar.message


def test_the_eager_automaton_and_outlines_refuse_it_by_name():
    eager = compiled("fsm", C("a"), automaton="eager")
    assert "a v2 structural tag needs the lazy automaton" in eager.message
    for name in ("outlines",):
        try:
            grammar = compiled(name, C("a"))
        except (ImportError, ValueError) as e:  # (a library missing here)
            pytest.skip(str(e))
        assert re.search(r"cannot compile a v2 structural tag|does not support 'structural_tag'", grammar.message)


# ------------------------------------------------------------------ generation
@pytest.fixture(scope="module")
def engine():
    e = sgl.Engine(grammar_backend="fsm")
    yield e
    e.shutdown()


GENERATED = [
    T("<think>", {"type": "any_text", "max_chars": 40}, "</think>"),
    {
        "type": "sequence",
        "elements": [
            C("Answer: "),
            {"type": "or", "elements": [C("yes"), C("no")]},
            {"type": "optional", "content": {"type": "regex", "pattern": r" \(confidence [0-9]{1,2}%\)"}},
        ],
    },
    {
        "type": "tags_with_separator",
        "separator": ", ",
        "at_least_one": True,
        "tags": [
            T("<n>", {"type": "json_schema", "json_schema": {"type": "integer", "minimum": 0, "maximum": 99}}, "</n>")
        ],
    },
]


def test_every_generated_output_parses_under_its_format(engine):
    params = [
        {
            "max_new_tokens": 48,
            "temperature": 1.0,
            "seed": seed,
            "structural_tag": {"type": "structural_tag", "format": fmt},
        }
        for fmt in GENERATED
        for seed in (1, 2)
    ]
    outs = engine.generate(["Write:"] * len(params), params)
    for p, out in zip(params, outs):
        spec = parse_structural_tag_format(p["structural_tag"])
        matches = ours(spec)
        assert out["meta_info"]["finish_reason"]["type"] in ("stop", "length"), out
        if out["meta_info"]["finish_reason"]["type"] == "stop":
            assert matches(out["text"]), (p, out["text"])


@pytest.mark.parametrize("name", ["xgrammar", "llguidance"])
def test_generation_under_each_library_backend_parses_under_its_format(name):
    e = sgl.Engine(grammar_backend=name)
    params = [
        {"max_new_tokens": 48, "temperature": 1.0, "seed": seed, "structural_tag": {"format": fmt}}
        for fmt in GENERATED
        if name != "xgrammar" or not counts_chars(fmt)
        for seed in (1, 2)
    ]
    try:
        outs = e.generate(["Write:"] * len(params), params)
    finally:
        e.shutdown()
    for p, out in zip(params, outs):
        assert out["meta_info"]["finish_reason"]["type"] in ("stop", "length"), out
        if out["meta_info"]["finish_reason"]["type"] == "stop":
            assert ours(parse_structural_tag_format(p["structural_tag"]))(out["text"]), (name, p, out["text"])


def test_a_bad_v2_spec_aborts_only_its_request(engine):
    good = {"max_new_tokens": 8, "structural_tag": {"format": C("ok")}}
    bad = {"max_new_tokens": 8, "structural_tag": {"format": {"type": "grammar", "grammar": 'root ::= "x" root'}}}
    outs = engine.generate(["a", "b"], [good, bad])
    assert outs[0]["text"] == "ok"
    reason = outs[1]["meta_info"]["finish_reason"]
    assert reason["type"] == "abort" and "rule 'root' refers to itself" in reason["message"], reason


def test_a_v2_spec_error_is_a_structural_tag_error():
    with pytest.raises(StructuralTagError):
        parse_structural_tag_format({"format": {"type": "const_string"}})


# ------------------------------------------------------------------ the xgrammar backend
def counts_chars(fmt: dict) -> bool:
    """Whether a format bounds an any_text by characters (`max_chars`), which the xgrammar
    backend refuses by name."""
    return '"max_chars"' in json.dumps(fmt)


def refused_for_max_chars(grammar) -> bool:
    return isinstance(grammar, InvalidGrammarObject) and ".max_chars: xgrammar does not count" in grammar.message


@pytest.mark.parametrize(
    "text, fits",
    [
        ("<ab>", True),
        ("<a\u00e9>", True),
        ("<\u00e9\u00e9>", True),
        ("<\u4e2d>", True),
        ("<abc>", False),
        ("<a\u00e9\u00e9>", False),
    ],
)
def test_max_chars_counts_characters_and_xgrammar_refuses_it_by_name(text, fits):
    """xgrammar 0.2.9 took `a` and the first byte of `\u00e9` under max_chars 2 and then
    allowed no token (a request aborted midway), and refused `ab\u00e9` under 3: the
    backends that count characters serve the bound, xgrammar refuses it."""
    fmt = T("<", {"type": "any_text", "max_chars": 2}, ">")
    tok = load("bundled")
    for name in ("fsm", "llguidance"):
        assert walk(compiled(name, fmt), tok, text) == fits, (name, text)
    assert refused_for_max_chars(compiled("xgrammar", fmt))


@pytest.mark.parametrize(
    "fmt", [f for f in CASES if "json_schema" not in json.dumps(f)], ids=lambda f: json.dumps(f)[:60]
)
def test_the_xgrammar_backend_accepts_what_the_fsm_backend_accepts(fmt):
    tok = load("bundled")
    ours_, theirs = compiled("fsm", fmt), compiled("xgrammar", fmt)
    if counts_chars(fmt):
        assert refused_for_max_chars(theirs), theirs
        return
    for text in strings("ab<>", 4):
        assert walk(ours_, tok, text) == walk(theirs, tok, text), text


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(formats())
def test_random_formats_read_alike_on_the_fsm_and_xgrammar_backends(fmt):
    """Through the adapters and the bundled vocabulary (multi-byte tokens across the
    format's seams), not one byte at a time."""
    ours_ = compiled("fsm", fmt)
    if isinstance(ours_, InvalidGrammarObject):
        return
    theirs = compiled("xgrammar", fmt)
    if counts_chars(fmt):
        assert refused_for_max_chars(theirs), theirs
        return
    assert not isinstance(theirs, InvalidGrammarObject), theirs
    tok = load("bundled")
    for text in strings("ab<>", 3):
        assert walk(ours_, tok, text) == walk(theirs, tok, text), text


def allowed(m, size: int) -> set[int]:
    mask = m.allocate_vocab_mask(size, 1)
    m.fill_vocab_mask(mask, 0)
    row = mask[0].tolist()
    return {i for i in range(size) if row[i // 32] >> (i % 32) & 1}


@settings(max_examples=40, suppress_health_check=[HealthCheck.too_slow])
@given(formats())
def test_random_formats_give_the_same_token_masks_on_the_fsm_and_xgrammar_backends(fmt):
    """Token by token along a few texts, the two backends allow the same tokens of the
    bundled vocabulary (xgrammar accepts what we accept, and no more)."""
    ours_ = compiled("fsm", fmt)
    if isinstance(ours_, InvalidGrammarObject):
        return
    theirs = compiled("xgrammar", fmt)
    if counts_chars(fmt):
        assert refused_for_max_chars(theirs), theirs
        return
    tok = load("bundled")
    size = len(tok.token_bytes)
    for text in ["a", "<ab>b", "b<a>>"]:
        a, b = ours_.copy(), theirs.copy()
        for token in tok.encode(text):
            mask = allowed(a, size)
            assert mask == allowed(b, size), text
            if token not in mask:
                break
            a.accept_token(token)
            b.accept_token(token)


def test_a_regex_reads_as_pythons_re_on_both_backends():
    """xgrammar's own `\\d` is ASCII and its `.` takes a newline; the adapter hands it the
    regex with every set spelled out (portable_regex), as for regex requests."""
    tok = load("bundled")
    fmt = T("<", {"type": "regex", "pattern": r"\d.\d"}, ">")
    for name in ("fsm", "xgrammar"):
        grammar = compiled(name, fmt)
        assert walk(grammar, tok, "<1x٣>") and not walk(grammar, tok, "<1\n2>"), name


@pytest.mark.parametrize(
    "fmt, message",
    [
        (
            {"type": "triggered_tags", "triggers": ["<a", "<b"], "tags": [T("<a", C(""), ">")]},
            r"structural_tag.format.triggers: trigger '<b' begins no tag",
        ),
        (
            T("<", {"type": "json_schema", "json_schema": {"type": "array", "uniqueItems": True}}, ">"),
            r"structural_tag.format.content.json_schema: .*uniqueItems",
        ),
        (T("<", {"type": "regex", "pattern": "(?<=a)b"}, ">"), r"structural_tag.format.content.pattern: "),
        ({"type": "grammar", "grammar": "root ::= missing"}, r"structural_tag.format: "),
        (  # (xgrammar's own message named no path: "structural_tag.format: max_whitespace_cnt must be positive")
            T("<", {"type": "json_schema", "json_schema": {}, "max_whitespace_cnt": 0}, ">"),
            r"structural_tag.format.content.max_whitespace_cnt: xgrammar takes a count of 1 or more",
        ),
    ],
)
def test_the_xgrammar_backend_refuses_by_path(fmt, message):
    grammar = compiled("xgrammar", fmt)
    assert isinstance(grammar, InvalidGrammarObject)
    assert re.search(message, grammar.message), grammar.message


def test_the_xgrammar_backend_serves_an_empty_regex_as_the_fsm_backend_does():
    """xgrammar refuses a regex format with an empty pattern ("must have a pattern field with a
    non-empty string"); it matches the empty string only, and the fsm backend serves it."""
    tok = load("bundled")
    fmt = T("<", {"type": "regex", "pattern": ""}, ">")
    for name in ("fsm", "xgrammar"):
        grammar = compiled(name, fmt)
        assert not isinstance(grammar, InvalidGrammarObject), grammar
        assert walk(grammar, tok, "<>") and not walk(grammar, tok, "<a>"), name


def test_the_xgrammar_backend_serves_grammar_and_token_formats():
    tok = load("bundled")
    grammar = compiled("xgrammar", T("<", {"type": "grammar", "grammar": 'root ::= "(" root ")" | ""'}, ">"))
    assert walk(grammar, tok, "<(())>") and not walk(grammar, tok, "<(()>")
    any_tokens = compiled("xgrammar", T("<", {"type": "any_tokens", "max_tokens": 2}, ">"))
    assert not isinstance(any_tokens, InvalidGrammarObject), any_tokens


# ------------------------------------------------------------------ the llguidance backend
@pytest.mark.parametrize("fmt", CASES, ids=lambda f: json.dumps(f)[:60])
def test_the_llguidance_backend_accepts_what_the_fsm_backend_accepts(fmt):
    tok = load("bundled")
    ours_, theirs = compiled("fsm", fmt), compiled("llguidance", fmt)
    assert not isinstance(theirs, InvalidGrammarObject), theirs
    for text in strings('ab<>"1', 3) if "json_schema" in json.dumps(fmt) else strings("ab<>", 4):
        assert walk(ours_, tok, text) == walk(theirs, tok, text), text


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(formats())
def test_random_formats_read_alike_on_the_fsm_and_llguidance_backends(fmt):
    ours_ = compiled("fsm", fmt)
    if isinstance(ours_, InvalidGrammarObject):
        return
    theirs = compiled("llguidance", fmt)
    assert not isinstance(theirs, InvalidGrammarObject), theirs
    tok = load("bundled")
    for text in strings("ab<>", 3):
        assert walk(ours_, tok, text) == walk(theirs, tok, text), text


def test_nested_lists_reach_llguidance_in_a_text_linear_in_the_format():
    """A separated list uses its tag twice (T (sep T)*): written out in place, 20 nested
    lists took 18 s and llguidance refused 10 ("too deeply nested")."""
    fmt = C("x")
    for _ in range(20):
        fmt = {"type": "tags_with_separator", "separator": ",", "tags": [T("<", fmt, ">")]}
    grammar = compiled("llguidance", fmt)
    assert not isinstance(grammar, InvalidGrammarObject), grammar
    tok = load("bundled")
    assert walk(grammar, tok, "<" * 20 + "x" + ">" * 20) and not walk(grammar, tok, "<" * 19 + "x" + ">" * 19)


def test_a_free_form_json_argument_nests_on_the_llguidance_backend_as_on_the_fsm_backend():
    """A tool whose parameters are {"type": "object"} (any JSON object): the llguidance
    backend built its JSON tree for Python's re (automaton "eager"), where any JSON value
    nests one level, so `{"a": {"b": 1}}` was refused there while the fsm backend and
    xgrammar take it (found by helper stag_attack)."""
    tok = load("bundled")
    fmt = T("<tool_call>", {"type": "json_schema", "json_schema": {"type": "object"}}, "</tool_call>")
    ours_, theirs = compiled("fsm", fmt), compiled("llguidance", fmt)
    for args in ('{"a": {"b": 1}}', '{"a": [1, [2, {"c": null}]]}', '{"a": 1}'):
        text = f"<tool_call>{args}</tool_call>"
        assert walk(ours_, tok, text) and walk(theirs, tok, text), args
    assert not walk(theirs, tok, '<tool_call>{"a": {"b": }}</tool_call>')


def test_the_llguidance_backend_serves_a_v2_tool_call_and_refuses_what_it_cannot_by_name():
    tok = load("bundled")
    grammar = compiled("llguidance", TOOL)
    for text, expected in TOOL_TEXTS.items():
        assert walk(grammar, tok, text) == expected, text
    refused = compiled("llguidance", {"type": "grammar", "grammar": 'root ::= "x" | "y" root'})
    assert "the 'llguidance' backend takes a grammar only when it is a regular expression" in refused.message
    regular = compiled("llguidance", {"type": "grammar", "grammar": 'root ::= ab "-" ab\nab ::= [ab]+'})
    assert walk(regular, tok, "ab-b") and not walk(regular, tok, "ab-")
    refused = compiled("llguidance", T("<", {"type": "token", "token": 3}, ">"))
    assert "the 'llguidance' backend does not serve the token-level format 'token'" in refused.message
