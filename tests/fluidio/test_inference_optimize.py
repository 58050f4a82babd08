"""``CompiledProgram.with_inference_optimize(config)``: the program run as the inference
predictor of the config runs the saved model, written as Fluid 1.6's test_word2vec.py uses
it; the specification is the Executor running the loaded inference program."""

from __future__ import annotations

import numpy as np
import pytest

import parafluid as fluid
from parafluid.core import AnalysisConfig, NativeConfig, PaddleBuf, PaddleDType, PaddleTensor


def save_model(dirname: str):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 3
    with fluid.program_guard(main, startup):
        words = fluid.layers.data(name="words", shape=[1], dtype="int64", lod_level=1)
        dense = fluid.layers.data(name="dense", shape=[3], dtype="float32")
        label = fluid.layers.data(name="label", shape=[1], dtype="int64")
        emb = fluid.layers.embedding(input=words, size=[20, 4])
        pooled = fluid.layers.sequence_pool(input=emb, pool_type="average")
        hidden = fluid.layers.fc(input=[pooled, dense], size=6, act="relu")
        hidden = fluid.layers.dropout(hidden, dropout_prob=0.5)   # inference: scaled, no mask
        pred = fluid.layers.fc(input=hidden, size=2, act="softmax")
        loss = fluid.layers.mean(fluid.layers.cross_entropy(input=pred, label=label))
        fluid.optimizer.Adam(learning_rate=0.05).minimize(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    rng = np.random.RandomState(0)
    for _ in range(4):
        exe.run(main, scope=scope, feed={
            "words": fluid.create_lod_tensor(rng.randint(0, 20, (7, 1)).astype("int64"),
                                             [[3, 4]], fluid.CPUPlace()),
            "dense": rng.rand(2, 3).astype("float32"),
            "label": rng.randint(0, 2, (2, 1)).astype("int64")})
    with fluid.scope_guard(scope):
        fluid.io.save_inference_model(dirname, ["words", "dense"], [pred], exe,
                                      main_program=main)


def inputs():
    rng = np.random.RandomState(5)
    ids = rng.randint(0, 20, (6, 1)).astype("int64")
    return ids, [[1, 2, 3]], rng.rand(3, 3).astype("float32")


@pytest.mark.parametrize("config_kind", ["analysis", "native"])
def test_run_through_the_predictor_equals_the_executor_on_the_loaded_program(tmp_path,
                                                                             config_kind):
    save_model(str(tmp_path / "model"))
    ids, lens, dense = inputs()
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    with fluid.scope_guard(scope):
        program, feed_names, fetch_targets = fluid.io.load_inference_model(
            str(tmp_path / "model"), exe)
        words = fluid.create_lod_tensor(ids, lens, fluid.CPUPlace())
        want, = exe.run(program, feed={feed_names[0]: words, feed_names[1]: dense},
                        fetch_list=fetch_targets)

    if config_kind == "analysis":
        config = AnalysisConfig(str(tmp_path / "model"))
        config.disable_gpu()
    else:
        config = NativeConfig()
        config.model_dir = str(tmp_path / "model")
        config.use_gpu = False
    compiled = fluid.compiler.CompiledProgram(program)
    assert compiled.with_inference_optimize(config=config) is compiled

    def infer_tensor(array, lod, dtype):   # as Fluid's test_word2vec.py builds them
        t = PaddleTensor()
        t.lod = lod
        t.data = PaddleBuf(array)
        t.shape = list(array.shape)
        t.dtype = dtype
        return t

    outs = exe.run(compiled, feed=[infer_tensor(ids, [[0, 1, 3, 6]], PaddleDType.INT64),
                                   infer_tensor(dense, [], PaddleDType.FLOAT32)])
    assert len(outs) == 1 and isinstance(outs[0], PaddleTensor)
    np.testing.assert_allclose(np.array(outs[0].data.float_data()).reshape(want.shape), want,
                               rtol=1e-6)
    # a dict feed runs the loaded program on this Executor, in the predictor's scope
    got, = exe.run(compiled, feed={"words": words, "dense": dense})
    np.testing.assert_array_equal(got, want)
    got, = exe.run(compiled, feed={"words": words, "dense": dense},
                   fetch_list=[fetch_targets[0].name])
    np.testing.assert_array_equal(got, want)


def test_inference_and_data_parallel_exclude_each_other(tmp_path):
    save_model(str(tmp_path / "model"))
    config = AnalysisConfig(str(tmp_path / "model"))
    main = fluid.Program()
    with pytest.raises(ValueError, match="either for data parallelism or for inference"):
        fluid.CompiledProgram(main).with_data_parallel().with_inference_optimize(config)
    compiled = fluid.CompiledProgram(main).with_inference_optimize(config)
    with pytest.raises(ValueError, match="either for data parallelism or for inference"):
        compiled.with_data_parallel()
    with pytest.raises(ValueError, match="already called"):
        compiled.with_inference_optimize(config)
    with pytest.raises(TypeError, match="config must be a fluid.core.AnalysisConfig or "
                                        "NativeConfig, got str"):
        fluid.CompiledProgram(main).with_inference_optimize(str(tmp_path / "model"))
    missing = fluid.CompiledProgram(main).with_inference_optimize(
        AnalysisConfig(str(tmp_path / "nowhere")))
    with pytest.raises(FileNotFoundError, match="nowhere' is not a directory"):
        fluid.Executor(fluid.CPUPlace()).run(missing, feed={})
