/*
 * dist_call.h — what the entry points (dense, sparse, SVG) share: local
 * argument checks and the call signature every rank must agree on.
 */
#ifndef STSA_DIST_CALL_H
#define STSA_DIST_CALL_H

#include "dist/dist_internal.h"

/* Checks this rank's tensors (one shape for q, k, v, out; what
 * stsa_attention_check checks) and the report's size; fills the shape and
 * dtype fields of sig. */
stsa_status dist_check_local(stsa_dist *d, const stsa_tensor *q, const stsa_tensor *k,
                             const stsa_tensor *v, const stsa_tensor *out,
                             const stsa_dist_report *report, dist_sig *sig);

/* A signature of `kind` with the context's scheme fields. */
void dist_sig_init(const stsa_dist *d, int kind, dist_sig *sig);

#endif
