"""Our own automaton (stages s1-s4) behind the s5 interface: backend "fsm".

Compiling is stage s3's `CompileService` (constrained/compile_service.py): s1's regex ->
DFA -> token index, s2's packed rows and s4's jump map, from one DFA, in worker processes
(off the scheduler's GIL), bounded in time and memory, with the disk cache when
`grammar_cache_dir` is set. JSON Schema goes through our compiler
(constrained/json_schema/) to a regex first: a syntax tree (constrained/regex_ast.py) that the
lazy automaton reads as it is, rendered as regex text for the eager one. The matcher keeps
one FSM state and a history of states for `rollback`.

By default (option `automaton="lazy"`) the regex is compiled lazily instead
(constrained/lazy_token_fsm.py): the same TokenFSM interface, but states, token rows and
jump-forward strings are made when generation first reaches a state, so compile cost
follows the regex, not the size of its DFA. `automaton="eager"` keeps the path above.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import TYPE_CHECKING, Any

import torch

from ..constrained.child_process import start_ahead
from ..constrained.compile_service import CompileService, CompileSettings
from ..constrained.gbnf_regex import GrammarNotRegular, gbnf_regex
from ..constrained.json_schema import (
    COUNTED_STRING_CHAR,
    IN_PROCESS_SECONDS,
    STRING_CHAR,
    CompileBudgetError,
    CpuBudget,
    build_regex_from_schema,
    build_schema_tree,
)
from ..constrained.lazy_regex import BuildAccount
from ..constrained.lazy_regex_parser import parse_tree
from ..constrained.lazy_token_fsm import LazyLimits, LazyTokenFSM, compile_lazy_token_fsm, prepare_vocabulary
from ..constrained.python_regex import prepare_shorthands
from ..constrained.regex_ast import Regex, python_text_size, render, text_size
from ..constrained.schema_worker import schema_regex_in_process
from ..constrained.token_fsm import TokenFSM, check_regex_length
from ..constrained.work_slices import OutOfTime, deadline
from .base import CHILD_OPTIONS, BaseGrammarBackend, BaseGrammarObject, GrammarError, register_backend

if TYPE_CHECKING:  # pragma: no cover   (s6's file: an s5 checkout has no structural_tag.py)
    from ..constrained.structural_tag import StructuralTag
    from ..constrained.structural_tag_format import StructuralTagFormat
    from ..tokenizer import Tokenizer

# The repeated bodies whose per-token counts a lazy backend computes when it starts (the
# JSON compiler's string characters, digits, hex digits, an e-mail atom's characters, the
# letters and digits of a domain label, with and without its hyphen).
LAZY_PREPARED_BODIES = (
    STRING_CHAR,
    COUNTED_STRING_CHAR,
    "[0-9]",
    "[0-9a-fA-F]",
    r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]",
    "[A-Za-z0-9]",
    "[A-Za-z0-9-]",
)

# Where a JSON Schema is compiled (`schema_tree`). In this process, on a compile thread that
# yields to the scheduler at each subschema, for at most `schema_cpu_seconds` of CPU
# (json_schema/budget.py's IN_PROCESS_SECONDS by default), then in a child process
# (constrained/schema_worker.py), which holds none of our locks and takes what the compile
# built with it when it exits. A text over IN_PROCESS_SCHEMA_CHARS goes to the child at once:
# its parse alone (no checkpoint) would hold the GIL for milliseconds, and a schema that large
# rarely compiles within the budget.
IN_PROCESS_SCHEMA_CHARS = 256 * 1024


def _lazy_size(fsm: TokenFSM) -> tuple[int, int]:
    """(automaton states, regex nodes) a lazy automaton has built; (0, 0) for an eager FSM."""
    if not isinstance(fsm, LazyTokenFSM):
        return 0, 0
    return fsm.index.dfa.num_states, len(fsm.index.dfa.pool)


class FSMGrammar(BaseGrammarObject):
    def __init__(self, fsm: TokenFSM, compiled_size: tuple[int, int] | None = None):
        self.fsm = fsm
        self.state = fsm.index.initial_state
        self.history: list[int] = []  # states before each accepted token, for rollback
        self.terminated = False
        # `state_after`'s walk: the ids walked and the state after each prefix of them.
        self.walked_ids: list[int] = []
        self.walked_states: list[int] = [self.state]
        # The lazy automaton's (states, regex nodes) when compiled (copies keep the compile's):
        # `is_spent` counts what requests built since.
        self.compiled_size = _lazy_size(fsm) if compiled_size is None else compiled_size
        # The lazy automaton's pool (None for an eager FSM), and this request's own room in
        # it: what a fresh compile would leave it (lazy_regex.BuildAccount). Every method
        # that may build opens the account first (`_charge`), so one client's requests over
        # a cached grammar cannot use up another's room.
        self.pool = fsm.index.dfa.pool if isinstance(fsm, LazyTokenFSM) else None
        self.account = self._room()

    def _room(self) -> BuildAccount | None:
        if not isinstance(self.fsm, LazyTokenFSM):
            return None
        states, nodes = self.compiled_size
        dfa = self.fsm.index.dfa
        return BuildAccount(dfa.max_states - states, dfa.pool.max_nodes - nodes)

    def _charge(self) -> None:
        """What the automaton makes from now on is this request's (all of it is made on the
        scheduler's thread, one call at a time)."""
        if self.pool is not None:
            self.pool.account = self.account

    def current_row(self) -> torch.Tensor:
        """The packed row [W] of the current state (made now if it was not)."""
        self._charge()
        return self.fsm.state_row[self.state]

    def accept_token(self, token_id: int) -> None:
        self._charge()
        # BEGIN SOLUTION task5_1
        index = self.fsm.index
        if token_id == index.eos_token_id and index.is_final(self.state):
            self.history.append(self.state)
            self.terminated = True
            return
        nxt = index.next_state(self.state, token_id)
        if nxt < 0:
            raise GrammarError(f"token {token_id} is not allowed in state {self.state}")
        self.history.append(self.state)
        self.state = nxt
        self.terminated = self.fsm.is_complete(nxt)  # accepting, and only EOS can follow
        # END SOLUTION

    def rollback(self, k: int) -> None:
        if k == 0:  # nothing undone: an accepted EOS stays accepted
            return
        for _ in range(k):
            self.state = self.history.pop()
        # The state rolled back to may itself be complete (a speculative draft went past it).
        self.terminated = self.fsm.is_complete(self.state)

    def is_terminated(self) -> bool:
        # A lazy automaton knows whether a state is complete once its row is made: asked
        # before `prepare` made it, make it now (no time limit here: the scheduler prepares first).
        return self.terminated or (self.prepare() and self.terminated)

    def prepare(self, seconds: float | None = None) -> bool:
        """Make the current state's row (the lazy automaton's work), within `seconds`."""
        self._charge()
        try:
            with deadline(seconds) if seconds is not None else contextlib.nullcontext():
                self.fsm.build_row(self.state)
        except OutOfTime:
            return False
        self.terminated = self.terminated or self.fsm.is_complete(self.state)
        return True

    def needs_work(self) -> bool:
        """The lazy automaton's row of the current state is not made yet (an eager FSM made all)."""
        return isinstance(self.fsm, LazyTokenFSM) and self.state not in self.fsm.index.rows

    def is_spent(self) -> bool:
        """The lazy automaton's states and regex nodes grow with every request over this
        compiled grammar, and max_lazy_states / max_regex_nodes bound their sum over its
        life: a popular grammar reached them and every later request over it was aborted
        after a few tokens ('generation reached more than N automaton states') where a fresh
        compile served it. Each request now counts only what it builds (its `account`), so
        that no longer happens; what is left is memory: once requests built more than half of
        what the compile left of either bound, the cache compiles it again, and the old
        automaton goes when the requests on it have finished."""
        if not isinstance(self.fsm, LazyTokenFSM):
            return False
        dfa = self.fsm.index.dfa
        now, bounds = _lazy_size(self.fsm), (dfa.max_states, dfa.pool.max_nodes)
        return any((n - n0) * 2 > bound - n0 for n, n0, bound in zip(now, self.compiled_size, bounds))

    def is_over(self) -> bool:
        if isinstance(self.fsm, LazyTokenFSM) and self.needs_work():
            return self.fsm.ends(self.state)
        return self.is_terminated()

    def allowed_after(self, output_ids: list[int]) -> list[int] | None:
        """The tokens the automaton allows after the output `output_ids` (s4's seam rule: a
        token the grammar forbids there cannot merge with the tail). Without it s5 asked the
        vocabulary alone, gave back more of each jump than s4 and took fewer jumps (a stranger
        saw `red a` where s4 wrote `red an`)."""
        state = self.state_after(output_ids)  # (which opens this request's account)
        return None if state < 0 else self.fsm.index.allowed_token_ids(state)

    def state_after(self, output_ids: list[int]) -> int:
        """The automaton's state after `output_ids` from its start (-1 if rejected), walked on
        from the longest prefix walked before. s4's seam rule asks after every token it gives
        back of every jump: walked from the start each time, a request's seam checks cost
        its whole output per jump, uncuttable on the scheduler thread (16 greedy requests of
        up to 1000 tokens: 1.3 million transitions in 400 steps, ~3 ms a step)."""
        self._charge()
        walked = self.walked_ids
        n = len(os.path.commonprefix([walked, output_ids]))  # (works on lists too)
        state = self.walked_states[n]
        if n == len(output_ids):
            return state  # (a prefix of the walk: the walk is kept, the next check goes on from it)
        del walked[n:], self.walked_states[n + 1 :]
        for t in output_ids[n:]:
            state = self.fsm.index.next_state(state, t)
            if state < 0:
                return -1
            walked.append(t)
            self.walked_states.append(state)
        return state

    def copy(self) -> FSMGrammar:
        return FSMGrammar(self.fsm, self.compiled_size)  # (a new request: the room a fresh compile leaves)

    def nbytes(self) -> int:
        return self.fsm.nbytes()

    def fill_vocab_mask(self, vocab_mask: torch.Tensor, idx: int) -> None:
        self._charge()
        # BEGIN SOLUTION task5_1
        vocab_mask[idx] = self.fsm.state_row[self.state]
        # END SOLUTION

    @classmethod
    def fill_vocab_mask_batched(cls, entries: list[tuple[Any, int]], vocab_mask: torch.Tensor) -> None:  # FSMGrammar's
        """s2's fill: the precomputed rows of all entries, stacked and written in one copy."""
        if entries:
            rows = [idx for _, idx in entries]
            vocab_mask[rows] = torch.stack([grammar.current_row() for grammar, _ in entries])

    def try_jump_forward(self, tokenizer: Any) -> tuple[bytes, int] | None:
        self._charge()
        jump_map = self.fsm.jump_map
        return None if jump_map is None else jump_map.jump_forward(self.state)

    def jump_forward_str_state(self, helper: tuple[bytes, int]) -> tuple[bytes, int]:
        return helper


@register_backend("fsm")
class FSMBackend(BaseGrammarBackend):
    kinds = frozenset({"regex", "json_schema", "ebnf", "structural_tag"})
    own_options = CHILD_OPTIONS | {
        "json_whitespace",
        "json_schema_options",
        "automaton",
        "max_fsm_states",
        "max_regex_chars",
        "max_lazy_states",
        "max_row_expansions",
        "max_regex_nodes",
        "schema_cpu_seconds",
        "grammar_cache_dir",
    }

    def __init__(self, tokenizer: Tokenizer, vocab_size: int, **kwargs: Any):
        super().__init__(tokenizer, vocab_size, **kwargs)
        o = self.options
        self.max_regex_chars: int | None = o.get("max_regex_chars", 100_000)  # (None: no limit)
        settings = CompileSettings(
            vocab_size,
            max_states=int(o.get("max_fsm_states", 10_000)),
            max_regex_chars=self.max_regex_chars,
            jump_map=True,
            memory_bytes=o.get("compile_memory_bytes", 4 << 30),
            nice=int(o.get("compile_nice", 5)),
        )
        # "lazy" (constrained/lazy_token_fsm.py): states and rows made as generation reaches
        # them, compiled in this process in about a millisecond; "eager": s1-s4's whole DFA
        # and index, compiled by the service.
        self.schema_options = dict(o.get("json_schema_options") or {})
        # A bad option fails now. The options are checked before anything is compiled, so the
        # smallest schema does; `true` would build arrays too, which an s5 student copy
        # cannot until task 5_2 is written, and task 5_1 comes first.
        build_regex_from_schema({"type": "null"}, whitespace=o.get("json_whitespace"), **self.schema_options)
        self.automaton = o.get("automaton", "lazy")
        if self.automaton not in ("lazy", "eager"):
            raise ValueError(f"unknown automaton {self.automaton!r}: 'lazy' or 'eager'")
        self.lazy_limits = LazyLimits(
            **{
                k: int(o[k])
                for k in ("max_lazy_states", "max_row_expansions", "max_regex_nodes")
                if o.get(k) is not None
            }
        )
        if self.automaton == "lazy":
            self.service = None  # nothing worth a worker process: the start row takes ~1 ms
            if o.get("compile_in") != "thread":
                # A schema past IN_PROCESS_SCHEMA_CHARS, or whose compile outgrows its CPU
                # budget, is compiled in a child process (`schema_tree`): what forks those
                # children starts now (its imports overlap the preparation below), not in the
                # first such schema's compile.
                start_ahead()
            # Per-vocabulary work done now, not in the first grammars' tokens: the counts of
            # the bodies JSON grammars repeat (a string's character, a digit, a hex digit).
            prepare_vocabulary(tokenizer, vocab_size, LAZY_PREPARED_BODIES)
            prepare_shorthands()  # per-process tables, likewise (python_regex.py)
            return
        # The pool's threads each wait (without the GIL) on a worker: as many workers as threads.
        self.service = CompileService(
            tokenizer,
            settings,
            workers=self.threads,
            timeout=self.compile_timeout,
            compile_in=o.get("compile_in", "process"),
            disk_dir=o.get("grammar_cache_dir"),
        )

    def compile(self, kind: str, text: str) -> FSMGrammar:
        if kind == "json_schema":
            tree, written = self._schema_tree(text)
            return self.compile_regex(tree, None, ours=True, text=written)
        if kind == "ebnf":
            # As long as a regex may be (a v2 structural tag's grammar is bounded alike): the
            # grammar is read in this process, and the lazy automaton's work grows with it.
            check_regex_length(len(text), self.max_regex_chars, what="ebnf grammar")
            return self.compile_regex(self.ebnf_tree(text), None, ours=True)
        return self.compile_regex(text, self.max_regex_chars)

    @staticmethod
    def ebnf_tree(text: str) -> Regex:
        """A GBNF grammar as a regex tree, when no rule refers to itself (constrained/gbnf_regex.py):
        then it is a regular language and the automaton serves it exactly. A recursive one is refused
        naming its rule; xgrammar and llguidance serve any context-free grammar."""
        try:
            return gbnf_regex(text)
        except GrammarNotRegular as e:
            if e.malformed:  # (no backend serves it: none is suggested)
                raise GrammarError(f"the ebnf grammar is not GBNF: {e}") from e
            raise GrammarError(
                f"an ebnf grammar is served here only when it is regular (no rule refers to itself), "
                f"and {e}: use the 'xgrammar' or 'llguidance' grammar backend"
            ) from e

    def compile_schema(self, schema: Any, text: str) -> FSMGrammar:
        """The request's schema as parsed for its cache key: compiled without reading the text again."""
        return self.compile_regex(self.schema_tree(schema), None, ours=True)

    def schema_regex(self, schema: str | dict[str, Any] | bool) -> str:
        """`schema_tree` as regex text for this backend's automaton (a structural tag joins
        several schemas' texts)."""
        return render(self.schema_tree(schema), "lazy" if self.automaton == "lazy" else "python")

    def schema_tree(self, schema: str | dict[str, Any] | bool) -> Regex:
        """Our JSON Schema compiler with this engine's options; a regex longer than
        `max_regex_chars` is refused here."""
        return self._schema_tree(schema)[0]

    def _schema_tree(
        self, schema: str | dict[str, Any] | bool, whitespace: str | None = None
    ) -> tuple[Regex, str | None]:
        """`schema_tree`, and the tree's text when a child process wrote it (else None).
        `whitespace`: the regex where JSON allows whitespace (None: option json_whitespace)."""
        # The compiler may use the lazy automaton's own operators (any-order members) only
        # when that automaton reads the regex. It gets the same length limit, which it checks
        # as the parts are composed: a schema whose regex would blow up stops at the first
        # part over the limit, named, not after the compiler built up to its own default
        # (10x ours: a 1.4 KB schema of mutually recursive objects ran 3.5 s to make 1M
        # characters we then refused).
        limit = self.max_regex_chars
        options = {
            **({"max_regex_chars": limit} if limit is not None else {}),
            **self.schema_options,
            "automaton": self.automaton,
        }
        options["whitespace"] = self.options.get("json_whitespace") if whitespace is None else whitespace
        if self.options.get("compile_in") == "thread":  # no child processes: all of it here
            return build_schema_tree(schema, **options), None
        if isinstance(schema, str) and len(schema) > IN_PROCESS_SCHEMA_CHARS:
            return self._schema_tree_in_child(schema, options, limit)
        # Here, as long as it takes at most schema_cpu_seconds of CPU (its compile thread
        # yields to the scheduler at every subschema meanwhile); past that, in a child.
        budget = CpuBudget(float(self.options.get("schema_cpu_seconds", IN_PROCESS_SECONDS)))
        try:
            # (build_schema_tree checks text_size against the same limit, given as its option)
            return build_schema_tree(schema, budget=budget, **options), None
        except CompileBudgetError:
            text = schema if isinstance(schema, str) else json.dumps(schema, ensure_ascii=False)
            return self._schema_tree_in_child(text, options, limit)

    def _schema_tree_in_child(self, text: str, options: dict[str, Any], limit: int | None) -> tuple[Regex, str]:
        """The schema's tree written by a child process (schema_worker.py), and its text. The
        child sends the tree as lazy-dialect text, the one form that crosses the pipe; this is
        the only place a compiled schema is parsed back."""
        child_text = schema_regex_in_process(
            text,
            options,
            self.compile_timeout,
            self.options.get("compile_memory_bytes", 4 << 30),
            int(self.options.get("compile_nice", 5)),
        )
        tree = parse_tree(child_text, members=True)
        check_regex_length(text_size(tree), limit)  # (the tree read back: the child checked the one it built)
        return tree, child_text

    def compile_regex(
        self, regex: str | Regex, max_regex_chars: int | None, ours: bool = False, text: str | None = None
    ) -> FSMGrammar:
        """`regex`: text, or our JSON Schema compiler's tree. `ours`: it was written by our
        compiler (already length-checked), so its text may use the lazy automaton's private
        `(?@members...)` groups; a user's may not. `text`: the tree's text in this automaton's
        dialect, when a child process wrote it (not rendered again)."""
        if self.automaton == "lazy":
            return FSMGrammar(
                compile_lazy_token_fsm(
                    regex,
                    self.tokenizer,
                    self.vocab_size,
                    self.lazy_limits,
                    max_regex_chars=max_regex_chars,
                    members=ours,
                    text=text,
                )
            )
        assert self.service is not None  # made by __init__ for the eager automaton
        if not isinstance(regex, str):
            # The Python dialect writes a shared part out wherever it is used: an ebnf chain
            # `a ::= b b`, `b ::= c c`, ... 30 deep is 2^30 characters, refused before any is written.
            check_regex_length(python_text_size(regex), self.max_regex_chars)
            regex = render(regex)
        return FSMGrammar(self.service.compile_fsm(regex))

    reads_content_schema = True  # (the lazy automaton's; the eager one refuses it by name)

    def compile_structural_tag(self, spec: StructuralTag) -> FSMGrammar:
        """The spec as one regex (constrained/structural_tag.py). `max_regex_chars` bounds each
        schema's regex, not their sum: the automaton's own limits bound the rest."""
        return self.compile_regex(spec.to_regex(self.schema_regex, automaton=self.automaton), None, ours=True)

    def compile_structural_tag_format(self, spec: StructuralTagFormat) -> FSMGrammar:
        """A v2 structural tag as one regex tree (constrained/structural_tag_regex.py), for
        the lazy automaton (free text is written with its difference operator). As for the
        old shape, `max_regex_chars` bounds each schema's regex, and the user's regexes."""
        from ..constrained.structural_tag_format import GrammarFormat, RegexFormat, StructuralTagFormatError
        from ..constrained.structural_tag_regex import format_regex

        if self.automaton != "lazy":
            raise GrammarError(
                "a v2 structural tag needs the lazy automaton (option automaton='lazy', the default): "
                "its free text is written with the lazy automaton's difference operator"
            )
        limit = self.max_regex_chars
        for path, fmt in spec.walk():
            text = (
                fmt.pattern if isinstance(fmt, RegexFormat) else fmt.grammar if isinstance(fmt, GrammarFormat) else ""
            )
            if limit is not None and len(text) > limit:
                field = "pattern" if isinstance(fmt, RegexFormat) else "grammar"
                raise StructuralTagFormatError(
                    f"structural_tag.{path}.{field}: {'regex' if field == 'pattern' else 'grammar'} of "
                    f"{len(text):,} characters is longer than the limit of {limit:,} (option max_regex_chars)"
                )
        tree = format_regex(spec, lambda schema, whitespace: self._schema_tree(schema, whitespace)[0])
        return self.compile_regex(tree, None, ours=True)

    def shutdown(self) -> None:
        super().shutdown()
        if self.service is not None:
            self.service.shutdown()
