"""Fluid 1.6 op types parafluid does not provide, each with the reason.

``get_op_def`` (and so building, loading or verifying a program) refuses a program that
holds one of them with an error naming the op and the reason; the documentation's op table
reads ``NOT_PROVIDED`` too.

Example::

    >>> from parafluid.ops.not_provided import NOT_PROVIDED
    >>> "tensorrt_engine" in NOT_PROVIDED
    True
"""

from __future__ import annotations

__all__ = ["NOT_PROVIDED", "not_provided_message"]

_NCCL = ("parafluid's collectives run on its Communicator, whose gen_nccl_id op (collective "
         "mode) does the rendezvous and builds it: there is no NCCL id or ring to create")
_ENGINE = "an engine holding a subgraph compiled by an external inference library ({}), " \
          "not available in parafluid; run the subgraph's own ops"

_DOUBLE_GRAD = ("a second-order gradient op: parafluid's backward emits first-order gradient "
                "ops only (no gradient of a gradient program)")
_OLD_NCCL = ("the pre-1.0 NCCL ops (over a ncclInit communicator variable), superseded by "
             "c_allreduce_sum / c_reduce_sum / c_broadcast")

NOT_PROVIDED: dict[str, str] = {
    # second-order gradients
    "conv2d_grad_grad": _DOUBLE_GRAD,
    "conv3d_grad_grad": _DOUBLE_GRAD,
    "elementwise_add_grad_grad": _DOUBLE_GRAD,
    "elementwise_div_grad_grad": _DOUBLE_GRAD,
    "elementwise_mul_grad_grad": _DOUBLE_GRAD,
    "elementwise_sub_grad_grad": _DOUBLE_GRAD,
    "instance_norm_grad_grad": _DOUBLE_GRAD,
    "leaky_relu_grad_grad": _DOUBLE_GRAD,
    "mul_grad_grad": _DOUBLE_GRAD,
    "relu_grad_grad": _DOUBLE_GRAD,
    "reshape2_grad_grad": _DOUBLE_GRAD,
    "sqrt_grad_grad": _DOUBLE_GRAD,
    "square_grad_grad": _DOUBLE_GRAD,
    # the reader-variable ops of Fluid's C++ data pipeline
    "create_ctr_reader": "the CTR reader of Fluid's C++ data pipeline; use fluid.DatasetFactory "
                         "(MultiSlot files) or a DataLoader",
    # the pre-1.0 NCCL ops
    "ncclAllReduce": _OLD_NCCL,
    "ncclBcast": _OLD_NCCL,
    "ncclInit": _OLD_NCCL,
    "ncclReduce": _OLD_NCCL,
    "transpose_grad": "parafluid differentiates transpose with a transpose by the inverse axes "
                      "(and transpose2 with transpose2_grad); Fluid's transpose_grad is not a "
                      "separate kernel here",

    # inference engines: subgraphs handed to external libraries
    "tensorrt_engine": _ENGINE.format("TensorRT"),
    "anakin_engine": _ENGINE.format("Anakin"),
    "ngraph_engine": _ENGINE.format("nGraph"),
    # MKL-DNN int8 kernels
    "quantize": "MKL-DNN-only int8 conversion (no kernel outside MKL-DNN in Fluid); use the "
                "fake_quantize_* ops for quantization-aware training",
    "dequantize": "MKL-DNN-only int8 conversion (no kernel outside MKL-DNN in Fluid); use the "
                  "fake_dequantize_* ops",
    "requantize": "MKL-DNN-only int8 rescaling (no kernel outside MKL-DNN in Fluid)",
    # CUDA-only fusion written by an inference pass
    "conv2d_inception_fusion": "CUDA/cuDNN-only fusion of a four-branch inception block "
                               "written by an inference pass; run its conv2d/pool2d ops",
    # BoxPS, the federated-learning server and the old NCCL op
    "pull_box_sparse": "BoxPS (Baidu's GPU parameter server) lookup: needs the closed BoxPS "
                       "service",
    "push_box_sparse": "BoxPS (Baidu's GPU parameter server) update: needs the closed BoxPS "
                       "service",
    "fl_listen_and_serv": "the federated-learning parameter server loop of Fluid's FL "
                          "transpiler, not ported; parafluid's pserver mode uses "
                          "listen_and_serv",
    # NCCL bootstrap of the c_* collectives
    "c_gen_nccl_id": "generates an NCCL unique id for a ring: " + _NCCL,
    "c_comm_init": "creates an NCCL communicator for a ring from an NCCL id: " + _NCCL,
    "c_comm_init_all": "creates the NCCL communicators of the local GPUs: " + _NCCL,
    # pserver-mode RPCs parafluid's parameter server does not speak
    "checkpoint_notify": "asks each pserver to save its (lookup-table) shards; parafluid's "
                         "pservers are saved with fluid.io.save_persistables on their program",
    "distributed_notify": "an RPC notifying pservers of a custom event (used by the GEO "
                          "communicator), which parafluid's pserver does not implement",
    "prefetch": "the remote-prefetch RPC of a distributed lookup table sharded over pservers "
                "(distributed_lookup_table); parafluid keeps such tables on the trainers",
    "create_custom_reader": "a reader decorated by a sub-block of preprocessing ops "
                            "(Preprocessor); parafluid's readers are Python (DataLoader, "
                            "PyReader), which preprocess in Python",
}


def not_provided_message(op_type: str) -> str | None:
    """The error for a program holding ``op_type``, or None if it is not in the table."""
    reason = NOT_PROVIDED.get(op_type)
    if reason is None:
        return None
    return f"op type {op_type!r} (Fluid 1.6) is not provided by parafluid: {reason}"
