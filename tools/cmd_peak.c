/* cmd_peak.c — `stsa peak`: the fp32 FMA peak for 1 and for all threads. */
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "cli_util.h"
#include "commands.h"

static void peak_usage(void) {
  printf("usage: stsa peak [--threads T] [--json]\n"
         "Measures this machine's fp32 FMA peak (GFLOP/s) on 1 thread and on T threads\n"
         "(default: all CPUs). --json prints one JSON line.\n");
}

int cmd_peak(int argc, char **argv) {
  int threads = omp_get_num_procs();
  int json = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--threads"))
      threads = (int)cli_int(argc, argv, &i, 1, 1024);
    else if (!strcmp(argv[i], "--json"))
      json = 1;
    else {
      cli_help_version(argv[i], peak_usage);
      cli_unknown("peak", argv[i], "stsa peak --help");
    }
  }
  if (!stsa_cpu_has_avx2())
    cli_die("peak: this CPU has no AVX2+FMA; the probe needs it");
  double one = cli_fma_peak(1), all = cli_fma_peak(threads);
  if (json)
    printf("{\"peak_gflops_1\": %.1f, \"peak_gflops\": %.1f, \"threads\": %d}\n", one,
           all, threads);
  else
    printf("fp32 FMA peak: %.1f GFLOP/s on 1 thread, %.1f GFLOP/s on %d threads\n", one,
           all, threads);
  return 0;
}
