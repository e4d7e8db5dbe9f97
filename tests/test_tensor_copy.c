/*
 * test_tensor_copy.c — stsa_tensor_copy, which the distributed layer packs
 * and unpacks every shard with: every layout and dtype pair, equal dtypes
 * bit for bit (NaN payloads included), conversions rounded as stores are,
 * guard bytes intact, and bad arguments refused with the output untouched.
 */
#define STSA_EXPERIMENTAL /* stsa_tensor_copy, _check, _overlap */
#include <math.h>
#include <string.h>

#include "testutil.h"

static const stsa_dtype DTYPES[3] = {STSA_F32, STSA_F16, STSA_BF16};

static void check_pair(tu_rng *rng, stsa_dtype din, tu_layout lin, stsa_dtype dout,
                       tu_layout lout) {
  const int64_t B = lin == TU_SHD || lout == TU_SHD ? 1 : 2, S = 7, H = 3, D = 5;
  stsa_tensor in = tu_random_tensor(rng, din, lin, B, S, H, D, 3.0);
  stsa_tensor out = tu_sentinel_tensor(dout, lout, B, S, H, D);
  if (din == STSA_F32) /* a NaN with a payload, which bit copies keep */
    memcpy((char *)in.data + tu_offset(&in, 0, 1, 1, 1) * 4, &(uint32_t){0x7fc01234u}, 4);
  CHECK_STATUS(stsa_tensor_copy(&in, &out), STSA_OK);
  int bad = 0;
  for (int64_t b = 0; b < B; b++)
    for (int64_t s = 0; s < S; s++)
      for (int64_t h = 0; h < H; h++)
        for (int64_t d = 0; d < D; d++) {
          const size_t i = tu_offset(&in, b, s, h, d), o = tu_offset(&out, b, s, h, d);
          if (din == dout) {
            const size_t e = stsa_dtype_size(din);
            bad += memcmp((char *)in.data + i * e, (char *)out.data + o * e, e) != 0;
          } else {
            const double x = tu_load(in.data, din, i);
            double want = 0;
            char tmp[4];
            want = tu_store(tmp, dout, 0, x);
            const double got = tu_load(out.data, dout, o);
            bad += !(got == want || (isnan(got) && isnan(want)));
          }
        }
  CHECK(bad == 0, "%s %s -> %s %s: %d elements differ", stsa_dtype_name(din),
        tu_layout_name(lin), stsa_dtype_name(dout), tu_layout_name(lout), bad);
  CHECK(tu_guard_ok(out.data), "guard bytes of out overwritten");
  tu_free_tensor(&in);
  tu_free_tensor(&out);
}

static void check_refusals(tu_rng *rng) {
  stsa_tensor in = tu_random_tensor(rng, STSA_F32, TU_BSHD, 1, 4, 2, 8, 1.0);
  stsa_tensor out = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, 5, 2, 8);
  CHECK_STATUS(stsa_tensor_copy(&in, &out), STSA_ERR_BAD_SHAPE);
  CHECK(tu_is_sentinel(&out), "a refused copy wrote its output");
  CHECK_STATUS(stsa_tensor_copy(&in, &in), STSA_ERR_OVERLAP);
  CHECK_STATUS(stsa_tensor_copy(NULL, &out), STSA_ERR_NULL_ARG);
  stsa_tensor bad = out;
  bad.dtype = (stsa_dtype)7;
  CHECK(stsa_tensor_copy(&in, &bad) != STSA_OK, "an unknown dtype was accepted");
  CHECK(tu_is_sentinel(&out), "a refused copy wrote its output");
  tu_free_tensor(&in);
  tu_free_tensor(&out);
}

/* stsa_tensor_check and stsa_tensors_overlap give the calls' own verdicts:
 * a fused QKV's q, k and v interleave without sharing, a view that steps
 * onto its neighbour's elements shares them, bad tensors are named. */
static void check_rules(void) {
  float qkv[2 * 4 * 3 * 2 * 8] = {0}; /* [B=2, S=4, 3, H=2, D=8] */
  stsa_tensor part[3];
  for (int i = 0; i < 3; i++) {
    part[i] = stsa_tensor_bshd(qkv + i * 2 * 8, STSA_F32, 2, 4, 2, 8);
    part[i].stride[0] = 4 * 3 * 2 * 8;
    part[i].stride[1] = 3 * 2 * 8;
    CHECK(stsa_tensor_check(&part[i]) == STSA_OK, "fused QKV part %d refused", i);
  }
  CHECK(!stsa_tensors_overlap(&part[0], &part[1]) &&
            !stsa_tensors_overlap(&part[1], &part[2]),
        "interleaved q, k, v taken for overlapping");
  CHECK(stsa_tensors_overlap(&part[0], &part[0]), "a tensor does not overlap itself");
  stsa_tensor shifted = part[0];
  shifted.data = qkv + 8; /* head 1 of q is head 0 of this view */
  CHECK(stsa_tensors_overlap(&part[0], &shifted), "a view one head along shares nothing");
  stsa_tensor bad = part[0];
  bad.shape[3] = 0;
  CHECK(stsa_tensor_check(&bad) == STSA_ERR_BAD_SHAPE, "D = 0 passed the check");
  CHECK(!stsa_tensors_overlap(&bad, &part[0]), "a refused tensor overlaps");
  bad = part[0];
  bad.dtype = (stsa_dtype)99;
  CHECK(stsa_tensor_check(&bad) != STSA_OK, "an unknown dtype passed the check");
  CHECK(stsa_tensor_check(NULL) == STSA_ERR_NULL_ARG, "NULL passed the check");
}

int main(void) {
  check_rules();
  tu_rng rng = {42};
  for (int a = 0; a < 3; a++)
    for (int b = 0; b < 3; b++)
      for (int la = 0; la < TU_LAYOUT_COUNT; la++)
        for (int lb = 0; lb < TU_LAYOUT_COUNT; lb++)
          check_pair(&rng, DTYPES[a], (tu_layout)la, DTYPES[b], (tu_layout)lb);
  check_refusals(&rng);
  return tu_finish("test_tensor_copy");
}
