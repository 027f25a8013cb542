/* tmpl_parse_expr.c — template expressions: tokens -> syntax tree, recursive descent.
 *
 * Precedence follows jinja2's parser: condexpr < or < and < not < compare (==, !=, <, <=,
 * >, >=, in, not in; chained) < + - < ~ < * / // % < ** < unary < primary with postfix
 * (.attr, [item/slice], (call)) and filters/tests (`|f`, `is t`), which bind tighter than
 * any binary operator. Nesting is bounded (TMPL_MAX_DEPTH). Statements: tmpl_parse.c.
 */
#include <stdio.h>
#include <string.h>

#include "template/tmpl_parse_int.h"

const struct token *tp_cur(struct parser *P)
{
    return &P->t[P->pos < P->n ? P->pos : P->n - 1];
}

const struct token *tp_peek(struct parser *P, size_t k)
{
    size_t i = P->pos + k;
    return &P->t[i < P->n ? i : P->n - 1];
}

void tp_advance(struct parser *P)
{
    if (P->pos + 1 < P->n)
        P->pos++;
}

int tp_fail(struct parser *P, const char *fmt, const char *arg)
{
    if (!P->err) {
        char m[256];
        snprintf(m, sizeof m, fmt, arg ? arg : "");
        P->err = cerr_set(P->e, CERR_FORMAT, "template syntax error: line %d: %s", tp_cur(P)->line, m);
    }
    return P->err;
}

struct tnode *tp_node(struct parser *P, int kind)
{
    struct tnode *n = arena_calloc(P->a, 1, sizeof *n);
    if (!n) {
        if (!P->err)
            P->err = cerr_set(P->e, CERR_NOMEM, "out of memory parsing template");
        return NULL;
    }
    n->kind = kind;
    n->line = tp_cur(P)->line;
    return n;
}

int tp_vpush(struct parser *P, struct nvec *v, struct tnode *x)
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

int tp_is_op(const struct token *t, const char *op)
{
    return t->type == TK_OP && strcmp(t->s, op) == 0;
}

int tp_is_name(const struct token *t, const char *name)
{
    return t->type == TK_NAME && strcmp(t->s, name) == 0;
}

int tp_expect_op(struct parser *P, const char *op)
{
    if (!tp_is_op(tp_cur(P), op))
        return tp_fail(P, "expected '%s'", op);
    tp_advance(P);
    return 0;
}

const char *tp_expect_name(struct parser *P)
{
    if (tp_cur(P)->type != TK_NAME) {
        tp_fail(P, "expected a name%s", "");
        return NULL;
    }
    const char *s = tp_cur(P)->s;
    tp_advance(P);
    return s;
}

struct tnode *tp_parse_expr(struct parser *P, int with_cond);
static struct tnode *parse_unary(struct parser *P, int with_filter);
static struct tnode *parse_or(struct parser *P);

int tp_enter(struct parser *P)
{
    if (++P->depth > TMPL_MAX_DEPTH) {
        if (!P->err)
            P->err = cerr_set(P->e, CERR_LIMIT, "template syntax error: line %d: nesting deeper than %d",
                              tp_cur(P)->line, TMPL_MAX_DEPTH);
        return -1;
    }
    return 0;
}

/* (args...) after the '(' was seen: positional and keyword arguments into n. */
int tp_parse_args(struct parser *P, struct tnode *n)
{
    struct nvec pos = {0}, kwv = {0};
    const char *kwn[64];
    int nkw = 0;
    if (tp_expect_op(P, "("))
        return P->err;
    while (!tp_is_op(tp_cur(P), ")")) {
        if (pos.n + nkw > 0 && tp_expect_op(P, ","))
            return P->err;
        if (tp_is_op(tp_cur(P), ")"))
            break;
        if (tp_cur(P)->type == TK_NAME && tp_is_op(tp_peek(P, 1), "=")) {
            if (nkw >= 64)
                return tp_fail(P, "too many keyword arguments%s", "");
            kwn[nkw++] = tp_cur(P)->s;
            tp_advance(P);
            tp_advance(P);
            struct tnode *v = tp_parse_expr(P, 1);
            if (!v || tp_vpush(P, &kwv, v))
                return P->err;
        } else {
            if (nkw)
                return tp_fail(P, "positional argument after keyword argument%s", "");
            struct tnode *v = tp_parse_expr(P, 1);
            if (!v || tp_vpush(P, &pos, v))
                return P->err;
        }
    }
    tp_advance(P);
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
    const struct token *t = tp_cur(P);
    struct tnode *n;
    if (t->type == TK_NAME) {
        n = tp_node(P, N_CONST);
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
        tp_advance(P);
        return n;
    }
    if (t->type == TK_STRING) {
        n = tp_node(P, N_CONST);
        if (!n)
            return NULL;
        size_t total = 0, k = 0;
        while (tp_peek(P, k)->type == TK_STRING)
            total += tp_peek(P, k++)->n;
        if (k == 1) {
            n->lit = tv_str(t->s, t->n);
            tp_advance(P);
            return n;
        }
        char *buf = arena_alloc(P->a, total + 1);
        if (!buf) {
            P->err = cerr_set(P->e, CERR_NOMEM, "out of memory parsing template");
            return NULL;
        }
        size_t o = 0;
        while (tp_cur(P)->type == TK_STRING) {
            memcpy(buf + o, tp_cur(P)->s, tp_cur(P)->n);
            o += tp_cur(P)->n;
            tp_advance(P);
        }
        buf[o] = 0;
        n->lit = tv_str(buf, o);
        return n;
    }
    if (t->type == TK_INT || t->type == TK_FLOAT) {
        n = tp_node(P, N_CONST);
        if (!n)
            return NULL;
        n->lit = t->type == TK_INT ? tv_int(t->i) : tv_float(t->f);
        tp_advance(P);
        return n;
    }
    if (tp_is_op(t, "(")) {
        tp_advance(P);
        if (tp_is_op(tp_cur(P), ")")) {
            tp_advance(P);
            return tp_node(P, N_TUPLE);
        }
        struct tnode *x = tp_parse_expr(P, 1);
        if (!x)
            return NULL;
        if (tp_is_op(tp_cur(P), ",")) {
            struct nvec items = {0};
            if (tp_vpush(P, &items, x))
                return NULL;
            while (tp_is_op(tp_cur(P), ",")) {
                tp_advance(P);
                if (tp_is_op(tp_cur(P), ")"))
                    break;
                struct tnode *y = tp_parse_expr(P, 1);
                if (!y || tp_vpush(P, &items, y))
                    return NULL;
            }
            x = tp_node(P, N_TUPLE);
            if (!x)
                return NULL;
            x->kids = items.v;
            x->nkids = items.n;
        }
        if (tp_expect_op(P, ")"))
            return NULL;
        return x;
    }
    if (tp_is_op(t, "[")) {
        tp_advance(P);
        struct nvec items = {0};
        while (!tp_is_op(tp_cur(P), "]")) {
            if (items.n && tp_expect_op(P, ","))
                return NULL;
            if (tp_is_op(tp_cur(P), "]"))
                break;
            struct tnode *y = tp_parse_expr(P, 1);
            if (!y || tp_vpush(P, &items, y))
                return NULL;
        }
        tp_advance(P);
        n = tp_node(P, N_LIST);
        if (!n)
            return NULL;
        n->kids = items.v;
        n->nkids = items.n;
        return n;
    }
    if (tp_is_op(t, "{")) {
        tp_advance(P);
        struct nvec keys = {0}, vals = {0};
        while (!tp_is_op(tp_cur(P), "}")) {
            if (keys.n && tp_expect_op(P, ","))
                return NULL;
            if (tp_is_op(tp_cur(P), "}"))
                break;
            struct tnode *k = tp_parse_expr(P, 1);
            if (!k || tp_expect_op(P, ":"))
                return NULL;
            struct tnode *v = tp_parse_expr(P, 1);
            if (!v || tp_vpush(P, &keys, k) || tp_vpush(P, &vals, v))
                return NULL;
        }
        tp_advance(P);
        n = tp_node(P, N_DICT);
        if (!n)
            return NULL;
        n->kids = keys.v;
        n->nkids = keys.n;
        n->kids2 = vals.v;
        n->nkids2 = vals.n;
        return n;
    }
    if (t->type == TK_EOF || t->type == TK_VAR_END || t->type == TK_BLOCK_END)
        tp_fail(P, "expected an expression, got end of %s", t->type == TK_EOF ? "template" : "tag");
    else
        tp_fail(P, "unexpected '%s'", t->type == TK_OP ? t->s : "token");
    return NULL;
}

/* [start:stop:step] or [expr] after '[' */
static struct tnode *parse_subscript(struct parser *P, struct tnode *obj)
{
    struct tnode *parts[3] = {0};
    int colons = 0;
    if (!tp_is_op(tp_cur(P), ":")) {
        parts[0] = tp_parse_expr(P, 1);
        if (!parts[0])
            return NULL;
    }
    while (tp_is_op(tp_cur(P), ":") && colons < 2) {
        tp_advance(P);
        colons++;
        if (!tp_is_op(tp_cur(P), ":") && !tp_is_op(tp_cur(P), "]")) {
            parts[colons] = tp_parse_expr(P, 1);
            if (!parts[colons])
                return NULL;
        }
    }
    if (tp_expect_op(P, "]"))
        return NULL;
    struct tnode *n = tp_node(P, colons ? N_SLICE : N_ITEM);
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
        const struct token *t = tp_cur(P);
        if (tp_is_op(t, ".")) {
            tp_advance(P);
            t = tp_cur(P);
            struct tnode *n;
            if (t->type == TK_NAME) {
                n = tp_node(P, N_ATTR);
                if (!n)
                    return NULL;
                n->s = t->s;
                n->n = t->n;
            } else if (t->type == TK_INT) {
                n = tp_node(P, N_ITEM);
                if (!n)
                    return NULL;
                n->b = tp_node(P, N_CONST);
                if (!n->b)
                    return NULL;
                n->b->lit = tv_int(t->i);
            } else {
                tp_fail(P, "expected an attribute name after '.'%s", "");
                return NULL;
            }
            tp_advance(P);
            n->a = x;
            x = n;
        } else if (tp_is_op(t, "[")) {
            tp_advance(P);
            x = parse_subscript(P, x);
            if (!x)
                return NULL;
        } else if (tp_is_op(t, "(")) {
            struct tnode *n = tp_node(P, N_CALL);
            if (!n || tp_parse_args(P, n))
                return NULL;
            n->a = x;
            x = n;
        } else {
            return x;
        }
    }
}

const char *tp_dotted_name(struct parser *P)
{
    const char *nm = tp_expect_name(P);
    if (!nm)
        return NULL;
    while (tp_is_op(tp_cur(P), ".") && tp_peek(P, 1)->type == TK_NAME) {
        tp_advance(P);
        size_t l1 = strlen(nm), l2 = tp_cur(P)->n;
        char *b = arena_alloc(P->a, l1 + l2 + 2);
        if (!b) {
            P->err = cerr_set(P->e, CERR_NOMEM, "out of memory parsing template");
            return NULL;
        }
        memcpy(b, nm, l1);
        b[l1] = '.';
        memcpy(b + l1 + 1, tp_cur(P)->s, l2 + 1);
        nm = b;
        tp_advance(P);
    }
    return nm;
}

static struct tnode *parse_filter_expr(struct parser *P, struct tnode *x)
{
    for (;;) {
        const struct token *t = tp_cur(P);
        if (tp_is_op(t, "|")) {
            tp_advance(P);
            struct tnode *n = tp_node(P, N_FILTER);
            if (!n)
                return NULL;
            n->s = tp_dotted_name(P);
            if (!n->s)
                return NULL;
            if (tp_is_op(tp_cur(P), "(") && tp_parse_args(P, n))
                return NULL;
            n->a = x;
            x = n;
        } else if (tp_is_name(t, "is")) {
            tp_advance(P);
            struct tnode *n = tp_node(P, N_TEST);
            if (!n)
                return NULL;
            if (tp_is_name(tp_cur(P), "not")) {
                n->neg = 1;
                tp_advance(P);
            }
            n->s = tp_dotted_name(P);
            if (!n->s)
                return NULL;
            t = tp_cur(P);
            if (tp_is_op(t, "(")) {
                if (tp_parse_args(P, n))
                    return NULL;
            } else if ((t->type == TK_NAME || t->type == TK_STRING || t->type == TK_INT ||
                        t->type == TK_FLOAT || tp_is_op(t, "[") || tp_is_op(t, "{")) &&
                       !tp_is_name(t, "else") && !tp_is_name(t, "or") && !tp_is_name(t, "and")) {
                if (tp_is_name(t, "is")) {
                    tp_fail(P, "you cannot chain multiple tests with is%s", "");
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
        } else if (tp_is_op(t, "(")) {
            struct tnode *n = tp_node(P, N_CALL);
            if (!n || tp_parse_args(P, n))
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
    if (tp_enter(P))
        return NULL;
    struct tnode *x;
    if (tp_is_op(tp_cur(P), "-") || tp_is_op(tp_cur(P), "+")) {
        x = tp_node(P, tp_is_op(tp_cur(P), "-") ? N_NEG : N_POS);
        if (!x)
            return NULL;
        tp_advance(P);
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
    struct tnode *n = tp_node(P, kind);
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
    while (x && tp_is_op(tp_cur(P), "**")) {
        tp_advance(P);
        x = binop(P, N_BIN, "**", x, parse_unary(P, 1));
    }
    return x;
}

static struct tnode *parse_math2(struct parser *P)
{
    struct tnode *x = parse_pow(P);
    while (x && (tp_is_op(tp_cur(P), "*") || tp_is_op(tp_cur(P), "/") || tp_is_op(tp_cur(P), "//") ||
                 tp_is_op(tp_cur(P), "%"))) {
        const char *op = tp_cur(P)->s;
        tp_advance(P);
        x = binop(P, N_BIN, op, x, parse_pow(P));
    }
    return x;
}

static struct tnode *parse_concat(struct parser *P)
{
    struct tnode *x = parse_math2(P);
    while (x && tp_is_op(tp_cur(P), "~")) {
        tp_advance(P);
        x = binop(P, N_CONCAT, "~", x, parse_math2(P));
    }
    return x;
}

static struct tnode *parse_math1(struct parser *P)
{
    struct tnode *x = parse_concat(P);
    while (x && (tp_is_op(tp_cur(P), "+") || tp_is_op(tp_cur(P), "-"))) {
        const char *op = tp_cur(P)->s;
        tp_advance(P);
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
        const struct token *t = tp_cur(P);
        const char *op = NULL;
        if (t->type == TK_OP && (!strcmp(t->s, "==") || !strcmp(t->s, "!=") || !strcmp(t->s, "<") ||
                                 !strcmp(t->s, ">") || !strcmp(t->s, "<=") || !strcmp(t->s, ">="))) {
            op = t->s;
            tp_advance(P);
        } else if (tp_is_name(t, "in")) {
            op = "in";
            tp_advance(P);
        } else if (tp_is_name(t, "not") && tp_is_name(tp_peek(P, 1), "in")) {
            op = "notin";
            tp_advance(P);
            tp_advance(P);
        } else {
            break;
        }
        if (nops >= 32) {
            tp_fail(P, "comparison chain too long%s", "");
            return NULL;
        }
        struct tnode *y = parse_math1(P);
        if (!y || tp_vpush(P, &operands, y))
            return NULL;
        ops[nops++] = op;
    }
    if (!nops)
        return x;
    struct tnode *n = tp_node(P, N_CMP);
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
    if (tp_is_name(tp_cur(P), "not")) {
        if (tp_enter(P))
            return NULL;
        struct tnode *n = tp_node(P, N_NOT);
        if (!n)
            return NULL;
        tp_advance(P);
        n->a = parse_not(P);
        P->depth--;
        return n->a ? n : NULL;
    }
    return parse_compare(P);
}

static struct tnode *parse_and(struct parser *P)
{
    struct tnode *x = parse_not(P);
    while (x && tp_is_name(tp_cur(P), "and")) {
        tp_advance(P);
        x = binop(P, N_AND, "and", x, parse_not(P));
    }
    return x;
}

static struct tnode *parse_or(struct parser *P)
{
    struct tnode *x = parse_and(P);
    while (x && tp_is_name(tp_cur(P), "or")) {
        tp_advance(P);
        x = binop(P, N_OR, "or", x, parse_and(P));
    }
    return x;
}

static struct tnode *parse_condexpr(struct parser *P)
{
    struct tnode *x = parse_or(P);
    while (x && tp_is_name(tp_cur(P), "if")) {
        tp_advance(P);
        struct tnode *n = tp_node(P, N_COND);
        if (!n)
            return NULL;
        n->b = x;
        n->a = parse_or(P);
        if (!n->a)
            return NULL;
        if (tp_is_name(tp_cur(P), "else")) {
            tp_advance(P);
            n->c = parse_condexpr(P);
            if (!n->c)
                return NULL;
        }
        x = n;
    }
    return x;
}

struct tnode *tp_parse_expr(struct parser *P, int with_cond)
{
    if (tp_enter(P))
        return NULL;
    struct tnode *x = with_cond ? parse_condexpr(P) : parse_or(P);
    P->depth--;
    return x;
}

/* expr [, expr ...] -> the expr or an N_TUPLE (set x = a, b / for x in a, b). */
struct tnode *tp_parse_tuple(struct parser *P, int with_cond)
{
    struct tnode *x = tp_parse_expr(P, with_cond);
    if (!x || !tp_is_op(tp_cur(P), ","))
        return x;
    struct nvec items = {0};
    if (tp_vpush(P, &items, x))
        return NULL;
    while (tp_is_op(tp_cur(P), ",")) {
        tp_advance(P);
        if (tp_cur(P)->type == TK_BLOCK_END || tp_cur(P)->type == TK_VAR_END || tp_is_name(tp_cur(P), "if"))
            break;
        struct tnode *y = tp_parse_expr(P, with_cond);
        if (!y || tp_vpush(P, &items, y))
            return NULL;
    }
    struct tnode *n = tp_node(P, N_TUPLE);
    if (!n)
        return NULL;
    n->kids = items.v;
    n->nkids = items.n;
    return n;
}

