/* serve_routes.c — the HTTP routes of `cinfer serve` and the job glue.
 *
 * A job is one generation request: the parsed request, its prompt, the protocol encoder
 * (oai_out) and a reference to the HTTP request. The engine thread reports events through
 * job_cb, which copies each event and posts it to the loop (http_post keeps FIFO order);
 * job_deliver feeds the encoder and writes SSE frames or the final body. The job lives
 * until the engine's terminal event has been delivered, even when the client left first
 * (the close callback cancels the engine request; the terminal event then frees the job).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/oai_out.h"
#include "api/oai_req.h"
#include "server/serve.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/sbuf.h"
#include "util/version.h"

struct job {
    struct serve *sv;
    struct job *prev, *next;
    struct http_req *req; /* referenced */
    struct oai_req rq;
    struct api_prompt pr;
    struct oai_out *out;
    uint64_t eng_id;
    int kind, ended, gone;
    double t_start, t_first, t_last;
    int n_gen;
    struct sbuf buf;
};

struct evmsg {
    struct job *j;
    struct engine_event ev;
    struct sampler_logprob lp;
    char *text;  /* owned copy */
    char *error; /* owned copy */
};

/* ---- small helpers ------------------------------------------------------------------- */

static void reply_json(struct http_req *r, int status, json_t *j)
{
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!s) {
        http_reply_error(r, 500, "out of memory");
        return;
    }
    http_reply(r, status, "application/json", s, strlen(s));
    free(s);
}

static void reply_api_error(struct serve *sv, struct http_req *r, const struct api_error *err)
{
    char *b = oai_error_body(err);
    if (err->status == 429) {
        http_add_header(r, "Retry-After", "1");
        sv->met.rejected_429++;
    }
    if (err->status >= 500)
        sv->met.status_5xx++;
    else
        sv->met.status_4xx++;
    if (!b) {
        http_reply_error(r, err->status, err->message);
        return;
    }
    http_reply(r, err->status, "application/json", b, strlen(b));
    free(b);
}

/* ---- jobs ---------------------------------------------------------------------------- */

static void job_unlink(struct job *j)
{
    struct serve *sv = j->sv;
    if (j->prev)
        j->prev->next = j->next;
    else if (sv->jobs == j)
        sv->jobs = j->next;
    if (j->next)
        j->next->prev = j->prev;
    j->prev = j->next = NULL;
    sv->met.active_jobs--;
}

static void job_free(struct job *j)
{
    struct serve *sv = j->sv;
    job_unlink(j);
    if (j->req)
        http_req_unref(j->req);
    oai_out_free(j->out);
    oai_req_deinit(&j->rq);
    free(j->pr.ids);
    sbuf_free(&j->buf);
    free(j);
    if (sv->shutting_down && !sv->jobs)
        http_server_stop(sv->http);
}

static void job_on_close(struct http_req *r, void *ud)
{
    (void)r;
    struct job *j = ud;
    if (j->ended)
        return;
    j->gone = 1;
    j->sv->met.disconnects++;
    engine_cancel(j->sv->eng, j->eng_id);
}

/* Loop thread: one engine event. */
static void job_deliver(void *ud)
{
    struct evmsg *msg = ud;
    struct job *j = msg->j;
    struct serve *sv = j->sv;
    struct engine_event *ev = &msg->ev;
    ev->text = msg->text ? msg->text : "";
    ev->error = msg->error;
    ev->lp = ev->type == ENGINE_EV_DELTA && msg->lp.id >= 0 ? &msg->lp : NULL;
    double now = clock_now_s();
    int terminal = ev->type != ENGINE_EV_DELTA;
    if (ev->type == ENGINE_EV_DELTA) {
        if (!j->n_gen++)
            hist_add(&sv->met.ttft, now - j->t_start), j->t_first = now;
        else
            hist_add(&sv->met.tpot, now - j->t_last);
        j->t_last = now;
    }
    if (!j->ended && !j->gone) {
        sbuf_clear(&j->buf);
        int rc = oai_out_event(j->out, ev, &j->buf);
        if (j->rq.stream) {
            if (j->buf.len && http_stream_write(j->req, j->buf.p, j->buf.len) < 0)
                j->gone = 1;
            if (terminal) {
                http_stream_end(j->req);
                j->ended = 1;
            }
        } else if (terminal) {
            if (ev->type == ENGINE_EV_ERROR || rc) {
                struct api_error err;
                api_fail(&err, 500, NULL, "generation failed: %s",
                         ev->error ? ev->error : "out of memory");
                reply_api_error(sv, j->req, &err);
            } else if (ev->finish == ENGINE_FINISH_CANCELLED) {
                struct api_error err;
                api_fail(&err, 503, NULL, "the request was cancelled (server shutting down)");
                reply_api_error(sv, j->req, &err);
            } else
                http_reply(j->req, 200, "application/json", j->buf.p, j->buf.len);
            j->ended = 1;
        }
    }
    if (terminal) {
        sv->met.prompt_tokens += ev->n_prompt;
        sv->met.gen_tokens += ev->n_gen;
        sv->met.cached_tokens += ev->n_cached;
        if (ev->type == ENGINE_EV_ERROR)
            sv->met.status_5xx++;
        if (ev->type == ENGINE_EV_DONE && ev->finish == ENGINE_FINISH_CANCELLED)
            sv->met.cancelled++;
        hist_add(&sv->met.e2e, now - j->t_start);
        if (j->rq.stream)
            sv->met.streams_open--;
        job_free(j);
    }
    free(msg->text);
    free(msg->error);
    free(msg);
}

/* Engine thread: copy the event and hand it to the loop. */
static void job_cb(void *ud, const struct engine_event *ev)
{
    struct job *j = ud;
    struct evmsg *msg = calloc(1, sizeof *msg);
    if (!msg)
        return; /* a lost delta; the terminal event retries below */
    msg->j = j;
    msg->ev = *ev;
    msg->lp.id = -1;
    if (ev->lp)
        msg->lp = *ev->lp;
    if (ev->len && !(msg->text = strndup(ev->text, ev->len)))
        msg->ev.len = 0;
    if (ev->error)
        msg->error = strdup(ev->error);
    if (http_post(j->sv->http, job_deliver, msg)) {
        /* the loop is gone (shutdown): nothing can be delivered any more */
        free(msg->text);
        free(msg->error);
        free(msg);
    }
}

/* ---- generation routes ---------------------------------------------------------------- */

static void generate(struct serve *sv, struct http_req *r, int kind)
{
    sv->met.requests[kind]++;
    struct api_error err = {0};
    if (sv->shutting_down) {
        api_fail(&err, 503, NULL, "the server is shutting down");
        reply_api_error(sv, r, &err);
        return;
    }
    struct job *j = calloc(1, sizeof *j);
    if (!j) {
        http_reply_error(r, 500, "out of memory");
        return;
    }
    j->sv = sv;
    j->kind = kind;
    j->t_start = clock_now_s();
    size_t blen;
    const char *body = http_req_body(r, &blen);
    if (oai_parse(&j->rq, kind, body, blen, &sv->defaults, sv->m->hp.n_vocab, &err))
        goto fail;
    int rc = kind == OAI_CHAT ? api_chat_prompt(&sv->am, &j->rq, &j->pr, &err)
                              : api_completion_prompt(&sv->am, j->rq.prompt, &j->pr, &err);
    if (rc)
        goto fail;
    int n_ctx = engine_config_of(sv->eng)->n_ctx;
    if (j->pr.n >= n_ctx) {
        api_fail(&err, 400, "messages",
                 "the prompt has %d tokens but the context holds %d — shorten the prompt",
                 j->pr.n, n_ctx);
        err.code = "context_length_exceeded";
        goto fail;
    }
    int max_tokens = j->rq.max_tokens ? j->rq.max_tokens
                     : kind == OAI_CHAT ? sv->max_tokens_chat
                                        : sv->max_tokens_raw;
    if (max_tokens > n_ctx - j->pr.n)
        max_tokens = n_ctx - j->pr.n;
    struct cerr e = {0};
    if (oai_out_new(&j->out, &sv->am, &j->rq, &j->pr, sv->o.batch > 1 ? "batched" : "serial",
                    &e)) {
        api_fail(&err, 500, NULL, "%s", e.msg);
        goto fail;
    }
    struct engine_req q = {.ids = j->pr.ids, .n_ids = j->pr.n, .sp = j->rq.sp,
                           .max_tokens = max_tokens,
                           .stops = (const char *const *)j->rq.stops, .n_stops = j->rq.n_stops,
                           .cb = job_cb, .ud = j};
    /* link before submit: events may arrive on the loop right after it */
    j->req = r;
    http_req_ref(r);
    j->next = sv->jobs;
    if (sv->jobs)
        sv->jobs->prev = j;
    sv->jobs = j;
    sv->met.active_jobs++;
    if (engine_submit(sv->eng, &q, &j->eng_id, &e)) {
        if (e.code == CERR_LIMIT)
            api_fail(&err, 429, NULL, "%s", e.msg);
        else
            api_fail(&err, 400, NULL, "%s", e.msg);
        reply_api_error(sv, r, &err);
        j->ended = 1;
        job_free(j);
        return;
    }
    http_req_on_close(r, job_on_close, j);
    if (j->rq.stream) {
        sv->met.streams_open++;
        http_stream_begin(r, 200, "text/event-stream");
        sbuf_clear(&j->buf);
        if (oai_out_begin(j->out, &j->buf) == 0 && j->buf.len)
            http_stream_write(r, j->buf.p, j->buf.len);
    }
    return;
fail:
    reply_api_error(sv, r, &err);
    oai_out_free(j->out);
    oai_req_deinit(&j->rq);
    free(j->pr.ids);
    free(j);
}

static void h_chat(struct http_req *r, void *ud) { generate(ud, r, OAI_CHAT); }
static void h_completions(struct http_req *r, void *ud) { generate(ud, r, OAI_COMPLETION); }

/* ---- discovery routes ------------------------------------------------------------------ */

/* A float flag value as the user wrote it (0.3, not 0.30000001192092896). */
static double round6(float f)
{
    char b[32];
    snprintf(b, sizeof b, "%.6g", (double)f);
    return strtod(b, NULL);
}

static json_t *model_entry(struct serve *sv)
{
    json_t *gd = json_pack("{s:f, s:f, s:i}", "temperature", round6(sv->defaults.temperature),
                           "top_p", round6(sv->defaults.top_p), "top_k", sv->defaults.top_k);
    return json_pack("{s:s, s:s, s:I, s:s, s:i, s:b, s:b, s:b, s:b, s:b, s:o}", "id",
                     sv->model_id, "object", "model", "created", (json_int_t)sv->started_unix,
                     "owned_by", "cinfer", "context_window", engine_config_of(sv->eng)->n_ctx,
                     "reasoning", sv->am.think_open != NULL, "vision", 0, "audio", 0,
                     "chat", sv->tmpl != NULL, "tools", sv->tmpl != NULL, "gen_defaults", gd);
}

static void h_models(struct http_req *r, void *ud)
{
    struct serve *sv = ud;
    sv->met.requests[2]++;
    const char *path = http_req_path(r);
    const char *want = strncmp(path, "/v1/models/", 11) == 0 ? path + 11 : NULL;
    if (want && *want) {
        if (strcmp(want, sv->model_id)) {
            struct api_error err;
            api_fail(&err, 404, "model", "model '%s' not found; this server serves '%s'", want,
                     sv->model_id);
            err.code = "model_not_found";
            reply_api_error(sv, r, &err);
            return;
        }
        reply_json(r, 200, model_entry(sv));
        return;
    }
    reply_json(r, 200, json_pack("{s:s, s:[o]}", "object", "list", "data", model_entry(sv)));
}

static void h_health(struct http_req *r, void *ud)
{
    (void)ud;
    static const char body[] = "{\"status\": \"ok\"}";
    http_reply(r, 200, "application/json", body, sizeof body - 1);
}

static void h_index(struct http_req *r, void *ud)
{
    struct serve *sv = ud;
    reply_json(r, 200,
               json_pack("{s:s, s:s, s:s, s:[s,s,s,s,s,s,s]}", "name", "cinfer", "version",
                         CINFER_VERSION, "model", sv->model_id, "endpoints",
                         "POST /v1/chat/completions", "POST /v1/completions", "GET /v1/models",
                         "GET /v1/models/{id}", "GET /health", "GET /stats", "GET /metrics"));
}

static void h_stats(struct http_req *r, void *ud)
{
    char *s = serve_stats_json(ud);
    if (!s) {
        http_reply_error(r, 500, "out of memory");
        return;
    }
    http_reply(r, 200, "application/json", s, strlen(s));
    free(s);
}

static void h_metrics(struct http_req *r, void *ud)
{
    char *s = serve_metrics_text(ud);
    if (!s) {
        http_reply_error(r, 500, "out of memory");
        return;
    }
    http_reply(r, 200, "text/plain; version=0.0.4", s, strlen(s));
    free(s);
}

static char *error_fmt(const char *path, int status, const char *message, void *ud)
{
    struct serve *sv = ud;
    struct api_error err;
    api_fail(&err, status, NULL, "%s", message);
    if (status == 429)
        sv->met.rejected_429++;
    else if (status >= 500)
        sv->met.status_5xx++;
    else
        sv->met.status_4xx++;
    (void)path;
    if (status == 404) {
        /* the reference's exact body */
        return strdup("{\"error\":{\"message\":\"not found\",\"type\":\"not_found_error\","
                      "\"param\":null,\"code\":null}}");
    }
    return oai_error_body(&err);
}

void serve_shutdown(void *ud)
{
    struct serve *sv = ud;
    if (sv->shutting_down)
        return;
    sv->shutting_down = 1;
    log_info("shutting down: cancelling %ld in-flight request(s)", sv->met.active_jobs);
    for (struct job *j = sv->jobs; j; j = j->next) {
        if (!j->ended && !j->gone && j->rq.stream) {
            sbuf_clear(&j->buf);
            oai_error_frame(&j->buf, "the server is shutting down");
            http_stream_write(j->req, j->buf.p, j->buf.len);
            http_stream_end(j->req);
            j->ended = 1;
        }
        engine_cancel(sv->eng, j->eng_id);
    }
    if (!sv->jobs)
        http_server_stop(sv->http);
}

int serve_routes_install(struct serve *sv)
{
    struct http_server *h = sv->http;
    http_set_error_fmt(h, error_fmt, sv);
    int rc = http_route(h, "POST", "/v1/chat/completions", 0, h_chat, sv);
    rc |= http_route(h, "POST", "/v1/completions", 0, h_completions, sv);
    rc |= http_route(h, "GET", "/v1/models", 0, h_models, sv);
    rc |= http_route(h, "GET", "/v1/models/", HTTP_ROUTE_PREFIX, h_models, sv);
    rc |= http_route(h, "GET", "/health", HTTP_ROUTE_PUBLIC, h_health, sv);
    rc |= http_route(h, "GET", "/v1", 0, h_index, sv);
    rc |= http_route(h, "GET", "/stats", 0, h_stats, sv);
    rc |= http_route(h, "GET", "/metrics", 0, h_metrics, sv);
    return rc ? -1 : 0;
}
