/*
 * plot_png.h — a small RGB canvas for the pictures of `stsa plot`: filled
 * rectangles, lines, text in a built-in 5x7 pixel font, axes with ticks,
 * legends, colour maps, and an atomic PNG writer (libpng).
 *
 * Coordinates are pixels, (0, 0) top left; everything is clipped to the
 * canvas, so callers never check bounds.
 */
#ifndef STSA_TOOLS_PLOT_PNG_H
#define STSA_TOOLS_PLOT_PNG_H

#include <stddef.h>
#include <stdint.h>

typedef struct rgb {
  uint8_t r, g, b;
} rgb;

typedef struct canvas {
  int w, h;
  uint8_t *px; /* w * h * 3 bytes, row-major RGB */
} canvas;

/* Named colours used by every picture, so they look alike. */
extern const rgb PLOT_WHITE, PLOT_BLACK, PLOT_GREY, PLOT_LIGHT, PLOT_BLUE, PLOT_ORANGE,
    PLOT_GREEN, PLOT_RED;

/* Allocates a w x h canvas filled with bg (dies when out of memory). */
void canvas_init(canvas *c, int w, int h, rgb bg);
void canvas_free(canvas *c);

void canvas_pixel(canvas *c, int x, int y, rgb col);
void canvas_fill(canvas *c, int x, int y, int w, int h, rgb col);
/* Outline of a rectangle, `thick` pixels inward. */
void canvas_box(canvas *c, int x, int y, int w, int h, int thick, rgb col);
/* A line of width `thick`; dash > 0 draws dash-pixel dashes with equal gaps. */
void canvas_line(canvas *c, double x0, double y0, double x1, double y1, int thick,
                 int dash, rgb col);
/* Small filled marker centred on (x, y): shape 0 square, 1 diamond, 2 circle,
 * 3 triangle. */
void canvas_marker(canvas *c, int x, int y, int size, int shape, rgb col);

/* Text: 5x7 glyphs (plus a descender row) 6 pixels apart, times `scale`;
 * text_height is the capital height. */
int text_width(const char *s, int scale);
int text_height(int scale);
/* Draws s with its top-left corner at (x, y). */
void canvas_text(canvas *c, int x, int y, const char *s, int scale, rgb col);
/* align: 0 left, 1 centre, 2 right of x. */
void canvas_text_align(canvas *c, int x, int y, const char *s, int scale, int align,
                       rgb col);
/* Text turned 90 degrees anticlockwise (reads bottom to top), centred on
 * (cx, cy): for y-axis labels. */
void canvas_text_vertical(canvas *c, int cx, int cy, const char *s, int scale, rgb col);

/* Sequential colour map, t in [0, 1] (clamped): dark blue-violet through
 * teal and green to yellow, monotone in lightness. */
rgb colormap(double t);

/* An axis maps data values [lo, hi] onto pixels [p0, p1] (p1 < p0 for a
 * y axis), linearly or logarithmically (then lo > 0). */
typedef struct plot_axis {
  double lo, hi;
  int log;
  int p0, p1;
} plot_axis;

double axis_map(const plot_axis *a, double v);
/* Tick values inside [lo, hi]: 1-2-5 steps (linear) or 1-2-5 per decade
 * (log), at most max of them. Returns the count. */
int axis_ticks(const plot_axis *a, double *ticks, int max);
/* Formats a tick value compactly ("0.05", "2", "1e+04"). */
void format_tick(double v, char *buf, size_t len);

/* The frame of a chart: the plot box, ticks and tick labels on the left and
 * bottom axes, the two axis labels and, if grid, light grid lines (draw the
 * data after them). */
void plot_axes(canvas *c, const plot_axis *x, const plot_axis *y, const char *xlabel,
               const char *ylabel, int scale, int grid);

/* A legend: a framed box at (x, y) with one swatch + label per entry.
 * style[i]: 0 filled square, 1 line, 2 dashed line, 3+ marker of shape
 * style-3 with a line. Returns the box height. */
typedef struct legend_entry {
  const char *label;
  rgb col;
  int style;
} legend_entry;
int plot_legend(canvas *c, int x, int y, const legend_entry *e, int n, int scale);
/* Width the legend box of these entries needs. */
int legend_width(const legend_entry *e, int n, int scale);
/* The same entries side by side in one framed row centred on cx, and the
 * width that row needs. */
int legend_row_width(const legend_entry *e, int n, int scale);
void plot_legend_row(canvas *c, int cx, int y, const legend_entry *e, int n, int scale);

/* A vertical colour bar at (x, y) of w x h with labels from `labels` at
 * fractions pos[i] (0 bottom, 1 top) and a caption above it. */
void plot_colorbar(canvas *c, int x, int y, int w, int h, const double *pos,
                   const char *const *labels, int n, const char *caption, int scale);

/* Writes the canvas as an 8-bit RGB PNG, atomically (temp file + rename).
 * Returns 0, or -1 with a message in err. */
int canvas_write_png(const canvas *c, const char *path, char *err, size_t err_len);

#endif
