"""How Fluid 1.6's convolution and pooling layers turn their ``padding`` / ``data_format``
arguments into op attributes (shared by layers/nn.py and layers/vision.py)."""

from __future__ import annotations

from typing import Any

__all__ = ["padding_attrs", "check_format", "channel_axis"]

_FORMATS = {2: ("NCHW", "NHWC"), 3: ("NCDHW", "NDHWC")}


def check_format(layer: str, data_format: str, nd: int) -> bool:
    """True for the channel-last format; a format other than Fluid's two raises."""
    if data_format not in _FORMATS[nd]:
        raise ValueError(f"{layer}: data_format must be {_FORMATS[nd][0]!r} or "
                         f"{_FORMATS[nd][1]!r}, got {data_format!r}")
    return data_format == _FORMATS[nd][1]


def channel_axis(nd: int, channel_last: bool) -> int:
    return nd + 1 if channel_last else 1


def int_or_ints(layer: str, name: str, value: Any, n: int) -> list[int]:
    """An int or a list of ``n`` ints (a 1-list repeats), as ``layer``'s ``name``."""
    if isinstance(value, int):
        return [value] * n
    if isinstance(value, (list, tuple)) and all(isinstance(v, int) for v in value):
        if len(value) == 1:
            return [int(value[0])] * n
        if len(value) == n:
            return [int(v) for v in value]
    raise TypeError(f"{layer}: {name} must be an int or a list of {n} ints, got {value!r}")


def padding_attrs(layer: str, padding: Any, nd: int, channel_last: bool,
                  pairs: bool, name: str = "padding") -> tuple[list[int], str]:
    """(``paddings`` attr, ``padding_algorithm`` attr) from a layer's ``padding``.

    Accepted, as in Fluid: 'SAME' / 'VALID'; an int or ``nd`` ints; ``2 * nd`` ints
    (before, after per spatial dim); ``nd + 2`` [before, after] pairs in the data layout
    whose batch and channel pairs are [0, 0]. ``pairs``: the convolutions always write
    ``2 * nd`` values, the poolings ``nd`` unless given pairs.
    """
    if isinstance(padding, str):
        algo = padding.upper()
        if algo not in ("SAME", "VALID"):
            raise ValueError(f"{layer}: {name} {padding!r} must be 'SAME', 'VALID' or numbers")
        return [0] * (2 * nd), algo
    if isinstance(padding, (list, tuple)) and len(padding) == nd + 2 and \
            all(isinstance(p, (list, tuple)) for p in padding):
        rest = (0, nd + 1) if channel_last else (0, 1)
        if any(list(padding[i]) != [0, 0] for i in rest):
            raise ValueError(f"{layer}: non-zero {name} {padding} in the batch or channel "
                             "dimensions is not supported")
        spatial = padding[1:nd + 1] if channel_last else padding[2:]
        return [int(v) for pr in spatial for v in pr], "EXPLICIT"
    if isinstance(padding, (list, tuple)) and len(padding) == 2 * nd:
        return int_or_ints(layer, name, padding, 2 * nd), "EXPLICIT"
    pads = int_or_ints(layer, name, padding, nd)
    if pairs:
        return [p for p in pads for _ in range(2)], "EXPLICIT"
    return pads, "EXPLICIT"
