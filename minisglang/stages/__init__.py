"""The stages of constrained decoding (s1-s7, after s0 without any), as a small registry.

Each stage is a `Stage` subclass in its own module, registered under a tag such as
"s1-masked-fill" (short name "s1"). `Engine(stage=...)` looks the tag up here. Stages s1-s4
build on each other (s2's class extends s1's, and so on), so the diff between two
consecutive modules is the lesson of the chapter; s5 replaces our FSM with a grammar
interface and composes s3's `GrammarQueue` and s4's `JumpForward`; s6 is s5 plus one
request kind, structural tags (tool calls); s7 is s6 whose decode step drafts several tokens
and verifies them in one forward (speculative decoding under a grammar). Reusable automata
(compiling, packing, the jump map, the compile service) live in constrained/.
"""

from __future__ import annotations

import importlib
import importlib.util

from .base import STAGES, Stage, register  # noqa: F401  (register: the decorator that names a stage)

# tag -> module that defines it, in historical order. Modules are imported lazily so that
# `minisglang checkout s1` can ship a copy without the later stages.
STAGE_MODULES: dict[str, str] = {
    "s0-unconstrained": "minisglang.stages.base",
    "s1-masked-fill": "minisglang.stages.s1_masked_fill",
    "s2-batched-mask": "minisglang.stages.s2_batched_mask",
    "s3-fsm-cache": "minisglang.stages.s3_fsm_cache",
    "s4-jump-forward": "minisglang.stages.s4_jump_forward",
    "s5-backends": "minisglang.stages.s5_backends",
    "s6-function-calling": "minisglang.stages.s6_function_calling",
    "s7-speculative": "minisglang.stages.s7_speculative",
}

# Library files a stage introduces beyond its stage module (relative to the package), so a
# checkout of an earlier stage leaves them out.
STAGE_FILES: dict[str, list[str]] = {
    "s2-batched-mask": ["constrained/bitmask.py", "constrained/bitmask_kernel.py"],
    "s3-fsm-cache": ["constrained/compile_service.py", "constrained/fsm_arrays.py", "constrained/fsm_disk.py"],
    "s4-jump-forward": ["constrained/jump_forward.py", "drawings/compressed.py"],
    "s5-backends": [
        "backends",
        "constrained/json_schema",
        "constrained/lazy_regex.py",
        "constrained/lazy_regex_parser.py",
        "constrained/regex_ast.py",
        "constrained/lazy_byte_dfa.py",
        "constrained/lazy_token_fsm.py",
        "constrained/lazy_row_shortcuts.py",
        "constrained/lazy_rows.py",
        "constrained/lazy_trie_walk.py",
        "constrained/child_process.py",
        "constrained/library_children.py",
        "constrained/schema_worker.py",
        "constrained/gbnf_regex.py",  # (the fsm backend's ebnf, when regular)
    ],
    "s6-function-calling": [
        "constrained/structural_tag.py",
        "constrained/structural_tag_format.py",
        "constrained/structural_tag_parse.py",
        "constrained/structural_tag_regex.py",
        "drawings/structural_tag.py",
    ],
    "s7-speculative": ["speculative.py", "overlap.py", "drawings/timeline.py"],
}


def resolve_tag(name: str) -> str:
    """'s1' or 's1-masked-fill' -> 's1-masked-fill'; a clear error for anything else."""
    for tag in STAGE_MODULES:
        if name == tag or name == tag.split("-")[0]:
            return tag
    raise ValueError(f"unknown stage {name!r}; known stages: {', '.join(STAGE_MODULES)}")


def get_stage_class(name: str) -> type[Stage]:
    tag = resolve_tag(name)
    if tag not in STAGES:
        importlib.import_module(STAGE_MODULES[tag])
    return STAGES.get(tag)


def latest_stage() -> str:
    """The newest stage present in this copy (a checkout of s2 has no s3)."""
    return available_stages()[-1]


# The newest stage an `Engine()` gets unless told otherwise. s7 is chosen by name
# (`stage="s7"`): on the CPUs this project runs on, its overlap thread and its drafts made
# steps slower than s6's (benchmarks/results/overlap.md, speculative.md), and s6 jumps forward.
DEFAULT_UP_TO = "s6-function-calling"


def default_stage() -> str:
    """The stage `Engine()` runs: the newest present in this copy, up to DEFAULT_UP_TO."""
    present = available_stages()
    order = list(STAGE_MODULES)
    return [t for t in present if order.index(t) <= order.index(DEFAULT_UP_TO)][-1]


def available_stages() -> list[str]:
    """The stage tags whose modules exist in this copy of the package (checkouts are partial)."""
    found = []
    for tag, module in STAGE_MODULES.items():
        if importlib.util.find_spec(module) is not None:
            found.append(tag)
    return found
