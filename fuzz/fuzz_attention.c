/*
 * fuzz_attention.c — libFuzzer target for the attention entry points:
 * stsa_attention, stsa_attention_part, stsa_sparse_attention(_part) (plans with and
 * without q_rows) and the SVG session (create + call).
 *
 * The input chooses the entry point, backend (any this machine runs but
 * auto: fuzz_backend.h), threads, tile sizes, finite checks, and per tensor the
 * dtype, sizes (N up to a few hundred, D up to 128), a layout (bshd, bhsd, any dim order
 * with padding, strided D), alignment, magnitudes over the dtype's whole finite range
 * (the whole tensor, whole rows, single outliers or all three, from the smallest
 * subnormal to the largest finite value: fuzz_tensor.h), and sometimes aliasing (out
 * on an input, lse inside out, q = k = v) or a broken descriptor. One more byte may
 * scale q or k (v) down into the finite range (out's dtype), so that huge values meet
 * the contract below often. SVG calls take layer and step indices from small ones to
 * INT64_MAX, INT64_MIN, 2^58 + 9, -1 and random 64-bit values. EVERY buffer is
 * malloc'ed exactly as large as its descriptor claims, so ASan reports any read or
 * write past it. Then, whatever the status:
 *   - a failed call wrote nothing: every buffer equals its snapshot, and left a message;
 *   - a successful call wrote no input, and no byte of out that is not one of
 *     out's elements (padding between strided rows stays as it was);
 *   - the finite-input contract (stsa.h, "Finite range"): where q, k and v of a
 *     head are finite and scale |q_i| |k_j| < 1e38 for every key, row i of out is
 *     finite (each column whose |v_j[d]| fit out's dtype) and its lse is not NaN;
 *   - small successful calls give what the reference backend gives on a fresh
 *     context, within a tolerance relative to the column's largest |v_j[d]| that
 *     grows with the logits' f32 rounding (so it holds at any magnitude), and
 *     bitwise the same with 1 and 2 threads (the library's determinism contract);
 *   - SVG: a negative layer or step gives STSA_ERR_BAD_PARAM (unless the call is
 *     refused for another reason first, as it is with layer and step 0), and a
 *     non-negative one, however large, the outcome of the same call at the
 *     smallest index of the same dense/sparse policy.
 * Any violation calls abort() so libFuzzer records the input.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_TARGET "fuzz_attention"
#define FUZZ_TRACE "FUZZ_ATTENTION_TRACE"
#include "fuzz_backend.h"
#include "fuzz_tensor.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ---- input decoding ------------------------------------------------------ */

/* Mostly small sizes, now and then up to `big`. */
static int64_t size_in(reader *r, int64_t small, int64_t big) {
  unsigned b = byte(r);
  if (b >= 240)
    return 1 + (int64_t)(u16(r) % (unsigned)big);
  return 1 + (int64_t)(b % (unsigned)small);
}

/* ---- checks -------------------------------------------------------------- */
/* Output tolerance against the reference: the kernels accumulate in f32, the
 * reference in double; out is rounded to its dtype either way. Relative to the
 * largest |v_j[d]| of the column (out is a convex combination of them). */
static double tolerance(const stsa_tensor *out, const stsa_tensor *q) {
  double t = out->dtype == STSA_BF16 ? 0.02 : out->dtype == STSA_F16 ? 3e-3 : 5e-4;
  return q->dtype == STSA_F32 ? t : t + 1e-3; /* low-precision q: f32 vs double dots */
}

/* The largest |out - ref| over the elements the contract covers, each over
 * its tolerance (> 1 fails; +inf where either is not finite). Each logit
 * carries the f32 dot product's rounding, (D + 8) ulps of the row's reach
 * scale |q_i| max_j |k_j|, and an absolute error from subnormals (the bf16
 * tiles, AMX's or vdpbf16ps, take bf16 values below 2^-126 as zero, the others lose the
 * bits of scaled q under 2^-149): a weight then moves by expm1(2 delta).
 * Besides out's own rounding, an absolute floor: f32's subnormal spacing
 * per operation, times 2^v_exp where a head's V near FLT_MAX makes the
 * kernels scale its V down (tile_loop.c, stsa_v_exp_for: 2^v_exp <= 2 max|v|
 * Skv_pad / 2^126, kv tiles <= 512), which a column of tiny values shows. */
static double worst_error(const stsa_tensor *out, const stsa_tensor *ref, const expect *e,
                          double base, int bf16_tiles, int64_t skv, int64_t *at) {
  const double sub = bf16_tiles ? 0x1p-124 : 0x1p-147;
  const double floor_out = (out->dtype == STSA_F16    ? 0x1p-24
                            : out->dtype == STSA_BF16 ? 0x1p-132
                                                      : 0x1p-148) +
                           (double)skv * 0x1p-147 + (bf16_tiles ? 0x1p-124 : 0);
  const double rootd = sqrt((double)e->D), big = fmax(e->scale, 1.0);
  double worst = 0;
  for (int64_t b = 0; b < out->shape[0]; b++)
    for (int64_t s = 0; s < out->shape[1]; s++)
      for (int64_t h = 0; h < out->shape[2]; h++) {
        if (!row_finite(e, b, s, h))
          continue;
        double vhead = 0;
        for (int64_t d = 0; d < e->D; d++)
          vhead = fmax(vhead, e->vmax[(b * e->H + h) * e->D + d]);
        const double floor_v = vhead * (double)(skv + 4) * (double)(skv + 512) * 0x1p-275;
        const double reach = expect_reach(e, b, s, h),
                     qn = e->qn[(b * e->Sq + s) * e->H + h], kn = e->kmax[b * e->H + h];
        const double delta = (double)(e->D + 8) * 0x1p-24 * reach +
                             sub * rootd * big * (qn + kn) + (double)e->D * 0x1p-140;
        const double rel = base + expm1(fmin(2 * delta, 700.0));
        for (int64_t d = 0; d < out->shape[3]; d++) {
          if (!elem_finite(e, b, s, h, d))
            continue;
          const double x = load(out, b, s, h, d), y = load(ref, b, s, h, d);
          const double tol =
              rel * e->vmax[(b * e->H + h) * e->D + d] + floor_out + floor_v;
          const double err = isfinite(x) && isfinite(y) ? fabs(x - y) / tol : INFINITY;
          if (!(err <= worst)) {
            worst = err;
            at[0] = b, at[1] = s, at[2] = h, at[3] = d;
            if (tracing())
              fprintf(stderr,
                      "  [%lld %lld %lld %lld] out %.9g ref %.9g tol %.3g (max |v| %.3g, "
                      "reach %.3g)\n",
                      (long long)b, (long long)s, (long long)h, (long long)d, x, y, tol,
                      e->vmax[(b * e->H + h) * e->D + d], reach);
          }
        }
      }
  return worst;
}

static int same_elements(const stsa_tensor *a, const stsa_tensor *b) {
  for (int64_t i = 0; i < a->shape[0]; i++)
    for (int64_t s = 0; s < a->shape[1]; s++)
      for (int64_t h = 0; h < a->shape[2]; h++)
        for (int64_t d = 0; d < a->shape[3]; d++) {
          double x = load(a, i, s, h, d), y = load(b, i, s, h, d);
          if (!(x == y || (isnan(x) && isnan(y))))
            return 0;
        }
  return 1;
}

/* A second output of out's shape and layout, in its own exact buffer. */
static stsa_tensor clone_out(arena *a, const stsa_tensor *out, const buf *ob) {
  buf *b = arena_new(a, ob->bytes);
  memcpy(b->base, ob->snap, ob->bytes);
  stsa_tensor t = *out;
  t.data = b->base + ((const unsigned char *)out->data - ob->base);
  return t;
}

/* ---- the call ------------------------------------------------------------ */
typedef struct setup {
  stsa_backend backend;
  int threads, q_tile, kv_tile, check_finite;
} setup;

enum { OP_DENSE, OP_PART, OP_SPARSE, OP_SVG };

/* Plan masks: index masks for plain sequences, coordinate masks with a
 * geometry; sometimes OR/AND of two. */
static stsa_mask *index_leaf(reader *r) {
  stsa_mask *m = NULL;
  unsigned b = byte(r);
  switch (b % 4) {
  case 0:
    stsa_mask_full(&m);
    break;
  case 1:
    stsa_mask_causal((int64_t)(byte(r) % 17) - 8, &m);
    break;
  case 2:
    stsa_mask_local(b & 4 ? STSA_UNBOUNDED : byte(r) % 24,
                    b & 8 ? STSA_UNBOUNDED : byte(r) % 24, &m);
    break;
  default:
    stsa_mask_chunked_causal(1 + byte(r) % 20, &m);
    break;
  }
  return m;
}

static stsa_mask *video_leaf(reader *r, const stsa_geometry *g) {
  stsa_mask *m = NULL;
  switch (byte(r) % 5) {
  case 0:
    stsa_mask_frame_window(g, byte(r) % 4, &m);
    break;
  case 1:
    stsa_mask_position_band(g, byte(r) % 40, &m);
    break;
  case 2:
    stsa_mask_spatial_window(g, byte(r) % 3, byte(r) % 3, &m);
    break;
  case 3:
    stsa_mask_sink_frames(g, 1 + byte(r) % 2, &m);
    break;
  default:
    stsa_mask_text(g, &m);
    break;
  }
  return m;
}

static stsa_mask *make_mask(reader *r, const stsa_geometry *g) {
  stsa_mask *a = g && byte(r) % 4 ? video_leaf(r, g) : index_leaf(r);
  unsigned c = byte(r);
  if (c % 3 == 0 || !a)
    return a;
  stsa_mask *b = g && byte(r) % 2 ? video_leaf(r, g) : index_leaf(r), *m = NULL;
  if (b)
    (c % 3 == 1 ? stsa_mask_or : stsa_mask_and)(a, b, &m);
  stsa_mask_free(a);
  stsa_mask_free(b);
  return m;
}

/* Dense, part or sparse: shared tensor setup, one call, the checks. */
static void run_attention(reader *r, int op, const setup *su, uint64_t seed) {
  uint64_t rng = seed;
  arena ar = {0};
  const int64_t B = 1 + byte(r) % 2, H = 1 + byte(r) % 3;
  const unsigned dsel = byte(r);
  const int64_t D = dsel >= 250 ? (dsel & 1 ? 0 : 513) : 1 + dsel % 128;
  int64_t Sq = size_in(r, 48, 300), Skv = size_in(r, 48, 300);
  stsa_geometry geo = {0, 0, 0, 0, 0, STSA_TEXT_NONE};
  stsa_plan *plan = NULL;
  int64_t rows[64];
  stsa_mask *masks[3] = {NULL, NULL, NULL};
  stsa_ctx *ctx =
      new_ctx(su->backend, su->threads, su->q_tile, su->kv_tile, su->check_finite);
  stsa_sparse_opts sopts = {sizeof(stsa_sparse_opts), 0.0f, NULL,
                            STSA_SPARSE_EXACT,        NULL, 0};
  int64_t pairs_changed = -12345;
  if (op == OP_SPARSE) {
    const unsigned gsel = byte(r);
    const stsa_geometry *g = NULL;
    if (gsel % 2) { /* a small video, N <= 300 */
      geo.frames = 1 + byte(r) % 4;
      geo.height = 1 + byte(r) % 6;
      geo.width = 1 + byte(r) % 8;
      geo.text = gsel & 2 ? byte(r) % 12 : 0;
      geo.text_real = geo.text ? byte(r) % (unsigned)(geo.text + 1) : 0;
      geo.text_pos =
          geo.text ? (gsel & 4 ? STSA_TEXT_SUFFIX : STSA_TEXT_PREFIX) : STSA_TEXT_NONE;
      g = &geo;
      Sq = Skv = stsa_geometry_tokens(g);
    }
    const int nm = 1 + (int)(byte(r) % 2);
    const stsa_mask *head_masks[3];
    for (int i = 0; i < nm; i++)
      masks[i] = make_mask(r, g);
    for (int64_t h = 0; h < H; h++)
      head_masks[h] = masks[byte(r) % (unsigned)nm];
    stsa_plan_desc desc = {sizeof(stsa_plan_desc),
                           Sq,
                           Skv,
                           H,
                           head_masks,
                           g,
                           STSA_ORDER_NATIVE,
                           STSA_ORDER_NATIVE,
                           0,
                           0,
                           STSA_PLAN_ALLOW_EMPTY_ROWS,
                           NULL,
                           NULL};
    if (g) {
      desc.q_order = (stsa_order)(byte(r) % 2);
      desc.kv_order = (stsa_order)(byte(r) % 3);
    }
    const unsigned ts = byte(r);
    desc.q_tile = ts & 1 ? 6 * (1 + byte(r) % 16) : 0;
    desc.kv_tile = ts & 2 ? 16 * (1 + byte(r) % 8) : 0;
    if (ts & 4) { /* a plan over sampled rows: q and out hold only those */
      const int64_t n = 1 + byte(r) % 64;
      for (int64_t i = 0; i < n; i++)
        rows[i] = (int64_t)(u16(r) % (unsigned)Sq);
      desc.q_rows = rows;
      desc.s_q = n;
      Sq = ts & 8 ? Sq : n; /* sometimes the refused "all N rows" shape */
    }
    int bad_masks = 0;
    for (int i = 0; i < nm; i++)
      bad_masks |= masks[i] == NULL;
    stsa_status st = bad_masks ? STSA_ERR_BAD_MASK : stsa_plan_build(ctx, &desc, &plan);
    if (tracing() && st != STSA_OK)
      fprintf(stderr, "plan: %s %s\n", stsa_status_str(st), stsa_ctx_last_error(ctx));
    if (st != STSA_OK)
      goto done; /* plans have their own target */
    const unsigned so = byte(r);
    sopts.mode = (stsa_sparse_mode)(so % 4 == 3 ? 7 : so % 4);
    sopts.flags = (so & 4 ? STSA_SPARSE_PREPERMUTED : 0) | (so >= 250 ? 2u : 0u);
    sopts.pairs_changed = so & 8 ? &pairs_changed : NULL;
  }
  int broken = 0, b1;
  buf *qb, *kb, *vb, *ob;
  stsa_tensor q = make_tensor(r, &ar, &rng, pick_dtype(r), B, Sq, H, D, &b1, &qb);
  broken |= b1;
  stsa_tensor k = make_tensor(r, &ar, &rng, pick_dtype(r), B, Skv, H, D, &b1, &kb);
  broken |= b1;
  stsa_tensor v = make_tensor(r, &ar, &rng, pick_dtype(r), B, Skv, H, D, &b1, &vb);
  broken |= b1;
  const int64_t Sout = op == OP_SPARSE && (byte(r) >= 250) ? Sq + 1 : Sq;
  stsa_tensor out = make_tensor(r, &ar, &rng, pick_dtype(r), B, Sout, H, D, &b1, &ob);
  broken |= b1;
  memset(ob->base, 0x7b, ob->bytes);
  const unsigned alias = byte(r);
  switch (alias % 16) {
  case 0: /* out is q (written while read): must be refused */
    out = q, ob = qb;
    break;
  case 1:
    out = k, ob = kb;
    break;
  case 2: /* k and v the same tensor: allowed */
    v = k, vb = kb;
    break;
  case 3: /* q = k = v: allowed (self-attention on one buffer) */
    if (Sq == Skv)
      k = v = q, kb = vb = qb;
    break;
  default:
    break;
  }
  float *lse = NULL;
  buf *lb = NULL;
  const unsigned ls = byte(r);
  if (ls % 3 == 1) {
    lb = arena_new(&ar, sizeof(float) * (size_t)(B * H * Sq));
    lse = (float *)(void *)lb->base;
    memset(lse, 0x55, lb->bytes);
  } else if (ls % 3 == 2) {
    lse = (float *)out.data; /* on out's first element: refused (overlap or alignment) */
  }
  float scale = 0.0f;
  const unsigned sc = byte(r);
  if (sc >= 252)
    scale = sc & 1 ? -1.0f : NAN;
  else if (sc % 2)
    scale = (float)(1 + sc) / 256.0f;
  const double scale_eff = scale > 0 ? (double)scale : 1.0 / sqrt((double)D);
  const unsigned nan_k = byte(r), fit = byte(r);
  if (!broken && out.data != q.data && out.data != k.data)
    fit_range(fit, scale_eff, &q, &k, &v, out.dtype);
  if (nan_k >= 252) { /* a NaN in k, seen or not by the finite scan */
    size_t at = (size_t)(splitmix(&rng) % (kb->bytes / 2 ? kb->bytes / 2 : 1)) * 2;
    if (at + 2 <= kb->bytes)
      kb->base[at] = 0xff, kb->base[at + 1] = 0xff;
  }
  arena_snapshot(&ar);

  /* The reference backend loads every element through a dtype switch, in
   * double: under the sanitizers and coverage a problem of a few 10^7
   * multiply-adds takes seconds, which libFuzzer calls a timeout (4 s for
   * B 2, H 2, D 128, 199 x 199). Its semantics do not depend on the size,
   * so large problems are left to the tiled backends. */
  if (su->backend == STSA_BACKEND_REF && B * H * Sq * Skv * D > ((int64_t)1 << 22))
    goto done;
  stsa_status st;
  const int nth = 1 + (int)(byte(r) % 4);
  if (op == OP_SPARSE) {
    sopts.scale = scale, sopts.lse = lse;
    size_t wsize = 0;
    if (byte(r) % 2 == 0) {
      st = stsa_sparse_attention(ctx, plan, &q, &k, &v, &out, &sopts);
    } else if ((st = stsa_sparse_attention_part_wsize(ctx, plan, &q, &k, &v, &out, &sopts,
                                                      nth, &wsize)) == STSA_OK) {
      /* exactly the size asked for: a slice past it is an ASan report */
      char *work = malloc(wsize);
      for (int ith = 0; st == STSA_OK && ith < nth; ith++)
        st = stsa_sparse_attention_part(ctx, plan, &q, &k, &v, &out, &sopts, ith, nth,
                                        work, wsize);
      free(work);
    }
  } else {
    stsa_attn_opts opts = {sizeof(stsa_attn_opts), scale, lse};
    if (op == OP_DENSE) {
      st = stsa_attention(ctx, &q, &k, &v, &out, &opts);
    } else {
      size_t wsize = 0;
      st = stsa_attention_check(ctx, &q, &k, &v, &out, &opts);
      if (st == STSA_OK)
        st = stsa_attention_part_wsize(ctx, &q, &k, &v, &out, &opts, nth, &wsize);
      char *work = st == STSA_OK ? malloc(wsize) : NULL;
      for (int ith = 0; st == STSA_OK && ith < nth; ith++)
        st = stsa_attention_part(ctx, &q, &k, &v, &out, &opts, ith, nth, work, wsize);
      free(work);
    }
  }
  if (tracing())
    fprintf(stderr,
            "op %d %s threads %d: B %lld H %lld D %lld Sq %lld Skv %lld dtypes %d%d%d%d "
            "plan %s rows %s (input byte %zu of %zu) -> %s: %s\n",
            op, stsa_backend_name(su->backend), su->threads, (long long)B, (long long)H,
            (long long)D, (long long)Sq, (long long)Skv, (int)q.dtype, (int)k.dtype,
            (int)v.dtype, (int)out.dtype, plan ? "yes" : "no",
            op == OP_SPARSE && Sq != Skv ? "subset" : "-", r->at, r->n,
            stsa_status_str(st), stsa_ctx_last_error(ctx));
  if (st != STSA_OK) {
    if (!stsa_ctx_last_error(ctx)[0])
      fail("a failure without a message", stsa_status_str(st));
    for (int i = 0; i < ar.n; i++)
      if (!buf_unchanged(&ar.b[i]))
        fail("a failed call wrote caller memory", stsa_ctx_last_error(ctx));
    if (pairs_changed != -12345)
      fail("a failed call wrote pairs_changed", NULL);
    goto done;
  }
  if (out.data == q.data || out.data == k.data || out.data == v.data)
    fail("an output aliasing an input was accepted", NULL);
  for (int i = 0; i < ar.n; i++)
    if (&ar.b[i] != ob && &ar.b[i] != lb && !buf_unchanged(&ar.b[i]))
      fail("a call wrote into an input buffer", NULL);
  expect ex;
  expect_init(&ex, &q, &k, &v, out.dtype, scale_eff);
  int finite_inputs = 1;
  for (int64_t i = 0; i < B * H; i++)
    finite_inputs &= ex.fin[i];
  check_out_written(&out, ob, &ex);
  for (int64_t b = 0; lb && b < B; b++) /* lse [B, H, Sq] */
    for (int64_t h = 0; h < H; h++)
      for (int64_t s = 0; s < q.shape[1]; s++)
        if (isnan(lse[(b * H + h) * q.shape[1] + s]) && row_finite(&ex, b, s, h))
          fail("NaN lse from finite inputs inside the finite range", NULL);

  /* Small calls: the reference agrees, and 1 vs 2 threads agree bitwise. */
  if (finite_inputs && B * H * Sq * Skv * D <= (1 << 18)) {
    stsa_tensor ref_out = clone_out(&ar, &out, ob);
    stsa_ctx *ref = new_ctx(STSA_BACKEND_REF, 1, su->q_tile, su->kv_tile, 0);
    stsa_sparse_opts ro = sopts;
    ro.lse = NULL, ro.pairs_changed = NULL;
    stsa_attn_opts rd = {sizeof(stsa_attn_opts), scale, NULL};
    stsa_status rs = op == OP_SPARSE
                         ? stsa_sparse_attention(ref, plan, &q, &k, &v, &ref_out, &ro)
                         : stsa_attention(ref, &q, &k, &v, &ref_out, &rd);
    if (rs != STSA_OK)
      fail("the reference refused what the backend accepted", stsa_ctx_last_error(ref));
    int64_t at[4] = {0, 0, 0, 0};
    const double err = su->backend == STSA_BACKEND_REF
                           ? 0
                           : worst_error(&out, &ref_out, &ex, tolerance(&out, &q),
                                         fuzz_bf16_tiles(stsa_ctx_backend(ctx)), Skv, at);
    if (err > 1) {
      char why[200];
      snprintf(why, sizeof why, "%s: b %lld s %lld h %lld d %lld, %g x the tolerance",
               stsa_backend_name(su->backend), (long long)at[0], (long long)at[1],
               (long long)at[2], (long long)at[3], err);
      fail("output differs from the reference", why);
    }
    stsa_ctx_free(ref);
    if (op != OP_PART) {
      stsa_tensor again = clone_out(&ar, &out, ob);
      stsa_ctx *other =
          new_ctx(su->backend, su->threads == 1 ? 2 : 1, su->q_tile, su->kv_tile, 0);
      rs = op == OP_SPARSE ? stsa_sparse_attention(other, plan, &q, &k, &v, &again, &ro)
                           : stsa_attention(other, &q, &k, &v, &again, &rd);
      if (rs != STSA_OK || !same_elements(&out, &again))
        fail("the result depends on the thread count", stsa_backend_name(su->backend));
      stsa_ctx_free(other);
    }
  }
  expect_free(&ex);
done:
  stsa_plan_free(plan);
  for (int i = 0; i < 3; i++)
    stsa_mask_free(masks[i]);
  stsa_ctx_free(ctx);
  arena_free(&ar);
}

/* ---- SVG ------------------------------------------------------------------ */
static int64_t extreme(reader *r) {
  static const int64_t v[] = {INT64_MAX, INT64_MIN,        -1,
                              0,         (int64_t)1 << 62, INT64_MAX / 2 + 1};
  return v[byte(r) % (sizeof v / sizeof *v)];
}

static void run_svg(reader *r, const setup *su, uint64_t seed) {
  stsa_svg_config c = STSA_INIT(stsa_svg_config);
  c.geometry.frames = 1 + byte(r) % 3;
  c.geometry.height = 1 + byte(r) % 5;
  c.geometry.width = 1 + byte(r) % 6;
  const unsigned t = byte(r);
  c.geometry.text = t % 3 ? byte(r) % 7 : 0;
  c.geometry.text_real = c.geometry.text ? byte(r) % (unsigned)(c.geometry.text + 1) : 0;
  c.geometry.text_pos =
      c.geometry.text ? (t & 4 ? STSA_TEXT_SUFFIX : STSA_TEXT_PREFIX) : STSA_TEXT_NONE;
  c.heads = 1 + byte(r) % 2;
  c.head_dim = 1 + byte(r) % 48;
  c.density = (1.0 + byte(r)) / 256.0;
  c.dense_steps = byte(r) % 3;
  c.dense_layers = byte(r) % 3;
  const int64_t L = c.geometry.frames * c.geometry.height * c.geometry.width;
  c.sample_rows = 1 + (int64_t)(byte(r) % (unsigned)(L < 12 ? L : 12));
  c.sink_frames = byte(r) % (unsigned)(c.geometry.frames + 1);
  c.seed = seed;
  const unsigned tl = byte(r);
  c.q_tile = tl & 1 ? (int)(1 + byte(r) % 60) : 0;
  c.kv_tile = tl & 2 ? 16 * (int)(1 + byte(r) % 6) : 0;
  /* now and then one field at an extreme: refused cleanly, never an overflow
   * (geometry extremes are all invalid, so nothing huge gets built) */
  const unsigned x = byte(r);
  if (x >= 200) {
    switch (x % 12) {
    case 0:
      c.geometry.frames = extreme(r);
      break;
    case 1:
      c.geometry.height = extreme(r), c.geometry.width = 2;
      break;
    case 2:
      c.geometry.text = extreme(r);
      c.geometry.text_pos = STSA_TEXT_PREFIX;
      break;
    case 3:
      c.heads = extreme(r);
      break;
    case 4:
      c.head_dim = byte(r) & 1 ? 513 : extreme(r);
      break;
    case 5:
      c.sample_rows = extreme(r);
      break;
    case 6:
      c.sink_frames = extreme(r);
      break;
    case 7:
      c.dense_steps = extreme(r);
      break;
    case 8:
      c.density = byte(r) & 1 ? NAN : -(double)byte(r);
      break;
    case 9:
      c.q_tile = (int)(extreme(r) >> 32);
      break;
    case 10:
      c.geometry.text_real = extreme(r);
      break;
    default:
      c.geometry.text_pos = (stsa_text_pos)(3 + byte(r) % 5);
      break;
    }
  }
  stsa_ctx *ctx =
      new_ctx(su->backend, su->threads, su->q_tile, su->kv_tile, su->check_finite);
  stsa_svg *svg = NULL;
  stsa_status st = stsa_svg_create(ctx, &c, &svg);
  if (tracing())
    fprintf(stderr, "svg create %lld x %lld x %lld + %lld, H %lld D %lld: %s %s\n",
            (long long)c.geometry.frames, (long long)c.geometry.height,
            (long long)c.geometry.width, (long long)c.geometry.text, (long long)c.heads,
            (long long)c.head_dim, stsa_status_str(st), stsa_ctx_last_error(ctx));
  if (st != STSA_OK) {
    if (svg)
      fail("a failed stsa_svg_create wrote *out", NULL);
    if (!stsa_ctx_last_error(ctx)[0])
      fail("stsa_svg_create failed without a message", stsa_status_str(st));
    stsa_ctx_free(ctx);
    return;
  }
  const int64_t N = stsa_geometry_tokens(&c.geometry);
  if (N < 1 || N > 4096 || c.heads > 4 || c.head_dim > 512)
    fail("stsa_svg_create accepted a configuration it cannot run", NULL);
  uint64_t rng = seed;
  arena ar = {0};
  const int64_t B = 1 + byte(r) % 2, H = c.heads, D = c.head_dim;
  int b1, broken = 0;
  buf *ob;
  stsa_tensor q = make_tensor(r, &ar, &rng, pick_dtype(r), B, N, H, D, &b1, NULL);
  broken |= b1;
  stsa_tensor k = make_tensor(r, &ar, &rng, pick_dtype(r), B, N, H, D, &b1, NULL);
  broken |= b1;
  stsa_tensor v = make_tensor(r, &ar, &rng, pick_dtype(r), B, N, H, D, &b1, NULL);
  broken |= b1;
  stsa_tensor out = make_tensor(r, &ar, &rng, pick_dtype(r), B, N, H, D, &b1, &ob);
  broken |= b1;
  memset(ob->base, 0x7b, ob->bytes);
  if (byte(r) % 16 == 0)
    out = q;                                  /* refused */
  const double scale = 1.0 / sqrt((double)D); /* SVG's */
  const unsigned fit = byte(r);
  if (!broken && out.data != q.data)
    fit_range(fit, scale, &q, &k, &v, out.dtype);
  buf *kinds_b = arena_new(&ar, sizeof(stsa_head_kind) * (size_t)(B * H));
  buf *mse_b = arena_new(&ar, sizeof(float) * (size_t)(B * H));
  stsa_svg_report rep = {.size = sizeof(stsa_svg_report),
                         .kinds = (stsa_head_kind *)(void *)kinds_b->base,
                         .mse_temporal = (float *)(void *)mse_b->base};
  arena_snapshot(&ar);
  const int64_t layer = draw_index(r), step = draw_index(r);
  st = stsa_svg_attention(svg, layer, step, &q, &k, &v, &out, &rep);
  if (tracing())
    fprintf(stderr, "svg call B %lld layer %lld step %lld: %s %s (dense %d)\n",
            (long long)B, (long long)layer, (long long)step, stsa_status_str(st),
            stsa_ctx_last_error(ctx), rep.dense);
  if (st != STSA_OK) {
    if (!stsa_ctx_last_error(ctx)[0])
      fail("a failed SVG call left no message", stsa_status_str(st));
    for (int i = 0; i < ar.n; i++)
      if (!buf_unchanged(&ar.b[i]))
        fail("a failed SVG call wrote caller memory", stsa_ctx_last_error(ctx));
  }
  /* The indices: negative ones refused as such, large ones as good as small. */
  int64_t l2 = 0, s2 = 0;
  if (index_check(&c, layer, step, st, &l2, &s2)) {
    const stsa_status again = stsa_svg_attention(svg, l2, s2, &q, &k, &v, &out, &rep);
    index_verdict(layer, step, st, l2, s2, again, stsa_ctx_last_error(ctx));
  } else if (st == STSA_OK) {
    if (out.data == q.data)
      fail("SVG accepted out aliasing q", NULL);
    expect ex;
    expect_init(&ex, &q, &k, &v, out.dtype, scale);
    check_out_written(&out, ob, &ex);
    expect_free(&ex);
    for (int64_t i = 0; i < B * H; i++)
      if ((unsigned)rep.kinds[i] > STSA_HEAD_TEMPORAL)
        fail("SVG reported an invalid head kind", NULL);
  }
  stsa_svg_free(svg);
  stsa_ctx_free(ctx);
  arena_free(&ar);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  reader r = {data, size, 0};
  const unsigned op = byte(&r) % 4;
  setup su;
  su.backend = fuzz_backend(byte(&r));
  su.threads = 1 + (int)(byte(&r) % 2);
  const unsigned tq = byte(&r);
  su.q_tile = tq % 4 == 0 ? 192 : 6 + (int)(tq % 91);
  su.kv_tile = 16 * (1 + (int)(byte(&r) % 8));
  su.check_finite = (int)(byte(&r) % 4 != 0);
  uint64_t seed = 0;
  for (int i = 0; i < 4; i++)
    seed = seed << 8 | byte(&r);
  if (op == OP_SVG)
    run_svg(&r, &su, seed);
  else
    run_attention(&r, (int)op, &su, seed);
  return 0;
}
