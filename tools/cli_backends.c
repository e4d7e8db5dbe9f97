/* cli_backends.c — the library's backends in usage texts and options. */
#include "cli_backends.h"

#include <string.h>

#include "cli_util.h"

/* Enough for every name: the message that lists them is the only reader. */
#define NAMES_MAX 256

const char *cli_backend_names(char *buf, size_t len, int here_only, const char *sep) {
  size_t used = 0;
  buf[0] = '\0';
  for (int b = 0; b < stsa_backend_count() && used < len; b++)
    if (!here_only || stsa_backend_available((stsa_backend)b))
      used += (size_t)snprintf(buf + used, len - used, "%s%s", used ? sep : "",
                               stsa_backend_name((stsa_backend)b));
  return buf;
}

/* One line a backend: its name in a column as wide as the longest and two
 * spaces, then what it is. */
void cli_print_backends(FILE *f, int indent) {
  int width = 0;
  for (int b = 0; b < stsa_backend_count(); b++) {
    const int n = (int)strlen(stsa_backend_name((stsa_backend)b));
    width = n > width ? n : width;
  }
  for (int b = 0; b < stsa_backend_count(); b++)
    fprintf(f, "%*s%-*s  %s\n", indent, "", width, stsa_backend_name((stsa_backend)b),
            stsa_backend_about((stsa_backend)b));
}

stsa_backend cli_parse_backend(const char *opt, const char *value) {
  const int b = stsa_backend_from_name(value);
  if (b < 0) {
    char names[NAMES_MAX];
    cli_die("%s expects one of %s, got '%s'", opt,
            cli_backend_names(names, sizeof names, 0, ", "), value);
  }
  return (stsa_backend)b;
}
