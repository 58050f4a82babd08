"""A data-parallel run splits a dict feed of LoDTensors by whole sequences, as Fluid 1.6's
ParallelExecutor does, and a merged fetch keeps the LoD (docs/fluid_compat.md)."""

import numpy as np
import pytest

import parafluid as fluid
from parafluid import compiler, core
from parafluid.lod import merge_lods, slice_lod

LENGTHS = [3, 1, 4, 2, 2, 5, 1, 3]


def text_classifier():
    """A Fluid 1.6 text classifier: embedding over LoD ids, sequence_pool, fc, mean loss."""
    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = 11
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        words = fluid.layers.data(name="words", shape=[1], dtype="int64", lod_level=1)
        label = fluid.layers.data(name="label", shape=[1], dtype="int64")
        emb = fluid.layers.embedding(words, size=[20, 8], is_sparse=True)
        hidden = fluid.layers.fc(emb, size=8, act="tanh")   # per step; the LoD rides along
        pooled = fluid.layers.sequence_pool(hidden, pool_type="average")
        prob = fluid.layers.fc(pooled, size=3, act="softmax")
        loss = fluid.layers.mean(fluid.layers.cross_entropy(prob, label))
        fluid.optimizer.Adam(learning_rate=0.05).minimize(loss)
    return main, startup, loss, hidden


def batch(seed):
    rng = np.random.RandomState(seed)
    ids = rng.randint(0, 20, (sum(LENGTHS), 1)).astype("int64")
    words = fluid.create_lod_tensor(ids, [LENGTHS], fluid.CPUPlace())
    return words, rng.randint(0, 3, (len(LENGTHS), 1)).astype("int64")


def test_dict_feed_of_lod_ids_on_two_devices_matches_one_executor(monkeypatch):
    monkeypatch.setenv("CPU_NUM", "2")
    losses, weights = [], []
    for parallel in (False, True):
        main, startup, loss, _ = text_classifier()
        exe, scope = fluid.Executor(core.CPUPlace()), fluid.Scope()
        exe.run(startup, scope=scope)
        program = compiler.CompiledProgram(main).with_data_parallel(loss_name=loss.name) \
            if parallel else main
        run = []
        for step in range(4):
            words, labels = batch(step)
            out, = exe.run(program, feed={"words": words, "label": labels},
                           fetch_list=[loss], scope=scope)
            assert out.shape == ((2,) if parallel else (1,))
            run.append(float(np.mean(out)))
        losses.append(run)
        weights.append(np.array(scope.find_var("fc_1.w_0").get_tensor()))
    # 8 sequences: 4 per device, so the mean of the devices' means is the batch's mean
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(weights[1], weights[0], rtol=1e-5, atol=1e-6)
    assert losses[0][-1] < losses[0][0]


def test_merged_fetch_keeps_the_lod(monkeypatch):
    monkeypatch.setenv("CPU_NUM", "2")
    main, startup, loss, hidden = text_classifier()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    words, labels = batch(0)
    feed = {"words": words, "label": labels}
    single, = exe.run(main.clone(for_test=True), feed=feed, fetch_list=[hidden.name],
                      return_numpy=False)
    assert single.lod() == words.lod()
    program = compiler.CompiledProgram(main).with_data_parallel(loss_name=loss.name)
    merged, = exe.run(program, feed=feed, fetch_list=[hidden.name], return_numpy=False)
    assert merged.lod() == words.lod()          # [3, 1, 4, 2] + [2, 5, 1, 3], appended
    assert np.array(merged).shape == (sum(LENGTHS), 8)


def test_per_step_feed_without_lod_is_cut_at_sequence_boundaries():
    """A dense feed with one row per step follows the LoD feed's sequence boundaries."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[1], dtype="float32", lod_level=1)
        w = fluid.layers.data(name="w", shape=[1], dtype="float32")
        pooled = fluid.layers.sequence_pool(fluid.layers.elementwise_mul(x, w), "sum")
    exe = fluid.Executor(fluid.CPUPlace())
    steps = np.arange(1, 8, dtype="float32").reshape(7, 1)
    x_t = fluid.create_lod_tensor(steps, [[2, 1, 3, 1]], fluid.CPUPlace())
    weights = np.linspace(0.5, 2.0, 7).astype("float32").reshape(7, 1)
    program = compiler.CompiledProgram(main).with_data_parallel(places=fluid.cpu_places(2))
    out, = exe.run(program, feed={"x": x_t, "w": weights}, fetch_list=[pooled])
    want, = exe.run(main, feed={"x": x_t, "w": weights}, fetch_list=[pooled])
    np.testing.assert_allclose(out, want, rtol=1e-6)


def _pool_program():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        a = fluid.layers.data(name="a", shape=[1], dtype="float32", lod_level=1)
        b = fluid.layers.data(name="b", shape=[1], dtype="float32", lod_level=1)
        out = fluid.layers.sequence_pool(a, "sum") + fluid.layers.sequence_pool(b, "sum")
    return compiler.CompiledProgram(main).with_data_parallel(places=fluid.cpu_places(2)), out


def test_fewer_sequences_than_devices_is_refused_by_name():
    program, out = _pool_program()
    one = fluid.create_lod_tensor(np.ones([3, 1], "float32"), [[3]], fluid.CPUPlace())
    with pytest.raises(ValueError, match=r"feed 'a': 1 sequences cannot be split over 2 "
                                         r"devices.*at least one sequence per device"):
        fluid.Executor(fluid.CPUPlace()).run(program, feed={"a": one, "b": one},
                                             fetch_list=[out])


def test_lod_feeds_with_different_sequence_counts_are_refused():
    program, out = _pool_program()
    a = fluid.create_lod_tensor(np.ones([4, 1], "float32"), [[2, 2]], fluid.CPUPlace())
    b = fluid.create_lod_tensor(np.ones([4, 1], "float32"), [[1, 1, 2]], fluid.CPUPlace())
    with pytest.raises(ValueError, match=r"feeds 'a' and 'b' .* different numbers of "
                                         r"top-level sequences \(2 and 3\)"):
        fluid.Executor(fluid.CPUPlace()).run(program, feed={"a": a, "b": b},
                                             fetch_list=[out])


def test_two_level_lod_splits_at_the_top_level():
    # 3 paragraphs of 2, 1, 2 sentences; 5 sentences of 1, 3, 2, 1, 1 words (8 rows)
    t = fluid.create_lod_tensor(np.arange(8).reshape(8, 1), [[2, 1, 2], [1, 3, 2, 1, 1]],
                                fluid.CPUPlace())
    first, second = fluid.lod.split_by_sequences(t, 2)
    assert first.recursive_sequence_lengths() == [[2], [1, 3]]
    assert second.recursive_sequence_lengths() == [[1, 2], [2, 1, 1]]
    np.testing.assert_array_equal(np.array(second).ravel(), [4, 5, 6, 7])
    assert slice_lod([[0, 2, 3], [0, 1, 4, 6]], 1, 2) == ((4, 6), [[0, 1], [0, 2]])
    assert merge_lods([[[0, 2, 3]], [[0, 4]]]) == [[0, 2, 3, 7]]
    assert merge_lods([[[0, 2]], None]) is None
