"""minisglang/gc_guard.py: full collections that found the heap slow to walk freeze what
survived them, which is safe because grammars hold no reference cycles.

Oracles: `gc.get_freeze_count()` for what was frozen, `gc.collect()`'s count of unreachable
objects for cycles (0: reference counting alone freed the grammar).
"""

from __future__ import annotations

import gc
import random

import pytest

from minisglang.backends.fsm_backend import FSMBackend
from minisglang.gc_guard import GcGuard
from minisglang.tokenizer import Tokenizer


class Cycle:
    def __init__(self):
        self.me = self


@pytest.fixture
def guard():
    frozen = gc.get_freeze_count()
    g = GcGuard(slow_seconds=0.0).install()  # every full collection counts as slow
    yield g
    g.uninstall()
    assert g._on_gc not in gc.callbacks
    if not frozen:
        gc.unfreeze()  # (the test froze what the whole process holds: give it back)


def test_a_slow_full_collection_freezes_its_survivors_and_still_frees_garbage(guard):
    kept = [Cycle() for _ in range(100)]
    garbage = Cycle()
    del garbage
    before = gc.get_freeze_count()
    assert gc.collect() >= 1  # the garbage cycle was collected before anything froze
    assert guard.freezes == 1 and guard.longest > 0
    assert gc.get_freeze_count() >= before + len(kept)
    walked = {id(o) for o in gc.get_objects()}  # what a collection walks (not the frozen)
    assert not any(id(k) in walked for k in kept)


def test_young_collections_freeze_nothing(guard):
    gc.collect(0)
    gc.collect(1)
    assert guard.freezes == 0


def test_a_fast_full_collection_freezes_nothing():
    g = GcGuard(slow_seconds=60.0).install()
    try:
        before = gc.get_freeze_count()
        gc.collect()
        assert g.freezes == 0 and gc.get_freeze_count() == before
    finally:
        g.uninstall()


# Grammars of the issue-30 classes (lazy automaton, a regex, a schema with an intersection,
# a structural tag's difference): walked a while, then dropped.
GRAMMARS = [
    ("regex", r"([\s\S]*[aeiou][\s\S]{8}){6}"),
    (
        "json_schema",
        '{"type":"object","properties":{"s":{"type":"string","pattern":"^(x|y)*x(x|y){14}$",'
        '"minLength":16,"maxLength":60}},"required":["s"]}',
    ),
    (
        "structural_tag",
        '{"type":"structural_tag","triggers":["<a"],"structures":[{"begin":"<a>",'
        '"schema":{"type":"object"},"end":"</a>"}]}',
    ),
]


@pytest.mark.parametrize("kind, text", GRAMMARS, ids=[k for k, _ in GRAMMARS])
def test_a_grammar_holds_no_reference_cycle(bundled_model_path, kind, text):
    """What GcGuard relies on: a frozen grammar is still freed, by reference counting."""
    tok = Tokenizer.from_pretrained(bundled_model_path)
    backend = FSMBackend(tok, tok.vocab_size)
    try:
        grammar = backend._compile_safely(kind, text)
        rng = random.Random(0)
        for _ in range(40):
            grammar.prepare()
            ids = [t for t in grammar.fsm.index.allowed_token_ids(grammar.state) if t != tok.eos_token_id]
            if not ids:
                break
            grammar.accept_token(rng.choice(ids))
        gc.collect()
        gc.disable()
        try:
            tracked = len(gc.get_objects())
            del grammar
            freed = tracked - len(gc.get_objects())
            assert gc.collect() == 0  # nothing was left for the collector: no cycles
        finally:
            gc.enable()
        assert freed > 100  # (the grammar was something)
    finally:
        backend.shutdown()


def test_a_reclaim_collects_the_cycles_a_freeze_kept_in_flight(guard):
    """A freeze under load keeps what is in flight: a cycle alive at the freeze that dies
    later is out of every collection's reach, until `reclaim` unfreezes, collects and freezes
    again (a stranger's soak: ~270 objects kept a freeze, a freeze a minute)."""
    import weakref

    in_flight = Cycle()
    alive = weakref.ref(in_flight)
    gc.collect()  # slow by the fixture's measure: freezes the cycle with everything else
    assert guard.freezes == 1 and guard.unreclaimed == 1
    del in_flight
    gc.collect()
    assert alive() is not None  # frozen: no collection reaches it
    freezes = guard.freezes
    assert guard.reclaim() >= 1
    assert alive() is None
    # The reclaim's own full collection is not judged (it would count as slow here and freeze
    # again, asking for another reclaim at the next idle moment, and so on for ever).
    assert guard.freezes == freezes and not guard.unreclaimed and guard.reclaims == 1 and guard.reclaimed >= 1
    kept = Cycle()  # the survivors of a reclaim are frozen again
    guard.reclaim()
    assert id(kept) not in {id(o) for o in gc.get_objects()}


def test_collecting_the_tests_leaves_nothing_frozen_and_the_thresholds_as_they_were():
    """tests/conftest.py lifts generation 2's threshold while the suite is collected (no full
    collection walks the growing heap meanwhile). It froze what collection built, too, and
    test_a_fast_full_collection_freezes_nothing then failed now and then under -n 2: its
    count of frozen objects fell by 2 during its gc.collect() (frozen objects freed by
    reference counting), where it counts on nothing being frozen."""
    import conftest

    thresholds, before = gc.get_threshold(), gc.get_freeze_count()
    wrapper = conftest.pytest_collection(None)
    next(wrapper)  # collection runs here
    assert gc.get_threshold()[:2] == thresholds[:2] and gc.get_threshold()[2] > thresholds[2]
    with pytest.raises(StopIteration):
        wrapper.send(None)
    assert gc.get_freeze_count() == before and gc.get_threshold() == thresholds
