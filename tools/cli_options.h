/*
 * cli_options.h — the option parser of every stsa subcommand, driven by
 * tables.
 *
 * A command declares its options as arrays of cli_opt (name, whether it takes
 * a value, where the value goes, help text). cli_parse walks argv once against
 * them; cli_print_options prints help lines from the same arrays, so an option
 * and its help cannot drift apart. Spellings accepted everywhere: "--opt VALUE"
 * and "--opt=VALUE" (an empty value after "=" is a value); -h/--help and
 * -V/--version wherever an option may stand. Every failure dies through
 * cli_die naming the option, and for an unknown one the command.
 */
#ifndef STSA_TOOLS_CLI_OPTIONS_H
#define STSA_TOOLS_CLI_OPTIONS_H

#include <stddef.h>
#include <stdint.h>

#include "stsa.h"

/* How the value of an option is stored. */
typedef enum cli_opt_kind {
  CLI_OPT_FLAG,   /* no value: the int field becomes 1 */
  CLI_OPT_STR,    /* const char *: the argument itself (argv lives until exit) */
  CLI_OPT_INT,    /* int in [lo, hi] */
  CLI_OPT_I64,    /* int64_t in [lo, hi] */
  CLI_OPT_U64,    /* uint64_t in [lo, hi] (lo >= 0) */
  CLI_OPT_DOUBLE, /* double in [dlo, dhi], finite */
  CLI_OPT_CHOICE, /* int: values[i] (or i) for the i-th name of choices */
  CLI_OPT_DTYPE,  /* stsa_dtype: f32, f16 or bf16 (cli_parse_dtype) */
  /* int: an stsa_pv_precision by its library name (cli_parse_pv_precision) */
  CLI_OPT_PV_PRECISION,
  CLI_OPT_CALL /* call(base, name, value): anything else */
} cli_opt_kind;

/* One option, or a line of help: name NULL and help set is a heading;
 * name and help both NULL ends the array (write it as {0}). */
typedef struct cli_opt {
  const char *name;    /* "--frames" */
  const char *metavar; /* "F": takes a value, named so in the help; NULL: a flag */
  cli_opt_kind kind;
  size_t offset; /* of the field in the options struct (not for CLI_OPT_CALL) */
  int64_t lo, hi;
  double dlo, dhi;
  const char *const *choices; /* CLI_OPT_CHOICE: the names, NULL-terminated */
  const int *values;          /* their values; NULL: the index */
  /* CLI_OPT_CALL: base is the options struct; value is NULL for a flag */
  void (*call)(void *base, const char *name, const char *value);
  /* The help text (a '\n' starts an indented continuation line); NULL: the
   * option is listed in the line of the option before it ("--k NAME"). */
  const char *help;
} cli_opt;

/* The offset of a field, checked at compile time to have type ctype, so a
 * table cannot store an int64_t into an int. */
#define CLI_FIELD(T, f, ctype) _Generic(((T *)0)->f, ctype : offsetof(T, f))

/* Designators for the entries of a table: {.name = "--seq", .metavar = "S",
 * CLI_I64(bench_opts, seq, 1, 1 << 24), .help = "..."}. */
#define CLI_FLAG(T, f) .kind = CLI_OPT_FLAG, .offset = CLI_FIELD(T, f, int)
#define CLI_STR(T, f) .kind = CLI_OPT_STR, .offset = CLI_FIELD(T, f, const char *)
#define CLI_INT(T, f, min, max)                                                          \
  .kind = CLI_OPT_INT, .offset = CLI_FIELD(T, f, int), .lo = (min), .hi = (max)
#define CLI_I64(T, f, min, max)                                                          \
  .kind = CLI_OPT_I64, .offset = CLI_FIELD(T, f, int64_t), .lo = (min), .hi = (max)
#define CLI_U64(T, f, min, max)                                                          \
  .kind = CLI_OPT_U64, .offset = CLI_FIELD(T, f, uint64_t), .lo = (min), .hi = (max)
#define CLI_DOUBLE(T, f, min, max)                                                       \
  .kind = CLI_OPT_DOUBLE, .offset = CLI_FIELD(T, f, double), .dlo = (min), .dhi = (max)
#define CLI_CHOICE(T, f, names, vals)                                                    \
  .kind = CLI_OPT_CHOICE, .offset = CLI_FIELD(T, f, int), .choices = (names),            \
  .values = (vals)
#define CLI_DTYPE(T, f) .kind = CLI_OPT_DTYPE, .offset = CLI_FIELD(T, f, stsa_dtype)
#define CLI_PV_PRECISION(T, f)                                                           \
  .kind = CLI_OPT_PV_PRECISION, .offset = CLI_FIELD(T, f, int)
#define CLI_CALL(fn) .kind = CLI_OPT_CALL, .call = (fn)

/* --pv-precision P (STSA_PARAM_PV_PRECISION by name) and its numeric
 * alias --bf16-terms N (the parameter's earlier name) into the int field
 * `pv_precision` of T. */
#define CLI_PV_PRECISION_OPTIONS(T)                                                      \
  {.name = "--pv-precision",                                                             \
   .metavar = "P",                                                                       \
   CLI_PV_PRECISION(T, pv_precision),                                                    \
   .help = "how probabilities enter P.V: auto (default: what the output\n"               \
           "keeps), bf16 (as PyTorch's bf16 SDPA), near-f32 (2^-18) or f32;\n"           \
           "only the bf16 tiles (amx, avx512bf16 on bf16) go below f32"},                \
  {                                                                                      \
    .name = "--bf16-terms", .metavar = "N", CLI_INT(T, pv_precision, 0, 3),              \
    .help = "the same as a number: 0 auto, 1 bf16, 2 near-f32, 3 f32"                    \
  }

/* --threads T into the int field `threads` of T, as every command that
 * computes takes it. */
#define CLI_THREADS_OPTION(T)                                                            \
  {                                                                                      \
    .name = "--threads", .metavar = "T", CLI_INT(T, threads, 1, 1024),                   \
    .help = "worker threads (default: all CPUs)"                                         \
  }

/* A table and the struct its offsets point into. */
typedef struct cli_opt_set {
  const cli_opt *opts;
  void *base;
} cli_opt_set;

/* Who parses: named in messages. */
typedef struct cli_command {
  const char *name;    /* "run", "plot plan" */
  const char *hint;    /* where the help is: "stsa run --help" */
  void (*usage)(void); /* prints the help on stdout (for -h/--help) */
} cli_command;

/* Parses argv[first..argc) against the sets (the first set that names an
 * option wins), in order, storing each value as it is read: a later option
 * overrides an earlier one and CLI_OPT_CALL runs in command-line order. Dies
 * on an unknown option ("<cmd>: unknown option 'X' (see <hint>)"), a missing
 * value, a value given to a flag ("<cmd>: '--quiet=yes': --quiet takes no
 * value") or a value out of range. -h/--help prints the usage and exits 0;
 * -V/--version prints the version and exits 0. */
void cli_parse(const cli_command *cmd, int argc, char **argv, int first,
               const cli_opt_set *sets, int n_sets);

/* Whether argv[first..argc) gives option `name` (walked as cli_parse walks
 * it, so a value that happens to read "--dist" is a value), without storing
 * or checking anything; *help becomes 1 if -h/--help or -V/--version stands
 * where an option may. Unknown words are skipped. For what must be decided
 * before parsing: whether MPI starts (dist_cli.c). */
int cli_has_option(const cli_opt_set *sets, int n_sets, int argc, char **argv, int first,
                   const char *name, int *help);

/* -h/--help: prints cmd's usage and exits 0; -V/--version: prints the
 * version and exits 0; anything else: returns. For a command that takes a
 * subcommand first (`stsa bench dense`), on that argument. */
void cli_help_version(const cli_command *cmd, const char *arg);

/* Prints the help lines of the tables in order ("  --name META" padded to
 * 17 columns, then the help; headings flush left), then the line of -h/--help
 * and -V/--version. */
void cli_print_options(const cli_opt *const *tables, int n_tables);

/* The conversions cli_parse uses, for CLI_OPT_CALL options; `name` is the
 * option in messages. */
int64_t cli_parse_int(const char *name, const char *s, int64_t lo, int64_t hi);
double cli_parse_double(const char *name, const char *s, double lo, double hi);
/* The index of s in the NULL-terminated names; dies "expects a, b or c". */
int cli_parse_choice(const char *name, const char *s, const char *const *names);
stsa_dtype cli_parse_dtype(const char *name, const char *s);
/* An stsa_pv_precision by stsa_pv_precision_name ("auto", "bf16", ...). */
int cli_parse_pv_precision(const char *name, const char *s);

#endif
