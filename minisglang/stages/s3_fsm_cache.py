"""Stage s3-fsm-cache: compile once, compile in the background, and never stall the batch.

Read with chapters/03-fsm-cache.md. Compiling a regex into a token index takes from
milliseconds to seconds. s1 and s2 did it inline, on the scheduler's thread, so every
running request stalled meanwhile. This stage rebuilds, in order, what SGLang did about it:

1. `FSMCache` (the first release): a dict `{key: CacheEntry(event, value)}`. The first
   request for a key starts ONE background compile; every later request for the same key
   gets the same entry and waits on the same event. The key is (regex, tokenizer
   fingerprint), so a cache never serves an index built for another vocabulary.
2. The blocking `get_fsm` of the first release: the scheduler calls it on arrival and
   `event.wait()`s. The thread only de-duplicates work; the scheduler still stalls.
3. The non-blocking grammar queue (SGLang v0.4): a request whose grammar is not ready
   waits in `scheduler.grammar_queue`; every step polls it and releases ready requests in
   arrival order while the others keep decoding.
4. An on-disk cache (#63) so a restart does not recompile: one file per key, written
   atomically, with its key and a checksum inside; a corrupt or partial file is ignored
   and rebuilt, never trusted.
5. Bounds: a compile that fails, takes longer than `compile_timeout`, or makes more than
   `max_fsm_states` states ends its request with `abort` and a message; the cache keeps at
   most `max_cache_entries` compiled FSMs (least recently used leave first).

6. Where the compile runs (`compile_in`): in a worker process by default. The compiler is
   Python and numpy, so on a thread it holds the GIL most of the time and the scheduler
   thread decodes only in between; a process has its own interpreter. The worker sends
   back flat numpy arrays (the disk format): the token index and s2's packed mask rows,
   so the scheduler's process only wraps them (no packing, no loop over states or
   tokens). `compile_in="thread"` keeps the first release's thread, to compare.

Engine options: `grammar_queue="nonblocking"` (default) or `"blocking"`,
`grammar_cache_dir=None` (a directory turns the disk cache on), `compile_timeout=30.0`,
`max_cache_entries=64`, `max_fsm_states=10_000`, `compile_in="process"` (or `"thread"`),
`compile_workers=2` (compiles at once), `compile_nice=5` (the workers' niceness).
"""
from __future__ import annotations

import collections
import collections.abc
import hashlib
import itertools
import json
import multiprocessing
import os
import shutil
import tempfile
import threading
import time
import warnings
import weakref
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
import numpy as np
import torch

from ..constrained.token_index import TokenIndex, vocab_trie
from ..core import Req
from .base import register
from .s1_masked_fill import ConstraintError, FSMState, RegexFSM, compile_regex_index
from .s2_batched_mask import BatchedMaskStage

DISK_FORMAT = 3   # 2: int32 arrays; 3: plus the packed mask rows and their width


@dataclass
class CacheEntry:
    """One key's compile: `event` is set when `value` (or `error`) is final."""

    event: threading.Event = field(default_factory=threading.Event)
    value: RegexFSM | None = None
    error: str | None = None


class FSMCache:
    """Compiled FSMs by (regex, tokenizer fingerprint), compiled once in background threads."""

    def __init__(self, compile_index, make_fsm, fingerprint: str, max_entries: int = 64,
                 disk_dir: str | Path | None = None, threads: int = 2, disk_meta: dict | None = None):
        self.compile_index = compile_index    # regex -> TokenIndex (raises ConstraintError)
        self.make_fsm = make_fsm              # (regex, TokenIndex) -> RegexFSM ready to mask
        self.fingerprint = fingerprint
        self.max_entries = max_entries
        self.disk_dir = Path(disk_dir) if disk_dir else None
        self.disk_meta = disk_meta or {}      # more facts a file must match (the stage: the rows' width)
        self.entries: collections.OrderedDict[str, CacheEntry] = collections.OrderedDict()
        self.lock = threading.Lock()
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="fsm-compile")
        self.compile_count = 0                # compiles actually run (not disk or memory hits)
        self.disk_hits = 0

    def key(self, regex: str) -> str:
        return hashlib.sha256(json.dumps([regex, self.fingerprint]).encode()).hexdigest()

    def init_fsm_in_background(self, regex: str) -> CacheEntry:
        """The entry for `regex`, starting its compile if nobody has yet."""
        # BEGIN SOLUTION task3_1
        key = self.key(regex)
        with self.lock:   # check-and-insert must be one step, or two threads compile twice
            entry = self.entries.get(key)
            if entry is not None:
                self.entries.move_to_end(key)
                return entry
            entry = CacheEntry()
            self.entries[key] = entry
            self._evict_lru()
        self.pool.submit(self._compile, key, regex, entry)
        return entry
        # END SOLUTION

    def get_fsm(self, regex: str, timeout: float | None = None) -> RegexFSM:
        """The first release's blocking lookup: wait for the compile, then return it."""
        # BEGIN SOLUTION task3_2
        entry = self.init_fsm_in_background(regex)
        if not entry.event.wait(timeout):
            raise ConstraintError(f"compiling regex {regex!r} took longer than {timeout} s")
        if entry.error is not None:
            raise ConstraintError(entry.error)
        return entry.value
        # END SOLUTION

    def _compile(self, key: str, regex: str, entry: CacheEntry) -> None:
        try:
            index = self._load_from_disk(key, regex)
            if index is None:
                with self.lock:
                    self.compile_count += 1
                index = self.compile_index(regex)
                self._save_to_disk(key, regex, index)
            entry.value = self.make_fsm(regex, index)
        except ConstraintError as e:
            entry.error = str(e)
        except Exception as e:  # a bug in a compile must still release its waiters
            entry.error = f"compiling regex {regex!r} failed: {type(e).__name__}: {e}"
        finally:
            entry.event.set()

    def _evict_lru(self) -> None:
        """Drop least recently used finished entries beyond `max_entries` (lock held)."""
        for key in list(self.entries):
            if len(self.entries) <= self.max_entries:
                return
            if self.entries[key].event.is_set():
                del self.entries[key]

    # -- the disk cache ------------------------------------------------------------------
    def _path(self, key: str) -> Path:
        return self.disk_dir / f"fsm-{key}.npz"

    def _save_to_disk(self, key: str, regex: str, index: TokenIndex) -> None:
        if self.disk_dir is None:
            return
        self.disk_dir.mkdir(parents=True, exist_ok=True)
        arrays = index_to_arrays(index)
        meta = {"format": DISK_FORMAT, "regex": regex, "fingerprint": self.fingerprint,
                "checksum": _checksum(arrays), **self.disk_meta}
        # Write to a temporary file in the same directory, then rename: readers see either
        # no file or the whole file, never half of one.
        fd, tmp = tempfile.mkstemp(dir=self.disk_dir, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, meta=np.array(json.dumps(meta)), **arrays)
            os.replace(tmp, self._path(key))
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def _load_from_disk(self, key: str, regex: str) -> TokenIndex | None:
        """The cached index, or None when absent, corrupt, or for another regex/tokenizer."""
        if self.disk_dir is None or not self._path(key).exists():
            return None
        try:
            with np.load(self._path(key), allow_pickle=False) as data:
                meta = json.loads(str(data["meta"]))
                arrays = {k: data[k] for k in data.files if k != "meta"}
            if (meta.get("format") != DISK_FORMAT or meta.get("regex") != regex
                    or meta.get("fingerprint") != self.fingerprint or meta.get("checksum") != _checksum(arrays)
                    or any(meta.get(k) != v for k, v in self.disk_meta.items())):
                return None
            index = index_from_arrays(arrays)
        except Exception:  # corrupt or truncated: rebuild rather than trust it
            return None
        with self.lock:
            self.disk_hits += 1
        return index

    def shutdown(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


def index_to_arrays(index: TokenIndex) -> dict[str, np.ndarray]:
    """A TokenIndex as flat int32 arrays (CSR by state), for `np.savez` and for a worker's reply."""
    table = index.state_to_tokens
    if isinstance(table, StateTable):
        return table.arrays   # it came as arrays (from a worker or the disk): nothing to flatten
    states = sorted(table)
    counts = [len(table[s]) for s in states]
    total = sum(counts)
    tokens = np.fromiter(itertools.chain.from_iterable(table[s].keys() for s in states), np.int32, total)
    nexts = np.fromiter(itertools.chain.from_iterable(table[s].values() for s in states), np.int32, total)
    rows = np.repeat(np.arange(len(states)), counts)
    order = np.lexsort((tokens, rows))   # each state's tokens in increasing order
    return {"states": np.array(states, dtype=np.int32),
            "offsets": np.concatenate([[0], np.cumsum(counts)]).astype(np.int32),
            "tokens": tokens[order], "nexts": nexts[order],
            "header": np.array([index.initial_state, index.eos_token_id], dtype=np.int32),
            "finals": np.array(sorted(index.final_states), dtype=np.int32)}


def pack_rows(arrays: dict[str, np.ndarray], vocab_size: int) -> np.ndarray:
    """s2's packed mask rows, from the flat arrays: int32 [S, ceil(vocab_size / 32)], row i
    for state `arrays["states"][i]` (sorted, as s2's `add_bitmasks` orders them).

    The same bits as s2's `pack_bits` (token t is bit t % 32 of word t // 32; tested equal),
    done in numpy where the compile runs: `np.packbits` with `bitorder="little"` puts 8
    tokens in a byte, first token lowest, and four bytes read little-endian are one word.
    Rows go in chunks so the bool scratch stays under 64 MB whatever the state count.
    """
    states, offsets, tokens = arrays["states"], arrays["offsets"], arrays["tokens"]
    if len(tokens) and int(tokens.max()) >= vocab_size:
        raise ValueError(f"token id {int(tokens.max())} is outside the logits' width {vocab_size}")
    words = (vocab_size + 31) // 32
    packed = np.empty((len(states), words), dtype=np.int32)
    chunk = max(1, (64 << 20) // (words * 32))
    for lo in range(0, len(states), chunk):
        hi = min(lo + chunk, len(states))
        bits = np.zeros((hi - lo, words * 32), dtype=bool)
        first, last = offsets[lo], offsets[hi]
        bits[np.repeat(np.arange(hi - lo), np.diff(offsets[lo:hi + 1])), tokens[first:last]] = True
        packed[lo:hi] = np.packbits(bits, axis=-1, bitorder="little").view("<i4")
    return packed


def compile_to_arrays(regex: str, tokenizer, max_states: int, vocab_size: int) -> dict[str, np.ndarray]:
    """regex -> everything an FSM needs, as flat int32 arrays: s1's token index (CSR by
    state) and s2's packed rows ("bitmasks"). Runs where the compile runs (a worker process,
    or the cache's thread), so the scheduler's process only wraps the result."""
    arrays = index_to_arrays(compile_regex_index(regex, tokenizer, max_states))
    arrays["bitmasks"] = pack_rows(arrays, vocab_size)
    return arrays


class StateTable(collections.abc.Mapping):
    """{state: {token_id: next_state}} read from flat arrays; a state's dict is built the
    first time someone asks for it.

    Building every state's dict up front is a Python loop over every (state, token) pair
    (about 0.9 M for the benchmark's regex): on the scheduler's process that would take the
    GIL for a tenth of a second. A request visits a few dozen states.
    """

    def __init__(self, arrays: dict[str, np.ndarray]):
        self.arrays = arrays
        self.row = {s: i for i, s in enumerate(arrays["states"].tolist())}
        self.built: dict[int, dict[int, int]] = {}

    def __getitem__(self, state: int) -> dict[int, int]:
        tokens = self.built.get(state)
        if tokens is None:
            i = self.row[state]   # KeyError for an unknown state, as a dict would raise
            lo, hi = self.arrays["offsets"][i:i + 2].tolist()
            tokens = dict(zip(self.arrays["tokens"][lo:hi].tolist(), self.arrays["nexts"][lo:hi].tolist()))
            self.built[state] = tokens
        return tokens

    def __iter__(self):
        return iter(self.row)

    def __len__(self) -> int:
        return len(self.row)


class StateRows(dict):
    """s2's `fsm.state_row` ({state: a view of its packed row}), each view made the first
    time a state is asked for.

    s2 builds all S views at once; at about 3 us a view that is 6 ms of the GIL for 1,900
    states (30 ms for 10,000), taken from the scheduler right when a compile lands. A hit
    is a plain dict lookup (the fill's hot path); only a miss runs `__missing__`. Length,
    membership and iteration answer for every state, built or not.
    """

    def __init__(self, bitmasks: torch.Tensor, row: dict[int, int]):
        super().__init__()
        self.bitmasks, self.row = bitmasks, row

    def __missing__(self, state: int) -> torch.Tensor:
        view = self.bitmasks[self.row[state]]   # KeyError for an unknown state
        dict.__setitem__(self, state, view)
        return view

    def get(self, state, default=None):
        return self[state] if state in self.row else default

    def __contains__(self, state) -> bool:
        return state in self.row

    def __len__(self) -> int:
        return len(self.row)

    def __iter__(self):
        return iter(self.row)

    def keys(self):
        return self.row.keys()

    def items(self):
        return ((s, self[s]) for s in self.row)

    def values(self):
        return (self[s] for s in self.row)


def index_from_arrays(a: dict[str, np.ndarray]) -> TokenIndex:
    initial, eos = a["header"].tolist()
    rows = a.get("bitmasks")
    if rows is not None and (rows.dtype != np.int32 or rows.ndim != 2 or rows.shape[0] != len(a["states"])):
        raise ValueError(f"packed rows {rows.dtype} {rows.shape} do not fit {len(a['states'])} states")
    return TokenIndex(state_to_tokens=StateTable(a), initial_state=initial,
                      final_states=frozenset(a["finals"].tolist()), eos_token_id=eos)


def _checksum(arrays: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for name in sorted(arrays):
        h.update(name.encode())
        h.update(np.ascontiguousarray(arrays[name]).tobytes())
    return h.hexdigest()


# -- compiling in worker processes ---------------------------------------------------------
@dataclass
class VocabularyBytes:
    """What a compile needs from a tokenizer, small enough to send to a worker process."""

    token_bytes: list
    eos_token_id: int


_worker: dict = {}   # inside a worker process: what it compiles for (vocabulary, limits, width)


def arrays_to_file(arrays: dict[str, np.ndarray], directory: str) -> tuple[str, list]:
    """(In a worker) write the arrays back to back into a new file in `directory`; return
    its path and layout (name, dtype, shape, offset of each array): the whole reply.

    Through the pool's pipe, the benchmark regex's 8.4 MB of arrays cost the scheduler's
    process 6-9 ms of GIL (reading the pipe 64 KB at a time, then copying while unpickling),
    the worst gap of the window. A file in memory (tmpfs) that the scheduler maps costs it
    about 1 ms."""
    fd, path = tempfile.mkstemp(dir=directory, suffix=".arrays")
    layout, offset = [], 0
    with os.fdopen(fd, "wb") as f:
        for name, a in arrays.items():
            a = np.ascontiguousarray(a)
            f.write(memoryview(a).cast("B"))
            layout.append((name, a.dtype.str, a.shape, offset))
            offset += a.nbytes
    return path, layout


def arrays_from_file(path: str, layout: list) -> dict[str, np.ndarray]:
    """The worker's arrays, mapped from its file (no copy), and the file's name removed (the
    mapping lives on). Copy-on-write: the arrays are writable, as `torch.from_numpy`
    wants, and nothing is ever written back."""
    mapped = np.memmap(path, dtype=np.uint8, mode="c")
    os.unlink(path)
    return {name: np.ndarray(shape, np.dtype(dtype), buffer=mapped, offset=offset)
            for name, dtype, shape, offset in layout}


def _init_worker(vocab: VocabularyBytes, max_states: int, vocab_size: int, nice: int,
                 reply_dir: str | None) -> None:
    # Background work yields the CPU when cores are short (Unix only). Only a little: the
    # scheduler's process stays at 0, and a worker at nice 5 gets about a quarter of a core
    # it has to share with it (nice 10: about a tenth). With nice 10 and a busy 2-CPU
    # machine a 2 s compile took 18.8 s, most of the way to `compile_timeout`; on a machine
    # with a free core the niceness changes nothing. Option `compile_nice`.
    if nice and hasattr(os, "nice"):
        os.nice(nice)
    _worker.update(vocab=vocab, max_states=max_states, vocab_size=vocab_size, reply_dir=reply_dir)
    vocab_trie(vocab.token_bytes)   # the one-time trie of this vocabulary, built before any request


def _compile_to_arrays(regex: str) -> dict[str, np.ndarray] | tuple[str, list]:
    """(In a worker process) regex -> token index and packed rows as flat arrays: in a
    file of the reply directory when there is one (see `arrays_to_file`), else the arrays
    themselves (they pickle as a few buffers).

    A ConstraintError raised here reaches the caller with its message (exceptions pickle)."""
    arrays = compile_to_arrays(regex, _worker["vocab"], _worker["max_states"], _worker["vocab_size"])
    return arrays_to_file(arrays, _worker["reply_dir"]) if _worker["reply_dir"] else arrays


class CompileProcesses:
    """Worker processes that compile regexes for one vocabulary, started once per stage."""

    def __init__(self, tokenizer, max_states: int, processes: int, vocab_size: int, nice: int = 5):
        # forkserver: one clean server process (no threads, the compiler already imported)
        # forks each worker in milliseconds. Plain fork would copy torch's threads; spawn
        # (Windows has nothing else) would import torch again in every worker.
        method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
        context = multiprocessing.get_context(method)
        if method == "forkserver":
            context.set_forkserver_preload([__name__])
        vocab = VocabularyBytes(list(tokenizer.token_bytes), tokenizer.eos_token_id)
        self.vocab, self.max_states, self.vocab_size = vocab, max_states, vocab_size
        self.broken = False   # the workers died: compile on the calling thread from then on
        # Replies go through files in memory (/dev/shm, Linux) when there is such a place; a
        # directory of our own, so that shutdown removes what nobody picked up.
        self.reply_dir = tempfile.mkdtemp(prefix="minisglang-fsm-", dir="/dev/shm") \
            if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
        self.pool = ProcessPoolExecutor(processes, mp_context=context, initializer=_init_worker,
                                        initargs=(vocab, max_states, vocab_size, nice, self.reply_dir))
        # Removed at shutdown, or when this object is collected, or at exit, whichever is first.
        self.remove_reply_dir = weakref.finalize(self, shutil.rmtree, self.reply_dir, True) \
            if self.reply_dir else (lambda: None)
        # Start one worker now (it builds its trie), so the first request does not wait for it.
        self.first_worker_pid = self.pool.submit(os.getpid)

    def compile_index(self, regex: str) -> TokenIndex:
        """regex -> TokenIndex (with its packed rows), compiled in a worker; raises the
        worker's ConstraintError."""
        if not self.broken:
            try:
                reply = self.pool.submit(_compile_to_arrays, regex).result()
                return index_from_arrays(arrays_from_file(*reply) if isinstance(reply, tuple) else reply)
            except BrokenProcessPool:
                # The usual cause: a script that starts an Engine at its top level. Each worker
                # re-runs the main script while it starts (forkserver and spawn do), and dies.
                self.broken = True
                warnings.warn("minisglang: the regex compile workers died while starting, so regexes "
                              "compile on a thread from now on (slower for the running batch). A script "
                              "that creates an Engine at its top level must do so under "
                              "`if __name__ == \"__main__\":` (see 'Safe importing of main module' in "
                              "the multiprocessing docs), or pass compile_in=\"thread\".", RuntimeWarning)
        return index_from_arrays(compile_to_arrays(regex, self.vocab, self.max_states, self.vocab_size))

    def shutdown(self) -> None:
        """Stop the workers; a compile still running finishes first (its result is dropped)."""
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.remove_reply_dir()


@register("s3-fsm-cache")
class FSMCacheStage(BatchedMaskStage):
    def __init__(self, ctx):
        super().__init__(ctx)
        opts = ctx.options
        self.mode = opts.get("grammar_queue", "nonblocking")
        if self.mode not in ("blocking", "nonblocking"):
            raise ValueError(f"grammar_queue must be 'blocking' or 'nonblocking', got {self.mode!r}")
        self.compile_timeout = float(opts.get("compile_timeout", 30.0))
        compile_in = opts.get("compile_in", "process")
        if compile_in not in ("process", "thread"):
            raise ValueError(f"compile_in must be 'process' or 'thread', got {compile_in!r}")
        workers = int(opts.get("compile_workers", 2))
        self.processes = CompileProcesses(ctx.tokenizer, self.max_fsm_states, workers, ctx.vocab_size,
                                          nice=int(opts.get("compile_nice", 5))) \
            if compile_in == "process" else None
        # The cache's threads do the bookkeeping either way; in process mode they only wait
        # on the worker (waiting releases the GIL) and wrap its arrays into an FSM.
        self.cache = FSMCache(self.processes.compile_index if self.processes else self.compile_packed_index,
                              self.make_fsm, ctx.tokenizer.fingerprint,
                              max_entries=int(opts.get("max_cache_entries", 64)),
                              disk_dir=opts.get("grammar_cache_dir"), threads=workers,
                              disk_meta={"vocab_size": ctx.vocab_size})   # the packed rows' width
        self.pending: dict[int, tuple[CacheEntry, float]] = {}   # rid -> (entry, when it asked)

    def compile_packed_index(self, regex: str) -> TokenIndex:
        """`compile_in="thread"`: the worker's job (index and packed rows) on the cache's thread."""
        return index_from_arrays(compile_to_arrays(regex, self.ctx.tokenizer, self.max_fsm_states,
                                                   self.ctx.vocab_size))

    def make_fsm(self, regex: str, index: TokenIndex) -> RegexFSM:
        """A compiled (or disk-loaded) index, made ready to mask, cheaply: it arrives as flat
        arrays with s2's rows already packed, so this wraps them (`torch.from_numpy`, no
        copy) and makes a state's row view when a request first reaches it. An index that
        comes without rows (a plain TokenIndex) is flattened and packed here."""
        table = index.state_to_tokens
        if not (isinstance(table, StateTable) and "bitmasks" in table.arrays):
            arrays = index_to_arrays(index)
            index = index_from_arrays({**arrays, "bitmasks": pack_rows(arrays, self.ctx.vocab_size)})
        fsm = RegexFSM(regex, index)
        fsm.bitmasks = torch.from_numpy(index.state_to_tokens.arrays["bitmasks"])
        fsm.state_row = StateRows(fsm.bitmasks, index.state_to_tokens.row)
        return fsm

    # -- hook 1: arrival ---------------------------------------------------------------
    def on_arrival(self, req: Req) -> None:
        constraint = req.sampling_params.constraint()
        if constraint is None:
            return
        kind, regex = constraint
        if kind not in self.supports:
            super().on_arrival(req)   # s1's refusal message
            return
        if self.mode == "blocking":
            try:   # the first release: the scheduler thread waits right here
                fsm = self.cache.get_fsm(regex, timeout=self.compile_timeout)
            except ConstraintError as e:
                req.finish("abort", message=str(e))
                return
            req.grammar = FSMState(fsm, fsm.index.initial_state)
        else:
            self.pending[req.rid] = (self.cache.init_fsm_in_background(regex), time.monotonic())

    # -- hook 2: the grammar queue -------------------------------------------------------
    def poll_grammar_queue(self, queue: list[Req]) -> list[Req]:
        """The requests that may go on: unconstrained ones at once; grammar requests whose
        compile finished (or failed, or timed out), in arrival order."""
        # BEGIN SOLUTION task3_3
        ready, blocked = [], False
        for req in queue:
            if req.rid not in self.pending:   # unconstrained (or compiled at arrival): never waits
                ready.append(req)
                continue
            handle, since = self.pending[req.rid]
            if not self.compile_done(handle):
                if time.monotonic() - since <= self.compile_timeout:
                    blocked = True            # grammar requests leave in arrival order:
                    continue                  # nobody overtakes one still compiling
                req.finish("abort", message=f"compiling the {req.sampling_params.constraint()[0]} "
                           f"took longer than {self.compile_timeout} s")
            elif blocked:
                continue
            else:
                self.take_compiled(req, handle)
            del self.pending[req.rid]
            ready.append(req)
        return ready
        # END SOLUTION

    def compile_done(self, entry: CacheEntry) -> bool:
        return entry.event.is_set()

    def take_compiled(self, req: Req, entry: CacheEntry) -> None:
        """Give the request its FSM, or abort it with the compile's error."""
        if entry.error is not None:
            req.finish("abort", message=entry.error)
        else:
            req.grammar = FSMState(entry.value, entry.value.index.initial_state)

    def release(self, req: Req) -> None:
        self.pending.pop(req.rid, None)
        super().release(req)

    def shutdown(self) -> None:
        self.cache.shutdown()
        if self.processes is not None:
            self.processes.shutdown()
