/* cli_files.c — see cli_files.h. */
#define _POSIX_C_SOURCE 200809L
#include "cli_files.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "stsa_io.h"

#include "cli_util.h"

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

stsa_status cli_write_text(const char *path, void *arg, char *err, size_t err_len) {
  const char *text = arg;
  stsa_io_chunk chunks[2] = {{text, strlen(text)}, {"\n", 1}};
  return stsa_io_atomic_write(path, chunks, 2, err, err_len);
}
