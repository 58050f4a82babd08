"""Fluid's Datasets (``fluid.DatasetFactory``): files of MultiSlot lines, read in batches for
``Executor.train_from_dataset``.

A MultiSlot line holds, for every slot of the description in order, a count and that many
values: ``<count> <v1> ... <vcount>``. With ``set_use_var([words, label])`` the slots are
the variables: an int64 variable is a ``uint64`` slot, a float32 one a ``float`` slot; a
variable with ``lod_level`` 0 is dense (a Tensor of the variable's shape, the batch
dimension inferred), otherwise sparse (a LoDTensor of ``[total, 1]`` whose sequences are
the instances). The line ``3 1 2 3 1 0`` with slots ``words`` (sparse) and ``label``
(dense, shape ``[-1, 1]``) is one instance with the words 1, 2, 3 and the label 0.

- ``QueueDataset`` streams the files (``set_filelist``) in order, each through
  ``set_pipe_command`` (a shell command reading the file on stdin, ``cat`` by default, run
  with the ``FLAGS_rpc_deadline`` timeout); batches of ``set_batch_size`` instances run
  across file boundaries, the last batch may be shorter.
- ``InMemoryDataset`` reads them once with ``load_into_memory`` (or
  ``preload_into_memory`` + ``wait_preload_done``); ``local_shuffle`` and
  ``global_shuffle`` (one process: the same) shuffle the instances; ``release_memory``
  drops them. ``set_fea_eval`` + ``slots_shuffle`` permute chosen slots over the
  instances; with ``set_parse_ins_id`` (lines start ``1 <ins_id>``, then ``1 <content>``
  with ``set_parse_content``) ``set_merge_by_lineid`` merges the instances of one id.

A malformed line is a ValueError naming the file, the line number and the slot.

Example::

    dataset = fluid.DatasetFactory().create_dataset("InMemoryDataset")
    dataset.set_use_var([words, label])
    dataset.set_batch_size(32)
    dataset.set_filelist(["train_0.txt", "train_1.txt"])
    dataset.load_into_memory()
    dataset.local_shuffle()
    exe.train_from_dataset(fluid.default_main_program(), dataset, thread=2)
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ..dtypes import convert_dtype
from ..flags import flag
from ..framework import Variable
from ..lod import create_lod_tensor
from ..place import CPUPlace
from .data_feed_desc import DataFeedDesc, Slot
from .dataset_trainer import run_from_dataset

__all__ = ["DatasetFactory", "DatasetBase", "InMemoryDataset", "QueueDataset",
           "FileInstantDataset", "parse_multi_slot_line"]

_INT64_MAX = (1 << 63) - 1


class DatasetFactory:
    """Creates a Dataset by its class name (``"QueueDataset"`` by default).

    Example::

        dataset = fluid.DatasetFactory().create_dataset("InMemoryDataset")
    """

    def create_dataset(self, datafeed_class: str = "QueueDataset") -> DatasetBase:
        kinds = {"QueueDataset": QueueDataset, "InMemoryDataset": InMemoryDataset,
                 "FileInstantDataset": FileInstantDataset}
        if datafeed_class not in kinds:
            raise ValueError(f"DatasetFactory.create_dataset: datafeed class "
                             f"{datafeed_class!r} does not exist; the classes are "
                             f"{', '.join(kinds)}")
        return kinds[datafeed_class]()


class DatasetBase:
    """What every Dataset has: the data-feed description (``desc()``), the files, the
    threads, the variables fed."""

    _feed_name = "MultiSlotDataFeed"

    def __init__(self) -> None:
        self.proto_desc = DataFeedDesc()
        self.proto_desc._set_field("name", self._feed_name)
        self.thread_num = 1
        self.filelist: list[str] = []
        self._use_vars: list[Any] = []
        self.parse_ins_id = False
        self.parse_content = False
        self.fea_eval = False
        self.record_candidate_size = 0

    # ---------------------------------------------------------------- settings
    def set_pipe_command(self, pipe_command: str) -> None:
        """A shell command every file is piped through (stdin: the file, stdout: MultiSlot
        lines), e.g. ``"python my_reader.py"``; ``"cat"`` reads the files as they are."""
        if not isinstance(pipe_command, str) or not pipe_command.strip():
            raise ValueError(f"set_pipe_command: expected a shell command, got "
                             f"{pipe_command!r}")
        self.proto_desc._set_field("pipe_command", pipe_command)

    def set_batch_size(self, batch_size: int) -> None:
        """Instances per batch."""
        self.proto_desc.set_batch_size(batch_size)

    def set_thread(self, thread_num: int) -> None:
        """Worker threads ``train_from_dataset`` uses when its ``thread`` is 0."""
        if isinstance(thread_num, bool) or not isinstance(thread_num, int) or thread_num <= 0:
            raise ValueError(f"set_thread: thread_num must be a positive int, got "
                             f"{thread_num!r}")
        self.thread_num = thread_num
        self.proto_desc._set_field("thread_num", thread_num)

    def set_filelist(self, filelist: Sequence[str]) -> None:
        """The files to read, in order."""
        if isinstance(filelist, str) or not all(isinstance(f, str) for f in filelist):
            raise TypeError(f"set_filelist: expected a list of file paths, got {filelist!r}")
        self.filelist = list(filelist)

    def set_use_var(self, var_list: Sequence[Any]) -> None:
        """The variables fed, one slot each in this order (the columns of every line)."""
        single = isinstance(var_list, (str, Variable))
        bad = [var_list] if single else [v for v in var_list if not isinstance(v, Variable)]
        if bad:
            raise TypeError("set_use_var: expected a list of data Variables "
                            f"(fluid.layers.data(...)), got {bad[0]!r}")
        for var in var_list:
            dtype = convert_dtype(var.dtype)
            if dtype not in ("float32", "int64"):
                raise ValueError(f"set_use_var: variable {var.name!r} is {dtype}; a Dataset "
                                 "feeds float32 (slot type 'float') and int64 (slot type "
                                 "'uint64') variables")
            slot = Slot(var.name, "float" if dtype == "float32" else "uint64", is_used=True,
                        given={"name", "type", "is_used"})
            if var.lod_level == 0:
                slot.is_dense = True
                slot.shape = [int(d) for d in var.shape]
                slot.given |= {"is_dense", "shape"}
            self.proto_desc.add_slot(slot)
            self._use_vars.append(var)

    def set_parse_ins_id(self, parse_ins_id: bool) -> None:
        """Lines start with the instance id, written as a slot of one value
        (``1 <ins_id>``), before the slots."""
        self.parse_ins_id = bool(parse_ins_id)

    def set_parse_content(self, parse_content: bool) -> None:
        """Lines carry a content column (``1 <content>``) after the instance id."""
        self.parse_content = bool(parse_content)

    def set_fea_eval(self, record_candidate_size: int, fea_eval: bool = True) -> None:
        """Allow ``slots_shuffle`` (feature evaluation: shuffle a slot across instances to
        see how much the metric depends on it)."""
        self.fea_eval = bool(fea_eval)
        self.record_candidate_size = int(record_candidate_size)

    def slots_shuffle(self, slots: Sequence[str]) -> None:
        """Shuffle ``slots`` across the instances in memory: an InMemoryDataset's."""
        raise NotImplementedError(f"{type(self).__name__} does not support slots_shuffle, "
                                  "please use InMemoryDataset for slots_shuffle")

    def set_hdfs_config(self, fs_name: str, fs_ugi: str) -> None:
        raise ValueError("set_hdfs_config: parafluid reads local files only; copy the files "
                         "from HDFS first and pass their local paths to set_filelist")

    def desc(self) -> str:
        """The data-feed description in Fluid's text format."""
        return self.proto_desc.desc()

    # ---------------------------------------------------------------- reading
    def _run_from_executor(self, exe: Any, program: Any, scope: Any, thread: int,
                           debug: bool, fetch_list: Any, fetch_info: Any, print_period: int,
                           is_infer: bool) -> None:
        """``exe.train_from_dataset`` / ``infer_from_dataset`` on this dataset (the loop is
        in ``dataset_trainer.py``; the executor asks the dataset, never imports it)."""
        run_from_dataset(exe, program, self, scope, thread, debug, fetch_list, fetch_info,
                         print_period, is_infer)

    def _prepare_to_run(self) -> None:
        if not self.proto_desc.slots:
            raise ValueError(f"{type(self).__name__}: no slots; call set_use_var([...]) with "
                             "the data variables first")

    def _finish_to_run(self) -> None:
        pass

    def _instances(self) -> Iterator[tuple[np.ndarray, ...]]:
        """The instances in order: per used slot, its values."""
        lead = int(self.parse_ins_id) + int(self.parse_content)
        for path in self.filelist:
            yield from read_multi_slot_file(path, self.proto_desc, lead)

    def _batches(self) -> Iterator[dict[str, Any]]:
        """Feeds of ``batch_size`` instances each (the last may be shorter)."""
        size, pending = self.proto_desc.batch_size, []
        for inst in self._instances():
            pending.append(inst)
            if len(pending) == size:
                yield build_feed(pending, self._used_slots())
                pending = []
        if pending:
            yield build_feed(pending, self._used_slots())

    def _used_slots(self) -> list[Slot]:
        return [s for s in self.proto_desc.slots if s.is_used]

    def _reader_instances(self, i: int, n: int) -> Iterator[tuple[np.ndarray, ...]]:
        """The instances reader ``i`` of ``n`` reads (``DataLoader.from_dataset``): files
        ``i, i + n, ...`` of the file list."""
        lead = int(self.parse_ins_id) + int(self.parse_content)
        for path in self.filelist[i::n]:
            yield from read_multi_slot_file(path, self.proto_desc, lead)


class QueueDataset(DatasetBase):
    """Streams the files in order, batch by batch.

    Example::

        dataset = fluid.DatasetFactory().create_dataset("QueueDataset")
    """

    def local_shuffle(self) -> None:
        raise NotImplementedError("QueueDataset does not support local shuffle, please use "
                                  "InMemoryDataset for local_shuffle")

    def global_shuffle(self, fleet: Any = None) -> None:
        raise NotImplementedError("QueueDataset does not support global shuffle, please use "
                                  "InMemoryDataset for global_shuffle")


class FileInstantDataset(QueueDataset):
    """A QueueDataset (Fluid's variant for the pipeline trainer)."""

    _feed_name = "MultiSlotFileInstantDataFeed"


class InMemoryDataset(DatasetBase):
    """Loads the files into memory once, then can shuffle the instances.

    Example::

        dataset = fluid.DatasetFactory().create_dataset("InMemoryDataset")
        dataset.set_filelist(["a.txt", "b.txt"])
        dataset.load_into_memory()
        dataset.local_shuffle()
    """

    _feed_name = "MultiSlotInMemoryDataFeed"

    def __init__(self) -> None:
        super().__init__()
        self._memory: list[tuple[np.ndarray, ...]] | None = None
        self._preload: threading.Thread | None = None
        self._preload_error: BaseException | None = None
        self.queue_num: int | None = None
        self.fleet_send_batch_size = 1024
        self.fleet_send_sleep_seconds = 0
        self.merge_by_lineid = False
        self._merge: tuple[set[str], bool, int, bool] | None = None

    def set_queue_num(self, queue_num: int) -> None:
        """Accepted for Fluid's scripts (the channels of its C++ reader)."""
        self.queue_num = int(queue_num)

    def set_fleet_send_batch_size(self, fleet_send_batch_size: int = 1024) -> None:
        self.fleet_send_batch_size = int(fleet_send_batch_size)

    def set_fleet_send_sleep_seconds(self, fleet_send_sleep_seconds: int = 0) -> None:
        self.fleet_send_sleep_seconds = int(fleet_send_sleep_seconds)

    def set_merge_by_lineid(self, var_list: Sequence[Any], erase_duplicate_feas: bool = True,
                            min_merge_size: int = 2, keep_unmerged_ins: bool = True) -> None:
        """Merge the instances of one line id (``set_parse_ins_id(True)``) when loading:
        the values of the slots of ``var_list`` are concatenated (duplicates dropped with
        ``erase_duplicate_feas``), the other slots are the first instance's. Groups smaller
        than ``min_merge_size`` stay as they are, or are dropped without
        ``keep_unmerged_ins``."""
        self._merge = ({v.name for v in var_list}, bool(erase_duplicate_feas),
                       int(min_merge_size), bool(keep_unmerged_ins))
        self.merge_by_lineid = True

    def load_into_memory(self) -> None:
        """Read every file of the file list into memory."""
        self._prepare_to_run()
        self._memory = self._merged(list(super()._instances()))

    def _merged(self, instances: list[tuple]) -> list[tuple]:
        if self._merge is None:
            return instances
        if not self.parse_ins_id:
            raise ValueError("set_merge_by_lineid: the instances have no line id; call "
                             "set_parse_ins_id(True) and write it first on every line")
        names, erase, min_size, keep = self._merge
        slots = self._used_slots()
        n = len(slots)
        merge = [s.name in names for s in slots]
        groups: dict[str, list[tuple]] = {}
        for inst in instances:
            groups.setdefault(inst[n], []).append(inst)
        out = []
        for group in groups.values():
            if len(group) < min_size:
                if keep:
                    out.extend(group)
                continue
            values = []
            for j in range(n):
                if not merge[j]:
                    values.append(group[0][j])
                    continue
                joined = np.concatenate([inst[j] for inst in group])
                if erase:
                    _, first = np.unique(joined, return_index=True)
                    joined = joined[np.sort(first)]
                values.append(joined)
            out.append((*values, *group[0][n:]))
        return out

    def preload_into_memory(self, thread_num: int | None = None) -> None:
        """``load_into_memory`` in a background thread; ``wait_preload_done`` joins it."""
        self._prepare_to_run()

        def load() -> None:
            try:
                self._memory = self._merged(list(DatasetBase._instances(self)))
            except BaseException as e:  # re-raised by wait_preload_done
                self._preload_error = e

        self._preload_error = None
        self._preload = threading.Thread(target=load, name="dataset-preload", daemon=True)
        self._preload.start()

    def wait_preload_done(self) -> None:
        if self._preload is None:
            raise RuntimeError("wait_preload_done: preload_into_memory() was not called")
        self._preload.join()
        self._preload = None
        if self._preload_error is not None:
            err, self._preload_error = self._preload_error, None
            raise err

    def local_shuffle(self) -> None:
        """Shuffle the instances in memory (Python's ``random``: seed it for a fixed
        order)."""
        random.shuffle(self._loaded("local_shuffle"))

    def slots_shuffle(self, slots: Sequence[str]) -> None:
        """Give every instance the values of ``slots`` of another instance (a random
        permutation over the instances in memory, Python's ``random``); needs
        ``set_fea_eval``, as in Fluid (without it nothing changes)."""
        memory = self._loaded("slots_shuffle")
        if not self.fea_eval:
            return
        used = [s.name for s in self._used_slots()]
        unknown = [s for s in slots if s not in used]
        if unknown:
            raise ValueError(f"slots_shuffle: {unknown} are not slots of the dataset; its "
                             f"slots are {used}")
        order = list(range(len(memory)))
        random.shuffle(order)
        cols = [used.index(s) for s in slots]
        self._memory = [tuple(memory[order[i]][j] if j in cols else v
                              for j, v in enumerate(inst)) for i, inst in enumerate(memory)]

    def global_shuffle(self, fleet: Any = None, thread_num: int = 12) -> None:
        """Shuffle across trainers; with one process (``fleet=None``), ``local_shuffle``."""
        if fleet is not None:
            raise ValueError("global_shuffle: shuffling across trainer processes (fleet) is "
                             "not provided; call it with fleet=None in each process")
        self.local_shuffle()

    def release_memory(self) -> None:
        """Drop the instances in memory."""
        self._memory = None

    def get_memory_data_size(self, fleet: Any = None) -> int:
        """The number of instances in memory."""
        return len(self._loaded("get_memory_data_size"))

    def get_shuffle_data_size(self, fleet: Any = None) -> int:
        return len(self._loaded("get_shuffle_data_size"))

    def _loaded(self, where: str) -> list[tuple[np.ndarray, ...]]:
        if self._memory is None:
            raise ValueError(f"InMemoryDataset.{where}: nothing is in memory; call "
                             "load_into_memory() first (or again after release_memory())")
        return self._memory

    def _instances(self) -> Iterator[tuple[np.ndarray, ...]]:
        yield from self._loaded("train_from_dataset")

    def _reader_instances(self, i: int, n: int) -> Iterator[tuple[np.ndarray, ...]]:
        """Reader ``i`` of ``n`` reads the ``i``-th of ``n`` near-equal parts of memory."""
        memory = self._loaded("DataLoader.from_dataset")
        k, extra = divmod(len(memory), n)
        start = i * k + min(i, extra)
        yield from memory[start:start + k + (1 if i < extra else 0)]


# ------------------------------------------------------------------------------ lines
def _file_lines(path: str, pipe_command: str) -> Iterator[str]:
    if not os.path.isfile(path):
        raise ValueError(f"Dataset: file {path!r} of the file list does not exist")
    if pipe_command.strip() == "cat":
        with open(path, encoding="utf-8") as f:
            yield from f
        return
    deadline_s = flag("FLAGS_rpc_deadline") / 1000.0
    with open(path, "rb") as src:
        proc = subprocess.Popen(pipe_command, shell=True, stdin=src, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=deadline_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the command's own process group
            proc.communicate()
            raise TimeoutError(f"Dataset: pipe command {pipe_command!r} on {path!r} did not "
                               f"finish within FLAGS_rpc_deadline ({deadline_s:g} s)") from None
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    if proc.returncode != 0:
        tail = err.decode("utf-8", "replace").strip()[-500:]
        raise ValueError(f"Dataset: pipe command {pipe_command!r} on {path!r} exited with "
                         f"status {proc.returncode}: {tail}")
    yield from out.decode("utf-8").splitlines()


def read_multi_slot_file(path: str, desc: DataFeedDesc, lead: int = 0
                         ) -> Iterator[tuple[Any, ...]]:
    """The instances of one file (through the description's pipe command)."""
    slots = desc.slots
    for lineno, line in enumerate(_file_lines(path, desc.pipe_command), 1):
        if line.strip():
            yield parse_multi_slot_line(line, slots, f"{path}:{lineno}", lead)


def parse_multi_slot_line(line: str, slots: Sequence[Slot], where: str = "<line>",
                          lead: int = 0) -> tuple[Any, ...]:
    """One instance: per used slot of ``slots``, its values (int64 for ``uint64`` slots,
    float32 for ``float`` ones), then the ``lead`` leading text columns (``1 <ins_id>``,
    ``1 <content>``) the line starts with. ``where`` names the line in errors.

    Example::

        parse_multi_slot_line("2 7 9 1 0", [Slot("w", "uint64", is_used=True),
                                            Slot("y", "uint64", is_used=True)])
        # (array([7, 9]), array([0]))
    """
    toks = line.split()
    pos, out, texts = 0, [], []
    for what in ("ins_id", "content")[:lead]:
        if len(toks) < pos + 2 or toks[pos] != "1":
            raise ValueError(f"{where}: the line must start with its {what} as '1 <{what}>', "
                             f"got {' '.join(toks[pos:pos + 2])!r}")
        texts.append(toks[pos + 1])
        pos += 2
    for slot in slots:
        if pos >= len(toks):
            raise ValueError(f"{where}: the line ends before slot {slot.name!r}: expected "
                             f"its count, then its values ({len(slots)} slots a line)")
        count_text = toks[pos]
        if not count_text.isdigit() or int(count_text) == 0:
            raise ValueError(f"{where}: slot {slot.name!r}: expected a count of values >= 1, "
                             f"got {count_text!r} (an empty slot must be padded with a value)")
        count = int(count_text)
        values = toks[pos + 1:pos + 1 + count]
        if len(values) < count:
            raise ValueError(f"{where}: slot {slot.name!r} has the count {count} but only "
                             f"{len(values)} values follow")
        pos += 1 + count
        if not slot.is_used:
            continue
        try:
            if slot.type == "float":
                arr = np.array([float(v) for v in values], dtype=np.float32)
            else:
                ints = [int(v) for v in values]
                if any(v < 0 or v > _INT64_MAX for v in ints):
                    raise ValueError("outside 0 .. 2**63-1")
                arr = np.array(ints, dtype=np.int64)
        except ValueError as e:
            kind = "numbers" if slot.type == "float" else "non-negative integer ids"
            raise ValueError(f"{where}: slot {slot.name!r} ({slot.type}) takes {kind}, got "
                             f"{' '.join(values)!r} ({e})") from None
        out.append(arr)
    if pos != len(toks):
        raise ValueError(f"{where}: {len(toks) - pos} values after the last slot "
                         f"{slots[-1].name!r}: the line has more columns than the "
                         f"{len(slots)} slots")
    return (*out, *texts)


def build_feed(instances: Sequence[tuple[Any, ...]], slots: Sequence[Slot]
               ) -> dict[str, Any]:
    """The feed of a batch: a dense slot as an array of its variable's shape (the batch
    dimension inferred), a sparse slot as an int64/float32 ``[total, 1]`` LoDTensor with one
    sequence per instance."""
    feed: dict[str, Any] = {}
    for j, slot in enumerate(slots):
        parts = [inst[j] for inst in instances]
        flat = np.concatenate(parts)
        if not slot.is_dense:
            feed[slot.name] = create_lod_tensor(flat.reshape(-1, 1),
                                                [[len(p) for p in parts]], CPUPlace())
            continue
        shape = list(slot.shape) or [-1, len(parts[0])]
        if shape[0] == -1 and all(d > 0 for d in shape[1:]):
            per = int(np.prod(shape[1:]))
            bad = next((i for i, p in enumerate(parts) if len(p) != per), None)
            if bad is not None:
                raise ValueError(f"Dataset: dense slot {slot.name!r} has shape {slot.shape}, "
                                 f"so {per} values an instance, but instance {bad} of the "
                                 f"batch has {len(parts[bad])}")
            feed[slot.name] = flat.reshape([len(parts), *shape[1:]])
            continue
        # NOTE: a shape without a leading batch dimension is the whole batch's, as Fluid's
        # (one -1 inferred)
        known = int(np.prod([d for d in shape if d > 0]))
        if (-1 in shape and flat.size % max(known, 1)) or (-1 not in shape and
                                                           flat.size != known):
            raise ValueError(f"Dataset: dense slot {slot.name!r} has shape {slot.shape} but "
                             f"the batch of {len(parts)} instances holds {flat.size} values")
        feed[slot.name] = flat.reshape(shape)
    return feed
