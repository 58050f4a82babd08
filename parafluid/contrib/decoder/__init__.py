"""``fluid.contrib.decoder``: RNN decoders for training and for beam-search inference."""

from __future__ import annotations

from .beam_search_decoder import BeamSearchDecoder, InitState, StateCell, TrainingDecoder

__all__ = ["InitState", "StateCell", "TrainingDecoder", "BeamSearchDecoder"]
