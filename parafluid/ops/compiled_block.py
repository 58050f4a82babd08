"""``compiled_segment``: a run of ops that the engine runs as one compiled function.

The segmentation pass (``passes/compile_regions.py``) moves a run of compilable ops into a sub-block
and puts one ``compiled_segment`` op in their place: ``X`` lists what the ops read from
outside, ``Out`` what they write that is needed afterwards. The engine binds the op to a
function of the ops' own kernels handed to ``torch.compile`` (``engine/compiled_functions.py``),
which also runs them one by one when they cannot compile: the op has no kernel of its own.
``commit``: the run ends with update ops and writes the new values of the persistables it
updates into fresh tensors, committed after the call (a failure inside changes nothing);
``tiered``: it runs op by op until its compiled code, built in the background, is ready.
"""

from __future__ import annotations

from .registry import register_op


def _segment_shape(ins: dict, attrs: dict) -> dict:
    return {}  # the outputs are variables of the program, declared by the ops inside


register_op("compiled_segment", inputs=("X[]",), outputs=("Out[]",),
            attrs={"sub_block": None, "segment": 0, "commit": False, "tiered": False},
            infer_shape=_segment_shape)
