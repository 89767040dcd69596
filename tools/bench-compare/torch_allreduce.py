"""torch.distributed all_reduce timing in the shape of nccl-tests.

float32 sum on CPU tensors (Gloo, the default backend), sizes MIN..MAX bytes by FACTOR, WARMUP + ITERS per
size; the time is the max over ranks of the average per iteration. Prints one
line per size: <bytes> <time_us> <busbw_GBps>.
Usage: python3 torch_allreduce.py NP MIN MAX FACTOR WARMUP ITERS [cpu|cuda [gloo|nccl]]
With cuda, rank r's tensors live on GPU r (what users of mixed clusters fall
back to today: Gloo copies them through host memory). nccl runs torch's NCCL
backend instead (cuda only; tools/bench-compare/nccl-socket.sh sets the NCCL_*
variables that put it on its socket transport).
Started once per rank with FLAGCX_RANK and FLAGCX_COMM_ID=addr:port set (as
tools/hosts/hosts.sh run does), it runs that one rank and meets the others at
addr:port; NP must then equal FLAGCX_NRANKS.
"""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def rank_main(rank, n, lo, hi, factor, warmup, iters, port, device, backend, addr="127.0.0.1"):
    os.environ["MASTER_ADDR"] = addr
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dev = torch.device(f"cuda:{rank}") if device == "cuda" else torch.device("cpu")
    if device == "cuda":
        torch.cuda.set_device(dev)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    dist.init_process_group(backend, rank=rank, world_size=n)
    size = lo
    while size <= hi:
        t = torch.ones(size // 4, dtype=torch.float32, device=dev)
        for _ in range(warmup):
            dist.all_reduce(t)
        sync()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
        sync()
        dt = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64, device=dev if backend == "nccl" else "cpu")
        dist.all_reduce(dt, op=dist.ReduceOp.MAX)
        if rank == 0:
            busbw = size / dt.item() / 1e9 * 2 * (n - 1) / n
            print(f"{size} {dt.item() * 1e6:.2f} {busbw:.3f}", flush=True)
        size *= factor
    dist.destroy_process_group()


if __name__ == "__main__":
    n, lo, hi, factor, warmup, iters = (int(a) for a in sys.argv[1:7])
    device = sys.argv[7] if len(sys.argv) > 7 else "cpu"
    backend = sys.argv[8] if len(sys.argv) > 8 else "gloo"
    if backend == "nccl" and device != "cuda":
        sys.exit("torch_allreduce.py: the nccl backend needs cuda tensors (7th argument cuda)")
    if "FLAGCX_RANK" in os.environ:
        addr, _, port = os.environ["FLAGCX_COMM_ID"].rpartition(":")
        rank_main(int(os.environ["FLAGCX_RANK"]), n, lo, hi, factor, warmup, iters, int(port), device, backend, addr)
        sys.exit(0)
    port = 29500 + os.getpid() % 1000
    mp.spawn(rank_main, args=(n, lo, hi, factor, warmup, iters, port, device, backend), nprocs=n)
