"""Compiles bounded in time, memory, size and number (issue 13 item 4), options checked by
name, and features a stage cannot honour refused (issue 14 item 5)."""

from __future__ import annotations

import math
import re
import threading
import time

import pytest
import torch

import minisglang as sgl
from minisglang.backends.fsm_backend import FSMBackend
from minisglang.constrained.compile_service import CompileService, CompileSettings, CompileTimeout
from minisglang.constrained.token_fsm import ConstraintError
from minisglang.core import AbortKind
from minisglang.stages import available_stages, get_stage_class
from minisglang.stages.base import StageContext
from minisglang.stages.s3_fsm_cache import FSMCache
from minisglang.tokenizer import Tokenizer

Q = "<|user|>\nGive me a number.\n<|assistant|>\n"
# Each needs a DFA of millions of states (or a huge one): never finishes in a test's time.
RUNAWAY = [r"(a|b)*a(a|b){20}", r"[\s\S]{5000}"]


@pytest.fixture(scope="module")
def tok():
    return Tokenizer.from_pretrained(sgl.DEFAULT_MODEL_PATH)


def service(tok, timeout=1.0, workers=1, **settings):
    opts = {"max_states": 10**8, **settings}
    return CompileService(tok, CompileSettings(tok.vocab_size, **opts), workers=workers, timeout=timeout)


def gone(pid: int) -> bool:
    """The process no longer exists (killed and reaped), or is a zombie about to go."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


@pytest.mark.parametrize("regex", RUNAWAY)
def test_a_compile_that_times_out_is_killed_and_its_worker_replaced(tok, regex):
    svc = service(tok)
    try:
        assert svc.compile_fsm(r"[0-9]").index.num_states >= 1  # the worker is up
        (pid,) = svc.worker_pids()
        with pytest.raises(
            CompileTimeout,
            match=r"took longer than 1.0 s \(option compile_timeout\); it was stopped"
            r"\. The eager automaton builds every DFA state \(up to max_fsm_states, 100,000,000\)"
            r".*lazy automaton",
        ):
            svc.compile_arrays(regex)
        assert gone(pid), f"worker {pid} still runs after its compile timed out"
        (new_pid,) = svc.worker_pids()
        assert new_pid != pid
        fsm = svc.compile_fsm(r"[0-9]{5}")  # a new compile still works
        assert fsm.is_complete(fsm.walk(tok.encode("12345", add_special_tokens=False)))
    finally:
        svc.shutdown()


def test_a_compile_asked_after_shutdown_is_refused_not_run_on_a_thread(tok):
    """A compile that reaches a shut-down process service (queued before the shutdown) ends
    with an error naming it; it used to fall back to compiling on a thread of its own, which
    for a runaway regex kept the process alive for minutes after every test had passed."""
    svc = service(tok)
    assert svc.compile_fsm("[ab]c").walk(tok.encode("ac", add_special_tokens=False)) >= 0
    svc.shutdown()
    threads = threading.active_count()
    with pytest.raises(ConstraintError, match="shut down before regex"):
        svc.compile_fsm("(a|aa)*b")
    assert threading.active_count() == threads


def test_a_regex_longer_than_the_limit_fails_before_building(tok):
    svc = service(tok, max_regex_chars=50)
    try:
        with pytest.raises(
            ConstraintError,
            match=r"regex of 60 characters is longer than the limit of 50 "
            r"\(option max_regex_chars\)",
        ):
            svc.compile_arrays("a" * 60)
        assert svc.compile_count == 0  # refused before the disk and the compile (not counted)
        assert len(svc.compile_fsm("a" * 50).index.state_to_tokens) > 0 and svc.compile_count == 1
    finally:
        svc.shutdown()


def test_a_worker_over_its_memory_limit_reports_it_and_the_next_compile_works(tok):
    # 601 states x 2**19 words x 4 bytes = 1.26 GB of packed rows: over a 1 GiB address space.
    svc = CompileService(tok, CompileSettings(2**24, memory_bytes=1 << 30), workers=1, timeout=120)
    try:
        with pytest.raises(
            ConstraintError,
            match=r"needs more memory than a compile worker may use "
            r"\(1.0 GiB, option compile_memory_bytes\)",
        ):
            svc.compile_arrays("[a-z]{600}")
        assert svc.compile_fsm(r"[0-9]").bitmasks.shape == (2, 2**19)
    finally:
        svc.shutdown()


def test_thread_compiles_share_the_bounds_that_need_no_process(tok):
    svc = CompileService(tok, CompileSettings(tok.vocab_size, max_states=20, max_regex_chars=30), compile_in="thread")
    try:
        with pytest.raises(ConstraintError, match="longer than the limit of 30"):
            svc.compile_arrays("b" * 31)
        with pytest.raises(ConstraintError, match="more than 20 states"):
            svc.compile_arrays("[a-z]{40}")
        assert svc.worker_pids() == []
    finally:
        svc.shutdown()


# ------------------------------------------------------------------ the engine around it
@pytest.mark.parametrize(
    "stage, opts", [("s3", {"max_fsm_states": 10**8}), ("s5", {"max_fsm_states": 10**8, "automaton": "eager"})]
)
def test_a_ready_grammar_is_served_while_a_runaway_one_compiles(stage, opts):
    eng = sgl.Engine(stage=stage, compile_timeout=60, **opts)
    try:
        runaway = eng.submit(Q, {"regex": RUNAWAY[0], "max_new_tokens": 8})
        quick = eng.submit(Q, {"regex": r"[0-9]{5}", "temperature": 0})
        while not quick.released:
            eng.step()
        assert quick.finished_reason["type"] == "stop" and re.fullmatch(r"[0-9]{5}", quick.output_text)
        assert not runaway.finished and runaway in eng.scheduler.grammar_queue
    finally:
        eng.shutdown()
    assert runaway.finished_reason["type"] == "abort"


def test_a_timed_out_compile_aborts_its_request_and_is_not_cached():
    eng = sgl.Engine(stage="s5", compile_timeout=1, max_fsm_states=10**8, automaton="eager")
    try:
        pids = eng.stage.backend.service.worker_pids()
        out = eng.generate(Q, {"regex": RUNAWAY[1], "max_new_tokens": 8})
        assert out["meta_info"]["finish_reason"]["type"] == "abort"
        assert "took longer than 1" in out["meta_info"]["finish_reason"]["message"]
        # the queue gave up on the request and cancelled its compile (no one else waits for
        # it): it is not cached, and its worker is killed at the service's own timeout
        assert not eng.stage.backend.is_cached("regex", RUNAWAY[1])
        waited = time.monotonic() + 60
        while not any(gone(pid) for pid in pids) and time.monotonic() < waited:
            time.sleep(0.05)
        assert any(gone(pid) for pid in pids)
        ok = eng.generate(Q, {"regex": r"[0-9]{3}", "temperature": 0})
        assert re.fullmatch(r"[0-9]{3}", ok["text"])
    finally:
        eng.shutdown()


@pytest.mark.parametrize("stage, opts", [("s3", {}), ("s5", {"automaton": "eager"})])
def test_compiles_in_flight_are_bounded(stage, opts):
    eng = sgl.Engine(stage=stage, compile_timeout=60, max_pending_compiles=1, max_fsm_states=10**8, **opts)
    try:
        first = eng.submit(Q, {"regex": RUNAWAY[0], "max_new_tokens": 8})
        twin = eng.submit(Q, {"regex": RUNAWAY[0], "max_new_tokens": 8})  # the same compile: waits on it
        other = eng.submit(Q, {"regex": r"[0-9]{4}", "max_new_tokens": 8})  # a second compile: refused
        assert other.finished_reason == {
            "type": "abort",
            "kind": AbortKind.BUSY,
            "message": "too many grammars are compiling at once (1, option max_pending_compiles); retry later",
        }
        assert not first.finished and not twin.finished
    finally:
        eng.shutdown()


def test_the_fsm_cache_is_bounded_by_bytes():
    cache = FSMCache(
        lambda regex: regex, lambda regex, compiled: compiled, "fp", max_entries=100, max_bytes=10, sizeof=len
    )
    try:
        for regex in ["aaaa", "bbbb", "cccc"]:
            cache.get_fsm(regex, timeout=5)
        # 12 bytes > 10: the least recently used leaves, whatever the count allows
        assert "aaaa" not in cache and "bbbb" in cache and "cccc" in cache
        cache.get_fsm("bbbb", timeout=5)  # a hit makes it recent
        cache.get_fsm("dddddd", timeout=5)  # 14 bytes: the least recent (cccc) leaves
        assert "cccc" not in cache and "bbbb" in cache and "dddddd" in cache
    finally:
        cache.shutdown()


def compiled(backend, regex):
    value, ready = backend.get_cached_or_future_value("regex", regex)
    return value if ready else value.result(60)


def test_the_backend_cache_is_bounded_by_bytes(tok):
    regexes = [r"[0-9]{3}", r"[a-z]{2,5}", r"(yes|no)"]
    measure = FSMBackend(tok, tok.vocab_size, compile_in="thread", automaton="eager")
    size = {r: compiled(measure, r).nbytes() + len(r) for r in regexes}  # (an entry holds its key's text too)
    measure.shutdown()
    assert all(size.values())
    # room for the two newest grammars, not for all three: the least recently used leaves
    backend = FSMBackend(
        tok, tok.vocab_size, max_bytes=size[regexes[1]] + size[regexes[2]], compile_in="thread", automaton="eager"
    )
    try:
        for regex in regexes:
            compiled(backend, regex)
        assert [backend.is_cached("regex", r) for r in regexes] == [False, True, True]
    finally:
        backend.shutdown()


# ------------------------------------------------------------------ options and features
@pytest.mark.parametrize(
    "stage, typo, valid",
    [
        ("s5", "grammar_backnd", "grammar_backend"),
        ("s3", "compile_timout", "compile_timeout"),
        ("s1", "mask_apply", "max_fsm_states"),
    ],
)
def test_an_unknown_option_is_refused_by_name_with_the_valid_ones(tok, stage, typo, valid):
    with pytest.raises(
        ValueError,
        match=rf"unknown option\(s\) '{typo}' for stage s\d-[a-z-]+; "
        rf"its options are: .*\b{valid}\b",
    ):
        get_stage_class(stage)(StageContext(tok, tok.vocab_size, torch.device("cpu"), {typo: 1}))


def test_the_engine_refuses_a_misspelt_backend_option():
    with pytest.raises(ValueError, match="'grammar_backnd'.*grammar_backend"):
        sgl.Engine(stage="s5", grammar_backnd="xgrammar")


@pytest.mark.parametrize("name, value", [("grammar_queue", "later"), ("compile_in", "gpu"), ("mask_apply", "cuda")])
def test_a_bad_option_value_names_the_choices(tok, name, value):
    with pytest.raises(ValueError, match=rf"{name} must be '.*' or '.*', not '{value}'"):
        get_stage_class("s4")(StageContext(tok, tok.vocab_size, torch.device("cpu"), {name: value}))


@pytest.mark.parametrize(
    "stage, name, value, message",
    [
        ("s4", "jump_forward", "false", "jump_forward must be True or False, not 'false'"),  # truthy: jumps on
        ("s5", "jump_forward", 0, "jump_forward must be True or False, not 0"),
        ("s5", "max_entries", "many", "max_entries must be an integer, not 'many'"),
        ("s1", "max_fsm_states", 1e4, "max_fsm_states must be an integer, not 10000.0"),
        ("s5", "max_regex_chars", "1000", "max_regex_chars must be an integer or None, not '1000'"),
        ("s3", "compile_timeout", "soon", "compile_timeout must be a finite number, not 'soon'"),
        ("s3", "compile_timeout", math.nan, "compile_timeout must be a finite number, not nan"),
        ("s5", "json_schema_options", ["any_order"], "json_schema_options must be a dict or None, not ['any_order']"),
        ("s5", "compile_workers", 0, "compile_workers must be above 0, not 0"),  # no compile would ever run
        ("s5", "compile_timeout", -5, "compile_timeout must be above 0, not -5"),
        ("s5", "compile_usage_half_life", -1, "compile_usage_half_life must be 0 (plain turns) or above, not -1"),
        ("s3", "max_pending_compiles", -1, "max_pending_compiles must be above 0, not -1"),
        ("s5", "grammar_cache_bytes", 0, "grammar_cache_bytes must be above 0, not 0"),
    ],
)
def test_an_option_not_of_its_declared_type_or_not_above_zero_is_refused_by_name(tok, stage, name, value, message):
    """These were accepted: `jump_forward="false"` turned jumps on, `compile_workers=0` left
    every compile waiting for its timeout, `max_entries="many"` failed at the first compile."""
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        get_stage_class(stage)(StageContext(tok, tok.vocab_size, torch.device("cpu"), {name: value}))


def test_declared_types_accept_what_they_declare(tok):
    """An int where a float is declared, None where `| None` is, a negative niceness."""
    options = {
        "compile_timeout": 3,
        "max_regex_chars": None,
        "compile_nice": 0,
        "compile_usage_half_life": 0,
        "json_schema_options": {},
    }
    stage = get_stage_class("s5")(StageContext(tok, tok.vocab_size, torch.device("cpu"), options))
    try:
        assert stage.options.compile_timeout == 3 and stage.options.max_regex_chars is None
    finally:
        stage.shutdown()


STAGES_WITHOUT_GATE = [
    s
    for s in available_stages()
    if "regex" in get_stage_class(s).supports and "think_end" not in get_stage_class(s).supports
]


@pytest.mark.parametrize("stage", STAGES_WITHOUT_GATE)
def test_a_stage_without_the_reasoning_gate_refuses_think_end(stage):
    eng = sgl.Engine(stage=stage)
    try:
        out = eng.generate(Q, {"regex": r"[0-9]{3}", "think_end": "</think>", "max_new_tokens": 8})
        reason = out["meta_info"]["finish_reason"]
        assert reason["type"] == "abort" and "think_end" in reason["message"], reason
        free = eng.generate(Q, {"max_new_tokens": 3, "temperature": 0})
        assert free["meta_info"]["finish_reason"]["type"] == "length"
    finally:
        eng.shutdown()


def test_only_s5_declares_the_reasoning_gate():
    assert [s.split("-")[0] for s in STAGES_WITHOUT_GATE] == ["s1", "s2", "s3", "s4"]
    assert "think_end" in get_stage_class("s5").supports


@pytest.mark.parametrize(
    "params, message",
    [
        (
            {"think_end": "x" * 3_600_000},
            "think_end is 3,600,000 characters long; it names one token, and the limit MAX_THINK_END_CHARS is 256",
        ),
        ({"stop": ["y" * 5000, "a"]}, "stop[0] is 5,000 characters long; the limit MAX_STOP_CHARS is 4,096"),
        ({"stop": ["s"] * 65}, "stop has 65 strings; the limit MAX_STOP_STRINGS is 64"),
    ],
)
def test_oversize_client_strings_are_refused_before_they_are_read(params, message, monkeypatch):
    """Refused by SamplingParams (so by Engine.generate as by the server), before the text
    is even checked for lone surrogates, let alone tokenized."""
    from minisglang import core
    from minisglang.core import SamplingParams

    def never(name, value):
        raise AssertionError(f"{name} was read")

    monkeypatch.setattr(core, "check_text", never)
    with pytest.raises(ValueError, match=re.escape(message)):
        SamplingParams.from_dict(params)
