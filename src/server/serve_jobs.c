/* serve_jobs.c — the job glue between HTTP and the engine, shared by every protocol.
 *
 * A job is one generation request: the engine request, the protocol encoder (struct
 * proto_ops) and a reference to the HTTP request. The engine thread reports events through
 * job_cb, which copies each event and posts it to the loop (http_post keeps FIFO order);
 * job_deliver feeds the encoder and writes SSE frames or the final body. The job lives
 * until the engine's terminal event has been delivered, even when the client left first
 * (the close callback cancels the engine request; the terminal event then frees the job).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/genhist.h"
#include "api/oai_req.h"
#include "api/structured/structured.h"
#include "model/lora.h"
#include "server/serve.h"
#include "server/serve_embed.h"
#include "util/clock.h"
#include "util/jsonfmt.h"
#include "util/log.h"
#include "util/sbuf.h"

struct job;

/* One engine request of a job (a choice). */
struct job_sub {
    struct job *j;
    int idx;
    int state; /* 0 not submitted yet, 1 running, 2 ended */
    int seen;  /* events delivered */
    uint64_t eng_id;
};

struct job {
    struct serve *sv;
    struct job *prev, *next;
    struct http_req *req; /* referenced */
    struct serve_gen g;
    struct job_sub *subs; /* (n_sub) */
    struct job_sub sub1;  /* subs when there is one */
    int n_sub, n_live, n_pending;
    int failed;           /* a choice failed: the others are cancelled, no more submitted */
    int any_error, any_cancelled;
    int err_status;       /* the first engine error's status (400: the request's fault; 0) */
    char *fail_msg;       /* a late submission's refusal (owned) */
    int fail_status;
    int ended, gone;
    int done_ok; /* the one choice ended at an end-of-generation id or max_tokens */
    double t_start, t_last;
    int n_gen;
    struct sbuf buf;
    struct genhist_acc gh; /* the exact sampled ids and text (api/genhist.h) */
    struct lora_set ls;    /* the request's adapters (n == 0: none) */
};

struct evmsg {
    struct job_sub *s;
    struct engine_event ev;
    struct sampler_logprob lp;
    char *text;  /* owned copy */
    char *error; /* owned copy */
};

void serve_reply_json(struct http_req *r, int status, json_t *j)
{
    char *s = j ? json_dumps_short(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!s) {
        http_reply_error(r, 500, "out of memory");
        return;
    }
    http_reply(r, status, "application/json", s, strlen(s));
    free(s);
}

void serve_warning(struct http_req *r, const char *text)
{
    if (!text || !*text)
        return;
    char v[320];
    snprintf(v, sizeof v, "299 cinfer \"%s\"", text);
    http_add_header(r, "Warning", v);
}

void serve_reply_error(struct serve *sv, struct http_req *r, const struct api_error *err,
                       char *(*error_body)(const struct api_error *err))
{
    char *b = error_body ? error_body(err) : NULL;
    if (err->status == 429) {
        http_add_header(r, "Retry-After", "1");
        sv->met.rejected_429++;
    } else if (err->status >= 500)
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

static void gen_release(struct serve_gen *g)
{
    if (g->enc && g->ops && g->ops->free)
        g->ops->free(g->enc);
    if (g->cleanup)
        g->cleanup(g->ctx);
    g->enc = g->ctx = NULL;
}

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
    gen_release(&j->g);
    sbuf_free(&j->buf);
    if (j->subs != &j->sub1)
        free(j->subs);
    free(j->fail_msg);
    lora_set_unref(&j->ls);
    free(j);
    if (sv->shutting_down && !sv->jobs && !serve_embed_pending(sv))
        http_server_stop(sv->http);
}

/* Cancels every running choice; the pending ones are never submitted. */
static void job_cancel_all(struct job *j)
{
    j->n_pending = 0;
    for (int i = 0; i < j->n_sub; i++)
        if (j->subs[i].state == 1)
            engine_cancel(j->sv->eng, j->subs[i].eng_id);
}

static void job_on_close(struct http_req *r, void *ud)
{
    (void)r;
    struct job *j = ud;
    if (j->ended)
        return;
    j->gone = 1;
    j->sv->met.disconnects++;
    job_cancel_all(j);
}

static void job_fail(struct job *j, int status, const char *msg)
{
    struct api_error err;
    api_fail(&err, status, NULL, "%s", msg);
    serve_reply_error(j->sv, j->req, &err, j->g.ops->error_body);
}

static void job_cb(void *ud, const struct engine_event *ev);
static void job_end(struct job *j, double now);

/* Submits choice s. Returns 0, or -1 with err filled (429 queue full, 400 otherwise). */
static int sub_submit(struct job_sub *s, struct api_error *err)
{
    struct job *j = s->j;
    struct engine_req q = j->g.n_q > 1 ? j->g.qs[s->idx] : j->g.q;
    q.lora = &j->ls;
    q.cb = job_cb;
    q.ud = s;
    struct cerr e = {0};
    if (engine_submit(j->sv->eng, &q, &s->eng_id, &e)) {
        api_fail(err, e.code == CERR_LIMIT ? 429 : 400, NULL, "%s", e.msg);
        if (e.code == CERR_LIMIT && strstr(e.msg, "context"))
            err->status = 400;
        return -1;
    }
    s->state = 1;
    j->n_live++;
    return 0;
}

/* A choice could not be submitted after others were: the job fails (the running choices
 * are cancelled; a stream gets an error frame now, a body the error at the end). */
static void job_fail_late(struct job *j, const struct api_error *err)
{
    if (!j->failed) {
        j->failed = 1;
        j->fail_status = err->status;
        j->fail_msg = strdup(err->message);
    }
    job_cancel_all(j);
    if (j->g.stream && !j->ended && !j->gone) {
        sbuf_clear(&j->buf);
        j->g.ops->error_frame(&j->buf, err->message);
        http_stream_write(j->req, j->buf.p, j->buf.len);
        http_stream_end(j->req);
        j->ended = 1;
    }
}

/* The lead choice of a group has its prompt computed (its first token, or its end): the
 * other choices of the group go now and find the prompt in the prefix cache. */
static void job_release_group(struct job *j, int lead)
{
    int sn = j->g.share_n > 1 ? j->g.share_n : 1;
    for (int i = lead + 1; i < lead + sn && i < j->n_sub; i++) {
        struct job_sub *s = &j->subs[i];
        if (s->state || !j->n_pending)
            continue;
        j->n_pending--;
        struct api_error err = {0};
        if (j->failed || j->gone) {
            s->state = 2;
            continue;
        }
        if (sub_submit(s, &err)) {
            s->state = 2;
            job_fail_late(j, &err);
        }
    }
}

/* Loop thread: one engine event. */
static void job_deliver(void *ud)
{
    struct evmsg *msg = ud;
    struct job_sub *s = msg->s;
    struct job *j = s->j;
    struct serve *sv = j->sv;
    struct engine_event *ev = &msg->ev;
    ev->text = msg->text ? msg->text : "";
    ev->error = msg->error;
    ev->lp = ev->type != ENGINE_EV_DONE && ev->type != ENGINE_EV_ERROR && msg->lp.id >= 0
                 ? &msg->lp
                 : NULL;
    double now = clock_now_s();
    int sub_end = ev->type == ENGINE_EV_DONE || ev->type == ENGINE_EV_ERROR;
    int multi = j->n_sub > 1;
    int lead = !s->seen++ && (ev->type == ENGINE_EV_DELTA || sub_end);
    if (sub_end) {
        s->state = 2;
        j->n_live--;
        j->any_error |= ev->type == ENGINE_EV_ERROR;
        if (ev->type == ENGINE_EV_ERROR && !j->err_status)
            j->err_status = ev->error_status;
        j->any_cancelled |= ev->type == ENGINE_EV_DONE && ev->finish == ENGINE_FINISH_CANCELLED;
    } else if (ev->type == ENGINE_EV_PROMPT)
        s->seen--; /* prompt logprobs come before the first token */
    j->done_ok |= !multi && ev->type == ENGINE_EV_DONE &&
                  (ev->finish == ENGINE_FINISH_EOS || ev->finish == ENGINE_FINISH_LENGTH);
    if (!multi && ev->type == ENGINE_EV_DELTA)
        genhist_acc_token(&j->gh, ev->token, ev->text, ev->len);
    else if (!multi && sub_end) /* kept when the ids are exactly the text: an end-of-generation
                                 * id (dropped) or the length limit, not a stop string or a
                                 * cancellation */
        genhist_acc_end(&j->gh, sv->tk, ev->text, ev->len,
                        ev->type == ENGINE_EV_DONE && (ev->finish == ENGINE_FINISH_EOS ||
                                                       ev->finish == ENGINE_FINISH_LENGTH),
                        ev->finish == ENGINE_FINISH_EOS);
    if (ev->type == ENGINE_EV_DELTA && s->idx == 0) {
        if (!j->n_gen++)
            hist_add(&sv->met.ttft, now - j->t_start);
        else
            hist_add(&sv->met.tpot, now - j->t_last);
        j->t_last = now;
    }
    if (lead && multi && s->idx % (j->g.share_n > 1 ? j->g.share_n : 1) == 0)
        job_release_group(j, s->idx);
    int job_end_now = sub_end && j->n_live == 0 && j->n_pending == 0;
    if (!j->ended && !j->gone && !(j->failed && !j->g.stream)) {
        sbuf_clear(&j->buf);
        int rc = multi ? j->g.ops->event_at(j->g.enc, s->idx, ev, &j->buf)
                       : j->g.ops->event(j->g.enc, ev, &j->buf);
        if (j->g.stream) {
            int close = job_end_now || (multi && ev->type == ENGINE_EV_ERROR);
            if (rc && !sub_end) {
                j->g.ops->error_frame(&j->buf, "out of memory while encoding the response");
                job_cancel_all(j);
                close = 1; /* for this stream; the job itself ends at the engine's events */
            }
            if (multi && ev->type == ENGINE_EV_ERROR)
                job_cancel_all(j);
            if (j->buf.len && http_stream_write(j->req, j->buf.p, j->buf.len) < 0)
                j->gone = 1;
            if (close) {
                http_stream_end(j->req);
                j->ended = 1;
            }
        } else if (sub_end && (ev->type == ENGINE_EV_ERROR || rc) && multi) {
            j->any_error = 1;
            job_cancel_all(j);
        } else if (job_end_now) {
            if (j->any_error || rc) {
                char m[600];
                snprintf(m, sizeof m, "generation failed: %s",
                         ev->error ? ev->error : "out of memory");
                job_fail(j, j->err_status == 400 && !rc ? 400 : 500, m);
            } else if (j->any_cancelled)
                job_fail(j, 503, "the request was cancelled (server shutting down)");
            else
                http_reply(j->req, 200, "application/json", j->buf.p, j->buf.len);
            j->ended = 1;
        }
    }
    if (sub_end) {
        sv->met.prompt_tokens += ev->n_prompt;
        sv->met.gen_tokens += ev->n_gen;
        sv->met.cached_tokens += ev->n_cached;
        sv->met.cache_hits += ev->n_cached > 0;
        if (ev->type == ENGINE_EV_ERROR && j->g.stream) { /* (a reply's status: job_fail) */
            if (ev->error_status == 400)
                sv->met.status_4xx++;
            else
                sv->met.status_5xx++;
        }
        if (ev->type == ENGINE_EV_DONE && ev->finish == ENGINE_FINISH_CANCELLED)
            sv->met.cancelled++;
    }
    if (job_end_now)
        job_end(j, now);
    free(msg->text);
    free(msg->error);
    free(msg);
}

/* Every choice ended: the last words of a failed body, the metrics, the job freed. */
static void job_end(struct job *j, double now)
{
    struct serve *sv = j->sv;
    if (!j->ended && !j->gone && !j->g.stream) {
        if (j->failed)
            job_fail(j, j->fail_status ? j->fail_status : 500,
                     j->fail_msg ? j->fail_msg : "generation failed");
        else
            job_fail(j, 500, "generation failed");
    }
    j->ended = 1;
    if (j->g.after && j->done_ok && !j->failed && !j->any_error && !j->any_cancelled)
        j->g.after(sv, j->g.ctx, j->g.enc, &j->ls);
    hist_add(&sv->met.e2e, now - j->t_start);
    if (j->g.stream)
        sv->met.streams_open--;
    job_free(j);
}

/* Engine thread: copy the event and hand it to the loop. */
static void job_cb(void *ud, const struct engine_event *ev)
{
    struct job_sub *s = ud;
    struct evmsg *msg = calloc(1, sizeof *msg);
    if (!msg) {
        log_error("out of memory: an event of a request was lost");
        return;
    }
    msg->s = s;
    msg->ev = *ev;
    msg->lp.id = -1;
    if (ev->lp)
        msg->lp = *ev->lp;
    if (ev->len && !(msg->text = strndup(ev->text, ev->len)))
        msg->ev.len = 0;
    if (ev->error)
        msg->error = strdup(ev->error);
    if (http_post(s->j->sv->http, job_deliver, msg)) {
        /* the loop is gone (shutdown): nothing can be delivered any more */
        free(msg->text);
        free(msg->error);
        free(msg);
    }
}

void serve_generate(struct serve *sv, struct http_req *r, struct serve_gen *g, int endpoint)
{
    struct api_error err = {0};
    if (endpoint >= 0 && endpoint < EP_COUNT)
        sv->met.requests[endpoint]++;
    if (sv->shutting_down) {
        api_fail(&err, 503, NULL, "the server is shutting down");
        serve_reply_error(sv, r, &err, g->ops->error_body);
        gen_release(g);
        return;
    }
    struct job *j = calloc(1, sizeof *j);
    int n = g->n_q > 1 && g->qs && g->ops->event_at ? g->n_q : 1;
    if (j && n > 1 && !(j->subs = calloc((size_t)n, sizeof *j->subs))) {
        free(j);
        j = NULL;
    }
    if (!j) {
        api_fail(&err, 500, NULL, "out of memory");
        serve_reply_error(sv, r, &err, g->ops->error_body);
        gen_release(g);
        return;
    }
    j->sv = sv;
    j->g = *g;
    j->g.n_q = n;
    if (n == 1)
        j->subs = &j->sub1;
    j->n_sub = n;
    int sn = n > 1 && g->share_n > 1 ? g->share_n : 1;
    for (int i = 0; i < n; i++) {
        j->subs[i] = (struct job_sub){.j = j, .idx = i};
        j->n_pending += i % sn != 0;
    }
    j->t_start = clock_now_s();
    /* link before submit: events may arrive on the loop right after it */
    j->req = r;
    http_req_ref(r);
    j->next = sv->jobs;
    if (sv->jobs)
        sv->jobs->prev = j;
    sv->jobs = j;
    sv->met.active_jobs++;
    if (n == 1) /* the exact history's anchor: the end of the prompt it follows */
        genhist_acc_lead(&j->gh, sv->tk, j->g.q.ids, j->g.q.n_ids);
    /* the request's adapters (serve_lora.c), held for every choice's submission (the engine
     * takes its own references) */
    if (serve_lora_pick(sv, r, &j->ls, &err) || sub_submit(&j->subs[0], &err)) {
        serve_reply_error(sv, r, &err, g->ops->error_body);
        j->ended = 1;
        job_free(j);
        return;
    }
    for (int i = sn; i < n && !j->failed; i += sn) /* the other groups' leads */
        if (sub_submit(&j->subs[i], &err)) {
            j->failed = 1; /* the running ones are cancelled; the reply says why at the end */
            j->fail_status = err.status;
            j->fail_msg = strdup(err.message);
            job_cancel_all(j);
        }
    http_req_on_close(r, job_on_close, j);
    if (j->g.stream) {
        sv->met.streams_open++;
        http_stream_begin(r, 200, "text/event-stream");
        sbuf_clear(&j->buf);
        if (j->g.ops->begin && j->g.ops->begin(j->g.enc, &j->buf) == 0 && j->buf.len)
            http_stream_write(r, j->buf.p, j->buf.len);
        if (j->failed) {
            sbuf_clear(&j->buf);
            j->g.ops->error_frame(&j->buf, j->fail_msg ? j->fail_msg : "out of memory");
            http_stream_write(r, j->buf.p, j->buf.len);
            http_stream_end(r);
            j->ended = 1;
        }
    }
}

void serve_shutdown(void *ud)
{
    struct serve *sv = ud;
    if (sv->cancelled_all)
        return;
    sv->shutting_down = sv->cancelled_all = 1;
    log_info("shutting down: cancelling %ld in-flight request(s)", sv->met.active_jobs);
    for (struct job *j = sv->jobs; j; j = j->next) {
        if (!j->ended && !j->gone && j->g.stream) {
            sbuf_clear(&j->buf);
            j->g.ops->error_frame(&j->buf, "the server is shutting down");
            http_stream_write(j->req, j->buf.p, j->buf.len);
            http_stream_end(j->req);
            j->ended = 1;
        }
        job_cancel_all(j);
    }
    if (!sv->jobs)
        http_server_stop(sv->http);
}

int serve_check_context(struct serve *sv, int n_prompt, int requested, int dflt,
                        int *max_tokens, struct api_error *err)
{
    int n_ctx = engine_config_of(sv->eng)->n_ctx;
    /* the max safe context (memory plan): a prompt that leaves no room, or an explicit
     * max_tokens that does not fit beside it, is refused; a default max_tokens is capped */
    if (n_prompt >= n_ctx || (requested > 0 && n_prompt + requested > n_ctx)) {
        int m = requested > 0 ? requested : 1;
        api_fail(err, 400, NULL,
                 "request needs %d tokens of context (prompt %d + max_tokens %d) but the "
                 "memory budget caps safe context at %d — shorten the prompt or lower "
                 "max_tokens",
                 n_prompt + m, n_prompt, m, n_ctx);
        err->type = "memory_admission";
        err->code = "context_over_budget";
        return -1;
    }
    size_t kvb = engine_config_of(sv->eng)->kv_budget_bytes;
    int mt0 = requested > 0 ? requested : dflt;
    if (mt0 > n_ctx - n_prompt)
        mt0 = n_ctx - n_prompt;
    if (kvb && (size_t)(n_prompt + mt0) * engine_kv_bytes_per_token(sv->eng) > kvb) {
        api_fail(err, 400, NULL,
                 "request needs %zu bytes of KV (prompt %d + max_tokens %d) but --kv-budget "
                 "caps the KV of running requests at %zu bytes — shorten the prompt or lower "
                 "max_tokens",
                 (size_t)(n_prompt + mt0) * engine_kv_bytes_per_token(sv->eng), n_prompt, mt0,
                 kvb);
        err->type = "memory_admission";
        err->code = "kv_over_budget";
        return -1;
    }
    int mt = requested > 0 ? requested : dflt;
    *max_tokens = mt > n_ctx - n_prompt ? n_ctx - n_prompt : mt;
    return 0;
}

struct engine_req serve_engine_req(const struct oai_req *rq, const struct api_prompt *pr,
                                   const struct api_structured *st, int max_tokens)
{
    return (struct engine_req){.ids = pr->ids,
                               .n_ids = pr->n,
                               .sp = rq->sp,
                               .max_tokens = max_tokens,
                               .stops = (const char *const *)rq->stops,
                               .n_stops = rq->n_stops,
                               .n_stops_outside = rq->n_call_stops,
                               .think_open = pr->think_open,
                               .think_close = pr->think_close,
                               .think_inside = pr->start_in_reasoning,
                               .grammar = st->grammar,
                               .grammar_prime = st->prime,
                               .grammar_trigger = st->trigger,
                               .grammar_after = st->trigger_after,
                               .grammar_open = st->open};
}

int serve_structured(const struct serve *sv, struct http_req *r,
                     int (*body_format)(const json_t *body, struct api_structured *out,
                                        struct api_error *err),
                     const struct oai_req *rq, const struct api_prompt *pr,
                     struct api_structured *st, struct api_error *err)
{
    size_t blen;
    const char *body = http_req_body(r, &blen);
    json_t *raw = json_loadb(body, blen, 0, NULL);
    int rc = body_format(raw, st, err);
    json_decref(raw);
    if (!rc)
        rc = api_structured_tools(sv->am.tc_template_family, rq->tools, rq->tool_choice,
                                  rq->tool_name, pr->forced, st, err);
    if (!rc)
        rc = api_structured_after_reasoning(st, pr->start_in_reasoning, pr->thinking,
                                            sv->am.think_open, sv->am.think_close, err);
    return rc;
}
