"""Shared test fixtures: where the real tokenizers and the bundled model live."""
from pathlib import Path

import pytest

import os
import sys

# `minisglang grade --impl DIR` puts DIR first on sys.path. An editable install of the
# reference also adds a finder that would quietly supply any subpackage missing from DIR
# (a student copy without `constrained/` graded as the reference): grading sees DIR only.
if os.environ.get("MINISGLANG_IMPL"):
    sys.meta_path[:] = [f for f in sys.meta_path if not (getattr(f, "__module__", "") or "").startswith("__editable__")]

import minisglang  # noqa: E402  (after the finder is gone)

REPO = Path(__file__).resolve().parents[1]
# Fetched by scripts/setup.sh (pip download --no-deps anthropic==0.3.11, then unzipped).
ANTHROPIC_TOKENIZER_JSON = REPO / ".cache" / "tokenizers" / "anthropic-0.3.11" / "tokenizer.json"
BUNDLED_MODEL_PATH = Path(minisglang.DEFAULT_MODEL_PATH)

# Tests assert behaviour, not speed: hypothesis's 200 ms per-example deadline failed
# test_radix_cache's match_len property at 215 ms on a loaded 2-core CI machine.
from hypothesis import Phase, settings  # noqa: E402

settings.register_profile("minisglang", deadline=None)
# Under `minisglang grade` a property test reports one failing example, with its own message:
# two distinct failures come back as an ExceptionGroup whose first line says only "Hypothesis
# found 2 distinct failures", and the grader shows a student that line.
# (Nor its "Explanation: these lines were always and only run by failing test cases".)
settings.register_profile("minisglang-grade", deadline=None, report_multiple_bugs=False,
                          phases=[p for p in Phase if p is not Phase.explain])
settings.load_profile("minisglang-grade" if os.environ.get("MINISGLANG_GRADE_EVENTS") else "minisglang")

# Under pytest-xdist each worker gets one core: two workers with two torch threads each
# would only fight over the machine's two cores.
if os.environ.get("PYTEST_XDIST_WORKER"):
    import torch

    torch.set_num_threads(1)

# `minisglang grade --impl DIR` puts DIR first on sys.path; make sure that is what we test.
_impl = os.environ.get("MINISGLANG_IMPL")
if _impl and not Path(minisglang.__file__).resolve().is_relative_to(Path(_impl).resolve()):
    raise RuntimeError(f"grading {_impl} but minisglang was imported from {minisglang.__file__}")


@pytest.fixture(scope="module")
def one_torch_thread():
    """One intra-op torch thread for a module whose tests count slots and check answers, not
    speed: two threads on a busy 2-core machine made them about 10x slower. Restored after."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def bundled_model_path() -> Path:
    return BUNDLED_MODEL_PATH


@pytest.fixture(scope="session")
def anthropic_tokenizer_json() -> Path:
    if not ANTHROPIC_TOKENIZER_JSON.exists():
        pytest.fail(f"{ANTHROPIC_TOKENIZER_JSON} is missing: run scripts/setup.sh first")
    return ANTHROPIC_TOKENIZER_JSON
