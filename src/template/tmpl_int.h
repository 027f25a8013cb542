/* tmpl_int.h — internals of the template engine, shared by the .c files of src/template only.
 *
 * Pipeline: tmpl_lex.c (source -> tokens, Jinja's whitespace rules) -> tmpl_parse.c
 * (tokens -> tree of struct tnode) -> tmpl_eval.c (tree walk, writes the output), with
 * tmpl_ops.c (operators), tmpl_value.c (the value type: Python str()/repr()/==/< semantics), tmpl_json.c (JSON in,
 * tojson out), tmpl_filters.c (filters and tests) and tmpl_methods.c (str/dict methods,
 * globals). All render-time memory comes from one arena freed when the render ends; an
 * error anywhere in the evaluator longjmps back to tmpl_render (one boundary, like Lua's),
 * which turns it into a struct cerr. Values are immutable except namespace attributes.
 */
#ifndef CINFER_TEMPLATE_TMPL_INT_H
#define CINFER_TEMPLATE_TMPL_INT_H

#include <jansson.h>
#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>

#include "template/tmpl.h"
#include "util/arena.h"
#include "util/err.h"

/* ---- values ---- */

enum tv_type {
    TV_UNDEF, /* s = the name that was missing (for the error text), may be NULL */
    TV_NONE,
    TV_BOOL,
    TV_INT,
    TV_FLOAT,
    TV_STR,
    TV_LIST, /* flags & TVF_TUPLE: prints as a tuple */
    TV_DICT,
    TV_NS,    /* namespace(): a dict whose attributes `set ns.x = ...` may change */
    TV_MACRO,
    TV_FUNC, /* a builtin callable: a global or a bound method (self + name) */
    TV_LOOP,
};

#define TVF_TUPLE 1
#define TVF_KEYS 2   /* dict.keys() view: prints as dict_keys([...]) */
#define TVF_VALUES 4
#define TVF_ITEMS 8

struct tlist;
struct tdict;
struct tmacro;
struct tfunc;
struct tloop;

struct tv {
    uint8_t t;
    uint8_t flags;
    union {
        int64_t i;
        double f;
        struct {
            const char *p;
            size_t n;
        } s;
        struct tlist *l;
        struct tdict *d;
        struct tmacro *m;
        struct tfunc *fn;
        struct tloop *lp;
    } u;
};

struct tlist {
    struct tv *v;
    size_t n, cap;
};

struct tdict {
    struct tv *k, *v;
    size_t n, cap;
};

/* ---- tokens ---- */

enum tk_type {
    TK_EOF,
    TK_DATA,
    TK_VAR_BEGIN,
    TK_VAR_END,
    TK_BLOCK_BEGIN,
    TK_BLOCK_END,
    TK_NAME,
    TK_STRING, /* s/n: the decoded value */
    TK_INT,
    TK_FLOAT,
    TK_OP, /* s/n: the operator text */
};

struct token {
    int type;
    int line;
    const char *s;
    size_t n;
    int64_t i;
    double f;
};

/* ---- syntax tree ---- */

enum tn_kind {
    /* expressions */
    N_CONST, N_NAME, N_LIST, N_TUPLE, N_DICT, N_ATTR, N_ITEM, N_SLICE, N_CALL, N_FILTER,
    N_TEST, N_BIN, N_NEG, N_POS, N_AND, N_OR, N_NOT, N_CMP, N_COND, N_CONCAT,
    /* statements */
    N_BODY, N_TEXT, N_OUT, N_IF, N_FOR, N_SET, N_SETBLOCK, N_MACRO, N_CALLBLOCK,
    N_FILTERBLOCK, N_BREAK, N_CONTINUE,
};

struct tnode {
    int kind, line, op, neg;
    const char *s; /* name / text / operator; NUL-terminated */
    size_t n;
    struct tv lit;              /* N_CONST */
    struct tnode *a, *b, *c, *d;
    struct tnode **kids;        /* args, items, body, compare operands */
    int nkids;
    struct tnode **kids2;       /* kwarg values, dict values, else body, defaults */
    int nkids2;
    const char **names;         /* kwarg names, for targets, macro params, compare ops */
    int nnames;
};

struct tmpl {
    struct arena a;
    struct tnode *root;
};

#define TMPL_MAX_DEPTH 200 /* parse nesting (expressions + blocks) */

/* Lexes src into a token array in a (ends with TK_EOF). 0 or CERR_FORMAT. */
int tlex_run(struct arena *a, const char *src, size_t len, struct token **toks, size_t *ntok,
             struct cerr *e);
/* Parses tokens into the tree root. 0 or CERR_FORMAT / CERR_LIMIT. */
int tparse_run(struct arena *a, const struct token *toks, size_t ntok, struct tnode **root,
               struct cerr *e);

/* ---- render context ---- */

struct tbuf {
    char *p;
    size_t n, cap;
};

struct scope {
    struct scope *up;
    struct tdict vars;
    int captured; /* a macro closes over it: loops must not recycle it */
};

struct tmacro {
    const struct tnode *def; /* N_MACRO (or the caller body of an N_CALLBLOCK) */
    struct scope *closure;
    struct tv caller; /* TV_UNDEF when not called through {% call %} */
};

struct tfunc {
    const char *name;
    struct tv self; /* TV_UNDEF for globals */
};

struct tloop {
    const struct tlist *items;
    size_t i;
    int depth;
    int has_last;        /* loop.changed(): a value was seen */
    struct tv last_seen; /* loop.changed(): the arguments of the last call, as a tuple */
};

struct rctx {
    struct arena a;
    jmp_buf jb;
    struct cerr *e;
    struct tbuf *out;
    int64_t steps, max_steps;
    int depth;
    int line;
    int64_t now_unix;
    int brk; /* 1 = break, 2 = continue pending */
    size_t mem_cap;
    const struct tnode *macro_call_caller;
};

#define TMPL_MAX_CALL_DEPTH 500
#define TMPL_MEM_CAP ((size_t)128 << 20)
#define TMPL_MAX_RANGE 100000

/* Fails the render: formats the message into r->e (code CERR_FORMAT or CERR_LIMIT) and
 * longjmps back to tmpl_render. raw = 1 uses the text verbatim (raise_exception). */
_Noreturn void tfail(struct rctx *r, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
_Noreturn void tfail_raw(struct rctx *r, const char *msg, size_t n);

/* Fails the render with an Undefined's message ("'x' is undefined", ...). */
_Noreturn void tundef_fail(struct rctx *r, struct tv u);

/* Arena allocation that fails the render instead of returning NULL. */
void *ralloc(struct rctx *r, size_t n);

/* ---- tmpl_value.c ---- */
struct tv tv_undef(const char *name);
struct tv tv_none(void);
struct tv tv_bool(int b);
struct tv tv_int(int64_t i);
struct tv tv_float(double f);
struct tv tv_str(const char *p, size_t n);
struct tv tv_strz(const char *p);
struct tv tv_str_copy(struct rctx *r, const char *p, size_t n);
struct tv tv_list(struct rctx *r, size_t cap);
struct tv tv_dict(struct rctx *r, size_t cap);
void tlist_push(struct rctx *r, struct tlist *l, struct tv v);
/* Sets key to v (replaces an equal key in place, else appends). */
void tdict_set(struct rctx *r, struct tdict *d, struct tv k, struct tv v);
/* The value of key k, or NULL. */
struct tv *tdict_get(const struct tdict *d, struct tv k);
struct tv *tdict_gets(const struct tdict *d, const char *k, size_t n);

int tv_truthy(struct tv v);
int tv_eq(struct tv a, struct tv b);
/* <0, 0, >0 like Python's <; fails the render on unorderable types. */
int tv_cmp(struct rctx *r, struct tv a, struct tv b);
const char *tv_typename(struct tv v);
int tv_is_num(struct tv v);
double tv_num(struct tv v);

void tbuf_put(struct rctx *r, struct tbuf *b, const char *p, size_t n);
void tbuf_putc(struct rctx *r, struct tbuf *b, char c);
void tbuf_puts(struct rctx *r, struct tbuf *b, const char *s);
/* Python str(v) / repr(v) appended to b. */
void tv_str_into(struct rctx *r, struct tbuf *b, struct tv v);
void tv_repr_into(struct rctx *r, struct tbuf *b, struct tv v);
void tv_float_repr(char *buf, size_t cap, double f);
/* str(v) as a string value (no copy for strings). */
struct tv tv_to_str(struct rctx *r, struct tv v);

/* UTF-8 helpers: code point count, byte offset of code point i (clamped), decode. */
size_t u8_len(const char *p, size_t n);
size_t u8_offset(const char *p, size_t n, size_t i);
size_t u8_decode(const char *p, size_t n, int32_t *cp);
size_t u8_encode(char *out, int32_t cp);
int py_isspace(int32_t cp);

/* ---- tmpl_json.c ---- */
struct tv tv_from_json(struct rctx *r, const json_t *j);
/* json.dumps(v, ensure_ascii, indent (NULL = none), separators (NULL = default),
 * sort_keys). */
void tv_tojson(struct rctx *r, struct tbuf *b, struct tv v, int ensure_ascii,
               const char *indent, const char *item_sep, const char *key_sep, int sort_keys);

/* ---- tmpl_eval.c ---- */
struct tv teval(struct rctx *r, struct scope *s, const struct tnode *n);
/* Calls a macro / builtin with evaluated arguments. */
struct tv tcall_value(struct rctx *r, struct tv fn, struct tv *args, int nargs,
                      const char **kwn, struct tv *kwv, int nkw);
/* obj.name / obj[key] with Jinja's getattr/getitem fallbacks. */
struct tv tget_attr(struct rctx *r, struct tv obj, const char *name, size_t n);
struct tv tget_item(struct rctx *r, struct tv obj, struct tv key);
/* Iteration: converts an iterable to a list (dict -> keys, string -> chars). */
struct tlist *titer(struct rctx *r, struct tv v);

/* ---- tmpl_ops.c ---- */
/* a OP b for + - * / // % ** (op is the operator text). */
struct tv top_binary(struct rctx *r, const char *op, struct tv a, struct tv b);
/* a OP b for == != < <= > >= in notin; 1 or 0. */
int top_compare(struct rctx *r, const char *op, struct tv a, struct tv b);
/* x - y, failing the render on int64 overflow. */
int64_t top_isub(struct rctx *r, int64_t x, int64_t y);

/* ---- tmpl_filters.c ---- */
struct tv tfilter_apply(struct rctx *r, const char *name, struct tv in, struct tv *args,
                        int nargs, const char **kwn, struct tv *kwv, int nkw);
int ttest_apply(struct rctx *r, const char *name, struct tv in, struct tv *args, int nargs);
int tfilter_exists(const char *name);
int ttest_exists(const char *name);
/* Keyword-or-positional argument lookup used by filters and methods. */
struct tv *targ(struct tv *args, int nargs, const char **kwn, struct tv *kwv, int nkw, int pos,
                const char *name);

/* ---- tmpl_methods.c ---- */
/* 1 if obj has a method called name (str/dict/list methods). */
int tmethod_exists(struct tv obj, const char *name, size_t n);
struct tv tmethod_call(struct rctx *r, struct tv self, const char *name, struct tv *args,
                       int nargs, const char **kwn, struct tv *kwv, int nkw);
/* Globals: range, namespace, dict, raise_exception, strftime_now, joiner-less subset. */
int tglobal_exists(const char *name);
struct tv tglobal_call(struct rctx *r, const char *name, struct tv *args, int nargs,
                       const char **kwn, struct tv *kwv, int nkw);
/* str methods used by filters too. */
struct tv tstr_strip(struct rctx *r, struct tv s, struct tv *chars, int left, int right);
struct tv tstr_case(struct rctx *r, struct tv s, int mode); /* 0 lower 1 upper */

#endif
