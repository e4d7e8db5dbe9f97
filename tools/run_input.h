/*
 * run_input.h — what `stsa run` and `stsa plot` share: reading Q, K, V from a
 * safetensors file or three .npy files, the video geometry and SVG settings
 * from a preset and flags (their option tables) and the per-kind masks of
 * the SVG session (run_config.c). Every failure exits through cli_die with a
 * message naming the flag or tensor at fault.
 */
#ifndef STSA_TOOLS_RUN_INPUT_H
#define STSA_TOOLS_RUN_INPUT_H

#include <stddef.h>
#include <stdint.h>

#include "cli_files.h"
#include "cli_options.h"
#include "cli_util.h"
#include "stsa.h"
#include "stsa_io.h"

/* How the tensors sit in the file: [B,S,H,D], [B,H,S,D] or [S,H,D]. */
typedef enum run_layout { RUN_BSHD = 0, RUN_BHSD = 1, RUN_SHD = 2 } run_layout;

const char *run_layout_name(run_layout layout);

/* Input flags: --in FILE [--q/--k/--v NAME] or --in-q/--in-k/--in-v FILE.npy,
 * plus --layout. */
typedef struct run_input_opts {
  const char *in;       /* safetensors path, or NULL */
  const char *names[3]; /* tensor names of q, k, v in it */
  const char *npy[3];   /* .npy paths of q, k, v, or NULL */
  int layout;           /* a run_layout, -1 until --layout is seen */
} run_input_opts;

void run_input_defaults(run_input_opts *o);
/* Their options (for a cli_opt_set on a run_input_opts), with help lines. */
extern const cli_opt RUN_INPUT_OPTIONS[];

/* Geometry and SVG flags; -1 (or NULL) means "not given". */
typedef struct run_geo_opts {
  const char *preset;
  int64_t frames, height, width, text, text_real;
  int text_pos; /* stsa_text_pos or -1 */
  double density;
  int64_t sample_rows, sink_frames;
  int q_tile, kv_tile; /* the session's tiles; -1: the preset's (automatic) */
} run_geo_opts;

void run_geo_defaults(run_geo_opts *o);
/* Their options (for a cli_opt_set on a run_geo_opts), with help lines. */
extern const cli_opt RUN_GEO_OPTIONS[];

/* The SVG configuration: the preset (if any), overridden by every flag given;
 * heads and head_dim come from the caller (the tensors). Without a preset:
 * density 0.30, no dense steps or layers, 64 sampled rows, a one-frame sink.
 * sample_rows is capped at the number of video tokens unless set by flag
 * (then a larger value is an error). Dies on a missing or inconsistent
 * geometry. `note` (may be NULL) receives what was adjusted, if anything. */
void run_resolve_config(const run_geo_opts *o, int64_t heads, int64_t head_dim,
                        stsa_svg_config *cfg, char *note, size_t note_len);

/* Q, K, V as [B, S, H, D] views on the file data. */
typedef struct run_qkv {
  stsa_tensor t[3];      /* q, k, v */
  int rank;              /* rank in the file: 4, or 3 for shd */
  int64_t file_shape[4]; /* q's shape as stored */
  const char *label[3];  /* "tensor 'q'" or the .npy path, for messages */
  char label_buf[3][96];
  int copied[3];           /* 1: data copied (misaligned in the mapping, or .npy) */
  cli_file_id ids[3];      /* the input files (device, inode) */
  const char *id_names[3]; /* their flags: "--in" or "--in-q", ... */
  int n_ids;
  stsa_st_file *st;
  stsa_npy_array npy[3];
  void *copy[3];
} run_qkv;

/* Opens and validates the inputs: ranks for the layout, equal shapes, a
 * non-empty tensor. Data stays in the mapping when it is aligned. */
void run_load_qkv(const run_input_opts *o, run_qkv *qkv);
void run_free_qkv(run_qkv *qkv);

/* Dies unless the tensors hold N = text + F*Hp*Wp tokens. */
void run_check_tokens(const stsa_svg_config *cfg, const run_qkv *qkv, int layout);

/* The mask and memory orders the SVG session for cfg runs heads of this kind
 * with (stsa_svg_kind_mask of a one-head session, then freed); the orders may
 * be NULL. */
stsa_mask *run_kind_mask(stsa_ctx *ctx, const stsa_svg_config *cfg, stsa_head_kind kind,
                         stsa_order *q_order, stsa_order *kv_order);
/* Window widths a session derives for cfg (a one-head session, then freed). */
void run_session_windows(stsa_ctx *ctx, const stsa_svg_config *cfg, stsa_svg_windows *w);

/* "spatial", "temporal" (NULL-terminated) and their stsa_head_kind values:
 * the choices of --head-kind and --kind. */
extern const char *const RUN_KIND_NAMES[3];
extern const int RUN_KIND_VALUES[2];

#endif
