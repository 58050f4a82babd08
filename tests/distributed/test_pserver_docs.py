"""The example of docs/pserver.md runs as written and trains what it says."""

import pathlib
import re

import pytest
import torch

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "pserver.md"


@pytest.mark.timeout(60)
def test_docs_example_runs(monkeypatch):
    monkeypatch.delenv("PARAFLUID_RPC_SECRET", raising=False)
    block, = [b for b in re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
              if "ParameterServer(" in b]  # the runtime example of the appendix
    ns: dict = {}
    exec(compile(block, str(DOC), "exec"), ns)  # noqa: S102
    # 3 steps, mean gradient (1 + 2) / 2, learning rate 0.1
    assert torch.allclose(ns["params"]["w"], torch.full((4,), -0.45))
    assert ns["ps"].step == 3 and ns["ps"].completed == {0, 1}
