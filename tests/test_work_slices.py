"""constrained/work_slices.py: grammar work cut into slices, and compile threads that yield.

The invariant that makes slicing safe: work cut by OutOfTime and resumed gives exactly what
the uncut work gives (a row, a search's verdict), because what each slice computed is kept.
"""

from __future__ import annotations

import itertools
import re
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minisglang.constrained.lazy_byte_dfa import LazyByteDFA
from minisglang.constrained.lazy_regex import RegexPool
from minisglang.constrained.lazy_regex_parser import parse_regex
from minisglang.constrained.lazy_token_fsm import LazyLimits, LazyStateIndex
from minisglang.constrained.regex_dfa import RegexError
from minisglang.constrained.work_slices import (
    Baton,
    CompileCancelled,
    FairCompilePool,
    OutOfTime,
    checkpoint,
    deadline,
    outside,
)
from minisglang.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def tok(bundled_model_path):
    return Tokenizer.from_pretrained(bundled_model_path)


def test_checkpoint_raises_only_past_a_deadline_and_after_kept_work():
    checkpoint(kept=True)  # no deadline: nothing happens
    with deadline(60):
        checkpoint(kept=True)  # well within it
    with deadline(0):
        time.sleep(0.001)
        checkpoint()  # past it, but nothing kept yet: a slice always makes progress
        with pytest.raises(OutOfTime):
            checkpoint(kept=True)
    with deadline(0):
        with pytest.raises(OutOfTime):
            checkpoint(kept=True)  # this unit of work is kept: stopping after it loses nothing
    checkpoint(kept=True)  # the deadline ended with its block


def test_an_inner_deadline_never_extends_the_outer_one():
    with pytest.raises(OutOfTime):
        with deadline(0):
            with deadline(60):
                time.sleep(0.001)
                checkpoint(kept=True)


def _sliced(fn, seconds=2e-5, attempts=1_000_000):
    """Call fn() in slices of `seconds` until it finishes; (its result, slices it took)."""
    for k in range(1, attempts):
        try:
            with deadline(seconds):
                return fn(), k
        except OutOfTime:
            continue
    raise AssertionError("never finished")


# Regexes whose rows need many derivatives (exponential DFAs, counting, intersections).
HARD = [
    r"(x|y)*x(x|y){8}",
    r"([\s\S]*[aeiou][\s\S]{3}){2}",
    r"(?@and((a|b)*a(a|b){5})([ab]{6,12}))",
    r'"(?@and([a-z]*q[a-z]{4})([^"\\]{5,9}))"',
    r"(ab|a)*b{3}(c|d){2,4}",
]


@pytest.mark.parametrize("regex", HARD)
def test_a_row_built_in_slices_is_the_row_built_at_once(tok, regex):
    """Walk the same bytes through two automata of the regex, one building each row in
    tiny slices (restarting after every OutOfTime), one at once: every row is the same."""
    vocab_size = len(tok.token_bytes)

    def index():
        pool = RegexPool()
        return LazyStateIndex(LazyByteDFA(parse_regex(regex, pool, members=True), pool), tok, vocab_size, LazyLimits())

    whole, cut = index(), index()
    a, b = whole.initial_state, cut.initial_state
    rng = np.random.default_rng(0)
    slices = 0
    for _ in range(12):
        row, k = _sliced(lambda: cut.row(b))
        slices += k
        assert np.array_equal(row.packed.numpy(), whole.row(a).packed.numpy()), regex
        allowed = whole.allowed_token_ids(a)
        allowed = [t for t in allowed if t != tok.eos_token_id]
        if not allowed:
            break
        t = int(rng.choice(allowed))
        a, b = whole.next_state(a, t), cut.next_state(b, t)
    assert slices > 12, "the slices were never cut: the test did not test slicing"


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=4),
    st.integers(2, 7),
    st.integers(0, 6),
    st.integers(1, 8),
)
def test_a_search_cut_anywhere_gives_the_search_s_verdict(head, n, low, span):
    """Whether an intersection is empty, decided in slices as small as one state, equals
    the verdict of the search done at once (and of brute force over short strings)."""
    a = f"(a|b|c)*{''.join(head)}(a|b|c){{{n}}}"
    b = f"[abc]{{{low},{low + span}}}"
    text = f"(?@and({a})({b}))"

    def verdict(parse) -> bool:
        try:
            parse()
        except RegexError:  # "matches no string at all"
            return False
        return True

    whole = verdict(lambda: parse_regex(text, RegexPool(), members=True))
    pool = RegexPool()  # kept across slices: a cut search goes on from its frontier
    cut, _ = _sliced(lambda: verdict(lambda: parse_regex(text, pool, members=True)), seconds=1e-6)
    assert cut == whole, text
    # brute force: a common string, if any, has at most low + span characters
    found = any(
        re.fullmatch(a, "".join(s)) and re.fullmatch(b, "".join(s))
        for n_ in range(low + span + 1)
        for s in itertools.product("abc", repeat=n_)
    )
    assert found == whole, text


# -- the baton: compile threads run only when the scheduler lends the CPU ------------------------
def _counting_job(counter: list[int], stop: threading.Event):
    while not stop.is_set():
        counter[0] += 1
        checkpoint()
    return counter[0]


def test_a_compile_thread_works_only_inside_lend_windows():
    baton, stop, counter = Baton(), threading.Event(), [0]
    pool = FairCompilePool(1, baton)
    baton.hold()
    future, _ = pool.submit("a", _counting_job, counter, stop)
    try:
        time.sleep(0.05)
        held = counter[0]
        time.sleep(0.05)
        assert counter[0] == held, "the thread ran while the scheduler held the CPU"
        baton.lend(0.02)
        lent = counter[0]
        assert lent > held, "the thread did not run in the window lent to it"
        time.sleep(0.05)
        assert counter[0] == lent, "the thread ran on after the window"
    finally:
        stop.set()
        baton.lend(1.0)
        pool.shutdown()
    assert future.result(5) >= lent


def test_compile_threads_run_freely_when_no_step_comes():
    baton, stop, counter = Baton(), threading.Event(), [0]
    baton.IDLE = 0.05
    pool = FairCompilePool(1, baton)
    baton.hold()
    future, _ = pool.submit("a", _counting_job, counter, stop)
    time.sleep(0.3)  # no step for longer than IDLE: the engine is idle
    stop.set()
    assert future.result(5) > 0
    pool.shutdown()


def test_clients_take_turns_and_one_client_cannot_hold_every_thread():
    """Two threads: client A's two slow compiles may use only one (per_client = 1) while
    B waits, so B's compile starts at once, not after A's first."""
    pool = FairCompilePool(2, Baton())
    gate = threading.Event()
    started: list[str] = []

    def job(name):
        started.append(name)
        gate.wait(5)
        return name

    a1, _ = pool.submit("A", job, "a1")
    a2, job_a2 = pool.submit("A", job, "a2")
    b1, _ = pool.submit("B", job, "b1")
    waited = time.monotonic() + 5
    while len(started) < 2 and time.monotonic() < waited:
        time.sleep(0.01)
    assert sorted(started) == ["a1", "b1"], started
    assert job_a2.started is None and job_a2.queued_seconds() > 0
    gate.set()
    assert [f.result(5) for f in (a1, a2, b1)] == ["a1", "a2", "b1"]
    pool.shutdown()


def _served_after_hogs(half_life: float, hogs: int = 6) -> list[str]:
    """One thread. Each of `hogs` clients compiles once (charged its seconds); a blocker then
    holds the thread while each hog queues another compile and a newcomer queues one, last in
    the turn order. The order in which the thread serves those."""
    pool = FairCompilePool(1, Baton(), half_life=half_life)
    served: list[str] = []
    gate = threading.Event()
    try:
        names = [f"h{k}" for k in range(hogs)]
        for name in names:
            pool.submit(name, lambda: None)[0].result(5)
        blocker, _ = pool.submit("blocker", gate.wait, 5)
        futures = [pool.submit(name, served.append, name)[0] for name in [*names, "new"]]
        gate.set()
        for f in [blocker, *futures]:
            f.result(5)
    finally:
        gate.set()
        pool.shutdown()
    return served


def test_a_newcomers_compile_goes_before_those_of_clients_that_compiled_lately():
    """Clients that used the compile threads least lately go first: six clients that each
    kept compiling were each ahead of a newcomer in plain turns, so its trivial regex waited
    for about 6/2 of their compiles (1-2 s beside schemas refused after a quarter of a second
    each); now it waits only for a thread to come free. `half_life=0` keeps plain turns."""
    served = _served_after_hogs(half_life=10.0)
    assert served[0] == "new" and sorted(served[1:]) == [f"h{k}" for k in range(6)], served
    assert _served_after_hogs(half_life=0)[-1] == "new"


def test_a_pool_keeps_no_entry_for_a_client_once_its_jobs_are_done_or_cancelled():
    """Its running counts and queues kept a zero and an empty queue for every client ever
    seen (an attacker's addresses grew them without bound)."""
    pool = FairCompilePool(1, Baton(), half_life=0)
    gate = threading.Event()
    try:
        held, _ = pool.submit("held", gate.wait, 5)
        queued = [pool.submit(f"q{k}", lambda: None)[1] for k in range(3)]
        for job in queued:
            pool.cancel(job)
        gate.set()
        held.result(5)
        for k in range(5):
            pool.submit(f"c{k}", lambda: None)[0].result(5)
        pool.submit("last", lambda: None)[0].result(5)
        with pool._cond:
            while pool._active:
                pool._cond.wait(5)
            assert not pool._queues and not pool._running, (pool._queues, pool._running)
    finally:
        gate.set()
        pool.shutdown()


def test_jobs_waiting_for_children_hold_no_thread_or_window_another_client_needs():
    """Two clients' compiles wait in child processes (`outside`) and fill both threads: a
    third client's compile still runs at once, on a thread the pool adds, and the baton does
    not count the two (a lend window waits for none: they use no CPU); a cancel still
    reaches them."""
    baton = Baton()
    pool = FairCompilePool(2, baton)
    gate, both_out = threading.Event(), threading.Barrier(3)

    def in_child(name):
        with outside():
            both_out.wait(5)
            while not gate.wait(0.01):
                checkpoint()  # (a cancel is seen here)
        return name

    a, _ = pool.submit("A", in_child, "a")
    b, job_b = pool.submit("B", in_child, "b")
    both_out.wait(5)
    assert baton.running == 0, "a job waiting for a child is no compile thread a lend waits for"
    c, _ = pool.submit("C", lambda: "c")
    assert c.result(5) == "c" and not a.done() and not b.done()
    pool.cancel(job_b)
    with pytest.raises(CompileCancelled):
        b.result(5)
    gate.set()
    assert a.result(5) == "a"
    pool.shutdown()


def test_jobs_past_the_children_bound_wait_for_one_without_holding_the_thread_a_newcomer_needs():
    """MAX_CHILDREN = 1, one thread. A's job is in a child (held at a gate); B's wants a child
    too and waits for A's to end. C's plain compile still runs at once (the threads were capped
    at workers + MAX_CHILDREN: B's waiting thread held the last one, and six hog addresses
    made a newcomer's trivial regex wait 0.6 s); B's body starts only after A's ends, and a
    job cancelled while it waits for a child is stopped there."""
    pool = FairCompilePool(1, Baton())
    pool.MAX_CHILDREN = 1
    gate, a_in, inside = threading.Event(), threading.Event(), []

    def in_child(name):
        with outside():
            inside.append(name)
            if name == "a":
                a_in.set()
                gate.wait(5)
        return name

    try:
        a, _ = pool.submit("A", in_child, "a")
        assert a_in.wait(5)
        b, _ = pool.submit("B", in_child, "b")
        d, job_d = pool.submit("D", in_child, "d")
        c, _ = pool.submit("C", lambda: "c")
        assert c.result(5) == "c" and inside == ["a"], inside
        pool.cancel(job_d)
        with pytest.raises(CompileCancelled):
            d.result(5)
        gate.set()
        assert (a.result(5), b.result(5)) == ("a", "b") and inside == ["a", "b"], inside
    finally:
        gate.set()
        pool.shutdown()


def test_a_cancelled_compile_stops_at_its_next_checkpoint_or_never_starts():
    pool = FairCompilePool(1, Baton())
    stop, counter = threading.Event(), [0]
    running, job = pool.submit("A", _counting_job, counter, stop)
    queued, queued_job = pool.submit("A", _counting_job, [0], stop)
    waited = time.monotonic() + 5
    while counter[0] == 0 and time.monotonic() < waited:
        time.sleep(0.01)
    pool.cancel(queued_job)
    pool.cancel(job)
    with pytest.raises(CompileCancelled):
        running.result(5)
    assert queued.cancelled()
    pool.shutdown()


# -- the step's budget: once spent, no work begins -------------------------------------------------
def test_once_the_step_s_budget_is_spent_no_grammar_work_begins(tok):
    """A slice always does one unit of work before it may stop (a whole trie walk can be
    several ms), so a request asked after the budget ran out does none: it sits out, and
    its row is made in a later step (the same row: test_a_row_built_in_slices_...)."""
    from types import SimpleNamespace

    from minisglang.backends.fsm_backend import FSMBackend
    from minisglang.stages.s5_backends import GrammarWork

    backend = FSMBackend(tok, len(tok.token_bytes))
    try:
        grammar = backend._compile_safely("regex", HARD[0])
        req = SimpleNamespace(rid=1, grammar=grammar)
        grammar.accept_token(grammar.fsm.index.allowed_token_ids(grammar.state)[0])
        assert grammar.needs_work()  # a new state: its row is not made
        work = GrammarWork(step_seconds=0.004, max_seconds=60, baton=Baton())
        work.left = 0.0
        assert not work.ready(req) and grammar.needs_work() and work.spent.get(1, 0.0) == 0.0
        work.left = 60.0
        assert work.ready(req) and not grammar.needs_work()
        work.left = 0.0
        assert work.ready(req)  # nothing left to do: ready, whatever the budget
    finally:
        backend.shutdown()
