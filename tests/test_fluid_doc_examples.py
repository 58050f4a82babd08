"""The Executor-only parts of the examples in Fluid's ParallelExecutor and ExecutionStrategy
API references, as written (import line aside).

Their ParallelExecutor parts run in tests/parallel/test_parallel_executor_doc_examples.py.
"""

import numpy

import parafluid as fluid


def test_parallel_executor_doc_program_building_clone_and_startup():
    # from the ParallelExecutor API reference: the program-building part, run with the Executor
    use_cuda = False
    place = fluid.CUDAPlace(0) if use_cuda else fluid.CPUPlace()
    exe = fluid.Executor(place)

    train_program = fluid.Program()
    startup_program = fluid.Program()
    with fluid.program_guard(train_program, startup_program):
        data = fluid.layers.data(name='X', shape=[1], dtype='float32')
        hidden = fluid.layers.fc(input=data, size=10)
        loss = fluid.layers.mean(hidden)
        test_program = fluid.default_main_program().clone(for_test=True)
        fluid.optimizer.SGD(learning_rate=0.01).minimize(loss)

    exe.run(startup_program)

    train_data = numpy.random.random(size=(10, 1)).astype('float32')
    loss_data, = exe.run(train_program, feed={"X": train_data}, fetch_list=[loss.name])
    test_data = numpy.random.random(size=(10, 1)).astype('float32')
    test_loss, = exe.run(test_program, feed={"X": test_data}, fetch_list=[loss.name])
    assert loss_data.shape == (1,) and test_loss.shape == (1,)
    assert [op.type for op in test_program.global_block().ops] == \
        ["mul", "elementwise_add", "mean"]


def test_execution_strategy_doc_model_trains_with_executor():
    # from the ExecutionStrategy API reference: the model, trained here with the Executor
    x = fluid.layers.data(name='x', shape=[13], dtype='float32')
    y = fluid.layers.data(name='y', shape=[1], dtype='float32')
    y_predict = fluid.layers.fc(input=x, size=1, act=None)

    cost = fluid.layers.square_error_cost(input=y_predict, label=y)
    avg_loss = fluid.layers.mean(cost)

    sgd_optimizer = fluid.optimizer.SGD(learning_rate=0.001)
    sgd_optimizer.minimize(avg_loss)

    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(fluid.default_startup_program())
    rng = numpy.random.RandomState(0)
    xs = rng.rand(20, 13).astype('float32')
    ys = xs.sum(axis=1, keepdims=True).astype('float32')
    losses = [exe.run(feed={'x': xs, 'y': ys}, fetch_list=[avg_loss])[0][0] for _ in range(30)]
    assert losses[-1] < losses[0]
