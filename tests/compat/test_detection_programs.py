"""An SSD detector written as the models repository's Fluid 1.x SSD (PaddleCV/ssd:
``mobile_net`` + ``build_program``) wrote it: ``multi_box_head`` over several feature maps
(the first without a max size), ``ssd_loss`` summed and minimized, ``detection_output`` for
inference. Only the import, the backbone's size and the data (synthetic boxes) changed."""

import numpy as np

import parafluid as fluid

NUM_CLASSES = 4
IMAGE_SHAPE = [3, 32, 32]


def conv_bn(input, filter_size, num_filters, stride, padding, act="relu"):
    conv = fluid.layers.conv2d(input=input, num_filters=num_filters, filter_size=filter_size,
                               stride=stride, padding=padding, act=None, bias_attr=False)
    return fluid.layers.batch_norm(input=conv, act=act)


def mobile_net(num_classes, img, img_shape):
    tmp = conv_bn(img, 3, 8, 2, 1)             # 16 x 16
    module11 = conv_bn(tmp, 3, 16, 2, 1)       # 8 x 8
    module13 = conv_bn(module11, 3, 16, 2, 1)  # 4 x 4
    module14 = conv_bn(module13, 3, 16, 2, 1)  # 2 x 2
    mbox_locs, mbox_confs, box, box_var = fluid.layers.multi_box_head(
        inputs=[module11, module13, module14], image=img, num_classes=num_classes,
        min_ratio=20, max_ratio=90, min_sizes=[6.0, 12.0, 20.0], max_sizes=[[], 20.0, 30.0],
        aspect_ratios=[[2.], [2., 3.], [2.]], base_size=img_shape[2], offset=0.5, flip=True)
    return mbox_locs, mbox_confs, box, box_var


def build_program(main_prog, startup_prog, is_train):
    with fluid.program_guard(main_prog, startup_prog), fluid.unique_name.guard():
        image = fluid.layers.data(name="image", shape=IMAGE_SHAPE, dtype="float32")
        gt_box = fluid.layers.data(name="gt_box", shape=[4], dtype="float32", lod_level=1)
        gt_label = fluid.layers.data(name="gt_label", shape=[1], dtype="int32", lod_level=1)
        locs, confs, box, box_var = mobile_net(NUM_CLASSES, image, IMAGE_SHAPE)
        if is_train:
            with fluid.unique_name.guard("train"):
                loss = fluid.layers.ssd_loss(locs, confs, gt_box, gt_label, box, box_var)
                loss = fluid.layers.reduce_sum(loss)
                optimizer = fluid.optimizer.Momentum(learning_rate=0.01, momentum=0.9)
                optimizer.minimize(loss)
            return loss, box
        difficult = fluid.layers.data(name="gt_difficult", shape=[1], dtype="int32",
                                      lod_level=1)
        with fluid.unique_name.guard("inference"):
            nmsed_out = fluid.layers.detection_output(locs, confs, box, box_var,
                                                      nms_threshold=0.45)
            map_eval = fluid.metrics.DetectionMAP(nmsed_out, gt_label, gt_box, difficult,
                                                  NUM_CLASSES, overlap_threshold=0.5,
                                                  evaluate_difficult=False,
                                                  ap_version="integral")
        return nmsed_out, map_eval


def synthetic_batch(rng, n=4):
    """Images with one or two bright rectangles; their boxes (normalized) and labels."""
    images = rng.normal(0, 0.1, [n] + IMAGE_SHAPE).astype("float32")
    boxes, labels, lengths = [], [], []
    for i in range(n):
        count = 1 + i % 2
        for _ in range(count):
            x0, y0 = rng.randint(0, 20, 2)
            w, h = rng.randint(6, 12, 2)
            label = rng.randint(1, NUM_CLASSES)
            images[i, label - 1, y0:y0 + h, x0:x0 + w] += 1.0
            boxes.append([x0 / 32, y0 / 32, min(x0 + w, 32) / 32, min(y0 + h, 32) / 32])
            labels.append([label])
        lengths.append(count)
    place = fluid.CPUPlace()
    return {"image": images,
            "gt_box": fluid.create_lod_tensor(np.array(boxes, "float32"), [lengths], place),
            "gt_label": fluid.create_lod_tensor(np.array(labels, "int32"), [lengths], place),
            "gt_difficult": fluid.create_lod_tensor(np.zeros((len(labels), 1), "int32"),
                                                    [lengths], place)}


def test_ssd_program_from_the_models_repository_trains_and_detects():
    train_prog, startup_prog, test_prog = fluid.Program(), fluid.Program(), fluid.Program()
    startup_prog.random_seed = 7
    loss, box = build_program(train_prog, startup_prog, is_train=True)
    nmsed, map_eval = build_program(test_prog, startup_prog, is_train=False)
    test_prog = test_prog.clone(for_test=True)
    assert box.shape == (8 * 8 * 3 + 4 * 4 * 6 + 2 * 2 * 4, 4)  # priors per cell: 3, 6, 4
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup_prog, scope=scope)
    batch = synthetic_batch(np.random.RandomState(0))
    train_feed = {k: v for k, v in batch.items() if k != "gt_difficult"}
    losses = [float(exe.run(train_prog, feed=train_feed, fetch_list=[loss], scope=scope)[0])
              for _ in range(12)]
    assert all(np.isfinite(losses))
    assert losses[-1] < 0.7 * losses[0], losses

    # inference on the trained parameters: one LoD sequence of detections per image
    out, = exe.run(test_prog, feed=batch, fetch_list=[nmsed], scope=scope, return_numpy=False)
    lod = out.lod()
    rows = np.array(out)
    assert len(lod) == 1 and len(lod[0]) == 5 and lod[0][-1] == rows.shape[0]
    assert rows.shape[1] == 6
    labels, scores = rows[:, 0], rows[:, 1]
    assert set(labels.astype(int)) <= set(range(1, NUM_CLASSES))  # background dropped
    assert np.all((scores > 0.01) & (scores <= 1))

    # mAP: the accumulated value over two batches is the mAP of both taken together
    cur_map, accum_map = map_eval.get_map_var()
    other = synthetic_batch(np.random.RandomState(3))
    with fluid.scope_guard(scope):
        map_eval.reset(exe)
    maps = [exe.run(test_prog, feed=b, fetch_list=[cur_map, accum_map], scope=scope)
            for b in (batch, other)]
    assert float(maps[0][0]) == float(maps[0][1])  # the first batch alone
    both = {"image": np.concatenate([batch["image"], other["image"]])}
    for k in ("gt_box", "gt_label", "gt_difficult"):
        both[k] = fluid.create_lod_tensor(
            np.concatenate([np.array(batch[k]), np.array(other[k])]),
            [batch[k].recursive_sequence_lengths()[0] + other[k].recursive_sequence_lengths()[0]],
            fluid.CPUPlace())
    together, = exe.run(test_prog, feed=both, fetch_list=[cur_map], scope=scope)
    np.testing.assert_allclose(float(maps[1][1]), float(together), rtol=1e-6)
    assert 0 < float(together) <= 1
    with fluid.scope_guard(scope):
        map_eval.reset(exe)
    again, = exe.run(test_prog, feed=other, fetch_list=[accum_map], scope=scope)
    np.testing.assert_allclose(float(again), float(maps[1][0]), rtol=1e-6)  # reset forgets


# --------------------------------------------------------------------------- YOLOv3
# The models repository's YOLOv3 (PaddleCV/yolov3/models/yolov3.py): per output a 1x1 conv
# head, yolov3_loss summed over outputs for training; yolo_box per output, concatenated, then
# multiclass_nms for inference. Only the backbone's size and the data changed.

ANCHORS = [10, 13, 16, 30, 33, 23, 30, 61, 62, 45, 59, 119]
ANCHOR_MASKS = [[3, 4, 5], [0, 1, 2]]
YOLO_CLASSES = 3


def yolov3(is_train):
    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = 5
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        image = fluid.layers.data(name="image", shape=IMAGE_SHAPE, dtype="float32")
        c1 = conv_bn(image, 3, 8, 2, 1, act="leaky_relu")   # 16 x 16
        c2 = conv_bn(c1, 3, 16, 2, 1, act="leaky_relu")     # 8 x 8
        c3 = conv_bn(c2, 3, 16, 2, 1, act="leaky_relu")     # 4 x 4
        outputs = []
        for i, (feat, mask) in enumerate(zip([c3, c2], ANCHOR_MASKS)):
            outputs.append(fluid.layers.conv2d(
                input=feat, num_filters=len(mask) * (YOLO_CLASSES + 5), filter_size=1,
                stride=1, padding=0, act=None,
                param_attr=fluid.ParamAttr(name=f"yolo_output.{i}.conv.weights"),
                bias_attr=fluid.ParamAttr(name=f"yolo_output.{i}.conv.bias")))
        downsample = [8, 4]
        if is_train:
            gt_box = fluid.layers.data(name="gt_box", shape=[3, 4], dtype="float32")
            gt_label = fluid.layers.data(name="gt_label", shape=[3], dtype="int32")
            gt_score = fluid.layers.data(name="gt_score", shape=[3], dtype="float32")
            losses = []
            for i, output in enumerate(outputs):
                losses.append(fluid.layers.reduce_mean(fluid.layers.yolov3_loss(
                    x=output, gt_box=gt_box, gt_label=gt_label, gt_score=gt_score,
                    anchors=ANCHORS, anchor_mask=ANCHOR_MASKS[i], class_num=YOLO_CLASSES,
                    ignore_thresh=0.7, downsample_ratio=downsample[i],
                    use_label_smooth=True, name="yolo_loss" + str(i))))
            loss = fluid.layers.sum(losses)
            fluid.optimizer.Adam(learning_rate=0.01).minimize(loss)
            return main, startup, loss
        im_size = fluid.layers.data(name="im_size", shape=[2], dtype="int32")
        boxes, scores = [], []
        for i, output in enumerate(outputs):
            mask_anchors = [ANCHORS[2 * m + k] for m in ANCHOR_MASKS[i] for k in (0, 1)]
            box, score = fluid.layers.yolo_box(
                x=output, img_size=im_size, anchors=mask_anchors, class_num=YOLO_CLASSES,
                conf_thresh=0.01, downsample_ratio=downsample[i], name="yolo_box" + str(i))
            boxes.append(box)
            scores.append(fluid.layers.transpose(score, perm=[0, 2, 1]))
        yolo_boxes = fluid.layers.concat(boxes, axis=1)
        yolo_scores = fluid.layers.concat(scores, axis=2)
        pred = fluid.layers.multiclass_nms(bboxes=yolo_boxes, scores=yolo_scores,
                                           score_threshold=0.01, nms_top_k=100,
                                           keep_top_k=20, nms_threshold=0.45,
                                           background_label=-1)
        return main.clone(for_test=True), startup, pred


def test_yolov3_program_from_the_models_repository_trains_and_detects():
    rng = np.random.RandomState(1)
    feed = synthetic_batch(rng)
    # the same boxes as YOLO's padded [N, 3] center-size targets
    boxes = np.array(feed["gt_box"]).reshape(-1, 4)
    labels = np.array(feed["gt_label"]).reshape(-1)
    lengths = feed["gt_box"].recursive_sequence_lengths()[0]
    gt_box = np.zeros((4, 3, 4), "float32")
    gt_label = np.zeros((4, 3), "int32")
    start = 0
    for i, n in enumerate(lengths):
        b = boxes[start:start + n]
        gt_box[i, :n] = np.stack([(b[:, 0] + b[:, 2]) / 2, (b[:, 1] + b[:, 3]) / 2,
                                  b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]], 1)
        gt_label[i, :n] = labels[start:start + n] - 1
        start += n
    train_feed = {"image": feed["image"], "gt_box": gt_box, "gt_label": gt_label,
                  "gt_score": np.ones((4, 3), "float32")}
    main, startup, loss = yolov3(is_train=True)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    losses = [float(exe.run(main, feed=train_feed, fetch_list=[loss], scope=scope)[0])
              for _ in range(10)]
    assert all(np.isfinite(losses)) and losses[-1] < 0.7 * losses[0], losses

    infer, _, pred = yolov3(is_train=False)
    out, = exe.run(infer, feed={"image": feed["image"],
                                "im_size": np.full((4, 2), 32, "int32")},
                   fetch_list=[pred], scope=scope, return_numpy=False)
    rows, lod = np.array(out), out.lod()
    assert rows.shape[1] == 6 and lod[0][-1] == len(rows) and len(lod[0]) == 5
    assert all(b - a <= 20 for a, b in zip(lod[0], lod[0][1:]))  # keep_top_k per image
    assert np.all((rows[:, 2:] >= 0) & (rows[:, 2:] <= 31))  # clipped to the 32 x 32 image
