/*
 * fuzz_tensor.h — what the attention and SVG2 session targets share: exact
 * buffers with snapshots, tensors in a layout the input picks, values over
 * the whole finite range of each dtype, and the finite-input contract
 * (stsa.h, "Finite range", at stsa_attention) as a per-element predicate.
 *
 * A target defines FUZZ_TARGET (its name, for messages) and FUZZ_TRACE (the
 * environment variable that turns its tracing on) before including it.
 */
#ifndef STSA_FUZZ_TENSOR_H
#define STSA_FUZZ_TENSOR_H

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/convert.h"
#include "fuzz_reader.h"
#include "stsa.h"

#define FT_UNUSED __attribute__((unused))

/* FUZZ_TRACE=1 prints each call and its outcome (reproducing an input). */
static FT_UNUSED int tracing(void) {
  static int on = -1;
  if (on < 0)
    on = getenv(FUZZ_TRACE) != NULL;
  return on;
}

/* A violation: abort() so that libFuzzer records the input. */
static void fail(const char *why, const char *detail) {
  fprintf(stderr, "%s: %s (%s)\n", FUZZ_TARGET, why, detail ? detail : "");
  abort();
}

static FT_UNUSED stsa_ctx *new_ctx(stsa_backend backend, int threads, int q_tile,
                                   int kv_tile, int check_finite) {
  stsa_ctx *ctx = NULL;
  if (stsa_ctx_create(&ctx) != STSA_OK)
    fail("stsa_ctx_create failed", NULL);
  if (stsa_ctx_set(ctx, STSA_PARAM_BACKEND, backend) != STSA_OK ||
      stsa_ctx_set(ctx, STSA_PARAM_THREADS, threads) != STSA_OK ||
      stsa_ctx_set(ctx, STSA_PARAM_Q_TILE, q_tile) != STSA_OK ||
      stsa_ctx_set(ctx, STSA_PARAM_KV_TILE, kv_tile) != STSA_OK ||
      stsa_ctx_set(ctx, STSA_PARAM_CHECK_FINITE, check_finite) != STSA_OK)
    fail("stsa_ctx_set refused a valid value", stsa_ctx_last_error(ctx));
  return ctx;
}

static FT_UNUSED uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Uniform in [0, 1). */
static FT_UNUSED double unit(uint64_t *rng) {
  return (double)(splitmix(rng) >> 11) * 0x1.0p-53;
}

/* ---- buffers ------------------------------------------------------------- */
enum { MAX_BUFS = 12 };

typedef struct buf {
  unsigned char *base; /* malloc'ed exactly `bytes` */
  size_t bytes;
  unsigned char *snap; /* contents before the call */
} buf;

typedef struct arena {
  buf b[MAX_BUFS];
  int n;
} arena;

static FT_UNUSED buf *arena_new(arena *a, size_t bytes) {
  if (a->n == MAX_BUFS)
    fail("too many buffers", NULL);
  buf *b = &a->b[a->n++];
  b->bytes = bytes ? bytes : 1;
  b->base = malloc(b->bytes);
  b->snap = malloc(b->bytes);
  if (!b->base || !b->snap)
    fail("out of memory in the harness", NULL);
  return b;
}

static FT_UNUSED void arena_snapshot(arena *a) {
  for (int i = 0; i < a->n; i++)
    memcpy(a->b[i].snap, a->b[i].base, a->b[i].bytes);
}

static FT_UNUSED void arena_free(arena *a) {
  for (int i = 0; i < a->n; i++) {
    free(a->b[i].base);
    free(a->b[i].snap);
  }
  a->n = 0;
}

static FT_UNUSED int buf_unchanged(const buf *b) {
  return !memcmp(b->base, b->snap, b->bytes);
}

/* ---- elements ------------------------------------------------------------ */
static FT_UNUSED double dtype_max(stsa_dtype t) {
  return t == STSA_F16 ? 65504.0 : t == STSA_BF16 ? 0x1.fep127 : FLT_MAX;
}
/* Exponents of the smallest subnormal and of the largest finite value. */
static FT_UNUSED int dtype_emin(stsa_dtype t) {
  return t == STSA_F16 ? -24 : t == STSA_BF16 ? -133 : -149;
}
static FT_UNUSED int dtype_emax(stsa_dtype t) { return t == STSA_F16 ? 15 : 127; }
static FT_UNUSED double dtype_min_normal(stsa_dtype t) {
  return t == STSA_F16 ? 0x1p-14 : 0x1p-126;
}

static FT_UNUSED size_t elem_off(const stsa_tensor *t, int64_t b, int64_t s, int64_t h,
                                 int64_t d) {
  return (size_t)(b * t->stride[0] + s * t->stride[1] + h * t->stride[2] +
                  d * t->stride[3]);
}

static FT_UNUSED double load_at(const stsa_tensor *t, size_t off) {
  const unsigned char *p =
      (const unsigned char *)t->data + off * stsa_dtype_size(t->dtype);
  if (t->dtype == STSA_F32) {
    float x;
    memcpy(&x, p, 4);
    return x;
  }
  uint16_t h16;
  memcpy(&h16, p, 2);
  return t->dtype == STSA_F16 ? stsa_f16_to_f32(h16) : stsa_bf16_to_f32(h16);
}

static FT_UNUSED double load(const stsa_tensor *t, int64_t b, int64_t s, int64_t h,
                             int64_t d) {
  return load_at(t, elem_off(t, b, s, h, d));
}

/* Stores x rounded to the dtype; a finite x past the largest finite value
 * (before or after rounding) saturates to it, so finite stays finite. */
static FT_UNUSED void store_at(const stsa_tensor *t, size_t off, double x) {
  unsigned char *p = (unsigned char *)t->data + off * stsa_dtype_size(t->dtype);
  const double most = dtype_max(t->dtype);
  if (isfinite(x) && fabs(x) > most)
    x = copysign(most, x);
  if (t->dtype == STSA_F32) {
    const float f = (float)x;
    memcpy(p, &f, 4);
    return;
  }
  uint16_t h =
      t->dtype == STSA_F16 ? stsa_f32_to_f16((float)x) : stsa_f32_to_bf16((float)x);
  const int inf = t->dtype == STSA_F16 ? (h & 0x7fff) == 0x7c00 : (h & 0x7fff) == 0x7f80;
  if (inf && isfinite(x))
    h = (uint16_t)((h & 0x8000) | (t->dtype == STSA_F16 ? 0x7bff : 0x7f7f));
  memcpy(p, &h, 2);
}

/* Elements a checked descriptor spans (max offset + 1), or 0 when the
 * descriptor is not plausible enough to allocate for. */
static FT_UNUSED size_t span_of(const stsa_tensor *t) {
  uint64_t span = 1;
  for (int i = 0; i < 4; i++) {
    if (t->shape[i] < 1 || t->stride[i] < 0 || t->shape[i] > 4096 ||
        t->stride[i] > 1 << 24)
      return 0;
    span += (uint64_t)(t->shape[i] - 1) * (uint64_t)t->stride[i];
  }
  return span > (1u << 24) ? 0 : (size_t)span;
}

/* ---- magnitudes ------------------------------------------------------------ */
/* An exponent over the dtype's whole range, from its smallest subnormal to
 * two past its largest finite value (saturating there). */
static FT_UNUSED int draw_exp(reader *r, stsa_dtype dt) {
  const int lo = dtype_emin(dt), hi = dtype_emax(dt) + 2;
  return lo + (int)((byte(r) * (unsigned)(hi - lo) + 127) / 255);
}

/* One extreme value: the largest finite, the smallest subnormal or normal,
 * a signed zero, or a random mantissa at a drawn exponent. */
static FT_UNUSED double extreme_value(reader *r, uint64_t *rng, stsa_dtype dt) {
  const unsigned kind = byte(r);
  const double sign = kind & 8 ? -1.0 : 1.0;
  switch (kind % 8) {
  case 0:
    return sign * dtype_max(dt);
  case 1:
    return sign * ldexp(1.0, dtype_emin(dt));
  case 2:
    return sign * dtype_min_normal(dt);
  case 3:
    return sign * 0.0;
  case 4:
    return sign * 1e12;
  default:
    return sign * ldexp(1.0 + unit(rng), draw_exp(r, dt));
  }
}

/* A random (batch, token, head) row of t. */
static FT_UNUSED void random_row(const stsa_tensor *t, uint64_t *rng, int64_t *b,
                                 int64_t *s, int64_t *h) {
  *b = (int64_t)(splitmix(rng) % (uint64_t)t->shape[0]);
  *s = (int64_t)(splitmix(rng) % (uint64_t)t->shape[1]);
  *h = (int64_t)(splitmix(rng) % (uint64_t)t->shape[2]);
}

/* Reshapes the values of a valid tensor (uniform in [-2, 2) so far) to the
 * magnitudes the input asks for:
 *   profile % 8 < 4: unchanged;
 *   4: the whole tensor times 2^E, E over the dtype's whole range (tiny,
 *      subnormal, up to the largest finite, saturating there);
 *   5: 1..4 whole rows (a token of a head): times 2^E, or every element set
 *      to a random sign and mantissa at 2^E;
 *   6: 1..8 single elements set to extremes (largest finite, smallest
 *      subnormal or normal, -0, 1e12, random mantissa at 2^E);
 *   7: all three.
 * The bytes are read whether or not the tensor is valid (apply = 0). */
static FT_UNUSED void shape_values(reader *r, uint64_t *rng, const stsa_tensor *t,
                                   int apply) {
  const unsigned p = byte(r) % 8;
  if (p < 4)
    return;
  const stsa_dtype dt = apply ? t->dtype : STSA_F32;
  const int64_t B = t->shape[0], S = t->shape[1], H = t->shape[2], D = t->shape[3];
  if (p == 4 || p == 7) {
    const double f = ldexp(1.0, draw_exp(r, dt));
    for (int64_t b = 0; apply && b < B; b++)
      for (int64_t s = 0; s < S; s++)
        for (int64_t h = 0; h < H; h++)
          for (int64_t d = 0; d < D; d++) {
            const size_t off = elem_off(t, b, s, h, d);
            store_at(t, off, f * load_at(t, off));
          }
  }
  if (p == 5 || p == 7) {
    const unsigned c = byte(r);
    for (unsigned i = 0; i < 1 + c % 4; i++) {
      const int e = draw_exp(r, dt);
      int64_t b, s, h;
      if (!apply)
        continue;
      random_row(t, rng, &b, &s, &h);
      for (int64_t d = 0; d < D; d++) {
        const size_t off = elem_off(t, b, s, h, d);
        if (c & 16)
          store_at(t, off, (splitmix(rng) & 1 ? -1 : 1) * ldexp(1.0 + unit(rng), e));
        else
          store_at(t, off, ldexp(load_at(t, off), e));
      }
    }
  }
  if (p == 6 || p == 7) {
    const unsigned c = byte(r);
    for (unsigned i = 0; i < 1 + c % 8; i++) {
      const double x = extreme_value(r, rng, dt);
      int64_t b, s, h;
      if (!apply)
        continue;
      random_row(t, rng, &b, &s, &h);
      store_at(t, elem_off(t, b, s, h, (int64_t)(splitmix(rng) % (uint64_t)D)), x);
    }
  }
}

/* Multiplies every element of a valid tensor by f (saturating). */
static FT_UNUSED void scale_tensor(const stsa_tensor *t, double f) {
  for (int64_t b = 0; b < t->shape[0]; b++)
    for (int64_t s = 0; s < t->shape[1]; s++)
      for (int64_t h = 0; h < t->shape[2]; h++)
        for (int64_t d = 0; d < t->shape[3]; d++) {
          const size_t off = elem_off(t, b, s, h, d);
          store_at(t, off, f * load_at(t, off));
        }
}

/* The largest Euclidean norm of a row of a valid tensor (+inf for an Inf;
 * rows with a NaN are passed over). */
static FT_UNUSED double max_row_norm(const stsa_tensor *t) {
  double most = 0;
  for (int64_t b = 0; b < t->shape[0]; b++)
    for (int64_t s = 0; s < t->shape[1]; s++)
      for (int64_t h = 0; h < t->shape[2]; h++) {
        double ss = 0;
        for (int64_t d = 0; d < t->shape[3]; d++) {
          const double x = load(t, b, s, h, d);
          ss += x * x;
        }
        most = fmax(most, sqrt(ss));
      }
  return most;
}

/* Brings the inputs inside the finite range more often than chance would
 * (one byte): bit 0 scales k (bit 1: q) down until scale |q_i| |k_j| stays
 * under 1e37; bit 2 scales v down until it fits out's dtype. Tensors must
 * be valid and distinct (the caller checks). */
static FT_UNUSED void fit_range(unsigned f, double scale, const stsa_tensor *q,
                                const stsa_tensor *k, const stsa_tensor *v,
                                stsa_dtype out_dtype) {
  if (f & 1) {
    const double reach = scale * max_row_norm(q) * max_row_norm(k);
    if (isfinite(reach) && reach > 1e37)
      scale_tensor(f & 2 ? q : k, 0.5 * 1e37 / reach);
  }
  if (f & 4) {
    double most = 0;
    for (int64_t b = 0; b < v->shape[0]; b++)
      for (int64_t s = 0; s < v->shape[1]; s++)
        for (int64_t h = 0; h < v->shape[2]; h++)
          for (int64_t d = 0; d < v->shape[3]; d++)
            most = fmax(most, fabs(load(v, b, s, h, d)));
    if (isfinite(most) && most > dtype_max(out_dtype))
      scale_tensor(v, 0.5 * dtype_max(out_dtype) / most);
  }
}

/* ---- tensors --------------------------------------------------------------- */
/* A tensor of the given sizes in a layout the input picks, in its own exact
 * buffer (or, rarely, a broken descriptor over a small one). *broken tells
 * whether the descriptor was deliberately made invalid. */
static FT_UNUSED stsa_tensor make_tensor(reader *r, arena *a, uint64_t *rng,
                                         stsa_dtype dt, int64_t B, int64_t S, int64_t H,
                                         int64_t D, int *broken, buf **out_buf) {
  stsa_tensor t;
  memset(&t, 0, sizeof t);
  t.dtype = dt;
  t.shape[0] = B, t.shape[1] = S, t.shape[2] = H, t.shape[3] = D;
  const unsigned lay = byte(r);
  int order[4] = {3, 2, 1, 0}; /* innermost first: bshd */
  if (lay % 4 == 1) {
    order[1] = 1, order[2] = 2; /* bhsd */
  } else if (lay % 4 >= 2) {    /* any order */
    for (int i = 3; i > 0; i--) {
      int j = (int)(byte(r) % (unsigned)(i + 1)), tmp = order[i];
      order[i] = order[j], order[j] = tmp;
    }
  }
  int64_t step = lay % 4 == 3 ? 1 + byte(r) % 3 : 1; /* strided innermost */
  for (int i = 0; i < 4; i++) {
    int d = order[i];
    t.stride[d] = step;
    step = step * t.shape[d] + (lay & 16 ? byte(r) % 4 : 0); /* padding */
  }
  *broken = 0;
  const unsigned brk = byte(r);
  if (brk >= 248) { /* a descriptor the library must refuse */
    *broken = 1;
    switch (brk % 4) {
    case 0:
      t.stride[byte(r) % 4] = 0;
      break;
    case 1: /* aliasing: a non-innermost dim steps by the innermost's stride */
      if (t.shape[order[0]] > 1 && t.shape[order[1]] > 1)
        t.stride[order[1]] = t.stride[order[0]];
      else
        t.shape[3] = 0;
      break;
    case 2:
      t.shape[byte(r) % 4] = brk & 1 ? 0 : -3;
      break;
    default:
      t.dtype = (stsa_dtype)(3 + byte(r) % 2);
      break;
    }
  }
  size_t esize = stsa_dtype_size(t.dtype) ? stsa_dtype_size(t.dtype) : 4;
  size_t span = span_of(&t);
  /* alignment: malloc's, element-aligned but odd, or misaligned */
  const unsigned al = byte(r) % 8;
  size_t offset = al < 5 ? 0 : al < 7 ? esize * (1 + byte(r) % 7) : 1;
  if (offset == 1)
    *broken = esize > 1 ? 1 : *broken;
  buf *b = arena_new(a, offset + (span ? span : 16) * esize);
  t.data = b->base + offset;
  for (size_t i = 0;
       i + esize <= b->bytes - offset && stsa_dtype_size(dt) && i / esize < span;
       i += esize) {
    float x = (float)(unit(rng) * 4.0 - 2.0);
    unsigned char *p = (unsigned char *)t.data + i;
    if (dt == STSA_F32)
      memcpy(p, &x, 4);
    else {
      uint16_t h = dt == STSA_F16 ? stsa_f32_to_f16(x) : stsa_f32_to_bf16(x);
      memcpy(p, &h, 2);
    }
  }
  if (!span)
    *broken = 1;
  /* magnitudes: on the elements a descriptor with sizes and a dtype spans */
  shape_values(r, rng, &t, span && stsa_dtype_size(t.dtype) == stsa_dtype_size(dt));
  if (out_buf)
    *out_buf = b;
  return t;
}

static FT_UNUSED stsa_dtype pick_dtype(reader *r) { return (stsa_dtype)(byte(r) % 3); }

/* ---- layer and step indices ----------------------------------------------- */
/* Mostly 0..3; one byte in eight: INT64_MAX, INT64_MIN, 2^58 + 9, -1, a
 * random 64-bit value, 10^8, -1..-256 or 2^32..2^62. */
static FT_UNUSED int64_t draw_index(reader *r) {
  const unsigned b = byte(r);
  if (b < 224)
    return b % 4;
  switch (b % 8) {
  case 0:
    return INT64_MAX;
  case 1:
    return INT64_MIN;
  case 2:
    return ((int64_t)1 << 58) + 9;
  case 3:
    return -1;
  case 4: {
    uint64_t x = 0;
    for (int i = 0; i < 8; i++)
      x = x << 8 | byte(r);
    return (int64_t)x;
  }
  case 5:
    return 100000000;
  case 6:
    return -1 - (int64_t)byte(r);
  default:
    return (int64_t)1 << (32 + byte(r) % 31);
  }
}

/* Judges the indices of an SVG call that returned st. A negative layer or
 * step must be refused: with STSA_ERR_BAD_PARAM, or (another check came
 * first) as the same call is at layer and step 0. A non-negative one, however
 * large, must do what the same call does at the smallest index of the same
 * dense/sparse policy. Returns 1 when that second call is needed (at *l2,
 * *s2; then index_verdict), 0 when st alone settles it. */
static FT_UNUSED int index_check(const stsa_svg_config *c, int64_t layer, int64_t step,
                                 stsa_status st, int64_t *l2, int64_t *s2) {
  if (layer < 0 || step < 0) {
    if (st == STSA_OK)
      fail("a negative layer or step was accepted", NULL);
    *l2 = *s2 = 0;
    return st != STSA_ERR_BAD_PARAM;
  }
  if (st == STSA_OK)
    return 0;
  const int64_t dl = c->dense_layers > 0 ? c->dense_layers : 0,
                ds = c->dense_steps > 0 ? c->dense_steps : 0;
  *l2 = layer >= dl ? dl : 0;
  *s2 = step >= ds ? ds : 0;
  return *l2 != layer || *s2 != step;
}

static FT_UNUSED void index_verdict(int64_t layer, int64_t step, stsa_status st,
                                    int64_t l2, int64_t s2, stsa_status again,
                                    const char *msg) {
  if (again == st)
    return;
  char why[320];
  snprintf(why, sizeof why, "layer %lld step %lld: %s; layer %lld step %lld: %s (%s)",
           (long long)layer, (long long)step, stsa_status_str(st), (long long)l2,
           (long long)s2, stsa_status_str(again), msg);
  fail(layer < 0 || step < 0 ? "a negative index refused for the wrong reason"
                             : "a large index changed the outcome",
       why);
}

/* ---- the finite-input contract ------------------------------------------- */
/* For finite q, k and v of a (batch entry, head) with scale |q_i| |k_j| <
 * 1e38 for every key, row i is finite (stsa.h, "Finite range"); a column d
 * is so in out's dtype when every |v_j[d]| fits it (out is a convex
 * combination of v's rows). The keys a mask drops only make it easier, so
 * the largest |k_j| over all keys serves every mask. */
typedef struct expect {
  int64_t B, Sq, H, D;
  double scale;       /* the effective scale, > 0 */
  double out_max;     /* out's dtype's largest finite value */
  double *qn;         /* [B][Sq][H] |q_i| */
  double *kmax;       /* [B][H] max_j |k_j| */
  double *vmax;       /* [B][H][D] max_j |v_j[d]| */
  unsigned char *fin; /* [B][H] every element of q, k and v finite */
} expect;

static FT_UNUSED void expect_init(expect *e, const stsa_tensor *q, const stsa_tensor *k,
                                  const stsa_tensor *v, stsa_dtype out_dtype,
                                  double scale) {
  const int64_t B = q->shape[0], Sq = q->shape[1], Skv = k->shape[1], H = q->shape[2],
                D = q->shape[3];
  e->B = B, e->Sq = Sq, e->H = H, e->D = D;
  e->scale = scale;
  e->out_max = dtype_max(out_dtype);
  e->qn = malloc(sizeof(double) * (size_t)(B * Sq * H));
  e->kmax = calloc((size_t)(B * H), sizeof(double));
  e->vmax = calloc((size_t)(B * H * D), sizeof(double));
  e->fin = malloc((size_t)(B * H));
  if (!e->qn || !e->kmax || !e->vmax || !e->fin)
    fail("out of memory in the harness", NULL);
  memset(e->fin, 1, (size_t)(B * H));
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++) {
      unsigned char *fin = &e->fin[b * H + h];
      for (int64_t s = 0; s < Sq; s++) {
        double ss = 0;
        for (int64_t d = 0; d < D; d++) {
          const double x = load(q, b, s, h, d);
          *fin &= (unsigned char)isfinite(x);
          ss += x * x;
        }
        e->qn[(b * Sq + s) * H + h] = sqrt(ss);
      }
      for (int64_t s = 0; s < Skv; s++) {
        double ss = 0;
        for (int64_t d = 0; d < D; d++) {
          const double x = load(k, b, s, h, d), y = load(v, b, s, h, d);
          *fin &= (unsigned char)(isfinite(x) && isfinite(y));
          ss += x * x;
          double *vm = &e->vmax[(b * H + h) * D + d];
          *vm = fmax(*vm, fabs(y));
        }
        e->kmax[b * H + h] = fmax(e->kmax[b * H + h], sqrt(ss));
      }
    }
}

static FT_UNUSED void expect_free(expect *e) {
  free(e->qn);
  free(e->kmax);
  free(e->vmax);
  free(e->fin);
}

/* scale |q_i| max_j |k_j| of row (b, s, h). */
static FT_UNUSED double expect_reach(const expect *e, int64_t b, int64_t s, int64_t h) {
  return e->scale * e->qn[(b * e->Sq + s) * e->H + h] * e->kmax[b * e->H + h];
}

/* 1: the contract says row (b, s, h) is finite (lse included). */
static FT_UNUSED int row_finite(const expect *e, int64_t b, int64_t s, int64_t h) {
  return e->fin[b * e->H + h] && expect_reach(e, b, s, h) < 1e38 * (1 - 1e-9);
}

/* 1: the contract says out[b][s][h][d] is finite in out's dtype. */
static FT_UNUSED int elem_finite(const expect *e, int64_t b, int64_t s, int64_t h,
                                 int64_t d) {
  return row_finite(e, b, s, h) && e->vmax[(e->H * b + h) * e->D + d] <= e->out_max;
}

/* After a successful call: out's non-element bytes untouched, and (e not
 * NULL) outputs finite where the finite-input contract says so. */
static FT_UNUSED void check_out_written(const stsa_tensor *out, const buf *ob,
                                        const expect *e) {
  const size_t esize = stsa_dtype_size(out->dtype);
  const size_t base = (size_t)((const unsigned char *)out->data - ob->base);
  unsigned char *owned = calloc(ob->bytes, 1);
  if (!owned)
    fail("out of memory in the harness", NULL);
  for (int64_t b = 0; b < out->shape[0]; b++)
    for (int64_t s = 0; s < out->shape[1]; s++)
      for (int64_t h = 0; h < out->shape[2]; h++)
        for (int64_t d = 0; d < out->shape[3]; d++) {
          memset(owned + base + esize * elem_off(out, b, s, h, d), 1, esize);
          if (e && !isfinite(load(out, b, s, h, d)) && elem_finite(e, b, s, h, d)) {
            char at[160];
            snprintf(at, sizeof at, "b %lld, s %lld, h %lld, d %lld; reach %g",
                     (long long)b, (long long)s, (long long)h, (long long)d,
                     expect_reach(e, b, s, h));
            if (tracing())
              for (int64_t j = 0; j < out->shape[1] && j < 64; j++)
                fprintf(stderr, "  out[%lld] %g\n", (long long)j, load(out, b, j, h, d));
            fail("non-finite output from finite inputs inside the finite range", at);
          }
        }
  for (size_t i = 0; i < ob->bytes; i++)
    if (!owned[i] && ob->base[i] != ob->snap[i])
      fail("a byte of out's buffer outside its elements was written", NULL);
  free(owned);
}

#endif
