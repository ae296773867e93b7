"""Exercise tests for stage s4 (jump-forward): brute-force oracles for the map and the walk,
the tokenizer itself for retokenize, the radix tree for jump-and-readmit.

tests/test_stage_s4.py checks the same tasks through whole generations.
"""

from __future__ import annotations

import itertools
import re
import unicodedata

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from token_names import token_list

import minisglang
import minisglang as sgl
from minisglang.constrained.jump_forward import JumpForwardMap
from minisglang.constrained.regex_dfa import ByteDFA, compile_regex
from minisglang.core import Req, SamplingParams
from minisglang.scheduler import Scheduler
from minisglang.stages.base import StageContext
from minisglang.stages.s4_jump_forward import JumpForward, JumpForwardStage
from minisglang.tokenizer import IncrementalDetokenizer, Tokenizer

# ----------------------------------------------------------------- task4_1 + task4_2
# Regex pieces with finite languages, so every accepted string can be listed.
FINITE = {
    "ab": ["ab"],
    "(a|b)": ["a", "b"],
    "c?": ["", "c"],
    "中文": ["中文"],
    "(编程|摄影)": ["编程", "摄影"],
    "(中|丰)": ["中", "丰"],
    "🎉": ["🎉"],
    "(x|y)z": ["xz", "yz"],
    ", ": [", "],
    '"k": ': ['"k": '],
}


def common_prefix(items: list[bytes]) -> bytes:
    first, last = min(items), max(items)
    n = 0
    while n < len(first) and first[n] == last[n]:
        n += 1
    return first[:n]


def whole_characters(data: bytes) -> bytes:
    """The longest prefix of `data` (which starts at a character boundary) that is whole characters."""
    for k in range(len(data), -1, -1):
        try:
            data[:k].decode("utf-8")
            return data[:k]
        except UnicodeDecodeError:
            continue
    return b""


def expected_jump(words: set[bytes], done: bytes) -> bytes:
    """Brute force: what every accepted string continues `done` with, cut where the map
    must cut it: first the forced bytes that finish a half-written character, then whole
    characters only."""
    forced = common_prefix([w[len(done) :] for w in words if w.startswith(done)])
    head = 0
    while head < len(forced) and 0x80 <= forced[head] <= 0xBF:  # continuation bytes
        head += 1
    if head == len(forced):
        return forced
    return forced[:head] + whole_characters(forced[head:])


def words_of(parts: list[str]) -> set[str]:
    return {"".join(c) for c in itertools.product(*(FINITE[p] for p in parts))}


def expected_char_edges(dfa, words: set[str]) -> dict[int, tuple[str, int]]:
    """Brute force over the language: the state after a prefix jumps iff every accepted
    string goes on with one same character and none stops there."""
    edges = {}
    for prefix in {w[:i] for w in words for i in range(len(w) + 1)}:
        nexts = {w[len(prefix)] for w in words if w.startswith(prefix) and len(w) > len(prefix)}
        if len(nexts) == 1 and prefix not in words:
            (ch,) = nexts
            edges[dfa.walk(0, prefix)] = (ch, dfa.walk(0, prefix + ch))
    return edges


def expected_byte_edges(byte_dfa) -> dict[int, tuple[int, int]]:
    """Every intermediate state (half a character read) whose row has exactly one live byte."""
    want = {}
    for state in range(byte_dfa.num_char_states, byte_dfa.num_states):
        live = [b for b in range(256) if byte_dfa.table[state, b] >= 0]
        if len(live) == 1:
            want[state] = (live[0], int(byte_dfa.table[state, live[0]]))
    return want


@pytest.mark.task4_1
@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(sorted(FINITE)), min_size=1, max_size=5))
@example(parts=["(编程|摄影)"])  # states past a non-ASCII choice jump too (程, 影)
def test_char_edges_are_the_states_where_every_accepted_string_goes_on_alike(parts):
    regex = "".join(parts)
    dfa = compile_regex(regex)
    jm = JumpForwardMap.build(dfa, ByteDFA.from_char_dfa(dfa))
    want = expected_char_edges(dfa, words_of(parts))
    wrong = {
        s: (want.get(s), jm.char_edges.get(s))
        for s in set(want) | set(jm.char_edges)
        if want.get(s) != jm.char_edges.get(s)
    }
    assert not wrong, (
        f"regex {regex!r}: char_edges is wrong at these states, as state: (expected, got), "
        f"None meaning no entry (a choice, or a state where the string may stop): {wrong}"
    )


@pytest.mark.task4_2
@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(sorted(FINITE)), min_size=1, max_size=5))
@example(parts=["(中|丰)"])  # after the shared first byte: a jump of bytes alone, no whole character
@example(parts=["(编程|摄影)"])  # after 编 and the first byte of 程: its last two bytes, then a choice
def test_jump_is_the_longest_common_continuation_of_every_accepted_string(parts):
    """Task 4_2 alone: the map it walks is built here by brute force, not by task 4_1."""
    regex = "".join(parts)
    words = {w.encode() for w in words_of(parts)}
    dfa = compile_regex(regex)
    byte_dfa = ByteDFA.from_char_dfa(dfa)
    jm = JumpForwardMap(
        expected_char_edges(dfa, words_of(parts)), expected_byte_edges(byte_dfa), byte_dfa.num_char_states
    )
    for word in words:
        for i in range(len(word) + 1):  # every byte position, also inside a character
            done = word[:i]
            state = byte_dfa.walk_bytes(0, done)
            want = expected_jump(words, done)
            got = jm.jump_forward(state)
            if not want:
                assert got is None, (
                    f"regex {regex!r}, after the bytes {done!r}: nothing is forced there, "
                    f"so jump_forward must return None; got {got!r}"
                )
            else:
                end = byte_dfa.walk_bytes(0, done + want)
                assert got == (want, end), (
                    f"regex {regex!r}, after the bytes {done!r}: every accepted string "
                    f"goes on with {want!r}, so jump_forward(state {state}) must be "
                    f"{(want, end)!r}; got {got!r}"
                )


class CountedEdges(dict):
    """A map's `char_edges` that fail the test once a walk has read `limit` of them: a walk
    that goes round a cycle of forced characters forever is stopped at once, not by the
    grader's time limit."""

    def __init__(self, edges: dict, limit: int = 100):
        super().__init__(edges)
        self.reads, self.limit = 0, limit

    def _read(self) -> None:
        self.reads += 1
        if self.reads > self.limit:
            raise AssertionError(
                f"jump_forward read char_edges {self.limit} times on a map of {len(self)} states whose forced "
                f"characters go round in a cycle: guard against revisiting a state (a set of the states seen)"
            )

    def __contains__(self, key):
        self._read()
        return super().__contains__(key)

    def __getitem__(self, key):
        self._read()
        return super().__getitem__(key)

    def get(self, key, default=None):
        self._read()
        return super().get(key, default)


@pytest.mark.task4_2
@pytest.mark.parametrize(
    "edges",
    [{0: ("a", 1), 1: ("b", 0)}, {0: ("a", 1), 1: ("b", 0), 5: ("c", 6)}],
    ids=["the cycle alone", "an edge elsewhere too"],
)
def test_jump_forward_stops_on_a_cycle_of_forced_characters(edges):
    """The page asks for a guard against revisiting a state: a hand-built map whose forced
    characters cycle (0 -a-> 1 -b-> 0; a real DFA's never do) must not be walked forever, nor
    round it again (a count of steps, as many as the map has edges, is no such guard: an edge
    elsewhere in the map let the walk go round once more, a stranger's solution)."""
    jm = JumpForwardMap(CountedEdges(edges), {}, 7)
    got = jm.jump_forward(0)
    assert got in {(b"ab", 0), (b"a", 1)}, (
        f"jump_forward(0) on the cycle 0 -a-> 1 -b-> 0 (char_edges {edges}) must stop where it would revisit a "
        f"state, with the characters it walked: (b'ab', 0) (or (b'a', 1), stopping before the step back); "
        f"got {got!r}"
    )


@pytest.mark.task4_1
@pytest.mark.parametrize("regex, done, forced", [("(ab)*c", "a", "b"), ("(abc)*d", "ab", "c")])
def test_a_forced_character_back_into_state_0_is_a_char_edge(regex, done, forced):
    """State 0 is a state like any other: after `a` in `(ab)*c` only `b` may follow, and it
    leads back to the start (a stranger's map dropped the edge: `and nxt` reads state 0 as
    false)."""
    dfa = compile_regex(regex)
    jm = JumpForwardMap.build(dfa, ByteDFA.from_char_dfa(dfa))
    state, back = dfa.walk(0, done), dfa.walk(0, done + forced)
    assert jm.char_edges.get(state) == (forced, back), (
        f"regex {regex!r}, state {state} after {done!r}: only {forced!r} may follow, into state {back}, so "
        f"char_edges[{state}] must be {(forced, back)!r} (a next state 0 is live: only -1 is dead); got "
        f"{jm.char_edges.get(state)!r}"
    )


@pytest.mark.task4_1
@pytest.mark.parametrize("regex, done", [("x[^x]", "x"), ("[^b]b", ""), ('"[^"]"', '"')])
def test_one_edge_of_many_characters_is_a_choice_not_a_jump(regex, done):
    """A state with a single edge still branches when the edge takes several characters:
    [^x] is stored as the one character x, negated, and takes every other one."""
    dfa = compile_regex(regex)
    byte_dfa = ByteDFA.from_char_dfa(dfa)
    jm = JumpForwardMap.build(dfa, byte_dfa)
    state = dfa.walk(0, done)
    assert len(dfa.transitions[state]) == 1, (  # one edge, as the test means
        f"test premise: regex '{regex}' after {done!r} is at state {state}, with one edge; the regex compiler gave "
        f"{len(dfa.transitions[state])} edges (not task 4_1's doing)"
    )
    edge = next(iter(dfa.transitions[state]))
    assert state not in jm.char_edges, (
        f"regex {regex!r}, state {state} after {done!r}: its one edge is the class {edge.label()} "
        f"(chars={set(edge.chars)}, negated={edge.negated}), which takes many characters: a choice, "
        f"not a jump; got char_edges[{state}] = {jm.char_edges.get(state)!r}"
    )


@pytest.mark.task4_1
@pytest.mark.parametrize("regex", ["ab中c", "(x|y)文", "é?[0-9]", "(中文)*x", "(中|丰)", "[é-ÿ]x"])
def test_byte_edges_are_the_intermediate_states_with_one_next_byte(regex):
    """The page's rule, checked on the map itself: byte_edges holds every intermediate state
    (half a character read) whose row has exactly one live byte, and no other state. In
    `(中文)*x` the last byte of 文 leads back to state 0, a live state like any other. After
    `E4 B8` in `(中|丰)` two bytes are live though both end the character in one state: a
    choice (a stranger's map forced 中 there), as is every byte after `C3` in `[é-ÿ]x`."""
    dfa = compile_regex(regex)
    byte_dfa = ByteDFA.from_char_dfa(dfa)
    jm = JumpForwardMap.build(dfa, byte_dfa)
    want = expected_byte_edges(byte_dfa)
    extra = sorted(set(jm.byte_edges) - set(want))
    missing = sorted(set(want) - set(jm.byte_edges))
    assert jm.byte_edges == want, (
        f"regex {regex!r}: byte_edges must be {want} (intermediate states are "
        f">= num_char_states = {byte_dfa.num_char_states}); got {jm.byte_edges}"
        + (f", with the states {extra} that are not" if extra else "")
        + (
            f", without the states {missing}, which have one live byte each "
            f"(a byte into state 0 is live: only -1 is dead)"
            if missing
            else ""
        )
    )
    kinds = {type(x).__name__ for state, edge in jm.byte_edges.items() for x in (state, *edge)}
    assert kinds <= {"int"}, (
        f"regex {regex!r}: byte_edges must hold Python ints (int(...)); it holds {sorted(kinds)}: a numpy "
        f"integer from the table travels on as the grammar's state, and json cannot write it"
    )


# ----------------------------------------------------------------------------- task4_3
@pytest.fixture(scope="module")
def tok():
    return Tokenizer.from_pretrained(minisglang.DEFAULT_MODEL_PATH)


@pytest.fixture(scope="module")
def stage(tok):
    st_ = JumpForwardStage(StageContext(tok, tok.vocab_size, torch.device("cpu"), {}))
    yield st_
    st_.shutdown()


def request(tok, prompt: str, pieces: list[str], max_new_tokens: int = 64) -> Req:
    """A request whose output so far is `pieces`, each encoded on its own: a tokenization
    the tokenizer would not choose for the joined text (as sampled tokens often are)."""
    req = Req(
        prompt=prompt,
        origin_input_ids=tok.encode(prompt),
        sampling_params=SamplingParams(max_new_tokens=max_new_tokens),
    )
    req.output_ids = [t for p in pieces for t in tok.encode(p)]
    return req


PROMPTS = ["<|user|>\nExtract as JSON.\n<|assistant|>\n", "The code is 1", "Name:"]
PIECES = ['{"', "name", '"', ": ", '"Li', " Lei", '", "', "age", "2", "31", "中", "文", " "]
JUMPS = ['", "age": ', '": "', "2345-", "中文", ", ", "}"]


@pytest.mark.task4_3
@settings(max_examples=80, deadline=None)
@given(
    st.sampled_from(PROMPTS), st.lists(st.sampled_from(PIECES), max_size=6), st.sampled_from(JUMPS), st.integers(1, 30)
)
# A jump before the model wrote anything (a JSON schema's opening text) is re-encoded too.
@example(prompt=PROMPTS[0], pieces=[], jump='", "age": ', max_new=30)
def test_retokenize_is_the_tokenizers_own_encoding_or_a_refusal(tok, stage, prompt, pieces, jump, max_new):
    req = request(tok, prompt, pieces, max_new)
    got = stage.jump.retokenize(req, jump.encode())
    # oracle: encode the whole text; refuse when the prompt's tokens change or the length limit is hit
    all_ids = tok.encode(prompt + "".join(pieces) + jump)
    prompt_len = len(req.origin_input_ids)
    case = f"prompt {prompt!r}, output pieces {pieces!r}, jump {jump!r}, max_new_tokens {max_new}"
    if all_ids[:prompt_len] != req.origin_input_ids:
        assert got is None, (
            f"{case}: the whole text encodes the prompt's last tokens differently "
            f"({all_ids[:prompt_len][-3:]} instead of {req.origin_input_ids[-3:]}): "
            f"refuse (None); got {got!r}"
        )
    elif len(all_ids) - prompt_len >= max_new:
        assert got is None, (
            f"{case}: the new output is {len(all_ids) - prompt_len} tokens, not fewer "
            f"than max_new_tokens: refuse (None); got {got!r}"
        )
    else:
        assert got == all_ids[prompt_len:], (
            f"{case}: the new output ids are what encode(prompt + output + "
            f"jump) gives after the prompt, {all_ids[prompt_len:]}; got {got!r}"
        )
        assert tok.decode_bytes(got) == ("".join(pieces) + jump).encode(), (
            f"{case}: the new output ids must decode to exactly the output and the jump"
        )


@pytest.mark.task4_3
def test_retokenize_refuses_a_jump_that_reaches_max_new_tokens(tok, stage):
    """A new output of n tokens is refused when max_new_tokens is n (the request would end at its
    length limit inside the jump) and kept when it is n + 1."""
    prompt, pieces, jump = PROMPTS[0], ['{"', "name"], '": "'
    want = tok.encode(prompt + "".join(pieces) + jump)[len(tok.encode(prompt)) :]
    n = len(want)
    got = stage.jump.retokenize(request(tok, prompt, pieces, max_new_tokens=n), jump.encode())
    assert got is None, (
        f"output {pieces!r} and the jump {jump!r} re-encode to {n} tokens; with max_new_tokens "
        f"{n} that is not fewer than the limit: refuse (None); got {got!r}"
    )
    got = stage.jump.retokenize(request(tok, prompt, pieces, max_new_tokens=n + 1), jump.encode())
    assert got == want, (
        f"output {pieces!r} and the jump {jump!r} re-encode to {want} ({n} tokens), fewer than "
        f"max_new_tokens {n + 1}; got {got!r}"
    )


@pytest.mark.task4_3
def test_retokenize_finishes_a_half_written_character(tok, stage):
    prompt = PROMPTS[0]
    req = request(tok, prompt, [])
    first_byte = "我".encode()[:1]
    req.output_ids = [tok.token_bytes.index(first_byte)]  # the model wrote one byte of 我
    got = stage.jump.retokenize(req, "我喜欢".encode()[1:])
    want = tok.encode(prompt + "我喜欢")[len(req.origin_input_ids) :]
    assert got == want, (
        f"the output is one byte of 我 ({first_byte!r}) and the jump its other two bytes, then "
        f"喜欢: join the bytes before decoding, the new output is {want} (我喜欢); got {got!r}"
    )


@pytest.mark.task4_3
def test_retokenize_refuses_bytes_that_are_not_utf8(tok, stage):
    req = request(tok, PROMPTS[0], [])
    req.output_ids = [tok.token_bytes.index("我".encode()[:1])]
    got = stage.jump.retokenize(req, b", ")  # half a character, then ASCII
    assert got is None, (
        f"output bytes {'我'.encode()[:1]!r} + jump b', ' are not UTF-8 (half a character): refuse (None); got {got!r}"
    )


class GreedyTokenizer:
    """A toy tokenizer: longest match first over `vocab`, after an optional normalisation.

    On the bundled tokenizer a changed prompt also changes the output's bytes, so each of
    retokenize's two checks hides the other's absence. These toys separate them."""

    def __init__(self, vocab: list[str], normalise=lambda text: text):
        self.token_bytes = [v.encode() for v in vocab]
        self.vocab, self.normalise = vocab, normalise

    def encode_extended(self, text: str, ids: list[int], more: str) -> list[int]:
        return self.encode(text + more)  # no special tokens: everything is re-encoded

    def decode_bytes(self, ids: list[int]) -> bytes:
        # As Tokenizer.decode_bytes: a special token (its token_bytes entry None) gives nothing.
        return b"".join(self.token_bytes[i] or b"" for i in ids)

    def decode(self, ids: list[int]) -> str:
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    def encode(self, text: str) -> list[int]:
        text, ids = self.normalise(text), []
        while text:
            best = max((i for i, v in enumerate(self.vocab) if text.startswith(v)), key=lambda i: len(self.vocab[i]))
            ids.append(best)
            text = text[len(self.vocab[best]) :]
        return ids


def toy_ids(toy: GreedyTokenizer, ids) -> str:
    """Toy token ids shown with their text, as "['ab' (id 2), 'c' (id 3)]"; anything else (None) as its repr."""
    if not isinstance(ids, list) or not all(isinstance(i, int) and 0 <= i < len(toy.vocab) for i in ids):
        return repr(ids)
    return token_list(ids, lambda i: repr(toy.vocab[i]))


def toy_request(prompt: str, prompt_ids: list[int], output_ids: list[int]) -> Req:
    req = Req(prompt=prompt, origin_input_ids=prompt_ids, sampling_params=SamplingParams(max_new_tokens=64))
    req.output_ids = list(output_ids)
    return req


@pytest.mark.task4_3
def test_retokenize_refuses_a_changed_prompt_even_when_the_output_bytes_are_exact():
    """The prompt "abc" came as the ids [a, bc] (e.g. from a chat template); re-encoded with
    the output it is [ab, c]: as many tokens, the output's bytes exact, but the prompt's ids
    (and so its KV) differ. Only the prompt check catches this."""
    toy = GreedyTokenizer(["a", "bc", "ab", "c", "d"])
    req = toy_request("abc", [0, 1], [])
    assert toy.encode("abcd") == [2, 3, 4], (  # the output part [d] alone is byte-exact
        f"test premise: the toy tokenizer encodes 'abcd' as [ab, c, d] (ids [2, 3, 4]); it gave "
        f"{toy_ids(toy, toy.encode('abcd'))}"
    )
    got = JumpForward(toy).retokenize(req, b"d")
    assert got is None, (
        "prompt 'abc' as the ids [a, bc], jump 'd': 'abcd' encodes as [ab, c, d], the "
        f"prompt's ids change (its KV would be wrong): refuse (None); got {toy_ids(toy, got)}"
    )


@pytest.mark.task4_3
def test_retokenize_checks_every_prompt_token_not_only_the_last():
    """Chapter 04's example: the prompt "abcbc" came as [a, bc, bc]; with the jump "d" the
    whole text re-encodes as [ab, c, bc, d]. The prompt's LAST token is still bc (SGLang's
    check looks only there), but its first two changed, so the KV no longer matches."""
    toy = GreedyTokenizer(["a", "bc", "ab", "c", "d"])
    req = toy_request("abcbc", [0, 1, 1], [])
    assert toy.encode("abcbcd") == [2, 3, 1, 4], (  # [ab, c, bc, d]: the last prompt token kept
        f"test premise: the toy tokenizer encodes 'abcbcd' as [ab, c, bc, d] (ids [2, 3, 1, 4]); it gave "
        f"{toy_ids(toy, toy.encode('abcbcd'))}"
    )
    got = JumpForward(toy).retokenize(req, b"d")
    assert got is None, (
        "prompt 'abcbc' as [a, bc, bc], jump 'd': 'abcbcd' encodes as [ab, c, bc, d]; the "
        "prompt's last token is the same but its first two are not: compare all of the "
        f"prompt's ids, refuse (None); got {toy_ids(toy, got)}"
    )


@pytest.mark.task4_3
def test_retokenize_reads_a_special_token_as_no_bytes():
    """A special token's `token_bytes` entry is None: it adds nothing to the output's bytes."""
    toy = GreedyTokenizer(["x", ":", "<special>"])
    toy.token_bytes[2] = None
    req = toy_request("x", [0], [2])  # the output so far: <special>
    got = JumpForward(toy).retokenize(req, b":")
    assert got == [1], (
        "output [<special>] (token_bytes None: no bytes), jump ':': the text after the prompt is "
        f"':', its ids [1]; got {toy_ids(toy, got)}"
    )


@pytest.mark.task4_3
def test_retokenize_refuses_a_normalised_output_even_when_the_prompt_is_kept():
    """A tokenizer that normalises (NFC) turns "e" + a combining accent into one "é": the
    prompt's ids stay, the output's bytes do not. Only the byte-exact check catches this."""
    toy = GreedyTokenizer(["x", ":", "e", "é", "\u0301"], normalise=lambda text: unicodedata.normalize("NFC", text))
    req = toy_request("x:", [0, 1], [2])  # the output so far: "e"
    text = "x:" + "e\u0301"
    assert toy.encode(text)[:2] == [0, 1], (
        f"test premise: the normalising toy tokenizer keeps the prompt 'x:' as [x, :] (ids [0, 1]) in "
        f"'x:e\\u0301'; it gave {toy_ids(toy, toy.encode(text))}"
    )
    got = JumpForward(toy).retokenize(req, "\u0301".encode())
    assert got is None, (
        "output 'e', jump U+0301 (a combining accent): the tokenizer normalises 'e\\u0301' "
        f"to 'é', whose bytes are not output + jump: refuse (None); got {toy_ids(toy, got)}"
    )
    # the same tokenizer, nothing to normalise: the jump is taken
    got = JumpForward(toy).retokenize(req, b":")
    assert got == [2, 1], (
        f"output 'e', jump ':' (nothing to normalise): the jump is taken, ids ['e' (2), ':' (1)]; "
        f"got {toy_ids(toy, got)}"
    )
    # Compare all of output + jump, byte for byte: a check of the jump's bytes alone, of the
    # output's alone, or of the length alone lets one of these through.
    lower = GreedyTokenizer(["x", ":", "a", "A"], normalise=str.lower)
    for case_toy, output, jump, changed in (
        (toy, "e\u0301", ":", "the output 'e\\u0301' becomes 'é', the jump ':' stays"),
        (toy, ":", "e\u0301", "the output ':' stays, the jump 'e\\u0301' becomes 'é'"),
        (lower, "A", ":", "a lowercasing tokenizer: 'A:' becomes 'a:', as many bytes"),
    ):
        req = toy_request("x:", [0, 1], [case_toy.vocab.index(c) for c in output])
        got = JumpForward(case_toy).retokenize(req, jump.encode())
        assert got is None, (
            f"prompt 'x:' (kept), output {ascii(output)}, jump {ascii(jump)}: {changed}; the new output's bytes are not "
            f"output + jump: refuse (None); got {toy_ids(case_toy, got)}"
        )


@pytest.mark.task4_3
def test_retokenize_cuts_the_output_after_the_prompts_own_ids(tok, stage):
    """The prompt is `req.origin_input_ids`, not `encode(req.prompt)`: a chat whose message
    spells a special token ("<|assistant|>") keeps that text as ordinary bytes
    (`encode_chat`), so its ids are more than `encode` of its text gives. The new output
    ids start after the request's own prompt ids; cut elsewhere, they start inside the
    prompt, and the jump is refused for every such chat. So is it when prompt + text is
    encoded whole (`tok.encode`): the message's text becomes the special token there."""
    chat = tok.encode_chat([{"role": "user", "content": "Say <|assistant|> as JSON."}])
    assert len(chat.ids) != len(tok.encode(chat.text)), (
        f"test premise: a chat that spells a special token has {len(chat.ids)} ids, encode of its text "
        f"{len(tok.encode(chat.text))}"
    )
    req = Req(prompt=chat.text, origin_input_ids=list(chat.ids), sampling_params=SamplingParams(max_new_tokens=64))
    req.output_ids = tok.encode('{"a')
    got = stage.jump.retokenize(req, b'": 1')
    assert got is not None and tok.decode(got) == '{"a": 1', (
        "a chat prompt whose message spells '<|assistant|>' (its ids from encode_chat, more than encode(text) "
        "gives), output '{\"a', jump '\": 1': the new output ids are the ids after the first "
        f"len(req.origin_input_ids) and spell '{{\"a\": 1'; got {got!r}"
        + ("" if got is None else f" = {tok.decode(got)!r}")
    )


@pytest.mark.task4_3
def test_retokenize_may_give_fewer_ids_than_the_output_had(tok, stage):
    """The model may have written a word a letter at a time; re-encoded with the jump it
    is one token: the new output is shorter than the old, and that is no reason to refuse
    (the page's refusals: not UTF-8, the prompt changed, the bytes changed, max_new_tokens)."""
    req = request(tok, PROMPTS[0], list("Paris"))
    want = tok.encode(PROMPTS[0] + 'Paris"')[len(req.origin_input_ids) :]
    assert len(want) < len(req.output_ids), (
        f"test premise: 'Paris\"' encodes in fewer tokens ({len(want)}) than the five letters written one by one"
    )
    got = stage.jump.retokenize(req, b'"')
    assert got == want, (
        f"output 'Paris' as five one-letter tokens, jump '\"': the new output is the tokenizer's own "
        f"{[tok.decode([t]) for t in want]} ({want}), fewer ids than before; got {got!r}"
    )


@pytest.mark.task4_3
def test_retokenize_refuses_when_the_prompt_fuses_with_the_output(tok, stage):
    req = request(tok, "The code is 1", [])
    assert tok.encode("The code is 12345")[: len(req.origin_input_ids)] != req.origin_input_ids, (
        f"test premise: the bundled tokenizer cuts 'The code is 12345' so that the prompt 'The code is 1' "
        f"({[(tok.decode([t]), t) for t in req.origin_input_ids]}, as (text, id)) is re-cut; its ids came back "
        f"unchanged"
    )
    got = stage.jump.retokenize(req, b"2345-")
    assert got is None, (
        "prompt 'The code is 1', jump '2345-': the whole text re-cuts the prompt's last "
        f"token (' 1' fuses with the output): refuse (None); got {got!r}"
    )


# ----------------------------------------------------------------------------- task4_4
Q = "<|user|>\nExtract as JSON: Li Lei is 31 years old and lives in Paris.\n<|assistant|>\n"
PERSON = r'\{"name": "[A-Za-z ]{1,12}", "age": [1-9][0-9]?, "city": "(Paris|Rome|Beijing)"\}'


class SchedulerParts:
    """What `Scheduler.readmit` touches, recorded: the queues, the memory hand-back, events."""

    step_recorder = None  # no step view is recording

    def __init__(self, tokenizer, req):
        self.tokenizer, self.running, self.waiting_queue, self.released = tokenizer, [req], [], []

    def release_memory(self, req):
        self.released.append(req)

    def record_event(self, *args, **kwargs):
        pass


@pytest.mark.task4_4
def test_readmit_restarts_the_detokenizer_even_in_the_middle_of_a_character(tok):
    """The model wrote the first byte of 我; the jump finishes the character. The old
    detokenizer still holds that byte: fed the new ids it would print it twice (#665)."""
    req = Req(prompt=Q, origin_input_ids=tok.encode(Q), sampling_params=SamplingParams(max_new_tokens=64))
    req.output_ids = [tok.token_bytes.index("我".encode()[:1])]
    req.detokenizer = IncrementalDetokenizer(tok)
    req.output_text = req.detokenizer.feed(req.output_ids)  # "" so far: half a character
    new_ids = tok.encode(Q + "我喜欢")[len(req.origin_input_ids) :]
    parts = SchedulerParts(tok, req)
    Scheduler.readmit(parts, req, new_ids)
    assert req.output_text == "我喜欢", (
        f"the old output was one byte of 我, the new ids spell 我喜欢: a fresh "
        f"detokenizer fed the new ids gives output_text '我喜欢'; got {req.output_text!r}"
    )
    assert req.detok_offset == len(new_ids), (
        f"detok_offset must be len(new_output_ids) = {len(new_ids)}; got {req.detok_offset}"
    )
    assert req.output_ids == new_ids, f"output_ids must be the new ids {new_ids}; got {req.output_ids}"
    # The request's own list, not the caller's: decoding appends to it, and a caller that
    # kept its list saw it grow (a stranger's `req.output_ids = new_output_ids`).
    assert req.output_ids is not new_ids, "output_ids must be a list of the request's own (list(new_output_ids))"
    assert parts.released == [req], "readmit must call self.release_memory(req) once (its KV goes to the tree)"
    assert parts.waiting_queue == [req] and parts.running == [], (
        f"the request must move from running to waiting_queue; running has {len(parts.running)}, "
        f"waiting_queue {len(parts.waiting_queue)}"
    )
    # decoding goes on from the new ids: the next token's text only
    more = tok.encode(Q + "我喜欢编程")[len(req.origin_input_ids) + len(new_ids) :]
    fed, want = req.detokenizer.feed(more), tok.decode(new_ids + more)[len("我喜欢") :]
    assert fed == want, (
        f"after readmit the detokenizer must go on from the new ids: the next tokens give {want!r}; got {fed!r}"
    )


@pytest.mark.task4_4
def test_readmit_feeds_the_new_detokenizer_new_ids_that_end_in_the_middle_of_a_character(tok):
    """The new ids may themselves end half-way through a character: the seam rule
    (`leave_the_seam_to_the_model`) gives back a character's last byte when a longer token
    starts with it. After a forced 名字之 where 。 may come next, this vocabulary cuts 之 as
    b'\\xe4\\xb9' + b'\\x8b' and also has b'\\x8b。': the jump keeps [名, 字, b'\\xe4\\xb9'] and
    the model writes b'\\x8b。' (the engine does this with the regex `名字之(。|!)`). The
    new detokenizer must hold the half character, so it is fed the new ids: an output_text
    from `tokenizer.decode` of them ends in U+FFFD, and a fresh unfed detokenizer then reads
    b'\\x8b' alone (the client got '名字��。')."""
    req = Req(prompt=Q, origin_input_ids=tok.encode(Q), sampling_params=SamplingParams(max_new_tokens=64))
    req.output_ids = tok.encode(Q + "名")[len(req.origin_input_ids) :]
    req.detokenizer = IncrementalDetokenizer(tok)
    req.output_text = req.detokenizer.feed(req.output_ids)
    new_ids = tok.encode(Q + "名字之")[len(req.origin_input_ids) :][:-1]  # without 之's last byte
    assert tok.decode_bytes(new_ids).endswith(b"\xe4\xb9"), "the vocabulary changed: pick another character"
    parts = SchedulerParts(tok, req)
    Scheduler.readmit(parts, req, new_ids)
    assert req.output_text == "名字", (
        f"the new ids spell 名字 and the first two bytes of 之: a fresh detokenizer fed the new ids "
        f"gives output_text '名字' (it holds the half character); got {req.output_text!r}"
    )
    more = [tok.token_bytes.index("之。".encode()[2:])]
    fed = req.detokenizer.feed(more)
    assert fed == "之。", (
        f"after readmit the detokenizer must hold the half character of the new ids (feed them to "
        f"it): the next token b'\\x8b。' then gives '之。'; got {fed!r}"
    )


@pytest.mark.task4_4
def test_readmit_queues_the_request_behind_those_already_waiting(tok):
    """A jumper goes to the end of the waiting queue: put first, requests that jump often
    would overtake, turn after turn, the ones that arrived before them (as in SGLang, whose
    scheduler extends the waiting queue with the jumpers). The end, not the jumper's place by
    arrival time: the request waiting here arrived after the jumper and still goes first."""

    def new_req():
        return Req(prompt=Q, origin_input_ids=tok.encode(Q), sampling_params=SamplingParams(max_new_tokens=64))

    jumper, waiting = new_req(), new_req()
    waiting.arrival_time = jumper.arrival_time + 1.0  # it arrived a second after the jumper
    jumper.output_ids = tok.encode('{"')
    jumper.detokenizer = IncrementalDetokenizer(tok)
    jumper.output_text = jumper.detokenizer.feed(jumper.output_ids)
    parts = SchedulerParts(tok, jumper)
    parts.waiting_queue.append(waiting)
    Scheduler.readmit(parts, jumper, tok.encode('{"name": "'))
    order = ["the waiting request" if r is waiting else "the jumper" for r in parts.waiting_queue]
    assert parts.waiting_queue == [waiting, jumper], (
        f"a request was already waiting (it arrived after the jumper): the jumper goes to the END of "
        f"waiting_queue, whatever the arrival times; got the order {order}"
    )


@pytest.mark.task4_4
def test_a_jump_hands_the_kv_to_the_tree_and_readmits_with_the_longest_shared_prefix():
    engine = sgl.Engine(stage="s4", max_total_tokens=1024)
    s = engine.scheduler
    req = engine.submit(Q, {"regex": PERSON, "temperature": 0, "max_new_tokens": 60})
    jumps = 0
    while not req.released:
        before_ids, before_kv, version = list(req.fill_ids), req.kv_len, getattr(req.grammar, "version", 0)
        engine.step()
        if req.grammar is None or req.grammar.version == version:  # a jump bumps its grammar's version
            continue
        jumps += 1
        # pulled out of the batch: no slots, no table row, waiting to be prefilled again
        where = "running" if req in s.running else "waiting_queue" if req in s.waiting_queue else "no queue"
        assert req in s.waiting_queue and req not in s.running, (
            f"jump {jumps}: after readmit the request must be in waiting_queue only; it is in {where}"
        )
        assert req.req_pool_idx is None, (
            f"jump {jumps}: after readmit the request still holds table row {req.req_pool_idx} "
            f"(self.release_memory(req) frees its memory)"
        )
        decoded = engine.tokenizer.decode(req.output_ids)
        assert req.output_text == decoded, (
            f"jump {jumps}: output_text {req.output_text!r} is not the decoded "
            f"output ids {decoded!r} (restart the detokenizer on readmit)"
        )
        # the tree holds everything that had KV before the jump
        prefix, _ = s.tree_cache.match_prefix(before_ids[:before_kv])
        assert len(prefix) == before_kv, (
            f"jump {jumps}: the {before_kv} tokens that had KV before the jump must "
            f"be in the radix tree; it holds {len(prefix)} of them"
        )
        if req.finished:  # the jump completed the match: it leaves, no re-admission
            continue
        # re-admission: the radix match ends at the first token the retokenization changed
        new_ids = list(req.fill_ids)
        shared = next(
            (i for i, (a, b) in enumerate(zip(before_ids[:before_kv], new_ids)) if a != b), min(before_kv, len(new_ids))
        )
        engine.step()
        # (after the prefill the whole prompt is in the tree: the admission event keeps the hit)
        admit = [e for e in engine.trace if e["event"] == "admit" and e.get("rid") == req.rid][-1]
        want = min(shared, len(new_ids) - 1)
        assert admit["prefix_len"] == want, (
            f"jump {jumps}: re-admitted with a cached prefix of "
            f"{admit['prefix_len']} tokens; the tokens before the first one the "
            f"retokenization changed are {want}"
        )
    assert jumps >= 2 and re.fullmatch(PERSON, req.output_text), (
        f"a PERSON request: expected at least 2 jumps and a full match; got {jumps} jump(s), text {req.output_text!r}"
    )
    held = s.token_to_kv_pool.available_size() + s.tree_cache.total_size()
    assert held == 1024, (
        f"after the request, free slots + the tree's tokens must be all 1024 slots; got {held} (a leak)"
    )
    assert s.tree_cache.protected_size() == 0, (
        f"no request runs, so no tree node may stay locked; {s.tree_cache.protected_size()} tokens are"
    )
    engine.shutdown()
