/*
 * bench_ggml.c — ggml's flash attention against stsa on ggml's threads, in
 * one process, interleaved rep by rep, on Wan's self-attention graph as
 * stable-diffusion.cpp builds it (f32 Q, f16 K/V):
 *   dense: ggml_flash_attn_ext            vs  stsa dense node
 *   svg:   ggml_flash_attn_ext + -inf mask vs  stsa SVG nodes (profiling
 *          included), the mask SVG's spatial one, on workload heads that are
 *          all spatial, so both compute the same pairs
 * One JSON line per pair and rep, then a summary line per pair (medians
 * and best). GFLOP/s count 4 S^2 D H (dense-equivalent for both sides).
 *
 *   bench_ggml [--frames F --height Hp --width Wp] [--heads H] [--dim D]
 *              [--threads T] [--reps R] [--density X] [--wan480p] [--masked 0|1]
 * Default 8 x 32 x 32 = 8192 tokens, 4 heads of 128; --wan480p is Wan 2.1
 * 480p's 21 x 30 x 52 = 32,760 tokens (2 heads unless --heads; the masked
 * ggml run needs a 2 GB mask there and is off unless --masked 1).
 */
#define STSA_EXPERIMENTAL /* stsa_svg_kind_mask */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ggml-cpu.h"
#include "wan_attn.h"

typedef struct bench_opts {
  stsa_geometry g;
  int64_t heads, dim;
  int threads, reps, masked;
  double density;
} bench_opts;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int parse(int argc, char **argv, bench_opts *o) {
  *o = (bench_opts){{8, 32, 32, 0, 0, STSA_TEXT_NONE}, 4, 128, 2, 3, -1, 0.25};
  int heads_given = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *val = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--wan480p")) {
      o->g = (stsa_geometry){21, 30, 52, 0, 0, STSA_TEXT_NONE};
      continue;
    }
    if (!val) {
      fprintf(stderr, "bench_ggml: %s needs a value (see the comment at the top)\n", a);
      return 2;
    }
    i++;
    if (!strcmp(a, "--frames"))
      o->g.frames = atoll(val);
    else if (!strcmp(a, "--height"))
      o->g.height = atoll(val);
    else if (!strcmp(a, "--width"))
      o->g.width = atoll(val);
    else if (!strcmp(a, "--heads"))
      o->heads = atoll(val), heads_given = 1;
    else if (!strcmp(a, "--dim"))
      o->dim = atoll(val);
    else if (!strcmp(a, "--threads"))
      o->threads = atoi(val);
    else if (!strcmp(a, "--reps"))
      o->reps = atoi(val);
    else if (!strcmp(a, "--density"))
      o->density = atof(val);
    else if (!strcmp(a, "--masked"))
      o->masked = atoi(val);
    else {
      fprintf(stderr, "bench_ggml: unknown option %s\n", a);
      return 2;
    }
  }
  const int64_t L = stsa_geometry_tokens(&o->g);
  if (!heads_given && L > 20000)
    o->heads = 2;
  if (o->masked < 0)
    o->masked = L <= 16384;
  if (L < 1 || o->heads < 1 || o->dim < 1 || o->threads < 1 || o->reps < 1) {
    fprintf(stderr, "bench_ggml: sizes, threads and reps must be positive\n");
    return 2;
  }
  return 0;
}

/* One graph: the Wan attention of `a` on q, k, v of the workload. */
typedef struct graph {
  struct ggml_context *ctx;
  struct ggml_cgraph *gf;
  struct ggml_tensor *out;
  double ms[64];
} graph;

static void build(graph *gr, const bench_opts *o, wan_attn *a, int masked) {
  const int64_t L = stsa_geometry_tokens(&o->g), H = o->heads, D = o->dim;
  struct ggml_init_params p = {wan_ctx_bytes(L, H * D, masked), NULL, false};
  gr->ctx = ggml_init(p);
  struct ggml_tensor *qkv[3];
  stsa_head_kind *kinds = malloc(sizeof *kinds * (size_t)H);
  for (int64_t h = 0; h < H; h++)
    kinds[h] = STSA_HEAD_SPATIAL;
  wan_workload(gr->ctx, &o->g, H, D, kinds, 3, qkv);
  free(kinds);
  gr->out = wan_self_attention(gr->ctx, qkv[0], qkv[1], qkv[2], H, a);
  gr->gf = ggml_new_graph(gr->ctx);
  ggml_build_forward_expand(gr->gf, gr->out);
}

static double run(graph *gr, int threads) {
  double t0 = now_ms();
  ggml_graph_compute_with_ctx(gr->ctx, gr->gf, threads);
  return now_ms() - t0;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(const double *v, int n) {
  double s[64];
  memcpy(s, v, sizeof *s * (size_t)n);
  qsort(s, (size_t)n, sizeof *s, cmp);
  return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

static double best(const double *v, int n) {
  double m = v[0];
  for (int i = 1; i < n; i++)
    m = v[i] < m ? v[i] : m;
  return m;
}

static double max_abs_diff(const struct ggml_tensor *a, const struct ggml_tensor *b) {
  double m = 0;
  const float *x = a->data, *y = b->data;
  for (int64_t i = 0; i < ggml_nelements(a); i++)
    m = fabs((double)x[i] - y[i]) > m ? fabs((double)x[i] - y[i]) : m;
  return m;
}

static void report(const char *pair, const bench_opts *o, graph *gg, graph *gs, int reps,
                   double density, double diff) {
  const int64_t L = stsa_geometry_tokens(&o->g);
  const double gflop =
      4.0 * (double)L * (double)L * (double)o->dim * (double)o->heads * 1e-9;
  for (int r = 0; r < reps; r++)
    printf(
        "{\"bench\":\"ggml\",\"pair\":\"%s\",\"rep\":%d,\"S\":%lld,\"H\":%lld,\"D\":%lld,"
        "\"threads\":%d,\"ggml_ms\":%.2f,\"stsa_ms\":%.2f,\"ggml_gflops\":%.1f,"
        "\"stsa_gflops\":%.1f,\"speedup\":%.3f}\n",
        pair, r, (long long)L, (long long)o->heads, (long long)o->dim, o->threads,
        gg->ms[r], gs->ms[r], gflop / gg->ms[r] * 1e3, gflop / gs->ms[r] * 1e3,
        gg->ms[r] / gs->ms[r]);
  const double mg = median(gg->ms, reps), ms = median(gs->ms, reps);
  const double bg = best(gg->ms, reps), bs = best(gs->ms, reps);
  printf("{\"bench\":\"ggml\",\"pair\":\"%s\",\"summary\":true,\"S\":%lld,\"H\":%lld,"
         "\"D\":%lld,\"threads\":%d,\"reps\":%d,\"density\":%.4f,\"ggml_median_ms\":%.2f,"
         "\"stsa_median_ms\":%.2f,\"ggml_gflops\":%.1f,\"stsa_gflops\":%.1f,"
         "\"speedup_median\":%.3f,\"speedup_best\":%.3f,\"max_abs_diff\":%.3g}\n",
         pair, (long long)L, (long long)o->heads, (long long)o->dim, o->threads, reps,
         density, mg, ms, gflop / mg * 1e3, gflop / ms * 1e3, mg / ms, bg / bs, diff);
}

int main(int argc, char **argv) {
  bench_opts o;
  int rc = parse(argc, argv, &o);
  if (rc)
    return rc;
  if (o.reps > 64)
    o.reps = 64;
  ggml_cpu_init();
  const int64_t L = stsa_geometry_tokens(&o.g);
  stsa_svg_config cfg = wan_svg_config(&o.g, o.heads, o.dim, o.density, 64);
  char msg[256];
  stsa_ggml *sg = NULL;
  if (stsa_ggml_create(&cfg, &sg, msg, sizeof msg) != STSA_OK) {
    fprintf(stderr, "bench_ggml: %s\n", msg);
    return 1;
  }
  /* the spatial mask as sd.cpp's dense mask would carry it */
  uint8_t *keep = o.masked ? malloc((size_t)(L * L)) : NULL;
  stsa_mask *m = NULL;
  stsa_svg_windows win = STSA_INIT(stsa_svg_windows);
  stsa_svg *probe = NULL;
  stsa_svg_create(stsa_ggml_ctx(sg), &cfg, &probe);
  stsa_svg_get_windows(probe, &win);
  if (keep) {
    stsa_svg_kind_mask(probe, STSA_HEAD_SPATIAL, &m, NULL, NULL);
    for (int64_t i = 0; i < L; i++)
      for (int64_t j = 0; j < L; j++)
        keep[i * L + j] = (uint8_t)stsa_mask_keep(m, i, j);
    stsa_mask_free(m);
  }
  stsa_svg_free(probe);
  graph flash = {0}, dense = {0}, masked = {0}, svg = {0};
  stsa_head_kind *kinds = calloc((size_t)o.heads, sizeof *kinds);
  wan_attn af = {.mode = WAN_FLASH}, ad = {.mode = WAN_STSA_DENSE, .sg = sg};
  wan_attn am = {.mode = WAN_FLASH, .keep = keep};
  wan_attn as = {.mode = WAN_STSA_SVG, .sg = sg, .layer = 3, .step = 4, .kinds = kinds};
  build(&flash, &o, &af, 0);
  build(&dense, &o, &ad, 0);
  build(&svg, &o, &as, 0);
  if (keep)
    build(&masked, &o, &am, 1);
  free(keep);
  /* one warm-up each (ggml's thread pool, stsa's work buffer), then reps */
  run(&flash, o.threads);
  run(&dense, o.threads);
  run(&svg, o.threads);
  if (masked.ctx)
    run(&masked, o.threads);
  for (int r = 0; r < o.reps; r++) {
    flash.ms[r] = run(&flash, o.threads);
    dense.ms[r] = run(&dense, o.threads);
    if (masked.ctx)
      masked.ms[r] = run(&masked, o.threads);
    svg.ms[r] = run(&svg, o.threads);
  }
  const char *why;
  if (stsa_ggml_status(sg, &why) != STSA_OK) {
    fprintf(stderr, "bench_ggml: %s\n", why);
    return 1;
  }
  report("dense", &o, &flash, &dense, o.reps, 1.0, max_abs_diff(dense.out, flash.out));
  int spatial = 0;
  for (int64_t h = 0; h < o.heads; h++)
    spatial += kinds[h] == STSA_HEAD_SPATIAL;
  if (masked.ctx)
    report("svg", &o, &masked, &svg, o.reps, win.density_spatial,
           max_abs_diff(svg.out, masked.out));
  printf("{\"bench\":\"ggml\",\"svg_heads_spatial\":%d,\"heads\":%lld,\"svg_ms_median\":%"
         ".2f,"
         "\"dense_ms_median\":%.2f,\"svg_speedup_vs_stsa_dense\":%.3f,"
         "\"density\":%.4f}\n",
         spatial, (long long)o.heads, median(svg.ms, o.reps), median(dense.ms, o.reps),
         median(dense.ms, o.reps) / median(svg.ms, o.reps), win.density_spatial);
  ggml_free(flash.ctx);
  ggml_free(dense.ctx);
  ggml_free(svg.ctx);
  if (masked.ctx)
    ggml_free(masked.ctx);
  free(kinds);
  stsa_ggml_free(sg);
  return 0;
}
