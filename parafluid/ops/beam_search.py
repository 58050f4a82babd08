"""Beam search: ``beam_search`` (one step) and ``beam_search_decode`` (the sentences), with
Fluid 1.6's semantics and LoD layout.

``beam_search`` reads, per prefix row, its last id and score (``pre_ids``/``pre_scores``,
``[R, 1]``) and its ``K`` candidates (``ids``/``scores``, ``[R, K]``; the scores already
accumulated unless ``is_accumulated`` is False, then ``pre_score + log(p)``). The LoD of
``scores`` at ``level`` groups the prefix rows by source sentence. For each source the
``beam_size`` best (prefix, id) pairs are kept (ties: the earlier prefix first); a prefix
that ended (its id is ``end_id``) offers only itself, with its score unchanged. A source
whose selected items all end and whose prefixes all ended is finished and drops out (no
rows). Outputs ``selected_ids``/``selected_scores`` ``[M, 1]`` carry the LoD
``[rows per source (absolute prefix offsets), items per prefix row]`` and ``parent_idx``
the prefix row of each item; within a prefix the items come best first.

``beam_search_decode`` takes the arrays of every step's selected ids and scores (step 0:
the start ids) and follows each final item back through its prefixes. A sentence ends at
the step where it was selected last (its source finished, or the last step); repeated
end tokens are dropped. ``SentenceIds``/``SentenceScores`` are flat, with the LoD
``[sentences per source, tokens per sentence]``, sentences of a source best first (by
their final score).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..lod import attach_lod, get_lod
from .registry import Meta, register_op

__all__: list[str] = []


def _source_rows(op: str, t: torch.Tensor, level: int) -> list[int]:
    """Absolute row offsets of each source at ``level`` of ``t``'s LoD."""
    lod = get_lod(t)
    if not lod or level >= len(lod):
        raise ValueError(f"{op}: scores must carry a LoD with level {level} (source -> "
                         f"prefix rows), got {lod}")
    offs = list(lod[level])
    for finer in lod[level + 1:]:
        offs = [finer[o] for o in offs]
    return offs


def _beam_search(ins: dict, attrs: dict, ctx: Any) -> dict:
    pre_ids = ins["pre_ids"].reshape(-1).tolist()
    pre_scores = ins["pre_scores"].reshape(-1).tolist()
    scores_t = ins["scores"]
    rows = scores_t.shape[0]
    scores = scores_t.reshape(rows, -1).tolist()
    ids = ins["ids"].reshape(rows, -1).tolist() if ins["ids"] is not None else None
    beam, end_id = int(attrs["beam_size"]), int(attrs["end_id"])
    accumulated = bool(attrs["is_accumulated"])
    if len(pre_ids) != rows:
        raise ValueError(f"beam_search: pre_ids has {len(pre_ids)} rows but scores has {rows}")
    # the LoD of scores; when the ops that computed them dropped it, that of ids / pre_ids
    lod_of = next((t for t in (scores_t, ins["ids"], ins["pre_ids"])
                   if t is not None and get_lod(t)), scores_t)
    sources = _source_rows("beam_search", lod_of, int(attrs["level"]))
    per_row: list[list[tuple[int, float]]] = [[] for _ in range(rows)]
    for s in range(len(sources) - 1):
        items: list[tuple[float, int, int, int]] = []  # (score, -row, -k order, id)
        for row in range(sources[s], sources[s + 1]):
            if pre_ids[row] == end_id:
                items.append((pre_scores[row], row, 0, end_id))
                continue
            for k, p in enumerate(scores[row]):
                score = p if accumulated else pre_scores[row] + math.log(p)
                items.append((score, row, k, ids[row][k] if ids is not None else k))
        # best first; ties: the earlier prefix (Fluid's item order), then the earlier candidate
        items.sort(key=lambda it: (-it[0], it[1], it[2]))
        top = items[:beam]
        finished = all(it[3] == end_id for it in top) and all(
            pre_ids[row] == end_id for row in range(sources[s], sources[s + 1]))
        if not finished:
            for score, row, _, tok in top:
                per_row[row].append((tok, score))
    low, sel_ids, sel_scores, parents = [0], [], [], []
    for row, items in enumerate(per_row):
        for tok, score in items:
            sel_ids.append(tok)
            sel_scores.append(score)
            parents.append(row)
        low.append(len(sel_ids))
    lod = [sources, low]
    dev = scores_t.device
    return {"selected_ids": attach_lod(torch.tensor(sel_ids, dtype=torch.int64,
                                                    device=dev).reshape(-1, 1), lod),
            "selected_scores": attach_lod(torch.tensor(sel_scores, dtype=scores_t.dtype,
                                                       device=dev).reshape(-1, 1), lod),
            "parent_idx": torch.tensor(parents, dtype=torch.int32, device=dev)}


def _beam_search_shape(ins: dict, attrs: dict) -> dict:
    return {"selected_ids": Meta((-1, 1), "int64"),
            "selected_scores": Meta((-1, 1), ins["scores"].dtype),
            "parent_idx": Meta((-1,), "int32")}


register_op("beam_search", inputs=("pre_ids", "pre_scores", "ids?", "scores"),
            outputs=("selected_ids", "selected_scores", "parent_idx?"),
            attrs={"level": 0, "beam_size": 1, "end_id": 0, "is_accumulated": True},
            infer_shape=_beam_search_shape, kernel=_beam_search)


# ----------------------------------------------------------------------------- decode


def _beam_search_decode(ins: dict, attrs: dict, ctx: Any) -> dict:
    step_ids, step_scores = ins["Ids"], ins["Scores"]
    end_id = int(attrs["end_id"])
    if not step_ids or len(step_ids) != len(step_scores):
        raise ValueError(f"beam_search_decode: Ids and Scores must be arrays of the same "
                         f"non-zero length, got {len(step_ids)} and {len(step_scores)}")
    lods = []
    for t, ids in enumerate(step_ids):
        lod = get_lod(ids)
        if not lod or len(lod) != 2:
            raise ValueError(f"beam_search_decode: step {t} of Ids must carry a 2-level LoD "
                             f"(source -> prefixes -> items), got {lod}")
        lods.append(lod)
    n_src = len(lods[0][0]) - 1
    sentences: list[list[tuple[list[int], list[float]]]] = [[] for _ in range(n_src)]
    cursors: list[list[int]] = [[] for _ in range(n_src)]  # per sentence: its row at step t
    for t in range(len(step_ids) - 1, -1, -1):
        src_lod, item_lod = lods[t]
        ids = step_ids[t].reshape(-1).tolist()
        scores = step_scores[t].reshape(-1).tolist()
        for s in range(n_src):
            if not cursors[s]:  # the source's last step: every item starts a sentence
                for prefix in range(src_lod[s], src_lod[s + 1]):
                    for row in range(item_lod[prefix], item_lod[prefix + 1]):
                        sentences[s].append(([ids[row]], [scores[row]]))
                        cursors[s].append(prefix)
                continue
            for k, row in enumerate(cursors[s]):
                words, sc = sentences[s][k]
                if ids[row] != end_id or not words:  # repeated end tokens are dropped
                    words.append(ids[row])
                    sc.append(scores[row])
                # the prefix this row extends: the row of step t - 1 it came from
                prefix = next(p for p in range(src_lod[s], src_lod[s + 1])
                              if item_lod[p] <= row < item_lod[p + 1])
                cursors[s][k] = prefix
    out_ids, out_scores, per_src, per_sent = [], [], [0], [0]
    for s in range(n_src):
        ranked = sorted(sentences[s], key=lambda ws: -ws[1][0])  # final score, best first
        for words, sc in ranked:
            out_ids.extend(reversed(words))
            out_scores.extend(reversed(sc))
            per_sent.append(per_sent[-1] + len(words))
        per_src.append(per_src[-1] + len(ranked))
    lod = [per_src, per_sent]
    dev = step_ids[0].device
    # flat [N], as Fluid's kernel resizes them
    return {"SentenceIds": attach_lod(torch.tensor(out_ids, dtype=torch.int64, device=dev),
                                      lod),
            "SentenceScores": attach_lod(torch.tensor(out_scores, dtype=step_scores[0].dtype,
                                                      device=dev), lod)}


def _decode_shape(ins: dict, attrs: dict) -> dict:
    return {"SentenceIds": Meta((-1,), "int64"),
            "SentenceScores": Meta((-1,), ins["Scores"].dtype)}


register_op("beam_search_decode", inputs=("Ids", "Scores"),
            outputs=("SentenceIds", "SentenceScores"), attrs={"beam_size": 1, "end_id": 0},
            infer_shape=_decode_shape, kernel=_beam_search_decode)


# ----------------------------------------------------------------------------- gather_tree


def _gather_tree_shape(ins: dict, attrs: dict) -> dict:
    ids, parents = ins["Ids"], ins["Parents"]
    if len(ids.shape) != 3:
        raise ValueError(f"gather_tree: Ids must be [max_time, batch_size, beam_size], got "
                         f"{list(ids.shape)}")
    if tuple(ids.shape) != tuple(parents.shape):
        raise ValueError(f"gather_tree: Parents must have the shape of Ids "
                         f"{list(ids.shape)}, got {list(parents.shape)}")
    if ids.dtype not in ("int32", "int64"):
        raise TypeError(f"gather_tree: Ids must be int32 or int64, got {ids.dtype}")
    return {"Out": Meta(ids.shape, ids.dtype)}


def _gather_tree(ins: dict, attrs: dict, ctx: Any) -> dict:
    """Back-trace each final beam through ``Parents`` from the last step to the first."""
    ids, parents = ins["Ids"], ins["Parents"]
    steps, batch, beam = ids.shape
    out = torch.empty_like(ids)
    if steps == 0:
        return {"Out": out}
    if bool(((parents < 0) | (parents >= beam)).any()):
        raise ValueError(f"gather_tree: Parents holds a beam index outside [0, {beam})")
    parent = torch.arange(beam, device=ids.device).expand(batch, beam)
    for t in range(steps - 1, -1, -1):
        out[t] = ids[t].gather(1, parent)
        parent = parents[t].long().gather(1, parent)
    return {"Out": out}


register_op("gather_tree", inputs=("Ids", "Parents"), outputs=("Out",),
            infer_shape=_gather_tree_shape, kernel=_gather_tree)
