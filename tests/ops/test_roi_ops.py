"""Op table: ROI pooling (roi_pool, roi_align, psroi_pool, roi_perspective_transform,
deformable_psroi_pooling), with finite-difference gradients to the input (and the offsets);
references written per output element from Fluid 1.6's operator definitions."""

import numpy as np
import pytest

from parafluid.testing import OpCase, check_op, rand

CASES: list = []


# ----------------------------------------------------------------------------- ROI ops


def _c_round(v):
    return np.sign(v) * np.floor(np.abs(v) + 0.5)


ROI_IMAGES = [0, 0, 1]  # the LoD [[0, 2, 3]]: two ROIs on image 0, one on image 1


def roi_pool_ref(X, ROIs, attrs):
    s, ph, pw = attrs["spatial_scale"], attrs["pooled_height"], attrs["pooled_width"]
    h, w = X.shape[2:]
    out = np.zeros((len(ROIs), X.shape[1], ph, pw))
    for r, roi in enumerate(ROIs):
        x0, y0, x1, y1 = (int(_c_round(v * s)) for v in roi)
        bh, bw = max(y1 - y0 + 1, 1) / ph, max(x1 - x0 + 1, 1) / pw
        for i in range(ph):
            for j in range(pw):
                hs = min(max(int(np.floor(i * bh)) + y0, 0), h)
                he = min(max(int(np.ceil((i + 1) * bh)) + y0, 0), h)
                ws = min(max(int(np.floor(j * bw)) + x0, 0), w)
                we = min(max(int(np.ceil((j + 1) * bw)) + x0, 0), w)
                if he > hs and we > ws:
                    out[r, :, i, j] = X[ROI_IMAGES[r], :, hs:he, ws:we].max(axis=(1, 2))
    return {"Out": out}


def _bilinear(img, y, x):
    h, w = img.shape[1:]
    if y < -1 or y > h or x < -1 or x > w:
        return 0
    y, x = max(y, 0), max(x, 0)
    yl, xl = int(y), int(x)
    yh, xh = min(yl + 1, h - 1), min(xl + 1, w - 1)
    if yl >= h - 1:
        yl = yh = h - 1
        y = yl
    if xl >= w - 1:
        xl = xh = w - 1
        x = xl
    ly, lx = y - yl, x - xl
    return ((1 - ly) * (1 - lx) * img[:, yl, xl] + (1 - ly) * lx * img[:, yl, xh] +
            ly * (1 - lx) * img[:, yh, xl] + ly * lx * img[:, yh, xh])


def roi_align_ref(X, ROIs, attrs):
    s, ph, pw, sr = (attrs["spatial_scale"], attrs["pooled_height"], attrs["pooled_width"],
                     attrs["sampling_ratio"])
    out = np.zeros((len(ROIs), X.shape[1], ph, pw))
    for r, roi in enumerate(ROIs):
        x0, y0, x1, y1 = roi * s
        rw, rh = max(x1 - x0, 1), max(y1 - y0, 1)
        gh = sr if sr > 0 else int(np.ceil(rh / ph))
        gw = sr if sr > 0 else int(np.ceil(rw / pw))
        for i in range(ph):
            for j in range(pw):
                acc = 0
                for a in range(gh):
                    for b in range(gw):
                        y = y0 + i * rh / ph + (a + 0.5) * rh / ph / gh
                        x = x0 + j * rw / pw + (b + 0.5) * rw / pw / gw
                        acc = acc + _bilinear(X[ROI_IMAGES[r]], y, x)
                out[r, :, i, j] = acc / (gh * gw)
    return {"Out": out}


def psroi_ref(X, ROIs, attrs):
    s, oc, ph, pw = (attrs["spatial_scale"], attrs["output_channels"], attrs["pooled_height"],
                     attrs["pooled_width"])
    h, w = X.shape[2:]
    out = np.zeros((len(ROIs), oc, ph, pw))
    for r, roi in enumerate(ROIs):
        x0, y0 = _c_round(roi[0]) * s, _c_round(roi[1]) * s
        x1, y1 = (_c_round(roi[2]) + 1) * s, (_c_round(roi[3]) + 1) * s
        bh, bw = max(y1 - y0, 0.1) / ph, max(x1 - x0, 0.1) / pw
        for c in range(oc):
            for i in range(ph):
                for j in range(pw):
                    hs = min(max(int(np.floor(bh * i + y0)), 0), h)
                    he = min(max(int(np.ceil(bh * (i + 1) + y0)), 0), h)
                    ws = min(max(int(np.floor(bw * j + x0)), 0), w)
                    we = min(max(int(np.ceil(bw * (j + 1) + x0)), 0), w)
                    if he > hs and we > ws:
                        out[r, c, i, j] = X[ROI_IMAGES[r], (c * ph + i) * pw + j, hs:he,
                                            ws:we].mean()
    return {"Out": out}


# ROIs in input pixels; spatial_scale 0.5 maps them onto a 5 x 6 map (two reach past it)
ROIS = np.array([[1.0, 2.0, 9.0, 7.0], [4.5, 0.0, 11.0, 9.0], [-2.0, 3.0, 6.0, 12.0]],
                "float32")
ROI_X = rand(2, 2, 5, 6, seed=14, dtype="float32")
PS_X = rand(2, 2 * 1 * 2, 5, 6, seed=15, dtype="float32")

CASES += [
    OpCase("roi_pool", {"X": ROI_X, "ROIs": ROIS}, lod={"ROIs": [[0, 2, 3]]},
           attrs={"spatial_scale": 0.5, "pooled_height": 2, "pooled_width": 3},
           ref=roi_pool_ref, grad=["X"], grad_outputs=["Out"]),
    OpCase("roi_align", {"X": ROI_X, "ROIs": ROIS}, lod={"ROIs": [[0, 2, 3]]},
           attrs={"spatial_scale": 0.5, "pooled_height": 2, "pooled_width": 3,
                  "sampling_ratio": -1}, ref=roi_align_ref, grad=["X"]),
    OpCase("roi_align", {"X": ROI_X, "ROIs": ROIS}, lod={"ROIs": [[0, 2, 3]]},
           attrs={"spatial_scale": 0.5, "pooled_height": 3, "pooled_width": 2,
                  "sampling_ratio": 2}, ref=roi_align_ref, grad=["X"],
           id="roi_align_sampling_ratio"),
    OpCase("psroi_pool", {"X": PS_X, "ROIs": ROIS}, lod={"ROIs": [[0, 2, 3]]},
           attrs={"spatial_scale": 0.5, "output_channels": 2, "pooled_height": 1,
                  "pooled_width": 2}, ref=psroi_ref, grad=["X"]),
]

# ----------------------------------------------------------------------------- roi_perspective


def _homography(src, dst):
    """The 3x3 projective map taking the 4 points src onto dst (solved directly)."""
    a, b = [], []
    for (u, v), (x, y) in zip(src, dst):
        a.append([u, v, 1, 0, 0, 0, -u * x, -v * x])
        a.append([0, 0, 0, u, v, 1, -u * y, -v * y])
        b += [x, y]
    return np.append(np.linalg.solve(np.array(a, float), np.array(b, float)), 1).reshape(3, 3)


def _inside_convex(x, y, qx, qy):
    signs = [(qx[(i + 1) % 4] - qx[i]) * (y - qy[i]) - (qy[(i + 1) % 4] - qy[i]) * (x - qx[i])
             for i in range(4)]
    return all(v >= -1e-4 for v in signs) or all(v <= 1e-4 for v in signs)


def perspective_ref(X, ROIs, attrs):
    th, tw, s = attrs["transformed_height"], attrs["transformed_width"], attrs["spatial_scale"]
    h, w = X.shape[2:]
    out = np.zeros((len(ROIs), X.shape[1], th, tw))
    for r, roi in enumerate(ROIs):
        qx, qy = roi[0::2] * s, roi[1::2] * s
        side = [np.hypot(qx[i] - qx[(i + 1) % 4], qy[i] - qy[(i + 1) % 4]) for i in range(4)]
        nw = min(int(np.floor((side[0] + side[2]) / (side[1] + side[3]) * (th - 1) + 0.5)) + 1,
                 tw)
        m = _homography([(0, 0), (nw - 1, 0), (nw - 1, th - 1), (0, th - 1)],
                        list(zip(qx, qy)))
        for oh in range(th):
            for ow in range(tw):
                u, v, d = m @ [ow, oh, 1]
                x, y = u / d, v / d
                if not _inside_convex(x, y, qx, qy) or not (-0.5 <= x <= w - 0.5 and
                                                           -0.5 <= y <= h - 0.5):
                    continue
                x, y = max(x, 0), max(y, 0)
                x0, y0 = min(int(np.floor(x)), w - 1), min(int(np.floor(y)), h - 1)
                x, y = min(x, w - 1), min(y, h - 1)
                x1, y1 = min(x0 + 1, w - 1), min(y0 + 1, h - 1)
                lx, ly = x - x0, y - y0
                out[r, :, oh, ow] = ((1 - lx) * (1 - ly) * X[ROI_IMAGES[r], :, y0, x0] +
                                     lx * (1 - ly) * X[ROI_IMAGES[r], :, y0, x1] +
                                     (1 - lx) * ly * X[ROI_IMAGES[r], :, y1, x0] +
                                     lx * ly * X[ROI_IMAGES[r], :, y1, x1])
    return {"Out": out}


# quadrilaterals (clockwise from the top left) in input pixels, spatial_scale 0.5
QUADS = np.array([[2, 1, 9, 2, 10, 8, 1, 7], [4.4, 0.6, 11.8, 0.2, 11.2, 9.4, 3.8, 8.6],
                  [0.6, 2.2, 7.4, 3.4, 6.2, 12.6, 1.4, 9.8]], "float32")
CASES += [
    OpCase("roi_perspective_transform", {"X": ROI_X, "ROIs": QUADS},
           lod={"ROIs": [[0, 2, 3]]},
           attrs={"transformed_height": 3, "transformed_width": 4, "spatial_scale": 0.5},
           ref=perspective_ref, grad=["X"], atol=1e-4, rtol=1e-4),
]

# ----------------------------------------------------------------------------- deformable ROI


def deformable_psroi_ref(Input, ROIs, Trans, attrs):
    """Per output element, as the operator's definition reads."""
    out_dim, ph_n, pw_n = attrs["output_dim"], attrs["pooled_height"], attrs["pooled_width"]
    gh_n, gw_n = attrs["group_size"]
    part_h, part_w = attrs["part_size"]
    spp, std, s = attrs["sample_per_part"], attrs["trans_std"], attrs["spatial_scale"]
    h, w = Input.shape[2:]
    classes = 1 if attrs["no_trans"] else Trans.shape[1] // 2
    out = np.zeros((len(ROIs), out_dim, ph_n, pw_n))
    for r, roi in enumerate(ROIs):
        x0, y0 = _c_round(roi[0]) * s - 0.5, _c_round(roi[1]) * s - 0.5
        rw = max((_c_round(roi[2]) + 1) * s - 0.5 - x0, 0.1)
        rh = max((_c_round(roi[3]) + 1) * s - 0.5 - y0, 0.1)
        for c in range(out_dim):
            cls = c // (out_dim // classes)
            for i in range(ph_n):
                for j in range(pw_n):
                    pi, pj = int(np.floor(i / ph_n * part_h)), int(np.floor(j / pw_n * part_w))
                    tx = 0 if attrs["no_trans"] else Trans[r, 2 * cls, pi, pj] * std
                    ty = 0 if attrs["no_trans"] else Trans[r, 2 * cls + 1, pi, pj] * std
                    gw = min(max(int(np.floor(j * gw_n / pw_n)), 0), gw_n - 1)
                    gh = min(max(int(np.floor(i * gh_n / ph_n)), 0), gh_n - 1)
                    img = Input[ROI_IMAGES[r], (c * gh_n + gh) * gw_n + gw]
                    vals = []
                    for a in range(spp):
                        for b in range(spp):
                            sx = j * rw / pw_n + x0 + tx * rw + b * rw / pw_n / spp
                            sy = i * rh / ph_n + y0 + ty * rh + a * rh / ph_n / spp
                            if -0.5 <= sx <= w - 0.5 and -0.5 <= sy <= h - 0.5:
                                sx, sy = min(max(sx, 0), w - 1), min(max(sy, 0), h - 1)
                                xa, ya = int(np.floor(sx)), int(np.floor(sy))
                                xb, yb = int(np.ceil(sx)), int(np.ceil(sy))
                                dx, dy = sx - xa, sy - ya
                                vals.append((1 - dx) * (1 - dy) * img[ya, xa] +
                                            (1 - dx) * dy * img[yb, xa] +
                                            dx * (1 - dy) * img[ya, xb] + dx * dy * img[yb, xb])
                    out[r, c, i, j] = np.mean(vals) if vals else 0
    return {"Output": out}


DPS_ATTRS = {"no_trans": False, "spatial_scale": 0.5, "output_dim": 2, "group_size": [2, 2],
             "pooled_height": 2, "pooled_width": 2, "part_size": [2, 2], "sample_per_part": 2,
             "trans_std": 0.1}
CASES += [
    OpCase("deformable_psroi_pooling",
           {"Input": rand(2, 8, 5, 6, seed=37), "ROIs": ROIS,
            "Trans": rand(3, 2, 2, 2, low=-0.9, high=0.9, seed=38)},
           lod={"ROIs": [[0, 2, 3]]}, attrs=DPS_ATTRS, ref=deformable_psroi_ref,
           outputs=["Output", "TopCount"], grad=["Input", "Trans"], grad_outputs=["Output"],
           grad_rtol=1e-3),
    OpCase("deformable_psroi_pooling",
           {"Input": rand(2, 2, 5, 6, seed=39), "ROIs": ROIS,
            "Trans": rand(3, 4, 1, 1, low=-0.9, high=0.9, seed=40)},
           lod={"ROIs": [[0, 2, 3]]},
           attrs={**DPS_ATTRS, "group_size": [1, 1], "part_size": [1, 1], "sample_per_part": 1},
           ref=deformable_psroi_ref, grad=["Input", "Trans"], grad_outputs=["Output"],
           grad_rtol=1e-3, id="deformable_psroi_pooling_two_classes"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)
