/* geometry.c — video geometry validation, token coordinates and orders. */
#include "mask/geometry.h"

#include "core/error.h"

const char *stsa_geo_check(const stsa_geometry *g) {
  if (!g)
    return "geometry is NULL";
  if (g->frames < 0 || g->height < 0 || g->width < 0)
    return "frames, height and width must be >= 0";
  if (g->frames > 0 && (g->height < 1 || g->width < 1))
    return "a geometry with frames needs height >= 1 and width >= 1";
  if (g->text < 0 || g->text_real < 0 || g->text_real > g->text)
    return "text tokens must satisfy 0 <= text_real <= text";
  if (g->text_pos != STSA_TEXT_NONE && g->text_pos != STSA_TEXT_PREFIX &&
      g->text_pos != STSA_TEXT_SUFFIX)
    return "text_pos is not an stsa_text_pos";
  if (g->text > 0 && g->text_pos == STSA_TEXT_NONE)
    return "text > 0 needs text_pos PREFIX or SUFFIX";
  /* Divisions instead of products so that the check itself cannot overflow. */
  int64_t room = STSA_MAX_TOKENS - g->text;
  if (room < 0)
    return "too many tokens (limit 2^40)";
  if (g->frames > 0 &&
      (g->height > room / g->frames || g->width > room / g->frames / g->height))
    return "too many tokens (limit 2^40)";
  return NULL;
}

void stsa_geo_init(stsa_geo *geo, const stsa_geometry *g) {
  geo->F = g->frames;
  geo->Hp = g->frames > 0 ? g->height : 0;
  geo->Wp = g->frames > 0 ? g->width : 0;
  geo->P = geo->Hp * geo->Wp;
  geo->L = geo->F * geo->P;
  geo->C = g->text;
  geo->R = g->text_real;
  geo->v0 = g->text_pos == STSA_TEXT_PREFIX ? g->text : 0;
  geo->t0 = g->text_pos == STSA_TEXT_PREFIX ? 0 : geo->L;
  geo->N = geo->C + geo->L;
}

int stsa_geometry_same(const stsa_geometry *a, const stsa_geometry *b) {
  return a->frames == b->frames && a->height == b->height && a->width == b->width &&
         a->text == b->text && a->text_real == b->text_real && a->text_pos == b->text_pos;
}

int64_t stsa_geometry_tokens(const stsa_geometry *g) {
  if (stsa_geo_check(g))
    return -1;
  stsa_geo geo;
  stsa_geo_init(&geo, g);
  return geo.N;
}

stsa_tok_kind stsa_geo_kind(const stsa_geo *geo, int64_t native) {
  if (native < 0 || native >= geo->N)
    return STSA_TOK_NONE;
  const int64_t v = native - geo->v0;
  if (v >= 0 && v < geo->L)
    return STSA_TOK_VIDEO;
  return native - geo->t0 < geo->R ? STSA_TOK_TEXT_REAL : STSA_TOK_TEXT_PAD;
}

stsa_tok stsa_geo_token(const stsa_geo *geo, int64_t native) {
  stsa_tok t = {stsa_geo_kind(geo, native), 0, 0, 0, 0};
  if (t.kind == STSA_TOK_VIDEO) {
    const int64_t v = native - geo->v0;
    t.f = v / geo->P;
    t.p = v % geo->P;
    t.y = t.p / geo->Wp;
    t.x = t.p % geo->Wp;
  }
  return t;
}

int64_t stsa_geo_video_pos(const stsa_geo *geo, stsa_order order, int64_t f, int64_t p) {
  switch (order) {
  case STSA_ORDER_POSITION_MAJOR:
    return p * geo->F + f;
  case STSA_ORDER_SINK_FIRST:
    return f == 0 ? p : geo->P + p * (geo->F - 1) + (f - 1);
  default:
    return f * geo->P + p;
  }
}

int64_t stsa_geo_to_native(const stsa_geo *geo, stsa_order order, int64_t pos) {
  int64_t j = pos - geo->v0;
  if (j < 0 || j >= geo->L || order == STSA_ORDER_NATIVE)
    return pos;
  int64_t f, p;
  if (order == STSA_ORDER_POSITION_MAJOR) {
    f = j % geo->F;
    p = j / geo->F;
  } else if (j < geo->P) { /* SINK_FIRST, frame 0 */
    f = 0;
    p = j;
  } else { /* F >= 2 here, since j < L = F * P */
    f = 1 + (j - geo->P) % (geo->F - 1);
    p = (j - geo->P) / (geo->F - 1);
  }
  return geo->v0 + f * geo->P + p;
}

int64_t stsa_geo_to_pos(const stsa_geo *geo, stsa_order order, int64_t native) {
  int64_t v = native - geo->v0;
  if (v < 0 || v >= geo->L)
    return native;
  return geo->v0 + stsa_geo_video_pos(geo, order, v / geo->P, v % geo->P);
}

stsa_status stsa_order_permutation(const stsa_geometry *g, stsa_order order,
                                   int64_t *perm) {
  if (!g || !perm)
    return STSA_ERR_NULL_ARG;
  if (stsa_geo_check(g))
    return STSA_ERR_BAD_SHAPE;
  if ((unsigned)order >= STSA_ORDER_COUNT_)
    return STSA_ERR_BAD_PARAM;
  stsa_geo geo;
  stsa_geo_init(&geo, g);
  for (int64_t pos = 0; pos < geo.N; pos++)
    perm[pos] = stsa_geo_to_native(&geo, order, pos);
  return STSA_OK;
}
