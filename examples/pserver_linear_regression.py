"""Fluid's ``DistributeTranspiler`` example in pserver mode, as documented (import line
aside, endpoints from the launcher), in a script that trains a linear regression with 2
pservers and 2 trainers on this machine.

    python -m parafluid.distributed.launch --server_num 2 --worker_num 2 \\
        examples/pserver_linear_regression.py

The launcher sets PADDLE_TRAINING_ROLE, PADDLE_PSERVER_ENDPOINTS, PADDLE_CURRENT_ENDPOINT,
PADDLE_TRAINER_ID and PADDLE_TRAINERS_NUM; the lines between the two "DistributeTranspiler
example" markers are the example of Fluid's ``fluid.transpiler`` API reference. Each
pserver exits once both trainers called ``exe.close()``.
"""

import os
import sys

import numpy as np

import parafluid as fluid

if "PADDLE_PSERVER_ENDPOINTS" not in os.environ:  # started as a plain script: no job
    print("examples/pserver_linear_regression.py is one process (a pserver or a trainer) of "
          "a parameter-server job; start them all with the launcher:\n    python -m "
          "parafluid.distributed.launch --server_num 2 --worker_num 2 "
          "examples/pserver_linear_regression.py", file=sys.stderr)
    sys.exit(2)
pserver_endpoints = os.environ["PADDLE_PSERVER_ENDPOINTS"]
trainer_endpoints = os.environ["PADDLE_TRAINER_ENDPOINTS"]
current_endpoint = os.environ["PADDLE_CURRENT_ENDPOINT"]
trainer_id = int(os.environ["PADDLE_TRAINER_ID"])
trainers = int(os.environ["PADDLE_TRAINERS_NUM"])

x = fluid.layers.data(name="x", shape=[13], dtype="float32")
y = fluid.layers.data(name="y", shape=[1], dtype="float32")
pred = fluid.layers.fc(input=x, size=1)
loss_var = fluid.layers.mean(fluid.layers.square_error_cost(input=pred, label=y))
fluid.optimizer.SGD(learning_rate=0.05).minimize(loss_var)

# --- DistributeTranspiler example (pserver mode), as documented
role = os.getenv("PADDLE_TRAINING_ROLE")

t = fluid.DistributeTranspiler()
t.transpile(
    trainer_id, pservers=pserver_endpoints, trainers=trainers)
if role == "PSERVER":
    pserver_program = t.get_pserver_program(current_endpoint)
    pserver_startup_program = t.get_startup_program(current_endpoint,
                                                    pserver_program)
elif role == "TRAINER":
    trainer_program = t.get_trainer_program()
# --- end of the DistributeTranspiler example

exe = fluid.Executor(fluid.CPUPlace())
if role == "PSERVER":
    exe.run(pserver_startup_program)
    exe.run(pserver_program)  # returns when every trainer has called exe.close()
    print(f"pserver {current_endpoint}: all {trainers} trainers done")
else:
    exe.run(fluid.default_startup_program())  # pulls the initial parameters
    rng = np.random.RandomState(trainer_id)  # each trainer reads its own part of the data
    w_true = np.linspace(-1, 1, 13).astype("float32")
    for _ in range(30):
        xb = rng.uniform(-1, 1, (16, 13)).astype("float32")
        loss, = exe.run(trainer_program, feed={"x": xb, "y": xb @ w_true[:, None]},
                        fetch_list=[loss_var.name])
    w = np.array(fluid.global_scope().find_var(pred.block.all_parameters()[0].name)
                 .get_tensor())
    print(f"trainer {trainer_id}: loss {float(loss.mean()):.4f}, weights[:3] {w.ravel()[:3]}")
    exe.close()  # tells the pservers this trainer is done
