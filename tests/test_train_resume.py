"""scripts/train_tiny_model.py trains in sittings: stopped after a checkpoint and resumed,
it takes exactly the steps (same batches, same losses, same weights) of an uninterrupted run."""

import contextlib
import io
import json
import random
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
import make_corpus  # noqa: E402
import train_tiny_model  # noqa: E402

TINY = [
    "--examples",
    "200",
    "--steps",
    "4",
    "--checkpoint-every",
    "2",
    "--tokens-per-batch",
    "256",
    "--hidden",
    "32",
    "--intermediate",
    "64",
    "--layers",
    "2",
    "--vocab-size",
    "600",
    "--threads",
    "1",
    "--copy-steps",
    "2",
    "--copy-mix",
    "2",
    "--copy-examples",
    "100",
]  # steps: drill, drill, main, drill


def train(tmp: Path, name: str, *extra: str) -> str:
    """One sitting of the training script, run in this process (a fresh interpreter per sitting
    spent most of its time importing torch and transformers); what it printed. The thread count
    and global random states it sets are put back, so later tests in this worker see none of it."""
    argv = ["--out", str(tmp / name / "out"), "--state", str(tmp / name / "state"), *TINY, *extra]
    threads, torch_rng, py_rng = torch.get_num_threads(), torch.get_rng_state(), random.getstate()
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            train_tiny_model.main(argv)
    finally:
        torch.set_num_threads(threads)
        torch.set_rng_state(torch_rng)
        random.setstate(py_rng)
    return printed.getvalue()


def test_stop_and_resume_equals_one_run(tmp_path):
    train(tmp_path, "whole", "--stop-after", "4")
    first = train(tmp_path, "split", "--stop-after", "2")
    assert "stopped after step 2" in first
    assert torch.load(tmp_path / "split" / "state" / "checkpoint.pt", weights_only=False)["step"] == 2
    train(tmp_path, "split", "--resume", "--stop-after", "4")
    whole = torch.load(tmp_path / "whole" / "state" / "checkpoint.pt", weights_only=False)
    split = torch.load(tmp_path / "split" / "state" / "checkpoint.pt", weights_only=False)
    assert split["step"] == whole["step"] == 4
    assert split["losses"] == whole["losses"]
    for key, value in whole["model"].items():
        assert torch.equal(split["model"][key], value), key
    assert (tmp_path / "split" / "state" / "step-2" / "model.safetensors").exists()


def test_resume_refuses_another_recipe(tmp_path):
    train(tmp_path, "a", "--stop-after", "2")
    with pytest.raises(SystemExit, match="was made by another recipe"):
        train(tmp_path, "a", "--lr", "0.001", "--resume")


def _contains(seq: list[int], part: list[int]) -> bool:
    return any(seq[i : i + len(part)] == part for i in range(len(seq) - len(part) + 1))


def test_a_copied_value_is_the_same_tokens_in_the_text_and_in_the_answer():
    """The pre-tokenizer never glues a word or number to the space before it, so the tokens of
    a name, age or hobby in the paragraph reappear unchanged inside the JSON answer: the
    model can copy token by token (GPT-2's split would give " Kastoru" in the text and
    "Kastoru" after `": "`)."""
    corpus = make_corpus.make_corpus(400, seed=0)
    tok = train_tiny_model.train_tokenizer(train_tiny_model.tokenizer_texts(corpus), 800)
    checked = 0
    for ex in make_corpus.heldout_extraction_prompts(60, corpus):
        text_ids = tok(ex["user"], add_special_tokens=False)["input_ids"]
        answer_ids = tok(ex["assistant"], add_special_tokens=False)["input_ids"]
        answer = json.loads(make_corpus.unfence(ex["assistant"]))
        values = [answer["name"], *answer.get("hobbies", [])]
        if str(answer.get("age")) in ex["user"]:  # Chinese texts may spell the age in numerals
            values.append(str(answer["age"]))
        for value in values:
            if '"' in value:  # a quoted nickname is escaped in JSON, so it is not the same text
                continue
            ids = tok(value, add_special_tokens=False)["input_ids"]
            assert _contains(text_ids, ids) and _contains(answer_ids, ids), (value, ex["user"], ex["assistant"])
            checked += 1
    assert checked > 100


@pytest.mark.parametrize("copy_steps,copy_mix", [(0, 0), (5, 0), (0, 3), (4, 2), (3, 5)])
def test_batch_source_takes_every_batch_once_in_order(copy_steps, copy_mix):
    """The copy-first curriculum: drills first, then every copy_mix-th step a drill; each
    source's batches are taken in order, none skipped or repeated."""
    sources = [train_tiny_model.batch_source(step, copy_steps, copy_mix) for step in range(60)]
    assert sources[:copy_steps] == [("drill", i) for i in range(copy_steps)]
    for name in ("drill", "main"):
        taken = [i for s, i in sources if s == name]
        assert taken == list(range(len(taken)))
    after = sources[copy_steps:]
    assert [s for s, _ in after].count("drill") == (len(after) // copy_mix if copy_mix else 0)


def test_every_epoch_is_a_fresh_corpus():
    """No example repeats: each epoch trains on a corpus of its own seed (epoch 0 is the
    corpus the tokenizer is trained on), so the model cannot memorise the answers."""
    epochs = [train_tiny_model.epoch_corpus(300, 0, e) for e in range(3)]
    assert epochs[0] == make_corpus.make_corpus(300, 0)
    assert epochs[1] == train_tiny_model.epoch_corpus(300, 0, 1)  # seeded: a resumed run sees the same
    users = [{ex["user"] for ex in corpus if ex["task"] == "extract_person"} for corpus in epochs]
    assert not users[0] & users[1] and not users[0] & users[2] and not users[1] & users[2]


def test_resume_in_a_later_epoch_equals_one_run(tmp_path):
    """Stopped and resumed in the second epoch (a fresh corpus made again on resume), the run
    takes the same batches as an uninterrupted one."""
    extra = [
        "--examples",
        "8",
        "--copy-steps",
        "0",
        "--copy-mix",
        "0",
        "--tokens-per-batch",
        "1024",
    ]  # 2 batches an epoch
    train(tmp_path, "whole", *extra, "--steps", "6", "--stop-after", "6")
    first = train(tmp_path, "split", *extra, "--steps", "6", "--stop-after", "3")
    assert "stopped after step 3" in first
    train(tmp_path, "split", *extra, "--steps", "6", "--resume", "--stop-after", "6")
    whole = torch.load(tmp_path / "whole" / "state" / "checkpoint.pt", weights_only=False)
    split = torch.load(tmp_path / "split" / "state" / "checkpoint.pt", weights_only=False)
    assert split["losses"] == whole["losses"] and len(whole["losses"]) == 6
    for key, value in whole["model"].items():
        assert torch.equal(split["model"][key], value), key


def test_a_second_stage_starts_from_the_first_ones_weights_and_tokenizer(tmp_path):
    """--init-from: a second training stage (new data, fresh optimizer and schedule) starts
    from the first stage's saved checkpoint and keeps its tokenizer."""
    train(tmp_path, "one", "--stop-after", "4")
    snapshot = tmp_path / "one" / "state" / "step-4"
    extra = ["--init-from", str(snapshot), "--seed", "1", "--copy-steps", "0", "--lr", "0"]
    train(tmp_path, "two", *extra, "--steps", "2", "--stop-after", "2")
    first = torch.load(tmp_path / "one" / "state" / "checkpoint.pt", weights_only=False)["model"]
    second = torch.load(tmp_path / "two" / "state" / "checkpoint.pt", weights_only=False)["model"]
    for key, value in first.items():  # learning rate 0: the weights are the first stage's
        assert torch.equal(second[key], value), key
    assert (tmp_path / "two" / "state" / "tokenizer" / "tokenizer.json").read_text() == (
        snapshot / "tokenizer.json"
    ).read_text()


def test_expand_blocks_starts_as_the_small_model_and_trains_only_new_blocks(tmp_path):
    """More --layers than the --init-from model: block expansion (LLaMA Pro). The grown model
    computes the small one's logits exactly, and --train-new-only moves the new blocks only."""
    from transformers import LlamaForCausalLM

    train(tmp_path, "one", "--stop-after", "4")
    snapshot = tmp_path / "one" / "state" / "step-4"
    small = LlamaForCausalLM.from_pretrained(snapshot).float().eval()
    ids = torch.randint(0, small.config.vocab_size, (2, 12))
    grown = train_tiny_model.expand_blocks(LlamaForCausalLM.from_pretrained(snapshot).float(), 3).eval()
    assert len(grown.model.layers) == 3
    assert torch.equal(grown(ids).logits, small(ids).logits)

    extra = ["--init-from", str(snapshot), "--seed", "1", "--copy-steps", "0", "--layers", "3", "--lr", "1e-2"]
    train(tmp_path, "two", *extra, "--train-new-only", "--steps", "2", "--stop-after", "2")
    before = torch.load(tmp_path / "one" / "state" / "checkpoint.pt", weights_only=False)["model"]
    after = torch.load(tmp_path / "two" / "state" / "checkpoint.pt", weights_only=False)["model"]
    # two old blocks: the new one goes after the second (layers.2), the old ones keep their names
    for key, value in before.items():
        assert torch.equal(after[key], value), key
    new = [k for k in after if k.startswith("model.layers.2.")]
    assert new and any(not torch.equal(after[k], before[k.replace("layers.2", "layers.1")]) for k in new)


def test_expand_width_starts_as_the_small_model_and_trains_the_new_parts(tmp_path):
    """A larger --hidden than the --init-from model: it grows wider (more residual dimensions,
    heads of the same size, MLP units). The grown model computes the small one's logits (up to
    float32 rounding: sums run over more, zero, terms), and training moves what started at zero."""
    from transformers import LlamaForCausalLM

    train(tmp_path, "one", "--stop-after", "4")
    snapshot = tmp_path / "one" / "state" / "step-4"
    small = LlamaForCausalLM.from_pretrained(snapshot).float().eval()
    ids = torch.randint(0, small.config.vocab_size, (2, 12))
    # TINY: hidden 32, 8 heads of 4, 4 kv-heads, 64 units -> 12 heads (6 kv-heads), 96 units
    grown = train_tiny_model.expand_width(LlamaForCausalLM.from_pretrained(snapshot).float(), 48, 96, 12, 6).eval()
    assert grown.model.embed_tokens.weight.shape[1] == 48 and grown.config.num_key_value_heads == 6
    torch.testing.assert_close(grown(ids).logits, small(ids).logits, rtol=1e-5, atol=1e-5)
    assert torch.equal(grown(ids).logits.argmax(-1), small(ids).logits.argmax(-1))

    wider = ["--hidden", "48", "--intermediate", "96", "--heads", "12", "--kv-heads", "6"]
    extra = ["--init-from", str(snapshot), "--seed", "1", "--copy-steps", "0", "--lr", "1e-2", *wider]
    train(tmp_path, "two", *extra, "--steps", "2", "--stop-after", "2")
    after = torch.load(tmp_path / "two" / "state" / "checkpoint.pt", weights_only=False)["model"]
    assert after["model.embed_tokens.weight"][:, 32:].abs().sum() > 0  # new residual dimensions written
    assert after["model.layers.0.self_attn.o_proj.weight"][:, 32:].abs().sum() > 0  # new heads heard
    assert after["model.layers.1.mlp.down_proj.weight"][32:].abs().sum() > 0
    assert after["model.layers.1.mlp.down_proj.weight"][:, 64:].abs().sum() > 0  # new MLP units heard
    with pytest.raises(SystemExit, match="head_dim 4"):
        train(tmp_path, "three", "--init-from", str(snapshot), "--hidden", "48")  # still 8 heads of 4


def test_average_last_saves_the_mean_of_the_last_snapshots(tmp_path):
    """--average-last N: the saved model is the mean of the last N snapshots' weights."""
    from safetensors.torch import load_file

    train(tmp_path, "avg", "--average-last", "2", "--eval-prompts", "2")
    state, out = tmp_path / "avg" / "state", tmp_path / "avg" / "out"
    two, four = (load_file(state / f"step-{k}" / "model.safetensors") for k in (2, 4))
    saved = load_file(out / "model.safetensors")
    assert set(saved) == set(four)
    for key, value in saved.items():
        assert torch.allclose(value, (two[key] + four[key]) / 2), key
    assert not torch.equal(two["model.norm.weight"], four["model.norm.weight"])  # the two differ


def test_sort_pool_mixes_lengths_and_keeps_every_example_once():
    """--sort-pool N sorts by length within random runs of N examples: a permutation whose
    runs are sorted; 0 sorts the whole epoch; every answer token is trained on once."""
    rng = random.Random(0)
    encoded = [([1] * rng.randint(3, 60), 2) for _ in range(200)]
    lengths = [len(ids) for ids, _ in encoded]
    assert [lengths[i] for i in train_tiny_model.length_order(encoded, random.Random(1))] == sorted(lengths)
    order = train_tiny_model.length_order(encoded, random.Random(1), sort_pool=16)
    assert sorted(order) == list(range(200)) and order != train_tiny_model.length_order(encoded, random.Random(1))
    for start in range(0, 200, 16):
        run = [lengths[i] for i in order[start : start + 16]]
        assert run == sorted(run)
    for pool in (0, 16):
        batches = train_tiny_model.make_batches(encoded, 128, 0, random.Random(2), pool)
        assert sum(int((labels != -100).sum()) for _, labels in batches) == sum(
            n - p for n, p in ((len(i), p) for i, p in encoded)
        )


def test_a_checkpoint_older_than_an_option_resumes_with_its_default(tmp_path):
    """Options added later (RECIPE_DEFAULTS) do not make older checkpoints unresumable."""
    train(tmp_path, "old", "--stop-after", "2")
    path = tmp_path / "old" / "state" / "checkpoint.pt"
    ckpt = torch.load(path, weights_only=False)
    del ckpt["recipe"]["sort_pool"]
    torch.save(ckpt, path)
    train(tmp_path, "old", "--resume", "--stop-after", "4")
    assert torch.load(path, weights_only=False)["step"] == 4


def _mined_file(tmp: Path, n: int) -> Path:
    """A file as scripts/mine_failures.py writes: training extraction examples with a "mined" record."""
    rows = [ex for ex in make_corpus.make_corpus(200, 99) if ex["task"] == "extract_person"][:n]
    path = tmp / "mined.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for ex in rows:
            f.write(json.dumps({**ex, "mined": {"at": 10, "kind": "over"}}, ensure_ascii=False) + "\n")
    return path


def test_mined_examples_join_every_epoch_without_repeats(tmp_path):
    """--mined FILE --mined-mix R: every epoch's corpus gains R * --examples of the mined examples
    (their "mined" records dropped), taken from the pool in turn, none twice before all are used."""
    mined = train_tiny_model.load_mined(_mined_file(tmp_path, 25))
    assert len(mined) == 25 and all("mined" not in ex for ex in mined)
    epochs = [train_tiny_model.epoch_corpus(100, 0, e, mined, 0.1) for e in range(3)]
    assert epochs[0][:100] == make_corpus.make_corpus(100, 0)
    shares = [[json.dumps(ex) for ex in corpus[100:]] for corpus in epochs]
    assert [len(s) for s in shares] == [10, 10, 10]
    assert len(set(shares[0] + shares[1])) == 20  # no repeat before the pool's 25 are used
    assert set(shares[0] + shares[1] + shares[2]) == {json.dumps(ex) for ex in mined}
    assert train_tiny_model.epoch_corpus(100, 0, 1, mined, 0.1) == epochs[1]  # seeded: a resume sees the same


def test_training_with_mined_examples_resumes_and_needs_a_mix(tmp_path):
    path = _mined_file(tmp_path, 10)
    printed = train(tmp_path, "m", "--mined", str(path), "--mined-mix", "0.1", "--stop-after", "2")
    assert "corpus: 220 examples" in printed
    train(tmp_path, "m", "--mined", str(path), "--mined-mix", "0.1", "--resume", "--stop-after", "3")
    with pytest.raises(SystemExit, match="was made by another recipe"):
        train(tmp_path, "m", "--resume")
    with pytest.raises(SystemExit, match="--mined-mix"):
        train(tmp_path, "n", "--mined", str(path))


def test_a_mined_examples_loss_can_start_at_its_first_wrong_token(tmp_path):
    """--mined-loss-from-miss: a mined example's loss starts at the token holding the character
    where the starting model first went wrong (`at`, counted in the unfenced answer; a fenced
    answer's fence comes before it); the rest of the corpus keeps its loss from the answer's start."""
    from transformers import PreTrainedTokenizerFast

    import minisglang

    tokenizer = PreTrainedTokenizerFast.from_pretrained(minisglang.DEFAULT_MODEL_PATH)
    path = _mined_file(tmp_path, 6)
    plain = train_tiny_model.load_mined(path)
    focused = train_tiny_model.load_mined(path, loss_from_miss=True)
    assert all("loss_from" not in ex for ex in plain)
    for ex, mine in zip(plain, focused):
        answer = make_corpus.unfence(ex["assistant"])
        assert mine["assistant"][mine["loss_from"] :].startswith(answer[10:])  # `at` 10 of the unfenced answer
        ((ids, start),) = train_tiny_model.encode_examples(tokenizer, [ex], 1024)
        ((same, later),) = train_tiny_model.encode_examples(tokenizer, [mine], 1024)
        assert same == ids and start < later < len(ids)
        full = train_tiny_model.render(tokenizer, mine, with_answer=True)
        miss = full.find(mine["assistant"], len(train_tiny_model.render(tokenizer, mine, with_answer=False)))
        miss += mine["loss_from"]
        # the loss starts at the token that holds the missed character
        assert len(tokenizer.decode(ids[:later])) <= miss < len(tokenizer.decode(ids[: later + 1]))


def test_bpe_dropout_spells_the_same_text_in_other_pieces_seeded():
    """--bpe-dropout: `drop_merges` undoes merges (never changes the text), draws the same
    pieces from the same seed, leaves ids alone at p 0 and ends in unmergeable tokens at p 1;
    `with_dropout` moves the prompt/answer boundary with the prompt's new length."""
    from transformers import PreTrainedTokenizerFast

    import minisglang

    tokenizer = PreTrainedTokenizerFast.from_pretrained(minisglang.DEFAULT_MODEL_PATH)
    parts = train_tiny_model.merge_parts(tokenizer)
    text = "Drangreaxkotkot is 44; 张婷婷玉 likes tennis."
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert train_tiny_model.drop_merges(ids, parts, 0.0, random.Random(0)) == ids
    pieces = train_tiny_model.drop_merges(ids, parts, 1.0, random.Random(0))
    assert not any(t in parts for t in pieces) and len(pieces) == len(text.encode())  # bytes
    some = [train_tiny_model.drop_merges(ids, parts, 0.3, random.Random(seed)) for seed in range(4)]
    assert all(tokenizer.decode(d) == text for d in some) and len({tuple(d) for d in some}) > 1
    assert some[0] == train_tiny_model.drop_merges(ids, parts, 0.3, random.Random(0))
    ((dropped, start),) = train_tiny_model.with_dropout([(ids, 5)], parts, 1.0, 1.0, seed=0)
    assert tokenizer.decode(dropped[:start]) == tokenizer.decode(ids[:5])
    assert tokenizer.decode(dropped[start:]) == tokenizer.decode(ids[5:])
    ((prompt_only, start),) = train_tiny_model.with_dropout([(ids, 5)], parts, 1.0, 0.0, seed=0)
    assert prompt_only[start:] == ids[5:] and start > 5


def test_training_with_bpe_dropout_resumes_as_one_run(tmp_path):
    """The dropped pieces are drawn from the epoch's seed: a resumed run takes the same batches."""
    extra = ["--bpe-dropout", "0.2", "--bpe-dropout-answer", "0.1", "--steps", "4"]
    train(tmp_path, "whole", *extra, "--stop-after", "4")
    train(tmp_path, "split", *extra, "--stop-after", "3")
    train(tmp_path, "split", *extra, "--resume", "--stop-after", "4")
    whole = torch.load(tmp_path / "whole" / "state" / "checkpoint.pt", weights_only=False)
    split = torch.load(tmp_path / "split" / "state" / "checkpoint.pt", weights_only=False)
    plain = train(tmp_path, "plain", "--steps", "4", "--stop-after", "4")
    assert split["losses"] == whole["losses"] and "stopped" in plain
    assert (
        torch.load(tmp_path / "plain" / "state" / "checkpoint.pt", weights_only=False)["losses"][2]
        != whole["losses"][2]
    )


def test_name_weight_weighs_a_names_value_and_its_closing_quote():
    """--name-weight: the loss's weight on the tokens of each `"name": "..."` value of an answer
    and on the token that closes it (where the model copies on or stops), 1 elsewhere; the
    weighted loss is each answer token's cross-entropy times its weight, over the answer tokens."""
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    import minisglang

    tokenizer = PreTrainedTokenizerFast.from_pretrained(minisglang.DEFAULT_MODEL_PATH)
    marks = train_tiny_model.name_marks(tokenizer)
    prompt = tokenizer("<|user|>\nWho is Barqorqor?\n<|assistant|>\n", add_special_tokens=False)["input_ids"]
    seqs = []
    for answer, name in [
        ('{"name": "Barqorqor", "age": 4}', "Barqorqor"),
        ('{"age": 4, "name": "张三"}', "张三"),
        ('{"city": "name"}', None),
    ]:
        seq = prompt + tokenizer(answer + "<|endoftext|>", add_special_tokens=False)["input_ids"]
        seqs.append(seq)
        at = train_tiny_model.name_positions(seq, len(prompt), marks)
        if name is None:
            assert at == []
            continue
        assert at == list(range(at[0], at[-1] + 1)) and at[0] >= len(prompt)
        assert tokenizer.decode(seq[at[0] : at[-1]]) == name and tokenizer.decode([seq[at[-1]]]).startswith('"')
    seq = seqs[0]
    ((ids, labels, weights),) = train_tiny_model.make_batches(
        [(seq, len(prompt))], 4096, 0, random.Random(0), names=(3.0, marks)
    )
    named = train_tiny_model.name_positions(seq, len(prompt), marks)
    assert len(named) > 3 and weights.sum().item() == ids.numel() + 2.0 * len(named)
    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=len(tokenizer),
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
        )
    )
    plain = train_tiny_model.answer_loss(model, ids, labels)
    assert torch.allclose(train_tiny_model.answer_loss(model, ids, labels, torch.ones_like(weights)), plain)
    logits = model(input_ids=ids).logits[0, :-1]
    each = torch.nn.functional.cross_entropy(logits, labels[0, 1:], reduction="none", ignore_index=-100)
    keep = labels[0, 1:] != -100
    expected = (each * weights[0, 1:])[keep].sum() / keep.sum()
    assert torch.allclose(train_tiny_model.answer_loss(model, ids, labels, weights), expected, atol=1e-6)
