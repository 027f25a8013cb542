/* serve_metrics_vllm.c — the router-facing series of GET /metrics under vLLM's names, beside
 * cinfer's own (serve_metrics.c). Routers and gateways that scrape vLLM (the Gateway API
 * Inference Extension's endpoint picker, llm-d, the vLLM production stack, dashboards) read
 * these without a per-engine mapping:
 *   vllm:num_requests_waiting / vllm:num_requests_running   gauges (queue, running batch)
 *   vllm:kv_cache_usage_perc                                 gauge, 0..1 of the block pool
 *   vllm:cache_config_info{block_size, num_gpu_blocks}       info gauge (value 1)
 *   vllm:prefix_cache_queries_total / _hits_total           counters, in tokens
 *   vllm:time_to_first_token_seconds, vllm:inter_token_latency_seconds,
 *   vllm:e2e_request_latency_seconds                         histograms
 *   vllm:prompt_tokens_total, vllm:generation_tokens_total, vllm:num_preemptions_total
 * Every series carries model_name (the served id) and engine="0", as vLLM's do. Counters
 * are declared with their _total name, as prometheus_client's 0.0.4 exposition writes them.
 * Loop thread only (reads sv->met).
 */
#include <stdio.h>
#include <string.h>

#include "server/serve.h"

/* The label set {model_name="...",engine="0"} with the id escaped for the text format. */
static void labels(const struct serve *sv, char *out, size_t cap)
{
    size_t n = 0;
    n += (size_t)snprintf(out, cap, "model_name=\"");
    for (const char *p = sv->model_id; *p && n + 4 < cap; p++) {
        if (*p == '\\' || *p == '"')
            out[n++] = '\\', out[n++] = *p;
        else if (*p == '\n')
            out[n++] = '\\', out[n++] = 'n';
        else
            out[n++] = *p;
    }
    out[n] = 0;
    snprintf(out + n, cap - n, "\",engine=\"0\"");
}

static void gauge(struct sbuf *b, const char *lb, const char *name, const char *help, double v)
{
    sbuf_printf(b, "# HELP %s %s\n# TYPE %s gauge\n%s{%s} %.17g\n", name, help, name, name, lb,
                v);
}

/* family is the name without _total; HELP, TYPE and the sample use family_total. */
static void counter(struct sbuf *b, const char *lb, const char *family, const char *help,
                    double v)
{
    sbuf_printf(b, "# HELP %s_total %s\n# TYPE %s_total counter\n%s_total{%s} %.17g\n", family,
                help, family, family, lb, v);
}

static void hist(struct sbuf *b, const char *lb, const char *name, const char *help,
                 const struct hist *h)
{
    sbuf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    long cum = 0;
    for (int i = 0; i < h->n; i++) {
        cum += h->count[i];
        sbuf_printf(b, "%s_bucket{%s,le=\"%g\"} %ld\n", name, lb, h->le[i], cum);
    }
    cum += h->count[h->n];
    sbuf_printf(b, "%s_bucket{%s,le=\"+Inf\"} %ld\n%s_sum{%s} %.17g\n%s_count{%s} %ld\n", name,
                lb, cum, name, lb, h->sum, name, lb, h->total);
}

void serve_metrics_vllm(struct serve *sv, struct sbuf *b, const struct engine_stats *es)
{
    char lb[600];
    labels(sv, lb, sizeof lb);
    const struct engine_config *c = engine_config_of(sv->eng);
    const struct serve_metrics *m = &sv->met;
    gauge(b, lb, "vllm:num_requests_running", "Number of requests in model execution batches.",
          es->running);
    gauge(b, lb, "vllm:num_requests_waiting", "Number of requests waiting to be processed.",
          es->waiting);
    /* blocks_free counts evictable cached blocks as free, as vLLM's free queue does */
    double usage = es->blocks_total > 0
                       ? (double)(es->blocks_total - es->blocks_free) / es->blocks_total
                       : 0;
    gauge(b, lb, "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
          usage);
    sbuf_printf(b,
                "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
                "# TYPE vllm:cache_config_info gauge\n"
                "vllm:cache_config_info{block_size=\"%d\",cache_dtype=\"%s\","
                "enable_prefix_caching=\"%s\",engine=\"0\",num_gpu_blocks=\"%d\"} 1\n",
                c->block_size, c->kv_dtype == DT_F16 ? "float16" : "float32",
                c->prompt_cache_blocks >= 0 ? "True" : "False", es->blocks_total);
    counter(b, lb, "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
            (double)m->prompt_tokens);
    counter(b, lb, "vllm:prefix_cache_hits",
            "Prefix cache hits, in terms of number of cached tokens.", (double)m->cached_tokens);
    counter(b, lb, "vllm:prompt_tokens", "Number of prefill tokens processed.",
            (double)m->prompt_tokens);
    counter(b, lb, "vllm:generation_tokens", "Number of generation tokens processed.",
            (double)m->gen_tokens);
    counter(b, lb, "vllm:num_preemptions", "Cumulative number of preemption from the engine.",
            (double)es->preempted);
    hist(b, lb, "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
         &m->ttft);
    hist(b, lb, "vllm:inter_token_latency_seconds",
         "Histogram of inter-token latency in seconds.", &m->tpot);
    hist(b, lb, "vllm:e2e_request_latency_seconds",
         "Histogram of e2e request latency in seconds.", &m->e2e);
}
