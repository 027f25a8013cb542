/* test_protocols.c — the three response encoders (OpenAI chat, Anthropic Messages, OpenAI
 * Responses) on a recorded turn with reasoning, content and two Hermes tool calls, fed whole,
 * byte by byte and split at every position: the streamed events reassemble to the
 * non-streaming answer and to the expected blocks/items; and the replay store (exact text of
 * a tool-call turn by call ids, LRU cap).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/anthropic.h"
#include "api/oai_out.h"
#include "api/oai_req.h"
#include "api/replay.h"
#include "api/responses.h"
#include "api/toolcall.h"
#include "harness.h"

static const char TURN[] = "<think>plan it</think>Let me check.\n<tool_call>\n{\"name\": "
                           "\"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
                           "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"city\": "
                           "\"Paris\"}}\n</tool_call>";

static const char CHAT_BODY[] =
    "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],\"tools\":["
    "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"parameters\":{}}}]}";

static const struct api_model MODEL = {.id = "m",
                                       .think_open = "<think>",
                                       .think_close = "</think>",
                                       .default_thinking = -1,
                                       .n_ctx = 4096};

enum { P_CHAT, P_ANTH, P_RESP };

/* Feeds TURN cut at the given positions (cuts[] ascending, n_cuts of them) to a new encoder
 * of protocol p; returns the bytes produced (malloc'd). */
static char *run(int p, const struct oai_req *r, int stream, const size_t *cuts, int n_cuts)
{
    struct oai_req rr = *r;
    rr.stream = stream;
    struct api_prompt pr = {.n = 3};
    struct sbuf out = {0};
    void *enc = NULL;
    json_t *echo = json_object();
    int rc = p == P_CHAT ? oai_out_new((struct oai_out **)&enc, &MODEL, &rr, &pr, "serial", NULL)
             : p == P_ANTH
                 ? anth_out_new((struct anth_out **)&enc, &MODEL, &rr, &pr, TC_HERMES, NULL)
                 : resp_out_new((struct resp_out **)&enc, &MODEL, &rr, &pr, TC_HERMES, echo, NULL);
    json_decref(echo);
    if (rc)
        return NULL;
    if (p == P_CHAT)
        oai_out_tools(enc, TC_HERMES, r->tools, NULL);
    if (stream)
        p == P_CHAT   ? oai_out_begin(enc, &out)
        : p == P_ANTH ? anth_out_begin(enc, &out)
                      : resp_out_begin(enc, &out);
    size_t at = 0, n = strlen(TURN);
    for (int i = 0; i <= n_cuts; i++) {
        size_t end = i < n_cuts ? cuts[i] : n;
        struct engine_event ev = {.type = ENGINE_EV_DELTA, .text = TURN + at, .len = end - at};
        p == P_CHAT   ? oai_out_event(enc, &ev, &out)
        : p == P_ANTH ? anth_out_event(enc, &ev, &out)
                      : resp_out_event(enc, &ev, &out);
        at = end;
    }
    struct engine_event done = {.type = ENGINE_EV_DONE,
                                .finish = ENGINE_FINISH_EOS,
                                .text = "",
                                .n_prompt = 3,
                                .n_gen = 40};
    p == P_CHAT   ? oai_out_event(enc, &done, &out)
    : p == P_ANTH ? anth_out_event(enc, &done, &out)
                  : resp_out_event(enc, &done, &out);
    p == P_CHAT ? oai_out_free(enc) : p == P_ANTH ? anth_out_free(enc) : resp_out_free(enc);
    char *s = strndup(out.p ? out.p : "", out.len);
    sbuf_free(&out);
    return s;
}

/* The data payloads of an SSE body, parsed (an array; [DONE] is skipped). */
static json_t *sse_data(const char *s)
{
    json_t *a = json_array();
    for (const char *d = strstr(s, "data: "); d; d = strstr(d + 1, "\ndata: ")) {
        if (*d == '\n')
            d++;
        const char *e = strstr(d, "\n\n");
        size_t n = (size_t)(e ? e - d - 6 : (long)strlen(d + 6));
        if (n == 6 && !strncmp(d + 6, "[DONE]", 6))
            continue;
        json_t *j = json_loadb(d + 6, n, 0, NULL);
        if (j)
            json_array_append_new(a, j);
    }
    return a;
}

/* A canonical summary of one answer: "R:<reasoning>|C:<content>|T:<name><args>|…". */
static void summary_chat(const char *body, int stream, char *out, size_t cap)
{
    char r[256] = "", c[256] = "", t[512] = "";
    if (!stream) {
        json_t *b = json_loads(body, 0, NULL);
        json_t *m = json_object_get(json_array_get(json_object_get(b, "choices"), 0), "message");
        snprintf(r, sizeof r, "%s",
                 json_string_value(json_object_get(m, "reasoning_content")) ?: "");
        snprintf(c, sizeof c, "%s", json_string_value(json_object_get(m, "content")) ?: "");
        size_t i;
        json_t *x;
        json_array_foreach(json_object_get(m, "tool_calls"), i, x)
        {
            json_t *f = json_object_get(x, "function");
            size_t l = strlen(t);
            snprintf(t + l, sizeof t - l, "%s%s|", json_string_value(json_object_get(f, "name")),
                     json_string_value(json_object_get(f, "arguments")));
        }
        json_decref(b);
    } else {
        json_t *a = sse_data(body);
        size_t i;
        json_t *x;
        char args[2][256] = {"", ""}, names[2][64] = {"", ""};
        json_array_foreach(a, i, x)
        {
            json_t *d = json_object_get(json_array_get(json_object_get(x, "choices"), 0), "delta");
            const char *s;
            if ((s = json_string_value(json_object_get(d, "reasoning_content"))))
                strncat(r, s, sizeof r - strlen(r) - 1);
            if ((s = json_string_value(json_object_get(d, "content"))))
                strncat(c, s, sizeof c - strlen(c) - 1);
            size_t k;
            json_t *tc;
            json_array_foreach(json_object_get(d, "tool_calls"), k, tc)
            {
                int idx = (int)json_integer_value(json_object_get(tc, "index"));
                json_t *f = json_object_get(tc, "function");
                if (idx < 0 || idx > 1)
                    continue;
                if ((s = json_string_value(json_object_get(f, "name"))))
                    snprintf(names[idx], sizeof names[idx], "%s", s);
                if ((s = json_string_value(json_object_get(f, "arguments"))))
                    strncat(args[idx], s, sizeof args[idx] - strlen(args[idx]) - 1);
            }
        }
        for (int k = 0; k < 2; k++)
            if (*names[k]) {
                strncat(t, names[k], sizeof t - strlen(t) - 1);
                strncat(t, args[k], sizeof t - strlen(t) - 1);
                strncat(t, "|", sizeof t - strlen(t) - 1);
            }
        json_decref(a);
    }
    snprintf(out, cap, "R:%s|C:%s|T:%s", r, c, t);
}

/* Anthropic: the content blocks, from the body or reassembled from the events. */
static void summary_anth(const char *body, int stream, char *out, size_t cap)
{
    json_t *blocks;
    if (!stream) {
        json_t *b = json_loads(body, 0, NULL);
        blocks = json_incref(json_object_get(b, "content"));
        json_decref(b);
    } else {
        blocks = json_array();
        json_t *a = sse_data(body);
        size_t i;
        json_t *x;
        json_array_foreach(a, i, x)
        {
            const char *ty = json_string_value(json_object_get(x, "type"));
            if (!strcmp(ty, "content_block_start"))
                json_array_append(blocks, json_object_get(x, "content_block"));
            else if (!strcmp(ty, "content_block_delta")) {
                json_t *b = json_array_get(blocks, json_array_size(blocks) - 1);
                json_t *d = json_object_get(x, "delta");
                const char *dt = json_string_value(json_object_get(d, "type"));
                const char *key = !strcmp(dt, "text_delta")         ? "text"
                                  : !strcmp(dt, "thinking_delta")   ? "thinking"
                                  : !strcmp(dt, "input_json_delta") ? "_json"
                                                                    : NULL;
                const char *src = !strcmp(dt, "input_json_delta") ? "partial_json" : key;
                if (!key)
                    continue;
                char buf[512];
                snprintf(buf, sizeof buf, "%s%s", json_string_value(json_object_get(b, key)) ?: "",
                         json_string_value(json_object_get(d, src)));
                json_object_set_new(b, key, json_string(buf));
            }
        }
        json_array_foreach(blocks, i, x)
        {
            json_t *js = json_object_get(x, "_json");
            if (js) {
                json_object_set_new(x, "input", json_loads(json_string_value(js), 0, NULL));
                json_object_del(x, "_json");
            }
        }
        json_decref(a);
    }
    out[0] = 0;
    size_t i;
    json_t *x;
    json_array_foreach(blocks, i, x)
    {
        const char *ty = json_string_value(json_object_get(x, "type"));
        char *in = json_dumps(json_object_get(x, "input"), JSON_COMPACT | JSON_SORT_KEYS);
        size_t l = strlen(out);
        snprintf(out + l, cap - l, "%s:%s%s%s%s|", ty,
                 json_string_value(json_object_get(x, "thinking")) ?: "",
                 json_string_value(json_object_get(x, "text")) ?: "",
                 json_string_value(json_object_get(x, "name")) ?: "", in ? in : "");
        free(in);
    }
    json_decref(blocks);
}

/* Responses: the output items (from the body, or from the response.completed event). */
static void summary_resp(const char *body, int stream, char *out, size_t cap)
{
    json_t *r = NULL;
    if (!stream)
        r = json_loads(body, 0, NULL);
    else {
        json_t *a = sse_data(body);
        json_t *last = json_array_get(a, json_array_size(a) - 1);
        if (!strcmp(json_string_value(json_object_get(last, "type")) ?: "", "response.completed"))
            r = json_incref(json_object_get(last, "response"));
        /* the deltas must rebuild the same texts */
        size_t i;
        json_t *x;
        char text[256] = "";
        json_array_foreach(a, i, x)
        {
            if (!strcmp(json_string_value(json_object_get(x, "type")),
                        "response.output_text.delta"))
                strncat(text, json_string_value(json_object_get(x, "delta")),
                        sizeof text - strlen(text) - 1);
        }
        CHECK_STR(text, "Let me check.");
        json_decref(a);
    }
    out[0] = 0;
    size_t i;
    json_t *x;
    json_array_foreach(json_object_get(r, "output"), i, x)
    {
        const char *ty = json_string_value(json_object_get(x, "type"));
        json_t *c = json_array_get(json_object_get(x, "content"), 0);
        json_t *s = json_array_get(json_object_get(x, "summary"), 0);
        size_t l = strlen(out);
        snprintf(out + l, cap - l, "%s:%s%s%s%s|", ty,
                 json_string_value(json_object_get(s, "text")) ?: "",
                 json_string_value(json_object_get(c, "text")) ?: "",
                 json_string_value(json_object_get(x, "name")) ?: "",
                 json_string_value(json_object_get(x, "arguments")) ?: "");
    }
    json_decref(r);
}

static void summary(int p, const char *body, int stream, char *out, size_t cap)
{
    if (p == P_CHAT)
        summary_chat(body, stream, out, cap);
    else if (p == P_ANTH)
        summary_anth(body, stream, out, cap);
    else
        summary_resp(body, stream, out, cap);
}

static const char *const WANT[] = {
    [P_CHAT] = "R:plan it|C:Let me check.|T:get_weather{\"city\":\"Paris\"}|get_time{\"city\":"
               "\"Paris\"}|",
    [P_ANTH] = "thinking:plan it|text:Let me check.|tool_use:get_weather{\"city\":\"Paris\"}|"
               "tool_use:get_time{\"city\":\"Paris\"}|",
    [P_RESP] = "reasoning:plan it|message:Let me check.|function_call:get_weather{\"city\":"
               "\"Paris\"}|function_call:get_time{\"city\":\"Paris\"}|",
};

static void test_every_split(void)
{
    struct oai_req r;
    struct api_error err;
    struct sampler_params d;
    sampler_params_default(&d);
    CHECK(oai_parse(&r, OAI_CHAT, CHAT_BODY, strlen(CHAT_BODY), &d, 100, &err) == 0);
    size_t n = strlen(TURN);
    char got[1024];
    for (int p = P_CHAT; p <= P_RESP; p++) {
        for (int stream = 0; stream <= 1; stream++) {
            char *b = run(p, &r, stream, NULL, 0);
            summary(p, b, stream, got, sizeof got);
            CHECK_MSG(!strcmp(got, WANT[p]), "p%d stream%d whole: %s", p, stream, got);
            free(b);
            for (size_t k = 1; k < n; k++) {
                b = run(p, &r, stream, &k, 1);
                summary(p, b, stream, got, sizeof got);
                CHECK_MSG(!strcmp(got, WANT[p]), "p%d stream%d split %zu: %s", p, stream, k, got);
                free(b);
            }
        }
        size_t *cuts = malloc(n * sizeof *cuts);
        for (size_t k = 0; k + 1 < n; k++)
            cuts[k] = k + 1;
        char *b = run(p, &r, 1, cuts, (int)n - 1);
        summary(p, b, 1, got, sizeof got);
        CHECK_MSG(!strcmp(got, WANT[p]), "p%d byte by byte: %s", p, got);
        free(b);
        free(cuts);
    }
    oai_req_deinit(&r);
}

/* Finish reasons: chat tool_calls, Anthropic tool_use (no stop_sequence), Responses completed. */
static void test_finish_and_replay(void)
{
    struct oai_req r;
    struct api_error err;
    struct sampler_params d;
    sampler_params_default(&d);
    CHECK(oai_parse(&r, OAI_CHAT, CHAT_BODY, strlen(CHAT_BODY), &d, 100, &err) == 0);
    char *b = run(P_CHAT, &r, 0, NULL, 0);
    json_t *j = json_loads(b, 0, NULL);
    json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
    CHECK_STR(json_string_value(json_object_get(ch, "finish_reason")), "tool_calls");
    json_t *calls = json_object_get(json_object_get(ch, "message"), "tool_calls");
    CHECK_EQ_INT((int)json_array_size(calls), 2);
    /* the client sends the calls back, re-serialized: the turn renders as the exact text */
    json_t *msgs = json_pack("[{s:s, s:s}, {s:s, s:n, s:O}, {s:s, s:s, s:s}]", "role", "user",
                             "content", "q", "role", "assistant", "content", "tool_calls", calls,
                             "role", "tool", "tool_call_id", "x", "content", "18");
    json_t *copy = json_deep_copy(msgs);
    CHECK_EQ_INT(replay_apply(msgs), 1);
    json_t *am = json_array_get(msgs, 1);
    CHECK_STR(json_string_value(json_object_get(am, "content")), TURN);
    CHECK(json_object_get(am, "tool_calls") == NULL);
    /* ids in another order, or one call missing: untouched */
    json_t *c2 = json_object_get(json_array_get(copy, 1), "tool_calls");
    json_t *first = json_incref(json_array_get(c2, 0));
    json_array_remove(c2, 0);
    json_t *one = json_deep_copy(copy);
    CHECK_EQ_INT(replay_apply(one), 0);
    json_array_append_new(c2, first);
    CHECK_EQ_INT(replay_apply(copy), 0);
    json_decref(one);
    json_decref(copy);
    json_decref(msgs);
    json_decref(j);
    free(b);
    b = run(P_ANTH, &r, 0, NULL, 0);
    j = json_loads(b, 0, NULL);
    CHECK_STR(json_string_value(json_object_get(j, "stop_reason")), "tool_use");
    CHECK(json_is_null(json_object_get(j, "stop_sequence")));
    json_decref(j);
    free(b);
    oai_req_deinit(&r);
}

static void test_replay_lru(void)
{
    replay_clear();
    char id[32];
    for (int i = 0; i <= REPLAY_MAX_ENTRIES; i++) {
        snprintf(id, sizeof id, "call_%d", i);
        const char *ids[1] = {id};
        CHECK(replay_put(ids, 1, "raw", 3) == 0);
    }
    size_t n, bytes;
    replay_stats(&n, &bytes);
    CHECK_EQ_INT((int)n, REPLAY_MAX_ENTRIES);
    json_t *m = json_loads("[{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":"
                           "\"call_0\",\"function\":{\"name\":\"f\",\"arguments\":{}}}]}]",
                           0, NULL);
    CHECK_EQ_INT(replay_apply(m), 0); /* the oldest was evicted */
    json_t *tc = json_array_get(json_object_get(json_array_get(m, 0), "tool_calls"), 0);
    json_object_set_new(tc, "id", json_string("call_1024"));
    CHECK_EQ_INT(replay_apply(m), 1);
    CHECK_STR(json_string_value(json_object_get(json_array_get(m, 0), "content")), "raw");
    json_decref(m);
    replay_clear();
    replay_stats(&n, &bytes);
    CHECK(n == 0 && bytes == 0);
}

/* ---- a call inside (or right after) the think block ------------------------------------- */

struct turn_log {
    char r[256], c[256], calls[256];
};

static void log_turn(int kind, const struct tc_event *tc, const char *t, size_t n, void *ud)
{
    struct turn_log *L = ud;
    char *dst = kind == TURN_REASONING ? L->r : kind == TURN_CONTENT ? L->c : NULL;
    if (dst) {
        size_t l = strlen(dst);
        snprintf(dst + l, 256 - l, "%.*s", (int)n, t);
    } else if (kind == TURN_CALL_BEGIN) {
        size_t l = strlen(L->calls);
        snprintf(L->calls + l, 256 - l, "%s;", tc->name);
    }
}

/* Feeds text cut at position cut (0: whole) to a Hermes turn with think tags. */
static void turn_split(const char *text, size_t cut, struct turn_log *L, int *n_calls,
                       char *args, size_t cap)
{
    static const char TOOLS[] = "[{\"type\":\"function\",\"function\":{\"name\":"
                                "\"get_weather\",\"parameters\":{}}}]";
    memset(L, 0, sizeof *L);
    json_t *tools = json_loads(TOOLS, 0, NULL);
    struct api_turn t;
    CHECK_EQ_INT(api_turn_init(&t, &MODEL, 0, TC_HERMES, tools, log_turn, L, NULL), 0);
    size_t n = strlen(text);
    if (cut) /* one byte at a time up to the cut, then the rest */
        for (size_t i = 0; i < cut; i++)
            api_turn_push(&t, text + i, 1);
    api_turn_push(&t, text + cut, n - cut);
    CHECK_EQ_INT(api_turn_finish(&t), 0);
    *n_calls = api_turn_calls(&t);
    snprintf(args, cap, "%s", *n_calls ? tc_call_args(t.tc, 0) : "");
    api_turn_deinit(&t);
    json_decref(tools);
}

/* A turn of text fed whole to protocol p (family fam); returns oai_out_rerendered /
 * anth_out_rerendered / resp_out_rerendered after DONE (new reference or NULL). */
static json_t *rerendered(int p, const struct oai_req *r, int stream, const char *text, int fam)
{
    struct oai_req rr = *r;
    rr.stream = stream;
    struct api_prompt pr = {.n = 3};
    struct sbuf out = {0};
    void *enc = NULL;
    json_t *echo = json_object(), *m = NULL;
    int rc = p == P_CHAT ? oai_out_new((struct oai_out **)&enc, &MODEL, &rr, &pr, "serial", NULL)
             : p == P_ANTH ? anth_out_new((struct anth_out **)&enc, &MODEL, &rr, &pr, fam, NULL)
                           : resp_out_new((struct resp_out **)&enc, &MODEL, &rr, &pr, fam, echo, NULL);
    json_decref(echo);
    if (rc)
        return NULL;
    if (p == P_CHAT)
        oai_out_tools(enc, fam, r->tools, NULL);
    if (stream)
        p == P_CHAT   ? oai_out_begin(enc, &out)
        : p == P_ANTH ? anth_out_begin(enc, &out)
                      : resp_out_begin(enc, &out);
    struct engine_event ev = {.type = ENGINE_EV_DELTA, .text = text, .len = strlen(text)};
    struct engine_event done = {.type = ENGINE_EV_DONE, .finish = ENGINE_FINISH_EOS, .text = "",
                                .n_prompt = 3, .n_gen = 20};
    for (int k = 0; k < 2; k++) {
        const struct engine_event *e = k ? &done : &ev;
        p == P_CHAT   ? oai_out_event(enc, e, &out)
        : p == P_ANTH ? anth_out_event(enc, e, &out)
                      : resp_out_event(enc, e, &out);
        if (!k) /* before DONE: nothing yet */
            CHECK(!(p == P_CHAT   ? oai_out_rerendered(enc)
                    : p == P_ANTH ? anth_out_rerendered(enc)
                                  : resp_out_rerendered(enc)));
    }
    m = p == P_CHAT   ? oai_out_rerendered(enc)
        : p == P_ANTH ? anth_out_rerendered(enc)
                      : resp_out_rerendered(enc);
    p == P_CHAT ? oai_out_free(enc) : p == P_ANTH ? anth_out_free(enc) : resp_out_free(enc);
    sbuf_free(&out);
    return m;
}

/* The next turn's warm-up input (serve_warm.c): a call written as a bare JSON object, which
 * the template re-renders, gives the assistant message as the client sends it back, on every
 * protocol, streamed or not; a call in the template's own markup gives none. */
static void test_rerendered(void)
{
    struct oai_req r;
    struct api_error err;
    struct sampler_params d;
    sampler_params_default(&d);
    CHECK(oai_parse(&r, OAI_CHAT, CHAT_BODY, strlen(CHAT_BODY), &d, 100, &err) == 0);
    static const char BARE[] = "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}";
    static const char NATIVE[] = "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
    for (int p = P_CHAT; p <= P_RESP; p++)
        for (int stream = 0; stream < 2; stream++) {
            json_t *m = rerendered(p, &r, stream, BARE, TC_GENERIC);
            CHECK(m != NULL);
            CHECK_STR(json_string_value(json_object_get(m, "role")), "assistant");
            CHECK_STR(json_string_value(json_object_get(m, "content")), "");
            json_t *c = json_array_get(json_object_get(m, "tool_calls"), 0);
            CHECK(json_string_length(json_object_get(c, "id")) > 0);
            json_t *f = json_object_get(c, "function");
            CHECK_STR(json_string_value(json_object_get(f, "name")), "get_weather");
            CHECK_STR(json_string_value(json_object_get(json_object_get(f, "arguments"), "city")),
                      "Paris"); /* an object, as oai_req normalises a sent-back call */
            json_decref(m);
            CHECK(rerendered(p, &r, stream, NATIVE, TC_GENERIC) == NULL);
            CHECK(rerendered(p, &r, stream, "Just text, no call at all.", TC_GENERIC) == NULL);
        }
    oai_req_deinit(&r);
}

static void test_call_inside_think(void)
{
    static const char *const TEXTS[] = {
        /* inside the think block, thinking goes on after it */
        "<think>I should check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
        "{\"city\": \"Paris\"}}\n</tool_call>\nDone.</think>",
        /* inside, the block closed right after the call */
        "<think>I should check.<tool_call>{\"name\": \"get_weather\", \"arguments\": "
        "{\"city\": \"Paris\"}}</tool_call></think>",
        /* right after the block */
        "<think>I should check.</think><tool_call>\n{\"name\": \"get_weather\", "
        "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
    };
    for (size_t k = 0; k < sizeof TEXTS / sizeof *TEXTS; k++) {
        size_t n = strlen(TEXTS[k]);
        for (size_t cut = 0; cut <= n; cut += cut < 40 ? 1 : 7) {
            struct turn_log L;
            int nc;
            char args[128];
            turn_split(TEXTS[k], cut, &L, &nc, args, sizeof args);
            CHECK_EQ_INT(nc, 1);
            CHECK_STR(L.calls, "get_weather;");
            CHECK_STR(args, "{\"city\":\"Paris\"}");
            CHECK(!strncmp(L.r, "I should check.", 15));
            CHECK(!strstr(L.r, "tool_call") && !strstr(L.c, "tool_call"));
            CHECK(L.c[strspn(L.c, " \n")] == 0); /* no content: the call is not text */
        }
    }
    /* a mention of the tag's start that is not a call stays reasoning */
    struct turn_log L;
    int nc;
    char args[8];
    turn_split("<think>use <tool</think>ok", 0, &L, &nc, args, sizeof args);
    CHECK_EQ_INT(nc, 0);
    CHECK_STR(L.r, "use <tool");
    CHECK_STR(L.c, "ok");
}

int main(void)
{
    RUN(test_call_inside_think);
    RUN(test_every_split);
    RUN(test_finish_and_replay);
    RUN(test_replay_lru);
    RUN(test_rerendered);
    return harness_done();
}
