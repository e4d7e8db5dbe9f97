/*
 * rows_fused_bf16.h — the fused profiling pass's two products (rows_fused.h)
 * on the table's bf16 multiply unit (kernels.h: bf16_scores, bf16_pv; the
 * AMX tiles or vdpbf16ps), for bf16 q, K and V: the kv tile is packed into
 * bf16 blocks (half the bytes of the f32 panels, transposed in registers)
 * and the scores run on bf16 products, which are exact. Each probability
 * enters P.V as two bf16 terms whose sum is within 2^-16 p of the f32 p, so
 * an output row is within 2^-16 max |V| of what the f32 form computes (a
 * bound the profile's errors, at budgets of 0.01 and up, never feel; a
 * third term, exact, cost the pass 15% more at Wan 480p). A pass of dense
 * rows alone takes the bf16 engine's FULL tile instead (rows_fused.c:
 * dense_tile_engine), whose two terms are within 2^-18 p.
 */
#ifndef STSA_KERNEL_ROWS_FUSED_BF16_H
#define STSA_KERNEL_ROWS_FUSED_BF16_H

#include <stdint.h>

#include "kernel/problem.h"

/* Terms each probability enters P.V as (within 2^-16 p of p). */
enum { STSA_ROWS_BF16_TERMS = 2 };

/* s[r][c] (rows r < rows_pad, ld_s apart) = the log2-unit logit of bf16 q
 * row r (qb, D32 apart, times pb->bf16_q_pow2) against key c < n of the kv
 * tile's K blocks kb (columns past n are not for reading: the softmax and
 * stsa_rows_bf16_pv take n and [lo, hi) within it). */
void stsa_rows_bf16_scores(const stsa_attn_problem *pb, const uint16_t *qb, int rows_pad,
                           const uint16_t *kb, int n, float *s, int ld_s);

/* c[r][0 .. D_pad) (ld_c apart) = sum over keys j in [lo, hi) of p[r][j] V[j]
 * for r < rows (any count: 32 at a time), V the kv tile's blocks vb
 * (v_panel uint16 between column panels); p's columns outside [lo, hi) are
 * not read. terms: scratch of STSA_ROWS_BF16_TERMS x 32 x (hi rounded up to
 * 32) uint16. */
void stsa_rows_bf16_pv(const stsa_attn_problem *pb, const float *p, int ld_p, int rows,
                       int lo, int hi, const uint16_t *vb, int64_t v_panel,
                       uint16_t *terms, float *c, int ld_c);

#endif
