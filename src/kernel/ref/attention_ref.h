/*
 * attention_ref.h — the plain reference: double accumulation, one row at a
 * time, no packing and no micro-kernels. It is the STSA_BACKEND=ref path,
 * run by the same scheduler and fed the same kv lists as the tiled kernel
 * (schedule.h), so it checks the tiled kernel on exactly the pairs a plan
 * keeps; the tests' own oracles check the plans.
 */
#ifndef STSA_KERNEL_REF_ATTENTION_REF_H
#define STSA_KERNEL_REF_ATTENTION_REF_H

#include <stddef.h>
#include <stdint.h>

#include "kernel/tile_loop.h"

/* Bytes of the scratch one q tile needs (a multiple of 64). */
size_t stsa_ref_scratch_bytes(const stsa_attn_problem *pb);

/* q tile qt of (b, h) over the listed kv tiles (NULL: all, FULL), on the
 * variable tiles of `lay` (NULL: fixed), written
 * like stsa_run_q_tile: rows that keep nothing give 0 and lse = -inf; NaN
 * and Inf follow stsa.h ("Non-finite inputs"). */
void stsa_ref_q_tile(const stsa_attn_problem *pb, int64_t b, int64_t h, int64_t qt,
                     const stsa_kv_list *list, const stsa_tile_layout *lay,
                     void *scratch);

#endif
