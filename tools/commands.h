/* commands.h — the subcommands of the stsa tool. Each returns an exit code. */
#ifndef STSA_TOOLS_COMMANDS_H
#define STSA_TOOLS_COMMANDS_H

int cmd_peak(int argc, char **argv);
int cmd_bench(int argc, char **argv);
/* `stsa bench svg` (argv[1] is "svg") */
int bench_svg(int argc, char **argv);
/* `stsa bench svg2` (argv[1] is "svg2") */
int bench_svg2(int argc, char **argv);
/* `stsa bench quality` (argv[1] is "quality") */
int bench_quality(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_plot(int argc, char **argv);

#endif
