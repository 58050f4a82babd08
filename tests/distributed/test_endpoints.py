"""One endpoint parser: the transpiler, the launcher, the parameter-server dispatcher, the
RPC runtime and the environment reader accept and refuse the same endpoints, in the same
words."""

from __future__ import annotations

import os

import pytest

import parafluid as fluid
from parafluid.distributed.endpoints import parse_endpoint, parse_endpoints
from parafluid.distributed.launch import build_parser, plan_pserver
from parafluid.distributed.rpc import tcp_address
from parafluid.transpiler.ps_dispatcher import RoundRobin


def test_endpoint_forms() -> None:
    assert parse_endpoint("127.0.0.1:6170") == ("127.0.0.1", 6170)
    assert parse_endpoint(" host.example:1 ") == ("host.example", 1)
    assert parse_endpoint("127.0.0.1:0", allow_port_zero=True) == ("127.0.0.1", 0)
    assert parse_endpoints("a:1, b:2,") == ["a:1", "b:2"]
    assert parse_endpoints(["a:1", " b:2 "]) == ["a:1", "b:2"]


@pytest.mark.parametrize("bad, message", [
    ("6174", "must look like 'ip:port', got '6174'"),
    (":80", "must look like 'ip:port', got ':80'"),
    ("h:x", "the port of 'ip:port' must be an integer, got 'h:x'"),
    ("h:99999", "port must be in 1..65535 \\(in 'ip:port'\\), got 'h:99999'"),
    ("h:0", "port must be in 1..65535 \\(in 'ip:port'\\), got 'h:0'"),
])
def test_every_reader_refuses_a_malformed_endpoint_in_the_same_words(bad: str, message: str
                                                                       ) -> None:
    with pytest.raises(ValueError, match=f"PADDLE_CURRENT_ENDPOINT: {message}|"
                                         f"PADDLE_CURRENT_ENDPOINT {message}"):
        parse_endpoint(bad, "PADDLE_CURRENT_ENDPOINT")
    with pytest.raises(ValueError, match=f"transpile: pservers.*{message}"):
        fluid.DistributeTranspiler().transpile(0, program=fluid.Program(), pservers=bad,
                                               trainers=1,
                                               startup_program=fluid.Program())
    with pytest.raises(ValueError, match=f"--servers.*{message}"):
        plan_pserver(build_parser().parse_args(["--servers", bad, "--worker_num", "1",
                                                "x.py"]))
    with pytest.raises(ValueError, match=f"RoundRobin: pserver_endpoints.*{message}"):
        RoundRobin([bad])
    if not bad.endswith(":0"):  # a server may bind port 0 (a free port)
        with pytest.raises(ValueError, match=f"endpoint.*{message.replace('1..', '0..')}"):
            tcp_address(bad)


def test_a_repeated_or_empty_list_is_refused_everywhere() -> None:
    with pytest.raises(ValueError, match="transpile: pservers: endpoint\\(s\\) a:1 listed twice"):
        fluid.DistributeTranspiler().transpile(0, program=fluid.Program(), pservers="a:1,a:1",
                                               trainers=1, startup_program=fluid.Program())
    with pytest.raises(ValueError, match="--servers: endpoint\\(s\\) a:1 listed twice"):
        plan_pserver(build_parser().parse_args(["--servers", "a:1,a:1", "--worker_num", "1",
                                                "x.py"]))
    with pytest.raises(ValueError, match="RoundRobin: pserver_endpoints: expected at least one"):
        RoundRobin(" , ")
    with pytest.raises(TypeError, match="trainers must be a string 'ip:port', got int: 3"):
        parse_endpoints([3])  # type: ignore[list-item]


def test_the_launcher_picks_distinct_fresh_ports_for_both_roles(monkeypatch) -> None:
    """Servers' and workers' fresh ports are picked at once: distinct even when the system
    would hand out a just-released port again, and never one of the listed endpoints."""
    import parafluid.distributed.launch as launch

    real, calls = launch.free_ports, []

    def counted(n, host="127.0.0.1"):
        calls.append(n)
        return real(n, host)

    monkeypatch.setattr(launch, "free_ports", counted)
    procs = plan_pserver(build_parser().parse_args(["--server_num", "3", "--worker_num", "4",
                                                    "x.py"]))
    eps = {p.env["PADDLE_CURRENT_ENDPOINT"] for p in procs if "PADDLE_CURRENT_ENDPOINT" in p.env}
    servers = procs[0].env["PADDLE_PSERVERS_IP_PORT_LIST"].split(",")
    assert len(calls) == 1 and len(set(servers)) == 3 and len(eps) == 7
    listed = "127.0.0.1:" + str(real(1)[0])
    procs = plan_pserver(build_parser().parse_args(["--servers", listed, "--worker_num", "2",
                                                    "x.py"]))
    workers = {p.env.get("PADDLE_CURRENT_ENDPOINT") for p in procs} - {listed, None}
    assert len(workers) == 2


def test_test_endpoints_skip_a_port_another_test_process_was_given(monkeypatch, tmp_path):
    # two pytest-xdist workers given the same released port would mix their jobs: a port
    # claimed by another process recently is not handed out again
    import dist_helpers

    monkeypatch.setattr(dist_helpers, "_CLAIMS", str(tmp_path))
    (tmp_path / "40001").write_text("1")  # claimed just now by process 1
    draws = iter([[40001], [40002]])
    monkeypatch.setattr(dist_helpers, "free_ports", lambda n: next(draws))
    assert dist_helpers.endpoints(1) == "127.0.0.1:40002"
    assert (tmp_path / "40002").read_text() == str(os.getpid())
