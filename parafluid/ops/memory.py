"""Memory ops: ``delete_var``, which ``release_memory`` inserts after a variable's last use.

``delete_var`` computes nothing; its ``OpDef`` says ``releases_inputs``, so every executor's
release plan (``parafluid.passes.liveness.release_plan``) drops the values it reads once
it and their other readers have run, with or without eager deletion.

Example::

    block.append_op("delete_var", inputs={"X": ["fc_0.tmp_0", "fc_0.tmp_1"]})
"""

from __future__ import annotations

from typing import Any

from .registry import register_op

__all__: list[str] = []


def _delete_var(ins: dict, attrs: dict, ctx: Any) -> dict:
    return {}  # the plan drops the inputs after this op: see the module docstring


register_op("delete_var", inputs=("X[]",), infer_shape=lambda ins, attrs: {},
            kernel=_delete_var, releases_inputs=True)
