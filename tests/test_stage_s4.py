"""Stage s4: the jump-forward map, retokenization, and re-admission through the radix tree.

Tests of stages/s4_jump_forward.py and constrained/jump_forward.py.
"""
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minisglang as sgl
from minisglang.constrained.jump_forward import JumpForwardMap
from minisglang.constrained.regex_dfa import ByteDFA, compile_regex

Q = "<|user|>\nExtract as JSON: Li Lei is 31 years old and lives in Paris.\n<|assistant|>\n"
PERSON = r'\{"name": "[A-Za-z ]{1,12}", "age": [1-9][0-9]?, "city": "(Paris|Rome|Beijing)"\}'


def jump_map(regex):
    dfa = compile_regex(regex)
    return dfa, ByteDFA.from_char_dfa(dfa), JumpForwardMap.build(dfa, ByteDFA.from_char_dfa(dfa))


@pytest.mark.task4_1
def test_a_state_jumps_iff_one_single_character_edge_and_not_accepting():
    dfa, _, jm = jump_map(r'\{"a": (1|22)\}x?')
    for state, edges in dfa.transitions.items():
        single = len(edges) == 1 and len(next(iter(edges)).chars) == 1 and not next(iter(edges)).negated
        assert (state in jm.char_edges) == (single and state not in dfa.finals)


@pytest.mark.task4_1
def test_final_state_with_a_loop_never_jumps_1084():
    dfa, _, jm = jump_map(r"[-+]?[0-9]+[ ]*")
    assert jm.char_edges == {}, f"every state of [-+]?[0-9]+[ ]* is a choice; got char_edges {jm.char_edges}"


def rule_map(regex):
    """The map task 4_1 builds, built here from its rule, so that task 4_2's tests run no 4_1 code."""
    dfa = compile_regex(regex)
    byte_dfa = ByteDFA.from_char_dfa(dfa)
    char_edges = {}
    for state, edges in dfa.transitions.items():
        if len(edges) != 1:
            continue
        ((cls, nxt),) = edges.items()
        if not cls.negated and len(cls.chars) == 1 and state not in dfa.finals:
            char_edges[state] = (next(iter(cls.chars)), nxt)
    byte_edges = {}
    for state in range(byte_dfa.num_char_states, byte_dfa.num_states):
        live = [b for b in range(256) if byte_dfa.table[state, b] >= 0]
        if len(live) == 1:
            byte_edges[state] = (live[0], int(byte_dfa.table[state, live[0]]))
    return dfa, byte_dfa, JumpForwardMap(char_edges, byte_edges, byte_dfa.num_char_states)


@pytest.mark.task4_2
@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["ab", "a", "b", "(a|b)", "c?", "x", "中文", "🎉", "[0-9]", "d+"]),
                min_size=1, max_size=6))
def test_jump_strings_are_exactly_the_forced_text(parts):
    """Oracle: from a jump state, the chain is the longest text every accepted word must continue with."""
    regex = "".join(parts)
    dfa, byte_dfa, jm = rule_map(regex)
    for state in range(dfa.num_states):
        jump = jm.jump_forward(state)
        if jump is None:
            assert state not in jm.char_edges
            continue
        text, end = jump[0].decode("utf-8"), jump[1]
        assert dfa.walk(state, text) == end
        # every prefix of the chain is forced: one edge, one character, not accepting
        s = state
        for ch in text:
            assert s not in dfa.finals and len(dfa.transitions[s]) == 1
            s = dfa.step(s, ch)
        assert end not in jm.char_edges                      # followed to the next choice


@pytest.mark.task4_2
def test_byte_level_chain_finishes_a_half_generated_character():
    dfa, byte_dfa, jm = rule_map("我喜欢(编程|摄影)。")
    half = byte_dfa.walk_bytes(0, "我".encode()[:1])       # the model produced one byte of 我
    assert half >= byte_dfa.num_char_states
    data, end = jm.jump_forward(half)
    assert ("我".encode()[:1] + data).decode() == "我喜欢"
    assert end == dfa.walk(0, "我喜欢")
    assert jm.jump_forward(dfa.walk(0, "我喜欢摄")) == ("影。".encode(), dfa.walk(0, "我喜欢摄影。"))


@pytest.mark.task4_2
def test_chain_walk_stops_at_the_next_choice():
    dfa, _, jm = rule_map(r'\{"name": "[a-z]+", "age": [0-9]+\}')
    assert jm.jump_forward(0) == (b'{"name": "', dfa.walk(0, '{"name": "'))
    after = dfa.walk(0, '{"name": "li"')
    assert jm.jump_forward(after) == (b', "age": ', dfa.walk(0, '{"name": "li", "age": '))
    choice = dfa.walk(0, '{"name": "')
    got = jm.jump_forward(choice)
    assert got is None, (f'after {{"name": " the next character is a choice ([a-z]): nothing is forced, so '
                         f"jump_forward(state {choice}) must be None; got {got!r}")


@pytest.fixture(scope="module")
def engine():
    eng = sgl.Engine(stage="s4")
    yield eng
    eng.shutdown()


@pytest.mark.task4_3
@pytest.mark.task4_4
def test_json_with_fixed_keys_jumps_and_stays_valid(engine):
    outs = engine.generate([Q] * 16, [{"regex": PERSON, "temperature": 1.0, "seed": s, "max_new_tokens": 60}
                                      for s in range(16)])
    for o in outs:
        assert o["meta_info"]["finish_reason"]["type"] == "stop"
        assert re.fullmatch(PERSON, o["text"]), o["text"]
        m = o["meta_info"]
        assert m["completion_tokens"] > m["completion_tokens_wo_jump_forward"]
    assert any(e["event"] == "jump" for e in engine.trace)


@pytest.mark.task4_4
def test_readmission_hits_the_radix_cache_and_leaks_nothing(engine):
    engine.scheduler.tree_cache.evict(10**9)
    before = len(engine.trace)
    engine.generate(Q, {"regex": PERSON, "temperature": 0, "max_new_tokens": 60})
    events = list(engine.trace)[before:]
    jumps = [e for e in events if e["event"] == "jump"]
    readmits = [e for e in events if e["event"] == "admit"][1:]   # the first admission found an empty tree
    assert jumps and len(readmits) >= len(jumps) - 1             # a jump that completes the match ends it
    prompt_len = len(engine.tokenizer.encode(Q))
    # every re-admission takes at least the prompt (and usually most of the output) from the tree
    assert all(e["prefix_len"] >= prompt_len for e in readmits)
    s = engine.scheduler
    assert s.token_to_kv_pool.available_size() + s.tree_cache.total_size() == s.config.max_total_tokens
    assert s.tree_cache.protected_size() == 0


@pytest.mark.task4_4
def test_streaming_across_jumps_equals_final_text(engine):
    params = {"regex": PERSON, "temperature": 1.0, "seed": 3, "max_new_tokens": 60}
    out = engine.generate(Q, params)
    final, meta = out["text"], out["meta_info"]
    assert re.fullmatch(PERSON, final) and meta["completion_tokens"] > meta["completion_tokens_wo_jump_forward"]
    chunks = list(engine.generate(Q, params, stream=True))
    assert "".join(c["text"] for c in chunks) == final
    assert chunks[-1]["meta_info"]["completion_tokens"] == meta["completion_tokens"]


@pytest.mark.task4_3
def test_jump_is_refused_when_the_prompt_would_fuse(engine):
    """The prompt ends inside a number; output digits would merge with its last token."""
    prompt = "The code is 1"
    before = engine.stage.refused
    out = engine.generate(prompt, {"regex": r"2345-abcdef[0-9]", "temperature": 0, "max_new_tokens": 30})
    assert re.fullmatch(r"2345-abcdef[0-9]", out["text"])
    assert engine.stage.refused > before


def test_chinese_and_emoji_inside_jumped_strings(engine):
    for regex in [r"我喜欢(编程|摄影|爬山)。谢谢！", r"(🎉|😀) 完成了 ✅ done", r"\{\"城市\": \"(北京|上海)\"\}"]:
        outs = engine.generate([Q] * 4, [{"regex": regex, "temperature": 1.0, "seed": s, "max_new_tokens": 40}
                                         for s in range(4)])
        for o in outs:
            assert re.fullmatch(regex, o["text"]), (regex, o["text"])
            assert o["meta_info"]["completion_tokens"] >= o["meta_info"]["completion_tokens_wo_jump_forward"]


def test_jump_forward_switch_off_equals_s3():
    params = [{"regex": PERSON, "temperature": 1.0, "seed": s, "max_new_tokens": 60} for s in range(4)]
    off = sgl.Engine(stage="s4", jump_forward=False)
    s3 = sgl.Engine(stage="s3")
    a = [o["text"] for o in off.generate([Q] * 4, params)]
    b = [o["text"] for o in s3.generate([Q] * 4, params)]
    assert a == b and off.stage.jumps == 0
    assert not any(e["event"] == "jump" for e in off.trace)


@pytest.mark.slow
def test_no_slot_leaks_after_many_jumping_requests():
    eng = sgl.Engine(stage="s4", max_total_tokens=2000, max_running_requests=16)
    outs = eng.generate([Q] * 60, [{"regex": PERSON, "temperature": 1.0, "seed": s, "max_new_tokens": 60}
                                   for s in range(60)])
    assert all(re.fullmatch(PERSON, o["text"]) for o in outs if o["meta_info"]["finish_reason"]["type"] == "stop")
    s = eng.scheduler
    assert s.token_to_kv_pool.available_size() + s.tree_cache.total_size() == 2000
    s.tree_cache.evict(10**9)
    assert s.token_to_kv_pool.available_size() == 2000


@pytest.mark.task4_4
def test_requests_that_jump_together_are_readmitted_in_one_prefill_of_their_changed_suffixes(engine):
    """A wave of jumps costs one prefill forward, and it computes only what the jumps changed:
    for each request, its tokens after the longest prefix it shares with the tokens that had
    KV before the jump (the radix tree supplies that prefix)."""
    s = engine.scheduler
    s.tree_cache.evict(10**9)
    names = ["Li Lei", "Anna Berg", "Ken Sato", "Maria Lopez", "Omar Khan", "Sara Novak"]
    prompts = [Q.replace("Li Lei", name) for name in names]
    reqs = [engine.submit(p, {"regex": PERSON, "temperature": 0, "max_new_tokens": 60}) for p in prompts]
    waves = 0
    while not all(r.released for r in reqs):
        before = {r.rid: (list(r.fill_ids), r.kv_len, getattr(r.grammar, "version", 0)) for r in reqs}
        engine.step()
        jumped = [r for r in reqs if getattr(r.grammar, "version", 0) != before[r.rid][2] and not r.finished]
        if not jumped:
            continue
        waves += 1
        expected = 0
        for r in jumped:
            old_ids, old_kv, _ = before[r.rid]
            new_ids = list(r.fill_ids)
            shared = next((i for i, (a, b) in enumerate(zip(old_ids[:old_kv], new_ids)) if a != b),
                          min(old_kv, len(new_ids)))
            expected += len(new_ids) - min(shared, len(new_ids) - 1)
        first = len(engine.trace)
        engine.step()
        forwards = [e for e in list(engine.trace)[first:] if e["event"] in ("prefill", "decode")]
        assert [e["event"] for e in forwards] == ["prefill"]
        assert set(forwards[0]["reqs"]) == {r.rid for r in jumped}
        assert forwards[0]["tokens"] == expected
    assert waves >= 2 and all(re.fullmatch(PERSON, r.output_text) for r in reqs)
    assert s.token_to_kv_pool.available_size() + s.tree_cache.total_size() == s.config.max_total_tokens
