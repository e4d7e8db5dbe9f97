/* plan_oracle.c — brute-force checks of a plan (see plan_oracle.h). */
#include "plan_oracle.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Counts one mismatch; the first of all is described in o->first. */
__attribute__((format(printf, 3, 4))) static void mismatch(plan_oracle *o, long *counter,
                                                           const char *fmt, ...) {
  if (plan_oracle_bad(o) == 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(o->first, sizeof o->first, fmt, ap);
    va_end(ap);
  }
  (*counter)++;
}

static int64_t native(const int64_t *map, int64_t pos) { return map ? map[pos] : pos; }

/* Pattern `id` of a partial tile against the mask, cell by cell. Intervals
 * must be canonical: sorted, disjoint and apart (lo > the previous hi),
 * 0 <= lo < hi <= cols. */
static void check_pattern(plan_oracle *o, const stsa_block_sparse *bs, int32_t id,
                          int rows, int cols, const stsa_mask *m, const int64_t *qn,
                          const int64_t *kn, int64_t q0, int64_t k0, const char *where) {
  if (id < 0 || id >= bs->patterns) {
    mismatch(o, &o->bad_pattern, "%s: pattern id %d out of 0..%d", where, (int)id,
             (int)bs->patterns - 1);
    return;
  }
  const stsa_tile_pattern *pat = &bs->pattern_list[id];
  if (pat->rows != rows)
    mismatch(o, &o->bad_pattern, "%s: pattern of %d rows for a tile of %d", where,
             (int)pat->rows, rows);
  uint8_t *in = malloc((size_t)cols);
  for (int r = 0; r < rows && r < pat->rows; r++) {
    memset(in, 0, (size_t)cols);
    int prev_hi = -1;
    for (int32_t k = pat->row_ptr[r]; k < pat->row_ptr[r + 1]; k++) {
      const int lo = pat->iv[2 * k], hi = pat->iv[2 * k + 1];
      if (lo <= prev_hi || lo >= hi || hi > cols)
        mismatch(o, &o->bad_pattern, "%s row %d: interval [%d, %d) not canonical", where,
                 r, lo, hi);
      prev_hi = hi;
      for (int c = lo; c < hi && c < cols; c++)
        in[c] = 1;
    }
    for (int c = 0; c < cols; c++)
      if (in[c] != stsa_mask_keep(m, native(qn, q0 + r), native(kn, k0 + c)))
        mismatch(o, &o->bad_pattern, "%s: pair (%d, %d) is %s in the pattern", where, r,
                 c, in[c] ? "kept" : "dropped");
  }
  free(in);
}

int64_t plan_oracle_head(plan_oracle *o, const stsa_plan *p, int64_t h,
                         const stsa_mask *m, const int64_t *q_native,
                         const int64_t *kv_native) {
  const stsa_plan_part *part = &p->parts[p->head_part[h]];
  const stsa_block_sparse *bs = &part->bs;
  char where[96];
  if (part->mask != m && !stsa_mask_equal(part->mask, m))
    mismatch(o, &o->bad_count, "head %lld: mapped to a part with another mask",
             (long long)h);
  int64_t total = 0;
  for (int64_t qt = 0; qt < p->q_tiles; qt++) {
    const int64_t q0 = qt * p->q_tile, end = bs->tile_ptr[qt + 1];
    const int rows = (int)(p->s_q - q0 < p->q_tile ? p->s_q - q0 : p->q_tile);
    int64_t e = bs->tile_ptr[qt]; /* the entry the next active tile must be */
    for (int64_t kt = 0; kt < p->kv_tiles; kt++) {
      const int64_t k0 = kt * p->kv_tile;
      const int cols = (int)(p->s_kv - k0 < p->kv_tile ? p->s_kv - k0 : p->kv_tile);
      int64_t kept = 0;
      for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++)
          kept += stsa_mask_keep(m, native(q_native, q0 + r), native(kv_native, k0 + c));
      total += kept;
      snprintf(where, sizeof where, "head %lld tile (%lld, %lld)", (long long)h,
               (long long)qt, (long long)kt);
      const int want = kept == 0 ? 0 : kept == (int64_t)rows * cols ? 2 : 1;
      const int got = stsa_plan_tile_kind(p, h, qt, kt);
      if (got != want)
        mismatch(o, &o->bad_kind, "%s: kind %d, expected %d", where, got, want);
      if (want == 0)
        continue;
      if (e >= end || bs->kv_tile[e] != kt) {
        mismatch(o, &o->bad_count, "%s: active but not the next CSR entry", where);
        continue;
      }
      if (bs->kind[e] != want)
        mismatch(o, &o->bad_count, "%s: CSR kind %d, expected %d", where,
                 (int)bs->kind[e], want);
      if (part->rounded_kept[e] != kept)
        mismatch(o, &o->bad_count, "%s: %lld kept pairs stored, %lld by brute force",
                 where, (long long)part->rounded_kept[e], (long long)kept);
      if (want == 1)
        check_pattern(o, bs, bs->pattern[e], rows, cols, m, q_native, kv_native, q0, k0,
                      where);
      else if (bs->pattern[e] != -1)
        mismatch(o, &o->bad_count, "%s: a full tile with pattern %d", where,
                 (int)bs->pattern[e]);
      e++;
    }
    if (e != end)
      mismatch(o, &o->bad_count,
               "head %lld q tile %lld: %lld CSR entries beyond the active tiles",
               (long long)h, (long long)qt, (long long)(end - e));
  }
  if (total != part->kept_pairs)
    mismatch(o, &o->bad_count, "head %lld: %lld kept pairs stored, %lld by brute force",
             (long long)h, (long long)part->kept_pairs, (long long)total);
  return total;
}

static int same_pattern(const stsa_tile_pattern *x, const stsa_tile_pattern *y) {
  return x->rows == y->rows && x->row_ptr[x->rows] == y->row_ptr[y->rows] &&
         !memcmp(x->row_ptr, y->row_ptr, sizeof(int32_t) * (size_t)(x->rows + 1)) &&
         !memcmp(x->iv, y->iv, 2 * sizeof *x->iv * (size_t)x->row_ptr[x->rows]);
}

void plan_oracle_dedup(plan_oracle *o, const stsa_plan *p) {
  int64_t total = 0, distinct = 0, n = 0;
  for (int32_t a = 0; a < p->parts_count; a++)
    total += p->parts[a].bs.patterns;
  const stsa_tile_pattern **all = malloc(sizeof *all * (size_t)(total + 1));
  for (int32_t a = 0; a < p->parts_count; a++)
    for (int32_t i = 0; i < p->parts[a].bs.patterns; i++)
      all[n++] = &p->parts[a].bs.pattern_list[i];
  for (int64_t i = 0; i < n; i++) {
    int new_storage = 1;
    for (int64_t j = 0; j < i; j++) {
      const int shared = all[i]->row_ptr == all[j]->row_ptr;
      if (same_pattern(all[i], all[j]) != shared)
        mismatch(o, &o->bad_pattern, "patterns %lld and %lld: %s", (long long)j,
                 (long long)i,
                 shared ? "share storage but differ" : "equal, stored twice");
      new_storage &= !shared;
    }
    distinct += new_storage;
  }
  free(all);
  stsa_plan_stats st = STSA_INIT(stsa_plan_stats);
  stsa_plan_get_stats(p, &st);
  if (st.distinct_partials != distinct)
    mismatch(o, &o->bad_count, "stats count %lld distinct partials, storage holds %lld",
             (long long)st.distinct_partials, (long long)distinct);
}

int plan_oracle_empty_row(const stsa_plan_desc *d, int64_t h, const int64_t *q_native,
                          const int64_t *kv_native) {
  for (int64_t q = 0; q < d->s_q; q++) {
    int any = 0;
    for (int64_t k = 0; k < d->s_kv && !any; k++)
      any = stsa_mask_keep(d->masks[h], native(q_native, q), native(kv_native, k));
    if (!any)
      return 1;
  }
  return 0;
}
