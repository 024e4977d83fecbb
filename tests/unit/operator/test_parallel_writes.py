"""The commit step writes a long run of actions of one kind with several writers at once (interleaved in the pass's
thread, :mod:`lyra.operator.interleaving`): each object's actions stay in order and with one writer, each run of a
kind ends before the next begins, a refusal stays with its object, and an error that ends the pass (the fence closed,
429) stops every writer before its next write. The outcome is the one the same decision gets written one by one."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import greenlet
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from lyra.core.model import LoanState
from lyra.operator.actions import Action, CreatePod, Decision, Emit, PatchStatus, SetNodeState
from lyra.operator.commit import PARALLEL_FROM, WRITERS, Cluster, Outcome
from lyra.operator.interleaving import wait_readable
from lyra.operator.isolation import Backoff, key_of, subject_of
from lyra.operator.leader import LeadershipLostError
from lyra.operator.world import ObjectRef

JOBS = 12
PODS_PER_JOB = 4


def job(j: int) -> ObjectRef:
    return ObjectRef("TrainingJob", "ml", f"j{j:02d}", f"uid-j{j:02d}")


def busy_decision() -> Decision:
    """Runs long enough to be written in parallel: node states, statuses, pods (several per job), Events."""
    nodes = [SetNodeState(f"t{n:02d}", LoanState.LOANED, (), {}, "1", "lent") for n in range(PARALLEL_FROM)]
    statuses = [PatchStatus(job(j), {"phase": "Running"}) for j in range(JOBS)] + [
        PatchStatus(job(j), {"phase": "Running"}) for j in range(JOBS, PARALLEL_FROM)
    ]
    pods = [
        CreatePod(ObjectRef("Pod", "ml", f"j{j:02d}-w{w}"), {"metadata": {"name": f"j{j:02d}-w{w}"}}, owner=job(j))
        for j in range(JOBS)
        for w in range(PODS_PER_JOB)
    ]
    events = [Emit(job(j), "Normal", "Started", "started") for j in range(PARALLEL_FROM)]
    return Decision((*nodes, *statuses, *pods, *events))


@dataclass
class Recording(Cluster):
    """The commit step with each write recorded (start and end, in one sequence) instead of sent, and the writers
    (greenlets) that wrote each object's actions of each kind; ``refuse`` says which writes the API refuses and with
    what status; ``gate`` runs inside the write (to hold writers together)."""

    refuse: Callable[[Action], int | None] = lambda _: None
    gate: Callable[[Action], None] = lambda _: None
    sequence: list[tuple[str, Action]] = field(default_factory=list)
    writers_of: dict[str, set[greenlet.greenlet]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        super().__init__(client.ApiClient(), Backoff())

    def _apply(self, action: Action, now: float) -> str:
        self._fenced(action)
        with self.lock:
            self.sequence.append(("start", action))
            self.writers_of.setdefault(f"{type(action).__name__} {key_of(subject_of(action))}", set()).add(
                greenlet.getcurrent()
            )
        try:
            self.gate(action)
            status = self.refuse(action)
            if status is not None:
                error = ApiException(status=status, reason="Refused")
                error.body = json.dumps({"kind": "Status", "reason": "Forbidden", "message": "refused by the test"})
                raise error
        finally:
            with self.lock:
                self.sequence.append(("end", action))
        return ""

    def _event(self, action: Emit, now: float) -> None:
        self._fenced(action)


def written(cluster: Recording) -> list[Action]:
    return [action for what, action in cluster.sequence if what == "start"]


def test_writers_write_at_once_each_object_in_order_and_each_run_before_the_next() -> None:
    """The first WRITERS pod writes each wait for an answer that comes only once all of them are waiting: unless they
    are in flight at once, the first one's wait times out and the pass fails."""
    held: list[socket.socket] = []
    waiting = [0, 0]  # now, most at once

    def gate(action: Action) -> None:
        if not isinstance(action, CreatePod) or len(held) >= WRITERS:
            return
        answer, server = socket.socketpair()
        answer.settimeout(5)
        held.append(server)
        if len(held) == WRITERS:  # the last one in: every held write gets its answer
            for peer in held:
                peer.sendall(b"x")
        waiting[0] += 1
        waiting[1] = max(waiting)
        wait_readable(answer)
        waiting[0] -= 1
        assert answer.recv(1) == b"x"
        answer.close()

    cluster = Recording(gate=gate)
    decision = busy_decision()
    outcome = cluster.apply(decision, 0.0)
    assert outcome.applied == len(decision.actions)
    assert sorted(map(id, written(cluster))) == sorted(map(id, decision.actions))  # each once
    order = [type(a) for a in decision.actions]
    position = {id(a): i for i, a in enumerate(decision.actions)}
    ended: set[int] = set()
    for what, action in cluster.sequence:  # every action of an earlier run has ended before a later one starts
        if what == "end":
            ended.add(position[id(action)])
        else:
            first_of_run = order.index(type(action))
            assert all(i in ended for i in range(first_of_run))
    for j in range(JOBS):  # one object's pods: in order, by one writer
        pods = [a for a in written(cluster) if isinstance(a, CreatePod) and a.owner == job(j)]
        assert [p.ref.name for p in pods] == [f"j{j:02d}-w{w}" for w in range(PODS_PER_JOB)]
    assert waiting[1] == WRITERS
    assert all(len(writers) == 1 for writers in cluster.writers_of.values())  # within a run, one writer an object
    assert len(set().union(*cluster.writers_of.values())) > 1
    for peer in held:
        peer.close()


def outcome_of(writers: int, refuse: Callable[[Action], int | None]) -> tuple[Outcome, list[str]]:
    cluster = Recording(refuse=refuse)
    cluster.writers = writers
    outcome = cluster.apply(busy_decision(), 0.0)
    return outcome, sorted(f"{type(a).__name__} {subject_of(a).key}" for a in written(cluster))


def refuse_some(action: Action) -> int | None:
    """Job j03's second pod (quota), job j07's status and node t05 (a conflict: deferred)."""
    if isinstance(action, CreatePod) and action.ref.name == "j03-w1":
        return 403
    if isinstance(action, PatchStatus) and action.ref.name == "j07":
        return 422
    return 409 if isinstance(action, SetNodeState) and action.node == "t05" else None


def test_a_refusal_stays_with_its_object_and_the_outcome_is_the_one_written_one_by_one() -> None:
    parallel, tried = outcome_of(WRITERS, refuse_some)
    alone, tried_alone = outcome_of(1, refuse_some)
    assert parallel == alone
    assert tried == tried_alone
    assert [f.subject.name for f in parallel.failures] == ["j07", "j03"]  # in the decision's order
    assert "CreatePod ml/j03" in tried  # its first pod was written, its second refused ...
    assert sum(1 for t in tried if t == "CreatePod ml/j03") == 2  # ... and its last two skipped
    assert sum(1 for t in tried if t == "CreatePod ml/j07") == 0  # its status refused: no pod of it is written
    assert sum(1 for t in tried if t == "Emit ml/j03") == 0  # no Event says what did not happen
    assert parallel.skipped == 2 + PODS_PER_JOB + 2
    assert parallel.applied == len(busy_decision().actions) - 3 - parallel.skipped


@pytest.mark.parametrize("ends", ["fence", "429"])
def test_an_error_that_ends_the_pass_stops_every_writer_and_no_later_run_begins(ends: str) -> None:
    closed = threading.Event()
    closing_at: list[int] = []
    cluster: Recording

    def refuse(action: Action) -> int | None:
        with cluster.lock:
            pods_started = sum(1 for what, a in cluster.sequence if what == "start" and isinstance(a, CreatePod))
            if pods_started == PARALLEL_FROM + 5 and not closed.is_set():
                closed.set()
                closing_at.append(len(cluster.sequence))
                return 429 if ends == "429" else None
        return None

    cluster = Recording(refuse=refuse)
    cluster.fence = lambda: not closed.is_set()
    with pytest.raises(ApiException if ends == "429" else LeadershipLostError):
        cluster.apply(busy_decision(), 0.0)
    assert closing_at
    assert not [a for a in written(cluster) if isinstance(a, Emit)]  # the run after it never began
    pods = [a for a in written(cluster) if isinstance(a, CreatePod)]
    assert len(pods) < JOBS * PODS_PER_JOB
    if ends == "fence":  # every write asks the fence: none began after it closed but those already past it
        late = [a for what, a in cluster.sequence[closing_at[0] :] if what == "start"]
        assert len(late) < WRITERS


def test_short_runs_and_one_writer_write_one_by_one_in_the_pass_thread() -> None:
    cluster = Recording()
    decision = Decision(tuple(busy_decision().actions[: PARALLEL_FROM - 1]))
    cluster.apply(decision, 0.0)
    assert set().union(*cluster.writers_of.values()) == {greenlet.getcurrent()}
    one = Recording()
    one.writers = 1
    one.apply(busy_decision(), 0.0)
    assert set().union(*one.writers_of.values()) == {greenlet.getcurrent()}
    assert written(one) == list(busy_decision().actions)
