"""The grader's zygote (minisglang/grade_zygote.py): a graded run forked from it starts as a
fresh `python -m pytest` would (the oracle: that fresh process, run beside it), and the
grader reads its end as it reads a Popen's."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from minisglang.grade_zygote import ZygoteRun, launch

PROBE = """
import json, os, sys

def test_probe():
    with open(os.environ["PROBE_OUT"], "w") as f:
        json.dump({
            "path": sys.path,
            "cwd": os.getcwd(),
            "env": os.environ.get("PROBE_VALUE"),
            "stdin": os.path.realpath("/proc/self/fd/0"),
            "session_leader": os.getsid(0) == os.getpid(),
            "reference_imported": "minisglang" in sys.modules,
        }, f)
    print("probe ran")
"""


def run(cmd, env, cwd, out, fresh: bool):
    if fresh:
        with open(out, "ab") as stream:
            proc = subprocess.Popen(
                cmd, env=env, cwd=cwd, stdout=stream, stderr=subprocess.STDOUT, start_new_session=True
            )
    else:
        proc = launch(cmd, env, cwd, out)
        assert isinstance(proc, ZygoteRun)
    return proc


@pytest.fixture
def probe(tmp_path):
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_probe.py").write_text(PROBE)
    (tmp_path / "lib").mkdir()
    return tmp_path


def test_a_forked_run_starts_as_a_fresh_python_m_pytest(probe):
    seen = {}
    for fresh in (True, False):
        out, result = probe / f"out-{fresh}.txt", probe / f"probe-{fresh}.json"
        out.write_text("")
        env = dict(
            os.environ, PROBE_OUT=str(result), PROBE_VALUE="graded", PYTHONPATH=f"{probe / 'lib'}{os.pathsep}rel"
        )
        cmd = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "tests/test_probe.py"]
        proc = run(cmd, env, probe, str(out), fresh)
        assert proc.wait() == 0, out.read_text()
        assert "probe ran" in out.read_text() and "1 passed" in out.read_text()
        seen[fresh] = json.loads(result.read_text())
    assert seen[False]["stdin"] == os.devnull  # (the fresh one's is the test runner's: not compared)
    seen[True]["stdin"] = os.devnull
    assert seen[False] == seen[True]
    assert seen[False]["session_leader"] and not seen[False]["reference_imported"]


# (body of a test, the status a fresh `python -m pytest` exits with: pytest's own codes, or
# os._exit's; a thread that is not a daemon is waited for at the end, as in any interpreter)
ENDINGS = [
    ("assert False", 1),
    ("import os; os._exit(7)", 7),
    ("raise KeyboardInterrupt", 2),
    ("import threading, time; threading.Thread(target=time.sleep, args=(0.5,)).start()", 0),
]


def test_a_forked_runs_exit_status_is_a_fresh_ones(tmp_path):
    for i, (body, status) in enumerate(ENDINGS):
        (tmp_path / f"test_end{i}.py").write_text(f"def test_end():\n    {body}\n")
        out = tmp_path / f"out{i}.txt"
        out.write_text("")
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"test_end{i}.py"]
        started = time.monotonic()
        assert run(cmd, dict(os.environ), tmp_path, str(out), fresh=False).wait() == status, (body, out.read_text())
        if "threading" in body:
            assert time.monotonic() - started >= 0.5


def test_a_killed_run_reads_as_killed(tmp_path):
    (tmp_path / "test_wait.py").write_text("import time\n\ndef test_wait():\n    time.sleep(60)\n")
    out = tmp_path / "out.txt"
    out.write_text("")
    proc = launch([sys.executable, "-m", "pytest", "-q", "test_wait.py"], dict(os.environ), tmp_path, str(out))
    assert proc.poll() is None
    os.killpg(proc.pid, signal.SIGKILL)  # (the grader kills a run's whole session)
    assert proc.wait() == -signal.SIGKILL and proc.poll() == -signal.SIGKILL


C_PROBE = """import json, os, sys
given = sys.stdin.read()
print(json.dumps({"path": sys.path, "cwd": os.getcwd(), "argv": sys.argv, "given": given,
                  "main": __name__, "session_leader": os.getsid(0) == os.getpid()}))
print("to stderr", file=sys.stderr)
sys.exit(3)
"""


def test_a_forked_c_run_starts_as_a_fresh_python_c(tmp_path):
    """The autograder's tests start their mutant runners as `python -c TEXT` with a job on
    stdin and JSON on stdout: forked, the run sees what a fresh `python -c` sees, reads the
    stdin file, keeps stdout and stderr apart and exits with sys.exit's status."""
    (tmp_path / "job.json").write_text('{"job": 1}')
    env = dict(os.environ, PYTHONPATH=f"{tmp_path / 'lib'}{os.pathsep}rel")
    seen = {}
    for fresh in (True, False):
        out, err = tmp_path / f"out-{fresh}", tmp_path / f"err-{fresh}"
        out.write_text("")
        err.write_text("")
        cmd = [sys.executable, "-c", C_PROBE]
        if fresh:
            with open(out, "ab") as o, open(err, "ab") as e, open(tmp_path / "job.json", "rb") as given:
                proc = subprocess.Popen(
                    cmd, env=env, cwd=tmp_path, stdin=given, stdout=o, stderr=e, start_new_session=True
                )
        else:
            proc = launch(cmd, env, tmp_path, str(out), str(err), str(tmp_path / "job.json"))
            assert isinstance(proc, ZygoteRun)
        assert proc.wait() == 3, err.read_text()
        assert err.read_text() == "to stderr\n"
        seen[fresh] = json.loads(out.read_text())
    assert seen[False] == seen[True] and seen[False]["given"] == '{"job": 1}'


def test_a_closed_zygote_ends_and_is_waited_for(tmp_path):
    """At the grader's exit the zygote is closed and waited for (its runs' CPU then counts in
    the grader's own, as a fresh process's does). It has served a run first: closed while still
    importing, a loaded machine can keep it past close's wait, and it is killed instead."""
    from minisglang.grade_zygote import Zygote

    zygote = Zygote()
    assert zygote.alive()
    for name in ("out", "err", "in"):
        (tmp_path / name).write_text("")
    run = zygote.start(["-c", "pass"], dict(os.environ), tmp_path, *(str(tmp_path / n) for n in ("out", "err", "in")))
    assert run.wait() == 0
    zygote.close()
    assert not zygote.alive() and zygote.proc.returncode == 0
