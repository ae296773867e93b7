"""Exercise tests of stage s7-speculative (`minisglang grade --stage s7`).

Each graded test carries the marker of the task it grades:

- task7_1  SpeculativeStage.mask_chain (minisglang/stages/s7_speculative.py): the grammar's
           mask row at every draft position, the drafts cut at the first one it forbids,
           and the grammar rolled back to where it was
- task7_2  accept_greedy (minisglang/speculative.py): the drafts the model agrees with, then
           one token of its own
- task7_3  accept_sampled (minisglang/speculative.py): rejection sampling against the masked
           distribution, so every output token is distributed as the model's masked row

The oracles never use the code under test. task7_1: the brute-force "which tokens can
still grow into a match" oracle of tests/test_exercises_s1.py over its tiny synthetic
vocabulary says which drafts are kept and what every row holds; the chain runs on a
matcher that asks that oracle (`OracleGrammar`, no automaton: the task is graded without
any earlier task's code), which also shows the grammar back where it started. task7_2:
greedy decoding one token at a time. task7_3: the exact probability of every output of
the sampler, computed from the rows, against 20000 draws (a chi-square test, fixed
seeds, false-alarm rate ALPHA per test).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_exercises_s1 import EOS, REGEXES, VOCAB, VOCAB_SIZE, make_stage, oracle_allowed
from token_names import token_list

from minisglang.backends.base import BaseGrammarObject, GrammarError
from minisglang.core import AbortKind, Req, SamplingParams
from minisglang.speculative import accept_greedy, accept_sampled
from minisglang.stages.s7_speculative import SpeculativeStage

ALPHA = 1e-3  # each chi-square test fails a correct implementation with this probability (seeds fixed)
# An early look at the counts, after this many draws, fails at once a distribution already far
# off (p-value below EARLY_ALPHA): a wrong solution then costs a tenth of the draws (the
# autograder's plausible mistakes ran each to the end), a right one (almost) never fails there.
EARLY_LOOK, EARLY_ALPHA = 2000, 1e-9
ID = {data: i for i, data in enumerate(VOCAB) if data}


# ---------------------------------------------------------------------------------------
# task7_1: the mask chain
# ---------------------------------------------------------------------------------------
class OracleGrammar(BaseGrammarObject):
    """A matcher of `regex` over the synthetic vocabulary that asks the brute-force oracle
    at every step: the chain runs on it, so task 7_1 is graded alone (no automaton, no
    earlier task's code). `accepted` is every token it holds, EOS included."""

    def __init__(self, regex: str, accepted: list[int]):
        self.regex, self.accepted = regex, list(accepted)

    def allowed(self) -> set[int]:
        return set() if EOS in self.accepted else oracle_allowed(self.regex, spelled(self.accepted))

    def accept_token(self, token_id: int) -> None:
        if token_id not in self.allowed():
            raise GrammarError(
                f"mask_chain asked the grammar to accept {token_text(token_id)} (id {token_id}), "
                f"which it forbids after {spelled(self.accepted)!r} (a draft is checked against the "
                f"row filled before accepting it, and the chain stops at the first one it forbids)"
            )
        self.accepted.append(token_id)

    def rollback(self, k: int) -> None:
        if k > len(self.accepted):
            raise GrammarError(
                f"mask_chain called rollback({k}) on a grammar holding {len(self.accepted)} "
                f"token(s) in all: roll back exactly the drafts the chain accepted"
            )
        del self.accepted[len(self.accepted) - k :]

    def is_terminated(self) -> bool:
        return EOS in self.accepted or self.allowed() == {EOS}

    def prepare(self, seconds: float | None = None) -> bool:
        return True

    def fill_vocab_mask(self, vocab_mask: torch.Tensor, idx: int) -> None:
        if EOS in self.accepted:  # as xgrammar's matcher does: it raises once it has taken EOS
            raise GrammarError(
                f"mask_chain asked for a mask row after the grammar accepted EOS (it holds "
                f"{spelled(self.accepted)!r} and EOS): a matcher that has ended may refuse to fill one "
                f"(xgrammar raises), so ask is_terminated before filling the next row"
            )
        vocab_mask[idx] = pack(self.allowed())


def pack(tokens: set[int]) -> torch.Tensor:
    """Token ids -> one packed int32 row (bit j of word w is token 32w + j)."""
    words = [0] * ((VOCAB_SIZE + 31) // 32)
    for t in tokens:
        words[t // 32] |= 1 << (t % 32)
    return torch.tensor([w - (1 << 32) if w >= 1 << 31 else w for w in words], dtype=torch.int32)


def unpack(rows: torch.Tensor) -> torch.Tensor:
    """Packed int32 rows [n, W] -> bool [n, VOCAB_SIZE]."""
    words = rows.to(torch.int64) & 0xFFFFFFFF
    bits = (words.unsqueeze(-1) >> torch.arange(32)) & 1
    return bits.flatten(1)[:, :VOCAB_SIZE].bool()


def spelled(tokens: list[int]) -> bytes:
    return b"".join(VOCAB[t] or b"" for t in tokens)


def named(tokens, most: int = 8) -> str:
    """Token ids as a failure message shows them: "['1' (id 40), EOS (id 3)]", `most` at most."""
    return token_list(tokens, token_text, most)


def token_text(token: int) -> str:
    """One token's text for a message: its bytes as text, EOS, or "special" (or padding)."""
    data = VOCAB[token] if 0 <= token < len(VOCAB) else None
    return "EOS" if token == EOS else "special" if data is None else repr(data.decode("utf-8", "backslashreplace"))


def oracle_row(regex: str, data: bytes) -> torch.Tensor:
    return unpack(pack(oracle_allowed(regex, data))[None])[0]


def assert_row(rows: torch.Tensor, i: int, regex: str, before: list[int], kept: int) -> None:
    """Row i of a chain that kept `kept` drafts must be the grammar's mask after the tokens
    `before`, bit for bit; a failure names the tokens it wrongly allows or leaves out."""
    got, want = unpack(rows[i : i + 1])[0], oracle_row(regex, spelled(before))
    if torch.equal(got, want):
        return
    extra, missing = (got & ~want).nonzero().flatten(), (want & ~got).nonzero().flatten()
    chooses = f"the row that chooses draft {i}" if i < kept else "the row after the last kept draft"
    wrong = ([f"allows {named(extra)}, which the grammar forbids there"] if len(extra) else []) + (
        [f"leaves out {named(missing)}, which the grammar allows"] if len(missing) else []
    )
    raise AssertionError(
        f"row {i} ({chooses}) must be the mask of regex {regex!r} after {spelled(before)!r}; it {', and '.join(wrong)}"
    )


@pytest.fixture(scope="module")
def stage():
    """Stage s7 over the synthetic vocabulary (the chain reads its vocabulary size and its
    grammar work budget; its fsm backend compiles nothing here). The oracle grammars are
    slow Python: the budget is made wide enough that no call of theirs is charged past it
    (the chain's library calls are charged to their request, and a slow one cuts the chain:
    not what these tests are about)."""
    made = make_stage(
        SpeculativeStage,
        compile_in="thread",
        automaton="eager",
        grammar_step_seconds=60.0,
        max_grammar_call_seconds=60.0,
        max_grammar_seconds=3600.0,
    )
    yield made
    made.shutdown()


def request_at(regex: str, prefix: list[int]) -> Req:
    """A request whose grammar has accepted `prefix`."""
    req = Req(prompt="p", origin_input_ids=[2], sampling_params=SamplingParams(regex=regex))
    req.grammar = OracleGrammar(regex, prefix)
    return req


def oracle_chain(regex: str, prefix: list[int], drafts: list[int]) -> tuple[list[int], bool, str]:
    """(the drafts the grammar allows one after another, whether the last of them ends the
    match, why the chain stops there, in words): a draft is kept if it may follow the prefix
    and the drafts before it, and some token may follow it (a draft into a dead end, such as
    half of 文 with no token for the rest, is left for the next step to meet as s6 would);
    after EOS, or after a draft that only EOS may follow, nothing more is kept."""
    data, kept = spelled(prefix), []
    for i, draft in enumerate(drafts):
        if draft not in oracle_allowed(regex, data):
            return kept, False, f"draft {i}, {token_text(draft)}, is not allowed after {data!r}: the chain stops there"
        after = set() if draft == EOS else oracle_allowed(regex, data + spelled([draft]))
        if draft == EOS or after == {EOS}:
            return (
                kept + [draft],
                True,
                (f"draft {i}, {token_text(draft)}, ends the match: it is kept, and no draft after it"),
            )
        if not after:
            return kept, False, f"no token can follow draft {i}, {token_text(draft)} (a dead end): it is not kept"
        kept.append(draft)
        data += spelled([draft])
    return kept, False, "every draft is allowed"


@st.composite
def prefix_and_drafts(draw):
    """A regex, a prefix the grammar allows, and drafts: mostly allowed tokens, sometimes
    any token of the vocabulary (often forbidden), EOS among them."""
    regex = draw(st.sampled_from(REGEXES))
    walked, data = [], b""
    for _ in range(draw(st.integers(0, 12))):
        allowed = [t for t in sorted(oracle_allowed(regex, data) - {EOS}) if oracle_allowed(regex, data + VOCAB[t])]
        if not allowed:
            break
        walked.append(draw(st.sampled_from(allowed)))
        data += spelled(walked[-1:])
    # The prefix stops where the match may go on (a request whose match ended has left).
    cuts = [i for i in range(len(walked) + 1) if oracle_allowed(regex, spelled(walked[:i])) != {EOS}]
    cut = draw(st.sampled_from(cuts))
    prefix, drafts = walked[:cut], walked[cut:]
    if draw(st.booleans()):  # a wrong guess somewhere, and guesses after it
        at = draw(st.integers(0, len(drafts)))
        noise = draw(st.lists(st.sampled_from(sorted(set(range(len(VOCAB))) - {0, 1, 5})), min_size=1, max_size=3))
        drafts = drafts[:at] + noise
    return regex, prefix, drafts


def check(ok: bool, message: str) -> None:
    """Fail with `message` alone: pytest's own account of a failed `assert a and b` (kept
    drafts and a row count) printed `assert ([57] == [57] ...`, equal values, when only the
    rows were wrong."""
    if not ok:
        pytest.fail(message)


@pytest.mark.task7_1
@given(prefix_and_drafts())
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_the_chain_keeps_the_allowed_drafts_with_one_row_per_position(stage, case):
    """Row i is the mask at the position that chooses draft i (the grammar after the prefix
    and drafts[:i]); the drafts stop at the first one the grammar forbids, or after the one
    that ends the match."""
    regex, prefix, drafts = case
    req = request_at(regex, prefix)
    kept, rows = stage.mask_chain(req, drafts)
    expected, ends, why = oracle_chain(regex, prefix, drafts)
    where = f"regex {regex!r} after {spelled(prefix)!r}, drafts {named(drafts)}"
    assert kept == expected, f"{where}: keep {named(expected)} ({why}); mask_chain kept {named(kept)}"
    words = (VOCAB_SIZE + 31) // 32
    assert rows.shape == (len(kept) + 1, words), (
        f"{where}: {len(kept)} draft(s) kept need {len(kept) + 1} mask row(s) of {words} int32 words (one per kept "
        f"draft, and one for the token after them); got shape {tuple(rows.shape)}"
    )
    read = len(kept) if ends else len(kept) + 1  # after the match ends, no row is read
    for i in range(read):
        assert_row(rows, i, regex, prefix + kept[:i], len(kept))


@pytest.mark.task7_1
@given(prefix_and_drafts())
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_the_chain_leaves_the_grammar_where_it_was(stage, case):
    """After the chain the grammar holds the prefix again, exactly (the drafts it accepted
    rolled back, no more), and a second chain over the same drafts gives the same answer."""
    regex, prefix, drafts = case
    req = request_at(regex, prefix)
    first_kept, first_rows = stage.mask_chain(req, drafts)
    where = f"regex {regex!r} after {spelled(prefix)!r}, drafts {named(drafts)}"
    assert req.grammar.accepted == prefix, (
        f"{where}: after mask_chain the grammar must hold the prefix {named(prefix)} again (roll back exactly the "
        f"drafts the chain accepted); it holds {named(req.grammar.accepted)}"
    )
    again_kept, again_rows = stage.mask_chain(req, drafts)
    assert again_kept == first_kept and torch.equal(again_rows, first_rows), (
        f"{where}: a second mask_chain over the same drafts must answer as the first; the first kept "
        f"{named(first_kept)} with rows of shape {tuple(first_rows.shape)}, the second {named(again_kept)} with "
        f"{tuple(again_rows.shape)}{' (the same drafts, other rows)' if again_kept == first_kept else ''}"
    )


@pytest.mark.task7_1
def test_the_chain_stops_at_a_forbidden_draft(stage):
    """`(yes|no)`: y, e allowed, then x is not: two drafts kept, three rows (the third is
    the row where the model chooses its own token instead of x). And the row is the judge:
    on a matcher whose rows forbid a token its `accept_token` takes, that draft stops the chain."""
    req = request_at(r"(yes|no)", [])
    drafts = [ID[b"y"], ID[b"e"], ID[b"x"], ID[b"s"]]
    kept, rows = stage.mask_chain(req, drafts)
    assert drafts == [ID[b"y"], ID[b"e"], ID[b"x"], ID[b"s"]], (
        f"mask_chain changed its drafts argument in place (now {named(drafts)}): return the kept drafts as a new "
        f"list (a slice), and leave the caller's as it was"
    )
    assert kept == [ID[b"y"], ID[b"e"]], (
        f"regex '(yes|no)', drafts {named(drafts)}: 'y' and 'e' are allowed, 'x' is not after 'ye', so the chain "
        f"keeps {named(drafts[:2])} and stops; got {named(kept)}"
    )
    assert rows.shape[0] == 3, (
        f"regex '(yes|no)', two drafts kept: three rows (the third chooses the model's "
        f"own token instead of 'x'); got {rows.shape[0]}"
    )
    assert_row(rows, 2, r"(yes|no)", drafts[:2], len(kept))
    # The row judges the draft, not `accept_token`: a matcher's mask may be narrower than
    # what it accepts (xgrammar's UTF-8 guard), so a draft the row forbids stops the chain
    # even where accepting it would not raise.
    regex, drafts = r"(yes|yak|no)", [ID[b"y"], ID[b"e"], ID[b"s"]]
    req = Req(prompt="p", origin_input_ids=[2], sampling_params=SamplingParams(regex=regex))
    req.grammar = GuardedOracleGrammar(regex, [], guarded={ID[b"e"]})
    kept, rows = stage.mask_chain(req, drafts)
    check(
        kept == [ID[b"y"]] and rows.shape[0] == 2,
        f"regex {regex!r} on a matcher whose rows forbid 'e' (though its accept_token would take "
        f"it), drafts {named(drafts)}: the row decides, so the chain keeps {named(drafts[:1])} with 2 rows "
        f"(check allows(row, draft) before accepting the draft); got {named(kept)} with {rows.shape[0]} row(s)",
    )
    assert req.grammar.accepted == [], (
        f"the chain must leave the grammar at the start; it holds {named(req.grammar.accepted)}"
        f"{rollback_hint(req.grammar.accepted, [])}"
    )


class GuardedOracleGrammar(OracleGrammar):
    """The oracle matcher whose rows also forbid the `guarded` tokens, which `accept_token`
    (the oracle's allowed set) still takes, as xgrammar's UTF-8 guard narrows its matcher's mask."""

    def __init__(self, regex: str, accepted: list[int], guarded: set[int]):
        super().__init__(regex, accepted)
        self.guarded = guarded

    def fill_vocab_mask(self, vocab_mask: torch.Tensor, idx: int) -> None:
        vocab_mask[idx] = pack(self.allowed() - self.guarded)


class RefusingOracleGrammar(OracleGrammar):
    """The oracle matcher whose `accept_token` refuses the `refused` tokens, which its rows
    still allow (a row wider than what the matcher takes: a backend's bug, or a budget that
    runs out inside the call)."""

    def __init__(self, regex: str, accepted: list[int], refused: set[int]):
        super().__init__(regex, accepted)
        self.refused = refused

    def accept_token(self, token_id: int) -> None:
        if token_id in self.refused:
            raise GrammarError(f"token {token_text(token_id)} refused")
        super().accept_token(token_id)


@pytest.mark.task7_1
def test_an_accept_that_raises_rolls_back_only_what_was_accepted(stage):
    """An error out of `accept_token` is a way out too: the chain rolls back the drafts the
    grammar took, not the one it refused. `(yes|no)` after 'y', drafts 'e' then 's' refused
    by the matcher: the error goes to the caller, and the grammar holds 'y' again."""
    regex, prefix, drafts = r"(yes|no)", [ID[b"y"]], [ID[b"e"], ID[b"s"]]
    req = Req(prompt="p", origin_input_ids=[2], sampling_params=SamplingParams(regex=regex))
    req.grammar = RefusingOracleGrammar(regex, prefix, refused={ID[b"s"]})
    try:
        stage.mask_chain(req, drafts)
    except GrammarError:
        pass
    else:
        pytest.fail(
            f"regex {regex!r} after 'y', drafts {named(drafts)}: the matcher's accept_token raised GrammarError "
            "on 's', and mask_chain returned: the error must go to the caller (its step aborts the request with "
            "it), after the rollback; do not catch it"
        )
    assert req.grammar.accepted == prefix, (
        f"regex {regex!r} after 'y', drafts {named(drafts)}, the matcher's accept_token raising on 's': the "
        f"grammar must hold 'y' again, it holds {named(req.grammar.accepted)} (count a draft once "
        f"accept_token returned, not before calling it: the refused draft was never accepted)"
    )


class FixedSetGrammar(OracleGrammar):
    """A matcher that allows the same tokens at every position, whatever it accepted."""

    def __init__(self, tokens: set[int]):
        super().__init__("(any of a fixed set)", [])
        self.tokens = tokens

    def allowed(self) -> set[int]:
        return self.tokens


@pytest.mark.task7_1
def test_a_row_whose_words_cancel_out_is_not_a_dead_end(stage):
    """A row allows nothing only when every word is 0: tokens 6 and 38..63 make the words
    64 and -64 (bit 31 is the sign bit), whose sum is 0 though the row allows 27 tokens."""
    tokens = {6, *range(38, 64)}
    assert int(pack(tokens).sum()) == 0 and bool(pack(tokens).any())
    drafts = [38, 39, 40]
    req = Req(prompt="p", origin_input_ids=[2], sampling_params=SamplingParams(regex="x"))
    req.grammar = FixedSetGrammar(tokens)
    kept, rows = stage.mask_chain(req, drafts)
    check(
        kept == drafts and rows.shape[0] == 4,
        f"a grammar allowing tokens 6 and 38..63 at every position (row words {pack(tokens).tolist()}), drafts "
        f"{drafts}: every draft is allowed and no row is empty, so all are kept with 4 rows; got {kept} with "
        f"{rows.shape[0]} row(s) "
        + (
            "(a row is empty when no bit is set: `.any()`, not a sum or a maximum of the words)"
            if kept != drafts
            else "(every draft kept: one row per draft and one after the last, rows[:len(kept) + 1])"
        ),
    )


@pytest.mark.task7_1
def test_the_chain_ends_with_the_draft_that_ends_the_match(stage):
    """EOS drafted where the match may end is kept and ends the chain; so is a token after
    which only EOS may follow. The drafts after either are dropped, never accepted."""
    req = request_at(r"1[0-9]*", [])
    drafts = [ID[b"1"], EOS, ID[b"2"]]
    kept, _ = stage.mask_chain(req, drafts)
    assert kept == [ID[b"1"], EOS], (
        f"regex '1[0-9]*', drafts {named(drafts)}: EOS may follow '1' and ends the match, so the chain keeps "
        f"{named(drafts[:2])} (EOS included) and drops the draft after it; got {named(kept)}"
    )
    req = request_at(r"(yes|no)", [])
    drafts = [ID[b"no"], EOS, EOS]
    kept, rows = stage.mask_chain(req, drafts)
    check(
        kept == [ID[b"no"]] and rows.shape[0] == 2,
        f"regex '(yes|no)', drafts {named(drafts)}: only EOS may follow 'no', so 'no' ends the match: keep "
        f"{named(drafts[:1])} with 2 rows, and nothing after it; got {named(kept)} with {rows.shape[0]} row(s)",
    )
    assert req.grammar.accepted == [], (
        f"regex '(yes|no)', drafts {named(drafts)}: the chain must leave the "
        f"grammar at the start; it holds {named(req.grammar.accepted)}"
    )


@pytest.mark.task7_1
def test_no_drafts_gives_the_one_row_s6_would_fill(stage):
    """A request without drafts in a verify step (another request has some): the chain keeps
    nothing and returns row 0 alone, the mask s6 fills, with the grammar untouched."""
    req = request_at(r"(yes|no)", [ID[b"y"]])
    kept, rows = stage.mask_chain(req, [])
    check(
        kept == [] and rows.shape[0] == 1,
        f"regex '(yes|no)' after 'y', no drafts: nothing is kept and one row returned (the mask for the next "
        f"token); got {named(kept)} with {rows.shape[0]} row(s)",
    )
    assert_row(rows, 0, r"(yes|no)", [ID[b"y"]], 0)
    assert req.grammar.accepted == [ID[b"y"]], (
        f"regex '(yes|no)' after 'y', no drafts: the grammar must still hold ['y']; it holds "
        f"{named(req.grammar.accepted)}"
    )


@pytest.mark.task7_1
@pytest.mark.parametrize("prefix_len", [0, 1])
def test_every_draft_allowed_keeps_them_all_with_a_row_after_the_last(stage, prefix_len):
    """`1[0-9]*`, the text 1234 split into a prefix and the drafts, each of which the grammar
    allows and none of which ends the match: every draft is kept, with one row per draft and
    the row after the last (where the model chooses its own token), and the grammar is rolled
    back by all of them."""
    regex = r"1[0-9]*"
    text = [ID[b"1"], ID[b"2"], ID[b"3"], ID[b"4"]]
    prefix, drafts = text[:prefix_len], text[prefix_len:]
    req = request_at(regex, prefix)
    kept, rows = stage.mask_chain(req, drafts)
    where = f"regex {regex!r} after {spelled(prefix)!r}, drafts {named(drafts)}"
    assert kept == drafts, f"{where}: the grammar allows every draft, so all are kept; mask_chain kept {named(kept)}"
    assert rows.shape[0] == len(drafts) + 1, (
        f"{where}: {len(drafts)} drafts kept need {len(drafts) + 1} rows (the last chooses the model's own token "
        f"after the last draft); got {rows.shape[0]}"
    )
    for i in range(len(drafts) + 1):
        assert_row(rows, i, regex, prefix + drafts[:i], len(drafts))
    assert req.grammar.accepted == prefix, (
        f"{where}: after mask_chain the grammar must hold the prefix {named(prefix)} again (roll back every "
        f"draft it accepted, the last one included); it holds {named(req.grammar.accepted)}"
    )


def rollback_hint(held: list[int], prefix: list[int]) -> str:
    """Why a chain that stopped after accepting a draft it does not keep left the grammar
    holding `held` instead of `prefix`, in words, for a failure message."""
    if len(held) > len(prefix):
        return (
            f" ({len(held) - len(prefix)} token(s) too many: roll back every token the grammar accepted, the draft "
            f"that reached this state too, though it is not kept; count what it accepted, not the drafts kept)"
        )
    return " (rolled back too far, into the prefix: roll back exactly the tokens the chain accepted, once)"


class BudgetedOracleGrammar(OracleGrammar):
    """The oracle matcher whose next row does not fit this step's grammar budget once it
    holds `ready_until` tokens: `ready` says False there (as s5's lazy automaton may)."""

    def __init__(self, regex: str, accepted: list[int], ready_until: int):
        super().__init__(regex, accepted)
        self.ready_until = ready_until

    def needs_work(self) -> bool:
        return len(self.accepted) >= self.ready_until

    def prepare(self, seconds: float | None = None) -> bool:
        return len(self.accepted) < self.ready_until

    def fill_vocab_mask(self, vocab_mask: torch.Tensor, idx: int) -> None:
        # A real matcher would make this row anyway, with no bound on the time it takes: the
        # very work the step's budget was to cut short.
        if self.needs_work():
            raise GrammarError(
                f"mask_chain filled row {idx} after {spelled(self.accepted)!r}, where self.work.ready(req) says "
                f"False (the row does not fit this step's grammar budget): ask the budget right after accepting "
                f"a draft, before filling the next row"
            )
        super().fill_vocab_mask(vocab_mask, idx)


@pytest.mark.task7_1
@pytest.mark.parametrize("prefix_len, ready_after", [(0, 1), (0, 2), (1, 2)])
def test_the_chain_stops_before_a_state_the_budget_could_not_prepare(stage, prefix_len, ready_after):
    """`1[0-9]*`, the text 1234 split into a prefix of `prefix_len` tokens and the drafts: once
    the grammar has accepted `ready_after` drafts its next row could not be made this step, so
    that draft is not kept (the row after it does not exist); every row returned is the
    grammar's own."""
    regex = r"1[0-9]*"
    text = [ID[b"1"], ID[b"2"], ID[b"3"], ID[b"4"]]
    prefix, drafts = text[:prefix_len], text[prefix_len:]
    req = Req(prompt="p", origin_input_ids=[2], sampling_params=SamplingParams(regex=regex))
    req.grammar = BudgetedOracleGrammar(regex, prefix, ready_until=len(prefix) + ready_after)
    kept, rows = stage.mask_chain(req, drafts)
    want = drafts[: ready_after - 1]
    assert kept == want, (
        f"regex {regex!r} after {spelled(prefix)!r}, drafts {named(drafts)}: the grammar is not "
        f"ready after {ready_after} accepted draft(s), so the chain keeps {named(want)}; got "
        f"{named(kept)}"
    )
    assert rows.shape[0] == len(want) + 1, (
        f"regex {regex!r} after {spelled(prefix)!r}: {len(want)} draft(s) kept "
        f"need {len(want) + 1} row(s); got {rows.shape[0]}"
    )
    for i in range(len(want) + 1):
        assert_row(rows, i, regex, prefix + want[:i], len(want))
    assert req.grammar.accepted == prefix, (
        f"regex {regex!r}, drafts {named(drafts)}: the chain must leave the "
        f"grammar holding the prefix {named(prefix)}; it holds "
        f"{named(req.grammar.accepted)}"
        f"{rollback_hint(req.grammar.accepted, prefix)}"
    )


class DeadEndOracleGrammar(OracleGrammar):
    """The oracle matcher that allows nothing once it holds `dead_after` tokens, though the
    match is not over (a state whose continuation no token spells)."""

    def __init__(self, regex: str, accepted: list[int], dead_after: int):
        super().__init__(regex, accepted)
        self.dead_after = dead_after

    def allowed(self) -> set[int]:
        return set() if len(self.accepted) >= self.dead_after else super().allowed()


@pytest.mark.task7_1
@pytest.mark.parametrize("dead_after", [1, 2, 3])
def test_the_chain_stops_before_a_state_that_allows_nothing(stage, dead_after):
    """`1[0-9]*` drafted 1 2 3 4, on a matcher that allows nothing after `dead_after` tokens:
    the draft that leads there is not kept (no row after it could choose a token; the next
    step meets that state as s6 would)."""
    regex, drafts = r"1[0-9]*", [ID[b"1"], ID[b"2"], ID[b"3"], ID[b"4"]]
    req = Req(prompt="p", origin_input_ids=[2], sampling_params=SamplingParams(regex=regex))
    req.grammar = DeadEndOracleGrammar(regex, [], dead_after)
    kept, rows = stage.mask_chain(req, drafts)
    want = drafts[: dead_after - 1]
    check(
        kept == want and rows.shape[0] == len(want) + 1,
        f"drafts {named(drafts)} on a grammar that allows nothing after {dead_after} token(s): the draft that "
        f"leads there is not kept (no row after it could choose a token), so keep {named(want)} with "
        f"{len(want) + 1} row(s); got {named(kept)} with {rows.shape[0]} row(s)",
    )
    assert req.grammar.accepted == [], (
        f"drafts {named(drafts)} on a grammar that allows nothing after "
        f"{dead_after} token(s): the chain must leave the grammar at the start; it "
        f"holds {named(req.grammar.accepted)}"
        f"{rollback_hint(req.grammar.accepted, [])}"
    )


@pytest.mark.task7_1
def test_a_state_not_ready_stops_the_chain_even_where_the_match_could_end(stage):
    """`(yes|no)` drafted `no` EOS, with the row after `no` beyond this step's budget: the
    budget is asked first, so `no` is not kept this step, although only EOS could follow it
    (the next step, with the row made, ends the request as s6 would)."""
    regex = r"(yes|no)"
    req = Req(prompt="p", origin_input_ids=[2], sampling_params=SamplingParams(regex=regex))
    req.grammar = BudgetedOracleGrammar(regex, [], ready_until=1)
    kept, rows = stage.mask_chain(req, [ID[b"no"], EOS])
    check(
        kept == [] and rows.shape[0] == 1,
        f"the grammar is not ready after 'no': nothing is kept and one row returned (the budget is "
        f"checked before whether the match is over); got {named(kept)} with {rows.shape[0]} row(s)",
    )


class ClockedOracleGrammar(OracleGrammar):
    """An oracle grammar each of whose tokens costs `seconds` on the stage's work clocks (faked:
    the test reads no real time)."""

    def __init__(self, regex: str, accepted: list[int], now: list[float], seconds: float):
        super().__init__(regex, accepted)
        self.now, self.seconds = now, seconds

    def accept_token(self, token_id: int) -> None:
        self.now[0] += self.seconds
        super().accept_token(token_id)


@pytest.mark.task7_1
def test_the_chains_grammar_calls_are_charged_to_the_request():
    """The chain walks the grammar through `g`, the charged grammar the given code made, as
    s6's steps charge their masks and tokens: a draft whose token takes longer than
    max_grammar_call_seconds aborts the request, and no draft is kept. Walked through
    `req.grammar` itself, a slow grammar's drafts were accepted at any cost."""
    now = [0.0]
    stage = make_stage(
        SpeculativeStage,
        compile_in="thread",
        automaton="eager",
        grammar_step_seconds=60.0,
        max_grammar_call_seconds=0.5,
        max_grammar_seconds=3600.0,
    )
    try:
        stage.work.clock = stage.work.cpu_clock = lambda: now[0]
        req = Req(prompt="p", origin_input_ids=[2], sampling_params=SamplingParams(regex=r"1[0-9]*"))
        req.grammar = ClockedOracleGrammar(r"1[0-9]*", [], now, seconds=2.0)
        drafts = [ID[b"1"], ID[b"2"], ID[b"3"]]
        kept, _ = stage.mask_chain(req, drafts)
        assert req.finished and req.finished_reason.get("kind") == AbortKind.GRAMMAR, (
            f"regex '1[0-9]*', drafts {named(drafts)} on a grammar whose every token takes 2 s, with "
            f"max_grammar_call_seconds 0.5: the first draft's accept_token, made through `g` (the "
            f"ChargedGrammar the given code built), is charged and aborts the request; got finished_reason "
            f"{req.finished_reason} (walk the chain with `g`, not `req.grammar`)"
        )
        assert kept == [], f"an aborted request keeps no draft; the chain kept {named(kept)}"
        assert req.grammar.accepted == [], f"the grammar must be rolled back; it holds {named(req.grammar.accepted)}"
    finally:
        stage.shutdown()


# ---------------------------------------------------------------------------------------
# task7_2: greedy acceptance
# ---------------------------------------------------------------------------------------
def token_ids(got, name: str) -> list[int]:
    """`got`, what `name` returned, if it is a list of Python ints (token ids). A 0-d tensor
    compares equal to its int (`[torch.tensor(2)] == [2]` is True), so without this check a
    solution that returns tensors would pass the comparisons below and hand the engine tensors
    for token ids."""
    if isinstance(got, list) and all(type(t) is int for t in got):
        return got
    kinds = sorted({type(t).__name__ for t in got}) if isinstance(got, list | tuple) else []
    raise AssertionError(
        f"{name} must return a list of Python ints (token ids); it returned a {type(got).__name__}"
        + (f" holding {', '.join(kinds)}" if kinds else "")
        + f": {got!r} (int(...) a tensor's value, or .tolist() a tensor of ids)"
    )


def unchanged(before: torch.Tensor, after: torch.Tensor, name: str, what: str) -> None:
    """`name` must leave its `what` argument as it was: the engine reads the rows again, and a
    test that calls it 20000 times on the same rows would otherwise judge rows it rewrote."""
    if torch.equal(before, after):
        return
    changed = (before != after).nonzero().tolist()[:4]
    raise AssertionError(
        f"{name} changed its {what} argument in place (at [row, token] {changed}: "
        f"{[float(before[i, t]) for i, t in changed]} -> {[float(after[i, t]) for i, t in changed]}): "
        f"work on a copy (.clone()) of a row before setting a token's entry"
    )


def greedy(logits: torch.Tensor, drafts: list[int]) -> list[int]:
    before = logits.clone()
    got = accept_greedy(logits, drafts)
    unchanged(before, logits, "accept_greedy", "logits")
    return token_ids(got, "accept_greedy")


def one_at_a_time_greedy(logits: torch.Tensor, drafts: list[int]) -> list[int]:
    """The oracle: decode greedily one position at a time; the forward saw position i + 1
    only if the token at i was the draft, so stop at the first disagreement."""
    out = []
    for i in range(len(drafts) + 1):
        tok = int(torch.argmax(logits[i]))
        out.append(tok)
        if i == len(drafts) or tok != drafts[i]:
            return out
    return out


def greedy_story(logits: torch.Tensor, drafts: list[int], want: list[int]) -> str:
    """How one-token-at-a-time greedy decoding reaches `want`, in words, for a failure
    message: each row's argmax, where the drafts part from it, and the rows with tied maxima."""
    picks = [int(torch.argmax(row)) for row in logits[: len(want)]]
    k = len(want) - 1
    if k == len(drafts):
        how = (
            f"every draft equals its row's argmax, so all {k} draft(s) are kept, then row {k}'s argmax, "
            f"{picks[k]} (the model's own token after the last draft)"
            if drafts
            else f"no drafts: one greedy step, row 0's argmax, {picks[0]}"
        )
    else:
        how = (
            f"draft {k} ({drafts[k]}) is not row {k}'s argmax ({picks[k]}), so the output is the {k} draft(s) "
            f"before it, then {picks[k]}, and stops"
        )
    ties = [
        f"row {i} ties tokens {ids} at its maximum"
        for i, row in enumerate(logits[: len(want)])
        if len(ids := (row == row.max()).nonzero().flatten().tolist()) > 1
    ]
    tied = f" ({'; '.join(ties)}: argmax takes the first)" if ties else ""
    rows = f"rows 0-{k}" if k else "row 0"
    return f"drafts {drafts}, argmax of {rows}: {picks}{tied}; {how}: expected {want}"


@pytest.mark.task7_2
@given(st.integers(0, 2**32 - 1), st.integers(0, 5), st.integers(2, 6))
def test_greedy_acceptance_equals_one_token_at_a_time(seed, m, vocab):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randint(0, 3, (m + 1, vocab), generator=g).float()  # ties too: argmax takes the first
    logits[torch.rand(m + 1, vocab, generator=g) < 0.3] = float("-inf")  # the grammar's mask
    logits[:, 0] = logits[:, 0].clamp(min=-1)  # a masked row keeps a token
    picks = logits.argmax(-1).tolist()
    # drafts that mostly agree with the model, sometimes not
    drafts = [
        p if torch.rand((), generator=g) < 0.7 else int(torch.randint(0, vocab, (), generator=g)) for p in picks[:m]
    ]
    got = greedy(logits, drafts)
    want = one_at_a_time_greedy(logits, drafts)
    assert got == want, f"{greedy_story(logits, drafts, want)}; accept_greedy gave {got}"


@pytest.mark.task7_2
def test_greedy_acceptance_reads_the_models_own_dtype():
    """`logits` are the model's: bfloat16 on a GPU, on its device. Torch's own argmax reads
    them there; `.numpy()` has no bfloat16 (and no GPU tensor), so a solution through numpy
    failed only in production (a stranger's solution)."""
    logits = torch.tensor([[0.0, 5.0, 1.0], [3.0, 0.0, 1.0], [0.0, 1.0, 2.0]], dtype=torch.bfloat16)
    try:
        got = greedy(logits, [1, 0])
    except (TypeError, RuntimeError) as e:
        raise AssertionError(
            f"accept_greedy on bfloat16 logits (a GPU model's) raised {type(e).__name__}: {e}; keep to torch's "
            f"argmax (a GPU tensor has no .numpy() either)"
        ) from None
    assert got == [1, 0, 2], f"{greedy_story(logits.float(), [1, 0], [1, 0, 2])}; accept_greedy gave {got}"
    # Nor a copy in another dtype: two float64 logits 1e-12 apart tie in float32, and the
    # first id won (a stranger's `.float().numpy().argmax`, which passed the bfloat16 case).
    close = torch.tensor([[1.0, 1.0 + 1e-12, -1.0]], dtype=torch.float64)
    got = greedy(close, [])
    assert got == [1], f"float64 logits {close.tolist()[0]}: the largest is id 1; accept_greedy gave {got}"


@pytest.mark.task7_2
def test_all_drafts_kept_then_the_models_own_token():
    logits = torch.tensor([[0.0, 5.0, 1.0], [3.0, 0.0, 1.0], [0.0, 1.0, 2.0]])
    got = greedy(logits, [1, 0])
    assert got == [1, 0, 2], f"{greedy_story(logits, [1, 0], [1, 0, 2])}; accept_greedy gave {got}"
    got = greedy(logits[:1], [])  # no drafts: one plain greedy step
    assert got == [1], f"{greedy_story(logits[:1], [], [1])}; accept_greedy gave {got}"


@pytest.mark.task7_2
def test_a_draft_the_mask_forbids_is_replaced_by_the_best_allowed_token():
    """The model's raw favourite (token 1) is masked at position 0: the draft 1 is not
    kept; the best allowed token (2) is the request's token, and nothing after it."""
    logits = torch.tensor([[0.0, float("-inf"), 1.0], [0.0, 9.0, 0.0]])
    got = greedy(logits, [1])
    assert got == [2], f"token 1 is masked (-inf) in row 0; {greedy_story(logits, [1], [2])}; accept_greedy gave {got}"
    got = greedy(logits, [2])
    assert got == [2, 1], f"{greedy_story(logits, [2], [2, 1])}; accept_greedy gave {got}"
    # The model agrees with the second draft, but after the first disagreement nothing counts.
    logits = torch.tensor([[0.0, float("-inf"), 1.0], [0.0, 9.0, 0.0], [0.0, 0.0, 7.0]])
    got = greedy(logits, [1, 1])
    assert got == [2], (
        f"{greedy_story(logits, [1, 1], [2])} (row 1 agrees with draft 1, but after the first "
        f"disagreement nothing counts); accept_greedy gave {got}"
    )


@pytest.mark.task7_2
def test_a_draft_tied_with_the_maximum_is_kept_only_where_argmax_picks_it():
    """Rows with tied maxima: greedy decoding one token at a time takes the lowest id of the
    tie (torch.argmax, s6's sampler), so a draft that ties with a lower id is not kept, however
    high its logit; a draft that is that lowest id is."""
    logits = torch.tensor([[2.0, 2.0, 0.0], [0.0, 1.0, 1.0]])
    got = greedy(logits, [1])
    assert got == [0], (
        f"{greedy_story(logits, [1], [0])} (draft 1 has the row's highest logit, tied with token 0: "
        f"one token at a time, s6 writes 0 there); accept_greedy gave {got}"
    )
    got = greedy(logits, [0])
    assert got == [0, 1], f"{greedy_story(logits, [0], [0, 1])}; accept_greedy gave {got}"
    # Close but not tied: a solution that compares rounded numbers (a float16 softmax) makes a
    # tie that is not there and keeps token 1 where s6 writes 2.
    logits = torch.tensor([[0.0, 10.0, 10.0002], [1.0, 0.0, 0.0]])
    got = greedy(logits, [2])
    assert got == [2, 0], (
        f"{greedy_story(logits, [2], [2, 0])} (10.0002 > 10.0: no tie, compare the logits as they are); "
        f"accept_greedy gave {got}"
    )
    # One float32 step apart: a softmax rounds both to the same probability (exp of -7e-9 is
    # 1.0 in float32), and argmax of those picks token 0 where s6's argmax of the logits picks 1.
    low = torch.tensor(0.1)
    logits = torch.stack([low, torch.nextafter(low, torch.tensor(1.0)), torch.tensor(-1.0)])[None].repeat(2, 1)
    got = greedy(logits, [1])
    assert got == [1, 1], (
        f"{greedy_story(logits, [1], [1, 1])} (token 1's logit is one float32 step above token 0's: no tie, "
        f"rank the logits themselves, as s6's sampler does, not probabilities rounded from them); "
        f"accept_greedy gave {got}"
    )
    # Rows as wide as a vocabulary, tied across many tokens (a flat row, or the mask's few
    # allowed tokens at one logit): a descending sort or a topk is not stable there (on CPU
    # too, from 8 or 17 tokens), so its first index is not argmax's lowest id.
    for vocab in (8, 17, 64, 1000):
        masked = torch.full((2, vocab), float("-inf")).index_fill_(1, torch.arange(3, vocab, 4), 1.0)
        for logits in (torch.zeros(2, vocab), masked):
            low = int((logits[0] == logits[0].max()).nonzero()[0])
            got = greedy(logits, [low])
            assert got == [low, low], f"{greedy_story(logits, [low], [low, low])}; accept_greedy gave {got}"
            high = int((logits[0] == logits[0].max()).nonzero()[-1])
            got = greedy(logits, [high])
            assert got == [low], f"{greedy_story(logits, [high], [low])}; accept_greedy gave {got}"


# ---------------------------------------------------------------------------------------
# task7_3: rejection sampling under a mask
# ---------------------------------------------------------------------------------------
def sampled(probs: torch.Tensor, drafts: list[int], generator: torch.Generator) -> list[int]:
    before = probs.clone()
    got = accept_sampled(probs, drafts, generator)
    unchanged(before, probs, "accept_sampled", "probs")
    return token_ids(got, "accept_sampled")


def chi_square_p_value(observed: list[int], expected: list[float]) -> float:
    """Pearson's test of counts against expected counts (categories with expectation
    below 5 pooled into one); the p-value from the chi-square survival function."""
    big = [(o, e) for o, e in zip(observed, expected) if e >= 5]
    rest = (sum(o for o, e in zip(observed, expected) if e < 5), sum(e for e in expected if e < 5))
    cells = big + ([rest] if rest[1] > 0 else [])
    stat = sum((o - e) ** 2 / e for o, e in cells)
    dof = len(cells) - 1
    return float(
        torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64), torch.tensor(stat / 2, dtype=torch.float64))
    )


def exact_output_distribution(probs: torch.Tensor, drafts: list[int]) -> dict[tuple[int, ...], float]:
    """{output tuple: probability} of sampling token after token from the rows, where the
    row after token i is defined only when token i was the draft (as the forward saw)."""
    probs = probs / probs.sum(-1, keepdim=True)
    out, reach = {}, 1.0
    for i, d in enumerate(drafts):
        for x in range(probs.shape[1]):
            if x != d and probs[i, x] > 0:
                out[tuple(drafts[:i]) + (x,)] = reach * float(probs[i, x])
        reach *= float(probs[i, d])
    for x in range(probs.shape[1]):
        if probs[len(drafts), x] > 0:
            out[tuple(drafts) + (x,)] = reach * float(probs[len(drafts), x])
    return out


def why_impossible(probs: torch.Tensor, drafts: list[int], out: tuple[int, ...]) -> str:
    """Why the rows and drafts can never give `out` (an output exact_output_distribution
    does not list), in words, for a failure message."""
    if not out:
        return "it is empty (every call returns at least one token)"
    if len(out) > len(drafts) + 1:
        return f"it has {len(out)} tokens, from {len(drafts)} drafts (at most the drafts and one token after them)"
    for i, token in enumerate(out[:-1]):
        if token != drafts[i]:
            return f"token {i} is {token}, not draft {i} ({drafts[i]}): only the last token may differ from the drafts"
    i, last = len(out) - 1, out[-1]
    if not 0 <= last < probs.shape[1]:
        return f"its last token, {last}, is outside the {probs.shape[1]} tokens of a row"
    if i < len(drafts) and last == drafts[i]:
        return (
            f"it ends with draft {i} ({last}), before the last row: a kept draft is followed by the next "
            f"draft's verdict or by a token drawn from the next row, and a rejected draft is replaced by a "
            f"draw from its row without it, never by itself"
        )
    return f"token {i} is {last}, which has probability 0 in row {i} (the mask forbids it)"


def furthest_from_expected(keys: list, observed: list[int], expected: list[float], most: int = 3) -> str:
    """The outputs whose counts are furthest from their expected counts (by their share of
    the chi-square statistic), as "[1, 4]: expected 1234, got 0 (too rarely)"."""
    worst = sorted(zip(keys, observed, expected), key=lambda koe: -((koe[1] - koe[2]) ** 2) / koe[2])[:most]
    return "; ".join(
        f"{list(k)}: expected {e:.0f}, got {o} ({'too often' if o > e else 'too rarely'})" for k, o, e in worst
    )


def kept_rates(probs: torch.Tensor, drafts: list[int], counts: dict[tuple[int, ...], int]) -> str:
    """How often each draft was kept among the draws that reached it, against its exact
    probability (its share of its masked row), as "draft 0 (1) kept in 41% of 20000, expected 62%"."""
    rates = []
    for i, d in enumerate(drafts):
        reached = sum(c for out, c in counts.items() if len(out) > i and list(out[:i]) == drafts[:i])
        kept = sum(c for out, c in counts.items() if len(out) > i + 1 and list(out[: i + 1]) == drafts[: i + 1])
        if reached:
            rates.append(
                f"draft {i} ({d}) kept in {kept / reached:.0%} of the {reached} draws that reached it, "
                f"expected {float(probs[i, d] / probs[i].sum()):.0%}"
            )
    return "; ".join(rates)


@pytest.mark.task7_3
@pytest.mark.parametrize("case", range(4))
def test_rejection_sampling_gives_the_target_distribution(case):
    """Each output token distributed as its (masked, unnormalised) row, drafts the grammar
    forbids (probability 0) included: the exact distribution of the whole output, 20000 draws."""
    g = torch.Generator().manual_seed(case)
    vocab, m = 5, 3
    probs = torch.softmax(torch.randn(m + 1, vocab, generator=g) * 1.5, -1)
    probs[torch.rand(m + 1, vocab, generator=g) < 0.3] = 0.0  # masked tokens
    probs[:, 1] += 0.05  # every row keeps a token
    drafts = [int(torch.randint(0, vocab, (), generator=g)) for _ in range(m)]
    if case == 0:
        drafts[0] = int(torch.nonzero(probs[0] == 0)[0]) if bool((probs[0] == 0).any()) else drafts[0]
    exact = exact_output_distribution(probs, drafts)
    counts = dict.fromkeys(exact, 0)
    keys = sorted(exact)
    for n in range(1, 20001):
        out = tuple(sampled(probs, drafts, g))
        assert out in counts, (
            f"case {case}, drafts {drafts}: accept_sampled returned {list(out)}, which these "
            f"rows cannot give: {why_impossible(probs, drafts, out)}"
        )
        counts[out] += 1
        if n not in (EARLY_LOOK, 20000):
            continue
        alpha = EARLY_ALPHA if n == EARLY_LOOK else ALPHA
        observed, expected = [counts[k] for k in keys], [exact[k] * n for k in keys]
        p_value = chi_square_p_value(observed, expected)
        assert p_value > alpha, (
            f"case {case}, drafts {drafts}, {n} draws: the outputs are not distributed as the masked rows say (a "
            f"chi-square test of every output's count gives p-value {p_value:.2g}, below {alpha}); "
            f"{kept_rates(probs, drafts, counts)}; the outputs furthest from their expected counts: "
            f"{furthest_from_expected(keys, observed, expected)}"
        )


@pytest.mark.task7_3
def test_a_forbidden_draft_is_rejected_without_a_draw():
    """p(d) = 0: the token is a plain draw from the row, as s6 would sample it with the same
    generator (no uniform spent first), whatever the seed."""
    probs = torch.tensor([[0.0, 0.2, 0.3, 0.5], [0.2, 0.3, 0.5, 0.0]])
    for seed in range(30):
        g1, g2 = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
        got = sampled(probs, [0], g1)
        want = [int(torch.multinomial(probs[0], 1, generator=g2))]
        assert got == want, (
            f"seed {seed}: draft 0 has probability 0 in row 0, so it is rejected without drawing a "
            f"uniform, and the token is torch.multinomial(row 0) with the same generator, {want}; "
            f"accept_sampled gave {got}"
        )


@pytest.mark.task7_3
def test_a_uniform_equal_to_the_drafts_probability_rejects_it():
    """ "Below p(d), keep d" (the page): a uniform equal to p(d) is not below it. A row built
    from the generator's own first uniform makes them equal exactly (a stranger's `u <= p`
    kept the draft; every other test passed it, the boundary has probability 2^-24 a draw)."""
    for seed in (1234, 7, 99):
        u = float(torch.rand((), generator=torch.Generator().manual_seed(seed)))
        probs = torch.tensor([[u, 1 - u], [0.5, 0.5]], dtype=torch.float32)
        assert float(probs[0, 0]) == u and float(probs[0].sum()) == 1.0  # p(draft 0) is u exactly
        got = sampled(probs, [0], torch.Generator().manual_seed(seed))
        assert got == [1], (
            f"seed {seed}: the first uniform is {u!r}, exactly p(draft 0): it is not below p, so the "
            f"draft is rejected and the residual (all on token 1) gives [1]; accept_sampled gave {got}"
        )


@pytest.mark.task7_3
def test_only_the_requests_generator_is_drawn_from():
    """Every uniform and every token comes from `generator`: the global RNG is left as it was,
    and one seed gives the same tokens whatever the global RNG was seeded with."""
    probs = torch.tensor([[0.5, 0.5, 0.0], [0.3, 0.3, 0.4], [0.2, 0.5, 0.3]])
    drafts = [0, 1]
    with torch.random.fork_rng():  # whatever this test does to the global RNG is undone after it
        for seed in range(10):
            torch.manual_seed(1000 + seed)
            before = torch.get_rng_state()
            first = sampled(probs, drafts, torch.Generator().manual_seed(seed))
            assert torch.equal(torch.get_rng_state(), before), (
                f"seed {seed}: accept_sampled changed the global RNG (torch.rand or torch.multinomial "
                f"without generator=); use only the request's generator"
            )
            torch.manual_seed(2000 + seed)
            again = sampled(probs, drafts, torch.Generator().manual_seed(seed))
            assert again == first, (
                f"seed {seed}: the same generator seed gave {first} and then {again} "
                f"(the global RNG was seeded differently in between)"
            )


# The tokens the page's order of draws gives (torch 2.13's generator, seeds 0-7): recorded,
# not recomputed here, so that this file holds no second copy of the task's solution.
SEEDED_TOKENS = {
    (0, 1): [[2], [2], [1], [0, 1, 2], [2], [1], [2], [1]],
    (2, 3): [[1], [0], [0], [2, 3, 2], [0], [0], [0], [1]],
    (3, 0): [[2], [0], [1], [0], [2], [1], [0], [1]],  # draft 3 forbidden: no uniform is drawn
    (1,): [[2], [0], [0], [1, 1], [2], [0], [0], [2]],
}
CERTAIN_FIRST_TOKENS = [[1, 1], [1, 2, 2], [1, 2, 0], [1, 2, 2], [1, 1], [1, 2, 0], [1, 3], [1, 2, 0]]


@pytest.mark.task7_3
def test_a_seeded_request_draws_its_numbers_in_the_pages_order():
    """One seed, the same tokens wherever it runs: the uniform before the rejection's draw,
    one uniform per draft the grammar allows and none otherwise. A solution that draws in
    another order can keep the right distribution and still give other tokens from the same
    generator state (the engine's generator of an `Engine(seed=...)`) than every other server
    running the same course. (A request with a `seed` of its own never comes here: its tokens
    are `seeded_scores`'s.)"""
    probs = torch.tensor([[0.3, 0.3, 0.4, 0.0], [0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25]])
    for drafts, tokens in SEEDED_TOKENS.items():
        for seed, want in enumerate(tokens):
            got = sampled(probs, list(drafts), torch.Generator().manual_seed(seed))
            assert got == want, (
                f"drafts {list(drafts)}, seed {seed}: the page's order of draws gives {want}, your accept_sampled {got}"
            )
    # A certain draft (p = 1, a token the grammar forces) still draws its uniform: skipping it
    # keeps the law and shifts every later draw (a stranger's "optimisation" did).
    certain = torch.tensor([[0.0, 1.0, 0.0, 0.0], [0.3, 0.2, 0.4, 0.1], [0.25, 0.25, 0.25, 0.25]])
    for seed, want in enumerate(CERTAIN_FIRST_TOKENS):
        got = sampled(certain, [1, 2], torch.Generator().manual_seed(seed))
        assert got == want, (
            f"drafts [1, 2], the first certain (p = 1), seed {seed}: the page's order of draws (one uniform "
            f"for every draft the grammar allows, a certain one too) gives {want}, your accept_sampled {got}"
        )


@pytest.mark.task7_3
def test_a_certain_draft_is_always_kept_and_one_token_follows():
    probs = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 2.0], [3.0, 0.0, 0.0]])  # rows need not sum to 1
    for seed in range(20):
        got = sampled(probs, [1, 2], torch.Generator().manual_seed(seed))
        assert got == [1, 2, 0], (
            f"seed {seed}: rows 0, 1 and 2 allow only 1, 2 and 0 (weights 1, 2, 3: a row "
            f"need not sum to 1), so drafts [1, 2] are always kept and 0 follows: expected "
            f"[1, 2, 0]; accept_sampled gave {got}"
        )
        got = sampled(probs[2:], [], torch.Generator().manual_seed(seed))
        assert got == [0], f"seed {seed}: no drafts, one row allowing only 0: expected [0]; accept_sampled gave {got}"
