"""Fluid 1.6-style programs, written as their users wrote them (the book's fit-a-line,
recognize_digits with fluid.nets, word2vec N-gram, a sentiment convolution net over LoD ids),
with only the import line changed and synthetic readers of the real data's shapes."""

import os
import random

import numpy as np

import parafluid as fluid


def _reader(samples):
    def reader():
        yield from samples
    return reader


def test_fit_a_line(tmp_path):
    random.seed(0)  # fluid.io.shuffle draws from Python's random: the same order every run
    rng = np.random.RandomState(0)
    true_w = rng.uniform(-1, 1, (13, 1)).astype("float32")
    xs = rng.uniform(-1, 1, (200, 13)).astype("float32")
    samples = [(x, x @ true_w + 0.5) for x in xs]
    train_reader = fluid.io.batch(fluid.io.shuffle(_reader(samples), buf_size=500),
                                  batch_size=20)

    main_program, startup_program = fluid.Program(), fluid.Program()
    startup_program.random_seed = 1
    with fluid.program_guard(main_program, startup_program):
        x = fluid.data(name="x", shape=[None, 13], dtype="float32")
        y = fluid.data(name="y", shape=[None, 1], dtype="float32")
        y_predict = fluid.layers.fc(input=x, size=1, act=None)
        cost = fluid.layers.square_error_cost(input=y_predict, label=y)
        avg_loss = fluid.layers.mean(cost)
        test_program = main_program.clone(for_test=True)
        sgd_optimizer = fluid.optimizer.SGD(learning_rate=0.05)
        sgd_optimizer.minimize(avg_loss)

    place = fluid.CPUPlace()
    exe = fluid.Executor(place)
    scope = fluid.Scope()
    with fluid.scope_guard(scope):
        exe.run(startup_program)
        feeder = fluid.DataFeeder(place=place, feed_list=[x, y])
        first = None
        for _pass_id in range(4):
            for data_train in train_reader():
                avg_loss_value, = exe.run(main_program, feed=feeder.feed(data_train),
                                          fetch_list=[avg_loss])
                first = float(avg_loss_value) if first is None else first  # numpy 2.4: works
        test_loss, = exe.run(test_program, feed=feeder.feed(samples[:20]),
                             fetch_list=[avg_loss])
        want, = exe.run(test_program, feed=feeder.feed(samples[:5]), fetch_list=[y_predict])
        assert float(test_loss) < first / 10
        fluid.io.save_inference_model(str(tmp_path), ["x"], [y_predict], exe,
                                      main_program=main_program)

        infer_exe = fluid.Executor(place)
        inference_scope = fluid.core.Scope()
        with fluid.scope_guard(inference_scope):
            [inference_program, feed_target_names, fetch_targets] = \
                fluid.io.load_inference_model(str(tmp_path), infer_exe)
            results = infer_exe.run(inference_program,
                                    feed={feed_target_names[0]: xs[:5]},
                                    fetch_list=fetch_targets)
    assert fetch_targets[0].name == "save_infer_model/scale_0"
    np.testing.assert_allclose(results[0], want, rtol=1e-6)


def _digits(n, seed):
    """Ten classes, each a bright 7x7 square at its own place in a noisy 28x28 image."""
    rng = np.random.RandomState(seed)
    labels = rng.randint(0, 10, n)
    imgs = rng.uniform(0, 0.3, (n, 1, 28, 28)).astype("float32")
    for i, c in enumerate(labels):
        r, k = divmod(int(c), 4)
        imgs[i, 0, 7 * r:7 * r + 7, 7 * k:7 * k + 7] += 1.0
    return imgs, labels.reshape(-1, 1).astype("int64")


def test_recognize_digits_conv_with_fluid_nets(tmp_path):
    def convolutional_neural_network(img, label):
        conv_pool_1 = fluid.nets.simple_img_conv_pool(
            input=img, filter_size=5, num_filters=8, pool_size=2, pool_stride=2, act="relu")
        conv_pool_1 = fluid.layers.batch_norm(conv_pool_1)
        conv_pool_2 = fluid.nets.simple_img_conv_pool(
            input=conv_pool_1, filter_size=5, num_filters=16, pool_size=2, pool_stride=2,
            act="relu")
        prediction = fluid.layers.fc(input=conv_pool_2, size=10, act="softmax")
        loss = fluid.layers.cross_entropy(input=prediction, label=label)
        avg_loss = fluid.layers.mean(loss)
        acc = fluid.layers.accuracy(input=prediction, label=label)
        return prediction, avg_loss, acc

    main_program, startup_program = fluid.Program(), fluid.Program()
    startup_program.random_seed = 90
    with fluid.program_guard(main_program, startup_program):
        img = fluid.data(name="img", shape=[None, 1, 28, 28], dtype="float32")
        label = fluid.data(name="label", shape=[None, 1], dtype="int64")
        prediction, avg_loss, acc = convolutional_neural_network(img, label)
        test_program = main_program.clone(for_test=True)
        optimizer = fluid.optimizer.Adam(learning_rate=0.01)
        optimizer.minimize(avg_loss)

    place = fluid.CUDAPlace(0) if fluid.core.is_compiled_with_cuda() else fluid.CPUPlace()
    exe = fluid.Executor(place)
    scope = fluid.Scope()
    imgs, labels = _digits(64, 0)
    with fluid.scope_guard(scope):
        exe.run(startup_program)
        losses = []
        for step in range(12):
            batch = slice(16 * (step % 4), 16 * (step % 4) + 16)
            loss_v, = exe.run(main_program, feed={"img": imgs[batch], "label": labels[batch]},
                              fetch_list=[avg_loss])
            losses.append(float(loss_v))
        test_imgs, test_labels = _digits(32, 1)
        acc_metric = fluid.metrics.Accuracy()
        for k in range(2):
            batch = slice(16 * k, 16 * k + 16)
            acc_np, = exe.run(test_program, feed={"img": test_imgs[batch],
                                                  "label": test_labels[batch]},
                              fetch_list=[acc])
            acc_metric.update(value=acc_np, weight=16)
        fluid.io.save_inference_model(str(tmp_path), ["img"], [prediction], exe,
                                      main_program=main_program)
        program, feeds, fetches = fluid.io.load_inference_model(str(tmp_path), exe)
        probs, = exe.run(program, feed={feeds[0]: test_imgs}, fetch_list=fetches)
    assert losses[-1] < losses[0] / 2, losses
    assert acc_metric.eval() > 0.5
    np.testing.assert_allclose(probs.sum(1), 1.0, rtol=1e-5)
    assert (probs.argmax(1) == test_labels[:, 0]).mean() == acc_metric.eval()


def test_word2vec_ngram():
    dict_size, embed_size, hidden_size, n = 40, 16, 32, 5
    rng = np.random.RandomState(3)
    # the next word is a fixed function of the previous one, so the model can learn it
    words = rng.randint(0, dict_size, (128, 4)).astype("int64")
    nxt = ((words[:, 3] * 7 + 1) % dict_size).reshape(-1, 1)

    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = 5
    with fluid.program_guard(main, startup):
        names = ["firstw", "secondw", "thirdw", "forthw"]
        embeds = []
        for name in names:
            word = fluid.data(name=name, shape=[None, 1], dtype="int64")
            embeds.append(fluid.layers.embedding(input=word, size=[dict_size, embed_size],
                                                 dtype="float32", is_sparse=True,
                                                 param_attr="shared_w"))
        next_word = fluid.data(name="nextw", shape=[None, 1], dtype="int64")
        concat_embed = fluid.layers.concat(input=embeds, axis=1)
        hidden1 = fluid.layers.fc(input=concat_embed, size=hidden_size, act="sigmoid")
        predict_word = fluid.layers.fc(input=hidden1, size=dict_size, act="softmax")
        cost = fluid.layers.cross_entropy(input=predict_word, label=next_word)
        avg_cost = fluid.layers.mean(cost)
        fluid.optimizer.Adagrad(learning_rate=0.5).minimize(avg_cost)

    assert len([p for p in main.all_parameters() if p.name == "shared_w"]) == 1
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    feed = {name: words[:, i:i + 1] for i, name in enumerate(names)}
    feed["nextw"] = nxt
    losses = [float(exe.run(main, feed=feed, fetch_list=[avg_cost], scope=scope)[0])
              for _ in range(n * 6)]
    assert np.isfinite(losses).all() and losses[-1] < losses[0] / 2, losses


def test_sentiment_convolution_net_over_lod_ids():
    """understand_sentiment's convolution_net: LoD word ids, sparse embedding,
    fluid.nets.sequence_conv_pool, DataFeeder over a lod_level=1 variable."""
    dict_dim, emb_dim, hid_dim, class_dim = 50, 16, 16, 2
    rng = np.random.RandomState(7)
    samples = []
    for _ in range(48):
        positive = rng.rand() < 0.5
        length = rng.randint(2, 9)
        # positive reviews use words 0-24, negative ones 25-49
        ids = rng.randint(0, 25, length) + (0 if positive else 25)
        samples.append((ids.tolist(), [int(positive)]))

    def convolution_net(data, label):
        emb = fluid.embedding(input=data, size=[dict_dim, emb_dim], is_sparse=True)
        conv_3 = fluid.nets.sequence_conv_pool(input=emb, num_filters=hid_dim, filter_size=3,
                                               act="tanh", pool_type="sqrt")
        conv_4 = fluid.nets.sequence_conv_pool(input=emb, num_filters=hid_dim, filter_size=4,
                                               act="tanh", pool_type="sqrt")
        prediction = fluid.layers.fc(input=[conv_3, conv_4], size=class_dim, act="softmax")
        cost = fluid.layers.cross_entropy(input=prediction, label=label)
        avg_cost = fluid.layers.mean(cost)
        accuracy = fluid.layers.accuracy(input=prediction, label=label)
        return avg_cost, accuracy, prediction

    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = 11
    with fluid.program_guard(main, startup):
        data = fluid.data(name="words", shape=[None], dtype="int64", lod_level=1)
        label = fluid.data(name="label", shape=[None, 1], dtype="int64")
        avg_cost, accuracy, prediction = convolution_net(data, label)
        fluid.optimizer.Adagrad(learning_rate=0.05).minimize(avg_cost)

    place = fluid.CPUPlace()
    exe = fluid.Executor(place)
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    feeder = fluid.DataFeeder(feed_list=[data, label], place=place)
    train_reader = fluid.io.batch(_reader(samples), batch_size=16)
    first = last = None
    for _epoch in range(5):
        for batch in train_reader():
            cost_v, acc_v, probs = exe.run(main, feed=feeder.feed(batch),
                                           fetch_list=[avg_cost, accuracy, prediction],
                                           scope=scope)
            assert probs.shape == (16, class_dim)  # one row per review, not per word
            first = float(cost_v) if first is None else first
            last = float(cost_v)
    assert last < first / 2, (first, last)
    assert float(acc_v) >= 0.75

    # the same reviews fed one at a time give the batch's predictions: sequences stay apart
    one = [exe.run(main.clone(for_test=True), feed=feeder.feed([s]),
                   fetch_list=[prediction], scope=scope)[0] for s in samples[32:35]]
    both = exe.run(main.clone(for_test=True), feed=feeder.feed(samples[32:35]),
                   fetch_list=[prediction], scope=scope)[0]
    np.testing.assert_allclose(np.concatenate(one), both, rtol=1e-5, atol=1e-6)


def test_compiled_program_with_compiler_and_core_imports():
    """A ParallelExecutor-test-style program: `from paddle.fluid import compiler, core`."""
    from parafluid import compiler, core

    os.environ.setdefault("CPU_NUM", "2")
    core._set_eager_deletion_mode(0.0, 1.0, True)
    core.globals()["FLAGS_cudnn_deterministic"] = True
    assert core.get_cuda_device_count() >= 0

    def build():
        main, startup = fluid.Program(), fluid.Program()
        startup.random_seed = 3
        with fluid.program_guard(main, startup), fluid.unique_name.guard():
            img = fluid.layers.data(name="image", shape=[16], dtype="float32")
            label = fluid.layers.data(name="label", shape=[1], dtype="int64")
            hidden = fluid.layers.fc(img, size=32, act="relu")
            prediction = fluid.layers.fc(hidden, size=4, act="softmax")
            loss = fluid.layers.mean(fluid.layers.cross_entropy(input=prediction, label=label))
            fluid.optimizer.SGD(learning_rate=0.1).minimize(loss)
        return main, startup, loss

    rng = np.random.RandomState(0)
    x = rng.uniform(-1, 1, (8, 16)).astype("float32")
    y = rng.randint(0, 4, (8, 1)).astype("int64")
    results = []
    for parallel in (False, True):
        main, startup, loss = build()
        exe = fluid.Executor(core.CPUPlace())
        scope = core.Scope()
        exe.run(startup, scope=scope)
        program = main
        if parallel:
            build_strategy = compiler.BuildStrategy()
            build_strategy.reduce_strategy = compiler.BuildStrategy.ReduceStrategy.Reduce
            exec_strategy = compiler.ExecutionStrategy()
            exec_strategy.num_threads = 1
            program = compiler.CompiledProgram(main).with_data_parallel(
                loss_name=loss.name, build_strategy=build_strategy,
                exec_strategy=exec_strategy, places=fluid.cpu_places(2))
        for _ in range(3):
            exe.run(program, feed={"image": x, "label": y}, fetch_list=[loss.name],
                    scope=scope)
        results.append(np.array(scope.find_var("fc_1.w_0").get_tensor()))
    np.testing.assert_allclose(results[1], results[0], rtol=1e-5, atol=1e-6)


def test_lod_feeds_on_two_devices_match_one_device():
    """Sequences split over devices by whole sequences (fluid.lod.split_by_sequences and a
    list feed, or a dict feed split by the executor) train exactly as one device on the
    whole batch."""
    from parafluid import compiler

    rng = np.random.RandomState(4)
    lengths = [3, 1, 4, 2, 2, 5]
    ids = rng.randint(0, 12, (sum(lengths), 1)).astype("int64")
    labels = rng.randint(0, 2, (6, 1)).astype("int64")

    def build():
        main, startup = fluid.Program(), fluid.Program()
        startup.random_seed = 9
        with fluid.program_guard(main, startup), fluid.unique_name.guard():
            words = fluid.data(name="words", shape=[None, 1], dtype="int64", lod_level=1)
            label = fluid.data(name="label", shape=[None, 1], dtype="int64")
            emb = fluid.layers.embedding(words, size=[12, 6])
            pooled = fluid.layers.sequence_pool(emb, "sum")
            prob = fluid.layers.fc(pooled, size=2, act="softmax")
            # a sum over the batch, so that the devices' gradients add up to the whole's
            loss = fluid.layers.reduce_sum(fluid.layers.cross_entropy(prob, label))
            fluid.optimizer.SGD(learning_rate=0.1).minimize(loss)
        return main, startup, loss

    words = fluid.create_lod_tensor(ids, [lengths], fluid.CPUPlace())
    weights = []
    for devices in (1, 2):
        main, startup, loss = build()
        exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
        exe.run(startup, scope=scope)
        if devices == 1:
            program, feed = main, {"words": words, "label": labels}
        else:
            strategy = compiler.BuildStrategy()
            strategy.gradient_scale_strategy = \
                compiler.BuildStrategy.GradientScaleStrategy.One
            program = compiler.CompiledProgram(main).with_data_parallel(
                loss_name=loss.name, build_strategy=strategy, places=fluid.cpu_places(2))
            parts = fluid.lod.split_by_sequences(words, 2)
            assert [p.recursive_sequence_lengths() for p in parts] == [[[3, 1, 4]], [[2, 2, 5]]]
            feed = [{"words": parts[0], "label": labels[:3]},
                    {"words": parts[1], "label": labels[3:]}]
        for step in range(3):
            # the data-parallel run alternates the list feed with a dict feed, which it
            # splits by whole sequences itself into the same two parts
            exe.run(program, feed=feed if step % 2 == 0 else
                    {"words": words, "label": labels}, fetch_list=[loss.name], scope=scope)
        weights.append(np.array(scope.find_var("fc_0.w_0").get_tensor()))
    np.testing.assert_allclose(weights[1], weights[0], rtol=1e-5, atol=1e-6)


def test_image_classification_vgg_bn_drop():
    """The book's image_classification vgg_bn_drop on CIFAR-shaped data (channels shrunk)."""
    def vgg_bn_drop(input):
        def conv_block(ipt, num_filter, groups, dropouts):
            return fluid.nets.img_conv_group(
                input=ipt, pool_size=2, pool_stride=2, conv_num_filter=[num_filter] * groups,
                conv_filter_size=3, conv_act="relu", conv_with_batchnorm=True,
                conv_batchnorm_drop_rate=dropouts, pool_type="max")

        conv1 = conv_block(input, 4, 2, [0.3, 0])
        conv2 = conv_block(conv1, 8, 2, [0.4, 0])
        drop = fluid.layers.dropout(x=conv2, dropout_prob=0.5)
        fc1 = fluid.layers.fc(input=drop, size=16, act=None)
        bn = fluid.layers.batch_norm(input=fc1, act="relu")
        drop2 = fluid.layers.dropout(x=bn, dropout_prob=0.5)
        fc2 = fluid.layers.fc(input=drop2, size=16, act=None)
        predict = fluid.layers.fc(input=fc2, size=10, act="softmax")
        return predict

    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 4
    with fluid.program_guard(main, startup):
        images = fluid.data(name="pixel", shape=[None, 3, 32, 32], dtype="float32")
        label = fluid.data(name="label", shape=[None, 1], dtype="int64")
        predict = vgg_bn_drop(images)
        cost = fluid.layers.cross_entropy(input=predict, label=label)
        avg_cost = fluid.layers.mean(cost)
        accuracy = fluid.layers.accuracy(input=predict, label=label)
        test_program = main.clone(for_test=True)
        fluid.optimizer.Adam(learning_rate=0.01).minimize(avg_cost)

    rng = np.random.RandomState(0)
    labels = rng.randint(0, 10, (8, 1)).astype("int64")
    pixels = rng.normal(0, 0.1, (8, 3, 32, 32)).astype("float32")
    pixels += labels.reshape(-1, 1, 1, 1) / 5.0  # the class is the image's brightness
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    feed = {"pixel": pixels, "label": labels}
    losses = [float(exe.run(main, feed=feed, fetch_list=[avg_cost], scope=scope)[0])
              for _ in range(8)]
    test_cost, test_acc = exe.run(test_program, feed=feed, fetch_list=[avg_cost, accuracy],
                                  scope=scope)
    assert losses[-1] < losses[0], losses
    assert np.isfinite(float(test_cost)) and 0.0 <= float(test_acc) <= 1.0
    # inference drops nothing: two test runs agree exactly
    again, = exe.run(test_program, feed=feed, fetch_list=[avg_cost], scope=scope)
    assert float(again) == float(test_cost)


def test_recommender_system():
    """The book's recommender_system: user and movie towers (embeddings, LoD categories and
    titles with sequence_pool / sequence_conv_pool), cos_sim, square_error_cost."""
    sizes = {"user_id": 30, "gender_id": 2, "age_id": 7, "job_id": 21, "movie_id": 40,
             "category_id": 18, "movie_title": 50}

    def emb_fc(name, dim, lod_level=0):
        ids = fluid.data(name=name, shape=[None], dtype="int64", lod_level=lod_level)
        emb = fluid.embedding(input=ids, size=[sizes[name], dim], is_sparse=True,
                              param_attr=name + "_table")
        return ids, emb

    def get_usr_combined_features():
        fcs = []
        for name, dim in (("user_id", 16), ("gender_id", 4), ("age_id", 4), ("job_id", 4)):
            _, emb = emb_fc(name, dim)
            fcs.append(fluid.layers.fc(input=emb, size=dim))
        concat_embed = fluid.layers.concat(input=fcs, axis=1)
        return fluid.layers.fc(input=concat_embed, size=32, act="tanh")

    def get_mov_combined_features():
        _, mov_emb = emb_fc("movie_id", 16)
        mov_fc = fluid.layers.fc(input=mov_emb, size=16)
        _, cat_emb = emb_fc("category_id", 16, lod_level=1)
        mov_categories_hidden = fluid.layers.sequence_pool(input=cat_emb, pool_type="sum")
        _, title_emb = emb_fc("movie_title", 16, lod_level=1)
        mov_title_conv = fluid.nets.sequence_conv_pool(input=title_emb, num_filters=16,
                                                       filter_size=3, act="tanh",
                                                       pool_type="sum")
        concat_embed = fluid.layers.concat(
            input=[mov_fc, mov_categories_hidden, mov_title_conv], axis=1)
        return fluid.layers.fc(input=concat_embed, size=32, act="tanh")

    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = 6
    with fluid.program_guard(main, startup):
        usr = get_usr_combined_features()
        mov = get_mov_combined_features()
        inference = fluid.layers.cos_sim(X=usr, Y=mov)
        scale_infer = fluid.layers.scale(x=inference, scale=5.0)
        label = fluid.data(name="score", shape=[None, 1], dtype="float32")
        square_cost = fluid.layers.square_error_cost(input=scale_infer, label=label)
        avg_cost = fluid.layers.mean(square_cost)
        fluid.optimizer.SGD(learning_rate=0.2).minimize(avg_cost)

    rng = np.random.RandomState(1)
    samples = []
    for _ in range(32):
        user, movie = rng.randint(0, 30), rng.randint(0, 40)
        samples.append((user, rng.randint(0, 2), rng.randint(0, 7), rng.randint(0, 21), movie,
                        rng.randint(0, 18, rng.randint(1, 4)).tolist(),
                        rng.randint(0, 50, rng.randint(1, 6)).tolist(),
                        [float((user + movie) % 5 + 1)]))
    feed_order = ["user_id", "gender_id", "age_id", "job_id", "movie_id", "category_id",
                  "movie_title", "score"]
    block = main.global_block()
    feeder = fluid.DataFeeder(feed_list=[block.var(n) for n in feed_order],
                              place=fluid.CPUPlace())
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    feed = feeder.feed(samples)
    losses = [float(exe.run(main, feed=feed, fetch_list=[avg_cost], scope=scope)[0])
              for _ in range(20)]
    assert losses[-1] < losses[0] * 0.7, losses
    predicted, = exe.run(main.clone(for_test=True), feed=feed, fetch_list=[scale_infer],
                         scope=scope)
    assert predicted.shape == (32, 1) and np.all(np.abs(predicted) <= 5.0 + 1e-5)
