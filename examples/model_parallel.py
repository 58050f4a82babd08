"""Model parallelism across processes: a 2-stage MLP, stage i on worker process i.

    python -m parafluid.distributed.launch --nproc_per_node 2 examples/model_parallel.py
    CPU_NUM=2 python -m parafluid.distributed.launch --nproc_per_node 2 \
        examples/model_parallel.py --hybrid

The same script runs as both workers (the launcher sets PADDLE_TRAINER_ID and
PADDLE_TRAINER_ENDPOINTS). ``transpile`` keeps this worker's stage and adds the sends and
receives of the activation (forward) and of its gradient (backward). With ``--hybrid`` each
stage is also data parallel over two CPU devices (``cpu:0-1``).
"""

import sys

import numpy as np

import parafluid as fluid

job = fluid.distributed.env()        # trainer id and endpoints, from the launcher
if job.trainers != 2:                # started as a plain script: one process, no job
    print("examples/model_parallel.py is one of the 2 worker processes of a job; start it "
          "with the launcher:\n    python -m parafluid.distributed.launch --nproc_per_node 2 "
          "examples/model_parallel.py", file=sys.stderr)
    sys.exit(2)
devices = "cpu:0-1" if "--hybrid" in sys.argv else "cpu"

x = fluid.layers.data(name="x", shape=[13], dtype="float32")
y = fluid.layers.data(name="y", shape=[1], dtype="float32")
with fluid.place_guard(f"/node:worker:0/{devices}"):          # stage 0
    h = fluid.layers.fc(input=x, size=32, act="tanh")
with fluid.place_guard(f"/node:worker:1/{devices}"):          # stage 1
    pred = fluid.layers.fc(input=h, size=1)
    loss = fluid.layers.mean(fluid.layers.square_error_cost(input=pred, label=y))
fluid.optimizer.SGD(learning_rate=0.1).minimize(loss)  # each update where its gradient is

t = fluid.DistributeTranspiler()
t.transpile(job.trainer_id, trainers=",".join(job.trainer_endpoints))
main = t.get_trainer_program()       # waits until the other worker answers
exe = fluid.Executor(fluid.CPUPlace())
exe.run(fluid.default_startup_program())   # this worker's parameters
if devices != "cpu":                 # data parallel over this stage's devices
    main = fluid.CompiledProgram(main).with_data_parallel(
        loss_name=loss.name, places=fluid.cpu_places(2))
has_loss = job.trainer_id == 1       # the loss lives on stage 1

rng = np.random.RandomState(0)       # every worker is fed the same batches
w_true = np.linspace(-1, 1, 13).astype("float32")[:, None]
for step in range(100):
    xb = rng.uniform(-1, 1, (32, 13)).astype("float32")
    out = exe.run(main, feed={"x": xb, "y": xb @ w_true},
                  fetch_list=[loss] if has_loss else [])
    if has_loss and step in (0, 99):
        print(f"worker 1: step {step} loss {float(np.mean(out[0])):.4f}")
print(f"worker {job.trainer_id} of {job.trainers}: done")
