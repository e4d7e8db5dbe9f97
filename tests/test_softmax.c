/*
 * test_softmax.c — every backend table's online-softmax step (kernels.h:
 * softmax) against exp2 in double: the probabilities of scores from 0 down
 * past the f32 range, each within the exp2 bound its backend documents
 * (exp2_poly.h: 2.2e-7, 1.9e-7 for the AVX-512 floor reduction), exactly
 * 1 at the row's maximum and exactly 0 below -126; padding columns written
 * 0; and the running statistics (m, l, alpha) of a first tile and of a
 * second one that raises the maximum by a power of two. Rows sit between
 * guard bytes.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernel/kernels.h"
#include "kernel_util.h"
#include "testutil.h"

/* Relative error allowed against exp2 in double: the worst exp2 of any
 * backend (2.2e-7, exp2_poly.h) with a little room. */
#define EXP2_TOL 2.5e-7

/* Row r's scores: 0 at column r % n (the maximum), and down from there to
 * about -140 across the row (exactly representable values, so s - m is
 * exact), with -126 itself, just below it, and -inf among them. */
static float score_at(int r, int c, int n) {
  if (c == r % n)
    return 0.0f;
  if (c == (r + 1) % n)
    return -126.0f;
  if (c == (r + 2) % n)
    return -126.0f - 0x1p-16f;
  if (c == (r + 3) % n)
    return -INFINITY;
  return -(float)(((c * 37 + r * 11) % (n + 1)) * (140.0 / (n + 1))) -
         0x1p-8f * (float)(c % 7);
}

static void check_table(const stsa_kernels *k, const char *name, int n) {
  const int rows = k->mr, nr = k->nr, n_pad = (n + nr - 1) / nr * nr;
  const int ld = n_pad + 8;
  const size_t bytes = sizeof(float) * (size_t)rows * (size_t)ld;
  float *s = tu_guarded_alloc(bytes);
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < ld; c++)
      s[r * ld + c] = c < n ? score_at(r, c, n) : 777.0f; /* padding: ignored */
  float m[16], l[16], alpha[16];
  for (int r = 0; r < rows; r++)
    m[r] = -INFINITY, l[r] = 0.0f, alpha[r] = 12345.0f;
  k->softmax(s, ld, rows, n, m, l, alpha, NULL);

  double worst = 0;
  int exact_top = 1, zero_below = 1, padding_zero = 1, stats = 1, past_pad = 1;
  for (int r = 0; r < rows; r++) {
    double sum = 0;
    for (int c = 0; c < n; c++) {
      const double x = score_at(r, c, n), p = s[r * ld + c];
      sum += p;
      if (x == 0.0)
        exact_top &= p == 1.0;
      else if (x < -126.0)
        zero_below &= p == 0.0;
      else {
        const double e = fabs(p / exp2(x) - 1.0);
        worst = e > worst ? e : worst;
      }
    }
    for (int c = n; c < n_pad; c++)
      padding_zero &= s[r * ld + c] == 0.0f;
    for (int c = n_pad; c < ld; c++)
      past_pad &= s[r * ld + c] == 777.0f;
    stats &= m[r] == 0.0f && alpha[r] == 0.0f && fabs(l[r] - sum) <= 1e-6 * sum;
  }
  CHECK(worst <= EXP2_TOL, "[%s] n %d: exp2 relative error %.3g > %.3g", name, n, worst,
        EXP2_TOL);
  CHECK(exact_top, "[%s] n %d: the row maximum's probability is not exactly 1", name, n);
  CHECK(zero_below, "[%s] n %d: a score below -126 (or -inf) gave a nonzero p", name, n);
  CHECK(padding_zero, "[%s] n %d: padding columns not written 0", name, n);
  CHECK(past_pad, "[%s] n %d: wrote past the padded row", name, n);
  CHECK(stats, "[%s] n %d: first tile's m, alpha or l wrong", name, n);

  /* A second tile whose maximum is 3 above: alpha = 2^-3 exactly, the old
   * sum rescaled, m moves to 3. */
  float l_first[16];
  memcpy(l_first, l, sizeof l_first);
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < n; c++)
      s[r * ld + c] = c == 0 ? 3.0f : -1.0f;
  k->softmax(s, ld, rows, n, m, l, alpha, NULL);
  int second = 1;
  for (int r = 0; r < rows; r++) {
    const double want = l_first[r] * 0.125 + 1.0 + (n - 1) * exp2(-4.0);
    second &= m[r] == 3.0f && alpha[r] == 0.125f && fabs(l[r] - want) <= 1e-6 * want;
  }
  CHECK(second, "[%s] n %d: second tile's m, alpha or l wrong", name, n);
  CHECK(tu_guard_ok(s), "[%s] n %d: guard bytes", name, n);
  tu_guarded_free(s);
}

int main(void) {
  stsa_backend backends[TU_MAX_BACKENDS];
  for (int bi = 0, nb = tu_tiled_backends(backends); bi < nb; bi++) {
    const stsa_backend_choice choice = tu_choose_backend(backends[bi]);
    const stsa_kernels *k = &choice.kern;
    const char *name = stsa_backend_name(backends[bi]);
    const int lengths[] = {16, 37, 200, 256, 301};
    for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++)
      check_table(k, name, lengths[i]);
    if (k->half)
      check_table(k->half, name, 99);
  }
  return tu_finish("test_softmax");
}
