/*
 * amx_emulation.h — the AMX tile instructions microkernels_amx.c uses, in C,
 * for builds configured with STSA_AMX_EMULATION=ON (a test build, never a
 * release: ~1000x slower than the tile unit).
 *
 * Why: most machines that build and test stsa have no AMX (AMD Zen, older
 * Xeons), so the amx backend's own arithmetic — scores from the tile
 * multiply, the lazy online softmax, the bf16 terms of P, the runs of
 * clusters — would run only where a tester happens to have a Sapphire
 * Rapids. With this header the same source runs on any CPU with the rest of
 * its ISA (AVX-512F/DQ/BW and AVX512-BF16: Zen 4 and later, Cooper Lake and
 * later), and every test of the amx backend runs there (stsa_cpu_runs_amx
 * asks for that ISA instead of AMX in such a build).
 *
 * What it follows (Intel SDM, TDPBF16PS and the tile loads/stores):
 *   - eight tiles of up to 16 rows x 64 bytes, shaped by LDTILECFG (palette
 *     1: rows and bytes per row of each tile);
 *   - a load fills the configured rows and bytes and zeroes the rest; a
 *     store writes only the configured rows and bytes;
 *   - TDPBF16PS: C[m][n] += a[m][2k] b[k][2n] + a[m][2k+1] b[k][2n+1] for
 *     every pair k in order, the products exact; bf16 inputs below the
 *     normal range count as zero and sums below it are flushed to zero (the
 *     unit ignores MXCSR). The SDM's pseudocode rounds after each product,
 *     but the unit is more exact than that: rounded so, the bound test_amx
 *     measured on a Sapphire Rapids (3 terms no further from the reference
 *     than the f32 path) fails at D = 128. Here a pair's sum is rounded
 *     once, which meets it.
 * The tile state is the calling thread's, as the hardware's is: a
 * thread-local copy here, the only mutable state with static storage in
 * such a build, which the library's own builds never contain.
 *
 * Include after <immintrin.h>: it replaces the intrinsics' macros and
 * shadows the inline functions of the same names.
 */
#ifndef STSA_KERNEL_X86_AMX_EMULATION_H
#define STSA_KERNEL_X86_AMX_EMULATION_H

#include <math.h>
#include <stdint.h>
#include <string.h>

enum { EMU_TILES = 8, EMU_ROWS = 16, EMU_ROW_BYTES = 64 };

typedef struct emu_tiles {
  uint8_t rows[EMU_TILES];
  uint16_t colsb[EMU_TILES];
  _Alignas(64) uint8_t data[EMU_TILES][EMU_ROWS][EMU_ROW_BYTES];
} emu_tiles;

static _Thread_local emu_tiles emu_state;

/* LDTILECFG's memory operand, palette 1: 16 bytes of header, then the bytes
 * per row of tiles 0-15 (16-bit each), then their rows (8-bit each). */
static inline void emu_loadconfig(const void *config) {
  const uint8_t *c = config;
  memset(&emu_state, 0, sizeof emu_state);
  for (int t = 0; t < EMU_TILES; t++) {
    uint16_t colsb;
    memcpy(&colsb, c + 16 + 2 * t, sizeof colsb);
    emu_state.colsb[t] = colsb;
    emu_state.rows[t] = c[48 + t];
  }
}

static inline void emu_release(void) { memset(&emu_state, 0, sizeof emu_state); }

static inline void emu_zero(int t) {
  memset(emu_state.data[t], 0, sizeof emu_state.data[t]);
}

static inline void emu_loadd(int t, const void *base, long stride) {
  emu_zero(t);
  for (int r = 0; r < emu_state.rows[t]; r++)
    memcpy(emu_state.data[t][r], (const char *)base + (long)r * stride,
           emu_state.colsb[t]);
}

static inline void emu_stored(int t, void *base, long stride) {
  for (int r = 0; r < emu_state.rows[t]; r++)
    memcpy((char *)base + (long)r * stride, emu_state.data[t][r], emu_state.colsb[t]);
}

/* A bf16 element as f32, zero when it is below the normal range. */
static inline float emu_bf16(const uint8_t *at) {
  uint16_t h;
  memcpy(&h, at, sizeof h);
  if ((h & 0x7f80u) == 0)
    h &= 0x8000u;
  const uint32_t bits = (uint32_t)h << 16;
  float x;
  memcpy(&x, &bits, sizeof x);
  return x;
}

/* x, or a zero of its sign when it is below f32's normal range. */
static inline float emu_flush(float x) {
  return fpclassify(x) == FP_SUBNORMAL ? copysignf(0.0f, x) : x;
}

static inline void emu_dpbf16ps(int c, int a, int b) {
  const int m_rows = emu_state.rows[c], n_cols = emu_state.colsb[c] / 4,
            pairs = emu_state.colsb[a] / 4;
  for (int m = 0; m < m_rows; m++)
    for (int n = 0; n < n_cols; n++) {
      float acc;
      memcpy(&acc, &emu_state.data[c][m][4 * n], sizeof acc);
      for (int k = 0; k < pairs; k++) {
        /* both products are exact (8 x 8 significant bits), and so is their
         * sum in double but for far apart exponents */
        const double pair = (double)emu_bf16(&emu_state.data[a][m][4 * k]) *
                                emu_bf16(&emu_state.data[b][k][4 * n]) +
                            (double)emu_bf16(&emu_state.data[a][m][4 * k + 2]) *
                                emu_bf16(&emu_state.data[b][k][4 * n + 2]);
        acc = emu_flush((float)(acc + pair));
      }
      memcpy(&emu_state.data[c][m][4 * n], &acc, sizeof acc);
    }
}

#undef _tile_loadd
#undef _tile_stored
#undef _tile_zero
#undef _tile_dpbf16ps
#define _tile_loadconfig(config) emu_loadconfig(config)
#define _tile_release() emu_release()
#define _tile_zero(t) emu_zero(t)
#define _tile_loadd(t, base, stride) emu_loadd(t, base, stride)
#define _tile_stored(t, base, stride) emu_stored(t, base, stride)
#define _tile_dpbf16ps(c, a, b) emu_dpbf16ps(c, a, b)

#endif
