"""The fsm backend (backends/fsm_backend.py). FSMGrammar, its matcher: a shared lazy automaton's
bounds are counted per request (lazy_regex.BuildAccount), so no client's requests use up
another's room. And the backend itself: the ebnf grammars it serves (regular ones) or refuses,
its shorthand classes found before any compile, its seam checks, and a lazy grammar grown near
its bounds compiled again. Its masks against the libraries' are in test_backends.py."""

from __future__ import annotations

import random

import pytest
from grammar_backends import GBNF_TEXTS, accepts, backends_fixture, compiled, matches_whole
from hypothesis import given, settings
from hypothesis import strategies as st

import minisglang as sgl
from minisglang.backends.base import GrammarError, InvalidGrammarObject, get_backend_class
from minisglang.backends.fsm_backend import FSMGrammar
from minisglang.constrained import python_regex
from minisglang.constrained.lazy_regex import AutomatonLimitError
from minisglang.tokenizer import Tokenizer

# Its states are the last 13 letters' pattern of `a`s: a random walk makes a new state at about
# every token, and what several walks make together passes a bound none of them passes alone.
REGEX = "(a|b)*a(a|b){12}"

backends = backends_fixture("fsm")  # (the backend section's tests)


@pytest.fixture(scope="module")
def tok(bundled_model_path):
    return Tokenizer.from_pretrained(bundled_model_path)


@pytest.fixture(scope="module")
def backend(tok):
    backend = get_backend_class("fsm")(tok, tok.vocab_size, compile_in="thread", max_lazy_states=250)
    yield backend
    backend.shutdown()


def walk(grammar: FSMGrammar, seed: int):
    """A request's random walk, one token per `next()`: an allowed token other than EOS,
    chosen by `seed` (the same tokens on any automaton of the same regex)."""
    rng, eos = random.Random(seed), grammar.fsm.index.eos_token_id
    while True:
        grammar.prepare()
        grammar.accept_token(rng.choice([t for t in grammar.fsm.index.allowed_token_ids(grammar.state) if t != eos]))
        yield


def run(grammar: FSMGrammar, seed: int, steps: int) -> int:
    """The tokens the walk took before the automaton refused it (`steps`: never refused)."""
    tokens = walk(grammar, seed)
    for taken in range(steps):
        try:
            next(tokens)
        except AutomatonLimitError:
            return taken
    return steps


def fresh(backend) -> FSMGrammar:
    """A request's matcher over a compile of its own (the grammar the cache holds, copied)."""
    grammar = backend._compile_safely("regex", REGEX)
    assert isinstance(grammar, FSMGrammar)
    return grammar.copy()


@settings(max_examples=25, deadline=None)
@given(
    seeds=st.lists(st.integers(0, 10**6), min_size=2, max_size=5),
    order=st.lists(st.integers(0, 4), min_size=40, max_size=200),
)
def test_a_request_is_refused_only_for_what_it_built_itself(backend, seeds, order):
    """Requests walk one compiled automaton in an interleaving hypothesis draws. Oracle: the
    same walk alone on a fresh compile. A request served alone is served shared (others' states
    cost it nothing); one refused shared had spent all of its own room; and the automaton holds
    no more states than the compile's plus what the requests' accounts paid for."""
    steps = 60
    alone = [run(fresh(backend), seed, steps) for seed in seeds]
    shared = backend._compile_safely("regex", REGEX)
    grammars = [shared.copy() for _ in seeds]
    room = [g.account.states for g in grammars]
    walks = [walk(g, seed) for g, seed in zip(grammars, seeds)]
    taken, refused = [0] * len(seeds), [False] * len(seeds)
    for i in [i % len(seeds) for i in order] + [i for i in range(len(seeds)) for _ in range(steps)]:
        if refused[i] or taken[i] == steps:
            continue
        try:
            next(walks[i])
            taken[i] += 1
        except AutomatonLimitError:
            refused[i] = True
            assert grammars[i].account.states <= 0  # its own room spent, not another's
    for i, served_alone in enumerate(alone):
        if served_alone == steps:
            assert taken[i] == steps, (i, alone, taken)
    built = shared.fsm.index.dfa.num_states - shared.compiled_size[0]
    assert built <= sum(r - g.account.states for r, g in zip(room, grammars))


@pytest.mark.parametrize(
    "stage, drafts",
    [("s5", None), ("s7", None), ("s7", "FORCED+NGRAM")],  # (s7: rows made on the overlap thread; drafts)
)
def test_another_request_filling_the_shared_automaton_leaves_a_running_one_served(stage, drafts):
    """Through the engine: a short request samples at temperature 5 (each new state's token
    row makes dozens of states: the vocabulary's runs of `a` and `b`); once it is running,
    another copy of the same cached grammar (another client's request) walks until its room
    is spent, which fills the shared automaton past max_lazy_states. Counted over the
    automaton, the running request was then aborted at its next new state ('more than 600
    automaton states'), where alone it is served; now it writes what it writes alone."""
    short = {"regex": REGEX, "temperature": 5.0, "seed": 1000, "max_new_tokens": 3}
    options = {"stage": stage, "max_lazy_states": 600, "grammar_step_seconds": 60.0}
    if drafts is not None:
        options["speculative_algorithm"] = drafts
    with sgl.Engine(**options) as engine:
        alone = engine.submit("y", short)
        while not alone.finished:
            engine.step()
        assert alone.finished_reason["type"] != "abort", alone.finished_reason
    with sgl.Engine(**options) as engine:
        victim = engine.submit("y", short)
        while victim.grammar is None:
            engine.step()
        backend = engine.scheduler.stage.backend
        hog, ready = backend.get_cached_or_future_value("regex", REGEX)
        assert ready and hog.fsm is victim.grammar.fsm  # (one automaton, shared)
        assert run(hog, seed=7, steps=10_000) < 10_000  # (refused: its room spent)
        assert hog.fsm.index.dfa.num_states >= 600
        while not victim.finished:
            engine.step()
        assert victim.output_ids == alone.output_ids, victim.finished_reason


# ------------------------ the backend: ebnf, shorthand classes, seam checks, recompiles
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
