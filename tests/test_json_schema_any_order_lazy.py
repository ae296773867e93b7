"""Object members in any order for the lazy automaton: lazy_regex's MEMBERS node (the
private `(?@members...)` group) and the JSON Schema options any_order and
extra_properties that write it, checked against `jsonschema` (and, for the node itself,
against `re.fullmatch` of every order written out). Covers constrained/json_schema/objects.py
(any order) and lazy_regex.py's MEMBERS node."""

from __future__ import annotations

import itertools
import json
import re

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minisglang.constrained.json_schema import UnsupportedSchemaError, build_regex_from_schema
from minisglang.constrained.lazy_byte_dfa import LazyByteDFA
from minisglang.constrained.lazy_regex import RegexError, RegexPool
from minisglang.constrained.lazy_regex_parser import parse_regex


def lazy_matcher(regex: str):
    dfa = LazyByteDFA.from_regex(regex, members=True)
    return (lambda text: dfa.matches(text.encode("utf-8"))), dfa


def every_order(members: list[tuple[str, bool]], extra: str | None, sep: str = ",") -> str:
    """The same language as a plain regex: every subset holding the required members, in
    every order, extras anywhere (the n! form the MEMBERS node replaces)."""
    more = "" if extra is None else f"(?:{sep}(?:{extra}))*"
    lead = "" if extra is None else f"(?:(?:{extra}){more}{sep})?"
    options = []
    for k in range(len(members) + 1):
        for chosen in itertools.permutations(range(len(members)), k):
            if all(i in chosen for i, (_, req) in enumerate(members) if req):
                inner = f"{more}{sep}".join(f"(?:{members[i][0]})" for i in chosen)
                options.append(lead + inner + more if chosen else "")
    if extra is not None:
        options.append(f"(?:{extra}){more}")
    return "|".join(f"(?:{o})" for o in options)


MEMBER_CASES = [
    ([("a", True), ("b", False), ("cc", False)], None),
    ([("a", False), ("b", False)], "x[0-9]"),
    ([("a", True), ("b", True), ("c", True)], None),
    ([], "z"),
]


@pytest.mark.parametrize("members,extra", MEMBER_CASES)
def test_members_node_equals_every_order_written_out(members, extra):
    groups = "".join(f"({'!' if req else '~'}{m})" for m, req in members)
    regex = f"<(?@members(,){groups}{'' if extra is None else f'(&{extra})'})>"
    accepts, _ = lazy_matcher(regex)
    oracle = re.compile(f"<(?:{every_order(members, extra)})>")
    alphabet = ["a", "b", "cc", "c", "x1", "x2", "z", ","]
    for n in range(5):
        for parts in itertools.product(alphabet, repeat=n):
            for text in ("<" + ",".join(parts) + ">", "<" + "".join(parts) + ">"):
                assert accepts(text) == bool(oracle.fullmatch(text)), (regex, text)


def test_members_node_states_are_the_sets_reached_not_all_orders():
    # 20 members: 20! orders as a regex; the automaton builds states only along the walk.
    names = [f"k{i:02d}" for i in range(20)]
    regex = "<(?@members(,)" + "".join(f"(~{n})" for n in names) + ")>"
    accepts, dfa = lazy_matcher(regex)
    assert accepts("<" + ",".join(reversed(names)) + ">")
    assert not accepts("<k03,k03>")
    assert dfa.num_states < 200


@pytest.mark.parametrize(
    "regex,message",
    [
        ("(?@members(,)(=a))", "must start with !, ~ or &"),
        ("(?@members(,)(&a)(&b))", "two & groups"),
        ("(?@members(,)(!a?))", "non-empty string"),
        ("(?@members)", "must be (?@members(SEP)"),
    ],
)
def test_bad_members_groups_are_clear_errors(regex, message):
    with pytest.raises(RegexError, match=re.escape(message)):
        parse_regex(regex, RegexPool(), members=True)


def test_a_users_regex_cannot_use_the_private_members_group():
    # Only our JSON Schema compiler writes `(?@members...)`; in a request's regex it is the
    # error Python gives (re rejects `(?@`), on the parser and through the fsm backend.
    regex = "<(?@members(,)(!a)(~b))>"
    with pytest.raises(RegexError, match="invalid regex"):
        parse_regex(regex, RegexPool())
    from minisglang import DEFAULT_MODEL_PATH
    from minisglang.backends.fsm_backend import FSMBackend
    from minisglang.constrained.token_fsm import ConstraintError
    from minisglang.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(DEFAULT_MODEL_PATH)
    backend = FSMBackend(tok, tok.vocab_size)
    try:
        with pytest.raises(ConstraintError, match="invalid regex"):
            backend.compile("regex", regex)
        assert backend.compile("regex", re.escape("(?@members") + "x") is not None
    finally:
        backend.shutdown()


VALUE_SCHEMAS = [
    {"type": "integer"},
    {"type": "boolean"},
    {"type": "string", "maxLength": 3},
    {"type": "object", "properties": {"p": {"type": "null"}, "q": {"type": "integer"}}, "required": ["q"]},
]
VALUES = [0, 7, True, "ab", "abcd", None, {"q": 1}, {"q": 1, "p": None}, {"p": None}]
NAMES = ["a", "b", "c", "d", "e", "f", "g", "h"]
EXTRA_NAMES = ["x", "ab", "é"]


@st.composite
def object_schemas(draw):
    n = draw(st.integers(1, 8))
    properties = {name: draw(st.sampled_from(VALUE_SCHEMAS)) for name in NAMES[:n]}
    required = draw(st.lists(st.sampled_from(NAMES[:n]), unique=True))
    schema = {"type": "object", "properties": properties, "required": required}
    additional = draw(st.sampled_from([None, False, {"type": "integer"}]))
    if additional is not None:
        schema["additionalProperties"] = additional
    return schema


@st.composite
def instances(draw):
    keys = draw(st.lists(st.sampled_from(NAMES + EXTRA_NAMES), unique=True, max_size=9))
    return {k: draw(st.sampled_from(VALUES)) for k in keys}


def writings(value) -> list[str]:
    return [json.dumps(value), json.dumps(value, separators=(",", ":")), json.dumps(value, ensure_ascii=False)]


@settings(max_examples=60, deadline=None)
@given(schema=object_schemas(), objs=st.lists(instances(), min_size=1, max_size=12))
def test_any_order_and_extra_properties_equal_jsonschema(schema, objs):
    regex = build_regex_from_schema(schema, any_order=True, extra_properties=True, automaton="lazy")
    accepts, _ = lazy_matcher(regex)
    validator = jsonschema.Draft202012Validator(schema)
    for obj in objs:
        valid = validator.is_valid(obj)
        # A free value (an unlisted key's, without additionalProperties) nests at most
        # ANY_VALUE_NESTING levels: there only soundness is asked.
        exact = all(not isinstance(v, dict) for k, v in obj.items() if k not in schema["properties"])
        for text in writings(obj) + writings(dict(reversed(list(obj.items())))):
            if exact:
                assert accepts(text) == valid, (schema, text)
            elif accepts(text):
                assert valid, (schema, text)


@settings(max_examples=40, deadline=None)
@given(schema=object_schemas(), objs=st.lists(instances(), min_size=1, max_size=12))
def test_any_order_alone_is_sound_and_takes_every_order_of_listed_keys(schema, objs):
    regex = build_regex_from_schema(schema, any_order=True, automaton="lazy")
    accepts, _ = lazy_matcher(regex)
    validator = jsonschema.Draft202012Validator(schema)
    for obj in objs:
        valid = validator.is_valid(obj)
        listed_only = set(obj) <= set(schema["properties"])
        for text in writings(obj) + writings(dict(reversed(list(obj.items())))):
            if accepts(text):
                assert valid, (schema, text)  # never a false positive
            elif valid:
                assert not listed_only, (schema, text)  # only an unlisted key is refused


def test_lazy_any_order_has_no_member_limit_and_eager_keeps_its_clear_error():
    schema = {"type": "object", "properties": {n: {"type": "integer"} for n in "abcdefghijkl"}, "required": ["l"]}
    regex = build_regex_from_schema(schema, any_order=True, automaton="lazy")
    accepts, _ = lazy_matcher(regex)
    assert accepts(json.dumps(dict(zip("lkjihgfedcba", range(12)))))
    assert not accepts(json.dumps(dict(zip("kjihgfedcba", range(11)))))  # "l" is required
    with pytest.raises(UnsupportedSchemaError, match="more than max_any_order_properties=4"):
        build_regex_from_schema(schema, any_order=True)  # the default: a plain regex


def test_default_output_stays_plain_python_regex():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    for options in ({}, {"any_order": True}, {"automaton": "lazy"}):
        assert "(?@" not in build_regex_from_schema(schema, **options)
    with pytest.raises(ValueError, match="option automaton must be 'eager' or 'lazy'"):
        build_regex_from_schema(schema, automaton="fast")


def test_enum_of_objects_filtered_through_a_members_group():
    schema = {
        "enum": [{"a": 1, "b": 2}, {"a": "x"}],
        "properties": {"a": {"type": "integer"}, "b": {}},
        "required": ["a"],
    }
    regex = build_regex_from_schema(schema, any_order=True, automaton="lazy")
    accepts, _ = lazy_matcher(regex)
    assert accepts('{"a": 1, "b": 2}')
    assert not accepts('{"a": "x"}')
