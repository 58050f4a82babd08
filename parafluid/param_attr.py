"""ParamAttr: how a layer creates its parameter (name, initializer, lr, regularizer, ...)."""

from __future__ import annotations

from typing import Any

__all__ = ["ParamAttr", "WeightNormParamAttr"]


class ParamAttr:
    """Settings for a layer parameter.

    Example::

        w = fluid.ParamAttr(name="fc_w", initializer=fluid.initializer.Constant(0.5),
                            learning_rate=0.5, regularizer=fluid.regularizer.L2Decay(1e-4))
        y = fluid.layers.fc(input=x, size=10, param_attr=w)
    """

    def __init__(self, name: str | None = None, initializer: Any = None,
                 learning_rate: float = 1.0, regularizer: Any = None, trainable: bool = True,
                 gradient_clip: Any = None, do_model_average: bool = True) -> None:
        self.name = name
        self.initializer = initializer
        self.learning_rate = learning_rate
        self.regularizer = regularizer
        self.trainable = trainable
        self.gradient_clip = gradient_clip
        self.do_model_average = do_model_average

    @staticmethod
    def _to_attr(arg: Any) -> ParamAttr | bool:
        """Accept None, a ParamAttr, a name, an initializer, or False (no parameter)."""
        from .initializer import Initializer

        if arg is None:
            return ParamAttr()
        if isinstance(arg, ParamAttr):
            return arg
        if isinstance(arg, str):
            return ParamAttr(name=arg)
        if isinstance(arg, Initializer):
            return ParamAttr(initializer=arg)
        if isinstance(arg, bool):
            return ParamAttr() if arg else False
        if isinstance(arg, (list, tuple)):
            raise TypeError("a list of ParamAttr is only accepted by layers with several inputs")
        raise TypeError(f"param_attr must be a ParamAttr, a name, an Initializer or False, "
                        f"got {type(arg).__name__}")

    def _to_kwargs(self) -> dict[str, Any]:
        return {"name": self.name, "optimize_attr": {"learning_rate": self.learning_rate},
                "regularizer": self.regularizer, "trainable": self.trainable,
                "gradient_clip_attr": self.gradient_clip,
                "do_model_average": self.do_model_average}


class WeightNormParamAttr(ParamAttr):
    """A parameter reparameterized as ``w = g * v / ||v||`` (weight normalization, Salimans
    & Kingma): the layer creates ``<name>_g`` and ``<name>_v`` and computes ``w`` from them
    with ordinary ops, so both train. The norm is over every axis but ``dim`` (over all
    axes when ``dim`` is None); ``g`` starts at the norm of ``v``'s initial value, so ``w``
    starts equal to ``v``.

    Example::

        out = fluid.layers.fc(x, size=32, param_attr=fluid.WeightNormParamAttr(
            dim=1, name="fc_wn", initializer=fluid.initializer.Normal(0.0, 0.05)))
    """

    def __init__(self, dim: int | None = None, name: str | None = None,
                 initializer: Any = None, learning_rate: float = 1.0, regularizer: Any = None,
                 trainable: bool = True, gradient_clip: Any = None,
                 do_model_average: bool = False) -> None:
        super().__init__(name, initializer, learning_rate, regularizer, trainable,
                         gradient_clip, do_model_average)
        if dim is not None and (isinstance(dim, bool) or not isinstance(dim, int)):
            raise TypeError(f"WeightNormParamAttr: dim must be an int or None, got {dim!r}")
        self.dim = dim
