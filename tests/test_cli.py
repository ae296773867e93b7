"""The command line: each subcommand on small inputs, and its error messages."""

import subprocess
import sys

import pytest

from minisglang.cli import main


def run(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "minisglang.cli", *args], capture_output=True, text=True, timeout=600)


def test_stages_lists_every_stage(capsys):
    assert main(["stages"]) == 0
    out = capsys.readouterr().out
    for tag in [
        "s0-unconstrained",
        "s1-masked-fill",
        "s2-batched-mask",
        "s3-fsm-cache",
        "s4-jump-forward",
        "s5-backends",
    ]:
        assert tag in out


@pytest.mark.parametrize("kind", ["char", "token", "compressed"])
def test_viz_writes_svg(tmp_path, kind, capsys):
    out = tmp_path / f"{kind}.svg"
    assert main(["viz", r"(yes|no)-[0-9]", "--kind", kind, "-o", str(out)]) == 0
    assert out.read_text().lstrip().startswith(("<?xml", "<svg"))


def test_viz_prints_dot_without_output(capsys):
    assert main(["viz", "ab|c"]) == 0
    assert capsys.readouterr().out.startswith("digraph")


TAG = (
    '{"triggers": ["<tool_call>"], "structures": [{"begin": "<tool_call>{\\"name\\": \\"get_weather\\", '
    '\\"arguments\\": ", "schema": {"type": "object"}, "end": "}</tool_call>"}]}'
)


def test_viz_draws_a_structural_tag_from_json_or_a_file(tmp_path, capsys):
    assert main(["viz", TAG, "--kind", "tag"]) == 0
    dot = capsys.readouterr().out
    assert dot.startswith("digraph") and "get_weather" in dot and "tool_call" in dot
    spec = tmp_path / "tag.json"
    spec.write_text(TAG)
    out = tmp_path / "tag.svg"
    assert main(["viz", f"@{spec}", "--kind", "tag", "-o", str(out)]) == 0
    assert out.read_text().lstrip().startswith(("<?xml", "<svg"))


@pytest.mark.parametrize(
    "given, named",
    [
        (None, "give its JSON"),
        ("@/no/such/tag.json", "cannot read the structural tag file"),
        ('{"triggers": ["<a>"]}', "structural_tag.structures is missing"),
        ("{not json", "not valid JSON"),
        ('{"format": {"type": "any_text"}}', "a v2 spec"),
        ('{"format": {"type": "nope"}}', "structural_tag.format.type: unknown format type"),
    ],
)
def test_viz_tag_names_what_is_wrong(given, named, capsys):
    assert main(["viz", *([given] if given else []), "--kind", "tag"]) == 2
    assert named in capsys.readouterr().err


def test_fsm_allowed_lists_tokens(capsys):
    assert main(["fsm-allowed", r"[0-9]{4}-[0-9]{2}", "--after", "20"]) == 0
    out = capsys.readouterr().out
    assert "state" in out.lower()


def test_generate_constrained_and_bad_regex():
    ok = run(
        "generate",
        "<|user|>\nWhen?\n<|assistant|>\n",
        "--regex",
        r"[0-9]{4}-[0-9]{2}-[0-9]{2}",
        "--max-new-tokens",
        "20",
    )
    assert ok.returncode == 0, ok.stderr
    import re

    assert re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", ok.stdout.strip())
    bad = run("generate", "x", "--regex", "(unclosed")
    assert bad.returncode == 1
    assert "(unclosed" in bad.stderr


@pytest.mark.parametrize("stage", ["s3", "s6"])
def test_generate_exits_without_leak_reports(stage):
    """Nothing after the answer but its meta line: no `nanobind: leaked ...` (triton, once
    imported by the model's meta-device init) and no resource tracker's leaked semaphore
    (tqdm's lock in the s3 compile workers), which a class would see at every exit."""
    out = run("generate", "Name:", "--stage", stage, "--regex", "[A-Z][a-z]{2,5}", "--max-new-tokens", "8")
    assert out.returncode == 0, out.stderr
    assert "leaked" not in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.rstrip().splitlines()[-1].startswith('{"id"'), out.stderr


def test_serve_passes_the_engine_options_it_is_given(monkeypatch):
    """`serve`'s engine flags reach the Engine (the ones not given keep the Engine's defaults),
    and the Engine refuses a bad value with its own message."""
    import minisglang.engine
    import minisglang.server

    seen = {}

    class FakeEngine:
        model_path, stage = "m", type("S", (), {"tag": "s6"})()

        def __init__(self, **kwargs):
            seen.update(kwargs)

    monkeypatch.setattr(minisglang.engine, "Engine", FakeEngine)
    monkeypatch.setattr(minisglang.server, "serve", lambda engine, **kw: 0)
    main(
        [
            "serve",
            "--mixed-prefill",
            "--torch-threads",
            "1",
            "--max-total-tokens",
            "4096",
            "--max-running-requests",
            "8",
            "--compile-timeout",
            "2.5",
            "--compile-usage-half-life",
            "0",
            "--chunked-prefill-size",
            "256",
            "--speculative-algorithm",
            "FORCED",
            "--speculative-num-draft-tokens",
            "6",
        ]
    )
    assert seen == {
        "model_path": None,
        "stage": None,
        "seed": 0,
        "mixed_prefill": True,
        "torch_threads": 1,
        "max_total_tokens": 4096,
        "max_running_requests": 8,
        "compile_timeout": 2.5,
        "compile_usage_half_life": 0.0,
        "chunked_prefill_size": 256,
        "speculative_algorithm": "FORCED",
        "speculative_num_draft_tokens": 6,
        # A server reserves SGLang's share of each request's remaining tokens (retraction.py).
        "new_token_ratio": 0.7,
        "min_new_token_ratio": pytest.approx(0.098),
    }
    seen.clear()
    main(["serve"])
    assert seen == {"model_path": None, "stage": None, "seed": 0, "new_token_ratio": 0.7, "min_new_token_ratio": 0.098}
    seen.clear()
    main(["serve", "--new-token-ratio", "1"])  # reserve everything, as the Engine does: never retract
    assert seen == {"model_path": None, "stage": None, "seed": 0, "new_token_ratio": 1.0}
    with pytest.raises(SystemExit):  # argparse names the flag and the bad value
        main(["serve", "--torch-threads", "two"])
    # a draft count without an algorithm would be read and do nothing (drafting is off): refused
    for command in (["serve"], ["generate", "hi"]):
        with pytest.raises(SystemExit, match="--speculative-num-draft-tokens needs --speculative-algorithm"):
            main([*command, "--speculative-num-draft-tokens", "3"])
