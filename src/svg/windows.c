/* windows.c — see windows.h. */
#include "svg/windows.h"

#include <math.h>

double stsa_svg_video_density(const stsa_geometry *g, double density) {
  double L = (double)(g->frames * g->height * g->width);
  double N = L + (double)g->text;
  double text_pairs = N * N - L * L; /* every pair touching a text token */
  double d = (density * N * N - text_pairs) / (L * L);
  return d < 0 ? 0 : (d > 1 ? 1 : d);
}

/* Video fraction kept by a frame window w plus frames < sink seen by all:
 * counted frame pair by frame pair (each frame pair is P x P token pairs). */
static double frame_window_density(int64_t F, int64_t w, int64_t sink) {
  int64_t kept = 0;
  for (int64_t fq = 0; fq < F; fq++)
    for (int64_t fk = 0; fk < F; fk++)
      kept += (fq - fk <= w && fk - fq <= w) || fk < sink;
  return (double)kept / (double)(F * F);
}

int64_t stsa_svg_frame_window(const stsa_geometry *g, int64_t sink_frames,
                              double video_density) {
  int64_t best = 0;
  double best_gap = INFINITY;
  for (int64_t w = 0; w < g->frames; w++) {
    double gap = fabs(frame_window_density(g->frames, w, sink_frames) - video_density);
    if (gap < best_gap) {
      best_gap = gap;
      best = w;
    }
  }
  return best;
}

int64_t stsa_svg_band_halfwidth(const stsa_geometry *g, int64_t sink_frames,
                                double video_density) {
  double L = (double)(g->frames * g->height * g->width);
  /* the sink keeps sink_frames/F of the pairs on its own; the band (which
   * overlaps it a little) gets the rest of the budget */
  double s = video_density - (double)sink_frames / (double)g->frames;
  if (s <= 0)
    return 0;
  if (s >= 1)
    return (int64_t)L;
  return (int64_t)llround(L * (1.0 - sqrt(1.0 - s)));
}
