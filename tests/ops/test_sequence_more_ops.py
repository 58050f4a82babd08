"""Op table: sequence-family behaviours of Fluid 1.6 checked beyond the main tables: the CTC
loss of a sequence no alignment fits (warp-ctc skips it: loss 0, zero gradient), beam search
back-tracing (gather_tree) and the top-k average pooling of match matrices. References are
numpy loops written from Fluid's operator definitions."""

import itertools

import numpy as np
import pytest

from parafluid.testing import OpCase, check_op, rand

C = 4  # CTC classes, the blank (0) included


def _ctc_nll(logits, label, blank=0):
    """-log of the summed probability of every path collapsing to ``label``; 0 when no path
    fits (warp-ctc's convention for a label longer than the input)."""
    repeats = sum(1 for a, b in zip(label, label[1:]) if a == b)
    if len(label) + repeats > len(logits):
        return 0.0
    z = logits - logits.max(1, keepdims=True)
    prob = np.exp(z) / np.exp(z).sum(1, keepdims=True)
    total = 0.0
    for path in itertools.product(range(logits.shape[1]), repeat=logits.shape[0]):
        out, prev = [], None
        for p in path:
            if p != prev and p != blank:
                out.append(p)
            prev = p
        if out == list(label):
            total += np.prod([prob[t, p] for t, p in enumerate(path)])
    return -np.log(total)


# sequence 1 has 2 frames for the label [2, 2] (needs 3: a blank between the repeats);
# sequence 2 has 1 frame for 2 labels
CTC_OFFS, CTC_LABEL_OFFS = [0, 3, 5, 6], [0, 2, 4, 6]
CTC_X = rand(6, C, seed=81, low=-2.0, high=2.0)
CTC_Y = np.array([[1], [2], [2], [2], [1], [3]], "int32")


def ctc_lod_ref(Logits, Label):
    out = [_ctc_nll(Logits[a:b], Label[c:d, 0])
           for a, b, c, d in zip(CTC_OFFS, CTC_OFFS[1:], CTC_LABEL_OFFS, CTC_LABEL_OFFS[1:])]
    return {"Loss": np.array(out).reshape(-1, 1)}


def _ctc_grad_check(got, attrs):
    grad = got["WarpCTCGrad"]
    assert np.isfinite(grad).all(), "warpctc: WarpCTCGrad must stay finite"
    assert not grad[:, 1:].any(), "warpctc: a skipped sequence has a zero gradient"


CTC_PAD_X = rand(3, 2, C, seed=82, low=-2.0, high=2.0)
CTC_PAD_Y = np.array([[1, 2], [3, 3]], "int64")


def ctc_pad_ref(Logits, Label, LogitsLength, LabelLength):
    out = [_ctc_nll(Logits[:LogitsLength[i], i], Label[i, :LabelLength[i]])
           for i in range(Logits.shape[1])]
    return {"Loss": np.array(out).reshape(-1, 1)}


CTC_CASES = [
    OpCase("warpctc", {"Logits": CTC_X, "Label": CTC_Y}, ref=ctc_lod_ref,
           lod={"Logits": [CTC_OFFS], "Label": [CTC_LABEL_OFFS]}, grad=["Logits"],
           grad_outputs=["Loss"], check=_ctc_grad_check, id="warpctc_label_longer_than_input"),
    OpCase("warpctc", {"Logits": CTC_X, "Label": CTC_Y}, ref=ctc_lod_ref,
           attrs={"norm_by_times": True},  # scales the gradient only, never the loss
           lod={"Logits": [CTC_OFFS], "Label": [CTC_LABEL_OFFS]}, check=_ctc_grad_check,
           id="warpctc_label_longer_than_input_norm_by_times"),
    OpCase("warpctc", {"Logits": CTC_PAD_X, "Label": CTC_PAD_Y,
                       "LogitsLength": np.array([3, 2], "int64"),
                       "LabelLength": np.array([2, 2], "int64")}, ref=ctc_pad_ref,
           grad=["Logits"], grad_outputs=["Loss"], id="warpctc_padded_label_longer_than_input"),
]


# ----------------------------------------------------------------------------- gather_tree


def gather_tree_ref(Ids, Parents):
    steps, batch, beam = Ids.shape
    out = np.zeros_like(Ids)
    for b in range(batch):
        for k in range(beam):
            parent = k
            for t in range(steps - 1, -1, -1):
                out[t, b, k] = Ids[t, b, parent]
                parent = Parents[t, b, parent]
    return {"Out": out}


# Fluid's documented example
TREE_IDS = np.array([[[2, 2], [6, 1]], [[3, 9], [6, 1]], [[0, 1], [9, 0]]], "int64")
TREE_PARENTS = np.array([[[0, 0], [1, 1]], [[1, 0], [1, 0]], [[0, 0], [0, 1]]], "int64")
TREE_OUT = np.array([[[2, 2], [1, 6]], [[3, 3], [6, 1]], [[0, 1], [9, 0]]], "int64")
RNG = np.random.RandomState(83)

GATHER_TREE_CASES = [
    OpCase("gather_tree", {"Ids": TREE_IDS, "Parents": TREE_PARENTS},
           ref=lambda Ids, Parents: {"Out": TREE_OUT}, id="gather_tree_fluid_example"),
    OpCase("gather_tree", {"Ids": RNG.randint(0, 20, (5, 3, 4)).astype("int32"),
                           "Parents": RNG.randint(0, 4, (5, 3, 4)).astype("int32")},
           ref=gather_tree_ref, id="gather_tree_int32"),
]


@pytest.mark.parametrize("case", CTC_CASES + GATHER_TREE_CASES, ids=str)
def test_op(case):
    check_op(case)


def test_gather_tree_layer():
    """layers.gather_tree(ids, parents) as Fluid 1.6 (also as fluid.layers.nn.gather_tree)."""
    import parafluid as fluid
    from parafluid.testing import run_layers

    assert fluid.layers.nn.gather_tree is fluid.layers.gather_tree

    def build():
        ids = fluid.layers.data(name="ids", shape=[3, 2, 2], dtype="int64",
                                append_batch_size=False)
        parents = fluid.layers.data(name="parents", shape=[3, 2, 2], dtype="int64",
                                    append_batch_size=False)
        return [fluid.layers.gather_tree(ids, parents)]

    got, = run_layers(build, {"ids": TREE_IDS, "parents": TREE_PARENTS})
    np.testing.assert_array_equal(got, TREE_OUT)
