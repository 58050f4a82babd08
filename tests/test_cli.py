"""The ``parafluid`` command: help, option checking, a short training run, reproducibility."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

import parafluid as fluid
from parafluid.cli import main
from parafluid.digits import load_data
from parafluid.testing.warm_popen import WarmPopen, warm_server_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_help_explains_every_command(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "train" in out and "digits data set" in out and "examples:" in out
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    for option in ("--epochs", "--batch-size", "--lr", "--optimizer", "--output", "--seed",
                   "--threads", "--hidden"):
        assert option in out


@pytest.mark.parametrize("argv, message", [
    (["--epochs", "0"], "argument --epochs: expected a positive integer, got 0"),
    (["train", "--lr", "-1"], "argument --lr/--learning-rate: expected a positive number"),
    (["train", "--seed", "x"], "expected an integer seed, got 'x'"),
    (["train", "--optimizer", "rmsprop"], "invalid choice: 'rmsprop'"),
    (["nonsense"], "invalid choice: 'nonsense'"),
])
def test_bad_options_are_usage_errors(argv, message, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--trainers", "2"], "--trainers needs --pservers"),
    (["--async"], "--async needs --pservers"),
    (["--pservers", "2", "--nproc", "2"], "--pservers runs one device per trainer"),
    (["--pservers", "2", "--trainers", "4", "--batch-size", "2"],
     "--batch-size 2 is smaller than --trainers 4"),
    (["--nproc", "2", "--batch-size", "1"], "--batch-size 1 is smaller than --nproc 2"),
    (["--devices", "4", "--batch-size", "2"], "--batch-size 2 is smaller than --devices 4"),
])
def test_options_that_do_not_go_together_are_usage_errors(argv, message, tmp_path,
                                                           capsys) -> None:
    assert main([*argv, "--epochs", "1", "--output", str(tmp_path / "m")]) == 2
    captured = capsys.readouterr()
    assert f"parafluid train: error: {message}" in captured.err
    assert "epoch" not in captured.out


@pytest.mark.parametrize("where, why", [("missing/p.json", "the folder .*missing does not "
                                                           "exist"),
                                        ("", "it is a directory")])
def test_unwritable_profile_fails_before_training(where, why, tmp_path, capsys) -> None:
    path = str(tmp_path / where)
    assert main(["--epochs", "1", "--profile", path, "--output", str(tmp_path / "m")]) == 1
    captured = capsys.readouterr()
    assert re.search(f"cannot write --profile {re.escape(repr(path))}: {why}", captured.err)
    assert "epoch" not in captured.out


def test_each_process_of_a_job_gets_its_timeline_and_the_merge_command_names_them(
        monkeypatch) -> None:
    from parafluid.cli import _merge_command, _per_process_profiles

    monkeypatch.setenv("PADDLE_TRAINERS_NUM", "2")
    monkeypatch.setenv("PADDLE_PSERVER_ENDPOINTS", "127.0.0.1:1,127.0.0.1:2")
    files = _per_process_profiles("/tmp/p.json")
    assert files == {"trainer0": "/tmp/p.rank0.json", "trainer1": "/tmp/p.rank1.json",
                     "pserver0": "/tmp/p.pserver0.json", "pserver1": "/tmp/p.pserver1.json"}
    assert _per_process_profiles("/tmp/p{rank}.json")["pserver1"] == "/tmp/ppserver1.json"
    assert _merge_command("/tmp/p.json", files).endswith(
        "python -m parafluid.timeline --profile_path trainer0=/tmp/p.rank0.json,"
        "trainer1=/tmp/p.rank1.json,pserver0=/tmp/p.pserver0.json,"
        "pserver1=/tmp/p.pserver1.json --timeline_path /tmp/p.json")


def test_unusable_output_fails_before_training(tmp_path, capsys) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    assert main(["--epochs", "1", "--output", str(blocker)]) == 1
    captured = capsys.readouterr()
    assert f"cannot use --output {str(blocker)!r}" in captured.err
    assert "epoch" not in captured.out


def _run_warm(cmd: list[str], env: dict[str, str], timeout: float,
              **kw) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, capture_output=True, text=True)`` forked from a warm interpreter
    (a launcher started with ``env`` forks its processes from it too)."""
    env = {**env, **warm_server_env()}
    p = WarmPopen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                  start_new_session=True, **kw)
    try:
        out, err = p.communicate(timeout=timeout)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, 9)  # the launcher and the processes it started
            p.wait(timeout=10)
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


def test_python_dash_m_runs_the_cli() -> None:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = _run_warm([sys.executable, "-m", "parafluid", "--version"], env, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == f"parafluid {fluid.__version__}"


def _train(tmp_path, seed: int, capsys, name: str = "model", *extra: str) -> tuple[int, str]:
    out_dir = str(tmp_path / name)
    code = main(["--epochs", "2", "--hidden", "32", "--seed", str(seed), "--output", out_dir,
                 *extra])
    return code, capsys.readouterr().out.replace(out_dir, "<DIR>")


def _without_speeds(text: str) -> str:
    text = re.sub(r"[\d,]+ samples/s", "N samples/s", text)
    return re.sub(r"\([\d.]+ s in all\)", "(T)", text)


def test_short_training_run_reports_and_saves_a_working_model(tmp_path, capsys) -> None:
    code, out = _train(tmp_path, 3, capsys)
    assert code == 0
    epochs = re.findall(r"epoch (\d)/2  loss ([\d.]+)  train acc ([\d.]+)  [\d,]+ samples/s", out)
    assert [e[0] for e in epochs] == ["1", "2"]
    assert float(epochs[1][1]) < float(epochs[0][1])  # the loss goes down
    accuracy = float(re.search(r"test accuracy ([\d.]+) on (\d+) held-out images", out)[1])
    assert "inference model saved to <DIR>" in out
    model_dir = str(tmp_path / "model")

    scope, exe = fluid.Scope(), fluid.Executor(fluid.CPUPlace())
    program, feeds, fetches = fluid.io.load_inference_model(model_dir, exe, scope=scope)
    _, _, x_test, y_test = load_data()
    logits, = exe.run(program, feed={feeds[0]: x_test}, fetch_list=fetches, scope=scope)
    recomputed = float((logits.argmax(axis=1) == y_test[:, 0]).mean())
    assert round(recomputed, 4) == accuracy
    assert accuracy > 0.5  # chance is 0.1


def test_compile_trains_the_same_model_as_the_interpreter(tmp_path, capsys) -> None:
    """``--compile``: the same epochs (losses, accuracies) as the interpreted run."""
    plain = _without_speeds(_train(tmp_path, 4, capsys, "plain")[1])
    code, out = _train(tmp_path, 4, capsys, "compiled", "--compile")
    assert code == 0 and ", compiled" in out
    compiled = _without_speeds(out).replace(", compiled", "")

    def numbers(text: str) -> list[float]:
        return [float(v) for v in re.findall(r"(?:loss|acc|accuracy) ([\d.]+)", text)]
    assert len(numbers(compiled)) == len(numbers(plain)) > 4
    np.testing.assert_allclose(numbers(compiled), numbers(plain), atol=2e-4)


def test_same_seed_repeats_the_run_exactly(tmp_path, capsys) -> None:
    outs = {name: _train(tmp_path, seed, capsys, name)[1]
            for name, seed in (("a", 5), ("b", 5), ("c", 6))}
    assert _without_speeds(outs["a"]) == _without_speeds(outs["b"])
    assert _without_speeds(outs["a"]) != _without_speeds(outs["c"])
    weights = {name: fluid.io.read_tensors(str(tmp_path / name / fluid.io.DEFAULT_FILENAME))[0]
               for name in outs}
    for key, value in weights["a"].items():  # bitwise equal weights for the same seed
        np.testing.assert_array_equal(value.numpy(), weights["b"][key].numpy())
    assert any(not np.array_equal(v.numpy(), weights["c"][k].numpy())
               for k, v in weights["a"].items())


def test_data_parallel_training_on_two_cpu_devices(tmp_path, capsys) -> None:
    out_dir = str(tmp_path / "dp")
    code = main(["train", "--devices", "2", "--epochs", "3", "--hidden", "32", "--seed", "4",
                 "--output", out_dir])
    out = capsys.readouterr().out
    assert code == 0
    assert "data-parallel on 2 CPU devices" in out
    losses = [float(v) for v in re.findall(r"loss ([\d.]+)", out)]
    assert len(losses) == 3 and losses[-1] < losses[0]
    assert float(re.search(r"test accuracy ([\d.]+)", out)[1]) > 0.8
    # the note (when data parallelism did not pay on this machine) names both step times
    note = re.search(r"note: data parallelism does not pay .* ([\d.]+) ms on 2 devices vs "
                     r"([\d.]+) ms on 1", out)
    assert note is None or float(note[1]) > float(note[2])


def test_data_parallel_note_compares_with_a_measured_single_device_step() -> None:
    from parafluid.digits import TrainConfig, _data_parallel_note, build_model

    cfg = TrainConfig(epochs=1, batch_size=32, hidden=(16,), seed=1, devices=2)
    net = build_model(cfg)
    x, y, _, _ = load_data()
    note = _data_parallel_note(net, x, y, cfg, parallel_step=10.0)
    assert note.startswith("note: data parallelism does not pay for a model this small: a "
                           "step took 10000.00 ms on 2 devices vs ")
    assert "Use --devices 1" in note
    assert _data_parallel_note(net, x, y, cfg, parallel_step=0.0) is None
    note = _data_parallel_note(net, x, y, cfg, parallel_step=10.0, processes=2)
    assert note.startswith("note: distributed training does not pay for a model this small: "
                           "a step took 10000.00 ms with 2 trainer processes x 2 devices vs ")
    assert "Drop --nproc" in note
    note = _data_parallel_note(net, x, y, cfg, parallel_step=10.0, processes=2, pservers=True)
    assert "with 2 trainer processes x 2 devices and parameter servers" in note
    assert "Drop --pservers" in note


def test_batch_smaller_than_devices_is_a_usage_error(tmp_path, capsys) -> None:
    # Every batch would be skipped (it cannot be split), leaving an epoch with no samples.
    code = main(["--devices", "4", "--batch-size", "2", "--epochs", "1",
                 "--output", str(tmp_path / "m")])
    captured = capsys.readouterr()
    assert code == 2
    assert "--batch-size 2 is smaller than --devices 4" in captured.err
    assert "epoch" not in captured.out


def test_ctrl_c_is_a_short_message_not_a_traceback(tmp_path, capsys, monkeypatch) -> None:
    import parafluid.digits

    def interrupted(cfg, log):
        raise KeyboardInterrupt

    monkeypatch.setattr(parafluid.digits, "train", interrupted)
    assert main(["--epochs", "1", "--output", str(tmp_path / "m")]) == 130
    assert "parafluid train: interrupted" in capsys.readouterr().err


def test_one_epoch_is_singular(tmp_path, capsys) -> None:
    assert main(["--epochs", "1", "--hidden", "8", "--output", str(tmp_path / "m")]) == 0
    out = capsys.readouterr().out
    assert ", 1 epoch, seed" in out and "1 epochs" not in out


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_two_processes_train_like_two_devices_of_one(tmp_path, capsys) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLE_", "FLAGS_"))}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    multi = str(tmp_path / "nproc")
    profile = str(tmp_path / "p.json")
    proc = _run_warm([sys.executable, "-m", "parafluid", "train", "--nproc", "2",
                      "--epochs", "2", "--hidden", "32", "--seed", "4", "-o", multi,
                      "--profile", profile], env, timeout=150, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "[rank 0] parafluid train:" in out and "trainer 0 of 2 processes" in out
    assert len(re.findall(r"\[rank 0\] epoch \d/2  loss", out)) == 2
    assert "[rank 1] epoch" not in out, "trainer 0 reports"
    assert float(re.search(r"test accuracy ([\d.]+)", out)[1]) > 0.5
    # the per-process timelines, and the printed command that merges them
    merge = re.search(r"\[rank 0\]   (python -m parafluid.timeline .*)", out)[1].split()
    assert merge[4] == f"trainer0={tmp_path}/p.rank0.json,trainer1={tmp_path}/p.rank1.json"
    merged = _run_warm([sys.executable, *merge[1:]], env, timeout=60, cwd=ROOT)
    assert merged.returncode == 0 and os.path.exists(profile), merged.stderr
    single = str(tmp_path / "devices")
    assert main(["train", "--devices", "2", "--epochs", "2", "--hidden", "32", "--seed", "4",
                 "--output", single]) == 0
    # trainer 0 prints the job's loss and accuracy (both trainers' images), not its shard's
    numbers = r"epoch \d/2  loss ([\d.]+)  train acc ([\d.]+)"
    np.testing.assert_allclose(np.array(re.findall(numbers, out), float),
                               np.array(re.findall(numbers, capsys.readouterr().out), float),
                               atol=2e-4)
    a = fluid.io.read_tensors(os.path.join(multi, fluid.io.DEFAULT_FILENAME))[0]
    b = fluid.io.read_tensors(os.path.join(single, fluid.io.DEFAULT_FILENAME))[0]
    assert a.keys() == b.keys()
    for key in a:  # 2 processes x 1 device compute what 1 process x 2 devices computes
        np.testing.assert_allclose(a[key].numpy(), b[key].numpy(), rtol=1e-5, atol=1e-5)


def test_devices_go_on_with_one_device_when_a_step_is_faster_there(tmp_path, capsys,
                                                                    monkeypatch) -> None:
    from parafluid.parallel import device_fallback as df

    clock = [0.0]  # a step "takes" 2 ms on 2 devices and 1 ms on one: the choice is known
    many, one = df.OneDeviceFallback._many_step, df.OneDeviceFallback._one_step

    def many_step(self, *args):
        clock[0] += 2e-3
        return many(self, *args)

    def one_step(self, *args):
        clock[0] += 1e-3
        return one(self, *args)

    monkeypatch.setattr(df.OneDeviceFallback, "_many_step", many_step)
    monkeypatch.setattr(df.OneDeviceFallback, "_one_step", one_step)
    monkeypatch.setattr(df, "_clock", lambda: clock[0])
    args = ["train", "--devices", "2", "--epochs", "1", "--hidden", "16", "--seed", "4"]
    assert main(args + ["--output", str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    assert "note: running on 1 device instead of 2 from now on: a step took 2.00 ms on 2 " \
           "devices and 1.00 ms on 1 with the whole batch" in out
    assert "(--keep-devices keeps all 2)" in out and "does not pay" not in out
    assert main(args + ["--keep-devices", "--output", str(tmp_path / "b")]) == 0
    assert "running on 1 device" not in capsys.readouterr().out
