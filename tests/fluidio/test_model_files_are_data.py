"""A model file is data: loading it (``load_inference_model``, the predictor) refuses any op
that acts outside the computation, and its loops are bounded."""

from __future__ import annotations

import os
import socket
import threading

import numpy as np
import pytest

import parafluid as fluid
from parafluid import io as fio
from parafluid.framework import Program, program_guard


def _write_model(dirname, extra=None):
    """A parameter-free model ``y = 2 x`` (plus whatever ``extra(block, x, y)`` appends)."""
    main, startup = Program(), Program()
    with program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[3], dtype="float32")
        y = fluid.layers.scale(x, scale=2.0)
        if extra is not None:
            extra(main.global_block(), x, y)
    os.makedirs(dirname, exist_ok=True)
    with open(os.path.join(dirname, fio.MODEL_FILENAME), "wb") as f:
        f.write(fio.encode_model(main, ["x"], [y.name]))
    return y.name


def _append(op_type, inputs=None, outputs=None, **attrs):
    def extra(block, x, y):
        outs = {}
        for slot in outputs or ():
            outs[slot] = [block.create_var(name=f"{op_type}_{slot}", shape=[-1, 3],
                                           dtype="float32").name]
        block.append_op(type=op_type, inputs={k: [x.name] for k in inputs or ()},
                        outputs=outs, attrs=attrs)
    return extra


class _Listener:
    """A TCP port that records whether anything connected."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.05)
        self.endpoint = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.connected = False
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
                self.connected = True
                conn.close()
            except TimeoutError:
                pass

    def close(self):
        self._stop.set()
        self.thread.join()
        self.sock.close()


@pytest.mark.parametrize("case", ["send", "recv", "listen_and_serv", "save", "load", "print"])
def test_a_model_holding_an_op_that_acts_outside_is_refused_at_load(tmp_path, case):
    listener = _Listener()
    outside = tmp_path / "outside.safetensors"
    ops = {
        "send": _append("send", inputs=["X"], epmap=[listener.endpoint],
                        send_varnames=["x"]),
        "recv": _append("recv", outputs=["Out"], epmap=[listener.endpoint], varnames=["w"]),
        "listen_and_serv": _append("listen_and_serv", endpoint=listener.endpoint),
        "save": _append("save", inputs=["X"], file_path=str(outside)),
        "load": _append("load", outputs=["Out"], file_path="../../etc/passwd"),
        "print": _append("print", inputs=["In"], outputs=["Out"]),
    }
    model = str(tmp_path / "model")
    _write_model(model, ops[case])
    exe = fluid.Executor(fluid.CPUPlace())
    try:
        with pytest.raises(ValueError, match=rf"op #\d+ of block 0 is '{case}', which acts "
                                             "outside the computation"):
            fio.load_inference_model(model, exe)
        config = fluid.core.AnalysisConfig(model)
        with pytest.raises(ValueError, match=f"is '{case}'"):
            fluid.core.create_paddle_predictor(config)
    finally:
        listener.close()
    assert not listener.connected and not outside.exists()


def test_a_model_that_computes_loads_and_runs(tmp_path):
    model = str(tmp_path / "model")
    _write_model(model)
    exe = fluid.Executor(fluid.CPUPlace())
    program, feeds, fetches = fio.load_inference_model(model, exe)
    out, = exe.run(program, feed={feeds[0]: np.ones((2, 3), "float32")}, fetch_list=fetches)
    np.testing.assert_array_equal(out, 2 * np.ones((2, 3), "float32"))
    assert program._loop_limit == fio.MODEL_LOOP_LIMIT
    assert program.clone()._loop_limit == fio.MODEL_LOOP_LIMIT


def _endless(block, x, y):
    cond = fluid.layers.fill_constant(shape=[1], dtype="bool", value=True)
    loop = fluid.layers.While(cond=cond)
    with loop.block():
        fluid.layers.assign(fluid.layers.fill_constant(shape=[1], dtype="bool", value=True),
                            output=cond)


def test_a_model_loop_that_never_ends_stops_at_the_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(fio, "MODEL_LOOP_LIMIT", 50)
    model = str(tmp_path / "model")
    _write_model(model, _endless)
    exe = fluid.Executor(fluid.CPUPlace())
    program, feeds, fetches = fio.load_inference_model(model, exe)
    with pytest.raises(Exception, match="ran 50 iterations without ending"):
        exe.run(program, feed={feeds[0]: np.ones((1, 3), "float32")}, fetch_list=fetches)


def test_a_loop_built_here_is_not_bounded():
    main, startup = Program(), Program()
    with program_guard(main, startup):
        i = fluid.layers.fill_constant(shape=[1], dtype="int64", value=0)
        n = fluid.layers.fill_constant(shape=[1], dtype="int64", value=200)
        cond = fluid.layers.less_than(i, n)
        loop = fluid.layers.While(cond=cond)
        with loop.block():
            fluid.layers.increment(i, in_place=True)
            fluid.layers.less_than(i, n, cond=cond)
    assert main._loop_limit is None
    exe = fluid.Executor(fluid.CPUPlace())
    out, = exe.run(main, fetch_list=[i])
    assert int(out[0]) == 200


def _safetensors_head(header: dict) -> bytes:
    import json

    raw = json.dumps(header).encode()
    return len(raw).to_bytes(8, "little") + raw


def test_a_huge_variables_file_is_judged_by_its_header_without_reading_it(tmp_path):
    import resource

    from parafluid.tensor_file import read_tensors

    # 4 GiB (sparse: no disk) behind a header without parafluid's manifest
    path = tmp_path / "huge.safetensors"
    with open(path, "wb") as f:
        f.write(_safetensors_head({"w": {"dtype": "F32", "shape": [1 << 30],
                                         "data_offsets": [0, 4 << 30]}}))
        f.truncate(f.tell() + (4 << 30))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(ValueError, match="no parafluid manifest"):
        read_tensors(str(path))
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mib < 64, f"reading the header grew the process by {grown_mib:.0f} MiB"
    # a header longer than the file, and a tensor beyond the file's end, are refused too
    claims = tmp_path / "claims.safetensors"
    claims.write_bytes((1 << 40).to_bytes(8, "little") + b"{}")
    with pytest.raises(ValueError, match="the header claims 1099511627776 bytes"):
        read_tensors(str(claims))
    beyond = tmp_path / "beyond.safetensors"
    beyond.write_bytes(_safetensors_head({
        "__metadata__": {"parafluid": "{}"},
        "w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}))
    with pytest.raises(ValueError, match=r"tensor 'w' claims the bytes \[0, 16\], outside"):
        read_tensors(str(beyond))
