"""JSON Schema -> regex: the JSON texts of a schema's valid values, as one regular expression.

`build_schema_tree(schema)` returns the regex as a syntax tree (regex_ast.py), which the lazy
automaton reads directly; `build_regex_from_schema(schema)` renders it as text in the
dialect of `regex_dfa.compile_regex` that means the same in Python's `re` (so `re.fullmatch`
is a second oracle). The regex is
SOUND: every string it matches parses with `json.loads` to a value the schema accepts. It
is not complete: a generator only needs one way to write each value, so some valid JSON
texts (other key orders, other whitespace, `1.0` for an integer) are not matched.

What the matched JSON text looks like:
- Whitespace is allowed only after `{`, `[`, `,`, `:` and before `}`, `]`, and each place
  takes one `whitespace` regex, by default `[ ]?` (at most one space): both
  `json.dumps(x)` and `json.dumps(x, separators=(",", ":"))` match. Free whitespace
  (`[ \\t\\n]*`) lets a model loop on spaces until max_new_tokens (outlines #839,
  vllm #44619), so it is bounded by default and configurable.
- Object members come in the order of the schema's `properties` (option any_order: any
  order), then the keys of `patternProperties` or of a map. For the lazy automaton
  (option automaton="lazy", what our fsm backend asks for by default) any order is one
  `Members` node (regex_ast.py; lazy_regex.py's MEMBERS: the members written so far are the state, so
  its size is linear in the members, and unlisted keys may come anywhere); for a plain
  regex (automaton="eager", this function's default) every order is written out, for
  objects of at most max_any_order_properties members.
- Strings: raw characters except `"`, `\\` and control characters; JSON escapes; every
  non-ASCII character either raw or as `\\uXXXX` (how `json.dumps` writes it by default),
  except in strings with minLength/maxLength: raw characters and short escapes only, so
  that counting stays cheap (see COUNTED_STRING_CHAR).

Policies where the schema allows more than we generate (each one keeps soundness; the
options of SchemaOptions change some of them):
- `additionalProperties` absent: an object with `properties` or `patternProperties` gets
  no other keys (most generation tools do this: extra keys are rarely wanted; option
  extra_properties: unlisted keys after the listed ones); an object without them is a
  free map. `additionalProperties` with a schema or `true` next to `properties` also adds
  no other keys; without `properties` it is a map of that schema.
- Numbers the schema does not bound have at most max_integer_digits (18) integer,
  max_fraction_digits (20) fraction and max_exponent_digits (3) exponent digits, so a
  model cannot write digits until max_new_tokens; one bound makes the other a power of
  ten; fractions are always limited (option bound_numbers=False: no digit limits). The
  seconds of a `time` / `date-time` have at most 9 fraction digits, for the same reason.
  Multiples of a float multipleOf (50.0), and a number's whole multiples that may end in
  ".0", have at most 15 digits: the double a validator divides is then the numeral.
- A number is compared as the double it parses to, as validators do: an exclusive bound (also
  from `not` of a const, enum or bound) becomes the nearest double inside it, inclusive, so
  that no numeral of more digits than a double holds rounds onto it (0.09999999999999999999
  is 0.1); `not integer` writes at most 15 significant digits (1.00000000000000000001 is 1.0).
  A bound that is an integer no double holds (past 2^53) becomes the nearest double inside
  it, for the numerals that parse to doubles (123456789012345677.9 is 123456789012345680.0).
- `format`s we do not know are an error (option unknown_formats="annotation": any string).
  A format with minLength/maxLength is written when every string of it, or of its short
  form (SHORT_FORMATS: e.g. `https://` URIs of at most 143 characters), fits the bounds.
- `prefixItems` without `items`: no items after the prefix (a tuple).
- No `type`: the type comes from the type-specific keywords present (`properties` ->
  object, `minLength` -> string, ...); with none of them, any JSON value.
- Any JSON value (`{}`, `true`, a free map or list) nests at most ANY_VALUE_NESTING levels
  (LAZY_ANY_VALUE_NESTING with automaton="lazy").
- A `$ref` is expanded at most `max_ref_depth` times along one path; deeper, the
  recursive choice is removed (a tree's children list must then be empty).
- Integers are written without fraction or exponent; numbers with bounds without exponent.
- Strings with minLength/maxLength (and `pattern` intersected with them) write
  non-ASCII characters raw.
- `pattern` follows JSON Schema (a search, not a full match: `^...$` pins both ends);
  `\\d`, `\\w`, `\\s`, `.` and negated classes are narrowed to what both ECMA-262 and
  Python's `re` (which `jsonschema` uses) agree on: ASCII for the shorthand classes.

Combinations: allOf is merged into one schema with the meaning of both (properties and
items exactly, min/max bounds, enum intersection, several patterns: intersected by the
lazy automaton); two different values of a keyword we cannot intersect (format, ...) are
an error. anyOf merges each branch with the
sibling keywords. oneOf is accepted only when the branches are provably disjoint (by
type, by const/enum, or by a property both require with disjoint schemas): only then is
"exactly one" the same as "at least one". The other applicators become these, exactly:
- `not`: its negation written with positive keywords (other types, values outside
  const/enum, a required property absent, the opposite bound, a property that fails,
  not anyOf = allOf of nots, a string a pattern does not match: lazy automaton only);
  other forms are an error.
- if/then/else: anyOf [(if and then), (not if and else)] (two disjoint cases).
- dependentRequired/dependentSchemas/dependencies: per property, anyOf [absent, present
  and the rest]. unevaluatedProperties/Items without other applicators: additionalProperties/items.
- contains: the items N* (Y N*){minContains,maxContains} with Y = contains, N = not contains;
  with maxItems, a walk over (items so far, matches so far).
Intersection and difference (automaton="lazy"): regex_ast's `And` and `Diff` nodes (lazy_regex's
AND and DIFF; `(?@and(A)(B))`, `(?@diff(A)(B))` in the lazy dialect's text) make these exact
in every shape: a string's format, pattern,
minLength/maxLength and excluded values together; patternProperties keys split by the
set of patterns they match (minus every writing of the other patterns' keys, never a
listed name), and the keys of additionalProperties (no pattern's). A plain regex
(automaton="eager") has them in restricted shapes only, else an error naming the keyword:
pattern with minLength/maxLength (a pattern of fixed-width parts), patternProperties
(patterns whose keys cannot meet a listed name or each other, no additionalProperties).
Keywords exact in restricted shapes: propertyNames, min/maxProperties, uniqueItems (at most
MAX_UNIQUE_VALUES possible items), multipleOf (listed within bounds, or by last digits),
$ref to any $id/$anchor of the document.

Every keyword or shape we cannot enforce exactly raises UnsupportedSchemaError naming the
keyword and where it is: never a silently weaker grammar. Annotations (title,
description, default, ...) are ignored, and so are unknown keywords, as JSON Schema
itself does.

The package, one job per module (each rule of the compiler is a mixin of `_SchemaCompiler`):
- build.py: `build_schema_tree` and `build_regex_from_schema`, the top-level compile;
  loading.py: `load_schema`; budget.py: the CPU time a compile may take in this process,
  checked (with the compile thread's checkpoint) at every subschema.
- options.py (SchemaOptions, the policies' defaults), keywords.py (the keywords we know),
  errors.py.
- compiler_base.py (one compile's state, size checks, shared definitions), compiler.py
  (one flattened schema by type, anyOf/oneOf, const/enum), refs.py ($ref targets),
  applicators.py ($ref, allOf, not, if/then/else, dependencies flattened), merge.py (allOf).
- The rules of each type: numbers.py, strings.py, arrays.py, objects.py; and what they write
  with: regex_parts.py (regex_ast's tree builders), string_chars.py, formats.py, patterns.py, pattern_length.py,
  values.py.
"""

from minisglang.constrained.json_schema.budget import IN_PROCESS_SECONDS, CpuBudget
from minisglang.constrained.json_schema.build import build_regex_from_schema, build_schema_tree
from minisglang.constrained.json_schema.errors import (
    CompileBudgetError,
    InvalidSchemaError,
    SchemaTooLargeError,
    UnsupportedSchemaError,
)
from minisglang.constrained.json_schema.formats import FORMATS, SHORT_FORMATS
from minisglang.constrained.json_schema.keywords import UNSUPPORTED_KEYWORDS
from minisglang.constrained.json_schema.loading import load_schema, repeated_key, shown_numeral, underflows
from minisglang.constrained.json_schema.options import (
    ANY_VALUE_NESTING,
    DEFAULT_MAX_REGEX_CHARS,
    DEFAULT_WHITESPACE,
    LAZY_ANY_VALUE_NESTING,
    SchemaOptions,
)
from minisglang.constrained.json_schema.string_chars import ALL_CHARACTERS, COUNTED_STRING_CHAR, STRING_CHAR
from minisglang.constrained.json_schema.values import short_value

__all__ = [
    "ALL_CHARACTERS",
    "ANY_VALUE_NESTING",
    "COUNTED_STRING_CHAR",
    "DEFAULT_MAX_REGEX_CHARS",
    "DEFAULT_WHITESPACE",
    "FORMATS",
    "LAZY_ANY_VALUE_NESTING",
    "SHORT_FORMATS",
    "STRING_CHAR",
    "UNSUPPORTED_KEYWORDS",
    "CompileBudgetError",
    "CpuBudget",
    "IN_PROCESS_SECONDS",
    "InvalidSchemaError",
    "SchemaOptions",
    "SchemaTooLargeError",
    "UnsupportedSchemaError",
    "build_regex_from_schema",
    "build_schema_tree",
    "load_schema",
    "repeated_key",
    "short_value",
    "shown_numeral",
    "underflows",
]
