/*
 * plot_plan.c — `stsa plot plan`: the tile plan of one head of an SVG
 * session, empty, partial and full tiles, in native order beside the
 * permuted one.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_options.h"
#include "cli_util.h"
#include "plot_cmd.h"
#include "run_input.h"

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
  int kind; /* a stsa_head_kind */
  const char *out;
} plan_opts;

static const cli_opt PLAN_OPTIONS[] = {
    {.name = "--kind",
     .metavar = "K",
     CLI_CHOICE(plan_opts, kind, RUN_KIND_NAMES, RUN_KIND_VALUES)},
    {.name = "--out", .metavar = "FILE", CLI_STR(plan_opts, out)},
    {0}};

static void parse_plan(int argc, char **argv, plan_opts *o) {
  *o = (plan_opts){.kind = STSA_HEAD_SPATIAL};
  run_geo_defaults(&o->geo);
  const cli_opt_set sets[2] = {{RUN_GEO_OPTIONS, &o->geo}, {PLAN_OPTIONS, o}};
  plot_parse("plan", argc, argv, sets, 2);
  plot_need_out(o->out, "plan");
}

/* A one-head plan of mask m in the given orders, with the session's tiles. */
static stsa_plan *build_plan(stsa_ctx *ctx, const stsa_svg_config *cfg,
                             const stsa_svg_windows *w, const stsa_mask *m, stsa_order qo,
                             stsa_order ko) {
  const int64_t N = stsa_geometry_tokens(&cfg->geometry);
  const stsa_mask *masks[1] = {m};
  stsa_plan_desc d = {sizeof(stsa_plan_desc),
                      N,
                      N,
                      1,
                      masks,
                      &cfg->geometry,
                      qo,
                      ko,
                      w->q_tile,
                      w->kv_tile,
                      0,
                      NULL,
                      NULL};
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
           stsa_head_kind_name((stsa_head_kind)o->kind), "frame-major");
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

int plot_plan(int argc, char **argv) {
  plan_opts o;
  parse_plan(argc, argv, &o);
  stsa_svg_config cfg;
  run_resolve_config(&o.geo, 1, 64, &cfg, NULL, 0);
  stsa_ctx *ctx;
  ctx = cli_ctx_create();
  stsa_svg_windows w = STSA_INIT(stsa_svg_windows);
  run_session_windows(ctx, &cfg, &w);
  /* the same mask in both panels: native order and the permuted one */
  stsa_mask *mask = run_kind_mask(ctx, &cfg, (stsa_head_kind)o.kind, NULL, NULL);
  stsa_plan *plans[2] = {
      build_plan(ctx, &cfg, &w, mask, STSA_ORDER_NATIVE, STSA_ORDER_NATIVE),
      build_plan(ctx, &cfg, &w, mask, STSA_ORDER_POSITION_MAJOR, STSA_ORDER_SINK_FIRST)};
  stsa_plan_stats st = STSA_INIT(stsa_plan_stats);
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
  plot_save(&c, o.out);
  canvas_free(&c);
  stsa_plan_free(plans[0]);
  stsa_plan_free(plans[1]);
  stsa_mask_free(mask);
  stsa_ctx_free(ctx);
  return 0;
}
