/* kmeans_gemm.c — k-means distances as a GEMM on the context's qk
 * micro-kernel (see kmeans_internal.h). */
#include <float.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "svg/kmeans_internal.h"

/* Points whose rows a gathered pass prefetches ahead of the one it copies:
 * the rows come mostly from memory, one latency each unprefetched (a warm
 * Wan-480p call 0.5% faster, paired; sixteen ahead no better). */
#define GATHER_AHEAD 8

size_t stsa_km_thread_floats(int mr, int nr, int d, size_t slot[3]) {
  slot[0] = stsa_km_floats64((size_t)STSA_KM_CHUNK_BLOCKS * (size_t)mr * (size_t)(d + 1));
  slot[1] = stsa_km_floats64(2 * (size_t)mr * (size_t)nr);
  slot[2] = stsa_km_floats64(2 * (size_t)mr);
  return slot[0] + slot[1] + slot[2];
}

km_thread stsa_km_thread_view(const km *m, int t) {
  size_t slot[3];
  stsa_km_thread_floats(m->mr, m->nr, m->d, slot);
  float *p = (float *)(void *)(m->thread_mem + m->thread_bytes * (size_t)t);
  km_thread v;
  v.q = p;
  v.s = v.q + slot[0];
  v.rowmax = v.s + slot[1];
  return v;
}

void stsa_km_pack_centres(km *m, const float *base, int64_t stride, const int32_t *idx,
                          int64_t count, int augment) {
  const int d = m->d, nr = m->nr, depth = d + (augment != 0);
  const int64_t padded = (count + nr - 1) / nr * nr;
  m->depth = depth;
  for (int64_t c = 0; c < padded; c++) {
    float *dst = m->panels + (c / nr) * depth * nr + c % nr;
    if (c < count) {
      const float *row = base + (idx ? idx[c] : c) * stride;
      for (int j = 0; j < d; j++)
        dst[j * nr] = row[j];
      m->cnorm[c] = stsa_km_dot(row, row, d);
    } else {
      for (int j = 0; j < d; j++)
        dst[j * nr] = 0.0f;
      m->cnorm[c] = 0.0f;
    }
    /* padding never holds a row's maximum: x.0 - FLT_MAX */
    if (augment)
      dst[d * nr] = c < count ? -0.5f * m->cnorm[c] : -FLT_MAX;
  }
}

void stsa_km_gemm_pass(km *m, const int32_t *idx, int64_t nrows, int64_t col0,
                       int64_t ncols, const int32_t *order, stsa_km_visit visit,
                       void *ud) {
  const int mr = m->mr, nr = m->nr, d = m->d, depth = m->depth;
  const int64_t chunk_rows = (int64_t)STSA_KM_CHUNK_BLOCKS * mr;
  const int64_t nchunks = (nrows + chunk_rows - 1) / chunk_rows;
  const int64_t npan = (ncols + nr - 1) / nr;
#pragma omp parallel num_threads(stsa_km_threads_for(m, nchunks))
  {
    km_thread t = stsa_km_thread_view(m, omp_get_thread_num());
#pragma omp for schedule(dynamic, 1)
    for (int64_t ch = 0; ch < nchunks; ch++) {
      const int64_t i0 = ch * chunk_rows;
      const int64_t rows = nrows - i0 < chunk_rows ? nrows - i0 : chunk_rows;
      const int64_t nblocks = (rows + mr - 1) / mr;
      const float *q[STSA_KM_CHUNK_BLOCKS]; /* each block's mr rows, depth apart */
      for (int64_t b = 0; b < nblocks; b++) {
        const int64_t brows = rows - b * mr < mr ? rows - b * mr : mr;
        if (!idx && depth == d && m->ld == d && brows == mr) {
          q[b] = stsa_km_row(m, i0 + b * mr); /* packed rows serve as they are */
          for (int64_t r = 0; m->norms_in_pass && r < mr; r++)
            m->xnorm[i0 + b * mr + r] = stsa_km_dot(q[b] + r * d, q[b] + r * d, d);
          continue;
        }
        float *dst = t.q + b * mr * depth;
        for (int64_t r = 0; r < mr; r++) {
          if (r < brows) {
            const int64_t pos = i0 + b * mr + r;
            /* a gathered pass is an assignment's (rows_groups, rows_by_coarse) */
            if (idx) {
              if (pos + GATHER_AHEAD < nrows)
                stsa_km_prefetch_row(m, idx[pos + GATHER_AHEAD]);
              stsa_km_prefetch_assign_state(m, idx[pos]); /* 0.3-0.5%, paired */
            }
            memcpy(dst + r * depth, stsa_km_row(m, idx ? idx[pos] : pos),
                   sizeof(float) * (size_t)d);
            if (m->norms_in_pass)
              m->xnorm[idx ? idx[pos] : pos] =
                  stsa_km_dot(dst + r * depth, dst + r * depth, d);
            if (depth > d)
              dst[r * depth + d] = 1.0f;
          } else
            memset(dst + r * depth, 0, sizeof(float) * (size_t)depth);
        }
        q[b] = dst;
      }
      /* Panels two at a time through qk2 where the kernels have it, each
       * with its own row maxima; every block visits the first panel, then
       * the second, as one panel at a time would. */
      for (int64_t j = 0, take; j < npan; j += take) {
        take = stsa_panel_step(m->kern->qk2 != NULL, (int)(npan - j));
        int64_t c0[2];
        const float *panel[2];
        int cols[2];
        for (int x = 0; x < take; x++) {
          const int64_t p = order ? order[j + x] : j + x;
          c0[x] = col0 + p * nr;
          panel[x] = m->panels + (c0[x] / nr) * depth * nr;
          cols[x] = (int)(ncols - p * nr < nr ? ncols - p * nr : nr);
        }
        float *s1 = t.s + mr * nr, *max1 = t.rowmax + mr;
        for (int64_t b = 0; b < nblocks; b++) {
          for (int r = 0; r < 2 * mr; r++)
            t.rowmax[r] = -INFINITY;
          if (take == 2)
            m->kern->qk2(q[b], depth, panel[0], panel[1], t.s, s1, nr, t.rowmax, max1);
          else
            m->kern->qk(q[b], depth, panel[0], t.s, nr, t.rowmax);
          const int brows = (int)(rows - b * mr < mr ? rows - b * mr : mr);
          visit(m, ud, i0 + b * mr, brows, c0[0], cols[0], t.s, t.rowmax);
          if (take == 2)
            visit(m, ud, i0 + b * mr, brows, c0[1], cols[1], s1, max1);
        }
      }
    }
  }
}
