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


def edges_of(dfa, state) -> str:
    """A state's edges for a message, as "[0-9] -> 4, a -> 7", and whether it is accepting."""
    edges = dfa.transitions.get(state, {})
    shown = ", ".join(f"{cls.label()} -> {nxt}" for cls, nxt in edges.items()) or "no edge"
    return f"state {state}: {shown}" + (", accepting" if state in dfa.finals else "")


@pytest.mark.task4_1
def test_a_state_jumps_iff_one_single_character_edge_and_not_accepting():
    regex = r'\{"a": (1|22)\}x?'
    dfa, _, jm = jump_map(regex)
    for state, edges in dfa.transitions.items():
        single = len(edges) == 1 and len(next(iter(edges)).chars) == 1 and not next(iter(edges)).negated
        jumps = single and state not in dfa.finals
        if jumps:
            ((cls, nxt),) = edges.items()
            why = (
                f"one edge of one character, not accepting: a jump, so char_edges[{state}] must be "
                f"({next(iter(cls.chars))!r}, {nxt}); it has no entry"
            )
        else:
            why = (
                "it is accepting (the text may stop there)"
                if state in dfa.finals
                else f"it has {len(edges)} edges"
                if len(edges) != 1
                else "its one edge takes many characters"
            )
            why += (
                f": a choice, so char_edges has no entry for it; got char_edges[{state}] = {jm.char_edges.get(state)!r}"
            )
        assert (state in jm.char_edges) == jumps, f"regex '{regex}', {edges_of(dfa, state)}: {why}"


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
@given(
    st.lists(st.sampled_from(["ab", "a", "b", "(a|b)", "c?", "x", "中文", "🎉", "[0-9]", "d+"]), min_size=1, max_size=6)
)
def test_jump_strings_are_exactly_the_forced_text(parts):
    """Oracle: from a jump state, the chain is the longest text every accepted word must continue with."""
    regex = "".join(parts)
    dfa, byte_dfa, jm = rule_map(regex)
    for state in range(dfa.num_states):
        jump = jm.jump_forward(state)
        if jump is None:
            assert state not in jm.char_edges, (
                f"regex '{regex}', {edges_of(dfa, state)}: char_edges[{state}] = {jm.char_edges.get(state)!r}, so "
                f"its character is forced: jump_forward({state}) must return the forced text; got None"
            )
            continue
        text, end = jump[0].decode("utf-8"), jump[1]
        walked = dfa.walk(state, text)
        assert walked == end, (
            f"regex '{regex}': jump_forward({state}) returned {jump!r}, but reading {text!r} "
            f"from state {state} ends in state {walked}: the state returned is the one after "
            f"the jumped text"
        )
        # every prefix of the chain is forced: one edge, one character, not accepting
        s = state
        for i, ch in enumerate(text):
            assert s not in dfa.finals and len(dfa.transitions.get(s, {})) == 1, (
                f"regex '{regex}': jump_forward({state}) returned {jump!r}, but after {text[:i]!r} the chain is at "
                f"{edges_of(dfa, s)}: {'the text may stop there' if s in dfa.finals else 'a choice of edges'}, "
                f"so nothing more is forced and the jump must end there"
            )
            s = dfa.step(s, ch)
        assert end not in jm.char_edges, (  # followed to the next choice
            f"regex '{regex}': jump_forward({state}) returned {jump!r} and stops at state {end}, where "
            f"{jm.char_edges.get(end, ('?',))[0]!r} is still forced (char_edges[{end}] = {jm.char_edges.get(end)!r}): "
            f"follow char_edges to the next choice"
        )


@pytest.mark.task4_2
def test_byte_level_chain_finishes_a_half_generated_character():
    regex = "我喜欢(编程|摄影)。"
    dfa, byte_dfa, jm = rule_map(regex)
    first = "我".encode()[:1]
    half = byte_dfa.walk_bytes(0, first)  # the model produced one byte of 我
    assert half >= byte_dfa.num_char_states, (
        f"test premise: in {regex!r} the first byte of 我 ({first!r}) leads to an intermediate state (>= "
        f"num_char_states = {byte_dfa.num_char_states}); the byte DFA gave {half} (not jump_forward's fault)"
    )
    got = jm.jump_forward(half)
    want = ("我喜欢".encode()[1:], dfa.walk(0, "我喜欢"))
    # (b"\xe6" + data).decode() == "我喜欢" is data == want[0]: UTF-8 decodes one way only.
    assert got is not None and tuple(got) == want, (
        f"regex '{regex}', after the first byte of 我 ({first!r}, intermediate state {half}): the rest of 我, then "
        f"喜欢, is forced, so jump_forward({half}) must be {want!r} (the state after 我喜欢); got {got!r}"
        + (f", which reads {(first + bytes(got[0])).decode('utf-8', 'replace')!r}" if got else "")
        + " (byte_edges finish the character, then char_edges go on to the next choice)"
    )
    start, want = dfa.walk(0, "我喜欢摄"), ("影。".encode(), dfa.walk(0, "我喜欢摄影。"))
    got = jm.jump_forward(start)
    assert got == want, (
        f"regex '{regex}', after '我喜欢摄' (state {start}): '影。' is forced to the end, so "
        f"jump_forward({start}) must be {want!r}; got {got!r}"
    )


@pytest.mark.task4_2
def test_chain_walk_stops_at_the_next_choice():
    regex = r'\{"name": "[a-z]+", "age": [0-9]+\}'
    dfa, _, jm = rule_map(regex)
    got, want = jm.jump_forward(0), (b'{"name": "', dfa.walk(0, '{"name": "'))
    assert got == want, (
        f"regex '{regex}': from state 0, '{{\"name\": \"' is forced and then [a-z] is a choice, "
        f"so jump_forward(0) must be {want!r}; got {got!r}"
    )
    after = dfa.walk(0, '{"name": "li"')
    got, want = jm.jump_forward(after), (b', "age": ', dfa.walk(0, '{"name": "li", "age": '))
    assert got == want, (
        f"regex '{regex}', after '{{\"name\": \"li\"' (state {after}): ', \"age\": ' is forced "
        f"and then [0-9] is a choice, so jump_forward({after}) must be {want!r}; got {got!r}"
    )
    choice = dfa.walk(0, '{"name": "')
    got = jm.jump_forward(choice)
    assert got is None, (
        f'after {{"name": " the next character is a choice ([a-z]): nothing is forced, so '
        f"jump_forward(state {choice}) must be None; got {got!r}"
    )


@pytest.fixture(scope="module")
def engine():
    eng = sgl.Engine(stage="s4")
    yield eng
    eng.shutdown()


@pytest.mark.task4_3
@pytest.mark.task4_4
def test_json_with_fixed_keys_jumps_and_stays_valid(engine):
    outs = engine.generate(
        [Q] * 16, [{"regex": PERSON, "temperature": 1.0, "seed": s, "max_new_tokens": 60} for s in range(16)]
    )
    for seed, o in enumerate(outs):
        m = o["meta_info"]
        who = f"the PERSON request with seed {seed} (temperature 1.0, max_new_tokens 60)"
        assert m["finish_reason"]["type"] == "stop", (
            f"{who} must stop at the end of its match; it finished with {m['finish_reason']} after {o['text']!r}"
        )
        assert re.fullmatch(PERSON, o["text"]), f"{who}: its output must match PERSON; got {o['text']!r}"
        assert m["completion_tokens"] > m["completion_tokens_wo_jump_forward"], (
            f"{who}: PERSON's fixed text (keys, quotes, commas) is jumped over, not sampled, so completion_tokens "
            f"({m['completion_tokens']}) must exceed completion_tokens_wo_jump_forward, the sampled ones "
            f"({m['completion_tokens_wo_jump_forward']}); the stage has taken {engine.stage.jumps} jump(s) and "
            f"refused {engine.stage.refused} (retokenize returned None); output {o['text']!r}"
        )
    assert any(e["event"] == "jump" for e in engine.trace), (
        "16 PERSON requests and no 'jump' event in the engine's trace: no jump was taken"
    )


@pytest.mark.task4_4
def test_readmission_hits_the_radix_cache_and_leaks_nothing(engine):
    engine.scheduler.tree_cache.evict(10**9)
    before = len(engine.trace)
    engine.generate(Q, {"regex": PERSON, "temperature": 0, "max_new_tokens": 60})
    events = list(engine.trace)[before:]
    jumps = [e for e in events if e["event"] == "jump"]
    readmits = [e for e in events if e["event"] == "admit"][1:]  # the first admission found an empty tree
    assert jumps and len(readmits) >= len(jumps) - 1, (  # a jump that completes the match ends it
        f"a greedy PERSON request: at least one jump, and a re-admission after each jump but perhaps the last (a "
        f"jump that completes the match ends the request); got {len(jumps)} jump(s) and {len(readmits)} "
        f"re-admission(s)"
    )
    prompt_len = len(engine.tokenizer.encode(Q))
    # every re-admission takes at least the prompt (and usually most of the output) from the tree
    assert all(e["prefix_len"] >= prompt_len for e in readmits), (
        f"a greedy PERSON request: every re-admission must find at least the prompt ({prompt_len} tokens) in the "
        f"radix tree (readmit hands the KV to the tree through release_memory); the re-admissions found "
        f"{[e['prefix_len'] for e in readmits]} tokens"
    )
    s = engine.scheduler
    free, in_tree, total = s.token_to_kv_pool.available_size(), s.tree_cache.total_size(), s.config.max_total_tokens
    assert free + in_tree == total, (
        f"after the request, free KV slots ({free}) + the tree's tokens ({in_tree}) "
        f"must be all {total} slots; {total - free - in_tree} are lost (a leak)"
    )
    assert s.tree_cache.protected_size() == 0, (
        f"no request runs, so no tree node may stay locked; {s.tree_cache.protected_size()} tokens are"
    )


@pytest.mark.task4_4
def test_streaming_across_jumps_equals_final_text(engine):
    params = {"regex": PERSON, "temperature": 1.0, "seed": 3, "max_new_tokens": 60}
    out = engine.generate(Q, params)
    final, meta = out["text"], out["meta_info"]
    assert re.fullmatch(PERSON, final) and meta["completion_tokens"] > meta["completion_tokens_wo_jump_forward"], (
        f"the PERSON request with seed 3: its output must match PERSON, and jumps make completion_tokens exceed "
        f"completion_tokens_wo_jump_forward; got {final!r}, with {meta['completion_tokens']} and "
        f"{meta['completion_tokens_wo_jump_forward']}"
    )
    chunks = list(engine.generate(Q, params, stream=True))
    streamed = "".join(c["text"] for c in chunks)
    assert streamed == final, (
        f"the PERSON request with seed 3, streamed: its {len(chunks)} chunks must join to "
        f"the text it gave unstreamed, {final!r}; they join to {streamed!r} (after a jump "
        f"the stream goes on from the rewritten output)"
    )
    assert chunks[-1]["meta_info"]["completion_tokens"] == meta["completion_tokens"], (
        f"the PERSON request with seed 3: the last streamed chunk must count the {meta['completion_tokens']} "
        f"completion tokens of the unstreamed run; it counts {chunks[-1]['meta_info']['completion_tokens']}"
    )


@pytest.mark.task4_3
def test_jump_is_refused_when_the_prompt_would_fuse(engine):
    """The prompt ends inside a number; output digits would merge with its last token."""
    prompt = "The code is 1"
    before = engine.stage.refused
    out = engine.generate(prompt, {"regex": r"2345-abcdef[0-9]", "temperature": 0, "max_new_tokens": 30})
    assert re.fullmatch(r"2345-abcdef[0-9]", out["text"]), (
        f"prompt {prompt!r}, regex '2345-abcdef[0-9]' (greedy): the output must match the regex; got "
        f"{out['text']!r}, finished with {out['meta_info']['finish_reason']}"
    )
    assert engine.stage.refused > before, (
        f"prompt {prompt!r}, regex '2345-abcdef[0-9]': the forced '2345-abcdef' would fuse with the prompt's "
        f"last token ' 1', so retokenize must refuse that jump (return None) and stage.refused grow; it stayed "
        f"{before}"
    )


def test_chinese_and_emoji_inside_jumped_strings(engine):
    for regex in [r"我喜欢(编程|摄影|爬山)。谢谢！", r"(🎉|😀) 完成了 ✅ done", r"\{\"城市\": \"(北京|上海)\"\}"]:
        outs = engine.generate(
            [Q] * 4, [{"regex": regex, "temperature": 1.0, "seed": s, "max_new_tokens": 40} for s in range(4)]
        )
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
    outs = eng.generate(
        [Q] * 60, [{"regex": PERSON, "temperature": 1.0, "seed": s, "max_new_tokens": 60} for s in range(60)]
    )
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
    who = {r.rid: name for r, name in zip(reqs, names)}  # requests by the name in their prompt
    waves = 0
    while not all(r.released for r in reqs):
        before = {r.rid: (list(r.fill_ids), r.kv_len, getattr(r.grammar, "version", 0)) for r in reqs}
        engine.step()
        jumped = [r for r in reqs if getattr(r.grammar, "version", 0) != before[r.rid][2] and not r.finished]
        if not jumped:
            continue
        waves += 1
        expected, each = 0, []
        for r in jumped:
            old_ids, old_kv, _ = before[r.rid]
            new_ids = list(r.fill_ids)
            shared = next(
                (i for i, (a, b) in enumerate(zip(old_ids[:old_kv], new_ids)) if a != b), min(old_kv, len(new_ids))
            )
            expected += len(new_ids) - min(shared, len(new_ids) - 1)
            each.append(f"{who[r.rid]} {len(new_ids) - min(shared, len(new_ids) - 1)}")
        first = len(engine.trace)
        engine.step()
        forwards = [e for e in list(engine.trace)[first:] if e["event"] in ("prefill", "decode")]
        jumpers = sorted(who[r.rid] for r in jumped)
        got = [e["event"] for e in forwards]
        assert got == ["prefill"], (
            f"wave {waves}: {jumpers} jumped, so the next step must run one forward, a "
            f"prefill that re-admits them; it ran {got}"
        )
        took = sorted(who.get(rid, rid) for rid in forwards[0]["reqs"])
        assert set(forwards[0]["reqs"]) == {r.rid for r in jumped}, (
            f"wave {waves}: the prefill must take exactly the requests that jumped, {jumpers}; it took {took}"
        )
        assert forwards[0]["tokens"] == expected, (
            f"wave {waves}: the prefill must compute each jumper's tokens after the prefix it shares with what had "
            f"KV before the jump (the radix tree holds that prefix), {expected} in all ({', '.join(each)}); it "
            f"computed {forwards[0]['tokens']}"
        )
    wrong = {who[r.rid]: r.output_text for r in reqs if not re.fullmatch(PERSON, r.output_text)}
    assert waves >= 2 and not wrong, (
        f"six greedy PERSON requests: at least 2 waves of jumps, and every output "
        f"matching PERSON; got {waves} wave(s), and these outputs that do not match: "
        f"{wrong}"
    )
    free, in_tree, total = s.token_to_kv_pool.available_size(), s.tree_cache.total_size(), s.config.max_total_tokens
    assert free + in_tree == total, (
        f"after the six requests, free KV slots ({free}) + the tree's tokens "
        f"({in_tree}) must be all {total} slots; {total - free - in_tree} are lost "
        f"(a leak)"
    )


class _ListsNothing:
    """A grammar that cannot list what it allows (as the library matchers): `allowed_after` None."""

    def allowed_after(self, output_ids):
        return None


def test_the_seam_given_back_may_be_several_tokens():
    """A forced `", "arguments": {` is encoded `", "` `arguments` `": ` `{`, where the model
    writes `": {"` (one token across the grammar's choice after `{`): both `": ` and `{` go back
    to the model, `arguments` stays (no token starts with `arguments": {`). A forced `", "age":`
    gives back only `":`."""
    from types import SimpleNamespace

    from minisglang.stages.s4_jump_forward import JumpForward
    from minisglang.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(sgl.DEFAULT_MODEL_PATH)
    jf = JumpForward(tok)
    req = SimpleNamespace(rid="r", grammar=_ListsNothing())
    vocab = tok.token_bytes
    for forced, given_back in [(', "arguments": {', '": {'), (', "age":', '":')]:
        ids = tok.encode('"' + forced)
        keep = jf.keep_before_seam(req, ids, floor=0)
        assert b"".join(vocab[t] for t in ids[keep:]) == given_back.encode(), [vocab[t] for t in ids]
        merged = given_back.encode() + b'"'
        assert any(b and b.startswith(given_back.encode()) and len(b) > len(given_back) for b in vocab), merged
        assert jf.keep_before_seam(req, ids, floor=len(ids)) == len(ids)  # never below the floor
    # A bisect over the sorted spellings agrees with a scan of the vocabulary.
    for head in [b'": ', b'": {', b"arguments", b'arguments": {', b"{", b"\xff\xfe", b"zz"]:
        scan = any(b and len(b) > len(head) and b.startswith(head) for b in vocab)
        assert jf.starts_a_longer_token(head) == scan, head


def test_a_raw_prompt_of_a_tokenizer_with_a_bos_gets_it_and_still_jumps(tmp_path):
    """A raw-text prompt starts with the BOS the tokenizer's post-processor adds, as in
    transformers, SGLang and vLLM (here <|system|> stands in for one), and jump-forward's
    re-encoding keeps it: without that, every jump of such a prompt was refused."""
    import json
    import shutil
    from pathlib import Path

    source = Path(sgl.DEFAULT_MODEL_PATH)
    for f in source.iterdir():
        if f.is_file():
            (tmp_path / f.name).symlink_to(f) if f.suffix == ".safetensors" else shutil.copy(f, tmp_path)
    config = json.loads((source / "tokenizer.json").read_text(encoding="utf-8"))
    config["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<|system|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<|system|>": {"id": "<|system|>", "ids": [1], "tokens": ["<|system|>"]}},
    }
    (tmp_path / "tokenizer.json").write_text(json.dumps(config), encoding="utf-8")
    eng = sgl.Engine(model_path=str(tmp_path), stage="s4")
    try:
        prompt = "Extract as JSON: Li Lei is 31 years old and lives in Paris.\n"
        assert eng.make_request(prompt, {}).origin_input_ids[:1] == [1]
        outs = eng.generate([prompt] * 4, [{"regex": PERSON, "temperature": 1.0, "seed": s} for s in range(4)])
        assert all(re.fullmatch(PERSON, o["text"]) for o in outs)
        assert eng.stage.jumps > 0 and eng.stage.refused == 0
    finally:
        eng.shutdown()
