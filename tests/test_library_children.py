"""library_children.plain_regexes: xgrammar's printed grammar with its JSON-string regexes
read as plain regexes and its `\\xHH` escapes as `\\u00HH`, and nothing else changed,
whatever text a pattern, a literal or a class holds (the masks it gives are checked against
the fsm backend's in test_xgrammar_backend)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from minisglang.constrained.library_children import plain_regexes


def _quoted(text: str, closing: str) -> str:
    """`text` as xgrammar prints it between delimiters: a backslash escapes `\\` and `closing`."""
    return text.replace("\\", "\\\\").replace(closing, "\\" + closing)


TRICKY = st.text(alphabet=st.sampled_from(list('"\\[]()=, Regex json_string=true)\n')), max_size=30)


@settings(max_examples=200, deadline=None)
@given(pattern=TRICKY, literal=TRICKY, members=TRICKY)
def test_only_the_regexes_reader_changes(pattern, literal, members):
    head = f'root ::= (("{_quoted(literal, chr(34))}" [{_quoted(members, "]")}] '
    printed = head + f'Regex("{_quoted(pattern, chr(34))}", json_string=true)))\n'
    assert plain_regexes(printed) == head + f'Regex("{_quoted(pattern, chr(34))}")))\n'
    # a printed grammar holding that text only inside a literal or a class is left as it is
    inside = f'root ::= "Regex({_quoted(chr(34) + pattern + chr(34) + ", json_string=true)", chr(34))}" [{_quoted(members, "]")}]\n'
    assert plain_regexes(inside) == inside


def test_a_plain_regex_and_a_grammar_without_one_are_unchanged():
    for text in ['root ::= Regex("^a$")\n', 'root ::= "a" | [^"\\\\]\n', ""]:
        assert plain_regexes(text) == text


def test_a_latin1_hex_escape_is_written_so_that_no_hex_digit_after_it_joins_it():
    """xgrammar prints U+007F-U+00FF as `\\xHH` and reads every hex digit after `\\x` back:
    `"\\xe9a"` is U+0E9A to it. In literals and classes (the regexes too) they become
    `\\u00HH`; an escaped backslash before an `x` stays as it was."""
    printed = 'r ::= "\\xe9a" [\\xe9-\\xff] Regex("[\\xe9]a", json_string=true) "\\\\xe9"'
    assert plain_regexes(printed) == 'r ::= "\\u00e9a" [\\u00e9-\\u00ff] Regex("[\\u00e9]a") "\\\\xe9"'
