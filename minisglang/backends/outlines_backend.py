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
  `uniqueItems`, `minProperties`, ...): a schema using one is refused, naming it, rather
  than turned into a weaker grammar whose outputs the schema would reject;
- a `regex` reads as Python's `re` reads it (constrained/python_regex.py): outlines-core's
  Rust regex has its own Unicode `\\w` (combining marks in, '²' out) and `\\s`
  ('\\x1c' out), so it is handed the regex with every character set spelled out
  (`portable_regex`), and `(?i)` and the like are refused;
- outlines-core's invalid-regex message is the same for every mistake ("Failed to build
  DFA"), so Python's `re` is asked for a message that names the problem.

Know also: outlines-core 0.2 builds no move from an accepting state into a non-accepting
one (after "1" in `1(x1)*` no "x"; after "12" in `[0-9]+(\.[0-9]+)?` no lone "."). Its
masks are then a subset of ours: outputs stay valid, some valid strings are unreachable.
"""
from __future__ import annotations

import json
import re

import torch
from outlines_core import Guide, Index, Vocabulary
from outlines_core.json_schema import build_regex_from_schema

from ..constrained.json_schema import InvalidSchemaError, load_schema
from ..constrained.python_regex import portable_regex
from ..constrained.regex_dfa import shown_regex
from .base import BaseGrammarBackend, BaseGrammarObject, GrammarError, register_backend

MAX_ROLLBACK = 1024   # states a Guide remembers for `rollback`

# Keywords outlines-core 0.2 accepts but does not enforce (checked one by one).
IGNORED_KEYWORDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
                    "uniqueItems", "contains", "minContains", "maxContains", "minProperties",
                    "maxProperties", "patternProperties", "propertyNames", "dependentRequired",
                    "dependentSchemas", "unevaluatedProperties", "unevaluatedItems")
# Where subschemas live: a map of them, one of them, or a list of them.
_SCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas")
_SCHEMA_ONE = ("items", "additionalProperties", "additionalItems", "not", "if", "then", "else",
               "contains", "propertyNames", "unevaluatedItems", "unevaluatedProperties")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems", "items")


def find_ignored_keyword(schema, path: str = "#") -> tuple[str, str] | None:
    """(keyword, where) of the first keyword outlines-core would ignore, or None."""
    if not isinstance(schema, dict):
        return None
    for keyword in IGNORED_KEYWORDS:
        if keyword in schema:
            return keyword, path
    children = []
    for key, value in schema.items():
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            children += [(sub, f"{path}/{key}/{name}") for name, sub in value.items()]
        elif key in _SCHEMA_ONE and isinstance(value, dict):
            children.append((value, f"{path}/{key}"))
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            children += [(sub, f"{path}/{key}/{i}") for i, sub in enumerate(value)]
    for sub, where in children:
        found = find_ignored_keyword(sub, where)
        if found:
            return found
    return None


class OutlinesIndex:
    """One compiled regex: the shared `Index`, and which states leave only EOS (memoised)."""

    def __init__(self, index: Index, eos_token_id: int):
        self.index = index
        self.eos_token_id = eos_token_id
        self.eos_only: dict[int, bool] = {}

    def only_eos_after(self, state: int) -> bool:
        if state not in self.eos_only:
            self.eos_only[state] = (self.index.is_final_state(state)
                                    and self.index.get_allowed_tokens(state) == [self.eos_token_id])
        return self.eos_only[state]


class OutlinesGrammar(BaseGrammarObject):
    """One request's `Guide` over a shared `OutlinesIndex`."""

    def __init__(self, compiled: OutlinesIndex):
        self.compiled = compiled
        self.guide = Guide(compiled.index, max_rollback=MAX_ROLLBACK)
        self.eos_accepted = False

    def accept_token(self, token_id: int) -> None:
        if token_id == self.compiled.eos_token_id and self.guide.is_finished():
            self.eos_accepted = True   # the Guide would loop on EOS; we just remember it
            return
        try:
            self.guide.advance(token_id, return_tokens=False)
        except ValueError as e:   # "No next state found for the current state: ..."
            raise GrammarError(f"token {token_id} is not allowed by the grammar here ({e})") from e

    def rollback(self, k: int) -> None:
        if k and self.eos_accepted:   # EOS did not move the Guide
            self.eos_accepted, k = False, k - 1
        if k:
            self.guide.rollback_state(k)

    def is_terminated(self) -> bool:
        return self.eos_accepted or self.compiled.only_eos_after(self.guide.get_state())

    def copy(self) -> "OutlinesGrammar":
        return OutlinesGrammar(self.compiled)

    def fill_vocab_mask(self, vocab_mask: torch.Tensor, idx: int) -> None:
        row = vocab_mask[idx]     # a row of a contiguous [B, W] tensor is contiguous
        self.guide.write_mask_into(row.data_ptr(), row.numel(), row.element_size())


def _regex_problem(regex: str, library_message: str) -> str:
    """A message that names what is wrong with `regex` (Python's `re` is more specific)."""
    try:
        re.compile(regex)
    except re.error as e:
        return f"invalid regex {shown_regex(regex)}: {e}"
    return f"outlines-core cannot compile the regex {shown_regex(regex)}: {library_message}"


@register_backend("outlines")
class OutlinesBackend(BaseGrammarBackend):
    kinds = frozenset({"regex", "json_schema"})

    def __init__(self, tokenizer, vocab_size: int, **kwargs):
        super().__init__(tokenizer, vocab_size, **kwargs)
        if tokenizer.vocab_size > vocab_size:
            raise ValueError(f"the logits width {vocab_size} is smaller than the tokenizer's "
                             f"vocabulary ({tokenizer.vocab_size} ids)")
        eos = tokenizer.eos_token_id
        ids_by_bytes: dict[bytes, list[int]] = {}
        for token_id, data in enumerate(tokenizer.token_bytes):
            if data and token_id != eos:   # None: special or unused; b"": spells nothing
                ids_by_bytes.setdefault(data, []).append(token_id)
        # Built once per engine and shared by every Index this backend compiles.
        self.vocabulary = Vocabulary(eos, ids_by_bytes)

    def compile(self, kind: str, text: str) -> OutlinesGrammar:
        if kind == "json_schema":
            try:   # outlines-core would only say "Expected a valid JSON string."
                schema = load_schema(text)
            except InvalidSchemaError as e:
                raise GrammarError(str(e)) from e
            ignored = find_ignored_keyword(schema)
            if ignored:
                raise GrammarError(f"outlines-core does not enforce {ignored[0]!r} (at {ignored[1]}); "
                                   f"use the fsm, xgrammar or llguidance backend for this schema")
            try:
                regex = build_regex_from_schema(text, self.options.get("json_whitespace"))
            except ValueError as e:
                raise GrammarError(f"cannot turn the JSON schema into a regex: {e}") from e
        else:
            regex = portable_regex(text)   # a RegexError says what is wrong, in Python's terms
        try:
            index = Index(regex, self.vocabulary)
        except ValueError as e:
            raise GrammarError(_regex_problem(text if kind == "regex" else regex, str(e))) from e
        return OutlinesGrammar(OutlinesIndex(index, self.tokenizer.eos_token_id))
