/* bench/distributed/mpi_allreduce.c - the reference for ember's collectives: MPI_Allreduce (sum,
 * float32, in place) called directly, over 4 KB .. 256 MB, measured the way
 * bench/distributed/allreduce.lua measures ember.dist.all_reduce: per size, rounds of back-to-back
 * calls lasting at least ~30 ms each; the median round gives the time per call. Rank 0
 * prints one JSON line per size: bytes, us, algbw and busbw in GB/s (busbw = algbw x
 * 2(n-1)/n, as nccl-tests). Built by bench/distributed/run.sh with mpicc.
 *   mpirun -np 2 mpi_allreduce [-r rounds] [-m max_bytes] [-b]   (-b: MPI_Iallreduce+Wait) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  int rounds = 7, nonblocking = 0;
  long max_bytes = 256L << 20;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-r") && i + 1 < argc) rounds = atoi(argv[++i]);
    else if (!strcmp(argv[i], "-m") && i + 1 < argc) max_bytes = atol(argv[++i]);
    else if (!strcmp(argv[i], "-b")) nonblocking = 1;
  }
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  float *buf = malloc(max_bytes);
  for (long i = 0; i < max_bytes / 4; i++) buf[i] = 1.0f / (1 + i % 7);
  double *t = malloc(sizeof(double) * rounds);
  for (long bytes = 4096; bytes <= max_bytes; bytes *= 4) {
    int n = (int)(bytes / 4);
    /* calls per round: about 30 ms worth, from a timed warm-up call, the same on all ranks */
    MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double t0 = now();
    MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double one = now() - t0;
    MPI_Allreduce(MPI_IN_PLACE, &one, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    int calls = one > 0 ? (int)(0.03 / one) : 100;
    if (calls < 1) calls = 1;
    if (calls > 200) calls = 200;
    for (int r = 0; r < rounds; r++) {
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = now();
      for (int c = 0; c < calls; c++) {
        if (nonblocking) {
          MPI_Request q;
          MPI_Iallreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &q);
          MPI_Wait(&q, MPI_STATUS_IGNORE);
        } else {
          MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        }
      }
      t[r] = (now() - t0) / calls;
    }
    qsort(t, rounds, sizeof *t, cmp);
    double sec = t[rounds / 2], algbw = bytes / sec / 1e9;
    if (rank == 0)
      printf("{\"impl\":\"%s\",\"ranks\":%d,\"bytes\":%ld,\"us\":%.2f,\"algbw\":%.3f,\"busbw\":%.3f,\"calls\":%d}\n",
             nonblocking ? "mpi_iallreduce" : "mpi", size, bytes, sec * 1e6, algbw, algbw * 2 * (size - 1) / size,
             calls);
    fflush(stdout);
  }
  free(buf);
  free(t);
  MPI_Finalize();
  return 0;
}
