"""Chunked prefill (s7's `chunked_prefill_size`, SGLang's name): a prompt longer than the
chunk is prefilled a chunk per step, alone, with the running requests decoding in each of
those forwards when `mixed_prefill` is on (and in a forward of their own after each chunk
when it is off); its row picks no token before the last chunk.

Oracles: the same engine with chunking off (greedy texts token for token, whatever the
prompt lengths around the chunk size); `re.fullmatch` for constrained outputs; the pools
(`assert_no_leak`: every KV slot free or the radix tree's, no lock, every request row
free) after aborts and a failing forward in the middle of a prompt; the trace for how many
tokens each forward computed and who decoded in it (counts of steps, never time).
"""

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_engine import assert_no_leak

import minisglang as sgl
from minisglang.tokenizer import ChatPrompt

S7 = "s7-speculative"
TEXT = (
    "Once upon a time, there was a little girl who lived in a village near the forest. "
    "Whenever she went out, the little girl wore a red riding cloak, so everyone in the "
    "village called her Little Red Riding Hood. One morning, Little Red Riding Hood asked "
    "her mother if she could go to visit her grandmother as it had been awhile since they'd seen each other. "
)
PERSON = r'\{"name": "[A-Za-z ]{1,12}", "age": [1-9][0-9]?\}'
GREEDY = {"temperature": 0, "max_new_tokens": 6, "ignore_eos": True}


@pytest.fixture(scope="module")
def eng():
    """One s7 engine; each test sets its chunk size and mixing on the scheduler's config."""
    engine = sgl.Engine(stage=S7, mixed_prefill=True, max_total_tokens=4096)
    yield engine
    engine.shutdown()


@pytest.fixture(scope="module")
def ids(eng):
    return eng.tokenizer.encode(TEXT * 4)


def configure(eng, chunk: int | None, mixed: bool = True) -> None:
    """Set the chunk size and mixing, on an emptied radix tree."""
    eng.scheduler.config.chunked_prefill_size = chunk
    eng.scheduler.config.mixed_prefill = mixed
    eng.scheduler.tree_cache.evict(10**9)


def prompt(ids: list[int], start: int, n: int) -> ChatPrompt:
    """`n` tokens of the text from `start` (a prompt of an exact length)."""
    return ChatPrompt(text="", ids=ids[start : start + n])


def no_leak(eng) -> None:
    assert eng.scheduler.chunked_req is None
    assert_no_leak(eng)


def forwards(eng, since: int) -> list[dict]:
    return [e for e in eng.trace[since:] if e["event"] in ("prefill", "decode")]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chunk=st.integers(1, 24), mixed=st.booleans(), data=st.data())
def test_greedy_outputs_equal_unchunked_for_prompt_lengths_around_the_chunk(eng, ids, chunk, mixed, data):
    """Prompts of chunk - 1, chunk, chunk + 1, 2 * chunk ... tokens, together and with one
    that shares another's start (a radix hit on chunks already cached): the same greedy
    tokens as prefilling each in one forward, and every forward computes at most `chunk`
    prompt tokens."""
    lengths = data.draw(
        st.lists(
            st.sampled_from([1, 2, chunk - 1, chunk, chunk + 1, 2 * chunk, 3 * chunk + 2, 61]), min_size=1, max_size=4
        )
    )
    prompts = [prompt(ids, 7 * i, max(n, 1)) for i, n in enumerate(lengths)]
    prompts.append(prompt(ids, 0, max(lengths) + 3))  # shares the first prompt's start
    configure(eng, None, mixed)
    oracle = [o["output_ids"] for o in eng.generate(prompts, GREEDY)]
    configure(eng, chunk, mixed)
    since = len(eng.trace)
    outs = eng.generate(prompts, GREEDY)
    assert [o["output_ids"] for o in outs] == oracle
    assert all(e["tokens"] <= chunk for e in forwards(eng, since) if e["event"] == "prefill")
    no_leak(eng)


def test_decodes_go_on_during_a_long_prefill(eng, ids):
    """A decodes; B's 200-token prompt arrives. Chunked (16) and mixed: B is prefilled over
    13 steps, one chunk each, and A decodes in every one of them (one token a step). Not
    chunked: one forward computes all 200 tokens."""
    params = {"temperature": 0, "max_new_tokens": 40, "ignore_eos": True}
    for chunk in (16, None):
        configure(eng, chunk)
        a = eng.submit(prompt(ids, 300, 5), params)
        eng.step()  # A's prefill
        b = eng.submit(prompt(ids, 0, 200), params)
        since, tokens_a = len(eng.trace), []
        while not b.output_ids:
            eng.step()
            tokens_a.append(len(a.output_ids))
        steps = forwards(eng, since)
        if chunk:
            assert len(steps) == 13  # ceil(200 / 16)
            assert [e.get("chunk") for e in steps] == [b.rid] * 12 + [None]
            assert all(e["riders"] == [a.rid] for e in steps)
            assert all(e["tokens"] <= 16 for e in steps)
            assert tokens_a == list(range(2, 15))  # one token of A per step, B's prefill included
        else:
            assert len(steps) == 1 and steps[0]["tokens"] == 200
        while not (a.released and b.released):
            eng.step()
        no_leak(eng)


def test_without_mixing_each_chunk_is_followed_by_a_decode(eng, ids):
    """Without mixed chunks each forward is a chunk or a decode: the running request decodes
    after every chunk (`MAX_PREFILLS_BEFORE_DECODE`), so a long prompt holds it back one
    forward at a time, not for all its chunks (SGLang runs them all first)."""
    configure(eng, 32, mixed=False)
    a = eng.submit(prompt(ids, 300, 5), GREEDY | {"max_new_tokens": 20})
    eng.step()
    b = eng.submit(prompt(ids, 0, 100), GREEDY)
    since, tokens_a = len(eng.trace), len(a.output_ids)
    while not b.output_ids:
        eng.step()
    steps = forwards(eng, since)
    shape = [(e["event"], e["tokens"] if e["event"] == "prefill" else e["reqs"]) for e in steps]
    assert shape == [("prefill", 32), ("decode", [a.rid])] * 3 + [("prefill", 4)]
    assert not any("riders" in e for e in steps)
    assert len(a.output_ids) == tokens_a + 3
    while not (a.released and b.released):
        eng.step()
    no_leak(eng)


def test_each_chunk_enters_the_radix_tree_as_it_is_computed(eng, ids):
    """After every chunk the tree holds the prompt computed so far (locked by the request:
    a prompt token's KV never changes), so a request sharing the prompt hits all of it."""
    configure(eng, 10, mixed=False)
    tree = eng.scheduler.tree_cache
    b = eng.submit(prompt(ids, 0, 45), GREEDY)
    sizes = []
    while not b.output_ids:
        eng.step()
        sizes.append((tree.total_size(), tree.protected_size(), b.prefix_len, b.kv_len))
    assert sizes == [(10, 10, 10, 10), (20, 20, 20, 20), (30, 30, 30, 30), (40, 40, 40, 40), (45, 45, 45, 45)]
    c = eng.submit(prompt(ids, 0, 46), GREEDY)
    while not (b.released and c.released):
        eng.step()
    assert c.cached_tokens == 45
    no_leak(eng)


def test_no_mask_and_no_grammar_step_before_the_last_chunk(eng, ids, monkeypatch):
    """A constrained request cut in chunks: hook 4 and hook 5 see it only once its prompt
    is complete; its output matches the regex and equals the unchunked one."""
    stage = eng.stage
    masked, advanced = [], []
    mask_logits, advance = stage.mask_logits, stage.advance

    def checking_mask(logits, reqs):
        masked.extend((r.rid, r.kv_len == len(r.fill_ids)) for r in reqs)
        mask_logits(logits, reqs)

    def checking_advance(req, tok):
        advanced.append((req.rid, req.kv_len >= len(req.origin_input_ids)))
        advance(req, tok)

    monkeypatch.setattr(stage, "mask_logits", checking_mask)
    monkeypatch.setattr(stage, "advance", checking_advance)
    text = ids[:90] + eng.tokenizer.encode("\nAs JSON: ")
    params = {"regex": PERSON, "temperature": 0, "max_new_tokens": 40}
    outs = {}
    for chunk in (None, 16):
        configure(eng, chunk)
        since = len(eng.trace)
        outs[chunk] = eng.generate(ChatPrompt("", text), params)
        assert all(ok for _, ok in masked) and all(ok for _, ok in advanced)
        if chunk:
            cut = sum(e.get("chunk") == outs[chunk]["meta_info"]["id"] for e in forwards(eng, since))
            assert cut == -(-len(text) // 16) - 1  # every chunk but the last one
    assert outs[16]["output_ids"] == outs[None]["output_ids"]
    assert re.fullmatch(PERSON, outs[16]["text"]), outs[16]["text"]
    no_leak(eng)


def test_a_grammar_not_ready_for_the_last_chunk_sits_out(eng, ids, monkeypatch):
    """The last chunk's logits are sampled, so its grammar must be ready for the first mask
    (s5's per-step budget): if it is not, the request sits that step out and goes on after."""
    configure(eng, 8)
    ready, calls = eng.stage.ready, []

    def slow_once(req):  # not ready the first time it is asked after a chunk
        if req.kv_len and req.rid not in calls:
            calls.append(req.rid)
            return False
        return ready(req)

    monkeypatch.setattr(eng.stage, "ready", slow_once)
    since = len(eng.trace)
    text = ids[:20] + eng.tokenizer.encode(" As JSON: ")
    out = eng.generate(ChatPrompt("", text), {"regex": PERSON, "temperature": 0})
    rid = out["meta_info"]["id"]
    assert any(e["event"] == "sit_out" and e["rid"] == rid for e in eng.trace[since:])
    assert re.fullmatch(PERSON, out["text"])
    no_leak(eng)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    abort_after=st.integers(0, 6), how=st.sampled_from(["abort", "abandon", "forward error"]), others=st.integers(0, 2)
)
def test_an_abort_in_the_middle_of_a_prompt_gives_everything_back(eng, ids, monkeypatch, abort_after, how, others):
    """A 60-token prompt is cut in chunks of 8; after `abort_after` steps (0: before its
    admission, 6: two chunks before its last) it is aborted, by the client, by a dropped
    caller, or by its next forward raising: its slots go back (the chunks already cached
    stay in the tree, unlocked), and the requests that were not in the failed forward
    finish normally."""
    configure(eng, 8)
    running = [eng.submit(prompt(ids, 200 + 9 * i, 6), GREEDY) for i in range(others)]
    while len(eng.scheduler.running) < others:  # two 6-token prompts do not fit one chunk of 8
        eng.step()
    long = eng.submit(prompt(ids, 0, 60), {**GREEDY, "max_new_tokens": 3})
    for _ in range(abort_after):
        eng.step()
    assert not long.output_ids and (abort_after == 0 or long.kv_len == 8 * abort_after)
    in_failed_forward = set()
    if how == "forward error":
        forward = eng.model.forward

        def failing(fb, **kw):
            rows = fb.req_pool_indices.tolist()
            if long.req_pool_idx in rows:
                in_failed_forward.update(r.rid for r in eng.scheduler.requests() if r.req_pool_idx in rows)
                raise RuntimeError("boom")
            return forward(fb, **kw)

        monkeypatch.setattr(eng.model, "forward", failing)
    elif how == "abort":
        assert eng.abort(long.rid)
    else:
        eng._abandon([long])
    late = eng.submit(prompt(ids, 100, 12), GREEDY)
    while not all(r.released for r in running + [long, late]):
        eng.step()
    monkeypatch.undo()
    assert long.finished_reason["type"] == "abort" and not long.output_ids
    for r in running + [late]:
        assert r.finished_reason["type"] == ("abort" if r.rid in in_failed_forward else "length")
    no_leak(eng)


@pytest.mark.parametrize("value", [0, -3, True, 2.5, "8"])
def test_bad_chunk_sizes_are_refused_by_name(value):
    from minisglang.stages.s7_speculative import SpeculativeOptions

    with pytest.raises(
        ValueError, match=re.escape(f"chunked_prefill_size must be None (off) or an integer >= 1, not {value!r}")
    ):
        SpeculativeOptions.parse({"chunked_prefill_size": value}, S7)


def test_s6_does_not_know_the_option():
    from minisglang.stages.s6_function_calling import FunctionCallingStage

    with pytest.raises(ValueError, match="unknown option.*'chunked_prefill_size'"):
        FunctionCallingStage.Options.parse({"chunked_prefill_size": 64}, "s6-function-calling")
