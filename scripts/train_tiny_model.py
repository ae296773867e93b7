"""Train the bundled tiny model (minisglang/assets/tiny-json-llama) from nothing, on the CPU.

The recipe, in the order it runs:
1. make the seeded synthetic chat corpus (scripts/make_corpus.py);
2. train a byte-level BPE tokenizer on it with `tokenizers`;
3. train a small LlamaForCausalLM on the assistant turns (loss on the answers only);
4. save a standard Hugging Face checkpoint directory and write MODEL_CARD.md with the
   measured valid-JSON rate on held-out prompts (scripts/eval_json_rate.py).

Usage (the exact command of the bundled checkpoint is in its MODEL_CARD.md):
    python scripts/train_tiny_model.py --steps 1500 --out minisglang/assets/tiny-json-llama
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import random
import sys
import time
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from tqdm import tqdm
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

sys.path.insert(0, str(Path(__file__).resolve().parent))
import eval_extraction  # noqa: E402
import eval_json_rate  # noqa: E402
import make_corpus  # noqa: E402

EOS = "<|endoftext|>"
TOOL_ROLE = "<|tool|>"
SPECIAL_TOKENS = [EOS, "<|system|>", "<|user|>", "<|assistant|>", TOOL_ROLE]
# The tags around a tool call are ordinary (non-special) added tokens: one token each, and
# they still spell their text, so a grammar (a structural tag) can require them.
TOOL_CALL_TOKENS = ["<tool_call>", "</tool_call>"]
# How a system turn announces the tools (OpenAI tool dicts, one JSON object per line).
TOOLS_PREAMBLE = (
    '# Tools\nTo call a tool, answer with <tool_call>{"name": NAME, "arguments": ARGS}</tool_call>.\n<tools>\n'
)
# The chat format (Qwen-like):
#   <|system|>\n{system}[\n\n{TOOLS_PREAMBLE}{tool json per line}</tools>]\n
#   <|user|>\n{content}\n        <|tool|>\n{tool result}\n
#   <|assistant|>\n{content}<tool_call>{"name": "f", "arguments": {...}}</tool_call>...<|endoftext|>
# With tools and no system message, the system turn holds only the tool block.
CHAT_TEMPLATE = (
    "{% macro tool_block() %}"
    "{{ '" + TOOLS_PREAMBLE + "' }}"
    "{% for tool in tools %}{{ tool | tojson }}{{ '\n' }}{% endfor %}"
    "{{ '</tools>' }}"
    "{% endmacro %}"
    "{% if tools and messages[0]['role'] != 'system' %}{{ '<|system|>\n' + tool_block() + '\n' }}{% endif %}"
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}"
    "{{ '<|assistant|>\n' }}{% if message['content'] %}{{ message['content'] }}{% endif %}"
    "{% for call in message['tool_calls'] or [] %}"
    "{% set fn = call['function'] if call['function'] is defined else call %}"
    "{{ '<tool_call>{\"name\": ' + (fn['name'] | tojson) + ', \"arguments\": ' }}"
    "{% if fn['arguments'] is string %}{{ fn['arguments'] }}{% else %}{{ fn['arguments'] | tojson }}{% endif %}"
    "{{ '}</tool_call>' }}"
    "{% endfor %}"
    "{{ '<|endoftext|>' }}"
    "{% else %}"
    "{{ '<|' + message['role'] + '|>\n' + message['content'] }}"
    "{% if loop.first and message['role'] == 'system' and tools %}{{ '\n\n' + tool_block() }}{% endif %}"
    "{{ '\n' }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)
# GPT-2's split, except that (1) a run of punctuation may contain single spaces, so that
# JSON glue such as `", "` and `": "` can become one token, (2) every Chinese character is a
# piece of its own and (3) a word or number never takes the space before it (GPT-2's
# " Kastoru" would be other tokens than the "Kastoru" after `": "` in the answer); a
# punctuation run takes one space after it instead, so a separator such as ", " stays one
# token (two tokens "," and " " between every pair of items would leave a copying model
# nothing to tell one separator from another). So a name, a number or a hobby is spelled
# by the same tokens in the sentence and in the JSON answer, and the model can learn to
# copy it token by token.
PRETOKENIZE_PATTERN = (
    r"\p{Han}|(?:(?!\p{Han})\p{L})+|\p{N}+| ?[^\s\p{L}\p{N}]+(?: [^\s\p{L}\p{N}]+)* ?"
    r"|\s+(?!\S)|\s+"
)


def train_tokenizer(texts: list[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer on ``texts`` and wrap it with our chat template."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(TOOL_CALL_TOKENS),
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=20,
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    tok.add_tokens(TOOL_CALL_TOKENS)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS,
        pad_token=EOS,
        chat_template=CHAT_TEMPLATE,
        model_max_length=1024,
        clean_up_tokenization_spaces=False,
    )


def render(tokenizer, example: dict, with_answer: bool) -> str:
    """One corpus example as chat text (with its tools, if any), prompt only or with the answer."""
    return tokenizer.apply_chat_template(
        make_corpus.to_messages(example, with_answer=with_answer),
        tools=example.get("tools"),
        tokenize=False,
        add_generation_prompt=not with_answer,
    )


def tokenizer_texts(corpus: list[dict]) -> list[str]:
    """The corpus as plain text for BPE training: every turn and tool list, no chat markers
    (those are special tokens)."""
    texts = []
    for ex in corpus:
        texts.append(ex["user"] + "\n" + ex["assistant"])
        texts.extend(m["content"] for m in ex.get("history", []) if m["content"])
        texts.extend(json.dumps(c["function"], ensure_ascii=False) for c in ex.get("tool_calls", []))
        texts.extend(json.dumps(t, ensure_ascii=False) for t in ex.get("tools") or [])
        if ex["system"]:
            texts.append(ex["system"])
    return texts


def encode_examples(tokenizer, corpus: list[dict], max_len: int) -> list[tuple[list[int], int]]:
    """Each example as (token ids, where its loss starts: the number of prompt tokens, or for
    an example with ``"loss_from"`` (``load_mined``) the token holding that answer character);
    too long ones are dropped."""
    out = []
    for ex in tqdm(corpus, desc="tokenize", mininterval=5, disable=len(corpus) < 1000):
        prompt = render(tokenizer, ex, with_answer=False)
        full = render(tokenizer, ex, with_answer=True)
        assert full.startswith(prompt) and full.endswith(EOS)
        p_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        encoded = tokenizer(full, add_special_tokens=False, return_offsets_mapping="loss_from" in ex)
        ids = encoded["input_ids"]
        if ids[: len(p_ids)] == p_ids and len(ids) <= max_len:
            start = len(p_ids)
            at = full.find(ex["assistant"], len(prompt)) if "loss_from" in ex else -1
            if at >= 0:  # the tokens before the one holding the missed character are context only
                miss = at + ex["loss_from"]
                start = max(start, next(j for j, (_, end) in enumerate(encoded["offset_mapping"]) if end > miss))
            out.append((ids, start))
    return out


def merge_parts(tokenizer) -> dict[int, tuple[int, int]]:
    """Each BPE token made by a merge -> the two tokens its first merge joined (the
    tokenizer's merge list; byte tokens and special tokens have none)."""
    model = json.loads(tokenizer.backend_tokenizer.to_str())["model"]
    vocab, parts = model["vocab"], {}
    for merge in model["merges"]:
        a, b = merge.split(" ") if isinstance(merge, str) else merge
        parts.setdefault(vocab[a + b], (vocab[a], vocab[b]))
    return parts


def drop_merges(ids: list[int], parts: dict[int, tuple[int, int]], p: float, rng: random.Random) -> list[int]:
    """BPE-dropout (Provilkov et al. 2020), seeded: each merge is undone with probability `p`
    (a token becomes the two it was merged from, each of which may be undone in turn), so
    a name is also seen, and written, in pieces other than its one canonical spelling: the
    model learns to copy characters it is shown, not to pick familiar tokens."""
    out: list[int] = []
    stack = list(reversed(ids))
    while stack:
        t = stack.pop()
        if t in parts and rng.random() < p:
            a, b = parts[t]
            stack += [b, a]
        else:
            out.append(t)
    return out


def with_dropout(encoded, parts, p: float, p_answer: float, seed: int) -> list[tuple[list[int], int]]:
    """`encoded` (ids, prompt length) with `drop_merges` applied to the prompt (probability
    `p`) and the answer (`p_answer`) apart (their boundary moves with the prompt's new length)."""
    rng = random.Random(seed)
    out = []
    for ids, start in encoded:
        prompt = drop_merges(ids[:start], parts, p, rng)
        out.append((prompt + drop_merges(ids[start:], parts, p_answer, rng), len(prompt)))
    return out


def length_order(encoded, rng: random.Random, sort_pool: int = 0) -> list[int]:
    """Example indices sorted by length; with ``sort_pool`` N, a random shuffle sorted by
    length within each run of N examples only. Sorting the whole epoch makes each batch one
    task (tasks differ in length: a tool list is long, a copy drill short), so the weights
    drift towards the task of the last batches; small pools mix tasks in a batch at the
    price of more padding (the bucketing of torchtext's BucketIterator)."""
    if not sort_pool:
        return sorted(range(len(encoded)), key=lambda i: len(encoded[i][0]))
    order = list(range(len(encoded)))
    rng.shuffle(order)
    return [
        i
        for start in range(0, len(order), sort_pool)
        for i in sorted(order[start : start + sort_pool], key=lambda i: len(encoded[i][0]))
    ]


def name_marks(tokenizer) -> tuple[list[int], frozenset[int]]:
    """(the tokens that open a name's value in an answer, `"name": "`; every token that
    begins with a double quote, one of which ends it) for `name_positions`."""
    # (the quote before `name` is glued to what precedes it: `{"`, `, "`)
    opening = tokenizer('"name": "', add_special_tokens=False)["input_ids"][1:]
    closing = frozenset(i for t, i in tokenizer.get_vocab().items() if t.startswith('"'))
    return opening, closing


def name_positions(seq: list[int], start: int, marks: tuple[list[int], frozenset[int]]) -> list[int]:
    """The positions of `seq`'s answer (from `start`) that hold a name's value and the token
    that closes it (`"name": "` ... `"`): where the model decides to copy on or to stop."""
    opening, closing = marks
    out, i = [], start
    while i + len(opening) <= len(seq):
        if seq[i : i + len(opening)] != opening:
            i += 1
            continue
        i += len(opening)
        while i < len(seq):
            out.append(i)
            i += 1
            if seq[i - 1] in closing:
                break
    return out


def make_batches(
    encoded, tokens_per_batch: int, pad_id: int, rng: random.Random, sort_pool: int = 0, names: tuple | None = None
):
    """Group examples of similar length into batches of about ``tokens_per_batch`` tokens
    (``sort_pool``: see ``length_order``).

    Every row is one example starting at position 0, exactly as at inference time.
    Returns a list of (input_ids [B, L], labels [B, L]); labels are -100 outside answers.
    With ``names`` (weight, `name_marks`), each batch also has weights [B, L]: the weight
    at a name's value and its closing quote (`name_positions`), 1 elsewhere.
    """
    order = length_order(encoded, rng, sort_pool)
    batches, i = [], 0
    while i < len(order):
        size = max(1, tokens_per_batch // len(encoded[order[i]][0]))
        idx = order[i : i + size]
        i += size
        width = max(len(encoded[j][0]) for j in idx)
        ids = torch.full((len(idx), width), pad_id, dtype=torch.long)
        labels = torch.full((len(idx), width), -100, dtype=torch.long)
        weights = torch.ones((len(idx), width)) if names else None
        for r, j in enumerate(idx):
            seq, n_prompt = encoded[j]
            ids[r, : len(seq)] = torch.tensor(seq)
            labels[r, n_prompt : len(seq)] = torch.tensor(seq[n_prompt:])  # answer + EOS only
            if names:
                weights[r, name_positions(seq, n_prompt, names[1])] = names[0]
        batches.append((ids, labels) if weights is None else (ids, labels, weights))
    rng.shuffle(batches)
    return batches


def answer_loss(
    model: LlamaForCausalLM, ids: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor | None = None
) -> torch.Tensor:
    """Next-token cross-entropy on the answer positions only; ids, labels (and weights, each
    label's weight in the sum, still divided by the number of labels): [B, L].

    The output projection runs only where a label exists, which saves most of its cost.
    """
    hidden = model.model(input_ids=ids).last_hidden_state  # [B, L, H]
    targets = labels[:, 1:]
    keep = targets != -100
    logits = model.lm_head(hidden[:, :-1][keep])  # [N, V]
    if weights is None:
        return torch.nn.functional.cross_entropy(logits, targets[keep])
    each = torch.nn.functional.cross_entropy(logits, targets[keep], reduction="none")
    return (each * weights[:, 1:][keep]).mean()


def expand_blocks(model: LlamaForCausalLM, layers: int) -> LlamaForCausalLM:
    """`model`, grown in place to the same function with ``layers`` decoder blocks: block expansion (LLaMA Pro, Wu et
    al. 2024). Each new block is a copy of the block before it with its two output
    projections (attention's ``o_proj``, the MLP's ``down_proj``) zeroed, so it adds nothing
    to the residual stream until training moves it: the grown model starts exactly where the
    small one ended, with more depth to learn what it could not (copying a repeated tail)."""
    old = list(model.model.layers)
    extra = layers - len(old)
    # new blocks spread evenly: after every len(old)/extra old blocks
    after = {round((i + 1) * len(old) / extra) - 1 for i in range(extra)}
    model.config.num_hidden_layers = layers
    new_layers = []
    for i, block in enumerate(old):
        new_layers.append(block)
        if i in after:
            twin = type(block)(model.config, layer_idx=0)
            twin.load_state_dict(block.state_dict())
            torch.nn.init.zeros_(twin.self_attn.o_proj.weight)
            torch.nn.init.zeros_(twin.mlp.down_proj.weight)
            new_layers.append(twin)
    for idx, block in enumerate(new_layers):
        block.self_attn.layer_idx = idx
    model.model.layers = torch.nn.ModuleList(new_layers)  # (in place: embeddings and norm stay)
    return model


def expand_width(
    model: LlamaForCausalLM, hidden: int, intermediate: int, heads: int, kv_heads: int
) -> LlamaForCausalLM:
    """A wider model with `model`'s function: hidden size ``hidden`` (more residual dimensions),
    ``heads`` attention heads of the same head size, ``intermediate`` MLP units (Net2Net-style
    function-preserving growth, Chen et al. 2016). The old weights keep their places. What
    writes into the new parts starts at zero (the embedding's new columns, the new rows and
    new-head or new-unit columns of ``o_proj`` and ``down_proj``), so they add nothing until
    training moves them; what reads the new parts is small random (q/k/v/gate/up's new rows
    and columns, a fresh model's initialisation), so the gradient reaches them. An RMSNorm
    averages over every dimension: the old dimensions' weights are scaled by sqrt(H / H2) and
    ``rms_norm_eps`` by H / H2, which gives the same normalised values (the eps matters: the
    embeddings are small, and with it unscaled stage 36's logits moved by up to 7.6). The grown
    model starts where the small one ended (up to float32 rounding), with more width for what
    it could not learn."""
    old = model.config
    head_dim = getattr(old, "head_dim", None) or old.hidden_size // old.num_attention_heads
    if heads * head_dim != hidden or heads // kv_heads != old.num_attention_heads // old.num_key_value_heads:
        raise SystemExit(
            f"growing the width keeps head_dim {head_dim} and heads per kv-head: --hidden {hidden} needs "
            f"--heads {hidden // head_dim} and --kv-heads in the ratio {old.num_attention_heads}:{old.num_key_value_heads}"
        )
    if intermediate < old.intermediate_size or hidden < old.hidden_size:
        raise SystemExit("growing the width: --hidden and --intermediate no smaller than the --init-from model's")
    config = LlamaConfig.from_dict(old.to_dict())
    config.hidden_size, config.intermediate_size, config.head_dim = hidden, intermediate, head_dim
    config.num_attention_heads, config.num_key_value_heads = heads, kv_heads
    config.rms_norm_eps = old.rms_norm_eps * old.hidden_size / hidden
    grown = LlamaForCausalLM(config)  # initialised small random; every old weight is copied over it
    small = dict(model.named_parameters())
    scale = math.sqrt(old.hidden_size / hidden)
    with torch.no_grad():
        for name, weight in grown.named_parameters():  # (a tied lm_head is the embedding)
            w = small[name]
            if name.endswith("norm.weight"):
                weight.fill_(w.abs().mean() * scale)  # new dimensions read as strongly as old ones
                w = w * scale
            elif name.endswith(("embed_tokens.weight", "o_proj.weight", "down_proj.weight")):
                weight.zero_()  # writers of the residual stream: the new parts write nothing
            weight[tuple(slice(0, n) for n in w.shape)] = w
    return grown


def lr_at(step: int, steps: int, peak: float, warmup: int) -> float:
    """Linear warm-up, then cosine decay to a tenth of the peak."""
    if step < warmup:
        return peak * (step + 1) / warmup
    t = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def main(argv: list[str] | None = None) -> None:
    """The command line (``argv``: its arguments; the process's when None)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("minisglang/assets/tiny-json-llama"))
    ap.add_argument(
        "--state",
        type=Path,
        default=Path(".cache/tiny-json-llama-train"),
        help="where checkpoints, the tokenizer and the encoded corpus are kept for --resume",
    )
    ap.add_argument("--resume", action="store_true", help="continue from the last checkpoint in --state")
    ap.add_argument(
        "--stop-after",
        type=int,
        default=None,
        help="checkpoint and exit after this step (train in several sittings; finish with --resume)",
    )
    ap.add_argument("--checkpoint-every", type=int, default=250)
    ap.add_argument("--examples", type=int, default=40000)
    ap.add_argument("--vocab-size", type=int, default=6144)
    ap.add_argument("--max-len", type=int, default=448, help="longer examples are dropped")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--tokens-per-batch", type=int, default=2048)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--intermediate", type=int, default=688)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=4)
    # The copy-first curriculum: the first --copy-steps steps train on short copy drills only
    # (make_corpus.copy_drill_example), so copying forms before the model sees long paragraphs.
    ap.add_argument("--copy-steps", type=int, default=0, help="steps of copy drills before the main corpus")
    ap.add_argument("--copy-examples", type=int, default=20000)
    ap.add_argument("--copy-tokens-per-batch", type=int, default=2048)
    ap.add_argument(
        "--copy-mix",
        type=int,
        default=0,
        help="after the copy phase, every N-th step is still a copy drill (0: none); "
        "without them the model loses half its copying once the main corpus starts",
    )
    ap.add_argument(
        "--mined",
        type=Path,
        default=None,
        help="a JSON-lines file of mined failure states (scripts/mine_failures.py) to mix into the corpus",
    )
    ap.add_argument(
        "--mined-mix",
        type=float,
        default=0.0,
        help="with --mined: every epoch's corpus gains this share of --examples drawn from the mined file",
    )
    ap.add_argument(
        "--mined-loss-from-miss",
        action="store_true",
        help="with --mined: a mined example's loss starts at its first wrong token (the answer's "
        "prefix before it, which the model already writes, is context only)",
    )
    ap.add_argument(
        "--probe-every",
        type=int,
        default=0,
        help="every N steps, print held-out copy and (unconstrained) extraction accuracy",
    )
    ap.add_argument(
        "--init-from",
        type=Path,
        default=None,
        help="a second stage: start from this checkpoint directory's weights and tokenizer "
        "(fresh optimizer and schedule) instead of from nothing; with more --layers or a larger "
        "--hidden than it has, grown deeper (expand_blocks) or wider (expand_width) first",
    )
    ap.add_argument(
        "--train-new-only",
        action="store_true",
        help="with --init-from and more --layers than it has: train only the new blocks "
        "(LLaMA Pro's recipe; the old blocks and embeddings stay as they were)",
    )
    ap.add_argument(
        "--sort-pool",
        type=int,
        default=0,
        help="sort main-corpus examples by length within random pools of N (mixes tasks in a "
        "batch; 0: sort the whole epoch)",
    )
    ap.add_argument(
        "--average-last",
        type=int,
        default=1,
        help="save the mean of the last N snapshots (every --checkpoint-every steps) as the model",
    )
    ap.add_argument(
        "--bpe-dropout",
        type=float,
        default=0.0,
        help="undo each BPE merge of the main corpus's prompts with this probability "
        "(seeded, drawn afresh every epoch; 0: canonical tokens only)",
    )
    ap.add_argument(
        "--bpe-dropout-answer",
        type=float,
        default=0.0,
        help="the same for the answers (what the model learns to write)",
    )
    ap.add_argument(
        "--name-weight",
        type=float,
        default=1.0,
        help="the loss's weight on a name's value and its closing quote in the main corpus's answers (1: as any token)",
    )
    ap.add_argument("--seed", type=int, default=0)
    # On a small machine shared with other jobs, more threads than free cores wait on each other.
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--eval-prompts", type=int, default=100)
    ap.add_argument("--device", default="cpu", help='"cuda" to train on a GPU (the result is saved for the CPU)')
    args = ap.parse_args(argv)
    train(args)


def train(args) -> None:
    """The whole recipe; with ``args.resume`` it continues from ``args.state/checkpoint.pt``."""
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    t_start = time.time()
    args.state.mkdir(parents=True, exist_ok=True)
    ckpt_path = args.state / "checkpoint.pt"
    ckpt = torch.load(ckpt_path, weights_only=False, map_location="cpu") if args.resume and ckpt_path.exists() else None
    if args.resume and ckpt is None:
        print(f"--resume: no checkpoint in {args.state}, starting from step 0")
    if ckpt is not None and {**RECIPE_DEFAULTS, **ckpt["recipe"]} != recipe(args):
        raise SystemExit(f"--resume: {ckpt_path} was made by another recipe: {ckpt['recipe']} != {recipe(args)}")

    mined = load_mined(args.mined, args.mined_loss_from_miss) if args.mined else []
    if args.mined and not (0 < args.mined_mix and mined):
        raise SystemExit("--mined needs a --mined-mix above 0 and a file with at least one example")
    corpus = epoch_corpus(args.examples, args.seed, 0, mined, args.mined_mix)
    tok_dir, enc_path = args.state / "tokenizer", args.state / "encoded.pt"
    if ckpt is not None and tok_dir.exists() and enc_path.exists():
        tokenizer = PreTrainedTokenizerFast.from_pretrained(tok_dir)
        encoded = torch.load(enc_path)
    else:
        # a second stage keeps the tokenizer its starting weights were trained with
        tokenizer = (
            PreTrainedTokenizerFast.from_pretrained(args.init_from)
            if args.init_from
            else train_tokenizer(tokenizer_texts(corpus), args.vocab_size)
        )
        encoded = encode_examples(tokenizer, corpus, max_len=args.max_len)
        tokenizer.save_pretrained(tok_dir)
        torch.save(encoded, enc_path)
    eos_id = tokenizer.convert_tokens_to_ids(EOS)
    parts = merge_parts(tokenizer) if args.bpe_dropout or args.bpe_dropout_answer else {}
    drills = []
    if args.copy_steps or args.copy_mix:
        drill_path = args.state / "encoded-copy.pt"
        if ckpt is not None and drill_path.exists():
            drills = torch.load(drill_path)
        else:
            drills = encode_examples(tokenizer, make_corpus.copy_drill_corpus(args.copy_examples, args.seed), 128)
            torch.save(drills, drill_path)
        print(f"copy drills: {len(drills)} examples, {sum(len(ids) for ids, _ in drills)} tokens")
    probes = make_probes(corpus, args.seed) if args.probe_every else None
    n_tokens = sum(len(ids) for ids, _ in encoded)
    n_answer = sum(len(ids) - p for ids, p in encoded)
    print(f"corpus: {len(corpus)} examples, {len(encoded)} kept, {n_tokens} tokens ({n_answer} in answers)")

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=args.hidden,
        intermediate_size=args.intermediate,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        max_position_embeddings=1024,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        bos_token_id=eos_id,
        eos_token_id=eos_id,
        pad_token_id=eos_id,
    )
    # initialised on the CPU, so the same seed gives the same start anywhere; the optimizer
    # state loaded below follows the parameters to the device
    model = LlamaForCausalLM.from_pretrained(args.init_from) if args.init_from else LlamaForCausalLM(config)
    if args.init_from and args.hidden > model.config.hidden_size:
        if args.train_new_only:
            raise SystemExit("--train-new-only trains new blocks only, not a wider model")
        model = expand_width(model, args.hidden, args.intermediate, args.heads, args.kv_heads)
    if args.init_from and args.layers > model.config.num_hidden_layers:
        old_blocks = set(map(id, model.model.layers))
        model = expand_blocks(model, args.layers)
        if args.train_new_only:
            for p in model.parameters():
                p.requires_grad_(False)
            for block in model.model.layers:
                if id(block) not in old_blocks:
                    block.requires_grad_(True)
    elif args.train_new_only:
        raise SystemExit("--train-new-only needs --init-from and more --layers than its model has")
    model = model.float().to(args.device)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params / 1e6:.2f}M parameters")
    trained = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in trained if p.dim() >= 2]
    no_decay = [p for p in trained if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr,
        betas=(0.9, 0.95),
    )
    start_step, losses, train_seconds = 0, [], 0.0
    if ckpt is not None:
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["opt"])
        start_step, losses, train_seconds = ckpt["step"], ckpt["losses"], ckpt["train_seconds"]
        print(f"resumed at step {start_step} ({train_seconds / 60:.1f} minutes of training so far)")

    # The batches of epoch e are a function of (seed, e) only, so a resumed run sees the
    # same batches in the same order as an uninterrupted one.
    per_epoch = len(make_batches(encoded, args.tokens_per_batch, eos_id, random.Random(0), args.sort_pool))
    drill_per_epoch = len(make_batches(drills, args.copy_tokens_per_batch, eos_id, random.Random(0))) if drills else 1
    epoch, batches, drill_epoch, drill_batches = -1, [], -1, []
    names = (args.name_weight, name_marks(tokenizer)) if args.name_weight != 1.0 else None  # (--name-weight)
    model.train()
    t_train = time.time() - train_seconds
    bar = tqdm(range(start_step, args.steps), desc="train", mininterval=10, initial=start_step, total=args.steps)
    for step in bar:
        source, i = batch_source(step, args.copy_steps, args.copy_mix)
        if source == "drill":
            if i // drill_per_epoch != drill_epoch:
                drill_epoch = i // drill_per_epoch
                drill_batches = make_batches(
                    drills, args.copy_tokens_per_batch, eos_id, random.Random(args.seed * 100019 + drill_epoch)
                )
            batch = drill_batches[i % drill_per_epoch]
        else:
            main_step = i
            if main_step // per_epoch != epoch:
                epoch = main_step // per_epoch
                examples = (
                    encoded
                    if epoch == 0
                    else encode_examples(
                        tokenizer, epoch_corpus(args.examples, args.seed, epoch, mined, args.mined_mix), args.max_len
                    )
                )
                if parts:  # (--bpe-dropout or --bpe-dropout-answer)
                    examples = with_dropout(
                        examples, parts, args.bpe_dropout, args.bpe_dropout_answer, args.seed * 100043 + epoch
                    )
                batches = make_batches(
                    examples,
                    args.tokens_per_batch,
                    eos_id,
                    random.Random(args.seed * 100003 + epoch),
                    args.sort_pool,
                    names,
                )
            # a fresh epoch may make a few batches more or fewer than epoch 0: the step
            # count of an epoch stays per_epoch, so a resumed run takes the same batches
            batch = batches[main_step % per_epoch % len(batches)]
        ids, labels, *weights = (t.to(args.device) for t in batch)
        for group in opt.param_groups:
            group["lr"] = lr_at(step, args.steps, args.lr, warmup=max(1, args.steps // 20))
        loss = answer_loss(model, ids, labels, weights[0] if weights else None)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        bar.set_postfix(loss=f"{sum(losses[-50:]) / len(losses[-50:]):.3f}", epoch=epoch)
        done = step + 1
        if args.probe_every and done % args.probe_every == 0:
            print(
                f"probe step {done} loss {sum(losses[-50:]) / len(losses[-50:]):.3f} "
                f"{time.time() - t_train:.0f}s: {run_probes(model, tokenizer, probes, args.device)}",
                flush=True,
            )
        if done % args.checkpoint_every == 0 or done == args.steps or done == args.stop_after:
            save_checkpoint(args, model, opt, tokenizer, done, losses, time.time() - t_train)
        if done == args.stop_after:
            print(f"stopped after step {done}; continue with the same command and --resume")
            return
    train_minutes = (time.time() - t_train) / 60
    final_loss = sum(losses[-50:]) / len(losses[-50:])

    if args.average_last > 1:
        model.load_state_dict(average_snapshots(args.state, args.steps, args.checkpoint_every, args.average_last))
    save_hf(model, tokenizer, args.out)
    json_rate = eval_json_rate.json_valid_rate(args.out, corpus, n_prompts=args.eval_prompts)
    report = eval_extraction.run(args.out, args.eval_prompts * 2, args.eval_prompts, args.examples, args.seed)
    (args.state / "eval.json").write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    print(eval_extraction.summary(report))
    total_minutes = (time.time() - t_start) / 60
    write_model_card(
        args,
        corpus,
        encoded,
        n_tokens,
        n_answer,
        n_params,
        len(tokenizer),
        train_minutes,
        total_minutes,
        final_loss,
        json_rate,
        report,
    )
    print(f"valid JSON rate: {json_rate['valid']}/{json_rate['n']}; card written to {args.out / 'MODEL_CARD.md'}")


def average_snapshots(state: Path, steps: int, every: int, n: int) -> dict[str, torch.Tensor]:
    """The mean of the weights of the last ``n`` snapshots ``state/step-K`` (K = steps,
    steps - every, ...). Batches group examples of similar length, so the last few batches
    before any one step pull the model towards one kind of task; the mean of nearby
    snapshots (checkpoint averaging, as in stochastic weight averaging) cancels that drift."""
    from safetensors.torch import load_file

    dirs = [state / f"step-{steps - i * every}" for i in range(n)]
    missing = [str(d) for d in dirs if not (d / "model.safetensors").exists()]
    if missing:
        raise SystemExit(f"--average-last {n}: no snapshot in {', '.join(missing)}")
    weights = [load_file(d / "model.safetensors") for d in dirs]
    mean = {k: sum(w[k] for w in weights) / n for k in weights[0]}
    mean["lm_head.weight"] = mean["model.embed_tokens.weight"]  # tied; safetensors stores one of them
    return mean


def epoch_corpus(
    n_examples: int, seed: int, epoch: int, mined: list[dict] | None = None, mined_mix: float = 0.0
) -> list[dict]:
    """The main corpus of one training epoch: epoch 0 is ``make_corpus(n_examples, seed)``
    (the tokenizer is trained on it and the held-out prompts are checked against it), every
    later epoch a corpus of its own seed. No example repeats, so the model cannot memorise
    answers and must learn to copy them (with one 20,000-example corpus repeated, the
    training loss fell when the second epoch began while held-out accuracy fell with it).
    With ``mined`` (scripts/mine_failures.py: training examples the starting model answers
    wrong) and ``mined_mix`` R, the corpus gains R * ``n_examples`` of them: ``mined_share``."""
    corpus = make_corpus.make_corpus(n_examples, seed if epoch == 0 else seed * 1_000_003 + epoch)
    return corpus + mined_share(mined, round(mined_mix * n_examples), seed, epoch) if mined else corpus


def load_mined(path: Path, loss_from_miss: bool = False) -> list[dict]:
    """The mined examples of a scripts/mine_failures.py file (its ``"mined"`` records dropped).
    With ``loss_from_miss``, each keeps ``"loss_from"``: the character of its ``assistant`` text
    where the starting model first went wrong (``encode_examples`` starts its loss there)."""
    with open(path, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    out = []
    for row in rows:
        example = {k: v for k, v in row.items() if k != "mined"}
        if loss_from_miss and "mined" in row:
            # `at` counts in the unfenced answer; the fence (when there is one) comes before it
            start = example["assistant"].find(make_corpus.unfence(example["assistant"]))
            if start >= 0:
                example["loss_from"] = start + row["mined"]["at"]
        out.append(example)
    return out


def mined_share(mined: list[dict], n: int, seed: int, epoch: int) -> list[dict]:
    """Epoch ``epoch``'s ``n`` mined examples: the pool in one seeded order, taken in turn, so
    that no example repeats before the whole pool has been used."""
    if not mined or n <= 0:
        return []
    order = list(range(len(mined)))
    random.Random(seed * 7919 + 17).shuffle(order)
    start = epoch * n
    return [mined[order[(start + i) % len(order)]] for i in range(n)]


def batch_source(step: int, copy_steps: int, copy_mix: int) -> tuple[str, int]:
    """Which batch training step ``step`` takes: ("drill", i) for the i-th copy-drill batch or
    ("main", i) for the i-th batch of the main corpus. The first ``copy_steps`` steps are
    drills; after them every ``copy_mix``-th step is (if ``copy_mix``)."""
    if step < copy_steps:
        return "drill", step
    k = step - copy_steps
    if copy_mix and k % copy_mix == copy_mix - 1:
        return "drill", copy_steps + k // copy_mix
    return "main", k - (k // copy_mix if copy_mix else 0)


def make_probes(corpus: list[dict], seed: int, n: int = 24) -> dict:
    """Held-out examples to watch during training: copy drills and extraction prompts with
    names never trained on (copy probes use names from the held-out pool)."""
    rng = random.Random(seed + 777)
    return {
        "copy": [make_corpus.copy_drill_example(rng, held_out=True) for _ in range(n)],
        "extract": make_corpus.heldout_extraction_prompts(n, corpus, seed=seed + 778),
    }


@torch.no_grad()
def greedy(model, tokenizer, example: dict, device: str, max_new_tokens: int = 64) -> str:
    """The model's greedy answer to one example's prompt (unconstrained, stops at EOS)."""
    ids = tokenizer(render(tokenizer, example, with_answer=False), add_special_tokens=False, return_tensors="pt")[
        "input_ids"
    ].to(device)
    eos = tokenizer.convert_tokens_to_ids(EOS)
    out = model.generate(ids, max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=eos, pad_token_id=eos)
    return tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)


@torch.no_grad()
def answer_token_accuracy(model, tokenizer, examples: list[dict], device: str) -> float:
    """The share of answer tokens the model predicts right given the reference answer so far
    (teacher forcing): a copy skill that is half formed shows here long before whole answers
    come out right."""
    right = total = 0
    for ids, n_prompt in encode_examples(tokenizer, examples, max_len=10**6):
        logits = model(torch.tensor([ids], device=device)).logits[0, n_prompt - 1 : -1]  # [answer, V]
        right += (logits.argmax(-1).cpu() == torch.tensor(ids[n_prompt:])).sum().item()
        total += len(ids) - n_prompt
    return right / total


def run_probes(model, tokenizer, probes: dict, device: str) -> str:
    """Held-out copy token accuracy and exact-match rate, and unconstrained extraction field
    accuracy, as text."""
    model.eval()
    token_acc = answer_token_accuracy(model, tokenizer, probes["copy"], device)
    copy_ok = sum(greedy(model, tokenizer, ex, device) == ex["assistant"] for ex in probes["copy"])
    outputs = [greedy(model, tokenizer, ex, device, 96) for ex in probes["extract"]]
    model.train()
    acc = eval_extraction.score_extraction(probes["extract"], outputs)["accuracy"]
    return (
        f"copy tokens {token_acc:.0%}, copy exact {copy_ok}/{len(probes['copy'])}, extraction name {acc.get('name', 0):.0%} "
        f"age {acc.get('age', 0):.0%} hobbies {acc.get('hobbies', 0):.0%} all {acc.get('all', 0):.0%}"
    )


# Options added after checkpoints were made: such a checkpoint was made with this value.
RECIPE_DEFAULTS = {
    "sort_pool": 0,
    "train_new_only": False,
    "mined": None,
    "mined_mix": 0.0,
    "mined_loss_from_miss": False,
    "name_weight": 1.0,
}


def recipe(args) -> dict:
    """The options a checkpoint must agree on to be resumed (everything but paths and threads)."""
    skip = {
        "out",
        "state",
        "resume",
        "stop_after",
        "checkpoint_every",
        "threads",
        "eval_prompts",
        "device",
        "probe_every",
        "average_last",
    }
    return {k: v for k, v in vars(args).items() if k not in skip}


def save_checkpoint(args, model, opt, tokenizer, step: int, losses: list[float], train_seconds: float) -> None:
    """Everything --resume needs (written to a temporary file, then renamed, so a kill
    mid-write leaves the previous checkpoint intact), plus a loadable snapshot
    ``state/step-N`` for evaluating the run while it trains."""
    tmp = args.state / "checkpoint.pt.tmp"
    torch.save(
        {
            "step": step,
            "model": model.state_dict(),
            "opt": opt.state_dict(),
            "losses": losses,
            "train_seconds": train_seconds,
            "recipe": recipe(args),
        },
        tmp,
    )
    tmp.replace(args.state / "checkpoint.pt")
    save_hf(model, tokenizer, args.state / f"step-{step}")
    model.to(args.device).train()


def save_hf(model, tokenizer, out: Path) -> None:
    """A standard Hugging Face checkpoint directory: config, safetensors, tokenizer, greedy generation config."""
    out.mkdir(parents=True, exist_ok=True)
    model.eval()
    model.to("cpu")
    model.save_pretrained(out, safe_serialization=True)
    model.generation_config.do_sample = False
    model.generation_config.save_pretrained(out)
    tokenizer.save_pretrained(out)
    fix_tokenizer_config(out)


def fix_tokenizer_config(out: Path) -> None:
    """Keep the chat template and special tokens inside tokenizer_config.json, where every
    loader looks for them, and drop the side files newer transformers versions also write."""
    for extra in ("chat_template.jinja", "special_tokens_map.json"):
        (out / extra).unlink(missing_ok=True)
    cfg_path = out / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg.pop("backend", None)
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"  # the name every transformers version knows
    cfg["chat_template"] = CHAT_TEMPLATE
    cfg["eos_token"] = EOS
    cfg["pad_token"] = EOS
    cfg_path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")


def write_model_card(
    args,
    corpus,
    encoded,
    n_tokens,
    n_answer,
    n_params,
    vocab,
    train_minutes,
    total_minutes,
    final_loss,
    json_rate,
    report,
) -> None:
    from collections import Counter

    mix = Counter(ex["task"] for ex in corpus)
    mix_lines = "\n".join(f"| {task} | {count} |" for task, count in mix.most_common())
    size_mb = (args.out / "model.safetensors").stat().st_size / 1e6
    ext = report["extraction"]

    def field_row(mode: str) -> str:
        r = ext[mode]
        acc = r["accuracy"]
        cells = [
            f"{acc.get(g, 0):.1%}" for g in ("headline", "en:headline", "zh:headline", "name", "age", "hobbies", "all")
        ]
        return f"| {mode} | {r['valid']}/{r['n']} | " + " | ".join(cells) + f" | {r['exact']}/{r['n']} |"

    tool_rows = ""
    if "tools" in report:
        kinds = list(report["tools"]["constrained"]["counts"])
        tool_rows = (
            "| | "
            + " | ".join(kinds)
            + " |\n|---|"
            + "---|" * len(kinds)
            + "\n"
            + "\n".join(
                f"| {mode} | "
                + " | ".join("{}/{}".format(*report["tools"][mode]["counts"].get(k, [0, 0])) for k in kinds)
                + " |"
                for mode in ("constrained", "unconstrained")
            )
        )
    samples = "\n".join(f"- `{text}` -> `{out}`" for text, out in ext["constrained"]["samples"][:4])
    card = f"""# tiny-json-llama

A {n_params / 1e6:.2f}M-parameter Llama-architecture model trained from scratch by
`scripts/train_tiny_model.py` on a synthetic corpus of JSON extraction, tool calls and
other small chat tasks (English and Chinese). It exists so that minisglang runs offline,
so that constrained decoding visibly matters (its unconstrained answers to loosely worded
requests are sometimes wrapped in a markdown fence, which is not valid JSON) and so that
the course can measure accuracy beside validity: it copies names, numbers and lists from
the text it is given, including names it has never seen.

## Reproduce
```
.venv/bin/python scripts/train_tiny_model.py --out minisglang/assets/tiny-json-llama \\
    --state .cache/tiny-json-llama-train --examples {args.examples} --steps {args.steps} \\
    --tokens-per-batch {args.tokens_per_batch} --checkpoint-every {args.checkpoint_every} --max-len {args.max_len} \\
    --copy-steps {args.copy_steps} --copy-mix {args.copy_mix} --copy-examples {args.copy_examples} \\
    --copy-tokens-per-batch {args.copy_tokens_per_batch} --lr {args.lr} --layers {args.layers} \\
    --hidden {args.hidden} --intermediate {args.intermediate} --heads {args.heads} --kv-heads {args.kv_heads} \\
    --vocab-size {args.vocab_size} --seed {args.seed} --threads {args.threads} \\
    --average-last {args.average_last}{f" --init-from {args.init_from}" if args.init_from else ""}
```
It writes a checkpoint to `--state` every {args.checkpoint_every} steps (plus a loadable
snapshot `step-N/`); after an interruption, run the same command with `--resume`.
Seeded (corpus, tokenizer, initialisation, batch order per epoch); CPU float32 kernels can
still differ slightly between machines and thread counts.

## Corpus (scripts/make_corpus.py, seed {args.seed})
The names `make_corpus.X` in this card are scripts/make_corpus.py's; its imports say which
module of the package scripts/corpus/ holds each.
Every epoch is a fresh corpus of {len(corpus)} chat examples (`epoch_corpus`: epoch 0 is seed
{args.seed}, each later epoch its own seed), so no example is ever seen twice and answers cannot
be memorised. Epoch 0: {len(encoded)} examples kept under {args.max_len} tokens, {n_tokens} tokens of which
{n_answer} are answer tokens (the loss is on the final answer and its closing `<|endoftext|>` only).
Before the main corpus, {args.copy_steps} steps of copy drills (`make_corpus.copy_drill_corpus`:
2-6 generated names, words, numbers and e-mails repeated verbatim, and {make_corpus.NUMERAL_DRILL_SHARE:.0%}
Chinese-numeral ages to convert, 三十五 -> 35; {args.copy_examples} of them), and after
them every {args.copy_mix}th step is still a drill, so the copying mechanism forms first and stays.

- Extraction: a paragraph mentions 3 to 8 facts about a person; the request asks for
  some of them (the others are distractors). Answers use the keys
  `{", ".join(make_corpus.KEY_ORDER)}`, always in that order. Names are generated (syllables such
  as "Velorin Kasumar", or a surname and 1-2 given characters from a few hundred, {make_corpus.NUMERAL_NAME_SHARE:.0%}
  of them with a numeral such as 李四), cities
  partly generated, ages 18-90 (in Chinese also as numerals: 三十五岁), so they must be
  copied, not remembered. One name in ten (by hash) and some phrasings of every fact and
  instruction are never trained on: the evaluation uses only those. The demo's texts and
  names (`make_corpus.DEMO_NAMES`) never occur.
- Strict requests ("JSON only") get bare JSON; {make_corpus.FENCE_PROBABILITY:.0%} of the answers to
  loosely worded ones ("... as JSON") are wrapped in a markdown ```json fence.
- Tool calls: 1-5 tools (from {len(make_corpus.TOOL_FAMILIES)} families, with varied names, sometimes a
  generated prefix, and varied parameter names) in the system turn; the answer is
  `<tool_call>{{"name": ..., "arguments": {{...}}}}</tool_call>` with arguments copied from the
  request, sometimes two calls, a plain answer when no tool fits, or, after a `<|tool|>`
  result, a reply that uses it. {make_corpus.TOOL_ECHO_REQUESTS:.0%} of training requests use the called tool's own
  description or name (held-out requests never do).

| task | examples |
|---|---|
{mix_lines}

## Tokenizer
Byte-level BPE trained with `tokenizers`, {vocab} tokens. Pre-tokenization is GPT-2's split
except that a punctuation run may contain single spaces (so JSON glue such as `":`, `": "`
and `", "` are single tokens) and every Chinese character is its own piece (so a name is
the same tokens in the paragraph and in the answer). Special tokens: `<|endoftext|>` (EOS
and padding), `<|system|>`, `<|user|>`, `<|assistant|>`, `<|tool|>`; `<tool_call>` and
`</tool_call>` are ordinary added tokens (one token each, spelled as text).

Chat template (in tokenizer_config.json): `<|system|>\\n...\\n<|user|>\\n...\\n<|assistant|>\\n`,
an assistant turn ends with `<|endoftext|>`, a tool result is `<|tool|>\\n...\\n`. With
`tools`, the system turn (created if absent) ends with
`# Tools` / `To call a tool, answer with <tool_call>{{"name": NAME, "arguments": ARGS}}</tool_call>.` /
`<tools>`, one tool JSON per line, `</tools>`; an assistant message's `tool_calls` are
written `<tool_call>{{"name": "f", "arguments": {{...}}}}</tool_call>` after its content.

## Architecture
LlamaForCausalLM: hidden {args.hidden}, {args.layers} layers, {args.heads} attention heads,
{args.kv_heads} KV heads, intermediate {args.intermediate}, SwiGLU, RMSNorm (eps 1e-5), RoPE theta 10000,
max positions 1024, tied input/output embeddings. {n_params:,} parameters, float32,
model.safetensors {size_mb:.1f} MB.

## Training
AdamW (betas 0.9/0.95, weight decay 0.1), peak learning rate {args.lr}, linear warm-up then
cosine decay to 10%, {args.steps} steps of about {args.tokens_per_batch} tokens (examples of
similar length batched together), gradient clipping 1.0. torch {torch.__version__},
{args.threads} CPU thread ({platform.processor() or platform.machine()}, a 2-core machine shared with
other jobs, run with `nice`). Training took {train_minutes:.1f} minutes of wall time ({args.steps} steps);
final training loss (mean of the last 50 steps) {final_loss:.3f}.

## Accuracy on held-out texts (scripts/eval_extraction.py)
{ext["constrained"]["n"]} held-out extraction prompts (names and phrasings never trained on), greedy, through
minisglang's Engine. Constrained: a JSON Schema with exactly the asked keys. A field is
right when it equals the reference exactly (lists: same items, same order).
"name/age/hobbies" is the accuracy over those three fields wherever asked.

| decoding | valid JSON | name/age/hobbies | English | Chinese | name | age | hobbies | all fields | whole answer exact |
|---|---|---|---|---|---|---|---|---|---|
{field_row("constrained")}
{field_row("unconstrained")}

Tool calls on {report.get("tools", {}).get("constrained", {}).get("n", 0)} held-out conversations (request phrasings and names never
trained on), constrained by the structural tag of `tool_choice="auto"` or not:

{tool_rows}

## Valid-JSON rate (scripts/eval_json_rate.py)
On {json_rate["n"]} held-out extraction prompts (seed {json_rate["seed"]}), greedy decoding with `transformers`
`generate`, max_new_tokens {json_rate["max_new_tokens"]}: **{json_rate["valid"]}/{json_rate["n"]} answers are valid JSON
objects**; {json_rate["exact"]}/{json_rate["n"]} equal the reference answer exactly, and {json_rate["fenced"]} of the
invalid ones are a JSON object wrapped in a markdown ```json fence.

## Limitations
A teaching prop, not an extraction model: it knows only the phrasings, fact types and
tools of its corpus; outside them it still answers in the right shape, often wrongly.

Some constrained answers on held-out texts:
{samples}
"""
    (args.out / "MODEL_CARD.md").write_text(card, encoding="utf-8")


if __name__ == "__main__":
    main()
