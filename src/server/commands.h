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

/* Every HTTP route of `cinfer serve`, for `cinfer --help` and `cinfer serve --help`
 * (tests/e2e/test_docs_examples.py checks it names every route the sources register). */
#define CINFER_ROUTES_HELP                                                                  \
    "routes of `cinfer serve` (docs/api.md):\n"                                             \
    "  POST /v1/chat/completions        OpenAI chat completions (stream or not, tools)\n"   \
    "  POST /v1/completions             OpenAI raw-prompt completions\n"                    \
    "  POST /v1/responses               OpenAI Responses (previous_response_id, tools)\n"   \
    "  GET  /v1/responses/{id}          a stored response; DELETE /v1/responses/{id}\n"     \
    "  DELETE /v1/responses/{id}        forgets a stored response\n"                        \
    "  POST /v1/messages                Anthropic Messages (stream or not, tools)\n"        \
    "  POST /v1/messages/count_tokens   Anthropic token count of a Messages body\n"         \
    "  POST /v1/embeddings              OpenAI embeddings (an embedding model: docs/embeddings.md)\n" \
    "  POST /apply-template             the chat prompt a chat body renders to (no model run)\n" \
    "  POST /tokenize, POST /detokenize  vLLM's tokenizer routes (text <-> ids)\n"          \
    "  GET  /tokenizer_info             the tokens and template (vLLM's shape)\n"          \
    "  GET  /server_info, /model_info   SGLang's probes, with their aliases\n"             \
    "  GET  /get_server_info, /get_model_info\n"                                        \
    "  GET  /v1/models, /v1/models/{id} the served model(s) and mounted adapters\n"         \
    "  POST /v1/adapters                mounts a LoRA adapter {path, id?, scale?} (docs/lora.md)\n" \
    "  GET  /v1/adapters, /v1/adapters/available  mounted / mountable (--adapters-dir) adapters\n" \
    "  DELETE /v1/adapters/{id}         unmounts one (running requests finish with it)\n"      \
    "  GET  /v1                         name, version, model, endpoints\n"                  \
    "  GET  /health                     200 once ready (no API key needed; 503 loading)\n"  \
    "  GET  /stats                      JSON counters, latencies, cache and store state\n"  \
    "  GET  /metrics                    the same for Prometheus (and vLLM's names)\n"       \
    "  GET  /fit                        the memory plan and predicted speed (docs/models.md)\n" \
    "  GET  /, /index.html, /assets/{file}  the browser chat page (docs/web.md)\n"          \
    "  GET  /chat, /status              302 to the page's chat and status views\n"          \
    "  POST /admin/cache/flush          with --ssd-cache, loopback only (docs/ssd-cache.md)\n" \
    "  GET  /engine                     with --isolate: the engine children (docs/isolation.md)\n" \
    "  POST /admin/sleep, /admin/wake   with --isolate, loopback only: free / reload the engines\n" \
    "  POST /admin/drain                an --isolate engine child's unix socket only\n" \
    "  POST /debug/advance-clock        test only, with env CINFER_TEST_CONTROLS=1\n"       \
    "                                   (docs/testing.md)\n"

#endif
