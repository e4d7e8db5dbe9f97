/*
 * microkernels_generic.c — the portable micro-kernels (see kernels.h for the
 * contracts): microkernels_body.h on the portable mapping of the SIMD
 * vocabulary, which needs no ISA-specific code (simd_portable.h). They fill
 * every entry of a table before an ISA overrides its own.
 */
#define MK_SUFFIX generic
#include "kernel/generic/microkernels_body.h"

#include "core/convert.h"

static void load_row_generic(const void *src, int dtype, int64_t stride, int64_t n,
                             float *dst) {
  stsa_load_row_f32(src, (stsa_dtype)dtype, stride, n, dst);
}

void stsa_kernels_init_portable(stsa_kernels *t) {
  t->name = "portable";
  fill_generic(t);
  t->qk2 = NULL; /* no two-panel kernels: stsa_qk_panels / stsa_pv_panels loop */
  t->pv2 = NULL;
  t->pv2_segs = NULL;
  t->full_tile_bf16 = NULL; /* bf16 tiles only where a tile-multiply unit is */
  t->full_run_bf16 = NULL;
  t->bf16_scores = NULL;
  t->bf16_pv = NULL;
  t->bf16_rows_unit = 0;
  t->load_row = load_row_generic;
  t->pack_panel = stsa_pack_panel_rows;
  t->pack_bf16 = NULL; /* stsa_pack_bf16_rows */
  t->gather_tails = stsa_gather_tails;
  t->half = NULL; /* one height of register tile */
}
