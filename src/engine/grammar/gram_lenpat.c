/* gram_lenpat.c — a JSON Schema `pattern` with `minLength`/`maxLength`: the regex is compiled
 * to a grammar, its states are explored as a deterministic automaton over code points (the
 * matcher's interned stack sets are the states), and the product with a character counter
 * is written as EBNF rules R(state, count). A JSON escape (\n, \", \u0001 …) the pattern's
 * grammar writes counts as one character. Characters outside the Basic Multilingual Plane
 * are not generated there (four-byte UTF-8 is left out of the exploration). */
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/gram_mint.h"
#include "util/sbuf.h"

#define LP_MAX_STATES 256
#define LP_MAX_RULES 20000

struct lp_range {
    uint32_t lo, hi;
    int to; /* state index */
};

struct lp_esc { /* an escape sequence: one character */
    char s[6];
    int n, to;
};

struct lp {
    struct gram_matcher *m;
    struct lp_esc *x;
    int *xfirst, *xcnt;
    int nx, capx;
    uint32_t set[LP_MAX_STATES];
    int n;
    struct lp_range *r;
    int nr, cap;
    int bad;
};

static int state_of(struct lp *p, uint32_t sid)
{
    for (int i = 0; i < p->n; i++)
        if (p->set[i] == sid)
            return i;
    if (p->n == LP_MAX_STATES) {
        p->bad = CERR_UNSUPPORTED;
        return -1;
    }
    p->set[p->n] = sid;
    return p->n++;
}

/* Records code point cp -> set t (ranges merge while the target repeats). */
static void add_cp(struct lp *p, uint32_t cp, uint32_t t, struct lp_range **cur_r)
{
    if (!t || p->bad)
        return;
    int to = state_of(p, t);
    if (to < 0)
        return;
    struct lp_range *c = *cur_r;
    if (c && c->to == to && c->hi + 1 == cp) {
        c->hi = cp;
        return;
    }
    if (p->nr == p->cap) {
        p->cap = p->cap ? p->cap * 2 : 256;
        void *q = realloc(p->r, (size_t)p->cap * sizeof *p->r);
        if (!q) {
            p->bad = CERR_NOMEM;
            return;
        }
        p->r = q;
    }
    p->r[p->nr] = (struct lp_range){cp, cp, to};
    *cur_r = &p->r[p->nr++];
}

static void add_esc(struct lp *p, const char *u, int n, uint32_t t)
{
    if (!t || p->bad)
        return;
    int to = state_of(p, t);
    if (to < 0)
        return;
    if (p->nx == p->capx) {
        p->capx = p->capx ? p->capx * 2 : 64;
        void *q = realloc(p->x, (size_t)p->capx * sizeof *p->x);
        if (!q) {
            p->bad = CERR_NOMEM;
            return;
        }
        p->x = q;
    }
    struct lp_esc *x = &p->x[p->nx++];
    memcpy(x->s, u, (size_t)n);
    x->n = n;
    x->to = to;
}

static int accepting(const struct gram_matcher *m, uint32_t sid)
{
    const struct gset *s = &m->sets[sid];
    return s->len && m->pool[s->off] == 0;
}

int gram_regex_len_ebnf(const char *re, long lo, long hi, struct sbuf *rules, struct sbuf *expr,
                        int *next_rule, struct cerr *e)
{
    struct sbuf t = {0};
    struct gram *g = NULL;
    struct lp p = {0};
    int *first = NULL, *cnt = NULL;
    uint8_t *live = NULL;
    sbuf_puts(&t, "root ::= ");
    int rc = gram_regex_to_ebnf(re, strlen(re), 1, &t, e);
    if (!rc)
        rc = t.p ? gram_from_ebnf(&g, t.p, t.len, e) : CERR_NOMEM;
    if (!rc)
        rc = gram_matcher_new(&p.m, g, NULL, e);
    if (rc)
        goto out;
    struct gram_matcher *m = p.m;
    state_of(&p, m->cur);
    first = calloc(LP_MAX_STATES + 1, sizeof *first);
    cnt = calloc(LP_MAX_STATES + 1, sizeof *cnt);
    p.xfirst = calloc(LP_MAX_STATES + 1, sizeof *p.xfirst);
    p.xcnt = calloc(LP_MAX_STATES + 1, sizeof *p.xcnt);
    if (!first || !cnt || !p.xfirst || !p.xcnt) {
        rc = CERR_NOMEM;
        goto out;
    }
    /* the automaton: each state's code points, in order, as ranges of equal targets */
    for (int s = 0; s < p.n && !p.bad; s++) {
        uint32_t S = p.set[s];
        first[s] = p.nr;
        struct lp_range *cr = NULL;
        p.xfirst[s] = p.nx;
        uint32_t te = gm_step(m, S, '\\');
        static const char simple[] = "\"\\/bfnrt";
        for (int k = 0; te && simple[k] && !p.bad; k++) {
            char u[6] = {'\\', simple[k]};
            add_esc(&p, u, 2, gm_step(m, te, (uint8_t)simple[k]));
        }
        uint32_t tu = te ? gm_step(m, te, 'u') : 0;
        static const char hex[] = "0123456789abcdefABCDEF";
        for (int a = 0; tu && hex[a] && !p.bad; a++) {
            uint32_t t1 = gm_step(m, tu, (uint8_t)hex[a]);
            for (int b2 = 0; t1 && hex[b2]; b2++) {
                uint32_t t2 = gm_step(m, t1, (uint8_t)hex[b2]);
                for (int c2 = 0; t2 && hex[c2]; c2++) {
                    uint32_t t3 = gm_step(m, t2, (uint8_t)hex[c2]);
                    for (int d2 = 0; t3 && hex[d2]; d2++) {
                        char u[6] = {'\\', 'u', hex[a], hex[b2], hex[c2], hex[d2]};
                        add_esc(&p, u, 6, gm_step(m, t3, (uint8_t)hex[d2]));
                    }
                }
            }
        }
        p.xcnt[s] = p.nx - p.xfirst[s];
        for (uint32_t b = 0x20; b < 0x80; b++)
            add_cp(&p, b, b == '"' || b == '\\' ? 0 : gm_step(m, S, b), &cr);
        for (uint32_t l = 0xC2; l <= 0xDF && !p.bad; l++) {
            uint32_t t1 = gm_step(m, S, l);
            for (uint32_t c1 = 0x80; t1 && c1 <= 0xBF; c1++)
                add_cp(&p, (l & 0x1F) << 6 | (c1 & 0x3F), gm_step(m, t1, c1), &cr);
        }
        for (uint32_t l = 0xE0; l <= 0xEF && !p.bad; l++) {
            uint32_t t1 = gm_step(m, S, l);
            uint32_t a = l == 0xE0 ? 0xA0 : 0x80, z = l == 0xED ? 0x9F : 0xBF;
            for (uint32_t c1 = a; t1 && c1 <= z; c1++) {
                uint32_t t2 = gm_step(m, t1, c1);
                for (uint32_t c2 = 0x80; t2 && c2 <= 0xBF; c2++)
                    add_cp(&p, (l & 0x0F) << 12 | (c1 & 0x3F) << 6 | (c2 & 0x3F), gm_step(m, t2, c2), &cr);
            }
        }
        if (m->bad)
            p.bad = CERR_NOMEM;
        cnt[s] = p.nr - first[s];
    }
    if (p.bad) {
        rc = p.bad == CERR_NOMEM ? cerr_set(e, CERR_NOMEM, "out of memory")
                                 : cerr_set(e, CERR_UNSUPPORTED, "the pattern needs an escape or is too large");
        goto out;
    }
    long cap = hi >= 0 ? hi : lo; /* unbounded: the count saturates at minLength */
    if ((long)p.n * (cap + 1) > LP_MAX_RULES) {
        rc = cerr_set(e, CERR_UNSUPPORTED, "the pattern and its length bound make too many states");
        goto out;
    }
    /* live (state, count): an accepting pair is reachable from it */
    size_t np = (size_t)p.n * (size_t)(cap + 1);
    live = calloc(np, 1);
    if (!live) {
        rc = CERR_NOMEM;
        goto out;
    }
#define IX(s, c) ((size_t)(s) * (size_t)(cap + 1) + (size_t)(c))
    for (int changed = 1; changed;) {
        changed = 0;
        for (int s = 0; s < p.n; s++)
            for (long c = 0; c <= cap; c++) {
                if (live[IX(s, c)])
                    continue;
                int l = accepting(m, p.set[s]) && c >= lo;
                long nc = c + 1 > cap ? (hi >= 0 ? -1 : cap) : c + 1;
                for (int k = 0; !l && nc >= 0 && k < cnt[s]; k++)
                    l = live[IX(p.r[first[s] + k].to, nc)];
                for (int k = 0; !l && nc >= 0 && k < p.xcnt[s]; k++)
                    l = live[IX(p.x[p.xfirst[s] + k].to, nc)];
                if (l) {
                    live[IX(s, c)] = 1;
                    changed = 1;
                }
            }
    }
    if (!live[IX(0, 0)]) {
        rc = cerr_set(e, CERR_INVALID, "no string matches the pattern within the length bounds");
        goto out;
    }
    int base = *next_rule;
    *next_rule += (int)np;
    for (int s = 0; s < p.n; s++)
        for (long c = 0; c <= cap; c++) {
            if (!live[IX(s, c)])
                continue;
            sbuf_printf(rules, "r%d ::= ", base + (int)IX(s, c));
            int any = 0;
            if (accepting(m, p.set[s]) && c >= lo) {
                sbuf_puts(rules, "\"\"");
                any = 1;
            }
            long nc = c + 1 > cap ? (hi >= 0 ? -1 : cap) : c + 1;
            for (int to = 0; nc >= 0 && to < p.n; to++) {
                if (!live[IX(to, nc)])
                    continue;
                int open = 0;
                for (int k = 0; k < cnt[s]; k++) {
                    const struct lp_range *r = &p.r[first[s] + k];
                    if (r->to != to)
                        continue;
                    if (!open)
                        sbuf_puts(rules, any ? " | [" : "[");
                    open = any = 1;
                    if (r->lo == r->hi)
                        sbuf_printf(rules, "\\U%08X", r->lo);
                    else
                        sbuf_printf(rules, "\\U%08X-\\U%08X", r->lo, r->hi);
                }
                if (open)
                    sbuf_printf(rules, "] r%d", base + (int)IX(to, nc));
                for (int k = 0; k < p.xcnt[s]; k++) {
                    const struct lp_esc *x = &p.x[p.xfirst[s] + k];
                    if (x->to != to)
                        continue;
                    sbuf_puts(rules, any ? " | " : "");
                    any = 1;
                    gram_lit(rules, x->s, (size_t)x->n);
                    sbuf_printf(rules, " r%d", base + (int)IX(to, nc));
                }
            }
            sbuf_puts(rules, "\n");
        }
#undef IX
    sbuf_printf(expr, "r%d", base);
out:
    free(live);
    free(first);
    free(cnt);
    free(p.r);
    free(p.x);
    free(p.xfirst);
    free(p.xcnt);
    gram_matcher_free(p.m);
    gram_unref(g);
    sbuf_free(&t);
    return rc;
}
