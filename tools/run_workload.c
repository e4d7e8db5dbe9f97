/*
 * run_workload.c — `stsa run --workload` (run_state.h): the library's
 * built-in workload in place of an input file, so that a mode can be tried
 * (and tested) on heads whose kind is known without dumping a model first.
 */
#define STSA_EXPERIMENTAL /* stsa_workload_generate */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"
#include "run_state.h"
#include "stsa_io.h"

/* SVG2 is about heads SVG's two masks do not describe: its default workload
 * plants them beside SVG's own kinds, a third of each. */
static const stsa_head_kind SVG2_MIX[3] = {STSA_HEAD_SPATIAL, STSA_HEAD_TEMPORAL,
                                           STSA_HEAD_SEMANTIC};

void run_workload_load(run_state *s) {
  run_workload_opts *w = &s->o.work;
  w->heads = w->heads > 0 ? w->heads : 6;
  w->head_dim = w->head_dim > 0 ? w->head_dim : 64;
  w->seed = w->seed != UINT64_MAX ? w->seed : 1;
  stsa_svg_config cfg;
  run_resolve_config(&s->o.geo, w->heads, w->head_dim, &cfg, NULL, 0);
  const int64_t N = stsa_geometry_tokens(&cfg.geometry), H = w->heads, D = w->head_dim;
  run_qkv *x = &s->qkv;
  memset(x, 0, sizeof *x);
  const size_t bytes = (size_t)(N * H * D) * sizeof(float);
  for (int i = 0; i < 3; i++) {
    x->copy[i] = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!x->copy[i])
      cli_die("out of memory for the workload (%zu bytes per tensor)", bytes);
    x->t[i] = stsa_tensor_bshd(x->copy[i], STSA_F32, 1, N, H, D);
    snprintf(x->label_buf[i], sizeof x->label_buf[i], "workload %c", "qkv"[i]);
    x->label[i] = x->label_buf[i];
  }
  x->rank = 4;
  const int64_t shape[4] = {1, N, H, D};
  memcpy(x->file_shape, shape, sizeof shape);
  s->o.in.layout = RUN_BSHD;
  s->truth = malloc(sizeof *s->truth * (size_t)H);
  stsa_head_kind *mix = malloc(sizeof *mix * (size_t)H);
  if (!s->truth || !mix)
    cli_die("out of memory");
  for (int64_t h = 0; h < H; h++)
    mix[h] = SVG2_MIX[h % 3];
  const stsa_workload_desc desc = {.size = sizeof desc,
                                   .geometry = cfg.geometry,
                                   .batch = 1,
                                   .heads = H,
                                   .head_dim = D,
                                   .seed = w->seed,
                                   .kinds = run_mode_has_svg2(s->o.mode) ? mix : NULL};
  cli_check(stsa_workload_generate(&desc, &x->t[0], &x->t[1], &x->t[2], s->truth), NULL,
            "generating the workload");
  free(mix);
}
