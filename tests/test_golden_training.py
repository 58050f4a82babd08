"""Training computes what the reference runs of tests/golden_training.py recorded: the same
losses and parameters under every executor and gradient-aggregation mode.

What is bitwise and what is not: within one machine (one process, reruns, any scheduler thread
count) the runs are bitwise equal, and so is a rerun against a recording made on this very
machine (same platform key). Against a recording made on another machine (another CPU model or
vendor, another torch build, another torch thread count) the losses agree within the stated
tolerance ``RTOL``/``ATOL`` of tests/golden_training.py, since other kernel paths round
differently in the last bits.
"""

from __future__ import annotations

import copy
import json
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from golden_training import (
    ATOL,
    GOLDEN,
    MODELS,
    MODES,
    RTOL,
    THREADS,
    compare,
    load,
    platform,
    run_case,
)

pytest.importorskip("sklearn.datasets")
pytestmark = pytest.mark.timeout(120)

_RECORDED = load()
CASES = [f"{m}/{mode}" for m in MODELS for mode in MODES]


@cache
def _trained(case: str) -> dict[str, Any]:
    """One run of ``case`` in this process, shared by the tests below."""
    model, mode = case.split("/")
    return run_case(model, mode)


@pytest.mark.parametrize("case", CASES)
def test_training_matches_the_recorded_run(case: str) -> None:
    """Bitwise where the recording's platform key is this machine's, within RTOL/ATOL where
    it was made elsewhere (see golden_training.compare)."""
    how = compare(_trained(case), _RECORDED["cases"][case], _RECORDED["platform"])
    assert how == ("bitwise" if _RECORDED["platform"] == platform() else "tolerance")


@pytest.mark.parametrize("model", list(MODELS))
def test_every_data_parallel_mode_is_bitwise_equal_to_the_others_in_one_run(model: str) -> None:
    """AllReduce, Reduce and the fused all-reduce, run in this process, give bitwise the same
    losses and parameters. This holds on any machine: the three run the same kernels on the
    same per-device batches and add the two devices' gradients in the same device order; they
    differ only in where that sum is made (on every device, on the parameter's owner then
    broadcast, in one fused buffer), not in the order of the additions."""
    runs = {mode: _trained(f"{model}/{mode}") for mode in ("allreduce", "reduce", "fused")}
    for mode, got in runs.items():
        assert got["losses"] == runs["allreduce"]["losses"], mode
        assert got["params_sha256"] == runs["allreduce"]["params_sha256"], mode


@pytest.mark.parametrize("case", ["mlp/executor", "cnn/executor", "cnn/allreduce"])
def test_a_rerun_is_bitwise_equal_to_the_first_run(case: str) -> None:
    """Running a case again in this process gives bitwise the first run's losses and
    parameters. This holds on any machine: the seeds are fixed (program and dropout), the
    torch thread count is pinned, and no sum's order depends on timing."""
    model, mode = case.split("/")
    again = run_case(model, mode)
    assert again["losses"] == _trained(case)["losses"]
    assert again["params_sha256"] == _trained(case)["params_sha256"]


@pytest.mark.parametrize("exec_threads", [1, 4])
def test_the_scheduler_thread_count_does_not_change_a_bit(exec_threads: int) -> None:
    """The ParallelExecutor with 1 or 4 scheduler threads gives bitwise its results with 2,
    when every op gets the same torch intra-op thread count. This holds on any machine:
    scheduler threads decide only which ops overlap in time; every op's inputs and every
    sum's order are fixed by the graph. The intra-op count is what splits a conv's sums: 2 or
    4 workers for 2 replicas each take intra_op_threads(2) = cores // 2, and one thread is
    the calling thread's lane, whose count is set to the same here. (The calling thread's
    count and the core count are inputs of the recorded runs: both are in the platform key.)
    """
    from parafluid.engine.scheduler import intra_op_threads

    same = intra_op_threads(2)
    want = run_case("cnn", "allreduce", exec_threads=2, torch_threads=same)
    got = run_case("cnn", "allreduce", exec_threads=exec_threads, torch_threads=same)
    assert got["losses"] == want["losses"]
    assert got["params_sha256"] == want["params_sha256"]


_CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 143
model name\t: Intel(R) Xeon(R) Platinum 8480+
stepping\t: 8
flags\t\t: fpu sse2 avx2 avx512f avx512bw amx_tile

processor\t: 1
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480+
"""


def test_the_platform_key_names_the_cpu_the_torch_build_and_the_thread_count() -> None:
    import torch

    key = platform(_CPUINFO)
    assert key["cpu_vendor"] == "GenuineIntel"
    assert key["cpu_model"] == "Intel(R) Xeon(R) Platinum 8480+"
    assert key["cpu_id"] == "cpu family 6 model 143 stepping 8"
    assert key["torch"] == torch.__version__
    assert key["torch_commit"] == str(torch.version.git_version)
    assert key["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert key["torch_threads"] == str(THREADS)
    assert set(key) >= {"torch_config_sha256", "cpu_flags_sha256", "machine", "cores"}
    assert platform(_CPUINFO) == key  # the same machine gives the same key
    # The flags are a set: their order in /proc/cpuinfo does not matter.
    reordered = _CPUINFO.replace("fpu sse2 avx2", "avx2 sse2 fpu")
    assert platform(reordered) == key


@pytest.mark.parametrize("field,before,after", [
    ("cpu_model", "Platinum 8480+", "Platinum 8380"),
    ("cpu_vendor", "GenuineIntel\ncpu", "AuthenticAMD\ncpu"),
    ("cpu_id", "model\t\t: 143", "model\t\t: 106"),
    ("cpu_flags_sha256", " amx_tile", ""),
])
def test_another_cpu_gives_another_platform_key(field: str, before: str, after: str) -> None:
    """Two CPUs at the same ISA level (torch's cpu capability) are still different machines."""
    other = platform(_CPUINFO.replace(before, after, 1))
    assert other != platform(_CPUINFO)
    assert other[field] != platform(_CPUINFO)[field]
    assert other["cpu_capability"] == platform(_CPUINFO)["cpu_capability"]


def test_this_machine_reads_its_own_cpu() -> None:
    if not Path("/proc/cpuinfo").exists():
        pytest.skip("no /proc/cpuinfo on this system")
    key = platform()
    assert key["cpu_model"] and key["cpu_vendor"]
    assert key == platform(Path("/proc/cpuinfo").read_text())


def _recording_copy(tmp_path: Path, recorded_on: dict[str, str],
                    scale: float = 1.0) -> dict[str, Any]:
    """A copy of the recording, written to and read back from ``tmp_path``, with its platform
    key replaced and the mlp/executor run replaced by this process's run, losses times
    ``scale``."""
    data = copy.deepcopy(_RECORDED)
    data["platform"] = recorded_on
    run = copy.deepcopy(_trained("mlp/executor"))
    run["losses"] = [[v * scale for v in step] for step in run["losses"]]
    data["cases"]["mlp/executor"] = run
    path = tmp_path / GOLDEN.name
    path.write_text(json.dumps(data, indent=1) + "\n")
    return load(path)


def _foreign_key() -> dict[str, str]:
    return {**platform(), "cpu_model": "Another vendor's AVX-512 CPU", "cpu_vendor": "Other"}


def test_a_recording_from_another_machine_is_compared_with_the_tolerance(tmp_path) -> None:
    got = _trained("mlp/executor")
    # Off in the last bits, as another CPU's kernels give: within the tolerance.
    foreign = _recording_copy(tmp_path, _foreign_key(), scale=1 + RTOL / 10)
    assert foreign["cases"]["mlp/executor"]["losses"] != got["losses"]
    assert compare(got, foreign["cases"]["mlp/executor"], foreign["platform"]) == "tolerance"


def test_a_real_deviation_fails_against_a_recording_from_another_machine(tmp_path) -> None:
    foreign = _recording_copy(tmp_path, _foreign_key(), scale=1 + 100 * RTOL)
    with pytest.raises(AssertionError, match="beyond the tolerance"):
        compare(_trained("mlp/executor"), foreign["cases"]["mlp/executor"],
                foreign["platform"])
    assert 100 * RTOL * 2.0 > ATOL  # the losses are about 2: the deviation is past atol too


def test_a_recording_from_this_machine_is_compared_bitwise(tmp_path) -> None:
    got = _trained("mlp/executor")
    same = _recording_copy(tmp_path, platform())
    assert compare(got, same["cases"]["mlp/executor"], same["platform"]) == "bitwise"
    # One unit in the last place is within the tolerance, but not bitwise equal.
    ulp = _recording_copy(tmp_path, platform())
    ulp["cases"]["mlp/executor"]["losses"][-1][0] = float(
        np.nextafter(np.float32(got["losses"][-1][0]), np.float32(np.inf)))
    with pytest.raises(AssertionError, match="not bitwise equal"):
        compare(got, ulp["cases"]["mlp/executor"], ulp["platform"])
    np.testing.assert_allclose(ulp["cases"]["mlp/executor"]["losses"], got["losses"],
                               rtol=RTOL, atol=ATOL)
