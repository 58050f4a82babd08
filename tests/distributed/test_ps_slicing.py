"""Slicing variables into pserver blocks and dispatching blocks to endpoints (Fluid's rules)."""

import math
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from parafluid.transpiler.ps_dispatcher import HashName, PSDispatcher, RoundRobin, stable_hash
from parafluid.transpiler.slicing import VarBlock, block_name, slice_variable, split_count

ROOT = Path(__file__).resolve().parents[2]
EPS = ["127.0.0.1:6174", "127.0.0.1:6175"]


def _layout(blocks):
    return [(b.name, b.offset, b.size, b.shape) for b in blocks]


def test_small_variable_stays_whole_under_its_own_name():
    # 1000x10 = 10000 elements over 2 pservers: 10000 // 8192 = 1 block
    assert _layout(slice_variable("fc_0.w_0", (1000, 10), 2)) == \
        [("fc_0.w_0", 0, 10000, (1000, 10))]
    assert split_count((1000, 10), 2) == 1


def test_even_split_in_whole_rows():
    # 1000x20 = 20000: split min(2, 2) = 2, block 10000 = 500 rows
    assert _layout(slice_variable("w", (1000, 20), 2)) == [
        ("w.block0", 0, 10000, (500, 20)), ("w.block1", 10000, 10000, (500, 20))]


def test_block_rounded_up_to_the_row_width_last_block_takes_the_remainder():
    # 1001x20 = 20020: ceil(20020 / 2) = 10010 -> 10020 (501 rows); remainder 10000 (500 rows)
    blocks = slice_variable("w", (1001, 20), 2)
    assert _layout(blocks) == [("w.block0", 0, 10020, (501, 20)),
                               ("w.block1", 10020, 10000, (500, 20))]
    assert [b.row_offset for b in blocks] == [0, 501]
    assert [str(b) for b in blocks] == ["w:0:10020", "w:1:10000"]


def test_rounding_can_reduce_the_number_of_blocks():
    # 5x7000 = 35000 over 4: split min(4, 4) = 4, block 8750 -> 14000 (2 rows): ceil = 3 blocks
    assert _layout(slice_variable("w", (5, 7000), 4)) == [
        ("w.block0", 0, 14000, (2, 7000)), ("w.block1", 14000, 14000, (2, 7000)),
        ("w.block2", 28000, 7000, (1, 7000))]


def test_vector_and_more_pservers_than_blocks():
    # 1-D: row width 1; 100000 over 3: min(3, 12) = 3 blocks of 33334, 33334, 33332
    assert [(b.size, b.shape) for b in slice_variable("b", (100000,), 3)] == \
        [(33334, (33334,)), (33334, (33334,)), (33332, (33332,))]
    # 20000 over 8 pservers: at most 20000 // 8192 = 2 blocks
    assert split_count((20000,), 8) == 2
    assert split_count((20000,), 8, min_block_size=1000) == 8


def test_min_block_size_and_slice_var_up_off():
    assert split_count((1000, 10), 2, min_block_size=100) == 2
    assert _layout(slice_variable("w", (1000, 20), 2, slice_var_up=False)) == \
        [("w", 0, 20000, (1000, 20))]
    assert slice_variable("w", (0, 4), 2) == [VarBlock("w", 0, 0, 0, (0, 4), "w")]
    assert block_name("fc_0.w_0", 3) == "fc_0.w_0.block3"


def test_blocks_cover_the_variable_exactly():
    for shape, n in [((37, 300), 3), ((1, 50000), 2), ((123457,), 5), ((64, 64, 9), 4)]:
        blocks = slice_variable("v", shape, n, min_block_size=1000)
        assert sum(b.size for b in blocks) == math.prod(shape)
        assert all(a.offset + a.size == b.offset for a, b in zip(blocks, blocks[1:]))
        assert len(blocks) <= n


@pytest.mark.parametrize("bad,match", [
    (dict(shape=(-1, 4)), "unknown dims"),
    (dict(n_pservers=0), "n_pservers"),
    (dict(min_block_size=0), "min_block_size"),
])
def test_slice_errors(bad, match):
    args = dict(varname="w", shape=(10, 4), n_pservers=2) | bad
    with pytest.raises(ValueError, match=match):
        slice_variable(**args)


def test_round_robin_cycles_and_carries_over_until_reset():
    rr = RoundRobin(EPS)
    assert rr.dispatch(["a", "b", "c"]) == [EPS[0], EPS[1], EPS[0]]
    assert rr.dispatch(["d"]) == [EPS[1]]
    rr.reset()
    assert rr.dispatch(["e", "f"]) == EPS
    assert RoundRobin(",".join(EPS)).eps == EPS


def test_hash_name_is_stable_and_accepts_variables_and_names():
    hn = HashName(EPS)
    names = ["fc_0.w_0.block0", "fc_0.w_0.block1", "fc_0.b_0", "emb", "x"]
    # CRC-32 (IEEE) of the UTF-8 name: a fixed function, the same in every run and version
    assert stable_hash("hello") == 0x3610A686
    assert [stable_hash(n) % 2 for n in names] == [0, 0, 1, 1, 1]
    assert hn.dispatch(names) == [EPS[0], EPS[0], EPS[1], EPS[1], EPS[1]]
    var = SimpleNamespace(name="fc_0.w_0.block1")          # a Variable: .name
    block = SimpleNamespace(name=lambda: "fc_0.w_0.block1")  # Fluid's VarBlock: .name()
    assert hn.dispatch([var, block]) == [EPS[0], EPS[0]]
    hn.reset()
    assert hn.dispatch(names) == hn.dispatch(names)
    with pytest.raises(TypeError, match="expected variables or names"):
        hn.dispatch([3])


def test_hash_name_agrees_across_processes_with_different_hash_seeds():
    code = ("from parafluid.transpiler.ps_dispatcher import HashName;"
            f"print(HashName({EPS!r}).dispatch(['w.block%d' % i for i in range(16)]))")
    outs = set()
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONHASHSEED=seed)
        outs.add(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                text=True, check=True, timeout=120).stdout)
    assert len(outs) == 1 and len(set(eval(outs.pop()))) == 2  # noqa: S307 - our own output


def test_dispatcher_base():
    with pytest.raises(ValueError, match="at least one"):
        RoundRobin([])
    with pytest.raises(NotImplementedError, match="PSDispatcher must implement"):
        PSDispatcher(EPS).dispatch(["a"])
