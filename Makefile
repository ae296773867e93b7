# The two jobs of the README. Each one sets up first (scripts/setup.sh is idempotent).
.PHONY: setup demo test

setup:
	bash scripts/setup.sh

# Constrained generation on the bundled model, with the unconstrained output beside it.
demo: setup
	.venv/bin/minisglang demo

# Every test: unit, per-stage behaviour, autograder honesty, notebooks.
test: setup
	.venv/bin/python -m pytest -n 2 --dist loadfile
