"""torch.distributed's NCCL backend, with whatever libnccl.so.2 the process
loaded: flagcx-go's drop-in (build/lib/libnccl.so.2, under LD_PRELOAD) or
NVIDIA's. Run by tools/nccl-dropin/run.sh under torch.distributed.run, one
process per GPU (or alone: one rank).

Prints which libnccl.so.2 file the process mapped (from /proc/self/maps) and
torch.cuda.nccl.version(); checks every collective element by element
against values computed on the host (integers in float32, so every sum is
exact): all_reduce, all_gather, reduce_scatter, broadcast, all_to_all,
send/recv, coalesced all_reduces and, where torch exposes it
(torch.distributed._make_nccl_premul_sum), ReduceOp.PREMUL_SUM with a host
factor and a device factor (ncclRedOpCreatePreMulSum's host and device
scalars); then, unless --no-timing, times
all_reduce and rank 0 prints one line per size:

    allreduce <bytes> busbw <GB/s>

Exit status 1 when a result is wrong or --want-lib is not what was mapped.
"""

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist

RANK = int(os.environ.get("RANK", "0"))
WORLD = int(os.environ.get("WORLD_SIZE", "1"))
LOCAL = int(os.environ.get("LOCAL_RANK", "0"))
FAILED = []


def check(what, got, want):
    if torch.equal(got.cpu(), want.cpu()):
        print(f"ok   rank {RANK}: {what}", flush=True)
        return
    bad = (got.cpu() != want.cpu()).nonzero()
    i = tuple(bad[0].tolist())
    FAILED.append(what)
    print(f"FAIL rank {RANK}: {what}: {bad.shape[0]} elements differ, first at {i}: "
          f"{got.cpu()[i].item()} want {want.cpu()[i].item()}", flush=True)


def value(rank, n, dev):
    """Rank rank's input: small integers, exact in float32 sums."""
    return (torch.arange(n, dtype=torch.float32, device=dev) % 1000) + rank * 3


def nccl_libs():
    with open("/proc/self/maps") as f:
        return sorted({line.split()[-1] for line in f if "libnccl" in line})


def exactness(dev, n):
    ranks = range(WORLD)
    x = value(RANK, n, dev)
    dist.all_reduce(x)
    check("all_reduce sum", x, sum(value(r, n, dev) for r in ranks))

    x = value(RANK, n, dev)
    dist.all_reduce(x, op=dist.ReduceOp.MAX)
    check("all_reduce max", x, value(WORLD - 1, n, dev))

    out = torch.empty(WORLD * n, device=dev)
    dist.all_gather_into_tensor(out, value(RANK, n, dev))
    check("all_gather", out, torch.cat([value(r, n, dev) for r in ranks]))

    out = torch.empty(n, device=dev)
    dist.reduce_scatter_tensor(out, torch.cat([value(RANK, n, dev) + b for b in ranks]))
    check("reduce_scatter", out, sum(value(r, n, dev) + RANK for r in ranks))

    x = value(RANK, n, dev)
    dist.broadcast(x, src=WORLD - 1)
    check("broadcast", x, value(WORLD - 1, n, dev))

    inp = torch.cat([value(RANK, n, dev) + 100 * b for b in ranks])
    out = torch.empty_like(inp)
    dist.all_to_all_single(out, inp)
    check("all_to_all", out, torch.cat([value(r, n, dev) + 100 * RANK for r in ranks]))

    if WORLD > 1:
        peer_to, peer_from = (RANK + 1) % WORLD, (RANK - 1) % WORLD
        got = torch.empty(n, device=dev)
        reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, value(RANK, n, dev), peer_to),
                                       dist.P2POp(dist.irecv, got, peer_from)])
        for r in reqs:
            r.wait()
        check("send/recv ring", got, value(peer_from, n, dev))

    xs = [value(RANK, n + k, dev) + k for k in range(4)]
    with dist._coalescing_manager(async_ops=True) as cm:
        for x in xs:
            dist.all_reduce(x, async_op=True)
    cm.wait()
    for k, x in enumerate(xs):
        check(f"coalesced all_reduce {k}", x, sum(value(r, n + k, dev) + k for r in ranks))
    premul_sum(dev, n)
    torch.cuda.synchronize()


def premul_sum(dev, n):
    """ReduceOp.PREMUL_SUM: torch passes a float factor to NCCL as a host
    scalar and a tensor factor as a device scalar; powers of two keep every
    sum exact."""
    make = getattr(dist, "_make_nccl_premul_sum", None)
    if make is None:
        print(f"skip rank {RANK}: torch {torch.__version__} has no _make_nccl_premul_sum", flush=True)
        return
    ranks = range(WORLD)
    x = value(RANK, n, dev)
    dist.all_reduce(x, op=make(0.5))
    check("all_reduce premul_sum host factor 0.5", x, sum(value(r, n, dev) for r in ranks) * 0.5)

    x = value(RANK, n, dev)
    dist.all_reduce(x, op=make(torch.tensor([4.0], device=dev)))
    check("all_reduce premul_sum device factor 4", x, sum(value(r, n, dev) for r in ranks) * 4)

    if WORLD == 1:
        # torch 2.11 with one rank returns reduce_scatter's input unscaled
        # for n > 1, on NVIDIA's NCCL as on the drop-in (seen on an H200):
        # there is nothing to compare.
        return
    out = torch.empty(n, device=dev)
    dist.reduce_scatter_tensor(out, torch.cat([value(RANK, n, dev) + b for b in ranks]), op=make(2.0))
    check("reduce_scatter premul_sum host factor 2", out, sum(value(r, n, dev) + RANK for r in ranks) * 2)


def bus_bw(nbytes, seconds):
    return nbytes / seconds / 1e9 * (2 * (WORLD - 1) / WORLD if WORLD > 1 else 1)


def timing(dev, sizes, iters):
    for nbytes in sizes:
        x = torch.ones(nbytes // 4, device=dev)
        for _ in range(3):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        dt = (time.perf_counter() - t0) / iters
        if RANK == 0:
            print(f"allreduce {nbytes} busbw {bus_bw(nbytes, dt):.2f}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-timing", action="store_true")
    ap.add_argument("--want-lib", default="", help="a path part the mapped libnccl.so.2 must contain")
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()
    torch.cuda.set_device(LOCAL)
    dev = torch.device("cuda", LOCAL)
    dist.init_process_group("nccl", rank=RANK, world_size=WORLD, device_id=dev,
                            init_method=None if "MASTER_ADDR" in os.environ else "tcp://127.0.0.1:29555")
    libs = nccl_libs()
    print(f"rank {RANK}: torch {torch.__version__}, nccl version {torch.cuda.nccl.version()}, mapped {libs}", flush=True)
    if args.want_lib and not any(args.want_lib in lib for lib in libs):
        FAILED.append(f"libnccl.so.2 from {args.want_lib} not mapped")
        print(f"FAIL rank {RANK}: {args.want_lib} is not among the mapped NCCL libraries", flush=True)
    for n in (1, 1000, 1 << 20):
        exactness(dev, n)
    if not args.no_timing:
        timing(dev, [64 << 20, 256 << 20], args.iters)
    dist.destroy_process_group()
    if FAILED:
        print(f"rank {RANK}: FAILED: {FAILED}", flush=True)
        sys.exit(1)
    print(f"rank {RANK}: all exact", flush=True)


if __name__ == "__main__":
    main()
