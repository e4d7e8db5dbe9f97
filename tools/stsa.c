/* stsa.c — the command-line tool: dispatches to the subcommands. */
#include <stdio.h>
#include <string.h>

#include "cli_backends.h"
#include "commands.h"
#include "stsa.h"
#include "wait_policy.h"

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: stsa <command> [options]\n"
      "\n"
      "commands:\n"
      "  demo                 run the main job on the built-in workload\n"
      "  peak [--threads T]   measure this machine's fp32 FMA peak\n"
      "  bench dense|sparse|svg ...  benchmarks (stsa bench --help)\n"
      "  run ...              attention on dumped Q/K/V (stsa run --help); with\n"
      "                       --dist over the ranks of mpirun\n"
      "  plot ...             pictures of plans, attention, reports (stsa plot --help)\n"
      "  version              print the library version (also -V, --version)\n"
      "\n"
      "Every command answers -h/--help; options take their value as --opt VALUE or\n"
      "--opt=VALUE.\n"
      "\n"
      "environment: STSA_BACKEND=<backend> forces a backend, one of:\n");
  cli_print_backends(f, 15);
  char here[256];
  fprintf(f, "             (this machine runs: %s",
          cli_backend_names(here, sizeof here, 1, " "));
#ifdef STSA_AMX_EMULATION
  fprintf(f, "; amx: the tile unit emulated in C, a test build");
#endif
  fprintf(f, ")\n"
             "             STSA_FORCE_PORTABLE=1 forces the portable C path.\n"
             "             OMP_WAIT_POLICY: the tool runs OpenMP passive (idle threads\n"
             "             sleep) unless this or GOMP_SPINCOUNT is set.\n");
}

int main(int argc, char **argv) {
  cli_wait_passive(argv);
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
    usage(stdout);
    return 0;
  }
  if (!strcmp(cmd, "version") || !strcmp(cmd, "--version") || !strcmp(cmd, "-V")) {
    printf("stsa %s\n", stsa_version_string());
    return 0;
  }
  if (!strcmp(cmd, "peak"))
    return cmd_peak(argc - 1, argv + 1);
  if (!strcmp(cmd, "bench"))
    return cmd_bench(argc - 1, argv + 1);
  if (!strcmp(cmd, "demo"))
    return cmd_demo(argc - 1, argv + 1);
  if (!strcmp(cmd, "run"))
    return cmd_run(argc - 1, argv + 1);
  if (!strcmp(cmd, "plot"))
    return cmd_plot(argc - 1, argv + 1);
  fprintf(stderr, "stsa: unknown command '%s'\n\n", cmd);
  usage(stderr);
  return 2;
}
