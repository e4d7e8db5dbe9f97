/*
 * intervals.c — kept-key intervals of one query row, per mask kind.
 *
 * Every generator writes into an empty list after reserving an upper bound
 * of the intervals it can produce, then appends without further checks.
 * Video tokens sit in the block [v0, v0 + L) in every order:
 *   NATIVE          f*P + p
 *   POSITION_MAJOR  p*F + f
 *   SINK_FIRST      p for frame 0, then P + p*(F-1) + (f-1)
 */
#include "mask/intervals.h"

#include <stdlib.h>

/* Larger than any sequence, small enough that adding two never overflows. */
#define BIG ((int64_t)1 << 42)

#define RESERVE(out, k)                                                                  \
  do {                                                                                   \
    if (stsa_ivec_reserve((out), (k)))                                                   \
      return -1;                                                                         \
  } while (0)

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

int stsa_ivec_reserve(stsa_ivec *iv, int64_t more) {
  if (iv->n + more <= iv->cap)
    return 0;
  int64_t cap = iv->cap > 0 ? iv->cap : 16;
  while (cap < iv->n + more)
    cap *= 2;
  int64_t *v = realloc(iv->v, (size_t)cap * 2 * sizeof *v);
  if (!v)
    return -1;
  iv->v = v;
  iv->cap = cap;
  return 0;
}

void stsa_ivec_free(stsa_ivec *iv) {
  free(iv->v);
  iv->v = NULL;
  iv->n = iv->cap = 0;
}

void stsa_iv_gen_init(stsa_iv_gen *gen, stsa_order kv_order, int64_t s_kv,
                      const int64_t *kv_native) {
  *gen = (stsa_iv_gen){.kv_order = kv_order, .s_kv = s_kv, .kv_native = kv_native};
}

static void runs_free(stsa_iv_runs *r) {
  free(r->start);
  free(r->label);
  *r = (stsa_iv_runs){0};
}

void stsa_iv_gen_free(stsa_iv_gen *gen) {
  for (int i = 0; i < 2 * STSA_MASK_MAX_DEPTH; i++)
    stsa_ivec_free(&gen->level[i]);
  for (int i = 0; i < STSA_IV_RUN_SLOTS; i++)
    runs_free(&gen->runs[i]);
}

/* The fallback: every key asked, in kv order. */
static int gen_scan(const stsa_iv_gen *g, const stsa_mask *m, int64_t qi,
                    stsa_ivec *out) {
  RESERVE(out, g->s_kv / 2 + 1);
  for (int64_t pos = 0; pos < g->s_kv; pos++) {
    int64_t j = g->kv_native ? g->kv_native[pos] : pos;
    if (stsa_mask_keep(m, qi, j))
      stsa_ivec_put(out, pos, pos + 1);
  }
  return 0;
}

/* full, causal, local, chunked: one interval of native key indices. */
static int gen_index(const stsa_iv_gen *g, const stsa_mask *m, int64_t qi,
                     stsa_ivec *out) {
  int64_t lo = 0, hi = g->s_kv;
  switch (m->kind) {
  case STSA_MK_CAUSAL:
    hi = min64(hi, qi + max64(-BIG, min64(m->a, BIG)) + 1);
    break;
  case STSA_MK_LOCAL:
    if (m->a != STSA_UNBOUNDED)
      lo = qi - min64(m->a, BIG);
    if (m->b != STSA_UNBOUNDED)
      hi = min64(hi, qi + min64(m->b, BIG) + 1);
    break;
  case STSA_MK_CHUNKED:
    lo = qi / m->a * m->a;
    hi = min64(hi, qi + 1);
    break;
  default:
    break;
  }
  RESERVE(out, 1);
  stsa_ivec_put(out, max64(lo, 0), hi);
  return 0;
}

static int gen_frame_window(stsa_order order, const stsa_geo *G, int64_t w,
                            const stsa_tok *t, stsa_ivec *out) {
  const int64_t F = G->F, P = G->P, v0 = G->v0;
  w = min64(w, F);
  const int64_t flo = max64(0, t->f - w), fhi = min64(F - 1, t->f + w);
  if (order == STSA_ORDER_NATIVE || (flo == 0 && fhi == F - 1)) {
    RESERVE(out, 1);
    stsa_ivec_put(out, v0 + flo * P, v0 + (fhi + 1) * P);
  } else if (order == STSA_ORDER_POSITION_MAJOR) {
    RESERVE(out, P);
    for (int64_t p = 0; p < P; p++)
      stsa_ivec_put(out, v0 + p * F + flo, v0 + p * F + fhi + 1);
  } else {
    RESERVE(out, P + 1);
    if (flo == 0)
      stsa_ivec_put(out, v0, v0 + P);
    const int64_t a = max64(flo, 1);
    for (int64_t p = 0; a <= fhi && p < P; p++) {
      const int64_t base = v0 + P + p * (F - 1);
      stsa_ivec_put(out, base + a - 1, base + fhi);
    }
  }
  return 0;
}

/* Keys whose position-major index is in [a, b]. In SINK_FIRST the frame-0
 * ones form the first block and the rest stay one run: dropping frame 0 from
 * the position-major sequence keeps the order of everything else. */
static int gen_position_band(stsa_order order, const stsa_geo *G, int64_t w,
                             const stsa_tok *t, stsa_ivec *out) {
  const int64_t F = G->F, P = G->P, L = G->L, v0 = G->v0;
  const int64_t j = t->p * F + t->f;
  w = min64(w, L);
  const int64_t a = max64(0, j - w), b = min64(L - 1, j + w);
  if (order == STSA_ORDER_POSITION_MAJOR) {
    RESERVE(out, 1);
    stsa_ivec_put(out, v0 + a, v0 + b + 1);
  } else if (order == STSA_ORDER_NATIVE) {
    RESERVE(out, F);
    for (int64_t f = 0; f < F && f <= b; f++) {
      const int64_t plo = a <= f ? 0 : (a - f + F - 1) / F;
      const int64_t phi = min64((b - f) / F, P - 1);
      stsa_ivec_put(out, v0 + f * P + plo, v0 + f * P + phi + 1);
    }
  } else {
    RESERVE(out, 2);
    /* ceil(x / F) position-major indices below x are frame 0's */
    const int64_t c_a = (a + F - 1) / F, c_b1 = (b + F) / F;
    stsa_ivec_put(out, v0 + c_a, v0 + min64(b / F, P - 1) + 1);
    stsa_ivec_put(out, v0 + P + (a - c_a), v0 + P + (b + 1 - c_b1));
  }
  return 0;
}

static int gen_spatial_window(stsa_order order, const stsa_geo *G, const stsa_mask *m,
                              const stsa_tok *t, stsa_ivec *out) {
  const int64_t F = G->F, P = G->P, W = G->Wp, v0 = G->v0;
  const int64_t a = min64(m->a, G->Hp), b = min64(m->b, W);
  const int64_t ylo = max64(0, t->y - a), yhi = min64(G->Hp - 1, t->y + a);
  const int64_t xlo = max64(0, t->x - b), xhi = min64(W - 1, t->x + b);
  const int64_t rows = yhi - ylo + 1;
  if (order == STSA_ORDER_NATIVE) {
    RESERVE(out, F * rows);
    for (int64_t f = 0; f < F; f++)
      for (int64_t y = ylo; y <= yhi; y++)
        stsa_ivec_put(out, v0 + f * P + y * W + xlo, v0 + f * P + y * W + xhi + 1);
  } else if (order == STSA_ORDER_POSITION_MAJOR) {
    RESERVE(out, rows);
    for (int64_t y = ylo; y <= yhi; y++)
      stsa_ivec_put(out, v0 + (y * W + xlo) * F, v0 + (y * W + xhi + 1) * F);
  } else {
    RESERVE(out, 2 * rows);
    for (int64_t y = ylo; y <= yhi; y++)
      stsa_ivec_put(out, v0 + y * W + xlo, v0 + y * W + xhi + 1);
    for (int64_t y = ylo; y <= yhi; y++)
      stsa_ivec_put(out, v0 + P + (y * W + xlo) * (F - 1),
                    v0 + P + (y * W + xhi + 1) * (F - 1));
  }
  return 0;
}

static int gen_sink_frames(stsa_order order, const stsa_geo *G, int64_t n,
                           const stsa_tok *t, stsa_ivec *out) {
  const int64_t F = G->F, P = G->P, v0 = G->v0;
  if (t->kind != STSA_TOK_VIDEO && t->kind != STSA_TOK_TEXT_REAL)
    return 0;
  n = min64(n, F);
  if (order == STSA_ORDER_NATIVE || n == F) {
    RESERVE(out, 1);
    stsa_ivec_put(out, v0, v0 + n * P);
  } else if (order == STSA_ORDER_POSITION_MAJOR) {
    RESERVE(out, P);
    for (int64_t p = 0; p < P; p++)
      stsa_ivec_put(out, v0 + p * F, v0 + p * F + n);
  } else {
    RESERVE(out, P + 1);
    stsa_ivec_put(out, v0, v0 + P);
    for (int64_t p = 0; n > 1 && p < P; p++)
      stsa_ivec_put(out, v0 + P + p * (F - 1), v0 + P + p * (F - 1) + n - 1);
  }
  return 0;
}

/* Text never moves, and the video block is contiguous in every order. */
static int gen_text(const stsa_geo *G, const stsa_tok *t, stsa_ivec *out) {
  const int64_t real_lo = G->t0, real_hi = G->t0 + G->R;
  RESERVE(out, 2);
  switch (t->kind) {
  case STSA_TOK_TEXT_PAD:
    stsa_ivec_put(out, real_hi, G->t0 + G->C);
    break;
  case STSA_TOK_TEXT_REAL:
    if (real_lo < G->v0) { /* prefix */
      stsa_ivec_put(out, real_lo, real_hi);
      stsa_ivec_put(out, G->v0, G->v0 + G->L);
    } else {
      stsa_ivec_put(out, G->v0, G->v0 + G->L);
      stsa_ivec_put(out, real_lo, real_hi);
    }
    break;
  case STSA_TOK_VIDEO:
    stsa_ivec_put(out, real_lo, real_hi);
    break;
  default:
    break;
  }
  return 0;
}

static int gen_geo(const stsa_iv_gen *g, const stsa_mask *m, int64_t qi, stsa_ivec *out) {
  const stsa_tok t = stsa_geo_token(&m->geo, qi);
  if (m->kind == STSA_MK_TEXT)
    return gen_text(&m->geo, &t, out);
  if (m->kind == STSA_MK_SINK_FRAMES)
    return gen_sink_frames(g->kv_order, &m->geo, m->a, &t, out);
  if (t.kind != STSA_TOK_VIDEO)
    return 0; /* the other video masks keep video x video pairs only */
  switch (m->kind) {
  case STSA_MK_FRAME_WINDOW:
    return gen_frame_window(g->kv_order, &m->geo, m->a, &t, out);
  case STSA_MK_POSITION_BAND:
    return gen_position_band(g->kv_order, &m->geo, m->a, &t, out);
  default:
    return gen_spatial_window(g->kv_order, &m->geo, m, &t, out);
  }
}

/* ---- cluster masks ------------------------------------------------------ */
/* Label of the key at kv position pos (-1 past the node's keys). */
static int32_t key_label(const stsa_iv_gen *g, const stsa_mask *m, int64_t pos) {
  const int64_t j = g->kv_native ? g->kv_native[pos] : pos;
  return j < m->s_kv ? m->k_seg[j] : -1;
}

/* Cuts m's keys into runs in g's kv order (two passes: count, then fill). */
static int cut_runs(const stsa_iv_gen *g, const stsa_mask *m, stsa_iv_runs *r) {
  int64_t n = 0;
  for (int64_t pos = 0; pos < g->s_kv; pos++)
    n += pos == 0 || key_label(g, m, pos) != key_label(g, m, pos - 1);
  r->start = malloc(sizeof *r->start * (size_t)(n + 1));
  r->label = malloc(sizeof *r->label * (size_t)(n > 0 ? n : 1));
  if (!r->start || !r->label) {
    runs_free(r);
    return -1;
  }
  r->n = 0;
  for (int64_t pos = 0; pos < g->s_kv; pos++) {
    const int32_t lab = key_label(g, m, pos);
    if (r->n == 0 || lab != r->label[r->n - 1]) {
      r->start[r->n] = pos;
      r->label[r->n++] = lab;
    }
  }
  r->start[r->n] = g->s_kv;
  r->mask = m;
  return 0;
}

/* The runs of m, cut on first use; NULL when out of memory. */
static const stsa_iv_runs *runs_of(stsa_iv_gen *g, const stsa_mask *m) {
  for (int i = 0; i < STSA_IV_RUN_SLOTS; i++)
    if (g->runs[i].mask == m)
      return &g->runs[i];
  stsa_iv_runs *r = &g->runs[g->next_slot];
  g->next_slot = (g->next_slot + 1) % STSA_IV_RUN_SLOTS;
  runs_free(r);
  return cut_runs(g, m, r) ? NULL : r;
}

/* The runs whose label the query's cluster keeps; kept runs are separated by
 * at least one other, so they make at most ceil(n / 2) intervals. */
static int gen_clusters(stsa_iv_gen *g, const stsa_mask *m, int64_t qi, stsa_ivec *out) {
  const int32_t ql = qi < m->s_q ? m->q_seg[qi] : -1;
  if (ql < 0)
    return 0;
  const stsa_iv_runs *r = runs_of(g, m);
  if (!r)
    return -1;
  RESERVE(out, r->n / 2 + 1);
  for (int64_t k = 0; k < r->n; k++)
    if (stsa_clusters_keep(m, ql, r->label[k]))
      stsa_ivec_put(out, r->start[k], r->start[k + 1]);
  return 0;
}

static int merge_and(const stsa_ivec *a, const stsa_ivec *b, stsa_ivec *out) {
  RESERVE(out, a->n + b->n);
  for (int64_t i = 0, j = 0; i < a->n && j < b->n;) {
    const int64_t ahi = a->v[2 * i + 1], bhi = b->v[2 * j + 1];
    stsa_ivec_put(out, max64(a->v[2 * i], b->v[2 * j]), min64(ahi, bhi));
    if (ahi < bhi)
      i++;
    else
      j++;
  }
  return 0;
}

static int merge_or(const stsa_ivec *a, const stsa_ivec *b, stsa_ivec *out) {
  RESERVE(out, a->n + b->n);
  for (int64_t i = 0, j = 0; i < a->n || j < b->n;) {
    if (j >= b->n || (i < a->n && a->v[2 * i] <= b->v[2 * j])) {
      stsa_ivec_put(out, a->v[2 * i], a->v[2 * i + 1]);
      i++;
    } else {
      stsa_ivec_put(out, b->v[2 * j], b->v[2 * j + 1]);
      j++;
    }
  }
  return 0;
}

static int gen_node(stsa_iv_gen *g, const stsa_mask *m, int level, int64_t qi,
                    stsa_ivec *out) {
  out->n = 0;
  switch (m->kind) {
  case STSA_MK_AND:
  case STSA_MK_OR: {
    stsa_ivec *a = &g->level[2 * level], *b = &g->level[2 * level + 1];
    if (gen_node(g, m->lhs, level + 1, qi, a))
      return -1;
    if (m->kind == STSA_MK_AND && a->n == 0)
      return 0;
    if (gen_node(g, m->rhs, level + 1, qi, b))
      return -1;
    return m->kind == STSA_MK_AND ? merge_and(a, b, out) : merge_or(a, b, out);
  }
  case STSA_MK_FULL:
    return gen_index(g, m, qi, out);
  case STSA_MK_CAUSAL:
  case STSA_MK_LOCAL:
  case STSA_MK_CHUNKED:
    return g->kv_native ? gen_scan(g, m, qi, out) : gen_index(g, m, qi, out);
  case STSA_MK_SEGMENTS:
  case STSA_MK_DENSE:
    return gen_scan(g, m, qi, out);
  case STSA_MK_CLUSTERS:
    return gen_clusters(g, m, qi, out);
  default:
    return gen_geo(g, m, qi, out);
  }
}

stsa_status stsa_iv_row(stsa_iv_gen *gen, const stsa_mask *mask, int64_t qi,
                        stsa_ivec *out) {
  return gen_node(gen, mask, 0, qi, out) ? STSA_ERR_OUT_OF_MEMORY : STSA_OK;
}

/* First i >= lo with pos[i] >= x (n if none), every pos[i < lo] being < x.
 * Galloping from lo: a row's boundaries ascend, so each search starts where
 * the last ended and costs O(log distance), not O(log n). */
static int64_t rank_from(const int64_t *pos, int64_t n, int64_t lo, int64_t x) {
  int64_t hi = n;
  for (int64_t step = 1; lo < n; step *= 2) {
    const int64_t i = lo + step - 1;
    if (i >= n)
      break;
    if (pos[i] >= x) {
      hi = i;
      break;
    }
    lo = i + 1;
  }
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (pos[mid] < x)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

stsa_status stsa_ivec_restrict(const stsa_ivec *in, const int64_t *pos, int64_t n,
                               stsa_ivec *out) {
  out->n = 0;
  if (stsa_ivec_reserve(out, in->n))
    return STSA_ERR_OUT_OF_MEMORY;
  int64_t r = 0;
  for (int64_t k = 0; k < in->n && r < n; k++) {
    const int64_t lo = rank_from(pos, n, r, in->v[2 * k]);
    r = rank_from(pos, n, lo, in->v[2 * k + 1]);
    stsa_ivec_put(out, lo, r);
  }
  return STSA_OK;
}
