"""Fluid 1.6's imperative MNIST test model (its test_imperative_mnist.py: SimpleImgConvPool
and MNIST written with fluid.dygraph's Conv2D / Pool2D / FC and self.full_name() as their
name scopes), as its users wrote it, on scikit-learn's digits scaled to 28x28: the
imperative run equals the same classes built into a Program and run by the Executor, and
the loss falls."""

import numpy as np
import pytest

import parafluid as fluid
from parafluid.dygraph.base import to_variable
from parafluid.dygraph.nn import FC, Conv2D, Pool2D
from parafluid.optimizer import SGDOptimizer

BATCH_SIZE = 16
STEPS = 20


class SimpleImgConvPool(fluid.dygraph.Layer):
    def __init__(self, name_scope, num_filters, filter_size, pool_size, pool_stride,
                 pool_padding=0, pool_type='max', global_pooling=False, conv_stride=1,
                 conv_padding=0, conv_dilation=1, conv_groups=1, act=None, use_cudnn=False,
                 param_attr=None, bias_attr=None):
        super(SimpleImgConvPool, self).__init__(name_scope)  # noqa: UP008 (as Fluid wrote it)

        self._conv2d = Conv2D(self.full_name(), num_filters=num_filters,
                              filter_size=filter_size, stride=conv_stride,
                              padding=conv_padding, dilation=conv_dilation,
                              groups=conv_groups, param_attr=None, bias_attr=None,
                              act=act, use_cudnn=use_cudnn)

        self._pool2d = Pool2D(self.full_name(), pool_size=pool_size, pool_type=pool_type,
                              pool_stride=pool_stride, pool_padding=pool_padding,
                              global_pooling=global_pooling, use_cudnn=use_cudnn)

    def forward(self, inputs):
        x = self._conv2d(inputs)
        x = self._pool2d(x)
        return x


class MNIST(fluid.dygraph.Layer):
    def __init__(self, name_scope):
        super(MNIST, self).__init__(name_scope)  # noqa: UP008 (as Fluid wrote it)

        self._simple_img_conv_pool_1 = SimpleImgConvPool(self.full_name(), 20, 5, 2, 2,
                                                         act="relu")
        self._simple_img_conv_pool_2 = SimpleImgConvPool(self.full_name(), 50, 5, 2, 2,
                                                         act="relu")

        pool_2_shape = 50 * 4 * 4
        SIZE = 10
        scale = (2.0 / (pool_2_shape**2 * SIZE))**0.5
        self._fc = FC(self.full_name(), 10,
                      param_attr=fluid.param_attr.ParamAttr(
                          initializer=fluid.initializer.NormalInitializer(loc=0.0,
                                                                          scale=scale)),
                      act="softmax")

    def forward(self, inputs, label=None):
        x = self._simple_img_conv_pool_1(inputs)
        x = self._simple_img_conv_pool_2(x)
        x = self._fc(x)
        return x


def _batches():
    digits = pytest.importorskip("sklearn.datasets").load_digits()
    images = np.kron(digits.images / 16.0, np.ones((3, 3)))          # 8x8 -> 24x24
    images = np.pad(images, ((0, 0), (2, 2), (2, 2))).astype("float32")  # 28x28
    labels = digits.target.astype("int64")
    order = np.random.RandomState(0).permutation(len(images))
    for i in range(STEPS):
        idx = order[i * BATCH_SIZE:(i + 1) * BATCH_SIZE]
        yield images[idx].reshape(BATCH_SIZE, 1, 28, 28), labels[idx].reshape(BATCH_SIZE, 1)


def test_fluid_imperative_mnist_equals_its_program_and_trains():
    batches = list(_batches())

    # the static graph, as Fluid's test builds it
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        mnist = MNIST("mnist")
        sgd = SGDOptimizer(learning_rate=0.03)
        img = fluid.layers.data(name='pixel', shape=[1, 28, 28], dtype='float32')
        label = fluid.layers.data(name='label', shape=[1], dtype='int64')
        cost = mnist(img)
        loss = fluid.layers.cross_entropy(cost, label)
        avg_loss = fluid.layers.mean(loss)
        sgd.minimize(avg_loss)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    init = {p.name: np.array(scope.find_var(p.name).get_tensor())
            for p in mnist.parameters()}
    static_losses = []
    for x, y in batches:
        out, = exe.run(main, feed={"pixel": x, "label": y}, fetch_list=[avg_loss],
                       scope=scope)
        static_losses.append(out.item())
    static_params = {p.name: np.array(scope.find_var(p.name).get_tensor())
                     for p in mnist.parameters()}

    # the imperative run, as Fluid's test writes it, from the same initial parameters
    with fluid.dygraph.guard(), fluid.unique_name.guard():
        mnist = MNIST("mnist")
        sgd = SGDOptimizer(learning_rate=0.03)
        dy_losses = []
        for batch_id, (dy_x_data, y_data) in enumerate(batches):
            img = to_variable(dy_x_data)
            label = to_variable(y_data)
            label.stop_gradient = True

            cost = mnist(img)
            if batch_id == 0:
                mnist.load_dict(init)
                cost = mnist(img)
            loss = fluid.layers.cross_entropy(cost, label)
            avg_loss = fluid.layers.mean(loss)
            dy_losses.append(avg_loss.numpy().item())
            avg_loss.backward()
            sgd.minimize(avg_loss)
            mnist.clear_gradients()
        dy_params = {p.name: p.numpy() for p in mnist.parameters()}

    assert len(static_params) == 6 and sorted(dy_params) == sorted(static_params)
    np.testing.assert_allclose(dy_losses, static_losses, rtol=1e-4, atol=1e-5)
    for name, value in static_params.items():
        np.testing.assert_allclose(dy_params[name], value, rtol=1e-4, atol=1e-5, err_msg=name)
    assert np.mean(static_losses[-5:]) < 0.85 * static_losses[0]  # from ln(10) = 2.30
