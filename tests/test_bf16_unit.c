/*
 * test_bf16_unit.c — the bf16 engine's multiply unit (kernels.h: bf16_scores
 * and bf16_pv) of every table that has one (amx, natively or emulated, and
 * avx512bf16) against its products summed in double: every output within
 * the bound of an f32 sum of its n products (n rounded additions, the
 * products exact: n u / (1 - n u) of the sum of their magnitudes, u =
 * 2^-24), on awkward shapes: rows 1..32 (one or two tile blocks, every
 * remainder of a register tile), 1..9 K or V panels, 1..3 depth chunks, V
 * blocks in buffers of their own with different panel strides, 1..3 terms.
 * Outputs sit in larger sentinel buffers: nothing past the rows and panels
 * asked for is written.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/convert.h"
#include "kernel/kernels.h"
#include "kernel_util.h"
#include "testutil.h"

enum { EXTRA = 3, MAX_BLOCKS = 5 };

static const float SENTINEL = -12345.0f;

/* n bf16 values, normal with standard deviation sd (none below the normal
 * range: the unit reads those as zero). */
static uint16_t *random_bf16(tu_rng *rng, size_t n, double sd) {
  uint16_t *x = malloc(n * sizeof *x);
  if (!x)
    abort();
  for (size_t i = 0; i < n; i++)
    x[i] = stsa_f32_to_bf16((float)(sd * tu_rng_normal(rng)));
  return x;
}

static float *sentinels(size_t n) {
  float *x = malloc(n * sizeof *x);
  if (!x)
    abort();
  for (size_t i = 0; i < n; i++)
    x[i] = SENTINEL;
  return x;
}

static double bf(uint16_t h) { return (double)stsa_bf16_to_f32(h); }

/* The bound of an f32 sum of n exact products whose magnitudes sum to mag. */
static double sum_bound(int n, double mag) {
  const double nu = n * 0x1p-24;
  return nu / (1 - nu) * mag;
}

/* One output against its exact sum; counts a failure. */
static int out_ok(float got, double exact, int n, double mag) {
  return fabs((double)got - exact) <= sum_bound(n, mag);
}

static void check_scores(const stsa_kernels *k, tu_rng *rng, int rows, int npanels,
                         int nch) {
  const int ld_q = 32 * nch + 16, ld_s = 16 * npanels + 16;
  uint16_t *q = random_bf16(rng, (size_t)rows * ld_q, 1.0);
  uint16_t *kb = random_bf16(rng, (size_t)npanels * nch * 512, 1.0);
  const size_t ns = (size_t)(rows + EXTRA) * ld_s;
  float *s = sentinels(ns);
  k->bf16_scores(q, ld_q, rows, kb, nch, npanels, s, ld_s);
  long bad = 0, touched = 0;
  for (int r = 0; r < rows + EXTRA; r++)
    for (int col = 0; col < ld_s; col++) {
      const float got = s[(size_t)r * ld_s + col];
      if (r >= rows || col >= 16 * npanels) {
        touched += memcmp(&got, &SENTINEL, sizeof got) != 0;
        continue;
      }
      const int p = col / 16, c = col % 16;
      double exact = 0, mag = 0;
      for (int d = 0; d < 32 * nch; d++) {
        const double x =
            bf(q[(size_t)r * ld_q + d]) * bf(kb[(size_t)p * nch * 512 + (d / 32) * 512 +
                                                (d % 32) / 2 * 32 + c * 2 + d % 2]);
        exact += x;
        mag += fabs(x);
      }
      bad += !out_ok(got, exact, 32 * nch, mag);
    }
  CHECK(bad == 0 && touched == 0,
        "%s bf16_scores rows %d, %d panels, %d chunks: %ld outputs off the f32 bound, "
        "%ld bytes written outside",
        k->name, rows, npanels, nch, bad, touched);
  free(q), free(kb), free(s);
}

static void check_pv(const stsa_kernels *k, tu_rng *rng, int rows, int npanels,
                     int nblocks, int terms) {
  const int ld_p = 32 * nblocks + 32, ld_c = 16 * npanels + 16;
  const int64_t ld_term = (int64_t)rows * ld_p + 64;
  /* terms of decreasing size, as the engine's are */
  uint16_t *p = random_bf16(rng, (size_t)(terms * ld_term), 1.0);
  for (int x = 1; x < terms; x++)
    for (int64_t i = 0; i < ld_term; i++)
      p[x * ld_term + i] = stsa_f32_to_bf16(stsa_bf16_to_f32(p[x * ld_term + i]) *
                                            (x == 1 ? 0x1p-9f : 0x1p-18f));
  uint16_t *vb[MAX_BLOCKS];
  stsa_bf16_vblock vblk[MAX_BLOCKS];
  for (int b = 0; b < nblocks; b++) {
    const int64_t panel = 512 + 64 * b;
    vb[b] = random_bf16(rng, (size_t)(npanels * panel), 2.0);
    vblk[b] = (stsa_bf16_vblock){vb[b], panel};
  }
  const size_t nc = (size_t)(rows + EXTRA) * ld_c;
  float *c = sentinels(nc);
  k->bf16_pv(p, ld_p, ld_term, terms, vblk, nblocks, npanels, c, ld_c, rows);
  long bad = 0, touched = 0;
  for (int r = 0; r < rows + EXTRA; r++)
    for (int col = 0; col < ld_c; col++) {
      const float got = c[(size_t)r * ld_c + col];
      if (r >= rows || col >= 16 * npanels) {
        touched += memcmp(&got, &SENTINEL, sizeof got) != 0;
        continue;
      }
      const int j = col / 16, e = col % 16;
      double exact = 0, mag = 0;
      for (int b = 0; b < nblocks; b++)
        for (int x = 0; x < terms; x++)
          for (int i = 0; i < 32; i++) {
            const double y =
                bf(p[x * ld_term + (int64_t)r * ld_p + 32 * b + i]) *
                bf(vblk[b].at[j * vblk[b].panel + i / 2 * 32 + e * 2 + i % 2]);
            exact += y;
            mag += fabs(y);
          }
      /* one more rounding where the unit sums the terms apart and adds them */
      bad += !out_ok(got, exact, 32 * nblocks * terms + 1, mag);
    }
  CHECK(bad == 0 && touched == 0,
        "%s bf16_pv rows %d, %d panels, %d blocks, %d terms: %ld outputs off the f32 "
        "bound, %ld bytes written outside",
        k->name, rows, npanels, nblocks, terms, bad, touched);
  for (int b = 0; b < nblocks; b++)
    free(vb[b]);
  free(p), free(c);
}

int main(void) {
  tu_rng rng = {2026};
  int with_unit = 0;
  stsa_backend backends[TU_MAX_BACKENDS];
  for (int bi = 0, nb = tu_tiled_backends(backends); bi < nb; bi++) {
    const stsa_backend_choice choice = tu_choose_backend(backends[bi]);
    const stsa_kernels *k = &choice.kern;
    CHECK(!k->bf16_scores == !k->full_tile_bf16 && !k->bf16_pv == !k->full_tile_bf16,
          "%s: the multiply unit and the bf16 tiles come together", k->name);
    if (!k->bf16_scores || !k->bf16_pv)
      continue;
    with_unit++;
    const int rows[] = {1, 2, 3, 4, 5, 7, 12, 15, 16, 17, 20, 31, 32};
    for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++) {
      const int panels[] = {1, 2, 3, 4, 5, 9};
      for (size_t pi = 0; pi < sizeof panels / sizeof panels[0]; pi++)
        for (int nch = 1; nch <= 3; nch++)
          check_scores(k, &rng, rows[ri], panels[pi], nch);
      const int vpanels[] = {1, 3, 4, 5, 8};
      for (size_t pi = 0; pi < sizeof vpanels / sizeof vpanels[0]; pi++)
        for (int terms = 1; terms <= 3; terms++) {
          check_pv(k, &rng, rows[ri], vpanels[pi], 1, terms);
          check_pv(k, &rng, rows[ri], vpanels[pi], 3, terms);
        }
    }
  }
  /* a build that lost the entries would otherwise pass by testing nothing */
  CHECK(with_unit > 0 || (!stsa_backend_available(STSA_BACKEND_AMX) &&
                          !stsa_backend_available(STSA_BACKEND_AVX512BF16)),
        "no table with bf16 tiles has the multiply unit's entries");
  return tu_finish("test_bf16_unit");
}
