/*
 * run_config.c — the SVG configuration of `stsa run` and `stsa plot`
 * (run_input.h): a preset overridden by the geometry flags, checked for
 * consistency; and the masks, orders and windows a session derives from it.
 */
#define STSA_EXPERIMENTAL /* stsa_svg_kind_mask */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>

#include "cli_util.h"
#include "run_input.h"

/* ---- the configuration ---------------------------------------------------- */

static void load_preset(const char *name, stsa_svg_config *c) {
  if (stsa_svg_preset(name, c) == STSA_OK)
    return;
  char names[256] = "";
  for (int p = 0; stsa_svg_preset_name(p); p++) {
    size_t used = strlen(names);
    snprintf(names + used, sizeof names - used, "%s%s", p ? ", " : "",
             stsa_svg_preset_name(p));
  }
  cli_die("--preset: unknown preset '%s' (available: %s)", name, names);
}

/* Text flags over the preset's text; a new --text without --text-real means
 * all text is real. */
static void resolve_text(const run_geo_opts *o, stsa_geometry *g) {
  if (o->text >= 0) {
    g->text = o->text;
    g->text_real = o->text;
  }
  if (o->text_real >= 0)
    g->text_real = o->text_real;
  if (o->text_pos >= 0)
    g->text_pos = (stsa_text_pos)o->text_pos;
  if (g->text == 0) {
    g->text_real = 0;
    g->text_pos = STSA_TEXT_NONE;
    return;
  }
  if (g->text_pos == STSA_TEXT_NONE)
    cli_die("--text %lld needs --text-pos prefix or suffix (where the text tokens sit)",
            (long long)g->text);
  if (g->text_real > g->text)
    cli_die("--text-real %lld exceeds the %lld text tokens (--text)",
            (long long)g->text_real, (long long)g->text);
}

void run_resolve_config(const run_geo_opts *o, int64_t heads, int64_t head_dim,
                        stsa_svg_config *cfg, char *note, size_t note_len) {
  stsa_svg_config c = {.size = sizeof(stsa_svg_config),
                       .density = 0.30,
                       .sample_rows = 64,
                       .sink_frames = 1};
  if (note && note_len)
    note[0] = '\0';
  if (o->preset)
    load_preset(o->preset, &c);
  stsa_geometry *g = &c.geometry;
  const stsa_geometry preset_geo = *g;
  g->frames = o->frames > 0 ? o->frames : g->frames;
  g->height = o->height > 0 ? o->height : g->height;
  g->width = o->width > 0 ? o->width : g->width;
  /* A preset's SVG2 cluster counts are for its video (300 / 1000 can exceed
   * a small one's tokens): another video gets the session's automatic counts
   * (0, scaled to it), as `bench svg2` does; --q/--kv-clusters still apply. */
  if (o->preset && (g->frames != preset_geo.frames || g->height != preset_geo.height ||
                    g->width != preset_geo.width))
    c.svg2.q_clusters = c.svg2.kv_clusters = 0;
  if (!g->frames || !g->height || !g->width)
    cli_die("the video geometry is missing: give --frames F --height Hp --width Wp "
            "(latent frames and tokens per frame side) or --preset NAME");
  resolve_text(o, g);
  if (stsa_geometry_tokens(g) < 0)
    cli_die("geometry %lld x %lld x %lld with %lld text tokens is too large: more than "
            "2^40 tokens (the library's limit)",
            (long long)g->frames, (long long)g->height, (long long)g->width,
            (long long)g->text);
  c.density = o->density > 0 ? o->density : c.density;
  c.sink_frames = o->sink_frames >= 0 ? o->sink_frames : c.sink_frames;
  if (c.sink_frames > g->frames)
    cli_die("--sink-frames %lld exceeds --frames %lld", (long long)c.sink_frames,
            (long long)g->frames);
  const int64_t L = g->frames * g->height * g->width;
  if (o->sample_rows > 0) {
    if (o->sample_rows > L)
      cli_die("--sample-rows %lld exceeds the %lld video tokens",
              (long long)o->sample_rows, (long long)L);
    c.sample_rows = o->sample_rows;
  } else if (c.sample_rows > L) {
    if (note && note_len)
      snprintf(note, note_len, "sample_rows capped from %lld to the %lld video tokens",
               (long long)c.sample_rows, (long long)L);
    c.sample_rows = L;
  }
  c.q_tile = o->q_tile >= 0 ? o->q_tile : c.q_tile;
  c.kv_tile = o->kv_tile >= 0 ? o->kv_tile : c.kv_tile;
  c.heads = heads;
  c.head_dim = head_dim;
  *cfg = c;
}

/* ---- masks of the SVG session -------------------------------------------- */

/* A one-head session for cfg: masks and windows do not depend on the heads. */
static stsa_svg *one_head_session(stsa_ctx *ctx, const stsa_svg_config *cfg) {
  stsa_svg_config one = *cfg;
  one.heads = 1;
  one.head_dim = one.head_dim > 0 ? one.head_dim : 64;
  stsa_svg *svg;
  cli_check(stsa_svg_create(ctx, &one, &svg), ctx, "creating the SVG session");
  return svg;
}

stsa_mask *run_kind_mask(stsa_ctx *ctx, const stsa_svg_config *cfg, stsa_head_kind kind,
                         stsa_order *q_order, stsa_order *kv_order) {
  stsa_svg *svg = one_head_session(ctx, cfg);
  stsa_mask *mask;
  cli_check(stsa_svg_kind_mask(svg, kind, &mask, q_order, kv_order), NULL,
            "reading the session's mask");
  stsa_svg_free(svg);
  return mask;
}

void run_session_windows(stsa_ctx *ctx, const stsa_svg_config *cfg, stsa_svg_windows *w) {
  stsa_svg *svg = one_head_session(ctx, cfg);
  *w = (stsa_svg_windows)STSA_INIT(stsa_svg_windows);
  cli_check(stsa_svg_get_windows(svg, w), NULL, "reading the SVG windows");
  stsa_svg_free(svg);
}
