/* tile_bf16.c — see tile_bf16.h. */
#include "kernel/tile_bf16.h"

#include "kernel/tile_spans.h"

/* A PARTIAL tile's mask for full_tile_bf16 (kernels.h): the list's mask
 * bound to the tile. */
typedef struct bf16_mask {
  const stsa_kv_list *list;
  int64_t entry, q0, k0;
  int n;
} bf16_mask;

static void apply_bf16_mask(const void *ctx, int r0, int rows, float *s, int ld_s) {
  const bf16_mask *m = ctx;
  m->list->mask(m->list->mask_ctx, m->entry, m->q0, r0, rows, m->k0, m->n, s, ld_s);
}

/* Where key `key`'s column 0 lies in a panel of bf16 V blocks. */
static int64_t v_block_at(int key) {
  return (key / 32) * 512 + (key % 32) / 2 * 32 + key % 2;
}

/* A PARTIAL tile whose V holds NaN/Inf: copies its V blocks into vb_safe
 * with NaN/Inf as 0 and lists the keys that had some (stsa_bf16_tile:
 * bad_keys); returns their number. */
static int screen_v_blocks(const stsa_attn_problem *pb, const uint16_t *vb,
                           int64_t v_panel, int n, stsa_tile_scratch *sc) {
  const int64_t blocks = pb->kv_stride / 32, panels = pb->D_pad / 16;
  int nbad = 0;
  for (int key = 0; key < n; key++) {
    int bad = 0;
    const int64_t at = v_block_at(key);
    for (int64_t j = 0; j < panels; j++)
      for (int c = 0; c < 16; c++) {
        const uint16_t x = vb[j * v_panel + at + c * 2];
        const int finite = (x & 0x7f80u) != 0x7f80u;
        sc->vb_safe[j * blocks * 512 + at + c * 2] = finite ? x : 0;
        bad |= !finite;
      }
    if (bad)
      sc->bad_keys[nbad++] = key;
  }
  /* keys past n are zeros in the pack and stay so */
  for (int key = n; key < (n + 31) / 32 * 32; key++)
    for (int64_t j = 0; j < panels; j++)
      for (int c = 0; c < 16; c++)
        sc->vb_safe[j * blocks * 512 + v_block_at(key) + c * 2] = 0;
  return nbad;
}

/* The bf16 K and V blocks of a kv tile lying at `sp` (its span starts on
 * a 32-key block). */
static const uint16_t *bf16_k_blocks(const stsa_attn_problem *pb,
                                     const stsa_kv_packed *kv, const stsa_kv_span *sp) {
  return kv->kb + sp->pack0 / 16 * (pb->D32 / 32) * 512;
}
static const uint16_t *bf16_v_blocks(const stsa_kv_packed *kv, const stsa_kv_span *sp) {
  return kv->vb + sp->pack0 / 32 * 512;
}

/* What every kv tile of a q tile shares in full_tile_bf16's and
 * full_run_bf16's argument (kernels.h); the tile's own fields are unset, a
 * FULL and safe tile's (mask NULL, safe 1). */
static stsa_bf16_tile bf16_tile_of(const stsa_attn_problem *pb, int rows, int rows_pad,
                                   stsa_tile_scratch *sc) {
  return (stsa_bf16_tile){.q = sc->qb,
                          .v_panel = pb->Skv_pad / 32 * 512,
                          .D32 = pb->D32,
                          .D_pad = pb->D_pad,
                          .rows_pad = rows_pad,
                          .score_scale = pb->bf16_score_scale,
                          .safe = 1,
                          .terms = pb->bf16_terms,
                          .s = sc->s,
                          .ld_s = pb->kv_stride,
                          .p = sc->pbf,
                          .c = sc->cbuf,
                          .o = sc->o,
                          .m = sc->m,
                          .l = sc->l,
                          .alpha = sc->alpha,
                          .rows = rows,
                          .bad_keys = sc->bad_keys,
                          .D = pb->D,
                          .kb_tails = sc->kb_tails,
                          .vb_tails = sc->vb_tails};
}

void stsa_run_tile_bf16(const stsa_attn_problem *pb, const stsa_kv_packed *kv,
                        const stsa_tile_visit *v, stsa_tile_scratch *sc) {
  const stsa_kv_span *sp = &v->sp;
  const int rows = v->rows, rows_pad = v->rows_pad;
  const bf16_mask bm = {v->list, v->entry, v->q0, sp->k0, sp->n};
  const bf16_mask *mask = v->list ? &bm : NULL;
  if (v->pattern) /* every pass of rows_pad, padding-only ones included */
    stsa_tile_row_spans(v->pattern, rows, rows_pad, STSA_BF16_PASS_ROWS, sp->n, sc->span);
  stsa_bf16_tile t = bf16_tile_of(pb, rows, rows_pad, sc);
  const uint16_t *vb = bf16_v_blocks(kv, sp);
  const int64_t v_panel = t.v_panel;
  const int nbad =
      mask && kv->v_nonfinite[v->tile] ? screen_v_blocks(pb, vb, v_panel, sp->n, sc) : 0;
  t.kb = bf16_k_blocks(pb, kv, sp);
  t.vb = nbad ? sc->vb_safe : vb;
  t.v_panel = nbad ? pb->kv_stride / 32 * 512 : v_panel;
  t.n = sp->n;
  t.safe = v->safe;
  t.mask = mask ? apply_bf16_mask : NULL;
  t.mask_ctx = mask;
  t.span = v->pattern ? sc->span : NULL;
  t.nbad = nbad;
  t.vb_raw = vb;
  t.v_panel_raw = v_panel;
  pb->kern->full_tile_bf16(&t);
}

void stsa_run_merged_bf16(const stsa_attn_problem *pb, const stsa_kv_packed *kv,
                          const stsa_kv_list *list, const int64_t *kv_start,
                          const int64_t *kv_pack, int64_t i0, int64_t i1, int rows,
                          int rows_pad, stsa_tile_scratch *sc) {
  stsa_bf16_seg seg[STSA_MAX_RUN_TILES];
  for (int64_t i = i0; i < i1; i++) {
    const stsa_kv_span sp = stsa_kv_span_of(pb, kv_start, kv_pack, list->tiles[i]);
    seg[i - i0] =
        (stsa_bf16_seg){bf16_k_blocks(pb, kv, &sp), bf16_v_blocks(kv, &sp), sp.n};
  }
  const stsa_bf16_tile t = bf16_tile_of(pb, rows, rows_pad, sc);
  pb->kern->full_run_bf16(&t, seg, (int)(i1 - i0));
}
