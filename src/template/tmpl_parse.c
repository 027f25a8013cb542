/* tmpl_parse.c — template statements: tokens -> syntax tree (struct tnode).
 *
 * Statements: if/elif/else, for (with `if` filter and else), set (expression, namespace
 * attribute, block), macro, call, filter, break/continue, generation. Expressions are
 * parsed by tmpl_parse_expr.c. Nesting is bounded (TMPL_MAX_DEPTH).
 */
#include <stdio.h>
#include <string.h>

#include "template/tmpl_parse_int.h"

/* ---- statements ---- */

static struct tnode *parse_body(struct parser *P, const char *const *ends);

static int expect_block_end(struct parser *P)
{
    if (tp_cur(P)->type != TK_BLOCK_END)
        return tp_fail(P, "expected end of statement block ('%%}')%s", "");
    tp_advance(P);
    return 0;
}

/* After a body stopped at "{% <end>", consumes "{% end %}" and returns the end's name. */
static const char *take_end(struct parser *P)
{
    tp_advance(P); /* BLOCK_BEGIN */
    const char *nm = tp_cur(P)->s;
    tp_advance(P);
    return nm;
}

static struct tnode *parse_if(struct parser *P)
{
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    struct tnode *n = tp_node(P, N_IF);
    if (!n)
        return NULL;
    n->a = tp_parse_tuple(P, 1);
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
    if (tp_is_op(tp_cur(P), "(")) {
        paren = 1;
        tp_advance(P);
    }
    for (;;) {
        const char *nm = tp_expect_name(P);
        if (!nm)
            return P->err;
        if (k >= 16)
            return tp_fail(P, "too many loop targets%s", "");
        names[k++] = nm;
        if (!tp_is_op(tp_cur(P), ","))
            break;
        tp_advance(P);
    }
    if (paren && tp_expect_op(P, ")"))
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
    struct tnode *n = tp_node(P, N_FOR);
    if (!n || parse_targets(P, n))
        return NULL;
    if (!tp_is_name(tp_cur(P), "in")) {
        tp_fail(P, "expected 'in' in for loop%s", "");
        return NULL;
    }
    tp_advance(P);
    n->a = tp_parse_tuple(P, 0);
    if (!n->a)
        return NULL;
    if (tp_is_name(tp_cur(P), "if")) {
        tp_advance(P);
        n->b = tp_parse_expr(P, 1);
        if (!n->b)
            return NULL;
    }
    if (tp_is_name(tp_cur(P), "recursive"))
        tp_advance(P);
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
    if (required && !tp_is_op(tp_cur(P), "|")) {
        struct tnode *n = tp_node(P, N_FILTER);
        if (!n || !(n->s = tp_dotted_name(P)))
            return NULL;
        if (tp_is_op(tp_cur(P), "(") && tp_parse_args(P, n))
            return NULL;
        x = n;
    }
    while (tp_is_op(tp_cur(P), "|")) {
        tp_advance(P);
        struct tnode *n = tp_node(P, N_FILTER);
        if (!n || !(n->s = tp_dotted_name(P)))
            return NULL;
        if (tp_is_op(tp_cur(P), "(") && tp_parse_args(P, n))
            return NULL;
        n->a = x;
        x = n;
    }
    return x;
}

static struct tnode *parse_set(struct parser *P)
{
    struct tnode *n = tp_node(P, N_SET);
    if (!n)
        return NULL;
    const char *nm = tp_expect_name(P);
    if (!nm)
        return NULL;
    n->s = nm;
    if (tp_is_op(tp_cur(P), ".")) {
        tp_advance(P);
        n->names = arena_alloc(P->a, sizeof *n->names);
        if (!n->names || !(n->names[0] = tp_expect_name(P)))
            return NULL;
        n->nnames = 1;
    } else if (tp_is_op(tp_cur(P), ",")) {
        /* set a, b = ... : reuse the for-target parser */
        P->pos--;
        if (parse_targets(P, n))
            return NULL;
        n->s = NULL;
    }
    if (tp_is_op(tp_cur(P), "=")) {
        tp_advance(P);
        n->a = tp_parse_tuple(P, 1);
        if (!n->a || expect_block_end(P))
            return NULL;
        return n;
    }
    static const char *const ends[] = {"endset", NULL};
    n->kind = N_SETBLOCK;
    if (!tp_is_op(tp_cur(P), "|") && tp_cur(P)->type != TK_BLOCK_END) {
        tp_fail(P, "expected '=' or end of statement in set%s", "");
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
    if (tp_expect_op(P, "("))
        return P->err;
    while (!tp_is_op(tp_cur(P), ")")) {
        if (k && tp_expect_op(P, ","))
            return P->err;
        if (tp_is_op(tp_cur(P), ")"))
            break;
        const char *nm = tp_expect_name(P);
        if (!nm)
            return P->err;
        if (k >= 64)
            return tp_fail(P, "too many macro parameters%s", "");
        names[k++] = nm;
        struct tnode *d = NULL;
        if (tp_is_op(tp_cur(P), "=")) {
            tp_advance(P);
            d = tp_parse_expr(P, 1);
            if (!d)
                return P->err;
        }
        if (tp_vpush(P, &defs, d))
            return P->err;
    }
    tp_advance(P);
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
    struct tnode *n = tp_node(P, N_MACRO);
    if (!n || !(n->s = tp_expect_name(P)) || parse_params(P, n) || expect_block_end(P))
        return NULL;
    n->b = parse_body(P, ends);
    if (!n->b)
        return NULL;
    take_end(P);
    if (tp_cur(P)->type == TK_NAME)
        tp_advance(P); /* {% endmacro name %} */
    return expect_block_end(P) ? NULL : n;
}

static struct tnode *parse_callblock(struct parser *P)
{
    static const char *const ends[] = {"endcall", NULL};
    struct tnode *n = tp_node(P, N_CALLBLOCK);
    if (!n)
        return NULL;
    n->s = "caller";
    if (tp_is_op(tp_cur(P), "(")) {
        if (parse_params(P, n))
            return NULL;
    }
    n->a = tp_parse_expr(P, 1);
    if (!n->a)
        return NULL;
    if (n->a->kind != N_CALL) {
        tp_fail(P, "expected a call in a call block%s", "");
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
    tp_advance(P); /* BLOCK_BEGIN */
    const struct token *t = tp_cur(P);
    if (t->type != TK_NAME) {
        tp_fail(P, "expected a statement name%s", "");
        return NULL;
    }
    const char *nm = t->s;
    tp_advance(P);
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
        struct tnode *n = tp_node(P, nm[0] == 'b' ? N_BREAK : N_CONTINUE);
        return (!n || expect_block_end(P)) ? NULL : n;
    }
    if (!strcmp(nm, "filter")) {
        static const char *const ends[] = {"endfilter", NULL};
        struct tnode *n = tp_node(P, N_FILTERBLOCK);
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
    tp_fail(P, "encountered unknown tag '%s'", nm);
    return NULL;
}

static int is_end(const struct token *t, const char *const *ends)
{
    for (int i = 0; ends && ends[i]; i++)
        if (tp_is_name(t, ends[i]))
            return 1;
    return 0;
}

static struct tnode *parse_body(struct parser *P, const char *const *ends)
{
    if (tp_enter(P))
        return NULL;
    struct tnode *body = tp_node(P, N_BODY);
    struct nvec kids = {0};
    if (!body)
        return NULL;
    for (;;) {
        const struct token *t = tp_cur(P);
        struct tnode *x = NULL;
        if (t->type == TK_EOF) {
            if (ends) {
                tp_fail(P, "unexpected end of template, expected '%s'", ends[0]);
                return NULL;
            }
            break;
        }
        if (t->type == TK_DATA) {
            x = tp_node(P, N_TEXT);
            if (!x)
                return NULL;
            x->s = t->s;
            x->n = t->n;
            tp_advance(P);
        } else if (t->type == TK_VAR_BEGIN) {
            tp_advance(P);
            x = tp_node(P, N_OUT);
            if (!x || !(x->a = tp_parse_tuple(P, 1)))
                return NULL;
            if (tp_cur(P)->type != TK_VAR_END) {
                tp_fail(P, "expected end of print statement ('}}')%s", "");
                return NULL;
            }
            tp_advance(P);
        } else if (t->type == TK_BLOCK_BEGIN) {
            if (is_end(tp_peek(P, 1), ends))
                break;
            x = parse_stmt(P);
            if (!x)
                return NULL;
        } else {
            tp_fail(P, "unexpected token%s", "");
            return NULL;
        }
        if (tp_vpush(P, &kids, x))
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
