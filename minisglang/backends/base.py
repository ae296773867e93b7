"""The grammar interface SGLang kept after v0.4 (#1752, #2018, #2020), in our words.

Read with chapters/05-backends.md. The scheduler of stage s5 speaks only to two objects:

- a `BaseGrammarObject` per request: one live matcher that accepts tokens, fills its row
  of the batch's packed bitmask, and may offer a jump-forward string;
- a `BaseGrammarBackend` per engine: compiles grammars on a thread pool, caches them by
  normalised (kind, text), shares in-flight compiles, bounds memory (LRU) and time
  (timeout), and turns failures into an `InvalidGrammarObject` whose message aborts the
  request.

Every backend fills the same mask format (int32, one bit per token, token t is bit t % 32
of word t // 32; xgrammar's and llguidance's format), so one `apply_vocab_mask` serves the
whole batch whatever the backend.
"""

from __future__ import annotations

import collections
import ctypes
import json
import os
import threading
import time
from collections.abc import Callable, Collection
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import torch

from ..constrained.bitmask import all_allowed_mask, apply_bitmask
from ..constrained.child_process import KeptChildren, start_ahead
from ..constrained.compile_service import ChildKilled, CompileTimeout
from ..constrained.json_schema import InvalidSchemaError, load_schema
from ..constrained.work_slices import Baton, CompileCancelled, CompileJob, FairCompilePool, current_future
from ..registry import Registry

if TYPE_CHECKING:  # pragma: no cover
    from ..constrained.structural_tag import StructuralTag
    from ..constrained.structural_tag_format import StructuralTagFormat
    from ..tokenizer import Tokenizer

BACKENDS = Registry("grammar backend")
# A grammar text longer than this is not normalised on the scheduler thread (`normalise`),
# per kind: parsing for the key costs ~50 us per KiB of a JSON schema and ~110-360 us per KiB
# of a structural tag (a 60 KiB v2 tag took 6-13 ms warm, 30-60 ms under load), so each
# limit keeps one request's key to a few milliseconds.
NORMALISE_MAX_CHARS = {"json_schema": 64 * 1024, "structural_tag": 16 * 1024}
# Seconds between two re-measurings of the grammar cache's bytes (`trim`).
TRIM_EVERY = 1.0
# Seconds between two returns of free C heap to the system when nothing was evicted: a big
# refused request (a 3.6 MB think_end tokenized, a 3.9 MB schema parsed) leaves freed heap
# that glibc keeps; malloc_trim took 10-17 ms on a 1 GB heap, so not at every trim.
GIVE_BACK_EVERY = 10.0
# How many recent grammar texts keep their normalised key and parsed form (`normalised`):
# a request asks `is_cached` and then `get_cached_or_future_value` for the same text.
NORMALISED_MEMO = 16
register_backend = BACKENDS.register  # `@register_backend("xgrammar")`
# The engine options `start_children` reads: a backend that compiles in kept children lists
# them in its `own_options`.
CHILD_OPTIONS = frozenset({"compile_in", "compile_nice", "compile_memory_bytes"})


class GrammarError(ValueError):
    """A grammar this backend cannot compile; the message ends the request with `abort`."""


class GrammarLimitError(GrammarError):
    """A library reached one of its own limits on this grammar while serving it (llguidance's
    parser items, its lexer's expressions): the grammar asks too much, the request's fault,
    not a disagreement of mask and matcher."""


# ------------------------------------------------------------------------ per request
GrammarObjectT = TypeVar("GrammarObjectT", bound="BaseGrammarObject")


class BaseGrammarObject:
    """One request's matcher. Subclasses implement the methods that raise here.

    It is also a `Grammar` (core.py), the protocol s4's `JumpForward` speaks:
    `jump_forward` is SGLang's `try_jump_forward` + `jump_forward_str_state` in one call.
    """

    version = 0  # times the request's output was rewritten (an instance attribute once bumped)

    def accept_token(self, token_id: int) -> None:
        """Advance by one sampled token; raise GrammarError if the grammar rejects it."""
        raise NotImplementedError

    def rollback(self, k: int) -> None:
        """Undo the last k accepted tokens."""
        raise NotImplementedError

    def is_terminated(self) -> bool:
        """True once the grammar has accepted EOS (or can accept nothing more)."""
        raise NotImplementedError

    def copy(self) -> BaseGrammarObject:
        """A fresh matcher over the same compiled grammar, at its start."""
        raise NotImplementedError

    def prepare(self, seconds: float | None = None) -> bool:
        """Do the work the next mask and `is_terminated` need, within `seconds` (None: no
        limit); True when done, False when the time ran out (call again: the work done is
        kept). The scheduler's thread is every client's, so stage s5 gives each request a
        bounded slice per step (constrained/work_slices.py). Compiled libraries' matchers
        have nothing to do here; our lazy automaton makes the state's token row."""
        return True

    def needs_work(self) -> bool:
        """Whether the next mask needs work `prepare` has not done yet (a check, no work):
        the scheduler starts none once a step's budget is spent."""
        return False

    def is_over(self) -> bool:
        """Whether the match is over, as `is_terminated` says, without doing `prepare`'s work
        (a check): asked of a request's last token, whose next row no one will sample from.
        Here: known only once the work is done (False before); the lazy automaton reads it
        from its structure."""
        return not self.needs_work() and self.is_terminated()

    def search_was_slow(self) -> None:
        """A jump search of this grammar took longer than one call may (max_grammar_call_seconds),
        on the scheduler thread where every request waits. A library's search is one native call
        no slice can cut: it then searches no more, in any copy of the grammar (jumps are only a
        speed-up). Here: nothing (our automaton's search is cut into slices)."""

    def nbytes(self) -> int:
        """Bytes of the compiled grammar behind this matcher, as far as we can tell (what the
        backend's byte-bounded cache counts); 0 when a library does not say."""
        return 0

    def is_spent(self) -> bool:
        """Whether the compiled grammar behind this matcher has used up so much of a bound on
        what it may build over its life (the lazy automaton's max_lazy_states) that a new
        request over it could fail where a fresh compile would serve it: the cache then
        compiles the grammar again for the next request (`get_cached_or_future_value`)."""
        return False

    # -- masks: one packed int32 row per request ----------------------------------------
    @staticmethod
    def allocate_vocab_mask(vocab_size: int, batch_size: int, device: str | torch.device = "cpu") -> torch.Tensor:
        """[batch_size, ceil(vocab_size / 32)] int32, every bit set (= everything allowed)."""
        return all_allowed_mask(batch_size, vocab_size, device)

    def fill_vocab_mask(self, vocab_mask: torch.Tensor, idx: int) -> None:
        """Write this matcher's allowed tokens into row `idx` of `vocab_mask` [B, W]."""
        raise NotImplementedError

    @classmethod
    def fill_vocab_mask_batched(
        cls: type[GrammarObjectT], entries: list[tuple[GrammarObjectT, int]], vocab_mask: torch.Tensor
    ) -> None:
        """Fill many rows, each of a matcher of this class (the stage groups them by class);
        backends with a batched kernel override this."""
        for grammar, idx in entries:
            grammar.fill_vocab_mask(vocab_mask, idx)

    @staticmethod
    def move_vocab_mask(vocab_mask: torch.Tensor, device: str | torch.device) -> torch.Tensor:
        return vocab_mask.to(device, non_blocking=True)

    @staticmethod
    def apply_vocab_mask(logits: torch.Tensor, vocab_mask: torch.Tensor) -> None:
        """logits [B, V] in place: -inf wherever the bit is 0 (one call for the batch)."""
        apply_bitmask(logits, vocab_mask)

    # -- jump forward (a backend may return None: it does not jump) ----------------------
    def try_jump_forward(self, tokenizer: Tokenizer) -> Any | None:
        """Something `jump_forward_str_state` understands, or None when nothing is forced."""
        return None

    def jump_forward_str_state(self, helper: Any) -> tuple[bytes, Any]:
        """(forced bytes, the state after them)."""
        raise NotImplementedError

    def jump_forward(self, tokenizer: Tokenizer) -> tuple[bytes, Any] | None:
        """(forced bytes, the state after them), or None when nothing is forced."""
        helper = self.try_jump_forward(tokenizer)
        return None if helper is None else self.jump_forward_str_state(helper)

    def allowed_after(self, output_ids: list[int]) -> Collection[int] | None:
        """The tokens allowed after the output `output_ids`, or None: a library matcher cannot
        list a state's tokens cheaply, and s4's seam rule then goes by the vocabulary alone."""
        return None

    def jump_and_retokenize(self, old_output_ids: list[int], new_output_ids: list[int], next_state: Any) -> None:
        """Bring the matcher in line with the re-encoded output: roll back to the longest
        common prefix of the old and new ids, then accept the new tokens (the jump
        included). Matchers that can jump to `next_state` directly may override this."""
        same = len(os.path.commonprefix([old_output_ids, new_output_ids]))  # works on lists too
        if len(old_output_ids) > same:
            self.rollback(len(old_output_ids) - same)
        for token_id in new_output_ids[same:]:
            self.accept_token(token_id)


@dataclass
class InvalidGrammarObject(BaseGrammarObject):
    """The cached result of a failed compile: the request is aborted with `message`."""

    message: str

    def copy(self) -> InvalidGrammarObject:
        return self

    def nbytes(self) -> int:
        return len(self.message)  # (the cache adds its key's text: `_entry_bytes`)


def _entry_bytes(key: tuple[str, str], grammar: BaseGrammarObject) -> int:
    """What a cache entry holds: its grammar and its key's text. A failed compile keeps its
    text too: 150 refused 1 MB schemas held 122 MiB that the cache counted as 0 bytes, under
    a 48 MiB bound (a stranger's soak test)."""
    return grammar.nbytes() + len(key[1])


# ------------------------------------------------------------------------ per engine
@dataclass
class CompileTimes:
    """A histogram of compile durations (seconds), cumulative as Prometheus counts them:
    `counts[i]` compiles took at most `bounds[i]` seconds; `total` is their sum."""

    bounds: tuple[float, ...] = (0.001, 0.01, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0)
    counts: list[int] = field(default_factory=lambda: [0] * 9)
    count: int = 0
    total: float = 0.0

    def record(self, seconds: float) -> None:
        self.count += 1
        self.total += seconds
        for i, bound in enumerate(self.bounds):
            if seconds <= bound:
                self.counts[i] += 1


class BaseGrammarBackend:
    """Compile-and-cache for one engine. Subclasses implement `compile(kind, text)`."""

    name = "base"
    kinds: frozenset[str] = frozenset()  # which of "regex", "json_schema", "ebnf"
    # The engine options of stages/s5_backends.py's BACKEND_SPECIFIC_OPTIONS this backend
    # reads (our automaton's bounds, the JSON whitespace, ...): the stage refuses one of the
    # others set away from its default, since this backend would ignore it.
    own_options: frozenset[str] = frozenset()

    def __init__(
        self,
        tokenizer: Tokenizer,
        vocab_size: int,
        *,
        max_entries: int = 128,
        max_bytes: int | None = None,
        compile_timeout: float = 30.0,
        threads: int = 2,
        compile_usage_half_life: float = 10.0,
        **options: Any,
    ):
        if len(tokenizer.token_bytes) > vocab_size:
            raise ValueError(
                f"the logits width {vocab_size} is smaller than the tokenizer's "
                f"vocabulary ({len(tokenizer.token_bytes)} ids)"
            )
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size  # width of the logits (may exceed the tokenizer's)
        self.options = options
        self.max_entries, self.max_bytes = max_entries, max_bytes
        self.compile_timeout = compile_timeout
        self.threads = threads
        # Compiles share the CPU with the scheduler only in the windows it lends (the GIL
        # would otherwise pass to them at every torch operation of a forward), and clients
        # take turns, the one that used the threads least lately first (constrained/work_slices.py).
        self.baton = Baton()
        self.pool = FairCompilePool(threads, self.baton, name=f"{self.name}-compile", half_life=compile_usage_half_life)
        self.cache: collections.OrderedDict[tuple[str, str], Future[BaseGrammarObject]] = collections.OrderedDict()
        self.jobs: dict[Future[BaseGrammarObject], CompileJob] = {}  # compiles not finished yet
        self._trimmed = float("-inf")  # when `trim` last measured the cache (time.monotonic)
        self._given_back = float("-inf")  # when `trim` last gave free heap back
        self.lock = threading.Lock()
        self.compile_count = 0
        self.lookups = self.hits = 0  # asked for a grammar / found it compiled or compiling
        self.compile_times = CompileTimes()
        # (kind, text) -> (its cache key, its parsed form): see `normalised`.
        self._normalised: collections.OrderedDict[tuple[str, str], tuple[tuple[str, str], Any]] = (
            collections.OrderedDict()
        )
        self._normalised_lock = threading.Lock()
        self.children: KeptChildren | None = None  # a library's compile children (`start_children`)

    def start_children(
        self, setup: tuple[Callable[..., Any], tuple[Any, ...]], ahead: int = 1, preload: tuple[str, ...] = ()
    ) -> None:
        """Kept child processes for a library's native compiles (constrained/child_process.py,
        `setup` run once in each, `preload` imported once by the forkserver if this starts
        it), unless the backend compiles on threads (option `compile_in="thread"`):
        `self.children`, stopped by `shutdown`."""
        if self.options.get("compile_in", "process") != "process":
            return
        start_ahead(*preload)
        self.children = KeptChildren(
            self.options.get("compile_memory_bytes", 4 << 30),
            int(self.options.get("compile_nice", 5)),
            ahead=ahead,
            setup=setup,
        )

    def compile(self, kind: str, text: str) -> BaseGrammarObject:
        """Compile one grammar into a matcher at its start (runs on a pool thread)."""
        raise NotImplementedError

    def compile_schema(self, schema: Any, text: str) -> BaseGrammarObject:
        """Compile a JSON schema already parsed (`text`: its canonical JSON text): the request's
        one parse, made when its cache key was. A backend that can take the parsed schema
        overrides this; by default `compile` reads the text again."""
        return self.compile("json_schema", text)

    # Whether compile_structural_tag reads a spec's content_schema (the lazy automaton's does).
    reads_content_schema = False

    def structure_at_fault(self, spec: StructuralTag, error: GrammarError) -> GrammarError:
        """A library's error for a whole structural tag, named by the structure whose schema
        alone fails the same way (each compiled as a json_schema request), so a server can
        name the tool; `error` itself when every schema compiles alone."""
        for i, structure in enumerate(spec.structures):
            try:
                self.compile("json_schema", json.dumps(structure.schema, ensure_ascii=False))
            except GrammarError as alone:
                return GrammarError(f"structural_tag.structures[{i}].schema: {alone}")
        return error

    def compile_structural_tag(self, spec: StructuralTag) -> BaseGrammarObject:
        """Compile a structural tag (stage s6, constrained/structural_tag.py) into a matcher."""
        raise GrammarError(f"the {self.name!r} grammar backend cannot compile structural tags")

    def compile_structural_tag_format(self, spec: StructuralTagFormat) -> BaseGrammarObject:
        """Compile a v2 structural tag (constrained/structural_tag_format.py) into a matcher."""
        raise GrammarError(
            f"the {self.name!r} grammar backend cannot compile a v2 structural tag "
            "({\"type\": \"structural_tag\", \"format\": ...}); the 'fsm', 'xgrammar' and 'llguidance' backends can"
        )

    @staticmethod
    def normalise(kind: str, text: str) -> tuple[str, str]:
        """Equal grammars share an entry: JSON schemas are parsed and dumped compactly.

        Keys are NOT sorted: the order of `properties` is the order of the generated keys,
        so two schemas that differ only in it are different grammars. A text past
        its kind's NORMALISE_MAX_CHARS is its own key: this runs on the scheduler's thread,
        and parsing a 3.9 MB schema here stalled every client (the compile thread parses it
        instead; equal grammars spelled differently then compile twice).
        """
        return BaseGrammarBackend.parse_for_key(kind, text)[0]

    @staticmethod
    def parse_for_key(kind: str, text: str) -> tuple[tuple[str, str], Any]:
        """`normalise`'s key and the parsed grammar it was made from: the schema (a dict or a
        boolean) of a json_schema, the StructuralTag of a structural_tag, else None (and None
        when the text was not parsed: too long for this thread, or not valid)."""
        if len(text) > NORMALISE_MAX_CHARS.get(kind, 0):
            return (kind, text), None
        if kind == "json_schema":
            try:
                schema = load_schema(text)
                return (kind, json.dumps(schema, separators=(",", ":"), ensure_ascii=False)), schema
            except (InvalidSchemaError, RecursionError):  # (dumps too follows the nesting)
                return (kind, text), None  # compile() reports it with its own message
        if kind == "structural_tag":
            from ..constrained.structural_tag import StructuralTagError
            from ..constrained.structural_tag_parse import parse_any_structural_tag

            try:
                spec = parse_any_structural_tag(text)  # the old shape or v2
                return (kind, spec.to_json()), spec
            except StructuralTagError:
                return (kind, text), None
        return (kind, text), None

    def normalised(self, kind: str, text: str) -> tuple[tuple[str, str], Any]:
        """`parse_for_key(kind, text)`, remembered for the last NORMALISED_MEMO texts: a
        request's grammar text is parsed once, though its arrival asks twice (`is_cached`,
        then `get_cached_or_future_value`) and its compile needs the parsed form."""
        with self._normalised_lock:
            done = self._normalised.get((kind, text))
            if done is not None:
                self._normalised.move_to_end((kind, text))
                return done
        done = self.parse_for_key(kind, text)
        with self._normalised_lock:
            self._normalised[(kind, text)] = done
            while len(self._normalised) > NORMALISED_MEMO:
                self._normalised.popitem(last=False)
        return done

    def is_cached(self, kind: str, text: str) -> bool:
        """True if this grammar is compiled or compiling (asking for it starts nothing new)."""
        key = self.normalised(kind, text)[0]
        with self.lock:
            return key in self.cache

    def get_cached_or_future_value(self, kind: str, text: str, client: str | None = None) -> tuple[Any, bool]:
        """(a fresh matcher, True) if compiled, else (the shared Future, False). `client`:
        who asks (the compile pool serves clients in turn)."""
        key, parsed = self.normalised(kind, text)
        with self.lock:
            future = self.cache.get(key)
            if future is not None and future.done() and not future.cancelled() and future.result().is_spent():
                # The requests before this one used up the grammar's bounds (they are bounds
                # on one automaton's life, shared by every request over it): a fresh compile,
                # as a server restarted now would give. Those requests keep the old one.
                del self.cache[key]
                future = None
            self.lookups += 1
            self.hits += future is not None
            if future is None:
                future, job = self.pool.submit(client, self._compile_safely, *key, parsed)
                self.jobs[future] = job
                future.add_done_callback(self._forget_job)
                self.cache[key] = future
                self._evict_lru()
            else:
                self.cache.move_to_end(key)
        if future.done():
            return future.result().copy(), True
        return future, False

    def _compile_safely(self, kind: str, text: str, parsed: Any = None) -> BaseGrammarObject:
        """Compile (kind, text), `parsed` its parsed form when the key was made from one
        (`parse_for_key`); every failure becomes an InvalidGrammarObject."""
        with self.lock:
            self.compile_count += 1
        if kind not in self.kinds:
            return InvalidGrammarObject(
                f"the {self.name!r} grammar backend does not support {kind!r} (it supports {sorted(self.kinds)})"
                + (
                    "; tool calls are constrained by a structural tag: the 'fsm', 'xgrammar' and 'llguidance' "
                    "backends compile them"
                    if kind == "structural_tag"
                    else ""
                )
            )
        start = time.perf_counter()
        try:
            if kind == "structural_tag":
                from ..constrained.structural_tag_format import StructuralTagFormat
                from ..constrained.structural_tag_parse import parse_any_structural_tag

                spec = parsed if parsed is not None else parse_any_structural_tag(text)
                if isinstance(spec, StructuralTagFormat):  # v2: {"type": "structural_tag", "format": ...}
                    grammar = self.compile_structural_tag_format(spec)
                elif spec.content_schema is not None and not self.reads_content_schema:
                    raise GrammarError(
                        f"the {self.name!r} grammar backend cannot compile structural_tag.content_schema (a "
                        "JSON message beside tool calls, with no trigger inside it: OpenAI's response_format "
                        "beside tools, under tool_choice 'auto'); the 'fsm' backend can"
                    )
                else:
                    grammar = self.compile_structural_tag(spec)
            elif kind == "json_schema" and parsed is not None:
                grammar = self.compile_schema(parsed, text)
            else:
                grammar = self.compile(kind, text)
        except (CompileTimeout, CompileCancelled, ChildKilled) as e:
            mine = current_future()
            # A timeout may be the machine's load, and a child the OOM killer took or that
            # could not start says nothing of the grammar: never cached (a child killed once
            # made the grammar's every later request fail with that message).
            with self.lock:
                # Only this compile's entry: a cancelled one was forgotten by `cancel`, and a
                # request that came after put its own compile under the key (which a stranger's
                # abort-and-retry saw dropped, so the next request compiled the grammar a third time).
                if mine is None or self.cache.get((kind, text)) is mine:
                    self.cache.pop((kind, text), None)
            return InvalidGrammarObject(f"{kind} rejected by the {self.name!r} backend: {e}")
        except Exception as e:  # every failure becomes a message for that one request
            return InvalidGrammarObject(f"{kind} rejected by the {self.name!r} backend: {e}")
        with self.lock:  # its size is known now: make room before anyone is told it is done
            self.compile_times.record(time.perf_counter() - start)
            self._evict_lru(new=((kind, text), grammar))
        return grammar

    def stats(self) -> dict[str, Any]:
        """The grammar cache for /metrics: entries, bytes, lookups, hits, compile times."""
        with self.lock:
            done = {key: f for key, f in self.cache.items() if f.done() and not f.cancelled()}
            return {
                "cache_entries": len(self.cache),
                "cache_bytes": sum(_entry_bytes(key, f.result()) for key, f in done.items()),
                "compiling": len(self.cache) - len(done),
                "lookups": self.lookups,
                "hits": self.hits,
                "compiles": self.compile_count,
                "compile_seconds": self.compile_times,
            }

    def result(self, future: Future[BaseGrammarObject]) -> BaseGrammarObject | None:
        """A fresh matcher if the compile finished, else None."""
        return future.result().copy() if future.done() else None

    def trim(self) -> None:
        """Apply `max_bytes` again, with sizes measured now: a lazy grammar grows while
        requests use it (a 4 KB compile can be 50 MB of states after a few hundred tokens of
        a hostile regex), so the size it had when compiled says little. Called when a
        request leaves; at most once per TRIM_EVERY seconds (measuring walks every grammar)."""
        now = time.monotonic()
        if self.max_bytes is None or now - self._trimmed < TRIM_EVERY:
            return
        self._trimmed = now
        with self.lock:
            before = len(self.cache)
            self._evict_lru()
            evicted = len(self.cache) < before
        if evicted or now - self._given_back >= GIVE_BACK_EVERY:
            self._given_back = now
            give_back_free_memory()

    def _evict_lru(self, new: tuple[tuple[str, str], BaseGrammarObject] | None = None) -> None:
        """Drop least recently used finished grammars beyond `max_entries`, and at most one
        beyond `max_bytes` (lock held); a compile in progress stays, requests wait on it.
        `new`: (key, grammar) of a grammar just compiled, counted though its future is not
        done yet. One for bytes: a big lazy grammar is freed in one run of deallocations that
        holds the GIL (about 0.5 ms per MB, measured), so several at once would stall the
        scheduler thread for their sum; `trim` evicts the next one a second later."""
        size = {key: _entry_bytes(key, f.result()) for key, f in self.cache.items() if f.done() and not f.cancelled()}
        if new is not None and new[0] in self.cache:
            size[new[0]] = _entry_bytes(*new)
        total = sum(size.values())
        evicted_for_bytes = False
        for key in list(self.cache):
            over_entries = len(self.cache) > self.max_entries
            over_bytes = self.max_bytes is not None and total > self.max_bytes and not evicted_for_bytes
            if not over_entries and not over_bytes:
                return
            if key in size and self.cache[key].done():
                del self.cache[key]
                total -= size[key]
                evicted_for_bytes |= not over_entries

    def _forget_job(self, future: Future[BaseGrammarObject]) -> None:
        with self.lock:
            self.jobs.pop(future, None)

    def queued_seconds(self, future: Future[BaseGrammarObject]) -> float:
        """How long the compile behind `future` waited for a thread (0 once it is done)."""
        job = self.jobs.get(future)
        return 0.0 if job is None else job.queued_seconds()

    def held_by_own_compiles(self, future: Future[BaseGrammarObject]) -> bool:
        """Whether the compile behind `future` waits for its own client's running compiles."""
        job = self.jobs.get(future)
        return job is not None and self.pool.held_by_own(job)

    def cancel(self, future: Future[BaseGrammarObject]) -> None:
        """Stop the compile behind `future` (its requests gave up on it) and forget it: it
        never becomes a cache entry, and what it built is freed."""
        with self.lock:
            job = self.jobs.get(future)
            for key in [k for k, f in self.cache.items() if f is future]:
                del self.cache[key]
        if job is not None:
            self.pool.cancel(job)

    def shutdown(self) -> None:
        self.pool.shutdown()
        if self.children is not None:
            self.children.shutdown()


def give_back_free_memory() -> None:
    """Return the C heap's free pages to the system (glibc's `malloc_trim(0)`; elsewhere
    nothing). An evicted lazy grammar's tables are freed, but glibc keeps freed memory for
    later allocations: the server's RSS stayed at its peak after the issue-30 attacks."""
    global _libc
    if _libc is None:
        try:
            _libc = ctypes.CDLL("libc.so.6")
            _libc.malloc_trim.argtypes = [ctypes.c_size_t]
        except (OSError, AttributeError):  # not glibc
            _libc = False
    if _libc:
        _libc.malloc_trim(0)


_libc: Any = None  # glibc, once looked up (False: there is none)


def get_backend_class(name: str) -> type[BaseGrammarBackend]:
    import importlib

    modules = {
        "fsm": "fsm_backend",
        "xgrammar": "xgrammar_backend",
        "outlines": "outlines_backend",
        "llguidance": "llguidance_backend",
    }
    if name not in modules:
        raise ValueError(f"unknown grammar backend {name!r}; known: {sorted(modules)}")
    try:
        importlib.import_module(f"minisglang.backends.{modules[name]}")
    except ImportError as e:
        raise ImportError(
            f"grammar backend {name!r} needs its library: {e} (pip install 'minisglang[backends]')"
        ) from e
    return BACKENDS.get(name)
