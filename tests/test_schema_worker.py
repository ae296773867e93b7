"""constrained/schema_worker.py: a large schema's regex written in a child process.

Oracle: the schema compiler run in this process (the same text, the same refusal), and for
the backend, `jsonschema` on what the grammar accepts."""

from __future__ import annotations

import json
import multiprocessing
import os
import threading
from pathlib import Path

import jsonschema
import pytest

from minisglang.backends.fsm_backend import IN_PROCESS_SCHEMA_CHARS, FSMBackend
from minisglang.constrained import child_process, schema_worker
from minisglang.constrained.compile_service import CompileTimeout
from minisglang.constrained.json_schema import InvalidSchemaError, build_regex_from_schema
from minisglang.constrained.work_slices import Baton, CompileCancelled, FairCompilePool
from minisglang.tokenizer import Tokenizer

SCHEMAS = [
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"enum": ["x", "y"]}}, "required": ["a"]},
    {"type": "string", "pattern": "^(x|y)*x(x|y){14}$", "minLength": 16, "maxLength": 60},
    {"type": "array", "items": {"type": "boolean"}, "maxItems": 3},
]


@pytest.mark.parametrize("schema", SCHEMAS)
def test_the_child_writes_the_regex_this_process_writes(schema):
    text = json.dumps(schema)
    options = {"automaton": "lazy", "max_regex_chars": 100_000, "whitespace": None}
    assert schema_worker.schema_regex_in_process(text, options, timeout=60) == build_regex_from_schema(text, **options)


@pytest.mark.parametrize("text", ['{"type": "strin"}', '{"type": "object"', '{"minLength": -1}'])
def test_a_refusal_comes_back_as_the_compiler_s_own(text):
    with pytest.raises(Exception) as here:
        build_regex_from_schema(text)
    with pytest.raises(type(here.value)) as there:
        schema_worker.schema_regex_in_process(text, {}, timeout=60)
    assert str(there.value) == str(here.value)


def compile_children() -> set[int | None]:
    return {p.pid for p in multiprocessing.active_children() if p.name == child_process.CHILD_NAME}


def test_a_compile_past_its_timeout_is_stopped_and_its_child_gone():
    before = compile_children()  # (other tests' backends keep children of their own)
    slow = {"type": "object", "properties": {f"p{k}": {"enum": ["a" * 40, "b" * 40]} for k in range(3000)}}
    with pytest.raises(CompileTimeout, match="compile_timeout"):
        schema_worker.schema_regex_in_process(json.dumps(slow), {}, timeout=0.0)
    assert compile_children() <= before


def test_a_cancelled_compile_kills_its_child():
    """The compile thread waits at `checkpoint`s; cancelled, it stops there and kills the child."""
    before = compile_children()
    pool = FairCompilePool(1, Baton())
    started = threading.Event()
    real_poll = child_process.POLL_SECONDS

    def compile_and_say():
        started.set()
        return schema_worker.schema_regex_in_process(json.dumps(SCHEMAS[0]), {}, timeout=60)

    try:
        child_process.POLL_SECONDS = 0.001
        future, job = pool.submit("A", compile_and_say)
        started.wait(10)
        pool.cancel(job)
        try:
            future.result(30)  # (a child may answer before the cancel is seen: then there is nothing to stop)
        except CompileCancelled:
            pass
    finally:
        child_process.POLL_SECONDS = real_poll
        pool.shutdown()
    assert compile_children() <= before


def test_the_fsm_backend_sends_a_large_schema_to_a_child_and_gets_the_same_grammar(bundled_model_path, monkeypatch):
    tok = Tokenizer.from_pretrained(bundled_model_path)
    # large as text (its descriptions), small as a grammar
    schema = {
        "type": "object",
        "properties": {
            f"p{k}": {"enum": [f"w{k}_{j}" for j in range(3)], "description": "d" * 4000} for k in range(80)
        },
        "required": ["p0"],
        "additionalProperties": False,
    }
    text = json.dumps(schema)
    assert len(text) > IN_PROCESS_SCHEMA_CHARS
    calls = []
    real = schema_worker.schema_regex_in_process
    monkeypatch.setattr(
        "minisglang.backends.fsm_backend.schema_regex_in_process", lambda *a, **k: calls.append(1) or real(*a, **k)
    )
    in_child, here = FSMBackend(tok, tok.vocab_size), FSMBackend(tok, tok.vocab_size, compile_in="thread")
    try:
        assert in_child.schema_regex(text) == here.schema_regex(text) and calls == [1]
        grammar = in_child._compile_safely("json_schema", text)
        assert grammar.fsm.regex == here.compile("json_schema", text).fsm.regex  # (the child's text, kept)
        instance = '{"p0":"w0_1","p7":"w7_2"}'
        for t in tok.encode(instance):
            grammar.prepare()
            grammar.accept_token(t)
        jsonschema.validate(json.loads(instance), schema)
        grammar.prepare()
        assert grammar.fsm.index.is_final(grammar.state)
    finally:
        in_child.shutdown()
        here.shutdown()


def test_a_compile_past_its_cpu_budget_moves_to_a_child_and_gets_the_same_grammar(bundled_model_path, monkeypatch):
    """A small text whose compile outgrows schema_cpu_seconds in this process (a counting
    clock: 8 s pass by its second reading) is compiled again in a child; one within the
    budget (10^9 s) stays here. Oracle: the backend that compiles everything on its own thread."""
    from minisglang.constrained.json_schema import budget

    tok = Tokenizer.from_pretrained(bundled_model_path)
    schema = {"type": "object", "properties": {f"p{k}": {"type": "integer"} for k in range(20)}, "required": ["p0"]}
    text = json.dumps(schema)
    readings = iter(range(0, 10**6, 8))
    monkeypatch.setattr(budget, "CLOCK", lambda: float(next(readings)))
    calls = []
    real = schema_worker.schema_regex_in_process
    monkeypatch.setattr(
        "minisglang.backends.fsm_backend.schema_regex_in_process", lambda *a, **k: calls.append(1) or real(*a, **k)
    )
    moved = FSMBackend(tok, tok.vocab_size, schema_cpu_seconds=5)
    kept = FSMBackend(tok, tok.vocab_size, schema_cpu_seconds=10**9)
    here = FSMBackend(tok, tok.vocab_size, compile_in="thread")
    try:
        assert moved.compile("json_schema", text).fsm.regex == here.compile("json_schema", text).fsm.regex
        assert calls == [1]
        moved.compile_schema(schema, text)  # (a schema parsed for its cache key goes to the child as JSON)
        assert calls == [1, 1]
        assert kept.compile("json_schema", text).fsm.regex == here.compile("json_schema", text).fsm.regex
        assert calls == [1, 1]
    finally:
        for backend in (moved, kept, here):
            backend.shutdown()


def descendants() -> set[int]:
    """The pids of this process's descendants (children, and theirs), read from /proc."""
    parent_of = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # (after the command's name)
        except (OSError, IndexError):
            continue  # a process that ended while we read
        parent_of[int(stat.parent.name)] = int(fields[1])
    found, frontier = set(), {os.getpid()}
    while frontier:
        frontier = {pid for pid, ppid in parent_of.items() if ppid in frontier} - found
        found |= frontier
    return found


def is_forkserver(pid: int) -> bool:
    """The forkserver itself: its children (compile children) carry its command line too,
    but their parent is the forkserver, not this process."""
    try:
        parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        return parent == os.getpid() and b"multiprocessing.forkserver" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, IndexError):
        return False


@pytest.mark.skipif(
    not Path("/proc/self/stat").exists() or "forkserver" not in multiprocessing.get_all_start_methods(),
    reason="reads processes from Linux's /proc; the forkserver is Unix only",
)
def test_the_forkserver_starts_ahead_once_and_compiles_leave_no_process_behind():
    """`start_ahead` (a backend's start-up) starts the one forkserver; the compiles after it,
    answered, refused or stopped at their timeout, leave no process that was not there before."""
    child_process.start_ahead()
    child_process.start_ahead()  # a second backend's start: nothing more
    before = descendants()
    assert len([pid for pid in before if is_forkserver(pid)]) == 1
    slow = {"type": "object", "properties": {f"p{k}": {"enum": ["a" * 40, "b" * 40]} for k in range(3000)}}
    for _ in range(2):
        assert schema_worker.schema_regex_in_process(json.dumps(SCHEMAS[0]), {}, timeout=60)
        with pytest.raises(InvalidSchemaError):
            schema_worker.schema_regex_in_process('{"type": "strin"}', {}, timeout=60)
        with pytest.raises(CompileTimeout):
            schema_worker.schema_regex_in_process(json.dumps(slow), {}, timeout=0.0)
    assert not descendants() - before  # (not `==`: another test's leftovers may end meanwhile)


def test_a_lazy_backend_starts_the_forkserver_unless_it_compiles_on_threads(bundled_model_path, monkeypatch):
    tok = Tokenizer.from_pretrained(bundled_model_path)
    calls = []
    monkeypatch.setattr("minisglang.backends.fsm_backend.start_ahead", lambda: calls.append(1))
    for options in ({}, {"compile_in": "thread"}):
        FSMBackend(tok, tok.vocab_size, **options).shutdown()
    assert calls == [1]
