"""The wire format: round trips for every dtype, each validation rule, and a seeded fuzz run."""

import random
import struct
import time

import numpy as np
import pytest
import torch

from parafluid.distributed import wire
from parafluid.distributed.wire import HEADER, Kind, WireError, decode, encode
from parafluid.scope import SelectedRows
from parafluid.testing.wire_fuzz import mutate, seed_messages

DTYPES = [tdt for _, tdt, _ in wire.WIRE_DTYPES.values()]


def _rand(shape, dtype, gen):
    if dtype == torch.bool:
        return torch.rand(shape, generator=gen) > 0.5
    if dtype.is_floating_point:
        return torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype)
    lo, hi = (0, 255) if dtype == torch.uint8 else (-100, 100)
    return torch.randint(lo, hi, shape, generator=gen, dtype=dtype)


def _bytes(frames):
    """What a socket delivers: separate immutable buffers."""
    return [bytes(memoryview(f).cast("B")) for f in frames]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(), (0,), (3,), (2, 3, 4), (0, 5)])
@pytest.mark.parametrize("secret", [None, b"k3y"])
def test_dense_round_trip(dtype, shape, secret):
    gen = torch.Generator().manual_seed(0)
    t = _rand(shape, dtype, gen)
    frames = encode(Kind.SEND, "fc_0.w_0@GRAD.block1", t, trainer_id=3, seq=2**40,
                    secret=secret)
    m = decode(_bytes(frames), secret=secret)
    assert (m.kind, m.name, m.trainer_id, m.seq) == (Kind.SEND, "fc_0.w_0@GRAD.block1", 3, 2**40)
    assert m.value.dtype == dtype and m.value.shape == t.shape
    assert torch.equal(m.value, t)
    m.value.add_(1) if dtype != torch.bool else m.value.logical_not_()  # owned and writable
    assert not torch.equal(m.value, t) or t.numel() == 0


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_selected_rows_round_trip(dtype):
    gen = torch.Generator().manual_seed(1)
    sr = SelectedRows(torch.tensor([7, 0, 7, 3]), _rand((4, 2, 3), dtype, gen), height=10)
    m = decode(_bytes(encode(Kind.SEND, "emb@GRAD", sr, trainer_id=0)))
    assert isinstance(m.value, SelectedRows) and m.value.height == 10
    assert m.value.rows.tolist() == [7, 0, 7, 3]
    assert m.value.value.dtype == dtype and torch.equal(m.value.value, sr.value)


def test_numpy_non_contiguous_and_text_values():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]
    assert torch.equal(decode(_bytes(encode(Kind.REPLY_VALUE, "x", a))).value,
                       torch.from_numpy(a.copy()))
    assert decode(_bytes(encode(Kind.CHECKPOINT, "", "/tmp/ckpt ü"))).text() == "/tmp/ckpt ü"
    assert decode(_bytes(encode(Kind.REPLY_ERROR, "", "boom"))).text() == "boom"


def test_prefetch_rows_must_be_int64_vector():
    ok = decode(_bytes(encode(Kind.PREFETCH, "emb", torch.tensor([1, 5]))))
    assert ok.value.tolist() == [1, 5]
    with pytest.raises(WireError, match="1-D int64"):
        decode(_bytes(encode(Kind.PREFETCH, "emb", torch.tensor([1.0, 5.0]))))


def test_encode_rejects_bad_input():
    with pytest.raises(ValueError, match="not a valid name"):
        encode(Kind.GET, "w; rm -rf /")
    with pytest.raises(TypeError, match="cannot be sent"):
        encode(Kind.SEND, "w", torch.zeros(2, dtype=torch.complex64))
    with pytest.raises(TypeError, match="expected a torch.Tensor"):
        encode(Kind.SEND, "w", [1, 2])


def _header(**over):
    f = dict(magic=wire.MAGIC, version=wire.VERSION, kind=int(Kind.SEND), code=3, ndim=1,
             flags=0, name=b"w", trainer=0, seq=1, nbytes=8, height=0, step=-1, dims=(2,))
    f.update(over)
    return HEADER.pack(f["magic"], f["version"], f["kind"], f["code"], f["ndim"], f["flags"],
                       len(f["name"]), f["trainer"], f["seq"], f["nbytes"], f["height"],
                       f["step"]) + \
        f["name"] + b"".join(struct.pack("<q", d) for d in f["dims"])


@pytest.mark.parametrize("frames,match", [
    ([], "1 to 4 frames"),
    ([b"PFRP"], "shorter"),
    ([_header(magic=b"XXXX"), b"\0" * 8], "bad magic"),
    ([_header(version=9), b"\0" * 8], "version 9"),
    ([_header(kind=99), b"\0" * 8], "unknown message kind"),
    ([_header(flags=0x80), b"\0" * 8], "flag"),
    ([_header(code=42), b"\0" * 8], "dtype code 42"),
    ([_header(ndim=9, dims=(1,) * 9, nbytes=4), b"\0" * 4], "rank 9"),
    ([_header(dims=(-2,)), b""], "negative dimension"),
    ([_header(nbytes=9), b"\0" * 8], "needs 8"),
    ([_header(), b"\0" * 7], "has 7 bytes"),
    ([_header()], "needs 2 frames"),
    ([_header(), b"\0" * 8, b"\0" * 8], "needs 2 frames"),
    ([_header(name=b"w\xff"), b"\0" * 8], "not ASCII"),
    ([_header(name=b"w w"), b"\0" * 8], "outside"),
    ([_header(name=b""), b"\0" * 8], "without a variable name"),
    ([_header(kind=int(Kind.GET)), b"\0" * 8], "carries no value"),
    ([_header(code=0, ndim=0, dims=(), nbytes=0)], "needs a value"),
    ([_header()[:-1], b"\0" * 8], "fields say"),
    ([_header(trainer=-5), b"\0" * 8], "trainer id"),
    ([_header(step=-2), b"\0" * 8], "step -2"),
    ([_header(dims=(2**40,), nbytes=2**42), b""], "exceeds the limit"),
    ([_header(flags=2, ndim=1, dims=(2,), nbytes=16 + 8, height=1),
      struct.pack("<qq", 0, 1), b"\0" * 8], "outside \\[0, 1\\)"),
    ([_header(kind=int(Kind.PREFETCH), flags=2, nbytes=24, height=5),
      b"\0" * 16, b"\0" * 8], "cannot carry SelectedRows"),
])
def test_decoder_rejects(frames, match):
    with pytest.raises(WireError, match=match):
        decode(frames, max_message_bytes=1 << 20)


def test_bool_payload_bytes_must_be_0_or_1():
    frames = _bytes(encode(Kind.SEND, "mask", torch.tensor([True, False, True])))
    frames[1] = b"\x01\x00\x07"
    with pytest.raises(WireError, match="bool payload"):
        decode(frames)


def test_secret_mismatch_and_missing_mac():
    t = torch.ones(3)
    signed = _bytes(encode(Kind.SEND, "w", t, secret=b"right"))
    assert torch.equal(decode(signed, secret=b"right").value, t)
    with pytest.raises(WireError, match="MAC mismatch"):
        decode(signed, secret=b"wrong")
    with pytest.raises(WireError, match="not authenticated"):
        decode(_bytes(encode(Kind.SEND, "w", t)), secret=b"right")
    tampered = list(signed)
    tampered[1] = b"\0" * len(tampered[1])
    with pytest.raises(WireError, match="MAC mismatch"):
        decode(tampered, secret=b"right")


def test_secret_from_environment(monkeypatch):
    monkeypatch.setenv(wire.SECRET_ENV, "s3")
    assert wire.rpc_secret() == b"s3" and wire.rpc_secret("x") == b"x"
    monkeypatch.delenv(wire.SECRET_ENV)
    assert wire.rpc_secret() is None


def test_fuzz_decoder_only_raises_wire_error_and_respects_the_limit(monkeypatch):
    limit = 4096
    biggest = [0]
    real_alloc = wire._alloc

    def watched_alloc(nbytes):
        biggest[0] = max(biggest[0], nbytes)
        assert nbytes <= limit, f"decoder allocated {nbytes} bytes past the {limit} limit"
        return real_alloc(nbytes)
    monkeypatch.setattr(wire, "_alloc", watched_alloc)

    rng = random.Random(1234)
    seeds = seed_messages()
    counts = {"ok": 0, "rejected": 0}
    t0 = time.monotonic()
    n = 0
    while n < 100_000 and time.monotonic() - t0 < 20:
        frames = rng.choice(seeds)
        for _ in range(rng.randint(1, 3)):
            frames = mutate(rng, frames)
        try:
            m = decode(frames, secret=b"k" if rng.random() < 0.1 else None,
                       max_message_bytes=limit)
            assert isinstance(m, wire.Message)
            counts["ok"] += 1
        except WireError:
            counts["rejected"] += 1
        n += 1
    assert n >= 20_000, f"only {n} frames in the time budget"
    assert counts["rejected"] > n // 2 and counts["ok"] > 100, counts
    assert 0 < biggest[0] <= limit


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_received_frames_become_tensors_without_a_copy(dtype, monkeypatch):
    """A zmq.Frame's memory becomes the tensor (no allocation); a misaligned one is copied."""
    import zmq

    allocated = []
    real_alloc = wire._alloc
    monkeypatch.setattr(wire, "_alloc", lambda n: allocated.append(n) or real_alloc(n))
    gen = torch.Generator().manual_seed(2)
    t = _rand((2, 3, 4), dtype, gen)
    header, payload = encode(Kind.SEND, "w", t, trainer_id=0)
    frames = [zmq.Frame(header), zmq.Frame(bytes(payload))]  # memory of their own
    m = decode(frames)
    assert m.value.dtype == dtype and torch.equal(m.value, t) and not allocated
    assert m.value.data_ptr() == np.frombuffer(frames[1].buffer, np.uint8).ctypes.data
    if t.element_size() > 1:
        raw = bytearray(payload.nbytes + 1)
        raw[1:] = bytes(payload)
        m = decode([zmq.Frame(header), zmq.Frame(memoryview(raw)[1:], copy=False)])
        assert torch.equal(m.value, t) and allocated == [payload.nbytes]
