"""The xgrammar backend (backends/xgrammar_backend.py, library_children.py's compiles): what
the adapter hands xgrammar (regexes without repeated empty matches, GBNF as llama.cpp writes
it), its compiles in kept children, its jump search's limits, and its masks against the fsm
backend's where a stranger's fuzzing found them to differ. What every backend shares is in
test_backends.py; the helpers in grammar_backends.py.
"""

import json
import re

import jsonschema
import pytest
import torch
from grammar_backends import (
    OUTLINES_ARITHMETIC,
    PAD,
    S,
    _byte_token,
    accepts,
    along_text_beside_the_fsm,
    backends_fixture,
    byte_level_tokenizer,
    compiled,
    mask_row,
    walk_beside_the_fsm,
)
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from minisglang.backends.base import GrammarError, InvalidGrammarObject, get_backend_class
from minisglang.backends.forced_text import JUMP_MAX_FORCED_CHARS, forced_text_bound

backends = backends_fixture("fsm", "xgrammar")


# ------------------------------------------------------ what the adapter hands xgrammar
@pytest.mark.parametrize(
    "regex, repeats",
    [
        ("(?:[a-z]?)+!", True),
        ("(?:[a-z]?b?)*!", True),
        ("(?:a|b?)*", True),
        ("(\\d*)+x", True),
        ("x(?:y(?:[a-z]?){2,5})z", True),
        ("(?:[a-z]?){0,1}!", False),  # (at most once: nothing repeats)
        ("[a-z]*!", False),
        ("(?:ab?)+", False),
        ("(?:\\s*,)+", False),
        ("\\d{4}-\\d{2}", False),
    ],
)
def test_xgrammar_is_given_no_repeated_part_that_can_match_nothing(backends, tokenizer, regex, repeats):
    """A stranger's regex fuzzing: `(?:[a-z]?)+!` took xgrammar's mask from 6 ms at the first
    token to 230 ms at the 60th (one random regex's mask passed 2 minutes) on the thread every
    request shares; `[a-z]*!`, the same language, stays under 1 ms. So a regex, `pattern` or
    key pattern is handed over with each such part written without its empty match: the
    regex's masks along a text are the fsm backend's, and a string (or key) the pattern
    matches is written whole and valid by `jsonschema`."""
    from minisglang.backends.ignored_keywords import repeats_a_nullable_part
    from minisglang.backends.xgrammar_backend import xgrammar_regex

    assert repeats_a_nullable_part(regex) == repeats
    assert not repeats_a_nullable_part(xgrammar_regex(regex))
    text = next(t for t in ("abab!", "a!", "x", "xyabz", "ab", " , ,", "2024-12") if re.fullmatch(regex, t))
    lib, fsm = compiled(backends["xgrammar"], "regex", regex), compiled(backends["fsm"], "regex", regex)
    along_text_beside_the_fsm("xgrammar", lib, fsm, tokenizer, text)
    for schema, value in [
        ({"type": "string", "pattern": f"^(?:{regex})$"}, text),
        ({"type": "object", "patternProperties": {f"^(?:{regex})$": {"type": "integer"}}}, {text: 1}),
    ]:
        g = compiled(backends["xgrammar"], "json_schema", json.dumps(schema))
        assert not isinstance(g, InvalidGrammarObject), g.message
        for t in tokenizer.encode(json.dumps(value)):
            g.accept_token(t)
        assert mask_row(g, tokenizer.vocab_size + PAD)[tokenizer.eos_token_id]
        jsonschema.validate(value, schema)


def test_xgrammar_refuses_a_regex_whose_rewrite_would_grow_too_long(backends):
    """Without its empty match, a repeated run of n optional parts is n alternatives of up to n
    parts: past REWRITE_GROWTH times the regex's length the regex is refused by name."""
    regex = "(?:" + "".join(f"{c}?" for c in "abcdefghijklmnopqrstuvwxyz0123") + ")*!"
    g = compiled(backends["xgrammar"], "regex", regex)
    assert isinstance(g, InvalidGrammarObject) and "can match the empty string" in g.message, g


def test_xgrammar_names_its_own_mask_when_its_matcher_refuses_what_it_allowed(backends, tokenizer):
    """Where xgrammar's mask and matcher disagree (0.2.9 did on `[A-Z]+\\d\\d`, a stranger's
    fuzzing, until the adapter wrote its repetitions another way: the test below), a request
    that samples a token the mask allowed and the matcher refuses is aborted naming the
    library's fault, not as a token the grammar forbids; a token the mask left out is refused
    as before. The disagreement is made here by a matcher that refuses one allowed token."""
    width = tokenizer.vocab_size + PAD
    allowed = mask_row(compiled(backends["xgrammar"], "regex", "[A-Z]+[0-9]"), width).nonzero().flatten().tolist()
    refused_anyway = next(t for t in allowed if t != tokenizer.eos_token_id)

    class Disagreeing:
        def __init__(self, matcher):
            self.matcher = matcher

        def accept_token(self, token_id: int) -> bool:
            return token_id != refused_anyway and self.matcher.accept_token(token_id)

        def __getattr__(self, name):
            return getattr(self.matcher, name)

    for token_id, named in ((refused_anyway, True), (_byte_token(tokenizer, ord("!")), False)):
        g = compiled(backends["xgrammar"], "regex", "[A-Z]+[0-9]")
        g.matcher = Disagreeing(g.matcher)
        with pytest.raises(GrammarError) as refusal:
            g.accept_token(token_id)
        assert ("xgrammar's own mask allowed it" in str(refusal.value)) == named, str(refusal.value)


def test_an_xgrammar_compile_past_compile_timeout_is_stopped_and_frees_its_thread(tokenizer):
    """A 3 KB schema of 60 required strings of maxLength 1000 takes xgrammar over 30 s (a
    stranger's: small text is no fast compile, and at 65k a 151-character regex took 5 s):
    its child is killed at compile_timeout, and the next grammar compiles."""
    schema = {
        "type": "object",
        "properties": {f"a{i}": {"type": "string", "maxLength": 1000} for i in range(60)},
        "required": [f"a{i}" for i in range(60)],
    }
    backend = get_backend_class("xgrammar")(tokenizer, tokenizer.vocab_size + PAD, compile_timeout=0.5, threads=1)
    try:
        g = compiled(backend, "json_schema", json.dumps(schema))
        assert isinstance(g, InvalidGrammarObject)
        assert "xgrammar's compile_json_schema took longer than 0.5 s" in g.message, g.message
        backend.compile_timeout = 60  # (a new child may import xgrammar itself: a second)
        assert not compiled(backend, "regex", "[a-z]+x").is_terminated()  # the thread is free
    finally:
        backend.shutdown()


def test_an_xgrammar_grammar_from_its_child_masks_as_one_compiled_here(tokenizer):
    """A grammar compiles in a child and comes back as JSON, or, too big to send
    (library_children.XGRAMMAR_SEND_BYTES), is compiled again here: the masks are those of the
    same grammar compiled on the thread, along a valid output, and its size is counted."""
    enum = {"enum": [f"value-{i}-x" for i in range(3000)]}
    wide = {
        "anyOf": [
            {
                "type": "object",
                "properties": {f"k{j}": {"anyOf": [{"type": "string"}, {"type": "integer"}]} for j in range(40)},
            }
            for _ in range(12)
        ]
    }
    cases = [(enum, '"value-2999-x"'), (wide, '{"k0": 1, "k3": "x"}')]
    here = get_backend_class("xgrammar")(tokenizer, tokenizer.vocab_size + PAD, compile_in="thread")
    there = get_backend_class("xgrammar")(tokenizer, tokenizer.vocab_size + PAD)
    try:
        for schema, output in cases:
            text = json.dumps(schema)
            a, b = compiled(here, "json_schema", text), compiled(there, "json_schema", text)
            assert a.nbytes() == b.nbytes() > 0
            for token in tokenizer.encode(output):
                assert torch.equal(mask_row(a, tokenizer.vocab_size + PAD), mask_row(b, tokenizer.vocab_size + PAD))
                a.accept_token(token)
                b.accept_token(token)
    finally:
        here.shutdown()
        there.shutdown()


def test_xgrammar_reads_an_integers_bounds_with_a_fraction_as_whole_bounds(backends, tokenizer):
    """xgrammar refused `minimum: 1.5` on an integer ("must be a whole number", a stranger's
    fuzzer): the bounds are rounded inwards, exactly the integers the schema allows."""
    schema = {"type": "integer", "minimum": 1.5, "exclusiveMaximum": 4.5}
    width = tokenizer.vocab_size + PAD
    for text, allowed in (("1", False), ("2", True), ("4", True), ("5", False)):
        g = compiled(backends["xgrammar"], "json_schema", json.dumps(schema))
        assert not isinstance(g, InvalidGrammarObject), g.message
        ids = tokenizer.encode(text)
        assert len(ids) == 1 and bool(mask_row(g, width)[ids[0]]) == allowed, text


def test_xgrammar_serves_without_jumps_where_its_search_would_grow(backends):
    """xgrammar's jump-forward search writes out every forced character at a cost growing
    with their square: a 200-byte schema of 1,000,000 forced nulls took the engine past 22 GB
    (a stranger's fuzzer), and a recursion of required members never returned. Such schemas
    are served, without jumps; a small one still jumps."""
    big = {"type": "array", "minItems": 2_000, "items": {"type": "null"}}  # (100,000 ran out of memory)
    loop = {"$defs": {"n": {"type": "object", "properties": {"c": {"$ref": "#/$defs/n"}}, "required": ["c"]}}}
    small = {"type": "array", "minItems": 3, "items": {"type": "null"}}
    tokenizer = backends["xgrammar"].tokenizer
    for schema in (big, {**loop, "$ref": "#/$defs/n"}):
        g = compiled(backends["xgrammar"], "json_schema", json.dumps(schema))
        assert not isinstance(g, InvalidGrammarObject) and g.jump_forward(tokenizer) is None
    g = compiled(backends["xgrammar"], "json_schema", json.dumps(small))
    assert g.jump_forward(tokenizer)[0].startswith(b"[null, null, null")
    tag = {"structures": [{"begin": "<a>", "schema": big, "end": "</a>"}], "triggers": ["<a>"], "at_least_one": True}
    g = compiled(backends["xgrammar"], "structural_tag", json.dumps(tag))
    assert not isinstance(g, InvalidGrammarObject) and g.jump_forward(tokenizer) is None  # a tool's schema too


def test_xgrammar_serves_without_jumps_where_the_forced_text_could_be_long(backends):
    """Not only arrays: 6,000 required properties of type null (an 80 KB forced object) took
    0.2-0.6 s a jump search, each holding ~480 MB while its matcher lived, and 32 choices of
    10,000 got the server killed for memory (a stranger's stall hunt); so did minItems nested
    under minItems, each under the array limit. Where the forced text's bound
    (forced_text_bound: the schema's own text, copied per minItems, a pattern's shortest match,
    a tag's begin) passes JUMP_MAX_FORCED_CHARS, no search is made; a few such keys still jump."""
    tokenizer = backends["xgrammar"].tokenizer

    def nulls(n: int) -> dict:
        return {
            "type": "object",
            "properties": {f"k{i}": {"type": "null"} for i in range(n)},
            "required": [f"k{i}" for i in range(n)],
        }

    nested = {"type": "array", "minItems": 100, "items": {"type": "array", "minItems": 100, "items": {"type": "null"}}}
    # (the same under a property: copies multiply at any depth)
    under = {"type": "object", "properties": {"a": nested}, "required": ["a"]}
    counted = {"type": "string", "pattern": "^(?:abcdefghij){2000}$"}
    for schema in (nulls(1_000), nested, under, counted):
        assert forced_text_bound(schema) > JUMP_MAX_FORCED_CHARS, schema
        g = compiled(backends["xgrammar"], "json_schema", json.dumps(schema))
        assert not isinstance(g, InvalidGrammarObject) and g.jump_forward(tokenizer) is None
    g = compiled(backends["xgrammar"], "json_schema", json.dumps(nulls(3)))
    assert g.jump_forward(tokenizer)[0].startswith(b'{"k0": null, "k1": null, "k2": null')
    # a regex's shortest match counts (the same search); a short one still jumps
    g = compiled(backends["xgrammar"], "regex", "(?:abcdefghij){2000}")
    assert not isinstance(g, InvalidGrammarObject) and g.jump_forward(tokenizer) is None
    assert compiled(backends["xgrammar"], "regex", "(?:abcdefghij){3}").jump_forward(tokenizer)[0] == b"abcdefghij" * 3
    # a tag's own text counts: a begin past the bound, around a small schema
    begin = "<a>" + "x" * JUMP_MAX_FORCED_CHARS
    tag = {
        "structures": [{"begin": begin, "schema": nulls(3), "end": "</a>"}],
        "triggers": ["<a>"],
        "at_least_one": True,
    }
    g = compiled(backends["xgrammar"], "structural_tag", json.dumps(tag))
    assert not isinstance(g, InvalidGrammarObject) and g.jump_forward(tokenizer) is None


def test_xgrammar_writes_an_optional_mark_as_a_count():
    from minisglang.backends.xgrammar_backend import optional_as_count

    assert optional_as_count(r"(?:a\.[0-9]+)?b?[?]\?") == r"(?:a\.[0-9]+){0,1}b{0,1}[?]\?"
    assert optional_as_count("[]?]?") == "[]?]{0,1}"


@pytest.mark.parametrize(
    "text, lark",
    [
        (OUTLINES_ARITHMETIC, True),
        ('start: "a" WS\n%import common.WS\n', True),
        ('root ::= x\nx ::= "a" (', False),  # GBNF with a mistake: no word about Lark
    ],
)
def test_xgrammar_says_when_a_grammar_it_refuses_is_lark(backends, text, lark):
    """Outlines' and vLLM's grammars are Lark: xgrammar refused them with "Unexpected
    character: ':'" alone; the refusal now says what the text is and which backend reads it."""
    g = compiled(backends["xgrammar"], "ebnf", text)
    assert isinstance(g, InvalidGrammarObject)
    assert ("looks like a Lark grammar" in g.message) == lark, g.message
    assert ("'llguidance' grammar backend reads both" in g.message) == lark


# ------------------------------------------------------------ a stranger's vocabularies
def test_xgrammar_never_allows_a_token_holding_a_surrogates_bytes(tmp_path):
    """A vocabulary with tokens `ED A0 80` (U+D800's bytes), `ED A0` and `a ED BF BF`: xgrammar
    reads `.` and `[^"]` as every code point, surrogates included, and allowed all three at
    the start of `.+`; the guard checked only the byte after a token ending in ED. Such a
    token is no UTF-8 wherever it goes, so no row allows it; `a` and `é` stay allowed."""
    bad = [b"\xed\xa0\x80", b"\xed\xa0", b"a\xed\xbf\xbf"]
    tok = byte_level_tokenizer(tmp_path, [*bad, "é".encode(), b"\xed\x9f\xbf"])
    ids = [tok.token_bytes.index(data) for data in bad]
    width = tok.vocab_size + 9
    backend = get_backend_class("xgrammar")(tok, width, compile_in="thread")
    try:
        for regex in (".+", '[^"]*"', "(.|\n)+"):
            g = backend.compile("regex", regex)
            row = mask_row(g, width)
            assert not row[ids].any(), (regex, [tok.token_bytes[i] for i in ids if row[i]])
            assert row[ord("a")] and row[tok.token_bytes.index("é".encode())]
            assert row[tok.token_bytes.index(b"\xed\x9f\xbf")]  # U+D7FF: ED, then a second byte it allows
            g.accept_token(ord("a"))  # (a row after a token not ending in a lead: the same)
            assert not mask_row(g, width)[ids].any()
    finally:
        backend.shutdown()


# ------------------------------------------------------ masks against the fsm backend's
@pytest.mark.parametrize(
    ("regex", "before"),
    [
        (r"[a-z]{2}[\u0400-\u04ff]x", ""),
        (r"[a-z]{1,3}[c-я]", ""),
        (r".{2}[\u0400-\u04ff]x", ""),
        (r":[^b]{1,3}[c-中][.-z]*", ":"),
        (r":[^b]?[^b]?[c-中][.-z]*", ":"),
        (r"[A-Z]+\d\d", ""),
        (r"[A-Z]{1,20}[\u0660-\u0661]x", ""),
        (r"(?:[A-Z]+|b)[\u0660-\u0661]x", ""),
        (r"[A-Z]{20}[\u0660-\u0661]x", "ABCDEFGHIJKLMNOPQRS"),
        (r'"+\w\w', '"'),
        (r'"*\w\w', '"'),
        (r":+\d\d", ":"),
        (r"(?:\{|AB\})?\d\d", ""),  # (a stranger's differential fuzzing: `{"` allowed)
        (r"(?:\{|AB\}|)\d\d", ""),
        # (past 16 copies, `X{17}X` was wrong too: `function` forbidden; a stranger's fuzzing)
        (r"[c-я]{18}", "temperhiki"),
        (r"[c-я]{18,}!", "temperhiki"),
        (r"[c-я]{40}[\u0400-\u04ff]x", "temperhikitemperhikitemperhiki"),
    ],
)
def test_xgrammar_masks_a_repeated_class_before_multibyte_characters_as_the_fsm_does(
    backends, tokenizer, regex, before
):
    """xgrammar's mask for a repetition of a class followed by a class of multi-byte
    characters is wrong where a token crosses the repetition's end: `[a-z]{2}[\\u0400-\\u04ff]x`
    allowed 548 tokens such as `acc` that its matcher then refused (the request aborted), and
    `[a-z]{1,3}[c-я]` forbade 383 valid ones such as `able`; `[A-Z]+\\d\\d` allowed `He`,
    `"*\\w\\w` after `"` allowed `":` (`\\w` and `\\d` hold multi-byte digits and letters), and
    `X{20}`, `X{1,20}` did the same at their ends. The adapter writes each repetition of one
    class with its last required copy alone and the rest counted from 0 (`XX{0,}`, `X{19}X`:
    portable_regex's spell_counts_up_to), which xgrammar masks right; `X?` as `X{0,1}` (after
    ":" in `:[^b]?[^b]?[c-中]`, " true" was forbidden), for a group too (`(?:\\{|AB\\})?\\d\\d`
    allowed `{"`), and an empty alternative the same way."""
    width = tokenizer.vocab_size + PAD
    rows = []
    for name in ("xgrammar", "fsm"):
        g = compiled(backends[name], "regex", regex)
        for t in tokenizer.encode(before):
            g.accept_token(t)
        rows.append(mask_row(g, width))
    differ = (rows[0] != rows[1]).nonzero().flatten().tolist()
    assert not differ, [(tokenizer.token_bytes[t], bool(rows[0][t])) for t in differ[:5]]


_REPEATED = st.sampled_from(['"', ":", "[A-Z]", "[a-z0-9]", "\\d", "é"])
_AFTER = st.sampled_from(["\\d", "\\w", "[\\u0660-\\u0669]", "[\\u0400-\\u04ff]", "x"])


@st.composite
def _repeated_then_classes(draw) -> str:
    """A repetition of a class (its end within a few tokens: low <= 3), then two classes."""
    low = draw(st.integers(0, 3))
    high = draw(st.one_of(st.none(), st.integers(max(low, 1), low + 3)))
    bounds = (
        draw(st.sampled_from(["+", "*", "?"])) if draw(st.booleans()) else f"{{{low},{'' if high is None else high}}}"
    )
    return draw(_REPEATED) + bounds + draw(_AFTER) + draw(_AFTER)


@settings(max_examples=12, deadline=None)
@given(regex=_repeated_then_classes(), data=st.data())
def test_xgrammars_masks_over_repeated_classes_are_the_fsm_backends(backends, tokenizer, regex, data):
    """The property behind the cases above: along a random walk, xgrammar's mask over
    repetitions of a class beside classes of multi-byte characters is the fsm backend's."""
    lib, fsm = compiled(backends["xgrammar"], "regex", regex), compiled(backends["fsm"], "regex", regex)
    assume(not isinstance(lib, InvalidGrammarObject))  # (a regex too long for xgrammar's compile)
    walk_beside_the_fsm("xgrammar", lib, fsm, tokenizer, data.draw(st.integers(0, 6), label="steps"), data)


# (schema, a string it takes, as JSON text): xgrammar 0.2.9 reads a JSON pattern it cannot
# inline with its `json_string` reader, which let no `\"`, `\\` or `\n` escape into an optional
# part or an alternation; `^(?:b\n)?$` after `"b` allowed nothing (a stranger's fuzzing), and a
# string with minLength/maxLength (written as a pattern) never held a quote or a newline
JSON_TEXT_CASES = [
    ({**S, "pattern": "^(?:b\\n)?$"}, '"b\\n"'),
    ({**S, "pattern": "^[^a]*$"}, '"x\\"y\\\\z\\n"'),
    ({**S, "pattern": "^a.c$"}, '"a\\"c"'),
    ({**S, "pattern": "^(?:x|\\\\)+$"}, '"x\\\\x"'),
    ({**S, "pattern": '^(?:"|y){2}$'}, '"\\"y"'),
    ({**S, "maxLength": 4}, '"a\\"\\né"'),
    ({**S, "minLength": 2, "maxLength": 20}, '"' + "é" * 18 + '\\n中"'),
    ({**S, "maxLength": 40}, '"' + "temperhiki" * 3 + "я" * 9 + '\\""'),
]


@pytest.mark.parametrize("schema, text", JSON_TEXT_CASES)
def test_xgrammar_masks_json_escapes_in_patterns_and_lengths_as_the_fsm_does(backends, tokenizer, schema, text):
    """Along a string its schema takes, xgrammar's mask is the fsm backend's (the adapter
    hands a pattern over as a plain regex over the string's JSON text: library_children's
    `xgrammar_compiled`; and lengths as the fsm backend counts them)."""
    jsonschema.validate(json.loads(text), schema)
    lib = compiled(backends["xgrammar"], "json_schema", json.dumps(schema))
    fsm = compiled(backends["fsm"], "json_schema", json.dumps(schema))
    along_text_beside_the_fsm("xgrammar", lib, fsm, tokenizer, text)


@pytest.mark.parametrize(
    "value, text",
    [
        ({"const": "éa"}, '"éa"'),
        ({"enum": ["décembre", "mars"]}, '"décembre"'),
        ({"const": "ÿ1\u00a0b"}, '"ÿ1\u00a0b"'),
    ],
)
def test_xgrammar_reads_latin1_literals_back_as_they_were(backends, tokenizer, value, text):
    """Beside a string read as a plain regex (a length here) the grammar is printed and read
    back; xgrammar prints U+007F-U+00FF as `\\xHH` and reads every hex digit after `\\x`, so
    a const "éa" came back as U+0E9A: the valid text refused, `"ບ"` written (a stranger's
    fuzzing). library_children.plain_regexes writes them `\\u00HH`."""
    schema = {"type": "object", "properties": {"s": {**S, "maxLength": 5}, "m": value}, "required": ["s", "m"]}
    good = '{"s": "x", "m": ' + text + "}"
    jsonschema.validate(json.loads(good), schema)
    assert accepts(backends["xgrammar"], tokenizer, json.dumps(schema), good, kind="json_schema")
    bad = '{"s": "x", "m": "' + chr(0x0E9A) + '"}'
    assert not accepts(backends["xgrammar"], tokenizer, json.dumps(schema), bad, kind="json_schema")


_PATTERN_PART = st.sampled_from(["a", ".", "[^a]", '"', "\\\\", "\\n", '[\\\\"]', "é", "[x-z]"])


@st.composite
def _escaping_pattern(draw) -> str:
    """A pattern of two or three parts, each maybe optional, repeated or one of two."""
    parts: list[str] = []
    for _ in range(draw(st.integers(2, 3))):
        part = draw(_PATTERN_PART)
        shape = draw(st.sampled_from(["{}", "(?:{})?", "(?:{})*", "(?:{}|{})"]))
        parts.append(shape.format(part, draw(_PATTERN_PART)) if shape.count("{}") == 2 else shape.format(part))
    return "^" + "".join(parts) + "$"


@settings(max_examples=10, deadline=None)
@given(pattern=_escaping_pattern(), data=st.data())
def test_xgrammars_masks_over_json_escapes_in_patterns_are_the_fsm_backends(backends, tokenizer, pattern, data):
    """The property behind the cases above: along a random walk, xgrammar's mask of a string
    whose pattern holds quotes, backslashes, newlines, `.` or a negated class in optional,
    repeated or alternative parts (or that has a length) is the fsm backend's."""
    lengths = data.draw(st.sampled_from([{}, {"maxLength": 3}, {"minLength": 1, "maxLength": 18}]), label="lengths")
    schema = json.dumps({"type": "string", **lengths} if lengths else {"type": "string", "pattern": pattern})
    lib, fsm = compiled(backends["xgrammar"], "json_schema", schema), compiled(backends["fsm"], "json_schema", schema)
    walk_beside_the_fsm("xgrammar", lib, fsm, tokenizer, data.draw(st.integers(0, 6), label="steps"), data)


# ---------------------------------------------------------- GBNF as llama.cpp writes it
# llama.cpp's grammars/json.gbnf, as it is written there: `ws ::= | " " | ...` starts with an
# empty alternative.
LLAMA_CPP_JSON_GBNF = r"""root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws

# Optional space: by convention, applied in this grammar after literal chars when allowed
ws ::= | " " | "\n" [ \t]{0,20}
"""


@pytest.mark.parametrize(
    "text, spelled",
    [
        ('ws ::= | " "', 'ws ::= "" | " "'),
        ('r ::= "a" ( | "x") "b"', 'r ::= "a" ( "" | "x") "b"'),
        ('r ::= ("a" | ) x', 'r ::= ("a" | "" ) x'),
        ('r ::= ("a" || "b")', 'r ::= ("a" |"" | "b")'),
        ('r ::= "<" . ">" "."', 'r ::= "<" [\\u0000-\\U0010FFFF] ">" "."'),
        ('r ::= "|(" [|(] "\\"|" # ( |\nx ::= "a" | "b"', 'r ::= "|(" [|(] "\\"|" # ( |\nx ::= "a" | "b"'),
        ('r ::= "\\[x\\]" [\\[\\]] "\\\\[" "\\\\\\]"', 'r ::= "[x]" [\\[\\]] "\\\\[" "\\\\]"'),
        ('r ::=\nx ::= r "a"', 'r ::="" \nx ::= r "a"'),
        ('x ::= r "a"\nr ::= # nothing\n', 'x ::= r "a"\nr ::= "" # nothing\n'),
        ('r ::= (\n  "a" |\n)', 'r ::= (\n  "a" |\n"" )'),
        ("x ::= r\nr ::=", 'x ::= r\nr ::=""'),
        ('r ::= "a" | ', 'r ::= "a" | ""'),  # (a stranger's differential fuzzing)
        ('r ::= "a" |\n', 'r ::= "a" |\n""'),
    ],
)
def test_empty_gbnf_alternatives_and_dots_are_spelled_for_xgrammar_and_nothing_else_changes(text, spelled):
    from minisglang.backends.xgrammar_backend import gbnf_for_xgrammar

    assert gbnf_for_xgrammar(text) == spelled


@pytest.mark.parametrize(
    "text", ["# A grammar for Japanese\nroot ::= [ぁ-ゟ]+\n", '\nroot ::= "a"\n', '  # c\n\nroot ::= "a"']
)
def test_a_gbnf_grammar_opening_with_a_comment_or_a_blank_line_is_spelled_as_it_is(text):
    """A comment or a blank line before the first rule (llama.cpp's japanese.gbnf, english.gbnf,
    json.gbnf open with a comment; a triple-quoted grammar with a newline) was taken for the end
    of an empty rule: `""` was written before it and xgrammar refused the grammar ("Expect rule
    name", line 1, column 1)."""
    import xgrammar as xgr

    from minisglang.backends.xgrammar_backend import gbnf_for_xgrammar

    assert gbnf_for_xgrammar(text) == text
    xgr.Grammar.from_ebnf(gbnf_for_xgrammar(text))  # (raised RuntimeError)


def test_a_gbnf_hex_escape_followed_by_a_hex_digit_means_two_characters_to_xgrammar_too():
    """llama.cpp reads exactly two hex digits after `\\x` (so does the fsm backend); xgrammar reads
    every hex digit that follows: `"\\x41B"` was U+041B ("Л") there instead of "AB", and
    `[\\x41-\\x5ab]` took "c"."""
    import xgrammar as xgr

    from minisglang.backends.xgrammar_backend import gbnf_for_xgrammar

    info = xgr.TokenizerInfo([])
    for grammar, text, ok in [
        ('root ::= "\\x41B"', "AB", True),
        ('root ::= "\\x41B"', "\u041b", False),
        ("root ::= [\\x41-\\x5ab]", "b", True),
        ("root ::= [\\x41-\\x5ab]", "c", False),
        ('root ::= "\\x4"', "\x04", True),  # (one digit: left to xgrammar as it was)
    ]:
        compiled = xgr.GrammarCompiler(info, cache_enabled=False).compile_grammar(gbnf_for_xgrammar(grammar))
        matcher = xgr.GrammarMatcher(compiled, terminate_without_stop_token=True)
        assert (matcher.accept_string(text) and matcher.is_terminated()) == ok, (grammar, text)


def test_bracket_escapes_in_gbnf_strings_are_served_by_xgrammar(backends, tokenizer):
    """llama.cpp reads `\\[` and `\\]` in a string as the brackets; xgrammar refused the
    grammar ("Invalid escape", a grammar_ports stranger's find)."""
    grammar = compiled(backends["xgrammar"], "ebnf", 'root ::= "\\[" [a-z]+ "\\]"')
    assert not isinstance(grammar, InvalidGrammarObject), getattr(grammar, "message", "")
    width = tokenizer.vocab_size + PAD
    for t in tokenizer.encode("[ab]"):
        assert mask_row(grammar, width)[t]
        grammar.accept_token(t)
    assert mask_row(grammar, width)[tokenizer.eos_token_id]


def test_llama_cpps_own_json_gbnf_is_served_by_xgrammar(backends, tokenizer):
    """xgrammar refused llama.cpp's json.gbnf ("Expect element": its `ws` starts with an empty
    alternative, a grammar_ports stranger's find); written `""` it is the same language."""
    width = tokenizer.vocab_size + PAD
    for text, ok in [('{"a": [1, -2.5e3, "x\\n"], "b" : null}', True), ('{"a":\n  true}', True), ("{a}", False)]:
        grammar = compiled(backends["xgrammar"], "ebnf", LLAMA_CPP_JSON_GBNF)
        assert not isinstance(grammar, InvalidGrammarObject), getattr(grammar, "message", "")
        accepted = True
        for t in tokenizer.encode(text):
            if not mask_row(grammar, width)[t]:
                accepted = False
                break
            grammar.accept_token(t)
        assert (accepted and bool(mask_row(grammar, width)[tokenizer.eos_token_id])) == ok, text
