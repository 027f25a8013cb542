/* serve_fit.c — GET /fit: the plan for the loaded model on this machine, as `cinfer ls`'s
 * "fits" column and a scheduler placing models would want it: weights, KV per token, the
 * memory budget, the max safe context, the measured memory bandwidth and the decode speed
 * that predicts at 8k context (decode reads every weight and the context's KV once per
 * token, so tok/s ~= bandwidth / (weights + 8192 x KV per token): an upper bound, and for a
 * model on a GPU only the host figures are measured here).
 * The bandwidth is measured once, at the first call (a 256 MiB read on the loop thread,
 * some tens of ms), then kept. Loop thread only.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "server/serve.h"
#include "util/clock.h"
#include "util/jsonfmt.h"

#define PROBE_BYTES ((size_t)256 << 20)

static double g_bw; /* bytes/s, 0 = not measured yet */

/* Host read bandwidth of one thread, best of 3 passes over a 256 MiB buffer; 0 on failure. */
static double measure_bandwidth(void)
{
    size_t n = PROBE_BYTES / sizeof(uint64_t);
    uint64_t *a = malloc(n * sizeof *a);
    if (!a)
        return 0;
    for (size_t i = 0; i < n; i++)
        a[i] = i;
    double best = 1e30;
    volatile uint64_t sink = 0;
    for (int pass = 0; pass < 3; pass++) {
        double t0 = clock_now_s();
        uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        for (size_t i = 0; i + 3 < n; i += 4)
            s0 += a[i], s1 += a[i + 1], s2 += a[i + 2], s3 += a[i + 3];
        sink += s0 + s1 + s2 + s3;
        double dt = clock_now_s() - t0;
        if (dt < best)
            best = dt;
    }
    (void)sink;
    free(a);
    return best > 0 ? (double)PROBE_BYTES / best : 0;
}

char *serve_fit_json(struct serve *sv)
{
    if (g_bw == 0)
        g_bw = measure_bandwidth();
    const struct mem_plan *p = &sv->plan;
    const struct engine_config *c = engine_config_of(sv->eng);
    double per_tok = (double)p->weights_bytes + 8192.0 * (double)p->kv_per_token;
    json_t *j = json_pack(
        "{s:s, s:s, s:I, s:I, s:I, s:b, s:i, s:f, s:f, s:s}", "model", sv->model_id,
        "memory", p->on_device ? "device" : "host", "weights_bytes", (json_int_t)p->weights_bytes,
        "kv_bytes_per_token", (json_int_t)p->kv_per_token, "memory_budget_bytes",
        (json_int_t)p->budget_bytes, "fits", 1, "max_safe_context", c->n_ctx,
        "host_read_bandwidth_gbs", g_bw / 1e9, "predicted_decode_tok_s_at_8k",
        per_tok > 0 ? g_bw / per_tok : 0.0, "bandwidth_measured", "one thread, 256 MiB read");
    char *s = j ? json_dumps_short(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return s;
}

static void h_fit(struct http_req *r, void *ud)
{
    char *s = serve_fit_json(ud);
    if (!s) {
        http_reply_error(r, 500, "out of memory");
        return;
    }
    http_reply(r, 200, "application/json", s, strlen(s));
    free(s);
}

int serve_fit_install(struct serve *sv)
{
    return http_route(sv->http, "GET", "/fit", 0, h_fit, sv) ? -1 : 0;
}
