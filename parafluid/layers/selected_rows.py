"""Layers on row-sparse values (``SelectedRows``): ``merge_selected_rows`` and
``get_tensor_from_selected_rows`` (ops in ``parafluid/ops/selected_rows.py``)."""

from __future__ import annotations

from ..framework import Variable
from .common import append_one, check_vars

__all__ = ["merge_selected_rows", "get_tensor_from_selected_rows"]


def merge_selected_rows(x: Variable, name: str | None = None) -> Variable:
    """A SelectedRows with each row once (repeated rows summed), e.g. of a sparse gradient."""
    check_vars("merge_selected_rows", x=x)
    return append_one("merge_selected_rows", {"X": [x]}, {}, x.dtype, name, stop_gradient=True)


def get_tensor_from_selected_rows(x: Variable, name: str | None = None) -> Variable:
    """The value rows of a SelectedRows as a dense tensor ``[len(rows), ...]``."""
    check_vars("get_tensor_from_selected_rows", x=x)
    return append_one("get_tensor_from_selected_rows", {"X": [x]}, {}, x.dtype, name,
                   stop_gradient=True)
