"""The lazy token FSM's shared and shortcut rows (constrained/lazy_row_shortcuts.py) and
long-token walks (constrained/lazy_token_fsm.py) against the eager index and the brute-force
mask oracle: a shortcut may only change how a row is computed, never which tokens it holds.

- clipped states (RegexPool.clip) read like the state up to their length, and the positions
  of a long bounded string share one walk;
- `_row_from_head`, `_row_from_alternatives`, `_row_from_repeat` (per-token repetition
  counts, also prepared with the vocabulary), and rows shared by two grammars (SHARED_ROWS);
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
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from real_tokenizers import bundled
from test_lazy_automaton import SMALL_VOCAB, Vocab, compare_along_walks, sample_match
from test_regex_dfa import ALL_STRINGS, REGEXES

from minisglang.constrained.json_schema import build_regex_from_schema
from minisglang.constrained.lazy_byte_dfa import LazyByteDFA
from minisglang.constrained.lazy_regex import RegexPool
from minisglang.constrained.lazy_regex_parser import parse_regex
from minisglang.constrained.lazy_token_fsm import compile_lazy_token_fsm
from minisglang.constrained.token_fsm import ConstraintError, compile_token_fsm

LONG_VOCAB = Vocab(
    [None, b'"', b"a", b" ", b"  ", b"ab", b" " * 40, b" " * 64, b"a" * 33 + b'"', b" " * 100 + b'"', b'a"', b"-" * 48],
    eos_token_id=0,
)

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


# ---------------------------------------------------------------------------------------
# Rows shared between states: clipped bounds, a head's row, alternatives, other grammars
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "pattern", [r'"[^"]{0,60}"', r"(ab|c){3,40}x", r"a{0,50}b|a{20,30}c", r"(a{2,}b){0,45}", r"((a|bb){5,70}1)*z?"]
)
def test_a_clipped_node_reads_like_the_node_up_to_its_length(pattern):
    """RegexPool.clip(node, L): every string of at most L bytes is viable (and accepted)
    in the clipped node exactly when it is in the node, in every state along the way."""
    pool = RegexPool()
    dfa = LazyByteDFA(parse_regex(pattern, pool), pool)
    rng = random.Random(pattern)
    length = 8
    state = dfa.initial
    for _ in range(60):  # states along a random walk
        clipped = dfa._state(pool.clip(dfa.nodes[state], length))
        for s in ALL_STRINGS[:400] + [sample_match(dfa, rng, 12).decode("latin-1")[:length] for _ in range(5)]:
            data = s.encode("latin-1", "replace")[:length]
            a, b = dfa.walk_bytes(state, data), dfa.walk_bytes(clipped, data)
            assert (a >= 0) == (b >= 0) and (a < 0 or dfa.is_final(a) == dfa.is_final(b)), (pattern, state, data)
        allowed = dfa.allowed_bytes(state).tolist()
        if not allowed:
            break
        state = dfa.step(state, rng.choice(allowed))


def test_the_positions_of_a_long_bounded_string_share_one_walk():
    tokenizer = bundled()
    fsm = compile_lazy_token_fsm('"[^"]{0,1000}"', tokenizer, 4096)
    index = fsm.index
    state = index.initial_state
    for token in tokenizer.encode('"' + "hello world " * 30):
        state = index.next_state(state, token)
        index.row(state)
    assert state >= 0
    # 360 characters in, every token's state has a row, but the trie was walked a few times.
    assert index.num_states > 50 and len(index.short_rows) < 8


@pytest.mark.parametrize("pattern", [r'"[^"]{0,80}"', r'"[^"]{0,200}"x?', r'"[ a]*"', r'( {0,70}|a{3,90})"'])
def test_tokens_longer_than_the_trie_in_bounded_strings_match_the_eager_index(pattern):
    compare_along_walks(pattern, LONG_VOCAB, walks=6, steps=40)


@pytest.fixture
def share_everything(monkeypatch):
    """Make every head and alternative take the shared-row paths, whatever its size."""
    import minisglang.constrained.lazy_row_shortcuts as shortcuts
    import minisglang.constrained.lazy_token_fsm as lazy

    monkeypatch.setattr(shortcuts, "PERMISSIVE", 0)
    lazy.SHARED_ROWS.clear()
    yield
    lazy.SHARED_ROWS.clear()


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(REGEXES)
def test_rows_built_from_heads_and_alternatives_equal_the_eager_index(share_everything, pattern):
    try:
        compile_token_fsm(pattern, SMALL_VOCAB, 10_000)
    except ConstraintError:
        return
    compare_along_walks(pattern, SMALL_VOCAB, walks=3, steps=12)


@pytest.mark.parametrize(
    "pattern",
    [
        r"a*b",
        r"(ab)*1",
        r"[ab]*\n?1",
        r"(a|b1)*z",
        r"((a|b)*1|z)*b",
        r"(a{2,9}b?){1,5}1",
        r"(é|a)*中",
        r"(b|1)?(a*|z)1",
    ],
)
def test_heads_and_alternatives_on_chosen_shapes(share_everything, pattern):
    compare_along_walks(pattern, SMALL_VOCAB, walks=8, steps=15)


HOSTNAME = r"[0-9a-z]*(-?[0-9a-z]+)*"


def test_a_head_takes_the_next_elements_while_almost_any_token_could_leave_it():
    """`[0-9a-z]*` then `(-?[0-9a-z]+)*"`: almost every token holds a byte the rest can
    start with, so the one-element head does not fit, and each such state's row was a
    walk of the whole trie (1-3 ms at 65k, the slowest rows there). Two elements make the
    head (its row shared, walked once), and only the tokens holding `"` are walked."""
    tokenizer = bundled()
    for tail in ['"', '",x', '"}']:
        fsm = compile_lazy_token_fsm(HOSTNAME + tail, tokenizer, 4096)
        index = fsm.index
        head = index.dfa.pool.concat_all([parse_regex(HOSTNAME, index.dfa.pool)])
        assert head.uid in index.dfa.state_of and index.dfa.state_of[head.uid] in index._all_rows
        compare_along_walks(HOSTNAME + tail, tokenizer, walks=4, steps=12, oracle_every=1)


JSON_CHAR = r'([^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})'


@pytest.mark.parametrize(
    "pattern",
    [
        r'"[^"]{0,5}"',
        JSON_CHAR + r'{0,3}"',
        JSON_CHAR + r'{2,7}"x',
        JSON_CHAR + "*",
        r"(é|a){1,3}b",
        r"(a|ab){0,4}1",
        r"(ab|b){0,6}",
        r"[ab]{0,2}(1|z)",
        # a nullable body: `(C*)?` reads any number of C in its one repetition
        r"(.*)?",
        r"((.)*)?",
        r"([^x]*){0,2}",
        r"([^x]?){0,2}",
    ],
)
def test_rows_of_bounded_repetitions_from_token_counts_equal_the_eager_index(share_everything, pattern):
    """A repetition's row from its per-token counts (`_row_from_repeat`), bit for bit; a body
    that is not prefix-free (a|ab) falls back to the walk."""
    if '"' not in pattern:
        compare_along_walks(pattern, SMALL_VOCAB, walks=8, steps=15)
    compare_along_walks(pattern, bundled(), walks=3, steps=12, oracle_every=1)


def test_repetition_counts_are_per_token_and_refuse_ambiguous_bodies():
    tokenizer = bundled()
    fsm = compile_lazy_token_fsm(r"[a-z]{0,3}", tokenizer, 4096)
    index, pool = fsm.index, fsm.index.dfa.pool
    counts = index._repetitions(index.dfa.nodes[index.initial_state].parts[0])
    for t, data in enumerate(tokenizer.token_bytes):
        assert counts[t] == (len(data) if data and re.fullmatch(rb"[a-z]+", data) else -1), (t, data)
    assert index._repetitions(parse_regex("a|ab", pool)) is None  # "a" then "b": one repetition or two?


def test_counts_prepared_with_the_vocabulary_equal_the_counts_a_grammar_computes_and_outlive_rows():
    """prepare_vocabulary (a lazy backend's start) stores the repetition counts a grammar's
    first `C{lo,hi}` row would compute: the same numbers (digits against a fullmatch oracle,
    a JSON string's character against a fresh grammar's own count), and rows written
    afterwards, however many, do not push them out."""
    import minisglang.constrained.lazy_token_fsm as lazy
    from minisglang.backends.fsm_backend import LAZY_PREPARED_BODIES

    tokenizer = bundled()
    lazy.SHARED_ROWS.clear()
    try:
        fresh = {}
        for body in LAZY_PREPARED_BODIES:  # computed lazily, each on a cleared cache
            lazy.SHARED_ROWS.clear()
            index = compile_lazy_token_fsm(f"(?:{body}){{0,7}}x", tokenizer, 4096).index
            fresh[body] = index._repetitions(index.dfa.nodes[index.initial_state].parts[0].parts[0]).copy()
        lazy.SHARED_ROWS.clear()
        lazy.prepare_vocabulary(tokenizer, 4096, LAZY_PREPARED_BODIES)
        for i in range(3 * lazy.SHARED_ROWS.capacity):  # rows of other grammars fill the row store
            lazy.SHARED_ROWS.put((None, 0, 0, "row", str(i)), object())
        prepared = {key[-1]: counts for key, counts in lazy.SHARED_ROWS._counts.items()}
        assert len(prepared) == len(LAZY_PREPARED_BODIES)
        for body, counts in fresh.items():
            pool = lazy.RegexPool()
            assert np.array_equal(prepared[pool.key(lazy.parse_regex(body, pool))], counts), body
        digits = prepared[lazy.RegexPool().key(lazy.parse_regex("[0-9]", lazy.RegexPool()))]
        for t, data in enumerate(tokenizer.token_bytes):
            assert digits[t] == (len(data) if data and re.fullmatch(rb"[0-9]+", data) else -1), (t, data)
    finally:
        lazy.SHARED_ROWS.clear()


def test_rows_shared_by_two_grammars_are_the_same_objects_and_exact(share_everything):
    import minisglang.constrained.lazy_token_fsm as lazy

    tokenizer = bundled()
    first = compile_lazy_token_fsm(r'\{"a": "[^"]{0,40}"\}', tokenizer, 4096)
    first.walk(tokenizer.encode('{"a": "xy'))
    stored = len(lazy.SHARED_ROWS._rows)
    assert stored > 0
    compare_along_walks(r'\[1, "[^"]{0,40}"\]', tokenizer, walks=2, steps=25, oracle_every=1)
    compare_along_walks(r'\{"a": "[^"]{0,40}"\}', tokenizer, walks=2, steps=25, oracle_every=1)


def test_the_literal_text_checks_are_the_pools_and_run_compiled_with_it():
    """`_row_from_strings` asks of every new row whether it begins with literal text
    (`literal_heads`, strict) and whether that text fans out (`fans_out`); interpreted, a
    row that does not fit paid ~40 us to find out, ~15% of the slowest 3% of steps at 4k
    (benchmarks/results/compile.md). They are lazy_regex's, compiled with the pool."""
    from minisglang.constrained import compiled_build, lazy_regex

    pool = RegexPool()
    keys = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
    for count, fits in [(7, False), (8, True)]:
        node = parse_regex("(" + "|".join(keys[:count]) + ')":', pool)
        steps = [0]
        heads = lazy_regex.literal_heads((node,), steps, strict=True)
        assert heads is not None and len(heads) == count
        assert lazy_regex.fans_out(heads, steps, 8, 4) is fits
    # A match that begins with a byte class (a number) is not literal text.
    assert lazy_regex.literal_heads((parse_regex("(true|[0-9]+)", pool),), [0], strict=True) is None
    if compiled_build.active == "compiled":
        assert type(lazy_regex.literal_heads).__name__ == "builtin_function_or_method"
