"""A checkpoint's other end-of-sequence tokens, as its grammar sees them.

Grammar backends know one EOS: the tokenizer's (the fsm index, xgrammar's TokenizerInfo,
llguidance's and outlines-core's vocabularies). A checkpoint's generation_config.json may
list more (Llama 3.0 Instruct: <|end_of_text|> is the tokenizer's, <|eot_id|> is what the
chat model writes; Qwen2.5: <|im_end|> and <|endoftext|>), and every one of them ends a
request (`Scheduler.ends_at`). Under a grammar the others were masked like any token the
grammar does not spell, so a model that wanted to end with <|eot_id|> could only end with a
token it rarely writes, or go on writing whitespace the grammar allows until
max_new_tokens. (xgrammar takes a list, `TokenizerInfo(stop_token_ids=...)`; SGLang passes
the model's EOS ids there.)

So an extra EOS that spells nothing is an alias of the grammar's EOS: allowed wherever EOS
is, and handed to the grammar as EOS when sampled. An "EOS" that spells text (a config that
lists an ordinary token) stays an ordinary token to the grammar.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from .tokenizer import Tokenizer


@dataclass(frozen=True)
class StopAliases:
    """The tokenizer's EOS and the extra stop ids that stand for it under a grammar."""

    eos: int
    ids: tuple[int, ...]  # the aliases, sorted (empty for most checkpoints)

    @classmethod
    def of(cls, tokenizer: Tokenizer, stop_token_ids: frozenset[int]) -> StopAliases:
        spells_nothing = [t for t in stop_token_ids if t < tokenizer.vocab_size and not tokenizer.token_bytes[t]]
        return cls(tokenizer.eos_token_id, tuple(sorted(set(spells_nothing) - {tokenizer.eos_token_id})))

    def for_grammar(self, token_id: int) -> int:
        """The token a grammar is given for `token_id`: EOS for an alias."""
        return self.eos if token_id in self.ids else token_id

    @contextlib.contextmanager
    def kept(self, logits: torch.Tensor) -> Iterator[None]:
        """Mask `logits` [N, V] in the block; afterwards, each row whose EOS the mask allowed
        gets its aliases' logits back (the rows the mask forbade EOS keep them forbidden)."""
        if not self.ids:
            yield
            return
        ids = torch.tensor(self.ids, device=logits.device)
        before = logits[:, ids].clone()
        yield
        ends = logits[:, self.eos] != float("-inf")
        logits[:, ids] = torch.where(ends[:, None], before, logits[:, ids])
