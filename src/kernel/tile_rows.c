/* tile_rows.c — see tile_rows.h. */
#include "kernel/tile_rows.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "core/convert.h"
#include "core/tensor.h"
#include "kernel/tile_values.h"

#define LN2 0.6931471805599453

/* The bf16 bits of a value that came from bf16 (exact: its low half is 0). */
static uint16_t bf16_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return (uint16_t)(u >> 16);
}

/* Rows of a permuted q tile prefetched ahead of the one loading: they come
 * from anywhere in q (clusters), which the hardware prefetcher does not
 * follow (a warm Wan-480p SVG2 call 0.5% faster in f32, 1.5% in bf16). */
#define QROW_AHEAD 8

/* Prefetches q row r of a permuted tile of `rows` rows, `bytes` of it
 * (prefetched_row_bytes; nothing past the tile or for a tile in token
 * order). */
static void prefetch_q_row(const stsa_attn_problem *pb, int64_t b, int64_t h, int64_t q0,
                           int r, int rows, const int64_t *q_rows, int64_t bytes) {
  if (q_rows && r < rows)
    stsa_prefetch_bytes(stsa_tensor_row(pb->q, b, q_rows[q0 + r], h), bytes);
}

/* Loads the q tile's rows, scaled into log2 units (times qscale, the
 * problem's times the head's 2^-k_exp); padding rows are zero. Returns max
 * |q'| over the scaled tile (+inf for NaN/Inf). */
float stsa_load_q_tile(const stsa_attn_problem *pb, float qscale, int64_t b, int64_t h,
                       int64_t q0, int rows, int rows_pad, const int64_t *q_rows,
                       float *qbuf) {
  const int D = pb->D;
  uint32_t q_max = 0;
  const int64_t q_bytes = stsa_prefetched_row_bytes(pb->q, pb->D);
  for (int r = 0; r < QROW_AHEAD; r++)
    prefetch_q_row(pb, b, h, q0, r, rows, q_rows, q_bytes);
  for (int r = 0; r < rows; r++) {
    float *dst = qbuf + (int64_t)r * D;
    int64_t tok = q_rows ? q_rows[q0 + r] : q0 + r;
    prefetch_q_row(pb, b, h, q0, r + QROW_AHEAD, rows, q_rows, q_bytes);
    pb->kern->load_row(stsa_tensor_row(pb->q, b, tok, h), pb->q->dtype, pb->q->stride[3],
                       D, dst);
    for (int d = 0; d < D; d++)
      dst[d] *= qscale;
    uint32_t qm = stsa_abs_max_bits(dst, D);
    q_max = qm > q_max ? qm : q_max;
  }
  memset(qbuf + (int64_t)rows * D, 0,
         sizeof(float) * (size_t)(rows_pad - rows) * (size_t)D);
  return stsa_abs_max_value(q_max);
}

/* The q tile's rows as bf16 times bf16_q_pow2 2^-k_exp, D32 long (zeros
 * past D and in padding rows): the A operand of full_tile_bf16, in place of
 * stsa_load_q_tile's f32 rows. A power of two changes the exponent only, so the
 * bf16 significand is kept; values it takes below f32's normal range are
 * flushed, as the tile unit would. Returns what stsa_load_q_tile returns, max
 * |q| times the head's qscale (+inf for NaN/Inf), for the tile loop's safety
 * test. */
float stsa_load_q_tile_bf16(const stsa_attn_problem *pb, int k_exp, int64_t b, int64_t h,
                            int64_t q0, int rows, int rows_pad, const int64_t *q_rows,
                            uint16_t *qb) {
  const float pow2 = ldexpf(pb->bf16_q_pow2, -k_exp);
  float row[STSA_MAX_HEAD_DIM];
  uint32_t q_max = 0;
  memset(qb, 0, sizeof(uint16_t) * (size_t)rows_pad * (size_t)pb->D32);
  const int64_t q_bytes = stsa_prefetched_row_bytes(pb->q, pb->D);
  for (int r = 0; r < QROW_AHEAD; r++)
    prefetch_q_row(pb, b, h, q0, r, rows, q_rows, q_bytes);
  for (int r = 0; r < rows; r++) {
    const int64_t tok = q_rows ? q_rows[q0 + r] : q0 + r;
    prefetch_q_row(pb, b, h, q0, r + QROW_AHEAD, rows, q_rows, q_bytes);
    pb->kern->load_row(stsa_tensor_row(pb->q, b, tok, h), pb->q->dtype, pb->q->stride[3],
                       pb->D, row);
    const uint32_t qm = stsa_abs_max_bits(row, pb->D);
    q_max = qm > q_max ? qm : q_max;
    for (int d = 0; d < pb->D; d++) {
      const float x = row[d] * pow2;
      qb[(int64_t)r * pb->D32 + d] = fpclassify(x) == FP_SUBNORMAL
                                         ? (uint16_t)(signbit(x) ? 0x8000u : 0)
                                         : bf16_bits(x);
    }
  }
  return stsa_abs_max_value(q_max) * ldexpf(pb->qscale, -k_exp);
}

/* Normalises the finished rows and writes them in the caller's layout:
 * rows of a permuted tile (q_rows) scattered, by streaming stores. */
void stsa_store_q_tile(const stsa_attn_problem *pb, int64_t b, int64_t h, int64_t q0,
                       int rows, const int64_t *q_rows, int v_exp,
                       const stsa_tile_scratch *sc) {
  const stsa_tensor *out = pb->out;
  void (*store)(const float *, int64_t, void *, stsa_dtype, int64_t) =
      q_rows ? stsa_store_row_streaming : stsa_store_row;
  for (int r = 0; r < rows; r++) {
    const float *o = sc->o + (int64_t)r * pb->D_pad;
    float l = sc->l[r], m = sc->m[r];
    float lse;
    if (isnan(l) || m == KEPT_NEG_INF) {
      /* a NaN or +inf logit reached the row sum, or only -inf ones were kept */
      for (int d = 0; d < pb->D; d++)
        sc->row[d] = NAN;
      lse = NAN;
    } else if (l == 0.0f) {
      /* the mask keeps nothing of this row (kept logits make l >= 1) */
      for (int d = 0; d < pb->D; d++)
        sc->row[d] = 0.0f;
      lse = -INFINITY;
    } else {
      float inv = 1.0f / l;
      for (int d = 0; d < pb->D; d++)
        sc->row[d] = o[d] * inv;
      /* V was scaled down (stsa_kv_packed): back, and a mean of V a rounding
       * put past FLT_MAX back to it */
      for (int d = 0; v_exp && d < pb->D; d++) {
        const float x = ldexpf(sc->row[d], v_exp);
        sc->row[d] = isinf(x) ? copysignf(FLT_MAX, x) : x;
      }
      /* only when asked: a log2 per row was 0.2% of an SVG2 call */
      lse = pb->lse ? (float)(LN2 * ((double)m + log2((double)l))) : 0.0f;
    }
    int64_t tok = q_rows ? q_rows[q0 + r] : q0 + r;
    store(sc->row, pb->D, stsa_tensor_row(out, b, tok, h), out->dtype, out->stride[3]);
    if (pb->lse)
      pb->lse[(b * pb->H + h) * pb->Sq + tok] = lse;
  }
  if (q_rows)
    stsa_store_fence();
}
