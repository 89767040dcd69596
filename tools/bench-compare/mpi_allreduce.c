/* MPI_Allreduce timing in the shape of nccl-tests: float32 sum, sizes from
 * MIN to MAX bytes by FACTOR, WARMUP + ITERS per size, the time is the max
 * over ranks of the average per iteration. One line per size:
 *   <bytes> <time_us> <busbw_GBps>
 * Usage: mpi_allreduce MIN MAX FACTOR WARMUP ITERS */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (argc != 6) {
        if (rank == 0) fprintf(stderr, "usage: %s MIN MAX FACTOR WARMUP ITERS\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    long long lo = atoll(argv[1]), hi = atoll(argv[2]);
    int factor = atoi(argv[3]), warmup = atoi(argv[4]), iters = atoi(argv[5]);
    float *send = malloc(hi), *recv = malloc(hi);
    for (long long i = 0; i < hi / 4; i++) send[i] = (float)(i % 7);
    for (long long bytes = lo; bytes <= hi; bytes *= factor) {
        int count = (int)(bytes / 4);
        for (int i = 0; i < warmup; i++)
            MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = 0; i < iters; i++)
            MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double dt = (MPI_Wtime() - t0) / iters, worst;
        MPI_Reduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            double busbw = (double)bytes / worst / 1e9 * 2.0 * (n - 1) / n;
            printf("%lld %.2f %.3f\n", bytes, worst * 1e6, busbw);
            fflush(stdout);
        }
    }
    free(send);
    free(recv);
    MPI_Finalize();
    return 0;
}
