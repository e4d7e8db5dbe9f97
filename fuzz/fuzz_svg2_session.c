/*
 * fuzz_svg2_session.c — libFuzzer target for an SVG2 session over several
 * calls: stsa_svg_create (method STSA_SVG_METHOD_SVG2) from a fuzzed config,
 * then 1..4 calls of stsa_svg_attention(_ex), each with its own layer and step
 * (0..3 mostly; INT64_MAX, INT64_MIN, 2^58 + 9, -1, random 64-bit values...),
 * batch size (1 or 2: a layer seen with another B starts cold), dtypes of q, k,
 * v and out (f32, f16, bf16), layouts (bshd, bhsd, any order, padding, strided
 * D), magnitudes over each dtype's whole finite range (fuzz_tensor.h),
 * sometimes the workload generator's clustered heads, a NaN or Inf, a wrong
 * token or head count, out on q, a broken descriptor, a per-call error budget
 * (none, a bound, the config's, NaN, Inf) and a partial report.
 *
 * The config: up to 4 x 8 x 8 video tokens with a text prefix or suffix of
 * up to 15 (a few hundred tokens at most, so an execution takes milliseconds
 * under the sanitizers), 1..3 heads, head_dim 1..48 (now and then 64..124 on
 * up to 96 video tokens; at most what keeps a call's B H N^2 D under 2^21
 * with B = 2), automatic or explicit query and key clusters, top_p
 * (0: density instead), min_kv_fraction, density, an error budget, tiles,
 * sample_rows, sink frames, dense steps and layers, k-means iterations (cold
 * 1..5, or the default 50 on up to 64 video tokens; warm 0..3, 0 the default
 * 2); now and then one field out of its range, which create must refuse. The
 * reference backend runs sessions of up to 2^19 multiply-adds a call, larger
 * ones the portable kernels.
 *
 * Checked, whatever the input:
 *   - create: OK with a session, or STSA_ERR_BAD_PARAM with a message and *out
 *     not written;
 *   - each call: STSA_OK or a documented refusal (bad shape, dtype, stride,
 *     alignment, overlap, non-finite input, bad parameter) with a message; a
 *     refusal writes nothing (every buffer equals its snapshot); a call the
 *     harness built valid succeeds on finite inputs (and on unchecked
 *     non-finite ones, unless refused as non-finite);
 *   - a success writes no input, no byte of out's buffer that is not one of
 *     its elements, and report fields in range; out is finite where the
 *     finite-input contract says (stsa.h, "Finite range": q, k and v of the
 *     head finite, scale |q_i| |k_j| < 1e38, |v_j[d]| within out's dtype);
 *   - negative layer or step: STSA_ERR_BAD_PARAM (unless refused for another
 *     reason first, as at 0, 0); large ones: the outcome of the same call at the
 *     smallest index of the same policy (fuzz_tensor.h, index_check);
 *   - for one input in eight, a second session on the other thread count runs
 *     the same calls alongside: the same statuses and bitwise the same outputs;
 *   - no crash, leak or undefined behaviour (ASan + UBSan); everything is
 *     freed on every path.
 * Any violation calls abort() so libFuzzer records the input.
 */
#define STSA_EXPERIMENTAL /* stsa_workload_generate */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_TARGET "fuzz_svg2_session"
#define FUZZ_TRACE "FUZZ_SVG2_TRACE"
#include "fuzz_backend.h"
#include "fuzz_tensor.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ---- the config ------------------------------------------------------------ */
static int64_t extreme(reader *r) {
  static const int64_t v[] = {INT64_MAX, INT64_MIN, -1, (int64_t)1 << 62, 10001};
  return v[byte(r) % (sizeof v / sizeof *v)];
}

static double bad_real(reader *r) {
  static const double v[] = {NAN, INFINITY, -INFINITY, -0.25, 1.5, 2.0};
  return v[byte(r) % (sizeof v / sizeof *v)];
}

/* Returns 1 when one field was set out of its range (create must refuse it,
 * unless the value happens to be valid for that field: `maybe` then). */
static int read_config(reader *r, uint64_t seed, stsa_svg_config *c, int *maybe) {
  const stsa_svg_config init = STSA_INIT(stsa_svg_config);
  *c = init;
  c->method = STSA_SVG_METHOD_SVG2;
  c->seed = seed;
  stsa_geometry *g = &c->geometry;
  g->frames = 1 + byte(r) % 4;
  g->height = 1 + byte(r) % 8;
  g->width = 1 + byte(r) % 8;
  const unsigned t = byte(r);
  g->text = t % 3 ? byte(r) % 16 : 0;
  g->text_real = g->text ? byte(r) % (unsigned)(g->text + 1) : 0;
  g->text_pos = g->text ? (t & 4 ? STSA_TEXT_SUFFIX : STSA_TEXT_PREFIX) : STSA_TEXT_NONE;
  const int64_t L = g->frames * g->height * g->width;
  c->heads = 1 + byte(r) % 3;
  const unsigned d = byte(r);
  /* large heads only on small videos, and B H N^2 D under 2^21 (B <= 2): an
   * execution stays within milliseconds under the sanitizers */
  c->head_dim = d >= 240 && L <= 96 ? 64 + (d % 16) * 4 : 1 + d % 48;
  const int64_t N = L + g->text, most = ((int64_t)1 << 20) / (c->heads * N * N);
  c->head_dim = c->head_dim < most ? c->head_dim : most > 1 ? most : 1;
  const unsigned qc = byte(r), kc = byte(r);
  c->q_clusters = qc % 4 == 0 ? 0 : 1 + (int64_t)(qc / 4) % L;
  c->kv_clusters = kc % 4 == 0 ? 0 : 1 + (int64_t)(kc / 4) % L;
  const unsigned tp = byte(r);
  c->top_p = tp % 4 == 0 ? 0 : (double)(tp % 128) / 127.0;
  c->min_kv_fraction = (double)(byte(r) % 128) / 127.0;
  c->density = (1.0 + byte(r)) / 256.0;
  const unsigned me = byte(r);
  c->max_rel_error = me < 128 ? 0 : (double)(me - 127) / 256.0;
  const unsigned tl = byte(r);
  c->q_tile = tl & 1 ? (int)(1 + byte(r) % 72) : 0;
  c->kv_tile = tl & 2 ? 16 * (int)(1 + byte(r) % 8) : 0;
  c->sample_rows = 1 + (int64_t)(byte(r) % (unsigned)(L < 24 ? L : 24));
  c->sink_frames = byte(r) % (unsigned)(g->frames + 1);
  const unsigned dp = byte(r);
  c->dense_steps = dp % 8 == 1 ? 1 + (dp >> 4) % 2 : 0;
  c->dense_layers = dp % 8 == 2 ? 1 + (dp >> 4) % 2 : 0;
  const unsigned it = byte(r);
  c->kmeans_iters_cold = it % 8 == 0 && L <= 64 ? 0 : 1 + (it % 8) % 5; /* 0: 50 */
  c->kmeans_iters_warm = (it >> 4) % 4;                                 /* 0: 2 */
  /* now and then one field out of its range */
  const unsigned x = byte(r);
  *maybe = 0;
  if (x < 232)
    return 0;
  switch (x % 12) {
  case 0:
    c->q_clusters = byte(r) & 1 ? L + 1 : extreme(r);
    break;
  case 1:
    c->kv_clusters = byte(r) & 1 ? L + 1 : extreme(r);
    break;
  case 2: /* more than the video tokens (and past 2^22 pairs) */
    c->q_clusters = c->kv_clusters = 4096;
    break;
  case 3:
    c->top_p = bad_real(r);
    break;
  case 4:
    c->min_kv_fraction = bad_real(r);
    break;
  case 5:
    c->kmeans_iters_cold = extreme(r);
    break;
  case 6:
    c->kmeans_iters_warm = extreme(r);
    break;
  case 7:
    c->max_rel_error = bad_real(r);
    *maybe = c->max_rel_error >= 0 && c->max_rel_error < INFINITY;
    break;
  case 8:
    c->density = byte(r) & 1 ? 0 : bad_real(r);
    *maybe = c->density > 0 && c->density <= 1;
    break;
  case 9:
    c->sample_rows = byte(r) & 1 ? L + 1 : extreme(r);
    *maybe = c->sample_rows >= 1 && c->sample_rows <= L;
    break;
  case 10:
    c->kv_tile = byte(r) & 1 ? 17 : 8192;
    break;
  default:
    c->method = STSA_SVG_METHOD_COUNT_ + byte(r) % 3;
    break;
  }
  return 1;
}

/* ---- one call ---------------------------------------------------------------- */
static int documented(stsa_status st) {
  switch (st) {
  case STSA_ERR_BAD_SHAPE:
  case STSA_ERR_BAD_DTYPE:
  case STSA_ERR_BAD_STRIDE:
  case STSA_ERR_MISALIGNED:
  case STSA_ERR_OVERLAP:
  case STSA_ERR_NONFINITE:
  case STSA_ERR_BAD_PARAM:
    return 1;
  default:
    return 0;
  }
}

/* The session under test and, optionally, its twin on the other thread count. */
typedef struct pair {
  stsa_ctx *ctx[2];
  stsa_svg *svg[2];
  int twins;
} pair;

typedef struct call_args {
  stsa_svg_call opts;
  int with_opts; /* stsa_svg_attention_ex */
  int opts_null; /* _ex with call = NULL */
} call_args;

static stsa_status one(const pair *p, int i, const call_args *a, int64_t layer,
                       int64_t step, const stsa_tensor *q, const stsa_tensor *k,
                       const stsa_tensor *v, const stsa_tensor *out,
                       stsa_svg_report *rep) {
  if (!a->with_opts)
    return stsa_svg_attention(p->svg[i], layer, step, q, k, v, out, rep);
  return stsa_svg_attention_ex(p->svg[i], layer, step, q, k, v, out,
                               a->opts_null ? NULL : &a->opts, rep);
}

static int same_elements(const stsa_tensor *a, const stsa_tensor *b) {
  for (int64_t i = 0; i < a->shape[0]; i++)
    for (int64_t s = 0; s < a->shape[1]; s++)
      for (int64_t h = 0; h < a->shape[2]; h++)
        for (int64_t d = 0; d < a->shape[3]; d++) {
          const size_t oa = elem_off(a, i, s, h, d), ob = elem_off(b, i, s, h, d);
          const size_t es = stsa_dtype_size(a->dtype);
          if (memcmp((const char *)a->data + oa * es, (const char *)b->data + ob * es,
                     es) != 0)
            return 0;
        }
  return 1;
}

static void check_report(const stsa_svg_report *rep, const stsa_svg_config *c,
                         int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    if (rep->kinds && (unsigned)rep->kinds[i] >= STSA_HEAD_KIND_COUNT_)
      fail("an invalid head kind", NULL);
    if (rep->head_density && !(rep->head_density[i] >= 0 && rep->head_density[i] <= 1))
      fail("a head density outside [0, 1]", NULL);
    if (rep->budget && rep->budget[i] >= STSA_BUDGET_ACTION_COUNT_)
      fail("an invalid budget action", NULL);
    if (rep->head_top_p && !(rep->head_top_p[i] >= 0 && rep->head_top_p[i] <= 1))
      fail("a top-p outside [0, 1]", NULL);
    if (rep->est_error && rep->est_error[i] < 0)
      fail("a negative error estimate", NULL);
  }
  if (!(rep->density >= 0 && rep->density <= 1))
    fail("a density outside [0, 1]", NULL);
  const int64_t L = c->geometry.frames * c->geometry.height * c->geometry.width;
  if (!rep->dense && (rep->q_clusters < 1 || rep->q_clusters > L ||
                      rep->kv_clusters < 1 || rep->kv_clusters > L))
    fail("cluster counts outside [1, video tokens]", NULL);
}

/* One call on the session (and its twin), its inputs freed after it. */
static void run_call(reader *r, const pair *p, const stsa_svg_config *c, uint64_t *rng,
                     int check_finite, int ci) {
  arena ar = {0};
  const int64_t N = stsa_geometry_tokens(&c->geometry), H = c->heads, D = c->head_dim;
  const int64_t B = 1 + byte(r) % 2;
  const int64_t layer = draw_index(r), step = draw_index(r);
  /* now and then a tensor the session must refuse: wrong N or H */
  const unsigned wrong = byte(r);
  const int64_t Nq = wrong % 32 == 1 ? N + 1 : N, Hk = wrong % 32 == 2 ? H + 1 : H;
  int broken = wrong % 32 == 1 || wrong % 32 == 2, b1;
  buf *qb, *kb, *vb, *ob;
  stsa_tensor q = make_tensor(r, &ar, rng, pick_dtype(r), B, Nq, H, D, &b1, &qb);
  broken |= b1;
  stsa_tensor k = make_tensor(r, &ar, rng, pick_dtype(r), B, N, Hk, D, &b1, &kb);
  broken |= b1;
  stsa_tensor v = make_tensor(r, &ar, rng, pick_dtype(r), B, N, H, D, &b1, &vb);
  broken |= b1;
  stsa_tensor out = make_tensor(r, &ar, rng, pick_dtype(r), B, N, H, D, &b1, &ob);
  broken |= b1;
  memset(ob->base, 0x7b, ob->bytes);
  /* clustered heads from the workload generator, then magnitudes again */
  const unsigned wl = byte(r);
  if (wl % 4 == 0 && !broken) {
    stsa_workload_desc wd = STSA_INIT(stsa_workload_desc);
    wd.geometry = c->geometry;
    wd.batch = B;
    wd.heads = H;
    wd.head_dim = D;
    wd.seed = wl;
    if (stsa_workload_generate(&wd, &q, &k, &v, NULL) != STSA_OK)
      fail("the workload generator refused valid tensors", NULL);
    shape_values(r, rng, &q, 1);
    shape_values(r, rng, &k, 1);
    shape_values(r, rng, &v, 1);
  }
  const unsigned al = byte(r);
  int valid = !broken;
  if (al % 16 == 0) { /* out on q: refused */
    out = q, ob = qb;
    valid = 0;
  } else if (al % 16 == 1 && !broken) { /* k and v one tensor: allowed */
    v = k, vb = kb;
  }
  const double scale = 1.0 / sqrt((double)D);
  const unsigned fit = byte(r);
  if (!broken && out.data != q.data)
    fit_range(fit, scale, &q, &k, &v, out.dtype);
  const unsigned nf = byte(r);
  if (nf >= 248 && !broken) { /* a NaN or Inf in q, k or v */
    const stsa_tensor *t = nf % 3 == 0 ? &q : nf % 3 == 1 ? &k : &v;
    int64_t b, s, h;
    random_row(t, rng, &b, &s, &h);
    store_at(t, elem_off(t, b, s, h, (int64_t)(splitmix(rng) % (uint64_t)D)),
             nf & 4   ? NAN
             : nf & 8 ? -INFINITY
                      : INFINITY);
  }
  /* per-call options */
  call_args a = {{sizeof(stsa_svg_call), -1.0}, 0, 0};
  const unsigned co = byte(r);
  switch (co % 6) {
  case 0:
  case 1:
    break;
  case 2:
    a.with_opts = a.opts_null = 1;
    break;
  case 3:
    a.with_opts = 1;
    a.opts.max_rel_error = (double)(byte(r) % 64) / 128.0;
    break;
  case 4:
    a.with_opts = 1;
    a.opts.max_rel_error = -1.0 - byte(r) % 2; /* the config's */
    break;
  default:
    a.with_opts = 1;
    a.opts.max_rel_error = byte(r) & 1 ? NAN : INFINITY; /* refused */
    valid = 0;
    break;
  }
  /* the report: every array, some, or none */
  const unsigned rp = byte(r);
  const size_t n = (size_t)(B * H);
  buf *kinds_b = arena_new(&ar, sizeof(stsa_head_kind) * n);
  buf *floats_b = arena_new(&ar, sizeof(float) * n * 5);
  buf *budget_b = arena_new(&ar, n);
  memset(kinds_b->base, 0xa5, kinds_b->bytes);
  memset(floats_b->base, 0xa5, floats_b->bytes);
  memset(budget_b->base, 0xa5, budget_b->bytes);
  float *fl = (float *)(void *)floats_b->base;
  stsa_svg_report rep = STSA_INIT(stsa_svg_report);
  if (rp & 1)
    rep.kinds = (stsa_head_kind *)(void *)kinds_b->base;
  if (rp & 2)
    rep.mse_spatial = fl, rep.mse_temporal = fl + n;
  if (rp & 4)
    rep.est_error = fl + 2 * n, rep.head_density = fl + 3 * n;
  if (rp & 8)
    rep.budget = budget_b->base, rep.head_top_p = fl + 4 * n;
  stsa_svg_report *repp = rp & 16 ? NULL : &rep;

  int all_finite = 1;
  if (!broken) {
    expect ex;
    expect_init(&ex, &q, &k, &v, out.dtype, scale);
    for (size_t i = 0; i < n; i++)
      all_finite &= ex.fin[i];
    expect_free(&ex);
  }
  stsa_tensor out2 = out;
  buf *ob2 = NULL;
  if (p->twins && out.data != q.data) { /* the twin's out: out's layout, its own buffer */
    ob2 = arena_new(&ar, ob->bytes);
    memcpy(ob2->base, ob->base, ob->bytes);
    out2.data = ob2->base + ((unsigned char *)out.data - ob->base);
  }
  arena_snapshot(&ar);
  if (tracing() && !broken)
    for (int64_t j = 0; j < N && j < 16; j++)
      for (int64_t h = 0; h < q.shape[2] && h < 4; h++)
        for (int64_t d = 0; d < q.shape[3] && d < 4; d++)
          fprintf(stderr, "  token %lld, h %lld, d %lld: q %g k %g v %g (b 0)\n",
                  (long long)j, (long long)h, (long long)d, load(&q, 0, j, h, d),
                  load(&k, 0, j, h, d), load(&v, 0, j, h, d));
  const stsa_status st = one(p, 0, &a, layer, step, &q, &k, &v, &out, repp);
  const char *msg = stsa_ctx_last_error(p->ctx[0]);
  if (tracing())
    fprintf(stderr,
            "call %d: B %lld layer %lld step %lld dtypes %d%d%d%d%s -> %s: %s (dense %d, "
            "cold %d)\n",
            ci, (long long)B, (long long)layer, (long long)step, (int)q.dtype,
            (int)k.dtype, (int)v.dtype, (int)out.dtype, valid ? "" : " (invalid)",
            stsa_status_str(st), msg, repp ? repp->dense : -1, repp ? repp->cold : -1);
  if (p->twins) {
    const stsa_status st2 = one(p, 1, &a, layer, step, &q, &k, &v, &out2, NULL);
    if (st2 != st)
      fail("the twin session (other thread count) returned another status",
           stsa_status_str(st2));
    if (st == STSA_OK && out.data != q.data && !same_elements(&out, &out2))
      fail("the result depends on the thread count", NULL);
  }
  if (st != STSA_OK) {
    if (!documented(st))
      fail("an undocumented status", stsa_status_str(st));
    if (!msg[0])
      fail("a failed call left no message", stsa_status_str(st));
    for (int i = 0; i < ar.n; i++)
      if (&ar.b[i] != ob2 && !buf_unchanged(&ar.b[i]))
        fail("a failed call wrote caller memory", msg);
    /* valid tensors and options: finite inputs must run, and unchecked
     * non-finite ones too (SDPA's rules) unless refused as non-finite */
    if (valid && layer >= 0 && step >= 0 &&
        (all_finite || (!check_finite && st != STSA_ERR_NONFINITE)))
      fail("a valid call failed", msg);
  }
  int64_t l2 = 0, s2 = 0;
  if (index_check(c, layer, step, st, &l2, &s2)) {
    const stsa_status again = one(p, 0, &a, l2, s2, &q, &k, &v, &out, NULL);
    index_verdict(layer, step, st, l2, s2, again, stsa_ctx_last_error(p->ctx[0]));
    if (p->twins)
      one(p, 1, &a, l2, s2, &q, &k, &v, &out2, NULL);
  } else if (st == STSA_OK) {
    if (out.data == q.data)
      fail("out on q was accepted", NULL);
    for (int i = 0; i < ar.n; i++) {
      const buf *x = &ar.b[i];
      const int written =
          x == ob || x == ob2 || x == floats_b ||
          (repp && ((x == kinds_b && rep.kinds) || (x == budget_b && rep.budget)));
      if (!written && !buf_unchanged(x))
        fail("a call wrote into an input or a report array it was not given", NULL);
    }
    /* the float arrays: [2n) mse, [2n, 4n) est_error, density, [4n, 5n) top-p */
    for (int part = 0; part < 3; part++) {
      const size_t at = sizeof(float) * n * (size_t)(2 * part),
                   len = sizeof(float) * n * (part == 2 ? 1 : 2);
      if (!(repp && rp & (2u << part)) &&
          memcmp(floats_b->base + at, floats_b->snap + at, len) != 0)
        fail("a call wrote into a report array it was not given", NULL);
    }
    expect ex;
    expect_init(&ex, &q, &k, &v, out.dtype, scale);
    check_out_written(&out, ob, &ex);
    expect_free(&ex);
    if (repp)
      check_report(repp, c, (int64_t)n);
  }
  arena_free(&ar);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  reader r = {data, size, 0};
  stsa_backend backend = fuzz_backend(byte(&r));
  const unsigned th = byte(&r);
  const int threads = 1 + (int)(th % 2), twins = th % 8 == 7;
  const int check_finite = byte(&r) % 4 != 0;
  const unsigned tq = byte(&r);
  const int q_tile = 6 + (int)(tq % 91), kv_tile = 16 * (1 + (int)(byte(&r) % 8));
  uint64_t seed = 0;
  for (int i = 0; i < 4; i++)
    seed = seed << 8 | byte(&r);

  stsa_svg_config c;
  int maybe = 0;
  const int bad = read_config(&r, seed, &c, &maybe);
  /* The reference backend computes each row in double through a dtype
   * switch: under the sanitizers a session of 2^22 multiply-adds a call takes
   * a large part of a second, so sessions past 2^19 run the portable kernels. */
  const int64_t N = stsa_geometry_tokens(&c.geometry);
  if (backend == STSA_BACKEND_REF && !bad && 2 * c.heads * N * N * c.head_dim > (1 << 19))
    backend = STSA_BACKEND_PORTABLE;
  pair p = {{NULL, NULL}, {NULL, NULL}, twins};
  p.ctx[0] = new_ctx(backend, threads, q_tile, kv_tile, check_finite);
  stsa_svg *sentinel = (stsa_svg *)(uintptr_t)0x5eed;
  p.svg[0] = sentinel;
  stsa_status st = stsa_svg_create(p.ctx[0], &c, &p.svg[0]);
  if (tracing())
    fprintf(stderr,
            "create %s: %lld x %lld x %lld + %lld text, H %lld D %lld, clusters %lld / "
            "%lld, top_p %g, min_kv %g, budget %g, iters %lld / %lld -> %s: %s\n",
            stsa_backend_name(backend), (long long)c.geometry.frames,
            (long long)c.geometry.height, (long long)c.geometry.width,
            (long long)c.geometry.text, (long long)c.heads, (long long)c.head_dim,
            (long long)c.q_clusters, (long long)c.kv_clusters, c.top_p, c.min_kv_fraction,
            c.max_rel_error, (long long)c.kmeans_iters_cold,
            (long long)c.kmeans_iters_warm, stsa_status_str(st),
            stsa_ctx_last_error(p.ctx[0]));
  if (st != STSA_OK) {
    if (p.svg[0] != sentinel)
      fail("a failed stsa_svg_create wrote *out", NULL);
    if (st != STSA_ERR_BAD_PARAM || !stsa_ctx_last_error(p.ctx[0])[0])
      fail("stsa_svg_create failed without STSA_ERR_BAD_PARAM and a message",
           stsa_status_str(st));
    if (!bad)
      fail("stsa_svg_create refused a valid config", stsa_ctx_last_error(p.ctx[0]));
    stsa_ctx_free(p.ctx[0]);
    return 0;
  }
  if (bad && !maybe)
    fail("stsa_svg_create accepted a field out of its range", NULL);
  if (twins) {
    p.ctx[1] = new_ctx(backend, threads == 1 ? 2 : 1, q_tile, kv_tile, check_finite);
    if (stsa_svg_create(p.ctx[1], &c, &p.svg[1]) != STSA_OK)
      fail("the twin session was refused", stsa_ctx_last_error(p.ctx[1]));
  }
  uint64_t rng = seed ^ 0x5356473273657373ull;
  const int calls = 1 + (int)(byte(&r) % 4);
  for (int i = 0; i < calls; i++)
    run_call(&r, &p, &c, &rng, check_finite, i);
  stsa_svg_free(p.svg[0]);
  stsa_svg_free(p.svg[1]);
  stsa_ctx_free(p.ctx[0]);
  stsa_ctx_free(p.ctx[1]);
  return 0;
}
