"""Plausible wrong solutions of sheet s2 (exercises/s2.md); the format is in __init__.py."""

MUTATIONS = [
    (
        "task2_1",
        "bits packed most significant first",
        "<< torch.arange(32, dtype=torch.int64)",
        "<< torch.arange(31, -1, -1, dtype=torch.int64)",
    ),
    ("task2_1", "the word count rounded down", "words = (v + 31) // 32", "words = v // 32"),
    ("task2_1", "the bits right-aligned in the last word", "padded[..., :v]", "padded[..., words * 32 - v:]"),
    ("task2_2", "bits read most significant first", "_BIT.to(mask.device)", "(31 - _BIT).to(mask.device)"),
    ("task2_2", "the padding bits kept", "[..., :vocab_size]", ""),
    ("task2_2", "no `& 1`: the arithmetic shift drags the sign bit along", ") & 1", ")"),
    ("task2_2", "the batch dimension flattened too", "bits.flatten(-2)", "bits.flatten()"),
    (
        "task2_3",
        "unconstrained rows left all-forbidden",
        "    self.all_allowed if",
        "    torch.zeros_like(self.all_allowed) if",
    ),
    (
        "task2_3",
        "finished requests masked by their state",
        "if req.grammar is None or req.finished",
        "if req.grammar is None",
    ),
    (
        "task2_3",
        "every request on the first request's FSM",
        "else req.grammar.fsm.state_row",
        "else reqs[0].grammar.fsm.state_row",
    ),
    (
        "task2_3",
        "a new tensor instead of writing into `mask`",
        "torch.stack(rows, out=mask)",
        "mask = torch.stack(rows)",
    ),
    ("task2_4", "the allowed tokens masked instead of the others", "masked_fill_(~allowed,", "masked_fill_(allowed,"),
    ("task2_4", "not in place", "logits.masked_fill_(", "logits = logits.masked_fill("),
    ("task2_4", "the mask unpacked to its full width", "logits.shape[-1])", "mask.shape[-1] * 32)"),
    ("task2_4", "a large negative number instead of -inf", 'float("-inf")', "-1e4"),
    (
        "task2_4",
        "the caller's mask inverted in place to get the forbidden bits",
        "allowed = unpack_bits(mask.to(logits.device), logits.shape[-1])\nlogits.masked_fill_(~allowed,",
        "mask.bitwise_not_()\nforbidden = unpack_bits(mask.to(logits.device), logits.shape[-1])\n"
        "logits.masked_fill_(forbidden,",
    ),
    ("task2_2", "_BIT left on the CPU (a mask on a GPU is shifted by a CPU tensor)", "_BIT.to(mask.device)", "_BIT"),
    (
        "task2_1",
        "one output buffer per shape kept between calls (a second FSM's packing overwrites the first's rows)",
        "return torch.where(packed >= 2**31, packed - 2**32, packed).to(torch.int32)",
        'out = pack_bits.__dict__.setdefault("buffers", {}).setdefault(\n'
        "    tuple(packed.shape), torch.empty(packed.shape, dtype=torch.int32)\n"
        ")\n"
        "return out.copy_(torch.where(packed >= 2**31, packed - 2**32, packed))",
    ),
    # A stranger's wrong solutions (mistakes3, 2026-12-05), each of which passed the grader.
    (
        "task2_3",
        "rows read from bitmasks by state number (bitmasks[state], not state_row[state]): wrong past a gap in "
        "the index's states",
        "req.grammar.fsm.state_row[req.grammar.state]",
        "req.grammar.fsm.bitmasks[req.grammar.state]",
    ),
    (
        "task2_4",
        "the mask unpacked on its own device, not the logits' (masked_fill_ mixes a GPU's logits with a CPU mask)",
        "unpack_bits(mask.to(logits.device), logits.shape[-1])",
        "unpack_bits(mask, logits.shape[-1])",
    ),
    (
        "task2_1",
        "written for [V] and [B, V] only (the sheet: any number of leading dimensions)",
        "padded = torch.zeros(*allowed.shape[:-1], words * 32, dtype=torch.int64)\npadded[..., :v] = allowed.to(torch.int64)",
        "if allowed.dim() == 1:\n    return pack_bits(allowed[None])[0]\n"
        "padded = torch.zeros(allowed.shape[0], words * 32, dtype=torch.int64)\npadded[:, :v] = allowed.to(torch.int64)",
    ),
    (
        "task2_2",
        "flatten(1), not flatten(-2): right for a [B, W] mask only ([W] keeps its [W, 32] bits, [A, B, W] merges B)",
        "bits.flatten(-2)[..., :vocab_size]",
        "bits.flatten(1)[..., :vocab_size]",
    ),
    # Stranger 15's (2026-12-06, /work/scratch/stranger15): passed the grader, each caught now.
    (
        "task2_3",
        "only the constrained rows written (an unconstrained request's row left as the buffer had it)",
        "torch.stack(rows, out=mask)",
        "for i, req in enumerate(reqs):\n    if req.grammar is not None and not req.finished:\n        mask[i] = rows[i]",
    ),
    (
        "task2_4",
        "the mask added (0 or -inf), not filled in: a forbidden +inf logit becomes nan",
        'logits.masked_fill_(~allowed, float("-inf"))',
        'logits += torch.where(allowed, 0.0, float("-inf")).to(logits.dtype)',
    ),
]
