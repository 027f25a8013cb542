/* oai_out.c — see oai_out.h. */
#include "api/oai_out.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "api/openai/logprobs.h"
#include "api/reasoning.h"
#include "api/replay.h"
#include "util/jsonfmt.h"

struct oai_out {
    int kind, stream, finished;
    char id[64];
    long created;
    const struct api_model *m;
    const char *lane;
    struct api_turn turn;           /* chat: reasoning / content / tool-call split */
    int turn_on;
    struct sbuf content, reasoning; /* non-streaming accumulation */
    json_t *lp;                     /* logprobs entries not yet sent (chat shape), or NULL */
    int legacy;                     /* completions: the legacy logprobs block in leg */
    struct lp_legacy leg;
    int include_usage;              /* stream_options.include_usage */
    int single_call;                /* parallel_tool_calls: false */
    char *echo;                     /* completions echo: the prompt's text (owned) or NULL */
    size_t echo_len;
    struct sbuf *cur;               /* streaming: where emit() writes */
    int err;
    int start_in_reasoning;
    const char *forced; /* forced tool-call prefix (the api_prompt's; outlives this) */
    int index;          /* the choice's index (a request with several choices) */
    int grouped;        /* one choice of several (oai_out_group): no usage, no [DONE] */
    json_t *choice;     /* grouped, non-streaming: the finished choice */
    int echo_lp;        /* echo with prompt logprobs: ENGINE_EV_PROMPT events fill leg */
    int echo_pending;   /* streaming echo_lp: the echo chunk waits for the prompt's logprobs */
    int echo_done;      /* echo_lp: the prompt's tokens are all in */
    double lp_sum;      /* the generated tokens' logprobs, when the engine sent them (best_of) */
    int lp_n;
};

/* ---- helpers ------------------------------------------------------------------------ */

static size_t utf8_valid_prefix(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!k || i + k > n)
            return i;
        for (size_t j = 1; j < k; j++)
            if ((s[i + j] & 0xC0) != 0x80)
                return i;
        if ((k == 2 && c < 0xC2) || (k == 3 && c == 0xE0 && s[i + 1] < 0xA0) ||
            (k == 3 && c == 0xED && s[i + 1] >= 0xA0) || (k == 4 && c == 0xF0 && s[i + 1] < 0x90) ||
            (k == 4 && (c > 0xF4 || (c == 0xF4 && s[i + 1] >= 0x90))))
            return i;
        i += k;
    }
    return n;
}

json_t *api_json_text(const char *s, size_t n)
{
    size_t ok = utf8_valid_prefix((const unsigned char *)s, n);
    if (ok == n)
        return json_stringn(s, n);
    struct sbuf b = {0};
    size_t i = 0;
    while (i < n) {
        size_t k = utf8_valid_prefix((const unsigned char *)s + i, n - i);
        sbuf_append(&b, s + i, k);
        i += k;
        if (i < n) {
            sbuf_append(&b, "\xEF\xBF\xBD", 3);
            i++;
        }
    }
    json_t *j = json_stringn(b.p ? b.p : "", b.len);
    sbuf_free(&b);
    return j;
}

void api_new_id(char *buf, size_t cap, const char *prefix)
{
    static _Atomic uint64_t ctr;
    uint8_t r[12];
    if (getrandom(r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
        uint64_t x = (uint64_t)time(NULL) ^ (atomic_fetch_add(&ctr, 1) * 0x9e3779b97f4a7c15ull);
        for (size_t i = 0; i < sizeof r; i++, x = x * 6364136223846793005ull + 1442695040888963407ull)
            r[i] = (uint8_t)(x >> 56);
    }
    int n = snprintf(buf, cap, "%s", prefix);
    for (size_t i = 0; i < sizeof r && n + 2 < (int)cap; i++)
        n += snprintf(buf + n, cap - (size_t)n, "%02x", r[i]);
}

static int frame(struct sbuf *out, json_t *obj)
{
    if (!obj)
        return CERR_NOMEM;
    char *s = json_dumps_short(obj, JSON_COMPACT);
    json_decref(obj);
    if (!s)
        return CERR_NOMEM;
    int rc = sbuf_puts(out, "data: ") || sbuf_puts(out, s) || sbuf_puts(out, "\n\n");
    free(s);
    return rc ? CERR_NOMEM : 0;
}

static json_t *chunk_base(const struct oai_out *o)
{
    return json_pack("{s:s, s:s, s:I, s:s}", "id", o->id, "object",
                     o->kind == OAI_CHAT ? "chat.completion.chunk" : "text_completion",
                     "created", (json_int_t)o->created, "model", o->m->id);
}

/* The logprobs of the tokens not yet sent (a stream: those since the last chunk), in the
 * request's shape, or NULL when there are none. */
static json_t *pending_logprobs(struct oai_out *o)
{
    if (o->legacy)
        return lp_legacy_empty(&o->leg) ? NULL : lp_legacy_take(&o->leg);
    if (!o->lp || !json_array_size(o->lp))
        return NULL;
    json_t *b = json_pack("{s:O, s:n}", "content", o->lp, "refusal");
    json_decref(o->lp);
    o->lp = json_array();
    return b;
}

/* A streaming chunk: chat {delta} or completion {text}. */
static int emit_chunk(struct oai_out *o, json_t *delta_or_text, const char *finish, json_t *usage)
{
    json_t *c = chunk_base(o), *ch = json_object();
    if (!c || !ch || !delta_or_text) {
        json_decref(c);
        json_decref(ch);
        json_decref(delta_or_text);
        json_decref(usage);
        return CERR_NOMEM;
    }
    json_object_set_new(ch, "index", json_integer(o->index));
    json_t *lp = pending_logprobs(o);
    if (o->kind == OAI_CHAT) {
        json_object_set_new(ch, "delta", delta_or_text);
        if (lp)
            json_object_set_new(ch, "logprobs", lp);
    } else {
        json_object_set_new(ch, "text", delta_or_text);
        json_object_set_new(ch, "logprobs", lp ? lp : json_null());
    }
    json_object_set_new(ch, "finish_reason", finish ? json_string(finish) : json_null());
    json_object_set_new(c, "choices", json_pack("[o]", ch));
    if (usage)
        json_object_set_new(c, "usage", usage);
    else if (o->include_usage)
        json_object_set_new(c, "usage", json_null());
    return frame(o->cur, c);
}

static void emit_text(int kind, const char *t, size_t n, void *ud)
{
    struct oai_out *o = ud;
    if (!o->stream || o->turn.tc) { /* a stream with tools keeps it too (oai_out_rerendered) */
        if (sbuf_append(kind == RSN_REASONING ? &o->reasoning : &o->content, t, n))
            o->err = CERR_NOMEM;
        if (!o->stream)
            return;
    }
    json_t *s = api_json_text(t, n);
    json_t *d;
    if (o->kind != OAI_CHAT)
        d = s;
    else if (kind == RSN_REASONING)
        d = json_pack("{s:O, s:o}", "reasoning", s, "reasoning_content", s);
    else
        d = json_pack("{s:o}", "content", s);
    if (emit_chunk(o, d, NULL, NULL))
        o->err = CERR_NOMEM;
}

/* Streaming tool-call deltas: the first names the call, the next ones carry arguments. */
static void emit_call(struct oai_out *o, const struct tc_event *ev)
{
    if (!o->stream || ev->kind == TC_EV_CALL_END)
        return;
    json_t *c;
    if (ev->kind == TC_EV_CALL_BEGIN)
        c = json_pack("{s:i, s:s, s:s, s:{s:s, s:s}}", "index", ev->index, "id", ev->id, "type",
                      "function", "function", "name", ev->name, "arguments", "");
    else
        c = json_pack("{s:i, s:{s:o}}", "index", ev->index, "function", "arguments",
                      api_json_text(ev->text, ev->n));
    if (emit_chunk(o, c ? json_pack("{s:[o]}", "tool_calls", c) : NULL, NULL, NULL))
        o->err = CERR_NOMEM;
}

static void on_turn(int kind, const struct tc_event *tc, const char *t, size_t n, void *ud)
{
    struct oai_out *o = ud;
    if (kind == TURN_REASONING || kind == TURN_CONTENT) {
        if (n)
            emit_text(kind == TURN_REASONING ? RSN_REASONING : RSN_CONTENT, t, n, o);
    } else
        emit_call(o, tc);
}

static void push_text(struct oai_out *o, const char *t, size_t n)
{
    if (!n)
        return;
    if (o->turn_on) {
        if (api_turn_push(&o->turn, t, n))
            o->err = CERR_NOMEM;
    } else
        emit_text(RSN_CONTENT, t, n, o);
}

static void add_logprob(struct oai_out *o, const struct sampler_logprob *lp)
{
    if (o->legacy) {
        if (lp_legacy_add(&o->leg, o->m->tk, lp))
            o->err = CERR_NOMEM;
        return;
    }
    json_t *e = lp_chat_entry(o->m->tk, lp);
    if (!e || json_array_append_new(o->lp, e))
        o->err = CERR_NOMEM;
}

static const char *finish_reason(const struct oai_out *o, int f)
{
    if (o->turn_on && api_turn_calls(&o->turn))
        return "tool_calls";
    return f == ENGINE_FINISH_LENGTH ? "length" : "stop";
}

static json_t *usage(const struct oai_out *o, const struct engine_event *ev)
{
    /* lane: what the request did — "+spec" when the target scored drafts for it */
    char lane[48];
    snprintf(lane, sizeof lane, "%s%s", o->lane, ev->spec_drafted > 0 ? "+spec" : "");
    json_t *u = json_pack("{s:i, s:i, s:i, s:{s:i}, s:s}", "prompt_tokens", ev->n_prompt,
                          "completion_tokens", ev->n_gen, "total_tokens",
                          ev->n_prompt + ev->n_gen, "prompt_tokens_details", "cached_tokens",
                          ev->n_cached, "lane", lane);
    if (u && ev->spec_on)
        json_object_set_new(u, "speculation",
                            json_pack("{s:i, s:i, s:i}", "drafted", ev->spec_drafted, "accepted",
                                      ev->spec_accepted, "target_calls", ev->spec_calls));
    return u;
}

/* ---- public ------------------------------------------------------------------------- */

int oai_out_new(struct oai_out **out, const struct api_model *m, const struct oai_req *r,
                const struct api_prompt *p, const char *lane, struct cerr *e)
{
    *out = NULL;
    struct oai_out *o = calloc(1, sizeof *o);
    if (!o)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    o->kind = r->kind;
    o->stream = r->stream;
    o->m = m;
    o->lane = lane;
    o->created = (long)time(NULL);
    api_new_id(o->id, sizeof o->id, r->kind == OAI_CHAT ? "chatcmpl-" : "cmpl-");
    o->start_in_reasoning = p->start_in_reasoning;
    o->forced = p->forced;
    if (r->kind == OAI_CHAT) {
        int rc = api_turn_init(&o->turn, m, p->start_in_reasoning, TC_NONE, NULL, on_turn, o, e);
        if (rc) {
            free(o);
            return rc;
        }
        o->turn_on = 1;
    }
    o->include_usage = r->stream && r->include_usage;
    o->single_call = r->single_call;
    int rc = 0;
    if (r->legacy_logprobs) {
        o->legacy = 1;
        rc = lp_legacy_init(&o->leg, r->sp.top_logprobs, 0);
        o->echo_lp = r->kind == OAI_COMPLETION && r->echo && p->n > 0;
        o->echo_pending = o->echo_lp && r->stream;
        if (!rc && o->echo_lp) /* the prompt's first token: nothing scores it */
            rc = lp_legacy_add_first(&o->leg, m->tk, p->ids[0]);
    } else if (r->sp.top_logprobs >= 0 && !(o->lp = json_array()))
        rc = CERR_NOMEM;
    if (!rc && r->kind == OAI_COMPLETION && r->echo) {
        struct cerr de = {0};
        if (r->prompt) {
            o->echo = malloc(r->prompt_len + 1);
            if (o->echo) {
                memcpy(o->echo, r->prompt, r->prompt_len);
                o->echo[r->prompt_len] = 0;
                o->echo_len = r->prompt_len;
            }
        } else if (tok_decode(m->tk, p->ids, p->n, TOK_SKIP_SPECIAL, &o->echo, &o->echo_len, &de))
            o->echo = NULL;
        if (!o->echo)
            rc = CERR_NOMEM;
    }
    if (rc) {
        oai_out_free(o);
        return cerr_set(e, CERR_NOMEM, "out of memory");
    }
    *out = o;
    return 0;
}

void oai_out_free(struct oai_out *o)
{
    if (!o)
        return;
    if (o->turn_on)
        api_turn_deinit(&o->turn);
    sbuf_free(&o->content);
    sbuf_free(&o->reasoning);
    json_decref(o->lp);
    if (o->legacy)
        lp_legacy_free(&o->leg);
    free(o->echo);
    json_decref(o->choice);
    free(o);
}

void oai_out_group(struct oai_out *o, int index, const char *id, long created)
{
    o->index = index;
    o->grouped = 1;
    snprintf(o->id, sizeof o->id, "%s", id);
    o->created = created;
}

const char *oai_out_id(const struct oai_out *o) { return o->id; }

json_t *oai_out_choice(const struct oai_out *o) { return o->choice; }

double oai_out_mean_logprob(const struct oai_out *o)
{
    return o->lp_n ? o->lp_sum / o->lp_n : -1e30;
}

int oai_out_finished(const struct oai_out *o) { return o->finished; }

json_t *oai_out_rerendered(const struct oai_out *o)
{
    if (!o->finished || o->err || o->kind != OAI_CHAT || !o->turn_on || o->reasoning.len)
        return NULL;
    return api_turn_rerendered(&o->turn, o->content.p, o->content.len);
}

json_t *api_turn_rerendered(const struct api_turn *t, const char *content, size_t n)
{
    int nc = t->tc ? api_turn_calls(t) : 0, native = 1;
    for (int i = 0; i < nc; i++)
        native &= tc_call_native(t->tc, i);
    if (!nc || native)
        return NULL;
    json_t *calls = json_array();
    for (int i = 0; calls && i < nc; i++) {
        const char *a = tc_call_args(t->tc, i);
        json_t *args = json_loads(a ? a : "", JSON_DECODE_ANY, NULL); /* as oai_req does */
        json_t *c = json_pack("{s:s, s:s, s:{s:s, s:o}}", "id", tc_call_id(t->tc, i), "type",
                              "function", "function", "name", tc_call_name(t->tc, i),
                              "arguments", args ? args : json_string(a ? a : ""));
        if (!c || json_array_append_new(calls, c)) {
            json_decref(calls);
            return NULL;
        }
    }
    json_t *m = calls ? json_pack("{s:s, s:o, s:o}", "role", "assistant", "content",
                                  api_json_text(content ? content : "", content ? n : 0),
                                  "tool_calls", calls)
                      : NULL;
    return m;
}

int oai_out_tools(struct oai_out *o, int family, const json_t *tools, struct cerr *e)
{
    if (o->kind != OAI_CHAT || !tools || !json_array_size(tools) || family == TC_NONE)
        return 0;
    struct api_turn t;
    int rc = api_turn_init(&t, o->m, o->start_in_reasoning, family, tools, on_turn, o, e);
    if (rc)
        return rc;
    if (o->stream)
        api_turn_stream_args(&t);
    if (o->forced) /* tool_choice forced a call: the markup the prompt already opened */
        api_turn_prime(&t, o->forced);
    if (o->single_call)
        api_turn_max_calls(&t, 1);
    api_turn_deinit(&o->turn);
    o->turn = t;
    return 0;
}

/* The message's tool_calls array (non-streaming), or NULL when there are none. */
static json_t *tool_calls_json(const struct oai_out *o)
{
    int n = o->turn_on ? api_turn_calls(&o->turn) : 0;
    if (!n)
        return NULL;
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++)
        json_array_append_new(
            a, json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", tc_call_id(o->turn.tc, i), "type",
                         "function", "function", "name", tc_call_name(o->turn.tc, i),
                         "arguments", tc_call_args(o->turn.tc, i)));
    return a;
}

int oai_out_begin(struct oai_out *o, struct sbuf *sse)
{
    o->cur = sse;
    if (o->kind != OAI_CHAT) /* completions: the echoed prompt first (with its logprobs:
                                at the first token) */
        return o->echo && !o->echo_pending ? emit_chunk(o, api_json_text(o->echo, o->echo_len), NULL, NULL) : 0;
    return emit_chunk(o, json_pack("{s:s, s:s, s:n}", "role", "assistant", "content", "",
                                   "refusal"),
                      NULL, NULL);
}

static int done_body(struct oai_out *o, const struct engine_event *ev, struct sbuf *out)
{
    json_t *lp = pending_logprobs(o);
    json_t *ch;
    if (o->kind == OAI_CHAT) {
        json_t *calls = tool_calls_json(o);
        json_t *msg = json_pack("{s:s, s:o, s:n}", "role", "assistant", "content",
                                calls && !o->content.len
                                    ? json_null()
                                    : api_json_text(o->content.p ? o->content.p : "",
                                                    o->content.len),
                                "refusal");
        if (msg && calls)
            json_object_set_new(msg, "tool_calls", calls);
        else
            json_decref(calls);
        if (msg && o->reasoning.len) {
            json_t *rs = api_json_text(o->reasoning.p, o->reasoning.len);
            json_object_set(msg, "reasoning", rs);
            json_object_set_new(msg, "reasoning_content", rs);
        }
        ch = json_pack("{s:i, s:o, s:s}", "index", o->index, "message", msg, "finish_reason",
                       finish_reason(o, ev->finish));
    } else {
        struct sbuf t = {0}; /* echo: the prompt, then the completion */
        if ((o->echo && sbuf_append(&t, o->echo, o->echo_len)) ||
            (o->content.len && sbuf_append(&t, o->content.p, o->content.len))) {
            sbuf_free(&t);
            json_decref(lp);
            return CERR_NOMEM;
        }
        ch = json_pack("{s:i, s:o, s:s}", "index", o->index, "text", api_json_text(t.p ? t.p : "", t.len),
                       "finish_reason", finish_reason(o, ev->finish));
        sbuf_free(&t);
    }
    if (ch && lp)
        json_object_set_new(ch, "logprobs", lp);
    else if (ch)
        json_object_set_new(ch, "logprobs", json_null());
    if (o->grouped) { /* the group writes the body */
        o->choice = ch;
        return ch ? 0 : CERR_NOMEM;
    }
    json_t *b = json_pack("{s:s, s:s, s:I, s:s, s:[o], s:o}", "id", o->id, "object",
                          o->kind == OAI_CHAT ? "chat.completion" : "text_completion", "created",
                          (json_int_t)o->created, "model", o->m->id, "choices", ch, "usage",
                          usage(o, ev));
    if (!b)
        return CERR_NOMEM;
    char *s = json_dumps_short(b, JSON_COMPACT);
    json_decref(b);
    int rc = s ? sbuf_puts(out, s) : CERR_NOMEM;
    free(s);
    return rc;
}

int oai_out_event(struct oai_out *o, const struct engine_event *ev, struct sbuf *out)
{
    if (o->finished)
        return 0;
    o->cur = out;
    o->err = 0;
    if (ev->type == ENGINE_EV_ERROR) {
        o->finished = 1;
        return o->stream ? oai_error_frame(out, ev->error ? ev->error : "generation failed") : 0;
    }
    if (ev->type == ENGINE_EV_PROMPT) {
        if (o->echo_lp && ev->lp && lp_legacy_add(&o->leg, o->m->tk, ev->lp))
            return CERR_NOMEM;
        return 0;
    }
    if (o->echo_lp && !o->echo_done) { /* the completion's offsets follow the echoed text */
        o->echo_done = 1;
        long c = 0;
        for (size_t i = 0; i < o->echo_len; i++)
            c += ((unsigned char)o->echo[i] & 0xC0) != 0x80;
        o->leg.offset = c;
    }
    if (o->echo_pending) { /* the echo chunk, with the prompt's logprobs */
        o->echo_pending = 0;
        if (emit_chunk(o, api_json_text(o->echo, o->echo_len), NULL, NULL))
            return CERR_NOMEM;
    }
    if (ev->type == ENGINE_EV_DELTA && ev->lp) {
        o->lp_sum += ev->lp->logprob;
        o->lp_n++;
    }
    if (ev->type == ENGINE_EV_DELTA && (o->lp || o->legacy) && ev->lp)
        add_logprob(o, ev->lp);
    push_text(o, ev->text, ev->len);
    if (ev->type != ENGINE_EV_DONE)
        return o->err;
    o->finished = 1;
    if (o->turn_on && api_turn_finish(&o->turn))
        o->err = CERR_NOMEM;
    if (o->err)
        return o->err;
    if (!o->stream)
        return done_body(o, ev, out);
    json_t *last = o->kind == OAI_CHAT ? json_object() : json_string("");
    if (o->grouped) /* the group sends the usage and [DONE] after the last choice */
        return emit_chunk(o, last, finish_reason(o, ev->finish), NULL);
    int rc = emit_chunk(o, last, finish_reason(o, ev->finish), o->include_usage ? NULL : usage(o, ev));
    if (!rc && o->include_usage) /* stream_options.include_usage: usage alone, choices [] */
        rc = frame(out, json_pack("{s:s, s:s, s:I, s:s, s:[], s:o}", "id", o->id, "object",
                                  o->kind == OAI_CHAT ? "chat.completion.chunk" : "text_completion",
                                  "created", (json_int_t)o->created, "model", o->m->id, "choices",
                                  "usage", usage(o, ev)));
    return rc ? rc : sbuf_puts(out, "data: [DONE]\n\n");
}

char *oai_error_body(const struct api_error *err)
{
    json_t *j = json_pack("{s:{s:s, s:s, s:o, s:o}}", "error", "message", err->message, "type",
                          err->type ? err->type : "invalid_request_error", "param",
                          err->param ? json_string(err->param) : json_null(), "code",
                          err->code ? json_string(err->code) : json_null());
    char *s = j ? json_dumps_short(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return s;
}

int oai_error_frame(struct sbuf *out, const char *message)
{
    json_t *j = json_pack("{s:{s:o, s:s}}", "error", "message",
                          api_json_text(message, strlen(message)), "type", "server_error");
    return frame(out, j);
}

/* ---- api_turn ------------------------------------------------------------------------ */

static int all_space(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\n' && s[i] != '\t' && s[i] != '\r')
            return 0;
    return 1;
}

/* With tools on, whitespace-only content is held until real content follows; whitespace
 * around calls (between, after) is dropped. */
static void turn_tc(const struct tc_event *ev, void *ud)
{
    struct api_turn *t = ud;
    static const int K[] = {[TC_EV_CONTENT] = TURN_CONTENT, [TC_EV_CALL_BEGIN] = TURN_CALL_BEGIN,
                            [TC_EV_CALL_ARGS_DELTA] = TURN_CALL_DELTA,
                            [TC_EV_CALL_END] = TURN_CALL_END};
    if (ev->kind != TC_EV_CONTENT && t->max_calls && ev->index >= t->max_calls)
        return; /* a call past the cap: not parallel */
    if (ev->kind == TC_EV_CALL_END)
        t->rcall = 0; /* a call inside the think block ended: reasoning again */
    if (ev->kind == TC_EV_CONTENT && t->in_rsn) { /* text of the think block around a call */
        t->n_reasoning_bytes += ev->n;
        if (ev->n)
            t->cb(TURN_REASONING, NULL, ev->text, ev->n, t->ud);
        return;
    }
    if (ev->kind == TC_EV_CONTENT) {
        if (all_space(ev->text, ev->n)) {
            if (sbuf_append(&t->ws, ev->text, ev->n))
                t->err = CERR_NOMEM;
            return;
        }
        if (t->ws.len) {
            t->cb(TURN_CONTENT, NULL, t->ws.p, t->ws.len, t->ud);
            sbuf_clear(&t->ws);
        }
    } else if (ev->kind == TC_EV_CALL_BEGIN)
        sbuf_clear(&t->ws);
    t->cb(K[ev->kind], ev->kind == TC_EV_CONTENT ? NULL : ev, ev->text, ev->n, t->ud);
}

/* Releases the held-back reasoning text. */
static void turn_rsn_release(struct api_turn *t, size_t n)
{
    if (!n)
        return;
    t->n_reasoning_bytes += n;
    t->cb(TURN_REASONING, NULL, t->rbuf.p, n, t->ud);
    memmove(t->rbuf.p, t->rbuf.p + n, t->rbuf.len - n);
    t->rbuf.len -= n;
}

/* Feeds the call parser from the think block (its plain text stays reasoning). */
static void turn_rsn_call(struct api_turn *t, const char *s, size_t n)
{
    t->in_rsn = 1;
    if (tc_push(t->tc, s, n, turn_tc, t))
        t->err = CERR_NOMEM;
    t->in_rsn = 0;
}

/* Reasoning text with tools on: scanned for a call's opening markup. */
static void turn_rsn_scan(struct api_turn *t, const char *s, size_t n)
{
    if (t->rcall) {
        turn_rsn_call(t, s, n);
        return;
    }
    if (sbuf_append(&t->rbuf, s, n)) {
        t->err = CERR_NOMEM;
        return;
    }
    size_t ml = strlen(t->rmark);
    const char *hit = memmem(t->rbuf.p, t->rbuf.len, t->rmark, ml);
    if (hit) {
        turn_rsn_release(t, (size_t)(hit - t->rbuf.p));
        t->rcall = 1;
        struct sbuf rest = t->rbuf; /* the parser takes it from the opening on */
        t->rbuf = (struct sbuf){0};
        turn_rsn_call(t, rest.p, rest.len);
        sbuf_free(&rest);
        return;
    }
    size_t keep = 0; /* the longest end that could begin the markup */
    for (size_t k = ml - 1; k > 0 && !keep; k--)
        if (k <= t->rbuf.len && !memcmp(t->rbuf.p + t->rbuf.len - k, t->rmark, k))
            keep = k;
    turn_rsn_release(t, t->rbuf.len - keep);
}

static void turn_rsn(int kind, const char *s, size_t n, void *ud)
{
    struct api_turn *t = ud;
    if (kind == RSN_REASONING && t->tc && t->rmark) {
        turn_rsn_scan(t, s, n);
        return;
    }
    if (kind != RSN_REASONING && t->rbuf.len) /* the think block ended */
        turn_rsn_release(t, t->rbuf.len);
    if (kind != RSN_REASONING)
        t->rcall = 0;
    if (kind == RSN_REASONING) {
        t->n_reasoning_bytes += n;
        t->cb(TURN_REASONING, NULL, s, n, t->ud);
    } else if (t->tc) {
        if (tc_push(t->tc, s, n, turn_tc, t))
            t->err = CERR_NOMEM;
    } else
        t->cb(TURN_CONTENT, NULL, s, n, t->ud);
}

int api_turn_init(struct api_turn *t, const struct api_model *m, int start_in_reasoning,
                  int family, const json_t *tools, turn_fn cb, void *ud, struct cerr *e)
{
    memset(t, 0, sizeof *t);
    t->cb = cb;
    t->ud = ud;
    if (m->think_open && rsn_new(&t->rsn, m->think_open, m->think_close, start_in_reasoning, e))
        return e && e->code ? e->code : CERR_NOMEM;
    if (tools && json_array_size(tools) && family != TC_NONE) {
        char *js = json_dumps_short(tools, JSON_COMPACT);
        int rc = js ? tc_new(&t->tc, (enum tc_family)family, js, e)
                    : cerr_set(e, CERR_NOMEM, "out of memory");
        free(js);
        if (t->rsn) /* the explicit markup a call opens with, also inside the think block */
            t->rmark = family == TC_GENERIC || family == TC_HERMES || family == TC_QWEN3_XML
                           ? "<tool_call>"
                       : family == TC_MISTRAL ? "[TOOL_CALLS]"
                                              : NULL;
        if (rc) {
            rsn_free(t->rsn);
            t->rsn = NULL;
            return rc;
        }
    }
    return 0;
}

void api_turn_prime(struct api_turn *t, const char *s) { t->primed = s; }

/* Feeds what api_turn_prime left, once. */
static void turn_feed_primed(struct api_turn *t)
{
    const char *p = t->primed;
    t->primed = NULL;
    if (p && *p)
        api_turn_push(t, p, strlen(p));
}

int api_turn_push(struct api_turn *t, const char *s, size_t n)
{
    if (t->primed)
        turn_feed_primed(t);
    if (!n)
        return t->err;
    if (t->tc && sbuf_append(&t->raw, s, n)) /* kept only when calls can happen */
        return t->err = CERR_NOMEM;
    if (t->rsn) {
        if (rsn_push(t->rsn, s, n, turn_rsn, t))
            t->err = CERR_NOMEM;
    } else
        turn_rsn(RSN_CONTENT, s, n, t);
    return t->err;
}

int api_turn_finish(struct api_turn *t)
{
    if (t->primed)
        turn_feed_primed(t);
    if (t->rsn && rsn_flush(t->rsn, turn_rsn, t))
        t->err = CERR_NOMEM;
    if (t->rbuf.len)
        turn_rsn_release(t, t->rbuf.len);
    if (t->tc && tc_flush(t->tc, turn_tc, t))
        t->err = CERR_NOMEM;
    int n = api_turn_calls(t);
    if (!n && t->ws.len)
        t->cb(TURN_CONTENT, NULL, t->ws.p, t->ws.len, t->ud);
    sbuf_clear(&t->ws);
    int native = 1; /* replay only what the template renders back (genhist.h): a call
                     * recovered from another format is re-rendered by the template */
    for (int i = 0; i < n; i++)
        native &= tc_call_native(t->tc, i);
    if (n && native && !t->err) {
        const char *ids[64];
        if (n > 64)
            n = 64;
        for (int i = 0; i < n; i++)
            ids[i] = tc_call_id(t->tc, i);
        if (replay_put(ids, n, t->raw.p ? t->raw.p : "", t->raw.len))
            t->err = CERR_NOMEM;
    }
    return t->err;
}

int api_turn_calls(const struct api_turn *t)
{
    int n = t->tc ? tc_call_count(t->tc) : 0;
    return t->max_calls && n > t->max_calls ? t->max_calls : n;
}

void api_turn_max_calls(struct api_turn *t, int n) { t->max_calls = n > 0 ? n : 0; }

void api_turn_stream_args(struct api_turn *t)
{
    if (t->tc)
        tc_set_stream_args(t->tc, 1);
}

void api_turn_deinit(struct api_turn *t)
{
    rsn_free(t->rsn);
    tc_free(t->tc);
    sbuf_free(&t->raw);
    sbuf_free(&t->ws);
    sbuf_free(&t->rbuf);
    memset(t, 0, sizeof *t);
}

const char *api_stop_string(const struct engine_event *ev, char *const *stops, int n_stops)
{
    if (ev->type != ENGINE_EV_DONE || ev->finish != ENGINE_FINISH_STOP || ev->stop_index < 0 ||
        ev->stop_index >= n_stops || !stops)
        return NULL;
    return stops[ev->stop_index];
}
