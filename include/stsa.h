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
#define STSA_VERSION_NUMBER                                                              \
  (STSA_VERSION_MAJOR * 10000 + STSA_VERSION_MINOR * 100 + STSA_VERSION_PATCH)

#if defined(_WIN32) && defined(STSA_BUILD_SHARED)
#define STSA_API __declspec(dllexport)
#elif defined(__GNUC__)
#define STSA_API __attribute__((visibility("default")))
#else
#define STSA_API
#endif

/* ------------------------------------------------------------------------ */
/* Version                                                                   */
/* ------------------------------------------------------------------------ */
/* Run-time version: STSA_VERSION_NUMBER of the library actually loaded. */
STSA_API unsigned stsa_version_number(void);
/* "MAJOR.MINOR.PATCH". */
STSA_API const char *stsa_version_string(void);

/* ------------------------------------------------------------------------ */
/* Extensible structs                                                        */
/* ------------------------------------------------------------------------ */
/*
 * Every struct a caller passes to or receives from the library (options,
 * descriptions, reports, stats) starts with `size_t size`, which the caller
 * sets to sizeof the struct as it was compiled, e.g.
 *
 *   stsa_attn_opts opts = STSA_INIT(stsa_attn_opts);   (or {.size = sizeof opts, ...})
 *   opts.scale = 0.125f;
 *
 * so fields can be added at the end in a later release without breaking
 * binaries built against this one: the library reads (and writes) only the
 * bytes both it and the caller know, and a field beyond them keeps its
 * default. A
 * size of 0 (a struct that was only zeroed) or below the first release's is
 * STSA_ERR_BAD_PARAM; a larger size than this library knows is accepted only
 * when the extra bytes are zero (a newer caller using no newer field), else
 * STSA_ERR_UNSUPPORTED (a size more than 1024 bytes past the known one is
 * taken for an uninitialised field: STSA_ERR_BAD_PARAM). Every other field
 * zeroed means its default. A struct whose fields were regrouped
 * (stsa_svg_config, stsa_svg_report) still accepts its earlier layouts, told
 * apart by their size (each new layout is larger). Enum-typed fields are
 * int-sized, as the ints some of them replaced (the library asserts it).
 */
#define STSA_INIT(type)                                                                  \
  { .size = sizeof(type) }

/* ------------------------------------------------------------------------ */
/* Status codes (pinned, append-only)                                        */
/* ------------------------------------------------------------------------ */
typedef enum stsa_status {
  STSA_OK = 0,
  STSA_ERR_NULL_ARG = 1,   /* a required pointer is NULL */
  STSA_ERR_BAD_SHAPE = 2,  /* zero/negative sizes, mismatched shapes */
  STSA_ERR_BAD_DTYPE = 3,  /* unknown or unsupported dtype */
  STSA_ERR_BAD_STRIDE = 4, /* strides that alias elements or overflow */
  STSA_ERR_MISALIGNED = 5, /* data pointer not aligned to its element */
  STSA_ERR_OVERLAP = 6,    /* output overlaps an input or another output */
  STSA_ERR_NONFINITE = 7,  /* NaN or Inf found in an input */
  STSA_ERR_OUT_OF_MEMORY = 8,
  STSA_ERR_BAD_PARAM = 9,    /* unknown parameter or value out of bounds */
  STSA_ERR_UNSUPPORTED = 10, /* valid request this build cannot serve */
  STSA_ERR_EMPTY_ROW = 11,   /* a mask leaves a query row with no key */
  STSA_ERR_IO = 12,          /* file system error */
  STSA_ERR_FORMAT = 13,      /* malformed file contents */
  STSA_ERR_BAD_MASK = 14,    /* mask parameters invalid or inconsistent */
  STSA_STATUS_COUNT_         /* not a status; keep last */
} stsa_status;

/* Stable name of a status code, e.g. "invalid shape"; "unknown" for any
 * other value. Never NULL. */
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
/* "f32", "f16", "bf16"; "unknown" for any other value. */
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

STSA_API stsa_tensor stsa_tensor_bshd(void *data, stsa_dtype dtype, int64_t B, int64_t S,
                                      int64_t H, int64_t D);
STSA_API stsa_tensor stsa_tensor_bhsd(void *data, stsa_dtype dtype, int64_t B, int64_t S,
                                      int64_t H, int64_t D);
STSA_API stsa_tensor stsa_tensor_shd(void *data, stsa_dtype dtype, int64_t S, int64_t H,
                                     int64_t D);

/* ------------------------------------------------------------------------ */
/* Context and parameters                                                    */
/* ------------------------------------------------------------------------ */
typedef struct stsa_ctx stsa_ctx;

/* Creates a context with defaults: all online CPUs, backend AUTO, finite
 * checks on. The environment variable STSA_BACKEND (any name of
 * stsa_backend_name, e.g. auto, portable or avx2; read here, once; unset or
 * empty means auto) overrides the backend;
 * STSA_FORCE_PORTABLE=1 is a synonym for STSA_BACKEND=portable and wins over
 * it. Any other STSA_BACKEND value fails with STSA_ERR_BAD_PARAM (the
 * message lists the names), and a backend this build or CPU does not run
 * (avx2 without AVX2/FMA/F16C, neon off AArch64) with STSA_ERR_UNSUPPORTED;
 * *out_ctx is then not written.
 * The backend is resolved to its kernels here and when STSA_PARAM_BACKEND
 * is set, never per call. There is no context to hold the message of such a
 * failure: use stsa_ctx_create_msg to read it. */
STSA_API stsa_status stsa_ctx_create(stsa_ctx **out_ctx);
/* stsa_ctx_create, and on failure a NUL-terminated message (naming the bad
 * setting and the accepted values) in msg[0 .. msg_size), truncated to fit;
 * msg may be NULL. msg is written only on failure. Thread-safe: the message
 * lives in the caller's buffer. */
STSA_API stsa_status stsa_ctx_create_msg(stsa_ctx **out_ctx, char *msg, size_t msg_size);
/* Frees a context; NULL is accepted. Only when no call on it (or on a session
 * made from it) is in flight on any thread; plans it built stay valid. */
STSA_API void stsa_ctx_free(stsa_ctx *ctx);
/* Message of the last failure on this context ("" if none). Valid until the
 * next call on the context. */
STSA_API const char *stsa_ctx_last_error(const stsa_ctx *ctx);

/* The backends, numbered 0 .. stsa_backend_count() - 1. Their names, what
 * each is and whether it runs here come from the library (stsa_backend_name,
 * stsa_backend_about, stsa_backend_available), which holds one table of
 * them: loop over the numbers to list them, never over names typed by hand. */
typedef enum stsa_backend {
  STSA_BACKEND_AUTO = 0, /* the best one this machine runs */
  STSA_BACKEND_REF = 1,  /* the double-precision reference */
  STSA_BACKEND_PORTABLE = 2,
  STSA_BACKEND_AVX2 = 3,
  STSA_BACKEND_NEON = 4,
  STSA_BACKEND_AVX512 = 5, /* 12 x 16 register tile */
  /* avx512, plus FULL tiles of bf16 Q, K and V on the AMX tile-multiply unit
   * (x86-64 Linux): results of f32 quality (stsa_kernels: full_tile_bf16) */
  STSA_BACKEND_AMX = 6,
  /* avx512, plus the same bf16 tiles on AVX512-BF16's vdpbf16ps, for CPUs
   * without AMX (AMD Zen 4 and 5) */
  STSA_BACKEND_AVX512BF16 = 7,
  STSA_BACKEND_COUNT_ /* this header's count; stsa_backend_count is the library's */
} stsa_backend;

/* How many backends the loaded library has (a newer one may have more than
 * STSA_BACKEND_COUNT_ of the header compiled against). */
STSA_API int stsa_backend_count(void);
/* The backend's name ("auto", "ref", "portable", "avx2", ...), the one
 * STSA_BACKEND and the tools accept; "unknown" for any other value. */
STSA_API const char *stsa_backend_name(stsa_backend backend);
/* One line on what the backend is, for usage texts ("tiled kernels with
 * AVX2+FMA+F16C (x86)"); "" for any other value. */
STSA_API const char *stsa_backend_about(stsa_backend backend);
/* The backend whose stsa_backend_name is `name` (exactly), as an int; -1
 * when none is (NULL included). */
STSA_API int stsa_backend_from_name(const char *name);
/* 1 if this build and this CPU (and OS) run the backend (AUTO, REF and
 * PORTABLE always do), 0 otherwise: the one CPU feature query, so that a new
 * backend adds a row to the library's table, not a function. For AMX it
 * also asks Linux to grant this process the tile state (arch_prctl; once
 * granted it stays, so asking again is harmless), as a context does before
 * it selects amx. */
STSA_API int stsa_backend_available(stsa_backend backend);

typedef enum stsa_param {
  STSA_PARAM_THREADS = 0, /* worker threads, 1..1024; default: online CPUs */
  /* an stsa_backend this machine runs (stsa_backend_available); fails when
   * kv_tile is not a multiple of the new backend's panel width */
  STSA_PARAM_BACKEND = 1,
  /* query rows per tile, 6..4096, default 192; calls round it up to a
   * multiple of the backend's register-tile rows (12 for avx512, amx and
   * avx512bf16, 6 for the others) */
  STSA_PARAM_Q_TILE = 2,
  /* key rows per tile, 16..4096, default 256: a multiple of the backend's
   * panel width (16 for every backend today) */
  STSA_PARAM_KV_TILE = 3,
  /* 1: reject NaN/Inf inputs (default); 0: skip the scan, and NaN/Inf then
   * propagate as in PyTorch SDPA (see "Non-finite inputs" at stsa_attention) */
  STSA_PARAM_CHECK_FINITE = 4,
  /* How the softmax probabilities enter P.V: an stsa_pv_precision (below),
   * default STSA_PV_AUTO. Every backend honours it as a floor: one that
   * multiplies f32 probabilities runs them exactly whatever is asked, and
   * stsa_run_info.pv_precision says what a call ran. (Value 5 was
   * STSA_PARAM_BF16_TERMS, the bf16 terms per probability of the amx and
   * avx512bf16 backends, 0..3: the same numbers mean the same.) */
  STSA_PARAM_PV_PRECISION = 5,
  STSA_PARAM_COUNT_
} stsa_param;

/* How each f32 softmax probability p enters the P.V product
 * (STSA_PARAM_PV_PRECISION). Every backend multiplies p exactly (F32) on
 * f32 and f16 inputs, and so do all but two on any: only the bf16 tiles of
 * the amx and avx512bf16 backends (STSA_ARITH_BF16_TILES, on bf16 Q, K and V)
 * split p into bf16 terms for their bf16 products, where fewer terms run
 * faster. */
typedef enum stsa_pv_precision {
  /* what the output keeps (default): F32 for an f32 output, NEAR_F32 for f16
   * and bf16 outputs, whose own rounding (2^-11, 2^-9) is far above 2^-18 */
  STSA_PV_AUTO = 0,
  /* p rounded to bf16 (2^-9), as PyTorch's bf16 SDPA rounds it: the
   * fastest; a bf16 output may then move by an ulp or two, and lse by up to
   * 2^-9 (a row is normalised by the sum of its rounded weights, which keeps
   * the output unbiased). One bf16 term. */
  STSA_PV_BF16 = 1,
  /* within 2^-18 of p (two bf16 terms; avx512bf16 multiplies p itself
   * here, its f32 FMAs on V being faster than the terms' products, and so
   * runs F32's arithmetic and bytes) */
  STSA_PV_NEAR_F32 = 2,
  STSA_PV_F32 = 3, /* p exactly, as the f32 path multiplies it (three terms) */
  STSA_PV_PRECISION_COUNT_
} stsa_pv_precision;
/* "auto", "bf16", "near-f32", "f32"; "unknown" for any other value. */
STSA_API const char *stsa_pv_precision_name(stsa_pv_precision precision);

STSA_API stsa_status stsa_ctx_set(stsa_ctx *ctx, stsa_param param, int64_t value);
STSA_API stsa_status stsa_ctx_get(const stsa_ctx *ctx, stsa_param param, int64_t *value);
/* Inclusive bounds of a parameter's value. */
STSA_API stsa_status stsa_param_bounds(stsa_param param, int64_t *lo, int64_t *hi);

/* The backend a call on this context actually runs (AUTO resolved). */
STSA_API stsa_backend stsa_ctx_backend(const stsa_ctx *ctx);

/* The arithmetic of a call's tiles (stsa_run_info). */
typedef enum stsa_arith {
  STSA_ARITH_F64 = 0, /* the ref backend: every row in double */
  STSA_ARITH_F32 = 1, /* q, k and v converted to f32 as they load; f32 products,
                         sums and softmax (every tiled backend) */
  /* the amx and avx512bf16 backends on bf16 q, k and v: exact bf16 products
   * summed in f32 (the AMX tile unit, or vdpbf16ps), the softmax in f32, each probability
   * entering P.V as bf16_terms bf16 terms (STSA_PARAM_PV_PRECISION) */
  STSA_ARITH_BF16_TILES = 2,
  STSA_ARITH_COUNT_
} stsa_arith;
/* "f64", "f32", "bf16-tiles"; "unknown" for any other value. */
STSA_API const char *stsa_arith_name(stsa_arith arith);

/* What an attention call ran: no path is taken silently. */
typedef struct stsa_run_info {
  size_t size;          /* sizeof this struct, as compiled (see "Extensible structs") */
  stsa_backend backend; /* the context's backend, AUTO resolved */
  stsa_arith arith;
  int bf16_terms; /* STSA_ARITH_BF16_TILES: terms per probability, 1..3; else 0 */
  /* "" when the call ran the fastest arithmetic its backend has; else why it
   * could not, e.g. "q, k and v are f16, f16 and f16: the bf16 tiles take
   * bf16 only".
   * NUL-terminated. */
  char why[192];
  /* How the probabilities entered P.V (never AUTO): STSA_PV_F32 for f64
   * and f32 arithmetic, whatever STSA_PARAM_PV_PRECISION asked; the bf16
   * tiles' bf16_terms otherwise (1 BF16, 2 NEAR_F32, 3 F32). */
  stsa_pv_precision pv_precision;
} stsa_run_info;

/* What the last attention call on ctx that succeeded ran: stsa_attention,
 * stsa_sparse_attention, part 0 of their partitioned forms, or the attention
 * proper of stsa_svg_attention (every head of a call runs one arithmetic;
 * its profiling and k-means run in f32, on gathered rows). Fails with
 * STSA_ERR_BAD_PARAM before the first. */
STSA_API stsa_status stsa_ctx_last_run(const stsa_ctx *ctx, stsa_run_info *info);
/* ------------------------------------------------------------------------ */
/* Dense attention                                                           */
/* ------------------------------------------------------------------------ */
/* The largest head dimension D any call takes (the kernels' limit). */
#define STSA_MAX_HEAD_DIM 512

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
 *
 * Finite range: the f32 backends compute scale * log2(e) * q_i . k_j, and
 * no logit or partial sum of it overflows while scale * |q_i| * |k_j| < 1e38
 * (Euclidean norms; so |scale * q_i . k_j| < 1e38 too). Inside it every
 * backend computes the same softmax, however large the logits, and V may
 * hold any finite values up to the largest of its dtype: for finite q, k
 * and v in that range every backend, dense, sparse and SVG alike, returns
 * finite rows within f32's rounding of the exact result (the logits' own
 * f32 rounding, a few ulps of scale |q_i| |k_j|, included; the bf16
 * tiles of amx and avx512bf16 take bf16 values below 2^-126 as zero, as the
 * hardware does). The range holds row by row: a row whose q and the keys
 * of its head are inside it is held to this whatever other rows and heads
 * of the call hold. Beyond it a logit may overflow f32 to +-inf or NaN, and
 * the rules below then apply to that logit (the reference, in double, does
 * not overflow there).
 *
 * Non-finite inputs (with STSA_PARAM_CHECK_FINITE = 0; the default rejects
 * them) follow PyTorch SDPA's math, alike in every backend, dense and
 * sparse: row i is softmax(s_i) v over the keys j its mask keeps (dense: all),
 * s_ij = scale * q_i . k_j; keys the mask drops never reach the row, NaN or
 * not. For row i:
 *   - the mask keeps no key: out 0, lse -inf, whatever q_i holds;
 *   - a kept logit is NaN or +inf, or every kept logit is -inf: the whole
 *     out row and lse are NaN. So a NaN or Inf in q_i, or a NaN in a kept
 *     k_j, gives a NaN row; an Inf in a kept k_j gives the logit the sign of
 *     q_i[d] * k_j[d] (NaN where q_i[d] = 0);
 *   - a -inf logit among finite ones: that key's weight is 0;
 *   - a NaN in v_j[d] of a kept key: out[i][d] is NaN, even where the weight
 *     is 0 (0 * NaN); an Inf there gives +-Inf or NaN in out[i][d]; the
 *     other columns and lse are unaffected.
 */
typedef struct stsa_attn_opts {
  size_t size; /* sizeof this struct, as compiled (see "Extensible structs") */
  float scale; /* 0 means 1/sqrt(D) */
  float *lse;  /* optional, see above */
} stsa_attn_opts;

STSA_API stsa_status stsa_attention(stsa_ctx *ctx, const stsa_tensor *q,
                                    const stsa_tensor *k, const stsa_tensor *v,
                                    const stsa_tensor *out, const stsa_attn_opts *opts);

/*
 * Partitioned form for a host's own threads (ggml custom ops, an OpenMP
 * region, a worker pool): computes part `ith` of `nth` and uses no threads of
 * its own. Calling it for every ith in [0, nth) — concurrently, on one shared
 * context — gives exactly stsa_attention's result, bitwise, for any nth.
 *
 * Work buffer (ggml's wsize/wdata): stsa_attention_part_wsize gives the bytes
 * that nth parts of this call share; allocate them once (any alignment) and
 * pass the same wdata and wsize to every part, each of which uses only its
 * own slice (one packed K/V head and a q tile's scratch). Nothing is
 * allocated per call. The size depends on the shapes, nth and the context's
 * backend and tiles only, so one buffer serves every call of that shape.
 *
 * The context is only read (but for a failure's message, below). If any part
 * fails, parts may have written their rows; validate first with
 * stsa_attention_check to be sure. A failing part records its message in the
 * context under a lock (several may fail at once); a part that succeeds does
 * not clear it. Read stsa_ctx_last_error after every part has returned, and
 * only if one failed.
 */
STSA_API stsa_status stsa_attention_part_wsize(const stsa_ctx *ctx, const stsa_tensor *q,
                                               const stsa_tensor *k, const stsa_tensor *v,
                                               const stsa_tensor *out,
                                               const stsa_attn_opts *opts, int nth,
                                               size_t *wsize);
STSA_API stsa_status stsa_attention_part(const stsa_ctx *ctx, const stsa_tensor *q,
                                         const stsa_tensor *k, const stsa_tensor *v,
                                         const stsa_tensor *out,
                                         const stsa_attn_opts *opts, int ith, int nth,
                                         void *wdata, size_t wsize);

/* Validates the arguments of a dense attention call without computing. */
STSA_API stsa_status stsa_attention_check(stsa_ctx *ctx, const stsa_tensor *q,
                                          const stsa_tensor *k, const stsa_tensor *v,
                                          const stsa_tensor *out,
                                          const stsa_attn_opts *opts);

/* ------------------------------------------------------------------------ */
/* Video geometry and token orders                                           */
/* ------------------------------------------------------------------------ */
/*
 * A self-attention sequence of N = C + F*Hp*Wp tokens: C text tokens (none,
 * a prefix or a suffix) and F frames of Hp x Wp video tokens. The native
 * order of video tokens is frame-major: i = f*P + p with p = y*Wp + x and
 * P = Hp*Wp. In a suffix, the first text_real text tokens are real and the
 * rest padding (HunyuanVideo): padding only ever sees padding.
 * A geometry with frames = 0 describes a plain sequence (no video): only the
 * index masks (full, causal, local, chunked, segments, dense) apply then.
 */
typedef enum stsa_text_pos {
  STSA_TEXT_NONE = 0,
  STSA_TEXT_PREFIX = 1,
  STSA_TEXT_SUFFIX = 2,
} stsa_text_pos;

typedef struct stsa_geometry {
  int64_t frames, height, width; /* F, Hp, Wp */
  int64_t text;                  /* C, text tokens inside self-attention */
  int64_t text_real;             /* real text tokens (<= text); the rest padding */
  stsa_text_pos text_pos;
} stsa_geometry;

/* Total tokens C + F*Hp*Wp. */
STSA_API int64_t stsa_geometry_tokens(const stsa_geometry *g);

/*
 * The order in which tokens sit in memory for a computation. Text tokens
 * never move; only video tokens are permuted.
 *   NATIVE          frame-major, i = f*P + p (what the model produces)
 *   POSITION_MAJOR  j = p*F + f: a temporal head's pattern becomes a band
 *   SINK_FIRST      keys only: frame 0 first (native order), then frames
 *                   1..F-1 position-major, so a first-frame sink is one block
 *                   and a position-major band stays contiguous
 * Masks are always defined on true (frame, y, x) coordinates, so the order
 * changes where pairs sit, never which pairs are kept.
 */
typedef enum stsa_order {
  STSA_ORDER_NATIVE = 0,
  STSA_ORDER_POSITION_MAJOR = 1,
  STSA_ORDER_SINK_FIRST = 2,
  STSA_ORDER_COUNT_
} stsa_order;

/* perm[pos] = native index of the token at position pos of `order`
 * (N = stsa_geometry_tokens entries). */
STSA_API stsa_status stsa_order_permutation(const stsa_geometry *g, stsa_order order,
                                            int64_t *perm);

/* ------------------------------------------------------------------------ */
/* Masks: predicates on token coordinates                                    */
/* ------------------------------------------------------------------------ */
/*
 * A mask decides for a (query i, key j) pair, in native token indices,
 * whether the pair is kept. Masks are immutable and reference counted:
 * combinators take their own references, so the caller frees what it
 * created, in any order. References are counted atomically: stsa_mask_free
 * may run on any thread, as for plans.
 */
typedef struct stsa_mask stsa_mask;

#define STSA_UNBOUNDED INT64_MIN

STSA_API stsa_status stsa_mask_full(stsa_mask **out);
/* keep j <= i + offset */
STSA_API stsa_status stsa_mask_causal(int64_t offset, stsa_mask **out);
/* keep i - left <= j <= i + right; either side may be STSA_UNBOUNDED */
STSA_API stsa_status stsa_mask_local(int64_t left, int64_t right, stsa_mask **out);
/* keep j <= i and i / chunk == j / chunk */
STSA_API stsa_status stsa_mask_chunked_causal(int64_t chunk, stsa_mask **out);
/* video pairs with |f_i - f_j| <= w (spatial head) */
STSA_API stsa_status stsa_mask_frame_window(const stsa_geometry *g, int64_t w,
                                            stsa_mask **out);
/* video pairs with |y_i - y_j| <= a and |x_i - x_j| <= b, any frames */
STSA_API stsa_status stsa_mask_spatial_window(const stsa_geometry *g, int64_t a,
                                              int64_t b, stsa_mask **out);
/* video pairs within w of each other in position-major order:
 * |(p_i*F + f_i) - (p_j*F + f_j)| <= w (temporal head, as in SVG) */
STSA_API stsa_status stsa_mask_position_band(const stsa_geometry *g, int64_t w,
                                             stsa_mask **out);
/* every real query sees the video keys of frames < n (first-frame sink) */
STSA_API stsa_status stsa_mask_sink_frames(const stsa_geometry *g, int64_t n,
                                           stsa_mask **out);
/* text rules: real text rows see every real token, every real row sees real
 * text columns, padding text sees only padding */
STSA_API stsa_status stsa_mask_text(const stsa_geometry *g, stsa_mask **out);
/* keep q_seg[i] == k_seg[j] (arrays copied) */
STSA_API stsa_status stsa_mask_segments(const int32_t *q_seg, int64_t s_q,
                                        const int32_t *k_seg, int64_t s_kv,
                                        stsa_mask **out);
/* explicit boolean mask, row-major [s_q][s_kv], nonzero = keep (copied) */
STSA_API stsa_status stsa_mask_dense(const uint8_t *keep, int64_t s_q, int64_t s_kv,
                                     stsa_mask **out);
/* cluster rectangles (Sparse VideoGen 2): keep (i, j) iff
 * keep[q_label[i] * kv_clusters + k_label[j]] != 0. Labels are in
 * [0, q_clusters) and [0, kv_clusters), or -1 for a token no cluster holds
 * (text: combine with stsa_mask_text), which this mask never keeps. Arrays
 * copied; keep is row-major [q_clusters][kv_clusters]. */
STSA_API stsa_status stsa_mask_clusters(const int32_t *q_label, int64_t s_q,
                                        int64_t q_clusters, const int32_t *k_label,
                                        int64_t s_kv, int64_t kv_clusters,
                                        const uint8_t *keep, stsa_mask **out);
STSA_API stsa_status stsa_mask_and(const stsa_mask *a, const stsa_mask *b,
                                   stsa_mask **out);
STSA_API stsa_status stsa_mask_or(const stsa_mask *a, const stsa_mask *b,
                                  stsa_mask **out);
STSA_API void stsa_mask_free(stsa_mask *mask);
/* 1 if the pair (i, j), native indices, is kept. */
STSA_API int stsa_mask_keep(const stsa_mask *mask, int64_t i, int64_t j);
/* 1 if two masks are structurally equal (then they share plans). */
STSA_API int stsa_mask_equal(const stsa_mask *a, const stsa_mask *b);

/* ------------------------------------------------------------------------ */
/* Plans: the block structure of per-head masks                              */
/* ------------------------------------------------------------------------ */
/*
 * For each q tile, the compact list of active kv tiles, each FULL (every
 * pair kept: mask-free body) or PARTIAL (exact mask applied); empty tiles
 * are absent. Heads with equal masks share one list; identical partial
 * tiles are stored once. Built in O(N * intervals per row + tiles), never
 * O(N^2) for structured masks. Plans are immutable and reusable.
 *
 * Threads: a plan is reference counted atomically. stsa_plan_build may hand
 * out the same plan again (the context's cache); each successful build gives
 * one reference, which stsa_plan_free drops. stsa_plan_free may be called on
 * any thread, without the context and concurrently with calls that use other
 * references to the same plan (on any context, including builds that hit the
 * cache); a plan outlives the context that built it. A call must hold a
 * reference of its own for its whole duration: do not drop the last one
 * while a call that was given the plan is in flight.
 */
typedef struct stsa_plan stsa_plan;

typedef enum stsa_plan_flags {
  STSA_PLAN_DEFAULT = 0,
  /* rows that keep nothing give 0 output and lse = -inf instead of an error */
  STSA_PLAN_ALLOW_EMPTY_ROWS = 1,
} stsa_plan_flags;

typedef struct stsa_plan_desc {
  size_t size;       /* sizeof this struct, as compiled (see "Extensible structs") */
  int64_t s_q, s_kv; /* lengths (N for a video geometry; or of q_rows, kv_rows) */
  int64_t heads;     /* H */
  const stsa_mask *const *masks; /* [heads] (may repeat) */
  const stsa_geometry *geometry; /* NULL for plain sequences */
  stsa_order q_order, kv_order;  /* memory order of queries and of keys */
  int q_tile, kv_tile;           /* 0: the context's tile sizes */
  unsigned flags;                /* stsa_plan_flags */
  /* optional [s_q]: the native token of each query position, for plans over
   * a subset of rows (online profiling); overrides q_order. Entries need not
   * be sorted or distinct. A call with such a plan takes q, out (and lse) of
   * exactly s_q rows, row i holding the query of native token q_rows[i]
   * (the gathered rows, so nothing of size N is allocated for them), and k,
   * v of all s_kv tokens; q or out of N rows is rejected. */
  const int64_t *q_rows;
  /* optional [s_kv]: the native token held by each row of k and v, for a
   * plan over a subset of the keys (a sequence shard, as in Ring attention).
   * A call with such a plan takes k and v of exactly s_kv rows, row j
   * holding native token kv_rows[j] in the caller's order (e.g. a contiguous
   * shard [k0, k1)); pair (query i, key row j) is kept iff the mask keeps
   * (native query token, kv_rows[j]). The plan walks the subset in kv_order
   * (sorted by each token's position in it), the kernel's gather fusing
   * that permutation; with STSA_SPARSE_PREPERMUTED k and v already hold the
   * subset in that plan order. Entries must be distinct and in [0, N) for a
   * geometry of N tokens (s_kv <= N is then the subset's size), any index
   * below 2^40 that dense and segment masks cover otherwise; else
   * STSA_ERR_BAD_PARAM. Combines with q_rows, every sparse mode and lse;
   * with STSA_PLAN_ALLOW_EMPTY_ROWS a subset may keep no pair at all (out 0,
   * lse -inf). Such plans are not cached. */
  const int64_t *kv_rows;
} stsa_plan_desc;

STSA_API stsa_status stsa_plan_build(stsa_ctx *ctx, const stsa_plan_desc *desc,
                                     stsa_plan **out);
STSA_API void stsa_plan_free(stsa_plan *plan);

/* Counts saturate at INT64_MAX (2^40 heads of 2^40 x 2^40 pairs do not fit). */
typedef struct stsa_plan_stats {
  size_t size; /* sizeof this struct, as compiled (see "Extensible structs") */
  int64_t q_tiles, kv_tiles; /* grid size */
  int64_t tiles_total;       /* heads * q_tiles * kv_tiles */
  int64_t tiles_active;      /* visited tiles, all heads */
  int64_t tiles_partial;     /* visited tiles that need the mask, all heads */
  int64_t pairs_total;       /* heads * s_q * s_kv */
  int64_t pairs_kept;        /* kept pairs, all heads */
  int64_t distinct_masks;    /* plans actually stored (after sharing) */
  int64_t distinct_partials; /* stored partial tiles (after deduplication) */
} stsa_plan_stats;

STSA_API stsa_status stsa_plan_get_stats(const stsa_plan *plan, stsa_plan_stats *stats);
/* What a tile of a plan holds. */
typedef enum stsa_tile_kind {
  STSA_TILE_NONE = -1,   /* no tile: a NULL plan, or indices outside the grid */
  STSA_TILE_EMPTY = 0,   /* no pair kept: not visited */
  STSA_TILE_PARTIAL = 1, /* some pairs kept: the mask runs on the scores */
  STSA_TILE_FULL = 2,    /* every pair kept: mask-free body */
} stsa_tile_kind;
/* Block kind of tile (qt, kt) of head h. */
STSA_API stsa_tile_kind stsa_plan_tile_kind(const stsa_plan *plan, int64_t h, int64_t qt,
                                            int64_t kt);

/* ------------------------------------------------------------------------ */
/* Block-sparse attention                                                    */
/* ------------------------------------------------------------------------ */
typedef enum stsa_sparse_mode {
  /* mask-free full tiles, exact mask on partial tiles only (default) */
  STSA_SPARSE_EXACT = 0,
  /* the mask evaluated from coordinates on every visited tile (Splash B1) */
  STSA_SPARSE_NAIVE = 1,
  /* partial tiles rounded to full (kept >= half) or dropped: lossy (B3) */
  STSA_SPARSE_TILE_ROUNDED = 2,
  STSA_SPARSE_MODE_COUNT_
} stsa_sparse_mode;

/* "exact", "naive", "tile-rounded"; "unknown" for any other value. */
STSA_API const char *stsa_sparse_mode_name(stsa_sparse_mode mode);

typedef enum stsa_sparse_flags {
  STSA_SPARSE_DEFAULT = 0,
  /* q, k, v, out (and lse) already sit in the plan's q_order / kv_order: no
   * gather. Without it tokens are in native order and the kernel gathers
   * rows in plan order while packing and scatters output rows back. */
  STSA_SPARSE_PREPERMUTED = 1,
} stsa_sparse_flags;

typedef struct stsa_sparse_opts {
  size_t size; /* sizeof this struct, as compiled (see "Extensible structs") */
  float scale; /* 0 means 1/sqrt(D) */
  float *lse;  /* optional float [B, H, S_q] */
  stsa_sparse_mode mode;
  int64_t *pairs_changed; /* optional out: pairs whose keep flag rounding flipped */
  unsigned flags;         /* stsa_sparse_flags */
} stsa_sparse_opts;

/*
 * Block-sparse attention: q, k, v and out as for stsa_attention, tokens in
 * native order (the permutation of a plan's q_order / kv_order is fused into
 * the kernel's gathers; see STSA_SPARSE_PREPERMUTED). S_q, S_kv and H must
 * match the plan. For a plan over sampled rows (stsa_plan_desc.q_rows) S_q
 * is the number of sampled rows: q, out and lse hold only those rows, in
 * q_rows order, with or without PREPERMUTED. Unknown bits in opts->flags are
 * rejected (STSA_ERR_BAD_PARAM). Threads are balanced by active-tile count;
 * the output is bitwise identical for any thread count, a FULL-only plan
 * reproduces stsa_attention bitwise, and NAIVE mode equals EXACT mode bitwise.
 */
STSA_API stsa_status stsa_sparse_attention(stsa_ctx *ctx, const stsa_plan *plan,
                                           const stsa_tensor *q, const stsa_tensor *k,
                                           const stsa_tensor *v, const stsa_tensor *out,
                                           const stsa_sparse_opts *opts);
/* Partitioned block-sparse attention, as stsa_attention_part is for dense:
 * part ith of nth in its slice of a shared work buffer, on the caller's
 * threads; every part together gives stsa_sparse_attention's result
 * bitwise. Parts are cut by cost (active tiles), not by row count. Only
 * part 0 writes opts->pairs_changed. TILE_ROUNDED mode allocates its small
 * derived tile lists per call; the other modes allocate only O(heads). */
STSA_API stsa_status stsa_sparse_attention_part_wsize(
    const stsa_ctx *ctx, const stsa_plan *plan, const stsa_tensor *q,
    const stsa_tensor *k, const stsa_tensor *v, const stsa_tensor *out,
    const stsa_sparse_opts *opts, int nth, size_t *wsize);
STSA_API stsa_status stsa_sparse_attention_part(
    const stsa_ctx *ctx, const stsa_plan *plan, const stsa_tensor *q,
    const stsa_tensor *k, const stsa_tensor *v, const stsa_tensor *out,
    const stsa_sparse_opts *opts, int ith, int nth, void *wdata, size_t wsize);

/* ------------------------------------------------------------------------ */
/* Sparse VideoGen: head kinds                                               */
/* ------------------------------------------------------------------------ */
typedef enum stsa_head_kind {
  STSA_HEAD_SPATIAL = 0,  /* own and nearby frames */
  STSA_HEAD_TEMPORAL = 1, /* same and nearby positions in every frame */
  STSA_HEAD_MIXED = 2,    /* both (only as ground truth of the workload) */
  /* by content (object identity), neither spatial nor temporal: SVG2's
   * clusters; the kind SVG2 reports, and a ground truth of the workload */
  STSA_HEAD_SEMANTIC = 3,
  STSA_HEAD_KIND_COUNT_
} stsa_head_kind;

/* "spatial", "temporal", "mixed", "semantic"; "unknown" for any other value. */
STSA_API const char *stsa_head_kind_name(stsa_head_kind kind);

/* ------------------------------------------------------------------------ */
/* Sparse VideoGen: the session                                              */
/* ------------------------------------------------------------------------ */
/*
 * Per call (one layer of one denoising step): profile a few sampled query
 * rows against dense attention, pick for every head the kind (spatial or
 * temporal) whose mask reproduces them best, and run block-sparse attention:
 *   spatial head:  video keys within +-w_f frames (native order)
 *   temporal head: video keys within w tokens in position-major order
 *                  (queries walked position-major, keys sink-first)
 *   both:          plus the first-frame sink and the text rules
 * Dense for the first dense_steps steps and the first dense_layers layers.
 */
/* The methods of a session (stsa_svg_config.method). */
typedef enum stsa_svg_method {
  STSA_SVG_METHOD_SVG = 0,  /* spatial or temporal head per call (Sparse VideoGen) */
  STSA_SVG_METHOD_SVG2 = 1, /* semantic clusters with top-p budgets (Sparse VideoGen 2) */
  /* per head, the best of SVG spatial, SVG temporal, SVG2 clusters and dense
   * (stsa_auto_candidate): with a budget the cheapest (lowest density) whose
   * bound is within it, else dense; without one the lowest bound at the
   * configured density (dense is no candidate then). SVG's profiling and
   * SVG2's clusters run once each, as their methods would */
  STSA_SVG_METHOD_AUTO = 2,
  STSA_SVG_METHOD_COUNT_
} stsa_svg_method;
/* "svg", "svg2", "auto"; "unknown" for any other value. */
STSA_API const char *stsa_svg_method_name(stsa_svg_method method);

/* Sparse VideoGen 2's settings (methods SVG2 and auto; SVG ignores them).
 * Embedded in stsa_svg_config, whose size decides the layout read: svg2.size
 * is 0 (as STSA_INIT(stsa_svg_config) leaves it) or sizeof(stsa_svg2_config)
 * as compiled; a size below this release's, or beyond what the config's
 * size leaves for it, is STSA_ERR_BAD_PARAM. */
typedef struct stsa_svg2_config {
  size_t size; /* 0 or sizeof this struct, as compiled (see above) */
  /* k-means clusters of the video queries and keys per (batch, head); 0 =
   * automatic: the published 300 / 1000 at 75,600 video tokens (Wan 2.1
   * 720p), scaled with the video token count, but at least 6 / 20 per frame
   * (a small input's scaled counts merge objects with their background),
   * and at least 8 tokens each. At
   * most 2^22 (4,194,304) pairs q_clusters x kv_clusters, as each call's
   * scratch grows with them: more is refused at create, and automatic
   * counts shrink to fit (from about 280,000 video tokens on) */
  int64_t q_clusters, kv_clusters;
  /* key clusters kept per query cluster: in descending centroid probability
   * until the cumulative probability reaches top_p (0 = use `density`
   * instead: until the kept keys reach density * video tokens), always the
   * top one and at least min_kv_fraction of them (0 = 0.10) */
  double top_p, min_kv_fraction;
  /* Lloyd iterations: the first call of a layer (k-means++ seeding) and
   * later calls warm-started from that layer's centroids; 0 = 50 and 2. The
   * session keeps, per (layer, batch entry, head) of each layer called
   * (whatever its number: memory follows the layers called), the centroids,
   * (q_clusters + kv_clusters) * head_dim floats, the labels, 2 int32 per
   * video token, and the last cluster plan: 51 MB a layer at Wan 720p's 40
   * heads before the plans; and, for all layers, the scratch of each k-means
   * that runs at once (one per thread): about 10 MB at Wan 480p, 25 MB at
   * 720p */
  int64_t kmeans_iters_cold, kmeans_iters_warm;
} stsa_svg2_config;

/* A session's settings. Layouts of earlier releases (SVG2's fields inline
 * after `method`, or none of them) are still accepted by their size. */
typedef struct stsa_svg_config {
  size_t size; /* sizeof this struct, as compiled (see "Extensible structs") */
  stsa_geometry geometry;
  int64_t heads, head_dim;
  double density;        /* kept fraction of pairs aimed at (SVG's "sparsity") */
  int64_t dense_steps;   /* steps 0..dense_steps-1 run dense */
  int64_t dense_layers;  /* layers 0..dense_layers-1 run dense */
  int64_t sample_rows;   /* query rows profiled per call (SVG: 64); SVG2 under a budget
                          profiles per head the larger of it and 2 x svg2.q_clusters */
  int64_t sink_frames;   /* frames every query sees (1: the first frame) */
  uint64_t seed;         /* row sampling seed (mixed with layer, step, batch) */
  int64_t steps, layers; /* the model's schedule (informational, for presets) */
  /* tile sizes of the session's plans; 0 = automatic: frame-aligned tiles
   * (q tile and kv tile dividing Hp*Wp, so frame windows have no partial
   * tiles) when such sizes exist in [96, 240] x [128, 320], else the
   * context's; for SVG2 at most 256 x 512 (the largest multiples of the
   * kernels' register tile), whose tiles follow clusters. kv_tile must be a
   * multiple of 16; q_tile is rounded up to a multiple of the backend's
   * register-tile rows (12 on avx512, amx and avx512bf16, 6 on the others):
   * by the plans at create for SVG, at each call for SVG2
   * (stsa_svg_get_windows gives the rounded tiles then) */
  int q_tile, kv_tile;
  stsa_svg_method method; /* 0 = SVG */
  /* default error budget of stsa_svg_attention (stsa_svg_call.max_rel_error) */
  double max_rel_error;
  /* methods SVG2 and auto; last, so that its fields can grow at the end */
  stsa_svg2_config svg2;
} stsa_svg_config;

/* Published SVG defaults by name: "wan21-480p", "wan21-720p", "hunyuan-720p",
 * "hunyuan-480p", "cogvideox15". method stays SVG; cfg.svg2 holds
 * Sparse VideoGen 2's published settings (top-p 0.9, 10% of key clusters at
 * least, 50 / 2 k-means iterations; clusters 300 / 1000 for Wan 2.1 720p,
 * 400 / 1000 for HunyuanVideo 720p, the other resolutions scaled with their
 * video tokens), used once a caller sets method = STSA_SVG_METHOD_SVG2. A
 * caller built before SVG2 (a shorter struct) gets the fields it knows. */
STSA_API stsa_status stsa_svg_preset(const char *name, stsa_svg_config *cfg);
/* Name of preset i (0-based), NULL past the end. */
STSA_API const char *stsa_svg_preset_name(int i);

typedef struct stsa_svg stsa_svg;

/* A session: configuration, window widths and cached plans, reused across
 * layers and steps. Uses ctx for its tile sizes; ctx must outlive it. The
 * configuration is checked before anything is derived from it (sizes near
 * INT64_MAX give STSA_ERR_BAD_PARAM and a message, never an overflow);
 * head_dim must be 1..512, the kernel's limit. A
 * session follows its context's thread rule: one call at a time on the
 * session and the context together, and stsa_svg_free only when no call on
 * either is in flight (on any thread). */
STSA_API stsa_status stsa_svg_create(stsa_ctx *ctx, const stsa_svg_config *cfg,
                                     stsa_svg **out);
STSA_API void stsa_svg_free(stsa_svg *svg);

/* What the session derived from the density. */
typedef struct stsa_svg_windows {
  size_t size;          /* sizeof this struct, as compiled (see "Extensible structs") */
  int q_tile, kv_tile;  /* tile sizes the plans use */
  int64_t frame_window; /* w_f of spatial heads */
  int64_t band;         /* half-width in tokens of temporal heads */
  double density_spatial, density_temporal; /* realised kept fraction */
} stsa_svg_windows;
STSA_API stsa_status stsa_svg_get_windows(const stsa_svg *svg, stsa_svg_windows *out);

/* Per-call report; every array pointer is optional (caller-owned). Per-head
 * arrays hold B * H entries, index b * H + h. The report of an earlier
 * release (ordered by when its fields came) is still filled by its size. */
typedef struct stsa_svg_report {
  size_t size; /* sizeof this struct, as compiled (see "Extensible structs") */
  /* ---- the call ---- */
  int dense;              /* 1: the policy ran this call dense */
  stsa_svg_method method; /* the session's method */
  int64_t heads;          /* B * H: the entries of each per-head array */
  double density;         /* realised kept fraction over all heads */
  double profile_ms;      /* time spent profiling (SVG2's k-means included) */
  double attention_ms;    /* time spent in attention proper */
  /* optional: what the call's attention ran (stsa_ctx_last_run), its size
   * field set by the caller */
  stsa_run_info *run;
  /* ---- per head [B * H] ---- */
  stsa_head_kind *kinds; /* chosen kind */
  float *head_density;   /* kept fraction each head ran with */
  float *est_error;      /* upper confidence bound (99%) of the relative L2
                            error of what each head ran, from rows profiled per
                            stratum (docs/architecture.md, "The error bound"); 0
                            for dense heads; NaN for SVG2 without a budget,
                            which then profiles nothing */
  uint8_t *budget;       /* stsa_budget_action: why that density */
  /* stsa_auto_candidate each head ran (method auto; else what its method
   * ran: spatial, temporal, svg2 or dense) */
  uint8_t *choice;
  uint8_t *choice_reason; /* stsa_auto_reason: why that candidate */
  /* ---- SVG's profiling [B * H] ---- */
  /* profiling error of the spatial and the temporal mask; NaN where the
   * call profiled neither (method auto's kept choice, STSA_AUTO_KEPT) */
  float *mse_spatial;
  float *mse_temporal;
  /* ---- SVG2 (0 for SVG and for a dense call) ---- */
  int64_t q_clusters, kv_clusters; /* clusters per head */
  double cluster_ms;               /* time spent in k-means (inside profile_ms) */
  int cold;                        /* 1 if this call seeded its layer's clusters */
  float *head_top_p;               /* [B * H] top-p each head finally used */
  /* ---- method auto's candidates ---- */
  /* [B * H * STSA_AUTO_CANDIDATE_COUNT_] per head each candidate's kept
   * fraction and error bound, at the level its budget ladder stopped at (the
   * widest tried when none met the budget), candidate-minor: index
   * (b * H + h) * STSA_AUTO_CANDIDATE_COUNT_ + c. NaN where not evaluated
   * (other methods, a dense call, and a kept choice's other candidates) */
  float *cand_density, *cand_bound;
} stsa_svg_report;

/* The candidates of method auto (stsa_svg_report.choice). */
typedef enum stsa_auto_candidate {
  STSA_AUTO_SPATIAL = 0,  /* SVG's spatial mask (its budget level) */
  STSA_AUTO_TEMPORAL = 1, /* SVG's temporal mask (its budget level) */
  STSA_AUTO_SVG2 = 2,     /* SVG2's clusters (its top-p ladder) */
  STSA_AUTO_DENSE = 3,    /* the dense plan (bound 0) */
  STSA_AUTO_CANDIDATE_COUNT_
} stsa_auto_candidate;
/* "spatial", "temporal", "svg2", "dense"; "unknown" for any other value. */
STSA_API const char *stsa_auto_candidate_name(stsa_auto_candidate candidate);

/* Why method auto chose a head's candidate (stsa_svg_report.choice_reason). */
typedef enum stsa_auto_reason {
  STSA_AUTO_METHOD = 0,   /* not method auto: the method's own choice */
  STSA_AUTO_CHEAPEST = 1, /* under a budget: the lowest density within it */
  STSA_AUTO_NONE_MET = 2, /* under a budget, no sparse candidate met it: dense */
  STSA_AUTO_LOWEST = 3,   /* no budget: the lowest bound at the configured density */
  STSA_AUTO_POLICY = 4,   /* the dense steps or layers of the policy */
  /* under a budget, the chosen sparse candidate's bound on rows drawn after
   * the choice (independent of it) exceeded the budget: the head ran again
   * with its next denser candidate that met the budget, checked again, or
   * dense; method svg2's heads take the same recheck (but for a head on its
   * first step in a warm call whose heads all met it at the layer's last
   * call) and run dense when it fails (docs/architecture.md, "Method auto's
   * recheck") */
  STSA_AUTO_RECHECK = 5,
  /* under a budget, a warm call at the budget of the layer's last call: what
   * the head ran there (its candidate and level) run again without
   * profiling a candidate; its bound is taken on rows of the call's own
   * output drawn from that candidate's strata, and a head past the budget
   * climbs (reason recheck). A layer chooses afresh at least every fourth
   * call, and after a kept head's miss (docs/architecture.md, "Method
   * auto's kept choice") */
  STSA_AUTO_KEPT = 6,
  /* under a budget, a call that chose afresh: the lowest density within it,
   * which is what the head ran at the layer's last call at this budget.
   * That was fixed before the call drew a row, so its bound, taken at 99.5%
   * and within the budget, is an ordinary one and the head takes no
   * recheck (docs/architecture.md, "Method auto's confirmed choice") */
  STSA_AUTO_CONFIRMED = 7,
  STSA_AUTO_REASON_COUNT_
} stsa_auto_reason;
/* "method", "cheapest", "none-met", "lowest-bound", "policy", "recheck",
 * "kept", "confirmed"; "unknown" for any other value. */
STSA_API const char *stsa_auto_reason_name(stsa_auto_reason reason);

/* What the error budget did to a head (stsa_svg_report.budget). */
typedef enum stsa_budget_action {
  STSA_BUDGET_NONE = 0,   /* no budget, or the planned density met it */
  STSA_BUDGET_RAISED = 1, /* the estimate exceeded the budget: a wider window (SVG)
                             or a larger top-p (SVG2) met it */
  STSA_BUDGET_DENSE = 2,  /* nothing sparse met it: the head ran dense */
  STSA_BUDGET_POLICY = 3, /* the dense steps or layers of the policy: dense */
  STSA_BUDGET_ACTION_COUNT_
} stsa_budget_action;
/* "none", "raised", "dense", "policy"; "unknown" for any other value. */
STSA_API const char *stsa_budget_action_name(stsa_budget_action action);

/* Per-call options of stsa_svg_attention_ex. */
typedef struct stsa_svg_call {
  size_t size; /* sizeof this struct, as compiled (see "Extensible structs") */
  /* error budget: each head's bound of its relative L2 error ||o - o_dense||
   * / ||o_dense|| (an upper confidence bound from the profiled rows,
   * stsa_svg_report.est_error) must stay <= max_rel_error, else the
   * head's budget is raised (SVG: density x2, x4; SVG2: top-p 0.95, 0.98,
   * 0.995) and at last it runs dense. 0: no budget; < 0: the config's. */
  double max_rel_error;
} stsa_svg_call;

/* out = SVG attention of (q, k, v) of shape [B, N, H, D] for one layer of one
 * step. The call is dense when the policy says so (report->dense). */
STSA_API stsa_status stsa_svg_attention(stsa_svg *svg, int64_t layer, int64_t step,
                                        const stsa_tensor *q, const stsa_tensor *k,
                                        const stsa_tensor *v, const stsa_tensor *out,
                                        stsa_svg_report *report);
/* The same with per-call options (call may be NULL: the config's budget). */
STSA_API stsa_status stsa_svg_attention_ex(stsa_svg *svg, int64_t layer, int64_t step,
                                           const stsa_tensor *q, const stsa_tensor *k,
                                           const stsa_tensor *v, const stsa_tensor *out,
                                           const stsa_svg_call *call,
                                           stsa_svg_report *report);

/* Copies tokens of `in` into `out` reordered from native order to `order`
 * (inverse = 0) or back (inverse = 1); the copy-based alternative to the
 * gathers fused into the kernel, kept for measurement and for users. */
STSA_API stsa_status stsa_permute_tokens(const stsa_geometry *g, stsa_order order,
                                         int inverse, const stsa_tensor *in,
                                         const stsa_tensor *out);

/* ------------------------------------------------------------------------ */
/* Experimental: only with STSA_EXPERIMENTAL, may change in any release     */
/* ------------------------------------------------------------------------ */
/*
 * Declared only where the includer defines STSA_EXPERIMENTAL before it
 * includes this header (as zstd's ZSTD_STATIC_LINKING_ONLY):
 *
 *   #define STSA_EXPERIMENTAL
 *   #include <stsa.h>
 *
 * so that using them is a visible choice. The library exports them like the
 * rest, but their names, fields and semantics may change in a minor release;
 * everything above this section is the stable API. Why each is here:
 *   - stsa_plan_head_stats: per-head counts read from the plan's internal
 *     storage (tile lists, shared masks), which the plan layer still
 *     reshapes; stsa_plan_get_stats is the stable summary.
 *   - stsa_tensor_copy: the distributed layer's pack/unpack helper; its
 *     conversion rules follow the kernels' loads and stores, which may
 *     change (e.g. a faster f32 -> bf16 rounding).
 *   - stsa_tensor_check, stsa_tensors_overlap: the argument rules of the
 *     calls, for libraries on top of libstsa; they grow with new layouts.
 *   - stsa_svg_kind_mask, stsa_svg_sampled_rows: the session's internals
 *     (its per-kind masks and memory orders, its profiling rows), exposed
 *     for callers that rebuild its plans or profile on their own (the
 *     distributed layer, the ggml integration); they change whenever the
 *     session's policy does.
 * Their structs are size-prefixed like the others.
 */
#ifdef STSA_EXPERIMENTAL
/* One head's share of stsa_plan_stats (visited tiles, those of them that need
 * the mask, kept pairs), e.g. to balance heads across ranks by cost. Any
 * output may be NULL; h outside [0, heads) is STSA_ERR_BAD_PARAM. */
STSA_API stsa_status stsa_plan_head_stats(const stsa_plan *plan, int64_t h,
                                          int64_t *tiles_active, int64_t *tiles_partial,
                                          int64_t *pairs_kept);

/* Copies `in` into `out` (same shape; any layouts and dtypes; they must not
 * share memory). Equal dtypes copy bits exactly, NaN payloads included;
 * others convert through f32 as the kernels' loads and stores do (round to
 * nearest even). The distributed layer packs and unpacks shards with it. */
STSA_API stsa_status stsa_tensor_copy(const stsa_tensor *in, const stsa_tensor *out);

/* The checks every call applies to a tensor argument on its own (data,
 * dtype, shape, strides, alignment): STSA_OK, or the status a call would
 * give it (NULL: STSA_ERR_NULL_ARG). With stsa_tensors_overlap, for
 * libraries on top of libstsa that take tensors (libstsa_io's workload). */
STSA_API stsa_status stsa_tensor_check(const stsa_tensor *t);

/* 1 if two tensors that pass stsa_tensor_check may share an element, as the
 * calls judge it: exactly for two of one dtype, shape and strides (the q, k
 * and v of a fused QKV, interleaved in one buffer, share none), otherwise
 * whenever their byte ranges meet; 0 otherwise, and for a tensor that does
 * not pass. */
STSA_API int stsa_tensors_overlap(const stsa_tensor *a, const stsa_tensor *b);

/* The mask the session runs heads of `kind` with (a new reference, free it
 * with stsa_mask_free) and the memory orders its plan walks: spatial heads
 * native/native, temporal heads position-major queries and sink-first keys.
 * STSA_HEAD_MIXED gives the mask of the policy's dense calls (native);
 * STSA_HEAD_SEMANTIC has no fixed mask (SVG2's are per head and call):
 * STSA_ERR_BAD_PARAM. q_order and kv_order may be NULL. */
STSA_API stsa_status stsa_svg_kind_mask(const stsa_svg *svg, stsa_head_kind kind,
                                        stsa_mask **mask, stsa_order *q_order,
                                        stsa_order *kv_order);

/* The native tokens of the query rows the session profiles in call (layer,
 * step) for batch entry `batch`: cfg.sample_rows entries, ascending, into
 * rows. For callers that profile on their own (the ring of libstsa_mpi). */
STSA_API stsa_status stsa_svg_sampled_rows(const stsa_svg *svg, int64_t layer,
                                           int64_t step, int64_t batch, int64_t *rows);
#endif /* STSA_EXPERIMENTAL */

#ifdef __cplusplus
}
#endif
#endif /* STSA_H */
