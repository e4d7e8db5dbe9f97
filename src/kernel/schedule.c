/* schedule.c — see schedule.h. */
#include "kernel/schedule.h"

#include <omp.h>
#include <string.h>

#include "kernel/ref/attention_ref.h"

static size_t round64(size_t bytes) { return (bytes + 63) / 64 * 64; }

/* The pieces of a slice, laid out in order. */
typedef struct slice_view {
  stsa_kv_packed pack;
  stsa_tile_scratch sc;
  void *ref_scratch;
  uint8_t *used;
  stsa_unit_buf buf;
} slice_view;

static size_t pack_bytes(const stsa_work *w) {
  return w->ref ? 0 : round64(stsa_kv_packed_floats(w->pb) * sizeof(float));
}

static size_t scratch_bytes(const stsa_work *w) {
  return w->ref ? stsa_ref_scratch_bytes(w->pb) : stsa_tile_scratch_bytes(w->pb);
}

size_t stsa_work_slice_bytes(const stsa_work *w) {
  size_t nkt = (size_t)stsa_kv_tiles(w->pb);
  return pack_bytes(w) + round64(scratch_bytes(w)) + round64(nkt) +
         round64(nkt * sizeof(int32_t)) + round64(nkt);
}

static slice_view slice_at(const stsa_work *w, void *slice) {
  size_t nkt = (size_t)stsa_kv_tiles(w->pb);
  char *p = slice;
  slice_view s;
  memset(&s, 0, sizeof s);
  if (!w->ref)
    s.pack = stsa_kv_packed_at(w->pb, (float *)(void *)p);
  p += pack_bytes(w);
  if (w->ref)
    s.ref_scratch = p;
  else
    stsa_tile_scratch_at(w->pb, p, &s.sc);
  p += round64(scratch_bytes(w));
  s.used = (uint8_t *)p;
  p += round64(nkt);
  s.buf.tiles = (int32_t *)(void *)p;
  p += round64(nkt * sizeof(int32_t));
  s.buf.kinds = (uint8_t *)p;
  s.buf.ud = w->ud;
  return s;
}

static int64_t unit_cost(const stsa_work *w, int64_t u) {
  return w->ops && w->ops->cost ? w->ops->cost(w->ud, u / w->units, u % w->units) : 1;
}

/* Cost of item i: a unit, or (whole_heads) a head's units together. */
static int64_t item_cost(const stsa_work *w, int64_t i) {
  if (!w->whole_heads)
    return unit_cost(w, i);
  int64_t c = 0;
  for (int64_t u = i * w->units; u < (i + 1) * w->units; u++)
    c += unit_cost(w, u);
  return c;
}

/* Part ith of nth: the items (units, or whole heads) whose cost midpoint
 * falls in the ith nth of the total cost. Monotone in the item, so every
 * part is a contiguous range of units, and the same for every caller. */
static void part_range(const stsa_work *w, int ith, int nth, int64_t *u0, int64_t *u1) {
  const int64_t per = w->whole_heads ? w->units : 1;
  const int64_t n = w->heads * w->units / per;
  int64_t i0 = n, i1 = n;
  if (!w->ops || !w->ops->cost) {
    i0 = n * ith / nth;
    i1 = n * (ith + 1) / nth;
  } else {
    int64_t total = 0;
    for (int64_t i = 0; i < n; i++)
      total += item_cost(w, i);
    int64_t before = 0;
    int found = 0;
    for (int64_t i = 0; i < n; i++) {
      const int64_t c = item_cost(w, i);
      int64_t p = (2 * before + c) * nth / (2 * total);
      p = p < nth ? p : nth - 1;
      if (p == ith && !found) {
        i0 = i;
        found = 1;
      } else if (p > ith) {
        i1 = i;
        break;
      }
      before += c;
    }
    if (!found)
      i0 = i1;
  }
  *u0 = i0 * per;
  *u1 = i1 * per;
}

static void pack_head(const stsa_work *w, int64_t head, slice_view *s) {
  const stsa_attn_problem *pb = w->pb;
  const int64_t nkt = stsa_kv_tiles(pb);
  const int has_used = w->ops && w->ops->used_tiles;
  if (has_used)
    w->ops->used_tiles(w->ud, head, s->used);
  const int64_t *kv_rows =
      w->ops && w->ops->kv_rows ? w->ops->kv_rows(w->ud, head) : NULL;
  for (int64_t t = 0; t < nkt; t++)
    if (!has_used || s->used[t])
      stsa_pack_kv_tile(pb, head / pb->H, head % pb->H, t, kv_rows, &s->pack);
}

/* Units [u0, u1); *packed is the head s->pack holds (-1: none). */
static void run_units(const stsa_work *w, int64_t u0, int64_t u1, slice_view *s,
                      int64_t *packed) {
  const stsa_attn_problem *pb = w->pb;
  for (int64_t u = u0; u < u1; u++) {
    const int64_t head = u / w->units, iu = u % w->units;
    if (!w->ref && head != *packed) {
      pack_head(w, head, s);
      *packed = head;
    }
    stsa_kv_list list;
    stsa_unit unit = {pb, head / pb->H, head % pb->H, iu, NULL};
    if (w->ops) {
      s->buf.head = head;
      s->buf.qt = iu;
      w->ops->unit(w->ud, head, iu, &s->buf, &list, &unit);
    }
    if (w->ref)
      stsa_ref_q_tile(unit.pb, unit.b, unit.h, unit.qt, unit.list, s->ref_scratch);
    else
      stsa_run_q_tile(unit.pb, &s->pack, unit.b, unit.h, unit.qt, unit.list, &s->sc);
  }
}

void stsa_work_part(const stsa_work *w, int ith, int nth, void *slice) {
  int64_t u0, u1, packed = -1;
  part_range(w, ith, nth, &u0, &u1);
  if (u0 == u1)
    return;
  slice_view s = slice_at(w, slice);
  run_units(w, u0, u1, &s, &packed);
}

stsa_status stsa_work_run(const stsa_work *w, int threads, stsa_workspace *ws) {
  const int64_t n = w->whole_heads ? w->heads : w->heads * w->units;
  if (n == 0)
    return STSA_OK;
  /* More parts than threads, so a slow or late thread costs a small part;
   * a part's first head is packed again only when its thread did not just
   * pack it. */
  const int64_t want = threads == 1 ? 1 : 4 * (int64_t)threads;
  const int nparts = (int)(n < want ? n : want);
  if (threads > nparts)
    threads = nparts;
  const size_t bytes = stsa_work_slice_bytes(w);
  char *mem = stsa_workspace_get(ws, bytes * (size_t)threads);
  if (!mem)
    return STSA_ERR_OUT_OF_MEMORY;
#pragma omp parallel num_threads(threads)
  {
    slice_view s = slice_at(w, mem + bytes * (size_t)omp_get_thread_num());
    int64_t packed = -1;
#pragma omp for schedule(dynamic, 1)
    for (int p = 0; p < nparts; p++) {
      int64_t u0, u1;
      part_range(w, p, nparts, &u0, &u1);
      run_units(w, u0, u1, &s, &packed);
    }
  }
  return STSA_OK;
}
