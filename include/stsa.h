/*
 * stsa.h — spatio-temporal sparse attention for video diffusion transformers.
 *
 * The one public header of libstsa. Overview:
 *
 *   - A context (stsa_ctx) holds options (thread count, backend, tile sizes) and
 *     reusable scratch. One context may be used by one thread at a time; create
 *     one per thread for concurrent calls. Nothing in the library is global.
 *   - Every entry point returns an stsa_status. stsa_status_str() names the code;
 *     stsa_ctx_last_error() gives the detailed message of the last failure on
 *     that context (which argument, what was expected).
 *   - Tensors are described by stsa_tensor: a data pointer, a dtype and a shape
 *     [B, S, H, D] with explicit strides in elements, so that [B,S,H,D]
 *     (diffusers), [B,H,S,D] (PyTorch SDPA) and [S,H,D] (FlashInfer) all work
 *     without a copy. Output is written in the caller's layout and dtype.
 *   - On any error the library writes nothing to caller memory.
 *   - The library never prints and never exits.
 *
 * Dimension names used throughout: B batch, H heads, S tokens (S_q queries,
 * S_kv keys/values), D head dimension.
 *
 * Enums only grow at the end; numeric values are part of the ABI.
 */
#ifndef STSA_H
#define STSA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define STSA_VERSION_MAJOR 0
#define STSA_VERSION_MINOR 1
#define STSA_VERSION_PATCH 0
#define STSA_VERSION_NUMBER                                                    \
  (STSA_VERSION_MAJOR * 10000 + STSA_VERSION_MINOR * 100 + STSA_VERSION_PATCH)

#if defined(_WIN32) && defined(STSA_BUILD_SHARED)
#define STSA_API __declspec(dllexport)
#elif defined(__GNUC__)
#define STSA_API __attribute__((visibility("default")))
#else
#define STSA_API
#endif

/* Run-time version: STSA_VERSION_NUMBER of the library actually loaded. */
STSA_API unsigned stsa_version_number(void);
/* "MAJOR.MINOR.PATCH". */
STSA_API const char *stsa_version_string(void);

/* ------------------------------------------------------------------------ */
/* Status codes (pinned, append-only)                                        */
/* ------------------------------------------------------------------------ */
typedef enum stsa_status {
  STSA_OK = 0,
  STSA_ERR_NULL_ARG = 1,     /* a required pointer is NULL */
  STSA_ERR_BAD_SHAPE = 2,    /* zero/negative sizes, mismatched shapes */
  STSA_ERR_BAD_DTYPE = 3,    /* unknown or unsupported dtype */
  STSA_ERR_BAD_STRIDE = 4,   /* strides that alias elements or overflow */
  STSA_ERR_MISALIGNED = 5,   /* data pointer not aligned to its element */
  STSA_ERR_OVERLAP = 6,      /* output overlaps an input or another output */
  STSA_ERR_NONFINITE = 7,    /* NaN or Inf found in an input */
  STSA_ERR_OUT_OF_MEMORY = 8,
  STSA_ERR_BAD_PARAM = 9,    /* unknown parameter or value out of bounds */
  STSA_ERR_UNSUPPORTED = 10, /* valid request this build cannot serve */
  STSA_ERR_EMPTY_ROW = 11,   /* a mask leaves a query row with no key */
  STSA_ERR_IO = 12,          /* file system error */
  STSA_ERR_FORMAT = 13,      /* malformed file contents */
  STSA_ERR_BAD_MASK = 14,    /* mask parameters invalid or inconsistent */
  STSA_STATUS_COUNT_         /* not a status; keep last */
} stsa_status;

/* Stable name of a status code, e.g. "invalid shape". Never NULL. */
STSA_API const char *stsa_status_str(stsa_status status);

/* ------------------------------------------------------------------------ */
/* Element types                                                             */
/* ------------------------------------------------------------------------ */
typedef enum stsa_dtype {
  STSA_F32 = 0,
  STSA_F16 = 1,  /* IEEE binary16 */
  STSA_BF16 = 2, /* bfloat16 */
  STSA_DTYPE_COUNT_
} stsa_dtype;

/* Bytes per element, 0 for an invalid dtype. */
STSA_API size_t stsa_dtype_size(stsa_dtype dtype);
/* "f32", "f16", "bf16"; NULL for an invalid dtype. */
STSA_API const char *stsa_dtype_name(stsa_dtype dtype);

/* ------------------------------------------------------------------------ */
/* Tensor descriptor                                                         */
/* ------------------------------------------------------------------------ */
/*
 * Logical shape is always [B, S, H, D] (index order b, s, h, d); stride[i] is
 * the distance in ELEMENTS between neighbours along dimension i. Examples for
 * a contiguous buffer:
 *   [B,S,H,D] layout: stride = { S*H*D, H*D, D, 1 }   (stsa_tensor_bshd)
 *   [B,H,S,D] layout: stride = { H*S*D, D, S*D, 1 }   (stsa_tensor_bhsd)
 *   [S,H,D]   layout: B = 1,  stride = { S*H*D, H*D, D, 1 } (stsa_tensor_shd)
 * Strides must be positive and no two distinct (b,s,h,d) may share an address.
 */
typedef struct stsa_tensor {
  void *data;
  stsa_dtype dtype;
  int64_t shape[4];  /* B, S, H, D */
  int64_t stride[4]; /* in elements, same order as shape */
} stsa_tensor;

enum { STSA_DIM_B = 0, STSA_DIM_S = 1, STSA_DIM_H = 2, STSA_DIM_D = 3 };

STSA_API stsa_tensor stsa_tensor_bshd(void *data, stsa_dtype dtype, int64_t B,
                                      int64_t S, int64_t H, int64_t D);
STSA_API stsa_tensor stsa_tensor_bhsd(void *data, stsa_dtype dtype, int64_t B,
                                      int64_t S, int64_t H, int64_t D);
STSA_API stsa_tensor stsa_tensor_shd(void *data, stsa_dtype dtype, int64_t S,
                                     int64_t H, int64_t D);

/* ------------------------------------------------------------------------ */
/* Context and parameters                                                    */
/* ------------------------------------------------------------------------ */
typedef struct stsa_ctx stsa_ctx;

/* Creates a context with defaults: all online CPUs, backend AUTO, finite
 * checks on. The environment variable STSA_BACKEND=ref|portable|avx2 (read
 * here, once) overrides the backend; STSA_FORCE_PORTABLE=1 is a synonym for
 * STSA_BACKEND=portable. */
STSA_API stsa_status stsa_ctx_create(stsa_ctx **out_ctx);
/* Frees a context; NULL is accepted. */
STSA_API void stsa_ctx_free(stsa_ctx *ctx);
/* Message of the last failure on this context ("" if none). Valid until the
 * next call on the context. */
STSA_API const char *stsa_ctx_last_error(const stsa_ctx *ctx);

typedef enum stsa_backend {
  STSA_BACKEND_AUTO = 0,     /* best available: AVX2+FMA if the CPU has it */
  STSA_BACKEND_REF = 1,      /* plain double-precision reference (slow) */
  STSA_BACKEND_PORTABLE = 2, /* tiled kernel in portable C */
  STSA_BACKEND_AVX2 = 3,     /* tiled kernel with AVX2+FMA+F16C */
  STSA_BACKEND_COUNT_
} stsa_backend;

/* "auto", "ref", "portable", "avx2". */
STSA_API const char *stsa_backend_name(stsa_backend backend);

typedef enum stsa_param {
  STSA_PARAM_THREADS = 0,      /* worker threads, 1..1024; default: online CPUs */
  STSA_PARAM_BACKEND = 1,      /* an stsa_backend */
  STSA_PARAM_Q_TILE = 2,       /* query rows per tile, 6..4096; default 192 */
  STSA_PARAM_KV_TILE = 3,      /* key rows per tile, multiple of 16, 16..4096; default 256 */
  STSA_PARAM_CHECK_FINITE = 4, /* 1: reject NaN/Inf inputs (default), 0: skip the scan */
  STSA_PARAM_COUNT_
} stsa_param;

STSA_API stsa_status stsa_ctx_set(stsa_ctx *ctx, stsa_param param, int64_t value);
STSA_API stsa_status stsa_ctx_get(const stsa_ctx *ctx, stsa_param param,
                                  int64_t *value);
/* Inclusive bounds of a parameter's value. */
STSA_API stsa_status stsa_param_bounds(stsa_param param, int64_t *lo, int64_t *hi);

/* The backend a call on this context actually runs (AUTO resolved). */
STSA_API stsa_backend stsa_ctx_backend(const stsa_ctx *ctx);
/* 1 if this CPU can run the AVX2 backend. */
STSA_API int stsa_cpu_has_avx2(void);

/* ------------------------------------------------------------------------ */
/* Dense attention                                                           */
/* ------------------------------------------------------------------------ */
/*
 * out[b,s,h,:] = softmax(scale * q[b,s,h,:] . k[b,:,h,:]^T) v[b,:,h,:]
 *
 *   q:   [B, S_q,  H, D]   any dtype
 *   k,v: [B, S_kv, H, D]   any dtype each (f16 K/V with f32 Q is common)
 *   out: [B, S_q,  H, D]   any dtype, any valid strides
 *   lse: optional, float [B, H, S_q] contiguous: natural-log log-sum-exp of
 *        the scaled scores of each row, for merging partial results.
 *
 * Accumulation is in f32 (double in the reference backend). Results are
 * bitwise identical for any thread count and any partitioning.
 */
typedef struct stsa_attn_opts {
  float scale; /* 0 means 1/sqrt(D) */
  float *lse;  /* optional, see above */
} stsa_attn_opts;

STSA_API stsa_status stsa_attention(stsa_ctx *ctx, const stsa_tensor *q,
                                    const stsa_tensor *k, const stsa_tensor *v,
                                    const stsa_tensor *out,
                                    const stsa_attn_opts *opts);

/*
 * Partitioned form for a host's own threads (ggml custom ops, an OpenMP
 * region, a worker pool): computes part `ith` of `nth` and uses no threads of
 * its own. Calling it for every ith in [0, nth) — concurrently, on one shared
 * context — gives exactly stsa_attention's result. The context is only read;
 * each call allocates its own scratch. If any part fails, parts may have
 * written their rows; validate first with stsa_attention_check to be sure.
 */
STSA_API stsa_status stsa_attention_part(const stsa_ctx *ctx,
                                         const stsa_tensor *q,
                                         const stsa_tensor *k,
                                         const stsa_tensor *v,
                                         const stsa_tensor *out,
                                         const stsa_attn_opts *opts, int ith,
                                         int nth);

/* Validates the arguments of a dense attention call without computing. */
STSA_API stsa_status stsa_attention_check(stsa_ctx *ctx, const stsa_tensor *q,
                                          const stsa_tensor *k,
                                          const stsa_tensor *v,
                                          const stsa_tensor *out,
                                          const stsa_attn_opts *opts);

#ifdef __cplusplus
}
#endif
#endif /* STSA_H */
