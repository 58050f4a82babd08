"""Malformed program documents: each is a ValueError saying what is wrong, never a crash.

A program file or ``serialize_to_string`` output is untrusted input. These tests take a good
document, damage it the ways a hostile or broken writer would, and check that parsing (and
``verify`` on what parses) raises only ValueError. The fuzz test does this to 100k seeded
random mutations.
"""

from __future__ import annotations

import json
import random
import re
import time
from typing import Any

import pytest

import parafluid as fluid
from parafluid import io as fio
from parafluid.passes.prune import prune
from parafluid.serialization import _MAGIC
from parafluid.verifier import ProgramVerificationError


def _small_program() -> fluid.Program:
    """A regressor trained with SGD, plus a sub-block that an op refers to (block refs)."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[4], dtype="float32")
        pred = fluid.layers.fc(input=x, size=2)
        loss = fluid.layers.mean(pred)
        fluid.optimizer.SGD(learning_rate=0.1).minimize(loss)
    sub = main._create_block()
    sub.create_var(name="inner", shape=[1], dtype="float32")
    sub.append_op("fill_constant", outputs={"Out": ["inner"]},
                  attrs={"shape": [1], "value": 1.0, "dtype": "float32"})
    main._rollback()
    main.global_block().ops[0]._set_attr("sub_block", main.block(1))
    # every record a transpiler or memory_optimize may leave (the fuzz test mutates them too)
    main.meta.placement_node = ("worker", 1)
    main.meta.trainer_id, main.meta.num_trainers = 1, 2
    main.meta.trainers_endpoints = ["127.0.0.1:6170", "127.0.0.1:6171"]
    main.meta.pserver_endpoints = ["127.0.0.1:6174"]
    main.meta.data_parallel_devices = ["cpu:0", "cpu:1"]
    main.meta.memory_reuse = {"fc_0.tmp_0": [("fc_0.tmp_1", 2)]}
    # NOTE: each op's creating stack (op_callstack: one string per frame of the test's stack)
    # is kept to one line: dozens of strings per op would draw most of the fuzz test's
    # mutations and time away from the structure
    for block in main.blocks:
        for op in block.ops:
            op.attrs["op_callstack"] = op.attrs["op_callstack"][:1]
    main.verify()
    return main


def _doc(program: fluid.Program) -> dict[str, Any]:
    return json.loads(program.serialize_to_string()[len(_MAGIC):])


def _encode(doc: Any) -> bytes:
    return _MAGIC + json.dumps(doc).encode()


def _var(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(v for v in doc["blocks"][0]["vars"] if v["name"] == name)


def _op(doc: dict[str, Any], type: str) -> dict[str, Any]:
    return next(o for o in doc["blocks"][0]["ops"] if o["type"] == type)


# Each case: a way to damage the document, and what the error must say. Unchecked, the
# first ones crash the loader (RecursionError, OverflowError, TypeError in verify, a hang)
# and the later ones load silently with the damage in them.
CASES = {
    "deeply nested JSON": (None, "nested too deeply"),  # see _damaged
    "Infinity as the random seed": (lambda d: d.update(random_seed=float("inf")),
                                    r"random_seed: expected an integer, got inf"),
    "Infinity in a shape": (lambda d: _var(d, "fc_0.w_0")["shape"].__setitem__(0, float("inf")),
                            r"vars\[\d+\] \('fc_0.w_0'\)\.shape\[0\]: expected an integer"),
    "a float as a block's parent": (lambda d: d["blocks"][1].update(parent_idx=0.0),
                                    r"blocks\[1\]\.parent_idx .*expected an integer, got 0.0"),
    "a list as an input name": (lambda d: _op(d, "mul")["inputs"].update(X=[["x"]]),
                                r"\(mul\)\.inputs\['X'\]\[0\]: expected a variable name"),
    "an object as an output name": (lambda d: _op(d, "mean")["outputs"].update(Out=[{}]),
                                    r"\(mean\)\.outputs\['Out'\]\[0\]: expected a variable name"),
    "a block that is its own parent": (lambda d: d["blocks"][1].update(parent_idx=1),
                                       r"blocks\[1\]\.parent_idx \(an earlier block\): expected "
                                       r"an integer in \[0, 0\], got 1"),
    "a sub-block reference to its own block": (
        lambda d: _op(d, "mul")["attrs"].update(sub_block={"__block__": 0}),
        r"attrs\['sub_block'\]\.__block__ \(a later block\): expected an integer in \[1, 1\]"),
    "a string where a flag belongs": (lambda d: _var(d, "x").update(persistable="no"),
                                      r"\('x'\)\.persistable: expected true or false, got 'no'"),
    "a misspelt key": (lambda d: _var(d, "x").update(persistablx=_var(d, "x").pop("persistable")),
                       r"\[\d+\]: missing 'persistable'"),
    "an unknown key": (lambda d: _op(d, "mean").update(extra=1), r"unknown key\(s\) 'extra'"),
    "a dtype as a list": (lambda d: _var(d, "x").update(dtype=["float32"]),
                          r"\('x'\)\.dtype: expected null or one of"),
    "an unknown variable kind": (lambda d: _var(d, "x").update(type="tensor"),
                                 r"\('x'\)\.type: expected one of"),
    "a boolean as a size": (lambda d: _var(d, "x")["shape"].__setitem__(1, True),
                            r"\('x'\)\.shape\[1\]: expected an integer, got True"),
    "a negative parameter size": (lambda d: _var(d, "fc_0.w_0")["shape"].__setitem__(0, -1),
                                  r"shape\[0\]: expected an integer in \[0, "),
    "two variables of one name": (lambda d: d["blocks"][0]["vars"].append(_var(d, "x")),
                                  "a second variable named 'x'"),
    "an integer attr past 64 bits": (lambda d: _op(d, "mul")["attrs"].update(x_num_col_dims=2**64),
                                     r"attrs\['x_num_col_dims'\]: expected an integer in"),
    "attr lists nested too deep": (lambda d: _op(d, "mul")["attrs"].update(
        deep=json.loads("[" * 50 + "]" * 50)), "lists nested more than 8 deep"),
    "no blocks": (lambda d: d.update(blocks=[]), "blocks: expected a non-empty list"),
    "an unknown record": (lambda d: d["meta"].update(owner=1),
                          r"meta: unknown key\(s\) 'owner'"),
    "a placement node of an unknown kind": (
        lambda d: d["meta"].update(placement_node=["server", 0]),
        r"meta\.placement_node: expected \[kind, index\] with kind one of \['worker', 'ps'\], "
        r"got list of 2"),
    "a negative node index": (lambda d: d["meta"]["placement_node"].__setitem__(1, -1),
                              r"meta\.placement_node\[1\]: expected an integer in \[0, "),
    "a trainer id past the trainers": (lambda d: d["meta"].update(trainer_id=2),
                                       r"meta\.trainer_id \(below meta\.num_trainers\): "
                                       r"expected an integer in \[0, 1\], got 2"),
    "no trainers": (lambda d: d["meta"].update(num_trainers=0),
                    r"meta\.num_trainers: expected an integer in \[1, "),
    "an endpoint without a port": (lambda d: d["meta"]["pserver_endpoints"].append("host"),
                                   r"meta\.pserver_endpoints\[1\]: expected an endpoint "
                                   r"'ip:port', got 'host'"),
    "endpoints as one string": (lambda d: d["meta"].update(trainers_endpoints="a:1,b:2"),
                                r"meta\.trainers_endpoints: expected a list, got 'a:1,b:2'"),
    "a data-parallel device as a number": (
        lambda d: d["meta"]["data_parallel_devices"].__setitem__(0, 0),
        r"meta\.data_parallel_devices\[0\]: expected a device 'cpu:<i>' or 'gpu:<i>', got 0"),
    "a reused buffer without its op": (
        lambda d: d["meta"]["memory_reuse"]["fc_0.tmp_0"][0].pop(),
        r"meta\.memory_reuse\['fc_0\.tmp_0'\]\[0\]: expected \[renamed name, op index\]"),
    "a learning rate as a string": (
        lambda d: _var(d, "fc_0.w_0")["optimize_attr"].update(learning_rate="1"),
        r"optimize_attr\['learning_rate'\]: expected a number"),
}


def _damaged(case: str) -> bytes:
    doc = _doc(_small_program())
    if case == "deeply nested JSON":
        return _MAGIC + b"[" * 100_000 + b"]" * 100_000
    CASES[case][0](doc)
    return _encode(doc)


@pytest.mark.timeout(20)  # a block that is its own parent must not loop for ever
@pytest.mark.parametrize("case", sorted(CASES))
def test_each_malformed_document_is_a_value_error_naming_the_field(case: str) -> None:
    data = _damaged(case)
    with pytest.raises(ValueError, match=CASES[case][1]):
        fluid.Program.parse_from_string(data).verify()


@pytest.mark.timeout(20)
@pytest.mark.parametrize("case", ["deeply nested JSON", "Infinity in a shape",
                                  "a list as an input name", "a block that is its own parent"])
def test_load_inference_model_names_the_file_and_the_field(case: str, tmp_path: Any) -> None:
    program = _small_program()
    path = tmp_path / fio.MODEL_FILENAME
    model = json.loads(fio.encode_model(program, ["x"], ["fc_0.tmp_1"])[len(_MAGIC):])
    if case == "deeply nested JSON":
        path.write_bytes(_MAGIC + b"{\"a\":" * 50_000 + b"1" + b"}" * 50_000)
    else:
        CASES[case][0](model)
        path.write_bytes(_encode(model))
    with pytest.raises(ValueError, match=CASES[case][1]) as err:
        fluid.io.load_inference_model(str(tmp_path), fluid.Executor(fluid.CPUPlace()),
                                      scope=fluid.Scope())
    assert str(path) in str(err.value) and "corrupt or truncated model file" in str(err.value)


def test_feed_and_fetch_names_must_be_strings(tmp_path: Any) -> None:
    doc = json.loads(fio.encode_model(_small_program(), ["x"], ["fc_0.tmp_1"])[len(_MAGIC):])
    doc["inference"]["feed_target_names"] = [["x"]]
    with pytest.raises(ValueError, match="feed_target_names: expected a list of variable names"):
        fio.decode_model(_encode(doc))


def test_a_well_formed_document_still_round_trips() -> None:
    program = _small_program()
    data = program.serialize_to_string()
    back = fluid.Program.parse_from_string(data)
    back.verify()
    assert back.serialize_to_string() == data
    assert back.global_block().ops[0].attr("sub_block") is back.block(1)
    inf = _doc(program)  # a float attr may be infinite: only integers are checked for it
    _op(inf, "fill_constant")["attrs"]["value"] = float("-inf")
    assert fluid.Program.parse_from_string(_encode(inf)).global_block().ops[3].attr("value") \
        == float("-inf")


# ---------------------------------------------------------------------- the fuzz test


class _Mutator:
    """Cheap seeded mutations of one JSON document: each is applied in place and undone after
    serializing, so no document is ever copied."""

    def __init__(self, doc: Any, seed: int) -> None:
        self.doc = doc
        self.rng = random.Random(seed)
        self.slots: list[tuple[Any, Any]] = []  # (container, key) of every value in the doc
        self._collect(doc)
        donors = [json.loads(json.dumps(c[k])) for c, k in self.slots]  # independent copies
        self.values = donors + [
            None, True, False, 0, 1, -1, -2, 2, 3, 2 ** 63, -(2 ** 63) - 1, 1.5, 0.0,
            float("inf"), float("-inf"), float("nan"), "", "x", "float32", "int64", "bool",
            "lod_tensor", "selected_rows", "mul", "sgd", "@EMPTY@", "fc_0.w_0", "X", "Out",
            [], {}, [1], [-1, 4], ["x"], [[]], [None], [["x"]], [{}], {"X": ["x"]},
            {"__block__": 0}, {"__block__": 1}, {"__block__": 2}, {"__block__": -1},
            {"__block__": True}, {"__block__": 1.0}, {"__block__": 1, "x": 2}, {"a": 1},
            json.loads("[" * 12 + "]" * 12)]

    def _collect(self, node: Any) -> None:
        items = node.items() if isinstance(node, dict) else enumerate(node) \
            if isinstance(node, list) else ()
        for k, v in items:
            self.slots.append((node, k))
            self._collect(v)

    def one(self) -> bytes:
        rng = self.rng
        undo = []
        for _ in range(rng.choice((1, 1, 2, 3))):
            container, key = rng.choice(self.slots)
            if key not in container if isinstance(container, dict) else key >= len(container):
                continue  # an earlier mutation of this document removed it
            kind = rng.random()
            if kind < 0.6:  # replace a value
                old = container[key]
                container[key] = rng.choice(self.values)
                undo.append(lambda c=container, k=key, v=old: c.__setitem__(k, v))
            elif isinstance(container, dict):  # drop or rename a key (order kept on undo)
                items = list(container.items())
                value = container.pop(key)
                if kind < 0.8:
                    container[key + rng.choice(("x", "_", "s"))] = value
                undo.append(lambda c=container, it=items: (c.clear(), c.update(it)))
            elif kind < 0.8:  # drop a list item
                old = container.pop(key)
                undo.append(lambda c=container, k=key, v=old: c.insert(k, v))
            else:  # repeat a list item
                container.insert(key, container[key])
                undo.append(lambda c=container, k=key: c.pop(k))
        data = _MAGIC + json.dumps(self.doc).encode()
        for u in reversed(undo):
            u()
        kind = rng.random()
        if kind < 0.03:
            return data[:rng.randrange(len(data))]
        if kind < 0.06:
            i = rng.randrange(len(_MAGIC), len(data))
            return data[:i] + bytes([data[i] ^ (1 << rng.randrange(8))]) + data[i + 1:]
        if kind < 0.08:
            depth = rng.choice((2, 950, 3000))
            body = data[len(_MAGIC):]
            return _MAGIC + b"[" * depth + body + b"]" * depth
        if kind < 0.12:  # a number of the document becomes a non-finite or huge one
            spots = [m.start() for m in re.finditer(rb"[:\[,](-?\d+)", data)]
            if spots:
                i = rng.choice(spots) + 1
                j = re.match(rb"-?\d+(\.\d+)?([eE][-+]?\d+)?", data[i:]).end() + i
                lit = rng.choice((b"Infinity", b"-Infinity", b"NaN", b"1e999", b"1.0", b"-0"))
                return data[:i] + lit + data[j:]
        return data


FUZZ_DOCUMENTS = 100_000
# NOTE: four shards of differently seeded mutations (together the 100k documents), so that a
# parallel test run spreads them over its workers
FUZZ_SHARDS = 4


@pytest.mark.timeout(120)
@pytest.mark.parametrize("shard", range(FUZZ_SHARDS))
def test_fuzz_100k_mutated_documents_raise_only_value_errors(shard: int) -> None:
    """Parse (as a program, or as an inference model) and verify 100k mutated documents
    (this shard's quarter of them)."""
    program = _small_program()
    model = prune(program, ["fc_0.tmp_1"], ["x"])  # what save_inference_model writes
    targets = [
        (_Mutator(_doc(program), seed=12 + 2 * shard), fluid.Program.parse_from_string),
        (_Mutator(json.loads(fio.encode_model(model, ["x"], ["fc_0.tmp_1"])[len(_MAGIC):]),
                  seed=13 + 2 * shard), lambda data: fio.decode_model(data)[0]),
    ]
    counts = {"rejected": 0, "verify found problems": 0, "valid": 0}
    documents = FUZZ_DOCUMENTS // FUZZ_SHARDS
    start = time.perf_counter()
    for i in range(documents):
        mutator, parse = targets[i % 2]
        data = mutator.one()
        try:
            parsed = parse(data)
        except ValueError:
            counts["rejected"] += 1
            continue
        except Exception as e:  # noqa: BLE001 - any other exception is the finding
            pytest.fail(f"document {i}: parsing raised {type(e).__name__}: {e}\n{data[:2000]!r}")
        try:
            parsed.verify()
            counts["valid"] += 1
        except ProgramVerificationError:
            counts["verify found problems"] += 1
        except Exception as e:  # noqa: BLE001 - any other exception is the finding
            pytest.fail(f"document {i}: verify raised {type(e).__name__}: {e}\n{data[:2000]!r}")
    elapsed = time.perf_counter() - start
    print(f"{documents} documents in {elapsed:.1f} s: {counts}")
    # NOTE: the mutations must reach verify and the builder, not stop at the JSON decoder
    assert counts["verify found problems"] > documents // 100
    assert counts["valid"] > documents // 100


@pytest.mark.parametrize("result", [None, 5, ("float32",), ([1.5], "float32"), ([None], "f")])
def test_verify_reports_an_unusable_shape_rule_result(result: Any, monkeypatch) -> None:
    """A shape rule fed odd attributes may return anything; verify reports it, never crashes."""
    from parafluid.ops.registry import get_op_def

    prog = fluid.Program()
    blk = prog.global_block()
    blk.create_var(name="x", shape=[2], dtype="float32", is_data=True)
    blk.create_var(name="y", shape=[2], dtype="float32")
    blk.append_op("scale", inputs={"X": ["x"]}, outputs={"Out": ["y"]}, attrs={"scale": 2.0})
    monkeypatch.setattr(get_op_def("scale"), "infer_shape", lambda ins, attrs: {"Out": result})
    if result is None:  # "no inference for this output" is allowed
        prog.verify()
        return
    with pytest.raises(ProgramVerificationError, match="scale: shape inference gave 'y' no "
                                                       "usable shape and dtype"):
        prog.verify()
