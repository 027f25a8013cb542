/* cmd_run.c — placeholder until its issue lands; owned by the module's author. */
#include <stdio.h>

#include "server/commands.h"

int cmd_run(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "cinfer: run is not built yet\n");
    return 2;
}
