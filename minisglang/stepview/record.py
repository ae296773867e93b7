"""What a step view records, and the recorder the scheduler calls while it records.

The scheduler already writes what happens into one list of events (`Scheduler.trace`,
through `record_event`). A step view needs more at each decode step (the model's
favourite tokens before the mask, what the mask kept), so the scheduler offers a hook:
its `step_recorder`, None unless something is recording. With None the scheduler does
one `is not None` check per hook point and allocates nothing; with a `StepRecorder` the
recorder writes "token", "jump_forward" and "drafts" events into that same list, for
the requests it watches. `Trace.from_events` turns the events of one request into the
typed `Trace` that the page (html.py) draws.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..core import Req
from ..sampler import is_greedy

if TYPE_CHECKING:  # pragma: no cover
    from ..tokenizer import Tokenizer


def view_temperature(req: Req) -> float:
    """The temperature the step view's probabilities use: the request's own, or 1 for a
    greedy request (its temperature 0 would make every distribution a point)."""
    return 1.0 if is_greedy(req) else req.sampling_params.temperature


def scaled(row: torch.Tensor, temperature: float) -> torch.Tensor:
    """One row of logits as float32, divided by the temperature (no copy at T=1 when float)."""
    row = row.float()
    return row if temperature == 1.0 else row / temperature


def log_mass(rows: torch.Tensor, temperatures: torch.Tensor) -> torch.Tensor:
    """log of the total probability mass of each row's logits at its temperature, before
    normalising: rows [B, V], temperatures [B] -> [B]. The mass a mask keeps is
    exp(log_mass(masked) - log_mass(unmasked)) (an -inf row gives mass 0)."""
    return torch.logsumexp(rows.float() / temperatures.to(rows.device)[:, None], dim=-1)


def grammar_state(grammar: Any) -> int | str | None:
    """The automaton state a request's grammar is in, as far as it exposes one: our FSM's
    state number (stages s1-s4, the "fsm" backend), outlines-core's guide state, "thinking"
    inside s5's reasoning gate; None for a library that exposes none (xgrammar,
    llguidance) or an unconstrained request."""
    if grammar is None:
        return None
    if getattr(grammar, "thinking", False):
        return "thinking"
    inner = getattr(grammar, "inner", None)
    if inner is not None:
        return grammar_state(inner)
    state = getattr(grammar, "state", None)
    if isinstance(state, int):
        return state
    guide = getattr(grammar, "guide", None)
    if guide is not None:
        return int(guide.get_state())
    return None


def state_after(grammar: Any, state: int | str | None, token_ids: list[int]) -> int | str | None:
    """The state after `token_ids` from `state`, for grammars whose FSM we can walk (s7's
    later verify positions: the grammar itself was rolled back to the first); else None."""
    fsm = getattr(getattr(grammar, "inner", grammar), "fsm", None)
    if not isinstance(state, int) or fsm is None:
        return None
    after = fsm.walk(token_ids, state)
    return after if after >= 0 else None


class StepRecorder:
    """The scheduler's `step_recorder`: called at its hook points, writes events for the
    requests whose ids are in `watched` into the scheduler's trace (one mechanism).

    Hook points (scheduler.py, overlap.py, stages/s7_speculative.py):
    `before_mask(logits, reqs)` and `after_mask(logits, reqs)` around the mask (row i of
    `logits` is reqs[i]; s7's verify passes one request's rows, one per position, and its
    drafts), `token(req, tok)` for each token appended, `jump(req, new_ids)` before s4's
    re-admission rewrites the output.
    """

    def __init__(self, scheduler: Any, tokenizer: Tokenizer, top_k: int = 10):
        self.scheduler, self.tokenizer, self.top_k = scheduler, tokenizer, top_k
        self.watched: set[int] = set()
        self._before: dict[int, list[dict[str, Any]]] = {}  # rid -> this step's rows, before the mask
        self._pending: dict[int, list[dict[str, Any]]] = {}  # rid -> rows waiting for their token
        self.grammars: dict[int, Any] = {}  # rid -> its grammar (for the drawing)

    def watch(self, rid: int) -> None:
        self.watched.add(rid)

    # -- around the mask --------------------------------------------------------------
    def before_mask(self, logits: torch.Tensor, reqs: list[Req]) -> None:
        """Keep the watched rows' top-k and total mass before the mask changes them."""
        for i, req in enumerate(reqs):
            if req.rid not in self.watched or req.finished:
                continue
            if i == 0 or reqs[i - 1] is not req:  # (s7's verify passes one request's rows in a run)
                self._before[req.rid], self._pending[req.rid] = [], []
                self.grammars.setdefault(req.rid, req.grammar)
            t = view_temperature(req)
            logp = torch.log_softmax(scaled(logits[i], t), dim=-1)
            top = torch.topk(logp, min(self.top_k, logp.numel()))
            self._before[req.rid].append(
                {
                    "ids": top.indices,
                    "top": list(zip(top.indices.tolist(), top.values.exp().tolist())),
                    "logp": logp,
                    "temperature": t,
                }
            )

    def after_mask(self, logits: torch.Tensor, reqs: list[Req], drafts: list[int] | None = None) -> None:
        """Pair each kept row with what the mask did: allowed count, mass kept, top-k after."""
        for i, req in enumerate(reqs):
            before = self._before.get(req.rid)
            if req.rid not in self.watched or not before:
                continue
            position = len(self._pending[req.rid])  # 0, but at s7's later verify positions
            b = before[position]
            t = b["temperature"]
            logp = torch.log_softmax(scaled(logits[i], t), dim=-1)
            forbidden = int(torch.count_nonzero(torch.isneginf(logp)))
            allowed = logp.numel() - forbidden
            top_allowed = torch.isfinite(logp[b["ids"].to(logp.device)]).tolist()
            if all(top_allowed):  # the mask kept the k favourites: they are the top after it too
                top_after = torch.topk(logp[b["ids"].to(logp.device)], len(top_allowed))
                after_ids = b["ids"][top_after.indices.to(b["ids"].device)].tolist()
            else:
                top_after = torch.topk(logp, min(self.top_k, logp.numel()))
                after_ids = top_after.indices.tolist()
            # Masking zeroes the forbidden tokens and renormalises: at any allowed token j,
            # p_after(j) = p_before(j) / mass, so one allowed token gives the mass kept.
            best = after_ids[0]
            kept = float((b["logp"][best] - logp[best].to(b["logp"].device)).exp()) if allowed else 0.0
            probs_after = top_after.values.exp().tolist() if allowed else []
            grammar = req.grammar
            state = grammar_state(grammar)
            if position:
                state = state_after(grammar, state, (drafts or [])[:position])
            self._pending[req.rid].append(
                {
                    "state": state,
                    "allowed": allowed,
                    "vocab": int(logp.numel()),
                    "mass": kept,
                    "temperature": t,
                    "top": [[tok, p, ok] for (tok, p), ok in zip(b["top"], top_allowed)],
                    "top_after": [[tok, p] for tok, p in zip(after_ids, probs_after) if p > 0],
                }
            )
        if drafts is not None and reqs and reqs[0].rid in self.watched:
            self.scheduler.record_event("drafts", reqs[0], proposed=list(drafts))

    # -- tokens and jumps -----------------------------------------------------------------
    def token(self, req: Req, tok: int) -> None:
        """One token appended to a watched request: its step event, with its row if masked."""
        if req.rid not in self.watched:
            return
        rows = self._pending.get(req.rid) or []
        row = rows.pop(0) if rows else {}
        self.scheduler.record_event("token", req, token=tok, **row)

    def jump(self, req: Req, new_output_ids: list[int]) -> None:
        """s4's jump, before the re-admission: the old and new ids after their common
        prefix (the re-cut seam)."""
        if req.rid not in self.watched:
            return
        old = req.output_ids
        same = len(os.path.commonprefix([old, new_output_ids]))
        self.scheduler.record_event("jump_forward", req, at=same, old=list(old[same:]), new=list(new_output_ids[same:]))


class Recorders:
    """Several recorders on one hook (a server's /metrics and a trace at once)."""

    def __init__(self, *recorders: Any):
        self.recorders = recorders

    def before_mask(self, logits: torch.Tensor, reqs: list[Req]) -> None:
        for r in self.recorders:
            r.before_mask(logits, reqs)

    def after_mask(self, logits: torch.Tensor, reqs: list[Req], drafts: list[int] | None = None) -> None:
        for r in self.recorders:
            r.after_mask(logits, reqs, drafts)

    def token(self, req: Req, tok: int) -> None:
        for r in self.recorders:
            r.token(req, tok)

    def jump(self, req: Req, new_output_ids: list[int]) -> None:
        for r in self.recorders:
            r.jump(req, new_output_ids)


# ------------------------------------------------------------------------- the record
@dataclass(frozen=True)
class TopToken:
    """One of the model's favourite tokens at a step: id, text, probability, and (before
    the mask) whether the mask allowed it."""

    id: int
    text: str
    prob: float
    allowed: bool = True


@dataclass(frozen=True)
class TraceStep:
    """One decode step of the traced request: the model chose (or a draft supplied) one token.

    `mass` is the probability the mask kept: the sum of softmax(logits / T) over the
    allowed tokens, T the request's temperature, or 1 for a greedy request (`temperature`
    says which was used); top-k/top-p are not applied. `state` is the grammar's state
    when the mask was made (`grammar_state`). `how`: "sampled", "forced" (the mask allowed
    one token only) or "draft" (an s7 draft the model agreed with). `text`: the request's
    output text after this step.
    """

    index: int
    engine_step: int
    state: int | str | None
    allowed: int
    vocab: int
    mass: float
    temperature: float
    top: list[TopToken]
    top_after: list[TopToken]
    token: int
    token_text: str
    how: str
    text: str
    special: bool = False  # the token is a special one (EOS): `token_text` is its name, not text


@dataclass(frozen=True)
class TraceEvent:
    """Something that happened to the request between steps, before step `before_step`:
    "admit" (prefix_len: tokens the radix tree supplied), "jump" (forced text, the re-cut
    seam: from output token `at` on, the `old` token texts (ids `old_ids`) became the `new` ones),
    "drafts" (s7: proposed, accepted, rejected), "sit_out", "finish" (reason), "error"."""

    kind: str
    before_step: int
    engine_step: int
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TraceToken:
    """One token of the final output, its text, and how it came ("sampled", "forced",
    "jumped", "recut": written text a jump's re-encoding split again, "draft")."""

    id: int
    text: str
    how: str


@dataclass
class Trace:
    """One request, step by step (`minisglang.trace`). `display(trace)` in Jupyter shows
    the step view; `trace.save("t.html")` writes it as one self-contained page."""

    prompt: str
    params: dict[str, Any]
    stage: str
    backend: str | None
    output_text: str
    steps: list[TraceStep]
    events: list[TraceEvent]
    tokens: list[TraceToken]
    stop_reason: dict[str, Any] | None
    automaton: Any = None  # an html.Automaton (the drawing), made by `minisglang.trace`

    @classmethod
    def from_events(cls, events: list[dict[str, Any]], tokenizer: Tokenizer, **fields: Any) -> Trace:
        """The Trace of one request from its events in the scheduler's trace, in order."""
        texts = TokenTexts(tokenizer)
        steps: list[TraceStep] = []
        out: list[TraceEvent] = []
        tokens: list[tuple[int, str]] = []  # (id, how) of the output so far
        data = bytearray()  # and its bytes
        stop = None
        for e in events:
            kind = e["event"]
            if kind == "token":
                how = "sampled"
                last_drafts = next((x for x in reversed(out) if x.kind == "drafts"), None)
                if last_drafts is not None and last_drafts.engine_step == e["step"]:
                    k = last_drafts.info["accepted"]
                    if k < len(last_drafts.info["proposed"]) and last_drafts.info["proposed"][k] == e["token"]:
                        how = "draft"
                        last_drafts.info["accepted"] = k + 1
                        last_drafts.info["rejected"] = len(last_drafts.info["proposed"]) - k - 1
                if how == "sampled" and e.get("allowed") == 1:
                    how = "forced"
                tokens.append((e["token"], how))
                data += tokenizer.decode_bytes([e["token"]])
                steps.append(
                    TraceStep(
                        index=len(steps),
                        engine_step=e["step"],
                        state=e.get("state"),
                        allowed=e.get("allowed", 0),
                        vocab=e.get("vocab", 0),
                        mass=e.get("mass", 1.0),
                        temperature=e.get("temperature", 1.0),
                        top=[TopToken(t, texts.one(t), p, a) for t, p, a in e.get("top", [])],
                        top_after=[TopToken(t, texts.one(t), p) for t, p in e.get("top_after", [])],
                        token=e["token"],
                        token_text=texts.one(e["token"]),
                        how=how,
                        text=data.decode("utf-8", errors="replace"),
                        special=texts.special(e["token"]),
                    )
                )
                continue
            info = {k: v for k, v in e.items() if k not in ("step", "event", "rid")}
            if kind == "jump_forward":
                at, old, new = info["at"], info["old"], info["new"]
                head = [t for t, _ in tokens[:at]]
                forced = texts.join(head + new)[len(texts.join(head + old)) :]
                # A token of the re-encoding that spells only text already written is that
                # text split again ("recut": seed 91's `i` `at` `is` -> `ia` `tis`), not forced.
                written, end, kinds = len(tokenizer.decode_bytes(old)), 0, []
                for t in new:
                    end += len(tokenizer.decode_bytes([t]))
                    kinds.append("recut" if end <= written else "jumped")
                info = {
                    "forced": forced,
                    "at": at,
                    "old": [texts.one(t) for t in old],
                    "new": [texts.one(t) for t in new],
                    "old_ids": old,
                    "new_ids": new,
                    "new_how": kinds,
                }
                tokens = tokens[:at] + list(zip(new, kinds))
                data = bytearray(tokenizer.decode_bytes([t for t, _ in tokens]))
                kind = "jump"
            elif kind == "drafts":
                info = {
                    "proposed": info["proposed"],
                    "proposed_text": [texts.one(t) for t in info["proposed"]],
                    "accepted": 0,
                    "rejected": len(info["proposed"]),
                }
            elif kind == "finish":
                stop = info.get("reason")
            elif kind in ("jump", "arrive", "prefix_hit", "cache_prefill"):
                continue  # "jump" is recorded in full as jump_forward; a hit is in "admit"
            out.append(TraceEvent(kind, len(steps), e["step"], info))
        final = [TraceToken(t, text, how) for (t, how), text in zip(tokens, texts.split([t for t, _ in tokens]))]
        return cls(steps=steps, events=out, tokens=final, stop_reason=stop, **fields)

    # -- showing it -------------------------------------------------------------------
    def to_html(self) -> str:
        """The step view as one self-contained HTML page (html.py)."""
        from .html import trace_page

        return trace_page(self)

    def _repr_html_(self) -> str:
        from .html import trace_fragment

        return trace_fragment(self)

    def save(self, path: str | Path) -> Path:
        """Write the page to `path` (UTF-8 HTML); returns the path."""
        path = Path(path)
        path.write_text(self.to_html(), encoding="utf-8")
        return path

    def mass_kept(self) -> list[float]:
        """The probability mass the mask kept at each step (see `TraceStep`)."""
        return [s.mass for s in self.steps]


class TokenTexts:
    """Token texts for a trace: one token as its own text (a piece of a multi-byte
    character as its bytes' replacement), and a list cut into texts that join exactly
    to the list's decoded text."""

    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer = tokenizer

    def one(self, token_id: int) -> str:
        vocab = self.tokenizer.token_bytes
        data = vocab[token_id] if 0 <= token_id < len(vocab) else None
        if data is None:
            return self.tokenizer.id_to_token(token_id) if 0 <= token_id < len(vocab) else f"<{token_id}>"
        return data.decode("utf-8", errors="replace")

    def special(self, token_id: int) -> bool:
        vocab = self.tokenizer.token_bytes
        return not 0 <= token_id < len(vocab) or vocab[token_id] is None

    def join(self, ids: list[int]) -> str:
        return self.tokenizer.decode_bytes(ids).decode("utf-8", errors="replace")

    def split(self, ids: list[int]) -> list[str]:
        """Each token's share of the decoded text: the characters it completes (a token
        that ends inside a character gets nothing; the next one gets the character)."""
        out, done, data = [], "", b""
        for t in ids:
            data += self.tokenizer.decode_bytes([t])
            text = data.decode("utf-8", errors="ignore")
            out.append(text[len(done) :])
            done = text
        return out
