"""The optimizers: the base class (``base.py``), the update rules (``rules.py``), deep
gradient compression (``dgc.py``), parameter averaging and Lookahead
(``moving_average.py``), and the pipeline's section cutting (``pipeline.py``). Fluid's path
is ``fluid.optimizer`` (``parafluid/optimizer.py``)."""
