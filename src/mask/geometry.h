/*
 * geometry.h — token coordinates of a video geometry and the O(1) maps
 * between a position in a token order and the native (frame-major) index.
 *
 * Native layout: prefix text [0, C), then video; or video [0, L) then a
 * suffix text [L, L + C). Text never moves between orders, so an order only
 * re-numbers the video block [v0, v0 + L).
 */
#ifndef STSA_MASK_GEOMETRY_H
#define STSA_MASK_GEOMETRY_H

#include <stdint.h>

#include "stsa.h"

/* Token counts are capped so that every index and window sum in the mask code
 * fits in int64 with room to spare (2^40 is far beyond any video). */
#define STSA_MAX_TOKENS ((int64_t)1 << 40)

/* A validated geometry with its derived sizes. */
typedef struct stsa_geo {
  int64_t F, Hp, Wp; /* frames, height, width in patches */
  int64_t P, L;      /* tokens per frame, video tokens */
  int64_t C, R;      /* text tokens, real text tokens (the first R of them) */
  int64_t v0;        /* native index of the first video token */
  int64_t t0;        /* native index of the first text token */
  int64_t N;         /* C + L */
} stsa_geo;

typedef enum stsa_tok_kind {
  STSA_TOK_NONE = 0, /* outside the sequence */
  STSA_TOK_VIDEO,
  STSA_TOK_TEXT_REAL,
  STSA_TOK_TEXT_PAD,
} stsa_tok_kind;

/* Coordinates of one token; f, p, y, x are meaningful for video only. */
typedef struct stsa_tok {
  stsa_tok_kind kind;
  int64_t f, p, y, x;
} stsa_tok;

/* NULL when `g` is a valid geometry, else a message saying what is wrong. */
const char *stsa_geo_check(const stsa_geometry *g);
/* Derived sizes of a geometry that passed stsa_geo_check. */
void stsa_geo_init(stsa_geo *geo, const stsa_geometry *g);
/* 1 when both describe the same token sequence field by field. */
int stsa_geometry_same(const stsa_geometry *a, const stsa_geometry *b);

stsa_tok stsa_geo_token(const stsa_geo *geo, int64_t native);
/* The kind of stsa_geo_token alone (no divisions: for loops over every
 * token that need no coordinates). */
stsa_tok_kind stsa_geo_kind(const stsa_geo *geo, int64_t native);

/* Offset, inside the video block, of video token (f, p) in `order`. */
int64_t stsa_geo_video_pos(const stsa_geo *geo, stsa_order order, int64_t f, int64_t p);
/* Position in `order` -> native index, and back; both O(1). */
int64_t stsa_geo_to_native(const stsa_geo *geo, stsa_order order, int64_t pos);
int64_t stsa_geo_to_pos(const stsa_geo *geo, stsa_order order, int64_t native);

#endif
