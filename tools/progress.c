/* progress.c — see progress.h. */
#define _POSIX_C_SOURCE 200809L
#include "progress.h"

#include <stdio.h>
#include <unistd.h>

#include "cli_util.h"

void progress_start(progress *p, const char *label, int64_t total, int quiet) {
  p->label = label;
  p->total = total > 0 ? total : 1;
  p->done = 0;
  p->t0 = cli_now();
  p->last_draw = 0;
  p->enabled = !quiet && isatty(fileno(stderr));
}

void progress_update(progress *p, int64_t done) {
  p->done = done;
  if (!p->enabled)
    return;
  double t = cli_now();
  if (t - p->last_draw < 0.1 && done < p->total)
    return;
  p->last_draw = t;
  enum { WIDTH = 30 };
  int filled = (int)(WIDTH * done / p->total);
  char bar[WIDTH + 1];
  for (int i = 0; i < WIDTH; i++)
    bar[i] = i < filled ? '#' : '.';
  bar[WIDTH] = '\0';
  double elapsed = t - p->t0;
  double eta = done > 0 ? elapsed * (double)(p->total - done) / (double)done : 0;
  fprintf(stderr, "\r%s [%s] %lld/%lld  %.1fs  eta %.1fs ", p->label, bar,
          (long long)done, (long long)p->total, elapsed, eta);
  fflush(stderr);
}

void progress_finish(progress *p) {
  if (p->enabled) {
    fprintf(stderr, "\r%*s\r", 79, "");
    fflush(stderr);
  }
}
