"""Fluid 1.6's activation layers refuse a non-float input when the program is built."""

from __future__ import annotations

import pytest

import parafluid as fluid


@pytest.mark.parametrize("layer", ["sqrt", "exp", "tanh", "square", "softsign", "elu"])
def test_integer_input_is_refused_with_type_error(layer: str) -> None:
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = fluid.layers.data(name="x", shape=[3], dtype="int32")
        with pytest.raises(TypeError, match=layer):
            getattr(fluid.layers, layer)(x)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_float_input_is_accepted(dtype: str) -> None:
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = fluid.layers.data(name="x", shape=[3], dtype=dtype)
        assert fluid.layers.sqrt(x).dtype == x.dtype
        assert fluid.layers.elu(x).dtype == x.dtype


def test_relu_keeps_accepting_integer_input() -> None:
    # Fluid 1.6's relu layer has no such check; only the kernel decides.
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = fluid.layers.data(name="x", shape=[3], dtype="int32")
        fluid.layers.relu(x)
