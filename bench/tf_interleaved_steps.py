#!/usr/bin/env python3
"""The TensorFlow synthetic benchmark's step four ways in the same processes, in alternating
blocks: one rank of a troikarun job (bench/tf_bench.py --interleaved starts it).

- plain:    the step without communication (each rank its own model): the floor.
- troika:   DistributedGradientTape, one allreduce per gradient as produced (the default).
- troika g1: DistributedGradientTape(groups=1): one grouped allreduce after the backward.
- mwms:     tf.distribute.MultiWorkerMirroredStrategy over the same processes (TF_CONFIG from
            the rank and --mwms-ports), as bench/mwms_synthetic_benchmark.py runs it.

Every variant has its own model of the example's (--model, --batch-size, ...) and runs
--settle untimed steps, then --steps timed steps per block; the blocks rotate, --blocks rounds.
On a shared machine whose load swings within minutes, blocks of a second or two each see the
same machine. Rank 0 prints per variant the median wall and CPU (this process, every thread)
milliseconds per timed step, the voluntary context switches per timed step of this process's
threads by name, and the median of the settling steps' milliseconds.

Why settle: each switch to another variant changes the job's step. A Troika job then ends its
steady-state schedule and negotiates until it has found and published the new step's (a few
steps, with buckets more), which a training job pays once, not every 20 steps. The settling
steps are each variant's first steps after a switch, untimed for all four alike; their own
time is printed (`settle`), so that cost stays in view. --settle 0 times them too.
"""

import argparse
import json
import os
import sys
import time

import numpy as np
import tensorflow as tf
import keras

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples",
                                "tensorflow2"))
import tensorflow2_synthetic_benchmark as synthetic  # noqa: E402


def thread_switches():
    """{thread name: voluntary context switches so far}, summed over this process's threads
    of that name (Linux; {} elsewhere)."""
    out = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open("/proc/self/task/%s/comm" % tid) as f:
                name = f.read().strip()
            with open("/proc/self/task/%s/status" % tid) as f:
                status = f.read()
        except OSError:  # the thread ended
            continue
        count = int(status.split("\nvoluntary_ctxt_switches:")[1].split()[0])
        out[name] = out.get(name, 0) + count
    return out


def main():
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--mwms-ports", required=True, help="one localhost port per rank, a,b,...")
    p.add_argument("--steps", type=int, default=20, help="steps per block")
    p.add_argument("--blocks", type=int, default=6, help="rounds of blocks")
    p.add_argument("--settle", type=int, default=10,
                   help="untimed steps at the start of every block (see the docstring)")
    ours, rest = p.parse_known_args()
    args = synthetic.parse_args(rest)
    synthetic.configure(args)
    import troika.tensorflow as hvd  # after TensorFlow

    hvd.init()
    size, rank = hvd.size(), hvd.rank()
    ports = ours.mwms_ports.split(",")
    os.environ["TF_CONFIG"] = json.dumps({
        "cluster": {"worker": ["localhost:%s" % port for port in ports[:size]]},
        "task": {"type": "worker", "index": rank}})
    strategy = tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=tf.distribute.experimental.CommunicationOptions(
            implementation=tf.distribute.experimental.CommunicationImplementation.RING))
    data, target = synthetic.synthetic_batch(args)

    def tape_step(distributed, groups=None):
        model = synthetic.make_model(args.model, args.image_size)
        opt = keras.optimizers.SGD(0.01 * size)
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

        @tf.function
        def step():
            with tf.GradientTape() as tape:
                loss = loss_fn(target, model(data, training=True))
            if distributed:
                tape = hvd.DistributedGradientTape(tape, groups=groups)
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            return loss
        return step

    with strategy.scope():
        model = synthetic.make_model(args.model, args.image_size)
        opt = keras.optimizers.SGD(0.01 * size)
        opt.build(model.trainable_variables)
    per_example = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    def replica_step():
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(per_example(target, model(data, training=True)),
                                              global_batch_size=args.batch_size * size)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    @tf.function
    def mwms_step():
        return strategy.experimental_local_results(strategy.run(replica_step))[0]

    variants = {"plain": tape_step(False), "troika": tape_step(True),
                "troika g1": tape_step(True, 1), "mwms": mwms_step}
    for step in variants.values():
        for _ in range(args.num_warmup_batches):
            float(step())
    wall = {name: [] for name in variants}
    settle = {name: [] for name in variants}
    cpu = {name: [] for name in variants}
    switches = {name: {} for name in variants}
    names = list(variants)
    for b in range(ours.blocks):
        shift = b % len(names)
        for name in names[shift:] + names[:shift]:
            step = variants[name]
            if ours.settle:
                t = time.perf_counter()
                for _ in range(ours.settle):
                    loss = step()
                float(loss)
                settle[name].append((time.perf_counter() - t) / ours.settle * 1e3)
            before = thread_switches()
            t, c = time.perf_counter(), time.process_time()
            for _ in range(ours.steps):
                loss = step()
            float(loss)
            wall[name].append((time.perf_counter() - t) / ours.steps * 1e3)
            cpu[name].append((time.process_time() - c) / ours.steps * 1e3)
            for thread, count in thread_switches().items():
                switches[name][thread] = (switches[name].get(thread, 0)
                                          + count - before.get(thread, 0))
    if rank == 0:
        steps = ours.steps * ours.blocks
        print("model %s, batch %d per rank, %d ranks, %d blocks of %d steps per variant (after %d "
              "untimed)" % (args.model, args.batch_size, size, ours.blocks, ours.steps,
                            ours.settle), flush=True)
        for name in names:
            busy = sorted(((n / steps, thread) for thread, n in switches[name].items()
                           if n >= steps), reverse=True)
            print("%-9s: %.2f ms/step (%s), cpu %.2f ms/step; switches/step: %s%s"
                  % (name, np.median(wall[name]), " ".join("%.1f" % w for w in wall[name]),
                     np.median(cpu[name]),
                     ", ".join("%s %.0f" % (thread, n) for n, thread in busy),
                     "; settle %.2f ms/step" % np.median(settle[name]) if ours.settle else ""),
                  flush=True)


if __name__ == "__main__":
    main()
