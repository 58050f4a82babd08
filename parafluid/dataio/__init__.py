"""Data input: reader decorators (``reader.py``), the sample feeder (``data_feeder.py``), the
``py_reader`` family (``legacy_reader.py``), ``DataLoader`` (``dataloader.py``), readers in
child processes (``multiprocess_reader.py``) and Fluid's Dataset training
(``dataset.py``, ``data_feed_desc.py``, ``dataset_trainer.py``). Fluid's paths
(``fluid.reader``, ``fluid.data_feeder``, ``fluid.dataset``, ``fluid.data_feed_desc``,
``fluid.io``) re-export them. (Not ``parafluid/data/``: ``fluid.data`` is Fluid's function.)"""
