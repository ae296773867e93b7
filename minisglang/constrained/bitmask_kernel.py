"""The fast `apply_bitmask` on CPU (stage s2): one compiled loop over the packed words.

Read with chapters/02-batched-masks.md, "A faster apply". The readable apply
(`apply_bitmask_torch` in bitmask.py) unpacks every bit into a [B, V] bool tensor and calls
`masked_fill_`, so it reads and writes the whole [B, V] logits however few tokens are
blocked. This kernel (compiled by numba on first use, then cached on disk) looks at one
32-bit word at a time: an all-ones word (32 allowed tokens, the common case inside a JSON
string) is skipped, an all-zeros word (the common case after a key) becomes 32 `-inf`
stores, and only mixed words are read bit by bit, each of their 32 logits rewritten as
itself or `-inf` (a select, which the compiler turns into vector instructions; a branch
per bit was 1.5-2x slower on masks of mixed words). Same result, a few times less memory
traffic. It releases the GIL, so a background compile (stage s3) keeps running meanwhile.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def apply_bitmask_cpu(logits: np.ndarray, mask: np.ndarray) -> None:
    """logits float32 [B, V] in place: -inf where the bit of `mask` int32 [B, W] is 0.

    Token t is bit t % 32 of word t // 32; bits past V in the last word are ignored.
    """
    batch, vocab = logits.shape
    whole = vocab // 32  # words whose 32 tokens all exist (a last, partial word comes after)
    blocked = np.float32(-np.inf)
    for i in range(batch):
        row = logits[i]
        for j in range(whole):
            word = mask[i, j]
            if word == -1:  # all 32 tokens allowed
                continue
            start = j * 32
            if word == 0:  # all 32 blocked: one vectorised store
                row[start : start + 32] = blocked
                continue
            bits = np.uint32(word)  # unsigned, so bit 31 (int32's sign bit) shifts like the others
            for k in range(32):  # a fixed count and a select, not a branch: vector instructions
                row[start + k] = row[start + k] if (bits >> np.uint32(k)) & np.uint32(1) else blocked
        for t in range(whole * 32, vocab):  # the last word's tokens, when V is not a multiple of 32
            if not (np.uint32(mask[i, whole]) >> np.uint32(t - whole * 32)) & np.uint32(1):
                row[t] = blocked
