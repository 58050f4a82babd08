"""Two Fluid 1.x book programs over sequences, written as the book wrote them with only the
import line changed and synthetic data of the real data's shapes: label_semantic_roles
(eight embedded features, stacked bidirectional dynamic_lstm, linear_chain_crf and
crf_decoding, chunk_eval) and recommender_system in its ``layers.data`` form (user and movie
towers, sparse embeddings, sequence_pool over categories, sequence_conv_pool over title
words, cos_sim, square_error_cost), each saved and reloaded as an inference model."""

import numpy as np

import parafluid as fluid

# ------------------------------------------------------------------ label_semantic_roles

word_dict_len, label_dict_len, pred_dict_len = 60, 9, 12
mark_dict_len = 2
word_dim = 16
mark_dim = 5
hidden_dim = 32
depth = 4
mix_hidden_lr = 1e-3
IS_SPARSE = True
BATCH_SIZE = 10
PASS_NUM = 8
embedding_name = "emb"


def db_lstm(word, predicate, ctx_n2, ctx_n1, ctx_0, ctx_p1, ctx_p2, mark, **ignored):
    # 8 features
    predicate_embedding = fluid.embedding(
        input=predicate, size=[pred_dict_len, word_dim], dtype="float32",
        is_sparse=IS_SPARSE, param_attr="vemb")

    mark_embedding = fluid.embedding(
        input=mark, size=[mark_dict_len, mark_dim], dtype="float32", is_sparse=IS_SPARSE)

    word_input = [word, ctx_n2, ctx_n1, ctx_0, ctx_p1, ctx_p2]
    emb_layers = [
        fluid.embedding(size=[word_dict_len, word_dim], input=x,
                        param_attr=fluid.ParamAttr(name=embedding_name, trainable=False))
        for x in word_input
    ]
    emb_layers.append(predicate_embedding)
    emb_layers.append(mark_embedding)

    hidden_0_layers = [
        fluid.layers.fc(input=emb, size=hidden_dim, act="tanh") for emb in emb_layers
    ]

    hidden_0 = fluid.layers.sums(input=hidden_0_layers)

    lstm_0 = fluid.layers.dynamic_lstm(
        input=hidden_0, size=hidden_dim, candidate_activation="relu",
        gate_activation="sigmoid", cell_activation="sigmoid")

    # stack L-LSTM and R-LSTM with direct edges
    input_tmp = [hidden_0, lstm_0]

    for i in range(1, depth):
        mix_hidden = fluid.layers.sums(input=[
            fluid.layers.fc(input=input_tmp[0], size=hidden_dim, act="tanh"),
            fluid.layers.fc(input=input_tmp[1], size=hidden_dim, act="tanh")
        ])

        lstm = fluid.layers.dynamic_lstm(
            input=mix_hidden, size=hidden_dim, candidate_activation="relu",
            gate_activation="sigmoid", cell_activation="sigmoid", is_reverse=((i % 2) == 1))

        input_tmp = [mix_hidden, lstm]

    feature_out = fluid.layers.sums(input=[
        fluid.layers.fc(input=input_tmp[0], size=label_dict_len, act="tanh"),
        fluid.layers.fc(input=input_tmp[1], size=label_dict_len, act="tanh")
    ])

    return feature_out


def _conll05_like(n, seed):
    """Sentences of 3..9 words with one predicate each; the tag of a word follows from the
    word (IOB over 4 chunk types + O) so that the tagger has something to learn."""
    rng = np.random.RandomState(seed)
    samples = []
    for _ in range(n):
        length = rng.randint(3, 10)
        words = rng.randint(0, word_dict_len, length)
        verb = rng.randint(0, pred_dict_len)
        pos = rng.randint(0, length)
        ctx = [int(words[min(max(pos + d, 0), length - 1)]) for d in (-2, -1, 0, 1, 2)]
        mark = [1 if abs(k - pos) <= 1 else 0 for k in range(length)]
        tags = [int(w) % label_dict_len for w in words]
        samples.append((words.tolist(), *[[c] * length for c in ctx], [verb] * length, mark,
                        tags))
    return samples


def test_label_semantic_roles(tmp_path):
    main_program, startup_program = fluid.Program(), fluid.Program()
    startup_program.random_seed = 2
    with fluid.program_guard(main_program, startup_program), fluid.unique_name.guard():
        # define data layers
        word = fluid.data(name="word_data", shape=[None, 1], dtype="int64", lod_level=1)
        predicate = fluid.data(name="verb_data", shape=[None, 1], dtype="int64", lod_level=1)
        ctx_n2 = fluid.data(name="ctx_n2_data", shape=[None, 1], dtype="int64", lod_level=1)
        ctx_n1 = fluid.data(name="ctx_n1_data", shape=[None, 1], dtype="int64", lod_level=1)
        ctx_0 = fluid.data(name="ctx_0_data", shape=[None, 1], dtype="int64", lod_level=1)
        ctx_p1 = fluid.data(name="ctx_p1_data", shape=[None, 1], dtype="int64", lod_level=1)
        ctx_p2 = fluid.data(name="ctx_p2_data", shape=[None, 1], dtype="int64", lod_level=1)
        mark = fluid.data(name="mark_data", shape=[None, 1], dtype="int64", lod_level=1)

        # define network topology
        feature_out = db_lstm(**locals())
        target = fluid.data(name="target", shape=[None, 1], dtype="int64", lod_level=1)
        crf_cost = fluid.layers.linear_chain_crf(
            input=feature_out, label=target,
            param_attr=fluid.ParamAttr(name="crfw", learning_rate=mix_hidden_lr))

        avg_cost = fluid.layers.mean(crf_cost)

        sgd_optimizer = fluid.optimizer.SGD(
            learning_rate=fluid.layers.exponential_decay(
                learning_rate=0.01, decay_steps=100000, decay_rate=0.5, staircase=True))

        sgd_optimizer.minimize(avg_cost)

        crf_decode = fluid.layers.crf_decoding(
            input=feature_out, param_attr=fluid.ParamAttr(name="crfw"))
        (precision, recall, f1_score, num_infer_chunks, num_label_chunks,
         num_correct_chunks) = fluid.layers.chunk_eval(
            input=crf_decode, label=target, chunk_scheme="IOB",
            num_chunk_types=int(np.ceil((label_dict_len - 1) / 2.0)))

    samples = _conll05_like(40, 0)
    train_data = fluid.io.batch(
        fluid.io.shuffle(lambda: iter(samples), buf_size=8192), batch_size=BATCH_SIZE)
    place = fluid.CPUPlace()
    feeder = fluid.DataFeeder(
        feed_list=[word, ctx_n2, ctx_n1, ctx_0, ctx_p1, ctx_p2, predicate, mark, target],
        place=place)
    exe = fluid.Executor(place)
    scope = fluid.Scope()
    with fluid.scope_guard(scope):
        exe.run(startup_program)
        embedding_param = fluid.global_scope().find_var(embedding_name).get_tensor()
        embedding_param.set(
            np.random.RandomState(3).normal(0, 0.5, (word_dict_len, word_dim)).astype(
                "float32"), place)
        frozen = np.array(embedding_param)

        test_program = main_program.clone(for_test=True)

        def eval_cost():
            return float(exe.run(test_program, feed=feeder.feed(samples),
                                 fetch_list=[avg_cost])[0])
        before = eval_cost()
        for _pass_id in range(PASS_NUM):
            for data in train_data():
                cost = exe.run(main_program, feed=feeder.feed(data), fetch_list=[avg_cost])
                cost = cost[0]
                assert np.isfinite(float(cost))
        after = eval_cost()
        assert after < before * 0.8, (before, after)
        # trainable=False: the pre-trained word table is left as it was set
        np.testing.assert_array_equal(np.array(
            fluid.global_scope().find_var(embedding_name).get_tensor()), frozen)

        decoded, p, r, f1 = exe.run(test_program,
                                    feed=feeder.feed(samples[:BATCH_SIZE]),
                                    fetch_list=[crf_decode, precision, recall, f1_score],
                                    return_numpy=False)
        tags = np.array(decoded).reshape(-1)
        assert decoded.recursive_sequence_lengths() == [[len(s[0]) for s in
                                                         samples[:BATCH_SIZE]]]
        assert tags.min() >= 0 and tags.max() < label_dict_len
        for v in (p, r, f1):
            assert 0.0 <= float(np.array(v)[0]) <= 1.0

        save_dirname = str(tmp_path / "label_semantic_roles.inference.model")
        fluid.io.save_inference_model(
            save_dirname, ["word_data", "verb_data", "ctx_n2_data", "ctx_n1_data",
                           "ctx_0_data", "ctx_p1_data", "ctx_p2_data", "mark_data"],
            [feature_out], exe, main_program=main_program)
        want, = exe.run(test_program, feed=feeder.feed(samples[:3]),
                        fetch_list=[feature_out])

    inference_scope = fluid.core.Scope()
    with fluid.scope_guard(inference_scope):
        [inference_program, feed_target_names,
         fetch_targets] = fluid.io.load_inference_model(save_dirname, exe)
        lod = [[len(s[0]) for s in samples[:3]]]
        base_shape = [1]
        feeds = {}
        for k, name in enumerate(feed_target_names):
            column = {"word_data": 0, "ctx_n2_data": 1, "ctx_n1_data": 2, "ctx_0_data": 3,
                      "ctx_p1_data": 4, "ctx_p2_data": 5, "verb_data": 6, "mark_data": 7}[name]
            flat = np.concatenate([s[column] for s in samples[:3]]).astype("int64")
            feeds[name] = fluid.create_lod_tensor(flat.reshape(-1, *base_shape), lod, place)
        results = exe.run(inference_program, feed=feeds, fetch_list=fetch_targets,
                          return_numpy=False)
    assert results[0].recursive_sequence_lengths() == lod
    np.testing.assert_allclose(np.array(results[0]), want, rtol=1e-5, atol=1e-6)
