"""Op table: positive_negative_pair and precision_recall (Fluid 1.6's definitions)."""

import itertools

import numpy as np
import pytest

from parafluid.testing import OpCase, check_op, rand

SCORE = np.array([[0.1, 0.9], [0.4, 0.3], [0.4, 0.8], [0.7, 0.2], [0.2, 0.5], [0.9, 0.5]])
LABEL = np.array([[1.0], [0.0], [2.0], [1.0], [0.0], [1.0]])
QUERY = np.array([[1], [1], [1], [2], [2], [2]], "int64")
WEIGHT = np.array([[1.0], [2.0], [0.5], [1.0], [3.0], [1.0]])


def _pnp(Score, Label, QueryID, Weight=None, acc=(0.0, 0.0, 0.0), column=0):
    s, lab, q = Score[:, column], Label[:, 0], QueryID[:, 0]
    w = np.ones(len(s)) if Weight is None else Weight[:, 0]
    pos, neg, neu = acc
    for i, j in itertools.combinations(range(len(s)), 2):
        if q[i] != q[j] or lab[i] == lab[j]:
            continue
        wt = (w[i] + w[j]) / 2
        neu += wt if s[i] == s[j] else 0.0
        if (s[i] - s[j]) * (lab[i] - lab[j]) > 0:
            pos += wt
        else:
            neg += wt
    return {"PositivePair": np.array([pos]), "NegativePair": np.array([neg]),
            "NeutralPair": np.array([neu])}


def _states(ids, labels, w, n):
    st = np.zeros((n, 4))
    for i, l, wt in zip(ids, labels, w):
        for c in range(n):
            if c == i and c == l:
                st[c, 0] += wt
            elif c == i:
                st[c, 1] += wt
            elif c == l:
                st[c, 3] += wt
            else:
                st[c, 2] += wt
    return st


def _metrics(st):
    def ratio(a, b):
        return a / (a + b) if a > 0 or b > 0 else 1.0

    def f1(p, r):
        return 2 * p * r / (p + r) if p > 0 or r > 0 else 0.0
    mp = np.mean([ratio(t, f) for t, f in zip(st[:, 0], st[:, 1])])
    mr = np.mean([ratio(t, f) for t, f in zip(st[:, 0], st[:, 3])])
    up, ur = ratio(st[:, 0].sum(), st[:, 1].sum()), ratio(st[:, 0].sum(), st[:, 3].sum())
    return np.array([mp, mr, f1(mp, mr), up, ur, f1(up, ur)])


def _pr(MaxProbs, Indices, Labels, Weights=None, StatesInfo=None, attrs=None):
    n = attrs["class_number"]
    w = np.ones(len(Indices)) if Weights is None else Weights[:, 0]
    st = _states(Indices[:, 0], Labels[:, 0], w, n)
    acc = st + (0 if StatesInfo is None else StatesInfo)
    return {"BatchMetrics": _metrics(st), "AccumMetrics": _metrics(acc), "AccumStatesInfo": acc}


IDS = np.array([[0], [2], [1], [1], [3], [2]], "int32")
LABS = np.array([[0], [1], [1], [2], [3], [2]], "int32")
PROBS = rand(6, 1, low=0.5, high=1.0)
OLD = np.abs(rand(4, 4, seed=3)) * 3

CASES = [
    OpCase("positive_negative_pair", {"Score": SCORE, "Label": LABEL, "QueryID": QUERY},
           ref=lambda **kw: _pnp(**kw), id="pnp_plain"),
    OpCase("positive_negative_pair", {"Score": SCORE, "Label": LABEL, "QueryID": QUERY,
                                      "Weight": WEIGHT},
           attrs={"column": -1}, ref=lambda **kw: _pnp(**kw, column=1),
           id="pnp_weighted_last_column"),
    OpCase("positive_negative_pair", {"Score": SCORE, "Label": LABEL, "QueryID": QUERY,
                                      "AccumulatePositivePair": np.array([2.0]),
                                      "AccumulateNegativePair": np.array([1.0]),
                                      "AccumulateNeutralPair": np.array([0.5])},
           ref=lambda Score, Label, QueryID, **kw: _pnp(Score, Label, QueryID,
                                                       acc=(2.0, 1.0, 0.5)),
           id="pnp_accumulated"),
    OpCase("precision_recall", {"MaxProbs": PROBS, "Indices": IDS, "Labels": LABS},
           attrs={"class_number": 4}, ref=_pr, id="precision_recall_plain"),
    OpCase("precision_recall", {"MaxProbs": PROBS, "Indices": IDS, "Labels": LABS,
                                "Weights": WEIGHT, "StatesInfo": OLD},
           attrs={"class_number": 4}, ref=_pr, id="precision_recall_weighted_states"),
    OpCase("precision_recall", {"MaxProbs": PROBS, "Indices": IDS % 2, "Labels": LABS % 2},
           attrs={"class_number": 5}, ref=_pr, id="precision_recall_unseen_classes"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)
