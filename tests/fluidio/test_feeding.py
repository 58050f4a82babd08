"""Readers, DataFeeder and DataLoader.from_generator."""

from __future__ import annotations

import gc
import random
import threading
import time

import numpy as np
import pytest

import parafluid as fluid
from parafluid.dataio.reader import ComposeNotAligned

from .conftest import Model


def _count(n: int):
    def reader():
        yield from range(n)
    return reader


# ---------------------------------------------------------------------- readers


def test_batch_groups_samples_and_keeps_or_drops_the_tail() -> None:
    assert list(fluid.batch(_count(7), 3)()) == [[0, 1, 2], [3, 4, 5], [6]]
    assert list(fluid.io.batch(_count(7), 3, drop_last=True)()) == [[0, 1, 2], [3, 4, 5]]
    assert list(fluid.io.batch(_count(6), 3)()) == [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        fluid.io.batch(_count(3), 0)
    with pytest.raises(TypeError, match="pass the function, not its result"):
        fluid.io.batch(_count(3)(), 2)


def test_reader_decorators() -> None:
    random.seed(3)
    out = list(fluid.io.shuffle(_count(10), buf_size=4)())
    assert sorted(out) == list(range(10)) and out != list(range(10))
    assert list(fluid.io.chain(_count(2), _count(3))()) == [0, 1, 0, 1, 2]
    assert list(fluid.io.firstn(_count(10), 3)()) == [0, 1, 2]
    assert list(fluid.io.map_readers(lambda a, b: a * b, _count(3), _count(3))()) == [0, 1, 4]
    assert list(fluid.io.compose(_count(2), _count(2))()) == [(0, 0), (1, 1)]
    with pytest.raises(ComposeNotAligned):
        list(fluid.io.compose(_count(2), _count(3))())
    assert list(fluid.io.compose(_count(2), _count(3), check_alignment=False)()) == \
        [(0, 0), (1, 1)]
    assert list(fluid.io.buffered(_count(50), 4)()) == list(range(50))


def test_buffered_reraises_the_reader_error() -> None:
    def bad():
        yield 1
        raise KeyError("broken sample")

    it = fluid.io.buffered(bad, 2)()
    assert next(it) == 1
    with pytest.raises(KeyError, match="broken sample"):
        next(it)


# ---------------------------------------------------------------------- DataFeeder


def _data_vars():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        img = fluid.layers.data(name="img", shape=[2, 3], dtype="float32")
        label = fluid.layers.data(name="label", shape=[1], dtype="int64")
    return main, img, label


def test_feeder_stacks_and_reshapes_per_variable() -> None:
    main, img, label = _data_vars()
    feeder = fluid.DataFeeder(feed_list=[img, "label"], place=fluid.CPUPlace(), program=main)
    feed = feeder.feed([(np.arange(6), 3), ([[1, 2, 3], [4, 5, 6]], 7)])
    assert feed["img"].dtype == np.float32 and feed["img"].shape == (2, 2, 3)
    np.testing.assert_array_equal(feed["img"][0], np.arange(6).reshape(2, 3))
    assert feed["label"].dtype == np.int64
    np.testing.assert_array_equal(feed["label"], [[3], [7]])


def test_feeder_errors_name_the_sample_and_variable() -> None:
    main, img, label = _data_vars()
    feeder = fluid.DataFeeder([img, label], fluid.CPUPlace(), program=main)
    with pytest.raises(ValueError, match=r"sample 1 has 1 fields but feed_list has 2 "
                                         r"variables \(img, label\)"):
        feeder.feed([(np.zeros(6), 1), (np.zeros(6),)])
    with pytest.raises(ValueError, match=r"sample 0, field 'img' has shape \[5\] \(5 elements\)"
                                         r" but the variable expects \[2, 3\]"):
        feeder.feed([(np.zeros(5), 1)])
    with pytest.raises(ValueError, match="sample 0, field 'label': cannot convert"):
        feeder.feed([(np.zeros(6), "seven")])
    with pytest.raises(ValueError, match="the minibatch is empty"):
        feeder.feed([])
    with pytest.raises(ValueError, match="'nope' is not a variable"):
        fluid.DataFeeder(["nope"], fluid.CPUPlace(), program=main)


def test_feeder_sequences_get_a_lod() -> None:
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        words = fluid.layers.data(name="words", shape=[1], dtype="int64", lod_level=1)
    feed = fluid.DataFeeder([words], fluid.CPUPlace(), program=main).feed([([1, 2, 3],),
                                                                            ([4, 5],)])
    tensor = feed["words"]
    assert tensor.lod() == [[0, 3, 5]]
    np.testing.assert_array_equal(np.array(tensor), [[1], [2], [3], [4], [5]])


def test_feeder_feed_parallel_and_decorate_reader() -> None:
    main, img, label = _data_vars()
    feeder = fluid.DataFeeder([img, label], fluid.CPUPlace(), program=main)
    batches = [[(np.zeros(6), i)] for i in range(5)]
    feeds = list(feeder.feed_parallel(batches[:2], num_places=2))
    assert [f["label"][0, 0] for f in feeds] == [0, 1]
    with pytest.raises(ValueError, match="got 3 minibatches for 2 devices"):
        list(feeder.feed_parallel(batches[:3], num_places=2))
    groups = list(feeder.decorate_reader(lambda: iter(batches), True, num_places=2)())
    assert len(groups) == 2 and all(len(g) == 2 for g in groups)  # the 5th batch is dropped
    singles = list(feeder.decorate_reader(lambda: iter(batches), False)())
    assert [f["label"][0, 0] for f in singles] == [0, 1, 2, 3, 4]


# ---------------------------------------------------------------------- DataLoader


def _samples(n: int):
    def reader():
        for i in range(n):
            yield np.full([4], i, "float32"), np.full([3], -i, "float32")
    return reader


def test_loader_trains_like_direct_feeding(model: Model) -> None:
    twin = Model()
    for _ in range(3):
        twin.step()
    xs, ys = model.xs, model.ys

    def batches():
        for _ in range(3):
            yield xs, ys

    loader = fluid.io.DataLoader.from_generator(feed_list=[model.x, model.y], capacity=2)
    loader.set_batch_generator(batches, places=fluid.CPUPlace())
    for _epoch in range(2):
        for feed in loader():
            assert isinstance(feed, list) and len(feed) == 1 and sorted(feed[0]) == ["x", "y"]
            got, = model.exe.run(model.main, feed=feed, fetch_list=[model.loss],
                                 scope=model.scope)
            assert float(got[0]) == twin.step()


def test_sample_generators_batch_and_convert(model: Model) -> None:
    loader = fluid.DataLoader.from_generator(feed_list=[model.x, model.y], capacity=3)
    loader.set_sample_generator(_samples(7), batch_size=3, drop_last=True)
    feeds = [f for f, in loader]  # one place: a list of one feed per step, as Fluid's
    # as Fluid's: LoDTensors on the place (np.array reads one)
    assert len(feeds) == 2 and feeds[1]["x"].shape() == [3, 4]
    assert isinstance(feeds[1]["x"], fluid.LoDTensor) and feeds[1]["x"]._place().is_cpu_place()
    np.testing.assert_array_equal(np.array(feeds[1]["y"])[:, 0], [-3, -4, -5])

    loader.set_sample_list_generator(fluid.io.batch(_samples(5), 2))
    assert [f[0]["x"].shape()[0] for f in loader()] == [2, 2, 1]

    listed = fluid.io.DataLoader.from_generator([model.x, model.y], capacity=2, return_list=True)
    listed.set_sample_generator(_samples(2), batch_size=2)
    ((x, y),), = list(listed())
    assert x.shape() == [2, 4] and y.shape() == [2, 3]


def test_several_places_get_groups_of_batches(model: Model) -> None:
    places = [fluid.CPUPlace(), fluid.CPUPlace()]
    loader = fluid.io.DataLoader.from_generator([model.x, model.y], capacity=2)
    loader.set_sample_generator(_samples(10), batch_size=2, places=places)
    groups = list(loader())
    assert len(groups) == 2 and all(len(g) == 2 for g in groups)  # the 5th batch is dropped
    keep = fluid.io.DataLoader.from_generator([model.x, model.y], capacity=2, drop_last=False)
    keep.set_sample_generator(_samples(10), batch_size=2, places=places)
    assert [len(g) for g in keep()] == [2, 2, 1]


def test_generator_errors_are_reraised_in_the_loop(model: Model) -> None:
    def broken():
        yield model.xs, model.ys
        raise OSError("disk on fire")

    loader = fluid.io.DataLoader.from_generator([model.x, model.y], capacity=2)
    loader.set_batch_generator(broken)
    it = loader()
    next(it)
    with pytest.raises(OSError, match="disk on fire"):
        next(it)
    loader.set_batch_generator(lambda: iter([(model.xs,)]))
    with pytest.raises(ValueError, match=r"batch 0 from the batch generator must be a list of "
                                         r"2 arrays \(x, y\), got tuple of 1"):
        list(loader())


def test_stuck_generator_hits_the_timeout(model: Model) -> None:
    release = threading.Event()

    def stuck():
        release.wait(5)
        yield model.xs, model.ys

    loader = fluid.io.DataLoader.from_generator([model.x, model.y], capacity=1, timeout=0.2)
    loader.set_batch_generator(stuck)
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="no batch from the generator for 0.2 s"):
        next(iter(loader))
    assert time.monotonic() - start < 2
    release.set()


def test_abandoned_epoch_stops_its_thread(model: Model) -> None:
    def endless():
        while True:
            yield model.xs, model.ys

    loader = fluid.io.DataLoader.from_generator([model.x, model.y], capacity=2)
    loader.set_batch_generator(endless)
    it = iter(loader)
    next(it)
    thread = it._thread
    assert thread.is_alive()
    del it
    gc.collect()
    thread.join(timeout=3)
    assert not thread.is_alive()


def test_loader_argument_errors(model: Model) -> None:
    with pytest.raises(ValueError, match="capacity must be a positive int"):
        fluid.io.DataLoader.from_generator([model.x], capacity=0)
    loader = fluid.io.DataLoader.from_generator([model.x], capacity=2)
    with pytest.raises(RuntimeError, match="no data source"):
        iter(loader)
    with pytest.raises(RuntimeError, match=r"only a non-iterable loader .* is started"):
        loader.start()


def test_pyreader_aliases(model: Model) -> None:
    reader = fluid.io.PyReader(feed_list=[model.x, model.y], capacity=2)
    reader.decorate_sample_list_generator(fluid.io.batch(_samples(4), 2))
    assert len(list(reader())) == 2


def test_one_place_yields_a_list_of_one_feed_as_fluid_does(model: Model) -> None:
    """Fluid 1.6's iterable loader returns one feed per place, also for a single place given
    alone or in a list; its own tests read ``data[0]['image']``."""
    for places in (fluid.CPUPlace(), [fluid.CPUPlace()], None):
        loader = fluid.io.DataLoader.from_generator([model.x, model.y], capacity=2)
        loader.set_sample_generator(_samples(4), batch_size=2, places=places)
        steps = list(loader())
        assert len(steps) == 2 and all(isinstance(s, list) and len(s) == 1 for s in steps)
        np.testing.assert_array_equal(np.array(steps[1][0]["y"])[:, 0], [-2, -3])
        got, = model.exe.run(model.main, feed=steps[0], fetch_list=[model.loss],
                             scope=model.scope)
        assert np.isfinite(got).all()


def test_the_imperative_mode_gets_lists_of_variables() -> None:
    with fluid.dygraph.guard():
        reader = fluid.io.PyReader(capacity=2)
        reader.decorate_sample_list_generator(fluid.io.batch(_samples(5), 2),
                                              places=fluid.CPUPlace())
        steps = list(reader())
        assert len(steps) == 3
        x, y = steps[1]
        from parafluid.dygraph.varbase import VarBase
        assert isinstance(x, VarBase)
        np.testing.assert_array_equal(y.numpy()[:, 0], [-2, -3])
        loader = fluid.io.DataLoader.from_generator(capacity=2, return_list=True)
        loader.set_batch_generator(lambda: iter([(np.ones((2, 3), "float32"),)]))
        (only,), = list(loader())
        assert only.numpy().shape == (2, 3)


def test_feeder_nests_lod_level_two_samples() -> None:
    """A lod_level 2 field nests sequences two deep (paragraphs of sentences of words); the
    LoD's levels count sentences per paragraph, then words per sentence, as Fluid's."""
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        words = fluid.layers.data(name="w", shape=[1], dtype="int64", lod_level=2)
    feeder = fluid.DataFeeder([words], fluid.CPUPlace(), program=main)
    got = feeder.feed([([[1, 2], [3]],), ([[4], [5, 6, 7]],)])["w"]
    assert got.recursive_sequence_lengths() == [[2, 2], [2, 1, 1, 3]]
    np.testing.assert_array_equal(np.array(got), np.arange(1, 8).reshape(7, 1))
    with pytest.raises(ValueError, match=r"sample 0, field 'w' \(lod_level 2\) must nest "
                                         r"sequences 2 deep; found a scalar at depth 1"):
        feeder.feed([([1, 2],)])


def test_feeder_reshapes_a_batch_of_another_rank_whole_as_fluid() -> None:
    # Fluid 1.6's converter: samples of [24] for an img of [-1, 2, 3] (a batch of rank 2
    # against 3) become 4 rows each; labels of [4, 1] for [-1, 1] likewise
    main, img, label = _data_vars()
    feeder = fluid.DataFeeder([img, label], fluid.CPUPlace(), program=main)
    samples = [(np.arange(24) + 100 * k, np.arange(4).reshape(4, 1) + k) for k in range(2)]
    feed = feeder.feed(samples)
    assert feed["img"].shape == (8, 2, 3) and feed["label"].shape == (8, 1)
    np.testing.assert_array_equal(feed["img"][5].ravel(), np.arange(6, 12) + 100)
    np.testing.assert_array_equal(feed["label"].ravel(), [0, 1, 2, 3, 1, 2, 3, 4])
    with pytest.raises(ValueError, match=r"sample 0, field 'img' has shape \[20\]"):
        feeder.feed([(np.zeros([20]), np.zeros([4, 1]))])  # 20 is no whole number of rows
