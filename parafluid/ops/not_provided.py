"""Fluid 1.6 op types parafluid does not provide, each with the reason.

``NOT_PROVIDED`` maps a Fluid 1.6 op type (a name of ``parafluid/specs/fluid16_ops.txt``)
that is not registered to why not and what to use instead. tests/ops/test_op_coverage.py
checks that every Fluid 1.6 op type is registered or listed here, and docs/ops.md shows the
reasons. Kept a plain dict literal, one entry a line, sorted by op type.
"""

from __future__ import annotations

__all__ = ["NOT_PROVIDED"]

NOT_PROVIDED: dict[str, str] = {
}
