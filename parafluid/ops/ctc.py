"""``warpctc``: the CTC loss of Fluid 1.6 (its warp-ctc op), over LoD or padded sequences;
``ctc_align``, the decoding step after it (merge repeats, drop blanks; no gradient).

The input is *unnormalized* logits; the op applies log-softmax over the classes itself, as
warp-ctc does. Per sequence, ``Loss = -log p(label | logits)``, summed over every alignment
of the label (with ``blank`` between and around its tokens) to the input steps. Two layouts,
as in Fluid:

- LoD: ``Logits [steps, C]`` and int ``Label [label steps, 1]``, both carrying one sequence
  per LoD entry;
- padded: ``Logits [Tmax, N, C]`` (time-major), plus int64 ``LogitsLength [N]`` and
  ``LabelLength [N]``; ``Label`` is still packed as in the LoD form (the N label sequences
  one after another, ``[sum(LabelLength), 1]``): Fluid 1.6's kernel reads it at the offsets
  the label lengths add up to.

``Loss`` is ``[N, 1]``. As Fluid's op, the forward also writes ``WarpCTCGrad``, the gradient
of each sequence's loss w.r.t. its logits, padded and time-major ``[Tmax, N, C]``; the
gradient op only scales it by ``Loss@GRAD`` (and by ``1 / steps`` with ``norm_by_times``,
which like Fluid's scales the gradient only, not the loss) and unpads it.

The kernels are PyTorch's CTC kernels called directly (``aten::_ctc_loss`` and
``aten::_ctc_loss_backward``: alpha-beta recursions, no autograd).
"""

from __future__ import annotations

from typing import Any

import torch

from ..lod import attach_lod, get_lod, require_lod
from .registry import Meta, register_op

__all__: list[str] = []

_INT = ("int32", "int64")


def _ctc_shape(ins: dict, attrs: dict) -> dict:
    logits, label = ins["Logits"], ins["Label"]
    padded = ins.get("LogitsLength") is not None
    if (ins.get("LabelLength") is not None) != padded:
        raise ValueError("warpctc: give both LogitsLength and LabelLength (padded input) or "
                         "neither (LoD input)")
    if label.dtype not in _INT:
        raise TypeError(f"warpctc: Label must be int32 or int64 tokens, got {label.dtype}")
    classes = logits.shape[-1]
    blank = attrs.get("blank", 0)
    if classes > 0 and not 0 <= blank < classes:
        raise ValueError(f"warpctc: blank must be in [0, {classes}) (the classes of Logits, "
                         f"blank included), got {blank}")
    if padded:
        # NOTE: Fluid's shape rule reads the classes at dim 2 and checks no more; its kernel
        # takes dims 0-2 as [Tmax, N, C] (ours refuses another rank when it runs)
        if len(logits.shape) < 3:
            raise ValueError(f"warpctc: padded input needs Logits [Tmax, N, C] (time-major), "
                             f"got {list(logits.shape)}")
        return {"Loss": Meta((logits.shape[1], 1), logits.dtype),
                "WarpCTCGrad": Meta(tuple(logits.shape), logits.dtype)}
    if len(logits.shape) != 2:
        raise ValueError(f"warpctc: LoD input needs Logits [steps, C] (one sequence per LoD "
                         f"entry), got {list(logits.shape)}; for [Tmax, N, C] give "
                         "input_length and label_length")
    return {"Loss": Meta((-1, 1), logits.dtype),
            "WarpCTCGrad": Meta((-1, -1, classes), logits.dtype)}


def _lengths(t: torch.Tensor, n: int, what: str) -> list[int]:
    lengths = [int(v) for v in t.reshape(-1).tolist()]
    if len(lengths) != n:
        raise ValueError(f"warpctc: {what} has {len(lengths)} entries for {n} sequences")
    if any(v < 0 for v in lengths):
        raise ValueError(f"warpctc: {what} holds a negative length: {lengths}")
    return lengths


def _padded_inputs(ins: dict) -> tuple[torch.Tensor, torch.Tensor, list[int], list[int]]:
    """Time-major logits, ``[N, Smax]`` targets and both lengths, from either layout."""
    logits, label = ins["Logits"], ins["Label"]
    flat = label.reshape(-1)
    if ins.get("LogitsLength") is not None:
        if logits.dim() != 3:
            raise ValueError(f"warpctc: padded Logits must be [Tmax, N, C] (time-major), got "
                             f"{list(logits.shape)}")
        n = logits.shape[1]
        t_len = _lengths(ins["LogitsLength"], n, "LogitsLength")
        s_len = _lengths(ins["LabelLength"], n, "LabelLength")
        if max(t_len, default=0) > logits.shape[0]:
            raise ValueError(f"warpctc: a LogitsLength exceeds the {logits.shape[0]} padded "
                             f"steps of Logits: {t_len}")
        if sum(s_len) > flat.numel():
            raise ValueError(f"warpctc: LabelLength {s_len} adds up to {sum(s_len)} tokens but "
                             f"Label holds {flat.numel()} (the label sequences packed one "
                             f"after another, [sum(LabelLength), 1])")
        label_offs = [0]
        for k in s_len:
            label_offs.append(label_offs[-1] + k)
        return logits, _pad_labels(flat, label_offs), t_len, s_len
    offs = require_lod("warpctc", "Logits", logits)
    label_offs = require_lod("warpctc", "Label", label)
    if len(offs) != len(label_offs):
        raise ValueError(f"warpctc: Logits holds {len(offs) - 1} sequences but Label "
                         f"{len(label_offs) - 1}; give one label sequence per input sequence")
    t_len = [b - a for a, b in zip(offs, offs[1:])]
    s_len = [b - a for a, b in zip(label_offs, label_offs[1:])]
    n, classes = len(t_len), logits.shape[1]
    padded = logits.new_zeros((max(t_len, default=0), n, classes))
    for i in range(n):
        padded[:t_len[i], i] = logits[offs[i]:offs[i + 1]]
    return padded, _pad_labels(flat, label_offs), t_len, s_len


def _pad_labels(flat: torch.Tensor, offs: list[int]) -> torch.Tensor:
    """``[N, Smax]`` rows of the packed label tokens ``flat[offs[i]:offs[i + 1]]``."""
    n = len(offs) - 1
    targets = flat.new_zeros((n, max((b - a for a, b in zip(offs, offs[1:])), default=0)))
    for i in range(n):
        targets[i, :offs[i + 1] - offs[i]] = flat[offs[i]:offs[i + 1]]
    return targets


def _check_tokens(targets: torch.Tensor, s_len: list[int], classes: int, blank: int) -> None:
    for i, n in enumerate(s_len):
        row = targets[i, :n]
        if n and (int(row.min()) < 0 or int(row.max()) >= classes):
            raise ValueError(f"warpctc: label of sequence {i} holds a token outside "
                             f"[0, {classes}): {row.tolist()}")
        if n and bool((row == blank).any()):
            raise ValueError(f"warpctc: label of sequence {i} holds the blank token {blank}: "
                             f"{row.tolist()}")


def _warpctc(ins: dict, attrs: dict, ctx: Any) -> dict:
    logits, targets, t_len, s_len = _padded_inputs(ins)
    blank = int(attrs.get("blank", 0))
    _check_tokens(targets, s_len, logits.shape[-1], blank)
    n = logits.shape[1]
    if n == 0:
        return {"Loss": logits.new_zeros((0, 1)), "WarpCTCGrad": torch.zeros_like(logits)}
    log_probs = torch.log_softmax(logits, dim=-1)
    targets = targets.long()
    nll, log_alpha = torch.ops.aten._ctc_loss(log_probs, targets, t_len, s_len, blank, False)
    grad = torch.ops.aten._ctc_loss_backward(torch.ones_like(nll), log_probs, targets, t_len,
                                             s_len, nll, log_alpha, blank, False)
    # the kernel's gradient w.r.t. the log-probabilities, through log_softmax to the logits
    grad = grad - torch.exp(log_probs) * grad.sum(-1, keepdim=True)
    # NOTE: warp-ctc skips a sequence that no alignment fits (its label plus one blank
    # between each repeated pair needs more steps than it has): loss 0 and zero gradient,
    # where the alpha recursion alone would give an infinite loss and NaN gradients
    skip = torch.tensor([_infeasible(targets[i, :s_len[i]], t_len[i]) for i in range(n)],
                        dtype=torch.bool, device=nll.device)
    if bool(skip.any()):
        nll = torch.where(skip, torch.zeros_like(nll), nll)
        grad = torch.where(skip.reshape(1, n, 1), torch.zeros_like(grad), grad)
    return {"Loss": nll.reshape(n, 1), "WarpCTCGrad": grad}


def _infeasible(label: torch.Tensor, steps: int) -> bool:
    """True when ``label`` cannot be aligned to ``steps`` frames (warp-ctc's test)."""
    repeats = int((label[1:] == label[:-1]).sum()) if label.numel() > 1 else 0
    return label.numel() + repeats > steps


def _warpctc_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    logits, grad, dloss = ins["Logits"], ins["WarpCTCGrad"], ins["Loss@GRAD"]
    n = grad.shape[1]
    if ins.get("LogitsLength") is not None:
        t_len = _lengths(ins["LogitsLength"], n, "LogitsLength")
    else:
        offs = require_lod("warpctc", "Logits", logits)
        t_len = [b - a for a, b in zip(offs, offs[1:])]
    scale = dloss.reshape(1, n, 1).to(grad.dtype)
    if attrs.get("norm_by_times", False):
        steps = torch.tensor([max(t, 1) for t in t_len], dtype=grad.dtype, device=grad.device)
        scale = scale / steps.reshape(1, n, 1)
    scaled = grad * scale
    if ins.get("LogitsLength") is not None:
        return {"Logits@GRAD": scaled}
    return {"Logits@GRAD": torch.cat([scaled[:t, i] for i, t in enumerate(t_len)])
            if n else torch.zeros_like(logits)}


register_op("warpctc", inputs=("Logits", "Label", "LogitsLength?", "LabelLength?"),
            outputs=("WarpCTCGrad", "Loss"), attrs={"blank": 0, "norm_by_times": False},
            infer_shape=_ctc_shape, kernel=_warpctc, grad_kernel=_warpctc_grad,
            grad_uses=("Logits", "WarpCTCGrad", "LogitsLength"),
            no_grad_inputs=("Label", "LogitsLength", "LabelLength"))


# ----------------------------------------------------------------------------- ctc_align


def _align_one(tokens: list[int], blank: int, merge: bool) -> list[int]:
    out, prev = [], None
    for tok in tokens:
        if tok != blank and not (merge and tok == prev):
            out.append(tok)
        prev = tok
    return out


def _ctc_align_padded(ins: dict, attrs: dict) -> dict:
    """Padded ``Input [N, T]`` with ``InputLength [N, 1]``: each row aligned in place, the
    rest of the row ``padding_value``; ``OutputLength [N, 1]``."""
    x, lengths = ins["Input"], ins["InputLength"].reshape(-1).tolist()
    if x.dim() != 2 or len(lengths) != x.shape[0]:
        raise ValueError(f"ctc_align: padded Input must be [N, T] with one InputLength per "
                         f"row, got {list(x.shape)} and {len(lengths)} lengths")
    out = torch.full_like(x, int(attrs["padding_value"]))
    out_len = []
    for i, n in enumerate(lengths):
        row = _align_one(x[i, :int(n)].tolist(), int(attrs["blank"]), attrs["merge_repeated"])
        out[i, :len(row)] = torch.tensor(row, dtype=x.dtype)
        out_len.append(len(row))
    return {"Output": out,
            "OutputLength": torch.tensor(out_len, dtype=x.dtype).reshape(-1, 1)}


def _ctc_align(ins: dict, attrs: dict, ctx: Any) -> dict:
    """Per sequence: merge repeated tokens (``merge_repeated``), then drop ``blank``. A batch
    whose every sequence comes out empty gives ``[[-1]]`` with LoD ``[[0, 1]]``, as Fluid."""
    x = ins["Input"]
    if ins.get("InputLength") is not None and not get_lod(x):
        return _ctc_align_padded(ins, attrs)
    offsets = require_lod("ctc_align", "Input", x)
    flat, blank = x.reshape(-1).tolist(), int(attrs["blank"])
    tokens, new_offsets = [], [0]
    for a, b in zip(offsets, offsets[1:]):
        prev = None
        for tok in flat[a:b]:
            if tok != blank and not (attrs["merge_repeated"] and tok == prev):
                tokens.append(tok)
            prev = tok
        new_offsets.append(len(tokens))
    # OutputLength is the padded form's; bound in the LoD form, it gets each sequence's length
    lengths = torch.tensor([b - a for a, b in zip(new_offsets, new_offsets[1:])],
                           dtype=x.dtype).reshape(-1, 1)
    if not tokens:
        tokens, new_offsets = [-1], [0, 1]
    out = torch.tensor(tokens, dtype=x.dtype, device=x.device).reshape(-1, 1)
    return {"Output": attach_lod(out, [new_offsets]), "OutputLength": lengths}


def _ctc_align_shape(ins: dict, attrs: dict) -> dict:
    x = ins["Input"]
    if ins.get("InputLength") is None:
        return {"Output": Meta((-1, 1), x.dtype), "OutputLength": Meta((-1, 1), x.dtype)}
    return {"Output": Meta(x.shape, x.dtype), "OutputLength": Meta((x.shape[0], 1), x.dtype)}


register_op("ctc_align", inputs=("Input", "InputLength?"), outputs=("Output", "OutputLength?"),
            attrs={"blank": 0, "merge_repeated": True, "padding_value": 0},
            infer_shape=_ctc_align_shape, kernel=_ctc_align)
