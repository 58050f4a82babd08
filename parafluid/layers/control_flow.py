"""Control flow layers: ``While``, ``Switch``, ``IfElse``, ``ConditionalBlock``, tensor arrays.

Each construct opens a sub-block of the program (``with loop.block():``); the layers written
inside append their ops there. When the ``with`` ends, one op is appended to the enclosing
block (``while`` or ``conditional_block``) whose ``X``/``Input`` slot lists the outer values
the sub-block reads and whose ``Out`` slot lists the outer variables it writes, so every
pass, the SSA graph and the executors see the data flow through that one op.

Example (count to ten)::

    i = fluid.layers.fill_constant(shape=[1], dtype="int64", value=0)
    n = fluid.layers.fill_constant(shape=[1], dtype="int64", value=10)
    cond = fluid.layers.less_than(x=i, y=n)
    loop = fluid.layers.While(cond=cond)
    with loop.block():
        fluid.layers.increment(x=i, value=1, in_place=True)
        fluid.layers.less_than(x=i, y=n, cond=cond)
"""

from __future__ import annotations

from typing import Any

from .. import unique_name
from ..dtypes import VarType, convert_dtype
from ..framework import Block, Variable, default_main_program
from ..layer_helper import LayerHelper
from ..ops.registry import EMPTY
from .index import logical_and, logical_not
from .tensor import assign

__all__ = ["While", "Switch", "IfElse", "ConditionalBlock", "increment", "create_array",
           "array_write", "array_read", "array_length", "split_lod_tensor",
           "merge_lod_tensor", "is_empty", "beam_search", "beam_search_decode",
           "gather_tree"]


def _check_var(layer: str, arg: str, x: Any) -> None:
    if not isinstance(x, Variable):
        raise TypeError(f"{layer}: {arg} must be a Variable, got {type(x).__name__}")


# ----------------------------------------------------------------------------- counters


def increment(x: Variable, value: float = 1.0, in_place: bool = True) -> Variable:
    """``x + value`` for a one-element ``x``; written into ``x`` itself when ``in_place``.

    Example::

        fluid.layers.increment(x=i, value=1, in_place=True)
    """
    _check_var("increment", "x", x)
    helper = LayerHelper("increment")
    out = x if in_place else helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("increment", inputs={"X": [x]}, outputs={"Out": [out]},
                     attrs={"step": float(value)})
    return out


def is_empty(x: Variable, cond: Variable | None = None) -> Variable:
    """A bool ``[1]``: whether ``x`` has no elements.

    Example::

        empty = fluid.layers.is_empty(x=ids)
    """
    _check_var("is_empty", "x", x)
    helper = LayerHelper("is_empty")
    if cond is None:
        cond = helper.create_variable_for_type_inference("bool")
    helper.append_op("is_empty", inputs={"X": [x]}, outputs={"Out": [cond]})
    cond.stop_gradient = True
    return cond


# ----------------------------------------------------------------------------- arrays


def create_array(dtype: Any) -> Variable:
    """An empty tensor array (``LOD_TENSOR_ARRAY``) of ``dtype`` elements.

    Example::

        arr = fluid.layers.create_array(dtype="float32")
    """
    helper = LayerHelper("array")
    dtype = convert_dtype(dtype)
    arr = helper.create_variable(name=f"{helper.name}.out", dtype=dtype,
                                 type=VarType.LOD_TENSOR_ARRAY)
    helper.append_op("create_array", outputs={"Out": [arr]}, attrs={"dtype": dtype})
    return arr


def array_write(x: Variable, i: Variable, array: Variable | None = None) -> Variable:
    """Write ``x`` at position ``i`` (an int64 ``[1]``) of ``array`` (created if None); the
    array grows as needed.

    Example::

        arr = fluid.layers.array_write(x, i=zero)
        fluid.layers.array_write(y, i=one, array=arr)
    """
    _check_var("array_write", "x", x)
    _check_var("array_write", "i", i)
    if array is None:
        array = create_array(x.dtype)
    _check_var("array_write", "array", array)
    if array.shape is None:
        # the element shape, so that what is read back has a shape at build time
        array.shape = x.shape
    if array.dtype is None:
        array.dtype = x.dtype
    LayerHelper("array_write").append_op(
        "write_to_array", inputs={"X": [x], "I": [i], "Array": [array]},
        outputs={"Out": [array]})
    return array


def array_read(array: Variable, i: Variable) -> Variable:
    """The element at position ``i`` (an int64 ``[1]``) of ``array``.

    Example::

        x = fluid.layers.array_read(array=arr, i=step)
    """
    _check_var("array_read", "array", array)
    _check_var("array_read", "i", i)
    if array.type != VarType.LOD_TENSOR_ARRAY:
        raise TypeError(f"array_read: {array.name!r} is not a tensor array (it is a "
                        f"{array.type}); make it with fluid.layers.create_array")
    helper = LayerHelper("array_read")
    out = helper.create_variable_for_type_inference(array.dtype)
    helper.append_op("read_from_array", inputs={"X": [array], "I": [i]},
                     outputs={"Out": [out]})
    return out


def array_length(array: Variable) -> Variable:
    """The number of slots of ``array``: an int64 ``[1]``.

    Example::

        n = fluid.layers.array_length(arr)
    """
    _check_var("array_length", "array", array)
    helper = LayerHelper("array_length")
    out = helper.create_variable_for_type_inference("int64")
    helper.append_op("lod_array_length", inputs={"X": [array]}, outputs={"Out": [out]})
    out.stop_gradient = True
    return out


# ----------------------------------------------------------------------------- sub-blocks


def _defined_before(block: Block, name: str) -> bool:
    """Whether ``name`` has a value when the next op of ``block`` runs: a persistable, a
    data variable, or the output of an op already in ``block`` or an enclosing block."""
    var = block._find_var_recursive(name)
    if var is None:
        return False
    if var.persistable or var.is_data:
        return True
    b: Block | None = block
    while b is not None:
        if any(name in op.output_arg_names for op in b.ops):
            return True
        b = b.parent_block
    return False


def _block_io(inner: Block, parent: Block, written: set[str], what: str
              ) -> tuple[list[Variable], list[Variable]]:
    """(outer values ``inner`` reads, outer variables it writes) for the op holding it.

    The reads also list the outer variables written that already hold a value, so that an
    iteration or branch that does not run hands on the value they had.
    """
    reads: dict[str, None] = {}
    written = set(written)
    for op in inner.ops:
        for name in op.input_arg_names:
            if name != EMPTY and name not in written:
                reads[name] = None
        written.update(n for n in op.output_arg_names if n != EMPTY)
    outs = [parent._find_var_recursive(n) for n in sorted(written)]
    out_vars = [v for v in outs if v is not None]
    for v in out_vars:
        if v.name not in reads and _defined_before(parent, v.name):
            reads[v.name] = None
    in_vars = []
    for name in reads:
        var = parent._find_var_recursive(name)
        if var is None:
            raise ValueError(f"{what}: the block reads {name!r} before writing it, and it is not "
                             "a variable outside the block; give it a value before the block")
        in_vars.append(var)
    return in_vars, out_vars


class _SubBlockGuard:
    """Opens a sub-block of the main program; ``on_exit(inner)`` appends the op holding it."""

    def __init__(self, on_exit: Any) -> None:
        self.program = default_main_program()
        self.on_exit = on_exit

    def __enter__(self) -> Block:
        return self.program._create_block()

    def __exit__(self, exc_type: Any, *exc: Any) -> bool:
        inner = self.program.current_block()
        try:
            if exc_type is None:
                self.on_exit(inner)
        finally:
            self.program._rollback()
        return False


class While:
    """Run the ops of ``with loop.block():`` while ``cond`` (a bool ``[1]``) is true; the
    block must update ``cond``.

    Example::

        loop = fluid.layers.While(cond=cond)
        with loop.block():
            fluid.layers.increment(x=i, value=1, in_place=True)
            fluid.layers.less_than(x=i, y=n, cond=cond)
    """

    def __init__(self, cond: Variable, is_test: bool = False, name: str | None = None) -> None:
        _check_var("While", "cond", cond)
        if cond.dtype != "bool":
            raise TypeError(f"While: cond must be a bool variable, got {cond.dtype}")
        if cond.shape is not None and tuple(cond.shape) not in ((1,), ()):
            raise TypeError(f"While: cond must hold one element, got shape {list(cond.shape)}")
        self.cond_var = cond
        self.is_test = is_test
        self.helper = LayerHelper("while", name=name)

    def block(self) -> _SubBlockGuard:
        return _SubBlockGuard(self._complete)

    def _complete(self, inner: Block) -> None:
        parent = inner.parent_block
        assert parent is not None
        ins, outs = _block_io(inner, parent, set(), "While")
        if self.cond_var.name not in {v.name for v in outs}:
            raise ValueError(f"While: the loop block never writes its condition "
                             f"{self.cond_var.name!r}, so the loop would not end; update it "
                             "inside the block (fluid.layers.less_than(x=i, y=n, cond=cond))")
        outputs: dict[str, Any] = {"Out": outs}
        if not self.is_test:
            # the inputs of each iteration, kept for the gradient (while_grad)
            outputs["StepScopes"] = [parent.create_var(
                name=unique_name.generate(f"{self.helper.name}.step_scopes"),
                type=VarType.RAW, stop_gradient=True)]
        parent.append_op("while", inputs={"X": ins, "Condition": [self.cond_var]},
                         outputs=outputs, attrs={"sub_block": inner, "is_test": self.is_test})


class ConditionalBlock:
    """Run the ops of ``with cb.block():`` once if the condition holds: with
    ``is_scalar_condition`` when ``inputs[0]`` (a bool ``[1]``) is true, otherwise when every
    input is non-empty (how IfElse uses it).

    Example::

        cb = fluid.layers.ConditionalBlock([is_first], is_scalar_condition=True)
        with cb.block():
            fluid.layers.assign(warm, output=lr)
    """

    def __init__(self, inputs: list[Variable], is_scalar_condition: bool = False,
                 name: str | None = None) -> None:
        inputs = [inputs] if isinstance(inputs, Variable) else list(inputs)
        for k, v in enumerate(inputs):
            _check_var("ConditionalBlock", f"inputs[{k}]", v)
        self.inputs = inputs
        self.is_scalar_condition = is_scalar_condition
        self.helper = LayerHelper("conditional_block", name=name)

    def block(self) -> _SubBlockGuard:
        return _SubBlockGuard(self._complete)

    def _complete(self, inner: Block) -> None:
        parent = inner.parent_block
        assert parent is not None
        ins, outs = _block_io(inner, parent, set(), "ConditionalBlock")
        parent.append_op("conditional_block", inputs={"Cond": self.inputs, "Input": ins},
                         outputs={"Out": outs},
                         attrs={"sub_block": inner,
                                "is_scalar_condition": self.is_scalar_condition})


class Switch:
    """The first ``case`` whose condition (a bool ``[1]``) holds runs, else ``default``.

    Example (a piecewise learning rate)::

        with fluid.layers.Switch() as switch:
            with switch.case(step < boundary):
                fluid.layers.assign(warm, output=lr)
            with switch.default():
                fluid.layers.assign(base, output=lr)
    """

    def __init__(self, name: str | None = None) -> None:
        self.helper = LayerHelper("switch", name=name)
        self.inside_scope = False
        self.pre_not_conditions: list[Variable] = []

    def case(self, condition: Variable) -> _SubBlockGuard:
        if not self.inside_scope:
            raise ValueError("Switch.case must be used inside 'with Switch() as switch:'")
        _check_var("Switch.case", "condition", condition)
        if not self.pre_not_conditions:
            run = condition
            self.pre_not_conditions.append(logical_not(condition))
        else:
            # Fluid's op order: not(cond), and(before, not cond), and(before, cond)
            before = self.pre_not_conditions[-1]
            self.pre_not_conditions.append(logical_and(before, logical_not(condition)))
            run = logical_and(before, condition)
        return ConditionalBlock([run], is_scalar_condition=True).block()

    def default(self) -> _SubBlockGuard:
        if not self.pre_not_conditions:
            raise ValueError("Switch.default: there must be at least one case before it")
        return ConditionalBlock([self.pre_not_conditions[-1]],
                                is_scalar_condition=True).block()

    def __enter__(self) -> Switch:
        self.inside_scope = True
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> bool:
        self.inside_scope = False
        return False


# ----------------------------------------------------------------------------- IfElse


def split_lod_tensor(input: Variable, mask: Variable, level: int = 0
                     ) -> tuple[Variable, Variable]:
    """(rows of ``input`` where the bool column ``mask`` is true, rows where it is false).

    Example::

        t, f = fluid.layers.split_lod_tensor(input=x, mask=cond)
    """
    _check_var("split_lod_tensor", "input", input)
    _check_var("split_lod_tensor", "mask", mask)
    helper = LayerHelper("split_lod_tensor")
    t = helper.create_variable_for_type_inference(input.dtype)
    f = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("split_lod_tensor", inputs={"X": [input], "Mask": [mask]},
                     outputs={"OutTrue": [t], "OutFalse": [f]}, attrs={"level": level})
    return t, f


def merge_lod_tensor(in_true: Variable, in_false: Variable, x: Variable, mask: Variable,
                     level: int = 0) -> Variable:
    """The rows of ``in_true`` where ``mask`` is true and of ``in_false`` elsewhere, in the
    order of ``mask`` (the inverse of ``split_lod_tensor``).

    Example::

        out = fluid.layers.merge_lod_tensor(in_true=t, in_false=f, x=x, mask=cond)
    """
    helper = LayerHelper("merge_lod_tensor")
    out = helper.create_variable_for_type_inference(in_true.dtype)
    helper.append_op("merge_lod_tensor",
                     inputs={"X": [x], "Mask": [mask], "InTrue": [in_true],
                             "InFalse": [in_false]},
                     outputs={"Out": [out]}, attrs={"level": level})
    return out


class IfElse:
    """Per-row branches: ``cond`` is a bool ``[N, 1]``; inside ``true_block()`` ``ie.input(x)``
    is the rows of ``x`` where it holds, inside ``false_block()`` the others; ``ie()``
    merges what each branch gave to ``ie.output(...)`` back into row order.

    Example::

        ie = fluid.layers.IfElse(cond)
        with ie.true_block():
            ie.output(fluid.layers.scale(ie.input(x), scale=2.0))
        with ie.false_block():
            ie.output(ie.input(x))
        out, = ie()
    """

    OUT_IF_ELSE_BLOCKS = 0
    IN_IF_ELSE_TRUE_BLOCKS = 1
    IN_IF_ELSE_FALSE_BLOCKS = 2

    def __init__(self, cond: Variable, name: str | None = None) -> None:
        _check_var("IfElse", "cond", cond)
        self.cond = cond
        self.helper = LayerHelper("ifelse", name=name)
        self.input_table: dict[str, tuple[Variable, Variable]] = {}
        self.status = IfElse.OUT_IF_ELSE_BLOCKS
        self.output_table: tuple[list[Variable], list[Variable]] = ([], [])  # (false, true)

    def _parent_block(self) -> Block:
        block = default_main_program().current_block()
        parent = block.parent_block
        assert parent is not None
        return parent

    def input(self, x: Variable) -> Variable:
        """The rows of ``x`` that belong to the branch being written."""
        if self.status == IfElse.OUT_IF_ELSE_BLOCKS:
            raise ValueError("IfElse.input must be called inside true_block() or false_block()")
        if x.name not in self.input_table:
            program = default_main_program()
            here = program.current_block_idx
            program.current_block_idx = self._parent_block().idx
            try:
                self.input_table[x.name] = split_lod_tensor(x, self.cond)
            finally:
                program.current_block_idx = here
        t, f = self.input_table[x.name]
        return t if self.status == IfElse.IN_IF_ELSE_TRUE_BLOCKS else f

    def true_block(self) -> _SubBlockGuard:
        return self._branch(IfElse.IN_IF_ELSE_TRUE_BLOCKS)

    def false_block(self) -> _SubBlockGuard:
        return self._branch(IfElse.IN_IF_ELSE_FALSE_BLOCKS)

    def _branch(self, status: int) -> _SubBlockGuard:
        if self.status != IfElse.OUT_IF_ELSE_BLOCKS:
            raise ValueError("IfElse: a branch cannot be opened inside another branch")
        cb = ConditionalBlock([self.cond], is_scalar_condition=False)
        guard = cb.block()
        outer = self

        class _Guard(_SubBlockGuard):
            def __enter__(self) -> Block:
                outer.status = status
                return super().__enter__()

            def __exit__(self, *exc: Any) -> bool:
                outer.status = IfElse.OUT_IF_ELSE_BLOCKS
                return super().__exit__(*exc)

        return _Guard(guard.on_exit)

    def output(self, *outs: Variable) -> None:
        """What this branch gives for each of the IfElse's results (same count per branch)."""
        if self.status == IfElse.OUT_IF_ELSE_BLOCKS:
            raise ValueError("IfElse.output must be called inside true_block() or false_block()")
        table = self.output_table[1 if self.status == IfElse.IN_IF_ELSE_TRUE_BLOCKS else 0]
        parent = self._parent_block()
        for k, out in enumerate(outs):
            _check_var("IfElse.output", f"outs[{k}]", out)
            outside = parent.create_var(name=unique_name.generate(f"{self.helper.name}.output"),
                                        dtype=out.dtype)
            table.append(outside)
            assign(out, output=outside)

    def __call__(self) -> list[Variable]:
        if self.status != IfElse.OUT_IF_ELSE_BLOCKS:
            raise ValueError("IfElse() must be called outside its blocks")
        false_outs, true_outs = self.output_table
        if not true_outs and not false_outs:
            raise ValueError("IfElse(): no branch gave an output")
        if len(true_outs) != len(false_outs):
            raise ValueError(f"IfElse(): the true branch gave {len(true_outs)} outputs and the "
                             f"false branch {len(false_outs)}; they must give as many")
        return [merge_lod_tensor(in_true=t, in_false=f, x=self.cond, mask=self.cond)
                for f, t in zip(false_outs, true_outs)]



# ----------------------------------------------------------------------------- beam search


def beam_search(pre_ids: Variable, pre_scores: Variable, ids: Variable | None,
                scores: Variable, beam_size: int, end_id: int, level: int = 0,
                is_accumulated: bool = True, name: str | None = None,
                return_parent_idx: bool = False) -> Any:
    """One step of beam search (see ``parafluid/ops/beam_search.py`` for the LoD layout):
    ``(selected_ids, selected_scores)``, and ``parent_idx`` with ``return_parent_idx``.

    Example::

        topk_scores, topk_ids = fluid.layers.topk(probs, k=beam_size)
        accu = fluid.layers.elementwise_add(fluid.layers.log(topk_scores),
                                            fluid.layers.reshape(pre_score, [-1]), axis=0)
        ids, scores = fluid.layers.beam_search(pre_ids, pre_score, topk_ids, accu,
                                               beam_size=4, end_id=1)
    """
    for arg, v in (("pre_ids", pre_ids), ("pre_scores", pre_scores), ("scores", scores)):
        _check_var("beam_search", arg, v)
    helper = LayerHelper("beam_search", name=name)
    sel_ids = helper.create_variable_for_type_inference("int64")
    sel_scores = helper.create_variable_for_type_inference(scores.dtype)
    parent = helper.create_variable_for_type_inference("int32")
    inputs = {"pre_ids": [pre_ids], "pre_scores": [pre_scores], "scores": [scores]}
    if ids is not None:
        inputs["ids"] = [ids]
    helper.append_op("beam_search", inputs=inputs,
                     outputs={"selected_ids": [sel_ids], "selected_scores": [sel_scores],
                              "parent_idx": [parent]},
                     attrs={"level": level, "beam_size": int(beam_size), "end_id": int(end_id),
                            "is_accumulated": bool(is_accumulated)})
    for v in (sel_ids, sel_scores, parent):
        v.stop_gradient = True
    return (sel_ids, sel_scores, parent) if return_parent_idx else (sel_ids, sel_scores)


def beam_search_decode(ids: Variable, scores: Variable, beam_size: int, end_id: int,
                       name: str | None = None) -> tuple[Variable, Variable]:
    """The sentences of a finished beam search, from the arrays of each step's selected ids
    and scores: ``(sentence_ids, sentence_scores)`` with the LoD ``[sentences per source,
    tokens per sentence]``, best sentence first.

    Example::

        sent_ids, sent_scores = fluid.layers.beam_search_decode(ids_array, scores_array,
                                                                beam_size=4, end_id=1)
    """
    _check_var("beam_search_decode", "ids", ids)
    _check_var("beam_search_decode", "scores", scores)
    helper = LayerHelper("beam_search_decode", name=name)
    sent_ids = helper.create_variable_for_type_inference("int64")
    sent_scores = helper.create_variable_for_type_inference(scores.dtype)
    helper.append_op("beam_search_decode", inputs={"Ids": [ids], "Scores": [scores]},
                     outputs={"SentenceIds": [sent_ids], "SentenceScores": [sent_scores]},
                     attrs={"beam_size": int(beam_size), "end_id": int(end_id)})
    return sent_ids, sent_scores


def gather_tree(ids: Variable, parents: Variable) -> Variable:
    """The full sequences of a beam search: ``ids`` and ``parents`` (both
    ``[max_time, batch_size, beam_size]``, int32 or int64: each step's selected ids and the
    beam each came from) back-traced from the last step; same shape and dtype as ``ids``.

    Example::

        final_sequences = fluid.layers.gather_tree(ids, parents)
    """
    _check_var("gather_tree", "ids", ids)
    _check_var("gather_tree", "parents", parents)
    helper = LayerHelper("gather_tree")
    out = helper.create_variable_for_type_inference(ids.dtype)
    helper.append_op("gather_tree", inputs={"Ids": [ids], "Parents": [parents]},
                     outputs={"Out": [out]})
    return out


def __getattr__(name: str) -> object:
    # Fluid 1.6 spells the layers it defined here as fluid.layers.control_flow.<name>
    from .fluid_paths import resolve

    return resolve("control_flow", name)
