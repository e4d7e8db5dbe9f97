/*
 * plot_attention.c — `stsa plot attention`: softmax(q.k/sqrt(D)) of one
 * query over all keys, in double precision, as one heat map per frame.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_convert.h"
#include "cli_options.h"
#include "cli_util.h"
#include "plot_cmd.h"
#include "run_input.h"

typedef struct attn_opts {
  run_input_opts in;
  run_geo_opts geo;
  int64_t head, batch, query, qf, qy, qx;
  int linear;
  const char *out;
} attn_opts;

/* "--query I" (a native token index) or "--query F,Y,X" (a video token). */
static void set_query(void *base, const char *name, const char *s) {
  attn_opts *o = base;
  long long a, b, c;
  char tail;
  (void)name;
  if (sscanf(s, "%lld,%lld,%lld%c", &a, &b, &c, &tail) == 3) {
    if (a < 0 || b < 0 || c < 0)
      cli_die("--query %s: frame, y and x must be >= 0", s);
    o->qf = a, o->qy = b, o->qx = c, o->query = -1;
  } else if (sscanf(s, "%lld%c", &a, &tail) == 1 && a >= 0) {
    o->query = a;
  } else {
    cli_die("--query expects a token index I or a video position F,Y,X, got '%s'", s);
  }
}

static const cli_opt ATTN_OPTIONS[] = {
    {.name = "--head", .metavar = "H", CLI_I64(attn_opts, head, 0, INT32_MAX)},
    {.name = "--batch", .metavar = "B", CLI_I64(attn_opts, batch, 0, INT32_MAX)},
    {.name = "--query", .metavar = "I|F,Y,X", CLI_CALL(set_query)},
    {.name = "--linear", CLI_FLAG(attn_opts, linear)},
    {.name = "--out", .metavar = "FILE", CLI_STR(attn_opts, out)},
    {0}};

static void parse_attn(int argc, char **argv, attn_opts *o) {
  *o = (attn_opts){.head = -1, .query = -2};
  run_input_defaults(&o->in);
  run_geo_defaults(&o->geo);
  const cli_opt_set sets[3] = {
      {RUN_INPUT_OPTIONS, &o->in}, {RUN_GEO_OPTIONS, &o->geo}, {ATTN_OPTIONS, o}};
  plot_parse("attention", argc, argv, sets, 3);
  plot_need_out(o->out, "attention");
  if (o->head < 0)
    cli_die("plot attention: --head H is required");
  if (o->query == -2)
    cli_die("plot attention: --query I (token index) or --query F,Y,X is required");
}

/* First native index of the video tokens. */
static int64_t video_start(const stsa_geometry *g) {
  return g->text_pos == STSA_TEXT_PREFIX ? g->text : 0;
}

/* Row (b, s, h) of t as doubles. */
static void load_row(const stsa_tensor *t, int64_t b, int64_t s, int64_t h, float *tmp,
                     double *out) {
  cli_load_row_f32(t, b, s, h, tmp);
  for (int64_t d = 0; d < t->shape[3]; d++)
    out[d] = tmp[d];
}

/* w[j] = softmax_j(q_i . k_j / sqrt(D)) in double precision. */
static double *attention_row(const run_qkv *x, int64_t b, int64_t i, int64_t h) {
  const int64_t N = x->t[0].shape[1], D = x->t[0].shape[3];
  double *w = malloc(sizeof *w * (size_t)N), *q = malloc(sizeof *q * (size_t)(2 * D));
  float *tmp = malloc(sizeof *tmp * (size_t)D);
  if (!w || !q || !tmp)
    cli_die("out of memory");
  double *k = q + D, mx = -INFINITY, sum = 0;
  load_row(&x->t[0], b, i, h, tmp, q);
  for (int64_t j = 0; j < N; j++) {
    load_row(&x->t[1], b, j, h, tmp, k);
    double dot = 0;
    for (int64_t d = 0; d < D; d++)
      dot += q[d] * k[d];
    w[j] = dot / sqrt((double)D);
    mx = w[j] > mx ? w[j] : mx;
  }
  for (int64_t j = 0; j < N; j++)
    sum += w[j] = exp(w[j] - mx);
  for (int64_t j = 0; j < N; j++)
    w[j] /= sum;
  free(q);
  free(tmp);
  return w;
}

/* Colour scale of the maps: log10 over four decades below the largest video
 * weight (attention spans many orders of magnitude), or linear from 0. */
typedef struct heat_scale {
  double lo, hi;
  int log;
} heat_scale;

static double heat_t(const heat_scale *s, double v) {
  if (s->log)
    return v <= s->lo ? 0 : (log10(v) - log10(s->lo)) / (log10(s->hi) - log10(s->lo));
  return (v - s->lo) / (s->hi - s->lo);
}

static void heat_colorbar(canvas *c, int x, int y, int h, const heat_scale *s) {
  double pos[8];
  char buf[8][24];
  const char *labels[8];
  int n = 0;
  if (s->log) {
    for (int e = (int)ceil(log10(s->lo) - 1e-9);
         e <= (int)floor(log10(s->hi) + 1e-9) && n < 8; e++) {
      pos[n] = heat_t(s, pow(10, e));
      snprintf(buf[n], sizeof buf[n], "1e%d", e);
      n++;
    }
  } else {
    plot_axis a = {s->lo, s->hi, 0, 0, 1};
    double t[8];
    n = axis_ticks(&a, t, 6);
    for (int i = 0; i < n; i++) {
      pos[i] = heat_t(s, t[i]);
      format_tick(t[i], buf[i], sizeof buf[i]);
    }
  }
  for (int i = 0; i < n; i++)
    labels[i] = buf[i];
  plot_colorbar(c, x, y, 22, h, pos, labels, n, s->log ? "weight (log)" : "weight", TS);
}

/* Map geometry: s pixels per token, cols maps per row. */
typedef struct strip_layout {
  int s, cols, rows, map_w, map_h, cell_w, cell_h, left, top;
} strip_layout;

static strip_layout strip_layout_for(const stsa_geometry *g) {
  strip_layout L;
  int64_t side = g->height > g->width ? g->height : g->width;
  L.s = (int)(180 / side);
  L.s = L.s < 1 ? 1 : L.s > 24 ? 24 : L.s;
  L.map_w = L.s * (int)g->width, L.map_h = L.s * (int)g->height;
  L.cell_w = (L.map_w > 150 ? L.map_w : 150) + 24;
  L.cell_h = L.map_h + 40;
  L.cols = (int)(1150 / L.cell_w);
  L.cols = L.cols < 1 ? 1 : (L.cols > g->frames ? (int)g->frames : L.cols);
  L.rows = (int)((g->frames + L.cols - 1) / L.cols);
  L.left = 30, L.top = 110;
  return L;
}

static void draw_frame_map(canvas *c, const strip_layout *L, const stsa_geometry *g,
                           const double *w, const heat_scale *hs, int64_t f,
                           int64_t query) {
  const int64_t P = g->height * g->width, v0 = video_start(g);
  const int col = (int)(f % L->cols), row = (int)(f / L->cols);
  const int x = L->left + col * L->cell_w, y = L->top + row * L->cell_h;
  double mass = 0;
  for (int64_t p = 0; p < P; p++) {
    double v = w[v0 + f * P + p];
    mass += v;
    canvas_fill(c, x + (int)(p % g->width) * L->s, y + (int)(p / g->width) * L->s, L->s,
                L->s, colormap(heat_t(hs, v)));
  }
  canvas_box(c, x - 1, y - 1, L->map_w + 2, L->map_h + 2, 1, PLOT_GREY);
  int64_t qv = query - v0;
  if (qv >= f * P && qv < (f + 1) * P) {
    /* a red ring at least 13 pixels wide, edged in white, so that it shows
     * on any colour even when a token is a pixel or two */
    int cx = x + (int)(qv % P % g->width) * L->s + L->s / 2;
    int cy = y + (int)(qv % P / g->width) * L->s + L->s / 2;
    int half = L->s / 2 + 4 > 6 ? L->s / 2 + 4 : 6;
    canvas_box(c, cx - half - 1, cy - half - 1, 2 * half + 3, 2 * half + 3, 1,
               PLOT_WHITE);
    canvas_box(c, cx - half, cy - half, 2 * half + 1, 2 * half + 1, 2, PLOT_RED);
    canvas_box(c, cx - half + 2, cy - half + 2, 2 * half - 3, 2 * half - 3, 1,
               PLOT_WHITE);
  }
  char lab[48];
  snprintf(lab, sizeof lab, "f%lld: %.1f%%", (long long)f, 100.0 * mass);
  canvas_text(c, x, y + L->map_h + 6, lab, TS, PLOT_BLACK);
}

static void attn_titles(canvas *c, const attn_opts *o, const stsa_geometry *g,
                        int64_t query, double text_mass) {
  char t[256], sub[256];
  int64_t v = query - video_start(g), P = g->height * g->width;
  if (v >= 0 && v < g->frames * P)
    snprintf(t, sizeof t,
             "Attention of query %lld (frame %lld, y %lld, x %lld), head %lld",
             (long long)query, (long long)(v / P), (long long)(v % P / g->width),
             (long long)(v % P % g->width), (long long)o->head);
  else
    snprintf(t, sizeof t, "Attention of query %lld (a text token), head %lld",
             (long long)query, (long long)o->head);
  canvas_text_align(c, c->w / 2, 14, t, TS, 1, PLOT_BLACK);
  snprintf(sub, sizeof sub,
           "softmax(q.k/sqrt(D)) over all %lld keys, one %lld x %lld map "
           "per frame (y down, x right)",
           (long long)stsa_geometry_tokens(g), (long long)g->height, (long long)g->width);
  canvas_text_align(c, c->w / 2, 40, sub, TS, 1, PLOT_GREY);
  if (g->text)
    snprintf(sub, sizeof sub,
             "under each map: the frame's share of the weight; the %lld "
             "text keys hold %.2f%%",
             (long long)g->text, 100.0 * text_mass);
  else
    snprintf(sub, sizeof sub, "under each map: the frame's share of the weight");
  canvas_text_align(c, c->w / 2, 62, sub, TS, 1, PLOT_GREY);
}

/* Native index of the query from --query I or F,Y,X. */
static int64_t resolve_query(const attn_opts *o, const stsa_geometry *g, int64_t N) {
  if (o->query >= 0) {
    if (o->query >= N)
      cli_die("--query %lld is past the last token (N = %lld)", (long long)o->query,
              (long long)N);
    return o->query;
  }
  if (o->qf >= g->frames || o->qy >= g->height || o->qx >= g->width)
    cli_die("--query %lld,%lld,%lld is outside the %lld x %lld x %lld video",
            (long long)o->qf, (long long)o->qy, (long long)o->qx, (long long)g->frames,
            (long long)g->height, (long long)g->width);
  return video_start(g) + (o->qf * g->height + o->qy) * g->width + o->qx;
}

int plot_attention(int argc, char **argv) {
  attn_opts o;
  parse_attn(argc, argv, &o);
  run_qkv x;
  run_load_qkv(&o.in, &x);
  for (int i = 0; i < x.n_ids; i++)
    plot_add_input(x.id_names[i], o.in.in ? o.in.in : o.in.npy[i], x.ids[i]);
  const stsa_tensor *q = &x.t[0];
  stsa_svg_config cfg;
  run_resolve_config(&o.geo, q->shape[2], q->shape[3], &cfg, NULL, 0);
  run_check_tokens(&cfg, &x, o.in.layout);
  const stsa_geometry *g = &cfg.geometry;
  if (o.head >= q->shape[2])
    cli_die("--head %lld: the tensors have %lld heads", (long long)o.head,
            (long long)q->shape[2]);
  if (o.batch >= q->shape[0])
    cli_die("--batch %lld: the tensors have batch %lld", (long long)o.batch,
            (long long)q->shape[0]);
  const int64_t N = q->shape[1], query = resolve_query(&o, g, N);
  double *w = attention_row(&x, o.batch, query, o.head);

  const int64_t v0 = video_start(g), L = g->frames * g->height * g->width;
  double vmax = 0, vmin = INFINITY, video_mass = 0;
  for (int64_t j = v0; j < v0 + L; j++) {
    vmax = w[j] > vmax ? w[j] : vmax;
    vmin = w[j] < vmin ? w[j] : vmin;
    video_mass += w[j];
  }
  heat_scale hs = {0, vmax > 0 ? vmax : 1, !o.linear};
  if (hs.log)
    hs.lo = fmax(hs.hi * 1e-4, vmin > 0 ? vmin : hs.hi * 1e-4);
  if (hs.log && hs.lo >= hs.hi)
    hs.lo = hs.hi / 10;

  strip_layout lay = strip_layout_for(g);
  int width = lay.left + lay.cols * lay.cell_w + 200;
  width = width < 1100 ? 1100 : width;
  canvas c;
  canvas_init(&c, width, lay.top + lay.rows * lay.cell_h + 60, PLOT_WHITE);
  attn_titles(&c, &o, g, query, 1.0 - video_mass);
  for (int64_t f = 0; f < g->frames; f++)
    draw_frame_map(&c, &lay, g, w, &hs, f, query);
  const int bar_x = lay.left + lay.cols * lay.cell_w + 70; /* room for the caption */
  const int bar_h = lay.rows * lay.cell_h - 40 > 160 ? lay.rows * lay.cell_h - 40 : 160;
  heat_colorbar(&c, bar_x, lay.top + 20, bar_h, &hs);
  legend_entry leg = {"query", PLOT_RED, 0};
  plot_legend(&c, lay.left, c.h - 40, &leg, 1, TS);
  plot_save(&c, o.out);
  canvas_free(&c);
  free(w);
  run_free_qkv(&x);
  return 0;
}
