"""Our forward over the KV pool against transformers' own forward (the oracle).

Three checkpoints: a random Qwen2 (qkv bias, GQA, tied embeddings), a random Llama
(untied, MQA, explicit head_dim, large rope_theta) and the bundled model. Every case
compares logits with ``AutoModelForCausalLM`` run on the whole sequence, fp32, eval.

Tests of minisglang/model/ (config.py, loader.py, llama.py, forward_batch.py).
"""

import copy
import json
import shutil

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

import minisglang
from minisglang.memory_pool import ReqToTokenPool, TokenToKVPool
from minisglang.model import SUPPORTED_ARCHITECTURES, ForwardBatch, ForwardMode, ModelConfig, load_model

ATOL = 1e-4


def save_random_model(path, config, model_cls, max_shard_size=None):
    """Save a randomly initialised HF model whose weights are far from their defaults
    (non-zero biases, non-unit norms), so the comparison exercises every parameter."""
    torch.manual_seed(0)
    model = model_cls(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
            else:
                p.normal_(0.0, 0.15)
    kwargs = {} if max_shard_size is None else {"max_shard_size": max_shard_size}
    model.save_pretrained(path, **kwargs)
    return path


def qwen2_config(**overrides):
    cfg = dict(
        vocab_size=96,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    )
    return Qwen2Config(**{**cfg, **overrides})


def llama_config(**overrides):
    cfg = dict(
        vocab_size=80,
        hidden_size=48,
        intermediate_size=112,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=16,
        rope_theta=500000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
    )
    return LlamaConfig(**{**cfg, **overrides})


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return {
        "qwen2": save_random_model(root / "qwen2", qwen2_config(), Qwen2ForCausalLM),
        "llama": save_random_model(root / "llama", llama_config(), LlamaForCausalLM),
        "bundled": minisglang.DEFAULT_MODEL_PATH,
    }


class Pair:
    """Our model and transformers' model loaded from the same directory."""

    def __init__(self, path):
        self.ours = load_model(path)
        self.hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        self.vocab = self.ours.config.vocab_size
        cfg = self.ours.config
        self.req_pool = ReqToTokenPool(32, max_context_len=64)
        self.kv_pool = TokenToKVPool(1024, cfg.num_layers, cfg.num_kv_heads, cfg.head_dim, torch.float32)

    @torch.inference_mode()
    def reference(self, token_ids: list[int]) -> torch.Tensor:
        """transformers' logits ``[len, vocab]`` for one whole sequence."""
        return self.hf(torch.tensor([token_ids])).logits[0].float()


@pytest.fixture(scope="module", params=["qwen2", "llama", "bundled"])
def pair(request, model_dirs):
    return Pair(model_dirs[request.param])


def random_ids(gen, vocab, n):
    return torch.randint(0, vocab, (n,), generator=gen).tolist()


def with_own_pools(pair):
    """The same models with empty pools of their own (the module's are shared by its tests,
    which do not give their slots back)."""
    fresh, cfg = copy.copy(pair), pair.ours.config
    fresh.req_pool = ReqToTokenPool(8, max_context_len=64)
    fresh.kv_pool = TokenToKVPool(256, cfg.num_layers, cfg.num_kv_heads, cfg.head_dim, torch.float32)
    return fresh


def prefill(pair, prompts, prefix_lens=None, reqs=None):
    """Extend ``prompts[i][prefix_lens[i]:]`` for each request; returns (batch, logits [T, vocab])."""
    reqs = reqs if reqs is not None else [pair.req_pool.alloc() for _ in prompts]
    prefix_lens = prefix_lens or [0] * len(prompts)
    new = [p[k:] for p, k in zip(prompts, prefix_lens)]
    loc = pair.kv_pool.alloc(sum(map(len, new)))
    fb = ForwardBatch.extend(reqs, prefix_lens, new, loc, pair.req_pool, pair.kv_pool)
    return fb, pair.ours(fb, return_all_logits=True)


def test_prefill_three_requests_of_different_lengths(pair):
    gen = torch.Generator().manual_seed(1)
    prompts = [random_ids(gen, pair.vocab, n) for n in (7, 1, 12)]
    fb, all_logits = prefill(pair, prompts)
    assert fb.mode == ForwardMode.EXTEND and all_logits.shape == (20, pair.vocab)
    assert fb.positions.tolist() == list(range(7)) + [0] + list(range(12))
    assert fb.seq_lens.tolist() == [7, 1, 12]
    start = 0
    for prompt in prompts:
        ref = pair.reference(prompt)
        torch.testing.assert_close(all_logits[start : start + len(prompt)], ref, atol=ATOL, rtol=0)
        start += len(prompt)

    # The default output is the last position of each request; rerunning the same batch
    # (same slots) must give the same numbers.
    loc = fb.out_cache_loc
    fb2 = ForwardBatch.extend(fb.req_pool_indices.tolist(), [0, 0, 0], prompts, loc, pair.req_pool, pair.kv_pool)
    last = pair.ours(fb2)
    assert last.shape == (3, pair.vocab)
    torch.testing.assert_close(last, all_logits[[6, 7, 19]], atol=ATOL, rtol=0)


def test_extend_after_cached_prefix(pair):
    """Prefixes are computed in one call; a later call extends them, and a third request
    reuses request 0's prefix slots (as a radix-cache hit does) without recomputing them."""
    gen = torch.Generator().manual_seed(2)
    full = [random_ids(gen, pair.vocab, n) for n in (9, 6)]
    prefix_lens = [5, 2]
    first, _ = prefill(pair, [seq[:k] for seq, k in zip(full, prefix_lens)])
    reqs = first.req_pool_indices.tolist()

    # A third request shares request 0's first 5 tokens, then diverges.
    shared = full[0][:5] + random_ids(gen, pair.vocab, 3)
    hit = pair.req_pool.alloc()
    pair.req_pool.req_to_token[hit, :5] = pair.req_pool.req_to_token[reqs[0], :5]

    used_before = pair.kv_pool.available_size()
    fb, logits = prefill(pair, full + [shared], prefix_lens + [5], reqs + [hit])
    assert pair.kv_pool.available_size() == used_before - (4 + 4 + 3)  # only new tokens take slots
    assert fb.positions.tolist() == [5, 6, 7, 8, 2, 3, 4, 5, 5, 6, 7]
    start = 0
    for seq, k in zip(full + [shared], prefix_lens + [5]):
        ref = pair.reference(seq)[k:]
        torch.testing.assert_close(logits[start : start + len(ref)], ref, atol=ATOL, rtol=0)
        start += len(ref)


def test_extend_groups_short_and_long_suffixes(pair):
    """A prefill batch mixing long prompts with jump-forward's 2-3 token re-admissions: the
    attention runs per size group (1 | 2 | 3-4 | 5-8 | ...), interleaved in the batch, and
    every token's logits still equal transformers'."""
    gen = torch.Generator().manual_seed(4)
    full = [random_ids(gen, pair.vocab, n) for n in (12, 30, 9, 17, 6)]
    prefix_lens = [10, 0, 7, 0, 2]  # new tokens: 2, 30, 2, 17, 4
    first, _ = prefill(pair, [seq[:k] for seq, k in zip(full, prefix_lens) if k])
    cached = iter(first.req_pool_indices.tolist())
    reqs = [next(cached) if k else pair.req_pool.alloc() for k in prefix_lens]
    _, logits = prefill(pair, full, prefix_lens, reqs)
    start = 0
    for seq, k in zip(full, prefix_lens):
        ref = pair.reference(seq)[k:]
        torch.testing.assert_close(logits[start : start + len(ref)], ref, atol=ATOL, rtol=0)
        start += len(ref)
    assert start == logits.shape[0]


def test_batched_decode_steps(pair):
    """Prefill three prompts of different lengths, then decode four steps in one batch;
    each step's logits equal transformers' last-position logits on the whole sequence."""
    gen = torch.Generator().manual_seed(3)
    seqs = [random_ids(gen, pair.vocab, n) for n in (3, 10, 6)]
    fb, all_logits = prefill(pair, seqs)
    reqs = fb.req_pool_indices.tolist()
    logits = all_logits[[2, 12, 18]]  # last prompt token of each request
    for step in range(4):
        # Greedy for two requests, a random token for the third (covers unlikely tokens).
        next_ids = logits.argmax(-1).tolist()
        next_ids[2] = random_ids(gen, pair.vocab, 1)[0]
        lens_before = [len(s) for s in seqs]
        loc = pair.kv_pool.alloc(3)
        fb = ForwardBatch.decode(reqs, lens_before, next_ids, loc, pair.req_pool, pair.kv_pool)
        assert fb.mode == ForwardMode.DECODE
        assert fb.positions.tolist() == lens_before and fb.seq_lens.tolist() == [n + 1 for n in lens_before]
        for req, n, slot in zip(reqs, lens_before, loc.tolist()):
            assert int(pair.req_pool.req_to_token[req, n]) == slot
        logits = pair.ours(fb)
        assert logits.shape == (3, pair.vocab)
        seqs = [s + [t] for s, t in zip(seqs, next_ids)]
        for i, seq in enumerate(seqs):
            torch.testing.assert_close(
                logits[i],
                pair.reference(seq)[-1],
                atol=ATOL,
                rtol=0,
                msg=lambda m: f"decode step {step}, request {i}: {m}",
            )


def behind_a_shared_prompt(pair, gen, suffix_lens):
    """A 9-token system prompt prefilled once, then one request per suffix length whose
    first 9 positions are that prompt's KV slots (a radix hit: the slots, not a copy of the
    K/V), its own suffix prefilled: (sequences, request slots, the suffixes' logits)."""
    system = random_ids(gen, pair.vocab, 9)
    first, _ = prefill(pair, [system])
    owner = first.req_pool_indices.tolist()[0]
    seqs = [system + random_ids(gen, pair.vocab, n) for n in suffix_lens]
    reqs = [pair.req_pool.alloc() for _ in seqs]
    for req in reqs:
        pair.req_pool.req_to_token[req, :9] = pair.req_pool.req_to_token[owner, :9]
    _, logits = prefill(pair, seqs, [9] * len(seqs), reqs)
    return seqs, reqs, logits


@pytest.mark.parametrize("chunk", [8, 2])
def test_decode_reads_a_shared_prefix_once(pair, chunk, monkeypatch):
    """Four requests whose first 9 positions sit in the same KV slots (a system prompt the
    radix tree shares), then own suffixes of different lengths: the decode batch finds the
    shared slots (`shared_prefix_len`), reads them once for the batch, and every step's
    logits still equal transformers'. A request that does not share them turns it off.
    With chunks of 2 the requests attend in length order, two by two, out of batch order."""
    monkeypatch.setattr(ForwardBatch, "DECODE_CHUNK", chunk)
    gen = torch.Generator().manual_seed(5)
    seqs, reqs, all_logits = behind_a_shared_prompt(pair, gen, (1, 7, 3, 12))
    logits = all_logits[torch.tensor([len(s) - 9 for s in seqs]).cumsum(0) - 1]
    other = random_ids(gen, pair.vocab, 11)  # shares no slot with the others
    other_fb, other_logits = prefill(pair, [other])
    other_req = int(other_fb.req_pool_indices[0])
    for step in range(3):
        with_other = step == 2
        batch = reqs + [other_req] if with_other else reqs
        batch_seqs = seqs + [other] if with_other else seqs
        next_ids = logits.argmax(-1).tolist() + ([int(other_logits[-1].argmax())] if with_other else [])
        fb = ForwardBatch.decode(
            batch, [len(s) for s in batch_seqs], next_ids, pair.kv_pool.alloc(len(batch)), pair.req_pool, pair.kv_pool
        )
        assert fb.shared_prefix_len == (0 if with_other else 9)
        out = pair.ours(fb)
        for i, seq in enumerate(batch_seqs):
            torch.testing.assert_close(
                out[i],
                pair.reference(seq + [next_ids[i]])[-1],
                atol=ATOL,
                rtol=0,
                msg=lambda m: f"decode step {step}, request {i}: {m}",
            )
        seqs = [s + [t] for s, t in zip(seqs, next_ids)]
        logits = out[: len(reqs)]


@pytest.mark.parametrize("new_tokens", [(3, 3, 4, 4), (5, 1, 2, 8)])
def test_short_extends_read_a_shared_prefix_once(pair, new_tokens):
    """s7's verify forward: each request brings its last token and drafts (a few new tokens)
    behind a system prompt whose KV slots they share. Groups of such requests read the
    prefix once (`ExtendGroup.shared`, `cascade_attention`), and every new token's logits
    still equal transformers'. A group whose requests share nothing, or one request alone,
    attends as before (shared 0)."""
    pair = with_own_pools(pair)
    gen = torch.Generator().manual_seed(6)
    seqs, reqs, _ = behind_a_shared_prompt(pair, gen, (2, 6, 4, 9))
    longer = [s + random_ids(gen, pair.vocab, n) for s, n in zip(seqs, new_tokens)]
    fb, logits = prefill(pair, longer, [len(s) for s in seqs], reqs)
    shared = {g.shared for g in fb.extend_groups if len(g.slots) > 1}
    assert shared == {9}, shared
    start = 0
    for seq, before in zip(longer, seqs):
        ref = pair.reference(seq)[len(before) :]
        torch.testing.assert_close(logits[start : start + len(ref)], ref, atol=ATOL, rtol=0)
        start += len(ref)
    lone, _ = prefill(pair, [random_ids(gen, pair.vocab, 5) for _ in range(2)])
    assert [g.shared for g in lone.extend_groups] == [0]


def test_shared_prefix_len_counts_leading_equal_slots():
    """The shared prefix is the leading columns equal in every row, never a later run."""
    rows = torch.tensor([[4, 5, 6, 7, 9], [4, 5, 6, 8, 9], [4, 5, 6, 7, 9]])
    assert ForwardBatch._shared_slots(rows) == 3
    assert ForwardBatch._shared_slots(torch.tensor([[1, 2, 3], [0, 2, 3]])) == 0
    assert ForwardBatch._shared_slots(rows[:1]) == 0  # one request: nothing to share
    assert ForwardBatch._shared_slots(rows[:, :0]) == 0


@pytest.mark.parametrize(
    "rope_parameters",
    [
        {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0},
        {
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 32,
        },
    ],
)
def test_rope_scaling_matches_transformers(tmp_path, rope_parameters):
    path = save_random_model(
        tmp_path / "m", llama_config(num_hidden_layers=1, rope_parameters=rope_parameters), LlamaForCausalLM
    )
    pair = Pair(path)
    assert pair.ours.config.rope_scaling["rope_type"] == rope_parameters["rope_type"]
    prompt = random_ids(torch.Generator().manual_seed(4), pair.vocab, 40)
    _, logits = prefill(pair, [prompt])
    torch.testing.assert_close(logits, pair.reference(prompt), atol=ATOL, rtol=0)


def test_old_style_config_keys(tmp_path):
    """config.json files written before transformers 5 keep rope_theta / rope_scaling /
    torch_dtype at the top level."""
    cfg = ModelConfig.from_dict(
        {
            "architectures": ["LlamaForCausalLM"],
            "vocab_size": 10,
            "hidden_size": 8,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "intermediate_size": 16,
            "rope_theta": 1234.0,
            "rope_scaling": None,
            "torch_dtype": "bfloat16",
            "eos_token_id": [3, 4],
        }
    )
    assert (cfg.rope_theta, cfg.rope_scaling, cfg.torch_dtype) == (1234.0, None, "bfloat16")
    assert (cfg.num_kv_heads, cfg.head_dim, cfg.eos_token_ids) == (2, 4, [3, 4])
    linear = ModelConfig.from_dict(
        {
            "model_type": "llama",
            "vocab_size": 10,
            "hidden_size": 8,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "intermediate_size": 16,
            "rope_scaling": {"type": "linear", "factor": 2.0},
        }
    )
    assert linear.architecture == "LlamaForCausalLM"
    assert linear.rope_scaling == {"type": "linear", "factor": 2.0, "rope_type": "linear"}


def test_generation_config_eos_ids_win_over_config_json(tmp_path):
    """generation_config.json's eos_token_id (what transformers' generate stops at) replaces
    config.json's; a file without one leaves config.json's."""
    path = save_random_model(tmp_path / "m", llama_config(num_hidden_layers=1, eos_token_id=2), LlamaForCausalLM)
    assert ModelConfig.from_pretrained(path).eos_token_ids == [2]
    (path / "generation_config.json").write_text(json.dumps({"eos_token_id": [5, 7]}))
    assert ModelConfig.from_pretrained(path).eos_token_ids == [5, 7]
    (path / "generation_config.json").write_text(json.dumps({"do_sample": False}))
    assert ModelConfig.from_pretrained(path).eos_token_ids == [2]


def test_sharded_checkpoint_loads(tmp_path):
    path = save_random_model(tmp_path / "sharded", llama_config(), LlamaForCausalLM, max_shard_size="40KB")
    assert (path / "model.safetensors.index.json").is_file()
    assert len(list(path.glob("*.safetensors"))) > 1
    pair = Pair(path)
    prompt = random_ids(torch.Generator().manual_seed(5), pair.vocab, 8)
    _, logits = prefill(pair, [prompt])
    torch.testing.assert_close(logits, pair.reference(prompt), atol=ATOL, rtol=0)


def test_bf16_weights_keep_a_bf16_pool_and_fp32_logits(model_dirs):
    model = load_model(model_dirs["qwen2"], dtype=torch.bfloat16)
    assert model.dtype == torch.bfloat16
    cfg = model.config
    req_pool = ReqToTokenPool(1, 16)
    kv_pool = TokenToKVPool(16, cfg.num_layers, cfg.num_kv_heads, cfg.head_dim, model.dtype)
    fb = ForwardBatch.extend([req_pool.alloc()], [0], [[1, 2, 3]], kv_pool.alloc(3), req_pool, kv_pool)
    logits = model(fb)
    assert logits.dtype == torch.float32 and torch.isfinite(logits).all()
    ref = load_model(model_dirs["qwen2"])
    fb32 = ForwardBatch.extend(
        [0],
        [0],
        [[1, 2, 3]],
        fb.out_cache_loc,
        req_pool,
        TokenToKVPool(16, cfg.num_layers, cfg.num_kv_heads, cfg.head_dim, torch.float32),
    )
    assert (logits - ref(fb32)).abs().max() < 0.1  # bf16 rounding only


# ---------------------------------------------------------------- bad checkpoints


@pytest.fixture()
def good_dir(tmp_path, model_dirs):
    path = tmp_path / "copy"
    shutil.copytree(model_dirs["qwen2"], path)
    return path


def test_missing_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"model directory .*nowhere does not exist"):
        load_model(tmp_path / "nowhere")


def test_missing_config(good_dir):
    (good_dir / "config.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"no config.json in model directory .*looked for .*config.json"):
        load_model(good_dir)


def test_missing_weights(good_dir):
    (good_dir / "model.safetensors").unlink()
    with pytest.raises(
        FileNotFoundError,
        match=r"no weights in model directory .*looked for model.safetensors and model.safetensors.index.json",
    ):
        load_model(good_dir)


def test_missing_shard(good_dir):
    (good_dir / "model.safetensors").rename(good_dir / "model-00001-of-00002.safetensors")
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (good_dir / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(FileNotFoundError, match=r"lists shards that do not exist: .*model-00002-of-00002"):
        load_model(good_dir)


def test_a_stale_index_beside_model_safetensors_is_ignored(good_dir):
    """Re-saving a sharded checkpoint unsharded into its directory deletes the shards but
    leaves model.safetensors.index.json: transformers loads model.safetensors, we refused
    ("lists shards that do not exist")."""
    index = {"weight_map": {"model.norm.weight": "model-00001-of-00002.safetensors"}}
    (good_dir / "model.safetensors.index.json").write_text(json.dumps(index))
    load_model(good_dir)


def test_unsupported_architecture(good_dir):
    cfg = json.loads((good_dir / "config.json").read_text())
    cfg["architectures"] = ["GPT2LMHeadModel"]
    (good_dir / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="unsupported architecture 'GPT2LMHeadModel'") as err:
        load_model(good_dir)
    for name in SUPPORTED_ARCHITECTURES:
        assert name in str(err.value)


def test_unsupported_rope_type(good_dir):
    cfg = json.loads((good_dir / "config.json").read_text())
    cfg["rope_parameters"] = {"rope_type": "yarn", "rope_theta": 1e4, "factor": 2.0}
    (good_dir / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="unsupported rope_type 'yarn'; supported: default, linear, llama3"):
        load_model(good_dir)


def test_tied_checkpoint_with_a_different_lm_head_is_refused(good_dir):
    """A tied checkpoint (good_dir's Qwen2) that also saves lm_head.weight: an equal copy loads;
    a different one was silently dropped for the embedding, where transformers uses it."""
    from safetensors.torch import load_file, save_file

    tensors = load_file(good_dir / "model.safetensors")
    tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"].clone()
    save_file(tensors, good_dir / "model.safetensors", metadata={"format": "pt"})
    load_model(good_dir)
    tensors["lm_head.weight"] = tensors["lm_head.weight"] + 1
    save_file(tensors, good_dir / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match="tie_word_embeddings=true but its lm_head.weight differs"):
        load_model(good_dir)


@pytest.mark.parametrize(
    ("rope_parameters", "names"),
    [
        ({"rope_type": "linear", "rope_theta": 1e4}, "factor"),
        ({"rope_type": "linear", "rope_theta": 1e4, "factor": "2"}, "factor"),
        ({"rope_type": "llama3", "rope_theta": 1e4, "factor": 8.0}, "low_freq_factor, high_freq_factor, original_max"),
    ],
)
def test_scaled_rope_without_its_numbers_is_refused_at_load(good_dir, rope_parameters, names):
    """Such a config loaded, then every forward raised KeyError (or TypeError): transformers
    refuses it at load, and so do we, naming the fields."""
    cfg = json.loads((good_dir / "config.json").read_text())
    cfg["rope_parameters"] = rope_parameters
    (good_dir / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=f"rope_type '{rope_parameters['rope_type']}' needs a number for {names}"):
        load_model(good_dir)


def test_weights_not_matching_config(good_dir):
    cfg = json.loads((good_dir / "config.json").read_text())
    cfg["num_hidden_layers"] = 3  # the file only has two layers
    (good_dir / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"lacks \d+ tensors: model\.layers\.2\."):
        load_model(good_dir)
    cfg["num_hidden_layers"], cfg["intermediate_size"] = 2, 50
    (good_dir / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(
        ValueError,
        match=r"mlp\.\w+_proj\.weight' in .* has shape \((64, 96|96, 64)\), config.json implies \((64, 50|50, 64)\)",
    ):
        load_model(good_dir)


# ---------------------------------------------------------------- ForwardBatch inputs


def test_forward_batch_rejects_bad_inputs():
    req_pool = ReqToTokenPool(2, max_context_len=4)
    kv_pool = TokenToKVPool(8, 1, 1, 2, torch.float32)
    with pytest.raises(ValueError, match="out_cache_loc has 2 slots for 3 new tokens"):
        ForwardBatch.extend([0], [0], [[1, 2, 3]], torch.tensor([0, 1]), req_pool, kv_pool)
    with pytest.raises(ValueError, match="at least one new token"):
        ForwardBatch.extend([0], [0], [[]], torch.tensor([], dtype=torch.int64), req_pool, kv_pool)
    with pytest.raises(ValueError, match="sequence length 5 exceeds max_context_len 4"):
        ForwardBatch.extend([0], [2], [[1, 2, 3]], torch.tensor([0, 1, 2]), req_pool, kv_pool)
    with pytest.raises(ValueError, match="one prefix length and one token list per request"):
        ForwardBatch.extend([0, 1], [0], [[1]], torch.tensor([0]), req_pool, kv_pool)
    with pytest.raises(ValueError, match="sequence length 5 exceeds max_context_len 4"):
        ForwardBatch.decode([0], [4], [1], torch.tensor([0]), req_pool, kv_pool)
