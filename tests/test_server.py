"""The OpenAI-compatible server on loopback, driven by the real `openai` client, and the
`function`/`gen` frontend against both a local Engine and the server.

Tests of minisglang/lang.py (the frontend) and of minisglang/server/ through the openai client.
"""

import asyncio
import json
import re
import time

import httpx
import jsonschema
import openai
import pytest
from test_server_faults import wait_idle

import minisglang as sgl
from minisglang import assistant, function, gen, system, user
from minisglang.server import create_app, serving_in_thread

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer", "minimum": 0, "maximum": 200},
        "hobbies": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 4},
    },
    "required": ["name", "age", "hobbies"],
    "additionalProperties": False,
}
MODEL = "tiny-json-llama"
ZH = "张三是一名软件工程师，今年28岁，平时喜欢编程、摄影和爬山。"


@pytest.fixture(scope="module")
def server():
    engine = sgl.Engine(max_total_tokens=6000, max_running_requests=64)
    with serving_in_thread(create_app(engine)) as url:
        yield url, engine


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server[0] + "/v1", api_key="none")


def test_models(client):
    assert client.models.list().data[0].id == MODEL


def test_an_unknown_model_is_a_404(client):
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
    assert "gpt-4o" in info.value.body["message"]


def test_chat_with_json_schema_response_format(client):
    resp = client.chat.completions.create(
        model="tiny-json-llama",
        temperature=0,
        max_tokens=120,
        messages=[{"role": "user", "content": "Extract name, age and hobbies as JSON:\n" + ZH}],
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}},
    )
    choice = resp.choices[0]
    assert choice.finish_reason == "stop"
    jsonschema.validate(json.loads(choice.message.content), PERSON)
    assert resp.usage.completion_tokens > 0
    extra = resp.usage.model_extra
    assert extra["completion_tokens_wo_jump_forward"] <= resp.usage.completion_tokens


def test_completions_with_regex_and_streaming(client):
    kwargs = dict(
        model="tiny-json-llama",
        prompt="<|user|>\nWhen was she born?\n<|assistant|>\n",
        temperature=0.8,
        seed=3,
        max_tokens=20,
        extra_body={"regex": r"[0-9]{4}-[0-9]{2}-[0-9]{2}"},
    )
    full = client.completions.create(**kwargs)
    assert re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", full.choices[0].text)
    chunks = list(client.completions.create(stream=True, **kwargs))
    assert "".join(c.choices[0].text for c in chunks) == full.choices[0].text
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_chat_streaming(client):
    stream = list(
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=10, temperature=0, stream=True
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream)
    full = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=10, temperature=0
    )
    assert text == full.choices[0].message.content
    # OpenAI's shape: the role in the first delta only, no usage unless asked for.
    assert [c.choices[0].delta.role for c in stream] == ["assistant"] + [None] * (len(stream) - 1)
    assert all(c.usage is None and c.choices for c in stream)


def test_streaming_usage_comes_last_with_no_choices_when_asked(client):
    for create, kwargs in (
        (client.chat.completions.create, {"messages": [{"role": "user", "content": "Hi"}]}),
        (client.completions.create, {"prompt": "Date:"}),
    ):
        chunks = list(
            create(
                model=MODEL, max_tokens=6, temperature=0, stream=True, stream_options={"include_usage": True}, **kwargs
            )
        )
        last = chunks[-1]
        assert last.choices == [] and last.usage.completion_tokens >= 1
        assert all(c.usage is None and len(c.choices) == 1 for c in chunks[:-1])
        assert chunks[-2].choices[0].finish_reason in ("stop", "length")
        assert last.usage.total_tokens == last.usage.prompt_tokens + last.usage.completion_tokens


def test_with_include_usage_every_chunk_carries_usage_null_until_the_last(server):
    """OpenAI's stream_options.include_usage: "all other chunks will also include a usage
    field, but with a null value" (ours left it out: a stranger's agent)."""
    body = {"prompt": "Date:", "max_tokens": 4, "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", server[0] + "/v1/completions", timeout=60, json=body) as r:
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    assert all("usage" in e and e["usage"] is None for e in events[:-1]) and events[-1]["usage"]["total_tokens"]


def test_cached_tokens_are_prompt_tokens_only(client):
    """A repeated prompt is served from the radix cache; with s4/s5 jump-forward re-admissions
    the cached count must still be at most the prompt (it was 43 and 63 for 19 tokens)."""
    kwargs = dict(
        model=MODEL,
        temperature=0,
        max_tokens=120,
        messages=[{"role": "user", "content": "Extract name, age and hobbies as JSON:\n" + ZH}],
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}},
    )
    client.chat.completions.create(**kwargs)
    usage = client.chat.completions.create(**kwargs).usage
    cached = usage.prompt_tokens_details.cached_tokens
    assert 0 < cached <= usage.prompt_tokens - 1  # the last prompt token is always computed


# ---------------------------------------------------------------------- n choices
CHAT_HOT = dict(
    model=MODEL, messages=[{"role": "user", "content": "Tell me about Paris."}], max_tokens=12, temperature=0.9
)


def by_choice(chunks, text_of) -> tuple[dict[int, str], dict[int, list]]:
    """A stream's text and finish_reasons (one per chunk) by choice index; every chunk has one choice."""
    texts: dict[int, str] = {}
    finishes: dict[int, list] = {}
    for chunk in chunks:
        assert len(chunk.choices) == 1 and chunk.usage is None
        choice = chunk.choices[0]
        texts[choice.index] = texts.get(choice.index, "") + (text_of(choice) or "")
        finishes.setdefault(choice.index, []).append(choice.finish_reason)
    return texts, finishes


def test_n_choices_are_the_answers_of_seeds_s_to_s_plus_n_minus_1(client):
    """Choice i samples with seed + i: choice 0 is the n=1 answer with the seed. The usage
    counts the prompt once and sums the completions."""
    resp = client.chat.completions.create(n=3, seed=7, **CHAT_HOT)
    singles = [client.chat.completions.create(seed=7 + i, **CHAT_HOT) for i in range(3)]
    assert [c.index for c in resp.choices] == [0, 1, 2]
    assert [c.message.content for c in resp.choices] == [s.choices[0].message.content for s in singles]
    assert len({c.message.content for c in resp.choices}) > 1  # independent samples
    assert [c.finish_reason for c in resp.choices] == [s.choices[0].finish_reason for s in singles]
    assert resp.usage.prompt_tokens == singles[0].usage.prompt_tokens
    assert resp.usage.completion_tokens == sum(s.usage.completion_tokens for s in singles)
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens
    assert resp.usage.prompt_tokens_details.cached_tokens < resp.usage.prompt_tokens


def test_n_greedy_choices_are_one_text(client):
    resp = client.completions.create(model=MODEL, prompt="Date:", n=3, temperature=0, max_tokens=8)
    assert [c.index for c in resp.choices] == [0, 1, 2] and len({c.text for c in resp.choices}) == 1


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_n_choices_stream_by_index_each_with_its_finish_reason(client, endpoint):
    if endpoint == "chat":
        create, kwargs = client.chat.completions.create, CHAT_HOT
        text_of, whole_text = (lambda c: c.delta.content), (lambda c: c.message.content)
    else:
        create = client.completions.create
        kwargs = dict(model=MODEL, prompt="Numbers: 1, 2,", stop=["5"], max_tokens=12, temperature=0.9)
        text_of = whole_text = lambda c: c.text
    full = create(n=3, seed=11, **kwargs)
    chunks = list(create(n=3, seed=11, stream=True, stream_options={"include_usage": True}, **kwargs))
    texts, finishes = by_choice(chunks[:-1], text_of)
    assert texts == {c.index: whole_text(c) for c in full.choices}
    for c in full.choices:  # each choice's reason, in its last chunk only
        assert finishes[c.index] == [None] * (len(finishes[c.index]) - 1) + [c.finish_reason]
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and (usage.prompt_tokens, usage.completion_tokens) == (
        full.usage.prompt_tokens,
        full.usage.completion_tokens,
    )
    if endpoint == "chat":  # each choice's first delta, and only it, has the role
        first: dict[int, str | None] = {}
        for c in chunks[:-1]:
            first.setdefault(c.choices[0].index, c.choices[0].delta.role)
        assert first == dict.fromkeys(range(3), "assistant")
        assert sum(c.choices[0].delta.role is not None for c in chunks[:-1]) == 3


def test_n_beyond_the_batch_is_a_400_naming_n(client):
    """The choices are queued together: no more than the batch's rows (64 here)."""
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=MODEL, prompt="x", n=65, max_tokens=2)
    assert info.value.body["param"] == "n" and "at most 64" in info.value.body["message"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_leaves_two_choices_aborts_both(server, stream):
    """Mid-stream (after both choices' first events), or while waiting for the whole answer."""
    url, engine = server
    body = {"prompt": "Tell me", "n": 2, "max_tokens": 400, "ignore_eos": True, "stream": stream}
    aborted = engine.stats().finished_by_reason.get("abort", 0)

    async def leave() -> set[int]:
        seen: set[int] = set()
        async with httpx.AsyncClient(timeout=60) as http:
            if not stream:
                with pytest.raises(httpx.TimeoutException):
                    await http.post(url + "/v1/completions", json=body, timeout=0.4)
                return {0, 1}
            async with http.stream("POST", url + "/v1/completions", json=body) as r:
                async for line in r.aiter_lines():
                    if line.startswith("data: "):
                        seen.add(json.loads(line[6:])["choices"][0]["index"])
                        if seen == {0, 1}:
                            return seen
        return seen

    assert asyncio.run(leave()) == {0, 1}
    stats = wait_idle(engine)
    assert stats.idle and stats.pools_full, stats
    assert stats.finished_by_reason.get("abort", 0) == aborted + 2


@pytest.mark.parametrize("stream", [False, True])
def test_an_error_in_one_choice_is_the_requests_and_aborts_the_others(server, monkeypatch, stream):
    """Choice 1 (seed 501) fails at its fourth token: the request fails with its error, as
    n=1 would (a 500, or an error event once the stream began), and nothing leaks."""
    url, engine = server
    advance = engine.stage.advance

    def advance_or_fail(req, token_id):
        if req.sampling_params.seed == 501 and len(req.output_ids) > 3:
            raise RuntimeError("injected fault in choice 1")
        return advance(req, token_id)

    monkeypatch.setattr(engine.stage, "advance", advance_or_fail)
    aborted = engine.stats().finished_by_reason.get("abort", 0)
    body = {"prompt": "Tell me", "n": 3, "seed": 500, "temperature": 0.8, "max_tokens": 300, "ignore_eos": True}
    r = httpx.post(url + "/v1/completions", json={**body, "stream": stream}, timeout=60)
    if stream:
        events = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]" and "injected fault in choice 1" in json.loads(events[-2])["error"]["message"]
    else:
        assert r.status_code == 500 and "injected fault in choice 1" in r.json()["error"]["message"], r.text
    stats = wait_idle(engine)
    assert stats.idle and stats.pools_full, stats
    assert stats.finished_by_reason.get("abort", 0) == aborted + 3  # none of the 300-token choices ran on


def test_json_object_mode(client):
    resp = client.chat.completions.create(
        model=MODEL,
        max_tokens=100,
        temperature=0,
        messages=[{"role": "user", "content": "Give me JSON about Li Lei."}],
        response_format={"type": "json_object"},
    )
    if resp.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(resp.choices[0].message.content), dict)


def test_matched_stop_tells_a_cut_answer_from_a_whole_one(client):
    """A client's stop string may cut a constrained answer (finish_reason "stop" all the same,
    as OpenAI and SGLang do); SGLang's `matched_stop` names it; a whole one has None (its
    grammar ended it) or EOS's token id."""
    kwargs = dict(
        model=MODEL,
        max_tokens=100,
        temperature=0,
        messages=[{"role": "user", "content": "Extract name and age: Li Lei is 31 years old."}],
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}},
    )
    whole = client.chat.completions.create(**kwargs).choices[0]
    assert whole.finish_reason == "stop" and not isinstance(whole.model_extra["matched_stop"], str)
    json.loads(whole.message.content)
    cut = client.chat.completions.create(**kwargs, stop=[","]).choices[0]
    assert cut.finish_reason == "stop" and cut.model_extra["matched_stop"] == ","
    assert whole.message.content.startswith(cut.message.content) and "," not in cut.message.content


@pytest.mark.parametrize(
    "body,needle",
    [
        ({"prompt": "x", "regex": "(unclosed"}, "(unclosed"),
        ({"prompt": "x", "json_schema": {"type": "integer", "multipleOf": 3}}, "multipleOf"),  # unbounded
        ({"prompt": "x", "json_schema": "{not json"}, "json"),
        ({"prompt": "x", "temprature": 1}, "temprature"),
        ({"prompt": 5}, "prompt: must be a string"),
        ({"prompt": "x", "response_format": {"type": "xml"}}, "response_format.type: must be one of"),
    ],
)
def test_bad_input_is_a_400_with_a_message(server, body, needle):
    r = httpx.post(server[0] + "/v1/completions", json=body, timeout=60)
    assert r.status_code == 400, r.text
    assert needle in r.json()["error"]["message"]


def test_malformed_body_is_a_400(server):
    r = httpx.post(
        server[0] + "/v1/chat/completions", content=b"{nope", timeout=30, headers={"Content-Type": "application/json"}
    )
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
    r = httpx.post(server[0] + "/v1/chat/completions", json={"messages": "hi"}, timeout=30)
    assert r.status_code == 400 and "messages: must be a list" in r.json()["error"]["message"]


def test_server_info_says_the_load(server):
    info = httpx.get(server[0] + "/get_server_info", timeout=30).json()
    load = info["load"]
    assert load["running"] >= 0 and 0 <= load["free_kv_slots"] <= load["total_kv_slots"], load


def test_native_generate(server):
    r = httpx.post(
        server[0] + "/generate",
        timeout=60,
        json={"text": "2024-", "sampling_params": {"regex": r"[0-9]{2}-[0-9]{2}", "temperature": 0}},
    )
    assert r.status_code == 200
    assert re.fullmatch(r"[0-9]{2}-[0-9]{2}", r.json()["text"])
    assert r.json()["meta_info"]["finish_reason"]["type"] == "stop"


def test_native_generate_takes_what_sglangs_own_client_sends(server):
    """SGLang's RuntimeEndpoint asks /get_model_info and sends neutral values of parameters we
    do not implement, nulls for defaults and `sampling_seed`: all were 400s (a stranger's
    find); a parameter we do not implement with a working value is still refused by name."""
    url = server[0]
    info = httpx.get(url + "/get_model_info", timeout=30).json()
    assert info["is_generation"] is True and info["model_path"]
    neutral = {"skip_special_tokens": True, "spaces_between_special_tokens": True, "n": 1, "min_p": 0.0}
    params = {"regex": "[0-9]{3}", "max_new_tokens": None, "temperature": None, "sampling_seed": 7, **neutral}
    body = {"text": "Code:", "sampling_params": params, "return_logprob": False}
    r = httpx.post(url + "/generate", timeout=60, json=body)
    assert r.status_code == 200 and re.fullmatch("[0-9]{3}", r.json()["text"]), r.text
    for bad, field in (
        ({"sampling_params": {"frequency_penalty": 0.5}}, "sampling_params.frequency_penalty"),
        ({"sampling_params": {"seed": 1, "sampling_seed": 1}}, "sampling_params.sampling_seed"),
        ({"return_logprob": True}, "return_logprob"),
        ({"text": ["a", "b"]}, "text"),
        ({"sampling_params": {"top_p": 2}}, "sampling_params.top_p"),
        ({"sampling_params": {"regex": "a{2,1}"}}, "sampling_params.regex"),  # (refused by its compile)
    ):
        r = httpx.post(url + "/generate", timeout=30, json={"text": "Code:", **bad})
        assert r.status_code == 400 and field in r.json()["error"]["message"], (bad, r.text)
        if field.startswith("sampling_params."):  # the error body's `param` names the field too
            assert r.json()["error"]["param"] == field, r.text


def test_native_generate_streams_the_text_so_far_as_sglang_does(server):
    """Each event holds the whole text so far (SGLang's default; its clients print
    `text[len(seen):]`), the last one the answer the same request gets unstreamed."""
    body = {"text": "Once upon", "sampling_params": {"temperature": 0, "max_new_tokens": 12, "ignore_eos": True}}
    whole = httpx.post(server[0] + "/generate", timeout=60, json=body).json()["text"]
    texts = []
    with httpx.stream("POST", server[0] + "/generate", timeout=60, json={**body, "stream": True}) as r:
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                texts.append(json.loads(line[6:])["text"])
    assert len(texts) > 2 and texts[-1] == whole
    assert all(later.startswith(earlier) for earlier, later in zip(texts, texts[1:])), texts


@pytest.mark.slow
def test_load_200_mixed_requests_with_client_aborts(server):
    """Bounded load on loopback: zero server errors, and afterwards no slot is leaked."""
    url, engine = server

    async def one(http, i):
        kind = i % 4
        if kind == 0:
            body = {"prompt": f"Numbers: {i},", "max_tokens": 8, "temperature": 0.7, "seed": i}
        elif kind == 1:
            body = {"prompt": "Date:", "max_tokens": 16, "regex": r"[0-9]{4}-[0-9]{2}-[0-9]{2}"}
        elif kind == 2:
            body = {"prompt": "x", "regex": "[z-a]"}  # a 400, not a 500
        else:
            body = {"prompt": "Tell me a story", "max_tokens": 40, "stream": True}
        if kind == 3 and i % 8 == 3:  # a client that leaves in the middle of a stream
            try:
                async with http.stream("POST", url + "/v1/completions", json=body) as r:
                    async for _ in r.aiter_lines():
                        break
            except httpx.HTTPError:
                pass
            return None
        r = await http.post(url + "/v1/completions", json=body)
        return r.status_code

    async def main():
        async with httpx.AsyncClient(timeout=300) as http:
            return await asyncio.gather(*[one(http, i) for i in range(200)])

    codes = [c for c in asyncio.run(main()) if c is not None]
    assert all(c < 500 for c in codes)
    assert codes.count(400) == 50
    deadline = time.time() + 60
    s = engine.scheduler
    while s.has_work() and time.time() < deadline:
        time.sleep(0.1)
    time.sleep(0.3)
    assert not s.has_work()
    assert s.token_to_kv_pool.available_size() + s.tree_cache.total_size() == s.config.max_total_tokens
    assert s.tree_cache.protected_size() == 0


@function
def info_extract(paragraph: str):
    system("You extract information and answer in JSON only.")
    user("Extract name, age and hobbies as JSON:\n" + paragraph)
    assistant(gen("output", json_schema=PERSON, max_tokens=120))


def test_frontend_on_a_local_engine_returns_valid_json(server):
    state = info_extract.run(server[1], paragraph=ZH)
    jsonschema.validate(json.loads(state["output"].text()), PERSON)
    assert state.messages[-1]["role"] == "assistant"


def test_same_program_runs_unchanged_against_the_server(server):
    local = info_extract.run(server[1], paragraph=ZH)
    remote = info_extract.run(sgl.RuntimeEndpoint(server[0]), paragraph=ZH)
    assert remote["output"] == local["output"]  # greedy: the same text either way


def test_explicit_state_style_and_multi_turn(server):
    @function
    def two_turns(s, city):
        s += user(f"Which country is {city} in? Answer with one word.")
        s += assistant(gen("country", max_tokens=8, regex=r"[A-Z][a-z]{2,12}"))
        s += user("And its capital?")
        s += assistant(gen("capital", max_tokens=8, regex=r"[A-Z][a-z]{2,12}"))

    state = two_turns.run(server[1], city="Paris")
    assert re.fullmatch(r"[A-Z][a-z]{2,12}", state["country"])
    assert re.fullmatch(r"[A-Z][a-z]{2,12}", state["capital"])
    assert [m["role"] for m in state.messages] == ["user", "assistant", "user", "assistant"]


@pytest.mark.parametrize(
    "arg",
    [{"n": 2}, {"choices": ["yes", "no"]}, {"dtype": int}, {"min_tokens": 3}, {"presence_penalty": 0.5}, {"nope": 1}],
)
def test_gen_refuses_an_argument_minisglang_lacks_by_name_on_every_backend(arg):
    # n=2 went to the server as OpenAI's n and the program kept one of two choices; dtype=int
    # died in the JSON encoder; the local Engine named max_new_tokens' neighbours instead.
    (name,) = arg
    with pytest.raises(ValueError, match=rf"\b{name}\b"):
        gen("x", max_tokens=5, **arg)
    gen("x", max_tokens=5, top_k=3, seed=1, ignore_eos=False)  # what both backends take passes


def test_a_gen_argument_given_as_none_is_the_default_on_both_backends(server):
    # SGLang's gen writes None for "not given"; the local Engine refused max_new_tokens=None
    # ("must be an integer, got null") while the server took it as its default.
    @function
    def nones(s):
        s += user("Extract name, age and hobbies as JSON:\n" + ZH)
        s += assistant(gen("out", max_tokens=None, temperature=None, top_p=None, seed=None, regex=r"[0-9]{2}"))

    local = nones.run(server[1])
    remote = nones.run(sgl.RuntimeEndpoint(server[0]))
    assert re.fullmatch(r"[0-9]{2}", local["out"])
    assert remote["out"] == local["out"]  # temperature None is greedy on both


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"json_schema": "{not json"}, "json_schema=...\\): this string is not JSON"),
        ({"json_schema": "[1, 2]"}, "json_schema=...\\) must be a JSON Schema object"),
        ({"json_schema": {"type": {1, 2}}}, "json_schema=...\\): this dict is not JSON"),
        ({"regex": "a+", "json_schema": {"type": "string"}}, "one constraint, got regex and json_schema"),
    ],
)
def test_a_bad_json_schema_or_two_constraints_fail_at_the_gen_call(kwargs, needle):
    # A schema text that is not JSON died in json.loads inside RuntimeEndpoint.chat (a
    # JSONDecodeError naming nothing) and was an abort on the local Engine; regex beside a
    # json_schema was refused by the server as a "response_format" the program never wrote.
    with pytest.raises(ValueError, match=needle):
        gen("x", max_tokens=5, **kwargs)


def test_sglangs_completion_style_is_refused_by_name():
    # `s += gen(...)` and `s += "text"` died in __iadd__ with "'Gen' object has no attribute
    # 'content'"; `"Q: " + gen(...)` with Python's "can only concatenate str".
    state = sgl.lang.ProgramState(backend=None)
    for bad in (gen("x", max_tokens=5), "The capital of France is"):
        with pytest.raises(TypeError, match="completion style"):
            state += bad
    with pytest.raises(TypeError, match="s \\+= takes system"):
        state += 42
    with pytest.raises(TypeError, match="completion style"):
        "Answer: " + gen("x", max_tokens=5)
    with pytest.raises(TypeError, match="completion style"):
        gen("x", max_tokens=5) + "."
    assert state.messages == []


@pytest.mark.parametrize("content", [42, None, ["a", "b"]])
def test_a_message_that_is_not_text_is_refused_in_both_styles(content):
    # user(42) died inside the local chat template (Jinja: "can only concatenate str (not
    # "int") to str") while RuntimeEndpoint got the server's 400.
    with pytest.raises(TypeError, match=r"user\(\.\.\.\) takes a string or gen\(\.\.\.\), got"):
        user(content)

    @function
    def implicit():
        system(content)

    with pytest.raises(TypeError, match=r"system\(\.\.\.\) takes a string"):
        implicit.run(sgl.lang.LocalBackend(None))


def test_a_gen_with_no_message_before_it_is_refused_on_both_backends(server):
    # The local Engine generated from the bare generation prompt (invalid UTF-8 noise) while
    # the server answered 400 "messages: must have at least 1 item(s)".
    @function
    def gen_first(s):
        s += assistant(gen("x", max_tokens=8))

    for backend in (server[1], sgl.RuntimeEndpoint(server[0])):
        with pytest.raises(ValueError, match="needs a message before it"):
            gen_first.run(backend)


def test_state_messages_is_also_sglangs_method(server):
    # SGLang's quick start reads `for m in state.messages():`; here it raised "'list' object is
    # not callable".
    @function
    def one_turn(s):
        s += user("Extract name, age and hobbies as JSON:\n" + ZH)
        s += assistant(gen("x", max_tokens=4))

    state = one_turn.run(server[1])
    assert state.messages() == state.messages
    assert [m["role"] for m in state.messages()] == ["user", "assistant"]


def test_sglangs_run_level_arguments_and_a_positional_program_argument_are_refused():
    # run(temperature=0.5) or run(stream=True) reached the program as its own keyword
    # arguments ("f() got an unexpected keyword argument", or silently taken by **kwargs);
    # run("text", ...) made a LocalBackend of the string.
    seen = []

    @function
    def takes_anything(s, **kwargs):
        seen.append(kwargs)

    for key, value in (("temperature", 0.5), ("stream", True), ("max_new_tokens", 8)):
        with pytest.raises(ValueError, match=rf"run\({key}=\.\.\.\) is SGLang's run-level"):
            takes_anything.run(sgl.lang.LocalBackend(None), **{key: value})
    assert seen == []
    with pytest.raises(TypeError, match="the first argument is the backend"):
        takes_anything.run("What is the capital of France?")


@pytest.mark.parametrize("bad", [-1, 0, 5.0, "5", True])
def test_a_bad_max_tokens_is_named_as_the_program_wrote_it(bad):
    # The local Engine said "max_new_tokens must be an integer >= 1", a name the program never
    # wrote (the server said max_tokens).
    with pytest.raises(ValueError, match=r"gen\(max_tokens=\.\.\.\) must be an integer >= 1"):
        gen("x", max_tokens=bad)


class _Echo:
    """A backend that answers every turn with the number of messages it was sent."""

    def __init__(self):
        self.calls = 0

    def chat(self, messages, params):
        self.calls += 1
        return str(len(messages)), {}


def test_an_explicit_program_run_inside_an_implicit_one_stays_its_own():
    # The inner program's user(...) and assistant(gen(...)) also went into the outer program
    # (through the implicit style's current state), and its gen ran twice.
    @function
    def inner(s, q):
        s += user(q)
        s += assistant(gen("a", max_tokens=3))

    @function
    def outer():
        system("outer")
        answer = inner.run(backend, q="inner question")["a"]
        user("outer question " + answer)
        assistant(gen("b", max_tokens=3))

    backend = _Echo()
    state = outer.run(backend)
    assert [m["role"] for m in state.messages] == ["system", "user", "assistant"]
    assert state["b"] == "2" and backend.calls == 2


def test_an_async_or_generator_program_is_refused_at_the_decorator():
    # run called the body, got a coroutine (or generator) back and returned an empty state:
    # the program silently never ran ("coroutine was never awaited").
    async def co(s):
        s += user("hi")

    def generator(s):
        s += user("hi")
        yield

    for fn in (co, generator):
        with pytest.raises(TypeError, match="takes a plain def"):
            function(fn)


def test_meta_info_has_the_finish_reason_on_both_backends(server):
    # RuntimeEndpoint's meta_info was the usage alone: a program could not tell a json_schema
    # answer cut by max_tokens (not JSON) from a whole one, as it can on the local Engine.
    @function
    def cut(s, n):
        s += user("Extract name, age and hobbies as JSON:\n" + ZH)
        s += assistant(gen("x", max_tokens=n, json_schema=PERSON))

    for n, kind in ((6, "length"), (120, "stop")):
        local = cut.run(server[1], n=n)["x"].meta_info["finish_reason"]
        remote = cut.run(sgl.RuntimeEndpoint(server[0]), n=n)["x"].meta_info["finish_reason"]
        assert local["type"] == remote["type"] == kind
        assert remote == {k: v for k, v in local.items() if k in ("type", "length", "matched")}


def test_sglangs_quick_start_runs_with_set_default_backend(server, monkeypatch):
    # SGLang's quick start calls set_default_backend(RuntimeEndpoint(...)) and then run() with
    # the program's arguments alone: here set_default_backend did not exist and run() wanted a
    # backend ("missing 1 required positional argument: 'backend'").
    monkeypatch.setattr(sgl.lang, "_default_backend", None)
    with pytest.raises(ValueError, match="no backend"):
        info_extract.run(paragraph=ZH)
    sgl.set_default_backend(sgl.RuntimeEndpoint(server[0]))
    state = info_extract.run(paragraph=ZH)
    assert state["output"] == info_extract.run(server[1], paragraph=ZH)["output"]


def test_run_batch_and_get_meta_info_as_in_sglang(server):
    # SGLang's run_batch([{...}, ...]) and state.get_meta_info(name) were AttributeErrors.
    batch = [{"paragraph": ZH}, {"paragraph": "李四，45岁，教师，爱好书法。"}]
    states = info_extract.run_batch(batch, backend=server[1], progress_bar=True)
    assert [s["output"] for s in states] == [info_extract.run(server[1], **kw)["output"] for kw in batch]
    assert states[0].get_meta_info("output")["finish_reason"]["type"] in ("stop", "length")
    with pytest.raises(TypeError, match="a list of dicts"):
        info_extract.run_batch({"paragraph": ZH}, backend=server[1])
    with pytest.raises(ValueError, match=r"run\(temperature=\.\.\.\)"):
        info_extract.run_batch([{"paragraph": ZH, "temperature": 0.5}], backend=server[1])


@pytest.mark.parametrize("name", ["select", "image", "gen_int", "user_begin", "assistant_end"])
def test_an_sglang_frontend_name_minisglang_lacks_says_it_is_not_supported(name):
    # sgl.select and the others were a bare "module 'minisglang' has no attribute 'select'"
    # ("cannot import name" with from-import); now they fail where the program calls them.
    with pytest.raises(NotImplementedError, match=rf"minisglang has no {name}: SGLang's .* is not supported"):
        getattr(sgl, name)("x", choices=["a", "b"])
    namespace: dict = {}
    exec(f"from minisglang import {name}", namespace)
    with pytest.raises(NotImplementedError, match=rf"minisglang has no {name}"):
        namespace[name]()


def test_fork_says_it_is_not_supported():
    # s.fork(2) was "'ProgramState' object has no attribute 'fork'".
    @function
    def branches(s):
        s += user("hi")
        s.fork(2)

    with pytest.raises(NotImplementedError, match=r"fork\(\.\.\.\) .* is not supported"):
        branches.run(_Echo())


def test_a_wrong_endpoint_url_is_an_error_that_names_it(server):
    # RuntimeEndpoint(".../v1") raised urllib's bare "HTTP Error 404: Not Found", a closed port
    # "<urlopen error [Errno 111] Connection refused>" and "localhost:30000" "unknown url type":
    # none said which URL.
    with pytest.raises(RuntimeError, match=r"/v1/v1/models answered 404 \(base_url is the server's root"):
        sgl.RuntimeEndpoint(server[0] + "/v1")
    with pytest.raises(ConnectionError, match=r"http://127\.0\.0\.1:1/v1/models: "):
        sgl.RuntimeEndpoint("http://127.0.0.1:1", timeout=5)
    with pytest.raises(ConnectionError, match=r"localhost:1/v1/models: "):
        sgl.RuntimeEndpoint("localhost:1", timeout=5)


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"temperature": 3.0}, r"temperature=\.\.\.\) must be in \[0, 2\]"),
        ({"seed": -1}, r"seed=\.\.\.\) must be in \[0, 2\*\*63\)"),
        ({"seed": 2**63}, r"seed=\.\.\.\) must be in"),
        ({"stop": ["a", "b", "c", "d", "e"]}, r"stop=\.\.\.\) takes at most 4 strings"),
        ({"top_p": 0.0}, r"top_p=\.\.\.\) must be in \(0, 1\]"),
    ],
)
def test_a_gen_argument_one_backend_took_and_the_other_refused_is_refused_at_gen(kwargs, needle):
    # temperature 3, seed -1 or 2**63 and five stop strings ran on the local Engine and were the
    # server's 400; top_p=0 ran greedy on the server (OpenAI's reading) and was the Engine's error.
    with pytest.raises(ValueError, match=needle):
        gen("x", max_tokens=5, **kwargs)
    gen("x", temperature=2, seed=0, stop=["a", "b", "c", "d"], top_p=1)  # the edges both take


def test_gen_without_max_tokens_takes_sglangs_frontend_default():
    """A stranger porting SGLang programs: the default was 256, so on the bundled model (1,024
    positions) any prompt past 768 tokens was refused where SGLang's 128 leaves it room."""
    assert sgl.gen("answer").params["max_new_tokens"] == 128
    assert sgl.gen("answer", max_tokens=None).params["max_new_tokens"] == 128
    assert sgl.gen("answer", max_tokens=7).params["max_new_tokens"] == 7


def test_a_served_engine_keeps_a_short_scheduler_trace(monkeypatch):
    """`serve` keeps SERVER_TRACE_EVENTS scheduler events, not the notebooks' 100,000: no route
    reads them, and their turnover made full collections slow, after each of which GcGuard
    froze the cycles in flight for good (a soak: 17 freezes in 10 minutes, 6 with 1,000)."""
    import gc
    import sys

    import uvicorn

    from minisglang.server.app import SERVER_TRACE_EVENTS, serve

    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: None)  # set up, serve nothing
    monkeypatch.setattr(sys, "setswitchinterval", lambda seconds: None)
    eng = sgl.Engine(stage="s1")
    try:
        assert eng.scheduler.trace.maxlen == 100_000
        serve(eng, port=0)
        assert eng.scheduler.trace.maxlen == SERVER_TRACE_EVENTS
    finally:
        gc.unfreeze()
        eng.shutdown()


class RecordingGuard:
    """A GcGuard stand-in that records when the server asks for a reclaim, and how busy it was."""

    def __init__(self):
        self.unreclaimed, self.calls, self.loop = 1, [], None

    def reclaim(self) -> int:
        self.calls.append((time.monotonic(), len(self.loop.active), self.loop.engine.has_work()))
        self.unreclaimed = 0
        return 0


@pytest.mark.parametrize("idle_seconds", [0.3, 0.0])
def test_the_gc_guard_reclaims_once_after_each_freeze_and_only_when_the_loop_is_idle(idle_seconds):
    """A freeze under load keeps the cycles then in flight (gc_guard.py); the scheduler's loop
    gives them back after gc_reclaim_idle_seconds with nothing to do, once per freeze, never
    while a request runs; 0 turns it off."""
    from minisglang.server import ServerOptions

    engine = sgl.Engine(stage="s1", max_running_requests=4)
    app = create_app(engine, ServerOptions(gc_reclaim_idle_seconds=idle_seconds))
    guard = app.state.server.gc_guard = RecordingGuard()
    with serving_in_thread(app) as url:
        guard.loop = app.state.server.loop
        time.sleep(1.0)
        if not idle_seconds:
            assert guard.calls == [] and guard.unreclaimed
            return
        assert len(guard.calls) == 1  # once: the reclaim cleared `unreclaimed`
        started = time.monotonic()
        with httpx.Client(timeout=60) as http:
            body = {"text": "Hello", "stream": True, "sampling_params": {"max_new_tokens": 64, "ignore_eos": True}}
            with http.stream("POST", url + "/generate", json=body) as r:
                for i, _line in enumerate(r.iter_lines()):
                    if i == 0:
                        guard.unreclaimed = 1  # a freeze in the middle of the request
        ended = time.monotonic()
        assert r.status_code == 200
        time.sleep(1.0)
    assert len(guard.calls) == 2
    at, active, busy = guard.calls[1]
    assert at >= started and not active and not busy
    assert at - ended >= idle_seconds - 0.2  # (the loop finished a little before the answer came)


@pytest.mark.parametrize("after", [3, 0])
def test_a_server_that_is_never_idle_reclaims_after_gc_reclaim_after_freezes(after):
    """A server that is never idle kept what its freezes kept for good, ~270 objects a freeze
    (the stop-57 leftover): after gc_reclaim_after_freezes freezes the loop reclaims between
    two steps while a request runs; below that count, or with 0, it waits for an idle moment."""
    from minisglang.server import ServerOptions

    engine = sgl.Engine(stage="s1", max_running_requests=4)
    app = create_app(engine, ServerOptions(gc_reclaim_idle_seconds=60, gc_reclaim_after_freezes=after))
    guard = app.state.server.gc_guard = RecordingGuard()
    with serving_in_thread(app) as url, httpx.Client(timeout=60) as http:
        guard.loop = app.state.server.loop
        body = {"text": "Hello", "stream": True, "sampling_params": {"max_new_tokens": 96, "ignore_eos": True}}
        with http.stream("POST", url + "/generate", json=body) as r:
            for i, _line in enumerate(r.iter_lines()):
                if i == 2:
                    guard.unreclaimed = 2  # two freezes: below the count
                if i == 8:
                    assert guard.calls == []
                    guard.unreclaimed = 3  # a third
        assert r.status_code == 200
    if after:
        assert len(guard.calls) == 1 and guard.calls[0][1] == 1  # while the request ran
    else:
        assert guard.calls == [] and guard.unreclaimed == 3


def test_every_route_fills_what_a_request_does_not_give_from_the_checkpoints_sampling_defaults(tmp_path):
    """The OpenAI routes and /generate take generation_config.json's sampling values for the
    fields a request leaves out (here temperature 0: n choices are one text), and a request's
    own value wins (temperature 1: they differ)."""
    from test_engine import model_with_generation_config

    engine = sgl.Engine(model_path=model_with_generation_config(tmp_path, temperature=0.0), stage="s1")
    with serving_in_thread(create_app(engine)) as url, httpx.Client(timeout=60) as http:
        for temperature in (None, 1.0):
            given = {} if temperature is None else {"temperature": temperature}
            texts = {
                "completions": [
                    c["text"]
                    for c in http.post(
                        url + "/v1/completions", json={"prompt": "Hi", "n": 4, "max_tokens": 12, **given}
                    ).json()["choices"]
                ],
                "chat": [
                    c["message"]["content"]
                    for c in http.post(
                        url + "/v1/chat/completions",
                        json={"messages": [{"role": "user", "content": "Hi"}], "n": 4, "max_tokens": 12, **given},
                    ).json()["choices"]
                ],
                "generate": [
                    http.post(
                        url + "/generate",
                        json={"text": "Hi", "sampling_params": {"max_new_tokens": 12, "seed": s, **given}},
                    ).json()["text"]
                    for s in range(4)
                ],
            }
            for route, answers in texts.items():
                assert (len(set(answers)) == 1) == (temperature is None), (route, temperature, answers)


def test_an_idle_server_keeps_no_handle_of_a_finished_compile():
    """The loop keeps each client's compiles in flight (`compiling`, for the per-client limit);
    a handle holds its grammar, and finished ones were let go only when the next grammar
    request came: an idle server kept the last ones (~15 MB each after big schemas, after the
    grammar cache had let them go: a stranger's soak test). Now also when the loop runs out
    of work."""
    engine = sgl.Engine(max_running_requests=4)
    app = create_app(engine)
    with serving_in_thread(app) as url, httpx.Client(timeout=60) as http:
        loop = app.state.server.loop
        for i in range(3):
            schema = {"type": "object", "properties": {f"k{i}": {"type": "integer"}}, "required": [f"k{i}"]}
            body = {"text": "Hi", "sampling_params": {"max_new_tokens": 16, "json_schema": json.dumps(schema)}}
            r = http.post(url + "/generate", json=body)
            assert r.status_code == 200, r.text
        deadline = time.monotonic() + 10
        while loop.compiling and time.monotonic() < deadline:
            time.sleep(0.05)
        assert loop.compiling == {}, loop.compiling
