"""How the DistributeTranspiler cuts variables into blocks for the parameter servers.

Fluid 1.x's rule (``slice_variable``): a variable of ``numel`` elements goes to
``split = min(n_pservers, max(1, numel // min_block_size))`` blocks; the block size is
``ceil(numel / split)`` rounded up to a multiple of the row width ``prod(shape[1:])`` (so that
blocks are whole rows), after which ``split = ceil(numel / block)``; the last block takes the
remainder. A variable cut into several blocks has blocks named ``name.block0``,
``name.block1``, ...; one that stays whole keeps its name, as in Fluid.

Example::

    [b.name for b in slice_variable("fc_0.w_0", (1001, 20), 2)]
    # ['fc_0.w_0.block0', 'fc_0.w_0.block1']   (rows 0..500 and 501..1000)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["VarBlock", "slice_variable", "block_name", "split_count", "DEFAULT_MIN_BLOCK_SIZE"]

DEFAULT_MIN_BLOCK_SIZE = 8192  # elements; Fluid's DistributeTranspilerConfig.min_block_size


@dataclass(frozen=True)
class VarBlock:
    """Block ``block_id`` of variable ``varname``: ``size`` elements from element ``offset``.

    ``shape`` is the block's shape (whole rows of the original); ``name`` what the block is
    called on the wire and in the pserver program.
    """

    varname: str
    block_id: int
    offset: int
    size: int
    shape: tuple[int, ...]
    name: str

    @property
    def row_offset(self) -> int:
        """The first row of the original variable that this block holds."""
        width = math.prod(self.shape[1:])
        return self.offset // width if width else 0

    def __str__(self) -> str:  # Fluid's VarBlock string: "name:block_id:size"
        return f"{self.varname}:{self.block_id}:{self.size}"


def block_name(varname: str, block_id: int) -> str:
    """``fc_0.w_0``, 1 -> ``fc_0.w_0.block1``."""
    return f"{varname}.block{block_id}"


def _block_size(shape: Sequence[int], n: int, min_block_size: int) -> int:
    numel = math.prod(shape)
    split = min(n, max(1, numel // min_block_size))
    block = math.ceil(numel / split)
    width = math.prod(shape[1:]) if len(shape) >= 2 else 1
    if width and block % width:
        block += width - block % width  # NOTE: blocks hold whole rows, so split can shrink
    return block


def split_count(shape: Sequence[int], n_pservers: int,
                min_block_size: int = DEFAULT_MIN_BLOCK_SIZE) -> int:
    """How many blocks a variable of ``shape`` is cut into over ``n_pservers`` pservers."""
    return len(slice_variable("v", shape, n_pservers, min_block_size))


def slice_variable(varname: str, shape: Sequence[int], n_pservers: int,
                   min_block_size: int = DEFAULT_MIN_BLOCK_SIZE,
                   slice_var_up: bool = True) -> list[VarBlock]:
    """The blocks of variable ``varname`` of ``shape`` over ``n_pservers`` pservers.

    With ``slice_var_up=False`` (or one pserver, or a variable smaller than two blocks) the
    result is one block holding the whole variable under its own name.
    """
    shape = tuple(int(d) for d in shape)
    if any(d < 0 for d in shape):
        raise ValueError(f"slice_variable: {varname!r} has unknown dims in shape {list(shape)}; "
                         "only parameters with a fixed shape can be sliced")
    if not isinstance(n_pservers, int) or n_pservers < 1:
        raise ValueError(f"slice_variable: n_pservers must be an int >= 1, got {n_pservers!r}")
    if not isinstance(min_block_size, int) or min_block_size < 1:
        raise ValueError(f"slice_variable: min_block_size must be an int >= 1, got "
                         f"{min_block_size!r}")
    numel = math.prod(shape)
    if not slice_var_up or numel == 0:
        return [VarBlock(varname, 0, 0, numel, shape, varname)]
    block = _block_size(shape, n_pservers, min_block_size)
    count = math.ceil(numel / block)
    if count == 1:
        return [VarBlock(varname, 0, 0, numel, shape, varname)]
    width = math.prod(shape[1:]) if len(shape) >= 2 else 1
    out = []
    for i in range(count):
        size = min(block, numel - i * block)
        bshape = (size // width, *shape[1:]) if len(shape) >= 2 else (size,)
        out.append(VarBlock(varname, i, i * block, size, bshape, block_name(varname, i)))
    return out
