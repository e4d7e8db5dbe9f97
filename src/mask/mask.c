/*
 * mask.c — mask constructors, the per-pair predicate, structural equality.
 *
 * Constructors take no context, so a rejected parameter is reported by its
 * status alone (STSA_ERR_BAD_MASK; STSA_ERR_BAD_PARAM for the sizes of a
 * cluster mask, whose labels are BAD_MASK); stsa_plan_build names problems that only
 * show against a plan's lengths and geometry.
 */
#include "mask/mask.h"

#include <stdlib.h>
#include <string.h>

uint64_t stsa_hash_mix(uint64_t h, uint64_t word) {
  /* splitmix64's finaliser over the running state: cheap and well mixed. */
  h ^= word + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebULL;
  h ^= h >> 31;
  return h;
}

uint64_t stsa_hash_bytes(uint64_t h, const void *data, size_t n) {
  const unsigned char *p = data;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, p + i, 8);
    h = stsa_hash_mix(h, w);
  }
  uint64_t tail = 0;
  memcpy(&tail, p + i, n - i);
  return stsa_hash_mix(h, tail ^ ((uint64_t)n << 56));
}

const stsa_mask *stsa_mask_ref(const stsa_mask *m) {
  atomic_fetch_add(&((stsa_mask *)m)->refs, 1);
  return m;
}

void stsa_mask_free(stsa_mask *m) {
  if (!m || atomic_fetch_sub(&m->refs, 1) != 1)
    return;
  stsa_mask_free((stsa_mask *)m->lhs); /* depth is bounded, so is this recursion */
  stsa_mask_free((stsa_mask *)m->rhs);
  free(m->q_seg);
  free(m->k_seg);
  free(m->bits);
  free(m);
}

static stsa_mask *new_node(stsa_mask_kind kind, int64_t a, int64_t b) {
  stsa_mask *m = calloc(1, sizeof *m);
  if (!m)
    return NULL;
  atomic_init(&m->refs, 1);
  m->kind = kind;
  m->depth = 1;
  m->a = a;
  m->b = b;
  m->s_q = m->s_kv = -1;
  return m;
}

/* The node's own parameters; children and arrays are mixed in by callers. */
static uint64_t base_sig(const stsa_mask *m) {
  uint64_t h = stsa_hash_mix(0x5354534d41534bULL, (uint64_t)m->kind);
  h = stsa_hash_mix(h, (uint64_t)m->a);
  return stsa_hash_mix(h, (uint64_t)m->b);
}

static stsa_status finish_leaf(stsa_mask *m, stsa_mask **out) {
  m->sig = base_sig(m);
  if (m->has_geo) {
    const stsa_geometry *g = &m->geometry;
    const int64_t f[6] = {g->frames, g->height,    g->width,
                          g->text,   g->text_real, (int64_t)g->text_pos};
    for (int i = 0; i < 6; i++)
      m->sig = stsa_hash_mix(m->sig, (uint64_t)f[i]);
  }
  *out = m;
  return STSA_OK;
}

static stsa_status index_leaf(stsa_mask_kind kind, int64_t a, int64_t b,
                              stsa_mask **out) {
  if (!out)
    return STSA_ERR_NULL_ARG;
  stsa_mask *m = new_node(kind, a, b);
  if (!m)
    return STSA_ERR_OUT_OF_MEMORY;
  return finish_leaf(m, out);
}

stsa_status stsa_mask_full(stsa_mask **out) {
  return index_leaf(STSA_MK_FULL, 0, 0, out);
}

stsa_status stsa_mask_causal(int64_t offset, stsa_mask **out) {
  return index_leaf(STSA_MK_CAUSAL, offset, 0, out);
}

stsa_status stsa_mask_local(int64_t left, int64_t right, stsa_mask **out) {
  if ((left < 0 && left != STSA_UNBOUNDED) || (right < 0 && right != STSA_UNBOUNDED))
    return out ? STSA_ERR_BAD_MASK : STSA_ERR_NULL_ARG;
  return index_leaf(STSA_MK_LOCAL, left, right, out);
}

stsa_status stsa_mask_chunked_causal(int64_t chunk, stsa_mask **out) {
  if (chunk <= 0)
    return out ? STSA_ERR_BAD_MASK : STSA_ERR_NULL_ARG;
  return index_leaf(STSA_MK_CHUNKED, chunk, 0, out);
}

/* Video and text leaves: a geometry with frames, non-negative parameters. */
static stsa_status video_leaf(stsa_mask_kind kind, const stsa_geometry *g, int64_t a,
                              int64_t b, stsa_mask **out) {
  if (!out)
    return STSA_ERR_NULL_ARG;
  if (!g || stsa_geo_check(g) || g->frames < 1 || a < 0 || b < 0)
    return STSA_ERR_BAD_MASK;
  stsa_mask *m = new_node(kind, a, b);
  if (!m)
    return STSA_ERR_OUT_OF_MEMORY;
  m->has_geo = 1;
  m->geometry = *g;
  stsa_geo_init(&m->geo, g);
  return finish_leaf(m, out);
}

stsa_status stsa_mask_frame_window(const stsa_geometry *g, int64_t w, stsa_mask **out) {
  return video_leaf(STSA_MK_FRAME_WINDOW, g, w, 0, out);
}

stsa_status stsa_mask_spatial_window(const stsa_geometry *g, int64_t a, int64_t b,
                                     stsa_mask **out) {
  return video_leaf(STSA_MK_SPATIAL_WINDOW, g, a, b, out);
}

stsa_status stsa_mask_position_band(const stsa_geometry *g, int64_t w, stsa_mask **out) {
  return video_leaf(STSA_MK_POSITION_BAND, g, w, 0, out);
}

stsa_status stsa_mask_sink_frames(const stsa_geometry *g, int64_t n, stsa_mask **out) {
  if (n <= 0)
    return out ? STSA_ERR_BAD_MASK : STSA_ERR_NULL_ARG;
  return video_leaf(STSA_MK_SINK_FRAMES, g, n, 0, out);
}

stsa_status stsa_mask_text(const stsa_geometry *g, stsa_mask **out) {
  return video_leaf(STSA_MK_TEXT, g, 0, 0, out);
}

static int lengths_ok(int64_t s_q, int64_t s_kv) {
  return s_q >= 1 && s_kv >= 1 && s_q <= STSA_MAX_TOKENS && s_kv <= STSA_MAX_TOKENS;
}

/* Copies the per-token arrays of a segment or cluster node, which also fixes
 * the lengths a plan must match. 0 on success, -1 when out of memory. */
static int copy_labels(stsa_mask *m, const int32_t *q, int64_t s_q, const int32_t *k,
                       int64_t s_kv) {
  m->s_q = s_q;
  m->s_kv = s_kv;
  m->q_seg = malloc((size_t)s_q * sizeof *q);
  m->k_seg = malloc((size_t)s_kv * sizeof *k);
  if (!m->q_seg || !m->k_seg)
    return -1;
  memcpy(m->q_seg, q, (size_t)s_q * sizeof *q);
  memcpy(m->k_seg, k, (size_t)s_kv * sizeof *k);
  return 0;
}

stsa_status stsa_mask_segments(const int32_t *q_seg, int64_t s_q, const int32_t *k_seg,
                               int64_t s_kv, stsa_mask **out) {
  if (!q_seg || !k_seg || !out)
    return STSA_ERR_NULL_ARG;
  if (!lengths_ok(s_q, s_kv))
    return STSA_ERR_BAD_MASK;
  stsa_mask *m = new_node(STSA_MK_SEGMENTS, 0, 0);
  if (!m)
    return STSA_ERR_OUT_OF_MEMORY;
  if (copy_labels(m, q_seg, s_q, k_seg, s_kv)) {
    stsa_mask_free(m);
    return STSA_ERR_OUT_OF_MEMORY;
  }
  m->sig = stsa_hash_mix(base_sig(m), (uint64_t)s_q);
  m->sig = stsa_hash_bytes(m->sig, q_seg, (size_t)s_q * sizeof *q_seg);
  m->sig = stsa_hash_bytes(m->sig, k_seg, (size_t)s_kv * sizeof *k_seg);
  *out = m;
  return STSA_OK;
}

stsa_status stsa_mask_dense(const uint8_t *keep, int64_t s_q, int64_t s_kv,
                            stsa_mask **out) {
  if (!keep || !out)
    return STSA_ERR_NULL_ARG;
  if (!lengths_ok(s_q, s_kv) || (uint64_t)s_q > SIZE_MAX / (uint64_t)s_kv)
    return STSA_ERR_BAD_MASK;
  size_t n = (size_t)s_q * (size_t)s_kv;
  stsa_mask *m = new_node(STSA_MK_DENSE, 0, 0);
  if (!m)
    return STSA_ERR_OUT_OF_MEMORY;
  m->s_q = s_q;
  m->s_kv = s_kv;
  if (!(m->bits = malloc(n))) {
    stsa_mask_free(m);
    return STSA_ERR_OUT_OF_MEMORY;
  }
  /* Normalised to 0/1 so that "nonzero" masks compare by meaning. */
  for (size_t i = 0; i < n; i++)
    m->bits[i] = keep[i] != 0;
  m->sig = stsa_hash_mix(stsa_hash_mix(base_sig(m), (uint64_t)s_q), (uint64_t)s_kv);
  m->sig = stsa_hash_bytes(m->sig, m->bits, n);
  *out = m;
  return STSA_OK;
}

/* 1 if every label is -1 or in [0, clusters). */
static int labels_ok(const int32_t *label, int64_t n, int64_t clusters) {
  for (int64_t i = 0; i < n; i++)
    if (label[i] < -1 || label[i] >= clusters)
      return 0;
  return 1;
}

/* The cluster pairs SVG2 keeps: at most 2^31 of them, so that a label pair
 * indexes the map in 32-bit arithmetic on the caller's side too. */
#define MAX_CLUSTER_PAIRS ((int64_t)1 << 31)

stsa_status stsa_mask_clusters(const int32_t *q_label, int64_t s_q, int64_t q_clusters,
                               const int32_t *k_label, int64_t s_kv, int64_t kv_clusters,
                               const uint8_t *keep, stsa_mask **out) {
  if (!q_label || !k_label || !keep || !out)
    return STSA_ERR_NULL_ARG;
  if (!lengths_ok(s_q, s_kv) || q_clusters < 1 || kv_clusters < 1 ||
      q_clusters > MAX_CLUSTER_PAIRS || kv_clusters > MAX_CLUSTER_PAIRS ||
      q_clusters > MAX_CLUSTER_PAIRS / kv_clusters)
    return STSA_ERR_BAD_PARAM;
  if (!labels_ok(q_label, s_q, q_clusters) || !labels_ok(k_label, s_kv, kv_clusters))
    return STSA_ERR_BAD_MASK;
  const size_t pairs = (size_t)q_clusters * (size_t)kv_clusters;
  stsa_mask *m = new_node(STSA_MK_CLUSTERS, q_clusters, kv_clusters);
  if (!m)
    return STSA_ERR_OUT_OF_MEMORY;
  if (copy_labels(m, q_label, s_q, k_label, s_kv) || !(m->bits = malloc(pairs))) {
    stsa_mask_free(m);
    return STSA_ERR_OUT_OF_MEMORY;
  }
  for (size_t i = 0; i < pairs; i++) /* 0/1, as for dense masks */
    m->bits[i] = keep[i] != 0;
  m->sig = stsa_hash_mix(stsa_hash_mix(base_sig(m), (uint64_t)s_q), (uint64_t)s_kv);
  m->sig = stsa_hash_bytes(m->sig, q_label, (size_t)s_q * sizeof *q_label);
  m->sig = stsa_hash_bytes(m->sig, k_label, (size_t)s_kv * sizeof *k_label);
  m->sig = stsa_hash_bytes(m->sig, m->bits, pairs);
  *out = m;
  return STSA_OK;
}

static int64_t merged_len(int64_t x, int64_t y) { return x >= 0 ? x : y; }

static stsa_status combine(stsa_mask_kind kind, const stsa_mask *a, const stsa_mask *b,
                           stsa_mask **out) {
  if (!a || !b || !out)
    return STSA_ERR_NULL_ARG;
  int depth = 1 + (a->depth > b->depth ? a->depth : b->depth);
  if (depth > STSA_MASK_MAX_DEPTH)
    return STSA_ERR_BAD_MASK;
  if (a->has_geo && b->has_geo && !stsa_geometry_same(&a->geometry, &b->geometry))
    return STSA_ERR_BAD_MASK;
  if ((a->s_q >= 0 && b->s_q >= 0 && a->s_q != b->s_q) ||
      (a->s_kv >= 0 && b->s_kv >= 0 && a->s_kv != b->s_kv))
    return STSA_ERR_BAD_MASK;
  stsa_mask *m = new_node(kind, 0, 0);
  if (!m)
    return STSA_ERR_OUT_OF_MEMORY;
  m->depth = depth;
  const stsa_mask *g = a->has_geo ? a : b;
  m->has_geo = g->has_geo;
  m->geometry = g->geometry;
  m->geo = g->geo;
  m->s_q = merged_len(a->s_q, b->s_q);
  m->s_kv = merged_len(a->s_kv, b->s_kv);
  m->lhs = stsa_mask_ref(a);
  m->rhs = stsa_mask_ref(b);
  m->sig = stsa_hash_mix(stsa_hash_mix(base_sig(m), a->sig), b->sig);
  *out = m;
  return STSA_OK;
}

stsa_status stsa_mask_and(const stsa_mask *a, const stsa_mask *b, stsa_mask **out) {
  return combine(STSA_MK_AND, a, b, out);
}

stsa_status stsa_mask_or(const stsa_mask *a, const stsa_mask *b, stsa_mask **out) {
  return combine(STSA_MK_OR, a, b, out);
}

static int64_t absdiff(int64_t x, int64_t y) { return x > y ? x - y : y - x; }

static int keep_text(const stsa_tok *ti, const stsa_tok *tj) {
  switch (ti->kind) {
  case STSA_TOK_TEXT_PAD:
    return tj->kind == STSA_TOK_TEXT_PAD;
  case STSA_TOK_TEXT_REAL:
    return tj->kind == STSA_TOK_VIDEO || tj->kind == STSA_TOK_TEXT_REAL;
  case STSA_TOK_VIDEO:
    return tj->kind == STSA_TOK_TEXT_REAL;
  default:
    return 0;
  }
}

/* Video and text leaves, on true coordinates. */
static int keep_geo(const stsa_mask *m, int64_t i, int64_t j) {
  const stsa_geo *g = &m->geo;
  stsa_tok ti = stsa_geo_token(g, i), tj = stsa_geo_token(g, j);
  int vv = ti.kind == STSA_TOK_VIDEO && tj.kind == STSA_TOK_VIDEO;
  switch (m->kind) {
  case STSA_MK_FRAME_WINDOW:
    return vv && absdiff(ti.f, tj.f) <= m->a;
  case STSA_MK_SPATIAL_WINDOW:
    return vv && absdiff(ti.y, tj.y) <= m->a && absdiff(ti.x, tj.x) <= m->b;
  case STSA_MK_POSITION_BAND:
    return vv && absdiff(ti.p * g->F + ti.f, tj.p * g->F + tj.f) <= m->a;
  case STSA_MK_SINK_FRAMES:
    return (ti.kind == STSA_TOK_VIDEO || ti.kind == STSA_TOK_TEXT_REAL) &&
           tj.kind == STSA_TOK_VIDEO && tj.f < m->a;
  default:
    return keep_text(&ti, &tj);
  }
}

int stsa_mask_keep(const stsa_mask *m, int64_t i, int64_t j) {
  if (!m || i < 0 || j < 0)
    return 0;
  switch (m->kind) {
  case STSA_MK_FULL:
    return 1;
  case STSA_MK_CAUSAL:
    return j - i <= m->a;
  case STSA_MK_LOCAL:
    return (m->a == STSA_UNBOUNDED || i - j <= m->a) &&
           (m->b == STSA_UNBOUNDED || j - i <= m->b);
  case STSA_MK_CHUNKED:
    return j <= i && i / m->a == j / m->a;
  case STSA_MK_SEGMENTS:
    return i < m->s_q && j < m->s_kv && m->q_seg[i] == m->k_seg[j];
  case STSA_MK_DENSE:
    return i < m->s_q && j < m->s_kv && m->bits[i * m->s_kv + j];
  case STSA_MK_CLUSTERS:
    return i < m->s_q && j < m->s_kv && stsa_clusters_keep(m, m->q_seg[i], m->k_seg[j]);
  case STSA_MK_AND:
    return stsa_mask_keep(m->lhs, i, j) && stsa_mask_keep(m->rhs, i, j);
  case STSA_MK_OR:
    return stsa_mask_keep(m->lhs, i, j) || stsa_mask_keep(m->rhs, i, j);
  default:
    return keep_geo(m, i, j);
  }
}

int stsa_mask_equal(const stsa_mask *a, const stsa_mask *b) {
  if (!a || !b)
    return 0;
  if (a == b)
    return 1;
  if (a->sig != b->sig || a->kind != b->kind || a->a != b->a || a->b != b->b ||
      a->s_q != b->s_q || a->s_kv != b->s_kv)
    return 0;
  switch (a->kind) {
  case STSA_MK_AND:
  case STSA_MK_OR:
    return stsa_mask_equal(a->lhs, b->lhs) && stsa_mask_equal(a->rhs, b->rhs);
  case STSA_MK_SEGMENTS:
    return !memcmp(a->q_seg, b->q_seg, (size_t)a->s_q * sizeof *a->q_seg) &&
           !memcmp(a->k_seg, b->k_seg, (size_t)a->s_kv * sizeof *a->k_seg);
  case STSA_MK_DENSE:
    return !memcmp(a->bits, b->bits, (size_t)a->s_q * (size_t)a->s_kv);
  case STSA_MK_CLUSTERS: /* a and b, the cluster counts, are equal here */
    return !memcmp(a->q_seg, b->q_seg, (size_t)a->s_q * sizeof *a->q_seg) &&
           !memcmp(a->k_seg, b->k_seg, (size_t)a->s_kv * sizeof *a->k_seg) &&
           !memcmp(a->bits, b->bits, (size_t)a->a * (size_t)a->b);
  default:
    return !a->has_geo || stsa_geometry_same(&a->geometry, &b->geometry);
  }
}
