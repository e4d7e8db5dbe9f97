/*
 * presets.c — Sparse VideoGen's published settings per model and resolution
 * (../shared/reference/sparse-videogen.md, "When sparsity is used" and
 * "Model geometries"). Dense steps and layers are the published fractions of
 * the run's steps and the model's layers, rounded to whole steps/layers.
 */
#include <stddef.h>
#include <string.h>

#include "stsa.h"
#include "svg/compat.h"

typedef struct svg_preset {
  const char *name;
  stsa_svg_config cfg;
} svg_preset;

/* One preset: geometry (text tokens all real), heads, head dim, density, the
 * dense steps and layers, sampled rows, the model's schedule, and SVG2's
 * query and key clusters (method stays SVG: a caller sets method to use
 * them, with top-p 0.9, at least 10% of the key clusters, 50 cold and 2 warm
 * k-means iterations, as Sparse VideoGen 2 publishes). */
#define PRESET(name_, F_, Hp_, Wp_, text_, pos_, heads_, dim_, density_, dsteps_,        \
               dlayers_, rows_, steps_, layers_, qc_, kc_)                               \
  {                                                                                      \
    name_, {                                                                             \
      .size = sizeof(stsa_svg_config), .geometry = {F_, Hp_, Wp_, text_, text_, pos_},   \
      .heads = heads_, .head_dim = dim_, .density = density_, .dense_steps = dsteps_,    \
      .dense_layers = dlayers_, .sample_rows = rows_, .sink_frames = 1, .steps = steps_, \
      .layers = layers_, .svg2 = {                                                       \
        .size = sizeof(stsa_svg2_config),                                                \
        .q_clusters = qc_,                                                               \
        .kv_clusters = kc_,                                                              \
        .top_p = 0.9,                                                                    \
        .min_kv_fraction = 0.10,                                                         \
        .kmeans_iters_cold = 50,                                                         \
        .kmeans_iters_warm = 2                                                           \
      }                                                                                  \
    }                                                                                    \
  }

/* clang-format off */
static const svg_preset PRESETS[] = {
    /* Wan 2.1 T2V 1.3B at 480p (832x480, 81 frames): 0.30 kept, first 20% of
     * 50 steps and layer 0 dense (SVG's Wan scripts) */
    PRESET("wan21-480p", 21, 30, 52, 0, STSA_TEXT_NONE, 12, 128, 0.30, 10, 1, 64, 50, 30,
           130, 433),
    /* Wan 2.1/2.2 14B at 720p (1280x720, 81 frames): 0.30, 20% of 50 steps,
     * layer 0 */
    PRESET("wan21-720p", 21, 45, 80, 0, STSA_TEXT_NONE, 40, 128, 0.30, 10, 1, 64, 50, 40,
           300, 1000),
    /* HunyuanVideo 720p (129 frames): 256 text tokens as a suffix (the real
     * prompt length varies; set text_real per prompt), 0.25, first 10% of
     * 50 steps, 1 of 60 layers */
    PRESET("hunyuan-720p", 33, 45, 80, 256, STSA_TEXT_SUFFIX, 24, 128, 0.25, 5, 1, 64, 50, 60,
           400, 1000),
    /* HunyuanVideo 480p: 0.20, first 4% of 50 steps, no dense layer */
    PRESET("hunyuan-480p", 33, 30, 45, 256, STSA_TEXT_SUFFIX, 24, 128, 0.20, 2, 0, 64, 50, 60,
           150, 375),
    /* CogVideoX 1.5 (768x1360): 226 text tokens as a prefix, 48 heads of 64,
     * 0.25, first 20% of 50 steps, layer 0; 32 sampled rows */
    PRESET("cogvideox15", 11, 48, 85, 226, STSA_TEXT_PREFIX, 48, 64, 0.25, 10, 1, 32, 50, 42,
           178, 594),
};
/* clang-format on */

#define PRESET_COUNT ((int)(sizeof PRESETS / sizeof PRESETS[0]))

const char *stsa_svg_preset_name(int i) {
  return i >= 0 && i < PRESET_COUNT ? PRESETS[i].name : NULL;
}

stsa_status stsa_svg_preset(const char *name, stsa_svg_config *cfg) {
  if (!name || !cfg)
    return STSA_ERR_NULL_ARG;
  stsa_errbuf err;
  for (int i = 0; i < PRESET_COUNT; i++)
    if (!strcmp(PRESETS[i].name, name))
      return stsa_svg_config_write(cfg, &PRESETS[i].cfg,
                                   &err); /* in the caller's layout */
  return STSA_ERR_BAD_PARAM;
}
