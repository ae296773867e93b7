"""The state of one compile and what every rule uses: the entry point `value`, size checks,
shared definitions (automaton="lazy") and the matchers that test a value against a regex."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, cast

from minisglang.constrained.json_schema.budget import CpuBudget, tick
from minisglang.constrained.json_schema.errors import SchemaTooLargeError, UnsupportedSchemaError
from minisglang.constrained.json_schema.keywords import ANNOTATION_KEYWORDS
from minisglang.constrained.json_schema.options import ANY_VALUE_NESTING, LAZY_ANY_VALUE_NESTING, SchemaOptions
from minisglang.constrained.json_schema.refs import ROOT_URI, _ResourceIndex
from minisglang.constrained.json_schema.regex_parts import Regex, _alt, _concat, lit
from minisglang.constrained.json_schema.string_chars import STRING, _json_char, _string_except
from minisglang.constrained.lazy_byte_dfa import LazyByteDFA
from minisglang.constrained.lazy_regex import EMPTY, RegexNode, RegexPool
from minisglang.constrained.regex_ast import And, Shared, difference, lower, shared_in_order
from minisglang.constrained.regex_dfa import RegexError

# A subschema's regex at least this long is written once and referred to (automaton="lazy").
SHARE_MIN_CHARS = 64

# A subschema compiled (see `_value_key`): a `$ref`'s target pointer and the base URI at the
# $ref, or any other subschema's id() and "".
RefKey = tuple[str | int, str]
# The $refs whose expansion depths a compile of a target read (sorted), and those depths.
RefDepths = tuple[tuple[str, ...], tuple[int, ...]]
_NOT_COMPILED = object()  # (a regex may be None: no value)


def _declares_draft_up_to_7(root: object) -> bool:
    """Whether the root schema's `$schema` names draft 3, 4, 6 or 7 (json-schema.org/draft-07/schema#)."""
    uri = root.get("$schema") if isinstance(root, dict) else None
    return isinstance(uri, str) and re.search(r"draft-0[3467]\b", uri) is not None


class _CompilerBase(_ResourceIndex):
    """One compile's state and the operations the rules share (each rule's module adds a mixin)."""

    if TYPE_CHECKING:  # what the other rules' mixins add, for the rules that call each other

        def flatten(
            self, schema: object, path: str, cut_deep_refs: bool = True
        ) -> tuple[dict[str, Any] | bool, list[str]]: ...
        def _flatten(
            self, schema: object, path: str, refs: list[str], chain: frozenset[str], cut: bool
        ) -> dict[str, Any] | bool: ...
        def negation(self, flat: dict[str, Any] | bool, path: str) -> dict[str, Any] | bool: ...
        def _flat_value(self, schema: dict[str, Any] | bool, path: str) -> Regex | None: ...
        def _any_value(self, nesting: int) -> Regex: ...

    def __init__(self, root: dict[str, Any] | bool, ws: Regex, options: SchemaOptions, budget: CpuBudget | None = None):
        self.root = root
        self.budget = budget  # CPU time this compile may take (None: no limit), checked at each `value`
        self.ws = ws  # the whitespace regex: after `{`, `[`, `,`, `:` and before `}`, `]`
        self.sep = _concat(lit(","), ws)  # between two members or elements
        self.options = options
        self.max_ref_depth = options.max_ref_depth
        # Up to draft 7 a $ref replaces the keywords beside it (draft-07 section 8.3: "All other
        # properties in a $ref object MUST be ignored"); from 2019-09 on they apply with it.
        self.ref_replaces_siblings = _declares_draft_up_to_7(root)
        self.active_refs: Counter[str] = Counter()  # $ref target -> expansions on the current path
        self.any_values: dict[int, Regex] = {}
        self.empty_because: str | None = None  # see note_empty
        # (path, flattened schema) of the innermost parts with no value, while their parents
        # have none either: why a schema with no value has none (see `value`).
        self.empty_parts: list[tuple[str, dict[str, Any] | bool]] = []
        self.nesting = LAZY_ANY_VALUE_NESTING if options.automaton == "lazy" else ANY_VALUE_NESTING
        # automaton="lazy": shared sub-expressions, each once (see `shared`), and their total
        # length (checked against max_regex_chars as they are made).
        self.definitions: dict[Regex, Shared] = {}
        self.definitions_chars = 0
        # The regex of each `$ref` compiled so far (see `value`): a target used many times, or
        # by every level of a recursion, is compiled once per depth of the $refs it reads.
        self.ref_values: dict[RefKey, dict[tuple[str, ...], dict[tuple[int, ...], Regex | None]]] = {}
        # One set per $ref being compiled, innermost last: the $refs whose depth it read.
        self.depths_read: list[set[str]] = []
        self.ref_targets: dict[tuple[str, str], str] = {}  # (base URI, $ref) -> the target's pointer
        self.kept: list[object] = []  # the subschemas keyed by id() in ref_values (their ids stay theirs)
        self.matchers: dict[Regex, Callable[[str], bool]] = {}  # regex -> its `_matcher`
        # The nodes the lazy automaton reads, for the checks (`matches`, `language_empty`):
        # one pool per compile, so a sub-expression two checks share is made once.
        self.pool = RegexPool()
        # Schema resources: absolute URI ($id) -> its pointer; (URI, $anchor) -> pointer.
        self.resources: dict[str, str] = {}
        self.anchors: dict[tuple[str, str], str] = {}
        self.places: dict[str, tuple[object, str]] = {}
        self.targets: dict[tuple[str, str], tuple[object, str]] = {}
        self.resources[ROOT_URI] = "#"
        self.one_base = True
        self._index(root, ROOT_URI, "#")

    # -- entry point ------------------------------------------------------------------
    def value(self, schema: object, path: str) -> Regex | None:
        """The regex of the JSON texts of the values `schema` accepts; None if there are none."""
        tick(self.budget, path)  # (a compile thread yields to the scheduler here: the compiler's checkpoint)
        key = self._value_key(schema, path)
        if key is not None:
            done = self._compiled_ref(key)
            # (a subschema's None is compiled again: where it is empty goes into the error message)
            if done is not _NOT_COMPILED and (done is not None or isinstance(key[0], str)):
                return cast("Regex | None", done)
            self.depths_read.append(set())
        try:
            flat, refs = self.flatten(schema, path)
            mark = len(self.empty_parts)
            if refs:
                with self.expanding(refs):
                    regex = self._flat_value(flat, path)
            else:  # (most subschemas: no context manager to enter)
                regex = self._flat_value(flat, path)
        finally:
            read = self.depths_read.pop() if key is not None else set()
        if regex is not None:
            del self.empty_parts[mark:]  # its empty parts were optional or alternatives: not why
        elif len(self.empty_parts) == mark:
            self.empty_parts.append((path, flat))  # empty, and no part of it is: the cause is here
        self.check_size(0 if regex is None else regex.size, path)
        regex = self.shared(regex)
        self.check_size(self.definitions_chars, path)
        if key is not None:
            names = tuple(sorted(read))
            depths = tuple(self.active_refs[r] for r in names)  # (as they were when it began)
            self.ref_values.setdefault(key, {}).setdefault(names, {})[depths] = regex
            if isinstance(key[0], int):
                self.kept.append(schema)
            self._note_read(names)
        return regex

    def _compiled_ref(self, key: RefKey) -> object:
        """The regex of the $ref `key` compiled before where each $ref it read has the depth it
        has now (the caller then depends on those depths too); else _NOT_COMPILED."""
        for names, by_depths in self.ref_values.get(key, {}).items():
            regex = by_depths.get(tuple(self.active_refs[r] for r in names), _NOT_COMPILED)
            if regex is not _NOT_COMPILED:
                self._note_read(names)
                return regex
        return _NOT_COMPILED

    def ref_depth(self, target: str) -> int:
        """How often the $ref target `target` is being expanded on the current path, noted
        as read by the $ref compiled now (the max_ref_depth cut reads it)."""
        self._note_read((target,))
        return self.active_refs[target]

    def _note_read(self, names: Iterable[str]) -> None:
        if self.depths_read:
            self.depths_read[-1].update(names)

    def _value_key(self, schema: object, path: str) -> RefKey | None:
        """The key `value` keeps the regex of `schema` under: for a schema that is a `$ref`
        and nothing else (annotations aside), its target and the base URI at `path` (the
        target's own relative $refs are resolved against it); for any other object schema in
        a document whose base URI is the same everywhere (no `$id` below the root), the
        schema object itself (its id()): a definition inside a recursion (an inline property,
        an anyOf) is met once per level, and compiles the same at every level unless it
        reads a depth. None for other schemas.

        Its regex also depends on how often some $refs are being expanded on the way here
        (the max_ref_depth cut), but only on those its compile reads (`ref_depth`): `value`
        keeps the regex of each target under the depths its compile read. Without this,
        each use of a $ref compiled its target again: 500 properties referring to a
        2,000-value enum took 6 s, and a recursion compiled its target once per path, not
        once per depth: 3 object definitions that refer to each other (a 429-character
        schema) ran for minutes at max_ref_depth 5 on the lazy automaton, whose shared
        regex never grew past max_regex_chars to stop it. Keyed by every $ref's depth, a
        definition used inside a recursion (a SARIF `stack` inside each nested `exception`)
        was compiled once per depth of that recursion, which it never reads."""
        if not isinstance(schema, dict):
            return None
        siblings = () if self.ref_replaces_siblings else schema
        if "$ref" not in schema or any(k != "$ref" and k not in ANNOTATION_KEYWORDS for k in siblings):
            return (id(schema), "") if self.one_base else None
        base, ref = self.base_uri(path), schema["$ref"]
        target_path = self.ref_targets.get((base, ref)) if isinstance(ref, str) else None
        if target_path is None:
            target_path = self.resolve(ref, path)[1]
            self.ref_targets[base, ref] = target_path
        return target_path, base

    def shared(self, regex: Regex | None) -> Regex | None:
        """For the lazy automaton, a subschema's long regex is marked to be written once: a
        `Shared` node (regex_ast.py), whose text is `(?@ref:NAME)` where it is used and
        `(?@def:NAME(regex))` in front of the whole.

        Without, an array writes its item's regex twice (`[I(,I)*]`) and an object a member
        in several alternatives, so nested arrays and objects grow the text exponentially
        (a 10 MB regex for a 40 KB Kubernetes schema); shared, the text grows with the
        schema. A plain regex (automaton="eager") has no such syntax: it stays written out.
        """
        if (
            regex is None
            or self.options.automaton != "lazy"
            or regex.size < SHARE_MIN_CHARS
            or isinstance(regex, Shared)
        ):
            return regex
        node = self.definitions.get(regex)
        if node is None:
            node = self.definitions[regex] = Shared(regex)
            self.definitions_chars += regex.size
        return node

    def adopt(self, regex: Regex) -> bool:
        """Take a tree an earlier compile made as if this compile had made it: its Shared
        nodes become this compile's definitions (counted against max_regex_chars as `shared`
        counts them). False, with nothing taken, when this compile already has an equal
        definition of its own (two nodes of one definition would write it twice)."""
        nodes = shared_in_order(regex)
        if any(self.definitions.get(s.body, s) is not s for s in nodes):
            return False
        for s in nodes:
            if s.body not in self.definitions:
                self.definitions[s.body] = s
                self.definitions_chars += s.body.size
        return True

    def key_except(self, names: list[str]) -> Regex:
        """A JSON string that decodes to none of `names` (an unlisted key). For the lazy
        automaton any string minus every JSON writing of each name (a `Diff` node: its size
        is the names'), else _string_except's trie (a few hundred characters per name)."""
        if self.options.automaton != "lazy":
            return _string_except(names)
        writings = _alt([_concat(lit('"'), *(_json_char(c, every=True) for c in name), lit('"')) for name in names])
        out = self.shared(difference(STRING, writings))
        assert out is not None
        return out

    def matches(self, regex: Regex, text: str) -> bool:
        """Whether `text` matches all of one of this compiler's regexes (its automaton is
        built once per regex: an enum checks every value against the same one)."""
        matcher = self.matchers.get(regex)
        if matcher is None:
            dfa = LazyByteDFA(self.lowered(regex, "the schema"), self.pool)
            matcher = self.matchers[regex] = lambda t: dfa.matches(t.encode("utf-8"))
        return matcher(text)

    def lowered(self, regex: Regex, path: str) -> RegexNode:
        """`regex` in the lazy automaton's nodes (this compile's pool)."""
        try:
            return lower(regex, self.pool)
        except RegexError as e:
            raise UnsupportedSchemaError(f"the schema at {path}: the intersection cannot be built: {e}") from None

    def intersection(self, parts: list[Regex | None], path: str) -> Regex | None:
        """The texts every part matches (lazy automaton only: `And` nodes); None
        when there is none, decided on the lazy automaton (so no branch hides an empty
        language). Parts are whole regexes, a None part matches nothing."""
        regexes = [part for part in parts if part is not None]
        if len(regexes) < len(parts):  # a part matches nothing
            return None
        regex = regexes[0]
        for part in regexes[1:]:
            regex = And(regex, part)
        return regex if len(regexes) == 1 or not self.language_empty(regex, path) else None

    def language_empty(self, regex: Regex, path: str) -> bool:
        """Whether one of our regexes (intersections and differences included) matches nothing."""
        return self.lowered(regex, path).kind == EMPTY

    def check_size(self, chars: int, path: str) -> None:
        """Refuse a regex (or the parts of one collected so far) longer than max_regex_chars.

        Called on every subschema's regex and on the running total where several are put
        together, so that a blow-up stops at the first part over the limit: its size is
        then at most a few times the limit, never the product of every level.
        """
        limit = self.options.max_regex_chars
        if chars > limit:
            raise SchemaTooLargeError(
                f"the schema at {path} needs a regex of more than max_regex_chars={limit:,} characters "
                f"({chars:,} so far): its parts are repeated (nested $ref, allOf, anyOf, many optional "
                "properties); simplify the schema, lower max_ref_depth, or raise max_regex_chars"
            )

    @contextmanager
    def expanding(self, refs: list[str]) -> Iterator[None]:
        self.active_refs.update(refs)
        try:
            yield
        finally:
            self.active_refs.subtract(refs)

    def note_empty(self, reason: str) -> None:
        """Remember why a part has no values we write although the schema gives it some (a
        policy of ours, not the schema's meaning): an error for a schema with no values names it."""
        if self.empty_because is None:
            self.empty_because = reason
