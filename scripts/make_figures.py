"""Make the chapters' figures: every drawing in chapters/figures/*.svg comes from here.

    python scripts/make_figures.py              # (re)write every figure
    python scripts/make_figures.py --check      # exit 1 if a figure is out of date
    python scripts/make_figures.py --out DIR    # write them somewhere else

Each figure is a function returning DOT text (the drawings of minisglang.drawings, or a
hand-written .dot file beside the figures), rendered with graphviz. The SVG carries the
SHA-256 of its DOT text in a comment, so `--check` (and tests/test_figures.py) can tell
whether a figure still matches the code without comparing pictures, which differ between
graphviz versions. Figures drawn from the model's own output (the radix trees) depend on
floating point and are only checked when asked (`--check --with-model`).
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIGURES = REPO / "chapters" / "figures"
STAMP = re.compile(r"<!-- minisglang figure: dot sha256 ([0-9a-f]{64}) -->")


@dataclass(frozen=True)
class Figure:
    name: str  # file name without .svg
    make: Callable[[], str]  # -> DOT text
    needs_model: bool = False  # drawn from a generation of the bundled model


def _tokenizer():
    import minisglang
    from minisglang.tokenizer import Tokenizer

    return Tokenizer.from_pretrained(minisglang.DEFAULT_MODEL_PATH)


def _token_fsm(regex: str, **kwargs) -> str:
    from minisglang.constrained.regex_dfa import ByteDFA, compile_regex
    from minisglang.constrained.token_index import build_index_fast
    from minisglang.drawings import token_fsm_dot

    tok = _tokenizer()
    index = build_index_fast(
        ByteDFA.from_char_dfa(compile_regex(regex)), tok.token_bytes, tok.eos_token_id, progress=False
    )
    return token_fsm_dot(index, tok, title=f"token FSM of {regex} on the bundled vocabulary", **kwargs)


# ASCII digits: Python's (and so our) \d is every Unicode decimal digit, a 179-state token FSM.
DATE = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"


def date_char_dfa() -> str:
    from minisglang.constrained.regex_dfa import compile_regex
    from minisglang.drawings import char_dfa_dot

    return char_dfa_dot(compile_regex(DATE))


def date_token_fsm() -> str:
    return _token_fsm(DATE, max_tokens_per_edge=4)


def yes_no_token_fsm() -> str:
    return _token_fsm(r"(yes|no)")


JSON_SMALL = r'\{"name": "[a-z]+", "age": [0-9]+\}'


def json_char_dfa() -> str:
    from minisglang.constrained.regex_dfa import compile_regex
    from minisglang.drawings import char_dfa_dot

    return char_dfa_dot(compile_regex(JSON_SMALL))  # the default layout wraps it to fit a slide


def json_compressed_fsm() -> str:
    from minisglang.constrained.jump_forward import JumpForwardMap
    from minisglang.constrained.regex_dfa import ByteDFA, compile_regex
    from minisglang.drawings.compressed import compressed_fsm_dot

    dfa = compile_regex(JSON_SMALL)
    return compressed_fsm_dot(dfa, JumpForwardMap.build(dfa, ByteDFA.from_char_dfa(dfa)))


def schema_dfa() -> str:
    from minisglang.constrained.json_schema import build_regex_from_schema
    from minisglang.constrained.regex_dfa import compile_regex
    from minisglang.drawings import char_dfa_dot

    small = {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}, "n": {"type": "array", "items": {"enum": [1, 2]}, "maxItems": 2}},
        "required": ["ok"],
        "additionalProperties": False,
    }
    regex = build_regex_from_schema(small, whitespace="")
    return char_dfa_dot(compile_regex(regex), title="the DFA of a small JSON Schema (whitespace off)")


def structural_tag() -> str:
    """Chapter 07: the tag the server writes for two tools under tool_choice="auto"."""
    from minisglang.constrained.structural_tag import parse_structural_tag
    from minisglang.drawings.structural_tag import structural_tag_dot
    from minisglang.function_call import FunctionTool, ToolChoice, tool_constraint

    tools = [
        FunctionTool("get_weather", {"type": "object", "properties": {"city": {"type": "string"}}}),
        FunctionTool("search", {"type": "object", "properties": {"query": {"type": "string"}}}),
    ]
    tag = parse_structural_tag(tool_constraint(tools, ToolChoice("auto")).value)
    return structural_tag_dot(tag, names=["get_weather's parameters", "search's parameters"])


def request_lifecycle() -> str:
    return (FIGURES / "00-request-lifecycle.dot").read_text(encoding="utf-8")


def radix_after_three_requests() -> str:
    """Notebook 00, section 4: three chats with one system prompt, greedy, 12 tokens each."""
    import minisglang as sgl
    from minisglang.drawings.radix import radix_tree_dot

    engine = sgl.Engine(stage="s0", max_total_tokens=512)
    tok = engine.tokenizer
    system = "You are an information extraction assistant. Output valid JSON only."

    def chat(text):
        return tok.apply_chat_template([{"role": "system", "content": system}, {"role": "user", "content": text}])

    greedy = {"temperature": 0, "max_new_tokens": 12}
    engine.generate(chat("Li Lei is 28 years old and lives in Beijing."), greedy)
    engine.generate(
        [chat("Wang Fang, 35, is a teacher in Shanghai."), chat("Email me at li.lei@example.com before Friday.")],
        [greedy, greedy],
    )
    dot = radix_tree_dot(engine.scheduler.tree_cache, tok)
    engine.shutdown()
    return dot


def radix_after_jumps() -> str:
    """Notebook 04, section 2: its request greedy, then sampled at the seed that re-cuts, then the tree.

    The run and its prompt live in scripts/chapter_facts.py, which computes every fact chapter
    04 quotes about it (tests/test_chapter04_facts.py): the figure and the prose share one run."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import chapter_facts

    return chapter_facts.notebook_runs().dot  # radix_tokens_dot: token boundaries visible


ALL = [
    Figure("00-request-lifecycle", request_lifecycle),
    Figure("00-radix-tree", radix_after_three_requests, needs_model=True),
    Figure("01-date-char-dfa", date_char_dfa),
    Figure("01-date-token-fsm", date_token_fsm),
    Figure("01-yes-no-token-fsm", yes_no_token_fsm),
    Figure("04-char-dfa", json_char_dfa),
    Figure("04-compressed-fsm", json_compressed_fsm),
    Figure("04-radix-after-jumps", radix_after_jumps, needs_model=True),
    Figure("05-schema-dfa", schema_dfa),
    Figure("07-structural-tag", structural_tag),
]


# The regexes the chapters and notebooks draw or run: `minisglang viz REGEX` must fit a
# 1920x1080 slide at 18 px text with its default layout (tests/test_drawings_layout.py).
# Two are left out, as no layout can fit them: PERSON (notebook 04's; its `[A-Za-z ]{1,12}`
# is twelve states side by side, each with an edge out to the closing quote: no row may
# end between them, as none may between an alternation's branches) and chapter 07's tool-name pattern
# `[A-Za-z0-9_-]{1,64}` (65 states: 13 rows of 18-px circles are 1,230 px high).
PERSON = r'\{"name": "[A-Za-z ]{1,12}", "age": [1-9][0-9]?, "city": "(Paris|Rome|Beijing)"\}'
COURSE_REGEXES = [
    DATE,
    JSON_SMALL,
    r"(yes|no)",
    r'\{"name": "[a-z]+", "email": "[a-z]+@example\.com"\}',
    r"color: (red|green|blue), size: (S|M|L|XL)",
    r"[-+]?[0-9]+[ ]*",
]


def dot_hash(dot: str) -> str:
    return hashlib.sha256(dot.encode("utf-8")).hexdigest()


def stamped_svg(dot: str) -> str:
    """The rendered SVG with the DOT text's hash in a comment after the XML declaration."""
    from minisglang.drawings.render import render_dot

    svg = render_dot(dot, "svg").decode("utf-8")
    stamp = f"<!-- minisglang figure: dot sha256 {dot_hash(dot)} -->\n"
    head, sep, rest = svg.partition("?>\n")
    return head + sep + stamp + rest if sep else stamp + svg


def stale(figure: Figure, folder: Path = FIGURES) -> str | None:
    """Why `figure` in `folder` is out of date, or None when it matches the code."""
    path = folder / f"{figure.name}.svg"
    if not path.exists():
        return f"{path} is missing"
    m = STAMP.search(path.read_text(encoding="utf-8"))
    if m is None:
        return f"{path} was not made by this script"
    if m.group(1) != dot_hash(figure.make()):
        return f"{path} no longer matches the code that draws it"
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="only check; exit 1 if a figure is out of date")
    ap.add_argument("--with-model", action="store_true", help="--check the model-drawn figures too")
    ap.add_argument("--out", type=Path, default=FIGURES, help="folder to write (default: chapters/figures)")
    args = ap.parse_args(argv)
    if args.check:
        problems = [p for f in ALL if args.with_model or not f.needs_model if (p := stale(f, args.out))]
        for p in problems:
            print(p)
        print("figures up to date" if not problems else "run: python scripts/make_figures.py")
        return 1 if problems else 0
    args.out.mkdir(parents=True, exist_ok=True)
    for figure in ALL:
        (args.out / f"{figure.name}.svg").write_text(stamped_svg(figure.make()), encoding="utf-8")
        print(f"wrote {args.out / figure.name}.svg")
    return 0


if __name__ == "__main__":
    sys.exit(main())
