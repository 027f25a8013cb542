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
#include "server/commands.h"
#include "server/serve.h"
#include "template/tmpl.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/version.h"

#define DEFAULT_MODEL_FILE "qwen2.5-coder-0.5b-instruct-Q4_K_M.gguf"

static void serve_usage(FILE *f)
{
    fprintf(f,
            "usage: cinfer serve [MODEL] [options]\n"
            "       cinfer [options]            (the same, on the default model)\n\n"
            "Serves MODEL over the OpenAI API (/v1/chat/completions, /v1/completions,\n"
            "/v1/models) plus /health, /stats and /metrics. MODEL is a .gguf file or a\n"
            "Hugging Face model directory; without it the default model\n"
            "(" DEFAULT_MODEL_FILE ") is looked up in $CINFER_MODEL, ./models\n"
            "and ~/.cache/cinfer/models (fetch it with scripts/fetch_models.sh).\n\n"
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
            "  --kv-block-size N      KV positions per block (default 16; alias\n"
            "                         --paged-kv-block-size; --paged-kv is accepted: paging is\n"
            "                         always on)\n"
            "  --kv-f32               keep the KV cache in F32 (default F16)\n"
            "  --max-queue N          waiting requests before 429 (default 64)\n"
            "  --max-conns N          open connections before 429 (default 256)\n"
            "  --max-body BYTES       request body limit, 413 beyond (default 16777216)\n"
            "  --draft-kind KIND      speculative decoding: ngram (prompt lookup), suffix\n"
            "                         (request + recent outputs) or two-model (default when\n"
            "                         --draft-model is given); output is unchanged\n"
            "  --draft-model PATH     a smaller model with the same tokenizer drafts tokens\n"
            "  --num-draft-tokens N   most draft tokens per row and step (default 10 for\n"
            "                         ngram/suffix, 3 for two-model; sized down adaptively)\n"
            "  --ngram-max N          longest trailing n-gram ngram looks up (default 3)\n"
            "  --ngram-min N          shortest (default 1)\n"
            "  --no-open              do not open the browser chat page\n"
            "  -h, --help             this help\n");
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
    memset(o, 0, sizeof *o);
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
    float temp_alias = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int rc = 0, used = 1, mb = 0;
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
            rc = v && (!strcmp(v, "cpu") || !strcmp(v, "cuda")) ? 0 : bad(a, "cpu|cuda", v);
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
        else if (!strcmp(a, "--paged-kv"))
            used = 0; /* accepted: paging is always on */
        else if (!strcmp(a, "--kv-f32"))
            o->kv_f32 = 1, used = 0;
        else if (!strcmp(a, "--no-open"))
            o->no_open = 1, used = 0;
        else if ((rc = serve_spec_flag(o, a, v)) != 0) /* speculation (serve_spec.c) */
            rc = rc < 0 ? -1 : 0;
        else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "cinfer serve: unknown option '%s' (see cinfer serve --help)\n", a);
            return -1;
        } else if (!o->model)
            o->model = a, used = 0;
        else {
            fprintf(stderr, "cinfer serve: unexpected argument '%s'\n", a);
            return -1;
        }
        if (rc)
            return -1;
        i += used;
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

static const char *resolve_model(const char *given, char *buf, size_t cap)
{
    if (given)
        return given;
    const char *env = getenv("CINFER_MODEL");
    if (env && *env)
        return env;
    snprintf(buf, cap, "models/%s", DEFAULT_MODEL_FILE);
    if (exists(buf))
        return buf;
    const char *home = getenv("HOME");
    if (home) {
        snprintf(buf, cap, "%s/.cache/cinfer/models/%s", home, DEFAULT_MODEL_FILE);
        if (exists(buf))
            return buf;
    }
    fprintf(stderr,
            "cinfer serve: no MODEL given and the default model (%s) is not in ./models or\n"
            "~/.cache/cinfer/models. Fetch it with `scripts/fetch_models.sh qwen2.5-coder-0.5b`,\n"
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
    snprintf(out, cap, "%s", b);
    n = strlen(out);
    if (n > 5 && !strcmp(out + n - 5, ".gguf"))
        out[n - 5] = 0;
}

/* generation_config.json of a HF directory: sampling defaults and extra EOS ids. */
static void read_generation_config(struct serve *sv, struct engine_config *ec)
{
    struct stat st;
    if (stat(sv->o.model, &st) || !S_ISDIR(st.st_mode))
        return;
    char p[1200];
    snprintf(p, sizeof p, "%s/generation_config.json", sv->o.model);
    struct hfcfg *c = NULL;
    if (!exists(p) || hfcfg_load(&c, p, NULL))
        return;
    sv->gen_cfg = 1;
    double d;
    int64_t k;
    if (!hfcfg_float(c, "temperature", &d, NULL))
        sv->gc_temperature = (float)d, sv->gc_has[0] = 1;
    if (!hfcfg_float(c, "top_p", &d, NULL))
        sv->gc_top_p = (float)d, sv->gc_has[1] = 1;
    if (!hfcfg_int(c, "top_k", &k, NULL))
        sv->gc_top_k = (int)k, sv->gc_has[2] = 1;
    if (!hfcfg_float(c, "repetition_penalty", &d, NULL))
        sv->defaults.repetition_penalty = (float)d;
    int64_t ids[8];
    int n = 0;
    if (hfcfg_int_list(c, "eos_token_id", ids, 8, &n, NULL) && !hfcfg_int(c, "eos_token_id", ids, NULL))
        n = 1;
    for (int i = 0; i < n && ec->n_extra_eos < 8; i++)
        ec->extra_eos[ec->n_extra_eos++] = (int32_t)ids[i];
    hfcfg_free(c);
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

static void *signal_thread(void *arg)
{
    struct serve *sv = arg;
    int sig, n = 0;
    while (sigwait(&g_sigs, &sig) == 0) {
        if (++n == 1) {
            fprintf(stderr, "\ncinfer serve: %s received, stopping (again to force)\n",
                    sig == SIGINT ? "SIGINT" : "SIGTERM");
            if (http_post(sv->http, serve_shutdown, sv))
                http_server_stop(sv->http);
        } else {
            http_server_stop(sv->http);
            break;
        }
    }
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
    printf("  Chat      http://%s:%d/#/chat   (browser chat page: coming with the web UI)\n",
           shown, port);
    printf("  Model     %s · %.2f GB of weights · context %d · chat template: %s · think tags: "
           "%s\n",
           sv->m->arch_name, (double)model_weight_bytes(sv->m) / 1e9, c->n_ctx,
           sv->tmpl ? "yes" : "no (use /v1/completions or --chat-template)",
           sv->am.think_open ? "yes" : "no");
    if (!strcmp(sv->m->be->ops->name, "cpu"))
        printf("  CPU       %d threads (%s)\n", be_cpu_threads(sv->m->be), be_cpu_isa(sv->m->be));
    else
        printf("  Backend   %s, device %d\n", sv->m->be->ops->name, o->device);
    const struct mem_plan *pl = &sv->plan;
    printf("  Perf      batch %d · %d tokens/step · KV %s, %d blocks of %d · queue %d\n",
           c->max_seqs, c->max_step_tokens, c->kv_dtype == DT_F16 ? "f16" : "f32", c->n_blocks,
           c->block_size, c->max_queue);
    printf("  Memory    budget %.1f GB%s = weights %.2f GB + transient %.2f GB + KV (%.1f KB/token)"
           " · max safe context %d%s · prompt cache %s\n",
           pl->budget_bytes / 1e9,
           pl->budget_given ? "" : pl->on_device ? " (75% of device memory)" : " (75% of RAM)",
           pl->weights_bytes / 1e9, pl->transient_bytes / 1e9, pl->kv_per_token / 1024.0,
           c->n_ctx, sv->ctx_memory_bound ? " (memory-bound)" : "",
           pl->cache_blocks < 0 ? "off" : "on");
    if (c->kv_budget_bytes)
        printf("  KV budget %.2f GB for running requests\n", c->kv_budget_bytes / 1e9);
    printf("  Sampling  temperature %g (%s) · top_p %s · top_k %s · thinking %s · max_tokens "
           "%d chat / %d raw\n",
           (double)sv->defaults.temperature, sv->defaults_src[0], topp, topk,
           o->thinking < 0 ? "model default" : o->thinking ? "on" : "off", sv->max_tokens_chat,
           sv->max_tokens_raw);
    serve_spec_card(sv);
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
    if (!sv || parse_args(argc, argv, &sv->o)) {
        free(sv);
        return 1;
    }
    char mbuf[1024];
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

    int status = 1;
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
    fprintf(stderr, "cinfer serve: loading %s ...\n", sv->o.model);
    const char *bname = sv->o.backend ? sv->o.backend : "auto";
    if (!(be = be_new(bname, &bc, &e)) || model_load(&sv->m, sv->o.model, be, &e)) {
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
    read_generation_config(sv, &ec);
    if (serve_spec_setup(sv, be, &ec))
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
    if (engine_new(&sv->eng, sv->m, sv->tk, &ec, &e)) {
        fprintf(stderr, "cinfer serve: %s\n", e.msg);
        goto done;
    }
    struct http_config hc = {.host = sv->o.host, .port = sv->o.port,
                             .max_body = (size_t)sv->o.max_body, .max_conns = sv->o.max_conns,
                             .header_timeout_s = 30, .api_key = sv->o.api_key};
    if (http_server_new(&sv->http, &hc, &e)) {
        fprintf(stderr, "cinfer serve: %s (is another program using the port? pick one with "
                        "--port N)\n",
                e.msg);
        goto done;
    }
    if (serve_routes_install(sv)) {
        fprintf(stderr, "cinfer serve: out of memory\n");
        goto done;
    }
    pthread_t sig_th;
    if (pthread_create(&sig_th, NULL, signal_thread, sv)) {
        fprintf(stderr, "cinfer serve: cannot start the signal thread\n");
        goto done;
    }
    pthread_detach(sig_th);
    ready_card(sv, clock_now_s() - t0);
    if (http_server_run(sv->http)) {
        fprintf(stderr, "cinfer serve: the event loop failed\n");
        goto done;
    }
    fprintf(stderr, "cinfer serve: stopped\n");
    status = 0;
done:
    /* the engine first: it may still post to the loop; posts after stop are dropped */
    engine_free(sv->eng);
    http_server_free(sv->http);
    tmpl_free(sv->tmpl);
    free(sv->tmpl_src);
    free(sv->bos);
    free(sv->eos);
    tok_free(sv->tk);
    serve_spec_free(sv);
    model_free(sv->m);
    be_free(be);
    free(sv);
    return status;
}
