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
 *    an estimate of level 0 alone gives, bit for bit; the wider ones come
 *    as shares in [0, 1] (their logs taken on demand); a wider window never
 *    loses more (per query, each kind); a window over every frame and a
 *    band over every position lose nothing (-inf); every share <= 1;
 *  - the shares against a double-precision reference, on heads whose pooled
 *    centroids are their keys (two keys a cell at most: each its own half;
 *    keys that repeat along the frames: each band's one key), on the
 *    best kernel table and the portable one (the scores run on their qk
 *    micro-kernels), head dims 64, 80 and 128, 56 video tokens (no multiple
 *    of mr), two real text tokens and a padding one, head 1 of 2, q and k
 *    in f32, f16 and bf16.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/convert.h"
#include "kernel/dispatch.h"
#include "svg/bound.h"
#include "svg/profile.h"
#include "svg/splitmix.h"
#include "svg/strata.h"
#include "svg/svg_strata.h"
#include "testutil.h"

#define EXPECT(cond) CHECK(cond, "%s", #cond)

/* The best kernel table this machine runs (the one calls use). */
static stsa_backend_choice best;
static const stsa_kernels *kern = &best.kern;

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
  EXPECT(stsa_svg_dropped_mass(&keep, kern, &tq, &tk, 0, 0, sp, tm) == 0);
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
    EXPECT(stsa_svg_bound_draw(&keep, kern, &tq, &tk, 0, 0, STSA_SVG_STRATA_BOTH, R, t,
                               &got) == 0);
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
    EXPECT(stsa_svg_bound_draw(&keep, kern, &tq, &tk, 0, 0, which, R, 5, &a) == 0);
    EXPECT(stsa_svg_bound_draw(&keep, kern, &tq, &tk, 0, 0, which, R, 5, &b) == 0);
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
  EXPECT(stsa_svg_dropped_mass(&level0, kern, &tq, &tk, 0, 0, one, one + L) == 0);
  EXPECT(stsa_svg_dropped_mass(&levels, kern, &tq, &tk, 0, 0, all, all + 3 * L) == 0);
  double *sp = all, *tm = all + 3 * L;
  EXPECT(memcmp(one, sp, sizeof(double) * L) == 0);
  EXPECT(memcmp(one + L, tm, sizeof(double) * L) == 0);
  /* the wider levels come as shares in [0, 1]; their logs on demand */
  int outside = 0;
  for (int i = L; i < 3 * L; i++)
    outside += !(sp[i] >= 0 && sp[i] <= 1 && tm[i] >= 0 && tm[i] <= 1);
  EXPECT(outside == 0);
  stsa_svg_share_logs(sp + L, 2 * L);
  stsa_svg_share_logs(tm + L, 2 * L);
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

/* The reference heads: 7 frames of 2 x 4 positions (four parts a frame,
 * two keys each; a band a position), text at the end. */
enum { RF = 7, RHP = 2, RWP = 4, RP = RHP * RWP, RL = RF * RP, RTEXT = 3, RREAL = 2 };
enum { RN = RL + RTEXT, RH = 2, RMAXD = 128 };

/* f32 x as dtype's nearest and back (the value a tensor of dtype holds). */
static float as_dtype(float x, stsa_dtype dtype) {
  return dtype == STSA_BF16  ? stsa_bf16_to_f32(stsa_f32_to_bf16(x))
         : dtype == STSA_F16 ? stsa_f16_to_f32(stsa_f32_to_f16(x))
                             : x;
}

/* x[RN][RH][dim] (f32 values, as dtype holds them) into buf as dtype. */
static stsa_tensor reference_tensor(const float *x, int dim, stsa_dtype dtype,
                                    void *buf) {
  for (int i = 0; i < RN * RH * dim; i++) {
    if (dtype == STSA_F32)
      ((float *)buf)[i] = x[i];
    else
      ((uint16_t *)buf)[i] =
          dtype == STSA_BF16 ? stsa_f32_to_bf16(x[i]) : stsa_f32_to_f16(x[i]);
  }
  return stsa_tensor_bshd(buf, dtype, 1, RN, RH, dim);
}

/* The mass below position x of bands band[RP] a position wide. */
static double ref_below(const double *band, double x) {
  double sum = 0;
  for (int t = 0; t < RP; t++)
    sum += band[t] * fmin(1, fmax(0, x - t));
  return sum;
}

/* Query i's shares lost to a frame window of +-w and a position-major
 * band of +-bw, sink frames 1, in double from head 1 of q and k
 * [RN][RH][dim]: sp[0], and tm[0] where the keys repeat along the frames. */
static void ref_shares(const float *q, const float *k, int dim, int i, int64_t w,
                       int64_t bw, double *sp, double *tm) {
  enum { SINK = 1 };
  double e[RN], top = -INFINITY;
  for (int j = 0; j < RL + RREAL; j++) {
    double dot = 0;
    for (int d = 0; d < dim; d++)
      dot += (double)q[(i * RH + 1) * dim + d] * k[(j * RH + 1) * dim + d];
    e[j] = dot / sqrt((double)dim);
    top = e[j] > top ? e[j] : top;
  }
  double frames = 0, lost = 0, band[RP] = {0}, sinks = 0, text = 0;
  const int f = i / RP, p = i % RP;
  for (int j = 0; j < RL + RREAL; j++) {
    const double x = exp(e[j] - top);
    const int g = j / RP;
    if (j >= RL) {
      text += x;
      continue;
    }
    frames += x;
    lost += g >= SINK && (g < f - w || g > f + w) ? x : 0;
    sinks += g < SINK ? x : 0;
    band[j % RP] += g >= SINK ? x : 0;
  }
  *sp = lost / (frames + text);
  const double jp = (double)(p * RF + f), all = ref_below(band, RP);
  const double lost_tm = ref_below(band, (jp - (double)bw) / RF) + all -
                         ref_below(band, (jp + (double)bw) / RF + 1);
  *tm = lost_tm / (all + sinks + text);
}

/* |a - b| within rel of b (both 0: equal). */
static int close_to(double a, double b, double rel) { return fabs(a - b) <= rel * b; }

static int check_reference(const stsa_kernels *table, int dim, stsa_dtype dtype,
                           int repeat_keys) {
  static float q[RN * RH * RMAXD], k[RN * RH * RMAXD];
  static uint16_t qb[RN * RH * RMAXD], kb[RN * RH * RMAXD];
  static float qf[RN * RH * RMAXD], kf[RN * RH * RMAXD];
  static double est[2 * 2 * RL];
  uint64_t s = 7 + (uint64_t)dim;
  for (int i = 0; i < RN * RH * dim; i++)
    q[i] = as_dtype((float)(1.5 * gauss(&s)), dtype);
  /* a repeated key: frame f's key at position p is frame 0's */
  for (int i = 0; i < RN * RH * dim; i++) {
    const int token = i / (RH * dim), rest = i % (RH * dim);
    k[i] = token < RL && repeat_keys && token >= RP
               ? k[(token % RP) * RH * dim + rest]
               : as_dtype((float)(1.5 * gauss(&s)), dtype);
  }
  void *qbuf = dtype == STSA_F32 ? (void *)qf : qb,
       *kbuf = dtype == STSA_F32 ? (void *)kf : kb;
  const stsa_tensor tq = reference_tensor(q, dim, dtype, qbuf),
                    tk = reference_tensor(k, dim, dtype, kbuf);
  const stsa_geometry g = {RF, RHP, RWP, RTEXT, RREAL, STSA_TEXT_SUFFIX};
  const stsa_svg_keep keep = {&g, 1, 2, {1, 2}, {2 * RF + 3, 3 * RF + 1}};
  if (stsa_svg_dropped_mass(&keep, table, &tq, &tk, 0, 1, est, est + 2 * RL) != 0)
    return 0;
  int ok = 1;
  for (int l = 0; l < 2; l++)
    for (int i = 0; i < RL; i++) {
      double sp, tm;
      ref_shares(q, k, dim, i, keep.frame_window[l], keep.band[l], &sp, &tm);
      /* level 0 as logs, level 1 as shares */
      const double x_sp = est[l * RL + i], x_tm = est[2 * RL + l * RL + i];
      const double got_sp = l ? x_sp : exp(x_sp), got_tm = l ? x_tm : exp(x_tm);
      ok &= close_to(got_sp, sp, 1e-4);
      ok &= !repeat_keys || close_to(got_tm, tm, 1e-4);
    }
  return ok;
}

static void test_reference(void) {
  stsa_kernels portable;
  stsa_kernels_init_portable(&portable);
  const stsa_kernels *tables[2] = {kern, &portable};
  const int dims[3] = {64, 80, 128};
  const stsa_dtype dtypes[3] = {STSA_F32, STSA_F16, STSA_BF16};
  int bad = 0, runs = 0;
  for (int t = 0; t < 2; t++)
    for (int di = 0; di < 3; di++)
      for (int ty = 0; ty < 3; ty++)
        for (int repeat = 0; repeat < 2; repeat++) {
          const int ok = check_reference(tables[t], dims[di], dtypes[ty], repeat);
          CHECK(ok, "shares off the reference: %s table, D %d, dtype %d, %s keys",
                tables[t]->name, dims[di], (int)dtypes[ty], repeat ? "repeated" : "own");
          bad += !ok;
          runs++;
        }
  printf("estimate vs double reference: %d of %d configurations within 1e-4\n",
         runs - bad, runs);
}

int main(void) {
  stsa_errbuf err;
  if (stsa_backend_choose(STSA_BACKEND_AUTO, &best, &err) != STSA_OK) {
    printf("no kernel table: %s\n", err.text);
    return 1;
  }
  test_object_coverage();
  test_draw_shape();
  test_levels();
  test_reference();
  return tu_finish("test_svg_strata");
}
