/*
 * windows.h — from a density (kept fraction) to the window widths of the
 * two head kinds, as SVG does: the text rows and columns are dense, the rest
 * of the budget goes to the video pairs. Realised densities come from the
 * plans (exact); these formulas only choose the widths.
 */
#ifndef STSA_SVG_WINDOWS_H
#define STSA_SVG_WINDOWS_H

#include "stsa.h"

/* Kept fraction the video x video pairs may use so that the whole sequence
 * (text rows/columns dense) keeps `density`. */
double stsa_svg_video_density(const stsa_geometry *g, double density);

/* The frame window w_f whose spatial mask (with the sink) keeps the video
 * fraction closest to `video_density`. */
int64_t stsa_svg_frame_window(const stsa_geometry *g, int64_t sink_frames,
                              double video_density);

/* Half-width in position-major tokens of the temporal band (with the sink)
 * for `video_density`: SVG's w = L (1 - sqrt(1 - s)). */
int64_t stsa_svg_band_halfwidth(const stsa_geometry *g, int64_t sink_frames,
                                double video_density);

#endif
