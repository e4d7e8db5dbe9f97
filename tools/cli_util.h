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

/* ---- files ---------------------------------------------------------------- */

/* Identity of a file: device and inode (two names of one file compare equal). */
typedef struct cli_file_id {
  unsigned long long dev, ino;
} cli_file_id;

/* Dies unless `path` (named by option `flag`) is a regular file; checked with
 * stat before anything opens it, so a FIFO or a device never blocks or gets
 * read. *id (may be NULL) receives its identity. */
void cli_check_input(const char *flag, const char *path, cli_file_id *id);

/* Opens an input for reading after cli_check_input; dies naming the reason. */
FILE *cli_open_input(const char *flag, const char *path);

/* An output of a command: validated up front, written under a staging name
 * next to the target, then committed together with the other outputs. */
typedef struct cli_output {
  const char *flag, *path; /* "--out", the target */
  int exists;              /* the target exists (a regular file) */
  unsigned mode;           /* its permission bits, kept by the replacement */
  unsigned uid, gid;       /* its owner (kept when running as root) */
  cli_file_id id, dir;     /* the target (when it exists) and its folder */
  const char *base;        /* last component of path */
  char *staging;           /* "<path>.stsa-run.<pid>[.n]", written by the caller */
  char *backup;            /* hard link to the old target during the commit */
} cli_output;

/* Call first in a command that writes outputs, before any thread exists:
 * blocks SIGINT, SIGTERM and SIGHUP in every thread and starts one thread
 * that waits for them. On a signal it removes the staging files (waiting for
 * a write or commit in progress to finish, so no writer's temp file is left)
 * and then dies of the signal with its default action. */
void cli_signals_start(void);

/* Validates every output before anything is written: the folder exists and
 * is writable; an existing target is a regular file (not a directory, FIFO,
 * device or symbolic link); no output is one of the n_in inputs (same device
 * and inode); no two outputs are one file (same inode, or same folder inode
 * and name for a target that does not exist yet). Then picks the staging
 * names and registers them for cli_signals_start's cleanup. Dies with a
 * message otherwise. */
void cli_outputs_prepare(cli_output *outs, int n, const cli_file_id *in,
                         const char *const *in_names, int n_in);

/* Calls write(path, arg) for the staging file of outs[i]; a signal meanwhile
 * takes effect when the write returns, so the writer's own temp file is never
 * left behind. Dies on failure (the writer's message; staging files removed). */
void cli_output_stage(cli_output *outs, int n, int i,
                      stsa_status (*write)(const char *path, void *arg, char *err,
                                           size_t err_len),
                      void *arg);

/* Renames every staging file over its target (keeping the old permission
 * bits), as one step for the signal thread. If a rename fails, the outputs already
 * renamed are rolled back (the old file restored from a hard link, or the new one
 * removed) and the message says which files were and were not written. */
void cli_outputs_commit(cli_output *outs, int n);

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
