// troikarun --help (declared in troikarun_options.h).

#include "agent/launcher/troikarun_options.h"

namespace troika::agent {

const char kTroikarunUsage[] =
    R"(troikarun: starts N ranks of a Troika training program, on this machine or on the hosts -H
names, and supervises them. It takes horovodrun's options (docs/horovodrun.md).

Usage: troikarun -np N [options] [--] COMMAND [ARGS...]

Options:
  -np N, --num-proc N      number of ranks to start (required; 1 to 1024)
  --nproc-per-node P       ranks per troika-agent: troikarun starts N/P agents on this machine
                           (node ranks 0 .. N/P-1), each starting and relaying P ranks, as
                           N/P nodes of P ranks would run on a cluster; N must be a multiple
                           of P; default N (one agent)
  --min-np M, --min-num-proc M
                           an elastic job (docs/elastic.md): when ranks are lost (exit
                           non-zero, killed, their agent killed) and at least M remain, the
                           job goes on with the survivors, renumbered (its next generation),
                           instead of aborting; ranks use troika::elastic::Run to carry on
                           from their last commit; troikarun exits 0 if the job finished
                           (its last generation's ranks all shut down and exited 0);
                           default 0: not elastic (any lost rank or agent ends the job; with
                           --host-discovery-script: -np)
  --max-np X, --max-num-proc X
                           an elastic job's maximum: troika-agents started for the job while it
                           runs (new or returning nodes, docs/elastic.md) are admitted at
                           its next commit, up to X ranks; default -np (with
                           --host-discovery-script: 1024)
  --max-restarts R         an elastic job: each agent starts a rank that failed again, up to
                           R times; it rejoins at the job's next commit; default 0
  --coordinator HOST:PORT  the Troika coordinator the agents join (unix:PATH too); default: a
                           coordinator started inside troikarun on 127.0.0.1 (a free port),
                           which lives as long as troikarun, in plaintext; the agents reach
                           a given one as TROIKA_TLS_CA, TROIKA_TLS_CERT, TROIKA_TLS_KEY or
                           TROIKA_PLAINTEXT=1 in troikarun's environment say
  --fusion-threshold-mb MB  the embedded coordinator's fusion threshold: allreduces are fused
                           into one transfer up to MB MiB (0: no fusion); default
                           $HOROVOD_FUSION_THRESHOLD (bytes) if set, else 64
  --cycle-time-ms MS       the embedded coordinator's cycle time: how long a rank holds its
                           requests to send those submitted together in one message (a
                           wait or poll sends them at once), and a ready allreduce may wait
                           for others still being submitted, to fuse with them (0: neither);
                           default $HOROVOD_CYCLE_TIME (ms) if set, else 1
                           (both as horovodrun's; with --coordinator, give them to that
                           coordinator: troika-coordinator --help)
  --schedules on|off       steady-state schedules in the embedded coordinator: once the job's
                           steps repeat, ranks run them without a coordinator round trip
                           per collective until one deviates (docs/protocol.md,
                           Schedules); default on (off: every collective negotiated,
                           as Horovod does)
  --timeline FILE          the embedded coordinator writes the job's timeline (a Chrome
                           trace of every tensor's negotiation and every rank's phases,
                           docs/timeline.md) to FILE for the whole run; default
                           $HOROVOD_TIMELINE if set (as horovodrun; DYNAMIC, horovodrun's
                           word for timelines started later, writes none), else none
  --job NAME               job name; default troikarun-<pid of troikarun>
  --attach_timeout DURATION  how long every rank of the job has to attach (its agent started,
                           the other nodes reached); an elastic job goes on without ranks that
                           did not attach in time if at least --min-np did, any other job
                           fails; default 60s
  --grace_period DURATION  time between SIGTERM and SIGKILL when ranks are stopped, e.g. 5s,
                           500ms, 1m (a plain number means seconds); default 5s
  --log_level LEVEL        log level of troikarun, its coordinator and its agents: debug,
                           info, warning or error (any case; horovodrun's --log-level, whose
                           TRACE and FATAL read as debug and error, also sets the ranks'
                           HOROVOD_LOG_LEVEL); default warning
  --config-file FILE       horovodrun's YAML file of the options below (params, autotune,
                           timeline, stall_check, library_options, logging); options given on
                           the command line win over it; an unknown key is an error
  -cb, --check-build       print the frameworks, controllers and tensor operations this build
                           has, and exit
  -v, --version            print Troika's version and exit
  -h, --help               print this help and exit

Hosts (a job across hosts, docs/hosts.md):
  -H, --hosts H1:S1,H2:S2  the job's hosts and their slots, the most ranks each runs ("H1"
                           alone: 1 slot); ranks fill the hosts in order, and troikarun starts
                           one troika-agent on each host used, over ssh unless it is this
                           machine; -np must not exceed the slots; not with --nproc-per-node
  -hostfile, --hostfile FILE  the hosts from FILE, one a line: "host slots=N", "host:N" or
                           "host" (1 slot); "#" starts a comment
  -p, --ssh-port PORT      ssh's port on every host; default ssh's
  -i, --ssh-identity-file FILE  ssh's private key; default ssh's
  --start-timeout SECONDS  how long the hosts have to answer troikarun's checks before it
                           starts anything; default $HOROVOD_START_TIMEOUT, else 30
  -x NAME[=VALUE]          sets NAME for every rank on every host, to VALUE or to troikarun's
                           own value of NAME; may be repeated
  --network-interfaces NAMES  the data plane's interfaces on every host (comma-separated;
                           also --network-interface NAME, repeated); default: those every
                           host has
  --output-filename DIR    also writes each rank's lines, without their "[RANK] ", to
                           DIR/rank.N/stdout and DIR/rank.N/stderr (N zero-padded to the
                           width of the highest rank, as horovodrun)
  --tls-cert PEM, --tls-key PEM, --tls-ca PEM  the embedded coordinator serves TLS with this
                           certificate (it must name the addresses the agents reach it at:
                           troikarun's address on the hosts' network, and 127.0.0.1) and
                           key; every agent verifies it with the CA --tls-ca (given to the
                           ranks as TROIKA_TLS_CA); default: plaintext, the job's random
                           token admitting agents and ranks (docs/hosts.md)
  --tls-client-ca PEM      with --tls-cert: the coordinator requires client certificates
                           signed by this CA (mutual TLS); the agents present TROIKA_TLS_CERT
                           and TROIKA_TLS_KEY from troikarun's environment
  --verbose                troikarun says what it does: hosts checked, interfaces chosen,
                           commands run
  --host-discovery-script SCRIPT  an elastic job on the hosts SCRIPT prints ("host" or
                           "host:slots" lines), run again and again: new hosts get an agent,
                           hosts gone are drained; --min-np defaults to N and --max-np to
                           1024 (as many as the hosts have); not with -H or --hostfile
  --slots-per-host N       the slots of a host SCRIPT prints without them; default 1
  --elastic-timeout SECONDS  the same as --attach_timeout; an elastic job's default is
                           $HOROVOD_ELASTIC_TIMEOUT when set
  --reset-limit N          an elastic job fails at a change of its ranks once N happened (0:
                           at the first); default no limit
  --blacklist-cooldown-range MIN MAX  a host whose ranks failed is left out for MIN to MAX
                           seconds, longer after each failure (1 <= MIN <= MAX <= 3600);
                           default: for good

The embedded coordinator (with --coordinator, give these to that coordinator instead):
  --cache-capacity N       response-cache entries: a request repeated travels as a small id;
                           0: no cache; default 1024
  --autotune               tunes the fusion threshold and the cycle time while the job runs
                           (docs/autotune.md); either one given (flag or $HOROVOD_*) stays put
  --autotune-log-file FILE  the CSV of every configuration tried
  --autotune-warmup-samples N, --autotune-steps-per-sample N,
  --autotune-bayes-opt-max-samples N  samples discarded first (default 3), training steps
                           per sample (default 10), configurations tried (default 20)
  --timeline-filename FILE  the same as --timeline
  --no-stall-check         neither stall warnings nor stall shutdown
  --stall-check-warning-time-seconds S  a tensor some ranks submitted and others not for S
                           seconds is reported, naming the ranks missing; default 60
  --stall-check-shutdown-time-seconds S  such a tensor aborts the job after S seconds, if S is
                           above the warning time; default never

The ranks (set in their environment, beneath -x):
  --hierarchical-allreduce, --hierarchical-allgather (or --no-...)  across hosts, through
                           shared memory within each host and Gloo between them (1 or 0 in
                           HOROVOD_HIERARCHICAL_ALLREDUCE / _ALLGATHER); default: so when
                           some host runs several ranks
  --gloo-timeout-seconds S  the longest data-plane transfer (TROIKA_DATA_TIMEOUT); default 300
  --tcp                    NCCL over TCP only (NCCL_IB_DISABLE=1)

Accepted as what troikarun does anyway: --gloo, --disable-cache (troikarun caches no host
checks), --stall-check, --no-autotune, --no-torus-allreduce, --no-timeline-mark-cycles,
--no-mpi-threads-disable, --log-with-timestamp. Refused, each saying
why and what to do: --mpi, --jsrun, --mpi-args, --binding-args, --mpi-threads-disable,
--num-nccl-streams, --thread-affinity, --torus-allreduce, --timeline-mark-cycles,
--autotune-gaussian-process-noise, --log-without-timestamp, --prefix-output-with-timestamp.

Options may also be written -name=value or --name=value, with "-" or "_" inside names. The
command begins at the first argument that is not an option or an option's value (as with
horovodrun), or after "--"; it is passed on untouched, and COMMAND is looked up in PATH unless
it contains a "/".

troikarun runs troika-agent (from the directory troikarun itself is in) once per node rank
k with --node_rank k; the agent starts ranks k*P .. k*P+P-1 and relays their control traffic
to the coordinator on one stream (see troika-agent --help and docs/agent.md). Each rank runs
COMMAND with troikarun's environment plus:
  TROIKA_COORDINATOR  its agent's Unix socket, unix:/tmp/troika-agent-<pid>.sock
  TROIKA_JOB          the job name
  TROIKA_RANK         the rank, 0 .. N-1
  TROIKA_SIZE         N
  TROIKA_LOCAL_RANK   the rank's index within its agent, 0 .. P-1
  TROIKA_LOCAL_SIZE   P
  TROIKA_DEVICE       equal to TROIKA_LOCAL_RANK: the local device (GPU) to use
  TROIKA_HOST         this machine's host name (gethostname(), or "localhost")
and what horovodrun --gloo sets, with each agent as a node:
  HOROVOD_RANK, HOROVOD_SIZE              TROIKA_RANK, TROIKA_SIZE
  HOROVOD_LOCAL_RANK, HOROVOD_LOCAL_SIZE  TROIKA_LOCAL_RANK, TROIKA_LOCAL_SIZE
  HOROVOD_CROSS_RANK  the agent's node rank k, 0 .. N/P-1
  HOROVOD_CROSS_SIZE  N/P
  HOROVOD_HOSTNAME    TROIKA_HOST
(With the default P = N: 0 .. N-1, N, 0 and 1, as horovodrun -np N on one host. With P < N
the agents stand for nodes of one host: the local and cross numbers are theirs, while
hvd.local_rank() and hvd.cross_rank() group the ranks by host name: 0 .. N-1 and 0.)
Ranks read stdin from /dev/null. Every line a rank writes is printed with a "[RANK] " prefix,
its stdout on troikarun's stdout and its stderr on troikarun's stderr; a '\r' ends a piece of
a line too (a progress bar redrawing its line), printed at once, as horovodrun does. An
unfinished last line is printed, with a newline added, when the rank exits. Each rank leads
its own process group, and signals reach the whole group.

Supervision: when a rank exits with a non-zero code or is killed by a signal, its agent
reports it at once ("troika-agent: rank 2 exited with code 1; stopping ..."), and the
coordinator aborts the job on every agent: each sends SIGTERM to its ranks, and SIGKILL to
those still running after the grace period, and prints why ("troika-agent: job aborted:
rank 2 on HOST exited with code 1"). troikarun then prints a one-line summary naming the
cause. SIGINT or SIGTERM sent to troikarun is forwarded to every agent, which forwards it to
its ranks, with the same SIGKILL after the grace period; a second SIGINT or SIGTERM sends
SIGKILL at once. Ranks exiting 0 are never a failure. Ranks that shut down may join the
job again in the same processes (init after shutdown, as with horovodrun --gloo; not with
--min-np): it forms anew once every rank joined again (docs/agent.md).

Exit status:
  0      every rank exited with code 0
  C      the rank whose failure aborted the job exited with code C (1..255)
  128+S  that rank was killed by signal S, or troikarun itself received signal S before any
         rank failed (SIGINT: 130, SIGTERM: 143)
  1      troikarun or an agent failed (e.g. the embedded coordinator could not start, the
         coordinator was lost), or the job was aborted for a reason other than a rank's exit
  2      invalid command line
  126    COMMAND could not be executed
  127    COMMAND was not found

Examples:
  troikarun -np 4 -- ./troika-example-train --steps 100
  troikarun -np 4 --nproc-per-node 2 -- ./troika-example-train --steps 100
  troikarun -np 8 -H server1:4,server2:4 python3 train.py
)";

}  // namespace troika::agent
