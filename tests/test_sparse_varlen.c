/*
 * test_sparse_varlen.c — the block-sparse kernel with variable tiles (SVG2's
 * cluster rectangles): hand-built structures whose tile bounds follow random
 * cluster-like boundaries (1-token tiles, tiles of exactly q_tile / kv_tile,
 * lengths off the panel width), a different layout per head in one call
 * (and one head of fixed tiles), permuted token maps, one PARTIAL tile with
 * stored patterns and a NaN in V of one of its keys; bf16 inputs run the
 * bf16 tiles where the backend has them (amx), on kv tiles of 64 and 48
 * keys. Each runs through the scheduler (1 and 2 threads, and nth = 3
 * parts) and the REF backend, against a plain double reference of the same
 * kept pairs; the tiled runs must agree bitwise, and nothing may be written
 * outside the output.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/workspace.h"
#include "kernel/dispatch.h"
#include "kernel/sparse.h"
#include "mask_util.h"
#include "testutil.h"

/* KV_TILE: the fixed kv tiles and the variable ones' maximum, unless a case
 * says otherwise (48: a 16-key multiple the bf16 tiles pad to 64) */
enum { Q_TILE = 48, KV_TILE = 64, MAX_TILES = 1024, MAX_ENTRIES = 1 << 16 };

/* One head's hand-built structure and the storage behind it. */
typedef struct var_head {
  stsa_block_sparse bs;
  int64_t q_start[MAX_TILES + 1], kv_start[MAX_TILES + 1], kv_pack[MAX_TILES + 1];
  int64_t tile_ptr[MAX_TILES + 1];
  int32_t kv_tile[MAX_ENTRIES];
  uint8_t kind[MAX_ENTRIES];
  int32_t pattern[MAX_ENTRIES];
  stsa_tile_pattern pat;
  int32_t row_ptr[Q_TILE + 1];
  uint16_t iv[2 * 2 * Q_TILE];
  int64_t *q_rows, *kv_rows; /* [S] permutations, or NULL */
} var_head;

/* Cluster-like bounds of [0, S): tiles of 1..max positions, drawn so that
 * 1-position tiles, tiles of exactly max and odd lengths all occur. */
static int64_t cluster_bounds(tu_rng *rng, int64_t S, int max, int64_t *start) {
  int64_t n = 0, pos = 0;
  start[0] = 0;
  while (pos < S) {
    const int64_t pick = tu_rnd(rng, 0, 9);
    int64_t len = pick == 0 ? 1 : pick == 1 ? max : tu_rnd(rng, 1, max);
    len = len < S - pos ? len : S - pos;
    pos += len;
    start[++n] = pos;
  }
  return n;
}

static int64_t *random_permutation(tu_rng *rng, int64_t S) {
  int64_t *p = malloc(sizeof *p * (size_t)S);
  for (int64_t i = 0; i < S; i++)
    p[i] = i;
  for (int64_t i = S - 1; i > 0; i--) {
    const int64_t j = tu_rnd(rng, 0, i), t = p[i];
    p[i] = p[j];
    p[j] = t;
  }
  return p;
}

/* Tile bounds of a fixed layout, written like variable ones (the reference
 * reads both the same way). */
static int64_t fixed_bounds(int64_t S, int tile, int64_t *start) {
  int64_t n = 0;
  for (start[0] = 0; start[n] < S; n++)
    start[n + 1] = start[n] + tile < S ? start[n] + tile : S;
  return n;
}

/* A partial tile's pattern: per row up to two random intervals of [0, n),
 * some rows keeping nothing. */
static void random_pattern(tu_rng *rng, var_head *vh, int rows, int n) {
  int32_t nv = 0;
  vh->row_ptr[0] = 0;
  for (int r = 0; r < rows; r++) {
    const int k = (int)tu_rnd(rng, 0, 2);
    int lo = 0;
    for (int i = 0; i < k && lo < n; i++) {
      const int a = (int)tu_rnd(rng, lo, n - 1), b = (int)tu_rnd(rng, a + 1, n);
      vh->iv[2 * nv] = (uint16_t)a;
      vh->iv[2 * nv + 1] = (uint16_t)b;
      nv++;
      lo = b + 1;
    }
    vh->row_ptr[r + 1] = nv;
  }
  vh->pat = (stsa_tile_pattern){rows, vh->row_ptr, vh->iv};
}

/* Builds head structure: variable q and/or kv tiles (or fixed ones) of at
 * most kv_tile keys, packed at multiples of `align`, about a third of the
 * tiles visited per q tile (at least one), all FULL but for one PARTIAL
 * tile when `partial`; permuted token maps when `permuted`. */
static void build_head(tu_rng *rng, var_head *vh, int64_t S, int kv_tile, int var_q,
                       int var_kv, int partial, int permuted, int align) {
  memset(&vh->bs, 0, sizeof vh->bs);
  const int64_t qt_n = var_q ? cluster_bounds(rng, S, Q_TILE, vh->q_start)
                             : fixed_bounds(S, Q_TILE, vh->q_start);
  const int64_t kt_n = var_kv ? cluster_bounds(rng, S, kv_tile, vh->kv_start)
                              : fixed_bounds(S, kv_tile, vh->kv_start);
  vh->kv_pack[0] = 0;
  for (int64_t kt = 0; kt < kt_n; kt++)
    vh->kv_pack[kt + 1] =
        vh->kv_pack[kt] +
        (vh->kv_start[kt + 1] - vh->kv_start[kt] + align - 1) / align * align;
  int64_t e = 0;
  vh->tile_ptr[0] = 0;
  for (int64_t qt = 0; qt < qt_n; qt++) {
    const int64_t first = e;
    for (int64_t kt = 0; kt < kt_n; kt++)
      if (tu_rnd(rng, 0, 2) == 0 || (kt == kt_n - 1 && e == first))
        vh->kv_tile[e++] = (int32_t)kt;
    vh->tile_ptr[qt + 1] = e;
  }
  for (int64_t i = 0; i < e; i++) {
    vh->kind[i] = STSA_TILE_FULL;
    vh->pattern[i] = -1;
  }
  vh->bs = (stsa_block_sparse){.q_tiles = qt_n,
                               .entries = e,
                               .tile_ptr = vh->tile_ptr,
                               .kv_tile = vh->kv_tile,
                               .kind = vh->kind,
                               .pattern = vh->pattern,
                               .q_start = var_q ? vh->q_start : NULL,
                               .kv_tiles = var_kv ? kt_n : 0,
                               .kv_start = var_kv ? vh->kv_start : NULL,
                               .kv_pack = var_kv ? vh->kv_pack : NULL};
  if (partial) { /* an entry of a middle q tile */
    const int64_t qt = qt_n / 2, pe = vh->tile_ptr[qt];
    const int64_t kt = vh->kv_tile[pe];
    vh->kind[pe] = STSA_TILE_PARTIAL;
    vh->pattern[pe] = 0;
    random_pattern(rng, vh, (int)(vh->q_start[qt + 1] - vh->q_start[qt]),
                   (int)(vh->kv_start[kt + 1] - vh->kv_start[kt]));
    vh->bs.patterns = 1;
    vh->bs.pattern_list = &vh->pat;
  }
  vh->q_rows = permuted ? random_permutation(rng, S) : NULL;
  vh->kv_rows = permuted ? random_permutation(rng, S) : NULL;
}

/* Whether row r of q tile qt keeps kv position `pos` of entry e. */
static int entry_keeps(const var_head *vh, int64_t e, int r, int64_t pos) {
  if (vh->kind[e] == STSA_TILE_FULL)
    return 1;
  const int64_t c = pos - vh->kv_start[vh->kv_tile[e]];
  for (int32_t i = vh->row_ptr[r]; i < vh->row_ptr[r + 1]; i++)
    if (c >= vh->iv[2 * i] && c < vh->iv[2 * i + 1])
      return 1;
  return 0;
}

/* The double reference of head h over its kept pairs into ref [S][D] (token
 * order) and ref_lse [S]: 0 and -inf for a row that keeps nothing. */
static void reference_head(const stsa_tensor *q, const stsa_tensor *k,
                           const stsa_tensor *v, int64_t h, const var_head *vh,
                           double *ref, double *ref_lse) {
  const int64_t D = q->shape[3];
  const double scale = 1.0 / sqrt((double)D);
  double *score = malloc(sizeof *score * (size_t)k->shape[1]);
  int64_t *key = malloc(sizeof *key * (size_t)k->shape[1]);
  for (int64_t qt = 0; qt < vh->bs.q_tiles; qt++)
    for (int64_t qp = vh->q_start[qt]; qp < vh->q_start[qt + 1]; qp++) {
      const int r = (int)(qp - vh->q_start[qt]);
      const int64_t qi = vh->q_rows ? vh->q_rows[qp] : qp;
      int64_t nk = 0;
      double mx = -INFINITY;
      for (int64_t e = vh->tile_ptr[qt]; e < vh->tile_ptr[qt + 1]; e++) {
        const int64_t kt = vh->kv_tile[e];
        for (int64_t pos = vh->kv_start[kt]; pos < vh->kv_start[kt + 1]; pos++) {
          if (!entry_keeps(vh, e, r, pos))
            continue;
          const int64_t kj = vh->kv_rows ? vh->kv_rows[pos] : pos;
          double dot = 0;
          for (int64_t d = 0; d < D; d++)
            dot += tu_load(q->data, q->dtype, tu_offset(q, 0, qi, h, d)) *
                   tu_load(k->data, k->dtype, tu_offset(k, 0, kj, h, d));
          key[nk] = kj;
          score[nk] = dot * scale;
          mx = score[nk] > mx ? score[nk] : mx;
          nk++;
        }
      }
      double *o = ref + qi * D, sum = 0;
      for (int64_t d = 0; d < D; d++)
        o[d] = 0;
      for (int64_t i = 0; i < nk; i++) {
        const double p = exp(score[i] - mx);
        sum += p;
        for (int64_t d = 0; d < D; d++)
          o[d] += p * tu_load(v->data, v->dtype, tu_offset(v, 0, key[i], h, d));
      }
      for (int64_t d = 0; nk && d < D; d++)
        o[d] /= sum;
      ref_lse[qi] = nk ? mx + log(sum) : -INFINITY;
    }
  free(score);
  free(key);
}

/* Max |out - ref| over head h, and max |ref| into *scale. */
static double head_error(const stsa_tensor *out, int64_t h, const double *ref,
                         double *scale) {
  const int64_t S = out->shape[1], D = out->shape[3];
  double worst = 0, sc = 0;
  for (int64_t s = 0; s < S; s++)
    for (int64_t d = 0; d < D; d++) {
      const double x = tu_load(out->data, out->dtype, tu_offset(out, 0, s, h, d)),
                   want = ref[s * D + d];
      if (isnan(x) || isnan(want)) { /* a NaN of V reaches exactly the rows keeping it */
        worst = isnan(x) && isnan(want) ? worst : INFINITY;
        continue;
      }
      const double e = fabs(x - want);
      worst = e > worst ? e : worst;
      sc = fabs(want) > sc ? fabs(want) : sc;
    }
  *scale = sc;
  return worst;
}

typedef struct run_out {
  stsa_tensor out;
  float *lse;
} run_out;

static run_out new_out(int64_t S, int64_t H, int64_t D) {
  run_out r = {tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, S, H, D),
               tu_guarded_alloc(sizeof(float) * (size_t)(S * H))};
  return r;
}

static void free_out(run_out *r) {
  tu_free_tensor(&r->out);
  tu_guarded_free(r->lse);
}

/* The sparse work of the heads on `choice`, writing r; nth = 0 runs it on
 * `threads` threads, else as nth parts in one buffer, last part first. A
 * call the bf16 tiles take (amx, bf16 inputs) runs them, with three terms
 * (the f32 probabilities): spans packed where stsa_kv_pack_align asks. */
static void run_kernel(const stsa_backend_choice *choice, const stsa_tensor *q,
                       const stsa_tensor *k, const stsa_tensor *v,
                       const stsa_sparse_head *heads, int kv_tile, run_out *r,
                       int threads, int nth) {
  stsa_attn_problem pb;
  stsa_attn_opts opts = {sizeof opts, 0.0f, r->lse};
  stsa_problem_init(&pb, q, k, v, &r->out, &opts, Q_TILE, kv_tile, &choice->kern);
  stsa_problem_fit_layouts(&pb, heads, q->shape[2]);
  stsa_problem_use_bf16_tiles(&pb, 3);
  CHECK(pb.bf16_tiles ==
            stsa_bf16_tiles_take(&choice->kern, q->dtype, k->dtype, v->dtype),
        "[%s] kv tiles %d: bf16 tiles %d", choice->kern.name, kv_tile, pb.bf16_tiles);
  stsa_sparse_run run;
  const stsa_work w = stsa_sparse_work(&run, &pb, heads, choice->ref);
  if (!nth) {
    stsa_workspace ws = {0};
    CHECK(stsa_work_run(&w, threads, &ws) == STSA_OK, "work run");
    stsa_workspace_release(&ws);
    return;
  }
  const size_t slice = stsa_work_slice_bytes(&w);
  char *mem = aligned_alloc(64, slice * (size_t)nth);
  for (int ith = nth - 1; ith >= 0; ith--)
    stsa_work_part(&w, ith, nth, mem + slice * (size_t)ith);
  free(mem);
}

static int same_lse(const float *a, const float *b, int64_t n) {
  return memcmp(a, b, sizeof(float) * (size_t)n) == 0;
}

/* The packing alignment every backend here takes for calls on `dtype`:
 * the largest they ask (powers of two: a multiple of the others). */
static int common_pack_align(const stsa_backend *backends, int nb, stsa_dtype dtype) {
  int align = 1;
  for (int i = 0; i < nb; i++) {
    stsa_backend_choice choice;
    stsa_errbuf err;
    CHECK(stsa_backend_choose(backends[i], &choice, &err) == STSA_OK, "%s", err.text);
    const int a = stsa_kv_pack_align(&choice.kern, dtype, dtype, dtype);
    align = a > align ? a : align;
  }
  return align;
}

/* One case: H heads of different layouts at head dim D, K/V in `dtype`,
 * kv tiles of at most kv_tile keys. */
static void run_case(tu_rng *rng, int64_t S, int64_t D, stsa_dtype dtype, int kv_tile) {
  enum { H = 4 };
  stsa_tensor q = tu_random_tensor(rng, dtype, TU_BSHD, 1, S, H, D, 1);
  stsa_tensor k = tu_random_tensor(rng, dtype, TU_BHSD, 1, S, H, D, 1);
  stsa_tensor v = tu_random_tensor(rng, dtype, TU_BSHD, 1, S, H, D, 1);
  static var_head vh[H];
  stsa_sparse_head heads[H];
  /* both variable and permuted; both variable with a partial tile; kv only
   * variable; fixed tiles with a partial one */
  const int var_q[H] = {1, 1, 0, 0}, var_kv[H] = {1, 1, 1, 0}, partial[H] = {0, 1, 0, 1},
            permuted[H] = {1, 0, 1, 0};
  stsa_backend backends[TU_MAX_BACKENDS + 1];
  int nb = tu_tiled_backends(backends);
  backends[nb++] = STSA_BACKEND_REF;
  const int align = common_pack_align(backends, nb, dtype);
  for (int h = 0; h < H; h++) {
    build_head(rng, &vh[h], S, kv_tile, var_q[h], var_kv[h], partial[h], permuted[h],
               align);
    heads[h] = (stsa_sparse_head){&vh[h].bs, vh[h].q_rows, vh[h].kv_rows, NULL, NULL, 0};
  }
  /* A NaN in V of a key of head 1's partial tile: the rows that drop it
   * must stay finite (the tile loop keeps it out of P.V), the others and
   * the FULL tiles of that kv tile see it. */
  const int64_t pe = vh[1].tile_ptr[vh[1].bs.q_tiles / 2], pkt = vh[1].kv_tile[pe];
  const int64_t bad = tu_rnd(rng, vh[1].kv_start[pkt], vh[1].kv_start[pkt + 1] - 1);
  tu_store(v.data, dtype, tu_offset(&v, 0, bad, 1, 3), NAN);
  double *ref = malloc(sizeof *ref * (size_t)(S * D * H)),
         *ref_lse = malloc(sizeof *ref_lse * (size_t)(S * H));
  for (int h = 0; h < H; h++)
    reference_head(&q, &k, &v, h, &vh[h], ref + h * S * D, ref_lse + h * S);
  const double rel = dtype == STSA_F32 ? 2e-6 : 1e-5;

  for (int bi = 0; bi < nb; bi++) {
    stsa_errbuf err;
    stsa_backend_choice choice;
    CHECK(stsa_backend_choose(backends[bi], &choice, &err) == STSA_OK, "%s", err.text);
    const char *name = stsa_backend_name(backends[bi]);
    run_out one = new_out(S, H, D), two = new_out(S, H, D), parts = new_out(S, H, D);
    run_kernel(&choice, &q, &k, &v, heads, kv_tile, &one, 1, 0);
    run_kernel(&choice, &q, &k, &v, heads, kv_tile, &two, 2, 0);
    run_kernel(&choice, &q, &k, &v, heads, kv_tile, &parts, 1, 3);
    for (int h = 0; h < H; h++) {
      double scale, e = head_error(&one.out, h, ref + h * S * D, &scale);
      CHECK(e <= rel * scale, "[%s] D %lld %s head %d: err %.3g > %.3g x max %.3g", name,
            (long long)D, stsa_dtype_name(dtype), h, e, rel, scale);
      double lse_err = 0;
      for (int64_t s = 0; s < S; s++) {
        const double want = ref_lse[h * S + s], got = one.lse[h * S + s];
        const double d = want == -INFINITY ? (got == -INFINITY ? 0 : INFINITY)
                                           : fabs(got - want) / (1 + fabs(want));
        lse_err = d > lse_err ? d : lse_err;
      }
      CHECK(lse_err < 2e-5, "[%s] D %lld %s head %d: lse err %.3g", name, (long long)D,
            stsa_dtype_name(dtype), h, lse_err);
    }
    CHECK(tu_same_bytes(&one.out, &two.out) && same_lse(one.lse, two.lse, S * H),
          "[%s] D %lld %s: 1 and 2 threads differ", name, (long long)D,
          stsa_dtype_name(dtype));
    CHECK(tu_same_bytes(&one.out, &parts.out) && same_lse(one.lse, parts.lse, S * H),
          "[%s] D %lld %s: 3 parts differ from 1 thread", name, (long long)D,
          stsa_dtype_name(dtype));
    CHECK(tu_guard_ok(one.out.data) && tu_guard_ok(two.out.data) &&
              tu_guard_ok(parts.out.data) && tu_guard_ok(one.lse) &&
              tu_guard_ok(two.lse) && tu_guard_ok(parts.lse),
          "[%s] D %lld %s: a guard was overwritten", name, (long long)D,
          stsa_dtype_name(dtype));
    free_out(&one), free_out(&two), free_out(&parts);
  }
  for (int h = 0; h < H; h++) {
    free(vh[h].q_rows);
    free(vh[h].kv_rows);
  }
  free(ref);
  free(ref_lse);
  tu_free_tensor(&q), tu_free_tensor(&k), tu_free_tensor(&v);
}

/* Fixed-tile heads only: fitting changes nothing, so the problem and the
 * work are those of today's callers. */
static void test_fixed_unchanged(void) {
  const int64_t S = 333, D = 64;
  tu_rng rng = {5};
  stsa_tensor q = tu_random_tensor(&rng, STSA_F32, TU_BSHD, 1, S, 1, D, 1);
  stsa_backend_choice choice;
  stsa_errbuf err;
  CHECK(stsa_backend_choose(STSA_BACKEND_AUTO, &choice, &err) == STSA_OK, "%s", err.text);
  static var_head vh;
  build_head(&rng, &vh, S, KV_TILE, 0, 0, 0, 0, choice.kern.nr);
  const stsa_sparse_head head = {&vh.bs, NULL, NULL, NULL, NULL, 0};
  stsa_attn_problem a, b;
  stsa_problem_init(&a, &q, &q, &q, &q, NULL, Q_TILE, KV_TILE, &choice.kern);
  b = a;
  stsa_problem_fit_layouts(&b, &head, 1);
  CHECK(memcmp(&a, &b, sizeof a) == 0, "fitting fixed tiles changed the problem");
  tu_free_tensor(&q);
}

/* A bf16 call on the bf16 tiles with kv tiles of 48 keys, one head of
 * variable kv tiles of 32 keys each (packed as they are) and one of the
 * fixed tiles (packed kv_stride = 64 rows apart): the pack holds every
 * head's spans, the fixed head's longer one included. */
static void test_pack_holds_fixed_heads(void) {
  if (!stsa_backend_available(STSA_BACKEND_AMX))
    return; /* no table with bf16 tiles here */
  const int64_t S = 333, D = 64;
  const int kv_tile = 48;
  tu_rng rng = {7};
  stsa_tensor q = tu_random_tensor(&rng, STSA_BF16, TU_BSHD, 1, S, 2, D, 1);
  stsa_backend_choice choice;
  stsa_errbuf err;
  CHECK(stsa_backend_choose(STSA_BACKEND_AMX, &choice, &err) == STSA_OK, "%s", err.text);
  static var_head vh[2];
  build_head(&rng, &vh[0], S, kv_tile, 0, 0, 0, 0, STSA_BF16_KEY_BLOCK);
  build_head(&rng, &vh[1], S, kv_tile, 0, 0, 0, 0, STSA_BF16_KEY_BLOCK);
  const int64_t kt_n = fixed_bounds(S, STSA_BF16_KEY_BLOCK, vh[0].kv_start);
  for (int64_t kt = 0; kt <= kt_n; kt++)
    vh[0].kv_pack[kt] = kt * STSA_BF16_KEY_BLOCK;
  vh[0].bs.kv_tiles = kt_n;
  vh[0].bs.kv_start = vh[0].kv_start;
  vh[0].bs.kv_pack = vh[0].kv_pack;
  for (int64_t e = 0; e < vh[0].bs.entries; e++) /* its entries name tiles below kt_n */
    vh[0].kv_tile[e] %= (int32_t)kt_n;
  const stsa_sparse_head heads[2] = {{&vh[0].bs, NULL, NULL, NULL, NULL, 0},
                                     {&vh[1].bs, NULL, NULL, NULL, NULL, 0}};
  stsa_attn_problem pb;
  stsa_problem_init(&pb, &q, &q, &q, &q, NULL, Q_TILE, kv_tile, &choice.kern);
  stsa_problem_fit_layouts(&pb, heads, 2);
  stsa_problem_use_bf16_tiles(&pb, 0);
  CHECK(pb.bf16_tiles && pb.kv_stride == 64, "bf16 tiles %d, kv_stride %d", pb.bf16_tiles,
        pb.kv_stride);
  for (int h = 0; h < 2; h++) {
    const stsa_block_sparse *bs = heads[h].bs;
    const int64_t tiles = bs->kv_start ? bs->kv_tiles : (S + kv_tile - 1) / kv_tile;
    for (int64_t t = 0; t < tiles; t++) {
      const stsa_kv_span sp = stsa_kv_span_of(&pb, bs->kv_start, bs->kv_pack, t);
      CHECK(sp.pack0 + sp.len <= pb.Skv_pad,
            "head %d tile %lld: packed rows to %lld of %lld", h, (long long)t,
            (long long)(sp.pack0 + sp.len), (long long)pb.Skv_pad);
    }
  }
  tu_free_tensor(&q);
}

int main(void) {
  tu_rng rng = {2024};
  const int64_t dims[] = {64, 80, 128};
  const stsa_dtype dtypes[] = {STSA_F32, STSA_F16, STSA_BF16};
  for (int di = 0; di < 3; di++)
    for (int ti = 0; ti < 3; ti++)
      run_case(&rng, 397 + 101 * di + 7 * ti, dims[di], dtypes[ti], KV_TILE);
  /* bf16 on kv tiles of 48 keys: the bf16 tiles' scratch and the fixed-tile
   * head's packing at 64 rows (kv_stride), variable spans of up to 64 */
  for (int di = 0; di < 3; di++)
    run_case(&rng, 301 + 97 * di, dims[di], STSA_BF16, 48);
  test_fixed_unchanged();
  test_pack_holds_fixed_heads();
  return tu_finish("test_sparse_varlen");
}
