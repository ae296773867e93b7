"""The lazy automaton (constrained/lazy_regex.py, lazy_token_fsm.py, lazy_rows.py) against its
oracles. (Its shared and shortcut rows: test_lazy_row_shortcuts.py; the compiled loops of the
row walk: test_lazy_trie_walk.py; Python's shorthand classes: test_python_regex.py.)

- language: `re.fullmatch` (Python's Unicode dialect, like the eager DFA) on every short string over a
  small alphabet and on long strings, for the regexes of the behaviour suite, of
  test_regex_dfa.py and a hypothesis generator;
- token rows: the eager TokenIndex along random walks (same allowed tokens, same packed
  rows, same `is_complete`, same jump-forward strings), and the mask oracle: each step's
  mask bit by bit against running every token's bytes through the automaton;
- laziness, sharing, limits and bad input.
"""

from __future__ import annotations

import collections
import gc
import random
import re
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from real_tokenizers import bundled
from test_constrained_generation import CASES
from test_regex_dfa import ALL_STRINGS, KNOWN, REGEXES

from minisglang.constrained.bitmask import unpack_bits
from minisglang.constrained.lazy_byte_dfa import LazyByteDFA
from minisglang.constrained.lazy_regex import AutomatonLimitError, RegexError, RegexPool
from minisglang.constrained.lazy_regex_parser import parse_regex
from minisglang.constrained.lazy_token_fsm import LazyLimits, compile_lazy_token_fsm
from minisglang.constrained.regex_ast import Shared, alt, chars, concat, lit, render, repeat
from minisglang.constrained.regex_dfa import ByteDFA, _strip_anchors, compile_regex, shown_regex
from minisglang.constrained.token_fsm import ConstraintError, compile_token_fsm
from minisglang.constrained.token_index import VocabTrie
from minisglang.constrained.work_slices import OutOfTime, checkpoint, deadline

BEHAVIOUR_REGEXES = sorted({regex for regex, _ in CASES})
ALL_KNOWN = sorted(set(BEHAVIOUR_REGEXES) | set(KNOWN))


def lazy_dfa(pattern: str, **limits) -> LazyByteDFA:
    pool = RegexPool()
    return LazyByteDFA(parse_regex(pattern, pool), pool, **limits)


def accepts(dfa: LazyByteDFA, text: str) -> bool:
    return dfa.matches(text.encode("utf-8"))


def shortest_completion(allowed, step, is_final, state: int) -> bytes:
    """The bytes of a shortest walk from `state` to an accepting state (breadth first;
    every state of both automata can reach one)."""
    parents, queue = {state: None}, collections.deque([state])
    while queue:
        s = queue.popleft()
        if is_final(s):
            path = bytearray()
            while parents[s] is not None:
                s, byte = parents[s]
                path.append(byte)
            return bytes(reversed(path))
        for byte in allowed(s):
            t = step(s, byte)
            if t not in parents:
                parents[t] = (s, byte)
                queue.append(t)
    raise AssertionError(f"no accepting state reachable from state {state}")


def sample_match(dfa: LazyByteDFA, rng: random.Random, max_bytes: int) -> bytes:
    """A random byte string the automaton accepts: a random walk that stops when it may,
    completed by a shortest path once it has `max_bytes` (a random walk in `(.)*中` hits
    the three bytes of 中 about once in a million steps: it never ended)."""
    state, out = dfa.initial, bytearray()
    while True:
        allowed = dfa.allowed_bytes(state)
        if dfa.is_final(state) and (allowed.shape[0] == 0 or len(out) >= max_bytes or rng.random() < 0.05):
            return bytes(out)
        if len(out) >= max_bytes:
            return bytes(out) + shortest_completion(
                lambda s: dfa.allowed_bytes(s).tolist(), dfa.step, dfa.is_final, state
            )
        byte = int(rng.choice(allowed.tolist()))
        out.append(byte)
        state = dfa.step(state, byte)


def sample_eager_match(eager: ByteDFA, rng: random.Random, max_bytes: int) -> bytes:
    """A random byte string the eager byte DFA accepts (the same walk on its table)."""
    state, out = eager.initial, bytearray()
    while True:
        allowed = np.flatnonzero(eager.table[state] >= 0)
        if eager.is_final(state) and (allowed.shape[0] == 0 or len(out) >= max_bytes or rng.random() < 0.05):
            return bytes(out)
        if len(out) >= max_bytes:
            return bytes(out) + shortest_completion(
                lambda s: np.flatnonzero(eager.table[s] >= 0).tolist(),
                lambda s, b: int(eager.table[s, b]),
                eager.is_final,
                state,
            )
        byte = int(rng.choice(allowed.tolist()))
        out.append(byte)
        state = int(eager.table[state, byte])


def check_language(pattern: str, strings=ALL_STRINGS, long_walks: int = 5, long_oracle: str = "eager") -> None:
    """The lazy automaton accepts exactly what re.fullmatch accepts on `strings`, and on
    long random strings what the eager byte DFA accepts (re itself can backtrack for ages
    on a long non-match of a nested repetition such as `((a)*)*b`), or re for patterns
    without nested repetitions that the eager parser does not take (`long_oracle="re"`).
    The long strings are drawn from both sides: matches of the lazy automaton (the eager
    DFA must accept them) and, with the eager oracle, matches of the eager DFA (the lazy
    automaton must accept them), each also with one byte changed."""
    dfa = lazy_dfa(pattern)
    oracle = re.compile(pattern)
    for s in strings:
        assert accepts(dfa, s) == (oracle.fullmatch(s) is not None), (pattern, s)
    if long_oracle == "eager":
        eager = ByteDFA.from_char_dfa(compile_regex(pattern))
    else:
        eager = ReAsByteDFA(oracle)
    rng = random.Random(pattern)
    for _ in range(long_walks):
        data = sample_match(dfa, rng, max_bytes=300)
        data.decode("utf-8")  # a match is valid UTF-8
        assert eager.is_final(eager.walk_bytes(0, data)), (pattern, data)
        for _ in range(3):  # one byte changed: both automata still agree
            i = rng.randrange(len(data) + 1)
            mutated = (
                data[:i] + rng.choice([b"a", b"1", b" ", b'"', "\u00e9".encode(), "中".encode()[:2]]) + data[i + 1 :]
            )
            end = dfa.walk_bytes(dfa.initial, mutated)
            assert (end >= 0 and dfa.is_final(end)) == eager.is_final(eager.walk_bytes(0, mutated)), (pattern, mutated)
        if long_oracle == "eager":  # the other way round: a long match of the eager DFA
            data = sample_eager_match(eager, rng, max_bytes=300)
            assert dfa.matches(data), (pattern, data)


@dataclass
class ReAsByteDFA:
    """re.fullmatch behind the two ByteDFA calls check_language makes (state = the bytes)."""

    oracle: re.Pattern

    def walk_bytes(self, state: int, data: bytes) -> bytes:
        return data

    def is_final(self, data: bytes) -> bool:
        try:
            return self.oracle.fullmatch(data.decode("utf-8")) is not None
        except UnicodeDecodeError:
            return False


# ---------------------------------------------------------------------------------------
# Language
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("pattern", ALL_KNOWN)
def test_known_regexes_accept_exactly_what_re_fullmatch_accepts(pattern):
    check_language(pattern, KNOWN.get(pattern, []) + ALL_STRINGS)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(REGEXES)
def test_generated_regexes_accept_exactly_what_re_fullmatch_accepts(pattern):
    check_language(pattern)


@pytest.mark.parametrize("pattern", [r"(.)*中", r"(.){2,}中", r"([^a])*é1"])
def test_long_walks_end_where_a_random_walk_would_not(pattern):
    """Found hanging the hypothesis test above (15 minutes at 100% CPU, then again under
    faulthandler): its long random walks only stopped in an accepting state."""
    check_language(pattern, ALL_STRINGS[:200])


@pytest.mark.parametrize(
    "pattern",
    [
        r"a{,3}",
        r"a{2,}b{,}",
        r"a{",
        r"a{}",
        r"x{3",
        r"(ab|a)*b?",
        r"[]a]+",
        r"[^]a]",
        r"[a-]+",
        r"[-a]",
        r"(?P<name>a|b)+",
        r"a*?b+?c??",
        r"\x41\101\0\u00e9\U0001F600\N{BULLET}",
        r"[\x00-\x1f\\]",
        r"[\b\t]",
        r"(?#a comment)ab",
        r"()a(|b)",
        r"[\s\S]{2}",
        r"\W\D",
        r"[^\w\s]",
        r"[\u4e00-\u9fa5]|[😀-🙏]",
        r".",
        r"\.\*\\",
    ],
)
def test_syntax_corners_match_re(pattern):
    strings = ALL_STRINGS + ["a{", "a{}", "x{3", "{", "A", "A\x01\x00é😀•", "\b\t", "]", "-", "😀", "•"]
    check_language(pattern, strings, long_walks=2, long_oracle="re")


def test_characters_are_utf8_byte_sequences():
    dfa = lazy_dfa("中")
    first = dfa.step(dfa.initial, "中".encode()[0])
    assert dfa.allowed_bytes(dfa.initial).tolist() == ["中".encode()[0]]
    assert dfa.allowed_bytes(first).tolist() == ["中".encode()[1]]  # in the middle of the character
    assert not dfa.is_final(first)
    # Surrogates have no UTF-8 encoding: a class of only surrogates matches nothing.
    with pytest.raises(RegexError, match="empty language"):
        parse_regex("[\ud800-\udfff]", RegexPool())


# ---------------------------------------------------------------------------------------
# Sharing (hash-consing) and laziness
# ---------------------------------------------------------------------------------------
def test_equal_subexpressions_are_one_node():
    pool = RegexPool()
    a = parse_regex(r'(\{"k": [0-9]+\}|null)', pool)
    b = parse_regex(r'(?:null|\{"k": [0-9]+\})', pool)  # same alternatives, other order
    assert a is b
    # A group used 200 times (an inlined $ref) costs its nodes once, plus the concat spine.
    ref = r'(?:\{"name": "[^"]*", "tags": \[(?:"[a-z]+"(?:, "[a-z]+")*)?\]\})'
    one = RegexPool()
    parse_regex(ref, one)
    many = RegexPool()
    parse_regex("\\[" + ", ".join([ref] * 200) + "\\]", many)
    assert len(many) < len(one) + 3 * 200 + 10


@pytest.mark.parametrize(
    "pattern", ALL_KNOWN + [r'"(?:[^"\\\x00-\x1f]|\\u[0-9a-f]{4})*"|[1-9][0-9]{0,17}|(北|\\u5317)']
)
def test_key_len_never_exceeds_the_key_text(pattern):
    """RegexPool.key refuses a node whose `key_len` passes the limit without writing the
    text, so `key_len` must be a lower bound (else rows would silently stop being shared)."""
    pool = RegexPool()
    root = parse_regex(pattern, pool)
    LazyByteDFA(root, pool).walk_bytes(0, b'"ab')  # derivatives too, not only parsed nodes
    for node in list(pool._table.values()):
        text = pool.key(node, limit=10**9)
        assert text is not None and node.key_len <= len(text)


@given(st.binary(max_size=12), st.binary(max_size=4))
def test_a_literal_is_the_concatenation_of_its_bytes(data, before):
    """`RegexPool.literal` (what lowering a tree's text uses) makes the nodes, in the same
    order, that concat_all of one byte set per byte makes: the same node, the same uids."""
    one, other = RegexPool(), RegexPool()
    for pool in (one, other):  # some nodes there already, so that found and new ones both occur
        pool.concat_all([pool.byte_set(1 << b) for b in before])
    node = one.literal(data)
    assert node is one.concat_all([one.byte_set(1 << b) for b in data])
    assert other.concat_all([other.byte_set(1 << b) for b in data]).uid == node.uid and len(other) == len(one)


def test_derivatives_of_a_star_stay_finite():
    dfa = lazy_dfa(r"((a|b)*c|(ab)+)*")
    rng = random.Random(0)
    state = dfa.initial
    for _ in range(2000):
        allowed = dfa.allowed_bytes(state).tolist()
        state = dfa.step(state, rng.choice(allowed))
    assert dfa.num_states < 20  # the DFA is small; the walk keeps meeting the same states


def test_a_dropped_automaton_leaves_no_cycles_to_collect():
    """r*'s derivative is r* itself, yet the derivatives are memoised in the pool (keyed by
    ints), not on the nodes: no node points back at another, so dropping a grammar frees it
    by reference counting, without a pass of Python's cyclic collector."""
    gc.collect()
    dfa = lazy_dfa(r"((a|b)*c|(ab)+)*")
    assert dfa.matches(b"abcabab") and not dfa.matches(b"abca")
    gc.disable()
    try:
        del dfa
        assert gc.collect() == 0
    finally:
        gc.enable()


@pytest.mark.parametrize(
    "pattern,text",
    [
        (r'"[^"]{0,1000}"', '"' + "x" * 1000 + '"'),  # maxLength: 1000
        ("a{1000000}", "a" * 50),  # beyond the eager limits
        ("(" + "|".join(f'"value{i:04d}"' for i in range(600)) + ")", '"value0599"'),  # a 600-value enum
    ],
)
def test_only_what_generation_reaches_is_built(pattern, text):
    tokenizer = bundled()
    fsm = compile_lazy_token_fsm(pattern, tokenizer, len(tokenizer.token_bytes))
    after_compile = fsm.index.dfa.num_states
    assert fsm.index.num_states == 1  # only the start state's token row
    end = fsm.walk(tokenizer.encode(text))
    assert end >= 0 and fsm.index.num_states <= len(text) + 1
    assert after_compile < 2000
    if pattern.startswith("a{"):
        assert not fsm.index.is_final(end) and fsm.index.dfa.num_states < 1000


# ---------------------------------------------------------------------------------------
# Token rows: the eager index and the mask oracle
# ---------------------------------------------------------------------------------------
@dataclass
class Vocab:
    token_bytes: list
    eos_token_id: int


# A small vocabulary over the generated regexes' alphabet: single bytes, multi-character
# tokens, tokens that end or start inside a character, an unusable special, EOS.
SMALL_VOCAB = Vocab(
    [
        None,
        b"a",
        b"b",
        b"1",
        b"z",
        b"\n",
        "é".encode(),
        "中".encode(),
        b"ab",
        b"ba",
        b"a1",
        b"11",
        "中".encode()[:1],
        "中".encode()[1:],
        "é".encode()[:1],
        "éa".encode()[1:],
        b"aab",
        "中a".encode(),
        b"1\n",
        None,
        b"bbbb",
    ],
    eos_token_id=0,
)


def brute_force_allowed(fsm, state: int, vocab: Vocab) -> set[int]:
    """Every token whose bytes the automaton can read from `state`, EOS when accepting."""
    dfa = fsm.index.dfa
    allowed = {
        t
        for t, data in enumerate(vocab.token_bytes)
        if data and t != vocab.eos_token_id and dfa.walk_bytes(state, data) >= 0
    }
    return allowed | ({vocab.eos_token_id} if dfa.is_final(state) else set())


def compare_along_walks(pattern: str, vocab: Vocab, walks: int, steps: int, oracle_every: int = 1) -> None:
    """Walk eager and lazy side by side on random tokens: identical rows at every step."""
    size = len(vocab.token_bytes) + 5  # logits wider than the vocabulary, as in real models
    eager = compile_token_fsm(pattern, vocab, 10_000, vocab_size=size, jump_map=True)
    lazy = compile_lazy_token_fsm(pattern, vocab, size)
    rng = random.Random(pattern)
    for _ in range(walks):
        e, s = eager.index.initial_state, lazy.index.initial_state
        for step in range(steps):
            allowed = lazy.index.allowed_token_ids(s)
            assert allowed == eager.index.allowed_token_ids(e), (pattern, step)
            assert torch.equal(lazy.state_row[s], eager.state_row[e]), (pattern, step)
            assert lazy.is_complete(s) == eager.is_complete(e)
            assert lazy.index.is_final(s) == eager.index.is_final(e)
            assert lazy.jump_map.jump_forward(s) is None or eager.jump_map.jump_forward(e) is not None
            assert (lazy.jump_map.jump_forward(s) or (b"",))[0] == (eager.jump_map.jump_forward(e) or (b"",))[0]
            if step % oracle_every == 0:  # the mask oracle, bit by bit
                bits = unpack_bits(lazy.state_row[s], size)
                assert set(torch.nonzero(bits).flatten().tolist()) == brute_force_allowed(lazy, s, vocab)
            if not allowed:
                break
            token = rng.choice(allowed)
            if token == vocab.eos_token_id:
                assert lazy.index.next_state(s, token) == -1
                break
            e, s = eager.index.next_state(e, token), lazy.index.next_state(s, token)
            assert s >= 0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(REGEXES)
def test_generated_regexes_rows_equal_the_eager_index_on_a_small_vocabulary(pattern):
    try:
        compile_token_fsm(pattern, SMALL_VOCAB, 10_000)
    except ConstraintError:  # the eager index says the vocabulary cannot spell it
        return
    compare_along_walks(pattern, SMALL_VOCAB, walks=3, steps=12)


@pytest.mark.parametrize("pattern", BEHAVIOUR_REGEXES)
def test_behaviour_regexes_rows_equal_the_eager_index_on_the_bundled_vocabulary(pattern):
    compare_along_walks(pattern, bundled(), walks=3, steps=30, oracle_every=7)


def test_json_schema_regex_rows_equal_the_eager_index():
    from minisglang.constrained.json_schema import build_regex_from_schema

    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 12},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "tags": {"type": "array", "items": {"enum": ["a", "bc", "中文"]}, "maxItems": 3},
            "ok": {"type": "boolean"},
        },
        "required": ["name", "age"],
    }
    compare_along_walks(build_regex_from_schema(schema), bundled(), walks=4, steps=40, oracle_every=9)


def test_tokens_that_end_inside_a_character_jump_like_s4():
    # "中" split over two tokens: after the first, the forced continuation bytes come first.
    vocab = Vocab([None, "中".encode()[:1], "中".encode()[1:], b"x", "中x".encode()], eos_token_id=0)
    lazy = compile_lazy_token_fsm("中xx中", vocab, 8)
    eager = compile_token_fsm("中xx中", vocab, 100, vocab_size=8, jump_map=True)
    s, e = lazy.index.next_state(0, 1), eager.index.next_state(0, 1)
    assert lazy.jump_map.jump_forward(s)[0] == eager.jump_map.jump_forward(e)[0] == "中xx中".encode()[1:]
    lazy_after = lazy.jump_map.jump_forward(0)[1]
    lazy.build_row(lazy_after)  # (is_complete answers from the row: False until it is made)
    assert lazy.is_complete(lazy_after) and lazy.index.is_final(lazy_after)
    # Two characters with the same lead byte: the lead byte is forced, the character is not.
    assert (
        compile_lazy_token_fsm("(é|è)", vocab := Vocab([None, "é".encode(), "è".encode()], 0), 3).jump_map.jump_forward(
            0
        )
        is None
    )
    assert compile_token_fsm("(é|è)", vocab, 10, jump_map=True).jump_map.jump_forward(0) is None


def test_a_long_forced_text_is_jumped_in_pieces_of_bounded_work():
    """`b?a{100000}` after `b`: a jump reads at most MAX_JUMP_BYTES forced bytes (each one a
    new state), so one step never builds 100,000 states on the scheduler's thread; jumping
    again from where it stopped goes on, and the pieces add up to the forced text."""
    from minisglang.constrained.lazy_token_fsm import MAX_JUMP_BYTES

    vocab = Vocab([None, b"a", b"b", b"aa"], eos_token_id=0)
    fsm = compile_lazy_token_fsm("b?a{100000}", vocab, 8)
    state = fsm.index.next_state(fsm.index.initial_state, 2)
    text, pieces = b"", 0
    while (jump := fsm.jump_map.jump_forward(state)) is not None and pieces < 3:
        assert len(jump[0]) <= MAX_JUMP_BYTES and set(jump[0]) == {ord("a")}
        text, state, pieces = text + jump[0], jump[1], pieces + 1
        assert fsm.index.dfa.num_states < (pieces + 1) * (MAX_JUMP_BYTES + 8)
    assert pieces == 3 and len(text) == 3 * MAX_JUMP_BYTES
    assert not fsm.index.is_final(state) and fsm.index.next_state(state, 1) >= 0


ONLY_BYTE_REGEXES = [
    r'"[^"]{1,20}", "b": [0-9]{1,3}',
    "中xx中|(é|è)y",
    "(?@and(ab*c|ad)(a(b{2})*c|ae))",  # an AND whose `first` overstates
    "(?@diff([a-z]{1,3})(a[a-z]))x",
    "(?@and(.*)(x+))yz",
    "(?@diff(a[a-z])(a[b-z]))",  # after `a`: only `a` is left, [b-z] overstated
    "(?@and((ab|cd)e)(ab.|cx.))",  # `c` overstated at the start
]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(ONLY_BYTE_REGEXES) | REGEXES)
def test_only_byte_is_the_single_byte_of_the_whole_row(pattern):
    """`LazyByteDFA.only_byte` (the jump search's question, asked without expanding the
    row) answers what the expanded row says: its one byte, or None for none or several."""
    try:
        dfa = LazyByteDFA.from_regex(pattern, members=True)
    except RegexError:
        return
    seen, queue = {dfa.initial}, [dfa.initial]
    while queue and len(seen) < 300:
        state = queue.pop()
        only = dfa.only_byte(state)  # (first: before the row is expanded)
        allowed = dfa.allowed_bytes(state).tolist()
        assert only == (allowed[0] if len(allowed) == 1 else None), (pattern, state, allowed)
        for byte in allowed:
            nxt = dfa.step(state, byte)
            if nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)


def test_the_jump_search_builds_few_states_beyond_generations():
    """s4's jump and s7's forced drafts ask the forced text at every step: the states they
    build beyond what the rows of the same token path build stay few (expanding each
    state's whole byte row nearly doubled them and reached `max_lazy_states` first)."""
    tokenizer = bundled()
    regex = r'\{"a": "[^"]{1,20}", "b": "[^"]{1,20}", "c": "[^"]{1,20}", "d": [0-9]{1,3}\}'

    def states_after_walk(seed: int, jump: bool) -> int:
        fsm = compile_lazy_token_fsm(regex, tokenizer, len(tokenizer.token_bytes))
        rng, state = random.Random(seed), fsm.index.initial_state
        for _ in range(60):
            if jump:
                fsm.jump_map.jump_forward(state)
            allowed = [t for t in fsm.index.allowed_token_ids(state) if t != tokenizer.eos_token_id]
            if not allowed:
                break
            state = fsm.index.next_state(state, rng.choice(allowed))
        return fsm.index.dfa.num_states

    for seed in range(3):
        assert states_after_walk(seed, True) <= 1.1 * states_after_walk(seed, False) + 5


# ---------------------------------------------------------------------------------------
# Limits and bad input
# ---------------------------------------------------------------------------------------
def longest_short_token(tokenizer) -> int:
    """The longest token that ends inside the vocabulary trie: RegexPool.clip keeps the
    repetition bounds below it (the rows' walks count up to it)."""
    return max(n for n in (len(b or b"") for b in tokenizer.token_bytes) if n <= VocabTrie.MAX_DEPTH)


def test_state_limit_fails_with_the_option_name():
    dfa = lazy_dfa("a{500}", max_states=50)
    with pytest.raises(AutomatonLimitError, match="more than 50 automaton states .*max_lazy_states"):
        dfa.walk_bytes(dfa.initial, b"a" * 100)
    tokenizer = bundled()
    # A bound under the longest token's length (not clipped away): the start row's walk
    # counts characters, one state each.
    longest = longest_short_token(tokenizer)
    assert longest >= 8
    with pytest.raises(ConstraintError, match="max_lazy_states"):
        compile_lazy_token_fsm(f'"[^"]{{0,{longest - 2}}}"', tokenizer, 4096, LazyLimits(max_lazy_states=5))


def test_row_walk_limit_fails_with_the_option_name():
    tokenizer = bundled()
    longest = longest_short_token(tokenizer)  # (a bound the clip keeps: see above)
    with pytest.raises(ConstraintError, match="would build more than 3 states .*max_row_expansions"):
        compile_lazy_token_fsm(f'x[^"]{{0,{longest - 2}}}', tokenizer, 4096, LazyLimits(max_row_expansions=3))


def test_the_fill_ahead_never_makes_a_row_fail_its_limit():
    """A row's walk fills ahead along literal text (FILL_AHEAD derivatives), but only up to
    half of max_row_expansions: a row whose own walk fits the limit is computed."""
    tokenizer = bundled()
    regex = "abcdefghijklmnopqrstuvwxyz" * 4
    fsm = compile_lazy_token_fsm(regex, tokenizer, 4096, LazyLimits(max_row_expansions=8))
    assert fsm.index.dfa.fills <= 8
    expected = [t for t, b in enumerate(tokenizer.token_bytes) if b and regex.encode().startswith(b)]
    assert fsm.index.allowed_token_ids(fsm.index.initial_state) == expected


def test_node_limit_and_regex_length_fail_before_building():
    with pytest.raises(ConstraintError, match="more than 100 nodes .*max_regex_nodes"):
        compile_lazy_token_fsm(
            "(" + "|".join(f"w{i}" for i in range(500)) + ")", bundled(), 4096, LazyLimits(max_regex_nodes=100)
        )
    with pytest.raises(ConstraintError, match="longer than the limit of 10 .*max_regex_chars"):
        compile_lazy_token_fsm("a" * 11, bundled(), 4096, max_regex_chars=10)
    with pytest.raises(TypeError):
        LazyLimits(max_states=3)  # unknown option names are refused


# Written out, 400 optional digits nest 400 deep once one is read (each simplified
# alternative inside the one before); groups nested 3000 deep do in Python's own parser.
TOO_DEEP_REGEXES = [
    "[0-9]?" * 400 + "z",
    "(?:ab)?" * 450 + "z",
    "(" * 3000 + "a" + ")" * 3000,
    "(a|" * 1500 + "b" + ")" * 1500,
]


@pytest.mark.parametrize(
    "pattern",
    TOO_DEEP_REGEXES,
    ids=["400 optional digits", "450 optional pairs", "3000 nested groups", "1500 nested alternatives"],
)
def test_a_regex_nested_past_the_recursion_limit_is_refused_by_name(pattern):
    """It was a RecursionError: 'maximum recursion depth exceeded in comparison'."""
    with pytest.raises(ConstraintError, match=r"^regex too complex: .*nests more deeply .*counted repetition"):
        compile_lazy_token_fsm(pattern, bundled(), 4096)


def test_nesting_reached_in_generation_is_a_limit_error_not_an_internal_one():
    """The start row is fine; the state after the 70 Q's nests too deeply. A RecursionError
    there aborted the request as the engine's internal error (500 over HTTP); a
    RegexError is the grammar's fault (400), with the reason."""
    tokenizer = bundled()
    fsm = compile_lazy_token_fsm("Q" * 70 + "[0-9]?" * 400 + "z", tokenizer, 4096)
    with pytest.raises(AutomatonLimitError, match="nests more deeply"):
        state = fsm.walk(tokenizer.encode("Q" * 70 + "1"))
        fsm.index.row(state)
    fits = compile_lazy_token_fsm("[0-9]?" * 200 + "z", tokenizer, 4096)
    assert fits.index.is_final(fits.walk(tokenizer.encode("12z")))


@pytest.mark.parametrize(
    "pattern,words",
    [
        ("(ab", ["invalid regex", "'(ab'", "missing )"]),
        ("a{2,1}", ["invalid regex", "min repeat greater than max repeat"]),
        ("a(?=b)", ["unsupported regex", "lookahead"]),
        ("(?<=a)b", ["unsupported regex", "lookbehind"]),
        (r"(a)\1", ["unsupported regex", "group reference"]),
        ("a$b", ["unsupported regex", "anchor '$'"]),
        (r"a\bb", ["unsupported regex", "anchor \\b"]),
        ("a*+", ["unsupported regex", "possessive"]),
        ("(?i)a", ["unsupported regex", "inline flags"]),
        (r"a[^\s\S]b", ["matches no string", "empty language"]),
    ],
)
def test_bad_regexes_raise_regex_error_naming_the_problem(pattern, words):
    with pytest.raises(RegexError) as info:
        parse_regex(pattern, RegexPool())
    for word in words:
        assert word in str(info.value)


def test_a_vocabulary_that_cannot_start_the_regex_is_refused():
    with pytest.raises(ConstraintError, match="cannot spell"):
        compile_lazy_token_fsm("q+", SMALL_VOCAB, 32)
    tree = concat(lit("q"), repeat(chars([(ord("a"), ord("b"))]), 0, None))  # the same, as a tree: its text is quoted
    with pytest.raises(ConstraintError, match=re.escape(f"regex {shown_regex(render(tree, 'lazy'))}: no token")):
        compile_lazy_token_fsm(tree, SMALL_VOCAB, 32)


def test_a_trees_regex_text_is_rendered_when_first_read():
    """A tree's automaton is built from the tree; `regex` renders its text (lazy dialect)
    on the first read only, and text given with the tree (a child's) is kept as it is."""
    shared = Shared(concat(lit("a"), repeat(chars([(ord("1"), ord("1"))]), 0, 3)))
    tree = alt([concat(shared, lit("z"), shared), lit("b")])
    assert tree is not None
    fsm = compile_lazy_token_fsm(tree, SMALL_VOCAB, 32)
    assert fsm.__dict__["regex"] is tree  # not rendered by the compile
    text = fsm.regex
    assert text == render(tree, "lazy") and fsm.regex is text  # rendered once, then kept
    assert fsm.walk([1, 4, 1, 3]) >= 0 and fsm.walk([2]) >= 0  # "az" + "a1"; "b"
    again, expected = compile_lazy_token_fsm(tree, SMALL_VOCAB, 32), render(tree, "lazy")
    with deadline(0.0):  # a slice of grammar work already spent, with work kept in it
        with pytest.raises(OutOfTime):
            checkpoint(kept=True)
        assert again.regex == expected  # an error message's read is not cut
    kept = compile_lazy_token_fsm(tree, SMALL_VOCAB, 32, text="(?:the child's text)")
    assert kept.regex == "(?:the child's text)"
    assert compile_lazy_token_fsm("a+", SMALL_VOCAB, 32).regex == "a+"


@pytest.mark.filterwarnings("ignore:Possible nested set:FutureWarning")
@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab()[]{}|*+?^$\\-.,:1dswDu", max_size=10))
def test_any_text_is_refused_clearly_or_matches_like_re(pattern):
    body = _strip_anchors(pattern)  # the whole output must match: outer anchors are dropped
    try:
        oracle = re.compile(body)
    except (re.error, OverflowError):
        oracle = None
    try:
        dfa = lazy_dfa(pattern)
    except RegexError as e:
        message = str(e)
        assert message.startswith(("invalid regex", "unsupported regex", "regex ")), message
        assert message.startswith("invalid regex") == (oracle is None), message
        return
    assert oracle is not None
    for s in ALL_STRINGS[:300] + ["{", "}", "[", "-", ",", "1,", "a{1}", "^", "$"]:
        assert accepts(dfa, s) == (oracle.fullmatch(s) is not None), (pattern, s)


def test_rows_are_cached_and_packed_like_s2():
    tokenizer = bundled()
    fsm = compile_lazy_token_fsm(r"\d{2,4}", tokenizer, 4100)
    row = fsm.index.row(0)
    assert fsm.index.row(0) is row and fsm.state_row[0] is row.packed
    assert row.packed.dtype == torch.int32 and row.packed.shape == (129,)
    bits = unpack_bits(row.packed, 4100)
    allowed = fsm.index.allowed_token_ids(0)
    assert torch.nonzero(bits).flatten().tolist() == allowed and len(allowed) == row.count > 0
    assert np.all(np.diff(allowed) > 0) and fsm.nbytes() > 0


# ---------------------------------------------------------------------------------------
# The mask oracle along generated documents (benchmarks/bench_mask_oracle.py's harness)
# ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mask_oracle():
    import sys

    from script_modules import REPO, load_script

    sys.path.insert(0, str(REPO / "benchmarks"))  # its own imports (_results, ...) are found there
    return load_script(REPO / "benchmarks" / "bench_mask_oracle.py")


@pytest.mark.parametrize("automaton,schemas", [("lazy", range(8)), ("eager", [1])])
def test_our_backends_masks_equal_brute_force_along_generated_documents(mask_oracle, automaton, schemas):
    import json
    from collections import Counter

    from minisglang.backends.fsm_backend import FSMBackend

    tokenizer = bundled()
    size = len(tokenizer.token_bytes)
    sample = mask_oracle.generate_schemas(16, 24)
    lazy = FSMBackend(tokenizer, size + mask_oracle.PAD, automaton="lazy")
    backend = FSMBackend(tokenizer, size + mask_oracle.PAD, automaton=automaton, compile_in="thread")
    try:
        for i in schemas:
            schema, instance = sample[i]
            ids = tokenizer.encode(json.dumps(instance, ensure_ascii=False))
            oracle = mask_oracle.oracle_masks(
                lazy.compile("json_schema", json.dumps(schema)), ids, size, tokenizer.eos_token_id
            )
            kinds = Counter()
            steps, differing = mask_oracle.compare(
                backend.compile("json_schema", json.dumps(schema)), ids, oracle, size, tokenizer.token_bytes, kinds
            )
            assert steps == len(ids) and (differing, kinds) == (0, Counter()), (i, kinds)
            assert oracle[-1].sum() > 0  # the last step allows something (at least the closing token)
    finally:
        backend.shutdown()
        lazy.shutdown()


@pytest.mark.parametrize("automaton,schemas", [("lazy", [1, 3, 4, 5]), ("eager", [1, 5])])
def test_our_backends_masks_equal_brute_force_along_random_walks(mask_oracle, automaton, schemas):
    """Off the valid document too: random tokens from each step's brute-force set (inside
    strings, escapes, numbers the document never writes), the backend's mask bit by bit
    against every token's bytes walked through a separate lazy automaton."""
    import json

    from minisglang.backends.fsm_backend import FSMBackend

    tokenizer = bundled()
    size = len(tokenizer.token_bytes)
    width, eos = size + mask_oracle.PAD, tokenizer.eos_token_id
    everything = np.arange(size, dtype=np.int64)
    sample = mask_oracle.generate_schemas(16, 24)
    backend = FSMBackend(tokenizer, width, automaton=automaton, compile_in="thread")
    rng = random.Random(automaton)
    try:
        for i in schemas:
            text = json.dumps(sample[i][0])
            oracle = compile_lazy_token_fsm(backend.schema_regex(text), tokenizer, width, members=True).index
            compiled = backend.compile("json_schema", text)
            for walk in range(3):
                grammar, state = compiled.copy(), oracle.initial_state
                mask = grammar.allocate_vocab_mask(width, 1)
                for step in range(60):
                    expected = set(oracle.readable_tokens(state, everything).tolist())
                    expected |= {eos} if oracle.is_final(state) else set()
                    grammar.fill_vocab_mask(mask, 0)
                    got = set(torch.nonzero(unpack_bits(mask[0], width)).flatten().tolist())
                    assert got == expected, (automaton, i, walk, step, sorted(got ^ expected)[:10])
                    choices = sorted(expected - {eos})
                    if not choices or (eos in expected and rng.random() < 0.3):
                        break
                    token = rng.choice(choices)
                    grammar.accept_token(token)
                    state = oracle.next_state(state, token)
    finally:
        backend.shutdown()
