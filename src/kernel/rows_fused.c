/* rows_fused.c — see rows_fused.h. */
#include "kernel/rows_fused.h"

#include <math.h>
#include <omp.h>
#include <string.h>

#include "core/convert.h"
#include "core/tensor.h"
#include "kernel/rows_fused_bf16.h"
#include "kernel/tile_f32.h"
#include "kernel/tile_rows.h"
#include "kernel/tile_values.h"

static size_t align16(size_t floats) { return (floats + 15) / 16 * 16; }

/* One thread's memory, in floats, laid out by fused_scratch_at. ld: the
 * problem's kv_stride (the kv tile, rounded up to 32 keys with bf16 tiles);
 * a block: the rows one masked P.V takes (mr, or 32 with bf16 tiles). */
typedef struct fused_scratch {
  stsa_kv_packed kv; /* one kv tile, packed at row 0 */
  float *q;          /* [rows_pad][D], pre-scaled (f32 panels) */
  uint16_t *qb;      /* [rows_pad][D32] bf16 rows (bf16 tiles) */
  uint16_t *terms;   /* [STSA_ROWS_BF16_TERMS][32][ld] the bf16 terms of P (bf16 tiles) */
  float *s;          /* [rows_pad][ld] scores, then dense probabilities */
  float *pm;         /* [block][ld] one row block's masked probabilities */
  float *o;          /* [1 + n][rows_pad][D_pad]: dense, then mask i in its order */
  float *l;          /* [1 + n][rows_pad] */
  float *m, *alpha, *tile_max, *row;
  float *t;         /* [rows_pad][D_pad] the tile's own dense P.V (mask_tile) */
  float *t_sum;     /* [rows_pad] the tile's dense probabilities summed per row */
  float *c;         /* [block][D_pad] one row block's masked P.V */
  float *zeros;     /* [rows_pad] an alpha that starts a sum afresh */
  int32_t *cursor;  /* [n] mask i's next entry */
  int32_t *partial; /* [rows_pad] positions of the rows keeping part of a tile */
} fused_scratch;

/* The packing view of a problem whose kv tiles go one at a time to row 0. */
static stsa_attn_problem one_tile_problem(const stsa_attn_problem *pb) {
  stsa_attn_problem t = *pb;
  t.Skv_pad = pb->kv_stride;
  return t;
}

/* Rows of one masked P.V (mask_block). */
static int block_rows(const stsa_attn_problem *pb) {
  return pb->bf16_tiles ? STSA_BF16_PASS_ROWS : pb->mr;
}

/* Floats of each piece, in the order fused_scratch_at lays them out. */
enum { PIECES = 16 };
static void piece_sizes(const stsa_rows_fused *f, size_t sz[PIECES]) {
  const stsa_attn_problem *pb = f->pb, pt = one_tile_problem(pb);
  const size_t rp = (size_t)pb->q_tile, ld = (size_t)pb->kv_stride, D = (size_t)pb->D,
               Dp = (size_t)pb->D_pad, n1 = (size_t)f->n + 1, br = (size_t)block_rows(pb),
               bf16 = pb->bf16_tiles != 0;
  const size_t s[PIECES] = {
      align16(stsa_kv_packed_floats(&pt)),
      bf16 * align16(rp * (size_t)pb->D32 / 2),
      bf16 * align16(STSA_ROWS_BF16_TERMS * STSA_BF16_PASS_ROWS * ld / 2),
      align16(rp * D),
      align16(rp * ld),
      align16(br * ld),
      align16(n1 * rp * Dp),
      align16(n1 * rp),
      align16(3 * rp),
      align16(Dp),
      align16(rp * Dp),
      align16(rp),
      align16(br * Dp),
      align16(rp),
      align16((size_t)f->n),
      align16(rp)};
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
  const stsa_attn_problem pt = one_tile_problem(f->pb);
  fused_scratch sc = {.kv = stsa_kv_packed_at(&pt, p[0]), /* one tile's pack */
                      .qb = (uint16_t *)(void *)p[1],
                      .terms = (uint16_t *)(void *)p[2],
                      .q = p[3],
                      .s = p[4],
                      .pm = p[5],
                      .o = p[6],
                      .l = p[7],
                      .m = p[8],
                      .alpha = p[8] + rp,
                      .tile_max = p[8] + 2 * rp,
                      .row = p[9],
                      .t = p[10],
                      .t_sum = p[11],
                      .c = p[12],
                      .zeros = p[13],
                      .cursor = (int32_t *)(void *)p[14],
                      .partial = (int32_t *)(void *)p[15]};
  memset(sc.zeros, 0, sizeof(float) * (size_t)rp);
  return sc;
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

/* The kernels for a block of `rows` valid rows: the half table's where they
 * fit (kernels.h: half), so a short last block does not pad to mr. */
static const stsa_kernels *block_kernels(const stsa_kernels *k, int rows) {
  return k->half && rows <= k->half->mr ? k->half : k;
}

/* o += x over D floats. */
static void add_row(float *restrict o, const float *restrict x, int D) {
  for (int d = 0; d < D; d++)
    o[d] += x[d];
}

/* P.V of the rows of mask i at positions pos[0..count) (count <= mr), each
 * keeping part of the tile: their dense probabilities on the kept pairs
 * (zeros elsewhere) over the union of their kept columns, added to the
 * mask's sums. Rows in mask order share most of their columns. */
static void mask_block(const stsa_rows_fused *f, int i, int64_t h, int64_t e,
                       const int32_t *pos, int count, int n, const float *vp,
                       fused_scratch *sc) {
  const stsa_attn_problem *pb = f->pb;
  const stsa_block_sparse *bs = mask_bs(f, i, h);
  const int32_t *order = mask_order(f, i, h);
  /* f32 panels: the table's register tile, padding rows zeros */
  const stsa_kernels *kern = block_kernels(pb->kern, count);
  const int ld = pb->kv_stride, rp = pb->q_tile, D_pad = pb->D_pad;
  const int rows = pb->bf16_tiles ? count : kern->mr;
  uint16_t full[2];
  int lo = n, hi = 0;
  for (int rr = 0; rr < count; rr++) {
    const uint16_t *iv;
    const int k = row_intervals(bs, e, order ? order[pos[rr]] : pos[rr], n, full, &iv);
    lo = iv[0] < lo ? iv[0] : lo;
    hi = iv[2 * k - 1] > hi ? iv[2 * k - 1] : hi;
  }
  float *l = sc->l + (size_t)(i + 1) * (size_t)rp;
  for (int rr = 0; rr < rows; rr++) {
    float *dst = sc->pm + (size_t)rr * (size_t)ld;
    memset(dst + lo, 0, sizeof(float) * (size_t)(hi - lo));
    if (rr >= count)
      continue;
    const int r = order ? order[pos[rr]] : pos[rr];
    const float *src = sc->s + (size_t)r * (size_t)ld;
    const uint16_t *iv;
    const int k = row_intervals(bs, e, r, n, full, &iv);
    float sum = 0;
    for (int j = 0; j < k; j++)
      for (int c = iv[2 * j]; c < iv[2 * j + 1]; c++) {
        dst[c] = src[c];
        sum += src[c];
      }
    l[pos[rr]] += sum;
  }
  /* the sums start afresh in c (its rows are finite: written by the last
   * block, or zeroed by run_head), then go to the rows' own places */
  if (pb->bf16_tiles)
    stsa_rows_bf16_pv(pb, sc->pm, ld, count, lo, hi, sc->kv.vb, pb->kv_stride / 32 * 512,
                      sc->terms, sc->c, D_pad);
  else
    stsa_pv_panels(kern, sc->pm + lo, ld, hi - lo, vp + (int64_t)lo * pb->nr,
                   (int64_t)ld * pb->nr, D_pad / pb->nr, sc->c, D_pad, sc->zeros);
  for (int rr = 0; rr < count; rr++)
    add_row(sc->o + ((size_t)(i + 1) * (size_t)rp + (size_t)pos[rr]) * (size_t)D_pad,
            sc->c + (size_t)rr * (size_t)D_pad, pb->D);
}

/* Mask i on the tile of its entry e: a row that keeps the whole tile takes
 * the tile's dense sums (sc->t, sc->t_sum) as they are, a row that keeps
 * part of it a P.V of its kept columns, a row that keeps none of it nothing.
 * SVG's spatial mask keeps whole frames and its temporal one runs of
 * positions, so most of the pairs they keep lie in tiles a row keeps whole:
 * a P.V for every kept column cost 1.6 x the dense P.V at Wan 480p. */
static void mask_tile(const stsa_rows_fused *f, int i, int64_t h, int64_t e, int n,
                      const float *vp, fused_scratch *sc) {
  const stsa_attn_problem *pb = f->pb;
  const stsa_block_sparse *bs = mask_bs(f, i, h);
  const int32_t *order = mask_order(f, i, h);
  const int rp = pb->q_tile, R = (int)pb->Sq;
  float *o = sc->o + (size_t)(i + 1) * (size_t)rp * (size_t)pb->D_pad;
  float *l = sc->l + (size_t)(i + 1) * (size_t)rp;
  int partial = 0;
  for (int pos = 0; pos < R; pos++) {
    const int r = order ? order[pos] : pos;
    uint16_t full[2];
    const uint16_t *iv;
    const int k = row_intervals(bs, e, r, n, full, &iv);
    if (k == 1 && iv[0] == 0 && iv[1] == n) { /* the whole tile */
      add_row(o + (size_t)pos * (size_t)pb->D_pad, sc->t + (size_t)r * (size_t)pb->D_pad,
              pb->D);
      l[pos] += sc->t_sum[r];
    } else if (k > 0) {
      sc->partial[partial++] = pos;
    }
  }
  const int br = block_rows(pb);
  for (int b = 0; b < partial; b += br)
    mask_block(f, i, h, e, sc->partial + b, partial - b < br ? partial - b : br, n, vp,
               sc);
}

/* The tile's dense P.V on its own (sc->t), then o = alpha o + t and
 * l = alpha l + t_sum for the dense rows. */
static void dense_tile(const stsa_rows_fused *f, int n, fused_scratch *sc) {
  const stsa_attn_problem *pb = f->pb;
  const int ld = pb->kv_stride, rp = pb->q_tile, D_pad = pb->D_pad, R = (int)pb->Sq;
  if (pb->bf16_tiles)
    stsa_rows_bf16_pv(pb, sc->s, ld, R, 0, n, sc->kv.vb, ld / 32 * 512, sc->terms, sc->t,
                      D_pad);
  else
    stsa_tile_pv_f32(pb, sc->s, ld, n, sc->kv.vp, ld, rp, sc->t, sc->zeros);
  for (int r = 0; r < R; r++) {
    const float *restrict t = sc->t + (size_t)r * (size_t)D_pad;
    float *restrict o = sc->o + (size_t)r * (size_t)D_pad;
    const float a = sc->alpha[r];
    for (int d = 0; d < pb->D; d++)
      o[d] = a * o[d] + t[d];
    sc->l[r] = a * sc->l[r] + sc->t_sum[r];
  }
}

/* A pass of dense rows alone on bf16 tiles: the tile through the table's
 * bf16 engine (kernels.h: full_tile_bf16), whose softmax writes each
 * probability's terms as it goes and adds the tile's P.V to o, as a FULL
 * tile of the attention. The masks' tiles cannot go there: they take the
 * dense f32 probabilities and the tile's own dense P.V (mask_tile). At Wan
 * 480p, 332 bf16 rows of two heads: see docs/benchmarks.md, "Dense rows on
 * the bf16 engine". */
static void dense_tile_engine(const stsa_attn_problem *pb, int n, fused_scratch *sc) {
  const stsa_bf16_tile t = {.q = sc->qb,
                            .kb = sc->kv.kb,
                            .vb = sc->kv.vb,
                            .v_panel = pb->kv_stride / 32 * 512,
                            .D32 = pb->D32,
                            .D_pad = pb->D_pad,
                            .rows_pad = pb->q_tile,
                            .n = n,
                            .score_scale = pb->bf16_score_scale,
                            .safe = 1, /* run_tile declined the tiles that are not */
                            .s = sc->s,
                            .ld_s = pb->kv_stride,
                            /* two planes of 32 rows: the engine's two terms */
                            .p = sc->terms,
                            .terms = STSA_ROWS_BF16_TERMS,
                            .c = sc->c,
                            .o = sc->o,
                            .m = sc->m,
                            .l = sc->l,
                            .alpha = sc->alpha,
                            .D = pb->D};
  pb->kern->full_tile_bf16(&t);
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

/* Kv tile kt: packs it, scores, dense P.V, every mask's P.V. q_max: max
 * |q| of the rows in log2-unit logits a unit of K makes. 0, or -1 when the
 * tile is outside the pass's assumptions. */
static int run_tile(const stsa_rows_fused *f, const stsa_attn_problem *pt, int64_t h,
                    int64_t kt, float q_max, fused_scratch *sc) {
  const stsa_attn_problem *pb = f->pb;
  const stsa_kernels *kern = pb->kern;
  const int D = pb->D, nr = pb->nr, ld = pb->kv_stride, rp = pb->q_tile;
  stsa_kv_span sp = stsa_kv_span_of(pb, NULL, NULL, kt);
  sp.pack0 = 0;
  stsa_pack_kv_span(pt, 0, h, 0, &sp, NULL, &sc->kv);
  if (!((double)q_max * sc->kv.k_max[0] * D < LOGIT_SAFE) || sc->kv.v_nonfinite[0] ||
      stsa_v_exp_for(pb, sc->kv.v_max[0]) != 0) /* V the tile loop must scale */
    return -1;
  /* the f32 engine's tile-wide steps (tile_f32.h), as on a PARTIAL tile,
   * or their bf16 products (rows_fused_bf16.h): the masks take their
   * probabilities from the dense ones in between */
  const int n = sp.n, npanels = (n + nr - 1) / nr;
  if (f->n == 0 && pb->bf16_tiles && kern->full_tile_bf16) {
    dense_tile_engine(pb, n, sc);
    return 0;
  }
  if (pb->bf16_tiles)
    stsa_rows_bf16_scores(pb, sc->qb, rp, sc->kv.kb, n, sc->s, ld);
  else
    stsa_tile_qk_f32(pb, sc->q, sc->kv.kt, npanels, rp, sc->s, ld, sc->tile_max);
  /* the tile's row sums on their own (t_sum from 0: l = alpha 0 + sum), which
   * rows that keep the whole tile take for their masks */
  memset(sc->t_sum, 0, sizeof(float) * (size_t)rp);
  kern->softmax(sc->s, ld, rp, n, sc->m, sc->t_sum, sc->alpha,
                !pb->bf16_tiles && n % nr == 0 ? sc->tile_max : NULL);
  rescale_masks(f, h, sc);
  dense_tile(f, n, sc);
  for (int i = 0; i < f->n; i++) {
    const stsa_block_sparse *bs = mask_bs(f, i, h);
    int64_t e = sc->cursor[i];
    if (e < bs->tile_ptr[1] && bs->kv_tile[e] == kt)
      sc->cursor[i]++;
    else
      e = -1; /* the mask keeps nothing of this tile */
    if (e >= 0)
      mask_tile(f, i, h, e, n, sc->kv.vp, sc);
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
      pb->bf16_tiles
          ? stsa_load_q_tile_bf16(pb, 0, 0, h, 0, (int)pb->Sq, rp, NULL, sc->qb) *
                pb->bf16_score_scale
          : stsa_load_q_tile(pb, pb->qscale, 0, h, 0, (int)pb->Sq, rp, NULL, sc->q);
  memset(sc->o, 0, sizeof(float) * (size_t)(f->n + 1) * (size_t)rp * (size_t)pb->D_pad);
  memset(sc->l, 0, sizeof(float) * (size_t)(f->n + 1) * (size_t)rp);
  /* finite before the first sums start afresh in them (alpha 0: 0 * NaN) */
  memset(sc->t, 0, sizeof(float) * (size_t)rp * (size_t)pb->D_pad);
  memset(sc->c, 0, sizeof(float) * (size_t)block_rows(pb) * (size_t)pb->D_pad);
  for (int r = 0; r < rp; r++)
    sc->m[r] = -INFINITY;
  for (int i = 0; i < f->n; i++)
    sc->cursor[i] = (int32_t)mask_bs(f, i, h)->tile_ptr[0];
  const int on = !f->heads_on || f->heads_on[h]; /* off: o and l stay 0, zero rows */
  for (int64_t kt = 0; on && kt < stsa_kv_tiles(pb); kt++)
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
