"""Data parallelism in the imperative mode: ``prepare_context`` and ``DataParallel``.

One process per trainer, started by ``python -m parafluid.distributed.launch
--nproc_per_node N train.py``; each computes the loss on its part of the batch, and the
gradients are summed over the trainers through the collective communicator
(``parafluid.distributed.collective``) before the optimizer runs. With one process both
are the identity.

The trainers are checked against each other: their parameters (names, shapes, dtypes,
where they sit) before trainer 0's values are broadcast, and the step of every gradient
all-reduce, in the all-reduce's own data (see ``DataParallel`` and docs/dygraph.md).

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

import torch

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
        # the models wrapped in DataParallel: where each parameter sits, for the check
        self._roots: list[Layer] = []


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
        tracer._on_build = lambda params: _sync(comm, strategy, params)
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


def _sync(comm: Any, strategy: ParallelStrategy, params: list[Any]) -> None:
    """Give the parameters among ``params`` not yet synchronized trainer 0's values, after
    checking that every trainer has the same ones (names, shapes, dtypes, where they sit).

    The values travel in name order, one broadcast per dtype, so the order in which the
    trainers created their parameters does not matter; a parameter whose generated name
    sits at another attribute on some trainer (layers created in another order) is refused.
    """
    seen: set[int] = set()
    new = []
    for p in params:
        if not getattr(p, "_broadcast_done", False) and id(p) not in seen:
            seen.add(id(p))
            new.append(p)
    if not new:
        return
    new.sort(key=lambda p: p.name)
    _check_parameters(comm, strategy, new)
    for group in _by_dtype(new):
        mine = torch.cat([p._value.reshape(-1) for p in group]) \
            if strategy.local_rank == 0 else None
        got = comm.broadcast(mine, 0, name=_label(group))[0]
        if strategy.local_rank != 0:
            at = 0
            for p in group:
                n = p._value.numel()
                p._value = got[at:at + n].view(p._value.shape).clone()
                at += n
    for p in new:
        p._broadcast_done = True


def _by_dtype(params: list[Any]) -> list[list[Any]]:
    """``params`` grouped by dtype (groups in dtype-name order, name order within)."""
    groups: dict[str, list[Any]] = {}
    for p in params:
        groups.setdefault(str(p._value.dtype), []).append(p)
    return [groups[k] for k in sorted(groups)]


def _label(group: list[Any]) -> str:
    """A collective's name for a group of parameters (part of its signature)."""
    names = group[0].name if len(group) == 1 else \
        f"{len(group)} parameters {group[0].name}..{group[-1].name}"
    return f"{names} ({sum(p._value.numel() for p in group)} {group[0]._value.dtype})"


def _paths(strategy: ParallelStrategy) -> dict[int, str]:
    """Where each parameter of the DataParallel models sits (``fc1.weight``), by id."""
    out: dict[int, str] = {}

    def walk(layer: Layer, prefix: str) -> None:
        for attr, p in layer._parameters.items():
            if p is not None:
                out.setdefault(id(p), prefix + attr)
        for attr, sub in layer._sub_layers.items():
            if sub is not None:
                walk(sub, f"{prefix}{attr}.")

    for root in getattr(strategy, "_roots", []):
        walk(root, "")
    return out


def _describe_parameter(p: Any, path: str) -> str:
    return f"{p.name}|{path}|{list(p._value.shape)}|{str(p._value.dtype).replace('torch.', '')}"


def _check_parameters(comm: Any, strategy: ParallelStrategy, params: list[Any]) -> None:
    """Raise ValueError on every trainer when the trainers' ``params`` differ: each
    difference names the trainer, the parameter, trainer 0's (expected) and its own."""
    paths = _paths(strategy)
    names = [p.name for p in params]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"DataParallel: several parameters are named {dup[:5]}: parameters "
                         "are matched across trainers by name, give each its own")
    mine = "\n".join(_describe_parameter(p, paths.get(id(p), "")) for p in params)
    texts = comm.exchange("DataParallel parameters", mine,
                          "checking the parameters of DataParallel")
    tables = [_parse(t) for t in texts]
    problems = []
    for k in range(1, len(tables)):
        diff = _differences(tables[0], tables[k])
        if diff:
            problems.append(f"{comm.describe(k)}: " + "; ".join(diff[:5])
                            + (f"; and {len(diff) - 5} more" if len(diff) > 5 else ""))
    if problems:
        raise ValueError(
            f"DataParallel: the trainers' parameters differ (checked on "
            f"{comm.describe(comm.trainer_id)} before trainer 0's values are broadcast; every "
            "trainer must build the same model, its layers created in the same order): "
            + " | ".join(problems))


def _parse(text: str) -> dict[str, tuple[str, str, str]]:
    rows = [line.split("|") for line in text.splitlines() if line]
    return {r[0]: (r[1], r[2], r[3]) for r in rows}


def _differences(ref: dict[str, tuple[str, str, str]],
                 got: dict[str, tuple[str, str, str]]) -> list[str]:
    """What differs in ``got`` (one trainer's parameters) from ``ref`` (trainer 0's)."""
    out = []
    for name in sorted(set(ref) | set(got)):
        if name not in got:
            out.append(f"parameter {name} ({_show(ref[name])}) is missing, trainer 0 has it")
        elif name not in ref:
            out.append(f"parameter {name} ({_show(got[name])}) is extra, trainer 0 has none")
        elif ref[name] != got[name]:
            (rp, rs, rd), (gp, gs, gd) = ref[name], got[name]
            what = [f"{label} {g}, expected {r} (trainer 0)" for label, r, g in
                    (("shape", rs, gs), ("dtype", rd, gd), ("attribute", rp or "?", gp or "?"))
                    if r != g]
            out.append(f"parameter {name}: " + ", ".join(what))
    return out


def _show(row: tuple[str, str, str]) -> str:
    path, shape, dtype = row
    return f"{shape} {dtype}" + (f" at {path}" if path else "")


class DataParallel(Layer):
    """Runs ``layers`` on this trainer's part of the batch; ``scale_loss`` and
    ``apply_collective_grads`` make the update the one of the whole batch.

    The parameters are broadcast from trainer 0, so all trainers start equal whatever
    their initializers drew: those existing when it is made, and those a Layer creates in
    ``_build_once`` on its first call (before its forward runs). Before each broadcast the
    trainers compare their parameters (names, shapes, dtypes, the attribute each sits at):
    a difference raises ValueError on every trainer naming the trainer, the parameter,
    trainer 0's and its own. Parameters are matched by name, so creating them in another
    order is harmless as long as each name is the same parameter everywhere.

    Each collective carries a signature (this model's step, the number of training
    forward calls, and what it sums) checked inside its own data: trainers out of step (one
    skipped ``apply_collective_grads``) fail on every trainer with
    ``CollectiveMismatchError`` naming each trainer's step.

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
        self._steps = 0  # training forward calls: every trainer makes as many
        if strategy.nranks > 1:
            if not hasattr(strategy, "_roots"):
                strategy._roots = []
            strategy._roots.append(layers)
            comm = _communicator(strategy, framework._dygraph_tracer())
            comm.step = self._steps
            _sync(comm, strategy, layers.parameters())

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        tracer = framework._dygraph_tracer()
        if tracer is not None and tracer._train_mode and tracer._has_grad:
            self._steps += 1
        if self._strategy.nranks > 1:
            # NOTE: parameters a layer builds on this call are broadcast under this step
            _communicator(self._strategy, tracer).step = self._steps
        return self._layers(*inputs, **kwargs)

    def scale_loss(self, loss: Any) -> Any:
        """``loss / nranks`` (so that the summed gradients are those of the whole batch's
        mean); ``loss`` itself with one trainer."""
        if self._strategy.nranks < 2:
            return loss
        from ..layers import scale

        return scale(loss, scale=1.0 / self._strategy.nranks)

    def apply_collective_grads(self) -> None:
        """Sum every trainable parameter's gradient over the trainers.

        The dense gradients travel as one buffer per dtype, in parameter name order, with a
        flag per parameter saying whether this trainer has its gradient (a parameter that
        only some trainers used gets their sum, as one process on the whole batch would;
        one that no trainer used keeps no gradient) and the signature check in the same
        buffer: one collective per dtype and step. Row-sparse gradients are gathered one
        parameter at a time.
        """
        if self._strategy.nranks < 2:
            return
        comm = _communicator(self._strategy, framework._dygraph_tracer())
        comm.step = self._steps
        params = sorted((p for p in self._layers.parameters() if p.trainable),
                        key=lambda p: p.name)
        from ..distributed.collective import CollectiveMismatchError
        from ..scope import SelectedRows

        sparse = [p for p in params if isinstance(p._grad, SelectedRows)]
        dense = [p for p in params if not isinstance(p._grad, SelectedRows)]
        try:
            for group in _by_dtype(dense):
                self._all_reduce_dense(comm, group)
            for p in sparse:
                p._grad = comm.all_reduce([p._grad], name=p.name)[0]
        except CollectiveMismatchError as e:
            raise CollectiveMismatchError(
                f"DataParallel.apply_collective_grads on trainer "
                f"{self._strategy.local_rank} at step {self._steps}: {e}. The trainers are "
                "out of step: each must call the model (in training) and "
                "apply_collective_grads as often as the others") from e

    def _all_reduce_dense(self, comm: Any, group: list[Any]) -> None:
        value = group[0]._value
        parts = [p._grad.reshape(-1) if p._grad is not None else
                 torch.zeros(p._value.numel(), dtype=value.dtype, device=value.device)
                 for p in group]
        flags = torch.tensor([0.0 if p._grad is None else 1.0 for p in group],
                             dtype=value.dtype, device=value.device)
        flat = torch.cat([*parts, flags])
        # NOTE: the parameter check compared every trainer's parameters, so the buffers
        # have the same size everywhere: the signature check rides in the data
        comm.sizes_agreed = True
        try:
            total = comm.all_reduce([flat], donate=True, name="gradients of " + _label(group))[0]
        finally:
            comm.sizes_agreed = False
        counts = total[-len(group):].tolist()
        at = 0
        for p, count in zip(group, counts):
            n = p._value.numel()
            if count:
                p._grad = total[at:at + n].view(p._value.shape)
            at += n

    def state_dict(self, destination: dict[str, Any] | None = None,
                   include_sublayers: bool = True) -> Any:
        return self._layers.state_dict(destination, include_sublayers)

    def load_dict(self, stat_dict: dict[str, Any], include_sublayers: bool = True) -> None:
        self._layers.load_dict(stat_dict, include_sublayers)

    set_dict = load_dict
