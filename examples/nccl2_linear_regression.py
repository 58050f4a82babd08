"""Fluid's ``DistributeTranspiler`` example in nccl2 mode, as documented (import line and
use_cuda aside), in a script that trains a linear regression on two trainers.

Run it as two trainer processes:

    python -m parafluid.distributed.launch --nproc_per_node 2 examples/nccl2_linear_regression.py

The launcher sets PADDLE_TRAINER_ID, PADDLE_TRAINER_ENDPOINTS and PADDLE_CURRENT_ENDPOINT;
the lines between the two "DistributeTranspiler example" markers are the example of Fluid's
``fluid.transpiler`` API reference.
"""

import os
import sys

import numpy as np

import parafluid as fluid

if "PADDLE_TRAINER_ENDPOINTS" not in os.environ:  # started as a plain script: no job
    print("examples/nccl2_linear_regression.py is one trainer of a 2-process job; start it "
          "with the launcher:\n    python -m parafluid.distributed.launch --nproc_per_node 2 "
          "examples/nccl2_linear_regression.py", file=sys.stderr)
    sys.exit(2)
use_cuda = False
trainer_id = int(os.environ["PADDLE_TRAINER_ID"])
trainers = os.environ["PADDLE_TRAINER_ENDPOINTS"]
workers = trainers
curr_ep = os.environ["PADDLE_CURRENT_ENDPOINT"]

x = fluid.layers.data(name="x", shape=[13], dtype="float32")
y = fluid.layers.data(name="y", shape=[1], dtype="float32")
pred = fluid.layers.fc(input=x, size=1)
loss_var = fluid.layers.mean(fluid.layers.square_error_cost(input=pred, label=y))
fluid.optimizer.SGD(learning_rate=0.05).minimize(loss_var)

# --- DistributeTranspiler example (nccl2 mode), as documented
config = fluid.DistributeTranspilerConfig()
config.mode = "nccl2"
t = fluid.DistributeTranspiler(config=config)
t.transpile(trainer_id, workers=workers, current_endpoint=curr_ep)
exe = fluid.ParallelExecutor(
    use_cuda,
    loss_name=loss_var.name,
    num_trainers=len(trainers.split(",")),
    trainer_id=trainer_id
)
# --- end of the DistributeTranspiler example

fluid.Executor(fluid.CPUPlace()).run(fluid.default_startup_program())
rng = np.random.RandomState(trainer_id)  # each trainer reads its own part of the data
w_true = np.linspace(-1, 1, 13).astype("float32")
for _ in range(30):
    xb = rng.uniform(-1, 1, (16, 13)).astype("float32")
    loss, = exe.run(fetch_list=[loss_var.name], feed={"x": xb, "y": xb @ w_true[:, None]})
w = np.array(fluid.global_scope().find_var(pred.block.all_parameters()[0].name).get_tensor())
print(f"trainer {trainer_id}: loss {float(loss.mean()):.4f}, weights[:3] {w.ravel()[:3]}")
