# The two jobs of the README, and the tiers a contributor runs (CONTRIBUTING.md).
# Each one sets up first (scripts/setup.sh is idempotent).
.PHONY: setup demo test test-fast test-stage check typecheck lint-and-tests

PYTEST = .venv/bin/python -m pytest
# Python may write its bytecode caches (some machines set PYTHONDONTWRITEBYTECODE=1, this one
# did): without them each pytest worker rewrote and compiled every test module's asserts again
# (a collection of the whole suite: 18.6 s against 12.0 s with the caches), and so did each
# subprocess, notebook kernel and graded run that imports them. (.gitignore keeps them out.)
unexport PYTHONDONTWRITEBYTECODE
RUFF = .venv/bin/ruff
MYPY = .venv/bin/mypy
LINT_IMPORTS = .venv/bin/lint-imports

# Both cores (three workers measured slower on 2 cores: 724 s against 665 s on 2026-12-07, each
# building its own fixtures). worksteal hands each worker half the tests in file order, then moves queued
# tests from the busy worker to the idle one: `--dist loadfile` kept each big file (nested
# gradings, notebooks, the conformance suite) on one worker while the other sat idle.
# A module's fixtures (an engine, a tokenizer) are built once on each worker that runs any of
# its tests. thread: a hung test ends its worker with every thread's stack, even inside C code
# or hypothesis's replay of a failing example, where pytest-timeout's signal cannot reach.
# faulthandler_timeout: a test still running after 120 s (the slowest take ~40 s quiet) prints every
# thread's stack and goes on: a rare slow run (s7's constrained generation once took 123 s and
# 187 s, never reproduced alone) then says where it waited.
PYTEST_CI = $(PYTEST) -n 2 --dist worksteal --timeout-method=thread --hypothesis-profile=ci --durations=20 \
	-o faulthandler_timeout=120

# What a contributor runs after each change (4,424 tests on 2026-12-05; timed on 2026-12-03, when it
# held 2,204 tests: 2 min 14 s on a quiet 2-core machine; 2,183 took 2 min 49 s with
# one other job beside it, load 1.3-3.1; 5 min 20 s when other jobs loaded it to 2.4-6.4): the
# unit tests of the automata, the exercises, the stages' own tests and the course text, on
# our own backend. Each test left out still runs in `make test`:
#   -m "not slow"                 the tests marked slow
#   -k "not llguidance ..."       the library backends' cases (xgrammar, outlines, llguidance)
#   test_autograder.py            nested gradings: a pytest run per task, stub and mutant
#   test_grade_zygote.py          graded runs forked from the zygote against fresh pytest processes
#   test_notebooks.py             every notebook in a fresh kernel
#   test_json_schema_conformance  the official JSON-Schema-Test-Suite; test_json_schema_maskbench
#   test_server*.py, test_cli.py  servers on loopback and `minisglang serve`/CLI processes
#   test_constrained_generation   whole generations on every stage (make test-stage runs a stage's)
#   test_reliability, test_mixed_prefill, test_radix_prefill   many requests through the engine
#   test_compile_bounds           runaway compiles stopped by their limits
#   test_model, test_tokenizer    our forward and tokenizers against transformers and the real vocabularies
#   test_dependencies             imports in fresh interpreters without the extras
#   test_corpus, test_train_resume, test_device_check, test_extraction_accuracy,
#   test_bench_tool_calls         the training corpus, scripts and benchmarks end to end
#   test_trace_browser            the step view's page in headless chromium
#   test_engine_script            plain scripts run in fresh interpreters
#   test_scheduler_faults         a fault at each hook, on two stages, against runs without it
FAST_SKIP = test_autograder.py test_grade_zygote.py test_notebooks.py test_json_schema_conformance.py test_json_schema_maskbench.py \
	test_server.py test_server_attack.py test_server_faults.py test_server_protocol.py test_server_tools.py \
	test_cli.py test_constrained_generation.py test_reliability.py test_mixed_prefill.py test_radix_prefill.py \
	test_compile_bounds.py test_model.py test_tokenizer.py test_dependencies.py test_corpus.py \
	test_train_resume.py test_device_check.py test_extraction_accuracy.py test_bench_tool_calls.py \
	test_trace_browser.py test_engine_script.py test_scheduler_faults.py

setup:
	bash scripts/setup.sh

# Constrained generation on the bundled model, with the unconstrained output beside it.
demo: setup
	.venv/bin/minisglang demo

# Lint, types and import layers (configured in pyproject.toml).
check: setup
	$(RUFF) check .
	$(RUFF) format --check .
	$(MYPY)
	$(LINT_IMPORTS)

# Every test: unit, per-stage behaviour, autograder honesty, notebooks, and `check`'s lint, types
# and import layers. CI runs this. The type check runs beside the tests (make -j2): on a fresh
# clone mypy's cold run is ~45 s of one core, and the run ends ~20 s sooner than one after the other.
test: setup
	$(MAKE) --no-print-directory -j2 typecheck lint-and-tests

typecheck:
	$(MYPY)

lint-and-tests:
	$(RUFF) check .
	$(RUFF) format --check .
	$(LINT_IMPORTS)
	$(PYTEST_CI)

test-fast: setup
	$(PYTEST) -n 2 --dist worksteal --timeout-method=thread --durations=10 -m "not slow" \
		-k "not llguidance and not xgrammar and not outlines" $(addprefix --ignore=tests/,$(FAST_SKIP))

# One stage's tests: its exercise tests, its behaviour tests (test_stage_$(S).py, where the
# stage has one), and its cases of the suites that every stage runs (tests/conftest.py's
# --stage keeps the cases whose parametrize id names the stage). make test-stage S=s4
STAGE_SUITES = tests/test_constrained_generation.py tests/test_stream_stop.py
test-stage: setup
	@case "$(S)" in s[1-7]) ;; *) echo "say which stage, s1 to s7: make test-stage S=s4"; exit 2;; esac
	$(PYTEST) -n 2 --dist worksteal --timeout-method=thread --durations=10 --stage=$(S) \
		$(wildcard tests/test_stage_$(S).py tests/test_stage_$(S)_*.py tests/test_exercises_$(S).py) $(STAGE_SUITES)
