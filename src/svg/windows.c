/* windows.c — see windows.h. */
#include "svg/windows.h"

#include <math.h>

/* Products in double: exact for any realistic video, and no int64 overflow
 * whatever the sizes. */
static double video_tokens(const stsa_geometry *g) {
  return (double)g->frames * (double)g->height * (double)g->width;
}

double stsa_svg_video_density(const stsa_geometry *g, double density) {
  double L = video_tokens(g);
  double N = L + (double)g->text;
  double text_pairs = N * N - L * L; /* every pair touching a text token */
  double d = (density * N * N - text_pairs) / (L * L);
  return d < 0 ? 0 : (d > 1 ? 1 : d);
}

/* Video fraction kept by a frame window w plus frames < sink seen by all, as
 * frame pairs (fq, fk) (each is P x P token pairs), in closed form: O(1),
 * and exact in double up to 2^26 frames. */
static double frame_window_density(int64_t F, int64_t w, int64_t sink) {
  const double f = (double)F, m = (double)(w < F - 1 ? w : F - 1);
  const double s = (double)(sink < F ? sink : F);
  /* pairs with |fq - fk| <= w */
  double window = f + 2.0 * (m * f - m * (m + 1.0) / 2.0);
  /* plus, for each sink column fk < s, the rows outside its window:
   * F - (min(fk + w, F - 1) - max(fk - w, 0) + 1) */
  double a = f - (double)w; /* columns fk < a have fk + w <= F - 1 */
  a = a < 0 ? 0 : (a > s ? s : a);
  double upper = a * (a - 1.0) / 2.0 + a * (double)w + (s - a) * (f - 1.0);
  double c = s - 1.0 - (double)w; /* columns fk > w: fk - w = 1 .. c */
  double lower = c > 0 ? c * (c + 1.0) / 2.0 : 0.0;
  double sink_rows = s * f - (upper - lower + s);
  return (window + sink_rows) / (f * f);
}

/* The density grows with w (strictly while sink < F), so the closest one
 * sits next to the first w reaching video_density: a binary search, and the
 * smaller w on a tie, as a scan from w = 0 would pick. */
int64_t stsa_svg_frame_window(const stsa_geometry *g, int64_t sink_frames,
                              double video_density) {
  const int64_t F = g->frames;
  if (F < 1)
    return 0;
  int64_t lo = 0, hi = F - 1; /* the density at F - 1 is 1 >= video_density */
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (frame_window_density(F, mid, sink_frames) >= video_density)
      hi = mid;
    else
      lo = mid + 1;
  }
  if (lo > 0 && fabs(frame_window_density(F, lo - 1, sink_frames) - video_density) <=
                    fabs(frame_window_density(F, lo, sink_frames) - video_density))
    return lo - 1;
  return lo;
}

int64_t stsa_svg_band_halfwidth(const stsa_geometry *g, int64_t sink_frames,
                                double video_density) {
  double L = video_tokens(g);
  /* the sink keeps sink_frames/F of the pairs on its own; the band (which
   * overlaps it a little) gets the rest of the budget */
  double s = video_density - (double)sink_frames / (double)g->frames;
  if (s <= 0)
    return 0;
  if (s >= 1)
    return (int64_t)L;
  return (int64_t)llround(L * (1.0 - sqrt(1.0 - s)));
}
