/*
 * parts.h — what the partitioned entry points (stsa_attention_part,
 * stsa_sparse_attention_part) share: the (ith, nth) and work-buffer checks,
 * and the buffer's layout: nth slices of stsa_work_slice_bytes after the
 * first 64-byte boundary of wdata (ggml's wsize/wdata pattern: the caller
 * allocates once, every part uses its own slice, nothing is allocated per
 * call).
 */
#ifndef STSA_KERNEL_PARTS_H
#define STSA_KERNEL_PARTS_H

#include "core/error.h"
#include "kernel/schedule.h"

/* Most parts one call may be cut into. */
#define STSA_MAX_PARTS 65536

/* Checks nth (1..STSA_MAX_PARTS), 0 <= ith < nth and that `ptr` (the work
 * buffer, or the wsize result) is not NULL; `what` names the entry point. */
stsa_status stsa_parts_check(int nth, int ith, const void *ptr, const char *what,
                             stsa_errbuf *err);

/* Bytes of the work buffer nth parts of `w` share. */
size_t stsa_parts_wsize(const stsa_work *w, int nth);

/* Runs part ith of nth in its slice of wdata after checking wsize. */
stsa_status stsa_parts_run(const stsa_work *w, int ith, int nth, void *wdata,
                           size_t wsize, const char *what, stsa_errbuf *err);

#endif
