"""``fluid.io.multiprocess_reader``: readers in child processes, merged as Fluid merges them,
samples in parafluid's own encoding (never pickle), failures naming the reader, no child
left running."""

from __future__ import annotations

import multiprocessing
import os
import signal
import struct
import time

import numpy as np
import pytest

import parafluid as fluid
from parafluid.dataio.multiprocess_reader import decode_sample, encode_sample

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def part(lo: int, hi: int):
    def reader():
        for i in range(lo, hi):
            yield np.arange(i, i + 6, dtype="float32").reshape(2, 3), i, [np.int64(i), "s"]
    return reader


def no_children_left() -> bool:
    return not multiprocessing.active_children()


def test_pipe_mode_takes_the_readers_in_turn():
    merged = fluid.io.multiprocess_reader(readers=[part(0, 3), part(10, 14)], use_pipe=True,
                                          queue_size=4)
    samples = list(merged())
    assert [s[1] for s in samples] == [0, 10, 1, 11, 2, 12, 13]
    for arr, i, rest in samples:
        np.testing.assert_array_equal(arr, np.arange(i, i + 6, dtype="float32").reshape(2, 3))
        assert arr.dtype == np.float32 and rest == [i, "s"]
    assert no_children_left()


def test_queue_mode_yields_every_sample_of_every_reader():
    merged = fluid.io.multiprocess_reader([part(0, 40), part(100, 130), part(200, 201)],
                                          use_pipe=False, queue_size=6)
    got = sorted(s[1] for s in merged())
    assert got == [*range(40), *range(100, 130), 200]
    assert no_children_left()
    batches = list(fluid.io.batch(merged, 8)())   # an ordinary reader for the decorators
    assert sum(len(b) for b in batches) == 71


@pytest.mark.parametrize("use_pipe", [True, False])
def test_a_reader_that_raises_is_named(use_pipe):
    def bad():
        yield np.zeros(2, "float32"), 0
        raise ZeroDivisionError("no more data here")

    merged = fluid.io.multiprocess_reader([part(0, 3), bad], use_pipe=use_pipe)
    with pytest.raises(RuntimeError, match=r"reader 1 \(pid \d+\) raised ZeroDivisionError: "
                                           r"no more data here"):
        list(merged())
    assert no_children_left()


@pytest.mark.parametrize("use_pipe", [True, False])
def test_a_child_that_dies_is_named(use_pipe):
    def dies():
        yield np.zeros(2, "float32"), 0
        os.kill(os.getpid(), signal.SIGKILL)
        yield np.zeros(2, "float32"), 1

    merged = fluid.io.multiprocess_reader([dies, part(0, 1000)], use_pipe=use_pipe,
                                          queue_size=4)
    with pytest.raises(RuntimeError, match=r"reader 0 \(pid \d+\) died \(exit code -9\)"):
        list(merged())
    assert no_children_left()


def test_a_none_sample_and_an_unsendable_one_are_errors():
    def nones():
        yield None

    with pytest.raises(RuntimeError, match=r"reader 0 .* yielded None"):
        list(fluid.io.multiprocess_reader([nones])())

    def objects():
        yield object()

    with pytest.raises(RuntimeError, match=r"reader 0 .*TypeError: multiprocess_reader: a "
                                           r"sample holds a object"):
        list(fluid.io.multiprocess_reader([objects], use_pipe=False)())
    assert no_children_left()


def test_stopping_early_stops_the_children():
    def endless():
        i = 0
        while True:
            yield np.zeros(1000, "float32"), i
            i += 1

    it = fluid.io.multiprocess_reader([endless, endless], use_pipe=False, queue_size=2)()
    assert [next(it)[0].shape for _ in range(5)] == [(1000,)] * 5
    it.close()
    deadline = time.monotonic() + 10
    while not no_children_left() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert no_children_left()


def test_the_encoding_round_trips_and_refuses_malformed_bytes():
    sample = (np.arange(12, dtype="int64").reshape(3, 4), np.float16(1.5), True, -7, 2.5,
              "text", b"raw", [np.zeros((0, 2), "uint8"), (1, [2])])
    back = decode_sample(encode_sample(sample))
    np.testing.assert_array_equal(back[0], sample[0])
    assert back[1:7] == (1.5, True, -7, 2.5, "text", b"raw")
    assert back[7][0].shape == (0, 2) and back[7][1] == (1, [2])

    good = encode_sample(np.ones([2, 2], "float32"))
    with pytest.raises(ValueError, match="needs 16 bytes"):
        decode_sample(good[:-1])           # truncated data
    with pytest.raises(ValueError, match="dtype 'object'"):
        decode_sample(b"a\x06object\x01" + struct.pack("<Q", 1) + b"\0" * 8)
    huge = b"a\x07float32\x02" + struct.pack("<2Q", 1 << 40, 1 << 40)
    with pytest.raises(ValueError, match=r"array of shape \[1099511627776, 1099511627776\]"):
        decode_sample(huge)                # refused before anything is allocated
    with pytest.raises(ValueError, match="list of 1000000000 items"):
        decode_sample(b"l" + struct.pack("<Q", 10 ** 9))
    with pytest.raises(ValueError, match="unknown tag b'p'"):
        decode_sample(b"p\x80\x04")        # a pickle is not a sample
    with pytest.raises(ValueError, match="bytes after the sample"):
        decode_sample(good + b"\0")


@pytest.mark.parametrize("use_pipe", [True, False])
def test_many_small_samples_flow_without_a_stall(use_pipe):
    def ints():
        yield from range(100_000)

    merged = fluid.io.multiprocess_reader([ints], use_pipe=use_pipe, queue_size=1_000_000)
    assert sum(merged()) == sum(range(100_000))
    assert no_children_left()


@pytest.mark.parametrize("use_pipe", [True, False])
def test_a_child_that_hangs_after_its_first_sample_is_named_at_the_deadline(monkeypatch,
                                                                             use_pipe):
    monkeypatch.setenv("FLAGS_reader_deadline", "1500")

    def hangs():
        yield 1
        time.sleep(600)

    def fine():
        yield from range(10, 13)

    merged = fluid.io.multiprocess_reader([fine, hangs], use_pipe=use_pipe)
    got = []
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"reader 1 \(pid \d+\) sent no sample for "
                                           r"[\d.]+ s and is still running"):
        for sample in merged():
            got.append(sample)
    assert 1 in got and time.monotonic() - start < 60
