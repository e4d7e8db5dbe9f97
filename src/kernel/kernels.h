/*
 * kernels.h — the micro-kernel contracts and the dispatch table.
 *
 * Framework code (tile_*.c) owns the loops, packing, tails and threads;
 * each ISA contributes these few functions. BLIS-style, a table is first
 * filled with the portable versions (stsa_kernels_init_portable), then an
 * ISA overrides only the entries it provides (stsa_kernels_override_<isa>),
 * and everything that depends on the register tile reads mr and nr from the
 * table: q tile and plan rounding, panel packing, profiling rows, context
 * bounds. dispatch.c knows which ISAs exist and resolves a backend to a
 * table once per context.
 *
 * Packed layouts (f32, 64-byte aligned), NR = the table's nr:
 *   K^T panels  kt[p][d][c]   = K[NR p + c][d]          p < S_kv_pad/NR, c < NR
 *   V panels    vp[j][r][c]   = V[r][NR j + c]          j < D_pad/NR, r < S_kv_pad
 * Rows beyond S_kv and columns beyond D are zero.
 * Scores are in log2 units: Q is pre-multiplied by scale * log2(e), so the
 * softmax uses exp2.
 */
#ifndef STSA_KERNEL_KERNELS_H
#define STSA_KERNEL_KERNELS_H

#include <stdint.h>

/* The register tile every table in this build uses (the portable one; an ISA
 * that changes mr or nr sets them in its override). Only the public bounds of
 * stsa_param_bounds, which have no context to ask, read these directly. */
#define STSA_PORTABLE_MR 6
#define STSA_PORTABLE_NR 16

/* Rows of the q tile that full_tile_bf16 takes at once (two tiles of 16):
 * its scratch is sized for them. */
#define STSA_BF16_PASS_ROWS 32

/* Keys of one bf16 V block (pairs of keys in 32-bit words, 16 of them):
 * the packed spans of bf16 tiles start and end on multiples. */
#define STSA_BF16_KEY_BLOCK 32

/* One FULL kv tile of a q tile for full_tile_bf16 (below): bf16 Q, K and V,
 * every row block of the q tile, in the layouts kv_pack.h packs (K and V
 * in 1 KB blocks of 16 rows x 32 bf16, the operand layout of a bf16 tile
 * multiply). m, l, alpha and o are as for softmax and pv. */
typedef struct stsa_bf16_tile {
  /* [rows_pad][D32] bf16, zero past D: q times 2^e, the largest power of two
   * not above scale * log2(e) (exact in bf16; logits then overflow no
   * sooner than the f32 path's q * scale * log2(e) . k) */
  const uint16_t *q;
  const uint16_t *kb; /* the tile's K blocks: panel p, depth chunk c at
                         kb + (p * D32 / 32 + c) * 512: [d / 2][key][d % 2] */
  const uint16_t *vb; /* the tile's V blocks: column panel j, key chunk t at
                         vb + j * v_panel + t * 512: [key / 2][column][key % 2] */
  int64_t v_panel;    /* uint16 elements between V column panels */
  int D32;            /* head dim rounded up to 32 */
  int D_pad;          /* o's row length (a multiple of nr) */
  int rows_pad;       /* q rows, a multiple of mr */
  int n;              /* valid keys; K and V are zero past them */
  float score_scale;  /* scale * log2(e) / 2^e: q.k times it is in log2 units */
  int safe;           /* no logit of the tile can be NaN or +-inf; when 0, -inf
                         logits are kept apart from dropped ones as the tile
                         loop's f32 path does (KEPT_NEG_INF) */
  float *s;           /* scratch [STSA_BF16_PASS_ROWS][ld_s] f32 */
  int ld_s;           /* >= n rounded up to 32 */
  /* scratch [3][STSA_BF16_PASS_ROWS][ld_s] bf16: the terms of P (a unit
   * that multiplies V by the f32 p keeps p there instead; bf16_engine.h) */
  uint16_t *p;
  /* bf16 terms each probability enters P.V as: 3 = exactly the f32 p; 2 =
   * p to 2^-18; 1 = p rounded to bf16 (2^-9, PyTorch's bf16 SDPA). */
  int terms;
  float *c;                 /* scratch [STSA_BF16_PASS_ROWS][D_pad] f32 */
  float *o, *m, *l, *alpha; /* as for softmax and pv, over rows_pad rows */
  /* PARTIAL tiles only (mask NULL: FULL): rows real q rows of rows_pad; per
   * pass, after the scores (and on unsafe tiles -inf scores turned to
   * -FLT_MAX, kept), mask(mask_ctx, r0, rows, s, ld_s) writes -inf for the
   * dropped pairs of q tile rows [r0, r0 + rows) (s row 0 = row r0). */
  int rows;
  void (*mask)(const void *mask_ctx, int r0, int rows, float *s, int ld_s);
  const void *mask_ctx;
  /* Optional with a mask: span[2 i], span[2 i + 1] = the columns [lo, hi)
   * that rows of pass i (STSA_BF16_PASS_ROWS each) keep at all; the pass
   * computes only the K panels and key chunks that reach them (lo >= hi:
   * none). NULL: every column. */
  const int32_t *span;
  /* A PARTIAL tile whose V holds NaN/Inf: vb is a copy with them as 0
   * (a dropped key's V must not reach a row: 0 * NaN), and the bad_keys[0..
   * nbad) that have them add p * V for the rows that keep them, read from
   * vb_raw (v_panel_raw apart), as the f32 path adds them. nbad 0: none. */
  const int32_t *bad_keys;
  int nbad;
  const uint16_t *vb_raw;
  int64_t v_panel_raw;
  int D; /* the head dim: V columns past it are 0 */
  /* full_run_bf16 only: scratch for the run's tails, gathered as K panels
   * [ld_s / 16][D32 / 32][512] and V blocks [D_pad / 16][ld_s / 32][512] */
  uint16_t *kb_tails, *vb_tails;
} stsa_bf16_tile;

/* Where one 32-key block of bf16 V is (the bf16 multiply unit's P.V
 * operand, kernels.h: bf16_pv): its column panel 0 at `at`, panel j at
 * at + j panel uint16 on ([key / 2][column][key % 2], 16 columns a panel). */
typedef struct stsa_bf16_vblock {
  const uint16_t *at;
  int64_t panel;
} stsa_bf16_vblock;

/* The most tiles (segments) one pv2_segs or full_run_bf16 call takes. */
#define STSA_MAX_RUN_TILES 64

/* One tile of a run for full_run_bf16: its K and V blocks (as
 * stsa_bf16_tile's kb and vb) and its n keys. */
typedef struct stsa_bf16_seg {
  const uint16_t *kb, *vb;
  int n;
} stsa_bf16_seg;

/* One segment of keys for pv2_segs: its probabilities (columns from p on,
 * rows ld_p apart), its V rows (from panel on) and its key count. */
typedef struct stsa_pv_seg {
  const float *p;
  const float *panel;
  int n;
} stsa_pv_seg;

/* The most columns of a panel (nr) any table has (each ISA's file asserts
 * its own). */
#define STSA_MAX_NR 16
_Static_assert(STSA_PORTABLE_NR <= STSA_MAX_NR, "a panel's keys fit stsa_panel_rows");

/* The keys of one K^T / V panel for pack_panel: key c's K and V rows
 * (k[c] NULL: a padding key, zeros in both), their dtype and element
 * stride, and the table's load_row for rows the packer converts one by
 * one. */
typedef struct stsa_panel_rows {
  const void *k[STSA_MAX_NR], *v[STSA_MAX_NR];
  int k_dtype, v_dtype;
  int64_t k_stride, v_stride;
  int D, D_pad, nr;
  void (*load_row)(const void *src, int dtype, int64_t stride, int64_t n, float *dst);
} stsa_panel_rows;

/* Sixteen keys for pack_bf16 (one K panel of the bf16 blocks, eight
 * pair rows of a V block; kernels.h: stsa_bf16_tile's kb, vb): key c's
 * bf16 K and V rows (k[c] NULL: a padding key, zeros in both), their
 * element strides, the head dim D and its roundings. */
typedef struct stsa_bf16_rows {
  const void *k[16], *v[16];
  int64_t k_stride, v_stride;
  int D, D32, D_pad;
} stsa_bf16_rows;

typedef struct stsa_kernels {
  const char *name; /* of the ISA whose entries won ("portable", "avx2", ...) */
  int mr;           /* rows of q handled by one qk / pv call */
  int nr;           /* columns of a K^T or V panel (the packing width) */
  /* s[r][c] = sum_d q[r][d] * panel[d][c] for r < mr, c < nr: one K^T
   * panel. q rows are D apart, s rows ld_s apart. Also folds the row maxima
   * while the scores are in registers: rowmax[r] = max(rowmax[r], s[r][..]). */
  void (*qk)(const float *q, int D, const float *panel, float *s, int ld_s,
             float *rowmax);
  /* Online-softmax update of `rows` score rows holding n valid columns
   * (columns n..roundup(n,nr) are ignored and written as 0):
   *   m_new = max(m, max_c s), s = exp2(s - m_new), alpha = exp2(m - m_new),
   *   l = alpha * l + sum_c s, m = m_new.
   * Rows with every score -inf keep m = -inf and give p = 0, alpha = 0.
   * exp2 must give NaN for NaN and 0 for -inf: a NaN or +inf score then
   * leaves l NaN (p = exp2(NaN) or exp2(inf - inf)) whether or not the max
   * reduction kept the NaN, and l stays NaN (alpha * NaN); the tile loop
   * reads that. A NaN row never touches another row.
   * tile_max, when not NULL, holds each row's maximum over the n valid
   * columns (folded by qk), which saves a pass over the scores. */
  void (*softmax)(float *s, int ld_s, int rows, int n, float *m, float *l, float *alpha,
                  const float *tile_max);
  /* o[r][c] = alpha[r] * o[r][c] + sum_{t<n} p[r][t] * panel[t][c] for
   * r < mr, c < nr: one V panel (n rows of nr). The sum over t starts from 0
   * and is added to alpha * o at the end: each call (a kv tile) is its own
   * chain of n FMAs, so a row's rounding grows with the tile, not with every
   * key before it (summed into o directly, a 32k-token row was one chain of
   * 32k FMAs, 4-9x further from float64 than PyTorch's SDPA). */
  void (*pv)(const float *p, int ld_p, int n, const float *panel, float *o, int ld_o,
             const float *alpha);
  /* Optional (NULL where an ISA has none; stsa_qk_panels and stsa_pv_panels
   * below take either): qk and pv on two panels at once, for register files
   * that hold a 2 nr wide tile. Results are bitwise those of two calls of
   * qk or pv.
   * qk2: the K^T panels at panel0 and panel1 (anywhere), their scores at s0
   *   and s1. Each row's s0 block is stored before its s1 block, so an s1
   *   that overlaps the padding columns of s0 wins there. Each
   *   panel's row maxima fold into rowmax0 and rowmax1, which may be the
   *   same array (k-means needs each panel's own).
   * pv2: the V panels at panel and panel + panel_stride, o[r][c] for c < 2 nr. */
  void (*qk2)(const float *q, int D, const float *panel0, const float *panel1, float *s0,
              float *s1, int ld_s, float *rowmax0, float *rowmax1);
  void (*pv2)(const float *p, int ld_p, int n, const float *panel, int64_t panel_stride,
              float *o, int ld_o, const float *alpha);
  /* Optional (NULL: one pv2 per segment): pv2 over several segments of
   * keys as one sum, o = alpha o + sum over segments i and t < seg[i].n of
   * seg[i].p[r][t] * seg[i].panel[t][c] (the second panel panel_stride
   * on). A merged run of short variable tiles keeps its accumulators in
   * registers across its tiles rather than loading and storing o per tile. */
  void (*pv2_segs)(const struct stsa_pv_seg *seg, int nseg, int ld_p,
                   int64_t panel_stride, float *o, int ld_o, const float *alpha);
  /* Optional (NULL but on the amx and avx512bf16 backends): a whole kv
   * tile (FULL, or PARTIAL with its mask) for bf16 Q, K and V on bf16
   * dot-product hardware (x86/bf16_engine.h: the AMX unit or vdpbf16ps), with the
   * non-finite rules of stsa.h. Q.K^T multiplies bf16 exactly and sums in f32 like qk;
   * each f32 probability goes to P.V as t->terms bf16 terms (three: their sum is p
   * exactly, so P.V multiplies the f32 p as the f32 path does). */
  void (*full_tile_bf16)(const stsa_bf16_tile *t);
  /* Optional (NULL: one full_tile_bf16 per tile): FULL tiles whose logits
   * are finite (safe), nseg of them side by side as one tile: one softmax
   * and one P.V sum for them all; each one's whole 32-key blocks in place,
   * the rest of its keys gathered with the others' into t->kb_tails and
   * t->vb_tails (the whole blocks and the tails rounded up to 32 <= ld_s);
   * nseg <= STSA_MAX_RUN_TILES. t's kb, vb, n, mask, span and nbad are not
   * read; safe must be 1. */
  void (*full_run_bf16)(const stsa_bf16_tile *t, const stsa_bf16_seg *seg, int nseg);
  /* Optional (set with full_tile_bf16): the bf16 engine's two matrix
   * products, operands only (x86/bf16_engine.h runs its own unit's directly;
   * these are the same functions, each call on its own: profiling's fused
   * pass and SVG's estimate take them where bf16_rows_unit is set, and the
   * tests). Rows 1..32, both written (not added to):
   * bf16_scores: s[r][16 p + c] = sum over d < 32 nch of q[r][d] K_p[d][c]
   *   for r < rows, p < npanels, c < 16: q rows ld_q uint16 apart, K panel p
   *   at kb + p nch 512 (nch chunks of [16 pairs][16 keys][2]), s rows ld_s
   *   floats apart.
   * bf16_pv: c[r][16 j + e] = sum over blocks b < nblocks, terms x < terms,
   *   keys i < 32 of p[x ld_term + r ld_p + 32 b + i] V_b[i][16 j + e] for
   *   r < rows, j < npanels, e < 16; V_b: vblk[b]; c rows ld_c floats apart.
   * Products of bf16 are exact; the sums are f32 (bf16 inputs below the
   * normal range count as zero, sums below it flush to zero). */
  void (*bf16_scores)(const uint16_t *q, int ld_q, int rows, const uint16_t *kb, int nch,
                      int npanels, float *s, int ld_s);
  void (*bf16_pv)(const uint16_t *p, int ld_p, int64_t ld_term, int terms,
                  const stsa_bf16_vblock *vblk, int nblocks, int npanels, float *c,
                  int ld_c, int rows);
  /* 1 where bf16_scores and bf16_pv run on a matrix unit (AMX) that
   * outpaces the f32 micro-kernels even with two terms a probability:
   * profiling's fused pass then takes them for bf16 q, K and V
   * (rows_fused_bf16.h), and SVG's estimate scores bf16 queries on
   * bf16_scores (svg/svg_unit_scores.h). vdpbf16ps does not: three terms cost it 1.5x the
   * f32 P.V, and Wan-480p profiling under a budget took 36-42 ms on it
   * against 26-29 on the f32 pass. */
  int bf16_rows_unit;
  /* dst[i] = src[i * stride] as f32 for i < n (stride in elements): what
   * packing and q tile loads convert f16/bf16 with. */
  void (*load_row)(const void *src, int dtype, int64_t stride, int64_t n, float *dst);
  /* One panel of nr keys into the packed layouts above: kt[d][c] = K_c[d]
   * for d < D (kt: the panel), vp[j * vp_stride + c * nr + e] = V_c[j nr +
   * e], zero past D (vp: the panel's first V row). Folds max |K| and max
   * |V| as f32 bits without the sign (NaN and Inf from 0x7f800000 up) into
   * abs_bits[0] and abs_bits[1]. Row by row this was a strided store per
   * element (5% of an SVG2 call's attention at density 0.1, where packing
   * is paid for a tenth of the dense work); an ISA transposes whole blocks
   * in registers. */
  void (*pack_panel)(const stsa_panel_rows *rows, float *kt, float *vp, int64_t vp_stride,
                     uint32_t abs_bits[2]);
  /* Optional (NULL: stsa_pack_bf16_rows): sixteen keys into the bf16
   * blocks, zeros past D (to D32 in K, D_pad in V): kb is their K panel
   * (D32 / 32 chunks of [16 pairs][16 keys][2]), vb their first pair row
   * in the V block (column panel j v_panel uint16 on: [8 pairs][16
   * columns][2]). Folds max |K| and max |V| as bf16 bits without the sign
   * (NaN and Inf from 0x7f80 up) into abs_bits[0] and abs_bits[1].
   * Scalar, a key's words went 64 bytes apart one at a time (~5% of an
   * SVG2 call on bf16); the amx backend transposes them in registers. */
  void (*pack_bf16)(const stsa_bf16_rows *rows, uint16_t *kb, uint16_t *vb,
                    int64_t v_panel, uint32_t abs_bits[2]);
  /* The tails of a merged run's tiles side by side as K^T panels: tail i
   * is the first n[i] < nr columns of the K^T panel src[i] (depth rows of
   * nr floats, nr the table's); they go, in order, into the panels at dst ([ceil(sum n /
   * nr)][depth][nr], 64-byte aligned), zeros past the last. A run of
   * clusters then pads once instead of once per cluster (tile_f32.c:
   * merged_cols). */
  void (*gather_tails)(const float *const *src, const int *n, int count, int depth,
                       int nr, float *dst);
  /* Optional (NULL: none): the GEMM kernels for blocks of fewer rows, mr
   * of the half table (< this mr), nr this table's: only its mr, nr, qk,
   * qk2, pv, pv2, pv2_segs and softmax are set, and they read and write
   * only its mr rows, bitwise as the full kernels do their first ones. A q
   * tile's last block of no more rows runs them: SVG2's query clusters
   * would otherwise pad ~2% of their rows to whole register tiles. */
  const struct stsa_kernels *half;
} stsa_kernels;

/* Panels the next step of a loop over `left` panels takes: 2 where the table
 * has the two-panel entry (has_pair: qk2 or pv2 is set) and two are left. */
static inline int stsa_panel_step(int has_pair, int left) {
  return has_pair && left >= 2 ? 2 : 1;
}

/* qk over `npanels` adjacent K^T panels from kt (scores from s on), two at
 * a time where the table has qk2. */
static inline void stsa_qk_panels(const stsa_kernels *k, const float *q, int D,
                                  const float *kt, int npanels, float *s, int ld_s,
                                  float *rowmax) {
  const int64_t step = (int64_t)D * k->nr;
  int p = 0;
  if (k->qk2)
    for (; p + 2 <= npanels; p += 2)
      k->qk2(q, D, kt + p * step, kt + (p + 1) * step, s + p * k->nr, s + (p + 1) * k->nr,
             ld_s, rowmax, rowmax);
  for (; p < npanels; p++)
    k->qk(q, D, kt + p * step, s + p * k->nr, ld_s, rowmax);
}

/* pv over `npanels` V panels panel_stride floats apart from vp (output
 * columns from o on), two at a time where the table has pv2. */
static inline void stsa_pv_panels(const stsa_kernels *k, const float *p, int ld_p, int n,
                                  const float *vp, int64_t panel_stride, int npanels,
                                  float *o, int ld_o, const float *alpha) {
  int j = 0;
  if (k->pv2)
    for (; j + 2 <= npanels; j += 2)
      k->pv2(p, ld_p, n, vp + j * panel_stride, panel_stride, o + j * k->nr, ld_o, alpha);
  for (; j < npanels; j++)
    k->pv(p, ld_p, n, vp + j * panel_stride, o + j * k->nr, ld_o, alpha);
}

/* The portable pack_panel: row by row through rows->load_row. An ISA's
 * pack_panel hands it the rows it does not take (strided ones). */
void stsa_pack_panel_rows(const stsa_panel_rows *rows, float *kt, float *vp,
                          int64_t vp_stride, uint32_t abs_bits[2]);

/* The portable pack_bf16 (any strides). */
void stsa_pack_bf16_rows(const stsa_bf16_rows *rows, uint16_t *kb, uint16_t *vb,
                         int64_t v_panel, uint32_t abs_bits[2]);

/* The portable gather_tails. */
void stsa_gather_tails(const float *const *src, const int *n, int count, int depth,
                       int nr, float *dst);

/* max |x_i| over n floats as f32 bits without the sign: an integer max,
 * which vectorises and does not depend on order; NaN and Inf give bits
 * from 0x7f800000 up. */
uint32_t stsa_abs_max_bits(const float *x, int n);

/* pack_panel's fold: abs_bits[0] and [1] take max |K| and max |V| (bits). */
static inline void stsa_fold_abs_bits(uint32_t abs_bits[2], uint32_t k_bits,
                                      uint32_t v_bits) {
  abs_bits[0] = k_bits > abs_bits[0] ? k_bits : abs_bits[0];
  abs_bits[1] = v_bits > abs_bits[1] ? v_bits : abs_bits[1];
}

/* Fills every entry with the portable C versions (always available). */
void stsa_kernels_init_portable(stsa_kernels *t);
#if defined(__x86_64__) || defined(__i386__)
/* AVX2+FMA+F16C entries; only after stsa_cpu_runs_avx2(). */
void stsa_kernels_override_avx2(stsa_kernels *t);
/* AVX-512F entries (12 x 16 register tile); only after stsa_cpu_runs_avx512(). */
void stsa_kernels_override_avx512(stsa_kernels *t);
/* The AVX-512 entries plus full_tile_bf16 on AMX; only after stsa_cpu_runs_amx(). */
void stsa_kernels_override_amx(stsa_kernels *t);
/* The AVX-512 entries plus full_tile_bf16 on vdpbf16ps; only after
 * stsa_cpu_runs_avx512bf16() (core/cpu.h). */
void stsa_kernels_override_avx512bf16(stsa_kernels *t);
#endif
#if defined(__aarch64__)
/* NEON entries (NEON is part of the AArch64 base ISA). */
void stsa_kernels_override_neon(stsa_kernels *t);
#endif

#endif
