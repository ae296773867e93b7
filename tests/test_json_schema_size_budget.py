"""The JSON Schema compiler refuses a regex longer than max_regex_chars, early (issue 13).

A 2.3 KB schema (JSON Schema Store's jsonld.json: an allOf of three $refs to recursive
definitions) used to build a 3.3-billion-character regex with 13.5 GB peak memory: each
level of $ref nesting writes the level below several times. The size is now checked as
parts are composed, so such a schema fails with SchemaTooLargeError after a few MB, and a
schema under the limit compiles to exactly the regex it compiled to without the check.
Memory is measured with tracemalloc (no timing assertions). Covers constrained/json_schema/
compiler_base.py (check_size, the $ref cache) and build.py.
"""

from __future__ import annotations

import json
import re
import tracemalloc
from pathlib import Path

import pytest

from minisglang.constrained.json_schema import (
    DEFAULT_MAX_REGEX_CHARS,
    SchemaTooLargeError,
    UnsupportedSchemaError,
    build_regex_from_schema,
)

SUITE = Path(__file__).resolve().parent / "data" / "json-schema-test-suite" / "draft2020-12"
UNLIMITED = 10**15
# bytes: the blow-up used 13.5 GB. tracemalloc counts every thread's allocations, and a compile
# thread an earlier test left running in this worker once added ~20 MB to a 100 MB limit.
PEAK_LIMIT = 256 * 2**20


def linked_data_schema(properties: int = 10) -> dict:
    """The shape of jsonld.json (written anew, smaller): the root is an allOf of three $refs;
    `node` is an object whose `back` property and whose extra keys both refer to `node`
    again, and `head` and `list` bring more properties whose values fall under `node`'s
    additionalProperties. Every level of $ref expansion writes the level below many times."""
    node = {
        "properties": {f"p{i}": {"type": ["string", "null"]} for i in range(properties - 2)},
        "additionalProperties": {"anyOf": [{"$ref": "#/$defs/node"}]},
    }
    node["properties"]["back"] = {
        "type": ["string", "object", "null"],
        "additionalProperties": {"anyOf": [{"$ref": "#/$defs/node"}]},
    }
    node["properties"]["last"] = {"type": ["string", "null", "array"]}
    return {
        "type": ["object", "array"],
        "additionalProperties": True,
        "allOf": [{"$ref": "#/$defs/head"}, {"$ref": "#/$defs/list"}, {"$ref": "#/$defs/node"}],
        "$defs": {
            "node": node,
            "head": {
                "additionalProperties": True,
                "properties": {"context": {"type": ["object", "string", "array", "null"]}},
            },
            "list": {
                "additionalProperties": True,
                "properties": {
                    "graph": {"type": ["array", "object"], "additionalItems": {"anyOf": [{"$ref": "#/$defs/node"}]}}
                },
            },
        },
    }


def peak_bytes_of(call) -> tuple[object, int]:
    """(what `call()` returned or raised, the peak bytes Python allocated meanwhile)."""
    tracemalloc.start()
    try:
        outcome = call()
    except Exception as error:  # the outcome under test may be an exception
        outcome = error
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return outcome, peak


def test_the_linked_data_schema_is_small_but_its_regex_multiplies():
    schema = linked_data_schema()
    assert len(json.dumps(schema)) < 1500
    # Each level of $ref expansion multiplies the regex about 20 times: 2 levels are fine.
    sizes = [len(build_regex_from_schema(schema, max_ref_depth=d)) for d in (1, 2)]
    assert sizes[1] > 20 * sizes[0]


@pytest.mark.parametrize("max_ref_depth", [3, 5, 12])
def test_the_linked_data_schema_fails_early_with_a_clear_error(max_ref_depth):
    error, peak = peak_bytes_of(lambda: build_regex_from_schema(linked_data_schema(), max_ref_depth=max_ref_depth))
    assert isinstance(error, SchemaTooLargeError) and isinstance(error, UnsupportedSchemaError)
    message = str(error)
    assert f"max_regex_chars={DEFAULT_MAX_REGEX_CHARS:,}" in message
    assert message.startswith("the schema at #/")  # names the part that crossed the limit
    assert peak < PEAK_LIMIT, f"peak {peak / 2**20:.0f} MiB before refusing"


def test_a_wide_object_fails_early_too():
    # No nesting: 1500 optional properties. Properties in order write each member once per
    # earlier optional one (O(n^2)): 45 million characters if built.
    schema = {"type": "object", "properties": {f"key{i}": {"type": "string"} for i in range(1500)}}
    error, peak = peak_bytes_of(lambda: build_regex_from_schema(schema))
    assert isinstance(error, SchemaTooLargeError)
    assert "the schema at # needs a regex of more than" in str(error)
    assert peak < PEAK_LIMIT


def test_many_large_anyof_branches_fail_early():
    big = {"type": "object", "properties": {f"k{i}": {"type": "string"} for i in range(60)}}  # ~120k chars
    schema = {"anyOf": [dict(big, title=f"branch {j}", required=[f"k{j}"]) for j in range(40)]}
    error, peak = peak_bytes_of(lambda: build_regex_from_schema(schema))
    assert isinstance(error, SchemaTooLargeError)
    assert "#/anyOf/" in str(error)
    assert peak < PEAK_LIMIT


def test_the_limit_is_an_option():
    schema = linked_data_schema()
    regex = build_regex_from_schema(schema, max_ref_depth=2)
    assert build_regex_from_schema(schema, max_ref_depth=2, max_regex_chars=len(regex)) == regex
    with pytest.raises(SchemaTooLargeError, match=f"max_regex_chars={len(regex) - 1:,}"):
        build_regex_from_schema(schema, max_ref_depth=2, max_regex_chars=len(regex) - 1)


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "1000000", None])
def test_a_bad_limit_is_refused_by_name(bad):
    with pytest.raises(ValueError, match="max_regex_chars"):
        build_regex_from_schema({"type": "string"}, max_regex_chars=bad)


def test_schemas_under_the_limit_compile_to_the_same_regex_as_without_it():
    # The check only refuses; it never changes a regex. Every suite schema that compiles,
    # plus the linked-data shape at a depth under the limit.
    schemas = [group["schema"] for f in sorted(SUITE.glob("*.json")) for group in json.loads(f.read_text("utf-8"))]
    schemas.append(linked_data_schema())
    compiled = 0
    for schema in schemas:
        depth = {"max_ref_depth": 2} if schema is schemas[-1] else {}
        try:
            unlimited = build_regex_from_schema(schema, max_regex_chars=UNLIMITED, **depth)
        except UnsupportedSchemaError:
            with pytest.raises(UnsupportedSchemaError) as error:  # an unsupported keyword stays that
                build_regex_from_schema(schema, **depth)
            assert not isinstance(error.value, SchemaTooLargeError)
            continue
        except ValueError:  # an invalid schema: not this test's subject
            continue
        assert build_regex_from_schema(schema, **depth) == unlimited
        compiled += 1
    assert compiled > 100


# ---------------------------------------------------------------------------------------
# automaton="lazy": a long subschema regex is written once (`(?@def:NAME(R))`) and used by
# name (`(?@ref:NAME)`), so nesting no longer multiplies the text
# ---------------------------------------------------------------------------------------
def nested_lists(depth: int) -> dict:
    """Objects holding a list of such objects, `depth` levels: a plain regex writes each
    list's item twice (`[I(,I)*]`), so its size doubles per level."""
    schema: dict = {"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer"}}}
    for _ in range(depth):
        schema = {
            "type": "object",
            "properties": {"name": {"type": "string"}, "children": {"type": "array", "items": schema}},
            "required": ["name"],
        }
    return schema


def lazy_accepts(regex: str):
    from minisglang.constrained.lazy_byte_dfa import LazyByteDFA

    dfa = LazyByteDFA.from_regex(regex, members=True)
    return lambda text: dfa.matches(text.encode("utf-8"))


def test_shared_subexpressions_keep_the_lazy_regex_linear_in_the_schema():
    sizes = {depth: len(build_regex_from_schema(nested_lists(depth), automaton="lazy")) for depth in (4, 8, 16)}
    assert sizes[16] - sizes[8] < 2 * (sizes[8] - sizes[4]) + 200  # each level adds about the same
    eager = [len(build_regex_from_schema(nested_lists(d))) for d in (4, 8)]
    assert eager[1] > 10 * eager[0]  # the written-out regex doubles per level
    with pytest.raises(SchemaTooLargeError):
        build_regex_from_schema(nested_lists(40))
    assert len(build_regex_from_schema(nested_lists(40), automaton="lazy")) < 20_000


def test_a_shared_regex_means_what_the_written_out_one_means():
    import jsonschema

    schema = nested_lists(3)
    eager = re.compile(build_regex_from_schema(schema))
    shared = build_regex_from_schema(schema, automaton="lazy")
    assert "(?@ref:" in shared
    accepts = lazy_accepts(shared)
    leaf = {"name": "x", "n": 3}
    texts = []
    for value in [
        {"name": "a"},
        {"name": "a", "children": []},
        {"name": "a", "children": [{"name": "b", "children": []}]},
        {"name": "a", "children": [{"name": "b", "children": [{"name": "c", "children": [leaf, leaf]}]}]},
        {"name": "a", "children": [{"children": []}]},
        {"name": "a", "children": [leaf]},
        {"name": 1},
        {"name": "a", "children": [{"name": "b", "children": [{"name": "c", "children": [{"name": "d", "n": "x"}]}]}]},
    ]:
        texts += [json.dumps(value), json.dumps(value, separators=(",", ":"))]
    for text in texts:
        assert accepts(text) == bool(eager.fullmatch(text)), text
        assert not accepts(text) or jsonschema.Draft202012Validator(schema).is_valid(json.loads(text))


def test_two_compiled_schemas_put_together_keep_their_meanings():
    """Definitions are named by a hash of their text: regexes joined (a structural tag's
    tools) never redefine a name to mean something else."""
    a = build_regex_from_schema({"type": "array", "items": {"enum": ["a" * 70]}}, automaton="lazy")
    b = build_regex_from_schema({"type": "array", "items": {"enum": ["b" * 70]}}, automaton="lazy")
    accepts = lazy_accepts(f"(?:{a})\\|(?:{b})")
    assert accepts(json.dumps(["a" * 70]) + "|" + json.dumps(["b" * 70]))
    assert not accepts(json.dumps(["b" * 70]) + "|" + json.dumps(["b" * 70]))


@pytest.mark.parametrize("regex", ["(?@ref:0123)", "(?@def:0123(a))(?@ref:0123)"])
def test_a_users_regex_cannot_define_or_refer(regex):
    from minisglang.constrained.lazy_regex import RegexError, RegexPool
    from minisglang.constrained.lazy_regex_parser import parse_regex

    with pytest.raises(RegexError, match="invalid regex"):
        parse_regex(regex, RegexPool())
    if regex.startswith("(?@ref"):
        with pytest.raises(RegexError, match="comes before its"):
            parse_regex(regex, RegexPool(), members=True)


def test_a_wide_object_is_linear_on_the_lazy_automaton():
    """1500 optional properties in schema order: each tail of the member list is one
    shared sub-expression (the written-out regex repeats them: O(n^2), refused above)."""
    sizes = [
        len(
            build_regex_from_schema(
                {"type": "object", "properties": {f"key{i}": {"type": "string"} for i in range(n)}}, automaton="lazy"
            )
        )
        for n in (750, 1500)
    ]
    assert sizes[1] < 2.2 * sizes[0] and sizes[1] < 400_000
    small = {"type": "object", "properties": {f"k{i}": {"type": "integer"} for i in range(5)}, "required": ["k2"]}
    eager = re.compile(build_regex_from_schema(small))
    accepts = lazy_accepts(build_regex_from_schema(small, automaton="lazy"))
    for keys in [[2], [0, 2], [2, 4], [0, 1, 2, 3, 4], [1], [], [2, 1], [0, 2, 2]]:
        text = json.dumps({f"k{i}": i for i in keys}) if len(set(keys)) == len(keys) else '{"k0": 0, "k2": 2, "k2": 2}'
        assert accepts(text) == bool(eager.fullmatch(text)), text


# ---------------------------------------------------------------------------------------
# A `$ref` is compiled once per expansion depth, not once per use or per path (issue 16
# item 1: compile cost follows the schema). Shared text alone kept the lazy regex small
# but not its compile: 500 uses of a 2,000-value enum took 6 s, and `mutual_objects(3)`
# (429 characters) ran for minutes at max_ref_depth 5, no limit ever reached.
# ---------------------------------------------------------------------------------------
def mutual_objects(k: int) -> dict:
    """k object definitions, each with an optional property referring to every definition:
    k^(5k) paths down to max_ref_depth 5, but only (5 + 1)^k different expansion depths."""
    defs = {
        f"d{i}": {"type": "object", "properties": {f"p{j}": {"$ref": f"#/$defs/d{j}"} for j in range(k)}}
        for i in range(k)
    }
    return {"$defs": defs, "$ref": "#/$defs/d0"}


def self_referring(children: int) -> dict:
    node = {"type": "object", "properties": {f"c{j}": {"$ref": "#/$defs/n"} for j in range(children)}}
    return {"$defs": {"n": node}, "$ref": "#/$defs/n"}


def count_calls(monkeypatch, name: str) -> list:
    """A list that grows by one at each call of _SchemaCompiler.`name`."""
    from minisglang.constrained.json_schema.compiler import _SchemaCompiler

    calls, real = [], getattr(_SchemaCompiler, name)

    def counted(self, *args, **kwargs):
        calls.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(_SchemaCompiler, name, counted)
    return calls


@pytest.mark.parametrize("automaton", ["lazy", "eager"])
def test_a_ref_used_many_times_compiles_its_target_once(monkeypatch, automaton):
    enum = {"enum": [f"value {i}" for i in range(300)]}
    schema = {
        "$defs": {"big": enum},
        "type": "object",
        "required": [f"k{i}" for i in range(100)],
        "properties": {f"k{i}": {"$ref": "#/$defs/big", "description": f"key {i}"} for i in range(100)},
    }
    enums = count_calls(monkeypatch, "_enum")
    regex = build_regex_from_schema(schema, automaton=automaton)
    assert len(enums) == 1
    if automaton == "lazy":  # the enum is written once, its name used 100 times
        assert regex.count('"value 299"') == 1
        (name,) = re.findall(r'\(\?@def:(\w+)\(\(\?:"value 0"', regex)
        assert regex.count(f"(?@ref:{name})") == 100


@pytest.mark.parametrize("automaton", ["lazy", "eager"])
def test_a_recursion_compiles_its_definition_once_per_depth(monkeypatch, automaton):
    """8 optional children of the same definition: 8^4 paths reach the fifth expansion,
    the compiler builds one object per depth."""
    objects = count_calls(monkeypatch, "_object")
    outcome, _ = peak_bytes_of(lambda: build_regex_from_schema(self_referring(8), automaton=automaton))
    assert len(objects) == 5
    if automaton == "lazy":
        assert isinstance(outcome, str) and len(outcome) < 10_000
    else:  # written out, each level holds the one below 8 times
        assert isinstance(outcome, SchemaTooLargeError)


def test_mutual_recursion_compiles_once_per_combination_of_depths(monkeypatch):
    objects = count_calls(monkeypatch, "_object")
    regex = build_regex_from_schema(mutual_objects(3), automaton="lazy")
    assert len(objects) <= 3 * 6**3 and len(regex) < 100_000


def recursion_using_a_definition() -> dict:
    """SARIF's shape: an `exception` holds inner exceptions (a recursion) and a `stack`,
    a definition that never refers back to `exception`."""
    stack = {"type": "object", "properties": {"frames": {"type": "array", "items": {"type": "string"}}}}
    exception = {
        "type": "object",
        "properties": {
            "message": {"type": "string"},
            "stack": {"$ref": "#/$defs/stack"},
            "inner": {"type": "array", "items": {"$ref": "#/$defs/exception"}},
        },
    }
    return {"$defs": {"stack": stack, "exception": exception}, "$ref": "#/$defs/exception"}


def test_a_definition_inside_a_recursion_compiles_once():
    """`exception` is compiled once per depth of its own recursion (depths 0-4 at
    max_ref_depth 5: the sixth level is cut); `stack` reads no depth, so it is compiled
    once, not once per level of `exception` (5 + 5 objects when keyed by every depth)."""
    objects = count_calls(monkeypatch := pytest.MonkeyPatch(), "_object")
    try:
        build_regex_from_schema(recursion_using_a_definition(), automaton="lazy")
    finally:
        monkeypatch.undo()
    assert len(objects) == 5 + 1


def recursion_with_an_inline_definition() -> dict:
    """The same shape, `stack` written inline in `exception` instead of behind a $ref."""
    schema = recursion_using_a_definition()
    schema["$defs"]["exception"]["properties"]["stack"] = schema["$defs"].pop("stack")
    return schema


def test_an_inline_subschema_inside_a_recursion_compiles_once():
    """A subschema that is no $ref is met once per level of the recursion around it too;
    it reads no depth, so it is compiled once (5 + 5 objects when compiled at each level)."""
    objects = count_calls(monkeypatch := pytest.MonkeyPatch(), "_object")
    try:
        build_regex_from_schema(recursion_with_an_inline_definition(), automaton="lazy")
    finally:
        monkeypatch.undo()
    assert len(objects) == 5 + 1


def test_the_lazy_definitions_count_against_the_limit():
    """Each definition is short, but (5 + 1)^6 combinations of depths make one each: their
    total is checked as they are made, not only the final regex."""
    error, peak = peak_bytes_of(
        lambda: build_regex_from_schema(mutual_objects(6), automaton="lazy", max_regex_chars=100_000)
    )
    assert isinstance(error, SchemaTooLargeError), error
    assert "max_regex_chars=100,000" in str(error) and str(error).startswith("the schema at #/properties/p0")
    assert peak < PEAK_LIMIT


def test_compiling_each_ref_once_changes_no_regex(monkeypatch):
    """The suite's schemas (some with an `$id` below the root: only $refs are kept there),
    the linked-data shape and the recursions above (at a depth the compile-per-use took
    under a second for), both automata: the same regex, or the same error, as when every
    use of a $ref (and every subschema) was compiled again."""
    from minisglang.constrained.json_schema.compiler import _SchemaCompiler

    def build(schema, **options):
        try:
            return build_regex_from_schema(schema, **options)
        except (UnsupportedSchemaError, ValueError) as error:
            return f"{type(error).__name__}: {error}"

    schemas = [
        (group["schema"], {}) for f in sorted(SUITE.glob("*.json")) for group in json.loads(f.read_text("utf-8"))
    ]
    schemas += [
        (linked_data_schema(), {"max_ref_depth": 2}),
        (nested_lists(5), {}),
        (mutual_objects(3), {"max_ref_depth": 3}),
        (self_referring(4), {"max_ref_depth": 4}),
        (recursion_using_a_definition(), {}),
        (recursion_with_an_inline_definition(), {}),
    ]
    for automaton in ("lazy", "eager"):
        once = [build(s, automaton=automaton, **o) for s, o in schemas]
        with monkeypatch.context() as m:
            m.setattr(_SchemaCompiler, "_value_key", lambda self, schema, path: None)
            every_use = [build(s, automaton=automaton, **o) for s, o in schemas]
        assert once == every_use, automaton


def test_the_fsm_backend_refuses_a_recursion_that_outgrows_its_limit_by_name():
    """The backend gives the compiler its own max_regex_chars (100,000), so the refusal
    names the subschema and the option, after a tenth of the work the compiler's default
    limit would let it do."""
    import minisglang as sgl
    from minisglang.backends.fsm_backend import FSMBackend
    from minisglang.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(sgl.DEFAULT_MODEL_PATH)
    backend = FSMBackend(tok, tok.vocab_size)
    try:
        with pytest.raises(
            SchemaTooLargeError,
            match=r"^the schema at #/properties/p0\S* needs a regex of more than "
            r"max_regex_chars=100,000 characters",
        ):
            backend.compile("json_schema", json.dumps(mutual_objects(6)))
        assert backend.compile("json_schema", json.dumps(mutual_objects(3))).fsm.index.num_states == 1
    finally:
        backend.shutdown()
