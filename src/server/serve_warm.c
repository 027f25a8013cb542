/* serve_warm.c — the next turn's warm-up (serve.h). Process-wide counters; the engine
 * callback only counts. */
#include <jansson.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "api/oai_req.h"
#include "api/prompt.h"
#include "server/serve.h"
#include "util/log.h"

static atomic_long g_submitted, g_finished, g_tokens;

static void warm_cb(void *ud, const struct engine_event *ev)
{
    (void)ud;
    if (ev->type == ENGINE_EV_DONE || ev->type == ENGINE_EV_ERROR)
        atomic_fetch_add(&g_finished, 1);
}

static int warm_on(void)
{
    const char *v = getenv("CINFER_WARM_NEXT_TURN");
    return !v || strcmp(v, "0");
}

/* messages + msg + what follows it: each call's tool result (or a user message when msg
 * has no calls) with the text `fill`. New reference, or NULL. */
static json_t *next_messages(const json_t *messages, json_t *msg, const char *fill)
{
    json_t *a = json_array();
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) json_array_append(a, m);
    json_array_append(a, msg);
    json_t *calls = json_object_get(msg, "tool_calls");
    if (json_array_size(calls)) {
        json_array_foreach(calls, i, m)
        {
            const char *id = json_string_value(json_object_get(m, "id"));
            json_array_append_new(a, json_pack("{s:s, s:s, s:s}", "role", "tool", "tool_call_id",
                                               id ? id : "", "content", fill));
        }
    } else
        json_array_append_new(a, json_pack("{s:s, s:s}", "role", "user", "content", fill));
    if (a && json_array_size(a) != json_array_size(messages) + 1 +
                                      (json_array_size(calls) ? json_array_size(calls) : 1)) {
        json_decref(a);
        return NULL;
    }
    return a;
}

void serve_warm_chat(struct serve *sv, const struct oai_req *rq, int thinking, int n_prompt,
                     json_t *msg, const struct lora_set *ls)
{
    if (!msg || !warm_on() || !rq->messages || sv->shutting_down ||
        engine_config_of(sv->eng)->prompt_cache_blocks <= 0) /* no prompt cache: no use */
        return;
    /* two renderings that differ only in the results' text: their common prefix is what
     * the next prompt starts with whatever the tool answers */
    json_t *m1 = next_messages(rq->messages, msg, "a"), *m2 = next_messages(rq->messages, msg, "1");
    int32_t *x = NULL, *y = NULL;
    int nx = 0, ny = 0;
    struct api_error err = {0};
    int ok = m1 && m2 &&
             !api_chat_ids(&sv->am, m1, rq->tools, rq->template_kwargs, thinking, &x, &nx, &err) &&
             !api_chat_ids(&sv->am, m2, rq->tools, rq->template_kwargs, thinking, &y, &ny, &err);
    json_decref(m1);
    json_decref(m2);
    int n = 0;
    while (ok && n < nx && n < ny && x[n] == y[n])
        n++;
    if (ok && n > n_prompt) {
        struct engine_req q = {.ids = x, .n_ids = n, .max_tokens = 1, .lora = ls, .cb = warm_cb};
        sampler_params_default(&q.sp);
        q.sp.temperature = 0;
        uint64_t id;
        struct cerr e = {0};
        if (engine_submit(sv->eng, &q, &id, &e) == 0) {
            atomic_fetch_add(&g_submitted, 1);
            atomic_fetch_add(&g_tokens, n);
        } else
            log_debug("next-turn warm-up not queued: %s", e.msg);
    }
    free(x);
    free(y);
}

void serve_warm_stats_json(json_t *j)
{
    json_object_set_new(j, "next_turn_warm",
                        json_pack("{s:I, s:I, s:I}", "submitted",
                                  (json_int_t)atomic_load(&g_submitted), "finished",
                                  (json_int_t)atomic_load(&g_finished), "tokens",
                                  (json_int_t)atomic_load(&g_tokens)));
}
