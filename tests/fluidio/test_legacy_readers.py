"""Legacy readers (py_reader, create_py_reader_by_data, read_file, double_buffer, the
non-iterable DataLoader) used the way Fluid 1.6's own tests and model zoos use them; the
specification is the same training fed batch by batch through ``feed=`` dicts."""

from __future__ import annotations

import numpy as np
import pytest

import parafluid as fluid

BATCH = 4


def _data(n_batches: int = 3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.RandomState(0)
    xs = rng.uniform(-1, 1, (n_batches * BATCH, 4)).astype("float32")
    ys = (xs.sum(1, keepdims=True) > 0).astype("int64")
    return xs, ys


def _samples(xs: np.ndarray, ys: np.ndarray):
    def reader():
        yield from zip(xs, ys)
    return reader


def _batches(xs: np.ndarray, ys: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    return [(xs[i:i + BATCH], ys[i:i + BATCH]) for i in range(0, len(xs), BATCH)]


def _network(x, y):
    h = fluid.layers.fc(input=x, size=8, act="relu")
    pred = fluid.layers.fc(input=h, size=2, act="softmax")
    loss = fluid.layers.mean(fluid.layers.cross_entropy(input=pred, label=y))
    fluid.optimizer.SGD(learning_rate=0.5).minimize(loss)
    return pred, loss


def _programs(kind: str, **kw):
    """(main, startup, loss, reader-or-loader, data vars) for one way of feeding."""
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 3
    reader = None
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        if kind == "feed":
            x = fluid.layers.data(name="x", shape=[4], dtype="float32")
            y = fluid.layers.data(name="y", shape=[1], dtype="int64")
        elif kind == "py_reader":
            reader = fluid.layers.py_reader(capacity=2, shapes=[(-1, 4), (-1, 1)],
                                            dtypes=["float32", "int64"], **kw)
            x, y = fluid.layers.read_file(reader)
        elif kind == "double_buffer":
            reader = fluid.layers.py_reader(capacity=2, shapes=[(-1, 4), (-1, 1)],
                                            dtypes=["float32", "int64"],
                                            use_double_buffer=False)
            reader = fluid.layers.double_buffer(reader, place=fluid.CPUPlace())
            x, y = fluid.layers.read_file(reader)
        elif kind == "by_data":
            x = fluid.layers.data(name="x", shape=[4], dtype="float32")
            y = fluid.layers.data(name="y", shape=[1], dtype="int64")
            reader = fluid.layers.create_py_reader_by_data(capacity=2, feed_list=[x, y])
            x, y = fluid.layers.read_file(reader)
        elif kind == "PyReader":
            x = fluid.layers.data(name="x", shape=[4], dtype="float32")
            y = fluid.layers.data(name="y", shape=[1], dtype="int64")
            reader = fluid.io.PyReader(feed_list=[x, y], capacity=2, iterable=False)
        elif kind == "loader":
            x = fluid.layers.data(name="x", shape=[4], dtype="float32")
            y = fluid.layers.data(name="y", shape=[1], dtype="int64")
            reader = fluid.io.DataLoader.from_generator(feed_list=[x, y], capacity=2,
                                                        iterable=False)
        else:
            raise AssertionError(kind)
        _, loss = _network(x, y)
    return main, startup, loss, reader, (x, y)


def _fed_training(batches, epochs: int = 2):
    """The oracle: the same network fed batch by batch; losses and final parameters."""
    main, startup, loss, _, _ = _programs("feed")
    scope, exe = fluid.Scope(), fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    losses = []
    for _ in range(epochs):
        for xb, yb in batches:
            out, = exe.run(main, feed={"x": xb, "y": yb}, fetch_list=[loss], scope=scope)
            losses.append(float(out[0]))
    return losses, _params(main, scope)


def _params(main, scope) -> dict[str, np.ndarray]:
    return {p.name: np.array(scope.find_var(p.name).get_tensor())
            for p in main.global_block().all_parameters()}


def _reader_training(main, startup, loss, reader, epochs: int = 2, program=None):
    """Fluid's loop: start(); run until EOFException; reset(). Losses per epoch."""
    scope, exe = fluid.Scope(), fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    per_epoch = []
    for _ in range(epochs):
        reader.start()
        losses = []
        try:
            while True:
                out, = exe.run(program or main, fetch_list=[loss], scope=scope)
                losses.append(float(np.mean(out)))
        except fluid.core.EOFException:
            reader.reset()
        per_epoch.append(losses)
    return per_epoch, _params(main, scope)


def _check_equal(per_epoch, params, batches, epochs: int = 2) -> None:
    want_losses, want_params = _fed_training(batches, epochs)
    assert [len(e) for e in per_epoch] == [len(batches)] * epochs
    np.testing.assert_allclose(sum(per_epoch, []), want_losses, rtol=1e-6, atol=1e-7)
    assert params.keys() == want_params.keys()
    for name in params:
        np.testing.assert_allclose(params[name], want_params[name], rtol=1e-6, atol=1e-7)


def test_py_reader_training_with_eof_and_reset_equals_dict_feeds():
    xs, ys = _data()
    main, startup, loss, reader, (x, y) = _programs("py_reader")
    reader.decorate_paddle_reader(fluid.io.batch(_samples(xs, ys), batch_size=BATCH))
    # as Fluid's: the double-buffered reader, then the read (create_py_reader: in startup)
    assert [op.type for op in main.global_block().ops][:2] == \
        ["create_double_buffer_reader", "read"]
    assert [op.type for op in startup.global_block().ops][-1] == "create_py_reader"
    main.verify()
    per_epoch, params = _reader_training(main, startup, loss, reader)
    _check_equal(per_epoch, params, _batches(xs, ys))


@pytest.mark.parametrize("how", ["sample_list", "tensor_provider", "batch_generator",
                                 "sample_generator"])
def test_py_reader_decorate_variants(how):
    xs, ys = _data()
    main, startup, loss, reader, _ = _programs("py_reader")
    if how == "sample_list":
        reader.decorate_sample_list_generator(fluid.io.batch(_samples(xs, ys), BATCH))
    elif how == "tensor_provider":
        def provider():
            buf_x, buf_y = np.empty((BATCH, 4), "float32"), np.empty((BATCH, 1), "int64")
            for xb, yb in _batches(xs, ys):
                buf_x[...], buf_y[...] = xb, yb  # one buffer reused: the reader must copy
                yield [buf_x, buf_y]
        reader.decorate_tensor_provider(provider)
    elif how == "batch_generator":
        reader.decorate_batch_generator(lambda: iter([list(b) for b in _batches(xs, ys)]))
    else:
        reader.decorate_sample_generator(_samples(xs, ys), batch_size=BATCH)
    per_epoch, params = _reader_training(main, startup, loss, reader)
    _check_equal(per_epoch, params, _batches(xs, ys))


def test_create_py_reader_by_data_reads_batches_shaped_like_the_feed_list():
    xs, ys = _data()
    main, startup, loss, reader, (x, y) = _programs("by_data")
    assert (list(x.shape), x.dtype, list(y.shape), y.dtype) == \
        ([-1, 4], "float32", [-1, 1], "int64")
    assert x.name not in ("x", "y") and x.stop_gradient
    reader.decorate_paddle_reader(fluid.io.batch(_samples(xs, ys), batch_size=BATCH))
    per_epoch, params = _reader_training(main, startup, loss, reader)
    _check_equal(per_epoch, params, _batches(xs, ys))


def test_double_buffer_reader_trains_the_same():
    xs, ys = _data()
    main, startup, loss, reader, _ = _programs("double_buffer")
    assert reader.use_double_buffer
    reader.decorate_paddle_reader(fluid.io.batch(_samples(xs, ys), batch_size=BATCH))
    per_epoch, params = _reader_training(main, startup, loss, reader)
    _check_equal(per_epoch, params, _batches(xs, ys))


def test_non_iterable_data_loader_start_reset_equals_dict_feeds():
    xs, ys = _data()
    main, startup, loss, loader, _ = _programs("loader")
    assert loader.iterable is False
    assert main.global_block().ops[0].type == "create_double_buffer_reader"
    assert main.global_block().ops[1].type == "read"
    assert main.global_block().ops[1].output("Out") == ["x", "y"]
    loader.set_sample_list_generator(fluid.io.batch(_samples(xs, ys), batch_size=BATCH))
    per_epoch, params = _reader_training(main, startup, loss, loader)
    _check_equal(per_epoch, params, _batches(xs, ys))
    with pytest.raises(RuntimeError, match="non-iterable"):
        iter(loader)


def test_non_iterable_pyreader_class_decorate_sample_generator():
    xs, ys = _data()
    main, startup, loss, reader, _ = _programs("PyReader")
    assert reader.iterable is False
    reader.decorate_sample_generator(_samples(xs, ys), batch_size=BATCH)
    per_epoch, params = _reader_training(main, startup, loss, reader)
    _check_equal(per_epoch, params, _batches(xs, ys))


def test_non_iterable_data_loader_batch_generator_and_test_program_clone():
    xs, ys = _data()
    main, startup, loss, loader, _ = _programs("loader")
    test_program = main.clone(for_test=True)  # as Fluid programs do: it reads the loader too
    loader.set_batch_generator(lambda: iter([[xb, yb] for xb, yb in _batches(xs, ys)]))
    per_epoch, params = _reader_training(main, startup, loss, loader, epochs=1)
    _check_equal(per_epoch, params, _batches(xs, ys), epochs=1)
    scope, exe = fluid.Scope(), fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    loader.start()
    first, = exe.run(test_program, fetch_list=[loss], scope=scope)
    loader.reset()
    fed = _programs("feed")
    exe.run(fed[1], scope=scope)
    want, = exe.run(fed[0].clone(for_test=True), feed={"x": xs[:BATCH], "y": ys[:BATCH]},
                    fetch_list=[fed[2]], scope=scope)
    np.testing.assert_allclose(first, want, rtol=1e-6)


def test_iterable_loader_is_iterable_and_refuses_start():
    x = fluid.layers.data(name="x", shape=[4], dtype="float32")
    loader = fluid.io.DataLoader.from_generator(feed_list=[x], capacity=2)
    assert loader.iterable is True
    with pytest.raises(RuntimeError, match="non-iterable"):
        loader.start()


def test_read_file_outputs_carry_shapes_dtypes_and_lod():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        reader = fluid.layers.py_reader(capacity=2, shapes=[(-1, 1), (-1, 3)],
                                        dtypes=["float32", "int32"], lod_levels=[1, 0])
        words, other = fluid.layers.read_file(reader)
        pooled = fluid.layers.sequence_pool(words, pool_type="sum")
    assert (list(words.shape), words.dtype, words.lod_level) == ([-1, 1], "float32", 1)
    assert (list(other.shape), other.dtype, other.lod_level) == ([-1, 3], "int32", 0)
    seq = fluid.create_lod_tensor(np.arange(6, dtype="float32").reshape(6, 1), [[2, 4]],
                                  fluid.CPUPlace())
    reader.decorate_tensor_provider(lambda: iter([[seq, np.zeros((2, 3), "int32")]]))
    exe = fluid.Executor(fluid.CPUPlace())
    reader.start()
    out, read_words = exe.run(main, fetch_list=[pooled, words], return_numpy=False)
    reader.reset()
    np.testing.assert_allclose(np.array(out), [[1.0], [14.0]])
    assert read_words.lod() == [[0, 2, 6]]


def test_read_after_eof_without_reset_raises_eof_again_and_reset_mid_epoch_restarts():
    xs, ys = _data()
    main, startup, loss, reader, _ = _programs("py_reader")
    reader.decorate_paddle_reader(fluid.io.batch(_samples(xs, ys), batch_size=BATCH))
    scope, exe = fluid.Scope(), fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    reader.start()
    exe.run(main, fetch_list=[loss], scope=scope)
    reader.reset()  # abandon the epoch after one batch
    reader.start()
    steps = 0
    with pytest.raises(fluid.core.EOFException):
        while True:
            exe.run(main, fetch_list=[loss], scope=scope)
            steps += 1
    assert steps == 3  # the new epoch began with the first batch again
    with pytest.raises(fluid.core.EOFException):
        exe.run(main, fetch_list=[loss], scope=scope)
    reader.reset()


def test_reader_misuse_gives_clear_errors():
    xs, ys = _data()
    main, startup, loss, reader, _ = _programs("py_reader")
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    with pytest.raises(RuntimeError, match="no data source"):
        reader.start()
    reader.decorate_paddle_reader(fluid.io.batch(_samples(xs, ys), batch_size=BATCH))
    with pytest.raises(RuntimeError, match=r"before start\(\)"):
        exe.run(main, fetch_list=[loss])
    reader.start()
    with pytest.raises(RuntimeError, match="already started"):
        reader.start()
    reader.reset()
    with pytest.raises(TypeError, match="not its result"):
        reader.decorate_paddle_reader(fluid.io.batch(_samples(xs, ys), BATCH)())
    # a batch of the wrong dtype: the error names the reader, the batch and the field
    reader.decorate_tensor_provider(lambda: iter([[xs[:4].astype("float64"), ys[:4]]]))
    reader.start()
    with pytest.raises(Exception, match=r"batch 0, field .*field_0.*float32.*float64"):
        exe.run(main, fetch_list=[loss])
    reader.reset()

    def failing():
        yield [xs[:4], ys[:4]]
        raise OSError("disk gone")

    reader.decorate_tensor_provider(failing)
    reader.start()
    exe.run(main, fetch_list=[loss])
    with pytest.raises(Exception, match="disk gone"):
        exe.run(main, fetch_list=[loss])
    reader.reset()
    # a program carried to another process would name a reader this process does not have
    stranger = main.clone()
    next(op for op in stranger.global_block().ops if op.type == "read"
         ).attrs["reader_name"] = "reader_of_another_process"
    reader.decorate_tensor_provider(lambda: iter([[xs[:4], ys[:4]]]))
    reader.start()
    with pytest.raises(Exception, match="runs only in the process that built it"):
        exe.run(stranger, fetch_list=[loss])
    reader.reset()
    with pytest.raises(ValueError, match="one dtype per shape"):
        fluid.layers.py_reader(capacity=2, shapes=[(-1, 4)], dtypes=["float32", "int64"])
    with pytest.raises(TypeError, match="read_file"):
        fluid.layers.read_file("reader")


def test_read_op_survives_pruning_and_is_left_out_of_inference_models(tmp_path):
    from parafluid.passes.prune import eliminate_dead_code

    xs, ys = _data()
    main, startup, loss, reader, (x, y) = _programs("py_reader")
    assert "read" in [op.type for op in eliminate_dead_code(main, [loss]).global_block().ops]
    reader.decorate_paddle_reader(fluid.io.batch(_samples(xs, ys), batch_size=BATCH))
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    reader.start()
    exe.run(main, fetch_list=[loss])
    reader.reset()
    pred = next(op for op in main.global_block().ops if op.type == "softmax").output("Out")[0]
    fluid.io.save_inference_model(str(tmp_path), [x.name], [main.global_block().var(pred)],
                                  exe, main_program=main)
    program, feeds, fetches = fluid.io.load_inference_model(str(tmp_path), exe)
    assert "read" not in [op.type for op in program.global_block().ops]
    out, = exe.run(program, feed={feeds[0]: xs[:2]}, fetch_list=fetches)
    assert out.shape == (2, 2)


@pytest.mark.parametrize("kind", ["py_reader", "loader"])
def test_parallel_executor_reader_gives_each_device_its_own_batch(kind, monkeypatch):
    """Two CPU devices: each step's devices take consecutive batches, so a step equals one
    Executor step on the two batches concatenated; 5 batches make 2 steps (the odd one is
    dropped) per epoch."""
    xs, ys = _data(n_batches=5)
    batches = _batches(xs, ys)
    main, startup, loss, reader, _ = _programs(kind)
    if kind == "loader":
        reader.set_sample_list_generator(fluid.io.batch(_samples(xs, ys), batch_size=BATCH))
    else:
        reader.decorate_paddle_reader(fluid.io.batch(_samples(xs, ys), batch_size=BATCH))
    compiled = fluid.CompiledProgram(main).with_data_parallel(
        loss_name=loss.name, places=fluid.cpu_places(2))
    per_epoch, params = _reader_training(main, startup, loss, reader, program=compiled)
    merged = [(np.concatenate([batches[i][0], batches[i + 1][0]]),
               np.concatenate([batches[i][1], batches[i + 1][1]])) for i in (0, 2)]
    want_losses, want_params = _fed_training(merged)
    assert [len(e) for e in per_epoch] == [2, 2]
    # equal halves: the mean of the two devices' losses is the loss of the whole batch
    np.testing.assert_allclose(sum(per_epoch, []), want_losses, rtol=1e-5)
    for name in want_params:
        np.testing.assert_allclose(params[name], want_params[name], rtol=1e-5, atol=1e-6)


def test_parallel_executor_class_with_py_reader():
    xs, ys = _data(n_batches=4)
    batches = _batches(xs, ys)
    main, startup, loss, reader, (x, _) = _programs("py_reader")
    reader.decorate_paddle_reader(fluid.io.batch(_samples(xs, ys), batch_size=BATCH))
    scope = fluid.Scope()
    fluid.Executor(fluid.CPUPlace()).run(startup, scope=scope)
    pe = fluid.ParallelExecutor(use_cuda=False, loss_name=loss.name, main_program=main,
                                scope=scope, places=fluid.cpu_places(2))
    reader.start()
    losses = []
    try:
        while True:
            out, read = pe.run(fetch_list=[loss.name, x.name])
            assert out.shape == (2,)
            step = len(losses)
            # device 0 read batch 2k, device 1 batch 2k + 1 (merged in device order)
            np.testing.assert_array_equal(read, np.concatenate([batches[2 * step][0],
                                                                batches[2 * step + 1][0]]))
            losses.append(float(np.mean(out)))
    except fluid.core.EOFException:
        reader.reset()
    pe.close()
    merged = [(np.concatenate([batches[i][0], batches[i + 1][0]]),
               np.concatenate([batches[i][1], batches[i + 1][1]])) for i in (0, 2)]
    want, _ = _fed_training(merged, epochs=1)
    np.testing.assert_allclose(losses, want, rtol=1e-5)


def test_iterable_loader_with_places_yields_one_feed_per_place_for_compiled_program():
    xs, ys = _data(n_batches=4)
    batches = _batches(xs, ys)
    main, startup, loss, _, (x, y) = _programs("feed")
    loader = fluid.io.DataLoader.from_generator(feed_list=[x, y], capacity=2)
    loader.set_sample_list_generator(fluid.io.batch(_samples(xs, ys), batch_size=BATCH),
                                     places=fluid.cpu_places(2))
    scope, exe = fluid.Scope(), fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    compiled = fluid.CompiledProgram(main).with_data_parallel(
        loss_name=loss.name, places=fluid.cpu_places(2))
    losses = []
    for feed in loader():
        assert isinstance(feed, list) and len(feed) == 2 and set(feed[0]) == {"x", "y"}
        out, = exe.run(compiled, feed=feed, fetch_list=[loss], scope=scope)
        losses.append(float(np.mean(out)))
    merged = [(np.concatenate([batches[i][0], batches[i + 1][0]]),
               np.concatenate([batches[i][1], batches[i + 1][1]])) for i in (0, 2)]
    want, _ = _fed_training(merged, epochs=1)
    np.testing.assert_allclose(losses, want, rtol=1e-5)


def test_reset_does_not_hang_on_a_generator_stuck_in_next():
    import threading
    import time

    xs, ys = _data()
    main, startup, loss, reader, _ = _programs("py_reader")
    release = threading.Event()

    def stuck():
        yield [xs[:BATCH], ys[:BATCH]]
        release.wait(60)  # e.g. a network read that never returns
        yield [xs[:BATCH], ys[:BATCH]]

    reader.decorate_tensor_provider(stuck)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    reader.start()
    exe.run(main, fetch_list=[loss])
    producer = reader._thread
    begin = time.monotonic()
    reader.reset()
    assert time.monotonic() - begin < 10
    # the next epoch has a queue of its own: the stuck producer's late batch never lands in it
    reader.decorate_tensor_provider(lambda: iter([[xs[:BATCH], ys[:BATCH]]]))
    reader.start()
    release.set()
    exe.run(main, fetch_list=[loss])
    with pytest.raises(fluid.core.EOFException):
        exe.run(main, fetch_list=[loss])
    reader.reset()
    producer.join(timeout=10)
    assert not producer.is_alive()


@pytest.mark.parametrize("parallel", [False, True])
def test_queue_pushed_from_a_thread_as_fluid_tests_do(parallel):
    """Fluid's own py_reader tests push LoDTensors into ``reader.queue`` from a thread of
    their own and close it at the end; every pushed batch comes out of the program."""
    import threading

    xs, ys = _data(n_batches=4)
    batches = _batches(xs, ys)
    main, startup, loss, reader, (x, y) = _programs("by_data")
    feed_queue = reader.queue
    assert feed_queue.capacity() == 2

    def as_tensor(array):
        t = fluid.LoDTensor()
        t.set(array, fluid.CPUPlace())
        return t

    def feed_data():
        for xb, yb in batches:
            if not feed_queue.push([as_tensor(xb), as_tensor(yb)]):
                break
        feed_queue.close()

    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    program = fluid.CompiledProgram(main).with_data_parallel(
        loss_name=loss.name, places=fluid.cpu_places(2)) if parallel else main
    thread = threading.Thread(target=feed_data, daemon=True)
    thread.start()
    outputs = []
    try:
        while True:
            outputs.append(exe.run(program, fetch_list=[x.name, y.name]))
    except fluid.core.EOFException:
        pass
    feed_queue.close()
    thread.join(timeout=10)
    assert not thread.is_alive() and feed_queue.is_closed() and reader.exited
    per_step = 2 if parallel else 1
    assert len(outputs) == len(batches) // per_step
    for i, (got_x, got_y) in enumerate(outputs):
        want = batches[i * per_step:(i + 1) * per_step]
        np.testing.assert_array_equal(got_x, np.concatenate([b[0] for b in want]))
        np.testing.assert_array_equal(got_y, np.concatenate([b[1] for b in want]))
    reader.reset()
    assert not feed_queue.is_closed()  # reopened, empty, for the next epoch
    assert feed_queue.size() == 0
