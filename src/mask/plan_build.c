/*
 * plan_build.c — from per-head masks to the block plan the kernel walks.
 *
 * Per distinct mask and per q tile, each row's kept keys come as intervals
 * (intervals.c). Two difference arrays over the kv tiles then count, per
 * tile, the rows touching it and the rows keeping all its columns, so a q
 * tile costs O(rows * intervals + kv_tiles) whatever the mask density.
 * Partial tiles store their rows' clipped intervals; equal ones (across the
 * whole plan) are stored once. Everything a plan owns lives in one arena.
 */
#define STSA_EXPERIMENTAL /* defines stsa_plan_head_stats */
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/sized.h"
#include "kernel/block_sparse.h"
#include "kernel/dispatch.h"
#include "mask/intervals.h"
#include "mask/plan_build.h"
#include "mask/plan_cache.h"

#define MAX_TILE 4096

/* ---- arena ------------------------------------------------------------- */
typedef struct chunk {
  struct chunk *next;
  size_t cap, used;
} chunk;

/* What plan->arena_ points to. */
typedef struct plan_store {
  chunk *head;
  size_t bytes;
  int64_t distinct_patterns; /* across all parts */
} plan_store;

#define CHUNK_HDR ((sizeof(chunk) + 15) / 16 * 16)
#define CHUNK_SIZE ((size_t)32 << 10)

/* 16-byte aligned; large requests get a chunk of their own. */
static void *store_alloc(plan_store *s, size_t n) {
  n = n ? (n + 15) / 16 * 16 : 16;
  chunk *c = s->head;
  if (!c || c->cap - c->used < n) {
    int own = n > CHUNK_SIZE / 4;
    size_t cap = own ? n : CHUNK_SIZE;
    chunk *fresh = malloc(CHUNK_HDR + cap);
    if (!fresh)
      return NULL;
    s->bytes += CHUNK_HDR + cap;
    fresh->cap = cap;
    fresh->used = 0;
    if (own && c) { /* keep filling the current chunk */
      fresh->next = c->next;
      c->next = fresh;
    } else {
      fresh->next = c;
      s->head = fresh;
    }
    c = fresh;
  }
  void *p = (char *)c + CHUNK_HDR + c->used;
  c->used += n;
  return p;
}

static void store_free(plan_store *s) {
  if (!s)
    return;
  for (chunk *c = s->head, *next; c; c = next) {
    next = c->next;
    free(c);
  }
  free(s);
}

/* ---- builder state ------------------------------------------------------ */
typedef struct builder {
  stsa_ctx *ctx;
  stsa_plan *plan;
  plan_store *store;
  stsa_iv_gen gen;
  stsa_ivec row;    /* one row's intervals */
  stsa_ivec sub;    /* the same restricted to a key subset (kv_rows) */
  int64_t *kv_pos;  /* kv_rows plans: [s_kv] ascending position in the whole kv order */
  int64_t *kv_map;  /* kv_rows plans: [whole order] position -> native; NULL: identity */
  stsa_ivec rows;   /* the current q tile's rows, concatenated */
  int64_t *row_off; /* [q_tile + 1] row r is rows[row_off[r] .. row_off[r+1]) */
  int64_t *cursor;  /* [q_tile] first interval of row r not left of the tile */
  int32_t *full_d;  /* [kv_tiles + 1] difference array: rows keeping a whole tile */
  int32_t *touch_d; /* [kv_tiles + 1] difference array: rows touching a tile */
  int32_t *e_kv;    /* the current part's entries, grown as needed */
  uint8_t *e_kind;
  int32_t *e_pat;
  int64_t *e_kept;
  int64_t e_n, e_cap;
  stsa_tile_pattern *pats; /* every distinct pattern of the plan */
  uint64_t *pat_hash;
  int64_t *pat_kept;
  int32_t *local_of;  /* [pat_cap] pattern -> id in the current part, -1 */
  int32_t *part_pats; /* [pat_cap] the current part's patterns, by local id */
  int64_t pat_n, pat_cap, part_n;
  int32_t *slots; /* open addressing over pats, -1 = empty */
  int64_t slot_cap;
  int32_t *c_row_ptr; /* [q_tile + 1] the candidate pattern */
  uint16_t *c_iv;
  int64_t c_cap; /* in intervals */
} builder;

#define GROW(ptr, count)                                                                 \
  do {                                                                                   \
    void *grown_ = realloc((ptr), (size_t)(count) * sizeof *(ptr));                      \
    if (!grown_)                                                                         \
      return -1;                                                                         \
    (ptr) = grown_;                                                                      \
  } while (0)

static void builder_free(builder *b) {
  stsa_iv_gen_free(&b->gen);
  stsa_ivec_free(&b->row);
  stsa_ivec_free(&b->sub);
  free(b->kv_pos);
  free(b->kv_map);
  stsa_ivec_free(&b->rows);
  free(b->row_off);
  free(b->cursor);
  free(b->full_d);
  free(b->touch_d);
  free(b->e_kv);
  free(b->e_kind);
  free(b->e_pat);
  free(b->e_kept);
  free(b->pats);
  free(b->pat_hash);
  free(b->pat_kept);
  free(b->local_of);
  free(b->part_pats);
  free(b->slots);
  free(b->c_row_ptr);
  free(b->c_iv);
}

static int push_entry(builder *b, int64_t kt, int kind, int32_t pat, int64_t kept) {
  if (b->e_n == b->e_cap) {
    int64_t cap = b->e_cap ? 2 * b->e_cap : 256;
    GROW(b->e_kv, cap);
    GROW(b->e_kind, cap);
    GROW(b->e_pat, cap);
    GROW(b->e_kept, cap);
    b->e_cap = cap;
  }
  b->e_kv[b->e_n] = (int32_t)kt;
  b->e_kind[b->e_n] = (uint8_t)kind;
  b->e_pat[b->e_n] = pat;
  b->e_kept[b->e_n++] = kept;
  return 0;
}

/* ---- pattern deduplication ---------------------------------------------- */
static int same_pattern(const builder *b, int64_t id, int rows, int32_t nint) {
  const stsa_tile_pattern *p = &b->pats[id];
  return p->rows == rows && p->row_ptr[rows] == nint &&
         !memcmp(p->row_ptr, b->c_row_ptr, sizeof(int32_t) * (size_t)(rows + 1)) &&
         !memcmp(p->iv, b->c_iv, sizeof(uint16_t) * 2 * (size_t)nint);
}

static int rehash(builder *b) {
  int64_t cap = b->slot_cap ? 2 * b->slot_cap : 1024;
  GROW(b->slots, cap);
  b->slot_cap = cap;
  for (int64_t i = 0; i < cap; i++)
    b->slots[i] = -1;
  for (int64_t id = 0; id < b->pat_n; id++) {
    int64_t s = (int64_t)(b->pat_hash[id] & (uint64_t)(cap - 1));
    while (b->slots[s] >= 0)
      s = (s + 1) & (cap - 1);
    b->slots[s] = (int32_t)id;
  }
  return 0;
}

/* The plan-wide id of the candidate pattern, stored if new. */
static int64_t intern_pattern(builder *b, int rows, int32_t nint, int64_t kept) {
  uint64_t h = stsa_hash_mix(0x7061747465726eULL, (uint64_t)rows);
  h = stsa_hash_bytes(h, b->c_row_ptr, sizeof(int32_t) * (size_t)(rows + 1));
  h = stsa_hash_bytes(h, b->c_iv, sizeof(uint16_t) * 2 * (size_t)nint);
  int64_t s = b->slot_cap ? (int64_t)(h & (uint64_t)(b->slot_cap - 1)) : 0;
  for (; b->slot_cap && b->slots[s] >= 0; s = (s + 1) & (b->slot_cap - 1))
    if (b->pat_hash[b->slots[s]] == h && same_pattern(b, b->slots[s], rows, nint))
      return b->slots[s];
  if (b->pat_n == INT32_MAX)
    return -1;
  if (b->pat_n == b->pat_cap) {
    int64_t cap = b->pat_cap ? 2 * b->pat_cap : 256;
    GROW(b->pats, cap);
    GROW(b->pat_hash, cap);
    GROW(b->pat_kept, cap);
    GROW(b->local_of, cap);
    GROW(b->part_pats, cap);
    for (int64_t i = b->pat_cap; i < cap; i++)
      b->local_of[i] = -1;
    b->pat_cap = cap;
  }
  int32_t *row_ptr = store_alloc(b->store, sizeof(int32_t) * (size_t)(rows + 1));
  uint16_t *iv = store_alloc(b->store, sizeof(uint16_t) * 2 * (size_t)nint);
  if (!row_ptr || !iv)
    return -1;
  memcpy(row_ptr, b->c_row_ptr, sizeof(int32_t) * (size_t)(rows + 1));
  memcpy(iv, b->c_iv, sizeof(uint16_t) * 2 * (size_t)nint);
  int64_t id = b->pat_n++;
  b->pats[id] = (stsa_tile_pattern){rows, row_ptr, iv};
  b->pat_hash[id] = h;
  b->pat_kept[id] = kept;
  if (2 * b->pat_n > b->slot_cap)
    return rehash(b) ? -1 : id;
  s = (int64_t)(h & (uint64_t)(b->slot_cap - 1));
  while (b->slots[s] >= 0)
    s = (s + 1) & (b->slot_cap - 1);
  b->slots[s] = (int32_t)id;
  return id;
}

/* Clips every row of the q tile to kv tile [k0, k1) and interns the result;
 * returns the pattern's id in the current part, -1 when out of memory. */
static int32_t tile_pattern(builder *b, int rows, int64_t k0, int64_t k1) {
  const int64_t *v = b->rows.v;
  int32_t nint = 0;
  int64_t kept = 0;
  b->c_row_ptr[0] = 0;
  for (int r = 0; r < rows; r++) {
    int64_t c = b->cursor[r];
    const int64_t end = b->row_off[r + 1];
    while (c < end && v[2 * c + 1] <= k0)
      c++;
    b->cursor[r] = c; /* tiles come in ascending order: never look back */
    const int64_t need = nint + (k1 - k0) / 2 + 1;
    if (need > b->c_cap) {
      int64_t cap = 2 * need;
      GROW(b->c_iv, 2 * cap);
      b->c_cap = cap;
    }
    for (; c < end && v[2 * c] < k1; c++) {
      int64_t lo = v[2 * c] > k0 ? v[2 * c] : k0;
      int64_t hi = v[2 * c + 1] < k1 ? v[2 * c + 1] : k1;
      b->c_iv[2 * nint] = (uint16_t)(lo - k0);
      b->c_iv[2 * nint + 1] = (uint16_t)(hi - k0);
      nint++;
      kept += hi - lo;
      if (v[2 * c + 1] > k1)
        break; /* continues into the next tile */
    }
    b->c_row_ptr[r + 1] = nint;
  }
  int64_t id = intern_pattern(b, rows, nint, kept);
  if (id < 0)
    return -1;
  if (b->local_of[id] < 0) {
    b->local_of[id] = (int32_t)b->part_n;
    b->part_pats[b->part_n++] = (int32_t)id;
  }
  return b->local_of[id];
}

/* ---- one distinct mask --------------------------------------------------- */
/* Generates the q tile's rows and fills the difference arrays. Returns
 * STSA_OK, or the failing status with its message. */
static stsa_status tile_rows(builder *b, const stsa_mask *mask, int64_t qt, int rows,
                             int64_t head, int64_t *kept) {
  const stsa_plan *p = b->plan;
  const int64_t T = p->kv_tile;
  b->rows.n = 0;
  b->row_off[0] = 0;
  memset(b->full_d, 0, sizeof(int32_t) * (size_t)(p->kv_tiles + 1));
  memset(b->touch_d, 0, sizeof(int32_t) * (size_t)(p->kv_tiles + 1));
  for (int r = 0; r < rows; r++) {
    const int64_t pos = qt * p->q_tile + r;
    const int64_t qi = p->q_native ? p->q_native[pos] : pos;
    STSA_TRY(stsa_iv_row(&b->gen, mask, qi, &b->row));
    const stsa_ivec *row = &b->row;
    if (p->kv_subset) {
      STSA_TRY(stsa_ivec_restrict(&b->row, b->kv_pos, p->s_kv, &b->sub));
      row = &b->sub;
    }
    STSA_RETURN_IF(row->n == 0 && !(p->flags & STSA_PLAN_ALLOW_EMPTY_ROWS), &b->ctx->err,
                   STSA_ERR_EMPTY_ROW,
                   "plan: the mask of head %lld keeps no key for query row %lld "
                   "(native token %lld); pass STSA_PLAN_ALLOW_EMPTY_ROWS to accept it",
                   (long long)head, (long long)pos, (long long)qi);
    if (stsa_ivec_reserve(&b->rows, row->n))
      return STSA_ERR_OUT_OF_MEMORY;
    if (row->n)
      memcpy(b->rows.v + 2 * b->rows.n, row->v, sizeof(int64_t) * 2 * (size_t)row->n);
    b->rows.n += row->n;
    b->row_off[r + 1] = b->rows.n;
    b->cursor[r] = b->row_off[r];
    for (int64_t k = 0; k < row->n; k++) {
      const int64_t lo = row->v[2 * k], hi = row->v[2 * k + 1];
      *kept += hi - lo;
      b->touch_d[lo / T]++;
      b->touch_d[(hi - 1) / T + 1]--;
      /* intervals never touch each other, so a tile kept whole lies in one */
      const int64_t fa = (lo + T - 1) / T, fb = hi == p->s_kv ? p->kv_tiles : hi / T;
      if (fa < fb) {
        b->full_d[fa]++;
        b->full_d[fb]--;
      }
    }
  }
  return STSA_OK;
}

static stsa_status build_part(builder *b, stsa_plan_part *part, int64_t head) {
  stsa_plan *p = b->plan;
  b->e_n = 0;
  b->part_n = 0;
  part->bs.tile_ptr = store_alloc(b->store, sizeof(int64_t) * (size_t)(p->q_tiles + 1));
  if (!part->bs.tile_ptr)
    return STSA_ERR_OUT_OF_MEMORY;
  part->bs.tile_ptr[0] = 0;
  part->bs.q_tiles = p->q_tiles;
  for (int64_t qt = 0; qt < p->q_tiles; qt++) {
    const int64_t left = p->s_q - qt * p->q_tile;
    const int rows = (int)(left < p->q_tile ? left : p->q_tile);
    STSA_TRY(tile_rows(b, part->mask, qt, rows, head, &part->kept_pairs));
    int64_t full = 0, touch = 0;
    for (int64_t kt = 0; kt < p->kv_tiles; kt++) {
      full += b->full_d[kt];
      touch += b->touch_d[kt];
      if (touch == 0)
        continue;
      const int64_t k0 = kt * p->kv_tile;
      const int64_t k1 = k0 + p->kv_tile < p->s_kv ? k0 + p->kv_tile : p->s_kv;
      int failed;
      if (full == rows) {
        failed = push_entry(b, kt, STSA_TILE_FULL, -1, rows * (k1 - k0));
      } else {
        int32_t id = tile_pattern(b, rows, k0, k1);
        failed = id < 0 ||
                 push_entry(b, kt, STSA_TILE_PARTIAL, id, b->pat_kept[b->part_pats[id]]);
        part->partial_entries++;
      }
      if (failed)
        return STSA_ERR_OUT_OF_MEMORY;
    }
    part->bs.tile_ptr[qt + 1] = b->e_n;
  }
  /* Exact-size copies into the arena. */
  const size_t n = (size_t)b->e_n;
  part->bs.entries = b->e_n;
  part->bs.kv_tile = store_alloc(b->store, n * sizeof *part->bs.kv_tile);
  part->bs.kind = store_alloc(b->store, n * sizeof *part->bs.kind);
  part->bs.pattern = store_alloc(b->store, n * sizeof *part->bs.pattern);
  part->rounded_kept = store_alloc(b->store, n * sizeof *part->rounded_kept);
  part->bs.patterns = (int32_t)b->part_n;
  part->bs.pattern_list =
      store_alloc(b->store, (size_t)b->part_n * sizeof *part->bs.pattern_list);
  if (!part->bs.kv_tile || !part->bs.kind || !part->bs.pattern || !part->rounded_kept ||
      !part->bs.pattern_list)
    return STSA_ERR_OUT_OF_MEMORY;
  if (n) {
    memcpy(part->bs.kv_tile, b->e_kv, n * sizeof *part->bs.kv_tile);
    memcpy(part->bs.kind, b->e_kind, n * sizeof *part->bs.kind);
    memcpy(part->bs.pattern, b->e_pat, n * sizeof *part->bs.pattern);
    memcpy(part->rounded_kept, b->e_kept, n * sizeof *part->rounded_kept);
  }
  for (int64_t l = 0; l < b->part_n; l++) {
    part->bs.pattern_list[l] = b->pats[b->part_pats[l]];
    b->local_of[b->part_pats[l]] = -1;
  }
  return STSA_OK;
}

/* ---- the plan ------------------------------------------------------------ */
static void plan_destroy(stsa_plan *p) {
  for (int32_t i = 0; p->parts && i < p->parts_count; i++)
    stsa_mask_free((stsa_mask *)p->parts[i].mask);
  store_free(p->arena_); /* p itself lives there */
}

/* The last reference destroys: acq_rel orders every earlier use of the plan
 * on other threads before the destruction. */
void stsa_plan_free(stsa_plan *plan) {
  if (plan && atomic_fetch_sub_explicit(&plan->refcount, 1, memory_order_acq_rel) == 1)
    plan_destroy(plan);
}

/* map[pos] = native index of position pos of `order`, for every token of g;
 * returns map. */
static int64_t *fill_order(const stsa_geometry *g, stsa_order order, int64_t *map) {
  stsa_geo geo;
  stsa_geo_init(&geo, g);
  for (int64_t pos = 0; map && pos < geo.N; pos++)
    map[pos] = stsa_geo_to_native(&geo, order, pos);
  return map;
}

static int64_t *order_map(plan_store *s, const stsa_geometry *g, stsa_order order) {
  return fill_order(g, order,
                    store_alloc(s, sizeof(int64_t) * (size_t)stsa_geometry_tokens(g)));
}

/* Plan header, order maps and heads grouped by equal masks. */
static stsa_status plan_init(stsa_plan *p, const stsa_plan_desc *d, int q_tile,
                             int kv_tile, int64_t *first_head) {
  plan_store *s = p->arena_;
  atomic_init(&p->refcount, 1);
  p->s_q = d->s_q;
  p->s_kv = d->s_kv;
  p->heads = d->heads;
  p->q_tile = q_tile;
  p->kv_tile = kv_tile;
  p->q_tiles = (d->s_q + q_tile - 1) / q_tile;
  p->kv_tiles = (d->s_kv + kv_tile - 1) / kv_tile;
  p->q_order = d->q_order;
  p->kv_order = d->kv_order;
  p->has_geometry = d->geometry != NULL;
  if (d->geometry)
    p->geometry = *d->geometry;
  p->flags = d->flags;
  if (d->q_rows) {
    p->q_sampled = 1;
    if (!(p->q_native = store_alloc(s, sizeof(int64_t) * (size_t)d->s_q)))
      return STSA_ERR_OUT_OF_MEMORY;
    memcpy(p->q_native, d->q_rows, sizeof(int64_t) * (size_t)d->s_q);
  } else if (d->q_order != STSA_ORDER_NATIVE &&
             !(p->q_native = order_map(s, &p->geometry, d->q_order))) {
    return STSA_ERR_OUT_OF_MEMORY;
  }
  /* a key subset (kv_rows) gets its maps from kv_subset_init */
  if (!d->kv_rows && d->kv_order != STSA_ORDER_NATIVE &&
      !(p->kv_native = order_map(s, &p->geometry, d->kv_order)))
    return STSA_ERR_OUT_OF_MEMORY;
  p->kv_token = p->kv_native;
  p->head_part = store_alloc(s, sizeof(int32_t) * (size_t)d->heads);
  if (!p->head_part)
    return STSA_ERR_OUT_OF_MEMORY;
  int32_t parts = 0;
  for (int64_t h = 0; h < d->heads; h++) {
    int32_t i = 0;
    while (i < parts && !stsa_mask_equal(d->masks[h], d->masks[first_head[i]]))
      i++;
    if (i == parts)
      first_head[parts++] = h;
    p->head_part[h] = i;
  }
  p->parts = store_alloc(s, sizeof(stsa_plan_part) * (size_t)parts);
  if (!p->parts)
    return STSA_ERR_OUT_OF_MEMORY;
  memset(p->parts, 0, sizeof(stsa_plan_part) * (size_t)parts);
  p->parts_count = parts;
  for (int32_t i = 0; i < parts; i++)
    p->parts[i].mask = stsa_mask_ref(d->masks[first_head[i]]);
  return STSA_OK;
}

/* One key of a subset: its position in the whole kv order and its row. */
typedef struct kv_key {
  int64_t pos, row;
} kv_key;

static int kv_key_cmp(const void *a, const void *b) {
  const int64_t x = ((const kv_key *)a)->pos, y = ((const kv_key *)b)->pos;
  return (x > y) - (x < y);
}

/* A plan over the keys kv_rows: the subset sorted by kv_order position.
 * The plan gets the row (kv_native) and token (kv_token) of each of its kv
 * positions; the builder keeps the sorted positions, to restrict rows of
 * the whole order to the subset, and the whole order's map, to generate
 * them. Duplicates are found here, as equal neighbours once sorted. */
static stsa_status kv_subset_init(builder *b, const stsa_plan_desc *d) {
  stsa_plan *p = b->plan;
  const size_t n = (size_t)d->s_kv;
  stsa_geo geo = {0};
  if (p->has_geometry)
    stsa_geo_init(&geo, &p->geometry);
  kv_key *keys = malloc(n * sizeof *keys);
  b->kv_pos = malloc(n * sizeof *b->kv_pos);
  p->kv_native = store_alloc(b->store, n * sizeof *p->kv_native);
  p->kv_token = store_alloc(b->store, n * sizeof *p->kv_token);
  stsa_status st =
      keys && b->kv_pos && p->kv_native && p->kv_token ? STSA_OK : STSA_ERR_OUT_OF_MEMORY;
  int64_t whole = geo.N; /* tokens of the whole order; without a geometry the
                            largest index + 1 is all an index mask needs */
  for (size_t j = 0; st == STSA_OK && j < n; j++) {
    const int64_t tok = d->kv_rows[j];
    keys[j] = (kv_key){p->has_geometry ? stsa_geo_to_pos(&geo, p->kv_order, tok) : tok,
                       (int64_t)j};
    if (!p->has_geometry && tok >= whole)
      whole = tok + 1;
  }
  if (st == STSA_OK)
    qsort(keys, n, sizeof *keys, kv_key_cmp);
  for (size_t i = 0; st == STSA_OK && i < n; i++) {
    if (i && keys[i].pos == keys[i - 1].pos) {
      const int64_t r0 = keys[i - 1].row, r1 = keys[i].row;
      st = stsa_fail(&b->ctx->err, STSA_ERR_BAD_PARAM,
                     "plan: kv_rows[%lld] = %lld repeats kv_rows[%lld] (entries must be "
                     "distinct)",
                     (long long)(r0 > r1 ? r0 : r1), (long long)d->kv_rows[r0],
                     (long long)(r0 < r1 ? r0 : r1));
      break;
    }
    p->kv_native[i] = keys[i].row;
    p->kv_token[i] = d->kv_rows[keys[i].row];
    b->kv_pos[i] = keys[i].pos;
  }
  free(keys);
  if (st == STSA_OK && p->kv_order != STSA_ORDER_NATIVE &&
      !(b->kv_map = fill_order(&p->geometry, p->kv_order,
                               malloc(sizeof(int64_t) * (size_t)whole))))
    st = STSA_ERR_OUT_OF_MEMORY;
  p->kv_subset = 1;
  stsa_iv_gen_init(&b->gen, p->kv_order, whole, b->kv_map);
  return st;
}

static stsa_status builder_init(builder *b, const stsa_plan *p) {
  if (!p->kv_subset)
    stsa_iv_gen_init(&b->gen, p->kv_order, p->s_kv, p->kv_native);
  const size_t rows = (size_t)p->q_tile + 1, tiles = (size_t)p->kv_tiles + 1;
  b->row_off = malloc(rows * sizeof *b->row_off);
  b->cursor = malloc(rows * sizeof *b->cursor);
  b->c_row_ptr = malloc(rows * sizeof *b->c_row_ptr);
  b->full_d = malloc(tiles * sizeof *b->full_d);
  b->touch_d = malloc(tiles * sizeof *b->touch_d);
  if (!b->row_off || !b->cursor || !b->c_row_ptr || !b->full_d || !b->touch_d)
    return STSA_ERR_OUT_OF_MEMORY;
  return STSA_OK;
}

static stsa_status build(stsa_ctx *ctx, const stsa_plan_desc *d, int q_tile, int kv_tile,
                         stsa_plan **out) {
  plan_store *s = calloc(1, sizeof *s);
  stsa_plan *p = s ? store_alloc(s, sizeof *p) : NULL;
  int64_t *first_head = malloc(sizeof(int64_t) * (size_t)d->heads);
  builder b = {.ctx = ctx, .plan = p, .store = s};
  stsa_status st = STSA_ERR_OUT_OF_MEMORY;
  if (p && first_head) {
    memset(p, 0, sizeof *p);
    p->arena_ = s;
    st = plan_init(p, d, q_tile, kv_tile, first_head);
  }
  if (st == STSA_OK && d->kv_rows)
    st = kv_subset_init(&b, d);
  if (st == STSA_OK)
    st = builder_init(&b, p);
  for (int32_t i = 0; st == STSA_OK && i < p->parts_count; i++)
    st = build_part(&b, &p->parts[i], first_head[i]);
  builder_free(&b);
  free(first_head);
  if (st != STSA_OK) {
    if (st == STSA_ERR_OUT_OF_MEMORY)
      stsa_fail(&ctx->err, st, "plan: out of memory");
    if (p)
      plan_destroy(p);
    else
      store_free(s);
    return st;
  }
  s->distinct_patterns = b.pat_n;
  *out = p;
  return STSA_OK;
}

/* ---- validation and the public entry points ------------------------------ */
/* The caller's description in this library's layout. One built before
 * kv_rows existed passes the first release's shorter layout: the field it
 * lacks keeps its default (NULL). */
static stsa_status desc_read(const stsa_plan_desc *d, stsa_plan_desc *local,
                             stsa_errbuf *err) {
  return stsa_sized_read(local, d, offsetof(stsa_plan_desc, kv_rows), sizeof *local,
                         "stsa_plan_desc", err);
}

/* Entries of q_rows or kv_rows (`name`) in [0, limit); *count = the largest
 * + 1, what a dense or segment mask must cover. */
static stsa_status subset_check(const int64_t *rows, int64_t n, int64_t limit,
                                const char *name, int64_t *count, stsa_errbuf *err) {
  *count = 0;
  for (int64_t i = 0; i < n; i++) {
    STSA_RETURN_IF(rows[i] < 0 || rows[i] >= limit, err, STSA_ERR_BAD_PARAM,
                   "plan: %s[%lld] = %lld, expected 0..%lld", name, (long long)i,
                   (long long)rows[i], (long long)(limit - 1));
    if (rows[i] >= *count)
      *count = rows[i] + 1;
  }
  return STSA_OK;
}

stsa_status stsa_plan_validate(stsa_ctx *ctx, const stsa_plan_desc *d) {
  stsa_errbuf *err = &ctx->err;
  STSA_TRY(STSA_SIZED_CHECK(d, stsa_plan_desc, err));
  /* a tensor has at most 2^40 heads, and so a plan (this also bounds every
   * heads x tiles and heads x pairs product) */
  STSA_RETURN_IF(d->heads < 1 || d->heads > STSA_MAX_TOKENS, err, STSA_ERR_BAD_SHAPE,
                 "plan: heads = %lld, expected 1..2^40", (long long)d->heads);
  STSA_RETURN_IF(!d->masks, err, STSA_ERR_NULL_ARG, "plan: masks is NULL");
  STSA_RETURN_IF(
      d->s_q < 1 || d->s_kv < 1 || d->s_q > STSA_MAX_TOKENS || d->s_kv > STSA_MAX_TOKENS,
      err, STSA_ERR_BAD_SHAPE, "plan: s_q = %lld, s_kv = %lld, expected 1..2^40",
      (long long)d->s_q, (long long)d->s_kv);
  STSA_RETURN_IF((unsigned)d->q_order >= STSA_ORDER_COUNT_ ||
                     (unsigned)d->kv_order >= STSA_ORDER_COUNT_,
                 err, STSA_ERR_BAD_PARAM, "plan: q_order %d / kv_order %d unknown",
                 (int)d->q_order, (int)d->kv_order);
  STSA_RETURN_IF(d->q_order == STSA_ORDER_SINK_FIRST, err, STSA_ERR_BAD_PARAM,
                 "plan: SINK_FIRST is an order for keys only (q_order)");
  STSA_RETURN_IF(d->flags & ~(unsigned)STSA_PLAN_ALLOW_EMPTY_ROWS, err,
                 STSA_ERR_BAD_PARAM, "plan: unknown flags 0x%x", d->flags);
  const stsa_geometry *g = d->geometry;
  if (g) {
    const char *why = stsa_geo_check(g);
    STSA_RETURN_IF(
        why, err, STSA_ERR_BAD_SHAPE,
        "plan geometry %lld x %lld x %lld (frames x height x width) with %lld text "
        "tokens (%lld real): %s",
        (long long)g->frames, (long long)g->height, (long long)g->width,
        (long long)g->text, (long long)g->text_real, why);
    int64_t n = stsa_geometry_tokens(g);
    STSA_RETURN_IF((!d->q_rows && d->s_q != n) ||
                       (d->kv_rows ? d->s_kv > n : d->s_kv != n),
                   err, STSA_ERR_BAD_SHAPE,
                   "plan: s_q = %lld and s_kv = %lld, but the geometry has %lld tokens",
                   (long long)d->s_q, (long long)d->s_kv, (long long)n);
  } else {
    STSA_RETURN_IF(d->q_order != STSA_ORDER_NATIVE || d->kv_order != STSA_ORDER_NATIVE,
                   err, STSA_ERR_BAD_PARAM,
                   "plan: token orders other than NATIVE need a geometry");
  }
  /* With q_rows, queries are a subset of the native ones: the largest one
   * is what a dense or segment mask must cover. With kv_rows, the builder
   * walks every key of the whole kv order (of the geometry's N tokens, or
   * up to the largest entry) before restricting rows to the subset. */
  const int64_t limit = g ? stsa_geometry_tokens(g) : STSA_MAX_TOKENS;
  int64_t q_native_count = d->s_q, kv_whole = d->s_kv;
  if (d->q_rows)
    STSA_TRY(subset_check(d->q_rows, d->s_q, limit, "q_rows", &q_native_count, err));
  if (d->kv_rows) {
    STSA_TRY(subset_check(d->kv_rows, d->s_kv, limit, "kv_rows", &kv_whole, err));
    if (g)
      kv_whole = limit;
  }
  for (int64_t h = 0; h < d->heads; h++) {
    const stsa_mask *m = d->masks[h];
    STSA_RETURN_IF(!m, err, STSA_ERR_NULL_ARG, "plan: masks[%lld] is NULL", (long long)h);
    STSA_RETURN_IF(m->has_geo && !g, err, STSA_ERR_BAD_MASK,
                   "plan: head %lld has a video or text mask but no geometry was given",
                   (long long)h);
    STSA_RETURN_IF(m->has_geo && !stsa_geometry_same(&m->geometry, g), err,
                   STSA_ERR_BAD_MASK,
                   "plan: head %lld's mask was made for another geometry", (long long)h);
    const int q_bad = d->q_rows ? m->s_q >= 0 && m->s_q < q_native_count
                                : m->s_q >= 0 && m->s_q != d->s_q;
    const int kv_bad = d->kv_rows ? m->s_kv >= 0 && m->s_kv < kv_whole
                                  : m->s_kv >= 0 && m->s_kv != d->s_kv;
    STSA_RETURN_IF(
        q_bad || kv_bad, err, STSA_ERR_BAD_MASK,
        "plan: head %lld's dense, segment or cluster mask is %lld x %lld, the plan "
        "%lld x %lld",
        (long long)h, (long long)m->s_q, (long long)m->s_kv, (long long)q_native_count,
        (long long)kv_whole);
  }
  return STSA_OK;
}

static stsa_status check_grid(stsa_ctx *ctx, const stsa_plan_desc *d, int q_tile,
                              int kv_tile) {
  const int64_t q_tiles = (d->s_q + q_tile - 1) / q_tile,
                kv_tiles = (d->s_kv + kv_tile - 1) / kv_tile;
  STSA_RETURN_IF(
      kv_tiles > INT32_MAX || q_tiles > INT32_MAX, &ctx->err, STSA_ERR_BAD_SHAPE,
      "plan: %lld x %lld tiles (s_q = %lld in tiles of %d, s_kv = %lld in tiles "
      "of %d), more than the limit of 2^31 - 1 on a side",
      (long long)q_tiles, (long long)kv_tiles, (long long)d->s_q, q_tile,
      (long long)d->s_kv, kv_tile);
  return STSA_OK;
}

stsa_status stsa_plan_build_tiles(stsa_ctx *ctx, const stsa_plan_desc *caller, int q_tile,
                                  int kv_tile, stsa_plan **out) {
  if (!ctx)
    return STSA_ERR_NULL_ARG;
  STSA_RETURN_IF(!caller || !out, &ctx->err, STSA_ERR_NULL_ARG,
                 "plan: desc or out is NULL");
  STSA_RETURN_IF(q_tile < 1 || q_tile > MAX_TILE || kv_tile < 1 || kv_tile > MAX_TILE,
                 &ctx->err, STSA_ERR_BAD_PARAM, "plan: tiles %d x %d, expected 1..4096",
                 q_tile, kv_tile);
  stsa_plan_desc local;
  const stsa_plan_desc *desc = &local;
  STSA_TRY(desc_read(caller, &local, &ctx->err));
  STSA_TRY(stsa_plan_validate(ctx, desc));
  STSA_TRY(check_grid(ctx, desc, q_tile, kv_tile));
  return build(ctx, desc, q_tile, kv_tile, out);
}

stsa_status stsa_plan_build(stsa_ctx *ctx, const stsa_plan_desc *caller,
                            stsa_plan **out) {
  if (!ctx)
    return STSA_ERR_NULL_ARG;
  stsa_errbuf *err = &ctx->err;
  stsa_err_clear(err);
  STSA_RETURN_IF(!caller || !out, err, STSA_ERR_NULL_ARG, "plan: desc or out is NULL");
  stsa_plan_desc local;
  const stsa_plan_desc *desc = &local;
  STSA_TRY(desc_read(caller, &local, err));
  STSA_RETURN_IF(desc->q_tile < 0 || desc->q_tile > MAX_TILE, err, STSA_ERR_BAD_PARAM,
                 "plan: q_tile = %d, expected 0 (context default) or 1..4096",
                 desc->q_tile);
  /* The register tile of the context's kernels: q rows go in groups of mr,
   * kv tiles are whole panels of nr. */
  const int mr = ctx->run->kern.mr, nr = ctx->run->kern.nr;
  STSA_RETURN_IF(desc->kv_tile != 0 && (desc->kv_tile < nr || desc->kv_tile > MAX_TILE ||
                                        desc->kv_tile % nr != 0),
                 err, STSA_ERR_BAD_PARAM,
                 "plan: kv_tile = %d, expected 0 (context default) or a multiple of %d "
                 "(the %s kernels' panel width) in %d..4096",
                 desc->kv_tile, nr, ctx->run->kern.name, nr);
  int q_tile = desc->q_tile ? desc->q_tile : ctx->q_tile;
  q_tile = (q_tile + mr - 1) / mr * mr;
  int kv_tile = desc->kv_tile ? desc->kv_tile : ctx->kv_tile;
  STSA_TRY(stsa_plan_validate(ctx, desc));
  STSA_TRY(check_grid(ctx, desc, q_tile, kv_tile));
  /* Plans over sampled rows (q_rows) or a key shard (kv_rows) are one-shot:
   * caching them would only push reusable plans out. */
  if (desc->q_rows || desc->kv_rows)
    return build(ctx, desc, q_tile, kv_tile, out);
  uint64_t key = stsa_plan_key(desc, q_tile, kv_tile);
  stsa_plan *plan = stsa_plan_cache_find(ctx->plans, desc, q_tile, kv_tile, key);
  if (!plan) {
    STSA_TRY(build(ctx, desc, q_tile, kv_tile, &plan));
    stsa_plan_cache_insert(&ctx->plans, plan, key);
    ctx->plans_destroy = stsa_plan_cache_destroy;
  }
  *out = plan;
  return STSA_OK;
}

size_t stsa_plan_bytes(const stsa_plan *plan) {
  return plan ? ((const plan_store *)plan->arena_)->bytes : 0;
}

static const stsa_plan_part *head_part(const stsa_plan *plan, int64_t h) {
  return &plan->parts[plan->head_part[h]];
}

static void plan_stats(const stsa_plan *plan, stsa_plan_stats *st) {
  st->q_tiles = plan->q_tiles;
  st->kv_tiles = plan->kv_tiles;
  /* saturating: 2^40 heads of 2^40 x 2^40 pairs do not fit an int64 */
  st->tiles_total =
      stsa_mul_sat(plan->heads, stsa_mul_sat(plan->q_tiles, plan->kv_tiles));
  st->pairs_total = stsa_mul_sat(plan->heads, stsa_mul_sat(plan->s_q, plan->s_kv));
  for (int64_t h = 0; h < plan->heads; h++) {
    const stsa_plan_part *part = head_part(plan, h);
    st->tiles_active += part->bs.entries;
    st->tiles_partial += part->partial_entries;
    st->pairs_kept = stsa_add_sat(st->pairs_kept, part->kept_pairs);
  }
  st->distinct_masks = plan->parts_count;
  st->distinct_partials = ((const plan_store *)plan->arena_)->distinct_patterns;
}

stsa_status stsa_plan_get_stats(const stsa_plan *plan, stsa_plan_stats *st) {
  if (!plan || !st)
    return STSA_ERR_NULL_ARG;
  stsa_errbuf err;
  STSA_TRY(STSA_SIZED_CHECK_OUT(st, stsa_plan_stats, &err));
  stsa_plan_stats out = STSA_INIT(stsa_plan_stats);
  plan_stats(plan, &out);
  stsa_sized_write(st, &out, sizeof out);
  return STSA_OK;
}

stsa_status stsa_plan_head_stats(const stsa_plan *plan, int64_t h, int64_t *tiles_active,
                                 int64_t *tiles_partial, int64_t *pairs_kept) {
  if (!plan)
    return STSA_ERR_NULL_ARG;
  if (h < 0 || h >= plan->heads)
    return STSA_ERR_BAD_PARAM;
  const stsa_plan_part *part = head_part(plan, h);
  if (tiles_active)
    *tiles_active = part->bs.entries;
  if (tiles_partial)
    *tiles_partial = part->partial_entries;
  if (pairs_kept)
    *pairs_kept = part->kept_pairs;
  return STSA_OK;
}

_Static_assert(sizeof(stsa_tile_kind) == sizeof(int),
               "stsa_plan_tile_kind returns what the int it returned held");
stsa_tile_kind stsa_plan_tile_kind(const stsa_plan *plan, int64_t h, int64_t qt,
                                   int64_t kt) {
  if (!plan || h < 0 || h >= plan->heads || qt < 0 || qt >= plan->q_tiles || kt < 0 ||
      kt >= plan->kv_tiles)
    return STSA_TILE_NONE;
  const stsa_plan_part *part = head_part(plan, h);
  int64_t lo = part->bs.tile_ptr[qt], hi = part->bs.tile_ptr[qt + 1];
  while (lo < hi) { /* kv tiles ascend within a q tile */
    int64_t mid = lo + (hi - lo) / 2;
    if (part->bs.kv_tile[mid] < kt)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < part->bs.tile_ptr[qt + 1] && part->bs.kv_tile[lo] == kt
             ? (stsa_tile_kind)part->bs.kind[lo]
             : STSA_TILE_EMPTY;
}

/* ---- storage for other builders ------------------------------------------ */
stsa_plan *stsa_plan_new(void) {
  plan_store *s = calloc(1, sizeof *s);
  stsa_plan *p = s ? store_alloc(s, sizeof *p) : NULL;
  if (!p) {
    store_free(s);
    return NULL;
  }
  memset(p, 0, sizeof *p);
  p->arena_ = s;
  atomic_init(&p->refcount, 1);
  return p;
}

void *stsa_plan_alloc(stsa_plan *plan, size_t n) { return store_alloc(plan->arena_, n); }
