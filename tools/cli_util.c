/* cli_util.c — see cli_util.h. */
#define _POSIX_C_SOURCE 200809L
#include "cli_util.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/convert.h"

void cli_die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("stsa: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(2);
}

void cli_check(stsa_status st, const stsa_ctx *ctx, const char *what) {
  if (st != STSA_OK)
    cli_die("%s failed: %s (%s)", what, stsa_status_str(st),
            ctx ? stsa_ctx_last_error(ctx) : "");
}

/* ---- arguments ----------------------------------------------------------- */

/* The values split off "--flag=value" arguments, to tell "--quiet=1" (a
 * flag that takes no value) from a stray argument. */
static const char **split_values, **split_flags;
static int n_split;

void cli_split_args(int *argc, char ***argv) {
  int n = 0;
  for (int i = 0; i < *argc; i++) {
    const char *a = (*argv)[i];
    n += 1 + (a[0] == '-' && a[1] == '-' && a[2] && a[2] != '=' && strchr(a, '='));
  }
  if (n == *argc)
    return;
  char **out = malloc(sizeof *out * (size_t)(n + 1));
  split_values = malloc(sizeof *split_values * (size_t)(n - *argc));
  split_flags = malloc(sizeof *split_flags * (size_t)(n - *argc));
  if (!out || !split_values || !split_flags)
    cli_die("out of memory");
  int k = 0;
  for (int i = 0; i < *argc; i++) {
    char *a = (*argv)[i], *eq = strchr(a, '=');
    if (a[0] == '-' && a[1] == '-' && a[2] && a[2] != '=' && eq) {
      char *flag = strndup(a, (size_t)(eq - a));
      if (!flag)
        cli_die("out of memory");
      out[k++] = flag;
      out[k++] = eq + 1;
      split_values[n_split] = eq + 1;
      split_flags[n_split++] = a;
    } else {
      out[k++] = a;
    }
  }
  out[k] = NULL;
  *argc = n;
  *argv = out;
}

void cli_help_version(const char *arg, void (*usage)(void)) {
  if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
    usage();
    exit(0);
  }
  if (!strcmp(arg, "-V") || !strcmp(arg, "--version")) {
    printf("stsa %s\n", stsa_version_string());
    exit(0);
  }
}

void cli_unknown(const char *cmd, const char *arg, const char *hint) {
  for (int i = 0; i < n_split; i++)
    if (arg == split_values[i])
      cli_die("%s: '%s': %.*s takes no value", cmd, split_flags[i],
              (int)(split_values[i] - 1 - split_flags[i]), split_flags[i]);
  cli_die("%s: unknown option '%s' (see %s)", cmd, arg, hint);
}

const char *cli_str(int argc, char **argv, int *i) {
  if (*i + 1 >= argc)
    cli_die("option %s needs a value", argv[*i]);
  return argv[++*i];
}

int64_t cli_int(int argc, char **argv, int *i, int64_t lo, int64_t hi) {
  const char *opt = argv[*i], *s = cli_str(argc, argv, i);
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || *end || end == s)
    cli_die("%s expects an integer, got '%s'", opt, s);
  if (v < lo || v > hi)
    cli_die("%s = %lld is out of range [%lld, %lld]", opt, v, (long long)lo,
            (long long)hi);
  return v;
}

double cli_double(int argc, char **argv, int *i, double lo, double hi) {
  const char *opt = argv[*i], *s = cli_str(argc, argv, i);
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || *end || end == s || !isfinite(v))
    cli_die("%s expects a number, got '%s'", opt, s);
  if (v < lo || v > hi)
    cli_die("%s = %g is out of range [%g, %g]", opt, v, lo, hi);
  return v;
}

stsa_dtype cli_dtype(int argc, char **argv, int *i) {
  const char *opt = argv[*i], *s = cli_str(argc, argv, i);
  for (int d = 0; d < STSA_DTYPE_COUNT_; d++)
    if (strcmp(s, stsa_dtype_name((stsa_dtype)d)) == 0)
      return (stsa_dtype)d;
  cli_die("%s expects f32, f16 or bf16, got '%s'", opt, s);
}

/* ---- files ---------------------------------------------------------------- */

void cli_check_input(const char *flag, const char *path, cli_file_id *id) {
  struct stat st;
  if (stat(path, &st) != 0)
    cli_die("%s %s: cannot open it: %s", flag, path, strerror(errno));
  if (S_ISDIR(st.st_mode))
    cli_die("%s %s: is a directory, not a file", flag, path);
  if (!S_ISREG(st.st_mode))
    cli_die("%s %s: is not a regular file (a FIFO, socket or device); give a file", flag,
            path);
  if (id)
    *id = (cli_file_id){(unsigned long long)st.st_dev, (unsigned long long)st.st_ino};
}

FILE *cli_open_input(const char *flag, const char *path) {
  cli_check_input(flag, path, NULL);
  FILE *f = fopen(path, "r");
  if (!f)
    cli_die("%s %s: cannot open it: %s", flag, path, strerror(errno));
  return f;
}

/* Staging files the signal thread removes: registered by
 * cli_outputs_prepare, cleared by the commit, guarded by files_lock (held
 * by every write and by the commit). */
static pthread_mutex_t files_lock = PTHREAD_MUTEX_INITIALIZER;
static char *staged[8];
static int n_staged;
static sigset_t cleanup_signals;

static void remove_staged(void) {
  for (int i = 0; i < n_staged; i++)
    if (staged[i])
      unlink(staged[i]);
  n_staged = 0;
}

static void *signal_thread(void *arg) {
  (void)arg;
  int sig;
  while (sigwait(&cleanup_signals, &sig) != 0)
    ;
  pthread_mutex_lock(&files_lock); /* waits for a write or commit to finish */
  remove_staged();
  /* die of the signal, as without this thread */
  signal(sig, SIG_DFL);
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, sig);
  pthread_sigmask(SIG_UNBLOCK, &one, NULL);
  raise(sig);
  _exit(128 + sig);
}

void cli_signals_start(void) {
  sigemptyset(&cleanup_signals);
  sigaddset(&cleanup_signals, SIGINT);
  sigaddset(&cleanup_signals, SIGTERM);
  sigaddset(&cleanup_signals, SIGHUP);
  /* blocked here, so in every thread created from now on (OpenMP's too) */
  pthread_sigmask(SIG_BLOCK, &cleanup_signals, NULL);
  pthread_t t;
  if (pthread_create(&t, NULL, signal_thread, NULL) != 0)
    cli_die("cannot start the signal thread: %s", strerror(errno));
  pthread_detach(t);
}

/* The folder part of path ("." for a bare name); malloc'd. */
static char *dir_of(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash)
    return strdup(".");
  return slash == path ? strdup("/") : strndup(path, (size_t)(slash - path));
}

static cli_file_id file_id(const struct stat *st) {
  return (cli_file_id){(unsigned long long)st->st_dev, (unsigned long long)st->st_ino};
}

static int same_id(cli_file_id a, cli_file_id b) {
  return a.dev == b.dev && a.ino == b.ino;
}

static void check_output(cli_output *o) {
  const char *p = o->path;
  if (!*p)
    cli_die("%s: empty file name", o->flag);
  const char *slash = strrchr(p, '/');
  o->base = slash ? slash + 1 : p;
  if (!*o->base || !strcmp(o->base, ".") || !strcmp(o->base, ".."))
    cli_die("%s %s: names a directory; give a file name", o->flag, p);
  struct stat st;
  if (lstat(p, &st) == 0) {
    if (S_ISLNK(st.st_mode))
      cli_die("%s %s: is a symbolic link; an output is replaced by renaming, which would "
              "replace the link, not the file it points to: name that file instead",
              o->flag, p);
    if (S_ISDIR(st.st_mode))
      cli_die("%s %s: is a directory; give a file name", o->flag, p);
    if (!S_ISREG(st.st_mode))
      cli_die("%s %s: exists and is not a regular file (a device, FIFO or socket); "
              "stsa only replaces regular files",
              o->flag, p);
    o->exists = 1;
    o->mode = (unsigned)(st.st_mode & 07777);
    o->uid = (unsigned)st.st_uid, o->gid = (unsigned)st.st_gid;
    o->id = file_id(&st);
  } else if (errno != ENOENT) {
    cli_die("%s %s: %s", o->flag, p, strerror(errno));
  }
  char *dir = dir_of(p);
  if (!dir)
    cli_die("out of memory");
  if (stat(dir, &st) != 0)
    cli_die("%s %s: folder '%s': %s", o->flag, p, dir, strerror(errno));
  if (!S_ISDIR(st.st_mode))
    cli_die("%s %s: '%s' is not a folder", o->flag, p, dir);
  if (access(dir, W_OK | X_OK) != 0)
    cli_die("%s %s: cannot write in folder '%s': %s", o->flag, p, dir, strerror(errno));
  o->dir = file_id(&st);
  free(dir);
}

/* "<path>.stsa-run.<pid>", or with ".<n>" when that name is taken. */
static char *staging_name(const char *path, const char *suffix) {
  size_t n = strlen(path) + 64;
  char *s = malloc(n);
  if (!s)
    cli_die("out of memory");
  struct stat st;
  for (int k = 0; k < 1000; k++) {
    if (k)
      snprintf(s, n, "%s.stsa-run.%ld.%s%d", path, (long)getpid(), suffix, k);
    else
      snprintf(s, n, "%s.stsa-run.%ld%s%s", path, (long)getpid(), *suffix ? "." : "",
               suffix);
    if (lstat(s, &st) != 0 && errno == ENOENT)
      return s;
  }
  cli_die("cannot find a free staging name next to '%s'", path);
}

void cli_outputs_prepare(cli_output *outs, int n, const cli_file_id *in,
                         const char *const *in_names, int n_in) {
  for (int i = 0; i < n; i++) {
    cli_output *o = &outs[i];
    check_output(o);
    for (int j = 0; o->exists && j < n_in; j++)
      if (same_id(o->id, in[j]))
        cli_die("%s %s: is the input %s (the same file); refusing to replace an input",
                o->flag, o->path, in_names[j]);
    for (int j = 0; j < i; j++) {
      const cli_output *e = &outs[j];
      if ((o->exists && e->exists && same_id(o->id, e->id)) ||
          (same_id(o->dir, e->dir) && !strcmp(o->base, e->base)))
        cli_die("%s %s and %s %s name the same file", e->flag, e->path, o->flag, o->path);
    }
  }
  pthread_mutex_lock(&files_lock);
  for (int i = 0; i < n && n_staged < 8; i++) {
    outs[i].staging = staging_name(outs[i].path, "");
    staged[n_staged++] = outs[i].staging;
  }
  pthread_mutex_unlock(&files_lock);
}

void cli_output_stage(cli_output *outs, int n, int i,
                      stsa_status (*write)(const char *path, void *arg, char *err,
                                           size_t err_len),
                      void *arg) {
  (void)n;
  char err[512];
  cli_output *o = &outs[i];
  pthread_mutex_lock(&files_lock);
  stsa_status st = write(o->staging, arg, err, sizeof err);
  /* owner first: chown clears set-user-ID bits that chmod then restores */
  if (st == STSA_OK && o->exists && geteuid() == 0)
    (void)!chown(o->staging, (uid_t)o->uid, (gid_t)o->gid); /* best effort */
  if (st == STSA_OK && o->exists && chmod(o->staging, o->mode) != 0)
    st = STSA_ERR_IO, snprintf(err, sizeof err, "cannot set the mode of '%s': %s",
                               o->staging, strerror(errno));
  if (st != STSA_OK) {
    remove_staged();
    cli_die("%s %s: %s (nothing written)", o->flag, o->path, err);
  }
  pthread_mutex_unlock(&files_lock);
}

/* Test hook (never set in normal use): wait while the file named by
 * STSA_TEST_COMMIT_GATE exists, with every output staged, so a test can send
 * a signal or change a target at this exact point. */
static void test_commit_gate(void) {
  const char *gate = getenv("STSA_TEST_COMMIT_GATE");
  if (!gate || !*gate)
    return;
  struct timespec ts = {0, 10 * 1000 * 1000};
  while (access(gate, F_OK) == 0)
    nanosleep(&ts, NULL);
}

/* "--out a, --report b": the outputs whose done[] is `want` ("none" if no one). */
static void list_outputs(char *buf, size_t len, const cli_output *outs, int n,
                         const int *done, int want) {
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < n && used < len; i++)
    if (done[i] == want)
      used += (size_t)snprintf(buf + used, len - used, "%s%s %s", used ? ", " : "",
                               outs[i].flag, outs[i].path);
  if (!buf[0])
    snprintf(buf, len, "none");
}

void cli_outputs_commit(cli_output *outs, int n) {
  test_commit_gate();
  pthread_mutex_lock(&files_lock);
  int done[8] = {0}, failed = -1, err_no = 0;
  /* a hard link keeps each old target, so a failed commit can restore it */
  for (int i = 0; i < n; i++)
    if (outs[i].exists) {
      outs[i].backup = staging_name(outs[i].path, "old");
      if (link(outs[i].path, outs[i].backup) != 0) {
        free(outs[i].backup);
        outs[i].backup = NULL; /* no hard links here: no rollback for this one */
      }
    }
  for (int i = 0; i < n && failed < 0; i++) {
    if (rename(outs[i].staging, outs[i].path) == 0)
      done[i] = 1, staged[i] = NULL; /* renamed: nothing left to remove */
    else
      failed = i, err_no = errno;
  }
  char written[1024], kept[1024];
  if (failed >= 0) {
    /* roll back: restore old targets, remove new ones */
    for (int i = 0; i < failed; i++) {
      int back = outs[i].backup    ? rename(outs[i].backup, outs[i].path) == 0
                 : !outs[i].exists ? unlink(outs[i].path) == 0
                                   : 0;
      done[i] = !back;
    }
  }
  remove_staged();
  for (int i = 0; i < n; i++)
    if (outs[i].backup)
      unlink(outs[i].backup); /* after a rollback these are gone already */
  pthread_mutex_unlock(&files_lock);
  if (failed >= 0) {
    list_outputs(written, sizeof written, outs, n, done, 1);
    list_outputs(kept, sizeof kept, outs, n, done, 0);
    cli_die("%s %s: cannot rename the finished file '%s' into place: %s; "
            "written: %s; left as they were: %s",
            outs[failed].flag, outs[failed].path, outs[failed].staging, strerror(err_no),
            written, kept);
  }
}

double cli_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double cli_median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double cli_min(const double *v, int n) {
  double m = v[0];
  for (int i = 1; i < n; i++)
    m = v[i] < m ? v[i] : m;
  return m;
}

void *cli_random_buffer(size_t n, stsa_dtype dtype, double scale, uint64_t seed) {
  size_t es = stsa_dtype_size(dtype);
  void *buf = aligned_alloc(64, (n * es + 63) / 64 * 64);
  if (!buf)
    cli_die("out of memory allocating %zu elements", n);
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; i < n; i += 2) {
    /* Box-Muller on a xorshift stream: two normals per step */
    double u[2];
    for (int j = 0; j < 2; j++) {
      s ^= s << 13;
      s ^= s >> 7;
      s ^= s << 17;
      u[j] = ((double)(s >> 11) + 0.5) / 9007199254740992.0;
    }
    double r = sqrt(-2.0 * log(u[0])) * scale;
    float z[2] = {(float)(r * cos(6.283185307179586 * u[1])),
                  (float)(r * sin(6.283185307179586 * u[1]))};
    for (size_t j = 0; j < 2 && i + j < n; j++) {
      if (dtype == STSA_F32)
        ((float *)buf)[i + j] = z[j];
      else if (dtype == STSA_F16)
        ((uint16_t *)buf)[i + j] = stsa_f32_to_f16(z[j]);
      else
        ((uint16_t *)buf)[i + j] = stsa_f32_to_bf16(z[j]);
    }
  }
  return buf;
}
