"""The signature check carried in an all-reduce's data (parafluid/distributed/data_check.py):
the summed tail says "all agree" exactly when every trainer appended the same hash, with
the sums done in the buffer's own dtype, in any order."""

from __future__ import annotations

import random

import pytest
import torch

from parafluid.distributed.data_check import (
    HASH_BITS,
    check_pairs,
    check_tail,
    signature_hash,
    tail_agrees,
)


def _summed(hashes: list[int], dtype: torch.dtype, order: list[int]) -> list[float]:
    n = len(hashes)
    pairs = check_pairs(dtype, n)
    acc = torch.zeros(2 * pairs, dtype=dtype)
    for t in order:  # the transport's order of additions is its own
        acc += torch.tensor(check_tail(hashes[t], pairs, dtype, n), dtype=dtype)
    return acc.tolist()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n", [2, 3, 8, 16])
def test_the_tail_agrees_iff_every_hash_is_the_same(dtype, n) -> None:
    rng = random.Random(n)
    for _ in range(50):
        h = signature_hash(rng.randrange(100), f"step {rng.randrange(9)}")
        order = rng.sample(range(n), n)
        assert tail_agrees(_summed([h] * n, dtype, order), n)
        other = list([h] * n)
        other[rng.randrange(n)] ^= 1 << rng.randrange(HASH_BITS)  # one bit of one trainer
        assert not tail_agrees(_summed(other, dtype, order), n)


def test_the_pieces_carry_the_whole_hash_exactly() -> None:
    for dtype, n in [(torch.float32, 2), (torch.float32, 16), (torch.float64, 64)]:
        pairs = check_pairs(dtype, n)
        h = (1 << HASH_BITS) - 1  # the largest pieces: their sums of squares stay exact
        assert tail_agrees(_summed([h] * n, dtype, list(range(n))), n)
        assert len(check_tail(h, pairs, dtype, n)) == 2 * pairs


def test_dtypes_that_cannot_carry_it_use_the_separate_check() -> None:
    assert check_pairs(torch.float16, 2) == 0
    assert check_pairs(torch.bfloat16, 2) == 0
    assert check_pairs(torch.int64, 2) == 0
    assert not tail_agrees([float("nan"), 1.0], 2)  # garbage never agrees
