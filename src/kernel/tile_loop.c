/* tile_loop.c — packing, scratch and the per-q-tile online-softmax loop. */
#include "kernel/tile_loop.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "core/convert.h"
#include "core/prefetch.h"
#include "core/tensor.h"
#include "kernel/dispatch.h"
#include "kernel/tile_spans.h"

#define LOG2E 1.4426950408889634
#define LN2 0.6931471805599453

/* Non-finite values (the rules are in stsa.h, at stsa_attention).
 *
 * A scaled q row q' and a K row k give |partial sums of q'.k| <=
 * D max|q'_d| max|k_d|, so below LOGIT_SAFE no f32 logit overflows (a factor
 * 2 under FLT_MAX covers rounding). The documented finite range,
 * scale |q| |k| < 1e38 < 2^127 / log2(e), is inside it. Only when a (q tile,
 * kv tile) pair reaches it, or holds NaN/Inf, can a kept logit be -inf. */
#define LOGIT_SAFE 0x1p127
/* What a kept -inf logit becomes before the mask runs, so that it stays
 * apart from the -inf of dropped pairs: its weight exp2(KEPT_NEG_INF - m) is
 * 0 for any m in range, and a row whose maximum ends here kept only -inf
 * logits (NaN). No logit in range comes near it. */
#define KEPT_NEG_INF (-FLT_MAX)

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* max |element| of t's rows of (b, h) as bits, through the table's loads. */
static uint32_t head_abs_max_bits(const stsa_tensor *t, const stsa_kernels *kern,
                                  int64_t b, int64_t h) {
  float row[STSA_MAX_HEAD_DIM];
  uint32_t most = 0;
  const int D = (int)t->shape[3];
  for (int64_t s = 0; s < t->shape[1]; s++) {
    kern->load_row(stsa_tensor_row(t, b, s, h), t->dtype, t->stride[3], D, row);
    const uint32_t m = stsa_abs_max_bits(row, D);
    most = m > most ? m : most;
  }
  return most;
}

/* The value of stsa_abs_max_bits, +inf for NaN/Inf. */
static float abs_max_value(uint32_t bits) {
  float x;
  memcpy(&x, &bits, sizeof x);
  return bits < 0x7f800000u ? x : INFINITY;
}

/* The power of two of qscale = scale * log2(e) that head (b, h) of q must
 * move onto K so that none of its q times qscale leaves f32's range (as
 * far as its K allows: stsa_kv_k_exp); 0 where it fits, and for a head
 * holding NaN or Inf, which follows stsa.h's rules unscaled. */
static int head_q_exp(const stsa_tensor *q, const stsa_kernels *kern, int64_t b,
                      int64_t h, double qscale) {
  if (qscale <= 1.0)
    return 0;
  const double reach = (double)abs_max_value(head_abs_max_bits(q, kern, b, h)) * qscale;
  if (!(reach >= 0x1p126) || isinf(reach))
    return 0;
  int e;
  (void)frexp(reach / 0x1p126, &e); /* reach / 2^e < 2^126 */
  return e;
}

/* Whether some head needs head_q_exp (stsa_attn_problem: k_fit): q is read
 * once, for scale * log2(e) > 1 only (D <= 2, or a caller's large scale).
 * Head by head: a NaN in one head leaves the others to the contract. */
static int k_fit_for(const stsa_tensor *q, const stsa_kernels *kern, double qscale) {
  for (int64_t b = 0; qscale > 1.0 && b < q->shape[0]; b++)
    for (int64_t h = 0; h < q->shape[2]; h++)
      if (head_q_exp(q, kern, b, h, qscale) > 0)
        return 1;
  return 0;
}

void stsa_problem_init(stsa_attn_problem *pb, const stsa_tensor *q, const stsa_tensor *k,
                       const stsa_tensor *v, const stsa_tensor *out,
                       const stsa_attn_opts *opts, int q_tile, int kv_tile,
                       const stsa_kernels *kern) {
  memset(pb, 0, sizeof *pb);
  pb->q = q;
  pb->k = k;
  pb->v = v;
  pb->out = out;
  pb->B = q->shape[0];
  pb->Sq = q->shape[1];
  pb->H = q->shape[2];
  pb->D = (int)q->shape[3];
  pb->Skv = k->shape[1];
  pb->mr = kern->mr;
  pb->nr = kern->nr;
  pb->D_pad = (int)round_up(pb->D, pb->nr);
  double scale = opts && opts->scale > 0 ? opts->scale : 1.0 / sqrt((double)pb->D);
  pb->scale = scale;
  pb->k_fit = k_fit_for(q, kern, scale * LOG2E);
  pb->qscale = (float)(scale * LOG2E);
  pb->lse = opts ? opts->lse : NULL;
  pb->q_tile = (int)round_up(q_tile, pb->mr);
  pb->kv_tile = kv_tile;
  pb->Skv_pad = round_up(pb->Skv, kv_tile);
  pb->kern = kern;
  pb->D32 = (int)round_up(pb->D, 32);
}

/* The terms STSA_PARAM_BF16_TERMS = 0 gives: what the output keeps. Two
 * terms put P.V within 2^-18 of the f32 probabilities, below a f16 or bf16
 * output's rounding (2^-11, 2^-9); an f32 output gets all three, the f32
 * probabilities exactly. */
static int bf16_terms_for(stsa_dtype out) { return out == STSA_F32 ? 3 : 2; }

void stsa_problem_use_bf16_tiles(stsa_attn_problem *pb, int terms) {
  pb->bf16_tiles =
      stsa_bf16_tiles_take(pb->kern, pb->q->dtype, pb->k->dtype, pb->v->dtype) &&
      pb->kv_tile % STSA_BF16_KEY_BLOCK == 0 &&
      (!pb->kv_tiles_max || pb->spans_bf16_aligned);
  pb->bf16_terms = terms ? terms : bf16_terms_for(pb->out->dtype);
  int e;
  (void)frexpf(pb->qscale, &e);
  pb->bf16_q_pow2 = ldexpf(1.0f, e - 1);
  pb->bf16_score_scale = pb->qscale / pb->bf16_q_pow2;
}

void stsa_problem_run_info(const stsa_attn_problem *pb, int ref, stsa_run_info *info) {
  info->arith = ref              ? STSA_ARITH_F64
                : pb->bf16_tiles ? STSA_ARITH_BF16_TILES
                                 : STSA_ARITH_F32;
  info->bf16_terms = info->arith == STSA_ARITH_BF16_TILES ? pb->bf16_terms : 0;
  info->why[0] = '\0';
  if (ref || pb->bf16_tiles || !pb->kern->full_tile_bf16)
    return; /* the backend's own arithmetic */
  const stsa_dtype qt = pb->q->dtype, kt = pb->k->dtype, vt = pb->v->dtype;
  if (qt != STSA_BF16 || kt != STSA_BF16 || vt != STSA_BF16)
    snprintf(info->why, sizeof info->why,
             "q, k and v are %s, %s and %s: the bf16 tiles take bf16 only",
             stsa_dtype_name(qt), stsa_dtype_name(kt), stsa_dtype_name(vt));
  else if (pb->kv_tile % STSA_BF16_KEY_BLOCK != 0)
    snprintf(info->why, sizeof info->why,
             "kv tiles of %d keys: the bf16 tiles take multiples of %d", pb->kv_tile,
             STSA_BF16_KEY_BLOCK);
  else
    snprintf(info->why, sizeof info->why,
             "a plan of variable tiles packed at %d-key boundaries: the bf16 tiles take "
             "spans on %d-key blocks (plans built for this backend have them)",
             pb->nr, STSA_BF16_KEY_BLOCK);
}

void stsa_problem_record_run(const stsa_attn_problem *pb, const stsa_ctx *ctx) {
  stsa_run_info info = {.size = sizeof info, .backend = ctx->run->id};
  stsa_problem_run_info(pb, ctx->run->ref, &info);
  stsa_ctx_record_run(ctx, &info);
}

void stsa_problem_fit_layouts(stsa_attn_problem *pb, const stsa_sparse_head *heads,
                              int64_t H) {
  const int64_t fixed_q = (pb->Sq + pb->q_tile - 1) / pb->q_tile,
                fixed_kv = (pb->Skv + pb->kv_tile - 1) / pb->kv_tile;
  int64_t q_max = 0, kv_max = 0, pack = 0;
  int variable = 0, aligned = 1;
  for (int64_t h = 0; h < H; h++) {
    const stsa_block_sparse *bs = heads[h].bs;
    variable |= bs->q_start || bs->kv_start;
    for (int64_t t = 0; bs->kv_start && t <= bs->kv_tiles; t++)
      aligned &= bs->kv_pack[t] % STSA_BF16_KEY_BLOCK == 0;
    const int64_t q = bs->q_start ? bs->q_tiles : fixed_q,
                  kv = bs->kv_start ? bs->kv_tiles : fixed_kv,
                  len = bs->kv_start ? bs->kv_pack[bs->kv_tiles] : fixed_kv * pb->kv_tile;
    q_max = q > q_max ? q : q_max;
    kv_max = kv > kv_max ? kv : kv_max;
    pack = len > pack ? len : pack;
  }
  if (!variable)
    return; /* fixed tiles: the problem as stsa_problem_init made it */
  pb->q_tiles_max = q_max;
  pb->kv_tiles_max = kv_max;
  pb->spans_bf16_aligned = aligned;
  pb->Skv_pad = pack;
}

static size_t align64(size_t floats) { return (floats + 15) / 16 * 16; }

/* Floats of the f32 K^T and V panels, and of the bf16 K and V blocks:
 * problems with bf16 tiles have only the blocks, the others only panels. */
static size_t f32_panels_floats(const stsa_attn_problem *pb) {
  return pb->bf16_tiles ? 0 : (size_t)pb->Skv_pad * (size_t)(pb->D + pb->D_pad);
}
static size_t bf16_blocks_floats(const stsa_attn_problem *pb) {
  return pb->bf16_tiles ? align64((size_t)pb->Skv_pad * (size_t)(pb->D32 + pb->D_pad) / 2)
                        : 0;
}

size_t stsa_kv_packed_floats(const stsa_attn_problem *pb) {
  size_t tiles = (size_t)stsa_kv_tiles(pb);
  return f32_panels_floats(pb) + 2 * align64(tiles) + align64((tiles + 3) / 4) +
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
  p.v_max = p.k_max + align64(tiles);
  p.v_nonfinite = (uint8_t *)(p.v_max + align64(tiles));
  if (pb->bf16_tiles) {
    p.kb = (uint16_t *)(void *)(p.v_max + align64(tiles) + align64((tiles + 3) / 4));
    p.vb = p.kb + (size_t)pb->Skv_pad * (size_t)pb->D32;
  }
  return p;
}

/* The bf16 bits of a value that came from bf16 (exact: its low half is 0). */
static uint16_t bf16_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return (uint16_t)(u >> 16);
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

/* Every cache line of `bytes` from row on. */
static void prefetch_bytes(const void *row, int64_t bytes) {
  const char *at = row;
  for (int64_t i = 0; i < bytes; i += 64)
    STSA_PREFETCH(at + i);
  STSA_PREFETCH(at + bytes - 1);
}

/* The bytes of a row of t's head dim that prefetching fetches: the row's,
 * or for strided rows their first element's. */
static int64_t prefetched_row_bytes(const stsa_tensor *t, int D) {
  return t->stride[3] == 1 ? D * stsa_dtype_size(t->dtype) : 1;
}

/* The next keys' K and V rows (up to the first NULL), while the current
 * ones pack: a permuted span (clusters, position-major heads) reads rows
 * from anywhere in the tensor, which the hardware prefetcher does not
 * follow (without this the packing waited on its V loads). Strided rows:
 * their first element. */
static void prefetch_key_rows(const stsa_attn_problem *pb, const void *const *k,
                              const void *const *v, int count) {
  const int64_t k_bytes = prefetched_row_bytes(pb->k, pb->D),
                v_bytes = prefetched_row_bytes(pb->v, pb->D);
  for (int c = 0; c < count && k[c]; c++) {
    prefetch_bytes(k[c], k_bytes);
    prefetch_bytes(v[c], v_bytes);
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
  dst->k_max[tile] = abs_max_value(abs_bits[0] << 16);
  dst->v_max[tile] = abs_max_value(abs_bits[1] << 16);
  dst->v_nonfinite[tile] = abs_bits[1] >= 0x7f80u;
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
  span_rows(pb, b, h, sp, kv_rows, 0, nr, rows[0].k, rows[0].v);
  /* pack0 and len are multiples of nr */
  for (int p0 = 0, i = 0; p0 < sp->len; p0 += nr, i ^= 1) {
    if (p0 + nr < sp->len) {
      span_rows(pb, b, h, sp, kv_rows, p0 + nr, nr, rows[i ^ 1].k, rows[i ^ 1].v);
      prefetch_key_rows(pb, rows[i ^ 1].k, rows[i ^ 1].v, nr);
    }
    const int64_t r = sp->pack0 + p0;
    pb->kern->pack_panel(&rows[i], dst->kt + (r / nr) * pb->D * nr, dst->vp + r * nr,
                         pb->Skv_pad * nr, abs_bits);
  }
  dst->k_max[tile] = abs_max_value(abs_bits[0]);
  dst->v_max[tile] = abs_max_value(abs_bits[1]);
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
  int e = pb->k_fit ? head_q_exp(pb->q, pb->kern, b, h, pb->qscale) : 0;
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

enum { SCRATCH_SLOTS = 18 };

/* Floats of each scratch slot, in the order of scratch_slots(). */
static void scratch_sizes(const stsa_attn_problem *pb, size_t sizes[SCRATCH_SLOTS]) {
  size_t nq = (size_t)pb->q_tile, nkv = (size_t)pb->kv_tile;
  const int bf16 = pb->bf16_tiles;
  const size_t pass = STSA_BF16_PASS_ROWS; /* full_tile_bf16's rows at once */
  const size_t s[SCRATCH_SLOTS] = {
      align64(nq * (size_t)pb->D), align64((bf16 && nq < pass ? pass : nq) * nkv),
      align64(nq * (size_t)pb->D_pad), align64(nq), align64(nq), align64(nq), align64(nq),
      align64((size_t)pb->D_pad), align64(nkv * (size_t)pb->D_pad), align64(nkv),
      align64((nq * nkv + 3) / 4), align64(2 * (nq / (size_t)pb->mr)),
      align64((size_t)pb->mr), bf16 ? align64(nq * (size_t)pb->D32 / 2) : 0,
      bf16 ? align64(pass * nkv * 3 / 2) : 0,
      bf16 ? align64(pass * (size_t)pb->D_pad) : 0,
      bf16 ? align64(nkv * (size_t)pb->D_pad / 2) : 0,
      /* a merged run's tails: f32 K^T and V panels, or bf16 K and V blocks */
      pb->kv_tiles_max ? align64(bf16 ? nkv * (size_t)(pb->D32 + pb->D_pad) / 2
                                      : nkv * (size_t)(pb->D + pb->D_pad))
                       : 0};
  memcpy(sizes, s, sizeof s);
}

size_t stsa_tile_scratch_bytes(const stsa_attn_problem *pb) {
  size_t sizes[SCRATCH_SLOTS], total = 0;
  scratch_sizes(pb, sizes);
  for (int i = 0; i < SCRATCH_SLOTS; i++)
    total += sizes[i];
  return total * sizeof(float);
}

void stsa_tile_scratch_at(const stsa_attn_problem *pb, void *mem, stsa_tile_scratch *sc) {
  size_t sizes[SCRATCH_SLOTS];
  scratch_sizes(pb, sizes);
  float *v_safe, *bad_keys, *kept, *span, *qb, *pbf, *vb_safe;
  float **slots[SCRATCH_SLOTS] = {
      &sc->q,        &sc->s,   &sc->o,  &sc->m,    &sc->l,   &sc->alpha,
      &sc->tile_max, &sc->row, &v_safe, &bad_keys, &kept,    &span,
      &sc->ones,     &qb,      &pbf,    &sc->cbuf, &vb_safe, &sc->kt_tails};
  float *p = mem;
  for (int i = 0; i < SCRATCH_SLOTS; i++) {
    *slots[i] = p;
    p += sizes[i];
  }
  sc->v_safe = v_safe;
  sc->bad_keys = (int32_t *)(void *)bad_keys;
  sc->kept = (uint8_t *)kept;
  sc->span = (int32_t *)(void *)span;
  sc->qb = (uint16_t *)(void *)qb;
  sc->pbf = (uint16_t *)(void *)pbf;
  sc->vb_safe = (uint16_t *)(void *)vb_safe;
  const int tails = pb->kv_tiles_max != 0;
  sc->vp_tails = tails && !pb->bf16_tiles
                     ? sc->kt_tails + (size_t)pb->kv_tile * (size_t)pb->D
                     : NULL;
  sc->kb_tails = tails && pb->bf16_tiles ? (uint16_t *)(void *)sc->kt_tails : NULL;
  sc->vb_tails =
      sc->kb_tails ? sc->kb_tails + (size_t)pb->kv_tile * (size_t)pb->D32 : NULL;
  if (pb->bf16_tiles)
    sc->kt_tails = NULL;
  for (int r = 0; r < pb->mr; r++)
    sc->ones[r] = 1.0f;
  sc->q_max = 0;
  sc->block_ = NULL;
}

int stsa_tile_scratch_alloc(const stsa_attn_problem *pb, stsa_tile_scratch *sc) {
  void *mem = aligned_alloc(64, stsa_tile_scratch_bytes(pb));
  if (!mem)
    return -1;
  stsa_tile_scratch_at(pb, mem, sc);
  sc->block_ = mem;
  return 0;
}

void stsa_tile_scratch_free(stsa_tile_scratch *sc) {
  free(sc->block_);
  sc->block_ = NULL;
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
    prefetch_bytes(stsa_tensor_row(pb->q, b, q_rows[q0 + r], h), bytes);
}

/* Loads the q tile's rows, scaled into log2 units (times qscale, the
 * problem's times the head's 2^-k_exp); padding rows are zero. Returns max
 * |q'| over the scaled tile (+inf for NaN/Inf). */
static float load_q_tile(const stsa_attn_problem *pb, float qscale, int64_t b, int64_t h,
                         int64_t q0, int rows, int rows_pad, const int64_t *q_rows,
                         float *qbuf) {
  const int D = pb->D;
  uint32_t q_max = 0;
  const int64_t q_bytes = prefetched_row_bytes(pb->q, pb->D);
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
  return abs_max_value(q_max);
}

/* The q tile's rows as bf16 times bf16_q_pow2 2^-k_exp, D32 long (zeros
 * past D and in padding rows): the A operand of full_tile_bf16, in place of
 * load_q_tile's f32 rows. A power of two changes the exponent only, so the
 * bf16 significand is kept; values it takes below f32's normal range are
 * flushed, as the tile unit would. Returns what load_q_tile returns, max
 * |q| times the head's qscale (+inf for NaN/Inf), for the tile loop's safety
 * test. */
static float load_q_tile_bf16(const stsa_attn_problem *pb, int k_exp, int64_t b,
                              int64_t h, int64_t q0, int rows, int rows_pad,
                              const int64_t *q_rows, uint16_t *qb) {
  const float pow2 = ldexpf(pb->bf16_q_pow2, -k_exp);
  float row[STSA_MAX_HEAD_DIM];
  uint32_t q_max = 0;
  memset(qb, 0, sizeof(uint16_t) * (size_t)rows_pad * (size_t)pb->D32);
  const int64_t q_bytes = prefetched_row_bytes(pb->q, pb->D);
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
  return abs_max_value(q_max) * ldexpf(pb->qscale, -k_exp);
}

/* Normalises the finished rows and writes them in the caller's layout:
 * rows of a permuted tile (q_rows) scattered, by streaming stores. */
static void store_rows(const stsa_attn_problem *pb, int64_t b, int64_t h, int64_t q0,
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

/* Marks every -inf score of the tile kept (see KEPT_NEG_INF); the mask then
 * writes -inf for the dropped pairs only. */
static void mark_neg_inf_kept(float *s, int ld_s, int rows, int n) {
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < n; c++)
      if (s[(int64_t)r * ld_s + c] == -INFINITY)
        s[(int64_t)r * ld_s + c] = KEPT_NEG_INF;
}

/* A PARTIAL tile whose V holds NaN/Inf: a dropped key has weight 0, and
 * 0 * NaN would still reach the row. Copies the tile's V panels into v_safe
 * with NaN/Inf as 0, lists the keys that had some, and records which rows
 * keep them (the mask has run; kept -inf logits are marked). Returns the
 * number of such keys. */
static int screen_v_tile(const stsa_attn_problem *pb, const stsa_kv_packed *kv,
                         int64_t pack0, int n, int rows, int ld_s,
                         stsa_tile_scratch *sc) {
  const int panels = pb->D_pad / pb->nr;
  int nbad = 0;
  for (int t = 0; t < n; t++) {
    int bad = 0;
    for (int j = 0; j < panels; j++) {
      const float *src = kv->vp + ((int64_t)j * pb->Skv_pad + pack0 + t) * pb->nr;
      float *dst = sc->v_safe + ((int64_t)j * pb->kv_tile + t) * pb->nr;
      for (int c = 0; c < pb->nr; c++) {
        int finite = isfinite(src[c]) != 0;
        dst[c] = finite ? src[c] : 0.0f;
        bad |= !finite;
      }
    }
    if (bad)
      sc->bad_keys[nbad++] = t;
  }
  for (int r = 0; r < rows; r++)
    for (int i = 0; i < nbad; i++)
      sc->kept[(int64_t)r * pb->kv_tile + i] =
          sc->s[(int64_t)r * ld_s + sc->bad_keys[i]] != -INFINITY;
  return nbad;
}

/* Adds what screen_v_tile held back for the rows that keep those keys:
 * p * NaN/Inf, whatever p is (0 * NaN is NaN, as in SDPA). */
static void add_nonfinite_v(const stsa_attn_problem *pb, const stsa_kv_packed *kv,
                            int64_t pack0, int rows, int nbad, int ld_s,
                            stsa_tile_scratch *sc) {
  for (int i = 0; i < nbad; i++) {
    const int t = sc->bad_keys[i];
    for (int r = 0; r < rows; r++) {
      if (!sc->kept[(int64_t)r * pb->kv_tile + i])
        continue;
      const float p = sc->s[(int64_t)r * ld_s + t];
      float *o = sc->o + (int64_t)r * pb->D_pad;
      for (int d = 0; d < pb->D; d++) {
        float x = kv->vp[((int64_t)(d / pb->nr) * pb->Skv_pad + pack0 + t) * pb->nr +
                         d % pb->nr];
        if (!isfinite(x))
          o[d] += p * x;
      }
    }
  }
}

void stsa_run_q_tile(const stsa_attn_problem *pb, const stsa_kv_packed *kv, int64_t b,
                     int64_t h, int64_t qt, const stsa_kv_list *list,
                     stsa_tile_scratch *sc) {
  stsa_run_q_tile_in(pb, kv, b, h, qt, list, NULL, sc);
}

/* Merged runs take at most this many tiles (what pv2_segs and
 * full_run_bf16 take at once). */
#define MERGED_MAX_TILES STSA_MAX_RUN_TILES

/* Whether listed entry i may join a merged run (see run_merged): a FULL
 * variable tile whose logits cannot reach -inf. */
static int mergeable(const stsa_attn_problem *pb, const stsa_kv_packed *kv,
                     const stsa_kv_list *list, int64_t i, int64_t tile,
                     const stsa_tile_scratch *sc) {
  return !(list && list->tiles && list->kinds[i] == STSA_TILE_PARTIAL) &&
         (double)sc->q_max * kv->k_max[tile] * pb->D < LOGIT_SAFE;
}

/* The listed entries from i on that fit one score buffer side by side:
 * the end of the run. An f32 run holds its tiles' whole panels (nr keys
 * each) and leaves their tails to the q tile's tail runs (tail_spans); a
 * bf16 run places each tile's whole 32-key blocks first and their tails
 * after them, sharing blocks (full_run_bf16). Either inside kv_tile
 * columns. */
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
    if (j - i == MERGED_MAX_TILES || (bf16 ? w + round_up(t, block) : w) > pb->kv_tile ||
        !mergeable(pb, kv, list, j, tile, sc))
      break;
    whole = w, tails = t;
  }
  return j;
}

/* The row maxima qk folded over a ragged span (n not a multiple of nr)
 * also saw the last panel's padding columns, whose scores are 0 (zero K^T
 * columns): each fold is max(true maximum, 0). A positive fold is then the
 * true maximum; the rows whose fold is not (all their scores <= 0: rare)
 * take it from their n scores. Makes tmax exact for the softmax, which
 * then skips its pass over the scores, with the same maxima, so the same
 * results. Only for spans whose scores hold no NaN (safe ones). */
static void exact_ragged_max(const float *s, int ld_s, int rows, int n, float *tmax) {
  for (int r = 0; r < rows; r++) {
    if (tmax[r] > 0.0f)
      continue;
    const float *row = s + (int64_t)r * ld_s;
    float mx = -INFINITY;
    for (int c = 0; c < n; c++)
      mx = row[c] > mx ? row[c] : mx;
    tmax[r] = mx;
  }
}

/* The kernels for a row block of `left` valid rows: the table's half ones
 * where they fit (kernels.h: half), so a q tile's last block does not
 * compute a whole register tile of padding rows. */
static const stsa_kernels *block_kernels(const stsa_kernels *k, int left) {
  return k->half && left <= k->half->mr ? k->half : k;
}

/* A FULL tile, one block of mr rows at a time: its scores (mr x n, 12 KB
 * for 12 rows of a 256-key tile), q rows and output rows stay in L1 from
 * Q.K^T through softmax to P.V, and only the K^T and V panels stream from
 * L2, in order. Every block reuses the first mr rows of the score buffer,
 * which keeps the tile's L2 footprint to its K^T and V panels, q and o.
 * Computed tile-wide, the scores (q_tile x kv_tile, ~190 KB) and q rows
 * streamed from L2 between the three steps (the AVX2 build ran 2-5% slower
 * that way; docs/benchmarks.md). Each row's arithmetic is the same either
 * way, so results are bitwise equal. */
static void run_full_tile(const stsa_attn_problem *pb, const float *kt, const float *vp,
                          int64_t ld_panel, int rows, int rows_pad, int n, int ld_s,
                          int safe, stsa_tile_scratch *sc) {
  const stsa_kernels *kern = pb->kern;
  const int D = pb->D, D_pad = pb->D_pad, nr = pb->nr, mr = pb->mr;
  const int npanels = (n + nr - 1) / nr;
  /* the folded maxima are exact for a safe tile (a ragged one's once
   * exact_ragged_max has looked again); an unsafe one may keep -inf logits,
   * marked below, and the softmax finds its maxima itself */
  const int exact_max = safe;
  for (int r = 0; r < rows_pad; r += mr) {
    float *s = sc->s, *tmax = sc->tile_max + r;
    const int block_rows = rows - r < mr ? rows - r : mr;
    const stsa_kernels *bk = block_kernels(kern, block_rows);
    for (int i = 0; i < mr; i++)
      tmax[i] = -INFINITY;
    stsa_qk_panels(bk, sc->q + (int64_t)r * D, D, kt, npanels, s, ld_s, tmax);
    if (!safe)
      mark_neg_inf_kept(s, ld_s, block_rows, n);
    else if (n % nr != 0)
      exact_ragged_max(s, ld_s, block_rows, n, tmax);
    bk->softmax(s, ld_s, bk->mr, n, sc->m + r, sc->l + r, sc->alpha + r,
                exact_max ? tmax : NULL);
    stsa_pv_panels(bk, s, ld_s, n, vp, ld_panel * nr, D_pad / nr,
                   sc->o + (int64_t)r * D_pad, D_pad, sc->alpha + r);
  }
}

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
  const int64_t blocks = pb->kv_tile / 32, panels = pb->D_pad / 16;
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
                          .ld_s = pb->kv_tile,
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

/* Kv tile `tile` through full_tile_bf16 (kernels.h): FULL (mask NULL) or
 * PARTIAL, with the columns each pass keeps when a stored pattern is the
 * mask (pat; NULL: every column); `safe` as for run_full_tile: no logit of
 * the tile can be NaN or +-inf. */
static void run_tile_bf16(const stsa_attn_problem *pb, const stsa_kv_packed *kv,
                          const stsa_kv_span *sp, int64_t tile, int rows, int rows_pad,
                          int safe, const bf16_mask *mask, const stsa_tile_pattern *pat,
                          stsa_tile_scratch *sc) {
  if (pat) /* every pass of rows_pad, padding-only ones included */
    stsa_tile_row_spans(pat, rows, rows_pad, STSA_BF16_PASS_ROWS, sp->n, sc->span);
  stsa_bf16_tile t = bf16_tile_of(pb, rows, rows_pad, sc);
  const uint16_t *vb = bf16_v_blocks(kv, sp);
  const int64_t v_panel = t.v_panel;
  const int nbad =
      mask && kv->v_nonfinite[tile] ? screen_v_blocks(pb, vb, v_panel, sp->n, sc) : 0;
  t.kb = bf16_k_blocks(pb, kv, sp);
  t.vb = nbad ? sc->vb_safe : vb;
  t.v_panel = nbad ? pb->kv_tile / 32 * 512 : v_panel;
  t.n = sp->n;
  t.safe = safe;
  t.mask = mask ? apply_bf16_mask : NULL;
  t.mask_ctx = mask;
  t.span = pat ? sc->span : NULL;
  t.nbad = nbad;
  t.vb_raw = vb;
  t.v_panel_raw = v_panel;
  pb->kern->full_tile_bf16(&t);
}

/* A merged run of FULL, safe variable tiles [i0, i1) through full_run_bf16
 * (kernels.h): one softmax and one P.V sum for them all, as run_merged
 * does on the f32 kernels. */
static void run_merged_bf16(const stsa_attn_problem *pb, const stsa_kv_packed *kv,
                            const stsa_kv_list *list, const int64_t *kv_start,
                            const int64_t *kv_pack, int64_t i0, int64_t i1, int rows,
                            int rows_pad, stsa_tile_scratch *sc) {
  stsa_bf16_seg seg[MERGED_MAX_TILES];
  for (int64_t i = i0; i < i1; i++) {
    const stsa_kv_span sp = stsa_kv_span_of(pb, kv_start, kv_pack, list->tiles[i]);
    seg[i - i0] =
        (stsa_bf16_seg){bf16_k_blocks(pb, kv, &sp), bf16_v_blocks(kv, &sp), sp.n};
  }
  const stsa_bf16_tile t = bf16_tile_of(pb, rows, rows_pad, sc);
  pb->kern->full_run_bf16(&t, seg, (int)(i1 - i0));
}

/* The columns of f32 spans computed together (run_spans). Variable tiles
 * are clusters of tens of keys, and each one's last K^T panel was mostly
 * padding: a run of ~76-key tiles computed ~10% more scores than it kept
 * (7.2% more panels than the layout here at Wan 480p). Here every span's
 * whole panels (n / nr of them) come first, side by side from column 0, and
 * the tails (the n % nr keys after them) share panels from column `whole`
 * on, copied (gather_tails), so the spans pad once. The tile loop hands it
 * whole panels only (run_merged) or tails only (a q tile's tail runs). */
typedef struct merged_cols {
  int whole;                      /* columns of whole panels */
  int tails;                      /* tail columns, after them */
  int col[MERGED_MAX_TILES];      /* tile i's whole panels start here */
  int tail_col[MERGED_MAX_TILES]; /* and its tail here */
} merged_cols;

static merged_cols merged_cols_of(const stsa_kv_span *sp, int64_t nt, int nr) {
  merged_cols mc;
  mc.whole = 0;
  for (int64_t i = 0; i < nt; i++) {
    mc.col[i] = mc.whole;
    mc.whole += sp[i].n / nr * nr;
  }
  mc.tails = 0;
  for (int64_t i = 0; i < nt; i++) {
    mc.tail_col[i] = mc.whole + mc.tails;
    mc.tails += sp[i].n % nr;
  }
  return mc;
}

/* The run's tails side by side: their K^T columns as panels at dst
 * ([ceil(tails / nr)][D][nr], zeros past the last tail; each tile's tail is
 * the first columns of its last packed panel), and their V rows at vdst
 * ([D_pad / nr][kv_tile][nr]), so that P.V takes them as one segment (a
 * segment per tile's tail instead, no copy, ran ~1% slower). */
static void gather_tails(const stsa_attn_problem *pb, const stsa_kv_packed *kv,
                         const stsa_kv_span *sp, int64_t nt, const merged_cols *mc,
                         float *dst, float *vdst) {
  const int D = pb->D, nr = pb->nr;
  const int64_t step = (int64_t)D * nr;
  const float *src[MERGED_MAX_TILES];
  int n[MERGED_MAX_TILES];
  for (int64_t i = 0; i < nt; i++) {
    const int r = sp[i].n % nr, c = mc->tail_col[i] - mc->whole;
    src[i] = kv->kt + (sp[i].pack0 / nr + sp[i].n / nr) * step;
    n[i] = r;
    const float *v = kv->vp + (sp[i].pack0 + sp[i].n / nr * nr) * nr;
    for (int j = 0; r > 0 && j < pb->D_pad / nr; j++)
      memcpy(vdst + ((int64_t)j * pb->kv_tile + c) * nr, v + j * pb->Skv_pad * nr,
             sizeof(float) * (size_t)(r * nr));
  }
  if (mc->tails > 0)
    pb->kern->gather_tails(src, n, (int)nt, D, nr, dst);
}

/* Q.K^T of a merged run for one block of mr rows: its panels in column
 * order (each tile's whole panels, then the tail panels), two at a time
 * through qk2 where the table has it, also across tiles. */
typedef struct panel_pairs {
  const stsa_kernels *kern;
  const float *q;
  int D, ld_s;
  float *tmax;
  const float *held; /* a panel waiting for its pair, and its columns */
  float *held_s;
} panel_pairs;

static void pairs_add(panel_pairs *pp, const float *panel, float *out) {
  const stsa_kernels *kern = pp->kern;
  if (!kern->qk2) {
    kern->qk(pp->q, pp->D, panel, out, pp->ld_s, pp->tmax);
  } else if (pp->held) {
    kern->qk2(pp->q, pp->D, pp->held, panel, pp->held_s, out, pp->ld_s, pp->tmax,
              pp->tmax);
    pp->held = NULL;
  } else {
    pp->held = panel, pp->held_s = out;
  }
}

static void merged_qk(const stsa_attn_problem *pb, const stsa_kernels *kern,
                      const stsa_kv_packed *kv, const stsa_kv_span *sp, int64_t nt,
                      const merged_cols *mc, const float *kt_tails, const float *q,
                      float *s, float *tmax) {
  const int nr = pb->nr;
  const int64_t step = (int64_t)pb->D * nr;
  panel_pairs pp = {kern, q, pb->D, pb->kv_tile, tmax, NULL, NULL};
  for (int64_t i = 0; i < nt; i++) {
    const float *kt = kv->kt + (sp[i].pack0 / nr) * step;
    for (int p = 0; p < sp[i].n / nr; p++)
      pairs_add(&pp, kt + p * step, s + mc->col[i] + p * nr);
  }
  for (int p = 0; p * nr < mc->tails; p++)
    pairs_add(&pp, kt_tails + p * step, s + mc->whole + p * nr);
  if (pp.held)
    kern->qk(q, pb->D, pp.held, pp.held_s, pb->kv_tile, tmax);
}

/* P.V of a merged run for one block of mr rows: o = alpha o + the run's
 * sum. The whole panels' keys go through pv2_segs (one sum over the tiles)
 * where the table has it, else a pv per tile and V panel, their V rows read
 * where they are packed (a copy side by side cost ~6% of an SVG2 call);
 * then the tails from their copy (gather_tails). alpha applies to the first
 * sum, 1 to the later ones, which is exact. */
static void merged_pv(const stsa_attn_problem *pb, const stsa_kernels *kern,
                      const stsa_kv_packed *kv, const stsa_kv_span *sp, int64_t nt,
                      const merged_cols *mc, const float *vp_tails, const float *s,
                      float *o, const float *alpha, const float *ones) {
  const int nr = pb->nr, ld_s = pb->kv_tile, panels = pb->D_pad / nr;
  const int64_t stride = pb->Skv_pad * nr, tail_stride = (int64_t)pb->kv_tile * nr;
  stsa_pv_seg seg[MERGED_MAX_TILES];
  for (int j = 0, take; j < panels; j += take) {
    take = stsa_panel_step(kern->pv2 != NULL, panels - j);
    const float *vp = kv->vp + (int64_t)j * stride;
    float *oj = o + j * nr;
    const float *a = alpha;
    int nseg = 0;
    for (int64_t i = 0; i < nt; i++)
      if (sp[i].n >= nr)
        seg[nseg++] =
            (stsa_pv_seg){s + mc->col[i], vp + sp[i].pack0 * nr, sp[i].n / nr * nr};
    if (nseg > 0 && take == 2 && kern->pv2_segs) {
      kern->pv2_segs(seg, nseg, ld_s, stride, oj, pb->D_pad, a);
      a = ones;
    } else {
      for (int x = 0; x < nseg; x++, a = ones)
        stsa_pv_panels(kern, seg[x].p, ld_s, seg[x].n, seg[x].panel, stride, take, oj,
                       pb->D_pad, a);
    }
    if (mc->tails)
      stsa_pv_panels(kern, s + mc->whole, ld_s, mc->tails, vp_tails + j * tail_stride,
                     tail_stride, take, oj, pb->D_pad, a);
  }
}

/* Spans sp[0..nt) computed as one tile of their columns (merged_cols),
 * with one softmax for them all, so its per-call cost is paid once per
 * ~kv_tile columns rather than per cluster, and one P.V sum (merged_pv). */
static void run_spans(const stsa_attn_problem *pb, const stsa_kv_packed *kv,
                      const stsa_kv_span *sp, int64_t nt, int rows, int rows_pad,
                      stsa_tile_scratch *sc) {
  const stsa_kernels *kern = pb->kern;
  const int D = pb->D, D_pad = pb->D_pad, mr = pb->mr, ld_s = pb->kv_tile;
  const merged_cols mc = merged_cols_of(sp, nt, pb->nr);
  gather_tails(pb, kv, sp, nt, &mc, sc->kt_tails, sc->vp_tails);
  const int n = mc.whole + mc.tails;
  /* one block of mr rows at a time, as run_full_tile: its scores stay in L1
   * from Q.K^T to P.V, in the first mr rows of the score buffer */
  for (int r = 0; r < rows_pad; r += mr) {
    float *tmax = sc->tile_max + r;
    const int block_rows = rows - r < mr ? rows - r : mr;
    const stsa_kernels *bk = block_kernels(kern, block_rows);
    for (int x = 0; x < mr; x++)
      tmax[x] = -INFINITY;
    merged_qk(pb, bk, kv, sp, nt, &mc, sc->kt_tails, sc->q + (int64_t)r * D, sc->s, tmax);
    if (n % pb->nr != 0) /* the last tail panel's padding */
      exact_ragged_max(sc->s, ld_s, block_rows, n, tmax);
    bk->softmax(sc->s, ld_s, bk->mr, n, sc->m + r, sc->l + r, sc->alpha + r, tmax);
    merged_pv(pb, bk, kv, sp, nt, &mc, sc->vp_tails, sc->s, sc->o + (int64_t)r * D_pad,
              sc->alpha + r, sc->ones);
  }
}

/* The tails (the keys past a tile's whole panels) of a q tile's merged
 * runs, kept across the runs and computed as runs of their own when they
 * fill kv_tile columns or MERGED_MAX_TILES tiles, and at the q tile's end:
 * they pad once per ~kv_tile tail keys. A run that took its own tails
 * padded once per run (~4 a q tile at Wan 480p, 1.7% of the pairs
 * computed). */
typedef struct tail_spans {
  stsa_kv_span sp[MERGED_MAX_TILES];
  int64_t count;
  int keys;
} tail_spans;

static void run_tails(const stsa_attn_problem *pb, const stsa_kv_packed *kv,
                      tail_spans *ts, int rows, int rows_pad, stsa_tile_scratch *sc) {
  if (ts->count > 0)
    run_spans(pb, kv, ts->sp, ts->count, rows, rows_pad, sc);
  ts->count = 0;
  ts->keys = 0;
}

/* Variable tiles are short (clusters of tens of keys): the whole panels of
 * a run of listed FULL tiles [i0, i1) (f32: one tile too) run together
 * (run_spans), their tails go to ts. With the tails, f32 runs padded once
 * each and held fewer tiles: the q tile's tail runs, longer runs and single
 * tiles here made a Wan-480p SVG2 call ~1.1% faster (paired). */
static void run_merged(const stsa_attn_problem *pb, const stsa_kv_packed *kv,
                       const stsa_kv_list *list, const int64_t *kv_start,
                       const int64_t *kv_pack, int64_t i0, int64_t i1, int rows,
                       int rows_pad, tail_spans *ts, stsa_tile_scratch *sc) {
  const int nr = pb->nr;
  stsa_kv_span whole[MERGED_MAX_TILES];
  int64_t nw = 0;
  for (int64_t i = i0; i < i1; i++) {
    const stsa_kv_span sp = stsa_kv_span_of(pb, kv_start, kv_pack, list->tiles[i]);
    const int tail = sp.n % nr, body = sp.n - tail;
    if (body > 0) {
      whole[nw] = sp;
      whole[nw++].n = body;
    }
    if (tail == 0)
      continue;
    if (ts->count == MERGED_MAX_TILES || ts->keys + tail > pb->kv_tile)
      run_tails(pb, kv, ts, rows, rows_pad, sc);
    stsa_kv_span *t = &ts->sp[ts->count++];
    *t = sp; /* the keys from the tile's last packed panel on */
    t->k0 += body;
    t->pack0 += body;
    t->n = tail;
    t->len = nr;
    ts->keys += tail;
  }
  if (nw > 0)
    run_spans(pb, kv, whole, nw, rows, rows_pad, sc);
}

void stsa_run_q_tile_in(const stsa_attn_problem *pb, const stsa_kv_packed *kv, int64_t b,
                        int64_t h, int64_t qt, const stsa_kv_list *list,
                        const stsa_tile_layout *lay, stsa_tile_scratch *sc) {
  const stsa_kernels *kern = pb->kern;
  const int D = pb->D, D_pad = pb->D_pad;
  int64_t q0;
  const int rows = stsa_q_rows_of(pb, lay ? lay->q_start : NULL, qt, &q0);
  const int rows_pad = (int)round_up(rows, pb->mr);

  const int64_t *q_rows = list ? list->q_rows : NULL;
  const int64_t *kv_start = lay ? lay->kv_start : NULL;
  const int64_t *kv_pack = lay ? lay->kv_pack : NULL;
  const int32_t *pattern = lay ? lay->pattern : NULL;
  sc->q_max = pb->bf16_tiles ? load_q_tile_bf16(pb, kv->k_exp, b, h, q0, rows, rows_pad,
                                                q_rows, sc->qb)
                             : load_q_tile(pb, ldexpf(pb->qscale, -kv->k_exp), b, h, q0,
                                           rows, rows_pad, q_rows, sc->q);
  memset(sc->o, 0, sizeof(float) * (size_t)rows_pad * (size_t)D_pad);
  for (int r = 0; r < rows_pad; r++) {
    sc->m[r] = -INFINITY;
    sc->l[r] = 0.0f;
  }

  const int64_t ntiles = list && list->tiles ? list->count : stsa_kv_tiles(pb);
  tail_spans ts;
  ts.count = 0;
  ts.keys = 0;
  for (int64_t i = 0; i < ntiles; i++) {
    int64_t tile = list && list->tiles ? list->tiles[i] : i;
    if (kv_start && list && list->tiles && (!pb->bf16_tiles || kern->full_run_bf16)) {
      const int64_t end = merged_end(pb, kv, list, kv_start, kv_pack, i, ntiles, sc);
      /* an f32 tile alone too: its tail joins the q tile's tail runs */
      if (end - i >= (pb->bf16_tiles ? 2 : 1)) {
        if (pb->bf16_tiles)
          run_merged_bf16(pb, kv, list, kv_start, kv_pack, i, end, rows, rows_pad, sc);
        else
          run_merged(pb, kv, list, kv_start, kv_pack, i, end, rows, rows_pad, &ts, sc);
        i = end - 1;
        continue;
      }
    }
    const stsa_kv_span sp = stsa_kv_span_of(pb, kv_start, kv_pack, tile);
    const int safe = (double)sc->q_max * kv->k_max[tile] * D < LOGIT_SAFE;
    const int partial = list && list->tiles && list->kinds[i] == STSA_TILE_PARTIAL;
    if (pb->bf16_tiles) { /* every tile, FULL or PARTIAL; no f32 panels */
      const bf16_mask bm = {list, i, q0, sp.k0, sp.n};
      run_tile_bf16(pb, kv, &sp, tile, rows, rows_pad, safe, partial ? &bm : NULL,
                    partial && pattern ? &lay->patterns[pattern[i]] : NULL, sc);
      continue;
    }
    const int64_t k0 = sp.k0;
    const int n = sp.n, npanels = (n + pb->nr - 1) / pb->nr;
    /* Variable tiles are mostly short: scores rows as long as the tile's
     * panels keep them in L1 for the pv passes (fixed tiles: kv_tile). */
    const int ld_s = kv_start ? npanels * pb->nr : pb->kv_tile;
    const float *kt = kv->kt + (sp.pack0 / pb->nr) * D * pb->nr;
    if (partial && pattern && safe && !kv->v_nonfinite[tile]) {
      stsa_run_pattern_tile(pb, &lay->patterns[pattern[i]], kt,
                            kv->vp + sp.pack0 * pb->nr, pb->Skv_pad, rows, rows_pad, n,
                            ld_s, sc);
      continue;
    }
    const float *vp_full = kv->vp + sp.pack0 * pb->nr;
    if (!partial) {
      run_full_tile(pb, kt, vp_full, pb->Skv_pad, rows, rows_pad, n, ld_s, safe, sc);
      continue;
    }
    /* Panel outer, row block inner: the K^T panel (D x 16) stays in L1 while
     * the q rows stream from L2 (cpu-kernel-notes: keep operands in L1). */
    for (int r = 0; r < rows_pad; r++)
      sc->tile_max[r] = -INFINITY;
    for (int p = 0, take; p < npanels; p += take) {
      take = stsa_panel_step(kern->qk2 != NULL, npanels - p);
      for (int r = 0; r < rows_pad; r += pb->mr)
        stsa_qk_panels(kern, sc->q + (int64_t)r * D, D, kt + (int64_t)p * D * pb->nr,
                       take, sc->s + (int64_t)r * ld_s + p * pb->nr, ld_s,
                       sc->tile_max + r);
    }
    /* The folded maxima count masked pairs and the zero scores of padding
     * columns, so partial tiles and ragged ones (n not a multiple of nr)
     * find their maxima again. */
    int exact_max = n % pb->nr == 0;
    if (!safe) {
      mark_neg_inf_kept(sc->s, ld_s, rows, n);
      exact_max = 0;
    }
    if (partial) {
      list->mask(list->mask_ctx, i, q0, 0, rows, k0, n, sc->s, ld_s);
      exact_max = 0;
    }
    const int nbad = partial && kv->v_nonfinite[tile]
                         ? screen_v_tile(pb, kv, sp.pack0, n, rows, ld_s, sc)
                         : 0;
    kern->softmax(sc->s, ld_s, rows_pad, n, sc->m, sc->l, sc->alpha,
                  exact_max ? sc->tile_max : NULL);
    const float *vp = nbad ? sc->v_safe : vp_full;
    const int64_t ld_panel = nbad ? pb->kv_tile : pb->Skv_pad;
    for (int j = 0, take; j < D_pad / pb->nr; j += take) {
      take = stsa_panel_step(kern->pv2 != NULL, D_pad / pb->nr - j);
      for (int r = 0; r < rows_pad; r += pb->mr)
        stsa_pv_panels(kern, sc->s + (int64_t)r * ld_s, ld_s, n,
                       vp + j * ld_panel * pb->nr, ld_panel * pb->nr, take,
                       sc->o + (int64_t)r * D_pad + j * pb->nr, D_pad, sc->alpha + r);
    }
    if (nbad)
      add_nonfinite_v(pb, kv, sp.pack0, rows, nbad, ld_s, sc);
  }
  run_tails(pb, kv, &ts, rows, rows_pad, sc);
  store_rows(pb, b, h, q0, rows, q_rows, kv->v_exp, sc);
}
