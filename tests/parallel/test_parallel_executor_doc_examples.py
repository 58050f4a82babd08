"""The code examples of Fluid's Parallel Executor API guide and of its ParallelExecutor and
ExecutionStrategy API references run as written (import line and use_cuda changed), with
CPU_NUM=2."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

import parafluid as fluid

pytestmark = pytest.mark.timeout(60)


def run_example(code: str, preamble: str = "") -> dict:
    code = textwrap.dedent(code).replace("import paddle.fluid as fluid",
                                         "import parafluid as fluid")
    namespace: dict = {}
    exec(compile(textwrap.dedent(preamble) + code, "<fluid doc example>", "exec"), namespace)
    return namespace


@pytest.fixture(autouse=True)
def cpu_num(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CPU_NUM", "2")  # the examples set it too; this restores it afterwards


API_GUIDE_PREAMBLE = """
    import numpy
    import parafluid as fluid
    use_cuda = False
    memory_opt = True
    dev_count = 2
    train_program = fluid.Program()
    with fluid.program_guard(train_program, fluid.default_startup_program()):
        x = fluid.layers.data(name='X', shape=[1], dtype='float32')
        hidden = fluid.layers.fc(input=x, size=10)
        loss = fluid.layers.mean(hidden)
        test_program = train_program.clone(for_test=True)
        fluid.optimizer.SGD(learning_rate=0.01).minimize(loss)
    feed_dict = {"X": numpy.random.random(size=(10, 1)).astype('float32')}
"""

API_GUIDE = """
    # First create the Executor.
    place = fluid.CUDAPlace(0) if use_cuda else fluid.CPUPlace()
    exe = fluid.Executor(place)

    # Run the startup program once and only once.
    exe.run(fluid.default_startup_program())

    # Define train_exe and test_exe
    exec_strategy = fluid.ExecutionStrategy()
    exec_strategy.num_threads = dev_count * 4 # the size of thread pool.
    build_strategy = fluid.BuildStrategy()
    build_strategy.memory_optimize = True if memory_opt else False

    train_exe = fluid.ParallelExecutor(use_cuda=use_cuda,
                                       main_program=train_program,
                                       build_strategy=build_strategy,
                                       exec_strategy=exec_strategy,
                                       loss_name=loss.name)
    # NOTE: loss_name is unnecessary for test_exe.
    test_exe = fluid.ParallelExecutor(use_cuda=False,
                                      main_program=test_program,
                                      build_strategy=build_strategy,
                                      exec_strategy=exec_strategy,
                                      share_vars_from=train_exe)

    train_loss, = train_exe.run(fetch_list=[loss.name], feed=feed_dict)
    test_loss, = test_exe.run(fetch_list=[loss.name], feed=feed_dict)
"""


def test_parallel_executor_api_guide_example() -> None:
    ns = run_example(API_GUIDE, API_GUIDE_PREAMBLE)
    assert ns["train_loss"].shape == (2,) and ns["test_loss"].shape == (2,)
    assert ns["train_exe"].device_count == 2
    # the test executor ran on the parameters after the training step
    assert not np.allclose(ns["train_loss"], ns["test_loss"])


REFERENCE_SHARE_VARS_FROM = """
    import paddle.fluid as fluid
    import numpy
    import os

    use_cuda = False
    place = fluid.CUDAPlace(0) if use_cuda else fluid.CPUPlace()

    # 注意：如果你使用CPU运行程序，需要具体设置CPU_NUM，
    # 否则fluid会把逻辑核的所有数目设为CPU_NUM，
    # 在这种情况下，输入的batch size应大于CPU_NUM，
    # 否则程序会异常中断。
    if not use_cuda:
        os.environ['CPU_NUM'] = str(2)

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

    train_exe = fluid.ParallelExecutor(use_cuda=use_cuda,
                                       main_program=train_program,
                                       loss_name=loss.name)
    # 注意：如果此处不设置share_vars_from=train_exe，测试过程中用的参数与训练使用的参数是不一致
    test_exe = fluid.ParallelExecutor(use_cuda=use_cuda,
                                      main_program=test_program,
                                      share_vars_from=train_exe)

    train_data = numpy.random.random(size=(10, 1)).astype('float32')
    loss_data, = train_exe.run(feed={"X": train_data},
                               fetch_list=[loss.name])

    test_data = numpy.random.random(size=(10, 1)).astype('float32')
    loss_data, = test_exe.run(feed={"X": test_data},
                              fetch_list=[loss.name])
"""

REFERENCE_RUN = """
    import paddle.fluid as fluid
    import numpy
    import os

    use_cuda = False
    place = fluid.CUDAPlace(0) if use_cuda else fluid.CPUPlace()

    if not use_cuda:
        os.environ['CPU_NUM'] = str(2)
    exe = fluid.Executor(place)

    train_program = fluid.Program()
    startup_program = fluid.Program()
    with fluid.program_guard(train_program, startup_program):
        data = fluid.layers.data(name='X', shape=[1], dtype='float32')
        hidden = fluid.layers.fc(input=data, size=10)
        loss = fluid.layers.mean(hidden)
        fluid.optimizer.SGD(learning_rate=0.01).minimize(loss)

        exe.run(startup_program)

        train_exe = fluid.ParallelExecutor(use_cuda=use_cuda,
                                           main_program=train_program,
                                           loss_name=loss.name)
    # 如果feed参数是dict类型:
    # 图像会被split到设备中。假设有两个设备，那么每个设备将会处理形为 (5, 1)的图像
    x = numpy.random.random(size=(10, 1)).astype('float32')
    loss_data, = train_exe.run(feed={"X": x},
                               fetch_list=[loss.name])

    # 如果feed参数是list类型:
    # 各设备挨个处理列表中的每个元素
    # 第一个设备处理形为 (10, 1) 的图像
    # 第二个设备处理形为 (9, 1) 的图像
    #
    # 使用 exe.device_count 得到设备数目
    x1 = numpy.random.random(size=(10, 1)).astype('float32')
    x2 = numpy.random.random(size=(9, 1)).astype('float32')
    loss_data, = train_exe.run(feed=[{"X": x1}, {"X": x2}],
                               fetch_list=[loss.name])
"""

REFERENCE_DROP_LOCAL_EXE_SCOPES = """
    import paddle.fluid as fluid
    import numpy
    import os

    use_cuda = False
    if not use_cuda:
        os.environ['CPU_NUM'] = str(2)

    train_program = fluid.Program()
    startup_program = fluid.Program()
    with fluid.program_guard(train_program, startup_program):
        data = fluid.layers.data(name='X', shape=[1], dtype='float32')
        hidden = fluid.layers.fc(input=data, size=10)
        loss = fluid.layers.mean(hidden)

    place = fluid.CUDAPlace(0) if use_cuda else fluid.CPUPlace()
    exe = fluid.Executor(place)
    exe.run(startup_program)

    parallel_exe = fluid.ParallelExecutor(use_cuda=use_cuda,
                                       main_program=train_program,
                                       loss_name=loss.name)

    x = numpy.random.random(size=(10, 1)).astype('float32')
    loss_data, = parallel_exe.run(feed={"X": x},
                               fetch_list=[loss.name])

    parallel_exe.drop_local_exe_scopes()
"""


def test_parallel_executor_reference_share_vars_from() -> None:
    ns = run_example(REFERENCE_SHARE_VARS_FROM)
    assert ns["loss_data"].shape == (2,)


def test_parallel_executor_reference_run_with_dict_and_list_feeds() -> None:
    ns = run_example(REFERENCE_RUN)
    assert ns["loss_data"].shape == (2,) and ns["train_exe"].device_count == 2


def test_parallel_executor_reference_drop_local_exe_scopes() -> None:
    ns = run_example(REFERENCE_DROP_LOCAL_EXE_SCOPES)
    assert ns["loss_data"].shape == (2,)
    assert ns["parallel_exe"]._scopes.local_scopes == [None, None]


EXECUTION_STRATEGY_REFERENCE = """
    import paddle.fluid as fluid
    x = fluid.layers.data(name='x', shape=[13], dtype='float32')
    y = fluid.layers.data(name='y', shape=[1], dtype='float32')
    y_predict = fluid.layers.fc(input=x, size=1, act=None)

    cost = fluid.layers.square_error_cost(input=y_predict, label=y)
    avg_loss = fluid.layers.mean(cost)

    sgd_optimizer = fluid.optimizer.SGD(learning_rate=0.001)
    sgd_optimizer.minimize(avg_loss)

    exec_strategy = fluid.ExecutionStrategy()
    exec_strategy.num_threads = 4

    train_exe = fluid.ParallelExecutor(use_cuda=False,
                                       loss_name=avg_loss.name,
                                       exec_strategy=exec_strategy)
"""


def test_execution_strategy_reference_example() -> None:
    ns = run_example(EXECUTION_STRATEGY_REFERENCE)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(fluid.default_startup_program())
    rng = np.random.RandomState(0)
    loss, = ns["train_exe"].run(feed={"x": rng.rand(4, 13).astype("float32"),
                                      "y": rng.rand(4, 1).astype("float32")},
                                fetch_list=[ns["avg_loss"].name])
    assert loss.shape == (2,)


def test_docs_parallel_example_runs() -> None:
    import pathlib
    import re

    doc = pathlib.Path(__file__).parents[2] / "docs" / "parallel.md"
    code = re.findall(r"```python\n(.*?)```", doc.read_text(), re.S)[0]
    ns = run_example(code)
    assert ns["loss_per_device"].shape == (2,)
