"""bench/cpu_burner.py, the load the suite's loaded runs are measured beside: it runs a
command a given number of times in a row, reports each run, and leaves no burner behind."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

BURNER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench",
                      "cpu_burner.py")


def _burn(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, BURNER, "--procs", "1", "--duty", "0.1", *args],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.timeout(90)
def test_repeat_runs_the_command_in_a_row_and_exits_with_the_first_failure(tmp_path):
    marks = tmp_path / "runs"
    # each run appends a line, the second one fails
    code = (f"import sys; f = open({str(marks)!r}, 'a'); f.write('x'); f.close(); "
            f"sys.exit(3 if len(open({str(marks)!r}).read()) == 2 else 0)")
    done = _burn("--seconds", "50", "--repeat", "3", "--", sys.executable, "-c", code)
    assert done.returncode == 3, done.stderr
    assert marks.read_text() == "xxx"  # a failed run does not stop the series
    runs = re.findall(r"run (\d) of 3: exit status (\d+), \d+ s, mean 1-minute load [\d.]+ "
                      r"\((\d+) samples\)", done.stderr)
    assert [(r, s) for r, s, _ in runs] == [("1", "0"), ("2", "3"), ("3", "0")], done.stderr
    assert all(int(n) >= 1 for _, _, n in runs)
    assert "cpu_burner: stopped" in done.stderr


def test_no_run_starts_after_the_time_limit():
    done = _burn("--seconds", "1", "--repeat", "5", "--", sys.executable, "-c",
                 "import time; time.sleep(1.5)")
    assert done.returncode == 124, done.stderr
    assert "run 1 of 5: exit status 0" in done.stderr
    assert "the time limit came before run 2" in done.stderr


def test_bad_arguments_are_refused_naming_them():
    done = _burn("--seconds", "5", "--repeat", "0", "--", sys.executable, "-c", "pass")
    assert done.returncode == 2
    assert "--repeat >= 1" in done.stderr and "got 1, 0.1, 5.0, 0" in done.stderr
