"""torch.distributed through FlagCX's torch plugin on flagcx-go's libflagcx.so.

Run by tools/capi-gpu/run.sh under torch.distributed.run, one process per
GPU. The default process group is torch's NCCL backend (the reference);
a second group uses the "flagcx" backend that FlagCX's torch plugin
registers. Every collective on the flagcx group is checked element by
element against values computed on the host (integers in float32, so every
sum is exact); then, unless --no-timing, all_reduce is timed on both groups,
alternating, and rank 0 prints one line per size:

    allreduce <bytes> flagcx <GB/s> nccl <GB/s> ratio <flagcx/nccl>

Exit status 1 when a result is wrong; timing never fails the run here (run.sh
compares the ratios).
"""

import argparse
import os
import sys
import time

import torch
import flagcx  # noqa: F401  FlagCX's torch plugin: registers the "flagcx" backend
import torch.distributed as dist

RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
LOCAL = int(os.environ["LOCAL_RANK"])
FAILED = []


def check(what, got, want):
    if not torch.equal(got.cpu(), want.cpu()):
        bad = (got.cpu() != want.cpu()).nonzero()
        i = tuple(bad[0].tolist())
        FAILED.append(what)
        print(f"FAIL rank {RANK}: {what}: {bad.shape[0]} elements differ, first at {i}: "
              f"{got.cpu()[i].item()} want {want.cpu()[i].item()}", flush=True)
    else:
        print(f"ok   rank {RANK}: {what}", flush=True)


def value(rank, n, dev):
    """Rank rank's tensor of n elements: distinct integers, exact in float32."""
    return (torch.arange(n, device=dev, dtype=torch.float32) % 1000) + 1000.0 * (rank + 1)


def exactness(group, dev, n):
    total = sum(value(r, n, "cpu") for r in range(WORLD))

    x = value(RANK, n, dev)
    dist.all_reduce(x, op=dist.ReduceOp.SUM, group=group)
    check(f"all_reduce sum {n}", x, total)

    x = value(RANK, n, dev)
    dist.all_reduce(x, op=dist.ReduceOp.MAX, group=group)
    check(f"all_reduce max {n}", x, value(WORLD - 1, n, "cpu"))

    out = torch.empty(WORLD * n, device=dev)
    dist.all_gather_into_tensor(out, value(RANK, n, dev), group=group)
    check(f"all_gather_into_tensor {n}", out, torch.cat([value(r, n, "cpu") for r in range(WORLD)]))

    outs = [torch.empty(n, device=dev) for _ in range(WORLD)]
    dist.all_gather(outs, value(RANK, n, dev), group=group)
    check(f"all_gather (list) {n}", torch.cat(outs), torch.cat([value(r, n, "cpu") for r in range(WORLD)]))

    # reduce_scatter: block j of rank r's input is value(r) + j.
    inp = torch.cat([value(RANK, n, dev) + j for j in range(WORLD)])
    out = torch.empty(n, device=dev)
    dist.reduce_scatter_tensor(out, inp, op=dist.ReduceOp.SUM, group=group)
    check(f"reduce_scatter_tensor {n}", out, total + WORLD * RANK)

    root = 1 % WORLD
    x = value(RANK, n, dev)
    dist.broadcast(x, src=root, group=group)
    check(f"broadcast from {root} {n}", x, value(root, n, "cpu"))

    # all_to_all: block j of rank r's input goes to rank j.
    inp = torch.cat([value(RANK, n, dev) + 100000.0 * j for j in range(WORLD)])
    out = torch.empty(WORLD * n, device=dev)
    dist.all_to_all_single(out, inp, group=group)
    check(f"all_to_all_single {n}", out, torch.cat([value(r, n, "cpu") + 100000.0 * RANK for r in range(WORLD)]))

    # send/recv around a ring, both directions at once.
    nxt, prv = (RANK + 1) % WORLD, (RANK - 1) % WORLD
    got = torch.empty(n, device=dev)
    reqs = dist.batch_isend_irecv([
        dist.P2POp(dist.isend, value(RANK, n, dev), nxt, group=group),
        dist.P2POp(dist.irecv, got, prv, group=group),
    ])
    for r in reqs:
        r.wait()
    check(f"send/recv ring {n}", got, value(prv, n, "cpu"))
    if WORLD == 2:
        x = value(RANK, n, dev) if RANK == 0 else torch.empty(n, device=dev)
        if RANK == 0:
            dist.send(x, 1, group=group)
        else:
            dist.recv(x, 0, group=group)
            check(f"send/recv 0->1 {n}", x, value(0, n, "cpu"))
    torch.cuda.synchronize()


def bus_bw(nbytes, seconds):
    return nbytes / seconds / 1e9 * 2 * (WORLD - 1) / WORLD


def timing(groups, dev, sizes, iters, rounds):
    """Times all_reduce on each group, alternating rounds; best round each."""
    for nbytes in sizes:
        x = torch.ones(nbytes // 4, device=dev)
        best = {name: float("inf") for name in groups}
        for name, g in groups.items():  # warm up
            for _ in range(3):
                dist.all_reduce(x, group=g)
        for _ in range(rounds):
            for name, g in groups.items():
                dist.barrier(group=groups["nccl"], device_ids=[LOCAL])
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(iters):
                    dist.all_reduce(x, group=g)
                torch.cuda.synchronize()
                best[name] = min(best[name], (time.perf_counter() - t0) / iters)
        if RANK == 0:
            fl, nc = bus_bw(nbytes, best["flagcx"]), bus_bw(nbytes, best["nccl"])
            print(f"allreduce {nbytes} flagcx {fl:.1f} nccl {nc:.1f} ratio {fl / nc:.4f}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-timing", action="store_true")
    ap.add_argument("--sizes", default="67108864,268435456", help="all_reduce sizes in bytes to time")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()

    torch.cuda.set_device(LOCAL)
    dev = torch.device("cuda", LOCAL)
    dist.init_process_group("nccl", device_id=dev)
    fl = dist.new_group(ranks=list(range(WORLD)), backend="cuda:flagcx")
    for n in (1, 1031, 1 << 20):
        exactness(fl, dev, n)
    if WORLD < 2 and not args.no_timing:
        print("timing skipped: one rank moves nothing (bus bandwidth 0); run on two or more GPUs", flush=True)
    elif not args.no_timing:
        timing({"nccl": dist.group.WORLD, "flagcx": fl}, dev,
               [int(s) for s in args.sizes.split(",")], args.iters, args.rounds)
    dist.destroy_process_group()
    if FAILED:
        print(f"FAIL rank {RANK}: {len(FAILED)} checks failed", flush=True)
        sys.exit(1)
    print(f"PASS rank {RANK}: every result exact", flush=True)


if __name__ == "__main__":
    main()
