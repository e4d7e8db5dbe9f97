/* rows_fused.c — see rows_fused.h. */
#include "kernel/rows_fused.h"

#include <math.h>
#include <omp.h>
#include <string.h>

#include "core/convert.h"
#include "core/tensor.h"
#include "kernel/tile_f32.h"
#include "kernel/tile_rows.h"
#include "kernel/tile_values.h"

static size_t align16(size_t floats) { return (floats + 15) / 16 * 16; }

/* One thread's memory, in floats, laid out by fused_scratch_at. */
typedef struct fused_scratch {
  stsa_kv_packed kv; /* one kv tile, packed at row 0 */
  float *q;          /* [rows_pad][D], pre-scaled */
  float *s;          /* [rows_pad][kv_tile] scores, then dense probabilities */
  float *pm;         /* [mr][kv_tile] one row block's masked probabilities */
  float *o;          /* [1 + n][rows_pad][D_pad]: dense, then mask i in its order */
  float *l;          /* [1 + n][rows_pad] */
  float *m, *alpha, *tile_max, *ones, *row;
  int32_t *cursor; /* [n] mask i's next entry */
} fused_scratch;

/* Floats of each piece, in the order fused_scratch_at lays them out. */
enum { PIECES = 12 };
static void piece_sizes(const stsa_rows_fused *f, size_t sz[PIECES]) {
  const stsa_attn_problem *pb = f->pb;
  const size_t rp = (size_t)pb->q_tile, kv = (size_t)pb->kv_tile, D = (size_t)pb->D,
               Dp = (size_t)pb->D_pad, n1 = (size_t)f->n + 1;
  const size_t s[PIECES] = {
      align16(kv * D),         align16(kv * Dp), 16,
      align16(rp * D),         align16(rp * kv), align16((size_t)pb->mr * kv),
      align16(n1 * rp * Dp),   align16(n1 * rp), align16(3 * rp),
      align16((size_t)pb->mr), align16(Dp),      16};
  memcpy(sz, s, sizeof s);
}

static size_t scratch_floats(const stsa_rows_fused *f) {
  size_t sz[PIECES], total = 0;
  piece_sizes(f, sz);
  for (int i = 0; i < PIECES; i++)
    total += sz[i];
  return total;
}

static fused_scratch fused_scratch_at(const stsa_rows_fused *f, float *mem) {
  size_t sz[PIECES];
  piece_sizes(f, sz);
  float *p[PIECES];
  for (int i = 0; i < PIECES; i++) {
    p[i] = mem;
    mem += sz[i];
  }
  const int rp = f->pb->q_tile;
  /* one tile's pack: its panels, then k_max, v_max and v_nonfinite in piece 2 */
  const stsa_kv_packed kv = {.kt = p[0],
                             .vp = p[1],
                             .k_max = p[2],
                             .v_max = p[2] + 1,
                             .v_nonfinite = (uint8_t *)(p[2] + 4)};
  fused_scratch sc = {
      kv,   p[3],      p[4],          p[5], p[6],  p[7],
      p[8], p[8] + rp, p[8] + 2 * rp, p[9], p[10], (int32_t *)(void *)p[11]};
  for (int r = 0; r < f->pb->mr; r++)
    sc.ones[r] = 1.0f;
  return sc;
}

/* The packing view of a problem whose kv tiles go one at a time to row 0. */
static stsa_attn_problem one_tile_problem(const stsa_attn_problem *pb) {
  stsa_attn_problem t = *pb;
  t.Skv_pad = pb->kv_tile;
  return t;
}

/* Kept columns [*lo, *hi) of q row r in the tile of mask entry e (-1: none
 * kept); returns the number of intervals and points *iv at them (FULL: the
 * one interval [0, n), given in full[]). */
static int row_intervals(const stsa_block_sparse *bs, int64_t e, int r, int n,
                         uint16_t full[2], const uint16_t **iv) {
  if (e < 0)
    return 0;
  if (bs->kind[e] == STSA_TILE_FULL) {
    full[0] = 0;
    full[1] = (uint16_t)n;
    *iv = full;
    return 1;
  }
  const stsa_tile_pattern *pat = &bs->pattern_list[bs->pattern[e]];
  const int32_t i0 = pat->row_ptr[r], i1 = pat->row_ptr[r + 1];
  *iv = pat->iv + 2 * i0;
  return i1 - i0;
}

/* Mask i's structure and row order for head h. */
static const stsa_block_sparse *mask_bs(const stsa_rows_fused *f, int i, int64_t h) {
  return f->bs_head[i] ? f->bs_head[i][h] : f->bs[i];
}
static const int32_t *mask_order(const stsa_rows_fused *f, int i, int64_t h) {
  return f->head_order ? f->head_order[h] : f->order[i];
}

/* P.V of mask i's rows [pos0, pos0 + mr) on the tile: their dense
 * probabilities on the kept pairs (zeros elsewhere) over the union of their
 * kept columns, added to the mask's sums. */
static void mask_block(const stsa_rows_fused *f, int i, int64_t h, int64_t e, int pos0,
                       int n, const float *vp, fused_scratch *sc) {
  const stsa_attn_problem *pb = f->pb;
  const stsa_block_sparse *bs = mask_bs(f, i, h);
  const int32_t *order = mask_order(f, i, h);
  const int mr = pb->mr, ld = pb->kv_tile, rp = pb->q_tile, R = (int)pb->Sq;
  uint16_t full[2];
  int lo = n, hi = 0;
  for (int rr = 0; rr < mr && pos0 + rr < R; rr++) {
    const int r = order ? order[pos0 + rr] : pos0 + rr;
    const uint16_t *iv;
    const int k = row_intervals(bs, e, r, n, full, &iv);
    if (k > 0) {
      lo = iv[0] < lo ? iv[0] : lo;
      hi = iv[2 * k - 1] > hi ? iv[2 * k - 1] : hi;
    }
  }
  if (lo >= hi)
    return;
  float *l = sc->l + (size_t)(i + 1) * (size_t)rp;
  for (int rr = 0; rr < mr; rr++) {
    float *dst = sc->pm + (size_t)rr * (size_t)ld;
    memset(dst + lo, 0, sizeof(float) * (size_t)(hi - lo));
    if (pos0 + rr >= R)
      continue;
    const int r = order ? order[pos0 + rr] : pos0 + rr;
    const float *src = sc->s + (size_t)r * (size_t)ld;
    const uint16_t *iv;
    const int k = row_intervals(bs, e, r, n, full, &iv);
    float sum = 0;
    for (int j = 0; j < k; j++)
      for (int c = iv[2 * j]; c < iv[2 * j + 1]; c++) {
        dst[c] = src[c];
        sum += src[c];
      }
    l[pos0 + rr] += sum;
  }
  float *o = sc->o + ((size_t)(i + 1) * (size_t)rp + (size_t)pos0) * (size_t)pb->D_pad;
  stsa_pv_panels(pb->kern, sc->pm + lo, ld, hi - lo, vp + (int64_t)lo * pb->nr,
                 (int64_t)ld * pb->nr, pb->D_pad / pb->nr, o, pb->D_pad, sc->ones);
}

/* The masks' sums follow the dense maximum: rows whose maximum moved are
 * rescaled like the dense ones (alpha). */
static void rescale_masks(const stsa_rows_fused *f, int64_t h, fused_scratch *sc) {
  const stsa_attn_problem *pb = f->pb;
  const int rp = pb->q_tile, R = (int)pb->Sq;
  for (int i = 0; i < f->n; i++)
    for (int pos = 0; pos < R; pos++) {
      const int32_t *order = mask_order(f, i, h);
      const int r = order ? order[pos] : pos;
      const float a = sc->alpha[r];
      if (a == 1.0f)
        continue;
      float *o = sc->o + ((size_t)(i + 1) * (size_t)rp + (size_t)pos) * (size_t)pb->D_pad;
      for (int d = 0; d < pb->D; d++)
        o[d] *= a;
      sc->l[(size_t)(i + 1) * (size_t)rp + (size_t)pos] *= a;
    }
}

/* Kv tile kt: packs it, scores, dense P.V, every mask's P.V. 0, or -1 when
 * the tile is outside the pass's assumptions. */
static int run_tile(const stsa_rows_fused *f, const stsa_attn_problem *pt, int64_t h,
                    int64_t kt, float q_max, fused_scratch *sc) {
  const stsa_attn_problem *pb = f->pb;
  const stsa_kernels *kern = pb->kern;
  const int D = pb->D, nr = pb->nr, ld = pb->kv_tile, rp = pb->q_tile, mr = pb->mr;
  stsa_kv_span sp = stsa_kv_span_of(pb, NULL, NULL, kt);
  sp.pack0 = 0;
  stsa_pack_kv_span(pt, 0, h, 0, &sp, NULL, &sc->kv);
  if (!((double)q_max * sc->kv.k_max[0] * D < LOGIT_SAFE) || sc->kv.v_nonfinite[0] ||
      stsa_v_exp_for(pb, sc->kv.v_max[0]) != 0) /* V the tile loop must scale */
    return -1;
  /* the f32 engine's tile-wide steps (tile_f32.h), as on a PARTIAL tile:
   * the masks take their probabilities from the dense ones in between */
  const int n = sp.n, npanels = (n + nr - 1) / nr;
  stsa_tile_qk_f32(pb, sc->q, sc->kv.kt, npanels, rp, sc->s, ld, sc->tile_max);
  kern->softmax(sc->s, ld, rp, n, sc->m, sc->l, sc->alpha,
                n % nr == 0 ? sc->tile_max : NULL);
  rescale_masks(f, h, sc);
  stsa_tile_pv_f32(pb, sc->s, ld, n, sc->kv.vp, ld, rp, sc->o, sc->alpha);
  for (int i = 0; i < f->n; i++) {
    const stsa_block_sparse *bs = mask_bs(f, i, h);
    int64_t e = sc->cursor[i];
    if (e < bs->tile_ptr[1] && bs->kv_tile[e] == kt)
      sc->cursor[i]++;
    else
      e = -1; /* the mask keeps nothing of this tile */
    for (int pos0 = 0; e >= 0 && pos0 < pb->Sq; pos0 += mr)
      mask_block(f, i, h, e, pos0, n, sc->kv.vp, sc);
  }
  return 0;
}

/* Normalised rows of output `which` (0 dense, i + 1 mask i) to `out`. */
static void store(const stsa_rows_fused *f, int which, int64_t h, const stsa_tensor *out,
                  fused_scratch *sc) {
  const stsa_attn_problem *pb = f->pb;
  const int rp = pb->q_tile;
  const int32_t *order = which ? mask_order(f, which - 1, h) : NULL;
  for (int pos = 0; pos < pb->Sq; pos++) {
    const float l = sc->l[(size_t)which * (size_t)rp + (size_t)pos];
    const float *o =
        sc->o + ((size_t)which * (size_t)rp + (size_t)pos) * (size_t)pb->D_pad;
    const float inv = l > 0 ? 1.0f / l : 0.0f; /* 0: the mask keeps nothing of the row */
    for (int d = 0; d < pb->D; d++)
      sc->row[d] = o[d] * inv;
    const int r = order ? order[pos] : pos;
    stsa_store_row(sc->row, pb->D, stsa_tensor_row(out, 0, r, h), out->dtype,
                   out->stride[3]);
  }
}

/* Head h; 0, or -1 when it met a tile outside the pass's assumptions. */
static int run_head(const stsa_rows_fused *f, int64_t h, fused_scratch *sc) {
  const stsa_attn_problem *pb = f->pb;
  const stsa_attn_problem pt = one_tile_problem(pb);
  const int rp = pb->q_tile;
  /* +inf for NaN/Inf: the pass then declines */
  const float q_max =
      stsa_load_q_tile(pb, pb->qscale, 0, h, 0, (int)pb->Sq, rp, NULL, sc->q);
  memset(sc->o, 0, sizeof(float) * (size_t)(f->n + 1) * (size_t)rp * (size_t)pb->D_pad);
  memset(sc->l, 0, sizeof(float) * (size_t)(f->n + 1) * (size_t)rp);
  for (int r = 0; r < rp; r++)
    sc->m[r] = -INFINITY;
  for (int i = 0; i < f->n; i++)
    sc->cursor[i] = (int32_t)mask_bs(f, i, h)->tile_ptr[0];
  for (int64_t kt = 0; kt < stsa_kv_tiles(pb); kt++)
    if (run_tile(f, &pt, h, kt, q_max, sc) != 0)
      return -1;
  store(f, 0, h, pb->out, sc);
  for (int i = 0; i < f->n; i++)
    store(f, i + 1, h, f->out[i], sc);
  return 0;
}

stsa_status stsa_rows_fused_run(const stsa_rows_fused *f, int threads, stsa_workspace *ws,
                                int *finite_ok) {
  const int64_t H = f->pb->H;
  *finite_ok = !f->pb->k_fit; /* a K the general path scales (kv_pack.h) */
  if (f->pb->k_fit)
    return STSA_OK;
  threads = threads < H ? threads : (int)H;
  threads = threads > 0 ? threads : 1;
  const size_t per = scratch_floats(f);
  float *mem = stsa_workspace_get(ws, sizeof(float) * per * (size_t)threads);
  if (!mem)
    return STSA_ERR_OUT_OF_MEMORY;
  int bad = 0;
#pragma omp parallel num_threads(threads) reduction(| : bad)
  {
    fused_scratch sc = fused_scratch_at(f, mem + per * (size_t)omp_get_thread_num());
#pragma omp for schedule(dynamic, 1)
    for (int64_t h = 0; h < H; h++)
      bad |= run_head(f, h, &sc) != 0;
  }
  *finite_ok = !bad;
  return STSA_OK;
}
