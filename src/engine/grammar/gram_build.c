/* gram_build.c — building the byte-level grammar: rules, UTF-8 classes, repetition,
 * and the checks (every rule defined, no left recursion) before flattening. */
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/gram_int.h"
#include "tokenizer/tok.h"

uint64_t gram_hash_bytes(const char *p, size_t n)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)p[i]) * 1099511628211ull;
    return h;
}

void gb_init(struct gb *b)
{
    memset(b, 0, sizeof *b);
    for (int i = 0; i < 256; i++)
        b->byte_cls[i] = -1;
}

void gb_deinit(struct gb *b)
{
    for (int i = 0; i < b->n_rules; i++) {
        free(b->rules[i].name);
        free(b->rules[i].alts);
    }
    for (int i = 0; i < b->n_seqs; i++)
        free(b->seqs[i].v);
    free(b->rules);
    free(b->seqs);
    free(b->cls);
    memset(b, 0, sizeof *b);
}

static int grow(void **p, int *cap, int need, size_t el)
{
    if (need <= *cap)
        return 0;
    int nc = *cap ? *cap * 2 : 16;
    while (nc < need)
        nc *= 2;
    void *q = realloc(*p, (size_t)nc * el);
    if (!q)
        return CERR_NOMEM;
    *p = q;
    *cap = nc;
    return 0;
}

int gb_rule(struct gb *b, const char *name, size_t n)
{
    if (name)
        for (int i = 0; i < b->n_rules; i++)
            if (b->rules[i].name && strlen(b->rules[i].name) == n &&
                !memcmp(b->rules[i].name, name, n))
                return i;
    if (b->n_rules >= GRAM_MAX_RULES || grow((void **)&b->rules, &b->cap_rules, b->n_rules + 1,
                                              sizeof *b->rules)) {
        b->oom = 1;
        return -1;
    }
    struct gb_rule *r = &b->rules[b->n_rules];
    memset(r, 0, sizeof *r);
    if (name) {
        r->name = malloc(n + 1);
        if (!r->name) {
            b->oom = 1;
            return -1;
        }
        memcpy(r->name, name, n);
        r->name[n] = 0;
    } else {
        r->defined = 1;
    }
    return b->n_rules++;
}

int gb_push(struct gseq *s, int kind, int arg)
{
    if (arg < 0 || grow((void **)&s->v, &s->cap, s->n + 1, sizeof *s->v))
        return CERR_NOMEM;
    s->v[s->n].kind = (uint32_t)kind;
    s->v[s->n].arg = (uint32_t)arg;
    s->n++;
    return 0;
}

int gb_add_alt(struct gb *b, int rule, struct gseq *s)
{
    struct gb_rule *r = &b->rules[rule];
    if (grow((void **)&b->seqs, &b->cap_seqs, b->n_seqs + 1, sizeof *b->seqs) ||
        grow((void **)&r->alts, &r->cap_alts, r->n_alts + 1, sizeof *r->alts)) {
        free(s->v);
        memset(s, 0, sizeof *s);
        b->oom = 1;
        return CERR_NOMEM;
    }
    b->n_syms += s->n + 1;
    b->seqs[b->n_seqs] = *s;
    memset(s, 0, sizeof *s);
    r->alts[r->n_alts++] = b->n_seqs++;
    return 0;
}

int gb_cls(struct gb *b, const struct gcls *c)
{
    for (int i = 0; i < b->n_cls; i++)
        if (!memcmp(&b->cls[i], c, sizeof *c))
            return i;
    if (grow((void **)&b->cls, &b->cap_cls, b->n_cls + 1, sizeof *b->cls)) {
        b->oom = 1;
        return -1;
    }
    b->cls[b->n_cls] = *c;
    return b->n_cls++;
}

static int byte_cls(struct gb *b, uint8_t c)
{
    if (b->byte_cls[c] < 0) {
        struct gcls k = {{0}};
        gcls_set(&k, c);
        b->byte_cls[c] = gb_cls(b, &k);
    }
    return b->byte_cls[c];
}

int gb_push_bytes(struct gb *b, struct gseq *s, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (gb_push(s, GS_TERM, byte_cls(b, (uint8_t)p[i])))
            return CERR_NOMEM;
    return 0;
}

/* ---- code-point ranges to UTF-8 byte-range sequences --------------------------------- */

static int utf8_enc(uint32_t cp, uint8_t *o) { return tok_utf8_put(cp, (char *)o); }

/* Emits [lo, hi] (same encoded length) as sequences of byte ranges: alternatives of rule. */
static int utf8_split(struct gb *b, int rule, uint32_t lo, uint32_t hi)
{
    static const uint32_t lim[] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
    for (int i = 0; i < 3; i++)
        if (lo <= lim[i] && hi > lim[i])
            return utf8_split(b, rule, lo, lim[i]) || utf8_split(b, rule, lim[i] + 1, hi);
    if (lo <= 0xDFFF && hi >= 0xD800) { /* surrogates are not characters */
        if (lo < 0xD800 && utf8_split(b, rule, lo, 0xD7FF))
            return CERR_NOMEM;
        if (hi > 0xDFFF && utf8_split(b, rule, 0xE000, hi))
            return CERR_NOMEM;
        return 0;
    }
    if (hi >= 0x80)
        for (int i = 1; i < 4; i++) {
            uint32_t m = (1u << (6 * i)) - 1;
            if ((lo & ~m) != (hi & ~m)) {
                if ((lo & m) != 0)
                    return utf8_split(b, rule, lo, lo | m) || utf8_split(b, rule, (lo | m) + 1, hi);
                if ((hi & m) != m)
                    return utf8_split(b, rule, lo, (hi & ~m) - 1) || utf8_split(b, rule, hi & ~m, hi);
            }
        }
    uint8_t a[4], z[4];
    int n = utf8_enc(lo, a);
    utf8_enc(hi, z);
    struct gseq s = {0};
    for (int i = 0; i < n; i++) {
        struct gcls c = {{0}};
        for (unsigned x = a[i]; x <= z[i]; x++)
            gcls_set(&c, x);
        if (gb_push(&s, GS_TERM, gb_cls(b, &c))) {
            free(s.v);
            return CERR_NOMEM;
        }
    }
    return gb_add_alt(b, rule, &s);
}

int gb_push_ranges(struct gb *b, struct gseq *s, const uint32_t *lo, const uint32_t *hi, int n)
{
    struct gcls ascii = {{0}};
    int any_ascii = 0, multi = 0;
    for (int i = 0; i < n; i++) {
        for (uint32_t c = lo[i]; c <= hi[i] && c < 0x80; c++) {
            gcls_set(&ascii, c);
            any_ascii = 1;
        }
        if (hi[i] >= 0x80)
            multi = 1;
    }
    if (!multi)
        return any_ascii ? gb_push(s, GS_TERM, gb_cls(b, &ascii)) : CERR_INVALID;
    int r = gb_rule(b, NULL, 0);
    if (r < 0)
        return CERR_NOMEM;
    if (any_ascii) {
        struct gseq a = {0};
        if (gb_push(&a, GS_TERM, gb_cls(b, &ascii)) || gb_add_alt(b, r, &a))
            return CERR_NOMEM;
    }
    for (int i = 0; i < n; i++)
        if (hi[i] >= 0x80 && utf8_split(b, r, lo[i] < 0x80 ? 0x80 : lo[i], hi[i]))
            return CERR_NOMEM;
    return gb_push(s, GS_RULE, r);
}

/* ---- repetition --------------------------------------------------------------------- */

#define GRAM_MAX_REPEAT 50000

/* Nullability of rule r from the rules defined so far: 1 yes, 0 no or not known (an
 * undefined rule, or a cycle: the rule on the DFS path counts as not nullable, so the answer
 * never says yes wrongly). memo (n_rules): 0 unknown, 1 on the path, 2 no, 3 yes. */
static int rule_nullable(const struct gb *b, int r, uint8_t *memo, int depth)
{
    if (memo[r] >= 2)
        return memo[r] == 3;
    if (memo[r] == 1 || !b->rules[r].defined || depth > 200)
        return 0;
    memo[r] = 1;
    int yes = 0;
    for (int a = 0; a < b->rules[r].n_alts && !yes; a++) {
        const struct gseq *q = &b->seqs[b->rules[r].alts[a]];
        int ok = 1;
        for (int i = 0; i < q->n && ok; i++)
            ok = q->v[i].kind == GS_RULE && rule_nullable(b, (int)q->v[i].arg, memo, depth + 1);
        yes = ok;
    }
    memo[r] = yes ? 3 : 2;
    return yes;
}

/* The pieces of a nullable symbol that consume text, as alternatives of rule dst: under a
 * star, (X)* = (X minus the empty string)*, and an alternative made only of nullable
 * symbols s1 .. sk may be replaced by s1 | .. | sk there (each piece alone is the
 * alternative with the others empty; a run of pieces is a run of alternatives). seen
 * (n_rules) stops at rules already taken apart. */
static int add_pieces(struct gb *b, int dst, struct gsym x, uint8_t *memo, uint8_t *seen)
{
    if (x.kind != GS_RULE || !rule_nullable(b, (int)x.arg, memo, 0)) {
        struct gseq a = {0};
        return gb_push(&a, (int)x.kind, (int)x.arg) || gb_add_alt(b, dst, &a);
    }
    if (seen[x.arg])
        return 0;
    seen[x.arg] = 1;
    for (int i = 0; i < b->rules[x.arg].n_alts; i++) {
        int ai = b->rules[x.arg].alts[i], all = 1;
        for (int j = 0; j < b->seqs[ai].n && all; j++)
            all = b->seqs[ai].v[j].kind == GS_RULE &&
                  rule_nullable(b, (int)b->seqs[ai].v[j].arg, memo, 0);
        if (!all) { /* consumes text whatever it matches: kept as it is */
            struct gseq a = {0};
            for (int j = 0; j < b->seqs[ai].n; j++)
                if (gb_push(&a, (int)b->seqs[ai].v[j].kind, (int)b->seqs[ai].v[j].arg)) {
                    free(a.v);
                    return CERR_NOMEM;
                }
            if (gb_add_alt(b, dst, &a))
                return CERR_NOMEM;
            continue;
        }
        for (int j = 0; j < b->seqs[ai].n; j++) {
            struct gsym y = b->seqs[ai].v[j]; /* (seqs may move as rules grow) */
            if (add_pieces(b, dst, y, memo, seen))
                return CERR_NOMEM;
        }
    }
    return 0;
}

/* x* where x can match nothing: x becomes its text-consuming pieces (add_pieces), so the
 * repetition's rule is not left-recursive. *x unchanged (0) when x is not known to be
 * nullable; 1 when it was replaced (x->arg = the pieces' rule, or -1 when x matches only
 * the empty string); negative on failure. */
static int denull_star(struct gb *b, struct gsym *x)
{
    if (x->kind != GS_RULE)
        return 0;
    int n = b->n_rules;
    uint8_t *memo = calloc((size_t)n + 1, 1), *seen = calloc((size_t)n + 1, 1);
    if (!memo || !seen) {
        free(memo), free(seen);
        return CERR_NOMEM;
    }
    int rc = 0;
    if (rule_nullable(b, (int)x->arg, memo, 0)) {
        int w = gb_rule(b, NULL, 0);
        rc = w < 0 ? CERR_NOMEM : add_pieces(b, w, *x, memo, seen);
        if (!rc) {
            x->arg = b->rules[w].n_alts ? (uint32_t)w : (uint32_t)0x3fffffff;
            rc = 1;
        }
    }
    free(memo), free(seen);
    return rc;
}

int gb_push_repeat(struct gb *b, struct gseq *dst, struct gseq *item, int mn, int mx,
                   struct cerr *e)
{
    if (mn < 0 || mn > GRAM_MAX_REPEAT || mx > GRAM_MAX_REPEAT || (mx >= 0 && mx < mn)) {
        free(item->v);
        memset(item, 0, sizeof *item);
        return cerr_set(e, CERR_LIMIT, "repetition {%d,%d} is out of range (0..%d, min <= max)",
                        mn, mx, GRAM_MAX_REPEAT);
    }
    struct gsym x;
    if (item->n == 1) {
        x = item->v[0];
        free(item->v);
        memset(item, 0, sizeof *item);
    } else {
        int w = gb_rule(b, NULL, 0);
        if (w < 0 || gb_add_alt(b, w, item))
            return cerr_set(e, CERR_NOMEM, "out of memory");
        x.kind = GS_RULE;
        x.arg = (uint32_t)w;
    }
    if (mx < 0) { /* X{mn,} of a nullable X = X* = (X's pieces)* */
        int dn = denull_star(b, &x);
        if (dn < 0)
            return cerr_set(e, CERR_NOMEM, "out of memory");
        if (dn && x.arg == 0x3fffffff)
            return 0; /* only the empty string */
        if (dn)
            mn = 0;
    }
    for (int i = 0; i < mn; i++)
        if (gb_push(dst, (int)x.kind, (int)x.arg))
            return cerr_set(e, CERR_NOMEM, "out of memory");
    if (mx == mn)
        return 0;
    int prev = -1;
    int k = mx < 0 ? 1 : mx - mn;
    for (int j = 0; j < k; j++) {
        int r = gb_rule(b, NULL, 0);
        struct gseq a = {0}, z = {0};
        if (r < 0 || gb_push(&a, (int)x.kind, (int)x.arg))
            return cerr_set(e, CERR_NOMEM, "out of memory");
        int next = mx < 0 ? r : prev; /* X* : R ::= X R | ; X{0,k}: O_j ::= X O_j-1 | */
        if ((next >= 0 && gb_push(&a, GS_RULE, next)) || gb_add_alt(b, r, &a) ||
            gb_add_alt(b, r, &z))
            return cerr_set(e, CERR_NOMEM, "out of memory");
        prev = r;
    }
    return gb_push(dst, GS_RULE, prev) ? cerr_set(e, CERR_NOMEM, "out of memory") : 0;
}

/* ---- checks and flattening ------------------------------------------------------------ */

static const char *rule_label(const struct gb *b, int r) { return b->rules[r].name ? b->rules[r].name : "(group)"; }

/* left-recursion DFS: state 0 new, 1 on the path, 2 done */
static int left_dfs(const struct gb *b, const uint8_t *nullable, uint8_t *st, int r, int depth,
                    int *bad)
{
    if (st[r] == 1) {
        *bad = r;
        return 1;
    }
    if (st[r] == 2)
        return 0;
    if (depth > 100000)
        return 0;
    st[r] = 1;
    const struct gb_rule *R = &b->rules[r];
    for (int a = 0; a < R->n_alts; a++) {
        const struct gseq *s = &b->seqs[R->alts[a]];
        for (int i = 0; i < s->n; i++) {
            if (s->v[i].kind != GS_RULE)
                break;
            if (left_dfs(b, nullable, st, (int)s->v[i].arg, depth + 1, bad))
                return 1;
            if (!nullable[s->v[i].arg])
                break;
        }
    }
    st[r] = 2;
    return 0;
}

int gb_finish(struct gb *b, int root, uint64_t hash, struct gram **out, struct cerr *e)
{
    *out = NULL;
    if (b->oom)
        return cerr_set(e, CERR_NOMEM, "out of memory building the grammar");
    if (b->n_syms > GRAM_MAX_SYMS)
        return cerr_set(e, CERR_LIMIT, "the grammar is too large (%ld symbols, at most %d)",
                        b->n_syms, GRAM_MAX_SYMS);
    for (int i = 0; i < b->n_rules; i++)
        if (!b->rules[i].defined)
            return cerr_set(e, CERR_INVALID, "line %d column %d: rule '%s' is not defined",
                            b->rules[i].line, b->rules[i].col, b->rules[i].name);
    int n = b->n_rules;
    uint8_t *nullable = calloc((size_t)n + 1, 1), *st = calloc((size_t)n + 1, 1);
    if (!nullable || !st) {
        free(nullable);
        free(st);
        return cerr_set(e, CERR_NOMEM, "out of memory");
    }
    for (int changed = 1; changed;) {
        changed = 0;
        for (int r = 0; r < n; r++) {
            if (nullable[r])
                continue;
            for (int a = 0; a < b->rules[r].n_alts && !nullable[r]; a++) {
                const struct gseq *s = &b->seqs[b->rules[r].alts[a]];
                int ok = 1;
                for (int i = 0; i < s->n && ok; i++)
                    ok = s->v[i].kind == GS_RULE && nullable[s->v[i].arg];
                if (ok)
                    nullable[r] = changed = 1;
            }
        }
    }
    int bad = -1;
    for (int r = 0; r < n && bad < 0; r++)
        left_dfs(b, nullable, st, r, 0, &bad);
    free(nullable);
    free(st);
    if (bad >= 0)
        return cerr_set(e, CERR_INVALID,
                        "rule '%s' is left-recursive (or repeats something that can match "
                        "nothing); rewrite it so each repetition consumes text first",
                        rule_label(b, bad));
    struct gram *g = calloc(1, sizeof *g);
    if (!g)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    g->refs = 1;
    g->hash = hash;
    g->n_rules = n;
    g->root = root;
    g->alt0 = malloc((size_t)n * sizeof *g->alt0);
    g->nalt = malloc((size_t)n * sizeof *g->nalt);
    g->alts = malloc((size_t)(b->n_seqs + 1) * sizeof *g->alts);
    g->syms = malloc((size_t)(b->n_syms + 2) * sizeof *g->syms);
    g->cls = malloc((size_t)(b->n_cls + 1) * sizeof *g->cls);
    if (!g->alt0 || !g->nalt || !g->alts || !g->syms || !g->cls) {
        gram_unref(g);
        return cerr_set(e, CERR_NOMEM, "out of memory");
    }
    if (b->n_cls)
        memcpy(g->cls, b->cls, (size_t)b->n_cls * sizeof *g->cls);
    g->n_cls = b->n_cls;
    /* syms[0] is an END no alternative uses: position 0 never appears in a stack */
    g->syms[0].kind = GS_END;
    g->syms[0].arg = 0;
    int ns = 1, na = 0;
    for (int r = 0; r < n; r++) {
        g->alt0[r] = (uint32_t)na;
        g->nalt[r] = (uint32_t)b->rules[r].n_alts;
        for (int a = 0; a < b->rules[r].n_alts; a++) {
            const struct gseq *s = &b->seqs[b->rules[r].alts[a]];
            g->alts[na++] = (uint32_t)ns;
            if (s->n)
                memcpy(g->syms + ns, s->v, (size_t)s->n * sizeof *s->v);
            ns += s->n;
            g->syms[ns].kind = GS_END;
            g->syms[ns].arg = 0;
            ns++;
        }
    }
    g->n_alts = na;
    g->n_syms = ns;
    *out = g;
    return 0;
}

struct gram *gram_ref(struct gram *g)
{
    if (g)
        __atomic_add_fetch(&g->refs, 1, __ATOMIC_RELAXED);
    return g;
}

void gram_unref(struct gram *g)
{
    if (!g || __atomic_sub_fetch(&g->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    free(g->alt0);
    free(g->nalt);
    free(g->alts);
    free(g->syms);
    free(g->cls);
    free(g);
}

uint64_t gram_hash(const struct gram *g) { return g->hash; }
int gram_n_rules(const struct gram *g) { return g->n_rules; }
