/*
 * run_input.c — what `stsa run` and `stsa plot` share (run_input.h): the
 * tables of the input and geometry options, and loading Q, K, V from
 * safetensors or .npy as views on the mapped data. The SVG configuration
 * those options give is resolved in run_config.c.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_files.h"
#include "cli_options.h"
#include "cli_util.h"
#include "run_input.h"

/* ======================================================================== */
/* Input and geometry options (shared with stsa plot)                       */
/* ======================================================================== */

static const char *const QKV_NAME[3] = {"q", "k", "v"};
static const char *const LAYOUT_NAME[4] = {"bshd", "bhsd", "shd", NULL};
static const char *const LAYOUT_DIMS[3] = {"[B,S,H,D]", "[B,H,S,D]", "[S,H,D]"};

const char *run_layout_name(run_layout layout) {
  return (unsigned)layout < 3 ? LAYOUT_NAME[layout] : "unknown";
}

const char *const RUN_KIND_NAMES[3] = {"spatial", "temporal", NULL};
const int RUN_KIND_VALUES[2] = {STSA_HEAD_SPATIAL, STSA_HEAD_TEMPORAL};

void run_input_defaults(run_input_opts *o) {
  *o = (run_input_opts){NULL, {"q", "k", "v"}, {NULL, NULL, NULL}, -1};
}

/* --q, --k, --v: the tensor of the option's last letter. */
static void set_tensor_name(void *base, const char *name, const char *value) {
  run_input_opts *o = base;
  if (!*value)
    cli_die("%s expects a tensor name, got an empty string", name);
  o->names[strchr("qkv", name[2]) - "qkv"] = value;
}

/* The tables of `stsa run` stay in this file and cmd_run.c, names as string
 * literals: tests/test_cli_usage.sh reads them from there to check the help. */
const cli_opt RUN_INPUT_OPTIONS[] = {
    {.help = "input:"},
    {.name = "--in",
     .metavar = "FILE",
     CLI_STR(run_input_opts, in),
     .help = "safetensors file holding q, k and v"},
    {.name = "--q",
     .metavar = "NAME",
     CLI_CALL(set_tensor_name),
     .help = "their tensor names (default q, k, v)"},
    {.name = "--k", .metavar = "NAME", CLI_CALL(set_tensor_name)},
    {.name = "--v", .metavar = "NAME", CLI_CALL(set_tensor_name)},
    {.name = "--in-q",
     .metavar = "FILE",
     CLI_STR(run_input_opts, npy[0]),
     .help = "or three .npy files"},
    {.name = "--in-k", .metavar = "FILE", CLI_STR(run_input_opts, npy[1])},
    {.name = "--in-v", .metavar = "FILE", CLI_STR(run_input_opts, npy[2])},
    {.name = "--layout",
     .metavar = "L",
     CLI_CHOICE(run_input_opts, layout, LAYOUT_NAME, NULL),
     .help = "bshd [B,S,H,D], bhsd [B,H,S,D] or shd [S,H,D] (required)"},
    {0}};

void run_geo_defaults(run_geo_opts *o) {
  *o = (run_geo_opts){NULL, -1, -1, -1, -1, -1, -1, -1.0, -1, -1, -1, -1};
}

/* A key tile: the kernels take keys 16 at a time. */
static int kv_tile(const char *name, const char *value) {
  int t = (int)cli_parse_int(name, value, 16, 4096);
  if (t % 16)
    cli_die("%s %d must be a multiple of 16 (keys are processed 16 at a time)", name, t);
  return t;
}

static void set_kv_tile(void *base, const char *name, const char *value) {
  ((run_geo_opts *)base)->kv_tile = kv_tile(name, value);
}

/* --tile: one size for q and kv tiles, so a key tile's rules hold. */
static void set_tile(void *base, const char *name, const char *value) {
  run_geo_opts *o = base;
  o->q_tile = o->kv_tile = kv_tile(name, value);
}

static const char *const TEXT_POS_NAMES[4] = {"prefix", "suffix", "none", NULL};
static const int TEXT_POS_VALUES[3] = {STSA_TEXT_PREFIX, STSA_TEXT_SUFFIX,
                                       STSA_TEXT_NONE};
#define BIG ((int64_t)1 << 30)

const cli_opt RUN_GEO_OPTIONS[] = {
    {.help = "geometry and SVG settings:"},
    {.name = "--frames",
     .metavar = "F",
     CLI_I64(run_geo_opts, frames, 1, BIG),
     .help = "latent frames and tokens per side"},
    {.name = "--height", .metavar = "Hp", CLI_I64(run_geo_opts, height, 1, BIG)},
    {.name = "--width", .metavar = "Wp", CLI_I64(run_geo_opts, width, 1, BIG)},
    {.name = "--text",
     .metavar = "N",
     CLI_I64(run_geo_opts, text, 0, BIG),
     .help = "text tokens inside self-attention (default 0)"},
    {.name = "--text-pos",
     .metavar = "P",
     CLI_CHOICE(run_geo_opts, text_pos, TEXT_POS_NAMES, TEXT_POS_VALUES),
     .help = "prefix or suffix (required when --text > 0), or none"},
    {.name = "--text-real",
     .metavar = "M",
     CLI_I64(run_geo_opts, text_real, 0, BIG),
     .help = "real text tokens of a suffix, the rest padding"},
    {.name = "--preset",
     .metavar = "NAME",
     CLI_STR(run_geo_opts, preset),
     .help = "wan21-480p, wan21-720p, hunyuan-720p, hunyuan-480p,\n"
             "cogvideox15: geometry, density, dense steps/layers; flags win"},
    {.name = "--density",
     .metavar = "D",
     CLI_DOUBLE(run_geo_opts, density, 1e-6, 1.0),
     .help = "kept fraction of pairs aimed at, in (0, 1] (default 0.30)"},
    {.name = "--sample-rows",
     .metavar = "R",
     CLI_I64(run_geo_opts, sample_rows, 1, BIG),
     .help = "query rows SVG profiles (default 64)"},
    {.name = "--sink-frames",
     .metavar = "K",
     CLI_I64(run_geo_opts, sink_frames, 0, BIG),
     .help = "frames every query sees (default 1)"},
    {.name = "--tile",
     .metavar = "T",
     CLI_CALL(set_tile),
     .help = "tile sizes of the plans"},
    {.name = "--q-tile", .metavar = "T", CLI_INT(run_geo_opts, q_tile, 6, 4096)},
    {.name = "--kv-tile", .metavar = "T", CLI_CALL(set_kv_tile)},
    {0}};

/* ---- loading Q, K, V ----------------------------------------------------- */

/* A shape as "[2,3,4]" ("[]" for rank 0); cut if buf is short. */
static const char *shape_str(char *buf, size_t len, int rank, const int64_t *shape) {
  size_t used = (size_t)snprintf(buf, len, "[");
  for (int i = 0; i < rank && used < len; i++)
    used += (size_t)snprintf(buf + used, len - used, "%s%lld", i ? "," : "",
                             (long long)shape[i]);
  if (used < len)
    snprintf(buf + used, len - used, "]");
  return buf;
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
