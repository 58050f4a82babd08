"""Each test builds its programs in fresh default programs, scope and name counters."""

import os

# NOTE: one torch (OpenMP) thread per test process and per child, set before torch is
# imported: the suite runs three test processes on two cores, their children beside them,
# and the ops of its small programs take microseconds, so a second intra-op thread only
# spins waiting for a core (a table of pooling ops took 10x the CPU time with two). The
# tests that need more threads set them (the ParallelExecutor sets its workers' own).
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402

import parafluid as fluid  # noqa: E402
from parafluid import framework, unique_name  # noqa: E402
from parafluid.flags import flags_guard  # noqa: E402


@pytest.fixture(autouse=True)
def fresh_programs():
    main, startup = fluid.Program(), fluid.Program()
    old_main = framework.switch_main_program(main)
    old_startup = framework.switch_startup_program(startup)
    scope = fluid.Scope()
    with unique_name.guard(), fluid.scope_guard(scope), flags_guard():
        yield
    framework.switch_main_program(old_main)
    framework.switch_startup_program(old_startup)


def pytest_collection_modifyitems(config, items):
    """The multi-process and long tests (marked ``slow``) first, the rest in their order: a
    parallel run (``-n``) then starts the long ones at once and fills the workers' remaining
    time with the short ones, instead of ending on a long test that started last."""
    items[:] = sorted(items, key=lambda item: item.get_closest_marker("slow") is None)


def pytest_configure(config):
    """Python's own Ctrl-C handler in every test process: a test run started in the
    background by a shell (``pytest ... &``, nohup) inherits an ignored SIGINT, and Python
    then installs no handler of its own, so the tests of what a Ctrl-C does would see none."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread() and \
            signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
