"""Optimizer ops. Each updates its parameter in place and returns it as ``ParamOut``.

In-place updates are safe because every executor orders an op that rewrites a variable after
all readers of its previous value (the ParallelExecutor through write-after-read edges).
State tensors (velocity, moments) are updated in place too and returned under their ``*Out``
slot. The kernels avoid temporaries: one step of a dense optimizer allocates at most one
buffer the size of the parameter.

Sparse (SelectedRows) gradients: ``sgd``, ``adagrad`` and lazy ``adam`` touch only the rows
present (duplicates summed). ``momentum``, ``rmsprop`` and non-lazy ``adam`` decay the state
of every row, as Fluid does, which equals the dense update with the densified gradient.
``adam`` reads its inputs only: outputs naming other variables than ``Param``/``Moment1``/
``Moment2`` get new tensors (lazy mode: the rows without gradient keep what the output
variable held), and a sparse gradient with no rows writes nothing, as Fluid's kernel.

Formulas (Fluid 1.x)::

    momentum: v = mu*v + g;  p -= lr*(g + mu*v) if use_nesterov else lr*v
    adam:     lr_t = lr*sqrt(1-beta2_pow)/(1-beta1_pow)
              m1 = b1*m1 + (1-b1)*g;  m2 = b2*m2 + (1-b2)*g*g;  p -= lr_t*m1/(sqrt(m2)+eps)
    adagrad:  m += g*g;  p -= lr*g/(sqrt(m)+eps)
    rmsprop:  ms = rho*ms + (1-rho)*g*g;  mg = rho*mg + (1-rho)*g  (centered only)
              mom = momentum*mom + lr*g/sqrt(ms - mg*mg + eps);  p -= mom
    decayed_adagrad, adamax, ftrl, lamb: see each kernel's comment. Their sparse gradients
    are densified (every row's state decays, as Fluid's dense kernels do).
"""

from __future__ import annotations

from typing import Any

import torch

from ..scope import SelectedRows
from .common import rows_in_table
from .registry import Meta, register_op


def _state_shape(op: str, pairs: tuple[tuple[str, str], ...],
                 grad_like: tuple[str, ...] = ("Grad",)) -> Any:
    """Shape rule: each ``(in, out)`` pair keeps the input's meta; state matches ``Param``."""

    def infer(ins: dict, attrs: dict) -> dict:
        param = ins["Param"]
        for slot in grad_like + tuple(i for i, _ in pairs if i != "Param"):
            meta = ins.get(slot)
            if meta is None:
                continue
            if len(meta.shape) != len(param.shape) or any(
                    a != b and a != -1 and b != -1
                    for a, b in zip(meta.shape[1:], param.shape[1:])) or (
                    meta.type != "selected_rows" and meta.shape[0] not in (-1, param.shape[0])):
                raise ValueError(f"{op}: {slot} has shape {list(meta.shape)} but Param has "
                                 f"shape {list(param.shape)}; they must match")
        lr = ins.get("LearningRate")
        if lr is not None and lr.shape not in ((1,), ()):
            raise ValueError(f"{op}: LearningRate must hold one element (shape [1]), got "
                             f"shape {list(lr.shape)}")
        return {out: Meta(ins[i].shape, ins[i].dtype, ins[i].type) for i, out in pairs
                if ins.get(i) is not None}
    return infer


def _sgd(ins: dict, attrs: dict, ctx: Any) -> dict:
    param, grad, lr = ins["Param"], ins["Grad"], ins["LearningRate"]
    if isinstance(param, SelectedRows):
        # a row-sparse parameter (a distributed table's block): the gradient's rows update
        # the parameter's rows holding the same ids, as Fluid's SelectedRows kernel
        if not isinstance(grad, SelectedRows):
            raise TypeError("sgd: when Param is SelectedRows, Grad must be SelectedRows too, "
                            f"got {type(grad).__name__}")
        if len(grad.rows):
            if grad.value.shape[1:] != param.value.shape[1:]:
                raise ValueError(f"sgd: Grad's rows have shape {list(grad.value.shape[1:])} "
                                 f"but Param's rows {list(param.value.shape[1:])}")
            where = rows_in_table("sgd", param, grad.rows)
            param.value.index_add_(0, where, grad.value * -lr)
        return {"ParamOut": param}
    if isinstance(grad, SelectedRows):
        # NOTE: index_add_ adds every listed row, so repeated rows need no merge here.
        param.index_add_(0, grad.rows, grad.value * -lr)
    else:
        param.addcmul_(grad, lr, value=-1.0)
    return {"ParamOut": param}


register_op("sgd", inputs=("Param", "Grad", "LearningRate"), outputs=("ParamOut",),
            infer_shape=_state_shape("sgd", (("Param", "ParamOut"),)), kernel=_sgd)


# ----------------------------------------------------------------------------- momentum


def _momentum(ins: dict, attrs: dict, ctx: Any) -> dict:
    param, grad, velocity, lr = ins["Param"], ins["Grad"], ins["Velocity"], ins["LearningRate"]
    mu = attrs["mu"]
    if isinstance(grad, SelectedRows):
        grad = grad.to_dense()  # every row's velocity decays, as in Fluid's sparse kernel
    velocity.mul_(mu).add_(grad)
    if attrs["use_nesterov"]:
        param.addcmul_(grad.add(velocity, alpha=mu), lr, value=-1.0)
    else:
        param.addcmul_(velocity, lr, value=-1.0)
    return {"ParamOut": param, "VelocityOut": velocity}


register_op("momentum", inputs=("Param", "Grad", "Velocity", "LearningRate"),
            outputs=("ParamOut", "VelocityOut"), attrs={"mu": 0.9, "use_nesterov": False},
            infer_shape=_state_shape("momentum", (("Param", "ParamOut"),
                                                  ("Velocity", "VelocityOut"))),
            kernel=_momentum)


# ----------------------------------------------------------------------------- adam


_ADAM_STATE = (("Param", "ParamOut"), ("Moment1", "Moment1Out"), ("Moment2", "Moment2Out"))


def _adam_targets(ins: dict, ctx: Any, keep_rows: bool) -> dict:
    """The tensors adam writes, by output slot: the input itself when the output names the
    same variable (the usual in-place update), else a new tensor, so that the input keeps
    its value as in Fluid, whose kernel reads ``Param`` and writes ``ParamOut``.

    ``keep_rows``: rows the update does not write (lazy mode, or a gradient with no rows)
    keep what the output variable held, as Fluid's kernel leaves them in the output tensor;
    an output variable holding no tensor of the input's shape starts from the input's value
    (Fluid's would be unset memory there).
    """
    op = ctx.op
    scope = ctx.scope
    out = {}
    for src, dst in _ADAM_STATE:
        value = ins[src]
        name = op.outputs[dst][0] if op.outputs.get(dst) else None
        if name is None or name == op.inputs[src][0]:
            out[dst] = value
            continue
        held = None
        if keep_rows and scope is not None:
            holder = scope.find_var(name)
            held = None if holder is None else holder.value
        if isinstance(held, torch.Tensor) and held.shape == value.shape:
            out[dst] = held.to(device=value.device, dtype=value.dtype, copy=True)
        else:
            out[dst] = value.clone()
    return out


def _adam(ins: dict, attrs: dict, ctx: Any) -> dict:
    grad, lr = ins["Grad"], ins["LearningRate"]
    b1, b2, eps = attrs["beta1"], attrs["beta2"], attrs["epsilon"]
    sparse = isinstance(grad, SelectedRows)
    if sparse and not len(grad.rows):
        # NOTE: as Fluid's kernel, a row-sparse gradient with no rows updates nothing, lazy
        # or not: every output keeps its value
        return _adam_targets(ins, ctx, keep_rows=True)
    lazy = sparse and attrs["lazy_mode"]
    out = _adam_targets(ins, ctx, keep_rows=lazy)
    param, m1, m2 = out["ParamOut"], out["Moment1Out"], out["Moment2Out"]
    # [1]-shaped tensor arithmetic: no host round trip on an accelerator.
    lr_t = (1.0 - ins["Beta2Pow"]).sqrt_().mul_(lr).div_(1.0 - ins["Beta1Pow"])
    if sparse:
        grad = grad.merged()
        if lazy:
            # the rows of the gradient only; the state is read from the inputs (the outputs
            # may be other variables)
            rows, g = grad.rows, grad.value
            r1 = ins["Moment1"].index_select(0, rows).mul_(b1).add_(g, alpha=1.0 - b1)
            r2 = ins["Moment2"].index_select(0, rows).mul_(b2).addcmul_(g, g, value=1.0 - b2)
            m1.index_copy_(0, rows, r1)
            m2.index_copy_(0, rows, r2)
            step = r1.div_(r2.sqrt_().add_(eps)).mul_(lr_t)
            param.index_copy_(0, rows, ins["Param"].index_select(0, rows).sub_(step))
            return out
        grad = grad.to_dense()
    m1.mul_(b1).add_(grad, alpha=1.0 - b1)
    m2.mul_(b2).addcmul_(grad, grad, value=1.0 - b2)
    param.addcdiv_(m1, m2.sqrt().add_(eps).div_(lr_t), value=-1.0)
    return out


register_op("adam", inputs=("Param", "Grad", "LearningRate", "Moment1", "Moment2", "Beta1Pow",
                            "Beta2Pow"),
            outputs=("ParamOut", "Moment1Out", "Moment2Out"),
            # min_row_size_to_use_multithread: Fluid's CPU threading threshold for sparse
            # gradients; accepted, it changes no value
            attrs={"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8, "lazy_mode": False,
                   "min_row_size_to_use_multithread": 1000},
            infer_shape=_state_shape("adam", (("Param", "ParamOut"), ("Moment1", "Moment1Out"),
                                              ("Moment2", "Moment2Out"))),
            kernel=_adam)


# ----------------------------------------------------------------------------- adagrad


def _adagrad(ins: dict, attrs: dict, ctx: Any) -> dict:
    param, grad, moment, lr = ins["Param"], ins["Grad"], ins["Moment"], ins["LearningRate"]
    eps = attrs["epsilon"]
    if isinstance(grad, SelectedRows):
        # Rows without a gradient keep moment and parameter: updating only the present
        # rows equals the dense update.
        grad = grad.merged()
        rows, g = grad.rows, grad.value
        r = moment.index_select(0, rows).addcmul_(g, g)
        moment.index_copy_(0, rows, r)
        param.index_add_(0, rows, g / r.sqrt_().add_(eps).div_(lr), alpha=-1.0)
    else:
        moment.addcmul_(grad, grad)
        param.addcdiv_(grad, moment.sqrt().add_(eps).div_(lr), value=-1.0)
    return {"ParamOut": param, "MomentOut": moment}


register_op("adagrad", inputs=("Param", "Grad", "Moment", "LearningRate"),
            outputs=("ParamOut", "MomentOut"), attrs={"epsilon": 1e-6},
            infer_shape=_state_shape("adagrad", (("Param", "ParamOut"), ("Moment", "MomentOut"))),
            kernel=_adagrad)


# ----------------------------------------------------------------------------- rmsprop


def _rmsprop(ins: dict, attrs: dict, ctx: Any) -> dict:
    param, grad, lr = ins["Param"], ins["Grad"], ins["LearningRate"]
    ms, mom, mg = ins["MeanSquare"], ins["Moment"], ins["MeanGrad"]
    rho, eps = attrs["decay"], attrs["epsilon"]
    if isinstance(grad, SelectedRows):
        grad = grad.to_dense()  # Fluid's sparse rmsprop decays every row
    ms.mul_(rho).addcmul_(grad, grad, value=1.0 - rho)
    out = {"ParamOut": param, "MomentOut": mom, "MeanSquareOut": ms}
    if attrs["centered"]:
        if mg is None:
            raise ValueError("rmsprop: centered=True needs the MeanGrad input")
        mg.mul_(rho).add_(grad, alpha=1.0 - rho)
        denom = ms.addcmul(mg, mg, value=-1.0)
    else:
        denom = ms.clone()
    if mg is not None:
        out["MeanGradOut"] = mg
    mom.mul_(attrs["momentum"]).addcdiv_(grad, denom.add_(eps).sqrt_().div_(lr))
    param.sub_(mom)
    return out


register_op("rmsprop", inputs=("Param", "MeanSquare", "Grad", "Moment", "LearningRate",
                               "MeanGrad?"),
            outputs=("ParamOut", "MomentOut", "MeanSquareOut", "MeanGradOut?"),
            attrs={"decay": 0.9, "epsilon": 1e-10, "momentum": 0.0, "centered": False},
            infer_shape=_state_shape("rmsprop", (("Param", "ParamOut"), ("Moment", "MomentOut"),
                                                 ("MeanSquare", "MeanSquareOut"),
                                                 ("MeanGrad", "MeanGradOut"))),
            kernel=_rmsprop)


# ----------------------------------------------------------------------------- decayed_adagrad


def _dense(grad: Any) -> Any:
    return grad.to_dense() if isinstance(grad, SelectedRows) else grad


def _decayed_adagrad(ins: dict, attrs: dict, ctx: Any) -> dict:
    # moment = decay*moment + (1-decay)*g*g;  p -= lr*g/(sqrt(moment)+eps)
    param, grad, moment, lr = ins["Param"], _dense(ins["Grad"]), ins["Moment"], \
        ins["LearningRate"]
    decay = attrs["decay"]
    moment.mul_(decay).addcmul_(grad, grad, value=1.0 - decay)
    param.addcdiv_(grad, moment.sqrt().add_(attrs["epsilon"]).div_(lr), value=-1.0)
    return {"ParamOut": param, "MomentOut": moment}


register_op("decayed_adagrad", inputs=("Param", "Grad", "Moment", "LearningRate"),
            outputs=("ParamOut", "MomentOut"), attrs={"decay": 0.95, "epsilon": 1e-6},
            infer_shape=_state_shape("decayed_adagrad", (("Param", "ParamOut"),
                                                         ("Moment", "MomentOut"))),
            kernel=_decayed_adagrad)


# ----------------------------------------------------------------------------- adamax


def _adamax(ins: dict, attrs: dict, ctx: Any) -> dict:
    # m = b1*m + (1-b1)*g;  u = max(b2*u + eps, |g|);  p -= lr/(1-b1^t) * m/u
    param, grad, lr = ins["Param"], _dense(ins["Grad"]), ins["LearningRate"]
    moment, inf_norm = ins["Moment"], ins["InfNorm"]
    b1, b2 = attrs["beta1"], attrs["beta2"]
    moment.mul_(b1).add_(grad, alpha=1.0 - b1)
    torch.maximum(inf_norm.mul_(b2).add_(attrs["epsilon"]), grad.abs(), out=inf_norm)
    lr_t = lr / (1.0 - ins["Beta1Pow"])
    param.addcdiv_(moment, inf_norm.div(lr_t), value=-1.0)
    return {"ParamOut": param, "MomentOut": moment, "InfNormOut": inf_norm}


register_op("adamax", inputs=("Param", "Grad", "LearningRate", "Moment", "InfNorm",
                              "Beta1Pow"),
            outputs=("ParamOut", "MomentOut", "InfNormOut"),
            attrs={"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8},
            infer_shape=_state_shape("adamax", (("Param", "ParamOut"), ("Moment", "MomentOut"),
                                                ("InfNorm", "InfNormOut"))),
            kernel=_adamax)


# ----------------------------------------------------------------------------- ftrl


def _ftrl(ins: dict, attrs: dict, ctx: Any) -> dict:
    # Fluid's FTRL-proximal: n' = n + g²;  z += g - (n'^-p - n^-p)/lr * w;
    # w = (l1*sign(z) - z) / (n'^-p/lr + 2*l2) where |z| > l1, else 0;  n = n'
    param, grad, lr = ins["Param"], _dense(ins["Grad"]), ins["LearningRate"]
    sq, lin = ins["SquaredAccumulator"], ins["LinearAccumulator"]
    l1, l2, power = attrs["l1"], attrs["l2"], attrs["lr_power"]
    new_sq = sq + grad * grad
    if power == -0.5:
        sigma = (new_sq.sqrt() - sq.sqrt()) / lr
        y = new_sq.sqrt() / lr + 2.0 * l2
    else:
        sigma = (new_sq.pow(-power) - sq.pow(-power)) / lr
        y = new_sq.pow(-power) / lr + 2.0 * l2
    lin.add_(grad - sigma * param)
    shrunk = (l1 * torch.sign(lin) - lin) / y
    param.copy_(torch.where(lin.abs() > l1, shrunk, torch.zeros_like(shrunk)))
    sq.copy_(new_sq)
    return {"ParamOut": param, "SquaredAccumOut": sq, "LinearAccumOut": lin}


register_op("ftrl", inputs=("Param", "SquaredAccumulator", "LinearAccumulator", "Grad",
                            "LearningRate"),
            outputs=("ParamOut", "SquaredAccumOut", "LinearAccumOut"),
            attrs={"l1": 0.0, "l2": 0.0, "lr_power": -0.5},
            infer_shape=_state_shape("ftrl", (("Param", "ParamOut"),
                                              ("SquaredAccumulator", "SquaredAccumOut"),
                                              ("LinearAccumulator", "LinearAccumOut"))),
            kernel=_ftrl)


# ----------------------------------------------------------------------------- lamb


def _lamb(ins: dict, attrs: dict, ctx: Any) -> dict:
    # m1, m2 as Adam; r = m1 / (sqrt(m2) + eps) + wd*p;
    # p -= lr * (|p| / |r|) * r   (trust ratio 1 where either norm is 0)
    # NOTE: Fluid 1.6's kernel does not bias-correct the moments: Beta1Pow and Beta2Pow
    # are inputs it reads but does not use.
    param, grad, lr = ins["Param"], _dense(ins["Grad"]), ins["LearningRate"]
    m1, m2 = ins["Moment1"], ins["Moment2"]
    b1, b2 = attrs["beta1"], attrs["beta2"]
    m1.mul_(b1).add_(grad, alpha=1.0 - b1)
    m2.mul_(b2).addcmul_(grad, grad, value=1.0 - b2)
    r = m1 / (m2.sqrt() + attrs["epsilon"]) + attrs["weight_decay"] * param
    p_norm, r_norm = param.norm(), r.norm()
    trust = torch.where((p_norm > 0) & (r_norm > 0), p_norm / r_norm, torch.ones_like(p_norm))
    param.sub_(r * (trust * lr))
    return {"ParamOut": param, "Moment1Out": m1, "Moment2Out": m2}


register_op("lamb", inputs=("Param", "Grad", "LearningRate", "Moment1", "Moment2", "Beta1Pow",
                            "Beta2Pow"),
            outputs=("ParamOut", "Moment1Out", "Moment2Out"),
            attrs={"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-6, "weight_decay": 0.01},
            infer_shape=_state_shape("lamb", (("Param", "ParamOut"), ("Moment1", "Moment1Out"),
                                              ("Moment2", "Moment2Out"))),
            kernel=_lamb)


# ----------------------------------------------------------------------------- adadelta


def _adadelta(ins: dict, attrs: dict, ctx: Any) -> dict:
    """Fluid's adadelta (no learning rate): the step is ``-sqrt((E[dx^2] + eps) /
    (E[g^2] + eps)) * g`` with both averages decayed by ``rho``."""
    param, grad = ins["Param"], _dense(ins["Grad"])
    sq_grad, sq_update = ins["AvgSquaredGrad"], ins["AvgSquaredUpdate"]
    rho, eps = attrs["rho"], attrs["epsilon"]
    sq_grad.mul_(rho).addcmul_(grad, grad, value=1 - rho)
    update = -((sq_update + eps) / (sq_grad + eps)).sqrt() * grad
    sq_update.mul_(rho).addcmul_(update, update, value=1 - rho)
    param.add_(update)
    return {"ParamOut": param, "AvgSquaredGradOut": sq_grad, "AvgSquaredUpdateOut": sq_update}


register_op("adadelta", inputs=("Param", "Grad", "AvgSquaredGrad", "AvgSquaredUpdate"),
            outputs=("ParamOut", "AvgSquaredGradOut", "AvgSquaredUpdateOut"),
            attrs={"rho": 0.95, "epsilon": 1e-6},
            infer_shape=_state_shape("adadelta", (("Param", "ParamOut"),
                                                  ("AvgSquaredGrad", "AvgSquaredGradOut"),
                                                  ("AvgSquaredUpdate", "AvgSquaredUpdateOut"))),
            kernel=_adadelta)


# ----------------------------------------------------------------------------- lars_momentum


def _lars_momentum(ins: dict, attrs: dict, ctx: Any) -> dict:
    """Momentum with a layer-wise learning rate ``lr * lars_coeff * |p| / (|g| +
    lars_weight_decay * |p|)`` (plain ``lr`` where a norm is 0 or the decay is 0)."""
    param, grad, velocity = ins["Param"], _dense(ins["Grad"]), ins["Velocity"]
    lr = ins["LearningRate"].reshape(())
    decay = attrs["lars_weight_decay"]
    p_norm, g_norm = param.norm(), grad.norm()
    local_lr = lr
    if decay > 0 and bool(p_norm > 0) and bool(g_norm > 0):
        local_lr = lr * attrs["lars_coeff"] * p_norm / (g_norm + decay * p_norm)
    velocity.mul_(attrs["mu"]).add_(local_lr * (grad + decay * param))
    param.sub_(velocity)
    return {"ParamOut": param, "VelocityOut": velocity}


register_op("lars_momentum", inputs=("Param", "Grad", "Velocity", "LearningRate"),
            outputs=("ParamOut", "VelocityOut"),
            attrs={"mu": 0.9, "lars_coeff": 0.001, "lars_weight_decay": 0.0005},
            infer_shape=_state_shape("lars_momentum", (("Param", "ParamOut"),
                                                       ("Velocity", "VelocityOut"))),
            kernel=_lars_momentum)


# ----------------------------------------------------------------------------- average_accumulates

_MAX_NUM_ACCUMULATES = 16384  # Fluid's: sum_1 moves into sum_2 this often (precision)


def _average_accumulates(ins: dict, attrs: dict, ctx: Any) -> dict:
    """ModelAverage's bookkeeping, as Fluid's kernel: ``sum_1 += param``; every 16384
    updates ``sum_1`` moves into ``sum_2``; once the window is long enough (``min_average_
    window`` and ``min(max_average_window, num_updates * average_window)``) the sums so far
    move into ``sum_3`` and the window restarts."""
    param = ins["param"]
    s1, s2, s3 = ins["in_sum_1"], ins["in_sum_2"], ins["in_sum_3"]
    num_acc = int(ins["in_num_accumulates"].reshape(-1)[0]) + 1
    old_acc = int(ins["in_old_num_accumulates"].reshape(-1)[0])
    num_upd = int(ins["in_num_updates"].reshape(-1)[0]) + 1
    out1, out2, out3 = s1 + param, s2.clone(), s3.clone()
    if num_upd % _MAX_NUM_ACCUMULATES == 0:
        out2 = s2 + s1
        out1 = torch.zeros_like(s1)
    window = min(attrs["max_average_window"], num_upd * attrs["average_window"])
    if num_acc >= attrs["min_average_window"] and num_acc >= window:
        out3 = s1 + s2
        out1, out2 = torch.zeros_like(s1), torch.zeros_like(s2)
        old_acc, num_acc = num_acc, 0

    def count(v: int, like: torch.Tensor) -> torch.Tensor:
        return torch.full_like(like, v)
    return {"out_sum_1": out1, "out_sum_2": out2, "out_sum_3": out3,
            "out_num_accumulates": count(num_acc, ins["in_num_accumulates"]),
            "out_old_num_accumulates": count(old_acc, ins["in_old_num_accumulates"]),
            "out_num_updates": count(num_upd, ins["in_num_updates"])}


def _average_accumulates_shape(ins: dict, attrs: dict) -> dict:
    return {"out_sum_1": ins["in_sum_1"], "out_sum_2": ins["in_sum_2"],
            "out_sum_3": ins["in_sum_3"], "out_num_accumulates": ins["in_num_accumulates"],
            "out_old_num_accumulates": ins["in_old_num_accumulates"],
            "out_num_updates": ins["in_num_updates"]}


register_op("average_accumulates",
            inputs=("param", "in_sum_1", "in_sum_2", "in_sum_3", "in_num_accumulates",
                    "in_old_num_accumulates", "in_num_updates"),
            outputs=("out_sum_1", "out_sum_2", "out_sum_3", "out_num_accumulates",
                     "out_old_num_accumulates", "out_num_updates"),
            attrs={"average_window": 0.0, "max_average_window": 2 ** 63 - 1,
                   "min_average_window": 10000},
            infer_shape=_average_accumulates_shape, kernel=_average_accumulates)
