"""The outlines backend (backends/outlines_backend.py over outlines-core 0.2.x): the adapter
refuses a regex where outlines-core's index leaves out text the regex allows (`drops_moves`),
and its index is built in a kept child, stopped at compile_timeout and counted in bytes. What
every backend shares is in test_backends.py; the helpers in grammar_backends.py.
"""

import json
import multiprocessing
import re
import sys
from pathlib import Path

import pytest
from grammar_backends import DROPS_MOVES, PAD, _byte_token, accepts, backends_fixture, compiled, drops_moves

from minisglang.backends.base import InvalidGrammarObject, get_backend_class
from minisglang.backends.outlines_backend import OutlinesGrammar
from minisglang.constrained import child_process
from minisglang.constrained.python_regex import portable_regex

backends = backends_fixture("outlines")


# ----------------------------------------------------- an index narrower than the regex
def test_outlines_core_drops_moves_out_of_an_accepting_state_and_the_adapter_refuses(backends, tokenizer):
    """Why MASK_CASES marks some regexes inexact for outlines (outlines-core 0.2.x): its own
    index has no move from an accepting state into a non-accepting one, so the adapter
    refuses the regex by name instead of serving a narrower language (a stranger's fuzzing
    found 323 of 1,084 regexes so; it had been served as a subset)."""
    from outlines_core import Guide, Index

    regex = r"[a-z ]*x"
    guide = Guide(Index(regex, backends["outlines"].vocabulary))
    for t in tokenizer.encode("x"):
        guide.advance(t, return_tokens=False)
    assert tokenizer.encode("a")[0] not in guide.get_tokens()  # "xa..." is a valid prefix
    grammar = compiled(backends["outlines"], "regex", regex)
    assert isinstance(grammar, InvalidGrammarObject) and DROPS_MOVES in grammar.message
    # (the check meets it first at the start: no token `xt`, which passes through the match `x`)
    assert "after '' it allows no 'xt'" in grammar.message and "'fsm' backend" in grammar.message
    for fine in [r"[0-9]{4}-[0-9]{2}", r'\{"a": [0-9]+\}', r"[a-z]+@[a-z]+\.(com|org)"]:
        assert not drops_moves(backends["outlines"], fine), fine


@pytest.mark.parametrize(
    ("regex", "after", "left_out", "rest"),
    [
        (r"\wß{2,}", "aßß", b"\xc3", b"\x9f"),  # a match that may go on: found past 10,000 moves
        (r"\w+", "903", b"\xc3", b"\xa9"),  # no character of two bytes after a match (903é)
        (r"[^a]+x", "", b"text", b"x"),  # a token that passes through a match (tex) and on
        (r"[^|\-😀]*Ωy{3}", "Ωyy", b"ys", "Ωyyy".encode()),  # the same, from a state that does not match
    ],
)
def test_outlines_is_refused_where_its_index_leaves_out_text_the_regex_allows(
    backends, tokenizer, regex, after, left_out, rest
):
    """outlines-core 0.2.14's index offers fewer tokens than these regexes allow (a stranger's
    fuzzing: `\\wß{2,}` stops after two `ß`): after `after` it has no move on the token
    `left_out`, though `re.fullmatch` takes `after + left_out + rest`. The adapter's check
    compares every state it reaches with ours (it compared only matching states, within a
    budget a wide class used up) and refuses the regex by name."""
    from outlines_core import Index

    assert re.fullmatch(regex, (after.encode() + left_out + rest).decode())
    token = _byte_token(tokenizer, left_out[0]) if len(left_out) == 1 else tokenizer.encode(left_out.decode())[0]
    assert tokenizer.token_bytes[token] == left_out
    index = Index(portable_regex(regex), backends["outlines"].vocabulary)
    state = index.get_initial_state()
    for t in tokenizer.encode(after):
        state = index.get_next_state(state, t)
    assert state is not None and index.get_next_state(state, token) is None
    grammar = compiled(backends["outlines"], "regex", regex)
    assert isinstance(grammar, InvalidGrammarObject) and DROPS_MOVES in grammar.message, grammar
    assert "'fsm' backend" in grammar.message
    # (a byte of a character is named as one: "after '' it allows no b'\xc2'" said nothing to a stranger)
    assert ("part of a character" in grammar.message) == (len(left_out) == 1 and left_out[0] >= 0x80), grammar


# ------------------------------------------------------------ its index in a kept child
def test_an_outlines_index_past_compile_timeout_is_stopped_and_frees_its_thread(tokenizer):
    """outlines-core's DFA of this 25-character regex takes ~30 s to build (exponential in the
    bounds): its child is killed at compile_timeout, the request gets an error that says so,
    no process is left computing, and the next grammar compiles (the thread is free)."""

    def kept_children() -> set[int | None]:  # (the module's backends keep theirs)
        return {p.pid for p in multiprocessing.active_children() if p.name == child_process.CHILD_NAME}

    before = kept_children()
    backend = get_backend_class("outlines")(tokenizer, tokenizer.vocab_size + PAD, compile_timeout=0.5, threads=1)
    try:
        started = kept_children() - before  # (the child started with the backend computes the index)
        g = compiled(backend, "regex", "[a-z]{1,300}x[a-z]{1,300}")
        assert isinstance(g, InvalidGrammarObject)
        assert "outlines-core's index of regex '[a-z]{1,300}x[a-z]{1,300}' took longer than 0.5 s" in g.message
        (replacement,) = kept_children() - before  # the one computing was stopped; an idle one waits
        assert replacement not in started, "the child computing the index was stopped"
        assert not backend.is_cached("regex", "[a-z]{1,300}x[a-z]{1,300}"), "a timeout may be load: never cached"
        assert isinstance(compiled(backend, "regex", "x[a-z]{1,3}"), OutlinesGrammar)
    finally:
        backend.shutdown()
    assert kept_children() <= before


def test_an_outlines_index_counts_its_bytes_and_one_bigger_than_the_cache_is_refused(tokenizer):
    """outlines-core's grammars told the byte-bounded cache 0 (a stranger's 330 MB indexes grew
    the server to 6 GB): an index counts its pickled size, and one over the cache's whole
    budget is refused by name, before it is read back."""
    backend = get_backend_class("outlines")(tokenizer, tokenizer.vocab_size + PAD, max_bytes=200_000, threads=1)
    try:
        small = compiled(backend, "regex", "x[a-z]{1,3}")
        assert isinstance(small, OutlinesGrammar) and 0 < small.nbytes() < 200_000
        big = compiled(backend, "regex", "[a-z]{1,60}x")
        assert isinstance(big, InvalidGrammarObject)
        assert "more than the whole grammar cache may hold" in big.message and "grammar_cache_bytes" in big.message
    finally:
        backend.shutdown()


# ------------------------------------------------------------------ a schema's regex
def optional_levels(n: int, levels: int = 4) -> dict:
    """A stranger's schema (bench_server_stalls.py's class optional_refs): objects of n
    optional properties, each level a `$ref` to the next; outlines-core's regex of it grows
    like n^levels (n=16: 90 million characters from 2.4 KB; n=28 ended the server)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # (its _results import)
    from bench_server_stalls import optional_refs

    return optional_refs(n, levels)


def test_a_schemas_regex_is_written_in_the_child_and_refused_past_max_regex_chars(backends, monkeypatch):
    """outlines-core wrote a schema's regex on the compile thread, in the server's process,
    with no bound: seconds of GIL for 300 million characters, and a 3.8 KB schema ended the
    server. It is written in the kept child now, and one longer than max_regex_chars is
    refused by its length; the server process never calls the writer."""
    import outlines_core.json_schema

    monkeypatch.setattr(outlines_core.json_schema, "build_regex_from_schema", lambda *a: pytest.fail("written here"))
    g = compiled(backends["outlines"], "json_schema", json.dumps(optional_levels(10)))
    assert isinstance(g, InvalidGrammarObject)
    assert re.search(
        r"outlines-core's regex of this JSON schema of [\d,]+ characters is longer than the limit of 100,000 \(option max_regex_chars\)",
        g.message,
    ), g.message
    fine = compiled(backends["outlines"], "json_schema", json.dumps(optional_levels(2, levels=2)))
    assert not isinstance(fine, InvalidGrammarObject), fine.message


def test_a_schemas_regex_past_compile_timeout_is_a_timeout_never_cached(tokenizer):
    """The child writing a schema's regex is stopped at compile_timeout, and the error stays a
    CompileTimeout (the cache keeps no timeout: it may be the machine's load), not a
    GrammarError about the schema."""
    from minisglang.constrained.compile_service import CompileTimeout

    backend = get_backend_class("outlines")(tokenizer, tokenizer.vocab_size + PAD, compile_timeout=0.2)
    try:
        with pytest.raises(CompileTimeout, match="outlines-core's regex of the JSON schema took longer than 0.2 s"):
            backend.compile("json_schema", json.dumps(optional_levels(20)))
    finally:
        backend.shutdown()


def test_a_ref_chain_deeper_than_outlines_cores_default_is_followed_to_its_end(backends, tokenizer):
    """outlines-core follows `$ref`s 3 deep by default and writes `{}` below: four required
    levels came out as three, `{"a": {"a": {"a": {}}}}`, which the schema rejects. The
    adapter refuses recursive `$ref`s, so it can ask for every chain's whole depth."""
    defs: dict = {"L4": {"type": "integer"}}
    for level in range(3, -1, -1):
        defs[f"L{level}"] = {
            "type": "object",
            "properties": {"a": {"$ref": f"#/$defs/L{level + 1}"}},
            "required": ["a"],
        }
    schema = json.dumps({"$defs": defs, "$ref": "#/$defs/L0"})
    assert accepts(backends["outlines"], tokenizer, schema, '{"a": {"a": {"a": {"a": 7}}}}', "json_schema")
    assert not accepts(backends["outlines"], tokenizer, schema, '{"a": {"a": {"a": {}}}}', "json_schema")
