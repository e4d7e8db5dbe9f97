/*
 * cli_ran.h — what an attention call ran (stsa_ctx_last_run: the backend,
 * the arithmetic, the bf16 terms and why not the backend's fastest), as the
 * commands print it and write it into their JSON: nothing runs silently.
 */
#ifndef STSA_TOOLS_CLI_RAN_H
#define STSA_TOOLS_CLI_RAN_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "stsa.h"

/* What the last successful attention call on ctx ran, into *info; returns 1,
 * or 0 (and *info zeroed but for its size) when ctx has recorded none. */
int cli_last_run(const stsa_ctx *ctx, stsa_run_info *info);

/* The same, for a call that just succeeded on ctx: dies if nothing was
 * recorded (the library promises a record after every successful call). */
stsa_run_info cli_ran(const stsa_ctx *ctx, const char *what);

/* Whether two records say the same. */
int cli_ran_same(const stsa_run_info *a, const stsa_run_info *b);

/* What is known of one entry (a head, a rank) of a call. */
enum {
  CLI_RAN_NONE = 0,    /* it computed nothing of the call (a rank without heads) */
  CLI_RAN_KNOWN = 1,   /* its record */
  CLI_RAN_UNKNOWN = 2, /* it computed heads, but its context recorded no run */
};

/* The entry of info[n] (known[i]: a CLI_RAN_* of entry i) that every entry
 * that computed something shares, as its index, with note "" or naming the
 * entries that computed nothing ("rank 2 computed no heads of the call");
 * or -1 and why not in note: "not known: <unit> i computed heads of the
 * call, but its context recorded no run of them", "the <unit>s differ", "no
 * <unit> computed heads of the call" (unit: "head", "rank"). */
int64_t cli_ran_common(const stsa_run_info *info, const unsigned char *known, int64_t n,
                       const char *unit, char *note, size_t len);

/* The text: "avx512, f32", "amx, bf16-tiles (P.V f32: 3 bf16 terms a probability)",
 * "amx, f32 (kv tiles of 240 keys: the bf16 tiles take multiples of 32)".
 * Writes buf (256 bytes do) and returns it. */
const char *cli_ran_text(const stsa_run_info *r, char *buf, size_t len);

/* The JSON object {"backend": "amx", "arithmetic": "f32", "bf16_terms": 0,
 * "pv_precision": "f32", "why": "..."}, or null for r NULL (a new reference; NULL when
 * out of memory). */
json_t *cli_ran_object(const stsa_run_info *r);
/* The same as text, for the commands that print their JSON line by line.
 * Writes buf (512 bytes do) and returns it. */
const char *cli_ran_json(const stsa_run_info *r, char *buf, size_t len);

/* Whether the arithmetic is the amx backend's bf16 tiles, which the f32 FMA
 * peak does not bound. */
static inline int cli_ran_tiles(const stsa_run_info *r) {
  return r->arith == STSA_ARITH_BF16_TILES;
}

#endif
