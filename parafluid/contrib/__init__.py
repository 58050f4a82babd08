"""``fluid.contrib``: Fluid 1.6's contributed layers, decoders and tools.

Names not provided (yet) import as stand-ins that fail on use (``parafluid.compat``).
"""

from __future__ import annotations

__all__: list[str] = []

# -- recurrent units and their static functions ------------------------------------------
from .rnn_impl import BasicGRUUnit, BasicLSTMUnit, basic_gru, basic_lstm  # noqa: E402

__all__ += ["BasicGRUUnit", "BasicLSTMUnit", "basic_gru", "basic_lstm"]

# -- decoders, mixed precision, optimizer extensions, layers, statistics ----------------
from . import mixed_precision  # noqa: E402
from .decoder import BeamSearchDecoder, InitState, StateCell, TrainingDecoder  # noqa: E402
from .extend_optimizer import extend_with_decoupled_weight_decay  # noqa: E402
from .layers import (  # noqa: E402
    ctr_metric_bundle,
    fused_elemwise_activation,
    fused_embedding_seq_pool,
    match_matrix_tensor,
    multiclass_nms2,
    sequence_topk_avg_pooling,
    tree_conv,
    var_conv_2d,
)
from .memory_usage_calc import memory_usage  # noqa: E402
from .op_frequence import op_freq_statistic  # noqa: E402

__all__ += ["InitState", "StateCell", "TrainingDecoder", "BeamSearchDecoder",
            "extend_with_decoupled_weight_decay", "ctr_metric_bundle",
            "fused_elemwise_activation", "memory_usage", "op_freq_statistic",
            "mixed_precision", "sequence_topk_avg_pooling", "fused_embedding_seq_pool",
            "multiclass_nms2", "match_matrix_tensor", "var_conv_2d", "tree_conv"]

# -- quantization, compression, HDFS, distributed helpers ---------------------------------
from .quantize import QuantizeTranspiler  # noqa: E402
from .reader import distributed_batch_reader  # noqa: E402
from .slim import Compressor  # noqa: E402
from .utils import (  # noqa: E402
    HDFSClient,
    convert_dist_to_sparse_program,
    load_persistables_for_increment,
    load_persistables_for_inference,
    multi_download,
    multi_upload,
)

__all__ += ["QuantizeTranspiler", "Compressor", "distributed_batch_reader", "HDFSClient",
            "multi_download", "multi_upload", "load_persistables_for_increment",
            "load_persistables_for_inference", "convert_dist_to_sparse_program"]


def __getattr__(name: str) -> object:
    from ..compat import missing_attribute

    return missing_attribute("contrib", name, __all__)
