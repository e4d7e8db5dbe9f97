/*
 * bf16_engine.h — the bf16 tile engine (kernels.h: full_tile_bf16,
 * full_run_bf16, pack_bf16) around two operand-only matrix products, the
 * "multiply unit". A backend's file defines the unit's four functions
 * (declared below) and includes this header once: the AMX tile unit
 * (microkernels_amx.c) and AVX512-BF16's vdpbf16ps (microkernels_avx512bf16.c)
 * share every line but their products. Include after <immintrin.h> (and any
 * header that replaces its intrinsics); compile with AVX-512F/DQ/BW and
 * AVX512-BF16.
 *
 * The q tile goes in passes of up to 32 rows (STSA_BF16_PASS_ROWS; two
 * blocks of up to 16, a tile register's rows on AMX):
 *   1. S = Q K^T (unit_scores): f32 scores of the pass's rows against each
 *      K panel of 16 keys, summed over the depth in bf16 pairs. Products of
 *      bf16 are exact in f32.
 *   2. Online softmax on S in f32 (AVX-512): scores times score_scale, exp2
 *      as the AVX-512 kernels compute it; each p is written as t->terms bf16
 *      terms: three of 8 significant bits each, whose sum is p exactly
 *      (store_terms), or p rounded, and with two terms its rounding error
 *      rounded (store_rounded_terms).
 *   3. O = alpha O + P V (unit_pv): the terms of P times the V blocks,
 *      summed over keys and terms into a scratch of f32 sums that then joins
 *      o. With three terms P.V multiplies the f32 probabilities, as the f32
 *      path does.
 *
 * PARTIAL tiles take the tile loop's mask after step 1 (dropped pairs get
 * weight 0), so a call's FULL and PARTIAL tiles share one arithmetic: a
 * mask that keeps everything gives the FULL tile's bytes.
 *
 * engine_full_run takes several FULL tiles (SVG2's cluster-sized ones) as
 * one: each step runs over the tiles' keys side by side (each tile from a
 * column on a 32-key block), so a pass has one softmax and one P.V sum over
 * the tiles.
 */
#ifndef STSA_KERNEL_X86_BF16_ENGINE_H
#define STSA_KERNEL_X86_BF16_ENGINE_H

#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "exp2_avx512.h" /* this folder */
#include "kernel/kernels.h"
#include "max_avx512.h"       /* this folder */
#include "transpose_avx512.h" /* this folder */

#define BLOCK 16                 /* rows of a pass's row block */
#define PASS STSA_BF16_PASS_ROWS /* two blocks */
#define NR 16                    /* keys of a K panel, columns of a V panel */

/* The most 32-key blocks one P.V sum reads: a pass reads at most ld_s keys
 * (kernels.h: stsa_bf16_tile), the packed kv tile, and kv tiles are at most
 * 4096 keys (stsa.h: STSA_PARAM_KV_TILE; plans: mask/plan_build.c MAX_TILE),
 * rounded up to 32. */
#define MAX_KEY_BLOCKS (4096 / STSA_BF16_KEY_BLOCK)

/* The multiply unit's contract (kernels.h: bf16_scores, bf16_pv):
 * operands only, no masks or spans. Row counts are 1..32; rows > 16 are two
 * blocks of 16 and rows - 16. Rows past a tile's real rows (up to rows_pad)
 * are computed like any other.
 * unit_scores, unit_pv: as bf16_scores and bf16_pv, between unit_configure
 *   for the rows' blocks and unit_release.
 * unit_configure: the pass's blocks (rows0 1..16, rows1 0..16) change
 *   before the next products (AMX configures its tiles).
 * unit_release: the engine's call is done (AMX releases its tiles). */
static void unit_scores(const uint16_t *q, int ld_q, int rows, const uint16_t *kb,
                        int nch, int npanels, float *s, int ld_s);
static void unit_pv(const uint16_t *p, int ld_p, int64_t ld_term, int terms,
                    const stsa_bf16_vblock *vblk, int nblocks, int npanels, float *c,
                    int ld_c, int rows);
static void unit_configure(int rows0, int rows1);
static void unit_release(void);

/* A unit that defines UNIT_PV_F32 multiplies the probabilities of two or
 * three terms as f32 p itself (what three terms sum to exactly, and two
 * within 2^-18), where its products of f32 are faster than those of the
 * terms:
 * unit_pv_f32: as unit_pv with one term, on f32 p (row r at p + r ld_p).
 * The softmax then writes p in f32 into t->p (PASS rows of ld_s floats fit
 * in its three bf16 planes); F32_P_TERMS is the fewest terms that ask for
 * it (4: none). */
#ifdef UNIT_PV_F32
#define F32_P_TERMS 2
static void unit_pv_f32(const float *p, int ld_p, const stsa_bf16_vblock *vblk,
                        int nblocks, int npanels, float *c, int ld_c, int rows);
#else
#define F32_P_TERMS 4
#endif

/* One tile's keys in a pass: its K and V blocks (v_panel uint16 between
 * V column panels), its n keys, the column of the score and probability
 * rows where they start (a multiple of 32: 0 for one tile, the tiles side
 * by side for a run), and the columns [lo, hi) of the tile the pass
 * computes (stsa_bf16_tile: span; else [0, n)). */
typedef struct seg {
  const uint16_t *kb, *vb;
  int64_t v_panel;
  int n, off, lo, hi;
} seg;

/* The rows of one pass (where it starts, its two blocks) and its tiles. */
typedef struct pass {
  int r0, rows0, rows1, nseg;
  const seg *seg;
} pass;

/* The last column of g the pass computes, and that rounded up to 32. */
static inline int seg_end(const seg *g) { return g->hi < g->n ? g->hi : g->n; }
static inline int seg_end32(const seg *g) { return (seg_end(g) + 31) / 32 * 32; }

/* Raw scores q.k of the pass's rows against each tile's K panels, into
 * t->s from the tile's column on (row r of the pass at s + r ld_s). */
static void pass_scores(const stsa_bf16_tile *t, const pass *ps) {
  const int nch = t->D32 / 32;
  const uint16_t *q = t->q + (int64_t)ps->r0 * t->D32;
  for (int i = 0; i < ps->nseg; i++) {
    const seg *g = &ps->seg[i];
    const int p0 = g->lo / NR, p_end = (seg_end(g) + NR - 1) / NR;
    if (p_end > p0)
      unit_scores(q, t->D32, ps->rows0 + ps->rows1, g->kb + (int64_t)p0 * nch * 512, nch,
                  p_end - p0, t->s + g->off + p0 * NR, t->ld_s);
  }
}

/* Lanes [c, c + 16) of a row that are below n. */
static inline __mmask16 valid_lanes(int c, int n) {
  return c + 16 <= n ? (__mmask16)0xFFFF : c < n ? (__mmask16)((1u << (n - c)) - 1) : 0;
}

/* x with the low 16 bits of every lane cleared: its top 8 significant
 * bits, a bf16 value (truncated toward zero). */
static inline __m512 top_bits(__m512 x) {
  return _mm512_castsi512_ps(
      _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32((int)0xFFFF0000u)));
}

/* The bf16 halves of 32 f32 lanes whose low halves are zero (a's 16, then
 * b's): word 2 i + 1 of the pair, one permute. */
static inline __m512i bf16_of(__m512 a, __m512 b) {
  const __m512i odd =
      _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31,
                       29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  return _mm512_permutex2var_epi16(_mm512_castps_si512(a), odd, _mm512_castps_si512(b));
}

/* 16 f32 lanes as bf16, rounded to nearest even, and back to f32. */
static inline __m256i round_bf16(__m512 x) { return (__m256i)_mm512_cvtneps_pbh(x); }
static inline __m512 widen_bf16(__m256i h) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* Writes the bf16 term of 32 probabilities (p[0]'s 16, then p[1]'s) at
 * column c: p rounded to nearest even (at most 2^-9 of p off, no bias).
 * Each p[i] becomes the rounded value, the weight P.V gives the key: the
 * row sum then adds those weights, so the row's weights still sum to 1
 * after the rounding (rounded numerator over an unrounded sum would bias
 * the row). */
static inline void store_one_term(__m512 p[2], uint16_t *hi, int c) {
  for (int i = 0; i < 2; i++) {
    const __m256i h = round_bf16(p[i]);
    _mm256_storeu_si256((__m256i *)(void *)(hi + c + 16 * i), h);
    p[i] = widen_bf16(h);
  }
}

/* Writes two bf16 terms of 32 probabilities at column c: hi = p rounded to
 * 8 significant bits (half a unit added to the bits, then cut: ties away
 * from zero, two integer operations where a conversion and its way back
 * take four), lo = p - hi (exact) rounded to nearest even, so hi + lo is
 * within 2^-18 of p. A NaN p may give any hi; the row sum, which adds p
 * itself, carries the NaN. The weights P.V gives the keys then sum to 1
 * within 2^-18, far below the f16 or bf16 output's rounding (widening lo
 * back to f32 for the sum cost ~4% of a bf16 call). */
static inline void store_two_terms(const __m512 p[2], uint16_t *hi, uint16_t *lo, int c) {
  const __m512i half = _mm512_set1_epi32(0x8000);
  __m512 h[2];
  for (int i = 0; i < 2; i++) {
    h[i] =
        top_bits(_mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(p[i]), half)));
    const __m256i l = round_bf16(_mm512_sub_ps(p[i], h[i]));
    _mm256_storeu_si256((__m256i *)(void *)(lo + c + 16 * i), l);
  }
  _mm512_storeu_si512(hi + c, bf16_of(h[0], h[1]));
}

/* Writes the three bf16 terms of 32 probabilities (p0's 16, then p1's) at
 * column c of each: hi = the top 8 significant bits of p, mid those of
 * p - hi, lo = p - hi - mid. Both differences are exact (each drops bits
 * the previous term holds), and lo has at most 8 significant bits left, so
 * hi + mid + lo = p (lo below f32's normal range, p < ~2^-100, is flushed
 * by the tile unit). */
static inline void store_terms(__m512 p0, __m512 p1, uint16_t *hi, uint16_t *mid,
                               uint16_t *lo, int c) {
  const __m512 h0 = top_bits(p0), h1 = top_bits(p1);
  const __m512 r0 = _mm512_sub_ps(p0, h0), r1 = _mm512_sub_ps(p1, h1);
  const __m512 m0 = top_bits(r0), m1 = top_bits(r1);
  _mm512_storeu_si512(hi + c, bf16_of(h0, h1));
  _mm512_storeu_si512(mid + c, bf16_of(m0, m1));
  _mm512_storeu_si512(lo + c, bf16_of(_mm512_sub_ps(r0, m0), _mm512_sub_ps(r1, m1)));
}

/* Unsafe tiles, before the mask: a -inf score becomes -FLT_MAX, kept apart
 * from the pairs the mask drops (-inf), as the f32 path keeps it. */
static void mark_kept_neg_inf(const stsa_bf16_tile *t, const pass *ps) {
  const __m512 neg_inf = _mm512_set1_ps(-INFINITY), kept = _mm512_set1_ps(-FLT_MAX);
  for (int r = 0; r < ps->rows0 + ps->rows1; r++) {
    float *row = t->s + (int64_t)r * t->ld_s;
    for (int c = 0; c < t->n; c += 16) {
      const __mmask16 live = valid_lanes(c, t->n);
      const __m512 x = _mm512_maskz_loadu_ps(live, row + c);
      _mm512_mask_storeu_ps(row + c,
                            _mm512_mask_cmp_ps_mask(live, x, neg_inf, _CMP_EQ_OQ), kept);
    }
  }
}

/* The row's maximum logit over its n raw scores, in log2 units: the raw
 * maximum times score_scale (> 0; rounding is monotonic, so this is the
 * maximum of the scaled scores). On unsafe tiles a row whose kept scores
 * are all -inf (marked -FLT_MAX) returns -FLT_MAX itself: its sum then
 * stays 0 and the row stores as NaN, stsa.h's rule for only -inf logits. */
static float row_max(const stsa_bf16_tile *t, const pass *ps, const float *row) {
  const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
  __m512 v[4] = {neg_inf, neg_inf, neg_inf, neg_inf};
  for (int i = 0; i < ps->nseg; i++) {
    const seg *g = &ps->seg[i];
    const float *at = row + g->off;
    const int n = seg_end(g), c0 = g->lo / 16 * 16, whole = n / 16 * 16;
    if (whole > c0)
      max_chains_avx512(v, at + c0, whole - c0);
    for (int c = c0 > whole ? c0 : whole; c < n; c += 16)
      v[0] =
          _mm512_max_ps(v[0], _mm512_mask_loadu_ps(neg_inf, valid_lanes(c, n), at + c));
  }
  const float mx = max_of_chains_avx512(v);
  return !t->safe && mx == -FLT_MAX ? -FLT_MAX : mx * t->score_scale;
}

/* Writes 32 probabilities as `terms` bf16 terms at column c and returns
 * sum plus what the row sum adds for them: the weights the terms give (one
 * term: p rounded; three: p exactly), with two terms p itself. */
static inline __m512 emit_terms(__m512 p[2], const int terms, uint16_t *hi, uint16_t *mid,
                                uint16_t *lo, int c, __m512 sum) {
  if (terms >= F32_P_TERMS) { /* p itself, hi the row's f32 start */
    _mm512_storeu_ps((float *)(void *)hi + c, p[0]);
    _mm512_storeu_ps((float *)(void *)hi + c + 16, p[1]);
  } else if (terms == 3)
    store_terms(p[0], p[1], hi, mid, lo, c); /* they sum to p exactly */
  else if (terms == 2)
    store_two_terms(p, hi, mid, c);
  else
    store_one_term(p, hi, c);
  return _mm512_add_ps(sum, _mm512_add_ps(p[0], p[1]));
}

/* Below this |base| a row's logits are taken as one fused multiply-add of
 * the raw score: exact(raw * score_scale) - base, rounded once. A base is a
 * maximum rounded to f32 (row_max), and its own key's exact logit differs
 * from it by up to half an ulp of it: at most 1 here, so that key's weight
 * stays within [2^-1, 2] and every weight keeps its exact ratio to the
 * others. From 2^31 on that residual alone passes exp2's range (+-128: an
 * infinite or zero weight, a NaN row), so rows at or above the limit take
 * each logit rounded to f32 first, round(raw * score_scale) - base: the
 * maximum then gives exactly 0, as on the f32 path (whose q rows carry the
 * whole scale). Such logits are ~10^7 apart or more in practice (one key
 * takes the row); nothing below the limit changes. */
#define FUSED_LOGIT_LIMIT 0x1p24f

/* x = logit - base for 16 raw scores (FUSED_LOGIT_LIMIT: fused or rounded
 * first). The intrinsics of one multiply and one add are not contracted
 * into an FMA (the compilers fuse only within one C expression; each
 * intrinsic is its own function). */
static inline __m512 logit_from(__m512 raw, __m512 vscale, __m512 vneg,
                                const int rounded) {
  return rounded ? _mm512_add_ps(_mm512_mul_ps(raw, vscale), vneg)
                 : _mm512_fmadd_ps(raw, vscale, vneg);
}

/* exp2 for probabilities stored as `terms` bf16 terms: with one term they
 * are rounded to 8 significant bits, and exp2_bf16_avx512's error (2^-13.5
 * of p) is far below that rounding's (2^-9); with two or three the f32
 * path's exp2, whose p they carry to 2^-18 or exactly. */
static inline __m512 exp2_for(__m512 x, const int terms) {
  return terms == 1 ? exp2_bf16_avx512(x) : exp2_avx512(x);
}

/* p = exp2(logit - base) for each tile's n keys of a score row, 0 past
 * them up to the next multiple of 32 (the key chunk P.V reads), written at
 * hi (mid, lo) as `terms` bf16 terms; returns the lanes of the row sum. */
static inline __attribute__((always_inline)) __m512
row_terms_as(const stsa_bf16_tile *t, const pass *ps, const float *row, float base,
             uint16_t *hi, uint16_t *mid, uint16_t *lo, const int terms,
             const int rounded) {
  const __m512 vscale = _mm512_set1_ps(t->score_scale), vneg = _mm512_set1_ps(-base);
  __m512 sum = _mm512_setzero_ps();
  for (int g = 0; g < ps->nseg; g++) {
    const int n = seg_end(&ps->seg[g]), off = ps->seg[g].off;
    const float *at = row + off;
    int c = ps->seg[g].lo / 32 * 32;
    /* the same arithmetic on safe and unsafe tiles (whether a row's tile
     * is safe depends on the other rows' values), -inf giving 0 */
    for (; c + 32 <= n; c += 32) {
      __m512 p[2] = {
          exp2_for(logit_from(_mm512_loadu_ps(at + c), vscale, vneg, rounded), terms),
          exp2_for(logit_from(_mm512_loadu_ps(at + c + 16), vscale, vneg, rounded),
                   terms)};
      sum = emit_terms(p, terms, hi, mid, lo, off + c, sum);
    }
    if (c < n) { /* the last, partial block: lanes past n give 0 */
      __m512 p[2];
      for (int i = 0; i < 2; i++) {
        const __mmask16 live = valid_lanes(c + 16 * i, n);
        const __m512 x = logit_from(_mm512_maskz_loadu_ps(live, at + c + 16 * i), vscale,
                                    vneg, rounded);
        p[i] = _mm512_maskz_mov_ps(live, exp2_for(x, terms));
      }
      sum = emit_terms(p, terms, hi, mid, lo, off + c, sum);
    }
  }
  return sum;
}

/* row_terms_as with the logits FUSED_LOGIT_LIMIT asks for at this base. */
static inline __attribute__((always_inline)) __m512
row_terms(const stsa_bf16_tile *t, const pass *ps, const float *row, float base,
          uint16_t *hi, uint16_t *mid, uint16_t *lo, const int terms) {
  if (fabsf(base) < FUSED_LOGIT_LIMIT)
    return row_terms_as(t, ps, row, base, hi, mid, lo, terms, 0);
  return row_terms_as(t, ps, row, base, hi, mid, lo, terms, 1);
}

/* Online softmax of the pass's rows (kernels.h: softmax), written to t->p
 * as t->terms bf16 terms. NaN and +inf logits make l NaN as in the f32
 * path (exp2 keeps NaN; inf - inf).
 *
 * A lazy rescale: a row that has a maximum m from earlier tiles first
 * takes its weights against m itself, without a pass for the tile's
 * maximum, and keeps them (m stays, alpha = 1) when they sum to at most
 * ld_s (kv_stride), the bound the weights (<= 1) of a rescaled tile keep, so
 * o and l grow no further than there; otherwise (scores well above m, NaN
 * or +inf) the row is done again against its new maximum. The bound is
 * the call's, not the pass's: a tile's passes over the columns its mask
 * keeps and over all of them (the masked ones adding exact zeros) then
 * decide alike, and FULL tiles, PARTIAL ones and runs keep their bitwise
 * agreement. */
static inline __attribute__((always_inline)) void
softmax_terms(const stsa_bf16_tile *t, const pass *ps, const int terms) {
  const int r0 = ps->r0;
  for (int r = 0; r < ps->rows0 + ps->rows1; r++) {
    const float *row = t->s + (int64_t)r * t->ld_s;
    /* f32 p: row r's floats at (float *)t->p + r ld_s */
    uint16_t *hi = t->p + (int64_t)r * t->ld_s * (terms >= F32_P_TERMS ? 2 : 1),
             *mid = hi + (int64_t)PASS * t->ld_s, *lo = mid + (int64_t)PASS * t->ld_s;
    const float m = t->m[r0 + r];
    if (m > -FLT_MAX) {
      const float sum =
          _mm512_reduce_add_ps(row_terms(t, ps, row, m, hi, mid, lo, terms));
      if (sum <= (float)t->ld_s) {
        t->alpha[r0 + r] = 1.0f;
        t->l[r0 + r] += sum;
        continue;
      }
    }
    const float tile_max = row_max(t, ps, row);
    const float mx = tile_max > m ? tile_max : m;
    /* nothing kept so far: subtract 0 so that p = exp2(-inf) = 0, no NaN */
    const float base = mx == -INFINITY ? 0.0f : mx;
    const __m512 sum = row_terms(t, ps, row, base, hi, mid, lo, terms);
    const float a = _mm512_cvtss_f32(exp2_avx512(_mm512_set1_ps(m - base)));
    t->alpha[r0 + r] = a;
    t->l[r0 + r] = a * t->l[r0 + r] + _mm512_reduce_add_ps(sum);
    t->m[r0 + r] = mx;
  }
}

/* One copy of the row loop per number of terms: a constant there takes the
 * branches on it out of the inner loop. */
static void pass_softmax(const stsa_bf16_tile *t, const pass *ps) {
  if (t->terms == 1)
    softmax_terms(t, ps, 1);
  else if (t->terms == 2)
    softmax_terms(t, ps, 2);
  else
    softmax_terms(t, ps, 3);
}

/* o = alpha o + the C tiles' sums (t->c, D_pad wide) for the pass's rows. */
static void add_to_output(const stsa_bf16_tile *t, const pass *ps) {
  for (int r = 0; r < ps->rows0 + ps->rows1; r++) {
    float *o = t->o + (int64_t)(ps->r0 + r) * t->D_pad;
    const float *c = t->c + (int64_t)r * t->D_pad;
    const __m512 a = _mm512_set1_ps(t->alpha[ps->r0 + r]);
    for (int j = 0; j < t->D_pad; j += NR)
      _mm512_storeu_ps(
          o + j, _mm512_fmadd_ps(a, _mm512_loadu_ps(o + j), _mm512_loadu_ps(c + j)));
  }
}

/* o = alpha o + (hi + mid + lo) V for the pass's rows (the terms there are):
 * the tiles' key blocks side by side in t->p (a run's tiles each from a
 * column on a 32-key block, one after the other) as one sum into t->c,
 * which then joins o. */
static void pass_pv(const stsa_bf16_tile *t, const pass *ps) {
  stsa_bf16_vblock vblk[MAX_KEY_BLOCKS];
  int nblocks = 0;
  for (int g = 0; g < ps->nseg; g++)
    for (int k = ps->seg[g].lo / 32; k < seg_end32(&ps->seg[g]) / 32; k++)
      vblk[nblocks++] = (stsa_bf16_vblock){ps->seg[g].vb + k * 512, ps->seg[g].v_panel};
  const int64_t first = ps->seg[0].off + ps->seg[0].lo / 32 * 32;
#ifdef UNIT_PV_F32
  if (t->terms >= F32_P_TERMS) {
    unit_pv_f32((const float *)(const void *)t->p + first, t->ld_s, vblk, nblocks,
                t->D_pad / NR, t->c, t->D_pad, ps->rows0 + ps->rows1);
    add_to_output(t, ps);
    return;
  }
#endif
  const uint16_t *p = t->p + first;
  unit_pv(p, t->ld_s, (int64_t)PASS * t->ld_s, t->terms, vblk, nblocks, t->D_pad / NR,
          t->c, t->D_pad, ps->rows0 + ps->rows1);
  add_to_output(t, ps);
}

/* The bf16 terms of row r, key c of the pass, summed: the weight P.V gave
 * the key. */
static float weight_of(const stsa_bf16_tile *t, int r, int c) {
  if (t->terms >= F32_P_TERMS)
    return ((const float *)(const void *)t->p)[(int64_t)r * t->ld_s + c];
  float w = 0.0f;
  for (int x = 0; x < t->terms; x++) {
    const uint32_t bits = (uint32_t)t->p[((int64_t)x * PASS + r) * t->ld_s + c] << 16;
    float v;
    memcpy(&v, &bits, sizeof v);
    w += v;
  }
  return w;
}

/* A PARTIAL tile whose V holds NaN/Inf (stsa_bf16_tile: bad_keys): P.V ran
 * on V with them as 0; each row of the pass that keeps such a key adds
 * p * NaN/Inf where V has them (NaN even for p = 0, as in SDPA). */
static void pass_nonfinite_v(const stsa_bf16_tile *t, const pass *ps) {
  for (int i = 0; i < t->nbad; i++) {
    const int key = t->bad_keys[i];
    const uint16_t *v = t->vb_raw + (key / 32) * 512 + (key % 32) / 2 * 32 + key % 2;
    for (int r = 0; r < ps->rows0 + ps->rows1; r++) {
      if (t->s[(int64_t)r * t->ld_s + key] == -INFINITY)
        continue; /* the mask dropped the pair */
      const float p = weight_of(t, r, key);
      float *o = t->o + (int64_t)(ps->r0 + r) * t->D_pad;
      for (int d = 0; d < t->D; d++) {
        const uint32_t bits = (uint32_t)v[(d / NR) * t->v_panel_raw + (d % NR) * 2] << 16;
        float x;
        memcpy(&x, &bits, sizeof x);
        if (!isfinite(x))
          o[d] += p * x;
      }
    }
  }
}
/* Passes of 32 rows (two full blocks), then what is left: the unit is
 * configured again only when a pass's blocks change, and released at the
 * end. The pass from row r0 of the q tile over the nseg tiles at g, with
 * the unit configured for its blocks unless it is (configured: the last
 * pass's blocks). */
static pass pass_at(const stsa_bf16_tile *t, int r0, const seg *g, int nseg,
                    int configured[2]) {
  const int left = t->rows_pad - r0;
  const pass ps = {r0, left < BLOCK ? left : BLOCK,
                   left < BLOCK ? 0 : (left - BLOCK < BLOCK ? left - BLOCK : BLOCK), nseg,
                   g};
  if (ps.rows0 != configured[0] || ps.rows1 != configured[1]) {
    unit_configure(ps.rows0, ps.rows1);
    configured[0] = ps.rows0;
    configured[1] = ps.rows1;
  }
  return ps;
}

static void engine_full_tile(const stsa_bf16_tile *t) {
  int configured[2] = {-1, -1};
  for (int r0 = 0; r0 < t->rows_pad; r0 += PASS) {
    const int32_t *span = t->span ? t->span + 2 * (r0 / PASS) : NULL;
    const seg g = {
        t->kb, t->vb, t->v_panel, t->n, 0, span ? span[0] : 0, span ? span[1] : t->n};
    const pass ps = pass_at(t, r0, &g, 1, configured);
    if (g.lo >= g.hi)
      continue; /* the mask keeps nothing of these rows: m, l, o stay (alpha 1) */
    pass_scores(t, &ps);
    if (!t->safe)
      mark_kept_neg_inf(t, &ps);
    if (t->mask && ps.r0 < t->rows)
      t->mask(t->mask_ctx, ps.r0, t->rows - ps.r0 < PASS ? t->rows - ps.r0 : PASS, t->s,
              t->ld_s);
    pass_softmax(t, &ps);
    pass_pv(t, &ps);
    if (t->nbad)
      pass_nonfinite_v(t, &ps);
  }
  unit_release();
}
/* The K blocks of keys [0, n) of the 16-key panels at src (n < 32: one
 * panel, two past 16) into key positions [at, at + n) of the panels at
 * dst, nch depth chunks each. A key is one 32-bit column of every 64-byte
 * row of its panel's blocks: a permute of the two source rows puts the
 * keys in their destination columns, and a masked store writes only those
 * (the keys already there stay). */
static void gather_k_keys(const uint16_t *src, int n, int nch, uint16_t *dst, int at) {
  const int first = at / 16, last = (at + n - 1) / 16;
  __m512i idx[3];
  __mmask16 keep[3];
  for (int p = first; p <= last; p++) {
    const int from = 16 * p - at; /* the source key of the panel's column 0 */
    idx[p - first] = _mm512_add_epi32(
        _mm512_set1_epi32(from),
        _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0));
    uint32_t bits = 0;
    for (int x = 0; x < 16; x++)
      bits |= (uint32_t)(from + x >= 0 && from + x < n) << x;
    keep[p - first] = (__mmask16)bits;
  }
  const int64_t panel = (int64_t)nch * 512;
  for (int64_t row = 0; row < panel; row += 32) { /* every chunk's 16 rows */
    const __m512i s0 = _mm512_loadu_si512(src + row),
                  s1 = n > 16 ? _mm512_loadu_si512(src + panel + row)
                              : _mm512_setzero_si512();
    for (int p = first; p <= last; p++)
      _mm512_mask_storeu_epi32(dst + p * panel + row, keep[p - first],
                               _mm512_permutex2var_epi32(s0, idx[p - first], s1));
  }
}

/* The V blocks of keys [0, n) (n < 32) of the 32-key block at src into key
 * positions [at, at + n) of the blocks at dst, for each of `panels` column
 * panels (src_panel and dst_panel uint16 apart). Keys pair up in 64-byte
 * rows ([key / 2][column][key % 2]) and a block's rows follow the previous
 * block's, so position p is word p % 2 of row p / 2 counted from dst. From
 * an odd `at` each destination row takes its first key from the second
 * word of one source row and its second from the first word of the next:
 * one word permute of the two. */
static void gather_v_keys(const uint16_t *src, int64_t src_panel, int n, int panels,
                          uint16_t *dst, int64_t dst_panel, int at) {
  const int odd = at % 2;
  /* word 2 c of a destination row: word 2 c + 1 of the first source row
   * (column c of the odd key), word 2 c + 1: word 2 c of the second */
  const __m512i shift_one =
      _mm512_set_epi16(62, 31, 60, 29, 58, 27, 56, 25, 54, 23, 52, 21, 50, 19, 48, 17, 46,
                       15, 44, 13, 42, 11, 40, 9, 38, 7, 36, 5, 34, 3, 32, 1);
  for (int row = at / 2; row <= (at + n - 1) / 2; row++) {
    const int key0 = 2 * row - at; /* the source key of word 0 */
    const uint32_t lanes = (key0 >= 0 && key0 < n ? 0x55555555u : 0) |
                           (key0 + 1 >= 0 && key0 + 1 < n ? 0xAAAAAAAAu : 0);
    for (int j = 0; j < panels; j++) {
      const uint16_t *s = src + j * src_panel;
      __m512i v;
      if (!odd) {
        v = _mm512_loadu_si512(s + key0 / 2 * 32);
      } else { /* rows (key0 - 1) / 2 and the next; none before the first */
        const int r = (key0 - 1) / 2;
        const __m512i a =
            key0 >= 1 ? _mm512_loadu_si512(s + r * 32) : _mm512_setzero_si512();
        const __m512i b =
            key0 + 1 < n ? _mm512_loadu_si512(s + (r + 1) * 32) : _mm512_setzero_si512();
        v = _mm512_permutex2var_epi16(a, shift_one, b);
      }
      _mm512_mask_storeu_epi16(dst + j * dst_panel + row * 32, (__mmask32)lanes, v);
    }
  }
}

/* Zeros keys [from, to) of the K panels and V blocks of the run's tails
 * (the padding a pass reads up to its next 32-key block). */
static void zero_tail_keys(const stsa_bf16_tile *t, int from, int to) {
  const __m512i zero = _mm512_setzero_si512();
  const int64_t panel = (int64_t)t->D32 / 32 * 512, v_panel = (int64_t)t->ld_s / 32 * 512;
  for (int p = from / 16; p < (to + 15) / 16; p++) {
    uint32_t bits = 0;
    for (int x = 0; x < 16; x++)
      bits |= (uint32_t)(16 * p + x >= from && 16 * p + x < to) << x;
    for (int64_t row = 0; row < panel; row += 32)
      _mm512_mask_storeu_epi32(t->kb_tails + p * panel + row, (__mmask16)bits, zero);
  }
  for (int row = from / 2; row < (to + 1) / 2; row++) {
    const int key0 = 2 * row;
    const uint32_t lanes = (key0 >= from && key0 < to ? 0x55555555u : 0) |
                           (key0 + 1 >= from && key0 + 1 < to ? 0xAAAAAAAAu : 0);
    for (int j = 0; j < t->D_pad / NR; j++)
      _mm512_mask_storeu_epi16(t->vb_tails + j * v_panel + row * 32, (__mmask32)lanes,
                               zero);
  }
}

/* A run of FULL, safe tiles as one (kernels.h: full_run_bf16): the passes
 * of engine_full_tile over every tile's keys, which share the softmax and
 * whose P.V is one sum over the tiles (in the unit's registers), rather
 * than adding each tile's sum to o. The tiles are clusters of tens of
 * keys, and a 32-key block is what P.V multiplies at once: each tile's
 * whole blocks go side by side, and its last n % 32 keys join the other
 * tiles' in gathered blocks, so that the run pads once rather than once a
 * tile (counted over a Wan-480p call's runs: 19% of the keys computed were
 * padding, 3.9% this way). */
static void engine_full_run(const stsa_bf16_tile *t, const stsa_bf16_seg *in, int nseg) {
  seg g[STSA_MAX_RUN_TILES + 1];
  const int nch = t->D32 / 32;
  const int64_t v_tails = (int64_t)t->ld_s / 32 * 512; /* uint16 between panels */
  int count = 0, off = 0, tails = 0;
  for (int i = 0; i < nseg; i++) {
    const int whole = in[i].n / 32 * 32, rest = in[i].n - whole;
    if (whole > 0) {
      g[count++] = (seg){in[i].kb, in[i].vb, t->v_panel, whole, off, 0, whole};
      off += whole;
    }
    if (rest > 0) {
      gather_k_keys(in[i].kb + (int64_t)whole / 16 * nch * 512, rest, nch, t->kb_tails,
                    tails);
      gather_v_keys(in[i].vb + (int64_t)whole / 32 * 512, t->v_panel, rest, t->D_pad / NR,
                    t->vb_tails, v_tails, tails);
      tails += rest;
    }
  }
  if (tails > 0) {
    zero_tail_keys(t, tails, (tails + 31) / 32 * 32);
    g[count++] = (seg){t->kb_tails, t->vb_tails, v_tails, tails, off, 0, tails};
  }
  int configured[2] = {-1, -1};
  for (int r0 = 0; r0 < t->rows_pad; r0 += PASS) {
    const pass ps = pass_at(t, r0, g, count, configured);
    pass_scores(t, &ps);
    pass_softmax(t, &ps);
    pass_pv(t, &ps);
  }
  unit_release();
}

/* Words [0, n) of the 32 at a row (n <= 0: none): the lanes a masked load
 * reads, zeros past D without reading there. */
static inline __mmask32 words_below(int n) {
  return n >= 32 ? ~(__mmask32)0 : n > 0 ? (__mmask32)((1u << n) - 1) : 0;
}

/* The largest of the 16-bit lanes of m. */
static inline uint32_t max_u16_lane(__m512i m) {
  const __m512i lo = _mm512_and_si512(m, _mm512_set1_epi32(0xFFFF));
  return _mm512_reduce_max_epu32(_mm512_max_epu32(lo, _mm512_srli_epi32(m, 16)));
}

/* pack_bf16 (kernels.h) on contiguous rows; strided ones go the portable
 * way. K: each depth chunk of the sixteen keys is a 16 x 16 matrix of
 * 32-bit pairs, transposed in registers into the chunk's sixteen pair rows.
 * V: the words of two keys' rows interleave, 32 columns per permute. */
static void engine_pack_bf16(const stsa_bf16_rows *rows, uint16_t *kb, uint16_t *vb,
                             int64_t v_panel, uint32_t abs_bits[2]) {
  if (rows->k_stride != 1 || rows->v_stride != 1) {
    stsa_pack_bf16_rows(rows, kb, vb, v_panel, abs_bits);
    return;
  }
  const int D = rows->D, panels = rows->D_pad / 16;
  const __m512i magnitude = _mm512_set1_epi16(0x7fff), zero = _mm512_setzero_si512();
  __m512i k_max = zero, v_max = zero;
  for (int c = 0; c < rows->D32 / 32; c++) {
    const __mmask32 live = words_below(D - 32 * c);
    __m512 r[16];
    for (int key = 0; key < 16; key++) {
      const uint16_t *k = rows->k[key];
      const __m512i x = k ? _mm512_maskz_loadu_epi16(live, k + 32 * c) : zero;
      k_max = _mm512_max_epu16(k_max, _mm512_and_si512(x, magnitude));
      r[key] = _mm512_castsi512_ps(x);
    }
    transpose16(r);
    for (int pair = 0; pair < 16; pair++)
      _mm512_storeu_ps(kb + c * 512 + pair * 32, r[pair]);
  }
  /* word 2 e + i of a pair row: column e of key i; lo: columns 0-15, hi:
   * 16-31 of the 32 loaded (a's words 0-31, b's 32-63) */
  const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41,
                                      9, 40, 8, 39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2,
                                      33, 1, 32, 0),
                hi = _mm512_set_epi16(63, 31, 62, 30, 61, 29, 60, 28, 59, 27, 58, 26, 57,
                                      25, 56, 24, 55, 23, 54, 22, 53, 21, 52, 20, 51, 19,
                                      50, 18, 49, 17, 48, 16);
  for (int i = 0; i < 8; i++) {
    const uint16_t *v0 = rows->k[2 * i] ? rows->v[2 * i] : NULL,
                   *v1 = rows->k[2 * i + 1] ? rows->v[2 * i + 1] : NULL;
    for (int j = 0; j < panels; j += 2) {
      const __mmask32 live = words_below(D - 16 * j);
      const __m512i a = v0 ? _mm512_maskz_loadu_epi16(live, v0 + 16 * j) : zero,
                    b = v1 ? _mm512_maskz_loadu_epi16(live, v1 + 16 * j) : zero;
      v_max = _mm512_max_epu16(v_max, _mm512_max_epu16(_mm512_and_si512(a, magnitude),
                                                       _mm512_and_si512(b, magnitude)));
      _mm512_storeu_si512(vb + j * v_panel + i * 32, _mm512_permutex2var_epi16(a, lo, b));
      if (j + 1 < panels)
        _mm512_storeu_si512(vb + (j + 1) * v_panel + i * 32,
                            _mm512_permutex2var_epi16(a, hi, b));
    }
  }
  const uint32_t kb_max = max_u16_lane(k_max), vb_max = max_u16_lane(v_max);
  abs_bits[0] = kb_max > abs_bits[0] ? kb_max : abs_bits[0];
  abs_bits[1] = vb_max > abs_bits[1] ? vb_max : abs_bits[1];
}

/* The unit configured for `rows` as a pass of that many rows would. */
static void configure_rows(int rows) {
  unit_configure(rows < BLOCK ? rows : BLOCK, rows < BLOCK ? 0 : rows - BLOCK);
}

/* kernels.h: bf16_scores and bf16_pv, the unit's products one call each. */
static void engine_scores(const uint16_t *q, int ld_q, int rows, const uint16_t *kb,
                          int nch, int npanels, float *s, int ld_s) {
  configure_rows(rows);
  unit_scores(q, ld_q, rows, kb, nch, npanels, s, ld_s);
  unit_release();
}

static void engine_pv(const uint16_t *p, int ld_p, int64_t ld_term, int terms,
                      const stsa_bf16_vblock *vblk, int nblocks, int npanels, float *c,
                      int ld_c, int rows) {
  configure_rows(rows);
  unit_pv(p, ld_p, ld_term, terms, vblk, nblocks, npanels, c, ld_c, rows);
  unit_release();
}

/* A backend's table: the AVX-512 entries, and this engine's on its unit. */
static void engine_override(stsa_kernels *t, const char *name) {
  stsa_kernels_override_avx512(t);
  t->name = name;
  t->full_tile_bf16 = engine_full_tile;
  t->full_run_bf16 = engine_full_run;
  t->pack_bf16 = engine_pack_bf16;
  t->bf16_scores = engine_scores;
  t->bf16_pv = engine_pv;
}

#endif
