"""Gradient clipping: ops inserted between the backward pass and the optimizer's updates.

Three strategies, as in Fluid::

    fluid.clip.GradientClipByValue(max=1.0)          # clamp each element to [-1, 1]
    fluid.clip.GradientClipByNorm(clip_norm=1.0)     # rescale each gradient to norm <= 1
    fluid.clip.GradientClipByGlobalNorm(clip_norm=5.0)  # rescale all so the joint norm <= 5

Attach one either to every parameter (or a list of them) with ``set_gradient_clip`` before
``minimize``, per parameter with ``ParamAttr(gradient_clip=...)``, or to an optimizer with
``grad_clip=`` (which then takes precedence over the per-parameter settings)::

    fluid.clip.set_gradient_clip(fluid.clip.GradientClipByGlobalNorm(clip_norm=5.0))
    fluid.optimizer.SGD(learning_rate=0.1).minimize(avg_cost)

The clipping ops run in the optimize phase (``op_role`` Optimize, ``op_role_var`` =
[param, grad]), like the updates themselves: in data-parallel training they see the
gradient after the all-reduce, so the result equals single-device training.
"""

from __future__ import annotations

import copy
from typing import Any

from . import unique_name
from .framework import Parameter, Program, Variable, default_main_program

__all__ = ["BaseGradientClipAttr", "NullGradientClipAttr", "ErrorClipByValue",
           "error_clip_callback", "GradientClipByValue",
           "GradientClipByNorm", "GradientClipByGlobalNorm", "set_gradient_clip",
           "append_gradient_clip_ops"]


class BaseGradientClipAttr:
    """Base class: ``_process_context`` sees every gradient first (to gather group-wide
    quantities such as the global norm), then ``_create_operators`` rewrites each one."""

    def _process_context(self, context: dict[str, Any], param: Parameter,
                         grad: Variable) -> None:
        """Record what this clip needs from all gradients (default: nothing)."""

    def _create_operators(self, param: Parameter, grad: Variable,
                          context: dict[str, Any]) -> tuple[Parameter, Variable]:
        raise NotImplementedError  # abstract: each strategy appends its own ops

    def __call__(self, params_grads: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
        """Apply this clip to every (param, grad) pair (Fluid 1.8's optimizer ``grad_clip``)."""
        return _apply(params_grads, lambda p: self)


class NullGradientClipAttr(BaseGradientClipAttr):
    """No clipping."""

    def _create_operators(self, param: Parameter, grad: Variable,
                          context: dict[str, Any]) -> tuple[Parameter, Variable]:
        return param, grad


def _clipped_var(grad: Variable, suffix: str = "@CLIP") -> Variable:
    return grad.block.create_var(name=unique_name.generate(grad.name + suffix),
                                 dtype=grad.dtype, type=grad.type)


class ErrorClipByValue:
    """Clip the *error* of a variable, its gradient during the backward pass, to
    ``[min, max]`` (``min`` defaults to ``-max``): set it as the variable's ``error_clip``
    before ``append_backward`` / ``minimize``.

    Example::

        hidden = fluid.layers.fc(x, 64)
        hidden.error_clip = fluid.clip.ErrorClipByValue(max=1.0)
        fluid.optimizer.SGD(0.1).minimize(loss)   # hidden@GRAD is clipped
    """

    def __init__(self, max: float, min: float | None = None) -> None:  # noqa: A002 (Fluid's names)
        max = float(max)
        min = -max if min is None else float(min)
        if min > max:
            raise ValueError(f"ErrorClipByValue: min ({min}) must be <= max ({max})")
        self.max, self.min = max, min

    def __str__(self) -> str:
        return f"ByValue, min={self.min:f}, max={self.max:f}"


def error_clip_callback(block: Any, context: Any) -> None:
    """Accepted in ``append_backward(callbacks=[...])`` as in Fluid; error clips are applied
    by ``append_backward`` itself."""


class GradientClipByValue(BaseGradientClipAttr):
    """Clamp every gradient element to ``[min, max]`` (``min`` defaults to ``-max``).

    Args:
        max: the upper bound.
        min: the lower bound (default ``-max``).

    Example::

        fluid.clip.set_gradient_clip(fluid.clip.GradientClipByValue(max=1.0))
    """

    def __init__(self, max: float, min: float | None = None) -> None:  # noqa: A002 (Fluid's names)
        max = float(max)
        min = -max if min is None else float(min)
        if min > max:
            raise ValueError(f"GradientClipByValue: min ({min}) must be <= max ({max})")
        self.max, self.min = max, min

    def _create_operators(self, param: Parameter, grad: Variable,
                          context: dict[str, Any]) -> tuple[Parameter, Variable]:
        out = _clipped_var(grad)
        # NOTE: Fluid 1.6 builds this with layers.clip: a "clip" op
        grad.block.append_op("clip", inputs={"X": [grad]}, outputs={"Out": [out]},
                             attrs={"min": self.min, "max": self.max})
        return param, out

    def __repr__(self) -> str:
        return f"GradientClipByValue(min={self.min}, max={self.max})"


class GradientClipByNorm(BaseGradientClipAttr):
    """Rescale each gradient on its own so that its L2 norm is at most ``clip_norm``.

    Example::

        attr = fluid.ParamAttr(gradient_clip=fluid.clip.GradientClipByNorm(clip_norm=1.0))
    """

    def __init__(self, clip_norm: float) -> None:
        if not float(clip_norm) > 0:
            raise ValueError(f"GradientClipByNorm: clip_norm must be > 0, got {clip_norm}")
        self.clip_norm = float(clip_norm)

    def _create_operators(self, param: Parameter, grad: Variable,
                          context: dict[str, Any]) -> tuple[Parameter, Variable]:
        out = _clipped_var(grad)
        grad.block.append_op("clip_by_norm", inputs={"X": [grad]}, outputs={"Out": [out]},
                             attrs={"max_norm": self.clip_norm})
        return param, out

    def __repr__(self) -> str:
        return f"GradientClipByNorm(clip_norm={self.clip_norm})"


class GradientClipByGlobalNorm(BaseGradientClipAttr):
    """Rescale all gradients of a group by ``clip_norm / max(global_norm, clip_norm)``.

    ``global_norm = sqrt(sum of the squared L2 norms of every gradient in the group)``.
    Parameters with the same ``group_name`` form one group; all of them must use the same
    ``clip_norm``.

    Example::

        fluid.clip.set_gradient_clip(fluid.clip.GradientClipByGlobalNorm(clip_norm=5.0))
    """

    def __init__(self, clip_norm: float, group_name: str = "default_group") -> None:
        if not float(clip_norm) > 0:
            raise ValueError(f"GradientClipByGlobalNorm: clip_norm must be > 0, got {clip_norm}")
        if not isinstance(group_name, str):
            raise TypeError(f"GradientClipByGlobalNorm: group_name must be a str, "
                            f"got {type(group_name).__name__}")
        self.clip_norm = float(clip_norm)
        self.group_name = group_name

    def _process_context(self, context: dict[str, Any], param: Parameter,
                         grad: Variable) -> None:
        key = ("global_norm", self.group_name)
        group = context.setdefault(key, {"clip_norm": self.clip_norm, "squares": [],
                                         "total": None})
        if group["clip_norm"] != self.clip_norm:
            raise ValueError(f"GradientClipByGlobalNorm: parameters of group "
                             f"{self.group_name!r} use different clip_norm values "
                             f"({group['clip_norm']} and {self.clip_norm} for {param.name!r}); "
                             "all parameters of a group must use the same clip_norm")
        square = grad.block.create_var(name=unique_name.generate(grad.name + "@SQUARED_NORM"),
                                       dtype=grad.dtype)
        grad.block.append_op("squared_l2_norm", inputs={"X": [grad]},
                             outputs={"Out": [square]})
        group["squares"].append(square)

    def _create_operators(self, param: Parameter, grad: Variable,
                          context: dict[str, Any]) -> tuple[Parameter, Variable]:
        group = context[("global_norm", self.group_name)]
        if group["total"] is None:
            block = grad.block
            total = block.create_var(
                name=unique_name.generate(f"{self.group_name}@GLOBAL_NORM_SQUARE"),
                dtype=grad.dtype)
            block.append_op("sum", inputs={"X": group["squares"]}, outputs={"Out": [total]})
            group["total"] = total
        out = _clipped_var(grad)
        grad.block.append_op("clip_by_global_norm",
                             inputs={"X": [grad], "SquaredNorm": [group["total"]]},
                             outputs={"Out": [out]}, attrs={"clip_norm": self.clip_norm})
        return param, out

    def __repr__(self) -> str:
        return f"GradientClipByGlobalNorm(clip_norm={self.clip_norm}, " \
               f"group_name={self.group_name!r})"


def set_gradient_clip(clip: BaseGradientClipAttr, param_list: list[Any] | None = None,
                      program: Program | None = None) -> None:
    """Use ``clip`` for the gradients of ``param_list`` (default: every parameter of
    ``program``, default the main program). Call it before ``minimize``.

    Args:
        clip: a GradientClipByValue / GradientClipByNorm / GradientClipByGlobalNorm.
        param_list: Parameters or parameter names.
        program: where the parameters live.

    Example::

        fluid.clip.set_gradient_clip(fluid.clip.GradientClipByNorm(clip_norm=2.0))
    """
    if not isinstance(clip, BaseGradientClipAttr):
        raise TypeError(f"set_gradient_clip: clip must be a GradientClipByValue, "
                        f"GradientClipByNorm or GradientClipByGlobalNorm, "
                        f"got {type(clip).__name__}")
    program = program or default_main_program()
    if param_list is None:
        params = program.global_block().all_parameters()
    else:
        params = []
        for p in param_list:
            if isinstance(p, str):
                var = program.global_block()._find_var_recursive(p)
                if not isinstance(var, Parameter):
                    raise ValueError(f"set_gradient_clip: {p!r} is not a parameter of the "
                                     "program")
                p = var
            if not isinstance(p, Parameter):
                raise TypeError(f"set_gradient_clip: param_list items must be Parameters or "
                                f"names, got {type(p).__name__}")
            params.append(p)
    for p in params:
        p.gradient_clip_attr = copy.deepcopy(clip)


def append_gradient_clip_ops(params_grads: list[tuple[Any, Any]],
                             clip: Any = None) -> list[tuple[Any, Any]]:
    """Return the (param, clipped grad) pairs, appending the clipping ops.

    ``clip`` (the optimizer's ``grad_clip``) applies to every pair when given; otherwise
    each parameter's own ``gradient_clip_attr`` does (pairs without one pass through).
    """
    if clip is not None and not isinstance(clip, BaseGradientClipAttr):
        raise TypeError(f"grad_clip must be a GradientClipByValue, GradientClipByNorm or "
                        f"GradientClipByGlobalNorm, got {type(clip).__name__}")
    if clip is None and all(getattr(p, "gradient_clip_attr", None) is None
                            for p, _ in params_grads):
        return params_grads
    if clip is not None:
        return _apply(params_grads, lambda p: clip)
    return _apply(params_grads, lambda p: getattr(p, "gradient_clip_attr", None))


def _apply(params_grads: list[tuple[Any, Any]], clip_of: Any) -> list[tuple[Any, Any]]:
    """Two passes (context, then rewrite) under each pair's optimize-role guard."""
    context: dict[Any, Any] = {}
    for p, g in params_grads:
        attr = clip_of(p)
        if g is None or attr is None:
            continue
        if not isinstance(attr, BaseGradientClipAttr):
            raise TypeError(f"gradient clip of {p.name!r} must be a GradientClipByValue, "
                            f"GradientClipByNorm or GradientClipByGlobalNorm, "
                            f"got {type(attr).__name__}")
        with g.block.program._optimized_guard([p, g]):
            attr._process_context(context, p, g)
    out = []
    for p, g in params_grads:
        attr = clip_of(p)
        if g is None or attr is None:
            out.append((p, g))
            continue
        with g.block.program._optimized_guard([p, g]):
            out.append(attr._create_operators(p, g, context))
    return out


def __getattr__(name: str) -> object:
    # Fluid 1.6 names left out here import and fail on use, saying what to use instead
    from .compat import missing_attribute

    return missing_attribute("clip", name, __all__)
