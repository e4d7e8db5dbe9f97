/*
 * test_dist_errors.c — failures agreed on by every rank. One rank (the
 * last, or rank 1) passes something wrong: a shard of another shape, k
 * shorter than q, an empty shard, another dtype, another scale, another
 * scheme or SVG density, lse. Every rank must return the same status with
 * the same message, naming the failing rank ("rank R: ...") where one rank
 * failed its own checks, and no rank may have written its output (each is
 * full of a sentinel inside guard bytes). stsa_dist_agree and the dist's
 * use after a failure are checked too.
 */
#define STSA_EXPERIMENTAL /* stsa_tensor_copy, stsa_workload_generate (dist_testutil.h)  \
                           */
#include "dist_testutil.h"

enum { MSG = 512 };

/* Status and message alike on every rank; the status is want or also_ok
 * (where the contract leaves the code open), the message starts with
 * "rank R: " for one of the ranks in want_rank[0..n) (n = 0: any message). */
static void expect_agreed(stsa_status st, const char *msg, stsa_status want,
                          stsa_status also_ok, const int *want_rank, int n) {
  int lo = (int)st, hi = (int)st;
  MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  DT_CHECK(lo == hi, "ranks returned different statuses (%s .. %s)",
           stsa_status_str((stsa_status)lo), stsa_status_str((stsa_status)hi));
  DT_CHECK(st == want || st == also_ok, "returned %s, expected %s (message \"%s\")",
           stsa_status_str(st), stsa_status_str(want), msg);
  char root[MSG] = {0};
  if (dt_rank == 0)
    snprintf(root, sizeof root, "%s", msg);
  MPI_Bcast(root, MSG, MPI_CHAR, 0, MPI_COMM_WORLD);
  DT_CHECK(strcmp(root, msg) == 0, "message \"%s\" here, \"%s\" on rank 0", msg, root);
  DT_CHECK(st == STSA_OK || msg[0] != '\0', "empty message with %s", stsa_status_str(st));
  if (n > 0) {
    int named = 0;
    for (int i = 0; i < n; i++) {
      char prefix[32];
      snprintf(prefix, sizeof prefix, "rank %d: ", want_rank[i]);
      named |= strncmp(msg, prefix, strlen(prefix)) == 0;
    }
    DT_CHECK(named, "message \"%s\" does not start with \"rank %d: \"%s", msg,
             want_rank[0], n > 1 ? " (or of rank 0, it was compared with)" : "");
  }
}

static int last_rank(void) { return dt_size - 1; }

/* A failed call writes no output: the sentinel and its guard bytes stand. */
static void expect_untouched(const stsa_tensor *out) {
  DT_CHECK(tu_is_sentinel(out) && tu_guard_ok(out->data),
           "the output shard was written by a failed call");
}

/* ---- shapes and options of dense and sparse calls -------------------------- */
typedef enum fault {
  FAULT_K_SHORT,     /* k has one token less than q */
  FAULT_D,           /* every tensor of the rank has D = 16 instead of 32 */
  FAULT_B,           /* batch 1 instead of 2 */
  FAULT_EMPTY,       /* a shard of 0 tokens */
  FAULT_OUT_DTYPE,   /* out in bf16 instead of f32 */
  FAULT_SCALE,       /* another scale */
  FAULT_LSE,         /* lse requested */
  FAULT_REPORT_SIZE, /* a report of size 0 */
  FAULT_COUNT
} fault;

/* What each fault must give: a rank finds the local ones alone (its
 * message names it); the others make the ranks' calls differ (the message
 * names the odd rank or rank 0, it was compared with), and the contract
 * leaves open whether that is the shape's or the parameter's status. */
static const struct {
  const char *name;
  int local;
  stsa_status status, also_ok;
} FAULTS[FAULT_COUNT] = {
    [FAULT_K_SHORT] = {"k shorter than q", 1, STSA_ERR_BAD_SHAPE, STSA_ERR_BAD_SHAPE},
    [FAULT_D] = {"another D", 0, STSA_ERR_BAD_SHAPE, STSA_ERR_BAD_PARAM},
    [FAULT_B] = {"another B", 0, STSA_ERR_BAD_SHAPE, STSA_ERR_BAD_PARAM},
    [FAULT_EMPTY] = {"an empty shard", 1, STSA_ERR_BAD_SHAPE, STSA_ERR_BAD_SHAPE},
    [FAULT_OUT_DTYPE] = {"another out dtype", 0, STSA_ERR_BAD_DTYPE, STSA_ERR_BAD_PARAM},
    [FAULT_SCALE] = {"another scale", 0, STSA_ERR_BAD_PARAM, STSA_ERR_BAD_PARAM},
    [FAULT_LSE] = {"lse requested", 1, STSA_ERR_UNSUPPORTED, STSA_ERR_UNSUPPORTED},
    [FAULT_REPORT_SIZE] = {"report size 0", 1, STSA_ERR_BAD_PARAM, STSA_ERR_BAD_PARAM},
};

typedef struct shard {
  stsa_tensor q, k, v, out;
  float *lse;
  stsa_attn_opts opts;
  stsa_dist_report rep;
} shard;

/* This rank's shard of a 101-token sequence (B 2, H 5, D 32), faulty on
 * `bad` ranks. */
static void shard_make(shard *s, fault f, int bad) {
  int64_t off[65];
  dt_offsets(101, dt_size, DT_SPLIT_EVEN, off);
  int64_t len = off[dt_rank + 1] - off[dt_rank], klen = len, B = 2, D = 32;
  stsa_dtype odt = STSA_F32;
  if (bad) {
    klen -= f == FAULT_K_SHORT;
    D = f == FAULT_D ? 16 : D;
    B = f == FAULT_B ? 1 : B;
    len = f == FAULT_EMPTY ? 0 : len;
    klen = f == FAULT_EMPTY ? 0 : klen;
    odt = f == FAULT_OUT_DTYPE ? STSA_BF16 : odt;
  }
  tu_rng rng = {77 + (uint64_t)dt_rank};
  s->q = tu_random_tensor(&rng, STSA_F32, TU_BSHD, B, len, 5, D, 1);
  s->k = tu_random_tensor(&rng, STSA_F32, TU_BSHD, B, klen, 5, D, 1);
  s->v = tu_random_tensor(&rng, STSA_F32, TU_BSHD, B, klen, 5, D, 1);
  s->out = tu_sentinel_tensor(odt, TU_BSHD, B, len, 5, D);
  s->lse = tu_guarded_alloc(sizeof(float) * (size_t)(B * 5 * (len ? len : 1)));
  s->opts = (stsa_attn_opts)STSA_INIT(stsa_attn_opts);
  s->opts.scale = bad && f == FAULT_SCALE ? 0.5f : 0.0f;
  s->opts.lse = bad && f == FAULT_LSE ? s->lse : NULL;
  s->rep = (stsa_dist_report)STSA_INIT(stsa_dist_report);
  s->rep.size = bad && f == FAULT_REPORT_SIZE ? 0 : s->rep.size;
}

static void shard_free(shard *s) {
  tu_free_tensor(&s->q);
  tu_free_tensor(&s->k);
  tu_free_tensor(&s->v);
  tu_free_tensor(&s->out);
  tu_guarded_free(s->lse);
}

/* A dense call with fault f on the last rank (on every rank with all). */
static void dense_fault(stsa_dist *dist, stsa_dist_scheme scheme, fault f, int all) {
  if (!all && !FAULTS[f].local && dt_size < 2)
    return; /* a difference between ranks needs two */
  if (f == FAULT_EMPTY && dt_size < 2)
    return; /* the one rank must hold the whole sequence */
  dt_set_case("dense %s, %s on %s, np%d", stsa_dist_scheme_name(scheme), FAULTS[f].name,
              all ? "every rank" : "the last rank", dt_size);
  shard s;
  shard_make(&s, f, all || dt_rank == last_rank());
  stsa_status st = stsa_dist_attention(dist, &s.q, &s.k, &s.v, &s.out, &s.opts, &s.rep);
  /* a fault on every rank: the lowest failing rank is 0 */
  const int named[2] = {all ? 0 : last_rank(), 0};
  expect_agreed(st, stsa_dist_last_error(dist), FAULTS[f].status, FAULTS[f].also_ok,
                named, FAULTS[f].local || all ? 1 : 2);
  expect_untouched(&s.out);
  shard_free(&s);
}

/* The dist works after a failure, and its message is cleared. */
static void still_usable(stsa_dist *dist, stsa_dist_scheme scheme) {
  dt_set_case("dense %s after failures, np%d", stsa_dist_scheme_name(scheme), dt_size);
  shard s;
  shard_make(&s, FAULT_COUNT, 0);
  stsa_status st = stsa_dist_attention(dist, &s.q, &s.k, &s.v, &s.out, &s.opts, NULL);
  expect_agreed(st, stsa_dist_last_error(dist), STSA_OK, STSA_OK, NULL, 0);
  DT_CHECK(stsa_dist_last_error(dist)[0] == '\0', "message \"%s\" after success",
           stsa_dist_last_error(dist));
  DT_CHECK(!tu_is_sentinel(&s.out) && tu_guard_ok(s.out.data), "output not written");
  shard_free(&s);
}

static void dense_faults(stsa_dist_scheme scheme) {
  stsa_dist *dist = dt_dist(scheme, 0, 0);
  if (!dist)
    return;
  for (int f = 0; f < FAULT_COUNT; f++)
    dense_fault(dist, scheme, (fault)f, 0);
  dense_fault(dist, scheme, FAULT_LSE, 1); /* lse on every rank: UNSUPPORTED too */
  still_usable(dist, scheme);
  stsa_dist_free(dist);
}

/* ---- sparse calls ------------------------------------------------------------ */
typedef enum sparse_fault {
  SF_LSE,           /* lse requested (every rank) */
  SF_PAIRS_CHANGED, /* pairs_changed requested (last rank) */
  SF_PREPERMUTED,   /* STSA_SPARSE_PREPERMUTED (last rank) */
  SF_Q_ROWS,        /* a q_rows plan (last rank) */
  SF_LENGTH,        /* desc.s_q = s_kv = one token less than the shards add up to */
  SF_MASKS,         /* other masks on the last rank */
  SF_COUNT
} sparse_fault;

static void sparse_fault_run(stsa_dist *dist, sparse_fault f) {
  static const char *const names[SF_COUNT] = {"lse",    "pairs_changed", "PREPERMUTED",
                                              "q_rows", "desc length",   "other masks"};
  if (f == SF_MASKS && dt_size < 2)
    return;
  dt_set_case("sparse ulysses, %s, np%d", names[f], dt_size);
  const stsa_geometry g = dt_geometry(DT_GEOM_PREFIX);
  dt_problem p;
  dt_problem_make(&p, &g, 0, 1, 5, 16, STSA_F32, STSA_F32, 99);
  dt_local l;
  dt_local_make(&l, &p, DT_SPLIT_RAMP, TU_BSHD, STSA_F32);
  stsa_mask *masks[5], *full = NULL;
  dt_head_masks(&g, 5, masks);
  stsa_mask_full(&full);
  const int bad = dt_rank == last_rank();
  const stsa_mask *use[5];
  for (int h = 0; h < 5; h++)
    use[h] = f == SF_MASKS && bad && h == 0 ? full : masks[h];
  stsa_plan_desc desc = dt_plan_desc(&p, use, STSA_ORDER_NATIVE, STSA_ORDER_NATIVE);
  int64_t rows[4] = {0, 1, 2, 3}, changed = 0;
  float *lse = tu_guarded_alloc(sizeof(float) * (size_t)(5 * l.len));
  stsa_sparse_opts opts = STSA_INIT(stsa_sparse_opts);
  stsa_status want = STSA_ERR_UNSUPPORTED;
  int named[2] = {last_rank(), 0}, n_named = 1;
  switch (f) {
  case SF_LSE:
    opts.lse = lse;
    named[0] = 0;
    break;
  case SF_PAIRS_CHANGED:
    opts.pairs_changed = bad ? &changed : NULL;
    break;
  case SF_PREPERMUTED:
    opts.flags = bad ? STSA_SPARSE_PREPERMUTED : 0;
    break;
  case SF_Q_ROWS:
    desc.q_rows = bad ? rows : NULL;
    break;
  case SF_LENGTH:
    desc.s_q = desc.s_kv = p.S - 1;
    want = STSA_ERR_BAD_SHAPE;
    named[0] = 0;
    break;
  default: /* the calls differ: the odd rank, or rank 0 it was compared with */
    want = STSA_ERR_BAD_PARAM;
    n_named = 2;
    break;
  }
  stsa_status st =
      stsa_dist_sparse_attention(dist, &desc, &l.q, &l.k, &l.v, &l.out, &opts, NULL);
  expect_agreed(st, stsa_dist_last_error(dist), want, want, named, n_named);
  expect_untouched(&l.out);
  tu_guarded_free(lse);
  stsa_mask_free(full);
  dt_masks_free(masks, 5);
  dt_local_free(&l);
  dt_problem_free(&p);
}

static void sparse_faults(void) {
  stsa_dist *dist = dt_dist(STSA_DIST_ULYSSES, 0, 0);
  for (int f = 0; dist && f < SF_COUNT; f++)
    sparse_fault_run(dist, (sparse_fault)f);
  stsa_dist_free(dist);
}

/* ---- stsa_dist_create ------------------------------------------------------- */
/* Every rank but the last is given `others`; the message names the last
 * rank (its own refusal, or the difference from rank 0's), or rank 0 when
 * every rank was given the bad config. */
static void create_fault(const char *what, stsa_dist_config mine,
                         stsa_dist_config others) {
  dt_set_case("stsa_dist_create_msg, %s, np%d", what, dt_size);
  dt_watchdog(30); /* a create that leaves ranks in different collectives hangs */
  stsa_dist *const marker = (stsa_dist *)&dt_checks; /* any address: it must stay */
  stsa_dist *dist = marker;
  const stsa_dist_config *cfg = dt_rank == last_rank() ? &mine : &others;
  char msg[MSG];
  memset(msg, 'x', sizeof msg);
  stsa_status st =
      stsa_dist_create_msg(dt_ctx, MPI_COMM_WORLD, cfg, &dist, msg, sizeof msg);
  const int everywhere = mine.size == others.size && mine.scheme == others.scheme &&
                         mine.ulysses_degree == others.ulysses_degree &&
                         mine.flags == others.flags;
  const int named[1] = {everywhere ? 0 : last_rank()};
  expect_agreed(st, memchr(msg, '\0', sizeof msg) ? msg : "(not terminated)",
                STSA_ERR_BAD_PARAM, STSA_ERR_BAD_PARAM, named, 1);
  DT_CHECK(dist == marker, "*out written by a failed stsa_dist_create");
  if (st == STSA_OK && dist != marker)
    stsa_dist_free(dist);
  /* the plain create fails alike */
  dist = marker;
  st = stsa_dist_create(dt_ctx, MPI_COMM_WORLD, cfg, &dist);
  expect_agreed(st, stsa_status_str(st), STSA_ERR_BAD_PARAM, STSA_ERR_BAD_PARAM, NULL, 0);
  DT_CHECK(dist == marker, "*out written by a failed stsa_dist_create");
  if (st == STSA_OK && dist != marker)
    stsa_dist_free(dist);
  dt_watchdog(240);
}

/* A successful create clears the message. */
static void create_ok(void) {
  dt_set_case("stsa_dist_create_msg, a good config, np%d", dt_size);
  stsa_dist_config cfg = STSA_INIT(stsa_dist_config);
  char msg[8] = "junk";
  stsa_dist *dist = NULL;
  stsa_status st =
      stsa_dist_create_msg(dt_ctx, MPI_COMM_WORLD, &cfg, &dist, msg, sizeof msg);
  DT_CHECK(st == STSA_OK && dist && msg[0] == '\0', "returned %s, message \"%s\"",
           stsa_status_str(st), msg);
  stsa_dist_free(dist);
}

static void create_faults(void) {
  create_ok();
  stsa_dist_config ok = STSA_INIT(stsa_dist_config), c;
  if (dt_size > 1) {
    c = ok, c.scheme = STSA_DIST_RING;
    create_fault("ring on the last rank, ulysses on the others", c, ok);
    c = ok, c.flags = STSA_DIST_CONTIGUOUS_HEADS;
    create_fault("contiguous heads on the last rank only", c, ok);
  }
  c = ok, c.scheme = (stsa_dist_scheme)7;
  create_fault("an unknown scheme on the last rank", c, ok);
  c = ok, c.flags = 0x80;
  create_fault("unknown flags on the last rank", c, ok);
  c = ok, c.size = 0;
  create_fault("config size 0 on the last rank", c, ok);
  if (dt_size > 2) {
    c = ok, c.scheme = STSA_DIST_HYBRID, c.ulysses_degree = dt_size - 1;
    create_fault("a hybrid degree that does not divide P, every rank", c, c);
  }
}

/* ---- SVG ------------------------------------------------------------------ */
static stsa_svg_config svg_cfg(void) {
  stsa_svg_config cfg = STSA_INIT(stsa_svg_config);
  cfg.geometry = dt_geometry(DT_GEOM_SUFFIX);
  cfg.heads = 5;
  cfg.head_dim = 16;
  cfg.density = 0.35;
  cfg.sample_rows = 16;
  cfg.sink_frames = 1;
  cfg.seed = 3;
  return cfg;
}

static void svg_create_fault(stsa_dist *dist, const char *what, stsa_svg_config mine,
                             const int *named, int n_named) {
  dt_set_case("stsa_dist_svg_create, %s, np%d", what, dt_size);
  stsa_dist_svg *const marker = (stsa_dist_svg *)&dt_checks;
  stsa_dist_svg *svg = marker;
  const stsa_svg_config others = svg_cfg();
  stsa_status st =
      stsa_dist_svg_create(dist, dt_rank == last_rank() ? &mine : &others, &svg);
  expect_agreed(st, stsa_dist_last_error(dist), STSA_ERR_BAD_PARAM, STSA_ERR_BAD_PARAM,
                named, n_named);
  DT_CHECK(svg == marker, "*out written by a failed stsa_dist_svg_create");
  if (st == STSA_OK && svg != marker)
    stsa_dist_svg_free(svg);
}

/* A session of H = 5 called with shards of 4 heads on every rank, then with
 * a short k on one rank. */
static void svg_call_fault(stsa_dist *dist) {
  dt_set_case("stsa_dist_svg_attention, H differs from the session's, np%d", dt_size);
  const stsa_svg_config cfg = svg_cfg();
  stsa_dist_svg *svg = NULL;
  stsa_status st = stsa_dist_svg_create(dist, &cfg, &svg);
  DT_CHECK_STATUS(st, STSA_OK, dist);
  if (!svg)
    return;
  dt_problem p;
  dt_problem_make(&p, &cfg.geometry, 0, 1, 4, 16, STSA_F32, STSA_F32, 5);
  dt_local l;
  dt_local_make(&l, &p, DT_SPLIT_EVEN, TU_BSHD, STSA_F32);
  st = stsa_dist_svg_attention(svg, 0, 0, &l.q, &l.k, &l.v, &l.out, NULL, NULL);
  expect_agreed(st, stsa_dist_last_error(dist), STSA_ERR_BAD_SHAPE, STSA_ERR_BAD_SHAPE,
                NULL, 0);
  expect_untouched(&l.out);
  dt_local_free(&l);
  dt_problem_free(&p);

  dt_set_case("stsa_dist_svg_attention, k shorter than q on the last rank, np%d",
              dt_size);
  dt_problem_make(&p, &cfg.geometry, 0, 1, 5, 16, STSA_F32, STSA_F32, 6);
  dt_local_make(&l, &p, DT_SPLIT_EVEN, TU_BSHD, STSA_F32);
  stsa_tensor k = l.k;
  k.shape[1] -= dt_rank == last_rank();
  const int last[1] = {last_rank()};
  st = stsa_dist_svg_attention(svg, 0, 0, &l.q, &k, &l.v, &l.out, NULL, NULL);
  expect_agreed(st, stsa_dist_last_error(dist), STSA_ERR_BAD_SHAPE, STSA_ERR_BAD_SHAPE,
                last, 1);
  expect_untouched(&l.out);
  dt_local_free(&l);
  dt_problem_free(&p);
  stsa_dist_svg_free(svg);
}

/* An error budget, and methods svg2 and auto, need whole heads on a rank
 * (svg2 and auto: the same heads every call): a ring layout's call is
 * refused on every rank, naming what, its output untouched. */
static void svg_refused_on_rings(void) {
  if (dt_size < 2)
    return; /* one rank: the ring holds whole heads */
  stsa_dist *dist = dt_dist(STSA_DIST_RING, 0, 0);
  if (!dist)
    return;
  const struct {
    stsa_svg_method method;
    double budget;
    const char *named; /* in the message */
  } cases[] = {{STSA_SVG_METHOD_SVG, 0.05, "error budget"},
               {STSA_SVG_METHOD_SVG2, 0, "method svg2"},
               {STSA_SVG_METHOD_AUTO, 0.05, "method auto"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    dt_set_case("stsa_dist_svg_attention on a ring, method %s, budget %g, np%d",
                stsa_svg_method_name(cases[i].method), cases[i].budget, dt_size);
    stsa_svg_config cfg = svg_cfg();
    cfg.method = cases[i].method;
    cfg.max_rel_error = cases[i].budget;
    stsa_dist_svg *svg = NULL;
    stsa_status st = stsa_dist_svg_create(dist, &cfg, &svg);
    DT_CHECK_STATUS(st, STSA_OK, dist);
    if (!svg)
      continue;
    dt_problem p;
    dt_problem_make(&p, &cfg.geometry, 0, 1, cfg.heads, cfg.head_dim, STSA_F32, STSA_F32,
                    7);
    dt_local l;
    dt_local_make(&l, &p, DT_SPLIT_EVEN, TU_BSHD, STSA_F32);
    st = stsa_dist_svg_attention(svg, 1, 1, &l.q, &l.k, &l.v, &l.out, NULL, NULL);
    expect_agreed(st, stsa_dist_last_error(dist), STSA_ERR_UNSUPPORTED,
                  STSA_ERR_UNSUPPORTED, NULL, 0);
    DT_CHECK(strstr(stsa_dist_last_error(dist), cases[i].named) &&
                 strstr(stsa_dist_last_error(dist), "Ulysses"),
             "the refusal names %s and Ulysses layouts: %s", cases[i].named,
             stsa_dist_last_error(dist));
    expect_untouched(&l.out);
    dt_local_free(&l);
    dt_problem_free(&p);
    stsa_dist_svg_free(svg);
  }
  stsa_dist_free(dist);
}

static void svg_faults(void) {
  stsa_dist *dist = dt_dist(STSA_DIST_ULYSSES, 0, 0);
  if (!dist)
    return;
  stsa_svg_config c = svg_cfg();
  const int last[1] = {last_rank()};
  if (dt_size > 1) {
    c.density = 0.5;
    svg_create_fault(dist, "another density on the last rank", c, NULL, 0);
  }
  c = svg_cfg(), c.heads = 0;
  svg_create_fault(dist, "heads = 0 on the last rank", c, last, 1);
  c = svg_cfg(), c.density = 2;
  svg_create_fault(dist, "density 2 on the last rank", c, last, 1);
  svg_call_fault(dist);
  stsa_dist_free(dist);
}

/* ---- stsa_dist_agree --------------------------------------------------------- */
static void agree_cases(void) {
  stsa_dist *dist = dt_dist(STSA_DIST_ULYSSES, 0, 0);
  if (!dist)
    return;
  const int last[1] = {last_rank()}, first[1] = {0};
  dt_set_case("stsa_dist_agree, all OK, np%d", dt_size);
  stsa_status st = stsa_dist_agree(dist, STSA_OK, "ignored");
  expect_agreed(st, stsa_dist_last_error(dist), STSA_OK, STSA_OK, NULL, 0);
  DT_CHECK(stsa_dist_last_error(dist)[0] == '\0', "message \"%s\"",
           stsa_dist_last_error(dist));

  dt_set_case("stsa_dist_agree, the last rank fails, np%d", dt_size);
  const int bad = dt_rank == last_rank();
  st = stsa_dist_agree(dist, bad ? STSA_ERR_IO : STSA_OK,
                       bad ? "cannot read qkv.npy" : NULL);
  expect_agreed(st, stsa_dist_last_error(dist), STSA_ERR_IO, STSA_ERR_IO, last, 1);
  char want[64];
  snprintf(want, sizeof want, "rank %d: cannot read qkv.npy", last_rank());
  DT_CHECK(strcmp(stsa_dist_last_error(dist), want) == 0,
           "message \"%s\", expected \"%s\"", stsa_dist_last_error(dist), want);

  dt_set_case("stsa_dist_agree, the first and last ranks fail, np%d", dt_size);
  st = stsa_dist_agree(dist,
                       dt_rank == 0 ? STSA_ERR_FORMAT
                       : bad        ? STSA_ERR_IO
                                    : STSA_OK,
                       dt_rank == 0 ? "bad header" : "later");
  expect_agreed(st, stsa_dist_last_error(dist), STSA_ERR_FORMAT, STSA_ERR_FORMAT, first,
                1);
  DT_CHECK(strcmp(stsa_dist_last_error(dist), "rank 0: bad header") == 0,
           "message \"%s\", expected \"rank 0: bad header\"", stsa_dist_last_error(dist));

  dt_set_case("stsa_dist_agree, the last rank fails without a message, np%d", dt_size);
  st = stsa_dist_agree(dist, bad ? STSA_ERR_OUT_OF_MEMORY : STSA_OK, NULL);
  expect_agreed(st, stsa_dist_last_error(dist), STSA_ERR_OUT_OF_MEMORY,
                STSA_ERR_OUT_OF_MEMORY, last, 1);
  snprintf(want, sizeof want, "rank %d: %s", last_rank(),
           stsa_status_str(STSA_ERR_OUT_OF_MEMORY));
  DT_CHECK(strcmp(stsa_dist_last_error(dist), want) == 0,
           "message \"%s\", expected \"%s\"", stsa_dist_last_error(dist), want);
  stsa_dist_free(dist);
}

/* ---- no false alarms ---------------------------------------------------------- */
/* The same call described by structs whose padding bytes differ between
 * ranks (stack garbage in a real program) must not count as different. */
static void same_call_other_padding(void) {
  stsa_dist *dist = dt_dist(STSA_DIST_ULYSSES, 0, 0);
  if (!dist)
    return;
  dt_set_case("stsa_dist_svg_create, equal configs with other padding bytes, np%d",
              dt_size);
  stsa_svg_config cfg;
  memset(&cfg, 0x11 * (dt_rank + 1), sizeof cfg);
  const stsa_svg_config clean = svg_cfg();
  cfg.size = clean.size;
  cfg.geometry.frames = clean.geometry.frames;
  cfg.geometry.height = clean.geometry.height;
  cfg.geometry.width = clean.geometry.width;
  cfg.geometry.text = clean.geometry.text;
  cfg.geometry.text_real = clean.geometry.text_real;
  cfg.geometry.text_pos = clean.geometry.text_pos;
  cfg.heads = clean.heads, cfg.head_dim = clean.head_dim, cfg.density = clean.density;
  cfg.dense_steps = clean.dense_steps, cfg.dense_layers = clean.dense_layers;
  cfg.sample_rows = clean.sample_rows, cfg.sink_frames = clean.sink_frames;
  cfg.seed = clean.seed, cfg.steps = clean.steps, cfg.layers = clean.layers;
  cfg.q_tile = clean.q_tile, cfg.kv_tile = clean.kv_tile;
  cfg.method = clean.method, cfg.svg2.size = clean.svg2.size;
  cfg.svg2.q_clusters = clean.svg2.q_clusters;
  cfg.svg2.kv_clusters = clean.svg2.kv_clusters, cfg.svg2.top_p = clean.svg2.top_p;
  cfg.svg2.min_kv_fraction = clean.svg2.min_kv_fraction;
  cfg.svg2.kmeans_iters_cold = clean.svg2.kmeans_iters_cold;
  cfg.svg2.kmeans_iters_warm = clean.svg2.kmeans_iters_warm;
  cfg.max_rel_error = clean.max_rel_error;
  stsa_dist_svg *svg = NULL;
  stsa_status st = stsa_dist_svg_create(dist, &cfg, &svg);
  expect_agreed(st, stsa_dist_last_error(dist), STSA_OK, STSA_OK, NULL, 0);
  stsa_dist_svg_free(svg);

  dt_set_case(
      "stsa_dist_sparse_attention, equal geometries with other padding bytes, np%d",
      dt_size);
  stsa_geometry g;
  memset(&g, 0x22 * (dt_rank + 1), sizeof g);
  const stsa_geometry gc = dt_geometry(DT_GEOM_PREFIX);
  g.frames = gc.frames, g.height = gc.height, g.width = gc.width;
  g.text = gc.text, g.text_real = gc.text_real, g.text_pos = gc.text_pos;
  dt_problem p;
  dt_problem_make(&p, &gc, 0, 1, 5, 16, STSA_F32, STSA_F32, 98);
  dt_local l;
  dt_local_make(&l, &p, DT_SPLIT_EVEN, TU_BSHD, STSA_F32);
  stsa_mask *masks[5];
  dt_head_masks(&gc, 5, masks);
  stsa_plan_desc desc = dt_plan_desc(&p, (const stsa_mask *const *)masks,
                                     STSA_ORDER_NATIVE, STSA_ORDER_NATIVE);
  desc.geometry = &g;
  st = stsa_dist_sparse_attention(dist, &desc, &l.q, &l.k, &l.v, &l.out, NULL, NULL);
  expect_agreed(st, stsa_dist_last_error(dist), STSA_OK, STSA_OK, NULL, 0);
  dt_masks_free(masks, 5);
  dt_local_free(&l);
  dt_problem_free(&p);
  stsa_dist_free(dist);
}

/* ---- arguments checked before any communication -------------------------------- */
static void null_args(void) {
  dt_set_case("NULL arguments, np%d", dt_size);
  stsa_tensor t = {0};
  DT_CHECK(stsa_dist_attention(NULL, &t, &t, &t, &t, NULL, NULL) == STSA_ERR_NULL_ARG,
           "stsa_dist_attention(NULL dist)");
  DT_CHECK(stsa_dist_create(dt_ctx, MPI_COMM_WORLD, NULL, NULL) == STSA_ERR_NULL_ARG,
           "stsa_dist_create(NULL out)");
  DT_CHECK(stsa_dist_agree(NULL, STSA_OK, NULL) == STSA_ERR_NULL_ARG, "agree(NULL)");
  DT_CHECK(stsa_dist_last_error(NULL)[0] == '\0', "last_error(NULL)");
  DT_CHECK(strcmp(stsa_dist_scheme_name((stsa_dist_scheme)9), "unknown") == 0 &&
               strcmp(stsa_dist_scheme_name(STSA_DIST_HYBRID), "hybrid") == 0,
           "scheme names");
  stsa_dist_free(NULL);
  stsa_dist_svg_free(NULL);
}

int main(int argc, char **argv) {
  dt_init(&argc, &argv);
  null_args();
  dense_faults(STSA_DIST_ULYSSES);
  dense_faults(STSA_DIST_RING);
  sparse_faults();
  svg_faults();
  svg_refused_on_rings();
  agree_cases();
  same_call_other_padding();
  create_faults(); /* last: a hang there ends the program */
  return dt_finish("test_dist_errors");
}
