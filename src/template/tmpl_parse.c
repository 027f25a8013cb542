/* tmpl_parse.c — tokens -> syntax tree (struct tnode), recursive descent.
 *
 * The grammar and operator precedence follow jinja2's parser: condexpr < or < and < not <
 * compare (==, !=, <, <=, >, >=, in, not in; chained) < + - < ~ < * / // % < ** < unary
 * < primary with postfix (.attr, [item/slice], (call)) and filters/tests (`|f`, `is t`),
 * which bind tighter than any binary operator. Statements: if/elif/else, for (with
 * `if` filter and else), set (expression, namespace attribute, block), macro, call,
 * filter, break/continue, generation. Nesting is bounded (TMPL_MAX_DEPTH).
 */
#include <stdio.h>
#include <string.h>

#include "template/tmpl_int.h"

struct parser {
    struct arena *a;
    const struct token *t;
    size_t n, pos;
    int depth;
    struct cerr *e;
    int err;
};

struct nvec {
    struct tnode **v;
    int n, cap;
};

static const struct token *cur(struct parser *P)
{
    return &P->t[P->pos < P->n ? P->pos : P->n - 1];
}

static const struct token *peek(struct parser *P, size_t k)
{
    size_t i = P->pos + k;
    return &P->t[i < P->n ? i : P->n - 1];
}

static void advance(struct parser *P)
{
    if (P->pos + 1 < P->n)
        P->pos++;
}

static int fail(struct parser *P, const char *fmt, const char *arg)
{
    if (!P->err) {
        char m[256];
        snprintf(m, sizeof m, fmt, arg ? arg : "");
        P->err = cerr_set(P->e, CERR_FORMAT, "template syntax error: line %d: %s", cur(P)->line, m);
    }
    return P->err;
}

static struct tnode *node(struct parser *P, int kind)
{
    struct tnode *n = arena_calloc(P->a, 1, sizeof *n);
    if (!n) {
        if (!P->err)
            P->err = cerr_set(P->e, CERR_NOMEM, "out of memory parsing template");
        return NULL;
    }
    n->kind = kind;
    n->line = cur(P)->line;
    return n;
}

static int vpush(struct parser *P, struct nvec *v, struct tnode *x)
{
    if (v->n == v->cap) {
        int nc = v->cap ? v->cap * 2 : 4;
        struct tnode **nv = arena_alloc(P->a, (size_t)nc * sizeof *nv);
        if (!nv)
            return P->err = cerr_set(P->e, CERR_NOMEM, "out of memory parsing template");
        if (v->n)
            memcpy(nv, v->v, (size_t)v->n * sizeof *nv);
        v->v = nv;
        v->cap = nc;
    }
    v->v[v->n++] = x;
    return 0;
}

static int is_op(const struct token *t, const char *op)
{
    return t->type == TK_OP && strcmp(t->s, op) == 0;
}

static int is_name(const struct token *t, const char *name)
{
    return t->type == TK_NAME && strcmp(t->s, name) == 0;
}

static int expect_op(struct parser *P, const char *op)
{
    if (!is_op(cur(P), op))
        return fail(P, "expected '%s'", op);
    advance(P);
    return 0;
}

static const char *expect_name(struct parser *P)
{
    if (cur(P)->type != TK_NAME) {
        fail(P, "expected a name%s", "");
        return NULL;
    }
    const char *s = cur(P)->s;
    advance(P);
    return s;
}

static struct tnode *parse_expr(struct parser *P, int with_cond);
static struct tnode *parse_unary(struct parser *P, int with_filter);
static struct tnode *parse_or(struct parser *P);

static int enter(struct parser *P)
{
    if (++P->depth > TMPL_MAX_DEPTH) {
        if (!P->err)
            P->err = cerr_set(P->e, CERR_LIMIT, "template syntax error: line %d: nesting deeper than %d",
                              cur(P)->line, TMPL_MAX_DEPTH);
        return -1;
    }
    return 0;
}

/* (args...) after the '(' was seen: positional and keyword arguments into n. */
static int parse_args(struct parser *P, struct tnode *n)
{
    struct nvec pos = {0}, kwv = {0};
    const char *kwn[64];
    int nkw = 0;
    if (expect_op(P, "("))
        return P->err;
    while (!is_op(cur(P), ")")) {
        if (pos.n + nkw > 0 && expect_op(P, ","))
            return P->err;
        if (is_op(cur(P), ")"))
            break;
        if (cur(P)->type == TK_NAME && is_op(peek(P, 1), "=")) {
            if (nkw >= 64)
                return fail(P, "too many keyword arguments%s", "");
            kwn[nkw++] = cur(P)->s;
            advance(P);
            advance(P);
            struct tnode *v = parse_expr(P, 1);
            if (!v || vpush(P, &kwv, v))
                return P->err;
        } else {
            if (nkw)
                return fail(P, "positional argument after keyword argument%s", "");
            struct tnode *v = parse_expr(P, 1);
            if (!v || vpush(P, &pos, v))
                return P->err;
        }
    }
    advance(P);
    n->kids = pos.v;
    n->nkids = pos.n;
    n->kids2 = kwv.v;
    n->nkids2 = kwv.n;
    if (nkw) {
        n->names = arena_alloc(P->a, (size_t)nkw * sizeof *n->names);
        if (!n->names)
            return P->err = cerr_set(P->e, CERR_NOMEM, "out of memory parsing template");
        memcpy(n->names, kwn, (size_t)nkw * sizeof *kwn);
    }
    n->nnames = nkw;
    return 0;
}

static struct tnode *parse_primary(struct parser *P)
{
    const struct token *t = cur(P);
    struct tnode *n;
    if (t->type == TK_NAME) {
        n = node(P, N_CONST);
        if (!n)
            return NULL;
        if (!strcmp(t->s, "true") || !strcmp(t->s, "True"))
            n->lit = tv_bool(1);
        else if (!strcmp(t->s, "false") || !strcmp(t->s, "False"))
            n->lit = tv_bool(0);
        else if (!strcmp(t->s, "none") || !strcmp(t->s, "None"))
            n->lit = tv_none();
        else {
            n->kind = N_NAME;
            n->s = t->s;
            n->n = t->n;
        }
        advance(P);
        return n;
    }
    if (t->type == TK_STRING) {
        n = node(P, N_CONST);
        if (!n)
            return NULL;
        size_t total = 0, k = 0;
        while (peek(P, k)->type == TK_STRING)
            total += peek(P, k++)->n;
        if (k == 1) {
            n->lit = tv_str(t->s, t->n);
            advance(P);
            return n;
        }
        char *buf = arena_alloc(P->a, total + 1);
        if (!buf) {
            P->err = cerr_set(P->e, CERR_NOMEM, "out of memory parsing template");
            return NULL;
        }
        size_t o = 0;
        while (cur(P)->type == TK_STRING) {
            memcpy(buf + o, cur(P)->s, cur(P)->n);
            o += cur(P)->n;
            advance(P);
        }
        buf[o] = 0;
        n->lit = tv_str(buf, o);
        return n;
    }
    if (t->type == TK_INT || t->type == TK_FLOAT) {
        n = node(P, N_CONST);
        if (!n)
            return NULL;
        n->lit = t->type == TK_INT ? tv_int(t->i) : tv_float(t->f);
        advance(P);
        return n;
    }
    if (is_op(t, "(")) {
        advance(P);
        if (is_op(cur(P), ")")) {
            advance(P);
            return node(P, N_TUPLE);
        }
        struct tnode *x = parse_expr(P, 1);
        if (!x)
            return NULL;
        if (is_op(cur(P), ",")) {
            struct nvec items = {0};
            if (vpush(P, &items, x))
                return NULL;
            while (is_op(cur(P), ",")) {
                advance(P);
                if (is_op(cur(P), ")"))
                    break;
                struct tnode *y = parse_expr(P, 1);
                if (!y || vpush(P, &items, y))
                    return NULL;
            }
            x = node(P, N_TUPLE);
            if (!x)
                return NULL;
            x->kids = items.v;
            x->nkids = items.n;
        }
        if (expect_op(P, ")"))
            return NULL;
        return x;
    }
    if (is_op(t, "[")) {
        advance(P);
        struct nvec items = {0};
        while (!is_op(cur(P), "]")) {
            if (items.n && expect_op(P, ","))
                return NULL;
            if (is_op(cur(P), "]"))
                break;
            struct tnode *y = parse_expr(P, 1);
            if (!y || vpush(P, &items, y))
                return NULL;
        }
        advance(P);
        n = node(P, N_LIST);
        if (!n)
            return NULL;
        n->kids = items.v;
        n->nkids = items.n;
        return n;
    }
    if (is_op(t, "{")) {
        advance(P);
        struct nvec keys = {0}, vals = {0};
        while (!is_op(cur(P), "}")) {
            if (keys.n && expect_op(P, ","))
                return NULL;
            if (is_op(cur(P), "}"))
                break;
            struct tnode *k = parse_expr(P, 1);
            if (!k || expect_op(P, ":"))
                return NULL;
            struct tnode *v = parse_expr(P, 1);
            if (!v || vpush(P, &keys, k) || vpush(P, &vals, v))
                return NULL;
        }
        advance(P);
        n = node(P, N_DICT);
        if (!n)
            return NULL;
        n->kids = keys.v;
        n->nkids = keys.n;
        n->kids2 = vals.v;
        n->nkids2 = vals.n;
        return n;
    }
    if (t->type == TK_EOF || t->type == TK_VAR_END || t->type == TK_BLOCK_END)
        fail(P, "expected an expression, got end of %s", t->type == TK_EOF ? "template" : "tag");
    else
        fail(P, "unexpected '%s'", t->type == TK_OP ? t->s : "token");
    return NULL;
}

/* [start:stop:step] or [expr] after '[' */
static struct tnode *parse_subscript(struct parser *P, struct tnode *obj)
{
    struct tnode *parts[3] = {0};
    int colons = 0;
    if (!is_op(cur(P), ":")) {
        parts[0] = parse_expr(P, 1);
        if (!parts[0])
            return NULL;
    }
    while (is_op(cur(P), ":") && colons < 2) {
        advance(P);
        colons++;
        if (!is_op(cur(P), ":") && !is_op(cur(P), "]")) {
            parts[colons] = parse_expr(P, 1);
            if (!parts[colons])
                return NULL;
        }
    }
    if (expect_op(P, "]"))
        return NULL;
    struct tnode *n = node(P, colons ? N_SLICE : N_ITEM);
    if (!n)
        return NULL;
    n->a = obj;
    n->b = parts[0];
    n->c = parts[1];
    n->d = parts[2];
    return n;
}

static struct tnode *parse_postfix(struct parser *P, struct tnode *x)
{
    for (;;) {
        const struct token *t = cur(P);
        if (is_op(t, ".")) {
            advance(P);
            t = cur(P);
            struct tnode *n;
            if (t->type == TK_NAME) {
                n = node(P, N_ATTR);
                if (!n)
                    return NULL;
                n->s = t->s;
                n->n = t->n;
            } else if (t->type == TK_INT) {
                n = node(P, N_ITEM);
                if (!n)
                    return NULL;
                n->b = node(P, N_CONST);
                if (!n->b)
                    return NULL;
                n->b->lit = tv_int(t->i);
            } else {
                fail(P, "expected an attribute name after '.'%s", "");
                return NULL;
            }
            advance(P);
            n->a = x;
            x = n;
        } else if (is_op(t, "[")) {
            advance(P);
            x = parse_subscript(P, x);
            if (!x)
                return NULL;
        } else if (is_op(t, "(")) {
            struct tnode *n = node(P, N_CALL);
            if (!n || parse_args(P, n))
                return NULL;
            n->a = x;
            x = n;
        } else {
            return x;
        }
    }
}

static const char *dotted_name(struct parser *P)
{
    const char *nm = expect_name(P);
    if (!nm)
        return NULL;
    while (is_op(cur(P), ".") && peek(P, 1)->type == TK_NAME) {
        advance(P);
        size_t l1 = strlen(nm), l2 = cur(P)->n;
        char *b = arena_alloc(P->a, l1 + l2 + 2);
        if (!b) {
            P->err = cerr_set(P->e, CERR_NOMEM, "out of memory parsing template");
            return NULL;
        }
        memcpy(b, nm, l1);
        b[l1] = '.';
        memcpy(b + l1 + 1, cur(P)->s, l2 + 1);
        nm = b;
        advance(P);
    }
    return nm;
}

static struct tnode *parse_filter_expr(struct parser *P, struct tnode *x)
{
    for (;;) {
        const struct token *t = cur(P);
        if (is_op(t, "|")) {
            advance(P);
            struct tnode *n = node(P, N_FILTER);
            if (!n)
                return NULL;
            n->s = dotted_name(P);
            if (!n->s)
                return NULL;
            if (is_op(cur(P), "(") && parse_args(P, n))
                return NULL;
            n->a = x;
            x = n;
        } else if (is_name(t, "is")) {
            advance(P);
            struct tnode *n = node(P, N_TEST);
            if (!n)
                return NULL;
            if (is_name(cur(P), "not")) {
                n->neg = 1;
                advance(P);
            }
            n->s = dotted_name(P);
            if (!n->s)
                return NULL;
            t = cur(P);
            if (is_op(t, "(")) {
                if (parse_args(P, n))
                    return NULL;
            } else if ((t->type == TK_NAME || t->type == TK_STRING || t->type == TK_INT ||
                        t->type == TK_FLOAT || is_op(t, "[") || is_op(t, "{")) &&
                       !is_name(t, "else") && !is_name(t, "or") && !is_name(t, "and")) {
                if (is_name(t, "is")) {
                    fail(P, "you cannot chain multiple tests with is%s", "");
                    return NULL;
                }
                struct tnode *arg = parse_primary(P);
                if (!arg || !(arg = parse_postfix(P, arg)))
                    return NULL;
                n->kids = arena_alloc(P->a, sizeof *n->kids);
                if (!n->kids) {
                    P->err = cerr_set(P->e, CERR_NOMEM, "out of memory parsing template");
                    return NULL;
                }
                n->kids[0] = arg;
                n->nkids = 1;
            }
            n->a = x;
            x = n;
        } else if (is_op(t, "(")) {
            struct tnode *n = node(P, N_CALL);
            if (!n || parse_args(P, n))
                return NULL;
            n->a = x;
            x = n;
        } else {
            return x;
        }
    }
}

static struct tnode *parse_unary(struct parser *P, int with_filter)
{
    if (enter(P))
        return NULL;
    struct tnode *x;
    if (is_op(cur(P), "-") || is_op(cur(P), "+")) {
        x = node(P, is_op(cur(P), "-") ? N_NEG : N_POS);
        if (!x)
            return NULL;
        advance(P);
        x->a = parse_unary(P, 0);
        if (!x->a)
            return NULL;
    } else {
        x = parse_primary(P);
        if (!x)
            return NULL;
    }
    x = parse_postfix(P, x);
    if (x && with_filter)
        x = parse_filter_expr(P, x);
    P->depth--;
    return x;
}

static struct tnode *binop(struct parser *P, int kind, const char *op, struct tnode *a,
                           struct tnode *b)
{
    if (!b)
        return NULL;
    struct tnode *n = node(P, kind);
    if (!n)
        return NULL;
    n->s = op;
    n->a = a;
    n->b = b;
    return n;
}

static struct tnode *parse_pow(struct parser *P)
{
    struct tnode *x = parse_unary(P, 1);
    while (x && is_op(cur(P), "**")) {
        advance(P);
        x = binop(P, N_BIN, "**", x, parse_unary(P, 1));
    }
    return x;
}

static struct tnode *parse_math2(struct parser *P)
{
    struct tnode *x = parse_pow(P);
    while (x && (is_op(cur(P), "*") || is_op(cur(P), "/") || is_op(cur(P), "//") ||
                 is_op(cur(P), "%"))) {
        const char *op = cur(P)->s;
        advance(P);
        x = binop(P, N_BIN, op, x, parse_pow(P));
    }
    return x;
}

static struct tnode *parse_concat(struct parser *P)
{
    struct tnode *x = parse_math2(P);
    while (x && is_op(cur(P), "~")) {
        advance(P);
        x = binop(P, N_CONCAT, "~", x, parse_math2(P));
    }
    return x;
}

static struct tnode *parse_math1(struct parser *P)
{
    struct tnode *x = parse_concat(P);
    while (x && (is_op(cur(P), "+") || is_op(cur(P), "-"))) {
        const char *op = cur(P)->s;
        advance(P);
        x = binop(P, N_BIN, op, x, parse_concat(P));
    }
    return x;
}

static struct tnode *parse_compare(struct parser *P)
{
    struct tnode *x = parse_math1(P);
    if (!x)
        return NULL;
    struct nvec operands = {0};
    const char *ops[32];
    int nops = 0;
    for (;;) {
        const struct token *t = cur(P);
        const char *op = NULL;
        if (t->type == TK_OP && (!strcmp(t->s, "==") || !strcmp(t->s, "!=") || !strcmp(t->s, "<") ||
                                 !strcmp(t->s, ">") || !strcmp(t->s, "<=") || !strcmp(t->s, ">="))) {
            op = t->s;
            advance(P);
        } else if (is_name(t, "in")) {
            op = "in";
            advance(P);
        } else if (is_name(t, "not") && is_name(peek(P, 1), "in")) {
            op = "notin";
            advance(P);
            advance(P);
        } else {
            break;
        }
        if (nops >= 32) {
            fail(P, "comparison chain too long%s", "");
            return NULL;
        }
        struct tnode *y = parse_math1(P);
        if (!y || vpush(P, &operands, y))
            return NULL;
        ops[nops++] = op;
    }
    if (!nops)
        return x;
    struct tnode *n = node(P, N_CMP);
    if (!n)
        return NULL;
    n->a = x;
    n->kids = operands.v;
    n->nkids = operands.n;
    n->names = arena_alloc(P->a, (size_t)nops * sizeof *n->names);
    if (!n->names) {
        P->err = cerr_set(P->e, CERR_NOMEM, "out of memory parsing template");
        return NULL;
    }
    memcpy(n->names, ops, (size_t)nops * sizeof *ops);
    n->nnames = nops;
    return n;
}

static struct tnode *parse_not(struct parser *P)
{
    if (is_name(cur(P), "not")) {
        if (enter(P))
            return NULL;
        struct tnode *n = node(P, N_NOT);
        if (!n)
            return NULL;
        advance(P);
        n->a = parse_not(P);
        P->depth--;
        return n->a ? n : NULL;
    }
    return parse_compare(P);
}

static struct tnode *parse_and(struct parser *P)
{
    struct tnode *x = parse_not(P);
    while (x && is_name(cur(P), "and")) {
        advance(P);
        x = binop(P, N_AND, "and", x, parse_not(P));
    }
    return x;
}

static struct tnode *parse_or(struct parser *P)
{
    struct tnode *x = parse_and(P);
    while (x && is_name(cur(P), "or")) {
        advance(P);
        x = binop(P, N_OR, "or", x, parse_and(P));
    }
    return x;
}

static struct tnode *parse_condexpr(struct parser *P)
{
    struct tnode *x = parse_or(P);
    while (x && is_name(cur(P), "if")) {
        advance(P);
        struct tnode *n = node(P, N_COND);
        if (!n)
            return NULL;
        n->b = x;
        n->a = parse_or(P);
        if (!n->a)
            return NULL;
        if (is_name(cur(P), "else")) {
            advance(P);
            n->c = parse_condexpr(P);
            if (!n->c)
                return NULL;
        }
        x = n;
    }
    return x;
}

static struct tnode *parse_expr(struct parser *P, int with_cond)
{
    if (enter(P))
        return NULL;
    struct tnode *x = with_cond ? parse_condexpr(P) : parse_or(P);
    P->depth--;
    return x;
}

/* expr [, expr ...] -> the expr or an N_TUPLE (set x = a, b / for x in a, b). */
static struct tnode *parse_tuple(struct parser *P, int with_cond)
{
    struct tnode *x = parse_expr(P, with_cond);
    if (!x || !is_op(cur(P), ","))
        return x;
    struct nvec items = {0};
    if (vpush(P, &items, x))
        return NULL;
    while (is_op(cur(P), ",")) {
        advance(P);
        if (cur(P)->type == TK_BLOCK_END || cur(P)->type == TK_VAR_END || is_name(cur(P), "if"))
            break;
        struct tnode *y = parse_expr(P, with_cond);
        if (!y || vpush(P, &items, y))
            return NULL;
    }
    struct tnode *n = node(P, N_TUPLE);
    if (!n)
        return NULL;
    n->kids = items.v;
    n->nkids = items.n;
    return n;
}

/* ---- statements ---- */

static struct tnode *parse_body(struct parser *P, const char *const *ends);

static int expect_block_end(struct parser *P)
{
    if (cur(P)->type != TK_BLOCK_END)
        return fail(P, "expected end of statement block ('%%}')%s", "");
    advance(P);
    return 0;
}

/* After a body stopped at "{% <end>", consumes "{% end %}" and returns the end's name. */
static const char *take_end(struct parser *P)
{
    advance(P); /* BLOCK_BEGIN */
    const char *nm = cur(P)->s;
    advance(P);
    return nm;
}

static struct tnode *parse_if(struct parser *P)
{
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    struct tnode *n = node(P, N_IF);
    if (!n)
        return NULL;
    n->a = parse_tuple(P, 1);
    if (!n->a || expect_block_end(P))
        return NULL;
    n->b = parse_body(P, ends);
    if (!n->b)
        return NULL;
    const char *end = take_end(P);
    if (!strcmp(end, "elif")) {
        n->c = parse_if(P);
        return n->c ? n : NULL;
    }
    if (!strcmp(end, "else")) {
        static const char *const ends2[] = {"endif", NULL};
        if (expect_block_end(P))
            return NULL;
        n->c = parse_body(P, ends2);
        if (!n->c)
            return NULL;
        take_end(P);
    }
    return expect_block_end(P) ? NULL : n;
}

static int parse_targets(struct parser *P, struct tnode *n)
{
    const char *names[16];
    int k = 0, paren = 0;
    if (is_op(cur(P), "(")) {
        paren = 1;
        advance(P);
    }
    for (;;) {
        const char *nm = expect_name(P);
        if (!nm)
            return P->err;
        if (k >= 16)
            return fail(P, "too many loop targets%s", "");
        names[k++] = nm;
        if (!is_op(cur(P), ","))
            break;
        advance(P);
    }
    if (paren && expect_op(P, ")"))
        return P->err;
    n->names = arena_alloc(P->a, (size_t)k * sizeof *n->names);
    if (!n->names)
        return P->err = cerr_set(P->e, CERR_NOMEM, "out of memory parsing template");
    memcpy(n->names, names, (size_t)k * sizeof *names);
    n->nnames = k;
    n->op = k > 1 || paren; /* unpack */
    return 0;
}

static struct tnode *parse_for(struct parser *P)
{
    static const char *const ends[] = {"else", "endfor", NULL};
    struct tnode *n = node(P, N_FOR);
    if (!n || parse_targets(P, n))
        return NULL;
    if (!is_name(cur(P), "in")) {
        fail(P, "expected 'in' in for loop%s", "");
        return NULL;
    }
    advance(P);
    n->a = parse_tuple(P, 0);
    if (!n->a)
        return NULL;
    if (is_name(cur(P), "if")) {
        advance(P);
        n->b = parse_expr(P, 1);
        if (!n->b)
            return NULL;
    }
    if (is_name(cur(P), "recursive"))
        advance(P);
    if (expect_block_end(P))
        return NULL;
    n->c = parse_body(P, ends);
    if (!n->c)
        return NULL;
    if (!strcmp(take_end(P), "else")) {
        static const char *const ends2[] = {"endfor", NULL};
        if (expect_block_end(P))
            return NULL;
        n->d = parse_body(P, ends2);
        if (!n->d)
            return NULL;
        take_end(P);
    }
    return expect_block_end(P) ? NULL : n;
}

/* Parses "|f(args)|g" chains for set blocks and filter blocks into a list of N_FILTER
 * nodes whose ->a is NULL (applied in order). */
static struct tnode *parse_filter_chain(struct parser *P, int required)
{
    struct tnode *x = NULL;
    if (required && !is_op(cur(P), "|")) {
        struct tnode *n = node(P, N_FILTER);
        if (!n || !(n->s = dotted_name(P)))
            return NULL;
        if (is_op(cur(P), "(") && parse_args(P, n))
            return NULL;
        x = n;
    }
    while (is_op(cur(P), "|")) {
        advance(P);
        struct tnode *n = node(P, N_FILTER);
        if (!n || !(n->s = dotted_name(P)))
            return NULL;
        if (is_op(cur(P), "(") && parse_args(P, n))
            return NULL;
        n->a = x;
        x = n;
    }
    return x;
}

static struct tnode *parse_set(struct parser *P)
{
    struct tnode *n = node(P, N_SET);
    if (!n)
        return NULL;
    const char *nm = expect_name(P);
    if (!nm)
        return NULL;
    n->s = nm;
    if (is_op(cur(P), ".")) {
        advance(P);
        n->names = arena_alloc(P->a, sizeof *n->names);
        if (!n->names || !(n->names[0] = expect_name(P)))
            return NULL;
        n->nnames = 1;
    } else if (is_op(cur(P), ",")) {
        /* set a, b = ... : reuse the for-target parser */
        P->pos--;
        if (parse_targets(P, n))
            return NULL;
        n->s = NULL;
    }
    if (is_op(cur(P), "=")) {
        advance(P);
        n->a = parse_tuple(P, 1);
        if (!n->a || expect_block_end(P))
            return NULL;
        return n;
    }
    static const char *const ends[] = {"endset", NULL};
    n->kind = N_SETBLOCK;
    if (!is_op(cur(P), "|") && cur(P)->type != TK_BLOCK_END) {
        fail(P, "expected '=' or end of statement in set%s", "");
        return NULL;
    }
    n->d = parse_filter_chain(P, 0);
    if (P->err || expect_block_end(P))
        return NULL;
    n->b = parse_body(P, ends);
    if (!n->b)
        return NULL;
    take_end(P);
    return expect_block_end(P) ? NULL : n;
}

/* (a, b=default, ...) for macro and call blocks. */
static int parse_params(struct parser *P, struct tnode *n)
{
    const char *names[64];
    struct nvec defs = {0};
    int k = 0;
    if (expect_op(P, "("))
        return P->err;
    while (!is_op(cur(P), ")")) {
        if (k && expect_op(P, ","))
            return P->err;
        if (is_op(cur(P), ")"))
            break;
        const char *nm = expect_name(P);
        if (!nm)
            return P->err;
        if (k >= 64)
            return fail(P, "too many macro parameters%s", "");
        names[k++] = nm;
        struct tnode *d = NULL;
        if (is_op(cur(P), "=")) {
            advance(P);
            d = parse_expr(P, 1);
            if (!d)
                return P->err;
        }
        if (vpush(P, &defs, d))
            return P->err;
    }
    advance(P);
    n->names = arena_alloc(P->a, (size_t)(k ? k : 1) * sizeof *n->names);
    if (!n->names)
        return P->err = cerr_set(P->e, CERR_NOMEM, "out of memory parsing template");
    memcpy(n->names, names, (size_t)k * sizeof *names);
    n->nnames = k;
    n->kids2 = defs.v;
    n->nkids2 = defs.n;
    return 0;
}

static struct tnode *parse_macro(struct parser *P)
{
    static const char *const ends[] = {"endmacro", NULL};
    struct tnode *n = node(P, N_MACRO);
    if (!n || !(n->s = expect_name(P)) || parse_params(P, n) || expect_block_end(P))
        return NULL;
    n->b = parse_body(P, ends);
    if (!n->b)
        return NULL;
    take_end(P);
    if (cur(P)->type == TK_NAME)
        advance(P); /* {% endmacro name %} */
    return expect_block_end(P) ? NULL : n;
}

static struct tnode *parse_callblock(struct parser *P)
{
    static const char *const ends[] = {"endcall", NULL};
    struct tnode *n = node(P, N_CALLBLOCK);
    if (!n)
        return NULL;
    n->s = "caller";
    if (is_op(cur(P), "(")) {
        if (parse_params(P, n))
            return NULL;
    }
    n->a = parse_expr(P, 1);
    if (!n->a)
        return NULL;
    if (n->a->kind != N_CALL) {
        fail(P, "expected a call in a call block%s", "");
        return NULL;
    }
    if (expect_block_end(P))
        return NULL;
    n->b = parse_body(P, ends);
    if (!n->b)
        return NULL;
    take_end(P);
    return expect_block_end(P) ? NULL : n;
}

static struct tnode *parse_stmt(struct parser *P)
{
    advance(P); /* BLOCK_BEGIN */
    const struct token *t = cur(P);
    if (t->type != TK_NAME) {
        fail(P, "expected a statement name%s", "");
        return NULL;
    }
    const char *nm = t->s;
    advance(P);
    if (!strcmp(nm, "if"))
        return parse_if(P);
    if (!strcmp(nm, "for"))
        return parse_for(P);
    if (!strcmp(nm, "set"))
        return parse_set(P);
    if (!strcmp(nm, "macro"))
        return parse_macro(P);
    if (!strcmp(nm, "call"))
        return parse_callblock(P);
    if (!strcmp(nm, "break") || !strcmp(nm, "continue")) {
        struct tnode *n = node(P, nm[0] == 'b' ? N_BREAK : N_CONTINUE);
        return (!n || expect_block_end(P)) ? NULL : n;
    }
    if (!strcmp(nm, "filter")) {
        static const char *const ends[] = {"endfilter", NULL};
        struct tnode *n = node(P, N_FILTERBLOCK);
        if (!n || !(n->d = parse_filter_chain(P, 1)) || expect_block_end(P))
            return NULL;
        n->b = parse_body(P, ends);
        if (!n->b)
            return NULL;
        take_end(P);
        return expect_block_end(P) ? NULL : n;
    }
    if (!strcmp(nm, "generation")) {
        static const char *const ends[] = {"endgeneration", NULL};
        if (expect_block_end(P))
            return NULL;
        struct tnode *b = parse_body(P, ends);
        if (!b)
            return NULL;
        take_end(P);
        return expect_block_end(P) ? NULL : b;
    }
    P->pos--;
    fail(P, "encountered unknown tag '%s'", nm);
    return NULL;
}

static int is_end(const struct token *t, const char *const *ends)
{
    for (int i = 0; ends && ends[i]; i++)
        if (is_name(t, ends[i]))
            return 1;
    return 0;
}

static struct tnode *parse_body(struct parser *P, const char *const *ends)
{
    if (enter(P))
        return NULL;
    struct tnode *body = node(P, N_BODY);
    struct nvec kids = {0};
    if (!body)
        return NULL;
    for (;;) {
        const struct token *t = cur(P);
        struct tnode *x = NULL;
        if (t->type == TK_EOF) {
            if (ends) {
                fail(P, "unexpected end of template, expected '%s'", ends[0]);
                return NULL;
            }
            break;
        }
        if (t->type == TK_DATA) {
            x = node(P, N_TEXT);
            if (!x)
                return NULL;
            x->s = t->s;
            x->n = t->n;
            advance(P);
        } else if (t->type == TK_VAR_BEGIN) {
            advance(P);
            x = node(P, N_OUT);
            if (!x || !(x->a = parse_tuple(P, 1)))
                return NULL;
            if (cur(P)->type != TK_VAR_END) {
                fail(P, "expected end of print statement ('}}')%s", "");
                return NULL;
            }
            advance(P);
        } else if (t->type == TK_BLOCK_BEGIN) {
            if (is_end(peek(P, 1), ends))
                break;
            x = parse_stmt(P);
            if (!x)
                return NULL;
        } else {
            fail(P, "unexpected token%s", "");
            return NULL;
        }
        if (vpush(P, &kids, x))
            return NULL;
    }
    body->kids = kids.v;
    body->nkids = kids.n;
    P->depth--;
    return body;
}

int tparse_run(struct arena *a, const struct token *toks, size_t ntok, struct tnode **root,
               struct cerr *e)
{
    struct parser P = {.a = a, .t = toks, .n = ntok, .e = e};
    struct tnode *r = parse_body(&P, NULL);
    if (!r)
        return P.err ? P.err : cerr_set(e, CERR_FORMAT, "template syntax error");
    *root = r;
    return 0;
}
