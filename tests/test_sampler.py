"""minisglang/sampler.py: greedy ids equal torch.argmax's, the fast path included; the
sampling distribution (top-k, top-p, min-p) equals a plain Python oracle."""

from __future__ import annotations

import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from minisglang.core import Req, SamplingParams
from minisglang.sampler import distribution, greedy_ids, sample_row

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


def _req(**params) -> Req:
    return Req("", [0], SamplingParams(**params))


@settings(max_examples=200, deadline=None)
@given(
    logits=st.lists(st.one_of(st.just(float("-inf")), st.floats(-8, 8, width=32)), min_size=1, max_size=40),
    temperature=st.floats(0.1, 2.0),
    top_k=st.sampled_from([-1, 1, 3]),
    top_p=st.sampled_from([1.0, 0.9, 0.5]),
    min_p=st.sampled_from([0.05, 0.3, 0.999, 1.0]),
)
@example(
    logits=[float("-inf")] * 15 + [0.0, 0.0], temperature=1.0, top_k=-1, top_p=0.5, min_p=0.05
)  # top-p splits a tie
def test_min_p_keeps_the_tokens_at_least_min_p_times_the_most_likely(logits, temperature, top_k, top_p, min_p):
    """The oracle: the distribution without min_p (temperature, top-k, top-p), then every
    token below min_p times the most likely one set to 0, the others unchanged (SGLang's
    min-p, after top-k and top-p, which always keep the most likely token)."""
    if all(x == float("-inf") for x in logits):
        logits[0] = 0.0  # a mask leaves at least one token (else the request is aborted)
    row = torch.tensor(logits, dtype=torch.float32)
    params = dict(temperature=temperature, top_k=top_k, top_p=top_p)
    without = distribution(row, _req(**params)).tolist()
    got = distribution(row, _req(**params, min_p=min_p)).tolist()
    top = max(without)
    assert got == [p if p >= min_p * top else 0.0 for p in without]
    assert max(got) == top  # a most likely token always stays (of equal ones, top-p may keep either)


def test_min_p_one_samples_only_the_most_likely_token():
    """min_p 1 keeps the maxima only: every seeded draw is the argmax (here one token)."""
    row = torch.tensor([0.5, 2.0, 1.9, -1.0])
    req = _req(temperature=1.0, min_p=1.0)
    draws = {sample_row(row, req, torch.Generator().manual_seed(s)) for s in range(50)}
    assert draws == {1}


def test_top_p_counts_the_whole_rows_mass_not_top_ks_renormalised_survivors():
    """SGLang's order (sampler.distribution's docstring, chapter 00): top-p's mass is the row's
    own, not renormalised after top-k; vLLM renormalises first and keeps one token here."""
    row = torch.log(torch.tensor([0.4, 0.3, 0.2, 0.1]))
    got = distribution(row, _req(temperature=1.0, top_k=2, top_p=0.5))
    assert torch.allclose(got, torch.tensor([0.4, 0.3, 0.0, 0.0]))
