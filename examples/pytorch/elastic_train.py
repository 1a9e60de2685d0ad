#!/usr/bin/env python3
"""Elastic training written against horovod.torch.elastic: it goes on when ranks are lost.

    troikarun -np 4 --nproc-per-node 2 --min-np 2 -- python3 examples/pytorch/elastic_train.py

Kill a rank (or a node's troika-agent) with SIGKILL while it trains: the other ranks raise
HorovodInternalError, go back to their last commit, go on as the job's next generation (fewer
ranks, renumbered), take rank 0's state, and finish the epochs (docs/elastic.md). The data is
synthetic (a linear regression target plus noise, generated here from --seed); an
ElasticSampler shards what is left of each epoch over the ranks in the job, so no sample is
trained twice in an epoch whatever the membership did. The learning rate scales with the
number of ranks, reset callbacks keep it so.

With `troikarun -np 2 --min-np 2 --max-np 4`, run the troika-agent command troikarun prints
while it trains: at the next commit every rank raises HostsUpdatedInterrupt (nothing is lost)
and the job goes on with 4 ranks, the new ones starting from rank 0's state.

Prints, per rank: "reset: rank R of N at MS (restored to epoch E batch B, T batches in all; it
had trained U)" after each membership change (MS: unix time in ms; U - T batches were lost),
and at the end "done epochs E size N weights H" (H: a hash of the model's bits). With --pid-dir it writes its pid to DIR/pid.<TROIKA_RANK>
once it has trained a few batches (for tests).
"""

import argparse
import hashlib
import os
import signal
import time

import torch

import troika
import troika.torch as hvd


def parse_args():
    p = argparse.ArgumentParser(description="elastic training (hvd.elastic API)",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--num-samples", type=int, default=4096)
    p.add_argument("--batch-size", type=int, default=16, help="per-rank batch size")
    p.add_argument("--lr", type=float, default=0.01, help="learning rate for one rank")
    p.add_argument("--commit-every", type=int, default=5, help="batches between commits")
    p.add_argument("--batch-sleep-ms", type=float, default=5,
                   help="a stand-in for a bigger model's compute, per batch")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--pid-dir", default="", help="write pid.<TROIKA_RANK> here")
    p.add_argument("--min-generation", type=int, default=0,
                   help="train on past --epochs until the job is at this generation (tests)")
    p.add_argument("--fail-at-restore", type=int, default=-1, metavar="MEMBER",
                   help="tests: the rank that started as MEMBER exits 1 when it restores its "
                        "commit after a loss, while the others attach the next generation")
    p.add_argument("--fail-at-reset", type=int, default=-1, metavar="MEMBER",
                   help="tests: the rank that started as MEMBER is killed (SIGKILL) in its "
                        "reset callback in generation 2, while the others sync rank 0's state")
    return p.parse_args()


def main():
    args = parse_args()
    hvd.init()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(args.seed)
    inputs = torch.randn(args.num_samples, 32, generator=g)
    truth = torch.randn(32, 1, generator=g)
    targets = inputs @ truth + 0.01 * torch.randn(args.num_samples, 1, generator=g)
    dataset = torch.utils.data.TensorDataset(inputs, targets)

    model = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size())
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=args.seed)
    # epoch, batch: where training is; total: batches trained in all (commits go by it).
    state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, batch=0, total=0)
    member = int(os.environ.get("TROIKA_RANK", "0"))  # the rank this process started as
    progress = {"total": 0, "wrote_pid": False}  # batches this rank trained in all

    def on_reset():
        if member == args.fail_at_reset and troika.generation() == 2:
            print("killed at reset", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        for group in optimizer.param_groups:
            group["lr"] = args.lr * hvd.size()
        print("reset: rank %d of %d at %d (restored to epoch %d batch %d, %d batches in all; "
              "it had trained %d)" % (hvd.rank(), hvd.size(), int(time.time() * 1000),
                                      state.epoch, state.batch, state.total, progress["total"]),
              flush=True)

    state.register_reset_callbacks([on_reset])
    if member == args.fail_at_restore:
        def fail():
            print("failing at restore", flush=True)
            os._exit(1)
        state.restore = fail

    @hvd.elastic.run
    def train(state):
        # Every rank of a generation has the same epoch and generation: all stop together.
        while state.epoch < args.epochs or troika.generation() < args.min_generation:
            if state.batch == 0:
                state.sampler.set_epoch(state.epoch)
            # The rest of the epoch, sharded over the ranks in the job now.
            loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size,
                                                 sampler=state.sampler)
            for i, (x, y) in enumerate(loader):
                optimizer.zero_grad()
                torch.nn.functional.mse_loss(model(x), y).backward()
                optimizer.step()
                state.sampler.record_batch(i, args.batch_size)
                state.batch += 1
                state.total += 1
                progress["total"] = state.total
                time.sleep(args.batch_sleep_ms / 1000)
                if state.total % args.commit_every == 0:
                    state.commit()
                if args.pid_dir and not progress["wrote_pid"] and state.total >= 3:
                    path = os.path.join(args.pid_dir, "pid.%d" % member)
                    with open(path + ".tmp", "w") as f:
                        f.write("%d\n" % os.getpid())
                    os.rename(path + ".tmp", path)
                    progress["wrote_pid"] = True
            state.batch = 0
            state.epoch += 1

    train(state)
    digest = hashlib.sha256()
    for tensor in model.state_dict().values():
        digest.update(tensor.numpy().tobytes())
    print("done epochs %d size %d weights %s" % (state.epoch, hvd.size(),
                                                 digest.hexdigest()[:16]), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
