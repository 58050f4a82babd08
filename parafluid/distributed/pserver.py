"""The parameter-server loop, independent of programs: barriers, fan-in, deadlines.

A :class:`ParameterServer` serves gradient pushes, parameter reads, table prefetches,
checkpoint requests and completion notices from ``fan_in`` trainers, and calls back into its
owner (the ``listen_and_serv`` op, or a test) to optimize, read, prefetch and save.

Sync mode, per step: wait until every live trainer has sent its gradients and its send
barrier; call ``optimize`` once with every live trainer's gradients; serve parameter reads
until every live trainer has passed its fetch barrier; repeat. A read or fetch barrier from a
trainer that already sent this step's send barrier waits (its reply is held) until the
optimization has run. A trainer's ``complete`` removes it from the fan-in, so trainers with
different amounts of data do not stall the others; ``serve()`` returns once every trainer has
completed. Async mode: each gradient is optimized as it arrives; barriers are answered at once.

Every wait has the deadline (``FLAGS_rpc_deadline``): when it passes, the server pings the
other pservers of its job (``peers``) and its error names the missing trainer ids, what they
were waiting for, and a peer that does not answer (a dead or stopped pserver holds up the
trainers, so it is the likely cause). Then it saves its state into an emergency checkpoint
(``save``, under ``checkpoint_root/__emergency__/<job>/step_<k>``) and stays up for a while
(``linger_s``): it answers pings, so that trainers probing the pservers do not take it for
the culprit, and it answers every other request with its error, until every live trainer
has heard it or ``linger_s`` passed; then ``serve()`` raises :class:`PServerError`. A
pserver whose own update failed answers pings with its error: it is the culprit.

A trainer that dies (killed, crashed, or ended by an uncaught error: no ``complete``) is
found in about a second, not at the deadline: the server knows which TCP connection each
trainer speaks on (its requests), and when that connection closes without the trainer's
``complete`` and no request of it comes on another one within ``LOST_GRACE_S``, the server
fails as above (emergency checkpoint, every trainer told) with an error naming that trainer
and the address it was connected from. A trainer that ends normally sends ``complete``
before it closes (its exit hook), so it is never taken for dead. A stopped trainer (SIGSTOP)
keeps its connection open: it is found at the barrier deadline (or when its connection
misses ZeroMQ's heartbeat, ``idle_timeout_s``, if that comes first). A server stopped
by SIGTERM (the launcher stopping the job on another process's failure) while trainers are
still training saves the same emergency checkpoint before ``serve()`` returns.

Steps: every trainer request carries the trainer's step with this pserver (the send barriers
it passed); in sync mode a request whose step is not the pserver's (a pserver restarted
alone, a trainer restarted alone) is refused with an error naming both steps, and every
reply carries the pserver's step so that a trainer notices a pserver whose step went back.

Strangers: the first connection whose request for a trainer id is accepted owns that id;
requests for it from any other connection are refused (without a shared secret this is what
keeps a forged ``complete`` or gradient out of a running job). A request that is malformed,
names an unknown gradient, a gradient of the wrong shape, or a checkpoint directory outside
``checkpoint_root`` is refused and logged (rate-limited), and the server goes on.

Example::

    params = {"w": torch.zeros(4)}
    def optimize(grads):                      # {"w": [grad of trainer 0, grad of trainer 1]}
        for name, blocks in grads.items():
            params[name] -= 0.1 * sum(blocks) / len(blocks)
    ps = ParameterServer("127.0.0.1:0", fan_in=2, optimize=optimize, get=params.__getitem__)
    ps.serve()                                # returns when both trainers called complete()
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import torch
import zmq

from .deadline import rpc_deadline_seconds
from .env import job_id
from .rpc import (
    DEFAULT_IDLE_TIMEOUT_S,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_HANDSHAKES,
    RateLimitedLog,
    Request,
    RPCServer,
)
from .wire import DEFAULT_MAX_MESSAGE_BYTES, Kind

__all__ = ["ParameterServer", "PServerError", "CHECKPOINT_ROOT_ENV", "EMERGENCY_DIR",
           "default_checkpoint_root", "confine_checkpoint_dir", "emergency_checkpoint_dir"]

CHECKPOINT_ROOT_ENV = "PARAFLUID_CHECKPOINT_ROOT"
# how long a trainer whose connection closed (without completing) may take to show that it
# is alive (a request on a new connection) before the job fails naming it
LOST_GRACE_S = 1.0
EMERGENCY_DIR = "__emergency__"  # inside the checkpoint root: what a failing pserver saves

log = logging.getLogger("parafluid.distributed.pserver")

_TRAINER_SUFFIX = re.compile(r"\.trainer_(\d+)$")


class PServerError(RuntimeError):
    """The server loop cannot go on: a barrier timed out, or a callback failed."""


class ParameterServer:
    """The server loop of one pserver endpoint (see the module docstring for the protocol).

    Args:
        endpoint: ``host:port`` to bind (port 0: a free port, see ``self.endpoint``).
        fan_in: the number of trainers (ids ``0 .. fan_in-1``).
        sync_mode: barriers and one optimization per step (True), or apply each gradient as
            it arrives (False).
        optimize: ``optimize({name: [value, ...]})``; sync mode: once per step with the
            gradients of every live trainer that sent one, in trainer-id order (a
            ``.trainer_<id>`` suffix matching the sender is stripped from names); async: once
            per gradient with a one-element list.
        get: ``get(name) -> tensor`` for parameter reads (KeyError: the trainer gets an error
            naming the variable). The tensor is sent without a copy; it must change only
            inside ``optimize`` (sync mode: every read of a step is received before the next
            step's optimize; async mode: optimize first waits, briefly, for replies in flight).
        prefetch: ``prefetch(table, rows) -> tensor`` of the requested rows.
        save: ``save(dirname, step) -> str`` on a checkpoint notice: writes this pserver's
            state of ``step`` under ``dirname`` (already confined to ``checkpoint_root``)
            and returns the text the trainer gets back (a JSON record of the file). When the
            request names the file of the committed checkpoint (a trainer's
            ``save_persistables``), it is called as ``save(dirname, step, keep)``.
        emergency_save: ``emergency_save(dirname, step)`` before a failure ends the server
            (not when its own update failed): writes this pserver's state of ``step`` into
            ``dirname`` (``checkpoint_root/__emergency__/<job>/step_<k>``) as a checkpoint that
            loads on its own.
        check_grad: ``check_grad(name, value)`` raises ValueError for a gradient this
            pserver cannot optimize (unknown name, wrong shape or dtype): the SEND is
            refused and the server goes on. None: every gradient is accepted.
        checkpoint_root: the directory checkpoint requests must stay inside (None:
            ``$PARAFLUID_CHECKPOINT_ROOT``, else the working directory).
        deadline_s: the deadline; None reads ``FLAGS_rpc_deadline``. A sync barrier gives
            up at ``barrier_s``: 1 s before it (at 3/4 of it when that is later).
        peers: the endpoints of the job's other pservers, pinged when a barrier times out
            to name a dead one (this endpoint, if listed, is skipped).
        linger_s: how long a failed server keeps answering (pings, and every request with
            its error) before ``serve()`` raises; None: ``deadline_s`` (a trainer blocked on
            a dead pserver gives up within one deadline, then pings this one).
        secret: shared secret; None reads ``$PARAFLUID_RPC_SECRET``.
        max_connections, idle_timeout_s, max_handshakes: see :class:`RPCServer`.
    """

    def __init__(self, endpoint: str, fan_in: int, sync_mode: bool = True, *,
                 optimize: Callable[[dict[str, list[Any]]], None],
                 get: Callable[[str], Any],
                 prefetch: Callable[[str, torch.Tensor], Any] | None = None,
                 save: Callable[[str, int], str] | None = None,
                 emergency_save: Callable[[str, int], None] | None = None,
                 check_grad: Callable[[str, Any], None] | None = None,
                 checkpoint_root: str | None = None,
                 deadline_s: float | None = None,
                 peers: Sequence[str] = (),
                 linger_s: float | None = None,
                 secret: bytes | str | None = None,
                 max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
                 poll_interval_s: float = 0.05,
                 max_connections: int = DEFAULT_MAX_CONNECTIONS,
                 idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
                 first_contact_s: float | None = None,
                 max_handshakes: int = DEFAULT_MAX_HANDSHAKES) -> None:
        if not isinstance(fan_in, int) or fan_in < 1:
            raise ValueError(f"ParameterServer: fan_in must be an int >= 1, got {fan_in!r}")
        self.fan_in = fan_in
        self.sync_mode = bool(sync_mode)
        self._optimize, self._get, self._prefetch, self._save = optimize, get, prefetch, save
        self._check_grad = check_grad
        self._emergency_save_cb = emergency_save
        self.checkpoint_root = os.path.realpath(checkpoint_root or default_checkpoint_root())
        self._owner: dict[int, bytes] = {}  # trainer id -> the connection that speaks for it
        self._link: dict[int, tuple[int, str]] = {}  # trainer id -> (its TCP link, address)
        self._lost: dict[int, tuple[float, int, str]] = {}  # closed: (when, link, address)
        self._log = RateLimitedLog(log)
        self.refused = 0  # requests refused (bad, forged or unexpected)
        self.deadline_s = rpc_deadline_seconds() if deadline_s is None else float(deadline_s)
        self.linger_s = self.deadline_s if linger_s is None else float(linger_s)
        # NOTE: a sync barrier gives up a little before the deadline: a trainer's read held
        # since the barrier began must get this server's error (after the peers are probed)
        # before its own deadline, else it would only know that this server did not answer
        self.barrier_s = max(0.75 * self.deadline_s, self.deadline_s - 1.0)
        # NOTE: the first step's clock starts at the first trainer's first message, not when
        # this pserver started serving: trainers may take long to reach their first step
        # (reading data, building the program); the wait for that first message has its own,
        # longer bound
        self.first_contact_s = 10 * self.deadline_s if first_contact_s is None else \
            float(first_contact_s)
        self._first_contact: float | None = None
        self._secret = secret
        self._failed_at = 0.0
        self._culprit = False  # the failure is this server's own (its update failed)
        self._told: set[int] = set()  # trainers answered with the error after the failure
        # a barrier timed out: (the error, the thread pinging the peers, what it found)
        self._probing: tuple[PServerError, threading.Thread, list[str]] | None = None
        self.emergency_path: str | None = None
        self.live: set[int] = set(range(fan_in))
        self.completed: set[int] = set()
        self.step = 0  # optimizations run (sync: steps; async: gradients applied)
        self._phase = "send"  # sync: "send" (collect grads + send barriers) or "fetch"
        self._grads: dict[str, dict[int, Any]] = {}
        # NOTE: both are subsets of ``live`` (a completed trainer leaves all three), so "every
        # live trainer passed the barrier" is a comparison of sizes: the cost of a barrier
        # message does not grow with the number of trainers
        self._sent_barrier: set[int] = set()   # send barrier received this step
        self._fetched: set[int] = set()        # fetch barrier received this step
        self._held: list[Request] = []         # requests waiting for this step's optimize
        self._in_flight: list[zmq.MessageTracker] = []  # async: replies still being sent
        self._phase_start = time.monotonic()
        self._warned = False
        # trainer -> when its last message came, oldest first (async mode's silence check
        # looks at the front only)
        self._last_seen: OrderedDict[int, float] = OrderedDict.fromkeys(self.live,
                                                                        time.monotonic())
        self._error: PServerError | None = None
        self._server = RPCServer(endpoint, self._handle, secret,
                                 max_message_bytes=max_message_bytes,
                                 poll_interval_s=poll_interval_s, on_tick=self._tick,
                                 on_disconnect=self._disconnected,
                                 max_connections=max_connections,
                                 idle_timeout_s=idle_timeout_s, max_handshakes=max_handshakes)
        self.endpoint = self._server.endpoint
        self.peers = [p for p in peers if p != self.endpoint and p != endpoint]
        # the job's folder among the emergency checkpoints: two jobs failing at the same step
        # under one root must not overwrite each other
        self.job = emergency_job_key([endpoint, *peers])

    # -- lifecycle ---------------------------------------------------------------------------

    def serve(self, handle_sigterm: bool = True,
              on_ready: Callable[[], None] | None = None) -> None:
        """Serve until every trainer completed (or :meth:`stop`, or SIGTERM).

        ``on_ready`` is called when the server is about to serve, with SIGTERM handled (when
        ``handle_sigterm`` and on the main thread): e.g. to print a "listening" line.

        Raises PServerError when a barrier times out or a callback fails; the requests held
        at that moment are answered with the error so that their trainers fail at once.
        """
        try:
            self._server.serve_forever(handle_sigterm=handle_sigterm, on_ready=on_ready)
        except PServerError as e:
            self._error = e
        except Exception as e:
            self._error = PServerError(f"pserver {self.endpoint}: {type(e).__name__}: {e}")
            self._error.__cause__ = e
        self._log.flush()
        if self._error is not None:
            raise self._error
        if self._server.stopped_by:
            # NOTE: a launcher stops the pservers as soon as a trainer fails, before they see
            # its connection close: trainers still training means the job was cut short
            saved = ""
            if self.live and self.step > 0 and self._emergency_save():
                saved = (f"; its state of step {self.step} is saved in {self.emergency_path} "
                         "(emergency checkpoint)")
            log.warning("pserver %s: stopped by %s at step %d (trainers still training: "
                        "%s)%s", self.endpoint, self._server.stopped_by, self.step,
                        sorted(self.live), saved)

    def stop(self) -> None:
        """End :meth:`serve` (thread-safe)."""
        self._server.stop()

    @property
    def stopped_by(self) -> str | None:
        return self._server.stopped_by

    def close(self) -> None:
        """Release the socket of a server whose ``serve()`` was never called."""
        self._server.close()

    # -- request handling (serving thread only) ----------------------------------------------

    def _handle(self, req: Request) -> None:
        m = req.msg
        req.step = self.step
        if self._error is not None:
            self._handle_failed(req)
            return
        if self._probing is not None and m.kind != Kind.PING:
            self._held.append(req)  # answered with the error once the peers are probed
            return
        if m.kind == Kind.PING:
            req.reply()
            return
        t = m.trainer_id
        if self._first_contact is None:
            self._first_contact = now = time.monotonic()
            if self.step == 0:
                self._phase_start = now
                self._last_seen = OrderedDict.fromkeys(self.live, now)
        try:
            if not 0 <= t < self.fan_in:
                raise _RequestError(f"trainer id {t} is not in 0..{self.fan_in - 1} (this "
                                    f"pserver serves {self.fan_in} trainers)")
            owner = self._owner.get(t)
            if owner is not None and owner != req.connection:
                raise _RequestError(f"trainer {t} is already served on another connection; "
                                    f"a {m.kind.name} for it from {req.peer} is not accepted")
            if t in self.completed:
                if m.kind == Kind.COMPLETE:
                    req.reply()
                    return
                raise _RequestError(f"trainer {t} already completed and cannot {m.kind.name}")
            if m.kind == Kind.COMPLETE and owner is None:
                # NOTE: a trainer tells only the pservers it used that it is done (it pulls
                # its parameters from each first): a COMPLETE for a trainer that never spoke
                # here is a stranger's, or a replay, and would end the job for it
                raise _RequestError(f"trainer {t} never connected to this pserver; a COMPLETE "
                                    f"for it from {req.peer} is not accepted")
            self._check_step(m.kind, t, m.step)
        except _RequestError as e:
            if self._restarted_alone(m.kind, t, m.step):
                self._refuse(req, str(e))
                self._told.add(t)
                self._fail(PServerError(
                    f"pserver {self.endpoint}: {e}; this pserver was restarted alone (its "
                    "trainers are further on) and ends, failing the job"), culprit=True)
                return
            self._refuse(req, str(e))
            return
        self._owner.setdefault(t, req.connection)
        self._last_seen[t] = time.monotonic()
        self._last_seen.move_to_end(t)
        self._track_link(t, req)
        try:
            if m.kind == Kind.COMPLETE:
                self._complete(t)
                req.reply()  # NOTE: after the state change, so the trainer sees it done
            elif m.kind == Kind.CHECKPOINT:
                self._checkpoint(req)
            elif self.sync_mode:
                self._handle_sync(req, t)
            else:
                self._handle_async(req, t)
        except PServerError as e:
            if not req.replied:
                req.reply_error(str(e))
                self._told.add(t)
            self._fail(e, culprit=True)
        except _RequestError as e:
            self._refuse(req, str(e))

    def _handle_failed(self, req: Request) -> None:
        """After a failure: pings are answered (with the error when the failure is this
        server's own), every other request with the error."""
        m = req.msg
        if m.kind == Kind.PING and not self._culprit:
            req.reply()
        else:
            req.reply_error(str(self._error))
        # NOTE: a trainer that asked anything (a ping too: it is finding the culprit) on its
        # own connection has learnt what it needs from this server
        if self._owner.get(m.trainer_id) == req.connection:
            self._told.add(m.trainer_id)
            self._maybe_end_linger()

    def _track_link(self, t: int, req: Request) -> None:
        """Remember the TCP connection trainer ``t`` speaks on; a request of it on another
        connection than one that closed shows it alive (it reconnected)."""
        if req.link < 0:
            return  # NOTE: a message read after its connection closed: no news of it
        lost = self._lost.get(t)
        if lost is not None:
            if req.link == lost[1]:
                return
            del self._lost[t]
            log.warning("pserver %s: trainer %d reconnected (from %s)", self.endpoint, t,
                        self._server.link_addresses.get(req.link) or req.peer)
        if self._link.get(t, (-1, ""))[0] != req.link:
            self._link[t] = (req.link, self._server.link_addresses.get(req.link) or req.peer)

    def _disconnected(self, link: int) -> None:
        """A TCP connection closed (serving thread): if a trainer that has not completed
        spoke on it, it is lost (see the module docstring)."""
        for t, (own, address) in list(self._link.items()):
            if own != link or t in self.completed:
                continue
            if self._error is not None:
                self._told.add(t)  # gone after the failure: nothing left to tell it
                self._maybe_end_linger()
            elif t in self.live:
                self._lost.setdefault(t, (time.monotonic(), link, address))

    def _check_lost(self, now: float) -> None:
        grace = min(LOST_GRACE_S, self.deadline_s / 4)
        lost = sorted(t for t, (since, _, _) in self._lost.items()
                      if now - since >= grace and t in self.live)
        if not lost:
            return
        where = ", ".join(f"trainer {t} from {self._lost[t][2] or 'an unknown address'}"
                          for t in lost)
        waited = {"send": "gradients and send barrier", "fetch": "fetch barrier"}[self._phase]
        err = PServerError(
            f"pserver {self.endpoint}: step {self.step}: trainer(s) {lost} closed the "
            f"connection without completing ({where}): the process died (killed, crashed or "
            "ended by an uncaught error)" + (f", while this pserver waited for its {waited}"
                                             if self.sync_mode else "") +
            f"; trainers still training: {sorted(self.live - set(lost))}, completed: "
            f"{sorted(self.completed)}")
        self._fail(err)

    def _refuse(self, req: Request, why: str) -> None:
        """Answer a request with an error and log it (rate-limited); the server goes on."""
        self.refused += 1
        self._log.error("pserver %s: refused %s%s (trainer %d, step %d) from %s: %s",
                        self.endpoint, req.msg.kind.name,
                        f" of {req.msg.name!r}" if req.msg.name else "", req.msg.trainer_id,
                        req.msg.step, req.peer, why)
        if not req.replied:
            req.reply_error(why)

    def _check_step(self, kind: Kind, t: int, step: int) -> None:
        """Sync mode: the trainer's step with this pserver must be the pserver's step.

        A read or fetch barrier of a trainer past its send barrier is one step ahead (it
        waits for this step's update). NOTE: a pserver that was restarted alone holds the
        values of its checkpoint or of its startup program while the trainers are further
        on: serving them would mix steps silently.
        """
        if not self.sync_mode or kind in (Kind.COMPLETE, Kind.CHECKPOINT):
            return
        if step == -1:
            raise _RequestError(f"{kind.name} from trainer {t} carries no step (this sync-mode "
                                f"pserver {self.endpoint} is at step {self.step})")
        ahead = kind in (Kind.GET, Kind.PREFETCH, Kind.FETCH_BARRIER) and \
            t in self._sent_barrier and step == self.step + 1
        if step != self.step and not ahead:
            raise _RequestError(
                f"pserver {self.endpoint} is at step {self.step} but trainer {t} is at step "
                f"{step} ({kind.name}): they are not in the same job state; a pserver or a "
                "trainer restarted alone cannot rejoin a running job: restart the whole job "
                "from the last checkpoint")

    def _restarted_alone(self, kind: Kind, t: int, step: int) -> bool:
        """Sync mode: a request of a trainer further on than this pserver, which has served
        no trainer yet: this pserver was restarted alone and cannot serve the job any more.

        NOTE: once a trainer has spoken, a request at another step is refused and the job
        goes on (it may come from a stranger); before that, speaking first is open to any
        peer that can reach the port anyway (see docs/security.md).
        """
        return self.sync_mode and not self._owner and 0 <= t < self.fan_in and \
            kind not in (Kind.COMPLETE, Kind.CHECKPOINT) and step > self.step

    def _handle_sync(self, req: Request, t: int) -> None:
        m = req.msg
        if m.kind == Kind.SEND:
            name = self._checked_grad(m.name, t, m.value)
            blocks = self._grads.setdefault(name, {})
            if t in blocks:
                raise _RequestError(f"trainer {t} sent {name!r} twice in step {self.step}")
            blocks[t] = m.value
            req.reply()
        elif m.kind == Kind.SEND_BARRIER:
            if self._phase == "fetch" and t not in self._fetched:
                raise _RequestError(f"trainer {t} sent a send barrier before its fetch barrier "
                                    f"of step {self.step - 1}")
            if t in self._sent_barrier:
                raise _RequestError(f"trainer {t} sent two send barriers in step {self.step}")
            self._sent_barrier.add(t)
            req.reply()
            self._maybe_optimize()
        elif t in self._sent_barrier:
            # NOTE: this trainer is past its send barrier: it reads this step's result, so
            # the reply waits for the optimization (Fluid's "wait cond kRequestGet").
            self._held.append(req)
        elif m.kind == Kind.FETCH_BARRIER:
            req.reply()
            if self._phase == "fetch":
                self._fetched.add(t)
                self._maybe_finish_fetch()
            # in the "send" phase: the fetch barrier of a trainer's initial parameter pull
        else:
            self._serve_read(req, track=False)

    def _handle_async(self, req: Request, t: int) -> None:
        m = req.msg
        if m.kind == Kind.SEND:
            self._run_optimize({self._checked_grad(m.name, t, m.value): [m.value]})
            req.reply()
        elif m.kind in (Kind.SEND_BARRIER, Kind.FETCH_BARRIER):
            req.reply()
        else:
            self._serve_read(req, track=True)

    def _checked_grad(self, name: str, t: int, value: Any) -> str:
        name = _strip_trainer(name, t)
        if self._check_grad is not None:
            try:
                self._check_grad(name, value)
            except (ValueError, TypeError, KeyError) as e:
                raise _RequestError(f"pserver {self.endpoint} refuses gradient {name!r} of "
                                    f"trainer {t}: {e}") from None
        return name

    def _serve_read(self, req: Request, track: bool) -> None:
        m = req.msg
        if m.kind == Kind.GET:
            try:
                value = self._get(m.name)
            except (KeyError, ValueError):
                raise _RequestError(f"pserver {self.endpoint} has no variable {m.name!r}"
                                    ) from None
        elif m.kind == Kind.PREFETCH:
            if self._prefetch is None:
                raise _RequestError(f"pserver {self.endpoint} holds no lookup table "
                                    f"(prefetch of {m.name!r})")
            try:
                value = self._prefetch(m.name, m.value)
            except (KeyError, IndexError, ValueError, TypeError, RuntimeError) as e:
                raise _RequestError(f"prefetch of {m.name!r} on {self.endpoint}: {e}") from None
        else:
            raise _RequestError(f"unexpected request {m.kind.name}")
        if value is None:
            raise _RequestError(f"pserver {self.endpoint}: {m.name!r} has no value")
        tracker = req.reply(value, track=track)
        if tracker is not None and not tracker.done:
            if len(self._in_flight) >= 64:  # reads without updates in between: forget the sent
                self._in_flight = [t for t in self._in_flight if not t.done]
            self._in_flight.append(tracker)

    def _checkpoint(self, req: Request) -> None:
        if self._save is None:
            raise _RequestError(f"pserver {self.endpoint} has no checkpoint handler")
        m = req.msg
        if self.sync_mode and m.step != self.step:
            # NOTE: after a trainer's fetch barrier of step k every pserver has run step k's
            # update and none can run step k+1's without that trainer: the state is step k's
            raise _RequestError(
                f"pserver {self.endpoint}: checkpoint requested by trainer {m.trainer_id} at "
                f"its step {m.step}, but this pserver is at step {self.step}: a checkpoint is "
                "saved between steps, by a trainer that passed its fetch barrier")
        try:
            dirname = confine_checkpoint_dir(m.text(), self.checkpoint_root)
        except ValueError as e:
            raise _RequestError(f"pserver {self.endpoint}: {e}") from None
        try:
            # NOTE: the request's name is the version of this pserver's file that the
            # committed checkpoint holds: kept while the new one is written
            record = self._save(dirname, self.step, m.name) if m.name else \
                self._save(dirname, self.step)
        except (OSError, ValueError) as e:
            raise _RequestError(f"pserver {self.endpoint} could not save to {dirname!r}: {e}"
                                ) from None
        req.reply(torch.frombuffer(bytearray(record.encode("utf-8")), dtype=torch.uint8)
                  if record else None)

    # -- barriers ----------------------------------------------------------------------------

    def _maybe_optimize(self) -> None:
        if self._phase != "send" or not self.live or \
                len(self._sent_barrier) < len(self.live):
            return
        grads = {name: [blocks[t] for t in sorted(blocks)] for name, blocks in
                 sorted(self._grads.items())}
        self._grads.clear()
        self._run_optimize(grads)
        self._sent_barrier.clear()
        self._set_phase("fetch")
        held, self._held = self._held, []
        for req in held:  # their trainers are no longer past a send barrier: served now
            self._handle(req)

    def _maybe_finish_fetch(self) -> None:
        if self._phase == "fetch" and len(self._fetched) >= len(self.live):
            self._fetched.clear()
            self._set_phase("send")
            self._maybe_optimize()  # every live trainer may already be at the next barrier

    def _run_optimize(self, grads: dict[str, list[Any]]) -> None:
        if self._in_flight:
            self._wait_in_flight()
        try:
            self._optimize(grads)
        except Exception as e:
            err = PServerError(f"pserver {self.endpoint}: optimize failed at step {self.step} "
                               f"(gradients {sorted(grads)}): {type(e).__name__}: {e}")
            raise err from e
        self.step += 1

    def _wait_in_flight(self) -> None:
        """Async mode: let the parameter replies still being sent leave before an update.

        NOTE: replies are sent without a copy, so updating a parameter while ZeroMQ still
        reads it would tear the value a trainer receives. A trainer that does not read its
        reply for a long time would stall everyone: past a bounded wait the update goes on.
        """
        limit = time.monotonic() + min(1.0, self.deadline_s)
        for tracker in self._in_flight:
            if tracker.done:  # NOTE: the usual case, asked without a clock or a wait
                continue
            left = limit - time.monotonic()
            if left <= 0 or not _wait(tracker, left):
                log.warning("pserver %s: a parameter reply is still being sent after %.1f s; "
                            "updating anyway (that trainer may read a mixed value)",
                            self.endpoint, min(1.0, self.deadline_s))
                break
        self._in_flight = [t for t in self._in_flight if not t.done]

    def _set_phase(self, phase: str) -> None:
        self._phase = phase
        self._phase_start = time.monotonic()
        self._warned = False

    def _complete(self, t: int) -> None:
        self.live.discard(t)
        self.completed.add(t)
        self._last_seen.pop(t, None)
        self._lost.pop(t, None)
        dropped = [name for name, blocks in self._grads.items() if blocks.pop(t, None) is not None]
        if dropped:
            log.warning("pserver %s: trainer %d completed mid-step %d; its gradients %s are "
                        "dropped", self.endpoint, t, self.step, dropped)
        self._sent_barrier.discard(t)
        self._fetched.discard(t)
        log.info("pserver %s: trainer %d completed (%d still training)", self.endpoint, t,
                 len(self.live))
        if not self.live:
            self._server.stop()
            return
        if self.sync_mode:
            self._maybe_finish_fetch()
            self._maybe_optimize()

    # -- deadlines ---------------------------------------------------------------------------

    def _tick(self) -> None:
        now = time.monotonic()
        if self._error is not None:
            if now - self._failed_at >= self.linger_s:
                raise self._error
            return
        if self._probing is not None:
            err, thread, found = self._probing
            if not thread.is_alive():
                self._probing = None
                self._fail(PServerError(str(err) + "".join(found)))
            return
        if self._lost:
            self._check_lost(now)
            if self._error is not None:
                return
        if self._first_contact is None:
            waited = now - self._phase_start
            if waited > self.first_contact_s:
                self._give_up(PServerError(
                    f"pserver {self.endpoint}: no trainer sent a message within "
                    f"{waited:.1f} s of the start (10 x FLAGS_rpc_deadline): trainer(s) "
                    f"{sorted(self.live)} never connected{self._refusals()}"))
            return
        if not self.sync_mode:
            # NOTE: oldest first: the scan stops at the first trainer heard from in time, so a
            # tick costs O(1) while every trainer speaks (not a loop over all trainers)
            silent = []
            for t, seen in self._last_seen.items():
                if now - seen <= self.deadline_s:
                    break
                silent.append(t)
            silent.sort()
            if silent:
                self._give_up(PServerError(
                    f"pserver {self.endpoint} (async): no message from trainer(s) {silent} for "
                    f"{self.deadline_s:.1f} s (FLAGS_rpc_deadline); they died or stalled"))
            return
        waited = now - self._phase_start
        # NOTE: the tick runs after every poll, i.e. up to once per message under load: the
        # sets of missing trainers are only computed once a wait is long enough to matter
        if waited <= self.barrier_s / 2 or (self._warned and waited <= self.barrier_s):
            return
        if self._phase == "send":
            missing = sorted(self.live - self._sent_barrier)
            what = "gradients and send barrier"
        else:
            missing = sorted(self.live - self._fetched)
            what = "fetch barrier"
        if not missing:
            return
        if waited > self.barrier_s:
            never = [t for t in missing if t not in self._owner]
            self._give_up(PServerError(
                f"pserver {self.endpoint}: step {self.step}: waited {waited:.1f} s for the "
                f"{what} of trainer(s) {missing} (FLAGS_rpc_deadline is "
                f"{self.deadline_s * 1000:.0f} ms); trainers done with this barrier: "
                f"{sorted(self.live - set(missing))}, completed: {sorted(self.completed)}" +
                (f"; trainer(s) {never} never connected{self._refusals()}" if never else "")))
        elif waited > self.barrier_s / 2 and not self._warned:
            self._warned = True
            log.warning("pserver %s: step %d: still waiting for the %s of trainer(s) %s after "
                        "%.1f s (deadline %.1f s)", self.endpoint, self.step, what, missing,
                        waited, self.deadline_s)

    def _refusals(self) -> str:
        """What the transport refused at the handshake, if anything (a wrong secret)."""
        n = self._server.refused_handshakes
        return (f" ({n} connection(s) were refused at their handshake: a wrong or missing "
                f"secret, $PARAFLUID_RPC_SECRET)") if n else ""

    def _give_up(self, err: PServerError) -> None:
        """A barrier timed out: ping the peers from a thread (the serving loop goes on
        answering pings: peers that time out at the same moment probe each other), then
        :meth:`_fail` with what the probe found."""
        found: list[str] = []
        thread = threading.Thread(target=lambda: found.append(self._probe_peers()),
                                  name=f"pserver {self.endpoint} probe", daemon=True)
        self._probing = (err, thread, found)
        thread.start()

    def _fail(self, err: PServerError, culprit: bool = False) -> None:
        """Give up: name the likely cause, save the state (unless this server's own update
        failed: it may be half applied), answer the held requests with the error, and linger
        (see the module docstring) before ``serve()`` raises it."""
        if self._error is not None:
            return
        text = str(err)
        if not culprit:
            path = self._emergency_save()
            if path:
                text += (f"; this pserver's state of step {self.step} is saved in {path} "
                         "(emergency checkpoint)")
        self._error = PServerError(text)
        self._error.__cause__ = err.__cause__
        self._culprit = culprit
        self._failed_at = time.monotonic()
        log.error("%s", text)
        held, self._held = self._held, []
        for req in held:
            req.reply_error(text)
            self._told.add(req.msg.trainer_id)
        self._told.update(self._lost)  # NOTE: gone: the linger waits for the others only
        self._maybe_end_linger()

    def _maybe_end_linger(self) -> None:
        """After a failure: raise it (ending ``serve()``) once no live trainer is left to
        tell. A trainer can still be told only on its open connection to this server: one
        that never spoke here, or whose connection closed, is not waited for."""
        open_links = self._server.link_addresses
        waiting = [t for t in self.live - self._told
                   if t in self._link and self._link[t][0] in open_links]
        if not waiting or self.linger_s <= 0:
            raise self._error

    def _probe_peers(self) -> str:
        """Ping the other pservers; the text naming those that do not answer (or that
        answer with an error of their own), the likely cause of a barrier timing out."""
        from .rpc import RPCClient, RPCError

        # NOTE: shorter than a trainer's probe (ps_client.probe_seconds, at least 0.6 s), so
        # that a trainer learns of this failure before it gives up on this server
        probe = min(0.5, max(0.1, self.deadline_s / 8))
        down = []
        for peer in self.peers:
            try:
                with RPCClient(peer, probe, self._secret, role="pserver") as client:
                    client.call(Kind.PING)
            except RPCError as e:
                down.append(f"{peer} ({'no answer' if isinstance(e, TimeoutError) else e})")
            except (OSError, ValueError) as e:
                down.append(f"{peer} ({e})")
        if down:
            return (f"; pserver {', '.join(down)} of this job does not answer a ping within "
                    f"{probe:.1f} s: it is down, stuck or failed, the likely cause (the "
                    "trainers waited for are held up by it)")
        if self.peers:
            return "; every other pserver of this job answers: the trainers waited for died " \
                "or stalled"
        return ""

    def _emergency_save(self) -> str | None:
        if self._emergency_save_cb is None:
            return None
        dirname = emergency_checkpoint_dir(self.checkpoint_root, self.step, self.job)
        try:
            os.makedirs(dirname, exist_ok=True)
            self._emergency_save_cb(dirname, self.step)
        except Exception as e:  # noqa: BLE001 - the failure is reported; the save is extra
            log.error("pserver %s: the emergency checkpoint in %s failed: %s: %s",
                      self.endpoint, dirname, type(e).__name__, e)
            return None
        self.emergency_path = dirname
        return dirname


class _RequestError(Exception):
    """A bad request: answered with an error, the server goes on."""


def emergency_checkpoint_dir(root: str, step: int, job: str) -> str:
    """Where a failing pserver of job ``job`` saves its state of ``step``:
    ``root/__emergency__/<job>/step_<k>`` (each pserver of the job writes its own
    ``pserver_<id>`` folder there)."""
    return os.path.join(root, EMERGENCY_DIR, job, f"step_{int(step)}")


_JOB_CHARS = re.compile(r"[^A-Za-z0-9_.-]")


def emergency_job_key(pserver_endpoints: Sequence[str]) -> str:
    """The job's folder name among emergency checkpoints: ``$PARAFLUID_JOB_ID`` (the launcher
    sets a fresh one per job), made safe as a file name; without one, ``pservers-`` and a
    hash of the job's pserver endpoints (the same for every pserver of the job)."""
    name = _JOB_CHARS.sub("_", job_id())[:64].strip(".")
    if name:
        return name
    key = ",".join(sorted({str(e) for e in pserver_endpoints if e}))
    return "pservers-" + hashlib.sha256(key.encode()).hexdigest()[:12]


def default_checkpoint_root() -> str:
    """Where a pserver may write checkpoints: ``$PARAFLUID_CHECKPOINT_ROOT``, else the
    working directory (the directory the pserver process was started in)."""
    return os.environ.get(CHECKPOINT_ROOT_ENV) or os.getcwd()


def confine_checkpoint_dir(dirname: str, root: str) -> str:
    """``dirname`` (absolute, or relative to ``root``) resolved, if it lies inside ``root``.

    Symbolic links are resolved before the check, so a link cannot lead outside. Raises
    ValueError naming both otherwise (and for an empty path or one holding a NUL byte).
    """
    if not dirname or "\0" in dirname:
        raise ValueError(f"checkpoint directory {dirname[:200]!r} is empty or holds a NUL byte")
    root = os.path.realpath(root)
    path = os.path.realpath(os.path.join(root, dirname))
    if os.path.commonpath([root, path]) != root:
        raise ValueError(f"checkpoint directory {dirname[:200]!r} is outside this pserver's "
                         f"checkpoint root {root!r} (set ${CHECKPOINT_ROOT_ENV} on the "
                         "pserver to allow another directory)")
    return path


def _wait(tracker: zmq.MessageTracker, seconds: float) -> bool:
    try:
        tracker.wait(seconds)
    except zmq.NotDone:
        return False
    return True


def _strip_trainer(name: str, trainer_id: int) -> str:
    m = _TRAINER_SUFFIX.search(name)
    return name[:m.start()] if m and int(m.group(1)) == trainer_id else name
