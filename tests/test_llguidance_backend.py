"""The llguidance backend (backends/llguidance_backend.py): the masks it can write into, the
grammars it reads (Lark and GBNF told apart), forced text spelled by tokens whose bytes are
the text (over a stranger's vocabularies too), and its parser's and lexer's limits named as
limits. What every backend shares is in test_backends.py; the helpers in grammar_backends.py.
"""

import json
import random
import re

import pytest
import torch
from grammar_backends import (
    OUTLINES_ARITHMETIC,
    PAD,
    backends_fixture,
    byte_level_tokenizer,
    compiled,
    mask_row,
    matches_whole,
)

from minisglang.backends.base import GrammarError, InvalidGrammarObject, get_backend_class

backends = backends_fixture("fsm", "llguidance")


# ---------------------------------------------------------------- the grammars it reads
def test_llguidance_refuses_a_mask_it_cannot_write_into(backends, tokenizer):
    g = compiled(backends["llguidance"], "regex", r"[0-9]+")
    with pytest.raises(ValueError, match="must be a contiguous int32 CPU tensor"):
        g.fill_vocab_mask(torch.zeros((1, (tokenizer.vocab_size + PAD + 31) // 32), dtype=torch.int64), 0)


def test_llguidance_names_a_grammar_nested_past_its_reader(backends):
    """500 nested parentheses: the GBNF reader is recursive Python; the refusal says what is
    wrong with the grammar, not Python's "maximum recursion depth" (a stranger's attack)."""
    with pytest.raises(GrammarError) as refused:
        backends["llguidance"].compile("ebnf", "root ::= " + "(" * 500 + '"a"' + ")" * 500)
    assert "nests too deeply" in str(refused.value) and "recursion depth" not in str(refused.value)


def test_llguidances_refused_one_of_names_what_the_client_can_do(backends):
    """llguidance's own message told clients to "Enable 'coerce_one_of'", an option nothing
    here sets (a stranger's stall hunt): the refusal says to write anyOf or use the fsm backend."""
    schema = {"oneOf": [{"type": "integer"}, {"type": "number"}]}
    with pytest.raises(GrammarError) as refused:
        backends["llguidance"].compile("json_schema", json.dumps(schema))
    message = str(refused.value)
    assert "coerce_one_of" not in message and "'anyOf'" in message and "'fsm' backend" in message, message


@pytest.mark.parametrize("start", ["?start", "!start", "  start"])
def test_llguidance_reads_a_lark_grammar_whose_start_rule_is_marked(backends, tokenizer, start):
    """A Lark grammar whose start rule is `?start:` (Outlines' arithmetic and JSON grammars)
    or `!start:` is Lark: llguidance's own test looked for `start:` alone, handed the text to
    its GBNF reader, and the request was refused with "Expected name at line 2"."""
    text = OUTLINES_ARITHMETIC.replace("?start", start)
    g = compiled(backends["llguidance"], "ebnf", text)
    assert not isinstance(g, InvalidGrammarObject), g.message
    for t in tokenizer.encode("(1+2)*-3", add_special_tokens=False):
        g.accept_token(t)
    row = mask_row(g, tokenizer.vocab_size + PAD)
    assert row[tokenizer.encode("+", add_special_tokens=False)[0]]
    assert not row[tokenizer.encode(")", add_special_tokens=False)[0]]  # no parenthesis is open


def test_llguidance_reads_a_gbnf_rule_named_start_as_gbnf(backends, tokenizer):
    """`start ::=` is a GBNF rule, not Lark's `start:`: the text went to llguidance's Lark
    parser and was refused ("Expected token '_', found '='")."""
    g = compiled(backends["llguidance"], "ebnf", 'root ::= start "!"\nstart ::= "go"')
    assert not isinstance(g, InvalidGrammarObject), g.message
    assert matches_whole(g, tokenizer, "go!")


# ------------------------------------------------------------ a stranger's vocabularies
def test_llguidance_spells_forced_text_with_tokens_that_spell_it(tmp_path):
    """llguidance allows only the tokenization our encoder gives of forced text. With "{" a
    special token on the vocabulary's own "{" piece, that encoder gave the special id for "{"
    (it spells nothing): the mask of `\\{"a"\\}` allowed only that id, the matcher refused it,
    and every request aborted; `{"` (the one token that writes "{") was forbidden. Forced
    text is now spelled by tokens whose bytes are the text."""
    tok = byte_level_tokenizer(tmp_path, [b'{"'], specials=("</s>", "{"))
    brace = tok.hf.token_to_id("{")
    assert tok.token_bytes[brace] is None and brace in tok.special_token_ids
    width = tok.vocab_size + 3
    backend = get_backend_class("llguidance")(tok, width, compile_in="thread")
    try:
        g = backend.compile("regex", r'\{"a"\}')
        ids = []
        while not g.is_terminated():
            allowed = mask_row(g, width).nonzero().flatten().tolist()
            assert brace not in allowed and all(tok.token_bytes[t] for t in allowed), allowed
            ids.append(allowed[0])
            g.accept_token(allowed[0])
        assert tok.decode(ids) == '{"a"}'
    finally:
        backend.shutdown()


def test_llguidance_tokenizes_a_long_forced_text_a_prefix_at_a_time(backends, tokenizer, monkeypatch):
    """llguidance tokenizes all the forced text at every mask, in Python: 10,000 required null
    properties (150k characters) took 0.2-0.27 s a mask, and 16 choices held every client 5-7
    s (a stranger's stall hunt). Past FORCED_TEXT_CHARS only a prefix is tokenized (less its
    last two tokens): the masks along a walk are the whole text's, and no call reads more."""
    from minisglang.backends import llguidance_backend

    n = 400  # (a forced object of ~5,500 characters, past FORCED_TEXT_CHARS)
    schema = {
        "type": "object",
        "properties": {f"k{i}": {"type": "null"} for i in range(n)},
        "required": [f"k{i}" for i in range(n)],
    }
    width = tokenizer.vocab_size + PAD
    seen: list[int] = []
    call = llguidance_backend._TokenizerSource.__call__

    def counted(self, text):
        seen.append(len(text))
        return call(self, text)

    monkeypatch.setattr(llguidance_backend._TokenizerSource, "__call__", counted)
    walks = []
    for limit in (llguidance_backend.FORCED_TEXT_CHARS, 10**9):
        monkeypatch.setattr(llguidance_backend, "FORCED_TEXT_CHARS", limit)
        backend = get_backend_class("llguidance")(tokenizer, width, compile_in="thread")
        try:
            g, rows = backend.compile("json_schema", json.dumps(schema)), []
            for _ in range(40):
                row = mask_row(g, width)
                rows.append(row.nonzero().flatten().tolist())
                g.accept_token(rows[-1][0])
            walks.append(rows)
        finally:
            backend.shutdown()
        if limit < 10**9:  # each call past the limit tokenizes its prefix only (the call right after it)
            over = [i for i, k in enumerate(seen) if k > limit]
            assert over and all(seen[i + 1] == limit for i in over), seen[:6]
    assert walks[0] == walks[1]


def test_llguidance_refuses_a_vocabulary_with_a_token_longer_than_its_trie_holds(tmp_path):
    """A token of 1,025 bytes: llguidance's token trie asserted (a Rust panic, a BaseException
    no `except Exception` catches, whose text names no token). The backend now refuses the
    vocabulary by name; 1,024 bytes is still taken."""
    from minisglang.backends.llguidance_backend import LLGUIDANCE_MAX_TOKEN_BYTES

    tok = byte_level_tokenizer(tmp_path, [b"a" * LLGUIDANCE_MAX_TOKEN_BYTES, b"b" * (LLGUIDANCE_MAX_TOKEN_BYTES + 1)])
    with pytest.raises(ValueError, match=r"token 257 is 1,025 bytes long.*'fsm'"):
        get_backend_class("llguidance")(tok, tok.vocab_size, compile_in="thread")
    (tmp_path / "fits").mkdir()
    tok = byte_level_tokenizer(tmp_path / "fits", [b"a" * LLGUIDANCE_MAX_TOKEN_BYTES])
    backend = get_backend_class("llguidance")(tok, tok.vocab_size, compile_in="thread")
    try:
        assert mask_row(backend.compile("regex", "a{1024}|b"), tok.vocab_size)[256]
    finally:
        backend.shutdown()


def test_llguidance_spells_forced_text_that_the_tokenizer_would_normalize(tmp_path):
    """A tokenizer with an NFKC normalizer encodes "，" (U+FF0C) as ","; llguidance took that as
    the tokenization of the forced text "，x", allowed only "," and then refused it: every
    request aborted. The forced text is spelled by its own bytes now (the same fix as for a
    special "{" above)."""
    from tokenizers import normalizers

    tok = byte_level_tokenizer(tmp_path, [], normalizer=normalizers.NFKC())
    backend = get_backend_class("llguidance")(tok, tok.vocab_size, compile_in="thread")
    try:
        g = backend.compile("regex", "\uff0cx")
        ids = []
        while not g.is_terminated():
            allowed = mask_row(g, tok.vocab_size).nonzero().flatten().tolist()
            assert allowed and all(tok.token_bytes[t] for t in allowed), allowed
            ids.append(allowed[0])
            g.accept_token(allowed[0])
        assert tok.decode(ids) == "\uff0cx"
    finally:
        backend.shutdown()


# --------------------------------------------------------------------------- its limits
def test_llguidances_parser_limit_is_named_as_a_limit_not_as_an_empty_language(backends):
    """An ambiguous grammar (a stranger's random GBNF) reaches llguidance's parser item limit
    at its first mask: the compile is refused (every request would be aborted at its first
    step), saying a limit was reached, not that the grammar allows no text (it allows plenty)."""
    grammar = compiled(
        backends["llguidance"],
        "ebnf",
        'root ::= r2* ([,x]+ ("bax" | [cb-c]) ("9"? | "^-9" | "]\\"")) "x -"\n'
        'r2 ::= ([^\\nx -9]? ([^bb-艳]+ "-9 "? [x\\\\])*)+',
    )
    assert isinstance(grammar, InvalidGrammarObject)
    assert re.search(
        r"llguidance's parser reached a limit on this grammar before its first token: .*limit 50000", grammar.message
    )


@pytest.mark.parametrize("grammar", ["root ::= root", "root ::= x | y\nx ::= y\ny ::= x"])
def test_llguidance_refuses_a_grammar_with_no_text_at_all_when_it_compiles(backends, grammar):
    """llguidance compiles a grammar whose rules never end (a stranger's soak): its first mask
    found out, and every request over it was aborted at its first step. The compile's own
    first mask refuses it, the client's error."""
    refused = compiled(backends["llguidance"], "ebnf", grammar)
    assert isinstance(refused, InvalidGrammarObject)
    assert "the grammar allows no text at all (llguidance: " in refused.message


def _walk(grammar, tokenizer, tokens) -> None:
    """Mask, then take each of `tokens` (each must be allowed)."""
    for t in tokens:
        assert mask_row(grammar, tokenizer.vocab_size + PAD)[t], tokenizer.decode([t])
        grammar.accept_token(t)


def test_llguidance_charges_a_compile_for_its_calls_and_compiles_it_afresh_when_spent(backends, tokenizer, monkeypatch):
    """Copies of one compile share llguidance's lexer, which keeps every DFA state it builds
    and says nothing of their size: a hostile regex grew one cached compile to ~155 MiB while
    the cache counted 0 bytes (a stranger's soak). The compile is now charged BYTES_PER_SECOND
    for the time its copies spend in llguidance's calls (states cost time to build), and once
    charged SPENT_BYTES the cache compiles it afresh for the next request."""
    from minisglang.backends import llguidance_backend

    monkeypatch.setattr(llguidance_backend, "SPENT_BYTES", 1 << 20)
    backend = backends["llguidance"]
    regex = "[ab]*a[ab]{18}(d)?"  # (its own text: no other test's copies share its charge)
    first = compiled(backend, "regex", regex)
    ab = [t for t in range(tokenizer.vocab_size) if tokenizer.decode([t]) in ("a", "b", "ab", "ba")]
    charged = first.nbytes()
    while not first.is_spent():
        grammar = compiled(backend, "regex", regex)
        assert grammar.start is first.start  # one compile, the cache's
        _walk(grammar, tokenizer, ab * 10)
        assert first.nbytes() == grammar.nbytes() > charged
        assert grammar.nbytes() == int(grammar.shared.seconds * llguidance_backend.BYTES_PER_SECOND)
        charged = grammar.nbytes()
    assert backend.stats()["cache_bytes"] >= first.nbytes() >= 1 << 20  # what the byte bound's trim counts
    fresh = compiled(backend, "regex", regex)
    assert fresh.start is not first.start and not fresh.is_spent() and fresh.nbytes() < 1 << 20


def test_a_request_on_a_compile_whose_lexer_another_request_filled_goes_on_with_its_own(tokenizer):
    """Two requests over one compile: A walks a branch whose lexer states never repeat and
    fills llguidance's max_lexer_states; B, on the other branch, failed at its next token with
    A's limit (a stranger's soak). B now moves to a fresh compile of its own, replays its
    tokens and goes on; A's limit is its own."""
    import llguidance as llg

    from minisglang.backends.base import GrammarLimitError, get_backend_class

    backend = get_backend_class("llguidance")(tokenizer, tokenizer.vocab_size + PAD, compile_in="thread")
    backend.limits = llg.LLParserLimits(verbose_errors=False, max_lexer_states=10000)
    regex = "ok[a-z]{0,30}|x[ab]*a[ab]{18}"
    start = compiled(backend, "regex", regex)
    a, b = start.copy(), start.copy()
    enc = {c: tokenizer.encode(c) for c in "okxab"}
    _walk(b, tokenizer, enc["o"] + enc["k"])
    _walk(a, tokenizer, enc["x"])
    rnd = random.Random(0)
    with pytest.raises(GrammarLimitError, match="too many states"):
        for _ in range(5000):  # a's branch: a new lexer state nearly every letter
            _walk(a, tokenizer, enc[rnd.choice("ab")])
    assert not a.moved and start.is_spent()  # (its own walk filled it: the test below)
    _walk(b, tokenizer, enc["a"] + enc["b"] + enc["a"])
    assert b.moved
    b.rollback(2)  # (s7 undoes drafts so): where a fresh compile fed "oka" is
    fresh = backend.compile("regex", regex)
    _walk(fresh, tokenizer, enc["o"] + enc["k"] + enc["a"])
    assert torch.equal(mask_row(b, tokenizer.vocab_size + PAD), mask_row(fresh, tokenizer.vocab_size + PAD))
    b.accept_token(tokenizer.eos_token_id)
    assert b.is_terminated()
    # A copy made from the full compile (a request admitted just before it was spent), fed
    # tokens with no mask first (s7's drafts, a jump's tokens): its full lexer refused "o" with
    # no error at all; it moves too.
    late = start.copy()
    for t in enc["o"] + enc["k"]:
        late.accept_token(t)
    assert late.moved


def test_the_request_that_filled_the_lexer_ends_there_and_the_others_move_with_room_to_finish(tokenizer):
    """A request whose own walk filled the shared lexer moved to a fresh compile, outside the
    cache and counted by nothing, and filled that one too (~110-190 MiB more per such
    request). It now ends at the limit its walk reached (its llguidance calls took most of the
    compile's time); another request moves with the whole bound, as much room as it had alone:
    a bound of a fifth for every moved compile ended requests that needed more states than
    that and finished alone (a stranger's soak: 2 of 8 ordinary requests sharing one compile)."""
    import llguidance as llg

    from minisglang.backends.base import GrammarLimitError, get_backend_class

    backend = get_backend_class("llguidance")(tokenizer, tokenizer.vocab_size + PAD, compile_in="thread")
    backend.limits = llg.LLParserLimits(verbose_errors=False, max_lexer_states=10000)
    regex = "ok[a-z]{0,3000}|x[ab]*a[ab]{18}"
    start = compiled(backend, "regex", regex)
    enc = {c: tokenizer.encode(c) for c in "okxab"}
    letters = [t for t in range(tokenizer.vocab_size) if tokenizer.decode([t]) in ("s", "t", "u", "v")]
    long_text = [random.Random(2).choice(letters) for _ in range(2500)]  # ~2,500 lexer states alone
    alone = start.copy()
    _walk(alone, tokenizer, enc["o"] + enc["k"] + long_text)  # (fills 2,500 of the 10,000)
    start = compiled(backend, "regex", regex + "|y")  # a compile of its own for the rest
    hostile, innocent = start.copy(), start.copy()
    _walk(innocent, tokenizer, enc["o"] + enc["k"])
    _walk(hostile, tokenizer, enc["x"])
    rnd, taken = random.Random(1), 0
    with pytest.raises(GrammarLimitError, match="too many states"):
        for _ in range(5000):  # a new lexer state nearly every letter
            _walk(hostile, tokenizer, enc[rnd.choice("ab")])
            taken += 1
    assert not hostile.moved and start.is_spent() and taken > 500
    _walk(innocent, tokenizer, long_text)  # more than a fifth of the bound, on its own compile
    assert innocent.moved
    innocent.accept_token(tokenizer.eos_token_id)
    assert innocent.is_terminated()


def test_a_token_the_mask_allowed_and_a_full_lexer_refused_is_named_the_grammars_limit(tokenizer):
    """A string of maxLength 100,000 builds a lexer state a character. At llguidance's limit
    the mask still allowed the next token and taking it failed with no error at all: the
    engine ended the request as the backend's fault ("its mask allowed a token its matcher
    then refused"). The refusal is looked into, and named the grammar's limit."""
    import llguidance as llg

    from minisglang.backends.base import GrammarLimitError, get_backend_class

    backend = get_backend_class("llguidance")(tokenizer, tokenizer.vocab_size + PAD, compile_in="thread")
    backend.limits = llg.LLParserLimits(verbose_errors=False, max_lexer_states=5000)
    grammar = compiled(backend, "json_schema", json.dumps({"type": "string", "maxLength": 100000}))
    text = tokenizer.encode(json.dumps("snowboarding " * 2000))[:-1]
    with pytest.raises(GrammarLimitError, match=r"llguidance's parser reached a limit .*too many states"):
        _walk(grammar, tokenizer, text)  # (each token allowed by its mask first)
    # A refused token no mask allowed (s7's drafts) is refused as before, cheaply.
    fresh = compiled(backend, "json_schema", json.dumps({"type": "string", "maxLength": 5}))
    with pytest.raises(GrammarError, match="is not allowed by the grammar here"):
        fresh.accept_token(tokenizer.encode("a")[0])


@pytest.mark.parametrize(
    "kind, grammar",
    [
        ("ebnf", 'root ::= "{" root "}"'),
        ("json_schema", json.dumps({"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]})),
    ],
)
def test_llguidance_refuses_a_grammar_whose_forced_start_reaches_its_parsers_limit(backends, kind, grammar):
    """No text at all, but the first mask allows "{": taking the forced text, as every first
    step's jump does, reached llguidance's parser limit, and every request was aborted there
    (a stranger's soak). The compile takes it too, and is refused."""
    refused = compiled(backends["llguidance"], kind, grammar)
    assert isinstance(refused, InvalidGrammarObject)
    assert "llguidance's parser reached a limit on this grammar before its first token" in refused.message


def test_llguidances_lexer_limit_is_named_as_a_limit_not_as_an_empty_language(backends, tokenizer):
    """Free text with 100 excludes of 15 letters (a v2 structural tag) reaches llguidance's
    limit on regex derivatives ("too many expressions constructed") after about 30 tokens of
    text the fsm backend and xgrammar accept: the abort said "the grammar allows no text from
    here" (found by helper stag_attack)."""
    import random

    from minisglang.backends.base import GrammarError

    rnd = random.Random(0)
    excludes = sorted({"".join(rnd.choice("ab") for _ in range(15)) for _ in range(200)})[:100]
    spec = json.dumps({"type": "structural_tag", "format": {"type": "any_text", "excludes": excludes}})
    rnd = random.Random(5)
    text = "".join(rnd.choice("ab") for _ in range(400))
    grammar, fsm = (
        compiled(backends["llguidance"], "structural_tag", spec),
        compiled(backends["fsm"], "structural_tag", spec),
    )

    def walk(grammar, fsm=None) -> int:
        """How many tokens of `text` the grammar took before its limit."""
        taken = 0
        with pytest.raises(GrammarError, match=r"llguidance's parser reached a limit on this grammar here: .*too many"):
            for t in tokenizer.encode(text)[:60]:
                mask_row(grammar, tokenizer.vocab_size + PAD)
                grammar.accept_token(t)
                if fsm is not None:
                    fsm.accept_token(t)  # (the text is in the language up to there)
                taken += 1
        return taken

    first = walk(grammar, fsm)
    # The copies of one compile share llguidance's lexer: after the limit every later request
    # failed at its first token (a stranger's regex fuzzing). The cache now compiles it again.
    assert grammar.is_spent()
    assert walk(compiled(backends["llguidance"], "structural_tag", spec)) == first > 0
