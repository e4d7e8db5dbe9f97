/* driver.c — see driver.h. */
#include "kernel/driver.h"

#include <omp.h>
#include <stdlib.h>

/* Packed K/V of several heads is capped so huge problems stay within memory
 * (75,600 tokens x D 128 is ~77 MB per head). */
#define PACK_BYTES_CAP ((size_t)1 << 31)

/* Heads packed together: enough q tiles for every thread to stay busy. */
static int64_t heads_per_group(const stsa_attn_problem *pb, int threads) {
  int64_t heads = pb->B * pb->H, nqt = stsa_q_tiles(pb);
  int64_t group = (4 * (int64_t)threads + nqt - 1) / nqt;
  size_t per_head = stsa_kv_packed_floats(pb) * sizeof(float);
  int64_t mem_cap = (int64_t)(PACK_BYTES_CAP / per_head);
  if (group > mem_cap)
    group = mem_cap;
  if (group > heads)
    group = heads;
  return group < 1 ? 1 : group;
}

typedef struct unit_order {
  int64_t unit, cost;
} unit_order;

static int by_cost_desc(const void *a, const void *b) {
  const unit_order *x = a, *y = b;
  if (x->cost != y->cost)
    return x->cost < y->cost ? 1 : -1;
  return (x->unit > y->unit) - (x->unit < y->unit);
}

/* Everything one run needs, allocated up front. */
typedef struct drive_mem {
  float *pack_mem; /* in the caller's workspace */
  stsa_kv_packed *packs;
  stsa_tile_scratch *scratch;
  stsa_unit_buf *bufs;
  int32_t *buf_ints;
  uint8_t *buf_kinds;
  unit_order *order;
} drive_mem;

static void drive_mem_free(drive_mem *m, int threads) {
  for (int t = 0; m->scratch && t < threads; t++)
    stsa_tile_scratch_free(&m->scratch[t]);
  free(m->scratch);
  free(m->packs);
  free(m->bufs);
  free(m->buf_ints);
  free(m->buf_kinds);
  free(m->order);
}

static int drive_mem_alloc(drive_mem *m, const stsa_attn_problem *pb, int threads,
                           int64_t group, stsa_workspace *ws) {
  const size_t pack_floats = stsa_kv_packed_floats(pb), nkt = (size_t)stsa_kv_tiles(pb);
  m->pack_mem = stsa_workspace_get(ws, (size_t)group * pack_floats * sizeof(float));
  m->packs = malloc(sizeof *m->packs * (size_t)group);
  m->scratch = calloc((size_t)threads, sizeof *m->scratch);
  m->bufs = calloc((size_t)threads, sizeof *m->bufs);
  m->buf_ints = malloc(sizeof(int32_t) * 2 * nkt * (size_t)threads);
  m->buf_kinds = malloc(nkt * (size_t)threads);
  m->order = malloc(sizeof *m->order * (size_t)group * (size_t)stsa_q_tiles(pb));
  if (!m->pack_mem || !m->packs || !m->scratch || !m->bufs || !m->buf_ints ||
      !m->buf_kinds || !m->order)
    return -1;
  for (int t = 0; t < threads; t++) {
    if (stsa_tile_scratch_alloc(pb, &m->scratch[t]) != 0)
      return -1;
    m->bufs[t].tiles = m->buf_ints + 2 * nkt * (size_t)t;
    m->bufs[t].ids = m->bufs[t].tiles + nkt;
    m->bufs[t].kinds = m->buf_kinds + nkt * (size_t)t;
  }
  for (int64_t g = 0; g < group; g++)
    m->packs[g] = stsa_kv_packed_at(pb, m->pack_mem + (size_t)g * pack_floats);
  return 0;
}

stsa_status stsa_drive(const stsa_attn_problem *pb, int threads,
                       const stsa_work_source *src, stsa_workspace *ws) {
  const int64_t heads = pb->B * pb->H, nqt = stsa_q_tiles(pb), nkt = stsa_kv_tiles(pb);
  const int64_t group = heads_per_group(pb, threads);
  drive_mem m = {0};
  if (drive_mem_alloc(&m, pb, threads, group, ws) != 0) {
    drive_mem_free(&m, threads);
    return STSA_ERR_OUT_OF_MEMORY;
  }
  for (int64_t g0 = 0; g0 < heads; g0 += group) {
    const int64_t ng = heads - g0 < group ? heads - g0 : group;
    /* Largest units first, so the last ones to start are the cheap ones. */
    for (int64_t u = 0; u < ng * nqt; u++) {
      m.order[u].unit = u;
      m.order[u].cost = src ? src->cost(src->ud, g0 + u / nqt, u % nqt) : 1;
    }
    if (src)
      qsort(m.order, (size_t)(ng * nqt), sizeof *m.order, by_cost_desc);
#pragma omp parallel num_threads(threads)
    {
#pragma omp for schedule(dynamic, 1)
      for (int64_t u = 0; u < ng * nkt; u++) {
        int64_t head = g0 + u / nkt, tile = u % nkt;
        const uint8_t *used = src ? src->used_tiles(src->ud, head) : NULL;
        const int64_t *kv_rows = src ? src->kv_rows(src->ud, head) : NULL;
        if (!used || used[tile])
          stsa_pack_kv_tile(pb, head / pb->H, head % pb->H, tile, kv_rows,
                            &m.packs[u / nkt]);
      }
      const int t = omp_get_thread_num();
#pragma omp for schedule(dynamic, 1)
      for (int64_t i = 0; i < ng * nqt; i++) {
        int64_t u = m.order[i].unit, head = g0 + u / nqt, qt = u % nqt;
        stsa_kv_list list, *lp = NULL;
        if (src) {
          m.bufs[t].ud = src->ud;
          m.bufs[t].head = head;
          m.bufs[t].qt = qt;
          src->unit(src->ud, head, qt, &m.bufs[t], &list);
          lp = &list;
        }
        stsa_run_q_tile(pb, &m.packs[u / nqt], head / pb->H, head % pb->H, qt, lp,
                        &m.scratch[t]);
      }
    }
  }
  drive_mem_free(&m, threads);
  return STSA_OK;
}
