/* MPI_Put timing in the shape of OSU's osu_put_latency and osu_put_bw:
 * rank 0 puts into rank 1's window (MPI_Win_allocate, passive target,
 * MPI_Win_lock_all), sizes from MIN to MAX bytes by FACTOR. Latency: one
 * MPI_Put then MPI_Win_flush (the bytes are at the target) per iteration;
 * bandwidth: WINDOW puts then one flush per iteration. One line per size:
 *   <bytes> <latency_us> <bandwidth_GBps>
 * Usage: mpi_put MIN MAX FACTOR WARMUP ITERS */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW 64

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (argc != 6 || n != 2) {
        if (rank == 0) fprintf(stderr, "usage: mpirun -np 2 %s MIN MAX FACTOR WARMUP ITERS\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    long long lo = atoll(argv[1]), hi = atoll(argv[2]);
    int factor = atoi(argv[3]), warmup = atoi(argv[4]), iters = atoi(argv[5]);
    char *src = malloc(hi), *base;
    memset(src, 7, hi);
    MPI_Win win;
    MPI_Win_allocate((MPI_Aint)hi, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    MPI_Win_lock_all(0, win);
    for (long long bytes = lo; bytes <= hi; bytes *= factor) {
        double lat = 0, bw = 0;
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0) {
            for (int i = -warmup; i < iters; i++) {
                if (i == 0) lat = MPI_Wtime();
                MPI_Put(src, (int)bytes, MPI_BYTE, 1, 0, (int)bytes, MPI_BYTE, win);
                MPI_Win_flush(1, win);
            }
            lat = (MPI_Wtime() - lat) / iters;
            double t0 = 0;
            for (int i = -warmup; i < iters; i++) {
                if (i == 0) t0 = MPI_Wtime();
                for (int w = 0; w < WINDOW; w++)
                    MPI_Put(src, (int)bytes, MPI_BYTE, 1, 0, (int)bytes, MPI_BYTE, win);
                MPI_Win_flush(1, win);
            }
            bw = (double)bytes * WINDOW * iters / (MPI_Wtime() - t0) / 1e9;
            printf("%lld %.2f %.3f\n", bytes, lat * 1e6, bw);
            fflush(stdout);
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }
    MPI_Win_unlock_all(win);
    MPI_Win_free(&win);
    free(src);
    MPI_Finalize();
    return 0;
}
