"""One token row's trie walk as a compiled loop (numba), for the lazy token FSM.

A row is the set of tokens whose bytes the automaton can read from one state. The walk
goes depth first through the vocabulary trie (token_index.VocabTrie) holding one
automaton state per trie node, and drops a subtree as soon as the automaton dies on its
prefix. The numpy level-by-level walk of the eager index pays ~10 array calls per trie
level even when two tokens survive; this loop costs a few nanoseconds per live node.

The automaton is lazy: a state's row of next states may not exist yet, and building it
(regex derivatives) is Python. So the loop does not descend from a node whose state is
not expanded: it returns that (node, state) pair as *pending*; the caller expands the
pending states and calls again from those pairs, until nothing is pending.
"""
from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def walk_from(child_start, child_stop, byte, end_start, end_stop, end_tokens, has_long,
              table, expanded, start_nodes, start_states,
              out_tokens, out_states, pending_nodes, pending_states, long_nodes, long_states):
    """Walk the trie from the (start_nodes[i], start_states[i]) pairs.

    Writes every token found (`out_tokens`, the state it ends in `out_states`), the pairs
    whose state is not expanded yet (`pending_*`), and the reached nodes that have tokens
    longer than the trie (`long_*`). Returns the three counts. All arrays int64 except
    `table` (int32 [S, 256], -1 dead), `expanded` (bool [S]) and `has_long` (bool [nodes]).
    """
    stack_nodes = np.empty(child_start.shape[0], dtype=np.int64)
    stack_states = np.empty(child_start.shape[0], dtype=np.int64)
    top = 0
    for i in range(start_nodes.shape[0]):
        stack_nodes[top] = start_nodes[i]
        stack_states[top] = start_states[i]
        top += 1
    found = pending = longs = 0
    while top > 0:
        top -= 1
        node, state = stack_nodes[top], stack_states[top]
        if not expanded[state]:
            pending_nodes[pending] = node
            pending_states[pending] = state
            pending += 1
            continue
        for child in range(child_start[node], child_stop[node]):
            nxt = table[state, byte[child]]
            if nxt < 0:
                continue   # the automaton dies on this prefix: skip the whole subtree
            for k in range(end_start[child], end_stop[child]):
                out_tokens[found] = end_tokens[k]
                out_states[found] = nxt
                found += 1
            if has_long[child]:
                long_nodes[longs] = child
                long_states[longs] = nxt
                longs += 1
            if child_start[child] < child_stop[child]:
                stack_nodes[top] = child
                stack_states[top] = nxt
                top += 1
    return found, pending, longs
