"""How the compiler writes a schema's JSON texts: SchemaOptions and the defaults behind its policies."""

from __future__ import annotations

from dataclasses import dataclass

# One optional space: json.dumps' ", " and ": " and the compact "," and ":" both match,
# and a model cannot loop on whitespace (outlines #839, vllm #44619).
DEFAULT_WHITESPACE = r"[ ]?"


# How deep a free JSON value ({}, true, a list without `items`) may nest: 1 allows a
# list or object of scalars. Each level makes the regex 4x longer (a container writes its
# element pattern twice) and the automaton about 2.5x larger and slower to build.
ANY_VALUE_NESTING = 1
# For the lazy automaton a free value may nest deeper: each level is written once (a
# shared sub-expression, a few hundred characters) and only the states generation reaches
# are built (real objects carry {"labels": {...}}, lists of lists, objects in lists).
LAZY_ANY_VALUE_NESTING = 5
# Numbers without bounds in the schema get these digit limits, so that generation ends
# (a model can write digits until max_new_tokens: "384597965934907183.44247..."). 18
# integer digits always fit an int64; 20 fraction and 3 exponent digits hold every
# double as json.dumps writes it (17 significant digits, up to 3 zeros after the point
# before Python switches to exponent notation, exponents up to 308).
DEFAULT_MAX_INTEGER_DIGITS = 18
DEFAULT_MAX_FRACTION_DIGITS = 20
DEFAULT_MAX_EXPONENT_DIGITS = 3
# any_order writes every permutation of the present members: n! grows fast.
DEFAULT_MAX_ANY_ORDER_PROPERTIES = 4
# The longest regex a schema may compile to. Nested $refs, allOf and anyOf multiply a
# regex (JSON Schema Store's 2.3 KB jsonld.json made 3.3 billion characters and 13.5 GB);
# sizes are checked as the parts are composed, so such a schema fails in milliseconds.
DEFAULT_MAX_REGEX_CHARS = 1_000_000


@dataclass(frozen=True)
class SchemaOptions:
    """How build_regex_from_schema writes the JSON texts of a schema (each field documented).

    - whitespace: the regex allowed at each place JSON allows whitespace (None: `[ ]?`).
    - max_ref_depth: how often one `$ref` is expanded along a path.
    - max_integer_digits, max_fraction_digits, max_exponent_digits: the longest numerals
      written, for numbers the schema does not bound (a minimum and a maximum bound the
      integer digits; the fraction is always limited).
    - bound_numbers: apply those digit limits (off: JSON's own number grammar, any number
      of digits, as before issue 17; a model may then write digits until max_new_tokens;
      fractions next to a bound stay limited).
    - any_order: object members in any order, not only the schema's. With
      automaton="eager" an object may have at most max_any_order_properties members (more
      is an error: the alternatives grow as n!); with "lazy" any number (one
      `(?@members...)` group), and unlisted keys (extra_properties, patternProperties) may
      come between the listed ones.
    - extra_properties: an object with `properties` and no `additionalProperties` also
      takes unlisted keys with any value (JSON Schema's own meaning; off: no extra keys,
      as xgrammar's strict mode).
    - unknown_formats: "error" (a format we cannot check is refused, naming it) or
      "annotation" (JSON Schema's default meaning: an unknown format does not constrain,
      the string is any string).
    - max_regex_chars: the longest regex allowed; a longer one is refused
      (SchemaTooLargeError naming the schema part) before it is built.
    - automaton: which automaton reads the regex. "eager" (the default here): plain
      Python syntax, for s1-s4's DFA and for `re.fullmatch`; "lazy": the tree may also hold
      the nodes only the lazy automaton reads (our fsm backend passes its own automaton):
      `Members`, `And`/`Diff` (intersection, difference), and `Shared`: a subschema's regex
      of SHARE_MIN_CHARS or more is written once (`(?@def:NAME(R))`/`(?@ref:NAME)` in the
      lazy dialect's text), so the text grows with the schema, not with its nesting.
    """

    whitespace: str | None = None
    max_ref_depth: int = 5
    max_integer_digits: int = DEFAULT_MAX_INTEGER_DIGITS
    max_fraction_digits: int = DEFAULT_MAX_FRACTION_DIGITS
    max_exponent_digits: int = DEFAULT_MAX_EXPONENT_DIGITS
    bound_numbers: bool = True
    any_order: bool = False
    max_any_order_properties: int = DEFAULT_MAX_ANY_ORDER_PROPERTIES
    extra_properties: bool = False
    unknown_formats: str = "error"
    max_regex_chars: int = DEFAULT_MAX_REGEX_CHARS
    automaton: str = "eager"

    def __post_init__(self) -> None:
        for name in (
            "max_ref_depth",
            "max_integer_digits",
            "max_fraction_digits",
            "max_exponent_digits",
            "max_any_order_properties",
            "max_regex_chars",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < (0 if name == "max_ref_depth" else 1):
                raise ValueError(f"option {name} must be a positive integer, got {value!r}")
        for name in ("bound_numbers", "any_order", "extra_properties"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"option {name} must be true or false, got {getattr(self, name)!r}")
        if self.unknown_formats not in ("error", "annotation"):
            raise ValueError(f"option unknown_formats must be 'error' or 'annotation', got {self.unknown_formats!r}")
        if self.automaton not in ("eager", "lazy"):
            raise ValueError(f"option automaton must be 'eager' or 'lazy', got {self.automaton!r}")
