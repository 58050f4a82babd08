"""Knowledge distillation (``DistillationStrategy`` and its distillers).

From ``start_epoch`` to ``end_epoch`` the Compressor trains a merged program: the student's
training program, the teacher programs' forward ops after it (their variables frozen), and
the student loss plus each distiller's loss, minimized by ``distiller_optimizer``. Teacher
variables keep their names: a teacher built with its own names (``teacher_...``) shares
only the data variables (the inputs) with the student.

    L2Distiller          w * mean((student_map - teacher_map)^2)
    FSPDistiller         w * sum over pairs of mean((fsp(s_a, s_b) - fsp(t_a, t_b))^2)
    SoftLabelDistiller   w * mean(cross_entropy(softmax(s / T_s), softmax(t / T_t)))
"""

from __future__ import annotations

from typing import Any

from ... import layers, unique_name
from ...framework import OpRole, Program, program_guard
from .config import register_class
from .strategy import Strategy

__all__ = ["L2Distiller", "FSPDistiller", "SoftLabelDistiller", "DistillationStrategy",
           "merge_teacher"]


def merge_teacher(student: Program, teacher: Program) -> None:
    """Append the forward ops of ``teacher`` (run as for testing) to ``student``'s global
    block; its variables join as frozen ones (never trained), the data variables of the
    same name are shared."""
    teacher = teacher.clone(for_test=True)
    sblock, tblock = student.global_block(), teacher.global_block()
    for var in tblock.vars.values():
        if sblock.has_var(var.name):
            mine = sblock.var(var.name)
            if not (mine.is_data and var.is_data):
                raise ValueError(f"DistillationStrategy: the teacher's variable {var.name!r} "
                                 "has the name of a student variable; build the teacher with "
                                 "names of its own (e.g. layers named 'teacher_...', or in a "
                                 "fluid.unique_name.guard('teacher_'))")
            continue
        sblock.create_var(name=var.name, shape=var.shape, dtype=var.dtype, type=var.type,
                          persistable=var.persistable, stop_gradient=True, lod_level=var.lod_level)
    drop = OpRole.Backward | OpRole.Optimize | OpRole.LRSched
    for op in tblock.ops:
        if op.attrs.get("op_role", 0) & drop:
            continue
        sblock.append_op(op.type, inputs={k: list(v) for k, v in op.inputs.items()},
                         outputs={k: list(v) for k, v in op.outputs.items()},
                         attrs=dict(op.attrs), infer_shape=False)
    student._bump()


def _var(program: Program, name: str, who: str) -> Any:
    block = program.global_block()
    if not block.has_var(name):
        raise ValueError(f"{who}: the merged program has no variable {name!r}")
    return block.var(name)


@register_class
class L2Distiller:
    """The mean squared difference of a student and a teacher feature map."""

    def __init__(self, student_feature_map: str, teacher_feature_map: str,
                 distillation_loss_weight: float = 1.0) -> None:
        self.student_feature_map = student_feature_map
        self.teacher_feature_map = teacher_feature_map
        self.distillation_loss_weight = float(distillation_loss_weight)

    def distiller_loss(self, program: Program) -> Any:
        s = _var(program, self.student_feature_map, "L2Distiller")
        t = _var(program, self.teacher_feature_map, "L2Distiller")
        loss = layers.reduce_mean(layers.square(layers.elementwise_sub(s, t)))
        return layers.scale(loss, scale=self.distillation_loss_weight)


@register_class
class FSPDistiller:
    """The mean squared difference of the students' and the teachers' FSP matrices, one per
    pair of feature maps (``[[a, b], ...]``, same spatial size within a pair)."""

    def __init__(self, student_pairs: list[list[str]], teacher_pairs: list[list[str]],
                 distillation_loss_weight: float = 1.0) -> None:
        if len(student_pairs) != len(teacher_pairs):
            raise ValueError(f"FSPDistiller: {len(student_pairs)} student pairs but "
                             f"{len(teacher_pairs)} teacher pairs")
        self.student_pairs = [list(p) for p in student_pairs]
        self.teacher_pairs = [list(p) for p in teacher_pairs]
        self.distillation_loss_weight = float(distillation_loss_weight)

    def distiller_loss(self, program: Program) -> Any:
        losses = []
        for sp, tp in zip(self.student_pairs, self.teacher_pairs):
            s = layers.fsp_matrix(_var(program, sp[0], "FSPDistiller"),
                                  _var(program, sp[1], "FSPDistiller"))
            t = layers.fsp_matrix(_var(program, tp[0], "FSPDistiller"),
                                  _var(program, tp[1], "FSPDistiller"))
            losses.append(layers.reduce_mean(layers.square(layers.elementwise_sub(s, t))))
        return layers.scale(layers.sums(losses), scale=self.distillation_loss_weight)


@register_class
class SoftLabelDistiller:
    """The cross entropy of the student's softened prediction against the teacher's."""

    def __init__(self, student_feature_map: str, teacher_feature_map: str,
                 student_temperature: float = 1.0, teacher_temperature: float = 1.0,
                 distillation_loss_weight: float = 1.0) -> None:
        self.student_feature_map = student_feature_map
        self.teacher_feature_map = teacher_feature_map
        self.student_temperature = float(student_temperature)
        self.teacher_temperature = float(teacher_temperature)
        self.distillation_loss_weight = float(distillation_loss_weight)

    def distiller_loss(self, program: Program) -> Any:
        s = _var(program, self.student_feature_map, "SoftLabelDistiller")
        t = _var(program, self.teacher_feature_map, "SoftLabelDistiller")
        s = layers.softmax(layers.scale(s, scale=1.0 / self.student_temperature))
        t = layers.softmax(layers.scale(t, scale=1.0 / self.teacher_temperature))
        t.stop_gradient = True
        ce = layers.cross_entropy(s, t, soft_label=True)
        return layers.scale(layers.reduce_mean(ce), scale=self.distillation_loss_weight)


@register_class
class DistillationStrategy(Strategy):
    """Train the student with the distillers' losses from ``start_epoch`` to
    ``end_epoch`` (the teachers are the Compressor's ``teacher_programs``)."""

    def __init__(self, distillers: list[Any] | None = None, start_epoch: int = 0,
                 end_epoch: int = 0) -> None:
        super().__init__(start_epoch, end_epoch)
        self.distillers = list(distillers or [])
        for d in self.distillers:
            if not hasattr(d, "distiller_loss"):
                raise TypeError(f"DistillationStrategy: {d!r} is not a distiller (L2Distiller, "
                                "FSPDistiller or SoftLabelDistiller)")
        self._saved: tuple[Any, dict[str, str]] | None = None

    def _build(self, context: Any) -> None:
        if not context.teacher_programs:
            raise ValueError("DistillationStrategy: the Compressor has no teacher_programs")
        if context.distiller_optimizer is None:
            raise ValueError("DistillationStrategy: the Compressor has no distiller_optimizer")
        program, startup = context.train_program.clone(), Program()
        for teacher in context.teacher_programs:
            merge_teacher(program, teacher)
        # NOTE: own names for the losses and the distiller optimizer's state: the scope is
        # shared with the programs trained before and after
        with program_guard(program, startup), unique_name.guard("distill_"):
            student_loss = program.global_block().var(context.train_fetches["loss"])
            parts = [d.distiller_loss(program) for d in self.distillers]
            total = layers.sums([student_loss, *parts])
            context.distiller_optimizer.minimize(total)
        context.run_program(program, startup)
        self._saved = (context.optimize_program, dict(context.optimize_fetches))
        context.optimize_program = program
        context.optimize_fetches = {"loss": total.name, "student_loss": student_loss.name,
                                    **{f"distill_loss_{i}": p.name for i, p in enumerate(parts)}}

    def on_epoch_begin(self, context: Any) -> None:
        if context.epoch_id == self.start_epoch and self._saved is None:
            self._build(context)

    def on_epoch_end(self, context: Any) -> None:
        if context.epoch_id == self.end_epoch and self._saved is not None:
            context.optimize_program, context.optimize_fetches = self._saved
            self._saved = None

    def state(self) -> dict[str, Any]:
        return {"active": self._saved is not None}

    def restore(self, context: Any, state: dict[str, Any]) -> None:
        if state.get("active") and context.epoch_id <= self.end_epoch:
            self._build(context)
