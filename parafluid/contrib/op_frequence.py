"""``op_freq_statistic``: how often each op type, and each producer->consumer pair, occurs."""

from __future__ import annotations

from collections import OrderedDict

from ..framework import Program

__all__ = ["op_freq_statistic"]


def op_freq_statistic(program: Program) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """Op-type counts of ``program``'s global block, most frequent first.

    Returns ``(uni_op_freq, adj_2_op_freq)``: ``[(op_type, count)]`` over the ops that write
    some non-parameter variable, and ``[("producer->consumer", count)]`` over each op's
    non-parameter inputs, the producer being the last op before it that wrote the input
    (inputs nothing wrote, such as feeds, are skipped). Ties keep first-seen order.

    Example::

        uni, adj = fluid.contrib.op_freq_statistic(fluid.default_main_program())
        print(uni[:3], adj[:3])   # e.g. [('mul', 4), ...] [('mul->elementwise_add', 4), ...]
    """
    if not isinstance(program, Program):
        raise TypeError(f"op_freq_statistic: program must be a fluid.Program, got "
                        f"{type(program).__name__}")
    block = program.global_block()
    parameters = {p.name for p in block.all_parameters()}
    uni: OrderedDict[str, int] = OrderedDict()
    for op in block.ops:
        if any(n not in parameters for n in op.output_arg_names):
            uni[op.type] = uni.get(op.type, 0) + 1
    producers: dict[str, list[str]] = {}
    consumers: OrderedDict[str, list[str]] = OrderedDict()
    for op in block.ops:
        for name in op.input_arg_names:
            if name not in parameters and name in producers:
                consumers.setdefault(op.type, []).append(producers[name][-1])
        for name in op.output_arg_names:
            producers.setdefault(name, []).append(op.type)
    adj: OrderedDict[str, int] = OrderedDict()
    for op_type, ins in consumers.items():
        for producer in ins:
            key = f"{producer}->{op_type}"
            adj[key] = adj.get(key, 0) + 1
    return (sorted(uni.items(), key=lambda kv: kv[1], reverse=True),
            sorted(adj.items(), key=lambda kv: kv[1], reverse=True))
