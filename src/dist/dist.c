/*
 * dist.c — the distributed context: communicators, errors every rank
 * agrees on, and the start of every call (signatures, shard offsets).
 */
#define _POSIX_C_SOURCE 200809L
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dist/dist_internal.h"

double dist_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

uint64_t dist_hash(uint64_t h, const void *p, size_t n) {
  const unsigned char *c = p;
  for (size_t i = 0; i < n; i++)
    h = (h ^ c[i]) * 0x100000001b3ull;
  return h;
}

uint64_t dist_hash_geometry(uint64_t h, const stsa_geometry *g) {
  const int64_t f[] = {g->frames, g->height,    g->width,
                       g->text,   g->text_real, g->text_pos};
  return dist_hash(h, f, sizeof f);
}

const char *stsa_dist_scheme_name(stsa_dist_scheme scheme) {
  static const char *const names[STSA_DIST_SCHEME_COUNT_] = {"ulysses", "ring", "hybrid"};
  return (unsigned)scheme < STSA_DIST_SCHEME_COUNT_ ? names[scheme] : "unknown";
}

stsa_status dist_fail(stsa_dist *d, stsa_status code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(d->err, DIST_MSG, fmt, ap);
  va_end(ap);
  return code;
}

stsa_status dist_fail_ctx(stsa_dist *d, stsa_status code, const char *what) {
  const char *m = stsa_ctx_last_error(d->ctx);
  return dist_fail(d, code, "%s: %s", what, m && *m ? m : stsa_status_str(code));
}

stsa_status dist_fail_mpi(stsa_dist *d, int mpi_rc, const char *what) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(mpi_rc, text, &len) != MPI_SUCCESS)
    snprintf(text, sizeof text, "error %d", mpi_rc);
  return dist_fail(d, STSA_ERR_IO, "MPI: %s failed: %s", what, text);
}

/* The agreed message travels with its status. */
typedef struct agreed {
  int status;
  char msg[DIST_MSG];
} agreed;

static stsa_status agree_on(stsa_dist *d, stsa_status st, const char *msg) {
  if (d->agreed_failure && st != STSA_OK)
    return st;
  int mine = st != STSA_OK ? d->rank : INT_MAX, first = INT_MAX;
  int rc = MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, d->comm);
  if (rc != MPI_SUCCESS)
    return dist_fail_mpi(d, rc, "MPI_Allreduce (agreeing on a status)");
  if (first == INT_MAX) {
    d->err[0] = '\0';
    return STSA_OK;
  }
  agreed a = {0};
  if (d->rank == first) {
    a.status = (int)st;
    snprintf(a.msg, sizeof a.msg, "%s", msg && *msg ? msg : stsa_status_str(st));
  }
  rc = MPI_Bcast(&a, (int)sizeof a, MPI_BYTE, first, d->comm);
  if (rc != MPI_SUCCESS)
    return dist_fail_mpi(d, rc, "MPI_Bcast (the failing rank's message)");
  snprintf(d->err, sizeof d->err, "rank %d: %s", first, a.msg);
  d->agreed_failure = 1;
  return (stsa_status)a.status;
}

stsa_status dist_agree(stsa_dist *d, stsa_status st) {
  char msg[DIST_MSG];
  snprintf(msg, sizeof msg, "%.*s", DIST_MSG - 1, d->err);
  return agree_on(d, st, msg);
}

stsa_status stsa_dist_agree(stsa_dist *d, stsa_status st, const char *msg) {
  if (!d)
    return STSA_ERR_NULL_ARG;
  dist_call_start(d);
  return agree_on(d, st, msg);
}

const char *stsa_dist_last_error(const stsa_dist *d) { return d ? d->err : ""; }
int stsa_dist_rank(const stsa_dist *d) { return d ? d->rank : -1; }
int stsa_dist_size(const stsa_dist *d) { return d ? d->size : 0; }

static void free_comms(stsa_dist *d) {
  if (d->ucomm != MPI_COMM_NULL)
    MPI_Comm_free(&d->ucomm);
  if (d->rcomm != MPI_COMM_NULL)
    MPI_Comm_free(&d->rcomm);
  d->comm_u_degree = 0;
}

/* Checks a config on this rank; the caller agrees on the result. */
static stsa_status check_config(stsa_dist *d, const stsa_dist_config *cfg) {
  if (!cfg)
    return STSA_OK;
  if (cfg->size < sizeof(size_t) + sizeof(stsa_dist_scheme) ||
      cfg->size > sizeof *cfg + 1024)
    return dist_fail(d, STSA_ERR_BAD_PARAM,
                     "dist: config size %zu (set it to sizeof(stsa_dist_config))",
                     cfg->size);
  stsa_dist_config c = {0};
  memcpy(&c, cfg, cfg->size < sizeof c ? cfg->size : sizeof c);
  if ((unsigned)c.scheme >= STSA_DIST_SCHEME_COUNT_)
    return dist_fail(d, STSA_ERR_BAD_PARAM,
                     "dist: scheme %d is not one of ulysses, ring, hybrid",
                     (int)c.scheme);
  if (c.flags & ~(unsigned)STSA_DIST_CONTIGUOUS_HEADS)
    return dist_fail(d, STSA_ERR_BAD_PARAM, "dist: unknown flags 0x%x", c.flags);
  if (c.scheme == STSA_DIST_HYBRID && c.ulysses_degree != 0 &&
      (c.ulysses_degree < 1 || d->size % c.ulysses_degree != 0))
    return dist_fail(d, STSA_ERR_BAD_PARAM,
                     "dist: hybrid Ulysses degree %d does not divide the %d ranks",
                     c.ulysses_degree, d->size);
  d->cfg = c;
  d->cfg.size = sizeof d->cfg;
  return STSA_OK;
}

stsa_status stsa_dist_create(stsa_ctx *ctx, MPI_Comm comm, const stsa_dist_config *cfg,
                             stsa_dist **out) {
  return stsa_dist_create_msg(ctx, comm, cfg, out, NULL, 0);
}

stsa_status stsa_dist_create_msg(stsa_ctx *ctx, MPI_Comm comm,
                                 const stsa_dist_config *cfg, stsa_dist **out, char *msg,
                                 size_t msg_size) {
  if (msg && msg_size)
    msg[0] = '\0';
  if (!ctx || !out)
    return STSA_ERR_NULL_ARG;
  stsa_dist *d = calloc(1, sizeof *d);
  if (!d)
    return STSA_ERR_OUT_OF_MEMORY;
  d->ctx = ctx;
  d->ucomm = d->rcomm = MPI_COMM_NULL;
  d->cfg = (stsa_dist_config){sizeof d->cfg, STSA_DIST_ULYSSES, 0, 0};
  int rc = MPI_Comm_dup(comm, &d->comm);
  if (rc != MPI_SUCCESS) {
    if (msg && msg_size)
      snprintf(msg, msg_size, "%s", dist_fail_mpi(d, rc, "MPI_Comm_dup") ? d->err : "");
    free(d);
    return STSA_ERR_IO;
  }
  MPI_Comm_set_errhandler(d->comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(d->comm, &d->rank);
  MPI_Comm_size(d->comm, &d->size);
  /* a config one rank refuses fails every rank; then every rank must have
   * been given the same one (all ranks see the same gathered values) */
  stsa_status st = dist_agree(d, check_config(d, cfg));
  int64_t *all = st == STSA_OK ? malloc(sizeof *all * 3 * (size_t)d->size) : NULL;
  if (st == STSA_OK && !all)
    st = dist_fail(d, STSA_ERR_OUT_OF_MEMORY, "dist: out of memory");
  st = dist_agree(d, st);
  if (st == STSA_OK) {
    int64_t mine[3] = {d->cfg.scheme, d->cfg.ulysses_degree, d->cfg.flags};
    rc = MPI_Allgather(mine, 3, MPI_INT64_T, all, 3, MPI_INT64_T, d->comm);
    if (rc != MPI_SUCCESS)
      st = dist_fail_mpi(d, rc, "MPI_Allgather (configurations)");
    for (int r = 1; st == STSA_OK && r < d->size; r++)
      if (memcmp(all, all + 3 * r, 3 * sizeof *all) != 0) {
        snprintf(d->err, sizeof d->err,
                 "rank %d: dist: a different configuration than rank 0's: scheme %s, "
                 "Ulysses degree %lld, flags 0x%llx here; %s, %lld, 0x%llx on rank 0",
                 r, stsa_dist_scheme_name((stsa_dist_scheme)all[3 * r]),
                 (long long)all[3 * r + 1], (unsigned long long)all[3 * r + 2],
                 stsa_dist_scheme_name((stsa_dist_scheme)all[0]), (long long)all[1],
                 (unsigned long long)all[2]);
        st = STSA_ERR_BAD_PARAM;
      }
  }
  free(all);
  if (st != STSA_OK) {
    if (msg && msg_size)
      snprintf(msg, msg_size, "%s", d->err);
    MPI_Comm_free(&d->comm);
    free(d);
    return st;
  }
  *out = d;
  return STSA_OK;
}

void *dist_buffer(stsa_dist *d, int slot, size_t bytes) {
  if (bytes <= d->buf_cap[slot])
    return d->buf[slot];
  free(d->buf[slot]);
  d->buf[slot] = malloc(bytes);
  d->buf_cap[slot] = d->buf[slot] ? bytes : 0;
  if (!d->buf[slot])
    dist_fail(d, STSA_ERR_OUT_OF_MEMORY, "dist: out of memory (%zu bytes of work buffer)",
              bytes);
  return d->buf[slot];
}

void stsa_dist_free(stsa_dist *d) {
  if (!d)
    return;
  for (int i = 0; i < DIST_BUFFERS; i++)
    free(d->buf[i]);
  free_comms(d);
  MPI_Comm_free(&d->comm);
  free(d);
}

stsa_status dist_comms(stsa_dist *d, const dist_layout *l) {
  if (d->comm_u_degree == l->U)
    return STSA_OK;
  free_comms(d);
  int rc = MPI_Comm_split(d->comm, l->g, l->u, &d->ucomm);
  if (rc == MPI_SUCCESS)
    rc = MPI_Comm_split(d->comm, l->u, l->g, &d->rcomm);
  if (rc != MPI_SUCCESS)
    return dist_fail_mpi(d, rc, "MPI_Comm_split");
  MPI_Comm_set_errhandler(d->ucomm, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(d->rcomm, MPI_ERRORS_RETURN);
  d->comm_u_degree = l->U;
  return STSA_OK;
}

void layout_free(dist_layout *l) {
  free(l->shard_off);
  free(l->head_owner);
  free(l->group_heads);
  free(l->head_ptr);
  memset(l, 0, sizeof *l);
}

static const char *const SIG_NAMES[] = {
    "status",  "call",    "B",       "S",         "H",      "D",
    "q dtype", "k dtype", "v dtype", "out dtype", "scheme", "Ulysses degree",
    "flags",   "mode",    "layer",   "step",      "options"};

static int ulysses_degree(const stsa_dist *d, int64_t H) {
  switch (d->cfg.scheme) {
  case STSA_DIST_RING:
    return 1;
  case STSA_DIST_HYBRID:
    if (d->cfg.ulysses_degree)
      return d->cfg.ulysses_degree;
    for (int u = d->size; u > 1; u--)
      if (d->size % u == 0 && u <= H)
        return u;
    return 1;
  default:
    return d->size;
  }
}

stsa_status dist_begin(stsa_dist *d, const dist_sig *mine, dist_layout *l) {
  memset(l, 0, sizeof *l);
  /* a failed local validation left its message in d->err */
  stsa_status st = dist_agree(d, (stsa_status)mine->status);
  if (st != STSA_OK)
    return st;
  const int P = d->size;
  dist_sig *all = malloc(sizeof *all * (size_t)P);
  l->shard_off = malloc(sizeof *l->shard_off * (size_t)(P + 1));
  st = all && l->shard_off ? STSA_OK
                           : dist_fail(d, STSA_ERR_OUT_OF_MEMORY, "dist: out of memory");
  if (st == STSA_OK) {
    int rc = MPI_Allgather(mine, (int)sizeof *mine, MPI_BYTE, all, (int)sizeof *mine,
                           MPI_BYTE, d->comm);
    if (rc != MPI_SUCCESS)
      st = dist_fail_mpi(d, rc, "MPI_Allgather (call signatures)");
  }
  /* every rank runs the same checks on the same data: no agreement needed */
  enum { FIELDS = sizeof(dist_sig) / sizeof(int64_t) };
  for (int r = 1; st == STSA_OK && r < P; r++) {
    const int64_t *a = (const int64_t *)&all[0], *b = (const int64_t *)&all[r];
    for (int f = 1; f < FIELDS; f++) {
      if (f == 3 || a[f] == b[f]) /* shard lengths may differ */
        continue;
      if (f == FIELDS - 1)
        snprintf(d->err, sizeof d->err,
                 "rank %d: dist: a different call than rank 0's: the options (scale, "
                 "mode, plan description, masks) differ",
                 r);
      else
        snprintf(
            d->err, sizeof d->err,
            "rank %d: dist: a different call than rank 0's: %s is %lld here, %lld on "
            "rank 0",
            r, SIG_NAMES[f], (long long)b[f], (long long)a[f]);
      st = STSA_ERR_BAD_PARAM;
      break;
    }
  }
  if (st == STSA_OK) {
    l->shard_off[0] = 0;
    for (int r = 0; r < P; r++)
      l->shard_off[r + 1] = l->shard_off[r] + all[r].S_local;
    l->P = P;
    l->H = mine->H;
    l->S = l->shard_off[P];
    l->U = ulysses_degree(d, mine->H);
    l->R = P / l->U;
    l->u = d->rank % l->U;
    l->g = d->rank / l->U;
  }
  free(all);
  if (st == STSA_OK)
    st = dist_comms(d, l);
  if (st != STSA_OK)
    layout_free(l);
  return st;
}

/* ---- head balancing ------------------------------------------------------ */
typedef struct head_cost {
  double cost;
  int64_t head;
} head_cost;

static int by_cost_desc(const void *pa, const void *pb) {
  const head_cost *a = pa, *b = pb;
  if (a->cost != b->cost)
    return a->cost > b->cost ? -1 : 1;
  return a->head < b->head ? -1 : a->head > b->head;
}

stsa_status balance_heads(stsa_dist *d, const double *cost, dist_layout *l) {
  const int64_t H = l->H;
  const int U = l->U;
  l->head_owner = malloc(sizeof *l->head_owner * (size_t)H);
  l->group_heads = malloc(sizeof *l->group_heads * (size_t)H);
  l->head_ptr = calloc((size_t)U + 1, sizeof *l->head_ptr);
  head_cost *hc = malloc(sizeof *hc * (size_t)H);
  double *load = calloc((size_t)U, sizeof *load);
  if (!l->head_owner || !l->group_heads || !l->head_ptr || !hc || !load) {
    free(hc);
    free(load);
    return dist_fail(d, STSA_ERR_OUT_OF_MEMORY, "dist: out of memory");
  }
  if (!cost || (d->cfg.flags & STSA_DIST_CONTIGUOUS_HEADS)) {
    for (int64_t h = 0; h < H; h++) /* floor(h * U / H): groups differ by <= 1 */
      l->head_owner[h] = h * U / H;
  } else {
    for (int64_t h = 0; h < H; h++)
      hc[h] = (head_cost){cost[h], h};
    qsort(hc, (size_t)H, sizeof *hc, by_cost_desc);
    for (int64_t i = 0; i < H; i++) {
      int best = 0;
      for (int u = 1; u < U; u++)
        if (load[u] < load[best])
          best = u;
      /* a zero-cost head still counts, so cheap heads spread out too */
      load[best] += hc[i].cost + 1e-9;
      l->head_owner[hc[i].head] = best;
    }
  }
  for (int64_t h = 0; h < H; h++)
    l->head_ptr[l->head_owner[h] + 1]++;
  for (int u = 0; u < U; u++)
    l->head_ptr[u + 1] += l->head_ptr[u];
  free(hc);
  int64_t *fill = calloc((size_t)U, sizeof *fill);
  if (!fill) {
    free(load);
    return dist_fail(d, STSA_ERR_OUT_OF_MEMORY, "dist: out of memory");
  }
  for (int64_t h = 0; h < H; h++) { /* ascending within each member */
    int64_t u = l->head_owner[h];
    l->group_heads[l->head_ptr[u] + fill[u]++] = h;
  }
  free(fill);
  free(load);
  return STSA_OK;
}
