"""``fluid.contrib.Compressor``: Fluid's model compression loop (``contrib/slim``).

``Compressor(...).config("compress.yaml")`` reads the strategies (``config.py``);
``run()`` trains epoch by epoch from a checkpoint if there is one, calling the strategies
around every epoch and batch, evaluates, and saves a checkpoint after each epoch:
``checkpoint_path/<epoch>/model/`` (``fluid.io.save_persistables`` of the program being
trained) and ``checkpoint_path/<epoch>/context.json`` (the epoch, the evaluations and each
strategy's state; JSON, never pickle). A resumed run re-applies the strategies' states
(pruned shapes, quantization ops, a distillation program) and then loads the variables.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ... import io
from ...dataio.data_feeder import DataFeeder
from ...executor import Executor
from ...framework import Program, program_guard
from ...place import CPUPlace
from ...scope import Scope, global_scope
from .config import ConfigFactory

__all__ = ["Compressor", "Context"]

_logger = logging.getLogger("parafluid.slim")


def _pairs(value: Any, what: str) -> dict[str, str]:
    """Fluid's ``[(key, variable name), ...]`` feed/fetch lists as an ordered dict."""
    if value is None:
        return {}
    if isinstance(value, dict):
        return {str(k): getattr(v, "name", v) for k, v in value.items()}
    out = {}
    for item in value:
        if not (isinstance(item, (tuple, list)) and len(item) == 2):
            raise TypeError(f"Compressor: {what} must be a list of (key, variable name) pairs, "
                            f"such as [('image', image.name)], got the item {item!r}")
        out[str(item[0])] = getattr(item[1], "name", item[1])
    return out


class Context:
    """What the strategies see and change: programs, scope, readers, epoch and batch, the
    evaluations so far (``eval_results[name]``: one mean per evaluation) and a key-value
    store (``put`` / ``get``)."""

    def __init__(self, place: Any, scope: Scope, train_program: Program,
                 train_reader: Any, train_feeds: dict[str, str], train_fetches: dict[str, str],
                 eval_program: Program | None, eval_reader: Any,
                 eval_feeds: dict[str, str], eval_fetches: dict[str, str],
                 teacher_programs: Sequence[Program], train_optimizer: Any,
                 distiller_optimizer: Any, search_space: Any) -> None:
        self.epoch = 0
        self.epoch_id = 0
        self.batch_id = 0
        self.k_v: dict[str, Any] = {}
        self.place = place
        self.scope = scope
        self.executor = Executor(place)
        self.train_program = train_program
        self.train_reader = train_reader
        self.train_feeds, self.train_fetches = train_feeds, train_fetches
        self.eval_program = eval_program
        self.eval_reader = eval_reader
        self.eval_feeds, self.eval_fetches = eval_feeds, eval_fetches
        self.teacher_programs = list(teacher_programs)
        self.train_optimizer = train_optimizer
        self.distiller_optimizer = distiller_optimizer
        self.search_space = search_space
        # the program trained now (train_program + train_optimizer, or a strategy's)
        self.optimize_program: Program | None = None
        self.optimize_fetches: dict[str, str] = dict(train_fetches)
        self.eval_results: dict[str, list[float]] = {}
        self.skip_training = False

    def put(self, key: str, value: Any) -> None:
        self.k_v[key] = value

    def get(self, key: str) -> Any:
        return self.k_v.get(key)

    def programs(self) -> list[Program]:
        """Every program holding the model's variables (a pruning changes all of them)."""
        out: list[Program] = []
        for p in (self.train_program, self.optimize_program, self.eval_program):
            if p is not None and all(p is not q for q in out):
                out.append(p)
        return out

    def run_program(self, program: Program, startup: Program | None = None) -> None:
        """Run a startup program (new variables of a strategy) in the context's scope."""
        self.executor.run(startup or program, scope=self.scope)

    def eval_converged(self, metric_name: str, delta: float = 0.001) -> bool:
        """Whether the last two evaluations of ``metric_name`` differ by less than
        ``delta`` relatively."""
        results = self.eval_results.get(metric_name, [])
        if len(results) < 2:
            return False
        return abs(results[-1] - results[-2]) / abs(results[-2]) < delta

    def run_eval_graph(self, sampled_rate: float | None = None,
                       cached_id: int = 0) -> tuple[list[float], list[str]]:
        """Evaluate the eval program on the whole eval reader: the mean of each fetch."""
        if self.eval_program is None or self.eval_reader is None:
            raise ValueError("Compressor: evaluation needs eval_program and eval_reader (or "
                             "eval_func)")
        program = self.eval_program.clone(for_test=True)
        feeder = DataFeeder([program.global_block().var(n) for n in self.eval_feeds.values()],
                            self.place)
        names = list(self.eval_fetches)
        results = []
        for data in self.eval_reader():
            out = self.executor.run(program, feed=feeder.feed(data),
                                    fetch_list=list(self.eval_fetches.values()),
                                    scope=self.scope)
            results.append([float(np.mean(r)) for r in out])
        if not results:
            raise ValueError("Compressor: the eval reader gave no batches")
        return [float(v) for v in np.mean(np.array(results), axis=0)], names


class Compressor:
    """Compresses a model by the strategies of a config (pruning, quantization,
    distillation), training and evaluating epoch by epoch with checkpoints.

    Args:
        place: where to run.
        scope: the scope holding the model's variables (initialized by its startup program).
        train_program: the model's program with its loss (without optimizer when
            ``train_optimizer`` is given).
        train_reader: a reader creator of training batches (lists of samples).
        train_feed_list: ``[(key, variable name), ...]``, the fields of a sample in order.
        train_fetch_list: ``[(key, variable name), ...]``; the key ``'loss'`` names the loss.
        eval_program, eval_reader, eval_feed_list, eval_fetch_list: the same for evaluation;
            the fetches' means over the eval reader are ``eval_results`` under their keys.
        teacher_programs: teacher models for distillation (their variables in ``scope``).
        checkpoint_path: where checkpoints go (and are resumed from); the config may set it.
        train_optimizer: the optimizer minimizing the loss.
        distiller_optimizer: the optimizer minimizing the distillation loss.
        search_space: for architecture search (not provided: see docs/fluid_compat.md).
        eval_func: ``{key: fn(eval_program, scope) -> float}`` evaluations instead of the
            eval reader.
        save_eval_model: also save the eval program and its persistables with each
            checkpoint (``<checkpoint>/eval_model``).
        prune_infer_model: ``(input names, output names)``: also save an inference model
            pruned to them (``eval_model/__model__.infer``).
        log_period: log the training fetches every ``log_period`` batches.

    Example::

        com = fluid.contrib.Compressor(place, fluid.global_scope(), train_prog,
                                       train_reader=reader, train_feed_list=[("image", "image"),
                                       ("label", "label")], train_fetch_list=[("loss", loss.name)],
                                       eval_program=test_prog, eval_reader=test_reader,
                                       eval_feed_list=..., eval_fetch_list=[("acc", acc.name)],
                                       train_optimizer=fluid.optimizer.SGD(0.01))
        com.config("compress.yaml")
        eval_program = com.run()
    """

    def __init__(self, place: Any, scope: Scope | None, train_program: Program,
                 train_reader: Callable[[], Any] | None = None,
                 train_feed_list: Any = None, train_fetch_list: Any = None,
                 eval_program: Program | None = None,
                 eval_reader: Callable[[], Any] | None = None,
                 eval_feed_list: Any = None, eval_fetch_list: Any = None,
                 eval_func: dict[str, Callable[[Program, Scope], float]] | None = None,
                 save_eval_model: bool = True, prune_infer_model: Any = None,
                 teacher_programs: Sequence[Program] = (), checkpoint_path: str | None = None,
                 train_optimizer: Any = None, distiller_optimizer: Any = None,
                 search_space: Any = None, log_period: int = 20) -> None:
        if isinstance(log_period, bool) or not isinstance(log_period, int) or log_period <= 0:
            raise ValueError(f"Compressor: log_period must be a positive int, got "
                             f"{log_period!r}")
        if prune_infer_model is not None and (
                not isinstance(prune_infer_model, (list, tuple)) or len(prune_infer_model) != 2):
            raise ValueError("Compressor: prune_infer_model must be (input variable names, "
                             f"output variable names), got {prune_infer_model!r}")
        self.save_eval_model = bool(save_eval_model)
        self.prune_infer_model = prune_infer_model
        self.log_period = log_period
        if not isinstance(train_program, Program):
            raise TypeError(f"Compressor: train_program must be a fluid.Program, got "
                            f"{type(train_program).__name__}")
        if search_space is not None:
            raise ValueError("Compressor: search_space (LightNAS architecture search) is not "
                             "provided by parafluid (docs/fluid_compat.md)")
        self.place = CPUPlace() if place is None else place
        self.scope = scope if scope is not None else global_scope()
        self.train_program = train_program
        self.train_reader = train_reader
        self.train_feeds = _pairs(train_feed_list, "train_feed_list")
        self.train_fetches = _pairs(train_fetch_list, "train_fetch_list")
        if "loss" not in self.train_fetches:
            raise ValueError("Compressor: train_fetch_list must name the loss under the key "
                             f"'loss', e.g. [('loss', avg_cost.name)]; got keys "
                             f"{list(self.train_fetches)}")
        self.eval_program = eval_program
        self.eval_reader = eval_reader
        self.eval_feeds = _pairs(eval_feed_list, "eval_feed_list")
        self.eval_fetches = _pairs(eval_fetch_list, "eval_fetch_list")
        self.eval_func = eval_func
        self.teacher_programs = list(teacher_programs or [])
        self.checkpoint_path = checkpoint_path
        self.train_optimizer = train_optimizer
        self.distiller_optimizer = distiller_optimizer
        self.search_space = search_space
        self.strategies: list[Any] = []
        self.epoch = 0
        self.eval_epoch = 1
        self.init_model: str | None = None
        self.context: Context | None = None

    def _add_strategy(self, strategy: Any) -> None:
        self.strategies.append(strategy)
        self.epoch = max(int(getattr(strategy, "end_epoch", 0)), self.epoch)

    def config(self, config_file: str) -> None:
        """Read the strategies and settings of a YAML config (``slim/config.py``)."""
        factory = ConfigFactory(config_file)
        for key in ("epoch", "eval_epoch"):
            value = factory.compressor.get(key, 1)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{config_file}: compressor {key} must be an integer >= 0, "
                                 f"got {value!r}")
        self.epoch = factory.compressor.get("epoch", self.epoch)
        for strategy in factory.compressor["strategies"]:
            self._add_strategy(strategy)
        self.checkpoint_path = factory.compressor.get("checkpoint_path", self.checkpoint_path)
        self.init_model = factory.compressor.get("init_model", self.init_model)
        self.eval_epoch = factory.compressor.get("eval_epoch", self.eval_epoch)

    # ------------------------------------------------------------------ the loop
    def run(self) -> Program | None:
        """Compress: train ``epoch`` epochs under the strategies; returns the eval program
        (pruned, or frozen for quantized inference, by the strategies)."""
        context = Context(self.place, self.scope, self.train_program, self.train_reader,
                          self.train_feeds, self.train_fetches, self.eval_program,
                          self.eval_reader, self.eval_feeds, self.eval_fetches,
                          self.teacher_programs, self.train_optimizer,
                          self.distiller_optimizer, self.search_space)
        context.epoch = self.epoch
        self.context = context
        if self.teacher_programs:
            context.put("teachers", self.teacher_programs)
        if self.init_model and os.path.exists(self.init_model):
            io.load_persistables(context.executor, self.init_model, self.train_program,
                                 scope=self.scope)
        context.optimize_program = self._optimize_program(context)
        self._load_checkpoint(context)
        for s in self.strategies:
            s.on_compression_begin(context)
        for epoch in range(context.epoch_id, self.epoch):
            context.epoch_id = epoch
            for s in self.strategies:
                s.on_epoch_begin(context)
            self._train_one_epoch(context)
            if self.eval_epoch and epoch % int(self.eval_epoch) == 0:
                self._eval(context)
            self._save_checkpoint(context)
            for s in self.strategies:
                s.on_epoch_end(context)
        for s in self.strategies:
            s.on_compression_end(context)
        return context.eval_program

    def _optimize_program(self, context: Context) -> Program:
        if context.train_optimizer is None:
            return self.train_program
        program, startup = self.train_program.clone(), Program()
        loss = program.global_block().var(self.train_fetches["loss"])
        with program_guard(program, startup):
            context.train_optimizer.minimize(loss)
        context.run_program(program, startup)
        return program

    def _train_one_epoch(self, context: Context) -> None:
        if context.skip_training or context.train_reader is None:
            return
        program = context.optimize_program
        feeder = DataFeeder([program.global_block().var(n) for n in self.train_feeds.values()],
                            self.place)
        for data in context.train_reader():
            for s in self.strategies:
                s.on_batch_begin(context)
            out = context.executor.run(context.optimize_program, feed=feeder.feed(data),
                                        fetch_list=list(context.optimize_fetches.values()),
                                        scope=self.scope)
            if context.batch_id % self.log_period == 0:
                _logger.info("epoch %d batch %d: %s", context.epoch_id, context.batch_id,
                             dict(zip(context.optimize_fetches,
                                      (round(float(np.mean(r)), 4) for r in out))))
            context.put("last_train_results",
                        dict(zip(context.optimize_fetches, (float(np.mean(r)) for r in out))))
            for s in self.strategies:
                s.on_batch_end(context)
            context.batch_id += 1
        context.batch_id = 0

    def _eval(self, context: Context) -> None:
        if self.eval_func is not None:
            for key, fn in self.eval_func.items():
                context.eval_results.setdefault(key, []).append(
                    float(fn(context.eval_program, self.scope)))
            return
        if context.eval_program is None or context.eval_reader is None:
            return
        results, names = context.run_eval_graph()
        for name, value in zip(names, results):
            context.eval_results.setdefault(name, []).append(value)
        _logger.info("epoch %d evaluation: %s", context.epoch_id,
                     dict(zip(names, results)))

    # ------------------------------------------------------------------ checkpoints
    def _save_checkpoint(self, context: Context) -> None:
        if not self.checkpoint_path:
            return
        folder = os.path.join(self.checkpoint_path, str(context.epoch_id))
        io.save_persistables(context.executor, os.path.join(folder, "model"),
                             context.optimize_program, scope=self.scope)
        self._save_eval_model(context, os.path.join(folder, "eval_model"))
        doc = {"epoch_id": context.epoch_id, "eval_results": context.eval_results,
               "strategies": [{"class": type(s).__name__,
                               "state": s.state() if hasattr(s, "state") else {}}
                              for s in self.strategies]}
        tmp = os.path.join(folder, "context.json.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)
        os.replace(tmp, os.path.join(folder, "context.json"))

    def _save_eval_model(self, context: Context, folder: str) -> None:
        """Fluid's ``save_eval_model`` (the eval program and its persistables) and
        ``prune_infer_model`` (an inference model pruned to the given inputs / outputs)."""
        program = context.eval_program
        if program is None:
            return
        if self.save_eval_model:
            io.save_persistables(context.executor, folder, program, scope=self.scope)
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, "__model__"), "wb") as f:
                f.write(program.serialize_to_string())
        if self.prune_infer_model:
            feeds, fetches = self.prune_infer_model
            block = program.global_block()
            io.save_inference_model(folder, list(feeds), [block.var(n) for n in fetches],
                                    context.executor, program, model_filename="__model__.infer",
                                    program_only=self.save_eval_model, scope=self.scope)

    def _load_checkpoint(self, context: Context) -> None:
        path = self.checkpoint_path
        if not path or not os.path.isdir(path):
            return
        done = [int(d) for d in os.listdir(path) if d.isdigit()
                and os.path.isfile(os.path.join(path, d, "context.json"))]
        if not done:
            return
        folder = os.path.join(path, str(max(done)))
        with open(os.path.join(folder, "context.json"), encoding="utf-8") as f:
            doc = json.load(f)
        saved = doc.get("strategies", [])
        if [s.get("class") for s in saved] != [type(s).__name__ for s in self.strategies]:
            raise ValueError(f"Compressor: the checkpoint {folder} was written with strategies "
                             f"{[s.get('class') for s in saved]}, the config has "
                             f"{[type(s).__name__ for s in self.strategies]}; use another "
                             "checkpoint_path")
        context.epoch_id = int(doc["epoch_id"]) + 1
        context.eval_results = {k: [float(v) for v in vs]
                                for k, vs in doc.get("eval_results", {}).items()}
        for s, entry in zip(self.strategies, saved):
            if hasattr(s, "restore"):
                s.restore(context, entry.get("state") or {})
        # NOTE: what the file and the program both hold: a checkpoint written while a
        # strategy trained a program of its own (distillation) has that program's state too
        model = os.path.join(folder, "model")
        saved_vars, _ = io.read_tensors(os.path.join(model, io.DEFAULT_FILENAME))
        chosen = [v for v in context.optimize_program.list_vars()
                  if v.persistable and v.name in saved_vars]
        io.load_vars(context.executor, model, context.optimize_program, vars=chosen,
                     scope=self.scope)
        _logger.info("resumed from %s", folder)
