/* cli_opts.h — one vocabulary for `cinfer run`, `serve` and `bench`: the flags and defaults
 * they share, parsed and resolved in one place (docs/serving.md "Flags shared by run, serve
 * and bench").
 *
 *   KV cache dtype   --kv-dtype f16|f32, default f16 (llama.cpp's); accepted aliases:
 *                    --kv f16|f32, --kv-f32, --kv-f16
 *   backend          --backend auto|cpu|cuda, default auto (cuda when a GPU answers, else cpu)
 *   sampling         defaults: built-in (temperature 0.7, top_p 1, top_k 0), replaced by
 *                    the model's generation_config.json (a Hugging Face directory), replaced
 *                    by the command's flags (--temperature/--temp, --top-p, --top-k)
 * Pure parsing and file reading; any thread.
 */
#ifndef CINFER_SERVER_CLI_OPTS_H
#define CINFER_SERVER_CLI_OPTS_H

#include <stdint.h>

#define CLI_BACKEND_DEFAULT "auto"

/* If argv flag a (value v = the next argument or NULL) is a KV dtype flag, sets *kv_dtype
 * (DT_F16 or DT_F32) and returns how many arguments it used (1 or 2); returns 0 when a is
 * not a KV dtype flag, -1 on a bad value (message on stderr, prefixed "cinfer CMD: "). */
int cli_kv_flag(const char *cmd, const char *a, const char *v, int *kv_dtype);

/* 1 when name is auto, cpu or cuda. */
int cli_backend_ok(const char *name);

/* Sampling defaults and extra end-of-generation ids from a model's generation_config.json. */
struct cli_gen_config {
    int has_temperature, has_top_p, has_top_k, has_repetition_penalty;
    float temperature, top_p, repetition_penalty;
    int top_k;
    int32_t eos[8];
    int n_eos;
};

/* Reads MODEL/generation_config.json when MODEL is a directory that has one: fills *gc and
 * returns 1; otherwise (a .gguf file, no such file, or unreadable) zeroes *gc, returns 0. */
int cli_gen_config_read(const char *model, struct cli_gen_config *gc);

#endif
