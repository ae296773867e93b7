"""The grammar backends as the tests build and read them: one place for what
test_backends.py, the tests of each backend (test_fsm_backend.py, test_xgrammar_backend.py,
test_llguidance_backend.py, test_outlines_backend.py), test_ignored_keywords.py and
test_forced_text.py share.

    from grammar_backends import PAD, backends_fixture, compiled, mask_row
    backends = backends_fixture("fsm", "xgrammar")  # the module's `backends` fixture

A module builds only the backends its tests use (each library's starts kept children: seconds);
the `tokenizer` fixture (the bundled model's) is conftest.py's.
"""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import strategies as st

from minisglang.backends.base import GrammarError, InvalidGrammarObject, get_backend_class
from minisglang.constrained.bitmask import unpack_bits
from minisglang.tokenizer import Tokenizer

BACKENDS = ["fsm", "xgrammar", "outlines", "llguidance"]
LIBRARIES = BACKENDS[1:]
PAD = 40  # logit columns past the tokenizer's vocabulary, to check they stay masked
A, INT, S = {"type": "array", "items": {"type": "integer"}}, {"type": "integer"}, {"type": "string"}


def backends_fixture(*names: str):
    """A module-scoped fixture `backends`: one backend object per name of `names`, with logits
    PAD columns wider than the vocabulary. The compile timeout is far above any compile here:
    outlines-core's index of the any-JSON value (14k characters of regex) took 26-30 s beside a
    loaded machine's other jobs, and these tests are about what compiles, not how fast (the
    timeout has its own tests)."""

    @pytest.fixture(scope="module", name="backends")
    def backends(tokenizer):
        made = {
            name: get_backend_class(name)(tokenizer, tokenizer.vocab_size + PAD, compile_timeout=300.0)
            for name in names
        }
        yield made
        for b in made.values():
            b.shutdown()

    return backends


def compiled(backend, kind, text):
    """A fresh matcher (or InvalidGrammarObject), waiting for the compile if needed."""
    value, ready = backend.get_cached_or_future_value(kind, text)
    return value if ready else value.result().copy()


def mask_row(grammar, width: int) -> torch.Tensor:
    """The allowed tokens of `grammar` now, as bool [width]."""
    mask = grammar.allocate_vocab_mask(width, 1)
    grammar.fill_vocab_mask(mask, 0)
    return unpack_bits(mask, width)[0]


def _byte_token(tokenizer, byte: int) -> int:
    """The id of the bundled vocabulary's one-byte token for `byte` (its byte fallback)."""
    return next(
        i
        for i in range(tokenizer.vocab_size)
        if tokenizer.decode_bytes([i], skip_special_tokens=False) == bytes([byte])
    )


DROPS_MOVES = "leaves out text the regex allows"


def drops_moves(backend, regex: str) -> bool:
    """Whether `backend` is outlines and refuses `regex` for the moves outlines-core drops."""
    grammar = compiled(backend, "regex", regex)
    return isinstance(grammar, InvalidGrammarObject) and DROPS_MOVES in grammar.message


def check_against_fsm(
    name: str, grammar, row: torch.Tensor, fsm_row: torch.Tensor, outlines_exact: bool, vocab_size: int
) -> None:
    """The relation between a library's mask row and the fsm backend's (test_backends.py's module docstring says why)."""
    assert not row[vocab_size:].any(), "a padded logit column is allowed"
    forced = name == "llguidance" and grammar.matcher.compute_ff_bytes()
    if name == "xgrammar" or (name == "outlines" and outlines_exact) or (name == "llguidance" and not forced):
        assert torch.equal(row, fsm_row), [i for i in (row ^ fsm_row).nonzero().flatten().tolist()][:10]
    else:
        assert row.any() and not (row & ~fsm_row).any()


def along_text_beside_the_fsm(name: str, lib, fsm, tokenizer, text: str, outlines_exact: bool = True) -> None:
    """`text`'s tokens fed to the library grammar `lib` and the fsm backend's `fsm`; before each
    and after the last, the masks related as `check_against_fsm` says; termination the same."""
    width = tokenizer.vocab_size + PAD
    ids = tokenizer.encode(text)
    for step in range(len(ids) + 1):
        check_against_fsm(name, lib, mask_row(lib, width), mask_row(fsm, width), outlines_exact, tokenizer.vocab_size)
        if step < len(ids):
            lib.accept_token(ids[step])
            fsm.accept_token(ids[step])
    assert lib.is_terminated() == fsm.is_terminated()


def walk_beside_the_fsm(name: str, lib, fsm, tokenizer, steps: int, data) -> None:
    """Up to `steps` tokens drawn from the library grammar `lib`'s mask, fed to both; each
    mask related to the fsm backend's (`check_against_fsm`), termination the same."""
    width = tokenizer.vocab_size + PAD
    for _ in range(steps):
        row, fsm_row = mask_row(lib, width), mask_row(fsm, width)
        check_against_fsm(name, lib, row, fsm_row, True, tokenizer.vocab_size)
        row[tokenizer.eos_token_id] = False
        choices = row.nonzero().flatten().tolist()
        if not choices:
            break
        t = data.draw(st.sampled_from(choices), label="token")
        lib.accept_token(t)
        fsm.accept_token(t)
        assert lib.is_terminated() == fsm.is_terminated()


def accepts(backend, tokenizer, regex: str, text: str, kind: str = "regex") -> bool:
    """Whether the backend's matcher for `regex` (or another grammar `kind`'s text) takes
    `text` (as the tokenizer writes it) and then allows EOS: the whole text matches."""
    grammar = compiled(backend, kind, regex)
    assert not isinstance(grammar, InvalidGrammarObject), grammar.message
    try:
        for token_id in tokenizer.encode(text):
            grammar.accept_token(token_id)
    except GrammarError:
        return False
    return bool(mask_row(grammar, tokenizer.vocab_size + PAD)[tokenizer.eos_token_id])


def matches_whole(g, tokenizer, text: str) -> bool:
    """Whether matcher `g` takes `text` (its tokens, each allowed by the mask) and then EOS."""
    width = tokenizer.vocab_size + PAD
    for t in tokenizer.encode(text, add_special_tokens=False):
        if not mask_row(g, width)[t]:
            return False
        g.accept_token(t)
    return bool(mask_row(g, width)[tokenizer.eos_token_id])


def byte_level_tokenizer(
    tmp_path, extra: list[bytes], specials: tuple[str, ...] = ("</s>",), normalizer=None
) -> Tokenizer:
    """A byte-level vocabulary of the 256 bytes plus `extra` (no merges), the first of
    `specials` its EOS (and `normalizer`, a `tokenizers` normalizer, if given): tokens nobody
    made on purpose, for the backends' masks."""
    from tokenizers import AddedToken, decoders, models, pre_tokenizers
    from tokenizers import Tokenizer as HFTokenizer

    from minisglang.tokenizer import BYTE_TO_UNICODE

    vocab: dict[str, int] = {}
    for data in [bytes([b]) for b in range(256)] + extra:
        vocab.setdefault("".join(BYTE_TO_UNICODE[b] for b in data), len(vocab))
    hf = HFTokenizer(models.BPE(vocab, []))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    hf.decoder = decoders.ByteLevel()
    if normalizer is not None:
        hf.normalizer = normalizer
    hf.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    hf.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": specials[0]}))
    return Tokenizer.from_pretrained(tmp_path)


# Outlines' arithmetic grammar (outlines.grammars): Lark with `?` (inline) rules, the start too.
OUTLINES_ARITHMETIC = r"""
?start: expression
?expression: term (("+" | "-") term)*
?term: factor (("*" | "/") factor)*
?factor: NUMBER | "-" factor | "(" expression ")"
%import common.NUMBER
"""


# GBNF grammars and texts in their language (as llama.cpp and xgrammar read them).
GBNF_TEXTS = [
    # llama.cpp's grammars/arithmetic.gbnf: `ident` and `ws` are rules of terminals only
    (
        'root ::= (expr "=" ws term "\\n")+\nexpr ::= term ([-+*/] term)*\n'
        'term ::= ident | num | "(" ws expr ")" ws\nident ::= [a-z] [a-z0-9_]* ws\n'
        "num ::= [0-9]+ ws\nws ::= [ \\t\\n]*",
        ["a=b\n", "1 = (x+2)\n", "a=b \nc=d\n"],
    ),
    # an identifier that begins like a keyword (llama.cpp's c.gbnf, cut down)
    ('root ::= ("while" "(" id ")" | id "=" id) ";"\nid ::= [a-z]+', ["whx=a;", "while(w);", "whilex=y;"]),
    ('root ::= r r ")"\nr ::= "a"{1,3}', ["aa)", "aaaa)", "aaaaaa)"]),
    ('root ::= "\\u00e9a" [\\u0041-\\u0043]', ["éaB"]),
    ("root ::= [^] [^a]", ["éb", "\nc", "a\n"]),  # `[^]`: any character (llguidance: "invalid regex")
]
