"""`TokenFSM`: one regex compiled over one vocabulary, and the one way to compile it.

Every stage and the "fsm" grammar backend use the same object:

- `regex` and its `index` {state: {token_id: next_state}} (stage s1);
- optionally `bitmasks` [S, W] int32, one packed row per state, and `state_row`
  {state: its row} (stage s2, packing in constrained/bitmask.py);
- optionally `jump_map`, the forced characters of each state (stage s4,
  constrained/jump_forward.py).

`compile_token_fsm` builds the regex's DFA ONCE and derives the index and the jump map
from it, so their state ids agree by construction. The frozen dataclass is the whole
contract: a stage that wants rows or a jump map asks for them when compiling, nobody
attaches attributes later.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .regex_dfa import ByteDFA, CharDFA, RegexError, compile_regex
from .token_index import TokenIndex, VocabularyCannotSpellError, build_index_fast

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from .jump_forward import JumpForwardMap  # stage s4's file: a checkout of s1-s3 has none


class ConstraintError(ValueError):
    """A grammar this request cannot use; its message ends the request with `abort`."""


class Vocabulary(Protocol):
    """What a compile needs from a tokenizer: each id's exact bytes (None: unusable) and EOS."""

    # Read-only (properties), so that a tokenizer's list or tuple of bytes both qualify.
    @property
    def token_bytes(self) -> Sequence[bytes | None]: ...
    @property
    def eos_token_id(self) -> int: ...


@dataclass(frozen=True)
class TokenFSM:
    """A compiled regex over one vocabulary (shared, read-only, by all its requests)."""

    regex: str
    index: TokenIndex
    bitmasks: torch.Tensor | None = None  # [S, W] int32, row i for the i-th state in sorted order
    state_row: Mapping[int, torch.Tensor] | None = None  # state -> its row of `bitmasks` (a view)
    jump_map: JumpForwardMap | None = None

    def is_complete(self, state: int) -> bool:
        """The match is over: `state` accepts and only EOS can follow.

        (The cheap test first: listing a state's tokens costs as much as the state allows.)
        """
        index = self.index
        return index.is_final(state) and index.allowed_token_ids(state) == [index.eos_token_id]

    def build_row(self, state: int) -> None:
        """Make `state`'s token row if it is not made yet: nothing here, where every row was
        made at compile time; the lazy automaton makes it now (a slice of work that
        `work_slices.checkpoint` may cut: call again, the work done is kept)."""
        return None

    def walk(self, token_ids: Iterable[int], state: int | None = None) -> int:
        """The state after `token_ids` from `state` (default: the start); -1 if rejected."""
        state = self.index.initial_state if state is None else state
        for t in token_ids:
            state = self.index.next_state(state, t)
            if state < 0:
                return -1
        return state

    def nbytes(self) -> int:
        """Bytes of the arrays behind this FSM (what a byte-bounded cache counts)."""
        arrays = getattr(self.index.state_to_tokens, "arrays", None)  # compiled as flat arrays
        if arrays is not None:
            return sum(a.nbytes for a in arrays.values())
        return 0 if self.bitmasks is None else self.bitmasks.nbytes

    def replace(self, **fields: Any) -> TokenFSM:
        """A copy with some fields set (e.g. `bitmasks`/`state_row` added by a stage)."""
        return dataclasses.replace(self, **fields)


def check_regex_length(length: int, max_regex_chars: int | None, what: str = "regex") -> None:
    """Refuse a pattern (`what`) of `length` characters past `max_regex_chars` (None: no
    limit) before building anything from it."""
    if max_regex_chars is not None and length > max_regex_chars:
        raise ConstraintError(
            f"{what} of {length:,} characters is longer than the limit of {max_regex_chars:,} (option max_regex_chars)"
        )


def compile_dfa(regex: str, max_states: int, max_regex_chars: int | None = None) -> CharDFA:
    """regex -> character DFA with at most `max_states` states. Raises ConstraintError.

    The bounds make a pathological pattern fail with a clear message instead of eating
    the machine (engine options `max_fsm_states`, default 10,000, and `max_regex_chars`).
    """
    check_regex_length(len(regex), max_regex_chars)
    try:
        return compile_regex(regex, max_states=max_states)
    except RegexError as e:
        raise ConstraintError(str(e)) from e


def index_from_dfa(dfa: CharDFA, vocab: Vocabulary) -> tuple[ByteDFA, TokenIndex]:
    """character DFA -> byte DFA -> token index over the vocabulary's exact bytes."""
    byte_dfa = ByteDFA.from_char_dfa(dfa)
    try:
        return byte_dfa, build_index_fast(byte_dfa, vocab.token_bytes, vocab.eos_token_id, progress=False)
    except VocabularyCannotSpellError as e:
        raise ConstraintError(str(e)) from e


def compile_regex_index(
    regex: str, vocab: Vocabulary, max_states: int, max_regex_chars: int | None = None
) -> TokenIndex:
    """regex -> character DFA -> byte DFA -> token index over `vocab`'s exact bytes."""
    return index_from_dfa(compile_dfa(regex, max_states, max_regex_chars), vocab)[1]


def compile_token_fsm(
    regex: str,
    vocab: Vocabulary,
    max_states: int,
    *,
    vocab_size: int | None = None,
    jump_map: bool = False,
    max_regex_chars: int | None = None,
) -> TokenFSM:
    """regex -> TokenFSM, building the DFA once. `vocab_size` (the logits' width) adds the
    packed rows; `jump_map=True` adds the jump-forward map from the same DFA."""
    dfa = compile_dfa(regex, max_states, max_regex_chars)
    byte_dfa, index = index_from_dfa(dfa, vocab)
    fsm = TokenFSM(regex, index)
    if jump_map:
        from .jump_forward import JumpForwardMap  # stage s4's file

        fsm = fsm.replace(jump_map=JumpForwardMap.build(dfa, byte_dfa))
    if vocab_size is not None:
        from .bitmask import with_rows  # torch: only the stages that pack rows need it

        fsm = with_rows(fsm, vocab_size)
    return fsm
