"""Ops on row-sparse values (``SelectedRows``): merge_selected_rows (sum duplicate rows) and
get_tensor_from_selected_rows (the rows as a dense tensor), lookup_rows (the rows of a
dense table that a SelectedRows touches, as a SelectedRows)."""

from __future__ import annotations

from typing import Any

from ..dtypes import VarType
from ..scope import SelectedRows
from .registry import Meta, register_op

__all__: list[str] = []


# ----------------------------------------------------------------------------- SelectedRows


def _selected_rows_only(op: str, meta: Meta) -> None:
    if meta.type != VarType.SELECTED_ROWS:
        raise TypeError(f"{op}: X must be a SelectedRows variable (e.g. the gradient of a "
                        f"sparse embedding), got a {meta.type}")


def _merge_selected_rows_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    _selected_rows_only("merge_selected_rows", x)
    return {"Out": x}


def _check_selected(op: str, x: Any) -> SelectedRows:
    if not isinstance(x, SelectedRows):
        raise TypeError(f"{op}: X must hold a SelectedRows at run time, got a dense tensor")
    return x


register_op("merge_selected_rows", inputs=("X",), outputs=("Out",),
            infer_shape=_merge_selected_rows_shape,
            kernel=lambda ins, attrs, ctx: {"Out": _check_selected(
                "merge_selected_rows", ins["X"]).merged()})


def _rows_tensor_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    _selected_rows_only("get_tensor_from_selected_rows", x)
    return {"Out": Meta((-1, *x.shape[1:]), x.dtype)}


register_op("get_tensor_from_selected_rows", inputs=("X",), outputs=("Out",),
            infer_shape=_rows_tensor_shape,
            kernel=lambda ins, attrs, ctx: {"Out": _check_selected(
                "get_tensor_from_selected_rows", ins["X"]).value.clone()})


def _lookup_rows_shape(ins: dict, attrs: dict) -> dict:
    w, x = ins["W"], ins["X"]
    _selected_rows_only("lookup_rows", x)
    return {"Out": Meta(w.shape, w.dtype, VarType.SELECTED_ROWS)}


def _lookup_rows(ins: dict, attrs: dict, ctx: Any) -> dict:
    import torch

    w, x = ins["W"], _check_selected("lookup_rows", ins["X"])
    if x.height != w.shape[0]:
        raise ValueError(f"lookup_rows: X is a SelectedRows of height {x.height} but W has "
                         f"{w.shape[0]} rows; X must index W's rows")
    rows = torch.unique(x.rows.reshape(-1).long())
    return {"Out": SelectedRows(rows, w.index_select(0, rows.to(w.device)), w.shape[0])}


# NOTE: what weight decay on a sparse gradient reads (regularizer.py): the rows of the
# parameter its gradient touches, each once, so that untouched rows are left alone
register_op("lookup_rows", inputs=("W", "X"), outputs=("Out",),
            infer_shape=_lookup_rows_shape, kernel=_lookup_rows)
