/*
 * microkernels_amx.c — the amx backend: the AVX-512 table plus the bf16
 * tile engine (bf16_engine.h: full_tile_bf16, full_run_bf16, pack_bf16)
 * with the AMX tile-multiply unit as its multiply unit. Compiled with
 * -mamx-tile -mamx-bf16 -mavx512bw -mavx512bf16 (and the AVX-512 file's
 * flags); only reached after stsa_cpu_runs_amx(), which also asks Linux for
 * the tile state.
 *
 * A pass's up to 32 rows are two tile blocks of up to 16, so that every K
 * or V block loaded into a tile register serves both:
 *   scores: C tiles of 16 x 16 f32 scores, two row blocks by two K panels,
 *     summed over depth chunks of 32 bf16 (A: 16 q rows x 32, B: one 1 KB
 *     K block);
 *   P.V: C tiles of 16 x 16 outputs, two row blocks by two V column
 *     panels, summed over key chunks of 32 and the terms; a run's tiles
 *     stay in the tile registers across their blocks.
 * One tile multiply is 16 x 16 x 32 multiply-adds, 8192 where an AVX-512
 * FMA does 16: the softmax, not the multiplies, is the larger part of the
 * time.
 *
 * x86-64 only: CMake compiles this file only for x86 targets.
 */
#if defined(__x86_64__)
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#ifdef STSA_AMX_EMULATION
#include "amx_emulation.h" /* this folder: the tile unit in C, for tests */
#endif
#include "bf16_engine.h" /* this folder */

/* Tile registers, by number (the intrinsics paste it into the instruction,
 * so it must be a literal): tmm0-3 accumulate C[block][panel] (0: block 0
 * panel 0, 1: block 0 panel 1, 2: block 1 panel 0, 3: block 1 panel 1),
 * tmm4 and tmm5 hold A operands (block 0, block 1: a q chunk or a term of
 * p), tmm6 and tmm7 B operands (panel 0, panel 1: K or V blocks). */

/* The LDTILECFG memory operand (palette 1). */
typedef struct tile_config {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} tile_config;

/* A pass's two row blocks: rows0 (1..16) and rows1 (0..16; 0: no second
 * block, whose tiles then stay unconfigured and unused). Every tile holds
 * 64-byte rows; B tiles 16 of them (32 bf16 of depth as 16 pairs). */
static void unit_configure(int rows0, int rows1) {
  tile_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  const int rows[8] = {rows0, rows0, rows1, rows1, rows0, rows1, 16, 16};
  for (int i = 0; i < 8; i++) {
    cfg.rows[i] = (uint8_t)rows[i];
    cfg.colsb[i] = rows[i] ? 64 : 0;
  }
  /* GCC 12 does not count the 64 bytes LDTILECFG reads as a use of cfg and
   * may drop the stores above (it did, once the function was inlined
   * into another caller): the barrier makes them happen first. */
  __asm__ volatile("" : : "r"(&cfg) : "memory");
  _tile_loadconfig(&cfg);
}

static void unit_release(void) { _tile_release(); }

/* bf16_engine.h: unit_scores. */
static void unit_scores(const uint16_t *q, int ld_q, int rows, const uint16_t *kb,
                        int nch, int npanels, float *s, int ld_s) {
  const int two_blocks = rows > BLOCK;
  const uint16_t *q0 = q, *q1 = q0 + (int64_t)BLOCK * ld_q;
  const int q_bytes = ld_q * 2, s_bytes = ld_s * 4;
  float *s0 = s, *s1 = s0 + (int64_t)BLOCK * ld_s;
  for (int p = 0; p < npanels; p += 2) {
    const int two_panels = p + 1 < npanels;
    const uint16_t *k0 = kb + (int64_t)p * nch * 512, *k1 = k0 + (int64_t)nch * 512;
    _tile_zero(0);
    _tile_zero(1);
    if (two_blocks) {
      _tile_zero(2);
      _tile_zero(3);
    }
    for (int c = 0; c < nch; c++) {
      _tile_loadd(4, q0 + c * 32, q_bytes);
      _tile_loadd(6, k0 + c * 512, 64);
      _tile_dpbf16ps(0, 4, 6);
      if (two_panels) {
        _tile_loadd(7, k1 + c * 512, 64);
        _tile_dpbf16ps(1, 4, 7);
      }
      if (two_blocks) {
        _tile_loadd(5, q1 + c * 32, q_bytes);
        _tile_dpbf16ps(2, 5, 6);
        if (two_panels)
          _tile_dpbf16ps(3, 5, 7);
      }
    }
    _tile_stored(0, s0 + p * NR, s_bytes);
    if (two_panels)
      _tile_stored(1, s0 + (p + 1) * NR, s_bytes);
    if (two_blocks) {
      _tile_stored(2, s1 + p * NR, s_bytes);
      if (two_panels)
        _tile_stored(3, s1 + (p + 1) * NR, s_bytes);
    }
  }
}

/* bf16_engine.h: unit_pv. Every column panel pair's sums go to c: reading
 * them back right after the tile stores (to add them to o) held the tile
 * multiplies of the next pair behind the stores (~12% of P.V's time). */
static void unit_pv(const uint16_t *p, int ld_p, int64_t ld_term, int terms,
                    const stsa_bf16_vblock *vblk, int nblocks, int npanels, float *c,
                    int ld_c, int rows) {
  const int two_blocks = rows > BLOCK;
  const int p_bytes = ld_p * 2, c_bytes = ld_c * 4;
  const int64_t block = (int64_t)BLOCK * ld_p;
  for (int j = 0; j < npanels; j += 2) {
    const int two_panels = j + 1 < npanels;
    _tile_zero(0);
    _tile_zero(1);
    if (two_blocks) {
      _tile_zero(2);
      _tile_zero(3);
    }
    for (int b = 0; b < nblocks; b++) {
      const uint16_t *v0 = vblk[b].at + j * vblk[b].panel, *v1 = v0 + vblk[b].panel;
      _tile_loadd(6, v0, 64);
      if (two_panels)
        _tile_loadd(7, v1, 64);
      for (int x = 0; x < terms; x++) { /* hi, mid, lo */
        const uint16_t *a = p + x * ld_term + b * 32;
        _tile_loadd(4, a, p_bytes);
        _tile_dpbf16ps(0, 4, 6);
        if (two_panels)
          _tile_dpbf16ps(1, 4, 7);
        if (two_blocks) {
          _tile_loadd(5, a + block, p_bytes);
          _tile_dpbf16ps(2, 5, 6);
          if (two_panels)
            _tile_dpbf16ps(3, 5, 7);
        }
      }
    }
    float *c0 = c + j * NR, *c1 = c0 + (int64_t)BLOCK * ld_c;
    _tile_stored(0, c0, c_bytes);
    if (two_panels)
      _tile_stored(1, c0 + NR, c_bytes);
    if (two_blocks) {
      _tile_stored(2, c1, c_bytes);
      if (two_panels)
        _tile_stored(3, c1 + NR, c_bytes);
    }
  }
}

void stsa_kernels_override_amx(stsa_kernels *t) {
  engine_override(t, "amx");
  t->bf16_rows_unit = 1;
}
#endif /* x86-64 */
