"""FSMGrammar, the fsm backend's matcher: a shared lazy automaton's bounds are counted per
request (lazy_regex.BuildAccount), so no client's requests use up another's room."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minisglang as sgl
from minisglang.backends.base import get_backend_class
from minisglang.backends.fsm_backend import FSMGrammar
from minisglang.constrained.lazy_regex import AutomatonLimitError
from minisglang.tokenizer import Tokenizer

# Its states are the last 13 letters' pattern of `a`s: a random walk makes a new state at about
# every token, and what several walks make together passes a bound none of them passes alone.
REGEX = "(a|b)*a(a|b){12}"


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
