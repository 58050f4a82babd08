"""The allocator settings parafluid applies at import (and the opt-out)."""

import os
import subprocess
import sys

import pytest


def _tuned(env_value):
    code = "import parafluid._malloc as m; print(m.TUNED)"
    env = {"PARAFLUID_TUNE_MALLOC": env_value} if env_value is not None else {}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, **env}, check=True)
    return out.stdout.strip()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc mallopt")
def test_tuned_on_linux_and_opt_out():
    assert _tuned(None) == "True"
    assert _tuned("0") == "False"
