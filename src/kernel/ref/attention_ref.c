/* attention_ref.c — see attention_ref.h. Deliberately naive. */
#include "kernel/ref/attention_ref.h"

#include <math.h>
#include <string.h>

#include "core/convert.h"
#include "core/tensor.h"

static size_t round64(size_t bytes) { return (bytes + 63) / 64 * 64; }

static double load(const stsa_tensor *t, int64_t b, int64_t s, int64_t h, int64_t d) {
  size_t off =
      (size_t)(b * t->stride[0] + s * t->stride[1] + h * t->stride[2] + d * t->stride[3]);
  switch (t->dtype) {
  case STSA_F16:
    return stsa_f16_to_f32(((const uint16_t *)t->data)[off]);
  case STSA_BF16:
    return stsa_bf16_to_f32(((const uint16_t *)t->data)[off]);
  default:
    return ((const float *)t->data)[off];
  }
}

typedef struct ref_scratch {
  int64_t *kept; /* [Skv] k/v rows a query row keeps */
  double *score; /* [Skv] */
  double *qrow;  /* [D] */
  double *acc;   /* [D] */
  float *orow;   /* [D] */
  float *tile_s; /* [kv_tile] a partial tile's mask of one row */
} ref_scratch;

size_t stsa_ref_scratch_bytes(const stsa_attn_problem *pb) {
  const size_t S = (size_t)pb->Skv, D = (size_t)pb->D;
  return round64(S * sizeof(int64_t)) + round64(S * sizeof(double)) +
         2 * round64(D * sizeof(double)) + round64(D * sizeof(float)) +
         round64((size_t)pb->kv_tile * sizeof(float));
}

static ref_scratch scratch_at(const stsa_attn_problem *pb, void *mem) {
  const size_t S = (size_t)pb->Skv, D = (size_t)pb->D;
  char *p = mem;
  ref_scratch r;
  r.kept = (int64_t *)(void *)p;
  p += round64(S * sizeof(int64_t));
  r.score = (double *)(void *)p;
  p += round64(S * sizeof(double));
  r.qrow = (double *)(void *)p;
  p += round64(D * sizeof(double));
  r.acc = (double *)(void *)p;
  p += round64(D * sizeof(double));
  r.orow = (float *)(void *)p;
  p += round64(D * sizeof(float));
  r.tile_s = (float *)(void *)p;
  return r;
}

/* Row r of the q tile at q0: the k/v rows it keeps, in list order. */
static int64_t kept_keys(const stsa_attn_problem *pb, const stsa_kv_list *list,
                         const stsa_tile_layout *lay, int64_t q0, int r,
                         ref_scratch *sc) {
  const int64_t ntiles = list && list->tiles ? list->count : stsa_kv_tiles(pb);
  const int64_t *kv_rows = list ? list->kv_rows : NULL;
  int64_t nkept = 0;
  for (int64_t i = 0; i < ntiles; i++) {
    const int64_t tile = list && list->tiles ? list->tiles[i] : i;
    const stsa_kv_span sp =
        stsa_kv_span_of(pb, lay ? lay->kv_start : NULL, lay ? lay->kv_pack : NULL, tile);
    const int64_t k0 = sp.k0;
    const int n = sp.n;
    const int partial = list && list->tiles && list->kinds[i] == STSA_TILE_PARTIAL;
    if (partial) { /* the mask decides row r of the tile */
      memset(sc->tile_s, 0, sizeof(float) * (size_t)n);
      list->mask(list->mask_ctx, i, q0, r, 1, k0, n, sc->tile_s, pb->kv_tile);
    }
    for (int c = 0; c < n; c++)
      if (!partial || sc->tile_s[c] != -INFINITY)
        sc->kept[nkept++] = kv_rows ? kv_rows[k0 + c] : k0 + c;
  }
  return nkept;
}

/* One query row (q row `tok` of (b, h)) over its kept keys. */
static void ref_row(const stsa_attn_problem *pb, int64_t b, int64_t h, int64_t tok,
                    int64_t nkept, ref_scratch *sc) {
  const stsa_tensor *q = pb->q, *k = pb->k, *v = pb->v, *out = pb->out;
  const int64_t D = pb->D;
  const double scale = pb->scale;
  for (int64_t d = 0; d < D; d++)
    sc->qrow[d] = load(q, b, tok, h, d);
  /* The scores of the kept keys; a NaN or +inf one makes the row NaN. */
  int nan_row = 0;
  double mx = -INFINITY;
  for (int64_t i = 0; i < nkept; i++) {
    double dot = 0;
    for (int64_t d = 0; d < D; d++)
      dot += sc->qrow[d] * load(k, b, sc->kept[i], h, d);
    sc->score[i] = dot * scale;
    if (isnan(sc->score[i]) || sc->score[i] == INFINITY)
      nan_row = 1;
    else if (sc->score[i] > mx)
      mx = sc->score[i];
  }
  double sum = 0, lse;
  if (nkept == 0) { /* nothing kept: 0, lse -inf */
    for (int64_t d = 0; d < D; d++)
      sc->orow[d] = 0.0f;
    lse = -INFINITY;
  } else if (nan_row || mx == -INFINITY) { /* or every kept score -inf */
    for (int64_t d = 0; d < D; d++)
      sc->orow[d] = NAN;
    lse = NAN;
  } else {
    /* Every kept key contributes, even with weight exp(-inf) = 0: a NaN in
     * its V reaches the row (0 * NaN), as in SDPA. */
    for (int64_t d = 0; d < D; d++)
      sc->acc[d] = 0;
    for (int64_t i = 0; i < nkept; i++) {
      double p = exp(sc->score[i] - mx);
      sum += p;
      for (int64_t d = 0; d < D; d++)
        sc->acc[d] += p * load(v, b, sc->kept[i], h, d);
    }
    for (int64_t d = 0; d < D; d++)
      sc->orow[d] = (float)(sc->acc[d] / sum);
    lse = mx + log(sum);
  }
  stsa_store_row(sc->orow, (int)D, stsa_tensor_row(out, b, tok, h), out->dtype,
                 out->stride[3]);
  if (pb->lse)
    pb->lse[(b * pb->H + h) * pb->Sq + tok] = (float)lse;
}

void stsa_ref_q_tile(const stsa_attn_problem *pb, int64_t b, int64_t h, int64_t qt,
                     const stsa_kv_list *list, const stsa_tile_layout *lay,
                     void *scratch) {
  ref_scratch sc = scratch_at(pb, scratch);
  int64_t q0;
  const int rows = stsa_q_rows_of(pb, lay ? lay->q_start : NULL, qt, &q0);
  const int64_t *q_rows = list ? list->q_rows : NULL;
  for (int r = 0; r < rows; r++) {
    int64_t nkept = kept_keys(pb, list, lay, q0, r, &sc);
    ref_row(pb, b, h, q_rows ? q_rows[q0 + r] : q0 + r, nkept, &sc);
  }
}
