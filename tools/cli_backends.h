/*
 * cli_backends.h — the library's backends as the tool shows and parses
 * them. Every text is read from the library's table (stsa_backend_count,
 * stsa_backend_name, stsa_backend_about, stsa_backend_available), so the
 * usage texts and messages list exactly the backends the library has.
 */
#ifndef STSA_TOOLS_CLI_BACKENDS_H
#define STSA_TOOLS_CLI_BACKENDS_H

#include <stddef.h>
#include <stdio.h>

#include "stsa.h"

/* "auto, ref, portable, ...": every backend's name (here_only: those this
 * machine runs), separated by sep, in buf (truncated to fit); returns buf. */
const char *cli_backend_names(char *buf, size_t len, int here_only, const char *sep);

/* A line per backend: `indent` spaces, the name padded to a column, and
 * what it is. */
void cli_print_backends(FILE *f, int indent);

/* The backend named `value` for option `opt`; dies naming every backend
 * when no backend has that name. */
stsa_backend cli_parse_backend(const char *opt, const char *value);

#endif
