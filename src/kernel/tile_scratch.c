/* tile_scratch.c — see tile_scratch.h. */
#include "kernel/tile_scratch.h"

#include <stdlib.h>
#include <string.h>

#include "kernel/tile_values.h"

enum { SCRATCH_SLOTS = 18 };

/* Floats of each scratch slot, in the order of scratch_slots(). */
static void scratch_sizes(const stsa_attn_problem *pb, size_t sizes[SCRATCH_SLOTS]) {
  size_t nq = (size_t)pb->q_tile, nkv = (size_t)pb->kv_stride;
  const int bf16 = pb->bf16_tiles;
  const size_t pass = STSA_BF16_PASS_ROWS; /* full_tile_bf16's rows at once */
  const size_t s[SCRATCH_SLOTS] = {
      stsa_align64(nq * (size_t)pb->D),
      stsa_align64((bf16 && nq < pass ? pass : nq) * nkv),
      stsa_align64(nq * (size_t)pb->D_pad), stsa_align64(nq), stsa_align64(nq),
      stsa_align64(nq), stsa_align64(nq), stsa_align64((size_t)pb->D_pad),
      stsa_align64(nkv * (size_t)pb->D_pad), stsa_align64(nkv),
      stsa_align64((nq * nkv + 3) / 4), stsa_align64(2 * (nq / (size_t)pb->mr)),
      stsa_align64((size_t)pb->mr), bf16 ? stsa_align64(nq * (size_t)pb->D32 / 2) : 0,
      bf16 ? stsa_align64(pass * nkv * 3 / 2) : 0,
      bf16 ? stsa_align64(pass * (size_t)pb->D_pad) : 0,
      bf16 ? stsa_align64(nkv * (size_t)pb->D_pad / 2) : 0,
      /* a merged run's tails: f32 K^T and V panels, or bf16 K and V blocks */
      pb->kv_tiles_max ? stsa_align64(bf16 ? nkv * (size_t)(pb->D32 + pb->D_pad) / 2
                                           : nkv * (size_t)(pb->D + pb->D_pad))
                       : 0};
  memcpy(sizes, s, sizeof s);
}

size_t stsa_tile_scratch_bytes(const stsa_attn_problem *pb) {
  size_t sizes[SCRATCH_SLOTS], total = 0;
  scratch_sizes(pb, sizes);
  for (int i = 0; i < SCRATCH_SLOTS; i++)
    total += sizes[i];
  return total * sizeof(float);
}

void stsa_tile_scratch_at(const stsa_attn_problem *pb, void *mem, stsa_tile_scratch *sc) {
  size_t sizes[SCRATCH_SLOTS];
  scratch_sizes(pb, sizes);
  float *v_safe, *bad_keys, *kept, *span, *qb, *pbf, *vb_safe;
  float **slots[SCRATCH_SLOTS] = {
      &sc->q,        &sc->s,   &sc->o,  &sc->m,    &sc->l,   &sc->alpha,
      &sc->tile_max, &sc->row, &v_safe, &bad_keys, &kept,    &span,
      &sc->ones,     &qb,      &pbf,    &sc->cbuf, &vb_safe, &sc->kt_tails};
  float *p = mem;
  for (int i = 0; i < SCRATCH_SLOTS; i++) {
    *slots[i] = p;
    p += sizes[i];
  }
  sc->v_safe = v_safe;
  sc->bad_keys = (int32_t *)(void *)bad_keys;
  sc->kept = (uint8_t *)kept;
  sc->span = (int32_t *)(void *)span;
  sc->qb = (uint16_t *)(void *)qb;
  sc->pbf = (uint16_t *)(void *)pbf;
  sc->vb_safe = (uint16_t *)(void *)vb_safe;
  const int tails = pb->kv_tiles_max != 0;
  sc->vp_tails = tails && !pb->bf16_tiles
                     ? sc->kt_tails + (size_t)pb->kv_stride * (size_t)pb->D
                     : NULL;
  sc->kb_tails = tails && pb->bf16_tiles ? (uint16_t *)(void *)sc->kt_tails : NULL;
  sc->vb_tails =
      sc->kb_tails ? sc->kb_tails + (size_t)pb->kv_stride * (size_t)pb->D32 : NULL;
  if (pb->bf16_tiles)
    sc->kt_tails = NULL;
  for (int r = 0; r < pb->mr; r++)
    sc->ones[r] = 1.0f;
  sc->q_max = 0;
  sc->block_ = NULL;
}

int stsa_tile_scratch_alloc(const stsa_attn_problem *pb, stsa_tile_scratch *sc) {
  void *mem = aligned_alloc(64, stsa_tile_scratch_bytes(pb));
  if (!mem)
    return -1;
  stsa_tile_scratch_at(pb, mem, sc);
  sc->block_ = mem;
  return 0;
}

void stsa_tile_scratch_free(stsa_tile_scratch *sc) {
  free(sc->block_);
  sc->block_ = NULL;
}
