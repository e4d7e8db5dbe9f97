/*
 * svg2_layers.c — the layer store of an stsa_svg2 session: each layer's
 * centroids, labels and cached plans (layer_state), found by layer in an
 * open-addressing hash map.
 */
#include <stdlib.h>

#include "mask/cluster_plan.h"
#include "mask/mask.h"
#include "svg/svg2_internal.h"

/* Frees a layer's state; the slot keeps its layer. */
static void layer_clear(layer_state *ls, int64_t H) {
  for (int64_t i = 0; ls->plans && i < ls->B * H; i++)
    stsa_plan_free(ls->plans[i]);
  free(ls->plans);
  free(ls->first_met);
  free(ls->auto_memory);
  free(ls->auto_budget);
  free(ls->sig);
  free(ls->qc);
  free(ls->kc);
  free(ls->lq);
  free(ls->lk);
  free(ls->tilt);
  free(ls->tilt_at);
  free(ls->tilt_valid);
  *ls = (layer_state){.layer = ls->layer};
}

/* The slot of `layer` in a table of `slots` (a power of two, not full), or
 * the empty slot where it goes. Layers are hashed: consecutive ones would
 * otherwise fill one run of slots. */
static layer_state *layer_slot(layer_state *table, int64_t slots, int64_t layer) {
  const uint64_t mask = (uint64_t)slots - 1;
  for (uint64_t i = stsa_hash_mix(0x6c61796572ull, (uint64_t)layer) & mask;;
       i = (i + 1) & mask)
    if (table[i].layer == layer || table[i].layer < 0)
      return &table[i];
}

/* Doubles the layer store (8 slots at first), moving every state. */
static int layers_grow(stsa_svg2 *s) {
  const int64_t slots = s->layer_slots ? 2 * s->layer_slots : 8;
  layer_state *table = malloc(sizeof *table * (size_t)slots);
  if (!table)
    return -1;
  for (int64_t i = 0; i < slots; i++)
    table[i] = (layer_state){.layer = -1};
  for (int64_t i = 0; i < s->layer_slots; i++)
    if (s->layers[i].layer >= 0)
      *layer_slot(table, slots, s->layers[i].layer) = s->layers[i];
  free(s->layers);
  s->layers = table;
  s->layer_slots = slots;
  return 0;
}

/* The state of `layer` (>= 0) for B batch entries; a new layer or batch
 * size starts cold. */
layer_state *stsa_svg2_layer_for(stsa_svg2 *s, int64_t layer, int64_t B) {
  layer_state *ls = s->layers ? layer_slot(s->layers, s->layer_slots, layer) : NULL;
  if (!ls || ls->layer < 0) {
    if (2 * (s->layer_count + 1) > s->layer_slots) {
      if (layers_grow(s) != 0)
        return NULL;
      ls = layer_slot(s->layers, s->layer_slots, layer);
    }
    ls->layer = layer;
    s->layer_count++;
  }
  if (ls->qc && ls->B == B)
    return ls;
  layer_clear(ls, s->H);
  const size_t heads = (size_t)(B * s->H);
  ls->B = B;
  ls->qc = malloc(sizeof(float) * heads * (size_t)(s->QC * s->D));
  ls->kc = malloc(sizeof(float) * heads * (size_t)(s->KC * s->D));
  ls->lq = malloc(sizeof(int32_t) * heads * (size_t)s->L);
  ls->lk = malloc(sizeof(int32_t) * heads * (size_t)s->L);
  ls->sig = calloc(heads, sizeof *ls->sig);
  ls->plans = calloc(heads, sizeof *ls->plans);
  ls->first_met = calloc(heads, 1);
  ls->auto_memory = calloc(heads + (size_t)B, 1);
  ls->auto_budget = calloc((size_t)B, sizeof *ls->auto_budget);
  if (!ls->qc || !ls->kc || !ls->lq || !ls->lk || !ls->sig || !ls->plans ||
      !ls->first_met || !ls->auto_memory || !ls->auto_budget) {
    layer_clear(ls, s->H); /* the slot stays, empty: the next call retries */
    return NULL;
  }
  return ls;
}

void stsa_svg2_layers_free(stsa_svg2 *s) {
  for (int64_t i = 0; i < s->layer_slots; i++)
    if (s->layers[i].layer >= 0)
      layer_clear(&s->layers[i], s->H);
  free(s->layers);
  s->layers = NULL;
  s->layer_slots = s->layer_count = 0;
}

uint8_t *stsa_svg2_auto_memory(stsa_svg2 *s, int64_t layer, int64_t B, int *warm,
                               double **budget) {
  layer_state *ls = stsa_svg2_layer_for(s, layer, B);
  *warm = ls && ls->valid;
  *budget = ls ? ls->auto_budget : NULL;
  return ls ? ls->auto_memory : NULL;
}
