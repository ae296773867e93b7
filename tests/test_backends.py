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

The tests of one backend alone are in test_<name>_backend.py; the helpers these files share
(fixtures, `compiled`, `mask_row`, the walks beside the fsm backend) in grammar_backends.py.
"""

import json
import re

import jsonschema
import pytest
import torch
from grammar_backends import (
    BACKENDS,
    DROPS_MOVES,
    GBNF_TEXTS,
    INT,
    LIBRARIES,
    PAD,
    S,
    _byte_token,
    accepts,
    along_text_beside_the_fsm,
    backends_fixture,
    check_against_fsm,
    compiled,
    drops_moves,
    mask_row,
    matches_whole,
    walk_beside_the_fsm,
)
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from test_constrained_generation import CASES, USER, assert_stopped_outputs_match
from test_regex_dfa import DIALECT_CHARS, DIALECT_REGEXES

import minisglang as sgl
from minisglang.backends.base import GrammarError, InvalidGrammarObject, get_backend_class
from minisglang.constrained.bitmask import unpack_bits
from minisglang.constrained.python_regex import portable_regex
from minisglang.core import AbortKind
from minisglang.stages.s5_backends import ReasonerGrammar

backends = backends_fixture(*BACKENDS)

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


# ----------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module", params=BACKENDS)
def engine(request):
    # (compile_timeout as in `backends`: xgrammar's compile of these schemas passed 30 s at load 18)
    eng = sgl.Engine(stage="s5", grammar_backend=request.param, compile_timeout=300.0)
    yield eng
    eng.shutdown()


def reason(out) -> dict:
    return out["meta_info"]["finish_reason"]


# --------------------------------------------------------------------- engine behaviour
def test_the_regex_subset_is_the_one_asked_for():
    assert len(REGEX_CASES) == 6


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


# ------------------------------------------------------------------ masks against fsm's
# (regex, a string it matches, whether outlines-core's index equals ours on it: where it does
# not, the outlines adapter refuses the regex, drops_moves)
MASK_CASES = [
    (r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])", "2024-02-29", True),
    (r'\{"name": "[A-Za-z ]{1,20}", "age": [0-9]{1,3}\}', '{"name": "Li Lei", "age": 31}', True),
    (r"(张三|李四|王五)说(你好|再见)", "李四说再见", True),
    (r"(😀|🎉|🚀)+", "🎉🚀😀", False),
    (r"[a-z ]*x", "ab cx", False),
]


@pytest.mark.parametrize("name", LIBRARIES)
@pytest.mark.parametrize("regex, text, outlines_exact", MASK_CASES)
def test_masks_match_the_fsm_backend_along_a_match(backends, tokenizer, name, regex, text, outlines_exact):
    if name == "outlines" and not outlines_exact:
        assert drops_moves(backends[name], regex)
        return
    lib, fsm = compiled(backends[name], "regex", regex), compiled(backends["fsm"], "regex", regex)
    along_text_beside_the_fsm(name, lib, fsm, tokenizer, text, outlines_exact)


@pytest.mark.parametrize("name", LIBRARIES)
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_random_walks_keep_masks_related_to_the_fsm_backend(backends, tokenizer, name, data):
    regex = r'\{"city": "(Paris|Rome|Beijing|北京)", "age": [1-9][0-9]?, "tag": "[a-z]{1,6}"\}'
    lib, fsm = compiled(backends[name], "regex", regex), compiled(backends["fsm"], "regex", regex)
    walk_beside_the_fsm(name, lib, fsm, tokenizer, data.draw(st.integers(0, 25), label="steps"), data)


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


# ----------------------------------------------------------------- the matcher contract
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


# -------------------------------------------------------------------- one regex dialect
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


# ---------------------------------------------------------- the grammar cache (base.py)
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


def test_a_failed_compile_counts_its_text_against_the_cache_bytes(tokenizer):
    """A failed compile is cached (its requests get its message) under its key, the request's
    text; that text counted as 0 bytes, so 150 refused 1 MB schemas held 122 MiB under a
    48 MiB bound and /metrics said 0 bytes (a stranger's soak test). Every entry counts its
    key's text now, and the bound evicts refused ones as it does compiled ones."""
    from minisglang.backends.base import BaseGrammarBackend

    class Refusing(BaseGrammarBackend):
        name, kinds = "refusing", frozenset({"regex"})

        def compile(self, kind, text):
            raise GrammarError("never")

    backend = Refusing(tokenizer, tokenizer.vocab_size, max_bytes=300_000, threads=1)
    try:
        for i in range(8):
            value, ready = backend.get_cached_or_future_value("regex", f"{i}" + "x" * 100_000)
            grammar = value if ready else value.result(timeout=10)
            assert isinstance(grammar, InvalidGrammarObject)
        stats = backend.stats()
        assert 100_000 < stats["cache_bytes"] <= 300_000 + 100_100, stats
        assert stats["cache_entries"] < 8, stats
    finally:
        backend.shutdown()
