"""The four grammar backends behind the s5 interface: fsm (ours), xgrammar, outlines, llguidance.

Oracles: `re.fullmatch` for regex outputs, `jsonschema` for JSON outputs, and our fsm
backend's masks (themselves tested against brute force in test_token_index.py) for the
libraries' masks. Where a library allows less than the fsm backend by design, the test
says which tokens and why:
- llguidance forces bytes the grammar leaves no choice about: where forced bytes exist it
  allows only their canonical tokenization, a subset of the fsm's tokens;
- outlines-core 0.2.x builds no transition from an accepting state into a non-accepting
  one (after "1" in `1(x1)*` no "x"): a narrower language, so the outlines adapter refuses a
  regex where its bounded check finds such a move (`narrower_than_the_regex`), and these tests
  expect that refusal (`drops_moves`) where they used to expect a subset.
"""

import json
import multiprocessing
import re

import jsonschema
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from test_constrained_generation import CASES, USER, assert_stopped_outputs_match
from test_regex_dfa import DIALECT_CHARS, DIALECT_REGEXES

import minisglang as sgl
from minisglang.backends.base import GrammarError, InvalidGrammarObject, get_backend_class
from minisglang.backends.forced_text import JUMP_MAX_FORCED_CHARS, forced_text_bound
from minisglang.backends.fsm_backend import FSMGrammar
from minisglang.backends.outlines_backend import OutlinesGrammar
from minisglang.constrained import child_process, python_regex
from minisglang.constrained.bitmask import unpack_bits
from minisglang.constrained.python_regex import portable_regex
from minisglang.core import AbortKind
from minisglang.stages.s5_backends import ReasonerGrammar
from minisglang.tokenizer import Tokenizer

BACKENDS = ["fsm", "xgrammar", "outlines", "llguidance"]
LIBRARIES = BACKENDS[1:]
PAD = 40  # logit columns past the tokenizer's vocabulary, to check they stay masked
A, INT, S = {"type": "array", "items": {"type": "integer"}}, {"type": "integer"}, {"type": "string"}

# The brief's subset of the shared regex cases: IPv4, dates, Chinese, emoji, JSON objects.
SUBSET_QUESTIONS = {
    "What is the server's IP address?",
    "When was she born?",
    "用中文说一个爱好。",
    "Send an emoji.",
    "Extract as JSON: Li Lei is 31 years old.",
}
REGEX_CASES = [(rx, q) for rx, q in CASES if q in SUBSET_QUESTIONS or q.startswith("Extract name, age")]
SEEDS = range(3)

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}
PLACE = {
    "type": "object",
    "properties": {
        "city": {"enum": ["Paris", "Rome", "Beijing"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 3},
    },
    "required": ["city", "tags"],
}
JSON_QUESTION = "Extract as JSON: Li Lei is 31 years old and lives in Paris."

# One EBNF text in the GBNF dialect (xgrammar's; llguidance converts it to Lark).
EBNF = 'root ::= ("yes" | "no") "!"'
EBNF_SUPPORTED = {"xgrammar", "llguidance"}  # any context-free grammar
REGULAR_EBNF_SUPPORTED = EBNF_SUPPORTED | {"fsm"}  # (the fsm backend: when no rule refers to itself)

# What each library's compile error says about `(unclosed`, on top of base.py's prefix.
BAD_REGEX = "(unclosed"
# (Python's parser reads every backend's regex first: one dialect, one message.)
BAD_REGEX_PHRASE = {"fsm": "missing )", "xgrammar": "missing )", "outlines": "missing )", "llguidance": "missing )"}
BAD_SCHEMA = '{"type": "foo"}'
NOT_JSON = '{"type": "object", '
NOT_JSON_PHRASE = {
    "fsm": "not valid JSON",
    "xgrammar": "not valid JSON",
    "outlines": "not valid JSON",
    "llguidance": "not valid JSON",
}


# ---------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def tokenizer():
    return Tokenizer.from_pretrained(sgl.DEFAULT_MODEL_PATH)


@pytest.fixture(scope="module")
def backends(tokenizer):
    """One backend object per name, with logits PAD columns wider than the vocabulary. The
    compile timeout is far above any compile here: outlines-core's index of the any-JSON
    value (14k characters of regex) took 26-30 s beside a loaded machine's other jobs, and
    these tests are about what compiles, not how fast (the timeout has its own tests)."""
    made = {
        name: get_backend_class(name)(tokenizer, tokenizer.vocab_size + PAD, compile_timeout=300.0) for name in BACKENDS
    }
    yield made
    for b in made.values():
        b.shutdown()


@pytest.fixture(scope="module", params=BACKENDS)
def engine(request):
    # (compile_timeout as in `backends`: xgrammar's compile of these schemas passed 30 s at load 18)
    eng = sgl.Engine(stage="s5", grammar_backend=request.param, compile_timeout=300.0)
    yield eng
    eng.shutdown()


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


def reason(out) -> dict:
    return out["meta_info"]["finish_reason"]


# ------------------------------------------------------------------- engine behaviour
def test_the_regex_subset_is_the_one_asked_for():
    assert len(REGEX_CASES) == 6


DROPS_MOVES = "leaves out text the regex allows"


def drops_moves(backend, regex: str) -> bool:
    """Whether `backend` is outlines and refuses `regex` for the moves outlines-core drops."""
    grammar = compiled(backend, "regex", regex)
    return isinstance(grammar, InvalidGrammarObject) and DROPS_MOVES in grammar.message


def test_stopped_regex_outputs_fully_match(engine):
    cases = [(rx, q) for rx, q in REGEX_CASES if not drops_moves(engine.stage.backend, rx)]
    assert len(cases) >= len(REGEX_CASES) // 2  # (outlines refuses some: drops_moves)
    assert_stopped_outputs_match(engine, cases, SEEDS, min_stopped=0.8)


def test_json_schema_outputs_validate(engine):
    name = engine.stage.backend.name
    params = [
        {"json_schema": json.dumps(s), "temperature": 1.0, "seed": seed, "max_new_tokens": 80}
        for s in [PERSON, PLACE]
        for seed in SEEDS
    ]
    outs = engine.generate([USER.format(JSON_QUESTION)] * len(params), params)
    stopped = 0
    for out, p in zip(outs, params):
        schema = json.loads(p["json_schema"])
        if name == "outlines" and schema == PERSON:  # outlines-core would ignore the age bounds
            assert reason(out)["type"] == "abort"
            assert "does not enforce 'minimum' (at #/properties/age)" in reason(out)["message"]
            continue
        assert reason(out)["type"] in ("stop", "length"), reason(out)
        if reason(out)["type"] == "stop":
            stopped += 1
            jsonschema.validate(json.loads(out["text"]), schema)
    assert stopped >= 2


def test_invalid_grammars_abort_only_their_request(engine):
    name = engine.stage.backend.name
    outs = engine.generate(
        [USER.format("When was she born?")] * 4,
        [
            {"regex": BAD_REGEX},
            {"json_schema": BAD_SCHEMA},
            {"json_schema": NOT_JSON},
            {"regex": r"[0-9]{4}-[0-9]{2}", "temperature": 1.0, "seed": 0},
        ],
    )
    for out in outs[:3]:
        assert reason(out)["type"] == "abort"
        assert f"rejected by the '{name}' backend" in reason(out)["message"]
    assert BAD_REGEX_PHRASE[name] in reason(outs[0])["message"]
    assert "foo" in reason(outs[1])["message"]
    assert NOT_JSON_PHRASE[name] in reason(outs[2])["message"]
    assert reason(outs[3])["type"] == "stop"
    assert re.fullmatch(r"[0-9]{4}-[0-9]{2}", outs[3]["text"])


def test_a_schema_that_forces_without_end_is_the_requests_fault_on_every_backend(engine):
    """A linked list whose next link is required has no finite value: a backend refuses it,
    serves it until max_new_tokens, or stops where its own limit is reached, but never
    blames itself (llguidance's parser hit "Too many items" taking the first token its own
    mask allowed, and the request was a 500 saying its grammar was not at fault)."""
    chain = {"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]}
    out = engine.generate(USER.format(JSON_QUESTION), {"json_schema": json.dumps(chain), "max_new_tokens": 30})
    why = reason(out)
    assert why["type"] == "length" or why.get("kind") == AbortKind.GRAMMAR, why
    if engine.stage.backend.name == "llguidance":
        assert why["type"] == "abort" and "reached a limit" in why["message"], why


def test_ebnf_works_where_supported_and_aborts_clearly_elsewhere(engine):
    name = engine.stage.backend.name
    lark = 'start: ("yes" | "no") "."'
    outs = engine.generate(
        [USER.format("Is the sky blue?")] * 4,
        [{"ebnf": EBNF, "temperature": 1.0, "seed": s} for s in range(3)] + [{"ebnf": lark, "temperature": 0}],
    )
    for out in outs[:3]:
        if name in REGULAR_EBNF_SUPPORTED:
            assert reason(out)["type"] == "stop" and out["text"] in ("yes!", "no!")
        else:
            assert reason(out)["type"] == "abort"
            assert f"the '{name}' grammar backend does not support 'ebnf'" in reason(out)["message"]
    if name == "llguidance":  # it reads Lark too
        assert reason(outs[3])["type"] == "stop" and outs[3]["text"] in ("yes.", "no.")
    else:
        assert reason(outs[3])["type"] == "abort"
    if name == "xgrammar":
        assert "EBNF lexer error at line 1, column 6" in reason(outs[3])["message"]


def test_the_fsm_backend_serves_a_regular_ebnf_grammar_and_refuses_a_recursive_one_by_name(backends, tokenizer):
    """A GBNF grammar in which no rule refers to itself is a regular language: the fsm backend
    (the default, which refused every ebnf request) serves it exactly, as it serves a v2
    structural tag's grammar; a recursive one is refused naming the rule and the backends that
    take it."""
    grammar = 'root ::= item ("," item){0,2}\nitem ::= [a-z]+ | "\\[" [0-9] "]"'
    for text, ok in [("ab,[7],c", True), ("ab", True), ("a,b,c,d", False), ("[x]", False), ("", False)]:
        assert accepts(backends["fsm"], tokenizer, grammar, text, "ebnf") == ok, text
    refused = compiled(backends["fsm"], "ebnf", 'root ::= "(" root ")" | "x"')
    assert isinstance(refused, InvalidGrammarObject)
    assert "rule 'root' refers to itself" in refused.message and "'xgrammar' or 'llguidance'" in refused.message


def test_mixed_batch_of_every_kind(engine):
    name = engine.stage.backend.name
    regex = r"((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
    params = [
        {"regex": regex, "temperature": 1.0, "seed": 1},
        {"json_schema": json.dumps(PLACE), "temperature": 1.0, "seed": 2, "max_new_tokens": 80},
        {"ebnf": EBNF, "temperature": 1.0, "seed": 3},
        {"temperature": 1.0, "seed": 4, "max_new_tokens": 16},
    ]
    outs = engine.generate(
        [
            USER.format(q)
            for q in ["What is the server's IP address?", JSON_QUESTION, "Is the sky blue?", "Say something."]
        ],
        params,
    )
    if drops_moves(engine.stage.backend, regex):
        assert reason(outs[0])["type"] == "abort" and DROPS_MOVES in reason(outs[0])["message"]
    else:
        assert reason(outs[0])["type"] == "stop" and re.fullmatch(regex, outs[0]["text"])
    if reason(outs[1])["type"] == "stop":
        jsonschema.validate(json.loads(outs[1]["text"]), PLACE)
    else:
        assert reason(outs[1])["type"] == "length"
    if name in REGULAR_EBNF_SUPPORTED:
        assert outs[2]["text"] in ("yes!", "no!")
    else:
        assert reason(outs[2])["type"] == "abort" and "does not support 'ebnf'" in reason(outs[2])["message"]
    assert reason(outs[3])["type"] in ("stop", "length")


def test_jump_forward_where_the_library_offers_it(engine):
    name = engine.stage.backend.name
    regex = r'\{"name": "[A-Za-z ]{1,12}", "age": [1-9][0-9]?, "city": "(Paris|Rome|Beijing)"\}'
    outs = engine.generate(
        [USER.format(JSON_QUESTION)] * 3,
        [{"regex": regex, "temperature": 1.0, "seed": s, "max_new_tokens": 60} for s in range(3)],
    )
    jumped = [o["meta_info"]["completion_tokens"] - o["meta_info"]["completion_tokens_wo_jump_forward"] for o in outs]
    for o in outs:
        assert reason(o)["type"] == "stop" and re.fullmatch(regex, o["text"]), o["text"]
    if name == "outlines":  # outlines-core offers no jump forward
        assert jumped == [0, 0, 0] and engine.stage.jumps == 0
    else:
        assert all(j > 0 for j in jumped)


def test_reasoning_gate_constrains_only_after_the_marker(engine):
    """Until the marker the row is all ones, so a seeded request samples exactly what it
    samples unconstrained; so take the marker from an unconstrained run's own tokens."""
    tok = engine.tokenizer
    assert len(tok.encode("</think>")) > 1  # no such token in the bundled vocabulary
    prompt = USER.format("Extract as JSON: Li Lei was born on 1990-03-02.")
    date = r" ?[0-9]{4}-[0-9]{2}-[0-9]{2}"
    free = engine.generate([prompt] * 3, [{"temperature": 1.0, "seed": s, "max_new_tokens": 12} for s in range(3)])
    prefixes, params = [], []
    for seed, out in enumerate(free):
        ids = out["output_ids"]
        # the first token past the second that is new, and spelled by a one-token text
        k = next(
            i for i in range(2, len(ids)) if ids[i] not in ids[:i] and tok.encode(tok.decode([ids[i]])) == [ids[i]]
        )
        prefixes.append(ids[: k + 1])
        params.append(
            {"regex": date, "think_end": tok.decode([ids[k]]), "temperature": 1.0, "seed": seed, "max_new_tokens": 40}
        )
    outs = engine.generate([prompt] * 3, params)
    for out, prefix in zip(outs, prefixes):
        ids = out["output_ids"]
        assert ids[: len(prefix)] == prefix  # free text went through untouched
        assert not re.fullmatch(date, tok.decode(prefix))  # ... and it was not a date
        assert reason(out)["type"] == "stop"
        assert re.fullmatch(date, tok.decode(ids[len(prefix) :])), out["text"]


# -------------------------------------------------------------- masks against fsm's
# (regex, a string it matches, whether outlines-core's index equals ours on it: where it does
# not, the outlines adapter refuses the regex, drops_moves)
MASK_CASES = [
    (r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])", "2024-02-29", True),
    (r'\{"name": "[A-Za-z ]{1,20}", "age": [0-9]{1,3}\}', '{"name": "Li Lei", "age": 31}', True),
    (r"(张三|李四|王五)说(你好|再见)", "李四说再见", True),
    (r"(😀|🎉|🚀)+", "🎉🚀😀", False),
    (r"[a-z ]*x", "ab cx", False),
]


def check_against_fsm(
    name: str, grammar, row: torch.Tensor, fsm_row: torch.Tensor, outlines_exact: bool, vocab_size: int
) -> None:
    """The relation between a library's mask row and the fsm backend's (see module docstring)."""
    assert not row[vocab_size:].any(), "a padded logit column is allowed"
    forced = name == "llguidance" and grammar.matcher.compute_ff_bytes()
    if name == "xgrammar" or (name == "outlines" and outlines_exact) or (name == "llguidance" and not forced):
        assert torch.equal(row, fsm_row), [i for i in (row ^ fsm_row).nonzero().flatten().tolist()][:10]
    else:
        assert row.any() and not (row & ~fsm_row).any()


@pytest.mark.parametrize("name", LIBRARIES)
@pytest.mark.parametrize("regex, text, outlines_exact", MASK_CASES)
def test_masks_match_the_fsm_backend_along_a_match(backends, tokenizer, name, regex, text, outlines_exact):
    if name == "outlines" and not outlines_exact:
        assert drops_moves(backends[name], regex)
        return
    lib, fsm = compiled(backends[name], "regex", regex), compiled(backends["fsm"], "regex", regex)
    along_text_beside_the_fsm(name, lib, fsm, tokenizer, text, outlines_exact)


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


def test_outlines_core_drops_moves_out_of_an_accepting_state_and_the_adapter_refuses(backends, tokenizer):
    """Why MASK_CASES marks some regexes inexact for outlines (outlines-core 0.2.x): its own
    index has no move from an accepting state into a non-accepting one, so the adapter
    refuses the regex by name instead of serving a narrower language (a stranger's fuzzing
    found 323 of 1,084 regexes so; it had been served as a subset)."""
    from outlines_core import Guide, Index

    regex = r"[a-z ]*x"
    guide = Guide(Index(regex, backends["outlines"].vocabulary))
    for t in tokenizer.encode("x"):
        guide.advance(t, return_tokens=False)
    assert tokenizer.encode("a")[0] not in guide.get_tokens()  # "xa..." is a valid prefix
    grammar = compiled(backends["outlines"], "regex", regex)
    assert isinstance(grammar, InvalidGrammarObject) and DROPS_MOVES in grammar.message
    # (the check meets it first at the start: no token `xt`, which passes through the match `x`)
    assert "after '' it allows no 'xt'" in grammar.message and "'fsm' backend" in grammar.message
    for fine in [r"[0-9]{4}-[0-9]{2}", r'\{"a": [0-9]+\}', r"[a-z]+@[a-z]+\.(com|org)"]:
        assert not drops_moves(backends["outlines"], fine), fine


@pytest.mark.parametrize(
    ("regex", "after", "left_out", "rest"),
    [
        (r"\wß{2,}", "aßß", b"\xc3", b"\x9f"),  # a match that may go on: found past 10,000 moves
        (r"\w+", "903", b"\xc3", b"\xa9"),  # no character of two bytes after a match (903é)
        (r"[^a]+x", "", b"text", b"x"),  # a token that passes through a match (tex) and on
        (r"[^|\-😀]*Ωy{3}", "Ωyy", b"ys", "Ωyyy".encode()),  # the same, from a state that does not match
    ],
)
def test_outlines_is_refused_where_its_index_leaves_out_text_the_regex_allows(
    backends, tokenizer, regex, after, left_out, rest
):
    """outlines-core 0.2.14's index offers fewer tokens than these regexes allow (a stranger's
    fuzzing: `\\wß{2,}` stops after two `ß`): after `after` it has no move on the token
    `left_out`, though `re.fullmatch` takes `after + left_out + rest`. The adapter's check
    compares every state it reaches with ours (it compared only matching states, within a
    budget a wide class used up) and refuses the regex by name."""
    from outlines_core import Index

    assert re.fullmatch(regex, (after.encode() + left_out + rest).decode())
    token = _byte_token(tokenizer, left_out[0]) if len(left_out) == 1 else tokenizer.encode(left_out.decode())[0]
    assert tokenizer.token_bytes[token] == left_out
    index = Index(portable_regex(regex), backends["outlines"].vocabulary)
    state = index.get_initial_state()
    for t in tokenizer.encode(after):
        state = index.get_next_state(state, t)
    assert state is not None and index.get_next_state(state, token) is None
    grammar = compiled(backends["outlines"], "regex", regex)
    assert isinstance(grammar, InvalidGrammarObject) and DROPS_MOVES in grammar.message, grammar
    assert "'fsm' backend" in grammar.message
    # (a byte of a character is named as one: "after '' it allows no b'\xc2'" said nothing to a stranger)
    assert ("part of a character" in grammar.message) == (len(left_out) == 1 and left_out[0] >= 0x80), grammar


@pytest.mark.parametrize("name", LIBRARIES)
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_random_walks_keep_masks_related_to_the_fsm_backend(backends, tokenizer, name, data):
    regex = r'\{"city": "(Paris|Rome|Beijing|北京)", "age": [1-9][0-9]?, "tag": "[a-z]{1,6}"\}'
    lib, fsm = compiled(backends[name], "regex", regex), compiled(backends["fsm"], "regex", regex)
    walk_beside_the_fsm(name, lib, fsm, tokenizer, data.draw(st.integers(0, 25), label="steps"), data)


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


@pytest.mark.parametrize("name", BACKENDS)
def test_batched_fill_equals_row_by_row(backends, tokenizer, name):
    width = tokenizer.vocab_size + PAD
    grammars = []
    for regex, text in [(r"[0-9]{4}-[0-9]{2}", "20"), (r"(yes|no|maybe)!", "ma"), (r"[0-9]{4}-[0-9]{2}", "2024-")]:
        g = compiled(backends[name], "regex", regex)
        for t in tokenizer.encode(text):
            g.accept_token(t)
        grammars.append(g)
    batched = grammars[0].allocate_vocab_mask(width, 5)
    type(grammars[0]).fill_vocab_mask_batched([(g, i) for g, i in zip(grammars, [0, 2, 4])], batched)
    for g, i in zip(grammars, [0, 2, 4]):
        assert torch.equal(unpack_bits(batched[i], width), mask_row(g, width))
    assert (batched[[1, 3]] == -1).all()  # rows without a grammar stay all-allowed


# ------------------------------------------------------------ the matcher contract
@pytest.mark.parametrize("name", BACKENDS)
def test_accept_rollback_copy_and_termination(backends, tokenizer, name):
    width = tokenizer.vocab_size + PAD
    g = compiled(backends[name], "regex", r"[0-9]{4}-[0-9]{2}")
    start = mask_row(g, width)
    ids = tokenizer.encode("2024-12")
    for t in ids[:-1]:
        g.accept_token(t)
    before_last = mask_row(g, width)
    assert not g.is_terminated()
    g.accept_token(ids[-1])
    assert g.is_terminated()  # complete, and nothing but EOS may follow
    g.rollback(1)
    assert not g.is_terminated() and torch.equal(mask_row(g, width), before_last)
    with pytest.raises(GrammarError, match="not allowed"):
        g.accept_token(tokenizer.encode("x")[0])
    assert torch.equal(mask_row(g.copy(), width), start)

    more = compiled(backends[name], "regex", r"[0-9]+")
    for t in tokenizer.encode("12"):
        more.accept_token(t)
    assert not more.is_terminated()  # more digits may follow
    assert mask_row(more, width)[tokenizer.eos_token_id]
    more.accept_token(tokenizer.eos_token_id)
    assert more.is_terminated()
    # A matcher past EOS forces nothing: s4's jump may ask before the step that finishes the
    # request (its finish waits on the step's grammar budget); xgrammar raised there (a 500).
    assert more.jump_forward(tokenizer) is None


@pytest.mark.parametrize("name", BACKENDS)
def test_a_refused_token_leaves_the_matcher_as_it_was(backends, tokenizer, name):
    """s7's seam guess feeds forced drafts and goes on without them when one is refused
    (GrammarError), rolling back what it accepted. llguidance's `consume_token` left its
    matcher in an error state that no rollback undoes ("cannot roll back 0 tokens"), and
    the request was aborted (found by helper s7diff)."""
    width = tokenizer.vocab_size + PAD
    g = compiled(backends[name], "regex", r"[0-9]{4}-[0-9]{2}")
    ids = tokenizer.encode("2024-12")
    g.accept_token(ids[0])
    before = mask_row(g, width)
    with pytest.raises(GrammarError, match="not allowed"):
        g.accept_token(tokenizer.encode("x")[0])
    g.rollback(0)
    assert torch.equal(mask_row(g, width), before)
    for t in ids[1:]:
        g.accept_token(t)
    assert g.is_terminated()
    g.rollback(len(ids) - 1)
    assert torch.equal(mask_row(g, width), before)


@pytest.mark.parametrize("name", BACKENDS)
def test_reasoner_gate_passes_free_text_then_constrains(backends, tokenizer, name):
    width = tokenizer.vocab_size + PAD
    regex = r"(yes|no)"
    (marker_id,) = tokenizer.encode("\n")
    gate = ReasonerGrammar(compiled(backends[name], "regex", regex), marker_id, tokenizer.eos_token_id)
    all_but_eos = torch.ones(width, dtype=torch.bool)
    all_but_eos[tokenizer.eos_token_id] = False
    for t in tokenizer.encode("I think so"):  # text the regex would reject
        assert torch.equal(mask_row(gate, width), all_but_eos)
        gate.accept_token(t)
    assert not gate.is_terminated()
    gate.accept_token(marker_id)
    assert torch.equal(mask_row(gate, width), mask_row(compiled(backends[name], "regex", regex), width))
    with pytest.raises(GrammarError):
        gate.accept_token(tokenizer.encode("I")[0])


@pytest.mark.parametrize("name", LIBRARIES)
def test_compile_errors_name_the_problem(backends, name):
    cases = [
        ("regex", BAD_REGEX, BAD_REGEX_PHRASE[name]),
        ("json_schema", BAD_SCHEMA, "foo"),
        ("json_schema", NOT_JSON, NOT_JSON_PHRASE[name]),
        ("json_schema", '{"type": "string", "minLength": 5, "maxLength": 2}', "maxLength"),
    ]
    if name == "outlines":
        cases.append(("json_schema", json.dumps(PERSON), "does not enforce 'minimum' (at #/properties/age)"))
    for kind, text, phrase in cases:
        g = compiled(backends[name], kind, text)
        assert isinstance(g, InvalidGrammarObject), (kind, text)
        assert f"{kind} rejected by the '{name}' backend" in g.message and phrase in g.message, g.message


@pytest.mark.parametrize(
    "regex, repeats",
    [
        ("(?:[a-z]?)+!", True),
        ("(?:[a-z]?b?)*!", True),
        ("(?:a|b?)*", True),
        ("(\\d*)+x", True),
        ("x(?:y(?:[a-z]?){2,5})z", True),
        ("(?:[a-z]?){0,1}!", False),  # (at most once: nothing repeats)
        ("[a-z]*!", False),
        ("(?:ab?)+", False),
        ("(?:\\s*,)+", False),
        ("\\d{4}-\\d{2}", False),
    ],
)
def test_xgrammar_is_given_no_repeated_part_that_can_match_nothing(backends, tokenizer, regex, repeats):
    """A stranger's regex fuzzing: `(?:[a-z]?)+!` took xgrammar's mask from 6 ms at the first
    token to 230 ms at the 60th (one random regex's mask passed 2 minutes) on the thread every
    request shares; `[a-z]*!`, the same language, stays under 1 ms. So a regex, `pattern` or
    key pattern is handed over with each such part written without its empty match: the
    regex's masks along a text are the fsm backend's, and a string (or key) the pattern
    matches is written whole and valid by `jsonschema`."""
    from minisglang.backends.ignored_keywords import repeats_a_nullable_part
    from minisglang.backends.xgrammar_backend import xgrammar_regex

    assert repeats_a_nullable_part(regex) == repeats
    assert not repeats_a_nullable_part(xgrammar_regex(regex))
    text = next(t for t in ("abab!", "a!", "x", "xyabz", "ab", " , ,", "2024-12") if re.fullmatch(regex, t))
    test_masks_match_the_fsm_backend_along_a_match(backends, tokenizer, "xgrammar", regex, text, True)
    for schema, value in [
        ({"type": "string", "pattern": f"^(?:{regex})$"}, text),
        ({"type": "object", "patternProperties": {f"^(?:{regex})$": {"type": "integer"}}}, {text: 1}),
    ]:
        g = compiled(backends["xgrammar"], "json_schema", json.dumps(schema))
        assert not isinstance(g, InvalidGrammarObject), g.message
        for t in tokenizer.encode(json.dumps(value)):
            g.accept_token(t)
        assert mask_row(g, tokenizer.vocab_size + PAD)[tokenizer.eos_token_id]
        jsonschema.validate(value, schema)


def test_xgrammar_refuses_a_regex_whose_rewrite_would_grow_too_long(backends):
    """Without its empty match, a repeated run of n optional parts is n alternatives of up to n
    parts: past REWRITE_GROWTH times the regex's length the regex is refused by name."""
    regex = "(?:" + "".join(f"{c}?" for c in "abcdefghijklmnopqrstuvwxyz0123") + ")*!"
    g = compiled(backends["xgrammar"], "regex", regex)
    assert isinstance(g, InvalidGrammarObject) and "can match the empty string" in g.message, g


def test_xgrammar_names_its_own_mask_when_its_matcher_refuses_what_it_allowed(backends, tokenizer):
    """Where xgrammar's mask and matcher disagree (0.2.9 did on `[A-Z]+\\d\\d`, a stranger's
    fuzzing, until the adapter wrote its repetitions another way: the test below), a request
    that samples a token the mask allowed and the matcher refuses is aborted naming the
    library's fault, not as a token the grammar forbids; a token the mask left out is refused
    as before. The disagreement is made here by a matcher that refuses one allowed token."""
    width = tokenizer.vocab_size + PAD
    allowed = mask_row(compiled(backends["xgrammar"], "regex", "[A-Z]+[0-9]"), width).nonzero().flatten().tolist()
    refused_anyway = next(t for t in allowed if t != tokenizer.eos_token_id)

    class Disagreeing:
        def __init__(self, matcher):
            self.matcher = matcher

        def accept_token(self, token_id: int) -> bool:
            return token_id != refused_anyway and self.matcher.accept_token(token_id)

        def __getattr__(self, name):
            return getattr(self.matcher, name)

    for token_id, named in ((refused_anyway, True), (_byte_token(tokenizer, ord("!")), False)):
        g = compiled(backends["xgrammar"], "regex", "[A-Z]+[0-9]")
        g.matcher = Disagreeing(g.matcher)
        with pytest.raises(GrammarError) as refusal:
            g.accept_token(token_id)
        assert ("xgrammar's own mask allowed it" in str(refusal.value)) == named, str(refusal.value)


def test_the_fsm_backend_finds_shorthand_classes_before_any_compile(tokenizer):
    """`\\s`, `\\d`, `\\w` are found over every code point (~50 ms, no checkpoint inside): a
    backend does it when it starts, so no client's compile holds the others' steps for it."""
    python_regex.shorthand_ranges.cache_clear()
    backend = get_backend_class("fsm")(tokenizer, tokenizer.vocab_size)
    try:
        found = python_regex.shorthand_ranges.cache_info().misses
        assert found >= 6  # all six classes, the upper-case complements too
        grammar = compiled(backend, "regex", r"\s\d\w\S\D\W(x|\s)")
        assert not isinstance(grammar, InvalidGrammarObject)
        assert python_regex.shorthand_ranges.cache_info().misses == found  # the compile found none anew
    finally:
        backend.shutdown()


def test_an_outlines_index_past_compile_timeout_is_stopped_and_frees_its_thread(tokenizer):
    """outlines-core's DFA of this 25-character regex takes ~30 s to build (exponential in the
    bounds): its child is killed at compile_timeout, the request gets an error that says so,
    no process is left computing, and the next grammar compiles (the thread is free)."""

    def kept_children() -> set[int | None]:  # (the module's backends keep theirs)
        return {p.pid for p in multiprocessing.active_children() if p.name == child_process.CHILD_NAME}

    before = kept_children()
    backend = get_backend_class("outlines")(tokenizer, tokenizer.vocab_size + PAD, compile_timeout=0.5, threads=1)
    try:
        started = kept_children() - before  # (the child started with the backend computes the index)
        g = compiled(backend, "regex", "[a-z]{1,300}x[a-z]{1,300}")
        assert isinstance(g, InvalidGrammarObject)
        assert "outlines-core's index of regex '[a-z]{1,300}x[a-z]{1,300}' took longer than 0.5 s" in g.message
        (replacement,) = kept_children() - before  # the one computing was stopped; an idle one waits
        assert replacement not in started, "the child computing the index was stopped"
        assert not backend.is_cached("regex", "[a-z]{1,300}x[a-z]{1,300}"), "a timeout may be load: never cached"
        assert isinstance(compiled(backend, "regex", "x[a-z]{1,3}"), OutlinesGrammar)
    finally:
        backend.shutdown()
    assert kept_children() <= before


def test_an_outlines_index_counts_its_bytes_and_one_bigger_than_the_cache_is_refused(tokenizer):
    """outlines-core's grammars told the byte-bounded cache 0 (a stranger's 330 MB indexes grew
    the server to 6 GB): an index counts its pickled size, and one over the cache's whole
    budget is refused by name, before it is read back."""
    backend = get_backend_class("outlines")(tokenizer, tokenizer.vocab_size + PAD, max_bytes=200_000, threads=1)
    try:
        small = compiled(backend, "regex", "x[a-z]{1,3}")
        assert isinstance(small, OutlinesGrammar) and 0 < small.nbytes() < 200_000
        big = compiled(backend, "regex", "[a-z]{1,60}x")
        assert isinstance(big, InvalidGrammarObject)
        assert "more than the whole grammar cache may hold" in big.message and "grammar_cache_bytes" in big.message
    finally:
        backend.shutdown()


def test_an_xgrammar_compile_past_compile_timeout_is_stopped_and_frees_its_thread(tokenizer):
    """A 3 KB schema of 60 required strings of maxLength 1000 takes xgrammar over 30 s (a
    stranger's: small text is no fast compile, and at 65k a 151-character regex took 5 s):
    its child is killed at compile_timeout, and the next grammar compiles."""
    schema = {
        "type": "object",
        "properties": {f"a{i}": {"type": "string", "maxLength": 1000} for i in range(60)},
        "required": [f"a{i}" for i in range(60)],
    }
    backend = get_backend_class("xgrammar")(tokenizer, tokenizer.vocab_size + PAD, compile_timeout=0.5, threads=1)
    try:
        g = compiled(backend, "json_schema", json.dumps(schema))
        assert isinstance(g, InvalidGrammarObject)
        assert "xgrammar's compile_json_schema took longer than 0.5 s" in g.message, g.message
        backend.compile_timeout = 60  # (a new child may import xgrammar itself: a second)
        assert not compiled(backend, "regex", "[a-z]+x").is_terminated()  # the thread is free
    finally:
        backend.shutdown()


def test_an_xgrammar_grammar_from_its_child_masks_as_one_compiled_here(tokenizer):
    """A grammar compiles in a child and comes back as JSON, or, too big to send
    (library_children.XGRAMMAR_SEND_BYTES), is compiled again here: the masks are those of the
    same grammar compiled on the thread, along a valid output, and its size is counted."""
    enum = {"enum": [f"value-{i}-x" for i in range(3000)]}
    wide = {
        "anyOf": [
            {
                "type": "object",
                "properties": {f"k{j}": {"anyOf": [{"type": "string"}, {"type": "integer"}]} for j in range(40)},
            }
            for _ in range(12)
        ]
    }
    cases = [(enum, '"value-2999-x"'), (wide, '{"k0": 1, "k3": "x"}')]
    here = get_backend_class("xgrammar")(tokenizer, tokenizer.vocab_size + PAD, compile_in="thread")
    there = get_backend_class("xgrammar")(tokenizer, tokenizer.vocab_size + PAD)
    try:
        for schema, output in cases:
            text = json.dumps(schema)
            a, b = compiled(here, "json_schema", text), compiled(there, "json_schema", text)
            assert a.nbytes() == b.nbytes() > 0
            for token in tokenizer.encode(output):
                assert torch.equal(mask_row(a, tokenizer.vocab_size + PAD), mask_row(b, tokenizer.vocab_size + PAD))
                a.accept_token(token)
                b.accept_token(token)
    finally:
        here.shutdown()
        there.shutdown()


def test_logits_narrower_than_the_vocabulary_are_refused(tokenizer):
    for name in LIBRARIES:
        with pytest.raises(ValueError, match="smaller than the tokenizer's vocabulary"):
            get_backend_class(name)(tokenizer, tokenizer.vocab_size - 1)


@pytest.mark.slow
def test_sentencepiece_vocabulary_masks_match_the_fsm_backend():
    """`▁` spaces and <0xNN> byte pieces reach the libraries as the bytes they spell."""
    from real_tokenizers import mistral_sentencepiece

    tok = mistral_sentencepiece()
    width = tok.vocab_size + PAD
    made = {name: get_backend_class(name)(tok, width) for name in BACKENDS}
    regex, text = r'\{"name": "[A-Za-z ]{1,20}", "city": "(北京|上海)"\}', '{"name": "Li Lei", "city": "北京"}'
    grammars = {name: compiled(b, "regex", regex) for name, b in made.items()}
    ids = tok.encode(text)
    for step in range(len(ids) + 1):
        fsm_row = mask_row(grammars["fsm"], width)
        for name in LIBRARIES:
            check_against_fsm(name, grammars[name], mask_row(grammars[name], width), fsm_row, True, tok.vocab_size)
        if step < len(ids):
            for g in grammars.values():
                g.accept_token(ids[step])
    assert all(g.is_terminated() for g in grammars.values())
    for b in made.values():
        b.shutdown()


def test_llguidance_refuses_a_mask_it_cannot_write_into(backends, tokenizer):
    g = compiled(backends["llguidance"], "regex", r"[0-9]+")
    with pytest.raises(ValueError, match="must be a contiguous int32 CPU tensor"):
        g.fill_vocab_mask(torch.zeros((1, (tokenizer.vocab_size + PAD + 31) // 32), dtype=torch.int64), 0)


# ---------------------------------------------------------------- one regex dialect
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


@pytest.mark.parametrize("name", BACKENDS)
@settings(max_examples=60, deadline=None)
@given(pattern=st.sampled_from(DIALECT_REGEXES), chars=st.lists(DIALECT_CHARS, min_size=1, max_size=4))
def test_every_backend_reads_shorthand_classes_and_dot_as_python_does(backends, tokenizer, name, pattern, chars):
    """\\d \\w \\s \\D \\W \\S and `.` mean what re.fullmatch says in every backend: the
    libraries' own readings differ (xgrammar: ASCII \\w \\d, `.` takes a newline; Rust's regex in
    outlines-core and llguidance: \\w with combining marks and without '²', \\s without '\\x1c')."""
    text = "".join(chars)
    ids = tokenizer.encode(text)
    assume(b"".join(tokenizer.token_bytes[i] for i in ids) == text.encode("utf-8"))
    expected = re.fullmatch(pattern, text) is not None
    if drops_moves(backends[name], pattern):
        return  # refused: outlines-core drops such a move (module docstring), no dialect question here
    assert accepts(backends[name], tokenizer, pattern, text) == expected, (name, pattern, text)


# (regex, a match; a match outlines-core can walk: a character of several bytes only where
# the text so far does not match, see _leaves_an_accepting_state_mid_character)
DIALECT_MASK_CASES = [
    (r"\w+", "艳a_٣²", "艳a_"),
    (r"\W{4}", "!\u2028\x1c ", "!\u2028\x1c "),
    (r"[^\w\s]+x", "!-x", "€-x"),
    (r"\d{2}\s.", "٣9\u3000\u2028", "٣9\u3000\u2028"),
    # every character: once written `[^]`, which llguidance's Rust and outlines-core refused
    # (a stranger's attack)
    (r"[\s\S]{2}x[\d\D]", "艳\nx9", "a\nx9"),
]


@pytest.mark.parametrize("name", LIBRARIES)
@pytest.mark.parametrize("regex, text, outlines_text", DIALECT_MASK_CASES)
def test_dialect_masks_match_the_fsm_backend_along_a_match(backends, tokenizer, name, regex, text, outlines_text):
    """The libraries' masks for Unicode classes against ours (exact; outlines refuses what its
    core would serve narrower)."""
    if name == "outlines":
        if drops_moves(backends[name], regex):
            return
        text = outlines_text
    test_masks_match_the_fsm_backend_along_a_match(backends, tokenizer, name, regex, text, outlines_exact=True)


@pytest.mark.parametrize("name", BACKENDS)
def test_what_no_automaton_reads_like_python_is_refused_by_every_backend(backends, name):
    for regex, phrase in [
        ("(?i)abc", "inline flags"),
        ("a(?i:b)", "inline flags"),
        ("(?a)\\w", "inline flags"),
        ("a(?=b)", "lookahead"),
        (r"(a)\1", "reference"),
        (r"a[^\s\S]", "matches no string"),
    ]:
        g = compiled(backends[name], "regex", regex)
        assert isinstance(g, InvalidGrammarObject), (name, regex)
        assert phrase in g.message and "regex rejected" in g.message, g.message


@pytest.mark.parametrize("name", BACKENDS)
@pytest.mark.parametrize("regex", [r"[\^a]{2}", r"[a^]{2}", r"[\^-_]{2}"])
def test_a_class_whose_first_character_is_a_caret_is_not_negated(backends, tokenizer, name, regex):
    """xgrammar read `[\\u005ea]` (how `[\\^a]` was handed to it) as `[^a]` and wrote '万都'
    under finish_reason "stop" (fuzz3). Every first token allowed spells '^', 'a' or '_' only."""
    g = compiled(backends[name], "regex", regex)
    assert not isinstance(g, InvalidGrammarObject), g.message
    allowed = torch.nonzero(mask_row(g, tokenizer.vocab_size + PAD)).flatten().tolist()
    spelled = {tokenizer.token_bytes[t] for t in allowed}
    assert spelled and all(data and set(data) <= set(b"^a_") for data in spelled), sorted(map(repr, spelled))[:5]
    for text in ("^a", "a^", "^^") if "a" in regex else ("^_", "_^"):
        g = compiled(backends[name], "regex", regex)
        for t in tokenizer.encode(text):
            g.accept_token(t)
        assert g.is_terminated() or mask_row(g, tokenizer.vocab_size + PAD)[tokenizer.eos_token_id], (regex, text)


def test_a_caret_never_leads_a_spelled_out_class():
    assert portable_regex(r"[\^a]") == r"[a\u005e]"
    assert portable_regex(r"[\^-_x]") == r"[\u005fx\u005e]"
    assert portable_regex(r"[^\^a]") == r"[^\u005ea]"  # negated: a caret after the first one is a character


@pytest.mark.parametrize("name", BACKENDS)
def test_a_class_of_lone_surrogates_matches_nothing(backends, name):
    """No UTF-8 text holds a lone surrogate: `[\\ud800-\\udfff]?a` is "a" in every backend, and
    `\\ud83d` alone an empty language, said so (the libraries were handed `[]` and answered
    "Empty character class" or "unclosed character class")."""
    g = compiled(backends[name], "regex", r"[\ud800-\udfff]?a")
    assert not isinstance(g, InvalidGrammarObject), g.message
    for regex in ("[\ud800-\udfff]", r"\ud83d\ude00", "\ud83d"):  # (the fsm backend's: a codec error)
        g = compiled(backends[name], "regex", regex)
        assert isinstance(g, InvalidGrammarObject) and "matches no string" in g.message, (regex, g.message)


@pytest.mark.parametrize("name", BACKENDS)
def test_a_grammar_that_spells_a_special_tokens_text_writes_it_as_text(backends, tokenizer, name):
    """`a<|user|>` asks for the text "<|user|>", not the special token: llguidance's mask
    allowed the special id (its vocabulary's encoder read the text as one), then its matcher
    refused the token, and every such request aborted (a stranger's fuzzer)."""
    special = tokenizer.encode("<|user|>")
    assert len(special) == 1 and special[0] in tokenizer.special_token_ids
    g = compiled(backends[name], "regex", r"a<\|user\|>")
    assert not isinstance(g, InvalidGrammarObject), g.message
    g.accept_token(tokenizer.encode("a")[0])
    assert not mask_row(g, tokenizer.vocab_size + PAD)[special[0]]
    for t in tokenizer.encode_as_text("<|user|>"):
        assert mask_row(g, tokenizer.vocab_size + PAD)[t]
        g.accept_token(t)
    assert g.is_terminated()


def test_xgrammar_reads_an_integers_bounds_with_a_fraction_as_whole_bounds(backends, tokenizer):
    """xgrammar refused `minimum: 1.5` on an integer ("must be a whole number", a stranger's
    fuzzer): the bounds are rounded inwards, exactly the integers the schema allows."""
    schema = {"type": "integer", "minimum": 1.5, "exclusiveMaximum": 4.5}
    width = tokenizer.vocab_size + PAD
    for text, allowed in (("1", False), ("2", True), ("4", True), ("5", False)):
        g = compiled(backends["xgrammar"], "json_schema", json.dumps(schema))
        assert not isinstance(g, InvalidGrammarObject), g.message
        ids = tokenizer.encode(text)
        assert len(ids) == 1 and bool(mask_row(g, width)[ids[0]]) == allowed, text


def test_xgrammar_serves_without_jumps_where_its_search_would_grow(backends):
    """xgrammar's jump-forward search writes out every forced character at a cost growing
    with their square: a 200-byte schema of 1,000,000 forced nulls took the engine past 22 GB
    (a stranger's fuzzer), and a recursion of required members never returned. Such schemas
    are served, without jumps; a small one still jumps."""
    big = {"type": "array", "minItems": 2_000, "items": {"type": "null"}}  # (100,000 ran out of memory)
    loop = {"$defs": {"n": {"type": "object", "properties": {"c": {"$ref": "#/$defs/n"}}, "required": ["c"]}}}
    small = {"type": "array", "minItems": 3, "items": {"type": "null"}}
    tokenizer = backends["xgrammar"].tokenizer
    for schema in (big, {**loop, "$ref": "#/$defs/n"}):
        g = compiled(backends["xgrammar"], "json_schema", json.dumps(schema))
        assert not isinstance(g, InvalidGrammarObject) and g.jump_forward(tokenizer) is None
    g = compiled(backends["xgrammar"], "json_schema", json.dumps(small))
    assert g.jump_forward(tokenizer)[0].startswith(b"[null, null, null")
    tag = {"structures": [{"begin": "<a>", "schema": big, "end": "</a>"}], "triggers": ["<a>"], "at_least_one": True}
    g = compiled(backends["xgrammar"], "structural_tag", json.dumps(tag))
    assert not isinstance(g, InvalidGrammarObject) and g.jump_forward(tokenizer) is None  # a tool's schema too


def test_xgrammar_serves_without_jumps_where_the_forced_text_could_be_long(backends):
    """Not only arrays: 6,000 required properties of type null (an 80 KB forced object) took
    0.2-0.6 s a jump search, each holding ~480 MB while its matcher lived, and 32 choices of
    10,000 got the server killed for memory (a stranger's stall hunt); so did minItems nested
    under minItems, each under the array limit. Where the forced text's bound
    (forced_text_bound: the schema's own text, copied per minItems, a pattern's shortest match,
    a tag's begin) passes JUMP_MAX_FORCED_CHARS, no search is made; a few such keys still jump."""
    tokenizer = backends["xgrammar"].tokenizer

    def nulls(n: int) -> dict:
        return {
            "type": "object",
            "properties": {f"k{i}": {"type": "null"} for i in range(n)},
            "required": [f"k{i}" for i in range(n)],
        }

    nested = {"type": "array", "minItems": 100, "items": {"type": "array", "minItems": 100, "items": {"type": "null"}}}
    # (the same under a property: copies multiply at any depth)
    under = {"type": "object", "properties": {"a": nested}, "required": ["a"]}
    counted = {"type": "string", "pattern": "^(?:abcdefghij){2000}$"}
    for schema in (nulls(1_000), nested, under, counted):
        assert forced_text_bound(schema) > JUMP_MAX_FORCED_CHARS, schema
        g = compiled(backends["xgrammar"], "json_schema", json.dumps(schema))
        assert not isinstance(g, InvalidGrammarObject) and g.jump_forward(tokenizer) is None
    g = compiled(backends["xgrammar"], "json_schema", json.dumps(nulls(3)))
    assert g.jump_forward(tokenizer)[0].startswith(b'{"k0": null, "k1": null, "k2": null')
    # a regex's shortest match counts (the same search); a short one still jumps
    g = compiled(backends["xgrammar"], "regex", "(?:abcdefghij){2000}")
    assert not isinstance(g, InvalidGrammarObject) and g.jump_forward(tokenizer) is None
    assert compiled(backends["xgrammar"], "regex", "(?:abcdefghij){3}").jump_forward(tokenizer)[0] == b"abcdefghij" * 3
    # a tag's own text counts: a begin past the bound, around a small schema
    begin = "<a>" + "x" * JUMP_MAX_FORCED_CHARS
    tag = {
        "structures": [{"begin": begin, "schema": nulls(3), "end": "</a>"}],
        "triggers": ["<a>"],
        "at_least_one": True,
    }
    g = compiled(backends["xgrammar"], "structural_tag", json.dumps(tag))
    assert not isinstance(g, InvalidGrammarObject) and g.jump_forward(tokenizer) is None


@pytest.mark.parametrize("name", ["xgrammar", "llguidance"])
def test_a_slow_search_stops_every_copy_of_a_librarys_grammar(backends, name):
    """A library's jump search is one native call: once the scheduler says one took longer
    than a call may (`search_was_slow`), no copy of that grammar searches again, the
    request's other choices and later requests alike."""
    backend = backends[name]
    first, second = compiled(backend, "regex", "abc[0-9]"), compiled(backend, "regex", "abc[0-9]")
    assert first.jump_forward(backend.tokenizer)[0] == b"abc"
    first.search_was_slow()
    later = compiled(backend, "regex", "abc[0-9]")
    assert second.jump_forward(backend.tokenizer) is None and later.jump_forward(backend.tokenizer) is None


@pytest.mark.parametrize("name", BACKENDS)
def test_a_boolean_root_schema_compiles(backends, tokenizer, name):
    """`true` allows any JSON value (llguidance refused it, asking for an object; outlines-core
    reads it as `{}` now, whose numbers it cannot finish, and says that)."""
    g = compiled(backends[name], "json_schema", "true")
    if name == "outlines":
        assert isinstance(g, InvalidGrammarObject) and DROPS_MOVES in g.message
        return
    assert not isinstance(g, InvalidGrammarObject), g.message
    for t in tokenizer.encode('[1, "a"]'):
        g.accept_token(t)
    assert mask_row(g, tokenizer.vocab_size + PAD)[tokenizer.eos_token_id]


@pytest.mark.parametrize("name", BACKENDS)
@pytest.mark.parametrize("fmt", ["idn-email", "regex", "made-up"])
def test_a_format_no_backend_writes_is_refused_not_read_as_an_annotation(backends, name, fmt):
    """xgrammar read `idn-email` as an annotation and wrote `": {"` under finish_reason stop
    (a stranger's fuzzer); every backend now refuses a format it cannot write, by name."""
    g = compiled(backends[name], "json_schema", json.dumps({**S, "format": fmt}))
    assert isinstance(g, InvalidGrammarObject) and f"'format': {fmt!r} at # is not supported" in g.message, g
    # On a value that is no string a format asserts nothing: OpenAPI's integer `int32` compiles.
    g = compiled(backends[name], "json_schema", json.dumps({**INT, "format": "int32"}))
    assert not isinstance(g, InvalidGrammarObject), g.message


def test_xgrammar_writes_an_optional_mark_as_a_count():
    from minisglang.backends.xgrammar_backend import optional_as_count

    assert optional_as_count(r"(?:a\.[0-9]+)?b?[?]\?") == r"(?:a\.[0-9]+){0,1}b{0,1}[?]\?"
    assert optional_as_count("[]?]?") == "[]?]{0,1}"


@pytest.mark.parametrize("name", BACKENDS)
def test_a_pattern_of_an_astral_character_is_read_as_one_code_point(backends, tokenizer, name):
    """`\\ud83d\\ude00` in a JSON Schema pattern is one character, U+1F600 (ECMA-262 with the
    u flag): its UTF-8 or its escape may start the string, a surrogate's lead (ED) may not. xgrammar
    read the two escapes as two surrogates and walked into ED, then found no UTF-8 way on."""
    width = tokenizer.vocab_size + PAD
    g = compiled(backends[name], "json_schema", json.dumps({**S, "pattern": "^\ud83d\ude00+$"}))
    assert not isinstance(g, InvalidGrammarObject), g.message
    for t in tokenizer.encode('"', add_special_tokens=False):
        g.accept_token(t)
    row = mask_row(g, width)
    assert not row[_byte_token(tokenizer, 0xED)], f"{name}: a surrogate's lead ED is allowed for U+1F600"
    firsts = {tokenizer.decode_bytes([t], skip_special_tokens=False)[:1] for t in row.nonzero().flatten().tolist()}
    assert firsts & {b"\xf0", b"\\"}, f"{name}: neither U+1F600's bytes nor its escape can start: {firsts}"


def test_llguidance_names_a_grammar_nested_past_its_reader(backends):
    """500 nested parentheses: the GBNF reader is recursive Python; the refusal says what is
    wrong with the grammar, not Python's "maximum recursion depth" (a stranger's attack)."""
    with pytest.raises(GrammarError) as refused:
        backends["llguidance"].compile("ebnf", "root ::= " + "(" * 500 + '"a"' + ")" * 500)
    assert "nests too deeply" in str(refused.value) and "recursion depth" not in str(refused.value)


# Outlines' arithmetic grammar (outlines.grammars): Lark with `?` (inline) rules, the start too.
OUTLINES_ARITHMETIC = r"""
?start: expression
?expression: term (("+" | "-") term)*
?term: factor (("*" | "/") factor)*
?factor: NUMBER | "-" factor | "(" expression ")"
%import common.NUMBER
"""


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


@pytest.mark.parametrize(
    "text, lark",
    [
        (OUTLINES_ARITHMETIC, True),
        ('start: "a" WS\n%import common.WS\n', True),
        ('root ::= x\nx ::= "a" (', False),  # GBNF with a mistake: no word about Lark
    ],
)
def test_xgrammar_says_when_a_grammar_it_refuses_is_lark(backends, text, lark):
    """Outlines' and vLLM's grammars are Lark: xgrammar refused them with "Unexpected
    character: ':'" alone; the refusal now says what the text is and which backend reads it."""
    g = compiled(backends["xgrammar"], "ebnf", text)
    assert isinstance(g, InvalidGrammarObject)
    assert ("looks like a Lark grammar" in g.message) == lark, g.message
    assert ("'llguidance' grammar backend reads both" in g.message) == lark


def test_llguidance_reads_a_gbnf_rule_named_start_as_gbnf(backends, tokenizer):
    """`start ::=` is a GBNF rule, not Lark's `start:`: the text went to llguidance's Lark
    parser and was refused ("Expected token '_', found '='")."""
    g = compiled(backends["llguidance"], "ebnf", 'root ::= start "!"\nstart ::= "go"')
    assert not isinstance(g, InvalidGrammarObject), g.message
    assert matches_whole(g, tokenizer, "go!")


# GBNF classes that Rust's regex would read with set operators (&& intersection, -- difference,
# ~~ symmetric difference), and the characters of PROBE each holds as GBNF (llama.cpp, xgrammar)
# reads it: characters and ranges only.
GBNF_CLASSES = [
    ("[^0-9&&a-z]", "~-!+,"),
    ("[^x&&y]", "a~-!+,b05"),
    ("[x&&y]", "xy&"),
    ("[^a~~a]", "xy&-!+,b05"),
    ("[+--]", "+,-"),
    ("[^+--]", "xy&a~!b05"),
    ("[a-c--]", "ab-"),
    ("[/[a]", "a"),
]
PROBE = "xy&a~-!+,b05"


@pytest.mark.parametrize("name", sorted(EBNF_SUPPORTED))
@pytest.mark.parametrize("cls, holds", GBNF_CLASSES)
def test_a_gbnf_character_class_holds_what_gbnf_reads(backends, tokenizer, name, cls, holds):
    """llguidance's GBNF converter copied a class into a Rust regex as it was: `[^0-9&&a-z]`
    became "not (a digit and a letter)", every character, so the model could write digits
    and letters the grammar forbids; `[^+--]` let ',' and '-' in."""
    g = compiled(backends[name], "ebnf", f"root ::= {cls}")
    assert not isinstance(g, InvalidGrammarObject), g.message
    row = mask_row(g, tokenizer.vocab_size + PAD)
    allowed = {ch for ch in PROBE if row[_byte_token(tokenizer, ord(ch))]}
    assert allowed == set(holds) & set(PROBE), f"{name} {cls}"


@pytest.mark.parametrize("name", ["llguidance", "xgrammar"])
def test_a_gbnf_dot_is_any_character(backends, tokenizer, name):
    """GBNF's `.` is any character (llama.cpp's CHAR_ANY, a newline too): llguidance's
    converter wrote Rust's `.`, which leaves out '\\n', so `"<" . ">"` refused "<\\n>";
    xgrammar refused the grammar (it read `.` as a rule's name)."""
    g = compiled(backends[name], "ebnf", 'root ::= "<" . ">"')
    assert not isinstance(g, InvalidGrammarObject), g.message
    g.accept_token(_byte_token(tokenizer, ord("<")))
    row = mask_row(g, tokenizer.vocab_size + PAD)
    assert row[_byte_token(tokenizer, ord("\n"))] and row[_byte_token(tokenizer, ord("a"))]
    assert not row[tokenizer.eos_token_id]


def matches_whole(g, tokenizer, text: str) -> bool:
    """Whether matcher `g` takes `text` (its tokens, each allowed by the mask) and then EOS."""
    width = tokenizer.vocab_size + PAD
    for t in tokenizer.encode(text, add_special_tokens=False):
        if not mask_row(g, width)[t]:
            return False
        g.accept_token(t)
    return bool(mask_row(g, width)[tokenizer.eos_token_id])


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


@pytest.mark.parametrize("name", sorted(EBNF_SUPPORTED))
@pytest.mark.parametrize("gbnf, texts", GBNF_TEXTS)
def test_a_gbnf_grammar_takes_every_text_of_its_language(backends, tokenizer, name, gbnf, texts):
    """llguidance's converter made each rule of terminals only one greedy lexeme: llama.cpp's
    arithmetic.gbnf swallowed each line's "\\n" into `ident`'s trailing `ws` and allowed no
    complete output at all (a request ran to max_new_tokens writing whitespace); the string
    lexeme "while" refused the identifier "whx"; "\\u00e9a" was refused ("\\ue9a")."""
    for text in texts:
        g = compiled(backends[name], "ebnf", gbnf)
        assert not isinstance(g, InvalidGrammarObject), g.message
        assert matches_whole(g, tokenizer, text), f"{name} refuses {text!r}"


def test_the_fsm_backend_takes_the_regular_gbnf_grammars_language_and_refuses_the_recursive_one(backends, tokenizer):
    """The same grammars on the fsm backend: the three whose rules never refer to themselves
    take every text above (as xgrammar and llguidance do); arithmetic.gbnf, recursive through
    `expr -> term -> expr`, is refused naming that cycle."""
    for gbnf, texts in GBNF_TEXTS:
        g = compiled(backends["fsm"], "ebnf", gbnf)
        if "expr ::=" in gbnf:
            assert isinstance(g, InvalidGrammarObject) and "expr -> term -> expr" in g.message
            continue
        for text in texts:
            g = compiled(backends["fsm"], "ebnf", gbnf)
            assert matches_whole(g, tokenizer, text), f"fsm refuses {text!r}"


WEATHER_TAG = {
    "structures": [{"begin": "<function=w>", "schema": {"type": "object"}, "end": "</function>"}],
    "triggers": ["<function="],
}


@pytest.mark.parametrize("name", ["fsm", "xgrammar", "llguidance"])
def test_a_structural_tags_free_text_stays_utf8(backends, tokenizer, name):
    """Free text is text: xgrammar's is any bytes, so its outputs began with a lone
    continuation byte, had a lead followed by ASCII, or ended (EOS) inside a character,
    and read U+FFFD ('IPh\ufffd' where the fsm backend wrote 'IPh翨')."""
    width = tokenizer.vocab_size + PAD
    g = compiled(backends[name], "structural_tag", json.dumps(WEATHER_TAG))
    assert not isinstance(g, InvalidGrammarObject), g.message
    eos, a = tokenizer.eos_token_id, _byte_token(tokenizer, ord("a"))
    assert not mask_row(g, width)[_byte_token(tokenizer, 0x80)], f"{name}: a continuation byte starts the text"
    for byte in "翨".encode():  # E7 BF A8
        row = mask_row(g, width)
        assert row[_byte_token(tokenizer, byte)]
        g.accept_token(_byte_token(tokenizer, byte))
        if byte != 0xA8:
            row = mask_row(g, width)
            assert not row[eos] and not row[a], f"{name}: EOS or 'a' inside a character"
    row = mask_row(g, width)
    assert row[eos] and row[a]


def test_fsm_seam_checks_walk_each_output_token_once(backends, tokenizer, monkeypatch):
    """s4's seam rule asks `allowed_after` the output after every token it gives back, of
    every jump. It walked the automaton from the start each time: a request's checks cost
    its whole output per jump on the scheduler thread, outside any budget (16 greedy
    requests of ~1000 tokens: 1.3 million transitions in 400 steps, every client's steps
    ~3 ms longer). Each token of a growing output is walked once now, and a prefix that
    differs (a re-encoded jump) is walked from where it differs, with the same answers."""
    g = compiled(backends["fsm"], "regex", r'\[(\{"name": "[a-z]", "value": [0-9]\}, )+\]')
    ids = tokenizer.encode("[" + '{"name": "a", "value": 9}, ' * 40)
    # What a request's seam checks ask, jump after jump: its output so far, and a few
    # tokens less (the tail given back); then a prefix that differs near the end, and one
    # the grammar rejects.
    asked = [ids[: k - back] for k in range(8, len(ids) + 1, 4) for back in (0, 1, 2)]
    asked += [ids[:-3] + tokenizer.encode("x"), ids[:10]]
    index = g.fsm.index
    expected = [None if g.fsm.walk(p) < 0 else index.allowed_token_ids(g.fsm.walk(p)) for p in asked]
    steps = []
    next_state = index.next_state
    monkeypatch.setattr(index, "next_state", lambda s, t: steps.append(t) or next_state(s, t), raising=False)
    assert [g.allowed_after(p) for p in asked] == expected
    assert expected[-2] is None  # (the rejected prefix)
    assert len(steps) <= len(ids) + 4  # not the 87,240 of a walk from the start each time


# ------------------------------------------------------------- a stranger's vocabularies
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


def test_xgrammar_never_allows_a_token_holding_a_surrogates_bytes(tmp_path):
    """A vocabulary with tokens `ED A0 80` (U+D800's bytes), `ED A0` and `a ED BF BF`: xgrammar
    reads `.` and `[^"]` as every code point, surrogates included, and allowed all three at
    the start of `.+`; the guard checked only the byte after a token ending in ED. Such a
    token is no UTF-8 wherever it goes, so no row allows it; `a` and `é` stay allowed."""
    bad = [b"\xed\xa0\x80", b"\xed\xa0", b"a\xed\xbf\xbf"]
    tok = byte_level_tokenizer(tmp_path, [*bad, "é".encode(), b"\xed\x9f\xbf"])
    ids = [tok.token_bytes.index(data) for data in bad]
    width = tok.vocab_size + 9
    backend = get_backend_class("xgrammar")(tok, width, compile_in="thread")
    try:
        for regex in (".+", '[^"]*"', "(.|\n)+"):
            g = backend.compile("regex", regex)
            row = mask_row(g, width)
            assert not row[ids].any(), (regex, [tok.token_bytes[i] for i in ids if row[i]])
            assert row[ord("a")] and row[tok.token_bytes.index("é".encode())]
            assert row[tok.token_bytes.index(b"\xed\x9f\xbf")]  # U+D7FF: ED, then a second byte it allows
            g.accept_token(ord("a"))  # (a row after a token not ending in a lead: the same)
            assert not mask_row(g, width)[ids].any()
    finally:
        backend.shutdown()


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


@pytest.mark.parametrize(
    ("regex", "before"),
    [
        (r"[a-z]{2}[\u0400-\u04ff]x", ""),
        (r"[a-z]{1,3}[c-я]", ""),
        (r".{2}[\u0400-\u04ff]x", ""),
        (r":[^b]{1,3}[c-中][.-z]*", ":"),
        (r":[^b]?[^b]?[c-中][.-z]*", ":"),
        (r"[A-Z]+\d\d", ""),
        (r"[A-Z]{1,20}[\u0660-\u0661]x", ""),
        (r"(?:[A-Z]+|b)[\u0660-\u0661]x", ""),
        (r"[A-Z]{20}[\u0660-\u0661]x", "ABCDEFGHIJKLMNOPQRS"),
        (r'"+\w\w', '"'),
        (r'"*\w\w', '"'),
        (r":+\d\d", ":"),
        (r"(?:\{|AB\})?\d\d", ""),  # (a stranger's differential fuzzing: `{"` allowed)
        (r"(?:\{|AB\}|)\d\d", ""),
        # (past 16 copies, `X{17}X` was wrong too: `function` forbidden; a stranger's fuzzing)
        (r"[c-я]{18}", "temperhiki"),
        (r"[c-я]{18,}!", "temperhiki"),
        (r"[c-я]{40}[\u0400-\u04ff]x", "temperhikitemperhikitemperhiki"),
    ],
)
def test_xgrammar_masks_a_repeated_class_before_multibyte_characters_as_the_fsm_does(
    backends, tokenizer, regex, before
):
    """xgrammar's mask for a repetition of a class followed by a class of multi-byte
    characters is wrong where a token crosses the repetition's end: `[a-z]{2}[\\u0400-\\u04ff]x`
    allowed 548 tokens such as `acc` that its matcher then refused (the request aborted), and
    `[a-z]{1,3}[c-я]` forbade 383 valid ones such as `able`; `[A-Z]+\\d\\d` allowed `He`,
    `"*\\w\\w` after `"` allowed `":` (`\\w` and `\\d` hold multi-byte digits and letters), and
    `X{20}`, `X{1,20}` did the same at their ends. The adapter writes each repetition of one
    class with its last required copy alone and the rest counted from 0 (`XX{0,}`, `X{19}X`:
    portable_regex's spell_counts_up_to), which xgrammar masks right; `X?` as `X{0,1}` (after
    ":" in `:[^b]?[^b]?[c-中]`, " true" was forbidden), for a group too (`(?:\\{|AB\\})?\\d\\d`
    allowed `{"`), and an empty alternative the same way."""
    width = tokenizer.vocab_size + PAD
    rows = []
    for name in ("xgrammar", "fsm"):
        g = compiled(backends[name], "regex", regex)
        for t in tokenizer.encode(before):
            g.accept_token(t)
        rows.append(mask_row(g, width))
    differ = (rows[0] != rows[1]).nonzero().flatten().tolist()
    assert not differ, [(tokenizer.token_bytes[t], bool(rows[0][t])) for t in differ[:5]]


_REPEATED = st.sampled_from(['"', ":", "[A-Z]", "[a-z0-9]", "\\d", "é"])
_AFTER = st.sampled_from(["\\d", "\\w", "[\\u0660-\\u0669]", "[\\u0400-\\u04ff]", "x"])


@st.composite
def _repeated_then_classes(draw) -> str:
    """A repetition of a class (its end within a few tokens: low <= 3), then two classes."""
    low = draw(st.integers(0, 3))
    high = draw(st.one_of(st.none(), st.integers(max(low, 1), low + 3)))
    bounds = (
        draw(st.sampled_from(["+", "*", "?"])) if draw(st.booleans()) else f"{{{low},{'' if high is None else high}}}"
    )
    return draw(_REPEATED) + bounds + draw(_AFTER) + draw(_AFTER)


@settings(max_examples=12, deadline=None)
@given(regex=_repeated_then_classes(), data=st.data())
def test_xgrammars_masks_over_repeated_classes_are_the_fsm_backends(backends, tokenizer, regex, data):
    """The property behind the cases above: along a random walk, xgrammar's mask over
    repetitions of a class beside classes of multi-byte characters is the fsm backend's."""
    lib, fsm = compiled(backends["xgrammar"], "regex", regex), compiled(backends["fsm"], "regex", regex)
    assume(not isinstance(lib, InvalidGrammarObject))  # (a regex too long for xgrammar's compile)
    walk_beside_the_fsm("xgrammar", lib, fsm, tokenizer, data.draw(st.integers(0, 6), label="steps"), data)


# (schema, a string it takes, as JSON text): xgrammar 0.2.9 reads a JSON pattern it cannot
# inline with its `json_string` reader, which let no `\"`, `\\` or `\n` escape into an optional
# part or an alternation; `^(?:b\n)?$` after `"b` allowed nothing (a stranger's fuzzing), and a
# string with minLength/maxLength (written as a pattern) never held a quote or a newline
JSON_TEXT_CASES = [
    ({**S, "pattern": "^(?:b\\n)?$"}, '"b\\n"'),
    ({**S, "pattern": "^[^a]*$"}, '"x\\"y\\\\z\\n"'),
    ({**S, "pattern": "^a.c$"}, '"a\\"c"'),
    ({**S, "pattern": "^(?:x|\\\\)+$"}, '"x\\\\x"'),
    ({**S, "pattern": '^(?:"|y){2}$'}, '"\\"y"'),
    ({**S, "maxLength": 4}, '"a\\"\\né"'),
    ({**S, "minLength": 2, "maxLength": 20}, '"' + "é" * 18 + '\\n中"'),
    ({**S, "maxLength": 40}, '"' + "temperhiki" * 3 + "я" * 9 + '\\""'),
]


@pytest.mark.parametrize("schema, text", JSON_TEXT_CASES)
def test_xgrammar_masks_json_escapes_in_patterns_and_lengths_as_the_fsm_does(backends, tokenizer, schema, text):
    """Along a string its schema takes, xgrammar's mask is the fsm backend's (the adapter
    hands a pattern over as a plain regex over the string's JSON text: library_children's
    `xgrammar_compiled`; and lengths as the fsm backend counts them)."""
    jsonschema.validate(json.loads(text), schema)
    lib = compiled(backends["xgrammar"], "json_schema", json.dumps(schema))
    fsm = compiled(backends["fsm"], "json_schema", json.dumps(schema))
    along_text_beside_the_fsm("xgrammar", lib, fsm, tokenizer, text)


@pytest.mark.parametrize(
    "value, text",
    [
        ({"const": "éa"}, '"éa"'),
        ({"enum": ["décembre", "mars"]}, '"décembre"'),
        ({"const": "ÿ1\u00a0b"}, '"ÿ1\u00a0b"'),
    ],
)
def test_xgrammar_reads_latin1_literals_back_as_they_were(backends, tokenizer, value, text):
    """Beside a string read as a plain regex (a length here) the grammar is printed and read
    back; xgrammar prints U+007F-U+00FF as `\\xHH` and reads every hex digit after `\\x`, so
    a const "éa" came back as U+0E9A: the valid text refused, `"ບ"` written (a stranger's
    fuzzing). library_children.plain_regexes writes them `\\u00HH`."""
    schema = {"type": "object", "properties": {"s": {**S, "maxLength": 5}, "m": value}, "required": ["s", "m"]}
    good = '{"s": "x", "m": ' + text + "}"
    jsonschema.validate(json.loads(good), schema)
    assert accepts(backends["xgrammar"], tokenizer, json.dumps(schema), good, kind="json_schema")
    bad = '{"s": "x", "m": "' + chr(0x0E9A) + '"}'
    assert not accepts(backends["xgrammar"], tokenizer, json.dumps(schema), bad, kind="json_schema")


_PATTERN_PART = st.sampled_from(["a", ".", "[^a]", '"', "\\\\", "\\n", '[\\\\"]', "é", "[x-z]"])


@st.composite
def _escaping_pattern(draw) -> str:
    """A pattern of two or three parts, each maybe optional, repeated or one of two."""
    parts: list[str] = []
    for _ in range(draw(st.integers(2, 3))):
        part = draw(_PATTERN_PART)
        shape = draw(st.sampled_from(["{}", "(?:{})?", "(?:{})*", "(?:{}|{})"]))
        parts.append(shape.format(part, draw(_PATTERN_PART)) if shape.count("{}") == 2 else shape.format(part))
    return "^" + "".join(parts) + "$"


@settings(max_examples=10, deadline=None)
@given(pattern=_escaping_pattern(), data=st.data())
def test_xgrammars_masks_over_json_escapes_in_patterns_are_the_fsm_backends(backends, tokenizer, pattern, data):
    """The property behind the cases above: along a random walk, xgrammar's mask of a string
    whose pattern holds quotes, backslashes, newlines, `.` or a negated class in optional,
    repeated or alternative parts (or that has a length) is the fsm backend's."""
    lengths = data.draw(st.sampled_from([{}, {"maxLength": 3}, {"minLength": 1, "maxLength": 18}]), label="lengths")
    schema = json.dumps({"type": "string", **lengths} if lengths else {"type": "string", "pattern": pattern})
    lib, fsm = compiled(backends["xgrammar"], "json_schema", schema), compiled(backends["fsm"], "json_schema", schema)
    walk_beside_the_fsm("xgrammar", lib, fsm, tokenizer, data.draw(st.integers(0, 6), label="steps"), data)


def test_llguidances_parser_limit_is_named_as_a_limit_not_as_an_empty_language(backends, tokenizer):
    """An ambiguous grammar (a stranger's random GBNF) reaches llguidance's parser item limit
    at its first mask: the abort says a limit was reached, not that the grammar allows no text
    (it allows plenty)."""
    from minisglang.backends.base import GrammarError

    grammar = compiled(
        backends["llguidance"],
        "ebnf",
        'root ::= r2* ([,x]+ ("bax" | [cb-c]) ("9"? | "^-9" | "]\\"")) "x -"\n'
        'r2 ::= ([^\\nx -9]? ([^bb-艳]+ "-9 "? [x\\\\])*)+',
    )
    with pytest.raises(GrammarError, match=r"llguidance's parser reached a limit on this grammar here: .*limit 50000"):
        mask_row(grammar, tokenizer.vocab_size + PAD)


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


# llama.cpp's grammars/json.gbnf, as it is written there: `ws ::= | " " | ...` starts with an
# empty alternative.
LLAMA_CPP_JSON_GBNF = r"""root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws

# Optional space: by convention, applied in this grammar after literal chars when allowed
ws ::= | " " | "\n" [ \t]{0,20}
"""


@pytest.mark.parametrize(
    "text, spelled",
    [
        ('ws ::= | " "', 'ws ::= "" | " "'),
        ('r ::= "a" ( | "x") "b"', 'r ::= "a" ( "" | "x") "b"'),
        ('r ::= ("a" | ) x', 'r ::= ("a" | "" ) x'),
        ('r ::= ("a" || "b")', 'r ::= ("a" |"" | "b")'),
        ('r ::= "<" . ">" "."', 'r ::= "<" [\\u0000-\\U0010FFFF] ">" "."'),
        ('r ::= "|(" [|(] "\\"|" # ( |\nx ::= "a" | "b"', 'r ::= "|(" [|(] "\\"|" # ( |\nx ::= "a" | "b"'),
        ('r ::= "\\[x\\]" [\\[\\]] "\\\\[" "\\\\\\]"', 'r ::= "[x]" [\\[\\]] "\\\\[" "\\\\]"'),
        ('r ::=\nx ::= r "a"', 'r ::="" \nx ::= r "a"'),
        ('x ::= r "a"\nr ::= # nothing\n', 'x ::= r "a"\nr ::= "" # nothing\n'),
        ('r ::= (\n  "a" |\n)', 'r ::= (\n  "a" |\n"" )'),
        ("x ::= r\nr ::=", 'x ::= r\nr ::=""'),
        ('r ::= "a" | ', 'r ::= "a" | ""'),  # (a stranger's differential fuzzing)
        ('r ::= "a" |\n', 'r ::= "a" |\n""'),
    ],
)
def test_empty_gbnf_alternatives_and_dots_are_spelled_for_xgrammar_and_nothing_else_changes(text, spelled):
    from minisglang.backends.xgrammar_backend import gbnf_for_xgrammar

    assert gbnf_for_xgrammar(text) == spelled


@pytest.mark.parametrize(
    "text", ["# A grammar for Japanese\nroot ::= [ぁ-ゟ]+\n", '\nroot ::= "a"\n', '  # c\n\nroot ::= "a"']
)
def test_a_gbnf_grammar_opening_with_a_comment_or_a_blank_line_is_spelled_as_it_is(text):
    """A comment or a blank line before the first rule (llama.cpp's japanese.gbnf, english.gbnf,
    json.gbnf open with a comment; a triple-quoted grammar with a newline) was taken for the end
    of an empty rule: `""` was written before it and xgrammar refused the grammar ("Expect rule
    name", line 1, column 1)."""
    import xgrammar as xgr

    from minisglang.backends.xgrammar_backend import gbnf_for_xgrammar

    assert gbnf_for_xgrammar(text) == text
    xgr.Grammar.from_ebnf(gbnf_for_xgrammar(text))  # (raised RuntimeError)


def test_a_gbnf_hex_escape_followed_by_a_hex_digit_means_two_characters_to_xgrammar_too():
    """llama.cpp reads exactly two hex digits after `\\x` (so does the fsm backend); xgrammar reads
    every hex digit that follows: `"\\x41B"` was U+041B ("Л") there instead of "AB", and
    `[\\x41-\\x5ab]` took "c"."""
    import xgrammar as xgr

    from minisglang.backends.xgrammar_backend import gbnf_for_xgrammar

    info = xgr.TokenizerInfo([])
    for grammar, text, ok in [
        ('root ::= "\\x41B"', "AB", True),
        ('root ::= "\\x41B"', "\u041b", False),
        ("root ::= [\\x41-\\x5ab]", "b", True),
        ("root ::= [\\x41-\\x5ab]", "c", False),
        ('root ::= "\\x4"', "\x04", True),  # (one digit: left to xgrammar as it was)
    ]:
        compiled = xgr.GrammarCompiler(info, cache_enabled=False).compile_grammar(gbnf_for_xgrammar(grammar))
        matcher = xgr.GrammarMatcher(compiled, terminate_without_stop_token=True)
        assert (matcher.accept_string(text) and matcher.is_terminated()) == ok, (grammar, text)


def test_the_fsm_backend_suggests_another_backend_only_for_gbnf_it_does_not_take():
    """Every refusal of an ebnf grammar said "served here only when it is regular ... use the
    'xgrammar' or 'llguidance' grammar backend", also for a text no backend reads (a string left
    open, no root rule): only a grammar those backends serve names them."""
    from minisglang.backends.fsm_backend import FSMBackend

    for grammar, elsewhere in [('root ::= "x', False), ('Root ::= "x"', False), ('root ::= "(" root ")" | "x"', True)]:
        with pytest.raises(GrammarError) as refused:
            FSMBackend.ebnf_tree(grammar)
        assert ("'xgrammar' or 'llguidance'" in str(refused.value)) == elsewhere, str(refused.value)
        assert ("not GBNF" in str(refused.value)) != elsewhere, str(refused.value)


def test_the_fsm_backend_refuses_an_ebnf_grammar_longer_than_a_regex_may_be(backends):
    """An ebnf grammar had no length bound (a regex and a v2 structural tag's grammar have
    max_regex_chars): a 2.8 MB `root ::= ("a" | "b")? ("a" | "b")? ...` in one request was
    read with no pause and its automaton's start took minutes and gigabytes after the request
    had timed out, beside every other client's decode. It is refused by its length, named."""
    grammar = "root ::= " + '("a" | "b")? ' * 8000
    refused = compiled(backends["fsm"], "ebnf", grammar)
    assert isinstance(refused, InvalidGrammarObject)
    assert "ebnf grammar of 104,009 characters is longer than the limit of 100,000 (option max_regex_chars)" in (
        refused.message
    )


def test_the_eager_fsm_backend_refuses_an_ebnf_chain_that_doubles_before_writing_its_regex(tokenizer, monkeypatch):
    """`r0 ::= r1 r1`, `r1 ::= r2 r2`, ... is one short shared tree, but its Python regex, what
    the eager automaton compiles, writes each shared rule out in full: 40 deep, 2^40 characters.
    The backend rendered it all (30 deep: a gigabyte string built in the server process) before
    the service's length check; it is refused by its size, naming the option, with nothing written."""
    from minisglang.backends import fsm_backend
    from minisglang.constrained.token_fsm import ConstraintError

    chain = "\n".join([f"r{i} ::= r{i + 1} r{i + 1}" for i in range(40)] + ['r40 ::= "a"'])
    backend = fsm_backend.FSMBackend(tokenizer, tokenizer.vocab_size, automaton="eager", compile_in="thread")
    try:
        # (Writing it would take hours: render stands for it, and writes the regex "x".)
        monkeypatch.setattr(fsm_backend, "render", lambda *args: "x")
        with pytest.raises(ConstraintError, match=r"1,099,511,627,776 characters .* max_regex_chars"):
            backend.compile("ebnf", chain.replace("r0 ::=", "root ::="))
    finally:
        backend.shutdown()


def test_bracket_escapes_in_gbnf_strings_are_served_by_xgrammar(backends, tokenizer):
    """llama.cpp reads `\\[` and `\\]` in a string as the brackets; xgrammar refused the
    grammar ("Invalid escape", a grammar_ports stranger's find)."""
    grammar = compiled(backends["xgrammar"], "ebnf", 'root ::= "\\[" [a-z]+ "\\]"')
    assert not isinstance(grammar, InvalidGrammarObject), getattr(grammar, "message", "")
    width = tokenizer.vocab_size + PAD
    for t in tokenizer.encode("[ab]"):
        assert mask_row(grammar, width)[t]
        grammar.accept_token(t)
    assert mask_row(grammar, width)[tokenizer.eos_token_id]


def test_llama_cpps_own_json_gbnf_is_served_by_xgrammar(backends, tokenizer):
    """xgrammar refused llama.cpp's json.gbnf ("Expect element": its `ws` starts with an empty
    alternative, a grammar_ports stranger's find); written `""` it is the same language."""
    width = tokenizer.vocab_size + PAD
    for text, ok in [('{"a": [1, -2.5e3, "x\\n"], "b" : null}', True), ('{"a":\n  true}', True), ("{a}", False)]:
        grammar = compiled(backends["xgrammar"], "ebnf", LLAMA_CPP_JSON_GBNF)
        assert not isinstance(grammar, InvalidGrammarObject), getattr(grammar, "message", "")
        accepted = True
        for t in tokenizer.encode(text):
            if not mask_row(grammar, width)[t]:
                accepted = False
                break
            grammar.accept_token(t)
        assert (accepted and bool(mask_row(grammar, width)[tokenizer.eos_token_id])) == ok, text


def test_a_lazy_grammar_that_requests_grew_near_its_bounds_is_compiled_again(tokenizer):
    """max_lazy_states bounds the states one compiled lazy automaton builds over its life,
    and the grammar cache keeps that automaton for every request over it: a stranger's
    six requests under `(a|b)*a(a|b){12}` (max_lazy_states=4000), each 60 random tokens,
    the first built 3,024 states and every later one was aborted after 2-26 tokens ('more
    than 4,000 automaton states') where a fresh server served it. Past half the room the
    compile left, the next request gets a fresh compile; the one before keeps its own."""
    import random

    backend = get_backend_class("fsm")(tokenizer, tokenizer.vocab_size, compile_in="thread", max_lazy_states=4000)
    regex, eos = "(a|b)*a(a|b){12}", tokenizer.eos_token_id
    try:

        def request(seed: int, steps: int = 60):
            value, ready = backend.get_cached_or_future_value("regex", regex)
            if not ready:
                value.result()  # (the compile, on the backend's thread)
            grammar = value if ready else backend.result(value)
            assert isinstance(grammar, FSMGrammar)
            rng = random.Random(seed)
            for _ in range(steps):
                grammar.prepare()
                index = grammar.fsm.index
                grammar.accept_token(rng.choice([t for t in index.allowed_token_ids(grammar.state) if t != eos]))
            return grammar

        first = request(0)
        assert backend.compile_count == 1
        compiles = backend.compile_count
        for seed in range(1, 6):
            request(seed)  # each served to its end
        assert backend.compile_count > compiles  # (a grammar grown past half its room compiled again)
        first.accept_token(next(t for t in first.fsm.index.allowed_token_ids(first.state) if t != eos))
        short = get_backend_class("fsm")(tokenizer, tokenizer.vocab_size, compile_in="thread")
        try:  # far from its bounds: one compile for every request
            for _ in range(3):
                grammar, ready = short.get_cached_or_future_value("regex", "[ab]{1,3}")
                if not ready:
                    grammar.result()
            assert short.compile_count == 1
        finally:
            short.shutdown()
    finally:
        backend.shutdown()


def test_a_cancelled_compile_does_not_drop_the_compile_a_later_request_started(tokenizer):
    """A request aborted while its grammar compiled (`cancel` forgets the entry); a second
    request for the same grammar starts a compile of its own; the first compile then stops at
    a checkpoint, and its cleanup dropped whatever entry the key held: the second one. A
    third request found nothing and compiled the grammar a third time (each up to
    compile_timeout of CPU). The stopped compile removes only its own entry now."""
    import threading
    import time

    from minisglang.backends.base import BaseGrammarBackend, BaseGrammarObject
    from minisglang.constrained.work_slices import checkpoint

    go = threading.Event()

    class Matcher(BaseGrammarObject):
        def copy(self):
            return self

    class Slow(BaseGrammarBackend):
        name, kinds = "slow", frozenset({"regex"})

        def compile(self, kind, text):
            while not go.is_set():
                checkpoint()
                time.sleep(0.005)
            return Matcher()

    backend = Slow(tokenizer, tokenizer.vocab_size, threads=2)
    try:
        first, _ = backend.get_cached_or_future_value("regex", "x")
        deadline = time.monotonic() + 10
        while not first.running() and time.monotonic() < deadline:
            time.sleep(0.005)
        backend.cancel(first)  # its request left while it compiled
        second, ready = backend.get_cached_or_future_value("regex", "x")
        assert not ready and second is not first
        assert isinstance(first.result(timeout=10), InvalidGrammarObject)  # stopped at its checkpoint
        assert backend.is_cached("regex", "x")
        go.set()
        second.result(timeout=10)
        _, ready = backend.get_cached_or_future_value("regex", "x")
        assert ready and backend.compile_count <= 2
    finally:
        go.set()
        backend.shutdown()
