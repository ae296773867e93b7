"""benchmarks/bench_compile.py: its seeded schema sample (`generate_schemas`) gives a valid
instance with every schema, and seed 16's sample (the one results/compile.md measured) is the
one it always was."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import jsonschema

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # it imports _results as top-level
import bench_compile  # noqa: E402


def test_every_drawn_schema_holds_its_instance():
    """A stranger (compiled_attack) found seed 40's 300-schema draw stopping with a ValidationError:
    a definition that refers to itself was made twice and the instance fit the one not kept."""
    pairs = bench_compile.generate_schemas(40, 300)
    assert len(pairs) == 300
    for schema, instance in pairs:
        jsonschema.validate(instance, schema)


def test_seed_16s_sample_is_unchanged():
    digest = hashlib.sha256(json.dumps(bench_compile.generate_schemas(16, 24)).encode()).hexdigest()[:12]
    assert digest == "6046fc404c39"
