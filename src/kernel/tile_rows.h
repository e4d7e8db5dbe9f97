/*
 * tile_rows.h — a q tile's rows in and out: q rows loaded and scaled for
 * the f32 engine or as bf16 rows for the bf16 one (scattered rows of a
 * permuted tile prefetched ahead), and the finished rows normalised and
 * stored in the caller's layout with the non-finite rules of stsa.h.
 */
#ifndef STSA_KERNEL_TILE_ROWS_H
#define STSA_KERNEL_TILE_ROWS_H

#include <stdint.h>

#include "kernel/problem.h"
#include "kernel/tile_scratch.h"

/* Rows [q0, q0 + rows) of (b, h) (tokens q_rows[..] when q_rows is set)
 * into qbuf times qscale, padding rows up to rows_pad zero. Returns max
 * |q'| over the scaled tile (+inf for NaN/Inf). */
float stsa_load_q_tile(const stsa_attn_problem *pb, float qscale, int64_t b, int64_t h,
                       int64_t q0, int rows, int rows_pad, const int64_t *q_rows,
                       float *qbuf);
/* The same rows as bf16 times bf16_q_pow2 2^-k_exp, D32 long, into qb (the
 * A operand of full_tile_bf16); returns what stsa_load_q_tile returns. */
float stsa_load_q_tile_bf16(const stsa_attn_problem *pb, int k_exp, int64_t b, int64_t h,
                            int64_t q0, int rows, int rows_pad, const int64_t *q_rows,
                            uint16_t *qb);
/* The q tile's finished rows from sc (o, m, l), normalised, V's scaling
 * 2^v_exp undone, written to out (and lse) at their tokens. */
void stsa_store_q_tile(const stsa_attn_problem *pb, int64_t b, int64_t h, int64_t q0,
                       int rows, const int64_t *q_rows, int v_exp,
                       const stsa_tile_scratch *sc);

#endif
