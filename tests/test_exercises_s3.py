"""Exercise tests for stage s3 (FSMCache, blocking get_fsm, the grammar queue).

Small and model-free, so a student gets an answer in seconds: the stage runs over a toy
vocabulary of digits, and compiles are gated by an event to make them as slow as a test
needs. tests/test_stage_s3.py checks the same tasks through the whole engine.
"""

from __future__ import annotations

import collections
import os
import sys
import threading
import time
from dataclasses import dataclass
from unittest import mock

import pytest
import torch

from minisglang.constrained.compile_service import CompileTimeout
from minisglang.constrained.regex_dfa import ByteDFA, compile_regex
from minisglang.constrained.token_fsm import ConstraintError
from minisglang.constrained.token_index import build_index_reference
from minisglang.core import AbortKind, Req, SamplingParams
from minisglang.stages.base import StageContext
from minisglang.stages.s3_fsm_cache import FSMCache, FSMCacheStage, GrammarQueue

VOCAB = [bytes([c]) for c in b"0123456789-"] + [b"20", b"2024", b"-0", b"12-", None]
EOS = len(VOCAB) - 1
DATE = r"[0-9]{4}-[0-9]{2}"


@dataclass
class ToyTokenizer:
    """What the s3 stage needs from a tokenizer: exact token bytes, EOS, a fingerprint."""

    token_bytes: list
    eos_token_id: int = EOS
    fingerprint: str = "toy-digits-v1"


@pytest.fixture
def stage():
    st = FSMCacheStage(StageContext(ToyTokenizer(VOCAB), len(VOCAB), torch.device("cpu"), {}))
    yield st
    st.shutdown()


GATES: list[threading.Event] = []


@pytest.fixture(autouse=True)
def open_every_gate_after_the_test():
    """A test stopped half-way (a failed assertion, the mutant runner's alarm) still lets its
    gated compiles finish, so no compile thread waits on into the next test."""
    yield
    while GATES:
        GATES.pop().set()


class CompiledOnTheCallersThread(BaseException):
    """A gated compile ran on the test's own thread. A BaseException: the cache's own
    `except Exception` around a compile must not turn it into a failed compile."""


def refuse_the_callers_thread(regex: str, opened: threading.Event) -> None:
    """Raise CompiledOnTheCallersThread when a compile held back by `opened` runs on the
    test's own thread (the caller of init_fsm_in_background, or the engine's)."""
    if threading.current_thread() is threading.main_thread() and not opened.is_set():
        raise CompiledOnTheCallersThread(
            f"the compile of {regex!r} ran on the caller's thread, which then waits for it: "
            f"submit self._compile(key, regex, entry) to self.pool and return the entry at once"
        )


STDLIB = os.path.dirname(threading.__file__)


def waits_without_a_limit(thread: threading.Thread) -> bool:
    """Whether `thread` is blocked in a wait with no timeout (`event.wait()`, `wait(None)`)
    that code outside the standard library called: a Condition.wait frame whose timeout is
    None, below (past threading's own frames) a frame of the package or of the tests. Not
    the standard library's own short waits (Thread.start waits for the thread it starts, a
    pool's submit starting a worker)."""
    frame = sys._current_frames().get(thread.ident or -1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "wait" and code.co_filename == threading.__file__ and "waiter" in frame.f_locals:
            if frame.f_locals.get("timeout") is not None:
                return False
            while frame is not None and frame.f_code.co_filename == threading.__file__:
                frame = frame.f_back
            return frame is not None and not frame.f_code.co_filename.startswith(STDLIB)
        frame = frame.f_back
    return False


def gate(cache: FSMCache, regex: str) -> threading.Event:
    """Make the compile of `regex` wait until the returned event is set (at most 30 s). A
    compile on the caller's (the test's) thread fails the test at once, instead of waiting
    out the gate and then the test's time limit. And a caller that waits for it with no
    timeout (`event.wait()`, or `wait(None)` for a timeout of 0) would wait until the gate
    opens: the gate opens then, the compile finishes, and the test fails at once on what
    that wait returned (no test here waits for a gated compile without a timeout), not
    after the gate's 30 s or the grader's time limit."""
    opened = threading.Event()
    GATES.append(opened)
    real = cache.compile_index
    caller = threading.main_thread()

    def gated(r):
        if r == regex:
            refuse_the_callers_thread(r, opened)
            deadline = time.monotonic() + 30
            while not opened.wait(0.01) and time.monotonic() < deadline:
                if waits_without_a_limit(caller):
                    break
        return real(r)

    cache.compile_index = gated
    return opened


def counting_cache(max_entries: int = 64) -> tuple[FSMCache, list[str]]:
    """An FSMCache whose 'compile' only records which regexes it was asked for."""
    calls: list[str] = []

    def compile_index(regex):
        calls.append(regex)
        return regex

    return FSMCache(compile_index, lambda regex, index: ("fsm", index), "fp", max_entries=max_entries), calls


def entry_of(cache: FSMCache, regex: str):
    """The cache's entry for `regex`, stored under `cache.key(regex)`; a test that finds none
    fails saying which keys it found instead (a bare KeyError shows only a sha256)."""
    key = cache.key(regex)
    if key not in cache.entries:
        found = ", ".join(repr(k)[:20] for k in cache.entries) or "none"
        pytest.fail(
            f"no cache entry for {regex!r} under self.key({regex!r}) = {key[:12]}...; keys found: {found} "
            f"(store each entry under self.key(regex), which adds the tokenizer's fingerprint)"
        )
    return cache.entries[key]


def raises_constraint_error(call, should: str) -> ConstraintError:
    """Run `call()`, which `should` (a sentence) says must raise ConstraintError: the error,
    for the test to read on; if the call returns instead, the test fails saying what came back."""
    try:
        returned = call()
    except ConstraintError as error:
        return error
    shown = f"the FSM of {returned.regex!r}" if hasattr(returned, "regex") else repr(returned)[:80]
    pytest.fail(f"{should}; it returned {shown}")


def labels(reqs: list, names: dict[int, str]) -> str:
    """Requests by their short names (`names` maps id(req) to one), with the reason of any
    that finished (an abort), as "[slow (finished: ...), fast]": a Req's repr runs to
    hundreds of characters. A request the test does not know keeps its repr."""

    def label(req) -> str:
        if id(req) not in names:
            return repr(req)
        reason = getattr(req, "finished_reason", None)
        said = reason.get("message", reason) if isinstance(reason, dict) else reason
        return f"{names[id(req)]} (finished: {said})" if reason else names[id(req)]

    return f"[{', '.join(map(label, reqs))}]"


# ------------------------------------------------------------------------- task3_1
class SlowDict(collections.OrderedDict):
    """A dict whose lookups take 50 ms: it widens the window between "is the key there?" and
    "insert it", so an unlocked check-and-insert lets two threads both miss (exercise 1)."""

    def get(self, key, default=None):
        found = super().get(key, default)
        time.sleep(0.05)  # after the lookup: the answer goes stale while we sleep
        return found

    def __contains__(self, key):
        found = super().__contains__(key)
        time.sleep(0.05)
        return found


@pytest.mark.task3_1
def test_check_and_insert_is_one_step_even_when_lookups_are_slow():
    cache, calls = counting_cache()
    cache.entries = SlowDict()
    start = threading.Barrier(2)
    got, errors = [], []

    def ask():
        start.wait()
        try:
            got.append(cache.init_fsm_in_background("a+b"))
        except Exception as e:  # a thread's error is lost unless the test raises it again
            errors.append(e)

    threads = [threading.Thread(target=ask) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    got[0].event.wait(5)
    assert got[0] is got[1], (
        "two threads calling init_fsm_in_background('a+b') at once got two different "
        "entries: the lookup and the insert must be one step under self.lock"
    )
    assert calls == ["a+b"] and cache.compile_count == 1, (
        f"two threads asking for a+b at once: one compile expected, and compile_count 1 (_compile counts each "
        f"compile it runs); compile_index ran for {calls}, and compile_count is {cache.compile_count}"
    )
    cache.shutdown()


@pytest.mark.task3_1
def test_lru_a_hit_is_recent_and_a_running_compile_is_never_evicted():
    cache, calls = counting_cache(max_entries=3)
    slow = gate(cache, "slow")
    cache.init_fsm_in_background("slow")  # still compiling
    for regex in ["a", "b", "a", "c"]:  # "a" again: a hit, now recent
        cache.init_fsm_in_background(regex).event.wait(5)
    # oracle: least recently used finished entries leave first; "slow" is unfinished, so it stays
    names = {cache.key(r): r for r in ["slow", "a", "b", "c"]}
    got = [names.get(k, k) for k in cache.entries]
    assert got == ["slow", "a", "c"], (
        f"entries after slow (compiling), a, b, a (a hit), c with max_entries=3: {got}, expected "
        f"['slow', 'a', 'c'] (a hit moves its entry to the end; a running compile is never evicted)"
    )
    assert cache.key("b") not in cache.entries, (
        "after slow, a, b, a (a hit), c with max_entries=3: b, the least "
        "recently used finished entry, must be evicted; it is still there"
    )
    slow.set()
    entry_of(cache, "slow").event.wait(5)
    assert calls.count("a") == 1 and sorted(calls) == ["a", "b", "c", "slow"], (
        f"slow, a, b, a (a hit), c: each regex compiled once, a hit compiles nothing; compiled {sorted(calls)}"
    )
    cache.init_fsm_in_background("b").event.wait(5)  # evicted: compiled again
    assert calls.count("b") == 2, (
        f"b was evicted, so asking again compiles it a second time; compiled b {calls.count('b')} time(s)"
    )
    cache.shutdown()


@pytest.mark.task3_1
def test_the_bound_holds_as_soon_as_an_entry_is_inserted_even_for_failed_compiles():
    """`_evict_lru` runs at insert, after the new entry is stored: a failed compile never
    reaches the eviction inside `_compile`, so a cache that evicts only there (or before
    it stores the new entry) grows past `max_entries` with every bad regex."""

    def compile_index(regex):
        raise ConstraintError(f"bad regex {regex}")

    cache = FSMCache(compile_index, lambda regex, index: index, "fp", max_entries=2)
    for i in range(5):
        cache.init_fsm_in_background(f"bad{i}").event.wait(5)
        assert len(cache.entries) <= 2, (
            f"after inserting bad{i}: {len(cache.entries)} entries, max_entries is 2 (call "
            f"self._evict_lru() in init_fsm_in_background after storing the new entry)"
        )
    cache.shutdown()


@pytest.mark.task3_1
def test_a_failed_compile_is_cached_a_second_lookup_returns_its_entry():
    """A compile that failed is the regex's answer, cached like a finished one: the next
    lookup moves and returns the same entry and starts nothing (only `_compile` drops an
    entry, after a timeout). A lookup that replaces a failed entry compiles a bad regex
    again for every request that sends it."""
    calls: list[str] = []

    def compile_index(regex):
        calls.append(regex)
        raise ConstraintError(f"bad regex {regex}")

    cache = FSMCache(compile_index, lambda regex, index: index, "fp")
    try:
        first = cache.init_fsm_in_background("bad")
        assert first.event.wait(5) and first.error == "bad regex bad", (
            f"the compile of 'bad' raises ConstraintError('bad regex bad'): its entry must be done with "
            f"that error within 5 s; done {first.event.is_set()}, error {first.error!r}"
        )
        second = cache.init_fsm_in_background("bad")
        second.event.wait(5)
        assert second is first and calls == ["bad"], (
            f"init_fsm_in_background('bad') after its compile failed: an entry found under the key is "
            f"returned as it is, error and all, and nothing is submitted; got "
            f"{'the same' if second is first else 'a new'} entry, compiles {calls}"
        )
    finally:
        cache.shutdown()


@pytest.mark.task3_1
def test_the_byte_bound_evicts_a_finished_entry_at_the_next_insert():
    """`_evict_lru` runs at every insert, not only when the count is over `max_entries`: it
    also keeps `max_bytes`. An entry that came out over the byte bound could not evict
    itself (it was still compiling when `_compile` evicted), so the next insert must."""
    cache = FSMCache(lambda r: r, lambda r, x: x, "fp", max_entries=64, max_bytes=10, sizeof=lambda fsm: 100)
    later = gate(cache, "B")  # B's own compile must not do the eviction for the insert
    try:
        assert cache.init_fsm_in_background("A").event.wait(5), "test premise: the toy compile of A finishes at once"
        cache.init_fsm_in_background("B")
        assert cache.key("A") not in cache.entries, (
            "max_bytes=10, every FSM 100 bytes: A finished (100 bytes cached), then B was inserted; the insert must "
            "evict A, the least recently used finished entry over the byte bound (call self._evict_lru() at every "
            "insert, not only when len(self.entries) > self.max_entries)"
        )
    finally:
        later.set()
        cache.shutdown()


@pytest.mark.task3_1
def test_a_hit_on_a_running_compile_makes_it_the_most_recent():
    """Every hit moves its entry to the end, finished or not: a request for a regex still
    compiling uses it as much as one for a finished regex. max_entries=2: A (compiling), B
    (done), A again, then C: B is the least recently used, so B goes and A stays."""
    cache, _ = counting_cache(max_entries=2)
    opened = gate(cache, "A")
    try:
        a = cache.init_fsm_in_background("A")  # compiling
        cache.init_fsm_in_background("B").event.wait(5)
        assert cache.init_fsm_in_background("A") is a, "test premise: a hit returns the entry"
        opened.set()
        a.event.wait(5)
        cache.init_fsm_in_background("C")
        names = {cache.key(r): r for r in "ABC"}
        got = [names.get(k, k) for k in cache.entries]
        assert got == ["A", "C"], (
            f"max_entries=2: A (still compiling), B (done), A again (a hit while A compiles), A done, then C: B "
            f"is the least recently used and must go, entries ['A', 'C']; got {got} (move a hit to the end even "
            f"when its compile is still running)"
        )
    finally:
        opened.set()
        cache.shutdown()


@pytest.mark.task3_1
def test_a_timed_out_compile_is_dropped_and_the_next_lookup_compiles_again():
    """A compile that timed out may have met a loaded machine, not a bad regex: `_compile`
    drops its entry, found under the key it was given, so the next lookup starts a new
    compile. Submit `self._compile(key, regex, entry)` with the entry's own key: given
    another (the regex), the timeout stays cached and every later request fails at once."""
    calls: list[str] = []

    def compile_index(regex):
        calls.append(regex)
        if len(calls) == 1:
            raise CompileTimeout(f"compiling regex {regex!r} took longer than 1 s")
        return regex

    cache = FSMCache(compile_index, lambda regex, index: ("fsm", index), "fp")
    try:
        first = cache.init_fsm_in_background("a+")
        assert first.event.wait(5) and first.error is not None, "test premise: the first compile times out"
        second = cache.init_fsm_in_background("a+")
        assert second.event.wait(5), "test premise: the second compile finishes at once"
        assert second is not first and second.value == ("fsm", "a+") and calls == ["a+", "a+"], (
            f"the first compile of 'a+' timed out, so _compile dropped its entry: the next lookup must start a "
            f"new compile and get its FSM; got {'the timed-out entry again' if second is first else 'a new entry'} "
            f"(error {second.error!r}), compiles {calls} (submit self._compile(key, regex, entry) with the key "
            f"the entry is stored under, self.key(regex))"
        )
    finally:
        cache.shutdown()


@pytest.mark.task3_1
def test_regexes_that_differ_only_in_spaces_or_case_are_compiled_apart():
    """The key is `self.key(regex)` of the regex exactly as given: a space is a character
    of the language and `a` is not `A`. A key of a tidied regex (stripped, lowercased)
    serves the FSM of `ab` to a request for `ab ` or `AB`, whose outputs then break it."""
    cache, calls = counting_cache()
    regexes = ["ab", "ab ", " ab", "AB"]
    try:
        entries = [cache.init_fsm_in_background(r) for r in regexes]
        for e in entries:
            assert e.event.wait(5), "test premise: the toy compiles finish at once"
        got = [e.value for e in entries]
        assert got == [("fsm", r) for r in regexes] and sorted(calls) == sorted(regexes), (
            f"{regexes} are four languages: each needs its own compile and entry; got the values {got} and "
            f"compiles {calls} (key each regex by self.key(regex), the regex exactly as given)"
        )
    finally:
        cache.shutdown()


class OwnedLock:
    """A lock that knows which thread holds it (threading.Lock does not say)."""

    def __init__(self):
        self._lock, self.owner = threading.Lock(), None

    def __enter__(self):
        self._lock.acquire()
        self.owner = threading.get_ident()
        return self

    def __exit__(self, *exc):
        self.owner = None
        self._lock.release()


class GuardedDict(collections.OrderedDict):
    """The cache's entries, checked: every read, write and iteration must happen while
    the calling thread holds `lock`. Checking the owner makes a missing lock fail every
    run, not only when two threads happen to collide."""

    def __init__(self, lock: OwnedLock):
        super().__init__()
        self.lock, self.violations = lock, []

    def _check(self, what: str) -> None:
        if self.lock.owner != threading.get_ident():
            self.violations.append(what)


def _guarded(name):
    def method(self, *args, **kwargs):
        self._check(name)
        return getattr(collections.OrderedDict, name)(self, *args, **kwargs)

    return method


for _name in (
    "get",
    "__getitem__",
    "__setitem__",
    "__delitem__",
    "__contains__",
    "__iter__",
    "pop",
    "move_to_end",
    "values",
    "items",
    "keys",
    "__len__",
):
    setattr(GuardedDict, _name, _guarded(_name))


def touches_without_the_lock(ask) -> list[str]:
    """Six threads each call `ask(cache, regex)` 20 times over five regexes, on a cache with
    room for two (hits move entries, inserts evict): the touches of `self.entries` made
    without holding `self.lock`, as a guarded dict records them (every run, not only when
    two threads happen to collide). A thread's error is raised here."""
    cache, calls = counting_cache(max_entries=2)
    cache.lock = OwnedLock()
    cache.entries = GuardedDict(cache.lock)
    start = threading.Barrier(6)
    errors = []

    def run(i):
        start.wait()
        try:
            for n in range(20):
                ask(cache, f"r{(i + n) % 5}")
        except Exception as e:  # a thread's error is lost unless the test raises it again
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    cache.shutdown()
    if errors:
        raise errors[0]
    return sorted(set(cache.entries.violations))


@pytest.mark.task3_1
def test_six_threads_touch_the_entries_only_under_the_lock():
    """Six threads ask for five regexes at once with room for two: hits move entries,
    inserts evict. Every touch of `self.entries` (the lookup, `move_to_end`, the insert,
    `_evict_lru`'s walk) must hold `self.lock`; unlocked, another thread's eviction
    raises `OrderedDict mutated during iteration` now and then (a guarded dict says so
    every run)."""
    touched = touches_without_the_lock(lambda cache, regex: cache.init_fsm_in_background(regex).event.wait(5))
    assert not touched, (
        f"six threads calling init_fsm_in_background: self.entries was touched without "
        f"holding self.lock ({', '.join(touched)}); the lookup, the LRU move, the insert "
        f"and self._evict_lru() all belong inside `with self.lock:`"
    )


# ------------------------------------------------------------------------- task3_2
@pytest.mark.task3_2
def test_get_fsm_returns_one_compiled_fsm_equal_to_the_brute_force_index(stage):
    first = stage.cache.get_fsm(DATE)
    again = stage.cache.get_fsm(DATE)
    assert again is first and stage.cache.compile_count == 1, (
        f"get_fsm({DATE!r}) twice must return the one cached FSM, compiled once; got "
        f"{'the same' if again is first else 'another'} object, compile_count {stage.cache.compile_count}"
    )
    oracle = build_index_reference(ByteDFA.from_char_dfa(compile_regex(DATE)), VOCAB, EOS)
    assert first.index.state_to_tokens == oracle.state_to_tokens, (
        f"get_fsm({DATE!r}) returned an FSM whose index differs from the brute-force index of that regex"
    )


@pytest.mark.task3_2
def test_a_compile_that_failed_after_making_its_fsm_is_an_error(stage, monkeypatch):
    """A compile can fail after its FSM is made (here, measuring its size raises): the entry
    then holds a value and an error, and get_fsm raises the error. A check of the value alone
    returned the FSM of a failed compile (a stranger's solution)."""
    regex = "[0-9]{3}-[0-9]"

    def sizeof(value):
        raise RuntimeError("cannot measure this FSM")

    monkeypatch.setattr(stage.cache, "sizeof", sizeof)
    error = raises_constraint_error(
        lambda: stage.cache.get_fsm(regex, timeout=30),
        f"get_fsm({regex!r}) on a compile that made its FSM and then failed (its entry has a value and an "
        f"error) must raise ConstraintError with the error: ask entry.error, not entry.value",
    )
    assert "cannot measure this FSM" in str(error), f"the ConstraintError must carry the entry's error; got {error}"


@pytest.mark.task3_2
def test_get_fsm_timeout_raises_and_the_compile_goes_on(stage):
    opened = gate(stage.cache, DATE)
    want = f"compiling regex '{DATE}' took longer than 0.05 s"
    error = raises_constraint_error(
        lambda: stage.cache.get_fsm(DATE, timeout=0.05),
        f"get_fsm({DATE!r}, timeout=0.05) on a compile that has not finished must raise ConstraintError({want!r})",
    )
    assert want in str(error), f"get_fsm({DATE!r}, timeout=0.05) timed out: expected the message {want!r}; got {error}"
    opened.set()
    got = stage.cache.get_fsm(DATE, timeout=5).regex  # the same compile finished
    assert got == DATE, f"get_fsm({DATE!r}) after the timeout returned the FSM of {got!r}"
    assert stage.cache.compile_count == 1, (
        f"a timed-out get_fsm must leave its compile running, not start "
        f"another: compile_count {stage.cache.compile_count}, expected 1"
    )


@pytest.mark.task3_2
def test_the_timeout_message_shows_the_regex_as_the_client_wrote_it(stage):
    """`shown_regex`, not `repr`: a client compares the message with what it sent, and repr
    doubles every backslash (`'\\\\d{4}'`)."""
    regex = r"\d{4}-\d{2}"
    opened = gate(stage.cache, regex)
    want = f"compiling regex '{regex}' took longer than 0.05 s"
    try:
        error = raises_constraint_error(
            lambda: stage.cache.get_fsm(regex, timeout=0.05),
            f"get_fsm('{regex}', timeout=0.05) on a compile that has not finished must raise ConstraintError: {want}",
        )
    finally:
        opened.set()
    # Quoted without repr, which would double the backslashes this test is about.
    assert want in str(error), (
        f"get_fsm('{regex}', timeout=0.05) timed out: expected the message: {want} (the "
        f"regex as the client wrote it: shown_regex, not repr); got: {error}"
    )


@pytest.mark.task3_2
def test_get_fsm_raises_the_compile_error_and_caches_it(stage):
    for attempt in ("first", "second"):
        error = raises_constraint_error(
            lambda: stage.cache.get_fsm("[z-a]", timeout=5),
            f"get_fsm('[z-a]', timeout=5), asked a {attempt} time, must raise "
            f"ConstraintError with the compile's own error (the entry's error)",
        )
        assert "bad character range z-a" in str(error) and "took longer" not in str(error), (
            f"get_fsm('[z-a]') must raise the compile's own error (a bad range), not a timeout: {error}"
        )
        entry = stage.cache.init_fsm_in_background("[z-a]")
        assert str(error) == entry.error, (
            f"get_fsm('[z-a]') must raise ConstraintError(entry.error) as it is, so the client reads the "
            f"compile's own message; it raised {str(error)!r}, the entry's error is {entry.error!r}"
        )
    assert stage.cache.compile_count == 1, (  # the failure is cached too
        f"get_fsm('[z-a]') twice: the failed compile is cached, so it runs once; compile_count "
        f"{stage.cache.compile_count}"
    )


@pytest.mark.task3_2
def test_six_threads_get_fsm_and_touch_the_entries_only_under_the_lock():
    """get_fsm looks a regex up only through init_fsm_in_background (under the lock, with
    the LRU move); a read of `self.entries` of its own, outside the lock, races another
    thread's eviction (a guarded dict says so every run)."""
    touched = touches_without_the_lock(lambda cache, regex: cache.get_fsm(regex, timeout=5))
    assert not touched, (
        f"six threads calling get_fsm: self.entries was touched without holding self.lock "
        f"({', '.join(touched)}); let init_fsm_in_background do the lookup"
    )


@pytest.mark.task3_2
def test_get_fsm_with_timeout_zero_does_not_wait(stage):
    """`timeout=0` is a limit of zero seconds, not "no limit" (that is `None`)."""
    opened = gate(stage.cache, DATE)
    try:
        error = raises_constraint_error(
            lambda: stage.cache.get_fsm(DATE, timeout=0),
            f"get_fsm({DATE!r}, timeout=0) on a compile that has not finished must raise "
            f"ConstraintError at once, naming the timeout ('took longer than 0 s'): "
            f"timeout=0 is a limit of zero seconds, not None (no limit)",
        )
    finally:
        opened.set()
    assert "took longer than 0 s" in str(error), (
        f"get_fsm({DATE!r}, timeout=0) timed out: the message must say 'took longer than 0 s'; got {error}"
    )


class CompileFinishingAt:
    """An entry's event for a compile that finishes `at` seconds after the lookup, on a
    simulated clock (no test waits in real time): `wait(t)` moves the clock on by `t` (to
    the end with `None`) and says whether the compile is done by then."""

    def __init__(self, at: float):
        self.at, self.clock = at, 0.0

    def is_set(self) -> bool:
        return self.clock >= self.at

    def wait(self, timeout=None) -> bool:
        self.clock = self.at if timeout is None else min(self.clock + timeout, max(self.clock, self.at))
        return self.is_set()


def finished_entry_seen_late(regex: str, at: float) -> FSMCache:
    """A cache whose compile of `regex` is done (its value stored) but whose event says so
    only `at` simulated seconds after the next lookup starts waiting."""
    cache, _ = counting_cache()
    entry = cache.init_fsm_in_background(regex)
    assert entry.event.wait(5), f"test premise: the toy compile of {regex!r} finishes at once"
    entry.event = CompileFinishingAt(at)
    return cache


@pytest.mark.task3_2
def test_get_fsm_waits_a_timeout_of_less_than_a_second():
    """A timeout is seconds as a float: 0.9 s is 0.9 s, not 0 (`int(0.9)`): a compile that
    finishes 0.3 s into a 0.9 s wait is returned (a simulated clock: the test does not wait)."""
    cache = finished_entry_seen_late("a+b", at=0.3)
    try:
        got = cache.get_fsm("a+b", timeout=0.9)
    except ConstraintError as error:
        pytest.fail(
            f"get_fsm('a+b', timeout=0.9) on a compile that finishes after 0.3 s must return its FSM: wait on the "
            f"entry's event for the timeout as given, a float; it raised ConstraintError: {error}"
        )
    finally:
        cache.shutdown()
    assert got == ("fsm", "a+b"), (
        f"get_fsm('a+b', timeout=0.9) must return the entry's value ('fsm', 'a+b'); got {got!r}"
    )


@pytest.mark.task3_2
def test_get_fsm_waits_the_timeout_once_not_more():
    """The timeout bounds the whole wait: a compile that finishes 1.5 s in, with a timeout
    of 1.0 s, has timed out (a simulated clock). A second wait after the first (or a loop
    that waits the timeout again) would return its FSM instead."""
    cache = finished_entry_seen_late("a+b", at=1.5)
    try:
        raises_constraint_error(
            lambda: cache.get_fsm("a+b", timeout=1.0),
            "get_fsm('a+b', timeout=1.0) on a compile that finishes after 1.5 s must raise ConstraintError (the "
            "timeout is the whole wait: one event.wait(timeout))",
        )
    finally:
        cache.shutdown()


@pytest.mark.task3_2
def test_get_fsm_without_a_timeout_waits_as_long_as_the_compile_takes():
    """`timeout=None` is no limit: a compile that needs an hour (a simulated clock: the test
    does not wait) is waited for and returned, never cut at a default of the solution's own."""
    cache = finished_entry_seen_late("a+b", at=3600.0)
    try:
        got = cache.get_fsm("a+b")
    except ConstraintError as error:
        pytest.fail(
            f"get_fsm('a+b') (timeout None: no limit) on a compile that takes an hour must wait and return its "
            f"FSM: pass the timeout to the event's wait as it is, None included; it raised ConstraintError: {error}"
        )
    finally:
        cache.shutdown()
    assert got == ("fsm", "a+b"), f"get_fsm('a+b') must return the entry's value ('fsm', 'a+b'); got {got!r}"


@pytest.mark.task3_2
def test_the_timeout_message_names_the_timeout_as_the_caller_gave_it():
    """`{timeout}` as the page writes it: a timeout of 1.0 reads "1.0 s", not "1 s" (`:g`)
    (a compile that needs 10 s on a simulated clock: the test does not wait)."""
    cache = finished_entry_seen_late("a+b", at=10.0)
    want = "compiling regex 'a+b' took longer than 1.0 s"
    try:
        error = raises_constraint_error(
            lambda: cache.get_fsm("a+b", timeout=1.0),
            f"get_fsm('a+b', timeout=1.0) on a compile that needs 10 s must raise ConstraintError({want!r})",
        )
    finally:
        cache.shutdown()
    assert str(error) == want, (
        f"get_fsm('a+b', timeout=1.0) timed out: expected the message {want!r}; got {str(error)!r}"
    )


@pytest.mark.task3_2
def test_get_fsm_raises_a_compile_error_even_with_an_empty_message():
    """A failed compile is one whose `entry.error is not None`: an error with an empty
    message is still an error (`if entry.error:` would return the entry's value, None)."""

    def compile_index(regex):
        raise ConstraintError("")

    cache = FSMCache(compile_index, lambda regex, index: index, "fp")
    try:
        raises_constraint_error(
            lambda: cache.get_fsm("x", timeout=5),
            "get_fsm('x', timeout=5) on a compile that failed with ConstraintError('') must raise "
            "ConstraintError (entry.error is '', not None: test `entry.error is not None`)",
        )
    finally:
        cache.shutdown()


# ------------------------------------------------------------------------- task3_3
def arrive(stage, regex: str | None) -> Req:
    req = Req(prompt="p", origin_input_ids=[0], sampling_params=SamplingParams(regex=regex))
    stage.on_arrival(req)
    return req


@pytest.mark.task3_3
def test_poll_releases_ready_requests_in_arrival_order_without_waiting_for_a_slow_one(stage):
    opened = gate(stage.cache, DATE)
    slow, fast, free = arrive(stage, DATE), arrive(stage, r"[0-9][0-9]"), arrive(stage, None)
    stage.cache.get_fsm(r"[0-9][0-9]", timeout=5)  # the fast compile is done ...
    queue = [slow, fast, free]
    names = {id(slow): "slow", id(fast): "fast", id(free): "free"}
    got = stage.poll_grammar_queue(queue)  # ... so it overtakes slow (no head-of-line blocking)
    assert got == [fast, free], (
        f"queue [slow (compiling), fast (compiled), free (no regex)]: poll must "
        f"release [fast, free]; got {labels(got, names)}"
    )
    got = stage.poll_grammar_queue([slow])  # slow still compiling: it stays
    assert got == [], f"slow's compile is still running: poll([slow]) must release nothing; got {labels(got, names)}"
    opened.set()
    stage.cache.get_fsm(DATE, timeout=5)
    got = stage.poll_grammar_queue([slow])
    assert got == [slow], f"slow's compile is done: poll([slow]) must release [slow]; got {labels(got, names)}"
    for req, regex in [(slow, DATE), (fast, r"[0-9][0-9]")]:
        grammar = req.grammar
        assert (
            grammar is not None and grammar.fsm.regex == regex and grammar.state == grammar.fsm.index.initial_state
        ), (
            f"{names[id(req)]} (regex {regex!r}) must be released with the FSM of its regex at its initial state; "
            f"got {None if grammar is None else (grammar.fsm.regex, grammar.state)}"
        )
        assert not req.finished, f"{names[id(req)]} was compiled fine but finished: {req.finished_reason}"
    rids = {slow.rid: "slow", fast.rid: "fast", free.rid: "free"}
    assert stage.pending == {}, (
        f"slow, fast and free were all released, so none is left in pending; still there: "
        f"{[rids.get(rid, rid) for rid in stage.pending]}"
    )


@pytest.mark.task3_3
def test_poll_aborts_a_failed_compile_with_its_message(stage):
    bad, good = arrive(stage, "(a|"), arrive(stage, DATE)
    stage.cache.get_fsm(DATE, timeout=5)
    raises_constraint_error(
        lambda: stage.cache.get_fsm("(a|", timeout=5),
        "get_fsm('(a|', timeout=5) must raise ConstraintError: the regex does not compile",
    )
    got = stage.poll_grammar_queue([bad, good])
    assert got == [bad, good], (
        f"queue [bad (regex '(a|' failed to compile), good (compiled)]: both go on, in "
        f"order; got {labels(got, {id(bad): 'bad', id(good): 'good'})}"
    )
    assert (
        bad.finished_reason is not None
        and bad.finished_reason["type"] == "abort"
        and "(a|" in bad.finished_reason.get("message", "")
    ), f"the request for '(a|' must be aborted with the compile's message naming the regex; got {bad.finished_reason}"
    assert bad.grammar is None and good.grammar is not None and not good.finished, (
        f"bad gets no grammar ({bad.grammar!r}); good ({DATE!r}) gets its grammar and goes on "
        f"(grammar {good.grammar!r}, finished {good.finished_reason})"
    )


@pytest.mark.task3_3
def test_poll_aborts_requests_whose_compile_outlives_the_timeout():
    st = FSMCacheStage(StageContext(ToyTokenizer(VOCAB), len(VOCAB), torch.device("cpu"), {"compile_timeout": 0.01}))
    opened = gate(st.cache, DATE)
    first, second = arrive(st, DATE), arrive(st, DATE)
    time.sleep(0.05)
    got = st.poll_grammar_queue([first, second])
    assert got == [first, second], (
        f"two requests whose compile outlived the 0.01 s timeout: both are released "
        f"(aborted), in order, [first, second]; got "
        f"{labels(got, {id(first): 'first', id(second): 'second'})}"
    )
    want = {"type": "abort", "kind": AbortKind.GRAMMAR, "message": "compiling the regex took longer than 0.01 s"}
    for name, req in (("first", first), ("second", second)):
        assert req.finished_reason == want, f"the {name} request: expected {want}; got {req.finished_reason}"
    rids = {first.rid: "first", second.rid: "second"}
    assert st.pending == {}, (
        f"first and second were released (aborted), so none is left in pending; still there: "
        f"{[rids.get(rid, rid) for rid in st.pending]}"
    )
    opened.set()
    st.shutdown()


@pytest.mark.task3_3
def test_poll_takes_a_finished_compile_even_when_it_finished_after_the_timeout():
    """A compile that is done is taken, however long its request waited: the timeout is
    only for a compile that is still running (check is_done before the clock)."""
    st = FSMCacheStage(StageContext(ToyTokenizer(VOCAB), len(VOCAB), torch.device("cpu"), {"compile_timeout": 5.0}))
    req = arrive(st, DATE)
    st.cache.get_fsm(DATE, timeout=5)
    st.pending[req.rid].since -= 60  # done, and waited past the 5 s timeout
    got = st.poll_grammar_queue([req])
    assert got == [req], (
        f"a request whose compile is done (after waiting 60 s, past the 5 s timeout) is released "
        f"with its grammar: poll must return [req]; got {labels(got, {id(req): 'req'})}"
    )
    assert not req.finished, (
        f"a compile that is done was aborted: {req.finished_reason} (a done compile is taken "
        f"however long its request waited: check is_done before the clock)"
    )
    assert req.grammar is not None and req.grammar.fsm.regex == DATE, (
        f"the released request gets the FSM of {DATE!r}; got grammar {req.grammar!r}"
    )
    rids = {req.rid: "req"}
    assert st.pending == {}, (
        f"the released request leaves pending; still there: {[rids.get(rid, rid) for rid in st.pending]}"
    )
    st.shutdown()


@dataclass
class FakeHandle:
    """What stage s5 puts in the queue: an opaque handle (no `event`, no `value`)."""

    done: bool
    grammar: str


@pytest.mark.task3_3
def test_poll_uses_only_is_done_and_take_and_names_the_constraint_kind():
    """The queue runs s5's handles too: only `is_done(handle)` and `take(req, handle)` may
    look inside one. A timeout names the request's kind of constraint (json_schema here)."""
    taken = []

    def take(req, handle):
        taken.append(req)
        req.grammar = handle.grammar

    queue = GrammarQueue(timeout=1.0, is_done=lambda h: h.done, take=take, max_pending=8)
    ready = Req(prompt="p", origin_input_ids=[0], sampling_params=SamplingParams(json_schema='{"type": "integer"}'))
    late = Req(prompt="p", origin_input_ids=[0], sampling_params=SamplingParams(json_schema='{"type": "string"}'))
    queue.wait_for(ready, FakeHandle(True, "its grammar"))
    queue.wait_for(late, FakeHandle(False, "never"))
    queue.pending[late.rid].since -= 60
    names = {id(late): "late", id(ready): "ready"}
    got = queue.poll_grammar_queue([late, ready])
    assert got == [late, ready], (
        f"queue [late (timed out), ready (done)]: both go on, in queue order, [late, ready]; got {labels(got, names)}"
    )
    assert taken == [ready] and ready.grammar == "its grammar", (
        f"the done request gets its grammar through take(req, handle), called once for ready alone; take was "
        f"called for {labels(taken, names)}, and ready.grammar is {ready.grammar!r}"
    )
    want = {"type": "abort", "kind": AbortKind.GRAMMAR, "message": "compiling the json_schema took longer than 1.0 s"}
    assert late.finished_reason == want, (
        f"a json_schema request that waited past the timeout is aborted with {want}; got {late.finished_reason}"
    )
    rids = {late.rid: "late", ready.rid: "ready"}
    assert queue.pending == {}, (
        f"both requests were released, so none is pending; still there: {[rids.get(rid, rid) for rid in queue.pending]}"
    )


@pytest.mark.task3_3
def test_each_request_of_one_compile_gets_its_own_grammar_through_take():
    """Requests that wait on one compile share its FSM, never a grammar: `take(req, handle)`
    once per request gives each its own state to advance. A grammar taken once and handed
    to the others (or kept for a later request on the same handle) moves them all together."""
    taken = []

    def take(req, handle):
        taken.append(req)
        req.grammar = object()  # a fresh state of the request's own

    queue = GrammarQueue(timeout=1.0, is_done=lambda h: h.done, take=take, max_pending=8)
    handle = FakeHandle(True, "one compile")
    first, second = (Req(prompt="p", origin_input_ids=[0], sampling_params=SamplingParams(regex="a+")) for _ in "12")
    later = Req(prompt="p", origin_input_ids=[0], sampling_params=SamplingParams(regex="a+"))
    names = {id(first): "first", id(second): "second", id(later): "later"}
    queue.wait_for(first, handle)
    queue.wait_for(second, handle)
    queue.poll_grammar_queue([first, second])
    queue.wait_for(later, handle)  # the same compile, found in the cache later
    queue.poll_grammar_queue([later])
    assert taken == [first, second, later], (
        f"three requests on one finished compile (two in one poll, one in the next): take(req, handle) once for "
        f"each, in order; take was called for {labels(taken, names)}"
    )
    grammars = {id(first.grammar), id(second.grammar), id(later.grammar)}
    assert len(grammars) == 3, "each request needs a grammar of its own (from its own take), not a shared one"


@pytest.mark.task3_3
def test_a_timeout_names_every_kind_of_constraint_as_constraint_gives_it():
    """The kind is `req.sampling_params.constraint()[0]`, whichever of the four it is: a
    guess from the request's fields ("regex if it has one, else json_schema") names an
    ebnf or structural_tag request's grammar wrongly."""
    texts = {
        "regex": "a+",
        "json_schema": '{"type": "integer"}',
        "ebnf": 'root ::= "a"',
        "structural_tag": '{"structures": [], "triggers": []}',
    }
    queue = GrammarQueue(timeout=1.0, is_done=lambda h: h.done, take=lambda req, h: None, max_pending=8)
    reqs = {
        kind: Req(prompt="p", origin_input_ids=[0], sampling_params=SamplingParams(**{kind: text}))
        for kind, text in texts.items()
    }
    for req in reqs.values():
        queue.wait_for(req, FakeHandle(False, "never"))
        queue.pending[req.rid].since -= 60
    queue.poll_grammar_queue(list(reqs.values()))
    got = {kind: (req.finished_reason or {}).get("message") for kind, req in reqs.items()}
    want = {kind: f"compiling the {kind} took longer than 1.0 s" for kind in texts}
    assert got == want, (
        f"one request of each kind, each past the 1.0 s timeout: expected the messages {want}; got {got}"
    )


@pytest.mark.task3_3
def test_poll_releases_a_constrained_request_that_is_not_pending_at_once():
    """Not in `pending` means ready, whatever the request's constraint: s3's blocking mode
    compiles at arrival and s5 gives a grammar found in its cache at arrival, so such a
    request has its grammar and waits for nothing (look in `pending`, not at the regex)."""
    asked = []
    queue = GrammarQueue(
        timeout=1.0,
        is_done=lambda h: asked.append("is_done") or True,
        take=lambda r, h: asked.append("take"),
        max_pending=8,
    )
    compiled = Req(prompt="p", origin_input_ids=[0], sampling_params=SamplingParams(regex=DATE))
    compiled.grammar = "its grammar, given at arrival"
    try:
        got = queue.poll_grammar_queue([compiled])
    except Exception as error:
        pytest.fail(
            f"a request with a regex whose grammar was given at arrival is not in pending: poll must release it at "
            f"once (a request not in self.pending is ready, constrained or not); it raised "
            f"{type(error).__name__}: {error}"
        )
    assert got == [compiled] and asked == [], (
        f"a request with a regex whose grammar was given at arrival is not in pending: poll releases it at once "
        f"without is_done or take; got {labels(got, {id(compiled): 'compiled'})}, calls {asked}"
    )
    assert compiled.grammar == "its grammar, given at arrival" and not compiled.finished, (
        f"the released request keeps the grammar it was given; grammar {compiled.grammar!r}, "
        f"finished {compiled.finished_reason}"
    )


@pytest.mark.task3_3
def test_poll_keeps_queue_order_when_an_unconstrained_request_comes_first():
    """Ready requests leave in queue order, whichever kind: an unconstrained one ahead of a
    grammar request stays ahead (walk the queue, not `pending` and then the rest)."""
    queue = GrammarQueue(timeout=1.0, is_done=lambda h: h.done, take=lambda r, h: None, max_pending=8)
    free = Req(prompt="p", origin_input_ids=[0], sampling_params=SamplingParams())
    done = Req(prompt="p", origin_input_ids=[0], sampling_params=SamplingParams(regex=DATE))
    queue.wait_for(done, FakeHandle(True, "its grammar"))
    got = queue.poll_grammar_queue([free, done])
    assert got == [free, done], (
        f"queue [free (no regex), done (compiled)]: both are ready and leave in queue order, [free, done]; got "
        f"{labels(got, {id(free): 'free', id(done): 'done'})}"
    )


@pytest.mark.task3_3
def test_poll_aborts_only_a_wait_longer_than_the_timeout_to_the_last_fraction():
    """`self.timeout` is a limit in seconds, compared as a float: a request that has waited
    exactly 5.0 s of a 5 s timeout waits on, one that has waited 5.0005 s is aborted (the
    clock, `time.monotonic`, is fixed by the test)."""
    for waited, aborted in ((5.0, False), (5.0005, True)):
        queue = GrammarQueue(timeout=5.0, is_done=lambda h: h.done, take=lambda r, h: None, max_pending=8)
        req = Req(prompt="p", origin_input_ids=[0], sampling_params=SamplingParams(regex=DATE))
        queue.wait_for(req, FakeHandle(False, "never"))
        queue.pending[req.rid].since = 100.0
        with mock.patch.object(time, "monotonic", return_value=100.0 + waited):
            got = queue.poll_grammar_queue([req])
        want = "aborted and released" if aborted else "left waiting (not longer than the timeout)"
        assert (got, bool(req.finished)) == (([req], True) if aborted else ([], False)), (
            f"a request still compiling that has waited {waited} s, timeout 5.0 s: it must be {want}; poll returned "
            f"{labels(got, {id(req): 'req'})}, finished {req.finished_reason}"
        )
