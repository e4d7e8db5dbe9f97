/*
 * run_input.c — what `stsa run` and `stsa plot` share (run_input.h): input
 * and geometry options, loading Q, K, V from safetensors or .npy as views on
 * the mapped data, and the masks, orders and windows of the SVG session.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_files.h"
#include "cli_util.h"
#include "core/convert.h"
#include "io/io_common.h"
#include "run_input.h"

/* ======================================================================== */
/* Input and geometry options (shared with stsa plot)                       */
/* ======================================================================== */

static const char *const QKV_NAME[3] = {"q", "k", "v"};
static const char *const LAYOUT_NAME[3] = {"bshd", "bhsd", "shd"};
static const char *const LAYOUT_DIMS[3] = {"[B,S,H,D]", "[B,H,S,D]", "[S,H,D]"};

const char *run_layout_name(run_layout layout) {
  return (unsigned)layout < 3 ? LAYOUT_NAME[layout] : "?";
}

void run_input_defaults(run_input_opts *o) {
  *o = (run_input_opts){NULL, {"q", "k", "v"}, {NULL, NULL, NULL}, -1};
}

int run_parse_input_opt(int argc, char **argv, int *i, run_input_opts *o) {
  const char *a = argv[*i];
  if (!strcmp(a, "--in")) {
    o->in = cli_str(argc, argv, i);
    return 1;
  }
  if (!strcmp(a, "--layout")) {
    const char *s = cli_str(argc, argv, i);
    for (int l = 0; l < 3; l++)
      if (!strcmp(s, LAYOUT_NAME[l])) {
        o->layout = l;
        return 1;
      }
    cli_die("--layout expects bshd, bhsd or shd, got '%s'", s);
  }
  /* literal option names: tests/test_cli_usage.sh reads them from here */
  static const char *const NAME_OPT[3] = {"--q", "--k", "--v"};
  static const char *const NPY_OPT[3] = {"--in-q", "--in-k", "--in-v"};
  for (int t = 0; t < 3; t++) {
    const char *name_opt = NAME_OPT[t], *npy_opt = NPY_OPT[t];
    if (!strcmp(a, name_opt)) {
      o->names[t] = cli_str(argc, argv, i);
      if (!*o->names[t])
        cli_die("%s expects a tensor name, got an empty string", a);
      return 1;
    }
    if (!strcmp(a, npy_opt)) {
      o->npy[t] = cli_str(argc, argv, i);
      return 1;
    }
  }
  return 0;
}

void run_geo_defaults(run_geo_opts *o) {
  *o = (run_geo_opts){NULL, -1, -1, -1, -1, -1, -1, -1.0, -1, -1, -1, -1};
}

/* A key tile: the kernels take keys 16 at a time. */
static int parse_kv_tile(int argc, char **argv, int *i) {
  const char *opt = argv[*i];
  int t = (int)cli_int(argc, argv, i, 16, 4096);
  if (t % 16)
    cli_die("%s %d must be a multiple of 16 (keys are processed 16 at a time)", opt, t);
  return t;
}

int run_parse_geo_opt(int argc, char **argv, int *i, run_geo_opts *o) {
  const char *a = argv[*i];
  const int64_t big = (int64_t)1 << 30;
  if (!strcmp(a, "--preset"))
    o->preset = cli_str(argc, argv, i);
  else if (!strcmp(a, "--frames"))
    o->frames = cli_int(argc, argv, i, 1, big);
  else if (!strcmp(a, "--height"))
    o->height = cli_int(argc, argv, i, 1, big);
  else if (!strcmp(a, "--width"))
    o->width = cli_int(argc, argv, i, 1, big);
  else if (!strcmp(a, "--text"))
    o->text = cli_int(argc, argv, i, 0, big);
  else if (!strcmp(a, "--text-real"))
    o->text_real = cli_int(argc, argv, i, 0, big);
  else if (!strcmp(a, "--density"))
    o->density = cli_double(argc, argv, i, 1e-6, 1.0);
  else if (!strcmp(a, "--sample-rows"))
    o->sample_rows = cli_int(argc, argv, i, 1, big);
  else if (!strcmp(a, "--sink-frames"))
    o->sink_frames = cli_int(argc, argv, i, 0, big);
  else if (!strcmp(a, "--tile"))
    o->q_tile = o->kv_tile = parse_kv_tile(argc, argv, i);
  else if (!strcmp(a, "--q-tile"))
    o->q_tile = (int)cli_int(argc, argv, i, 6, 4096);
  else if (!strcmp(a, "--kv-tile"))
    o->kv_tile = parse_kv_tile(argc, argv, i);
  else if (!strcmp(a, "--text-pos")) {
    const char *s = cli_str(argc, argv, i);
    if (!strcmp(s, "prefix"))
      o->text_pos = STSA_TEXT_PREFIX;
    else if (!strcmp(s, "suffix"))
      o->text_pos = STSA_TEXT_SUFFIX;
    else if (!strcmp(s, "none"))
      o->text_pos = STSA_TEXT_NONE;
    else
      cli_die("--text-pos expects prefix, suffix or none, got '%s'", s);
  } else
    return 0;
  return 1;
}

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
  stsa_svg_config c = {.density = 0.30, .sample_rows = 64, .sink_frames = 1};
  if (note && note_len)
    note[0] = '\0';
  if (o->preset)
    load_preset(o->preset, &c);
  stsa_geometry *g = &c.geometry;
  g->frames = o->frames > 0 ? o->frames : g->frames;
  g->height = o->height > 0 ? o->height : g->height;
  g->width = o->width > 0 ? o->width : g->width;
  if (!g->frames || !g->height || !g->width)
    cli_die("the video geometry is missing: give --frames F --height Hp --width Wp "
            "(latent frames and tokens per frame side) or --preset NAME");
  resolve_text(o, g);
  if (stsa_geometry_tokens(g) < 0)
    cli_die("geometry %lld x %lld x %lld with %lld text tokens is too large",
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

/* ---- loading Q, K, V ----------------------------------------------------- */

static const char *shape_str(char *buf, size_t len, int rank, const int64_t *shape) {
  return stsa_io_shape_str(buf, len, rank, shape);
}

/* Makes x->t[i] a [B,S,H,D] view of one stored tensor, after checking its
 * rank against the layout. Data the kernels cannot read in place (not
 * aligned to its element, as safetensors may pack it) is copied once. */
static void bind_tensor(run_qkv *x, int i, int layout, stsa_dtype dtype, int rank,
                        const int64_t *shape, const void *data, size_t nbytes) {
  char sb[96];
  const int want = layout == RUN_SHD ? 3 : 4;
  if (rank != want)
    cli_die("--layout %s expects rank-%d tensors %s, but %s has shape %s (rank %d)",
            LAYOUT_NAME[layout], want, LAYOUT_DIMS[layout], x->label[i],
            shape_str(sb, sizeof sb, rank, shape), rank);
  for (int d = 0; d < rank; d++)
    if (shape[d] < 1)
      cli_die("%s has shape %s: every dimension must be at least 1", x->label[i],
              shape_str(sb, sizeof sb, rank, shape));
  void *p = (void *)(uintptr_t)data; /* read only: the library never writes q, k, v */
  size_t es = stsa_dtype_size(dtype);
  if ((uintptr_t)data % es) {
    x->copy[i] = aligned_alloc(64, (nbytes + 63) / 64 * 64);
    if (!x->copy[i])
      cli_die("out of memory copying %s (%zu bytes)", x->label[i], nbytes);
    memcpy(x->copy[i], data, nbytes);
    p = x->copy[i];
    x->copied[i] = 1;
  }
  if (layout == RUN_BSHD)
    x->t[i] = stsa_tensor_bshd(p, dtype, shape[0], shape[1], shape[2], shape[3]);
  else if (layout == RUN_BHSD)
    x->t[i] = stsa_tensor_bhsd(p, dtype, shape[0], shape[2], shape[1], shape[3]);
  else
    x->t[i] = stsa_tensor_shd(p, dtype, shape[0], shape[1], shape[2]);
  if (i == 0) {
    x->rank = rank;
    memcpy(x->file_shape, shape, sizeof(int64_t) * (size_t)rank);
  }
}

/* "q, k, v" of the file, for the message about a missing name. */
static void list_names(const stsa_st_file *f, char *buf, size_t len) {
  size_t n = stsa_st_count(f), used = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < n && used + 1 < len; i++) {
    char q[64];
    const char *name = stsa_st_tensor(f, i)->name;
    stsa_io_quote(q, sizeof q, name, strlen(name));
    used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? ", " : "", q);
    if (i == 11 && n > 12) {
      snprintf(buf + used, len - used, ", ... (%zu in all)", n);
      break;
    }
  }
  if (n == 0)
    snprintf(buf, len, "no tensors");
}

static void load_safetensors(const run_input_opts *o, run_qkv *x) {
  char err[512];
  /* stat first: opening a FIFO would block before the library sees it */
  cli_check_input("--in", o->in, &x->ids[0]);
  x->id_names[0] = "--in";
  x->n_ids = 1;
  if (stsa_st_open(o->in, &x->st, err, sizeof err) != STSA_OK)
    cli_die("--in %s: %s", o->in, err);
  for (int i = 0; i < 3; i++) {
    const stsa_io_tensor *t = stsa_st_find(x->st, o->names[i]);
    if (!t) {
      char names[512];
      list_names(x->st, names, sizeof names);
      cli_die("--in %s: no tensor named '%s' for %s (the file holds %s); name it with "
              "--%s NAME",
              o->in, o->names[i], QKV_NAME[i], names, QKV_NAME[i]);
    }
    snprintf(x->label_buf[i], sizeof x->label_buf[i], "tensor '%s'", o->names[i]);
    x->label[i] = x->label_buf[i];
    bind_tensor(x, i, o->layout, t->dtype, t->rank, t->shape, t->data, t->nbytes);
  }
}

static void load_npy(const run_input_opts *o, run_qkv *x) {
  char err[512];
  static const char *const FLAG[3] = {"--in-q", "--in-k", "--in-v"};
  for (int i = 0; i < 3; i++) {
    cli_check_input(FLAG[i], o->npy[i], &x->ids[i]);
    x->id_names[i] = FLAG[i];
    x->n_ids = i + 1;
  }
  for (int i = 0; i < 3; i++) {
    if (stsa_npy_read(o->npy[i], &x->npy[i], err, sizeof err) != STSA_OK)
      cli_die("--in-%s %s: %s", QKV_NAME[i], o->npy[i], err);
    snprintf(x->label_buf[i], sizeof x->label_buf[i], "%s (--in-%s)", o->npy[i],
             QKV_NAME[i]);
    x->label[i] = x->label_buf[i];
    x->copied[i] = 1;
    const stsa_npy_array *a = &x->npy[i];
    bind_tensor(x, i, o->layout, a->dtype, a->rank, a->shape, a->data, a->nbytes);
  }
}

/* q, k and v must agree in every dimension: this is self-attention over one
 * video sequence. */
static void check_same_shapes(const run_qkv *x) {
  for (int i = 1; i < 3; i++)
    for (int d = 0; d < 4; d++)
      if (x->t[i].shape[d] != x->t[0].shape[d]) {
        char a[96], b[96];
        const int64_t *s0 = x->t[0].shape, *s1 = x->t[i].shape;
        cli_die("%s is [B,S,H,D] = %s but %s is %s: q, k and v must have the same shape",
                x->label[i], shape_str(a, sizeof a, 4, s1), x->label[0],
                shape_str(b, sizeof b, 4, s0));
      }
}

void run_load_qkv(const run_input_opts *o, run_qkv *x) {
  memset(x, 0, sizeof *x);
  const int npy = o->npy[0] || o->npy[1] || o->npy[2];
  if (o->layout < 0)
    cli_die("--layout is required: bshd ([B,S,H,D], diffusers), bhsd ([B,H,S,D], "
            "PyTorch SDPA) or shd ([S,H,D])");
  if (npy && o->in)
    cli_die(
        "give either --in FILE.safetensors or --in-q/--in-k/--in-v FILE.npy, not both");
  if (npy) {
    for (int i = 0; i < 3; i++)
      if (!o->npy[i])
        cli_die(
            ".npy input needs all three of --in-q, --in-k and --in-v (--in-%s missing)",
            QKV_NAME[i]);
    load_npy(o, x);
  } else if (o->in) {
    load_safetensors(o, x);
  } else {
    cli_die("no input: give --in FILE.safetensors or --in-q/--in-k/--in-v FILE.npy");
  }
  check_same_shapes(x);
}

void run_free_qkv(run_qkv *x) {
  for (int i = 0; i < 3; i++) {
    free(x->copy[i]);
    stsa_npy_free(&x->npy[i]);
  }
  stsa_st_close(x->st);
  memset(x, 0, sizeof *x);
}

void run_check_tokens(const stsa_svg_config *cfg, const run_qkv *x, int layout) {
  const stsa_geometry *g = &cfg->geometry;
  const int64_t N = stsa_geometry_tokens(g), S = x->t[0].shape[1];
  if (N == S)
    return;
  char sb[96];
  cli_die(
      "the geometry gives N = %lld text + %lld frames x %lld x %lld = %lld tokens, but "
      "%s holds S = %lld tokens (shape %s read as %s %s); check --frames, --height, "
      "--width and --text (or --layout)",
      (long long)g->text, (long long)g->frames, (long long)g->height, (long long)g->width,
      (long long)N, x->label[0], (long long)S,
      shape_str(sb, sizeof sb, x->rank, x->file_shape), LAYOUT_NAME[layout],
      LAYOUT_DIMS[layout]);
}

/* ---- masks of the SVG session -------------------------------------------- */

stsa_head_kind run_parse_kind(int argc, char **argv, int *i) {
  const char *opt = argv[*i], *s = cli_str(argc, argv, i);
  if (!strcmp(s, "spatial"))
    return STSA_HEAD_SPATIAL;
  if (!strcmp(s, "temporal"))
    return STSA_HEAD_TEMPORAL;
  cli_die("%s expects spatial or temporal, got '%s'", opt, s);
}

stsa_mask *run_kind_mask(stsa_ctx *ctx, const stsa_svg_config *cfg, stsa_head_kind kind,
                         stsa_order *q_order, stsa_order *kv_order) {
  stsa_svg_config one = *cfg;
  one.heads = 1;
  one.head_dim = one.head_dim > 0 ? one.head_dim : 64;
  stsa_svg *svg;
  cli_check(stsa_svg_create(ctx, &one, &svg), ctx, "creating the SVG session");
  stsa_mask *mask;
  cli_check(stsa_svg_kind_mask(svg, kind, &mask, q_order, kv_order), NULL,
            "reading the session's mask");
  stsa_svg_free(svg);
  return mask;
}

void run_session_windows(stsa_ctx *ctx, const stsa_svg_config *cfg, stsa_svg_windows *w) {
  stsa_svg_config one = *cfg;
  one.heads = 1;
  one.head_dim = one.head_dim > 0 ? one.head_dim : 64;
  stsa_svg *svg;
  cli_check(stsa_svg_create(ctx, &one, &svg), ctx, "creating the SVG session");
  cli_check(stsa_svg_get_windows(svg, w), NULL, "reading the SVG windows");
  stsa_svg_free(svg);
}
