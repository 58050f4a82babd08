"""Fluid 1.6-style image programs using the layers added for them, written as their users
wrote them with only the import line changed: a DCGAN-style generator (conv2d_transpose +
batch_norm) fitted to synthetic images, and a PSPNet-style segmentation head
(adaptive_pool2d pyramid, resize_bilinear, per-pixel softmax cross entropy + dice_loss)."""

import numpy as np

import parafluid as fluid  # was: import paddle.fluid as fluid

# ----------------------------------------------------------------------------- DCGAN generator

NOISE_DIM = 16


def generator(z, name="G"):
    """DCGAN's generator: fc -> 4x4 maps -> two stride-2 transposed convolutions -> 16x16."""
    y = fluid.layers.fc(z, size=32 * 4 * 4, name=name + "_fc")
    y = fluid.layers.reshape(y, shape=[-1, 32, 4, 4])
    y = fluid.layers.batch_norm(y, act="relu")
    y = fluid.layers.conv2d_transpose(y, num_filters=16, filter_size=4, stride=2, padding=1)
    y = fluid.layers.batch_norm(y)
    y = fluid.layers.prelu(y, mode="channel")
    y = fluid.layers.conv2d_transpose(y, num_filters=1, output_size=[16, 16], stride=2,
                                      act="tanh")
    return y


def _blobs(codes):
    """The image a code stands for: a Gaussian blob whose position the code sets."""
    grid = np.linspace(-1, 1, 16)
    cy, cx = codes[:, 0:1, None], codes[:, 1:2, None]
    img = np.exp(-((grid[None, :, None] - cy) ** 2 + (grid[None, None, :] - cx) ** 2) * 6)
    return (2 * img - 1).astype("float32")[:, None]


def test_dcgan_style_generator_learns_to_draw_blobs():
    main_program, startup_program = fluid.Program(), fluid.Program()
    startup_program.random_seed = 90
    with fluid.program_guard(main_program, startup_program):
        code = fluid.layers.data(name="code", shape=[NOISE_DIM], dtype="float32")
        real = fluid.layers.data(name="real", shape=[1, 16, 16], dtype="float32")
        noise = fluid.layers.gaussian_random_batch_size_like(code, shape=[-1, NOISE_DIM],
                                                             std=0.01)
        fake = generator(fluid.layers.elementwise_add(code, noise))
        g_loss = fluid.layers.reduce_mean(fluid.layers.square(fake - real))
        infer_program = main_program.clone(for_test=True)
        fluid.optimizer.Adam(learning_rate=0.01).minimize(g_loss)

    place = fluid.CPUPlace()
    exe = fluid.Executor(place)
    exe.run(startup_program)
    rng = np.random.RandomState(0)
    losses = []
    for _step in range(60):
        z = rng.uniform(-0.8, 0.8, (32, NOISE_DIM)).astype("float32")
        loss, = exe.run(main_program, feed={"code": z, "real": _blobs(z)},
                        fetch_list=[g_loss])
        losses.append(float(loss))
    assert np.mean(losses[-5:]) < 0.35 * np.mean(losses[:5]), losses
    z = rng.uniform(-0.8, 0.8, (4, NOISE_DIM)).astype("float32")
    imgs, = exe.run(infer_program, feed={"code": z, "real": _blobs(z)}, fetch_list=[fake])
    assert imgs.shape == (4, 1, 16, 16) and np.abs(imgs).max() <= 1.0


# ----------------------------------------------------------------------------- segmentation

NUM_CLASSES = 3


def pyramid_pooling(feat, sizes=(1, 2, 4)):
    """PSPNet's pyramid pooling module: pooled context at several scales, upsampled back."""
    h, w = feat.shape[2], feat.shape[3]
    branches = [feat]
    for size in sizes:
        p = fluid.layers.adaptive_pool2d(feat, pool_size=size, pool_type="avg")
        p = fluid.layers.conv2d(p, num_filters=8, filter_size=1, act="relu")
        branches.append(fluid.layers.resize_bilinear(p, out_shape=[h, w]))
    return fluid.layers.concat(branches, axis=1)


def seg_net(image):
    x = fluid.layers.conv2d(image, num_filters=16, filter_size=3, padding=1)
    x = fluid.layers.group_norm(x, groups=4, act="relu")
    x = fluid.layers.pool2d(x, pool_size=2, pool_type="max", pool_stride=2)
    x = pyramid_pooling(x)
    x = fluid.layers.conv2d(x, num_filters=NUM_CLASSES, filter_size=1)
    return fluid.layers.resize_bilinear(x, out_shape=[16, 16], align_corners=False,
                                        align_mode=0)


def _scenes(n, rng):
    """Images with a bright square (class 1) and a dark disc (class 2) on noise (class 0)."""
    imgs = rng.uniform(-0.2, 0.2, (n, 1, 16, 16)).astype("float32")
    labels = np.zeros((n, 16, 16, 1), "int64")
    yy, xx = np.mgrid[:16, :16]
    for i in range(n):
        r, c = rng.randint(0, 10, 2)
        imgs[i, 0, r:r + 6, c:c + 6] += 1.0
        labels[i, r:r + 6, c:c + 6] = 1
        cy, cx = rng.randint(3, 13, 2)
        disc = (yy - cy) ** 2 + (xx - cx) ** 2 <= 6
        imgs[i, 0][disc] -= 1.0
        labels[i][disc] = 2
    return imgs, labels


def test_pspnet_style_segmentation_head_trains():
    main_program, startup_program = fluid.Program(), fluid.Program()
    startup_program.random_seed = 7
    with fluid.program_guard(main_program, startup_program):
        image = fluid.layers.data(name="image", shape=[1, 16, 16], dtype="float32")
        label = fluid.layers.data(name="label", shape=[16, 16, 1], dtype="int64")
        logits = seg_net(image)
        logits_nhwc = fluid.layers.transpose(logits, perm=[0, 2, 3, 1])
        flat_logits = fluid.layers.reshape(logits_nhwc, shape=[-1, NUM_CLASSES])
        flat_label = fluid.layers.reshape(label, shape=[-1, 1])
        ce = fluid.layers.softmax_with_cross_entropy(flat_logits, flat_label)
        prob = fluid.layers.softmax(logits_nhwc)
        loss = fluid.layers.mean(ce) + fluid.layers.dice_loss(prob, label)
        pred = fluid.layers.argmax(logits_nhwc, axis=3)
        test_program = main_program.clone(for_test=True)
        fluid.optimizer.Adam(learning_rate=0.01).minimize(loss)

    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup_program)
    rng = np.random.RandomState(1)
    losses = []
    for _ in range(50):
        imgs, labels = _scenes(16, rng)
        loss_v, = exe.run(main_program, feed={"image": imgs, "label": labels},
                          fetch_list=[loss])
        losses.append(float(loss_v))
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5]), losses
    imgs, labels = _scenes(16, np.random.RandomState(2))
    predicted, = exe.run(test_program, feed={"image": imgs, "label": labels},
                         fetch_list=[pred])
    assert (predicted == labels[..., 0]).mean() > 0.9
