"""The detection layers as Fluid 1.6 programs use them: shapes at build time, values at run
time, LoD where Fluid gives it."""

import numpy as np
import pytest

import parafluid as fluid
from parafluid.testing import run_layers


def _data(name, shape, dtype="float32", lod_level=0, append_batch_size=True):
    return fluid.layers.data(name=name, shape=shape, dtype=dtype, lod_level=lod_level,
                             append_batch_size=append_batch_size)


def test_prior_boxes_anchors_and_box_coder_round_trip():
    img = np.zeros((2, 3, 32, 32), "float32")
    gt = np.array([[0.1, 0.1, 0.4, 0.5], [0.5, 0.2, 0.9, 0.8], [0.3, 0.3, 0.6, 0.6]], "float32")

    def build():
        image = _data("image", [3, 32, 32])
        feat = fluid.layers.conv2d(image, num_filters=4, filter_size=3, stride=8, padding=1)
        boxes, var = fluid.layers.prior_box(feat, image, min_sizes=[8.0], max_sizes=[16.0],
                                            aspect_ratios=[2.0], flip=True, clip=True)
        assert boxes.shape == (4, 4, 4, 4) and var.shape == (4, 4, 4, 4)
        dboxes, _ = fluid.layers.density_prior_box(feat, image, densities=[2, 1],
                                                   fixed_sizes=[8.0, 16.0],
                                                   fixed_ratios=[1.0], flatten_to_2d=True)
        assert dboxes.shape == (4 * 4 * 5, 4)
        anchors, _ = fluid.layers.anchor_generator(feat, anchor_sizes=[16, 32],
                                                   aspect_ratios=[1.0], stride=[8.0, 8.0])
        priors = fluid.layers.reshape(boxes, shape=[-1, 4])
        pvar = fluid.layers.reshape(var, shape=[-1, 4])
        gt_box = _data("gt_box", [4], lod_level=1)
        deltas = fluid.layers.box_coder(priors, pvar, gt_box)  # [3, 64, 4]
        back = fluid.layers.box_coder(priors, pvar, deltas, code_type="decode_center_size")
        iou = fluid.layers.iou_similarity(gt_box, priors)
        return [priors, anchors, deltas, back, iou]

    gt_t = fluid.create_lod_tensor(gt, [[2, 1]], fluid.CPUPlace())
    priors, anchors, deltas, back, iou = run_layers(build, {"image": img, "gt_box": gt_t})
    assert priors.shape == (64, 4) and anchors.shape == (4, 4, 2, 4)
    assert np.all((priors >= 0) & (priors <= 1))
    assert deltas.shape == (3, 64, 4)
    # decoding an encoding gives each target box back, against every prior
    np.testing.assert_allclose(back, np.broadcast_to(gt[:, None], (3, 64, 4)), atol=1e-5)
    assert iou.shape == (3, 64) and iou.max() <= 1.0 and iou.max() > 0.3


def test_box_clip_clips_each_image_to_its_own_size():
    boxes = np.array([[-5, -5, 100, 100], [10, 10, 20, 20], [50, 50, 300, 300]], "float32")
    info = np.array([[40, 60, 1.0], [100, 100, 2.0]], "float32")

    def build():
        b = _data("boxes", [4], lod_level=1)
        im = _data("im_info", [3])
        return [fluid.layers.box_clip(input=b, im_info=im)]

    t = fluid.create_lod_tensor(boxes, [[2, 1]], fluid.CPUPlace())
    out, = run_layers(build, {"boxes": t, "im_info": info})
    np.testing.assert_array_equal(out, [[0, 0, 59, 39], [10, 10, 20, 20], [49, 49, 49, 49]])


def test_box_coder_rejects_a_bad_code_type_and_variance():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        p = _data("p", [4])
        t = _data("t", [4])
        with pytest.raises(ValueError, match="code_type must be"):
            fluid.layers.box_coder(p, None, t, code_type="encode")
        with pytest.raises(TypeError, match="prior_box_var must be"):
            fluid.layers.box_coder(p, "0.1", t)


def test_roi_layers_pool_the_rois_of_each_image():
    feat = np.arange(2 * 1 * 4 * 4, dtype="float32").reshape(2, 1, 4, 4)
    rois = np.array([[0, 0, 3, 3], [2, 2, 3, 3], [0, 0, 1, 1]], "float32")

    def build():
        x = _data("x", [1, 4, 4])
        r = _data("rois", [4], lod_level=1)
        quads = _data("quads", [8], lod_level=1)
        return [fluid.layers.roi_pool(x, r, pooled_height=1, pooled_width=1),
                fluid.layers.roi_align(x, r, pooled_height=2, pooled_width=2,
                                       sampling_ratio=1),
                fluid.layers.psroi_pool(x, r, output_channels=1, spatial_scale=1.0,
                                        pooled_height=1, pooled_width=1),
                *fluid.layers.roi_perspective_transform(x, quads, transformed_height=2,
                                                        transformed_width=2)]

    t = fluid.create_lod_tensor(rois, [[2, 1]], fluid.CPUPlace())
    # axis-aligned quadrilaterals: the perspective transform samples their corners' pixels
    quads = fluid.create_lod_tensor(np.array([[0, 0, 3, 0, 3, 3, 0, 3], [1, 1, 2, 1, 2, 2, 1, 2],
                                              [0, 0, 1, 0, 1, 1, 0, 1]], "float32"), [[2, 1]],
                                    fluid.CPUPlace())
    pooled, aligned, ps, warped, mask, matrix = run_layers(
        build, {"x": feat, "rois": t, "quads": quads})
    np.testing.assert_allclose(warped[0, 0], [[0, 3], [12, 15]], atol=1e-5)
    assert mask.dtype == np.int32 and mask.shape == (3, 1, 2, 2) and mask.all()
    # an axis-aligned square onto a 2 x 2 grid: a scale, no perspective terms
    np.testing.assert_allclose(matrix[0], [3, 0, 0, 0, 3, 0, 0, 0, 1], atol=1e-6)
    np.testing.assert_allclose(warped[2, 0], [[16, 17], [20, 21]], atol=1e-5)
    # ROIs 0 and 1 read image 0 (values 0..15), ROI 2 image 1 (values 16..31)
    np.testing.assert_array_equal(pooled.reshape(-1), [15, 15, 21])
    assert aligned.shape == (3, 1, 2, 2)
    # the 2 x 2 bins of [0, 0, 1, 1] on image 1 are sampled at (0.25, 0.25), (0.25, 0.75), ...
    np.testing.assert_allclose(aligned[2, 0], [[17.25, 17.75], [19.25, 19.75]], rtol=1e-6)
    np.testing.assert_allclose(ps.reshape(-1), [7.5, 12.5, 18.5])


def test_focal_loss_polygon_transform_and_decoder_assign_layers():
    logits = np.array([[2.0, -1.0], [0.5, 0.5], [-3.0, 4.0]], "float32")
    label = np.array([[1], [0], [-1]], "int32")

    def build():
        x = _data("x", [2])
        x.stop_gradient = False
        lab = _data("label", [1], dtype="int32")
        fg = fluid.layers.fill_constant(shape=[1], dtype="int32", value=1)
        loss = fluid.layers.sigmoid_focal_loss(x, lab, fg, gamma=2.0, alpha=0.25)
        grad, = fluid.gradients([fluid.layers.reduce_sum(loss)], [x])
        geo = fluid.layers.fill_constant(shape=[1, 2, 2, 3], dtype="float32", value=1.0)
        quads = fluid.layers.polygon_box_transform(geo)
        prior = fluid.layers.assign(np.array([[0, 0, 9, 9]], "float32"))
        var = fluid.layers.assign(np.array([1, 1, 1, 1], "float32"))
        deltas = fluid.layers.assign(np.array([[0, 0, 0, 0, 0.1, 0, 0, 0]], "float32"))
        score = fluid.layers.assign(np.array([[0.2, 0.8]], "float32"))
        decoded, assigned = fluid.layers.box_decoder_and_assign(prior, var, deltas, score,
                                                                box_clip=4.135)
        return [loss, grad, quads, decoded, assigned]

    loss, grad, quads, decoded, assigned = run_layers(build, {"x": logits, "label": label})
    p = 1 / (1 + np.exp(-logits))
    np.testing.assert_allclose(loss[0], [-0.25 * (1 - p[0, 0]) ** 2 * np.log(p[0, 0]),
                                         -0.75 * p[0, 1] ** 2 * np.log(1 - p[0, 1])], rtol=1e-5)
    assert np.all(loss[2] == 0) and np.all(grad[2] == 0)  # ignored row: no loss, no gradient
    assert grad[0, 0] < 0 < grad[1, 0]  # the positive pulls up, the negatives push down
    np.testing.assert_array_equal(quads[0, 0], [[-1, 3, 7], [-1, 3, 7]])
    np.testing.assert_array_equal(quads[0, 1], [[-1, -1, -1], [3, 3, 3]])
    # a pixel box is x2 - x1 + 1 wide and centred at x1 + width / 2: zero deltas give it back
    np.testing.assert_allclose(decoded[0, :4], [0, 0, 9, 9], atol=1e-6)
    np.testing.assert_allclose(assigned[0], [1, 0, 10, 9], atol=1e-5)  # class 1, 1 px right


def test_rpn_proposals_through_fpn_levels_into_roi_align():
    """Faster R-CNN with FPN as Fluid's models wire it: anchors, proposals, levels, pooling,
    and the collected proposals are the same boxes as the distributed ones."""
    rng = np.random.RandomState(0)
    feed = {"feat": rng.uniform(-1, 1, (2, 4, 4, 4)).astype("float32"),
            "im_info": np.array([[64, 64, 1.0], [64, 48, 1.0]], "float32")}

    def build():
        feat = _data("feat", [4, 4, 4])
        im_info = _data("im_info", [3])
        anchors, var = fluid.layers.anchor_generator(feat, anchor_sizes=[16, 48],
                                                     aspect_ratios=[1.0], stride=[16.0, 16.0])
        scores = fluid.layers.sigmoid(fluid.layers.conv2d(feat, num_filters=2, filter_size=1))
        deltas = fluid.layers.conv2d(feat, num_filters=8, filter_size=1)
        rois, probs = fluid.layers.generate_proposals(scores, deltas, im_info, anchors, var,
                                                      pre_nms_top_n=20, post_nms_top_n=10,
                                                      nms_thresh=0.7, min_size=2.0)
        multi, restore = fluid.layers.distribute_fpn_proposals(rois, min_level=2, max_level=3,
                                                               refer_level=3, refer_scale=32)
        collected = fluid.layers.collect_fpn_proposals(multi, [probs, probs], 2, 3, 100)
        pooled = fluid.layers.roi_align(feat, rois, pooled_height=2, pooled_width=2,
                                        spatial_scale=1 / 16.)
        return [rois, probs, restore, collected, pooled] + multi

    rois, probs, restore, collected, pooled, lvl2, lvl3 = run_layers(build, feed)
    assert rois.shape[0] == probs.shape[0] <= 20 and pooled.shape == (rois.shape[0], 4, 2, 2)
    assert np.all(probs[:-1] >= 0) and np.all(rois[:, 2] >= rois[:, 0])
    merged = np.concatenate([lvl2, lvl3])
    np.testing.assert_array_equal(merged[restore.reshape(-1)], rois)
    assert collected.shape == rois.shape
    np.testing.assert_array_equal(np.unique(collected, axis=0), np.unique(rois, axis=0))


def test_value_dependent_detection_ops_stay_out_of_compiled_segments():
    from parafluid.passes.compile_regions import why_not_compilable

    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        boxes = _data("boxes", [6, 4])
        scores = _data("scores", [3, 6])
        decoded = fluid.layers.box_coder(fluid.layers.assign(np.zeros((6, 4), "float32")),
                                         [0.1, 0.1, 0.2, 0.2], boxes,
                                         code_type="decode_center_size")
        fluid.layers.multiclass_nms(decoded, scores, 0.1, 10, 5)
    block = main.global_block()
    why = {op.type: why_not_compilable(op, block) for op in block.ops}
    assert why["box_coder"] is None  # plain tensor arithmetic compiles
    assert "number of kept boxes" in why["multiclass_nms"]


def test_rpn_target_assign_samples_at_most_the_batch_and_gathers_the_predictions():
    rng = np.random.RandomState(2)
    gt = fluid.create_lod_tensor(np.array([[2, 2, 20, 20], [30, 30, 60, 50], [5, 40, 25, 60]],
                                          "float32"), [[2, 1]], fluid.CPUPlace())
    crowd = fluid.create_lod_tensor(np.zeros((3, 1), "int32"), [[2, 1]], fluid.CPUPlace())
    feed = {"feat": rng.uniform(-1, 1, (2, 4, 4, 4)).astype("float32"), "gt_box": gt,
            "is_crowd": crowd, "im_info": np.array([[64, 64, 1.0], [64, 64, 1.0]], "float32")}

    def build():
        feat = _data("feat", [4, 4, 4])
        anchors, var = fluid.layers.anchor_generator(feat, anchor_sizes=[16, 32],
                                                     aspect_ratios=[1.0], stride=[16.0, 16.0])
        logits = fluid.layers.conv2d(feat, num_filters=2, filter_size=1)
        deltas = fluid.layers.conv2d(feat, num_filters=8, filter_size=1)
        outs = fluid.layers.rpn_target_assign(
            deltas, logits, fluid.layers.reshape(anchors, [-1, 4]),
            fluid.layers.reshape(var, [-1, 4]), _data("gt_box", [4], lod_level=1),
            _data("is_crowd", [1], dtype="int32", lod_level=1), _data("im_info", [3]),
            rpn_batch_size_per_im=8, rpn_straddle_thresh=-1, rpn_fg_fraction=0.5,
            rpn_positive_overlap=0.5, rpn_negative_overlap=0.3)
        return list(outs)

    score, loc, label, target, weight = run_layers(build, feed)
    assert score.shape == label.shape and loc.shape == target.shape == weight.shape
    assert 0 < label.sum() <= 8 and len(label) <= 16  # at most 4 foreground per image
    assert set(np.unique(label)) <= {0, 1}

    labels = fluid.create_lod_tensor(np.array([[2], [3], [1]], "int32"), [[2, 1]],
                                     fluid.CPUPlace())

    def build_retina():
        feat = _data("feat", [4, 4, 4])
        anchors, var = fluid.layers.anchor_generator(feat, anchor_sizes=[16, 32],
                                                     aspect_ratios=[1.0], stride=[16.0, 16.0])
        logits = fluid.layers.conv2d(feat, num_filters=2 * 3, filter_size=1)
        deltas = fluid.layers.conv2d(feat, num_filters=8, filter_size=1)
        return list(fluid.layers.retinanet_target_assign(
            deltas, logits, fluid.layers.reshape(anchors, [-1, 4]),
            fluid.layers.reshape(var, [-1, 4]), _data("gt_box", [4], lod_level=1),
            _data("gt_label", [1], dtype="int32", lod_level=1),
            _data("is_crowd", [1], dtype="int32", lod_level=1), _data("im_info", [3]),
            num_classes=3, positive_overlap=0.5, negative_overlap=0.4))

    score, loc, label, target, weight, fg_num = run_layers(build_retina,
                                                           {**feed, "gt_label": labels})
    assert score.shape == (len(label), 3) and loc.shape == target.shape == weight.shape
    assert set(np.unique(label)) <= {0, 1, 2, 3} and fg_num.shape == (2, 1)
    # every foreground anchor has a location (those also background: zero-weight "fakes");
    # fg_num counts them plus one per image
    assert (label > 0).sum() <= len(loc) == fg_num.sum() - 2


def test_generate_proposal_labels_samples_the_head_batch():
    gt = np.array([[2, 2, 20, 20], [30, 30, 60, 50], [5, 40, 25, 60]], "float32")
    rois = np.array([[1, 1, 21, 19], [28, 30, 58, 52], [0, 0, 63, 63], [40, 0, 60, 20],
                     [4, 38, 26, 58], [10, 10, 50, 50]], "float32")
    place = fluid.CPUPlace()
    feed = {"rois": fluid.create_lod_tensor(rois, [[4, 2]], place),
            "gt_classes": fluid.create_lod_tensor(np.array([[1], [2], [3]], "int32"), [[2, 1]],
                                                  place),
            "is_crowd": fluid.create_lod_tensor(np.zeros((3, 1), "int32"), [[2, 1]], place),
            "gt_box": fluid.create_lod_tensor(gt, [[2, 1]], place),
            "im_info": np.array([[64, 64, 1.0], [64, 64, 1.0]], "float32")}

    def build():
        return list(fluid.layers.generate_proposal_labels(
            _data("rois", [4], lod_level=1), _data("gt_classes", [1], "int32", lod_level=1),
            _data("is_crowd", [1], "int32", lod_level=1), _data("gt_box", [4], lod_level=1),
            _data("im_info", [3]), batch_size_per_im=4, fg_fraction=0.5, class_nums=4))

    rois_out, labels, targets, inside, outside = run_layers(build, feed)
    assert len(rois_out) == len(labels) <= 8 and targets.shape == (len(labels), 16)
    fg = labels.reshape(-1) > 0
    assert 0 < fg.sum() <= 4  # at most 2 foreground per image
    # each foreground row has its 4 weights in its class's columns, the background none
    np.testing.assert_array_equal(inside.sum(1), np.where(fg, 4, 0))
    np.testing.assert_array_equal(inside, outside)


def test_deformable_conv_with_zero_offsets_and_unit_mask_is_conv2d():
    x = np.random.RandomState(4).uniform(-1, 1, (2, 4, 6, 6)).astype("float32")
    w_attr = fluid.ParamAttr(name="w", initializer=fluid.initializer.Normal(0, 0.5, seed=3))
    b_attr = fluid.ParamAttr(name="b", initializer=fluid.initializer.Constant(0.1))

    def build():
        img = _data("x", [4, 6, 6])
        offset = fluid.layers.fill_constant([2, 2 * 2 * 9, 6, 6], "float32", 0.0)
        mask = fluid.layers.fill_constant([2, 2 * 9, 6, 6], "float32", 1.0)
        dcn = fluid.layers.deformable_conv(img, offset, mask, num_filters=3, filter_size=3,
                                           padding=1, groups=1, deformable_groups=2,
                                           param_attr=w_attr, bias_attr=b_attr)
        v1 = fluid.layers.deformable_conv(img, offset, None, num_filters=3, filter_size=3,
                                          padding=1, deformable_groups=2, modulated=False,
                                          param_attr=w_attr, bias_attr=b_attr)
        conv = fluid.layers.conv2d(img, num_filters=3, filter_size=3, padding=1,
                                   param_attr=w_attr, bias_attr=b_attr)
        return [dcn, v1, conv]

    dcn, v1, conv = run_layers(build, {"x": x})
    np.testing.assert_allclose(dcn, conv, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(v1, conv, rtol=1e-5, atol=1e-5)


def test_retinanet_detection_output_layer_gives_lod_rows_best_first():
    rng = np.random.RandomState(5)

    def build():
        feat = _data("feat", [4, 4, 4])
        anchors, _ = fluid.layers.anchor_generator(feat, anchor_sizes=[16], aspect_ratios=[1.0],
                                                   stride=[8.0, 8.0])
        deltas = fluid.layers.reshape(fluid.layers.transpose(
            fluid.layers.conv2d(feat, num_filters=4, filter_size=1), [0, 2, 3, 1]), [0, -1, 4])
        probs = fluid.layers.sigmoid(fluid.layers.reshape(fluid.layers.transpose(
            fluid.layers.conv2d(feat, num_filters=2, filter_size=1), [0, 2, 3, 1]), [0, -1, 2]))
        return [fluid.layers.retinanet_detection_output(
            [deltas], [probs], [fluid.layers.reshape(anchors, [-1, 4])],
            _data("im_info", [3]), keep_top_k=5)]

    out, = run_layers(build, {"feat": rng.uniform(-1, 1, (2, 4, 4, 4)).astype("float32"),
                              "im_info": np.array([[32, 32, 1.0]] * 2, "float32")})
    assert out.shape == (10, 6)  # the last level keeps every positive score: 5 per image
    assert set(out[:, 0]) <= {1, 2}
    for rows in (out[:5], out[5:]):
        assert np.all(np.diff(rows[:, 1]) <= 0)


def test_multiclass_nms_with_nothing_kept_gives_fluids_minus_one_row():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        boxes = _data("boxes", [5, 4])
        scores = _data("scores", [3, 5])
        out = fluid.layers.multiclass_nms(boxes, scores, score_threshold=0.99, nms_top_k=10,
                                          keep_top_k=5)
    exe = fluid.Executor(fluid.CPUPlace())
    feed = {"boxes": np.tile(np.array([0.1, 0.1, 0.5, 0.5], "float32"), (2, 5, 1)),
            "scores": np.full((2, 3, 5), 0.5, "float32")}
    res, = exe.run(main, feed=feed, fetch_list=[out], return_numpy=False)
    np.testing.assert_array_equal(np.array(res), [[-1]])
    assert res.lod() == [[0, 1]]
    feed["scores"][1, 2, 3] = 1.0  # one box of image 1 passes: one row, image 0 empty
    res, = exe.run(main, feed=feed, fetch_list=[out], return_numpy=False)
    np.testing.assert_allclose(np.array(res), [[2, 1.0, 0.1, 0.1, 0.5, 0.5]])
    assert res.lod() == [[0, 0, 1]]


def test_deformable_roi_pooling_without_offsets_averages_its_bins():
    feat = np.arange(2 * 1 * 4 * 4, dtype="float32").reshape(2, 1, 4, 4)

    def build():
        x = _data("x", [1, 4, 4])
        r = _data("rois", [4], lod_level=1)
        trans = fluid.layers.fill_constant([2, 2, 1, 1], "float32", 0.0)
        still = fluid.layers.deformable_roi_pooling(x, r, trans, no_trans=True, pooled_height=1,
                                                    pooled_width=1, sample_per_part=2)
        moved = fluid.layers.deformable_roi_pooling(x, r, trans + 1.0, pooled_height=1,
                                                    pooled_width=1, sample_per_part=2,
                                                    trans_std=0.25)
        return [still, moved]

    rois = fluid.create_lod_tensor(np.array([[0, 0, 1, 1], [1, 1, 2, 2]], "float32"), [[1, 1]],
                                   fluid.CPUPlace())
    still, moved = run_layers(build, {"x": feat, "rois": rois})
    # ROI 0 spans [-0.5, 1.5): samples at -0.5 (read at 0) and 0.5 on each axis; ROI 1 (on
    # image 1) spans [0.5, 2.5): samples at 0.5 and 1.5
    np.testing.assert_allclose(still.reshape(-1), [(0 + 0.5 + 2 + 2.5) / 4,
                                                   16 + (2.5 + 3.5 + 6.5 + 7.5) / 4], rtol=1e-5)
    # moved by a quarter of the ROI's size (half a pixel) right and down: whole pixels
    np.testing.assert_allclose(moved.reshape(-1), [(0 + 1 + 4 + 5) / 4,
                                                   16 + (5 + 6 + 9 + 10) / 4], rtol=1e-5)


def test_generate_mask_labels_rasterizes_the_matched_polygon_in_each_roi():
    place = fluid.CPUPlace()
    square = [[4, 4], [12, 4], [12, 12], [4, 12]]  # one object of class 1, one polygon
    feed = {"im_info": np.array([[32, 32, 1.0]], "float32"),
            "gt_classes": fluid.create_lod_tensor(np.array([[1]], "int32"), [[1]], place),
            "is_crowd": fluid.create_lod_tensor(np.array([[0]], "int32"), [[1]], place),
            "gt_segms": fluid.create_lod_tensor(np.array(square, "float32"), [[1], [1], [4]],
                                                place),
            "rois": fluid.create_lod_tensor(np.array([[4, 4, 12, 12], [0, 0, 8, 8],
                                                      [20, 20, 30, 30]], "float32"), [[3]],
                                            place),
            "labels": fluid.create_lod_tensor(np.array([[1], [1], [0]], "int32"), [[3]],
                                              place)}

    def build():
        return list(fluid.layers.generate_mask_labels(
            _data("im_info", [3]), _data("gt_classes", [1], "int32", lod_level=1),
            _data("is_crowd", [1], "int32", lod_level=1),
            _data("gt_segms", [2], lod_level=3), _data("rois", [4], lod_level=1),
            _data("labels", [1], "int32", lod_level=1), num_classes=2, resolution=4))

    mask_rois, has_mask, masks = run_layers(build, feed)
    np.testing.assert_array_equal(has_mask.reshape(-1), [0, 1])  # the foreground ROIs
    assert masks.shape == (2, 2 * 16) and np.all(masks[:, :16] == -1)  # class 0's block
    np.testing.assert_array_equal(masks[0, 16:], np.ones(16))  # the ROI is the square
    # the ROI [0, 8] covers the square's top-left quarter: the lower-right 2 x 2 cells
    np.testing.assert_array_equal(masks[1, 16:].reshape(4, 4),
                                  [[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 1, 1], [0, 0, 1, 1]])
