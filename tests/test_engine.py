"""The shared engine on the bundled model: batching, radix cache, finishing, streaming, leaks.

Tests of minisglang/engine.py and minisglang/sampler.py (seeded sampling, batch independence).
"""

import json
import random
import re
import shutil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minisglang as sgl
from minisglang.core import AbortKind, Req, SamplingParams
from minisglang.scheduler import cut_at_stop_string

PROMPTS = [
    "<|user|>\nExtract name, age and hobbies as JSON: 张三是一名软件工程师，今年28岁，平时喜欢编程、摄影和爬山。\n<|assistant|>\n",
    "The capital of France is",
    "Email: ",
    "2024-",
    "Once upon a time, there was a little",
]


@pytest.fixture(scope="module")
def engine():
    eng = sgl.Engine(stage="s0", max_total_tokens=4096)
    yield eng
    eng.shutdown()


def assert_no_leak(eng):
    """Every KV slot is free or held by the radix tree; evicting the tree frees them all."""
    s = eng.scheduler
    assert not s.running and not s.waiting_queue and not s.grammar_queue
    pool = s.token_to_kv_pool
    total = s.config.max_total_tokens
    assert pool.available_size() + s.tree_cache.total_size() == total
    assert s.tree_cache.protected_size() == 0  # nobody holds a lock any more
    assert s.req_to_token_pool.available_size() == s.config.max_running_requests
    s.tree_cache.evict(total)
    assert pool.available_size() == total


def test_greedy_batched_equals_one_at_a_time(engine):
    params = {"temperature": 0, "max_new_tokens": 24}
    alone = [engine.generate(p, params)["text"] for p in PROMPTS]
    engine.scheduler.tree_cache.evict(10**9)
    together = [o["text"] for o in engine.generate(PROMPTS, params)]
    assert together == alone
    assert_no_leak(engine)


def test_seeded_sampling_does_not_depend_on_the_batch(engine):
    p = {"temperature": 1.0, "max_new_tokens": 16, "seed": 7}
    alone = engine.generate(PROMPTS[1], p)["text"]
    mixed = engine.generate(
        [PROMPTS[0], PROMPTS[1], PROMPTS[2]],
        [{"temperature": 1.0, "max_new_tokens": 16}, p, {"temperature": 0.7, "max_new_tokens": 5}],
    )
    assert mixed[1]["text"] == alone


def test_min_p_one_samples_the_greedy_text(engine):
    """min_p 1 keeps only the most likely token at each step: sampling at temperature 1,
    whatever the seed, gives the greedy text (the bundled model has no exact ties here)."""
    greedy = engine.generate(PROMPTS[1], {"temperature": 0, "max_new_tokens": 12})["text"]
    for seed in (1, 2, 3):
        out = engine.generate(PROMPTS[1], {"temperature": 1.0, "min_p": 1.0, "seed": seed, "max_new_tokens": 12})
        assert out["text"] == greedy


def test_shared_prefix_reports_cached_tokens(engine):
    system = "<|system|>\nYou extract facts from text and answer in JSON only.\n"
    prompts = [system + f"<|user|>\nText number {i}: Li Lei is {20 + i} years old.\n<|assistant|>\n" for i in range(6)]
    first = engine.generate(prompts[0], {"temperature": 0, "max_new_tokens": 4})
    rest = engine.generate(prompts[1:], {"temperature": 0, "max_new_tokens": 4})
    shared = len(engine.tokenizer.encode(system))
    assert first["meta_info"]["cached_tokens"] <= shared
    for out in rest:
        assert out["meta_info"]["cached_tokens"] >= shared - 1
    events = [e["event"] for e in engine.trace]
    assert "prefix_hit" in events


def test_finish_reasons(engine):
    out = engine.generate(PROMPTS[1], {"temperature": 0, "max_new_tokens": 3})
    assert out["meta_info"]["finish_reason"] == {"type": "length", "length": 3}
    assert out["meta_info"]["completion_tokens"] == 3
    # a stop string from inside a greedy answer: the first prompt whose answer is long enough
    # (which prompts the bundled model answers at length changes with the model)
    fulls = [engine.generate(p, {"temperature": 0, "max_new_tokens": 30})["text"] for p in PROMPTS]
    prompt, full = next((p, f) for p, f in zip(PROMPTS, fulls) if len(f.strip()) >= 6)
    stop = full.strip()[3:6]
    out = engine.generate(prompt, {"temperature": 0, "max_new_tokens": 30, "stop": stop})
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop}
    assert out["text"] == full[: full.find(stop)]


def test_generation_config_eos_ids_end_a_request(engine, tmp_path):
    # transformers' generate stops at every eos_token_id generation_config.json lists (Llama 3
    # Instruct: <|eot_id|> beside <|end_of_text|>); ours stopped only at the tokenizer's EOS
    # and ran on to max_new_tokens.
    params = {"temperature": 0, "max_new_tokens": 12, "ignore_eos": True}
    full = engine.generate(PROMPTS[1], params)["output_ids"]
    stop_id = full[4]
    model = tmp_path / "model"
    shutil.copytree(sgl.DEFAULT_MODEL_PATH, model)
    config = json.loads((model / "generation_config.json").read_text())
    config["eos_token_id"] = [engine.tokenizer.eos_token_id, stop_id]
    (model / "generation_config.json").write_text(json.dumps(config))
    eng = sgl.Engine(model_path=str(model), stage="s0", max_total_tokens=1024)
    try:
        out = eng.generate(PROMPTS[1], {**params, "ignore_eos": False})
        assert out["output_ids"] == full[: full.index(stop_id) + 1]
        assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop_id}
        assert eng.generate(PROMPTS[1], params)["output_ids"] == full  # ignore_eos ignores them all
        assert eng.scheduler.stop_token_ids == {engine.tokenizer.eos_token_id, stop_id}
    finally:
        eng.shutdown()


def model_with_generation_config(tmp_path, **values):
    """A copy of the bundled model whose generation_config.json also says `values`."""
    model = tmp_path / "model"
    shutil.copytree(sgl.DEFAULT_MODEL_PATH, model)
    config = json.loads((model / "generation_config.json").read_text())
    (model / "generation_config.json").write_text(json.dumps({**config, **values}))
    return str(model)


def test_a_request_takes_the_checkpoints_sampling_defaults_for_what_it_does_not_give(tmp_path):
    """generation_config.json's temperature/top_p/top_k/min_p are what a request that does not
    give them samples with (SGLang's `--sampling-defaults model`, vLLM's generation config):
    Qwen2.5 Instruct recommends temperature 0.7, top_p 0.8, top_k 20. Here top_k 1: greedy."""
    model = model_with_generation_config(tmp_path, top_k=1, temperature=0.9, repetition_penalty=1.1)
    prompt, given = PROMPTS[1], {"max_new_tokens": 16}
    eng = sgl.Engine(model_path=model, stage="s0", max_total_tokens=1024)
    try:
        assert eng.sampling_defaults == {"top_k": 1, "temperature": 0.9}  # (no repetition_penalty here)
        greedy = eng.generate(prompt, {**given, "temperature": 0})["text"]
        assert {eng.generate(prompt, {**given, "seed": s})["text"] for s in range(4)} == {greedy}
        sampled = {eng.generate(prompt, {**given, "seed": s, "top_k": -1})["text"] for s in range(4)}
        assert len(sampled) > 1  # a request's own value wins
        assert eng.make_request(prompt, SamplingParams()).sampling_params.top_k == -1  # (given whole)
    finally:
        eng.shutdown()
    eng = sgl.Engine(model_path=model, stage="s0", max_total_tokens=1024, sampling_defaults="openai")
    try:
        assert eng.sampling_defaults == {}
        assert len({eng.generate(prompt, {**given, "seed": s})["text"] for s in range(4)}) > 1
    finally:
        eng.shutdown()


def test_a_checkpoints_top_k_0_is_no_top_k_as_in_transformers(tmp_path):
    eng = sgl.Engine(model_path=model_with_generation_config(tmp_path, top_k=0, top_p=0.9), stage="s0")
    try:
        assert eng.sampling_defaults == {"top_p": 0.9}
    finally:
        eng.shutdown()


def test_a_checkpoints_bad_sampling_defaults_are_refused_by_name(tmp_path):
    model = model_with_generation_config(tmp_path, top_p=0)
    with pytest.raises(ValueError, match=r"generation_config.json: top_p must be in \(0, 1\], got 0"):
        sgl.Engine(model_path=model, stage="s0")
    with pytest.raises(ValueError, match='sampling_defaults must be "model" or "openai"'):
        sgl.Engine(stage="s0", sampling_defaults="vllm")


def test_ids_of_a_padded_embedding_are_generated_as_transformers_does(engine, tmp_path):
    # Checkpoints pad their embedding past the tokenizer's vocabulary (Qwen2: 151,936 rows for
    # 151,665 tokens). A sampled padded id aborted the request ("internal error ... token id
    # 4113 is out of range: vocab_size is 4096"); transformers emits it and decodes nothing.
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import AutoModelForCausalLM

    prompt = engine.tokenizer.encode(PROMPTS[1])
    first = engine.generate(PROMPTS[1], {"temperature": 0, "max_new_tokens": 1})["output_ids"][0]
    model = tmp_path / "model"
    shutil.copytree(sgl.DEFAULT_MODEL_PATH, model)
    tensors = load_file(model / "model.safetensors")
    embed = tensors["model.embed_tokens.weight"]  # tied: also the output matrix
    pad = 37
    scales = 3 + torch.arange(pad)[:, None] / pad  # distinct rows: no tie for the argmax
    tensors["model.embed_tokens.weight"] = torch.cat([embed, scales * embed[first]])
    save_file(tensors, model / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((model / "config.json").read_text())
    config["vocab_size"] += pad
    (model / "config.json").write_text(json.dumps(config))
    ref = (
        AutoModelForCausalLM.from_pretrained(model)
        .generate(torch.tensor([prompt]), max_new_tokens=6, do_sample=False, eos_token_id=None, pad_token_id=0)[
            0, len(prompt) :
        ]
        .tolist()
    )
    assert any(i >= engine.tokenizer.vocab_size for i in ref)  # the case at hand
    eng = sgl.Engine(model_path=str(model), stage="s0", max_total_tokens=1024)
    try:
        out = eng.generate(PROMPTS[1], {"temperature": 0, "max_new_tokens": 6, "ignore_eos": True})
        assert out["output_ids"] == ref and out["meta_info"]["finish_reason"]["type"] == "length"
        assert out["text"] == engine.tokenizer.decode([i for i in ref if i < engine.tokenizer.vocab_size])
    finally:
        eng.shutdown()


def test_abort_from_the_step_api(engine):
    req = engine.submit(PROMPTS[0], {"max_new_tokens": 50, "temperature": 0})
    other = engine.submit(PROMPTS[1], {"max_new_tokens": 5, "temperature": 0, "ignore_eos": True})
    engine.step()
    engine.step()
    assert engine.abort(req.rid)
    while not (req.released and other.released):
        engine.step()
    assert req.finished_reason == {"type": "abort", "kind": AbortKind.CANCELLED, "message": "aborted by the client"}
    assert other.finished_reason["type"] == "length"
    assert_no_leak(engine)


@pytest.fixture(scope="module", params=["s0", "s7-speculative"])
def plain_or_overlapped(request, engine):
    """The module's s0 engine, and an s7 one whose steps overlap (a forward thread, a batch in flight)."""
    if request.param == "s0":
        yield engine
        return
    eng = sgl.Engine(stage=request.param, max_total_tokens=4096)
    assert eng.scheduler.forward_thread is not None
    yield eng
    eng.shutdown()


@settings(max_examples=25, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["submit", "abort", "step"]), st.integers(0, 12)), max_size=30))
def test_an_abort_finds_its_request_by_rid_wherever_it_waits(plain_or_overlapped, ops):
    """Scheduler.live, the index an abort looks in (a client that left with 8,192 queued
    choices sent as many aborts, and a scan of the queues for each held the scheduler 2.4 s),
    holds exactly the requests in the engine, in any queue (with overlap too); an abort is
    True for those alone, finds them without walking the queues, and each leaves soon after."""
    engine = plain_or_overlapped
    s = engine.scheduler
    submitted: list[Req] = []
    for op, k in ops:
        if op == "submit":
            submitted.append(engine.submit(PROMPTS[k % len(PROMPTS)], {"max_new_tokens": k + 1, "temperature": 0}))
        elif op == "abort":
            rid = submitted[k % len(submitted)].rid if submitted and k < 10 else 10**9 + k
            inside = any(r.rid == rid for r in s.requests())

            def walked():
                raise AssertionError("abort walked the queues")

            s.requests = walked  # (an instance attribute: the class's method is back below)
            try:
                assert engine.abort(rid) == inside
            finally:
                del s.requests
        else:
            engine.step()
        assert s.live == {r.rid: r for r in s.requests() if not r.released}
    for req in submitted:
        engine.abort(req.rid)
    for _ in range(4):  # (overlap: a batch in flight is processed first)
        if all(req.released for req in submitted):
            break
        engine.step()
    assert all(req.released for req in submitted) and not s.live
    assert_no_leak(engine)


def test_streaming_joins_to_the_final_text(engine):
    params = {"temperature": 0, "max_new_tokens": 40}
    final = engine.generate(PROMPTS[0], params)["text"]
    chunks = list(engine.generate(PROMPTS[0], params, stream=True))
    assert "".join(c["text"] for c in chunks) == final
    assert chunks[-1]["meta_info"]["finish_reason"] is not None
    stop = final[5:8]
    chunks = list(engine.generate(PROMPTS[0], dict(params, stop=[stop]), stream=True))
    assert "".join(c["text"] for c in chunks) == final[: final.find(stop)]


def test_bad_input_gets_clear_errors(engine):
    with pytest.raises(ValueError, match=r"unknown sampling parameter\(s\) \['temprature'\]"):
        engine.generate("hi", {"temprature": 0.5})
    with pytest.raises(ValueError, match="top_p must be in"):
        engine.generate("hi", {"top_p": 0})
    out = engine.generate("x" * 10, {"max_new_tokens": 100000})
    assert out["meta_info"]["finish_reason"]["type"] == "abort"
    assert "exceeds the model's context" in out["meta_info"]["finish_reason"]["message"]
    out = engine.generate("", {})
    assert out["meta_info"]["finish_reason"] == {
        "type": "abort",
        "kind": AbortKind.CLIENT,
        "message": "the prompt is empty (no tokens)",
    }
    with pytest.raises(ValueError, match="unknown stage 's9'"):
        sgl.Engine(stage="s9")


def test_trace_records_the_lifecycle(engine):
    engine.generate(PROMPTS[2], {"temperature": 0, "max_new_tokens": 2})
    kinds = {e["event"] for e in engine.trace}
    assert {"arrive", "admit", "prefill", "decode", "finish"} <= kinds


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["lpm", "fcfs"])
def test_no_leaks_after_500_mixed_requests(policy):
    """Different lengths, shared prefixes, stop strings, aborts, and a pool small enough to evict."""
    rng = random.Random(0)
    eng = sgl.Engine(stage="s0", max_total_tokens=1500, max_running_requests=24, schedule_policy=policy)
    bases = ["<|user|>\nWhat is the date?\n<|assistant|>\n", "The email of Wang Fang is", "Numbers: 1, 2, 3,"]
    reqs = []
    for i in range(500):
        prompt = rng.choice(bases) + " " * rng.randint(0, 3) + str(rng.randint(0, 10 ** rng.randint(0, 12)))
        params = {"temperature": rng.choice([0, 0.8]), "max_new_tokens": rng.randint(1, 12), "seed": i}
        if rng.random() < 0.2:
            params["stop"] = [rng.choice([" ", ",", "@", "\n"])]
        reqs.append(eng.submit(prompt, params))
        if rng.random() < 0.3:
            eng.step()
        if rng.random() < 0.05:
            eng.abort(rng.choice(reqs).rid)
    while eng.scheduler.has_work():
        eng.step()
    assert all(r.released for r in reqs)
    assert any(e["event"] == "evict" for e in eng.trace)
    assert any(r.finished_reason["type"] == "abort" for r in reqs)
    assert_no_leak(eng)


def test_torch_threads_is_checked_and_set():
    """The option sets torch's intra-op threads; the default leaves a core when there are two."""
    import os

    import torch

    from minisglang.engine import default_torch_threads

    cores = len(os.sched_getaffinity(0))
    assert default_torch_threads() == (cores - 1 if cores >= 2 else 1)
    assert default_torch_threads() >= 1
    with pytest.raises(ValueError, match="torch_threads must be a positive int"):
        sgl.Engine(stage="s0", torch_threads=0)
    before = torch.get_num_threads()
    try:
        sgl.Engine(stage="s0", torch_threads=1).shutdown()
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("disable_radix_cache", "no", "disable_radix_cache must be True or False, not 'no'"),  # truthy: cache off
        ("schedule_policy", "fifo", "schedule_policy must be 'lpm' or 'fcfs', not 'fifo'"),
        ("max_prefill_tokens", "4k", "max_prefill_tokens must be an integer, not '4k'"),
        ("max_running_requests", 0, "max_running_requests must be above 0, not 0"),
        (
            "max_prefill_tokens_beside_others",
            0,
            "max_prefill_tokens_beside_others must be above 0, not 0",
        ),
        ("in_batch_prefix_threshold", -1, "in_batch_prefix_threshold must be 0 (off) or above, not -1"),
    ],
)
def test_a_bad_scheduler_option_is_refused_by_name_before_the_model_loads(option, value, message, monkeypatch):
    """schedule_policy "fifo" and max_prefill_tokens "4k" were accepted and then aborted every
    request at its first step; disable_radix_cache "no" turned the cache off."""
    monkeypatch.setattr("minisglang.engine.load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        sgl.Engine(stage="s0", **{option: value})


def test_sampling_params_from_dict():
    p = SamplingParams.from_dict({"stop": "x", "json_schema": {"type": "integer"}})
    assert p.stop == ["x"] and p.json_schema == '{"type": "integer"}'
    assert p.constraint() == ("json_schema", '{"type": "integer"}')
    with pytest.raises(ValueError, match="at most one of regex / json_schema / ebnf"):
        SamplingParams.from_dict({"regex": "a", "ebnf": "b"})


def test_engine_keeps_its_startup_objects_out_of_the_garbage_collector():
    """freeze_gc (default): what exists when the engine is built is frozen (gen-2 passes no
    longer walk it) until shutdown; freeze_gc=False leaves the collector alone."""
    import gc

    gc.unfreeze()
    eng = sgl.Engine(max_total_tokens=2048)
    frozen = gc.get_freeze_count()
    assert frozen > 0 and eng.generate("Hi", {"max_new_tokens": 2})["text"] is not None
    eng.shutdown()
    assert gc.get_freeze_count() == 0
    plain = sgl.Engine(max_total_tokens=2048, freeze_gc=False)
    assert gc.get_freeze_count() == 0
    plain.shutdown()


@settings(max_examples=300, deadline=None)
@given(
    pieces=st.lists(st.text(alphabet="ab\u00e9x", max_size=4), max_size=12),
    stops=st.lists(st.text(alphabet="ab\u00e9x", min_size=1, max_size=3), min_size=1, max_size=4),
)
def test_the_stop_string_cut_searches_only_new_text_and_cuts_where_a_whole_search_does(pieces, stops):
    """`cut_at_stop_string` told how much text it searched before searches only the rest (a
    long output's steps were quadratic); the cut and the stop string matched are those of
    one search of the whole text."""
    whole = Req(prompt="", origin_input_ids=[1], sampling_params=SamplingParams(stop=stops))
    whole.output_text = "".join(pieces)
    cut_at_stop_string(whole)
    grown = Req(prompt="", origin_input_ids=[1], sampling_params=SamplingParams(stop=stops))
    for piece in pieces:
        checked = len(grown.output_text)
        grown.output_text += piece
        cut_at_stop_string(grown, checked)
        if grown.finished:
            break
    assert (grown.output_text, grown.finished_reason) == (whole.output_text, whole.finished_reason)


def test_a_stop_id_that_spells_text_is_text_to_a_grammar(engine, tmp_path):
    """generation_config.json listing text tokens as stop ids (here every token starting with
    a newline, beside the EOS): a constrained request whose grammar needs the newline ended
    there, "stop" with the output "a\\n" for the regex `a\\nb` (every backend; a stranger's
    checkpoint). The grammar reads such a token as its text (an unconstrained request still
    stops at it, as transformers does: test_generation_config_eos_ids_end_a_request)."""
    newline = [i for i, data in enumerate(engine.tokenizer.token_bytes) if data and data.startswith(b"\n")]
    model = tmp_path / "model"
    shutil.copytree(sgl.DEFAULT_MODEL_PATH, model)
    config = json.loads((model / "generation_config.json").read_text())
    config["eos_token_id"] = [engine.tokenizer.eos_token_id, *newline]
    (model / "generation_config.json").write_text(json.dumps(config))
    eng = sgl.Engine(model_path=str(model), stage="s5", max_total_tokens=1024, jump_forward=False)
    try:
        out = eng.generate(PROMPTS[1], {"regex": r"a\nb", "temperature": 0, "max_new_tokens": 8})
        assert out["text"] == "a\nb" and out["meta_info"]["finish_reason"]["type"] == "stop", out
    finally:
        eng.shutdown()
