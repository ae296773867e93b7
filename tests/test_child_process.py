"""constrained/child_process.py: a compile in a child process, stopped at its timeout or cancel.

Oracle: the same function called in this process (the same result, the same exception)."""

from __future__ import annotations

import math
import multiprocessing
import threading
import time

import pytest

from minisglang.constrained import child_process
from minisglang.constrained.child_process import KeptChildren, call_in_child
from minisglang.constrained.compile_service import CompileTimeout
from minisglang.constrained.token_fsm import ConstraintError
from minisglang.constrained.work_slices import Baton, CompileCancelled, FairCompilePool

_OTHERS: set[int | None] = set()  # children of other tests' backends (a module's fixtures keep theirs)


@pytest.fixture(autouse=True)
def others():
    _OTHERS.clear()
    _OTHERS.update(p.pid for p in multiprocessing.active_children() if p.name == child_process.CHILD_NAME)


def children() -> list[multiprocessing.process.BaseProcess]:
    """The compile children this test started."""
    return [p for p in multiprocessing.active_children() if p.name == child_process.CHILD_NAME and p.pid not in _OTHERS]


def test_a_one_shot_child_answers_as_this_process_would_and_leaves():
    assert call_in_child(math.comb, (40, 20), timeout=60, what="a sum") == math.comb(40, 20)
    with pytest.raises(ValueError) as there:
        call_in_child(math.sqrt, (-1.0,), timeout=60, what="a root")
    with pytest.raises(ValueError) as here:
        math.sqrt(-1.0)
    assert str(there.value) == str(here.value)
    assert not children()


def test_kept_children_answer_many_calls_with_one_process():
    kept = KeptChildren()  # (one started ahead: the calls use it)
    try:
        assert [kept.call(math.factorial, (n,), timeout=60, what="n!") for n in range(8)] == [
            math.factorial(n) for n in range(8)
        ]
        assert len(children()) == 1
        with pytest.raises(ValueError, match="math domain error"):
            kept.call(math.sqrt, (-1.0,), timeout=60, what="a root")
        assert len(children()) == 1, "a refusal is an answer: the child stays"
    finally:
        kept.shutdown()
    assert not children()


def test_a_kept_child_past_its_timeout_is_killed_and_the_next_call_gets_a_new_one():
    kept = KeptChildren(ahead=0)
    try:
        with pytest.raises(CompileTimeout, match=r"the nap took longer than 0\.2 s \(option compile_timeout\)"):
            kept.call(time.sleep, (60,), timeout=0.2, what="the nap")
        assert not children(), "the child that ran past its timeout is gone"
        assert kept.call(math.factorial, (5,), timeout=60, what="5!") == 120
    finally:
        kept.shutdown()


def test_a_kept_child_that_dies_is_an_error_naming_the_compile():
    """A kept child has started (it answered its setup), so its death is its call's: no hint
    about scripts that start Engines (a server's client read it for a schema that had run
    the child out of memory)."""
    kept = KeptChildren(ahead=0)
    try:
        with pytest.raises(ConstraintError, match="the child process running the exit died") as died:
            kept.call(child_process.os._exit, (3,), timeout=60, what="the exit")
        assert "while starting" not in str(died.value) and "exit code 3" in str(died.value)
        assert kept.call(math.factorial, (3,), timeout=60, what="3!") == 6
    finally:
        kept.shutdown()


def test_a_kept_child_killed_while_idle_is_replaced_not_an_error():
    kept = KeptChildren()
    try:
        assert kept.call(math.factorial, (4,), timeout=60, what="4!") == 24
        (idle,) = children()
        idle.kill()
        idle.join(10)
        assert kept.call(math.factorial, (4,), timeout=60, what="4!") == 24
        assert [p.pid for p in children()] != [idle.pid]
    finally:
        kept.shutdown()


def test_a_cancelled_call_kills_its_kept_child():
    """The compile thread waits at `checkpoint`s; cancelled, it stops there and kills the child."""
    pool = FairCompilePool(1, Baton())
    kept = KeptChildren(ahead=0)
    started = threading.Event()

    def nap():
        started.set()
        return kept.call(time.sleep, (60,), timeout=120, what="the nap")

    try:
        future, job = pool.submit("A", nap)
        started.wait(10)
        pool.cancel(job)
        with pytest.raises(CompileCancelled):
            future.result(60)
        assert not children()
    finally:
        pool.shutdown()
        kept.shutdown()


def test_a_child_killed_from_outside_is_not_the_grammars_failure():
    """The system's OOM killer (SIGKILL) took a compile's child once: the grammar cache kept
    'the child process running the compile died (exit code None; ...)' as that grammar's
    compile, and every later request with it was refused with the message though a fresh
    server compiled it. ChildKilled (with the real exit code, -9) is not cached now; a child
    that dies by itself (an abort: a native library out of memory) still is."""
    import signal

    from minisglang.backends.base import BaseGrammarBackend, BaseGrammarObject, InvalidGrammarObject

    class Matcher(BaseGrammarObject):
        def copy(self):
            return self

    class Tok:
        token_bytes = [b"a"]

    class Backend(BaseGrammarBackend):
        name, kinds = "children", frozenset({"regex"})
        deaths = {"killed": [signal.SIGKILL], "aborted": [signal.SIGABRT]}

        def compile(self, kind, text):
            if self.deaths[text]:  # the first compile's child dies
                call_in_child(signal.raise_signal, (self.deaths[text].pop(),), timeout=30, what="the compile")
            call_in_child(len, (text,), timeout=30, what="the compile")
            return Matcher()

    backend = Backend(Tok(), 32)
    try:
        for text, code, again in (
            ("killed", -signal.SIGKILL, Matcher),
            ("aborted", -signal.SIGABRT, InvalidGrammarObject),
        ):
            answers = []
            for _ in range(2):
                value, ready = backend.get_cached_or_future_value("regex", text)
                answers.append(value if ready else backend.result(value) if value.result(timeout=60) else None)
            assert isinstance(answers[0], InvalidGrammarObject) and f"exit code {code};" in answers[0].message
            assert isinstance(answers[1], again)
    finally:
        backend.shutdown()
