"""The `minisglang` command line: one subcommand per job, each a small function.

minisglang generate "prompt" --regex '[0-9]{3}'   # one request
minisglang demo                                  # constrained vs unconstrained, side by side
minisglang stages                                # the stages (s0-s7) and what each adds
minisglang trace "prompt" --regex '[0-9]{3}' -o t.html   # one request, step by step
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


def _engine(args, **options):
    from .engine import Engine

    return Engine(model_path=args.model_path, stage=args.stage, seed=args.seed or 0, **options, **_drafting(args))


def _drafting(args) -> dict:
    """s7's drafting options the command line gave (`generate`, `trace`, `serve`); the rest keep the defaults."""
    keys = ("speculative_algorithm", "speculative_num_draft_tokens")
    chosen = {k: getattr(args, k) for k in keys if getattr(args, k, None) is not None}
    if "speculative_num_draft_tokens" in chosen and "speculative_algorithm" not in chosen:
        # (drafting is off without an algorithm: the count alone would be read and do nothing)
        raise SystemExit("--speculative-num-draft-tokens needs --speculative-algorithm (NGRAM, FORCED or FORCED+NGRAM)")
    return chosen


def _params(args) -> dict:
    p = {"temperature": args.temperature, "max_new_tokens": args.max_new_tokens}
    if args.seed is not None:
        p["seed"] = args.seed
    for key in ("regex", "json_schema", "ebnf"):
        value = getattr(args, key, None)
        if value is not None:
            p[key] = value
    if args.stop:
        p["stop"] = args.stop
    return p


def cmd_generate(args) -> int:
    try:
        engine = _engine(args)
    except ValueError as e:  # an option the stage does not take
        print(f"error: {e}", file=sys.stderr)
        return 2
    prompt = args.prompt
    if args.chat:
        prompt = engine.tokenizer.encode_chat([{"role": "user", "content": prompt}])
    if args.stream:
        for chunk in engine.generate(prompt, _params(args), stream=True):
            print(chunk["text"], end="", flush=True)
        print()
        meta = chunk["meta_info"]
    else:
        out = engine.generate(prompt, _params(args))
        print(out["text"])
        meta = out["meta_info"]
    print(json.dumps(meta, ensure_ascii=False, default=str), file=sys.stderr)
    return 0 if meta["finish_reason"]["type"] != "abort" else 1


def _file_or_text(value: str | None) -> str | None:
    """A grammar argument: the contents of the file it names, else the text itself."""
    if value is not None and os.path.isfile(value):
        with open(value, encoding="utf-8") as f:
            return f.read()
    return value


def cmd_trace(args) -> int:
    """Run one request with the step view on and write its page."""
    from .stepview import trace

    options = {} if args.grammar_backend is None else {"grammar_backend": args.grammar_backend}
    try:
        engine = _engine(args, **options)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    params = {"temperature": args.temperature, "max_new_tokens": args.max_new_tokens}
    if args.seed is not None:
        params["seed"] = args.seed
    for key in ("regex", "json_schema", "structural_tag"):
        value = _file_or_text(getattr(args, key))
        if value is not None:
            params[key] = value
    try:
        result = trace(engine, args.prompt, params, top_k=args.top_k)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        engine.shutdown()
    result.save(args.output)
    stop = result.stop_reason or {}
    print(f"wrote {args.output}: {len(result.steps)} steps, stop {stop.get('type')}; output {result.output_text!r}")
    if stop.get("type") == "abort":  # why, where the reader of the terminal sees it
        kind = getattr(stop.get("kind"), "value", stop.get("kind"))
        print(f"aborted ({kind}): {stop.get('message')}", file=sys.stderr)
    return 0 if stop.get("type") != "abort" else 1


def cmd_demo(args) -> int:
    from .demo import run_demo

    return run_demo(model_path=args.model_path, stage=args.stage)


def cmd_stages(args) -> int:
    from .stages import STAGE_MODULES, available_stages, get_stage_class

    present = set(available_stages())
    for tag in STAGE_MODULES:
        if tag not in present:
            print(f"{tag:22s} (not in this copy)")
            continue
        cls = get_stage_class(tag)
        doc = (sys.modules[cls.__module__].__doc__ or "").strip().splitlines()[0]
        print(f"{tag:22s} {doc}")
    return 0


def cmd_fsm_allowed(args) -> int:
    from . import DEFAULT_MODEL_PATH
    from .constrained.regex_dfa import ByteDFA, compile_regex
    from .constrained.token_index import allowed_tokens_table, build_index_fast
    from .tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(args.model_path or DEFAULT_MODEL_PATH)
    index = build_index_fast(ByteDFA.from_char_dfa(compile_regex(args.regex)), tok.token_bytes, tok.eos_token_id)
    state = index.initial_state
    if args.after:
        for t in tok.encode(args.after):
            state = index.next_state(state, t)
            if state < 0:
                print(f"error: the text {args.after!r} leaves the regex's language", file=sys.stderr)
                return 1
    print(allowed_tokens_table(index, tok, state, limit=args.limit))
    return 0


def _layout(args):
    """The drawing's layout options from the command line (the defaults fit a slide)."""
    from .drawings.layout import Layout

    wrap: int | str | None = args.wrap
    if wrap == "none":
        wrap = None
    elif wrap != "slide":
        if not str(wrap).isdigit():
            raise ValueError(f"--wrap takes a width in px, 'slide' or 'none', not {wrap!r}")
        wrap = int(str(wrap))
    direction = args.direction or ("TB" if args.kind == "radix" else "LR")  # a tree reads downwards
    return Layout(rankdir=direction, wrap_px=wrap, font_px=args.font_px)


def _radix_dot(args, layout) -> str:
    """Run each --prompt greedily (under the regex, if one is given) on a fresh engine and
    draw its radix cache, one box per token."""
    from .drawings.radix import radix_tokens_dot
    from .engine import Engine

    if not args.prompt:
        raise ValueError("--kind radix needs at least one --prompt to run (the tree is what the prompts leave)")
    engine = Engine(model_path=args.model_path, stage=args.stage or "s4")
    try:
        params = {"temperature": 0, "max_new_tokens": args.max_new_tokens}
        if args.regex:
            params["regex"] = args.regex
        for prompt in args.prompt:
            engine.generate(prompt, params)
        return radix_tokens_dot(engine.scheduler.tree_cache, engine.tokenizer, layout=layout)
    finally:
        engine.shutdown()


def _automaton_dot(args, layout) -> str:
    """The DOT text of args.regex's automaton of the kind asked for."""
    from .constrained.regex_dfa import ByteDFA, compile_regex

    dfa = compile_regex(args.regex)
    if args.kind == "char":
        from .drawings.fsm import char_dfa_dot

        return char_dfa_dot(dfa, layout)
    if args.kind == "token":
        from . import DEFAULT_MODEL_PATH
        from .constrained.token_index import build_index_fast
        from .drawings.fsm import token_fsm_dot
        from .tokenizer import Tokenizer

        tok = Tokenizer.from_pretrained(args.model_path or DEFAULT_MODEL_PATH)
        index = build_index_fast(ByteDFA.from_char_dfa(dfa), tok.token_bytes, tok.eos_token_id)
        return token_fsm_dot(index, tok, layout=layout)
    from .constrained.jump_forward import JumpForwardMap
    from .drawings.compressed import compressed_fsm_dot

    return compressed_fsm_dot(dfa, JumpForwardMap.build(dfa, ByteDFA.from_char_dfa(dfa)), layout)


def _tag_dot(args, layout) -> str:
    """The DOT text of a structural tag given as JSON text or ``@FILE`` (chapter 07)."""
    from .constrained.structural_tag_format import StructuralTagFormat
    from .constrained.structural_tag_parse import parse_any_structural_tag
    from .drawings.structural_tag import structural_tag_dot

    if args.regex is None:
        raise ValueError("--kind tag draws a structural tag: give its JSON, or @FILE with it")
    spec = args.regex
    if spec.startswith("@"):
        try:
            spec = Path(spec[1:]).read_text()
        except OSError as e:
            raise ValueError(f"cannot read the structural tag file {spec[1:]!r}: {e.strerror}") from None
    tag = parse_any_structural_tag(spec)
    if isinstance(tag, StructuralTagFormat):
        raise ValueError(
            '--kind tag draws the old shape ({"structures", "triggers"}); a v2 spec '
            '({"type": "structural_tag", "format": ...}) has no drawing'
        )
    return structural_tag_dot(tag, layout=layout)


def cmd_viz(args) -> int:
    """Draw a regex's automaton (character DFA, token-level FSM, or compressed jump FSM),
    or the radix cache some prompts leave behind, laid out for a slide."""
    from .drawings.render import Drawing

    try:
        layout = _layout(args)
        if args.kind == "radix":
            dot = _radix_dot(args, layout)
        elif args.kind == "tag":
            dot = _tag_dot(args, layout)
        elif args.regex is None:
            raise ValueError(f"--kind {args.kind} draws a regex: give one (minisglang viz REGEX --kind {args.kind})")
        else:
            dot = _automaton_dot(args, layout)
    except ValueError as e:
        return _user_error(e)
    if args.output:
        Drawing(dot).save(args.output)
        print(f"wrote {args.output}")
    else:
        print(dot)
    return 0


def _user_error(e: Exception) -> int:
    """A mistake in what the user asked for (a stage, a task, a directory): one line, status 2."""
    print(f"error: {e}", file=sys.stderr)
    return 2


def cmd_checkout(args) -> int:
    from .checkout import checkout

    notes: list[str] = []
    try:
        out = checkout(args.stage, args.dir, student=args.student, from_dir=args.from_dir, notes=notes, only=args.only)
    except (ValueError, FileNotFoundError, FileExistsError) as e:
        return _user_error(e)
    kind = "student copy (exercise regions blanked)" if args.student else "reference copy"
    print(f"wrote {kind} of {args.stage} to {out}")
    for note in notes:
        print(note)
    print(f"grade it with: minisglang grade --stage {args.stage} --impl {args.dir}")
    return 0


def cmd_grade(args) -> int:
    from .grading import grade

    try:
        return grade(
            args.stage, args.impl, test_timeout=args.timeout, verbose=args.verbose, json_path=args.json, only=args.task
        )
    except (ValueError, FileNotFoundError) as e:
        return _user_error(e)


def cmd_prerequisites(args) -> int:
    from . import prerequisites
    from .checkout import all_tasks
    from .grade_report import load_prerequisites

    stages = args.stage or sorted({f"s{t[4:].split('_')[0]}" for t in all_tasks()}, key=lambda s: int(s[1:]))
    try:
        if args.write or args.pages:
            prerequisites.write(stages, retrace=args.write)
            print(f"wrote {', '.join(str(prerequisites.page_path(s)) for s in stages)}")
        else:
            for stage in stages:
                print(prerequisites.page_block(stage, load_prerequisites()))
    except ValueError as e:
        return _user_error(e)
    return 0


def cmd_solutions(args) -> int:
    from .checkout import PACKAGE_DIR, format_solutions, stage_number

    # The chapter each stage's tasks belong to, for the instructor kits (instructors/NN-name/).
    chapters = {
        1: "01-masked-fill",
        2: "02-batched-masks",
        3: "03-fsm-cache",
        4: "04-jump-forward",
        5: "05-backends",
        6: "07-function-calling",
        7: "08-speculative",
    }

    try:
        print(format_solutions(args.stage, args.task))
    except ValueError as e:
        return _user_error(e)
    # Bare code says what, not why: point at the reasoning, kept apart from the student text.
    kit = f"instructors/{chapters.get(stage_number(args.stage), '')}"
    if (PACKAGE_DIR.parent / kit / "walkthrough.md").exists():
        print(f"# why, and the wrong solutions each test catches: {kit}/walkthrough.md")
    else:
        print("# no walkthrough for this stage yet; the instructor kits: instructors/README.md")
    return 0


def cmd_serve(args) -> int:
    from .engine import Engine
    from .retraction import MIN_RATIO_FACTOR
    from .server import ServerOptions, serve

    given = {
        "api_key": args.api_key or os.environ.get("MINISGLANG_API_KEY"),
        "max_body_bytes": args.max_body_bytes,
        "max_json_containers": args.max_json_containers,
        "max_compiling_per_client": args.max_compiling_per_client,
        "drain_timeout": args.drain_timeout,
        "body_timeout": args.body_timeout,
        "header_timeout": args.header_timeout,
        "write_timeout": args.write_timeout,
        "max_connections_per_client": args.max_connections_per_client,
        "max_requests_per_second_per_client": args.max_requests_per_second_per_client,
        "request_burst_per_client": args.request_burst_per_client,
        "forwarded_allow_ips": args.forwarded_allow_ips,
        "stall_timeout": args.stall_timeout,
        "max_header_bytes": args.max_header_bytes,
        "max_headers": args.max_headers,
        "gc_reclaim_idle_seconds": args.gc_reclaim_idle_seconds,
        "gc_reclaim_after_freezes": args.gc_reclaim_after_freezes,
    }
    options = ServerOptions(**{k: v for k, v in given.items() if v is not None})  # the rest: its defaults
    # Engine options the operator gave; the rest keep the Engine's defaults.
    chosen = {key: getattr(args, key) for key in SERVE_ENGINE_OPTIONS if getattr(args, key) is not None}
    chosen.update(_drafting(args))  # (as for `generate`: a draft count without an algorithm is refused)
    if args.min_new_token_ratio is None and args.new_token_ratio < 1:
        chosen["min_new_token_ratio"] = MIN_RATIO_FACTOR * args.new_token_ratio
    engine = Engine(model_path=args.model_path, stage=args.stage, seed=args.seed or 0, **chosen)
    print(
        f"minisglang serving {engine.model_path} (stage {engine.stage.tag}) on http://{args.host}:{args.port}",
        flush=True,
    )
    return serve(engine, host=args.host, port=args.port, options=options)


# The Engine keyword arguments `serve` takes from its command line (flag: the key with dashes);
# s7's drafting options come through `_drafting`, as for `generate`.
SERVE_ENGINE_OPTIONS = (
    "grammar_backend",
    "compile_timeout",
    "compile_usage_half_life",
    "max_total_tokens",
    "max_running_requests",
    "reserved_for_new_clients",
    "max_prefill_tokens_beside_others",
    "new_token_ratio",
    "min_new_token_ratio",
    "torch_threads",
    "mixed_prefill",
    "disable_radix_cache",
    "chunked_prefill_size",
    "sampling_defaults",
)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="minisglang", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="command", required=True)

    def engine_args(p):
        p.add_argument("--model-path", default=None, help="HF checkpoint dir (default: the bundled model)")
        p.add_argument("--stage", default=None, help="s1..s7 or a full tag (default: s6, or a checkout's newest)")
        p.add_argument("--seed", type=int, default=None)

    def drafting_args(p):
        p.add_argument(
            "--speculative-algorithm",
            default=None,
            help="s7: NGRAM, FORCED or FORCED+NGRAM drafts (default none: drafting is off)",
        )
        p.add_argument(
            "--speculative-num-draft-tokens", type=int, default=None, help="s7: drafts per verify (default 4)"
        )

    g = sub.add_parser("generate", help="generate for one prompt")
    engine_args(g)
    g.add_argument("prompt")
    g.add_argument("--regex")
    g.add_argument("--json-schema", dest="json_schema")
    g.add_argument("--ebnf")
    g.add_argument("--temperature", type=float, default=0.0)
    g.add_argument("--max-new-tokens", type=int, default=128)
    g.add_argument("--stop", action="append", default=[])
    g.add_argument("--chat", action="store_true", help="wrap the prompt in the chat template")
    g.add_argument("--stream", action="store_true")
    drafting_args(g)
    g.set_defaults(func=cmd_generate)

    t = sub.add_parser("trace", help="one request step by step, as an HTML page (the step view)")
    engine_args(t)
    t.add_argument("prompt")
    grammar = t.add_mutually_exclusive_group(required=True)
    grammar.add_argument("--regex")
    grammar.add_argument("--json-schema", dest="json_schema", metavar="FILE_OR_TEXT")
    grammar.add_argument("--structural-tag", dest="structural_tag", metavar="FILE_OR_TEXT")
    t.add_argument("--grammar-backend", default=None, help="fsm, xgrammar, outlines, llguidance (s5 and later)")
    t.add_argument("--temperature", type=float, default=0.0)
    t.add_argument("--max-new-tokens", type=int, default=64)
    t.add_argument("--top-k", type=int, default=10, help="the model's top tokens shown per step")
    t.add_argument("-o", "--output", default="trace.html", help="the page to write (default trace.html)")
    drafting_args(t)
    t.set_defaults(func=cmd_trace)

    d = sub.add_parser("demo", help="extraction prompts, unconstrained vs constrained")
    engine_args(d)
    d.set_defaults(func=cmd_demo)

    s = sub.add_parser("stages", help="list the stages")
    s.set_defaults(func=cmd_stages)

    v = sub.add_parser(
        "viz", help="draw a regex's automaton, a structural tag, or a radix cache (DOT text, or a file with -o)"
    )
    v.add_argument(
        "regex",
        nargs="?",
        default=None,
        help="the regex to draw (with --kind radix: the constraint the prompts run under, if any; "
        "with --kind tag: a structural tag's JSON, or @FILE holding it)",
    )
    v.add_argument("--kind", choices=["char", "token", "compressed", "tag", "radix"], default="char")
    v.add_argument("-o", "--output", help="FILE.svg / .png / .pdf (default: print DOT)")
    v.add_argument("--model-path", default=None, help="tokenizer (and model, for --kind radix) (default: bundled)")
    v.add_argument(
        "--direction",
        choices=["LR", "TB"],
        default=None,
        help="rows left to right, or columns top to bottom (default: LR; radix: TB)",
    )
    v.add_argument(
        "--wrap",
        default="slide",
        metavar="PX|slide|none",
        help="wrap rows at this many px (default: fit a 1920x1080 slide; none: one long row)",
    )
    v.add_argument("--font-px", type=float, default=18.0, help="text height in px at 96 dpi (default 18)")
    v.add_argument(
        "--prompt",
        action="append",
        default=[],
        help="--kind radix: a prompt to run greedily first (repeat for several)",
    )
    v.add_argument("--stage", default=None, help="--kind radix: the engine's stage (default s4: jump-forward)")
    v.add_argument("--max-new-tokens", type=int, default=40, help="--kind radix: per prompt (default 40)")
    v.set_defaults(func=cmd_viz)

    c = sub.add_parser("checkout", help="write a standalone copy of the engine as of a stage")
    c.add_argument("stage")
    c.add_argument("dir")
    c.add_argument(
        "--student", action="store_true", help="blank the exercise solutions of this stage and the earlier ones"
    )
    c.add_argument(
        "--from",
        dest="from_dir",
        default=None,
        metavar="PREVIOUS_DIR",
        help="with --student: keep your own earlier tasks from your previous checkout",
    )
    c.add_argument(
        "--only",
        action="store_true",
        help=(
            "with --student: blank only this stage's tasks (the earlier stages keep the reference; with --from, "
            "yours where your copy has them)"
        ),
    )
    c.set_defaults(func=cmd_checkout)

    gr = sub.add_parser("grade", help="run a stage's exercise tests, per task")
    gr.add_argument("--stage", required=True)
    gr.add_argument(
        "--impl",
        nargs="+",
        default=None,
        metavar="DIR",
        help="a student's checkout dir, or several (a class: one table) (default: the reference)",
    )
    gr.add_argument(
        "--task",
        nargs="+",
        default=None,
        metavar="N_M",
        help="grade only these tasks, e.g. --task 5_3 (default: all the stage's tasks)",
    )
    gr.add_argument("--timeout", type=float, default=60.0, help="seconds per test before it fails as timed out")
    gr.add_argument("--verbose", action="store_true", help="also print pytest's full output")
    gr.add_argument("--json", default=None, metavar="FILE", help="write a machine-readable report")
    gr.set_defaults(func=cmd_grade)

    pr = sub.add_parser("prerequisites", help="which tasks each task's tests need written (exercises/sN.md's table)")
    pr.add_argument("--stage", nargs="+", default=None, help="default: every stage with exercises")
    pr.add_argument(
        "--write",
        action="store_true",
        help="run each task's tests on the reference, tracing which tasks' code they run, and "
        "write exercises/prerequisites.json and the pages' tables (minutes)",
    )
    pr.add_argument("--pages", action="store_true", help="rewrite the pages' tables from the stored data")
    pr.set_defaults(func=cmd_prerequisites)

    so = sub.add_parser("solutions", help="print a stage's reference solutions (for instructors)")
    so.add_argument("stage")
    so.add_argument("--task", default=None, help="one task, e.g. task1_2 or 1_2 (default: all of the stage)")
    so.set_defaults(func=cmd_solutions)

    sv = sub.add_parser("serve", help="OpenAI-compatible HTTP server")
    engine_args(sv)
    sv.add_argument("--host", default="127.0.0.1", help="default: loopback only")
    sv.add_argument("--port", type=int, default=30000)
    sv.add_argument("--grammar-backend", default=None, help="fsm, xgrammar, outlines, llguidance (s5)")
    sv.add_argument("--compile-timeout", type=float, default=None, help="seconds a grammar may compile (s3+)")
    sv.add_argument(
        "--compile-usage-half-life",
        type=float,
        default=None,
        help="seconds in which a client's compile time halves; a free compile thread serves the client "
        "with the least (s5+; default 10; 0: clients take plain turns)",
    )
    sv.add_argument(
        "--sampling-defaults",
        choices=("model", "openai"),
        default=None,
        help="what a request that gives no temperature/top_p/top_k/min_p gets: the checkpoint's "
        "generation_config.json values (model, the default) or temperature 1, top_p 1 (openai)",
    )
    sv.add_argument("--max-total-tokens", type=int, default=None, help="KV cache slots (default 16384)")
    sv.add_argument("--max-running-requests", type=int, default=None, help="requests decoding at once (default 128)")
    sv.add_argument(
        "--max-prefill-tokens-beside-others",
        type=int,
        default=None,
        help="new tokens a prefill forward computes at most (its first request whole all the same; "
        "a client arriving meanwhile waits for all of it; default 512)",
    )
    sv.add_argument(
        "--reserved-for-new-clients",
        type=int,
        default=None,
        help="rows a client with requests running may not take, kept for a client with none (default 1/16; 0: off)",
    )
    # A server's chats often give no max_tokens (they may write to the end of the context):
    # reserving all of it for each made them run one at a time when the pool is smaller than
    # two contexts. The server reserves a share, as SGLang does, and retracts when the pool
    # runs out (minisglang/retraction.py); the Engine's default, 1.0, reserves everything.
    sv.add_argument(
        "--new-token-ratio",
        type=float,
        default=0.7,
        help="share of each request's remaining max_new_tokens that admission reserves; below 1 a "
        "request may be retracted (back to wait, its output kept) when the KV pool runs out "
        "(default 0.7, SGLang's; 1: reserve all, never retract)",
    )
    sv.add_argument(
        "--min-new-token-ratio",
        type=float,
        default=None,
        help="the ratio falls toward this over 600 decode steps without a retraction "
        "(default 0.14 x --new-token-ratio, SGLang's)",
    )
    sv.add_argument(
        "--torch-threads",
        type=int,
        default=None,
        help="torch's intra-op threads (default: the cores less one, left to the compile workers)",
    )
    sv.add_argument(
        "--mixed-prefill",
        action="store_true",
        default=None,
        help="running requests decode inside each prefill forward (SGLang #1013; off by default)",
    )
    sv.add_argument("--disable-radix-cache", action="store_true", default=None, help="no prefix reuse between requests")
    sv.add_argument(
        "--chunked-prefill-size",
        type=int,
        default=None,
        help="s7: a long prompt is prefilled this many tokens a step (default off; with --mixed-prefill the "
        "running requests decode in those forwards, so a long prompt does not stall them)",
    )
    sv.add_argument(
        "--speculative-algorithm",
        default=None,
        help="s7: NGRAM, FORCED or FORCED+NGRAM drafts (default none; chapter 08 measures each)",
    )
    sv.add_argument("--speculative-num-draft-tokens", type=int, default=None, help="s7: drafts per verify (default 4)")
    sv.add_argument(
        "--api-key", default=None, help="require 'Authorization: Bearer KEY' (default: $MINISGLANG_API_KEY, else none)"
    )
    sv.add_argument("--max-body-bytes", type=int, default=None, help="larger bodies get 413 (default 4 MiB)")
    sv.add_argument(
        "--max-json-containers",
        type=int,
        default=None,
        help="a body with more JSON arrays and objects ('[' and '{') is refused before it is parsed (default 100000)",
    )
    sv.add_argument(
        "--max-compiling-per-client",
        type=int,
        default=None,
        help="distinct grammars one client (IP address) may wait for at once; 429 above (default 8)",
    )
    sv.add_argument(
        "--drain-timeout",
        type=float,
        default=None,
        help="on SIGTERM, seconds in-flight requests get before they are aborted (default 2)",
    )
    sv.add_argument(
        "--body-timeout",
        type=float,
        default=None,
        help="seconds a client may take to send its request body; 408 after (default 30)",
    )
    sv.add_argument(
        "--header-timeout",
        type=float,
        default=None,
        help="seconds a connection may take to send a request's line and headers; 408 after, "
        "and a connection that sent nothing is closed (default 30)",
    )
    sv.add_argument(
        "--write-timeout",
        type=float,
        default=None,
        help="seconds an answer may wait unread in a full send buffer before the connection is "
        "closed and its requests aborted (default 60)",
    )
    sv.add_argument(
        "--max-connections-per-client",
        type=int,
        default=None,
        help="connections one client address may hold open; one more is a 503 (default 256; "
        "the proxies of --forwarded-allow-ips are not counted)",
    )
    sv.add_argument(
        "--max-requests-per-second-per-client",
        type=float,
        default=None,
        help="requests one client may start a second; 429 above (default 50)",
    )
    sv.add_argument(
        "--request-burst-per-client",
        type=int,
        default=None,
        help="requests one client may start at once after a quiet spell (default 256)",
    )
    sv.add_argument(
        "--max-header-bytes",
        type=int,
        default=None,
        help="a request line and headers larger than this get 431 (default 16384)",
    )
    sv.add_argument("--max-headers", type=int, default=None, help="more headers than this get 431 (default 100)")
    sv.add_argument(
        "--gc-reclaim-idle-seconds",
        type=float,
        default=None,
        help="seconds the scheduler must be idle before the garbage collector's freezes give back the "
        "reference cycles they kept (one full collection; default 2; 0: never)",
    )
    sv.add_argument(
        "--gc-reclaim-after-freezes",
        type=int,
        default=None,
        help="freezes after which that reclaim happens between two steps even while requests run "
        "(default 16; 0: only when idle)",
    )
    sv.add_argument(
        "--stall-timeout",
        type=float,
        default=None,
        help="seconds the scheduler may go without coming round (a step that hangs) before "
        "/health answers 503 (default 5)",
    )
    sv.add_argument(
        "--forwarded-allow-ips",
        default=None,
        help="proxies whose X-Forwarded-For names the client, so the per-client compile limit "
        "counts each client behind them (comma-separated, '*' any; e.g. 127.0.0.1 behind a "
        "proxy on this machine; default: none, the client is the connection's address)",
    )
    sv.set_defaults(func=cmd_serve)

    f = sub.add_parser("fsm-allowed", help="list the tokens a regex allows at a state")
    f.add_argument("regex")
    f.add_argument("--after", default="", help="text already generated (walked from the start)")
    f.add_argument("--limit", type=int, default=20)
    f.add_argument("--model-path", default=None)
    f.set_defaults(func=cmd_fsm_allowed)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
