"""The compiled build of the lazy automaton is the same program as the pure one
(minisglang/constrained/compiled_build.py, scripts/build_compiled.py).

Oracle: the pure-Python build. A child process per build compiles the same schemas at the
bundled vocabulary and walks a valid document of each; every step's mask, every state's
accepting bit and every refusal's message must be equal bit for bit. Without a compiled
build (no C compiler, or not built yet) that test is skipped, saying so; the rules that
decide which build runs are tested either way.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from minisglang.constrained import compiled_build

ROOT = Path(__file__).resolve().parents[1]

# The child: each schema's masks along its document, as sha256 digests, and refusals.
CHILD = r"""
import hashlib, json, sys
sys.path.insert(0, "benchmarks")
import minisglang
from minisglang.backends.base import InvalidGrammarObject, get_backend_class
from minisglang.constrained import compiled_build
from minisglang.tokenizer import Tokenizer
from bench_compile import STRESS, generate_schemas

tokenizer = Tokenizer.from_pretrained(minisglang.DEFAULT_MODEL_PATH)
width = tokenizer.vocab_size + 64
backend = get_backend_class("fsm")(tokenizer, width, automaton="lazy")
cases = generate_schemas(16, 12) + list(STRESS.values()) + [
    ({"type": "object", "properties": {"n": {"type": "string", "pattern": "^" + "[0-9]?" * 300 + "z$"}}},
     {"n": "1z"}),   # after a digit it nests too deeply: refused by name, mid-document
    ({"type": "string", "allOf": [{"pattern": "^[a-c]*a[a-c]{6}$"}, {"maxLength": 9}]}, "aaaaaaa"),
]
out = {"build": compiled_build.active.split(" ")[0], "schemas": []}
for schema, instance in cases:
    try:
        grammar = backend.compile("json_schema", json.dumps(schema))
    except Exception as e:
        out["schemas"].append(f"{type(e).__name__}: {e}")
        continue
    if isinstance(grammar, InvalidGrammarObject):
        out["schemas"].append(grammar.message)
        continue
    mask, steps = grammar.allocate_vocab_mask(width, 1), []
    for token_id in tokenizer.encode(json.dumps(instance, ensure_ascii=False)) + [None]:
        try:
            grammar.fill_vocab_mask(mask, 0)
            steps.append(hashlib.sha256(mask.numpy().tobytes()).hexdigest()[:16])
            if token_id is not None:
                grammar.accept_token(token_id)
        except Exception as e:   # (a limit met in generation, making a row or moving, ends the walk, with its message)
            steps.append(f"{type(e).__name__}: {e}")
            break
    out["schemas"].append(steps)
print(json.dumps(out))
"""


def _run(pure: bool) -> dict:
    env = {**os.environ, "MINISGLANG_PURE": "1" if pure else "0", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.slow
def test_the_compiled_build_gives_the_pure_builds_masks_bit_for_bit():
    os.environ.pop("MINISGLANG_PURE", None)
    if compiled_build._why_not() is not None:
        pytest.skip(f"no usable compiled build here: {compiled_build._why_not()}")
    compiled, pure = _run(pure=False), _run(pure=True)
    assert (compiled["build"], pure["build"]) == ("compiled", "pure")
    assert len(compiled["schemas"]) == len(pure["schemas"]) == 17
    for i, (a, b) in enumerate(zip(compiled["schemas"], pure["schemas"])):
        assert a == b, f"case {i}: the builds differ"
    walked = [s for s in pure["schemas"] if isinstance(s, list)]
    assert len(walked) >= 14 and sum(map(len, walked)) > 500  # most cases are walked, not refused
    assert "nests more deeply" in json.dumps(pure["schemas"][15])


def test_which_build_runs(monkeypatch, tmp_path):
    """MINISGLANG_PURE asks for pure Python; a missing, stale or foreign build is not used."""
    monkeypatch.setattr(compiled_build, "MANIFEST", tmp_path / "SOURCES")
    monkeypatch.setattr(compiled_build, "active", compiled_build.active)
    monkeypatch.delenv("MINISGLANG_PURE", raising=False)
    assert compiled_build._why_not().startswith("no compiled build")
    compiled_build.MANIFEST.write_text(compiled_build.manifest_text())
    assert compiled_build._why_not() is None
    monkeypatch.setenv("MINISGLANG_PURE", "1")
    assert compiled_build._why_not() == "MINISGLANG_PURE is set"
    monkeypatch.setenv("MINISGLANG_PURE", "0")
    assert compiled_build._why_not() is None
    # A source edited since the build: its sha256 no longer matches the manifest's.
    compiled_build.MANIFEST.write_text(compiled_build.manifest_text().replace(" lazy_regex\n", "0 lazy_regex\n"))
    assert compiled_build._why_not().startswith("the compiled build is stale")
    path: list[str] = []
    with pytest.warns(RuntimeWarning, match="stale"):
        compiled_build.use(path)
    assert path == [] and compiled_build.active.startswith("pure")


def test_a_stage_checkout_never_carries_the_compiled_build():
    """The build lives outside the package (the checkout copies the package): a student's
    edited lazy_regex.py is what their copy runs."""
    assert not compiled_build.BUILD_DIR.is_relative_to(compiled_build.SOURCE_DIR.parent)
