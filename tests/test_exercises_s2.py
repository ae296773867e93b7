"""Exercise tests of stage s2-batched-mask (`minisglang grade --stage s2`).

- task2_1  pack_bits: bool [..., V] -> int32 [..., ceil(V/32)], token t = bit t % 32 of word t // 32
- task2_2  unpack_bits: the inverse
- task2_3  BatchedMaskStage.fill_mask: each request's precomputed packed row, stacked into the mask
- task2_4  apply_bitmask_torch: -inf wherever the bit is 0, for the whole batch

The oracle for the bit layout is numpy's `packbits(bitorder="little")` read as
little-endian int32 words (xgrammar's token bitmask layout); the oracle for a whole mask
step is stage s1, which s2 must equal bit for bit. Vocabulary widths are deliberately not
multiples of 32, so the last word is only partly used.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from real_tokenizers import bundled
from test_exercises_s1 import VOCAB, VOCAB_SIZE, batches, make_req, make_stage, oracle_row
from torch.overrides import TorchFunctionMode

import minisglang as sgl
from minisglang.constrained.bitmask import apply_bitmask, apply_bitmask_torch, pack_bits, unpack_bits
from minisglang.constrained.token_fsm import TokenFSM
from minisglang.core import AbortKind
from minisglang.stages.s1_masked_fill import FSMState, MaskedFillStage
from minisglang.stages.s2_batched_mask import BatchedMaskStage


# ---------------------------------------------------------------------------------------
# The layout oracle
# ---------------------------------------------------------------------------------------
def oracle_pack(allowed: torch.Tensor) -> torch.Tensor:
    """Bool [..., V] -> int32 [..., ceil(V/32)] with numpy (little-endian bit order)."""
    v = allowed.shape[-1]
    words = (v + 31) // 32
    bits = np.zeros((*allowed.shape[:-1], words * 32), dtype=bool)
    bits[..., :v] = allowed.numpy()
    packed = np.packbits(bits, axis=-1, bitorder="little")  # 8 tokens per byte
    return torch.from_numpy(np.ascontiguousarray(packed).view("<i4").copy())


def oracle_unpack(mask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    data = np.ascontiguousarray(mask.numpy().astype("<i4")).view(np.uint8)
    return torch.from_numpy(np.unpackbits(data, axis=-1, bitorder="little")[..., :vocab_size].astype(bool))


def test_the_layout_oracle():
    row = torch.zeros(40, dtype=torch.bool)
    row[[0, 31, 33]] = True
    assert oracle_pack(row).tolist() == [1 - 2**31, 2]  # bit 31 is int32's sign bit
    assert torch.equal(oracle_unpack(oracle_pack(row), 40), row)


shapes = st.tuples(st.lists(st.integers(1, 3), max_size=2), st.integers(1, 200))


# ---------------------------------------------------------------------------------------
# task2_1 and task2_2: pack_bits / unpack_bits
# ---------------------------------------------------------------------------------------
@pytest.mark.task2_1
@settings(max_examples=80, deadline=None)
@given(shapes, st.integers(0, 2**32 - 1))
@example(([2, 3], 40), 7)  # two leading dimensions: a solution written for [B, V] (or [V]) only fails here
def test_pack_bits_matches_the_layout_oracle(shape, seed):
    lead, v = shape
    allowed = torch.rand(*lead, v, generator=torch.Generator().manual_seed(seed)) < 0.5
    packed = pack_bits(allowed)
    assert packed.dtype == torch.int32 and packed.shape == (*lead, (v + 31) // 32), (
        f"pack_bits of a bool {(*lead, v)}: int32 {(*lead, (v + 31) // 32)} expected; got {packed.dtype} "
        f"{tuple(packed.shape)}"
    )
    wrong = (packed != oracle_pack(allowed)).nonzero().tolist()[:4]
    assert torch.equal(packed, oracle_pack(allowed)), (
        f"pack_bits of a bool {(*lead, v)}: the words at {wrong} "
        f"(first 4) differ from the layout (bit t % 32 of word t // 32)"
    )


@pytest.mark.task2_1
def test_pack_bits_corner_rows():
    v = 70  # three words, the last one using 6 bits
    all_ones = pack_bits(torch.ones(v, dtype=torch.bool))
    got = all_ones.tolist()
    assert got == [-1, -1, 2**6 - 1], f"70 tokens all allowed: [-1, -1, 63] (the last word's 6 low bits); got {got}"
    got = pack_bits(torch.zeros(v, dtype=torch.bool)).tolist()
    assert got == [0, 0, 0], f"70 tokens none allowed: [0, 0, 0]; got {got}"
    # with_rows packs each FSM's rows in one call: two automata with as many states make two
    # calls of the same shape, and the first FSM's rows must outlive the second call.
    assert all_ones.tolist() == [-1, -1, 2**6 - 1], (
        f"the words of 70 tokens all allowed became {all_ones.tolist()} when pack_bits packed another row of the "
        f"same shape: each call must return a new tensor, not a buffer kept between calls"
    )
    only = torch.zeros(v, dtype=torch.bool)
    only[63] = True  # bit 31 of word 1
    got = pack_bits(only).tolist()
    assert got == [0, -(2**31), 0], (
        f"only token 63 allowed (bit 31, the sign bit, of word 1): [0, -2**31, 0]; got {got}"
    )
    got = pack_bits(torch.ones(64, dtype=torch.bool)).tolist()
    assert got == [-1, -1], f"64 tokens all allowed fill exactly two words: [-1, -1], no third word; got {got}"


@pytest.mark.task2_2
@settings(max_examples=80, deadline=None)
@given(shapes, st.integers(0, 2**32 - 1))
@example(([2, 3], 40), 7)  # two leading dimensions: flatten(1) or a view(B, -1) is right for [B, W] only
@example(([], 40), 7)  # and none
def test_unpack_bits_matches_the_layout_oracle(shape, seed):
    lead, v = shape
    words = (v + 31) // 32
    mask = torch.randint(
        -(2**31), 2**31, (*lead, words), dtype=torch.int64, generator=torch.Generator().manual_seed(seed)
    ).to(torch.int32)
    allowed = unpack_bits(mask, v)
    assert allowed.dtype == torch.bool and allowed.shape == (*lead, v), (
        f"unpack_bits of int32 {(*lead, words)} words for {v} tokens: bool {(*lead, v)} expected; got "
        f"{allowed.dtype} {tuple(allowed.shape)}"
    )
    wrong = (allowed != oracle_unpack(mask, v)).nonzero().tolist()[:4]
    assert torch.equal(allowed, oracle_unpack(mask, v)), (
        f"unpack_bits for {v} tokens: wrong at (..., token) {wrong} (first 4): bit t % 32 of word t // 32 is token t"
    )


@pytest.mark.task2_1
@settings(max_examples=50, deadline=None)
@given(shapes, st.integers(0, 2**32 - 1))
def test_pack_then_oracle_unpack_round_trip(shape, seed):
    """Task 2_1 alone: its words read back by the oracle (task 2_2 has its own round trip)."""
    lead, v = shape
    allowed = torch.rand(*lead, v, generator=torch.Generator().manual_seed(seed)) < 0.3
    back = oracle_unpack(pack_bits(allowed), v)
    assert torch.equal(back, allowed), (
        f"shape {(*lead, v)}: the oracle unpacks pack_bits' words to a mask "
        f"that differs at the token ids {sorted(set((back != allowed).nonzero()[:, -1].tolist()))}"
    )


@pytest.mark.task2_2
def test_unpack_bits_corner_words():
    """Two rows of three words for 70 tokens: sign bits set (-1, -2**31, -2), single low bits,
    and set bits past token 69 that must be cut."""
    mask = torch.tensor([[-1, -(2**31), 1 << 6 | 1], [0, 1, -2]], dtype=torch.int32)
    got = unpack_bits(mask, 70)
    assert got.shape == (2, 70) and got.dtype == torch.bool, (
        f"unpack_bits of int32 [2, 3] words for 70 tokens: bool [2, 70] expected; got {got.dtype} {tuple(got.shape)}"
    )
    for r in range(2):
        want = set(oracle_unpack(mask, 70)[r].nonzero().flatten().tolist())
        have = set(got[r].nonzero().flatten().tolist())
        assert have == want, (
            f"row {r}, words {mask[r].tolist()}: the allowed tokens are {sorted(want)}; "
            f"got these too {sorted(have - want)[:8]}, and these are missing {sorted(want - have)[:8]}"
        )


@pytest.mark.task2_2
def test_unpack_bits_works_on_the_masks_device():
    """The mask lives where the logits do (a GPU in production): every tensor unpack_bits
    combines with it must be on its device. The grader has no GPU, so it uses torch's "meta"
    device (shapes, no data), which refuses to mix with a CPU tensor as a GPU does."""
    mask = torch.zeros(2, 3, dtype=torch.int32, device="meta")
    try:
        got = unpack_bits(mask, 70)
    except (RuntimeError, NotImplementedError) as e:
        if "copy out of meta" in str(e) or "no data" in str(e):
            return  # a round trip through the CPU (numpy): slow on a GPU, but not wrong
        raise AssertionError(
            f"unpack_bits of a mask on another device than the CPU failed: {str(e).splitlines()[0]} (is a "
            f"tensor of yours, such as _BIT, still on the CPU? move it with .to(mask.device))"
        ) from None
    assert got.device == mask.device and got.shape == (2, 70) and got.dtype == torch.bool, (
        f"unpack_bits of int32 [2, 3] words on device {mask.device} for 70 tokens: bool [2, 70] on that device "
        f"expected; got {got.dtype} {tuple(got.shape)} on {got.device}"
    )


@pytest.mark.task2_2
@settings(max_examples=50, deadline=None)
@given(shapes, st.integers(0, 2**32 - 1))
def test_oracle_pack_then_unpack_round_trip(shape, seed):
    lead, v = shape
    allowed = torch.rand(*lead, v, generator=torch.Generator().manual_seed(seed)) < 0.3
    back = unpack_bits(oracle_pack(allowed), v)
    assert back.shape == allowed.shape and torch.equal(back, allowed), (
        f"shape {(*lead, v)}: unpack_bits of the oracle's words must give the mask back; got shape "
        f"{tuple(back.shape)}"
        + (
            f", differing at the token ids {sorted(set((back != allowed).nonzero()[:, -1].tolist()))}"
            if back.shape == allowed.shape
            else ""
        )
    )


# ---------------------------------------------------------------------------------------
# FSMs with packed rows (task2_3 and task2_4 use the oracle packer, so they grade alone)
# ---------------------------------------------------------------------------------------
@functools.cache
def compiled_with_oracle_rows(regex: str, vocab_size: int = VOCAB_SIZE) -> TokenFSM:
    """s1's compile plus `bitmasks` / `state_row` packed by the oracle (not by pack_bits)."""
    fsm = make_stage(MaskedFillStage, vocab_size).compile_fsm(regex)
    states = sorted(fsm.index.state_to_tokens)
    bitmasks = oracle_pack(torch.stack([oracle_row(FSMState(fsm, s), vocab_size) for s in states]))
    return fsm.replace(bitmasks=bitmasks, state_row=dict(zip(states, bitmasks.unbind(0))))


@functools.cache
def compiled_s2(regex: str, vocab_size: int) -> TokenFSM:
    """Stage s2's own compile (s1's, then with_rows with pack_bits)."""
    return make_stage(BatchedMaskStage, vocab_size).compile_fsm(regex)


def expected_fill(reqs, vocab_size: int = VOCAB_SIZE) -> torch.Tensor:
    """Bool [B, vocab_size]: the allowed tokens of each row (all, for unconstrained rows).

    Compared with the first `vocab_size` bits of the filled mask: the bits past the
    vocabulary in the last word are never read, so their value is free.
    """
    rows = []
    for req in reqs:
        live = req.grammar is not None and not req.finished
        rows.append(oracle_row(req.grammar, vocab_size) if live else torch.ones(vocab_size, dtype=torch.bool))
    return torch.stack(rows)


# ---------------------------------------------------------------------------------------
# task2_3: fill_mask
# ---------------------------------------------------------------------------------------
@pytest.mark.task2_3
@settings(max_examples=60, deadline=None)
@given(batches(fsm_of=compiled_with_oracle_rows, max_size=12))
def test_fill_mask_writes_each_requests_state_row(reqs):
    """Every row is written, an unconstrained or finished request's too: the buffer may hold an
    earlier step's rows (here a stale pattern), and a solution that wrote only the constrained
    rows served them (a stranger's, hidden while every caller passed a fresh all-ones mask)."""
    stage = make_stage(BatchedMaskStage)
    mask = stage.allocate_mask(len(reqs))
    mask.fill_(0x01010101)  # an earlier step's rows
    stage.fill_mask(mask, reqs)
    assert mask.dtype == torch.int32 and mask.shape == (len(reqs), (VOCAB_SIZE + 31) // 32), (
        f"fill_mask must fill the allocated int32 mask of shape {(len(reqs), (VOCAB_SIZE + 31) // 32)} in place; "
        f"it is now {mask.dtype} {tuple(mask.shape)} (an out= of another shape, as torch.cat's, resizes it)"
    )
    wrong = wrong_rows(mask, reqs)
    assert not wrong, (
        f"fill_mask on {len(reqs)} requests: the rows {wrong} are not their request's state row "
        f"(all ones for an unconstrained or finished request)"
    )


def wrong_rows(mask, reqs) -> list[int]:
    """The rows of a filled `mask` that differ from the oracle's rows for `reqs`."""
    return [
        i
        for i, (got, want) in enumerate(zip(oracle_unpack(mask, VOCAB_SIZE), expected_fill(reqs)))
        if not torch.equal(got, want)
    ]


@pytest.mark.task2_3
def test_fill_mask_keeps_each_request_on_its_own_fsm():
    """Two FSMs with the same state numbers: rows must come from each request's own FSM."""
    stage = make_stage(BatchedMaskStage)
    yes_no, number = compiled_with_oracle_rows(r"(yes|no)"), compiled_with_oracle_rows(r"1[0-9]*")
    reqs = [make_req(yes_no, 0), make_req(number, 0), make_req(None), make_req(yes_no, 0), make_req(number, 0)]
    reqs[3].finish("abort", AbortKind.CANCELLED, message="client left")
    mask = stage.allocate_mask(len(reqs))
    mask.fill_(0x01010101)  # an earlier step's rows: every row is written, the all-allowed ones too
    stage.fill_mask(mask, reqs)
    wrong = wrong_rows(mask, reqs)
    assert not wrong, (
        f"requests [(yes|no) at 0, 1[0-9]* at 0, unconstrained, (yes|no) finished, 1[0-9]* at 0]: "
        f"the rows {wrong} are wrong (each row comes from its own request's FSM)"
    )
    assert (mask[2] == -1).all() and (mask[3] == -1).all(), (  # unconstrained / finished: all allowed
        "the unconstrained request (row 2) and the finished one (row 3) must allow every token (all words -1)"
    )
    assert not torch.equal(mask[0], mask[1]), "(yes|no) and 1[0-9]* at state 0 got the same row: one FSM's row twice"


@pytest.mark.task2_3
def test_fill_mask_looks_a_state_up_by_its_number_not_its_position():
    """A state's row is `state_row[state]`: `bitmasks[state]` is the row of the state-th
    state in sorted order, another state's wherever the numbers have a gap. In `"[^"]*"`
    byte state 4 (half a character, after the byte 0xE0) ends no token of the synthetic
    vocabulary, so the index has states 0-3 and 5, and state 5's row is bitmasks[4]."""
    stage = make_stage(BatchedMaskStage)
    quoted = compiled_with_oracle_rows(r'"[^"]*"')
    states = sorted(quoted.index.state_to_tokens)
    gap = next(s for i, s in enumerate(states) if s != i)  # the first state past a gap
    reqs = [make_req(quoted, gap), make_req(quoted, states[-1])]
    mask = stage.allocate_mask(len(reqs))
    stage.fill_mask(mask, reqs)
    wrong = wrong_rows(mask, reqs)
    assert not wrong, (
        f'requests of "[^"]*" in states {gap} and {states[-1]} (the index\'s states are {states}): the rows '
        f"{wrong} are not their state's row; look a row up with fsm.state_row[state], not fsm.bitmasks[state] "
        f"(rows follow the sorted states, and state numbers have gaps)"
    )


# ---------------------------------------------------------------------------------------
# task2_4: apply_mask
# ---------------------------------------------------------------------------------------
@pytest.mark.task2_4
@settings(max_examples=60, deadline=None)
@given(st.integers(1, 9), st.integers(1, 200), st.integers(0, 2**32 - 1))
def test_apply_mask_sets_minus_inf_where_the_bit_is_zero(batch, v, seed):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(batch, v, generator=gen)
    # Random words: the bits past the vocabulary in the last word are set too, and ignored.
    mask = torch.randint(-(2**31), 2**31, (batch, (v + 31) // 32), dtype=torch.int64, generator=gen).to(torch.int32)
    expected = logits.masked_fill(~oracle_unpack(mask, v), float("-inf"))
    given = mask.clone()
    apply_bitmask_torch(logits, mask)
    wrong = (logits != expected).nonzero().tolist()[:5]
    assert torch.equal(logits, expected), (
        f"apply on {batch} rows of {v} logits: -inf exactly where the bit is 0; wrong at (row, token) {wrong} (first 5)"
    )
    assert torch.equal(mask, given), "apply_bitmask_torch changed its mask: only the logits are written in place"


@pytest.mark.task2_4
def test_a_forbidden_infinite_logit_becomes_minus_inf_not_nan():
    """A logit can be +inf (a float16 overflow): forbidden, it is -inf. A mask added as 0 or -inf
    gives inf + -inf = nan there, and a softmax over a row holding nan is nan everywhere (a
    stranger's solution); an allowed +inf stays."""
    inf = float("inf")
    logits = torch.tensor([[inf, 0.5, inf, -1.0]])
    apply_bitmask_torch(logits, torch.tensor([[0b0110]], dtype=torch.int32))  # tokens 1 and 2 allowed
    assert logits.tolist() == [[-inf, 0.5, inf, -inf]], (
        f"logits [inf, 0.5, inf, -1] with tokens 1 and 2 allowed: set -inf where forbidden (masked_fill), "
        f"expected [-inf, 0.5, inf, -inf]; got {logits.tolist()}"
    )


@pytest.mark.task2_4
def test_apply_mask_all_ones_changes_nothing():
    logits = torch.randn(3, 77)
    before = logits.clone()
    all_ones = torch.full((3, 3), -1, dtype=torch.int32)
    apply_bitmask_torch(logits, all_ones)
    assert torch.equal(logits, before), "a mask of all ones (every word -1) must leave the logits as they were"
    assert (all_ones == -1).all(), (  # the mask may be an FSM's precomputed rows, or read again by the caller
        f"apply_bitmask_torch changed its mask of all ones into {all_ones[0].tolist()} (row 0): only the logits "
        f"are written in place, never the mask"
    )
    one = torch.zeros(1, 3, dtype=torch.int32)
    one[0, 2] = 1 << (76 - 64)  # only the last real token
    apply_bitmask_torch(logits[:1], one)
    assert torch.isinf(logits[0, :76]).all() and logits[0, 76] == before[0, 76], (
        f"a mask allowing only token 76 (bit 12 of word 2): tokens 0..75 must be -inf and token 76 kept; "
        f"tokens left unmasked {(~torch.isinf(logits[0, :76])).nonzero().flatten().tolist()[:8]} (first 8), "
        f"token 76 {logits[0, 76].item()} (was {before[0, 76].item()})"
    )


class _MixedDevices(TorchFunctionMode):
    """Records every torch call that mixes tensors of two devices (a 0-d CPU tensor is a
    scalar and mixes with anything; `.to` and `copy_` are how a tensor changes device). On a
    GPU such a call raises; on torch's `meta` device some do not, so the test looks itself."""

    def __init__(self):
        super().__init__()
        self.mixed: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", str(func))
        if name not in ("to", "copy_", "__get__", "__set__"):
            tensors = [a for a in [*args, *kwargs.values()] if isinstance(a, torch.Tensor)]
            devices = {str(t.device) for t in tensors if t.dim() > 0 or t.device.type != "cpu"}
            if len(devices) > 1:
                self.mixed.append(f"{name} on {sorted(devices)}")
        return func(*args, **kwargs)


@pytest.mark.task2_4
def test_apply_mask_unpacks_on_the_logits_device():
    """Logits on another device than their mask (torch's `meta` device stands in for a GPU):
    the mask is unpacked where the logits are, and `masked_fill_` never mixes devices."""
    logits = torch.empty(2, 40, device="meta")
    mask = torch.full((2, 2), -1, dtype=torch.int32)
    with _MixedDevices() as spy:
        apply_bitmask_torch(logits, mask)
    assert logits.device.type == "meta" and logits.shape == (2, 40)
    assert not spy.mixed, (
        f"apply_bitmask_torch(logits on meta, mask on cpu) called {spy.mixed}: on a GPU that raises. "
        f"Move the mask to the logits' device before unpacking it"
    )


# ---------------------------------------------------------------------------------------
# The compiled CPU kernel == the readable apply (not an exercise: the engine's fast path)
# ---------------------------------------------------------------------------------------
@settings(max_examples=80, deadline=None)
@given(st.integers(1, 9), st.integers(1, 300), st.integers(0, 2**32 - 1), st.sampled_from([0, -1, None]))
def test_the_cpu_kernel_equals_the_readable_apply(batch, v, seed, fill_word):
    """Random words, plus whole rows of all-zero or all-one words (the kernel's shortcuts)."""
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(batch, v, generator=gen)
    logits[torch.rand(batch, v, generator=gen) < 0.05] = float("nan")  # kept where allowed, -inf where not
    mask = torch.randint(-(2**31), 2**31, (batch, (v + 31) // 32), dtype=torch.int64, generator=gen).to(torch.int32)
    if fill_word is not None:
        mask[0] = fill_word
    expected = logits.masked_fill(~oracle_unpack(mask, v), float("-inf"))
    apply_bitmask(logits, mask)
    assert torch.equal(logits.isnan(), expected.isnan())
    assert torch.equal(logits.nan_to_num(nan=7.0), expected.nan_to_num(nan=7.0))


def test_apply_bitmask_takes_the_readable_path_off_the_kernels_dtype():
    """float64 logits are not the kernel's: same result through the torch version."""
    logits = torch.randn(2, 70, dtype=torch.float64)
    mask = torch.tensor([[0, -1, 1], [-1, 0, -1]], dtype=torch.int32)
    expected = logits.masked_fill(~oracle_unpack(mask, 70), float("-inf"))
    apply_bitmask(logits, mask)
    assert torch.equal(logits, expected)


def test_apply_bitmask_refuses_a_mask_narrower_than_the_logits():
    """Columns a mask does not cover must not stay allowed by accident."""
    with pytest.raises(ValueError, match="a mask of 2 words covers 64 tokens, fewer than the logits' 70 columns"):
        apply_bitmask(torch.zeros(1, 70), torch.full((1, 2), -1, dtype=torch.int32))


def test_mask_apply_option_is_checked():
    with pytest.raises(ValueError, match="mask_apply must be 'kernel' or 'torch', not 'cuda'"):
        make_stage(BatchedMaskStage, mask_apply="cuda")


# ---------------------------------------------------------------------------------------
# s2 == s1, bit for bit (the whole mask step: compile, fill, apply)
# ---------------------------------------------------------------------------------------
def copy_reqs(reqs):
    """The same requests again (same FSM objects and states), unfinished ones unfinished."""
    out = []
    for req in reqs:
        twin = make_req(req.grammar.fsm if req.grammar else None, req.grammar.state if req.grammar else None)
        twin.finished_reason = req.finished_reason
        out.append(twin)
    return out


@st.composite
def padded_batches(draw):
    vocab_size = draw(st.sampled_from([len(VOCAB), VOCAB_SIZE, 96 + 5, 200 - 3]))
    reqs = draw(batches(fsm_of=functools.partial(compiled_s2, vocab_size=vocab_size), max_size=10))
    return vocab_size, reqs


@pytest.mark.task2_3
@pytest.mark.task2_4
@pytest.mark.parametrize("mask_apply", ["torch", "kernel"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=padded_batches(), seed=st.integers(0, 2**32 - 1))
def test_s2_masks_equal_s1_masks_bit_for_bit(mask_apply, batch, seed):
    vocab_size, reqs = batch
    twins = copy_reqs(reqs)
    logits = torch.randn(len(reqs), vocab_size, generator=torch.Generator().manual_seed(seed))
    s1_logits = logits.clone()
    make_stage(MaskedFillStage, vocab_size).mask_logits(s1_logits, twins)
    make_stage(BatchedMaskStage, vocab_size, mask_apply=mask_apply).mask_logits(logits, reqs)
    got, want = [r.finished_reason for r in reqs], [r.finished_reason for r in twins]
    assert got == want, f"s2 ({mask_apply}) must abort the requests s1 aborts: s1 {want}, s2 {got}"  # same aborts
    # Rows of requests aborted by the mask (a dead-end state) are never sampled
    # (Scheduler.sample skips finished requests): s1 leaves such a row alone, s2 blanks it.
    sampled = [i for i, r in enumerate(reqs) if not r.finished]
    wrong = [i for i in sampled if not torch.equal(logits[i], s1_logits[i])]
    assert not wrong, f"s2 ({mask_apply}) masks the rows {wrong} of {len(reqs)} unlike s1"


@pytest.mark.task2_3
@pytest.mark.task2_4
@pytest.mark.parametrize("mask_apply", ["torch", "kernel"])
def test_s2_equals_s1_on_the_bundled_vocabulary_with_padded_logits(mask_apply):
    """Every state of a JSON regex over the real 4096-token vocabulary, logits 4109 wide."""
    tok = bundled()
    vocab_size = tok.vocab_size + 13
    regex = r'\{"name": "[^"\\]{1,16}", "age": (0|[1-9][0-9]{0,2}), "city": "[^"\\]{1,12}"\}'
    s1 = make_stage(MaskedFillStage, vocab_size, tokenizer=tok)
    s2 = make_stage(BatchedMaskStage, vocab_size, tokenizer=tok, mask_apply=mask_apply)
    fsm = s2.compile_fsm(regex)
    states = sorted(fsm.index.state_to_tokens)
    reqs = [make_req(fsm, s) for s in states] + [make_req(None)]
    twins = copy_reqs(reqs)
    logits = torch.randn(len(reqs), vocab_size)
    s1_logits = logits.clone()
    s1.mask_logits(s1_logits, twins)
    s2.mask_logits(logits, reqs)
    wrong = [
        states[i] if i < len(states) else "unconstrained"
        for i in range(len(reqs))
        if not torch.equal(logits[i], s1_logits[i])
    ]
    assert not wrong, f"s2 ({mask_apply}) masks the rows of these states of the JSON regex unlike s1: {wrong}"
    assert torch.isinf(logits[:-1, tok.vocab_size :]).all(), (  # padding columns are masked
        f"the {vocab_size - tok.vocab_size} padding columns past the tokenizer's {tok.vocab_size} tokens must be "
        f"-inf in every constrained row"
    )
    finished = [r.finished_reason for r in reqs + twins if r.finished]
    assert not finished, f"every state of this regex allows a token, yet requests finished: {finished[:3]}"


@pytest.mark.slow
@pytest.mark.task2_3
@pytest.mark.task2_4
def test_same_seeds_give_the_same_outputs_in_s1_and_s2():
    """The engine on the bundled model: s2 changes how masks are made, not what is sampled."""
    user = "<|user|>\n{}\n<|assistant|>\n"
    prompts = [
        user.format("Extract as JSON: Li Lei is 31 years old."),
        user.format("When was she born?"),
        user.format("What is the server's IP address?"),
        user.format("Is the sky blue?"),
    ]
    params = [
        {"regex": r'\{"name": "[A-Za-z ]{1,20}", "age": [0-9]{1,3}\}', "max_new_tokens": 40},
        {"regex": r"[0-9]{4}-[0-9]{2}-[0-9]{2}"},
        {"max_new_tokens": 10},  # unconstrained, in the same batch
        {"regex": r"(yes|no)"},
    ]
    engine = sgl.Engine(stage="s1")
    outputs = {}
    for stage_cls in (MaskedFillStage, BatchedMaskStage):
        # One model and scheduler, two constraint layers (loading the model twice is slow).
        engine.stage = engine.scheduler.stage = stage_cls(engine.stage.ctx)
        outputs[stage_cls.tag] = [
            engine.generate(prompts, [dict(p, temperature=1.0, seed=seed) for p in params]) for seed in (0, 1)
        ]
    engine.shutdown()
    outputs = {"s1": outputs["s1-masked-fill"], "s2": outputs["s2-batched-mask"]}
    texts = {stage: [[o["text"] for o in outs] for outs in runs] for stage, runs in outputs.items()}
    assert texts["s1"] == texts["s2"], (
        f"the same prompts and seeds must give the same texts in s1 and s2 "
        f"(rows: seeds 0 and 1; columns: JSON, date, free, yes/no): s1 "
        f"{texts['s1']}, s2 {texts['s2']}"
    )
    reasons = {
        stage: [[o["meta_info"]["finish_reason"] for o in outs] for outs in runs] for stage, runs in outputs.items()
    }
    assert reasons["s1"] == reasons["s2"], f"finish reasons differ: s1 {reasons['s1']}, s2 {reasons['s2']}"
