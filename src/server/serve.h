/* serve.h — internals of `cinfer serve` shared by its files (not a public interface).
 *
 * cmd_serve.c parses flags, loads the model, prints the ready card and runs the loop;
 * serve_routes.c answers the HTTP routes and glues HTTP ↔ api ↔ engine (jobs);
 * serve_metrics.c keeps the counters and histograms behind /stats and /metrics;
 * serve_probe.c checks the port before anything loads. All state is touched on the HTTP
 * loop thread unless a comment says otherwise.
 */
#ifndef CINFER_SERVER_SERVE_H
#define CINFER_SERVER_SERVE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "api/prompt.h"
#include "engine/engine.h"
#include "engine/plan.h"
#include "http/http.h"
#include "util/sbuf.h"

struct serve_opts {
    const char *model, *host, *chat_template, *api_key;
    int port, threads, no_open;
    int keep_tools_none;     /* --tool-choice-none-keeps-tools (prompt.h) */
    int max_tokens;          /* 0 = per-route default */
    float temperature, top_p;
    int top_k;
    int temp_set, temperature_set, top_p_set, top_k_set;
    int thinking;            /* -1 = the model's default */
    int batch, max_batch_tokens, ctx, kv_f32, max_queue, max_conns;
    long max_body;
    int kv_block_size;
    const char *backend;     /* "cpu" (default) or "cuda" */
    int device, graphs;
    double memory_budget_gb, kv_budget_gb, prompt_cache_gib; /* < 0 = not given */
    double drain_timeout_s;  /* SIGTERM drains for up to this long; 0 = cancel at once */
    int embed_pool;          /* --embeddings: 0 off, 1 last, 2 mean (serve_embed.c) */
    const char *served_name; /* --served-model-name (the id /v1/models reports) */
    const char *kv_events, *kv_events_replay; /* --kv-events ENDPOINT, --kv-events-replay */
    int kv_events_array;     /* --kv-events-layout array (else map, vLLM's current form) */
    /* SSD cold tier (serve_ssd.c) */
    const char *ssd_dir;     /* NULL = off */
    double ssd_max_gib;      /* < 0 = default 32 */
    int ssd_verify;
    double ssd_demote_s;     /* < 0 = default 300 */
    int ssd_gen_ckpt;        /* --generation-checkpoint N (tokens), 0 = off */
    /* --isolate (src/server/isolate): the supervisor's own flags, the MODEL arguments, and
     * what each argv[i] is ('.' engine flag or value, 'm' a MODEL, 'x' supervisor-only) */
    int isolate, model_pool, idle_unload; /* idle_unload: seconds, 0 = off */
    const char *models_dir;
    const char *models[16];
    int n_models;
    char *argrole;
    /* speculative decoding (serve_spec.c); NULL / 0 = not given */
    const char *draft_kind, *draft_model;
    int num_draft, ngram_min, ngram_max;
    int draft_lookup; /* --draft-lookup: 0 unset, 1 on, 2 off */
    /* LoRA (serve_lora.c): --adapter DIR|FILE (repeatable: stacked), --adapters-dir */
    const char *adapters[4];
    int n_adapters;
    const char *adapters_dir;
    /* KV quantization and the tiers/levers (serve_kvq.c); NULL / -1 / 0 = not given */
    const char *kv_quant;
    int kv_rotate, fused_sdpa, compiled_act, tier, force_wire;
};

/* Histogram with fixed upper bounds (Prometheus "le" buckets). */
#define HIST_MAX 16
struct hist {
    int n;
    double le[HIST_MAX];
    long count[HIST_MAX + 1];
    double sum;
    long total;
};

enum { EP_CHAT = 0, EP_COMPLETIONS, EP_MESSAGES, EP_RESPONSES, EP_OTHER, EP_COUNT };

struct serve_metrics {
    long requests[EP_COUNT]; /* by endpoint */
    long status_4xx, status_5xx, rejected_429;
    long cancelled, disconnects;
    long prompt_tokens, gen_tokens, cached_tokens, cache_hits;
    long streams_open, active_jobs;
    struct hist ttft, tpot, e2e;
};

struct job;
struct kv_events;
struct lora_set;

/* Readiness as routers see it (serve_ready.c). */
enum { SERVE_LOADING = 0, SERVE_READY, SERVE_DRAINING };

struct serve {
    struct serve_opts o;
    struct model *m;
    struct tok *tk;
    struct tmpl *tmpl;
    struct engine *eng;
    struct http_server *http;
    struct api_model am;
    char model_id[256];
    char *bos, *eos, *tmpl_src;
    struct sampler_params defaults;
    const char *defaults_src[3]; /* where temperature/top_p/top_k came from */
    int gen_cfg;                 /* a generation_config.json was read */
    float gc_temperature, gc_top_p;
    int gc_top_k, gc_has[3];
    int max_tokens_chat, max_tokens_raw;
    long started_unix;
    double started_s;
    int shutting_down;           /* no new generations (shutdown or drain) */
    int cancelled_all;           /* serve_shutdown ran: in-flight requests were cancelled */
    int state;                   /* SERVE_LOADING / READY / DRAINING (loop thread) */
    pthread_mutex_t ready_mu;    /* ready_rc, loop_done: main thread <-> loop thread */
    pthread_cond_t ready_cv;
    int ready_rc;                /* 0 = routes not yet installed, 1 = installed, -1 = failed */
    int loop_done;               /* http_server_run returned */
    struct kv_events *kvev;      /* --kv-events publisher (NULL = off) */
    struct job *jobs;            /* active jobs (doubly linked) */
    struct serve_metrics met;
    struct mem_plan plan;
    int ctx_memory_bound;        /* the memory budget, not the model, caps the context */
    int tc_family;               /* enum tc_family of the tool-call parser (serve_routes_install) */
    struct serve_embed *emb;     /* embeddings (serve_embed.c), or NULL */
    int emb_only;                /* an encoder model: embeddings only, no engine */
    struct web *web;             /* the browser page's routes (src/web) */
    struct model *draft;         /* --draft-model (two-model speculation), or NULL */
    struct tok *draft_tk;
    struct lora_reg *lora;       /* mounted adapters (serve_lora.c) */
    char lora_default[300];      /* the set of requests that name none ("" = none) */
    struct lora_am *lora_ams;    /* serve_lora_am's copies of am, one an adapter id named */
    struct serve_kvq *kvq;       /* KV quantization and levers (serve_kvq.c) */
};

/* ---- generations (serve_jobs.c) ---------------------------------------------------------
 * A protocol (OpenAI, Anthropic, Responses) turns engine events into bytes through an
 * encoder; the job glue does the rest: submit, hand-off from the engine thread, SSE writes,
 * disconnect -> cancel, shutdown, metrics. All on the loop thread. */
struct api_error;
struct proto_ops {
    /* Streaming only: frames sent right after the SSE headers (may be NULL). */
    int (*begin)(void *enc, struct sbuf *out);
    /* One engine event -> bytes (SSE frames, or at DONE the whole non-streaming body). */
    int (*event)(void *enc, const struct engine_event *ev, struct sbuf *out);
    /* Several choices (serve_gen.n_q > 1): choice `choice`'s event; the encoder writes the
     * closing frames (or the whole body) with the last choice's terminal event. */
    int (*event_at)(void *enc, int choice, const struct engine_event *ev, struct sbuf *out);
    /* The error body of a non-streaming failure (malloc'd). */
    char *(*error_body)(const struct api_error *err);
    /* An SSE error frame (streaming failure or shutdown). */
    int (*error_frame)(struct sbuf *out, const char *message);
    void (*free)(void *enc);
};

struct serve_gen {
    int stream;
    const struct proto_ops *ops;
    void *enc;                 /* owned by the job from serve_generate on */
    struct engine_req q;       /* ids, sampling, max_tokens, stops; cb/ud are set by the job */
    void (*cleanup)(void *ctx); /* frees what q points into, when the job ends (may be NULL) */
    void *ctx;
    /* Several choices (OpenAI n > 1, a prompt array): qs[0 .. n_q) replace q (owned by ctx),
     * each choice's events go to ops->event_at. They come in groups of share_n consecutive
     * requests with one prompt: the first of a group is submitted at once, the others at
     * its first token, so that they take its prompt from the prefix cache. n_q <= 1: q. */
    struct engine_req *qs;
    int n_q, share_n;
    /* Optional: called on the loop thread when the job's one choice ended normally (an
     * end-of-generation id or max_tokens) and its reply went out, before ctx and enc are
     * freed; ls is the request's adapter set (the next turn's warm-up, serve_warm.h). */
    void (*after)(struct serve *sv, void *ctx, void *enc, const struct lora_set *ls);
};

struct oai_req;
struct api_structured;
/* The engine request of a parsed request: prompt ids from pr, sampling, stops from rq, the
 * grammar and its trigger from st, max_tokens as checked against the context. Points into
 * rq, pr and st (they must outlive it); cb/ud are left for the job. */
struct engine_req serve_engine_req(const struct oai_req *rq, const struct api_prompt *pr,
                                   const struct api_structured *st, int max_tokens);

/* The output constraints of a chat-like request: body_format reads r's raw body (an
 * api_structured_* reader: text.format, output_format), then forced / strict tool-call
 * grammars and a reasoning model's open think block. 0, or -1 with err filled. */
int serve_structured(const struct serve *sv, struct http_req *r,
                     int (*body_format)(const json_t *body, struct api_structured *out,
                                        struct api_error *err),
                     const struct oai_req *rq, const struct api_prompt *pr,
                     struct api_structured *st, struct api_error *err);

/* Submits g for HTTP request r and answers it (stream or body) as events arrive. Takes
 * ownership of g->enc and g->ctx in every case (on failure they are freed and r gets an
 * error reply: 429 when the queue is full, 503 when shutting down). endpoint indexes
 * met.requests. */
void serve_generate(struct serve *sv, struct http_req *r, struct serve_gen *g, int endpoint);
/* Replies with err (status, body from ops->error_body), counting it in the metrics. */
/* Replies with status and the compact JSON of j, taking j (NULL or unprintable: a 500 "out
 * of memory"). */
void serve_reply_json(struct http_req *r, int status, json_t *j);
/* Adds `Warning: 299 cinfer "<text>"` to r's response when text is not empty (a request
 * field or tool accepted and not honoured). */
void serve_warning(struct http_req *r, const char *text);
void serve_reply_error(struct serve *sv, struct http_req *r, const struct api_error *err,
                       char *(*error_body)(const struct api_error *err));

/* Checks a prompt of n_prompt tokens against the context and resolves max_tokens (requested,
 * 0 = not given -> dflt) into *max_tokens. On refusal fills err (400) and returns -1. */
int serve_check_context(struct serve *sv, int n_prompt, int requested, int dflt,
                        int *max_tokens, struct api_error *err);

/* serve_routes.c */
int serve_routes_install(struct serve *sv);
/* Begins a clean shutdown on the loop thread: every in-flight request gets an error
 * event / 503 and is cancelled; the loop stops once all jobs are gone. */
void serve_shutdown(void *sv);

/* serve_anthropic.c, serve_responses.c: the Anthropic Messages and OpenAI Responses routes.
 * Each registers its routes on sv->http; 0 or -1. */
int serve_anthropic_install(struct serve *sv);
int serve_responses_install(struct serve *sv);
/* The Anthropic error body {"type":"error","error":{type,message}} for HTTP-layer errors on
 * /v1/messages paths (malloc'd). */
char *serve_anthropic_error(int status, const char *message);

/* serve_store.c: the Responses store (per process; TTL 1 h or $CINFER_RESPONSE_TTL_MS; LRU
 * capped at 32 MiB of JSON). An entry is the conversation so far (chat-shaped messages
 * without the system message) and the instructions. Loop thread only. */
/* Saves (replaces) id -> {messages, instructions}; takes no ownership (copies). */
void store_put(const char *id, const json_t *messages, const char *instructions,
               const json_t *response);
/* Removes id's entry: 0, or -1 when there is none. */
int store_del(const char *id);
/* A new reference to the stored {messages, instructions} object (refreshing its LRU
 * position), or NULL when unknown or expired. */
json_t *store_get(const char *id);
/* {entries, bytes, max_bytes, ttl_ms} for /stats (new reference). */
json_t *store_stats_json(void);
/* Moves the store's clock s seconds ahead (s > 0; test control only, see serve_testctl.c). */
void store_advance_clock(double s);

/* serve_template.c: POST /apply-template (the prompt text of a chat body). 0 or -1. */
int serve_template_install(struct serve *sv);
/* serve_info.c: GET /server_info, /model_info (+ /get_ aliases: SGLang's probes; vLLM's
 * vllm_config keys in /server_info). 0 or -1. */
int serve_info_install(struct serve *sv);

/* serve_testctl.c: test-only routes, installed only when the environment has
 * CINFER_TEST_CONTROLS=1 (docs/testing.md): POST /debug/advance-clock {"seconds": S} moves
 * the Responses store's clock S seconds ahead. 0 or -1. */
int serve_testctl_install(struct serve *sv);

/* serve_ready.c: the gate in front of the routes (http_set_gate): 503 while loading, /health
 * 503 while draining. Loop thread. */
int serve_gate(struct http_req *r, void *ud);
/* Posted to the loop once the engine runs: installs the routes, opens the gate and wakes
 * serve_ready_wait. */
void serve_ready_install(void *ud);
/* Main thread: posts serve_ready_install and waits for it; 0, or -1 when the routes could
 * not be installed or the loop stopped first. */
int serve_ready_wait(struct serve *sv);
/* Begins a drain on the loop thread: /health 503, new generations 503, running ones finish;
 * the loop stops when none is left (serve_shutdown still cancels whatever remains). */
void serve_drain(void *sv);

/* serve_fit.c: GET /fit, the plan for the loaded model (JSON, malloc'd) and its route. */
char *serve_fit_json(struct serve *sv);
int serve_fit_install(struct serve *sv);

/* serve_metrics.c */
void metrics_init(struct serve_metrics *m);
void hist_add(struct hist *h, double v);
char *serve_stats_json(struct serve *sv);     /* malloc'd */
char *serve_metrics_text(struct serve *sv);   /* malloc'd Prometheus text */
/* serve_metrics_vllm.c: appends the router-facing series under vLLM's names (vllm:*). */
void serve_metrics_vllm(struct serve *sv, struct sbuf *b, const struct engine_stats *es);

/* serve_spec.c: speculative decoding's flags, start-up and reporting. */
/* Parses one of --draft-kind/--draft-model/--num-draft-tokens/--ngram-max/--ngram-min
 * (a = the flag, v = its value) into o. Returns 1 when a is one of them (0: not ours), -1
 * on a bad value (message printed). */
int serve_spec_flag(struct serve_opts *o, const char *a, const char *v);
/* Resolves the flags into ec->spec, loading the draft model onto be; refuses bad
 * combinations and a tokenizer mismatch. 0, or -1 with the message printed. */
int serve_spec_setup(struct serve *sv, struct be *be, struct engine_config *ec);
/* The ready-card line (nothing when speculation is off). */
void serve_spec_card(struct serve *sv);
/* /stats.speculation (new reference) and the /metrics counters. */
json_t *serve_spec_stats_json(const struct engine_stats *es);
void serve_spec_metrics(struct sbuf *b, const struct engine_stats *es);
/* Frees the draft model and its tokenizer. */
void serve_spec_free(struct serve *sv);

/* serve_kvq.c: --kv-quant, --kv-rotate, --l1/--l2/--l3, --fused-sdpa,
 * --compiled-activations, --force-wire (docs/kv-quant.md). serve_kvq_flag: 0 = not ours, 1 =
 * taken (*used = 1 when it took v too), -1 = bad value (message printed, naming the flag).
 * serve_kvq_setup: after the model loads, before the memory plan: the CINFER_* mirrors,
 * the per-layer KV dtypes into ec, the levers, --force-wire; 0 or -1 (message printed). */
int serve_kvq_flag(struct serve_opts *o, const char *a, const char *v, int *used);
int serve_kvq_setup(struct serve *sv, struct engine_config *ec);
void serve_kvq_card(struct serve *sv);
/* The KV pool's storage for the ready card: plain (the unquantized dtype's name) when no
 * layer is quantized, else the scheme's name (with the plain layers' count); may use buf. */
const char *serve_kvq_pool_label(struct serve *sv, const char *plain, char *buf, size_t n);
void serve_kvq_stats_json(struct serve *sv, struct json_t *j);
void serve_kvq_free(struct serve *sv);

/* serve_probe.c: 1 when host:port already answers GET /v1/models like an OpenAI-compatible
 * server (what[] gets the model ids it lists), 0 when nothing or something else answers. */
int serve_probe(const char *host, int port, char *what, size_t cap);

/* ---- LoRA adapters (serve_lora.c) ---- */
struct lora_set;
/* --adapter / --adapter-path / --adapters-dir: 1 taken, 0 not ours, -1 bad (printed). */
int serve_lora_flag(struct serve_opts *o, const char *a, const char *v);
/* Creates the registry, mounts every --adapter (a bad one fails: -1, printed), sets
 * ec->lora. */
int serve_lora_setup(struct serve *sv, struct engine_config *ec);
void serve_lora_free(struct serve *sv);
void serve_lora_card(struct serve *sv);
/* The set request r runs: its "adapter" field, else a "model" naming a mounted adapter,
 * else the default. References held in *set (lora_set_unref). -1 with err (400 naming the
 * id) on an unknown id. */
int serve_lora_pick(struct serve *sv, struct http_req *r, struct lora_set *set,
                    struct api_error *err);
int serve_lora_routes(struct serve *sv);
struct api_model;
/* Loop thread. The api_model a request's responses are encoded with: &sv->am, or, when the
 * request's "model" field selects a mounted adapter (no "adapter" field; as
 * serve_lora_pick), a copy of it whose id is that adapter's (vLLM echoes the adapter name),
 * kept until serve_lora_free. */
const struct api_model *serve_lora_am(struct serve *sv, struct http_req *r);
/* Appends the mounted adapters (only the one named `only` when non-NULL) to a /v1/models
 * data array, each with its base as "parent". */
void serve_lora_models(struct serve *sv, json_t *data, const char *only);
json_t *serve_lora_stats_json(struct serve *sv);
void serve_lora_metrics(struct serve *sv, struct sbuf *b);

/* ---- the next turn's warm-up (serve_warm.c) ----
 * When a chat turn ends with a tool call that the chat template renders otherwise than the
 * model wrote it (a bare JSON object or a fenced block the parser recovered: the template
 * must render it, api/genhist.h cannot replay those ids), the next request's prompt leaves
 * the cached ids at that call. So once the reply is out, the prompt the next turn starts
 * with — the conversation, the assistant message as the client sends it back, the tool
 * results' markup up to their text — is rendered and tokenized as a request would be and
 * submitted as a prefill-only engine request (max_tokens 1, its token dropped). Its KV is
 * in the prefix cache (and the SSD tier) while the client runs the tool; the next turn
 * reuses it. The prefix taken is common to two renderings with different tool results, so
 * no id depends on text the client has not sent. CINFER_WARM_NEXT_TURN=0 turns it off. */
/* serve_gen.after of a chat completion (ctx an oai_req owner, see serve_routes.c): rq the
 * request as rendered, thinking the resolved enable_thinking, n_prompt its prompt's ids,
 * msg the assistant message (oai_out_rerendered; NULL: nothing to do; borrowed). */
struct oai_req;
void serve_warm_chat(struct serve *sv, const struct oai_req *rq, int thinking, int n_prompt,
                     struct json_t *msg, const struct lora_set *ls);
/* Adds "next_turn_warm" {submitted, finished, tokens} to a /stats object. */
void serve_warm_stats_json(struct json_t *j);

/* ---- the SSD cold tier (serve_ssd.c) ---- */
/* Parses an --ssd-* flag at argv a (value v). Returns 0 when a is not one, 1 when it took
 * the flag (*used = 1 when it also took v), -1 on a bad value (message printed). */
int serve_ssd_flag(const char *a, const char *v, struct serve_opts *o, int *used);
/* Checks the flags against each other and fills ec's ssd_* fields (flags and the
 * CINFER_SSD_* environment). Returns 0, or -1 with the message printed. */
int serve_ssd_config(const struct serve_opts *o, struct engine_config *ec);
/* The ready card's line (nothing when the tier is off). */
void serve_ssd_card(struct serve *sv);
/* Adds "ssd_cache" to a /stats object (nothing when off). */
struct json_t;
void serve_ssd_stats_json(struct serve *sv, struct json_t *j);
/* Appends the tier's Prometheus lines (nothing when off). */
struct sbuf;
void serve_ssd_metrics(struct serve *sv, struct sbuf *b);
/* At shutdown (SIGINT/SIGTERM), before the engine is freed: writes every cached block,
 * printing the bounded timeout and the outcome. */
void serve_ssd_exit(struct serve *sv);
/* Installs POST /admin/cache/flush. Returns 0 or -1. */
int serve_ssd_routes(struct serve *sv);

#endif
