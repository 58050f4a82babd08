"""More of Fluid 1.6's metric ops (no gradients):

- ``positive_negative_pair``: over the document pairs of each query (``QueryID``) whose
  labels differ, with weight ``(w_i + w_j) / 2``: ordered as the labels -> positive, else
  negative; equal scores count as neutral *and* negative (Fluid's kernel does both);
  optional ``Accumulate*Pair`` inputs are added; the score is column ``column`` of Score;
- ``precision_recall``: per class TP / FP / TN / FN of the batch (optionally weighted),
  ``BatchMetrics`` and, with the earlier ``StatesInfo`` added, ``AccumMetrics``: macro
  precision, recall, F1 then micro precision, recall, F1 (a class with no counts has
  precision and recall 1).
"""

from __future__ import annotations

from typing import Any

import torch

from .registry import Meta, register_op

__all__: list[str] = []


def _pnp_shape(ins: dict, attrs: dict) -> dict:
    score = ins["Score"]
    if len(score.shape) != 2:
        raise ValueError(f"positive_negative_pair: Score must be 2-D, got {list(score.shape)}")
    one = Meta((1,), score.dtype)
    return {"PositivePair": one, "NegativePair": one, "NeutralPair": one}


def _pnp(ins: dict, attrs: dict, ctx: Any) -> dict:
    score, label, query = ins["Score"], ins["Label"], ins["QueryID"]
    col = int(attrs["column"])
    col = col + score.shape[1] if col < 0 else col
    s = score[:, col].double().tolist()
    lab = label.reshape(-1).double().tolist()
    q = query.reshape(-1).tolist()
    w = ins["Weight"].reshape(-1).double().tolist() if ins.get("Weight") is not None \
        else [1.0] * len(s)
    acc = [ins.get(k) for k in ("AccumulatePositivePair", "AccumulateNegativePair",
                                "AccumulateNeutralPair")]
    pos, neg, neu = (float(t.reshape(-1)[0]) for t in acc) if all(
        t is not None for t in acc) else (0.0, 0.0, 0.0)
    groups: dict[int, list[int]] = {}
    for i, key in enumerate(q):
        groups.setdefault(int(key), []).append(i)
    for rows in groups.values():
        for a, i in enumerate(rows):
            for j in rows[a + 1:]:
                if lab[i] == lab[j]:
                    continue
                wt = (w[i] + w[j]) * 0.5
                if s[i] == s[j]:
                    neu += wt
                if (s[i] - s[j]) * (lab[i] - lab[j]) > 0:
                    pos += wt
                else:
                    neg += wt
    def one(v: float) -> torch.Tensor:
        return torch.tensor([v], dtype=score.dtype, device=score.device)
    return {"PositivePair": one(pos), "NegativePair": one(neg), "NeutralPair": one(neu)}


register_op("positive_negative_pair",
            inputs=("Score", "Label", "QueryID", "AccumulatePositivePair?",
                    "AccumulateNegativePair?", "AccumulateNeutralPair?", "Weight?"),
            outputs=("PositivePair", "NegativePair", "NeutralPair"), attrs={"column": 0},
            infer_shape=_pnp_shape, kernel=_pnp)


def _pr_metrics(states: torch.Tensor) -> torch.Tensor:
    """Macro P, R, F1 then micro P, R, F1 of ``[C, 4]`` (TP, FP, TN, FN) counts."""
    s = states.double()
    tp, fp, fn = s[:, 0], s[:, 1], s[:, 3]

    def ratio(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.where((a > 0) | (b > 0), a / (a + b).clamp(min=1e-300),
                           torch.ones_like(a))

    def f1(p: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return torch.where((p > 0) | (r > 0), 2 * p * r / (p + r).clamp(min=1e-300),
                           torch.zeros_like(p))
    macro_p, macro_r = ratio(tp, fp).mean(), ratio(tp, fn).mean()
    micro_p, micro_r = ratio(tp.sum(), fp.sum()), ratio(tp.sum(), fn.sum())
    return torch.stack([macro_p, macro_r, f1(macro_p, macro_r), micro_p, micro_r,
                        f1(micro_p, micro_r)])


def _precision_recall(ins: dict, attrs: dict, ctx: Any) -> dict:
    n = int(attrs["class_number"])
    ids, labels = ins["Indices"].reshape(-1).long(), ins["Labels"].reshape(-1).long()
    dtype = ins["MaxProbs"].dtype
    for name, t in (("Indices", ids), ("Labels", labels)):
        if t.numel() and (int(t.min()) < 0 or int(t.max()) >= n):
            raise ValueError(f"precision_recall: {name} holds a class outside [0, {n})")
    w = ins["Weights"].reshape(-1).to(dtype) if ins.get("Weights") is not None else \
        torch.ones(ids.numel(), dtype=dtype, device=ids.device)
    states = torch.zeros(n, 4, dtype=dtype, device=ids.device)
    hit = ids == labels
    states[:, 0].index_add_(0, ids[hit], w[hit])
    states[:, 1].index_add_(0, ids[~hit], w[~hit])
    states[:, 3].index_add_(0, labels[~hit], w[~hit])
    # TN: every class gains each sample's weight but its predicted and true classes
    states[:, 2] += w.sum()
    states[:, 2].index_add_(0, ids, -w)
    states[:, 2].index_add_(0, labels[~hit], -w[~hit])
    batch = _pr_metrics(states)
    if ins.get("StatesInfo") is not None:
        states = states + ins["StatesInfo"].to(dtype)
    return {"BatchMetrics": batch, "AccumMetrics": _pr_metrics(states),
            "AccumStatesInfo": states}


register_op("precision_recall",
            inputs=("MaxProbs", "Indices", "Labels", "Weights?", "StatesInfo?"),
            outputs=("BatchMetrics", "AccumMetrics", "AccumStatesInfo"),
            attrs={"class_number": 1},
            infer_shape=lambda ins, attrs: {
                "BatchMetrics": Meta((6,), "float64"), "AccumMetrics": Meta((6,), "float64"),
                "AccumStatesInfo": Meta((int(attrs["class_number"]), 4),
                                        ins["MaxProbs"].dtype)},
            kernel=_precision_recall)
