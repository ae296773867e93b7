"""The autograder's plausible wrong solutions: the mistakes students make, one entry each,
in one file per exercise sheet (s1.py ... s7.py).

tests/test_autograder.py checks that each one fails its task's tests on a fixed input;
scripts/mutant_reruns.py reruns them with fresh hypothesis seeds. A stranger's mistake that
passed the grader is added here, with the test that now catches it.
"""

# (task, the mistake, text of the reference region as `minisglang solutions` prints it,
# what the student wrote instead). Each one must fail the task's tests on a fixed input: a
# plain test, a parametrized case or a property test's explicit `@example`.

from . import s1, s2, s3, s4, s5, s6, s7

MUTATIONS = s1.MUTATIONS + s2.MUTATIONS + s3.MUTATIONS + s4.MUTATIONS + s5.MUTATIONS + s6.MUTATIONS + s7.MUTATIONS
