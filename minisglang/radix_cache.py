"""Radix cache: a prefix tree of token ids whose edges remember where their KV lives.

When many requests start with the same tokens (a system prompt, a JSON template, the
text before a jump-forward), their K/V for those tokens is identical. The radix cache
keeps the KV slots of prefilled and finished requests in a radix tree keyed by token ids,
so a new request only has to prefill the part after its longest cached prefix. The tree
follows SGLang's first release (Jan 2024); learning at prefill, not only from finished
requests, follows its "Cache optimizations" (#418) and ``cache_unfinished_req`` (#977).
The code is our own.

The tree
--------
Each edge carries a run of token ids (``node.key``) and the KV slot of each of them
(``node.value``, same length). Walking from the root and concatenating keys spells a
cached token sequence; concatenating values gives the slots holding its K/V. A node is
split in two whenever a lookup or an insert stops in the middle of its key, so every
match ends exactly on a node.

Locks and eviction
------------------
A running request that reuses a cached prefix *locks* the last node of that prefix:
``inc_lock_ref`` adds one to that node and every ancestor, so nothing on the path can be
evicted while the request reads it. The root is always locked. Every cached token is
either *evictable* (its node has ``lock_ref == 0``) or *protected* (``lock_ref > 0``);
``evictable_size() + protected_size() == total_size()`` at all times. ``evict(n)`` drops
least-recently-used unlocked leaves until at least ``n`` tokens are freed; access time is
a counter that ticks once per ``match_prefix`` / ``insert`` call (not the wall clock), so
eviction order is deterministic.

Ownership of KV slots (the rule the scheduler follows)
------------------------------------------------------
Every KV slot belongs to exactly one owner: the pool's free list, the tree, or one
running request. The tree never allocates; it frees only when it evicts.

1. Admission. ``prefix_slots, last_node = cache.match_prefix(input_ids)``;
   ``prefix_len = len(prefix_slots)``; ``cache.inc_lock_ref(last_node)``. The request
   *borrows* those ``prefix_len`` slots from the tree (the lock keeps them there) and
   allocates its other slots from the pool; those it owns.
2. After the prefill (``Scheduler.cache_prefilled``). The same insert as in 3 below,
   with ``key`` = the tokens just computed; the duplicates are freed and the request's
   row is pointed at the tree's slots (``match_after(last_node, key)``, which returns the
   slots after ``last_node`` with the tree's copies in place of the duplicates). The lock
   moves down: ``move_lock(last_node, new_node)``; ``prefix_len`` becomes
   the number of tokens computed. From now on the request owns only the slots of its
   decode steps, and any request admitted later hits its prompt.
3. Finishing. ``key = (input_ids + output_ids)[:-1]`` -- the last sampled token was never
   run through the model, so it has no KV slot -- and ``slots`` = the request's
   ``len(key)`` slots, so ``slots[:prefix_len]`` are the borrowed ones.
   ``n = cache.insert(key, slots)`` returns how many leading tokens the tree already had
   (``n >= prefix_len``, because the lock kept the borrowed prefix in the tree). Then:

   * ``slots[:prefix_len]`` are the tree's own slots (same ids): nothing to do.
   * ``slots[prefix_len:n]`` are **duplicates**: while this request ran, another one
     inserted the same tokens with its own slots, and the tree keeps the older copy.
     The caller frees them: ``pool.free(slots[prefix_len:n])``.
   * ``slots[n:]`` now belong to the tree (insert stored a copy of their ids).
4. ``cache.dec_lock_ref(last_node)``, and give back the request's row of the
   request-to-token table.

Jump-forward (stage 4) pulls a request out of the batch with steps 3 and 4, and admits
it again with step 1.

Walks that start below the root
-------------------------------
A request's own inserts (2 and 3) start at its locked ``last_node`` (``start=``): the
tokens above it are known to be there. One that left unfinished keeps a ``Mark`` of its
node, and its re-admission's match starts at ``_resume(mark, key)``: the deepest node of the old
path the new key still spells, when that node is still in the tree. A jumping request's
path grows by about two nodes a jump; walking it from the root at each of these cost
jumps squared (11,000 edge comparisons for 200 tokens). A walk that starts below a node
does not refresh that node's access time: eviction hands an evicted leaf's time to its
parent, so the order of eviction is the one a walk from the root would have given.
With ``disable=True`` the cache keeps nothing: ``match_prefix`` returns no slots
(``prefix_len = 0``) and ``insert`` returns 0 without storing anything, so the rule above
would free nothing -- the caller must then free *all* of the request's slots itself.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Protocol

import torch


class SlotPool(Protocol):
    """What the radix cache needs from the KV pool (``memory_pool.TokenToKVPool``)."""

    def free(self, slots: torch.Tensor) -> None: ...


def _no_slots() -> torch.Tensor:
    """An empty slot-id tensor, shape ``[0]``, int64."""
    return torch.empty(0, dtype=torch.int64)


@dataclass(eq=False)  # eq=False: nodes are compared by identity and can be dict keys
class TreeNode:
    """One node of the radix tree; ``key`` and ``value`` describe the edge into it."""

    children: dict[int, TreeNode] = field(default_factory=dict, repr=False)  # first token of child key -> node
    parent: TreeNode | None = field(default=None, repr=False)
    key: list[int] = field(default_factory=list)  # token ids on the edge into this node
    value: torch.Tensor = field(default_factory=_no_slots)  # KV slot ids, shape [len(key)], int64
    lock_ref: int = 0  # running requests whose cached prefix passes through this node
    depth: int = 0  # tokens from the root to the end of this edge (the key the node spells)
    last_access_time: int = 0  # the cache's access counter at the last visit, not wall clock


@dataclass
class Mark:
    """Where a request's tokens reached the tree when it left a batch unfinished (an s4 jump
    takes it out and re-admits it): ``node`` then spelled ``tokens[:node.depth]``, with KV
    ``slots[:node.depth]`` (its table row's, borrowed from the tree). The re-admission's walk
    starts there (`RadixCache.match_prefix`'s ``mark``) instead of at the root."""

    node: TreeNode
    tokens: list[int]  # the node.depth tokens it spells
    slots: torch.Tensor  # shape [node.depth], int64
    generation: int  # the tree's `reset` count when it was made: a reset voids it


def _parent(node: TreeNode) -> TreeNode:
    """The parent of a node that is not the root (only the root has none)."""
    assert node.parent is not None, "the root has no parent"
    return node.parent


def _common_prefix_len(a: list[int], b: list[int], start: int = 0) -> int:
    """Number of leading tokens ``a`` shares with ``b[start:]``.

    List comparisons run in C: one settles the usual case (the whole edge matches), and a
    binary search over prefix lengths finds the first difference otherwise. A Python loop
    over the tokens cost as much as the rest of scheduling together (a ~600-token prompt
    walks ~300 shared tokens at every lookup).
    """
    n = min(len(a), len(b) - start)
    if a[:n] == b[start : start + n]:
        return n
    same, differs = 0, n  # a[:same] matches, a[:differs] does not
    while differs - same > 1:
        mid = (same + differs) // 2
        if a[:mid] == b[start : start + mid]:
            same = mid
        else:
            differs = mid
    return same


class RadixCache:
    """Prefix tree of cached token sequences and their KV slots (see the module docstring).

    ``token_to_kv_pool`` is any object with ``free(slots: LongTensor)``; the cache calls
    it only when it evicts.
    """

    def __init__(self, token_to_kv_pool: SlotPool, disable: bool = False):
        self.token_to_kv_pool = token_to_kv_pool
        self.disable = disable
        self._generation = 0  # `reset`s so far
        self.reset()

    def reset(self) -> None:
        """Forget every cached sequence without freeing slots (reset the pool as well)."""
        self.root_node = TreeNode(lock_ref=1)  # the root holds no tokens and is never evicted
        self._generation += 1  # voids every `Mark` made before
        self._evictable_size = 0
        self._protected_size = 0
        self._clock = 0

    # ----- lookup and insertion -------------------------------------------------------

    def match_prefix(self, key: list[int], mark: Mark | None = None) -> tuple[torch.Tensor, TreeNode]:
        """Longest cached prefix of ``key``.

        Returns the KV slots of that prefix (shape ``[prefix_len]``, int64) and the node
        where it ends (the root when nothing matches). A node whose key the match stops
        inside is split, so the returned node covers exactly the prefix. The nodes the
        match ends in get a fresh access time (see `_touch`). ``mark``: where the request
        left the tree before (`Req.radix_mark`): the walk resumes there (`_resume`).
        """
        start, before = self._resume(mark, key)
        after, node = self.match_after(start, key)
        return (torch.cat([before, after]) if len(before) else after), node

    def match_after(self, start: TreeNode | None, key: list[int]) -> tuple[torch.Tensor, TreeNode]:
        """`match_prefix` for a walk that begins at ``start`` (see `_walk_from`): the slots
        returned are those after ``start`` only (shape ``[prefix_len - start.depth]``): the
        caller has the ones before (a running request's table row)."""
        if self.disable:
            return _no_slots(), self.root_node
        if not isinstance(key, list):  # callers usually pass a fresh list already
            key = list(key)
        self._clock += 1
        node, pos = self._walk_from(start, key)
        self._touch(node)
        pieces = []
        while pos < len(key) and key[pos] in node.children:
            child = node.children[key[pos]]
            n = _common_prefix_len(child.key, key, pos)
            if n < len(child.key):
                # After the split the new node's only child starts with a token that key
                # does not have here, so the loop stops after this step.
                child = self._split_node(child, n)
            self._touch(child)
            pieces.append(child.value)
            node = child
            pos += n
        slots = torch.cat(pieces) if pieces else _no_slots()
        return slots, node

    def _touch(self, node: TreeNode) -> None:
        """Give ``node`` a fresh access time. Its ancestors are not walked: an ancestor is
        read by eviction only once it is a leaf, after its children went, and each evicted
        child hands it its time (`evict`), so it is evicted when walking every ancestor at
        every access would have put it (a jumping request's path is ~100 nodes long)."""
        node.last_access_time = self._clock

    def _walk_from(self, start: TreeNode | None, key: list[int]) -> tuple[TreeNode, int]:
        """Where a walk for ``key`` begins: the root, or ``start`` with ``start.depth``
        tokens of ``key`` already matched.

        ``start`` is a node the caller knows spells the start of ``key``: a running
        request's locked ``last_node``, or `_resume`'s answer for a request that comes
        back. The walk then compares only the tokens after it: a jumping request's path grows
        by ~2 nodes a jump, and comparing all of it again at every admission, prefill and
        release was most of a jump's scheduling cost. Only ``start``'s own edge is checked
        against ``key``, to catch a wrong node.
        """
        if start is None or start is self.root_node:
            return self.root_node, 0
        if start.depth > len(key) or start.key != key[start.depth - len(start.key) : start.depth]:
            raise ValueError(
                f"a walk may start only at a node that spells the start of its key (node of "
                f"depth {start.depth} ending {start.key[-4:]}; key of {len(key)} tokens)"
            )
        return start, start.depth

    def mark(self, node: TreeNode, tokens: list[int], slots: torch.Tensor) -> Mark:
        """A `Mark` of where a request leaves the tree: ``node`` spells ``tokens[:node.depth]``
        and its path holds ``slots[:node.depth]`` (the mark keeps only those)."""
        return Mark(node, tokens[: node.depth], slots[: node.depth], self._generation)

    def _resume(self, mark: Mark | None, key: list[int]) -> tuple[TreeNode | None, torch.Tensor]:
        """Where a walk for ``key`` may start for a request that left the tree at ``mark``:
        the deepest of ``mark.node`` and its ancestors that spells the start of ``key``,
        and the KV slots of its path (shape ``[node.depth]``); (None, no slots) without a
        mark, or when the node has left the tree since (evicted, or the tree reset)."""
        if mark is None or mark.generation != self._generation:
            return None, _no_slots()
        same = _common_prefix_len(mark.tokens, key)
        node: TreeNode | None = mark.node
        while node is not None and node.depth > same:
            node = node.parent
        # A node still hanging from its parent is in the tree: eviction takes leaves only.
        if node is None or (node.parent is None and node is not self.root_node):
            return None, _no_slots()
        return node, mark.slots[: node.depth]

    def match_len(self, key: list[int], mark: Mark | None = None) -> int:
        """``len(match_prefix(key, mark)[0])``, read only: no node is split, no slot
        gathered, no access time changed. Ranking a waiting queue by its cached prefixes
        needs only this; `match_prefix` is for the request that is admitted."""
        if self.disable:
            return 0
        node, pos = self._walk_from(self._resume(mark, key)[0], key)
        while pos < len(key) and key[pos] in node.children:
            node = node.children[key[pos]]
            n = _common_prefix_len(node.key, key, pos)
            pos += n
            if n < len(node.key):
                break
        return pos

    def insert(self, key: list[int], value: torch.Tensor, start: TreeNode | None = None) -> int:
        """Cache ``key`` with KV slots ``value`` (shape ``[len(key)]``, int64).

        Returns how many leading tokens of ``key`` were already cached; the tree keeps its
        own slots for those and stores a copy of ``value[returned:]`` for the rest (see the
        module docstring for who frees the duplicates). Visited nodes get a fresh access
        time. ``start``: see `_walk_from`.
        """
        if self.disable:
            return 0
        key = list(key)
        value = torch.as_tensor(value)
        if value.dim() != 1 or value.shape[0] != len(key):
            raise ValueError(
                f"insert needs one KV slot per token: key has {len(key)} tokens but value "
                f"has shape {tuple(value.shape)}"
            )
        self._clock += 1
        node, pos = self._walk_from(start, key)
        self._touch(node)
        while pos < len(key):
            child = node.children.get(key[pos])
            if child is None:
                # Clone: the caller's tensor is usually a view of a reusable table row.
                leaf = TreeNode(
                    parent=node,
                    key=key[pos:],
                    value=value[pos:].to(torch.int64).clone(),
                    last_access_time=self._clock,
                    depth=len(key),
                )
                node.children[key[pos]] = leaf
                self._evictable_size += len(leaf.key)
                return pos
            n = _common_prefix_len(child.key, key, pos)
            if n < len(child.key):
                child = self._split_node(child, n)
            self._touch(child)
            node = child
            pos += n
        return len(key)

    def _split_node(self, child: TreeNode, n: int) -> TreeNode:
        """Cut ``child``'s edge after ``n`` tokens (``0 < n < len(child.key)``).

        A new node holding the first ``n`` tokens goes between ``child`` and its parent and
        is returned. ``child`` keeps its identity (locks held on it stay valid) and its
        remaining tokens; the new node inherits its lock count and access time, so the
        evictable and protected sizes do not change.
        """
        parent = child.parent
        assert parent is not None  # the root is never split: it has no edge
        upper = TreeNode(
            children={child.key[n]: child},
            parent=parent,
            key=child.key[:n],
            value=child.value[:n],
            lock_ref=child.lock_ref,
            last_access_time=child.last_access_time,
            depth=child.depth - len(child.key) + n,
        )
        parent.children[child.key[0]] = upper
        child.parent = upper
        child.key = child.key[n:]
        child.value = child.value[n:]
        return upper

    # ----- locks ----------------------------------------------------------------------

    def inc_lock_ref(self, node: TreeNode) -> int:
        """Lock ``node`` and its ancestors; returns the change of ``evictable_size()``
        (zero or negative)."""
        return 0 if self.disable else self._lock_below(self.root_node, node)

    def move_lock(self, node: TreeNode, descendant: TreeNode) -> None:
        """``inc_lock_ref(descendant)`` then ``dec_lock_ref(node)``, for a ``descendant`` of
        ``node`` (or ``node`` itself): only the nodes between the two change, so a request
        whose prefill grew its path locks its new nodes without walking the whole path."""
        if not self.disable:
            self._lock_below(node, descendant)

    def _lock_below(self, ancestor: TreeNode, node: TreeNode) -> int:
        """Lock ``node`` and its ancestors below ``ancestor``; the change of ``evictable_size()``."""
        delta = 0
        while node is not ancestor:
            if node.lock_ref == 0:
                delta -= len(node.key)
            node.lock_ref += 1
            node = _parent(node)
        self._evictable_size += delta
        self._protected_size -= delta
        return delta

    def dec_lock_ref(self, node: TreeNode) -> int:
        """Undo one ``inc_lock_ref(node)``; returns the change of ``evictable_size()``
        (zero or positive)."""
        if self.disable:
            return 0
        # Ancestors always hold at least the node's count, so checking the node suffices.
        if node is not self.root_node and node.lock_ref <= 0:
            raise ValueError(
                f"dec_lock_ref on a node that is not locked (lock_ref={node.lock_ref}, "
                f"key={node.key[:8]}): every dec_lock_ref needs a matching inc_lock_ref"
            )
        delta = 0
        while node is not self.root_node:
            if node.lock_ref == 1:
                delta += len(node.key)
            node.lock_ref -= 1
            node = _parent(node)
        self._evictable_size += delta
        self._protected_size -= delta
        return delta

    # ----- eviction -------------------------------------------------------------------

    def evict(self, num_tokens: int) -> int:
        """Free at least ``num_tokens`` cached tokens, least recently used unlocked leaves
        first, through ``token_to_kv_pool.free``. Stops early when nothing unlocked is
        left. Returns the number of tokens freed (may exceed ``num_tokens``: a leaf is
        evicted whole)."""
        if self.disable:
            return 0
        # Entries are (access time, tie-breaker, node); the tie-breaker keeps heapq from
        # ever comparing two TreeNodes.
        heap: list[tuple[int, int, TreeNode]] = [
            (leaf.last_access_time, i, leaf) for i, leaf in enumerate(self._unlocked_leaves())
        ]
        heapq.heapify(heap)
        pushed = len(heap)
        freed = 0
        while freed < num_tokens and heap:
            _, _, leaf = heapq.heappop(heap)
            self.token_to_kv_pool.free(leaf.value)
            freed += len(leaf.key)
            parent = _parent(leaf)
            del parent.children[leaf.key[0]]
            leaf.parent = None  # out of the tree: a `Mark` there is void
            parent.last_access_time = max(parent.last_access_time, leaf.last_access_time)  # (_touch)
            self._evictable_size -= len(leaf.key)
            # A parent left without children is now a leaf and may be evicted in turn.
            if parent is not self.root_node and not parent.children and parent.lock_ref == 0:
                heapq.heappush(heap, (parent.last_access_time, pushed, parent))
                pushed += 1
        return freed

    def _unlocked_leaves(self) -> list[TreeNode]:
        """Every childless, unlocked node except the root, in depth-first order."""
        leaves, stack = [], [self.root_node]
        while stack:
            node = stack.pop()
            if not node.children:
                if node is not self.root_node and node.lock_ref == 0:
                    leaves.append(node)
            stack.extend(node.children.values())
        return leaves

    # ----- sizes and inspection -------------------------------------------------------

    def evictable_size(self) -> int:
        """Cached tokens in unlocked nodes (could be evicted right now)."""
        return self._evictable_size

    def protected_size(self) -> int:
        """Cached tokens in locked nodes (in use by running requests)."""
        return self._protected_size

    def total_size(self) -> int:
        """All cached tokens, counted by walking the tree (a check on the two counters)."""
        total, stack = 0, [self.root_node]
        while stack:
            node = stack.pop()
            total += len(node.key)
            stack.extend(node.children.values())
        return total

    def all_sequences(self) -> list[list[int]]:
        """Every root-to-leaf token sequence, sorted; ``[]`` for an empty tree."""
        sequences = []
        stack: list[tuple[TreeNode, list[int]]] = [(self.root_node, [])]
        while stack:
            node, prefix = stack.pop()
            tokens = prefix + node.key
            if not node.children and node is not self.root_node:
                sequences.append(tokens)
            stack.extend((child, tokens) for child in node.children.values())
        return sorted(sequences)
