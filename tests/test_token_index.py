"""Token index: reference == fast == lazy, and all equal a brute-force walk oracle."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from real_tokenizers import anthropic_65k, bundled, mistral_sentencepiece

from minisglang.constrained.regex_dfa import ByteDFA, compile_regex
from minisglang.constrained.token_index import (
    LazyTokenIndex,
    TokenIndex,
    VocabularyCannotSpellError,
    allowed_tokens_table,
    build_index_fast,
    build_index_reference,
)


def byte_dfa(pattern: str) -> ByteDFA:
    return ByteDFA.from_char_dfa(compile_regex(pattern))


def lazy_as_dict(lazy: LazyTokenIndex, states) -> dict[int, dict[int, int]]:
    """Visit `states` through the lazy index's public API and return what it computed."""
    for s in states:
        lazy.allowed_token_ids(s)
    return lazy.state_to_tokens


def expected_next(dfa: ByteDFA, vocab, eos: int, prefix: bytes, token_id: int) -> int:
    """The oracle: walk prefix + the token's bytes from the initial state."""
    if token_id == eos:
        return -1
    data = vocab[token_id]
    if not data:  # special tokens and empty strings are never allowed
        return -1
    return dfa.walk_bytes(0, prefix + data)


def check_all_agree(dfa: ByteDFA, vocab, eos: int) -> TokenIndex:
    reference = build_index_reference(dfa, vocab, eos, progress=False)
    fast = build_index_fast(dfa, vocab, eos, progress=False)
    assert fast == reference
    lazy = LazyTokenIndex(dfa, vocab, eos)
    assert lazy_as_dict(lazy, reference.state_to_tokens) == reference.state_to_tokens
    for state in reference.state_to_tokens:
        assert lazy.allowed_token_ids(state) == reference.allowed_token_ids(state)
    return reference


def check_oracle(index: TokenIndex, dfa: ByteDFA, vocab, eos: int, prefix: bytes) -> None:
    """For the state reached by walking `prefix`: every token's fate matches the oracle."""
    state = dfa.walk_bytes(0, prefix)
    assert state in index.state_to_tokens, prefix
    for token_id in range(len(vocab)):
        assert index.next_state(state, token_id) == expected_next(dfa, vocab, eos, prefix, token_id), (prefix, token_id)
    assert (eos in index.allowed_token_ids(state)) == dfa.is_final(state)


# ---------------------------------------------------------------------------------------
# Synthetic vocabularies (hypothesis)
# ---------------------------------------------------------------------------------------
CHARACTERS = [c.encode() for c in 'ab1"é中文']
PIECES = CHARACTERS + [
    "é".encode()[:1],
    "é".encode()[1:],
    "中".encode()[:1],
    "中".encode()[1:2],
    "中".encode()[2:],
    "中".encode()[:2],
    "文".encode()[1:],
]
SYNTHETIC_REGEXES = ["(ab|é)*1", "[^a]{0,3}", '"[^"]*"', "中+a?", "(a|中é)b*", "1{2,3}", ".b", "(中文|é)+", "a[^1]*"]

token_strategy = st.one_of(
    st.sampled_from(CHARACTERS),  # whole characters make most regexes spellable
    st.none(),
    st.just(b""),
    st.lists(st.sampled_from(PIECES), min_size=1, max_size=3).map(b"".join),
)


@st.composite
def vocabularies(draw) -> list[bytes | None]:
    """Some whole characters (so most regexes are spellable), then random junk, shuffled."""
    characters = sorted(draw(st.sets(st.sampled_from(CHARACTERS), min_size=4)))
    return draw(st.permutations(characters + draw(st.lists(token_strategy, min_size=1, max_size=8))))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(SYNTHETIC_REGEXES), vocabularies(), st.data())
def test_reference_fast_lazy_and_oracle_agree_on_synthetic_vocabularies(pattern, vocab, data):
    eos = data.draw(st.integers(0, len(vocab) - 1), label="eos")
    dfa = byte_dfa(pattern)
    try:
        reference = build_index_reference(dfa, vocab, eos, progress=False)
    except VocabularyCannotSpellError:
        event("the vocabulary cannot spell the regex")
        with pytest.raises(VocabularyCannotSpellError):
            build_index_fast(dfa, vocab, eos, progress=False)
        assert not any(dfa.is_final(s) for s in _reachable_by_oracle(dfa, vocab, eos, depth=4))
        return
    event(f"index with {min(reference.num_states, 5)}+ states")
    assert build_index_fast(dfa, vocab, eos, progress=False) == reference
    lazy = LazyTokenIndex(dfa, vocab, eos)
    assert lazy_as_dict(lazy, reference.state_to_tokens) == reference.state_to_tokens

    # Oracle: every token sequence of up to 3 tokens, walked from the initial state.
    usable = [i for i, b in enumerate(vocab) if b and i != eos]
    for length in range(4):
        for seq in itertools.product(usable, repeat=length):
            prefix = b"".join(vocab[i] for i in seq)
            if dfa.walk_bytes(0, prefix) >= 0:
                check_oracle(reference, dfa, vocab, eos, prefix)
    # Every indexed state is reachable from the initial state through the index itself.
    assert _reachable_in_index(reference) == set(reference.state_to_tokens)


def _reachable_by_oracle(dfa, vocab, eos, depth) -> set[int]:
    usable = [b for i, b in enumerate(vocab) if b and i != eos]
    states = {0}
    frontier = {0}
    for _ in range(depth):
        frontier = {e for s in frontier for b in usable if (e := dfa.walk_bytes(s, b)) >= 0} - states
        states |= frontier
    return states


def _reachable_in_index(index: TokenIndex) -> set[int]:
    seen, todo = {index.initial_state}, [index.initial_state]
    while todo:
        for nxt in index.state_to_tokens[todo.pop()].values():
            if nxt >= 0 and nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_eos_only_in_accepting_states_and_specials_never_allowed():
    vocab = [None, b"a", b"", b"b", b"ab", None]
    index = build_index_fast(byte_dfa("(ab)+"), vocab, eos_token_id=5, progress=False)
    assert index.allowed_token_ids(0) == [1, 4]
    after_ab = index.next_state(0, 4)
    assert index.is_final(after_ab)
    assert index.allowed_token_ids(after_ab) == [1, 4, 5]
    assert index.next_state(after_ab, 5) == -1  # EOS ends the walk
    assert index.next_state(0, 5) == -1 and 5 not in index.allowed_token_ids(0)
    assert index.next_state(0, 3) == -1  # b cannot start
    assert all(t not in index.allowed_token_ids(s) for s in index.state_to_tokens for t in (0, 2))
    assert index.num_states == 3  # start, after "a", after "ab"


def test_eos_bytes_are_never_walked_even_if_the_vocabulary_gives_them():
    vocab = [b"a", b"</s>"]  # a tokenizer that forgot to mark EOS special
    index = build_index_fast(byte_dfa(".*"), vocab, eos_token_id=1, progress=False)
    assert index.allowed_token_ids(0) == [0, 1]
    assert index.next_state(0, 1) == -1
    assert build_index_reference(byte_dfa(".*"), vocab, 1, progress=False) == index


def test_long_tokens_beyond_the_trie_depth_and_many_states():
    vocab = [b"a" * 40, b"a" * 33 + b"b", "中".encode() * 12, b"a", b"aa", b"b", "中".encode()[:2], None]
    for pattern in ["a{0,100}b?", "(a|中)*b", "a{300}"]:
        check_all_agree(byte_dfa(pattern), vocab, eos=7)
    index = build_index_fast(byte_dfa("a{300}"), vocab, 7, progress=False)
    assert index.num_states == 301  # more than one batch of 256 states


def test_more_than_one_batch_of_states_in_one_step():
    """From state 0, the tokens a, aa, ..., a*260 reach 260 states at once (> 256)."""
    vocab = [b"a" * k for k in range(1, 261)] + [None]
    eos = 260
    index = build_index_fast(byte_dfa("a{260}"), vocab, eos, progress=False)
    assert index.num_states == 261
    for state in range(261):  # the state after n a's is n (BFS numbering)
        expected = {k - 1: state + k for k in range(1, 261 - state)}
        if state == 260:
            expected[eos] = -1
        assert index.state_to_tokens[state] == expected


def test_vocabulary_that_cannot_spell_the_regex():
    vocab = [b"a", b"b", b"ab", None]
    for build in (build_index_reference, build_index_fast):
        with pytest.raises(VocabularyCannotSpellError) as info:
            build(byte_dfa("a+z"), vocab, 3, progress=False)
        message = str(info.value)
        assert "regex 'a+z'" in message and "b'z'" in message and "no accepting state" in message
        assert isinstance(info.value, ValueError)


def test_lazy_index_computes_on_first_visit_only():
    vocab = [b"a", b"b", b"ab", None]
    lazy = LazyTokenIndex(byte_dfa("(ab)+"), vocab, 3)
    assert lazy.num_states == 0
    assert lazy.allowed_token_ids(0) == [0, 2]
    assert lazy.num_states == 1
    first = lazy.state_to_tokens[0]
    lazy.allowed_token_ids(0)
    assert lazy.state_to_tokens[0] is first  # cached, not recomputed
    end = lazy.next_state(0, 2)
    assert lazy.is_final(end) and lazy.allowed_token_ids(end) == [0, 2, 3]
    assert lazy.allowed_token_ids(10_000) == [] and lazy.next_state(10_000, 0) == -1
    assert lazy.initial_state == 0 and lazy.eos_token_id == 3


@dataclass
class FakeTokenizer:
    token_bytes: list

    def id_to_token(self, token_id: int) -> str:
        return f"<tok{token_id}>"


def test_allowed_tokens_table_lists_tokens_texts_and_next_states():
    vocab = [b"1", b"12", b"a", "中".encode()[:1], None, "中".encode()[1:]]
    index = build_index_fast(byte_dfa(r"[0-9]+"), vocab, 4, progress=False)
    text = allowed_tokens_table(index, FakeTokenizer(vocab), 0, limit=1)
    lines = text.splitlines()
    assert lines[0] == "state 0 (not accepting): 2 of 6 tokens allowed"
    assert lines[2].split() == ["0", "<tok0>", "'1'", str(index.next_state(0, 0))]
    assert lines[-1] == "… +1 more"
    final = index.next_state(0, 1)
    text = allowed_tokens_table(index, FakeTokenizer(vocab), final)
    assert "(accepting): 3 of 6" in text and "(end)" in text and "more" not in text
    partial = build_index_fast(byte_dfa("中"), vocab, 4, progress=False)
    assert "b'\\xe4'" in allowed_tokens_table(partial, FakeTokenizer(vocab), 0)


# ---------------------------------------------------------------------------------------
# Real tokenizers
# ---------------------------------------------------------------------------------------
REAL_REGEXES = {
    "json": (r'\{"name": "[^"\\]{0,4}", "age": (0|[1-9][0-9]{0,2})\}', '{"name": "Bo中", "age": 42}'),
    "date": (r"[0-9]{4}-[0-9]{2}-[0-9]{2}", "2024-01-31"),
    "ipv4": (r"((25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])", "192.168.0.1"),
    "chinese": (r"[\u4e00-\u9fa5]{1,4}", "中文字"),
    "emoji": (r"(😀|🎉|👍🏽)+", "😀👍🏽"),
}


def _check_real(tokenizer, names) -> None:
    vocab, eos = tokenizer.token_bytes, tokenizer.eos_token_id
    for name in names:
        pattern, example = REAL_REGEXES[name]
        dfa = byte_dfa(pattern)
        index = check_all_agree(dfa, vocab, eos)
        data = example.encode("utf-8")
        # Oracle at a few byte prefixes of a matching example, one of them inside a character.
        for cut in sorted({0, 1, len(data) // 2, len(data) - 1, len(data)}):
            check_oracle(index, dfa, vocab, eos, data[:cut])
        assert index.is_final(dfa.walk_bytes(0, data))


def test_real_bundled_tokenizer():
    _check_real(bundled(), REAL_REGEXES)


def test_real_sentencepiece_tokenizer():
    _check_real(mistral_sentencepiece(), ["json", "chinese", "emoji", "ipv4"])


@pytest.mark.slow
def test_real_anthropic_65k_tokenizer():
    _check_real(anthropic_65k(), REAL_REGEXES)
