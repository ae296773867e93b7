"""The step view's page in a real browser (headless chromium through selenium).

The page is opened from disk, → is pressed N times, and what the page shows (the step
element marked current, its state, the allowed count, the highlighted node of the
automaton, the output text) must equal the Trace's step N. A screenshot of a JSON-Schema
trace at a 65k vocabulary (a random-weight model of the bundled shape with anthropic's
tokenizer) must not be blank. Without chromium these tests are skipped with a reason
that names what to install: scripts/setup.sh installs it (as root).
"""

import io
import json
import shutil
from pathlib import Path

import pytest
import torch
from test_trace import PERSON, PERSON_PROMPT

import minisglang as sgl

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
try:
    from selenium import webdriver
    from selenium.webdriver.common.keys import Keys
except ImportError:  # pragma: no cover
    webdriver = None
MISSING = ([] if CHROMIUM else ["chromium"]) + ([] if CHROMEDRIVER else ["chromium-driver"])
pytestmark = [
    pytest.mark.skipif(
        bool(MISSING),
        reason=f"no headless browser: install it with `apt-get install "
        f"{' '.join(MISSING)}` (Debian; scripts/setup.sh does it as root)",
    ),
    pytest.mark.skipif(webdriver is None, reason="selenium is not installed: pip install -e '.[test]'"),
]
REGEX = r'\{"name": "[a-z]{1,8}", "age": [0-9]{1,2}\}'


@pytest.fixture(scope="module")
def browser():
    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1920,1080"):
        options.add_argument(arg)
    options.binary_location = CHROMIUM
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(CHROMEDRIVER))
    yield driver
    driver.quit()


def shown(driver) -> dict:
    """What the page shows now."""
    return driver.execute_script("""
        var li = document.querySelector('li[data-step].current'), g = document.querySelector('g.node.current');
        return {step: +li.dataset.step, state: li.dataset.state, allowed: document.querySelector('.allowed').textContent,
                node: g ? g.querySelector('title').textContent : null,
                text: document.querySelector('.out').textContent};""")


def test_arrow_keys_step_through_the_trace(browser, tmp_path):
    engine = sgl.Engine(stage="s2", max_total_tokens=2048)  # (no compile workers to start: quick)
    try:
        trace = sgl.trace(engine, "Extract as JSON:", {"regex": REGEX, "temperature": 0, "max_new_tokens": 40})
    finally:
        engine.shutdown()
    page = trace.save(tmp_path / "trace.html")
    browser.get(page.as_uri())
    body = browser.find_element("tag name", "body")
    assert browser.get_log("browser") == [], "the page's script raised"
    pressed = 0
    for n in sorted({0, 1, len(trace.steps) // 2, len(trace.steps) - 1}):
        for _ in range(n - pressed):
            body.send_keys(Keys.ARROW_RIGHT)
        pressed = n
        step, got = trace.steps[n], shown(browser)
        assert got == {
            "step": n,
            "state": str(step.state),
            "allowed": str(step.allowed),
            "node": trace.automaton.node_of[str(step.state)],
            "text": step.text,
        }, f"step {n}"
    # Each legend item stays whole on one line (an instructor saw "re-cut (... split again by"
    # and "a jump)" on two, at 1920x1080).
    broken = browser.execute_script(
        "return [...document.querySelectorAll('.legend span')].filter(s => s.getClientRects().length > 1)"
        ".map(s => s.textContent);"
    )
    assert broken == [], broken
    body.send_keys(Keys.ARROW_RIGHT)  # past the end: stays on the last step
    assert shown(browser)["step"] == len(trace.steps) - 1
    body.send_keys(Keys.ARROW_LEFT)
    assert shown(browser)["step"] == max(len(trace.steps) - 2, 0)


def drawing(driver) -> dict:
    """The automaton's drawing as the page shows it: the height of its labels (px), whether
    the highlighted node lies inside the box's visible part, and the box's and drawing's widths."""
    return driver.execute_script("""
        var box = document.querySelector('.svgbox'), svg = box.querySelector('svg');
        var t = svg.querySelector('g.node text'), g = svg.querySelector('g.node.current');
        var b = box.getBoundingClientRect(), r = g ? g.getBoundingClientRect() : null;
        var font = parseFloat(t.getAttribute('font-size')) * t.getScreenCTM().a;  // (pt -> px in the CTM)
        return {label_px: font, box: b.width, svg: svg.getBoundingClientRect().width,
                visible: !!r && r.left >= b.left && r.right <= b.right && r.top >= b.top && r.bottom <= b.bottom};""")


def test_a_large_automaton_is_readable_on_a_projector(browser, tmp_path):
    """An instructor's test: chapter 04's session plan projects the step view of the
    PERSON regex; its automaton (1704 pt wide) was shrunk into the page's column, labels
    about 7 px high on a 1920x1080 screen, unreadable. A drawing that would shrink that far
    is shown at its own size, the box scrolled to the highlighted node at every step; a
    click (or z) fits it into the column for an overview, and another brings it back."""
    person, prompt = PERSON, PERSON_PROMPT
    engine = sgl.Engine(stage="s2", max_total_tokens=2048)
    try:
        trace = sgl.trace(engine, prompt, {"regex": person, "temperature": 0, "max_new_tokens": 60})
    finally:
        engine.shutdown()
    browser.get(trace.save(tmp_path / "person.html").as_uri())
    assert browser.get_log("browser") == [], "the page's script raised"
    body = browser.find_element("tag name", "body")
    for n in range(len(trace.steps)):
        got = drawing(browser)
        assert got["label_px"] >= 14 and got["visible"], f"step {n}: {got}"
        body.send_keys(Keys.ARROW_RIGHT)
    # On a 1280x720 projector the mass plot (900 wide) stays inside its column, under the
    # automaton's column, not over it (it ran 250 px into it).
    browser.set_window_size(1280, 720)
    try:
        over = browser.execute_script(
            "var p = document.querySelector('svg.plot'), c = p.closest('.col');"
            "return p.getBoundingClientRect().right - c.getBoundingClientRect().right;"
        )
    finally:
        browser.set_window_size(1920, 1080)
    assert over <= 1, f"the mass plot runs {over:.0f} px past its column at 1280x720"
    browser.find_element("css selector", ".svgbox svg").click()
    fitted = drawing(browser)
    assert fitted["svg"] <= fitted["box"] + 1 and fitted["label_px"] < 14, fitted
    body.send_keys("z")
    assert drawing(browser)["label_px"] >= 14


@pytest.fixture(scope="module")
def model_65k(tmp_path_factory):
    """The bundled model's shape, random weights, anthropic's 65k tokenizer."""
    from real_tokenizers import ANTHROPIC_TOKENIZER_JSON, anthropic_65k
    from transformers import LlamaConfig, LlamaForCausalLM

    folder = tmp_path_factory.mktemp("random65k")
    shape = json.loads((Path(sgl.DEFAULT_MODEL_PATH) / "config.json").read_text())
    keys = (
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "max_position_embeddings",
    )
    config = LlamaConfig(
        vocab_size=anthropic_65k().vocab_size,
        tie_word_embeddings=True,
        bos_token_id=0,
        eos_token_id=0,
        **{k: shape[k] for k in keys},
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)
    shutil.copy(ANTHROPIC_TOKENIZER_JSON, folder / "tokenizer.json")
    return folder


def test_a_65k_json_schema_trace_is_drawn(browser, tmp_path, model_65k):
    from PIL import Image

    engine = sgl.Engine(model_path=str(model_65k), stage="s6", max_total_tokens=2048)
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 12},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
        },
        "required": ["name", "age"],
        "additionalProperties": False,
    }
    try:
        trace = sgl.trace(engine, "Person:", {"json_schema": schema, "temperature": 0, "max_new_tokens": 40})
    finally:
        engine.shutdown()
    assert trace.steps and all(s.vocab >= 65_000 for s in trace.steps)
    browser.get(trace.save(tmp_path / "trace65k.html").as_uri())
    assert browser.get_log("browser") == []
    assert shown(browser)["allowed"] == str(trace.steps[0].allowed)
    picture = Image.open(io.BytesIO(browser.get_screenshot_as_png())).convert("L")
    pixels = torch.frombuffer(bytearray(picture.tobytes()), dtype=torch.uint8).float()
    assert pixels.var() > 100, "the screenshot is (nearly) blank"
    assert (pixels < 128).float().mean() > 0.01, "too little is drawn"
