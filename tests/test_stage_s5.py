"""Stage s5: the grammar interface, the backend's cache, and our fsm backend behind it."""

import json
import re
import threading

import pytest
import torch
from token_names import token_list

import minisglang as sgl
from minisglang.backends.base import (
    BaseGrammarBackend,
    GrammarError,
    InvalidGrammarObject,
    get_backend_class,
)
from minisglang.backends.fsm_backend import FSMBackend
from minisglang.constrained.bitmask import unpack_bits
from minisglang.core import AbortKind
from minisglang.stages import s5_backends as s5
from minisglang.tokenizer import Tokenizer

Q = "<|user|>\nExtract as JSON: Li Lei is 31 years old and lives in Paris.\n<|assistant|>\n"
DATE = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"


@pytest.fixture(scope="module")
def tokenizer():
    return Tokenizer.from_pretrained(sgl.DEFAULT_MODEL_PATH)


@pytest.fixture(scope="module")
def backend(tokenizer):
    # Logits wider than the vocabulary; the eager automaton, so that task 5_1's tests do
    # not need task 5_3 (the lazy automaton's derivative).
    b = FSMBackend(tokenizer, tokenizer.vocab_size + 7, automaton="eager", compile_in="thread")
    yield b
    b.shutdown()


def compiled(backend, kind, text):
    value, ready = backend.get_cached_or_future_value(kind, text)
    return value if ready else value.result().copy()


def named(tokenizer, ids) -> str:
    """Token ids with their text, as "['20' (id 397), '24' (id 1285)]"; an id past the
    vocabulary (the logits' padding) as "padding (id N)"."""
    return token_list(
        ids, lambda t: repr(tokenizer.decode([t], skip_special_tokens=False)) if t < tokenizer.vocab_size else "padding"
    )


@pytest.mark.task5_1
def test_fsm_grammar_walks_like_the_token_index(backend, tokenizer):
    regex = r"(19|20)[0-9]{2}-(0[1-9]|1[0-2])"
    g = compiled(backend, "regex", regex)
    index = g.fsm.index
    ids = tokenizer.encode("2024-11")
    state = index.initial_state
    for t in ids:
        g.accept_token(t)
        state = index.next_state(state, t)
        assert g.state == state, (
            f"regex '{regex}', '2024-11' as the tokens {named(tokenizer, ids)}: after "
            f"accept_token({t}) ({tokenizer.decode([t])!r}) the state must be the token "
            f"index's next_state, {state}; got {g.state}"
        )
    assert g.is_terminated(), (  # accepting, and nothing but EOS may follow
        f"regex '{regex}' after '2024-11' (state {g.state}): matched, and nothing but EOS may follow, so "
        f"is_terminated() must be True; got False"
    )
    g.rollback(2)
    assert not g.is_terminated(), (
        f"regex '{regex}': after '2024-11' and rollback(2) the grammar is back at {tokenizer.decode(ids[:-2])!r} "
        f"(state {g.state}), where the match goes on, so is_terminated() must be False; got True"
    )
    x = tokenizer.encode("x")[0]
    try:
        returned = g.copy().accept_token(x)
    except Exception as error:  # the student's exception, named in the message
        assert isinstance(error, GrammarError), (
            f"accept_token({x}) ('x') in the initial state of '{regex}' must raise GrammarError (the stage "
            f"aborts the request on it); it raised {type(error).__name__}: {error}"
        )
        assert "not allowed" in str(error), (
            f"accept_token({x}) ('x') in the initial state of '{regex}' refused "
            f"the token; its GrammarError must say 'not allowed'; got: {error}"
        )
    else:
        pytest.fail(
            f"regex '{regex}': 'x' (id {x}) cannot start a match, so accept_token({x}) in the initial state "
            f"must raise GrammarError ('... is not allowed ...'); it returned {returned!r}"
        )


@pytest.mark.task5_1
def test_fsm_grammar_mask_rows_match_the_allowed_sets(backend, tokenizer):
    regex = r"\{\"a\": (1|22)\}"
    g = compiled(backend, "regex", regex)
    mask = g.allocate_vocab_mask(backend.vocab_size, 2)
    for t in tokenizer.encode('{"a": '):
        g.accept_token(t)
    g.fill_vocab_mask(mask, 1)
    allowed = unpack_bits(mask, backend.vocab_size)
    assert allowed[0].all(), (  # untouched row: all allowed
        f"fill_vocab_mask(mask, 1) fills row 1 only: row 0 must stay as allocate_vocab_mask made it, all allowed; "
        f"{int((~allowed[0]).sum())} of its {backend.vocab_size} ids are masked, e.g. "
        f"{named(tokenizer, torch.nonzero(~allowed[0]).flatten()[:5].tolist())}"
    )
    expect = torch.zeros(backend.vocab_size, dtype=torch.bool)
    expect[g.fsm.index.allowed_token_ids(g.state)] = True
    extra, missing = (
        torch.nonzero(a & ~b).flatten()[:8].tolist() for a, b in ((allowed[1], expect), (expect, allowed[1]))
    )
    assert torch.equal(allowed[1], expect), (
        f"regex '{regex}' after '{{\"a\": ' (state {g.state}): row 1 must allow exactly the token index's "
        f"{int(expect.sum())} tokens of that state; it also allows {named(tokenizer, extra)} and lacks "
        f"{named(tokenizer, missing)} (at most 8 of each shown)"
    )
    assert not allowed[1, tokenizer.vocab_size :].any(), (  # the padded tail stays masked
        f"the logits are {backend.vocab_size} wide and the vocabulary {tokenizer.vocab_size} tokens: the padding "
        f"ids from {tokenizer.vocab_size} on must stay masked in row 1; it allows "
        f"{(torch.nonzero(allowed[1, tokenizer.vocab_size :]).flatten() + tokenizer.vocab_size).tolist()}"
    )


def test_in_flight_compiles_are_shared_and_json_keys_normalised(tokenizer):
    b = FSMBackend(tokenizer, tokenizer.vocab_size)
    gate = threading.Event()
    real = b.compile
    b.compile = lambda kind, text: (gate.wait(10), real(kind, text))[1]
    futures = [b.get_cached_or_future_value("regex", DATE)[0] for _ in range(5)]
    assert all(f is futures[0] for f in futures)
    a = b.normalise("json_schema", '{"type": "integer", "minimum": 1}')
    assert a == b.normalise("json_schema", '{ "type":"integer",\n "minimum":1 }')
    # property order is key order in the output: it must not be normalised away
    assert b.normalise("json_schema", '{"properties": {"a": {}, "b": {}}}') != b.normalise(
        "json_schema", '{"properties": {"b": {}, "a": {}}}'
    )
    gate.set()
    futures[0].result()
    assert b.compile_count == 1
    g1, ready1 = b.get_cached_or_future_value("regex", DATE)
    g2, _ = b.get_cached_or_future_value("regex", DATE)
    assert ready1 and g1 is not g2 and g1.fsm is g2.fsm  # fresh matcher, shared compile
    b.shutdown()


def test_a_long_structural_tag_is_its_own_key_and_parsed_by_its_compile(tokenizer):
    """A structural tag costs ~2-7x a schema's parse per byte, and the key is made on the
    scheduler's thread: a tag past its kind's limit is keyed by its text (a 60 KiB v2 tag
    took 30-60 ms there under load), a short one is still normalised, and both compile."""
    values = [f"value-{i:05d}" for i in range(1200)]
    tag = {"type": "structural_tag", "format": {"type": "or", "elements": []}}
    tag["format"]["elements"] = [{"type": "const_string", "value": v} for v in values]
    text = json.dumps(tag)
    assert 16 * 1024 < len(text) < 64 * 1024  # under the schemas' limit, over the tags'
    assert BaseGrammarBackend.parse_for_key("structural_tag", text) == (("structural_tag", text), None)
    short = {"type": "structural_tag", "format": {"type": "const_string", "value": "yes"}}
    spaced, compact = json.dumps(short, indent=2), json.dumps(short, separators=(",", ":"))
    key, parsed = BaseGrammarBackend.parse_for_key("structural_tag", spaced)
    assert parsed is not None and key == BaseGrammarBackend.parse_for_key("structural_tag", compact)[0]
    b = FSMBackend(tokenizer, tokenizer.vocab_size, compile_in="thread")
    try:
        g = compiled(b, "structural_tag", text)
        assert not isinstance(g, InvalidGrammarObject), g
        for token in tokenizer.encode(values[777]):
            g.accept_token(token)
        mask = g.allocate_vocab_mask(tokenizer.vocab_size, 1)
        g.fill_vocab_mask(mask, 0)
        assert unpack_bits(mask[0], tokenizer.vocab_size).nonzero().flatten().tolist() == [tokenizer.eos_token_id]
    finally:
        b.shutdown()


def test_failures_become_invalid_grammar_objects(backend):
    g = compiled(backend, "regex", "(unclosed")
    assert isinstance(g, InvalidGrammarObject) and "(unclosed" in g.message
    g = compiled(backend, "ebnf", 'root ::= "a" root')
    assert isinstance(g, InvalidGrammarObject)
    assert "rule 'root' refers to itself" in g.message


def test_cache_is_lru_bounded(tokenizer):
    b = FSMBackend(tokenizer, tokenizer.vocab_size, max_entries=2)
    for r in [r"[0-9]", r"[0-9][0-9]", r"[ab]", r"[cd]"]:
        compiled(b, "regex", r)
    assert len(b.cache) <= 2
    b.shutdown()


def test_unknown_backend_name_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown grammar backend 'nope'"):
        get_backend_class("nope")
    assert issubclass(get_backend_class("fsm"), BaseGrammarBackend)


@pytest.fixture(scope="module")
def engine():
    eng = sgl.Engine(stage="s5")
    yield eng
    eng.shutdown()


def test_default_stage_is_s5_with_the_fsm_backend(engine):
    assert engine.stage.tag == "s5-backends" and engine.stage.backend.name == "fsm"


def test_mixed_batch_regex_invalid_and_unconstrained(engine):
    outs = engine.generate(
        [Q] * 4,
        [
            {"regex": DATE, "temperature": 1.0, "seed": 1},
            {"regex": "[z-a]"},
            {"temperature": 0, "max_new_tokens": 8},
            {"regex": r"(yes|no)", "temperature": 0},
        ],
    )
    assert re.fullmatch(DATE, outs[0]["text"])
    assert outs[1]["meta_info"]["finish_reason"]["type"] == "abort"
    assert "[z-a]" in outs[1]["meta_info"]["finish_reason"]["message"]
    assert outs[2]["meta_info"]["finish_reason"]["type"] in ("stop", "length")
    assert outs[3]["text"] in ("yes", "no")


def test_jump_forward_through_the_interface(engine):
    regex = r'\{"name": "[A-Za-z ]{1,12}", "age": [1-9][0-9]?, "city": "(Paris|Rome|Beijing)"\}'
    outs = engine.generate(
        [Q] * 6, [{"regex": regex, "temperature": 1.0, "seed": s, "max_new_tokens": 60} for s in range(6)]
    )
    for o in outs:
        assert re.fullmatch(regex, o["text"])
        assert o["meta_info"]["completion_tokens"] > o["meta_info"]["completion_tokens_wo_jump_forward"]


def test_reasoning_gate_needs_a_single_token_marker(engine):
    out = engine.generate(Q, {"regex": DATE, "think_end": "definitely not one token"})
    assert out["meta_info"]["finish_reason"]["type"] == "abort"
    assert "must be one token" in out["meta_info"]["finish_reason"]["message"]


def test_reasoning_gate_constrains_only_after_the_marker(engine):
    """Greedy, so the free 'thinking' is what the model writes unconstrained; its third
    token serves as the think-end marker, after which the date regex applies."""
    tok = engine.tokenizer
    free = engine.generate(Q, {"temperature": 0, "max_new_tokens": 8})["output_ids"]
    k = next(i for i in range(2, 8) if free[i] not in free[:i] and len(tok.encode(tok.decode([free[i]]))) == 1)
    marker = tok.decode([free[k]])
    out = engine.generate(Q, {"regex": DATE, "think_end": marker, "temperature": 0, "max_new_tokens": 40})
    ids = out["output_ids"]
    assert ids[: k + 1] == free[: k + 1]  # nothing was masked while thinking
    assert re.fullmatch(DATE, tok.decode(ids[k + 1 :])), out["text"]
    assert out["meta_info"]["finish_reason"]["type"] == "stop"


PERSON = r'\{"name": "[A-Za-z ]{1,12}", "age": [1-9][0-9]?, "city": "(Paris|Rome|Beijing)"\}'
# A strict request: the model answers bare JSON, so the sampled thinking reaches the marker
# (its third token) for every seed; to a loose one it writes a ```json fence only sometimes.
STRICT_Q = (
    "<|user|>\nExtract name, age and city from the following text. Reply with JSON only.\n"
    "Li Lei is 31 years old and lives in Paris.\n<|assistant|>\n"
)


@pytest.mark.parametrize("seed", range(3))
def test_a_jump_after_the_reasoning_gate_moves_only_the_answer(engine, seed):
    """The matcher saw only the answer, so a jump hands it the ids after the thinking (the
    fsm backend once walked the whole output from its start state and aborted at the first
    sampled token after a jump)."""
    tok = engine.tokenizer
    free = engine.generate(STRICT_Q, {"temperature": 0, "max_new_tokens": 8})["output_ids"]
    k = next(i for i in range(2, 8) if free[i] not in free[:i] and len(tok.encode(tok.decode([free[i]]))) == 1)
    marker = tok.decode([free[k]])
    out = engine.generate(
        STRICT_Q, {"regex": PERSON, "think_end": marker, "temperature": 0.7, "seed": seed, "max_new_tokens": 60}
    )
    meta = out["meta_info"]
    assert meta["finish_reason"]["type"] == "stop", meta["finish_reason"]
    assert meta["completion_tokens"] > meta["completion_tokens_wo_jump_forward"]  # it jumped
    thinking, _, answer = out["text"].partition(marker)
    assert re.fullmatch(PERSON, answer), out["text"]


@pytest.mark.parametrize(
    "backend, option, value",
    [
        ("xgrammar", "json_schema_options", {"any_order": True}),
        ("xgrammar", "json_schema_options", {"no_such_option": 1}),
        ("llguidance", "json_whitespace", "[ \\n]*"),
        ("outlines", "automaton", "eager"),
        ("llguidance", "compile_in", "thread"),
        ("xgrammar", "max_fsm_states", 50),
    ],
)
def test_an_option_the_backend_does_not_read_is_refused_not_ignored(tokenizer, backend, option, value):
    """Our automaton's options set on a library backend used to be accepted and ignored (a
    schema's any_order on xgrammar, even a misspelt key of json_schema_options): the stage
    refuses them by name before the backend is built."""
    options = {"grammar_backend": backend, option: value}
    ctx = s5.StageContext(tokenizer, tokenizer.vocab_size, torch.device("cpu"), options)
    with pytest.raises(ValueError, match=rf"^{option} is not read by the '{backend}' grammar backend"):
        s5.BackendStage(ctx)


def test_each_backend_reads_its_own_options_and_the_defaults_pass_everywhere():
    """`own_options` names only options of BACKEND_SPECIFIC_OPTIONS, which are BackendOptions
    fields; ours reads them all; every backend takes the defaults, and what it reads."""
    fields = set(s5.BackendOptions.__dataclass_fields__)
    assert s5.BACKEND_SPECIFIC_OPTIONS <= fields
    for name in ("fsm", "xgrammar", "outlines", "llguidance"):
        cls = get_backend_class(name)
        assert cls.own_options <= s5.BACKEND_SPECIFIC_OPTIONS, name
        s5.BackendOptions(grammar_backend=name).check_read_by(cls)
    s5.BackendOptions(grammar_backend="outlines", json_whitespace="[ ]*", compile_nice=3).check_read_by(
        get_backend_class("outlines")
    )


def test_json_schema_options_reach_the_compiler_and_typos_fail_at_start():
    """`json_schema_options` is SchemaOptions for our backend: a typo fails when the engine
    starts, and a setting (here at most 2 integer digits) holds in what is generated."""
    with pytest.raises(ValueError, match="any_ordr"):
        sgl.Engine(json_schema_options={"any_ordr": True})
    engine = sgl.Engine(json_schema_options={"max_integer_digits": 2})
    try:
        for seed in range(3):
            out = engine.generate(
                "<|user|>\nA number\n<|assistant|>\n",
                {"json_schema": {"type": "integer"}, "max_new_tokens": 12, "temperature": 1.0, "seed": seed},
            )
            assert re.fullmatch(r"-?[0-9]{1,2}", out["text"]), out
    finally:
        engine.shutdown()


def test_a_long_forced_text_costs_each_step_a_bounded_jump(engine):
    """`a{100000}` (the lazy automaton, s5's default) with a short max_new_tokens: the jump is
    cut at MAX_JUMP_BYTES, found too long for the request, and generation ends on length;
    no step builds the 100,000 states of the whole forced text (it used to take seconds of
    the scheduler's thread, and the state limit aborted the request)."""
    out = engine.generate(
        "<|user|>\nSay a.\n<|assistant|>\n", {"regex": "b?a{100000}", "max_new_tokens": 6, "temperature": 0}
    )
    assert out["meta_info"]["finish_reason"]["type"] == "length", out["meta_info"]["finish_reason"]
    assert re.fullmatch(r"b?a*", out["text"])


@pytest.mark.parametrize(
    "schema,needle",
    [
        ("[" * 100_000 + "]" * 100_000, "nests too deeply for the parser"),
        ('{"a":' * 5000 + "1" + "}" * 5000, "nests too deeply for the parser"),
        ('{"type": "array", "items": ' * 400 + "{}" + "}" * 400, "the schema nests too deeply"),
        ('{"type": "string", "type": "integer"}', "gives the key 'type' twice"),
    ],
)
def test_a_schema_text_too_deep_or_ambiguous_is_refused_by_name(engine, schema, needle):
    """A json_schema given as text is read as strictly as the request body: nesting past
    Python's recursion limit (in the parser or the compiler) and a key given twice are the
    request's own error, never an internal one, and never "the last key wins"."""
    out = engine.generate(Q, {"json_schema": schema, "max_new_tokens": 4})
    reason = out["meta_info"]["finish_reason"]
    assert reason["type"] == "abort" and needle in reason["message"] and reason["kind"] == AbortKind.GRAMMAR, reason
    assert engine.generate(Q, {"max_new_tokens": 2})["meta_info"]["finish_reason"]["type"] == "length"
