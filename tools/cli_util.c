/* cli_util.c — see cli_util.h. */
#define _POSIX_C_SOURCE 200809L
#include "cli_util.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cli_convert.h"

static void (*die_hook)(const char *msg);

void cli_set_die_hook(void (*hook)(const char *msg)) { die_hook = hook; }

void cli_die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (die_hook) {
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    die_hook(msg);
    exit(2);
  }
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

double cli_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

const char *cli_real(char *buf, size_t len, double v, int min_digits, double bound) {
  for (int digits = min_digits > 1 ? min_digits : 1; digits <= 17; digits++) {
    snprintf(buf, len, "%.*g", digits, v);
    const double p = strtod(buf, NULL);
    if (!isfinite(v) || ((p > bound) == (v > bound) && (p < bound) == (v < bound)))
      break;
  }
  return buf;
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

/* Values made per conversion call (even: Box-Muller makes pairs). */
#define RANDOM_BLOCK 4096

void *cli_random_buffer(size_t n, stsa_dtype dtype, double scale, uint64_t seed) {
  size_t es = stsa_dtype_size(dtype);
  void *buf = aligned_alloc(64, (n * es + 63) / 64 * 64);
  if (!buf)
    cli_die("out of memory allocating %zu elements", n);
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  float z[RANDOM_BLOCK];
  for (size_t i0 = 0; i0 < n; i0 += RANDOM_BLOCK) {
    const size_t m = n - i0 < RANDOM_BLOCK ? n - i0 : RANDOM_BLOCK;
    for (size_t i = 0; i < m; i += 2) {
      /* Box-Muller on a xorshift stream: two normals per step */
      double u[2];
      for (int j = 0; j < 2; j++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        u[j] = ((double)(s >> 11) + 0.5) / 9007199254740992.0;
      }
      double r = sqrt(-2.0 * log(u[0])) * scale;
      z[i] = (float)(r * cos(6.283185307179586 * u[1]));
      if (i + 1 < m)
        z[i + 1] = (float)(r * sin(6.283185307179586 * u[1]));
    }
    cli_store_f32(z, m, (char *)buf + i0 * es, dtype);
  }
  return buf;
}

void cli_print_presets(void) {
  for (int i = 0; stsa_svg_preset_name(i); i++)
    printf(" %s", stsa_svg_preset_name(i));
  printf("\n");
}
