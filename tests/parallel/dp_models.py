"""Small models and data for the data-parallel tests (each builds fresh programs)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import parafluid as fluid

ProgramBuilder = Callable[[], tuple[Any, Any, Any]]


def mlp(loss: str = "mean", optimizer: Callable[[], Any] | None = None,
        act: str = "relu", hidden: int = 16, lr: float = 0.1) -> ProgramBuilder:
    """x[8] -> fc(hidden, act) -> fc(hidden, act) -> fc(1); squared error, mean or sum."""
    def build() -> tuple[Any, Any, Any]:
        main, startup = fluid.Program(), fluid.Program()
        main.random_seed = startup.random_seed = 7
        with fluid.program_guard(main, startup):
            x = fluid.layers.data(name="x", shape=[8], dtype="float32")
            y = fluid.layers.data(name="y", shape=[1], dtype="float32")
            h = fluid.layers.fc(input=x, size=hidden, act=act)
            h = fluid.layers.fc(input=h, size=hidden, act=act)
            pred = fluid.layers.fc(input=h, size=1)
            diff = fluid.layers.elementwise_sub(pred, y)
            sq = fluid.layers.elementwise_mul(diff, diff)
            cost = fluid.layers.mean(sq) if loss == "mean" else fluid.layers.reduce_sum(sq)
            opt = optimizer() if optimizer is not None else fluid.optimizer.SGD(learning_rate=lr)
            opt.minimize(cost)
        return main, startup, cost
    return build


def mlp_feeds(steps: int = 5, batch: int = 8, seed: int = 0) -> list[dict[str, np.ndarray]]:
    rng = np.random.RandomState(seed)
    return [{"x": rng.uniform(-1, 1, (batch, 8)).astype("float32"),
             "y": rng.uniform(-1, 1, (batch, 1)).astype("float32")} for _ in range(steps)]


def cnn(sync_bn: bool = True, lr: float = 0.05) -> ProgramBuilder:
    """conv -> batch_norm(relu) -> pool -> fc -> softmax cross entropy (mean)."""
    def build() -> tuple[Any, Any, Any]:
        main, startup = fluid.Program(), fluid.Program()
        main.random_seed = startup.random_seed = 3
        with fluid.program_guard(main, startup):
            img = fluid.layers.data(name="img", shape=[2, 6, 6], dtype="float32")
            label = fluid.layers.data(name="label", shape=[1], dtype="int64")
            c = fluid.layers.conv2d(img, num_filters=4, filter_size=3, padding=1)
            c = fluid.layers.batch_norm(c, act="relu")
            c = fluid.layers.pool2d(c, pool_size=2, pool_type="max", pool_stride=2)
            logits = fluid.layers.fc(input=c, size=3)
            cost = fluid.layers.mean(
                fluid.layers.softmax_with_cross_entropy(logits=logits, label=label))
            fluid.optimizer.SGD(learning_rate=lr).minimize(cost)
        return main, startup, cost
    return build


def cnn_feeds(steps: int = 5, batch: int = 8, seed: int = 1) -> list[dict[str, np.ndarray]]:
    rng = np.random.RandomState(seed)
    return [{"img": rng.uniform(-1, 1, (batch, 2, 6, 6)).astype("float32"),
             "label": rng.randint(0, 3, (batch, 1)).astype("int64")} for _ in range(steps)]


def embedding_model(is_sparse: bool = True, lr: float = 0.2,
                    optimizer: Callable[[], Any] | None = None) -> ProgramBuilder:
    """ids -> embedding(20 x 6, sparse grad) -> fc(1); squared error (mean)."""
    def build() -> tuple[Any, Any, Any]:
        main, startup = fluid.Program(), fluid.Program()
        main.random_seed = startup.random_seed = 5
        with fluid.program_guard(main, startup):
            ids = fluid.layers.data(name="ids", shape=[1], dtype="int64")
            y = fluid.layers.data(name="y", shape=[1], dtype="float32")
            emb = fluid.layers.embedding(ids, size=[20, 6], is_sparse=is_sparse)
            pred = fluid.layers.fc(input=emb, size=1)
            diff = fluid.layers.elementwise_sub(pred, y)
            cost = fluid.layers.mean(fluid.layers.elementwise_mul(diff, diff))
            opt = optimizer() if optimizer is not None else fluid.optimizer.SGD(learning_rate=lr)
            opt.minimize(cost)
        return main, startup, cost
    return build


def embedding_feeds(steps: int = 5, batch: int = 8, seed: int = 2) -> list[dict[str, np.ndarray]]:
    rng = np.random.RandomState(seed)
    # NOTE: few distinct ids, so that rows repeat within and across devices.
    return [{"ids": rng.randint(0, 7, (batch, 1)).astype("int64"),
             "y": rng.uniform(-1, 1, (batch, 1)).astype("float32")} for _ in range(steps)]


RS = fluid.BuildStrategy.ReduceStrategy


def strategy(reduce: RS = RS.AllReduce, fuse: bool = False,
             **fields: object) -> fluid.BuildStrategy:
    """A BuildStrategy: the reduce strategy, fused all-reduce or not, other fields."""
    bs = fluid.BuildStrategy()
    bs.reduce_strategy = reduce
    bs.fuse_all_reduce_ops = fuse
    for k, v in fields.items():
        setattr(bs, k, v)
    return bs


def threads(n: int) -> fluid.ExecutionStrategy:
    """An ExecutionStrategy of ``n`` scheduler threads."""
    es = fluid.ExecutionStrategy()
    es.num_threads = n
    return es
