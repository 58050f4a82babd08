"""The cost model of docs/scaling.md: fit its constants to bench/scaling.py's records, print
measured vs modelled step times and the predictions at scale, and draw the plots.

    PYTHONPATH=$PWD python bench/scaling_model.py RECORDS.jsonl ... [--png-dir docs]

The model of one synchronous pserver-mode step (every symbol is per step)::

    step = C + n_rt * (r + 2 * lat) + max(S_ps, S_trainer, S_cores)
    S_ps      = k_ps + T * (c_msg * m_ps + c_byte * b_ps) + T * b_ps * 8 / bw
    S_trainer = B_t * 8 / bw
    S_cores   = (P * (k_ps + T * (c_msg * m_ps + c_byte * b_ps)) + T * cpu_t) / cores

C: compute (the bench's sleep); n_rt: round trips a trainer makes one after the other (one
per send op, per recv op, per barrier); r: the runtime's cost of one round trip; lat: one-way
network latency; T trainers, P pservers; m_ps, b_ps: messages and bytes one trainer exchanges
with the busiest pserver; B_t: the bytes of one trainer; bw: bits/s of a host's link (the
loopback runs were not shaped: that term is left out of their fit); cpu_t: a trainer's own
CPU time; cores: the cores the processes share (2 here; on a cluster every process has its
own, and the term drops out). k_ps, c_msg, c_byte come from the pservers' measured CPU time,
r from the measured step times. Async mode: the same form without the barriers, fitted on
its own. The collective mode (ring all-reduce)::

    step = C + n_coll * 2 (n - 1) * h + 2 (n - 1) / n * B_t * 8 / bw + cpu_copy

with h the cost of one hop of the ring (a message one rank must receive before it sends),
n_coll the all-reduces per step (1 fused, one per gradient unfused).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections import defaultdict

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from scaling import job_params, slice_blocks, vgg_params  # noqa: E402

CORES = 2
VGG16_PARAMS = sum(n for _, n in vgg_params(1))  # 138 M


def load(paths: list[str]) -> list[dict]:
    rows = []
    for p in paths:
        with open(p) as f:
            rows += [json.loads(line) for line in f if line.strip()]
    return [r for r in rows if r.get("ok")]


def medians(rows: list[dict], keys: tuple[str, ...]) -> dict[tuple, dict]:
    """One record per configuration: the median of each figure over the runs."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        groups[tuple(r.get(k) for k in keys)].append(r)
    out = {}
    for key, rs in groups.items():
        m = dict(rs[0])
        for f in ("step_ms", "trainer_cpu_ms", "pserver_cpu_ms", "trainer_bytes",
                  "pserver_bytes_max", "trainer_msgs"):
            if f in rs[0]:
                m[f] = statistics.median(r[f] for r in rs)
        m["runs"] = len(rs)
        m["range"] = (min(r["step_ms"] for r in rs), max(r["step_ms"] for r in rs))
        out[key] = m
    return out


def traffic(p: int, div: int = 16, kind: str = "dense") -> dict:
    """Per trainer and step, from the slicing: round trips in series, and the messages and
    bytes of the busiest pserver (without the barriers)."""
    params = job_params(kind, div)
    eps = [f"ps{i}" for i in range(p)]
    plan = slice_blocks(params, eps)
    per = {e: [0, 0] for e in eps}
    for blocks in plan.values():
        for _, e, n in blocks:
            per[e][0] += 2       # send + recv
            per[e][1] += 2 * 4 * n
    busiest = max(eps, key=lambda e: per[e][1])
    return {"n_rt": 2 * len(params), "m_ps": per[busiest][0], "b_ps": per[busiest][1],
            "b_t": sum(v[1] for v in per.values())}


class PServerModel:
    """The pserver-mode model of the module docstring, fitted per mode (sync or async).

    ``pts``: the loopback records of that mode, dense and calibration jobs (``msgs``,
    ``bytes``: the latter separate the cost per message from the cost per byte).
    """

    def __init__(self, pts: list[dict], sync: bool) -> None:
        self.sync = sync
        dense = [r for r in pts if r["kind"] == "dense"]
        self.C = dense[0]["compute_ms"] / 1000
        # a pserver's CPU per step: k + T (c_msg m + c_byte b), least squares on the busiest
        a, y = [], []
        for r in pts:
            tr = traffic(r["pservers"], kind=r["kind"])
            m = tr["m_ps"] + self._barriers()
            a.append([1.0, r["trainers"] * m, r["trainers"] * tr["b_ps"]])
            y.append(r["pserver_cpu_ms"] / 1000)
        (self.k_ps, self.c_msg, self.c_byte), *_ = np.linalg.lstsq(np.array(a), np.array(y),
                                                                    rcond=None)
        # a trainer's CPU per step: d_msg per message + d_byte per byte
        a, y = [], []
        for r in pts:
            tr = traffic(r["pservers"], kind=r["kind"])
            a.append([tr["n_rt"] + self._barriers() * r["pservers"], tr["b_t"]])
            y.append(r["trainer_cpu_ms"] / 1000)
        (self.d_msg, self.d_byte), *_ = np.linalg.lstsq(np.array(a), np.array(y), rcond=None)
        # r: the rest of a step besides C and the serving, per round trip in series; from
        # the dense jobs of 1 and 2 trainers (the cores are not saturated there)
        few = [r for r in dense if r["trainers"] <= 2]
        self.r = statistics.median(
            (r["step_ms"] / 1000 - self.C - self._serve(r["trainers"], r["pservers"]))
            / self._n_rt(r["pservers"]) for r in few)

    def _barriers(self) -> int:
        return 2 if self.sync else 0

    def _n_rt(self, p: int, div: int = 16) -> int:
        return traffic(p, div)["n_rt"] + self._barriers()

    def _serve(self, t: int, p: int, bw: float = 0.0, cores: float = CORES,
               div: int = 16, hops: int = 2) -> float:
        """The longest of: the busiest pserver's work, a trainer's link, the shared cores."""
        tr = traffic(p, div)
        m = tr["m_ps"] + self._barriers()
        cpu_ps = self.k_ps + t * (self.c_msg * m + self.c_byte * tr["b_ps"])
        cpu_t = self.d_msg * (tr["n_rt"] + self._barriers() * p) + self.d_byte * tr["b_t"]
        link_ps = t * tr["b_ps"] * 8 / bw if bw else 0.0
        # NOTE: the link shaper sleeps in the pserver's one serving thread, so its link time
        # adds to its CPU time; on a real network ZeroMQ's I/O thread moves the bytes while
        # Python works, and the longer of the two counts
        s_ps = cpu_ps + link_ps if hops == 2 else max(cpu_ps, link_ps)
        # NOTE: hops=2: the link shaper delays a message at the sender and again at the
        # receiver, one after the other (store and forward); a switched network: hops=1
        s_t = hops * tr["b_t"] * 8 / bw if bw else 0.0
        s_cores = (p * cpu_ps + t * cpu_t) / cores if cores else 0.0
        return max(s_ps, s_t, s_cores)

    def step(self, t: int, p: int, bw: float = 0.0, lat: float = 0.0, cores: float = CORES,
             div: int = 16, compute: float | None = None, hops: int = 2) -> float:
        """Modelled step time (s) of ``t`` trainers and ``p`` pservers; ``div``: VGG16's
        channels divided by it (1: the full model); ``cores=0``: a machine per process;
        ``hops``: 2 for the link shaper (store and forward), 1 for a switched network."""
        c = self.C if compute is None else compute
        return c + self._n_rt(p, div) * (self.r + 2 * lat) + \
            self._serve(t, p, bw, cores, div, hops)

    def constants(self) -> dict:
        return {"r_us": self.r * 1e6, "k_ps_ms": self.k_ps * 1e3, "c_msg_us": self.c_msg * 1e6,
                "c_byte_ns": self.c_byte * 1e9, "d_msg_us": self.d_msg * 1e6,
                "d_byte_ns": self.d_byte * 1e9}


class CollectiveModel:
    def __init__(self, pts: list[dict]) -> None:
        self.C = pts[0]["compute_ms"] / 1000
        n_grads = len(vgg_params(16))
        a, y = [], []
        for r in pts:
            n = r["trainers"]
            if n == 1:
                continue
            colls = 1 if r["fused"] else n_grads
            a.append([colls * 2 * (n - 1), 1.0])
            y.append(r["step_ms"] / 1000 - self.C)
        (self.h, self.k), *_ = np.linalg.lstsq(np.array(a), np.array(y), rcond=None)
        self.n_grads = n_grads

    def step(self, n: int, fused: bool, b_t: float, bw: float = 0.0) -> float:
        if n == 1:
            return self.C
        colls = 1 if fused else self.n_grads
        return self.C + self.k + colls * 2 * (n - 1) * self.h + \
            (2 * (n - 1) / n * b_t * 8 / bw if bw else 0.0)


def report(rows: list[dict], png_dir: str) -> None:
    ps = medians([r for r in rows if r["mode"] == "pserver"],
                 ("kind", "sync", "trainers", "pservers", "link"))
    coll = medians([r for r in rows if r["mode"] == "collective"], ("fused", "trainers"))
    models = {}
    for sync in (True, False):
        pts = [r for r in ps.values() if r["kind"] in ("dense", "msgs", "bytes") and
               r["sync"] == sync and not r.get("link")]
        if any(r["kind"] == "dense" for r in pts):
            models[sync] = PServerModel(pts, sync)
    print("## constants")
    for sync, m in models.items():
        print(f"pserver {'sync' if sync else 'async'}: " +
              ", ".join(f"{k}={v:.3g}" for k, v in m.constants().items()))
    cm = CollectiveModel(list(coll.values())) if len(coll) > 2 else None
    if cm:
        print(f"collective: hop h={cm.h * 1e6:.0f} us, fixed k={cm.k * 1e3:.1f} ms")
    print("\n## measured vs model (median of runs [range]), ms")
    for key in sorted(ps, key=str):
        r = ps[key]
        link = r.get("link") or ""
        bw, lat = (float(x) for x in link.split(",")) if link else (0.0, 0.0)
        m = models.get(r["sync"]) if r["kind"] == "dense" else None
        pred = m.step(r["trainers"], r["pservers"], bw, lat) * 1000 if m else float("nan")
        if r["kind"] in ("msgs", "bytes"):
            continue
        print(f"pserver {'sync ' if r['sync'] else 'async'} {r['kind']:6s} T={r['trainers']:2d} "
              f"P={r['pservers']} {('link ' + link) if link else 'loopback':18s} "
              f"{r['step_ms']:7.1f} [{r['range'][0]:.0f}-{r['range'][1]:.0f}] "
              f"model {pred:7.1f}  ratio {r['step_ms'] / pred:5.2f}  runs {r['runs']}  "
              f"ps cpu {r['pserver_cpu_ms']:.0f}  tr cpu {r['trainer_cpu_ms']:.0f}")
    for key in sorted(coll, key=str):
        r = coll[key]
        pred = cm.step(r["trainers"], r["fused"], r["trainer_bytes"]) * 1000 if cm else 0
        print(f"collective {'fused  ' if r['fused'] else 'unfused'} n={r['trainers']} "
              f"{r['step_ms']:8.1f} [{r['range'][0]:.0f}-{r['range'][1]:.0f}] model {pred:8.1f} "
              f"runs {r['runs']}")
    if True in models:
        predict(models[True], cm)
    if png_dir:
        plots(ps, coll, models, cm, png_dir)


FLUID_STEP_S = 128 / 16.74  # Fluid's VGG16 benchmark: one trainer, 16.74 samples/s, batch 128


def predict(m: PServerModel, cm: CollectiveModel | None) -> None:
    """Fluid's published setups: VGG16 (138 M parameters) on CPU machines, 10 Gbit/s."""
    print("\n## predictions (full VGG16, 553 MB of gradients; one machine per process, "
          f"10 Gbit/s, 50 us; compute {FLUID_STEP_S:.2f} s per step as in Fluid's benchmark)")
    for t, p in ((20, 20), (40, 20), (80, 20), (100, 20), (100, 100)):
        comm = m.step(t, p, 1e10, 50e-6, cores=0, div=1, compute=0.0, hops=1)
        tr = traffic(p, 1)
        cpu_ps = m.k_ps + t * (m.c_msg * (tr["m_ps"] + 2) + m.c_byte * tr["b_ps"])
        print(f"sync T={t:3d} P={p:3d}: {comm:.2f} s of communication per step (busiest "
              f"pserver: CPU {cpu_ps:.2f} s, link {t * tr['b_ps'] * 8 / 1e10:.2f} s; a "
              f"trainer's link {tr['b_t'] * 8 / 1e10:.2f} s; round trips "
              f"{m._n_rt(p, 1) * (m.r + 1e-4):.2f} s); efficiency "
              f"{FLUID_STEP_S / (FLUID_STEP_S + comm):.1%}")
    if cm:
        b_t = VGG16_PARAMS * 4
        for n in (8, 20, 100):
            comm = cm.step(n, True, b_t, 1e10) - cm.C
            print(f"collective fused n={n:3d}: {comm:.2f} s of communication per step")


def plots(ps: dict, coll: dict, models: dict, cm: CollectiveModel | None, out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ts = [1, 2, 4, 8, 16]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.4))
    for ax, (sync, kind) in zip(axes, ((True, "dense"), (False, "dense"), (True, "sparse"))):
        for p, color in zip((1, 2, 4), ("C0", "C1", "C2")):
            pts = sorted((r for r in ps.values() if r["sync"] == sync and r["kind"] == kind and
                          r["pservers"] == p and not r.get("link")), key=lambda r: r["trainers"])
            if not pts:
                continue
            ax.errorbar([r["trainers"] for r in pts], [r["step_ms"] for r in pts],
                        yerr=[[r["step_ms"] - r["range"][0] for r in pts],
                              [r["range"][1] - r["step_ms"] for r in pts]],
                        fmt="o", color=color, label=f"{p} pserver(s), measured", capsize=3)
            m = models.get(sync) if kind == "dense" else None
            if m:
                ax.plot(ts, [m.step(t, p) * 1000 for t in ts], "-", color=color, alpha=0.6,
                        label=f"{p} pserver(s), model")
        ax.axhline(100, color="gray", ls=":", label="compute (sleep)")
        ax.set_xscale("log", base=2)
        ax.set_xticks(ts, [str(t) for t in ts])
        ax.set_xlabel("trainers")
        ax.set_ylabel("step time, ms")
        ax.set_title(f"pserver mode, {'sync' if sync else 'async'}, {kind}")
        ax.legend(fontsize=7)
    fig.suptitle("pserver mode on loopback, 2 shared cores: VGG16/16 gradients (3.1 MB), "
                 "100 ms compute")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "scaling_pserver.png"), dpi=90)
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4))
    ax = axes[0]
    ns = [1, 2, 4, 8]
    for fused, color in ((True, "C0"), (False, "C3")):
        pts = sorted((r for r in coll.values() if r["fused"] == fused),
                     key=lambda r: r["trainers"])
        if not pts:
            continue
        ax.errorbar([r["trainers"] for r in pts], [r["step_ms"] for r in pts],
                    yerr=[[r["step_ms"] - r["range"][0] for r in pts],
                          [r["range"][1] - r["step_ms"] for r in pts]], fmt="o", color=color,
                    capsize=3, label=f"{'fused' if fused else 'one per gradient'}, measured")
        if cm:
            ax.plot(ns, [cm.step(n, fused, pts[0]["trainer_bytes"]) * 1000 for n in ns], "-",
                    color=color, alpha=0.6, label="model")
    ax.set_yscale("log")
    ax.set_xlabel("ranks (gloo)")
    ax.set_ylabel("step time, ms")
    ax.set_title("collective mode, all-reduce of 32 gradients")
    ax.legend(fontsize=7)
    ax = axes[1]
    for link, style in (("1e9,50e-6", "s"), ("1e10,50e-6", "^")):
        bw, lat = (float(x) for x in link.split(","))
        for p, color in ((1, "C0"), (4, "C2")):
            pts = sorted((r for r in ps.values() if r.get("link") == link and
                          r["pservers"] == p), key=lambda r: r["trainers"])
            if not pts:
                continue
            name = f"{bw / 1e9:.0f} Gbit/s"
            ax.plot([r["trainers"] for r in pts], [r["step_ms"] for r in pts], style,
                    color=color, label=f"{name}, {p} pserver(s), measured")
            if True in models:
                ax.plot(ts, [models[True].step(t, p, bw, lat) * 1000 for t in ts], "-",
                        color=color, alpha=0.4 if bw > 5e9 else 0.8)
    ax.set_xscale("log", base=2)
    ax.set_xticks(ts, [str(t) for t in ts])
    ax.set_xlabel("trainers")
    ax.set_ylabel("step time, ms")
    ax.set_title("pserver sync, dense, simulated links (lines: model)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "scaling_collective_links.png"), dpi=90)
    plt.close(fig)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("records", nargs="+")
    p.add_argument("--png-dir", default="")
    a = p.parse_args()
    report(load(a.records), a.png_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
