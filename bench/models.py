"""The Fluid programs the benchmarks train, defined once.

``classifier("mlp")`` is the digits MLP 784-512-512-10, ``classifier("cnn")`` the small
digits CNN (two conv + max-pool blocks), each ending in a 10-way softmax cross entropy
averaged over the batch and minimized by ``optimizer`` (SGD 0.01 unless given). Run a bench
as a script (``python bench/<name>.py``): this folder is then on ``sys.path``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def classifier(body: str = "mlp", hidden: Sequence[int] = (512, 512), optimizer: Any = None,
               seed: int = 1) -> tuple[Any, Any, Any]:
    """(main, startup, loss) of a digits classifier; ``hidden``: the MLP's layer widths."""
    import parafluid as fluid  # (a bench may set flags before parafluid is imported)

    if body not in ("mlp", "cnn"):
        raise ValueError(f"classifier: body must be 'mlp' or 'cnn', got {body!r}")
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = seed
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        label = fluid.layers.data(name="label", shape=[1], dtype="int64")
        if body == "mlp":
            h = fluid.layers.data(name="x", shape=[784], dtype="float32")
            for size in hidden:
                h = fluid.layers.fc(input=h, size=size, act="relu")
        else:
            h = fluid.layers.data(name="x", shape=[1, 28, 28], dtype="float32")
            for filters in (16, 32):
                h = fluid.layers.conv2d(h, num_filters=filters, filter_size=3, padding=1,
                                        act="relu")
                h = fluid.layers.pool2d(h, pool_size=2, pool_type="max", pool_stride=2)
        logits = fluid.layers.fc(input=h, size=10)
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, label))
        (optimizer or fluid.optimizer.SGD(learning_rate=0.01)).minimize(loss)
    return main, startup, loss
