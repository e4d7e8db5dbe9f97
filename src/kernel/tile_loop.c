/* tile_loop.c — see tile_loop.h. */
#include "kernel/tile_loop.h"

#include <math.h>
#include <string.h>

#include "kernel/tile_bf16.h"
#include "kernel/tile_f32.h"
#include "kernel/tile_rows.h"
#include "kernel/tile_values.h"

void stsa_run_q_tile(const stsa_attn_problem *pb, const stsa_kv_packed *kv, int64_t b,
                     int64_t h, int64_t qt, const stsa_kv_list *list,
                     stsa_tile_scratch *sc) {
  stsa_run_q_tile_in(pb, kv, b, h, qt, list, NULL, sc);
}

/* Whether listed entry i may join a merged run (see stsa_run_merged_f32): a FULL
 * variable tile whose logits cannot reach -inf. */
static int mergeable(const stsa_attn_problem *pb, const stsa_kv_packed *kv,
                     const stsa_kv_list *list, int64_t i, int64_t tile,
                     const stsa_tile_scratch *sc) {
  return !(list && list->tiles && list->kinds[i] == STSA_TILE_PARTIAL) &&
         (double)sc->q_max * kv->k_max[tile] * pb->D < LOGIT_SAFE;
}

/* The listed entries from i on that fit one score buffer side by side:
 * the end of the run. An f32 run holds its tiles' whole panels (nr keys
 * each) and leaves their tails to the q tile's tail runs (stsa_tail_spans); a
 * bf16 run places each tile's whole 32-key blocks first and their tails
 * after them, sharing blocks (full_run_bf16). Either inside the score
 * buffer's kv_stride columns (kv_tile on f32 tiles; rounded up to 32 keys on
 * bf16 ones). */
static int64_t merged_end(const stsa_attn_problem *pb, const stsa_kv_packed *kv,
                          const stsa_kv_list *list, const int64_t *kv_start,
                          const int64_t *kv_pack, int64_t i, int64_t ntiles,
                          const stsa_tile_scratch *sc) {
  /* the unit a run's whole blocks and shared tails come in: an f32 panel,
   * a bf16 tile multiply's 32 keys (full_run_bf16) */
  const int bf16 = pb->bf16_tiles, nr = pb->nr, block = bf16 ? STSA_BF16_KEY_BLOCK : nr;
  int64_t whole = 0, tails = 0, j = i;
  for (; j < ntiles; j++) {
    const int64_t tile = list->tiles[j];
    const stsa_kv_span sp = stsa_kv_span_of(pb, kv_start, kv_pack, tile);
    const int64_t w = whole + sp.n / block * block, t = tails + sp.n % block;
    /* f32 runs hold whole panels only (their tails go to the q tile's
     * tail runs); bf16 runs hold their tails too */
    if (j - i == STSA_MAX_RUN_TILES ||
        (bf16 ? w + stsa_round_up(t, block) : w) > pb->kv_stride ||
        !mergeable(pb, kv, list, j, tile, sc))
      break;
    whole = w, tails = t;
  }
  return j;
}

void stsa_run_q_tile_in(const stsa_attn_problem *pb, const stsa_kv_packed *kv, int64_t b,
                        int64_t h, int64_t qt, const stsa_kv_list *list,
                        const stsa_tile_layout *lay, stsa_tile_scratch *sc) {
  const stsa_kernels *kern = pb->kern;
  const int D_pad = pb->D_pad;
  int64_t q0;
  const int rows = stsa_q_rows_of(pb, lay ? lay->q_start : NULL, qt, &q0);
  const int rows_pad = (int)stsa_round_up(rows, pb->mr);

  const int64_t *q_rows = list ? list->q_rows : NULL;
  const int64_t *kv_start = lay ? lay->kv_start : NULL;
  const int64_t *kv_pack = lay ? lay->kv_pack : NULL;
  const int32_t *pattern = lay ? lay->pattern : NULL;
  sc->q_max = pb->bf16_tiles ? stsa_load_q_tile_bf16(pb, kv->k_exp, b, h, q0, rows,
                                                     rows_pad, q_rows, sc->qb)
                             : stsa_load_q_tile(pb, ldexpf(pb->qscale, -kv->k_exp), b, h,
                                                q0, rows, rows_pad, q_rows, sc->q);
  memset(sc->o, 0, sizeof(float) * (size_t)rows_pad * (size_t)D_pad);
  for (int r = 0; r < rows_pad; r++) {
    sc->m[r] = -INFINITY;
    sc->l[r] = 0.0f;
  }

  const int64_t ntiles = list && list->tiles ? list->count : stsa_kv_tiles(pb);
  stsa_tail_spans ts;
  ts.count = 0;
  ts.keys = 0;
  for (int64_t i = 0; i < ntiles; i++) {
    int64_t tile = list && list->tiles ? list->tiles[i] : i;
    if (kv_start && list && list->tiles && (!pb->bf16_tiles || kern->full_run_bf16)) {
      const int64_t end = merged_end(pb, kv, list, kv_start, kv_pack, i, ntiles, sc);
      /* an f32 tile alone too: its tail joins the q tile's tail runs */
      if (end - i >= (pb->bf16_tiles ? 2 : 1)) {
        if (pb->bf16_tiles)
          stsa_run_merged_bf16(pb, kv, list, kv_start, kv_pack, i, end, rows, rows_pad,
                               sc);
        else
          stsa_run_merged_f32(pb, kv, list, kv_start, kv_pack, i, end, rows, rows_pad,
                              &ts, sc);
        i = end - 1;
        continue;
      }
    }
    const int partial = list && list->tiles && list->kinds[i] == STSA_TILE_PARTIAL;
    const stsa_tile_visit v = {
        .sp = stsa_kv_span_of(pb, kv_start, kv_pack, tile),
        .tile = tile,
        .variable = kv_start != NULL,
        .rows = rows,
        .rows_pad = rows_pad,
        .safe = (double)sc->q_max * kv->k_max[tile] * pb->D < LOGIT_SAFE,
        .list = partial ? list : NULL,
        .entry = i,
        .q0 = q0,
        .pattern = partial && pattern ? &lay->patterns[pattern[i]] : NULL};
    if (pb->bf16_tiles) /* every tile, FULL or PARTIAL; no f32 panels */
      stsa_run_tile_bf16(pb, kv, &v, sc);
    else
      stsa_run_tile_f32(pb, kv, &v, sc);
  }
  stsa_run_tails_f32(pb, kv, &ts, rows, rows_pad, sc);
  stsa_store_q_tile(pb, b, h, q0, rows, q_rows, kv->v_exp, sc);
}
