/*
 * quality_zoo.h — the heads `stsa bench quality` judges the error guard on:
 * families of heads of many structures (quality_zoo.c says which and why),
 * each at a few geometries and dtypes, generated from the built-in workload
 * and transformed so that no single generator decides the verdict.
 */
#ifndef STSA_TOOLS_QUALITY_ZOO_H
#define STSA_TOOLS_QUALITY_ZOO_H

#include <stdint.h>

#include "stsa.h"

/* How the heads of a case are made from the workload's. */
typedef enum zoo_mix {
  ZOO_MIX_NONE = 0,   /* one kind per head */
  ZOO_MIX_TOKENS = 1, /* each query token follows kind a or kind b at random */
  ZOO_MIX_REGION = 2  /* the left half of each frame follows kind a, the right b */
} zoo_mix;

typedef struct zoo_family {
  const char *name;
  stsa_head_kind kind_a, kind_b; /* kind_b: the mixes' second kind */
  zoo_mix mix;
  double temperature; /* q scaled by it: > 1 sharper, < 1 flatter */
  double noise;       /* Gaussian noise on q and k, relative to their rms */
  int sinks;          /* video keys every query favours (random tokens) */
  int text_heavy;     /* text tokens as many as video ones, favoured by every query */
} zoo_family;

/* One case: a family at a geometry, head dim and dtype. */
typedef struct zoo_case {
  const zoo_family *family;
  stsa_geometry geometry;
  int64_t heads, head_dim;
  stsa_dtype dtype;
  uint64_t seed;
  const char *size_name; /* "small", "medium", "wan480p" */
} zoo_case;

/* The cases of the zoo into out[cap]: the small default set (>= 200 heads),
 * plus the Wan-480p geometry when `wan` is set; `seed` 0 gives the zoo's
 * own heads, any other value other draws of the same families. Returns the
 * count. */
int zoo_cases(int wan, uint64_t seed, zoo_case *out, int cap);
/* The most cases zoo_cases gives. */
int zoo_case_capacity(void);

/* q, k, v of a case, [1, N, H, D] in the case's dtype (new buffers, free
 * their data). */
void zoo_generate(const zoo_case *c, stsa_tensor *q, stsa_tensor *k, stsa_tensor *v);

#endif
