"""Dataset training: ``fluid.DataFeedDesc``, ``fluid.DatasetFactory``'s datasets over MultiSlot
files, ``Executor.train_from_dataset`` / ``infer_from_dataset`` (written as Fluid's own
test_dataset.py uses them). The oracle is ``Executor.run`` over batches this file builds
from the same lines itself."""

from __future__ import annotations

import random
import sys
import threading
import time

import numpy as np
import pytest

import parafluid as fluid
from parafluid.dataio.data_feed_desc import Slot
from parafluid.dataio.dataset import build_feed, parse_multi_slot_line

DICT = 50
BATCH = 4


def ctr_lines(n: int, seed: int) -> list[str]:
    """MultiSlot lines of a CTR-style sample: slot1 / slot2 ids (1-4 of them), then the
    click label (the label follows the parity of the first id, so it can be learnt)."""
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        s1 = [rng.randrange(DICT) for _ in range(rng.randint(1, 4))]
        s2 = [rng.randrange(DICT) for _ in range(rng.randint(1, 3))]
        click = s1[0] % 2
        lines.append(" ".join(map(str, [len(s1), *s1, len(s2), *s2, 1, click])))
    return lines


def write_files(tmp_path, parts: list[list[str]]) -> list[str]:
    paths = []
    for i, lines in enumerate(parts):
        p = tmp_path / f"part-{i}.txt"
        p.write_text("\n".join(lines) + "\n")
        paths.append(str(p))
    return paths


def ctr_program():
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 7
    with fluid.program_guard(main, startup):
        slot1 = fluid.layers.data(name="slot1", shape=[1], dtype="int64", lod_level=1)
        slot2 = fluid.layers.data(name="slot2", shape=[1], dtype="int64", lod_level=1)
        click = fluid.layers.data(name="click", shape=[1], dtype="int64")
        pooled = []
        for i, slot in enumerate([slot1, slot2]):
            emb = fluid.layers.embedding(input=slot, size=[DICT, 8], is_sparse=True,
                                         param_attr=fluid.ParamAttr(name=f"emb_{i}"))
            pooled.append(fluid.layers.sequence_pool(input=emb, pool_type="sum"))
        hidden = fluid.layers.fc(input=fluid.layers.concat(pooled, axis=1), size=16,
                                 act="relu")
        predict = fluid.layers.fc(input=hidden, size=2, act="softmax")
        loss = fluid.layers.mean(fluid.layers.cross_entropy(input=predict, label=click))
        fluid.optimizer.Adagrad(learning_rate=0.1).minimize(loss)
    return main, startup, [slot1, slot2, click], loss


def params(scope, program) -> dict[str, np.ndarray]:
    return {p.name: np.array(scope.find_var(p.name).get_tensor())
            for p in program.global_block().all_parameters()}


def twin_scopes(exe, startup, main) -> tuple:
    """Two scopes holding the same initial parameters."""
    ref, scope = fluid.Scope(), fluid.Scope()
    exe.run(startup, scope=ref)
    exe.run(startup, scope=scope)
    for var in main.list_vars():
        if var.persistable and ref.find_var(var.name) is not None:
            scope.var(var.name).get_tensor().set(np.array(ref.find_var(var.name).get_tensor()),
                                                 fluid.CPUPlace())
    return ref, scope


def oracle_feeds(lines: list[str]) -> list[dict]:
    """Executor.run feeds of the lines, built here from the text (not by the dataset)."""
    feeds = []
    for start in range(0, len(lines), BATCH):
        s1, s2, click = [], [], []
        for line in lines[start:start + BATCH]:
            v = [int(t) for t in line.split()]
            n1 = v[0]
            s1.append(v[1:1 + n1])
            n2 = v[1 + n1]
            s2.append(v[2 + n1:2 + n1 + n2])
            click.append(v[-1])
        feeds.append({
            "slot1": fluid.create_lod_tensor(np.array(sum(s1, []), "int64").reshape(-1, 1),
                                             [[len(s) for s in s1]], fluid.CPUPlace()),
            "slot2": fluid.create_lod_tensor(np.array(sum(s2, []), "int64").reshape(-1, 1),
                                             [[len(s) for s in s2]], fluid.CPUPlace()),
            "click": np.array(click, "int64").reshape(-1, 1)})
    return feeds


def make_dataset(kind: str, use_vars, files, thread: int = 1):
    dataset = fluid.DatasetFactory().create_dataset(kind)
    dataset.set_use_var(use_vars)
    dataset.set_batch_size(BATCH)
    dataset.set_thread(thread)
    dataset.set_filelist(files)
    return dataset


def test_data_feed_desc_reads_fluid_text_and_prints_it_back(tmp_path):
    proto = tmp_path / "data.proto"
    proto.write_text('name: "MultiSlotDataFeed"\nbatch_size: 2\nmulti_slot_desc {\n'
                     '    slots {\n         name: "words"\n         type: "uint64"\n'
                     '         is_dense: false\n         is_used: false\n     }\n'
                     '    slots {\n         name: "label"\n         type: "uint64"\n'
                     '         is_dense: false\n         is_used: false\n    }\n}\n')
    desc = fluid.DataFeedDesc(proto_file=str(proto))
    desc.set_batch_size(batch_size=128)
    desc.set_dense_slots(dense_slots_name=["label"])
    desc.set_use_slots(use_slots_name=["words", "label"])
    text = desc.desc()
    assert text == ('name: "MultiSlotDataFeed"\nbatch_size: 128\nmulti_slot_desc {\n'
                    '  slots {\n    name: "words"\n    type: "uint64"\n    is_dense: false\n'
                    '    is_used: true\n  }\n  slots {\n    name: "label"\n    type: "uint64"\n'
                    '    is_dense: true\n    is_used: true\n  }\n}\npipe_command: "cat"\n')
    again = tmp_path / "again.proto"
    again.write_text(text)
    assert fluid.DataFeedDesc(str(again)).desc() == text
    with pytest.raises(ValueError, match="no slot named 'wrods'"):
        desc.set_use_slots(["wrods"])


@pytest.mark.parametrize("text, message", [
    ('name: "MultiSlotDataFeed"\nbatch_sise: 2\n', r"data.proto:2: DataFeedDesc has no "
                                                   r"field 'batch_sise'"),
    ('multi_slot_desc {\n slots {\n name: "a"\n type: "int32"\n }\n}\n',
     r"data.proto:2: slot 'a' has type 'int32'; the types are 'uint64', 'float'"),
    ('multi_slot_desc {\n slots {\n type: "float"\n }\n}\n', r"a slot needs a 'name'"),
    ('batch_size: "two"\n', r"'batch_size' takes an integer, got '\"two\"'"),
    ('multi_slot_desc {\n slots {\n name: "a"\n type: "float"\n', r"a '}' is missing"),
])
def test_data_feed_desc_names_the_line_and_field_of_bad_text(tmp_path, text, message):
    proto = tmp_path / "data.proto"
    proto.write_text(text)
    with pytest.raises(ValueError, match=message):
        fluid.DataFeedDesc(str(proto))


def test_dataset_desc_records_the_use_vars():
    main, _, use_vars, _ = ctr_program()
    dataset = make_dataset("QueueDataset", use_vars, [])
    dataset.set_pipe_command("cat")
    text = dataset.desc()
    assert 'name: "MultiSlotDataFeed"' in text and "batch_size: 4" in text
    assert ('slots {\n    name: "click"\n    type: "uint64"\n    is_dense: true\n'
            '    is_used: true\n    shape: -1\n    shape: 1\n  }') in text
    assert fluid.DatasetFactory().create_dataset("InMemoryDataset").desc().startswith(
        'name: "MultiSlotInMemoryDataFeed"')
    with pytest.raises(ValueError, match="datafeed class 'Nope' does not exist"):
        fluid.DatasetFactory().create_dataset("Nope")
    with pytest.raises(NotImplementedError, match="InMemoryDataset for local_shuffle"):
        dataset.local_shuffle()


@pytest.mark.parametrize("kind", ["QueueDataset", "InMemoryDataset"])
def test_train_from_dataset_one_thread_equals_executor_run_on_the_same_batches(tmp_path, kind):
    parts = [ctr_lines(10, 1), ctr_lines(13, 2)]   # batches run across the file boundary
    files = write_files(tmp_path, parts)
    main, startup, use_vars, loss = ctr_program()
    exe = fluid.Executor(fluid.CPUPlace())

    ref_scope, scope = twin_scopes(exe, startup, main)
    for feed in oracle_feeds(parts[0] + parts[1]):
        exe.run(main, feed=feed, fetch_list=[loss], scope=ref_scope)

    before = params(scope, main)
    dataset = make_dataset(kind, use_vars, files)
    if kind == "InMemoryDataset":
        dataset.load_into_memory()
        assert dataset.get_memory_data_size() == 23
    exe.train_from_dataset(program=main, dataset=dataset, scope=scope, thread=1, debug=False,
                           fetch_list=[loss], fetch_info=["loss"], print_period=100)
    got, want = params(scope, main), params(ref_scope, main)
    assert all(not np.array_equal(got[k], before[k]) for k in got)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_train_from_dataset_with_two_threads_trains_and_prints_fetches(tmp_path, capsys):
    lines = ctr_lines(400, 3)
    files = write_files(tmp_path, [lines[:200], lines[200:]])
    main, startup, use_vars, loss = ctr_program()
    test_prog = main.clone(for_test=True)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    feeds = oracle_feeds(lines)

    def mean_loss() -> float:
        return float(np.mean([exe.run(test_prog, feed=f, fetch_list=[loss], scope=scope)[0]
                              for f in feeds]))

    start = mean_loss()
    dataset = make_dataset("InMemoryDataset", use_vars, files, thread=2)
    dataset.load_into_memory()
    random.seed(0)
    dataset.local_shuffle()
    for _ in range(3):
        exe.train_from_dataset(main, dataset, scope=scope, thread=0, debug=True,
                               fetch_list=[loss], fetch_info=["cost"], print_period=20)
    out = capsys.readouterr().out
    assert mean_loss() < 0.8 * start
    # 100 batches a pass, two threads sharing them, a loss line every 20 batches
    assert out.count("100 batches in") == 3
    per_thread = [int(line.split()[2]) for line in out.splitlines() if line.startswith("thread")]
    assert len(per_thread) == 6 and sum(per_thread) == 300
    assert out.count("cost: ") == 15
    dataset.release_memory()
    with pytest.raises(ValueError, match="call load_into_memory"):
        exe.train_from_dataset(main, dataset, scope=scope)


def test_infer_from_dataset_leaves_the_parameters(tmp_path, capsys):
    files = write_files(tmp_path, [ctr_lines(12, 4)])
    main, startup, use_vars, loss = ctr_program()
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    before = params(scope, main)
    dataset = make_dataset("QueueDataset", use_vars, files)
    exe.infer_from_dataset(program=main, dataset=dataset, scope=scope, thread=1, debug=False,
                           fetch_list=[loss], fetch_info=["loss"], print_period=1)
    want = [exe.run(main.clone(for_test=True), feed=f, fetch_list=[loss], scope=scope)[0]
            for f in oracle_feeds(ctr_lines(12, 4))]
    shown = [float(line.split()[1]) for line in capsys.readouterr().out.splitlines()]
    np.testing.assert_allclose(shown, np.ravel(want), rtol=1e-5)
    for name, value in params(scope, main).items():
        np.testing.assert_array_equal(value, before[name])


def test_pipe_command_runs_over_each_file(tmp_path):
    lines = ctr_lines(8, 5)
    raw = tmp_path / "raw.txt"
    raw.write_text("\n".join("# " + line for line in lines) + "\n")   # the command strips "# "
    main, startup, use_vars, loss = ctr_program()
    exe = fluid.Executor(fluid.CPUPlace())
    ref, scope = twin_scopes(exe, startup, main)
    for feed in oracle_feeds(lines):
        exe.run(main, feed=feed, scope=ref)
    dataset = make_dataset("QueueDataset", use_vars, [str(raw)])
    dataset.set_pipe_command(f"{sys.executable} -c \"import sys; "
                             "[print(l[2:], end='') for l in sys.stdin]\"")
    exe.train_from_dataset(main, dataset, scope=scope)
    for name, value in params(ref, main).items():
        np.testing.assert_array_equal(params(scope, main)[name], value)

    dataset.set_pipe_command("exit 3")
    with pytest.raises(ValueError, match=r"pipe command 'exit 3' on .*raw.txt' exited with "
                                         r"status 3"):
        exe.train_from_dataset(main, dataset, scope=scope)

    dataset.set_pipe_command("sleep 30")
    flags = fluid.core.globals()
    old = flags["FLAGS_rpc_deadline"]
    flags["FLAGS_rpc_deadline"] = 300
    try:
        with pytest.raises(TimeoutError, match=r"pipe command 'sleep 30' on .*raw.txt' did not "
                                               r"finish within FLAGS_rpc_deadline \(0.3 s\)"):
            exe.train_from_dataset(main, dataset, scope=scope)
    finally:
        flags["FLAGS_rpc_deadline"] = old


@pytest.mark.parametrize("bad, message", [
    ("2 1 2 1 5 1 0 7 7", r"part-0.txt:3: 2 values after the last slot 'click'"),
    ("2 1 2 0 1 0", r"part-0.txt:3: slot 'slot2': expected a count of values >= 1, got '0'"),
    ("2 1 x 1 5 1 0", r"part-0.txt:3: slot 'slot1' \(uint64\) takes non-negative integer "
                      r"ids, got '1 x'"),
    ("3 1 2", r"part-0.txt:3: slot 'slot1' has the count 3 but only 2 values follow"),
    ("1 4 1 5", r"part-0.txt:3: the line ends before slot 'click'"),
])
def test_a_bad_line_names_the_file_the_line_and_the_slot(tmp_path, bad, message):
    lines = ctr_lines(4, 6)
    files = write_files(tmp_path, [lines[:2] + [bad] + lines[2:]])
    main, startup, use_vars, _ = ctr_program()
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    for thread in (1, 2):
        with pytest.raises(ValueError, match=message):
            exe.train_from_dataset(main, make_dataset("QueueDataset", use_vars, files),
                                   scope=scope, thread=thread)


def test_dense_float_slots_take_the_variable_shape(tmp_path):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[3], dtype="float32")
        y = fluid.layers.data(name="y", shape=[1], dtype="float32")
        pred = fluid.layers.fc(input=x, size=1)
        loss = fluid.layers.mean(fluid.layers.square_error_cost(input=pred, label=y))
        fluid.optimizer.SGD(learning_rate=0.05).minimize(loss)
    rows = np.random.RandomState(0).rand(10, 3).astype("float32")
    labels = rows[:, 0] + rows[:, 1] - rows[:, 2]
    lines = [f"3 {a!r} {b!r} {c!r} 1 {t!r}" for (a, b, c), t in zip(rows.tolist(),
                                                                 labels.tolist())]
    files = write_files(tmp_path, [lines])
    exe = fluid.Executor(fluid.CPUPlace())
    ref, scope = twin_scopes(exe, startup, main)
    for start in range(0, 10, BATCH):
        xb = rows[start:start + BATCH]
        exe.run(main, feed={"x": xb, "y": labels[start:start + BATCH].reshape(-1, 1)},
                scope=ref)
    exe.train_from_dataset(main, make_dataset("QueueDataset", [x, y], files), scope=scope)
    for p in main.global_block().all_parameters():
        np.testing.assert_array_equal(np.array(scope.find_var(p.name).get_tensor()),
                                      np.array(ref.find_var(p.name).get_tensor()))
    # a shape without the batch dimension is the whole batch's, as Fluid's
    whole = [Slot("m", "float", is_dense=True, is_used=True, shape=[2, 3])]
    insts = [parse_multi_slot_line("3 1 2 3", whole), parse_multi_slot_line("3 4 5 6", whole)]
    np.testing.assert_array_equal(build_feed(insts, whole)["m"], [[1, 2, 3], [4, 5, 6]])
    with pytest.raises(ValueError, match=r"dense slot 'm' has shape \[2, 3\] but the batch "
                                         r"of 1 instances holds 3 values"):
        build_feed(insts[:1], whole)
    files = write_files(tmp_path, [["2 0.5 0.5 1 1.0"]])
    with pytest.raises(ValueError, match=r"dense slot 'x' has shape \[-1, 3\], so 3 values an "
                                         r"instance, but instance 0 of the batch has 2"):
        exe.train_from_dataset(main, make_dataset("QueueDataset", [x, y], files), scope=scope)


def test_train_from_dataset_checks_its_arguments(tmp_path):
    main, startup, use_vars, loss = ctr_program()
    exe = fluid.Executor(fluid.CPUPlace())
    with pytest.raises(RuntimeError, match="^dataset is need and should be initialized$"):
        exe.train_from_dataset(program=main, dataset=None)
    dataset = make_dataset("QueueDataset", use_vars, write_files(tmp_path, [ctr_lines(2, 0)]))
    with pytest.raises(ValueError, match="fetch_info must name each of the 1 fetch_list"):
        exe.train_from_dataset(main, dataset, fetch_list=[loss], fetch_info=[])
    with pytest.raises(ValueError, match="a Dataset feeds float32"):
        make_dataset("QueueDataset", [fluid.layers.data(name="i32", shape=[1], dtype="int32")],
                     [])


def pipeline_program(pipelined: bool, places=None):
    """Fluid's PipelineOptimizer example (two embeddings, a concat, an fc); its places are
    all CPUs unless given (section 1 becomes cpu:1)."""
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 9
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[1], dtype="int64", lod_level=0)
        y = fluid.layers.data(name="y", shape=[1], dtype="int64", lod_level=0)
        emb_x = fluid.layers.embedding(input=x, param_attr=fluid.ParamAttr(name="embx"),
                                       size=[10, 2], is_sparse=False)
        emb_y = fluid.layers.embedding(input=y, param_attr=fluid.ParamAttr(
            name="emby", learning_rate=0.9), size=[10, 2], is_sparse=False)
        concat = fluid.layers.concat([emb_x, emb_y], axis=1)
        fc = fluid.layers.fc(input=concat, name="fc", size=1, num_flatten_dims=1,
                             bias_attr=False)
        loss = fluid.layers.reduce_mean(fc)
        optimizer = fluid.optimizer.SGD(learning_rate=0.5)
        if pipelined:
            optimizer = fluid.optimizer.PipelineOptimizer(
                optimizer, cut_list=[[emb_x, emb_y], [loss]],
                place_list=places or [fluid.CPUPlace(), fluid.CPUPlace(), fluid.CPUPlace()],
                concurrency_list=[1, 1, 4], queue_size=2, sync_steps=1, start_cpu_core_id=0)
        optimizer.minimize(loss)
    return main, startup, [x, y], loss


def test_pipeline_optimizer_places_the_sections_and_trains_as_the_plain_program(tmp_path):
    rng = random.Random(8)
    lines = [f"1 {rng.randrange(10)} 1 {rng.randrange(10)}" for _ in range(30)]
    files = write_files(tmp_path, [lines])
    plain, startup, plain_vars, _ = pipeline_program(False)
    piped, _, piped_vars, _ = pipeline_program(True)

    by_type = {}
    for op in piped.global_block().ops:
        by_type.setdefault(op.type, set()).add(op.attrs.get("op_device"))
    assert by_type["lookup_table"] == {"cpu:0"} and by_type["lookup_table_grad"] == {"cpu:0"}
    assert by_type["concat"] == by_type["mul"] == by_type["mul_grad"] == {"cpu:1"}
    assert by_type["sgd"] == {"cpu:0", "cpu:1"}   # each stage updates its own parameters
    assert piped._pipeline_opt["concurrency_list"] == [1, 1, 4]
    assert not any(op.attrs.get("op_device") for op in plain.global_block().ops)

    exe = fluid.Executor(fluid.CPUPlace())
    ref, scope = twin_scopes(exe, startup, plain)
    exe.train_from_dataset(plain, make_dataset("QueueDataset", plain_vars, files), scope=ref)
    exe.train_from_dataset(piped, make_dataset("FileInstantDataset", piped_vars, files),
                           scope=scope, thread=2)
    for name in ("embx", "emby", "fc.w_0"):
        np.testing.assert_array_equal(np.array(scope.find_var(name).get_tensor()),
                                      np.array(ref.find_var(name).get_tensor()), err_msg=name)

    # micro-batches through a CompiledProgram overlap the stages: the same within rounding
    bs = fluid.BuildStrategy()
    bs.num_microbatches = 2
    ref2, scope2 = twin_scopes(exe, startup, plain)
    exe.train_from_dataset(fluid.CompiledProgram(piped, build_strategy=bs),
                           make_dataset("QueueDataset", piped_vars,
                                        write_files(tmp_path, [lines[:28]])), scope=scope2)
    exe.train_from_dataset(plain, make_dataset("QueueDataset", plain_vars,
                                               write_files(tmp_path, [lines[:28]])), scope=ref2)
    for name in ("embx", "emby", "fc.w_0"):
        np.testing.assert_allclose(np.array(scope2.find_var(name).get_tensor()),
                                   np.array(ref2.find_var(name).get_tensor()), atol=1e-6)


def test_pipeline_optimizer_puts_a_cuda_section_on_its_gpu():
    """Fluid's own example: the embeddings (forward, gradient, update) on the CPU, the rest
    on CUDAPlace(0); the program is built anywhere, it runs where torch sees a GPU."""
    main, startup, use_vars, _ = pipeline_program(
        True, [fluid.CPUPlace(), fluid.CUDAPlace(0), fluid.CPUPlace()])
    by_type = {}
    for op in main.global_block().ops:
        by_type.setdefault(op.type, set()).add(op.attrs.get("op_device"))
    assert by_type["lookup_table"] == by_type["lookup_table_grad"] == {"cpu:0"}
    assert by_type["concat"] == by_type["mul_grad"] == by_type["concat_grad"] == {"gpu:0"}
    assert by_type["sgd"] == {"cpu:0", "gpu:0"}
    if not fluid.is_compiled_with_cuda():
        return
    plain, _, plain_vars, _ = pipeline_program(False)
    feed = {"x": np.arange(8).reshape(-1, 1) % 10, "y": np.arange(8).reshape(-1, 1) % 7}
    exe = fluid.Executor(fluid.CPUPlace())
    ref, scope = twin_scopes(exe, startup, plain)
    for _ in range(3):
        exe.run(plain, feed=feed, scope=ref)
        exe.run(main, feed=feed, scope=scope)
    for name in ("embx", "emby", "fc.w_0"):
        np.testing.assert_allclose(np.array(scope.find_var(name).get_tensor()),
                                   np.array(ref.find_var(name).get_tensor()), rtol=1e-5)


def test_pipeline_optimizer_checks_its_sections():
    main, _, _, loss = ctr_program()
    with pytest.raises(ValueError, match="2 cuts make 3 sections, so place_list needs 3"):
        fluid.optimizer.PipelineOptimizer(fluid.optimizer.SGD(0.1), cut_list=[[loss], [loss]],
                                          place_list=[fluid.CPUPlace()])
    with pytest.raises(TypeError, match="cut_list must be a list of non-empty lists"):
        fluid.optimizer.PipelineOptimizer(fluid.optimizer.SGD(0.1), cut_list=[loss],
                                          place_list=[fluid.CPUPlace()])


FLUID_A = "1 1 2 3 3 4 5 5 5 5 1 1\n1 2 2 3 4 4 6 6 6 6 1 2\n1 3 2 3 5 4 7 7 7 7 1 3\n"
FLUID_B = ("1 4 2 3 3 4 5 5 5 5 1 4\n1 5 2 3 4 4 6 6 6 6 1 5\n1 6 2 3 5 4 7 7 7 7 1 6\n"
           "1 7 2 3 6 4 8 8 8 8 1 7\n")


def test_fluid_in_memory_dataset_run(tmp_path, monkeypatch):
    """Fluid 1.6's test_dataset.py test_in_memory_dataset_run, its asserts made explicit."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "test_in_memory_dataset_run_a.txt").write_text(FLUID_A)
    (tmp_path / "test_in_memory_dataset_run_b.txt").write_text(FLUID_B)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        slots_vars = [fluid.layers.data(name=slot, shape=[1], dtype="int64", lod_level=1)
                      for slot in ["slot1", "slot2", "slot3", "slot4"]]
        dataset = fluid.DatasetFactory().create_dataset("InMemoryDataset")
        dataset.set_batch_size(32)
        dataset.set_thread(3)
        dataset.set_filelist(["test_in_memory_dataset_run_a.txt",
                              "test_in_memory_dataset_run_b.txt"])
        dataset.set_pipe_command("cat")
        dataset.set_use_var(slots_vars)
        dataset.load_into_memory()
        dataset.set_fea_eval(10000, True)
        random.seed(1)
        dataset.slots_shuffle(["slot1"])
        dataset.local_shuffle()
        # slot1 went to other instances, the other slots stayed together
        rows = [tuple(tuple(v) for v in inst) for inst in dataset._memory]
        assert sorted(r[0] for r in rows) == [(i,) for i in range(1, 8)]
        assert sorted(r[1:] for r in rows) == sorted(
            ((3, k), (k + 2,) * 4, (i,)) for i, k in enumerate((3, 4, 5, 3, 4, 5, 6), 1))
        assert [r[0] for r in rows] != [r[3] for r in rows]
        exe = fluid.Executor(fluid.CPUPlace())
        exe.run(startup)
        for thread in (0, 1, 2, 3, 4):
            exe.train_from_dataset(main, dataset, thread=thread)

        dataset.set_parse_ins_id(True)
        dataset.set_merge_by_lineid(slots_vars[1:2], erase_duplicate_feas=True,
                                    min_merge_size=2, keep_unmerged_ins=True)
        dataset.set_fleet_send_sleep_seconds(2)
        (tmp_path / "test_in_memory_dataset_run_a.txt").write_text(
            "1 u 1 1 2 2 3 1 4 1 5\n1 v 1 1 1 9 1 4 1 5\n1 u 1 7 2 3 8 1 6 1 7\n")
        dataset.set_filelist(["test_in_memory_dataset_run_a.txt"])
        dataset.preload_into_memory()
        dataset.wait_preload_done()
        merged = {inst[4]: [v.tolist() for v in inst[:4]] for inst in dataset._memory}
        assert merged == {"u": [[1], [2, 3, 8], [4], [5]], "v": [[1], [9], [4], [5]]}
        exe.train_from_dataset(main, dataset, thread=2)
        dataset.release_memory()
        with pytest.raises(ValueError, match="nothing is in memory"):
            dataset.get_memory_data_size()


def test_fluid_queue_dataset_run_and_an_empty_file_list(tmp_path, capsys):
    """Fluid 1.6's test_dataset.py test_queue_dataset_run."""
    files = [tmp_path / "a.txt", tmp_path / "b.txt"]
    files[0].write_text(FLUID_A)
    files[1].write_text(FLUID_B)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        slots_vars = [fluid.layers.data(name=slot, shape=[1], dtype="int64", lod_level=1)
                      for slot in ["slot1", "slot2", "slot3", "slot4"]]
        words = fluid.layers.sequence_pool(slots_vars[3], pool_type="sum")
        total = fluid.layers.reduce_sum(fluid.layers.cast(words, "float32"))
    dataset = fluid.DatasetFactory().create_dataset("QueueDataset")
    dataset.set_batch_size(32)
    dataset.set_thread(3)
    dataset.set_filelist([str(f) for f in files])
    dataset.set_pipe_command("cat")
    dataset.set_use_var(slots_vars)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    exe.infer_from_dataset(main, dataset, thread=1, fetch_list=[total], fetch_info=["sum"],
                           print_period=1)
    assert capsys.readouterr().out == "sum: 28\n"   # slot4 of the 7 lines in one batch
    dataset2 = fluid.DatasetFactory().create_dataset("QueueDataset")
    dataset2.set_use_var(slots_vars)
    dataset2.set_batch_size(32)
    dataset2.set_thread(3)
    dataset2.set_pipe_command("cat")
    exe.train_from_dataset(main, dataset2)   # no files: nothing to do


def test_a_fetch_handler_gets_its_variables_while_a_dataset_trains(tmp_path):
    files = write_files(tmp_path, [ctr_lines(400, 5)])
    main, startup, use_vars, loss = ctr_program()
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    param = main.global_block().all_parameters()[0]
    seen = []

    class Record(fluid.executor.FetchHandler):
        def handler(self, fetch_target_vars):
            seen.append(fetch_target_vars)

    handler = Record([param.name, "not_in_the_scope_yet"], period_secs=0.001)
    dataset = make_dataset("QueueDataset", use_vars, files)
    exe.train_from_dataset(main, dataset, scope=scope, fetch_handler=handler)
    assert seen == []  # Fluid's monitor waits until every variable exists
    handler = Record([param.name], period_secs=0.001)
    for _ in range(3):
        exe.train_from_dataset(main, dataset, scope=scope, fetch_handler=handler)
    assert seen, "the handler was never called during three passes"
    assert all(isinstance(v[0], np.ndarray) and v[0].shape == tuple(param.shape)
               for v in seen)
    calls = len(seen)
    time.sleep(0.05)
    assert len(seen) == calls  # the thread ended with the run
    assert not [t for t in threading.enumerate() if t.name == "parafluid-fetch-handler"]


def test_the_fetch_handler_monitor_runs_on_a_scope_until_stopped():
    scope = fluid.Scope()
    scope.var("emb").get_tensor().set(np.arange(6, dtype="float32").reshape(2, 3),
                                      fluid.CPUPlace())
    got = threading.Event()
    values = []

    class Handler(fluid.executor.FetchHandler):
        def handler(self, fetch_target_vars):
            values.append(fetch_target_vars[0])
            got.set()

    monitor = fluid.trainer_factory.FetchHandlerMonitor(scope, Handler(["emb"], 0.01,
                                                                       return_np=False))
    monitor.start()
    try:
        assert got.wait(60)
    finally:
        monitor.stop()
    assert isinstance(values[0], fluid.LoDTensor)
    np.testing.assert_array_equal(np.array(values[0]), np.arange(6).reshape(2, 3))
    with pytest.raises(ValueError, match="period_secs must be > 0"):
        fluid.executor.FetchHandler(["emb"], period_secs=0)
    assert fluid.executor.FetchHandler("emb").fetch_target_names == ["emb"]  # one name
    with pytest.raises(TypeError, match="list of variable names"):
        fluid.executor.FetchHandler(["emb", 3])


def _clicks(feed) -> list[int]:
    return np.array(feed["click"]).reshape(-1).tolist()


@pytest.mark.parametrize("drop_last", [True, False], ids=["drop_last", "keep_last"])
def test_a_dataset_loader_yields_a_feed_per_place_from_one_reader_each(tmp_path, drop_last):
    # BATCH lines per batch; reader 0 reads files 0 and 2, reader 1 file 1 (ids tell which)
    sizes = [2 * BATCH + 1, BATCH, BATCH]
    parts = [[f"1 {f} 1 {f} 1 {k % 2}" for k in range(n)] for f, n in enumerate(sizes)]
    files = write_files(tmp_path, parts)
    main, startup, use_vars, loss = ctr_program()
    dataset = make_dataset("QueueDataset", use_vars, files)
    places = fluid.cpu_places(2)
    loader = fluid.io.DataLoader.from_dataset(dataset, places, drop_last=drop_last)
    steps = list(loader)
    # reader 0: 3 full batches (+1 line), reader 1: 1; each step takes the next batch of
    # each reader still going, in turn; fewer batches than places end the epoch
    assert [len(s) for s in steps] == [2, 2]
    ends = [[(int(np.array(f["slot1"])[0, 0]), int(np.array(f["slot1"])[-1, 0])) for f in s]
            for s in steps]
    # reader 1 ended after one batch: reader 0 gave both batches of the second step
    assert ends == [[(0, 0), (1, 1)], [(0, 0), (0, 2)]]
    for step in steps:
        for feed, place in zip(step, places):
            assert set(feed) == {"slot1", "slot2", "click"}
            assert all(isinstance(t, fluid.LoDTensor) for t in feed.values())
            assert feed["slot1"]._place()._equals(place)
            assert feed["click"].shape() == [BATCH, 1]
            assert feed["slot1"].recursive_sequence_lengths() == [[1] * BATCH]
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    compiled = fluid.CompiledProgram(main).with_data_parallel(loss_name=loss.name,
                                                               places=places)
    for step in loader:
        exe.run(compiled, feed=step, fetch_list=[loss], scope=scope)
    with pytest.raises(ValueError, match="3 files, fewer than the 4 places"):
        fluid.io.DataLoader.from_dataset(dataset, fluid.cpu_places(4))
    with pytest.raises(TypeError, match="must be a Dataset of fluid.DatasetFactory"):
        fluid.io.DataLoader.from_dataset([files], places)


def test_a_dataset_loader_splits_an_in_memory_dataset_and_keeps_short_batches(tmp_path):
    lines = [f"1 {k} 1 {k} 1 {k % 2}" for k in range(4 * BATCH + 2)]
    files = write_files(tmp_path, [lines[:BATCH], lines[BATCH:]])
    main, startup, use_vars, loss = ctr_program()
    dataset = make_dataset("InMemoryDataset", use_vars, files)
    dataset.load_into_memory()
    kept = list(fluid.io.DataLoader.from_dataset(dataset, fluid.cpu_places(2),
                                                  drop_last=False))
    dropped = list(fluid.io.DataLoader.from_dataset(dataset, fluid.cpu_places(2)))
    # memory split in two halves of 2 * BATCH + 1 lines: 2 full batches and 1 line each
    assert [[feed["click"].shape()[0] for feed in s] for s in kept] == \
        [[BATCH, BATCH], [BATCH, BATCH], [1, 1]]
    assert len(dropped) == 2
    ids = [int(np.array(s[1]["slot1"])[0, 0]) for s in kept]  # the second half's
    assert ids == [2 * BATCH + 1, 3 * BATCH + 1, 4 * BATCH + 1]
