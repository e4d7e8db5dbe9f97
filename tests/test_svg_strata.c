/*
 * test_svg_strata.c — the rows of SVG's error bound drawn where its error
 * arises (svg/svg_strata.h).
 *
 *  - a head whose spatial error sits in 2 of 512 rows: a small object in
 *    frame 6 whose queries match its keys in frames 2 and 3, which the frame
 *    window drops, while every other query attends its own frame. One row
 *    in each of 64 equal runs (the position strata, what SVG drew before)
 *    lands on the object in about a quarter of the draws, and the bound of
 *    the other draws reads the background: it covers the true error in
 *    fewer than half of 400 draws. Geometric strata on each query's
 *    estimated dropped mass (pooled keys) isolate the object's rows and
 *    cover it in >= 95% of them; the estimate ranks the object's rows first;
 *  - the draw: distinct rows, ascending, video tokens, each stratum's pop
 *    its members, deterministic in its seed;
 *  - the budget's wider levels, estimated in the same pass: level 0 is what
 *    an estimate of level 0 alone gives, bit for bit; a wider window never
 *    loses more (per query, each kind); a window over every frame and a
 *    band over every position lose nothing (-inf); every share <= 1.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "svg/bound.h"
#include "svg/profile.h"
#include "svg/splitmix.h"
#include "svg/strata.h"
#include "svg/svg_strata.h"
#include "testutil.h"

#define EXPECT(cond) CHECK(cond, "%s", #cond)

enum { F = 8, HP = 8, WP = 8, P = HP * WP, L = F * P, D = 16, R = 64, TRIALS = 400 };
enum { OBJ_FRAME = 6, OBJ_POS = 19 }; /* the object: positions 19 and 20 of frame 6 */

static double gauss(uint64_t *s) {
  const double u = ((double)(stsa_splitmix64(s) >> 11) + 0.5) * 0x1.0p-53,
               w = (double)(stsa_splitmix64(s) >> 11) * 0x1.0p-53;
  return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * w);
}

static void unit(uint64_t *s, double *u) {
  double n = 0;
  for (int d = 0; d < D; d++) {
    u[d] = gauss(s);
    n += u[d] * u[d];
  }
  for (int d = 0; d < D; d++)
    u[d] /= sqrt(n);
}

static int is_object(int p) { return p == OBJ_POS || p == OBJ_POS + 1; }

/* q, k, v [L][D]: each frame a code its queries and keys share (a logit
 * of about 6 within the frame), the object's queries and its keys in
 * frames 2 and 3 a shared direction (a logit of about 16). */
static void make_head(float *q, float *k, float *v) {
  uint64_t s = 31;
  double code[F][D], obj[D];
  for (int f = 0; f < F; f++)
    unit(&s, code[f]);
  unit(&s, obj);
  const double a = sqrt(6.0 * sqrt((double)D)), c = sqrt(16.0 * sqrt((double)D));
  for (int i = 0; i < L; i++) {
    const int f = i / P, p = i % P;
    for (int d = 0; d < D; d++) {
      q[i * D + d] = (float)(0.5 * gauss(&s) + a * code[f][d]);
      k[i * D + d] = (float)(0.5 * gauss(&s) + a * code[f][d]);
      v[i * D + d] = (float)gauss(&s);
      if (is_object(p) && f == OBJ_FRAME)
        q[i * D + d] += (float)(c * obj[d]);
      if (is_object(p) && (f == 2 || f == 3))
        k[i * D + d] += (float)(c * obj[d]);
    }
  }
}

/* Each row's squared error e[L] under a frame window of +-1 with one sink
 * frame, and its dense energy E[L], in double. */
static void row_errors(const float *q, const float *k, const float *v, double *e,
                       double *E) {
  static double w[L];
  for (int i = 0; i < L; i++) {
    const int f = i / P;
    double top = -INFINITY;
    for (int j = 0; j < L; j++) {
      double dot = 0;
      for (int d = 0; d < D; d++)
        dot += (double)q[i * D + d] * k[j * D + d];
      w[j] = dot / sqrt((double)D);
      top = w[j] > top ? w[j] : top;
    }
    double od[D] = {0}, os[D] = {0}, zd = 0, zs = 0;
    for (int j = 0; j < L; j++) {
      const int fj = j / P, kept = fj == 0 || abs(fj - f) <= 1;
      const double x = exp(w[j] - top);
      zd += x;
      zs += kept ? x : 0;
      for (int d = 0; d < D; d++) {
        od[d] += x * v[j * D + d];
        os[d] += kept ? x * v[j * D + d] : 0;
      }
    }
    e[i] = E[i] = 0;
    for (int d = 0; d < D; d++) {
      e[i] += (os[d] / zs - od[d] / zd) * (os[d] / zs - od[d] / zd);
      E[i] += (od[d] / zd) * (od[d] / zd);
    }
  }
}

static double bound_of(const int64_t *rows, const int64_t *group, const int64_t *pop,
                       int64_t groups, const double *e, const double *E) {
  double err[R], energy[R], scratch[5 * R];
  for (int r = 0; r < R; r++) {
    err[r] = e[rows[r]];
    energy[r] = E[rows[r]];
  }
  const stsa_err_sample smp = {R, group, pop, groups};
  return stsa_err_bound(&smp, err, energy, scratch, NULL);
}

static void test_object_coverage(void) {
  static float q[L * D], k[L * D], v[L * D];
  static double e[L], E[L], sp[L], tm[L];
  make_head(q, k, v);
  row_errors(q, k, v, e, E);
  double te = 0, tE = 0, obj_e = 0;
  for (int i = 0; i < L; i++) {
    te += e[i];
    tE += E[i];
    obj_e += is_object(i % P) && i / P == OBJ_FRAME ? e[i] : 0;
  }
  const double truth = sqrt(te / tE);
  EXPECT(obj_e > 0.5 * te); /* the population: the object holds the error */
  const stsa_geometry g = {F, HP, WP, 0, 0, STSA_TEXT_NONE};
  stsa_tensor tq = stsa_tensor_bshd(q, STSA_F32, 1, L, 1, D),
              tk = stsa_tensor_bshd(k, STSA_F32, 1, L, 1, D);
  const stsa_svg_keep keep = {&g, 1, 1, {1}, {L}};
  EXPECT(stsa_svg_dropped_mass(&keep, &tq, &tk, 0, 0, sp, tm) == 0);
  int above = 0; /* background rows the estimate ranks above the object's */
  const double obj_score =
      fmin(sp[OBJ_FRAME * P + OBJ_POS], sp[OBJ_FRAME * P + OBJ_POS + 1]);
  for (int i = 0; i < L; i++)
    above += !(is_object(i % P) && i / P == OBJ_FRAME) && sp[i] >= obj_score;
  EXPECT(above == 0);
  int64_t rows[R], group[R], pop[R], old_pop[R];
  int64_t old_group[R], old_groups = 0;
  stsa_svg_strata(&g, R, old_group, old_pop, &old_groups);
  int by_runs = 0, by_estimate = 0;
  for (uint64_t t = 1; t <= TRIALS; t++) {
    stsa_svg_sample_rows(&g, R, t, 0, 0, 0, rows);
    by_runs += bound_of(rows, old_group, old_pop, old_groups, e, E) >= truth;
    stsa_strata got = {rows, group, pop, 0};
    EXPECT(stsa_svg_bound_draw(&keep, &tq, &tk, 0, 0, STSA_SVG_STRATA_BOTH, R, t, &got) ==
           0);
    by_estimate += bound_of(rows, group, pop, got.groups, e, E) >= truth;
  }
  printf("object in 2 of %d rows (%.0f%% of the error): bound >= truth %.4f in %d "
         "(position strata) and %d (estimated dropped mass) of %d draws\n",
         L, 100 * obj_e / te, truth, by_runs, by_estimate, TRIALS);
  EXPECT(by_runs < TRIALS / 2);
  EXPECT(by_estimate >= TRIALS * 95 / 100);
}

static void test_draw_shape(void) {
  static float q[L * D], k[L * D], v[L * D];
  make_head(q, k, v);
  const stsa_geometry g = {F, HP, WP, 0, 0, STSA_TEXT_NONE};
  stsa_tensor tq = stsa_tensor_bshd(q, STSA_F32, 1, L, 1, D),
              tk = stsa_tensor_bshd(k, STSA_F32, 1, L, 1, D);
  const stsa_svg_keep keep = {&g, 1, 1, {1}, {3 * F}};
  for (int which = 0; which < 3; which++) {
    int64_t rows[R], group[R], pop[R], again[R], g2[R], p2[R];
    stsa_strata a = {rows, group, pop, 0}, b = {again, g2, p2, 0};
    EXPECT(stsa_svg_bound_draw(&keep, &tq, &tk, 0, 0, which, R, 5, &a) == 0);
    EXPECT(stsa_svg_bound_draw(&keep, &tq, &tk, 0, 0, which, R, 5, &b) == 0);
    EXPECT(memcmp(rows, again, sizeof rows) == 0 && a.groups <= stsa_svg_bound_strata(R));
    int64_t members = 0;
    for (int64_t s = 0; s < a.groups; s++)
      members += pop[s];
    EXPECT(members == L);
    for (int r = 0; r < R; r++) {
      EXPECT(rows[r] >= 0 && rows[r] < L && (r == 0 || rows[r] > rows[r - 1]));
      EXPECT(group[r] >= 0 && group[r] < a.groups && pop[group[r]] > 0);
    }
  }
}

static void test_levels(void) {
  static float q[L * D], k[L * D], v[L * D];
  static double one[2 * L], all[2 * 3 * L];
  make_head(q, k, v);
  const stsa_geometry g = {F, HP, WP, 0, 0, STSA_TEXT_NONE};
  stsa_tensor tq = stsa_tensor_bshd(q, STSA_F32, 1, L, 1, D),
              tk = stsa_tensor_bshd(k, STSA_F32, 1, L, 1, D);
  const stsa_svg_keep level0 = {&g, 1, 1, {1}, {3 * F}},
                      levels = {&g, 1, 3, {1, 2, F}, {3 * F, 9 * F, L}};
  EXPECT(stsa_svg_dropped_mass(&level0, &tq, &tk, 0, 0, one, one + L) == 0);
  EXPECT(stsa_svg_dropped_mass(&levels, &tq, &tk, 0, 0, all, all + 3 * L) == 0);
  const double *sp = all, *tm = all + 3 * L;
  EXPECT(memcmp(one, sp, sizeof(double) * L) == 0);
  EXPECT(memcmp(one + L, tm, sizeof(double) * L) == 0);
  int lost = 0, wider_loses_more = 0, full_loses = 0, above_one = 0;
  for (int i = 0; i < L; i++) {
    for (int l = 0; l < 2; l++) {
      lost += sp[l * L + i] > -INFINITY && tm[l * L + i] > -INFINITY;
      above_one += sp[l * L + i] > 1e-9 || tm[l * L + i] > 1e-9;
    }
    /* ln of the shares, within 1e-7 each */
    wider_loses_more += sp[L + i] > sp[i] + 1e-6 || tm[L + i] > tm[i] + 1e-6;
    full_loses += sp[2 * L + i] > -INFINITY || tm[2 * L + i] > -INFINITY;
  }
  EXPECT(lost > L); /* the narrow levels do lose mass */
  EXPECT(wider_loses_more == 0 && full_loses == 0 && above_one == 0);
}

int main(void) {
  test_object_coverage();
  test_draw_shape();
  test_levels();
  return tu_finish("test_svg_strata");
}
