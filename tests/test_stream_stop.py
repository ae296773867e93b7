"""Stop strings and streaming, on every constrained stage: the streamed deltas join to the
final text, and no delta ever holds text a stop string later trims, however many characters
arrive in one step (s4+'s jumps, re-tokenization after a jump, multi-byte characters).

The oracle is the same request without stop strings (greedy): its text cut at the earliest
occurrence of any stop string is what the request with them must answer, streamed or not.
"""

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import minisglang as sgl
from minisglang.constrained.json_schema import build_regex_from_schema

STAGES = ["s1", "s2", "s3", "s4", "s5", "s6"]
CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 8}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
COLOR = {
    "type": "object",
    "properties": {"color": {"enum": ["red", "green", "blue"]}, "ok": {"type": "boolean"}},
    "required": ["color", "ok"],
    "additionalProperties": False,
}
REGEXES = [
    r'\{"name": "[a-z]{1,8}", "city": "(Paris|Berlin|Tokyo)"\}',  # long forced runs: s4+ jump them
    r"(yes|no), because [a-z ]{3,20}\.",
    r"2024-(0[1-9]|1[0-2])-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]",
    r"张三是[一二三四五六七八九十]{1,3}岁的[工程师学生老]{2,3}",  # multi-byte characters, forced and chosen
    r"[a-z]{2,12}",
]
SCHEMAS = [CITY, PERSON, COLOR]
PROMPT = "<|user|>\nAnswer in the format asked.\n<|assistant|>\n"
GREEDY = {"temperature": 0, "max_new_tokens": 24}


@pytest.fixture(scope="module")
def engines(one_torch_thread):
    made = {}

    def get(stage: str) -> sgl.Engine:
        if stage not in made:
            made[stage] = sgl.Engine(stage=stage)
        return made[stage]

    yield get
    for eng in made.values():
        eng.shutdown()


def constraint(stage: str, schema: dict) -> dict:
    """`schema` as s5+ takes it, or as its regex for the stages that take only regexes."""
    if stage in ("s5", "s6"):
        return {"json_schema": schema}
    return {"regex": build_regex_from_schema(schema)}


def streamed(eng: sgl.Engine, prompt: str, params: dict) -> tuple[list[str], dict]:
    chunks = list(eng.generate(prompt, params, stream=True))
    return [c["text"] for c in chunks], chunks[-1]["meta_info"]


def cut_at_stops(text: str, stops: list[str]) -> tuple[str, str | None]:
    """`text` fed one character at a time, until a stop string appears (None if none does):
    the text before it, and that stop string (the longest of those ending there)."""
    for end in range(1, len(text) + 1):
        ending = [s for s in stops if text[:end].endswith(s)]
        if ending:
            s = max(ending, key=len)
            return text[: end - len(s)], s
    return text, None


@pytest.mark.parametrize("stage", ["s4", "s5", "s6"])
def test_a_stop_string_inside_jumped_text_is_never_streamed(engines, stage):
    """The TOOLS engineer's report: `{"city": "` is forced, so it arrives in one jump; the
    stream sent `{"c` before the stop string trimmed the text to `{"`."""
    eng = engines(stage)
    params = {**constraint(stage, CITY), "stop": ["city"], "max_new_tokens": 30, "temperature": 0}
    deltas, meta = streamed(eng, "Where?", params)
    final = eng.generate("Where?", params)
    # `{`, the optional space of the whitespace policy (the model's choice), then the jumped `"`
    assert "".join(deltas) == final["text"] and re.fullmatch(r'\{ ?"', final["text"])
    assert meta["finish_reason"] == final["meta_info"]["finish_reason"] == {"type": "stop", "matched": "city"}
    assert any(e["event"] == "jump" for e in eng.trace)  # the case under test: a jump wrote it


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize(
    "regex,stops,expected,matched",
    [
        ("abc", ["c"], "ab", "c"),  # the token that ends the grammar also completes the stop
        ("abcd", ["d", "b"], "a", "b"),  # a later-listed stop string that ends sooner wins
        ("abcd", ["abcd", "bc"], "a", "bc"),  # ends sooner, though another starts sooner
        ("abcd", ["c", "bc"], "a", "bc"),  # both end at c: the longer one cuts
        ("abcd", ["bcx", "cd"], "ab", "cd"),  # a partial match that fails, then one that completes
        ("张三是[0-9]{2}", ["三"], "张", "三"),  # a multi-byte stop string inside forced text
    ],
)
def test_the_text_ends_before_the_first_stop_string_to_appear(engines, stage, regex, stops, expected, matched):
    eng = engines(stage)
    params = {"regex": regex, "stop": stops, "max_new_tokens": 12, "temperature": 0}
    final = eng.generate("x", params)
    deltas, meta = streamed(eng, "x", params)
    assert final["text"] == "".join(deltas) == expected
    assert final["meta_info"]["finish_reason"] == meta["finish_reason"] == {"type": "stop", "matched": matched}


def constraints(stage: str):
    """One request's constraint: a regex (every stage), or a JSON schema (s5 and s6 take them)."""
    regexes = st.sampled_from(REGEXES).map(lambda r: {"regex": r})
    if stage not in ("s5", "s6"):
        return regexes
    return regexes | st.sampled_from(SCHEMAS).map(lambda s: {"json_schema": s})


@pytest.mark.parametrize("stage", STAGES)
@settings(
    max_examples=8,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_streamed_deltas_join_to_the_final_text_and_no_stop_string_is_shown(engines, stage, data):
    eng = engines(stage)
    params = {**data.draw(constraints(stage)), **GREEDY}
    unstopped = eng.generate(PROMPT, params)["text"]
    # Stop strings: pieces of the text the request writes (so they hit, at any offset and in
    # forced text as well as sampled), and arbitrary ones (that mostly do not).
    assert unstopped, "every constraint here writes at least one character"
    piece = st.integers(0, len(unstopped) - 1).flatmap(
        lambda i: st.integers(i + 1, min(i + 6, len(unstopped))).map(lambda j: unstopped[i:j])
    )
    stops = data.draw(st.lists(piece | st.text(min_size=1, max_size=4), min_size=1, max_size=3))
    params["stop"] = stops
    final = eng.generate(PROMPT, params)
    deltas, meta = streamed(eng, PROMPT, params)
    expected, matched = cut_at_stops(unstopped, stops)
    assert "".join(deltas) == final["text"] == expected
    assert not any(s in final["text"] for s in stops)
    if matched is not None:
        assert meta["finish_reason"] == final["meta_info"]["finish_reason"] == {"type": "stop", "matched": matched}
    # What a client shows while the request runs is always a prefix of the answer.
    shown = ""
    for d in deltas:
        shown += d
        assert expected.startswith(shown)
    if "json_schema" in params and matched is None and final["meta_info"]["finish_reason"]["type"] == "stop":
        json.loads(final["text"])  # not cut: the constraint's whole answer
