"""Normalization layers outside ``nn``'s convolution family: ``data_norm`` (normalization by
accumulated data statistics) and ``spectral_norm`` (a weight divided by its largest singular
value); ops in ``parafluid/ops/data_norm.py``, ``normalize.py``."""

from __future__ import annotations

from typing import Any

from ..framework import Variable
from ..layer_helper import LayerHelper
from .common import append_one, check_vars

__all__ = ["data_norm", "spectral_norm"]


def data_norm(input: Variable, act: str | None = None, epsilon: float = 1e-05,
              param_attr: Any = None, data_layout: str = "NCHW", in_place: bool = False,
              name: str | None = None, moving_mean_name: str | None = None,
              moving_variance_name: str | None = None,
              do_model_average_for_mean_and_var: bool = True) -> Variable:
    """Normalize the columns of a 2-D ``input`` ``[N, C]`` by accumulated statistics.

    Three trainable parameters of ``C`` values, ``<name>.batch_size``, ``<name>.batch_sum``
    and ``<name>.batch_square_sum`` (initialized to 1e4, 0 and 1e4, or to the values of a
    ``param_attr`` dict's ``batch_size`` / ``batch_sum`` / ``batch_square`` keys), give
    ``mean = batch_sum / batch_size`` and ``scale = sqrt(batch_size / batch_square_sum)``;
    the output is ``(input - mean) * scale``, then ``act``. Their gradients are this batch's
    count, sum and centred square sum (plus ``N * epsilon``), which the optimizer adds in.
    ``in_place``, ``moving_mean_name``, ``moving_variance_name`` and
    ``do_model_average_for_mean_and_var`` are accepted as in Fluid and unused.

    Example::

        x = fluid.layers.data(name="x", shape=[32], dtype="float32")
        y = fluid.layers.data_norm(input=x)
    """
    from ..initializer import Constant
    from ..param_attr import ParamAttr

    if not isinstance(input, Variable):
        raise TypeError(f"data_norm: input must be a Variable, got {type(input).__name__}")
    shape = list(input.shape or ())
    if len(shape) != 2:
        raise ValueError(f"data_norm: input must be 2-D [N, C], got shape {shape}")
    if data_layout not in ("NCHW", "NHWC"):
        raise ValueError(f"data_norm: unsupported data_layout {data_layout!r}; expected "
                         "'NCHW' or 'NHWC'")
    defaults = {"batch_size": 1e4, "batch_sum": 0.0, "batch_square": 1e4}
    if isinstance(param_attr, dict):
        defaults.update({k: param_attr[k] for k in defaults if k in param_attr})
    helper = LayerHelper("data_norm", input=input, act=act, name=name)
    dtype = helper.input_dtype()
    stats = []
    for suffix, key in (("batch_size", "batch_size"), ("batch_sum", "batch_sum"),
                        ("batch_square_sum", "batch_square")):
        attr = ParamAttr(name=f"{helper.name}.{suffix}",
                         initializer=Constant(float(defaults[key])), trainable=True)
        stats.append(helper.create_parameter(attr, [shape[1]], dtype))
    means = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    scales = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    out = helper.create_variable_for_type_inference(dtype)
    helper.append_op("data_norm",
                     inputs={"X": [input], "BatchSize": [stats[0]], "BatchSum": [stats[1]],
                             "BatchSquareSum": [stats[2]]},
                     outputs={"Y": [out], "Means": [means], "Scales": [scales]},
                     attrs={"epsilon": float(epsilon)})
    return helper.append_activation(out)


def spectral_norm(weight: Variable, dim: int = 0, power_iters: int = 1, eps: float = 1e-12,
                  name: str | None = None) -> Variable:
    """``weight / sigma``, sigma its largest singular value (``weight`` seen as a matrix with
    ``dim`` first) estimated by ``power_iters`` power iterations from stored vectors ``U``,
    ``V`` (non-trainable parameters drawn from Normal(0, 1); as in Fluid 1.6 the op does not
    update them).

    Example::

        w = fluid.layers.data(name="w", shape=[8, 36], dtype="float32",
                              append_batch_size=False)
        w_sn = fluid.layers.spectral_norm(w, dim=0, power_iters=2)
    """
    from ..initializer import Normal
    from ..param_attr import ParamAttr

    check_vars("spectral_norm", weight=weight)
    shape = list(weight.shape or ())
    if len(shape) < 2 or not 0 <= dim < len(shape) or min(shape) <= 0:
        raise ValueError(f"spectral_norm: weight {weight.name!r} must be a known shape of "
                         f"rank >= 2 and dim must index it, got {shape} and dim={dim}")
    h = shape[dim]
    w = 1
    for i, d in enumerate(shape):
        if i != dim:
            w *= d
    helper = LayerHelper("spectral_norm", name=name)
    vectors = []
    for size in (h, w):
        vec = helper.create_parameter(ParamAttr(trainable=False), [size], weight.dtype,
                                      default_initializer=Normal(0.0, 1.0, 0))
        vec.stop_gradient = True
        vectors.append(vec)
    u, v = vectors
    return append_one("spectral_norm", {"Weight": [weight], "U": [u], "V": [v]},
                   {"dim": int(dim), "power_iters": int(power_iters), "eps": float(eps)},
                   weight.dtype, name)
