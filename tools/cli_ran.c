/* cli_ran.c — what an attention call ran, as text and JSON (cli_ran.h). */
#define _POSIX_C_SOURCE 200809L /* strnlen */
#include "cli_ran.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"

int cli_last_run(const stsa_ctx *ctx, stsa_run_info *info) {
  *info = (stsa_run_info){.size = sizeof *info};
  if (stsa_ctx_last_run(ctx, info) == STSA_OK)
    return 1;
  *info = (stsa_run_info){.size = sizeof *info};
  return 0;
}

stsa_run_info cli_ran(const stsa_ctx *ctx, const char *what) {
  stsa_run_info info;
  if (!cli_last_run(ctx, &info))
    cli_die("%s: the context recorded no run of the call (stsa_ctx_last_run)", what);
  return info;
}

int cli_ran_same(const stsa_run_info *a, const stsa_run_info *b) {
  return a->backend == b->backend && a->arith == b->arith &&
         a->bf16_terms == b->bf16_terms && a->pv_precision == b->pv_precision &&
         !strncmp(a->why, b->why, sizeof a->why);
}

int64_t cli_ran_common(const stsa_run_info *info, const unsigned char *known, int64_t n,
                       const char *unit, char *note, size_t len) {
  int64_t first = -1;
  for (int64_t i = 0; i < n; i++) {
    if (known[i] == CLI_RAN_UNKNOWN) {
      snprintf(note, len,
               "not known: %s %lld computed heads of the call, but its context recorded "
               "no run of them",
               unit, (long long)i);
      return -1;
    }
    if (known[i] != CLI_RAN_KNOWN)
      continue;
    if (first < 0)
      first = i;
    else if (!cli_ran_same(&info[first], &info[i])) {
      snprintf(note, len, "the %ss differ", unit);
      return -1;
    }
  }
  int64_t none = 0, first_none = -1;
  for (int64_t i = 0; i < n; i++)
    if (known[i] == CLI_RAN_NONE && none++ == 0)
      first_none = i;
  if (first < 0)
    snprintf(note, len, "no %s computed heads of the call", unit);
  else if (none == 1)
    snprintf(note, len, "%s %lld computed no heads of the call", unit,
             (long long)first_none);
  else if (none > 1)
    snprintf(note, len, "%s %lld and %lld more computed no heads of the call", unit,
             (long long)first_none, (long long)(none - 1));
  else
    note[0] = '\0';
  return first;
}

const char *cli_ran_text(const stsa_run_info *r, char *buf, size_t len) {
  const char *backend = stsa_backend_name(r->backend), *arith = stsa_arith_name(r->arith);
  if (r->arith == STSA_ARITH_BF16_TILES)
    snprintf(buf, len, "%s, %s (P.V %s: %d bf16 term%s a probability)", backend, arith,
             stsa_pv_precision_name(r->pv_precision), r->bf16_terms,
             r->bf16_terms == 1 ? "" : "s");
  else if (r->why[0])
    snprintf(buf, len, "%s, %s (%.*s)", backend, arith, (int)sizeof r->why, r->why);
  else
    snprintf(buf, len, "%s, %s", backend, arith);
  return buf;
}

json_t *cli_ran_object(const stsa_run_info *r) {
  if (!r)
    return json_null();
  return json_pack("{s:s, s:s, s:i, s:s, s:s%}", "backend", stsa_backend_name(r->backend),
                   "arithmetic", stsa_arith_name(r->arith), "bf16_terms", r->bf16_terms,
                   "pv_precision", stsa_pv_precision_name(r->pv_precision), "why", r->why,
                   strnlen(r->why, sizeof r->why));
}

const char *cli_ran_json(const stsa_run_info *r, char *buf, size_t len) {
  json_t *j = cli_ran_object(r);
  char *text = j ? json_dumps(j, JSON_ENCODE_ANY) : NULL;
  snprintf(buf, len, "%s", text ? text : "null");
  free(text);
  json_decref(j);
  return buf;
}
