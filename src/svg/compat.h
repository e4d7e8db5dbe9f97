/*
 * compat.h — stsa_svg_config and stsa_svg_report as callers built against
 * earlier releases lay them out: read into (and written back from) this
 * release's layout by the size the caller set (stsa.h, "Extensible
 * structs"). Every layout is larger than the one before it, so the size
 * alone tells which the caller has.
 */
#ifndef STSA_SVG_COMPAT_H
#define STSA_SVG_COMPAT_H

#include "core/error.h"
#include "stsa.h"

/* The caller's config in this release's layout (defaults past what it
 * knows; svg2.size set). */
stsa_status stsa_svg_config_read(const stsa_svg_config *cfg, stsa_svg_config *local,
                                 stsa_errbuf *err);

/* Writes `src` (this release's layout) into the caller's cfg, in the layout
 * its size names: only the fields it knows. */
stsa_status stsa_svg_config_write(stsa_svg_config *cfg, const stsa_svg_config *src,
                                  stsa_errbuf *err);

/* The caller's report in this release's layout (its pointers are read). */
stsa_status stsa_svg_report_read(const stsa_svg_report *report, stsa_svg_report *local,
                                 stsa_errbuf *err);

/* Writes `src` (read from dst by stsa_svg_report_read, then filled) back
 * into the caller's report, in its layout. */
void stsa_svg_report_write(stsa_svg_report *dst, const stsa_svg_report *src);

#endif
