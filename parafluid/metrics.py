"""``fluid.metrics``: accumulate evaluation results over minibatches on the host (numpy).

Each metric has ``update(...)`` per minibatch, ``eval()`` for the result so far and
``reset()``. They work on what ``Executor.run`` fetched, e.g.::

    acc = fluid.metrics.Accuracy()
    for batch in reader():
        a, = exe.run(test_program, feed=feeder.feed(batch), fetch_list=[acc_var])
        acc.update(value=a, weight=len(batch))
    print(acc.eval())
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["MetricBase", "CompositeMetric", "Accuracy", "Precision", "Recall", "Auc",
           "ChunkEvaluator", "EditDistance", "DetectionMAP"]


def _scalar(value: Any, what: str) -> float:
    arr = np.asarray(value, dtype="float64")
    if arr.size != 1:
        raise ValueError(f"{what} must be one number, got an array of shape {list(arr.shape)}")
    return float(arr.reshape(-1)[0])


class MetricBase:
    """Base class: ``reset()`` sets every public non-name attribute back to its start value."""

    def __init__(self, name: str | None = None) -> None:
        self._name = name if name is not None else type(self).__name__

    def __str__(self) -> str:
        return self._name

    def reset(self) -> None:
        for attr, value in self._states().items():
            if isinstance(value, (np.ndarray, np.generic)):
                setattr(self, attr, np.zeros_like(value))
            elif isinstance(value, (bool, int, float)):
                setattr(self, attr, type(value)(0))
            else:  # as Fluid's reset does for any other state
                setattr(self, attr, None)

    def _remember(self) -> None:
        self._initial = {k: v for k, v in vars(self).items() if not k.startswith("_")}

    def _states(self) -> dict[str, Any]:
        # NOTE: a subclass written for Fluid does not call _remember(); as in Fluid, its
        # public attributes are its states
        initial = self.__dict__.get("_initial")
        names = initial if initial is not None else \
            [k for k in vars(self) if not k.startswith("_")]
        return {k: getattr(self, k) for k in names}

    def get_config(self) -> dict[str, Any]:
        return {"name": self._name, **self._states()}

    def update(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError  # abstract

    def eval(self) -> Any:
        raise NotImplementedError  # abstract


class CompositeMetric(MetricBase):
    """Several metrics updated with the same ``(preds, labels)``; ``eval`` lists theirs."""

    def __init__(self, name: str | None = None) -> None:
        super().__init__(name)
        self._metrics: list[MetricBase] = []

    def add_metric(self, metric: MetricBase) -> None:
        if not isinstance(metric, MetricBase):
            raise TypeError(f"CompositeMetric.add_metric: expected a MetricBase, got "
                            f"{type(metric).__name__}")
        self._metrics.append(metric)

    def update(self, preds: Any, labels: Any) -> None:
        for m in self._metrics:
            m.update(preds, labels)

    def reset(self) -> None:
        for m in self._metrics:
            m.reset()

    def eval(self) -> list[Any]:
        return [m.eval() for m in self._metrics]


class Accuracy(MetricBase):
    """Weighted mean of per-batch accuracies: ``update(value=acc, weight=batch_size)``."""

    def __init__(self, name: str | None = None) -> None:
        super().__init__(name)
        self.value = 0.0
        self.weight = 0.0
        self._remember()

    def update(self, value: Any, weight: Any) -> None:
        w = _scalar(weight, "Accuracy.update: weight")
        if w < 0:
            raise ValueError(f"Accuracy.update: weight must be >= 0, got {w}")
        self.value += _scalar(value, "Accuracy.update: value") * w
        self.weight += w

    def eval(self) -> float:
        if self.weight == 0:
            raise ValueError("Accuracy.eval: no data yet (the total weight is 0); call "
                             "update() first")
        return self.value / self.weight


def _binary(preds: Any, labels: Any, who: str) -> tuple[np.ndarray, np.ndarray]:
    p = np.rint(np.asarray(preds, dtype="float64")).astype("int64").reshape(-1)
    y = np.asarray(labels).astype("int64").reshape(-1)
    if p.shape != y.shape:
        raise ValueError(f"{who}.update: {p.size} predictions but {y.size} labels")
    return p, y


class Precision(MetricBase):
    """Binary precision ``tp / (tp + fp)``; predictions are rounded to 0/1."""

    def __init__(self, name: str | None = None) -> None:
        super().__init__(name)
        self.tp = 0
        self.fp = 0
        self._remember()

    def update(self, preds: Any, labels: Any) -> None:
        p, y = _binary(preds, labels, "Precision")
        self.tp += int(((p == 1) & (y == 1)).sum())
        self.fp += int(((p == 1) & (y != 1)).sum())

    def eval(self) -> float:
        n = self.tp + self.fp
        return self.tp / n if n else 0.0


class Recall(MetricBase):
    """Binary recall ``tp / (tp + fn)``; predictions are rounded to 0/1."""

    def __init__(self, name: str | None = None) -> None:
        super().__init__(name)
        self.tp = 0
        self.fn = 0
        self._remember()

    def update(self, preds: Any, labels: Any) -> None:
        p, y = _binary(preds, labels, "Recall")
        self.tp += int(((p == 1) & (y == 1)).sum())
        self.fn += int(((p != 1) & (y == 1)).sum())

    def eval(self) -> float:
        n = self.tp + self.fn
        return self.tp / n if n else 0.0


def auc_from_stats(stat_pos: np.ndarray, stat_neg: np.ndarray) -> float:
    """Area under the ROC curve from per-threshold-bucket counts (Fluid's trapezoid sum,
    walking from the highest bucket down). 0 when one class has no example."""
    pos = np.concatenate([[0.0], np.cumsum(np.asarray(stat_pos, "float64")[::-1])])
    neg = np.concatenate([[0.0], np.cumsum(np.asarray(stat_neg, "float64")[::-1])])
    if pos[-1] <= 0 or neg[-1] <= 0:
        return 0.0
    area = float(np.sum((neg[1:] - neg[:-1]) * (pos[1:] + pos[:-1]) / 2.0))
    return area / pos[-1] / neg[-1]


class Auc(MetricBase):
    """ROC AUC over thresholds bucketed into ``num_thresholds + 1`` bins.

    ``update(preds, labels)``: ``preds`` is ``[N, 2]`` class probabilities (column 1 is the
    positive class), ``labels`` ``[N, 1]`` 0/1.
    """

    def __init__(self, name: str | None = None, curve: str = "ROC",
                 num_thresholds: int = 4095) -> None:
        super().__init__(name)
        if curve != "ROC":
            raise ValueError(f"Auc: only curve='ROC' is supported, got {curve!r}")
        self._curve = curve
        self._num_thresholds = int(num_thresholds)
        self._stat_pos = np.zeros(self._num_thresholds + 1, "int64")
        self._stat_neg = np.zeros(self._num_thresholds + 1, "int64")
        self._remember()

    def reset(self) -> None:
        self._stat_pos[:] = 0
        self._stat_neg[:] = 0

    def update(self, preds: Any, labels: Any) -> None:
        p = np.asarray(preds, dtype="float64")
        if p.ndim != 2 or p.shape[1] != 2:
            raise ValueError(f"Auc.update: preds must be [N, 2] probabilities, got shape "
                             f"{list(p.shape)}")
        y = np.asarray(labels).reshape(-1)
        if y.size != p.shape[0]:
            raise ValueError(f"Auc.update: {p.shape[0]} predictions but {y.size} labels")
        bins = np.clip((p[:, 1] * self._num_thresholds).astype("int64"), 0,
                       self._num_thresholds)
        np.add.at(self._stat_pos, bins[y != 0], 1)
        np.add.at(self._stat_neg, bins[y == 0], 1)

    def eval(self) -> float:
        return auc_from_stats(self._stat_pos, self._stat_neg)


class ChunkEvaluator(MetricBase):
    """Precision, recall and F1 of chunks, from the counts a chunk_eval op (or your own
    code) gives per minibatch: ``update(num_infer_chunks, num_label_chunks,
    num_correct_chunks)``."""

    def __init__(self, name: str | None = None) -> None:
        super().__init__(name)
        self.num_infer_chunks = 0
        self.num_label_chunks = 0
        self.num_correct_chunks = 0
        self._remember()

    def update(self, num_infer_chunks: Any, num_label_chunks: Any,
               num_correct_chunks: Any) -> None:
        self.num_infer_chunks += int(_scalar(num_infer_chunks, "num_infer_chunks"))
        self.num_label_chunks += int(_scalar(num_label_chunks, "num_label_chunks"))
        self.num_correct_chunks += int(_scalar(num_correct_chunks, "num_correct_chunks"))

    def eval(self) -> tuple[float, float, float]:
        precision = self.num_correct_chunks / self.num_infer_chunks \
            if self.num_infer_chunks else 0.0
        recall = self.num_correct_chunks / self.num_label_chunks \
            if self.num_label_chunks else 0.0
        f1 = 2 * precision * recall / (precision + recall) if self.num_correct_chunks else 0.0
        return precision, recall, f1


class EditDistance(MetricBase):
    """Mean edit distance and the fraction of sequences with a non-zero distance:
    ``update(distances [N, 1], seq_num)``."""

    def __init__(self, name: str | None = None) -> None:
        super().__init__(name)
        self.total_distance = 0.0
        self.seq_num = 0
        self.instance_error = 0
        self._remember()

    def update(self, distances: Any, seq_num: Any) -> None:
        d = np.asarray(distances, dtype="float64").reshape(-1)
        self.total_distance += float(d.sum())
        self.seq_num += int(_scalar(seq_num, "EditDistance.update: seq_num"))
        self.instance_error += int((d != 0).sum())

    def eval(self) -> tuple[float, float]:
        if self.seq_num == 0:
            raise ValueError("EditDistance.eval: no data yet; call update() first")
        return self.total_distance / self.seq_num, self.instance_error / self.seq_num


class DetectionMAP:
    """Mean average precision of detections, in the program: ``get_map_var()`` gives the
    batch's mAP and the mAP accumulated since the last ``reset(exe)``.

    Args:
        input: ``multiclass_nms`` / ``detection_output`` rows (LoD, one sequence per image).
        gt_label, gt_box, gt_difficult: the ground truth (LoD ``[G, 1]``, ``[G, 4]``,
            ``[G, 1]``; ``gt_difficult`` may be None).
        class_num, background_label, overlap_threshold, evaluate_difficult, ap_version:
            as ``layers.detection.detection_map`` (``'integral'`` or ``'11point'``).

    Example::

        map_eval = fluid.metrics.DetectionMAP(nmsed, gt_label, gt_box, difficult, 21)
        cur_map, accum_map = map_eval.get_map_var()
        map_eval.reset(exe)
        for batch in reader():
            accum, = exe.run(test_program, feed=feeder.feed(batch), fetch_list=[accum_map])
    """

    def __init__(self, input: Any, gt_label: Any, gt_box: Any, gt_difficult: Any = None,
                 class_num: int | None = None, background_label: int = 0,
                 overlap_threshold: float = 0.5, evaluate_difficult: bool = True,
                 ap_version: str = "integral") -> None:
        from . import layers, unique_name
        from .initializer import Constant
        from .layer_helper import LayerHelper

        if class_num is None:
            raise ValueError("DetectionMAP: class_num is required")
        self.helper = LayerHelper("map_eval")
        gt_label = layers.cast(x=gt_label, dtype=gt_box.dtype)
        parts = [gt_label] if gt_difficult is None else \
            [gt_label, layers.cast(x=gt_difficult, dtype=gt_box.dtype)]
        # the rows keep the ground truth's sequences (one per image)
        label = layers.lod_reset(layers.concat(parts + [gt_box], axis=1), y=gt_box)
        args = dict(class_num=class_num, background_label=background_label,
                    overlap_threshold=overlap_threshold, evaluate_difficult=evaluate_difficult,
                    ap_version=ap_version)
        self.cur_map = layers.detection.detection_map(input, label, **args)

        def state(suffix: str, dtype: str, shape: list[int], value: float) -> Any:
            var = self.helper.create_global_variable(
                name="_".join([unique_name.generate(self.helper.name), suffix]),
                persistable=True, dtype=dtype, shape=shape)
            self.helper.set_variable_initializer(var, Constant(value))
            return var

        # the accumulators are read only once has_state is 1; they start as placeholders
        states = [state("accum_pos_count", "int32", [class_num, 1], 0),
                  state("accum_true_pos", "float32", [1, 2], 0),
                  state("accum_false_pos", "float32", [1, 2], 0)]
        self.has_state = state("has_state", "int32", [1], 0)
        self.accum_map = layers.detection.detection_map(
            input, label, has_state=self.has_state, input_states=states, out_states=states,
            **args)
        layers.fill_constant(shape=[1], value=1, dtype="int32", out=self.has_state)

    def get_map_var(self) -> tuple[Any, Any]:
        """(the batch's mAP, the accumulated mAP) variables."""
        return self.cur_map, self.accum_map

    def reset(self, executor: Any, reset_program: Any = None) -> None:
        """Start accumulating afresh (runs a program setting ``has_state`` to 0)."""
        from . import layers
        from .framework import Program, program_guard

        reset_program = Program() if reset_program is None else reset_program
        with program_guard(reset_program):
            var = reset_program.global_block().create_var(
                name=self.has_state.name, shape=[1], dtype="int32", persistable=True)
            layers.fill_constant(shape=[1], value=0, dtype="int32", out=var)
        executor.run(reset_program)


def __getattr__(name: str) -> object:
    # Fluid 1.6 names left out here import and fail on use, saying what to use instead
    from .compat import missing_attribute

    return missing_attribute("metrics", name, __all__)
