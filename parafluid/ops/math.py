"""Math ops: matrix products (mul, matmul, bilinear_tensor_product), Fluid-broadcast
elementwise ops (add, sub, mul, div, max, min, pow, and the integer mod / floordiv, which have
no gradient, as in Fluid), sum, mean, scale, cos_sim and cumsum."""

from __future__ import annotations

from typing import Any

import torch

from ..dtypes import VarType
from ..scope import SelectedRows
from .common import (
    add_grads,
    axis_in_range,
    axis_view_shape,
    broadcast_meta,
    broadcast_y,
    mm,
    numel,
    unbroadcast,
)
from .registry import Meta, register_op, same_as

# ----------------------------------------------------------------------------- mul


def _flat2d(shape: Any, k: int) -> tuple[int, int]:
    return numel(shape[:k]), numel(shape[k:])


def _mul_shape(ins: dict, attrs: dict) -> dict:
    x, y = ins["X"], ins["Y"]
    xk, yk = attrs["x_num_col_dims"], attrs["y_num_col_dims"]
    x_cols = numel(x.shape[xk:])
    y_rows = numel(y.shape[:yk])
    if -1 not in x.shape[xk:] and -1 not in y.shape[:yk] and x_cols != y_rows:
        raise ValueError(f"mul: X {list(x.shape)} flattened at x_num_col_dims={xk} has "
                         f"{x_cols} columns but Y {list(y.shape)} flattened at "
                         f"y_num_col_dims={yk} has {y_rows} rows")
    return {"Out": Meta(tuple(x.shape[:xk]) + tuple(y.shape[yk:]), x.dtype)}


def _mul(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, y = ins["X"], ins["Y"]
    if x.dim() == 2 and y.dim() == 2:  # the fc case: nothing to flatten (hot path)
        return {"Out": mm(x, y)}
    xk, yk = attrs["x_num_col_dims"], attrs["y_num_col_dims"]
    out = mm(x.reshape(_flat2d(x.shape, xk)), y.reshape(_flat2d(y.shape, yk)))
    return {"Out": out.reshape(*x.shape[:xk], *y.shape[yk:])}


def _mul_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, y, dout = ins["X"], ins["Y"], ins["Out@GRAD"]
    if x.dim() == 2 and y.dim() == 2:
        x2, y2, d2 = x, y, dout
    else:
        xk, yk = attrs["x_num_col_dims"], attrs["y_num_col_dims"]
        x2, y2 = x.reshape(_flat2d(x.shape, xk)), y.reshape(_flat2d(y.shape, yk))
        d2 = dout.reshape(x2.shape[0], y2.shape[1])
    out = {}
    if "X" in ctx.need:
        out["X@GRAD"] = mm(d2, y2.t()).reshape(x.shape)
    if "Y" in ctx.need:
        out["Y@GRAD"] = mm(x2.t(), d2).reshape(y.shape)
    return out


# NOTE: use_mkldnn and the int8 scales (scale_x, scale_y, scale_out, force_fp32_output) are
# Fluid's MKL-DNN kernel's; its float kernel computes the same product whatever they hold
register_op("mul", inputs=("X", "Y"), outputs=("Out",),
            attrs={"x_num_col_dims": 1, "y_num_col_dims": 1, "use_mkldnn": False,
                   "scale_x": 1.0, "scale_y": [1.0], "scale_out": 1.0,
                   "force_fp32_output": False},
            infer_shape=_mul_shape, kernel=_mul, grad_kernel=_mul_grad, grad_uses=("X", "Y"),
            share_lod=("X", "Out"), fresh_output=True)

# ----------------------------------------------------------------------------- elementwise


def _elementwise_shape(ins: dict, attrs: dict) -> dict:
    return {"Out": broadcast_meta(ins["X"], ins["Y"], attrs["axis"])}


def _sparse_by_scalar_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    if x.type == VarType.SELECTED_ROWS:  # stays row-sparse (see the kernel)
        return {"Out": Meta(tuple(x.shape), x.dtype, VarType.SELECTED_ROWS)}
    return _elementwise_shape(ins, attrs)


_SPARSE_BY_SCALAR = frozenset({"elementwise_mul", "elementwise_div"})


def _register_elementwise(name: str, fn: Any, grad_fn: Any, uses: tuple[str, ...],
                          inplace: str | None = None) -> None:
    """``grad_fn(x, y, out, dout) -> (dx, dy)`` on broadcast operands, before unbroadcast.
    ``inplace``: the in-place torch method computing ``fn`` into X (``"add_"``)."""

    def kernel(ins: dict, attrs: dict, ctx: Any) -> dict:
        x, y = ins["X"], ins["Y"]
        if isinstance(x, SelectedRows) and name in _SPARSE_BY_SCALAR:
            # NOTE: a row-sparse tensor times or over one number stays row-sparse (mixed
            # precision divides each gradient, sparse ones too, by the loss scaling)
            if not isinstance(y, torch.Tensor) or y.numel() != 1:
                raise ValueError(f"{name}: a SelectedRows X takes a one-element Y, got Y of "
                                 f"shape {list(getattr(y, 'shape', []))}")
            return {"Out": SelectedRows(x.rows, fn(x.value, y.reshape(())), x.height)}
        if not _trailing(x, y, attrs["axis"]):
            y = broadcast_y(x, y, attrs["axis"])
        return {"Out": fn(x, y)}

    def grad(ins: dict, attrs: dict, ctx: Any) -> dict:
        x, y, dout = ins["X"], ins["Y"], ins["Out@GRAD"]
        trailing = _trailing(x, y, attrs["axis"])
        yb = y if trailing else broadcast_y(x, y, attrs["axis"])
        dx, dy = grad_fn(x, yb, ins.get("Out"), dout, ctx.need)
        out = {}
        if "X" in ctx.need:
            out["X@GRAD"] = unbroadcast(dx, x.shape)
        if "Y" in ctx.need:
            if trailing:
                out["Y@GRAD"] = unbroadcast(dy, y.shape)
            else:
                view = axis_view_shape(x.shape, y.shape, attrs["axis"])
                out["Y@GRAD"] = unbroadcast(dy, view).reshape(y.shape)
        return out

    def update(x: torch.Tensor, y: torch.Tensor, attrs: dict) -> None:
        y = broadcast_y(x, y, attrs["axis"])
        if inplace == "div_" and not x.is_floating_point():
            _check_int_divisor(name, y)
            x.div_(y, rounding_mode="trunc")
        else:
            getattr(x, inplace)(y)

    register_op(name, inputs=("X", "Y"), outputs=("Out",), attrs={"axis": -1},
                infer_shape=_sparse_by_scalar_shape if name in _SPARSE_BY_SCALAR
                else _elementwise_shape, kernel=kernel, grad_kernel=grad,
                grad_uses=uses, share_lod=("X", "Out"), inplace=update if inplace else None,
                fresh_output=True)


def _trailing(x: torch.Tensor, y: torch.Tensor, axis: int) -> bool:
    """True when Fluid's ``axis`` rule lines ``y`` up with ``x``'s last dims, where plain
    (numpy) broadcasting gives the same result without building a view shape (hot path:
    every fc bias add)."""
    return axis == -1 or y.dim() == x.dim() or axis == x.dim() - y.dim()


def _check_int_divisor(name: str, y: torch.Tensor) -> None:
    if not y.is_floating_point() and bool((y == 0).any()):
        raise ValueError(f"{name}: integer division by zero (a zero in Y)")


def _div(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Fluid's ``x / y`` in the operands' type: integers divide as C++ integers do,
    truncating toward zero (torch's ``/`` would return floats)."""
    if x.is_floating_point() or y.is_floating_point():
        return x / y
    _check_int_divisor("elementwise_div", y)
    return torch.div(x, y, rounding_mode="trunc")


def _pow(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Fluid's ``std::pow(x, y)`` cast back to the operands' type: an integer power is
    computed in double and truncated, so a negative exponent gives 0 (or +-1 for +-1),
    where torch refuses integers to negative powers."""
    if x.is_floating_point() or y.is_floating_point():
        return torch.pow(x, y)
    return torch.pow(x.double(), y.double()).trunc().to(x.dtype)


def _div_grad(x: Any, y: Any, out: Any, d: Any, need: Any) -> tuple:
    dx = d / y if "X" in need else None
    dy = -d * x / (y * y) if "Y" in need else None
    return dx, dy


def _pow_grad(x: Any, y: Any, out: Any, d: Any, need: Any) -> tuple:
    dx = d * y * torch.pow(x, y - 1) if "X" in need else None
    dy = d * torch.pow(x, y) * torch.log(x) if "Y" in need else None
    return dx, dy


def _select_grad(pick_x: Any) -> Any:
    def grad(x: Any, y: Any, out: Any, d: Any, need: Any) -> tuple:
        mask = pick_x(x, y)
        zero = torch.zeros((), dtype=d.dtype, device=d.device)
        return torch.where(mask, d, zero), torch.where(mask, zero, d)
    return grad


_register_elementwise("elementwise_add", torch.add,
                      lambda x, y, o, d, n: (d, d), ("X", "Y"), inplace="add_")
_register_elementwise("elementwise_sub", torch.sub,
                      lambda x, y, o, d, n: (d, -d), ("X", "Y"), inplace="sub_")
_register_elementwise("elementwise_mul", torch.mul,
                      lambda x, y, o, d, n: (d * y if "X" in n else None,
                                             d * x if "Y" in n else None), ("X", "Y"),
                      inplace="mul_")
_register_elementwise("elementwise_div", _div, _div_grad, ("X", "Y"), inplace="div_")
_register_elementwise("elementwise_max", torch.maximum, _select_grad(lambda x, y: x >= y),
                      ("X", "Y"))
_register_elementwise("elementwise_min", torch.minimum, _select_grad(lambda x, y: x <= y),
                      ("X", "Y"))
_register_elementwise("elementwise_pow", _pow, _pow_grad, ("X", "Y"))

# ----------------------------------------------------------------------------- sum / mean / scale


def _sum_shape(ins: dict, attrs: dict) -> dict:
    metas = [m for m in ins["X"] if m is not None]
    if not metas:
        raise ValueError("sum: no inputs")
    first = metas[0]
    for m in metas[1:]:
        if len(m.shape) != len(first.shape):
            raise ValueError(f"sum: inputs have different ranks: {[list(m.shape) for m in metas]}")
    if all(m.type == "lod_tensor_array" for m in metas):
        return {"Out": first}
    dense = any(m.type != "selected_rows" for m in metas)
    return {"Out": Meta(first.shape, first.dtype, "lod_tensor" if dense else "selected_rows")}


def _sum(ins: dict, attrs: dict, ctx: Any) -> dict:
    xs = [x for x in ins["X"] if x is not None]
    if any(isinstance(x, list) for x in xs):  # gradients of a tensor array: slot by slot
        out = xs[0]
        for x in xs[1:]:
            out = add_grads(out, x)
        return {"Out": out}
    # NOTE: a fixed left-to-right order keeps results bitwise reproducible.
    if all(isinstance(x, SelectedRows) for x in xs):
        # Fluid's MergeAdd: each row once (sorted), the rows of every input added up; an
        # input listing no rows adds nothing
        full = [x for x in xs if len(x.rows)]
        if not full:
            return {"Out": SelectedRows(xs[0].rows[:0], xs[0].value[:0], xs[0].height)}
        return {"Out": SelectedRows(torch.cat([x.rows for x in full]),
                                    torch.cat([x.value[:len(x.rows)] for x in full]),
                                    full[0].height).merged()}
    dense = [x for x in xs if not isinstance(x, SelectedRows)]
    out = dense[0].clone() if len(dense) == 1 else dense[0] + dense[1]
    for x in dense[2:]:
        out += x
    for x in xs:
        if isinstance(x, SelectedRows):
            out.index_add_(0, x.rows, x.value)
    return {"Out": out}


register_op("sum", inputs=("X[]",), outputs=("Out",), infer_shape=_sum_shape, kernel=_sum,
            grad=lambda op, no_grad, ctx: [
                {"type": "assign", "inputs": {"X": [op.output("Out")[0] + "@GRAD"]},
                 "outputs": {"Out": [x + "@GRAD"]}, "attrs": {}}
                for x in op.input("X") if x not in no_grad],
            share_lod=("X", "Out"))


def _mean(ins: dict, attrs: dict, ctx: Any) -> dict:
    return {"Out": ins["X"].mean().reshape(1)}


def _mean_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, d = ins["X"], ins["Out@GRAD"]
    return {"X@GRAD": (d.reshape(()) / x.numel()).expand(x.shape).contiguous()}


register_op("mean", inputs=("X",), outputs=("Out",),
            infer_shape=lambda ins, attrs: {"Out": Meta((1,), ins["X"].dtype)},
            kernel=_mean, grad_kernel=_mean_grad, grad_uses=("X",))


def _scale_factors(x: Any, attrs: dict) -> tuple[Any, Any]:
    # NOTE: as Fluid's kernel, an integer tensor is scaled by static_cast<T>(scale) and
    # static_cast<T>(bias) (truncated toward zero), so `i + 1` of an int64 counter stays
    # int64, as its variable declares
    s, b = attrs["scale"], attrs["bias"]
    if isinstance(x, torch.Tensor) and not x.is_floating_point() and x.dtype != torch.bool:
        return int(s), int(b)
    return s, b


def _scale_inplace(x: torch.Tensor, y: Any, attrs: dict) -> None:
    s, b = _scale_factors(x, attrs)
    if b == 0.0:
        x.mul_(s)
    elif attrs["bias_after_scale"]:
        x.mul_(s).add_(b)
    else:
        x.add_(b).mul_(s)


def _scale(ins: dict, attrs: dict, ctx: Any) -> dict:
    x = ins["X"]
    s, b = _scale_factors(x, attrs)
    if isinstance(x, SelectedRows):
        return {"Out": SelectedRows(x.rows, x.value * s, x.height)}
    if b == 0.0:
        return {"Out": x * s}
    return {"Out": x * s + b if attrs["bias_after_scale"] else (x + b) * s}


register_op("scale", inputs=("X",), outputs=("Out",),
            attrs={"scale": 1.0, "bias": 0.0, "bias_after_scale": True},
            infer_shape=same_as("X"), kernel=_scale, inplace=_scale_inplace,
            grad=lambda op, no_grad, ctx: [] if op.input("X")[0] in no_grad else [
                {"type": "scale", "inputs": {"X": [op.output("Out")[0] + "@GRAD"]},
                 "outputs": {"Out": [op.input("X")[0] + "@GRAD"]},
                 "attrs": {"scale": op.attr("scale"), "bias": 0.0}}],
            share_lod=("X", "Out"))

# ----------------------------------------------------------------------------- matmul


def _matmul_2d(x: Any, y: Any, attrs: dict) -> tuple[Any, Any]:
    """Fluid's matmul operands as matrices: a 1-D X is the row ``[1, K]`` and a 1-D Y the
    column ``[K, 1]``, both *before* ``transpose_X`` / ``transpose_Y`` swap the last two
    dims (so a transposed 1-D X is a column and a transposed 1-D Y a row)."""
    x2 = x.unsqueeze(0) if x.dim() == 1 else x
    y2 = y.unsqueeze(-1) if y.dim() == 1 else y
    if attrs["transpose_X"]:
        x2 = x2.transpose(-1, -2)
    if attrs["transpose_Y"]:
        y2 = y2.transpose(-1, -2)
    return x2, y2


def _matmul_out_dims(dims: list[int], x_rank: int, y_rank: int) -> list[int]:
    """Fluid's rule for vector operands: a 1-D X drops a size-1 row dim, a 1-D Y a size-1
    column dim; nothing left gives ``[1]``."""
    dims = list(dims)
    if x_rank == 1 and dims[-2] == 1:
        dims.pop(-2)
    if y_rank == 1 and dims and dims[-1] == 1:
        dims.pop(-1)
    return dims or [1]


def _matmul_shape(ins: dict, attrs: dict) -> dict:
    xs, ys = list(ins["X"].shape), list(ins["Y"].shape)
    x = [1] + xs if len(xs) == 1 else list(xs)
    y = ys + [1] if len(ys) == 1 else list(ys)
    if attrs["transpose_X"]:
        x[-1], x[-2] = x[-2], x[-1]
    if attrs["transpose_Y"]:
        y[-1], y[-2] = y[-2], y[-1]
    k_x, k_y = x[-1], y[-2]
    if -1 not in (k_x, k_y) and k_x != k_y:
        raise ValueError(f"matmul: X {xs} and Y {ys} (transpose_X={attrs['transpose_X']}, "
                         f"transpose_Y={attrs['transpose_Y']}) contract {k_x} with {k_y}")
    batch_x, batch_y = x[:-2], y[:-2]
    batch = batch_x if len(batch_x) >= len(batch_y) else batch_y
    out = _matmul_out_dims(list(batch) + [x[-2], y[-1]], len(xs), len(ys))
    return {"Out": Meta(tuple(out), ins["X"].dtype)}


def _matmul(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, y = ins["X"], ins["Y"]
    x2, y2 = _matmul_2d(x, y, attrs)
    out = torch.matmul(x2, y2)
    if attrs["alpha"] != 1.0:
        out = out * attrs["alpha"]
    return {"Out": out.reshape(_matmul_out_dims(list(out.shape), x.dim(), y.dim()))}


def _matmul_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, y, dout = ins["X"], ins["Y"], ins["Out@GRAD"]
    a, b = _matmul_2d(x, y, attrs)  # Out = alpha * a @ b
    d = dout.reshape(*torch.broadcast_shapes(a.shape[:-2], b.shape[:-2]),
                     a.shape[-2], b.shape[-1]) * attrs["alpha"]
    out = {}
    if "X" in ctx.need:
        da = unbroadcast(d @ b.transpose(-1, -2), a.shape)
        dx = da.transpose(-1, -2) if attrs["transpose_X"] else da
        out["X@GRAD"] = dx.reshape(x.shape)
    if "Y" in ctx.need:
        db = unbroadcast(a.transpose(-1, -2) @ d, b.shape)
        dy = db.transpose(-1, -2) if attrs["transpose_Y"] else db
        out["Y@GRAD"] = dy.reshape(y.shape)
    return out


register_op("matmul", inputs=("X", "Y"), outputs=("Out",),
            attrs={"transpose_X": False, "transpose_Y": False, "alpha": 1.0},
            infer_shape=_matmul_shape, kernel=_matmul, grad_kernel=_matmul_grad,
            grad_uses=("X", "Y"), fresh_output=True)

# ----------------------------------------------------------------------------- cos_sim


def _cos_sim_shape(ins: dict, attrs: dict) -> dict:
    x, y = ins["X"], ins["Y"]
    # rank >= 2; each row's trailing dims are one vector (Fluid flattens them)
    if len(x.shape) < 2 or len(y.shape) != len(x.shape) or any(
            a != b and -1 not in (a, b) for a, b in zip(x.shape[1:], y.shape[1:])):
        raise ValueError(f"cos_sim: X and Y must be [N, ...] with the same trailing dims, "
                         f"got {list(x.shape)} and {list(y.shape)}")
    if y.shape[0] not in (1, -1) and x.shape[0] not in (y.shape[0], -1):
        raise ValueError(f"cos_sim: Y must have X's {x.shape[0]} rows or 1, got {y.shape[0]}")
    col = Meta((x.shape[0], 1), x.dtype)
    return {"Out": col, "XNorm": col, "YNorm": Meta((y.shape[0], 1), y.dtype)}


def _rows2d(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(t.shape[0], -1)


def _cos_sim(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, y = _rows2d(ins["X"]), _rows2d(ins["Y"])
    xn = x.norm(dim=1, keepdim=True)
    yn = y.norm(dim=1, keepdim=True)
    out = (x * y).sum(1, keepdim=True) / (xn * yn)
    return {"Out": out, "XNorm": xn, "YNorm": yn}


def _cos_sim_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    # d cos/dx = y/(|x||y|) - cos * x/|x|²  (and symmetrically for y; a one-row Y sums)
    x, y, out, d = _rows2d(ins["X"]), _rows2d(ins["Y"]), ins["Out"], ins["Out@GRAD"]
    xn, yn = ins["XNorm"], ins["YNorm"]
    grads = {}
    if "X" in ctx.need:
        grads["X@GRAD"] = (d * (y / (xn * yn) - out * x / (xn * xn))).reshape(ins["X"].shape)
    if "Y" in ctx.need:
        dy = d * (x / (xn * yn) - out * y / (yn * yn))
        dy = dy.sum(0, keepdim=True) if y.shape[0] == 1 != x.shape[0] else dy
        grads["Y@GRAD"] = dy.reshape(ins["Y"].shape)
    return grads


register_op("cos_sim", inputs=("X", "Y"), outputs=("Out", "XNorm", "YNorm"),
            infer_shape=_cos_sim_shape, kernel=_cos_sim, grad_kernel=_cos_sim_grad,
            grad_infer_shape=lambda ins, attrs: {"X@GRAD": ins["X"], "Y@GRAD": ins["Y"]})


# ----------------------------------------------------------------------------- mod / floordiv


def _register_int_elementwise(name: str, fn: Any) -> None:
    """No gradient: Fluid 1.6 registers none for these."""

    def kernel(ins: dict, attrs: dict, ctx: Any) -> dict:
        x, y = ins["X"], ins["Y"]
        if y.dim() != x.dim():
            y = broadcast_y(x, y, attrs["axis"])
        if not (x.is_floating_point() or y.is_floating_point()) and bool((y == 0).any()):
            raise ValueError(f"{name}: integer division by zero (a zero in Y)")
        return {"Out": fn(x, y)}

    register_op(name, inputs=("X", "Y"), outputs=("Out",), attrs={"axis": -1},
                infer_shape=lambda ins, attrs: {"Out": broadcast_meta(ins["X"], ins["Y"],
                                                                      attrs["axis"])},
                kernel=kernel, share_lod=("X", "Out"))


# Fluid 1.6's kernels are C's: the remainder has the sign of X (fmod) and the quotient is
# truncated toward zero (Python's % and // round toward -inf instead).
_register_int_elementwise("elementwise_mod", torch.fmod)
_register_int_elementwise("elementwise_floordiv",
                          lambda x, y: torch.div(x, y, rounding_mode="trunc"))



# ----------------------------------------------------------------------------- cumsum


def _cumsum(x: torch.Tensor, attrs: dict) -> torch.Tensor:
    """Fluid's cumsum: ``exclusive`` shifts by one (the first sum is 0), ``reverse`` sums
    from the end."""
    axis = axis_in_range("cumsum", int(attrs["axis"]), x.dim())
    if attrs["reverse"]:
        x = x.flip(axis)
    out = torch.cumsum(x, axis)
    if attrs["exclusive"]:
        out = out - x
    return out.flip(axis) if attrs["reverse"] else out


def _cumsum_shape(ins: dict, attrs: dict) -> dict:
    axis_in_range("cumsum", int(attrs["axis"]), len(ins["X"].shape))
    return {"Out": ins["X"]}


register_op("cumsum", inputs=("X",), outputs=("Out",),
            attrs={"axis": -1, "exclusive": False, "reverse": False},
            infer_shape=_cumsum_shape,
            kernel=lambda ins, attrs, ctx: {"Out": _cumsum(ins["X"], attrs)},
            # the gradient of a running sum is the running sum the other way
            grad_kernel=lambda ins, attrs, ctx: {"X@GRAD": _cumsum(
                ins["Out@GRAD"], {**attrs, "reverse": not attrs["reverse"]})},
            grad_uses=(), grad_infer_shape=same_as("Out@GRAD", "X@GRAD"))


# ----------------------------------------------------------------------------- bilinear


def _bilinear_shape(ins: dict, attrs: dict) -> dict:
    x, y, w = ins["X"], ins["Y"], ins["Weight"]
    if len(x.shape) != 2 or len(y.shape) != 2 or len(w.shape) != 3:
        raise ValueError(f"bilinear_tensor_product: X and Y must be 2-D and Weight 3-D, got "
                         f"{list(x.shape)}, {list(y.shape)}, {list(w.shape)}")
    if (x.shape[1], y.shape[1]) != tuple(w.shape[1:]):
        raise ValueError(f"bilinear_tensor_product: Weight {list(w.shape)} must be "
                         f"[size, {x.shape[1]}, {y.shape[1]}] for X {list(x.shape)} and "
                         f"Y {list(y.shape)}")
    return {"Out": Meta((x.shape[0], w.shape[0]), x.dtype)}


def _bilinear(ins: dict, attrs: dict, ctx: Any) -> dict:
    """``out[n, k] = x[n] @ W[k] @ y[n] + b[k]``."""
    out = torch.einsum("ni,kij,nj->nk", ins["X"], ins["Weight"], ins["Y"])
    bias = ins.get("Bias")
    return {"Out": out if bias is None else out + bias}


def _bilinear_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, y, w, dout = ins["X"], ins["Y"], ins["Weight"], ins["Out@GRAD"]
    out = {}
    if "X" in ctx.need:
        out["X@GRAD"] = torch.einsum("nk,kij,nj->ni", dout, w, y)
    if "Y" in ctx.need:
        out["Y@GRAD"] = torch.einsum("nk,ni,kij->nj", dout, x, w)
    if "Weight" in ctx.need:
        out["Weight@GRAD"] = torch.einsum("nk,ni,nj->kij", dout, x, y)
    if "Bias" in ctx.need:
        out["Bias@GRAD"] = dout.sum(0, keepdim=True)
    return out


register_op("bilinear_tensor_product", inputs=("X", "Y", "Weight", "Bias?"),
            outputs=("Out",), infer_shape=_bilinear_shape, kernel=_bilinear,
            grad_kernel=_bilinear_grad, grad_uses=("X", "Y", "Weight", "Bias"))
