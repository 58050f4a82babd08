"""One trainer of the imperative data-parallel test: trains the shared MLP on its half of
each batch through fluid.dygraph.DataParallel and writes its results as JSON.

Run by tests/dygraph/test_imperative_data_parallel.py under
``python -m parafluid.distributed.launch`` (argument: the output directory), or alone as the
one-process job.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

import parafluid as fluid
from parafluid import dygraph

RNG = np.random.RandomState(11)
W1 = RNG.uniform(-0.5, 0.5, (4, 6)).astype("float32")
W2 = RNG.uniform(-0.5, 0.5, (6, 1)).astype("float32")
XS = [RNG.randn(8, 4).astype("float32") for _ in range(4)]
YS = [RNG.randn(8, 1).astype("float32") for _ in range(4)]
LR = 0.1


class MLP(dygraph.Layer):
    """w1 made with the layer, w2 on the first call (``_build_once``): both must reach the
    other trainers from trainer 0."""

    def __init__(self, name_scope, init=True):
        super().__init__(name_scope)
        self._init = init
        self.w1 = self.create_parameter(self._attr(W1), W1.shape, "float32")
        self.w2 = None

    def _attr(self, value):
        if not self._init:  # each trainer draws its own values: the broadcast must fix them
            return None
        return fluid.ParamAttr(initializer=fluid.initializer.NumpyArrayInitializer(value))

    def _build_once(self, x, y):
        self.w2 = self.create_parameter(self._attr(W2), [W1.shape[1], 1], "float32")

    def forward(self, x, y):
        h = fluid.layers.tanh(fluid.layers.matmul(x, self.w1))
        return fluid.layers.mean(fluid.layers.square_error_cost(fluid.layers.matmul(h, self.w2),
                                                                y))


def train(out_dir: str) -> None:
    with dygraph.guard():
        strategy = dygraph.prepare_context()
        rank, nranks = strategy.local_rank, strategy.nranks
        fluid.default_main_program().random_seed = 100 + rank
        model = MLP("mlp", init=rank == 0)
        model = dygraph.DataParallel(model, strategy)
        opt = fluid.optimizer.SGD(learning_rate=LR)
        losses = []
        for xb, yb in zip(XS, YS):
            part = slice(rank * len(xb) // nranks, (rank + 1) * len(xb) // nranks)
            loss = model(dygraph.to_variable(xb[part]), dygraph.to_variable(yb[part]))
            loss = model.scale_loss(loss)
            loss.backward()
            model.apply_collective_grads()
            opt.minimize(loss)
            model.clear_gradients()
            losses.append(loss.numpy().item())
        params = {name: p.numpy().tolist() for name, p in model.state_dict().items()}
    with open(os.path.join(out_dir, f"trainer_{rank}.json"), "w") as f:
        json.dump({"rank": rank, "nranks": nranks, "losses": losses, "params": params}, f)


if __name__ == "__main__":
    train(sys.argv[1])
