/* cmd_tokenize.c — placeholder until its issue lands; owned by the module's author. */
#include <stdio.h>

#include "server/commands.h"

int cmd_tokenize(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "cinfer: tokenize is not built yet\n");
    return 2;
}

int cmd_detokenize(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "cinfer: detokenize is not built yet\n");
    return 2;
}
