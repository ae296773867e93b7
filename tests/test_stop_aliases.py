"""minisglang/stop_aliases.py: a checkpoint's extra EOS tokens are the grammar's EOS.

Oracle: a model whose favourite token is always an extra EOS (its logit lifted above every
other): unconstrained it ends at once; under `[0-9]{2,6}` it must write two digits (EOS is
not allowed before) and then end with that token (EOS is allowed, and so is its alias).
"""

from __future__ import annotations

import json
import re
import shutil

import pytest
import torch

import minisglang as sgl
from minisglang.stop_aliases import StopAliases
from minisglang.tokenizer import Tokenizer

ALIAS = 4  # <|tool|>: a special token of the bundled tokenizer (it spells nothing)
TEXT_ID = 300  # an ordinary token, listed as an "EOS" by an odd config


def test_only_extra_ids_that_spell_nothing_are_aliases():
    tok = Tokenizer.from_pretrained(sgl.DEFAULT_MODEL_PATH)
    aliases = StopAliases.of(tok, frozenset({tok.eos_token_id, ALIAS, TEXT_ID}))
    assert aliases == StopAliases(tok.eos_token_id, (ALIAS,))
    assert aliases.for_grammar(ALIAS) == tok.eos_token_id
    assert aliases.for_grammar(TEXT_ID) == TEXT_ID and aliases.for_grammar(7) == 7


def test_a_row_gets_its_aliases_back_only_where_the_mask_left_eos():
    aliases = StopAliases(0, (2, 3))
    logits = torch.arange(12, dtype=torch.float32).reshape(2, 6)
    before = logits.clone()
    with aliases.kept(logits):
        logits[:, 1:] = float("-inf")  # row 0's mask allows EOS (0) only
        logits[1, 0] = float("-inf")  # row 1's allows nothing of these
        logits[1, 5] = 1.0
    assert logits[0].tolist() == [0.0, float("-inf"), 2.0, 3.0, float("-inf"), float("-inf")]
    assert logits[1, :5].tolist() == [float("-inf")] * 5 and before[0, 2] == 2.0


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    model = tmp_path_factory.mktemp("alias") / "model"
    shutil.copytree(sgl.DEFAULT_MODEL_PATH, model)
    config = json.loads((model / "generation_config.json").read_text())
    (model / "generation_config.json").write_text(json.dumps({**config, "eos_token_id": [0, ALIAS]}))
    return str(model)


def alias_loving(engine, lift: float = 5.0):
    """Lift the alias `lift` above every other token at every position the model scores."""
    forward = engine.model.forward

    def lifted(fb, **kw):
        logits = forward(fb, **kw)
        logits[:, ALIAS] = logits.max(dim=-1).values + lift
        return logits

    engine.model.forward = lifted
    return engine


@pytest.mark.parametrize(
    "opts",
    [
        {"stage": "s1"},
        {"stage": "s4"},
        {"stage": "s5", "grammar_backend": "xgrammar"},
        {"stage": "s5", "grammar_backend": "llguidance"},
        {"stage": "s6"},
        {"stage": "s7"},  # (overlap: the mask filled during the forward, applied after)
        {"stage": "s7", "speculative_algorithm": "FORCED+NGRAM"},
    ],
    ids=lambda o: "-".join(str(v) for v in o.values()),
)
def test_a_grammar_ends_with_the_checkpoints_other_eos_where_it_allows_eos(model_dir, opts):
    engine = alias_loving(sgl.Engine(model_path=model_dir, max_total_tokens=2048, **opts))
    try:
        greedy = {"temperature": 0, "max_new_tokens": 12}
        free = engine.generate("The year is", greedy)
        assert free["output_ids"] == [ALIAS]
        digits = "".join(str(n) for n in range(10, 100))  # (s7's n-gram drafts digits from it)
        for prompt, regex in [("The year is", "[0-9]{2,6}"), ("Count: 1 2 3", "[0-9]{2,6}"), (digits, "[0-9]{4,8}")]:
            o = engine.generate(prompt, {**greedy, "regex": regex})
            ids = o["output_ids"]
            assert o["meta_info"]["finish_reason"] == {"type": "stop", "matched": ALIAS}, o
            assert ids[-1] == ALIAS and re.fullmatch(regex, o["text"]), o
            # It ended at the first token where the match could end: the alias was allowed
            # there and nowhere before.
            text = engine.tokenizer.decode
            assert not any(re.fullmatch(regex, text(ids[:k])) for k in range(len(ids) - 1)), o
        assert engine.stats().pools_full
    finally:
        engine.shutdown()


def test_a_seeded_request_riding_other_prefills_ends_with_the_alias_too(model_dir):
    """s7's riders (a seeded sampling request decoding inside another's prefill) are masked
    apart from the batch (`race_riders`): their rows keep the aliases too."""
    engine = alias_loving(
        sgl.Engine(model_path=model_dir, stage="s7", speculative_algorithm="NGRAM", mixed_prefill=True), lift=50.0
    )
    try:
        regex = "[0-9]{2,6}"
        req = engine.submit("The year is", {"temperature": 1.0, "seed": 3, "regex": regex, "max_new_tokens": 12})
        for k in range(40):
            if req.finished:
                break
            engine.submit(f"Guest {k} says", {"max_new_tokens": 1})  # a prefill for it to ride
            engine.step()
        ids = req.output_ids
        assert req.finished_reason == {"type": "stop", "matched": ALIAS}, (req.finished_reason, ids)
        text = engine.tokenizer.decode
        assert re.fullmatch(regex, text(ids[:-1])) and not any(
            re.fullmatch(regex, text(ids[:k])) for k in range(len(ids) - 1)
        )
        while engine.has_work():
            engine.step()
        assert engine.stats().pools_full
    finally:
        engine.shutdown()
