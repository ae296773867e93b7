"""The lazy token FSM's shortcut rows (constrained/lazy_row_shortcuts.py) and long-token walks
(constrained/lazy_token_fsm.py) against the eager index and the brute-force mask oracle: a
shortcut may only change how a row is computed, never which tokens it holds.

- `_row_from_strings`: a state whose matches begin with literal text (an enum's values, an
  object's keys) is walked through the vocabulary trie along its syntax tree, without
  automaton states for the positions inside the text;
- `_row_from_closure`: a state that keeps reading a wide byte set (an e-mail's domain
  label) allows every token made of that set at once and walks the others one by one;
- `_walk_long`: the tokens longer than the trie, each walked from the state clipped to its
  length (a `{0,300}` string is `C*` for a 44-byte token), where a big bound is near.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from real_tokenizers import bundled
from test_lazy_automaton import LONG_VOCAB, SMALL_VOCAB, compare_along_walks
from test_regex_dfa import REGEXES

from minisglang.constrained.json_schema import build_regex_from_schema
from minisglang.constrained.lazy_token_fsm import compile_lazy_token_fsm
from minisglang.constrained.token_fsm import ConstraintError, compile_token_fsm

ENUM_SHAPES = [
    r'"(Rome_1|item_(5|9|15)|北京_3|value_30)", ?"x"',  # values, then the rest of an object
    r"(ab|a1|b|zz)(1|z)*",  # a string of A is a prefix of another; T loops
    r'(ab|a"|b)( |a)*"',  # LONG_VOCAB's long tokens go on into T
    r"(a|b1|)z",  # ε among the strings: tokens may start in T directly
    r"((a|b)(1|z)|ab1)\n?",  # nested alternations; a nullable tail
    r"(é|中a|中b)+",  # multi-byte characters, the alternation repeated
    r"x(a{0,2}|b)",  # not literal strings (a repetition): the walk decides
    r"(" + "a" * 40 + r'|b)"',  # a value longer than the trie (LONG_VOCAB's long tokens)
]


def spellable(pattern: str, vocab) -> bool:
    try:
        compile_token_fsm(pattern, vocab, 10_000)
    except ConstraintError:  # the eager index says the vocabulary cannot spell it
        return False
    return True


def compare_on_every_vocabulary(pattern: str, bundled_walks: int, bundled_steps: int) -> None:
    """Rows along random walks equal the eager index's on the small and long test vocabularies
    (where they can spell the pattern) and, with the brute-force oracle at every step, on the
    bundled one."""
    for vocab in (SMALL_VOCAB, LONG_VOCAB):
        if spellable(pattern, vocab):
            compare_along_walks(pattern, vocab, walks=8, steps=15)
    compare_along_walks(pattern, bundled(), walks=bundled_walks, steps=bundled_steps, oracle_every=1)


@pytest.fixture
def strings_everywhere(monkeypatch):
    """Let `_row_from_strings` take every state that begins with literal text, however few
    strings are open (FAN_OUT 1)."""
    import minisglang.constrained.lazy_row_shortcuts as shortcuts

    monkeypatch.setattr(shortcuts, "FAN_OUT", 1)


@pytest.mark.parametrize("everywhere", [False, True])
@pytest.mark.parametrize("pattern", ENUM_SHAPES)
def test_rows_of_alternations_of_strings_equal_the_eager_index(request, pattern, everywhere):
    if everywhere:
        request.getfixturevalue("strings_everywhere")
    compare_on_every_vocabulary(pattern, bundled_walks=3, bundled_steps=15)


def test_rows_of_an_objects_many_keys_equal_the_eager_index_on_the_bundled_vocabulary():
    """An object with 12 properties: after `{"` and after each `, "` the keys fan out, and
    the literal walk stops where a key's value starts (`":`, an optional space, the value)."""
    rng = random.Random(11)
    kinds = [
        {"type": "string"},
        {"type": "integer"},
        {"type": "boolean"},
        {"enum": ["on", "off", 3]},
        {"type": "array", "items": {"type": "number"}},
    ]
    names = ["name", "id", "idle", "value", "values", "debug", "de", "status", "北京", "a b", "items", "x"]
    schema = {"type": "object", "properties": {n: rng.choice(kinds) for n in names}, "required": names[:3]}
    compare_along_walks(build_regex_from_schema(schema), bundled(), walks=6, steps=40, oracle_every=1)


def test_rows_of_a_json_enum_equal_the_eager_index_on_the_bundled_vocabulary():
    rng = random.Random(7)
    values = [f"{rng.choice(['alpha', 'Rome', '北京', 'item'])}_{i}" for i in range(40)]
    schema = {
        "type": "object",
        "properties": {"a": {"enum": values}, "b": {"enum": values[:5]}, "c": {"type": "integer"}},
        "required": ["a", "b", "c"],
    }
    compare_along_walks(build_regex_from_schema(schema), bundled(), walks=6, steps=30, oracle_every=1)


@pytest.mark.parametrize("count", [4, 200, 600])
def test_an_enum_row_builds_no_state_for_the_values_positions(count):
    """The start row of an alternation of FAN_OUT values or more reads the values along the
    syntax tree: no derivative, and no automaton state but the start and the tail's. Below
    FAN_OUT the compiled walk through the states does it; the row is the same."""
    import minisglang.constrained.lazy_row_shortcuts as shortcuts

    tokenizer = bundled()
    values = [f"{chr(97 + i % 26)}{i:03d}" for i in range(count)]
    fsm = compile_lazy_token_fsm("(" + "|".join(values) + ")!", tokenizer, 4096)
    index = fsm.index
    if count >= shortcuts.FAN_OUT:
        assert index.dfa.fills == 0 and index.dfa.num_states <= 2
    else:
        assert index.dfa.fills > 0
    data = {t: b for t, b in enumerate(tokenizer.token_bytes) if b}
    expected = {t for t, b in data.items() if any(f"{v}!".encode().startswith(b) for v in values)}
    assert set(index.allowed_token_ids(index.initial_state)) == expected


DOMAIN = r"[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+"
WIDE_SHAPES = [
    DOMAIN + r'"\}',  # an e-mail's domain, then the end of an object
    r"[^x]*x[ab]",  # all but one byte, then a tail that starts with it
    r"([^\n]|\n[ab]){0,3}1",  # a bounded part: B shrinks where the bound ends
    r"[ -~]+(\n|中)*",  # printable ASCII, then multi-byte characters
]


@pytest.mark.parametrize("pattern", WIDE_SHAPES)
def test_rows_of_states_that_keep_reading_a_wide_byte_set_equal_the_eager_index(pattern):
    """`_row_from_closure` (tokens made of the byte set allowed at once, the others walked)."""
    compare_on_every_vocabulary(pattern, bundled_walks=4, bundled_steps=20)


def test_an_e_mail_domain_row_comes_from_its_byte_set():
    tokenizer = bundled()
    fsm = compile_lazy_token_fsm(DOMAIN + '"', tokenizer, 4096)
    index = fsm.index
    state = index.next_state(index.initial_state, tokenizer.encode("example")[0])
    assert index._row_from_closure(state) is not None
    compare_along_walks(DOMAIN + '"', tokenizer, walks=4, steps=20, oracle_every=1)


WORDS = st.lists(st.text(alphabet="ab1z", min_size=0, max_size=4), min_size=2, max_size=6)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(WORDS, REGEXES)
def test_generated_alternations_then_any_regex_equal_the_eager_index(words, tail):
    pattern = "(" + "|".join(words) + ")" + f"(?:{tail})"
    if spellable(pattern, SMALL_VOCAB):
        compare_along_walks(pattern, SMALL_VOCAB, walks=3, steps=10)


@pytest.fixture
def closures_everywhere(monkeypatch):
    """Let `_row_from_closure` take every state it can, however narrow its byte set."""
    import minisglang.constrained.lazy_row_shortcuts as shortcuts

    monkeypatch.setattr(shortcuts, "CLOSURE_BYTES", 1)


LONG_SHAPES = [
    r' ?"[^"]{0,300}" ?"[^"]{0,80}"',  # two string values, bounds above LONG_VOCAB's tokens
    r'( {0,80}|a{3,90})"',  # the long runs of spaces against bounds between their lengths
    r'"[ a-]{0,70}" ?"[ a-]{0,500}"x?',  # every long token fits the class
    r'"[ a]{40,90}"',  # a minimum the clip lowers
]


@pytest.mark.parametrize("pattern", LONG_SHAPES)
def test_rows_with_long_tokens_walked_from_clipped_states_equal_the_eager_index(monkeypatch, pattern):
    """LONG_VOCAB's tokens of 34-101 bytes in states with bounds between their lengths
    (MAX_LONG_CLIP lowered to 64: the vocabulary's longest token is 101 bytes)."""
    import minisglang.constrained.lazy_token_fsm as lazy

    monkeypatch.setattr(lazy, "MAX_LONG_CLIP", 64)
    clipped = []
    original = lazy.LazyStateIndex._bound_near
    monkeypatch.setattr(
        lazy.LazyStateIndex, "_bound_near", lambda self, node: clipped.append(original(self, node)) or clipped[-1]
    )
    compare_along_walks(pattern, LONG_VOCAB, walks=8, steps=40)
    assert any(clipped)  # some long tokens were walked from clipped states


@pytest.fixture
def long_walks_everywhere(monkeypatch):
    """Every separate walk of the long tokens goes token by token from clipped states."""
    import minisglang.constrained.lazy_token_fsm as lazy

    monkeypatch.setattr(lazy, "MAX_LONG_CLIP", 1 << 20)
    monkeypatch.setattr(lazy.LazyStateIndex, "_bound_near", lambda self, node: True)


@pytest.mark.parametrize(
    "everywhere,vocab",
    [
        ("closures_everywhere", SMALL_VOCAB),
        ("long_walks_everywhere", LONG_VOCAB),
        ("strings_everywhere", SMALL_VOCAB),
        ("strings_everywhere", LONG_VOCAB),
    ],
)
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(REGEXES)
def test_generated_regexes_with_a_row_path_everywhere_equal_the_eager_index(request, everywhere, vocab, pattern):
    """`_row_from_closure` or `_row_from_strings` on every state it can take, or every long
    walk from clipped states."""
    request.getfixturevalue(everywhere)
    if spellable(pattern, vocab):
        compare_along_walks(pattern, vocab, walks=3, steps=12)
