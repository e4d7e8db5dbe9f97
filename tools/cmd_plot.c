/*
 * cmd_plot.c — `stsa plot plan|attention|kinds|speedup`: PNG pictures of a
 * head's tile plan, of one query's attention over the video, of the head
 * kinds in `stsa run` reports and of speed-up against density from
 * `stsa bench --json` lines. Drawing primitives are in plot_png.c.
 */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_files.h"
#include "cli_util.h"
#include "commands.h"
#include "core/convert.h"
#include "plot_png.h"
#include "run_input.h"

/* Text scale of every picture: the 5x7 font doubled reads well at 100%. */
enum { TS = 2 };

static void plot_usage(void) {
  printf(
      "usage: stsa plot plan <geometry> [--kind spatial|temporal]\n"
      "                      --out plan.png\n"
      "       stsa plot attention <input> <geometry> --head H --query I|F,Y,X\n"
      "                      [--batch B] [--linear] --out attn.png\n"
      "       stsa plot kinds --report R.json [--report R2.json ...] --out kinds.png\n"
      "       stsa plot speedup --bench B.jsonl [--bench ...] --out speedup.png\n"
      "<geometry>: --frames F --height Hp --width Wp [--text N --text-pos prefix|suffix\n"
      "            --text-real M] [--preset NAME] [--density D] [--sink-frames K]\n"
      "            [--tile T | --q-tile T --kv-tile T] (default: the session's tiles)\n"
      "<input>:    --in QKV.safetensors [--q/--k/--v NAME] or --in-q/--in-k/--in-v "
      "X.npy,\n"
      "            and --layout bshd|bhsd|shd\n"
      "  plan       empty/partial/full tiles of one head's SVG mask: frame-major order\n"
      "             beside position-major queries with sink-first keys\n"
      "  attention  softmax(q.k/sqrt(D)) of one query as one heat map per frame\n"
      "  kinds      the kind each head chose, one row per report's layer\n"
      "  speedup    \"speedup\" against \"density\" per \"mode\", and the ideal "
      "1/density\n"
      "See docs/cli.md.\n");
}

/* The input files of this picture (device, inode), so --out never replaces
 * one; recorded as they are opened. */
static cli_file_id inputs[64];
static const char *input_names[64];
static int n_inputs;

static void add_input(const char *flag, const char *path, cli_file_id id) {
  if (n_inputs == 64)
    return;
  char *name = malloc(strlen(flag) + strlen(path) + 2);
  if (!name)
    cli_die("out of memory");
  sprintf(name, "%s %s", flag, path);
  inputs[n_inputs] = id, input_names[n_inputs++] = name;
}

static stsa_status write_png(const char *path, void *arg, char *err, size_t err_len) {
  return canvas_write_png(arg, path, err, err_len) == 0 ? STSA_OK : STSA_ERR_IO;
}

/* --out as `stsa run` writes its outputs: checked (a regular file, not an
 * input), staged and renamed into place. */
static void save(const canvas *c, const char *path) {
  cli_output out = {.flag = "--out", .path = path};
  cli_outputs_prepare(&out, 1, inputs, input_names, n_inputs);
  cli_output_stage(&out, 1, 0, write_png, (void *)(uintptr_t)c);
  cli_outputs_commit(&out, 1);
  free(out.staging);
  free(out.backup);
}

static void need_out(const char *out, const char *what) {
  if (!out)
    cli_die("plot %s: --out FILE.png is required", what);
}

/* ======================================================================== */
/* plot plan                                                                */
/* ======================================================================== */

static const rgb TILE_COL[3] = {{236, 236, 236}, {238, 128, 30}, {31, 110, 180}};

/* Counts of each tile kind over the plan of head 0. */
typedef struct tile_counts {
  int64_t n[3];
} tile_counts;

/* Pixels of a panel for a grid of qt x kt tiles in a size x size square:
 * the longer side gets about `size` pixels; whole pixels per tile when a tile
 * gets at least 4, so that small grids stay crisp. */
static void panel_extent(int64_t qt, int64_t kt, int size, int *pw, int *ph) {
  const int64_t grid = qt > kt ? qt : kt;
  const int64_t cell = size / grid >= 4 ? size / grid : 0;
  *pw = cell ? (int)(cell * kt) : (int)((int64_t)size * kt / grid);
  *ph = cell ? (int)(cell * qt) : (int)((int64_t)size * qt / grid);
}

/* One panel: the tile grid of head 0 drawn into pw x ph pixels at (x, y).
 * Each pixel covers a range of tiles (one tile, or several when the grid is
 * larger than the panel) and blends their colours, so a mixed region looks
 * mixed rather than full. */
static void draw_plan_panel(canvas *c, const stsa_plan *plan, int64_t qt, int64_t kt,
                            int x, int y, int pw, int ph) {
  for (int py = 0; py < ph; py++) {
    int64_t q0 = (int64_t)py * qt / ph, q1 = (int64_t)(py + 1) * qt / ph;
    q1 = q1 > q0 ? q1 : q0 + 1;
    for (int px = 0; px < pw; px++) {
      int64_t k0 = (int64_t)px * kt / pw, k1 = (int64_t)(px + 1) * kt / pw;
      k1 = k1 > k0 ? k1 : k0 + 1;
      double sum[3] = {0, 0, 0}, n = 0;
      for (int64_t a = q0; a < q1; a++)
        for (int64_t b = k0; b < k1; b++, n++) {
          int kind = stsa_plan_tile_kind(plan, 0, a, b);
          rgb col = TILE_COL[kind < 0 || kind > 2 ? 0 : kind];
          sum[0] += col.r, sum[1] += col.g, sum[2] += col.b;
        }
      rgb col = {(uint8_t)(sum[0] / n), (uint8_t)(sum[1] / n), (uint8_t)(sum[2] / n)};
      canvas_pixel(c, x + px, y + py, col);
    }
  }
  /* separators between tiles once tiles are big enough to tell apart */
  if (pw / kt >= 6)
    for (int64_t i = 1; i < kt; i++)
      canvas_fill(c, x + (int)(i * pw / kt), y, 1, ph, PLOT_WHITE);
  if (ph / qt >= 6)
    for (int64_t i = 1; i < qt; i++)
      canvas_fill(c, x, y + (int)(i * ph / qt), pw, 1, PLOT_WHITE);
}

static void count_tiles(const stsa_plan *plan, int64_t qt, int64_t kt, tile_counts *cnt) {
  memset(cnt, 0, sizeof *cnt);
  for (int64_t a = 0; a < qt; a++)
    for (int64_t b = 0; b < kt; b++) {
      int kind = stsa_plan_tile_kind(plan, 0, a, b);
      cnt->n[kind < 0 || kind > 2 ? 0 : kind]++;
    }
}

typedef struct plan_opts {
  run_geo_opts geo;
  stsa_head_kind kind;
  const char *out;
} plan_opts;

static void parse_plan(int argc, char **argv, plan_opts *o) {
  *o = (plan_opts){.kind = STSA_HEAD_SPATIAL};
  run_geo_defaults(&o->geo);
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i];
    if (run_parse_geo_opt(argc, argv, &i, &o->geo))
      continue;
    if (!strcmp(a, "--kind"))
      o->kind = run_parse_kind(argc, argv, &i);
    else if (!strcmp(a, "--out"))
      o->out = cli_str(argc, argv, &i);
    else {
      cli_help_version(a, plot_usage);
      cli_unknown("plot plan", a, "stsa plot --help");
    }
  }
  need_out(o->out, "plan");
}

/* A one-head plan of mask m in the given orders, with the session's tiles. */
static stsa_plan *build_plan(stsa_ctx *ctx, const stsa_svg_config *cfg,
                             const stsa_svg_windows *w, const stsa_mask *m, stsa_order qo,
                             stsa_order ko) {
  const int64_t N = stsa_geometry_tokens(&cfg->geometry);
  const stsa_mask *masks[1] = {m};
  stsa_plan_desc d = {N,         N,          1, masks, &cfg->geometry, qo, ko,
                      w->q_tile, w->kv_tile, 0, NULL};
  stsa_plan *plan;
  cli_check(stsa_plan_build(ctx, &d, &plan), ctx, "building the plan");
  return plan;
}

static void panel_stats(char *line1, char *line2, size_t len, const tile_counts *t) {
  double all = (double)(t->n[0] + t->n[1] + t->n[2]);
  snprintf(line1, len,
           "visits %.1f%% of the tiles:", 100.0 * (double)(t->n[1] + t->n[2]) / all);
  snprintf(line2, len, "%.1f%% full, %.1f%% partial", 100.0 * (double)t->n[2] / all,
           100.0 * (double)t->n[1] / all);
}

static void plan_title(canvas *c, const plan_opts *o, const stsa_svg_config *cfg,
                       const stsa_svg_windows *w, double kept) {
  const stsa_geometry *g = &cfg->geometry;
  char t[256], sub[256], win[96];
  snprintf(t, sizeof t, "Tile plan of one %s head, %s order vs permuted",
           stsa_head_kind_name(o->kind), "frame-major");
  if (o->kind == STSA_HEAD_SPATIAL)
    snprintf(win, sizeof win, "frames within +-%lld", (long long)w->frame_window);
  else
    snprintf(win, sizeof win, "position-major band +-%lld tokens", (long long)w->band);
  /* the plan rounds q tiles up to a multiple of 6, the kernel's row group */
  char text[64] = "no text";
  if (g->text)
    snprintf(text, sizeof text, "%lld %s text", (long long)g->text,
             g->text_pos == STSA_TEXT_SUFFIX ? "suffix" : "prefix");
  snprintf(sub, sizeof sub,
           "%lld x %lld x %lld video + %s = %lld tokens, tiles of %d q x "
           "%d kv",
           (long long)g->frames, (long long)g->height, (long long)g->width, text,
           (long long)stsa_geometry_tokens(g), (w->q_tile + 5) / 6 * 6, w->kv_tile);
  canvas_text_align(c, c->w / 2, 12, t, TS, 1, PLOT_BLACK);
  canvas_text_align(c, c->w / 2, 36, sub, TS, 1, PLOT_GREY);
  snprintf(sub, sizeof sub,
           "mask: %s + %lld sink frame(s) + text; target %.2f, kept %.3f", win,
           (long long)cfg->sink_frames, cfg->density, kept);
  canvas_text_align(c, c->w / 2, 58, sub, TS, 1, PLOT_GREY);
}

/* One side of the picture: caption, tile grid, axes and tile shares. */
static void draw_plan_side(canvas *c, const stsa_plan *plan, const stsa_plan_stats *st,
                           int x, int y, int pw, int ph, const char *caption) {
  tile_counts cnt;
  draw_plan_panel(c, plan, st->q_tiles, st->kv_tiles, x, y, pw, ph);
  count_tiles(plan, st->q_tiles, st->kv_tiles, &cnt);
  plot_axis ax = {0, (double)st->kv_tiles, 0, x, x + pw};
  plot_axis ay = {0, (double)st->q_tiles, 0, y, y + ph};
  plot_axes(c, &ax, &ay, "kv tile", "q tile", TS, 0);
  canvas_text_align(c, x + pw / 2, y - 26, caption, TS, 1, PLOT_BLACK);
  char s[2][96];
  panel_stats(s[0], s[1], sizeof s[0], &cnt);
  canvas_text_align(c, x + pw / 2, y + ph + 62, s[0], TS, 1, PLOT_BLACK);
  canvas_text_align(c, x + pw / 2, y + ph + 84, s[1], TS, 1, PLOT_BLACK);
}

static int plot_plan(int argc, char **argv) {
  plan_opts o;
  parse_plan(argc, argv, &o);
  stsa_svg_config cfg;
  run_resolve_config(&o.geo, 1, 64, &cfg, NULL, 0);
  stsa_ctx *ctx;
  ctx = cli_ctx_create();
  stsa_svg_windows w;
  run_session_windows(ctx, &cfg, &w);
  /* the same mask in both panels: native order and the permuted one */
  stsa_mask *mask = run_kind_mask(ctx, &cfg, o.kind, NULL, NULL);
  stsa_plan *plans[2] = {
      build_plan(ctx, &cfg, &w, mask, STSA_ORDER_NATIVE, STSA_ORDER_NATIVE),
      build_plan(ctx, &cfg, &w, mask, STSA_ORDER_POSITION_MAJOR, STSA_ORDER_SINK_FIRST)};
  stsa_plan_stats st;
  cli_check(stsa_plan_get_stats(plans[0], &st), NULL, "plan statistics");
  const double kept = (double)st.pairs_kept / (double)st.pairs_total;
  int pw, ph;
  panel_extent(st.q_tiles, st.kv_tiles, 480, &pw, &ph);

  enum { GAP = 130, TOP = 130, MARGIN = 110 };
  canvas c;
  const int need = 2 * MARGIN + 2 * pw + GAP - 40, width = need > 1100 ? need : 1100;
  const int LEFT = MARGIN + (width - need) / 2; /* centre small panels */
  canvas_init(&c, width, TOP + ph + 180, PLOT_WHITE);
  plan_title(&c, &o, &cfg, &w, kept);
  /* the caption of the order SVG runs this kind in is marked */
  static const char *const CAPTION[2][2] = {
      {"native: frame-major q and kv (SVG)", "position-major q, sink-first kv"},
      {"native: frame-major q and kv", "position-major q, sink-first kv (SVG)"}};
  for (int p = 0; p < 2; p++)
    draw_plan_side(&c, plans[p], &st, LEFT + p * (pw + GAP), TOP, pw, ph,
                   CAPTION[o.kind == STSA_HEAD_TEMPORAL][p]);
  legend_entry leg[3] = {{"empty (skipped)", TILE_COL[0], 0},
                         {"partial (mask applied)", TILE_COL[1], 0},
                         {"full (mask-free)", TILE_COL[2], 0}};
  plot_legend_row(&c, c.w / 2, c.h - 50, leg, 3, TS);
  save(&c, o.out);
  canvas_free(&c);
  stsa_plan_free(plans[0]);
  stsa_plan_free(plans[1]);
  stsa_mask_free(mask);
  stsa_ctx_free(ctx);
  return 0;
}

/* ======================================================================== */
/* plot attention                                                           */
/* ======================================================================== */

typedef struct attn_opts {
  run_input_opts in;
  run_geo_opts geo;
  int64_t head, batch, query, qf, qy, qx;
  int linear;
  const char *out;
} attn_opts;

/* "--query I" (a native token index) or "--query F,Y,X" (a video token). */
static void parse_query(int argc, char **argv, int *i, attn_opts *o) {
  const char *s = cli_str(argc, argv, i);
  long long a, b, c;
  char tail;
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

static void parse_attn(int argc, char **argv, attn_opts *o) {
  *o = (attn_opts){.head = -1, .query = -2};
  run_input_defaults(&o->in);
  run_geo_defaults(&o->geo);
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i];
    if (run_parse_input_opt(argc, argv, &i, &o->in) ||
        run_parse_geo_opt(argc, argv, &i, &o->geo))
      continue;
    if (!strcmp(a, "--head"))
      o->head = cli_int(argc, argv, &i, 0, INT32_MAX);
    else if (!strcmp(a, "--batch"))
      o->batch = cli_int(argc, argv, &i, 0, INT32_MAX);
    else if (!strcmp(a, "--query"))
      parse_query(argc, argv, &i, o);
    else if (!strcmp(a, "--linear"))
      o->linear = 1;
    else if (!strcmp(a, "--out"))
      o->out = cli_str(argc, argv, &i);
    else {
      cli_help_version(a, plot_usage);
      cli_unknown("plot attention", a, "stsa plot --help");
    }
  }
  need_out(o->out, "attention");
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
  const size_t off = (size_t)(b * t->stride[0] + s * t->stride[1] + h * t->stride[2]);
  stsa_load_row_f32((const char *)t->data + off * stsa_dtype_size(t->dtype), t->dtype,
                    t->stride[3], t->shape[3], tmp);
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

static int plot_attention(int argc, char **argv) {
  attn_opts o;
  parse_attn(argc, argv, &o);
  run_qkv x;
  run_load_qkv(&o.in, &x);
  for (int i = 0; i < x.n_ids; i++)
    add_input(x.id_names[i], o.in.in ? o.in.in : o.in.npy[i], x.ids[i]);
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
  save(&c, o.out);
  canvas_free(&c);
  free(w);
  run_free_qkv(&x);
  return 0;
}

/* ======================================================================== */
/* plot kinds                                                               */
/* ======================================================================== */

enum { KIND_NONE = 0, KIND_SPATIAL, KIND_TEMPORAL, KIND_DENSE, KIND_N };
static const rgb KIND_COL[KIND_N] = {
    {250, 250, 250}, {31, 110, 180}, {238, 128, 30}, {150, 150, 150}};
static const char KIND_CHAR[KIND_N] = {0, 'S', 'T', 'D'};
/* Cells from this size up also carry the letter (for grey-scale prints). */
enum { LETTER_CELL = 28 };

typedef struct kinds_row {
  int64_t layer, step;
  int64_t heads;
  unsigned char *kind; /* [heads] */
} kinds_row;

static int kind_code(const char *s) {
  if (!s)
    return KIND_NONE;
  if (!strcmp(s, "spatial"))
    return KIND_SPATIAL;
  if (!strcmp(s, "temporal"))
    return KIND_TEMPORAL;
  return !strcmp(s, "dense") ? KIND_DENSE : KIND_NONE;
}

static int64_t json_int_or(json_t *v, int64_t dflt) {
  return json_is_integer(v) ? (int64_t)json_integer_value(v) : dflt;
}

/* One row per report: the kind of every head of batch entry 0. */
static void read_report(const char *path, kinds_row *row) {
  json_error_t e;
  FILE *f = cli_open_input("--report", path); /* a missing file: why, not "line -1" */
  cli_file_id id;
  cli_check_input("--report", path, &id);
  add_input("--report", path, id);
  json_t *root = json_loadf(f, 0, &e);
  const int read_error = ferror(f);
  fclose(f);
  if (!root && read_error)
    cli_die("--report %s: cannot read it", path);
  if (!root && e.line >= 1)
    cli_die("--report %s: not valid JSON: line %d, column %d: %s", path, e.line, e.column,
            e.text);
  if (!root)
    cli_die("--report %s: not valid JSON: %s", path, e.text);
  json_t *heads = json_object_get(root, "per_head");
  if (!json_is_object(root) || !json_is_array(heads))
    cli_die("--report %s: not an stsa run report (no \"per_head\" array)", path);
  row->layer = json_int_or(json_object_get(root, "layer"), -1);
  row->step = json_int_or(json_object_get(root, "step"), -1);
  row->heads = 0;
  size_t i;
  json_t *h;
  json_array_foreach(heads, i, h) {
    int64_t head = json_int_or(json_object_get(h, "head"), -1);
    row->heads = head + 1 > row->heads ? head + 1 : row->heads;
  }
  if (row->heads < 1 || row->heads > 65536)
    cli_die("--report %s: \"per_head\" holds no valid head numbers", path);
  row->kind = calloc((size_t)row->heads, 1);
  if (!row->kind)
    cli_die("out of memory");
  json_array_foreach(heads, i, h) {
    int64_t head = json_int_or(json_object_get(h, "head"), -1);
    if (head >= 0 && json_int_or(json_object_get(h, "batch"), 0) == 0)
      row->kind[head] =
          (unsigned char)kind_code(json_string_value(json_object_get(h, "kind")));
  }
  json_decref(root);
}

static int cmp_rows(const void *a, const void *b) {
  const kinds_row *x = a, *y = b;
  if (x->layer != y->layer)
    return x->layer < y->layer ? -1 : 1;
  return (x->step > y->step) - (x->step < y->step);
}

/* Row label: the layer, with the step when a layer appears more than once. */
static void row_label(const kinds_row *rows, int n, int r, char *buf, size_t len) {
  int dup = (r > 0 && rows[r - 1].layer == rows[r].layer) ||
            (r + 1 < n && rows[r + 1].layer == rows[r].layer);
  if (rows[r].layer < 0)
    snprintf(buf, len, "?");
  else if (dup)
    snprintf(buf, len, "%lld s%lld", (long long)rows[r].layer, (long long)rows[r].step);
  else
    snprintf(buf, len, "%lld", (long long)rows[r].layer);
}

static void draw_kinds_grid(canvas *c, const kinds_row *rows, int n, int64_t H, int x0,
                            int y0, int cell) {
  for (int r = 0; r < n; r++) {
    char lab[32];
    row_label(rows, n, r, lab, sizeof lab);
    canvas_text_align(c, x0 - 8, y0 + r * cell + (cell - text_height(TS)) / 2, lab, TS, 2,
                      PLOT_BLACK);
    for (int64_t h = 0; h < H; h++) {
      int k = h < rows[r].heads ? rows[r].kind[h] : KIND_NONE;
      int x = x0 + (int)h * cell, y = y0 + r * cell;
      canvas_fill(c, x, y, cell, cell, KIND_COL[k]);
      canvas_box(c, x, y, cell, cell, 1, PLOT_WHITE);
      if (cell >= LETTER_CELL && KIND_CHAR[k]) {
        char s[2] = {KIND_CHAR[k], 0};
        canvas_text_align(c, x + cell / 2 + 1, y + (cell - text_height(TS)) / 2, s, TS, 1,
                          PLOT_WHITE);
      }
    }
  }
  canvas_box(c, x0 - 1, y0 - 1, (int)H * cell + 2, n * cell + 2, 1, PLOT_GREY);
  int step = H > 40 ? 10 : H > 16 ? 5 : 1; /* head numbers that fit */
  for (int64_t h = 0; h < H; h += step) {
    char lab[24];
    snprintf(lab, sizeof lab, "%lld", (long long)h);
    canvas_text_align(c, x0 + (int)h * cell + cell / 2, y0 + n * cell + 6, lab, TS, 1,
                      PLOT_BLACK);
  }
}

/* Legend entries with counts: spatial and temporal always, dense calls and
 * gaps only when present. Returns the number of entries. */
static int kinds_legend(const kinds_row *rows, int n, int64_t H, int cell,
                        char labs[KIND_N][48], legend_entry *leg) {
  static const char *const NAMES[KIND_N] = {"no data", "spatial", "temporal",
                                            "dense call"};
  static const int ORDER[KIND_N] = {KIND_SPATIAL, KIND_TEMPORAL, KIND_DENSE, KIND_NONE};
  int64_t count[KIND_N] = {0};
  for (int r = 0; r < n; r++)
    for (int64_t h = 0; h < H; h++)
      count[h < rows[r].heads ? rows[r].kind[h] : KIND_NONE]++;
  int m = 0;
  for (int i = 0; i < KIND_N; i++) {
    int k = ORDER[i];
    if ((k == KIND_DENSE || k == KIND_NONE) && !count[k])
      continue;
    if (cell >= LETTER_CELL && KIND_CHAR[k])
      snprintf(labs[k], sizeof labs[k], "%s (%c): %lld", NAMES[k], KIND_CHAR[k],
               (long long)count[k]);
    else
      snprintf(labs[k], sizeof labs[k], "%s: %lld", NAMES[k], (long long)count[k]);
    leg[m++] = (legend_entry){labs[k], KIND_COL[k], 0};
  }
  return m;
}

/* Rows of all --report files, sorted by layer and step; *H = most heads. */
static kinds_row *load_kinds(int argc, char **argv, const char **out, int *n,
                             int64_t *H) {
  kinds_row *rows = calloc((size_t)argc, sizeof *rows);
  if (!rows)
    cli_die("out of memory");
  *n = 0, *H = 0, *out = NULL;
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--report")) {
      read_report(cli_str(argc, argv, &i), &rows[*n]);
      *H = rows[*n].heads > *H ? rows[*n].heads : *H;
      ++*n;
    } else if (!strcmp(argv[i], "--out"))
      *out = cli_str(argc, argv, &i);
    else {
      cli_help_version(argv[i], plot_usage);
      cli_unknown("plot kinds", argv[i], "stsa plot --help");
    }
  }
  need_out(*out, "kinds");
  if (!*n)
    cli_die("plot kinds: give at least one --report FILE.json (from stsa run --report)");
  qsort(rows, (size_t)*n, sizeof *rows, cmp_rows);
  return rows;
}

static void kinds_labels(canvas *c, const kinds_row *rows, int n, int64_t H, int x0,
                         int y0, int cell) {
  char title[160];
  snprintf(title, sizeof title,
           "Head kind chosen per layer and head (%d report%s, batch 0)", n,
           n == 1 ? "" : "s");
  canvas_text_align(c, c->w / 2, 14, title, TS, 1, PLOT_BLACK);
  canvas_text_align(c, c->w / 2, 40, "SVG profiling picks the mask with the lower error",
                    TS, 1, PLOT_GREY);
  canvas_text_align(c, x0 + (int)H * cell / 2, y0 + n * cell + 30, "head", TS, 1,
                    PLOT_BLACK);
  int dup = 0; /* a layer seen at several steps: the rows are (layer, step) */
  for (int r = 1; r < n; r++)
    dup |= rows[r].layer == rows[r - 1].layer;
  canvas_text_vertical(c, 30, y0 + n * cell / 2, dup ? "layer, step" : "layer", TS,
                       PLOT_BLACK);
}

static int plot_kinds(int argc, char **argv) {
  const char *out;
  int n;
  int64_t H;
  kinds_row *rows = load_kinds(argc, argv, &out, &n, &H);
  const int64_t side = H > n ? H : n;
  int cell = (int)(640 / side);
  cell = cell < 6 ? 6 : cell > 48 ? 48 : cell;
  char labs[KIND_N][48];
  legend_entry leg[KIND_N];
  const int m = kinds_legend(rows, n, H, cell, labs, leg);

  const int x0 = 150, y0 = 90, lw = legend_row_width(leg, m, TS) + 80;
  int width = x0 + (int)H * cell + 60;
  width = width > 760 ? width : 760;
  width = width > lw ? width : lw;
  canvas c;
  canvas_init(&c, width, y0 + n * cell + 140, PLOT_WHITE);
  kinds_labels(&c, rows, n, H, x0, y0, cell);
  draw_kinds_grid(&c, rows, n, H, x0, y0, cell);
  plot_legend_row(&c, c.w / 2, c.h - 50, leg, m, TS);
  save(&c, out);
  canvas_free(&c);
  for (int r = 0; r < n; r++)
    free(rows[r].kind);
  free(rows);
  return 0;
}

/* ======================================================================== */
/* plot speedup                                                             */
/* ======================================================================== */

enum { MAX_SERIES = 8 };

typedef struct series {
  char name[48];
  double *x, *y;
  int n, cap;
} series;

static const rgb SERIES_COL[MAX_SERIES] = {
    {31, 110, 180},  {238, 128, 30}, {44, 160, 44},   {210, 40, 40},
    {148, 103, 189}, {140, 86, 75},  {227, 119, 194}, {90, 90, 90}};

static series *find_series(series *s, int *n, const char *name) {
  for (int i = 0; i < *n; i++)
    if (!strcmp(s[i].name, name))
      return &s[i];
  if (*n == MAX_SERIES)
    cli_die("plot speedup: more than %d series (distinct \"mode\" values)", MAX_SERIES);
  series *t = &s[(*n)++];
  memset(t, 0, sizeof *t);
  snprintf(t->name, sizeof t->name, "%s", name);
  return t;
}

static void add_point(series *s, double x, double y) {
  if (s->n == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 16;
    double *nx = realloc(s->x, sizeof *nx * (size_t)s->cap);
    if (!nx)
      cli_die("out of memory");
    s->x = nx;
    double *ny = realloc(s->y, sizeof *ny * (size_t)s->cap);
    if (!ny)
      cli_die("out of memory");
    s->y = ny;
  }
  s->x[s->n] = x, s->y[s->n] = y, s->n++;
}

/* Reads JSON lines; lines that are not objects with numeric "density" in
 * (0, 1] and "speedup" > 0 (such as plain-text output) are skipped. */
static int read_bench(const char *path, series *s, int *ns, int *skipped) {
  FILE *f = cli_open_input("--bench", path);
  cli_file_id id;
  cli_check_input("--bench", path, &id);
  add_input("--bench", path, id);
  char *line = NULL;
  size_t cap = 0;
  int points = 0;
  while (getline(&line, &cap, f) > 0) {
    json_t *j = json_loads(line, 0, NULL);
    json_t *d = json_object_get(j, "density"), *sp = json_object_get(j, "speedup");
    double dv = json_number_value(d), sv = json_number_value(sp);
    if (json_is_number(d) && json_is_number(sp) && dv > 0 && dv <= 1 && sv > 0) {
      const char *mode = json_string_value(json_object_get(j, "mode"));
      const char *bench = json_string_value(json_object_get(j, "bench"));
      add_point(find_series(s, ns, mode ? mode : bench ? bench : "speed-up"), dv, sv);
      points++;
    } else if (line[strspn(line, " \t\r\n")]) {
      (*skipped)++;
    }
    json_decref(j);
  }
  free(line);
  fclose(f);
  return points;
}

static void sort_series(series *s) {
  for (int i = 1; i < s->n; i++)
    for (int j = i; j > 0 && s->x[j - 1] > s->x[j]; j--) {
      double tx = s->x[j], ty = s->y[j];
      s->x[j] = s->x[j - 1], s->y[j] = s->y[j - 1];
      s->x[j - 1] = tx, s->y[j - 1] = ty;
    }
}

static void draw_series(canvas *c, const plot_axis *ax, const plot_axis *ay,
                        const series *s, int idx) {
  for (int i = 0; i < s->n; i++) {
    double px = axis_map(ax, s->x[i]), py = axis_map(ay, s->y[i]);
    if (i)
      canvas_line(c, axis_map(ax, s->x[i - 1]), axis_map(ay, s->y[i - 1]), px, py, 2, 0,
                  SERIES_COL[idx]);
    canvas_marker(c, (int)lround(px), (int)lround(py), 9, idx % 4, SERIES_COL[idx]);
  }
}

/* The ideal speed-up 1/density as a dashed curve (straight on log-log). */
static void draw_ideal(canvas *c, const plot_axis *ax, const plot_axis *ay) {
  enum { STEPS = 240 };
  const double l0 = log(ax->lo), l1 = log(ax->hi);
  for (int i = 1; i <= STEPS; i++) {
    if ((i / 6) % 2) /* dashes of 6 segments */
      continue;
    double d0 = exp(l0 + (l1 - l0) * (i - 1) / STEPS),
           d1 = exp(l0 + (l1 - l0) * i / STEPS);
    canvas_line(c, axis_map(ax, d0), axis_map(ay, 1 / d0), axis_map(ax, d1),
                axis_map(ay, 1 / d1), 2, 0, PLOT_BLACK);
  }
}

/* Reads every --bench file into series; returns the number of points. */
static int load_bench(int argc, char **argv, const char **out, series *s, int *ns) {
  int skipped = 0, points = 0, files = 0;
  *out = NULL;
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--bench")) {
      points += read_bench(cli_str(argc, argv, &i), s, ns, &skipped);
      files++;
    } else if (!strcmp(argv[i], "--out"))
      *out = cli_str(argc, argv, &i);
    else {
      cli_help_version(argv[i], plot_usage);
      cli_unknown("plot speedup", argv[i], "stsa plot --help");
    }
  }
  need_out(*out, "speedup");
  if (!files)
    cli_die("plot speedup: give --bench FILE.jsonl (lines of stsa bench ... --json)");
  if (!points)
    cli_die("plot speedup: no line with numeric \"density\" and \"speedup\" keys found");
  if (skipped)
    fprintf(stderr, "stsa: plot speedup: skipped %d line(s) without density/speedup\n",
            skipped);
  return points;
}

static void speedup_labels(canvas *c, const series *s, int ns, int points, int x_right,
                           int y_top) {
  canvas_text_align(c, c->w / 2, 14, "Sparse attention speed-up against density", TS, 1,
                    PLOT_BLACK);
  char sub[128];
  snprintf(sub, sizeof sub, "%d point%s; dashed: ideal 1/density; grey: dense (1x)",
           points, points == 1 ? "" : "s");
  canvas_text_align(c, c->w / 2, 40, sub, TS, 1, PLOT_GREY);
  legend_entry leg[MAX_SERIES + 1];
  for (int k = 0; k < ns; k++)
    leg[k] = (legend_entry){s[k].name, SERIES_COL[k], 3 + k % 4};
  leg[ns] = (legend_entry){"ideal 1/density", PLOT_BLACK, 2};
  plot_legend(c, x_right - legend_width(leg, ns + 1, TS) - 10, y_top + 10, leg, ns + 1,
              TS);
}

static int plot_speedup(int argc, char **argv) {
  const char *out;
  series s[MAX_SERIES];
  int ns = 0;
  const int points = load_bench(argc, argv, &out, s, &ns);
  double dmin = 1, smin = 1, smax = 1;
  for (int k = 0; k < ns; k++) {
    sort_series(&s[k]);
    for (int i = 0; i < s[k].n; i++) {
      dmin = fmin(dmin, s[k].x[i]);
      smin = fmin(smin, s[k].y[i]);
      smax = fmax(smax, s[k].y[i]);
    }
  }
  enum { L = 120, T = 80, W = 760, HH = 520 };
  canvas c;
  canvas_init(&c, L + W + 40, T + HH + 90, PLOT_WHITE);
  plot_axis ax = {dmin / 1.25, 1.0, 1, L, L + W};
  plot_axis ay = {smin / 1.25, fmax(smax, 1.0 / dmin) * 1.25, 1, T + HH, T};
  plot_axes(&c, &ax, &ay, "density (kept fraction of pairs, log)",
            "speed-up vs dense (log)", TS, 1);
  canvas_line(&c, L, axis_map(&ay, 1.0), L + W, axis_map(&ay, 1.0), 1, 0, PLOT_GREY);
  draw_ideal(&c, &ax, &ay);
  for (int k = 0; k < ns; k++)
    draw_series(&c, &ax, &ay, &s[k], k);
  speedup_labels(&c, s, ns, points, L + W, T);
  save(&c, out);
  canvas_free(&c);
  for (int k = 0; k < ns; k++) {
    free(s[k].x);
    free(s[k].y);
  }
  return 0;
}

int cmd_plot(int argc, char **argv) {
  cli_signals_start(); /* before any thread exists: staging files go on a signal */
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    plot_usage();
    return argc < 2 ? 2 : 0;
  }
  const char *what = argv[1];
  cli_help_version(what, plot_usage);
  if (!strcmp(what, "plan"))
    return plot_plan(argc, argv);
  if (!strcmp(what, "attention"))
    return plot_attention(argc, argv);
  if (!strcmp(what, "kinds"))
    return plot_kinds(argc, argv);
  if (!strcmp(what, "speedup"))
    return plot_speedup(argc, argv);
  cli_die("plot: unknown picture '%s' (available: plan, attention, kinds, speedup)",
          what);
}
