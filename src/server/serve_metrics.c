/* serve_metrics.c — counters and histograms behind GET /stats (JSON) and GET /metrics
 * (Prometheus text format 0.0.4). Everything here runs on the HTTP loop thread; engine
 * figures come from engine_get_stats (a locked snapshot).
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "http/http.h"
#include "kv/kv_events.h"
#include "server/serve.h"
#include "server/serve_embed.h"
#include "util/clock.h"
#include "util/sbuf.h"
#include "util/jsonfmt.h"

static void hist_init(struct hist *h, const double *le, int n)
{
    memset(h, 0, sizeof *h);
    h->n = n;
    memcpy(h->le, le, (size_t)n * sizeof *le);
}

void metrics_init(struct serve_metrics *m)
{
    static const double ttft[] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
    static const double tpot[] = {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28};
    static const double e2e[] = {0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};
    memset(m, 0, sizeof *m);
    hist_init(&m->ttft, ttft, (int)(sizeof ttft / sizeof *ttft));
    hist_init(&m->tpot, tpot, (int)(sizeof tpot / sizeof *tpot));
    hist_init(&m->e2e, e2e, (int)(sizeof e2e / sizeof *e2e));
}

void hist_add(struct hist *h, double v)
{
    int i = 0;
    while (i < h->n && v > h->le[i])
        i++;
    h->count[i]++;
    h->sum += v;
    h->total++;
}

char *serve_stats_json(struct serve *sv)
{
    struct engine_stats es;
    engine_get_stats(sv->eng, &es);
    struct http_stats hs;
    http_get_stats(sv->http, &hs);
    const struct engine_config *c = engine_config_of(sv->eng);
    const struct serve_metrics *m = &sv->met;
    const struct mem_plan *pl = &sv->plan;
    size_t bpb = engine_kv_bytes_per_token(sv->eng) * (size_t)c->block_size;
    json_t *j = json_pack(
        "{s:{s:s, s:s, s:I, s:f}, s:{s:i, s:I, s:I, s:I, s:I, s:I, s:I, s:I}, "
        "s:{s:i, s:o, s:I, s:I, s:I, s:I}, "
        "s:{s:i, s:s, s:b, s:i, s:i, s:I, s:I, s:o, s:i, s:i, s:i, s:i}, "
        "s:{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}}",
        "server", "owner", "serve", "model", sv->model_id, "started_at",
        (json_int_t)sv->started_unix, "uptime_s", clock_now_s() - sv->started_s,
        "prompt_cache", "entries", es.cache_entries, "bytes",
        (json_int_t)(bpb * (size_t)es.cache_entries), "max_bytes",
        (json_int_t)(pl->cache_blocks > 0 ? bpb * (size_t)pl->cache_blocks : 0), "hits",
        (json_int_t)es.cache_hits, "misses", (json_int_t)es.cache_misses, "hit_tokens",
        (json_int_t)es.cache_hit_tokens, "evictions", (json_int_t)es.cache_evictions,
        "cow_copies", (json_int_t)es.cache_cow,
        "admission", "max_safe_context", c->n_ctx, "memory_budget_bytes",
        pl->budget_given ? json_integer((json_int_t)pl->budget_bytes) : json_null(),
        "budget_bytes", (json_int_t)pl->budget_bytes, "usable_bytes",
        (json_int_t)pl->usable_bytes, "weights_bytes", (json_int_t)pl->weights_bytes,
        "transient_bytes", (json_int_t)pl->transient_bytes,
        "batch", "configured", c->max_seqs, "mode", c->max_seqs > 1 ? "batch" : "serial",
        "batched", c->max_seqs > 1, "active_rows", es.running, "pending_rows", es.waiting,
        "submitted_rows", (json_int_t)es.submitted, "kv_bytes",
        (json_int_t)(bpb * (size_t)(es.blocks_total - es.blocks_free)), "kv_budget_bytes",
        c->kv_budget_bytes ? json_integer((json_int_t)c->kv_budget_bytes) : json_null(),
        "blocks_total", es.blocks_total, "blocks_free", es.blocks_free, "block_size",
        c->block_size, "max_batch_tokens", c->max_step_tokens,
        "requests", "chat", (json_int_t)m->requests[EP_CHAT], "completions",
        (json_int_t)m->requests[EP_COMPLETIONS], "finished", (json_int_t)es.finished,
        "cancelled", (json_int_t)es.cancelled, "disconnects", (json_int_t)m->disconnects,
        "failed", (json_int_t)es.failed, "rejected_429", (json_int_t)(m->rejected_429),
        "preempted", (json_int_t)es.preempted, "streams_open", (json_int_t)m->streams_open);
    if (!j)
        return NULL;
    json_t *tok = json_pack("{s:I, s:I, s:I}", "prompt", (json_int_t)es.prompt_tokens,
                            "generated", (json_int_t)es.gen_tokens, "cached",
                            (json_int_t)m->cached_tokens);
    json_object_set_new(j, "tokens", tok);
    /* the block-pool invariant checker (CINFER_CHECK_KV=1): failures and the last one */
    /* steps run, and those of decode bursts (queued before the previous step's ids were
     * read back: the device did not wait for the host) */
    json_object_set_new(json_object_get(j, "batch"), "steps", json_integer(es.steps));
    json_object_set_new(json_object_get(j, "batch"), "overlapped_steps",
                        json_integer(es.burst_steps));
    json_object_set_new(json_object_get(j, "batch"), "invariant_checks",
                        json_boolean(c->check_invariants));
    json_object_set_new(json_object_get(j, "batch"), "invariant_failures",
                        json_integer(es.invariant_failures));
    json_object_set_new(json_object_get(j, "admission"), "memory",
                        json_string(sv->plan.on_device ? "device" : "host"));
    if (sv->plan.on_device)
        json_object_set_new(json_object_get(j, "admission"), "device_total_bytes",
                            json_integer((json_int_t)sv->plan.device_total));
    if (es.swa_blocks_total) { /* sliding-window layers' own pool */
        json_object_set_new(json_object_get(j, "batch"), "swa_blocks_total",
                            json_integer(es.swa_blocks_total));
        json_object_set_new(json_object_get(j, "batch"), "swa_blocks_free",
                            json_integer(es.swa_blocks_free));
    }
    json_object_set_new(j, "response_store", store_stats_json());
    json_object_set_new(json_object_get(j, "prompt_cache"), "full_blocks",
                        json_integer(es.cache_full_blocks));
    if (sv->kvev) { /* --kv-events */
        struct kv_events_stats ks;
        kv_events_get_stats(sv->kvev, &ks);
        json_object_set_new(j, "kv_events",
                            json_pack("{s:I, s:I, s:I, s:I}", "batches", (json_int_t)ks.batches,
                                      "events", (json_int_t)ks.events, "dropped",
                                      (json_int_t)ks.dropped, "replays",
                                      (json_int_t)ks.replays));
    }
    serve_ssd_stats_json(sv, j);
    serve_warm_stats_json(j);
    serve_kvq_stats_json(sv, j);
    serve_embed_stats_json(sv, j); /* --embeddings */
    json_object_set_new(j, "speculation", serve_spec_stats_json(&es));
    json_object_set_new(j, "adapters", serve_lora_stats_json(sv));
    json_t *rq = json_object_get(j, "requests");
    json_object_set_new(rq, "messages", json_integer(m->requests[EP_MESSAGES]));
    json_object_set_new(rq, "responses", json_integer(m->requests[EP_RESPONSES]));
    json_object_set_new(json_object_get(j, "server"), "connections",
                        json_integer(hs.conns_open));
    json_object_set_new(json_object_get(j, "server"), "backend", /* the status page shows it */
                        json_string(sv->m->be->ops->name));
    char *s = json_dumps_short(j, JSON_COMPACT);
    json_decref(j);
    return s;
}

static void prom(struct sbuf *b, const char *name, const char *type, const char *help, double v)
{
    sbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
}

static void prom_hist(struct sbuf *b, const char *name, const char *help, const struct hist *h)
{
    sbuf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    long cum = 0;
    for (int i = 0; i < h->n; i++) {
        cum += h->count[i];
        sbuf_printf(b, "%s_bucket{le=\"%g\"} %ld\n", name, h->le[i], cum);
    }
    cum += h->count[h->n];
    sbuf_printf(b, "%s_bucket{le=\"+Inf\"} %ld\n%s_sum %.17g\n%s_count %ld\n", name, cum, name,
                h->sum, name, h->total);
}

char *serve_metrics_text(struct serve *sv)
{
    struct engine_stats es;
    engine_get_stats(sv->eng, &es);
    struct http_stats hs;
    http_get_stats(sv->http, &hs);
    const struct serve_metrics *m = &sv->met;
    struct sbuf b = {0};
    sbuf_printf(&b, "# HELP cinfer_requests_total Generation requests received, by endpoint.\n"
                    "# TYPE cinfer_requests_total counter\n"
                    "cinfer_requests_total{endpoint=\"chat\"} %ld\n"
                    "cinfer_requests_total{endpoint=\"completions\"} %ld\n"
                    "cinfer_requests_total{endpoint=\"messages\"} %ld\n"
                    "cinfer_requests_total{endpoint=\"responses\"} %ld\n",
                m->requests[0], m->requests[1], m->requests[EP_MESSAGES],
                m->requests[EP_RESPONSES]);
    prom(&b, "cinfer_requests_finished_total", "counter", "Requests the engine finished.",
         (double)es.finished);
    prom(&b, "cinfer_requests_cancelled_total", "counter",
         "Requests cancelled (client disconnect or shutdown).", (double)es.cancelled);
    prom(&b, "cinfer_client_disconnects_total", "counter",
         "Clients that disconnected before their response ended.", (double)m->disconnects);
    prom(&b, "cinfer_requests_failed_total", "counter", "Requests that failed in the engine.",
         (double)es.failed);
    prom(&b, "cinfer_http_4xx_total", "counter", "Client errors answered.", (double)m->status_4xx);
    prom(&b, "cinfer_http_5xx_total", "counter", "Server errors answered.", (double)m->status_5xx);
    prom(&b, "cinfer_http_429_total", "counter", "Requests refused for load (429).",
         (double)(m->rejected_429));
    prom(&b, "cinfer_prompt_tokens_total", "counter", "Prompt tokens computed (prefill).",
         (double)es.prompt_tokens);
    prom(&b, "cinfer_generation_tokens_total", "counter", "Tokens generated.",
         (double)es.gen_tokens);
    prom(&b, "cinfer_prompt_cache_hits_total", "counter", "Requests that reused cached KV.",
         (double)es.cache_hits);
    prom(&b, "cinfer_prompt_cache_misses_total", "counter", "Requests that found no cached KV.",
         (double)es.cache_misses);
    prom(&b, "cinfer_prompt_cache_hit_tokens_total", "counter", "Prompt tokens reused from cache.",
         (double)es.cache_hit_tokens);
    prom(&b, "cinfer_prompt_cache_evictions_total", "counter", "Cached KV blocks evicted.",
         (double)es.cache_evictions);
    prom(&b, "cinfer_prompt_cache_entries", "gauge", "Cached KV blocks.",
         (double)es.cache_entries);
    serve_ssd_metrics(sv, &b);
    prom(&b, "cinfer_kv_projected_bytes", "gauge", "Projected KV of the running requests.",
         (double)es.kv_projected_bytes);
    prom(&b, "cinfer_max_safe_context", "gauge", "Longest context the memory plan admits.",
         (double)engine_config_of(sv->eng)->n_ctx);
    prom(&b, "cinfer_memory_budget_bytes", "gauge", "Memory budget of the plan.",
         (double)sv->plan.budget_bytes);
    prom(&b, "cinfer_queue_depth", "gauge", "Requests waiting for a batch slot.",
         (double)es.waiting);
    prom(&b, "cinfer_running_requests", "gauge", "Requests in the running batch.",
         (double)es.running);
    prom(&b, "cinfer_preemptions_total", "counter", "Requests preempted for KV space.",
         (double)es.preempted);
    prom(&b, "cinfer_kv_blocks_total", "gauge", "KV cache blocks in the pool.",
         (double)es.blocks_total);
    prom(&b, "cinfer_kv_blocks_free", "gauge", "Free KV cache blocks.", (double)es.blocks_free);
    prom(&b, "cinfer_engine_steps_total", "counter", "Forward steps run.", (double)es.steps);
    prom(&b, "cinfer_http_connections", "gauge", "Open HTTP connections.", (double)hs.conns_open);
    serve_spec_metrics(&b, &es);
    prom_hist(&b, "cinfer_time_to_first_token_seconds", "Time from request to first token.",
              &m->ttft);
    prom_hist(&b, "cinfer_time_per_output_token_seconds", "Time between generated tokens.",
              &m->tpot);
    prom_hist(&b, "cinfer_request_duration_seconds", "Time from request to its last token.",
              &m->e2e);
    serve_metrics_vllm(sv, &b, &es);
    serve_lora_metrics(sv, &b);
    return b.p;
}
