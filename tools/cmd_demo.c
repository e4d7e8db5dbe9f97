/* cmd_demo.c — `stsa demo`: the main job on the built-in workload. */
#include <stdio.h>
#include <stdlib.h>

#include "cli_util.h"
#include "commands.h"

int cmd_demo(int argc, char **argv) {
  (void)argc;
  (void)argv;
  printf("demo: not yet\n");
  return 0;
}
