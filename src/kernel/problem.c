/* problem.c — see problem.h. */
#include "kernel/problem.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/context.h"
#include "core/tensor.h"
#include "kernel/dispatch.h"
#include "kernel/tile_values.h"

#define LOG2E 1.4426950408889634

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

/* The power of two of qscale = scale * log2(e) that head (b, h) of q must
 * move onto K so that none of its q times qscale leaves f32's range (as
 * far as its K allows: stsa_kv_k_exp); 0 where it fits, and for a head
 * holding NaN or Inf, which follows stsa.h's rules unscaled. */
int stsa_head_q_exp(const stsa_tensor *q, const stsa_kernels *kern, int64_t b, int64_t h,
                    double qscale) {
  if (qscale <= 1.0)
    return 0;
  const double reach =
      (double)stsa_abs_max_value(head_abs_max_bits(q, kern, b, h)) * qscale;
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
      if (stsa_head_q_exp(q, kern, b, h, qscale) > 0)
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
  pb->D_pad = (int)stsa_round_up(pb->D, pb->nr);
  double scale = opts && opts->scale > 0 ? opts->scale : 1.0 / sqrt((double)pb->D);
  pb->scale = scale;
  pb->k_fit = k_fit_for(q, kern, scale * LOG2E);
  pb->qscale = (float)(scale * LOG2E);
  pb->lse = opts ? opts->lse : NULL;
  pb->q_tile = (int)stsa_round_up(q_tile, pb->mr);
  pb->kv_tile = kv_tile;
  pb->kv_stride = kv_tile;
  pb->Skv_pad = stsa_round_up(pb->Skv, kv_tile);
  pb->kern = kern;
  pb->D32 = (int)stsa_round_up(pb->D, 32);
}

/* The bf16 terms a precision asks for: its number (stsa.h pins BF16,
 * NEAR_F32 and F32 to one, two and three terms), and for AUTO what the
 * output keeps: two terms put P.V within 2^-18 of the f32 probabilities,
 * below a f16 or bf16 output's rounding (2^-11, 2^-9); an f32 output gets
 * all three, the f32 probabilities exactly. */
_Static_assert(STSA_PV_BF16 == 1 && STSA_PV_NEAR_F32 == 2 && STSA_PV_F32 == 3,
               "a precision's value is its number of bf16 terms");
static int bf16_terms_for(stsa_pv_precision precision, stsa_dtype out) {
  if (precision != STSA_PV_AUTO)
    return (int)precision;
  return out == STSA_F32 ? 3 : 2;
}

int stsa_kv_pack_align(const stsa_kernels *kern, stsa_dtype q, stsa_dtype k,
                       stsa_dtype v) {
  return stsa_bf16_tiles_take(kern, q, k, v) ? STSA_BF16_KEY_BLOCK : kern->nr;
}

void stsa_problem_use_bf16_tiles(stsa_attn_problem *pb, stsa_pv_precision precision) {
  const int variable = pb->kv_tiles_max != 0;
  pb->bf16_tiles =
      stsa_bf16_tiles_take(pb->kern, pb->q->dtype, pb->k->dtype, pb->v->dtype) &&
      (!variable || pb->spans_bf16_aligned);
  if (pb->bf16_tiles) { /* the scratch, and fixed tiles, on whole 32-key blocks */
    pb->kv_stride = (int)stsa_round_up(pb->kv_tile, STSA_BF16_KEY_BLOCK);
    const int64_t fixed = (pb->Skv + pb->kv_tile - 1) / pb->kv_tile * pb->kv_stride;
    if (!variable || (pb->fixed_kv_heads && fixed > pb->Skv_pad))
      pb->Skv_pad = fixed; /* variable spans keep the plans' packed length */
  }
  pb->bf16_terms = bf16_terms_for(precision, pb->out->dtype);
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
  info->pv_precision =
      info->bf16_terms ? (stsa_pv_precision)info->bf16_terms : STSA_PV_F32;
  info->why[0] = '\0';
  if (ref || pb->bf16_tiles || !pb->kern->full_tile_bf16)
    return; /* the backend's own arithmetic */
  const stsa_dtype qt = pb->q->dtype, kt = pb->k->dtype, vt = pb->v->dtype;
  if (qt != STSA_BF16 || kt != STSA_BF16 || vt != STSA_BF16)
    snprintf(info->why, sizeof info->why,
             "q, k and v are %s, %s and %s: the bf16 tiles take bf16 only",
             stsa_dtype_name(qt), stsa_dtype_name(kt), stsa_dtype_name(vt));
  else /* the one call the tiles refuse: a plan built for f32 inputs (or another backend)
        */
    snprintf(
        info->why, sizeof info->why,
        "a plan of variable kv tiles packed at %d-key boundaries: the bf16 tiles take "
        "spans on %d-key blocks (plans built for bf16 inputs on this backend have them)",
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
  int variable = 0, aligned = 1, fixed_kv_heads = 0;
  for (int64_t h = 0; h < H; h++) {
    const stsa_block_sparse *bs = heads[h].bs;
    variable |= bs->q_start || bs->kv_start;
    fixed_kv_heads |= !bs->kv_start;
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
  pb->fixed_kv_heads = fixed_kv_heads;
  pb->Skv_pad = pack;
}

void stsa_problem_build(stsa_attn_problem *pb, const stsa_ctx *ctx,
                        const stsa_problem_args *args) {
  stsa_problem_init(pb, args->q, args->k, args->v, args->out, args->opts, args->q_tile,
                    args->kv_tile, &ctx->run->kern);
  if (args->heads) /* plans of variable (cluster) tiles size the units and the pack */
    stsa_problem_fit_layouts(pb, args->heads, args->q->shape[2]);
  if (!args->f32_tiles)
    stsa_problem_use_bf16_tiles(pb, ctx->pv_precision);
}
