"""minisglang/sampler.py: greedy ids equal torch.argmax's, the fast path included; the
sampling distribution (top-k, top-p, min-p) equals a plain Python oracle."""

from __future__ import annotations

import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from minisglang.core import Req, SamplingParams
from minisglang.sampler import NO_TOKEN, distribution, greedy_ids, sample, sample_row, seeded_generator

SPECIAL = st.sampled_from([float("-inf"), float("inf"), float("nan"), 0.0, -0.0, 1.0, 1.0])


@settings(max_examples=200, deadline=None)
@given(rows=st.integers(1, 5), width=st.integers(1, 70), data=st.data())
def test_greedy_ids_are_torch_argmax_with_ties_infinities_and_nans(rows, width, data):
    """The oracle is torch.argmax: the first of equal maxima, a NaN above everything, a row
    all -inf gives 0; on float32 (numpy's path) and on float64 (torch's own)."""
    # Exactly rows x width values: drawing 350 and slicing spent most of the test making floats.
    values = data.draw(
        st.lists(st.one_of(SPECIAL, st.floats(-3, 3, width=32)), min_size=rows * width, max_size=rows * width)
    )
    logits = torch.tensor(values, dtype=torch.float32).reshape(rows, width)
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


def test_a_row_with_nothing_to_draw_aborts_its_request_alone():
    """A masked row with no finite logit (the model gave every allowed token -inf) or a NaN
    aborts its own request with the reason; the other rows sample as they would alone.
    (torch.multinomial raised and the scheduler aborted the whole batch as an internal error;
    a greedy row took token 0, allowed or not.)"""
    inf = float("-inf")
    good = torch.tensor([0.0, 1.0, 2.0, inf])
    rows = torch.stack(
        [
            torch.full((4,), inf),  # sampled, nothing finite
            torch.full((4,), inf),  # greedy, nothing finite
            torch.tensor([0.0, float("nan"), 1.0, inf]),  # sampled, a NaN
            good,  # sampled, seeded
            good,  # greedy
        ]
    )
    reqs = [
        _req(temperature=1.0),
        _req(temperature=0.0),
        _req(temperature=0.7),
        _req(temperature=1.0, seed=5),
        _req(temperature=0.0),
    ]
    reqs[3].generator = torch.Generator().manual_seed(5)
    got = sample(rows, reqs, torch.Generator().manual_seed(0))
    alone = sample_row(good, _req(temperature=1.0, seed=5), torch.Generator().manual_seed(5))
    assert got == [NO_TOKEN, NO_TOKEN, NO_TOKEN, alone, 2]
    for req in reqs[:3]:
        assert req.finished_reason is not None and req.finished_reason["type"] == "abort"
        assert "no token to sample" in req.finished_reason["message"]
    assert not reqs[3].finished and not reqs[4].finished
    # An all-greedy batch (the fast path) too.
    reqs = [_req(temperature=0.0), _req(temperature=0.0)]
    assert sample(rows[[1, 4]], reqs, torch.Generator()) == [NO_TOKEN, 2]
    assert reqs[0].finished and not reqs[1].finished


def test_logits_that_overflow_at_a_small_temperature_are_sampled_not_raised():
    """Finite logits over float32's range once divided by the temperature (1e35 / 1e-4), and
    a +inf logit, made softmax NaN and torch.multinomial raise for the whole batch: the row's
    most likely tokens take all the mass, and the neighbour samples as it would alone."""
    inf = float("inf")
    good = torch.tensor([0.0, 1.0, 2.0, 0.5])
    rows = torch.stack([torch.tensor([-1e35, 1e35, 3.0, -inf]), torch.tensor([1.0, -1e30, inf, 2.0]), good])
    reqs = [_req(temperature=1e-4), _req(temperature=0.5), _req(temperature=1.0, seed=5)]
    reqs[2].generator = torch.Generator().manual_seed(5)
    got = sample(rows, reqs, torch.Generator().manual_seed(0))
    alone = sample_row(good, _req(temperature=1.0, seed=5), torch.Generator().manual_seed(5))
    assert got == [1, 2, alone]
    assert not any(req.finished for req in reqs)
    assert torch.equal(distribution(rows[1], reqs[1]), torch.tensor([0.0, 0.0, 1.0, 0.0]))


def test_an_engine_aborts_only_the_request_whose_allowed_tokens_all_score_minus_infinity():
    """Through the engine: the model scores every text token -inf, so a regex request has
    nothing to draw; an unconstrained neighbour in the same batch (its row keeps the special
    tokens) still finishes."""
    from minisglang import Engine

    eng = Engine(stage="s1", sampling_defaults="openai")
    forward = eng.model.forward

    def minus_inf_for_text(*args, **kwargs):
        out = forward(*args, **kwargs).clone()
        out[..., 5:] = float("-inf")
        return out

    eng.model.forward = minus_inf_for_text
    outs = eng.generate(
        ["Answer:"] * 3,
        [
            {"temperature": 1.0, "regex": "(ab|a|b){1,3}", "max_new_tokens": 5, "seed": 1},
            {"temperature": 0, "regex": "(ab|a|b){1,3}", "max_new_tokens": 5},
            {"temperature": 0, "max_new_tokens": 3},
        ],
    )
    for out in outs[:2]:
        assert out["meta_info"]["finish_reason"]["type"] == "abort"
        assert "no token to sample" in out["meta_info"]["finish_reason"]["message"]
    assert outs[2]["meta_info"]["finish_reason"]["type"] == "length"
    assert eng.stats().pools_full  # the aborted requests gave their memory back


def test_seeds_apart_by_a_multiple_of_2_to_the_32_draw_different_numbers():
    """torch's CPU generator keeps a seed's low 32 bits only: seeds i and i + 2**32 (and -1,
    2**32 - 1, 2**63 - 1) wrote the same text. Seeds below 2**32 keep torch's own stream."""
    assert torch.equal(
        torch.rand(8, generator=seeded_generator(5)), torch.rand(8, generator=torch.Generator().manual_seed(5))
    )
    seeds = [5, 5 + 2**32, 5 + 2**40, 2**32 - 1, 2**63 - 1, -(2**63), 2**64 - 1]
    draws = {tuple(torch.rand(8, generator=seeded_generator(s)).tolist()) for s in seeds}
    assert len(draws) == len(seeds)
    # -1 is 2**64 - 1 read modulo 2**64, as torch reads it
    assert torch.equal(
        torch.rand(8, generator=seeded_generator(-1)), torch.rand(8, generator=seeded_generator(2**64 - 1))
    )


def test_an_engine_writes_other_texts_for_seeds_2_to_the_32_apart():
    from minisglang import Engine

    eng = Engine(stage="s1", sampling_defaults="openai")
    params = {"temperature": 1.0, "regex": "(ab|a|b){1,3}", "max_new_tokens": 8}
    low = eng.generate(["Answer with a and b letters:"] * 12, [dict(params, seed=i) for i in range(12)])
    high = eng.generate(["Answer with a and b letters:"] * 12, [dict(params, seed=i + 2**32) for i in range(12)])
    assert [o["text"] for o in low] != [o["text"] for o in high]


def test_engines_seeded_2_to_the_32_apart_draw_different_unseeded_texts():
    """The engine's own seed (the generator of requests that give none) reads every bit too."""
    from minisglang import Engine

    params = {"temperature": 1.0, "regex": "(ab|a|b){1,3}", "max_new_tokens": 8}
    texts = [
        [o["text"] for o in Engine(stage="s1", sampling_defaults="openai", seed=s).generate(["Answer:"] * 12, params)]
        for s in (3, 3 + 2**32)
    ]
    assert texts[0] != texts[1]
