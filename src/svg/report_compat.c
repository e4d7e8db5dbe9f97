/*
 * report_compat.c — stsa_svg_report as laid out before it was grouped by
 * what it describes: fields in the order they came (see compat.h).
 */
#include <stddef.h>
#include <string.h>

#include "core/sized.h"
#include "svg/compat.h"

/* The layout in release order; the first release's ended at est_error,
 * later ones at run (the error budget and SVG2), at cand_density (the run
 * info) and at its end (method auto). */
typedef struct svg_report_history {
  size_t size;
  int dense;
  stsa_head_kind *kinds;
  float *mse_spatial, *mse_temporal;
  double profile_ms, attention_ms, density;
  float *est_error, *head_density;
  uint8_t *budget;
  float *head_top_p;
  int64_t q_clusters, kv_clusters;
  double cluster_ms;
  int cold;
  stsa_run_info *run;
  float *cand_density, *cand_bound;
  uint8_t *choice, *choice_reason;
} svg_report_history;

#define FIRST_LAYOUT offsetof(svg_report_history, est_error)
_Static_assert(sizeof(stsa_svg_report) > sizeof(svg_report_history),
               "stsa_svg_report: a new layout must be larger than every old one");

/* Each field of the two layouts, by offset. */
#define COPY_FIELDS(COPY)                                                                \
  COPY(dense)                                                                            \
  COPY(kinds)                                                                            \
  COPY(mse_spatial)                                                                      \
  COPY(mse_temporal)                                                                     \
  COPY(profile_ms)                                                                       \
  COPY(attention_ms)                                                                     \
  COPY(density)                                                                          \
  COPY(est_error)                                                                        \
  COPY(head_density)                                                                     \
  COPY(budget)                                                                           \
  COPY(head_top_p)                                                                       \
  COPY(q_clusters)                                                                       \
  COPY(kv_clusters)                                                                      \
  COPY(cluster_ms)                                                                       \
  COPY(cold)                                                                             \
  COPY(run)                                                                              \
  COPY(cand_density)                                                                     \
  COPY(cand_bound)                                                                       \
  COPY(choice)                                                                           \
  COPY(choice_reason)

stsa_status stsa_svg_report_read(const stsa_svg_report *report, stsa_svg_report *local,
                                 stsa_errbuf *err) {
  size_t size;
  memcpy(&size, report, sizeof size);
  if (size >= sizeof *local)
    return stsa_sized_read(local, report, sizeof *local, sizeof *local, "stsa_svg_report",
                           err);
  /* an earlier release's: the fields its size covers (each release's size
   * ends on a field), the rest zero */
  svg_report_history old;
  STSA_TRY(stsa_sized_check_out(report, FIRST_LAYOUT, "stsa_svg_report", err));
  if (size > sizeof old)
    STSA_TRY(stsa_sized_check(report, sizeof old, "stsa_svg_report", err));
  memset(&old, 0, sizeof old);
  memcpy(&old, report, size < sizeof old ? size : sizeof old);
  memset(local, 0, sizeof *local);
  local->size = sizeof *local;
#define FROM_OLD(f) local->f = old.f;
  COPY_FIELDS(FROM_OLD)
#undef FROM_OLD
  return STSA_OK;
}

void stsa_svg_report_write(stsa_svg_report *dst, const stsa_svg_report *src) {
  size_t size;
  memcpy(&size, dst, sizeof size);
  if (size >= sizeof *src) {
    stsa_sized_write(dst, src, sizeof *src);
    return;
  }
  svg_report_history old;
  memset(&old, 0, sizeof old); /* padding too: it is copied out */
#define TO_OLD(f) old.f = src->f;
  COPY_FIELDS(TO_OLD)
#undef TO_OLD
  stsa_sized_write(dst, &old, sizeof old);
}
