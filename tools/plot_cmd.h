/*
 * plot_cmd.h — what the pictures of `stsa plot` share (cmd_plot.c): the
 * usage, option parsing, the list of input files and saving the PNG; and the
 * pictures themselves, one file each (plot_plan.c, plot_attention.c,
 * plot_kinds.c, plot_speedup.c, plot_pareto.c). Drawing primitives are in plot_png.h.
 */
#ifndef STSA_TOOLS_PLOT_CMD_H
#define STSA_TOOLS_PLOT_CMD_H

#include <jansson.h>

#include "cli_files.h"
#include "cli_options.h"
#include "plot_png.h"

/* Text scale of every picture: the 5x7 font doubled reads well at 100%. */
enum { TS = 2 };

/* The pictures: argv[1] is the picture's name, options from argv[2]. */
int plot_plan(int argc, char **argv);
int plot_attention(int argc, char **argv);
int plot_kinds(int argc, char **argv);
int plot_speedup(int argc, char **argv);
int plot_pareto(int argc, char **argv);

/* Parses the options of picture `what` ("plan") against the sets; errors
 * name "plot <what>" and point to `stsa plot --help`. */
void plot_parse(const char *what, int argc, char **argv, const cli_opt_set *sets,
                int n_sets);

/* Dies unless --out was given. */
void plot_need_out(const char *out, const char *what);

/* Records an input file of the picture (device, inode), so --out never
 * replaces one. */
void plot_add_input(const char *flag, const char *path, cli_file_id id);

/* A JSON number, or null for NaN and Inf (JSON has neither). */
json_t *plot_json_real(double x);

/* root as indented text (8 significant digits; the caller frees it); takes
 * root's reference. Out of memory ends the tool with a message. */
char *plot_json_text(json_t *root);

/* A writer for cli_output_stage: the canvas arg as a PNG. */
stsa_status plot_png_writer(const char *path, void *canvas, char *err, size_t err_len);

/* Writes c to --out as `stsa run` writes its outputs: checked (a regular
 * file, not an input), staged and renamed into place. */
void plot_save(const canvas *c, const char *path);

#endif
