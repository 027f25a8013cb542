/* commands.h — the subcommands of the cinfer binary. Each takes the arguments after the
 * subcommand name (argv[0] is the subcommand) and returns the process exit status. Only
 * main.c calls them; they may print to stdout/stderr (they are the user interface). */
#ifndef CINFER_SERVER_COMMANDS_H
#define CINFER_SERVER_COMMANDS_H

int cmd_run(int argc, char **argv);        /* cmd_run.c */
int cmd_tokenize(int argc, char **argv);   /* cmd_tokenize.c */
int cmd_detokenize(int argc, char **argv); /* cmd_tokenize.c */
int cmd_render(int argc, char **argv);     /* cmd_render.c */
int cmd_info(int argc, char **argv);       /* cmd_info.c */
int cmd_bench(int argc, char **argv);      /* cmd_bench.c */
int cmd_serve(int argc, char **argv);      /* cmd_serve.c */
int cmd_pull(int argc, char **argv);       /* cmd_models.c */
int cmd_ls(int argc, char **argv);         /* cmd_models.c */
int cmd_rm(int argc, char **argv);         /* cmd_models.c */
/* cmd_models.c: bytes a model may take to "fit here" (0.6x of 75% of RAM; CINFER_FIT_BYTES
 * overrides, for tests) */
long long models_fit_bytes(void);

#endif
