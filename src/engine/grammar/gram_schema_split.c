/* gram_schema_split.c — object constraints on which members are present, compiled as a union
 * of plain objects: `not` over required names (`not: {required: [a, b]}` or an allOf of such
 * = not all of them present; an anyOf of them = none present) and property dependencies that
 * do not hold anyway (`dependencies` / `dependentRequired` with name lists: a present asks
 * for its names = either a is absent or they are required).
 *
 * Each case is exact on a closed object (declared properties only: additionalProperties
 * false, or absent beside properties, the compiler's policy): leaving a member out of a
 * branch's properties forbids it there. The result is an anyOf of copies of the schema, each
 * with members removed or more names required; further dependencies split again when the
 * copy is compiled (at most SPLIT_MAX entries, so at most 2^SPLIT_MAX branches).
 */
#include <stdio.h>
#include <string.h>

#include "engine/grammar/gram_schema_int.h"

enum { SPLIT_MAX = 4 };

static int has_name(const json_t *arr, const char *k)
{
    size_t i;
    json_t *x;
    json_array_foreach(arr, i, x) if (json_is_string(x) && !strcmp(json_string_value(x), k)) return 1;
    return 0;
}

/* 1 when s is an object schema whose members are exactly its declared properties, with no
 * other keyword that looks at the members (so removing a property forbids that member). */
static int closed_plain(const json_t *s)
{
    json_t *t = json_object_get(s, "type"), *props = json_object_get(s, "properties");
    json_t *addl = json_object_get(s, "additionalProperties");
    static const char *const others[] = {"patternProperties", "propertyNames", "anyOf", "oneOf",
                                         "allOf", "$ref", "minProperties", "maxProperties",
                                         "unevaluatedProperties", "dependentSchemas", "if",
                                         "enum", "const", NULL};
    if (!json_is_object(props) || (addl && !json_is_false(addl)))
        return 0;
    if (t && !(json_is_string(t) && !strcmp(json_string_value(t), "object")))
        return 0;
    for (int i = 0; others[i]; i++)
        if (json_object_get(s, others[i]))
            return 0;
    return 1;
}

/* A copy of s without keyword drop (NULL: none), without the members named in rm, and with
 * the names in add required; kept alive in c->keep. */
static json_t *variant(struct sc *c, const json_t *s, const char *drop, const json_t *rm,
                       const json_t *add)
{
    json_t *m = json_copy((json_t *)s);
    if (!m)
        return NULL;
    json_array_append_new(c->keep, m);
    if (drop)
        json_object_del(m, drop);
    if (rm && json_array_size(rm)) {
        json_t *p = json_copy(json_object_get(m, "properties"));
        if (!p)
            return NULL;
        size_t i;
        json_t *x;
        json_array_foreach(rm, i, x) json_object_del(p, json_string_value(x));
        json_object_set_new(m, "properties", p);
    }
    if (add && json_array_size(add)) {
        json_t *r = json_object_get(m, "required");
        json_t *q = json_is_array(r) ? json_copy(r) : json_array();
        if (!q)
            return NULL;
        size_t i;
        json_t *x;
        json_array_foreach(add, i, x) if (!has_name(q, json_string_value(x))) json_array_append(q, x);
        json_object_set_new(m, "required", q);
    }
    return m;
}

/* The names of a `not` that only asks for members: {required} or an allOf of {required}
 * (*all = 1: the not forbids all of them together), or an anyOf of {required} (*all = 0:
 * it forbids each one). NULL when the not has another form. */
static json_t *not_names(const json_t *nt, int *all)
{
    json_t *names = json_array();
    const json_t *list = NULL;
    if (!names || !json_is_object(nt))
        goto no;
    if (json_object_size(nt) == 1 && json_is_array(json_object_get(nt, "required"))) {
        *all = 1;
        json_array_extend(names, json_object_get(nt, "required"));
    } else if (json_object_size(nt) == 1 && (list = json_object_get(nt, "allOf"))) {
        *all = 1;
    } else if (json_object_size(nt) == 1 && (list = json_object_get(nt, "anyOf"))) {
        *all = 0;
    } else {
        goto no;
    }
    if (list) {
        size_t i;
        json_t *x;
        if (!json_is_array(list) || !json_array_size(list))
            goto no;
        json_array_foreach(list, i, x) {
            json_t *r = json_is_object(x) ? json_object_get(x, "required") : NULL;
            if (json_object_size(x) != 1 || !json_is_array(r) || (!*all && json_array_size(r) != 1))
                goto no;
            json_array_extend(names, r);
        }
    }
    size_t i;
    json_t *x;
    json_array_foreach(names, i, x) if (!json_is_string(x)) goto no;
    if (json_array_size(names))
        return names;
no:
    json_decref(names);
    return NULL;
}

static int split_not(struct sc *c, const json_t *s, const char *path, json_t **out)
{
    int all = 0;
    json_t *names = not_names(json_object_get(s, "not"), &all);
    if (!names)
        return 0;
    json_array_append_new(c->keep, names);
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *alts = json_array();
    if (!alts)
        return CERR_NOMEM;
    json_t *u = json_pack("{s:o}", "anyOf", alts);
    if (!u)
        return CERR_NOMEM;
    json_array_append_new(c->keep, u);
    size_t i;
    json_t *x;
    if (!all) { /* none of them: all removed (a required one makes it unsatisfiable) */
        json_array_foreach(names, i, x) if (has_name(req, json_string_value(x)))
            return gsc_bad_schema(c, path, "not forbids a required property");
        json_t *v = variant(c, s, "not", names, NULL);
        if (!v)
            return CERR_NOMEM;
        json_array_append(alts, v);
        *out = u;
        return 0;
    }
    /* not all of them: one branch per name that may be left out */
    json_array_foreach(names, i, x) {
        const char *k = json_string_value(x);
        if (!json_object_get(props, k)) { /* it can never be there: the not always holds */
            json_t *v = variant(c, s, "not", NULL, NULL);
            if (!v || json_array_clear(alts) || json_array_append(alts, v))
                return CERR_NOMEM;
            break;
        }
        if (has_name(req, k))
            continue;
        json_t *one = json_pack("[s]", k);
        json_t *v = one ? variant(c, s, "not", one, NULL) : NULL;
        json_decref(one);
        if (!v)
            return CERR_NOMEM;
        json_array_append(alts, v);
    }
    if (!json_array_size(alts))
        return gsc_bad_schema(c, path, "not forbids properties that are all required");
    *out = u;
    return 0;
}

/* the first dependency entry (name -> names) of kw that does not hold anyway; counts them */
static const char *open_dep(const json_t *s, const char *kw, json_t **need, int *n_open)
{
    json_t *d = json_object_get(s, kw), *req = json_object_get(s, "required"), *v;
    const char *k, *first = NULL;
    json_object_foreach(d, k, v) {
        size_t i;
        json_t *x;
        int holds = 1;
        json_array_foreach(v, i, x) holds &= has_name(req, json_string_value(x));
        if (!holds) {
            (*n_open)++;
            if (!first)
                first = k, *need = v;
        }
    }
    return first;
}

static int split_deps(struct sc *c, const json_t *s, const char *path, json_t **out)
{
    static const char *const kws[] = {"dependencies", "dependentRequired"};
    int n_open = 0;
    const char *a = NULL, *kw = NULL;
    json_t *need = NULL;
    for (int i = 0; i < 2; i++) {
        json_t *d = json_object_get(s, kws[i]), *v;
        const char *k;
        if (!d)
            continue;
        if (!json_is_object(d))
            return 0;
        json_object_foreach(d, k, v) { /* name lists only (a schema form is refused) */
            size_t j;
            json_t *x;
            if (!json_is_array(v))
                return 0;
            json_array_foreach(v, j, x) if (!json_is_string(x)) return 0;
        }
        const char *f = open_dep(s, kws[i], &need, &n_open);
        if (f && !a)
            a = f, kw = kws[i];
    }
    if (!a || n_open > SPLIT_MAX)
        return 0;
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    /* the entry leaves the copies (the others stay and split in turn) */
    json_t *base = variant(c, s, NULL, NULL, NULL), *d = json_copy(json_object_get(s, kw));
    if (!base || !d)
        return CERR_NOMEM;
    json_object_del(d, a);
    json_object_set_new(base, kw, d);
    int can_have = 1; /* a present is possible only when every name it asks for is declared */
    size_t i;
    json_t *x;
    json_array_foreach(need, i, x) can_have &= json_object_get(props, json_string_value(x)) != NULL;
    json_t *alts = json_array(), *u = alts ? json_pack("{s:o}", "anyOf", alts) : NULL;
    if (!u)
        return CERR_NOMEM;
    json_array_append_new(c->keep, u);
    if (!json_object_get(props, a)) { /* a can never be there: the entry holds */
        json_array_append(alts, base);
    } else {
        if (!has_name(req, a)) { /* a absent */
            json_t *one = json_pack("[s]", a);
            json_t *v = one ? variant(c, base, NULL, one, NULL) : NULL;
            json_decref(one);
            if (!v)
                return CERR_NOMEM;
            json_array_append(alts, v);
        }
        if (can_have) { /* a's names required (a itself stays optional or required) */
            json_t *v = variant(c, base, NULL, NULL, need);
            if (!v)
                return CERR_NOMEM;
            json_array_append(alts, v);
        }
    }
    if (!json_array_size(alts))
        return gsc_bad_schema(c, path, "a required property depends on undeclared ones");
    *out = u;
    return 0;
}

int gsc_split_object(struct sc *c, const json_t *s, const char *path, json_t **out)
{
    *out = NULL;
    if (!closed_plain(s))
        return 0;
    int rc = json_object_get(s, "not") ? split_not(c, s, path, out) : split_deps(c, s, path, out);
    return rc == CERR_NOMEM ? cerr_set(c->e, CERR_NOMEM, "out of memory") : rc;
}
