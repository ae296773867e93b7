"""The step view (minisglang.trace): what it records, checked against oracles.

For every stage s1..s7 (s5 with each grammar backend) on the bundled model, one traced
request, and at each of its steps:
- the allowed count equals a brute-force count: every token id whose text, appended to
  the output so far, still partially matches the regex (the `regex` module's
  partial fullmatch), plus EOS where the text so far matches whole;
- the mass kept equals the softmax sum over those tokens of logits recomputed by
  transformers' own Llama on the exact ids the model saw (the re-cut ones after a jump);
- the grammar state is our FSM's state after that text (stages s1-s4);
and the tokens' texts join to the request's output. Plus: recording off creates no
trace object and leaves no detail event; bad input gets a clear error.
"""

import gc

import pytest
import regex as partial_re
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import LlamaForCausalLM

import minisglang as sgl
from minisglang.stepview import StepRecorder, Trace, TraceStep
from minisglang.stepview.record import TokenTexts

REGEX = r'\{"name": "[a-z]{1,8}", "age": [0-9]{1,2}\}'
PROMPT = "Extract as JSON:"
# (stage, engine options): every stage, and s5 with every grammar backend.
CASES = [
    ("s1", {}),
    ("s2", {}),
    ("s3", {}),
    ("s4", {}),
    ("s5", {}),
    ("s5", {"grammar_backend": "xgrammar"}),
    ("s5", {"grammar_backend": "llguidance"}),
    ("s5", {"grammar_backend": "outlines"}),
    ("s6", {}),
    ("s7", {}),
    ("s7", {"speculative_algorithm": "FORCED"}),
]


# Chapter 04's session plan projects this request's step view (instructors/04-jump-forward).
PERSON = r'\{"name": "[A-Za-z ]{1,12}", "age": [1-9][0-9]?, "city": "(Paris|Rome|Beijing)"\}'
PERSON_PROMPT = (
    "<|user|>\nExtract name, age and city from the text as JSON.\n"
    "Li Lei is 31 years old and lives in Paris.\n<|assistant|>\n"
)


@pytest.fixture(scope="module")
def hf_model(bundled_model_path):
    return LlamaForCausalLM.from_pretrained(bundled_model_path, dtype=torch.float32).eval()


def contexts(trace: Trace) -> list[list[int]]:
    """The output ids the model saw before each step: the steps' tokens, with each jump's
    re-cut applied where it happened."""
    ids, out = [], []
    jumps = {}
    for e in trace.events:
        if e.kind == "jump":
            jumps.setdefault(e.before_step, []).append(e.info)
    for step in trace.steps:
        for j in jumps.get(step.index, []):
            assert ids[j["at"] :] == j["old_ids"], "a jump's seam must start from the ids the model had"
            ids = ids[: j["at"]] + j["new_ids"]
        out.append(list(ids))
        ids.append(step.token)
    return out


def brute_force_allowed(tokenizer, vocab_width: int, pattern: str, text: str) -> list[int]:
    """Every token id the regex allows after `text` (EOS when `text` matches whole)."""
    allowed = []
    for t in range(vocab_width):
        data = tokenizer.token_bytes[t] if t < len(tokenizer.token_bytes) else None
        if t == tokenizer.eos_token_id:
            if partial_re.fullmatch(pattern, text) is not None:
                allowed.append(t)
            continue
        if not data:
            continue
        try:
            piece = data.decode("utf-8")
        except UnicodeDecodeError:
            continue  # (the test regex is ASCII: a piece of a character never fits)
        if partial_re.fullmatch(pattern, text + piece, partial=True) is not None:
            allowed.append(t)
    return allowed


@pytest.mark.slow
@pytest.mark.parametrize(
    "stage,options", CASES, ids=[f"{s}-{'-'.join(map(str, o.values())) or 'default'}" for s, o in CASES]
)
def test_steps_match_the_oracles(stage, options, hf_model):
    engine = sgl.Engine(stage=stage, max_total_tokens=2048, **options)
    try:
        params = {"regex": REGEX, "temperature": 0, "max_new_tokens": 40}
        trace = sgl.trace(engine, PROMPT, params)
        plain = engine.generate(PROMPT, params)
        tok = engine.tokenizer
        prompt_ids = tok.encode(PROMPT)
        vocab_width = engine.model.config.vocab_size
        assert trace.output_text == plain["text"], "tracing must not change the output"
        assert trace.steps, "a constrained request takes at least one step"
        assert "".join(t.text for t in trace.tokens) == trace.output_text
        assert trace.stop_reason == plain["meta_info"]["finish_reason"]
        jumped = [t for t in trace.tokens if t.how == "jumped"]
        if stage in ("s4", "s5", "s6") and options.get("grammar_backend") in (None, "fsm"):
            assert any(e.kind == "jump" for e in trace.events) and jumped, "this regex has forced text to jump"
        if options.get("speculative_algorithm"):
            drafts = [e for e in trace.events if e.kind == "drafts"]
            assert drafts and sum(e.info["accepted"] for e in drafts) == sum(t.how == "draft" for t in trace.tokens)
        for step, ctx in zip(trace.steps, contexts(trace)):
            text = tok.decode(ctx)
            allowed = brute_force_allowed(tok, vocab_width, REGEX, text)
            with torch.no_grad():
                logits = hf_model(torch.tensor([prompt_ids + ctx])).logits[0, -1].float()
            probs = torch.softmax(logits[:vocab_width], dim=-1)  # greedy: the view's T is 1
            assert step.token in allowed
            assert step.top[0].id == int(probs.argmax())
            if options.get("grammar_backend") == "llguidance":
                # llguidance also forbids non-canonical tokenizations ('{' before '"' where the
                # vocabulary has '{"'): a subset of the regex's tokens, so less mass.
                assert step.allowed <= len(allowed)
                assert step.mass <= float(probs[allowed].sum()) * (1 + 1e-3) + 1e-6
                continue
            assert step.allowed == len(allowed), f"step {step.index} after {text!r}: allowed count"
            assert step.mass == pytest.approx(float(probs[allowed].sum()), rel=1e-3, abs=1e-6)
            assert [t.allowed for t in step.top] == [t.id in set(allowed) for t in step.top]
            assert step.how in ("sampled", "forced", "draft") and (step.how != "forced" or step.allowed == 1)
            if stage in ("s1", "s2", "s3", "s4"):
                assert step.state == engine.stage.compile_fsm(REGEX).walk(ctx)
            elif options.get("grammar_backend") in ("xgrammar", "llguidance"):
                assert step.state is None  # these libraries expose no state
            else:
                assert isinstance(step.state, int)
    finally:
        engine.shutdown()


@pytest.fixture(scope="module")
def s4_engine():
    engine = sgl.Engine(stage="s4", max_total_tokens=2048)
    yield engine
    engine.shutdown()


def test_sampling_mass_uses_the_request_temperature(s4_engine):
    params = {"regex": REGEX, "temperature": 0.7, "seed": 3, "max_new_tokens": 40}
    trace = sgl.trace(s4_engine, PROMPT, params)
    assert all(s.temperature == 0.7 for s in trace.steps)
    assert all(0.0 <= s.mass <= 1.0 + 1e-6 for s in trace.steps)
    assert trace.output_text == s4_engine.generate(PROMPT, params)["text"]  # same seed, same text


def test_the_page_is_self_contained(s4_engine):
    trace = sgl.trace(s4_engine, PROMPT, {"regex": REGEX, "temperature": 0, "max_new_tokens": 40})
    page = trace.to_html()
    assert page.count('data-step="') == len(trace.steps)
    for step in trace.steps:
        assert f'data-step="{step.index}" data-state="{step.state}" data-allowed="{step.allowed}"' in page
    assert "http://" not in page.replace("http://www.w3.org", "") and "https://" not in page
    assert "<svg" in page and trace.automaton.kind == "compressed"
    # every state a step was in has a node in the drawing
    assert all(str(s.state) in trace.automaton.node_of for s in trace.steps)
    assert trace._repr_html_().startswith("<iframe")


def test_the_mass_plot_stands_alone_as_a_figure(s4_engine):
    """Chapter 06's figure is the page's plot with its styles inside: valid SVG, one point per
    step, each at the height of that step's mass kept."""
    import xml.etree.ElementTree as ET

    from minisglang.stepview.html import PLOT_H, mass_plot

    trace = sgl.trace(s4_engine, PROMPT, {"regex": REGEX, "temperature": 1.0, "seed": 3, "max_new_tokens": 40})
    root = ET.fromstring(mass_plot(trace, title="a title"))
    ns = "{http://www.w3.org/2000/svg}"
    assert root.tag == f"{ns}svg" and root.find(f"{ns}title").text == "a title" and root.find(f"{ns}style") is not None
    points = [tuple(map(float, p.split(","))) for p in root.find(f"{ns}polyline").get("points").split()]
    assert len(points) == len(trace.steps)
    for (_, y), step in zip(points, trace.steps):
        assert abs(y - (15 + (PLOT_H - 45) * (1 - step.mass))) < 0.06, (step.index, step.mass, y)


def test_the_standalone_mass_plot_numbers_its_steps(s4_engine):
    """A figure's caption names steps ("the run is steps 22 to 127"): the standalone plot
    labels step numbers under the line, each under its step's point, and keeps its own
    axis label clear of them."""
    import xml.etree.ElementTree as ET

    from minisglang.stepview.html import mass_plot

    trace = sgl.trace(s4_engine, PROMPT, {"regex": REGEX, "temperature": 1.0, "seed": 3, "max_new_tokens": 40})
    root = ET.fromstring(mass_plot(trace, title="a title"))
    ns = "{http://www.w3.org/2000/svg}"
    xs = [float(p.split(",")[0]) for p in root.find(f"{ns}polyline").get("points").split()]
    bottom = max(float(p.split(",")[1]) for p in root.find(f"{ns}polyline").get("points").split())
    ticks = {int(t.text): t for t in root.iter(f"{ns}text") if t.get("class") == "step"}
    assert 0 in ticks and len(ticks) >= 3, sorted(ticks)
    for step, text in ticks.items():
        assert 0 <= step < len(trace.steps)
        assert abs(float(text.get("x")) - xs[step]) < 0.06, (step, text.get("x"), xs[step])
    (label,) = [t for t in root.iter(f"{ns}text") if t.text and t.text.startswith("step (")]
    assert float(label.get("y")) > max(float(t.get("y")) for t in ticks.values()) + 15
    assert float(root.get("height")) > float(label.get("y"))
    assert min(float(t.get("y")) for t in ticks.values()) > bottom
    # the page's inline plot keeps its marker and no step labels
    assert 'class="step"' not in mass_plot(trace)


def test_recording_off_costs_nothing(s4_engine, monkeypatch):
    """Without trace(), no recorder, no trace object and no detail event exist."""

    def refuse(*args, **kwargs):
        raise AssertionError("a trace object was created while not tracing")

    for cls in (StepRecorder, Trace, TraceStep):
        monkeypatch.setattr(cls, "__init__", refuse)
    scheduler = s4_engine.scheduler
    assert scheduler.step_recorder is None
    first = scheduler.step_count
    s4_engine.generate(PROMPT, {"regex": REGEX, "temperature": 0, "max_new_tokens": 40})
    details = [e for e in scheduler.trace if e["step"] > first and e["event"] in ("token", "jump_forward", "drafts")]
    assert details == []
    assert not [o for o in gc.get_objects() if isinstance(o, (StepRecorder, TraceStep))]


def test_a_trace_restores_the_hook_it_found(s4_engine):
    class Counting:
        masks = 0

        def before_mask(self, logits, reqs):
            Counting.masks += 1

        def after_mask(self, logits, reqs, drafts=None):
            pass

        def token(self, req, tok):
            pass

        def jump(self, req, new_ids):
            pass

    scheduler = s4_engine.scheduler
    other = scheduler.step_recorder = Counting()
    try:
        trace = sgl.trace(s4_engine, PROMPT, {"regex": REGEX, "temperature": 0, "max_new_tokens": 40})
        assert scheduler.step_recorder is other and Counting.masks >= len(trace.steps)
    finally:
        scheduler.step_recorder = None


def test_bad_input_gets_a_clear_error(s4_engine):
    with pytest.raises(ValueError, match="top_k must be an integer >= 1"):
        sgl.trace(s4_engine, PROMPT, {"regex": REGEX}, top_k=0)
    with pytest.raises(ValueError, match="unknown sampling parameter"):
        sgl.trace(s4_engine, PROMPT, {"regexp": REGEX})
    assert s4_engine.scheduler.step_recorder is None and s4_engine.stats().idle


def test_an_aborted_grammar_is_traced_to_its_finish(s4_engine):
    trace = sgl.trace(s4_engine, PROMPT, {"regex": "(", "max_new_tokens": 4})
    assert trace.steps == [] and trace.stop_reason["type"] == "abort"
    assert trace.to_html().count('data-step="') == 0


@settings(max_examples=60)
@given(st.lists(st.integers(min_value=0, max_value=4095), max_size=30))
def test_token_texts_join_to_the_decoded_text(ids):
    from real_tokenizers import bundled

    texts = TokenTexts(bundled())
    assert "".join(texts.split(ids)) == bundled().decode_bytes(ids).decode("utf-8", errors="ignore")


def test_the_cli_traces_s7_with_drafts(tmp_path, capsys):
    """An instructor's test: chapter 08's session plan could not show a draft live (trace and
    generate had no switch for drafting, off by default), only in notebook 08. Both now take
    serve's --speculative-algorithm (and --speculative-num-draft-tokens)."""
    import json
    import re

    from minisglang.cli import main

    person, prompt = PERSON, PERSON_PROMPT
    out = tmp_path / "s7.html"
    flags = ["--stage", "s7", "--regex", person, "--speculative-algorithm", "FORCED"]
    assert main(["trace", prompt, *flags, "--speculative-num-draft-tokens", "3", "-o", str(out)]) == 0
    data = json.loads(re.search(r'class="tv-data">(.*?)</script>', out.read_text(encoding="utf-8"), re.S)[1])
    assert any(step["how"] == "draft" for step in data["steps"]), data["steps"]
    assert any("drafts (s7)" in event for step in data["steps"] for event in step["ev"])
    capsys.readouterr()
    assert main(["generate", prompt, *flags]) == 0
    meta = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert meta["spec_verify_ct"] and meta["completion_tokens"] > meta["spec_verify_ct"], meta
    assert main(["trace", prompt, "--stage", "s4", "--regex", person, "--speculative-algorithm", "FORCED"]) == 2
    assert "speculative_algorithm" in capsys.readouterr().err


def test_a_jumps_recut_of_written_text_is_not_shown_as_forced_text():
    """An instructor's test: chapter 04's re-cut (seed 91: the model writes the name's end as
    `i` `at` `is`, the jump re-encodes it as `ia` `tis`) showed `ia` and `tis` in the step
    view's green "jumped (forced text)", though not one of their letters was forced: the
    lesson is that they are the model's own text, split again. Tokens of the re-encoding
    that spell only what was already written are now "re-cut"; those with forced text, jumped."""
    from minisglang.stepview.html import page_data

    person, prompt = PERSON, PERSON_PROMPT
    engine = sgl.Engine(stage="s4", max_total_tokens=2048)
    try:
        trace = sgl.trace(engine, prompt, {"regex": person, "temperature": 1.0, "seed": 91, "max_new_tokens": 60})
    finally:
        engine.shutdown()
    how = [(t.text, t.how) for t in trace.tokens]
    assert ("ia", "recut") in how and ("tis", "recut") in how and ("age", "jumped") in how, how
    (jump,) = [e for e in trace.events if e.kind == "jump" and "ia" in e.info["new"]]
    boxes = page_data(trace)["steps"][jump.before_step]["add"]
    assert [b[:2] for b in boxes[:2]] == [["ia", "recut"], ["tis", "recut"]], boxes
    assert ["age", "jumped"] in [b[:2] for b in boxes], boxes


def test_the_path_view_speaks_of_bold_jumps_only_where_a_jump_was_drawn():
    """An instructor's test: chapter 08's projected step view (s7 drafts, no jump) said "bold:
    a jump's forced text" above a drawing without a bold edge."""
    engine = sgl.Engine(stage="s7", max_total_tokens=2048, speculative_algorithm="FORCED")
    try:
        trace = sgl.trace(engine, PROMPT, {"regex": REGEX, "temperature": 0, "max_new_tokens": 40})
    finally:
        engine.shutdown()
    assert trace.automaton.kind == "path" and not any(e.kind == "jump" for e in trace.events)
    assert "bold" not in trace.automaton.note and "style=bold" not in trace.automaton.dot, trace.automaton.note


def test_a_run_of_sit_outs_is_one_line_of_the_events():
    """An instructor's test: in notebook 08's step view (a loaded machine), the events before
    one step listed "sat out this step (its grammar's work did not fit the step's budget)"
    four times over, then the drafts: a projector's list of identical lines. A run of them
    is now one line that counts the steps."""
    from types import SimpleNamespace

    from minisglang.stepview.html import page_data
    from minisglang.stepview.record import TraceEvent

    step = TraceStep(0, 5, 0, 3, 10, 1.0, 0.0, [], [], 1, "a", "draft", "a")
    events = [TraceEvent("sit_out", 0, n) for n in range(1, 5)]
    events.append(TraceEvent("drafts", 0, 5, {"proposed_text": "['a']", "accepted": 1, "rejected": 0}))
    events.append(TraceEvent("sit_out", 1, 6))
    data = page_data(SimpleNamespace(automaton=None, steps=[step], events=events))
    assert data["steps"][0]["ev"] == [
        "sat out 4 steps (its grammar's work did not fit the step's budget)",
        "drafts (s7): proposed ['a'], accepted 1, rejected 0",
    ]
    assert data["end"] == ["sat out this step (its grammar's work did not fit the step's budget)"]


def test_the_cli_says_why_a_traced_request_was_aborted(tmp_path, capsys):
    """An instructor's test: `trace --stage s1 --json-schema ...` printed "wrote t.html: 0 steps,
    stop abort; output ''" and nothing of why (s1 takes regexes only); the page itself showed
    the kind as "<AbortKind.CLIENT: 'client'>". The command line now prints the reason, and
    the page the kind's name."""
    from minisglang.cli import main
    from minisglang.stepview.html import page_data

    out = tmp_path / "t.html"
    assert main(["trace", PROMPT, "--stage", "s1", "--json-schema", '{"type": "object"}', "-o", str(out)]) == 1
    captured = capsys.readouterr()
    assert "json_schema needs stage s5-backends" in captured.err, captured
    engine = sgl.Engine(stage="s1", max_total_tokens=2048)
    try:
        trace = sgl.trace(engine, PROMPT, {"json_schema": '{"type": "object"}', "max_new_tokens": 4})
    finally:
        engine.shutdown()
    (end,) = page_data(trace)["end"]
    assert "AbortKind" not in end and "'kind': 'client'" in end, end


def test_the_cli_writes_a_page(tmp_path, capsys):
    from minisglang.cli import main

    out = tmp_path / "t.html"
    schema = tmp_path / "schema.json"
    schema.write_text('{"type": "object", "properties": {"age": {"type": "integer"}}, "required": ["age"]}')
    assert (
        main(["trace", PROMPT, "--stage", "s6", "--json-schema", str(schema), "--max-new-tokens", "20", "-o", str(out)])
        == 0
    )
    page = out.read_text(encoding="utf-8")
    assert "wrote" in capsys.readouterr().out and page.count('data-step="') >= 3 and "json_schema" in page
    assert (
        main(["trace", PROMPT, "--stage", "s2", "--grammar-backend", "xgrammar", "--regex", "[0-9]+", "-o", str(out)])
        == 2
    )
    assert "unknown option(s) 'grammar_backend' for stage s2-batched-mask" in capsys.readouterr().err
