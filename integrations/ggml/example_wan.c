/*
 * example_wan.c — the smallest use of the integration: one Wan-style
 * self-attention (sd.cpp's graph, f32 Q, f16 K/V) computed by ggml with stsa
 * nodes in place of ggml_flash_attn_ext, dense and then SVG, on ggml's own
 * threads, with the status read after ggml_graph_compute.
 */
#include <math.h>
#include <stdio.h>

#include "ggml-cpu.h"
#include "wan_attn.h"

int main(void) {
  ggml_cpu_init();
  const stsa_geometry g = {6, 12, 16, 0, 0, STSA_TEXT_NONE}; /* F x Hp x Wp */
  const int64_t H = 4, D = 64, L = stsa_geometry_tokens(&g);
  /* the SVG session's configuration: the frame grid Wan's forward knows */
  stsa_svg_config cfg = wan_svg_config(&g, H, D, 0.3, 48);
  char msg[256];
  stsa_ggml *sg = NULL;
  if (stsa_ggml_create(&cfg, &sg, msg, sizeof msg) != STSA_OK) {
    fprintf(stderr, "stsa_ggml_create: %s\n", msg);
    return 1;
  }
  struct ggml_init_params p = {2 * wan_ctx_bytes(L, H * D, 0), NULL, false};
  struct ggml_context *ctx = ggml_init(p);
  /* Wan's projections: [C, L, 1] f32 (here the built-in workload) */
  struct ggml_tensor *qkv[3];
  wan_workload(ctx, &g, H, D, NULL, 1, qkv);
  stsa_head_kind kinds[4];
  wan_attn dense = {.mode = WAN_STSA_DENSE, .sg = sg};
  wan_attn svg = {.mode = WAN_STSA_SVG, .sg = sg, .layer = 1, .step = 10, .kinds = kinds};
  struct ggml_tensor *o1 = wan_self_attention(ctx, qkv[0], qkv[1], qkv[2], H, &dense);
  struct ggml_tensor *o2 = wan_self_attention(ctx, qkv[0], qkv[1], qkv[2], H, &svg);
  struct ggml_cgraph *gf = ggml_new_graph(ctx);
  ggml_build_forward_expand(gf, o1);
  ggml_build_forward_expand(gf, o2);
  ggml_graph_compute_with_ctx(ctx, gf, 2);
  const char *why;
  stsa_status st = stsa_ggml_status(sg, &why);
  if (st != STSA_OK) {
    fprintf(stderr, "stsa nodes: %s\n", why);
    return 1;
  }
  double e = 0, r = 0;
  const float *a = o1->data, *b = o2->data;
  for (int64_t i = 0; i < L * H * D; i++) {
    e += ((double)b[i] - a[i]) * ((double)b[i] - a[i]);
    r += (double)a[i] * a[i];
  }
  printf("%lld tokens, %lld heads of %lld: SVG kinds", (long long)L, (long long)H,
         (long long)D);
  for (int64_t h = 0; h < H; h++)
    printf(" %s", stsa_head_kind_name(kinds[h]));
  printf("; SVG vs dense relative L2 %.3g\n", r > 0 ? sqrt(e / r) : 0.0);
  ggml_free(ctx);
  stsa_ggml_free(sg);
  return 0;
}
