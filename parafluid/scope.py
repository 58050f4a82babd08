"""Scopes hold the run-time values of variables: ``scope.var(name).get_tensor()``.

Example::

    import numpy as np, parafluid as fluid
    scope = fluid.Scope()
    scope.var("w").get_tensor().set(np.ones((2, 3), "float32"), fluid.CPUPlace())
    np.array(scope.find_var("w").get_tensor())   # the 2x3 array
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from .place import to_device

# the attribute of a run-time tensor holding its LoD (lod.LOD_ATTR names the same)
TENSOR_LOD_ATTR = "_parafluid_lod"

__all__ = ["Scope", "ScopeVariable", "LoDTensor", "LoDTensorArray", "LodRankTable", "SelectedRows",
           "SelectedRowsHandle", "ScopeTensorArray", "TensorArray",
           "global_scope", "scope_guard", "as_numpy", "FetchedArray", "OneElementArray"]


class TensorArray(list):
    """The run-time value of a ``LOD_TENSOR_ARRAY`` variable: a list of tensors (a slot never
    written holds None). Fetching one gives a list of numpy arrays, as Fluid does."""

    __slots__ = ()


class LoDTensorArray(list):
    """Fluid's ``core.LoDTensorArray``: a list of ``LoDTensor`` (``append`` checks the type).

    Example::

        arr = fluid.LoDTensorArray()
        arr.append(fluid.create_lod_tensor(np.ones((2, 1), "float32"), [[2]], None))
    """

    __slots__ = ()

    def append(self, tensor: LoDTensor) -> None:
        if not isinstance(tensor, LoDTensor):
            raise TypeError(f"LoDTensorArray.append: expected a LoDTensor, got "
                            f"{type(tensor).__name__}")
        super().append(tensor)


class SelectedRows:
    """A row-sparse tensor: ``value[i]`` is row ``rows[i]`` of a ``[height, ...]`` tensor.

    Rows may repeat (their values add up); ``to_dense()`` materialises the full tensor.
    """

    __slots__ = ("rows", "value", "height")

    def __init__(self, rows: torch.Tensor, value: torch.Tensor, height: int) -> None:
        self.rows = rows
        self.value = value
        self.height = int(height)

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.height, *self.value.shape[1:])

    @property
    def dtype(self) -> torch.dtype:
        return self.value.dtype

    @property
    def device(self) -> torch.device:
        return self.value.device

    def to_dense(self) -> torch.Tensor:
        out = torch.zeros(self.shape, dtype=self.value.dtype, device=self.value.device)
        return out.index_add_(0, self.rows, self.value)

    def merged(self) -> SelectedRows:
        """The same tensor with each row listed once (duplicates summed), rows sorted."""
        uniq, inverse = torch.unique(self.rows, sorted=True, return_inverse=True)
        value = torch.zeros((len(uniq), *self.value.shape[1:]), dtype=self.value.dtype,
                            device=self.value.device)
        return SelectedRows(uniq, value.index_add_(0, inverse, self.value), self.height)

    def to(self, device: torch.device) -> SelectedRows:
        return SelectedRows(self.rows.to(device), self.value.to(device), self.height)

    def __repr__(self) -> str:
        return f"SelectedRows(height={self.height}, rows={self.rows.tolist()}, " \
               f"value_shape={list(self.value.shape)})"


class FetchedArray(np.ndarray):
    """A fetched array: a plain ndarray whose one-element arrays, and the rows and slices
    taken from it, convert with ``float()``, ``int()`` and ``"%.2f" %`` as every array did on
    the numpy of Fluid's time.

    Fluid programs write ``float(loss)``, ``"%.2f" % acc`` and ``float(out[i])`` (a row of an
    ``[N, 1]`` fetch); numpy 2.4 refuses ``float()`` of an array with a dimension. An array
    of several elements still refuses (``TypeError``), as numpy always did.
    """

    def _scalar(self, kind: type) -> Any:
        if self.size != 1:
            raise TypeError(f"only size-1 arrays can be converted to Python scalars "
                            f"(this one has shape {list(self.shape)})")
        return kind(self.reshape(-1).view(np.ndarray)[0])

    def __float__(self) -> float:
        return self._scalar(float)

    def __int__(self) -> int:
        return self._scalar(int)

    def __complex__(self) -> complex:
        return self._scalar(complex)

    def __repr__(self) -> str:
        return repr(self.view(np.ndarray))


OneElementArray = FetchedArray  # the earlier name


def as_numpy(value: Any) -> np.ndarray:
    """A numpy copy of a tensor (a SelectedRows is densified), as a ``FetchedArray`` so that
    ``float()`` of a one-element array or row works on every numpy."""
    if isinstance(value, SelectedRows):
        value = value.to_dense()
    if isinstance(value, TensorArray):
        return [None if v is None else as_numpy(v) for v in value]  # type: ignore[return-value]
    if isinstance(value, torch.Tensor):
        t = value.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        if t.dtype == torch.bfloat16:
            t = t.float()
        arr = t.numpy().copy()
        return arr.view(FetchedArray)
    return np.asarray(value)


class LoDTensor:
    """Fluid's tensor handle: a view on the value slot of a scope variable.

    ``set(array, place)`` stores a copy of ``array`` on ``place``; ``np.array(t)`` reads it.
    Level-of-detail (sequence) information is kept but not interpreted by the ops.
    """

    def __init__(self, holder: ScopeVariable | list[list[int]] | None = None) -> None:
        if not isinstance(holder, (list, tuple)):  # a scope variable (or an array item)
            self._holder = holder if holder is not None else ScopeVariable("<tensor>")
            return
        # Fluid's LoDTensor(recursive_sequence_lengths): a free tensor with that LoD
        if not all(
                isinstance(level, (list, tuple)) for level in holder):
            raise TypeError(f"LoDTensor: expected recursive sequence lengths (a list of lists "
                            f"of ints), got {holder!r}")
        self._holder = ScopeVariable("<tensor>")
        self.set_recursive_sequence_lengths([[int(n) for n in level] for level in holder])

    @property
    def value(self) -> Any:
        return self._holder.value

    def set(self, array: Any, place: Any = None) -> None:
        if isinstance(array, torch.Tensor):
            t = array.detach().clone()
        else:
            arr = np.array(array, copy=True)
            if arr.dtype == np.uint16:
                # Fluid's Python side passes float16 values as uint16 holding their bits
                arr = arr.view(np.float16)
            t = torch.from_numpy(arr)
        self._holder.value = t.to(to_device(place)) if place is not None else t

    def _is_initialized(self) -> bool:
        return self._holder.value is not None

    def shape(self) -> list[int]:
        self._check()
        return list(self._holder.value.shape)

    def _get_dims(self) -> list[int]:
        return self.shape()

    def _set_dims(self, dims: Any) -> None:
        """Give the tensor the shape ``dims`` (Fluid's ``Resize``): its values are kept when
        the element count matches, else it holds ``dims`` of zeros."""
        dims = [int(d) for d in dims]
        t = self._holder.value
        if t is not None and t.numel() == int(np.prod(dims, dtype=np.int64)):
            self._holder.value = t.reshape(dims)
        else:
            self._holder.value = torch.zeros(dims, dtype=t.dtype if t is not None and
                                             t.numel() else torch.float32,
                                             device=t.device if t is not None else "cpu")

    def _alloc(self, place: Any, dtype: torch.dtype) -> torch.Tensor:
        """Hold a tensor of ``dtype`` of the dims ``_set_dims`` gave (zeros where the
        values were not of that dtype) on ``place``."""
        t = self._holder.value
        dims = list(t.shape) if t is not None else [0]
        if t is None or t.dtype != dtype:
            t = torch.zeros(dims, dtype=dtype)
        self._holder.value = t.to(to_device(place))
        return self._holder.value

    def _alloc_float(self, place: Any) -> None:
        """Fluid's ``mutable_data<float>``: a float32 tensor of the set dims on ``place``."""
        self._alloc(place, torch.float32)

    def _alloc_int(self, place: Any) -> None:
        """Fluid's ``mutable_data<int>``: an int32 tensor of the set dims on ``place``."""
        self._alloc(place, torch.int32)

    def _mutable_data(self, place: Any, dtype: Any) -> int:
        """A tensor of ``dtype`` (a ``VarDesc.VarType``) of the set dims on ``place``; its
        address, as Fluid's."""
        from .dtypes import convert_dtype, to_torch

        return int(self._alloc(place, to_torch(convert_dtype(dtype))).data_ptr())

    def _dtype(self) -> str:
        from .dtypes import convert_dtype

        self._check()
        return convert_dtype(self._holder.value.dtype)

    def lod(self) -> list[list[int]]:
        return self._holder.lod

    def set_lod(self, lod: list[list[int]]) -> None:
        self._holder.lod = [list(level) for level in lod]

    def recursive_sequence_lengths(self) -> list[list[int]]:
        return [[b - a for a, b in zip(level, level[1:])] for level in self._holder.lod]

    def set_recursive_sequence_lengths(self, lengths: list[list[int]]) -> None:
        lod = []
        for level in lengths:
            offsets = [0]
            for n in level:
                offsets.append(offsets[-1] + n)
            lod.append(offsets)
        self._holder.lod = lod

    def has_valid_recursive_sequence_lengths(self) -> bool:
        """Whether the LoD is well formed (``lod.check_lod``'s rule): every level starts at
        0 and never decreases, each indexes the next, the last ends at the tensor's rows."""
        lod = self._holder.lod
        rows = 0 if self._holder.value is None else int(self._holder.value.shape[0])
        for i, level in enumerate(lod):
            if not level or level[0] != 0 or any(b < a for a, b in zip(level, level[1:])):
                return False
            if level[-1] != (rows if i == len(lod) - 1 else len(lod[i + 1]) - 1):
                return False
        return True

    # Fluid's element accessors (its gradient-check tests perturb one element in place)
    def _element(self, i: int, dtype: torch.dtype, what: str) -> torch.Tensor:
        self._check()
        t = self._holder.value
        if t.dtype != dtype:
            raise TypeError(f"LoDTensor.{what}: the tensor of {self._holder.name!r} is "
                            f"{t.dtype}, expected {dtype}")
        n = t.numel()
        if not 0 <= i < n:
            raise IndexError(f"LoDTensor.{what}: element {i} of a tensor of {n} elements")
        return t

    def _get_float_element(self, i: int) -> float:
        return float(self._element(i, torch.float32, "_get_float_element").reshape(-1)[i])

    def _set_float_element(self, i: int, value: float) -> None:
        self._element(i, torch.float32, "_set_float_element").view(-1)[i] = float(value)

    def _get_double_element(self, i: int) -> float:
        return float(self._element(i, torch.float64, "_get_double_element").reshape(-1)[i])

    def _set_double_element(self, i: int, value: float) -> None:
        self._element(i, torch.float64, "_set_double_element").view(-1)[i] = float(value)

    def _place(self) -> Any:
        """Where the value lives, as a place (``CPUPlace()`` or ``CUDAPlace(k)``)."""
        from .place import CPUPlace, CUDAPlace

        self._check()
        device = self._holder.value.device
        return CUDAPlace(device.index or 0) if device.type == "cuda" else CPUPlace()

    def _check(self) -> None:
        if self._holder.value is None:
            raise RuntimeError(f"tensor of variable {self._holder.name!r} is not initialized")

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        self._check()
        arr = as_numpy(self._holder.value)
        return arr.astype(dtype) if dtype is not None else arr

    def __getitem__(self, index: Any) -> LoDTensor:
        """A new tensor holding a copy of the slice (Fluid's ``Tensor.__getitem__``: ints,
        slices with any step, one per dimension)."""
        self._check()
        out = LoDTensor()
        value = self._holder.value
        out._holder.value = torch.from_numpy(np.ascontiguousarray(
            as_numpy(value)[index])).to(value.device)
        return out

    # NOTE: ``np.array(t)`` always gives a plain ndarray (numpy drops subclasses unless
    # ``subok=True``), whose float() numpy >= 2.4 refuses for shape [1]; so the tensor itself
    # converts: ``float(t)``, ``int(t)``, ``"%.2f" % t``, ``f"{t:.2f}"`` of one element, as
    # ``float(np.array(t))`` did on the numpy of Fluid's time.
    def _scalar(self, kind: type) -> Any:
        self._check()
        return kind(as_numpy(self._holder.value))

    def __float__(self) -> float:
        return self._scalar(float)

    def __int__(self) -> int:
        return self._scalar(int)

    def __format__(self, spec: str) -> str:
        if not spec:
            return str(self)
        return format(self._scalar(float), spec)

    def __repr__(self) -> str:
        if self._holder.value is None:
            return "LoDTensor(<not initialized>)"
        return f"LoDTensor({np.array(self)!r})"


class ScopeVariable:
    """A named slot in a Scope holding a tensor (or SelectedRows) value."""

    __slots__ = ("name", "value", "lod")

    def __init__(self, name: str) -> None:
        self.name = name
        self.value: Any = None
        self.lod: list[list[int]] = []

    def get_tensor(self) -> LoDTensor:
        return LoDTensor(self)

    def get_selected_rows(self) -> SelectedRowsHandle:
        """Fluid's ``var.get_selected_rows()``: a handle on the row-sparse value this
        variable holds; an empty variable is given an empty one (height 0, no rows) that the
        handle's setters fill, as Fluid's ``GetMutable<SelectedRows>``."""
        if self.value is None:
            self.value = SelectedRows(torch.zeros(0, dtype=torch.int64), torch.zeros(0), 0)
        elif not isinstance(self.value, SelectedRows):
            raise TypeError(f"variable {self.name!r} holds {type(self.value).__name__}, "
                            "not SelectedRows")
        return SelectedRowsHandle(self)

    def get_lod_tensor_array(self) -> ScopeTensorArray:
        """Fluid's ``var.get_lod_tensor_array()``: the tensor array this variable holds
        (an empty one is made), as a list of ``LoDTensor`` views that ``append`` extends."""
        if self.value is None:
            self.value = TensorArray()
        elif not isinstance(self.value, TensorArray):
            raise TypeError(f"variable {self.name!r} holds {type(self.value).__name__}, "
                            "not a tensor array")
        return ScopeTensorArray(self)

    def get_lod_rank_table(self) -> LodRankTable:
        """Fluid's ``var.get_lod_rank_table()``: the rank table ``lod_rank_table`` wrote
        here (an empty one if nothing was)."""
        if self.value is not None and not (isinstance(self.value, torch.Tensor)
                                           and self.value.dim() == 2
                                           and self.value.shape[1] == 2):
            raise TypeError(f"variable {self.name!r} holds {type(self.value).__name__}, "
                            "not a lod_rank_table")
        return LodRankTable(self.value)

    def is_initialized(self) -> bool:
        return self.value is not None

    # Fluid's scalar holders (a variable holding an int, a float or a string)
    def set_int(self, value: int) -> None:
        self.value = _Scalar(int(value))

    def set_float(self, value: float) -> None:
        self.value = _Scalar(float(value))

    def set_string(self, value: str) -> None:
        self.value = _Scalar(str(value))

    def is_int(self) -> bool:
        return isinstance(self.value, _Scalar) and type(self.value.v) is int

    def is_float(self) -> bool:
        return isinstance(self.value, _Scalar) and type(self.value.v) is float

    def get_int(self) -> int:
        return self._scalar(int)

    def get_float(self) -> float:
        return self._scalar(float)

    def get_string(self) -> str:
        return self._scalar(str)

    def _scalar(self, kind: type) -> Any:
        if not (isinstance(self.value, _Scalar) and type(self.value.v) is kind):
            held = "nothing" if self.value is None else (
                type(self.value.v).__name__ if isinstance(self.value, _Scalar)
                else type(self.value).__name__)
            raise TypeError(f"variable {self.name!r} holds {held}, not {kind.__name__}")
        return self.value.v

    def __repr__(self) -> str:
        return f"ScopeVariable({self.name!r}, {'set' if self.value is not None else 'empty'})"


class LodRankTable:
    """Fluid's ``core.LodRankTable``: ``items()`` lists ``(index, length)`` of each
    sequence, longest first (the ``[n, 2]`` int64 value of a ``lod_rank_table`` op)."""

    __slots__ = ("_value",)

    def __init__(self, value: torch.Tensor | None) -> None:
        self._value = value

    def items(self) -> list[tuple[int, int]]:
        if self._value is None:
            return []
        return [(int(i), int(n)) for i, n in self._value.tolist()]


class _Scalar:
    """A plain int/float/str held by a scope variable (``set_int`` & co.): not a tensor."""

    __slots__ = ("v",)

    def __init__(self, v: Any) -> None:
        self.v = v

    def __repr__(self) -> str:
        return repr(self.v)


class _ArrayItem:
    """Item ``index`` of a scope variable's tensor array, as a ``LoDTensor`` holder."""

    __slots__ = ("_var", "_index")

    def __init__(self, var: ScopeVariable, index: int) -> None:
        self._var, self._index = var, index

    @property
    def name(self) -> str:
        return f"{self._var.name}[{self._index}]"

    @property
    def value(self) -> Any:
        return self._var.value[self._index]

    @value.setter
    def value(self, tensor: Any) -> None:
        self._var.value[self._index] = tensor

    @property
    def lod(self) -> list[list[int]]:
        t = self.value
        return [list(level) for level in (getattr(t, TENSOR_LOD_ATTR, None) or [])]

    @lod.setter
    def lod(self, lod: list[list[int]]) -> None:
        if lod and isinstance(self.value, torch.Tensor):
            setattr(self.value, TENSOR_LOD_ATTR, [list(level) for level in lod])


def set_feed_variable(scope: Scope, tensor: LoDTensor, holder: str, index: int) -> None:
    """Fluid's ``core.set_feed_variable``: a copy of ``tensor`` (value and LoD) as item
    ``index`` of the feed holder variable ``holder`` (a list of tensors) in ``scope``."""
    if not isinstance(tensor, LoDTensor) or tensor.value is None:
        raise TypeError(f"set_feed_variable: expected a LoDTensor with a value, got {tensor!r}")
    if not isinstance(index, int) or index < 0:
        raise ValueError(f"set_feed_variable: index must be an int >= 0, got {index!r}")
    var = scope.var(holder)
    if not isinstance(var.value, TensorArray):
        var.value = TensorArray()
    var.value.extend([None] * (index + 1 - len(var.value)))
    t = tensor.value.clone()
    if tensor.lod():
        setattr(t, TENSOR_LOD_ATTR, [list(level) for level in tensor.lod()])
    var.value[index] = t


def get_fetch_variable(scope: Scope, holder: str, index: int) -> LoDTensor:
    """Fluid's ``core.get_fetch_variable``: item ``index`` of the holder variable
    ``holder`` (a list of tensors) in ``scope``, as a ``LoDTensor``."""
    var = scope.find_var(holder)
    if var is None or not isinstance(var.value, TensorArray):
        raise ValueError(f"get_fetch_variable: scope has no fetch holder {holder!r} (a list "
                         "of tensors)")
    if not 0 <= index < len(var.value) or var.value[index] is None:
        raise ValueError(f"get_fetch_variable: holder {holder!r} has no item {index} (it "
                         f"holds {len(var.value)})")
    return LoDTensor(_ArrayItem(var, index))  # type: ignore[arg-type]


class ScopeTensorArray:
    """A scope variable's tensor array as Fluid's ``LoDTensorArray``: ``len``, indexing
    (``LoDTensor`` views of the items) and ``append`` of a ``LoDTensor``."""

    __slots__ = ("_var",)

    def __init__(self, var: ScopeVariable) -> None:
        self._var = var

    def __len__(self) -> int:
        return len(self._var.value)

    def __getitem__(self, index: int) -> LoDTensor:
        n = len(self)
        if not -n <= index < n:
            raise IndexError(f"tensor array {self._var.name!r} has {n} items, no item {index}")
        return LoDTensor(_ArrayItem(self._var, index % n))  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[LoDTensor]:
        return (self[i] for i in range(len(self)))

    def append(self, tensor: LoDTensor) -> None:
        if not isinstance(tensor, LoDTensor) or tensor.value is None:
            raise TypeError(f"tensor array {self._var.name!r}: append takes a LoDTensor with "
                            f"a value, got {tensor!r}")
        t = tensor.value.clone()
        if tensor.lod():
            setattr(t, TENSOR_LOD_ATTR, [list(level) for level in tensor.lod()])
        self._var.value.append(t)


class _RowsValue:
    """The value tensor of a scope variable's SelectedRows, as a ``LoDTensor`` holder."""

    __slots__ = ("_var",)

    def __init__(self, var: ScopeVariable) -> None:
        self._var = var

    @property
    def name(self) -> str:
        return self._var.name

    @property
    def value(self) -> torch.Tensor | None:
        rows = self._var.value
        return rows.value if isinstance(rows, SelectedRows) else None

    @value.setter
    def value(self, tensor: torch.Tensor) -> None:
        rows = self._var.value
        rows.value = tensor
        rows.rows = rows.rows.to(tensor.device)

    @property
    def lod(self) -> list[list[int]]:
        return []

    @lod.setter
    def lod(self, lod: list[list[int]]) -> None:
        if lod:
            raise ValueError(f"the value of SelectedRows {self._var.name!r} has no LoD "
                             f"(got {lod})")


class SelectedRowsHandle:
    """Fluid's ``core.SelectedRows`` as ``scope.var(name).get_selected_rows()`` returns it:
    ``set_height``/``height()``, ``set_rows``/``rows()`` and ``get_tensor()`` (the value
    rows, one per listed row index) on the variable's row-sparse value.

    Example::

        sr = scope.var("grad").get_selected_rows()
        sr.set_height(10); sr.set_rows([0, 4, 4])
        sr.get_tensor().set(np.ones((3, 2), "float32"), fluid.CPUPlace())
    """

    __slots__ = ("_var",)

    def __init__(self, var: ScopeVariable) -> None:
        self._var = var

    @property
    def _rows(self) -> SelectedRows:
        return self._var.value

    def height(self) -> int:
        return self._rows.height

    def set_height(self, height: int) -> None:
        if int(height) < 0:
            raise ValueError(f"SelectedRows {self._var.name!r}: height must be >= 0, got "
                             f"{height}")
        self._rows.height = int(height)

    def rows(self) -> list[int]:
        return [int(r) for r in self._rows.rows.tolist()]

    def set_rows(self, rows: Any) -> None:
        ids = torch.as_tensor(np.asarray(list(rows), dtype=np.int64))
        self._rows.rows = ids.to(self._rows.value.device)

    def get_tensor(self) -> LoDTensor:
        return LoDTensor(_RowsValue(self._var))  # type: ignore[arg-type]

    def numel(self) -> int:
        return int(self._rows.value.numel())

    def sync_index(self) -> None:
        """Fluid rebuilds its row-to-index map here; the rows list is the only index."""

    def __repr__(self) -> str:
        return f"SelectedRowsHandle({self._var.name!r}, {self._rows!r})"


class Scope:
    """A map from names to ScopeVariables; lookups fall back to the parent scope."""

    def __init__(self, parent: Scope | None = None) -> None:
        self.parent = parent
        self._vars: dict[str, ScopeVariable] = {}
        self._kids: list[Scope] = []
        self._lock = threading.Lock()

    def var(self, name: str) -> ScopeVariable:
        """The variable ``name`` of this scope, created if absent (parents are not searched)."""
        if not isinstance(name, str):
            raise TypeError(f"Scope.var: name must be a str, got {type(name).__name__}")
        v = self._vars.get(name)
        if v is None:
            with self._lock:
                v = self._vars.setdefault(name, ScopeVariable(name))
        return v

    def find_var(self, name: str) -> ScopeVariable | None:
        """The nearest variable ``name`` in this scope or its ancestors, else None."""
        scope: Scope | None = self
        while scope is not None:
            v = scope._vars.get(name)
            if v is not None:
                return v
            scope = scope.parent
        return None

    def find_local_var(self, name: str) -> ScopeVariable | None:
        return self._vars.get(name)

    def erase(self, names: list[str]) -> None:
        for n in names:
            self._vars.pop(n, None)

    def local_var_names(self) -> list[str]:
        return list(self._vars)

    def new_scope(self) -> Scope:
        kid = Scope(self)
        with self._lock:
            self._kids.append(kid)
        return kid

    def drop_kids(self) -> None:
        with self._lock:
            self._kids.clear()

    def drop_kid(self, kid: Scope) -> None:
        """Forget one child scope and everything it holds."""
        with self._lock:
            self._kids = [k for k in self._kids if k is not kid]

    def kids(self) -> list[Scope]:
        return list(self._kids)

    def __repr__(self) -> str:
        return f"Scope({len(self._vars)} vars, {len(self._kids)} kids)"


_global_scope = Scope()
_scope_stack: list[Scope] = []


def global_scope() -> Scope:
    """The scope executors use when none is given (``scope_guard`` changes it)."""
    return _scope_stack[-1] if _scope_stack else _global_scope


@contextlib.contextmanager
def scope_guard(scope: Scope) -> Iterator[None]:
    """Make ``scope`` the global scope inside the block."""
    if not isinstance(scope, Scope):
        raise TypeError(f"scope_guard: expected a Scope, got {type(scope).__name__}")
    _scope_stack.append(scope)
    try:
        yield
    finally:
        _scope_stack.pop()
