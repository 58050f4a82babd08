"""``sample_logits`` (Fluid 1.6): the logits of the true classes and of sampled negative
classes, for ``layers.sampled_softmax_with_cross_entropy``.

Each row of ``Samples`` (``[N, num_true + num_samples]``, int64) holds the row's true labels,
then ``num_samples`` distinct classes drawn once for the whole batch from the log-uniform
distribution over ``[0, K)``: ``P(k) = log((k + 2) / (k + 1)) / log(K + 1)``. Drawing
continues until ``num_samples`` distinct classes are found after ``T`` draws; each
probability is then adjusted for the distinct draw: ``p * num_samples`` when ``T`` is
``num_samples``, else ``1 - (1 - p) ** T``. With ``use_customized_samples`` the samples and
their probabilities come from the inputs instead. ``SampledLogits`` are the logits at the
samples minus ``log(Probabilities)``; with ``remove_accidental_hits`` a sampled class that
is one of the row's true labels gets ``1e20`` subtracted. ``SampledLabels`` are the columns
of the true labels, ``0 .. num_true - 1``. A nonzero ``seed`` draws the same samples on
every run, as Fluid's sampler reseeded per run; seed 0 draws fresh ones. The gradient adds
``SampledLogits@GRAD`` back into the logits at the samples.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .registry import Meta, register_op

__all__: list[str] = []

_HIT_PENALTY = 1e20


def _shape(ins: dict, attrs: dict) -> dict:
    logits, labels = ins["Logits"], ins["Labels"]
    if len(logits.shape) != 2 or len(labels.shape) != 2:
        raise ValueError(f"sample_logits: Logits [N, K] and Labels [N, num_true] must be "
                         f"2-D, got {list(logits.shape)} and {list(labels.shape)}")
    if labels.dtype != "int64":
        raise TypeError(f"sample_logits: Labels must be int64, got {labels.dtype}")
    n, k = logits.shape
    width = labels.shape[1] + attrs["num_samples"] if labels.shape[1] != -1 else -1
    if attrs["use_customized_samples"]:
        for slot in ("CustomizedSamples", "CustomizedProbabilities"):
            if ins.get(slot) is None:
                raise ValueError(f"sample_logits: use_customized_samples needs input {slot}")
    elif k != -1 and attrs["num_samples"] > k:
        raise ValueError(f"sample_logits: num_samples ({attrs['num_samples']}) must not "
                         f"exceed the number of classes ({k}) for distinct samples")
    return {"Samples": Meta((n, width), "int64"), "Probabilities": Meta((n, width), logits.dtype),
            "SampledLogits": Meta((n, width), logits.dtype),
            "SampledLabels": Meta(labels.shape, "int64")}


def _log_uniform_draws(num_classes: int, num_samples: int, gen: Any,
                       device: Any) -> tuple[list[int], int]:
    """``num_samples`` distinct classes and the number of draws it took."""
    log_range = math.log(num_classes + 1)
    found: dict[int, None] = {}  # insertion-ordered set
    tries = 0
    while len(found) < num_samples:
        u = torch.rand(2 * num_samples, generator=gen, dtype=torch.float64,
                       device=gen.device if gen is not None else device)
        for v in (torch.exp(u * log_range).long() - 1).remainder(num_classes).tolist():
            tries += 1
            found[v] = None
            if len(found) == num_samples:
                break
    return list(found), tries


def _sample_logits(ins: dict, attrs: dict, ctx: Any) -> dict:
    logits, labels = ins["Logits"], ins["Labels"]
    n, k = logits.shape
    num_true, num_samples = labels.shape[1], attrs["num_samples"]
    if attrs["use_customized_samples"]:
        samples = ins["CustomizedSamples"].long()
        probs = ins["CustomizedProbabilities"].to(logits.dtype)
    else:
        bad = labels[(labels < 0) | (labels >= k)]
        if bad.numel():
            raise ValueError(f"sample_logits: label {int(bad[0])} is outside [0, {k})")
        gen = ctx.generator(attrs["seed"])
        if gen is not None:
            gen.manual_seed(int(attrs["seed"]))
        drawn, tries = _log_uniform_draws(k, num_samples, gen, logits.device)
        neg = torch.tensor(drawn, dtype=torch.int64, device=logits.device)
        samples = torch.cat([labels, neg.expand(n, num_samples)], dim=1)
        p = (torch.log((samples + 2.0) / (samples + 1.0)) / math.log(k + 1)).to(logits.dtype)
        probs = p * num_samples if tries == num_samples else -torch.expm1(
            tries * torch.log1p(-p))
    if samples.shape != (n, num_true + num_samples) or probs.shape != samples.shape:
        raise ValueError(f"sample_logits: CustomizedSamples and CustomizedProbabilities must "
                         f"have shape [{n}, {num_true + num_samples}], got "
                         f"{list(samples.shape)} and {list(probs.shape)}")
    picked = logits.gather(1, samples)
    if attrs["remove_accidental_hits"]:
        hits = (samples[:, num_true:, None] == labels[:, None, :]).any(-1)
        picked = torch.cat([picked[:, :num_true],
                            picked[:, num_true:] - hits.to(picked.dtype) * _HIT_PENALTY], 1)
    true_cols = torch.arange(num_true, dtype=torch.int64, device=logits.device)
    return {"Samples": samples, "Probabilities": probs,
            "SampledLogits": picked - torch.log(probs),
            "SampledLabels": true_cols.expand(n, num_true).clone()}


def _sample_logits_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    grad = torch.zeros_like(ins["Logits"])
    return {"Logits@GRAD": grad.scatter_add_(1, ins["Samples"], ins["SampledLogits@GRAD"])}


register_op("sample_logits",
            inputs=("Logits", "Labels", "CustomizedSamples?", "CustomizedProbabilities?"),
            outputs=("Samples", "Probabilities", "SampledLogits", "SampledLabels"),
            attrs={"use_customized_samples": False, "uniq": True,
                   "remove_accidental_hits": True, "num_samples": 1, "seed": 0},
            infer_shape=_shape, kernel=_sample_logits, grad_kernel=_sample_logits_grad,
            grad_uses=("Logits", "Samples"),
            no_grad_inputs=("Labels", "CustomizedSamples", "CustomizedProbabilities"),
            no_compile="draws samples on the host: a data-dependent loop over distinct draws")
