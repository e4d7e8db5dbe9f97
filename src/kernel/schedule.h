/*
 * schedule.h — the one way work is split: a problem is heads x units (a unit
 * is one q tile of one head), the units are cut into nth contiguous parts of
 * about equal cost, and part ith runs in a caller-given slice of memory that
 * holds one packed head and a q tile's scratch. A part packs each head it
 * reaches (only the kv tiles the head uses), then computes its units.
 *
 * Everything runs through it: a host's thread pool (stsa_work_part, the
 * partitioned entry points), the library's own threads (stsa_work_run: one
 * head at a time, its kv tiles packed by all threads into one shared pack
 * and its units taken one by one by whichever thread is free, the next
 * head packed into a second pack by threads that run out of units; heads with
 * fewer units than threads, and the profiling rows, as parts of whole heads
 * instead), the profiling rows and the reference
 * backend (a flag: the same units and lists, rows computed in double
 * instead of by the micro-kernels). Each unit computes its rows in a fixed
 * order whatever part or thread runs it, so the output
 * is bitwise the same for any thread count and any nth.
 */
#ifndef STSA_KERNEL_SCHEDULE_H
#define STSA_KERNEL_SCHEDULE_H

#include "core/workspace.h"
#include "kernel/tile_loop.h"

/* Per-part room a work source may fill a unit's list into. */
typedef struct stsa_unit_buf {
  int32_t *tiles; /* [kv_tiles] */
  uint8_t *kinds; /* [kv_tiles] */
  const void *ud; /* the work source's user data */
  int64_t head;   /* head of the unit (b * H + h for a batched problem) */
  int64_t qt;     /* q tile of the unit */
} stsa_unit_buf;

/* One unit as a work source describes it. */
typedef struct stsa_unit {
  const stsa_attn_problem *pb; /* the problem the unit belongs to */
  int64_t b, h;                /* its (batch, head) in pb's tensors */
  int64_t qt;                  /* its q tile in pb */
  const stsa_kv_list *list;    /* NULL: every kv tile, FULL */
  stsa_tile_layout layout;     /* its variable tiles (NULLs: fixed) */
  int none; /* nothing to compute: the head has fewer (variable) q tiles
               than the call's units */
} stsa_unit;

/* How a head's kv tiles are packed: its token map and its variable tiles
 * (block_sparse.h); NULL: identity, fixed tiles. */
typedef struct stsa_kv_layout {
  const int64_t *kv_rows, *kv_start, *kv_pack;
} stsa_kv_layout;

typedef struct stsa_work_ops {
  /* Describes unit u of head `head`; `list` and `buf` are the part's room. */
  void (*unit)(const void *ud, int64_t head, int64_t u, stsa_unit_buf *buf,
               stsa_kv_list *list, stsa_unit *out);
  /* Relative cost of a unit (its visited kv tiles or columns); NULL: all equal. */
  int64_t (*cost)(const void *ud, int64_t head, int64_t u);
  /* Flags the kv tiles `head` visits in used[kv_tiles]; NULL: all of them. */
  void (*used_tiles)(const void *ud, int64_t head, uint8_t *used);
  /* The kv layout of `head`; NULL: identity map, fixed tiles. */
  stsa_kv_layout (*kv_layout)(const void *ud, int64_t head);
} stsa_work_ops;

typedef struct stsa_work {
  const stsa_attn_problem *pb; /* sizes the packing and scratch */
  int64_t heads;               /* heads of work */
  int64_t units;               /* units per head */
  int ref;                     /* compute rows with the double-precision reference */
  int whole_heads;             /* cut parts between heads only: for units so cheap
                                  that packing a head twice would dominate */
  const stsa_work_ops *ops;    /* NULL: dense, heads = B * H, units = q tiles */
  const void *ud;
} stsa_work;

/* Bytes of one part's slice (64-byte multiples). */
size_t stsa_work_slice_bytes(const stsa_work *w);

/* Runs part ith of nth in `slice` (64-byte aligned, stsa_work_slice_bytes). */
void stsa_work_part(const stsa_work *w, int ith, int nth, void *slice);

/* Runs all of it on `threads` threads, slices in `ws`; STSA_ERR_OUT_OF_MEMORY
 * (nothing written) when the workspace cannot grow. */
stsa_status stsa_work_run(const stsa_work *w, int threads, stsa_workspace *ws);

#endif
