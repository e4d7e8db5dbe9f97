/*
 * mpi_alltoall.c — what the projection in docs/benchmarks.md needs from the
 * network: the time of one MPI_Alltoall over all ranks for per-peer blocks
 * from 8 bytes to 32 MiB (median of repetitions, barrier before each), as
 * JSON lines on rank 0. The smallest block gives the latency, the largest
 * the bandwidth per rank (bytes each rank sends to the others / time).
 *
 *   mpirun -np 2 --mca btl tcp,self build/stsa_bench_alltoall [max_mib]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, P;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  const size_t max_block = (size_t)(argc > 1 ? atoi(argv[1]) : 32) << 20;
  char *send = malloc(max_block * (size_t)P), *recv = malloc(max_block * (size_t)P);
  if (!send || !recv) {
    fprintf(stderr, "rank %d: out of memory for %zu-byte blocks\n", rank, max_block);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  memset(send, rank, max_block * (size_t)P);
  enum { REPS = 9 };
  for (size_t block = 8; block <= max_block; block *= 8) {
    double t[REPS];
    const int reps = block >= (8u << 20) ? 5 : REPS;
    for (int r = 0; r < reps; r++) {
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      MPI_Alltoall(send, (int)block, MPI_BYTE, recv, (int)block, MPI_BYTE,
                   MPI_COMM_WORLD);
      double dt = MPI_Wtime() - t0, worst = 0;
      MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      t[r] = worst;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_double);
    const double med = t[reps / 2];
    const double bytes = (double)block * (P - 1); /* each rank sends this much away */
    if (rank == 0)
      printf("{\"ranks\": %d, \"block_bytes\": %zu, \"alltoall_us\": %.2f, "
             "\"gbytes_per_s_per_rank\": %.3f}\n",
             P, block, med * 1e6, med > 0 ? bytes / med / 1e9 : 0.0);
  }
  free(send);
  free(recv);
  MPI_Finalize();
  return 0;
}
