/* main.c — wiring only: picks the subcommand and hands over argv. */
#include <stdio.h>
#include <string.h>

#include "server/commands.h"
#include "util/log.h"
#include "util/version.h"

struct command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
};

static const struct command g_cmds[] = {
    {"serve", cmd_serve, "serve a model over the OpenAI, Anthropic and Responses APIs (default)"},
    {"run", cmd_run, "generate from a prompt on the command line, print tok/s"},
    {"tokenize", cmd_tokenize, "print the token ids of a text as a JSON array"},
    {"detokenize", cmd_detokenize, "print the text of a list of token ids"},
    {"render", cmd_render, "render a chat template for a conversation"},
    {"info", cmd_info, "show a model file's architecture, tensors and metadata"},
    {"bench", cmd_bench, "measure load, first-token, prefill and decode speed (JSON)"},
    {"pull", cmd_pull, "download a model from the Hugging Face Hub (ORG/REPO[:QUANT])"},
    {"ls", cmd_ls, "list the cached models (Hugging Face cache and local store)"},
    {"rm", cmd_rm, "remove a cached model"},
};

static void usage(FILE *f)
{
    fprintf(f, "cinfer " CINFER_VERSION " — an LLM inference server in C\n\n"
               "usage: cinfer <command> [args]\n"
               "       cinfer [serve options]   (serve the default model)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof g_cmds / sizeof g_cmds[0]; i++)
        fprintf(f, "  %-12s %s\n", g_cmds[i].name, g_cmds[i].help);
    fprintf(f, "\nRun 'cinfer <command> --help' for a command's options.\n\n%s",
            CINFER_ROUTES_HELP);
}

int main(int argc, char **argv)
{
    log_init_from_env();
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        usage(stdout);
        return 0;
    }
    if (argc >= 2 && strcmp(argv[1], "--version") == 0) {
        printf("cinfer %s\n", CINFER_VERSION);
        return 0;
    }
    /* bare `cinfer` (or only flags) serves the default model */
    if (argc < 2 || argv[1][0] == '-')
        return cmd_serve(argc, argv);
    for (size_t i = 0; i < sizeof g_cmds / sizeof g_cmds[0]; i++)
        if (strcmp(argv[1], g_cmds[i].name) == 0)
            return g_cmds[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "cinfer: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 1;
}
