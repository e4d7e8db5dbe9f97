/* kv_pack.c — see kv_pack.h. */
#include "kernel/kv_pack.h"

#include <math.h>
#include <string.h>

#include "core/convert.h"
#include "core/tensor.h"
#include "kernel/tile_values.h"

/* Floats of the f32 K^T and V panels, and of the bf16 K and V blocks:
 * problems with bf16 tiles have only the blocks, the others only panels. */
static size_t f32_panels_floats(const stsa_attn_problem *pb) {
  return pb->bf16_tiles ? 0 : (size_t)pb->Skv_pad * (size_t)(pb->D + pb->D_pad);
}
static size_t bf16_blocks_floats(const stsa_attn_problem *pb) {
  return pb->bf16_tiles
             ? stsa_align64((size_t)pb->Skv_pad * (size_t)(pb->D32 + pb->D_pad) / 2)
             : 0;
}

size_t stsa_kv_packed_floats(const stsa_attn_problem *pb) {
  size_t tiles = (size_t)stsa_kv_tiles(pb);
  return f32_panels_floats(pb) + 2 * stsa_align64(tiles) + stsa_align64((tiles + 3) / 4) +
         bf16_blocks_floats(pb);
}

stsa_kv_packed stsa_kv_packed_at(const stsa_attn_problem *pb, float *mem) {
  size_t tiles = (size_t)stsa_kv_tiles(pb);
  stsa_kv_packed p;
  memset(&p, 0, sizeof p);
  if (!pb->bf16_tiles) {
    p.kt = mem;
    p.vp = p.kt + (size_t)pb->Skv_pad * (size_t)pb->D;
  }
  p.k_max = mem + f32_panels_floats(pb);
  p.v_max = p.k_max + stsa_align64(tiles);
  p.v_nonfinite = (uint8_t *)(p.v_max + stsa_align64(tiles));
  if (pb->bf16_tiles) {
    p.kb = (uint16_t *)(void *)(p.v_max + stsa_align64(tiles) +
                                stsa_align64((tiles + 3) / 4));
    p.vb = p.kb + (size_t)pb->Skv_pad * (size_t)pb->D32;
  }
  return p;
}

/* The K and V rows of span positions [p0, p0 + count) (NULL past the
 * span's n keys). */
static void span_rows(const stsa_attn_problem *pb, int64_t b, int64_t h,
                      const stsa_kv_span *sp, const int64_t *kv_rows, int p0, int count,
                      const void **k, const void **v) {
  for (int c = 0; c < count; c++) {
    const int p = p0 + c;
    k[c] = v[c] = NULL;
    if (p < sp->n) {
      const int64_t pos = sp->k0 + p, tok = kv_rows ? kv_rows[pos] : pos;
      k[c] = stsa_tensor_row(pb->k, b, tok, h);
      v[c] = stsa_tensor_row(pb->v, b, tok, h);
    }
  }
}

/* The next keys' K and V rows (up to the first NULL), while the current
 * ones pack: a permuted span (clusters, position-major heads) reads rows
 * from anywhere in the tensor, which the hardware prefetcher does not
 * follow (without this the packing waited on its V loads). Strided rows:
 * their first element. */
static void prefetch_key_rows(const stsa_attn_problem *pb, const void *const *k,
                              const void *const *v, int count) {
  const int64_t k_bytes = stsa_prefetched_row_bytes(pb->k, pb->D),
                v_bytes = stsa_prefetched_row_bytes(pb->v, pb->D);
  for (int c = 0; c < count && k[c]; c++) {
    stsa_prefetch_bytes(k[c], k_bytes);
    stsa_prefetch_bytes(v[c], v_bytes);
  }
}

/* A kv tile of a problem with bf16 tiles: K and V straight from the bf16
 * tensors into the bf16 blocks (stsa_kv_packed: kb, vb) sixteen keys at a
 * time (kernels.h: pack_bf16), zeros past n and past D, and the tile's max
 * |K| and V's non-finite flag from the bits (|x| orders as its bits without
 * the sign, NaN and Inf at 0x7f80 up). */
static void pack_bf16_span(const stsa_attn_problem *pb, int64_t b, int64_t h,
                           int64_t tile, const stsa_kv_span *sp, const int64_t *kv_rows,
                           stsa_kv_packed *dst) {
  const int64_t chunks = pb->D32 / 32, v_panel = pb->Skv_pad / 32 * 512;
  void (*pack)(const stsa_bf16_rows *, uint16_t *, uint16_t *, int64_t, uint32_t *) =
      pb->kern->pack_bf16 ? pb->kern->pack_bf16 : stsa_pack_bf16_rows;
  stsa_bf16_rows rows[2] = {{.k_stride = pb->k->stride[3],
                             .v_stride = pb->v->stride[3],
                             .D = pb->D,
                             .D32 = pb->D32,
                             .D_pad = pb->D_pad}};
  rows[1] = rows[0];
  uint32_t abs_bits[2] = {0, 0};
  span_rows(pb, b, h, sp, kv_rows, 0, 16, rows[0].k, rows[0].v);
  /* pack0 and len are multiples of 32 */
  for (int p0 = 0, i = 0; p0 < sp->len; p0 += 16, i ^= 1) {
    if (p0 + 16 < sp->len) {
      span_rows(pb, b, h, sp, kv_rows, p0 + 16, 16, rows[i ^ 1].k, rows[i ^ 1].v);
      prefetch_key_rows(pb, rows[i ^ 1].k, rows[i ^ 1].v, 16);
    }
    const int64_t r = sp->pack0 + p0;
    pack(&rows[i], dst->kb + r / 16 * chunks * 512,
         dst->vb + r / 32 * 512 + r % 32 / 2 * 32, v_panel, abs_bits);
  }
  dst->k_max[tile] = stsa_abs_max_value(abs_bits[0] << 16);
  dst->v_max[tile] = stsa_abs_max_value(abs_bits[1] << 16);
  dst->v_nonfinite[tile] = abs_bits[1] >= 0x7f80u;
}

/* A panel's contiguous K rows up to this many bytes each are copied, row
 * by row, into a buffer on the stack before pack_panel reads them:
 * pack_panel transposes K in blocks, one cache line of each of nr rows at a
 * time, and on rows fresh from memory that order ran at half the speed of
 * reading the rows whole (AMD Zen 5, a Wan-480p head's K and V in 16-key
 * panels: 11.3 Mcycles packed from the tensor, 6.1 through the copy; 1.8
 * from rows already in L1). V is read row by row already. */
enum { STAGED_ROW_BYTES = 1024 };

/* Points rows->k at copies of its contiguous K rows in stage (nr x
 * STAGED_ROW_BYTES); K rows of other strides or longer stay as they are. */
static void stage_k_rows(stsa_panel_rows *rows, unsigned char *stage) {
  const size_t bytes = (size_t)rows->D * stsa_dtype_size(rows->k_dtype);
  if (rows->k_stride != 1 || bytes > STAGED_ROW_BYTES)
    return;
  for (int c = 0; c < rows->nr && rows->k[c]; c++) {
    memcpy(stage + (size_t)c * bytes, rows->k[c], bytes);
    rows->k[c] = stage + (size_t)c * bytes;
  }
}

void stsa_pack_kv_span(const stsa_attn_problem *pb, int64_t b, int64_t h, int64_t tile,
                       const stsa_kv_span *sp, const int64_t *kv_rows,
                       stsa_kv_packed *dst) {
  if (pb->bf16_tiles) {
    pack_bf16_span(pb, b, h, tile, sp, kv_rows, dst);
    return;
  }
  const int nr = pb->nr;
  stsa_panel_rows rows[2] = {{.k_dtype = pb->k->dtype,
                              .v_dtype = pb->v->dtype,
                              .k_stride = pb->k->stride[3],
                              .v_stride = pb->v->stride[3],
                              .D = pb->D,
                              .D_pad = pb->D_pad,
                              .nr = nr,
                              .load_row = pb->kern->load_row}};
  rows[1] = rows[0];
  uint32_t abs_bits[2] = {0, 0};
  _Alignas(64) unsigned char stage[STSA_MAX_NR * STAGED_ROW_BYTES];
  span_rows(pb, b, h, sp, kv_rows, 0, nr, rows[0].k, rows[0].v);
  /* pack0 and len are multiples of nr */
  for (int p0 = 0, i = 0; p0 < sp->len; p0 += nr, i ^= 1) {
    if (p0 + nr < sp->len) {
      span_rows(pb, b, h, sp, kv_rows, p0 + nr, nr, rows[i ^ 1].k, rows[i ^ 1].v);
      prefetch_key_rows(pb, rows[i ^ 1].k, rows[i ^ 1].v, nr);
    }
    const int64_t r = sp->pack0 + p0;
    stsa_panel_rows staged = rows[i];
    stage_k_rows(&staged, stage);
    pb->kern->pack_panel(&staged, dst->kt + (r / nr) * pb->D * nr, dst->vp + r * nr,
                         pb->Skv_pad * nr, abs_bits);
  }
  dst->k_max[tile] = stsa_abs_max_value(abs_bits[0]);
  dst->v_max[tile] = stsa_abs_max_value(abs_bits[1]);
  dst->v_nonfinite[tile] = abs_bits[1] >= 0x7f800000u;
}

int stsa_v_exp_for(const stsa_attn_problem *pb, float v_max) {
  const double reach = (double)v_max * (double)pb->Skv_pad;
  if (!(reach >= STSA_V_SUM_LIMIT) || isinf(v_max))
    return 0;
  int e;
  (void)frexp(reach / STSA_V_SUM_LIMIT, &e); /* reach / 2^e < limit */
  return e;
}

int stsa_kv_v_exp(const stsa_attn_problem *pb, const stsa_kv_packed *kv,
                  const uint8_t *used) {
  float most = 0.0f;
  for (int64_t t = 0; t < stsa_kv_tiles(pb); t++)
    if (!used || used[t])
      most = kv->v_max[t] > most ? kv->v_max[t] : most;
  return stsa_v_exp_for(pb, most);
}

int stsa_kv_k_exp(const stsa_attn_problem *pb, const stsa_kv_packed *kv, int64_t b,
                  int64_t h, const uint8_t *used) {
  int e = pb->k_fit ? stsa_head_q_exp(pb->q, pb->kern, b, h, pb->qscale) : 0;
  if (e == 0)
    return 0;
  float k_most = 0.0f;
  for (int64_t t = 0; t < stsa_kv_tiles(pb); t++)
    if (!used || used[t])
      k_most = kv->k_max[t] > k_most ? kv->k_max[t] : k_most;
  if (k_most > 0.0f && !isinf(k_most)) {
    int ek;
    (void)frexpf(k_most, &ek); /* k_most < 2^ek: K 2^(127 - ek) < 2^127 */
    e = e < 127 - ek ? e : 127 - ek;
  }
  return e > 0 ? e : 0;
}

void stsa_kv_scale_k_span(const stsa_attn_problem *pb, const stsa_kv_packed *kv,
                          int64_t tile, const stsa_kv_span *sp) {
  const float f = ldexpf(1.0f, kv->k_exp);
  kv->k_max[tile] *= f;
  if (pb->bf16_tiles) { /* 16-key panels of D32 / 32 blocks (stsa_bf16_tile: kb) */
    const int64_t chunks = pb->D32 / 32;
    uint16_t *at = kv->kb + sp->pack0 / 16 * chunks * 512;
    for (int64_t i = 0; i < (int64_t)sp->len / 16 * chunks * 512; i++)
      at[i] = stsa_f32_to_bf16(stsa_bf16_to_f32(at[i]) * f);
    return;
  }
  float *at = kv->kt + sp->pack0 / pb->nr * pb->D * pb->nr;
  for (int64_t i = 0; i < (int64_t)sp->len * pb->D; i++)
    at[i] *= f;
}

void stsa_kv_scale_v_span(const stsa_attn_problem *pb, const stsa_kv_packed *kv,
                          const stsa_kv_span *sp) {
  const float f = ldexpf(1.0f, -kv->v_exp);
  if (pb->bf16_tiles) { /* spans of whole 32-key blocks (stsa_bf16_tile: vb) */
    const int64_t v_panel = pb->Skv_pad / 32 * 512;
    for (int64_t j = 0; j < pb->D_pad / 16; j++) {
      uint16_t *at = kv->vb + j * v_panel + sp->pack0 / 32 * 512;
      for (int64_t i = 0; i < (int64_t)sp->len / 32 * 512; i++)
        at[i] = stsa_f32_to_bf16(stsa_bf16_to_f32(at[i]) * f);
    }
    return;
  }
  for (int64_t j = 0; j < pb->D_pad / pb->nr; j++) {
    float *at = kv->vp + (j * pb->Skv_pad + sp->pack0) * pb->nr;
    for (int64_t i = 0; i < (int64_t)sp->len * pb->nr; i++)
      at[i] *= f;
  }
}

void stsa_pack_kv_tile(const stsa_attn_problem *pb, int64_t b, int64_t h, int64_t tile,
                       const int64_t *kv_rows, stsa_kv_packed *dst) {
  const stsa_kv_span sp = stsa_kv_span_of(pb, NULL, NULL, tile);
  stsa_pack_kv_span(pb, b, h, tile, &sp, kv_rows, dst);
}
