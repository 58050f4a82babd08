"""``tree_conv`` (Fluid 1.6): tree-based convolution (TBCNN) over the nodes of a tree.

Each sample's ``EdgeSet`` (``[E, 2]`` int32, parent then child, nodes numbered from 1) lists
its edges until the first pair holding a 0; it has ``E' + 1`` nodes for ``E'`` edges. The
window of node ``u`` holds ``u`` and its descendants less than ``max_depth`` levels below
it. A window node at depth ``d`` (``u`` at 0), child number ``j`` (from 1) of ``n`` children,
weighs in with ``eta_t = (max_depth - d) / max_depth``,
``eta_l = (1 - eta_t) * ((j - 1) / (n - 1)`` or ``0.5`` for an only child``)`` and
``eta_r = (1 - eta_t) * (1 - eta_l)`` (Fluid's formula); ``u`` itself has ``(0, 0, 1)``.
Output row ``u - 1`` is ``sum_i sum_k P[u, i, k] * Filter[i, k]`` with
``P[u, i, :] = sum over window nodes v of (eta_l, eta_r, eta_t)(v) * X[v - 1, i]``; rows past
the tree's nodes stay 0. The output is linear in ``NodesVector`` and ``Filter``, so both
gradients are the transposed products.
"""

from __future__ import annotations

from typing import Any

import torch

from .registry import Meta, register_op

__all__: list[str] = []


def _shape(ins: dict, attrs: dict) -> dict:
    x, edges, w = ins["NodesVector"], ins["EdgeSet"], ins["Filter"]
    if len(x.shape) != 3 or len(edges.shape) != 3 or edges.shape[2] != 2:
        raise ValueError(f"tree_conv: NodesVector must be [B, N, F] and EdgeSet [B, E, 2], "
                         f"got {list(x.shape)} and {list(edges.shape)}")
    if edges.dtype not in ("int32", "int64"):
        raise TypeError(f"tree_conv: EdgeSet must hold int32 node ids, got {edges.dtype}")
    if len(w.shape) != 4 or w.shape[1] != 3 or w.shape[0] not in (x.shape[2], -1):
        raise ValueError(f"tree_conv: Filter must be [F, 3, output_size, num_filters] with "
                         f"F = {x.shape[2]}, got {list(w.shape)}")
    if attrs["max_depth"] < 1:
        raise ValueError(f"tree_conv: max_depth must be positive, got {attrs['max_depth']}")
    return {"Out": Meta((x.shape[0], x.shape[1], w.shape[2], w.shape[3]), x.dtype)}


def _children(edges: list[list[int]], nodes: int) -> tuple[list[list[int]], int]:
    """Children per node (1-based) of the edges before the first pair holding a 0."""
    kids: list[list[int]] = [[] for _ in range(len(edges) + 2)]
    count = 1
    for u, v in edges:
        if u == 0 or v == 0:
            break
        if not (0 < u <= nodes and 0 < v <= nodes):
            raise ValueError(f"tree_conv: edge ({u}, {v}) names a node outside 1..{nodes} "
                             f"(NodesVector has {nodes} rows)")
        kids[u].append(v)
        count += 1
    return kids, count


def _weights(edges: torch.Tensor, nodes: int, max_depth: int, like: torch.Tensor) -> torch.Tensor:
    """``E[u, v, k]``: how much node ``v``'s features add to window ``u`` as (l, r, t)."""
    kids, count = _children(edges.tolist(), nodes)
    coef = torch.zeros((nodes, nodes, 3), dtype=torch.float64)
    for root in range(1, min(count, nodes) + 1):
        stack = [(root, 1, 1, 0)]  # node, child number, siblings, depth
        seen = {root}
        while stack:
            node, j, n, depth = stack.pop()
            eta_t = (max_depth - depth) / max_depth
            eta_l = (1 - eta_t) * (0.5 if n == 1 else (j - 1) / (n - 1))
            eta_r = (1 - eta_t) * (1 - eta_l)
            coef[root - 1, node - 1] += torch.tensor([eta_l, eta_r, eta_t], dtype=torch.float64)
            if depth + 1 < max_depth:
                for i, child in enumerate(kids[node]):
                    if child not in seen:
                        seen.add(child)
                        stack.append((child, i + 1, len(kids[node]), depth + 1))
    return coef.to(device=like.device, dtype=like.dtype)


def _all_weights(ins: dict, attrs: dict) -> torch.Tensor:
    x, edges = ins["NodesVector"], ins["EdgeSet"]
    return torch.stack([_weights(edges[b], x.shape[1], attrs["max_depth"], x)
                        for b in range(x.shape[0])])  # [B, N, N, 3]


def _tree_conv(ins: dict, attrs: dict, ctx: Any) -> dict:
    coef = _all_weights(ins, attrs)
    patch = torch.einsum("bunk,bni->buik", coef, ins["NodesVector"])
    return {"Out": torch.einsum("buik,ikof->buof", patch, ins["Filter"])}


def _tree_conv_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    coef, dout = _all_weights(ins, attrs), ins["Out@GRAD"]
    out = {}
    if "NodesVector" in ctx.need:
        dpatch = torch.einsum("buof,ikof->buik", dout, ins["Filter"])
        out["NodesVector@GRAD"] = torch.einsum("bunk,buik->bni", coef, dpatch)
    if "Filter" in ctx.need:
        patch = torch.einsum("bunk,bni->buik", coef, ins["NodesVector"])
        out["Filter@GRAD"] = torch.einsum("buik,buof->ikof", patch, dout)
    return out


register_op("tree_conv", inputs=("NodesVector", "EdgeSet", "Filter"), outputs=("Out",),
            attrs={"max_depth": 2}, infer_shape=_shape, kernel=_tree_conv,
            grad_kernel=_tree_conv_grad, grad_uses=("NodesVector", "EdgeSet", "Filter"),
            no_grad_inputs=("EdgeSet",),
            no_compile="walks each sample's tree on the host to weigh its windows")
