"""layers.Print: the print op passes its input on, prints it (and its gradient)."""

import numpy as np
import pytest

import parafluid as fluid


def _program(**kw):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[3], dtype="float32")
        h = fluid.layers.fc(x, size=2, param_attr=fluid.ParamAttr(
            initializer=fluid.initializer.Constant(0.5)))
        printed = fluid.layers.Print(h, message="hidden:", summarize=3, **kw)
        loss = fluid.layers.mean(printed)
        fluid.optimizer.SGD(0.1).minimize(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    return main, exe, scope, h, printed, loss


def test_print_shows_the_forward_value_and_the_gradient_and_passes_both_on(capsys):
    main, exe, scope, h, printed, loss = _program()
    xs = np.ones((2, 3), "float32")
    hv, pv = exe.run(main, feed={"x": xs}, fetch_list=[h, printed], scope=scope)
    np.testing.assert_array_equal(hv, pv)
    out = capsys.readouterr().out
    forward, backward = out.split("Variable: ")[1:]
    assert forward.startswith(f"{h.name}\n  - message: hidden:\n  - lod: {{}}\n"
                              "  - place: CPUPlace\n  - shape: [2, 2]\n  - layout: NCHW\n"
                              "  - dtype: float32\n  - data: [1.5 1.5 1.5]")
    assert backward.startswith(f"{printed.name}@GRAD\n") and "[0.25 0.25 0.25]" in backward
    # the gradient went through unchanged: the weights moved as without the print
    w = np.array(scope.find_var(main.global_block().all_parameters()[0].name).get_tensor())
    np.testing.assert_allclose(w, 0.5 - 0.1 * 0.25 * 2, rtol=1e-6)


def test_first_n_and_the_phase(capsys):
    main, exe, scope, *_ = _program(first_n=2, print_phase="forward")
    for _ in range(3):
        exe.run(main, feed={"x": np.ones((2, 3), "float32")}, scope=scope)
    out = capsys.readouterr().out
    assert out.count("Variable: ") == 2 and "@GRAD" not in out


def test_a_bad_phase_is_refused():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = fluid.layers.data(name="x", shape=[3], dtype="float32")
        with pytest.raises(ValueError, match="print_phase must be 'forward', 'backward' or"):
            fluid.layers.Print(x, print_phase="sideways")
