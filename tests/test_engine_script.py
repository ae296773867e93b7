"""A plain script may create an Engine at its top level, with no `if __name__ == "__main__":`.

The compile workers (s3's regex workers, the schema worker for large schemas) start with
forkserver, which would re-run such a script in every worker (worker_start.py says why it
does not). Each script runs in a subprocess, as a student would run it, and must print its
answers and nothing on stderr but the model's loading bar."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import jsonschema
import pytest

REPO = Path(__file__).resolve().parents[1]

# A schema past IN_PROCESS_SCHEMA_CHARS (256 KiB, fsm_backend.py): the s5 fsm backend compiles
# it in a worker.
BIG_SCHEMA = {
    "type": "object",
    "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99}},
    "required": ["n"],
    "additionalProperties": False,
    "description": "x" * (260 * 1024),
}


def run_script(tmp_path: Path, body: str) -> subprocess.CompletedProcess:
    script = tmp_path / "plain.py"
    script.write_text(textwrap.dedent(body), encoding="utf-8")
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env
    )


def problems(stderr: str) -> list[str]:
    """stderr's lines other than the loading bar (tqdm writes carriage returns)."""
    lines = [part for line in stderr.splitlines() for part in line.split("\r")]
    return [line for line in lines if line.strip() and not line.lstrip().startswith("loading ")]


@pytest.mark.parametrize("stage", ["s3", "s4"])
def test_a_script_without_a_main_guard_compiles_regexes_in_workers(tmp_path, stage):
    out = run_script(
        tmp_path,
        f'''
        import minisglang as sgl
        print("top level runs", flush=True)      # once: a worker that re-ran the script would print it again
        engine = sgl.Engine(stage="{stage}")
        assert not engine.stage.service.broken   # the workers started: no fall-back to threads
        for regex in ["[A-Z][a-z]{{2,5}}", "(yes|no)", "[0-9]{{3}}"]:
            print(repr(engine.generate("Answer:", {{"regex": regex, "max_new_tokens": 8, "temperature": 0}})["text"]))
        engine.shutdown()
    ''',
    )
    assert out.returncode == 0, out.stderr
    assert problems(out.stderr) == [], out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "top level runs" and lines.count("top level runs") == 1, out.stdout
    for regex, line in zip(["[A-Z][a-z]{2,5}", "(yes|no)", "[0-9]{3}"], lines[1:], strict=True):
        assert re.fullmatch(regex, eval(line)), (regex, line)


def test_a_script_without_a_main_guard_compiles_a_large_schema_in_a_worker(tmp_path):
    (tmp_path / "schema.json").write_text(json.dumps(BIG_SCHEMA), encoding="utf-8")
    out = run_script(
        tmp_path,
        """
        import minisglang as sgl
        print("top level runs", flush=True)
        engine = sgl.Engine(stage="s5", grammar_backend="fsm")
        schema = open("schema.json", encoding="utf-8").read()
        print(engine.generate("JSON:", {"json_schema": schema, "max_new_tokens": 40, "temperature": 0})["text"])
        engine.shutdown()
    """,
    )
    assert out.returncode == 0, out.stderr
    assert problems(out.stderr) == [], out.stderr
    first, answer = out.stdout.splitlines()
    assert first == "top level runs"
    jsonschema.validate(json.loads(answer), BIG_SCHEMA)
