/* cli_options.c — see cli_options.h. */
#define _POSIX_C_SOURCE 200809L
#include "cli_options.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"

/* ---- conversions ----------------------------------------------------------- */

int64_t cli_parse_int(const char *name, const char *s, int64_t lo, int64_t hi) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || *end || end == s)
    cli_die("%s expects an integer, got '%s'", name, s);
  if (v < lo || v > hi)
    cli_die("%s = %lld is out of range [%lld, %lld]", name, v, (long long)lo,
            (long long)hi);
  return v;
}

double cli_parse_double(const char *name, const char *s, double lo, double hi) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || *end || end == s || !isfinite(v))
    cli_die("%s expects a number, got '%s'", name, s);
  if (v < lo || v > hi) {
    /* the value as typed: printed as a double, 1.0000001 would read as the
     * bound 1 it exceeds */
    char a[32], b[32];
    cli_die("%s = %s is out of range [%s, %s]", name, s, cli_real(a, sizeof a, lo, 1, lo),
            cli_real(b, sizeof b, hi, 1, hi));
  }
  return v;
}

int cli_parse_choice(const char *name, const char *s, const char *const *names) {
  int n = 0;
  while (names[n])
    n++;
  for (int i = 0; i < n; i++)
    if (!strcmp(s, names[i]))
      return i;
  char list[256] = "";
  for (int i = 0; i < n; i++) {
    size_t used = strlen(list);
    snprintf(list + used, sizeof list - used, "%s%s",
             i == 0      ? ""
             : i + 1 < n ? ", "
                         : " or ",
             names[i]);
  }
  cli_die("%s expects %s, got '%s'", name, list, s);
}

stsa_dtype cli_parse_dtype(const char *name, const char *s) {
  for (int d = 0; d < STSA_DTYPE_COUNT_; d++)
    if (strcmp(s, stsa_dtype_name((stsa_dtype)d)) == 0)
      return (stsa_dtype)d;
  cli_die("%s expects f32, f16 or bf16, got '%s'", name, s);
}

int cli_parse_pv_precision(const char *name, const char *s) {
  const char *names[STSA_PV_PRECISION_COUNT_ + 1] = {NULL};
  for (int p = 0; p < STSA_PV_PRECISION_COUNT_; p++)
    names[p] = stsa_pv_precision_name((stsa_pv_precision)p);
  return cli_parse_choice(name, s, names);
}

/* ---- parsing ---------------------------------------------------------------- */

/* Whether the first len bytes of arg are exactly name. */
static int is_name(const char *arg, size_t len, const char *name) {
  return strlen(name) == len && !strncmp(name, arg, len);
}

/* The option named by the first len bytes of arg, and the base of its set. */
static const cli_opt *find_opt(const cli_opt_set *sets, int n_sets, const char *arg,
                               size_t len, void **base) {
  for (int s = 0; s < n_sets; s++)
    for (const cli_opt *o = sets[s].opts; o->name || o->help; o++)
      if (o->name && is_name(arg, len, o->name)) {
        *base = sets[s].base;
        return o;
      }
  return NULL;
}

static void store(const cli_opt *o, void *base, const char *v) {
  void *field = (char *)base + o->offset;
  switch (o->kind) {
  case CLI_OPT_FLAG:
    *(int *)field = 1;
    break;
  case CLI_OPT_STR:
    *(const char **)field = v;
    break;
  case CLI_OPT_INT:
    *(int *)field = (int)cli_parse_int(o->name, v, o->lo, o->hi);
    break;
  case CLI_OPT_I64:
    *(int64_t *)field = cli_parse_int(o->name, v, o->lo, o->hi);
    break;
  case CLI_OPT_U64:
    *(uint64_t *)field = (uint64_t)cli_parse_int(o->name, v, o->lo, o->hi);
    break;
  case CLI_OPT_DOUBLE:
    *(double *)field = cli_parse_double(o->name, v, o->dlo, o->dhi);
    break;
  case CLI_OPT_CHOICE: {
    const int i = cli_parse_choice(o->name, v, o->choices);
    *(int *)field = o->values ? o->values[i] : i;
    break;
  }
  case CLI_OPT_DTYPE:
    *(stsa_dtype *)field = cli_parse_dtype(o->name, v);
    break;
  case CLI_OPT_PV_PRECISION:
    *(int *)field = cli_parse_pv_precision(o->name, v);
    break;
  case CLI_OPT_CALL:
    o->call(base, o->name, v);
    break;
  }
}

void cli_help_version(const cli_command *cmd, const char *arg) {
  if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
    cmd->usage();
    exit(0);
  }
  if (!strcmp(arg, "-V") || !strcmp(arg, "--version")) {
    printf("stsa %s\n", stsa_version_string());
    exit(0);
  }
}

/* The length of the name part of an option argument ("--x=v": 3), and its
 * "=" (NULL when there is none); "--=x" and "-x=y" are no such thing. */
static size_t name_len(const char *arg, const char **eq) {
  *eq =
      arg[0] == '-' && arg[1] == '-' && arg[2] && arg[2] != '=' ? strchr(arg, '=') : NULL;
  return *eq ? (size_t)(*eq - arg) : strlen(arg);
}

int cli_has_option(const cli_opt_set *sets, int n_sets, int argc, char **argv, int first,
                   const char *name, int *help) {
  int found = 0;
  *help = 0;
  for (int i = first; i < argc; i++) {
    const char *eq;
    const size_t len = name_len(argv[i], &eq);
    void *base;
    const cli_opt *o = find_opt(sets, n_sets, argv[i], len, &base);
    if (!o) {
      *help |= !eq && (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help") ||
                       !strcmp(argv[i], "-V") || !strcmp(argv[i], "--version"));
      continue;
    }
    found |= !strcmp(o->name, name);
    if (o->metavar && !eq)
      i++; /* its value */
  }
  return found;
}

void cli_parse(const cli_command *cmd, int argc, char **argv, int first,
               const cli_opt_set *sets, int n_sets) {
  for (int i = first; i < argc; i++) {
    const char *arg = argv[i];
    const char *eq; /* "--name=value" */
    const size_t len = name_len(arg, &eq);
    void *base = NULL;
    const cli_opt *o = find_opt(sets, n_sets, arg, len, &base);
    if (!o && !eq)
      cli_help_version(cmd, arg);
    if (!o && eq && (is_name(arg, len, "--help") || is_name(arg, len, "--version")))
      cli_die("%s: '%s': %.*s takes no value", cmd->name, arg, (int)len, arg);
    if (!o)
      cli_die("%s: unknown option '%.*s' (see %s)", cmd->name, (int)len, arg, cmd->hint);
    const char *value = NULL;
    if (o->metavar) {
      if (!eq && i + 1 >= argc)
        cli_die("option %s needs a value", o->name);
      value = eq ? eq + 1 : argv[++i];
    } else if (eq) {
      cli_die("%s: '%s': %s takes no value", cmd->name, arg, o->name);
    }
    store(o, base, value);
  }
}

/* ---- help --------------------------------------------------------------------- */

enum { HELP_COLUMN = 17 }; /* where the help text starts, after two spaces */

/* "  NAMES" padded to the help column, then the text; a '\n' in the text
 * continues it on a line indented to the same column. */
static void help_line(const char *names, const char *text) {
  const int w = (int)strlen(names);
  printf("  %s%*s", names, w < HELP_COLUMN ? HELP_COLUMN - w : 2, "");
  for (const char *p = text; *p; p++) {
    putchar(*p);
    if (*p == '\n' && p[1])
      printf("%*s", HELP_COLUMN + 2, "");
  }
  putchar('\n');
}

void cli_print_options(const cli_opt *const *tables, int n_tables) {
  for (int t = 0; t < n_tables; t++)
    for (const cli_opt *o = tables[t]; o->name || o->help; o++) {
      if (!o->name) {
        printf("%s\n", o->help);
        continue;
      }
      if (!o->help)
        continue; /* listed with the option before it */
      char names[160] = "";
      for (const cli_opt *p = o; p->name && (p == o || !p->help); p++) {
        size_t used = strlen(names);
        snprintf(names + used, sizeof names - used, "%s%s%s%s", p == o ? "" : ", ",
                 p->name, p->metavar ? " " : "", p->metavar ? p->metavar : "");
      }
      help_line(names, o->help);
    }
  help_line("-h, --help", "this text; -V, --version the version");
}
