"""beam_search / beam_search_decode: the op semantics on hand-made steps, and a decoder loop
written as Fluid's machine translation chapter writes it (While + tensor arrays +
beam_search + beam_search_decode) on a tiny random model, against a numpy beam search."""

import numpy as np
import pytest

import parafluid as fluid
from parafluid.lod import attach_lod, get_lod
from parafluid.ops.registry import get_op_def

L = fluid.layers
V, E, H, BEAM, END, START, MAX_LEN = 6, 3, 4, 2, 1, 0, 4
RNG = np.random.RandomState(11)
EMB = RNG.normal(0, 1, (V, E)).astype("float32")
WS, WE = RNG.normal(0, 1, (H, H)).astype("float32"), RNG.normal(0, 1, (E, H)).astype("float32")
BS = RNG.normal(0, 0.5, (H,)).astype("float32")
WO, BO = RNG.normal(0, 2, (H, V)).astype("float32"), RNG.normal(0, 1, (V,)).astype("float32")


def _kernel(op, **ins):
    import torch

    t = {k: v if v is None or isinstance(v, list) else torch.as_tensor(v) for k, v in ins.items()}
    return get_op_def(op).kernel(t, {**get_op_def(op).attrs, **ins.pop("attrs", {})}, None)


def test_beam_search_keeps_the_best_per_source_and_a_finished_prefix_offers_itself():
    import torch

    lod = [[0, 2, 3], [0, 1, 2, 3]]  # source 0: prefixes 0, 1; source 1: prefix 2
    pre_ids = attach_lod(torch.tensor([[4], [END], [3]]), lod)
    pre_scores = attach_lod(torch.tensor([[-1.0], [-0.5], [-2.0]]), lod)
    ids = torch.tensor([[2, 5], [3, 4], [1, 2]])
    scores = attach_lod(torch.tensor([[-1.2, -3.0], [-9.0, -9.0], [-2.1, -2.5]]), lod)
    op = get_op_def("beam_search")
    out = op.kernel({"pre_ids": pre_ids, "pre_scores": pre_scores, "ids": ids,
                     "scores": scores}, {**op.attrs, "beam_size": 2, "end_id": END}, None)
    # source 0: the ended prefix 1 (-0.5) beats 2 from prefix 0 (-1.2); its candidates not used
    assert out["selected_ids"].reshape(-1).tolist() == [2, END, 1, 2]
    np.testing.assert_allclose(out["selected_scores"].reshape(-1).tolist(),
                               [-1.2, -0.5, -2.1, -2.5])
    assert get_lod(out["selected_ids"]) == [[0, 2, 3], [0, 1, 2, 4]]
    assert out["parent_idx"].tolist() == [0, 1, 2, 2]


def test_a_source_whose_beams_all_ended_drops_out():
    import torch

    lod = [[0, 2], [0, 1, 2]]
    pre = attach_lod(torch.tensor([[END], [END]]), lod)
    op = get_op_def("beam_search")
    out = op.kernel({"pre_ids": pre, "pre_scores": attach_lod(torch.tensor([[-1.0], [-2.0]]),
                                                              lod),
                     "ids": torch.tensor([[3], [4]]),
                     "scores": attach_lod(torch.tensor([[-0.1], [-0.2]]), lod)},
                    {**op.attrs, "beam_size": 2, "end_id": END}, None)
    assert out["selected_ids"].numel() == 0
    assert get_lod(out["selected_ids"]) == [[0, 2], [0, 0, 0]]


# ----------------------------------------------------------------------------- decoder loop


def _decoder_program():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        init_state = L.data(name="init_state", shape=[H], dtype="float32")
        init_ids = L.data(name="init_ids", shape=[1], dtype="int64", lod_level=2)
        init_scores = L.data(name="init_scores", shape=[1], dtype="float32", lod_level=2)
        counter = L.zeros(shape=[1], dtype="int64", force_cpu=True)
        state_array = L.create_array("float32")
        L.array_write(init_state, array=state_array, i=counter)
        ids_array = L.create_array("int64")
        scores_array = L.create_array("float32")
        L.array_write(init_ids, array=ids_array, i=counter)
        L.array_write(init_scores, array=scores_array, i=counter)
        array_len = L.fill_constant(shape=[1], dtype="int64", value=MAX_LEN)
        cond = L.less_than(x=counter, y=array_len)
        while_op = L.While(cond=cond)
        with while_op.block():
            pre_ids = L.array_read(array=ids_array, i=counter)
            pre_state = L.array_read(array=state_array, i=counter)
            pre_score = L.array_read(array=scores_array, i=counter)
            pre_state_expanded = L.sequence_expand(pre_state, pre_score)
            pre_ids_emb = L.embedding(input=pre_ids, size=[V, E], dtype="float32",
                                      param_attr=fluid.ParamAttr(
                                          name="emb", initializer=_init(EMB)))
            current_state = L.fc(input=[pre_state_expanded, pre_ids_emb], size=H, act="tanh",
                                 param_attr=[fluid.ParamAttr(name="ws", initializer=_init(WS)),
                                             fluid.ParamAttr(name="we", initializer=_init(WE))],
                                 bias_attr=fluid.ParamAttr(name="bs", initializer=_init(BS)))
            current_state_with_lod = L.lod_reset(x=current_state, y=pre_score)
            current_score = L.fc(input=current_state_with_lod, size=V, act="softmax",
                                 param_attr=fluid.ParamAttr(name="wo", initializer=_init(WO)),
                                 bias_attr=fluid.ParamAttr(name="bo", initializer=_init(BO)))
            topk_scores, topk_indices = L.topk(current_score, k=BEAM)
            accu_scores = L.elementwise_add(x=L.log(topk_scores),
                                            y=L.reshape(pre_score, shape=[-1]), axis=0)
            selected_ids, selected_scores = L.beam_search(
                pre_ids, pre_score, topk_indices, accu_scores, BEAM, end_id=END, level=0)
            L.increment(x=counter, value=1, in_place=True)
            L.array_write(current_state, array=state_array, i=counter)
            L.array_write(selected_ids, array=ids_array, i=counter)
            L.array_write(selected_scores, array=scores_array, i=counter)
            length_cond = L.less_than(x=counter, y=array_len)
            finish_cond = L.logical_not(L.is_empty(x=selected_ids))
            L.logical_and(x=length_cond, y=finish_cond, out=cond)
        translation_ids, translation_scores = L.beam_search_decode(
            ids=ids_array, scores=scores_array, beam_size=BEAM, end_id=END)
    return main, startup, translation_ids, translation_scores


def _init(array):
    return fluid.initializer.NumpyArrayInitializer(array)


def _numpy_beam_search(state0):
    """Per source: hypotheses (tokens, score, state, ended), the best BEAM kept each step."""
    out = []
    for s0 in state0:
        hyps = [([START], 0.0, s0, False)]
        for _ in range(MAX_LEN):
            cands = []
            for tokens, score, state, ended in hyps:
                if ended:
                    cands.append((score, tokens, state, True))
                    continue
                new = np.tanh(state @ WS + EMB[tokens[-1]] @ WE + BS)
                logits = new @ WO + BO
                p = np.exp(logits - logits.max())
                p /= p.sum()
                for tok in np.argsort(-p, kind="stable")[:BEAM]:
                    cands.append((score + np.log(p[tok]), tokens + [int(tok)], new,
                                  int(tok) == END))
            cands.sort(key=lambda c: -c[0])  # stable: earlier prefix first on ties
            top = cands[:BEAM]
            if all(c[3] for c in top) and all(h[3] for h in hyps):
                break  # finished: the sentences are the hypotheses before this step
            hyps = [(c[1], c[0], c[2], c[3]) for c in top]
        out.append(sorted(((h[0], h[1]) for h in hyps), key=lambda h: -h[1]))
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_decoder_loop_finds_the_numpy_beams(seed):
    main, startup, ids, scores = _decoder_program()
    main.verify()
    state0 = np.random.RandomState(seed).normal(0, 1, (2, H)).astype("float32")
    place = fluid.CPUPlace()
    init_ids = fluid.create_lod_tensor(np.full((2, 1), START, "int64"), [[1, 1], [1, 1]], place)
    init_scores = fluid.create_lod_tensor(np.zeros((2, 1), "float32"), [[1, 1], [1, 1]], place)
    exe, scope = fluid.Executor(place), fluid.Scope()
    exe.run(startup, scope=scope)
    got_ids, got_scores = exe.run(main, feed={"init_state": state0, "init_ids": init_ids,
                                              "init_scores": init_scores},
                                  fetch_list=[ids, scores], scope=scope, return_numpy=False)
    src_lod, sent_lod = got_ids.lod()
    flat_ids = np.array(got_ids).reshape(-1)
    flat_scores = np.array(got_scores).reshape(-1)
    want = _numpy_beam_search(state0)
    for s, sentences in enumerate(want):
        got = [(flat_ids[sent_lod[k]:sent_lod[k + 1]].tolist(), flat_scores[sent_lod[k + 1] - 1])
               for k in range(src_lod[s], src_lod[s + 1])]
        assert [g[0] for g in got] == [w[0] for w in sentences]
        np.testing.assert_allclose([g[1] for g in got], [w[1] for w in sentences], rtol=1e-5)
