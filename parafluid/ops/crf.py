"""Sequence tagging over LoD inputs: ``linear_chain_crf`` (the negative log-likelihood of the
gold tag sequence), ``crf_decoding`` (Viterbi) and ``chunk_eval`` (chunk precision / recall).

``Emission [steps, D]`` holds each step's tag scores, one sequence per LoD entry;
``Transition [D + 2, D]`` is Fluid's layout: row 0 the start scores, row 1 the end scores,
rows 2.. the tag-to-tag scores ``w[i, j]`` (from ``i`` to ``j``). The score of tags ``y`` is
``start[y0] + Σ emission[t, y_t] + Σ w[y_{t-1}, y_t] + end[y_last]``; the loss is
``log Z - score(gold)``, computed in log space (forward algorithm), and its gradient is the
marginals minus the gold indicators (forward-backward).
"""

from __future__ import annotations

from typing import Any

import torch

from ..lod import require_lod
from .registry import Meta, register_op

__all__: list[str] = []


def _crf_shape(ins: dict, attrs: dict) -> dict:
    x, w, label = ins["Emission"], ins["Transition"], ins["Label"]
    d = x.shape[-1]
    padded = ins.get("Length") is not None
    rank = 3 if padded else 2
    if len(x.shape) != rank or tuple(w.shape) != (d + 2, d):
        want = "[N, S, D] (padded, with Length)" if padded else "[steps, D] (LoD)"
        raise ValueError(f"linear_chain_crf: Emission must be {want} and Transition "
                         f"[D + 2, D]; got {list(x.shape)} and {list(w.shape)}")
    if label.dtype not in ("int64", "int32"):
        raise TypeError(f"linear_chain_crf: Label must be int64 tags, got {label.dtype}")
    rows = x.shape[0] if padded else -1
    return {"LogLikelihood": Meta((rows, 1), x.dtype), "Alpha": Meta(x.shape, x.dtype),
            "EmissionExps": Meta(x.shape, x.dtype), "TransitionExps": Meta(w.shape, w.dtype)}


def _spans(op: str, ins: dict, slot: str = "Emission") -> tuple[torch.Tensor, torch.Tensor,
                                                                list[tuple[int, int]]]:
    """Emission as rows ``[rows, D]``, the tags ``[rows]`` (or None) and each sequence's
    ``(start, end)`` rows: from the LoD, or from ``Length`` over ``[N, S, D]`` padding."""
    x, label, length = ins[slot], ins.get("Label"), ins.get("Length")
    if length is not None:
        n, steps = x.shape[0], x.shape[1]
        lengths = [int(v) for v in length.reshape(-1).tolist()]
        if len(lengths) != n or any(not 0 <= v <= steps for v in lengths):
            raise ValueError(f"{op}: Length must hold one length in [0, {steps}] per sequence "
                             f"of {slot} {list(x.shape)}, got {lengths}")
        if label is not None and label.numel() != n * steps:
            raise ValueError(f"{op}: Label must be [N, S] or [N, S, 1] as {slot} "
                             f"{list(x.shape[:2])}, got {list(label.shape)}")
        spans = [(i * steps, i * steps + v) for i, v in enumerate(lengths)]
        return x.reshape(n * steps, -1), label, spans
    offsets = require_lod(op, slot, x)
    if label is not None and label.shape[0] != x.shape[0]:
        raise ValueError(f"{op}: Label has {label.shape[0]} rows, {slot} {x.shape[0]}")
    return x, label, [(a, b) for a, b in zip(offsets, offsets[1:])]


def _forward_backward(x: torch.Tensor, w: torch.Tensor) -> tuple:
    """Log-space alphas and betas of one sequence, and log Z."""
    start, end, trans = w[0], w[1], w[2:]
    n = x.shape[0]
    alpha = [start + x[0]]
    for t in range(1, n):
        alpha.append(torch.logsumexp(alpha[-1].unsqueeze(1) + trans, 0) + x[t])
    beta = [end]
    for t in range(n - 1, 0, -1):
        beta.append(torch.logsumexp(trans + (x[t] + beta[-1]).unsqueeze(0), 1))
    beta.reverse()
    return torch.stack(alpha), torch.stack(beta), torch.logsumexp(alpha[-1] + end, 0)


def _gold_score(x: torch.Tensor, w: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    steps = torch.arange(x.shape[0], device=x.device)
    score = w[0, y[0]] + x[steps, y].sum() + w[1, y[-1]]
    if x.shape[0] > 1:
        score = score + w[2:][y[:-1], y[1:]].sum()
    return score


def _check_tags(label: torch.Tensor, d: int) -> torch.Tensor:
    y = label.reshape(-1).long()
    if y.numel() and (int(y.min()) < 0 or int(y.max()) >= d):
        raise ValueError(f"linear_chain_crf: a tag is out of range for {d} tags")
    return y


def _crf(ins: dict, attrs: dict, ctx: Any) -> dict:
    emission, w = ins["Emission"], ins["Transition"]
    x, label, spans = _spans("linear_chain_crf", ins)
    y = _check_tags(label, x.shape[1])
    # Fluid's intermediates: exp(x - row max) of every row (padding rows included), exp(w),
    # and the forward vectors normalized to sum 1 at each step (zero on padding rows)
    exps = torch.exp(x - x.max(1, keepdim=True).values) if x.shape[0] else x.clone()
    alpha = torch.zeros_like(x)
    out = []
    for a, b in spans:
        if a == b:
            out.append(x.new_zeros(()))
            continue
        log_alpha, _, log_z = _forward_backward(x[a:b], w)
        alpha[a:b] = torch.softmax(log_alpha, 1)
        out.append(log_z - _gold_score(x[a:b], w, y[a:b]))
    return {"LogLikelihood": torch.stack(out).reshape(-1, 1) if out else x.new_zeros((0, 1)),
            "Alpha": alpha.reshape(emission.shape), "EmissionExps": exps.reshape(emission.shape),
            "TransitionExps": torch.exp(w)}


def _crf_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    emission, w, dloss = ins["Emission"], ins["Transition"], ins["LogLikelihood@GRAD"]
    x, label, spans = _spans("linear_chain_crf", ins)
    y = _check_tags(label, x.shape[1])
    dx, dw = torch.zeros_like(x), torch.zeros_like(w)
    for s, (a, b) in enumerate(spans):
        if a == b:
            continue
        xs, ys, g = x[a:b], y[a:b], dloss[s, 0]
        alpha, beta, log_z = _forward_backward(xs, w)
        unary = torch.exp(alpha + beta - log_z)  # P(y_t = j)
        gold = torch.zeros_like(xs)
        gold[torch.arange(b - a, device=x.device), ys] = 1.0
        dx[a:b] = g * (unary - gold)
        dw[0] += g * (unary[0] - gold[0])
        dw[1] += g * (unary[-1] - gold[-1])
        if b - a > 1:
            pair = torch.exp(alpha[:-1].unsqueeze(2) + w[2:].unsqueeze(0)
                             + (xs[1:] + beta[1:]).unsqueeze(1) - log_z)  # P(y_t-1=i, y_t=j)
            counts = torch.zeros_like(w[2:]).index_put_((ys[:-1], ys[1:]),
                                                        torch.ones_like(ys[1:], dtype=x.dtype),
                                                        accumulate=True)
            dw[2:] += g * (pair.sum(0) - counts)
    out = {}
    if "Emission" in ctx.need:
        out["Emission@GRAD"] = dx.reshape(emission.shape)
    if "Transition" in ctx.need:
        out["Transition@GRAD"] = dw
    return out


register_op("linear_chain_crf", inputs=("Emission", "Transition", "Label", "Length?"),
            outputs=("Alpha?", "EmissionExps?", "TransitionExps?", "LogLikelihood"),
            infer_shape=_crf_shape, kernel=_crf,
            grad_kernel=_crf_grad, grad_uses=("Emission", "Transition", "Label", "Length"),
            no_grad_inputs=("Label", "Length"))

# ----------------------------------------------------------------------------- crf_decoding


def _decode_shape(ins: dict, attrs: dict) -> dict:
    x, w = ins["Emission"], ins["Transition"]
    d = x.shape[-1]
    padded = ins.get("Length") is not None
    if len(x.shape) != (3 if padded else 2) or tuple(w.shape) != (d + 2, d):
        want = "[N, S, D] (padded, with Length)" if padded else "[steps, D] (LoD)"
        raise ValueError(f"crf_decoding: Emission must be {want} and Transition "
                         f"[D + 2, D]; got {list(x.shape)} and {list(w.shape)}")
    shape = (x.shape[0], x.shape[1]) if padded else (x.shape[0], 1)
    return {"ViterbiPath": Meta(shape, "int64")}


def _viterbi(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    trans = w[2:]
    score = w[0] + x[0]
    back = []
    for t in range(1, x.shape[0]):
        cand = score.unsqueeze(1) + trans  # [from, to]
        score, arg = cand.max(0)
        score = score + x[t]
        back.append(arg)
    best = int((score + w[1]).argmax())
    path = [best]
    for arg in reversed(back):
        best = int(arg[best])
        path.append(best)
    return torch.tensor(path[::-1], dtype=torch.long, device=x.device)


def _decode(ins: dict, attrs: dict, ctx: Any) -> dict:
    emission, w = ins["Emission"], ins["Transition"]
    x, label, spans = _spans("crf_decoding", ins)
    path = torch.zeros(x.shape[0], dtype=torch.long, device=x.device)
    inside = torch.zeros(x.shape[0], dtype=torch.bool, device=x.device)
    for a, b in spans:
        if b > a:
            path[a:b] = _viterbi(x[a:b], w)
            inside[a:b] = True
    if label is not None:  # Fluid: with a label, 1 where the decoded tag is right
        path = ((path == label.reshape(-1).long()) & inside).long()
    if ins.get("Length") is not None:  # padded: [N, S], zeros past each length
        return {"ViterbiPath": path.reshape(emission.shape[0], emission.shape[1])}
    return {"ViterbiPath": path.reshape(-1, 1)}


# NOTE: the path keeps the sequences of the emissions (Fluid shares Emission's LoD), so
# chunk_eval and the sequence layers read it as it comes
register_op("crf_decoding", inputs=("Emission", "Transition", "Label?", "Length?"),
            outputs=("ViterbiPath",), infer_shape=_decode_shape, kernel=_decode,
            share_lod=("Emission", ("ViterbiPath",)))

# ----------------------------------------------------------------------------- chunk_eval

# scheme: (tag kinds per chunk type, begin, inside, end, single); -1 = the scheme has none
_SCHEMES = {"IOB": (2, 0, 1, -1, -1), "IOE": (2, -1, 0, 1, -1), "IOBES": (4, 0, 1, 2, 3),
            "plain": (1, -1, -1, -1, -1)}


def _chunk_end(prev_tag: int, prev_type: int, tag: int, type_: int, other: int,
               s: tuple) -> bool:
    _, begin, inside, end, single = s
    if prev_type == other:
        return False
    if type_ == other or type_ != prev_type:
        return True
    if prev_tag in (begin, inside):
        return tag in (begin, single)
    return prev_tag in (end, single)


def _chunk_begin(prev_tag: int, prev_type: int, tag: int, type_: int, other: int,
                 s: tuple) -> bool:
    _, begin, inside, end, single = s
    if prev_type == other:
        return type_ != other
    if type_ == other:
        return False
    if type_ != prev_type or tag in (begin, single):
        return True
    if tag in (inside, end):
        return prev_tag in (end, single)
    return False


def chunks(tags: list[int], num_chunk_types: int, scheme: str) -> set[tuple[int, int, int]]:
    """The (start, end, type) chunks of one tag sequence, with Fluid's rules per scheme."""
    s = _SCHEMES[scheme]
    kinds, other = s[0], num_chunk_types
    found, start, in_chunk = set(), 0, False
    tag, type_ = -1, other
    for i, label in enumerate(tags):
        prev_tag, prev_type = tag, type_
        tag, type_ = label % kinds, min(label // kinds, other)
        if in_chunk and _chunk_end(prev_tag, prev_type, tag, type_, other, s):
            found.add((start, i - 1, prev_type))
            in_chunk = False
        if _chunk_begin(prev_tag, prev_type, tag, type_, other, s):
            start, in_chunk = i, True
    if in_chunk:
        found.add((start, len(tags) - 1, type_))
    return found


def _chunk_eval_shape(ins: dict, attrs: dict) -> dict:
    if attrs["chunk_scheme"] not in _SCHEMES:
        raise ValueError(f"chunk_eval: chunk_scheme must be one of {sorted(_SCHEMES)}, got "
                         f"{attrs['chunk_scheme']!r}")
    x, seq_len = ins["Inference"], ins.get("SeqLength")
    if seq_len is not None and not (len(x.shape) == 2 or (len(x.shape) == 3 and
                                                           x.shape[2] == 1)):
        raise ValueError(f"chunk_eval: with SeqLength, Inference must be [batch, bucket] or "
                         f"[batch, bucket, 1], got {list(x.shape)}")
    rate, count = Meta((1,), "float32"), Meta((1,), "int64")
    return {"Precision": rate, "Recall": rate, "F1-Score": rate, "NumInferChunks": count,
            "NumLabelChunks": count, "NumCorrectChunks": count}


def _chunk_spans(pred: torch.Tensor, seq_length: torch.Tensor | None) -> list[tuple[int, int]]:
    """Each sequence's (start, end) among the flattened tags: from the LoD, or from
    ``SeqLength`` over ``[N, S]`` (or ``[N, S, 1]``) padding."""
    if seq_length is None:
        offsets = require_lod("chunk_eval", "Inference", pred)
        return list(zip(offsets, offsets[1:]))
    if pred.dim() not in (2, 3) or (pred.dim() == 3 and pred.shape[2] != 1):
        raise ValueError(f"chunk_eval: with SeqLength, Inference must be [N, S] or "
                         f"[N, S, 1], got {list(pred.shape)}")
    steps = pred.shape[1]
    lengths = [int(v) for v in seq_length.reshape(-1).tolist()]
    if len(lengths) != pred.shape[0] or any(not 0 <= v <= steps for v in lengths):
        raise ValueError(f"chunk_eval: SeqLength must hold one length in [0, {steps}] per row "
                         f"of Inference {list(pred.shape)}, got {lengths}")
    return [(i * steps, i * steps + v) for i, v in enumerate(lengths)]


def _chunk_eval(ins: dict, attrs: dict, ctx: Any) -> dict:
    pred, label = ins["Inference"], ins["Label"]
    spans = _chunk_spans(pred, ins.get("SeqLength"))
    p, y = pred.reshape(-1).tolist(), label.reshape(-1).tolist()
    excluded = set(attrs["excluded_chunk_types"])
    n_types, scheme = int(attrs["num_chunk_types"]), attrs["chunk_scheme"]
    n_infer = n_label = n_correct = 0
    for a, b in spans:
        got = {c for c in chunks(p[a:b], n_types, scheme) if c[2] not in excluded}
        want = {c for c in chunks(y[a:b], n_types, scheme) if c[2] not in excluded}
        n_infer, n_label, n_correct = n_infer + len(got), n_label + len(want), \
            n_correct + len(got & want)
    precision = n_correct / n_infer if n_infer else 0.0
    recall = n_correct / n_label if n_label else 0.0
    f1 = 2 * precision * recall / (precision + recall) if n_correct else 0.0

    def rate(v: float) -> torch.Tensor:
        return torch.tensor([v], dtype=torch.float32, device=pred.device)

    def count(v: int) -> torch.Tensor:
        return torch.tensor([v], dtype=torch.int64, device=pred.device)

    return {"Precision": rate(precision), "Recall": rate(recall), "F1-Score": rate(f1),
            "NumInferChunks": count(n_infer), "NumLabelChunks": count(n_label),
            "NumCorrectChunks": count(n_correct)}


register_op("chunk_eval", inputs=("Inference", "Label", "SeqLength?"),
            outputs=("Precision", "Recall", "F1-Score", "NumInferChunks", "NumLabelChunks",
                     "NumCorrectChunks"),
            attrs={"num_chunk_types": 1, "chunk_scheme": "IOB", "excluded_chunk_types": []},
            infer_shape=_chunk_eval_shape, kernel=_chunk_eval)
