/*
 * cli_util.h — what every stsa subcommand shares: error reporting, the
 * context, timing, statistics and random data (options: cli_options.h).
 * The tool (not the library) may exit().
 */
#ifndef STSA_TOOLS_CLI_UTIL_H
#define STSA_TOOLS_CLI_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "stsa.h"

/* Prints "stsa: <message>" to stderr and exits with status 2; with a die
 * hook set, hands the message to the hook instead. */
_Noreturn void cli_die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* What cli_die does with its message (without "stsa: ") instead of printing
 * it and exiting: under mpirun every rank must learn of one rank's failure
 * (dist_cli.c). The hook should not return (if it does, cli_die exits with
 * status 2). NULL restores the default. */
void cli_set_die_hook(void (*hook)(const char *msg));
/* Exits via cli_die when st is not STSA_OK, with the context's message. */
void cli_check(stsa_status st, const stsa_ctx *ctx, const char *what);

/* A context with defaults; dies with the library's message when that fails
 * (e.g. an unknown STSA_BACKEND value). */
stsa_ctx *cli_ctx_create(void);

double cli_now(void); /* seconds, monotonic */

/* " a b c\n": the names of the SVG presets, after a "presets:" of the caller. */
void cli_print_presets(void);

/* A real number for a message, in the fewest significant digits (at least
 * min_digits) that read back on the same side of `bound` as v does, so that
 * a value past a bound never prints as the bound (0.1000001 above 0.1 is not
 * "0.1", as %g would have it). bound = v: the shortest text that reads back
 * as v ("1e-06", "0.1", "1e+300"). Writes buf (32 bytes do) and returns it. */
const char *cli_real(char *buf, size_t len, double v, int min_digits, double bound);

/* Median of n values (sorts the array). */
double cli_median(double *v, int n);
double cli_min(const double *v, int n);

/* Measured fp32 FMA peak in GFLOP/s with `threads` threads (best of a few
 * trials of independent FMA chains on the widest vectors the CPU has). */
double cli_fma_peak(int threads);
/* The vectors cli_fma_peak measures on: "avx512", "avx2" or "none". */
const char *cli_fma_peak_isa(void);

/* Random f32 values from N(0, scale^2) stored as dtype (deterministic). */
void *cli_random_buffer(size_t n, stsa_dtype dtype, double scale, uint64_t seed);

#endif
