#!/usr/bin/env python3
"""CPU time per thread of a command and every process it starts, by process and thread name.

    python3 bench/thread_cpu.py -- build/agent/troikarun -np 4 -- python3 train.py

Runs the command, samples /proc every --interval seconds (user + system time of every thread
of the command's process tree; the last sample of a thread before it ends counts), passes the
command's output through, and prints at the end one line per (process name, thread name) with
the CPU seconds summed over every process of that name, largest first, and the total; a
process's main thread is marked "(main)". Troika
names its threads (troika-send, troika-receive, troika-execute, troika-finish, troika-timers);
gRPC's and Gloo's threads keep their own names or the process's. Used for the control
plane's CPU cost in docs/design/schedules.md; the figures miss what a thread used in its last
--interval before ending.
"""

import argparse
import collections
import os
import subprocess
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")


def children_of():
    kids = collections.defaultdict(list)
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                kids[ppid].append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    return kids


def tree(root):
    kids, out, todo = children_of(), [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(kids[pid])
    return out


def sample(root, last):
    for pid in tree(root):
        try:
            with open("/proc/%d/comm" % pid) as f:
                process = f.read().strip()
            for tid in os.listdir("/proc/%d/task" % pid):
                with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                    stat = f.read()
                thread = stat[stat.index("(") + 1:stat.rindex(")")]
                if int(tid) == pid:
                    thread += " (main)"
                fields = stat.rsplit(")", 1)[1].split()
                seconds = (int(fields[11]) + int(fields[12])) / TICK
                last[(pid, int(tid))] = (process, thread, seconds)
        except (OSError, ValueError):
            pass  # ended between listing and reading


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--interval", type=float, default=0.5)
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("no command (give it after --)")
    child = subprocess.Popen(command)
    last = {}
    while child.poll() is None:
        sample(child.pid, last)
        time.sleep(args.interval)
    totals = collections.defaultdict(float)
    for process, thread, seconds in last.values():
        totals[(process, thread)] += seconds
    print("\nthread_cpu: CPU seconds by process and thread name (summed over processes):")
    for (process, thread), seconds in sorted(totals.items(), key=lambda kv: -kv[1]):
        if seconds >= 0.01:
            print("%9.2f  %-20s %s" % (seconds, process, thread))
    print("%9.2f  total" % sum(totals.values()))
    sys.exit(child.returncode)


if __name__ == "__main__":
    main()
