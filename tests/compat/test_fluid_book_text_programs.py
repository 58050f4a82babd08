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
        assert after < before * 0.9, (before, after)  # Fluid's seeded initial weights
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
        for name in feed_target_names:
            column = {"word_data": 0, "ctx_n2_data": 1, "ctx_n1_data": 2, "ctx_0_data": 3,
                      "ctx_p1_data": 4, "ctx_p2_data": 5, "verb_data": 6, "mark_data": 7}[name]
            flat = np.concatenate([s[column] for s in samples[:3]]).astype("int64")
            feeds[name] = fluid.create_lod_tensor(flat.reshape(-1, *base_shape), lod, place)
        results = exe.run(inference_program, feed=feeds, fetch_list=fetch_targets,
                          return_numpy=False)
    assert results[0].recursive_sequence_lengths() == lod
    np.testing.assert_allclose(np.array(results[0]), want, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------ recommender_system

layers, nets = fluid.layers, fluid.nets
SGDOptimizer = fluid.optimizer.SGDOptimizer
Executor = fluid.Executor
framework = fluid.framework

USR_DICT_SIZE, USR_AGE_DICT_SIZE, USR_JOB_DICT_SIZE = 40, 7, 21
MOV_DICT_SIZE, CATEGORY_DICT_SIZE, MOV_TITLE_DICT_SIZE = 60, 18, 80


def get_usr_combined_features():
    uid = layers.data(name="user_id", shape=[1], dtype="int64")

    usr_emb = layers.embedding(
        input=uid, dtype="float32", size=[USR_DICT_SIZE, 32], param_attr="user_table",
        is_sparse=IS_SPARSE)

    usr_fc = layers.fc(input=usr_emb, size=32)

    USR_GENDER_DICT_SIZE = 2

    usr_gender_id = layers.data(name="gender_id", shape=[1], dtype="int64")

    usr_gender_emb = layers.embedding(
        input=usr_gender_id, size=[USR_GENDER_DICT_SIZE, 16], param_attr="gender_table",
        is_sparse=IS_SPARSE)

    usr_gender_fc = layers.fc(input=usr_gender_emb, size=16)

    usr_age_id = layers.data(name="age_id", shape=[1], dtype="int64")

    usr_age_emb = layers.embedding(
        input=usr_age_id, size=[USR_AGE_DICT_SIZE, 16], is_sparse=IS_SPARSE,
        param_attr="age_table")

    usr_age_fc = layers.fc(input=usr_age_emb, size=16)

    usr_job_id = layers.data(name="job_id", shape=[1], dtype="int64")

    usr_job_emb = layers.embedding(
        input=usr_job_id, size=[USR_JOB_DICT_SIZE, 16], param_attr="job_table",
        is_sparse=IS_SPARSE)

    usr_job_fc = layers.fc(input=usr_job_emb, size=16)

    concat_embed = layers.concat(
        input=[usr_fc, usr_gender_fc, usr_age_fc, usr_job_fc], axis=1)

    usr_combined_features = layers.fc(input=concat_embed, size=200, act="tanh")

    return usr_combined_features


def get_mov_combined_features():
    mov_id = layers.data(name="movie_id", shape=[1], dtype="int64")

    mov_emb = layers.embedding(
        input=mov_id, dtype="float32", size=[MOV_DICT_SIZE, 32], param_attr="movie_table",
        is_sparse=IS_SPARSE)

    mov_fc = layers.fc(input=mov_emb, size=32)

    category_id = layers.data(name="category_id", shape=[1], dtype="int64", lod_level=1)

    mov_categories_emb = layers.embedding(
        input=category_id, size=[CATEGORY_DICT_SIZE, 32], is_sparse=IS_SPARSE)

    mov_categories_hidden = layers.sequence_pool(input=mov_categories_emb, pool_type="sum")

    mov_title_id = layers.data(name="movie_title", shape=[1], dtype="int64", lod_level=1)

    mov_title_emb = layers.embedding(
        input=mov_title_id, size=[MOV_TITLE_DICT_SIZE, 32], is_sparse=IS_SPARSE)

    mov_title_conv = nets.sequence_conv_pool(
        input=mov_title_emb, num_filters=32, filter_size=3, act="tanh", pool_type="sum")

    concat_embed = layers.concat(
        input=[mov_fc, mov_categories_hidden, mov_title_conv], axis=1)

    mov_combined_features = layers.fc(input=concat_embed, size=200, act="tanh")

    return mov_combined_features


def model():
    usr_combined_features = get_usr_combined_features()
    mov_combined_features = get_mov_combined_features()

    # need cos sim
    inference = layers.cos_sim(X=usr_combined_features, Y=mov_combined_features)
    scale_infer = layers.scale(x=inference, scale=5.0)

    label = layers.data(name="score", shape=[1], dtype="float32")
    square_cost = layers.square_error_cost(input=scale_infer, label=label)
    avg_cost = layers.mean(square_cost)

    return scale_infer, avg_cost


def _movielens_like(n, seed):
    """(user, gender, age, job, movie, categories, title words, [score]) with a score that
    follows from the user and the movie."""
    rng = np.random.RandomState(seed)
    taste = rng.uniform(-1, 1, USR_DICT_SIZE)
    kind = rng.uniform(-1, 1, MOV_DICT_SIZE)
    out = []
    for _ in range(n):
        user, movie = rng.randint(0, USR_DICT_SIZE), rng.randint(0, MOV_DICT_SIZE)
        out.append((user, rng.randint(0, 2), rng.randint(0, USR_AGE_DICT_SIZE),
                    rng.randint(0, USR_JOB_DICT_SIZE), movie,
                    rng.randint(0, CATEGORY_DICT_SIZE, rng.randint(1, 4)).tolist(),
                    rng.randint(0, MOV_TITLE_DICT_SIZE, rng.randint(1, 6)).tolist(),
                    [float(3 + 2 * taste[user] * kind[movie])]))
    return out


def test_recommender_system(tmp_path):
    BATCH_SIZE = 32
    samples, tests = _movielens_like(128, 0), _movielens_like(32, 1)
    main_program, startup_program = fluid.Program(), fluid.Program()
    startup_program.random_seed = 4
    with fluid.program_guard(main_program, startup_program), fluid.unique_name.guard():
        scale_infer, avg_cost = model()

        # test program
        test_program = fluid.default_main_program().clone(for_test=True)

        sgd_optimizer = SGDOptimizer(learning_rate=0.2)
        sgd_optimizer.minimize(avg_cost)

    place = fluid.CPUPlace()
    exe = Executor(place)

    train_reader = fluid.io.batch(
        fluid.io.shuffle(lambda: iter(samples), buf_size=8192), batch_size=BATCH_SIZE)
    test_reader = fluid.io.batch(lambda: iter(tests), batch_size=BATCH_SIZE)

    feeding = {"user_id": 0, "gender_id": 1, "age_id": 2, "job_id": 3, "movie_id": 4,
               "category_id": 5, "movie_title": 6, "score": 7}

    def func_feed(feeding, data):
        feed_tensors = {}
        for (key, idx) in feeding.items():
            tensor = fluid.LoDTensor()
            if key != "category_id" and key != "movie_title":
                if key == "score":
                    numpy_data = np.array(list(map(lambda x: x[idx], data))).astype("float32")
                else:
                    numpy_data = np.array(list(map(lambda x: x[idx], data))).astype("int64")
            else:
                numpy_data = list(map(lambda x: np.array(x[idx]).astype("int64"), data))
                lod_info = [len(item) for item in numpy_data]
                offset = 0
                lod = [offset]
                for item in lod_info:
                    offset += item
                    lod.append(offset)
                numpy_data = np.concatenate(numpy_data, axis=0)
                tensor.set_lod([lod])

            numpy_data = numpy_data.reshape([numpy_data.shape[0], 1])
            tensor.set(numpy_data, place)
            feed_tensors[key] = tensor
        return feed_tensors

    def test_cost():
        avg_cost_set = []
        for test_data in test_reader():
            avg_cost_np = exe.run(program=test_program, feed=func_feed(feeding, test_data),
                                  fetch_list=[avg_cost])
            avg_cost_set.append(avg_cost_np[0])
        return np.array(avg_cost_set).mean()

    save_dirname = str(tmp_path / "recommender_system.inference.model")
    scope = fluid.Scope()
    with fluid.scope_guard(scope):
        exe.run(startup_program)
        before = test_cost()
        PASS_NUM = 6
        for _pass_id in range(PASS_NUM):
            for _batch_id, data in enumerate(train_reader()):
                # train a mini-batch
                outs = exe.run(program=main_program, feed=func_feed(feeding, data),
                               fetch_list=[avg_cost])
                out = np.array(outs[0])
                assert not np.isnan(float(out[0])), "got NaN loss, training failed."
        after = test_cost()
        assert after < before * 0.7, (before, after)
        fluid.io.save_inference_model(
            save_dirname, ["user_id", "gender_id", "age_id", "job_id", "movie_id",
                           "category_id", "movie_title"], [scale_infer], exe,
            main_program=main_program)
        one = func_feed(feeding, [(1, 1, 0, 10, 23, [10, 8, 9], [19, 40, 29, 7, 78], [4.0])])
        want, = exe.run(test_program, feed=one, fetch_list=[scale_infer])

    inference_scope = fluid.core.Scope()
    with fluid.scope_guard(inference_scope):
        [inference_program, feed_target_names,
         fetch_targets] = fluid.io.load_inference_model(save_dirname, exe)

        # Use the first data from the test set as input
        assert feed_target_names[0] == "user_id"
        user_id = fluid.create_lod_tensor([[np.int64(1)]], [[1]], place)

        assert feed_target_names[1] == "gender_id"
        gender_id = fluid.create_lod_tensor([[np.int64(1)]], [[1]], place)

        assert feed_target_names[2] == "age_id"
        age_id = fluid.create_lod_tensor([[np.int64(0)]], [[1]], place)

        assert feed_target_names[3] == "job_id"
        job_id = fluid.create_lod_tensor([[np.int64(10)]], [[1]], place)

        assert feed_target_names[4] == "movie_id"
        movie_id = fluid.create_lod_tensor([[np.int64(23)]], [[1]], place)

        assert feed_target_names[5] == "category_id"
        category_id = fluid.create_lod_tensor(
            [np.array([10, 8, 9], dtype="int64")], [[3]], place)

        assert feed_target_names[6] == "movie_title"
        movie_title = fluid.create_lod_tensor(
            [np.array([19, 40, 29, 7, 78], dtype="int64")], [[5]], place)

        # Construct feed as a dictionary of {feed_target_name: feed_target_data}
        # and results will contain a list of data corresponding to fetch_targets.
        results = exe.run(inference_program,
                          feed={
                              feed_target_names[0]: user_id,
                              feed_target_names[1]: gender_id,
                              feed_target_names[2]: age_id,
                              feed_target_names[3]: job_id,
                              feed_target_names[4]: movie_id,
                              feed_target_names[5]: category_id,
                              feed_target_names[6]: movie_title
                          },
                          fetch_list=fetch_targets,
                          return_numpy=False)
    inferred = np.array(results[0])
    assert inferred.shape == (1, 1) and abs(float(inferred[0][0])) <= 5.0 + 1e-5
    np.testing.assert_allclose(inferred, want, rtol=1e-5)
