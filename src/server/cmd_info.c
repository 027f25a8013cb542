/* cmd_info.c — placeholder until its issue lands; owned by the module's author. */
#include <stdio.h>

#include "server/commands.h"

int cmd_info(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "cinfer: info is not built yet\n");
    return 2;
}
