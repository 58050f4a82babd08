"""Test helpers for parafluid and for users who add ops: the table-driven op checker, and
a runner of op chains (what a fused op is compared with)."""

from .op_chain import run_op_chain
from .op_test import (
    OpCase,
    check_forward,
    check_grad,
    check_infer_shape,
    check_op,
    constant,
    rand,
    run_layers,
    run_op,
)

__all__ = ["OpCase", "check_op", "check_forward", "check_infer_shape", "check_grad", "run_op",
           "run_layers", "rand", "run_op_chain", "constant"]
