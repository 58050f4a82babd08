"""``StaticRNN``: a recurrence over the first dimension of fixed-length inputs.

Fluid builds one ``recurrent`` op holding the step block. parafluid records the step block
the same way and then unrolls it, at build time, into the enclosing block: one copy of the
step's ops per time step, ``slice`` + ``squeeze`` for each step input, the memories wired
from one copy to the next, and a ``stack`` per step output. The numbers are those of the
recurrent op (the same ops run in the same order on the same values), the parameters created
in the step are shared by every copy, and the gradient is the ordinary backward of the
unrolled ops. The cost: the program grows with the sequence length.

When the sequence length is not known when the program is built (the step inputs' first
dimension is -1), the step block stays a block and one ``recurrent`` op runs it over the
steps the inputs have when the program runs, as Fluid's StaticRNN always does: inside the
block an input's outer name holds its step slice and an output's name the step's value
(``rnn_memory_helper`` copies), the memories are its ``ex_states`` / ``states``, the outer
values the step reads its ``parameters``.

Example::

    rnn = fluid.layers.StaticRNN()
    with rnn.step():
        word = rnn.step_input(x)                    # x: [seq_len, batch, dim]
        prev = rnn.memory(shape=[-1, 8], batch_ref=word)
        hidden = fluid.layers.fc(input=[word, prev], size=8, act="tanh")
        rnn.update_memory(prev, hidden)
        rnn.step_output(hidden)
    out = rnn()                                     # [seq_len, batch, 8]
"""

from __future__ import annotations

from typing import Any

from .. import unique_name
from ..dtypes import VarType
from ..framework import Block, Variable, default_main_program
from ..layer_helper import LayerHelper
from ..ops.registry import EMPTY
from .index import slice as slice_layer
from .index import stack
from .tensor import squeeze

__all__ = ["StaticRNN"]


class StaticRNN:
    """See the module docstring; the methods are Fluid's (``step``, ``step_input``,
    ``memory``, ``update_memory``, ``step_output``, ``output``, ``__call__``)."""

    BEFORE_RNN_BLOCK, IN_RNN_BLOCK, AFTER_RNN_BLOCK = 0, 1, 2

    def __init__(self, name: str | None = None) -> None:
        self.helper = LayerHelper("static_rnn", name=name)
        self.status = StaticRNN.BEFORE_RNN_BLOCK
        self.seq_len: int | None = None
        self.inputs: dict[str, Variable] = {}  # step placeholder -> outer [T, ...] input
        self.memories: dict[str, dict[str, Any]] = {}  # placeholder -> boot, update
        self.step_outputs: list[str] = []
        self.outputs: list[Variable] = []

    # ------------------------------------------------------------------ building the step
    def step(self) -> _StepGuard:
        if self.status != StaticRNN.BEFORE_RNN_BLOCK:
            raise ValueError("StaticRNN.step() can be entered once")
        return _StepGuard(self)

    def _assert_in_step(self, method: str) -> None:
        if self.status != StaticRNN.IN_RNN_BLOCK:
            raise ValueError(f"StaticRNN.{method} must be called inside 'with rnn.step():'")

    def step_input(self, x: Variable) -> Variable:
        """The slice ``x[t]`` of the current time step."""
        self._assert_in_step("step_input")
        if not isinstance(x, Variable):
            raise TypeError(f"StaticRNN.step_input: x must be a Variable, got "
                            f"{type(x).__name__}")
        if x.shape is None or len(x.shape) < 1:
            raise ValueError(f"StaticRNN.step_input: {x.name!r} needs a first dimension (the "
                             f"sequence length), got shape "
                             f"{None if x.shape is None else list(x.shape)}")
        steps = int(x.shape[0]) if x.shape[0] > 0 else -1  # -1: known when the program runs
        if self.seq_len is None or self.seq_len == -1:
            self.seq_len = steps
        elif steps != -1 and self.seq_len != steps:
            raise ValueError(f"StaticRNN.step_input: {x.name!r} has {x.shape[0]} steps but an "
                             f"earlier input has {self.seq_len}")
        ipt = self.helper.create_variable(name=f"{self.helper.name}.{x.name}.step",
                                          shape=list(x.shape[1:]), dtype=x.dtype)
        self.inputs[ipt.name] = x
        return ipt

    def memory(self, init: Variable | None = None, shape: list[int] | None = None,
               batch_ref: Variable | None = None, init_value: float = 0.0,
               init_batch_dim_idx: int = 0, ref_batch_dim_idx: int = 1) -> Variable:
        """A value carried from one step to the next: ``init`` at step 0, or ``init_value``
        in ``shape`` with the batch size of ``batch_ref`` (dimension ``ref_batch_dim_idx`` of
        the outer input it steps through)."""
        self._assert_in_step("memory")
        if init is None and (shape is None or batch_ref is None):
            raise ValueError("StaticRNN.memory: give init, or shape and batch_ref")
        ref = init if init is not None else batch_ref
        mem = self.helper.create_variable(
            name=f"{self.helper.name}.mem_{len(self.memories)}",
            shape=list(ref.shape if init is not None else shape), dtype=ref.dtype)
        self.memories[mem.name] = {"init": init, "shape": shape, "batch_ref": batch_ref,
                                   "init_value": float(init_value),
                                   "init_batch_dim_idx": init_batch_dim_idx,
                                   "ref_batch_dim_idx": ref_batch_dim_idx, "update": None}
        return mem

    def update_memory(self, mem: Variable, var: Variable) -> None:
        """The value ``mem`` has at the next step."""
        self._assert_in_step("update_memory")
        if mem.name not in self.memories:
            raise ValueError(f"StaticRNN.update_memory: {mem.name!r} is not a memory of this "
                             "StaticRNN (make it with rnn.memory)")
        self.memories[mem.name]["update"] = var.name

    def step_output(self, o: Variable) -> None:
        """Collect ``o`` at every step; ``rnn()`` gives them stacked, ``[seq_len, ...]``."""
        self._assert_in_step("step_output")
        self.step_outputs.append(o.name)

    def output(self, *outputs: Variable) -> None:
        for o in outputs:
            self.step_output(o)

    def __call__(self) -> Variable | list[Variable]:
        if self.status != StaticRNN.AFTER_RNN_BLOCK:
            raise ValueError("StaticRNN() must be called after its step block")
        return self.outputs[0] if len(self.outputs) == 1 else list(self.outputs)

    # ------------------------------------------------------------------ unrolling
    def _unroll(self, step: Block, parent: Block) -> None:
        if self.seq_len is None:
            raise ValueError("StaticRNN: the step block has no step_input")
        if not self.step_outputs:
            raise ValueError("StaticRNN: the step block has no step_output")
        for name, m in self.memories.items():
            if m["update"] is None:
                raise ValueError(f"StaticRNN: memory {name!r} is never updated "
                                 "(rnn.update_memory(mem, new_value))")
        for op in step.ops:
            if op.sub_blocks and self.seq_len != -1:
                raise ValueError(f"StaticRNN: the step holds control flow ({op.type}), which "
                                 "the unrolled StaticRNN does not support")
        if self.seq_len == -1:
            self._append_recurrent(step, parent)
            return
        carried: dict[str, str] = {name: self._boot(name, parent) for name in self.memories}
        per_step: list[dict[str, str]] = []
        for t in range(self.seq_len):
            names = dict(carried)
            for ph, x in self.inputs.items():
                sl = slice_layer(x, axes=[0], starts=[t], ends=[t + 1])
                names[ph] = squeeze(sl, axes=[0]).name
            for op in step.ops:
                ins = {s: [names.get(n, n) for n in ns] for s, ns in op.inputs.items()}
                outs: dict[str, list[str]] = {}
                for s, ns in op.outputs.items():
                    outs[s] = []
                    for n in ns:
                        if n == EMPTY or n not in step.vars:
                            outs[s].append(names.get(n, n))
                            continue
                        new = f"{n}@step{t}"
                        src = step.vars[n]
                        parent.create_var(name=new, shape=src.shape, dtype=src.dtype,
                                          type=src.type, stop_gradient=src.stop_gradient)
                        names[n] = new
                        outs[s].append(new)
                parent.append_op(op.type, inputs=ins, outputs=outs, attrs=dict(op.attrs))
            carried = {name: names[m["update"]] for name, m in self.memories.items()}
            per_step.append(names)
        for o in self.step_outputs:
            self.outputs.append(stack([parent._var_recursive(names[o]) for names in per_step],
                                      axis=0))

    def _append_recurrent(self, step: Block, parent: Block) -> None:
        """Keep ``step`` as the sub-block of one ``recurrent`` op (the sequence length is
        known only when the program runs)."""
        outer_inputs = list(dict.fromkeys(x.name for x in self.inputs.values()))
        # the step reads each input's slice under the outer name, as Fluid's recurrent op
        # feeds it; the placeholder the step was built on copies it
        for i, (ph, x) in enumerate(self.inputs.items()):
            if not step.has_var(x.name):
                step.create_var(name=x.name, shape=list(x.shape[1:]), dtype=x.dtype)
            step._insert_op(i, "rnn_memory_helper", inputs={"X": [x.name]},
                            outputs={"Out": [ph]}, attrs={"dtype": x.dtype})
        outlinks = []
        for o in self.step_outputs:
            inner = step.vars[o] if o in step.vars else parent._var_recursive(o)
            # the step's value under a name of its own, which the outer [T, ...] stack shares
            name = unique_name.generate(f"{self.helper.name}.out")
            step.create_var(name=name, shape=inner.shape, dtype=inner.dtype)
            step.append_op("rnn_memory_helper", inputs={"X": [o]}, outputs={"Out": [name]},
                           attrs={"dtype": inner.dtype})
            outlinks.append(parent.create_var(name=name, shape=[-1, *(inner.shape or [])],
                                              dtype=inner.dtype))
        boots = [self._boot(name, parent) for name in self.memories]
        ex_states = list(self.memories)
        states = [m["update"] for m in self.memories.values()]
        local = set(outer_inputs) | set(ex_states) | set(self.inputs)
        for op in step.ops:
            local.update(n for ns in op.outputs.values() for n in ns)
        params = []
        for op in step.ops:
            for n in (n for ns in op.inputs.values() for n in ns):
                if n not in local and n != EMPTY and n not in params:
                    params.append(n)
        scopes = parent.create_var(name=f"{self.helper.name}.step_scopes",
                                   type=VarType.STEP_SCOPES)
        parent.append_op("recurrent",
                         inputs={"inputs": outer_inputs, "initial_states": boots,
                                 "parameters": params},
                         outputs={"outputs": [o.name for o in outlinks],
                                  "step_scopes": [scopes.name]},
                         attrs={"has_states": bool(ex_states), "ex_states": ex_states,
                                "states": states, "sub_block": step, "reverse": False,
                                "is_train": True})
        self.outputs.extend(outlinks)

    def _boot(self, name: str, parent: Block) -> str:
        m = self.memories[name]
        if m["init"] is not None:
            return m["init"].name
        ref = self.inputs.get(m["batch_ref"].name, m["batch_ref"])
        helper = LayerHelper("fill_constant_batch_size_like")
        boot = helper.create_variable_for_type_inference(ref.dtype)
        helper.append_op("fill_constant_batch_size_like", inputs={"Input": [ref]},
                         outputs={"Out": [boot]},
                         attrs={"shape": list(m["shape"]), "value": m["init_value"],
                                "dtype": ref.dtype, "input_dim_idx": m["ref_batch_dim_idx"],
                                "output_dim_idx": m["init_batch_dim_idx"]})
        return boot.name


class _StepGuard:
    """Records the step's ops in a scratch block, then unrolls them into the parent."""

    def __init__(self, rnn: StaticRNN) -> None:
        self.rnn = rnn
        self.program = default_main_program()

    def __enter__(self) -> StaticRNN:
        self.block = self.program._create_block()
        self.rnn.status = StaticRNN.IN_RNN_BLOCK
        return self.rnn

    def __exit__(self, exc_type: Any, *exc: Any) -> bool:
        program, block = self.program, self.block
        program._rollback()
        self.rnn.status = StaticRNN.AFTER_RNN_BLOCK
        if exc_type is None and self.rnn.seq_len == -1:
            # the block stays, the sub-block of a recurrent op
            self.rnn._unroll(block, program.current_block())
            return False
        # the scratch block goes: the unrolled copies replace it
        assert program.blocks[-1] is block, "StaticRNN: a block was opened inside the step"
        program.blocks.pop()
        program._bump()
        if exc_type is None:
            self.rnn._unroll(block, program.current_block())
        return False
