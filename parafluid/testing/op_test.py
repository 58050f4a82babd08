"""Table-driven op tests: forward vs a reference, inferred vs actual shapes, and the
gradient program vs central finite differences in float64.

One ``OpCase`` is one row of a table; ``check_op(case)`` runs all three checks::

    from parafluid.testing import OpCase, check_op
    case = OpCase("relu", inputs={"X": rand(3, 4)}, ref=lambda X: {"Out": np.maximum(X, 0)},
                  grad=["X"])
    check_op(case)

``inputs`` maps each input slot to an array (a list of arrays for ``[]`` slots). ``ref``
receives the inputs as keyword arguments (numpy arrays) plus ``attrs`` if it accepts it,
and returns ``{output slot: expected array}``; slots it leaves out are not compared.
Gradients are checked on ``sum(w * out)`` for a fixed random ``w`` per checked output.
``lod`` gives sequence offsets for inputs that are batches of sequences (sequence ops):
``lod={"X": [[0, 2, 5]]}`` feeds ``X`` as a LoDTensor (a list of LoDs for a ``[]`` slot).
An input given as a ``SelectedRows`` is fed as one (a row-sparse variable); a SelectedRows
output is fetched densified.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import backward
from ..dtypes import VarType
from ..engine.runtime import OpRunError
from ..executor import Executor
from ..framework import Program, program_guard
from ..ops.registry import get_op_def
from ..place import CPUPlace
from ..scope import LoDTensor, Scope, SelectedRows

__all__ = ["OpCase", "check_op", "check_forward", "check_infer_shape", "check_grad",
           "check_refused", "run_op", "run_layers", "rand", "constant"]


def rand(*shape: int, low: float = -1.0, high: float = 1.0, seed: int = 0,
         dtype: str = "float64") -> np.ndarray:
    """Deterministic uniform test data."""
    return np.random.RandomState(seed).uniform(low, high, shape).astype(dtype)


def constant(array: Any) -> Any:
    """A constant of the current program holding ``array`` in its own dtype (float64 too,
    which ``layers.assign`` refuses as Fluid's does): an ``assign_value`` op."""
    from .. import unique_name
    from ..framework import default_main_program
    from ..ops.tensor import assign_value_attrs

    arr = np.asarray(array)
    dtype = str(arr.dtype)
    block = default_main_program().current_block()
    var = block.create_var(name=unique_name.generate("constant"), shape=list(arr.shape),
                           dtype=dtype)
    block.append_op("assign_value", outputs={"Out": [var]},
                    attrs={"shape": list(arr.shape), "dtype": dtype,
                           **assign_value_attrs(arr, dtype)})
    var.stop_gradient = True
    return var


@dataclass
class OpCase:
    """One row of an op table. ``id`` names the row in pytest output (default: op type)."""

    op: str
    inputs: dict[str, Any]
    ref: Callable[..., dict[str, Any]] | None = None
    attrs: dict[str, Any] = field(default_factory=dict)
    outputs: Sequence[str] | None = None  # output slots to create (default: all of the op's)
    grad: Sequence[str] = ()  # input slots to check gradients of
    grad_outputs: Sequence[str] | None = None  # outputs the loss uses (default: compared ones)
    atol: float = 1e-5
    rtol: float = 1e-5
    grad_atol: float = 1e-5
    grad_rtol: float = 1e-4
    fd_eps: float = 1e-6
    id: str | None = None
    check: Callable[[dict[str, np.ndarray], dict[str, Any]], None] | None = None
    out_counts: dict[str, int] = field(default_factory=dict)  # sizes of list output slots
    lod: dict[str, Any] = field(default_factory=dict)  # input slot -> LoD offsets
    # a value the op refuses: building or running the row raises ValueError / TypeError /
    # NotImplementedError whose message contains this text (the row documents the refusal)
    refused: str | None = None

    def __str__(self) -> str:
        return self.id or self.op


def _as_list(v: Any) -> list[np.ndarray]:
    return list(v) if isinstance(v, (list, tuple)) else [v]


class _Built:
    """A one-op program plus the names bound to each slot."""

    def __init__(self, case: OpCase, inputs: dict[str, Any]) -> None:
        self.program, self.startup = Program(), Program()
        self.case = case
        opdef = get_op_def(case.op)
        block = self.program.global_block()
        self.in_names: dict[str, list[str]] = {}
        self.feed = self.feed_for(inputs)
        with program_guard(self.program, self.startup):
            for slot, value in inputs.items():
                arrays = _as_list(value)
                names = [f"{slot.lower()}_{i}" for i in range(len(arrays))]
                lods = self._lods(slot, value)
                for i, (n, a) in enumerate(zip(names, arrays)):
                    if isinstance(a, SelectedRows):  # a row-sparse input, fed as it is
                        block.create_var(name=n, shape=a.shape, is_data=True,
                                         dtype=str(a.value.dtype).replace("torch.", ""),
                                         type=VarType.SELECTED_ROWS, stop_gradient=False)
                        continue
                    a = np.asarray(a)
                    lod = lods[i] if lods is not None else None
                    block.create_var(name=n, shape=a.shape, dtype=a.dtype, is_data=True,
                                     stop_gradient=False, lod_level=len(lod or ()))
                self.in_names[slot] = names
            slots = case.outputs if case.outputs is not None else \
                [s.name for s in opdef.outputs]
            self.out_names: dict[str, list[str]] = {}
            for slot in slots:
                count = case.out_counts.get(slot, 1)
                self.out_names[slot] = [f"out_{slot.lower()}_{i}" for i in range(count)]
                for n in self.out_names[slot]:
                    block.create_var(name=n)
            self.op = block.append_op(case.op, inputs=self.in_names, outputs=self.out_names,
                                      attrs=dict(case.attrs))

    def _lods(self, slot: str, value: Any) -> list | None:
        lods = self.case.lod.get(slot)
        if lods is not None and not isinstance(value, (list, tuple)):
            lods = [lods]
        return lods

    def feed_for(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """The feed of this program for ``inputs`` (values of the shapes it was built for)."""
        feed: dict[str, Any] = {}
        for slot, value in inputs.items():
            lods = self._lods(slot, value)
            for i, a in enumerate(_as_list(value)):
                n = f"{slot.lower()}_{i}"
                if isinstance(a, SelectedRows):
                    feed[n] = SelectedRows(a.rows.clone(), a.value.clone(), a.height)
                    continue
                # a copy: an update op (momentum, ...) writes its state input in place
                a = np.array(a)
                lod = lods[i] if lods is not None else None
                feed[n] = a if lod is None else _lod_tensor(a, lod)
        return feed

    def fetch_names(self) -> list[str]:
        return [n for names in self.out_names.values() for n in names]

    def outputs(self, results: list[Any]) -> dict[str, Any]:
        """``{slot: array}`` (a list of arrays for list slots) of a run's fetched values."""
        out, i = {}, 0
        for slot, names in self.out_names.items():
            vals = results[i:i + len(names)]
            i += len(names)
            out[slot] = vals if slot in self.case.out_counts else vals[0]
        return out


def _lod_tensor(array: np.ndarray, lod: list[list[int]]) -> LoDTensor:
    t = LoDTensor()
    t.set(array)
    t.set_lod(lod)
    return t


def run_layers(build: Callable[[], Any], feed: dict[str, Any]) -> list[Any]:
    """Build a program with ``build()`` (layer calls; it returns the variables to fetch), run
    its startup and then it once on ``feed`` in a fresh scope; return the fetched values.

    Example::

        pooled, = run_layers(lambda: [fluid.layers.sequence_pool(words, "sum")], feed)
    """
    main, startup = Program(), Program()
    with program_guard(main, startup):
        fetch = build()
    exe, scope = Executor(CPUPlace()), Scope()
    exe.run(startup, scope=scope)
    return exe.run(main, feed=feed, fetch_list=fetch, scope=scope)


def run_op(case: OpCase, inputs: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run the op once; return ``{slot: array}`` (a list of arrays for list slots)."""
    built = _Built(case, case.inputs if inputs is None else inputs)
    exe = Executor(CPUPlace())
    return built.outputs(exe.run(built.program, feed=built.feed,
                                 fetch_list=built.fetch_names(), scope=Scope()))


def _call_ref(case: OpCase) -> dict[str, Any]:
    assert case.ref is not None
    kwargs = {k: v for k, v in case.inputs.items()}
    if "attrs" in inspect.signature(case.ref).parameters:
        kwargs["attrs"] = {**get_op_def(case.op).attrs, **case.attrs}
    return case.ref(**kwargs)


def check_forward(case: OpCase) -> dict[str, Any]:
    """Outputs match the reference (or the case's own ``check``)."""
    got = run_op(case)
    if case.check is not None:
        case.check(got, case.attrs)
    if case.ref is not None:
        expected = _call_ref(case)
        for slot, want in expected.items():
            gots, wants = _as_list(got[slot]), _as_list(want)
            assert len(gots) == len(wants), \
                f"{case}: {slot} has {len(gots)} values, the reference {len(wants)}"
            for g, w in zip(gots, wants):
                w = np.asarray(w)
                assert g.shape == w.shape, f"{case}: {slot} shape {g.shape} != reference {w.shape}"
                np.testing.assert_allclose(g, w, rtol=case.rtol, atol=case.atol,
                                           err_msg=f"{case}: output {slot}")
    return got


def check_infer_shape(case: OpCase) -> None:
    """Shapes and dtypes inferred at build time agree with what the kernel produces."""
    built = _Built(case, case.inputs)
    got = built.outputs(Executor(CPUPlace()).run(built.program, feed=built.feed,
                                                 fetch_list=built.fetch_names(), scope=Scope()))
    block = built.program.global_block()
    for slot, names in built.out_names.items():
        for n, value in zip(names, _as_list(got[slot])):
            var = block.var(n)
            assert var.shape is not None, f"{case}: output {slot} has no inferred shape"
            assert len(var.shape) == value.ndim and all(
                d == -1 or d == a for d, a in zip(var.shape, value.shape)), \
                f"{case}: output {slot} inferred {list(var.shape)} but got {list(value.shape)}"
            assert np.dtype(var.dtype) == value.dtype, \
                f"{case}: output {slot} inferred {var.dtype} but got {value.dtype}"


def _loss_weights(case: OpCase, outputs: dict[str, Any], slots: Sequence[str]) -> dict:
    rng = np.random.RandomState(1234)
    return {slot: [rng.uniform(0.5, 1.5, np.shape(o)).astype("float64")
                   for o in _as_list(outputs[slot])] for slot in slots}


def check_grad(case: OpCase) -> None:
    """The gradient program matches central differences of ``sum(w * out)`` in float64."""
    if not case.grad:
        return
    inputs = {k: [np.asarray(a).astype("float64") if np.asarray(a).dtype.kind == "f" else a
                  for a in _as_list(v)] if isinstance(v, (list, tuple))
              else (np.asarray(v).astype("float64") if np.asarray(v).dtype.kind == "f" else v)
              for k, v in case.inputs.items()}
    # NOTE: every evaluation runs one built program on a fresh scope (building and planning
    # a program cost more than running the op), with its executor's cached plan unless the
    # op is seeded: a plan keeps a seeded op's generator, whose next evaluation would draw
    # other samples (nce's negatives), so such an op gets a fresh executor each time
    probe, probe_exe = _Built(case, inputs), Executor(CPUPlace())
    seeded = "seed" in {**get_op_def(case.op).attrs, **case.attrs}

    def run(ins: dict[str, Any]) -> dict[str, Any]:
        exe = Executor(CPUPlace()) if seeded else probe_exe
        return probe.outputs(exe.run(probe.program, feed=probe.feed_for(ins),
                                     fetch_list=probe.fetch_names(), scope=Scope()))

    base = run(inputs)
    out_slots = list(case.grad_outputs or [s for s in base
                                           if np.asarray(_as_list(base[s])[0]).dtype.kind == "f"])
    weights = _loss_weights(case, base, out_slots)

    def objective(ins: dict[str, Any]) -> float:
        outs = run(ins)
        return float(sum(np.sum(w * o) for s in out_slots
                         for w, o in zip(weights[s], _as_list(outs[s]))))

    # Analytic: the op's gradient program, seeded with w.
    built = _Built(case, inputs)
    block = built.program.global_block()
    targets, seeds, feed = [], [], dict(built.feed)
    with program_guard(built.program, built.startup):
        for slot in out_slots:
            for n, w in zip(built.out_names[slot], weights[slot]):
                seed = block.create_var(name=n + "_seed", shape=w.shape, dtype="float64",
                                        is_data=True)
                feed[seed.name] = w
                targets.append(block.var(n))
                seeds.append(seed)
        wrt = [block.var(n) for slot in case.grad for n in built.in_names[slot]]
        grads = backward.gradients(targets, wrt, target_gradients=seeds)
    missing = [v.name for v, g in zip(wrt, grads) if g is None]
    assert not missing, f"{case}: no gradient produced for {missing}"
    built.program.verify()
    exe = Executor(CPUPlace())
    analytic = exe.run(built.program, feed=feed, fetch_list=[g.name for g in grads],
                       scope=Scope())
    k = 0
    for slot in case.grad:
        arrays = inputs[slot] if isinstance(inputs[slot], list) else [inputs[slot]]
        for idx, arr in enumerate(arrays):
            numeric = np.zeros_like(arr)
            flat = arr.reshape(-1)
            for j in range(flat.size):
                orig = flat[j]
                for sign in (1, -1):
                    flat[j] = orig + sign * case.fd_eps
                    trial = dict(inputs)
                    if isinstance(inputs[slot], list):
                        trial[slot] = [a.copy() for a in arrays]
                        trial[slot][idx] = flat.reshape(arr.shape).copy()
                    else:
                        trial[slot] = flat.reshape(arr.shape).copy()
                    numeric.reshape(-1)[j] += sign * objective(trial)
                flat[j] = orig
            numeric /= 2 * case.fd_eps
            np.testing.assert_allclose(analytic[k], numeric, rtol=case.grad_rtol,
                                       atol=case.grad_atol,
                                       err_msg=f"{case}: gradient of {slot}[{idx}]")
            k += 1


def check_refused(case: OpCase) -> None:
    """The row's op refuses its attrs or inputs with an error naming ``case.refused``."""
    assert case.refused, f"{case}: not a refused row"
    refusals = (ValueError, TypeError, NotImplementedError)
    try:
        run_op(case)
    except Exception as e:  # noqa: BLE001  (sorted out just below)
        # a refusal when the kernel runs comes wrapped, "while running op #0 ..."
        cause = e.__cause__ if isinstance(e, OpRunError) else e
        if not isinstance(cause, refusals):
            raise
        assert case.refused in str(e), \
            f"{case}: refused with {str(e)!r}, which does not say {case.refused!r}"
        return
    raise AssertionError(f"{case}: the op accepted what the row says it refuses "
                         f"({case.refused!r})")


def check_op(case: OpCase) -> None:
    """Forward, shape inference and gradient checks of one table row (for a ``refused``
    row: that the op refuses it with that message)."""
    if case.refused is not None:
        check_refused(case)
        return
    check_forward(case)
    check_infer_shape(case)
    check_grad(case)
