"""Deep gradient compression (Lin et al., "Deep Gradient Compression"), as Fluid 1.6 does it.

``DGCMomentumOptimizer`` appends, per compressed parameter (float32, dense, at least 16384
elements), in the backward part of the program::

    {Out=[w@GRAD]} = dgc_clip_by_norm(X=[w@GRAD], current_step=[...])   (local_grad_clip_norm)
    {U_out=[u], V_out=[v], EncodeGrad=[w@GRAD.dgc_encoded], k=[...], Grad_out=[w@GRAD]}
        = dgc(U=[u], V=[v], Grad=[w@GRAD], current_step=[...])
    {Out=[w@GRAD]} = c_dgc_allreduce(X=[w@GRAD], EncodeGrad=[...], current_step=[...])

and ``dgc_momentum`` as the update. ``current_step`` is the optimizer's step counter
(``__g_dgc_counter__``: 0 on the first run). Before ``rampup_begin_step`` the ops are
Fluid's plain path: ``dgc`` and ``dgc_clip_by_norm`` leave the gradient as it is, the
all-reduce is dense and ``dgc_momentum`` is ``momentum`` with ``U`` as its velocity. From
then on::

    U = m*U + G              (nesterov: U = m*(U + G);  V = V + U + G)
    V = V + U
    idx = int(step * len(sparsity_list) / rampup_step)   (the global step, as Fluid 1.6)
    sparsity = sparsity_list[idx], or 0.999 once idx passes the list's end
    k = max(1, int(numel * (1 - sparsity)))
    I = top-k of |V|;  EncodeGrad = (I, V[I]);  U[I] = V[I] = 0;  Grad_out = 0
    all-reduce: every device's (I, V[I]) gathered and added into the (zero) dense gradient
    dgc_momentum: param -= lr * grad (plain SGD: the momentum already lives in U and V)

The encoded gradient is a ``SelectedRows`` over the flattened parameter (rows = the chosen
indices, one value each), so the communicators carry it as they carry any row-sparse
value (concatenated in device order, across processes by a variable-size all-gather). The
loss gradient is scaled by ``1/nranks`` before any of this, as on the dense path, so the
sum of the encoded gradients is scaled as a dense all-reduce's would be.

The branch on the step is a host decision made on a value: the ops are ``no_compile``.
"""

from __future__ import annotations

from typing import Any

import torch

from ..scope import SelectedRows
from .comm import _communicator, _name
from .optimizer import _momentum, _sgd, _state_shape
from .registry import Meta, VarType, register_op

__all__ = ["dgc_sparsity", "dgc_k"]

_STEP_DEPENDENT = "branches on the value of current_step (a host read)"


def _step(t: torch.Tensor) -> int:
    """The step counter's value as Fluid reads it (``static_cast<int>`` of a float)."""
    return int(t.reshape(-1)[0].item())


def dgc_sparsity(sparsity: list[float], step: int, rampup_step: float) -> float:
    """The sparsity of ``step`` (at or after ``rampup_begin_step``), as Fluid 1.6's dgc op
    computes it: the list indexed by the global step (``step * len / rampup_step``), and
    0.999 once the index passes the list's end. Fluid 1.6 does not subtract
    ``rampup_begin_step`` (later Fluid does), so with ``rampup_begin_step`` beyond
    ``rampup_step`` the ramp-up is already over when compression starts."""
    idx = int(step * len(sparsity) / rampup_step)
    return 0.999 if idx >= len(sparsity) else float(sparsity[idx])


def dgc_k(numel: int, sparsity: float) -> int:
    """How many elements of a ``numel``-element gradient are sent at ``sparsity``."""
    return max(1, int(numel * (1.0 - sparsity)))


def _dgc_shape(ins: dict, attrs: dict) -> dict:
    g, u, v = ins["Grad"], ins["U"], ins["V"]
    for slot, meta in (("U", u), ("V", v)):
        if tuple(meta.shape) != tuple(g.shape):
            raise ValueError(f"dgc: {slot} has shape {list(meta.shape)} but Grad has shape "
                             f"{list(g.shape)}; they must match")
    return {"U_out": u, "V_out": v, "Grad_out": g, "k": Meta((1,), g.dtype),
            "EncodeGrad": Meta((-1,), g.dtype, VarType.SELECTED_ROWS)}


def _dgc(ins: dict, attrs: dict, ctx: Any) -> dict:
    u, v, g = ins["U"], ins["V"], ins["Grad"]
    begin = attrs["rampup_begin_step"]
    step = _step(ins["current_step"])
    numel = g.numel()
    if step < int(begin):  # Fluid's dense path: the gradient passes untouched
        none = SelectedRows(torch.zeros(0, dtype=torch.int64, device=g.device),
                            g.new_zeros(0), numel)
        return {"U_out": u, "V_out": v, "Grad_out": g, "EncodeGrad": none,
                "k": g.new_zeros(1)}
    sparsity = dgc_sparsity(list(attrs["sparsity"]), step, attrs["rampup_step"])
    k = dgc_k(numel, sparsity)
    m = attrs["m"]
    # NOTE: new tensors, not in place: the runtime writes them back to U and V
    if attrs["use_nesterov"]:
        u = (u + g) * m
        v = v + u + g
    else:
        u = u * m + g
        v = v + u
    flat_u, flat_v = u.view(-1), v.view(-1)
    idx = torch.topk(flat_v.abs(), k, sorted=False).indices
    values = flat_v.index_select(0, idx)
    # momentum factor masking: what is sent starts again from zero
    flat_u.index_fill_(0, idx, 0.0)
    flat_v.index_fill_(0, idx, 0.0)
    return {"U_out": u, "V_out": v, "Grad_out": torch.zeros_like(g),
            "EncodeGrad": SelectedRows(idx, values, numel), "k": g.new_full((1,), float(k))}


register_op("dgc", inputs=("U", "V", "Grad", "current_step"),
            outputs=("U_out", "V_out", "EncodeGrad", "k", "Grad_out"),
            attrs={"m": 0.9, "use_nesterov": False, "sparsity": [0.999],
                   "rampup_begin_step": 0.0, "rampup_step": 1.0},
            infer_shape=_dgc_shape, kernel=_dgc, no_compile=_STEP_DEPENDENT)


def _clip_by_norm(ins: dict, attrs: dict, ctx: Any) -> dict:
    x = ins["X"]
    if _step(ins["current_step"]) < int(attrs["rampup_begin_step"]):
        return {"Out": x}
    max_norm = attrs["max_norm"]
    norm = torch.linalg.vector_norm(x)
    return {"Out": x * (max_norm / torch.clamp(norm, min=max_norm))}


register_op("dgc_clip_by_norm", inputs=("X", "current_step"), outputs=("Out",),
            attrs={"max_norm": 1.0, "rampup_begin_step": -1.0},
            infer_shape=lambda ins, attrs: {"Out": ins["X"]}, kernel=_clip_by_norm,
            no_compile=_STEP_DEPENDENT)


def _dgc_momentum(ins: dict, attrs: dict, ctx: Any) -> dict:
    if _step(ins["current_step"]) < int(attrs["rampup_begin_step"]):
        return _momentum(ins, attrs, ctx)
    out = _sgd(ins, attrs, ctx)
    return {"ParamOut": out["ParamOut"], "VelocityOut": ins["Velocity"]}


register_op("dgc_momentum", inputs=("Param", "Grad", "Velocity", "LearningRate",
                                    "current_step"),
            outputs=("ParamOut", "VelocityOut"),
            attrs={"mu": 0.9, "use_nesterov": False, "rampup_begin_step": -1.0},
            infer_shape=_state_shape("dgc_momentum", (("Param", "ParamOut"),
                                                      ("Velocity", "VelocityOut"))),
            kernel=_dgc_momentum, no_compile=_STEP_DEPENDENT)


def _densify(encoded: SelectedRows, like: torch.Tensor) -> torch.Tensor:
    flat = torch.zeros(like.numel(), dtype=like.dtype, device=like.device)
    flat.index_add_(0, encoded.rows.to(like.device), encoded.value.to(like.device, like.dtype))
    return flat.view(like.shape)


def _dgc_allreduce(ins: dict, attrs: dict, ctx: Any) -> dict:
    """Dense all-reduce before ``rampup_begin_step``; then the encoded gradients of every
    device, gathered and added into the dense gradient (zero where nothing was sent)."""
    xs, encoded = ins["X"], ins["EncodeGrad"]
    comm = _communicator(ctx, len(xs), "c_dgc_allreduce")
    if _step(ins["current_step"][0]) < int(attrs["rampup_begin_step"]):
        return {"Out": list(xs) if comm is None else comm.all_reduce(xs, name=_name(ctx))}
    for e, x in zip(encoded, xs):
        if not isinstance(e, SelectedRows) or e.height != x.numel():
            raise ValueError(f"c_dgc_allreduce: EncodeGrad must be the dgc op's encoded "
                             f"gradient of {x.numel()} elements, got {type(e).__name__}"
                             + (f" of height {e.height}" if isinstance(e, SelectedRows) else ""))
    summed = list(encoded) if comm is None else comm.all_reduce(encoded, name=_name(ctx))
    return {"Out": [x + _densify(s, x) for s, x in zip(summed, xs)]}


register_op("c_dgc_allreduce", inputs=("X[]", "EncodeGrad[]", "current_step[]"),
            outputs=("Out[]",), attrs={"rampup_begin_step": 0.0, "ring_id": 0},
            infer_shape=lambda ins, attrs: {"Out": list(ins["X"])}, kernel=_dgc_allreduce,
            side_effect=True, comm=True, no_compile=_STEP_DEPENDENT)
