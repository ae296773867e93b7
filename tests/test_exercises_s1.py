"""Exercise tests of stage s1-masked-fill (`minisglang grade --stage s1`).

Each graded test carries the marker of the task it grades:

- task1_1  ByteDFA.walk_bytes: walk a token's bytes through the byte DFA
- task1_2  the reference token index walk: the allowed set of one state
- task1_3  MaskedFillStage.allowed_mask: the bool row of one state
- task1_4  MaskedFillStage.mask_logits: one masked_fill_ per request
- task1_5  MaskedFillStage.advance: move the FSM state, finish at EOS or a dead end

The oracles never use the code under test: re.fullmatch and the character DFA (itself
tested against re.fullmatch in test_regex_dfa.py) say which byte strings can still match,
and a tiny synthetic vocabulary with pieces of multi-byte characters is brute-forced.
The task1_4 and task1_5 tests bring their own `allowed_mask` and token index lookups, so
each task can be graded on its own.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minisglang.constrained.regex_dfa import ByteDFA, CharDFA, compile_regex
from minisglang.constrained.token_fsm import TokenFSM
from minisglang.constrained.token_index import build_index_reference
from minisglang.core import AbortKind, Req, SamplingParams
from minisglang.stages.base import StageContext
from minisglang.stages.s1_masked_fill import FSMState, MaskedFillStage

# ---------------------------------------------------------------------------------------
# A synthetic tokenizer: whole characters, merges, and pieces of multi-byte characters
# ---------------------------------------------------------------------------------------
EOS = 3


def _synthetic_vocab() -> list[bytes | None]:
    zh, wen, e_acute = "中".encode(), "文".encode(), "é".encode()
    singles = [c.encode() for c in '{}":, -abcdefghijklmnopqrstuvwxyz0123456789']
    merges = [
        b'{"',
        b'":',
        b'": ',
        b'", "',
        b'"}',
        b"name",
        b"age",
        b"yes",
        b"no",
        b"12",
        b"2024",
        b'"2',
        b"a1",
        zh,
        wen,
        e_acute,
        zh + wen,
        b'"' + zh,
    ]
    pieces = [zh[:1], zh[1:], zh[1:2], zh[2:], wen[:2], e_acute[:1], e_acute[1:]]
    # ids 0, 1 and 3 are special (no bytes); id 3 is EOS; id 5 is an empty string
    return [None, None, b"x", None, b"y", b""] + singles + merges + pieces


VOCAB = _synthetic_vocab()
# Logits are wider than the vocabulary (models pad it), and not a multiple of 32 wide.
VOCAB_SIZE = len(VOCAB) + 7
assert VOCAB_SIZE % 32 != 0


@dataclass
class SyntheticTokenizer:
    """What the constraint layer needs from a tokenizer: exact bytes per id, and EOS."""

    token_bytes: list[bytes | None]
    eos_token_id: int

    def id_to_token(self, token_id: int) -> str:
        return f"<{token_id}>"


TOKENIZER = SyntheticTokenizer(VOCAB, EOS)

REGEXES = [
    r'\{"name": "[a-z中文é]{1,8}", "age": [1-9][0-9]?\}',
    r"(yes|no)",
    r"2024-[0-9]{2}",
    r"1[0-9]*",
    r'"[^"]*"',
    r"(中文|é)+a?",
]


def make_stage(cls=MaskedFillStage, vocab_size: int = VOCAB_SIZE, tokenizer=TOKENIZER, **options):
    return cls(StageContext(tokenizer, vocab_size, torch.device("cpu"), options))


@functools.cache
def compiled(regex: str) -> TokenFSM:
    """s1's compile (regex -> DFA -> fast token index), done once per regex."""
    return make_stage().compile_fsm(regex)


def make_req(fsm: TokenFSM | None, state: int | None = None) -> Req:
    params = SamplingParams(regex=fsm.regex if fsm else None)
    req = Req(prompt="p", origin_input_ids=[2], sampling_params=params)
    if fsm is not None:
        req.grammar = FSMState(fsm, fsm.index.initial_state if state is None else state)
    return req


# ---------------------------------------------------------------------------------------
# The oracle: can a byte string still grow into a full match?
# ---------------------------------------------------------------------------------------
@functools.cache
def char_dfa(regex: str) -> CharDFA:
    return compile_regex(regex)


@functools.cache
def completions(tail: bytes) -> tuple[str, ...]:
    """Every character whose UTF-8 encoding starts with the incomplete `tail`."""
    need = {0xC: 2, 0xD: 2, 0xE: 3}.get(tail[0] >> 4, 4) - len(tail)
    assert 0 < need <= 2, f"the oracle enumerates at most two missing bytes, not for {tail!r}"
    found = []
    for rest in range(64**need):
        cont = bytes(0x80 | (rest >> (6 * k) & 0x3F) for k in reversed(range(need)))
        try:
            found.append((tail + cont).decode("utf-8"))
        except UnicodeDecodeError:
            pass  # overlong forms and surrogates have no character
    return tuple(found)


def split_utf8(data: bytes) -> tuple[str, bytes] | None:
    """(complete characters, an unfinished character's first bytes), or None if invalid."""
    for cut in range(4):
        head, tail = data[: len(data) - cut], data[len(data) - cut :]
        try:
            text = head.decode("utf-8")
        except UnicodeDecodeError:
            continue
        lead_ok = not tail or (0xC2 <= tail[0] <= 0xF4 and all(0x80 <= b < 0xC0 for b in tail[1:]))
        return (text, tail) if lead_ok else None
    return None


def viable(regex: str, data: bytes) -> bool:
    """Whether some full match of `regex` starts with the bytes `data`."""
    parts = split_utf8(data)
    if parts is None:
        return False
    text, tail = parts
    state = char_dfa(regex).walk(0, text)
    return state is not None and (not tail or can_finish_character(regex, state, tail))


@functools.cache
def can_finish_character(regex: str, state: int, tail: bytes) -> bool:
    """Whether some character starting with the bytes `tail` can be read in `state`."""
    return any(char_dfa(regex).step(state, ch) is not None for ch in completions(tail))


def matches(regex: str, data: bytes) -> bool:
    try:
        return re.fullmatch(regex, data.decode("utf-8")) is not None
    except UnicodeDecodeError:
        return False


@functools.cache
def oracle_allowed(regex: str, prefix: bytes) -> frozenset[int]:
    """Brute force: the token ids that may follow `prefix` (EOS when `prefix` matches).
    Cached: s7's chain tests ask it again for every position of every draft they check."""
    allowed = {t for t, data in enumerate(VOCAB) if data and t != EOS and viable(regex, prefix + data)}
    return frozenset(allowed | ({EOS} if matches(regex, prefix) else set()))


def test_the_oracle_itself():
    assert viable(r"(中文|é)+a?", "中".encode()[:2]) and not viable(r"(中文|é)+a?", "文".encode()[:1])
    assert not viable(r"[^a]", b"\x80") and not viable(r"[^a]", b"\xe0\x80")  # invalid UTF-8
    assert viable(r"[^a]", b"\xe0\xa0") and len(completions(b"\xe4")) == 64 * 64
    assert oracle_allowed(r"(yes|no)", b"ye") == {VOCAB.index(b"s")}
    assert oracle_allowed(r"(yes|no)", b"no") == {EOS}


# ---------------------------------------------------------------------------------------
# task1_1: ByteDFA.walk_bytes
# ---------------------------------------------------------------------------------------
BYTE_PIECES = [c.encode() for c in 'ab1"2{} é中文x-'] + [
    "中".encode()[:1],
    "中".encode()[1:],
    "é".encode()[:1],
    b"\x80",
    b"\xff",
]


@functools.cache
def byte_dfa(regex: str) -> ByteDFA:
    return ByteDFA.from_char_dfa(char_dfa(regex))


@pytest.mark.task1_1
@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(REGEXES + [r"[^a]{0,3}", r"(ab|é)*1", r".中?"]),
    st.lists(st.sampled_from(BYTE_PIECES), max_size=8).map(b"".join),
    st.data(),
)
def test_walk_bytes_agrees_with_the_oracle(regex, data, draw):
    dfa = byte_dfa(regex)
    end = dfa.walk_bytes(0, data)
    assert (end >= 0) == viable(regex, data), (
        f"regex {regex!r}, the bytes {data!r}: {'some' if viable(regex, data) else 'no'} match starts with them, so "
        f"walk_bytes(0, ...) must be {'a live state' if viable(regex, data) else '-1'}; got {end}"
    )
    if end >= 0 and split_utf8(data)[1] == b"":
        # A whole number of characters lands in the character DFA's own state.
        want = char_dfa(regex).walk(0, data.decode("utf-8"))
        assert end == want, (
            f"regex {regex!r}, the whole characters {data.decode('utf-8')!r}: walk_bytes must end "
            f"in the character DFA's state {want}; got {end}"
        )
        assert dfa.is_final(end) == matches(regex, data), (
            f"regex {regex!r}, {data!r}: a match is {matches(regex, data)}, but the end state {end} is_final "
            f"{dfa.is_final(end)}"
        )
    # Walking in two pieces (a token boundary anywhere, even inside a character) is the same.
    cut = draw.draw(st.integers(0, len(data)), label="cut")
    middle = dfa.walk_bytes(0, data[:cut])
    two = dfa.walk_bytes(middle, data[cut:]) if middle >= 0 else -1
    assert two == end, (
        f"regex {regex!r}: walking {data[:cut]!r} then {data[cut:]!r} must end where {data!r} in "
        f"one walk ends, state {end}; got {two}"
    )


@pytest.mark.task1_1
def test_walk_bytes_edge_cases():
    dfa = byte_dfa(r"(中文|é)+a?")
    got = dfa.walk_bytes(0, b"")
    assert got == 0, f"(中文|é)+a?: walk_bytes(0, b'') reads nothing, so it stays in state 0; got {got}"
    zh = "中".encode()
    inside = dfa.walk_bytes(0, zh[:1])
    assert inside >= dfa.num_char_states, (  # half a character: an intermediate state
        f"(中文|é)+a? after {zh[:1]!r} (the first byte of 中): an intermediate state (>= num_char_states = "
        f"{dfa.num_char_states}); got {inside}"
    )
    rest, whole = dfa.walk_bytes(inside, zh[1:] + "文".encode()), dfa.walk_bytes(0, "中文".encode())
    assert rest == whole, f"(中文|é)+a?: from half of 中, the rest of 中文 must end in state {whole}; got {rest}"
    for data in (zh, "中文".encode(), b"a"):  # a state, a final state, -1
        got = dfa.walk_bytes(0, data)
        assert type(got) is int, (  # a numpy integer (self.table[s, b]) leaks into every state of the index
            f"(中文|é)+a?: walk_bytes(0, {data!r}) must return a Python int, as the signature says (read "
            f"self._rows, not the numpy table); got {type(got).__name__} {got!r}"
        )
    for text in ["a", "中中"]:
        got = dfa.walk_bytes(0, text.encode())
        assert got == -1, f"(中文|é)+a?: no match starts with {text!r}, so walk_bytes must be -1; got {got}"
    end = dfa.walk_bytes(0, "中文éa".encode())
    assert dfa.is_final(end), f"(中文|é)+a? matches '中文éa': its end state must be final; got state {end}"
    # -1 as soon as the walk dies: later bytes are not read
    got = dfa.walk_bytes(0, b"\xff" + zh)
    assert got == -1, f"(中文|é)+a?: the walk dies at the byte 0xff and must return -1 (reading no further); got {got}"
    # Every byte after a dead one: row -1 in Python is the last row, a live state's, whose bytes go somewhere
    came_back = [b for b in range(256) if dfa.walk_bytes(0, bytes([0xFF, b])) != -1]
    assert not came_back, (
        f"(中文|é)+a?: the walk dies at 0xff, so 0xff followed by any byte is -1; got a live "
        f"state after 0xff then each of the bytes {came_back[:8]} (was row -1 read?)"
    )


@pytest.mark.task1_1
def test_walk_bytes_passes_through_the_initial_state_again():
    """State 0 is the initial state, a live one: a walk may come back to it and go on."""
    regex = r"(ab|中)*1"
    dfa = byte_dfa(regex)
    for text in ["ab", "中ab", "ab中1", "abab1"]:
        want = char_dfa(regex).walk(0, text)
        got = dfa.walk_bytes(0, text.encode())
        assert got == want, (
            f"regex '{regex}': walk_bytes(0, {text.encode()!r}) ('{text}') must end where the "
            f"character DFA ends, state {want}; got {got} (after 'ab' the walk is back in state 0, "
            f"the initial state, a live one: it goes on from there)"
        )
    assert char_dfa(regex).walk(0, "ab") == 0, (  # the case this test is about
        f"test premise: in regex '{regex}', 'ab' leads the character DFA back to state 0; it ends in state "
        f"{char_dfa(regex).walk(0, 'ab')} (the regex compiler's doing, not walk_bytes')"
    )
    end = dfa.walk_bytes(0, "ab中ab1".encode())
    assert dfa.is_final(end), f"(ab|中)*1 matches 'ab中ab1' (through state 0 again): a final end state; got {end}"


# ---------------------------------------------------------------------------------------
# task1_2: the reference token index walk (the allowed set of one state)
# ---------------------------------------------------------------------------------------
@functools.cache
def reference_index(regex: str):
    return build_index_reference(byte_dfa(regex), VOCAB, EOS, progress=False)


@pytest.mark.task1_2
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(REGEXES), st.data())
def test_reference_walk_allowed_sets_equal_brute_force(regex, data):
    """Walk a random path of allowed tokens; at every state the allowed set is the oracle's."""
    index = reference_index(regex)
    state, prefix = index.initial_state, b""
    for _ in range(10):
        allowed = index.allowed_token_ids(state)
        want = oracle_allowed(regex, prefix)
        assert set(allowed) == want, (
            f"regex {regex!r} after {prefix!r} (state {state}): it also allows "
            f"{sorted(set(allowed) - want)[:8]} and lacks {sorted(want - set(allowed))[:8]}"
        )
        assert allowed == sorted(allowed), (
            f"regex {regex!r}, state {state}: allowed_token_ids must be sorted; got {allowed}"
        )
        choices = [t for t in allowed if t != EOS]
        if not choices:
            break
        token = data.draw(st.sampled_from(choices), label="token")
        state, prefix = index.next_state(state, token), prefix + VOCAB[token]
        assert state >= 0, f"regex {regex!r}: the allowed token {VOCAB[token]!r} led to the dead state {state}"


@pytest.mark.task1_2
def test_reference_walk_next_states_and_reachability():
    index = reference_index(r"(yes|no)")
    dfa = byte_dfa(r"(yes|no)")
    y, e, s, yes = (VOCAB.index(b) for b in (b"y", b"e", b"s", b"yes"))
    # b"y" is in the vocabulary twice (ids 4 and 37): tokens with equal bytes are both allowed
    want = sorted(t for t, b in enumerate(VOCAB) if b in (b"y", b"yes", b"n", b"no"))
    got = index.allowed_token_ids(0)
    assert got == want, f"(yes|no) at the start: the tokens y, yes, n, no (ids {want}) are allowed; got {got}"
    after_y = index.next_state(0, y)
    assert after_y == dfa.walk_bytes(0, b"y"), (  # the end state of the token's walk
        f"(yes|no): the token 'y' from state 0 must go to the byte walk's state {dfa.walk_bytes(0, b'y')}; got {after_y}"
    )
    three, one = index.next_state(index.next_state(after_y, e), s), index.next_state(0, yes)
    assert three == one, f"(yes|no): 'y','e','s' must end where the one token 'yes' ends, state {one}; got {three}"
    got = index.allowed_token_ids(one)
    assert got == [EOS], f"(yes|no) after 'yes' (accepting, nothing follows): only EOS ({EOS}); got {got}"
    # Every state reachable by tokens is in the index, and nothing else.
    seen, todo = {0}, [0]
    while todo:
        for nxt in index.state_to_tokens[todo.pop()].values():
            if nxt >= 0 and nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    assert seen == set(index.state_to_tokens), (
        f"(yes|no): the index must hold exactly the states tokens reach from 0, {sorted(seen)}; it holds "
        f"{sorted(index.state_to_tokens)}"
    )


class CountingBar:
    """Stands in for tqdm in build_index_reference: records the total and the updates."""

    made: list[CountingBar] = []

    def __init__(self, total=None, **kwargs):
        self.total, self.n, self.closed = total, 0, False
        CountingBar.made.append(self)

    def update(self, n=1):
        self.n += n

    def close(self):
        self.closed = True


@pytest.mark.task1_2
def test_reference_walk_grows_the_progress_bar_by_each_new_state(monkeypatch):
    """The sheet: each end state seen for the first time adds one to `bar.total`, so the bar
    ends at its total, one per state of the index (without it the bar overruns a total of 1)."""
    from minisglang.constrained import token_index

    monkeypatch.setattr(token_index, "tqdm", CountingBar)
    for regex in (r"(yes|no)", r"1[0-9]*", REGEXES[0]):
        CountingBar.made.clear()
        index = build_index_reference(byte_dfa(regex), VOCAB, EOS, progress=False)
        (bar,) = CountingBar.made
        states = len(index.state_to_tokens)
        assert bar.n == states, (
            f"regex {regex!r}: the index has {states} states, but the loop took {bar.n} states off the worklist: "
            f"a state was queued again before its first walk was done (check `seen`, the queued states, not "
            f"the walked ones)"
        )
        assert bar.total == states, (
            f"regex {regex!r}: the index has {states} states and the loop updated the bar {bar.n} times, so "
            f"its total must end at {states}; it is {bar.total} (bar.total += 1 for each state added to the "
            f"worklist)"
        )


# Infinite languages whose token walks come back to the start state 0 (the text, one
# single-character token at a time). State 0 is a live state like any other: a walk that
# treats it as "dead" passes every finite language and fails here, every run.
LOOPS = [(r"(ab)*c", "ababc"), (r"(abc)*d", "abcabcd"), (r"(yes|a1)*no", "a1a1no")]


@pytest.mark.task1_2
@pytest.mark.parametrize("regex, text", LOOPS)
def test_reference_walk_comes_back_to_the_start_state(regex, text):
    index = reference_index(regex)
    state, prefix = index.initial_state, b""
    for ch in text:
        allowed, want = set(index.allowed_token_ids(state)), oracle_allowed(regex, prefix)
        assert allowed == want, (
            f"regex {regex!r}, after {prefix!r} (state {state}): the allowed tokens must be {sorted(want)}; "
            f"got {sorted(allowed)} (missing {sorted(want - allowed)}, extra {sorted(allowed - want)})"
        )
        token = VOCAB.index(ch.encode())
        state, prefix = index.next_state(state, token), prefix + ch.encode()
        assert state >= 0, f"regex {regex!r}: the token {ch!r} after {prefix[:-1]!r} must be allowed; got state {state}"
    assert char_dfa(regex).walk(0, text[:2]) == 0 or char_dfa(regex).walk(0, text[:3]) == 0, (  # the case it is about
        f"test premise: in regex '{regex}', {text[:2]!r} or {text[:3]!r} leads the character DFA back to state 0; "
        f"they end in states {char_dfa(regex).walk(0, text[:2])} and {char_dfa(regex).walk(0, text[:3])} (the "
        f"regex compiler's doing, not the token index walk's)"
    )


# ---------------------------------------------------------------------------------------
# task1_3: MaskedFillStage.allowed_mask
# ---------------------------------------------------------------------------------------
@pytest.mark.task1_3
@pytest.mark.parametrize("regex", REGEXES)
def test_allowed_mask_is_the_allowed_set_as_a_bool_row(regex):
    stage, fsm = make_stage(), compiled(regex)
    for state, tokens in fsm.index.state_to_tokens.items():
        row = stage.allowed_mask(FSMState(fsm, state))
        assert row.dtype == torch.bool and row.shape == (VOCAB_SIZE,), (
            f"allowed_mask must be a bool row of the {VOCAB_SIZE} logits; got {row.dtype} {tuple(row.shape)}"
        )
        got = set(torch.nonzero(row).flatten().tolist())
        assert got == set(tokens), (
            f"regex {regex!r}, state {state}: the row must allow the index's tokens; it "
            f"also allows {sorted(got - set(tokens))[:8]} and lacks {sorted(set(tokens) - got)[:8]}"
        )
        assert not row[len(VOCAB) :].any(), (  # padding columns are never allowed
            f"regex {regex!r}, state {state}: the padding columns past the {len(VOCAB)} tokens must be False"
        )


@pytest.mark.task1_3
def test_one_stage_gives_each_grammar_its_own_rows():
    """One stage serves many regexes at once: their states share numbers (every automaton
    starts at 0), so a row kept by state number alone masks one request with another's row
    (a stranger's cache did, and passed the tests above, which ask one regex a stage)."""
    stage = make_stage()
    digits, words = compiled(r"[0-9]{4}"), compiled(r"(yes|no)")
    for fsm in (digits, words, digits):
        for state, tokens in fsm.index.state_to_tokens.items():
            got = set(torch.nonzero(stage.allowed_mask(FSMState(fsm, state))).flatten().tolist())
            alone = set(torch.nonzero(make_stage().allowed_mask(FSMState(fsm, state))).flatten().tolist())
            assert got == set(tokens), (
                f"regex {fsm.regex!r}, state {state}, asked after another regex's states: the row must "
                f"be this regex's (it allows {sorted(got - set(tokens))[:8]} and lacks "
                f"{sorted(set(tokens) - got)[:8]}); "
                + (
                    "is a row kept by its state number alone?"
                    if alone == set(tokens)
                    else "it is wrong on a fresh stage too, asked first: the row itself, not a kept one"
                )
            )


@pytest.mark.task1_3
def test_allowed_mask_returns_a_new_row_each_call():
    """The caller owns its row: a mask_logits may invert it in place, and a row kept from an
    earlier call must not change under a later one. A row cached and handed out again (or
    one buffer refilled each call) passes every test that reads each row at once."""
    stage, fsm = make_stage(), compiled(r"(yes|no)")
    start = set(fsm.index.allowed_token_ids(0))
    first = stage.allowed_mask(FSMState(fsm, 0))
    kept = first.clone()
    after_y = fsm.index.next_state(0, VOCAB.index(b"y"))
    stage.allowed_mask(FSMState(fsm, after_y))
    assert torch.equal(first, kept), (
        f"(yes|no): the row of state 0 changed when the row of state {after_y} was asked for (now True at "
        f"{torch.nonzero(first).flatten().tolist()[:8]}): each call must return a new tensor, not a shared buffer"
    )
    was = set(torch.nonzero(first).flatten().tolist())
    first.logical_not_()  # what a caller inverting its row in place does
    again = set(torch.nonzero(stage.allowed_mask(FSMState(fsm, 0))).flatten().tolist())
    assert again == start, (
        f"(yes|no) at state 0, asked again after the caller inverted its first row in place: the row must "
        f"allow {sorted(start)}; got {sorted(again)[:8]}... "
        + (
            "(a cached row was handed out twice)"
            if was == start
            else f"(the first row was already wrong, {sorted(was)[:8]}: the row itself, not a cache)"
        )
    )


def test_a_wrong_row_is_not_blamed_on_a_cache(monkeypatch):
    """An instructor's test: a student's row that also allows EOS in every state (no cache
    anywhere) failed two tests saying "is a row kept by its state number alone?" and "a
    cached row was handed out twice", sending the student after a cache they never wrote.
    Those hints now come only where the row asked first is right."""

    class EosEverywhere(MaskedFillStage):
        def allowed_mask(self, grammar):
            row = super().allowed_mask(grammar)
            row[EOS] = True
            return row

    original = make_stage
    monkeypatch.setitem(globals(), "make_stage", lambda **kw: original(EosEverywhere, **kw))
    for test in (test_one_stage_gives_each_grammar_its_own_rows, test_allowed_mask_returns_a_new_row_each_call):
        with pytest.raises(AssertionError) as failed:
            test()
        message = str(failed.value)
        assert "cache" not in message.replace("not a cache", "") and "state number alone" not in message, message
        assert "the row itself" in message, message


@pytest.mark.task1_3
def test_allowed_mask_of_a_state_with_no_tokens_is_all_false():
    stage, fsm = make_stage(), compiled(r"(yes|no)")
    row = stage.allowed_mask(FSMState(fsm, 10_000))
    assert row.shape == (VOCAB_SIZE,) and not row.any(), (
        f"(yes|no) at state 10000, which has no tokens: an all-False row of {VOCAB_SIZE}; got shape "
        f"{tuple(row.shape)} with {int(row.sum())} True"
    )
    wide = make_stage(vocab_size=1000).allowed_mask(FSMState(fsm, 0))
    n = len(fsm.index.allowed_token_ids(0))
    assert wide.shape == (1000,) and int(wide.sum()) == n, (
        f"(yes|no) at state 0 with 1000 logits: a row of 1000 with the {n} allowed tokens True; got shape "
        f"{tuple(wide.shape)} with {int(wide.sum())} True"
    )


# ---------------------------------------------------------------------------------------
# task1_4: MaskedFillStage.mask_logits
# ---------------------------------------------------------------------------------------
def oracle_row(grammar: FSMState, vocab_size: int = VOCAB_SIZE) -> torch.Tensor:
    row = torch.zeros(vocab_size, dtype=torch.bool)
    row[list(grammar.fsm.index.state_to_tokens.get(grammar.state, {}))] = True
    return row


def dead_end(req: Req) -> bool:
    """A live constrained request whose state allows no token at all."""
    return req.grammar is not None and not req.finished and not oracle_row(req.grammar).any()


def expected_masked(logits: torch.Tensor, reqs: list[Req]) -> torch.Tensor:
    """The first release's loop, written out: -inf outside each constrained row's allowed set
    (a row with nothing allowed is left alone: its request is aborted instead)."""
    out = logits.clone()
    for i, req in enumerate(reqs):
        if req.grammar is not None and not req.finished and not dead_end(req):
            out[i][~oracle_row(req.grammar)] = float("-inf")
    return out


def first_difference(got: torch.Tensor, want: torch.Tensor, rows: list[int]) -> str:
    """Where the first wrong row goes wrong: a column, the value expected and the one found."""
    if not rows:
        return ""
    i = rows[0]
    j = int((got[i] != want[i]).nonzero()[0])
    return f"; row {i}, column {j}: expected {want[i, j].item()}, got {got[i, j].item()}"


@st.composite
def batches(draw, fsm_of=compiled, max_size: int = 8) -> list[Req]:
    """Requests in random FSM states (FSMs from `fsm_of(regex)`), some unconstrained, some
    already finished."""
    reqs = []
    for _ in range(draw(st.integers(1, max_size))):
        kind = draw(st.sampled_from(["constrained", "constrained", "unconstrained", "finished"]))
        if kind == "unconstrained":
            reqs.append(make_req(None))
            continue
        fsm = fsm_of(draw(st.sampled_from(REGEXES)))
        req = make_req(fsm, draw(st.sampled_from(sorted(fsm.index.state_to_tokens))))
        if kind == "finished":
            req.finish("length", length=1)
        reqs.append(req)
    return reqs


@pytest.mark.task1_4
@settings(max_examples=60, deadline=None)
@given(batches(), st.integers(0, 2**31 - 1))
def test_mask_logits_masks_each_constrained_row(reqs, seed):
    stage = make_stage()
    stage.allowed_mask = oracle_row  # grade mask_logits alone (task1_3 has its own tests)
    logits = torch.randn(len(reqs), VOCAB_SIZE, generator=torch.Generator().manual_seed(seed))
    expected = expected_masked(logits, reqs)
    stuck = [dead_end(r) for r in reqs]
    before = [r.finished_reason for r in reqs]
    stage.mask_logits(logits, reqs)
    wrong_rows = [i for i in range(len(reqs)) if not torch.equal(logits[i], expected[i])]
    assert not wrong_rows, (
        f"mask_logits on {len(reqs)} requests: the rows {wrong_rows} differ from the oracle "
        f"(-inf exactly where the request's state allows no token, the logit elsewhere)"
        + first_difference(logits, expected, wrong_rows)
    )
    for i, (req, was_stuck, reason) in enumerate(zip(reqs, stuck, before)):
        if was_stuck:  # e.g. after the first two bytes of 文, which no token can finish
            assert req.finished_reason is not None and req.finished_reason["type"] == "abort", (
                f"request {i} is at a state that allows no token: it must be aborted; got {req.finished_reason}"
            )
        else:
            assert req.finished_reason == reason, (
                f"request {i} has allowed tokens: its finish reason must stay {reason}; got {req.finished_reason}"
            )


class RowOnAnotherDevice(torch.Tensor):
    """A row as `allowed_mask` gives it beside a GPU's logits: on the CPU. Reading it is fine;
    filling logits through it before it is moved (`.to(...)`) fails, as CUDA's masked_fill_
    fails with a mask on another device (this machine has no GPU to show it)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (torch.Tensor.to, torch.Tensor.cuda) or (func is torch.as_tensor and "device" in kwargs):
            return super().__torch_function__(func, types, args, kwargs).as_subclass(torch.Tensor)
        if func in (torch.Tensor.masked_fill_, torch.Tensor.masked_fill, torch.where, torch.Tensor.__setitem__):
            raise AssertionError(
                "the allowed row met the logits without being moved to their device: get it with "
                "self.allowed_mask(...).to(logits.device) (on a GPU, masked_fill_ with a CPU mask raises)"
            )
        return super().__torch_function__(func, types, args, kwargs)


@pytest.mark.task1_4
def test_mask_logits_moves_the_row_to_the_logits_device():
    stage = make_stage()
    stage.allowed_mask = lambda grammar: oracle_row(grammar).as_subclass(RowOnAnotherDevice)
    reqs = [make_req(compiled(r"(yes|no)")), make_req(compiled(r"1[0-9]*"))]
    logits = torch.randn(2, VOCAB_SIZE)
    before = logits.clone()
    stage.mask_logits(logits, reqs)
    assert torch.equal(logits, expected_masked(before, reqs)), "the masked rows differ from the oracle's"


@pytest.mark.task1_4
def test_mask_logits_aborts_a_request_with_nothing_allowed():
    stage = make_stage()
    stage.allowed_mask = oracle_row
    fsm = compiled(r"(yes|no)")
    stuck, fine, free = make_req(fsm, 10_000), make_req(fsm), make_req(None)
    logits = torch.randn(3, VOCAB_SIZE)
    before = logits.clone()
    stage.mask_logits(logits, [stuck, fine, free])
    assert stuck.finished_reason is not None and stuck.finished_reason["type"] == "abort", (
        f"a (yes|no) request at state 10000, where no token is allowed: expected an abort; got {stuck.finished_reason}"
    )
    assert stuck.finished_reason["kind"] == AbortKind.GRAMMAR, (
        f"the abort blames the request's grammar: expected kind AbortKind.GRAMMAR; got {stuck.finished_reason}"
    )
    message = stuck.finished_reason.get("message", "")
    assert "no token is allowed" in message and "10000" in message and "(yes|no)" in message, (
        f"the abort message must say 'no token is allowed' and name the state (10000) and the regex (yes|no); "
        f"got {message!r}"
    )
    assert not torch.isinf(logits[0]).all(), "the aborted request's row is all -inf: a row must stay samplable"
    assert fine.finished_reason is None, f"the (yes|no) request at its start must go on; got {fine.finished_reason}"
    # The regex as the client wrote it: repr() doubles each backslash (a stranger's message
    # read '1\\d*' for 1\d*, a regex the client never sent)
    escaped = make_req(compiled(r"1\d*"), 10_000)
    stage.mask_logits(torch.randn(1, VOCAB_SIZE), [escaped])
    message = (escaped.finished_reason or {}).get("message", "")
    assert r"1\d*" in message, f"the abort message must name the regex 1\\d* as written; got {message!r}"
    assert torch.equal(logits[1:], expected_masked(before, [stuck, fine, free])[1:]), (
        "the rows of the other two requests (one at (yes|no)'s start, one unconstrained) differ from the oracle"
    )


@pytest.mark.task1_4
def test_mask_logits_masks_row_i_for_request_i_and_skips_the_others():
    """Row i belongs to reqs[i], whatever comes before it: an unconstrained request first, a
    finished constrained one (its row untouched), then two constrained ones."""
    stage = make_stage()
    stage.allowed_mask = oracle_row
    fsm = compiled(r"(yes|no)")
    done = make_req(fsm)
    done.finish("stop", matched=None)
    reqs = [make_req(None), done, make_req(fsm), make_req(compiled(r"1[0-9]*"))]
    logits = torch.randn(4, VOCAB_SIZE, generator=torch.Generator().manual_seed(0))
    expected = expected_masked(logits, reqs)
    stage.mask_logits(logits, reqs)
    names = ["unconstrained (left alone)", "finished (left alone)", "(yes|no) at its start", "1[0-9]* at its start"]
    rows = [i for i in range(4) if not torch.equal(logits[i], expected[i])]
    wrong = [names[i] for i in rows]
    assert not wrong, (
        f"a batch of [unconstrained, finished, (yes|no), 1[0-9]*]: these rows differ from the oracle "
        f"(-inf outside request i's allowed set in row i; other rows untouched): {wrong}"
        + first_difference(logits, expected, rows)
    )


@pytest.mark.task1_4
def test_a_forbidden_infinite_logit_becomes_minus_inf_not_nan():
    """A logit can be +inf (a float16 overflow): forbidden, it is -inf. A row added as 0 or -inf
    gives inf + -inf = nan there, and sampling from a row holding nan fails (a stranger's
    solution); an allowed +inf stays."""
    stage = make_stage()
    stage.allowed_mask = oracle_row
    req = make_req(compiled(r"(yes|no)"))
    allowed = oracle_row(req.grammar)
    logits = torch.zeros(1, VOCAB_SIZE)
    forbidden, ok = int((~allowed).nonzero()[0]), int(allowed.nonzero()[0])
    logits[0, forbidden] = logits[0, ok] = float("inf")
    stage.mask_logits(logits, [req])
    assert logits[0, forbidden] == float("-inf") and logits[0, ok] == float("inf"), (
        f"(yes|no) at its start, +inf at the forbidden token {forbidden} and the allowed token {ok}: expected "
        f"-inf and +inf (masked_fill, not an added mask: inf + -inf is nan); got {logits[0, forbidden].item()} "
        f"and {logits[0, ok].item()}"
    )
    assert not logits.isnan().any(), "mask_logits left nan in the row"


# ---------------------------------------------------------------------------------------
# task1_5: MaskedFillStage.advance
# ---------------------------------------------------------------------------------------
@pytest.mark.task1_5
@settings(max_examples=60, deadline=None)
@given(st.sampled_from(REGEXES), st.data())
def test_advance_follows_the_token_index_to_a_clean_stop(regex, data):
    """Random allowed tokens until the request finishes: each state is the index's, and a
    stopped output matches the regex."""
    stage, fsm = make_stage(), compiled(regex)
    req, prefix = make_req(fsm), b""
    for _ in range(30):
        state = req.grammar.state
        tokens = fsm.index.state_to_tokens[state]
        if not tokens:
            break  # a dead end (two bytes of 文, which no token finishes): mask_logits aborts
        token = data.draw(st.sampled_from(sorted(tokens)), label="token")
        stage.advance(req, token)
        if token == EOS:
            assert req.finished_reason == {"type": "stop", "matched": EOS}, (
                f"regex {regex!r}, EOS after {prefix!r}: expected a stop matched by EOS; got {req.finished_reason}"
            )
            break
        prefix += VOCAB[token]
        assert req.grammar.state == tokens[token], (  # the token's end state
            f"regex {regex!r}, token {VOCAB[token]!r} after {prefix[: -len(VOCAB[token])]!r} from state {state}: the "
            f"index says state {tokens[token]}; got {req.grammar.state}"
        )
        if req.finished:
            # Only an accepting state from which nothing but EOS can follow ends by itself.
            assert req.finished_reason == {"type": "stop", "matched": None}, (
                f"regex {regex!r} after {prefix!r}: a request that ends by itself stops with matched None; got "
                f"{req.finished_reason}"
            )
            assert fsm.index.state_to_tokens[req.grammar.state] == {EOS: -1}, (
                f"regex {regex!r} after {prefix!r}: finished although more than EOS may follow (allowed "
                f"{sorted(fsm.index.state_to_tokens[req.grammar.state])})"
            )
            break
        assert set(fsm.index.state_to_tokens[req.grammar.state]) != {EOS}, (
            f"regex {regex!r} after {prefix!r}: only EOS may follow, so the request must finish; it goes on"
        )
    if req.finished:
        assert matches(regex, prefix), (regex, prefix)


@pytest.mark.task1_5
def test_advance_finish_rules():
    stage = make_stage()
    yes_no, number = compiled(r"(yes|no)"), compiled(r"1[0-9]*")
    tok = {b: VOCAB.index(b) for b in (b"yes", b"y", b"1", b"2", b"a")}

    done = make_req(yes_no)
    stage.advance(done, tok[b"yes"])  # "yes" can only be followed by EOS: finished at once
    assert done.finished_reason == {"type": "stop", "matched": None}, (
        f"(yes|no) after 'yes': only EOS may follow, so it stops with matched None; got {done.finished_reason}"
    )

    partial = make_req(yes_no)
    stage.advance(partial, tok[b"y"])
    want = yes_no.index.state_to_tokens[0][tok[b"y"]]
    assert not partial.finished and partial.grammar.state == want, (
        f"(yes|no) after 'y': goes on at state {want}; got state {partial.grammar.state}, finished "
        f"{partial.finished_reason}"
    )

    may_stop = make_req(number)  # "1" is a match, but "12" is one too: may stop != must stop
    stage.advance(may_stop, tok[b"1"])
    assert not may_stop.finished, f"1[0-9]* after '1': may stop, must not; got {may_stop.finished_reason}"
    stage.advance(may_stop, tok[b"2"])
    assert not may_stop.finished, f"1[0-9]* after '12': may stop, must not; got {may_stop.finished_reason}"
    stage.advance(may_stop, EOS)
    assert may_stop.finished_reason == {"type": "stop", "matched": EOS}, (
        f"1[0-9]* after '12' then EOS: expected a stop matched by EOS; got {may_stop.finished_reason}"
    )

    optional = make_req(compiled(r"(yes|no)s?"))  # after "yes": EOS, or one more token ("s")
    stage.advance(optional, tok[b"yes"])
    assert not optional.finished, (
        f"(yes|no)s? after 'yes': the state accepts but also allows 's', so it must go on; got "
        f"{optional.finished_reason} (finish only where EOS is the ONLY allowed token)"
    )
    stage.advance(optional, VOCAB.index(b"s"))
    assert optional.finished_reason == {"type": "stop", "matched": None}, (
        f"(yes|no)s? after 'yess': only EOS may follow, so it stops with matched None; got {optional.finished_reason}"
    )

    wrong = make_req(number)
    stage.advance(wrong, tok[b"a"])  # a token the mask would have forbidden
    assert wrong.finished_reason is not None and wrong.finished_reason["type"] == "abort", (
        f"1[0-9]* given the token 'a' (not allowed at the start): expected an abort; got {wrong.finished_reason}"
    )
    assert wrong.finished_reason["kind"] == AbortKind.GRAMMAR, (
        f"the abort blames the request's grammar: expected kind AbortKind.GRAMMAR; got {wrong.finished_reason}"
    )
    assert (
        "not allowed" in wrong.finished_reason.get("message", "") and "1[0-9]*" in wrong.finished_reason["message"]
    ), f"the abort message must say 'not allowed' and name the regex 1[0-9]*; got {wrong.finished_reason}"

    free = make_req(None)
    stage.advance(free, tok[b"a"])  # unconstrained requests are not touched
    assert free.grammar is None and not free.finished, (
        f"an unconstrained request is not touched by advance; got grammar {free.grammar!r}, finished "
        f"{free.finished_reason}"
    )


@pytest.mark.task1_5
@pytest.mark.parametrize("regex, text", [(r"1[0-9]*", b"12"), (r"(yes|no)", b"n"), (r'"[^"]*"', b'"')])
def test_eos_leaves_the_state_where_it_is(regex, text):
    """The spec: EOS finishes the request with a stop and leaves the FSM state unchanged (the
    state that accepted; a later look at the request, e.g. for a trace, still sees where it
    ended), whether or not the state accepts."""
    stage, fsm = make_stage(), compiled(regex)
    req = make_req(fsm)
    for piece in (text[i : i + 1] for i in range(len(text))):
        stage.advance(req, VOCAB.index(piece))
    before = req.grammar.state
    if fsm.index.is_final(before):
        stage.advance(req, EOS)
        assert req.finished_reason == {"type": "stop", "matched": EOS}, (
            f"regex {regex!r}, EOS after {text!r} (a match): expected a stop matched by EOS; got {req.finished_reason}"
        )
    else:  # EOS where the match is incomplete: the mask never offers it; still a stop, and no move to -1
        stage.advance(req, EOS)
        assert req.finished_reason == {"type": "stop", "matched": EOS}, (
            f"regex {regex!r}, EOS after {text!r} (not a match yet): the sheet's rule is the same in every "
            f"state, EOS finishes with a stop matched by EOS (the mask only offers it where it is a match); "
            f"got {req.finished_reason}"
        )
    assert req.grammar.state == before, f"EOS moved the state {before} -> {req.grammar.state}"


@pytest.mark.task1_5
@pytest.mark.parametrize("regex, text", LOOPS)
def test_advance_walks_through_the_start_state_again(regex, text):
    """The fast index's own next states (not task 1_2's walk): state 0 is reached again
    half-way, and the request must go on from there to a clean stop."""
    stage, fsm = make_stage(), compiled(regex)
    req = make_req(fsm)
    for i, ch in enumerate(text):
        want = fsm.index.next_state(req.grammar.state, VOCAB.index(ch.encode()))
        stage.advance(req, VOCAB.index(ch.encode()))
        if i < len(text) - 1:
            assert not req.finished and req.grammar.state == want, (
                f"regex {regex!r}, after {text[: i + 1]!r}: the request goes on in state {want}; got state "
                f"{req.grammar.state}, finished {req.finished_reason}"
            )
    assert req.finished_reason == {"type": "stop", "matched": None}, (
        f"regex {regex!r}, after {text!r}: the match is complete (only EOS may follow), so the request stops "
        f"with matched None; got {req.finished_reason}"
    )
