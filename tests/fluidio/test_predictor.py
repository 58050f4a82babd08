"""The inference API (``fluid.core.AnalysisConfig`` / ``NativeConfig`` /
``create_paddle_predictor`` / ``PaddleTensor``), used as Fluid 1.6 programs use it; the
specification is the Executor running the same saved model."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import parafluid as fluid
from parafluid.core import (
    AnalysisConfig,
    NativeConfig,
    PaddleBuf,
    PaddleDType,
    PaddleTensor,
    create_paddle_predictor,
)


def _save_model(dirname: str, **save_kw) -> None:
    """Train a two-input classifier a few steps and save it for inference."""
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 7
    with fluid.program_guard(main, startup):
        img = fluid.layers.data(name="img", shape=[6], dtype="float32")
        extra = fluid.layers.data(name="extra", shape=[2], dtype="float32")
        label = fluid.layers.data(name="label", shape=[1], dtype="int64")
        h = fluid.layers.fc(input=[img, extra], size=8, act="tanh")
        pred = fluid.layers.fc(input=h, size=3, act="softmax")
        loss = fluid.layers.mean(fluid.layers.cross_entropy(input=pred, label=label))
        fluid.optimizer.SGD(learning_rate=0.3).minimize(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    rng = np.random.RandomState(1)
    for _ in range(5):
        exe.run(main, feed={"img": rng.rand(8, 6).astype("float32"),
                            "extra": rng.rand(8, 2).astype("float32"),
                            "label": rng.randint(0, 3, (8, 1)).astype("int64")},
                fetch_list=[loss])
    fluid.io.save_inference_model(dirname, ["img", "extra"], [pred], exe, main_program=main,
                                  **save_kw)


def _inputs(n: int = 5) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.RandomState(2)
    return rng.rand(n, 6).astype("float32"), rng.rand(n, 2).astype("float32")


def _executor_result(dirname: str, img, extra, **load_kw) -> np.ndarray:
    scope, exe = fluid.Scope(), fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(scope):
        program, feeds, fetches = fluid.io.load_inference_model(dirname, exe, **load_kw)
        out, = exe.run(program, feed={feeds[0]: img, feeds[1]: extra}, fetch_list=fetches)
    return out


@pytest.fixture
def model_dir(tmp_path):
    _save_model(str(tmp_path))
    return str(tmp_path)


def test_predictor_run_equals_the_executor_on_the_saved_model(model_dir):
    img, extra = _inputs()
    want = _executor_result(model_dir, img, extra)
    config = AnalysisConfig(model_dir)
    config.disable_gpu()
    predictor = create_paddle_predictor(config)
    outs = predictor.run([PaddleTensor(img), PaddleTensor(extra)])
    assert len(outs) == 1
    out = outs[0]
    assert out.name == "save_infer_model/scale_0"
    assert out.dtype == PaddleDType.FLOAT32 and list(out.shape) == [5, 3]
    np.testing.assert_allclose(out.as_ndarray(), want, rtol=1e-6)
    np.testing.assert_allclose(out.data.float_data(), want.reshape(-1), rtol=1e-6)
    # the loaded parameters are the predictor's own: another run gives the same
    np.testing.assert_allclose(predictor.run([PaddleTensor(img), PaddleTensor(extra)])[0]
                               .as_ndarray(), want, rtol=1e-6)
    clone = predictor.clone()
    np.testing.assert_allclose(clone.run([PaddleTensor(img), PaddleTensor(extra)])[0]
                               .as_ndarray(), want, rtol=1e-6)


def test_zero_copy_run_equals_the_executor(model_dir):
    img, extra = _inputs(3)
    want = _executor_result(model_dir, img, extra)
    config = AnalysisConfig(model_dir)
    config.switch_use_feed_fetch_ops(False)
    config.switch_specify_input_names(True)
    predictor = create_paddle_predictor(config)
    assert predictor.get_input_names() == ["img", "extra"]
    names = predictor.get_output_names()
    assert names == ["save_infer_model/scale_0"]
    for name, value in zip(predictor.get_input_names(), (img, extra)):
        tensor = predictor.get_input_tensor(name)
        tensor.reshape(value.shape)
        tensor.copy_from_cpu(value.reshape(-1))
        assert tensor.shape() == list(value.shape)
    predictor.zero_copy_run()
    output = predictor.get_output_tensor(names[0])
    np.testing.assert_allclose(output.copy_to_cpu(), want, rtol=1e-6)
    assert output.shape() == [3, 3] and output.type() == PaddleDType.FLOAT32
    with pytest.raises(ValueError, match="not an input"):
        predictor.get_input_tensor("label")


def test_inputs_are_not_copied_without_need():
    x = np.arange(6, dtype="float32").reshape(2, 3)
    t = PaddleTensor(x, copy=False)
    assert np.shares_memory(t.as_ndarray(), x)
    assert not np.shares_memory(PaddleTensor(x).as_ndarray(), x)  # Fluid's default copies


def test_native_config_and_program_params_files(tmp_path):
    _save_model(str(tmp_path), model_filename="model", params_filename="params")
    img, extra = _inputs()
    want = _executor_result(str(tmp_path), img, extra, model_filename="model",
                            params_filename="params")
    native = NativeConfig()
    native.prog_file = str(tmp_path / "model")
    native.param_file = str(tmp_path / "params")
    native.use_gpu = False
    out, = create_paddle_predictor(native).run([PaddleTensor(img), PaddleTensor(extra)])
    np.testing.assert_allclose(out.as_ndarray(), want, rtol=1e-6)
    analysis = AnalysisConfig(str(tmp_path / "model"), str(tmp_path / "params"))
    assert analysis.prog_file().endswith("model") and analysis.params_file().endswith("params")
    out, = create_paddle_predictor(analysis).run([PaddleTensor(img), PaddleTensor(extra)])
    np.testing.assert_allclose(out.as_ndarray(), want, rtol=1e-6)


def test_inputs_by_name_with_specify_input_names(model_dir):
    img, extra = _inputs()
    want = _executor_result(model_dir, img, extra)
    config = AnalysisConfig(model_dir)
    config.switch_specify_input_names(True)
    predictor = create_paddle_predictor(config)
    out, = predictor.run([PaddleTensor(extra, name="extra"), PaddleTensor(img, name="img")])
    np.testing.assert_allclose(out.as_ndarray(), want, rtol=1e-6)
    with pytest.raises(ValueError, match="'nope', which is not a feed target"):
        predictor.run([PaddleTensor(extra, name="nope"), PaddleTensor(img, name="img")])


def test_paddle_tensor_filled_field_by_field(model_dir):
    """The older style: an empty PaddleTensor whose shape, dtype and PaddleBuf are set."""
    img, extra = _inputs(1)
    want = _executor_result(model_dir, img, extra)
    tensors = []
    for value in (img, extra):
        t = PaddleTensor()
        t.shape = list(value.shape)
        t.dtype = PaddleDType.FLOAT32
        t.data = PaddleBuf(value.reshape(-1).tolist())
        tensors.append(t)
    out, = create_paddle_predictor(AnalysisConfig(model_dir)).run(tensors)
    np.testing.assert_allclose(out.as_ndarray(), want, rtol=1e-6)
    buf = PaddleBuf(np.array([3, 4], "int64"))
    assert buf.int64_data() == [3, 4] and buf.length() == 16 and not buf.empty()
    assert PaddleBuf(8).length() == 8 and PaddleBuf(0).empty()


def test_sequence_input_with_lod(tmp_path):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        words = fluid.layers.data(name="words", shape=[3], dtype="float32", lod_level=1)
        pooled = fluid.layers.sequence_pool(fluid.layers.fc(words, size=2), pool_type="sum")
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    fluid.io.save_inference_model(str(tmp_path), ["words"], [pooled], exe, main_program=main)
    data = np.random.RandomState(3).rand(5, 3).astype("float32")
    want, = exe.run(main, feed={"words": fluid.create_lod_tensor(data, [[2, 3]],
                                                                 fluid.CPUPlace())},
                    fetch_list=[pooled])
    predictor = create_paddle_predictor(AnalysisConfig(str(tmp_path)))
    out, = predictor.run([PaddleTensor(data, lod=[[0, 2, 5]])])
    assert list(out.shape) == [2, 2]
    np.testing.assert_allclose(out.as_ndarray(), want, rtol=1e-6)


def test_settings_without_meaning_here_are_accepted(model_dir):
    img, extra = _inputs()
    want = _executor_result(model_dir, img, extra)
    config = AnalysisConfig()
    config.set_model(model_dir)
    config.switch_ir_optim(True)
    config.enable_mkldnn()
    config.set_cpu_math_library_num_threads(2)
    config.enable_tensorrt_engine(workspace_size=1 << 20, max_batch_size=4,
                                  precision_mode=AnalysisConfig.Precision.Float32)
    config.enable_memory_optim()
    config.enable_profile()
    config.disable_glog_info()
    config.delete_pass("fc_fuse_pass")
    assert config.ir_optim() and config.mkldnn_enabled() and config.tensorrt_engine_enabled()
    assert config.cpu_math_library_num_threads() == 2 and config.model_dir() == model_dir
    config.enable_use_gpu(100, 0)
    assert config.use_gpu() and config.memory_pool_init_size_mb() == 100
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        predictor = create_paddle_predictor(config)
    if not torch.cuda.is_available():
        assert any("sees none" in str(w.message) for w in caught)
    out, = predictor.run([PaddleTensor(img), PaddleTensor(extra)])
    np.testing.assert_allclose(out.as_ndarray(), want, rtol=1e-5)


def test_wrong_model_or_inputs_are_clear_errors(tmp_path, model_dir):
    with pytest.raises(FileNotFoundError, match="is not a directory"):
        create_paddle_predictor(AnalysisConfig(str(tmp_path / "missing")))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="holds no __model__"):
        create_paddle_predictor(AnalysisConfig(str(empty)))
    with pytest.raises(ValueError, match="names no model"):
        create_paddle_predictor(AnalysisConfig())
    with pytest.raises(FileNotFoundError, match="params_file"):
        create_paddle_predictor(AnalysisConfig(model_dir + "/__model__", model_dir + "/nope"))
    with pytest.raises(TypeError, match="AnalysisConfig or a NativeConfig"):
        create_paddle_predictor(model_dir)
    predictor = create_paddle_predictor(AnalysisConfig(model_dir))
    img, _ = _inputs()
    with pytest.raises(ValueError, match=r"takes 2 inputs \(img, extra\), got 1"):
        predictor.run([PaddleTensor(img)])
    with pytest.raises(TypeError, match="float64"):
        PaddleTensor(img.astype("float64"))
    with pytest.raises(RuntimeError, match="copy_from_cpu"):
        predictor.zero_copy_run()


def test_sequence_output_keeps_its_lod(tmp_path):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        words = fluid.layers.data(name="words", shape=[3], dtype="float32", lod_level=1)
        probs = fluid.layers.sequence_softmax(fluid.layers.fc(words, size=1))
    assert probs.lod_level == 1
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    fluid.io.save_inference_model(str(tmp_path), ["words"], [probs], exe, main_program=main)
    data = np.random.RandomState(4).rand(5, 3).astype("float32")
    want, = exe.run(main, feed={"words": fluid.create_lod_tensor(data, [[2, 3]],
                                                                 fluid.CPUPlace())},
                    fetch_list=[probs])
    config = AnalysisConfig(str(tmp_path))
    predictor = create_paddle_predictor(config)
    out, = predictor.run([PaddleTensor(data, lod=[[0, 2, 5]])])
    assert out.lod == [[0, 2, 5]]
    np.testing.assert_allclose(out.as_ndarray(), want, rtol=1e-6)
    config.switch_use_feed_fetch_ops(False)
    zero_copy = create_paddle_predictor(config)
    tensor = zero_copy.get_input_tensor("words")
    tensor.copy_from_cpu(data)
    tensor.set_lod([[0, 2, 5]])
    zero_copy.zero_copy_run()
    output = zero_copy.get_output_tensor(zero_copy.get_output_names()[0])
    assert output.lod() == [[0, 2, 5]]
    np.testing.assert_allclose(output.copy_to_cpu(), want, rtol=1e-6)
