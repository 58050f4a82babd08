"""``fluid.contrib.distributed_batch_reader``: each trainer's share of a batch reader."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["distributed_batch_reader"]


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"distributed_batch_reader: {name} must be an integer, got "
                         f"{raw!r}") from None


def distributed_batch_reader(batch_reader: Callable[[], Any]) -> Callable[[], Iterator[Any]]:
    """The share of ``batch_reader``'s batches of trainer ``PADDLE_TRAINER_ID`` of
    ``PADDLE_TRAINERS_NUM`` (read from the environment when the reader is created).

    The batches go round the trainers in turn: of every ``PADDLE_TRAINERS_NUM``
    consecutive batches, trainer ``i`` gets the ``i``-th; a last incomplete round is
    dropped, so that every trainer runs the same number of steps. With one trainer it is
    the reader itself.

    Example::

        reader = fluid.contrib.distributed_batch_reader(
            paddle.batch(paddle.dataset.mnist.train(), batch_size=32))
        for batch in reader():
            ...
    """
    if not callable(batch_reader):
        raise TypeError(f"distributed_batch_reader: batch_reader must be a callable that "
                        f"returns an iterator of batches, got {type(batch_reader).__name__}")
    trainers = _env_int("PADDLE_TRAINERS_NUM", 1)
    trainer_id = _env_int("PADDLE_TRAINER_ID", 0)
    if trainers < 1 or not 0 <= trainer_id < trainers:
        raise ValueError(f"distributed_batch_reader: PADDLE_TRAINER_ID={trainer_id} must be in "
                         f"[0, PADDLE_TRAINERS_NUM={trainers})")

    def reader() -> Iterator[Any]:
        if trainers == 1:
            yield from batch_reader()
            return
        mine = None
        for i, batch in enumerate(batch_reader()):
            if i % trainers == trainer_id:
                mine = batch
            if i % trainers == trainers - 1:
                yield mine
                mine = None

    return reader
