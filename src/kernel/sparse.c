/* sparse.c — see sparse.h. */
#include "kernel/sparse.h"

#include <string.h>

#include "kernel/tile_spans.h"

/* Entry `entry` of q tile `qt`'s list in bs: drops every column outside its
 * stored row intervals. */
static void apply_entry_pattern(const stsa_block_sparse *bs, int64_t qt, int64_t entry,
                                int r0, int rows, int n, float *s, int ld_s) {
  int64_t e = bs->tile_ptr[qt] + entry;
  stsa_apply_tile_pattern(&bs->pattern_list[bs->pattern[e]], r0, rows, n, s, ld_s);
}

static const stsa_sparse_head *head_of(const stsa_sparse_run *run, int64_t head) {
  return &run->heads[head % run->pb->H];
}

/* The stored patterns (exact mode); mask_ctx is the part's unit buffer. */
static void apply_pattern(const void *mask_ctx, int64_t entry, int64_t q0, int r0,
                          int rows, int64_t k0, int n, float *s, int ld_s) {
  (void)q0;
  (void)k0;
  const stsa_unit_buf *buf = mask_ctx;
  apply_entry_pattern(head_of(buf->ud, buf->head)->bs, buf->qt, entry, r0, rows, n, s,
                      ld_s);
}

static void sparse_unit(const void *ud, int64_t head, int64_t qt, stsa_unit_buf *buf,
                        stsa_kv_list *list, stsa_unit *out) {
  const stsa_sparse_head *sh = head_of(ud, head);
  const stsa_block_sparse *bs = sh->bs;
  if (qt >= bs->q_tiles) { /* a head with fewer variable q tiles than others */
    out->none = 1;
    return;
  }
  const int64_t e0 = bs->tile_ptr[qt], e1 = bs->tile_ptr[qt + 1];
  list->tiles = bs->kv_tile + e0;
  list->count = (int32_t)(e1 - e0);
  list->kinds = bs->kind + e0;
  if (sh->all_partial) {
    memset(buf->kinds, STSA_TILE_PARTIAL, (size_t)(e1 - e0));
    list->kinds = buf->kinds;
  }
  list->mask = sh->mask ? sh->mask : apply_pattern;
  list->mask_ctx = sh->mask ? sh->mask_ctx : (const void *)buf;
  list->q_rows = sh->q_rows;
  list->kv_rows = sh->kv_rows;
  out->layout = (stsa_tile_layout){bs->q_start, bs->kv_start, bs->kv_pack, NULL, NULL};
  /* the stored patterns are the mask (a structure may have none) */
  if (!sh->mask && !sh->all_partial && bs->pattern) {
    out->layout.pattern = bs->pattern + e0;
    out->layout.patterns = bs->pattern_list;
  }
  out->list = list;
}

/* Fixed tiles are all alike: a unit costs its visited tiles (and the q tile
 * itself). Variable ones differ, clusters being of any size: then a unit
 * costs its rows times its computed columns, plus what each tile and the q
 * tile cost beyond their columns, about one panel each. */
static int64_t sparse_cost(const void *ud, int64_t head, int64_t qt) {
  const stsa_sparse_run *run = ud;
  const stsa_attn_problem *pb = run->pb;
  const stsa_block_sparse *bs = head_of(run, head)->bs;
  if (!pb->q_tiles_max)
    return bs->tile_ptr[qt + 1] - bs->tile_ptr[qt] + 1;
  if (qt >= bs->q_tiles)
    return 0;
  int64_t q0, cols = pb->nr;
  const int rows = stsa_q_rows_of(pb, bs->q_start, qt, &q0);
  for (int64_t e = bs->tile_ptr[qt]; e < bs->tile_ptr[qt + 1]; e++) {
    const stsa_kv_span sp =
        stsa_kv_span_of(pb, bs->kv_start, bs->kv_pack, bs->kv_tile[e]);
    cols += (sp.n + pb->nr - 1) / pb->nr * pb->nr + pb->nr;
  }
  return (rows + pb->mr - 1) / pb->mr * pb->mr * cols;
}

/* Only the kv tiles some q tile of the head visits are packed. */
static void sparse_used(const void *ud, int64_t head, uint8_t *used) {
  const stsa_sparse_run *run = ud;
  const stsa_block_sparse *bs = head_of(run, head)->bs;
  memset(used, 0, (size_t)stsa_kv_tiles(run->pb));
  for (int64_t e = 0; e < bs->entries; e++)
    used[bs->kv_tile[e]] = 1;
}

static stsa_kv_layout sparse_kv_layout(const void *ud, int64_t head) {
  const stsa_sparse_head *sh = head_of(ud, head);
  return (stsa_kv_layout){sh->kv_rows, sh->bs->kv_start, sh->bs->kv_pack};
}

static const stsa_work_ops SPARSE_OPS = {sparse_unit, sparse_cost, sparse_used,
                                         sparse_kv_layout};

stsa_work stsa_sparse_work(stsa_sparse_run *run, const stsa_attn_problem *pb,
                           const stsa_sparse_head *heads, int ref) {
  run->pb = pb;
  run->heads = heads;
  stsa_work w = {pb, pb->B * pb->H, stsa_q_tiles(pb), ref, 0, &SPARSE_OPS, run};
  return w;
}

/* ---- profiling rows ------------------------------------------------------ */
static const stsa_block_sparse *rows_bs(const stsa_rows_run *run, int64_t i,
                                        int64_t head) {
  return run->bs_of_head[i] ? run->bs_of_head[i][head] : run->bs[i];
}

/* mask_ctx is the part's unit buffer: its qt is the structure's index. */
static void apply_rows_pattern(const void *mask_ctx, int64_t entry, int64_t q0, int r0,
                               int rows, int64_t k0, int n, float *s, int ld_s) {
  (void)q0;
  (void)k0;
  const stsa_unit_buf *buf = mask_ctx;
  const stsa_rows_run *run = buf->ud;
  apply_entry_pattern(rows_bs(run, buf->qt, buf->head), 0, entry, r0, rows, n, s, ld_s);
}

static void rows_unit(const void *ud, int64_t head, int64_t i, stsa_unit_buf *buf,
                      stsa_kv_list *list, stsa_unit *out) {
  const stsa_rows_run *run = ud;
  const stsa_block_sparse *bs = rows_bs(run, i, head);
  const int64_t e0 = bs->tile_ptr[0];
  *list = (stsa_kv_list){.tiles = bs->kv_tile + e0,
                         .kinds = bs->kind + e0,
                         .count = (int32_t)(bs->tile_ptr[1] - e0),
                         .mask = apply_rows_pattern,
                         .mask_ctx = buf};
  out->layout.pattern = bs->pattern + e0;
  out->layout.patterns = bs->pattern_list;
  out->pb = run->pb[i];
  out->b = 0;
  out->h = head;
  out->qt = 0;
  out->list = list;
}

static const stsa_work_ops ROWS_OPS = {rows_unit, NULL, NULL, NULL};

stsa_work stsa_rows_work(const stsa_rows_run *run, int ref) {
  /* a few rows per plan: packing the head is the work, so parts cut between heads */
  stsa_work w = {run->pb[0], run->pb[0]->H, run->n, ref, 1, &ROWS_OPS, run};
  return w;
}
