"""Stage s3: one compile per key, background compiles, the grammar queue, the disk cache."""
import re
import threading

import pytest

import minisglang as sgl
from minisglang.stages.s3_fsm_cache import FSMCache

Q = "<|user|>\nWhen was she born?\n<|assistant|>\n"
DATE = r"\d{4}-\d{2}-\d{2}"


def make_engine(**opts):
    return sgl.Engine(stage="s3", **opts)


def gate_compiles(engine, only=None):
    """Make compiles (of `only`, or all) wait for the returned event: as slow as the test wants."""
    gate = threading.Event()
    real = engine.stage.cache.compile_index

    def slow(regex):
        if only is None or regex == only:
            gate.wait(30)
        return real(regex)

    engine.stage.cache.compile_index = slow
    return gate


@pytest.mark.task3_1
def test_concurrent_requests_for_one_regex_compile_once():
    calls = []
    started = threading.Barrier(16)

    def compile_index(regex):
        calls.append(regex)
        return regex

    cache = FSMCache(compile_index, lambda regex, index: (regex, index), "fp", threads=4)
    entries = []

    def ask():
        started.wait()
        entries.append(cache.init_fsm_in_background("a+b"))

    threads = [threading.Thread(target=ask) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(e is entries[0] for e in entries)
    entries[0].event.wait(5)
    assert calls == ["a+b"] and cache.compile_count == 1
    cache.shutdown()


@pytest.mark.task3_1
def test_engine_compiles_a_shared_regex_once():
    eng = make_engine()
    outs = eng.generate([Q] * 10, [{"regex": DATE, "temperature": 1.0, "seed": s} for s in range(10)])
    assert eng.stage.cache.compile_count == 1
    assert all(re.fullmatch(DATE, o["text"]) for o in outs)


@pytest.mark.task3_1
def test_cache_is_bounded_lru():
    eng = make_engine(max_cache_entries=2)
    for r in [r"\d", r"\d\d", r"[ab]", r"[cd]"]:
        eng.generate(Q, {"regex": r, "temperature": 0})
    assert len(eng.stage.cache.entries) <= 2


@pytest.mark.task3_3
def test_nonblocking_queue_keeps_others_decoding():
    eng = make_engine()
    gate = gate_compiles(eng)
    other = eng.submit(Q, {"temperature": 0, "max_new_tokens": 30, "ignore_eos": True})
    eng.step()                                   # prefill of the unconstrained request
    slow = eng.submit(Q, {"regex": DATE, "temperature": 0})
    before = len(other.output_ids)
    for _ in range(10):
        eng.step()
    assert slow in eng.scheduler.grammar_queue   # still compiling ...
    assert len(other.output_ids) == before + 10  # ... while the other decoded every step
    gate.set()
    while not slow.released:
        eng.step()
    assert re.fullmatch(DATE, slow.output_text)


@pytest.mark.task3_3
def test_grammar_queue_releases_in_arrival_order():
    eng = make_engine()
    gate = gate_compiles(eng, only=r"\d{3}")
    first = eng.submit(Q, {"regex": r"\d{3}", "temperature": 0})     # slow compile
    second = eng.submit(Q, {"regex": r"\d{2}", "temperature": 0})    # fast compile
    third = eng.submit(Q, {"temperature": 0, "max_new_tokens": 3})   # no grammar at all
    for _ in range(5):
        eng.step()
    assert eng.stage.cache.entries[eng.stage.cache.key(r"\d{2}")].event.is_set()
    assert first in eng.scheduler.grammar_queue and second in eng.scheduler.grammar_queue
    assert third.released                        # unconstrained requests never wait
    gate.set()
    while not (first.released and second.released):
        eng.step()
    admits = [e["rid"] for e in eng.trace if e["event"] == "admit"]
    assert admits.index(first.rid) < admits.index(second.rid)


@pytest.mark.task3_3
def test_invalid_regex_in_background_aborts_with_message():
    eng = make_engine()
    outs = eng.generate([Q, Q], [{"regex": "[z-a]"}, {"regex": DATE, "temperature": 0}])
    reason = outs[0]["meta_info"]["finish_reason"]
    assert reason["type"] == "abort" and "[z-a]" in reason["message"]
    assert re.fullmatch(DATE, outs[1]["text"])


@pytest.mark.task3_3
def test_compile_timeout_aborts_and_nobody_waits_forever():
    eng = make_engine(compile_timeout=0.05)
    gate = gate_compiles(eng)
    outs = eng.generate([Q, Q], [{"regex": DATE}, {"temperature": 0, "max_new_tokens": 4}])
    gate.set()
    assert outs[0]["meta_info"]["finish_reason"]["type"] == "abort"
    assert "took longer than 0.05 s" in outs[0]["meta_info"]["finish_reason"]["message"]
    assert outs[1]["meta_info"]["finish_reason"]["type"] == "length"


@pytest.mark.task3_2
def test_blocking_get_fsm_waits_on_arrival():
    eng = make_engine(grammar_queue="blocking")
    req = eng.submit(Q, {"regex": DATE, "temperature": 0})
    assert req.grammar is not None               # compiled before submit returned
    while not req.released:
        eng.step()
    assert re.fullmatch(DATE, req.output_text)


@pytest.mark.task3_2
def test_blocking_mode_reports_compile_errors():
    eng = make_engine(grammar_queue="blocking")
    out = eng.generate(Q, {"regex": "(a|"})
    assert out["meta_info"]["finish_reason"]["type"] == "abort"
    assert "(a|" in out["meta_info"]["finish_reason"]["message"]


def test_state_limit_aborts_with_message():
    eng = make_engine(max_fsm_states=20)
    out = eng.generate(Q, {"regex": r"[a-z]{50}"})
    assert out["meta_info"]["finish_reason"]["type"] == "abort"
    assert "20" in out["meta_info"]["finish_reason"]["message"]


def test_disk_cache_survives_a_restart_and_ignores_corrupt_files(tmp_path):
    first = make_engine(grammar_cache_dir=str(tmp_path))
    a = first.generate(Q, {"regex": DATE, "temperature": 0})
    assert first.stage.cache.compile_count == 1
    first.shutdown()
    files = list(tmp_path.glob("fsm-*.npz"))
    assert len(files) == 1 and not list(tmp_path.glob("*.tmp"))

    second = make_engine(grammar_cache_dir=str(tmp_path))
    b = second.generate(Q, {"regex": DATE, "temperature": 0})
    assert second.stage.cache.compile_count == 0 and second.stage.cache.disk_hits == 1
    assert a["text"] == b["text"]

    files[0].write_bytes(files[0].read_bytes()[:200])   # a partial write
    third = make_engine(grammar_cache_dir=str(tmp_path))
    c = third.generate(Q, {"regex": DATE, "temperature": 0})
    assert third.stage.cache.compile_count == 1 and c["text"] == a["text"]
