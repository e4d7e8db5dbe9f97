/*
 * test_kernel_pairs.c — the two-panel micro-kernels (kernels.h: qk2, pv2)
 * against two calls of the one-panel ones, bitwise, on every backend whose
 * table has them; and stsa_qk_panels / stsa_pv_panels on odd panel counts,
 * where the last panel goes through the one-panel kernel. Outputs sit
 * between guard bytes; columns and rows a call must not write keep their
 * sentinel.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernel/dispatch.h"
#include "kernel/kernels.h"
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
  const size_t s_bytes = sizeof(float) * (size_t)mr * ld_s;
  float *s_pair = tu_guarded_alloc(s_bytes), *s_one = tu_guarded_alloc(s_bytes);
  float max_pair[16], max_one[16];
  for (int i = 0; i < mr * ld_s; i++)
    s_pair[i] = s_one[i] = 12345.0f;
  for (int r = 0; r < mr; r++)
    max_pair[r] = max_one[r] = -INFINITY;
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
  tu_guarded_free(s_pair), tu_guarded_free(s_one);
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

int main(void) {
  stsa_backend backends[TU_MAX_BACKENDS];
  tu_rng rng = {2024};
  int with_pairs = 0;
  for (int bi = 0, nb = tu_tiled_backends(backends); bi < nb; bi++) {
    stsa_backend_choice choice;
    stsa_errbuf err;
    CHECK(stsa_backend_choose(backends[bi], &choice, &err) == STSA_OK, "%s", err.text);
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
  }
  CHECK(with_pairs > 0 || !stsa_backend_available(STSA_BACKEND_AVX512),
        "no backend here has two-panel kernels");
  return tu_finish("test_kernel_pairs");
}
