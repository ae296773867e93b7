"""One behaviour suite for every stage that does constrained decoding.

Capabilities (which assertions apply to which stage) come from each stage class's
`supports` set, so a new stage inherits every test of the stages before it.
"""

import re

import pytest

import minisglang as sgl
from minisglang.stages import available_stages, get_stage_class

CONSTRAINED_STAGES = [t for t in available_stages() if "regex" in get_stage_class(t).supports]

USER = "<|user|>\n{}\n<|assistant|>\n"
# (regex, prompt): IPv4, dates, emails, phones, hex colours, Chinese, emoji, alternations,
# bounded repeats, optional groups, JSON objects.
CASES = [
    (
        r"((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])",
        "What is the server's IP address?",
    ),
    (r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])", "When was she born?"),
    (r"2024-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])", "Give a date in 2024."),
    (r"[a-z0-9._]{1,12}@[a-z0-9]{1,10}\.(com|org|cn)", "What is Wang Fang's email?"),
    (r"user@example\.com", "Write an email address."),
    (r"\([0-9]{3}\) [0-9]{3}-[0-9]{4}", "What is his phone number?"),
    (r"1[3-9][0-9]{9}", "张三的手机号码是多少？"),
    (r"#[0-9A-F]{6}", "What colour is the sky, in hex?"),
    (r"#[0-9a-f]{3}([0-9a-f]{3})?", "Pick a hex colour."),
    (r"(Hello|Hi|Hey)", "Greet me."),
    (r"(yes|no)", "Is the sky blue?"),
    (r"[0-9]{3}", "Give a three digit number."),
    (r"[1-9][0-9]{0,2}", "How old is he?"),
    (r"-?[0-9]+(\.[0-9]{1,2})?", "What is the temperature?"),
    (r"[A-Z][a-z]{2,8}", "Name a city."),
    (r"(张三|李四|王五)", "他叫什么名字？"),
    (r"[一-鿿]{2,4}", "用中文说一个爱好。"),
    (r"我喜欢(编程|摄影|爬山)。", "你喜欢什么？"),
    (r"(😀|🎉|🚀)+", "Send an emoji."),
    (r"Status: (ok|error) ✅", "Report the status."),
    (r"[0-9]{2}:[0-9]{2}(:[0-9]{2})?", "What time is it?"),
    (r"(Mon|Tue|Wed|Thu|Fri|Sat|Sun)day", "What day is it?"),
    (r"a{2,5}b?", "Say something."),
    (r"(ab|cd){1,3}", "Say something."),
    (r"[xyz]{0,3}!", "Shout."),
    (r"The answer is ([0-9]+)\.", "What is 6 times 7?"),
    (r"\{\"name\": \"[A-Za-z ]{1,20}\", \"age\": [0-9]{1,3}\}", "Extract as JSON: Li Lei is 31 years old."),
    (
        r"\{\"name\": \"[^\"]{1,10}\", \"age\": [1-9][0-9]?, \"hobbies\": \[(\"[^\"]{1,8}\"(, \"[^\"]{1,8}\"){0,2})?\]\}",
        "Extract name, age and hobbies as JSON: 张三是一名软件工程师，今年28岁，平时喜欢编程、摄影和爬山。",
    ),
    (r"\[([0-9]+(, [0-9]+){0,4})?\]", "List some numbers."),
    (r"(true|false|null)", "Is it raining?"),
    (r"[-+]?[0-9]+[ ]*", "Give an integer."),
    (r"\w+@\w+\.com", "Email?"),
]
SEEDS = range(6)


@pytest.fixture(scope="module", params=CONSTRAINED_STAGES)
def engine(request):
    eng = sgl.Engine(stage=request.param)
    yield eng
    eng.shutdown()


def assert_stopped_outputs_match(engine, cases, seeds, min_stopped: float) -> None:
    """Sample every (regex, question) at temperature 1.0 with each seed; every output that
    finishes with "stop" fully matches its regex, and at least `min_stopped` of them stop."""
    prompts, params = [], []
    for regex, question in cases:
        for seed in seeds:
            prompts.append(USER.format(question))
            params.append({"regex": regex, "temperature": 1.0, "seed": seed, "max_new_tokens": 64})
    outs = engine.generate(prompts, params)
    stopped = 0
    for out, p in zip(outs, params):
        reason = out["meta_info"]["finish_reason"]
        assert reason["type"] in ("stop", "length"), reason
        if reason["type"] == "stop":
            stopped += 1
            assert re.fullmatch(p["regex"], out["text"]), (p["regex"], out["text"])
    assert stopped >= min_stopped * len(outs)


def test_every_stopped_output_matches_its_regex(engine):
    assert_stopped_outputs_match(engine, CASES, SEEDS, min_stopped=0.9)


def test_constrained_and_unconstrained_share_a_batch(engine):
    q = USER.format("When was she born?")
    outs = engine.generate(
        [q, q, q],
        [
            {"regex": r"[0-9]{4}-[0-9]{2}-[0-9]{2}", "temperature": 0},
            {"temperature": 0, "max_new_tokens": 12},
            {"regex": r"(yes|no)", "temperature": 0},
        ],
    )
    assert re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", outs[0]["text"])
    assert outs[1]["meta_info"]["finish_reason"]["type"] in ("stop", "length")
    assert outs[2]["text"] in ("yes", "no")
    alone = engine.generate(q, {"temperature": 0, "max_new_tokens": 12})
    assert alone["text"] == outs[1]["text"]


def test_invalid_regex_aborts_only_that_request(engine):
    q = USER.format("Hello")
    outs = engine.generate(
        [q, q], [{"regex": "(unclosed", "max_new_tokens": 5}, {"regex": r"[0-9]{2}", "temperature": 0}]
    )
    reason = outs[0]["meta_info"]["finish_reason"]
    assert reason["type"] == "abort"
    assert "(unclosed" in reason["message"]
    assert re.fullmatch(r"[0-9]{2}", outs[1]["text"])


def test_eos_only_in_accepting_states(engine):
    """'127.0.0.1' may stop, but a longer continuation is allowed too (may stop != must stop)."""
    q = USER.format("What is the server's IP address?")
    outs = engine.generate(
        [q] * 8,
        [{"regex": r"127\.0\.0\.1[0-9]*", "temperature": 1.0, "seed": s, "max_new_tokens": 12} for s in range(8)],
    )
    for out in outs:
        assert out["text"].startswith("127.0.0.1")
        if out["meta_info"]["finish_reason"]["type"] == "stop":
            assert re.fullmatch(r"127\.0\.0\.1[0-9]*", out["text"])


def test_length_finish_reports_incomplete_output(engine):
    out = engine.generate(
        USER.format("Extract as JSON: Li Lei is 31."), {"regex": r"\{\"name\": \"[a-z]{10,20}\"\}", "max_new_tokens": 3}
    )
    assert out["meta_info"]["finish_reason"] == {"type": "length", "length": 3}
    assert not re.fullmatch(r"\{\"name\": \"[a-z]{10,20}\"\}", out["text"])


def test_json_schema_is_refused_before_s5_with_a_message():
    eng = sgl.Engine(stage="s1")
    out = eng.generate("x", {"json_schema": {"type": "integer"}})
    assert out["meta_info"]["finish_reason"]["type"] == "abort"
    assert "json_schema" in out["meta_info"]["finish_reason"]["message"]
