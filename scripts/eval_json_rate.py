"""Measure how often the model's greedy, unconstrained answer is a valid JSON object.

The prompts are held-out extraction examples (drawn with another seed than the corpus and
checked not to occur in it); the answers come from `transformers`' own `generate`, greedy.

Usage:
    python scripts/eval_json_rate.py --model minisglang/assets/tiny-json-llama --n 100
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from tqdm import tqdm
from transformers import AutoTokenizer, LlamaForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_corpus  # noqa: E402

HELDOUT_SEED = 12345


def is_json_object(text: str) -> bool:
    """True when ``text`` parses as JSON and the value is an object."""
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def is_fenced_json_object(text: str) -> bool:
    """True when ``text`` is a JSON object wrapped in a markdown ```json fence."""
    inner = make_corpus.unfence(text)
    return inner != text and is_json_object(inner)


@torch.no_grad()
def json_valid_rate(
    model_dir: Path, train_corpus: list[dict], n_prompts: int = 100, max_new_tokens: int = 128, seed: int = HELDOUT_SEED
) -> dict:
    """Greedy-decode ``n_prompts`` held-out extraction prompts and count valid JSON objects.

    Returns {"n", "valid", "exact", "fenced", "seed", "max_new_tokens", "samples": [(text, ok), ...]};
    "fenced" counts the invalid answers that are a JSON object inside a markdown fence.
    """
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    prompts = make_corpus.heldout_extraction_prompts(n_prompts, train_corpus, seed)
    valid = exact = fenced = 0
    samples = []
    for ex in tqdm(prompts, desc="eval", mininterval=5):
        # one prompt at a time: no padding, so this is exactly what a serving engine computes
        ids = tokenizer.apply_chat_template(
            make_corpus.to_messages(ex, with_answer=False),
            add_generation_prompt=True,
            return_tensors="pt",
            return_dict=True,
        )
        out = model.generate(**ids, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tokenizer.eos_token_id)
        text = tokenizer.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)
        ok = is_json_object(text)
        valid += ok
        fenced += is_fenced_json_object(text)
        reference = make_corpus.unfence(ex["assistant"])
        exact += ok and json.loads(text) == json.loads(reference)
        if len(samples) < 8:
            samples.append((text, ok))
    return {
        "n": n_prompts,
        "valid": valid,
        "exact": exact,
        "fenced": fenced,
        "seed": seed,
        "max_new_tokens": max_new_tokens,
        "samples": samples,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=Path("minisglang/assets/tiny-json-llama"))
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument(
        "--examples",
        type=int,
        default=20000,
        help="corpus size whose user turns are excluded (the model card's evaluations: 20000)",
    )
    ap.add_argument("--seed", type=int, default=1, help="seed of that corpus (the model card's evaluations: 1)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    result = json_valid_rate(args.model, make_corpus.make_corpus(args.examples, args.seed), args.n)
    for text, ok in result["samples"]:
        print("valid  " if ok else "INVALID", text)
    print(
        f"valid JSON objects: {result['valid']}/{result['n']}, exact answers: {result['exact']}/{result['n']}, "
        f"fenced (invalid only because of a markdown fence): {result['fenced']}/{result['n']}"
    )


if __name__ == "__main__":
    main()
