"""End to end: small networks built from the nn/loss layers learn scikit-learn's digits.

The CNN uses conv2d + batch_norm + pool2d + fc + softmax_with_cross_entropy; the MLP uses
fc + layer_norm + dropout. Evaluation runs ``clone(for_test=True)`` so batch_norm uses its
moving statistics and dropout is off.
"""

import numpy as np
import pytest

import parafluid as fluid

datasets = pytest.importorskip("sklearn.datasets")


@pytest.fixture(scope="module")
def digits():
    data = datasets.load_digits()
    x = (data.images / 16.0).astype("float32")
    y = data.target.astype("int64").reshape(-1, 1)
    order = np.random.RandomState(0).permutation(len(x))
    x, y = x[order], y[order]
    n_train = 1400
    return x[:n_train], y[:n_train], x[n_train:], y[n_train:]


def _train(build, x_train, y_train, x_test, y_test, epochs, lr, batch=32, optimizer=None):
    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = 7
    with fluid.program_guard(main, startup):
        loss, acc = build()
        test_program = main.clone(for_test=True)
        (optimizer or fluid.optimizer.SGD(learning_rate=lr)).minimize(loss)
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    rng = np.random.RandomState(1)
    losses = []
    for _ in range(epochs):
        order = rng.permutation(len(x_train))
        for i in range(0, len(order) - batch + 1, batch):
            idx = order[i:i + batch]
            out, = exe.run(main, feed={"img": x_train[idx], "label": y_train[idx]},
                           fetch_list=[loss], scope=scope)
            losses.append(float(out[0]))
    test_acc, = exe.run(test_program, feed={"img": x_test, "label": y_test},
                        fetch_list=[acc], scope=scope)
    return main, test_program, scope, losses, float(test_acc[0])


def test_cnn_learns_digits(digits):
    x_train, y_train, x_test, y_test = digits

    def build():
        img = fluid.layers.data(name="img", shape=[1, 8, 8], dtype="float32")
        label = fluid.layers.data(name="label", shape=[1], dtype="int64")
        h = fluid.layers.conv2d(img, num_filters=16, filter_size=3, padding=1)
        h = fluid.layers.batch_norm(h)
        h = fluid.layers.pool2d(h, pool_size=2, pool_type="max", pool_stride=2)
        logits = fluid.layers.fc(h, size=10)
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, label))
        return loss, fluid.layers.accuracy(input=logits, label=label)

    main, test_program, scope, losses, acc = _train(
        build, x_train[:, None], y_train, x_test[:, None], y_test, epochs=6, lr=0.2)
    main.verify()
    assert np.mean(losses[-10:]) < 0.5 * np.mean(losses[:10])
    assert acc >= 0.95, acc
    bn = next(op for op in test_program.global_block().ops if op.type == "batch_norm")
    assert bn.attr("is_test") and not any(op.type.endswith("_grad")
                                          for op in test_program.global_block().ops)
    moving_mean = np.array(scope.find_var(bn.input("Mean")[0]).get_tensor())
    moving_var = np.array(scope.find_var(bn.input("Variance")[0]).get_tensor())
    assert moving_mean.shape == (16,) and np.abs(moving_mean).max() > 1e-3
    assert not np.allclose(moving_var, 1.0)


def test_mlp_learns_digits(digits):
    x_train, y_train, x_test, y_test = digits
    act = "relu"

    def build():
        img = fluid.layers.data(name="img", shape=[64], dtype="float32")
        label = fluid.layers.data(name="label", shape=[1], dtype="int64")
        h = fluid.layers.fc(img, size=64)
        h = fluid.layers.layer_norm(h, act=act)
        h = fluid.layers.dropout(h, dropout_prob=0.2,
                                 dropout_implementation="upscale_in_train")
        logits = fluid.layers.fc(h, size=10)
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, label))
        return loss, fluid.layers.accuracy(input=logits, label=label)

    _, test_program, _, losses, acc = _train(
        build, x_train.reshape(-1, 64), y_train, x_test.reshape(-1, 64), y_test,
        epochs=8, lr=0.1)
    assert np.mean(losses[-10:]) < 0.5 * np.mean(losses[:10])
    assert acc >= 0.95, acc
    drop = next(op for op in test_program.global_block().ops if op.type == "dropout")
    assert drop.attr("is_test")


@pytest.mark.parametrize("make_opt", [
    lambda: fluid.optimizer.SGD(learning_rate=0.1),
    lambda: fluid.optimizer.Momentum(learning_rate=0.05, momentum=0.9),
    lambda: fluid.optimizer.Adam(learning_rate=0.005),
], ids=["sgd", "momentum", "adam"])
def test_plain_mlp_learns_digits_with_each_optimizer(digits, make_opt):
    x_train, y_train, x_test, y_test = digits

    def build():
        img = fluid.layers.data(name="img", shape=[64], dtype="float32")
        label = fluid.layers.data(name="label", shape=[1], dtype="int64")
        h = fluid.layers.fc(img, size=64, act="relu")
        h = fluid.layers.fc(h, size=64, act="relu")
        logits = fluid.layers.fc(h, size=10)
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, label))
        return loss, fluid.layers.accuracy(input=logits, label=label)

    _, _, _, losses, acc = _train(build, x_train.reshape(-1, 64), y_train,
                                  x_test.reshape(-1, 64), y_test, epochs=8, lr=None,
                                  optimizer=make_opt())
    assert np.mean(losses[-10:]) < 0.2 * np.mean(losses[:10])
    assert acc >= 0.95, acc
