"""Stage s3: one compile per key, background compiles, the grammar queue, the disk cache.

Tests of stages/s3_fsm_cache.py and constrained/compile_service.py, fsm_arrays.py, fsm_disk.py.
"""

import json
import os
import re
import subprocess
import sys
import threading

import numpy as np
import pytest
import torch
from test_exercises_s3 import entry_of, refuse_the_callers_thread

import minisglang as sgl
from minisglang.constrained import bitmask, compile_service, fsm_arrays, fsm_disk
from minisglang.constrained.bitmask import with_rows
from minisglang.constrained.token_fsm import ConstraintError, TokenFSM, compile_regex_index, compile_token_fsm
from minisglang.constrained.token_index import TokenIndex
from minisglang.stages.base import StageContext
from minisglang.stages.s3_fsm_cache import FSMCache, FSMCacheStage
from minisglang.tokenizer import Tokenizer

Q = "<|user|>\nWhen was she born?\n<|assistant|>\n"
DATE = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"


def make_engine(**opts):
    return sgl.Engine(stage="s3", **opts)


def gate_compiles(engine, only=None):
    """Make compiles (of `only`, or all) wait for the returned event: as slow as the test wants."""
    gate = threading.Event()
    real = engine.stage.cache.compile_index

    def slow(regex):
        if only is None or regex == only:
            refuse_the_callers_thread(regex, gate)
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
    entries, errors = [], []

    def ask():
        started.wait()
        try:
            entries.append(cache.init_fsm_in_background("a+b"))
        except Exception as e:  # a thread's error is lost unless the test raises it again
            errors.append(e)

    threads = [threading.Thread(target=ask) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    distinct = len({id(e) for e in entries})
    assert distinct == 1, f"16 threads asking for 'a+b' at once got {distinct} different cache entries, expected one"
    entries[0].event.wait(5)
    assert calls == ["a+b"] and cache.compile_count == 1, (
        f"16 threads asking for 'a+b' at once: one compile expected; compiled {calls} "
        f"(compile_count {cache.compile_count})"
    )
    cache.shutdown()


@pytest.mark.task3_1
def test_engine_compiles_a_shared_regex_once():
    eng = make_engine()
    outs = eng.generate([Q] * 10, [{"regex": DATE, "temperature": 1.0, "seed": s} for s in range(10)])
    aborted = [
        o["meta_info"]["finish_reason"].get("message")
        for o in outs
        if o["meta_info"]["finish_reason"]["type"] == "abort"
    ]
    assert not aborted, f"{len(aborted)} of 10 requests were aborted: {aborted[0]}"
    n = eng.stage.cache.compile_count
    assert n == 1, f"10 requests for one regex compiled it {n} times, not once"
    wrong = [o["text"] for o in outs if not re.fullmatch(DATE, o["text"])]
    assert not wrong, f"outputs that do not match {DATE!r}: {wrong}"


@pytest.mark.task3_1
def test_cache_is_bounded_lru():
    eng = make_engine(max_cache_entries=2)
    for r in [r"[0-9]", r"[0-9][0-9]", r"[ab]", r"[cd]"]:
        out = eng.generate(Q, {"regex": r, "temperature": 0})
        assert re.fullmatch(r, out["text"]), (
            f"regex {r}: text {out['text']!r}, finished {out['meta_info']['finish_reason']}"
        )
    n = len(eng.stage.cache.entries)
    assert n <= 2, f"a cache of max_cache_entries=2 holds {n} entries after 4 regexes"


@pytest.mark.task3_3
def test_nonblocking_queue_keeps_others_decoding():
    eng = make_engine()
    gate = gate_compiles(eng)
    other = eng.submit(Q, {"temperature": 0, "max_new_tokens": 30, "ignore_eos": True})
    eng.step()  # prefill of the unconstrained request
    slow = eng.submit(Q, {"regex": DATE, "temperature": 0})
    before = len(other.output_ids)
    for _ in range(10):
        eng.step()
    assert slow in eng.scheduler.grammar_queue, (
        f"the DATE request whose compile is held back left the grammar queue after 10 steps "
        f"(finished: {slow.finished_reason}): it must wait there until its compile is done"
    )
    decoded = len(other.output_ids) - before
    assert decoded == 10, (
        f"an unconstrained request decoded {decoded} tokens in 10 steps while another "
        f"request's compile was held back: expected 10 (a compile must not block the batch)"
    )
    gate.set()
    while not slow.released:
        eng.step()
    assert re.fullmatch(DATE, slow.output_text), (
        f"the DATE request, released after its compile, wrote {slow.output_text!r} (finished: {slow.finished_reason})"
    )


@pytest.mark.task3_3
def test_a_ready_grammar_is_not_held_up_by_a_slow_compile_before_it():
    eng = make_engine()
    gate = gate_compiles(eng, only=r"[0-9]{3}")
    first = eng.submit(Q, {"regex": r"[0-9]{3}", "temperature": 0})  # slow compile
    second = eng.submit(Q, {"regex": r"[0-9]{2}", "temperature": 0})  # fast compile
    third = eng.submit(Q, {"temperature": 0, "max_new_tokens": 3})  # no grammar at all
    entry = entry_of(eng.stage.cache, r"[0-9]{2}")
    assert entry.event.wait(30), "the compile of '[0-9]{2}' did not finish in 30 s"  # a worker may be starting
    for _ in range(5):
        eng.step()
    assert first in eng.scheduler.grammar_queue, (
        f"first ('[0-9]{{3}}', compile held back) left the grammar queue (finished: {first.finished_reason})"
    )
    assert second.released and re.fullmatch(r"[0-9]{2}", second.output_text), (
        f"second ('[0-9]{{2}}', compiled) must be released and decode past first, whose compile is held back; "
        f"released {second.released}, text {second.output_text!r}"
    )
    assert third.released, "third (no grammar) must never wait in the grammar queue; it was not released"
    gate.set()
    while not first.released:
        eng.step()
    assert re.fullmatch(r"[0-9]{3}", first.output_text), (
        f"first ('[0-9]{{3}}') wrote {first.output_text!r} (finished: {first.finished_reason})"
    )
    admits = [e["rid"] for e in eng.trace if e["event"] == "admit"]
    assert admits.index(second.rid) < admits.index(first.rid), (
        "second (compiled first) must be admitted before first (compile held back): the queue releases "
        "what is ready, not in arrival order only"
    )


@pytest.mark.task3_3
def test_invalid_regex_in_background_aborts_with_message():
    eng = make_engine()
    outs = eng.generate([Q, Q], [{"regex": "[z-a]"}, {"regex": DATE, "temperature": 0}])
    reason = outs[0]["meta_info"]["finish_reason"]
    assert reason["type"] == "abort" and "[z-a]" in reason["message"], (
        f"the request with the invalid regex '[z-a]' must be aborted with a message naming it; finished {reason}"
    )
    assert re.fullmatch(DATE, outs[1]["text"]), (
        f"the DATE request beside it must still be served; wrote {outs[1]['text']!r} "
        f"(finished {outs[1]['meta_info']['finish_reason']})"
    )


@pytest.mark.task3_3
def test_compile_timeout_aborts_and_nobody_waits_forever():
    eng = make_engine(compile_timeout=0.05)
    gate = gate_compiles(eng)
    # ignore_eos: the request beside it must run its 4 tokens whatever the model would answer
    outs = eng.generate([Q, Q], [{"regex": DATE}, {"temperature": 0, "max_new_tokens": 4, "ignore_eos": True}])
    gate.set()
    reason = outs[0]["meta_info"]["finish_reason"]
    assert reason["type"] == "abort" and "took longer than 0.05 s" in reason["message"], (
        f"a compile held back past compile_timeout=0.05 must abort its request with 'took longer than 0.05 s'; "
        f"finished {reason}"
    )
    other = outs[1]["meta_info"]["finish_reason"]
    assert other["type"] == "length", (
        f"the unconstrained request beside it must run to max_new_tokens; finished {other}"
    )


def blocking_engine():
    """An engine in the first release's blocking mode whose grammar queue is not task 3_3's:
    every grammar is compiled (or failed) at arrival, so every queued request may go on, and
    a mistake in 3_3 fails 3_3's tests, not these tests of 3_2."""
    eng = make_engine(grammar_queue="blocking")
    eng.stage.queue.poll_grammar_queue = lambda queue: list(queue)
    return eng


@pytest.mark.task3_2
def test_blocking_get_fsm_waits_on_arrival():
    eng = blocking_engine()
    req = eng.submit(Q, {"regex": DATE, "temperature": 0})
    assert req.grammar is not None, "blocking mode: submit must return with the request's grammar compiled"
    while not req.released:
        eng.step()
    assert re.fullmatch(DATE, req.output_text), f"regex {DATE!r} in blocking mode: got {req.output_text!r}"


@pytest.mark.task3_2
def test_blocking_mode_reports_compile_errors():
    eng = blocking_engine()
    out = eng.generate(Q, {"regex": "(a|"})
    reason = out["meta_info"]["finish_reason"]
    assert reason["type"] == "abort" and "(a|" in reason.get("message", ""), (
        f"regex '(a|' does not compile: the request must end with an abort naming it; got {reason}"
    )


def test_state_limit_aborts_with_message():
    eng = make_engine(max_fsm_states=20)
    out = eng.generate(Q, {"regex": r"[a-z]{50}"})
    assert out["meta_info"]["finish_reason"]["type"] == "abort"
    assert "20" in out["meta_info"]["finish_reason"]["message"]


def test_disk_cache_survives_a_restart_and_ignores_corrupt_files(tmp_path):
    first = make_engine(grammar_cache_dir=str(tmp_path))
    a = first.generate(Q, {"regex": DATE, "temperature": 0})
    assert first.stage.service.compile_count == 1
    first.shutdown()
    files = list(tmp_path.glob("fsm-*.npz"))
    assert len(files) == 1 and not list(tmp_path.glob("*.tmp"))

    second = make_engine(grammar_cache_dir=str(tmp_path))
    b = second.generate(Q, {"regex": DATE, "temperature": 0})
    assert second.stage.service.compile_count == 0 and second.stage.service.disk.hits == 1
    assert a["text"] == b["text"]

    files[0].write_bytes(files[0].read_bytes()[:200])  # a partial write
    third = make_engine(grammar_cache_dir=str(tmp_path))
    c = third.generate(Q, {"regex": DATE, "temperature": 0})
    assert third.stage.service.compile_count == 1 and c["text"] == a["text"]


def test_a_fifo_under_a_cache_files_name_is_no_cached_fsm(tmp_path):
    """A FIFO planted under a cache file's name in a shared grammar_cache_dir (cache_attack's
    leftover) blocked the compile's np.load forever; it is not a regular file, so not a hit."""
    import os
    import threading

    from minisglang.constrained.fsm_disk import FSMDiskCache

    disk = FSMDiskCache(tmp_path, "f" * 64)
    os.mkfifo(disk.path(DATE))
    got: list = []
    reader = threading.Thread(target=lambda: got.append(disk.load(DATE)), daemon=True)
    reader.start()
    reader.join(timeout=10)
    assert not reader.is_alive() and got == [None] and disk.hits == 0


def test_disk_cache_keeps_apart_checkpoints_whose_eos_differs(tmp_path):
    """Two checkpoints of one tokenizer (one byte table, one fingerprint) whose EOS tokens
    differ, as a base model's and its instruct model's do, sharing a cache directory: the
    second was served the first's FSM, whose final rows allow the first's EOS and not its own
    (a stranger's pair of vocabularies). Each finds its own FSM now."""
    base = Tokenizer.from_pretrained(sgl.DEFAULT_MODEL_PATH)
    other = Tokenizer.from_pretrained(sgl.DEFAULT_MODEL_PATH)
    other.eos_token_id = next(i for i in sorted(other.special_token_ids) if i != base.eos_token_id)
    assert other.fingerprint == base.fingerprint
    for tok in (base, other):
        service = compile_service.CompileService(
            tok, compile_service.CompileSettings(tok.vocab_size), compile_in="thread", disk_dir=tmp_path
        )
        try:
            fsm = service.compile_fsm("ab")
        finally:
            service.shutdown()
        state = fsm.walk(tok.encode("ab"))
        assert fsm.index.eos_token_id == tok.eos_token_id
        assert fsm.index.allowed_token_ids(state) == [tok.eos_token_id]


@pytest.mark.parametrize(
    ("bound", "message"),
    [({"max_states": 50}, "more than 50 states"), ({"max_regex_chars": 5}, "longer than the limit of 5")],
)
def test_disk_cache_does_not_serve_a_regex_past_this_engines_bounds(tmp_path, bound, message):
    """An engine with generous bounds compiles `(a|b)*a(a|b){6}` (128 DFA states, 15
    characters) into a shared cache directory; an engine whose max_fsm_states or
    max_regex_chars refuses it when compiling was served the file instead (a stranger's two
    engines): whether a regex is refused depended on who had compiled it before. Both refuse
    it now, as a fresh engine does."""
    tok = Tokenizer.from_pretrained(sgl.DEFAULT_MODEL_PATH)
    regex = "(a|b)*a(a|b){6}"

    def service(**settings):
        return compile_service.CompileService(
            tok, compile_service.CompileSettings(tok.vocab_size, **settings), compile_in="thread", disk_dir=tmp_path
        )

    generous = service()
    generous.compile_fsm(regex)
    assert len(list(tmp_path.glob("fsm-*.npz"))) == 1
    strict = service(**bound)
    with pytest.raises(ConstraintError, match=message):
        strict.compile_fsm(regex)
    assert strict.disk is not None and strict.disk.hits == 0


def test_a_disk_cache_that_cannot_write_keeps_the_compile(tmp_path, monkeypatch):
    """A full disk (ENOSPC, here from np.savez) or a grammar_cache_dir that is a file: the
    FSM compiled, but the failed save raised out of the compile, so every request whose
    regex was not cached yet was aborted. The compile is served now, a warning says why
    nothing is saved (once), and no temporary file is left."""
    import errno

    tok = Tokenizer.from_pretrained(sgl.DEFAULT_MODEL_PATH)

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(fsm_disk.np, "savez", full)
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    for where in (tmp_path / "cache", not_a_dir):
        service = compile_service.CompileService(
            tok, compile_service.CompileSettings(tok.vocab_size), compile_in="thread", disk_dir=where
        )
        with pytest.warns(RuntimeWarning, match="cannot write"):
            fsm = service.compile_fsm("ab+")
        assert fsm.index.allowed_token_ids(fsm.walk(tok.encode("abb")))
        service.compile_fsm("cd")  # said once
        assert service.disk_errors == 2 and service.compile_count == 2
    assert list((tmp_path / "cache").iterdir()) == []


def test_disk_cache_does_not_serve_a_file_of_another_compiler(tmp_path, monkeypatch):
    """A cache directory kept across an upgrade: an older minisglang read `[[:alpha:]]` as
    Python does (the characters `[:alph` and a `]`) and saved that FSM; the newer one refuses
    the regex by name, yet was served the older file (DISK_FORMAT names the arrays' layout,
    not what the compiler makes of a regex). The compiler's sources are a fact of the file
    now: the newer one refuses it, as a fresh process does."""
    tok = Tokenizer.from_pretrained(sgl.DEFAULT_MODEL_PATH)

    def service():
        return compile_service.CompileService(
            tok, compile_service.CompileSettings(tok.vocab_size), compile_in="thread", disk_dir=tmp_path
        )

    with monkeypatch.context() as older:
        older.setattr(fsm_disk, "compiler_fingerprint", lambda: "an older minisglang", raising=False)
        old = service()
        assert old.disk is not None
        old.disk.save("[[:alpha:]]", old.compile_arrays(r"[[:alph]\]"))  # its reading
    new = service()
    with pytest.raises(ConstraintError, match="POSIX character classes"):
        new.compile_fsm("[[:alpha:]]")
    assert new.disk is not None and new.disk.hits == 0
    assert fsm_disk.compiler_fingerprint() == fsm_disk.compiler_fingerprint()  # (once per process)


def test_a_compile_worker_killed_from_outside_is_not_the_regexs_failure():
    """The OOM killer (SIGKILL) took the compile worker: the request was aborted with 'the
    compile worker died ... (exit code None: EOFError)', and that message was cached as the
    regex's compile, so every later request with the regex was refused where a fresh engine
    served it. The failure is not cached now (as a timeout), and names the exit code (-9)."""
    import signal

    eng = make_engine(compile_workers=1)
    try:
        service = eng.stage.service
        service.warm_up()
        os.kill(service.worker_pids()[0], signal.SIGKILL)
        first = eng.generate(Q, {"regex": DATE, "temperature": 0})
        reason = first["meta_info"]["finish_reason"]
        assert reason["type"] == "abort" and "exit code -9" in reason["message"]
        again = eng.generate(Q, {"regex": DATE, "temperature": 0})
        assert re.fullmatch(DATE, again["text"]), again["meta_info"]["finish_reason"]
    finally:
        eng.shutdown()


# ------------------------------------------------- where the compile runs: thread or process
def bare_stage(compile_in, **opts):
    """An s3 stage over the bundled tokenizer, without a model."""
    tok = Tokenizer.from_pretrained(sgl.DEFAULT_MODEL_PATH)
    return FSMCacheStage(StageContext(tok, tok.vocab_size, torch.device("cpu"), {"compile_in": compile_in, **opts}))


def test_process_compile_gives_the_same_fsm_as_the_thread_compile():
    thread, process = bare_stage("thread"), bare_stage("process")
    try:
        a, b = thread.cache.get_fsm(DATE, timeout=60), process.cache.get_fsm(DATE, timeout=60)
        assert process.service.compile_count == 1 and os.getpid() not in process.service.worker_pids()
        # oracle: s1's compile and s2's packing loop, run here
        tok = thread.ctx.tokenizer
        direct = compile_token_fsm(DATE, tok, 10_000, vocab_size=tok.vocab_size)
        for fsm in (a, b):
            assert fsm.index.state_to_tokens == direct.index.state_to_tokens
            assert (fsm.index.initial_state, fsm.index.final_states, fsm.index.eos_token_id) == (
                direct.index.initial_state,
                direct.index.final_states,
                direct.index.eos_token_id,
            )
            assert torch.equal(fsm.bitmasks, direct.bitmasks)
            assert all(
                torch.equal(torch.as_tensor(fsm.state_row[s]), torch.as_tensor(direct.state_row[s]))
                for s in direct.index.state_to_tokens
            )
    finally:
        thread.shutdown()
        process.shutdown()


@pytest.mark.parametrize(
    "regex, opts",
    [("[z-a]", {}), (r"[a-z]{50}", {"max_fsm_states": 20}), ("[0-9]{3}", {})],
    ids=["invalid", "state-limit", "valid"],
)
def test_errors_from_the_worker_keep_their_message(regex, opts):
    messages = {}
    for compile_in in ("thread", "process"):
        st = bare_stage(compile_in, **opts)
        try:
            st.cache.get_fsm(regex, timeout=60)
            messages[compile_in] = None
        except ConstraintError as e:
            messages[compile_in] = str(e)
        finally:
            st.shutdown()
    assert messages["thread"] == messages["process"]
    assert (messages["process"] is None) == (regex == "[0-9]{3}")


def test_shutdown_stops_the_worker_processes():
    st = bare_stage("process")
    st.cache.get_fsm(DATE, timeout=60)
    pid = st.service.worker_pids()[0]
    st.shutdown()
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        state = "gone"
    assert state in ("gone", "Z", "X"), f"worker {pid} still running after shutdown (state {state})"


# ------------------------------------------- the packed rows come ready (worker, thread, disk)
REGEXES = [DATE, r'"([^"\\]){0,20}"', r"(yes|no|maybe)", r"[a-z]+@[a-z]+\.(com|org)"]


@pytest.mark.parametrize("extra", [7, 45], ids=["width+7", "width+45"])
def test_pack_rows_equals_s2_packing_bit_for_bit(extra):
    """numpy's packing (where the compile runs) against `bitmask.with_rows`/`pack_bits`,
    for logits widths that are not a multiple of 32, including bit 31 (the sign bit)."""
    tok = Tokenizer.from_pretrained(sgl.DEFAULT_MODEL_PATH)
    width = tok.vocab_size + extra
    assert width % 32
    for regex in REGEXES:
        index = compile_regex_index(regex, tok, 10_000)
        packed = fsm_arrays.pack_rows(fsm_arrays.index_to_arrays(index), width)
        assert torch.equal(torch.from_numpy(packed), with_rows(TokenFSM(regex, index), width).bitmasks)
    # a table that sets the edge bits of words: 0, 31 (sign), 32, 63 and the last id
    table = {0: {0: 1, 31: 2, 32: 0}, 1: {63: 2, width - 1: 0}, 2: {}}
    index = TokenIndex(table, 0, frozenset({2}), 5)
    packed = fsm_arrays.pack_rows(fsm_arrays.index_to_arrays(index), width)
    assert torch.equal(torch.from_numpy(packed), with_rows(TokenFSM("x", index), width).bitmasks)
    assert packed[0, 0] < 0  # bit 31 set: a negative int32, as s2's pack_bits makes it
    with pytest.raises(ValueError, match="outside the logits' width"):
        fsm_arrays.pack_rows(fsm_arrays.index_to_arrays(index), width - 1)


def assert_same_fsm(fsm, oracle):
    assert fsm.index.state_to_tokens == oracle.index.state_to_tokens
    assert (fsm.index.initial_state, fsm.index.final_states, fsm.index.eos_token_id) == (
        oracle.index.initial_state,
        oracle.index.final_states,
        oracle.index.eos_token_id,
    )
    assert fsm.bitmasks.dtype == torch.int32 and torch.equal(fsm.bitmasks, oracle.bitmasks)
    assert len(fsm.state_row) == len(oracle.state_row) and set(fsm.state_row) == set(oracle.state_row)
    for s in oracle.index.state_to_tokens:
        assert torch.equal(fsm.state_row[s], oracle.state_row[s])


@pytest.mark.parametrize("compile_in, extra", [("process", 7), ("thread", 45)])
def test_rows_packed_where_the_compile_runs_equal_s2_packing_here(compile_in, extra, monkeypatch):
    """The worker (or the cache thread) packs; the scheduler's process packs nothing and
    gets the bits s2 would have made here."""
    tok = Tokenizer.from_pretrained(sgl.DEFAULT_MODEL_PATH)
    width = tok.vocab_size + extra
    oracles = {r: compile_token_fsm(r, tok, 10_000, vocab_size=width) for r in REGEXES}
    st = FSMCacheStage(StageContext(tok, width, torch.device("cpu"), {"compile_in": compile_in}))
    if compile_in == "process":  # this process must not pack: only the worker (another process) may
        monkeypatch.setattr(fsm_arrays, "pack_rows", lambda *a: pytest.fail("packed on the scheduler's process"))
        monkeypatch.setattr(bitmask, "pack_bits", lambda *a: pytest.fail("packed on the scheduler's process"))
    try:
        for regex in REGEXES:
            fsm = st.cache.get_fsm(regex, timeout=60)
            assert_same_fsm(fsm, oracles[regex])
    finally:
        st.shutdown()


def test_a_warm_disk_fsm_equals_the_cold_one_and_packs_nothing(tmp_path, monkeypatch):
    cold_stage = bare_stage("process", grammar_cache_dir=str(tmp_path))
    try:
        cold = {r: cold_stage.cache.get_fsm(r, timeout=60) for r in REGEXES}
    finally:
        cold_stage.shutdown()
    assert cold_stage.service.compile_count == len(REGEXES)
    for f in tmp_path.glob("fsm-*.npz"):  # the file holds the packed rows
        with np.load(f) as data:
            assert "bitmasks" in data.files and json.loads(str(data["meta"]))["format"] == fsm_disk.DISK_FORMAT
    monkeypatch.setattr(fsm_arrays, "pack_rows", lambda *a: pytest.fail("a warm-disk load packed the rows again"))
    warm_stage = bare_stage("thread", grammar_cache_dir=str(tmp_path))  # any compile would pack here
    try:
        for regex in REGEXES:
            assert_same_fsm(warm_stage.cache.get_fsm(regex, timeout=60), cold[regex])
        assert warm_stage.service.compile_count == 0 and warm_stage.service.disk.hits == len(REGEXES)
    finally:
        warm_stage.shutdown()


def test_disk_rows_of_another_width_are_ignored_and_rebuilt(tmp_path):
    tok = Tokenizer.from_pretrained(sgl.DEFAULT_MODEL_PATH)
    stages = [
        FSMCacheStage(
            StageContext(
                tok,
                tok.vocab_size + extra,
                torch.device("cpu"),
                {"compile_in": "thread", "grammar_cache_dir": str(tmp_path)},
            )
        )
        for extra in (0, 32)
    ]
    try:
        narrow = stages[0].cache.get_fsm(DATE, timeout=60)
        wide = stages[1].cache.get_fsm(DATE, timeout=60)
        assert stages[1].service.compile_count == 1 and stages[1].service.disk.hits == 0
        assert wide.bitmasks.shape == (narrow.bitmasks.shape[0], narrow.bitmasks.shape[1] + 1)
    finally:
        for st in stages:
            st.shutdown()


def test_state_rows_are_made_on_first_use_and_answer_like_a_dict():
    bitmasks = torch.arange(12, dtype=torch.int32).view(3, 4)
    rows = fsm_arrays.StateRows(bitmasks, {5: 0, 7: 1, 9: 2})
    assert dict.__len__(rows) == 0  # nothing built yet
    assert len(rows) == 3 and list(rows) == [5, 7, 9] and 7 in rows and 8 not in rows
    assert rows[7].data_ptr() == bitmasks[1].data_ptr()  # a view, not a copy
    assert rows[7] is rows[7] and dict.__len__(rows) == 1  # built once
    assert rows.get(8) is None and torch.equal(rows.get(9), bitmasks[2])
    with pytest.raises(KeyError):
        rows[8]


def test_compile_nice_sets_the_workers_niceness():
    st = bare_stage("process", compile_nice=3)
    try:
        st.cache.get_fsm(DATE, timeout=60)  # a worker that answered has set its niceness long before
        niceness = []
        for pid in st.service.worker_pids():
            with open(f"/proc/{pid}/stat") as f:
                niceness.append(int(f.read().rsplit(")", 1)[1].split()[16]))
        assert os.nice(0) + 3 in niceness and set(niceness) <= {os.nice(0), os.nice(0) + 3}
    finally:
        st.shutdown()


def test_worker_replies_through_a_mapped_file_that_leaves_nothing_behind(tmp_path):
    arrays = {
        "a": np.arange(7, dtype=np.int32),
        "b": np.arange(12, dtype=np.int32).reshape(3, 4) - 6,
        "c": np.zeros(0, dtype=np.int32),
    }
    back = compile_service.arrays_from_file(*compile_service.arrays_to_file(arrays, str(tmp_path)))
    assert not list(tmp_path.iterdir())  # the name is gone, the mapping lives on
    assert all(np.array_equal(back[k], v) and back[k].dtype == v.dtype for k, v in arrays.items())
    assert torch.equal(torch.from_numpy(back["b"]), torch.from_numpy(arrays["b"]))  # writable: no warning
    st = bare_stage("process")
    reply_dir = st.service.reply_dir
    try:
        st.cache.get_fsm(DATE, timeout=60)
        assert reply_dir is None or not os.listdir(reply_dir)
    finally:
        st.shutdown()
    assert reply_dir is None or not os.path.exists(reply_dir)


@pytest.mark.slow
def test_a_script_without_a_main_guard_still_gets_its_regex(tmp_path):
    """The compile workers start without re-running an unguarded main script
    (constrained/worker_start.py): the script runs once, its request gets its regex from the
    workers, and nothing warns about a missing guard."""
    script = tmp_path / "unguarded.py"
    script.write_text(
        "import minisglang as sgl\n"
        "print('TOP LEVEL')\n"
        "e = sgl.Engine(stage='s3')\n"
        "out = e.generate('<|user|>\\nWhen was she born?\\n<|assistant|>\\n',\n"
        "                 {'regex': r'[0-9]{4}-[0-9]{2}-[0-9]{2}', 'max_new_tokens': 16})\n"
        "print('RESULT', out['text'], out['meta_info']['finish_reason']['type'])\n"
        "e.shutdown()\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    result = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert result, done.stdout[-2000:]
    _, text, reason = result[0].split(" ")
    assert re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", text) and reason == "stop"
    assert done.stdout.count("TOP LEVEL") == 1, f"the script's top level ran more than once:\n{done.stdout}"
    assert "__main__" not in done.stderr, done.stderr[-2000:]
