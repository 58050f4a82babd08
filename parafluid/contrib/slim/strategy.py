"""The base of the compression strategies: callbacks the Compressor calls around the epochs
and batches, and a JSON state for checkpoints (never pickled)."""

from __future__ import annotations

from typing import Any

__all__ = ["Strategy"]


class Strategy:
    """A compression strategy active from ``start_epoch`` to ``end_epoch``.

    Subclasses override the callbacks they need; ``state()`` returns what a checkpoint
    must keep (plain JSON data) and ``restore(context, state)`` re-applies it to a fresh
    context before the checkpoint's variables are loaded.
    """

    def __init__(self, start_epoch: int = 0, end_epoch: int = 0) -> None:
        self.start_epoch = int(start_epoch)
        self.end_epoch = int(end_epoch)

    def on_compression_begin(self, context: Any) -> None:
        pass

    def on_epoch_begin(self, context: Any) -> None:
        pass

    def on_epoch_end(self, context: Any) -> None:
        pass

    def on_batch_begin(self, context: Any) -> None:
        pass

    def on_batch_end(self, context: Any) -> None:
        pass

    def on_compression_end(self, context: Any) -> None:
        pass

    def state(self) -> dict[str, Any]:
        return {}

    def restore(self, context: Any, state: dict[str, Any]) -> None:
        pass
