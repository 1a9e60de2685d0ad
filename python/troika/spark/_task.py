"""What each Spark task of troika.spark runs (on an executor): it connects to the driver's
channel, works out its rank, runs its rank under a troika-agent (troika._agent_rank) and
reports the rank's lines and outcome to the driver. The task itself never fails because its
rank did: it returns the outcome as its value, so Spark does not retry it and start the rank
again behind the driver's back (run() fails with that rank's error; an elastic job goes on
without it)."""

import dataclasses
import json
import socket
from typing import Dict, Optional

from troika._agent_rank import AgentRank, RankOptions, _cloudpickle
from troika.spark._channel import TaskChannel, encode


@dataclasses.dataclass
class TaskSettings:
    """Everything a task needs, shipped in the Spark closure."""
    driver: str              # HOST:PORT of the driver's channel
    key: str                 # the channel's key
    coordinator: str         # HOST:PORT of the job's coordinator (plaintext)
    job: str                 # the job's base name; each stage attempt's job is JOB-aATTEMPT
    token: str               # the job's token
    num_proc: int            # the ranks the job starts with
    fn: object
    args: tuple
    kwargs: dict
    env: Dict[str, str]      # over the executor's environment, for the rank
    executable: Optional[str]
    attach_timeout_s: float
    elastic: bool = False
    min_np: Optional[int] = None
    max_np: Optional[int] = None


def _executor_ip(context, index):
    """The address Spark knows this task's executor by (its block manager's host)."""
    try:
        return context.getTaskInfos()[index].address.rsplit(":", 1)[0]
    except Exception:  # noqa: BLE001 - not a barrier task: this host's own address
        return socket.gethostbyname(socket.gethostname())


def layout(hosts):
    """hosts: each task's host, in partition order. Ranks go host by host (the hosts in the
    order of their first task), each host's tasks in partition order. Returns, per task, its
    (rank, local_rank, local_size, cross_rank, cross_size), as Horovod numbers them."""
    order = []
    for h in hosts:
        if h not in order:
            order.append(h)
    ranked = sorted(range(len(hosts)), key=lambda i: (order.index(hosts[i]), i))
    result = [None] * len(hosts)
    for rank, i in enumerate(ranked):
        same = [j for j in ranked if hosts[j] == hosts[i]]
        local_rank = same.index(i)
        with_local_rank = [h for h in order if sum(1 for j in ranked if hosts[j] == h) > local_rank]
        result[i] = (rank, local_rank, len(same), with_local_rank.index(hosts[i]),
                     len(with_local_rank))
    return result


def run_task(settings: TaskSettings):
    """The body of one task: returns (index, attempt, message) where message is the outcome
    it sent the driver (or why it started no rank)."""
    from pyspark import BarrierTaskContext, TaskContext
    context = BarrierTaskContext.get() if not settings.elastic else TaskContext.get()
    index, attempt = context.partitionId(), context.attemptNumber()
    rank_holder = []
    channel = TaskChannel(settings.driver, settings.key, index, attempt,
                          on_stop=lambda: [r.stop() for r in rank_holder])
    try:
        message = _run(settings, context, index, attempt, channel, rank_holder)
        channel.send(message)
        return index, attempt, message
    finally:
        channel.close()


def _run(settings, context, index, attempt, channel, rank_holder):
    hostname = socket.gethostname()
    if not settings.elastic:
        if attempt > 0:
            # Spark re-runs every task of a barrier stage after one failed: the job's ranks
            # have gone, and starting them anew from scratch would hide the failure.
            return {"kind": "outcome", "ok": False, "rank": None, "value": None,
                    "error": "troika.spark: Spark started attempt %d of the barrier stage "
                             "after a task failed; a job is not restarted from scratch"
                             % attempt}
        ip = _executor_ip(context, index)
        hosts = [json.loads(m) for m in context.allGather(json.dumps([hostname, ip]))]
        rank, local_rank, local_size, cross_rank, cross_size = layout([h for h, _ in hosts])[index]
        host, node_rank, nnodes = hostname, rank, settings.num_proc
        rank_env = {"TROIKA_LOCAL_RANK": local_rank, "TROIKA_LOCAL_SIZE": local_size,
                    "TROIKA_DEVICE": local_rank, "HOROVOD_LOCAL_RANK": local_rank,
                    "HOROVOD_LOCAL_SIZE": local_size, "HOROVOD_CROSS_RANK": cross_rank,
                    "HOROVOD_CROSS_SIZE": cross_size}
    else:
        # Each task attempt is a host of its own, as in Horovod's elastic jobs on Spark: a
        # retried task is a new node that joins the job at its next commit.
        ip = socket.gethostbyname(hostname)
        host = "%s-t%d-a%d" % (hostname, index, attempt)
        node_rank = index if attempt == 0 and index < settings.num_proc else None
        nnodes, rank_env = settings.num_proc, {}
    options = RankOptions(
        coordinator=settings.coordinator, job="%s-a%d" % (settings.job, 0 if settings.elastic
                                                          else attempt),
        token=settings.token, nnodes=nnodes, host=host, node_rank=node_rank, data_host=ip,
        min_np=settings.min_np, max_np=settings.max_np,
        attach_timeout_s=settings.attach_timeout_s,
        env={k: str(v) for k, v in (settings.env or {}).items()}, rank_env=rank_env)
    if settings.executable:
        options.executable = settings.executable

    def on_line(stream, rank, text):
        channel.send({"kind": "line", "stream": stream, "rank": rank, "text": text})

    rank = AgentRank(settings.fn, settings.args, settings.kwargs, options, on_line=on_line)
    rank_holder.append(rank)
    rank.start()
    channel.send({"kind": "running", "host": host})
    outcome = rank.wait()
    dumps = _cloudpickle().dumps
    try:
        value = encode(outcome.value, dumps) if outcome.ok else None
    except Exception as e:  # noqa: BLE001
        outcome.ok, outcome.error = False, "the function's result cannot be pickled: %s" % e
        value = None
    # The rank fn ended as (an elastic job renumbers), else the one it started as.
    rank_now = outcome.rank if outcome.rank is not None else node_rank
    return {"kind": "outcome", "ok": outcome.ok, "rank": rank_now, "value": value,
            "error": outcome.error, "exit_code": outcome.exit_code}
