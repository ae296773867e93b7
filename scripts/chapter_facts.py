"""The facts chapter 04 and its notebook quote, computed from today's bundled model and tokenizer.

    python scripts/chapter_facts.py                 # print every fact chapter 04 quotes
    python scripts/chapter_facts.py --course        # print COURSE.md's word counts as they are now
    python scripts/chapter_facts.py --write-course  # rewrite COURSE.md's words and reading columns

Chapter 04 narrates runs of the bundled model (notebook 04's request, its jumps, the radix
tree they leave) and quotes how the bundled tokenizer cuts a few texts. A retrained model
or tokenizer silently turns such prose false, so every quoted fact is computed here, the
figure that shows the run (scripts/make_figures.py, 04-radix-after-jumps) is drawn from the
same run, and tests/test_chapter04_facts.py recomputes them and fails when the text drifts.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COURSE = REPO / "COURSE.md"
JUMP_RESULTS = REPO / "benchmarks" / "results" / "jump_forward.md"

# Notebook 04's request. The instruction is one of the corpus's own phrasings (corpus/phrasings.py's
# EN_LOOSE), so the bundled model copies the name; with "Extract as JSON:" it wrote 12 spaces.
INSTRUCTION = "Extract name, age and city from the text as JSON."
TEXT = "Li Lei is 31 years old and lives in Paris."
PERSON = r'\{"name": "[A-Za-z ]{1,12}", "age": [1-9][0-9]?, "city": "(Paris|Rome|Beijing)"\}'
MAX_NEW_TOKENS = 60
# The same request sampled: at this seed the model writes its name in a cut the tokenizer
# would not make, so a jump re-cuts tokens that had KV and the radix tree grows a branch.
BRANCH_TEMPERATURE = 1.0
BRANCH_SEED = 91
# Chapter 04, section 1: the small JSON regex whose DFA the compressed FSM shrinks.
JSON_SMALL = r'\{"name": "[a-z]+", "age": [0-9]+\}'
READING_WORDS_PER_MINUTE = 150  # COURSE.md's reading estimate


def tokenizer():
    import minisglang
    from minisglang.tokenizer import Tokenizer

    return Tokenizer.from_pretrained(minisglang.DEFAULT_MODEL_PATH)


def pieces(tok, ids: list[int]) -> list[str]:
    """Each token's own text (bytes decoded one token at a time, as the chapter quotes them)."""
    return [tok.token_bytes[i].decode("utf-8", "replace") for i in ids]


def cut(tok, text: str) -> list[str]:
    """How the bundled tokenizer cuts `text`."""
    return pieces(tok, tok.encode(text))


def quoted(tokens: list[str]) -> str:
    """Tokens as the chapter writes them: `a` `b` `c`."""
    return " ".join(f"`{t}`" for t in tokens)


@dataclass
class Jump:
    """One jump as notebook 04's show_step prints it: the output around the seam, before and after."""

    unchanged: int  # output tokens before the first one the retokenization changed
    recut: list[str]  # the old tokens from there on (the last one was sampled and has no KV)
    new: list[str]  # the new tokens from there on

    @property
    def branches(self) -> bool:
        """A re-cut token that had KV leaves a stale branch in the tree: every old token but the last."""
        return len(self.recut) >= 2


@dataclass
class Run:
    text: str
    first_token: str  # the token the prompt's prefill sampled
    jumps: list[Jump] = field(default_factory=list)
    completion_tokens: int = 0
    sampled_tokens: int = 0
    tokens: list[str] = field(default_factory=list)  # the final output, token by token
    jumped: list[str] = field(default_factory=list)  # the tokens jumps appended, in order

    def sampled(self) -> list[str]:
        """The output tokens the model sampled: all but the jumped ones (exact only when no
        jump re-cut anything, which the chapter's greedy run checks)."""
        rest = list(self.jumped)
        out = []
        for t in self.tokens:
            if rest and t == rest[0]:
                rest.pop(0)
            else:
                out.append(t)
        return out


def run_request(engine, prompt: str, params: dict) -> Run:
    """Submit one request and step the engine until it is released, recording each jump
    (a jump bumps the grammar's version), as notebook 04's show_step does."""
    tok = engine.tokenizer
    req = engine.submit(prompt, params)
    while not req.output_ids:  # the compile runs in the background
        engine.step()
    run = Run(text="", first_token=pieces(tok, req.output_ids)[0])
    while not req.released:
        grammar = req.grammar
        old_ids, old_version = list(req.output_ids), grammar.version
        engine.step()
        if grammar.version != old_version:  # a jump bumps the version (finishing only drops the grammar)
            new_ids = list(req.output_ids)
            same = next(
                (i for i, (a, b) in enumerate(zip(old_ids, new_ids)) if a != b), min(len(old_ids), len(new_ids))
            )
            run.jumps.append(Jump(same, pieces(tok, old_ids[same:]), pieces(tok, new_ids[same:])))
            run.jumped += pieces(tok, new_ids[len(old_ids) :]) if same == len(old_ids) else []
    run.tokens = pieces(tok, req.output_ids)
    meta = req.meta_info()
    run.text, run.completion_tokens = req.output_text, meta["completion_tokens"]
    run.sampled_tokens = meta["completion_tokens_wo_jump_forward"]
    return run


@dataclass
class NotebookRuns:
    prompt: str
    greedy: Run
    sampled: Run
    tree_nodes: int
    tree_branches: int  # nodes with more than one child, the root excepted
    dot: str  # radix_tokens_dot of the tree after both runs: the chapter's figure


def notebook_runs() -> NotebookRuns:
    """Notebook 04, section 2: the greedy request, then the same request sampled, on one s4 engine."""
    import minisglang as sgl
    from minisglang.drawings.radix import radix_tokens_dot

    engine = sgl.Engine(stage="s4")
    try:
        prompt = engine.tokenizer.apply_chat_template([{"role": "user", "content": f"{INSTRUCTION}\n{TEXT}"}])
        greedy = run_request(engine, prompt, {"regex": PERSON, "temperature": 0, "max_new_tokens": MAX_NEW_TOKENS})
        sampled = run_request(
            engine,
            prompt,
            {"regex": PERSON, "temperature": BRANCH_TEMPERATURE, "seed": BRANCH_SEED, "max_new_tokens": MAX_NEW_TOKENS},
        )
        cache = engine.scheduler.tree_cache
        nodes, branches, stack = 0, 0, [cache.root_node]
        while stack:
            node = stack.pop()
            nodes += 1
            branches += node is not cache.root_node and len(node.children) > 1
            stack.extend(node.children.values())
        dot = radix_tokens_dot(cache, engine.tokenizer)
    finally:
        engine.shutdown()
    return NotebookRuns(prompt, greedy, sampled, nodes, branches, dot)


def compressed_counts() -> tuple[int, int]:
    """Section 1: the states of JSON_SMALL's character DFA, and those left when every forced
    chain is one edge (the states that do not jump, plus the start if it jumps)."""
    from minisglang.constrained.jump_forward import JumpForwardMap
    from minisglang.constrained.regex_dfa import ByteDFA, compile_regex
    from minisglang.drawings.compressed import compressed_fsm_dot

    dfa = compile_regex(JSON_SMALL)
    dot = compressed_fsm_dot(dfa, JumpForwardMap.build(dfa, ByteDFA.from_char_dfa(dfa)))
    drawn = re.findall(r"^  \d+ \[shape=(?:double)?circle", dot, flags=re.M)
    return dfa.num_states, len(drawn)


def tokenizer_facts() -> dict[str, list[str]]:
    """The cuts chapter 04 quotes: the self-test's seam, section 4's prompt fusion and re-spelling."""
    tok = tokenizer()
    return {
        "jump alone": cut(tok, ', "age": '),
        "jump with the quote": cut(tok, '", "age": '),
        "prompt": cut(tok, "The code is 1"),
        "prompt + output": cut(tok, "The code is 12345"),
        "output alone": cut(tok, "2345"),
        "a number": cut(tok, "12345"),
        "the number cut otherwise": cut(tok, "12") + cut(tok, "345"),  # two tokens the model could write
    }


def benchmark_facts(path: Path = JUMP_RESULTS) -> dict[str, int]:
    """What chapter 04 quotes in prose from benchmarks/results/jump_forward.md."""
    text = path.read_text(encoding="utf-8")
    s3 = re.search(r"^\| s3 \| (\d+) / (\d+) \| (\d+) \| (\d+) \| (\d+) \| (\d+) \| (\d+) \| (\d+) \|", text, re.M)
    s4 = re.search(r"^\| s4 \| (\d+) / (\d+) \| (\d+) \| (\d+) \| (\d+) \| (\d+) \| (\d+) \| (\d+) \|", text, re.M)
    waves = re.search(r"Re-admission waves \(s4, from the trace\): (\d+) prefill forwards", text)
    if not (s3 and s4 and waves):
        raise ValueError(f"{path}: the s3/s4 rows or the re-admission line are not where chapter_facts expects them")
    return {
        "requests": int(s4.group(2)),
        "tokens": int(s4.group(3)),
        "sampled": int(s4.group(4)),
        "jumps": int(s4.group(5)),
        "s3 decode": int(s3.group(6)),
        "s4 decode": int(s4.group(6)),
        "s3 prefill": int(s3.group(7)),
        "s4 prefill": int(s4.group(7)),
        "s3 prefill tokens": int(s3.group(8)),
        "s4 prefill tokens": int(s4.group(8)),
        "readmission prefills": int(waves.group(1)),
    }


# ------------------------------------------------------------------ COURSE.md's word counts

COURSE_ROW = re.compile(r"^\| (?P<nn>\d\d) (?P<title>[^|]+?) \| (?P<words>[\d,]+) \| (?P<minutes>\d+) min \|", re.M)


def chapter_words() -> dict[str, int]:
    """'04' -> the chapter's word count as `wc -w` counts it (runs of non-space)."""
    return {
        p.name[:2]: len(p.read_text(encoding="utf-8").split())
        for p in sorted((REPO / "chapters").glob("[0-9][0-9]-*.md"))
    }


def course_row_values(words: int) -> tuple[str, int]:
    """COURSE.md's columns for a chapter of `words` words: rounded to 100, and minutes at 150 a minute."""
    rounded = int(round(words, -2))
    return f"{rounded:,}", round(rounded / READING_WORDS_PER_MINUTE)


def rewrite_course(text: str, words: dict[str, int]) -> str:
    """COURSE.md with every chapter row's words and reading minutes recomputed."""

    def row(m: re.Match) -> str:
        shown, minutes = course_row_values(words[m["nn"]])
        return f"| {m['nn']} {m['title']} | {shown} | {minutes} min |"

    return COURSE_ROW.sub(row, text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--course", action="store_true", help="print COURSE.md's word counts as they are now")
    ap.add_argument("--write-course", action="store_true", help="rewrite COURSE.md's words and reading columns")
    args = ap.parse_args(argv)
    if args.course or args.write_course:
        words = chapter_words()
        for nn, n in words.items():
            shown, minutes = course_row_values(n)
            print(f"chapter {nn}: {n} words -> {shown}, {minutes} min")
        if args.write_course:
            COURSE.write_text(rewrite_course(COURSE.read_text(encoding="utf-8"), words), encoding="utf-8")
            print(f"wrote {COURSE}")
        return 0
    for name, tokens in tokenizer_facts().items():
        print(f"{name:>20}: {quoted(tokens)}")
    states, kept = compressed_counts()
    print(f"section 1: the DFA of {JSON_SMALL} has {states} states; compressed, {kept}")
    print("benchmark:", benchmark_facts())
    runs = notebook_runs()
    for label, run in (("greedy", runs.greedy), (f"seed {BRANCH_SEED}", runs.sampled)):
        print(
            f"\n{label}: {run.text!r}; first token {run.first_token!r}; "
            f"{run.completion_tokens} tokens, {run.sampled_tokens} sampled"
        )
        print(f"  output: {quoted(run.tokens)}\n  sampled: {quoted(run.sampled())}")
        for jump in run.jumps:
            print(
                f"  jump: {jump.unchanged} unchanged; re-cut {quoted(jump.recut)} -> {quoted(jump.new)}"
                + ("  (a branch)" if jump.branches else "")
            )
    print(f"\nthe tree after both: {runs.tree_nodes} nodes, {runs.tree_branches} branching")
    return 0


if __name__ == "__main__":
    sys.exit(main())
