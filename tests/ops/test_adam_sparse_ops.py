"""adam with a row-sparse (SelectedRows) gradient, and with outputs that are other variables
than its inputs, against references written from Fluid 1.6's kernel
(paddle/fluid/operators/optimizers/adam_op.h):

- not lazy: every row is updated, a row without gradient with g = 0 (its moments decay);
- ``lazy_mode``: only the gradient's rows (repeated rows summed) are written; the other rows
  of ``ParamOut``/``Moment1Out``/``Moment2Out`` keep what those variables held;
- a gradient with no rows: the kernel returns at once, lazy or not (nothing is written);
- ``Param``/``Moment1``/``Moment2`` are only read: an output naming another variable leaves
  the input as it was.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from parafluid import core
from parafluid.op import Operator
from parafluid.scope import SelectedRows
from parafluid.testing import OpCase, check_op, rand

_H, _W = 5, 3
_B1, _B2, _EPS = 0.8, 0.7, 1e-4


def _grad(rows: list[int], seed: int = 31) -> SelectedRows:
    value = torch.from_numpy(rand(len(rows), _W, seed=seed))
    return SelectedRows(torch.tensor(rows, dtype=torch.int64), value, _H)


def _ins(grad: SelectedRows) -> dict:
    return {"Param": rand(_H, _W, seed=32), "Grad": grad, "LearningRate": np.array([0.1]),
            "Moment1": rand(_H, _W, seed=33),
            "Moment2": rand(_H, _W, low=0.1, high=1.0, seed=34),
            "Beta1Pow": np.array([_B1 ** 2]), "Beta2Pow": np.array([_B2 ** 2])}


def _sparse_adam(Param, Grad, LearningRate, Moment1, Moment2, Beta1Pow, Beta2Pow, attrs,
                 outs=None):
    """Fluid's sparse adam step; ``outs``: what the output variables held (default: the
    inputs, the in-place update)."""
    p, m1, m2 = (np.array(v, dtype=np.float64) for v in
                 (outs or (Param, Moment1, Moment2)))
    rows, value = Grad.rows.numpy(), Grad.value.numpy()
    if len(rows) == 0:
        return {"ParamOut": p, "Moment1Out": m1, "Moment2Out": m2}
    g = np.zeros((Grad.height, value.shape[1]))
    np.add.at(g, rows, value)
    b1, b2, eps = attrs["beta1"], attrs["beta2"], attrs["epsilon"]
    lr = LearningRate * np.sqrt(1 - Beta2Pow) / (1 - Beta1Pow)
    touched = sorted(set(rows.tolist())) if attrs["lazy_mode"] else range(Grad.height)
    for r in touched:
        m1[r] = b1 * Moment1[r] + (1 - b1) * g[r]
        m2[r] = b2 * Moment2[r] + (1 - b2) * g[r] * g[r]
        p[r] = Param[r] - lr * m1[r] / (np.sqrt(m2[r]) + eps)
    return {"ParamOut": p, "Moment1Out": m1, "Moment2Out": m2}


_ATTRS = {"beta1": _B1, "beta2": _B2, "epsilon": _EPS}

ADAM_SPARSE_CASES = [
    OpCase("adam", _ins(_grad([3, 0, 3])), attrs=dict(_ATTRS), ref=_sparse_adam,
           id="adam_sparse_repeated_rows"),
    OpCase("adam", _ins(_grad([3, 0, 3])), attrs={**_ATTRS, "lazy_mode": True}, ref=_sparse_adam,
           id="adam_sparse_lazy_repeated_rows"),
    # no rows: Fluid's kernel returns before writing anything, lazy or not
    OpCase("adam", _ins(_grad([])), attrs=dict(_ATTRS), ref=_sparse_adam, id="adam_sparse_no_rows"),
    OpCase("adam", _ins(_grad([])), attrs={**_ATTRS, "lazy_mode": True}, ref=_sparse_adam,
           id="adam_sparse_lazy_no_rows"),
]


@pytest.mark.parametrize("case", ADAM_SPARSE_CASES, ids=str)
def test_op(case):
    check_op(case)


_STATE = ("Param", "Moment1", "Moment2")
_OUTS = ("ParamOut", "Moment1Out", "Moment2Out")


def _run_adam(grad: SelectedRows | np.ndarray, lazy: bool, held: np.ndarray | None):
    """Run adam through ``Operator`` with outputs distinct from the inputs; ``held``: what
    each output variable holds beforehand (None: no output variable yet). Returns the scope's
    arrays by name and the inputs."""
    ins = _ins(grad if isinstance(grad, SelectedRows) else _grad([0]))
    scope, place = core.Scope(), core.CPUPlace()
    if isinstance(grad, SelectedRows):
        rows = scope.var("Grad").get_selected_rows()
        rows.set_height(grad.height)
        rows.set_rows(grad.rows.tolist())
        rows.get_tensor().set(grad.value.numpy(), place)
    else:
        scope.var("Grad").get_tensor().set(grad, place)
    for name, value in ins.items():
        if name != "Grad":
            scope.var(name).get_tensor().set(value, place)
    if held is not None:
        for name in _OUTS:
            scope.var(name).get_tensor().set(held, place)
    Operator("adam", **{n: n for n in ins}, **{n: n for n in _OUTS}, lazy_mode=lazy,
             **_ATTRS).run(scope, place)
    got = {n: np.array(scope.find_var(n).get_tensor()) for n in _STATE + _OUTS}
    return got, ins


@pytest.mark.parametrize("lazy", [False, True], ids=["dense_update", "lazy"])
def test_sparse_adam_distinct_outputs(lazy):
    held = np.full((_H, _W), -7.0)
    grad = _grad([3, 1])
    got, ins = _run_adam(grad, lazy, held)
    want = _sparse_adam(**ins, attrs={**_ATTRS, "lazy_mode": lazy}, outs=(held,) * 3)
    for name in _OUTS:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-12, err_msg=name)
    if lazy:  # the rows without gradient keep what the output variables held
        np.testing.assert_array_equal(got["ParamOut"][[0, 2, 4]], held[[0, 2, 4]])
    for name in _STATE:  # the inputs are only read
        np.testing.assert_array_equal(got[name], ins[name], err_msg=name)


def test_sparse_adam_no_rows_keeps_distinct_outputs():
    held = np.full((_H, _W), -7.0)
    got, ins = _run_adam(_grad([]), False, held)
    for name in _OUTS:
        np.testing.assert_array_equal(got[name], held, err_msg=name)
    for name in _STATE:
        np.testing.assert_array_equal(got[name], ins[name], err_msg=name)


def test_lazy_sparse_adam_fresh_outputs_start_from_inputs():
    # output variables holding nothing: the untouched rows are the inputs' (Fluid's would be
    # unset memory)
    got, ins = _run_adam(_grad([2]), True, None)
    want = _sparse_adam(**ins, attrs={**_ATTRS, "lazy_mode": True})
    for name in _OUTS:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-12, err_msg=name)
    for name in _STATE:
        np.testing.assert_array_equal(got[name], ins[name], err_msg=name)


def test_dense_adam_distinct_outputs_leave_inputs():
    g = rand(_H, _W, seed=35)
    got, ins = _run_adam(g, False, None)
    dense = SelectedRows(torch.arange(_H), torch.from_numpy(g), _H)
    want = _sparse_adam(**{**ins, "Grad": dense}, attrs={**_ATTRS, "lazy_mode": False})
    for name in _OUTS:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-12, err_msg=name)
    for name in _STATE:
        np.testing.assert_array_equal(got[name], ins[name], err_msg=name)
