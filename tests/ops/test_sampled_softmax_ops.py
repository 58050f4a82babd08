"""Op table: sample_logits (log-uniform negatives drawn once per batch, or customized
samples), and its layer sampled_softmax_with_cross_entropy against a numpy softmax."""

import math

import numpy as np
import pytest

import parafluid as fluid
from parafluid.testing import OpCase, check_op, rand

LABELS = np.array([[3], [0], [7], [3]], "int64")
# true label first, then 3 negatives; row 0 and row 3 sample their own label (a hit)
SAMPLES = np.array([[3, 1, 3, 5], [0, 1, 3, 5], [7, 1, 3, 5], [3, 1, 3, 5]], "int64")
PROBS = rand(4, 4, low=0.05, high=0.9, seed=9)


def sample_logits_ref(Logits, Labels, CustomizedSamples, CustomizedProbabilities, attrs):
    picked = np.take_along_axis(Logits, CustomizedSamples, 1)
    if attrs["remove_accidental_hits"]:
        nt = Labels.shape[1]
        for i in range(Logits.shape[0]):
            for j in range(nt, CustomizedSamples.shape[1]):
                if CustomizedSamples[i, j] in Labels[i]:
                    picked[i, j] -= 1e20
    return {"Samples": CustomizedSamples, "Probabilities": CustomizedProbabilities,
            "SampledLogits": picked - np.log(CustomizedProbabilities),
            "SampledLabels": np.zeros_like(Labels)}


def _log_uniform(k, num_classes):
    return np.log((k + 2.0) / (k + 1.0)) / math.log(num_classes + 1)


def check_drawn(got, attrs, num_classes=20, logits=None):
    samples, probs = got["Samples"], got["Probabilities"]
    ns, nt = attrs["num_samples"], LABELS.shape[1]
    assert samples.shape == (4, nt + ns)
    np.testing.assert_array_equal(samples[:, :nt], LABELS)
    neg = samples[:, nt:]
    assert (neg == neg[0]).all(), "negatives are drawn once for the whole batch"
    assert len(set(neg[0].tolist())) == ns and neg.min() >= 0 and neg.max() < num_classes
    p = _log_uniform(samples, num_classes)
    if not np.allclose(probs, p * ns):  # more draws than samples: 1 - (1 - p) ** tries
        tries = np.log1p(-probs) / np.log1p(-p)
        assert np.allclose(tries, np.round(tries[0, 0])) and tries[0, 0] > ns - 0.5, tries
    np.testing.assert_array_equal(got["SampledLabels"], np.zeros((4, nt), "int64"))
    if logits is not None:
        picked = np.take_along_axis(logits, samples, 1) - np.log(probs)
        np.testing.assert_allclose(got["SampledLogits"], picked, rtol=1e-12)


LOGITS = rand(4, 20, seed=3)
CUSTOM = {"Logits": rand(4, 8, seed=1), "Labels": LABELS, "CustomizedSamples": SAMPLES,
          "CustomizedProbabilities": PROBS}

CASES = [
    OpCase("sample_logits", CUSTOM, attrs={"use_customized_samples": True, "num_samples": 3,
                                           "remove_accidental_hits": False},
           ref=sample_logits_ref, grad=["Logits"], grad_outputs=["SampledLogits"]),
    OpCase("sample_logits", CUSTOM, attrs={"use_customized_samples": True, "num_samples": 3},
           ref=sample_logits_ref, id="sample_logits_accidental_hits"),
    OpCase("sample_logits", {"Logits": LOGITS, "Labels": LABELS},
           attrs={"num_samples": 5, "seed": 11, "remove_accidental_hits": False},
           check=lambda got, attrs: check_drawn(got, {"num_samples": 5}, logits=LOGITS),
           grad=["Logits"], grad_outputs=["SampledLogits"], id="sample_logits_drawn"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


def _softmax_ce(logits, soft):
    z = logits - logits.max(1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(1, keepdims=True))
    return -(soft * logp).sum(1, keepdims=True)


@pytest.mark.parametrize("num_true", [1, 2])
def test_layer_with_customized_samples_matches_numpy(num_true):
    labels = np.array([[2, 4], [0, 1], [5, 3]], "int64")[:, :num_true]
    samples = np.concatenate([labels, np.tile([[6, 4, 1]], (3, 1))], 1)
    probs = rand(3, num_true + 3, low=0.1, high=0.8, seed=4, dtype="float32")
    x = rand(3, 8, seed=5, dtype="float32")
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        logits = fluid.layers.data(name="logits", shape=[8], dtype="float32")
        label = fluid.layers.data(name="label", shape=[num_true], dtype="int64")
        s = fluid.layers.data(name="s", shape=[num_true + 3], dtype="int64")
        p = fluid.layers.data(name="p", shape=[num_true + 3], dtype="float32")
        loss = fluid.layers.sampled_softmax_with_cross_entropy(
            logits, label, num_samples=3, num_true=num_true, use_customized_samples=True,
            customized_samples=s, customized_probabilities=p)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    got, = exe.run(main, feed={"logits": x, "label": labels, "s": samples, "p": probs},
                   fetch_list=[loss])
    picked = np.take_along_axis(x, samples, 1) - np.log(probs)
    for i in range(3):  # accidental hits: a sampled class equal to a true label
        for j in range(num_true, num_true + 3):
            if samples[i, j] in labels[i]:
                picked[i, j] -= 1e20
    soft = np.zeros_like(picked)
    soft[:, :num_true] = 1
    np.testing.assert_allclose(got, _softmax_ce(picked, soft) / num_true, rtol=1e-5)


def test_layer_trains_and_a_seed_draws_the_same_samples_each_run():
    rng = np.random.RandomState(0)
    x = rng.randn(16, 6).astype("float32")
    y = (np.abs(x[:, :1]) * 10).astype("int64") % 30
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 1
    with fluid.program_guard(main, startup):
        xv = fluid.layers.data(name="x", shape=[6], dtype="float32")
        yv = fluid.layers.data(name="y", shape=[1], dtype="int64")
        logits = fluid.layers.fc(input=xv, size=30)
        loss = fluid.layers.mean(fluid.layers.sampled_softmax_with_cross_entropy(
            logits, yv, num_samples=8, seed=5))
        test_prog = main.clone(for_test=True)
        fluid.optimizer.SGD(learning_rate=0.5).minimize(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    first, = exe.run(test_prog, feed={"x": x, "y": y}, fetch_list=[loss])
    again, = exe.run(test_prog, feed={"x": x, "y": y}, fetch_list=[loss])
    np.testing.assert_array_equal(first, again)
    for _ in range(30):
        exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss])
    last, = exe.run(test_prog, feed={"x": x, "y": y}, fetch_list=[loss])
    assert float(last) < 0.5 * float(first), (first, last)
