"""Find the states where a model's greedy answer first goes wrong on *training* texts, so a next
stage can train on them (issue 33: "train on the model's own failure states").

The texts are training extraction examples (``make_corpus.make_corpus`` with seeds of their own,
far from any training run's: training generators and openers only, never
``name_generators.HELD_OUT_GENERATORS``, ``EN_GENERALISATION_OPENERS`` or the held-out sets).
Greedy decoding follows the right answer up to its first wrong token, so one teacher-forced
forward pass over prompt + right answer finds that token: the first answer position whose argmax
is not the answer's token. Only value positions count (inside a string value, its closing quote,
an integer's digits and the character after them), where a JSON-schema constraint leaves the
choice to the model; and a prediction that spells the same text in other tokens (`Thai`+`ten`
for `Tha`+`iten`), or one that ends a value where the answer ends it too, is no miss. (The
engine, schema-constrained, agrees with this on the texts checked: ``--check N``.)

Each miss is kept as the example (its right answer, fenced as the corpus wrote it) plus
``"mined"``: where the answer first goes wrong (``at``, a character offset in the unfenced
answer), the token wanted and the token predicted, and the kind: ``over`` (a value copied on
past its end: the repeat loops of issue 33), ``short`` (a value ended early), ``wrong``
(another token inside a value). scripts/train_tiny_model.py mixes them into its corpus
(``--mined FILE --mined-mix R``).

Usage:
    python scripts/mine_failures.py --model training/candidates/issue33-stage36 --examples 40000 \
        --out .cache/mined/stage36.jsonl [--check 200]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_corpus  # noqa: E402
import name_generators  # noqa: E402

# Mining corpora's seeds: far from any stage's training seeds (< 1,000, and seed * 1,000,003 + epoch).
MINE_SEED_BASE = 777_000_000_000
EXTRACTION_TASKS = ("extract_person", "extract_long")


def mining_examples(n: int, seed: int, repeat_names: bool = False) -> list[dict]:
    """The extraction examples among ``n`` training examples of the mining seed ``seed``; with
    ``repeat_names``, each with its person's name swapped for one with a repeated piece
    (``with_repeated_name``; those that cannot be swapped are left out)."""
    corpus = make_corpus.make_corpus(n, MINE_SEED_BASE + seed)
    examples = [ex for ex in corpus if ex.get("task") in EXTRACTION_TASKS and not ex.get("tools")]
    if repeat_names:
        rng = random.Random(MINE_SEED_BASE + seed + 1)
        swapped = (with_repeated_name(ex, rng) for ex in examples)
        examples = [ex for ex in swapped if ex is not None]
    return examples


_REPEAT_EN = re.compile(r"([a-z]{2,})\1", re.IGNORECASE)


def has_repeat(name: str) -> bool:
    """A name with a piece written twice in a row: letters (`Penpenja`, `Zairzairzairshy`) or a
    Chinese character (张婷婷玉)."""
    return bool(_REPEAT_EN.search(name)) or any(a == b and "\u4e00" <= a <= "\u9fff" for a, b in zip(name, name[1:]))


def repeated_name(rng: random.Random, zh: bool) -> str:
    """A training name (the corpus's own generators) that has a repeated piece and no held-out
    generator's signature, drawn again until it has."""
    from corpus.values import person_name

    while True:
        name = person_name(rng, zh, held_out=False)
        if has_repeat(name) and '"' not in name:
            return name


def with_repeated_name(ex: dict, rng: random.Random) -> dict | None:
    """The example with its person's name, wherever the text and the answer write it, swapped for
    a training name with a repeated piece (``repeated_name``); None when the name cannot be
    swapped cleanly (absent, quoted, or part of a longer word)."""
    try:
        ref = json.loads(make_corpus.unfence(ex["assistant"]))
    except ValueError:
        return None
    name = ref.get("name") if isinstance(ref, dict) else None
    if not isinstance(name, str) or len(name) < 2 or '"' in name or "\\" in name:
        return None
    zh = bool(re.search(r"[\u4e00-\u9fff]", name))
    bound = "" if zh else r"(?<![A-Za-z])"
    end = "" if zh else r"(?![A-Za-z])"
    pattern = re.compile(bound + re.escape(name) + end)
    if not pattern.search(ex["user"]) or ex["user"].count(name) != len(pattern.findall(ex["user"])):
        return None
    new = repeated_name(rng, zh)
    answer = ex["assistant"].replace(json.dumps(name, ensure_ascii=False), json.dumps(new, ensure_ascii=False))
    out = {**ex, "user": pattern.sub(lambda _: new, ex["user"]), "assistant": answer}
    if json.loads(make_corpus.unfence(answer)).get("name") != new:
        return None
    return out


def value_labels(answer: str) -> list[bool]:
    """For each character of the JSON ``answer``: whether it belongs to a value (a string value's
    characters and its closing quote, a number's characters and the one character after them);
    keys, braces, colons and separators are structure, which a schema constraint decides."""
    labels = [False] * len(answer)
    stack: list[str] = []  # "{" or "["
    expect_key = False
    i = 0
    while i < len(answer):
        ch = answer[i]
        if ch == '"':
            is_value = not (stack and stack[-1] == "{" and expect_key)
            j = i + 1
            while j < len(answer) and answer[j] != '"':
                j += 2 if answer[j] == "\\" else 1
            if is_value:
                for k in range(i + 1, min(j + 1, len(answer))):
                    labels[k] = True
            i = j + 1
            continue
        if ch in "-0123456789" and not expect_key:
            j = i
            while j < len(answer) and answer[j] in "-+.eE0123456789":
                j += 1
            for k in range(i, min(j + 1, len(answer))):
                labels[k] = True
            i = j
            continue
        if ch in "{[":
            stack.append(ch)
            expect_key = ch == "{"
        elif ch in "}]":
            if stack:
                stack.pop()
            expect_key = False
        elif ch == ",":
            expect_key = bool(stack) and stack[-1] == "{"
        elif ch == ":":
            expect_key = False
        i += 1
    return labels


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet, inverted: a token's characters -> its bytes."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


BYTE_DECODER = _byte_decoder()


def token_bytes(tokenizer, token_id: int) -> bytes:
    """The bytes a token spells (a special or added token: its text)."""
    tok = tokenizer.convert_ids_to_tokens(token_id)
    if tok in tokenizer.all_special_tokens or any(ch not in BYTE_DECODER for ch in tok):
        return tok.encode("utf-8")
    return bytes(BYTE_DECODER[ch] for ch in tok)


def first_miss(tokenizer, answer: str, answer_ids: list[int], predicted: list[int]) -> dict | None:
    """The first value position where the greedy prediction leaves the (unfenced) ``answer``:
    ``answer_ids`` are its tokens (then EOS), ``predicted[j]`` the argmax before token j."""
    labels = value_labels(answer)
    raw = answer.encode("utf-8")
    byte_label: list[bool] = []
    for ch, lab in zip(answer, labels):
        byte_label += [lab] * len(ch.encode("utf-8"))
    pos = 0
    for j, (want, got) in enumerate(zip(answer_ids, predicted)):
        want_b = token_bytes(tokenizer, want)
        if pos >= len(raw):
            break
        if want != got and byte_label[pos]:
            got_b = token_bytes(tokenizer, got)
            rest = raw[pos:]
            same_text = rest.startswith(got_b) and len(got_b) > 0
            want_ends = want_b[:1] in (b'"', b",", b"}", b"]")
            got_ends = got_b[:1] in (b'"', b",", b"}", b"]")
            if not same_text and not (want_ends and got_ends):
                kind = "over" if want_ends else ("short" if got_ends else "wrong")
                at = len(raw[:pos].decode("utf-8", errors="ignore"))
                keys = re.findall(r'"(\w+)": ', answer[:at])
                return {
                    "at": at,
                    "key": keys[-1] if keys else None,
                    "token": j,
                    "want": want_b.decode("utf-8", errors="replace"),
                    "got": got_b.decode("utf-8", errors="replace"),
                    "kind": kind,
                }
        pos += len(want_b)
    return None


def mine(
    model_dir: Path, examples: list[dict], fields: list[str] | None = None, batch_tokens: int = 8192
) -> list[dict]:
    """The examples whose greedy answer goes wrong at a value (of one of ``fields``, when given),
    each with its ``"mined"`` record."""
    import torch
    import train_tiny_model
    from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

    torch.set_num_threads(1)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(model_dir)
    model = LlamaForCausalLM.from_pretrained(model_dir).float().eval()
    views = [{**ex, "assistant": make_corpus.unfence(ex["assistant"])} for ex in examples]
    keep = []
    for ex, view in zip(examples, views):
        try:
            json.loads(view["assistant"])
        except ValueError:
            continue
        keep.append((ex, view))
    encoded, kept = [], []
    for ex, view in keep:
        prompt = train_tiny_model.render(tokenizer, view, with_answer=False)
        full = train_tiny_model.render(tokenizer, view, with_answer=True)
        p_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        ids = tokenizer(full, add_special_tokens=False)["input_ids"]
        if ids[: len(p_ids)] == p_ids and len(ids) <= 1024:
            encoded.append((ids, len(p_ids)))
            kept.append((ex, view))
    keep = kept
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i][0]))
    pad = tokenizer.convert_tokens_to_ids(train_tiny_model.EOS)
    mined = []
    i = 0
    with torch.no_grad():
        while i < len(order):
            width = len(encoded[order[i]][0])
            size = max(1, batch_tokens // width)
            idx = order[i : i + size]
            i += size
            width = max(len(encoded[k][0]) for k in idx)
            ids = torch.full((len(idx), width), pad, dtype=torch.long)
            for r, k in enumerate(idx):
                ids[r, : len(encoded[k][0])] = torch.tensor(encoded[k][0])
            argmax = model(input_ids=ids).logits.argmax(-1)
            for r, k in enumerate(idx):
                seq, n_prompt = encoded[k]
                answer_ids = seq[n_prompt:]
                predicted = argmax[r, n_prompt - 1 : len(seq) - 1].tolist()
                miss = first_miss(tokenizer, keep[k][1]["assistant"], answer_ids, predicted)
                if miss and (fields is None or miss["key"] in fields):
                    mined.append({**keep[k][0], "mined": miss})
    return mined


def check_with_engine(model_dir: Path, mined: list[dict], clean: list[dict]) -> dict:
    """Schema-constrained greedy answers from the engine for mined and unmined examples: how
    often each is exactly right (mined ones should mostly be wrong, unmined ones right)."""
    import eval_extraction
    import eval_generalisation

    from minisglang.engine import Engine

    engine = Engine(model_path=str(model_dir))
    out = {}
    for label, exs in (("mined", mined), ("unmined", clean)):
        right = loops = 0
        for ex in exs:
            ref = json.loads(make_corpus.unfence(ex["assistant"]))
            prompt = engine.tokenizer.apply_chat_template(make_corpus.to_messages(ex, with_answer=False))
            params = {
                "temperature": 0,
                "max_new_tokens": 160,
                "json_schema": eval_extraction.extraction_schema(list(ref)),
            }
            (res,) = engine.generate([prompt], params)
            right += eval_extraction.parse_object(res["text"]) == ref
            loops += eval_generalisation.is_loop(res["text"], res["meta_info"]["finish_reason"])
        out[label] = {"n": len(exs), "right": right, "loops": loops}
    engine.shutdown()
    return out


def names_of(example: dict) -> list[str]:
    """The "name" values of an example's answer (none when it asks for no name)."""
    ref = json.loads(make_corpus.unfence(example["assistant"]))
    return [ref["name"]] if isinstance(ref, dict) and isinstance(ref.get("name"), str) else []


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=Path("training/candidates/issue33-stage36"))
    ap.add_argument("--examples", type=int, default=20000, help="training examples drawn (extraction ones are mined)")
    ap.add_argument("--seed", type=int, default=0, help="mining seed (offset by MINE_SEED_BASE)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument(
        "--repeat-names",
        action="store_true",
        help="swap each text's person for a training name with a repeated piece (Penpenja, 张婷婷玉)",
    )
    ap.add_argument("--fields", default=None, help="keep misses in these keys only (comma-separated; default all)")
    ap.add_argument("--check", type=int, default=0, help="check N mined and N unmined examples with the engine")
    args = ap.parse_args()
    t0 = time.time()
    examples = mining_examples(args.examples, args.seed, args.repeat_names)
    mined = mine(args.model, examples, args.fields.split(",") if args.fields else None)
    for ex in mined:
        assert all(name_generators.held_out_generator(n) is None for n in names_of(ex))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        for ex in mined:
            f.write(json.dumps(ex, ensure_ascii=False) + "\n")
    kinds: dict[str, int] = {}
    for ex in mined:
        kinds[ex["mined"]["kind"]] = kinds.get(ex["mined"]["kind"], 0) + 1
    print(
        f"{len(mined)} of {len(examples)} extraction examples go wrong ({kinds}); "
        f"{time.time() - t0:.0f} s; written to {args.out}"
    )
    if args.check:
        rng = random.Random(args.seed)
        hit = {json.dumps([ex["user"], ex["assistant"]]) for ex in mined}
        clean = [ex for ex in examples if json.dumps([ex["user"], ex["assistant"]]) not in hit]
        sample_m = rng.sample(mined, min(args.check, len(mined)))
        sample_c = rng.sample(clean, min(args.check, len(clean)))
        print(json.dumps(check_with_engine(args.model, sample_m, sample_c)))


if __name__ == "__main__":
    main()
