/*
 * cli_util.h — what every stsa subcommand shares: option parsing, timing,
 * statistics and error reporting. The tool (not the library) may exit().
 */
#ifndef STSA_TOOLS_CLI_UTIL_H
#define STSA_TOOLS_CLI_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "stsa.h"

/* Prints "stsa: <message>" to stderr and exits with status 2. */
_Noreturn void cli_die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Exits via cli_die when st is not STSA_OK, with the context's message. */
void cli_check(stsa_status st, const stsa_ctx *ctx, const char *what);

/* A context with defaults; dies with the library's message when that fails
 * (e.g. an unknown STSA_BACKEND value). */
stsa_ctx *cli_ctx_create(void);

/* ---- arguments ----------------------------------------------------------- */

/* Rewrites the command line once, before any subcommand parses it: every
 * "--name=value" becomes the two arguments "--name" "value", so each option
 * is accepted in both spellings. The new argv is never freed. */
void cli_split_args(int *argc, char ***argv);

/* -h/--help: calls usage() and exits 0; -V/--version: prints the version
 * and exits 0; anything else: returns. Every parser calls it for an
 * argument it does not know, before cli_unknown. */
void cli_help_version(const char *arg, void (*usage)(void));

/* Dies on an argument no parser knew: "<cmd>: unknown option 'X' (see
 * <hint>)", or, for the value of a "--flag=value" whose flag takes none,
 * "<cmd>: --flag takes no value". */
_Noreturn void cli_unknown(const char *cmd, const char *arg, const char *hint);

/* Option parsing: argv[*i] is the option; its value is argv[*i + 1]. */
int64_t cli_int(int argc, char **argv, int *i, int64_t lo, int64_t hi);
double cli_double(int argc, char **argv, int *i, double lo, double hi);
const char *cli_str(int argc, char **argv, int *i);
stsa_dtype cli_dtype(int argc, char **argv, int *i);

double cli_now(void); /* seconds, monotonic */

/* Median of n values (sorts the array). */
double cli_median(double *v, int n);
double cli_min(const double *v, int n);

/* Measured fp32 FMA peak in GFLOP/s with `threads` threads (best of a few
 * trials of independent FMA chains). */
double cli_fma_peak(int threads);

/* Random f32 values from N(0, scale^2) stored as dtype (deterministic). */
void *cli_random_buffer(size_t n, stsa_dtype dtype, double scale, uint64_t seed);

#endif
