"""The training corpus of the bundled model (scripts/make_corpus.py, its code the package
scripts/corpus/): seeded, grounded in its text (every answer value can be copied from the
request), tool calls valid under their tools' schemas (jsonschema is the oracle), and
held-out names and phrasings disjoint from training."""

import json
import random
import re
import sys
from pathlib import Path

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
import make_corpus  # noqa: E402
import name_generators  # noqa: E402
from corpus import document_kinds as corpus_documents  # noqa: E402
from corpus import drills as corpus_drills  # noqa: E402
from corpus.paragraphs import ZH_AGE_AFTER_NAME  # noqa: E402


@pytest.fixture(scope="module")
def train():
    return make_corpus.make_corpus(3000, seed=0)


def test_corpus_is_reproducible_and_seed_dependent():
    a, b, c = (
        make_corpus.make_corpus(400, seed=1),
        make_corpus.make_corpus(400, seed=1),
        make_corpus.make_corpus(400, seed=2),
    )
    assert a == b
    assert a != c
    assert {ex["task"] for ex in a} >= {
        "extract_person",
        "tool_call",
        "tool_reply",
        "tool_none",
        "copy",
        "date",
        "dates",
        "emails",
        "ipv4",
        "phone",
        "colour",
        "qa",
        "prose",
    }
    assert any(ex["assistant"].startswith("```json\n") for ex in a)  # loose requests are sometimes fenced


def test_corpus_rejects_too_few_examples():
    with pytest.raises(ValueError, match="n_examples must be at least 1"):
        make_corpus.make_corpus(0)


def test_demo_texts_and_names_stay_out_of_the_corpus(train):
    """minisglang/demo.py's texts and names are never generated, for training or held out:
    the demo tests copying from a text the model has never seen."""
    from minisglang.demo import EXAMPLES

    held = make_corpus.heldout_extraction_prompts(200, train)
    drills = make_corpus.copy_drill_corpus(2000, seed=0)
    users = "\n".join(ex["user"] for ex in train + held + drills)
    for text, answer in EXAMPLES:
        assert text not in users
        assert answer["name"] in make_corpus.DEMO_NAMES
    names = {
        make_corpus.person_name(random.Random(i), zh, held_out)
        for i in range(4000)
        for zh in (True, False)
        for held_out in (True, False)
    }
    assert not names & make_corpus.DEMO_NAMES


def test_some_chinese_given_names_contain_numerals(train):
    """张三-like names exist in training (a numeral is not always an age), in both pools."""
    numerals = set(make_corpus.ZH_NUMERAL_GIVEN)
    for held_out in (False, True):
        names = [make_corpus.person_name(random.Random(i), True, held_out) for i in range(2000)]
        share = sum(any(c in numerals for c in n[1:]) for n in names) / len(names)
        assert 0.05 < share < 0.3
    answers = [json.loads(make_corpus.unfence(ex["assistant"])) for ex in train if ex["task"] == "extract_person"]
    # (a one-key request, SHORT_REQUEST, may ask for another key than the name)
    assert any(set(a.get("name", "")[1:]) & numerals and "age" in a for a in answers)


ZH_NUMERALS = {make_corpus.zh_number(n): n for n in range(100)}  # the inverse, by brute force


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.booleans())
def test_numeral_drills_convert_chinese_numerals(seed, held_out):
    ex = make_corpus.numeral_drill_example(random.Random(seed), held_out=held_out)
    question, text = ex["user"].split("\n", 1)
    answer = json.loads(ex["assistant"])
    if isinstance(answer, list):
        assert answer == [ZH_NUMERALS[w] for w in text.split("、")]
    else:
        spelled = make_corpus.zh_number(answer["age"])
        assert spelled + "岁" in text
        name = text[: text.index(spelled + "岁")].rstrip("今年已经，")
        assert make_corpus.is_held_out(name) == held_out and name not in make_corpus.DEMO_NAMES


def _paragraph_and_instruction(ex):
    instruction, text = ex["user"].split("\n", 1)
    return instruction, text


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.booleans())
def test_extraction_answers_are_grounded_and_in_key_order(seed, held_out):
    ex = make_corpus.person_example(random.Random(seed), held_out=held_out)
    body = make_corpus.unfence(ex["assistant"])
    answer = json.loads(body)
    instruction, text = _paragraph_and_instruction(ex)
    strict_instructions = (
        make_corpus.EN_STRICT[0] + make_corpus.EN_STRICT[1] + make_corpus.ZH_STRICT[0] + make_corpus.ZH_STRICT[1]
    )
    strict = ex["system"] in make_corpus.STRICT_SYSTEMS or instruction in {
        s.format(fields=make_corpus._join(list(answer), False)) for s in strict_instructions
    }
    if strict:
        assert body == ex["assistant"], "a strict request must get bare JSON"
    keys = list(answer)
    # held-out requests keep 3+ keys (eval_extraction's sets are made as before); training ones
    # sometimes ask for one or two (make_corpus.SHORT_REQUEST)
    assert (3 if held_out else 1) <= len(keys) <= 8
    assert keys == [k for k in make_corpus.KEY_ORDER if k in answer]  # fixed order
    if "name" in answer:  # (a one-key training answer may ask for another fact alone)
        assert make_corpus.is_held_out(answer["name"]) == held_out
    for key in ("name", "city", "email", "phone", "occupation"):
        if key in answer:
            assert answer[key] in text  # copied verbatim from the paragraph
    if "age" in answer:
        spelled = (
            str(answer["age"]),
            make_corpus.zh_number(answer["age"]) + "岁",
            make_corpus.en_number(answer["age"]),
        )
        assert any(s in text for s in spelled)
    for hobby in answer.get("hobbies", []):
        assert hobby in text
    if "birthday" in answer:
        y, m, d = (int(x) for x in answer["birthday"].split("-"))
        assert str(y) in text and (str(d) in text)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**32 - 1), st.booleans())
def test_copy_answers_are_in_the_request(seed, held_out):
    ex = make_corpus.copy_example(random.Random(seed), held_out=held_out)
    assert ex["assistant"] and ex["assistant"] in ex["user"].split("\n", 1)[1]


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**32 - 1), st.booleans())
def test_copy_drills_repeat_their_items(seed, held_out):
    ex = make_corpus.copy_drill_example(random.Random(seed), held_out=held_out)
    question, items_text = ex["user"].split("\n", 1)
    if ex["assistant"].startswith("["):  # a JSON array of the items, joined the way the request joins them
        sep = "、" if "：" in question else ", "
        assert sep.join(json.loads(ex["assistant"])) == items_text
    else:
        assert ex["assistant"] == items_text


def test_copy_drill_corpus_is_seeded_and_trains_on_training_names_only():
    a, b = make_corpus.copy_drill_corpus(300, seed=0), make_corpus.copy_drill_corpus(300, seed=0)
    assert a == b != make_corpus.copy_drill_corpus(300, seed=1)
    tasks = [ex["task"] for ex in a]
    assert set(tasks) == {"copy_drill", "zh_number"} and 0.1 < tasks.count("zh_number") / len(tasks) < 0.3
    # e-mails are copied too (the model copied none right before they were drilled)
    assert any("@" in ex["assistant"] for ex in a if ex["task"] == "copy_drill")


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.booleans(), st.sampled_from(["Kel Vor", "张伟", "诸葛明", "Anna van Velde"]))
def test_composed_openers_end_where_the_name_starts(seed, zh, name):
    """Issue 33, stage 9: a composed opener holds the name once, nothing before it can be read
    as the start of a Chinese name (no surname character), and it never holds a held-out
    opener's words or characters."""
    rng = random.Random(seed)
    opener = make_corpus.composed_opener(rng, zh)
    text = opener.format(n=name)
    assert opener.count("{n}") == 1 and text.index(name) == opener.index("{n}")
    head = opener.split("{n}")[0]
    held = [
        o.replace("{n}", "").strip(" ，,")
        for o in make_corpus.EN_GENERALISATION_OPENERS + make_corpus.ZH_GENERALISATION_OPENERS
    ]
    assert not [h for h in held if h in text]
    if zh:
        assert not set(head) & (set("".join(make_corpus.ZH_SURNAMES)) | set(name_generators.HELD_OUT_HAN))
        # a held-out opener's character only in a connecting word or filler (是, 里, 这), never a random one
        trained = set("".join(make_corpus.ZH_OPENER_CONNECTORS) + "".join(make_corpus.ZH_FILLER))
        assert set(head) & set("".join(make_corpus.ZH_GENERALISATION_OPENERS)) <= trained
    else:
        assert head.split(" ")[0] in {s.split(" ")[0] for s in make_corpus.OPENER_SUBJECTS}
        assert "interview" not in head


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.booleans())
def test_random_strings_have_no_held_out_signature(seed, zh):
    text = make_corpus.random_string(random.Random(seed), zh)
    assert name_generators.held_out_generator(text) is None
    if zh:
        assert 1 <= len(text) <= 4 and not set(text) & set(name_generators.HELD_OUT_HAN)
        assert not [s for s in name_generators.HELD_OUT_COMPOUND_SURNAMES if s in text]
        assert all(name_generators.CJK_FIRST <= ord(c) <= name_generators.CJK_LAST for c in text)
    else:
        assert 3 <= len(text) <= 12 and text.isalpha() and text[1:].islower()


def test_training_uses_composed_openers_and_drills_random_strings(monkeypatch):
    corpus = make_corpus.make_corpus(2000, seed=4)
    subjects = tuple(s + " " for s in make_corpus.OPENER_SUBJECTS)
    en = [
        ex["user"].split("\n", 1)[1]
        for ex in corpus
        if ex["task"] == "extract_person" and not any("\u4e00" <= c <= "\u9fff" for c in ex["user"].split("\n", 1)[1])
    ]
    composed = [t for t in en if t.startswith(subjects)]
    assert 0.03 < len(composed) / len(en) < 0.3
    cities, make_city = set(), make_corpus._city
    # the drills' own reference to _city (scripts/corpus/drills.py), where copy_drill_example looks it up
    monkeypatch.setattr(corpus_drills, "_city", lambda rng, zh: cities.add(c := make_city(rng, zh)) or c)
    drills = make_corpus.copy_drill_corpus(2000, seed=4)
    items = [
        item
        for ex in drills
        if ex["task"] == "copy_drill"
        for item in ex["user"].split("\n", 1)[1].replace("、", ", ").split(", ")
    ]
    known = set(
        "".join(make_corpus.ZH_GIVEN + make_corpus.ZH_SURNAMES + make_corpus.ZH_HOBBIES + make_corpus.ZH_CITIES)
    )
    assert any(all("\u4e00" <= c <= "\u9fff" and c not in known for c in item) for item in items)
    # no drill name, word or random string has a held-out generator's signature (hobbies,
    # e-mails and cities may: "fishing" starts with a held-out word and "Jirjir Bay" is a
    # generated city, as in the main corpus's paragraphs, but neither is ever a name)
    others = [item for item in items if item not in make_corpus.EN_HOBBIES and "@" not in item and item not in cities]
    assert not [item for item in others if name_generators.held_out_generator(item) is not None]


@pytest.mark.parametrize(
    "n,spelled", [(0, "零"), (7, "七"), (10, "十"), (18, "十八"), (35, "三十五"), (90, "九十"), (99, "九十九")]
)
def test_zh_number(n, spelled):
    assert make_corpus.zh_number(n) == spelled


def test_zh_number_refuses_out_of_range():
    with pytest.raises(ValueError, match="0..99"):
        make_corpus.zh_number(100)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.booleans())
def test_tool_calls_validate_and_are_copied_from_the_request(seed, held_out):
    ex = make_corpus.tool_example(random.Random(seed), held_out=held_out)
    tools = {t["function"]["name"]: t["function"] for t in ex["tools"]}
    assert 1 <= len(tools) == len(ex["tools"]) <= 5  # names are unique within a request
    for tool in ex["tools"]:
        assert tool["type"] == "function"
        jsonschema.Draft202012Validator.check_schema(tool["function"]["parameters"])
    calls = ex.get("tool_calls", []) + [c for m in ex.get("history", []) for c in m.get("tool_calls", [])]
    if ex["task"] == "tool_none":
        assert not calls
    else:
        assert 1 <= len(calls) <= 2 and (len(calls) == 2) == (ex["task"] == "tool_parallel")
    for call in calls:
        fn = call["function"]
        assert fn["name"] in tools
        jsonschema.validate(fn["arguments"], tools[fn["name"]]["parameters"])
        for value in fn["arguments"].values():
            assert str(value) in ex["user"]  # every argument can be copied from the request
    if ex["task"] == "tool_reply":
        assert ex["history"][1]["role"] == "tool" and json.loads(ex["history"][1]["content"])
        assert ex["assistant"]


def test_held_out_names_and_phrasings_never_occur_in_training(train):
    held = make_corpus.heldout_extraction_prompts(80, train)
    assert len({ex["user"] for ex in held}) == 80
    assert not {ex["user"] for ex in held} & {ex["user"] for ex in train}
    train_names = {
        json.loads(make_corpus.unfence(ex["assistant"])).get("name") for ex in train if ex["task"] == "extract_person"
    } - {None}
    held_names = {json.loads(make_corpus.unfence(ex["assistant"]))["name"] for ex in held}
    assert not train_names & held_names
    assert all(make_corpus.is_held_out(n) for n in held_names)
    assert not any(make_corpus.is_held_out(n) for n in train_names)
    # every held-out instruction is one that training never uses
    train_instructions = {ex["user"].split("\n", 1)[0] for ex in train if ex["task"] == "extract_person"}
    assert not {ex["user"].split("\n", 1)[0] for ex in held} & train_instructions
    # and every fact is said with a held-out phrasing: a held-out phrase's fixed words never occur in training
    held_words = [
        max(p.replace("{an}", "{}").split("{}"), key=len).strip()
        for facts in (make_corpus.EN_FACTS, make_corpus.ZH_FACTS)
        for _, held_phrases in facts.values()
        for p in held_phrases
    ]
    train_text = "\n".join(ex["user"] for ex in train if ex["task"] == "extract_person")
    assert not [w for w in held_words if w in train_text]


def test_some_training_requests_ask_for_one_or_two_keys(train):
    """Issue 33: a model that never closed an answer after two keys loops on name+age; the
    short answers are the keys the instruction lists, in key order, name first when asked."""
    extract = [ex for ex in train if ex["task"] == "extract_person"]
    short = [ex for ex in extract if len(json.loads(make_corpus.unfence(ex["assistant"]))) <= 2]
    # (a share of the requests that list fields: SHORT_REQUEST of them, and some lists are short anyway)
    assert 0.5 * make_corpus.SHORT_REQUEST < len(short) / len(extract) < make_corpus.SHORT_REQUEST + 0.1
    pairs = [list(json.loads(make_corpus.unfence(ex["assistant"]))) for ex in short]
    assert ["name", "age"] in pairs and any(len(p) == 1 for p in pairs)
    for ex, keys in zip(short, pairs):
        assert make_corpus._join(keys, False) in ex["user"].split("\n", 1)[0]  # the instruction lists them


def test_held_out_sets_are_byte_identical_to_before_issue_33():
    """eval_extraction's held-out sets (the model card's numbers) are the ones measured before
    the corpus changed: short requests and generalisation openers are never held-out draws."""
    import hashlib

    train = make_corpus.make_corpus(20000, seed=1)
    digests = [
        hashlib.sha256(json.dumps(held, ensure_ascii=False, sort_keys=True).encode()).hexdigest()[:16]
        for held in (make_corpus.heldout_extraction_prompts(200, train), make_corpus.heldout_tool_prompts(100, train))
    ]
    # (the tool set skips held-out requests that the training corpus happens to hold, such as
    # "What is 4 + 3?": a change to the mix can move one in or out; this mix moves none)
    assert digests == ["520178ec41f95835", "d827139d11b686d3"]  # stage 32: 16加8等于多少？ drawn into training


def test_held_out_tool_requests_are_not_trained(train):
    held = make_corpus.heldout_tool_prompts(40, train)
    assert not {ex["user"] for ex in held} & {ex["user"] for ex in train}
    assert len({ex["user"] for ex in held}) == 40


def _called_tool_echoed(ex) -> bool:
    """The request uses the called tool's description or name, which no other listed tool has."""
    call = ex["tool_calls"][0]["function"]["name"]
    tool = next(t["function"] for t in ex["tools"] if t["function"]["name"] == call)
    others = [t["function"] for t in ex["tools"] if t["function"]["name"] != call]
    echoed = tool["description"].rstrip(".") in ex["user"] or call in ex["user"]
    if echoed:
        assert not any(
            o["description"] != tool["description"] and o["description"].rstrip(".") in ex["user"] for o in others
        )
    return echoed


def test_some_training_tool_requests_use_the_tools_own_words(train):
    calls = [ex for ex in train if ex["task"] == "tool_call"]
    share = sum(map(_called_tool_echoed, calls)) / len(calls)
    assert 0.1 < share < 0.4
    held = [ex for ex in make_corpus.heldout_tool_prompts(200, train) if ex["task"] == "tool_call"]
    assert held and not any(map(_called_tool_echoed, held))  # held-out requests keep their own phrasings


def test_to_messages_renders_tool_turns():
    ex = next(e for e in make_corpus.make_corpus(400, seed=3) if e["task"] == "tool_reply")
    msgs = make_corpus.to_messages(ex)
    assert [m["role"] for m in msgs][-3:] == ["assistant", "tool", "assistant"]
    assert msgs[-3]["tool_calls"] and msgs[-1]["content"] == ex["assistant"]
    assert make_corpus.to_messages(ex, with_answer=False) == msgs[:-1]


def _splits_into(text: str, pieces: set[str], lo: int, hi: int) -> bool:
    """Whether ``text`` is lo..hi pieces of ``pieces`` written together (brute force)."""
    if not text:
        return lo <= 0
    return hi > 0 and any(
        text.startswith(p) and _splits_into(text[len(p) :], pieces, lo - 1, hi - 1) for p in pieces if p
    )


@pytest.fixture(scope="module")
def decoded_vocab():
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer.from_file(str(make_corpus.TOKENIZER_FILE))
    return tok, {tok.decode([i]): i for i in range(tok.get_vocab_size())}


def test_vocab_letter_tokens_are_tokens_and_leave_out_held_out_openers(decoded_vocab):
    _, vocab = decoded_vocab
    latin, han = make_corpus.vocab_letter_tokens()
    assert set(latin) <= vocab.keys() and set(han) <= vocab.keys() and len(latin) > 1000 and len(han) > 300
    assert "Book" in latin  # a held-out name's first token is emitted, though never first in a run
    opener_words = " ".join(make_corpus.EN_GENERALISATION_OPENERS).lower()
    assert not [t for t in latin if len(t) >= 3 and t.lower() in opener_words]
    opener_chars = set("".join(make_corpus.ZH_GENERALISATION_OPENERS).replace("{n}", ""))
    assert not set(han) & (set(name_generators.HELD_OUT_HAN) | opener_chars)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.booleans())
def test_vocab_strings_are_tokens_without_a_held_out_signature(seed, zh):
    text = make_corpus.vocab_string(random.Random(seed), zh)
    latin, han = make_corpus.vocab_letter_tokens()
    assert name_generators.held_out_generator(text) is None
    if zh:
        assert 2 <= len(text) <= 4 and set(text) <= set(han)
        assert not [s for s in name_generators.HELD_OUT_COMPOUND_SURNAMES if s in text]
    else:
        assert text.isascii() and text.isalpha() and _splits_into(text, set(latin), 2, 3)
        # no letter run starts with a held-out word: "Book" may only follow other letters
        assert not text.lower().startswith(tuple(w.lower() for w in name_generators.HELD_OUT_WORDS))


def test_copy_drills_emit_nearly_every_letter_token(decoded_vocab):
    """The drills' answers hold (nearly) every letter token of the vocabulary: without
    vocab_string, 40,000 drills and a 20,000-example epoch emitted 2,408 of its 2,881."""
    latin, han = make_corpus.vocab_letter_tokens()
    tok, vocab = decoded_vocab
    letter_ids = {vocab[t] for t in latin + han}
    emitted = set()
    for ex in make_corpus.copy_drill_corpus(10000, seed=3):
        emitted.update(tok.encode(ex["assistant"], add_special_tokens=False).ids)
    assert len(emitted & letter_ids) >= 0.9 * len(letter_ids)


def test_rare_tokens_are_never_in_the_sampled_answers_and_drills_emit_them_more(decoded_vocab):
    """Issue 33, stage 12: rare_letter_tokens are letter tokens that no answer of the sample
    holds (brute force over the answers' text), and the drills emit them more often than the
    other letter tokens (stage 11's drills emitted `Book` 10 times in a 40,000-drill epoch)."""
    tok, vocab = decoded_vocab
    latin, han = make_corpus.vocab_letter_tokens()
    rare_latin, rare_han = make_corpus.rare_letter_tokens()
    assert set(rare_latin) <= set(latin) and set(rare_han) <= set(han) and "Book" in rare_latin
    answers = "\n".join(ex["assistant"] for ex in make_corpus.make_corpus(4000, seed=0))
    assert not [t for t in rare_han if t in answers]  # a Han token never held is never written
    held = set()
    for ex in make_corpus.make_corpus(4000, seed=0):
        held.update(tok.encode(ex["assistant"], add_special_tokens=False).ids)
    assert not {vocab[t] for t in rare_latin + rare_han} & held
    counts: dict[int, int] = {}
    for ex in make_corpus.copy_drill_corpus(10000, seed=5):
        for i in tok.encode(ex["assistant"], add_special_tokens=False).ids:
            counts[i] = counts.get(i, 0) + 1
    rare = sorted(counts.get(vocab[t], 0) for t in rare_latin + rare_han)
    other = sorted(counts.get(vocab[t], 0) for t in set(latin + han) - set(rare_latin + rare_han))
    assert rare[len(rare) // 2] > other[len(other) // 2]


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_made_up_connectors_are_single_tokens_never_a_surname_or_held_out(decoded_vocab, seed):
    """Stage 12's made-up connectors (for "档案里写着NAME", which stage 11 always answered `档案`):
    1-3 characters, each one token of the tokenizer, none a surname's, a held-out name's or a
    held-out opener's."""
    _, vocab = decoded_vocab
    connector = make_corpus.made_up_connector(random.Random(seed))
    assert 1 <= len(connector) <= 3 and all(c in vocab for c in connector)
    banned = set("".join(make_corpus.ZH_SURNAMES)) | set(name_generators.HELD_OUT_HAN)
    banned |= set("".join(make_corpus.ZH_GENERALISATION_OPENERS).replace("{n}", ""))
    assert not set(connector) & banned


def test_some_composed_openers_end_in_a_connector_never_listed():
    rng = random.Random(12)
    openers = [make_corpus.composed_opener(rng, True) for _ in range(400)]
    listed = tuple(c + "{n}，" for c in make_corpus.ZH_OPENER_CONNECTORS)
    share = sum(not o.endswith(listed) for o in openers) / len(openers)
    assert abs(share - make_corpus.MADE_UP_CONNECTOR) < 0.1  # (a made-up one may happen to be listed)


def test_some_chinese_paragraphs_put_the_age_straight_after_the_name(train):
    """Stage 24: "高娟48岁，爱好是摄影。" (no word between name and age) in some Chinese training paragraphs."""
    zh = [
        (json.loads(ex["assistant"].removeprefix("```json\n").removesuffix("\n```")), ex["user"].split("\n", 1)[1])
        for ex in train
        if ex["task"] == "extract_person" and any("\u4e00" <= c <= "\u9fff" for c in ex["user"].split("\n", 1)[1])
    ]
    named = [(answer, text) for answer, text in zh if "name" in answer]
    straight = [t for a, t in named if re.search(re.escape(a["name"]) + r"([0-9]+|[一二三四五六七八九十]+)岁", t)]
    assert 0.04 < len(straight) / len(named) < ZH_AGE_AFTER_NAME + 0.05


def _document_draws(n: int, seed: int = 0) -> list[tuple[str, dict]]:
    rng = random.Random(seed)
    return [corpus_documents.document_with_kind(rng) for _ in range(n)]


def _age_stated(age: int, text: str) -> bool:
    spelled = (str(age), make_corpus.en_number(age), make_corpus.zh_number(age))
    return any(
        re.search(rf"(?<![0-9A-Za-z\-一二三四五六七八九十]){re.escape(s)}(?![0-9A-Za-z\-一二三四五六七八九十])", text)
        for s in spelled
    )


def test_document_examples_are_grounded_in_key_order_and_untitled():
    """document_kinds.py: every answer parses (unfenced), keys in KEY_ORDER, its values in
    the text (the age in digits, English words or Chinese numerals), the name as the text
    writes it with no title inside, and never a held-out or demo name."""
    titles = corpus_documents.EN_TITLES + corpus_documents.ZH_TITLES
    for kind, ex in _document_draws(1500):
        assert ex["task"] == "extract_person" and set(ex) == {"task", "system", "user", "assistant"}
        answer = json.loads(make_corpus.unfence(ex["assistant"]))
        text = ex["user"].split("\n", 1)[1]
        assert list(answer) == [k for k in make_corpus.KEY_ORDER if k in answer], kind
        if "name" in answer:
            name = answer["name"]
            assert name in text and not [t for t in titles if t in name], (kind, name)
            assert not make_corpus.is_held_out(name) and name not in make_corpus.DEMO_NAMES
            assert name_generators.held_out_generator(name) is None
        for key in ("city", "email", "phone", "occupation"):
            if key in answer:
                assert answer[key] in text, (kind, key)
        for hobby in answer.get("hobbies", []):
            assert hobby in text, kind
        if "age" in answer:
            assert _age_stated(answer["age"], text), (kind, answer["age"])
        if "birthday" in answer:
            y, m, d = (int(x) for x in answer["birthday"].split("-"))
            assert str(y) in text and str(d) in text, kind


def test_every_document_kind_is_drawn_and_draws_are_seeded():
    kinds = corpus_documents.DOCUMENT_KINDS
    assert len(corpus_documents.EN_KINDS) >= 14 and len(corpus_documents.ZH_KINDS) >= 10
    assert len(set(kinds)) == len(kinds)
    draws = _document_draws(1000, seed=1)
    assert {kind for kind, _ in draws} == set(kinds)
    assert draws[:50] == _document_draws(50, seed=1) and draws[:50] != _document_draws(50, seed=2)
    # titles and honorifics are written around names (the subject's or another person's)
    users = [ex["user"] for _, ex in draws]
    assert sum(any(t + " " in u for t in corpus_documents.EN_TITLES) for u in users) > 50
    assert sum(any(t in u for t in corpus_documents.ZH_TITLES) for u in users) > 50
    assert make_corpus.document_example(random.Random(1)) == draws[0][1]  # the maker make_corpus draws


@pytest.mark.parametrize(
    "n,spelled", [(0, "zero"), (13, "thirteen"), (20, "twenty"), (42, "forty-two"), (99, "ninety-nine")]
)
def test_en_number(n, spelled):
    assert make_corpus.en_number(n) == spelled


def test_some_english_training_paragraphs_spell_the_age_in_words(train):
    rows = [
        (json.loads(make_corpus.unfence(ex["assistant"])), ex["user"])
        for ex in train
        if ex["task"] == "extract_person" and not any("\u4e00" <= c <= "\u9fff" for c in ex["user"])
    ]
    aged = [(a["age"], user) for a, user in rows if isinstance(a, dict) and "age" in a]
    share = sum(make_corpus.en_number(age) in user for age, user in aged) / len(aged)
    assert 0.1 < share < 0.35
