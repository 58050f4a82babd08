"""Data parallelism in the imperative mode: ``prepare_context`` and ``DataParallel``.

One process per trainer, started by ``python -m parafluid.distributed.launch
--nproc_per_node N train.py``; each computes the loss on its part of the batch, and the
gradients are summed over the trainers through the collective communicator
(``parafluid.distributed.collective``) before the optimizer runs. With one process both
are the identity.

Example::

    with fluid.dygraph.guard():
        strategy = fluid.dygraph.prepare_context()
        model = fluid.dygraph.DataParallel(MLP("mlp"), strategy)
        loss = model.scale_loss(model(x, y))
        loss.backward()
        model.apply_collective_grads()
        opt.minimize(loss)
        model.clear_gradients()
"""

from __future__ import annotations

from typing import Any

from .. import framework
from ..distributed.env import env as _job_env
from .layers import Layer

__all__ = ["prepare_context", "ParallelStrategy", "Env", "DataParallel"]


class ParallelStrategy:
    """The job as ``DataParallel`` sees it: ``nranks`` trainers, this one's
    ``local_rank``, every trainer's endpoint and this one's."""

    def __init__(self) -> None:
        self.nranks = 1
        self.local_rank = 0
        self.trainer_endpoints: list[str] = []
        self.current_endpoint = ""


class Env:
    """The job from the launcher's environment (``PADDLE_TRAINER_ID`` ...)."""

    def __init__(self) -> None:
        e = _job_env()
        self._nranks = e.trainers
        self._local_rank = e.trainer_id
        self._dev_id = 0
        self._trainer_endpoints = list(e.trainer_endpoints)
        self._current_endpoint = e.current_endpoint

    @property
    def nranks(self) -> int:
        return self._nranks

    @property
    def local_rank(self) -> int:
        return self._local_rank

    @property
    def dev_id(self) -> int:
        return self._dev_id

    @property
    def current_endpoint(self) -> str:
        return self._current_endpoint

    @property
    def trainer_endpoints(self) -> list[str]:
        return self._trainer_endpoints


def prepare_context(strategy: ParallelStrategy | None = None) -> ParallelStrategy:
    """Join the other trainers of the job (nothing to do with one): the strategy that
    ``DataParallel`` takes. Call inside ``fluid.dygraph.guard()``."""
    tracer = framework._dygraph_tracer()
    if tracer is None:
        raise RuntimeError("prepare_context works in the imperative mode: call it inside "
                           "`with fluid.dygraph.guard():`")
    if strategy is None:
        e = Env()
        strategy = ParallelStrategy()
        strategy.nranks = e.nranks
        strategy.local_rank = e.local_rank
        strategy.trainer_endpoints = e.trainer_endpoints
        strategy.current_endpoint = e.current_endpoint
    if strategy.nranks > 1:
        comm = _communicator(strategy, tracer, join=True)
        tracer._on_build = lambda params: _broadcast(comm, strategy, params)
    return strategy


def _communicator(strategy: ParallelStrategy, tracer: Any, join: bool = False) -> Any:
    from ..distributed.collective import get_collective, init_collective

    if len(strategy.trainer_endpoints) != strategy.nranks:
        raise ValueError(f"DataParallel: the strategy has nranks={strategy.nranks} but "
                         f"{len(strategy.trainer_endpoints)} trainer endpoints "
                         f"({strategy.trainer_endpoints})")
    if join:
        return init_collective(strategy.trainer_endpoints, strategy.local_rank,
                               [tracer.device])
    comm = get_collective(strategy.trainer_endpoints, strategy.local_rank)
    if comm is None:
        raise RuntimeError("DataParallel: this trainer has not joined the job; call "
                           "fluid.dygraph.prepare_context() first")
    return comm


def _broadcast(comm: Any, strategy: ParallelStrategy, params: list[Any]) -> None:
    """Give ``params`` trainer 0's values (each parameter once, in the given order, which
    is the same on every trainer)."""
    for p in params:
        if getattr(p, "_broadcast_done", False):
            continue
        mine = p._value if strategy.local_rank == 0 else None
        p._value = comm.broadcast(mine, 0, name=p.name)[0]
        p._broadcast_done = True


class DataParallel(Layer):
    """Runs ``layers`` on this trainer's part of the batch; ``scale_loss`` and
    ``apply_collective_grads`` make the update the one of the whole batch.

    The parameters are broadcast from trainer 0, so all trainers start equal whatever
    their initializers drew: those existing when it is made, and those a Layer creates in
    ``_build_once`` on its first call (before its forward runs).

    Args:
        layers: the model (a Layer).
        strategy: from ``prepare_context()``.
    """

    def __init__(self, layers: Layer, strategy: ParallelStrategy) -> None:
        if not isinstance(layers, Layer):
            raise TypeError(f"DataParallel: layers must be a fluid.dygraph.Layer, got "
                            f"{type(layers).__name__}")
        super().__init__(layers.full_name() + "_data_parallel")
        self._layers = layers
        self._strategy = strategy
        if strategy.nranks > 1:
            self._broadcast_parameters()

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        return self._layers(*inputs, **kwargs)

    def scale_loss(self, loss: Any) -> Any:
        """``loss / nranks`` (so that the summed gradients are those of the whole batch's
        mean); ``loss`` itself with one trainer."""
        if self._strategy.nranks < 2:
            return loss
        from ..layers import scale

        return scale(loss, scale=1.0 / self._strategy.nranks)

    def apply_collective_grads(self) -> None:
        """Sum every parameter's gradient over the trainers (in parameter order, the same
        on every trainer)."""
        if self._strategy.nranks < 2:
            return
        comm = _communicator(self._strategy, framework._dygraph_tracer())
        for p in self._layers.parameters():
            if not p.trainable or p._grad is None:
                continue
            p._grad = comm.all_reduce([p._grad], name=p.name)[0]

    def _broadcast_parameters(self) -> None:
        comm = _communicator(self._strategy, framework._dygraph_tracer())
        _broadcast(comm, self._strategy, self._layers.parameters())

    def state_dict(self, destination: dict[str, Any] | None = None,
                   include_sublayers: bool = True) -> Any:
        return self._layers.state_dict(destination, include_sublayers)

    def load_dict(self, stat_dict: dict[str, Any], include_sublayers: bool = True) -> None:
        self._layers.load_dict(stat_dict, include_sublayers)

    set_dict = load_dict
