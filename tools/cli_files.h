/*
 * cli_files.h — how the tool's commands treat files: inputs checked before
 * they are opened (no FIFO blocks, no device is read), outputs validated up
 * front, staged next to their targets and committed together, with staging
 * files removed on SIGINT/SIGTERM/SIGHUP. Dies (cli_die) on every failure.
 */
#ifndef STSA_TOOLS_CLI_FILES_H
#define STSA_TOOLS_CLI_FILES_H

#include <stddef.h>
#include <stdio.h>

#include "stsa.h"

/* Identity of a file: device and inode (two names of one file compare equal). */
typedef struct cli_file_id {
  unsigned long long dev, ino;
} cli_file_id;

/* Dies unless `path` (named by option `flag`) is a regular file; checked with
 * stat before anything opens it, so a FIFO or a device never blocks or gets
 * read. *id (may be NULL) receives its identity. */
void cli_check_input(const char *flag, const char *path, cli_file_id *id);

/* Opens an input for reading after cli_check_input; dies naming the reason. */
FILE *cli_open_input(const char *flag, const char *path);

/* An output of a command: validated up front, written under a staging name
 * next to the target, then committed together with the other outputs. */
typedef struct cli_output {
  const char *flag, *path; /* "--out", the target */
  int exists;              /* the target exists (a regular file) */
  unsigned mode;           /* its permission bits, kept by the replacement */
  unsigned uid, gid;       /* its owner (kept when running as root) */
  cli_file_id id, dir;     /* the target (when it exists) and its folder */
  const char *base;        /* last component of path */
  char *staging;           /* "<path>.stsa-run.<pid>[.n]", written by the caller */
  char *backup;            /* hard link to the old target during the commit */
} cli_output;

/* Call first in a command that writes outputs, before any thread exists:
 * blocks SIGINT, SIGTERM and SIGHUP in every thread and starts one thread
 * that waits for them. On a signal it removes the staging files (waiting for
 * a write or commit in progress to finish, so no writer's temp file is left)
 * and then dies of the signal with its default action. */
void cli_signals_start(void);

/* Validates every output before anything is written: the folder exists and
 * is writable; an existing target is a regular file (not a directory, FIFO,
 * device or symbolic link); no output is one of the n_in inputs (same device
 * and inode); no two outputs are one file (same inode, or same folder inode
 * and name for a target that does not exist yet). Then picks the staging
 * names and registers them for cli_signals_start's cleanup. Dies with a
 * message otherwise. */
void cli_outputs_prepare(cli_output *outs, int n, const cli_file_id *in,
                         const char *const *in_names, int n_in);

/* Calls write(path, arg) for the staging file of outs[i]; a signal meanwhile
 * takes effect when the write returns, so the writer's own temp file is never
 * left behind. Dies on failure (the writer's message; staging files removed). */
void cli_output_stage(cli_output *outs, int n, int i,
                      stsa_status (*write)(const char *path, void *arg, char *err,
                                           size_t err_len),
                      void *arg);

/* Renames every staging file over its target (keeping the old permission
 * bits), as one step for the signal thread. If a rename fails, the outputs already
 * renamed are rolled back (the old file restored from a hard link, or the new one
 * removed) and the message says which files were and were not written. */
void cli_outputs_commit(cli_output *outs, int n);

/* A writer for cli_output_stage: the string arg and a newline, atomically. */
stsa_status cli_write_text(const char *path, void *arg, char *err, size_t err_len);

#endif
