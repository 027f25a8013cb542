/* fields.c — OpenAI request fields that change no output, and those refused (fields.h). */
#include "api/openai/fields.h"

#include <string.h>

int oai_check_metadata(json_t *md, struct api_error *err)
{
    if (!md || json_is_null(md))
        return 0;
    if (!json_is_object(md) || json_object_size(md) > 16)
        return api_fail(err, 400, "metadata",
                        "metadata must be an object of at most 16 string values");
    const char *k;
    json_t *v;
    json_object_foreach(md, k, v)
    {
        if (strlen(k) > 64 || !json_is_string(v) || json_string_length(v) > 512)
            return api_fail(err, 400, "metadata",
                            "metadata keys are at most 64 characters and values strings of at "
                            "most 512 ('%.64s')",
                            k);
    }
    return 0;
}

/* 1 when v is absent, null, or a string among the NULL-terminated set (set NULL: any). */
static int str_in(json_t *v, const char *const *set)
{
    if (!v || json_is_null(v))
        return 1;
    const char *s = json_string_value(v);
    if (!s)
        return 0;
    for (; set && *set; set++)
        if (!strcmp(s, *set))
            return 1;
    return !set;
}

static int prediction_ok(json_t *p)
{
    if (!p || json_is_null(p))
        return 1;
    const char *t = json_string_value(json_object_get(p, "type"));
    json_t *c = json_object_get(p, "content");
    if (!t || strcmp(t, "content"))
        return 0;
    if (json_is_string(c))
        return 1;
    if (!json_is_array(c))
        return 0;
    size_t i;
    json_t *x;
    json_array_foreach(c, i, x)
    {
        const char *xt = json_string_value(json_object_get(x, "type"));
        if (!xt || strcmp(xt, "text") || !json_is_string(json_object_get(x, "text")))
            return 0;
    }
    return 1;
}

int oai_check_completion_fields(json_t *o, struct api_error *err)
{
    if (!str_in(json_object_get(o, "user"), NULL))
        return api_fail(err, 400, "user", "user must be a string");
    return 0;
}

int oai_check_chat_fields(json_t *o, struct api_error *err)
{
    static const char *const TIERS[] = {"auto", "default", "flex", "scale", "priority", NULL};
    static const char *const VERB[] = {"low", "medium", "high", NULL};
    if (oai_check_metadata(json_object_get(o, "metadata"), err))
        return -1;
    static const char *const STR[] = {"prompt_cache_key", "safety_identifier", "user"};
    for (size_t i = 0; i < sizeof STR / sizeof *STR; i++) {
        json_t *v = json_object_get(o, STR[i]);
        if (!str_in(v, NULL) || (i == 1 && json_string_length(v) > 64))
            return api_fail(err, 400, STR[i], "%s must be a string%s", STR[i],
                            i == 1 ? " of at most 64 characters" : "");
    }
    json_t *st = json_object_get(o, "store");
    if (st && !json_is_null(st) && !json_is_boolean(st))
        return api_fail(err, 400, "store", "store must be a boolean");
    if (!str_in(json_object_get(o, "service_tier"), TIERS))
        return api_fail(err, 400, "service_tier",
                        "service_tier must be one of auto, default, flex, scale, priority");
    if (!str_in(json_object_get(o, "verbosity"), VERB))
        return api_fail(err, 400, "verbosity", "verbosity must be low, medium or high");
    if (!prediction_ok(json_object_get(o, "prediction")))
        return api_fail(err, 400, "prediction",
                        "prediction must be {\"type\": \"content\", \"content\": a string or an "
                        "array of text parts}");
    json_t *mod = json_object_get(o, "modalities");
    if (mod && !json_is_null(mod)) {
        if (!json_is_array(mod))
            return api_fail(err, 400, "modalities", "modalities must be an array of strings");
        size_t i;
        json_t *x;
        json_array_foreach(mod, i, x)
        {
            const char *m = json_string_value(x);
            if (!m || (strcmp(m, "text") && strcmp(m, "audio")))
                return api_fail(err, 400, "modalities",
                                "modalities entries are \"text\" or \"audio\"");
            if (!strcmp(m, "audio"))
                return api_fail(err, 400, "modalities",
                                "this server generates text only: modalities must be [\"text\"]");
        }
    }
    json_t *au = json_object_get(o, "audio");
    if (au && !json_is_null(au))
        return api_fail(err, 400, "audio", "this server generates text only: audio output is "
                                           "not supported");
    json_t *ws = json_object_get(o, "web_search_options");
    if (ws && !json_is_null(ws))
        return api_fail(err, 400, "web_search_options",
                        "web search is not available on this server");
    static const char *const OLD[] = {"functions", "function_call"};
    for (size_t i = 0; i < 2; i++) {
        json_t *v = json_object_get(o, OLD[i]);
        if (v && !json_is_null(v))
            return api_fail(err, 400, OLD[i],
                            "the deprecated %s is not supported: use %s", OLD[i],
                            i == 0 ? "tools" : "tool_choice");
    }
    return 0;
}
