/*
 * test_kernel_pairs.c — the two-panel micro-kernels (kernels.h: qk2, pv2)
 * against two calls of the one-panel ones, bitwise, on every backend whose
 * table has them; qk2 on panels apart with overlapping outputs, pv2_segs
 * against one pv2; and stsa_qk_panels / stsa_pv_panels on odd panel counts,
 * where the last panel goes through the one-panel kernel; and gather_tails
 * against the columns it must copy; the half-height table against the
 * full one's first rows. Outputs sit between guard bytes;
 * columns and rows a call must not write keep their sentinel.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernel/kernels.h"
#include "kernel_util.h"
#include "testutil.h"

enum { MAX_D = 128, MAX_N = 300, MAX_PANELS = 5 };

static void fill(tu_rng *rng, float *x, size_t n) {
  for (size_t i = 0; i < n; i++)
    x[i] = (float)tu_rng_normal(rng);
}

static float *aligned_floats(size_t n) {
  float *p = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
  if (!p)
    abort();
  return p;
}

/* Two guarded score buffers of mr rows ld_s apart, filled with a sentinel,
 * and their row maxima at -inf: one for the call under test, one for the
 * one-panel calls it must equal. */
typedef struct scores2 {
  float *pair, *one;
  float max_pair[16], max_one[16];
  size_t bytes;
} scores2;

static scores2 scores2_new(int mr, int ld_s) {
  scores2 s;
  s.bytes = sizeof(float) * (size_t)mr * (size_t)ld_s;
  s.pair = tu_guarded_alloc(s.bytes);
  s.one = tu_guarded_alloc(s.bytes);
  for (int i = 0; i < mr * ld_s; i++)
    s.pair[i] = s.one[i] = 12345.0f;
  for (int r = 0; r < mr; r++)
    s.max_pair[r] = s.max_one[r] = -INFINITY;
  return s;
}

static void scores2_free(scores2 *s) {
  tu_guarded_free(s->pair);
  tu_guarded_free(s->one);
}

/* Scores of `panels` K^T panels through stsa_qk_panels (pairs where the
 * table has qk2) equal one qk call per panel, bytes and row maxima alike;
 * columns past the panels keep their sentinel. */
static void check_qk(const stsa_kernels *k, const char *name, tu_rng *rng, int D,
                     int panels) {
  const int mr = k->mr, nr = k->nr, ld_s = MAX_PANELS * k->nr + 8;
  float *q = aligned_floats((size_t)mr * D),
        *kt = aligned_floats((size_t)panels * D * nr);
  fill(rng, q, (size_t)mr * D);
  fill(rng, kt, (size_t)panels * D * nr);
  scores2 sc = scores2_new(mr, ld_s);
  float *s_pair = sc.pair, *s_one = sc.one, *max_pair = sc.max_pair,
        *max_one = sc.max_one;
  const size_t s_bytes = sc.bytes;
  stsa_qk_panels(k, q, D, kt, panels, s_pair, ld_s, max_pair);
  for (int p = 0; p < panels; p++)
    k->qk(q, D, kt + (int64_t)p * D * nr, s_one + p * nr, ld_s, max_one);
  CHECK(memcmp(s_pair, s_one, s_bytes) == 0, "[%s] qk D %d, %d panels: scores differ",
        name, D, panels);
  CHECK(memcmp(max_pair, max_one, sizeof(float) * (size_t)mr) == 0,
        "[%s] qk D %d, %d panels: row maxima differ", name, D, panels);
  int untouched = 1;
  for (int r = 0; r < mr; r++)
    for (int c = panels * nr; c < ld_s; c++)
      untouched &= s_pair[r * ld_s + c] == 12345.0f;
  CHECK(untouched, "[%s] qk D %d, %d panels: wrote past its panels", name, D, panels);
  CHECK(tu_guard_ok(s_pair) && tu_guard_ok(s_one), "[%s] qk D %d: guard bytes", name, D);
  scores2_free(&sc);
  free(q), free(kt);
}

/* P.V over `panels` V panels panel_stride apart through stsa_pv_panels
 * equals one pv call per panel; o's columns past the panels keep theirs. */
static void check_pv(const stsa_kernels *k, const char *name, tu_rng *rng, int n,
                     int panels) {
  const int mr = k->mr, nr = k->nr, ld_p = MAX_N + 4, ld_o = MAX_PANELS * k->nr + 8;
  const int64_t stride = (int64_t)(n + 3) * nr; /* panels apart, not adjacent */
  float *p = aligned_floats((size_t)mr * ld_p),
        *vp = aligned_floats((size_t)panels * stride);
  fill(rng, p, (size_t)mr * ld_p);
  fill(rng, vp, (size_t)panels * stride);
  float alpha[16];
  for (int r = 0; r < mr; r++)
    alpha[r] = r == 1 ? 0.0f : (float)(0.5 + 0.5 * tu_rng_uniform(rng));
  const size_t o_bytes = sizeof(float) * (size_t)mr * ld_o;
  float *o_pair = tu_guarded_alloc(o_bytes), *o_one = tu_guarded_alloc(o_bytes);
  for (int i = 0; i < mr * ld_o; i++)
    o_pair[i] = o_one[i] = (float)tu_rng_normal(rng);
  float keep_tail[16 * (MAX_PANELS * 16 + 8)];
  memcpy(keep_tail, o_pair, o_bytes);
  stsa_pv_panels(k, p, ld_p, n, vp, stride, panels, o_pair, ld_o, alpha);
  for (int j = 0; j < panels; j++)
    k->pv(p, ld_p, n, vp + j * stride, o_one + j * nr, ld_o, alpha);
  CHECK(memcmp(o_pair, o_one, o_bytes) == 0, "[%s] pv n %d, %d panels: outputs differ",
        name, n, panels);
  int untouched = 1, finite = 1;
  for (int r = 0; r < mr; r++)
    for (int c = 0; c < ld_o; c++) {
      if (c >= panels * nr)
        untouched &= o_pair[r * ld_o + c] == keep_tail[r * ld_o + c];
      else
        finite &= isfinite(o_pair[r * ld_o + c]) != 0;
    }
  CHECK(untouched, "[%s] pv n %d, %d panels: wrote past its panels", name, n, panels);
  CHECK(finite, "[%s] pv n %d, %d panels: non-finite output", name, n, panels);
  CHECK(tu_guard_ok(o_pair) && tu_guard_ok(o_one), "[%s] pv n %d: guard bytes", name, n);
  tu_guarded_free(o_pair), tu_guarded_free(o_one);
  free(p), free(vp);
}

/* qk2 on two panels apart in memory, the second's scores `shift` columns
 * after the first's (1..nr: overlapping its last columns): bitwise two qk
 * calls in that order, the second winning where they overlap (kernels.h). */
static void check_qk2_apart(const stsa_kernels *k, const char *name, tu_rng *rng, int D,
                            int shift) {
  const int mr = k->mr, nr = k->nr, ld_s = 3 * nr;
  const int64_t step = (int64_t)D * nr;
  float *q = aligned_floats((size_t)mr * D), *kt = aligned_floats((size_t)(3 * step));
  fill(rng, q, (size_t)mr * D);
  fill(rng, kt, (size_t)(3 * step));
  scores2 sc = scores2_new(mr, ld_s);
  float *s_pair = sc.pair, *s_one = sc.one, *max_pair = sc.max_pair,
        *max_one = sc.max_one;
  const size_t s_bytes = sc.bytes;
  /* the first and third panels: the pair need not be adjacent */
  k->qk2(q, D, kt, kt + 2 * step, s_pair, s_pair + shift, ld_s, max_pair, max_pair);
  k->qk(q, D, kt, s_one, ld_s, max_one);
  k->qk(q, D, kt + 2 * step, s_one + shift, ld_s, max_one);
  CHECK(memcmp(s_pair, s_one, s_bytes) == 0, "[%s] qk2 D %d, apart by %d: scores differ",
        name, D, shift);
  CHECK(memcmp(max_pair, max_one, sizeof(float) * (size_t)mr) == 0,
        "[%s] qk2 D %d, apart by %d: row maxima differ", name, D, shift);
  /* each panel's maxima apart: those of one qk call each */
  float max0[16], max1[16], one0[16], one1[16];
  for (int r = 0; r < mr; r++)
    max0[r] = max1[r] = one0[r] = one1[r] = -INFINITY;
  k->qk2(q, D, kt + 2 * step, kt, s_pair, s_pair + nr, ld_s, max0, max1);
  k->qk(q, D, kt + 2 * step, s_one, ld_s, one0);
  k->qk(q, D, kt, s_one + nr, ld_s, one1);
  CHECK(memcmp(max0, one0, sizeof(float) * (size_t)mr) == 0 &&
            memcmp(max1, one1, sizeof(float) * (size_t)mr) == 0,
        "[%s] qk2 D %d: the two panels' own row maxima differ", name, D);
  CHECK(tu_guard_ok(s_pair), "[%s] qk2 D %d: guard bytes", name, D);
  scores2_free(&sc);
  free(q), free(kt);
}

/* pv2_segs on segments scattered in memory (probability columns and V rows
 * each at their own place) is bitwise one pv2 over the same keys side by
 * side: one FMA chain in the same order. */
static void check_pv2_segs(const stsa_kernels *k, const char *name, tu_rng *rng,
                           const int *lens, int nseg) {
  const int mr = k->mr, nr = k->nr, ld_p = 2 * MAX_N + 64, ld_o = 2 * nr + 8;
  int n = 0;
  for (int i = 0; i < nseg; i++)
    n += lens[i];
  const int64_t stride = (int64_t)(2 * n + 64) * nr; /* V panels apart */
  float *p = aligned_floats((size_t)mr * ld_p),
        *vp = aligned_floats((size_t)(2 * stride));
  float *pc = aligned_floats((size_t)mr * ld_p),
        *vc = aligned_floats((size_t)(2 * stride));
  fill(rng, p, (size_t)mr * ld_p);
  fill(rng, vp, (size_t)(2 * stride));
  stsa_pv_seg seg[8];
  /* segment i at p column at and V row at, gaps between; copied side by side */
  for (int i = 0, at = 3, c = 0; i < nseg; at += lens[i] + 5 + i, c += lens[i], i++) {
    seg[i] = (stsa_pv_seg){p + at, vp + (int64_t)at * nr, lens[i]};
    for (int r = 0; r < mr; r++)
      memcpy(pc + (int64_t)r * ld_p + c, p + (int64_t)r * ld_p + at,
             sizeof(float) * (size_t)lens[i]);
    for (int j = 0; j < 2; j++)
      memcpy(vc + j * stride + (int64_t)c * nr, vp + j * stride + (int64_t)at * nr,
             sizeof(float) * (size_t)lens[i] * (size_t)nr);
  }
  float alpha[16];
  for (int r = 0; r < mr; r++)
    alpha[r] = r == 2 ? 0.0f : (float)(0.5 + 0.5 * tu_rng_uniform(rng));
  const size_t o_bytes = sizeof(float) * (size_t)mr * ld_o;
  float *o_segs = tu_guarded_alloc(o_bytes), *o_one = tu_guarded_alloc(o_bytes);
  for (int i = 0; i < mr * ld_o; i++)
    o_segs[i] = o_one[i] = (float)tu_rng_normal(rng);
  k->pv2_segs(seg, nseg, ld_p, stride, o_segs, ld_o, alpha);
  k->pv2(pc, ld_p, n, vc, stride, o_one, ld_o, alpha);
  CHECK(memcmp(o_segs, o_one, o_bytes) == 0,
        "[%s] pv2_segs, %d segments of %d keys: "
        "outputs differ from one pv2",
        name, nseg, n);
  CHECK(tu_guard_ok(o_segs), "[%s] pv2_segs: guard bytes", name);
  tu_guarded_free(o_segs), tu_guarded_free(o_one);
  free(p), free(vp), free(pc), free(vc);
}

/* Whether `half` (hm rows of ld floats) equals `full` on rows < hm and
 * still holds `before` on rows hm..mr-1 (a half kernel's rows only). */
static int half_rows_ok(const float *half, const float *full, const float *before, int ld,
                        int hm, int mr) {
  const size_t top = sizeof(float) * (size_t)hm * (size_t)ld;
  return memcmp(half, full, top) == 0 &&
         memcmp(half + (size_t)hm * ld, before + (size_t)hm * ld,
                sizeof(float) * (size_t)(mr - hm) * (size_t)ld) == 0;
}

/* The half table (kernels.h: half) against the full one on the same
 * operands: bitwise its first rows, scores, row maxima and outputs, and
 * nothing written in the rows past its own (sentinels, guard bytes). */
static void check_half(const stsa_kernels *k, const char *name, tu_rng *rng, int D,
                       int n) {
  const stsa_kernels *h = k->half;
  CHECK(h->mr > 0 && h->mr < k->mr && h->nr == k->nr && h->qk && h->qk2 && h->pv &&
            h->pv2 && h->pv2_segs && h->softmax,
        "[%s] half table: mr %d (full %d), nr %d, entries missing", name, h->mr, k->mr,
        h->nr);
  const int mr = k->mr, hm = h->mr, nr = k->nr, ld = 2 * MAX_N + 8;
  const int64_t step = (int64_t)D * nr, vstride = (int64_t)(n + 5) * nr;
  float *q = aligned_floats((size_t)mr * D), *kt = aligned_floats((size_t)(2 * step));
  float *p = aligned_floats((size_t)mr * ld), *vp = aligned_floats((size_t)(2 * vstride));
  fill(rng, q, (size_t)mr * D);
  fill(rng, kt, (size_t)(2 * step));
  fill(rng, p, (size_t)mr * ld);
  fill(rng, vp, (size_t)(2 * vstride));
  const size_t bytes = sizeof(float) * (size_t)mr * ld;
  float *full = tu_guarded_alloc(bytes), *half = tu_guarded_alloc(bytes),
        *before = tu_guarded_alloc(bytes);
  float alpha[16], max_full[16], max_half[16], max_before[16];
  for (int r = 0; r < mr; r++)
    alpha[r] = r == 1 ? 0.0f : (float)(0.5 + 0.5 * tu_rng_uniform(rng));
  for (int step_kind = 0; step_kind < 5; step_kind++) {
    for (int i = 0; i < mr * ld; i++)
      before[i] = step_kind < 2 ? 12345.0f : (float)tu_rng_normal(rng);
    memcpy(full, before, bytes);
    memcpy(half, before, bytes);
    for (int r = 0; r < mr; r++)
      max_full[r] = max_half[r] = max_before[r] = -INFINITY;
    const char *what = "";
    if (step_kind == 0) {
      what = "qk";
      k->qk(q, D, kt + step, full, ld, max_full);
      h->qk(q, D, kt + step, half, ld, max_half);
    } else if (step_kind == 1) {
      what = "qk2";
      k->qk2(q, D, kt, kt + step, full, full + nr, ld, max_full, max_full);
      h->qk2(q, D, kt, kt + step, half, half + nr, ld, max_half, max_half);
    } else if (step_kind == 2) {
      what = "pv";
      k->pv(p, ld, n, vp, full, ld, alpha);
      h->pv(p, ld, n, vp, half, ld, alpha);
    } else if (step_kind == 3) {
      what = "pv2";
      k->pv2(p, ld, n, vp, vstride, full, ld, alpha);
      h->pv2(p, ld, n, vp, vstride, half, ld, alpha);
    } else {
      what = "pv2_segs";
      const stsa_pv_seg seg[2] = {{p, vp, n / 2},
                                  {p + n / 2 + 3, vp + n / 2 * nr, n - n / 2}};
      k->pv2_segs(seg, 2, ld, vstride, full, ld, alpha);
      h->pv2_segs(seg, 2, ld, vstride, half, ld, alpha);
    }
    CHECK(half_rows_ok(half, full, before, ld, hm, mr),
          "[%s] half %s, D %d, n %d: rows differ from the full kernel's, or rows past %d "
          "written",
          name, what, D, n, hm);
    CHECK(half_rows_ok(max_half, max_full, max_before, 1, hm, mr),
          "[%s] half %s, D %d: row maxima differ, or past row %d written", name, what, D,
          hm);
    CHECK(tu_guard_ok(full) && tu_guard_ok(half), "[%s] half %s: guard bytes", name,
          what);
  }
  tu_guarded_free(full), tu_guarded_free(half), tu_guarded_free(before);
  free(q), free(kt), free(p), free(vp);
}

/* gather_tails: tail i (its first n[i] columns of a K^T panel, depth rows
 * of nr) lands at columns c, c + 1, ... of the output panels, c counting
 * every earlier tail's columns; the last panel's other columns are zero,
 * and nothing past it is written (64 guard floats each side, the output
 * 64-byte aligned as the tile scratch is). */
static void check_gather_tails(const stsa_kernels *k, const char *name, tu_rng *rng,
                               const int *n, int count, int depth) {
  enum { GUARD = 64 };
  const int nr = k->nr;
  const int64_t step = (int64_t)depth * nr;
  float *src_mem = aligned_floats((size_t)(count * step));
  fill(rng, src_mem, (size_t)(count * step));
  const float *src[64];
  int total = 0;
  for (int i = 0; i < count; i++) {
    src[i] = src_mem + i * step;
    total += n[i];
  }
  const int panels = (total + nr - 1) / nr;
  const size_t floats = (size_t)(panels * step) + 2 * GUARD;
  float *out = aligned_floats(floats), *want = aligned_floats(floats);
  for (size_t i = 0; i < floats; i++)
    out[i] = want[i] = -777.0f;
  for (int64_t i = 0; i < panels * step; i++)
    want[GUARD + i] = 0.0f;
  for (int i = 0, c = 0; i < count; i++)
    for (int j = 0; j < n[i]; j++, c++)
      for (int d = 0; d < depth; d++)
        want[GUARD + c / nr * step + (int64_t)d * nr + c % nr] =
            src[i][(int64_t)d * nr + j];
  k->gather_tails(src, n, count, depth, nr, out + GUARD);
  CHECK(memcmp(out, want, sizeof(float) * floats) == 0,
        "[%s] gather_tails, %d tails (%d columns), depth %d: output differs", name, count,
        total, depth);
  free(src_mem), free(out), free(want);
}

int main(void) {
  stsa_backend backends[TU_MAX_BACKENDS];
  tu_rng rng = {2024};
  int with_pairs = 0;
  for (int bi = 0, nb = tu_tiled_backends(backends); bi < nb; bi++) {
    const stsa_backend_choice choice = tu_choose_backend(backends[bi]);
    const stsa_kernels *k = &choice.kern;
    const char *name = stsa_backend_name(backends[bi]);
    CHECK(!k->qk2 == !k->pv2, "[%s] has one of qk2 and pv2 only", name);
    /* the AVX-512 table is the one that has them today: a build that lost
     * them would otherwise pass here by testing nothing */
    if (backends[bi] == STSA_BACKEND_AVX512)
      CHECK(k->qk2 && k->pv2, "[%s] has no two-panel kernels", name);
    with_pairs += k->qk2 != NULL;
    const int dims[] = {16, 24, 64, 80, 128};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
      for (int panels = 1; panels <= MAX_PANELS; panels++)
        check_qk(k, name, &rng, dims[i], panels);
    const int lengths[] = {1, 7, 16, 33, 256, MAX_N};
    for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++)
      for (int panels = 1; panels <= MAX_PANELS; panels++)
        check_pv(k, name, &rng, lengths[i], panels);
    if (k->qk2)
      for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        for (int shift = 1; shift <= k->nr; shift += 3)
          check_qk2_apart(k, name, &rng, dims[i], shift);
    if (backends[bi] == STSA_BACKEND_AVX512)
      CHECK(k->pv2_segs != NULL, "[%s] has no pv2_segs", name);
    CHECK(!k->pv2_segs || k->pv2, "[%s] has pv2_segs without pv2", name);
    const int segs[][4] = {{1, 0, 0, 0}, {7, 16, 0, 0}, {76, 3, 41, 0}, {33, 1, 90, 64}};
    for (size_t i = 0; k->pv2_segs && i < sizeof segs / sizeof segs[0]; i++) {
      int nseg = 0;
      while (nseg < 4 && segs[i][nseg])
        nseg++;
      check_pv2_segs(k, name, &rng, segs[i], nseg);
    }
    if (backends[bi] == STSA_BACKEND_AVX512)
      CHECK(k->half != NULL, "[%s] has no half-height kernels", name);
    for (size_t i = 0; k->half && i < sizeof dims / sizeof dims[0]; i++)
      check_half(k, name, &rng, dims[i], lengths[i % (sizeof lengths / sizeof *lengths)]);
    CHECK(k->gather_tails != NULL, "[%s] has no gather_tails", name);
    const int depths[] = {40, 72, 128};
    for (size_t i = 0; i < sizeof depths / sizeof depths[0]; i++) {
      int n[40];
      n[0] = k->nr - 1; /* one tail: a partial panel */
      check_gather_tails(k, name, &rng, n, 1, depths[i]);
      for (int c = 0; c < 3; c++) /* full panels only, with the spill */
        n[c] = c == 2 ? k->nr / 2 : k->nr - k->nr / 4;
      check_gather_tails(k, name, &rng, n, 3, depths[i]);
      for (int c = 0; c < 40; c++) /* empty tails among them */
        n[c] = c % 5 == 3 ? 0 : (int)((tu_rng_uniform(&rng) + 1.0) * 0.5 * k->nr) % k->nr;
      check_gather_tails(k, name, &rng, n, 40, depths[i]);
    }
  }
  CHECK(with_pairs > 0 || !stsa_backend_available(STSA_BACKEND_AVX512),
        "no backend here has two-panel kernels");
  return tu_finish("test_kernel_pairs");
}
