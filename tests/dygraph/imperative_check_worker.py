"""One trainer of a 2-trainer imperative data-parallel job that may go wrong (run by
tests/dygraph/test_imperative_dp_checks.py, with the job's ``PADDLE_*`` variables set).

    python imperative_check_worker.py SCENARIO OUT_DIR

The model: two square weights ``a`` and ``b`` (``x @ a`` then ``tanh`` then ``@ b``),
trained with SGD for ``STEPS`` steps on this trainer's half of each batch.

- ``ok``: every trainer builds the same model.
- ``size``: trainer 1's ``b`` has another width (a different layer size).
- ``fc_size``: the model is an ``FC`` layer built on the first call, of size 4 on trainer 0
  and 6 on trainer 1.
- ``order``: trainer 1 creates ``b`` before ``a`` (generated names: its ``b`` is named as
  trainer 0's ``a``).
- ``order_named``: the same, with names given by ``ParamAttr``: the names still say which is
  which.
- ``skip``: trainer 1 skips ``apply_collective_grads`` at step 2.
- ``random``: 40 steps of 0.1 s, a JSON line ``{"step": k}`` after each; with ``$EXIT_AT=k``
  and ``$EXIT_WHO=t`` trainer t ends its script (``sys.exit(0)``) when step k starts.

Writes ``status_t<id>.json``: ``ok``, or ``error`` (the error that ended the run); in both
cases ``steps`` (the steps completed), ``params`` (the parameters after them) and
``losses``.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

import parafluid as fluid
from parafluid import dygraph

N = 4
STEPS = 4
LR = 0.1
RNG = np.random.RandomState(5)
XS = [RNG.randn(8, N).astype("float32") for _ in range(40)]
A = RNG.uniform(-0.5, 0.5, (N, N)).astype("float32")
B = RNG.uniform(-0.5, 0.5, (N, N)).astype("float32")
YS = [RNG.randn(8, N).astype("float32") for _ in range(40)]


class Net(dygraph.Layer):
    def __init__(self, name_scope, b_first=False, b_width=N, named=False, init=True):
        super().__init__(name_scope)

        def attr(which):
            # NOTE: trainer 0 starts from fixed values, the others from their own draws:
            # the broadcast must make them equal
            value = {"a": A, "b": B}[which] if init and b_width == N else None
            if not named and value is None:
                return None
            return fluid.ParamAttr(
                name=f"net.{which}" if named else None,
                initializer=None if value is None else
                fluid.initializer.NumpyArrayInitializer(value))

        if b_first:
            self.b = self.create_parameter(attr("b"), [N, b_width], "float32")
            self.a = self.create_parameter(attr("a"), [N, N], "float32")
        else:
            self.a = self.create_parameter(attr("a"), [N, N], "float32")
            self.b = self.create_parameter(attr("b"), [N, b_width], "float32")

    def forward(self, x, y):
        h = fluid.layers.tanh(fluid.layers.matmul(x, self.a))
        return fluid.layers.mean(fluid.layers.square_error_cost(fluid.layers.matmul(h, self.b),
                                                                y))


class FCNet(dygraph.Layer):
    def __init__(self, name_scope, size):
        super().__init__(name_scope)
        self.fc = dygraph.FC("fc", size=size)

    def forward(self, x, y):
        return fluid.layers.mean(fluid.layers.square_error_cost(self.fc(x), y))


def build(scenario: str, rank: int) -> dygraph.Layer:
    odd = rank == 1
    if scenario == "fc_size":
        return FCNet("fcnet", N + 2 if odd else N)
    return Net("net", b_first=odd and scenario.startswith("order"),
               b_width=N + 2 if odd and scenario == "size" else N,
               named=scenario == "order_named", init=rank == 0)


def train(scenario: str, result: dict, steps: int | None = None) -> None:
    """Train as the scenario says, filling ``result`` (what the status file gets); ``steps``
    (default: the scenario's) on the first batches."""
    with dygraph.guard():
        strategy = dygraph.prepare_context()
        rank, nranks = strategy.local_rank, strategy.nranks
        result["rank"] = rank
        fluid.default_main_program().random_seed = 7 + rank
        model = dygraph.DataParallel(build(scenario, rank), strategy)
        opt = fluid.optimizer.SGD(learning_rate=LR)
        if steps is None:
            steps = 40 if scenario == "random" else STEPS
        exit_at = int(os.environ.get("EXIT_AT", "-1"))
        exit_who = int(os.environ.get("EXIT_WHO", "-1"))
        losses, done = [], 0
        try:
            for step in range(steps):
                if scenario == "random":
                    if step == exit_at and rank == exit_who:
                        sys.exit(0)
                    time.sleep(0.1)
                xb, yb = XS[step], YS[step]
                part = slice(rank * len(xb) // nranks, (rank + 1) * len(xb) // nranks)
                loss = model(dygraph.to_variable(xb[part]), dygraph.to_variable(yb[part]))
                loss = model.scale_loss(loss)
                loss.backward()
                if not (scenario == "skip" and rank == 1 and step == 2):
                    model.apply_collective_grads()
                opt.minimize(loss)
                model.clear_gradients()
                losses.append(loss.numpy().item())
                done = step + 1
                if scenario == "random":
                    print(json.dumps({"step": step}), flush=True)
        finally:
            # what this trainer holds: the parameters after its last complete step
            result["steps"] = done
            result["params"] = {name: p.numpy().tolist()
                                for name, p in model.state_dict().items()}
            result["losses"] = losses


def main() -> None:
    scenario, out = sys.argv[1], sys.argv[2]
    rank = int(os.environ.get("PADDLE_TRAINER_ID", "0"))
    status: dict = {}
    try:
        train(scenario, status)
        status["ok"] = True
    except SystemExit:
        raise
    except Exception as e:  # noqa: BLE001 - reported to the test
        status["error"] = f"{type(e).__name__}: {e}"
    with open(os.path.join(out, f"status_t{rank}.json"), "w") as f:
        json.dump(status, f)


if __name__ == "__main__":
    main()
