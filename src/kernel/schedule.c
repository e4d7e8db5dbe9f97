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

/* Everything of a slice but the pack: scratch, used flags, the unit buffer. */
static size_t rest_bytes(const stsa_work *w) {
  size_t nkt = (size_t)stsa_kv_tiles(w->pb);
  return round64(scratch_bytes(w)) + round64(nkt) + round64(nkt * sizeof(int32_t)) +
         round64(nkt);
}

size_t stsa_work_slice_bytes(const stsa_work *w) { return pack_bytes(w) + rest_bytes(w); }

/* A slice whose pack is at `pack` and the rest at `rest` (both 64-byte
 * aligned): apart when threads share one pack, else one after the other. */
static slice_view slice_at(const stsa_work *w, void *pack, void *rest) {
  size_t nkt = (size_t)stsa_kv_tiles(w->pb);
  char *p = rest;
  slice_view s;
  memset(&s, 0, sizeof s);
  if (w->ref)
    s.ref_scratch = p;
  else {
    s.pack = stsa_kv_packed_at(w->pb, pack);
    stsa_tile_scratch_at(w->pb, p, &s.sc);
  }
  p += round64(scratch_bytes(w));
  s.used = (uint8_t *)p;
  p += round64(nkt);
  s.buf.tiles = (int32_t *)(void *)p;
  p += round64(nkt * sizeof(int32_t));
  s.buf.kinds = (uint8_t *)p;
  s.buf.ud = w->ud;
  return s;
}

/* Slice i of consecutive whole slices at mem. */
static slice_view slice_in(const stsa_work *w, char *mem, size_t i) {
  char *slice = mem + stsa_work_slice_bytes(w) * i;
  return slice_at(w, slice, slice + pack_bytes(w));
}

static int64_t unit_cost(const stsa_work *w, int64_t u) {
  return w->ops && w->ops->cost ? w->ops->cost(w->ud, u / w->units, u % w->units) : 1;
}

/* Items are runs of `per` units from unit `base` (units, or whole heads). */
typedef struct item_range {
  int64_t base, n, per;
} item_range;

static int64_t item_cost(const stsa_work *w, const item_range *r, int64_t i) {
  int64_t c = 0;
  for (int64_t u = r->base + i * r->per; u < r->base + (i + 1) * r->per; u++)
    c += unit_cost(w, u);
  return c;
}

/* Part ith of nth of the items: those whose cost midpoint falls in the ith
 * nth of their total cost. Monotone in the item, so every part is a
 * contiguous range of units, the same for every caller that asks. */
static void split(const stsa_work *w, const item_range *r, int ith, int nth, int64_t *u0,
                  int64_t *u1) {
  int64_t i0 = r->n, i1 = r->n;
  if (!w->ops || !w->ops->cost) {
    i0 = r->n * ith / nth;
    i1 = r->n * (ith + 1) / nth;
  } else {
    int64_t total = 0;
    for (int64_t i = 0; i < r->n; i++)
      total += item_cost(w, r, i);
    int64_t before = 0;
    int found = 0;
    for (int64_t i = 0; i < r->n; i++) {
      const int64_t c = item_cost(w, r, i);
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
  *u0 = r->base + i0 * r->per;
  *u1 = r->base + i1 * r->per;
}

/* The whole work as items: whole heads, or units. */
static item_range all_items(const stsa_work *w, int whole_heads) {
  item_range r = {0, whole_heads ? w->heads : w->heads * w->units,
                  whole_heads ? w->units : 1};
  return r;
}

/* Flags in used[] the kv tiles `head` visits; 0 when it visits them all. */
static int head_used(const stsa_work *w, int64_t head, uint8_t *used) {
  if (!w->ops || !w->ops->used_tiles)
    return 0;
  w->ops->used_tiles(w->ud, head, used);
  return 1;
}

static stsa_kv_layout kv_layout_of(const stsa_work *w, int64_t head) {
  return w->ops && w->ops->kv_layout ? w->ops->kv_layout(w->ud, head)
                                     : (stsa_kv_layout){0};
}

/* Packs kv tile t of `head` into `pack` if the head visits it. */
static void pack_tile(const stsa_work *w, int64_t head, int64_t t, int has_used,
                      const uint8_t *used, stsa_kv_packed *pack) {
  if (has_used && !used[t])
    return;
  const stsa_kv_layout lay = kv_layout_of(w, head);
  const stsa_kv_span sp = stsa_kv_span_of(w->pb, lay.kv_start, lay.kv_pack, t);
  stsa_pack_kv_span(w->pb, head / w->pb->H, head % w->pb->H, t, &sp, lay.kv_rows, pack);
}

/* Once every tile `head` visits is packed: K times 2^k_exp where the head
 * moves that much of the scale from q to K (kv_pack.h: stsa_kv_k_exp),
 * and V scaled into the range where no P.V sum overflows (STSA_V_SUM_LIMIT)
 * for a V with values near FLT_MAX. Only such calls and heads; every other
 * keeps its bytes. */
static void fit_ranges(const stsa_work *w, int64_t head, int has_used,
                       const uint8_t *used, stsa_kv_packed *pack) {
  pack->v_exp = stsa_kv_v_exp(w->pb, pack, has_used ? used : NULL);
  pack->k_exp = stsa_kv_k_exp(w->pb, pack, head / w->pb->H, head % w->pb->H,
                              has_used ? used : NULL);
  if (!pack->v_exp && !pack->k_exp)
    return;
  const stsa_kv_layout lay = kv_layout_of(w, head);
  for (int64_t t = 0; t < stsa_kv_tiles(w->pb); t++)
    if (!has_used || used[t]) {
      const stsa_kv_span sp = stsa_kv_span_of(w->pb, lay.kv_start, lay.kv_pack, t);
      if (pack->k_exp)
        stsa_kv_scale_k_span(w->pb, pack, t, &sp);
      if (pack->v_exp)
        stsa_kv_scale_v_span(w->pb, pack, &sp);
    }
}

static void pack_head(const stsa_work *w, int64_t head, slice_view *s) {
  const int has_used = head_used(w, head, s->used);
  for (int64_t t = 0; t < stsa_kv_tiles(w->pb); t++)
    pack_tile(w, head, t, has_used, s->used, &s->pack);
  fit_ranges(w, head, has_used, s->used, &s->pack);
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
    stsa_unit unit = {pb, head / pb->H, head % pb->H, iu, NULL, {0}, 0};
    if (w->ops) {
      s->buf.head = head;
      s->buf.qt = iu;
      w->ops->unit(w->ud, head, iu, &s->buf, &list, &unit);
    }
    if (unit.none)
      continue;
    if (w->ref)
      stsa_ref_q_tile(unit.pb, unit.b, unit.h, unit.qt, unit.list, &unit.layout,
                      s->ref_scratch);
    else
      stsa_run_q_tile_in(unit.pb, &s->pack, unit.b, unit.h, unit.qt, unit.list,
                         &unit.layout, &s->sc);
  }
}

void stsa_work_part(const stsa_work *w, int ith, int nth, void *slice) {
  int64_t u0, u1, packed = -1;
  const item_range r = all_items(w, w->whole_heads);
  split(w, &r, ith, nth, &u0, &u1);
  if (u0 == u1)
    return;
  slice_view s = slice_in(w, slice, 0);
  run_units(w, u0, u1, &s, &packed);
}

/* Parts per thread on the library's threads: a slow or late thread then
 * costs a small part. */
enum { PARTS_PER_THREAD = 4 };

/* One head's shared pack and the kv tiles the head visits. */
typedef struct head_pack {
  stsa_kv_packed pack;
  uint8_t *used; /* [kv tiles], when has_used */
  int has_used;
} head_pack;

/* Heads in turn on the library's threads: all threads pack a head into a
 * shared pack, then take its units one by one. With two packs, once a head's
 * units are all handed out the threads take the next head's kv tiles into the
 * other pack, so a thread that would have waited for another's last unit
 * packs instead and a head's end costs at most one kv tile's packing (the
 * wait was up to a unit: 1-2% of a call at S = 8192, 43 units a head on 2
 * threads). The second pack is only worth its memory for heads of few units
 * per thread (a unit's wait is then a visible share); heads of many units
 * keep one. */
static size_t head_pack_bytes(const stsa_work *w) {
  return pack_bytes(w) + round64((size_t)stsa_kv_tiles(w->pb));
}

enum { DOUBLE_PACK_UNITS_PER_THREAD = 64 };

static int head_packs(const stsa_work *w, int threads) {
  return w->heads > 1 && w->units < DOUBLE_PACK_UNITS_PER_THREAD * (int64_t)threads ? 2
                                                                                    : 1;
}

/* All threads pack `head` into hp (called inside the parallel region). */
static void pack_shared(const stsa_work *w, int64_t head, head_pack *hp) {
#pragma omp single
  hp->has_used = head_used(w, head, hp->used);
#pragma omp for schedule(dynamic, 4)
  for (int64_t t = 0; t < stsa_kv_tiles(w->pb); t++)
    pack_tile(w, head, t, hp->has_used, hp->used, &hp->pack);
}

static void run_head_by_head(const stsa_work *w, int threads, char *mem) {
  const int64_t nkt = stsa_kv_tiles(w->pb), units = w->units;
  const int npacks = head_packs(w, threads);
  head_pack hp[2];
  for (int i = 0; i < npacks; i++) {
    char *at = mem + head_pack_bytes(w) * (size_t)i;
    hp[i].pack = stsa_kv_packed_at(w->pb, (float *)(void *)at);
    hp[i].used = (uint8_t *)at + pack_bytes(w);
    hp[i].has_used = 0;
  }
  char *rest = mem + head_pack_bytes(w) * (size_t)npacks;
#pragma omp parallel num_threads(threads)
  {
    slice_view s = slice_at(w, mem, rest + rest_bytes(w) * (size_t)omp_get_thread_num());
    pack_shared(w, 0, &hp[0]);
    for (int64_t head = 0; head < w->heads; head++) {
      head_pack *cur = &hp[head % npacks], *next = &hp[(head + 1) % npacks];
      if (head > 0 && npacks == 1)
        pack_shared(w, head, cur);
      /* next's pack last served head - 1, whose units are all done */
      const int64_t more = npacks == 2 && head + 1 < w->heads ? nkt : 0;
      /* cur is packed (the barrier of the loop before); one thread fits its
       * K and V ranges while the others wait at the single's end */
#pragma omp single
      {
        fit_ranges(w, head, cur->has_used, cur->used, &cur->pack);
        if (more)
          next->has_used = head_used(w, head + 1, next->used);
      }
      s.pack = cur->pack;
      int64_t packed = head;
      /* dynamic hands out iterations in order: every unit before any tile */
#pragma omp for schedule(dynamic, 1)
      for (int64_t i = 0; i < units + more; i++) {
        if (i < units)
          run_units(w, head * units + i, head * units + i + 1, &s, &packed);
        else
          pack_tile(w, head + 1, i - units, next->has_used, next->used, &next->pack);
      }
    }
  }
}

stsa_status stsa_work_run(const stsa_work *w, int threads, stsa_workspace *ws) {
  if (w->heads == 0 || w->units == 0)
    return STSA_OK;
  if (threads > 1 && !w->ref && !w->whole_heads && w->units >= threads) {
    char *mem =
        stsa_workspace_get(ws, head_pack_bytes(w) * (size_t)head_packs(w, threads) +
                                   rest_bytes(w) * (size_t)threads);
    if (!mem)
      return STSA_ERR_OUT_OF_MEMORY;
    run_head_by_head(w, threads, mem);
    return STSA_OK;
  }
  /* Heads too small to share (fewer units than threads), or work that cuts
   * between heads only: parts of whole heads, each packed once by its
   * thread in its own slice. The reference packs nothing and splits by
   * units. */
  const item_range r = all_items(w, !w->ref || w->whole_heads);
  const int64_t want = threads == 1 ? 1 : PARTS_PER_THREAD * (int64_t)threads;
  const int nparts = (int)(r.n < want ? r.n : want);
  if (threads > nparts)
    threads = nparts;
  char *mem = stsa_workspace_get(ws, stsa_work_slice_bytes(w) * (size_t)threads);
  if (!mem)
    return STSA_ERR_OUT_OF_MEMORY;
#pragma omp parallel num_threads(threads)
  {
    slice_view s = slice_in(w, mem, (size_t)omp_get_thread_num());
    int64_t packed = -1;
#pragma omp for schedule(dynamic, 1)
    for (int p = 0; p < nparts; p++) {
      int64_t u0, u1;
      split(w, &r, p, nparts, &u0, &u1);
      run_units(w, u0, u1, &s, &packed);
    }
  }
  return STSA_OK;
}
