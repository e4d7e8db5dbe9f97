/* tile_f32.c — see tile_f32.h. */
#include "kernel/tile_f32.h"

#include <math.h>
#include <string.h>

#include "kernel/tile_spans.h"
#include "kernel/tile_values.h"

/* Marks every -inf score of the tile kept (see KEPT_NEG_INF); the mask then
 * writes -inf for the dropped pairs only. */
static void mark_neg_inf_kept(float *s, int ld_s, int rows, int n) {
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < n; c++)
      if (s[(int64_t)r * ld_s + c] == -INFINITY)
        s[(int64_t)r * ld_s + c] = KEPT_NEG_INF;
}

/* A PARTIAL tile whose V holds NaN/Inf: a dropped key has weight 0, and
 * 0 * NaN would still reach the row. Copies the tile's V panels into v_safe
 * with NaN/Inf as 0, lists the keys that had some, and records which rows
 * keep them (the mask has run; kept -inf logits are marked). Returns the
 * number of such keys. */
static int screen_v_tile(const stsa_attn_problem *pb, const stsa_kv_packed *kv,
                         int64_t pack0, int n, int rows, int ld_s,
                         stsa_tile_scratch *sc) {
  const int panels = pb->D_pad / pb->nr;
  int nbad = 0;
  for (int t = 0; t < n; t++) {
    int bad = 0;
    for (int j = 0; j < panels; j++) {
      const float *src = kv->vp + ((int64_t)j * pb->Skv_pad + pack0 + t) * pb->nr;
      float *dst = sc->v_safe + ((int64_t)j * pb->kv_tile + t) * pb->nr;
      for (int c = 0; c < pb->nr; c++) {
        int finite = isfinite(src[c]) != 0;
        dst[c] = finite ? src[c] : 0.0f;
        bad |= !finite;
      }
    }
    if (bad)
      sc->bad_keys[nbad++] = t;
  }
  for (int r = 0; r < rows; r++)
    for (int i = 0; i < nbad; i++)
      sc->kept[(int64_t)r * pb->kv_tile + i] =
          sc->s[(int64_t)r * ld_s + sc->bad_keys[i]] != -INFINITY;
  return nbad;
}

/* Adds what screen_v_tile held back for the rows that keep those keys:
 * p * NaN/Inf, whatever p is (0 * NaN is NaN, as in SDPA). */
static void add_nonfinite_v(const stsa_attn_problem *pb, const stsa_kv_packed *kv,
                            int64_t pack0, int rows, int nbad, int ld_s,
                            stsa_tile_scratch *sc) {
  for (int i = 0; i < nbad; i++) {
    const int t = sc->bad_keys[i];
    for (int r = 0; r < rows; r++) {
      if (!sc->kept[(int64_t)r * pb->kv_tile + i])
        continue;
      const float p = sc->s[(int64_t)r * ld_s + t];
      float *o = sc->o + (int64_t)r * pb->D_pad;
      for (int d = 0; d < pb->D; d++) {
        float x = kv->vp[((int64_t)(d / pb->nr) * pb->Skv_pad + pack0 + t) * pb->nr +
                         d % pb->nr];
        if (!isfinite(x))
          o[d] += p * x;
      }
    }
  }
}

/* The row maxima qk folded over a ragged span (n not a multiple of nr)
 * also saw the last panel's padding columns, whose scores are 0 (zero K^T
 * columns): each fold is max(true maximum, 0). A positive fold is then the
 * true maximum; the rows whose fold is not (all their scores <= 0: rare)
 * take it from their n scores. Makes tmax exact for the softmax, which
 * then skips its pass over the scores, with the same maxima, so the same
 * results. Only for spans whose scores hold no NaN (safe ones). */
static void exact_ragged_max(const float *s, int ld_s, int rows, int n, float *tmax) {
  for (int r = 0; r < rows; r++) {
    if (tmax[r] > 0.0f)
      continue;
    const float *row = s + (int64_t)r * ld_s;
    float mx = -INFINITY;
    for (int c = 0; c < n; c++)
      mx = row[c] > mx ? row[c] : mx;
    tmax[r] = mx;
  }
}

/* The kernels for a row block of `left` valid rows: the table's half ones
 * where they fit (kernels.h: half), so a q tile's last block does not
 * compute a whole register tile of padding rows. */
static const stsa_kernels *block_kernels(const stsa_kernels *k, int left) {
  return k->half && left <= k->half->mr ? k->half : k;
}

/* A FULL tile, one block of mr rows at a time: its scores (mr x n, 12 KB
 * for 12 rows of a 256-key tile), q rows and output rows stay in L1 from
 * Q.K^T through softmax to P.V, and only the K^T and V panels stream from
 * L2, in order. Every block reuses the first mr rows of the score buffer,
 * which keeps the tile's L2 footprint to its K^T and V panels, q and o.
 * Computed tile-wide, the scores (q_tile x kv_tile, ~190 KB) and q rows
 * streamed from L2 between the three steps (the AVX2 build ran 2-5% slower
 * that way; docs/benchmarks.md). Each row's arithmetic is the same either
 * way, so results are bitwise equal. */
static void run_full_tile(const stsa_attn_problem *pb, const float *kt, const float *vp,
                          int64_t ld_panel, int rows, int rows_pad, int n, int ld_s,
                          int safe, stsa_tile_scratch *sc) {
  const stsa_kernels *kern = pb->kern;
  const int D = pb->D, D_pad = pb->D_pad, nr = pb->nr, mr = pb->mr;
  const int npanels = (n + nr - 1) / nr;
  /* the folded maxima are exact for a safe tile (a ragged one's once
   * exact_ragged_max has looked again); an unsafe one may keep -inf logits,
   * marked below, and the softmax finds its maxima itself */
  const int exact_max = safe;
  for (int r = 0; r < rows_pad; r += mr) {
    float *s = sc->s, *tmax = sc->tile_max + r;
    const int block_rows = rows - r < mr ? rows - r : mr;
    const stsa_kernels *bk = block_kernels(kern, block_rows);
    for (int i = 0; i < mr; i++)
      tmax[i] = -INFINITY;
    stsa_qk_panels(bk, sc->q + (int64_t)r * D, D, kt, npanels, s, ld_s, tmax);
    if (!safe)
      mark_neg_inf_kept(s, ld_s, block_rows, n);
    else if (n % nr != 0)
      exact_ragged_max(s, ld_s, block_rows, n, tmax);
    bk->softmax(s, ld_s, bk->mr, n, sc->m + r, sc->l + r, sc->alpha + r,
                exact_max ? tmax : NULL);
    stsa_pv_panels(bk, s, ld_s, n, vp, ld_panel * nr, D_pad / nr,
                   sc->o + (int64_t)r * D_pad, D_pad, sc->alpha + r);
  }
}

void stsa_tile_qk_f32(const stsa_attn_problem *pb, const float *q, const float *kt,
                      int npanels, int rows_pad, float *s, int ld_s, float *tile_max) {
  const stsa_kernels *kern = pb->kern;
  const int D = pb->D, nr = pb->nr;
  for (int r = 0; r < rows_pad; r++)
    tile_max[r] = -INFINITY;
  for (int p = 0, take; p < npanels; p += take) {
    take = stsa_panel_step(kern->qk2 != NULL, npanels - p);
    for (int r = 0; r < rows_pad; r += pb->mr)
      stsa_qk_panels(kern, q + (int64_t)r * D, D, kt + (int64_t)p * D * nr, take,
                     s + (int64_t)r * ld_s + p * nr, ld_s, tile_max + r);
  }
}

void stsa_tile_pv_f32(const stsa_attn_problem *pb, const float *s, int ld_s, int n,
                      const float *vp, int64_t ld_panel, int rows_pad, float *o,
                      const float *alpha) {
  const stsa_kernels *kern = pb->kern;
  const int D_pad = pb->D_pad, nr = pb->nr;
  for (int j = 0, take; j < D_pad / nr; j += take) {
    take = stsa_panel_step(kern->pv2 != NULL, D_pad / nr - j);
    for (int r = 0; r < rows_pad; r += pb->mr)
      stsa_pv_panels(kern, s + (int64_t)r * ld_s, ld_s, n, vp + j * ld_panel * nr,
                     ld_panel * nr, take, o + (int64_t)r * D_pad + j * nr, D_pad,
                     alpha + r);
  }
}

/* A PARTIAL tile decided by its list's mask, tile-wide: Q.K^T, the mask,
 * softmax and P.V over all rows_pad rows. The folded maxima count masked
 * pairs and the zero scores of padding columns, so the softmax finds its
 * maxima again. An unsafe tile has its -inf scores marked kept before the
 * mask runs; a tile whose V holds NaN/Inf has them kept out of the dropped
 * pairs (screen_v_tile, add_nonfinite_v). */
static void run_partial_tile(const stsa_attn_problem *pb, const stsa_kv_packed *kv,
                             const stsa_tile_visit *t, const float *kt, int ld_s,
                             stsa_tile_scratch *sc) {
  const stsa_kv_span *sp = &t->sp;
  const int n = sp->n, npanels = (n + pb->nr - 1) / pb->nr;
  stsa_tile_qk_f32(pb, sc->q, kt, npanels, t->rows_pad, sc->s, ld_s, sc->tile_max);
  if (!t->safe)
    mark_neg_inf_kept(sc->s, ld_s, t->rows, n);
  t->list->mask(t->list->mask_ctx, t->entry, t->q0, 0, t->rows, sp->k0, n, sc->s, ld_s);
  const int nbad = kv->v_nonfinite[t->tile]
                       ? screen_v_tile(pb, kv, sp->pack0, n, t->rows, ld_s, sc)
                       : 0;
  pb->kern->softmax(sc->s, ld_s, t->rows_pad, n, sc->m, sc->l, sc->alpha, NULL);
  if (nbad) {
    stsa_tile_pv_f32(pb, sc->s, ld_s, n, sc->v_safe, pb->kv_tile, t->rows_pad, sc->o,
                     sc->alpha);
    add_nonfinite_v(pb, kv, sp->pack0, t->rows, nbad, ld_s, sc);
  } else {
    stsa_tile_pv_f32(pb, sc->s, ld_s, n, kv->vp + sp->pack0 * pb->nr, pb->Skv_pad,
                     t->rows_pad, sc->o, sc->alpha);
  }
}

void stsa_run_tile_f32(const stsa_attn_problem *pb, const stsa_kv_packed *kv,
                       const stsa_tile_visit *t, stsa_tile_scratch *sc) {
  const stsa_kv_span *sp = &t->sp;
  const int npanels = (sp->n + pb->nr - 1) / pb->nr;
  /* Variable tiles are mostly short: scores rows as long as the tile's
   * panels keep them in L1 for the pv passes (fixed tiles: kv_tile). */
  const int ld_s = t->variable ? npanels * pb->nr : pb->kv_tile;
  const float *kt = kv->kt + (sp->pack0 / pb->nr) * pb->D * pb->nr;
  const float *vp = kv->vp + sp->pack0 * pb->nr;
  if (!t->list)
    run_full_tile(pb, kt, vp, pb->Skv_pad, t->rows, t->rows_pad, sp->n, ld_s, t->safe,
                  sc);
  else if (t->pattern && t->safe && !kv->v_nonfinite[t->tile])
    stsa_run_pattern_tile(pb, t->pattern, kt, vp, pb->Skv_pad, t->rows, t->rows_pad,
                          sp->n, ld_s, sc);
  else
    run_partial_tile(pb, kv, t, kt, ld_s, sc);
}

/* The columns of f32 spans computed together (run_spans). Variable tiles
 * are clusters of tens of keys, and each one's last K^T panel was mostly
 * padding: a run of ~76-key tiles computed ~10% more scores than it kept
 * (7.2% more panels than the layout here at Wan 480p). Here every span's
 * whole panels (n / nr of them) come first, side by side from column 0, and
 * the tails (the n % nr keys after them) share panels from column `whole`
 * on, copied (gather_tails), so the spans pad once. The tile loop hands it
 * whole panels only (stsa_run_merged_f32) or tails only (a q tile's tail runs). */
typedef struct merged_cols {
  int whole;                        /* columns of whole panels */
  int tails;                        /* tail columns, after them */
  int col[STSA_MAX_RUN_TILES];      /* tile i's whole panels start here */
  int tail_col[STSA_MAX_RUN_TILES]; /* and its tail here */
} merged_cols;

static merged_cols merged_cols_of(const stsa_kv_span *sp, int64_t nt, int nr) {
  merged_cols mc;
  mc.whole = 0;
  for (int64_t i = 0; i < nt; i++) {
    mc.col[i] = mc.whole;
    mc.whole += sp[i].n / nr * nr;
  }
  mc.tails = 0;
  for (int64_t i = 0; i < nt; i++) {
    mc.tail_col[i] = mc.whole + mc.tails;
    mc.tails += sp[i].n % nr;
  }
  return mc;
}

/* The run's tails side by side: their K^T columns as panels at dst
 * ([ceil(tails / nr)][D][nr], zeros past the last tail; each tile's tail is
 * the first columns of its last packed panel), and their V rows at vdst
 * ([D_pad / nr][kv_tile][nr]), so that P.V takes them as one segment (a
 * segment per tile's tail instead, no copy, ran ~1% slower). */
static void gather_tails(const stsa_attn_problem *pb, const stsa_kv_packed *kv,
                         const stsa_kv_span *sp, int64_t nt, const merged_cols *mc,
                         float *dst, float *vdst) {
  const int D = pb->D, nr = pb->nr;
  const int64_t step = (int64_t)D * nr;
  const float *src[STSA_MAX_RUN_TILES];
  int n[STSA_MAX_RUN_TILES];
  for (int64_t i = 0; i < nt; i++) {
    const int r = sp[i].n % nr, c = mc->tail_col[i] - mc->whole;
    src[i] = kv->kt + (sp[i].pack0 / nr + sp[i].n / nr) * step;
    n[i] = r;
    const float *v = kv->vp + (sp[i].pack0 + sp[i].n / nr * nr) * nr;
    for (int j = 0; r > 0 && j < pb->D_pad / nr; j++)
      memcpy(vdst + ((int64_t)j * pb->kv_tile + c) * nr, v + j * pb->Skv_pad * nr,
             sizeof(float) * (size_t)(r * nr));
  }
  if (mc->tails > 0)
    pb->kern->gather_tails(src, n, (int)nt, D, nr, dst);
}

/* Q.K^T of a merged run for one block of mr rows: its panels in column
 * order (each tile's whole panels, then the tail panels), two at a time
 * through qk2 where the table has it, also across tiles. */
typedef struct panel_pairs {
  const stsa_kernels *kern;
  const float *q;
  int D, ld_s;
  float *tmax;
  const float *held; /* a panel waiting for its pair, and its columns */
  float *held_s;
} panel_pairs;

static void pairs_add(panel_pairs *pp, const float *panel, float *out) {
  const stsa_kernels *kern = pp->kern;
  if (!kern->qk2) {
    kern->qk(pp->q, pp->D, panel, out, pp->ld_s, pp->tmax);
  } else if (pp->held) {
    kern->qk2(pp->q, pp->D, pp->held, panel, pp->held_s, out, pp->ld_s, pp->tmax,
              pp->tmax);
    pp->held = NULL;
  } else {
    pp->held = panel, pp->held_s = out;
  }
}

static void merged_qk(const stsa_attn_problem *pb, const stsa_kernels *kern,
                      const stsa_kv_packed *kv, const stsa_kv_span *sp, int64_t nt,
                      const merged_cols *mc, const float *kt_tails, const float *q,
                      float *s, float *tmax) {
  const int nr = pb->nr;
  const int64_t step = (int64_t)pb->D * nr;
  panel_pairs pp = {kern, q, pb->D, pb->kv_tile, tmax, NULL, NULL};
  for (int64_t i = 0; i < nt; i++) {
    const float *kt = kv->kt + (sp[i].pack0 / nr) * step;
    for (int p = 0; p < sp[i].n / nr; p++)
      pairs_add(&pp, kt + p * step, s + mc->col[i] + p * nr);
  }
  for (int p = 0; p * nr < mc->tails; p++)
    pairs_add(&pp, kt_tails + p * step, s + mc->whole + p * nr);
  if (pp.held)
    kern->qk(q, pb->D, pp.held, pp.held_s, pb->kv_tile, tmax);
}

/* P.V of a merged run for one block of mr rows: o = alpha o + the run's
 * sum. The whole panels' keys go through pv2_segs (one sum over the tiles)
 * where the table has it, else a pv per tile and V panel, their V rows read
 * where they are packed (a copy side by side cost ~6% of an SVG2 call);
 * then the tails from their copy (gather_tails). alpha applies to the first
 * sum, 1 to the later ones, which is exact. */
static void merged_pv(const stsa_attn_problem *pb, const stsa_kernels *kern,
                      const stsa_kv_packed *kv, const stsa_kv_span *sp, int64_t nt,
                      const merged_cols *mc, const float *vp_tails, const float *s,
                      float *o, const float *alpha, const float *ones) {
  const int nr = pb->nr, ld_s = pb->kv_tile, panels = pb->D_pad / nr;
  const int64_t stride = pb->Skv_pad * nr, tail_stride = (int64_t)pb->kv_tile * nr;
  stsa_pv_seg seg[STSA_MAX_RUN_TILES];
  for (int j = 0, take; j < panels; j += take) {
    take = stsa_panel_step(kern->pv2 != NULL, panels - j);
    const float *vp = kv->vp + (int64_t)j * stride;
    float *oj = o + j * nr;
    const float *a = alpha;
    int nseg = 0;
    for (int64_t i = 0; i < nt; i++)
      if (sp[i].n >= nr)
        seg[nseg++] =
            (stsa_pv_seg){s + mc->col[i], vp + sp[i].pack0 * nr, sp[i].n / nr * nr};
    if (nseg > 0 && take == 2 && kern->pv2_segs) {
      kern->pv2_segs(seg, nseg, ld_s, stride, oj, pb->D_pad, a);
      a = ones;
    } else {
      for (int x = 0; x < nseg; x++, a = ones)
        stsa_pv_panels(kern, seg[x].p, ld_s, seg[x].n, seg[x].panel, stride, take, oj,
                       pb->D_pad, a);
    }
    if (mc->tails)
      stsa_pv_panels(kern, s + mc->whole, ld_s, mc->tails, vp_tails + j * tail_stride,
                     tail_stride, take, oj, pb->D_pad, a);
  }
}

/* Spans sp[0..nt) computed as one tile of their columns (merged_cols),
 * with one softmax for them all, so its per-call cost is paid once per
 * ~kv_tile columns rather than per cluster, and one P.V sum (merged_pv). */
static void run_spans(const stsa_attn_problem *pb, const stsa_kv_packed *kv,
                      const stsa_kv_span *sp, int64_t nt, int rows, int rows_pad,
                      stsa_tile_scratch *sc) {
  const stsa_kernels *kern = pb->kern;
  const int D = pb->D, D_pad = pb->D_pad, mr = pb->mr, ld_s = pb->kv_tile;
  const merged_cols mc = merged_cols_of(sp, nt, pb->nr);
  gather_tails(pb, kv, sp, nt, &mc, sc->kt_tails, sc->vp_tails);
  const int n = mc.whole + mc.tails;
  /* one block of mr rows at a time, as run_full_tile: its scores stay in L1
   * from Q.K^T to P.V, in the first mr rows of the score buffer */
  for (int r = 0; r < rows_pad; r += mr) {
    float *tmax = sc->tile_max + r;
    const int block_rows = rows - r < mr ? rows - r : mr;
    const stsa_kernels *bk = block_kernels(kern, block_rows);
    for (int x = 0; x < mr; x++)
      tmax[x] = -INFINITY;
    merged_qk(pb, bk, kv, sp, nt, &mc, sc->kt_tails, sc->q + (int64_t)r * D, sc->s, tmax);
    if (n % pb->nr != 0) /* the last tail panel's padding */
      exact_ragged_max(sc->s, ld_s, block_rows, n, tmax);
    bk->softmax(sc->s, ld_s, bk->mr, n, sc->m + r, sc->l + r, sc->alpha + r, tmax);
    merged_pv(pb, bk, kv, sp, nt, &mc, sc->vp_tails, sc->s, sc->o + (int64_t)r * D_pad,
              sc->alpha + r, sc->ones);
  }
}

void stsa_run_tails_f32(const stsa_attn_problem *pb, const stsa_kv_packed *kv,
                        stsa_tail_spans *ts, int rows, int rows_pad,
                        stsa_tile_scratch *sc) {
  if (ts->count > 0)
    run_spans(pb, kv, ts->sp, ts->count, rows, rows_pad, sc);
  ts->count = 0;
  ts->keys = 0;
}

/* Variable tiles are short (clusters of tens of keys): the whole panels of
 * a run of listed FULL tiles [i0, i1) (f32: one tile too) run together
 * (run_spans), their tails go to ts. With the tails, f32 runs padded once
 * each and held fewer tiles: the q tile's tail runs, longer runs and single
 * tiles here made a Wan-480p SVG2 call ~1.1% faster (paired). */
void stsa_run_merged_f32(const stsa_attn_problem *pb, const stsa_kv_packed *kv,
                         const stsa_kv_list *list, const int64_t *kv_start,
                         const int64_t *kv_pack, int64_t i0, int64_t i1, int rows,
                         int rows_pad, stsa_tail_spans *ts, stsa_tile_scratch *sc) {
  const int nr = pb->nr;
  stsa_kv_span whole[STSA_MAX_RUN_TILES];
  int64_t nw = 0;
  for (int64_t i = i0; i < i1; i++) {
    const stsa_kv_span sp = stsa_kv_span_of(pb, kv_start, kv_pack, list->tiles[i]);
    const int tail = sp.n % nr, body = sp.n - tail;
    if (body > 0) {
      whole[nw] = sp;
      whole[nw++].n = body;
    }
    if (tail == 0)
      continue;
    if (ts->count == STSA_MAX_RUN_TILES || ts->keys + tail > pb->kv_tile)
      stsa_run_tails_f32(pb, kv, ts, rows, rows_pad, sc);
    stsa_kv_span *t = &ts->sp[ts->count++];
    *t = sp; /* the keys from the tile's last packed panel on */
    t->k0 += body;
    t->pack0 += body;
    t->n = tail;
    t->len = nr;
    ts->keys += tail;
  }
  if (nw > 0)
    run_spans(pb, kv, whole, nw, rows, rows_pad, sc);
}
