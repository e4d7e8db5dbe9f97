/*
 * microkernels_avx512bf16.c — the avx512bf16 backend: the AVX-512 table
 * plus the bf16 tile engine (bf16_engine.h) with AVX512-BF16's vdpbf16ps
 * as its multiply unit, for CPUs that have the instruction but no AMX (AMD
 * Zen 4 and 5, Intel Cooper Lake). Compiled with -mavx512bw -mavx512bf16
 * (and the AVX-512 file's flags); only reached after the backend's CPU
 * check (dispatch.c).
 *
 * The packed blocks are already vdpbf16ps's operands: a K block's pair row
 * j holds (k[2 j], k[2 j + 1]) of 16 keys, so one instruction with q's pair
 * (q[2 j], q[2 j + 1]) broadcast gives 16 keys' scores a pair of depth
 * further; a V block's pair row i holds keys 2 i and 2 i + 1 of 16 columns,
 * times a broadcast pair of p. Each kernel keeps a register tile of
 * accumulators (RT rows by CT panels of 16 lanes) and loads every K or V row
 * once per row group, its broadcasts once for CT panels.
 *
 * Rounding: vdpbf16ps adds the pair's two products to the sum one at a
 * time, each addition rounded to f32 (Intel SDM; bf16 inputs below the
 * normal range read as zero, results flushed to zero, round to nearest
 * even), where the AMX unit rounds the pair's sum once: the products are
 * exact, so each multiply-add rounds as an FMA would, as often as the f32
 * path's FMAs. Results differ from the amx backend's in the last bits.
 *
 * x86-64 only: CMake compiles this file only for x86 targets.
 */
#if defined(__x86_64__)
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define UNIT_PV_F32      /* bf16_engine.h: two or three terms as f32 p */
#include "bf16_engine.h" /* this folder */

#define RT 4 /* rows of the register tile */
#define CT 4 /* 16-lane panels of the register tile */

static void unit_configure(int rows0, int rows1) { (void)rows0, (void)rows1; }
static void unit_release(void) {}

/* The bf16 pair at `at` (4-byte aligned: even columns) in every lane. */
static inline __m512bh pair_at(const uint16_t *at) {
  int32_t x;
  memcpy(&x, at, sizeof x);
  return (__m512bh)_mm512_set1_epi32(x);
}

/* Scores of `rows` (<= RT) q rows against `panels` (<= CT) K panels:
 * constants where inlined, so the accumulators stay in registers. */
static inline __attribute__((always_inline)) void
scores_tile(const uint16_t *q, int ld_q, const int rows, const uint16_t *kb, int nch,
            const int panels, float *s, int ld_s) {
  __m512 acc[RT][CT];
  for (int r = 0; r < rows; r++)
    for (int j = 0; j < panels; j++)
      acc[r][j] = _mm512_setzero_ps();
  const int64_t panel = (int64_t)nch * 512;
  for (int c = 0; c < nch; c++)
    for (int pair = 0; pair < 16; pair++) {
      __m512bh k[CT];
      for (int j = 0; j < panels; j++)
        k[j] = (__m512bh)_mm512_loadu_si512(kb + j * panel + c * 512 + pair * 32);
      for (int r = 0; r < rows; r++) {
        const __m512bh a = pair_at(q + (int64_t)r * ld_q + c * 32 + 2 * pair);
        for (int j = 0; j < panels; j++)
          acc[r][j] = _mm512_dpbf16_ps(acc[r][j], a, k[j]);
      }
    }
  for (int r = 0; r < rows; r++)
    for (int j = 0; j < panels; j++)
      _mm512_storeu_ps(s + (int64_t)r * ld_s + j * NR, acc[r][j]);
}

/* bf16_engine.h: unit_scores, in register tiles of RT rows by CT panels,
 * then single rows and panels at the edges. */
static void unit_scores(const uint16_t *q, int ld_q, int rows, const uint16_t *kb,
                        int nch, int npanels, float *s, int ld_s) {
  const int64_t panel = (int64_t)nch * 512;
  int r = 0;
  for (; r + RT <= rows; r += RT) {
    const uint16_t *qr = q + (int64_t)r * ld_q;
    float *sr = s + (int64_t)r * ld_s;
    int p = 0;
    for (; p + CT <= npanels; p += CT)
      scores_tile(qr, ld_q, RT, kb + p * panel, nch, CT, sr + p * NR, ld_s);
    for (; p < npanels; p++)
      scores_tile(qr, ld_q, RT, kb + p * panel, nch, 1, sr + p * NR, ld_s);
  }
  for (; r < rows; r++) {
    const uint16_t *qr = q + (int64_t)r * ld_q;
    float *sr = s + (int64_t)r * ld_s;
    int p = 0;
    for (; p + CT <= npanels; p += CT)
      scores_tile(qr, ld_q, 1, kb + p * panel, nch, CT, sr + p * NR, ld_s);
    for (; p < npanels; p++)
      scores_tile(qr, ld_q, 1, kb + p * panel, nch, 1, sr + p * NR, ld_s);
  }
}

/* P.V of `rows` (<= RT) rows into `panels` (<= CT) column panels from
 * panel j0, over every block and `terms` terms (the engine's passes come
 * here with one term, pv_f32_tile taking two or three; the table's bf16_pv
 * with any): each V row is loaded once,
 * and the terms of p multiply it in turn. The first term's products go to
 * one sum and the smaller terms' to another (`split`, with two or three
 * terms), added at the end: vdpbf16ps rounds at each product, so three
 * terms summed as one would round three times a key where the f32 path's
 * FMA rounds once (measured: 1.3x the f32 path's error at D 64); the small
 * terms' sum, some 2^8 times smaller, rounds at its own scale. */
static inline __attribute__((always_inline)) void
pv_tile(const uint16_t *p, int ld_p, int64_t ld_term, const int terms,
        const stsa_bf16_vblock *vblk, int nblocks, int j0, const int panels, float *c,
        int ld_c, const int rows) {
  const int split = terms > 1;
  __m512 acc[RT][CT], rest[RT][CT];
  for (int r = 0; r < rows; r++)
    for (int j = 0; j < panels; j++)
      acc[r][j] = rest[r][j] = _mm512_setzero_ps();
  for (int b = 0; b < nblocks; b++) {
    const uint16_t *v = vblk[b].at + j0 * vblk[b].panel;
    const int64_t vp = vblk[b].panel;
    for (int pair = 0; pair < 16; pair++) {
      __m512bh w[CT];
      for (int j = 0; j < panels; j++)
        w[j] = (__m512bh)_mm512_loadu_si512(v + j * vp + pair * 32);
      for (int x = 0; x < terms; x++)
        for (int r = 0; r < rows; r++) {
          const __m512bh a =
              pair_at(p + x * ld_term + (int64_t)r * ld_p + b * 32 + 2 * pair);
          for (int j = 0; j < panels; j++) {
            if (x == 0)
              acc[r][j] = _mm512_dpbf16_ps(acc[r][j], a, w[j]);
            else
              rest[r][j] = _mm512_dpbf16_ps(rest[r][j], a, w[j]);
          }
        }
    }
  }
  for (int r = 0; r < rows; r++)
    for (int j = 0; j < panels; j++)
      _mm512_storeu_ps(c + (int64_t)r * ld_c + (j0 + j) * NR,
                       split ? _mm512_add_ps(acc[r][j], rest[r][j]) : acc[r][j]);
}

/* unit_pv for a constant number of terms, in register tiles of RT rows by
 * `ct` panels (CT with one term; half as many with two sums a panel). */
static inline __attribute__((always_inline)) void
pv_terms(const uint16_t *p, int ld_p, int64_t ld_term, const int terms,
         const stsa_bf16_vblock *vblk, int nblocks, int npanels, float *c, int ld_c,
         int rows) {
  const int ct = terms > 1 ? CT / 2 : CT;
  int r = 0;
  for (; r + RT <= rows; r += RT) {
    const uint16_t *pr = p + (int64_t)r * ld_p;
    float *cr = c + (int64_t)r * ld_c;
    int j = 0;
    for (; j + ct <= npanels; j += ct)
      pv_tile(pr, ld_p, ld_term, terms, vblk, nblocks, j, ct, cr, ld_c, RT);
    for (; j < npanels; j++)
      pv_tile(pr, ld_p, ld_term, terms, vblk, nblocks, j, 1, cr, ld_c, RT);
  }
  for (; r < rows; r++) {
    const uint16_t *pr = p + (int64_t)r * ld_p;
    float *cr = c + (int64_t)r * ld_c;
    int j = 0;
    for (; j + ct <= npanels; j += ct)
      pv_tile(pr, ld_p, ld_term, terms, vblk, nblocks, j, ct, cr, ld_c, 1);
    for (; j < npanels; j++)
      pv_tile(pr, ld_p, ld_term, terms, vblk, nblocks, j, 1, cr, ld_c, 1);
  }
}

/* bf16_engine.h: unit_pv, one copy per number of terms. */
static void unit_pv(const uint16_t *p, int ld_p, int64_t ld_term, int terms,
                    const stsa_bf16_vblock *vblk, int nblocks, int npanels, float *c,
                    int ld_c, int rows) {
  if (terms == 1)
    pv_terms(p, ld_p, ld_term, 1, vblk, nblocks, npanels, c, ld_c, rows);
  else if (terms == 2)
    pv_terms(p, ld_p, ld_term, 2, vblk, nblocks, npanels, c, ld_c, rows);
  else
    pv_terms(p, ld_p, ld_term, 3, vblk, nblocks, npanels, c, ld_c, rows);
}

/* P.V of `rows` (<= RT) rows of f32 p into `panels` (<= CT) column panels
 * from panel j0: each V pair row is widened to its two keys' f32 rows (the
 * even words shifted up, the odd ones masked: exact), once for the tile's
 * rows, and each key takes one FMA with its p broadcast, the f32 path's
 * arithmetic (one rounding a key), where vdpbf16ps took two or three
 * instructions a key pair for the terms (measured on Zen 5, dense bf16 at
 * 2 threads: 1.35x faster than three terms, 1.03-1.16x than two). */
static inline __attribute__((always_inline)) void
pv_f32_tile(const float *p, int ld_p, const stsa_bf16_vblock *vblk, int nblocks, int j0,
            const int panels, float *c, int ld_c, const int rows) {
  const __m512i odd_words = _mm512_set1_epi32((int)0xFFFF0000u);
  __m512 acc[RT][CT];
  for (int r = 0; r < rows; r++)
    for (int j = 0; j < panels; j++)
      acc[r][j] = _mm512_setzero_ps();
  for (int b = 0; b < nblocks; b++) {
    const uint16_t *v = vblk[b].at + j0 * vblk[b].panel;
    const int64_t vp = vblk[b].panel;
    for (int pair = 0; pair < 16; pair++)
      for (int j = 0; j < panels; j++) {
        const __m512i w = _mm512_loadu_si512(v + j * vp + pair * 32);
        const __m512 even = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)),
                     odd = _mm512_castsi512_ps(_mm512_and_si512(w, odd_words));
        for (int r = 0; r < rows; r++) {
          const float *pr = p + (int64_t)r * ld_p + b * 32 + 2 * pair;
          acc[r][j] = _mm512_fmadd_ps(_mm512_set1_ps(pr[0]), even, acc[r][j]);
          acc[r][j] = _mm512_fmadd_ps(_mm512_set1_ps(pr[1]), odd, acc[r][j]);
        }
      }
  }
  for (int r = 0; r < rows; r++)
    for (int j = 0; j < panels; j++)
      _mm512_storeu_ps(c + (int64_t)r * ld_c + (j0 + j) * NR, acc[r][j]);
}

/* Rows [r, r + rows) (rows RT or 1: constants where inlined) of
 * unit_pv_f32, CT panels at a time, then single panels. */
static inline __attribute__((always_inline)) void
pv_f32_rows(const float *p, int ld_p, const stsa_bf16_vblock *vblk, int nblocks,
            int npanels, float *c, int ld_c, const int rows) {
  int j = 0;
  for (; j + CT <= npanels; j += CT)
    pv_f32_tile(p, ld_p, vblk, nblocks, j, CT, c, ld_c, rows);
  for (; j < npanels; j++)
    pv_f32_tile(p, ld_p, vblk, nblocks, j, 1, c, ld_c, rows);
}

/* bf16_engine.h: unit_pv_f32, in register tiles of RT rows by CT panels,
 * then single rows. */
static void unit_pv_f32(const float *p, int ld_p, const stsa_bf16_vblock *vblk,
                        int nblocks, int npanels, float *c, int ld_c, int rows) {
  int r = 0;
  for (; r + RT <= rows; r += RT)
    pv_f32_rows(p + (int64_t)r * ld_p, ld_p, vblk, nblocks, npanels,
                c + (int64_t)r * ld_c, ld_c, RT);
  for (; r < rows; r++)
    pv_f32_rows(p + (int64_t)r * ld_p, ld_p, vblk, nblocks, npanels,
                c + (int64_t)r * ld_c, ld_c, 1);
}

void stsa_kernels_override_avx512bf16(stsa_kernels *t) {
  engine_override(t, "avx512bf16");
}
#endif /* x86-64 */
