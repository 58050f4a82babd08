"""Ops on row-sparse values (``SelectedRows``): merge_selected_rows (sum duplicate rows) and
get_tensor_from_selected_rows (the rows as a dense tensor)."""

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
