"""Speculative decoding's two halves that know nothing of the engine: where drafts come
from, and which of them to keep once the model has seen them.

Read with stages/s7_speculative.py. A draft is a guess at a request's next tokens that
costs no forward: the model then checks all of them in ONE forward (an extend of the
last token and the drafts on top of the request's KV), which yields the model's own
distribution at every draft position at once.

Draft sources (each proposes at most k tokens to follow the request's tokens):

- `ngram_drafts`: prompt lookup, SGLang's "NGRAM" (Saxena 2023): find the last n tokens
  earlier in prompt + output, propose what followed them there. An extraction answer
  is mostly copied from its prompt, so these are often right. (`NgramIndex` gives the
  same drafts from an index of the request's n-grams, what the stage uses per request.)
- `forced_drafts`: the text the grammar forces from its state (s4's jump map, xgrammar's
  `find_jump_forward_string`, llguidance's fast-forward bytes), tokenized on its own. The
  grammar allows every one of them; the model still decides whether it would have
  written them. At the forced text's end the grammar offers a choice, and the model
  often writes one token across it (`": "` where `":` is forced): there the last draft
  is left to the model (s4's seam rule), since the verify forward yields the model's own
  token at that position anyway.

Acceptance, given the model's logits at the m + 1 positions (the last token and the m
drafts), each row already masked by the grammar's mask at that position:

- `accept_greedy`: keep the longest prefix of drafts equal to the masked argmax, then the
  model's own choice at the first position it disagrees (or after the last draft):
  exactly the tokens one-at-a-time greedy decoding would have produced.
- `accept_sampled`: rejection sampling (Leviathan et al. 2023; Chen et al. 2023) for a
  draft that is one token, not a distribution: keep draft d with probability p(d), else
  sample from p with d taken out. Each output token is then distributed exactly as p,
  the masked target distribution; a draft the grammar forbids has p(d) = 0 and is
  rejected without a draw.
- `seeded_scores`: the same law for a seeded request, its randomness fixed by (seed,
  position) (an exponential race), so that `accept_greedy` on the scores keeps the same
  tokens whatever drafts the request was offered.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def ngram_drafts(tokens: list[int], k: int, min_n: int = 1, max_n: int = 4) -> list[int]:
    """Up to `k` tokens that followed the latest earlier occurrence of the longest tail of
    `tokens` (its last n tokens, n from `max_n` down to `min_n`); [] when no tail recurs.

    The longest tail first: a match of four tokens predicts better than a match of one.
    The latest occurrence first: what was written most recently is likeliest to repeat.
    """
    if k <= 0:
        return []
    end = len(tokens)
    for n in range(min(max_n, end - 1), min_n - 1, -1):
        tail = tokens[end - n :]
        # An occurrence starting at `start` must leave at least one token after it that is
        # not the tail itself: start + n < end.
        for start in range(end - n - 1, -1, -1):
            if tokens[start : start + n] == tail:
                return tokens[start + n : start + n + k]
    return []


class NgramIndex:
    """`ngram_drafts` for a request whose tokens only grow, without scanning them.

    `ngram_drafts` reads the whole prompt and output back to front for every n at every
    step: ~0.4 ms for a 500-token request with no match in Python, 25 ms a step for a batch
    of 64 on chapter 06's extraction service. This keeps, for every n-gram (n from `min_n`
    to `max_n`) of the tokens but the last, its latest start, updated as tokens are
    appended (SGLang's NGRAM keeps a trie of the request's n-grams for the same reason);
    a lookup is then a few dictionary reads. `drafts(tokens, k, extra)` is exactly
    `ngram_drafts(tokens + extra, k, min_n, max_n)`.
    """

    def __init__(self, min_n: int = 1, max_n: int = 4):
        self.min_n, self.max_n = min_n, max_n
        self.tokens: list[int] = []
        # n-gram -> its latest start s among the n-grams of tokens[:-1] (s + n <= len - 1)
        self.latest: dict[tuple[int, ...], int] = {}

    def sync(self, tokens: list[int]) -> None:
        """Take in what `tokens` (this request's, which only grow) added since the last call."""
        if len(tokens) < len(self.tokens) or tokens[:1] != self.tokens[:1]:
            self.tokens, self.latest = [], {}  # not the same request's tokens: start again
        for token in tokens[len(self.tokens) :]:
            end = len(self.tokens)  # the n-grams ending here now have a token after them
            for n in range(self.min_n, min(self.max_n, end) + 1):
                self.latest[tuple(self.tokens[end - n : end])] = end - n
            self.tokens.append(token)

    def drafts(self, tokens: list[int], k: int, extra: list[int] | None = None) -> list[int]:
        """Up to `k` tokens that followed the latest earlier occurrence of the longest tail
        of `tokens` + `extra` (what `ngram_drafts` proposes); `extra` (drafts not yet
        accepted, at most a few) is not indexed."""
        self.sync(tokens)
        extra = extra or []
        seq_len, base = len(self.tokens) + len(extra), len(self.tokens)
        if k <= 0:
            return []

        def at(i: int) -> int:
            return self.tokens[i] if i < base else extra[i - base]

        for n in range(min(self.max_n, seq_len - 1), self.min_n - 1, -1):
            tail = [at(i) for i in range(seq_len - n, seq_len)]
            start = None
            # Occurrences the index does not hold: those ending at or after `base - 1`
            # (they reach the last indexed token or the extra ones), latest first.
            for s in range(seq_len - n - 1, max(base - n - 1, -1), -1):
                if all(at(s + j) == tail[j] for j in range(n)):
                    start = s
                    break
            if start is None:
                start = self.latest.get(tuple(tail))
            if start is not None:
                return [at(i) for i in range(start + n, min(start + n + k, seq_len))]
        return []


def forced_drafts(
    forced: bytes,
    k: int,
    encode: Callable[[str], list[int]],
    longest_token: int,
    seam: Callable[[list[int]], int] | None = None,
) -> list[int]:
    """The first `k` tokens of the grammar's forced bytes, encoded on their own.

    No drafts when the forced bytes begin inside a character (the output ends with its first bytes).
    Only the first (k + 1) * `longest_token` bytes are encoded (a grammar may force a
    megabyte; k tokens never need more than that), cut back to whole UTF-8 characters.
    When the k tokens reach the forced text's end, `seam(tokens)` says how many of them to
    keep: the model may write the last one, or the last few, as part of one longer token
    (the seam: the verify would always reject `":` where the model writes `": "`).
    """
    # A forced text that begins inside a character (the output ends with its first bytes):
    # text cannot spell those bytes, and drafts that skipped them would not be the forced text.
    if k <= 0 or not forced or forced[0] & 0xC0 == 0x80:
        return []
    head = forced[: (k + 1) * longest_token]
    text = head.decode("utf-8", errors="ignore") if len(head) == len(forced) else _whole_chars(head)
    ids = encode(text) if text else []
    # More than k tokens: the k-th is inside the forced text, not at its seam.
    if len(ids) <= k and ids and seam is not None:
        return ids[: seam(ids)]
    return ids[:k]


def seam_token(head: bytes, allowed: list[tuple[bytes, int]]) -> int | None:
    """The token to draft across a forced text's seam, or None.

    `head`: the forced text's end that the model writes merged with what follows (`":`);
    `allowed`: (spelling, id) of the tokens the grammar allows there that start with
    `head` and are longer (`": `, `": "`, `": "+` for a string value; `": ` alone for a
    number). Read as a trie, they continue `head` byte by byte: follow it while every
    one of them agrees on the next byte, and take the deepest token on that path. Where
    they part (`": "` then `+` or `(`), the next byte is the model's choice, not the
    grammar's or the vocabulary's: `": "` for a string value, `": ["` for an array, `": `
    for a number. The model was trained on text its tokenizer cut into the longest
    tokens, so it writes these; when it does not, the verify rejects the draft.
    """
    path, best = head, None
    spelled = dict(allowed)
    while True:
        following = {b[len(path)] for b in spelled if len(b) > len(path) and b.startswith(path)}
        if len(following) != 1:
            return best
        path += bytes(following)
        best = spelled.get(path, best)


def _whole_chars(data: bytes) -> str:
    """`data` up to its last complete UTF-8 character (a cut may split one)."""
    for cut in range(len(data), max(len(data) - 4, -1), -1):
        try:
            return data[:cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return ""


def accept_greedy(logits: torch.Tensor, drafts: list[int]) -> list[int]:
    """logits: [m + 1, V] masked, row i at the position that chooses token i; drafts: [m].
    Returns the accepted drafts and then the model's own next token (1 to m + 1 tokens)."""
    # BEGIN SOLUTION task7_2
    picks = logits.argmax(dim=-1).tolist()
    out = []
    for pick, draft in zip(picks, drafts):
        if pick != draft:
            break
        out.append(draft)
    out.append(picks[len(out)])
    return out
    # END SOLUTION


def seeded_scores(probs: torch.Tensor, seed: int, first_position: int) -> torch.Tensor:
    """probs: [m + 1, V], row i a target distribution at output position first_position + i
    -> scores [m + 1, V] whose argmax in row i is distributed exactly as row i, with all the
    randomness fixed by (seed, position): `accept_greedy` on them is a seeded request's
    acceptance, and its output cannot depend on the drafts.

    Rejection sampling draws once per draft, so a request that was offered fewer drafts (the
    step's grammar budget cut them, a stranger found) reads its generator otherwise and
    writes another text. The exponential race reads none of that: each position has its own
    noise E(v) ~ Exp(1), drawn from a generator seeded by (seed, position), and the token is
    the v with the largest p(v) / E(v), which is v with probability p(v) / sum(p) (the
    Gumbel-max trick in another dress). A draft is kept when it is that token: with
    probability p(d), as rejection sampling keeps it, and the token after a rejected draft
    is the race's winner, distributed as p without d, as rejection sampling's residual is.
    """
    scores = torch.empty_like(probs)
    for i, row in enumerate(probs):
        generator = torch.Generator().manual_seed(_position_seed(seed, first_position + i))
        noise = torch.empty(row.shape, dtype=torch.float64).exponential_(generator=generator)
        scores[i] = (torch.log(row.double()) - torch.log(noise)).to(scores.dtype)  # log p - log E
    return scores


def _position_seed(seed: int, position: int) -> int:
    """A generator seed for one output position of a seeded request (splitmix64's mixing:
    nearby seeds and positions give unrelated streams)."""
    x = (seed * 0x9E3779B97F4A7C15 + position + 1) % 2**64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) % 2**64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) % 2**64
    return (x ^ (x >> 31)) % 2**63


def accept_sampled(probs: torch.Tensor, drafts: list[int], generator: torch.Generator) -> list[int]:
    """probs: [m + 1, V], row i the target distribution (masked, with the request's
    temperature, top-k, top-p and min-p) at the position that chooses token i; drafts: [m].
    Returns the accepted drafts and one more token, each distributed exactly as its row.

    Draft d at row i is kept with probability p_i(d). On a rejection, the token comes
    from p_i with d removed, renormalised: P(d) = p(d), and P(x) = (1 - p(d)) * p(x) /
    (1 - p(d)) = p(x) for x != d. After the last draft, a token from the next row.
    """
    # BEGIN SOLUTION task7_3
    out = []
    for i, draft in enumerate(drafts):
        # Relative to the row's sum, as torch.multinomial reads it: a row whose only mass is
        # the draft then keeps it for certain (rounding cannot leave an empty residual).
        p_draft = float(probs[i, draft] / probs[i].sum())
        if p_draft > 0 and float(torch.rand((), generator=generator)) < p_draft:
            out.append(draft)
            continue
        residual = probs[i].clone()
        residual[draft] = 0.0
        out.append(int(torch.multinomial(residual, 1, generator=generator)))
        return out
    out.append(int(torch.multinomial(probs[len(drafts)], 1, generator=generator)))
    return out
    # END SOLUTION
