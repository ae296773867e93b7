"""The row shortcuts of the lazy automaton: five shapes of state whose token row is made
without (or with less of) the plain trie walk of lazy_token_fsm.py.

`LazyStateIndex._row_of` tries them in this order and walks the trie when none fits; each
returns None when its shape does not fit, and a row it returns holds exactly the tokens the
walk would allow (tests/test_lazy_row_shortcuts.py and tests/test_lazy_automaton.py compare
them with the eager index):
- `_row_from_alternatives`: a permissive alternation `A|B|...`, the union of its members' rows;
- `_row_from_repeat`: a permissive repetition `C{lo,hi}`, from C's per-token counts;
- `_row_from_strings`: literal text that fans out (an object's keys, an enum's values),
  walked along its syntax tree;
- `_row_from_head`: a state `H T` with a permissive head, H's row plus the few tokens that
  can leave H;
- `_row_from_closure`: a state that keeps reading a wide byte set, every token made of it
  at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .lazy_byte_dfa import LazyByteDFA
from .lazy_regex import ALT, BYTES, CONCAT, REPEAT, RegexNode, fans_out, literal_heads, narrow
from .lazy_rows import SHARED_ROWS, RowKey, TokenRow
from .lazy_trie_walk import VocabArrays, token_repetitions
from .token_fsm import Vocabulary
from .token_index import VocabTrie
from .work_slices import unsliced

# A part of a state (a head, an alternative) gets a row of its own when it can start with
# at least this many bytes: below that, walking the trie from the state itself is cheap.
# (8 lets digit runs and formats such as date-time share their rows: measured p99 at 65k
# ~1.6 ms with 16, ~1.25 ms with 8 or 10.)
PERMISSIVE = 8
# `_row_from_head` takes up to this many elements of a sequence as its head, until few tokens
# hold a byte that what follows the head can start with.
HEAD_PARTS = 3
# `_row_from_closure` needs a byte set of at least CLOSURE_BYTES bytes that at most
# CLOSURE_STATES states keep reading.
CLOSURE_BYTES = 32
CLOSURE_STATES = 16
# `_row_from_strings` walks literal text along the trie where it starts with two bytes or more
# and at least FAN_OUT strings are open within FAN_OUT_BYTES bytes (an object's keys, an
# enum's values): there the compiled walk would build a state per prefix of each (~10 us a
# derivative; 61 keys: ~600 of them, 8 ms), while a Python step costs ~1 us. Below that the
# compiled walk is as cheap, and the states it builds serve the next rows too. At most
# MAX_STRING_STEPS steps.
FAN_OUT = 8
FAN_OUT_BYTES = 4
MAX_STRING_STEPS = 20_000


class LazyRowShortcuts:
    """The row shortcuts, mixed into LazyStateIndex (see the module doc)."""

    # What the plain walk (LazyStateIndex, lazy_token_fsm.py) gives the shortcuts.
    dfa: LazyByteDFA
    trie: VocabTrie
    arrays: VocabArrays
    words: int
    eos_token_id: int
    if TYPE_CHECKING:

        def _row_of(self, state: int, shared: bool = False) -> TokenRow: ...
        def _make_row(self, bits: np.ndarray, extra: np.ndarray, state: int) -> TokenRow: ...
        def _walk(
            self, state: int, origin: int, short: bool, long: bool, starts: list[tuple[int, int]] | None = None
        ) -> tuple[np.ndarray, np.ndarray]: ...
        def _walk_tokens(self, token_ids: np.ndarray, state: int) -> np.ndarray: ...
        def _node_key(self, kind: str, node: RegexNode) -> RowKey | None: ...
        @staticmethod
        def _byte_mask(byte_set: int) -> np.ndarray: ...

    def _init_shortcut_caches(self, vocab: Vocabulary) -> None:
        """The caches of the shortcuts (LazyStateIndex.__init__ calls this)."""
        self._candidates_found: dict[tuple[int, int], np.ndarray] = {}  # (clipped state, byte set) -> ids read
        self._reps: dict[int, np.ndarray | None] = {}  # body node uid -> `_repetitions(body)`
        self._not_strings: set[int] = set()  # node uids `_row_from_strings` gave up on (too many steps)
        # A head's row is reused when at most this many tokens must be walked one by one.
        self.max_candidates = max(256, len(vocab.token_bytes) // 16)

    def _row_from_alternatives(self, state: int) -> TokenRow | None:
        """The row of a permissive alternation `A|B|...`: the union of its members' rows
        (a token can start a match of the whole exactly when it can start one of a member;
        the EOS bits agree too). None when the shape does not fit."""
        node = self.dfa.nodes[state]
        if node.kind != ALT or len(node.parts) > 8 or node.first.bit_count() < PERMISSIVE:
            return None
        bits = np.zeros(self.words, dtype=np.uint32)
        for part in node.parts:
            bits |= self._row_of(self.dfa._state(part), shared=True).packed.numpy().view(np.uint32)
        return self._make_row(bits, np.zeros(0, dtype=np.int64), state)

    def _row_from_repeat(self, state: int) -> TokenRow | None:
        """The row of a permissive repetition `C{lo,hi}` (a string's characters, a run of
        digits) without a trie walk: the tokens that spell at most `hi` repetitions of C,
        the last maybe unfinished (a token inside C{lo,hi} need not reach `lo`). In the
        spirit of xgrammar's context-independent tokens: C's counts per token are computed
        once per vocabulary (`_repetitions`) and every bound of every grammar reads them,
        so `C{0,20}` costs a comparison, not a walk through 20 counting states. None when
        the shape does not fit."""
        node = self.dfa.nodes[state]
        if node.kind != REPEAT or node.first.bit_count() < PERMISSIVE:
            return None
        reps = self._repetitions(node.parts[0])
        if reps is None:
            return None
        allowed = reps >= 0 if node.high is None else (reps >= 0) & (reps <= node.high)
        allowed[self.eos_token_id] = False
        packed = np.zeros(self.words * 4, dtype=np.uint8)
        bits = np.packbits(allowed, bitorder="little")
        packed[: bits.shape[0]] = bits
        return self._make_row(packed.view(np.uint32), np.zeros(0, dtype=np.int64), state)

    def _repetitions(self, body: RegexNode) -> np.ndarray | None:
        """int32 [tokens]: how many repetitions of `body` each token spells, the last maybe
        unfinished (-1: `body*` cannot read it), from `body*`'s automaton built whole
        (lazy_trie_walk.token_repetitions). None when that automaton has more than 64
        states, or when `body` is nullable or not prefix-free (a match that a longer one extends, as
        in `(a|ab)`: then the count of a token is ambiguous). Shared by every grammar over
        this vocabulary (SHARED_ROWS, keyed by the body's structure)."""
        if body.uid in self._reps:
            return self._reps[body.uid]
        if body.nullable:
            # A body that matches "" (`C*`) has `body*` == `body`: one repetition can read any
            # number of characters, so a token's count says nothing about `hi`.
            self._reps[body.uid] = None
            return None
        key = self._node_key("reps", body)
        found = None if key is None else SHARED_ROWS.get(key)
        if found is None:
            pool = self.dfa.pool
            star = LazyByteDFA(pool.repeat(body, 0, None), pool, max_states=1024)
            todo, seen = [star.initial], {star.initial}
            with unsliced():  # at most 64 states, on the side: a slice cut here would lose them
                while todo and star.num_states <= 64:
                    s = todo.pop()
                    star.expand(s)
                    for nxt in np.unique(star.table[s]).tolist():
                        if nxt >= 0 and nxt not in seen:
                            seen.add(nxt)
                            todo.append(nxt)
            # Prefix-free: no state but `body*` itself accepts, so returning to it ends a repetition.
            if star.num_states <= 64 and not star.accepting[1 : star.num_states].any():
                arrays = self.arrays
                found = np.empty(arrays.token_start.shape[0], dtype=np.int32)
                token_repetitions(
                    star.table, arrays.all_bytes, arrays.token_start, arrays.token_stop, star.initial, found
                )
            else:
                found = False  # stored as "does not fit" (None means "not computed")
            if key is not None:
                SHARED_ROWS.put(key, found)
        self._reps[body.uid] = found if isinstance(found, np.ndarray) else None  # (False: does not fit)
        return self._reps[body.uid]

    def _row_from_head(self, state: int) -> TokenRow | None:
        """The row of a state `H T` whose head H is permissive (a string's characters, a
        group holding them), from H's own row and a few tokens walked one by one.

        A token with no byte that T can start with cannot leave H, so it is allowed in
        `H T` exactly when it is allowed in H; only the tokens containing such a byte (a
        few hundred for a closing quote) are walked from `H T` itself. H's row is shared
        by every place the same H appears (one row for the inside of all strings), in the
        spirit of xgrammar's context-independent tokens. None when the shape does not fit.
        """
        dfa, node = self.dfa, self.dfa.nodes[state]
        if node.kind != CONCAT:
            return None
        # The head is the sequence's first element: `(A B) C` is split as A, then `B C`
        # (a group is kept as one node; the language does not care where we split), or its
        # first few (HEAD_PARTS).
        head, tails = node, []
        while head.kind == CONCAT:
            tails.append(head.parts[1])
            head = head.parts[0]
        if head.kind == BYTES or head.first.bit_count() < PERMISSIVE:
            return None  # a head that allows few bytes is cheap to walk as it is
        rest = tails[::-1]  # what follows the head, in order
        for _ in range(HEAD_PARTS):
            rest_first = 0  # the bytes what follows the head can start with
            for tail in rest:
                rest_first |= tail.first
                if not tail.nullable:
                    break
            candidates = self._containing(rest_first)
            if candidates is not None:
                break
            # Almost any token holds a byte the rest can start with: the next element joins
            # the head (`[0-9a-z]*(-?[0-9a-z]+)*` then `"`, a hostname's characters: walked
            # whole from each state at 65k, 1-3 ms a row, the slowest rows there).
            if not rest:
                return None
            follow = rest.pop(0)
            if follow.kind == CONCAT:  # (the sequence's right-nested rest: its first element)
                rest.insert(0, follow.parts[1])
                follow = follow.parts[0]
            if not rest:
                return None  # (the head would be the whole state)
            head = dfa.pool.concat(head, follow)
        else:
            return None
        bits = self._row_of(dfa._state(head), shared=True).packed.numpy().view(np.uint32).copy()
        eos = self.eos_token_id
        bits[eos >> 5] &= ~np.uint32(1 << (eos & 31))
        # What H allows, `H T` allows too; the candidates that leave H are added.
        return self._make_row(bits, self._walk_candidates(rest_first, candidates, state), state)

    def _row_from_strings(self, state: int) -> TokenRow | None:
        """The row of a state whose matches begin with literal text: an enum's values, an
        object's keys (`(name":V|id":W)`), the `":"` before a value, walked through the
        vocabulary trie along the state's own syntax tree: no automaton state, no
        derivative for the positions inside that text.

        The walk holds a trie node and what is left of the match (a stack of parts,
        `literal_heads`); a one-byte part follows that trie child, and every token ending
        at a trie node reached is allowed (it spells a prefix of a match: no node hides an
        empty language). Where the literal text ends (a byte class, a repetition, an
        object's members), the tokens that go on below that trie node are found by the
        ordinary trie walk, from the state of what is left there. Only for a state with no
        entry computed yet, two first bytes or more and at least FAN_OUT strings open (else
        the compiled walk is as cheap). None when the shape does not fit: a match that does
        not begin with literal text, more than MAX_STRING_STEPS steps, or a token longer
        than the trie reached inside the text.
        """
        dfa, node = self.dfa, self.dfa.nodes[state]
        if node.first.bit_count() < 2 or node.uid in self._not_strings or dfa.missing[state] != dfa.live(state):
            # One first byte (inside a key, `":`, `, "`): the strings branch further on, if at
            # all, and checking for that on every such row cost more than it saved. Entries
            # computed: the compiled walk through them is cheaper.
            return None
        steps = [0]
        heads = literal_heads((node,), steps, strict=True)
        if heads is None:
            self._not_strings.add(node.uid)  # some match starts with no literal text: walk it
            return None
        if not fans_out(heads, steps, FAN_OUT, FAN_OUT_BYTES):
            return None  # a few strings: the compiled walk's states serve the next rows too
        todo = [(parts, 0) for parts in heads]
        trie, arrays, has_items, pool = self.trie, self.arrays, self.arrays.has_items, self.dfa.pool
        reached: list[int] = []
        stops: dict[tuple[RegexNode, ...], list[int]] = {}  # what is left -> the trie nodes it goes on from
        while todo:
            parts, at = todo.pop()
            if not parts:
                continue  # a match ends here: no token goes on
            if steps[0] > MAX_STRING_STEPS:
                self._not_strings.add(node.uid)
                return None
            child = arrays.children(trie, at).get(parts[0].byte_set.bit_length() - 1)  # (one byte)
            if child is None:
                continue
            if has_items[child]:
                return None  # a token longer than the trie goes on here: walk instead
            reached.append(child)
            for more in literal_heads(parts[1:], steps):
                if more and not narrow(more[0]):
                    stops.setdefault(more, []).append(child)
                else:
                    todo.append((more, child))
        nodes = np.asarray(reached, dtype=np.int64)
        starts, ends = trie.end_start[nodes], trie.end_stop[nodes]
        lengths = ends - starts
        extra = trie.end_tokens[
            np.repeat(starts - (np.cumsum(lengths) - lengths), lengths) + np.arange(int(lengths.sum()))
        ]
        bits = np.zeros(self.words, dtype=np.uint32)
        if stops:
            pairs = sorted(
                {(at, self.dfa._state(pool.concat_all(list(left)))) for left, ats in stops.items() for at in ats}
            )
            walked, longs = self._walk(state, state, short=True, long=True, starts=pairs)
            bits |= walked
            extra = np.concatenate([extra, longs])
        return self._make_row(bits, extra[extra != self.eos_token_id], state)

    def _row_from_closure(self, state: int) -> TokenRow | None:
        """The row of a state that goes on reading a wide byte set B whatever it read of B
        before (an e-mail's domain label: any letters and digits), without walking the
        tokens made of B through the trie.

        B starts as the bytes the state allows and shrinks until every state reached from
        it by bytes of B (at most CLOSURE_STATES of them) allows all of B: then a token
        made of bytes of B only is read, from the state and from each of those. The tokens
        that start with an allowed byte and hold another byte are walked one by one. None
        when B ends with fewer than CLOSURE_BYTES bytes or more than max_candidates * 2
        tokens must be walked.
        """
        dfa = self.dfa
        if dfa.nodes[state].first.bit_count() < CLOSURE_BYTES:
            return None  # (no derivative spent on a narrow state)
        dfa.expand(state)
        allowed = self._byte_set(dfa.table[state] >= 0)
        wide = allowed
        for _ in range(4):  # shrink B until the states it reaches all allow it
            if wide.bit_count() < CLOSURE_BYTES:
                return None
            reached: set[int] = set()
            todo = [state]
            while todo and len(reached) <= CLOSURE_STATES:
                x = todo.pop()
                starts = dfa.class_starts[x]
                for lo, hi in zip(starts[:-1], starts[1:]):
                    if ((1 << hi) - (1 << lo)) & wide:  # a byte of B is in this class
                        nxt = dfa.fill(x, lo)
                        if nxt >= 0 and nxt not in reached:
                            reached.add(nxt)
                            todo.append(nxt)
            if todo or len(reached) > CLOSURE_STATES:
                return None
            narrower = wide
            for x in reached:
                row = dfa.table[x]
                narrower &= self._byte_set(row >= 0)
            if narrower == wide:
                break
            wide = narrower
        else:
            return None
        inside = self._repetitions(dfa.pool.byte_set(wide))
        if inside is None:
            return None
        arrays = self.arrays
        first = arrays.first_bytes()
        starts_allowed = self._byte_mask(allowed)[first]
        fast = (inside >= 0) & self._byte_mask(wide)[first]
        walk = np.flatnonzero(starts_allowed & ~fast)
        walk = walk[walk != self.eos_token_id]
        if walk.shape[0] > 2 * self.max_candidates:
            return None
        ids = np.concatenate([np.flatnonzero(fast), self._walk_tokens(walk, state)])
        return self._make_row(np.zeros(self.words, dtype=np.uint32), ids[ids != self.eos_token_id], state)

    @staticmethod
    def _byte_set(mask: np.ndarray) -> int:
        """bool [256] -> the 256-bit int with bit b set where mask[b]."""
        return int.from_bytes(np.packbits(mask, bitorder="little").tobytes(), "little")

    def _walk_candidates(self, byte_set: int, split: tuple[np.ndarray, np.ndarray], state: int) -> np.ndarray:
        """int64 the candidates `split` (`_containing(byte_set)`) whose bytes the automaton
        reads from `state`. Those in the trie are walked from `clip(state, max_short_bytes)`
        and remembered there: the positions of a long bounded string (`C{0,119}"...`,
        `C{0,118}"...`) are one clipped state, so their candidates are walked once."""
        arrays, dfa = self.arrays, self.dfa
        clipped = dfa._state(dfa.pool.clip(dfa.nodes[state], arrays.max_short_bytes))
        found = self._candidates_found.get((clipped, byte_set))
        if found is None:
            found = self._candidates_found[clipped, byte_set] = self._walk_tokens(split[0], clipped)
        if split[1].shape[0]:
            found = np.concatenate([found, self._walk_tokens(split[1], state)])
        return found

    def _containing(self, byte_set: int) -> tuple[np.ndarray, np.ndarray] | None:
        """The tokens (EOS excluded) with a byte in `byte_set` (256-bit int), as int64 sorted
        ids (those in the trie, those longer); None when there may be more than
        `max_candidates`. Cached for the vocabulary: grammar after grammar asks for the same
        few sets (a closing quote), and finding them took ~25 us of Python per grammar."""
        arrays, key = self.arrays, ("containing", byte_set, self.eos_token_id)
        if key in arrays._derived:
            return arrays._derived[key]
        parts = [arrays.containing[b] for b in range(256) if byte_set >> b & 1]
        found = None
        if sum(p.shape[0] for p in parts) <= self.max_candidates:
            ids = np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)
            ids = ids[ids != self.eos_token_id]
            short = arrays.token_stop[ids] - arrays.token_start[ids] <= arrays.max_short_bytes
            found = (ids[short], ids[~short])
        if len(arrays._derived) >= 4096:
            arrays._derived.clear()
        arrays._derived[key] = found
        return found
