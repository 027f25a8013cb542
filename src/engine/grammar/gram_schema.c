/* gram_schema.c — JSON Schema to EBNF (see gram_schema.h for the subset).
 *
 * One rule per schema node (memoised by node, so $ref cycles become recursive rules),
 * written after the rules it uses. Objects: the declared properties in order, each
 * optional one skippable, through two chains of rules (first_k: nothing written yet;
 * after_k: something was, so a comma comes first) — linear in the number of properties.
 * anyOf/oneOf with sibling keywords merge the siblings into each branch; allOf merges its
 * branches into one schema (properties and required unioned).
 */
#include "engine/grammar/gram_schema.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/gram_int.h"
#include "util/jsonfmt.h"

#include "engine/grammar/gram_schema_int.h"

int gsc_unsupported(struct sc *c, const char *kw, const char *path)
{
    if (c->kw)
        snprintf(c->kw, 64, "%s", kw);
    return cerr_set(c->e, CERR_UNSUPPORTED,
                    "unsupported JSON Schema keyword '%s' at %s: cinfer cannot enforce it", kw,
                    path);
}

int gsc_bad_schema(struct sc *c, const char *path, const char *what)
{
    return cerr_set(c->e, CERR_INVALID, "invalid JSON Schema at %s: %s", path, what);
}

static int lit_json(struct sc *c, struct sbuf *b, const json_t *v)
{
    char *s = json_dumps_short(v, JSON_ENCODE_ANY | JSON_COMPACT);
    if (!s)
        return cerr_set(c->e, CERR_NOMEM, "out of memory");
    gram_lit(b, s, strlen(s));
    free(s);
    return 0;
}

static const char *const PRELUDE_WS = "ws ::= [ \\t]{0,2} | \"\\n\" [ \\t]{0,24}\n";
static const char *const PRELUDE =
    "jstr ::= \"\\\"\" jchr* \"\\\"\"\n"
    "jchr ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n"
    "jint ::= \"-\"? jnat\n"
    "jnat ::= \"0\" | [1-9] [0-9]{0,17}\n"
    "jfrac ::= (\".\" [0-9]{1,20})? ([eE] [-+]? [0-9]{1,3})?\n"
    "jnum ::= jint jfrac\n"
    "jval ::= jobj | jarr | jstr | jnum | \"true\" | \"false\" | \"null\"\n"
    "jobj ::= \"{\" ws (jstr ws \":\" ws jval ws (\",\" ws jstr ws \":\" ws jval ws)*)? \"}\"\n"
    "jarr ::= \"[\" ws (jval ws (\",\" ws jval ws)*)? \"]\"\n"
    "jd2 ::= [0-9] [0-9]\n"
    "jdate ::= [0-9]{4} \"-\" (\"0\" [1-9] | \"1\" [0-2]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01])\n"
    "jtime ::= ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" ([0-5] [0-9] | \"60\") (\".\" [0-9]{1,9})? (\"Z\" | \"z\" | [-+] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])\n"
    "jhex ::= [0-9a-fA-F]\n"
    "juuid ::= jhex{8} \"-\" jhex{4} \"-\" jhex{4} \"-\" jhex{4} \"-\" jhex{12}\n"
    "joct ::= \"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9]? [0-9]\n"
    "jipv4 ::= joct \".\" joct \".\" joct \".\" joct\n"
    "jlabel ::= [a-zA-Z0-9] ([-a-zA-Z0-9]{0,61} [a-zA-Z0-9])?\n"
    "jhost ::= jlabel (\".\" jlabel){0,10}\n"
    "jemail ::= [a-zA-Z0-9!#$%&'*+/=?^_`{|}~-]{1,64} (\".\" [a-zA-Z0-9!#$%&'*+/=?^_`{|}~-]{1,64}){0,8} \"@\" jhost\n"
    "juric ::= [-a-zA-Z0-9._~:/?#@!$&'()*+,;=%]\n"
    "juri ::= [a-zA-Z] [-a-zA-Z0-9+.]{0,20} \":\" juric{1,2000}\n"
    "jurir ::= juric{0,2000}\n";

/* a count keyword (minLength, maxItems, ...): an integer, or a real with an integral value;
 * absent or not a number: dflt */
long gsc_count_of(const json_t *s, const char *k, long dflt)
{
    json_t *v = json_object_get(s, k);
    if (json_is_integer(v))
        return (long)json_integer_value(v);
    if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) && fabs(json_real_value(v)) < 1e15)
        return (long)json_real_value(v);
    return dflt;
}

static int new_rule(struct sc *c) { return c->n_rules++; }

static int memo_get(const struct sc *c, const json_t *s)
{
    for (int i = 0; i < c->n_memo; i++)
        if (c->memo[i].node == s)
            return c->memo[i].id;
    return -1;
}

static int memo_put(struct sc *c, const json_t *s, int id)
{
    if (c->n_memo == c->cap_memo) {
        int nc = c->cap_memo ? c->cap_memo * 2 : 32;
        void *q = realloc(c->memo, (size_t)nc * sizeof *c->memo);
        if (!q)
            return CERR_NOMEM;
        c->memo = q;
        c->cap_memo = nc;
    }
    c->memo[c->n_memo].node = s;
    c->memo[c->n_memo].id = id;
    c->n_memo++;
    return 0;
}

/* ---- $ref -------------------------------------------------------------------------------- */

static const json_t *resolve(struct sc *c, const char *ref)
{
    if (ref[0] != '#')
        return NULL;
    const json_t *cur = c->root;
    const char *p = ref + 1;
    if (!*p)
        return cur;
    if (*p != '/')
        return NULL;
    while (*p == '/' && cur) {
        p++;
        char tok[256];
        size_t n = 0;
        while (*p && *p != '/' && n + 1 < sizeof tok) {
            if (p[0] == '~' && p[1] == '0') {
                tok[n++] = '~';
                p += 2;
            } else if (p[0] == '~' && p[1] == '1') {
                tok[n++] = '/';
                p += 2;
            } else if (p[0] == '%' && p[1] && p[2]) {
                char h[3] = {p[1], p[2], 0};
                tok[n++] = (char)strtol(h, NULL, 16);
                p += 3;
            } else {
                tok[n++] = *p++;
            }
        }
        tok[n] = 0;
        if (json_is_object(cur))
            cur = json_object_get(cur, tok);
        else if (json_is_array(cur))
            cur = json_array_get(cur, (size_t)strtoul(tok, NULL, 10));
        else
            cur = NULL;
    }
    return cur;
}

/* ---- keywords ------------------------------------------------------------------------- */

/* keywords that validate; anything else is an annotation */
static const char *const KNOWN[] = {
    "type", "enum", "const", "properties", "required", "additionalProperties",
    "patternProperties", "items", "prefixItems", "additionalItems", "minItems", "maxItems",
    "minLength", "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum",
    "exclusiveMaximum", "anyOf", "oneOf", "allOf", "$ref", "not", "multipleOf",
    "uniqueItems", "contains", "minContains", "maxContains", "minProperties",
    "maxProperties", "propertyNames", "dependencies", "dependentRequired",
    "dependentSchemas", "if", "then", "else", "unevaluatedProperties", "unevaluatedItems",
    "$dynamicRef", "$recursiveRef", NULL};

static int is_known(const char *k)
{
    for (int i = 0; KNOWN[i]; i++)
        if (!strcmp(KNOWN[i], k))
            return 1;
    return 0;
}

static int rule_for(struct sc *c, const json_t *s, const char *path);

/* merges src's keys into dst (properties merged, required unioned; else src wins when dst
 * lacks the key; a conflicting value is an error) */
/* One side closed (additionalProperties false), the other open (true or a schema): the
 * merge takes only the closed side's members (JSON Schema: both must hold). *names: a copy of those (NULL when
 * no side or both are closed); refused when the open side's other members follow a schema
 * or patterns the closed names would have to meet too. */
static int closed_names(struct sc *c, const json_t *dst, const json_t *src, json_t **names,
                        const char *path)
{
    json_t *da = json_object_get(dst, "additionalProperties"), *sa = json_object_get(src, "additionalProperties");
    *names = NULL;
    /* only where both sides say it and differ; a side that says nothing joins the closed
     * one's members (the compiler's policy: the siblings and branches make one object) */
    if (!da || !sa || json_is_false(da) == json_is_false(sa))
        return 0;
    const json_t *cl = json_is_false(da) ? dst : src, *op = json_is_false(da) ? src : dst;
    const json_t *oa = json_is_false(da) ? sa : da, *op_props = json_object_get(op, "properties");
    json_t *cp = json_object_get(cl, "properties");
    if (json_object_get(op, "patternProperties"))
        return gsc_unsupported(c, "allOf", path);
    const char *k;
    json_t *v;
    if (oa && !json_is_true(oa))
        json_object_foreach(cp, k, v) if (!json_object_get(op_props, k)) return gsc_unsupported(c, "allOf", path);
    *names = json_is_object(cp) ? json_copy(cp) : json_object();
    if (!*names)
        return cerr_set(c->e, CERR_NOMEM, "out of memory");
    json_array_append_new(c->keep, *names);
    return 0;
}

static int merge_into(struct sc *c, json_t *dst, const json_t *src, const char *path)
{
    const char *k;
    json_t *v, *names;
    int rc0 = closed_names(c, dst, src, &names, path);
    if (rc0)
        return rc0;
    json_object_foreach((json_t *)src, k, v) {
        json_t *d = json_object_get(dst, k);
        if (names && !strcmp(k, "additionalProperties"))
            continue; /* closed: set below */
        if (!d) {
            json_object_set(dst, k, v);
        } else if (!strcmp(k, "properties") && json_is_object(d) && json_is_object(v)) {
            /* a member both sides declare must meet both schemas: allOf of the two */
            json_t *m = json_deep_copy(d);
            const char *pk;
            json_t *pv;
            json_object_foreach((json_t *)v, pk, pv) {
                json_t *old = json_object_get(m, pk);
                if (old && !json_equal(old, pv) && !json_is_true(pv))
                    json_object_set_new(m, pk, json_is_true(old) ? json_incref(pv)
                                                                 : json_pack("{s:[OO]}", "allOf", old, pv));
                else if (!old)
                    json_object_set(m, pk, pv);
            }
            json_object_set_new(dst, k, m);
        } else if (!strcmp(k, "required") && json_is_array(d) && json_is_array(v)) {
            json_t *m = json_copy(d);
            size_t i;
            json_t *x;
            json_array_foreach(v, i, x) {
                int have = 0;
                size_t j;
                json_t *y;
                json_array_foreach(m, j, y) have |= json_equal(x, y);
                if (!have)
                    json_array_append(m, x);
            }
            json_object_set_new(dst, k, m);
        } else if (!json_equal(d, v) && is_known(k)) {
            if (!strcmp(k, "type") || !strcmp(k, "$ref") || !strcmp(k, "anyOf") || !strcmp(k, "oneOf")) {
                /* same family, different spelling: the later one narrows; keep both only
                 * when they agree */
                if (!strcmp(k, "type") && json_is_string(d) && json_is_string(v) &&
                    ((!strcmp(json_string_value(d), "number") && !strcmp(json_string_value(v), "integer")) ||
                     (!strcmp(json_string_value(v), "number") && !strcmp(json_string_value(d), "integer")))) {
                    json_object_set_new(dst, k, json_string("integer"));
                    continue;
                }
            }
            return gsc_unsupported(c, "allOf", path);
        }
    }
    if (names) { /* only the closed side's members, as its own (JSON Schema's allOf) */
        json_t *p = json_object_get(dst, "properties");
        json_t *q = json_is_object(p) ? json_copy(p) : json_object();
        if (!q)
            return cerr_set(c->e, CERR_NOMEM, "out of memory");
        json_object_foreach(p, k, v) if (!json_object_get(names, k)) json_object_del(q, k);
        json_object_set_new(dst, "properties", q);
        json_object_set_new(dst, "additionalProperties", json_false());
        size_t i;
        json_t *x;
        json_array_foreach(json_object_get(dst, "required"), i, x) if (!json_is_string(x) ||
                                                                      !json_object_get(q, json_string_value(x)))
            return gsc_bad_schema(c, path, "a required property that a closed object refuses");
    }
    return 0;
}

/* a copy of s without `drop`, kept alive in c->keep */
static json_t *copy_without(struct sc *c, const json_t *s, const char *drop)
{
    json_t *m = json_copy((json_t *)s);
    if (!m)
        return NULL;
    json_object_del(m, drop);
    json_array_append_new(c->keep, m);
    return m;
}

static int gen_array(struct sc *c, const json_t *s, struct sbuf *b, const char *path)
{
    char sub[512];
    json_t *prefix = json_object_get(s, "prefixItems"), *items = json_object_get(s, "items");
    json_t *addl = json_object_get(s, "additionalItems");
    const json_t *rest = items;
    if (json_is_array(items)) { /* draft 4-7 tuple */
        prefix = items;
        rest = addl;
    }
    json_t *u = json_object_get(s, "uniqueItems");
    long mn = gsc_count_of(s, "minItems", 0), mx = gsc_count_of(s, "maxItems", -1);
    if (json_is_true(u) && !(mx >= 0 && mx <= 1))
        return gsc_unsupported(c, "uniqueItems", path);
    if (json_object_get(s, "contains"))
        return gsc_unsupported(c, "contains", path);
    if (mn < 0 || (mx >= 0 && mx < mn) || mn > 1000 || mx > 1000)
        return gsc_unsupported(c, mn > 1000 || mn < 0 ? "minItems" : "maxItems", path);
    int P = json_is_array(prefix) ? (int)json_array_size(prefix) : 0;
    if (P > 200)
        return gsc_unsupported(c, "prefixItems", path);
    int *pid = calloc((size_t)P + 1, sizeof *pid);
    if (!pid)
        return cerr_set(c->e, CERR_NOMEM, "out of memory");
    for (int i = 0; i < P; i++) {
        snprintf(sub, sizeof sub, "%s/%s/%d", path, prefix == items ? "items" : "prefixItems", i);
        pid[i] = rule_for(c, json_array_get(prefix, (size_t)i), sub);
        if (pid[i] < 0) {
            int rc = pid[i];
            free(pid);
            return rc;
        }
    }
    int rid = -1; /* the rest; -1: none allowed */
    if (!rest || json_is_true(rest)) {
        rid = -2; /* any value */
    } else if (json_is_object(rest)) {
        snprintf(sub, sizeof sub, "%s/%s", path, rest == addl ? "additionalItems" : "items");
        rid = rule_for(c, rest, sub);
        if (rid < 0) {
            free(pid);
            return rid;
        }
    }
    /* ws */
    sbuf_puts(b, "\"[\" ws ");
    int open = 0;
    for (int k = 0; k < P; k++) {
        if (mx >= 0 && k >= mx)
            break;
        if (k >= mn) {
            sbuf_puts(b, "(");
            open++;
        }
        if (k)
            sbuf_puts(b, "\",\" ws ");
        sbuf_printf(b, "r%d ws ", pid[k]);
    }
    free(pid);
    if (rid != -1 && (mx < 0 || mx > P)) {
        long rmin = mn > P ? mn - P : 0, rmax = mx < 0 ? -1 : mx - P;
        char item[64];
        if (rid == -2)
            snprintf(item, sizeof item, "jval ws");
        else
            snprintf(item, sizeof item, "r%d ws", rid);
        if (P > 0) {
            if (rmax < 0)
                sbuf_printf(b, "(\",\" ws %s){%ld,} ", item, rmin);
            else
                sbuf_printf(b, "(\",\" ws %s){%ld,%ld} ", item, rmin, rmax);
        } else if (rmin == 0) {
            if (rmax < 0)
                sbuf_printf(b, "(%s (\",\" ws %s)*)? ", item, item);
            else if (rmax > 0)
                sbuf_printf(b, "(%s (\",\" ws %s){0,%ld})? ", item, item, rmax - 1);
        } else {
            if (rmax < 0)
                sbuf_printf(b, "%s (\",\" ws %s){%ld,} ", item, item, rmin - 1);
            else
                sbuf_printf(b, "%s (\",\" ws %s){%ld,%ld} ", item, item, rmin - 1, rmax - 1);
        }
    } else if (mn > P) {
        return gsc_bad_schema(c, path, "minItems is more than the items allowed");
    }
    for (int k = 0; k < open; k++)
        sbuf_puts(b, ")?");
    sbuf_puts(b, " \"]\"");
    return 0;
}

static int in_required(const json_t *req, const char *k)
{
    size_t i;
    json_t *x;
    json_array_foreach(req, i, x) if (json_is_string(x) && !strcmp(json_string_value(x), k)) return 1;
    return 0;
}

/* 1 when the object's property dependencies (`dependencies` / `dependentRequired` of
 * name lists) hold anyway: none, or every name they ask for is required already */
static int deps_hold(const json_t *s, const char *kw)
{
    json_t *d = json_object_get(s, kw), *req = json_object_get(s, "required"), *v, *x;
    const char *k;
    size_t i;
    if (!d)
        return 1;
    if (!json_is_object(d))
        return 0;
    json_object_foreach(d, k, v) {
        if (!json_is_array(v))
            return 0;
        json_array_foreach(v, i, x) if (!json_is_string(x) || !json_is_array(req) ||
                                        !in_required(req, json_string_value(x))) return 0;
    }
    return 1;
}

/* A member's text in kv: `"k" ws ":" ws V ws`, V its rule (id), else the
 * additionalProperties rule (addl_id), else any JSON value. */
static int member_kv(struct sc *c, struct sbuf *kv, const char *k, int id, int addl_id)
{
    json_t *ks = json_string(k);
    int rc = ks ? lit_json(c, kv, ks) : cerr_set(c->e, CERR_NOMEM, "out of memory");
    json_decref(ks);
    if (rc)
        return rc;
    if (id >= 0)
        sbuf_printf(kv, " ws \":\" ws r%d ws", id);
    else if (addl_id >= 0)
        sbuf_printf(kv, " ws \":\" ws r%d ws", addl_id);
    else
        sbuf_puts(kv, " ws \":\" ws jval ws");
    return 0;
}

static int gen_object(struct sc *c, const json_t *s, struct sbuf *b, const char *path)
{
    char sub[512];
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *addl = json_object_get(s, "additionalProperties");
    json_t *pp = json_object_get(s, "patternProperties");
    /* propertyNames: the names of the extra pairs follow that (string) schema */
    char keyr[32] = "jstr";
    json_t *pn = json_object_get(s, "propertyNames");
    for (int hop = 0; json_is_object(pn) && json_is_string(json_object_get(pn, "$ref")) && hop < 16; hop++)
        pn = (json_t *)resolve(c, json_string_value(json_object_get(pn, "$ref")));
    if (json_object_get(s, "propertyNames") && !pn)
        return gsc_bad_schema(c, path, "propertyNames holds a $ref that does not resolve");
    if (pn && !json_is_true(pn)) {
        if (!json_is_object(pn))
            return gsc_unsupported(c, "propertyNames", path);
        const char *k2;
        json_t *v2;
        int trivial = 1;
        json_object_foreach(pn, k2, v2) if (is_known(k2) && !(!strcmp(k2, "type") && json_is_string(v2) &&
                                                             !strcmp(json_string_value(v2), "string"))) trivial = 0;
        if (!trivial) {
            json_t *t = json_object_get(pn, "type");
            if ((t && !(json_is_string(t) && !strcmp(json_string_value(t), "string"))) ||
                json_object_get(s, "patternProperties"))
                return gsc_unsupported(c, "propertyNames", path);
            json_t *m = json_copy(pn);
            if (!m)
                return cerr_set(c->e, CERR_NOMEM, "out of memory");
            json_object_set_new(m, "type", json_string("string"));
            json_array_append_new(c->keep, m);
            snprintf(sub, sizeof sub, "%s/propertyNames", path);
            int id = rule_for(c, m, sub);
            if (id < 0)
                return id;
            snprintf(keyr, sizeof keyr, "r%d", id);
        }
    }
    if (!deps_hold(s, "dependencies") || !deps_hold(s, "dependentRequired")) {
        json_t *sp = NULL; /* a union of objects with and without the dependent members */
        int rc = gsc_split_object(c, s, path, &sp);
        if (rc)
            return rc;
        int id = sp ? rule_for(c, sp, path) : 0;
        if (id < 0)
            return id;
        if (sp) {
            sbuf_printf(b, "r%d", id);
            return 0;
        }
    }
    if (!deps_hold(s, "dependencies") || !deps_hold(s, "dependentRequired") ||
        json_object_get(s, "dependentSchemas"))
        return gsc_unsupported(c, !deps_hold(s, "dependencies") ? "dependencies"
                              : !deps_hold(s, "dependentRequired") ? "dependentRequired"
                                                                         : "dependentSchemas",
                           path);
    json_t *uev = json_object_get(s, "unevaluatedProperties");
    if (uev && !json_is_false(uev) && !json_is_true(uev))
        return gsc_unsupported(c, "unevaluatedProperties", path);
    if (!addl && uev)
        addl = uev;
    int n = 0, cap = 0;
    struct { const char *k; int id, req; } *ps = NULL;
    const char *k;
    json_t *v;
    int rc = 0;
#define PS_PUSH(K, ID, R)                                                                          \
    do {                                                                                           \
        if (n == cap) {                                                                            \
            cap = cap ? cap * 2 : 16;                                                              \
            void *q = realloc(ps, (size_t)cap * sizeof *ps);                                       \
            if (!q) {                                                                              \
                free(ps);                                                                          \
                return cerr_set(c->e, CERR_NOMEM, "out of memory");                                \
            }                                                                                      \
            ps = q;                                                                                \
        }                                                                                          \
        ps[n].k = (K);                                                                             \
        ps[n].id = (ID);                                                                           \
        ps[n].req = (R);                                                                           \
        n++;                                                                                       \
    } while (0)
    if (json_is_object(props))
        json_object_foreach(props, k, v) {
            snprintf(sub, sizeof sub, "%s/properties/%s", path, k);
            int id = rule_for(c, v, sub);
            if (id < 0) {
                free(ps);
                return id;
            }
            PS_PUSH(k, id, json_is_array(req) && in_required(req, k));
        }
    if (json_is_array(req)) {
        size_t i;
        json_array_foreach(req, i, v) {
            if (!json_is_string(v))
                continue;
            const char *rk = json_string_value(v);
            int have = 0;
            for (int j = 0; j < n; j++)
                have |= !strcmp(ps[j].k, rk);
            if (!have) {
                int id = -2; /* any value, or the additionalProperties schema */
                PS_PUSH(rk, id, 1);
            }
        }
    }
    /* extra pairs: additionalProperties (true / schema) or patternProperties */
    struct sbuf extra = {0};
    int has_extra = 0;
    if (json_is_object(pp) && json_object_size(pp) > 0) {
        sbuf_puts(&extra, "(");
        int first = 1;
        json_object_foreach(pp, k, v) {
            snprintf(sub, sizeof sub, "%s/patternProperties/%s", path, k);
            int id = rule_for(c, v, sub);
            if (id < 0) {
                rc = id;
                goto out;
            }
            sbuf_puts(&extra, first ? "" : " | ");
            first = 0;
            sbuf_puts(&extra, "\"\\\"\" ");
            if ((rc = gram_regex_to_ebnf(k, strlen(k), 1, &extra, c->e))) {
                if (c->kw)
                    snprintf(c->kw, 64, "patternProperties");
                cerr_prefix(c->e, "JSON Schema 'patternProperties' at %s", path);
                rc = rc == CERR_NOMEM ? rc : CERR_UNSUPPORTED;
                goto out;
            }
            sbuf_printf(&extra, " \"\\\"\" ws \":\" ws r%d ws", id);
        }
        has_extra = 1;
    }
    int addl_id = -1;
    if (json_is_object(addl)) {
        snprintf(sub, sizeof sub, "%s/additionalProperties", path);
        addl_id = rule_for(c, addl, sub);
        if (addl_id < 0) {
            rc = addl_id;
            goto out;
        }
    }
    int open_any = json_is_true(addl) || (!addl && !json_is_object(props) && !has_extra && n == 0);
    if (addl_id >= 0 || open_any) {
        sbuf_puts(&extra, has_extra ? " | " : "(");
        if (addl_id >= 0)
            sbuf_printf(&extra, "%s ws \":\" ws r%d ws", keyr, addl_id);
        else
            sbuf_printf(&extra, "%s ws \":\" ws jval ws", keyr);
        has_extra = 1;
    }
    if (has_extra)
        sbuf_puts(&extra, ")");
    /* minProperties / maxProperties: only where they hold anyway */
    long mnp = gsc_count_of(s, "minProperties", 0), mxp = gsc_count_of(s, "maxProperties", -1);
    int n_req = 0;
    for (int j = 0; j < n; j++)
        n_req += ps[j].req;
    if (mnp > n_req && !((mnp == 1 && (n > 0 || has_extra)) || (n == 0 && has_extra && mnp <= 100))) {
        rc = gsc_unsupported(c, "minProperties", path);
        goto out;
    }
    int need_one = mnp > n_req; /* minProperties 1, nothing required: at least one pair */
    if (mxp >= 0 && (has_extra || mxp < n)) {
        rc = gsc_unsupported(c, "maxProperties", path);
        goto out;
    }
    /* chains: F_k (nothing written yet) and A_k (a comma first), k = 0..n */
    int base = c->n_rules;
    c->n_rules += 2 * (n + 1);
    for (int j = n; j >= 0; j--) {
        int F = base + 2 * j, A = base + 2 * j + 1;
        if (j == n) {
            if (has_extra) {
                sbuf_printf(c->o, "r%d ::= (%s (\",\" ws %s)*)?\n", F, extra.p, extra.p);
                sbuf_printf(c->o, "r%d ::= (\",\" ws %s)*\n", A, extra.p);
            } else {
                sbuf_printf(c->o, "r%d ::= \"\"\nr%d ::= \"\"\n", F, A);
            }
            continue;
        }
        struct sbuf kv = {0};
        if ((rc = member_kv(c, &kv, ps[j].k, ps[j].id, addl_id))) {
            sbuf_free(&kv);
            goto out;
        }
        int F1 = base + 2 * (j + 1), A1 = F1 + 1;
        if (ps[j].req) {
            sbuf_printf(c->o, "r%d ::= %s r%d\n", F, kv.p, A1);
            sbuf_printf(c->o, "r%d ::= \",\" ws %s r%d\n", A, kv.p, A1);
        } else {
            sbuf_printf(c->o, "r%d ::= %s r%d | r%d\n", F, kv.p, A1, F1);
            sbuf_printf(c->o, "r%d ::= \",\" ws %s r%d | r%d\n", A, kv.p, A1, A1);
        }
        sbuf_free(&kv);
    }
    if (need_one) { /* G_j: nothing written yet and one pair still owed */
        int gb0 = c->n_rules;
        c->n_rules += n + 1;
        for (int j = n; j >= 0; j--) {
            if (j == n) {
                if (has_extra)
                    sbuf_printf(c->o, "r%d ::= %s (\",\" ws %s){%ld,}\n", gb0 + j, extra.p, extra.p,
                                n == 0 ? mnp - 1 : 0);
                else /* unreachable: the last optional pair is taken instead */
                    sbuf_printf(c->o, "r%d ::= r%d\n", gb0 + j, base + 2 * n);
                continue;
            }
            struct sbuf kv = {0};
            if ((rc = member_kv(c, &kv, ps[j].k, ps[j].id, addl_id))) {
                sbuf_free(&kv);
                goto out;
            }
            int A1 = base + 2 * (j + 1) + 1;
            if (j == n - 1 && !has_extra)
                sbuf_printf(c->o, "r%d ::= %s r%d\n", gb0 + j, kv.p, A1);
            else
                sbuf_printf(c->o, "r%d ::= %s r%d | r%d\n", gb0 + j, kv.p, A1, gb0 + j + 1);
            sbuf_free(&kv);
        }
        sbuf_printf(b, "\"{\" ws r%d \"}\"", gb0);
    } else {
        sbuf_printf(b, "\"{\" ws r%d \"}\"", base);
    }
out:
    sbuf_free(&extra);
    free(ps);
#undef PS_PUSH
    return rc;
}

static int gen_typed(struct sc *c, const json_t *s, const char *t, struct sbuf *b, const char *path)
{
    if (!strcmp(t, "string"))
        return gsc_gen_string(c, s, b, path);
    if (!strcmp(t, "integer"))
        return gsc_gen_integer(c, s, b, path);
    if (!strcmp(t, "number"))
        return gsc_gen_number(c, s, b, path);
    if (!strcmp(t, "boolean")) {
        sbuf_puts(b, "(\"true\" | \"false\")");
        return 0;
    }
    if (!strcmp(t, "null")) {
        sbuf_puts(b, "\"null\"");
        return 0;
    }
    if (!strcmp(t, "object"))
        return gen_object(c, s, b, path);
    if (!strcmp(t, "array"))
        return gen_array(c, s, b, path);
    return gsc_bad_schema(c, path, "unknown type");
}

static const char *guess_type(const json_t *s)
{
    static const char *const obj[] = {"properties", "required", "additionalProperties",
                                      "patternProperties", "minProperties", "maxProperties", NULL};
    static const char *const arr[] = {"items", "prefixItems", "minItems", "maxItems", "additionalItems", NULL};
    static const char *const str[] = {"pattern", "minLength", "maxLength", "format", NULL};
    static const char *const num[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", NULL};
    for (int i = 0; obj[i]; i++)
        if (json_object_get(s, obj[i]))
            return "object";
    for (int i = 0; arr[i]; i++)
        if (json_object_get(s, arr[i]))
            return "array";
    for (int i = 0; str[i]; i++)
        if (json_object_get(s, str[i]))
            return "string";
    for (int i = 0; num[i]; i++)
        if (json_object_get(s, num[i]))
            return "number";
    return NULL;
}

static int gen_body(struct sc *c, const json_t *s, struct sbuf *b, const char *path)
{
    char sub[512];
    if (json_is_true(s)) {
        sbuf_puts(b, "jval");
        return 0;
    }
    if (!json_is_object(s))
        return gsc_bad_schema(c, path, json_is_false(s) ? "the schema 'false' accepts nothing"
                                                    : "a schema must be an object or a boolean");
    json_t *nt = json_object_get(s, "not");
    if (nt) { /* not: {enum} / {const} on a plain string or integer: the values cut out */
        json_t *ty0 = json_object_get(s, "type");
        const char *t0 = json_is_string(ty0) ? json_string_value(ty0) : NULL;
        json_t *ex = json_is_object(nt) ? json_object_get(nt, "enum") : NULL;
        json_t *cx = json_is_object(nt) ? json_object_get(nt, "const") : NULL;
        size_t nn = json_is_object(nt) ? json_object_size(nt) : 0;
        int plain = t0 && (!strcmp(t0, "string") || !strcmp(t0, "integer")) && !json_object_get(s, "enum") &&
                    !json_object_get(s, "const") && !json_object_get(s, "anyOf") && !json_object_get(s, "oneOf") &&
                    !json_object_get(s, "allOf") && !json_object_get(s, "$ref");
        json_t *ty1 = json_is_object(nt) ? json_object_get(nt, "type") : NULL;
        if (plain && ((json_is_array(ex) && nn == 1 + (ty1 != NULL)) || (cx && nn == 1 + (ty1 != NULL)))) {
            json_t *vals = json_is_array(ex) ? json_incref(ex) : json_pack("[O]", cx);
            json_t *m = copy_without(c, s, "not");
            if (!vals || !m) {
                json_decref(vals);
                return cerr_set(c->e, CERR_NOMEM, "out of memory");
            }
            json_array_append_new(c->keep, vals);
            const json_t *save = c->excl;
            c->excl = vals;
            int rc = gen_typed(c, m, t0, b, path);
            c->excl = save;
            return rc;
        }
        json_t *sp = NULL; /* not over required names: a union of objects */
        int rc = gsc_split_object(c, s, path, &sp);
        if (rc || !sp)
            return rc ? rc : gsc_unsupported(c, "not", path);
        int id = rule_for(c, sp, path);
        if (id < 0)
            return id;
        sbuf_printf(b, "r%d", id);
        return 0;
    }
    static const char *const never[] = {"if", "then", "else", "unevaluatedItems",
                                        "$dynamicRef", "$recursiveRef", "minContains", "maxContains", NULL};
    for (int i = 0; never[i]; i++)
        if (json_object_get(s, never[i]))
            return gsc_unsupported(c, never[i], path);
    json_t *ref = json_object_get(s, "$ref");
    if (json_is_string(ref)) {
        const json_t *t = resolve(c, json_string_value(ref));
        if (!t)
            return json_string_value(ref)[0] == '#' ? gsc_bad_schema(c, path, "a $ref that does not resolve")
                                                    : gsc_unsupported(c, "$ref", path);
        snprintf(sub, sizeof sub, "%s", json_string_value(ref));
        int id = rule_for(c, t, sub);
        if (id < 0)
            return id;
        sbuf_printf(b, "r%d", id);
        return 0;
    }
    json_t *all = json_object_get(s, "allOf");
    if (json_is_array(all)) {
        json_t *m = copy_without(c, s, "allOf");
        if (!m)
            return cerr_set(c->e, CERR_NOMEM, "out of memory");
        size_t i;
        json_t *x;
        json_array_foreach(all, i, x) {
            snprintf(sub, sizeof sub, "%s/allOf/%zu", path, i);
            const json_t *y = x;
            for (int hop = 0; json_is_object(y) && json_is_string(json_object_get(y, "$ref")) && hop < 16; hop++) {
                const json_t *t = resolve(c, json_string_value(json_object_get(y, "$ref")));
                if (!t)
                    return gsc_bad_schema(c, sub, "a $ref that does not resolve");
                if (json_object_size(y) > 1) {
                    json_t *z = copy_without(c, y, "$ref");
                    int rc = z ? merge_into(c, z, t, sub) : CERR_NOMEM;
                    if (rc)
                        return rc;
                    y = z;
                } else {
                    y = t;
                }
            }
            if (json_is_true(y))
                continue;
            if (!json_is_object(y))
                return gsc_bad_schema(c, sub, "allOf holds a schema that is not an object");
            int rc = merge_into(c, m, y, sub);
            if (rc)
                return rc;
        }
        /* a branch that closes its object (additionalProperties false) must already list
         * every property the merge holds, else the merge would accept what it refuses */
        json_t *mp = json_object_get(m, "properties");
        json_array_foreach(all, i, x) {
            json_t *yp = json_is_object(x) ? json_object_get(x, "properties") : NULL;
            if (!json_is_object(x) || !json_is_false(json_object_get(x, "additionalProperties")))
                continue;
            const char *k;
            json_t *v;
            json_object_foreach(mp, k, v) if (!json_object_get(yp, k)) return gsc_unsupported(c, "allOf", path);
        }
        return gen_body(c, m, b, path);
    }
    const char *alt_kw = json_object_get(s, "anyOf") ? "anyOf" : json_object_get(s, "oneOf") ? "oneOf" : NULL;
    if (alt_kw) {
        json_t *alts = json_object_get(s, alt_kw);
        if (!json_is_array(alts) || !json_array_size(alts))
            return gsc_bad_schema(c, path, "anyOf/oneOf needs a non-empty array");
        /* siblings that validate are merged into each branch */
        int sib = 0;
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)s, k, v) if (is_known(k) && strcmp(k, alt_kw)) sib = 1;
        sbuf_puts(b, "(");
        size_t i;
        json_t *x;
        json_array_foreach(alts, i, x) {
            snprintf(sub, sizeof sub, "%s/%s/%zu", path, alt_kw, i);
            const json_t *y = x;
            if (sib && json_is_object(x)) {
                json_t *m = copy_without(c, s, alt_kw);
                const json_t *xr = x;
                json_t *r = json_object_get(x, "$ref");
                if (json_is_string(r) && json_object_size(x) == 1 && !(xr = resolve(c, json_string_value(r))))
                    return gsc_bad_schema(c, sub, "a $ref that does not resolve");
                if (!m)
                    return cerr_set(c->e, CERR_NOMEM, "out of memory");
                if (json_is_object(xr)) {
                    /* the branch's own type wins over a sibling's wider one */
                    if (json_object_get(xr, "type"))
                        json_object_del(m, "type");
                    int rc = merge_into(c, m, xr, sub);
                    if (rc)
                        return rc;
                }
                y = m;
            }
            int id = rule_for(c, y, sub);
            if (id < 0)
                return id;
            sbuf_printf(b, "%sr%d", i ? " | " : "", id);
        }
        sbuf_puts(b, ")");
        return 0;
    }
    json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
    if (cn)
        return lit_json(c, b, cn);
    if (en) {
        if (!json_is_array(en) || !json_array_size(en))
            return gsc_bad_schema(c, path, "enum needs a non-empty array");
        sbuf_puts(b, "(");
        size_t i;
        json_t *x;
        json_array_foreach(en, i, x) {
            if (i)
                sbuf_puts(b, " | ");
            int rc = lit_json(c, b, x);
            if (rc)
                return rc;
        }
        sbuf_puts(b, ")");
        return 0;
    }
    json_t *ty = json_object_get(s, "type");
    if (json_is_string(ty))
        return gen_typed(c, s, json_string_value(ty), b, path);
    if (json_is_array(ty)) {
        if (!json_array_size(ty))
            return gsc_bad_schema(c, path, "type is an empty list");
        sbuf_puts(b, "(");
        size_t i;
        json_t *x;
        json_array_foreach(ty, i, x) {
            if (!json_is_string(x))
                return gsc_bad_schema(c, path, "type lists something not a string");
            if (i)
                sbuf_puts(b, " | ");
            int rc = gen_typed(c, s, json_string_value(x), b, path);
            if (rc)
                return rc;
        }
        sbuf_puts(b, ")");
        return 0;
    }
    const char *g = guess_type(s);
    if (g)
        return gen_typed(c, s, g, b, path);
    sbuf_puts(b, "jval");
    return 0;
}

static int rule_for(struct sc *c, const json_t *s, const char *path)
{
    int id = memo_get(c, s);
    if (id >= 0)
        return id;
    if (++c->depth > 200) {
        c->depth--;
        return cerr_set(c->e, CERR_LIMIT, "the schema nests too deeply at %s", path);
    }
    id = new_rule(c);
    if (memo_put(c, s, id)) {
        c->depth--;
        return cerr_set(c->e, CERR_NOMEM, "out of memory");
    }
    struct sbuf b = {0};
    int rc = gen_body(c, s, &b, path);
    c->depth--;
    if (!rc && !b.p)
        rc = cerr_set(c->e, CERR_NOMEM, "out of memory");
    if (!rc)
        rc = sbuf_printf(c->o, "r%d ::= %s\n", id, b.p) ? cerr_set(c->e, CERR_NOMEM, "out of memory") : 0;
    sbuf_free(&b);
    return rc ? rc : id;
}

int gram_schema_to_ebnf(const json_t *schema, int flags, struct sbuf *out, char *keyword,
                        struct cerr *e)
{
    if (keyword)
        keyword[0] = 0;
    struct sc c = {.root = schema, .o = out, .compact = flags & GRAM_SCHEMA_COMPACT, .kw = keyword, .e = e};
    c.keep = json_array();
    if (!c.keep)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    sbuf_puts(out, c.compact ? "ws ::= \"\"\n" : PRELUDE_WS);
    sbuf_puts(out, PRELUDE);
    int id = rule_for(&c, schema, "#");
    int rc = id < 0 ? id : 0;
    if (!rc)
        sbuf_printf(out, "root ::= r%d\n", id);
    free(c.memo);
    json_decref(c.keep);
    if (!rc && !out->p)
        rc = cerr_set(e, CERR_NOMEM, "out of memory");
    return rc;
}

int gram_from_schema(struct gram **out, const json_t *schema, int flags, char *keyword,
                     struct cerr *e)
{
    *out = NULL;
    struct sbuf b = {0};
    int rc = gram_schema_to_ebnf(schema, flags, &b, keyword, e);
    if (!rc)
        rc = gram_from_ebnf(out, b.p, b.len, e);
    sbuf_free(&b);
    return rc;
}
