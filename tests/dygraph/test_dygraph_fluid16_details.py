"""Details of Fluid 1.6's imperative mode: persistable is fixed at creation, temporaries are
named from one key, FC passes is_test as is_test, and the FLAGS_dygraph_debug report."""

from __future__ import annotations

import numpy as np
import pytest

import parafluid as fluid
from parafluid import unique_name
from parafluid.dygraph import base
from parafluid.flags import flags_guard, set_flag

X = np.array([[1.0, 2.0], [3.0, 4.0]], dtype="float32")


def test_setting_persistable_on_an_imperative_variable_only_warns():
    with fluid.dygraph.guard():
        var = base.to_variable(X)
        assert var.persistable is False
        with pytest.warns(UserWarning, match="no use to set persistable in Dygraph Mode"):
            var.persistable = True
        assert var.persistable is False
    static = fluid.Program().global_block().create_var(name="v", shape=[1], dtype="float32")
    static.persistable = True  # a static variable's flag is the program's to set
    assert static.persistable is True


def test_imperative_temporaries_are_named_from_one_key():
    assert unique_name.generate_with_ignorable_key("relu_7.tmp").startswith("relu_7.tmp_")
    with fluid.dygraph.guard():
        first = fluid.layers.relu(base.to_variable(X)).name
        second = fluid.layers.relu(base.to_variable(X)).name
        assert (first, second) == ("tmp_0", "tmp_1")


def _steps(n: int) -> tuple[list[tuple[int, int, int]], set[str]]:
    counts = []
    with fluid.dygraph.guard():
        fc = fluid.dygraph.FC("fc", 3, is_test=False)
        for _ in range(n):
            out = fluid.layers.reduce_sum(fc(base.to_variable(X)))
            out.backward()
            fc.clear_gradients()
            counts.append(base._print_debug_msg(is_test=True))
        keys = set(unique_name._generator.ids)
    return counts, keys


def test_debug_report_counts_stay_level_over_steps_and_fc_names_its_ops_fc():
    with flags_guard():
        set_flag("FLAGS_dygraph_debug", True)
        counts, keys = _steps(4)
    assert all(c == counts[1] for c in counts[1:]), counts
    assert "tmp" in keys and not any(k.startswith("False") for k in keys)


def test_debug_report_is_off_without_the_flag():
    with flags_guard():
        set_flag("FLAGS_dygraph_debug", False)
        assert base._print_debug_msg(is_test=True) is None
