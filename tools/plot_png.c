/*
 * plot_png.c — see plot_png.h: the canvas, shapes, axes, legends, colour
 * maps and the PNG writer. The text is drawn by plot_font.c.
 */
#define _POSIX_C_SOURCE 200809L
#include "plot_png.h"

#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"
#include "stsa_io.h"

const rgb PLOT_WHITE = {255, 255, 255}, PLOT_BLACK = {20, 20, 20},
          PLOT_GREY = {120, 120, 120}, PLOT_LIGHT = {225, 225, 225},
          PLOT_BLUE = {31, 110, 180}, PLOT_ORANGE = {238, 128, 30},
          PLOT_GREEN = {44, 160, 44}, PLOT_RED = {210, 40, 40};

/* ======================================================================== */
/* Canvas and shapes                                                        */
/* ======================================================================== */

void canvas_init(canvas *c, int w, int h, rgb bg) {
  c->w = w;
  c->h = h;
  c->px = malloc((size_t)w * (size_t)h * 3);
  if (!c->px)
    cli_die("out of memory for a %d x %d picture", w, h);
  canvas_fill(c, 0, 0, w, h, bg);
}

void canvas_free(canvas *c) {
  free(c->px);
  c->px = NULL;
}

void canvas_pixel(canvas *c, int x, int y, rgb col) {
  if (x < 0 || y < 0 || x >= c->w || y >= c->h)
    return;
  uint8_t *p = c->px + ((size_t)y * (size_t)c->w + (size_t)x) * 3;
  p[0] = col.r, p[1] = col.g, p[2] = col.b;
}

void canvas_fill(canvas *c, int x, int y, int w, int h, rgb col) {
  int x0 = x < 0 ? 0 : x, y0 = y < 0 ? 0 : y;
  int x1 = x + w > c->w ? c->w : x + w, y1 = y + h > c->h ? c->h : y + h;
  for (int yy = y0; yy < y1; yy++)
    for (int xx = x0; xx < x1; xx++)
      canvas_pixel(c, xx, yy, col);
}

void canvas_box(canvas *c, int x, int y, int w, int h, int thick, rgb col) {
  canvas_fill(c, x, y, w, thick, col);
  canvas_fill(c, x, y + h - thick, w, thick, col);
  canvas_fill(c, x, y, thick, h, col);
  canvas_fill(c, x + w - thick, y, thick, h, col);
}

void canvas_line(canvas *c, double x0, double y0, double x1, double y1, int thick,
                 int dash, rgb col) {
  double dx = x1 - x0, dy = y1 - y0, len = sqrt(dx * dx + dy * dy);
  int steps = (int)ceil(len * 2) + 1; /* half-pixel steps leave no holes */
  for (int i = 0; i <= steps; i++) {
    double t = (double)i / steps;
    if (dash > 0 && (int)(t * len / dash) % 2)
      continue;
    int x = (int)lround(x0 + t * dx) - thick / 2,
        y = (int)lround(y0 + t * dy) - thick / 2;
    canvas_fill(c, x, y, thick, thick, col);
  }
}

void canvas_marker(canvas *c, int x, int y, int size, int shape, rgb col) {
  int r = size / 2;
  for (int dy = -r; dy <= r; dy++)
    for (int dx = -r; dx <= r; dx++) {
      int in = shape == 0   ? 1
               : shape == 1 ? abs(dx) + abs(dy) <= r
               : shape == 2 ? dx * dx + dy * dy <= r * r + r
                            : 2 * abs(dx) <= dy + r; /* triangle, apex up */
      if (in)
        canvas_pixel(c, x + dx, y + dy, col);
    }
}

/* Anchors of the map, evenly spaced, interpolated linearly in RGB. */
rgb colormap(double t) {
  static const double A[6][3] = {{48, 18, 90},   {52, 78, 140},  {36, 128, 142},
                                 {40, 170, 120}, {130, 205, 70}, {250, 230, 40}};
  if (!(t > 0))
    t = 0;
  if (t > 1)
    t = 1;
  double u = t * 5;
  int i = (int)u < 5 ? (int)u : 4;
  double f = u - i;
  rgb o;
  o.r = (uint8_t)lround(A[i][0] + f * (A[i + 1][0] - A[i][0]));
  o.g = (uint8_t)lround(A[i][1] + f * (A[i + 1][1] - A[i][1]));
  o.b = (uint8_t)lround(A[i][2] + f * (A[i + 1][2] - A[i][2]));
  return o;
}

/* ======================================================================== */
/* Axes, legends, colour bars                                               */
/* ======================================================================== */

double axis_map(const plot_axis *a, double v) {
  double f = a->log ? (log10(v) - log10(a->lo)) / (log10(a->hi) - log10(a->lo))
                    : (v - a->lo) / (a->hi - a->lo);
  return a->p0 + f * (a->p1 - a->p0);
}

/* The smallest 1-2-5 step that gives at most max ticks. */
static int linear_ticks(const plot_axis *a, double *ticks, int max) {
  static const double MULT[3] = {1, 2, 5};
  const double span = a->hi - a->lo;
  if (!(span > 0) || max < 2)
    return 0;
  for (double e = floor(log10(span / max)); e < 300; e++)
    for (int m = 0; m < 3; m++) {
      const double step = MULT[m] * pow(10, e);
      if (span / step > max - 1)
        continue;
      int n = 0;
      for (double k = ceil(a->lo / step - 1e-9);
           n < max && k * step <= a->hi + 1e-9 * step; k++)
        ticks[n++] = fabs(k) < 0.5 ? 0.0 : k * step; /* no "-0" */
      return n;
    }
  return 0;
}

/* Candidates per decade: 1, 2, 5; if too many, decades only; if still too
 * many, every k-th decade. */
static int log_ticks(const plot_axis *a, double *ticks, int max) {
  static const double MULT[3] = {1, 2, 5};
  const int e0 = (int)floor(log10(a->lo) + 1e-9), e1 = (int)ceil(log10(a->hi) - 1e-9);
  for (int pass = 0; pass < 3; pass++) {
    const int mults = pass == 0 ? 3 : 1;
    const int stride = pass < 2 ? 1 : 1 + (e1 - e0) / (max > 1 ? max - 1 : 1);
    int n = 0;
    for (int e = e0; e <= e1; e += stride)
      for (int m = 0; m < mults; m++) {
        double v = MULT[m] * pow(10, e);
        if (v < a->lo * (1 - 1e-9) || v > a->hi * (1 + 1e-9))
          continue;
        if (n < max)
          ticks[n] = v;
        n++;
      }
    if (n <= max)
      return n;
  }
  return 0;
}

int axis_ticks(const plot_axis *a, double *ticks, int max) {
  return a->log ? log_ticks(a, ticks, max) : linear_ticks(a, ticks, max);
}

void format_tick(double v, char *buf, size_t len) {
  if (fabs(v) < 1e-12)
    snprintf(buf, len, "0");
  else
    snprintf(buf, len, "%.4g", v);
}

void plot_axes(canvas *c, const plot_axis *x, const plot_axis *y, const char *xlabel,
               const char *ylabel, int scale, int grid) {
  /* either axis may run in either direction (a matrix has row 0 on top) */
  const int left = x->p0 < x->p1 ? x->p0 : x->p1, right = x->p0 < x->p1 ? x->p1 : x->p0;
  const int top = y->p0 < y->p1 ? y->p0 : y->p1, bottom = y->p0 < y->p1 ? y->p1 : y->p0;
  const int tick = 3 * scale, gap = 2 * scale + 2;
  double t[32];
  char lab[32];
  int nx = axis_ticks(x, t, 10);
  for (int i = 0; i < nx; i++) {
    int px = (int)lround(axis_map(x, t[i]));
    if (grid)
      canvas_fill(c, px, top, 1, bottom - top, PLOT_LIGHT);
    canvas_fill(c, px, bottom, 1, tick, PLOT_BLACK);
    format_tick(t[i], lab, sizeof lab);
    canvas_text_align(c, px, bottom + tick + gap, lab, scale, 1, PLOT_BLACK);
  }
  int ny = axis_ticks(y, t, 8), label_w = 0;
  for (int i = 0; i < ny; i++) {
    int py = (int)lround(axis_map(y, t[i]));
    if (grid)
      canvas_fill(c, left, py, right - left, 1, PLOT_LIGHT);
    canvas_fill(c, left - tick, py, tick, 1, PLOT_BLACK);
    format_tick(t[i], lab, sizeof lab);
    int w = text_width(lab, scale);
    label_w = w > label_w ? w : label_w;
    canvas_text_align(c, left - tick - gap, py - text_height(scale) / 2, lab, scale, 2,
                      PLOT_BLACK);
  }
  canvas_box(c, left, top, right - left + 1, bottom - top + 1, 1, PLOT_BLACK);
  int below = bottom + tick + 2 * gap + text_height(scale) + 2 * scale;
  canvas_text_align(c, (left + right) / 2, below, xlabel, scale, 1, PLOT_BLACK);
  int beside = left - tick - 2 * gap - label_w - text_height(scale) / 2 - 2 * scale;
  canvas_text_vertical(c, beside, (top + bottom) / 2, ylabel, scale, PLOT_BLACK);
}

int legend_width(const legend_entry *e, int n, int scale) {
  int w = 0;
  for (int i = 0; i < n; i++) {
    int tw = text_width(e[i].label, scale);
    w = tw > w ? tw : w;
  }
  return w + 22 * scale + 8;
}

/* One swatch at (sx, ty) of width sw, for a text line of height text_height. */
static void legend_swatch(canvas *c, int sx, int ty, int sw, const legend_entry *e,
                          int scale) {
  const int mid = ty + text_height(scale) / 2;
  if (e->style == 0) {
    canvas_fill(c, sx, ty, sw, text_height(scale), e->col);
    canvas_box(c, sx, ty, sw, text_height(scale), 1, PLOT_GREY);
    return;
  }
  canvas_line(c, sx, mid, sx + sw, mid, scale, e->style == 2 ? 3 * scale : 0, e->col);
  if (e->style >= 3)
    canvas_marker(c, sx + sw / 2, mid, 3 * scale + 3, e->style - 3, e->col);
}

int plot_legend(canvas *c, int x, int y, const legend_entry *e, int n, int scale) {
  const int line_h = text_height(scale) + 5 * scale, pad = 4 + scale, sw = 14 * scale;
  int w = legend_width(e, n, scale), h = n * line_h + 2 * pad - 5 * scale;
  canvas_fill(c, x, y, w, h, PLOT_WHITE);
  canvas_box(c, x, y, w, h, 1, PLOT_GREY);
  for (int i = 0; i < n; i++) {
    int ty = y + pad + i * line_h;
    legend_swatch(c, x + pad, ty, sw, &e[i], scale);
    canvas_text(c, x + pad + sw + 6 * scale, ty, e[i].label, scale, PLOT_BLACK);
  }
  return h;
}

int legend_row_width(const legend_entry *e, int n, int scale) {
  const int pad = 4 + scale, sw = 14 * scale, sep = 12 * scale;
  int w = 2 * pad - sep;
  for (int i = 0; i < n; i++)
    w += sw + 6 * scale + text_width(e[i].label, scale) + sep;
  return w;
}

void plot_legend_row(canvas *c, int cx, int y, const legend_entry *e, int n, int scale) {
  const int pad = 4 + scale, sw = 14 * scale, sep = 12 * scale;
  const int w = legend_row_width(e, n, scale);
  int x = cx - w / 2, h = text_height(scale) + 2 * pad;
  canvas_fill(c, x, y, w, h, PLOT_WHITE);
  canvas_box(c, x, y, w, h, 1, PLOT_GREY);
  x += pad;
  for (int i = 0; i < n; i++) {
    legend_swatch(c, x, y + pad, sw, &e[i], scale);
    x += sw + 6 * scale;
    canvas_text(c, x, y + pad, e[i].label, scale, PLOT_BLACK);
    x += text_width(e[i].label, scale) + sep;
  }
}

void plot_colorbar(canvas *c, int x, int y, int w, int h, const double *pos,
                   const char *const *labels, int n, const char *caption, int scale) {
  for (int row = 0; row < h; row++)
    canvas_fill(c, x, y + row, w, 1, colormap(1.0 - (double)row / (h > 1 ? h - 1 : 1)));
  canvas_box(c, x - 1, y - 1, w + 2, h + 2, 1, PLOT_BLACK);
  for (int i = 0; i < n; i++) {
    int py = y + (int)lround((1.0 - pos[i]) * (h - 1));
    canvas_fill(c, x + w, py, 3 * scale, 1, PLOT_BLACK);
    canvas_text(c, x + w + 4 * scale + 2, py - text_height(scale) / 2, labels[i], scale,
                PLOT_BLACK);
  }
  canvas_text_align(c, x + w / 2, y - text_height(scale) - 6 * scale, caption, scale, 1,
                    PLOT_BLACK);
}

/* ======================================================================== */
/* PNG                                                                      */
/* ======================================================================== */

typedef struct png_buf {
  unsigned char *data;
  size_t len, cap;
  int oom;
} png_buf;

static void png_buf_write(png_structp png, png_bytep bytes, png_size_t n) {
  png_buf *b = png_get_io_ptr(png);
  if (b->oom)
    return;
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 65536;
    while (cap < b->len + n)
      cap *= 2;
    unsigned char *p = realloc(b->data, cap);
    if (!p) {
      b->oom = 1;
      return;
    }
    b->data = p, b->cap = cap;
  }
  memcpy(b->data + b->len, bytes, n);
  b->len += n;
}

static void png_buf_flush(png_structp png) { (void)png; }

/* Encodes into memory; libpng reports errors by longjmp, so nothing that
 * must be freed is created between setjmp and the end but the buffer, which
 * the caller owns. */
static int encode_png(const canvas *c, png_buf *out) {
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
  if (!png)
    return -1;
  png_infop info = png_create_info_struct(png);
  if (!info) {
    png_destroy_write_struct(&png, NULL);
    return -1;
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return -1;
  }
  png_set_write_fn(png, out, png_buf_write, png_buf_flush);
  png_set_IHDR(png, info, (png_uint_32)c->w, (png_uint_32)c->h, 8, PNG_COLOR_TYPE_RGB,
               PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (int y = 0; y < c->h; y++)
    png_write_row(png, c->px + (size_t)y * (size_t)c->w * 3);
  png_write_end(png, NULL);
  png_destroy_write_struct(&png, &info);
  return out->oom ? -1 : 0;
}

int canvas_write_png(const canvas *c, const char *path, char *err, size_t err_len) {
  png_buf b = {NULL, 0, 0, 0};
  if (encode_png(c, &b) != 0) {
    free(b.data);
    snprintf(err, err_len, "cannot encode the PNG (out of memory?)");
    return -1;
  }
  stsa_io_chunk chunk = {b.data, b.len};
  stsa_status st = stsa_io_atomic_write(path, &chunk, 1, err, err_len);
  free(b.data);
  return st == STSA_OK ? 0 : -1;
}
