"""Shared test fixtures: where the real tokenizers and the bundled model live, and the bundled
model's tokenizer."""

import gc
import os
import sys
from pathlib import Path

import pytest

# `minisglang grade --impl DIR` puts DIR first on sys.path. An editable install of the
# reference also adds a finder that would quietly supply any subpackage missing from DIR
# (a student copy without `constrained/` graded as the reference): grading sees DIR only.
if os.environ.get("MINISGLANG_IMPL"):
    sys.meta_path[:] = [f for f in sys.meta_path if not (getattr(f, "__module__", "") or "").startswith("__editable__")]

import minisglang  # noqa: E402  (after the finder is gone)

# jsonschema's FormatChecker (the oracle of our string formats) checks "iri" only when
# rfc3987_syntax imports, and that import builds a parser: 4 s in every test process (both
# workers, every nested grading run of s5 and s6). We compile no iri format (FORMATS in
# constrained/json_schema/formats.py; test_json_schema checks the checker covers all of
# them), so the tests' jsonschema goes without it.
sys.modules.setdefault("rfc3987_syntax", None)

REPO = Path(__file__).resolve().parents[1]
# Fetched by scripts/setup.sh (pip download --no-deps anthropic==0.3.11, then unzipped).
ANTHROPIC_TOKENIZER_JSON = REPO / ".cache" / "tokenizers" / "anthropic-0.3.11" / "tokenizer.json"
BUNDLED_MODEL_PATH = Path(minisglang.DEFAULT_MODEL_PATH)

# Tests assert behaviour, not speed: hypothesis's 200 ms per-example deadline failed
# test_radix_cache's match_len property at 215 ms on a loaded 2-core CI machine.
from hypothesis import HealthCheck, Phase, settings  # noqa: E402

settings.register_profile("minisglang", deadline=None)
# Under `minisglang grade` a property test reports one failing example, with its own message:
# two distinct failures come back as an ExceptionGroup whose first line says only "Hypothesis
# found 2 distinct failures", and the grader shows a student that line.
# (Nor its "Explanation: these lines were always and only run by failing test cases".)
# And no example database: it was written into the graded copy (.hypothesis), so a copy's
# grade depended on the gradings before it and on a .hypothesis folder a student handed in
# (a stranger's wrong solution passed once, then failed five times running).
settings.register_profile(
    "minisglang-grade",
    deadline=None,
    report_multiple_bugs=False,
    phases=[p for p in Phase if p is not Phase.explain],
    database=None,
)
# CI's (`make test` passes --hypothesis-profile=ci): the same example counts, but each test's
# examples follow from its name (derandomize), so a red run is red again on a contributor's
# machine, and the failing example is printed as a blob that @reproduce_failure replays.
# too_slow measures data generation against the clock: on a loaded 2-core machine it fails
# tests whose data are fine (tests assert behaviour, not speed).
settings.register_profile(
    "ci", deadline=None, derandomize=True, database=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow]
)
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


@pytest.fixture(scope="module")
def tokenizer():
    """The bundled model's tokenizer, the one grammar_backends.backends_fixture builds its backends
    over (test_backends.py, test_<name>_backend.py, test_ignored_keywords.py). A module that
    defines its own `tokenizer` fixture uses that one."""
    from minisglang.tokenizer import Tokenizer

    return Tokenizer.from_pretrained(minisglang.DEFAULT_MODEL_PATH)


@pytest.fixture(scope="session")
def anthropic_tokenizer_json() -> Path:
    if not ANTHROPIC_TOKENIZER_JSON.exists():
        pytest.fail(f"{ANTHROPIC_TOKENIZER_JSON} is missing: run scripts/setup.sh first")
    return ANTHROPIC_TOKENIZER_JSON


def pytest_addoption(parser):
    parser.addoption(
        "--stage",
        metavar="S",
        help="run only stage S's tests among those collected (make test-stage "
        "S=s4): every test of test_stage_S.py and test_exercises_S.py, and the cases of other files "
        "whose parametrize id names S (s4-jump-forward, s4)",
    )


def pytest_collection_modifyitems(config, items):
    """`--stage S`: deselect what is not stage S's. An id is split at '-' so that a case such as
    `abcd-stops4-ab-cd-s5` is s5's, not s4's."""
    stage = config.getoption("--stage")
    if not stage:
        return
    own_files = {f"test_stage_{stage}", f"test_exercises_{stage}"}
    keep, drop = [], []
    for item in items:
        ids = item.callspec.id.split("-") if hasattr(item, "callspec") else []
        (keep if item.path.stem in own_files or stage in ids else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.hookimpl(wrapper=True)
def pytest_collection(session):
    """No full garbage collection while the tests are collected. Collecting the whole suite (each
    xdist worker does) imports torch, the libraries and 116 test modules, and the collector ran
    ~26 full (generation 2) passes over the growing heap meanwhile: 17 s of CPU with them, 11 s
    without. Generation 2's threshold is lifted until collection ends (one full pass then walks
    the heap once); the young generations are collected as usual, so a graded copy that builds
    cycles in a loop while it is imported has them freed, and the peak memory of a worker's
    collection is the same. (Nothing is frozen: test_gc_guard counts the frozen objects.)"""
    thresholds = gc.get_threshold()
    gc.set_threshold(thresholds[0], thresholds[1], 2**30)
    try:
        return (yield)
    finally:
        gc.set_threshold(*thresholds)
        # The one full pass now, not at a random moment of the first tests: test_gc_guard's
        # guard counted that pass as its own and found two freezes where its collect made one.
        gc.collect()
