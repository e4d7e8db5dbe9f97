/*
 * progress.h — a one-line progress bar on stderr for long work. Drawn only
 * when stderr is a terminal and not --quiet; redrawn at most ten times a
 * second; shows done/total, elapsed time and an estimate of what is left.
 */
#ifndef STSA_TOOLS_PROGRESS_H
#define STSA_TOOLS_PROGRESS_H

#include <stdint.h>

typedef struct progress {
  const char *label;
  int64_t total, done;
  double t0, last_draw;
  int enabled;
} progress;

void progress_start(progress *p, const char *label, int64_t total, int quiet);
void progress_update(progress *p, int64_t done);
/* Clears the bar (the caller prints results after it). */
void progress_finish(progress *p);

#endif
