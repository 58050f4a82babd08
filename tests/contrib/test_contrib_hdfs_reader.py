"""fluid.contrib.HDFSClient / multi_download / multi_upload against a stand-in ``hadoop``
command that maps HDFS paths onto a local folder, and distributed_batch_reader."""

import os
import stat
import sys
import textwrap

import pytest

import parafluid as fluid
from parafluid.contrib import HDFSClient, distributed_batch_reader, multi_download, multi_upload

# A `hadoop fs` that serves HDFS paths from the folder $root (same commands and -ls format)
_HADOOP = textwrap.dedent('''\
    #!{python}
    import os, shutil, sys, time
    root = {root!r}
    args = [a for a in sys.argv[1:] if not a.startswith("-D")]
    assert args[0] == "fs", args
    cmd, rest = args[1], args[2:]
    loc = lambda p: os.path.join(root, p.lstrip("/"))
    def entry(path, full):
        st = os.stat(full)
        kind = "drwxr-xr-x" if os.path.isdir(full) else "-rw-r--r--"
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(st.st_mtime))
        print(kind, 3, "me", "supergroup", st.st_size, when, path)
    if any("slow" in a for a in rest):
        time.sleep(30)
    if cmd == "-test":
        p = loc(rest[1])
        sys.exit(0 if (os.path.isdir(p) if rest[0] == "-d" else os.path.exists(p)) else 1)
    elif cmd == "-mkdir":
        os.makedirs(loc(rest[-1]), exist_ok=True)
    elif cmd == "-put":
        shutil.copy(rest[0], loc(rest[1]))
    elif cmd == "-get":
        shutil.copy(loc(rest[0]), rest[1])
    elif cmd == "-rm":
        os.remove(loc(rest[0]))
    elif cmd == "-rmr":
        shutil.rmtree(loc(rest[0]))
    elif cmd == "-mv":
        os.rename(loc(rest[0]), loc(rest[1]))
    elif cmd in ("-ls", "-lsr"):
        base = rest[0].rstrip("/")
        if cmd == "-ls":
            names = sorted(os.listdir(loc(base)))
            print("Found %d items" % len(names))
            for n in names:
                entry(base + "/" + n, loc(base + "/" + n))
        else:
            for d, dirs, files in sorted(os.walk(loc(base))):
                rel = os.path.relpath(d, loc(base))
                pre = base if rel == "." else base + "/" + rel
                for n in sorted(dirs + files):
                    entry(pre + "/" + n, os.path.join(d, n))
    else:
        print("unknown command", cmd, file=sys.stderr)
        sys.exit(255)
''')


@pytest.fixture
def client(tmp_path):
    home, root = tmp_path / "hadoop", tmp_path / "hdfs"
    (home / "bin").mkdir(parents=True)
    root.mkdir()
    script = home / "bin" / "hadoop"
    script.write_text(_HADOOP.format(python=sys.executable, root=str(root)))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    configs = {"fs.default.name": "hdfs://namenode:54310", "hadoop.job.ugi": "me,secret"}
    return HDFSClient(str(home), configs), root


def test_hdfs_client_methods_run_hadoop_fs(client, tmp_path):
    c, root = client
    assert c.pre_commands[1:] == ["fs", "-Dfs.default.name=hdfs://namenode:54310",
                                  "-Dhadoop.job.ugi=me,secret"]
    local = tmp_path / "local"
    local.mkdir()
    (local / "a.txt").write_text("alpha")
    assert not c.is_exist("/user/me")
    assert c.makedirs("/user/me/models") and c.is_dir("/user/me/models")
    assert not c.makedirs("/user/me/models")  # already there
    assert c.upload("/user/me/models", str(local / "a.txt"))
    assert (root / "user/me/models/a.txt").read_text() == "alpha"
    assert c.is_exist("/user/me/models/a.txt") and not c.is_dir("/user/me/models/a.txt")
    (local / "a.txt").write_text("beta")
    assert not c.upload("/user/me/models", str(local / "a.txt"))  # exists, no overwrite
    assert c.upload("/user/me/models", str(local / "a.txt"), overwrite=True, retry_times=1)
    assert (root / "user/me/models/a.txt").read_text() == "beta"
    assert c.ls("/user/me/models") == ["/user/me/models/a.txt"]
    assert c.ls("/user/me/nothing") == []
    assert c.rename("/user/me/models/a.txt", "/user/me/models/b.txt")
    assert not c.rename("/user/me/models/a.txt", "/user/me/models/c.txt")  # no source
    c.makedirs("/user/me/models/sub")
    c.upload("/user/me/models/sub", str(local / "a.txt"))
    assert c.lsr("/user/me/models") == ["/user/me/models/b.txt", "/user/me/models/sub/a.txt"]
    assert c.lsr("/user/me/models", only_file=False, sort=False) == [
        "/user/me/models/b.txt", "/user/me/models/sub", "/user/me/models/sub/a.txt"]
    out = tmp_path / "out"
    assert c.download("/user/me/models/b.txt", str(out))
    assert (out / "b.txt").read_text() == "beta"
    assert not c.download("/user/me/models/b.txt", str(out))  # exists locally
    assert c.download("/user/me/models/b.txt", str(out), overwrite=True, unzip=False)
    assert not c.download("/user/me/none.txt", str(out))
    HDFSClient.make_local_dirs(str(out / "x" / "y"))
    assert (out / "x" / "y").is_dir()
    assert c.delete("/user/me/models/b.txt") and not c.is_exist("/user/me/models/b.txt")
    assert c.delete("/user/me/models") and not c.is_exist("/user/me/models")
    assert c.delete("/user/me/never")  # nothing there is fine, as in Fluid


def test_multi_upload_and_each_trainers_multi_download(client, tmp_path):
    c, root = client
    src = tmp_path / "src"
    (src / "part").mkdir(parents=True)
    names = ["f0", "f1", "f2", "part/f3", "part/f4"]
    for n in names:
        (src / n).write_text(n)
    multi_upload(c, "/data", str(src), multi_processes=3, overwrite=False, sync=True)
    assert sorted(str(p.relative_to(root / "data")) for p in (root / "data").rglob("f*")) == names
    got = []
    for trainer_id in (0, 1):
        dst = tmp_path / f"t{trainer_id}"
        files = multi_download(c, "/data", str(dst), trainer_id, 2, multi_processes=2)
        assert all(open(f).read() == os.path.relpath(f, dst) for f in files)
        got += [os.path.relpath(f, dst) for f in files]
    assert sorted(got) == names  # the two trainers' shares split the files


def test_hdfs_client_errors_name_the_missing_hadoop_and_the_slow_command(client, tmp_path):
    with pytest.raises(FileNotFoundError, match="no executable hadoop at"):
        HDFSClient(str(tmp_path / "nowhere"), {})
    c, _ = client
    c.timeout_s = 1.0
    with pytest.raises(TimeoutError, match=r"hadoop fs -test -e /slow.*within 1 s"):
        c.is_exist("/slow")
    with pytest.raises(ValueError, match="HDFSClient.ls: an HDFS path"):
        c.ls("")


def _batches():
    return iter([[i] for i in range(7)])


@pytest.mark.parametrize("trainer_id,expected", [(0, [[0], [3]]), (1, [[1], [4]]),
                                                 (2, [[2], [5]])])
def test_distributed_batch_reader_gives_each_trainer_its_share(monkeypatch, trainer_id,
                                                                expected):
    monkeypatch.setenv("PADDLE_TRAINERS_NUM", "3")
    monkeypatch.setenv("PADDLE_TRAINER_ID", str(trainer_id))
    reader = distributed_batch_reader(_batches)
    assert list(reader()) == expected  # batch 6 (an incomplete round) goes to nobody
    assert list(reader()) == expected  # a reader creator: every call starts again


def test_distributed_batch_reader_with_one_trainer_and_bad_ids(monkeypatch):
    monkeypatch.delenv("PADDLE_TRAINERS_NUM", raising=False)
    monkeypatch.delenv("PADDLE_TRAINER_ID", raising=False)
    assert list(fluid.contrib.distributed_batch_reader(_batches)()) == [[i] for i in range(7)]
    monkeypatch.setenv("PADDLE_TRAINERS_NUM", "2")
    monkeypatch.setenv("PADDLE_TRAINER_ID", "2")
    with pytest.raises(ValueError, match=r"PADDLE_TRAINER_ID=2 must be in \[0, "):
        distributed_batch_reader(_batches)


def test_a_path_that_hadoop_would_read_as_an_option_is_refused(client, tmp_path, monkeypatch):
    c, root = client
    (root / "-skipTrash").mkdir()
    for call in (lambda: c.delete("-skipTrash"), lambda: c.is_exist("-test"),
                 lambda: c.ls("-R"), lambda: c.rename("/a", "-f")):
        with pytest.raises(ValueError, match="starts with '-', which `hadoop fs` would read "
                                             "as an option"):
            call()
    assert (root / "-skipTrash").exists()
    # a local path starting with '-' reaches hadoop as an absolute path, not an option
    monkeypatch.chdir(tmp_path)
    (tmp_path / "-local").write_text("x")
    assert c.upload("/up", "-local")
    assert (root / "up" / "-local").read_text() == "x"


@pytest.mark.parametrize("entry", ["/data/../../escape", "/elsewhere/f", "/data/sub/.."])
def test_multi_download_writes_nothing_outside_its_local_path(client, tmp_path, monkeypatch,
                                                              entry):
    c, root = client
    (root / "data").mkdir()
    (root / "data" / "ok").write_text("ok")
    monkeypatch.setattr(c, "lsr", lambda path, sort=True: ["/data/ok", entry])
    dst = tmp_path / "dst" / "inner"
    with pytest.raises(ValueError, match="outside"):
        multi_download(c, "/data", str(dst), 0, 1)
    assert [p.name for p in (tmp_path / "dst").rglob("*")] == ["inner"]  # nothing written
