"""``fluid.optimizer.PipelineOptimizer``: Fluid's section pipeline mapped onto op placement.

Fluid cuts a program at the variables of ``cut_list`` (k lists) into 2k-1 sections: forward
sections 0..k-1 (the ops computing each cut from the one before), then the backward of
sections k-2..0 (the last forward section also holds its own backward and updates), each
section on ``place_list[i]``. Here section i's ops get the device of its place as their
``op_device`` (docs/placement.md): a CPUPlace is ``cpu:<stage>`` (the stage of section i is
``min(i, 2k-2-i)``, so a forward section and its backward share a device), a
``CUDAPlace(n)`` is ``gpu:n``. The executors then copy values between the stages and run
every device on a lane of its own.

Each batch of ``Executor.train_from_dataset`` is one synchronous step, so the numbers are
those of the same program without the optimizer (bit for bit); the stages overlap within a
step through micro-batches when the program is given as
``fluid.CompiledProgram(main, build_strategy=bs)`` with ``bs.num_microbatches = m``.
``concurrency_list``, ``queue_size``, ``sync_steps`` and ``start_cpu_core_id`` (Fluid's
asynchronous section workers) are checked and recorded in ``program._pipeline_opt``.

Example::

    opt = fluid.optimizer.PipelineOptimizer(
        fluid.optimizer.SGD(learning_rate=0.5), cut_list=[[emb_x, emb_y], [loss]],
        place_list=[fluid.CPUPlace(), fluid.CPUPlace(), fluid.CPUPlace()],
        concurrency_list=[1, 1, 1], queue_size=2, sync_steps=1)
    opt.minimize(loss)
    exe.train_from_dataset(fluid.default_main_program(), dataset)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..framework import OpRole, Program, Variable
from ..place import CPUPlace, CUDAPlace
from ..placement import DEVICE_ATTR
from .base import Optimizer

__all__ = ["PipelineOptimizer"]


class PipelineOptimizer:
    """Train with the program cut into pipeline sections (see the module docstring).

    Args:
        optimizer: the optimizer that updates the parameters (e.g. ``SGD``).
        cut_list: k lists of Variables; the last is usually ``[loss]``.
        place_list: 2k-1 places, one per section (CPUPlace or CUDAPlace).
        concurrency_list: 2k-1 positive ints (Fluid's workers per section; recorded).
        queue_size: scopes between sections in Fluid (recorded), default 30.
        sync_steps: steps between parameter syncs across cards in Fluid (recorded).
        start_cpu_core_id: the first core Fluid binds (recorded).
    """

    def __init__(self, optimizer: Any, cut_list: Sequence[Sequence[Variable]] | None = None,
                 place_list: Sequence[Any] | None = None,
                 concurrency_list: Sequence[int] | None = None, queue_size: int = 30,
                 sync_steps: int = 1, start_cpu_core_id: int = 0) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"PipelineOptimizer: optimizer must be a fluid.optimizer "
                            f"optimizer (e.g. SGD), got {type(optimizer).__name__}")
        if not cut_list or isinstance(cut_list, Variable) or \
                not all(isinstance(c, (list, tuple)) and c and
                        all(isinstance(v, Variable) for v in c) for c in cut_list):
            raise TypeError("PipelineOptimizer: cut_list must be a list of non-empty lists of "
                            f"Variables (e.g. [[emb], [loss]]), got {cut_list!r}")
        sections = 2 * len(cut_list) - 1
        if place_list is None or len(place_list) != sections:
            raise ValueError(f"PipelineOptimizer: {len(cut_list)} cuts make {sections} "
                             f"sections, so place_list needs {sections} places, got "
                             f"{None if place_list is None else len(place_list)}")
        for i, place in enumerate(place_list):
            if not isinstance(place, (CPUPlace, CUDAPlace)):
                raise TypeError(f"PipelineOptimizer: place_list[{i}] must be a CPUPlace or "
                                f"CUDAPlace, got {type(place).__name__}")
        concurrency_list = list(concurrency_list) if concurrency_list is not None \
            else [1] * sections
        if len(concurrency_list) != sections or not all(
                isinstance(c, int) and not isinstance(c, bool) and c > 0
                for c in concurrency_list):
            raise ValueError(f"PipelineOptimizer: concurrency_list needs {sections} positive "
                             f"ints, got {concurrency_list!r}")
        for name, value, low in (("queue_size", queue_size, 1), ("sync_steps", sync_steps, 1),
                                 ("start_cpu_core_id", start_cpu_core_id, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"PipelineOptimizer: {name} must be an int >= {low}, got "
                                 f"{value!r}")
        self._optimizer = optimizer
        self._cut_list = [list(c) for c in cut_list]
        self._place_list = list(place_list)
        self._concurrency_list = concurrency_list
        self._queue_size, self._sync_steps = queue_size, sync_steps
        self._start_cpu_core_id = start_cpu_core_id

    def minimize(self, loss: Variable, startup_program: Program | None = None,
                 parameter_list: list[Any] | None = None, no_grad_set: Any = None) -> Any:
        """Place the forward ops by section, then minimize with the wrapped optimizer (the
        gradient and update ops take their forward op's place); returns what it returns."""
        program = loss.block.program
        block = program.global_block()
        k = len(self._cut_list)
        for cuts in self._cut_list:
            for var in cuts:
                if block._find_var_recursive(var.name) is None:
                    raise ValueError(f"PipelineOptimizer: cut variable {var.name!r} is not a "
                                     "variable of the loss's program")
        devices = [self._device(i, k) for i in range(2 * k - 1)]
        section = _forward_sections(block.ops, [[v.name for v in c] for c in self._cut_list])
        for op, s in zip(block.ops, section):
            op.attrs[DEVICE_ATTR] = devices[s]
        program._bump()
        n_forward = len(block.ops)
        result = self._optimizer.minimize(loss, startup_program, parameter_list, no_grad_set)
        # a backward section placed elsewhere than its forward one (e.g. Fluid's embedding
        # section: forward on the CPU, its gradient and update too, the middle on a GPU)
        for i in range(k - 1):
            fwd, bwd = devices[i], devices[2 * k - 2 - i]
            if fwd == bwd:
                continue
            for op in block.ops[n_forward:]:
                role = int(op.attrs.get("op_role", 0))
                if role & (OpRole.Backward | OpRole.Optimize) and \
                        op.attrs.get(DEVICE_ATTR) == fwd:
                    op.attrs[DEVICE_ATTR] = bwd
        program._bump()
        program._pipeline_opt = {
            "trainer": "PipelineTrainer", "device_worker": "Section",
            "section_devices": devices, "place_list": self._place_list,
            "concurrency_list": self._concurrency_list, "queue_size": self._queue_size,
            "sync_steps": self._sync_steps, "start_cpu_core_id": self._start_cpu_core_id}
        return result

    def _device(self, i: int, k: int) -> str:
        place = self._place_list[i]
        if isinstance(place, CUDAPlace):
            return f"gpu:{place.device_id}"
        return f"cpu:{min(i, 2 * k - 2 - i)}"


def _forward_sections(ops: Sequence[Any], cuts: list[list[str]]) -> list[int]:
    """The forward section of each op: the first cut it is needed for; an op needed for none
    goes with the latest section among the writers of its inputs."""
    section: list[int | None] = [None] * len(ops)
    for s, names in enumerate(cuts):
        wanted = set(names)
        for i in range(len(ops) - 1, -1, -1):
            op = ops[i]
            if section[i] is None and wanted & set(op.output_arg_names):
                section[i] = s
                wanted |= set(op.input_arg_names)
    writer_section: dict[str, int] = {}
    out = []
    for i, op in enumerate(ops):
        s = section[i]
        if s is None:
            s = max((writer_section.get(n, 0) for n in op.input_arg_names), default=0)
        for n in op.output_arg_names:
            writer_section[n] = s
        out.append(s)
    return out
