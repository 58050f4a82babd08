"""Window geometry shared by the convolutions and poolings: layouts, Fluid's padding forms
(``nd`` or ``2 * nd`` paddings, ``padding_algorithm`` 'EXPLICIT' / 'SAME' / 'VALID') and
output sizes.

Fluid's rules (conv_op.h ``UpdatePaddingAndDilation``, pool_op.h ``UpdatePadding``):

- ``paddings`` holds one value per spatial dim (the same before and after) or a
  (before, after) pair per dim: ``[top, bottom, left, right]``, ``[front, back, top, bottom,
  left, right]``;
- 'VALID' zeroes them; 'SAME' pads so that ``out = ceil(in / stride)``: the total
  ``max((out - 1) * stride + k - in, 0)`` is split with the smaller half before; a
  convolution's dilations then become 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from .registry import Meta

__all__ = ["pair", "check_rank", "is_channel_last", "explicit_pads", "window_pads",
           "to_channel_first", "to_channel_last", "spatial_of", "channels_of", "with_layout",
           "pad_input", "crop_padded", "symmetric"]

Pads = list[tuple[int, int]]


def pair(value: Any, name: str, op: str, size: int = 2) -> list[int]:
    """An int or a list of ``size`` ints (Fluid accepts both for strides, paddings, ...)."""
    if isinstance(value, int):
        return [value] * size
    values = [int(v) for v in value]
    if len(values) == 1:
        return values * size
    if len(values) != size:
        raise ValueError(f"{op}: attr {name} must be an int or a list of {size} ints, "
                         f"got {list(value)}")
    return values


def check_rank(op: str, slot: str, meta: Meta, rank: int) -> None:
    if len(meta.shape) != rank:
        raise ValueError(f"{op}: input {slot} must be {rank}-D, got shape {list(meta.shape)}")


def is_channel_last(op: str, attrs: dict, key: str = "data_format") -> bool:
    """True for 'NHWC' / 'NDHWC' (Fluid's 3-D transposed convs say 'NHWC' too)."""
    fmt = str(attrs.get(key) or "NCHW").upper()
    if fmt in ("NHWC", "NDHWC"):
        return True
    if fmt in ("NCHW", "NCDHW", "ANYLAYOUT"):
        return False
    raise ValueError(f"{op}: attr {key} must be 'NCHW', 'NHWC', 'NCDHW' or 'NDHWC', "
                     f"got {attrs.get(key)!r}")


def spatial_of(shape: Sequence[int], channel_last: bool) -> list[int]:
    return list(shape[1:-1]) if channel_last else list(shape[2:])


def channels_of(shape: Sequence[int], channel_last: bool) -> int:
    return shape[-1] if channel_last else shape[1]


def with_layout(batch: int, channels: int, spatial: Sequence[int],
                channel_last: bool) -> tuple[int, ...]:
    """An output shape in the op's layout."""
    if channel_last:
        return (batch, *spatial, channels)
    return (batch, channels, *spatial)


def to_channel_first(x: torch.Tensor, channel_last: bool) -> torch.Tensor:
    """A channel-first view of a channel-last tensor (its memory is torch's channels_last)."""
    if not channel_last:
        return x
    return x.permute(0, x.dim() - 1, *range(1, x.dim() - 1))


def to_channel_last(x: torch.Tensor, channel_last: bool) -> torch.Tensor:
    """Back to the op's layout, as a contiguous tensor."""
    if not channel_last:
        return x
    return x.permute(0, *range(2, x.dim()), 1).contiguous()


def explicit_pads(op: str, value: Any, nd: int) -> Pads:
    """(before, after) per spatial dim from Fluid's ``paddings`` attr."""
    pads = [int(value)] if isinstance(value, int) else [int(p) for p in value]
    if len(pads) == 1:
        pads = pads * nd
    if len(pads) == nd:
        return [(p, p) for p in pads]
    if len(pads) == 2 * nd:
        return [(pads[2 * i], pads[2 * i + 1]) for i in range(nd)]
    raise ValueError(f"{op}: attr paddings must hold {nd} or {2 * nd} ints, got {pads}")


def window_pads(op: str, attrs: dict, spatial: Sequence[int], ksize: Sequence[int],
                strides: Sequence[int]) -> Pads:
    """The paddings after ``padding_algorithm`` (sizes -1 stay unknown: padding 0)."""
    nd = len(spatial)
    algo = str(attrs.get("padding_algorithm") or "EXPLICIT").upper()
    if algo not in ("EXPLICIT", "SAME", "VALID"):
        raise ValueError(f"{op}: attr padding_algorithm must be 'EXPLICIT', 'SAME' or "
                         f"'VALID', got {attrs.get('padding_algorithm')!r}")
    pads = explicit_pads(op, attrs["paddings"], nd)
    if algo == "VALID":
        return [(0, 0)] * nd
    if algo == "SAME":
        # NOTE: Fluid's C++ divides by strides[0] for every dim while its tests' reference
        # (and the documented rule, out = ceil(in / stride)) use each dim's own stride; the
        # two agree for equal strides, and the documented rule is the one kept here.
        pads = []
        for size, k, s in zip(spatial, ksize, strides):
            if size == -1:
                pads.append((0, 0))
                continue
            out = (size + s - 1) // s
            total = max((out - 1) * s + k - size, 0)
            pads.append((total // 2, total - total // 2))
    return pads


def symmetric(pads: Pads) -> bool:
    return all(a == b for a, b in pads)


def pad_input(x: torch.Tensor, pads: Pads, value: float = 0.0) -> torch.Tensor:
    """``x`` (channel-first) padded by (before, after) per spatial dim; negative = crop."""
    flat: list[int] = []
    for before, after in reversed(pads):
        flat += [before, after]
    return F.pad(x, flat, value=value)


def crop_padded(dx: torch.Tensor, pads: Pads) -> torch.Tensor:
    """The inverse of ``pad_input`` for a gradient: the interior of a padded tensor."""
    index = [slice(None), slice(None)]
    for (before, after), size in zip(pads, dx.shape[2:]):
        index.append(slice(before, size - after))
    return dx[tuple(index)]
