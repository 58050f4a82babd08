"""The engine: what every executor runs a block with, below the executors.

``graph`` (a block replicated per device, with its dependencies), ``plan`` (the graph bound
to kernels: a step's scope traffic, releases, the update tail; ``Plan.run``), ``runtime``
(``bind_op``, the ``RunContext`` kernels see, op errors and hooks), ``scheduler`` (any DAG
of callables on one lane or a thread pool), ``lanes`` (placed programs: one lane per
device), ``atomic`` (whole steps: undo log, SIGINT), ``inplace`` (ops run in their dead
input's buffer). It imports nothing from the executors (``executor``, ``parallel``) or the
layers above them.
"""
