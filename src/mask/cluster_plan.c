/* cluster_plan.c — see cluster_plan.h. */
#include "mask/cluster_plan.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernel/dispatch.h"
#include "mask/geometry.h"
#include "mask/mask.h"
#include "mask/plan_build.h"

/* Tokens grouped and sorted: groups 0..clusters-1 are the clusters, then
 * real text, then padding text. */
typedef struct grouping {
  int64_t groups;
  int64_t *start;  /* [groups + 1] first position of each group */
  int64_t *perm;   /* [N] position -> native token */
  int64_t *tile0;  /* [groups + 1] first tile of each group */
  int64_t *bounds; /* [tiles + 1] tile position bounds */
  int64_t tiles;
} grouping;

/* Group of native token i; -1 for a video token without a label, or a
 * label out of range. */
static int64_t group_of(const stsa_geo *geo, const int32_t *label, int64_t clusters,
                        int64_t i) {
  const stsa_tok_kind kind = stsa_geo_kind(geo, i);
  if (kind == STSA_TOK_VIDEO)
    return label[i] >= 0 && label[i] < clusters ? label[i] : -1;
  return kind == STSA_TOK_TEXT_REAL ? clusters : clusters + 1;
}

/* Counting sort of the tokens by group (stable), then each group cut into
 * ceil(size / tile) tiles of near-equal size, each but the last a multiple
 * of `align` (the kernels' mr or nr, which a tile is padded to): a group
 * then pads once, not once per tile. */
static stsa_status group_tokens(stsa_plan *p, const stsa_geo *geo, const int32_t *label,
                                int64_t clusters, int tile, int align, grouping *gr,
                                stsa_errbuf *err, const char *what) {
  const int64_t G = clusters + 2, N = geo->N;
  gr->groups = G;
  gr->start = stsa_plan_alloc(p, sizeof(int64_t) * (size_t)(G + 1));
  gr->tile0 = stsa_plan_alloc(p, sizeof(int64_t) * (size_t)(G + 1));
  gr->perm = stsa_plan_alloc(p, sizeof(int64_t) * (size_t)N);
  int64_t *next = malloc(sizeof(int64_t) * (size_t)(G + 1));
  if (!gr->start || !gr->tile0 || !gr->perm || !next) {
    free(next);
    return stsa_fail(err, STSA_ERR_OUT_OF_MEMORY, "cluster plan: out of memory");
  }
  memset(next, 0, sizeof(int64_t) * (size_t)(G + 1));
  for (int64_t i = 0; i < N; i++) {
    int64_t g = group_of(geo, label, clusters, i);
    if (g < 0) {
      free(next);
      return stsa_fail(err, STSA_ERR_BAD_PARAM,
                       "cluster plan: video token %lld has %s label %d, expected 0..%lld",
                       (long long)i, what, (int)label[i], (long long)clusters - 1);
    }
    next[g + 1]++;
  }
  for (int64_t g = 0; g < G; g++)
    next[g + 1] += next[g];
  memcpy(gr->start, next, sizeof(int64_t) * (size_t)(G + 1));
  for (int64_t i = 0; i < N; i++)
    gr->perm[next[group_of(geo, label, clusters, i)]++] = i;
  free(next);
  gr->tile0[0] = 0;
  for (int64_t g = 0; g < G; g++) {
    int64_t size = gr->start[g + 1] - gr->start[g];
    gr->tile0[g + 1] = gr->tile0[g] + (size + tile - 1) / tile;
  }
  gr->tiles = gr->tile0[G];
  gr->bounds = stsa_plan_alloc(p, sizeof(int64_t) * (size_t)(gr->tiles + 1));
  if (!gr->bounds)
    return stsa_fail(err, STSA_ERR_OUT_OF_MEMORY, "cluster plan: out of memory");
  for (int64_t g = 0; g < G; g++) {
    const int64_t size = gr->start[g + 1] - gr->start[g],
                  n = gr->tile0[g + 1] - gr->tile0[g];
    /* at most tile: tile is a multiple of align, and n tiles of it hold size */
    const int64_t each = n ? ((size + n - 1) / n + align - 1) / align * align : 0;
    for (int64_t t = 0; t < n; t++)
      gr->bounds[gr->tile0[g] + t] = gr->start[g] + t * each;
  }
  gr->bounds[gr->tiles] = N;
  return STSA_OK;
}

/* Whether query group gq sees key group gk (the text rules of stsa_mask_text
 * around the kept rectangles). */
static int sees(const stsa_cluster_layout *c, int64_t gq, int64_t gk) {
  const int64_t QC = c->q_clusters, KC = c->kv_clusters;
  if (gq == QC + 1 || gk == KC + 1) /* padding sees padding only */
    return gq == QC + 1 && gk == KC + 1;
  if (gq == QC || gk == KC) /* real text rows and columns */
    return 1;
  return c->keep[gq * KC + gk] != 0;
}

static int64_t group_size(const grouping *gr, int64_t g) {
  return gr->start[g + 1] - gr->start[g];
}

/* The block structure: per q tile, the kv tiles of every key group its
 * query group sees, all FULL. */
static stsa_status fill_structure(stsa_plan *p, const stsa_cluster_layout *c,
                                  const grouping *qg, const grouping *kg, int pack_align,
                                  stsa_errbuf *err) {
  stsa_plan_part *part = &p->parts[0];
  stsa_block_sparse *bs = &part->bs;
  int64_t entries = 0, kept = 0;
  for (int64_t gq = 0; gq < qg->groups; gq++) {
    if (!group_size(qg, gq))
      continue;
    int64_t cols = 0, tiles = 0;
    for (int64_t gk = 0; gk < kg->groups; gk++)
      if (sees(c, gq, gk)) {
        cols += group_size(kg, gk);
        tiles += kg->tile0[gk + 1] - kg->tile0[gk];
      }
    STSA_RETURN_IF(cols == 0, err, STSA_ERR_EMPTY_ROW,
                   "cluster plan: query cluster %lld keeps no key", (long long)gq);
    entries += tiles * (qg->tile0[gq + 1] - qg->tile0[gq]);
    kept += cols * group_size(qg, gq);
  }
  bs->q_tiles = qg->tiles;
  bs->entries = entries;
  bs->tile_ptr = stsa_plan_alloc(p, sizeof(int64_t) * (size_t)(qg->tiles + 1));
  bs->kv_tile = stsa_plan_alloc(p, sizeof(int32_t) * (size_t)(entries + 1));
  bs->kind = stsa_plan_alloc(p, (size_t)entries + 1);
  bs->pattern = stsa_plan_alloc(p, sizeof(int32_t) * (size_t)(entries + 1));
  int64_t *pack = stsa_plan_alloc(p, sizeof(int64_t) * (size_t)(kg->tiles + 1));
  STSA_RETURN_IF(!bs->tile_ptr || !bs->kv_tile || !bs->kind || !bs->pattern || !pack, err,
                 STSA_ERR_OUT_OF_MEMORY, "cluster plan: out of memory");
  memset(bs->kind, STSA_TILE_FULL, (size_t)entries);
  for (int64_t e = 0; e < entries; e++)
    bs->pattern[e] = -1;
  int64_t e = 0;
  bs->tile_ptr[0] = 0;
  for (int64_t gq = 0; gq < qg->groups; gq++)
    for (int64_t qt = qg->tile0[gq]; qt < qg->tile0[gq + 1]; qt++) {
      for (int64_t gk = 0; gk < kg->groups; gk++)
        if (sees(c, gq, gk))
          for (int64_t kt = kg->tile0[gk]; kt < kg->tile0[gk + 1]; kt++)
            bs->kv_tile[e++] = (int32_t)kt;
      bs->tile_ptr[qt + 1] = e;
    }
  /* each kv tile starts at a panel boundary of the packed K/V (pack_align:
   * a multiple of nr) */
  pack[0] = 0;
  for (int64_t kt = 0; kt < kg->tiles; kt++) {
    int64_t len = kg->bounds[kt + 1] - kg->bounds[kt];
    pack[kt + 1] = pack[kt] + (len + pack_align - 1) / pack_align * pack_align;
  }
  bs->q_start = qg->bounds;
  bs->kv_tiles = kg->tiles;
  bs->kv_start = kg->bounds;
  bs->kv_pack = pack;
  part->partial_entries = 0;
  part->kept_pairs = kept;
  return STSA_OK;
}

stsa_status stsa_cluster_plan_build(const stsa_ctx *ctx, const stsa_cluster_layout *c,
                                    const stsa_mask *mask, stsa_plan **out,
                                    stsa_errbuf *err) {
  const int nr = ctx->run->kern.nr, mr = ctx->run->kern.mr;
  STSA_RETURN_IF(c->q_tile < mr || c->q_tile % mr || c->kv_tile < nr || c->kv_tile % nr,
                 err, STSA_ERR_BAD_PARAM,
                 "cluster plan: tiles %d x %d must be multiples of %d x %d", c->q_tile,
                 c->kv_tile, mr, nr);
  STSA_RETURN_IF(c->pack_align < 0 || c->pack_align % nr, err, STSA_ERR_BAD_PARAM,
                 "cluster plan: pack_align %d must be 0 or a multiple of %d",
                 c->pack_align, nr);
  STSA_RETURN_IF(c->q_clusters < 1 || c->kv_clusters < 1 || c->q_clusters > INT32_MAX ||
                     c->kv_clusters > INT32_MAX,
                 err, STSA_ERR_BAD_PARAM,
                 "cluster plan: %lld x %lld clusters, expected 1..2^31 - 1 each",
                 (long long)c->q_clusters, (long long)c->kv_clusters);
  stsa_geo geo;
  stsa_geo_init(&geo, c->g);
  stsa_plan *p = stsa_plan_new();
  STSA_RETURN_IF(!p, err, STSA_ERR_OUT_OF_MEMORY, "cluster plan: out of memory");
  grouping qg = {0}, kg = {0};
  stsa_status st = STSA_OK;
  p->parts = stsa_plan_alloc(p, sizeof(stsa_plan_part));
  p->head_part = stsa_plan_alloc(p, sizeof(int32_t));
  if (!p->parts || !p->head_part)
    st = stsa_fail(err, STSA_ERR_OUT_OF_MEMORY, "cluster plan: out of memory");
  if (st == STSA_OK) {
    memset(p->parts, 0, sizeof(stsa_plan_part));
    p->head_part[0] = 0;
    st = group_tokens(p, &geo, c->q_label, c->q_clusters, c->q_tile, mr, &qg, err,
                      "query");
  }
  if (st == STSA_OK)
    st = group_tokens(p, &geo, c->k_label, c->kv_clusters, c->kv_tile, nr, &kg, err,
                      "key");
  if (st == STSA_OK)
    st = fill_structure(p, c, &qg, &kg, c->pack_align ? c->pack_align : nr, err);
  if (st != STSA_OK) {
    stsa_plan_free(p);
    return st;
  }
  p->s_q = p->s_kv = geo.N;
  p->heads = 1;
  p->q_tile = c->q_tile;
  p->kv_tile = c->kv_tile;
  p->q_tiles = qg.tiles;
  p->kv_tiles = kg.tiles;
  p->q_order = p->kv_order = STSA_ORDER_NATIVE; /* the maps below are the order */
  p->geometry = *c->g;
  p->has_geometry = 1;
  p->q_native = qg.perm;
  p->kv_native = p->kv_token = kg.perm;
  p->parts_count = 1;
  p->parts[0].mask = stsa_mask_ref(mask);
  *out = p;
  return STSA_OK;
}
