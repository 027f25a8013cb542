/* toolcall_tools.c — the request's tool declarations, reduced to what the parsers need:
 * which names exist and whether a parameter is declared as a string. Accepts the OpenAI
 * chat shape {type:"function", function:{name, parameters}}, the Responses flat shape
 * {type:"function", name, parameters} and the Anthropic shape {name, input_schema}.
 */
#include "api/toolcall_int.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

struct tc_tool {
    const char *name;  /* owned by root */
    json_t *props;     /* the schema's "properties" object, or NULL */
};

struct tc_tools {
    json_t *root;
    struct tc_tool *v;
    size_t n;
};

int tct_load(struct tc_tools **out, const char *tools_json, struct cerr *e)
{
    *out = NULL;
    struct tc_tools *t = calloc(1, sizeof *t);
    if (!t)
        return cerr_set(e, CERR_NOMEM, "tool parser: out of memory");
    if (!tools_json || !tools_json[0]) {
        *out = t;
        return CERR_OK;
    }
    json_error_t je;
    t->root = json_loads(tools_json, JSON_DECODE_ANY, &je);
    if (!t->root || !json_is_array(t->root)) {
        cerr_set(e, CERR_FORMAT, "tool parser: tools must be a JSON array (%s)",
                 t->root ? "not an array" : je.text);
        tct_free(t);
        return CERR_FORMAT;
    }
    size_t cap = json_array_size(t->root);
    t->v = calloc(cap ? cap : 1, sizeof *t->v);
    if (!t->v) {
        tct_free(t);
        return cerr_set(e, CERR_NOMEM, "tool parser: out of memory");
    }
    size_t i;
    json_t *tool;
    json_array_foreach(t->root, i, tool) {
        json_t *fn = json_object_get(tool, "function");
        json_t *src = json_is_object(fn) ? fn : tool;
        json_t *name = json_object_get(src, "name");
        if (!json_is_string(name))
            continue; /* server tools and unknown shapes declare nothing we can call */
        json_t *schema = json_object_get(src, "parameters");
        if (!json_is_object(schema))
            schema = json_object_get(src, "input_schema");
        json_t *props = json_is_object(schema) ? json_object_get(schema, "properties") : NULL;
        t->v[t->n].name = json_string_value(name);
        t->v[t->n].props = json_is_object(props) ? props : NULL;
        t->n++;
    }
    *out = t;
    return CERR_OK;
}

void tct_free(struct tc_tools *t)
{
    if (!t)
        return;
    json_decref(t->root);
    free(t->v);
    free(t);
}

static const struct tc_tool *find(const struct tc_tools *t, const char *name, size_t n)
{
    for (size_t i = 0; i < t->n; i++)
        if (strlen(t->v[i].name) == n && memcmp(t->v[i].name, name, n) == 0)
            return &t->v[i];
    return NULL;
}

int tct_has(const struct tc_tools *t, const char *name, size_t n)
{
    if (!tcj_name_ok(name, n))
        return 0;
    return !t || t->n == 0 || find(t, name, n) != NULL;
}

/* "string", or a type list whose only non-null member is "string". */
static int is_string_schema(json_t *schema)
{
    json_t *ty = json_object_get(schema, "type");
    if (json_is_string(ty))
        return strcmp(json_string_value(ty), "string") == 0;
    if (json_is_array(ty)) {
        int str = 0, other = 0;
        size_t i;
        json_t *v;
        json_array_foreach(ty, i, v) {
            const char *s = json_string_value(v);
            if (s && strcmp(s, "string") == 0)
                str = 1;
            else if (!s || strcmp(s, "null") != 0)
                other = 1;
        }
        return str && !other;
    }
    return 0;
}

int tct_param_type(const struct tc_tools *t, const char *name, const char *param, size_t pn)
{
    if (!t || t->n == 0)
        return TCT_UNKNOWN;
    const struct tc_tool *tool = find(t, name, strlen(name));
    if (!tool || !tool->props)
        return TCT_UNKNOWN;
    char key[256];
    if (pn >= sizeof key)
        return TCT_STRING;
    memcpy(key, param, pn);
    key[pn] = 0;
    json_t *schema = json_object_get(tool->props, key);
    if (!json_is_object(schema))
        return TCT_STRING; /* undeclared parameter: keep the text as the model wrote it */
    return is_string_schema(schema) ? TCT_STRING : TCT_OTHER;
}
