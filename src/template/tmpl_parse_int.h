/* tmpl_parse_int.h — the parser's state and the helpers its two halves share
 * (tmpl_parse_expr.c: expressions; tmpl_parse.c: statements). Internal to src/template. */
#ifndef CINFER_TEMPLATE_TMPL_PARSE_INT_H
#define CINFER_TEMPLATE_TMPL_PARSE_INT_H

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

const struct token *tp_cur(struct parser *P);
const struct token *tp_peek(struct parser *P, size_t k);
void tp_advance(struct parser *P);
int tp_fail(struct parser *P, const char *fmt, const char *arg);
struct tnode *tp_node(struct parser *P, int kind);
int tp_vpush(struct parser *P, struct nvec *v, struct tnode *x);
int tp_is_op(const struct token *t, const char *op);
int tp_is_name(const struct token *t, const char *name);
int tp_expect_op(struct parser *P, const char *op);
const char *tp_expect_name(struct parser *P);
int tp_enter(struct parser *P);
int tp_parse_args(struct parser *P, struct tnode *n);
struct tnode *tp_parse_expr(struct parser *P, int with_cond);
struct tnode *tp_parse_tuple(struct parser *P, int with_cond);
const char *tp_dotted_name(struct parser *P);

#endif
