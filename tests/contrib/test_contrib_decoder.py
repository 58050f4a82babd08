"""fluid.contrib.decoder: a machine-translation program written as Fluid's decoder demo
writes it: an encoder, a StateCell, a TrainingDecoder that trains on a toy task, and a
BeamSearchDecoder over the trained parameters whose sentences match a numpy beam search."""

import numpy as np
import pytest

import parafluid as fluid
from parafluid.contrib.decoder.beam_search_decoder import (
    BeamSearchDecoder,
    InitState,
    StateCell,
    TrainingDecoder,
)

L = fluid.layers
V, E, H, BEAM, START, END, MAX_LEN = 8, 6, 10, 2, 0, 1, 6


def _emb(ids, name):
    return L.embedding(input=ids, size=[V, E], dtype="float32", is_sparse=True,
                       param_attr=fluid.ParamAttr(name=name))


def encoder():
    src = L.data(name="src_word_id", shape=[1], dtype="int64", lod_level=1)
    hidden = L.fc(input=_emb(src, "src_emb"), size=H, act="tanh",
                  param_attr=fluid.ParamAttr(name="enc_w"), bias_attr=fluid.ParamAttr(
                      name="enc_b"))
    return L.sequence_last_step(input=hidden)


def decoder_state_cell(context):
    h = InitState(init=context, need_reorder=True)
    state_cell = StateCell(inputs={"x": None}, states={"h": h}, out_state="h")

    @state_cell.state_updater
    def updater(state_cell):
        current_word = state_cell.get_input("x")
        prev_h = state_cell.get_state("h")
        h = L.fc(input=[prev_h, current_word], size=H, act="tanh",
                 param_attr=[fluid.ParamAttr(name="cell_wh"), fluid.ParamAttr(name="cell_wx")],
                 bias_attr=fluid.ParamAttr(name="cell_b"))
        state_cell.set_state("h", h)

    return state_cell


def _score(h):
    return L.fc(input=h, size=V, act="softmax", param_attr=fluid.ParamAttr(name="out_w"),
                bias_attr=fluid.ParamAttr(name="out_b"))


def decoder_train(state_cell):
    trg = L.data(name="target_language_word", shape=[1], dtype="int64", lod_level=1)
    trg_embedding = _emb(trg, "trg_emb")
    decoder = TrainingDecoder(state_cell)
    with decoder.block():
        current_word = decoder.step_input(trg_embedding)
        decoder.state_cell.compute_state(inputs={"x": current_word})
        current_score = _score(decoder.state_cell.get_state("h"))
        decoder.state_cell.update_states()
        decoder.output(current_score)
    return decoder()


def decoder_decode(state_cell):
    init_ids = L.data(name="init_ids", shape=[1], dtype="int64", lod_level=2)
    init_scores = L.data(name="init_scores", shape=[1], dtype="float32", lod_level=2)
    decoder = BeamSearchDecoder(state_cell, init_ids, init_scores, target_dict_dim=V,
                                word_dim=E, max_len=MAX_LEN, beam_size=BEAM, end_id=END)
    with decoder.block():
        prev_ids = decoder.read_array(init=init_ids, is_ids=True)
        prev_scores = decoder.read_array(init=init_scores, is_scores=True)
        prev_ids_embedding = _emb(prev_ids, "trg_emb")
        prev_state = decoder.state_cell.get_state("h")
        prev_state_expanded = L.sequence_expand(prev_state, prev_scores)
        decoder.state_cell.set_state("h", prev_state_expanded)
        decoder.state_cell.compute_state(inputs={"x": prev_ids_embedding})
        current_state = decoder.state_cell.get_state("h")
        current_state_with_lod = L.lod_reset(x=current_state, y=prev_scores)
        scores = _score(current_state_with_lod)
        topk_scores, topk_indices = L.topk(scores, k=BEAM)
        accu_scores = L.elementwise_add(x=L.log(x=topk_scores),
                                        y=L.reshape(prev_scores, shape=[-1]), axis=0)
        selected_ids, selected_scores = L.beam_search(prev_ids, prev_scores, topk_indices,
                                                      accu_scores, BEAM, end_id=END, level=0)
        with L.Switch() as switch:
            with switch.case(L.is_empty(selected_ids)):
                decoder.early_stop()
            with switch.default():
                decoder.state_cell.update_states()
                decoder.update_array(prev_ids, selected_ids)
                decoder.update_array(prev_scores, selected_scores)
    return decoder()


def _lod_tensor(seqs, dtype="int64"):
    flat = np.array([t for s in seqs for t in s], dtype).reshape(-1, 1)
    return fluid.create_lod_tensor(flat, [[len(s) for s in seqs]], fluid.CPUPlace())


def _target(src):
    """The toy translation: the source's last word, the word after it, END."""
    last = src[-1]
    return [last, 2 + (last - 1) % (V - 2), END]


def _batch(rng, n=4):
    srcs = [[int(t) for t in rng.randint(2, V, rng.randint(2, 4))] for _ in range(n)]
    trgs = [_target(s) for s in srcs]
    return {"src_word_id": _lod_tensor(srcs),
            "target_language_word": _lod_tensor([[START] + t[:-1] for t in trgs]),
            "target_language_next_word": _lod_tensor(trgs)}, srcs


def _numpy_beam_search(context, w, beam=BEAM, topk=BEAM, step_ctx=None):
    """Per source: the finished hypotheses (tokens, score), best first. ``step_ctx``: a
    per-source input the cell also reads at every step (through ``w["cell_wc"]``)."""
    out = []
    for src, s0 in enumerate(context):
        extra = 0.0 if step_ctx is None else step_ctx[src] @ w["cell_wc"]
        hyps = [([START], 0.0, s0, False)]
        for _ in range(MAX_LEN):
            cands = []
            for tokens, score, state, ended in hyps:
                if ended:
                    cands.append((score, tokens, state, True))
                    continue
                new = np.tanh(state @ w["cell_wh"] + w["trg_emb"][tokens[-1]] @ w["cell_wx"]
                              + extra + w["cell_b"])
                logits = new @ w["out_w"] + w["out_b"]
                p = np.exp(logits - logits.max())
                p /= p.sum()
                for tok in np.argsort(-p, kind="stable")[:topk]:
                    cands.append((score + np.log(p[tok]), tokens + [int(tok)], new,
                                  int(tok) == END))
            cands.sort(key=lambda c: -c[0])
            top = cands[:beam]
            if all(c[3] for c in top) and all(h[3] for h in hyps):
                break
            hyps = [(c[1], c[0], c[2], c[3]) for c in top]
        out.append(sorted(((h[0], h[1]) for h in hyps), key=lambda h: -h[1]))
    return out


def _check_sentences(got_ids, got_scores, want):
    src_lod, sent_lod = got_ids.lod()
    flat_ids = np.array(got_ids).reshape(-1)
    flat_scores = np.array(got_scores).reshape(-1)
    assert len(src_lod) - 1 == len(want)
    for s, sentences in enumerate(want):
        got = [(flat_ids[sent_lod[k]:sent_lod[k + 1]].tolist(), flat_scores[sent_lod[k + 1] - 1])
               for k in range(src_lod[s], src_lod[s + 1])]
        assert [g[0] for g in got] == [w[0] for w in sentences]
        np.testing.assert_allclose([g[1] for g in got], [w[1] for w in sentences], rtol=1e-4,
                                   atol=1e-5)


def test_training_decoder_trains_and_beam_search_decoder_decodes_with_its_parameters():
    place = fluid.CPUPlace()
    exe, scope = fluid.Executor(place), fluid.Scope()
    train, train_start = fluid.Program(), fluid.Program()
    train.random_seed = train_start.random_seed = 1
    with fluid.program_guard(train, train_start), fluid.unique_name.guard():
        context = encoder()
        rnn_out = decoder_train(decoder_state_cell(context))
        label = L.data(name="target_language_next_word", shape=[1], dtype="int64",
                       lod_level=1)
        avg_cost = L.mean(L.cross_entropy(input=rnn_out, label=label))
        fluid.optimizer.Adam(learning_rate=0.05).minimize(avg_cost)
    assert any(op.type == "while" for op in train.global_block().ops)
    rng = np.random.RandomState(0)
    with fluid.scope_guard(scope):
        exe.run(train_start)
        losses = []
        for _ in range(60):
            feed, _ = _batch(rng)
            losses.append(float(exe.run(train, feed=feed, fetch_list=[avg_cost])[0]))
    assert np.mean(losses[-5:]) < 0.3 * np.mean(losses[:5]), losses

    decode, decode_start = fluid.Program(), fluid.Program()
    with fluid.program_guard(decode, decode_start), fluid.unique_name.guard():
        context = encoder()
        translation_ids, translation_scores = decoder_decode(decoder_state_cell(context))
    decode.verify()
    feed, srcs = _batch(np.random.RandomState(7), n=3)
    n = len(srcs)
    init_lod = [[1] * n, [1] * n]
    feed = {"src_word_id": feed["src_word_id"],
            "init_ids": fluid.create_lod_tensor(np.full((n, 1), START, "int64"), init_lod,
                                                place),
            "init_scores": fluid.create_lod_tensor(np.zeros((n, 1), "float32"), init_lod,
                                                   place)}
    with fluid.scope_guard(scope):  # the trained parameters
        ids, scores, ctx = exe.run(decode, feed=feed, return_numpy=False,
                                   fetch_list=[translation_ids, translation_scores, context])
        weights = {n: np.array(scope.find_var(n).get_tensor())
                   for n in ("cell_wh", "cell_wx", "cell_b", "out_w", "out_b", "trg_emb")}
    want = _numpy_beam_search(np.array(ctx), weights)
    _check_sentences(ids, scores, want)
    # the trained model translates: the best sentence of a source is START and its target
    best = [sentences[0][0] for sentences in want]
    assert sum(b == [START] + _target(s) for b, s in zip(best, srcs)) >= 2, (best, srcs)


def test_beam_search_decoder_decode_builds_the_standard_step():
    place = fluid.CPUPlace()
    main, start = fluid.Program(), fluid.Program()
    main.random_seed = start.random_seed = 3
    with fluid.program_guard(main, start), fluid.unique_name.guard():
        context = L.data(name="context", shape=[H], dtype="float32")
        source_vec = L.data(name="source_vec", shape=[4], dtype="float32")
        init_ids = L.data(name="init_ids", shape=[1], dtype="int64", lod_level=2)
        init_scores = L.data(name="init_scores", shape=[1], dtype="float32", lod_level=2)
        cell = StateCell(inputs={"x": None, "src": None},
                         states={"h": InitState(init=context)}, out_state="h")

        @cell.state_updater
        def updater(cell):
            h = L.fc(input=[cell.get_state("h"), cell.get_input("x"), cell.get_input("src")],
                     size=H, act="tanh",
                     param_attr=[fluid.ParamAttr(name=n) for n in ("cell_wh", "cell_wx",
                                                                   "cell_wc")],
                     bias_attr=fluid.ParamAttr(name="cell_b"))
            cell.set_state("h", h)

        # "src" is read per step from an array (input_var_dict), "x" is the word embedding
        decoder = BeamSearchDecoder(state_cell=cell, init_ids=init_ids,
                                    init_scores=init_scores, target_dict_dim=V, word_dim=E,
                                    input_var_dict={"src": source_vec}, topk_size=3,
                                    sparse_emb=False, max_len=MAX_LEN, beam_size=BEAM,
                                    end_id=END)
        decoder.decode()
        ids, scores = decoder()
    # the standard step's own parameters: its embedding and its softmax fc
    sub = main.block(1)
    emb_w = next(op.input("W")[0] for op in sub.ops if op.type == "lookup_table")
    out_w = next(op.input("Y")[0] for op in sub.ops
                 if op.type == "mul" and main.global_block().var(op.input("Y")[0]).shape[1] == V)
    out_b = out_w.replace(".w_0", ".b_0")
    rng = np.random.RandomState(4)
    ctx = rng.normal(0, 1, (2, H)).astype("float32")
    src = rng.normal(0, 1, (2, 4)).astype("float32")
    exe, scope = fluid.Executor(place), fluid.Scope()
    with fluid.scope_guard(scope):
        exe.run(start)
        got = exe.run(main, return_numpy=False, fetch_list=[ids, scores], feed={
            "context": ctx, "source_vec": src,
            "init_ids": fluid.create_lod_tensor(np.full((2, 1), START, "int64"),
                                                [[1, 1], [1, 1]], place),
            "init_scores": fluid.create_lod_tensor(np.zeros((2, 1), "float32"),
                                                   [[1, 1], [1, 1]], place)})
        names = {"cell_wh": "cell_wh", "cell_wx": "cell_wx", "cell_wc": "cell_wc",
                 "cell_b": "cell_b", "out_w": out_w, "out_b": out_b, "trg_emb": emb_w}
        w = {k: np.array(scope.find_var(n).get_tensor()) for k, n in names.items()}
    _check_sentences(*got, _numpy_beam_search(ctx, w, topk=3, step_ctx=src))


def test_decoders_say_what_is_wrong():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        ctx = L.data(name="ctx", shape=[H], dtype="float32")
        with pytest.raises(ValueError, match="init_boot"):
            InitState()
        with pytest.raises(ValueError, match="out_state 'c' is not one of the states"):
            StateCell(inputs={"x": None}, states={"h": InitState(init=ctx)}, out_state="c")
        cell = decoder_state_cell(ctx)
        decoder = TrainingDecoder(cell)
        with pytest.raises(ValueError, match="step_input must be used inside"):
            decoder.step_input(ctx)
        with pytest.raises(ValueError, match="already in a decoder"):
            TrainingDecoder(cell)
        h0 = InitState(init_boot=ctx, shape=[-1, 3], value=0.5)
        assert h0.value.shape == (-1, 3)
