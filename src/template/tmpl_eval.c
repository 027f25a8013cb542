/* tmpl_eval.c — tree-walking evaluator and tmpl_parse/tmpl_render entry points.
 *
 * Scopes follow jinja2: the render context and globals at the root (top-level `set`
 * writes there), a fresh scope for every loop iteration and macro call, so a `set` inside
 * a loop is gone at the next iteration (hence namespace()). Attribute and item access use
 * Jinja's fallbacks (getattr then getitem, and back) and give Undefined, not an error,
 * when nothing is found; using an Undefined (attribute, call, arithmetic) is the error.
 * Every expression and statement costs a step; steps, call depth, output and arena size
 * are bounded so a hostile template fails cleanly instead of hanging or overflowing.
 */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/tmpl_int.h"
#include "util/log.h"

static void exec_body(struct rctx *r, struct scope *s, const struct tnode *n);

/* ---- errors and memory ---- */

_Noreturn void tfail(struct rctx *r, int code, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (code == CERR_LIMIT)
        cerr_set(r->e, code, "template error: %s", msg);
    else
        cerr_set(r->e, code, "template error: line %d: %s", r->line, msg);
    longjmp(r->jb, 1);
}

_Noreturn void tfail_raw(struct rctx *r, const char *msg, size_t n)
{
    cerr_set(r->e, CERR_FORMAT, "%.*s", (int)(n > 500 ? 500 : n), msg);
    longjmp(r->jb, 1);
}

void *ralloc(struct rctx *r, size_t n)
{
    if (n > r->mem_cap || r->a.used_total > r->mem_cap)
        tfail(r, CERR_LIMIT, "template used more than %zu bytes of memory", r->mem_cap);
    void *p = arena_alloc(&r->a, n ? n : 1);
    if (!p)
        tfail(r, CERR_NOMEM, "out of memory rendering template");
    return p;
}

static void step(struct rctx *r, const struct tnode *n)
{
    r->line = n->line;
    if (++r->steps > r->max_steps)
        tfail(r, CERR_LIMIT, "template ran more than %" PRId64 " steps (infinite loop?)",
              r->max_steps);
}

static struct tv undef_fmt(struct rctx *r, const char *fmt, const char *a, const char *b)
{
    char m[300];
    snprintf(m, sizeof m, fmt, a, b);
    struct tv v = tv_str_copy(r, m, strlen(m));
    v.t = TV_UNDEF;
    return v;
}

_Noreturn void tundef_fail(struct rctx *r, struct tv u)
{
    if (u.u.s.p && u.u.s.n)
        tfail(r, CERR_FORMAT, "%s", u.u.s.p);
    tfail(r, CERR_FORMAT, "undefined value");
}

static const char *obj_name(struct tv v)
{
    switch (v.t) {
    case TV_DICT: return "dict object";
    case TV_LIST: return (v.flags & TVF_TUPLE) ? "tuple object" : "list object";
    case TV_STR: return "str object";
    case TV_INT: return "int object";
    case TV_FLOAT: return "float object";
    case TV_BOOL: return "bool object";
    case TV_NONE: return "None";
    case TV_NS: return "jinja2.utils.Namespace object";
    default: return "object";
    }
}

/* ---- scopes ---- */

static struct scope *scope_new(struct rctx *r, struct scope *up)
{
    struct scope *s = ralloc(r, sizeof *s);
    memset(s, 0, sizeof *s);
    s->up = up;
    return s;
}

static void scope_set(struct rctx *r, struct scope *s, const char *name, struct tv v)
{
    tdict_set(r, &s->vars, tv_strz(name), v);
}

static struct tv lookup(struct rctx *r, struct scope *s, const char *name, size_t n)
{
    for (; s; s = s->up) {
        struct tv *v = tdict_gets(&s->vars, name, n);
        if (v)
            return *v;
    }
    return undef_fmt(r, "'%s' is undefined", name, NULL);
}

/* ---- attribute / item access ---- */

static struct tv bound(struct rctx *r, struct tv self, const char *name)
{
    struct tv v = {.t = TV_FUNC};
    v.u.fn = ralloc(r, sizeof *v.u.fn);
    v.u.fn->name = name;
    v.u.fn->self = self;
    return v;
}

static struct tv loop_attr(struct rctx *r, struct tv obj, const char *name)
{
    const struct tloop *lp = obj.u.lp;
    int64_t i = (int64_t)lp->i, len = (int64_t)lp->items->n;
    if (!strcmp(name, "index"))
        return tv_int(i + 1);
    if (!strcmp(name, "index0"))
        return tv_int(i);
    if (!strcmp(name, "revindex"))
        return tv_int(len - i);
    if (!strcmp(name, "revindex0"))
        return tv_int(len - i - 1);
    if (!strcmp(name, "first"))
        return tv_bool(i == 0);
    if (!strcmp(name, "last"))
        return tv_bool(i == len - 1);
    if (!strcmp(name, "length"))
        return tv_int(len);
    if (!strcmp(name, "depth"))
        return tv_int(lp->depth);
    if (!strcmp(name, "depth0"))
        return tv_int(lp->depth - 1);
    if (!strcmp(name, "previtem"))
        return i > 0 ? lp->items->v[i - 1] : undef_fmt(r, "there is no previous item%s%s", "", "");
    if (!strcmp(name, "nextitem"))
        return i + 1 < len ? lp->items->v[i + 1] : undef_fmt(r, "there is no next item%s%s", "", "");
    if (!strcmp(name, "cycle"))
        return bound(r, obj, "cycle");
    if (!strcmp(name, "changed"))
        return bound(r, obj, "changed");
    return undef_fmt(r, "'LoopContext object' has no attribute '%s'%s", name, "");
}

struct tv tget_attr(struct rctx *r, struct tv obj, const char *name, size_t n)
{
    switch (obj.t) {
    case TV_UNDEF:
        tundef_fail(r, obj);
    case TV_LOOP:
        return loop_attr(r, obj, name);
    case TV_NS: {
        struct tv *v = tdict_gets(obj.u.d, name, n);
        if (v)
            return *v;
        break;
    }
    case TV_DICT: {
        if (tmethod_exists(obj, name, n))
            return bound(r, obj, name);
        struct tv *v = tdict_gets(obj.u.d, name, n);
        if (v)
            return *v;
        break;
    }
    default:
        if (tmethod_exists(obj, name, n))
            return bound(r, obj, name);
    }
    return undef_fmt(r, "'%s' has no attribute '%s'", obj_name(obj), name);
}

static int64_t as_index(struct tv k, int *ok)
{
    *ok = k.t == TV_INT || k.t == TV_BOOL;
    return *ok ? k.u.i : 0;
}

struct tv tget_item(struct rctx *r, struct tv obj, struct tv key)
{
    int ok;
    switch (obj.t) {
    case TV_UNDEF:
        tundef_fail(r, obj);
    case TV_DICT: {
        struct tv *v = tdict_get(obj.u.d, key);
        if (v)
            return *v;
        if (key.t == TV_STR && tmethod_exists(obj, key.u.s.p, key.u.s.n))
            return bound(r, obj, key.u.s.p);
        break;
    }
    case TV_LIST: {
        int64_t i = as_index(key, &ok);
        if (ok) {
            int64_t n = (int64_t)obj.u.l->n;
            if (i < 0)
                i += n;
            if (i >= 0 && i < n)
                return obj.u.l->v[i];
        }
        break;
    }
    case TV_STR: {
        int64_t i = as_index(key, &ok);
        if (ok) {
            int64_t n = (int64_t)u8_len(obj.u.s.p, obj.u.s.n);
            if (i < 0)
                i += n;
            if (i >= 0 && i < n) {
                size_t a = u8_offset(obj.u.s.p, obj.u.s.n, (size_t)i);
                size_t b = u8_offset(obj.u.s.p, obj.u.s.n, (size_t)i + 1);
                return tv_str(obj.u.s.p + a, b - a);
            }
        }
        break;
    }
    default:
        break;
    }
    if (key.t == TV_STR && obj.t != TV_DICT)
        return tget_attr(r, obj, key.u.s.p, key.u.s.n);
    if (key.t == TV_INT) {
        char num[32];
        snprintf(num, sizeof num, "%" PRId64, key.u.i);
        return undef_fmt(r, "%s has no element %s", obj_name(obj), num);
    }
    struct tv ks = tv_to_str(r, key);
    return undef_fmt(r, "'%s' has no attribute '%s'", obj_name(obj), ks.u.s.p);
}

/* Python slice index normalisation (PySlice_AdjustIndices). */
static size_t slice_indices(int64_t len, struct tv *st, struct tv *sp, struct tv *sep,
                            int64_t *start, int64_t *step, struct rctx *r)
{
    int64_t stp = 1;
    if (sep && sep->t != TV_NONE) {
        if (sep->t != TV_INT && sep->t != TV_BOOL)
            tfail(r, CERR_FORMAT, "slice indices must be integers or None");
        stp = sep->u.i == INT64_MIN ? -INT64_MAX : sep->u.i; /* -stp must not overflow */
        if (stp == 0)
            tfail(r, CERR_FORMAT, "slice step cannot be zero");
    }
    int64_t a, b;
    int64_t lo = stp < 0 ? -1 : 0, hi = stp < 0 ? len - 1 : len;
    if (!st || st->t == TV_NONE)
        a = stp < 0 ? hi : lo;
    else {
        if (st->t != TV_INT && st->t != TV_BOOL)
            tfail(r, CERR_FORMAT, "slice indices must be integers or None");
        a = st->u.i;
        if (a < 0) {
            a += len;
            if (a < lo)
                a = lo;
        } else if (a > hi)
            a = hi;
    }
    if (!sp || sp->t == TV_NONE)
        b = stp < 0 ? lo : hi;
    else {
        if (sp->t != TV_INT && sp->t != TV_BOOL)
            tfail(r, CERR_FORMAT, "slice indices must be integers or None");
        b = sp->u.i;
        if (b < 0) {
            b += len;
            if (b < lo)
                b = lo;
        } else if (b > hi)
            b = hi;
    }
    *start = a;
    *step = stp;
    if (stp < 0)
        return b < a ? (size_t)((a - b - 1) / (-stp) + 1) : 0;
    return a < b ? (size_t)((b - a - 1) / stp + 1) : 0;
}

static struct tv do_slice(struct rctx *r, struct tv obj, struct tv *a, struct tv *b, struct tv *c)
{
    int64_t start, stp;
    if (obj.t == TV_UNDEF)
        tundef_fail(r, obj);
    if (obj.t == TV_LIST) {
        size_t cnt = slice_indices((int64_t)obj.u.l->n, a, b, c, &start, &stp, r);
        struct tv out = tv_list(r, cnt);
        out.flags = obj.flags & TVF_TUPLE;
        for (size_t i = 0; i < cnt; i++)
            tlist_push(r, out.u.l, obj.u.l->v[start + (int64_t)i * stp]);
        return out;
    }
    if (obj.t == TV_STR) {
        const char *p = obj.u.s.p;
        size_t n = obj.u.s.n, ncp = u8_len(p, n);
        size_t cnt = slice_indices((int64_t)ncp, a, b, c, &start, &stp, r);
        if (stp == 1) {
            size_t x = u8_offset(p, n, (size_t)start);
            size_t y = u8_offset(p, n, (size_t)start + cnt);
            return tv_str(p + x, y - x);
        }
        /* general step: index code point offsets */
        size_t *off = ralloc(r, (ncp + 1) * sizeof *off);
        size_t i = 0, k = 0;
        int32_t cp;
        while (i < n) {
            off[k++] = i;
            i += u8_decode(p + i, n - i, &cp);
        }
        off[k] = n;
        struct tbuf out = {0};
        tbuf_put(r, &out, "", 0);
        for (size_t j = 0; j < cnt; j++) {
            int64_t ix = start + (int64_t)j * stp;
            tbuf_put(r, &out, p + off[ix], off[ix + 1] - off[ix]);
        }
        return tv_str(out.p, out.n);
    }
    if (obj.t == TV_DICT)
        tfail(r, CERR_FORMAT, "unhashable type: 'slice'");
    return undef_fmt(r, "'%s' object is not subscriptable%s", tv_typename(obj), "");
}

struct tlist *titer(struct rctx *r, struct tv v)
{
    switch (v.t) {
    case TV_LIST:
        return v.u.l;
    case TV_UNDEF: {
        struct tv l = tv_list(r, 0);
        return l.u.l;
    }
    case TV_DICT: {
        struct tv l = tv_list(r, v.u.d->n);
        for (size_t i = 0; i < v.u.d->n; i++)
            tlist_push(r, l.u.l, v.u.d->k[i]);
        return l.u.l;
    }
    case TV_STR: {
        struct tv l = tv_list(r, v.u.s.n);
        size_t i = 0;
        int32_t cp;
        while (i < v.u.s.n) {
            size_t k = u8_decode(v.u.s.p + i, v.u.s.n - i, &cp);
            tlist_push(r, l.u.l, tv_str(v.u.s.p + i, k));
            i += k;
        }
        return l.u.l;
    }
    default:
        tfail(r, CERR_FORMAT, "'%s' object is not iterable", tv_typename(v));
    }
}

/* ---- calls ---- */

static struct tv call_macro(struct rctx *r, struct tmacro *m, struct tv *args, int nargs,
                            const char **kwn, struct tv *kwv, int nkw)
{
    const struct tnode *def = m->def;
    if (++r->depth > TMPL_MAX_CALL_DEPTH)
        tfail(r, CERR_LIMIT, "macro calls nested deeper than %d", TMPL_MAX_CALL_DEPTH);
    struct scope *s = scope_new(r, m->closure);
    struct tv varargs = tv_list(r, 0), kwargs = tv_dict(r, 0);
    varargs.flags = TVF_TUPLE;
    int used_kw = 0;
    for (int i = 0; i < def->nnames; i++) {
        struct tv v;
        int found = 0;
        if (i < nargs) {
            v = args[i];
            found = 1;
        }
        for (int k = 0; k < nkw; k++) {
            if (!strcmp(kwn[k], def->names[i])) {
                v = kwv[k];
                found = 1;
                used_kw++;
            }
        }
        if (!found) {
            if (i < def->nkids2 && def->kids2[i])
                v = teval(r, s, def->kids2[i]);
            else
                v = undef_fmt(r, "parameter '%s' was not provided%s", def->names[i], "");
        }
        scope_set(r, s, def->names[i], v);
    }
    for (int i = def->nnames; i < nargs; i++)
        tlist_push(r, varargs.u.l, args[i]);
    for (int k = 0; k < nkw; k++) {
        int is_param = 0;
        for (int i = 0; i < def->nnames; i++)
            is_param |= !strcmp(kwn[k], def->names[i]);
        if (!is_param && strcmp(kwn[k], "caller") != 0)
            tdict_set(r, kwargs.u.d, tv_strz(kwn[k]), kwv[k]);
        if (!strcmp(kwn[k], "caller") && !is_param)
            scope_set(r, s, "caller", kwv[k]);
    }
    (void)used_kw;
    scope_set(r, s, "varargs", varargs);
    scope_set(r, s, "kwargs", kwargs);
    if (m->caller.t != TV_UNDEF)
        scope_set(r, s, "caller", m->caller);
    struct tbuf *saved = r->out, buf = {0};
    int saved_brk = r->brk;
    r->out = &buf;
    tbuf_put(r, &buf, "", 0);
    exec_body(r, s, def->b);
    r->out = saved;
    r->brk = saved_brk;
    r->depth--;
    return tv_str(buf.p ? buf.p : "", buf.n);
}

struct tv tcall_value(struct rctx *r, struct tv fn, struct tv *args, int nargs, const char **kwn,
                      struct tv *kwv, int nkw)
{
    switch (fn.t) {
    case TV_MACRO:
        return call_macro(r, fn.u.m, args, nargs, kwn, kwv, nkw);
    case TV_FUNC:
        if (fn.u.fn->self.t == TV_UNDEF)
            return tglobal_call(r, fn.u.fn->name, args, nargs, kwn, kwv, nkw);
        if (fn.u.fn->self.t == TV_LOOP && !strcmp(fn.u.fn->name, "changed")) {
            struct tloop *lp = fn.u.fn->self.u.lp;
            struct tv cur = tv_list(r, (size_t)nargs);
            cur.flags = TVF_TUPLE;
            for (int i = 0; i < nargs; i++)
                tlist_push(r, cur.u.l, args[i]);
            int changed = !lp->has_last || !tv_eq(lp->last_seen, cur);
            lp->has_last = 1;
            lp->last_seen = cur;
            return tv_bool(changed);
        }
        if (fn.u.fn->self.t == TV_LOOP) {
            const struct tloop *lp = fn.u.fn->self.u.lp;
            if (nargs == 0)
                tfail(r, CERR_FORMAT, "no items for cycling given");
            return args[lp->i % (size_t)nargs];
        }
        return tmethod_call(r, fn.u.fn->self, fn.u.fn->name, args, nargs, kwn, kwv, nkw);
    case TV_UNDEF:
        tundef_fail(r, fn);
    default:
        tfail(r, CERR_FORMAT, "'%s' object is not callable", tv_typename(fn));
    }
}

/* Evaluates the positional and keyword arguments of a call/filter/test node. */
static void eval_args(struct rctx *r, struct scope *s, const struct tnode *n, struct tv **args,
                      struct tv **kwv)
{
    *args = ralloc(r, (size_t)(n->nkids + 1) * sizeof **args);
    *kwv = ralloc(r, (size_t)(n->nkids2 + 1) * sizeof **kwv);
    for (int i = 0; i < n->nkids; i++)
        (*args)[i] = teval(r, s, n->kids[i]);
    for (int i = 0; i < n->nkids2; i++)
        (*kwv)[i] = teval(r, s, n->kids2[i]);
}

static struct tv eval_call(struct rctx *r, struct scope *s, const struct tnode *n,
                           struct tv *extra_kw, const char *extra_name)
{
    struct tv fn = teval(r, s, n->a);
    struct tv *args, *kwv;
    eval_args(r, s, n, &args, &kwv);
    int nkw = n->nkids2;
    const char **kwn = n->names;
    if (extra_kw) {
        const char **kn = ralloc(r, (size_t)(nkw + 1) * sizeof *kn);
        struct tv *kv = ralloc(r, (size_t)(nkw + 1) * sizeof *kv);
        for (int i = 0; i < nkw; i++) {
            kn[i] = kwn[i];
            kv[i] = kwv[i];
        }
        kn[nkw] = extra_name;
        kv[nkw] = *extra_kw;
        kwn = kn;
        kwv = kv;
        nkw++;
    }
    r->line = n->line;
    return tcall_value(r, fn, args, n->nkids, kwn, kwv, nkw);
}

static struct tv apply_filter(struct rctx *r, struct scope *s, const struct tnode *n, struct tv in)
{
    struct tv *args, *kwv;
    eval_args(r, s, n, &args, &kwv);
    r->line = n->line;
    return tfilter_apply(r, n->s, in, args, n->nkids, n->names, kwv, n->nkids2);
}

/* A filter chain whose innermost ->a is NULL (set blocks, filter blocks). */
static struct tv apply_chain(struct rctx *r, struct scope *s, const struct tnode *n, struct tv in)
{
    if (!n)
        return in;
    if (n->a)
        in = apply_chain(r, s, n->a, in);
    return apply_filter(r, s, n, in);
}

/* ---- expressions ---- */

struct tv teval(struct rctx *r, struct scope *s, const struct tnode *n)
{
    step(r, n);
    if (++r->depth > TMPL_MAX_CALL_DEPTH)
        tfail(r, CERR_LIMIT, "template nested deeper than %d", TMPL_MAX_CALL_DEPTH);
    struct tv v;
    switch (n->kind) {
    case N_CONST:
        v = n->lit;
        break;
    case N_NAME:
        v = lookup(r, s, n->s, n->n);
        break;
    case N_LIST:
    case N_TUPLE:
        v = tv_list(r, (size_t)n->nkids);
        if (n->kind == N_TUPLE)
            v.flags = TVF_TUPLE;
        for (int i = 0; i < n->nkids; i++)
            tlist_push(r, v.u.l, teval(r, s, n->kids[i]));
        break;
    case N_DICT:
        v = tv_dict(r, (size_t)n->nkids);
        for (int i = 0; i < n->nkids; i++) {
            struct tv k = teval(r, s, n->kids[i]);
            if (k.t == TV_LIST && !(k.flags & TVF_TUPLE))
                tfail(r, CERR_FORMAT, "unhashable type: 'list'");
            if (k.t == TV_DICT)
                tfail(r, CERR_FORMAT, "unhashable type: 'dict'");
            tdict_set(r, v.u.d, k, teval(r, s, n->kids2[i]));
        }
        break;
    case N_ATTR:
        v = tget_attr(r, teval(r, s, n->a), n->s, n->n);
        break;
    case N_ITEM: {
        struct tv o = teval(r, s, n->a);
        v = tget_item(r, o, teval(r, s, n->b));
        break;
    }
    case N_SLICE: {
        struct tv o = teval(r, s, n->a), x, y, z;
        if (n->b)
            x = teval(r, s, n->b);
        if (n->c)
            y = teval(r, s, n->c);
        if (n->d)
            z = teval(r, s, n->d);
        v = do_slice(r, o, n->b ? &x : NULL, n->c ? &y : NULL, n->d ? &z : NULL);
        break;
    }
    case N_CALL:
        v = eval_call(r, s, n, NULL, NULL);
        break;
    case N_FILTER:
        v = apply_filter(r, s, n, teval(r, s, n->a));
        break;
    case N_TEST: {
        struct tv in = teval(r, s, n->a), *args, *kwv;
        eval_args(r, s, n, &args, &kwv);
        r->line = n->line;
        int t = ttest_apply(r, n->s, in, args, n->nkids);
        v = tv_bool(n->neg ? !t : t);
        break;
    }
    case N_BIN:
        v = top_binary(r, n->s, teval(r, s, n->a), teval(r, s, n->b));
        break;
    case N_NEG:
    case N_POS: {
        struct tv x = teval(r, s, n->a);
        if (x.t == TV_UNDEF)
            tundef_fail(r, x);
        if (!tv_is_num(x))
            tfail(r, CERR_FORMAT, "bad operand type for unary %c: '%s'", n->kind == N_NEG ? '-' : '+',
                  tv_typename(x));
        if (n->kind == N_POS)
            v = x.t == TV_BOOL ? tv_int(x.u.i) : x;
        else if (x.t == TV_FLOAT)
            v = tv_float(-x.u.f);
        else
            v = tv_int(top_isub(r, 0, x.u.i));
        break;
    }
    case N_AND: {
        struct tv x = teval(r, s, n->a);
        v = tv_truthy(x) ? teval(r, s, n->b) : x;
        break;
    }
    case N_OR: {
        struct tv x = teval(r, s, n->a);
        v = tv_truthy(x) ? x : teval(r, s, n->b);
        break;
    }
    case N_NOT:
        v = tv_bool(!tv_truthy(teval(r, s, n->a)));
        break;
    case N_CMP: {
        struct tv x = teval(r, s, n->a);
        v = tv_bool(1);
        for (int i = 0; i < n->nkids; i++) {
            struct tv y = teval(r, s, n->kids[i]);
            if (!top_compare(r, n->names[i], x, y)) {
                v = tv_bool(0);
                break;
            }
            x = y;
        }
        break;
    }
    case N_COND:
        if (tv_truthy(teval(r, s, n->a)))
            v = teval(r, s, n->b);
        else
            v = n->c ? teval(r, s, n->c) : undef_fmt(r, "the inline if-expression evaluated to false and no else section was defined.%s%s", "", "");
        break;
    case N_CONCAT: {
        struct tv x = teval(r, s, n->a), y = teval(r, s, n->b);
        struct tbuf o = {0};
        tbuf_put(r, &o, "", 0);
        tv_str_into(r, &o, x);
        tv_str_into(r, &o, y);
        v = tv_str(o.p, o.n);
        break;
    }
    default:
        tfail(r, CERR_FORMAT, "internal: bad expression node %d", n->kind);
    }
    r->depth--;
    return v;
}

/* ---- statements ---- */

static void assign_targets(struct rctx *r, struct scope *s, const struct tnode *n, struct tv v)
{
    if (!n->op) {
        scope_set(r, s, n->names[0], v);
        return;
    }
    struct tlist *items = titer(r, v);
    if (items->n != (size_t)n->nnames)
        tfail(r, CERR_FORMAT, "%s values to unpack (expected %d, got %zu)",
              items->n > (size_t)n->nnames ? "too many" : "not enough", n->nnames, items->n);
    for (int i = 0; i < n->nnames; i++)
        scope_set(r, s, n->names[i], items->v[i]);
}

static void exec_for(struct rctx *r, struct scope *s, const struct tnode *n)
{
    struct tv seq = teval(r, s, n->a);
    struct tlist *items = titer(r, seq);
    if (n->b) { /* for x in y if cond */
        struct tv kept = tv_list(r, items->n);
        for (size_t i = 0; i < items->n; i++) {
            struct scope *fs = scope_new(r, s);
            assign_targets(r, fs, n, items->v[i]);
            if (tv_truthy(teval(r, fs, n->b)))
                tlist_push(r, kept.u.l, items->v[i]);
        }
        items = kept.u.l;
    }
    /* One LoopContext mutated per iteration (as in jinja2), and the iteration scope
     * recycled unless a macro defined in the body closed over it: a long loop then
     * allocates nothing per iteration. */
    struct tloop *lp = ralloc(r, sizeof *lp);
    memset(lp, 0, sizeof *lp);
    lp->items = items;
    lp->depth = 1; /* loop.depth counts recursive-loop levels only; plain loops are 1 */
    struct tv lv = {.t = TV_LOOP};
    lv.u.lp = lp;
    struct scope *is = NULL;
    int completed = 0;
    for (size_t i = 0; i < items->n; i++) {
        step(r, n);
        if (!is || is->captured)
            is = scope_new(r, s);
        else
            is->vars.n = 0;
        lp->i = i;
        assign_targets(r, is, n, items->v[i]);
        scope_set(r, is, "loop", lv);
        exec_body(r, is, n->c);
        completed |= r->brk == 0;
        if (r->brk == 1) {
            r->brk = 0;
            break;
        }
        r->brk = 0;
    }
    /* jinja2 clears its "run the else block" flag at the end of the loop body, so the
     * else block also runs when every iteration left through break or continue */
    if (!completed && n->d)
        exec_body(r, s, n->d);
}

static struct tv capture(struct rctx *r, struct scope *s, const struct tnode *body)
{
    struct tbuf *saved = r->out, buf = {0};
    r->out = &buf;
    tbuf_put(r, &buf, "", 0);
    exec_body(r, s, body);
    r->out = saved;
    return tv_str(buf.p, buf.n);
}

static void exec_stmt(struct rctx *r, struct scope *s, const struct tnode *n)
{
    step(r, n);
    switch (n->kind) {
    case N_TEXT:
        tbuf_put(r, r->out, n->s, n->n);
        break;
    case N_OUT: {
        struct tv v = teval(r, s, n->a);
        tv_str_into(r, r->out, v);
        break;
    }
    case N_IF:
        if (tv_truthy(teval(r, s, n->a)))
            exec_body(r, s, n->b);
        else if (n->c) {
            if (n->c->kind == N_IF)
                exec_stmt(r, s, n->c);
            else
                exec_body(r, s, n->c);
        }
        break;
    case N_FOR:
        exec_for(r, s, n);
        break;
    case N_SET: {
        struct tv v = teval(r, s, n->a);
        if (n->nnames == 1 && n->s) { /* ns.attr = v */
            struct tv ns = lookup(r, s, n->s, strlen(n->s));
            if (ns.t != TV_NS)
                tfail(r, CERR_FORMAT, "cannot assign attribute on non-namespace object");
            tdict_set(r, ns.u.d, tv_strz(n->names[0]), v);
        } else if (n->s) {
            scope_set(r, s, n->s, v);
        } else {
            assign_targets(r, s, n, v);
        }
        break;
    }
    case N_SETBLOCK: {
        struct tv v = apply_chain(r, s, n->d, capture(r, s, n->b));
        if (n->nnames == 1) {
            struct tv ns = lookup(r, s, n->s, strlen(n->s));
            if (ns.t != TV_NS)
                tfail(r, CERR_FORMAT, "cannot assign attribute on non-namespace object");
            tdict_set(r, ns.u.d, tv_strz(n->names[0]), v);
        } else {
            scope_set(r, s, n->s, v);
        }
        break;
    }
    case N_MACRO: {
        struct tv m = {.t = TV_MACRO};
        m.u.m = ralloc(r, sizeof *m.u.m);
        m.u.m->def = n;
        m.u.m->closure = s;
        m.u.m->caller = tv_undef(NULL);
        s->captured = 1;
        scope_set(r, s, n->s, m);
        break;
    }
    case N_CALLBLOCK: {
        struct tv caller = {.t = TV_MACRO};
        caller.u.m = ralloc(r, sizeof *caller.u.m);
        caller.u.m->def = n;
        caller.u.m->closure = s;
        caller.u.m->caller = tv_undef(NULL);
        s->captured = 1;
        struct tv v = eval_call(r, s, n->a, &caller, "caller");
        tv_str_into(r, r->out, v);
        break;
    }
    case N_FILTERBLOCK:
        tv_str_into(r, r->out, apply_chain(r, s, n->d, capture(r, s, n->b)));
        break;
    case N_BREAK:
        r->brk = 1;
        break;
    case N_CONTINUE:
        r->brk = 2;
        break;
    case N_BODY:
        exec_body(r, s, n);
        break;
    default:
        tfail(r, CERR_FORMAT, "internal: bad statement node %d", n->kind);
    }
}

static void exec_body(struct rctx *r, struct scope *s, const struct tnode *n)
{
    if (++r->depth > TMPL_MAX_CALL_DEPTH)
        tfail(r, CERR_LIMIT, "template nested deeper than %d", TMPL_MAX_CALL_DEPTH);
    for (int i = 0; i < n->nkids && !r->brk; i++)
        exec_stmt(r, s, n->kids[i]);
    r->depth--;
}

/* ---- entry points ---- */

int tmpl_parse(struct tmpl **out, const char *src, size_t len, struct cerr *e)
{
    *out = NULL;
    struct tmpl *t = calloc(1, sizeof *t);
    if (!t)
        return cerr_set(e, CERR_NOMEM, "out of memory parsing template");
    arena_init(&t->a, 64 * 1024);
    struct token *toks;
    size_t ntok;
    int rc = tlex_run(&t->a, src ? src : "", src ? len : 0, &toks, &ntok, e);
    if (!rc)
        rc = tparse_run(&t->a, toks, ntok, &t->root, e);
    if (rc) {
        tmpl_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

void tmpl_free(struct tmpl *t)
{
    if (!t)
        return;
    arena_free(&t->a);
    free(t);
}

static const char *const g_globals[] = {"range", "namespace", "dict", "raise_exception",
                                        "strftime_now", "lipsum", "cycler", "joiner"};

/* Runs the render under the error boundary; 0 or the error code (in r->e). */
static int render_run(struct rctx *r, const struct tmpl *t, const json_t *ctx, struct tbuf *buf)
{
    if (setjmp(r->jb))
        return r->e->code ? r->e->code : CERR_FORMAT;
    struct scope *root = scope_new(r, NULL);
    for (size_t i = 0; i < sizeof g_globals / sizeof g_globals[0]; i++) {
        struct tv f = {.t = TV_FUNC};
        f.u.fn = ralloc(r, sizeof *f.u.fn);
        f.u.fn->name = g_globals[i];
        f.u.fn->self = tv_undef(NULL);
        scope_set(r, root, g_globals[i], f);
    }
    if (ctx) {
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)ctx, k, x) {
            scope_set(r, root, k, tv_from_json(r, x));
        }
    }
    r->out = buf;
    tbuf_put(r, buf, "", 0);
    exec_body(r, root, t->root);
    return 0;
}

int tmpl_render(const struct tmpl *t, const json_t *ctx, const struct tmpl_opts *o, char **out,
                size_t *len, struct cerr *e)
{
    struct cerr local;
    *out = NULL;
    if (len)
        *len = 0;
    if (!e)
        e = &local;
    e->code = 0;
    e->msg[0] = 0;
    if (ctx && !json_is_object(ctx))
        return cerr_set(e, CERR_INVALID, "template context must be a JSON object");
    struct rctx *r = calloc(1, sizeof *r);
    if (!r)
        return cerr_set(e, CERR_NOMEM, "out of memory rendering template");
    arena_init(&r->a, 64 * 1024);
    r->e = e;
    r->max_steps = (o && o->max_steps > 0) ? o->max_steps : 10 * 1000 * 1000;
    r->now_unix = o ? o->now_unix : 0;
    r->mem_cap = (o && o->max_bytes) ? o->max_bytes : TMPL_MEM_CAP;
    struct tbuf buf = {0};
    int rc = render_run(r, t, ctx, &buf);
    if (!rc) {
        char *res = malloc(buf.n + 1);
        if (!res) {
            rc = cerr_set(e, CERR_NOMEM, "out of memory rendering template");
        } else {
            memcpy(res, buf.p, buf.n);
            res[buf.n] = 0;
            *out = res;
            if (len)
                *len = buf.n;
        }
    }
    arena_free(&r->a);
    free(r);
    return rc;
}
