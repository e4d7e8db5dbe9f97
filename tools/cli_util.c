/* cli_util.c — see cli_util.h. */
#define _POSIX_C_SOURCE 200809L
#include "cli_util.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/convert.h"

void cli_die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("stsa: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(2);
}

void cli_check(stsa_status st, const stsa_ctx *ctx, const char *what) {
  if (st != STSA_OK)
    cli_die("%s failed: %s (%s)", what, stsa_status_str(st),
            ctx ? stsa_ctx_last_error(ctx) : "");
}

stsa_ctx *cli_ctx_create(void) {
  stsa_ctx *ctx = NULL;
  char msg[512];
  stsa_status st = stsa_ctx_create_msg(&ctx, msg, sizeof msg);
  if (st != STSA_OK)
    cli_die("creating a context failed: %s (%s)", stsa_status_str(st), msg);
  return ctx;
}

/* ---- arguments ----------------------------------------------------------- */

/* The values split off "--flag=value" arguments, to tell "--quiet=1" (a
 * flag that takes no value) from a stray argument. */
static const char **split_values, **split_flags;
static int n_split;

void cli_split_args(int *argc, char ***argv) {
  int n = 0;
  for (int i = 0; i < *argc; i++) {
    const char *a = (*argv)[i];
    n += 1 + (a[0] == '-' && a[1] == '-' && a[2] && a[2] != '=' && strchr(a, '='));
  }
  if (n == *argc)
    return;
  char **out = malloc(sizeof *out * (size_t)(n + 1));
  split_values = malloc(sizeof *split_values * (size_t)(n - *argc));
  split_flags = malloc(sizeof *split_flags * (size_t)(n - *argc));
  if (!out || !split_values || !split_flags)
    cli_die("out of memory");
  int k = 0;
  for (int i = 0; i < *argc; i++) {
    char *a = (*argv)[i], *eq = strchr(a, '=');
    if (a[0] == '-' && a[1] == '-' && a[2] && a[2] != '=' && eq) {
      char *flag = strndup(a, (size_t)(eq - a));
      if (!flag)
        cli_die("out of memory");
      out[k++] = flag;
      out[k++] = eq + 1;
      split_values[n_split] = eq + 1;
      split_flags[n_split++] = a;
    } else {
      out[k++] = a;
    }
  }
  out[k] = NULL;
  *argc = n;
  *argv = out;
}

void cli_help_version(const char *arg, void (*usage)(void)) {
  if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
    usage();
    exit(0);
  }
  if (!strcmp(arg, "-V") || !strcmp(arg, "--version")) {
    printf("stsa %s\n", stsa_version_string());
    exit(0);
  }
}

void cli_unknown(const char *cmd, const char *arg, const char *hint) {
  for (int i = 0; i < n_split; i++)
    if (arg == split_values[i])
      cli_die("%s: '%s': %.*s takes no value", cmd, split_flags[i],
              (int)(split_values[i] - 1 - split_flags[i]), split_flags[i]);
  cli_die("%s: unknown option '%s' (see %s)", cmd, arg, hint);
}

const char *cli_str(int argc, char **argv, int *i) {
  if (*i + 1 >= argc)
    cli_die("option %s needs a value", argv[*i]);
  return argv[++*i];
}

int64_t cli_int(int argc, char **argv, int *i, int64_t lo, int64_t hi) {
  const char *opt = argv[*i], *s = cli_str(argc, argv, i);
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || *end || end == s)
    cli_die("%s expects an integer, got '%s'", opt, s);
  if (v < lo || v > hi)
    cli_die("%s = %lld is out of range [%lld, %lld]", opt, v, (long long)lo,
            (long long)hi);
  return v;
}

double cli_double(int argc, char **argv, int *i, double lo, double hi) {
  const char *opt = argv[*i], *s = cli_str(argc, argv, i);
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || *end || end == s || !isfinite(v))
    cli_die("%s expects a number, got '%s'", opt, s);
  if (v < lo || v > hi)
    cli_die("%s = %g is out of range [%g, %g]", opt, v, lo, hi);
  return v;
}

stsa_dtype cli_dtype(int argc, char **argv, int *i) {
  const char *opt = argv[*i], *s = cli_str(argc, argv, i);
  for (int d = 0; d < STSA_DTYPE_COUNT_; d++)
    if (strcmp(s, stsa_dtype_name((stsa_dtype)d)) == 0)
      return (stsa_dtype)d;
  cli_die("%s expects f32, f16 or bf16, got '%s'", opt, s);
}

double cli_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double cli_median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double cli_min(const double *v, int n) {
  double m = v[0];
  for (int i = 1; i < n; i++)
    m = v[i] < m ? v[i] : m;
  return m;
}

void *cli_random_buffer(size_t n, stsa_dtype dtype, double scale, uint64_t seed) {
  size_t es = stsa_dtype_size(dtype);
  void *buf = aligned_alloc(64, (n * es + 63) / 64 * 64);
  if (!buf)
    cli_die("out of memory allocating %zu elements", n);
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; i < n; i += 2) {
    /* Box-Muller on a xorshift stream: two normals per step */
    double u[2];
    for (int j = 0; j < 2; j++) {
      s ^= s << 13;
      s ^= s >> 7;
      s ^= s << 17;
      u[j] = ((double)(s >> 11) + 0.5) / 9007199254740992.0;
    }
    double r = sqrt(-2.0 * log(u[0])) * scale;
    float z[2] = {(float)(r * cos(6.283185307179586 * u[1])),
                  (float)(r * sin(6.283185307179586 * u[1]))};
    for (size_t j = 0; j < 2 && i + j < n; j++) {
      if (dtype == STSA_F32)
        ((float *)buf)[i + j] = z[j];
      else if (dtype == STSA_F16)
        ((uint16_t *)buf)[i + j] = stsa_f32_to_f16(z[j]);
      else
        ((uint16_t *)buf)[i + j] = stsa_f32_to_bf16(z[j]);
    }
  }
  return buf;
}
