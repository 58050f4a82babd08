"""Optimizers through real programs (layers + minimize + Executor) against torch.optim and
numpy re-implementations of Fluid's update formulas; sparse gradients; regularization."""

import numpy as np
import pytest
import torch

import parafluid as fluid
from parafluid.initializer import NumpyArrayInitializer
from parafluid.layer_helper import LayerHelper
from parafluid.scope import SelectedRows

STEPS = 4
PARAMS = ["w0", "b0", "w1", "b1"]


def _batches(seed=0, n=8):
    rng = np.random.RandomState(seed)
    return [(rng.uniform(-1, 1, (n, 4)), rng.uniform(-1, 1, (n, 3))) for _ in range(STEPS)]


def _build_mlp(make_opt, w0_lr=1.0, regularizer=None):
    """Two fc layers and a squared error in float64; parameters w0, b0, w1, b1."""
    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = 7
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[4], dtype="float64")
        y = fluid.layers.data(name="y", shape=[3], dtype="float64")
        h = fluid.layers.fc(x, size=5, bias_attr=fluid.ParamAttr(name="b0"),
                            param_attr=fluid.ParamAttr(name="w0", learning_rate=w0_lr,
                                                       regularizer=regularizer))
        pred = fluid.layers.fc(h, size=3, param_attr=fluid.ParamAttr(name="w1"),
                               bias_attr=fluid.ParamAttr(name="b1"))
        d = fluid.layers.elementwise_sub(pred, y)
        loss = fluid.layers.mean(fluid.layers.elementwise_mul(d, d))
        make_opt().minimize(loss)
    return main, startup


def _run_parafluid(make_opt, batches, **build):
    main, startup = _build_mlp(make_opt, **build)
    main.verify()
    scope, exe = fluid.Scope(), fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)

    def params():
        return [np.array(scope.find_var(n).get_tensor()) for n in PARAMS]

    init, traj = params(), []
    for x, y in batches:
        exe.run(main, feed={"x": x, "y": y}, scope=scope)
        traj.append(params())
    return init, traj


def _torch_grads(params, x, y):
    w0, b0, w1, b1 = params
    pred = (torch.from_numpy(x) @ w0 + b0) @ w1 + b1
    loss = ((pred - torch.from_numpy(y)) ** 2).mean()
    return torch.autograd.grad(loss, params)


def _run_torch(init, make_torch_opt, batches):
    ps = [torch.tensor(a, requires_grad=True) for a in init]
    opt = make_torch_opt(ps)
    traj = []
    for x, y in batches:
        opt.zero_grad()
        for p, g in zip(ps, _torch_grads(ps, x, y)):
            p.grad = g
        opt.step()
        traj.append([p.detach().numpy().copy() for p in ps])
    return traj


def _run_formula(init, step, batches):
    """``step(p, g, state, t)`` updates numpy ``p`` in place (Fluid's formula)."""
    ps = [a.copy() for a in init]
    states = [{} for _ in ps]
    traj = []
    for t, (x, y) in enumerate(batches, 1):
        grads = _grads_np(ps, x, y)
        for p, g, s in zip(ps, grads, states):
            step(p, g, s, t)
        traj.append([p.copy() for p in ps])
    return traj


def _grads_np(ps, x, y):
    tps = [torch.tensor(p, requires_grad=True) for p in ps]
    return [g.numpy() for g in _torch_grads(tps, x, y)]


def _assert_traj(got, want, rtol, atol=1e-8):
    # atol: the learning rate is a float32 variable, as in Fluid (0.1 -> 0.10000000149).
    for t, (g_step, w_step) in enumerate(zip(got, want)):
        for name, g, w in zip(PARAMS, g_step, w_step):
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol,
                                       err_msg=f"{name} after step {t + 1}")


# ---------------------------------------------------------------------- Fluid's formulas


def fluid_adam(lr, b1=0.9, b2=0.999, eps=1e-8):
    def step(p, g, s, t):
        s["m1"] = b1 * s.get("m1", 0.0) + (1 - b1) * g
        s["m2"] = b2 * s.get("m2", 0.0) + (1 - b2) * g * g
        lr_t = lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
        p -= lr_t * s["m1"] / (np.sqrt(s["m2"]) + eps)
    return step


def fluid_rmsprop(lr, rho=0.95, eps=1e-6, momentum=0.0, centered=False):
    def step(p, g, s, t):
        s["ms"] = rho * s.get("ms", 0.0) + (1 - rho) * g * g
        if centered:
            s["mg"] = rho * s.get("mg", 0.0) + (1 - rho) * g
            denom = np.sqrt(s["ms"] - s["mg"] ** 2 + eps)
        else:
            denom = np.sqrt(s["ms"] + eps)
        s["mom"] = momentum * s.get("mom", 0.0) + lr * g / denom
        p -= s["mom"]
    return step


def fluid_adagrad(lr, eps=1e-6, init=0.0):
    def step(p, g, s, t):
        s["m"] = s.get("m", init) + g * g
        p -= lr * g / (np.sqrt(s["m"]) + eps)
    return step


def fluid_decayed_adagrad(lr, decay=0.95, eps=1e-6):
    def step(p, g, s, t):
        s["m"] = decay * s.get("m", 0.0) + (1 - decay) * g * g
        p -= lr * g / (np.sqrt(s["m"]) + eps)
    return step


def fluid_adamax(lr, b1=0.9, b2=0.999, eps=1e-8):
    def step(p, g, s, t):
        s["m"] = b1 * s.get("m", 0.0) + (1 - b1) * g
        s["u"] = np.maximum(b2 * s.get("u", 0.0) + eps, np.abs(g))
        p -= lr / (1 - b1 ** t) * s["m"] / s["u"]
    return step


def fluid_ftrl(lr, l1=0.0, l2=0.0, power=-0.5):
    def step(p, g, s, t):
        n, z = s.get("n", np.zeros_like(p)), s.get("z", np.zeros_like(p))
        n_new = n + g * g
        z = z + g - (n_new ** -power - n ** -power) / lr * p
        y = n_new ** -power / lr + 2 * l2
        p[...] = np.where(np.abs(z) > l1, (l1 * np.sign(z) - z) / y, 0.0)
        s["n"], s["z"] = n_new, z
    return step


def fluid_lamb(lr, wd=0.01, b1=0.9, b2=0.999, eps=1e-6):
    def step(p, g, s, t):
        s["m1"] = b1 * s.get("m1", 0.0) + (1 - b1) * g
        s["m2"] = b2 * s.get("m2", 0.0) + (1 - b2) * g * g
        r = s["m1"] / (np.sqrt(s["m2"]) + eps) + wd * p  # no bias correction in Fluid 1.6
        p_norm, r_norm = np.linalg.norm(p), np.linalg.norm(r)
        p -= lr * (p_norm / r_norm if p_norm > 0 and r_norm > 0 else 1.0) * r
    return step


# ---------------------------------------------------------------------- vs torch.optim

O = fluid.optimizer
TORCH_CASES = {
    "sgd": (lambda: O.SGD(learning_rate=0.1), lambda ps: torch.optim.SGD(ps, lr=0.1)),
    "momentum": (lambda: O.Momentum(learning_rate=0.1, momentum=0.9),
                 lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9)),
    "nesterov": (lambda: O.MomentumOptimizer(learning_rate=0.1, momentum=0.8, use_nesterov=True),
                 lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.8, nesterov=True)),
    # torch puts eps outside the bias correction; with a tiny eps both formulas agree.
    "adam": (lambda: O.Adam(learning_rate=0.01, epsilon=1e-12),
             lambda ps: torch.optim.Adam(ps, lr=0.01, eps=1e-12)),
    "adagrad": (lambda: O.AdagradOptimizer(learning_rate=0.1, epsilon=1e-6),
                lambda ps: torch.optim.Adagrad(ps, lr=0.1, eps=1e-6)),
    # torch adds eps outside the square root, Fluid inside: again a tiny eps.
    "rmsprop": (lambda: O.RMSProp(learning_rate=0.01, rho=0.9, epsilon=1e-14, momentum=0.5),
                lambda ps: torch.optim.RMSprop(ps, lr=0.01, alpha=0.9, eps=1e-14,
                                               momentum=0.5)),
    "rmsprop_centered": (
        lambda: O.RMSPropOptimizer(learning_rate=0.01, rho=0.9, epsilon=1e-14, centered=True),
        lambda ps: torch.optim.RMSprop(ps, lr=0.01, alpha=0.9, eps=1e-14, centered=True)),
    # torch adds eps to |g|, Fluid to the decayed norm: a tiny eps again.
    "adamax": (lambda: O.Adamax(learning_rate=0.01, epsilon=1e-14),
               lambda ps: torch.optim.Adamax(ps, lr=0.01, eps=1e-14)),
}


@pytest.mark.parametrize("name", sorted(TORCH_CASES))
def test_matches_torch_optim(name):
    make_opt, make_torch = TORCH_CASES[name]
    batches = _batches()
    init, got = _run_parafluid(make_opt, batches)
    want = _run_torch(init, make_torch, batches)
    assert not np.allclose(got[-1][0], init[0]), "the optimizer did not move w0"
    # LR and Adam's beta powers are float32 accumulators (as in Fluid): hence rtol.
    _assert_traj(got, want, rtol=1e-6, atol=1e-6 if "adam" in name else 1e-8)


FORMULA_CASES = {
    "adam": (lambda: O.Adam(learning_rate=0.01), fluid_adam(0.01)),
    "adam_betas": (lambda: O.Adam(learning_rate=0.05, beta1=0.8, beta2=0.99, epsilon=1e-4),
                   fluid_adam(0.05, 0.8, 0.99, 1e-4)),
    "adagrad_init": (lambda: O.Adagrad(learning_rate=0.1, initial_accumulator_value=0.5),
                     fluid_adagrad(0.1, init=0.5)),
    "rmsprop": (lambda: O.RMSProp(learning_rate=0.01), fluid_rmsprop(0.01)),
    "rmsprop_centered_momentum": (
        lambda: O.RMSProp(learning_rate=0.01, rho=0.8, epsilon=1e-3, momentum=0.9,
                          centered=True),
        fluid_rmsprop(0.01, 0.8, 1e-3, 0.9, True)),
    "decayed_adagrad": (lambda: O.DecayedAdagrad(learning_rate=0.1, decay=0.9),
                        fluid_decayed_adagrad(0.1, 0.9)),
    "adamax": (lambda: O.AdamaxOptimizer(learning_rate=0.05, beta1=0.8, epsilon=1e-3),
               fluid_adamax(0.05, 0.8, 0.999, 1e-3)),
    "ftrl": (lambda: O.Ftrl(learning_rate=0.1), fluid_ftrl(0.1)),
    "ftrl_l1_l2_power": (lambda: O.FtrlOptimizer(learning_rate=0.1, l1=0.01, l2=0.1,
                                                 lr_power=-0.7),
                         fluid_ftrl(0.1, 0.01, 0.1, -0.7)),
    "lamb": (lambda: O.Lamb(learning_rate=0.01, lamb_weight_decay=0.05),
             fluid_lamb(0.01, 0.05)),
}


@pytest.mark.parametrize("name", sorted(FORMULA_CASES))
def test_matches_fluid_formula(name):
    make_opt, step = FORMULA_CASES[name]
    batches = _batches(seed=1)
    init, got = _run_parafluid(make_opt, batches)
    _assert_traj(got, _run_formula(init, step, batches), rtol=1e-6, atol=1e-6)


def test_accumulators_named_like_fluid():
    with fluid.unique_name.guard():
        main, _ = _build_mlp(lambda: O.Adam(learning_rate=0.01))
    names = {v.name for v in main.list_vars() if v.persistable}
    for acc in ("moment1_0", "moment2_0", "beta1_pow_acc_0", "beta2_pow_acc_0"):
        assert f"w0_{acc}" in names
    assert main.global_block().var("w0_beta1_pow_acc_0").shape == (1,)
    types = [op.type for op in main.global_block().ops]
    # Beta powers advance after every parameter's update, once per parameter.
    assert types[-8:] == ["scale"] * 8 and types.count("adam") == 4


def test_param_learning_rate_and_l2_decay():
    batches = _batches(seed=2)
    init, got = _run_parafluid(lambda: O.Momentum(learning_rate=0.1, momentum=0.9), batches,
                               w0_lr=0.5, regularizer=fluid.regularizer.L2Decay(0.01))
    want = _run_torch(init, lambda ps: torch.optim.SGD(
        [{"params": ps[:1], "lr": 0.05, "weight_decay": 0.01}, {"params": ps[1:]}],
        lr=0.1, momentum=0.9), batches)
    _assert_traj(got, want, rtol=1e-6)


def test_optimizer_level_regularization():
    batches = _batches(seed=3)
    init, got = _run_parafluid(
        lambda: O.SGD(learning_rate=0.1, regularization=fluid.regularizer.L2Decay(0.1)),
        batches)
    want = _run_torch(init, lambda ps: torch.optim.SGD(ps, lr=0.1, weight_decay=0.1), batches)
    _assert_traj(got, want, rtol=1e-6)


@pytest.mark.skipif(not fluid.ops.has_op("sign"), reason="L1Decay needs the 'sign' op")
def test_l1_decay():
    batches = _batches(seed=4)
    init, got = _run_parafluid(
        lambda: O.SGD(learning_rate=0.1, regularization=fluid.regularizer.L1Decay(0.1)),
        batches)

    def step(p, g, s, t):
        p -= 0.1 * (g + 0.1 * np.sign(p))
    _assert_traj(got, _run_formula(init, step, batches), rtol=1e-6)


# ---------------------------------------------------------------------- sparse gradients

TABLE = np.random.RandomState(5).uniform(-1, 1, (10, 3))
SPARSE_STEPS = [([1, 3, 1, 7], 0), ([3, 3, 0], 1), ([9, 1], 2)]


def _sparse_grad(rows, seed):
    value = np.random.RandomState(seed).uniform(-1, 1, (len(rows), 3))
    return SelectedRows(torch.tensor(rows), torch.from_numpy(value), 10)


def _run_table(make_opt, sparse, regularizer=None):
    """Apply the fed gradient (SelectedRows or its dense form) to a 10x3 table; return the
    table after each step and the program.

    With ``regularizer`` (``make_opt`` then takes it), weight decay: on the sparse gradient
    through the optimizer's ``regularization``; on the dense path the decay of the touched
    rows only, added to the fed gradient by hand (what decay of a sparse gradient means)."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        table = LayerHelper("emb").create_parameter(
            fluid.ParamAttr(name="table", initializer=NumpyArrayInitializer(TABLE)),
            [10, 3], "float64")
        grad = fluid.layers.data(name="g", shape=[10, 3], dtype="float64",
                                 append_batch_size=False,
                                 type="selected_rows" if sparse else "lod_tensor")
        opt = make_opt() if regularizer is None else make_opt(regularizer if sparse else None)
        opt.apply_gradients([(table, grad)])
    main.verify()
    scope, exe = fluid.Scope(), fluid.Executor()
    exe.run(startup, scope=scope)
    out = []
    for rows, seed in SPARSE_STEPS:
        g = _sparse_grad(rows, seed)
        if sparse:
            feed = g
        elif regularizer is None:
            feed = g.to_dense().numpy()
        else:
            w = np.array(scope.find_var("table").get_tensor())
            touched = np.zeros((10, 1))
            touched[sorted(set(rows))] = 1.0
            decay = regularizer._regularization_coeff * (
                w if isinstance(regularizer, fluid.regularizer.L2Decay) else np.sign(w))
            feed = g.to_dense().numpy() + touched * decay
        exe.run(main, feed={"g": feed}, scope=scope)
        out.append(np.array(scope.find_var("table").get_tensor()))
    return out, main


SPARSE_CASES = {
    "sgd": lambda: O.SGD(learning_rate=0.1),
    "momentum": lambda: O.Momentum(learning_rate=0.1, momentum=0.9),
    "adam": lambda: O.Adam(learning_rate=0.1),
    "adagrad": lambda: O.Adagrad(learning_rate=0.1),
    "rmsprop": lambda: O.RMSProp(learning_rate=0.1, momentum=0.5, centered=True),
}


@pytest.mark.parametrize("name", sorted(SPARSE_CASES))
def test_sparse_grad_equals_dense(name):
    sparse, _ = _run_table(SPARSE_CASES[name], sparse=True)
    dense, _ = _run_table(SPARSE_CASES[name], sparse=False)
    for t, (s, d) in enumerate(zip(sparse, dense)):
        np.testing.assert_allclose(s, d, rtol=1e-12, atol=1e-12, err_msg=f"step {t + 1}")
    assert not np.allclose(sparse[-1], TABLE)


def test_lazy_adam_updates_only_present_rows():
    lr, b1, b2, eps = 0.1, 0.9, 0.999, 1e-8
    got, _ = _run_table(lambda: O.Adam(learning_rate=lr, lazy_mode=True), sparse=True)
    p, m1, m2 = TABLE.copy(), np.zeros_like(TABLE), np.zeros_like(TABLE)
    for t, (rows, seed) in enumerate(SPARSE_STEPS, 1):
        g = _sparse_grad(rows, seed).merged()
        lr_t = lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
        for r, v in zip(g.rows.tolist(), g.value.numpy()):
            m1[r] = b1 * m1[r] + (1 - b1) * v
            m2[r] = b2 * m2[r] + (1 - b2) * v * v
            p[r] -= lr_t * m1[r] / (np.sqrt(m2[r]) + eps)
        np.testing.assert_allclose(got[t - 1], p, rtol=2e-5, err_msg=f"step {t}")
    # Row 7 had a gradient only at step 1: lazy mode leaves it alone afterwards.
    np.testing.assert_array_equal(got[0][7], got[2][7])
    non_lazy, _ = _run_table(lambda: O.Adam(learning_rate=lr), sparse=True)
    assert not np.allclose(non_lazy[0][7], non_lazy[2][7])


# ---------------------------------------------------------------------- errors


def test_bad_arguments():
    with pytest.raises(TypeError, match="momentum"):
        O.Momentum(learning_rate=0.1, momentum="0.9")
    with pytest.raises(ValueError, match="beta1"):
        O.Adam(beta1=1.0)
    with pytest.raises(TypeError, match="learning_rate"):
        O.Adagrad(learning_rate="0.1")


def test_state_shape_mismatch_is_reported():
    main = fluid.Program()
    block = main.global_block()
    p = block.create_parameter(name="p", shape=[3, 4], dtype="float32")
    g = block.create_var(name="g", shape=[3, 4], dtype="float32")
    v = block.create_var(name="v", shape=[4, 3], dtype="float32")
    lr = block.create_var(name="lr", shape=[1], dtype="float32")
    with pytest.raises(ValueError, match="momentum: Velocity has shape"):
        block.append_op("momentum", inputs={"Param": p, "Grad": g, "Velocity": v,
                                            "LearningRate": lr},
                        outputs={"ParamOut": p, "VelocityOut": v})


# ---------------------------------------------------------------------- sparse weight decay


@pytest.mark.parametrize("reg", ["l2", "l1"])
@pytest.mark.parametrize("name", ["sgd", "momentum", "adam"])
def test_weight_decay_on_a_sparse_gradient_decays_the_touched_rows(name, reg):
    regularizer = (fluid.regularizer.L2Decay(0.3) if reg == "l2"
                   else fluid.regularizer.L1Decay(0.3))
    makers = {"sgd": lambda r: O.SGD(learning_rate=0.1, regularization=r),
              "momentum": lambda r: O.Momentum(learning_rate=0.1, momentum=0.9,
                                               regularization=r),
              "adam": lambda r: O.Adam(learning_rate=0.1, regularization=r)}
    sparse, program = _run_table(makers[name], sparse=True, regularizer=regularizer)
    dense, _ = _run_table(makers[name], sparse=False, regularizer=regularizer)
    for t, (s, d) in enumerate(zip(sparse, dense)):
        np.testing.assert_allclose(s, d, rtol=1e-12, atol=1e-12, err_msg=f"step {t + 1}")
    regularized = program.global_block().var("g@REGULARIZED")
    assert regularized.type == "selected_rows"  # the update stays sparse
    if name == "sgd":  # rows no step touched keep their values
        for r in (2, 4, 5, 6, 8):
            np.testing.assert_array_equal(sparse[-1][r], TABLE[r])


def test_sparse_embedding_with_l2_decay_equals_the_dense_rule_on_touched_rows():
    """``embedding(is_sparse=True)`` whose ParamAttr carries L2Decay, trained with SGD:
    each step, a touched row r moves by lr * (dL/dW[r] + coeff * W[r]); the others stay."""
    lr, coeff = 0.5, 0.2
    steps = [[[1], [4], [1], [8]], [[4], [4], [0]], [[9], [1]]]
    weights = np.random.RandomState(6).uniform(-1, 1, (4, 3))
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        ids = fluid.layers.data(name="ids", shape=[1], dtype="int64")
        wts = fluid.layers.data(name="wts", shape=[3], dtype="float64")
        emb = fluid.layers.embedding(ids, size=[10, 3], is_sparse=True, dtype="float64",
                                     param_attr=fluid.ParamAttr(
                                         name="emb", initializer=NumpyArrayInitializer(TABLE),
                                         regularizer=fluid.regularizer.L2Decay(coeff)))
        loss = fluid.layers.reduce_sum(fluid.layers.elementwise_mul(emb, wts))
        O.SGD(learning_rate=lr).minimize(loss)
    scope, exe = fluid.Scope(), fluid.Executor()
    exe.run(startup, scope=scope)
    want = TABLE.copy()
    for step in steps:
        w = weights[:len(step)]
        exe.run(main, feed={"ids": np.array(step, "int64"), "wts": w}, scope=scope)
        grad = np.zeros_like(want)
        for (r,), row in zip(step, w):
            grad[r] += row
        touched = sorted({r for (r,) in step})
        grad[touched] += coeff * want[touched]
        want = want - lr * grad
        np.testing.assert_allclose(np.array(scope.find_var("emb").get_tensor()), want,
                                   rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(want[5], TABLE[5])  # never touched, never decayed


def test_adagrad_fills_its_moment_in_the_startup_program_as_fluid():
    # Fluid 1.6: the moment's own fill (0) and, from the update pass, a fill with
    # initial_accumulator_value; the moment starts at that value in both modes
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[3], dtype="float32")
        loss = fluid.layers.mean(fluid.layers.fc(x, size=1, bias_attr=False))
        O.Adagrad(learning_rate=0.1, initial_accumulator_value=0.5).minimize(loss)
    fills = [(op.output("Out")[0], op.attr("value")) for op in startup.global_block().ops
             if op.type == "fill_constant"]
    moment = next(n for n, _ in fills if "moment" in n)
    assert [v for n, v in fills if n == moment] == [0.0, 0.5]
    scope = fluid.Scope()
    fluid.Executor().run(startup, scope=scope)
    np.testing.assert_array_equal(np.array(scope.find_var(moment).get_tensor()),
                                  np.full([3, 1], 0.5, "float32"))
    with fluid.dygraph.guard():
        fc = fluid.dygraph.FC("fc", size=1, bias_attr=False)
        x = fluid.dygraph.to_variable(np.ones([2, 3], "float32"))
        opt = O.Adagrad(learning_rate=0.1, initial_accumulator_value=0.5)
        for _ in range(2):
            loss = fluid.layers.mean(fc(x))
            loss.backward()
            opt.minimize(loss)
            fc.clear_gradients()
        (acc,) = opt._accumulators["moment"].values()
        # 0.5 + two steps of g*g (g = 1 per weight): the initial value is set once
        np.testing.assert_allclose(acc.numpy(), np.full([3, 1], 2.5), rtol=1e-6)
