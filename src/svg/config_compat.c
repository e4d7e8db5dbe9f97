/*
 * config_compat.c — stsa_svg_config as laid out before SVG2's settings
 * moved into their sub-struct (see compat.h).
 */
#include <stddef.h>
#include <string.h>

#include "core/sized.h"
#include "svg/compat.h"

/* The layout with SVG2's fields inline (0.x releases with SVG2 and the
 * error budget); the first release's ended at `method`. */
typedef struct svg_config_inline {
  size_t size;
  stsa_geometry geometry;
  int64_t heads, head_dim;
  double density;
  int64_t dense_steps, dense_layers, sample_rows, sink_frames;
  uint64_t seed;
  int64_t steps, layers;
  int q_tile, kv_tile;
  int method;
  int64_t q_clusters, kv_clusters;
  double top_p, min_kv_fraction;
  int64_t kmeans_iters_cold, kmeans_iters_warm;
  double max_rel_error;
} svg_config_inline;

/* The fields up to kv_tile are where they always were. */
#define SHARED_PREFIX offsetof(svg_config_inline, method)
_Static_assert(offsetof(stsa_svg_config, method) == SHARED_PREFIX,
               "stsa_svg_config: the fields before method keep their offsets");
_Static_assert(sizeof(stsa_svg_config) > sizeof(svg_config_inline),
               "stsa_svg_config: a new layout must be larger than every old one");
/* the enums that replaced ints (stsa_svg_config.method, the *_name
 * functions' arguments) keep the int's ABI */
_Static_assert(sizeof(stsa_svg_method) == sizeof(int) &&
                   sizeof(stsa_budget_action) == sizeof(int) &&
                   sizeof(stsa_auto_candidate) == sizeof(int) &&
                   sizeof(stsa_auto_reason) == sizeof(int),
               "the SVG enums have the ABI of the ints they replaced");

stsa_status stsa_svg_config_read(const stsa_svg_config *cfg, stsa_svg_config *local,
                                 stsa_errbuf *err) {
  size_t size;
  memcpy(&size, cfg, sizeof size);
  if (size >= sizeof *local) {
    STSA_TRY(stsa_sized_read(local, cfg, sizeof *local, sizeof *local, "stsa_svg_config",
                             err));
    /* a newer caller's svg2 may be longer, up to what its config's size
     * leaves for it (the extra bytes are zero: checked above) */
    const size_t most = size - offsetof(stsa_svg_config, svg2);
    STSA_RETURN_IF(
        local->svg2.size != 0 &&
            (local->svg2.size < sizeof local->svg2 || local->svg2.size > most),
        err, STSA_ERR_BAD_PARAM,
        "stsa_svg_config.svg2.size = %zu, expected 0 or sizeof(stsa_svg2_config) "
        "(%zu in this library; at most %zu in a config of %zu bytes)",
        local->svg2.size, sizeof local->svg2, most, size);
    local->svg2.size = sizeof local->svg2;
    return STSA_OK;
  }
  svg_config_inline old;
  STSA_TRY(stsa_sized_read(&old, cfg, SHARED_PREFIX, sizeof old, "stsa_svg_config", err));
  memset(local, 0, sizeof *local);
  memcpy(local, &old, SHARED_PREFIX);
  local->size = sizeof *local;
  local->method = (stsa_svg_method)old.method;
  local->max_rel_error = old.max_rel_error;
  local->svg2 = (stsa_svg2_config){
      sizeof local->svg2,  old.q_clusters,        old.kv_clusters,      old.top_p,
      old.min_kv_fraction, old.kmeans_iters_cold, old.kmeans_iters_warm};
  return STSA_OK;
}

stsa_status stsa_svg_config_write(stsa_svg_config *cfg, const stsa_svg_config *src,
                                  stsa_errbuf *err) {
  /* the first release's layout is the shortest the library writes */
  STSA_TRY(stsa_sized_check_out(cfg, SHARED_PREFIX, "stsa_svg_config", err));
  size_t size;
  memcpy(&size, cfg, sizeof size);
  if (size >= sizeof *src) {
    stsa_sized_write(cfg, src, sizeof *src);
    return STSA_OK;
  }
  svg_config_inline old;
  memset(&old, 0, sizeof old); /* padding too: it is copied out */
  memcpy(&old, src, SHARED_PREFIX);
  old.method = (int)src->method;
  old.q_clusters = src->svg2.q_clusters;
  old.kv_clusters = src->svg2.kv_clusters;
  old.top_p = src->svg2.top_p;
  old.min_kv_fraction = src->svg2.min_kv_fraction;
  old.kmeans_iters_cold = src->svg2.kmeans_iters_cold;
  old.kmeans_iters_warm = src->svg2.kmeans_iters_warm;
  old.max_rel_error = src->max_rel_error;
  stsa_sized_write(cfg, &old, sizeof old);
  return STSA_OK;
}
