"""The trainers' shared memory when a trainer dies or gives up (two trainer processes).

Trainer 0 hosts the store through which the trainers agree on the area: a trainer waiting
for it there must name it within seconds (not wait for the deadline), and the area's names
must not stay in ``/dev/shm``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest
from dist_helpers import child_env, endpoints, reap, start

pytestmark = pytest.mark.slow

_DEADLINE_MS = 60000

# trainer 0: once trainer 1 has said that it opened the area, die before saying so itself
# (WHEN=open), or where it would remove the area's names (WHEN=remove)
_TRAINER0 = """
import json, os, sys, time
import torch
from parafluid.distributed import collective
eps, when = sys.argv[1], sys.argv[2]
C = collective.ProcessGroupCommunicator
share, me = C._share_memory, []
def remember(self):
    me.append(self)
    return share(self)
C._share_memory = remember
def report(place):
    print(json.dumps({"directory": place.directory}), flush=True)
opened = collective.SharedArea
def open_and_die(place, *args):
    area = opened(place, *args)
    report(place)
    while not me[0]._store.present(["shm/1"])[0]:
        time.sleep(0.01)
    os._exit(3)
def die(place):
    report(place)
    os._exit(3)
if when == "open":
    collective.SharedArea = open_and_die
else:
    collective.remove_shared_area = die
collective.init_collective(eps, 0, [torch.device("cpu")])
"""

_TRAINER1 = """
import json, sys, time
import torch
from parafluid.distributed.collective import init_collective
start = time.monotonic()
try:
    comm = init_collective(sys.argv[1], 1, [torch.device("cpu")])
    out = {"shared": comm.shared_memory}
except Exception as e:
    out = {"error": f"{type(e).__name__}: {e}"}
out["took"] = time.monotonic() - start
print(json.dumps(out), flush=True)
"""


def _run(when: str) -> tuple[str, dict]:
    eps = endpoints(2)
    env = child_env(CPU_NUM="1", FLAGS_rpc_deadline=str(_DEADLINE_MS))
    procs = []
    try:
        procs = [start(["-c", _TRAINER0, eps, when], env, stdout=subprocess.PIPE, text=True),
                 start(["-c", _TRAINER1, eps], env, stdout=subprocess.PIPE, text=True)]
        # well under the deadline: a trainer 1 that waited for it fails here
        out1, _ = procs[1].communicate(timeout=_DEADLINE_MS / 2000)
        out0, _ = procs[0].communicate(timeout=30)
    finally:
        reap(procs)
    assert procs[0].returncode == 3, out0
    return json.loads(out0.splitlines()[-1])["directory"], json.loads(out1.splitlines()[-1])


@pytest.mark.timeout(120)
def test_trainer_0_dead_before_saying_it_opened_the_area_is_named_in_seconds() -> None:
    directory, t1 = _run("open")
    assert "CollectiveError: sharing memory with the trainers of this machine failed on " \
        "trainer 1" in t1["error"], t1
    assert "trainer 0 (127.0.0.1:" in t1["error"] and "hosts the rendezvous store" in \
        t1["error"], t1
    assert t1["took"] < _DEADLINE_MS / 4000, t1
    # trainer 1 had opened the area (its token matched): it removed the names
    assert not os.path.exists(directory)


@pytest.mark.timeout(120)
def test_trainer_0_dead_before_removing_the_area_leaves_nothing() -> None:
    directory, t1 = _run("remove")
    # every trainer had opened it: trainer 1 is set up, unless trainer 0 died while trainer
    # 1 still read the last answers from its store (a loaded machine): then it names it
    if "error" in t1:
        assert "trainer 0 (127.0.0.1:" in t1["error"] and "hosts the rendezvous store" in \
            t1["error"], t1
        assert t1["took"] < _DEADLINE_MS / 4000, t1
    else:
        assert t1.get("shared") is True, t1
    assert not os.path.exists(directory)  # trainer 1 removed them


# both scripts below: trainer ``tid`` joins, takes the shared-memory path, runs one
# all-reduce; ``give_up(comm)`` makes its next shared-memory wait fail at once
_JOINED = """
import json, os, sys, time
import torch
from parafluid.distributed import collective
eps, tid = sys.argv[1], int(sys.argv[2])
comm = collective.init_collective(eps, tid, [torch.device("cpu")])
comm.sizes_agreed = True
assert comm.shared_memory
comm.all_reduce([torch.ones(10)], name="g")
def give_up(comm):
    def watch(start):
        def fail():
            raise RuntimeError("no answer in shared memory within 0.1 s")
        return fail
    comm._watch = watch
"""

# trainer 0 gives up its second all-reduce (as at its deadline) while trainer 1 has not
# reached it (stopped, say), and stays alive; trainer 1 then reaches it
_BROKEN = _JOINED + """
out = sys.argv[3]
def wait_for(name):
    end = time.monotonic() + 60
    while not os.path.exists(os.path.join(out, name)) and time.monotonic() < end:
        time.sleep(0.01)
if tid == 0:
    give_up(comm)
else:
    wait_for("broken")
start = time.monotonic()
try:
    comm.all_reduce([torch.ones(10)], name="g")
    result = {"ok": True}
except Exception as e:
    result = {"error": f"{type(e).__name__}: {e}"}
result["took"] = time.monotonic() - start
open(os.path.join(out, "broken" if tid == 0 else "done"), "w").close()
print(json.dumps(result), flush=True)
if tid == 0:
    wait_for("done")
"""


@pytest.mark.timeout(120)
def test_a_trainer_that_gave_up_ends_the_wait_of_a_late_peer_at_once(tmp_path) -> None:
    eps = endpoints(2)
    env = child_env(CPU_NUM="1", FLAGS_rpc_deadline=str(_DEADLINE_MS))
    procs = []
    try:
        procs = [start(["-c", _BROKEN, eps, str(t), str(tmp_path)], env,
                       stdout=subprocess.PIPE, text=True) for t in (0, 1)]
        # well under the deadline: a trainer 1 that waited for it fails here
        outs = [p.communicate(timeout=_DEADLINE_MS / 2000)[0] for p in procs]
    finally:
        reap(procs)
    t0, t1 = (json.loads(o.splitlines()[-1]) for o in outs)
    assert "CollectiveError: all_reduce (collective #2) failed on trainer 0" in t0["error"], t0
    assert "CollectiveError: all_reduce (collective #2) failed on trainer 1" in t1["error"], t1
    assert re.search(r"trainer 0 \(127.0.0.1:\d+\) gave up \(a collective failed there\)",
                     t1["error"]), t1
    assert t1["took"] < _DEADLINE_MS / 4000, t1


# three trainers: trainer 1 dies after the first all-reduce; trainer 0 gives up the second
# at once (before any heartbeat can say that trainer 1 died), which wakes trainer 2
_THREE = _JOINED + """
if tid == 1:
    os._exit(3)
if tid == 0:
    give_up(comm)
try:
    comm.all_reduce([torch.ones(10)], name="g")
    print(json.dumps({"ok": True}), flush=True)
except Exception as e:
    print(json.dumps({"error": f"{type(e).__name__}: {e}"}), flush=True)
"""


@pytest.mark.timeout(120)
def test_a_trainer_woken_by_a_peer_that_gave_up_names_the_trainer_that_died() -> None:
    eps = endpoints(3)
    env = child_env(CPU_NUM="1", FLAGS_rpc_deadline=str(_DEADLINE_MS))
    procs = []
    try:
        procs = [start(["-c", _THREE, eps, str(t)], env, stdout=subprocess.PIPE, text=True)
                 for t in range(3)]
        outs = [p.communicate(timeout=_DEADLINE_MS / 2000)[0] for p in procs]
    finally:
        reap(procs)
    t2 = json.loads(outs[2].splitlines()[-1])
    assert "CollectiveError: all_reduce (collective #2) failed on trainer 2" in t2["error"], t2
    # the news is trainer 1's death, not that trainer 0 gave up because of it
    assert re.search(r"trainer 1 \(127.0.0.1:\d+\) stopped responding", t2["error"]), t2
