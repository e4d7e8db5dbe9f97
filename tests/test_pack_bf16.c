/*
 * test_pack_bf16.c — packing sixteen keys into the bf16 blocks (kernels.h:
 * pack_bf16): the portable stsa_pack_bf16_rows and every table's entry
 * against the layout written out element by element, on head dims that do
 * and do not fill the 32-wide depth chunks and 16-wide column panels,
 * padding keys (NULL rows), strided rows, and NaN/Inf for the folded
 * magnitudes. Blocks sit between guard bytes, and the V block's other pair
 * rows, the gaps between column panels and a panel past the last keep their
 * sentinel.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/convert.h"
#include "kernel/kernels.h"
#include "kernel_util.h"
#include "testutil.h"

enum { SENTINEL = 0xABCD, MAX_D = 160 };

typedef struct case_rows {
  uint16_t *k, *v; /* [16][stride * MAX_D] */
  int64_t stride;
  stsa_bf16_rows rows;
} case_rows;

/* Sixteen keys of head dim D, `stride` elements apart, keys in `missing`
 * (bit c) padding; `special` puts NaN in K and Inf in V at one key. */
static case_rows make_rows(tu_rng *rng, int D, int64_t stride, unsigned missing,
                           int special) {
  case_rows c;
  c.stride = stride;
  const size_t n = (size_t)(16 * stride * MAX_D);
  c.k = malloc(n * sizeof(uint16_t));
  c.v = malloc(n * sizeof(uint16_t));
  if (!c.k || !c.v)
    abort();
  for (size_t i = 0; i < n; i++) {
    c.k[i] = stsa_f32_to_bf16((float)tu_rng_normal(rng));
    c.v[i] = stsa_f32_to_bf16((float)(3.0 * tu_rng_normal(rng)));
  }
  if (special) {
    c.k[6 * stride * MAX_D + (D - 1) * stride] = 0x7fc0; /* NaN */
    c.v[9 * stride * MAX_D] = 0xff80;                    /* -Inf */
  }
  c.rows = (stsa_bf16_rows){.k_stride = stride,
                            .v_stride = stride,
                            .D = D,
                            .D32 = (D + 31) / 32 * 32,
                            .D_pad = (D + 15) / 16 * 16};
  for (int key = 0; key < 16; key++) {
    const int gone = (missing >> key) & 1u;
    c.rows.k[key] = gone ? NULL : c.k + key * stride * MAX_D;
    c.rows.v[key] = gone ? NULL : c.v + key * stride * MAX_D;
  }
  return c;
}

static uint16_t elem(const void *row, int64_t stride, int d, int D) {
  return row && d < D ? ((const uint16_t *)row)[d * stride] : 0;
}

/* The blocks by their definition (kernels.h: stsa_bf16_tile's kb, vb):
 * K chunk d / 32, pair row (d % 32) / 2, key c, word d % 2; V column panel
 * j, pair row i (keys 2 i, 2 i + 1), column e, word: the key's parity. */
static void expected(const case_rows *c, uint16_t *kb, uint16_t *vb, int64_t v_panel,
                     uint32_t abs_bits[2]) {
  const stsa_bf16_rows *r = &c->rows;
  for (int key = 0; key < 16; key++)
    for (int d = 0; d < r->D32; d++) {
      const uint16_t x = elem(r->k[key], c->stride, d, r->D);
      kb[(d / 32) * 512 + (d % 32) / 2 * 32 + key * 2 + d % 2] = x;
      abs_bits[0] = (x & 0x7fffu) > abs_bits[0] ? x & 0x7fffu : abs_bits[0];
    }
  for (int key = 0; key < 16; key++)
    for (int col = 0; col < r->D_pad; col++) {
      const uint16_t x = elem(r->v[key], c->stride, col, r->D);
      vb[(col / 16) * v_panel + key / 2 * 32 + (col % 16) * 2 + key % 2] = x;
      abs_bits[1] = (x & 0x7fffu) > abs_bits[1] ? x & 0x7fffu : abs_bits[1];
    }
}

typedef void (*pack_fn)(const stsa_bf16_rows *, uint16_t *, uint16_t *, int64_t,
                        uint32_t *);

static void check_pack(pack_fn pack, const char *name, tu_rng *rng, int D, int64_t stride,
                       unsigned missing, int special) {
  case_rows c = make_rows(rng, D, stride, missing, special);
  const int chunks = c.rows.D32 / 32, panels = c.rows.D_pad / 16;
  /* a V block's panels 512 words of its own plus a gap apart; these keys
   * take the pair rows from 8 on (the block's second half) */
  const int64_t v_panel = 512 + 64, at = 8 * 32;
  /* one more V panel than the keys have: a store past the last must show */
  const size_t k_words = (size_t)chunks * 512, v_words = (size_t)((panels + 1) * v_panel);
  uint16_t *kb = tu_guarded_alloc(k_words * 2), *vb = tu_guarded_alloc(v_words * 2);
  uint16_t *kw = malloc(k_words * 2), *vw = malloc(v_words * 2);
  if (!kw || !vw)
    abort();
  for (size_t i = 0; i < k_words; i++)
    kb[i] = kw[i] = SENTINEL;
  for (size_t i = 0; i < v_words; i++)
    vb[i] = vw[i] = SENTINEL;
  uint32_t got[2] = {3, 0x7f00}, want[2] = {3, 0x7f00}; /* folded into, not reset */
  pack(&c.rows, kb, vb + at, v_panel, got);
  expected(&c, kw, vw + at, v_panel, want);
  CHECK(memcmp(kb, kw, k_words * 2) == 0, "[%s] D %d stride %lld missing %#x: K blocks",
        name, D, (long long)stride, missing);
  CHECK(memcmp(vb, vw, v_words * 2) == 0,
        "[%s] D %d stride %lld missing %#x: V blocks (or words outside them)", name, D,
        (long long)stride, missing);
  CHECK(got[0] == want[0] && got[1] == want[1],
        "[%s] D %d: magnitudes %#x %#x, want %#x %#x", name, D, got[0], got[1], want[0],
        want[1]);
  CHECK(!special || (got[0] >= 0x7f80u && got[1] >= 0x7f80u),
        "[%s] D %d: NaN in K or Inf in V not folded", name, D);
  CHECK(tu_guard_ok(kb) && tu_guard_ok(vb), "[%s] D %d: guard bytes", name, D);
  tu_guarded_free(kb), tu_guarded_free(vb);
  free(kw), free(vw), free(c.k), free(c.v);
}

static void check_all(pack_fn pack, const char *name, tu_rng *rng) {
  const int dims[] = {8, 40, 64, 72, 80, 128, 160};
  for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
    check_pack(pack, name, rng, dims[i], 1, 0, 0);
    check_pack(pack, name, rng, dims[i], 1, 0xF000u, 0); /* the span's last keys */
    check_pack(pack, name, rng, dims[i], 1, 0x0421u, 1); /* scattered, NaN/Inf */
    check_pack(pack, name, rng, dims[i], 3, 0x8000u, 0); /* strided rows */
  }
  check_pack(pack, name, rng, 64, 1, 0xFFFFu, 0); /* padding only */
}

int main(void) {
  tu_rng rng = {77};
  check_all(stsa_pack_bf16_rows, "portable", &rng);
  int with_entry = 0;
  stsa_backend backends[TU_MAX_BACKENDS];
  for (int bi = 0, nb = tu_tiled_backends(backends); bi < nb; bi++) {
    const stsa_backend_choice choice = tu_choose_backend(backends[bi]);
    if (!choice.kern.pack_bf16)
      continue;
    with_entry++;
    check_all(choice.kern.pack_bf16, stsa_backend_name(backends[bi]), &rng);
  }
  /* the amx and avx512bf16 tables have it: a build that lost it would
   * otherwise pass here by testing nothing */
  CHECK(with_entry > 0 || (!stsa_backend_available(STSA_BACKEND_AMX) &&
                           !stsa_backend_available(STSA_BACKEND_AVX512BF16)),
        "the amx and avx512bf16 backends have no pack_bf16");
  return tu_finish("test_pack_bf16");
}
