/* Raw-NCCL allreduce baseline: what flagcx's nvidia backend is measured
 * against. One process per GPU, as flagcx runs its ranks (NCCL picks other
 * transports between processes than between threads of one process, so the
 * two are not interchangeable); BASELINE_THREADS=1 runs one thread per GPU
 * instead (nccl-tests -g N). float32 sum, out of place, sizes MIN..MAX bytes
 * by FACTOR, WARMUP + ITERS per size timed with CUDA events on each GPU's
 * stream; the time is the slowest GPU's. Prints FlagCX's line per size:
 *   Comm size: <bytes> bytes; Elapsed time: <sec> sec; Algo bandwidth: <x> GB/s; Bus bandwidth: <y> GB/s
 * Build: gcc -O2 -I/usr/local/cuda/include nccl_allreduce.c -L/usr/local/cuda/lib64 -lcudart -lnccl -lpthread
 * Usage: nccl_allreduce NGPUS MIN MAX FACTOR WARMUP ITERS */
#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK(cmd, ok, what)                                                   \
    do {                                                                       \
        int r_ = (int)(cmd);                                                   \
        if (r_ != ok) {                                                        \
            fprintf(stderr, "%s failed: %d at %s:%d\n", what, r_, __FILE__, __LINE__); \
            exit(1);                                                           \
        }                                                                      \
    } while (0)
#define CUDA(cmd) CHECK(cmd, cudaSuccess, #cmd)
#define NCCL(cmd) CHECK(cmd, ncclSuccess, #cmd)

static int ngpus, warmup, iters, factor;
static long long lo, hi;
static ncclUniqueId id;
static float ms[64][64]; /* [size index][gpu] */
static pthread_barrier_t bar;
static int use_threads;

/* Between processes the barrier is a pipe per rank: each rank writes a byte
 * to the parent and waits for the parent's byte back. */
static int up[64][2], down[64][2];
static void barrier(int rank) {
    char c = 0;
    if (use_threads) {
        pthread_barrier_wait(&bar);
        return;
    }
    if (write(up[rank][1], &c, 1) != 1 || read(down[rank][0], &c, 1) != 1) exit(1);
}

static void *rank_main(void *arg) {
    int rank = (int)(long)arg;
    CUDA(cudaSetDevice(rank));
    ncclComm_t comm;
    NCCL(ncclCommInitRank(&comm, ngpus, id, rank));
    cudaStream_t s;
    CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t start, stop;
    CUDA(cudaEventCreate(&start));
    CUDA(cudaEventCreate(&stop));
    void *send, *recv;
    CUDA(cudaMalloc(&send, hi));
    CUDA(cudaMalloc(&recv, hi));
    CUDA(cudaMemset(send, 0, hi));
    int k = 0;
    for (long long bytes = lo; bytes <= hi; bytes *= factor, k++) {
        size_t count = bytes / 4;
        for (int i = 0; i < warmup; i++)
            NCCL(ncclAllReduce(send, recv, count, ncclFloat32, ncclSum, comm, s));
        CUDA(cudaStreamSynchronize(s));
        barrier(rank);
        CUDA(cudaEventRecord(start, s));
        for (int i = 0; i < iters; i++)
            NCCL(ncclAllReduce(send, recv, count, ncclFloat32, ncclSum, comm, s));
        CUDA(cudaEventRecord(stop, s));
        CUDA(cudaEventSynchronize(stop));
        CUDA(cudaEventElapsedTime(&ms[k][rank], start, stop));
    }
    CUDA(cudaFree(send));
    CUDA(cudaFree(recv));
    NCCL(ncclCommDestroy(comm));
    if (!use_threads) { /* hand this rank's times to the parent */
        if (write(up[rank][1], ms, sizeof ms) != (ssize_t)sizeof ms) exit(1);
    }
    return NULL;
}

static int nsizes(void) {
    int k = 0;
    for (long long bytes = lo; bytes <= hi; bytes *= factor) k++;
    return k;
}

/* run_processes forks one child per GPU before anything touches CUDA, and
 * relays the barriers: every child's byte up, then a byte down to each. */
static void run_processes(void) {
    pid_t pid[64];
    for (int r = 0; r < ngpus; r++) {
        if (pipe(up[r]) || pipe(down[r])) exit(1);
        if ((pid[r] = fork()) == 0) {
            /* Nothing of NCCL or CUDA exists before the fork: rank 0 makes
             * the id (and hosts its bootstrap root); the parent relays it. */
            if (r == 0) {
                NCCL(ncclGetUniqueId(&id));
                if (write(up[0][1], &id, sizeof id) != (ssize_t)sizeof id) exit(1);
            } else if (read(down[r][0], &id, sizeof id) != (ssize_t)sizeof id) {
                exit(1);
            }
            rank_main((void *)(long)r);
            _exit(0);
        }
    }
    if (read(up[0][0], &id, sizeof id) != (ssize_t)sizeof id) { fprintf(stderr, "rank 0 died\n"); exit(1); }
    for (int r = 1; r < ngpus; r++)
        if (write(down[r][1], &id, sizeof id) != (ssize_t)sizeof id) exit(1);
    char c;
    for (int k = 0; k < nsizes(); k++) {
        for (int r = 0; r < ngpus; r++)
            if (read(up[r][0], &c, 1) != 1) { fprintf(stderr, "rank %d died\n", r); exit(1); }
        for (int r = 0; r < ngpus; r++)
            if (write(down[r][1], &c, 1) != 1) exit(1);
    }
    static float each[64][64];
    for (int r = 0; r < ngpus; r++) {
        size_t got = 0;
        while (got < sizeof each) {
            ssize_t n = read(up[r][0], (char *)each + got, sizeof each - got);
            if (n <= 0) { fprintf(stderr, "rank %d died\n", r); exit(1); }
            got += n;
        }
        for (int k = 0; k < 64; k++) ms[k][r] = each[k][r];
        int st;
        waitpid(pid[r], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) { fprintf(stderr, "rank %d failed\n", r); exit(1); }
    }
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: %s NGPUS MIN MAX FACTOR WARMUP ITERS\n", argv[0]);
        return 2;
    }
    ngpus = atoi(argv[1]);
    lo = atoll(argv[2]);
    hi = atoll(argv[3]);
    factor = atoi(argv[4]);
    warmup = atoi(argv[5]);
    iters = atoi(argv[6]);
    if (ngpus < 1 || ngpus > 64 || lo < 4 || hi < lo || factor < 2 || iters < 1) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    use_threads = getenv("BASELINE_THREADS") && strcmp(getenv("BASELINE_THREADS"), "1") == 0;
    if (use_threads) {
        NCCL(ncclGetUniqueId(&id));
        pthread_barrier_init(&bar, NULL, ngpus);
        pthread_t th[64];
        for (int r = 0; r < ngpus; r++)
            pthread_create(&th[r], NULL, rank_main, (void *)(long)r);
        for (int r = 0; r < ngpus; r++)
            pthread_join(th[r], NULL);
    } else {
        run_processes();
    }
    int k = 0;
    for (long long bytes = lo; bytes <= hi; bytes *= factor, k++) {
        float worst = 0;
        for (int r = 0; r < ngpus; r++)
            if (ms[k][r] > worst) worst = ms[k][r];
        double sec = worst / 1e3 / iters;
        double algbw = bytes / sec / 1e9;
        printf("Comm size: %lld bytes; Elapsed time: %.9f sec; Algo bandwidth: %.4f GB/s; Bus bandwidth: %.4f GB/s\n",
               bytes, sec, algbw, algbw * 2.0 * (ngpus - 1) / ngpus);
    }
    return 0;
}
