r"""outlines-core behind the s5 interface: backend "outlines" (regex, json_schema).

outlines-core is the Rust rewrite of the library whose regex -> DFA -> token index idea
stage s1 rebuilt: an `Index` maps every (DFA state, token) to the next state, and a
`Guide` walks it for one request and writes our packed int32 mask format. JSON schemas
become a regex first (its `build_regex_from_schema`), exactly like our fsm backend does.
It has no grammar (EBNF) support and no jump forward, so those stay off: base.py turns an
`ebnf` request into a clear abort, and `try_jump_forward` returns None.

What this adapter adds:
- the `Vocabulary` is built from OUR exact token bytes ({bytes: [ids]}), so byte-level,
  SentencePiece and plain tokenizers all work; special tokens and unused ids are left
  out, so they are never allowed (EOS is the library's own end transition);
- a request ends when EOS has been accepted or when nothing but EOS can follow (an
  accepting state with no other move), like our fsm backend;
- outlines-core's `build_regex_from_schema` silently ignores some keywords (numeric bounds,
  `uniqueItems`, `minProperties`, `not`, a `pattern` beside lengths, ...): a schema using one
  is refused, naming it, rather than turned into a weaker grammar whose outputs the schema
  would reject (IGNORED);
- it puts a `pattern` between the quotes as it is, where `[^a]` matches a raw newline or
  `"`: each pattern is first rewritten over the string's JSON text (what our compiler does);
- its "any value" regex is a bare alternation, which split the regex of an object holding
  it (`{"properties": {"a": {}}}` matched `651`): such a subschema gets every type listed;
- its formats let a raw `"` into a `uri` and Unicode digits into a `date`: a known `format`
  becomes the fsm backend's pattern for it (`format_as_pattern`);
- a `regex` reads as Python's `re` reads it (constrained/python_regex.py): outlines-core's
  Rust regex has its own Unicode `\\w` (combining marks in, '²' out) and `\\s`
  ('\\x1c' out), so it is handed the regex with every character set spelled out
  (`portable_regex`), and `(?i)` and the like are refused;
- outlines-core's invalid-regex message is the same for every mistake ("Failed to build
  DFA"), so Python's `re` is asked for a message that names the problem;
- its `Index` is built in a kept child process (constrained/library_children.py; `compile_in="thread"`
  builds it here): its DFA grows exponentially on some short regexes (`[a-z]{1,300}x[a-z]{1,300}`:
  29 s), a thread cannot be stopped, and two such compiles held both compile threads, so every
  other client's grammar waited and timed out. The child is killed at `compile_timeout` or when
  the compile's requests leave, and its memory is bounded by `compile_memory_bytes`. A
  schema's regex is written there too, and refused past `max_regex_chars`: 3.8 KB of
  optional properties four `$ref`s deep wrote ~1.8 billion characters, which ended the
  server when it was written in the server's own process.

Know also: outlines-core 0.2 builds no move from an accepting state into a non-accepting
one (after "1" in `1(x1)*` no "x"; after "12" in `[0-9]+(\.[0-9]+)?` no lone "."). Its
masks are then a subset of ours: outputs stay valid, some valid strings are unreachable.
"""

from __future__ import annotations

import collections
import json
import pickle
import re
from typing import TYPE_CHECKING, Any

import torch
from outlines_core import Guide, Index, Vocabulary

from ..constrained import library_children
from ..constrained.json_schema import InvalidSchemaError, UnsupportedSchemaError, load_schema

# The string contents (JSON text) in which a pattern finds a match: our fsm compiler's own
# translation, so both backends read a `pattern` alike.
from ..constrained.json_schema.patterns import _pattern_regex as pattern_over_json_text
from ..constrained.lazy_token_fsm import compile_lazy_token_fsm, prepare_vocabulary
from ..constrained.python_regex import portable_regex
from ..constrained.regex_ast import NOTHING, render
from ..constrained.regex_dfa import RegexError, shown_regex
from ..constrained.token_fsm import ConstraintError, check_regex_length
from ..constrained.work_slices import checkpoint
from .base import (
    CHILD_OPTIONS,
    BaseGrammarBackend,
    BaseGrammarObject,
    GrammarError,
    register_backend,
)
from .ignored_keywords import (
    ANNOTATIONS,
    EMPTY_ARRAYS,
    ONE_OF_OVERLAP,
    IgnoredKeyword,
    SchemaObject,
    as_object_schema,
    beside,
    beside_validation,
    format_as_pattern,
    ignored_keyword_error,
    overlapping_branches,
    recursive_ref,
    refuse_ignored_keywords,
    requires_unlisted,
    rewrite_subschemas,
    type_is_not,
    type_outside_branches,
    value_holds,
    values_outside_type,
)

if TYPE_CHECKING:  # pragma: no cover
    from ..tokenizer import Tokenizer

MAX_ROLLBACK = 1024  # states a Guide remembers for `rollback`

# Keywords outlines-core 0.2 accepts but does not enforce (found by running the
# JSON-Schema-Test-Suite through this adapter, each checked alone in tests/test_ignored_keywords.py).
_ALWAYS_IGNORED = (
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "contains",
    "minContains",
    "maxContains",
    "minProperties",
    "maxProperties",
    "patternProperties",
    "propertyNames",
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
    "unevaluatedProperties",
    "unevaluatedItems",
    "not",
    "if",
)
# A `$ref` into itself (recursive_ref): outlines-core unrolls the recursion a few levels and then
# writes the innermost level without its required members (a stranger's fuzzer: `{"v": 9, }`).
RECURSION = IgnoredKeyword("$ref", "that leads back into itself (the recursion is cut after a few levels)")
# JSON must escape these inside a string; outlines-core writes property names raw.
_MUST_ESCAPE = re.compile(r'["\\\x00-\x1f]')


def raw_key(value: Any) -> bool:
    """Whether a const/enum value holds an object key JSON must escape (outlines-core writes
    keys inside values raw: `{"a\\"": 1}` came out `{ "a"": 1 }`, a stranger's fuzzing)."""
    if isinstance(value, list):
        return any(map(raw_key, value))
    if isinstance(value, dict):
        return any(_MUST_ESCAPE.search(k) for k in value) or any(map(raw_key, value.values()))
    return False


IGNORED = (
    *EMPTY_ARRAYS,
    IgnoredKeyword("minItems", "beside 'prefixItems'", beside("prefixItems")),
    IgnoredKeyword("maxItems", "beside 'prefixItems'", beside("prefixItems")),
    *(
        IgnoredKeyword(k, "with an object key JSON must escape (it writes the key raw)", value_holds(k, raw_key))
        for k in ("const", "enum")
    ),
    *(IgnoredKeyword(k) for k in _ALWAYS_IGNORED),
    IgnoredKeyword("uniqueItems", "", lambda s: s["uniqueItems"] is True),  # false asks nothing
    # (these three found by a stranger's fuzzer: `maxLength` beside `anyOf` let `"]<tool_call>{"` through)
    IgnoredKeyword("anyOf", "beside keywords other than 'type'", beside_validation("anyOf", frozenset({"type"}))),
    IgnoredKeyword("oneOf", "beside keywords other than 'type'", beside_validation("oneOf", frozenset({"type"}))),
    IgnoredKeyword("$id", "inside a subschema (a new base for its '$ref's)", below_root=True),
    IgnoredKeyword("pattern", "beside 'minLength' or 'maxLength'", beside("minLength", "maxLength")),
    IgnoredKeyword("required", "for a property 'properties' does not list", requires_unlisted),
    IgnoredKeyword("oneOf", ONE_OF_OVERLAP, overlapping_branches),
    IgnoredKeyword("type", "beside 'anyOf' or 'oneOf' with a branch of another type", type_outside_branches),
    IgnoredKeyword("properties", "beside a 'type' other than 'object' (it writes an object)", type_is_not("object")),
    IgnoredKeyword("prefixItems", "beside a 'type' other than 'array' (it writes an array)", type_is_not("array")),
    IgnoredKeyword("enum", "beside keywords other than 'type', or with values of another type", values_outside_type),
    IgnoredKeyword("const", "beside keywords other than 'type', or of another type", values_outside_type),
    IgnoredKeyword("$ref", "beside other keywords", beside_validation("$ref")),
    # (`#/$defs/a~1b` names `a/b`; outlines-core looked up `a~1b`, a stranger's fuzzer)
    IgnoredKeyword(
        "$ref",
        "whose pointer holds an escape ('~0', '~1' or '%XX': it reads them as written)",
        value_holds("$ref", lambda ref: isinstance(ref, str) and ("~" in ref or "%" in ref)),
    ),
    IgnoredKeyword(
        "allOf",
        "with more than one subschema or beside other keywords (it joins their texts)",
        lambda s: not isinstance(s["allOf"], list) or len(s["allOf"]) > 1 or beside_validation("allOf")(s),
    ),
    # (after `format_as_pattern` a format is a pattern, which outlines-core drops beside lengths)
    IgnoredKeyword("format", "beside 'minLength' or 'maxLength'", beside("minLength", "maxLength")),
    IgnoredKeyword(
        "properties",
        "with a name JSON must escape (it writes the name raw)",
        lambda s: isinstance(s["properties"], dict) and any(_MUST_ESCAPE.search(n) for n in s["properties"]),
    ),
)


# Every JSON type: a subschema that allows any value is given them all (`_any_value_typed`).
ANY_TYPE = ("null", "boolean", "number", "string", "array", "object")


def _any_value_typed(schema: SchemaObject, pointer: str) -> SchemaObject:
    """A subschema that allows any value (only annotations, e.g. `{}`) gets every type
    listed: outlines-core writes "any value" as a bare `a|b|...`, which inside an object or
    array regex splits the whole regex (`{"properties": {"a": {}}}` matched `651`), while
    a listed type is bracketed. The root's regex is whole, so it stays as it is."""
    if pointer != "#" and all(k in ANNOTATIONS for k in schema):
        return {**schema, "type": list(ANY_TYPE)}
    return schema


def _pattern_as_json_text(schema: SchemaObject, pointer: str) -> SchemaObject:
    """`pattern` rewritten over the JSON text of the string: outlines-core puts the pattern
    between the quotes as it is, so `[^a]` would match a raw `"`, `\\` or newline there
    (invalid JSON, or another string once decoded). Our compiler's translation matches the
    same strings (ASCII `\\d`, `\\w`, `\\s`), each character written the way JSON allows."""
    if isinstance(schema.get("pattern"), str):
        try:
            translated = pattern_over_json_text(schema["pattern"], pointer)
            schema["pattern"] = render(NOTHING if translated is None else translated)
        except UnsupportedSchemaError as e:
            raise GrammarError(str(e)) from e
    return schema


class OutlinesIndex:
    """One compiled regex: the shared `Index`, and which states leave only EOS (memoised)."""

    def __init__(self, index: Index, eos_token_id: int, nbytes: int):
        self.index = index
        self.eos_token_id = eos_token_id
        self.nbytes = nbytes  # the pickled index's size: what the byte-bounded cache counts
        self.eos_only: dict[int, bool] = {}

    def only_eos_after(self, state: int) -> bool:
        if state not in self.eos_only:
            self.eos_only[state] = self.index.is_final_state(state) and self.index.get_allowed_tokens(state) == [
                self.eos_token_id
            ]
        return self.eos_only[state]


class OutlinesGrammar(BaseGrammarObject):
    """One request's `Guide` over a shared `OutlinesIndex`."""

    def __init__(self, compiled: OutlinesIndex):
        self.compiled = compiled
        self.guide = Guide(compiled.index, max_rollback=MAX_ROLLBACK)
        self.eos_accepted = False

    def accept_token(self, token_id: int) -> None:
        if token_id == self.compiled.eos_token_id and self.guide.is_finished():
            self.eos_accepted = True  # the Guide would loop on EOS; we just remember it
            return
        try:
            self.guide.advance(token_id, return_tokens=False)
        except ValueError as e:  # "No next state found for the current state: ..."
            raise GrammarError(f"token {token_id} is not allowed by the grammar here ({e})") from e

    def rollback(self, k: int) -> None:
        if k and self.eos_accepted:  # EOS did not move the Guide
            self.eos_accepted, k = False, k - 1
        if k:
            self.guide.rollback_state(k)

    def is_terminated(self) -> bool:
        return self.eos_accepted or self.compiled.only_eos_after(self.guide.get_state())

    def copy(self) -> OutlinesGrammar:
        return OutlinesGrammar(self.compiled)

    def nbytes(self) -> int:
        return self.compiled.nbytes

    def fill_vocab_mask(self, vocab_mask: torch.Tensor, idx: int) -> None:
        row = vocab_mask[idx]  # a row of a contiguous [B, W] tensor is contiguous
        self.guide.write_mask_into(row.data_ptr(), row.numel(), row.element_size())


# Transitions of an Index `narrower_than_the_regex` reads at most, breadth first (a large JSON
# schema's index has millions). A regex's: where the index leaves out text, a stranger's 2,572
# fuzzed regexes showed it 1 to 390 states in, and a state of a wide class (`\\w`, `\\S`) holds
# ~3,000 tokens; at 100,000 the check costs p50 2 ms, p90 ~130 ms, at most ~1.2 s of a compile
# (under load). A JSON schema's: an object or an array matches only at its end, and a bare value
# (a number: `0` then `.5`) within a token or two; 2,000 cost ~10 ms (outlines-core's own
# compile: ~3 ms), where the first 400 states cost p50 83 ms, at most 2.6 s, and found nothing
# more in 100 JSONSchemaBench schemas.
MAX_CHECKED_TRANSITIONS = {"regex": 100_000, "json_schema": 2_000}


def narrower_than_the_regex(
    index: Index, regex: str, tokenizer: Tokenizer, vocab_size: int, budget: int = MAX_CHECKED_TRANSITIONS["regex"]
) -> str | None:
    """What valid text outlines-core 0.2.14's `index` leaves out, or None.

    Its index sometimes offers fewer tokens than the regex allows (a stranger's fuzzing: after
    `0` the number regex `-?(0|[1-9][0-9]*)(\\.[0-9]+)?` allows no `.`, `é+` stops after one
    `é`, and `\\wß{2,}` after two `ß`; 323 of 1,084 regexes lost some valid string): a
    narrower language, never an invalid output, but a grammar weakened silently. So the
    index's states are walked breadth first (at most `budget` moves) beside our own lazy
    automaton of the same regex, and each state's tokens are compared with ours."""
    try:
        ours = compile_lazy_token_fsm(regex, tokenizer, vocab_size)
    except (ConstraintError, RegexError):  # a regex only outlines-core reads: not checked
        return None
    eos, start = tokenizer.eos_token_id, index.get_initial_state()
    seen, queue = {start: ours.index.initial_state}, collections.deque([start])
    text: dict[int, bytes] = {start: b""}  # (bytes: a token may end inside a character)
    while queue and budget > 0:
        checkpoint()  # (a compile thread holds the GIL only in the scheduler's windows)
        state = queue.popleft()
        mine = seen[state]
        allowed = [t for t in index.get_allowed_tokens(state) if t != eos]
        missing = set(ours.index.allowed_token_ids(mine)) - set(allowed) - {eos}
        if missing:
            token = tokenizer.decode_bytes([min(missing)])
            # (a vocabulary writes a character it has no token for byte by byte: without them, never)
            partial = "" if _whole_utf8(token) else "part of a character, as a vocabulary writes one byte by byte; "
            return (
                f"outlines-core's index of this regex leaves out text the regex allows: after "
                f"{_shown(text[state])} it allows no {_shown(token)} "
                f"({partial}one of {len(missing)} tokens it leaves out there; an outlines-core bug)"
            )
        budget -= len(allowed)
        for token in allowed:
            nxt = index.get_next_state(state, token)
            if nxt is not None and nxt not in seen:
                seen[nxt] = ours.index.next_state(mine, token)
                text[nxt] = text[state] + tokenizer.decode_bytes([token])
                queue.append(nxt)
    return None


def _whole_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _shown(data: bytes) -> str:
    """Text as Python writes a str, or as bytes where it is not whole UTF-8 (`b'903\\xc3'`)."""
    return repr(data.decode("utf-8")) if _whole_utf8(data) else repr(data)


def _regex_problem(regex: str, library_message: str) -> str:
    """A message that names what is wrong with `regex` (Python's `re` is more specific)."""
    try:
        re.compile(regex)
    except re.error as e:
        return f"invalid regex {shown_regex(regex)}: {e}"
    return f"outlines-core cannot compile the regex {shown_regex(regex)}: {library_message}"


# An index bigger than this is refused when the grammar cache has no byte bound of its own:
# a stranger's `.{0,5000}z{k}` indexes were 330 MB pickled, 0.8 s of GIL to read back each.
MAX_INDEX_BYTES = 256 << 20
# The longest regex of a schema taken when the engine sets no max_regex_chars (its default).
MAX_SCHEMA_REGEX_CHARS = 100_000


@register_backend("outlines")
class OutlinesBackend(BaseGrammarBackend):
    kinds = frozenset({"regex", "json_schema"})
    # (outlines-core's schema-to-regex takes the whitespace; the regex it writes is bounded)
    own_options = CHILD_OPTIONS | {"json_whitespace", "max_regex_chars"}

    def __init__(self, tokenizer: Tokenizer, vocab_size: int, **kwargs: Any):
        super().__init__(tokenizer, vocab_size, **kwargs)
        if tokenizer.vocab_size > vocab_size:
            raise ValueError(
                f"the logits width {vocab_size} is smaller than the tokenizer's vocabulary ({tokenizer.vocab_size} ids)"
            )
        eos = tokenizer.eos_token_id
        ids_by_bytes: dict[bytes, list[int]] = {}
        for token_id, data in enumerate(tokenizer.token_bytes):
            if data and token_id != eos:  # None: special or unused; b"": spells nothing
                ids_by_bytes.setdefault(data, []).append(token_id)
        # Built once per engine and shared by every Index this backend compiles.
        self.vocabulary = Vocabulary(eos, ids_by_bytes)
        # Our lazy automaton checks each index (`narrower_than_the_regex`): its vocabulary is
        # prepared now, as the fsm backend's is, not in the first compile (~0.25 s at 4k).
        prepare_vocabulary(tokenizer, vocab_size)
        self.start_children(setup=(library_children.outlines_setup, (eos, ids_by_bytes)))

    def compile(self, kind: str, text: str) -> OutlinesGrammar:
        if kind == "json_schema":
            try:  # outlines-core would only say "Expected a valid JSON string."
                schema = load_schema(text)
            except InvalidSchemaError as e:
                raise GrammarError(str(e)) from e
            schema = as_object_schema(schema)  # (outlines-core reads no boolean schema)
            refuse_ignored_keywords(schema, IGNORED, "outlines-core", "outlines")
            looped = recursive_ref(schema)
            if looped is not None:
                raise ignored_keyword_error(RECURSION, looped, "outlines-core", "outlines")
            for step in (_any_value_typed, format_as_pattern, _pattern_as_json_text):
                schema = rewrite_subschemas(schema, step)
            try:
                regex = self._schema_regex(json.dumps(schema, ensure_ascii=False))
            except ConstraintError:  # the child's timeout, cancel or death, or the length: said as it is
                raise
            except ValueError as e:
                raise GrammarError(f"cannot turn the JSON schema into a regex: {e}") from e
        else:
            regex = portable_regex(text)  # a RegexError says what is wrong, in Python's terms
        try:
            index, data = self._index(regex)
        except ConstraintError:  # the child's timeout, cancel or death: said as it is
            raise
        except ValueError as e:
            raise GrammarError(_regex_problem(text if kind == "regex" else regex, str(e))) from e
        limit = self.max_bytes if self.max_bytes is not None else MAX_INDEX_BYTES
        if len(data) > limit:  # (read back, it would hold the GIL ~0.25 s per 100 MB, and the memory)
            raise GrammarError(
                f"outlines-core's index of this regex is {len(data) / 2**20:.0f} MiB, more than the whole grammar "
                f"cache may hold ({limit / 2**20:.0f} MiB, option grammar_cache_bytes); the 'fsm' backend builds "
                "only the states a generation reaches"
            )
        if index is None:
            index = pickle.loads(data)
        narrowed = narrower_than_the_regex(index, regex, self.tokenizer, self.vocab_size, MAX_CHECKED_TRANSITIONS[kind])
        if narrowed is not None:
            raise GrammarError(
                f"{narrowed}; the 'outlines' backend refuses it rather than stop early: use the 'fsm' backend"
            )
        return OutlinesGrammar(OutlinesIndex(index, self.tokenizer.eos_token_id, len(data)))

    def _schema_regex(self, text: str) -> str:
        """outlines-core's regex of the JSON schema `text`, written in a kept child unless the
        backend compiles on threads (a small schema can write billions of characters: see
        library_children.outlines_schema_regex), refused past the option max_regex_chars
        (a longer one took our narrowing check 10-40 s: past compile_timeout anyway)."""
        limit = self.options.get("max_regex_chars", MAX_SCHEMA_REGEX_CHARS)
        whitespace = self.options.get("json_whitespace")
        if self.children is None:
            length, regex = library_children.outlines_schema_regex(text, whitespace, None)
        else:
            written: tuple[int, str] = self.children.call(
                library_children.outlines_schema_regex,
                (text, whitespace, limit),
                timeout=self.compile_timeout,
                what="outlines-core's regex of the JSON schema",
            )
            length, regex = written
        check_regex_length(length, limit, "outlines-core's regex of this JSON schema")
        return regex

    def _index(self, regex: str) -> tuple[Index | None, bytes]:
        """outlines-core's Index of `regex` over our vocabulary, built in a kept child process
        (constrained/library_children.py) unless the backend compiles on threads: the index
        when it was built here (None: read it back from the bytes), and its pickled bytes,
        whose size the cache counts."""
        if self.children is None:
            index = Index(regex, self.vocabulary)
            return index, pickle.dumps(index)
        data: bytes = self.children.call(
            library_children.outlines_index,
            (regex,),
            timeout=self.compile_timeout,
            what=f"outlines-core's index of regex {shown_regex(regex)}",
        )
        return None, data
