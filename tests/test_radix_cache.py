"""Tests for the radix cache and its drawing.

The oracle for the tree is a reference model: the set of cached token prefixes (a dict
prefix -> KV slot), the access tick of each prefix, and the lock count of each prefix
recomputed from the running requests. A hypothesis state machine drives the cache the way
the scheduler does (admit = match + lock + allocate, finish = insert + free duplicates +
unlock) plus bare inserts, lookups and evictions, and checks the tree against the model
after every step.
"""

import re
from dataclasses import dataclass

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from minisglang.drawings.radix import MAX_KEY_CHARS, MAX_KEY_IDS, radix_tree_dot
from minisglang.drawings.render import render_dot
from minisglang.memory_pool import TokenToKVPool
from minisglang.radix_cache import RadixCache, TreeNode


class FakePool:
    """A KV pool that hands out fresh slot ids and raises on any double or unknown free."""

    def __init__(self):
        self.next_id = 0
        self.allocated: set[int] = set()
        self.freed_log: list[list[int]] = []  # one entry per non-empty free(), in order

    def alloc(self, n: int) -> torch.Tensor:
        ids = list(range(self.next_id, self.next_id + n))
        self.next_id += n
        self.allocated.update(ids)
        return torch.tensor(ids, dtype=torch.int64)

    def free(self, slots: torch.Tensor) -> None:
        ids = slots.tolist()
        assert len(set(ids)) == len(ids), f"slots listed twice in one free: {ids}"
        bad = [i for i in ids if i not in self.allocated]
        assert not bad, f"double free (or never allocated): {bad}"
        self.allocated.difference_update(ids)
        if ids:
            self.freed_log.append(ids)


def walk(cache: RadixCache):
    """Yield (node, tokens from the root up to the start of node's key) for every node."""
    stack = [(cache.root_node, [])]
    while stack:
        node, before = stack.pop()
        yield node, before
        stack.extend((child, before + node.key) for child in node.children.values())


def path_of(node: TreeNode) -> list[int]:
    """The full token sequence from the root to the end of node."""
    parts = []
    while node.parent is not None:
        parts.append(node.key)
        node = node.parent
    return [t for key in reversed(parts) for t in key]


def effective_time(node: TreeNode) -> int:
    """A node's access time as eviction reads it: the latest of its own and its
    descendants' (a walk that starts below a node does not touch it; see `_touch`)."""
    return max([node.last_access_time] + [effective_time(c) for c in node.children.values()])


def prefixes_of(sequences) -> set[tuple]:
    """Every non-empty prefix of every sequence."""
    return {tuple(s[:i]) for s in sequences for i in range(1, len(s) + 1)}


def longest_common_prefix(previous_keys, key) -> int:
    """Brute force: how many leading tokens of key some previous key shares."""
    best = 0
    for prev in previous_keys:
        n = 0
        while n < min(len(prev), len(key)) and prev[n] == key[n]:
            n += 1
        best = max(best, n)
    return best


# ----- plain unit tests -------------------------------------------------------------------


def test_empty_cache_matches_nothing():
    cache = RadixCache(FakePool())
    slots, node = cache.match_prefix([1, 2, 3])
    assert slots.dtype == torch.int64 and slots.shape == (0,)
    assert node is cache.root_node
    assert cache.root_node.lock_ref == 1
    assert cache.all_sequences() == []
    assert (cache.evictable_size(), cache.protected_size(), cache.total_size()) == (0, 0, 0)


def test_insert_returns_how_many_tokens_were_already_cached():
    pool = FakePool()
    cache = RadixCache(pool)
    keys = [[1, 2, 3], [1, 2, 3, 4], [1, 2], [1, 5], [7], [], [1, 2, 3, 4]]
    for i, key in enumerate(keys):
        expected = longest_common_prefix(keys[:i], key)
        assert cache.insert(key, pool.alloc(len(key))) == expected
    assert cache.all_sequences() == [[1, 2, 3, 4], [1, 5], [7]]


def test_match_splits_the_node_where_the_key_stops():
    cache = RadixCache(FakePool())
    cache.insert([1, 2, 3, 4], torch.tensor([10, 11, 12, 13]))
    slots, node = cache.match_prefix([1, 2, 9])
    assert slots.tolist() == [10, 11]
    assert node.key == [1, 2] and node.value.tolist() == [10, 11]
    (child,) = node.children.values()
    assert child.key == [3, 4] and child.value.tolist() == [12, 13] and child.parent is node
    assert cache.all_sequences() == [[1, 2, 3, 4]]
    assert cache.total_size() == cache.evictable_size() == 4
    # A key ending inside a node splits it too, and the full key still matches through both.
    slots, node = cache.match_prefix([1])
    assert slots.tolist() == [10] and node.key == [1]
    slots, node = cache.match_prefix([1, 2, 3, 4, 5])
    assert slots.tolist() == [10, 11, 12, 13] and path_of(node) == [1, 2, 3, 4]


def test_split_keeps_locks_on_the_original_node():
    cache = RadixCache(FakePool())
    cache.insert([1, 2, 3, 4], torch.tensor([10, 11, 12, 13]))
    _, leaf = cache.match_prefix([1, 2, 3, 4])
    cache.inc_lock_ref(leaf)
    _, upper = cache.match_prefix([1, 2])
    assert upper.lock_ref == 1 and leaf.lock_ref == 1 and leaf.parent is upper
    assert cache.protected_size() == 4 and cache.evictable_size() == 0
    assert cache.dec_lock_ref(leaf) == 4
    assert upper.lock_ref == 0 and cache.evictable_size() == 4 and cache.protected_size() == 0


def test_lock_deltas_count_only_nodes_crossing_zero():
    cache = RadixCache(FakePool())
    cache.insert([1, 2, 3], torch.tensor([0, 1, 2]))
    cache.insert([1, 2, 4, 5], torch.tensor([0, 1, 3, 4]))  # splits: [1,2] / [3] and [4,5]
    _, short = cache.match_prefix([1, 2, 3])
    _, long = cache.match_prefix([1, 2, 4, 5])
    assert cache.inc_lock_ref(short) == -3  # [1,2] and [3] become protected
    assert cache.inc_lock_ref(long) == -2  # only [4,5] is new; [1,2] was already locked
    assert cache.dec_lock_ref(short) == 1  # [3] is free again; [1,2] is still held by long
    assert cache.dec_lock_ref(long) == 4
    assert cache.inc_lock_ref(cache.root_node) == 0 and cache.dec_lock_ref(cache.root_node) == 0


def test_evict_is_least_recently_used_first():
    pool = FakePool()
    cache = RadixCache(pool)
    a, b, c = pool.alloc(2), pool.alloc(2), pool.alloc(2)
    cache.insert([1, 1], a)
    cache.insert([2, 2], b)
    cache.insert([3, 3], c)
    cache.match_prefix([1, 1])  # a is now the most recently used
    assert cache.evict(1) == 2
    assert pool.freed_log == [b.tolist()]
    assert cache.evict(3) == 4
    assert pool.freed_log == [b.tolist(), c.tolist(), a.tolist()]
    assert cache.all_sequences() == [] and pool.allocated == set()


def test_evict_reaches_a_parent_that_becomes_a_leaf():
    pool = FakePool()
    cache = RadixCache(pool)
    cache.insert([1, 2, 3], pool.alloc(3))
    cache.insert([1, 2, 4], torch.cat([cache.match_prefix([1, 2])[0], pool.alloc(1)]))
    assert cache.total_size() == 4
    assert cache.evict(100) == 4
    assert pool.allocated == set() and cache.total_size() == cache.evictable_size() == 0


def test_evict_never_touches_locked_nodes():
    pool = FakePool()
    cache = RadixCache(pool)
    cache.insert([1, 2, 3], pool.alloc(3))
    cache.insert([1, 2, 4, 4], torch.cat([cache.match_prefix([1, 2])[0], pool.alloc(2)]))
    locked_slots, node = cache.match_prefix([1, 2, 3])
    cache.inc_lock_ref(node)
    assert cache.evict(100) == 2
    assert cache.all_sequences() == [[1, 2, 3]]
    assert pool.allocated == set(locked_slots.tolist())
    assert cache.evictable_size() == 0 and cache.protected_size() == 3


def test_insert_keeps_its_own_copy_of_the_slot_ids():
    cache = RadixCache(FakePool())
    row = torch.tensor([5, 6, 7])
    cache.insert([1, 2, 3], row)
    row[:] = 0  # the request-to-token row is reused by the next request
    assert cache.match_prefix([1, 2, 3])[0].tolist() == [5, 6, 7]


def test_bad_inputs_raise_clear_errors():
    cache = RadixCache(FakePool())
    with pytest.raises(ValueError, match="one KV slot per token: key has 3 tokens"):
        cache.insert([1, 2, 3], torch.tensor([1, 2]))
    cache.insert([1, 2], torch.tensor([1, 2]))
    _, node = cache.match_prefix([1, 2])
    with pytest.raises(ValueError, match="not locked"):
        cache.dec_lock_ref(node)
    assert node.lock_ref == 0 and cache.evictable_size() == 2


def test_disabled_cache_keeps_nothing():
    pool = FakePool()
    cache = RadixCache(pool, disable=True)
    slots = pool.alloc(3)
    assert cache.insert([1, 2, 3], slots) == 0
    matched, node = cache.match_prefix([1, 2, 3])
    assert matched.shape == (0,) and node is cache.root_node
    assert cache.inc_lock_ref(node) == 0 and cache.dec_lock_ref(node) == 0
    assert cache.evict(10) == 0 and pool.freed_log == []
    assert cache.all_sequences() == [] and cache.total_size() == 0
    pool.free(slots)  # the caller owns every slot when the cache is disabled


def test_reset_forgets_everything():
    cache = RadixCache(FakePool())
    cache.insert([1, 2], torch.tensor([0, 1]))
    cache.inc_lock_ref(cache.match_prefix([1, 2])[1])
    cache.reset()
    assert cache.all_sequences() == [] and cache.total_size() == 0
    assert cache.evictable_size() == 0 and cache.protected_size() == 0
    assert cache.root_node.lock_ref == 1


def test_two_requests_with_the_same_prompt_free_the_duplicate_slots():
    """The module docstring's ownership rule, step by step, on the scenario it is for."""
    pool = FakePool()
    cache = RadixCache(pool)
    prompt = [1, 2, 3]
    running = []
    for _ in range(2):  # both admitted before either finishes: neither gets a prefix hit
        prefix, last = cache.match_prefix(prompt)
        cache.inc_lock_ref(last)
        slots = torch.cat([prefix, pool.alloc(len(prompt) - len(prefix))])
        running.append((slots, len(prefix), last))
    outputs = [[7, 8], [9]]  # key = (input + output)[:-1]
    for (slots, prefix_len, last), out in zip(running, outputs):
        key = (prompt + out)[:-1]
        slots = torch.cat([slots, pool.alloc(len(key) - len(slots))])
        n = cache.insert(key, slots)
        pool.free(slots[prefix_len:n])
        cache.dec_lock_ref(last)
    second_slots = running[1][0]
    assert pool.freed_log == [second_slots.tolist()]  # the second copy of the prompt
    assert cache.all_sequences() == [[1, 2, 3, 7]]  # [1, 2, 3] is a prefix of it
    assert pool.allocated == set(cache.match_prefix([1, 2, 3, 7])[0].tolist())
    cache.evict(cache.total_size())
    assert pool.allocated == set()


def test_works_with_the_real_kv_pool():
    pool = TokenToKVPool(size=16, num_layers=1, num_kv_heads=1, head_dim=2, dtype=torch.float32)
    cache = RadixCache(pool)
    first = pool.alloc(5)
    cache.insert([1, 2, 3, 4, 5], first)
    second = pool.alloc(5)
    already = cache.insert([1, 2, 3, 6, 7], second)
    pool.free(second[:already])  # the duplicates of [1, 2, 3]
    assert pool.available_size() == 16 - 7 == 16 - cache.total_size()
    _, node = cache.match_prefix([1, 2, 3, 6, 7])
    cache.inc_lock_ref(node)
    assert cache.evict(100) == 2  # only [4, 5] is unlocked
    assert pool.available_size() == 16 - 5
    cache.dec_lock_ref(node)
    assert cache.evict(100) == 5 and pool.available_size() == 16


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 2), max_size=6), max_size=12))
def test_cached_sequences_are_the_inserted_keys(keys):
    """all_sequences() is exactly the inserted keys that are not a prefix of another."""
    pool = FakePool()
    cache = RadixCache(pool)
    for key in keys:
        slots = pool.alloc(len(key))
        pool.free(slots[: cache.insert(key, slots)])
    expected = prefixes_of(keys)
    leaves = [list(p) for p in expected if not any(q[: len(p)] == p and q != p for q in expected)]
    assert cache.all_sequences() == sorted(leaves)
    assert cache.total_size() == cache.evictable_size() == len(expected)


@given(st.lists(st.lists(st.integers(0, 2), max_size=6), max_size=12), st.lists(st.integers(0, 2), max_size=8))
def test_match_len_is_the_match_length_and_changes_nothing(keys, query):
    """match_len(key) == len(match_prefix(key)[0]) == the longest common prefix with an
    inserted key (the oracle), and it splits no node and touches no access time."""
    pool = FakePool()
    cache = RadixCache(pool)
    for key in keys:
        slots = pool.alloc(len(key))
        pool.free(slots[: cache.insert(key, slots)])
    before = [(path_of(node), node.last_access_time) for node, _ in walk(cache)]
    got = cache.match_len(query)
    assert got == longest_common_prefix(keys, query)
    assert [(path_of(node), node.last_access_time) for node, _ in walk(cache)] == before
    assert got == len(cache.match_prefix(query)[0])


# ----- the scheduler-like state machine ---------------------------------------------------

keys = st.lists(st.integers(0, 2), max_size=6)


@dataclass
class Running:
    key: list[int]
    slots: torch.Tensor
    prefix_len: int
    last_node: TreeNode


class RadixCacheMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.pool = FakePool()
        self.cache = RadixCache(self.pool)
        self.ref_slot: dict[tuple, int] = {}  # cached prefix -> its KV slot
        self.ref_time: dict[tuple, int] = {}  # cached prefix -> tick of its last access
        self.clock = 0  # one tick per match_prefix / insert call, as documented
        self.running: list[Running] = []
        self.marks: list = []  # (mark, the key it left with) of requests that will come back

    # reference-model helpers

    def ref_match_len(self, key) -> int:
        n = 0
        while n < len(key) and tuple(key[: n + 1]) in self.ref_slot:
            n += 1
        return n

    def ref_lock(self, prefix: tuple) -> int:
        return sum(
            1
            for r in self.running
            if tuple(r.key[: r.prefix_len])[: len(prefix)] == prefix and r.prefix_len >= len(prefix)
        )

    def checked_match(self, key) -> tuple[torch.Tensor, TreeNode]:
        n = self.ref_match_len(key)
        slots, node = self.cache.match_prefix(key)
        self.clock += 1
        assert slots.tolist() == [self.ref_slot[tuple(key[: i + 1])] for i in range(n)]
        assert path_of(node) == key[:n]
        for i in range(n):
            self.ref_time[tuple(key[: i + 1])] = self.clock
        return slots, node

    def checked_insert(self, key, slots, start=None) -> int:
        expected = self.ref_match_len(key)
        n = self.cache.insert(key, slots, start=start)
        self.clock += 1
        assert n == expected
        for i in range(len(key)):
            p = tuple(key[: i + 1])
            if i >= n:
                self.ref_slot[p] = int(slots[i])
            self.ref_time[p] = self.clock
        return n

    # rules

    @rule(key=keys)
    def admit(self, key):
        locked_before = {p for p in self.ref_slot if self.ref_lock(p) > 0}
        prefix, node = self.checked_match(key)
        delta = self.cache.inc_lock_ref(node)
        newly_locked = {tuple(key[: i + 1]) for i in range(len(prefix))} - locked_before
        assert delta == -len(newly_locked)
        slots = torch.cat([prefix, self.pool.alloc(len(key) - len(prefix))])
        self.running.append(Running(key, slots, len(prefix), node))

    @precondition(lambda self: self.running)
    @rule(data=st.data(), output=st.lists(st.integers(0, 2), min_size=1, max_size=3))
    def finish(self, data, output):
        req = self.running.pop(data.draw(st.integers(0, len(self.running) - 1)))
        key = (req.key + output)[:-1]
        slots = torch.cat([req.slots, self.pool.alloc(len(key) - len(req.slots))])
        n = self.checked_insert(key, slots)
        assert n >= req.prefix_len
        self.pool.free(slots[req.prefix_len : n])
        self.cache.dec_lock_ref(req.last_node)

    @precondition(lambda self: self.running)
    @rule(data=st.data(), output=st.lists(st.integers(0, 2), min_size=1, max_size=3))
    def leave_unfinished(self, data, output):
        """The scheduler's release of a request that comes back (an s4 jump): the insert
        starts at its locked node, and a mark remembers where it left."""
        req = self.running.pop(data.draw(st.integers(0, len(self.running) - 1)))
        key = (req.key + output)[:-1]
        slots = torch.cat([req.slots, self.pool.alloc(len(key) - len(req.slots))])
        n = self.checked_insert(key, slots, start=req.last_node)
        self.pool.free(slots[req.prefix_len : n])
        self.cache.dec_lock_ref(req.last_node)
        self.marks.append((self.cache.mark(req.last_node, key, slots), key))

    @precondition(lambda self: self.marks)
    @rule(data=st.data(), changed=st.lists(st.integers(0, 2), max_size=4))
    def come_back(self, data, changed):
        """Its re-admission: the key keeps a prefix of what it left with (cut anywhere) and
        may go on otherwise; the walk from the mark finds what a walk from the root finds."""
        mark, left_with = self.marks.pop(data.draw(st.integers(0, len(self.marks) - 1)))
        key = left_with[: data.draw(st.integers(0, len(left_with)))] + changed
        start, _ = self.cache._resume(mark, key)
        expected_n = self.ref_match_len(key)
        if start is not None:
            assert path_of(start) == key[: start.depth] and start.depth <= expected_n
        assert self.cache.match_len(key, mark) == expected_n
        prefix, node = self.cache.match_prefix(key, mark)
        self.clock += 1
        assert prefix.tolist() == [self.ref_slot[tuple(key[: i + 1])] for i in range(expected_n)]
        assert path_of(node) == key[:expected_n]
        for i in range(expected_n):
            self.ref_time[tuple(key[: i + 1])] = self.clock
        self.cache.inc_lock_ref(node)
        slots = torch.cat([prefix, self.pool.alloc(len(key) - len(prefix))])
        self.running.append(Running(key, slots, len(prefix), node))

    @precondition(lambda self: self.running)
    @rule(data=st.data(), more=st.lists(st.integers(0, 2), min_size=1, max_size=3))
    def prefill_more(self, data, more):
        """`Scheduler.cache_prefilled`: a running request's computed tokens go into the tree
        from its node, its row takes the tree's slots after it, and its lock moves down."""
        req = self.running[data.draw(st.integers(0, len(self.running) - 1))]
        key = req.key + more
        slots = torch.cat([req.slots, self.pool.alloc(len(more))])
        n = self.checked_insert(key, slots, start=req.last_node)
        self.pool.free(slots[req.prefix_len : n])
        after, node = self.cache.match_after(req.last_node, key)
        self.clock += 1
        for i in range(len(key)):
            self.ref_time[tuple(key[: i + 1])] = self.clock
        assert path_of(node) == key
        assert after.tolist() == [self.ref_slot[tuple(key[: i + 1])] for i in range(req.prefix_len, len(key))]
        slots[req.prefix_len :] = after
        locked_before = {p for p in self.ref_slot if self.ref_lock(p) > 0}
        self.cache.move_lock(req.last_node, node)
        req.key, req.slots, req.prefix_len, req.last_node = key, slots, len(key), node
        assert {p for p in self.ref_slot if self.ref_lock(p) > 0} >= locked_before

    @rule()
    def reset_marks(self):
        """Marks made before a reset are void (the tree they point into is gone)."""
        if not self.running and self.marks:
            # The scheduler's flush: the tree and the pool start afresh, nothing evicted.
            self.pool = self.cache.token_to_kv_pool = FakePool()
            self.ref_slot.clear()
            self.ref_time.clear()
            mark = self.marks[-1][0]
            self.cache.reset()
            self.clock = 0  # reset restarts the access counter
            assert self.cache._resume(mark, mark.tokens)[0] is None  # (and come_back uses the others)

    @rule(key=keys)
    def insert_fresh(self, key):
        slots = self.pool.alloc(len(key))
        n = self.checked_insert(key, slots)
        self.pool.free(slots[:n])

    @rule(key=keys)
    def match(self, key):
        self.checked_match(key)

    @rule(num_tokens=st.integers(0, 12))
    def evict(self, num_tokens):
        evictable = {p for p in self.ref_slot if self.ref_lock(p) == 0}
        before = set(self.ref_slot)
        log_len = len(self.pool.freed_log)
        freed = self.cache.evict(num_tokens)
        after = prefixes_of(self.cache.all_sequences())
        removed = before - after
        assert after <= before
        assert removed <= evictable, "evict removed a locked token"
        assert freed == len(removed)
        freed_slots = [s for ids in self.pool.freed_log[log_len:] for s in ids]
        assert sorted(freed_slots) == sorted(self.ref_slot[p] for p in removed)
        if freed < num_tokens:
            assert removed == evictable, "evict stopped while unlocked tokens were left"
        else:
            assert freed - num_tokens < max(map(len, removed), default=1)  # overshoot < one leaf
        remaining = evictable - removed
        if removed and remaining:  # LRU: nothing evicted is newer than what stayed
            assert max(self.ref_time[p] for p in removed) <= min(self.ref_time[p] for p in remaining)
        for p in removed:
            del self.ref_slot[p], self.ref_time[p]

    @rule()
    def evict_everything(self):
        locked = {p for p in self.ref_slot if self.ref_lock(p) > 0}
        self.evict(self.cache.total_size() + 1)
        assert self.cache.evictable_size() == 0
        assert set(self.ref_slot) == locked

    # invariants

    @invariant()
    def tree_equals_reference(self):
        assert prefixes_of(self.cache.all_sequences()) == set(self.ref_slot)
        for node, before in walk(self.cache):
            assert node.lock_ref >= 0
            if node is self.cache.root_node:
                assert node.lock_ref == 1 and node.key == []
                continue
            assert len(node.key) >= 1 and len(node.value) == len(node.key)
            assert node.parent.children[node.key[0]] is node
            for i in range(len(node.key)):
                p = tuple(before + node.key[: i + 1])
                assert int(node.value[i]) == self.ref_slot[p]
                assert effective_time(node) == self.ref_time[p]
                assert node.lock_ref == self.ref_lock(p)

    @invariant()
    def sizes_add_up(self):
        protected = sum(1 for p in self.ref_slot if self.ref_lock(p) > 0)
        assert self.cache.protected_size() == protected
        assert self.cache.evictable_size() == len(self.ref_slot) - protected
        assert self.cache.evictable_size() + self.cache.protected_size() == self.cache.total_size()

    @invariant()
    def every_slot_has_exactly_one_owner(self):
        tree = [s for node, _ in walk(self.cache) for s in node.value.tolist()]
        owned = [s for r in self.running for s in r.slots[r.prefix_len :].tolist()]
        assert len(set(tree + owned)) == len(tree) + len(owned)
        assert set(tree + owned) == self.pool.allocated

    def teardown(self):
        # Finish every request the simple way, then evict all: nothing may leak.
        while self.running:
            req = self.running.pop()
            n = self.cache.insert(req.key, req.slots)
            self.pool.free(req.slots[req.prefix_len : n])
            self.cache.dec_lock_ref(req.last_node)
        self.cache.evict(self.cache.total_size())
        assert self.pool.allocated == set()
        assert self.cache.total_size() == 0


RadixCacheMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)
test_radix_cache_state_machine = RadixCacheMachine.TestCase


# ----- the drawing ------------------------------------------------------------------------

LABEL = re.compile(r'^\s+(n\d+) \[label="((?:[^"\\]|\\.)*)"(.*)\];$')


def unescape_label(label: str) -> list[str]:
    """Undo DOT escaping: backslash-n ends a line, any other backslash pair is its second
    character."""
    lines, current, i = [], "", 0
    while i < len(label):
        if label[i] == "\\":
            if label[i + 1] == "n":
                lines.append(current)
                current = ""
            else:
                current += label[i + 1]
            i += 2
        else:
            current += label[i]
            i += 1
    return lines + [current]


def dot_labels(dot: str) -> dict[str, tuple[list[str], str]]:
    """node name -> (its label lines, its other attributes), parsed from DOT text."""
    nodes = {}
    for line in dot.splitlines():
        m = LABEL.match(line)
        if m:
            nodes[m.group(1)] = (unescape_label(m.group(2)), m.group(3))
    return nodes


class DictTokenizer:
    """Decodes each id to a fixed string; enough for the drawing."""

    def __init__(self, pieces: dict[int, str]):
        self.pieces = pieces

    def decode(self, ids, skip_special_tokens=True):
        return "".join(self.pieces[i] for i in ids)


def sample_cache() -> RadixCache:
    cache = RadixCache(FakePool())
    cache.insert([1, 2, 3], torch.tensor([0, 1, 2]))
    cache.insert([1, 2, 4], torch.tensor([0, 1, 3]))
    cache.insert(list(range(10, 10 + MAX_KEY_IDS + 3)), torch.arange(4, 4 + MAX_KEY_IDS + 3))
    return cache


def test_drawing_has_one_box_per_node_and_one_arrow_per_edge():
    cache = sample_cache()
    dot = radix_tree_dot(cache)
    num_nodes = sum(1 for _ in walk(cache))
    assert dot.startswith("digraph") and dot.rstrip().endswith("}")
    assert len(dot_labels(dot)) == num_nodes == 5
    assert len(re.findall(r"^\s+n\d+ -> n\d+;$", dot, re.M)) == num_nodes - 1


def test_drawing_labels_show_tokens_locks_and_slots():
    cache = sample_cache()
    _, node = cache.match_prefix([1, 2, 3])
    cache.inc_lock_ref(node)
    labels = dot_labels(radix_tree_dot(cache, highlight=node)).values()
    texts = {tuple(lines): attrs for lines, attrs in labels}
    assert texts[("root", "lock=1 slots=0")]
    assert "filled" in texts[("1 2", "lock=1 slots=2")]
    assert "filled" in texts[("3", "lock=1 slots=1")] and "penwidth" in texts[("3", "lock=1 slots=1")]
    assert texts[("4", "lock=0 slots=1")] == ""  # unlocked, not highlighted: plain box
    long_ids = " ".join(str(t) for t in range(10, 10 + MAX_KEY_IDS))
    assert (long_ids + " …", f"lock=0 slots={MAX_KEY_IDS + 3}") in texts


def test_drawing_escapes_quotes_backslashes_and_newlines():
    tok = DictTokenizer({1: 'say "hi"', 2: "back\\slash", 3: "new\nline\t", 4: "x" * 40, 5: "中文"})
    cache = RadixCache(FakePool())
    for key in ([1], [2], [3], [4], [5]):
        cache.insert(key, torch.tensor([key[0]]))
    dot = radix_tree_dot(cache, tokenizer=tok)
    heads = {lines[0] for lines, _ in dot_labels(dot).values()}
    # Decoded text is shown as Python's repr, so control characters are spelled out.
    assert heads == {"root", *(repr(tok.pieces[i]) for i in (1, 2, 3, 5)), repr("x" * MAX_KEY_CHARS) + "…"}
    assert "'new\\nline\\t'" in heads  # the newline is two characters, never a raw one
    # header (2) + 6 nodes + 5 edges + closing brace: no raw newline leaked into a label
    assert len(dot.splitlines()) == 2 + 6 + 5 + 1


def test_drawing_is_valid_graphviz():
    """Graphviz itself is the oracle for the escaping: it must parse the text."""
    tok = DictTokenizer({1: 'q"uo\\te\n', 2: "\\", 3: '"'})
    cache = RadixCache(FakePool())
    cache.insert([1, 2, 3], torch.tensor([0, 1, 2]))
    cache.insert([1, 3], torch.tensor([0, 3]))
    svg = render_dot(radix_tree_dot(cache, tokenizer=tok), "svg").decode("utf-8")
    assert "q&quot;uo\\\\te\\n" in svg  # repr doubled the backslash
