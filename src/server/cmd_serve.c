/* cmd_serve.c — `cinfer serve MODEL [flags]`: the HTTP server (the main job).
 *
 * Order (server-inventory §1.2): validate flags (a bad value exits 1 naming the flag and
 * its range) → pre-flight probe of the port → load (weights mmap'd lazily) → engine →
 * listen → ready card → run until SIGINT/SIGTERM, which ends in-flight streams with an
 * error event, cancels their generations and exits 0.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/cpu/cpu.h"
#include "engine/plan.h"
#include "format/hfconfig.h"
#include "kv/kv_events.h"
#include "server/cli_opts.h"
#include "server/commands.h"
#include "server/model_store.h"
#include "server/isolate/isolate.h"
#include "server/serve.h"
#include "server/serve_embed.h"
#include "template/tmpl.h"
#include "web/web.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/version.h"

#define DEFAULT_MODEL_FILE "qwen2.5-coder-0.5b-instruct-Q4_K_M.gguf"

static void serve_usage(FILE *f)
{
    fprintf(f,
            "usage: cinfer serve [MODEL] [options]\n"
            "       cinfer [options]            (the same, on the default model)\n\n"
            "Serves MODEL over the OpenAI (chat completions, completions, Responses) and\n"
            "Anthropic (Messages) APIs, routes below. MODEL is a .gguf file or a Hugging Face\n"
            "model directory (a BERT-family one, e.g. all-MiniLM-L6-v2, is served for\n"
            "POST /v1/embeddings only, batched by --max-batch-tokens: docs/embeddings.md), or a\n"
            "cached model's name or a unique part of it (`cinfer ls`;\n"
            "`cinfer pull ORG/REPO[:QUANT]` fetches one); without it: $CINFER_MODEL (a path),\n"
            "else the default model (" DEFAULT_MODEL_FILE ") in ./models or\n"
            "~/.cache/cinfer/models (fetch it with scripts/fetch_models.sh), else the largest\n"
            "cached model that fits here.\n\n"
            "options:\n"
            "  --host ADDR            bind address (default 127.0.0.1)\n"
            "  --port N               port (default 8080)\n"
            "  --api-key KEY          require 'Authorization: Bearer KEY' or 'x-api-key: KEY'\n"
            "                         (default: no authentication)\n"
            "  --max-tokens N         tokens generated when a request gives no max_tokens\n"
            "                         (default 65536 for chat, 512 for completions; [1, 1e7])\n"
            "  --temperature T        default temperature, [0, 5] (alias --temp; --temperature\n"
            "                         wins when both are given)\n"
            "  --top-p P              default nucleus sampling, [0, 1] (0 or 1 = off)\n"
            "  --top-k K              default top-k, [0, 1000000] (0 = off)\n"
            "                         (unset sampling defaults come from the model's\n"
            "                         generation_config.json, else temperature 0.7)\n"
            "  --thinking true|false  default enable_thinking for think-tag models\n"
            "  --chat-template FILE   a .jinja chat template instead of the model's own\n"
            "  -t, --threads N        CPU threads (default: all cores)\n"
            "  --backend auto|cpu|cuda  where the model runs (default auto: cuda when a GPU\n"
            "                         answers, else cpu)\n"
            "  --device N             GPU index for --backend cuda (default 0)\n"
            "  --compiled-decode on|off  replay decode steps as CUDA graphs (default on)\n"
            "  -c, --ctx N            max context per request (default: the model's, capped by\n"
            "                         the memory plan)\n"
            "  --batch N              requests decoded together (default 8; 1 = one at a time;\n"
            "                         alias --decode-concurrency)\n"
            "  --max-batch-tokens N   tokens per forward step: decodes first, then prefill\n"
            "                         chunks (default 2048)\n"
            "  --memory-budget GB     memory for weights + KV + transients, decimal GB\n"
            "                         (default 75%% of RAM); sets the max safe context\n"
            "  --kv-budget GB         cap on the projected KV (prompt + max_tokens) of running\n"
            "                         requests; joiners wait FIFO (default off)\n"
            "  --prompt-cache GB      prefix cache of finished/shared KV, binary GiB (default 8;\n"
            "                         0 disables)\n"
            "  --ssd-cache DIR        keep prefix KV on disk under the RAM cache: it survives\n"
            "                         restarts (default off; needs the prompt cache)\n"
            "  --ssd-cache-max GB     the SSD cache's cap, binary GiB; the oldest files by\n"
            "                         mtime go first (default 32)\n"
            "  --ssd-cache-verify     hash every payload on restore (the header hash is always\n"
            "                         checked)\n"
            "  --ssd-demote-idle SEC  cached KV unused this long moves to disk and frees its\n"
            "                         pool blocks, while idle (default 300; 0 disables)\n"
            "  --generation-checkpoint N  with --ssd-cache: a running request's KV is written\n"
            "                         every N tokens, so a retry after a crash resumes from it\n"
            "  --tool-choice-none-keeps-tools  a request with tools and tool_choice \"none\"\n"
            "                         still renders the tools (no call is parsed, the call\n"
            "                         markup's token is banned), so its prompt keeps the\n"
            "                         conversation's cached prefix (default: the tools are\n"
            "                         left out of the prompt, as the reference server does)\n"
            "  --kv-block-size N      KV positions per block (default 16; alias\n"
            "                         --paged-kv-block-size; --paged-kv is accepted: paging is\n"
            "                         always on)\n"
            "  --kv-dtype f16|f32     KV cache dtype (default f16; aliases --kv f16|f32,\n"
            "                         --kv-f32, --kv-f16)\n"
            "  --kv-quant off|8|4|turbo[:k<b>v<b>]|config[:PATH]  quantized KV cache (default\n"
            "                         off; docs/kv-quant.md)\n"
            "  --kv-rotate on|off     Hadamard-rotate quantized K/V (default: on)\n"
            "  --l1 | --l2            fidelity tier: l1 reference numerics (f16 KV), l2 the\n"
            "                         --kv-quant config preset (--l3 is refused)\n"
            "  --fused-sdpa on|off    quantized attention fused in the kernel (default on)\n"
            "  --compiled-activations on|off  the gated activation as one op (default on)\n"
            "  --force-wire           lock the weights in RAM (mlock)\n"
            "  --max-queue N          waiting requests before 429 (default 64)\n"
            "  --max-conns N          open connections before 429 (default 256)\n"
            "  --max-body BYTES       request body limit, 413 beyond (default 16777216)\n"
            "  --served-model-name NAME  the model id /v1/models reports (default: the file name)\n"
            "  --drain-timeout S      SIGTERM drains: /health turns 503, new requests get 503,\n"
            "                         running ones finish for up to S seconds, then exit\n"
            "                         (default 0: SIGTERM cancels in-flight requests at once)\n"
            "  --embeddings last|mean  also serve POST /v1/embeddings from this generative\n"
            "                         model: last-token or mean pooling of its final hidden\n"
            "                         states, normalized (forwards taking turns with the\n"
            "                         engine's steps on its model; docs/embeddings.md)\n"
            "  --kv-events ENDPOINT   publish KV-cache block events in vLLM's ZMQ/msgpack format\n"
            "                         on a PUB socket, e.g. tcp://*:5557 (default off)\n"
            "  --kv-events-replay ENDPOINT  a ROUTER socket that replays past event batches\n"
            "  --kv-events-layout map|array  msgpack layout of the events (default map: vLLM's\n"
            "                         current tagged maps; array: its older array_like form)\n"
            "  --draft-kind KIND      speculative decoding: ngram (prompt lookup), suffix\n"
            "                         (request + recent outputs) or two-model (default when\n"
            "                         --draft-model is given); output is unchanged\n"
            "  --draft-model PATH     a smaller model with the same tokenizer drafts tokens\n"
            "  --num-draft-tokens N   most draft tokens per row and step (default 10 for\n"
            "                         ngram/suffix, 3 for two-model; sized down adaptively)\n"
            "  --ngram-max N          longest trailing n-gram ngram looks up (default 3)\n"
            "  --ngram-min N          shortest (default 1)\n"
            "  --draft-lookup on|off  two-model: rows that repeat earlier text draft the\n"
            "                         copy by prompt lookup (no draft forward; up to 10\n"
            "                         tokens) where that yields more than the model's\n"
            "                         drafts (default on)\n"
            "  --adapter DIR|FILE     mount a LoRA adapter (PEFT directory or GGUF LoRA file)\n"
            "                         at start-up, the default for requests that name none;\n"
            "                         repeat to stack (alias --adapter-path; docs/lora.md)\n"
            "  --adapters-dir DIR     adapters GET /v1/adapters/available lists and POST\n"
            "                         /v1/adapters mounts by name\n"
            "  --no-open              do not open the browser chat page (opened with xdg-open\n"
            "                         when stdout is a terminal)\n"
            "  --isolate              run the engine in a child process behind a supervisor\n"
            "                         that owns the port: a crashed engine gets a clean 502\n"
            "                         and is respawned (docs/isolation.md)\n"
            "  --model-pool N         with --isolate: engines resident at once (default 1)\n"
            "  --models-dir DIR       with --isolate: serve every .gguf in DIR too\n"
            "  --idle-unload SEC      with --isolate: stop an engine unused for SEC seconds\n"
            "                         (the next request for its model reloads it)\n"
            "  -h, --help             this help\n\n%s",
            CINFER_ROUTES_HELP);
}

/* ---- flags ---------------------------------------------------------------------------- */

static int bad(const char *flag, const char *range, const char *v)
{
    fprintf(stderr, "cinfer serve: %s expects %s, got '%s'\n", flag, range, v ? v : "");
    return -1;
}

static int p_int(const char *flag, const char *v, long lo, long hi, const char *range, int *out)
{
    char *end;
    errno = 0;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || !*v || errno || *end || x < lo || x > hi)
        return bad(flag, range, v);
    *out = (int)x;
    return 0;
}

static int p_float(const char *flag, const char *v, double lo, double hi, const char *range,
                   float *out)
{
    char *end;
    errno = 0;
    double x = v ? strtod(v, &end) : 0;
    if (!v || !*v || errno || *end || !(x >= lo && x <= hi))
        return bad(flag, range, v);
    *out = (float)x;
    return 0;
}

/* A size in GB (a number >= lo, at most 1e6). */
static int p_gb(const char *flag, const char *v, double lo, double *out)
{
    char *end, range[64];
    errno = 0;
    double x = v ? strtod(v, &end) : 0;
    snprintf(range, sizeof range, "a number of GB >= %g", lo);
    if (!v || !*v || errno || *end || !(x >= lo && x <= 1e6))
        return bad(flag, range, v);
    *out = x;
    return 0;
}

static int p_bool(const char *flag, const char *v, int *out)
{
    if (v && (!strcmp(v, "true") || !strcmp(v, "on") || !strcmp(v, "1")))
        *out = 1;
    else if (v && (!strcmp(v, "false") || !strcmp(v, "off") || !strcmp(v, "0")))
        *out = 0;
    else
        return bad(flag, "true|false", v);
    return 0;
}

static int parse_args(int argc, char **argv, struct serve_opts *o)
{
    char *role = o->argrole;
    memset(o, 0, sizeof *o);
    o->argrole = role;
    o->host = "127.0.0.1";
    o->port = 8080;
    o->thinking = -1;
    o->batch = 8;
    o->max_batch_tokens = 2048;
    o->max_queue = 64;
    o->max_conns = 256;
    o->max_body = 16L << 20;
    o->kv_block_size = 16;
    o->memory_budget_gb = o->kv_budget_gb = o->prompt_cache_gib = -1;
    o->ssd_max_gib = o->ssd_demote_s = -1;
    o->kv_rotate = o->fused_sdpa = o->compiled_act = -1;
    float temp_alias = 0;
    int kvd = DT_F16;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int rc = 0, used = 1, mb = 0, kv;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            serve_usage(stdout);
            exit(0);
        } else if (!strcmp(a, "--host"))
            o->host = v, rc = v && *v ? 0 : bad(a, "an address", v);
        else if (!strcmp(a, "--port"))
            rc = p_int(a, v, 0, 65535, "an integer in [0, 65535]", &o->port);
        else if (!strcmp(a, "--api-key"))
            o->api_key = v, rc = v && *v ? 0 : bad(a, "a non-empty key", v);
        else if (!strcmp(a, "--max-tokens"))
            rc = p_int(a, v, 1, 10000000, "an integer in [1, 10000000]", &o->max_tokens);
        else if (!strcmp(a, "--temperature"))
            rc = p_float(a, v, 0, 5, "a number in [0, 5]", &o->temperature),
            o->temperature_set = 1;
        else if (!strcmp(a, "--temp"))
            rc = p_float(a, v, 0, 5, "a number in [0, 5]", &temp_alias), o->temp_set = 1;
        else if (!strcmp(a, "--top-p"))
            rc = p_float(a, v, 0, 1, "a number in [0, 1]", &o->top_p), o->top_p_set = 1;
        else if (!strcmp(a, "--top-k"))
            rc = p_int(a, v, 0, 1000000, "an integer in [0, 1000000]", &o->top_k),
            o->top_k_set = 1;
        else if (!strcmp(a, "--thinking"))
            rc = p_bool(a, v, &o->thinking);
        else if (!strcmp(a, "--chat-template"))
            o->chat_template = v, rc = v ? 0 : bad(a, "a file", v);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads"))
            rc = p_int(a, v, 1, 1024, "an integer in [1, 1024]", &o->threads);
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx"))
            rc = p_int(a, v, 16, 1 << 24, "an integer in [16, 16777216]", &o->ctx);
        else if (!strcmp(a, "--batch") || !strcmp(a, "--decode-concurrency"))
            rc = p_int(a, v, 1, 256, "an integer >= 1 (at most 256)", &o->batch);
        else if (!strcmp(a, "--max-batch-tokens"))
            rc = p_int(a, v, 16, 1 << 20, "an integer in [16, 1048576]", &o->max_batch_tokens);
        else if (!strcmp(a, "--max-queue"))
            rc = p_int(a, v, 1, 1 << 20, "an integer in [1, 1048576]", &o->max_queue);
        else if (!strcmp(a, "--max-conns"))
            rc = p_int(a, v, 1, 1 << 20, "an integer in [1, 1048576]", &o->max_conns);
        else if (!strcmp(a, "--max-body")) {
            rc = p_int(a, v, 1024, INT_MAX, "an integer in [1024, 2147483647]", &mb);
            o->max_body = mb;
        } else if (!strcmp(a, "--backend")) {
            o->backend = v;
            rc = cli_backend_ok(v) ? 0 : bad(a, "auto|cpu|cuda", v);
        } else if (!strcmp(a, "--device"))
            rc = p_int(a, v, 0, 1023, "an integer in [0, 1023]", &o->device);
        else if (!strcmp(a, "--compiled-decode")) {
            int on = 0;
            rc = p_bool(a, v, &on);
            o->graphs = on ? 1 : -1;
        } else if (!strcmp(a, "--memory-budget"))
            rc = p_gb(a, v, 0.001, &o->memory_budget_gb);
        else if (!strcmp(a, "--kv-budget"))
            rc = p_gb(a, v, 0.000001, &o->kv_budget_gb);
        else if (!strcmp(a, "--prompt-cache"))
            rc = p_gb(a, v, 0, &o->prompt_cache_gib);
        else if (!strcmp(a, "--kv-block-size") || !strcmp(a, "--paged-kv-block-size"))
            rc = p_int(a, v, 1, 4096, "an integer in [1, 4096]", &o->kv_block_size);
        else if (!strcmp(a, "--served-model-name"))
            o->served_name = v, rc = v && *v ? 0 : bad(a, "a name", v);
        else if (!strcmp(a, "--drain-timeout")) {
            float d = 0;
            rc = p_float(a, v, 0, 86400, "a number of seconds in [0, 86400]", &d);
            o->drain_timeout_s = d;
        } else if (!strcmp(a, "--kv-events"))
            o->kv_events = v, rc = v && *v ? 0 : bad(a, "an endpoint like tcp://*:5557", v);
        else if (!strcmp(a, "--kv-events-replay"))
            o->kv_events_replay = v, rc = v && *v ? 0 : bad(a, "an endpoint like tcp://*:5558", v);
        else if (!strcmp(a, "--kv-events-layout")) {
            rc = v && (!strcmp(v, "array") || !strcmp(v, "map")) ? 0 : bad(a, "map|array", v);
            o->kv_events_array = v && !strcmp(v, "array");
        } else if (!strcmp(a, "--paged-kv"))
            used = 0; /* accepted: paging is always on */
        else if ((kv = cli_kv_flag("serve", a, v, &kvd)) != 0)
            rc = kv < 0 ? -1 : 0, used = kv - 1, o->kv_f32 = kvd == DT_F32;
        else if (!strcmp(a, "--no-open"))
            o->no_open = 1, used = 0;
        else if (!strcmp(a, "--tool-choice-none-keeps-tools"))
            o->keep_tools_none = 1, used = 0;
        else if ((rc = serve_ssd_flag(a, v, o, &used)) != 0)
            rc = rc < 0 ? -1 : 0;
        else if ((rc = serve_embed_flag(o, a, v)) != 0) /* --embeddings (serve_embed.c) */
            rc = rc < 0 ? -1 : 0;
        else if (!strcmp(a, "--isolate"))
            o->isolate = 1, used = 0;
        else if (!strcmp(a, "--model-pool"))
            rc = p_int(a, v, 1, 16, "an integer in [1, 16]", &o->model_pool);
        else if (!strcmp(a, "--idle-unload"))
            rc = p_int(a, v, 1, 1 << 30, "a number of seconds >= 1", &o->idle_unload);
        else if (!strcmp(a, "--models-dir"))
            o->models_dir = v, rc = v && *v ? 0 : bad(a, "a directory", v);
        else if ((rc = serve_spec_flag(o, a, v)) != 0) /* speculation (serve_spec.c) */
            rc = rc < 0 ? -1 : 0;
        else if ((rc = serve_lora_flag(o, a, v)) != 0) /* adapters (serve_lora.c) */
            rc = rc < 0 ? -1 : 0;
        else if ((rc = serve_kvq_flag(o, a, v, &used)) != 0) /* serve_kvq.c */
            rc = rc < 0 ? -1 : 0;
        else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "cinfer serve: unknown option '%s' (see cinfer serve --help)\n", a);
            return -1;
        } else if (o->n_models < 16)
            o->models[o->n_models++] = a, o->model = o->models[0], used = 0;
        else {
            fprintf(stderr, "cinfer serve: unexpected argument '%s'\n", a);
            return -1;
        }
        if (rc)
            return -1;
        if (o->argrole) { /* what the engine child of --isolate gets (src/server/isolate) */
            int sup = !strcmp(a, "--isolate") || !strcmp(a, "--model-pool") ||
                      !strcmp(a, "--models-dir") || !strcmp(a, "--idle-unload") ||
                      !strcmp(a, "--host") ||
                      !strcmp(a, "--port") || !strcmp(a, "--no-open") ||
                      !strcmp(a, "--api-key") || !strcmp(a, "--served-model-name");
            o->argrole[i] = sup ? 'x' : a[0] == '-' && a[1] ? '.' : 'm';
            if (used)
                o->argrole[i + 1] = sup ? 'x' : '.';
        }
        i += used;
    }
    if (o->n_models > 1 && !o->isolate) {
        fprintf(stderr, "cinfer serve: unexpected argument '%s' (several models need "
                        "--isolate)\n", o->models[1]);
        return -1;
    }
    if ((o->model_pool || o->models_dir || o->idle_unload) && !o->isolate) {
        fprintf(stderr, "cinfer serve: --model-pool, --models-dir and --idle-unload need "
                        "--isolate\n");
        return -1;
    }
    if (o->temp_set && !o->temperature_set)
        o->temperature = temp_alias, o->temperature_set = 1;
    return 0;
}

/* ---- model resolution and defaults ---------------------------------------------------- */

static int exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

/* MODEL as given: a path, else a name resolved against the model store (model_store.h). */
static const char *resolve_name(const char *given, char *buf, size_t cap)
{
    if (exists(given))
        return given;
    struct store_list l;
    struct cerr e = {0};
    if (store_scan(&l, &e)) {
        fprintf(stderr, "cinfer serve: %s\n", e.msg);
        return NULL;
    }
    int i = store_resolve(&l, given, &e);
    if (i >= 0)
        snprintf(buf, cap, "%s", l.v[i].path);
    else
        fprintf(stderr, "cinfer serve: '%s' is not a file or directory, and %s\n", given,
                e.msg);
    store_list_free(&l);
    return i >= 0 ? buf : NULL;
}

static const char *resolve_model(const char *given, char *buf, size_t cap)
{
    if (given)
        return resolve_name(given, buf, cap);
    const char *env = getenv("CINFER_MODEL");
    if (env && *env)
        return resolve_name(env, buf, cap);
    snprintf(buf, cap, "models/%s", DEFAULT_MODEL_FILE);
    if (exists(buf))
        return buf;
    const char *home = getenv("HOME");
    if (home) {
        snprintf(buf, cap, "%s/.cache/cinfer/models/%s", home, DEFAULT_MODEL_FILE);
        if (exists(buf))
            return buf;
    }
    /* no default model: the largest cached one that fits in 0.6x of the memory budget */
    struct store_list l;
    if (!store_scan(&l, NULL)) {
        int i = store_pick_largest(&l, models_fit_bytes());
        if (i >= 0) {
            char lab[800];
            store_label(&l.v[i], lab, sizeof lab);
            fprintf(stderr, "cinfer serve: no MODEL given: serving %s, the largest cached "
                            "model that fits here\n",
                    lab);
            snprintf(buf, cap, "%s", l.v[i].path);
        }
        store_list_free(&l);
        if (i >= 0)
            return buf;
    }
    fprintf(stderr,
            "cinfer serve: no MODEL given and the default model (%s) is not in ./models or\n"
            "~/.cache/cinfer/models, nor is any model cached (`cinfer ls`). Fetch one with\n"
            "`cinfer pull ORG/REPO[:QUANT]` or `scripts/fetch_models.sh qwen2.5-coder-0.5b`,\n"
            "or pass a .gguf file / Hugging Face directory: cinfer serve MODEL\n",
            DEFAULT_MODEL_FILE);
    return NULL;
}

static void model_id_from_path(const char *path, char *out, size_t cap)
{
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s", path);
    size_t n = strlen(tmp);
    while (n > 1 && tmp[n - 1] == '/')
        tmp[--n] = 0;
    const char *b = strrchr(tmp, '/');
    b = b ? b + 1 : tmp;
    /* a Hugging Face cache snapshot directory (models--ORG--NAME/snapshots/COMMIT): NAME */
    const char *snap = strstr(tmp, "/snapshots/"), *repo = strstr(tmp, "models--");
    if (snap && repo && repo < snap && !strchr(snap + 11, '/')) {
        const char *name = repo + 8, *dd;
        while ((dd = strstr(name, "--")) && dd < snap)
            name = dd + 2;
        snprintf(out, cap, "%.*s", (int)(snap - name), name);
        return;
    }
    snprintf(out, cap, "%s", b);
    n = strlen(out);
    if (n > 5 && !strcmp(out + n - 5, ".gguf"))
        out[n - 5] = 0;
}

/* generation_config.json of a HF directory: sampling defaults and extra EOS ids. */
static void read_generation_config(struct serve *sv, struct engine_config *ec)
{
    struct cli_gen_config gc;
    if (!cli_gen_config_read(sv->o.model, &gc))
        return;
    sv->gen_cfg = 1;
    sv->gc_temperature = gc.temperature, sv->gc_has[0] = gc.has_temperature;
    sv->gc_top_p = gc.top_p, sv->gc_has[1] = gc.has_top_p;
    sv->gc_top_k = gc.top_k, sv->gc_has[2] = gc.has_top_k;
    if (gc.has_repetition_penalty)
        sv->defaults.repetition_penalty = gc.repetition_penalty;
    for (int i = 0; i < gc.n_eos && ec->n_extra_eos < 8; i++)
        ec->extra_eos[ec->n_extra_eos++] = gc.eos[i];
}

static void resolve_defaults(struct serve *sv)
{
    struct sampler_params *p = &sv->defaults;
    const struct serve_opts *o = &sv->o;
    sv->defaults_src[0] = sv->defaults_src[1] = sv->defaults_src[2] = "built-in";
    if (o->temperature_set)
        p->temperature = o->temperature, sv->defaults_src[0] = "--temperature";
    else if (sv->gc_has[0])
        p->temperature = sv->gc_temperature, sv->defaults_src[0] = "generation_config";
    if (o->top_p_set)
        p->top_p = o->top_p, sv->defaults_src[1] = "--top-p";
    else if (sv->gc_has[1])
        p->top_p = sv->gc_top_p, sv->defaults_src[1] = "generation_config";
    if (o->top_k_set)
        p->top_k = o->top_k, sv->defaults_src[2] = "--top-k";
    else if (sv->gc_has[2])
        p->top_k = sv->gc_top_k, sv->defaults_src[2] = "generation_config";
}

/* ---- signals ----------------------------------------------------------------------------- */

static sigset_t g_sigs;

/* The first SIGINT/SIGTERM cancels in-flight requests and stops (a SIGTERM with
 * --drain-timeout first drains: running requests finish, for up to that long); the next one
 * forces the loop to stop. cmd_serve wakes this thread with a signal once the loop is done
 * (loop_done), and it exits without touching the server. */
static void *signal_thread(void *arg)
{
    struct serve *sv = arg;
    int sig, stage = 0;
    while (sigwait(&g_sigs, &sig) == 0) {
        pthread_mutex_lock(&sv->ready_mu);
        int done = sv->loop_done;
        pthread_mutex_unlock(&sv->ready_mu);
        if (done)
            break;
        if (stage == 0 && sig == SIGTERM && sv->o.drain_timeout_s > 0) {
            stage = 1;
            double d = sv->o.drain_timeout_s;
            fprintf(stderr, "\ncinfer serve: SIGTERM received, draining for up to %g s (again to "
                            "stop now)\n", d);
            if (http_post(sv->http, serve_drain, sv)) {
                http_server_stop(sv->http);
                break;
            }
            struct timespec ts = {.tv_sec = (time_t)d,
                                  .tv_nsec = (long)((d - (double)(time_t)d) * 1e9)};
            int r = sigtimedwait(&g_sigs, NULL, &ts);
            pthread_mutex_lock(&sv->ready_mu);
            done = sv->loop_done;
            pthread_mutex_unlock(&sv->ready_mu);
            if (done)
                break;
            if (r < 0)
                fprintf(stderr, "cinfer serve: drain timeout: cancelling what is left\n");
        }
        if (stage <= 1) {
            if (stage == 0)
                fprintf(stderr, "\ncinfer serve: %s received, stopping (again to force)\n",
                        sig == SIGINT ? "SIGINT" : "SIGTERM");
            stage = 2;
            if (http_post(sv->http, serve_shutdown, sv))
                http_server_stop(sv->http);
            continue;
        }
        http_server_stop(sv->http);
        break;
    }
    return NULL;
}

/* The HTTP loop: bound before the model loads, so that routers see 503, never a refusal. */
static void *loop_thread(void *arg)
{
    struct serve *sv = arg;
    int rc = http_server_run(sv->http);
    pthread_mutex_lock(&sv->ready_mu);
    sv->loop_done = rc ? -1 : 1;
    pthread_cond_broadcast(&sv->ready_cv);
    pthread_mutex_unlock(&sv->ready_mu);
    return NULL;
}

/* ---- the ready card ---------------------------------------------------------------------- */

static void ready_card(struct serve *sv, double t_ready)
{
    const struct serve_opts *o = &sv->o;
    const struct engine_config *c = engine_config_of(sv->eng);
    const char *shown = !strcmp(o->host, "0.0.0.0") || !strcmp(o->host, "::") ? "localhost"
                                                                               : o->host;
    int port = http_server_port(sv->http);
    char topp[32], topk[32];
    if (sv->defaults.top_p > 0 && sv->defaults.top_p < 1)
        snprintf(topp, sizeof topp, "%g (%s)", (double)sv->defaults.top_p, sv->defaults_src[1]);
    else
        snprintf(topp, sizeof topp, "off");
    if (sv->defaults.top_k > 0)
        snprintf(topk, sizeof topk, "%d (%s)", sv->defaults.top_k, sv->defaults_src[2]);
    else
        snprintf(topk, sizeof topk, "off");
    printf("\ncinfer %s · serving %s\n", CINFER_VERSION, sv->model_id);
    printf("  API       http://%s:%d/v1\n", shown, port);
    char url[320];
    web_chat_url(url, sizeof url, o->host, port);
    printf("  Chat      %s   (status: /#/status)\n", url);
    printf("  Model     %s · %.2f GB of weights · context %d · chat template: %s · think tags: "
           "%s\n",
           sv->m->arch_name, (double)model_weight_bytes(sv->m) / 1e9, c->n_ctx,
           sv->tmpl ? "yes" : "no (use /v1/completions or --chat-template)",
           sv->am.think_open ? "yes" : "no");
    if (!strcmp(sv->m->be->ops->name, "cpu")) {
        size_t rp_src = 0, rp = be_cpu_repacked_bytes(sv->m->be, &rp_src);
        printf("  CPU       %d threads (%s)", be_cpu_threads(sv->m->be), be_cpu_isa(sv->m->be));
        if (rp) /* the copy replaces the file's pages in memory (docs/backend-cpu.md) */
            printf(" · repacked weights %.2f GB in RAM (file layout %.2f GB)", rp / 1e9, rp_src / 1e9);
        printf("\n");
    }
    else
        printf("  Backend   %s, device %d\n", sv->m->be->ops->name, o->device);
    const struct mem_plan *pl = &sv->plan;
    char kvl[96];
    printf("  Perf      batch %d · %d tokens/step · KV %s, %d blocks of %d · queue %d\n",
           c->max_seqs, c->max_step_tokens,
           serve_kvq_pool_label(sv, c->kv_dtype == DT_F16 ? "f16" : "f32", kvl, sizeof kvl),
           c->n_blocks, c->block_size, c->max_queue);
    printf("  Memory    budget %.1f GB%s = weights %.2f GB + transient %.2f GB + KV (%.1f KB/token)"
           " · max safe context %d%s · prompt cache %s\n",
           pl->budget_bytes / 1e9,
           pl->budget_given ? "" : pl->on_device ? " (75% of device memory)" : " (75% of RAM)",
           pl->weights_bytes / 1e9, pl->transient_bytes / 1e9, pl->kv_per_token / 1024.0,
           c->n_ctx, sv->ctx_memory_bound ? " (memory-bound)" : "",
           pl->cache_blocks < 0 ? "off" : "on");
    if (c->kv_budget_bytes)
        printf("  KV budget %.2f GB for running requests\n", c->kv_budget_bytes / 1e9);
    serve_ssd_card(sv);
    printf("  Sampling  temperature %g (%s) · top_p %s · top_k %s · thinking %s · max_tokens "
           "%d chat / %d raw\n",
           (double)sv->defaults.temperature, sv->defaults_src[0], topp, topk,
           o->thinking < 0 ? "model default" : o->thinking ? "on" : "off", sv->max_tokens_chat,
           sv->max_tokens_raw);
    serve_spec_card(sv);
    serve_lora_card(sv);
    serve_kvq_card(sv);
    printf("  Auth      %s\n", o->api_key ? "API key required" : "none (loopback bind is the "
                                                                   "protection)");
    printf("ready in %.2f s — Ctrl-C to stop\n\n", t_ready);
    fflush(stdout);
}

/* ---- main ----------------------------------------------------------------------------- */

static int load_template(struct serve *sv)
{
    struct cerr e = {0};
    const char *src_path = sv->o.chat_template ? sv->o.chat_template : sv->o.model;
    if (tmpl_source_load(src_path, NULL, &sv->tmpl_src, &e)) {
        if (sv->o.chat_template) {
            fprintf(stderr, "cinfer serve: --chat-template: %s\n", e.msg);
            return -1;
        }
        log_warn("no chat template in %s: /v1/chat/completions is unavailable (give one with "
                 "--chat-template FILE)",
                 sv->o.model);
        return 0;
    }
    if (tmpl_parse(&sv->tmpl, sv->tmpl_src, strlen(sv->tmpl_src), &e)) {
        fprintf(stderr, "cinfer serve: the chat template does not parse: %s\n", e.msg);
        return -1;
    }
    tmpl_special_tokens(sv->o.model, &sv->bos, &sv->eos, NULL);
    return 0;
}

int cmd_serve(int argc, char **argv)
{
    struct serve *sv = calloc(1, sizeof *sv);
    char *role = calloc((size_t)argc + 1, 1);
    if (sv && role)
        memset(role, '.', (size_t)argc), sv->o.argrole = role;
    if (!sv || !role || parse_args(argc, argv, &sv->o)) {
        free(sv);
        free(role);
        return 1;
    }
    if (sv->o.isolate) { /* the supervisor: never loads weights (src/server/isolate) */
        int rc = isolate_main(&sv->o, argc, argv);
        free(role);
        free(sv);
        return rc;
    }
    free(role);
    sv->o.argrole = NULL;
    char mbuf[2048];
    if (!(sv->o.model = resolve_model(sv->o.model, mbuf, sizeof mbuf))) {
        free(sv);
        return 1;
    }
    char what[512];
    if (serve_probe(sv->o.host, sv->o.port, what, sizeof what)) {
        fprintf(stderr,
                "cinfer serve: port %d already serves an OpenAI-compatible API (models: %s).\n"
                "Use that server, stop it, or pick another port with --port N. (A second server\n"
                "would load a second copy of a model into memory.)\n",
                sv->o.port, what[0] ? what : "none listed");
        free(sv);
        return 1;
    }
    /* signals go to the signal thread only: block them before any thread starts */
    sigemptyset(&g_sigs);
    sigaddset(&g_sigs, SIGINT);
    sigaddset(&g_sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &g_sigs, NULL);

    int status = 1, loop_started = 0, sig_started = 0;
    pthread_t loop_th, sig_th;
    struct cerr e = {0};
    struct be *be = NULL;
    double t0 = clock_now_s();
    sv->started_s = t0;
    sv->started_unix = (long)time(NULL);
    metrics_init(&sv->met);
    sampler_params_default(&sv->defaults);
    struct be_config bc = {.n_threads = sv->o.threads, .device = sv->o.device,
                           .graphs = sv->o.graphs};
    model_id_from_path(sv->o.model, sv->model_id, sizeof sv->model_id);
    if (sv->o.served_name)
        snprintf(sv->model_id, sizeof sv->model_id, "%s", sv->o.served_name);
    pthread_mutex_init(&sv->ready_mu, NULL);
    pthread_cond_init(&sv->ready_cv, NULL);
    /* bind first: while the model loads, /health answers 503 (serve_ready.c) */
    struct http_config hc = {.host = sv->o.host, .port = sv->o.port,
                             .max_body = (size_t)sv->o.max_body, .max_conns = sv->o.max_conns,
                             .header_timeout_s = 30, .api_key = sv->o.api_key};
    if (http_server_new(&sv->http, &hc, &e)) {
        fprintf(stderr, "cinfer serve: %s (is another program using the port? pick one with "
                        "--port N)\n",
                e.msg);
        goto done;
    }
    http_set_gate(sv->http, serve_gate, sv);
    if (pthread_create(&loop_th, NULL, loop_thread, sv)) {
        fprintf(stderr, "cinfer serve: cannot start the HTTP loop thread\n");
        goto done;
    }
    loop_started = 1;
    if (pthread_create(&sig_th, NULL, signal_thread, sv)) {
        fprintf(stderr, "cinfer serve: cannot start the signal thread\n");
        goto done;
    }
    sig_started = 1;
    fprintf(stderr, "cinfer serve: loading %s ...\n", sv->o.model);
    const char *delay = getenv("CINFER_LOAD_DELAY_MS"); /* tests: a slow load, seen as 503 */
    if (delay && atoi(delay) > 0)
        nanosleep(&(struct timespec){.tv_sec = atoi(delay) / 1000,
                                     .tv_nsec = (long)(atoi(delay) % 1000) * 1000000L},
                  NULL);
    const char *bname = sv->o.backend ? sv->o.backend : CLI_BACKEND_DEFAULT;
    be = be_new(bname, &bc, &e);
    if (be && serve_embed_wanted(sv->o.model)) {
        if (serve_embed_load(sv, be)) /* an encoder: embeddings only (serve_embed.c) */
            goto done;
        serve_embed_card(sv, clock_now_s() - t0);
        fflush(stdout);
        goto ready;
    }
    if (!be || model_load(&sv->m, sv->o.model, be, &e)) {
        fprintf(stderr, "cinfer serve: %s\n", e.msg);
        goto done;
    }
    if (tok_load(&sv->tk, sv->o.model, &e)) {
        fprintf(stderr, "cinfer serve: cannot load the tokenizer of %s: %s\n", sv->o.model, e.msg);
        goto done;
    }
    if (load_template(sv))
        goto done;
    struct engine_config ec;
    engine_config_default(&ec, sv->m);
    int want = sv->o.ctx ? sv->o.ctx : (sv->m->hp.n_ctx_train > 0 ? sv->m->hp.n_ctx_train : 4096);
    ec.n_ctx = want;
    ec.max_seqs = sv->o.batch;
    ec.max_step_tokens = sv->o.max_batch_tokens;
    ec.block_size = sv->o.kv_block_size;
    ec.kv_dtype = sv->o.kv_f32 ? DT_F32 : DT_F16;
    ec.max_queue = sv->o.max_queue;
    if (serve_kvq_setup(sv, &ec)) /* --kv-quant and the levers (serve_kvq.c) */
        goto done;
    const char *ck = getenv("CINFER_CHECK_KV");
    ec.check_invariants = ck && *ck == '1';
    double cache_gib = sv->o.prompt_cache_gib >= 0 ? sv->o.prompt_cache_gib : 8;
    size_t budget = sv->o.memory_budget_gb > 0 ? (size_t)(sv->o.memory_budget_gb * 1e9) : 0;
    if (mem_plan_make(&sv->plan, sv->m, &ec, budget, (size_t)(cache_gib * 1073741824.0), &e)) {
        fprintf(stderr, "cinfer serve: %s\n", e.msg);
        goto done;
    }
    sv->ctx_memory_bound = ec.n_ctx < want / ec.block_size * ec.block_size;
    if (sv->o.kv_budget_gb > 0)
        ec.kv_budget_bytes = (size_t)(sv->o.kv_budget_gb * 1e9);
    if (serve_ssd_config(&sv->o, &ec))
        goto done;
    read_generation_config(sv, &ec);
    if (serve_spec_setup(sv, be, &ec))
        goto done;
    if (serve_lora_setup(sv, &ec))
        goto done;
    resolve_defaults(sv);
    sv->max_tokens_chat = sv->o.max_tokens ? sv->o.max_tokens : 65536;
    sv->max_tokens_raw = sv->o.max_tokens ? sv->o.max_tokens : 512;
    int has_think = tok_find(sv->tk, "<think>") >= 0 && tok_find(sv->tk, "</think>") >= 0;
    if (!has_think && sv->tmpl_src && strstr(sv->tmpl_src, "<think>") &&
        strstr(sv->tmpl_src, "</think>"))
        has_think = 1;
    sv->am = (struct api_model){.id = sv->model_id, .tk = sv->tk, .tmpl = sv->tmpl,
                                .bos_token = sv->bos, .eos_token = sv->eos,
                                .think_open = has_think ? "<think>" : NULL,
                                .think_close = has_think ? "</think>" : NULL,
                                .default_thinking = sv->o.thinking, .n_ctx = ec.n_ctx};
    if (sv->o.kv_events) { /* KV-cache events for routers (kv_events.h) */
        struct kv_events_config kc = {.endpoint = sv->o.kv_events,
                                      .replay_endpoint = sv->o.kv_events_replay,
                                      .block_size = ec.block_size,
                                      .map_layout = !sv->o.kv_events_array,
                                      .sliding_window = sv->m->hp.sliding_window,
                                      .disk_tier = sv->o.ssd_dir != NULL};
        if (kv_events_new(&sv->kvev, &kc, &e)) {
            fprintf(stderr, "cinfer serve: --kv-events: %s\n", e.msg);
            goto done;
        }
        ec.kv_listener = kv_events_listener(sv->kvev);
    }
    if (engine_new(&sv->eng, sv->m, sv->tk, &ec, &e)) {
        fprintf(stderr, "cinfer serve: %s\n", e.msg);
        goto done;
    }
    if (serve_embed_decoder(sv)) /* --embeddings */
        goto done;
    /* the card first, then the routes open: a client that saw /health 200 finds the card in
     * the log (and nothing the card reads is touched concurrently) */
    ready_card(sv, clock_now_s() - t0);
    fflush(stdout);
ready:
    if (serve_ready_wait(sv)) {
        fprintf(stderr, "cinfer serve: stopped before the server was ready\n");
        goto done;
    }
    if (!sv->o.no_open && isatty(STDOUT_FILENO)) { /* the chat page, fire-and-forget */
        char url[320];
        web_chat_url(url, sizeof url, sv->o.host, http_server_port(sv->http));
        web_open_browser(url);
    }
    pthread_join(loop_th, NULL);
    loop_started = 0;
    if (sv->loop_done < 0) {
        fprintf(stderr, "cinfer serve: the event loop failed\n");
        goto done;
    }
    serve_ssd_exit(sv);
    fprintf(stderr, "cinfer serve: stopped\n");
    status = 0;
done:
    if (loop_started) { /* a failed load: stop the loop that answered 503 meanwhile */
        http_server_stop(sv->http);
        pthread_join(loop_th, NULL);
    }
    if (sig_started) { /* wake the signal thread: it sees loop_done and exits */
        pthread_mutex_lock(&sv->ready_mu);
        if (!sv->loop_done)
            sv->loop_done = 1;
        pthread_mutex_unlock(&sv->ready_mu);
        pthread_kill(sig_th, SIGINT);
        pthread_join(sig_th, NULL);
    }
    /* the engine first: it may still post to the loop; posts after stop are dropped */
    engine_free(sv->eng);
    sv->eng = NULL;      /* adapters freed from here on free at once (serve_lora.c) */
    serve_lora_free(sv); /* after the engine: its requests held adapter references */
    kv_events_free(sv->kvev); /* after the engine: it publishes the last evictions */
    serve_embed_free(sv);     /* before the HTTP server: its worker may still post */
    http_server_free(sv->http);
    web_free(sv->web);
    tmpl_free(sv->tmpl);
    free(sv->tmpl_src);
    free(sv->bos);
    free(sv->eos);
    tok_free(sv->tk);
    serve_spec_free(sv);
    serve_kvq_free(sv);
    model_free(sv->m);
    be_free(be);
    pthread_mutex_destroy(&sv->ready_mu);
    pthread_cond_destroy(&sv->ready_cv);
    free(sv);
    return status;
}
