"""minisglang/sampler.py: greedy ids equal torch.argmax's, the fast path included."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from minisglang.sampler import greedy_ids

SPECIAL = st.sampled_from([float("-inf"), float("inf"), float("nan"), 0.0, -0.0, 1.0, 1.0])


@settings(max_examples=200, deadline=None)
@given(
    rows=st.integers(1, 5),
    width=st.integers(1, 70),
    values=st.lists(st.one_of(SPECIAL, st.floats(-3, 3, width=32)), min_size=350, max_size=350),
)
def test_greedy_ids_are_torch_argmax_with_ties_infinities_and_nans(rows, width, values):
    """The oracle is torch.argmax: the first of equal maxima, a NaN above everything, a row
    all -inf gives 0; on float32 (numpy's path) and on float64 (torch's own)."""
    logits = torch.tensor(values[: rows * width], dtype=torch.float32).reshape(rows, width)
    want = logits.argmax(dim=-1).tolist()
    assert greedy_ids(logits) == want, logits
    assert greedy_ids(logits.double()) == want
    flipped = logits.flip(1)  # the same values, the ties now in the other order
    assert greedy_ids(flipped) == flipped.argmax(dim=-1).tolist()


def test_greedy_ids_of_a_row_slice_and_a_transposed_view():
    """Views that are not contiguous (rows picked out of a batch, a transpose) read right."""
    torch.manual_seed(0)
    logits = torch.randn(6, 300)
    assert greedy_ids(logits[1::2]) == logits[1::2].argmax(dim=-1).tolist()
    assert greedy_ids(logits.t()) == logits.t().argmax(dim=-1).tolist()
