"""The compiled loops of the lazy automaton's row walk (constrained/lazy_trie_walk.py) against
plain Python: `finish_row` against numpy's bit operations, `trie_heights` against the token
strings themselves. (The walks themselves are checked through the rows they make, against
the eager index and the brute-force mask oracle: test_lazy_automaton.py,
test_lazy_row_shortcuts.py.)"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from minisglang.constrained.lazy_trie_walk import finish_row, trie_heights
from minisglang.constrained.token_index import VocabTrie


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 40).flatmap(
        lambda words: st.tuples(
            st.lists(st.integers(0, 2**32 - 1), min_size=words, max_size=words),
            st.lists(st.integers(0, words * 32 - 1), max_size=20),
            st.integers(0, words * 32 - 1),
            st.booleans(),
        )
    )
)
def test_finish_row_sets_the_ids_and_eos_and_counts_like_numpy(case):
    words, extra, eos, accepting = case
    bits = np.asarray(words, dtype=np.uint32)
    expected = bits.copy()
    for t in extra:
        expected[t >> 5] |= np.uint32(1 << (t & 31))
    if accepting:
        expected[eos >> 5] |= np.uint32(1 << (eos & 31))
    else:
        expected[eos >> 5] &= ~np.uint32(1 << (eos & 31))
    count = finish_row(bits, np.asarray(extra, dtype=np.int64), eos, accepting)
    assert (bits == expected).all()
    assert count == int(np.bitwise_count(expected).sum()) - accepting


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.none(), st.binary(max_size=40)), min_size=1, max_size=40))
def test_trie_heights_are_the_longest_string_below_each_node(token_bytes):
    """`trie_heights` (how far the row walk's look-ahead may fill below a waiting trie node)
    against the strings themselves: a node's height is the most bytes any trie string
    (a token's first MAX_DEPTH bytes) spells past the node's own string."""
    trie = VocabTrie.from_vocab(token_bytes)
    strings = {b[: VocabTrie.MAX_DEPTH] for b in token_bytes if b}
    prefix = [b""] * trie.num_nodes
    for node in range(1, trie.num_nodes):  # parents come first
        prefix[node] = prefix[trie.parent[node]] + bytes([trie.byte[node]])
    expected = [max(len(s) - len(p) for s in strings | {p} if s.startswith(p)) for p in prefix]
    assert trie_heights(trie).tolist() == expected
