"""HDFS and distributed lookup table helpers of ``fluid.contrib``."""

from .hdfs_utils import HDFSClient, multi_download, multi_upload
from .lookup_table_utils import (
                                 convert_dist_to_sparse_program,
                                 load_persistables_for_increment,
                                 load_persistables_for_inference,
)

__all__ = ["HDFSClient", "multi_download", "multi_upload", "load_persistables_for_increment",
           "load_persistables_for_inference", "convert_dist_to_sparse_program"]
