/* cmd_peak.c — `stsa peak`: the fp32 FMA peak for 1 and for all threads. */
#include <omp.h>
#include <stdio.h>

#include "cli_options.h"
#include "cli_util.h"
#include "commands.h"

typedef struct peak_opts {
  int threads, json;
} peak_opts;

static const cli_opt PEAK_OPTIONS[] = {
    {.name = "--threads",
     .metavar = "T",
     CLI_INT(peak_opts, threads, 1, 1024),
     .help = "threads of the second measurement (default: all CPUs)"},
    {.name = "--json", CLI_FLAG(peak_opts, json), .help = "print one JSON line"},
    {0}};

static void peak_usage(void) {
  printf("usage: stsa peak [--threads T] [--json]\n"
         "Measures this machine's fp32 FMA peak (GFLOP/s) on 1 thread and on T threads,\n"
         "on the widest vectors it has (AVX-512 where stsa's avx512 backend runs).\n");
  const cli_opt *const tables[1] = {PEAK_OPTIONS};
  cli_print_options(tables, 1);
}

int cmd_peak(int argc, char **argv) {
  peak_opts o = {.threads = omp_get_num_procs()};
  static const cli_command cmd = {"peak", "stsa peak --help", peak_usage};
  const cli_opt_set set = {PEAK_OPTIONS, &o};
  cli_parse(&cmd, argc, argv, 1, &set, 1);
  const int threads = o.threads, json = o.json;
  if (!stsa_backend_available(STSA_BACKEND_AVX2))
    cli_die("peak: this CPU has no AVX2+FMA; the probe needs it");
  double one = cli_fma_peak(1), all = cli_fma_peak(threads);
  const char *isa = cli_fma_peak_isa();
  if (json)
    printf("{\"peak_gflops_1\": %.1f, \"peak_gflops\": %.1f, \"threads\": %d, "
           "\"isa\": \"%s\"}\n",
           one, all, threads, isa);
  else
    printf("fp32 FMA peak (%s): %.1f GFLOP/s on 1 thread, %.1f GFLOP/s on %d threads\n",
           isa, one, all, threads);
  return 0;
}
