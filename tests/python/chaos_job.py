"""A Horovod-Elastic-style PyTorch job under chaos, for tests/python/run_chaos_test.py and
bench/chaos_soak.py: `troikarun -np 4 --min-np 2 --max-np 6 --max-restarts K -- python3
chaos_job.py --seed S --plan-dir DIR`.

It trains a small float64 MLP with momentum SGD through hvd.DistributedOptimizer, committing
hvd.elastic.TorchState every --commit-every steps. Step s trains on global batch s (GLOBAL
samples, the same whatever the job's size): rank r of n takes its n-th share, and the averaged
gradient is the global batch's, so the weights after --steps steps equal those of one process
training on the same batches (`--reference` prints those), whatever the membership did.

The seed draws a plan of --kills kills: kill i fires once, at the first step >= its step, at its
point of that step, on the rank whose number is its victim modulo the job's size then, and only
while the job has more than --min-np ranks, at most once per generation (so that no kill can
end the job: two ranks of one generation deciding at once from its size could both fire and
leave fewer than the minimum, which aborts the job as it should). The points:
  before_grad  before backward()
  allreduce    after backward(): the gradients' allreduces are in flight
  optimizer    in the optimizer, after its allreduces completed and before the update
  commit       inside state.commit(), after the rank saved its state and before the commit's
               barrier
  reset        in the reset callback, while the survivors of a change sync (a second loss
               during recovery)
The rank SIGKILLs itself; a file DIR/kill.<i> (made with O_EXCL) records that kill i fired, so a
step replayed after a restore does not fire it again, and DIR/gen.<g> that generation g had its
kill (decided under a lock on DIR/lock; a rank that still sees an older generation than one
that had a kill does not fire: its view of the size is out of date).

Rank 0 prints "step S size N generation G" after every step; every rank prints "done steps S
size N weights W" at the end (W: the parameters as hexadecimal floats), and with --reference
the one process prints "reference weights W".
"""

import argparse
import fcntl
import os
import random
import signal
import time

import torch

GLOBAL = 60  # samples per step: divisible by every size from 1 to 6
POINTS = ("before_grad", "allreduce", "optimizer", "commit", "reset")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--commit-every", type=int, default=2)
    p.add_argument("--kills", type=int, default=4)
    p.add_argument("--min-np", type=int, default=2)
    p.add_argument("--step-sleep-ms", type=float, default=40)
    p.add_argument("--plan-dir", default="", help="where fired kills are recorded")
    p.add_argument("--reference", action="store_true", help="train as one process, no Troika")
    return p.parse_args()


def plan(seed, steps, kills):
    """[(step, point, victim)]: the seed's kills."""
    rng = random.Random(seed)
    return [(rng.randrange(2, max(3, steps * 3 // 4)), rng.choice(POINTS), rng.randrange(6))
            for _ in range(kills)]


def data(seed, steps):
    g = torch.Generator().manual_seed(seed)
    inputs = torch.randn(steps, GLOBAL, 8, generator=g, dtype=torch.float64)
    truth = torch.randn(8, 1, generator=g, dtype=torch.float64)
    targets = torch.tanh(inputs @ truth) + 0.1 * torch.randn(steps, GLOBAL, 1, generator=g,
                                                             dtype=torch.float64)
    return inputs, targets


def make_model(seed):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 6), torch.nn.Tanh(), torch.nn.Linear(6, 1))
    return model.double()


def weights(model):
    return " ".join(float(v).hex() for p in model.parameters() for v in p.detach().flatten())


def reference(args):
    inputs, targets = data(args.seed, args.steps)
    model = make_model(args.seed)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for s in range(args.steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(inputs[s]), targets[s]).backward()
        opt.step()
    print("reference weights", weights(model), flush=True)


def main():
    args = parse_args()
    torch.set_num_threads(1)
    if args.reference:
        return reference(args)
    import troika
    import troika.torch as hvd

    hvd.init()
    inputs, targets = data(args.seed, args.steps)
    model = make_model(args.seed)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=model.named_parameters())
    kills = plan(args.seed, args.steps, args.kills)

    def generation_may_lose_a_rank(generation):
        """Under DIR/lock: whether no kill fired in `generation` or a later one; if so, records
        that one fires in it now."""
        for name in os.listdir(args.plan_dir):
            if name.startswith("gen.") and int(name[4:]) >= generation:
                return False
        os.close(os.open(os.path.join(args.plan_dir, "gen.%d" % generation),
                         os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True

    def maybe_die(point, step):
        # The generation and its size, read together (a change between the reads: no kill).
        generation, size = troika.generation(), hvd.size()
        if size <= args.min_np or troika.generation() != generation:
            return
        for i, (at, where, victim) in enumerate(kills):
            if where != point or step < at or hvd.rank() != victim % size:
                continue
            fired = os.path.join(args.plan_dir, "kill.%d" % i)
            with open(os.path.join(args.plan_dir, "lock"), "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                if os.path.exists(fired):
                    continue  # fired already (this step is being replayed)
                if not generation_may_lose_a_rank(generation):
                    return
                os.close(os.open(fired, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            print("kill %d: rank %d of %d at step %d, %s" % (i, hvd.rank(), size, step, point),
                  flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

    class State(hvd.elastic.TorchState):
        def save(self):
            super().save()
            maybe_die("commit", self.step)

    state = State(model, opt, step=0)
    state.register_reset_callbacks([lambda: maybe_die("reset", state.step)])

    @hvd.elastic.run
    def train(state):
        while state.step < args.steps:
            s, n, r = state.step, hvd.size(), hvd.rank()
            share = slice(r * GLOBAL // n, (r + 1) * GLOBAL // n)
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(inputs[s][share]), targets[s][share])
            maybe_die("before_grad", s)
            loss.backward()
            maybe_die("allreduce", s)
            opt.synchronize()
            maybe_die("optimizer", s)
            with opt.skip_synchronize():
                opt.step()
            state.step += 1
            if hvd.rank() == 0:
                print("step %d size %d generation %d" % (state.step, n, troika.generation()),
                      flush=True)
            if state.step % args.commit_every == 0:
                state.commit()
            time.sleep(args.step_sleep_ms / 1000)  # a stand-in for a bigger model's compute

    train(state)
    print("done steps %d size %d weights %s" % (state.step, hvd.size(), weights(model)),
          flush=True)


if __name__ == "__main__":
    main()
