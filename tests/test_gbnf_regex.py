"""A GBNF grammar as a regex (constrained/gbnf_regex.py): the regex against xgrammar's own
reading of the same grammar on every short string, and the grammars it refuses by name."""

from __future__ import annotations

import functools
import itertools

import pytest
import xgrammar as xgr

from minisglang.backends.xgrammar_backend import gbnf_for_xgrammar
from minisglang.constrained.gbnf_regex import GrammarNotRegular, gbnf_regex
from minisglang.constrained.lazy_byte_dfa import LazyByteDFA
from minisglang.constrained.lazy_regex import RegexPool
from minisglang.constrained.regex_ast import lower


@functools.cache
def _compiler():
    vocab = [bytes([b]) for b in range(256)] + [b""]
    info = xgr.TokenizerInfo(vocab, xgr.VocabType.RAW, vocab_size=257, stop_token_ids=[256])
    return xgr.GrammarCompiler(info, cache_enabled=False)


def xgrammar_accepts(grammar: str):
    compiled = _compiler().compile_grammar(gbnf_for_xgrammar(grammar))  # (llama.cpp's `.`, as the backend does)

    def accepts(text: str) -> bool:
        m = xgr.GrammarMatcher(compiled, terminate_without_stop_token=False)
        return m.accept_string(text.encode()) and m.accept_token(256)

    return accepts


def ours(grammar: str):
    pool = RegexPool()
    dfa = LazyByteDFA(lower(gbnf_regex(grammar), pool), pool)
    return lambda text: dfa.matches(text.encode())


GRAMMARS = [
    'root ::= "yes" | "no"',
    'root ::= item ("," item)*\nitem ::= [a-b]+ | "(" [^a-b(),]? ")"',
    'root ::= x{2} y{1,} x{0,1}  # counts\nx ::= "a" | ""\ny ::= [\\x62]',
    'root ::= ( "a" | "b" "a"? )* "\\u0028"',
    'root ::= .? "b"\n\n# a comment\n',
    'root ::= pair pair\npair ::= "a" "b"?',
    'root ::= [^ab] | "\\\\" | "\\""',
    'root ::= "a" * ("b" | "(") +\t"," {1,2}',  # (a quantifier after a space: refused as "unexpected '*'")
]


@pytest.mark.parametrize("grammar", GRAMMARS)
def test_a_regular_grammar_reads_as_xgrammar_reads_it(grammar):
    mine, theirs = ours(grammar), xgrammar_accepts(grammar)
    for n in range(6):
        for chars in itertools.product('ab(),\\"', repeat=n):
            text = "".join(chars)
            assert mine(text) == theirs(text), text


@pytest.mark.parametrize(
    "grammar, message",
    [
        ('root ::= "(" root ")" | ""', r"rule 'root' refers to itself \(root -> root\)"),
        ('root ::= a\na ::= "x" b\nb ::= a | "y"', r"rule 'a' refers to itself \(a -> b -> a\)"),
        ('start ::= "x"', "no rule named root"),
        ("root ::= x", "rule 'x' is used but not defined"),
        ('root ::= "x"\nroot ::= "y"', "rule 'root' is defined twice"),
        ('root ::= "x', "a string with no closing quote"),
        ("root ::= [a-", "the grammar ends inside a string or a class"),
        ("root ::= [a", "a class with no closing"),
        ('root ::= ("x"', r"a `\(` with no `\)`"),
        ('root ::= "x")', r"a `\)` with no `\(`"),
        ('root ::= "x"{3,1}', "backwards"),
        ('root ::= "x"{5000}', "past 1000"),
        ('root ::= (= "x") "x"', "lookahead"),
        ("root ::= [\\d]", r"the escape \\d is not one this reader takes"),
        ("start: /x/", "expected a rule"),
        ("root ::= [z-a]", "backwards"),
        ('root ::= "x"\n  ::= "y"', "unexpected ':' \\(line 2\\)"),
    ],
)
def test_what_is_not_a_regular_gbnf_grammar_is_refused_by_name(grammar, message):
    with pytest.raises(GrammarNotRegular, match=message):
        gbnf_regex(grammar)


@pytest.mark.parametrize(
    "grammar, malformed",
    [
        ('root ::= "x', True),
        ('start ::= "x"', True),
        ("root ::= x", True),
        ('root ::= "x"{3,1}', True),
        ('root ::= "(" root ")" | ""', False),
        ('root ::= "x"{5000}', False),
        ('root ::= (= "x") "x"', False),
        ("root ::= [\\d]", False),
    ],
)
def test_a_refusal_says_whether_the_text_is_gbnf_at_all(grammar, malformed):
    """The fsm backend suggested xgrammar or llguidance for every refusal, a string left open
    or a missing root rule too, which no backend serves: `malformed` tells those apart."""
    with pytest.raises(GrammarNotRegular) as refused:
        gbnf_regex(grammar)
    assert refused.value.malformed == malformed
