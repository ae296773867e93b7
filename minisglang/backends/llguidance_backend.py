"""llguidance behind the s5 interface: backend "llguidance" (regex, json_schema, ebnf).

llguidance (Microsoft's guidance engine, in Rust) splits a grammar into a lexer (regexes,
run as lazily built DFAs over a token trie) and an Earley parser over the lexemes, and
computes each mask on the fly instead of precomputing per-state tables: compiling is
nearly free, and each step costs a trie walk. It writes our packed int32 mask format.

What this adapter adds:
- the `LLTokenizer` is built from OUR exact token bytes, so byte-level, SentencePiece and
  plain tokenizers all work; special tokens are spelled b"\\xff" + name (llguidance's
  convention, so they can never match grammar text), and padded logit columns are empty
  tokens, which are never allowed;
- a `regex` reads as Python's `re` reads it (constrained/python_regex.py): llguidance's
  Rust regex has its own Unicode `\\w` (combining marks in, '²' out) and `\\s`
  ('\\x1c' out), so it is handed the regex with every character set spelled out
  (`portable_regex`), and `(?i)` and the like are refused;
- `ebnf` accepts the GBNF dialect (llama.cpp and xgrammar: `root ::= "yes" | "no"`) or
  llguidance's Lark dialect (`start: "yes" | "no"`, Outlines' `?start: value` too);
  `as_lark` tells them apart, and `gbnf_to_lark` reads GBNF as llama.cpp does with
  llguidance's converter and our `_GbnfReader`: every lexeme one character (the converter
  made a rule of terminals one greedy lexeme, and llama.cpp's arithmetic.gbnf then allowed
  no complete output), a character class item by item (copied into a Rust regex, `&&`,
  `--` and `~~` were set operators and `[^0-9&&a-z]` allowed every character), `.` any
  character (Rust's left out '\\n'). Most EBNF text works here and on xgrammar, but not
  all (two strangers' attacks; not reconciled): string escapes (`"\\x41BC"` is "ABC" here,
  as in llama.cpp, and U+41BC in xgrammar, which reads every hex digit after `\\x`), and
  some valid GBNF the converter refuses (`("a"*){2}`, `"a"{0}`, `[\\^a]`, a line that
  starts with `|`: its message quotes the Lark text it made);
- `json_schema` output is laid out like `json.dumps`: `", "` and `": "`, no other
  whitespace (llguidance's default free whitespace lets a small model loop on spaces);
- `is_terminated` is llguidance's `is_stopped()`: EOS accepted, or nothing but EOS can
  follow, the same rule as our fsm backend;
- a `json_schema` using a keyword llguidance gets wrong (IGNORED: a `pattern` class such as
  `[^"]` whose JSON escapes it writes too widely, a `multipleOf` that is not whole) is
  refused, naming it; number bounds are handed over as ones it holds exactly
  (`SAFE_BOUNDS`: it compares decimal text, where validators compare doubles);
  a known `format` becomes the fsm backend's pattern for it
  (`format_as_pattern`: llguidance's `time` allows a leap second at any minute);
- jump forward uses llguidance's forced bytes (`compute_ff_bytes`).
"""

from __future__ import annotations

import functools
import itertools
import json
import re
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from typing import TYPE_CHECKING, Any

import llguidance as llg
import torch
from llguidance.gbnf_to_lark import (
    ASTNode,
    GbnfToLarkError,
    GrammarParser,
    LiteralNode,
    Position,
    RegexNode,
    RuleRefNode,
    SequenceNode,
    resolve,
)

from ..constrained.bitmask import allows
from ..constrained.json_schema import InvalidSchemaError, load_schema

# The characters one parsed item of a Python regex holds (`wide`: Python's reading, else
# the ASCII reading ECMA-262 shares), from our compiler's pattern translation.
from ..constrained.json_schema.patterns import _item_ranges as item_ranges
from ..constrained.python_regex import portable_regex
from ..constrained.regex_ast import render
from .base import (
    BaseGrammarBackend,
    BaseGrammarObject,
    GrammarError,
    GrammarLimitError,
    register_backend,
)
from .ignored_keywords import (
    INEXACT_BOUNDS,
    INEXACT_INTEGERS,
    REPEATED_KEYS_ABSENT_OPEN,
    IgnoredKeyword,
    SchemaObject,
    allows_keys,
    as_object_schema,
    escaped_name_as_extra_key,
    format_as_pattern,
    inclusive_number_bounds,
    is_whole,
    listed_names,
    parsed_pattern,
    pattern_rules,
    refuse_ignored_keywords,
    refuse_unused_triggers,
    rewrite_subschemas,
    unlisted_raw_names,
)

try:  # Python's own regex parser, to read a `pattern` as jsonschema's `re` does
    import re._parser as sre_parse  # Python >= 3.11
except ImportError:  # pragma: no cover - Python 3.10
    import sre_parse

if TYPE_CHECKING:  # pragma: no cover   (JsonCompileOptions is a TypedDict of llguidance's stubs only)
    from llguidance._lib import JsonCompileOptions

    from ..constrained.structural_tag import StructuralTag
    from ..constrained.structural_tag_format import StructuralTagFormat
    from ..tokenizer import Tokenizer

# json.dumps' layout; llguidance's default would allow any run of whitespace.
JSON_LAYOUT: JsonCompileOptions = {"item_separator": ", ", "key_separator": ": ", "whitespace_flexible": False}


# ------------------------------------------------- JSON Schema: what llguidance gets wrong
def _single_characters(items: Any) -> Iterator[tuple[int, Any]]:
    """Every single-character item (literal, negated literal, `.`, class) of a parsed regex."""
    for op, arg in items:
        if op in (sre_parse.LITERAL, sre_parse.NOT_LITERAL, sre_parse.ANY, sre_parse.IN):
            yield op, arg
            continue
        for part in arg if isinstance(arg, (tuple, list)) else (arg,):
            for sub in part if isinstance(part, list) else (part,):
                if isinstance(sub, sre_parse.SubPattern):
                    yield from _single_characters(sub)


def _holds(ranges: list[tuple[int, int]], code: int) -> bool:
    return any(lo <= code <= hi for lo, hi in ranges)


def misquoted_class(pattern: str) -> bool:
    """Whether `pattern` has a character class holding both U+0000 and U+001F but not both
    `"` and `\\`: llguidance (1.9) writes such a class over the string's JSON text with every
    short escape, so `[^"]` let `\\"` through (a `"` in the string) and `[\\x00-\\x1f]` let
    `\\"` and `\\\\` through. (A pattern Python cannot read is left to llguidance, unless
    `read_otherwise` refuses it.)"""
    items = parsed_pattern(pattern)  # (read_otherwise refuses what Python warns about)
    if items is None:
        return False
    for op, arg in _single_characters(items):
        for wide in (False, True):  # both readings of \\s (Python's holds U+001C-U+001F)
            chars = item_ranges(op, arg, wide)
            if _holds(chars, 0x00) and _holds(chars, 0x1F) and not (_holds(chars, 0x22) and _holds(chars, 0x5C)):
                return True
    return False


# Syntax only Rust's regex has (an inline flag group, `\\x{41}`, `\\z`), after an even run of
# backslashes: JavaScript reads each otherwise or refuses it.
_RUST_ONLY = re.compile(r"(?<!\\)(?:\\\\)*(?:\(\?[a-zA-Z-]+[:)]|\\x\{|\\z)")


def read_otherwise(pattern: str) -> bool:
    """Whether llguidance's Rust regex reads `pattern` otherwise than ECMA-262 (JSON Schema's
    dialect) and Python do: syntax only Rust has (`(?i)`, `\\x{41}`, `\\z`), or what Python
    warns another engine reads differently (`&&`, `--`, `~~`, `||` or `[:` inside a class:
    Rust's class operations and POSIX classes; in `[a-z&&[^aeiou]]` Python and JavaScript see
    a class and a literal `]`). Other patterns Python cannot read but ECMA-262 can
    (`\\p{Letter}`) are left to llguidance, which reads them as ECMA-262 does."""
    if _RUST_ONLY.search(pattern):
        return True
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        try:
            sre_parse.parse(pattern)
        except FutureWarning:
            return True
        except (re.error, OverflowError, RecursionError):
            return False
    return False


def negated_shorthand(pattern: str) -> bool:
    """Whether `pattern` holds `\\D`, `\\W`, `\\S`, or `\\d`, `\\w`, `\\s` in a negated class: ECMA-262
    reads the shorthands over ASCII (llguidance with it), Python over Unicode (jsonschema
    with it), so their negations differ: llguidance's `^\\D$` wrote "٣", a digit to Python
    (a stranger's fuzzing). The plain shorthands are a subset of Python's: left alone."""
    items = parsed_pattern(pattern)
    if items is None:
        return False
    negated = {sre_parse.CATEGORY_NOT_DIGIT, sre_parse.CATEGORY_NOT_WORD, sre_parse.CATEGORY_NOT_SPACE}
    plain = {sre_parse.CATEGORY_DIGIT, sre_parse.CATEGORY_WORD, sre_parse.CATEGORY_SPACE}
    for op, arg in _single_characters(items):
        if op != sre_parse.IN:
            continue
        is_negated = any(o == sre_parse.NEGATE for o, _ in arg)
        categories = {a for o, a in arg if o == sre_parse.CATEGORY}
        if categories & negated or (is_negated and categories & plain):
            return True
    return False


def _fractional_multiple(schema: SchemaObject) -> bool:
    """A `multipleOf` that is not a whole number: llguidance divides the number's decimal
    text, Python's jsonschema the doubles, and they disagree (0.3 is a multiple of 0.1 to
    one, not to the other: a stranger's tool fuzzing got 0.3 and 0.6 under multipleOf 0.1)."""
    value = schema["multipleOf"]
    return isinstance(value, (int, float)) and not isinstance(value, bool) and not is_whole(value)


_READ_OTHERWISE = (
    "as ECMA-262 and Python read it: its Rust regex reads this pattern otherwise (an inline flag, "
    "\\x{..}, \\z, or '&&', '--', '~~', '||' or '[:' inside a class)"
)
_NEGATED_SHORTHAND = (
    "with \\D, \\W, \\S or a negated class of \\d, \\w, \\s (it reads them over ASCII, as ECMA-262 "
    "does; Python's jsonschema over Unicode)"
)
_MISQUOTED = "with a character class that holds U+0000-U+001F but not both '\"' and '\\' (it allows every escape)"
# Keywords llguidance compiles but gets wrong in these cases (found by random walks over its
# masks, tests/test_ignored_keywords.py): the schema is refused, naming the keyword.


IGNORED = (
    *INEXACT_INTEGERS,
    *INEXACT_BOUNDS,
    *pattern_rules(_NEGATED_SHORTHAND, negated_shorthand),
    *pattern_rules(_MISQUOTED, misquoted_class),
    *pattern_rules(_READ_OTHERWISE, read_otherwise),
    IgnoredKeyword(
        "multipleOf",
        "that is not a whole number (it divides the decimal text; Python's jsonschema divides doubles)",
        _fractional_multiple,
    ),
    REPEATED_KEYS_ABSENT_OPEN,
    # (it matches a key against the patterns as spelled: `{"\u0061b": "x"}` came out under `^a`
    # integers, an extra key to it; with extra keys forbidden only a pattern's spellings are left)
    IgnoredKeyword(
        "patternProperties",
        "unless 'additionalProperties' is false (a key written with an escape, `\\u0061b`, was not "
        "matched against the patterns and took the extra keys' schema)",
        lambda s: allows_keys(s, "additionalProperties", absent=True),
    ),
    # (the extra keys' pattern below has raw names only; the rule is read where `required` is, and
    # where an `allOf` puts one branch's required name beside another branch's listed properties)
    *(
        IgnoredKeyword(
            keyword,
            "for a name written only with an escape (a quote, a backslash, a control character) that an "
            "object listing other properties takes as an extra key (this adapter keeps extra keys to "
            "names of raw characters: a key written with an escape was not matched against the listed names)",
            escaped_name_as_extra_key,
        )
        for keyword in ("required", "allOf")
    ),
)


# --------------------------------------------- JSON Schema: extra keys written without escapes
# llguidance writes an extra key as any JSON string, escapes and all, and matches it against the
# listed names as spelled: `{"\u0061": "x"}` came out under `a`'s integer schema, though every
# JSON parser reads the key as `a` (a stranger's fuzzer). A `patternProperties` pattern it holds
# to the spellings it writes for a `pattern`, which have no `\u0061` for `a`; so an object's
# extra keys become one pattern's (`unlisted_raw_names`), and `additionalProperties` false.
# The longest listed name the extra keys' pattern leaves out: it nests a few groups per letter,
# and llguidance's regex parser stops at 250 nested parentheses (a 64-letter name).
LONGEST_EXCLUDED_NAME = 56


def _escape_free_extra_keys(schema: SchemaObject, pointer: str) -> SchemaObject:
    """An object's extra keys as one pattern's keys (above), where it lists properties (a user's
    `patternProperties` beside extra keys is refused before). llguidance holds a listed name a
    pattern matches to both schemas, so the pattern leaves the listed names out where the extra
    keys' schema says something; where it allows anything the pattern is every raw name, one
    text in every object (two different ones in the branches of an `allOf` it refused as "not
    disjoint")."""
    extra = schema.get("additionalProperties", True)
    if not listed_names(schema) or extra is False:
        return schema
    names = [] if extra in (True, {}) else listed_names(schema)
    pattern = f"^(?:{render(unlisted_raw_names(names, LONGEST_EXCLUDED_NAME))})$"
    return {**schema, "patternProperties": {pattern: extra}, "additionalProperties": False}


# ------------------------------------------------- JSON Schema: number bounds llguidance can hold
# llguidance holds a number's decimal TEXT to a bound, Python's jsonschema its DOUBLE, and a text
# with more digits than a double keeps can round onto the bound: under exclusiveMinimum 1 it wrote
# 1.00000000000000001, which reads as 1.0 (a stranger's tool fuzzing). It also reads a bound of 16-17
# digits inexactly (it let 1 through under maximum 0.9999999999999999). So a bound is handed to it as
# an inclusive one of at most SAFE_DIGITS significant digits, rounded inwards (an exclusive one from
# the next double inwards): distinct decimals of 15 digits are distinct doubles, so every text on the
# inner side of such a bound reads as a double inside the schema's bound. What this loses: numbers of
# 16-17 digits within ~1e-14 (relative) of a bound, which a model rarely writes.
SAFE_DIGITS = 15
# Near 0 llguidance's range regex nests one group per leading zero of the bound (it refused 1e-100:
# "regex parse error"): a bound inside (-TINY, TINY) moves inwards to +-TINY or 0, so exclusiveMinimum
# 0 is minimum 1e-30 (losing texts with 30 or more zeros after the point).
TINY = Decimal("1e-30")


def _inner_decimal(value: float, upwards: bool) -> Decimal:
    """The decimal of at most SAFE_DIGITS significant digits nearest `value`'s shortest text on
    the inner side (`upwards` for a lower bound), moved off (-TINY, TINY) inwards."""
    text = Decimal(repr(float(value)))
    if text:
        step = Decimal(1).scaleb(text.adjusted() - SAFE_DIGITS + 1)
        text = text.quantize(step, rounding=ROUND_CEILING if upwards else ROUND_FLOOR)
    if -TINY < text < TINY and text:
        text = (TINY if text > 0 else Decimal(0)) if upwards else (-TINY if text < 0 else Decimal(0))
    return text


# The number bounds llguidance is given (`inclusive_number_bounds` with `_inner_decimal`).
SAFE_BOUNDS = functools.partial(
    inclusive_number_bounds,
    inner=_inner_decimal,
    held=f"of at most {SAFE_DIGITS} significant digits, the numbers llguidance holds to bounds exactly",
)


# The longest token llguidance's token trie holds (toktrie 1.x: 10 bits of depth); a longer
# one made LLTokenizer panic (a stranger's vocabulary with a 4,096-byte token).
LLGUIDANCE_MAX_TOKEN_BYTES = 1024


# The most characters of a forced text tokenized at once (see `_TokenizerSource.__call__`).
FORCED_TEXT_CHARS = 4096


class _TokenizerSource:
    """What `llg.TokenizerWrapper` reads to build an `LLTokenizer` from our tokenizer."""

    def __init__(self, tokenizer: Tokenizer, vocab_size: int):
        self.tokenizer = tokenizer
        self.eos_token_id = tokenizer.eos_token_id
        self.bos_token_id = None  # llguidance only uses it to strip a BOS from prompts
        self.special_token_ids = sorted(tokenizer.special_token_ids)
        tokens = []
        for token_id, data in enumerate(tokenizer.token_bytes):
            if token_id in tokenizer.special_token_ids:
                data = b"\xff" + tokenizer.id_to_token(token_id).encode()
            tokens.append(data or b"")
        self.tokens = tokens + [b""] * (vocab_size - len(tokens))  # padded logit columns
        self._ids_by_bytes: dict[bytes, int] | None = None  # see `_spelled`
        self._longest = 0

    def __call__(self, text: str) -> list[int]:
        if not isinstance(text, str):  # tells TokenizerWrapper to pass str, not bytes
            raise TypeError("our tokenizer encodes str")
        if len(text) > FORCED_TEXT_CHARS:
            # llguidance tokenizes the whole forced text at every mask, in Python: 10,000 required
            # null properties (150k characters) took 0.2-0.27 s a mask, and 16 choices held every
            # client 5-7 s (a stranger's stall hunt). Its leading tokens are all a mask reads: the
            # tokens of a long prefix, less the last two (which the cut may have merged
            # otherwise), spell the start of the text; the rest is tokenized as it comes.
            return self(text[:FORCED_TEXT_CHARS])[:-2]
        # A grammar's text is text: a string that spells a special token ("<|tool|>" in a const)
        # must be its ordinary tokens, or the mask allows the special id and the matcher then
        # refuses it (a stranger's fuzzer: every such grammar aborted).
        ids = self.tokenizer.encode_as_text(text)
        # llguidance allows only this tokenization of forced text, so its ids must spell the
        # text. Hugging Face's need not: an id that is both a vocabulary piece and a special
        # token ("{" marked special) spells nothing here, and a BPE without an unknown token
        # drops a character it has no piece for. Then the vocabulary's own tokens spell it.
        spelled = [self.tokenizer.token_bytes[i] for i in ids]
        data = text.encode("utf-8", "surrogatepass")
        if None in spelled or b"".join(b for b in spelled if b is not None) != data:
            return self._spelled(data)
        return ids

    def _spelled(self, data: bytes) -> list[int]:
        """Text tokens spelling `data`, longest first (the lowest id of equal bytes), as far as
        the vocabulary can spell it (a stranger's vocabulary: see `__call__`)."""
        if self._ids_by_bytes is None:
            by_bytes: dict[bytes, int] = {}
            for token_id, token in enumerate(self.tokenizer.token_bytes):
                if token:  # (None: a special token or an unused id)
                    by_bytes.setdefault(token, token_id)
            self._longest = max(map(len, by_bytes), default=0)
            self._ids_by_bytes = by_bytes  # two threads racing here each build an equal table
        ids, at = [], 0
        while at < len(data):
            for n in range(min(self._longest, len(data) - at), 0, -1):
                found = self._ids_by_bytes.get(data[at : at + n])
                if found is not None:
                    ids.append(found)
                    at += n
                    break
            else:  # no token starts with the byte at `at`
                return ids
        return ids


def _check_mask(vocab_mask: torch.Tensor) -> None:
    """llguidance writes raw memory: the mask must be a contiguous int32 CPU tensor [B, W]."""
    if vocab_mask.dtype != torch.int32 or vocab_mask.device.type != "cpu" or not vocab_mask.is_contiguous():
        raise ValueError(
            f"the vocab mask must be a contiguous int32 CPU tensor, got {vocab_mask.dtype} "
            f"on {vocab_mask.device} (contiguous: {vocab_mask.is_contiguous()})"
        )


# llguidance builds its lexer's DFA states lazily and keeps them in the compile every copy
# shares, and it says nothing of their size. What it cannot do is build states faster than
# its calls run: so a compile is charged for the seconds its copies spent in llguidance's
# calls, at BYTES_PER_SECOND, above the most RSS grown per second of calls measured
# (benchmarks/bench_llguidance_growth.py; two strangers' soaks): hostile regexes up to ~150
# MiB/s at the bundled 4k vocabulary; a Lark intersection 280-360 MiB/s for the ~10 ms until
# llguidance's own limit on regex expressions stopped it (~3 MiB). A count of steps was no
# measure: one stranger's regex built ~700 states a step, 90x what a charge per step had
# assumed. A friendly schema stops growing after its first requests and is overcharged: it is
# compiled again sooner than it needs (2-3 ms).
BYTES_PER_SECOND = 512 << 20
# Charged this much (~60 ms of calls), a compile is spent: the cache compiles it afresh for
# the next request, and the trim's byte bound counts it meanwhile.
SPENT_BYTES = 32 << 20


@dataclass
class _Shared:
    """What every copy of one compile shares besides llguidance's lexer."""

    grammar: str  # llguidance's grammar text: a copy whose shared lexer is spent compiles it again
    tokenizer: llg.LLTokenizer
    limits: llg.LLParserLimits
    spent: bool = False  # charged SPENT_BYTES, or a copy reached a limit: compile it afresh
    full: bool = False  # the lexer reached its limit: a copy may refuse a token it would take
    jumps: bool = True  # False once a copy's jump search was too slow (`search_was_slow`)
    seconds: float = 0.0  # in llguidance's calls, over all copies: what the lexer may have built

    def new_start(self) -> llg.LLMatcher:
        """A fresh compile of the grammar: its own lexer (the constructor never raises: a bad
        grammar leaves the matcher in an error state)."""
        return llg.LLMatcher(self.tokenizer, self.grammar, log_level=0, limits=self.limits)


# A regex in one of llguidance's messages, `/.../` (its "Regex is empty: (And (SearchRegex /^...$/) ...)"
# wrote a whole date format's regex, 300 characters, to say `maxLength: 9` leaves no date).
_REGEX_IN_MESSAGE = re.compile(r"/((?:[^/\\\n]|\\.){80,}?)/(?=[) ;,]|$)")


def _short_regexes(message: str) -> str:
    """`message` with each long `/regex/` in it cut to its first 60 characters."""
    return _REGEX_IN_MESSAGE.sub(lambda m: f"/{m.group(1)[:60]}.../", message)


def _error_reason(matcher: llg.LLMatcher) -> str:
    """The matcher's error, without the tag its short errors carry."""
    return matcher.get_error().replace("<non-verbose/>", "").strip()


def _lexer_limit(reason: str) -> bool:
    """Whether an error is a limit of the lexer every copy of a compile shares (its states, its
    regex derivatives), not of this copy's parser (`Too many items (limit 50000; mask)`)."""
    return "too many states" in reason or "too many expressions" in reason


class LLGuidanceGrammar(BaseGrammarObject):
    """One request's `llg.LLMatcher`, a deep copy of the compiled matcher at its start."""

    _executor: llg.LLExecutor | None = None  # one thread pool for all batches
    _executor_lock = threading.Lock()

    def __init__(self, start: llg.LLMatcher, stop_tokens: frozenset[int], shared: _Shared):
        self.start = start  # never advanced: the template for copies
        self.stop_tokens = stop_tokens  # the tokenizer's EOS tokens
        self.matcher = start.deep_copy()
        # Copies share the lexer's regex builder: once one reached a limit, every later copy
        # failed at its first token (a stranger's regex fuzzing), and its states only grow.
        # The grammar cache compiles the grammar again when `is_spent`.
        self.shared = shared
        self.tokens: list[int] = []  # taken so far: replayed on a fresh compile (`_moved_on`)
        self.moved = False  # moved to a fresh compile once already
        # (tokens taken, the row) of this copy's last mask: a refusal of a token it allowed is
        # looked into (`_lexer_limit_refused`), a draft's refusal is not
        self.masked: tuple[int, torch.Tensor] | None = None
        self.seconds = 0.0  # this copy's share of `shared.seconds`: what its own walk built

    def _call(self, work: Callable[[], Any]) -> Any:
        """`work` (a call into llguidance), its seconds charged to the compile."""
        started = time.perf_counter()
        try:
            return work()
        finally:
            seconds = time.perf_counter() - started
            self.shared.seconds += seconds
            self.seconds += seconds

    def accept_token(self, token_id: int) -> None:
        # `consume_token` of a refused token leaves the matcher in an error state that no
        # rollback undoes; a refusal must leave it as it was, as the other backends' do (s7's
        # seam guess feeds drafts and goes on without them when one is refused). But
        # try_consume_tokens counts no EOS: where the grammar may end it stops the matcher (or
        # finds it stopped, only EOS being left) and answers 0.
        limit = ""
        for _ in range(2):  # (twice: once more after `_moved_on`)
            if self._call(lambda: self.matcher.try_consume_tokens([token_id])) == 1:
                self.tokens.append(token_id)
                return
            if token_id in self.stop_tokens and self.matcher.is_stopped() and not self.matcher.is_error():
                return
            limit = limit or self._lexer_limit_refused(token_id)
            if not self._moved_on(refused=True):
                break
        # A token its own mask allowed, refused for a limit the parser reached taking it (an
        # all-required recursive schema, `{"a": {"$ref": "#"}}` required: "Too many items
        # (limit 50000; ff_tokens)"): the grammar's fault, said as such (it was a 500).
        self._refuse_error_state()
        if limit:
            raise GrammarLimitError(f"llguidance's parser reached a limit on this grammar here: {limit}")
        raise GrammarError(f"token {token_id} is not allowed by the grammar here")

    def _lexer_limit_refused(self, token_id: int) -> str:
        """Why llguidance refused `token_id` with no error, if it was its lexer's limit (the
        reason; marks the shared lexer full), else "". A full lexer refuses even a token its
        own mask allowed, and says nothing: a string of `maxLength` 100,000 builds a state a
        character, and at the limit the request ended as the backend's fault ("its mask
        allowed a token its matcher then refused"). A copy taking the token outright says why
        (~0.1 ms: only for a token this copy's own mask allowed, not for s7's refused drafts)."""
        if self.shared.full or self.matcher.is_error() or not self._mask_allowed(token_id):
            return ""
        probe = self.matcher.deep_copy()
        self._call(lambda: probe.consume_token(token_id))
        reason = _error_reason(probe) if probe.is_error() else ""
        if not _lexer_limit(reason):
            return ""
        self.shared.full = True
        return reason

    def rollback(self, k: int) -> None:
        if k == 0:  # nothing undone (llguidance refuses any rollback once in an error state)
            return
        if not self.matcher.rollback(k):
            raise GrammarError(f"cannot roll back {k} tokens: {self.matcher.get_error()}")
        del self.tokens[len(self.tokens) - k :]

    def is_terminated(self) -> bool:
        return self.matcher.is_stopped() and not self.matcher.is_error()

    def copy(self) -> LLGuidanceGrammar:
        return LLGuidanceGrammar(self.start, self.stop_tokens, self.shared)

    def is_spent(self) -> bool:
        return self.shared.spent or self.nbytes() >= SPENT_BYTES

    def nbytes(self) -> int:
        """An estimate (llguidance does not say): what the shared lexer may have grown by."""
        return int(self.shared.seconds * BYTES_PER_SECOND)

    def _moved_on(self, refused: bool = False) -> bool:
        """If the shared lexer reached its limit (another request's walk may have filled it: a
        stranger's soak saw a valid request fail at its third token), move this copy to a fresh
        compile of the grammar, its own, and replay its tokens: True if it could. `refused`: a
        token was refused with no error, which a full lexer does too. Not when this copy's own
        calls took most of the compile's time (its own walk built the lexer), and once per
        copy: a second limit is its own walk's."""
        limit = self.matcher.is_error() and _lexer_limit(self.matcher.get_error())
        if self.moved or not (limit or (refused and self.shared.full)):
            return False
        self.shared.spent = self.shared.full = True
        if self.seconds > self.shared.seconds / 2:
            # Most of the lexer is this copy's own walk's doing: the limit is its own, and a
            # fresh compile would only be filled again (~110-190 MiB that no cache counts).
            return False
        shared = _Shared(self.shared.grammar, self.shared.tokenizer, self.shared.limits, jumps=self.shared.jumps)
        start = shared.new_start()
        matcher = start.deep_copy()
        if matcher.is_error() or matcher.try_consume_tokens(self.tokens) != len(self.tokens):
            return False
        self.start, self.matcher, self.shared, self.moved, self.seconds = start, matcher, shared, True, 0.0
        return True

    # llguidance writes straight into the tensor's memory. (Its llguidance.torch helpers
    # do the same, but importing them pulls in torch.compile: seconds of start-up.)
    def fill_vocab_mask(self, vocab_mask: torch.Tensor, idx: int) -> None:
        _check_mask(vocab_mask)
        for _ in range(2):  # (twice: once more after `_moved_on`)
            self._mask_into(vocab_mask[idx])
            if not self._moved_on():
                break
        self._refuse_error_state()

    def _mask_into(self, row: torch.Tensor) -> None:
        """This matcher's allowed tokens written into `row` [W], charged to the compile."""
        self._call(lambda: self.matcher.unsafe_compute_mask_ptr(row.data_ptr(), row.numel() * row.element_size()))
        self.masked = (len(self.tokens), row)

    def _mask_allowed(self, token_id: int) -> bool:
        """Whether this copy's mask for its current position allowed `token_id`."""
        return self.masked is not None and self.masked[0] == len(self.tokens) and allows(self.masked[1], token_id)

    def _refuse_error_state(self, at_start: bool = False) -> None:
        """A matcher in its error state (an empty language like `[^\\s\\S]` or `root ::= root`,
        or a parser limit reached) still offers EOS; taking it would end the request as a
        "stop" whose text the grammar never accepted. Raise instead: the request is aborted
        (`at_start`: the compile is refused)."""
        if self.matcher.is_error():
            reason = _error_reason(self.matcher)
            # ("Too many items (limit 50000; mask)", "lexer error: too many expressions constructed"
            # (its regex derivatives, e.g. free text with 100 excludes): a resource, not the language)
            if "(limit " in reason or "too many" in reason.lower():
                self.shared.spent = True
                self.shared.full |= _lexer_limit(reason)
                where = "before its first token" if at_start else "here"
                raise GrammarLimitError(f"llguidance's parser reached a limit on this grammar {where}: {reason}")
            where = "at all" if at_start else "from here"
            raise GrammarError(f"the grammar allows no text {where} (llguidance: {reason})")

    @classmethod
    def fill_vocab_mask_batched(cls, entries: list[tuple[LLGuidanceGrammar, int]], vocab_mask: torch.Tensor) -> None:
        """All rows in one call to llguidance's multithreaded executor; each compile is charged
        the call's whole time (its rows ran side by side)."""
        _check_mask(vocab_mask)
        with cls._executor_lock:
            if cls._executor is None:
                cls._executor = llg.LLExecutor()
        batch, words = vocab_mask.shape
        started = time.perf_counter()
        cls._executor.unsafe_compute_mask_ptr(
            [(g.matcher, idx) for g, idx in entries], vocab_mask.data_ptr(), words * vocab_mask.element_size(), batch
        )
        seconds = time.perf_counter() - started
        for shared in {id(g.shared): g.shared for g, _ in entries}.values():
            shared.seconds += seconds
        for g, idx in entries:  # (each copy its share: a slow row is timed alone, see the doc above)
            g.seconds += seconds / len(entries)
            g.masked = (len(g.tokens), vocab_mask[idx])
        for g, idx in entries:  # the scheduler then masks row by row to find whose grammar it was
            if g._moved_on():
                g.fill_vocab_mask(vocab_mask, idx)  # its row again, on its fresh compile
            g._refuse_error_state()

    # -- jump forward: the bytes the grammar forces from here ---------------------------
    def try_jump_forward(self, tokenizer: Tokenizer) -> bytes | None:
        # Trailing spaces stay with the model: byte-level vocabularies glue a space to the
        # next word (" 31"), and a model handed "age": " must write "31" the unusual way.
        if not self.shared.jumps:
            return None
        forced: bytes = self._call(self.matcher.compute_ff_bytes)
        return forced.rstrip(b" ") or None

    def search_was_slow(self) -> None:
        self.shared.jumps = False

    def jump_forward_str_state(self, helper: bytes) -> tuple[bytes, None]:
        # The matcher is not moved here: jump_and_retokenize feeds it the new tokens.
        return helper, None


@register_backend("llguidance")
class LLGuidanceBackend(BaseGrammarBackend):
    kinds = frozenset({"regex", "json_schema", "ebnf", "structural_tag"})

    def __init__(self, tokenizer: Tokenizer, vocab_size: int, **kwargs: Any):
        source = _TokenizerSource(tokenizer, vocab_size)
        longest = max(range(len(source.tokens)), key=lambda i: len(source.tokens[i]), default=0)
        if source.tokens and len(source.tokens[longest]) > LLGUIDANCE_MAX_TOKEN_BYTES:
            # (its token trie asserts, a Rust panic: a BaseException with an assertion's text)
            raise ValueError(
                f"llguidance cannot take this vocabulary: token {longest} is {len(source.tokens[longest]):,} "
                f"bytes long, and its token trie holds tokens of at most {LLGUIDANCE_MAX_TOKEN_BYTES:,} bytes; "
                "use another grammar backend ('fsm')"
            )
        super().__init__(tokenizer, vocab_size, **kwargs)
        # Built once per engine: it walks the whole vocabulary into a token trie.
        self.lltokenizer = llg.LLTokenizer(llg.TokenizerWrapper(source))
        # Short errors: the verbose ones dump the parser state and the whole grammar.
        self.limits = llg.LLParserLimits(verbose_errors=False)

    def compile(self, kind: str, text: str) -> LLGuidanceGrammar:
        if kind == "regex":
            grammar = llg.LLMatcher.grammar_from_regex(portable_regex(text))
        elif kind == "json_schema":
            try:  # llguidance would report the column inside its own wrapper document
                schema = load_schema(text)
            except InvalidSchemaError as e:
                raise GrammarError(str(e)) from e
            grammar = llg.LLMatcher.grammar_from_json_schema(enforced_schema(schema), overrides=JSON_LAYOUT)
        else:
            try:
                grammar = llg.LLMatcher.grammar_from_lark(as_lark(text))
            except RecursionError:  # the converter is recursive Python: say what, not Python's words
                raise GrammarError(
                    "cannot read the grammar: it nests too deeply (hundreds of levels of parentheses or "
                    "rules) for the GBNF reader"
                ) from None
            except Exception as e:  # the GBNF -> Lark converter raises plain exceptions
                raise GrammarError(f"cannot read the grammar: {e}") from e
        return self._matcher(grammar)

    def _matcher(self, grammar: str) -> LLGuidanceGrammar:
        shared = _Shared(grammar, self.lltokenizer, self.limits)
        start = shared.new_start()
        if start.is_error():
            error = start.get_error()
            if "coerce_one_of" in error:  # (an option of llguidance's no client or flag of ours sets)
                error = (
                    "llguidance cannot show the branches of a 'oneOf' disjoint, and does not read it "
                    "as 'anyOf' (\"exactly one\" is not \"any\"): write 'anyOf' if any branch will do, "
                    "or use the 'fsm' backend, which enforces 'oneOf'"
                )
            raise GrammarError(_short_regexes(error))
        compiled = LLGuidanceGrammar(start, frozenset(self.lltokenizer.eos_tokens), shared)
        # A grammar with no text at all (`root ::= root`), or one past a parser limit before
        # its first token, compiles: its first mask finds out. Found here, off the scheduler
        # thread, it is the client's 400 rather than every request's abort at its first step
        # (the lexer states this mask builds serve every copy).
        probe = compiled.copy()  # (moved on below; requests get fresh copies)
        probe._mask_into(probe.allocate_vocab_mask(self.vocab_size, 1)[0])
        # and the forced text a first step jumps over, taken: `root ::= "{" root "}"` allows
        # "{", and only taking it meets its parser's limit, at every request's first step (a
        # stranger's soak)
        forced: bytes = probe._call(probe.matcher.compute_ff_bytes)
        if forced and not probe.matcher.is_error():
            probe._call(lambda: probe.matcher.try_consume_tokens(self.lltokenizer.tokenize_bytes(forced)))
        probe._refuse_error_state(at_start=True)
        return compiled

    def compile_structural_tag(self, spec: StructuralTag) -> LLGuidanceGrammar:
        """The spec as a Lark grammar with llguidance's lazy lexemes (its docs/syntax.md, "tool
        calling"): `trig[lazy]: TEXT "<tool_call>"` ends at the FIRST place the text reaches a
        trigger. Free text before the end of the output is TEXT without any trigger
        (llguidance's regex intersection and negation). JSON as for json_schema requests."""
        refuse_unused_triggers(spec.triggers, [s.begin for s in spec.structures], "llguidance")
        problem = lexer_conflict(spec)
        if problem is not None:
            raise GrammarError(f"llguidance cannot express this structural tag exactly: {problem}")
        # Each schema refused or rewritten as for a json_schema request (they once went unchecked).
        lark = llg.LLMatcher.grammar_from_lark(structural_tag_lark(spec.with_schemas(enforced_schema)))
        try:
            return self._matcher(lark)
        except GrammarError as e:  # (its error quotes our Lark lines, not the tool: a stranger's fuzzer)
            raise self.structure_at_fault(spec, e) from e

    def compile_structural_tag_format(self, spec: StructuralTagFormat) -> LLGuidanceGrammar:
        """A v2 structural tag as ONE Lark lexeme (structural_tag_regex.lark_grammar): the
        fsm backend's regex tree, its JSON parts our compiler's regexes, its free text by
        llguidance's own `& ~`. Its lexer is greedy, so lexemes beside each other could split
        the output otherwise than the format says (`lexer_conflict`); one lexeme is exact.
        What the tree cannot hold (a grammar, token-level formats) is refused by name."""
        from ..constrained.json_schema import build_schema_tree
        from ..constrained.structural_tag_regex import format_regex, lark_grammar

        # automaton="lazy": the fsm backend's tree (any JSON value nested LAZY_ANY_VALUE_NESTING
        # levels deep). The default ("eager", for Python's re) nests one level: a tool whose
        # parameters are {"type": "object"} could not take {"a": {"b": 1}} here, where the
        # fsm backend and xgrammar take it. Its lazy-only nodes (And, Diff, Shared) are
        # lark_grammar's; Members comes only with any_order, which format_regex refuses.
        tree = format_regex(
            spec,
            lambda schema, whitespace: build_schema_tree(schema, whitespace=whitespace, automaton="lazy"),
            backend=self.name,
        )
        return self._matcher(lark_grammar(tree))


# A Lark grammar: a `start` rule, bare or with Lark's `?` (inline) or `!` (keep tokens)
# marker, or llguidance's own header. llguidance's `any_to_lark` looked for `start:` alone,
# so Outlines' grammars (`?start: value`) went to its GBNF reader ("Expected name"), and it
# took a GBNF rule named start (`start ::= "go"`) for Lark.
_LARK_START = re.compile(r"(?m)^[ \t]*(%llguidance\b|[?!]?start[ \t]*:(?!:=))")


def as_lark(text: str) -> str:
    """An `ebnf` text as llguidance's Lark: Lark as it is, GBNF converted."""
    return text if _LARK_START.search(text) else gbnf_to_lark(text)


# What a GBNF character-class item's escape (as llguidance's `_parse_char` returns it) means.
_CLASS_ESCAPES = {"n": 10, "r": 13, "t": 9}


class _GbnfReader(GrammarParser):
    """llguidance's GBNF reader, but a character class is read item by item as GBNF reads
    it (characters, and `a-z` ranges where a `-` is not last) and written with every
    character that is not an ASCII letter or digit as `\\x{HEX}`. llguidance's own reader
    copied the class into a Rust regex as it was, where `&&`, `--` and `~~` are set
    operators: `[^0-9&&a-z]` (not a digit, '&' or a letter) allowed everything, `[^+--]`
    (not '+' to '-') allowed ',' and '-'."""

    def _class_char(self, pos: Position) -> tuple[int, Position]:
        c, pos = self._parse_char(pos)  # a character, or an escape it checked: \\" \\\\ \\[ \\] \\n \\r \\t \\x \\u \\U
        if len(c) == 1:
            return ord(c), pos
        if c[1] in "xuU":
            return int(c[2:] or "0", 16), pos  # (its \\u and \\U drop leading zeros)
        return _CLASS_ESCAPES.get(c[1], ord(c[1])), pos

    def _parse_char_class(self, pos: Position) -> tuple[RegexNode, Position]:
        if pos.current() != "[":
            raise GbnfToLarkError(pos, "Expected '['")
        pos = pos.advance()
        negated = pos.current() == "^"
        pos = pos.advance() if negated else pos
        items = []
        while pos.current() != "]":
            lo, pos = self._class_char(pos)
            hi = lo
            if pos.current() == "-" and pos.peek(2)[1:] != "]":
                hi, pos = self._class_char(pos.advance())
            items.append(_class_item(lo) if lo == hi else f"{_class_item(lo)}-{_class_item(hi)}")
        if negated and not items:  # `[^]`, any character as llama.cpp and xgrammar read it ("invalid regex")
            return RegexNode("(?s:.)"), pos.advance()
        return RegexNode(f"[{'^' if negated else ''}{''.join(items)}]"), pos.advance()

    def _parse_literal(self, pos: Position) -> tuple[ASTNode, Position]:
        """A string as one lexeme per character (see `gbnf_to_lark`), each written as
        `_class_item` writes it: the converter's own escapes dropped `\\u00e9`'s zeros
        ("\\ue9t": refused, "\\u00e9a" read as U+E9A)."""
        if pos.current() != '"':
            raise GbnfToLarkError(pos, "Expected '\"'")
        pos = pos.advance()
        chars: list[ASTNode] = []
        while pos.current() != '"':
            code, pos = self._class_char(pos)
            chars.append(RegexNode(_class_item(code)))
        if not chars:
            return LiteralNode(""), pos.advance()
        return (chars[0] if len(chars) == 1 else SequenceNode(chars)), pos.advance()


def _class_item(code: int) -> str:
    ch = chr(code)
    return ch if ch.isascii() and ch.isalnum() else f"\\x{{{code:x}}}"


class _Rule(ASTNode):
    """A rule's body that llguidance's `resolve` never takes for a terminal (see
    `gbnf_to_lark`); otherwise its body, as it prints and simplifies."""

    def __init__(self, body: ASTNode):
        self.body = body

    def __str__(self) -> str:
        return str(self.body)

    def top_str(self) -> str:
        return self.body.top_str()

    def is_atomic(self) -> bool:
        return self.body.is_atomic()

    def is_terminal(self) -> bool:
        return False

    def simplify(self) -> ASTNode:
        self.body = self.body.simplify()
        return self

    def children(self) -> list[ASTNode]:
        return [self.body]


def _nodes(node: ASTNode) -> Iterator[ASTNode]:
    for child in node.children():
        yield child
        yield from _nodes(child)


def gbnf_to_lark(text: str) -> str:
    """A GBNF grammar as llguidance's Lark, read as llama.cpp and xgrammar read it: its
    converter (llguidance.gbnf_to_lark), with character classes and strings read by
    `_GbnfReader`, `.` as any character (the converter wrote Rust's `.`, which leaves out
    '\\n'), and every lexeme one character. llguidance's lexer takes the longest lexeme
    and never goes back: the converter made a rule of terminals only one lexeme, so
    llama.cpp's arithmetic.gbnf (`ident ::= [a-z] [a-z0-9_]* ws`, `ws ::= [ \\t\\n]*`, each
    line ending `term "\\n"`) swallowed the "\\n" into `ident` and allowed no complete
    output at all; and a string lexeme such as "while" refused the identifier `whx`
    (c.gbnf) once "wh" was read. Lexemes of one character leave every choice to the
    parser (Earley), as in GBNF."""
    rules = _GbnfReader().parse(text)
    fresh = "start"
    if "start" in rules:  # Lark's name for `root`: a GBNF rule named start takes another
        fresh = next(name for name in (f"start_{i}" for i in itertools.count(1)) if name not in rules)
        rules[fresh] = rules.pop("start")
        rules[fresh].name = fresh
    for rule in rules.values():
        for node in _nodes(rule):
            if isinstance(node, RegexNode) and node.rx == ".":
                node.rx = "(?s:.)"
            elif isinstance(node, RuleRefNode) and node.name == "start":
                node.name = fresh
        rule.alternatives = _Rule(rule.alternatives)
    resolve(rules)
    return "%llguidance {}\n\n" + "\n\n".join(str(r) for r in sorted(rules.values(), key=lambda r: r.order)) + "\n"


def enforced_schema(schema: Any) -> Any:
    """The schema llguidance is given: refused if it uses a keyword llguidance gets wrong
    (IGNORED), number bounds as ones it holds exactly, formats rewritten as our checked
    patterns, a boolean schema as an object (llguidance refused `true` with "Expecting object
    schema to apply options")."""
    refuse_ignored_keywords(schema, IGNORED, "llguidance", "llguidance")
    schema = rewrite_subschemas(as_object_schema(schema), SAFE_BOUNDS)
    schema = rewrite_subschemas(schema, format_as_pattern)
    return rewrite_subschemas(schema, _escape_free_extra_keys)


# A JSON number can go on with these; llguidance's lexer is greedy, so an end starting with
# one would be read as more number (other JSON values end with their own delimiter or word).
_NUMBER_GOES_ON = set("0123456789.eE+-")


def lexer_conflict(spec: StructuralTag) -> str | None:
    """Why llguidance's greedy lexer would not read this spec as our semantics do, or None.

    Its lexer takes the longest lexeme, where the semantics (a regular language) may split a
    string several ways: after a trigger, one structure's text must not be a prefix of
    another's ("<f" + "a" vs "<f" + "ab"), and an end must not be read as part of the
    JSON value before it (empty, whitespace, or a character a number goes on with).
    """
    rests: dict[str, list[str]] = {}
    for i, s in enumerate(spec.structures):
        if not s.end or s.end[0].isspace() or s.end[0] in _NUMBER_GOES_ON:
            return (
                f"structures[{i}].end {s.end!r} is empty or starts with whitespace or a number's "
                f"character, which the JSON value before it could swallow"
            )
        rests.setdefault(spec.trigger_of(s), []).append(s.begin[len(spec.trigger_of(s)) :])
    for trigger, texts in rests.items():
        for a in texts:
            for b in texts:
                if a is not b and b.startswith(a):
                    return (
                        f"after trigger {trigger!r} the begin text {a!r} is a prefix of {b!r}; "
                        f"the lexer would take the longer one"
                    )
    return None


def structural_tag_lark(spec: StructuralTag) -> str:
    """The Lark grammar of a StructuralTag (constrained/structural_tag.py semantics)."""

    def json_body(schema: dict[str, Any] | bool) -> str:
        return "%json " + json.dumps({**as_object_schema(schema), "x-guidance": JSON_LAYOUT})

    def strings(*texts: str) -> str:
        return " ".join(json.dumps(t) for t in texts if t)

    triggers = list(spec.triggers)
    lines = [f"trig_{j}[lazy]: TEXT {json.dumps(t)}" for j, t in enumerate(triggers)]
    for k, s in enumerate(spec.structures):
        j = triggers.index(spec.trigger_of(s))
        rest = s.begin[len(triggers[j]) :]
        lines.append(f"tag_{k}: trig_{j} {strings(rest)} {json_body(s.schema)} {strings(s.end)}")
        lines.append(f"first_{k}: {strings(s.begin)} {json_body(s.schema)} {strings(s.end)}")
    tag = " | ".join(f"tag_{k}" for k in range(len(spec.structures)))
    first = " | ".join(f"first_{k}" for k in range(len(spec.structures)))
    start = {
        (False, False): "(tag)* TEXT_END",
        (True, False): "first (tag)* TEXT_END",
        (False, True): "tag | TEXT_END",
        (True, True): "first",
    }[spec.at_least_one, spec.stop_after_first]
    any_trigger = " | ".join(json.dumps(t) for t in triggers)
    return "\n".join(
        [
            f"start: {start}",
            f"tag: {tag}",
            f"first: {first}",
            *lines,
            r"TEXT: /(.|\n)*/",
            f"TEXT_END: TEXT & ~(TEXT ({any_trigger}) TEXT)",
            "",
        ]
    )
