"""Each test builds its programs in fresh default programs, scope and name counters."""

import pytest

import parafluid as fluid
from parafluid import framework, unique_name
from parafluid.flags import flags_guard


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
