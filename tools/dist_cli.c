/* dist_cli.c — see dist_cli.h. */
#define _POSIX_C_SOURCE 200809L
#include "dist_cli.h"

#include <stdio.h>
#include <string.h>

#include "cli_util.h"

/* The names of STSA_DIST_ULYSSES, _RING and _HYBRID, in that order, as
 * stsa_dist_scheme_name gives them (this file also builds without MPI). */
static const char *const SCHEME_NAMES[4] = {"ulysses", "ring", "hybrid", NULL};
enum { SCHEME_HYBRID = 2 };

void cli_dist_name(const cli_dist_opts *d, char *buf, size_t len) {
  const char *name = d->scheme >= 0 && d->scheme < 3 ? SCHEME_NAMES[d->scheme] : "none";
  if (d->scheme == SCHEME_HYBRID && d->ulysses_degree > 0)
    snprintf(buf, len, "%s:%d", name, d->ulysses_degree);
  else
    snprintf(buf, len, "%s", name);
}

stsa_tensor cli_shard_view(const stsa_tensor *t, int64_t off, int64_t len) {
  stsa_tensor v = *t;
  v.data = (char *)t->data + (size_t)(off * t->stride[1]) * stsa_dtype_size(t->dtype);
  v.shape[1] = len;
  return v;
}

#ifndef STSA_HAVE_MPI

void cli_parse_dist(const char *name, const char *value, cli_dist_opts *d) {
  (void)value;
  (void)d;
  cli_die("%s: this stsa was built without MPI, so it cannot run distributed; rebuild "
          "it where MPI is installed (CMake finds it and builds libstsa_mpi)",
          name);
}

int cli_dist_start(const cli_opt_set *sets, int n_sets, int argc, char **argv,
                   int first) {
  (void)sets, (void)n_sets, (void)argc, (void)argv, (void)first;
  return 0;
}

#else /* STSA_HAVE_MPI */

#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <time.h>

#include "stsa_mpi.h"

_Static_assert(STSA_DIST_ULYSSES == 0 && STSA_DIST_RING == 1 &&
                   (int)STSA_DIST_HYBRID == (int)SCHEME_HYBRID,
               "SCHEME_NAMES follows stsa_dist_scheme");

void cli_parse_dist(const char *name, const char *value, cli_dist_opts *d) {
  const char *colon = strchr(value, ':');
  d->ulysses_degree = 0;
  if (!colon) {
    d->scheme = cli_parse_choice(name, value, SCHEME_NAMES);
    return;
  }
  char scheme[32];
  snprintf(scheme, sizeof scheme, "%.*s", (int)(colon - value), value);
  d->scheme = cli_parse_choice(name, scheme, SCHEME_NAMES);
  if (d->scheme != SCHEME_HYBRID)
    cli_die("%s %s: only hybrid takes a Ulysses degree (hybrid:U)", name, value);
  d->ulysses_degree = (int)cli_parse_int(name, colon + 1, 1, 1 << 16);
}

/* The state of the one MPI session of this process. */
static struct {
  MPI_Comm comm;          /* ours: a duplicate of MPI_COMM_WORLD */
  int rank, size;         /* in it */
  int node_ranks;         /* ranks on this node */
  struct stsa_dist *dist; /* once created: agreements go through it */
  int agreeing;           /* inside an agreement (a failure there aborts) */
} g = {.comm = MPI_COMM_NULL};

int cli_dist_rank(void) { return g.rank; }
int cli_dist_size(void) { return g.size; }
MPI_Comm cli_dist_comm(void) { return g.comm; }

/* See cli_dist_mpi_check. */
static _Noreturn void mpi_fatal(int rc, const char *what) {
  char text[MPI_MAX_ERROR_STRING] = "";
  int len = 0;
  MPI_Error_string(rc, text, &len);
  fprintf(stderr, "stsa: rank %d: MPI: %s failed: %s\n", g.rank, what, text);
  MPI_Abort(MPI_COMM_WORLD, 2);
  exit(2);
}

void cli_dist_mpi_check(int rc, const char *what) {
  if (rc != MPI_SUCCESS)
    mpi_fatal(rc, what);
}

void cli_dist_exit_agreed(const char *fmt, ...) {
  char line[1200] = "stsa: ";
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line + 6, sizeof line - 7, fmt, ap);
  va_end(ap);
  strcat(line, "\n"); /* one write, not interleaved with the other ranks' */
  fputs(line, stderr);
  fflush(stderr);
  MPI_Finalize(); /* a barrier: no rank exits (and is reported) before all printed */
  exit(2);
}

/* Before the distributed context exists: the protocol of stsa_dist_agree
 * (the lowest failing rank, then its status and message from it). */
typedef struct agreed_msg {
  int status;
  char msg[1000];
} agreed_msg;

static stsa_status agree_direct(stsa_status st, const char *msg, char *out, size_t len) {
  int mine = st != STSA_OK ? g.rank : INT_MAX, first = INT_MAX;
  int rc = MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, g.comm);
  if (rc != MPI_SUCCESS)
    mpi_fatal(rc, "MPI_Allreduce (agreeing on a status)");
  if (first == INT_MAX)
    return STSA_OK;
  agreed_msg a = {0};
  if (g.rank == first) {
    a.status = (int)st;
    snprintf(a.msg, sizeof a.msg, "%s", msg && *msg ? msg : stsa_status_str(st));
  }
  rc = MPI_Bcast(&a, (int)sizeof a, MPI_BYTE, first, g.comm);
  if (rc != MPI_SUCCESS)
    mpi_fatal(rc, "MPI_Bcast (the failing rank's message)");
  snprintf(out, len, "rank %d: %s", first, a.msg);
  return (stsa_status)a.status;
}

void cli_dist_agree(stsa_status st, const char *msg) {
  if (g.agreeing) { /* a failure while agreeing: no agreement is left to make */
    fprintf(stderr, "stsa: rank %d: %s\n", g.rank, msg ? msg : "");
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  g.agreeing = 1;
  char agreed[1100] = "";
  stsa_status r;
  if (g.dist) {
    r = stsa_dist_agree(g.dist, st, msg);
    snprintf(agreed, sizeof agreed, "%s", stsa_dist_last_error(g.dist));
  } else {
    r = agree_direct(st, msg, agreed, sizeof agreed);
  }
  g.agreeing = 0;
  if (r != STSA_OK)
    cli_dist_exit_agreed("%s", agreed);
}

void cli_dist_checkpoint(void) { cli_dist_agree(STSA_OK, NULL); }

/* cli_die under --dist: this rank failed; the others learn it at their next
 * checkpoint, where this rank meets them. */
static void die_hook(const char *msg) { cli_dist_agree(STSA_ERR_BAD_PARAM, msg); }

int cli_dist_start(const cli_opt_set *sets, int n_sets, int argc, char **argv,
                   int first) {
  int help = 0;
  if (!cli_has_option(sets, n_sets, argc, argv, first, "--dist", &help) || help)
    return 0;
  int provided = 0;
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
    cli_die("--dist: MPI_Init_thread failed");
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rc = MPI_Comm_dup(MPI_COMM_WORLD, &g.comm);
  if (rc != MPI_SUCCESS)
    mpi_fatal(rc, "MPI_Comm_dup");
  MPI_Comm_set_errhandler(g.comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(g.comm, &g.rank);
  MPI_Comm_size(g.comm, &g.size);
  MPI_Comm node;
  rc = MPI_Comm_split_type(g.comm, MPI_COMM_TYPE_SHARED, g.rank, MPI_INFO_NULL, &node);
  if (rc != MPI_SUCCESS)
    mpi_fatal(rc, "MPI_Comm_split_type");
  MPI_Comm_size(node, &g.node_ranks);
  MPI_Comm_free(&node);
  cli_set_die_hook(die_hook);
  /* the kernels' threads compute while only this thread talks to MPI
   * (FUNNELED); SERIALIZED also lets the ring move transfers during a
   * step's compute (stsa_mpi.h) */
  if (provided < MPI_THREAD_FUNNELED)
    cli_die("--dist: this MPI provides thread level %d, below MPI_THREAD_FUNNELED",
            provided);
  return 1;
}

/* The first line where a and b differ, into *la / *lb with their lengths;
 * 0 if they are equal. */
static int first_difference(const char *a, const char *b, const char **la, int *na,
                            const char **lb, int *nb) {
  while (*a || *b) {
    const char *ea = strchr(a, '\n'), *eb = strchr(b, '\n');
    *na = ea ? (int)(ea - a) : (int)strlen(a);
    *nb = eb ? (int)(eb - b) : (int)strlen(b);
    if (*na != *nb || memcmp(a, b, (size_t)*na)) {
      *la = a, *lb = b;
      return 1;
    }
    a += *na + (ea != NULL);
    b += *nb + (eb != NULL);
  }
  return 0;
}

void cli_dist_same(const char *desc, const char *what, const char *why) {
  cli_dist_checkpoint();
  static char first[8192]; /* rank 0's lines (a longer list is compared in part) */
  if (g.rank == 0)
    snprintf(first, sizeof first, "%s", desc);
  int rc = MPI_Bcast(first, (int)sizeof first, MPI_CHAR, 0, g.comm);
  if (rc != MPI_SUCCESS)
    mpi_fatal(rc, "MPI_Bcast (the options)");
  char mine[sizeof first];
  snprintf(mine, sizeof mine, "%s", desc);
  const char *here, *there;
  int n_here, n_there;
  char msg[600] = "";
  const int differs = first_difference(mine, first, &here, &n_here, &there, &n_there);
  if (differs)
    snprintf(msg, sizeof msg,
             "the ranks were given different %s: '%.*s' here, '%.*s' on rank 0 (%s)",
             what, n_here, here, n_there, there, why);
  cli_dist_agree(differs ? STSA_ERR_BAD_PARAM : STSA_OK, msg);
}

int cli_dist_threads(stsa_ctx *ctx, int threads) {
  if (threads <= 0) {
    int64_t all = 1;
    stsa_ctx_get(ctx, STSA_PARAM_THREADS, &all);
    threads = (int)(all / g.node_ranks);
    threads = threads > 0 ? threads : 1;
  }
  cli_check(stsa_ctx_set(ctx, STSA_PARAM_THREADS, threads), ctx, "--threads");
  return threads;
}

struct stsa_dist *cli_dist_create(stsa_ctx *ctx, const cli_dist_opts *o) {
  char name[32];
  cli_dist_name(o, name, sizeof name);
  if (o->scheme == STSA_DIST_HYBRID && o->ulysses_degree > 0 &&
      g.size % o->ulysses_degree)
    cli_die("--dist %s: the Ulysses degree %d does not divide the %d ranks", name,
            o->ulysses_degree, g.size);
  cli_dist_checkpoint();
  stsa_dist_config cfg = {.size = sizeof cfg,
                          .scheme = (stsa_dist_scheme)o->scheme,
                          .ulysses_degree = o->ulysses_degree};
  stsa_dist *dist = NULL;
  stsa_status st = stsa_dist_create(ctx, g.comm, &cfg, &dist);
  /* agreed by the library, which keeps no message when it creates nothing */
  if (st != STSA_OK)
    cli_dist_exit_agreed("--dist %s: creating the distributed context failed: %s", name,
                         stsa_status_str(st));
  g.dist = dist;
  return dist;
}

void cli_dist_check(stsa_status st, const char *what) {
  if (st != STSA_OK)
    cli_dist_exit_agreed("%s failed: %s (%s)", what, stsa_status_str(st),
                         g.dist ? stsa_dist_last_error(g.dist) : "");
}

int64_t *cli_dist_shards(int64_t n) {
  if (n < g.size)
    cli_die("--dist: %lld tokens cannot be split over %d ranks (each needs one at least)",
            (long long)n, g.size);
  int64_t *offs = malloc(sizeof *offs * (size_t)(g.size + 1));
  if (!offs)
    cli_die("out of memory");
  for (int r = 0; r <= g.size; r++)
    offs[r] = n * r / g.size;
  return offs;
}

void cli_dist_gather_rows(const void *send, void *recv, const int64_t *offs,
                          size_t row_bytes) {
  char msg[200] = "";
  int *counts = NULL;
  if (offs[g.size] > INT_MAX || row_bytes > INT_MAX)
    snprintf(msg, sizeof msg, "%lld rows of %zu bytes are more than one gather can move",
             (long long)offs[g.size], row_bytes);
  else if (!(counts = malloc(sizeof *counts * 2 * (size_t)g.size)))
    snprintf(msg, sizeof msg, "out of memory");
  /* agreed first: a rank that failed just before this is heard here too */
  cli_dist_agree(*msg ? STSA_ERR_BAD_PARAM : STSA_OK, msg);
  int *displs = counts + g.size;
  for (int r = 0; r < g.size; r++) {
    counts[r] = (int)(offs[r + 1] - offs[r]);
    displs[r] = (int)offs[r];
  }
  MPI_Datatype row;
  cli_dist_mpi_check(MPI_Type_contiguous((int)row_bytes, MPI_BYTE, &row),
                     "MPI_Type_contiguous");
  cli_dist_mpi_check(MPI_Type_commit(&row), "MPI_Type_commit");
  cli_dist_mpi_check(
      MPI_Gatherv(send, counts[g.rank], row, recv, counts, displs, row, 0, g.comm),
      "MPI_Gatherv");
  MPI_Type_free(&row);
  free(counts);
}

void cli_dist_wait_quietly(void) {
  MPI_Request req;
  int rc = MPI_Ibarrier(g.comm, &req), done = 0;
  const struct timespec nap = {0, 1000 * 1000};
  while (rc == MPI_SUCCESS && !done) {
    rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (rc == MPI_SUCCESS && !done)
      nanosleep(&nap, NULL);
  }
  if (rc != MPI_SUCCESS)
    mpi_fatal(rc, "MPI_Ibarrier");
}

void cli_dist_finish(void) {
  cli_set_die_hook(NULL);
  stsa_dist_free(g.dist);
  g.dist = NULL;
  MPI_Comm_free(&g.comm);
  MPI_Finalize();
}

#endif /* STSA_HAVE_MPI */
