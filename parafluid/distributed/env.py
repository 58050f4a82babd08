"""Who am I in the job: trainer id, trainer count and endpoints, from the environment.

Two conventions are read:

- Fluid's (set by ``python -m parafluid.distributed.launch``, or by a Slurm/Kubernetes job
  spec): ``PADDLE_TRAINER_ID``, ``PADDLE_TRAINERS_NUM``, ``PADDLE_TRAINER_ENDPOINTS``
  ("ip:port,ip:port"), ``PADDLE_CURRENT_ENDPOINT``, and ``PADDLE_TRAINING_ROLE`` (TRAINER by
  default; PSERVER for parameter servers; Fluid's PaddleCloud spells it ``TRAINING_ROLE``),
  and the pservers' endpoints in ``PADDLE_PSERVER_ENDPOINTS``, Fluid's
  ``PADDLE_PSERVERS_IP_PORT_LIST``, or Fluid's ``PADDLE_PSERVERS`` (ips) with ``PADDLE_PORT``
  (one port, or one per ip); lists given twice must agree. A pserver's own endpoint is
  ``PADDLE_CURRENT_ENDPOINT``, or ``POD_IP:PADDLE_PORT``.
- torchrun's: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``.
  torchrun's own store already listens on ``MASTER_PORT``, so trainer 0 hosts parafluid's
  rendezvous at ``MASTER_ADDR:MASTER_PORT+1``; trainer k's endpoint is written
  ``MASTER_ADDR:MASTER_PORT+1+k`` (a name for messages: only trainer 0's is dialled, and each
  trainer binds its transport to its own address).

Fluid's variables win when both are set; inconsistent settings raise ValueError naming them.

Example::

    import parafluid as fluid
    e = fluid.distributed.env()
    t.transpile(e.trainer_id, trainers=",".join(e.trainer_endpoints),
                current_endpoint=e.current_endpoint)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from .endpoints import parse_endpoint, parse_endpoints

__all__ = ["DistributedEnv", "env", "training_role_variable", "job_id", "JOB_ID_ENV"]

#: the job's name, shared by all its processes (the launcher sets one when none is given)
JOB_ID_ENV = "PARAFLUID_JOB_ID"


@dataclass(frozen=True)
class DistributedEnv:
    """The job as this process sees it (``trainers`` is the trainer count)."""

    trainer_id: int
    trainers: int
    trainer_endpoints: list[str]
    current_endpoint: str
    training_role: str = "TRAINER"
    local_rank: int = 0
    pserver_endpoints: list[str] = field(default_factory=list)
    source: str = "default"  # "paddle", "torchrun" or "default" (one process)

    @property
    def trainers_num(self) -> int:
        """Fluid's spelling of ``trainers``."""
        return self.trainers

    @property
    def endpoints(self) -> list[str]:
        return self.trainer_endpoints


def _int(environ: Mapping[str, str], name: str, low: int = 0) -> int:
    raw = environ[name]
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {raw!r}") from None
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")
    return value


def _fluid_pserver_ips(e: Mapping[str, str]) -> list[str]:
    """Fluid's ``PADDLE_PSERVERS`` (ips) with ``PADDLE_PORT`` (one port, or one per ip)."""
    ips = [ip.strip() for ip in e.get("PADDLE_PSERVERS", "").split(",") if ip.strip()]
    if not ips:
        return []
    ports = [p.strip() for p in e.get("PADDLE_PORT", "6174").split(",")]
    if len(ports) == 1:
        ports = ports * len(ips)
    if len(ports) != len(ips):
        raise ValueError(f"PADDLE_PORT lists {len(ports)} ports for {len(ips)} "
                         f"PADDLE_PSERVERS: give one port, or one per pserver")
    return parse_endpoints(",".join(f"{ip}:{port}" for ip, port in zip(ips, ports)),
                           "PADDLE_PSERVERS")


def _pserver_endpoints(e: Mapping[str, str]) -> list[str]:
    """The pservers' endpoints, from whichever of Fluid's spellings are set (all alike)."""
    given: list[tuple[str, list[str]]] = []
    for var in ("PADDLE_PSERVERS_IP_PORT_LIST", "PADDLE_PSERVER_ENDPOINTS"):
        if e.get(var, "").strip():
            given.append((var, parse_endpoints(e[var], var)))
    ips = _fluid_pserver_ips(e)
    if ips:
        given.append(("PADDLE_PSERVERS with PADDLE_PORT", ips))
    for var, listed in given[1:]:
        if listed != given[0][1]:
            raise ValueError(f"{var}={','.join(listed)} and {given[0][0]}="
                             f"{','.join(given[0][1])} disagree; set one, or both to the "
                             "same list")
    return given[0][1] if given else []


def job_id(environ: Mapping[str, str] | None = None) -> str:
    """``$PARAFLUID_JOB_ID`` (stripped), or "" (a job without a name)."""
    e = os.environ if environ is None else environ
    return e.get(JOB_ID_ENV, "").strip()


def training_role_variable(environ: Mapping[str, str] | None = None) -> str | None:
    """The variable that gives this process's role (``PADDLE_TRAINING_ROLE``, or PaddleCloud's
    ``TRAINING_ROLE``), or None when neither is set."""
    e = os.environ if environ is None else environ
    for name in ("PADDLE_TRAINING_ROLE", "TRAINING_ROLE"):
        if name in e:
            return name
    return None


def _from_paddle(e: Mapping[str, str]) -> DistributedEnv:
    role_var = training_role_variable(e) or "PADDLE_TRAINING_ROLE"
    # NOTE: spelled exactly, as Fluid compares it: a "pserver" or "Trainer" is a typo that
    # would otherwise run this process in the other role
    role = e.get(role_var, "TRAINER").strip() or "TRAINER"
    if role not in ("TRAINER", "PSERVER"):
        raise ValueError(f"{role_var} must be TRAINER or PSERVER (upper case), got {role!r}")
    pservers = _pserver_endpoints(e)
    eps = parse_endpoints(e["PADDLE_TRAINER_ENDPOINTS"], "PADDLE_TRAINER_ENDPOINTS") \
        if e.get("PADDLE_TRAINER_ENDPOINTS", "").strip() else []
    tid = _int(e, "PADDLE_TRAINER_ID") if "PADDLE_TRAINER_ID" in e else 0
    num = _int(e, "PADDLE_TRAINERS_NUM", 1) if "PADDLE_TRAINERS_NUM" in e else max(len(eps), 1)
    if eps and len(eps) != num:
        raise ValueError(f"PADDLE_TRAINERS_NUM={num} but PADDLE_TRAINER_ENDPOINTS lists "
                         f"{len(eps)} endpoints ({','.join(eps)})")
    if role == "TRAINER" and not tid < num:
        raise ValueError(f"PADDLE_TRAINER_ID={tid} must be < PADDLE_TRAINERS_NUM={num}")
    cur = e.get("PADDLE_CURRENT_ENDPOINT", "").strip()
    if cur:
        parse_endpoint(cur, "PADDLE_CURRENT_ENDPOINT")
    elif role == "PSERVER" and e.get("POD_IP"):
        cur = f"{e['POD_IP']}:{e.get('PADDLE_PORT', '6174')}"
    if role == "TRAINER":
        # (a parameter-server job's trainers talk to the pservers only: Fluid's PaddleCloud
        # gives them no trainer endpoints)
        if num > 1 and not eps and not pservers:
            raise ValueError(f"PADDLE_TRAINERS_NUM={num} needs PADDLE_TRAINER_ENDPOINTS, every "
                             "trainer's 'ip:port' in trainer order")
        if eps and not cur:
            cur = eps[tid]
        if eps and cur != eps[tid]:
            raise ValueError(f"PADDLE_CURRENT_ENDPOINT={cur} must be entry {tid} "
                             f"(PADDLE_TRAINER_ID) of PADDLE_TRAINER_ENDPOINTS={','.join(eps)}")
    local = _int(e, "LOCAL_RANK") if "LOCAL_RANK" in e else 0
    # (a lone trainer's endpoint is its own; a pserver's is no trainer's)
    alone = [cur] if cur and role == "TRAINER" else []
    return DistributedEnv(tid, num, eps or alone, cur, role, local, pservers, "paddle")


def _from_torchrun(e: Mapping[str, str]) -> DistributedEnv:
    missing = [k for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k not in e]
    if missing:
        raise ValueError(f"torchrun-style environment: RANK and WORLD_SIZE are set but "
                         f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not "
                         "(torchrun sets all of RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)")
    rank, world = _int(e, "RANK"), _int(e, "WORLD_SIZE", 1)
    if not rank < world:
        raise ValueError(f"RANK={rank} must be < WORLD_SIZE={world}")
    port = _int(e, "MASTER_PORT", 1)
    if port + world >= 65536:
        raise ValueError(f"MASTER_PORT={port} leaves no room for the rendezvous port "
                         f"MASTER_PORT+1 ... MASTER_PORT+{world} (<= 65535)")
    host = e["MASTER_ADDR"].strip()
    if not host:
        raise ValueError("MASTER_ADDR is empty")
    eps = [f"{host}:{port + 1 + k}" for k in range(world)]
    local = _int(e, "LOCAL_RANK") if "LOCAL_RANK" in e else 0
    return DistributedEnv(rank, world, eps, eps[rank], "TRAINER", local, [], "torchrun")


def env(environ: Mapping[str, str] | None = None) -> DistributedEnv:
    """This process's place in the job, from Fluid's or torchrun's variables (see above).

    With neither set: one trainer (id 0, no endpoints). Raises ValueError naming the
    variables that disagree.
    """
    e = os.environ if environ is None else environ
    if any(k.startswith("PADDLE_") and k != "PADDLE_TRAINING_ROLE" for k in e) or \
            "PADDLE_TRAINING_ROLE" in e:
        paddle = _from_paddle(e)
        if "RANK" in e and "WORLD_SIZE" in e:
            torch_env = _from_torchrun(e)
            if (torch_env.trainer_id, torch_env.trainers) != (paddle.trainer_id,
                                                               paddle.trainers):
                raise ValueError(
                    f"both Fluid's and torchrun's variables are set and disagree: "
                    f"PADDLE_TRAINER_ID={paddle.trainer_id}, PADDLE_TRAINERS_NUM="
                    f"{paddle.trainers} vs RANK={torch_env.trainer_id}, WORLD_SIZE="
                    f"{torch_env.trainers}; unset one set")
        return paddle
    if "RANK" in e or "WORLD_SIZE" in e:
        if not ("RANK" in e and "WORLD_SIZE" in e):
            have = "RANK" if "RANK" in e else "WORLD_SIZE"
            other = "WORLD_SIZE" if have == "RANK" else "RANK"
            raise ValueError(f"{have} is set but {other} is not: set both (as torchrun does), "
                             "or use PADDLE_TRAINER_ID / PADDLE_TRAINERS_NUM")
        return _from_torchrun(e)
    return DistributedEnv(0, 1, [], "", "TRAINER", 0, [], "default")
