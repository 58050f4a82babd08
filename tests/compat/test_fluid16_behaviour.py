"""Fluid 1.x behaviour that real programs rely on: fetched values convert like numpy did in
Fluid's time, the whole program can be saved with save_inference_model, and dtype checks
wait until a kernel runs."""

from __future__ import annotations

import numpy as np
import pytest

import parafluid as fluid


def _classifier():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[4], dtype="float32")
        label = fluid.layers.data(name="label", shape=[1], dtype="int64")
        prob = fluid.layers.fc(x, 3, act="softmax")
        loss = fluid.layers.mean(fluid.layers.cross_entropy(prob, label))
        acc = fluid.layers.accuracy(prob, label)
        fluid.optimizer.SGD(0.1).minimize(loss)
    feed = {"x": np.random.RandomState(0).rand(6, 4).astype("float32"),
            "label": np.array([[0], [1], [2], [0], [1], [2]], "int64")}
    return main, startup, feed, prob, loss, acc


def test_fetched_values_rows_and_elements_convert_as_on_fluids_numpy():
    main, startup, feed, prob, loss, acc = _classifier()
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        loss_v, acc_v, prob_v = exe.run(main, feed=feed, fetch_list=[loss, acc, prob])
    # the lines Fluid 1.x programs print with
    text = "loss %.4f acc %.2f" % (loss_v, acc_v)  # noqa: UP031  (as Fluid programs write)
    assert text == f"loss {loss_v.item():.4f} acc {acc_v.item():.2f}"
    assert float(loss_v) == float(loss_v[0]) == loss_v.item() and int(acc_v) in (0, 1)
    column = prob_v[:, :1]                          # [6, 1]: each row is a [1] array
    assert float(column[2]) == prob_v[2, 0]
    assert "%.3f" % column[2] == f"{prob_v[2, 0]:.3f}"  # noqa: UP031
    assert [float(r) for r in column] == prob_v[:, 0].tolist()
    assert float(prob_v[1][2]) == prob_v[1, 2]      # an element
    with pytest.raises(TypeError, match="size-1 arrays"):
        float(prob_v[0])                            # three values: refused, as numpy did
    assert isinstance(prob_v * 2, np.ndarray) and np.allclose(prob_v.sum(1), 1.0)


def test_save_inference_model_saves_the_whole_program_with_empty_feeds_and_targets(tmp_path):
    main, startup, feed, prob, loss, acc = _classifier()
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        exe.run(main, feed=feed)
        names = fluid.io.save_inference_model(str(tmp_path), [], [], exe, main_program=main,
                                              export_for_deployment=False)
        weights = {p.name: np.array(fluid.global_scope().find_var(p.name).get_tensor())
                   for p in main.all_parameters()}
    assert names == []
    program, feeds, fetches = fluid.io.decode_model(
        (tmp_path / "__model__.main_program").read_bytes())
    assert (feeds, fetches) == ([], [])
    assert [op.type for op in program.global_block().ops] == \
        [op.type for op in main.global_block().ops]  # backward and sgd ops included
    tensors, _ = fluid.io.read_tensors(str(tmp_path / fluid.io.DEFAULT_FILENAME))
    assert set(weights) <= set(tensors)
    for name, value in weights.items():
        assert np.array_equal(tensors[name].numpy(), value)
    with pytest.raises(TypeError, match="non-empty list of Variables"):
        fluid.io.save_inference_model(str(tmp_path / "deploy"), ["x"], [], exe,
                                      main_program=main)


def test_a_float_label_builds_and_saves_and_running_it_is_the_error(tmp_path):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[4], dtype="float32")
        label = fluid.layers.data(name="label", shape=[1], dtype="float32")
        prob = fluid.layers.fc(x, 3, act="softmax")
        loss = fluid.layers.mean(fluid.layers.cross_entropy(prob, label))
        logits = fluid.layers.fc(x, 3)
        loss2 = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, label))
        fluid.optimizer.SGD(0.1).minimize(loss + loss2)
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        fluid.io.save_inference_model(str(tmp_path), ["x", "label"], [loss], exe,
                                      main_program=main)
        model, feeds, fetches = fluid.io.load_inference_model(str(tmp_path), exe)
        feed = {"x": np.ones((2, 4), "float32"), "label": np.zeros((2, 1), "float32")}
        for program, target in ((main, loss), (model, fetches[0])):
            with pytest.raises(fluid.OpRunError, match=r"(?s)op #\d+ cross_entropy2 .*Label "
                               r"must be int64 class ids when soft_label=False, got float32"):
                exe.run(program, feed=feed, fetch_list=[target])
