#!/bin/sh
# Multi-node figures from the network-namespace harness (as tests/integration/netns_test.cc):
# a bridge namespace joins three "hosts" made with `ip netns` — c (the coordinator), a and b
# (a troika-agent with RANKS ranks each) — over veth links, and rank 0 of the job prints
# troika-bench's table (--job_rank: the ranks are the agents' processes). Each data plane in
# turn, in the same namespaces:
#   hierarchical  the default (auto): shared memory within a host, Gloo between hosts
#   flat          HOROVOD_HIERARCHICAL_ALLREDUCE=0 HOROVOD_HIERARCHICAL_ALLGATHER=0: Gloo
#   gloo          TROIKA_TRANSPORT=gloo
# The "raw" column of troika-bench is its raw communicator over shm, which the namespaces
# share (they share /dev/shm): a one-host baseline, not a multi-node one; read the Troika
# column. The namespaces are hosts for Troika (their agents' --host) but share this machine's
# CPUs and memory, and the veth links are memory copies in the kernel: the figures compare
# data planes, they are not a network's.
#
# Needs root and the `ip` tool. Usage (from the repository root, after building troika-bench,
# troika-agent and troika-coordinator):
#   sudo scripts/netns_bench.sh [BUILD_DIR] [troika-bench flags...]
# e.g. scripts/netns_bench.sh build --ops allreduce,allgather --min_bytes 64MiB \
#        --max_bytes 64MiB --repeat 3
set -eu
build=${1:-build}
[ $# -gt 0 ] && shift
ranks=${RANKS:-2}
p=tkb$$
dir=$(mktemp -d /tmp/troika-netns-bench-XXXXXX)
cleanup() {
  for pid in $(cat "$dir"/pids 2>/dev/null); do kill "$pid" 2>/dev/null || true; done
  for ns in c a b br; do ip netns del "$p-$ns" 2>/dev/null || true; done
}
trap cleanup EXIT
ip netns add "$p-br"
ip -n "$p-br" link add br0 type bridge
ip -n "$p-br" link set br0 up
octet=1
for h in c a b; do
  ip netns add "$p-$h"
  ip link add "$p$h" netns "$p-$h" type veth peer name "p$h" netns "$p-br"
  ip -n "$p-br" link set "p$h" master br0 up
  ip -n "$p-$h" addr add "10.232.0.$octet/24" dev "$p$h"
  ip -n "$p-$h" link set "$p$h" up
  ip -n "$p-$h" link set lo up
  octet=$((octet + 1))
done
ip netns exec "$p-c" "$build/coordinator/troika-coordinator" --listen=10.232.0.1:7070 \
  --plaintext >"$dir/coordinator.log" 2>&1 &
echo $! >>"$dir/pids"
sleep 1
run() {  # $1: label, $2: environment for the agents, then troika-bench's flags
  label=$1 env=$2
  shift 2
  octet=2
  for h in a b; do
    ip netns exec "$p-$h" env TROIKA_JOB_TOKEN="$p-token" $env "$build/agent/troika-agent" \
      --plaintext=true \
      --coordinator=10.232.0.1:7070 --job="bench-$label" --nnodes=2 --nproc-per-node="$ranks" \
      --node_rank=$((octet - 2)) --host="host-$h" --data_host="10.232.0.$octet" -- \
      "$build/bench/troika-bench" --job_rank --transport=shm --log_level=info \
      --store_dir="$dir/store-$label" "$@" >"$dir/$label-$h.out" 2>"$dir/$label-$h.err" &
    echo $! >>"$dir/agent-$label"
    octet=$((octet + 1))
  done
  for pid in $(cat "$dir/agent-$label"); do wait "$pid" || echo "agent $pid of $label failed"; done
  echo "== $label ($env), 2 hosts x $ranks ranks, load $(cut -d' ' -f1-3 /proc/loadavg)"
  grep -h "data plane of 'data/" "$dir/$label-a.err" "$dir/$label-b.err" | head -1 || true
  cat "$dir/$label-a.out"
}
run hierarchical "TROIKA_TRANSPORT=auto" "$@"
run flat "HOROVOD_HIERARCHICAL_ALLREDUCE=0 HOROVOD_HIERARCHICAL_ALLGATHER=0" "$@"
run gloo "TROIKA_TRANSPORT=gloo" "$@"
