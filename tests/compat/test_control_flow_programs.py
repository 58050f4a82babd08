"""Fluid 1.6-style control flow, written as Fluid users (and Fluid itself) wrote it: the
piecewise learning rate of ``layers.piecewise_decay`` by hand with ``Switch``, and the
array-summing ``While`` loop of Fluid's own while-op test, with only the import changed."""

import numpy as np

import parafluid as fluid
import parafluid.layers as layers


def _fit_a_line(hand_written_lr: bool):
    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = 4
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[13], dtype="float32")
        y = fluid.layers.data(name="y", shape=[1], dtype="float32")
        pred = fluid.layers.fc(input=x, size=1)
        avg_cost = fluid.layers.mean(fluid.layers.square_error_cost(input=pred, label=y))
        boundaries, values = [3, 6], [0.1, 0.05, 0.01]
        if hand_written_lr:
            global_step = fluid.layers.autoincreased_step_counter(
                counter_name="@LR_DECAY_COUNTER@", begin=0, step=1)
            global_step = fluid.layers.cast(global_step, "float32")
            lr = fluid.layers.create_global_var(shape=[1], value=0.0, dtype="float32",
                                                persistable=True, name="learning_rate")
            with fluid.layers.Switch() as switch:
                for i in range(len(boundaries)):
                    boundary_val = fluid.layers.fill_constant(
                        shape=[1], dtype="float32", value=float(boundaries[i]), force_cpu=True)
                    value_var = fluid.layers.fill_constant(shape=[1], dtype="float32",
                                                           value=float(values[i]))
                    with switch.case(global_step < boundary_val):  # as Fluid 1.6 wrote it
                        fluid.layers.assign(value_var, lr)
                last_value_var = fluid.layers.fill_constant(shape=[1], dtype="float32",
                                                            value=float(values[-1]))
                with switch.default():
                    fluid.layers.assign(last_value_var, lr)
        else:
            lr = fluid.layers.piecewise_decay(boundaries=boundaries, values=values)
        fluid.optimizer.SGD(learning_rate=lr).minimize(avg_cost)
    return main, startup, avg_cost, lr


def test_piecewise_decay_written_with_switch_trains_like_the_layer():
    rng = np.random.RandomState(0)
    xs = rng.uniform(-1, 1, (16, 13)).astype("float32")
    ys = (xs @ rng.uniform(-1, 1, (13, 1)) + 0.5).astype("float32")
    runs = []
    for hand_written in (True, False):
        main, startup, avg_cost, lr = _fit_a_line(hand_written)
        exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
        exe.run(startup, scope=scope)
        runs.append([exe.run(main, feed={"x": xs, "y": ys}, fetch_list=[avg_cost, lr],
                             scope=scope) for _ in range(8)])
    hand, layer = runs
    assert [round(float(r[1]), 6) for r in hand] == [0.1] * 3 + [0.05] * 3 + [0.01] * 2
    for a, b in zip(hand, layer):
        np.testing.assert_allclose(float(a[0]), float(b[0]), rtol=1e-6)
        np.testing.assert_allclose(float(a[1]), float(b[1]), rtol=1e-6)


def test_while_sums_an_array_as_fluids_while_op_test():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        d0 = layers.data("d0", shape=[10], append_batch_size=False, dtype="float32")
        d1 = layers.data("d1", shape=[10], append_batch_size=False, dtype="float32")
        d2 = layers.data("d2", shape=[10], append_batch_size=False, dtype="float32")
        for d in (d0, d1, d2):
            d.stop_gradient = False
        i = layers.zeros(shape=[1], dtype="int64")
        i.stop_gradient = True
        init = layers.zeros(shape=[10], dtype="float32")
        mem_array = layers.array_write(x=init, i=i)
        data_array = layers.array_write(x=d0, i=i)
        i = layers.increment(i)
        layers.array_write(d1, i, array=data_array)
        i = layers.increment(i)
        layers.array_write(d2, i, array=data_array)
        i = layers.zeros(shape=[1], dtype="int64")
        i.stop_gradient = True
        array_len = layers.fill_constant(shape=[1], dtype="int64", value=3)
        array_len.stop_gradient = True
        cond = layers.less_than(x=i, y=array_len)
        while_op = layers.While(cond=cond)
        with while_op.block():
            d = layers.array_read(array=data_array, i=i)
            prev = layers.array_read(array=mem_array, i=i)
            result = layers.sums(input=[d, prev])
            i = layers.increment(x=i, in_place=True)
            layers.array_write(result, i=i, array=mem_array)
            layers.less_than(x=i, y=array_len, cond=cond)
        sum_result = layers.array_read(array=mem_array, i=i)
        loss = layers.mean(sum_result)
        # (Fluid's test calls append_backward, which also differentiates the data; here
        # append_backward differentiates the parameters only, gradients() the data)
        fluid.backward.gradients([loss], [d0, d1, d2])
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    rng = np.random.RandomState(3)
    feed = {f"d{k}": rng.random_sample(10).astype("float32") for k in range(3)}
    out, avg, *grads = exe.run(main, feed=feed, fetch_list=[sum_result, loss, "d0@GRAD",
                                                              "d1@GRAD", "d2@GRAD"])
    want = feed["d0"] + feed["d1"] + feed["d2"]
    np.testing.assert_allclose(out, want, rtol=1e-6)
    np.testing.assert_allclose(float(avg), want.mean(), rtol=1e-6)
    # through the arrays and the loop: each input adds once to the mean of 10 values
    for g in grads:
        np.testing.assert_allclose(g, np.full(10, 0.1, "float32"), rtol=1e-6)
