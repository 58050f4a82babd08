"""A stranger writing into a collective job's rendezvous store: refused, bounded, and the job
trains like one process.

Trainer 0 hosts the store; a process of no job (this test) writes 40 values of 7 MiB into it
through the store's own wire format (without the job's secret when the job has one): every
write is refused, trainer 0's memory does not grow by more than a fraction of it, and the two
trainers then train as one process on the full batch.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np
import pytest
import torch
from dist_helpers import HERE, child_env, endpoints, load_json, reap, start

from parafluid.distributed import wire
from parafluid.distributed.rpc import RPCClient, RPCError
from parafluid.distributed.store import pack_fields

sys.path.insert(0, os.path.join(os.path.dirname(HERE), "parallel"))

from dp_worker import MODELS  # noqa: E402

from parafluid.testing.data_parallel import run_single  # noqa: E402

pytestmark = pytest.mark.slow

_VALUES, _MIB = 40, 7


def _wait_for(path: str, procs, seconds: float = 90) -> dict:
    end = time.monotonic() + seconds
    while not os.path.exists(path):
        if time.monotonic() > end or any(p.poll() is not None for p in procs):
            raise AssertionError(f"no {os.path.basename(path)}: a trainer failed or hangs")
        time.sleep(0.02)
    time.sleep(0.05)  # NOTE: written in one call; a reader may see it the moment it exists
    return load_json(path)


def _attack(endpoint: str, secret: str | None) -> list[str]:
    """40 writes of 7 MiB each, as a stranger: the errors they got."""
    errors = []
    value = torch.zeros(_MIB << 20, dtype=torch.uint8)
    client = RPCClient(endpoint, 10.0, secret, role="stranger", peer="rendezvous store")
    try:
        for i in range(_VALUES):
            fields = pack_fields([f"stranger/{i}".encode(), bytes(value.numpy())])
            try:
                client.call(wire.Kind.STORE, "set", torch.frombuffer(bytearray(fields),
                                                                      dtype=torch.uint8))
            except RPCError as e:
                errors.append(str(e))
    finally:
        client.close()
    return errors


@pytest.mark.timeout(240)
@pytest.mark.parametrize("job_secret, stranger_secret, refusal", [
    (None, None, "exceeds the limit"),
    ("s3cret", None, "handshake"),
    ("s3cret", "wrong", "handshake"),
], ids=["no-secret", "secret-stranger-without", "secret-stranger-wrong"])
def test_a_strangers_writes_are_refused_and_the_job_trains(tmp_path, monkeypatch, job_secret,
                                                           stranger_secret, refusal):
    monkeypatch.delenv(wire.SECRET_ENV, raising=False)
    out = str(tmp_path)
    eps = endpoints(2)
    extra = {"PARAFLUID_RPC_SECRET": job_secret} if job_secret else {}
    env = child_env(CPU_NUM="1", FLAGS_rpc_deadline="60000", **extra)
    worker = os.path.join(HERE, "store_worker.py")
    procs = []
    try:
        procs = [start([worker, eps, str(t), out], env) for t in (0, 1)]
        before = _wait_for(os.path.join(out, "ready_t0.json"), procs)["rss_mb"]
        _wait_for(os.path.join(out, "ready_t1.json"), procs)
        errors = _attack(eps.split(",")[0], stranger_secret)
        open(os.path.join(out, "go"), "w").close()
        after = _wait_for(os.path.join(out, "after_t0.json"), procs)["rss_mb"]
        for p in procs:
            p.wait(timeout=150)
    finally:
        reap(procs)
    assert len(errors) == _VALUES and all(refusal in e for e in errors), errors[:2]
    # NOTE: torch's TCPStore held every value: 280 MiB more
    assert after - before < 64, f"trainer 0 grew from {before:.0f} to {after:.0f} MiB"
    statuses = [load_json(os.path.join(out, f"status_t{t}.json")) for t in (0, 1)]
    for t, st in enumerate(statuses):
        assert st.get("ok"), f"trainer {t}: {st.get('traceback', st)}"
    build, feeds_of = MODELS["mlp"]
    single = run_single(build, feeds_of())
    for t in (0, 1):
        for name, want in single.params.items():
            got = np.load(os.path.join(out, f"mlp_allreduce_t{t}_{name}.npy"))
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=name)
