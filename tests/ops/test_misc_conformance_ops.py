"""Op table: center_loss, chunk_eval (LoD and padded with SeqLength, every tagging scheme),
cvm (and its gradient rule), hash (int32 and int64 rows, with and without LoD) and print,
against references written from Fluid 1.6's op definitions."""

from __future__ import annotations

import numpy as np
import pytest

from parafluid.testing import OpCase, check_op, rand

# ----------------------------------------------------------------------------- center_loss


def _center_loss(X, Label, Centers, CenterUpdateRate, attrs):
    lab = Label.reshape(-1)
    diff = X - Centers[lab]
    out = {"SampleCenterDiff": diff, "Loss": 0.5 * (diff ** 2).sum(1, keepdims=True)}
    centers = Centers.copy()
    if attrs["need_update"]:
        for k in range(Centers.shape[0]):
            mine = lab == k
            centers[k] += CenterUpdateRate[0] * diff[mine].sum(0) / (1 + mine.sum())
    out["CentersOut"] = centers
    return out


_CL = {"X": rand(5, 3, seed=1), "Label": np.array([[0], [2], [0], [3], [2]], "int64"),
       "Centers": rand(4, 3, seed=2), "CenterUpdateRate": np.array([0.1])}

# ----------------------------------------------------------------------------- chunk_eval

# tag kinds per chunk type and the tag ids of begin / inside / end / single (None: absent)
_SCHEMES = {"IOB": (2, 0, 1, None, None), "IOE": (2, None, 0, 1, None),
            "IOBES": (4, 0, 1, 2, 3), "plain": (1, None, None, None, None)}


def _segments(tags, n_types, scheme):
    """(first, last, type) of each chunk of one sequence, per Fluid's chunk_eval definition:
    a chunk starts when a tag of a chunk type follows 'other', another type, a begin or
    single tag, or an inside/end tag after an end/single; it ends before 'other', before
    another type, and before a begin/single tag or after an end/single tag."""
    kinds, b, i_, e, s = _SCHEMES[scheme]
    other = n_types
    out, start = [], None
    prev_tag, prev_type = None, other
    for pos, label in enumerate(tags):
        tag, typ = label % kinds, label // kinds
        if start is not None:
            ends = (typ == other or typ != prev_type or prev_tag in (e, s)
                    or (prev_tag in (b, i_) and tag in (b, s)))
            if prev_type != other and ends:
                out.append((start, pos - 1, prev_type))
                start = None
        if prev_type == other:
            begins = typ != other
        elif typ == other:
            begins = False
        else:
            begins = (typ != prev_type or tag in (b, s)
                      or (tag in (i_, e) and prev_tag in (e, s)))
        if begins:
            start = pos
        prev_tag, prev_type = tag, typ
    if start is not None:
        out.append((start, len(tags) - 1, prev_type))
    return [c for c in out if c[0] is not None]


def _chunk_counts(seqs_pred, seqs_label, attrs):
    n, scheme = attrs["num_chunk_types"], attrs["chunk_scheme"]
    excluded = set(attrs["excluded_chunk_types"])
    n_inf = n_lab = n_cor = 0
    for p, y in zip(seqs_pred, seqs_label):
        got = {c for c in _segments(p, n, scheme) if c[2] not in excluded}
        want = {c for c in _segments(y, n, scheme) if c[2] not in excluded}
        n_inf, n_lab, n_cor = n_inf + len(got), n_lab + len(want), n_cor + len(got & want)
    prec = n_cor / n_inf if n_inf else 0.0
    rec = n_cor / n_lab if n_lab else 0.0
    f1 = 2 * prec * rec / (prec + rec) if n_cor else 0.0
    f32, i64 = (lambda v: np.array([v], "float32")), (lambda v: np.array([v], "int64"))
    return {"Precision": f32(prec), "Recall": f32(rec), "F1-Score": f32(f1),
            "NumInferChunks": i64(n_inf), "NumLabelChunks": i64(n_lab),
            "NumCorrectChunks": i64(n_cor)}


_OFFSETS = [0, 6, 7, 15]


def _chunk_lod_ref(Inference, Label, attrs):
    p, y = Inference.reshape(-1), Label.reshape(-1)
    spans = list(zip(_OFFSETS, _OFFSETS[1:]))
    return _chunk_counts([p[a:b].tolist() for a, b in spans],
                         [y[a:b].tolist() for a, b in spans], attrs)


def _chunk_pad_ref(Inference, Label, SeqLength, attrs):
    p, y = Inference.reshape(len(SeqLength), -1), Label.reshape(len(SeqLength), -1)
    lens = SeqLength.reshape(-1)
    return _chunk_counts([p[i, :n].tolist() for i, n in enumerate(lens)],
                         [y[i, :n].tolist() for i, n in enumerate(lens)], attrs)


def _tags(n_types, kinds, seed):
    # labels 0 .. n_types * kinds, the last id being 'other'
    rng = np.random.RandomState(seed)
    return rng.randint(0, n_types * kinds + 1, (_OFFSETS[-1], 1)).astype("int64")


def _chunk_case(scheme, n_types=3, excluded=(), id=None):
    kinds = _SCHEMES[scheme][0]
    label = _tags(n_types, kinds, 7)
    pred = label.copy()
    pred[::3] = _tags(n_types, kinds, 8)[::3]  # some chunks right, some wrong
    attrs = {"num_chunk_types": n_types, "chunk_scheme": scheme,
             "excluded_chunk_types": list(excluded)}
    return OpCase("chunk_eval", {"Inference": pred, "Label": label}, attrs=attrs,
                  lod={"Inference": [_OFFSETS], "Label": [_OFFSETS]}, ref=_chunk_lod_ref,
                  id=id or f"chunk_eval_{scheme}")


def _chunk_padded_case(three_d):
    label = _tags(2, 2, 9).reshape(3, 5)
    pred = label.copy()
    pred[:, 1] = (pred[:, 1] + 1) % 5
    if three_d:
        label, pred = label[..., None], pred[..., None]
    return OpCase("chunk_eval", {"Inference": pred, "Label": label,
                                 "SeqLength": np.array([5, 2, 4], "int64")},
                  attrs={"num_chunk_types": 2, "chunk_scheme": "IOB"}, ref=_chunk_pad_ref,
                  id=f"chunk_eval_padded_seq_length{'_3d' if three_d else ''}")


# ----------------------------------------------------------------------------- cvm


def _cvm(X, CVM, attrs):
    if not attrs["use_cvm"]:
        return {"Y": X[:, 2:]}
    show = np.log(X[:, :1] + 1)
    return {"Y": np.concatenate([show, np.log(X[:, 1:2] + 1) - show, X[:, 2:]], 1)}


def _cvm_grad(X, CVM, attrs, **grads):
    # Fluid's rule (not a derivative): Y@GRAD passes to the feature columns, the show and
    # click columns get the CVM input
    dy = grads["Y@GRAD"]
    rest = dy[:, 2:] if attrs["use_cvm"] else dy
    return {"X@GRAD": np.concatenate([CVM, rest], 1)}


_CVM_X = rand(4, 5, low=0.0, high=3.0, seed=3)
_CVM = rand(4, 2, low=0.0, high=2.0, seed=4)

# ----------------------------------------------------------------------------- hash

# Fluid's known answers (test_hash_op.py): XXH64 of each row's bytes with seeds 0 and 1,
# mod 10000
_HASH_IN = np.random.RandomState(1).randint(0, 10, (8, 1)).astype("int32")
_HASH_OUT = np.array([[[3481], [7475]], [[1719], [5986]], [[8473], [694]],
                      [[3481], [7475]], [[4372], [9456]], [[4372], [9456]],
                      [[6897], [3218]], [[9038], [7951]]], "int64")
_HASH64_IN = np.array([[1], [2 ** 32 + 1]], "int64")
_HASH64_OUT = np.array([1269, 9609, 3868, 7268], "int64").reshape(2, 2, 1)
_HASH_ATTRS = {"num_hash": 2, "mod_by": 10000}


# ----------------------------------------------------------------------------- mean_iou


def _mean_iou(Predictions, Labels, attrs, InWrongs=(), InCorrects=(), InMeanIou=()):
    n = attrs["num_classes"]
    p, y = Predictions.reshape(-1), Labels.reshape(-1)
    correct = np.zeros(n, "int64") + sum((c.astype("int64") for c in InCorrects), 0)
    wrong = np.zeros(n, "int64") + sum((w.astype("int64") for w in InWrongs), 0)
    for a, b in zip(p, y):
        if a == b:
            correct[a] += 1
        else:
            wrong[a] += 1
            wrong[b] += 1
    denom = correct + wrong
    valid = (denom > 0).sum()
    mean = (correct / np.maximum(denom, 1)).sum() / valid + sum(float(m[0]) for m in InMeanIou)
    return {"OutMeanIou": np.array([mean], "float32"), "OutWrong": wrong.astype("int32"),
            "OutCorrect": correct.astype("int32")}


_IOU = {"Predictions": np.array([0, 1, 1, 2, 2, 0], "int32"),
        "Labels": np.array([0, 1, 2, 2, 1, 3], "int32")}


CASES = [
    OpCase("center_loss", _CL, attrs={"cluster_num": 4, "need_update": True},
           ref=_center_loss, grad=["X"], grad_outputs=["Loss"]),
    OpCase("center_loss", _CL, attrs={"cluster_num": 4, "need_update": False},
           ref=_center_loss, grad=["X"], grad_outputs=["Loss"], id="center_loss_no_update"),
    # int32 labels of shape [N]
    OpCase("center_loss", {**_CL, "Label": np.array([1, 1, 0, 3, 2], "int32")},
           attrs={"cluster_num": 4, "need_update": True}, ref=_center_loss,
           id="center_loss_int32_label"),
    _chunk_case("IOB"),
    _chunk_case("IOE"),
    _chunk_case("IOBES"),
    _chunk_case("plain"),
    _chunk_case("IOB", excluded=(1,), id="chunk_eval_excluded_chunk_types"),
    _chunk_case("IOBES", n_types=1, id="chunk_eval_one_chunk_type"),
    _chunk_padded_case(False),
    _chunk_padded_case(True),
    OpCase("cvm", {"X": _CVM_X, "CVM": _CVM}, ref=_cvm),
    OpCase("cvm", {"X": _CVM_X, "CVM": _CVM}, attrs={"use_cvm": False}, ref=_cvm,
           id="cvm_no_cvm"),
    OpCase("cvm_grad", {"X": _CVM_X, "CVM": _CVM, "Y@GRAD": rand(4, 5, seed=5)},
           outputs=["X@GRAD"], ref=_cvm_grad, id="cvm_grad_rule"),
    OpCase("cvm_grad", {"X": _CVM_X, "CVM": _CVM, "Y@GRAD": rand(4, 3, seed=5)},
           outputs=["X@GRAD"], attrs={"use_cvm": False}, ref=_cvm_grad,
           id="cvm_grad_rule_no_cvm"),
    OpCase("hash", {"X": _HASH_IN}, attrs=_HASH_ATTRS, ref=lambda X: {"Out": _HASH_OUT},
           id="hash_int32"),
    OpCase("hash", {"X": _HASH_IN}, attrs=_HASH_ATTRS, lod={"X": [[0, 2, 8]]},
           ref=lambda X: {"Out": _HASH_OUT}, id="hash_int32_lod"),
    OpCase("hash", {"X": _HASH64_IN}, attrs=_HASH_ATTRS, ref=lambda X: {"Out": _HASH64_OUT},
           id="hash_int64"),
    # rows are the last dimension: [2, 4, 1] hashes 8 rows into [2, 4, 2, 1]
    OpCase("hash", {"X": _HASH_IN.reshape(2, 4, 1)}, attrs=_HASH_ATTRS,
           ref=lambda X: {"Out": _HASH_OUT.reshape(2, 4, 2, 1)}, id="hash_rank3"),
    # the counts and means of earlier batches add up (Fluid's accumulating form)
    OpCase("mean_iou", {**_IOU, "InWrongs": [np.array([1, 0, 2, 0], "int32"),
                                             np.array([0, 3, 0, 1], "int32")],
                        "InCorrects": [np.array([2, 1, 0, 0], "int32")],
                        "InMeanIou": [np.array([0.25], "float32")]},
           attrs={"num_classes": 4}, ref=_mean_iou, id="mean_iou_accumulating"),
    OpCase("mean_iou", {**_IOU, "InCorrects": [np.array([0, 0, 0, 5], "int32")]},
           attrs={"num_classes": 4}, ref=_mean_iou, id="mean_iou_in_corrects_only"),
    OpCase("print", {"In": rand(2, 3)}, ref=lambda In: {"Out": In}, grad=["In"]),
    OpCase("print", {"In": rand(2, 3)}, attrs={"message": "m", "summarize": 2, "first_n": 1,
                                               "print_phase": "forward"},
           ref=lambda In: {"Out": In}, grad=["In"], id="print_forward_phase"),
    OpCase("print", {"In": rand(4, 2)}, lod={"In": [[0, 1, 4]]},
           attrs={"print_tensor_lod": True, "print_phase": "backward"},
           ref=lambda In: {"Out": In}, grad=["In"], id="print_lod_backward_phase"),
]

# Values Fluid 1.6 accepts that parafluid refuses (each row checks the refusal's message)
REFUSED_CASES = [
    # Fluid 1.6 reads curve but always computes the ROC area, so 'PR' would silently be ROC
    OpCase("auc", {"Predict": np.array([[0.3, 0.7], [0.8, 0.2]]),
                   "Label": np.array([[1], [0]], "int64"),
                   "StatPos": np.zeros((1, 11), "int64"), "StatNeg": np.zeros((1, 11), "int64")},
           attrs={"curve": "PR", "num_thresholds": 10}, refused="only curve='ROC' is supported",
           id="auc_curve_pr"),
]


@pytest.mark.parametrize("case", CASES + REFUSED_CASES, ids=str)
def test_op(case):
    check_op(case)


def test_chunk_eval_layer_passes_seq_length_for_padded_rows():
    import parafluid as fluid
    from parafluid.testing import run_layers

    case = _chunk_padded_case(False)

    def build():
        pred = fluid.layers.data(name="pred", shape=[5], dtype="int64")
        label = fluid.layers.data(name="label", shape=[5], dtype="int64")
        lens = fluid.layers.data(name="lens", shape=[-1], dtype="int64", append_batch_size=False)
        return list(fluid.layers.chunk_eval(pred, label, "IOB", 2, seq_length=lens))

    got = run_layers(build, {"pred": case.inputs["Inference"], "label": case.inputs["Label"],
                             "lens": case.inputs["SeqLength"]})
    want = _chunk_pad_ref(**case.inputs, attrs={**case.attrs, "excluded_chunk_types": []})
    for value, slot in zip(got, ["Precision", "Recall", "F1-Score", "NumInferChunks",
                                 "NumLabelChunks", "NumCorrectChunks"]):
        np.testing.assert_allclose(value, want[slot], err_msg=slot)
