/*
 * dist_cli.h — what the commands that run under mpirun share (`stsa run
 * --dist`, `stsa bench svg --dist`): the --dist option, MPI started only
 * when it is given, and failures that every rank learns of.
 *
 * Under --dist every rank runs the same command on its own share of the
 * work. A failure on one rank (a bad option value, an unreadable input, a
 * library error) must stop every rank with that rank's message and leave
 * none of them waiting. A command therefore marks the points where its
 * ranks meet (cli_dist_checkpoint). A rank that calls cli_die between two
 * such points meets the others at the next one instead of exiting alone
 * (a die hook), and every rank then prints the lowest failing rank's
 * message ("stsa: rank R: ...") and exits with status 2. Hence the rule for
 * a command: between two checkpoints it makes no collective call that a
 * rank which failed would miss. Until a distributed context exists
 * (cli_dist_create) the ranks agree over MPI directly; afterwards through
 * stsa_dist_agree, and a failed library call is already agreed on.
 *
 * In a build without MPI only cli_parse_dist and cli_dist_start exist: the
 * first rejects --dist with a message, the second never starts anything.
 */
#ifndef STSA_TOOLS_DIST_CLI_H
#define STSA_TOOLS_DIST_CLI_H

#include <stddef.h>

#include "cli_options.h"
#include "stsa.h"

/* The value of --dist: ulysses, ring, hybrid or hybrid:U. */
typedef struct cli_dist_opts {
  int scheme;         /* a stsa_dist_scheme; -1: --dist not given */
  int ulysses_degree; /* hybrid:U; 0: the library's choice */
} cli_dist_opts;

#define CLI_DIST_NONE ((cli_dist_opts){-1, 0})

/* The help line of --dist, for the commands' option tables. */
#define CLI_DIST_HELP                                                                    \
  "under mpirun: the sequence split over the ranks; ulysses\n"                           \
  "(heads to ranks, bitwise the one-process result), ring\n"                             \
  "(keys around a ring) or hybrid[:U] (Ulysses in groups\n"                              \
  "of U ranks, a ring across them); needs a build with MPI"

/* Parses a --dist value into *d; dies in a build without MPI. */
void cli_parse_dist(const char *name, const char *value, cli_dist_opts *d);

/* "ulysses", "ring", "hybrid" or "hybrid:U", as --dist takes it. */
void cli_dist_name(const cli_dist_opts *d, char *buf, size_t len);

/* Tokens [off, off + len) of a [B, S, H, D] tensor, as a view (a shard). */
stsa_tensor cli_shard_view(const stsa_tensor *t, int64_t off, int64_t len);

/* Starts MPI (MPI_Init_thread, MPI_THREAD_FUNNELED) when argv[first..argc)
 * gives --dist as an option (cli_has_option on the command's tables) and
 * no -h/--help or -V/--version, and sets the die hook; returns 1 if it did.
 * Call before parsing, so that a bad option on one rank reaches them all.
 * Returns 0 (and touches nothing) without --dist or without MPI. */
int cli_dist_start(const cli_opt_set *sets, int n_sets, int argc, char **argv, int first);

#ifdef STSA_HAVE_MPI
#include <mpi.h>

struct stsa_dist;

int cli_dist_rank(void);
int cli_dist_size(void);
/* The tool's own communicator (a duplicate of MPI_COMM_WORLD). */
MPI_Comm cli_dist_comm(void);

/* A failed MPI call of the tool itself (rc not MPI_SUCCESS): nothing can be
 * agreed any more, so the job is aborted (MPI_Abort) rather than leave a
 * rank waiting. */
void cli_dist_mpi_check(int rc, const char *what);

/* Every rank reached this point: returns on all of them, or (when a rank
 * failed on the way, see above) stops them all. */
void cli_dist_checkpoint(void);

/* This rank's status at a checkpoint (msg: what failed, when st is not
 * STSA_OK): returns when every rank passed STSA_OK, else stops every rank
 * with the lowest failing rank's message. */
void cli_dist_agree(stsa_status st, const char *msg);

/* A checkpoint that also checks every rank holds the same lines in desc
 * (one item a line, "--density 0.3"; the same items in the same order on
 * every rank): a rank whose lines differ from rank 0's fails naming the
 * first that differs, "the ranks were given different <what>: '<line>'
 * here, '<line>' on rank 0 (<why>)". */
void cli_dist_same(const char *desc, const char *what, const char *why);
/* The why of the commands' options. */
#define CLI_DIST_SAME_OPTIONS                                                            \
  "under --dist every option but the input files must be the same on every rank"

/* Worker threads of this rank into ctx: `threads` if given (> 0), else the
 * context's default shared by the ranks on this node (at least 1), so ranks
 * on one machine do not oversubscribe it. Returns the count. */
int cli_dist_threads(stsa_ctx *ctx, int threads);

/* Collective: the distributed context for --dist over every rank, on ctx
 * (which must outlive it; cli_dist_finish frees it). From here on the
 * checkpoints agree through stsa_dist_agree. Stops every rank on failure. */
struct stsa_dist *cli_dist_create(stsa_ctx *ctx, const cli_dist_opts *o);

/* After a collective library call (whose status every rank shares): stops
 * every rank with "<what> failed: <status> (rank R: ...)" unless st is
 * STSA_OK, without another agreement. */
void cli_dist_check(stsa_status st, const char *what);

/* Prints "stsa: <message>" and stops this rank, when every rank is known to
 * stop alike (MPI_Finalize, exit status 2). */
_Noreturn void cli_dist_exit_agreed(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));

/* The shards of n tokens over the ranks: [size + 1] offsets (malloc'd),
 * rank r holding [floor(r n / P), floor((r + 1) n / P)). Dies (on every
 * rank alike) when some rank would get no token. */
int64_t *cli_dist_shards(int64_t n);

/* Collective: rank r's rows (offs[r + 1] - offs[r] of row_bytes each, at
 * send) into rank 0's recv at row offs[r] (MPI_Gatherv; recv is ignored on
 * the other ranks). offs: [size + 1], ascending, the same on every rank.
 * Agrees before it moves anything, so it may follow a step that can fail. */
void cli_dist_gather_rows(const void *send, void *recv, const int64_t *offs,
                          size_t row_bytes);

/* A barrier that sleeps instead of spinning (MPI_Ibarrier, MPI_Test and 1 ms
 * naps): Open MPI's blocking waits poll and would take the cores from a
 * rank that computes alone meanwhile. */
void cli_dist_wait_quietly(void);

/* Collective, at the end of a successful command: frees the distributed
 * context and finalises MPI. */
void cli_dist_finish(void);
#endif

#endif
