"""Structural tags (stage s6): the spec's validation, the regex against a direct matcher of
the semantics (exhaustively over short strings), token masks on real vocabularies, and
generation through the Engine whose tool arguments validate under their schemas.
"""

from __future__ import annotations

import functools
import itertools
import json
import random
import re

import jsonschema
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from real_tokenizers import load

import minisglang as sgl
from minisglang.backends.base import GrammarError, InvalidGrammarObject, get_backend_class
from minisglang.backends.llguidance_backend import lexer_conflict, structural_tag_lark
from minisglang.constrained.json_schema import build_regex_from_schema
from minisglang.constrained.lazy_byte_dfa import LazyByteDFA
from minisglang.constrained.lazy_regex import RegexPool
from minisglang.constrained.lazy_regex_parser import parse_regex
from minisglang.constrained.lazy_token_fsm import compile_lazy_token_fsm
from minisglang.constrained.structural_tag import (
    FreeText,
    FreeTextByDifference,
    StructuralTag,
    StructuralTagError,
    TagLimits,
    parse_structural_tag,
    trigger_states,
)
from minisglang.core import SamplingParams
from minisglang.function_call import parse_tool_calls

INTEGER = {"type": "integer", "minimum": 0, "maximum": 99}


def spec_of(structures, triggers, **flags) -> StructuralTag:
    return parse_structural_tag(
        {"structures": [{"begin": b, "schema": s, "end": e} for b, s, e in structures], "triggers": triggers, **flags}
    )


@functools.cache
def _schema_regex(schema_json: str) -> str:
    return build_regex_from_schema(schema_json)


def schema_regex(schema) -> str:
    return _schema_regex(json.dumps(schema))


# ------------------------------------------------------------------ the semantics, directly
# The oracles below run once per short string (about 10^5 a test), and serialising each
# spec's schemas again for every string (json.dumps, for the functools caches' keys) was half
# of this file's time: each spec's compiled regexes are kept beside the spec itself (held
# here, so that its id is not reused while its entry stands).
_PER_SPEC: dict[tuple[int, str], tuple[StructuralTag, object]] = {}


def _per_spec(spec: StructuralTag, what: str, make):
    held = _PER_SPEC.get((id(spec), what))
    if held is None or held[0] is not spec:
        held = _PER_SPEC[(id(spec), what)] = (spec, make())
    return held[1]


def _bodies(spec: StructuralTag) -> list[re.Pattern]:
    return _per_spec(spec, "bodies", lambda: _compiled_bodies(tuple(json.dumps(s.schema) for s in spec.structures)))


@functools.cache
def _compiled_bodies(schemas: tuple[str, ...]) -> list[re.Pattern]:
    return [re.compile(_schema_regex(schema)) for schema in schemas]


def tag_ends(spec: StructuralTag, bodies: list[re.Pattern], text: str, start: int, k: int) -> list[int]:
    """Where a tag of structure k that starts at `start` may end: its begin, a body its
    schema's regex matches, its end."""
    s = spec.structures[k]
    if not text.startswith(s.begin, start):
        return []
    body = start + len(s.begin)
    return [
        stop + len(s.end)
        for stop in range(body, len(text) + 1)
        if bodies[k].fullmatch(text[body:stop]) and text.startswith(s.end, stop)
    ]


def reference_accepts(spec: StructuralTag, text: str) -> bool:
    """The module doc's semantics, written as a scan (no regex of the whole): free text up to
    the first trigger; there one of its begins, a body the schema's regex matches, the end."""
    bodies = _bodies(spec)

    def free_from(pos: int, tags: int) -> bool:
        if spec.stop_after_first and tags:
            return pos == len(text)
        found = [(text.find(t, pos), t) for t in spec.triggers if text.find(t, pos) >= 0]
        if not found:  # free text to the end of the output
            return not (spec.at_least_one and tags == 0)
        start, trigger = min(found)
        if spec.at_least_one and tags == 0 and start != pos:
            return False  # xgrammar's rule: the output starts with the first tag
        return any(tag_at(start, k, tags) for k, s in enumerate(spec.structures) if s.begin.startswith(trigger))

    def tag_at(start: int, k: int, tags: int) -> bool:
        return any(free_from(end, tags + 1) for end in tag_ends(spec, bodies, text, start, k))

    return free_from(0, 0)


FLAGS = [dict(at_least_one=a, stop_after_first=b) for a in (False, True) for b in (False, True)]
# (structures, triggers, alphabet, longest string): triggers that overlap themselves ("aab"
# after "aa"), two triggers sharing a prefix, two that overlap each other ("ab", "ba").
CASES = [
    ([("<a", INTEGER, ">")], ["<a"], "<a>1x", 7),
    ([("aab", INTEGER, "b")], ["aab"], "ab1", 9),
    ([("<a", INTEGER, ">"), ("<b=", INTEGER, "=")], ["<a", "<b"], "<ab=1>", 6),
    ([("ab", INTEGER, ""), ("ba", INTEGER, "a"), ("ab1", INTEGER, "b")], ["ab", "ba"], "ab1", 8),
]
# Two begins sharing a trigger, an end and a schema (one group in the regex: <a(|b)INT>), a
# third with another end: the regex's grouping only (the backend tests' texts take longer).
GROUPED_CASES = [([("<a", INTEGER, ">"), ("<ab", INTEGER, ">"), ("<a", INTEGER, "b")], ["<a"], "<ab>1", 7)]


@pytest.mark.parametrize("flags", FLAGS, ids=lambda f: "-".join(k for k, v in f.items() if v) or "plain")
@pytest.mark.parametrize("structures, triggers, alphabet, longest", CASES + GROUPED_CASES, ids=lambda x: None)
def test_regex_equals_the_semantics_on_every_short_string(structures, triggers, alphabet, longest, flags):
    spec = spec_of(structures, triggers, **flags)
    whole = re.compile(spec.to_regex(schema_regex))  # the plain form (state elimination)
    pool = RegexPool()  # our automaton reads the form written for it (differences)
    dfa = LazyByteDFA(parse_regex(spec.to_regex(schema_regex, automaton="lazy"), pool, members=True), pool)
    accepted = 0
    for n in range(longest + 1):
        for chars in itertools.product(alphabet, repeat=n):
            text = "".join(chars)
            expected = reference_accepts(spec, text)
            assert bool(whole.fullmatch(text)) == expected, text
            if n <= longest - 2 or expected:
                assert dfa.matches(text.encode()) == expected, text
            accepted += expected
    assert accepted > 0


def test_structures_sharing_a_trigger_an_end_and_a_schema_compile_it_once():
    """5,000 tools of one schema wrote its regex 5,000 times (twice under at_least_one);
    grouped, each distinct (trigger, end, schema) is compiled once."""
    asked: list[str] = []

    def counting(schema):
        asked.append(json.dumps(schema))
        return schema_regex(schema)

    structures = [(f"<t{i}>", INTEGER, "</t>") for i in range(50)] + [("<t>", True, "</t>"), ("<u>", INTEGER, "!")]
    spec_of(structures, ["<"], at_least_one=True).to_regex(counting)
    assert sorted(asked) == sorted([json.dumps(INTEGER), "true", json.dumps(INTEGER)])


def reference_with_content(spec: StructuralTag, text: str) -> bool:
    """content_schema's semantics as a scan: a message (its schema's regex matches the whole
    text, which holds no trigger; not under at_least_one), or tags back to back to the end
    (one only under stop_after_first)."""
    message = _per_spec(spec, "message", lambda: re.compile(schema_regex(spec.content_schema)))
    if not spec.at_least_one and message.fullmatch(text) and not any(t in text for t in spec.triggers):
        return True
    bodies = _bodies(spec)

    def tags_from(pos: int, tags: int) -> bool:
        if pos == len(text):
            return tags > 0
        if spec.stop_after_first and tags:
            return False
        return any(
            tags_from(end, tags + 1)
            for k in range(len(spec.structures))
            for end in tag_ends(spec, bodies, text, pos, k)
        )

    return tags_from(0, 0)


# (structures, triggers, alphabet, longest, content schema): a message that may hold a trigger.
CONTENT_CASES = [
    (*CASES[0], INTEGER),
    ([("<a", INTEGER, ">")], ["<a"], '"<a>1', 6, {"type": "string", "maxLength": 3}),
    (*CASES[2][:2], '<ab=1>"', 6, {"type": "string"}),
]


@pytest.mark.parametrize("flags", FLAGS, ids=lambda f: "-".join(k for k, v in f.items() if v) or "plain")
@pytest.mark.parametrize("structures, triggers, alphabet, longest, content", CONTENT_CASES, ids=lambda x: None)
def test_a_content_schema_is_a_message_without_triggers_or_tags_only(
    structures, triggers, alphabet, longest, content, flags
):
    """OpenAI's response_format beside tools: the output is a message in the format (no
    trigger inside it: the parser would cut it there) or calls only; the lazy automaton's
    regex equals that on every short string."""
    spec = spec_of(structures, triggers, **flags, content_schema=content)
    match = lazy_matcher(spec.to_regex(schema_regex, automaton="lazy"))
    accepted = {True: 0, False: 0}
    for n in range(longest + 1):
        for chars in itertools.product(alphabet, repeat=n):
            text = "".join(chars)
            expected = reference_with_content(spec, text)
            assert match(text) == expected, text
            accepted[expected] += 1
    assert accepted[True] >= 2  # (a message or two, and tags)
    with pytest.raises(StructuralTagError, match="content_schema needs the lazy automaton"):
        spec.to_regex(schema_regex)
    assert json.loads(spec.to_json())["content_schema"] == content
    with pytest.raises(StructuralTagError, match="content_schema must be a JSON Schema"):
        spec_of(structures, triggers, content_schema=[])


# ------------------------------------------------------------------ free text for the lazy automaton
# (triggers, alphabet, longest string): those of tests/test_exercises_s6.py (a trigger that
# overlaps itself, two sharing a prefix, two overlapping each other, "abab", "bd" ending
# inside "abc"'s prefix), one whose head matters ("xab" ends inside "abc": "x" is a head
# of "abc"), and CJK triggers (three bytes a character).
TRIGGER_SETS = [
    (("<t>",), "<t>x", 7),
    (("aab",), "ab", 10),
    (("<a", "<b"), "<abx", 7),
    (("ab", "ba"), "abc", 8),
    (("abab",), "ab", 11),
    (("abc", "bd"), "abcd", 7),
    (("xab", "abc"), "xabc", 7),
    (("工具", "调用"), "工具调x", 6),
]


def first_trigger_end(text: str, triggers) -> int | None:
    """Where the first trigger in `text` ends (the earliest end), or None: a plain scan."""
    for end in range(1, len(text) + 1):
        if any(text[:end].endswith(t) for t in triggers):
            return end
    return None


def lazy_matcher(regex: str):
    pool = RegexPool()
    dfa = LazyByteDFA(parse_regex(regex, pool, members=True), pool)
    return lambda text: dfa.matches(text.encode())


def check_free_text_forms(triggers, texts) -> None:
    """Both forms of free text against the scan: the plain one with `re`, the difference
    one with our automaton."""
    plain, lazy = FreeText(triggers), FreeTextByDifference(triggers)
    lazy_end = lazy_matcher(lazy.until_end)
    lazy_until = {t: lazy_matcher(lazy.until_trigger[t]) for t in triggers}
    for text in texts:
        end = first_trigger_end(text, triggers)
        assert bool(re.fullmatch(plain.until_end, text)) == lazy_end(text) == (end is None), (triggers, text)
        for t in triggers:
            want = end == len(text) and text.endswith(t)
            assert bool(re.fullmatch(plain.until_trigger[t], text)) == lazy_until[t](text) == want, (triggers, t, text)


@pytest.mark.parametrize("triggers, alphabet, longest", TRIGGER_SETS, ids=lambda x: None)
def test_free_text_by_difference_equals_a_scan_on_every_short_string(triggers, alphabet, longest):
    check_free_text_forms(
        triggers, ("".join(chars) for n in range(longest + 1) for chars in itertools.product(alphabet, repeat=n))
    )


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(alphabet="ab<é", min_size=1, max_size=4), min_size=1, max_size=4, unique=True), st.data())
def test_free_text_by_difference_on_random_triggers(triggers, data):
    """Random triggers (none inside another), texts made of pieces of them."""
    triggers = [t for t in triggers if not any(t != u and t in u for u in triggers)]
    pieces = st.sampled_from(
        [t[i:j] for t in triggers for i in range(len(t)) for j in range(i + 1, len(t) + 1)] + ["x"]
    )
    check_free_text_forms(tuple(triggers), data.draw(st.lists(st.lists(pieces, max_size=8).map("".join), max_size=20)))


def cjk_triggers(count: int, chars: int) -> list[str]:
    """`count` triggers of `chars` CJK characters (3 UTF-8 bytes each), no two sharing a
    character: each starts a free-text branch of its own, the case state elimination grows
    about 4x per trigger."""
    return ["".join(chr(0x4E00 + 7 * (i * chars + k)) for k in range(chars)) for i in range(count)]


def cjk_spec(triggers: list[str]) -> StructuralTag:
    return parse_structural_tag(
        {
            "structures": [
                {"begin": t, "schema": {"type": "object", "properties": {"x": {"type": "integer"}}}, "end": ""}
                for t in triggers
            ],
            "triggers": triggers,
        }
    )


def test_many_cjk_triggers_compile_lazily_with_few_states(bundled_tokenizer):
    """16 triggers of 10 CJK characters (30 bytes): the lazy form's regex is a few KB, and a
    text with a near miss, then a tag, walks through an automaton of a bounded number of
    states (before: 6 such triggers of 8 characters made a 2.4 MB regex; 37 s, 380 MB)."""
    triggers = cjk_triggers(16, 10)
    regex = cjk_spec(triggers).to_regex(functools.partial(build_regex_from_schema, automaton="lazy"), automaton="lazy")
    assert len(regex) < 6_000
    tok = bundled_tokenizer
    fsm = compile_lazy_token_fsm(regex, tok, len(tok.token_bytes), members=True)
    text = "hello 你好 " + triggers[-1][:-1] + "x " + triggers[7] + '{"x":12} done ' + triggers[3][:4]
    state = fsm.index.initial_state
    for token in tok.encode(text):
        assert token in fsm.index.allowed_token_ids(state)
        state = fsm.index.next_state(state, token)
    assert fsm.index.is_final(state)
    assert not fsm.index.is_final(fsm.walk(tok.encode(triggers[5])))  # a trigger alone starts a tag
    # the automaton's states: the triggers' byte prefixes and the tag's, not their product
    assert fsm.index.dfa.num_states < 2 * trigger_states(triggers)


def test_state_elimination_stops_at_its_limit_before_writing_past_it(monkeypatch):
    """The plain form of 8 CJK triggers would be megabytes: it is refused, naming the limit,
    and no elimination step wrote more than the limit."""
    largest = [0]
    eliminate = FreeText._eliminate

    def measured(edges, order):
        eliminate(edges, order)
        largest[0] = max(largest[0], sum(map(len, edges.values())))

    monkeypatch.setattr(FreeText, "_eliminate", staticmethod(measured))
    spec = cjk_spec(cjk_triggers(8, 8))
    with pytest.raises(StructuralTagError, match=r"the limit max_free_text_chars is 200,000"):
        spec.to_regex(schema_regex)
    assert 0 < largest[0] <= TagLimits.max_free_text_chars
    with pytest.raises(StructuralTagError, match=r"max_free_text_chars is 1,000\b"):
        spec.to_regex(schema_regex, limits=TagLimits(max_free_text_chars=1000))
    assert cjk_spec(cjk_triggers(3, 8)).to_regex(schema_regex)  # a few triggers fit


def test_triggers_that_overlap_in_many_ways_are_refused_in_the_lazy_form_too():
    """Five triggers end with 200 a's, five start with them: each of the latter has 1,000
    heads (b, ba, baa, ...), 500,000 characters in all, refused by the same limit."""
    triggers = [c + "a" * 200 for c in "bcdef"] + ["a" * 200 + c for c in "BCDEF"]
    spec = parse_structural_tag(
        {"structures": [{"begin": t, "schema": {}, "end": ""} for t in triggers], "triggers": triggers}
    )
    with pytest.raises(StructuralTagError, match="max_free_text_chars"):
        spec.to_regex(schema_regex, automaton="lazy")


@pytest.mark.parametrize(
    "triggers, limits, message",
    [
        (["<t>"] * 2 + [f"<t{i}>" for i in range(200)], TagLimits(), "has 202 triggers; the limit max_triggers is 128"),
        (["工" * 90], TagLimits(), "is 270 bytes long; the limit max_trigger_bytes is 256"),
        (["x" * 5000], TagLimits(), "is 5,000 bytes long; the limit max_trigger_bytes is 256"),
        (
            [f"{i:03d}" + "工" * 84 for i in range(64)],
            TagLimits(),
            "an automaton of 16,137 states (their distinct prefixes, in bytes); the limit max_trigger_states is 4,096",
        ),
        (["<a>", "<b>"], TagLimits(max_triggers=1), "has 2 triggers; the limit max_triggers is 1"),
    ],
)
def test_trigger_limits_are_checked_when_the_spec_is_parsed(triggers, limits, message):
    spec = {"structures": [{"begin": triggers[-1], "schema": {}, "end": ""}], "triggers": triggers}
    with pytest.raises(StructuralTagError, match=re.escape(message)):
        parse_structural_tag(spec, limits)


def test_trigger_states_counts_distinct_byte_prefixes():
    assert trigger_states(["ab", "ac"]) == 2  # "" and "a": a whole trigger is no state
    assert trigger_states(["工"]) == 3  # "", and two partial bytes
    assert trigger_states(["<tool_call>"]) == len("<tool_call>")


# ------------------------------------------------------------------ validation
GOOD = {"structures": [{"begin": "<t>", "schema": {"type": "object"}, "end": "</t>"}], "triggers": ["<t>"]}


@pytest.mark.parametrize(
    "change, message",
    [
        ({"structures": []}, "structural_tag.structures must be a non-empty list"),
        ({"triggers": "<t>"}, "structural_tag.triggers must be a non-empty list"),
        ({"extra": 1}, "unknown key(s) ['extra']"),
        ({"type": "json_schema"}, "structural_tag.type must be 'structural_tag'"),
        (
            {"structures": [{"begin": "x<t>", "schema": {}, "end": ""}]},
            "structures[0].begin 'x<t>' starts with no trigger",
        ),
        ({"structures": [{"begin": "<t>", "schema": 3, "end": ""}]}, "structures[0].schema must be a JSON Schema"),
        (
            {"structures": [{"begin": "<t>", "schema": {}, "end": "", "name": "f"}]},
            "structures[0] has unknown key(s) ['name']",
        ),
        ({"structures": [{"begin": "<t>", "schema": {}}]}, "structures[0] is missing ['end']"),
        ({"triggers": ["<t>", "<t"]}, "triggers[1] '<t' is inside triggers[0] '<t>'"),
        ({"triggers": [""]}, "structural_tag.triggers[0] is empty"),
        ({"at_least_one": 1}, "structural_tag.at_least_one must be true or false"),
    ],
)
def test_a_bad_spec_names_the_field(change, message):
    with pytest.raises(StructuralTagError) as e:
        parse_structural_tag({**GOOD, **change})
    assert message in str(e.value)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)
SPEC_PARTS = st.fixed_dictionaries(
    {},
    optional={
        "structures": st.lists(
            st.fixed_dictionaries(
                {},
                optional={
                    "begin": st.sampled_from(["<t>", "<t>x", "x", ""]) | JSON_VALUES,
                    "schema": st.just({}) | JSON_VALUES,
                    "end": st.just("</t>") | JSON_VALUES,
                },
            )
            | JSON_VALUES,
            max_size=3,
        ),
        "triggers": st.lists(st.sampled_from(["<t>", "<t", "t>", ""]) | JSON_VALUES, max_size=3),
        "at_least_one": JSON_VALUES,
        "type": st.just("structural_tag") | JSON_VALUES,
    },
)


@settings(max_examples=300, deadline=None)
@given(SPEC_PARTS | JSON_VALUES)
def test_any_input_parses_or_is_refused_naming_a_field(spec):
    try:
        parsed = parse_structural_tag(spec)
    except StructuralTagError as e:
        assert str(e).startswith("structural_tag")
        return
    assert parse_structural_tag(parsed.to_json()) == parsed
    assert all(any(s.begin.startswith(t) for t in parsed.triggers) for s in parsed.structures)


def test_spec_forms_and_the_canonical_text():
    typed = parse_structural_tag({**GOOD, "type": "structural_tag"})
    assert parse_structural_tag(json.dumps(GOOD)) == typed == parse_structural_tag(typed.to_json())
    with pytest.raises(StructuralTagError, match="not valid JSON"):
        parse_structural_tag("{")


def test_sampling_params_take_a_dict_or_json_text_and_exclude_other_constraints():
    p = SamplingParams.from_dict({"structural_tag": GOOD})
    assert p.constraint() == ("structural_tag", json.dumps(GOOD))
    assert SamplingParams(structural_tag=json.dumps(GOOD)).constraint()[0] == "structural_tag"
    with pytest.raises(ValueError, match="structural_tag must be a JSON object"):
        SamplingParams(structural_tag="[1]")
    with pytest.raises(ValueError, match="at most one of regex / json_schema / ebnf / structural_tag"):
        SamplingParams(structural_tag=GOOD, regex="a")


# ------------------------------------------------------------------ token level
WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 12},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "days"],
}
TIME = {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"]}
TOOLS = {
    "structures": [
        {"begin": '<tool_call>{"name": "get_weather", "arguments": ', "schema": WEATHER, "end": "}</tool_call>"},
        {"begin": '<tool_call>{"name": "get_time", "arguments": ', "schema": TIME, "end": "}</tool_call>"},
    ],
    "triggers": ["<tool_call>"],
}

# The sampled generation tests close the tools' objects: with other keys allowed, a model at
# temperature 0.8 may open a key whose string runs to max_new_tokens, a cut no backend can
# finish (the open schemas stay for the walks and the reference, which want those strings).
CLOSED_TOOLS = {
    **TOOLS,
    "structures": [{**s, "schema": {**s["schema"], "additionalProperties": False}} for s in TOOLS["structures"]],
}


def calls_in(text: str) -> tuple[str, list[tuple[str, str]]]:
    """(content, [(tool, arguments)]) as the server reads a call back (function_call.py), not
    by a regex: the schemas allow other keys, and one may spell "</tool_call>" in its string."""
    content, calls = parse_tool_calls(text, ["get_weather", "get_time"])
    return content, [(c.name, c.arguments) for c in calls]


def random_walk(fsm, rng, steps: int, start: list[int] = ()) -> tuple[list[int], bool]:
    """From the state after the tokens `start`, sample tokens uniformly from each state's row
    (EOS, when allowed, one time in four) until EOS or `steps`; (all ids, ended by EOS)."""
    index, state, ids = fsm.index, fsm.walk(start), list(start)
    assert state >= 0, "the start is accepted"
    for _ in range(steps):
        allowed = index.allowed_token_ids(state)
        assert allowed, "a live state always allows something"
        eos_ok = index.eos_token_id in allowed
        token = index.eos_token_id if eos_ok and rng.random() < 0.25 else int(rng.choice(allowed))
        if token == index.eos_token_id:
            return ids, True
        ids.append(token)
        state = index.next_state(state, token)
    return ids, False


@pytest.mark.parametrize(
    "tokenizer_name, flags",
    [("bundled", {}), ("bundled", {"at_least_one": True}), ("anthropic_65k", {"stop_after_first": True})],
)
def test_random_walks_over_real_vocabularies_give_valid_tool_calls(tokenizer_name, flags):
    tok = load(tokenizer_name)
    spec = parse_structural_tag({**TOOLS, **flags})
    fsm = compile_lazy_token_fsm(spec.to_regex(schema_regex), tok, len(tok.token_bytes))
    rng = np.random.default_rng(0)
    schemas = {"get_weather": WEATHER, "get_time": TIME}
    complete = 0
    # Free text never spells a trigger by chance: half the walks start with text and one.
    starts = [[], tok.encode("Let me check. <tool_call>")] if not spec.at_least_one else [[]]
    for i in range(30):
        ids, ended = random_walk(fsm, rng, 120, starts[i % len(starts)])
        data = b"".join(tok.token_bytes[i] for i in ids)
        if spec.at_least_one:
            assert data.startswith(b"<tool_call>"[: len(data)])
        if ended:  # a walk cut short may stop inside a character; a complete one is UTF-8
            text = data.decode("utf-8")
            assert reference_accepts(spec, text)
            content, calls = calls_in(text)
            assert "<tool_call>" not in content  # every trigger began a call
            for name, args in calls:
                jsonschema.validate(json.loads(args), schemas[name])
            complete += bool(calls)
    assert complete > 0  # some walks made a complete call


# ------------------------------------------------------------------ through the Engine
@pytest.fixture(scope="module")
def engine():
    e = sgl.Engine(stage="s6")
    yield e
    e.shutdown()


def test_engine_generates_tool_calls_whose_arguments_validate(engine):
    spec = {**CLOSED_TOOLS, "at_least_one": True, "stop_after_first": True}
    outs = engine.generate(
        ["What is the weather in Paris?", "What time is it?"],
        [{"structural_tag": spec, "max_new_tokens": 80, "temperature": 0.8, "seed": s} for s in (1, 2)],
    )
    schemas = {"get_weather": WEATHER, "get_time": TIME}
    for out in outs:
        assert out["meta_info"]["finish_reason"]["type"] == "stop", out
        content, ((name, args),) = calls_in(out["text"])
        assert content == ""
        jsonschema.validate(json.loads(args), schemas[name])


def test_a_bad_spec_aborts_only_its_request(engine):
    bad = {"structures": [{"begin": "x", "schema": {}, "end": ""}], "triggers": ["<t>"]}
    outs = engine.generate(
        ["a", "b"], [{"structural_tag": bad, "max_new_tokens": 4}, {"max_new_tokens": 4, "temperature": 0}]
    )
    assert outs[0]["meta_info"]["finish_reason"]["type"] == "abort"
    assert "structures[0].begin 'x' starts with no trigger" in outs[0]["meta_info"]["finish_reason"]["message"]
    assert outs[1]["meta_info"]["finish_reason"]["type"] in ("stop", "length")  # served as usual


@pytest.mark.parametrize("stage", ["s1", "s3", "s5"])
def test_earlier_stages_refuse_structural_tags(stage):
    e = sgl.Engine(stage=stage)
    try:
        out = e.generate("a", {"structural_tag": TOOLS, "max_new_tokens": 4})
    finally:
        e.shutdown()
    assert out["meta_info"]["finish_reason"]["type"] == "abort"
    assert "structural_tag needs stage s6-function-calling" in out["meta_info"]["finish_reason"]["message"]


# ------------------------------------------------------------------ every backend
BACKENDS = ["fsm", "xgrammar", "llguidance"]


@pytest.fixture(scope="module")
def bundled_tokenizer():
    return load("bundled")


@functools.cache
def backend(name: str):
    tok = load("bundled")
    return get_backend_class(name)(tok, len(tok.token_bytes))


def _ends_here(m, tok) -> bool:
    """Whether the output may end after what matcher `m` has accepted: EOS is allowed."""
    if m.is_terminated():
        return True
    mask = m.allocate_vocab_mask(len(tok.token_bytes), 1)
    m.fill_vocab_mask(mask, 0)
    eos = tok.eos_token_id
    return bool(int(mask[0, eos // 32]) >> (eos % 32) & 1)


def backend_accepts(grammar, tok, text: str) -> bool:
    """Through the matcher interface: the text's tokens are accepted and then EOS is allowed."""
    m = grammar.copy()
    for token in tok.encode(text):
        try:
            m.accept_token(token)
        except GrammarError:
            return False
    return _ends_here(m, tok)


def backend_accepts_all(grammar, tok, texts) -> dict[str, bool]:
    """`backend_accepts` for many texts at once, the same verdicts, walked by one matcher: the
    texts' token sequences in sorted order, each after rolling back to the longest token prefix
    it shares with the one before. A prefix the matcher refused refuses every text that starts
    with it, without a walk; after a refusal the matcher is made again (a library's matcher may
    be unusable after a token it refused)."""
    verdicts = {}
    m, walked, dead = grammar.copy(), [], None  # walked: the tokens m accepted; dead: a refused prefix
    for tokens, text in sorted((tuple(tok.encode(text)), text) for text in texts):
        if dead is not None and tokens[: len(dead)] == dead:
            verdicts[text] = False
            continue
        dead = None
        common = next((i for i, (a, b) in enumerate(zip(walked, tokens)) if a != b), min(len(walked), len(tokens)))
        if len(walked) > common:
            m.rollback(len(walked) - common)
            del walked[common:]
        for token in tokens[common:]:
            try:
                m.accept_token(token)
            except GrammarError:
                dead = (*walked, token)
                m = grammar.copy()
                for w in walked:
                    m.accept_token(w)
                break
            walked.append(token)
        verdicts[text] = dead is None and _ends_here(m, tok)
    return verdicts


def backend_texts(alphabet: str, longest: int, sample: int = 4000) -> list[str]:
    """Every string of up to 5 letters, and a fixed sample of those of 6: each text a backend
    walks costs a whole mask (is EOS allowed?), and the 47k strings of 6 over 6 letters took
    10 s a case on a library backend. (The regex against the semantics walks all of them.)"""
    texts = ["".join(chars) for n in range(min(longest, 5) + 1) for chars in itertools.product(alphabet, repeat=n)]
    if longest >= 6:
        sixes = ["".join(chars) for chars in itertools.product(alphabet, repeat=6)]
        texts += sixes if len(sixes) <= sample else random.Random(6).sample(sixes, sample)
    return texts


@pytest.mark.parametrize("name", BACKENDS)
@pytest.mark.parametrize("flags", FLAGS, ids=lambda f: "-".join(k for k, v in f.items() if v) or "plain")
@pytest.mark.parametrize("structures, triggers, alphabet, longest", CASES, ids=lambda x: None)
def test_every_backend_accepts_what_the_semantics_accept(
    name, structures, triggers, alphabet, longest, flags, bundled_tokenizer
):
    spec = spec_of(structures, triggers, **flags)
    if name == "llguidance" and lexer_conflict(spec) is not None:
        with pytest.raises(GrammarError, match="llguidance cannot express this structural tag exactly"):
            backend(name).compile_structural_tag(spec)
        return
    grammar = backend(name).compile_structural_tag(spec)
    for text, got in backend_accepts_all(grammar, bundled_tokenizer, backend_texts(alphabet, longest)).items():
        assert got == reference_accepts(spec, text), (name, text)


CALLS = [
    '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}</tool_call>',
    'Sure. <tool_call>{"name": "get_time", "arguments": {"zone": "UTC"}}</tool_call> Done.',
    "a <tool_c",
    '<tool_call>{"name": "get_time", "arguments": {"zone": "PST"}}</tool_call>',  # not in the enum
    '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>',  # days missing
    '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris", "days": 9}}</tool_call>',  # days > 7
    '<tool_call>{"name": "set_alarm", "arguments": {}}</tool_call>',  # no such tool
    "text <tool_call> more text",
]  # a trigger starts a tag


@pytest.mark.parametrize("name", BACKENDS)
def test_every_backend_agrees_on_tool_calls(name, bundled_tokenizer):
    for flags in FLAGS:
        spec = parse_structural_tag({**TOOLS, **flags})
        grammar = backend(name).compile_structural_tag(spec)
        for text in CALLS:
            assert backend_accepts(grammar, bundled_tokenizer, text) == reference_accepts(spec, text), (flags, text)


@pytest.mark.parametrize(
    ("name", "schema", "keyword"),
    [
        ("xgrammar", {"anyOf": []}, "anyOf"),  # it wrote `"arguments": }` (a stranger's attack)
        ("xgrammar", {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, "uniqueItems"),
        ("llguidance", {"type": "string", "pattern": "^[a-z&&[^aeiou]]{3}$"}, "pattern"),
    ],
)
def test_a_structures_schema_is_refused_as_a_json_schema_request_would_be(name, schema, keyword):
    """A library backend checks a structure's schema (a tool's parameters) as it checks a
    json_schema request's: a keyword its library would not enforce is refused, naming the
    structure, instead of a tool call that breaks the schema."""
    spec = parse_structural_tag(
        {**TOOLS, "structures": [{"begin": "<f>", "schema": schema, "end": "</f>"}], "triggers": ["<f>"]}
    )
    with pytest.raises(GrammarError, match=rf"structural_tag\.structures\[0\]\.schema: .*does not enforce '{keyword}'"):
        backend(name).compile_structural_tag(spec)


def test_llguidance_refusal_is_needed(bundled_tokenizer):
    """Case 3 compiled anyway: llguidance's greedy lexer rejects a string the semantics accept
    ("ab1" + 1 + "b" + free "a": after the trigger "ab" it reads the longer begin's "1" as JSON)."""
    spec = spec_of(*CASES[3][:2])
    assert "is empty" in lexer_conflict(spec)
    grammar = backend("llguidance").compile("ebnf", structural_tag_lark(spec))  # (Lark text: read as such)
    assert reference_accepts(spec, "ab11ba") and not backend_accepts(grammar, bundled_tokenizer, "ab11ba")


@pytest.mark.parametrize("name", ["xgrammar", "llguidance"])
def test_the_libraries_refuse_a_content_schema_by_name(name):
    compiled = backend(name)._compile_safely("structural_tag", json.dumps({**TOOLS, "content_schema": {}}))
    assert isinstance(compiled, InvalidGrammarObject)
    assert (
        "cannot compile structural_tag.content_schema" in compiled.message and "'fsm' backend can" in compiled.message
    )


@pytest.mark.parametrize("name", ["fsm", "xgrammar", "llguidance"])
def test_a_trigger_that_begins_no_structure_is_kept_out_of_free_text_or_refused(bundled_tokenizer, name):
    """llguidance let the unused trigger " " into free text under finish_reason stop, and
    xgrammar failed an internal check (a stranger's fuzzer): both refuse it by name now; the
    fsm backend keeps it out of the free text, as the semantics say."""
    spec = {"structures": [{"begin": "<a>", "schema": {}, "end": "</a>"}], "triggers": ["<a>", "<b>"]}
    compiled = backend(name)._compile_safely("structural_tag", json.dumps(spec))
    if name != "fsm":
        assert isinstance(compiled, InvalidGrammarObject) and "trigger '<b>' begins no structure" in compiled.message
        return
    assert not isinstance(compiled, InvalidGrammarObject), compiled.message
    verdicts = backend_accepts_all(compiled, bundled_tokenizer, ["x <a>1</a>", "x <b> y", "<b><a>{}</a>", "plain"])
    assert verdicts == {"x <a>1</a>": True, "x <b> y": False, "<b><a>{}</a>": False, "plain": True}


@pytest.mark.parametrize(
    "name, schema",
    [
        ("xgrammar", {"type": "array", "prefixItems": [{"type": "integer"}], "maxItems": 0}),
        ("llguidance", {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}),
    ],
)
def test_a_librarys_error_for_a_tag_names_the_structure_at_fault(name, schema):
    """The library compiles the whole tag at once and its error named no structure (xgrammar:
    "maxItems is less than the number of prefixItems"; llguidance quoted our Lark lines): the
    schema that fails alone is named, so the server can name the tool (a stranger's fuzzer)."""
    spec = {
        "structures": [
            {"begin": "<a>", "schema": {"type": "object"}, "end": "</a>"},
            {"begin": "<b>", "schema": schema, "end": "</b>"},
        ],
        "triggers": ["<a>", "<b>"],
    }
    compiled = backend(name)._compile_safely("structural_tag", json.dumps(spec))
    assert isinstance(compiled, InvalidGrammarObject) and "structural_tag.structures[1].schema" in compiled.message


def test_outlines_refuses_structural_tags_clearly():
    compiled = backend("outlines")._compile_safely("structural_tag", json.dumps(TOOLS))
    assert isinstance(compiled, InvalidGrammarObject)
    assert "the 'outlines' grammar backend does not support 'structural_tag'" in compiled.message
    # (a client that sent tools, not a structural tag, is told why one was needed)
    assert "tool calls are constrained by a structural tag" in compiled.message


@pytest.mark.parametrize("name", ["xgrammar", "llguidance"])
def test_generation_under_each_library_backend_validates(name):
    e = sgl.Engine(stage="s6", grammar_backend=name)
    try:
        outs = e.generate(
            ["What is the weather in Paris?", "Time in Berlin?"],
            [
                {
                    "structural_tag": {**CLOSED_TOOLS, "at_least_one": True, "stop_after_first": True},
                    "max_new_tokens": 80,
                    "temperature": 0.8,
                    "seed": s,
                }
                for s in (1, 2)
            ],
        )
    finally:
        e.shutdown()
    schemas = {"get_weather": WEATHER, "get_time": TIME}
    for out in outs:
        assert out["meta_info"]["finish_reason"]["type"] == "stop", out
        content, ((name_, args),) = calls_in(out["text"])
        assert content == "", out["text"]
        jsonschema.validate(json.loads(args), schemas[name_])


def test_native_generate_api_takes_a_structural_tag():
    import httpx

    from minisglang.server import create_app, serving_in_thread

    spec = {**TOOLS, "at_least_one": True, "stop_after_first": True}
    with serving_in_thread(create_app(sgl.Engine(stage="s6"))) as url:
        ok = httpx.post(
            url + "/generate",
            json={
                "text": "Weather in Rome?",
                "sampling_params": {"structural_tag": spec, "max_new_tokens": 80, "temperature": 0},
            },
            timeout=120,
        )
        bad = httpx.post(url + "/generate", json={"text": "x", "sampling_params": {"structural_tag": 3}}, timeout=120)
    assert ok.status_code == 200
    _, ((name, args),) = calls_in(ok.json()["text"])
    jsonschema.validate(json.loads(args), {"get_weather": WEATHER, "get_time": TIME}[name])
    assert bad.status_code == 400 and "structural_tag must be a JSON object (a dict) or its JSON text" in bad.text
