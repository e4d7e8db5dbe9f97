/*
 * test_api.c — the library's contract outside the numerics: version, status
 * names, parameters and their bounds, backend forcing by environment, and
 * every invalid input returning its error without touching the output.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static void test_version_and_names(void) {
  CHECK(stsa_version_number() == STSA_VERSION_NUMBER, "run-time version %u != header %d",
        stsa_version_number(), STSA_VERSION_NUMBER);
  char want[32];
  snprintf(want, sizeof want, "%d.%d.%d", STSA_VERSION_MAJOR, STSA_VERSION_MINOR,
           STSA_VERSION_PATCH);
  CHECK(strcmp(stsa_version_string(), want) == 0, "version string %s",
        stsa_version_string());
  for (int s = 0; s < STSA_STATUS_COUNT_; s++) {
    const char *name = stsa_status_str((stsa_status)s);
    CHECK(name && *name && strcmp(name, "unknown") != 0, "status %d has no name", s);
    for (int t = 0; t < s; t++)
      CHECK(strcmp(name, stsa_status_str((stsa_status)t)) != 0,
            "statuses %d and %d share a name", s, t);
  }
  CHECK(strcmp(stsa_status_str((stsa_status)999), "unknown") == 0, "status 999");
  CHECK(stsa_dtype_size(STSA_F32) == 4 && stsa_dtype_size(STSA_F16) == 2 &&
            stsa_dtype_size(STSA_BF16) == 2 && stsa_dtype_size((stsa_dtype)7) == 0,
        "dtype sizes");
  CHECK(strcmp(stsa_dtype_name((stsa_dtype)7), "unknown") == 0 &&
            strcmp(stsa_dtype_name((stsa_dtype)-1), "unknown") == 0,
        "invalid dtypes are \"unknown\"");
}

static void test_params(void) {
  stsa_ctx *ctx = NULL;
  CHECK_STATUS(stsa_ctx_create(&ctx), STSA_OK);
  CHECK_STATUS(stsa_ctx_create(NULL), STSA_ERR_NULL_ARG);
  stsa_ctx_free(NULL); /* must be accepted */
  for (int p = 0; p < STSA_PARAM_COUNT_; p++) {
    int64_t lo, hi, v;
    CHECK_STATUS(stsa_param_bounds((stsa_param)p, &lo, &hi), STSA_OK);
    CHECK_STATUS(stsa_ctx_get(ctx, (stsa_param)p, &v), STSA_OK);
    CHECK(v >= lo && v <= hi, "param %d default %lld outside [%lld, %lld]", p,
          (long long)v, (long long)lo, (long long)hi);
    CHECK_STATUS(stsa_ctx_set(ctx, (stsa_param)p, hi + 1), STSA_ERR_BAD_PARAM);
    CHECK(strstr(stsa_ctx_last_error(ctx), "out of range") != NULL,
          "message for out-of-range param %d: '%s'", p, stsa_ctx_last_error(ctx));
    CHECK_STATUS(stsa_ctx_set(ctx, (stsa_param)p, lo - 1), STSA_ERR_BAD_PARAM);
    int64_t after;
    stsa_ctx_get(ctx, (stsa_param)p, &after);
    CHECK(after == v, "rejected set changed param %d", p);
  }
  CHECK_STATUS(stsa_ctx_set(ctx, STSA_PARAM_KV_TILE, 40), STSA_ERR_BAD_PARAM);
  CHECK_STATUS(stsa_ctx_set(ctx, STSA_PARAM_KV_TILE, 64), STSA_OK);
  CHECK_STATUS(stsa_ctx_set(ctx, STSA_PARAM_THREADS, 3), STSA_OK);
  int64_t v;
  stsa_ctx_get(ctx, STSA_PARAM_THREADS, &v);
  CHECK(v == 3, "threads = %lld after set 3", (long long)v);
  CHECK_STATUS(stsa_ctx_set(ctx, (stsa_param)99, 1), STSA_ERR_BAD_PARAM);
  CHECK_STATUS(stsa_ctx_get(ctx, (stsa_param)99, &v), STSA_ERR_BAD_PARAM);
  CHECK_STATUS(stsa_ctx_set(ctx, STSA_PARAM_BACKEND, STSA_BACKEND_PORTABLE), STSA_OK);
  CHECK(stsa_ctx_backend(ctx) == STSA_BACKEND_PORTABLE, "backend not portable");
  stsa_ctx_free(ctx);
}

static void test_env_backend(void) {
  stsa_ctx *ctx;
  setenv("STSA_FORCE_PORTABLE", "1", 1);
  stsa_ctx_create(&ctx);
  CHECK(stsa_ctx_backend(ctx) == STSA_BACKEND_PORTABLE,
        "STSA_FORCE_PORTABLE=1 gave backend %s",
        stsa_backend_name(stsa_ctx_backend(ctx)));
  stsa_ctx_free(ctx);
  unsetenv("STSA_FORCE_PORTABLE");
  setenv("STSA_BACKEND", "ref", 1);
  stsa_ctx_create(&ctx);
  CHECK(stsa_ctx_backend(ctx) == STSA_BACKEND_REF, "STSA_BACKEND=ref gave %s",
        stsa_backend_name(stsa_ctx_backend(ctx)));
  stsa_ctx_free(ctx);
  unsetenv("STSA_BACKEND");
  stsa_ctx_create(&ctx);
  stsa_backend want = stsa_backend_available(STSA_BACKEND_AMX) ? STSA_BACKEND_AMX
                      : stsa_backend_available(STSA_BACKEND_AVX512BF16)
                          ? STSA_BACKEND_AVX512BF16
                      : stsa_backend_available(STSA_BACKEND_AVX512) ? STSA_BACKEND_AVX512
                      : stsa_backend_available(STSA_BACKEND_AVX2)   ? STSA_BACKEND_AVX2
                      : stsa_backend_available(STSA_BACKEND_NEON)   ? STSA_BACKEND_NEON
                                                                  : STSA_BACKEND_PORTABLE;
  CHECK(stsa_ctx_backend(ctx) == want, "auto backend is %s",
        stsa_backend_name(stsa_ctx_backend(ctx)));
  stsa_ctx_free(ctx);

  /* an unknown name fails, and the message names the accepted values */
  setenv("STSA_BACKEND", "gpu", 1);
  stsa_ctx *untouched = (stsa_ctx *)&want;
  ctx = untouched;
  CHECK_STATUS(stsa_ctx_create(&ctx), STSA_ERR_BAD_PARAM);
  CHECK(ctx == untouched, "failed create wrote *out_ctx");
  char msg[256];
  memset(msg, 'x', sizeof msg);
  CHECK_STATUS(stsa_ctx_create_msg(&ctx, msg, sizeof msg), STSA_ERR_BAD_PARAM);
  char names[256] = "is not one of";
  for (int b = 0; b < stsa_backend_count(); b++)
    snprintf(names + strlen(names), sizeof names - strlen(names), "%s %s", b ? "," : "",
             stsa_backend_name((stsa_backend)b));
  CHECK(ctx == untouched && memchr(msg, '\0', sizeof msg) &&
            strstr(msg, "STSA_BACKEND=gpu") && strstr(msg, names) &&
            strstr(msg, "auto, ref, portable, "),
        "message for STSA_BACKEND=gpu: '%.256s' (expected '%s')", msg, names);
  char small[8];
  CHECK_STATUS(stsa_ctx_create_msg(&ctx, small, sizeof small), STSA_ERR_BAD_PARAM);
  CHECK(strlen(small) == 7 && !strncmp(small, msg, 7), "truncated message '%s'", small);
  CHECK_STATUS(stsa_ctx_create_msg(&ctx, NULL, 0), STSA_ERR_BAD_PARAM);
  setenv("STSA_FORCE_PORTABLE", "1", 1); /* does not hide the typo */
  CHECK_STATUS(stsa_ctx_create(&ctx), STSA_ERR_BAD_PARAM);
  unsetenv("STSA_FORCE_PORTABLE");
  setenv("STSA_BACKEND", "REF", 1); /* names are exact */
  CHECK_STATUS(stsa_ctx_create(&ctx), STSA_ERR_BAD_PARAM);
  /* every name of the table is accepted: a backend this machine runs gives
   * itself, one it does not run is refused, naming the ones it does */
  for (int b = 0; b < stsa_backend_count(); b++) {
    setenv("STSA_BACKEND", stsa_backend_name((stsa_backend)b), 1);
    if (!stsa_backend_available((stsa_backend)b)) {
      CHECK_STATUS(stsa_ctx_create_msg(&ctx, msg, sizeof msg), STSA_ERR_UNSUPPORTED);
      CHECK(strstr(msg, "does not run it") && strstr(msg, "portable"),
            "message for %s: '%s'", stsa_backend_name((stsa_backend)b), msg);
      continue;
    }
    CHECK_STATUS(stsa_ctx_create_msg(&ctx, msg, sizeof msg), STSA_OK);
    const stsa_backend got = stsa_ctx_backend(ctx);
    CHECK(got == (b == STSA_BACKEND_AUTO ? want : (stsa_backend)b),
          "STSA_BACKEND=%s gave %s", stsa_backend_name((stsa_backend)b),
          stsa_backend_name(got));
    stsa_ctx_free(ctx);
  }
  /* empty and "auto" mean automatic; a good name succeeds with msg untouched */
  const char *fine[2] = {"", "auto"};
  for (int i = 0; i < 2; i++) {
    setenv("STSA_BACKEND", fine[i], 1);
    memset(msg, 'x', sizeof msg);
    ctx = NULL;
    CHECK_STATUS(stsa_ctx_create_msg(&ctx, msg, sizeof msg), STSA_OK);
    CHECK(ctx && stsa_ctx_backend(ctx) == want, "STSA_BACKEND='%s' gave %s", fine[i],
          ctx ? stsa_backend_name(stsa_ctx_backend(ctx)) : "no context");
    CHECK(msg[0] == 'x', "msg written on success");
    stsa_ctx_free(ctx);
  }
  unsetenv("STSA_BACKEND");
  CHECK_STATUS(stsa_ctx_create_msg(NULL, msg, sizeof msg), STSA_ERR_NULL_ARG);
}

/* The table of backends: every number has its own name, which reads back
 * to it, and a line on what it is; names are exact; AUTO, REF and PORTABLE
 * run everywhere. */
static void test_backend_table(void) {
  const int n = stsa_backend_count();
  CHECK(n == STSA_BACKEND_COUNT_, "stsa_backend_count() = %d, header %d", n,
        (int)STSA_BACKEND_COUNT_);
  for (int b = 0; b < n; b++) {
    const char *name = stsa_backend_name((stsa_backend)b);
    CHECK(name && *name && strcmp(name, "unknown") != 0, "backend %d has no name", b);
    CHECK(stsa_backend_from_name(name) == b, "'%s' reads back as %d, not %d", name,
          stsa_backend_from_name(name), b);
    const char *about = stsa_backend_about((stsa_backend)b);
    CHECK(about && strlen(about) > 8 && !strchr(about, '\n'), "backend %s: about '%s'",
          name, about ? about : "(null)");
    for (int c = 0; c < b; c++)
      CHECK(strcmp(name, stsa_backend_name((stsa_backend)c)) != 0,
            "backends %d and %d share the name %s", c, b, name);
  }
  const char *not_names[] = {"", "unknown", "AVX2", "avx2 ", "av", "portable2"};
  for (size_t i = 0; i < sizeof not_names / sizeof not_names[0]; i++)
    CHECK(stsa_backend_from_name(not_names[i]) == -1, "'%s' names backend %d",
          not_names[i], stsa_backend_from_name(not_names[i]));
  CHECK(stsa_backend_from_name(NULL) == -1, "NULL names a backend");
  CHECK(!strcmp(stsa_backend_name((stsa_backend)n), "unknown") &&
            !strcmp(stsa_backend_name((stsa_backend)-1), "unknown") &&
            !strcmp(stsa_backend_about((stsa_backend)n), "") &&
            !stsa_backend_available((stsa_backend)n),
        "a number past the table is a backend");
  CHECK(stsa_backend_available(STSA_BACKEND_AUTO) &&
            stsa_backend_available(STSA_BACKEND_REF) &&
            stsa_backend_available(STSA_BACKEND_PORTABLE),
        "auto, ref and portable run everywhere");
}

/* Sizes near INT64_MAX in the descriptor helpers and at the API boundary:
 * refused with the size named, never an overflow (UBSan aborts on one). */
static void test_huge_sizes(void) {
  stsa_ctx *ctx = NULL;
  CHECK_STATUS(stsa_ctx_create(&ctx), STSA_OK);
  float x[64] = {0}, y[64] = {0};
  const int64_t M = INT64_MAX, T = (int64_t)1 << 40;
  struct {
    stsa_tensor q;
    stsa_status want;
    const char *msg;
  } cases[] = {
      {stsa_tensor_bshd(x, STSA_F32, 1, M, 4, 4), STSA_ERR_BAD_SHAPE, "size of S"},
      {stsa_tensor_bshd(x, STSA_F32, 1, 4, M, M), STSA_ERR_BAD_SHAPE, "size of H"},
      {stsa_tensor_bshd(x, STSA_F32, M, M, M, M), STSA_ERR_BAD_SHAPE, "size of B"},
      {stsa_tensor_bhsd(x, STSA_F32, 1, M, M, 4), STSA_ERR_BAD_SHAPE, "size of S"},
      {stsa_tensor_shd(x, STSA_F32, 4, M / 2, 3), STSA_ERR_BAD_SHAPE, "size of H"},
      {stsa_tensor_bshd(x, STSA_F32, 1, T, T, 512), STSA_ERR_BAD_STRIDE, "stride of B"},
      {stsa_tensor_bhsd(x, STSA_F32, T, T, T, 512), STSA_ERR_BAD_STRIDE, "stride of B"},
      {stsa_tensor_bshd(x, STSA_F32, 1, 4, 1, 0), STSA_ERR_BAD_SHAPE, "head dim D is 0"},
      {stsa_tensor_bshd(NULL, STSA_F32, 1, 0, 2, 4), STSA_ERR_BAD_SHAPE,
       "tensor is empty: size of S is 0"},
      {stsa_tensor_bshd(NULL, STSA_F16, 0, 3, 2, 4), STSA_ERR_BAD_SHAPE,
       "tensor is empty: size of B is 0"},
  };
  stsa_tensor kv = stsa_tensor_bshd(y, STSA_F32, 1, 4, 1, 4);
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    stsa_tensor out = cases[i].q;
    out.data = y + 32;
    stsa_status st = stsa_attention_check(ctx, &cases[i].q, &kv, &kv, &out, NULL);
    CHECK(st == cases[i].want, "case %zu: got %s, expected %s", i, stsa_status_str(st),
          stsa_status_str(cases[i].want));
    CHECK(strstr(stsa_ctx_last_error(ctx), cases[i].msg) != NULL,
          "case %zu: message '%s' lacks '%s'", i, stsa_ctx_last_error(ctx), cases[i].msg);
  }
  /* an empty q named as such even with NULL data, and D = 0 as the head dim */
  stsa_tensor e = stsa_tensor_bshd(NULL, STSA_F32, 1, 4, 1, 0);
  CHECK_STATUS(stsa_attention_check(ctx, &e, &kv, &kv, &kv, NULL), STSA_ERR_BAD_SHAPE);
  CHECK(strstr(stsa_ctx_last_error(ctx), "q: head dim D is 0, must be >= 1") != NULL,
        "D = 0: '%s'", stsa_ctx_last_error(ctx));
  stsa_ctx_free(ctx);
}

/* Failing parts on several threads at once leave one whole message. */
static void test_part_messages(void) {
  stsa_ctx *ctx = NULL;
  CHECK_STATUS(stsa_ctx_create(&ctx), STSA_OK);
  float x[4 * 8] = {0}, o[4 * 8], k9[4 * 9] = {0};
  stsa_tensor q = stsa_tensor_bshd(x, STSA_F32, 1, 4, 1, 8);
  stsa_tensor out = stsa_tensor_bshd(o, STSA_F32, 1, 4, 1, 8);
  stsa_tensor bad = stsa_tensor_bshd(k9, STSA_F32, 1, 4, 1, 9);
  long wrong = 0;
  static char wbuf[1]; /* validation fails before the buffer is looked at */
#pragma omp parallel for num_threads(4) reduction(+ : wrong)
  for (int i = 0; i < 400; i++)
    wrong += stsa_attention_part(ctx, &q, &bad, &q, &out, NULL, i % 4, 4, wbuf, 0) !=
             STSA_ERR_BAD_SHAPE;
  CHECK(wrong == 0, "%ld parts did not fail", wrong);
  CHECK(!strcmp(stsa_ctx_last_error(ctx), "k has head dim 9 but q has 8"),
        "message after concurrent failing parts: '%s'", stsa_ctx_last_error(ctx));
  CHECK_STATUS(stsa_attention_part(ctx, &q, &q, &q, &out, NULL, 3, 2, wbuf, 0),
               STSA_ERR_BAD_PARAM);
  CHECK(strstr(stsa_ctx_last_error(ctx), "ith = 3, nth = 2") != NULL, "bad part: '%s'",
        stsa_ctx_last_error(ctx));
  /* a work buffer smaller than wsize is refused, and says what it needs */
  size_t wsize = 0;
  CHECK_STATUS(stsa_attention_part_wsize(ctx, &q, &q, &q, &out, NULL, 2, &wsize),
               STSA_OK);
  CHECK(wsize > 64, "wsize = %zu", wsize);
  char *work = malloc(wsize);
  CHECK_STATUS(stsa_attention_part(ctx, &q, &q, &q, &out, NULL, 0, 2, work, wsize - 1),
               STSA_ERR_BAD_PARAM);
  CHECK(strstr(stsa_ctx_last_error(ctx), "work buffer") != NULL, "small buffer: '%s'",
        stsa_ctx_last_error(ctx));
  CHECK_STATUS(stsa_attention_part(ctx, &q, &q, &q, &out, NULL, 3, 2, wbuf, 0),
               STSA_ERR_BAD_PARAM);
  /* a part that succeeds leaves the last message alone */
  CHECK_STATUS(stsa_attention_part(ctx, &q, &q, &q, &out, NULL, 0, 2, work, wsize),
               STSA_OK);
  CHECK(strstr(stsa_ctx_last_error(ctx), "ith = 3") != NULL, "message cleared by a part");
  CHECK_STATUS(stsa_attention_part(ctx, &q, &q, &q, &out, NULL, 0, 2, NULL, wsize),
               STSA_ERR_NULL_ARG);
  free(work);
  stsa_ctx_free(ctx);
}

/* A valid call's tensors; each invalid case perturbs a copy. */
typedef struct call {
  stsa_tensor q, k, v, out;
  float *lse;
} call;

static void expect_rejected(stsa_ctx *ctx, const call *base, call c, stsa_status want,
                            const char *what, const char *msg_part) {
  stsa_attn_opts opts = {sizeof(stsa_attn_opts), 0.0f, c.lse};
  stsa_status st = stsa_attention(ctx, &c.q, &c.k, &c.v, &c.out, &opts);
  CHECK(st == want, "%s: got %s, expected %s (%s)", what, stsa_status_str(st),
        stsa_status_str(want), stsa_ctx_last_error(ctx));
  if (msg_part)
    CHECK(strstr(stsa_ctx_last_error(ctx), msg_part) != NULL,
          "%s: message '%s' lacks '%s'", what, stsa_ctx_last_error(ctx), msg_part);
  CHECK(tu_is_sentinel(&base->out) && tu_guard_ok(base->out.data), "%s: output touched",
        what);
  for (int i = 0; i < 16; i++)
    CHECK(base->lse[i] == 123.0f, "%s: lse touched", what);
  /* the partitioned entry point validates the same way, and says why */
  stsa_ctx_set(ctx, STSA_PARAM_CHECK_FINITE, 1); /* a call that clears the message */
  static char wbuf[1]; /* validation fails before the buffer is looked at */
  st = stsa_attention_part(ctx, &c.q, &c.k, &c.v, &c.out, &opts, 0, 1, wbuf, 0);
  CHECK(st == want, "%s (part): got %s", what, stsa_status_str(st));
  if (msg_part)
    CHECK(strstr(stsa_ctx_last_error(ctx), msg_part) != NULL,
          "%s (part): message '%s' lacks '%s'", what, stsa_ctx_last_error(ctx), msg_part);
  CHECK(tu_is_sentinel(&base->out), "%s (part): output touched", what);
}

static void test_invalid_inputs(void) {
  tu_rng rng = {3};
  const int64_t S = 16, H = 1, D = 32;
  call base;
  base.q = tu_random_tensor(&rng, STSA_F32, TU_BSHD, 1, S, H, D, 1);
  base.k = tu_random_tensor(&rng, STSA_F32, TU_BSHD, 1, S, H, D, 1);
  base.v = tu_random_tensor(&rng, STSA_F32, TU_BSHD, 1, S, H, D, 1);
  base.out = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, S, H, D);
  base.lse = tu_guarded_alloc(16 * sizeof(float));
  for (int i = 0; i < 16; i++)
    base.lse[i] = 123.0f;
  stsa_ctx *ctx;
  stsa_ctx_create(&ctx);
  call c;

  stsa_attn_opts none = STSA_INIT(stsa_attn_opts);
  CHECK_STATUS(stsa_attention(NULL, &base.q, &base.k, &base.v, &base.out, &none),
               STSA_ERR_NULL_ARG);
  CHECK_STATUS(stsa_attention(ctx, NULL, &base.k, &base.v, &base.out, &none),
               STSA_ERR_NULL_ARG);
  CHECK_STATUS(stsa_attention(ctx, &base.q, &base.k, &base.v, NULL, &none),
               STSA_ERR_NULL_ARG);
  c = base, c.q.data = NULL;
  expect_rejected(ctx, &base, c, STSA_ERR_NULL_ARG, "NULL q data", "q: data pointer");
  c = base, c.v.dtype = (stsa_dtype)9;
  expect_rejected(ctx, &base, c, STSA_ERR_BAD_DTYPE, "bad v dtype", "v: dtype 9");
  c = base, c.q.shape[1] = 0;
  expect_rejected(ctx, &base, c, STSA_ERR_BAD_SHAPE, "zero S", "size of S is 0");
  c = base, c.k.shape[3] = -4;
  expect_rejected(ctx, &base, c, STSA_ERR_BAD_SHAPE, "negative D", "size of D");
  c = base, c.k.shape[3] = 16;
  expect_rejected(ctx, &base, c, STSA_ERR_BAD_SHAPE, "D mismatch", "head dim");
  c = base, c.v.shape[1] = 8;
  expect_rejected(ctx, &base, c, STSA_ERR_BAD_SHAPE, "S_kv mismatch", "v has 8 tokens");
  c = base, c.out.shape[1] = 8;
  expect_rejected(ctx, &base, c, STSA_ERR_BAD_SHAPE, "out S mismatch", "out has 8");
  c = base, c.k.shape[2] = 2, c.k.shape[1] = 8, c.k.stride[1] = 2 * D;
  expect_rejected(ctx, &base, c, STSA_ERR_BAD_SHAPE, "H mismatch", "heads");
  c = base, c.k.shape[0] = 2, c.k.shape[1] = 8, c.v.shape[0] = 2, c.v.shape[1] = 8;
  expect_rejected(ctx, &base, c, STSA_ERR_BAD_SHAPE, "B mismatch", "batch");
  c = base, c.q.stride[3] = 0;
  expect_rejected(ctx, &base, c, STSA_ERR_BAD_STRIDE, "zero stride", "stride of D");
  c = base, c.q.stride[1] = 4; /* rows 4 apart with 32 elements each alias */
  expect_rejected(ctx, &base, c, STSA_ERR_BAD_STRIDE, "aliasing strides", "alias");
  c = base, c.q.data = (char *)c.q.data + 2;
  expect_rejected(ctx, &base, c, STSA_ERR_MISALIGNED, "misaligned q", "aligned");
  c = base, c.q.shape[3] = 1024, c.k.shape[3] = 1024, c.v.shape[3] = 1024;
  expect_rejected(ctx, &base, c, STSA_ERR_BAD_SHAPE, "D too large", "maximum");
  /* output overlapping an input: out is written while k/v are still read */
  c = base, c.k = base.out, c.k.dtype = STSA_F32;
  expect_rejected(ctx, &base, c, STSA_ERR_OVERLAP, "out == k", "out overlaps k");
  c = base, c.lse = (float *)base.out.data + 3;
  {
    /* lse inside out: checked without touching either */
    stsa_attn_opts opts = {sizeof(stsa_attn_opts), 0.0f, c.lse};
    CHECK_STATUS(stsa_attention(ctx, &c.q, &c.k, &c.v, &c.out, &opts), STSA_ERR_OVERLAP);
    CHECK(tu_is_sentinel(&base.out), "lse overlap: output touched");
  }
  {
    stsa_attn_opts bad_scale = {sizeof(stsa_attn_opts), NAN, NULL};
    CHECK_STATUS(stsa_attention(ctx, &base.q, &base.k, &base.v, &base.out, &bad_scale),
                 STSA_ERR_BAD_PARAM);
    bad_scale.scale = -1.0f;
    CHECK_STATUS(stsa_attention(ctx, &base.q, &base.k, &base.v, &base.out, &bad_scale),
                 STSA_ERR_BAD_PARAM);
    CHECK(tu_is_sentinel(&base.out), "bad scale: output touched");
  }
  /* NaN and Inf in inputs */
  ((float *)base.k.data)[5 * D + 7] = NAN;
  expect_rejected(ctx, &base, base, STSA_ERR_NONFINITE, "NaN in k", "k[b=0, s=5, h=0]");
  ((float *)base.k.data)[5 * D + 7] = 0.5f;
  ((float *)base.v.data)[3] = INFINITY;
  expect_rejected(ctx, &base, base, STSA_ERR_NONFINITE, "Inf in v", "v[b=0, s=0, h=0]");
  ((float *)base.v.data)[3] = 0.5f;
  /* part index out of range */
  static char wbuf[1];
  CHECK_STATUS(
      stsa_attention_part(ctx, &base.q, &base.k, &base.v, &base.out, NULL, 2, 2, wbuf, 1),
      STSA_ERR_BAD_PARAM);
  CHECK_STATUS(
      stsa_attention_part(ctx, &base.q, &base.k, &base.v, &base.out, NULL, 0, 0, wbuf, 1),
      STSA_ERR_BAD_PARAM);
  CHECK(tu_is_sentinel(&base.out), "bad part: output touched");
  /* and the valid call still works after all of that */
  stsa_attn_opts opts = {sizeof(stsa_attn_opts), 0.0f, base.lse};
  CHECK_STATUS(stsa_attention(ctx, &base.q, &base.k, &base.v, &base.out, &opts), STSA_OK);
  CHECK(!tu_is_sentinel(&base.out) && tu_guard_ok(base.out.data) && tu_guard_ok(base.lse),
        "valid call after errors");
  CHECK_STATUS(stsa_attention_check(ctx, &base.q, &base.k, &base.v, &base.out, &opts),
               STSA_OK);
  stsa_ctx_free(ctx);
  tu_free_tensor(&base.q);
  tu_free_tensor(&base.k);
  tu_free_tensor(&base.v);
  tu_free_tensor(&base.out);
  tu_guarded_free(base.lse);
}

/* stsa.h's extensible structs: a zeroed size is refused with a message that
 * says what to do and nothing is written; a newer caller's larger struct is
 * accepted while its extra bytes are zero (and refused when they are not);
 * a struct the library writes is written only up to the size both know. */
/* The NaN/Inf scan runs on the context's threads above a few thousand rows;
 * its message still names the first bad row in (b, s, h) order: here in the
 * first thread's share, found after a later row of the second's. */
static void test_threaded_finite_scan(void) {
  const int64_t B = 2, S = 8192, H = 1, D = 8, n = B * S * H * D;
  float *x = calloc((size_t)(4 * n), sizeof *x);
  CHECK(x != NULL, "out of memory");
  if (!x)
    return;
  stsa_tensor q = stsa_tensor_bshd(x, STSA_F32, B, S, H, D),
              k = stsa_tensor_bshd(x + n, STSA_F32, B, S, H, D),
              v = stsa_tensor_bshd(x + 2 * n, STSA_F32, B, S, H, D),
              o = stsa_tensor_bshd(x + 3 * n, STSA_F32, B, S, H, D);
  for (int threads = 1; threads <= 3; threads++) {
    stsa_ctx *ctx = NULL;
    CHECK_STATUS(stsa_ctx_create(&ctx), STSA_OK);
    if (!ctx)
      break;
    CHECK_STATUS(stsa_ctx_set(ctx, STSA_PARAM_THREADS, threads), STSA_OK);
    CHECK_STATUS(stsa_attention_check(ctx, &q, &k, &v, &o, NULL), STSA_OK);
    x[n + (S + 10) * D + 3] = NAN;  /* k[b=1, s=10] */
    x[n + (S - 100) * D + 1] = NAN; /* k[b=0, s=8092]: the first */
    x[2 * n + 7 * D] = INFINITY;    /* v: checked after k */
    CHECK_STATUS(stsa_attention_check(ctx, &q, &k, &v, &o, NULL), STSA_ERR_NONFINITE);
    CHECK(strstr(stsa_ctx_last_error(ctx), "k[b=0, s=8092, h=0]") != NULL,
          "threads %d: the scan named %s", threads, stsa_ctx_last_error(ctx));
    x[n + (S + 10) * D + 3] = x[n + (S - 100) * D + 1] = 0.0f;
    CHECK_STATUS(stsa_attention_check(ctx, &q, &k, &v, &o, NULL), STSA_ERR_NONFINITE);
    CHECK(strstr(stsa_ctx_last_error(ctx), "v[b=0, s=7, h=0]") != NULL,
          "threads %d: the scan named %s", threads, stsa_ctx_last_error(ctx));
    x[2 * n + 7 * D] = 0.0f;
    stsa_ctx_free(ctx);
  }
  free(x);
}

static void test_struct_sizes(void) {
  stsa_ctx *ctx = NULL;
  CHECK_STATUS(stsa_ctx_create(&ctx), STSA_OK);
  tu_rng rng = {3};
  stsa_tensor q = tu_random_tensor(&rng, STSA_F32, TU_BSHD, 1, 40, 2, 16, 1);
  stsa_tensor out = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, 40, 2, 16);
  stsa_attn_opts zeroed;
  memset(&zeroed, 0, sizeof zeroed);
  CHECK_STATUS(stsa_attention(ctx, &q, &q, &q, &out, &zeroed), STSA_ERR_BAD_PARAM);
  CHECK(strstr(stsa_ctx_last_error(ctx), "stsa_attn_opts.size is 0") &&
            strstr(stsa_ctx_last_error(ctx), "STSA_INIT"),
        "zeroed size: '%s'", stsa_ctx_last_error(ctx));
  CHECK(tu_is_sentinel(&out), "a refused size wrote output");
  /* a caller built against a later release: the same options, grown */
  struct newer {
    stsa_attn_opts opts;
    double added_later;
  } newer = {STSA_INIT(stsa_attn_opts), 0.0};
  newer.opts.size = sizeof newer;
  CHECK_STATUS(stsa_attention(ctx, &q, &q, &q, &out, &newer.opts), STSA_OK);
  newer.added_later = 1.0;
  tu_free_tensor(&out);
  out = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, 40, 2, 16);
  CHECK_STATUS(stsa_attention(ctx, &q, &q, &q, &out, &newer.opts), STSA_ERR_UNSUPPORTED);
  CHECK(strstr(stsa_ctx_last_error(ctx), "newer stsa") != NULL, "newer field: '%s'",
        stsa_ctx_last_error(ctx));
  CHECK(tu_is_sentinel(&out), "a refused newer struct wrote output");
  stsa_attn_opts small = STSA_INIT(stsa_attn_opts);
  small.size = sizeof(size_t);
  CHECK_STATUS(stsa_attention(ctx, &q, &q, &q, &out, &small), STSA_ERR_BAD_PARAM);
  small.size = (size_t)1 << 40; /* uninitialised: refused without reading past it */
  CHECK_STATUS(stsa_attention(ctx, &q, &q, &q, &out, &small), STSA_ERR_BAD_PARAM);
  CHECK(strstr(stsa_ctx_last_error(ctx), "uninitialised") != NULL, "huge size: '%s'",
        stsa_ctx_last_error(ctx));
  /* written structs: only the known bytes, the size field kept */
  struct newer_stats {
    stsa_plan_stats st;
    unsigned char tail[8];
  } ns;
  memset(&ns, 0xab, sizeof ns);
  ns.st.size = sizeof ns;
  stsa_mask *full;
  stsa_mask_full(&full);
  const stsa_mask *masks[2] = {full, full};
  stsa_plan_desc desc = {
      sizeof(stsa_plan_desc), 40, 40, 2, masks, NULL, STSA_ORDER_NATIVE,
      STSA_ORDER_NATIVE,      0,  0,  0, NULL,  NULL};
  stsa_plan *plan = NULL;
  CHECK_STATUS(stsa_plan_build(ctx, &desc, &plan), STSA_OK);
  CHECK_STATUS(stsa_plan_get_stats(plan, &ns.st), STSA_OK);
  CHECK(ns.st.size == sizeof ns && ns.st.pairs_total == 2 * 40 * 40 &&
            ns.tail[0] == 0xab && ns.tail[7] == 0xab,
        "stats into a larger struct: size %zu, pairs %lld, tail %x", ns.st.size,
        (long long)ns.st.pairs_total, ns.tail[0]);
  stsa_plan_stats unset;
  memset(&unset, 0, sizeof unset);
  CHECK_STATUS(stsa_plan_get_stats(plan, &unset), STSA_ERR_BAD_PARAM);
  desc.size = 0;
  stsa_plan *none = NULL;
  CHECK_STATUS(stsa_plan_build(ctx, &desc, &none), STSA_ERR_BAD_PARAM);
  CHECK(none == NULL && strstr(stsa_ctx_last_error(ctx), "stsa_plan_desc.size"),
        "plan desc size 0: '%s'", stsa_ctx_last_error(ctx));
  stsa_svg_config cfg;
  memset(&cfg, 0, sizeof cfg);
  CHECK_STATUS(stsa_svg_preset("wan21-480p", &cfg), STSA_ERR_BAD_PARAM);
  cfg.size = sizeof cfg;
  CHECK_STATUS(stsa_svg_preset("wan21-480p", &cfg), STSA_OK);
  CHECK(cfg.size == sizeof cfg && cfg.heads > 0, "preset with its size set");
  stsa_plan_free(plan);
  stsa_mask_free(full);
  tu_free_tensor(&q);
  tu_free_tensor(&out);
  stsa_ctx_free(ctx);
}

int main(void) {
  test_version_and_names();
  test_params();
  test_backend_table();
  test_env_backend();
  test_huge_sizes();
  test_part_messages();
  test_invalid_inputs();
  test_threaded_finite_scan();
  test_struct_sizes();
  return tu_finish("test_api");
}
