"""Who this process is in a fleet job: a worker (trainer) or a server (pserver), its index,
and the endpoints of the others.

``PaddleCloudRoleMaker`` reads the launcher's variables (``python -m
parafluid.distributed.launch``, docs/distributed.md): ``PADDLE_TRAINING_ROLE``,
``PADDLE_TRAINER_ID``, ``PADDLE_TRAINERS_NUM``, ``PADDLE_TRAINER_ENDPOINTS``,
``PADDLE_CURRENT_ENDPOINT`` and the pservers' endpoints (``PADDLE_PSERVER_ENDPOINTS`` or
Fluid's ``PADDLE_PSERVERS_IP_PORT_LIST``, or Fluid's ``PADDLE_PSERVERS`` with
``PADDLE_PORT``), all through ``parafluid.distributed.env``, the one reader of them (so
two pserver lists that disagree are refused here as everywhere). ``UserDefinedRoleMaker`` /
``UserDefinedCollectiveRoleMaker`` take them as arguments.
"""

from __future__ import annotations

from collections.abc import Sequence

from ....distributed.endpoints import parse_endpoints
from ....distributed.env import env as distributed_env
from ....distributed.env import training_role_variable

__all__ = ["Role", "RoleMakerBase", "PaddleCloudRoleMaker", "UserDefinedRoleMaker",
           "UserDefinedCollectiveRoleMaker", "MPIRoleMaker", "MPISymetricRoleMaker"]


class Role:
    """The two roles of a fleet job."""

    WORKER = 1
    SERVER = 2


class RoleMakerBase:
    """Holds the role once ``generate_role()`` has found it (the queries call it first)."""

    def __init__(self) -> None:
        self._worker_endpoints: list[str] = []
        self._server_endpoints: list[str] = []
        self._role_is_generated = False
        self._role: int | None = None
        self._current_id = -1
        self._trainers_num = 0

    def generate_role(self) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not say how to find the role")

    def _generated(self) -> RoleMakerBase:
        if not self._role_is_generated:
            self.generate_role()
        return self

    def is_worker(self) -> bool:
        return self._generated()._role == Role.WORKER

    def is_server(self) -> bool:
        return self._generated()._role == Role.SERVER

    def is_first_worker(self) -> bool:
        return self.is_worker() and self._current_id == 0

    def worker_num(self) -> int:
        return self._generated()._trainers_num

    def worker_index(self) -> int:
        return self._generated()._current_id

    def server_index(self) -> int:
        return self._generated()._current_id

    def get_trainer_endpoints(self) -> list[str]:
        return list(self._generated()._worker_endpoints)

    def get_pserver_endpoints(self) -> list[str]:
        return list(self._generated()._server_endpoints)

    def to_string(self) -> str:
        self._generated()
        role = {Role.WORKER: "worker", Role.SERVER: "server"}.get(self._role, "?")
        return (f"role: {role}, current_id: {self._current_id}, worker_endpoints: "
                f"{self._worker_endpoints}, server_endpoints: {self._server_endpoints}")

    __str__ = to_string


class PaddleCloudRoleMaker(RoleMakerBase):
    """The role from the environment the launcher (or a cluster's job spec) sets.

    Args:
        is_collective: True for the collective (nccl2) mode: every process is a worker and
            ``PADDLE_TRAINER_ENDPOINTS`` must list them all.
    """

    def __init__(self, is_collective: bool = False) -> None:
        super().__init__()
        self._is_collective = bool(is_collective)

    def generate_role(self) -> None:
        if self._role_is_generated:
            return
        e = distributed_env()  # the one reader of the job's variables (distributed/env.py)
        if self._is_collective:
            if e.training_role != "TRAINER":
                raise ValueError("PaddleCloudRoleMaker(is_collective=True): every process of "
                                 f"a collective job is a TRAINER, got PADDLE_TRAINING_ROLE="
                                 f"{e.training_role}")
            if not e.trainer_endpoints:
                raise ValueError("PaddleCloudRoleMaker(is_collective=True): "
                                 "PADDLE_TRAINER_ENDPOINTS is not set; start the job with "
                                 "python -m parafluid.distributed.launch --nproc_per_node N "
                                 "script.py")
            self._worker_endpoints = list(e.trainer_endpoints)
            self._trainers_num = len(self._worker_endpoints)
            self._current_id = e.trainer_id
            self._role = Role.WORKER
            self._role_is_generated = True
            return
        # NOTE: the pserver mode needs no trainer endpoints (Fluid's PaddleCloud sets none)
        servers = list(e.pserver_endpoints)
        if not servers:
            raise ValueError("PaddleCloudRoleMaker: no pserver endpoints "
                             "(PADDLE_PSERVER_ENDPOINTS / PADDLE_PSERVERS_IP_PORT_LIST); "
                             "start the job with python -m parafluid.distributed.launch "
                             "--server_num N --worker_num M script.py")
        # NOTE: in the pserver mode a process is a trainer or a pserver, and nothing in the
        # job says which but this variable: unset, it must not default to a trainer
        if training_role_variable() is None:
            raise ValueError("PaddleCloudRoleMaker: PADDLE_TRAINING_ROLE (or TRAINING_ROLE) is "
                             "not set; a parameter-server job gives every process TRAINER or "
                             "PSERVER (python -m parafluid.distributed.launch --server_num N "
                             "--worker_num M script.py sets it)")
        self._server_endpoints = servers
        self._worker_endpoints = list(e.trainer_endpoints)
        self._trainers_num = e.trainers
        if e.training_role == "PSERVER":
            if e.current_endpoint not in servers:
                raise ValueError(f"PaddleCloudRoleMaker: this pserver's endpoint "
                                 f"{e.current_endpoint!r} (PADDLE_CURRENT_ENDPOINT, or "
                                 f"POD_IP:PADDLE_PORT) is not one of the pservers {servers}")
            self._current_id = servers.index(e.current_endpoint)
            self._role = Role.SERVER
        else:
            self._current_id = e.trainer_id
            self._role = Role.WORKER
        self._role_is_generated = True


class UserDefinedRoleMaker(RoleMakerBase):
    """The role of a parameter-server job, given by hand.

    Args:
        current_id: this worker's trainer id, or this server's index in ``server_endpoints``.
        role: ``Role.WORKER`` or ``Role.SERVER``.
        worker_num: the number of workers (trainers).
        server_endpoints: every pserver's ``ip:port``.
    """

    def __init__(self, current_id: int = 0, role: int = Role.WORKER, worker_num: int = 0,
                 server_endpoints: Sequence[str] | None = None) -> None:
        super().__init__()
        if not isinstance(current_id, int) or current_id < 0:
            raise ValueError(f"UserDefinedRoleMaker: current_id must be an int >= 0, got "
                             f"{current_id!r}")
        if role not in (Role.WORKER, Role.SERVER):
            raise ValueError(f"UserDefinedRoleMaker: role must be Role.WORKER or Role.SERVER, "
                             f"got {role!r}")
        if not isinstance(worker_num, int) or worker_num < 1:
            raise ValueError(f"UserDefinedRoleMaker: worker_num must be an int >= 1, got "
                             f"{worker_num!r}")
        if isinstance(server_endpoints, str) or not server_endpoints:
            raise ValueError(f"UserDefinedRoleMaker: server_endpoints must be a list of "
                             f"'ip:port', got {server_endpoints!r}")
        servers = parse_endpoints(list(server_endpoints), what="server_endpoints")
        if role == Role.SERVER and current_id >= len(servers):
            raise ValueError(f"UserDefinedRoleMaker: server current_id {current_id} is not an "
                             f"index of the {len(servers)} server_endpoints")
        if role == Role.WORKER and current_id >= worker_num:
            raise ValueError(f"UserDefinedRoleMaker: worker current_id {current_id} must be "
                             f"below worker_num {worker_num}")
        self._current_id = current_id
        self._role = role
        self._trainers_num = worker_num
        self._server_endpoints = servers
        self._role_is_generated = True

    def generate_role(self) -> None:
        return None


class UserDefinedCollectiveRoleMaker(RoleMakerBase):
    """The role of a collective (nccl2) job, given by hand.

    Args:
        current_id: this worker's index in ``worker_endpoints``.
        worker_endpoints: every worker's ``ip:port``.
    """

    def __init__(self, current_id: int = 0,
                 worker_endpoints: Sequence[str] | None = None) -> None:
        super().__init__()
        if isinstance(worker_endpoints, str) or not worker_endpoints:
            raise ValueError(f"UserDefinedCollectiveRoleMaker: worker_endpoints must be a "
                             f"list of 'ip:port', got {worker_endpoints!r}")
        workers = parse_endpoints(list(worker_endpoints), what="worker_endpoints")
        if not isinstance(current_id, int) or not 0 <= current_id < len(workers):
            raise ValueError(f"UserDefinedCollectiveRoleMaker: current_id must be an index of "
                             f"the {len(workers)} worker_endpoints, got {current_id!r}")
        self._current_id = current_id
        self._role = Role.WORKER
        self._worker_endpoints = workers
        self._trainers_num = len(workers)
        self._role_is_generated = True

    def generate_role(self) -> None:
        return None


class MPIRoleMaker(RoleMakerBase):
    """Roles from an MPI job's ranks: needs mpi4py and an MPI launcher, which parafluid does
    not ship; start the job with parafluid's launcher and ``PaddleCloudRoleMaker`` instead."""

    def __init__(self) -> None:
        raise NotImplementedError(
            f"{type(self).__name__} needs MPI (mpi4py and mpirun), which parafluid does not "
            "use: start the job with python -m parafluid.distributed.launch and use "
            "PaddleCloudRoleMaker() (docs/fleet.md)")


class MPISymetricRoleMaker(MPIRoleMaker):
    """Every MPI node a worker and a server (needs MPI; see ``MPIRoleMaker``)."""
