"""The README's distributed example: one script, N trainer processes, one machine or many.

    CPU_NUM=1 python -m parafluid.distributed.launch --nproc_per_node 2 \
        examples/train_distributed.py

Each trainer reads its own shard of the data; gradients are summed over every device of every
trainer, so the trainers hold the same parameters after every step.
"""

import sys

import numpy as np

import parafluid as fluid

job = fluid.distributed.env()        # trainer id and endpoints, from the launcher or torchrun
if job.source == "default":          # started as a plain script: one process, no job
    print("examples/train_distributed.py is one trainer of a multi-process job; start it "
          "with the launcher:\n    CPU_NUM=1 python -m parafluid.distributed.launch "
          "--nproc_per_node 2 examples/train_distributed.py", file=sys.stderr)
    sys.exit(2)

x = fluid.layers.data(name="x", shape=[13], dtype="float32")
y = fluid.layers.data(name="y", shape=[1], dtype="float32")
pred = fluid.layers.fc(input=x, size=1)
loss = fluid.layers.mean(fluid.layers.square_error_cost(input=pred, label=y))
fluid.optimizer.SGD(learning_rate=0.2).minimize(loss)

config = fluid.DistributeTranspilerConfig()
config.mode = "nccl2"
fluid.DistributeTranspiler(config=config).transpile(
    job.trainer_id, trainers=",".join(job.trainer_endpoints),
    current_endpoint=job.current_endpoint)

exe = fluid.Executor(fluid.CPUPlace())
exe.run(fluid.default_startup_program())          # meets the other trainers
train = fluid.ParallelExecutor(use_cuda=False, loss_name=loss.name,
                               num_trainers=job.trainers, trainer_id=job.trainer_id)

rng = np.random.RandomState(job.trainer_id)       # this trainer's shard of the data
w_true = np.linspace(-1, 1, 13).astype("float32")[:, None]
for _ in range(200):
    xb = rng.uniform(-1, 1, (32, 13)).astype("float32")
    out, = train.run(fetch_list=[loss.name], feed={"x": xb, "y": xb @ w_true})
print(f"trainer {job.trainer_id} of {job.trainers}: loss {float(out.mean()):.4f}")
