/* toolcall_stream.c — stream mode (tc_set_stream_args): follows a markup block while it
 * arrives so a call's arguments leave as deltas instead of all at the end. Two trackers run
 * on the block's bytes: one for JSON call objects ({"name":…,"arguments":{…}}, arrays of
 * them, Mistral's name[ARGS]{…}), one for Qwen3-Coder XML. A call is committed (CALL_BEGIN)
 * once its name is known and declared; from then on argument bytes are emitted only up to
 * points where the JSON so far can still be closed, so a block that breaks later (or a
 * generation cut short) ends the call with valid JSON made of what arrived. For blocks that
 * parse, the events equal those of the whole-block mode (tests check this at every split).
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "api/toolcall_int.h"

#define NPOS ((size_t)-1)
#define NAME_MAX_LEN 256

static int is_ws(char c)
{
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

/* Longest suffix of s[0..n) that is a proper, non-empty prefix of lit. */
static size_t partial_of(const char *s, size_t n, const char *lit)
{
    size_t l = strlen(lit);
    for (size_t k = n < l - 1 ? n : l - 1; k > 0; k--)
        if (memcmp(s + n - k, lit, k) == 0)
            return k;
    return 0;
}

/* Bytes at the end of the span that may belong to the block's end marker (complete or not). */
static size_t end_marker_tail(const struct tc_parser *p)
{
    const char *end = p->cur->end;
    if (!end)
        return 0;
    size_t l = strlen(end);
    if (p->span.n >= l && memcmp(p->span.p + p->span.n - l, end, l) == 0)
        return l;
    return partial_of(p->span.p, p->span.n, end);
}

/* ---- JSON tracker ---- */

static void js_emit(struct tc_parser *p, size_t limit, int final)
{
    struct tcs_json *js = &p->sj;
    if (limit <= js->a_emit)
        return;
    js->tmp.n = 0;
    js->a_emit += tcm_feed(&js->mz, &js->tmp, p->span.p + js->a_emit, limit - js->a_emit, final);
    tcp_call_delta(p, js->tmp.p, js->tmp.n);
}

/* Closes the open call with what was emitted plus what completes it. */
static void js_abort(struct tc_parser *p)
{
    struct tcs_json *js = &p->sj;
    size_t lim = p->span.n - end_marker_tail(p);
    js_emit(p, js->a_safe < lim ? js->a_safe : lim, 0);
    struct call_rec *r = &p->calls[p->open];
    struct tcj j;
    tcj_init(&j, 0);
    for (size_t i = 0; i < r->args.n; i++)
        if (tcj_feed(&j, (unsigned char)r->args.p[i]) != TCJ_MORE)
            break;
    js->tmp.n = 0;
    if (r->args.n == 0)
        tcb_puts(&js->tmp, "{}");
    else
        tcj_close(&j, &js->tmp);
    tcp_call_delta(p, js->tmp.p, js->tmp.n);
    tcp_call_end(p);
    js->in_args = 0;
}

static void js_kill(struct tc_parser *p)
{
    if (p->sj.in_args && p->open >= 0)
        js_abort(p);
    p->sj.dead = 1;
}

static void js_start_args(struct tc_parser *p, size_t pos, const char *name, size_t nn)
{
    struct tcs_json *js = &p->sj;
    if (tcp_call_begin(p, name, nn) < 0) {
        p->oom = 1;
        js->dead = 1;
        return;
    }
    js->obj_committed = 1;
    js->in_args = 1;
    tcj_init(&js->aj, 0);
    js->a_emit = js->a_safe = pos;
    js->mz.in_str = 0;
}

static void js_args_byte(struct tc_parser *p, size_t pos, unsigned char c)
{
    struct tcs_json *js = &p->sj;
    int r = tcj_feed(&js->aj, c);
    if (r == TCJ_ERR) {
        js_kill(p);
        return;
    }
    if (tcj_closable(&js->aj))
        js->a_safe = pos + 1;
    if (r == TCJ_DONE) {
        js_emit(p, pos + 1, 1);
        tcp_call_end(p);
        js->in_args = 0;
    }
}

/* Decodes the JSON string span[a..b) as the call's name; 1 when it names a declared tool. */
static int js_take_name(struct tc_parser *p, size_t a, size_t b)
{
    struct tcs_json *js = &p->sj;
    json_t *v = json_loadb(p->span.p + a, b - a, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    int ok = 0;
    js->name.n = 0;
    if (json_is_string(v)) {
        size_t l = json_string_length(v);
        const char *s = json_string_value(v);
        if (strlen(s) == l && tct_has(p->tools, s, l)) {
            tcb_put(&js->name, s, l);
            ok = !js->name.oom;
        }
    }
    json_decref(v);
    return ok;
}

static void js_byte(struct tc_parser *p, size_t pos)
{
    struct tcs_json *js = &p->sj;
    unsigned char c = (unsigned char)p->span.p[pos];
    if (js->dead)
        return;
    if (!js->started) {
        if (is_ws((char)c) || (!js->args_top && (c == ';' || c == ',')))
            return;
        if (c != '{' && (c != '[' || js->args_top)) {
            js_kill(p);
            return;
        }
        tcj_init(&js->j, 0);
        js->started = 1;
        js->call_depth = js->args_top ? -1 : c == '[' ? 2 : 1;
        if (js->args_top) {
            /* Mistral name[CALL_ID]id[ARGS]{: the name is the head's first word */
            size_t i = strlen(p->cur->start), e;
            while (i < pos && is_ws(p->span.p[i]))
                i++;
            for (e = i; e < pos && p->span.p[e] != '[' && !is_ws(p->span.p[e]); e++)
                ;
            if (!tct_has(p->tools, p->span.p + i, e - i) || js->obj_committed) {
                js_kill(p);
                return;
            }
            js_start_args(p, pos, p->span.p + i, e - i);
        }
    }
    int st0 = js->j.st, d0 = js->j.depth;
    int r = tcj_feed(&js->j, c);
    if (r == TCJ_ERR) {
        js_kill(p);
        return;
    }
    int cd = js->call_depth;
    if (cd > 0 && d0 == cd - 1 && js->j.depth == cd) { /* a call object opens */
        js->key_kind = 0;
        js->name_ready = 0;
        js->name_start = NPOS;
        js->obj_committed = c != '{'; /* an array at call depth is no call */
    }
    if (cd > 0 && d0 == cd) {
        if (st0 != S_STR && js->j.st == S_STR && js->j.key)
            js->key_start = pos + 1;
        if (st0 == S_STR && js->j.st == S_COLON) {
            size_t kl = pos - js->key_start;
            const char *k = p->span.p + js->key_start;
            js->key_kind = kl == 4 && !memcmp(k, "name", 4) ? 1
                         : (kl == 9 && !memcmp(k, "arguments", 9)) ||
                                   (kl == 10 && !memcmp(k, "parameters", 10))
                             ? 2
                             : 0;
        }
        if (st0 == S_VALUE && !is_ws((char)c)) { /* a member's value begins */
            if (js->key_kind == 1 && c == '"')
                js->name_start = pos;
            else if (js->key_kind == 2 && c == '{' && js->name_ready && !js->obj_committed)
                js_start_args(p, pos, js->name.p, js->name.n);
        }
        if (st0 == S_STR && js->j.st == S_AFTER && js->name_start != NPOS) {
            js->name_ready = js_take_name(p, js->name_start, pos + 1);
            js->name_start = NPOS;
        }
    }
    if (js->in_args)
        js_args_byte(p, pos, c);
    if (r == TCJ_DONE)
        js->started = 0;
}

/* The arguments of a call the XML tracker began are a JSON object starting at pos. */
static void js_attach(struct tc_parser *p, size_t pos)
{
    struct tcs_json *js = &p->sj;
    js->dead = 0;
    js->started = 1;
    js->args_top = 1;
    js->call_depth = -1;
    js->obj_committed = 1;
    tcj_init(&js->j, 0);
    js->in_args = 1;
    tcj_init(&js->aj, 0);
    js->a_emit = js->a_safe = pos;
    js->mz.in_str = 0;
    js_byte(p, pos);
}

/* ---- XML tracker ---- */

enum { XS_START, XS_FNAME, XS_PARAMS, XS_PNAME, XS_VALUE, XS_JSONARGS, XS_ENDF };

static const char *const VALUE_ENDS[] = {"</parameter>", "<parameter=", "</function>"};

static void xs_delta(struct tc_parser *p, const char *s)
{
    tcp_call_delta(p, s, strlen(s));
}

static void xs_open(struct tc_parser *p)
{
    if (!p->sx.opened)
        xs_delta(p, "{");
    p->sx.opened = 1;
}

/* String parameter: emits the value bytes that can no longer be part of a terminator, of
 * the trailing newline that is stripped, or of an incomplete UTF-8 sequence. */
static void xs_emit_value(struct tc_parser *p)
{
    struct tcs_xml *xs = &p->sx;
    if (xs->st != XS_VALUE || xs->ptype != TCT_STRING || xs->vb.n == 0)
        return;
    const char *v = xs->vb.p;
    size_t n = xs->vb.n, hold = 0;
    static const char *const HOLDS[] = {"</parameter>", "<parameter=", "</function>",
                                        "</tool_call>"};
    for (int i = 0; i < 4; i++) {
        size_t k = partial_of(v, n, HOLDS[i]);
        if (k > hold)
            hold = k;
    }
    size_t safe = n - hold;
    if (safe > 0 && v[safe - 1] == '\n')
        safe--;
    safe -= tcj_utf8_tail(v, safe);
    if (xs->v_emit == 0 && v[0] == '\n')
        xs->v_emit = 1;
    if (safe <= xs->v_emit)
        return;
    struct tcb *t = &p->sj.tmp;
    t->n = 0;
    tcj_escape_body(t, v + xs->v_emit, safe - xs->v_emit);
    tcp_call_delta(p, t->p, t->n);
    xs->v_emit = safe;
}

static void xs_abort(struct tc_parser *p)
{
    struct tcs_xml *xs = &p->sx;
    xs_open(p);
    if (xs->st == XS_VALUE && xs->ptype == TCT_STRING) {
        xs_emit_value(p);
        xs_delta(p, "\"");
    }
    xs_delta(p, "}");
    tcp_call_end(p);
    xs->in_call = 0;
}

static void xs_kill(struct tc_parser *p)
{
    if (p->sx.in_call && p->open >= 0)
        xs_abort(p);
    p->sx.dead = 1;
}

static void trim(struct tcb *b, size_t *a, size_t *e)
{
    *a = 0;
    *e = b->n;
    while (*a < *e && is_ws(b->p[*a]))
        (*a)++;
    while (*e > *a && is_ws(b->p[*e - 1]))
        (*e)--;
}

/* A parameter value ended with terminator `term` (0..2). */
static void xs_value_end(struct tc_parser *p, int term)
{
    struct tcs_xml *xs = &p->sx;
    size_t vn = xs->vb.n - strlen(VALUE_ENDS[term]);
    struct tcb *t = &p->sj.tmp;
    t->n = 0;
    if (xs->ptype == TCT_STRING) {
        size_t a = vn > 0 && xs->vb.p[0] == '\n' ? 1 : 0, e = vn;
        if (e > a && xs->vb.p[e - 1] == '\n')
            e--;
        if (xs->v_emit < a)
            xs->v_emit = a;
        if (e > xs->v_emit)
            tcj_escape_body(t, xs->vb.p + xs->v_emit, e - xs->v_emit);
        tcb_putc(t, '"');
    } else {
        size_t a, e;
        trim(&xs->pname, &a, &e);
        if (xs->np)
            tcb_putc(t, ',');
        tcj_escape(t, xs->pname.p + a, e - a);
        tcb_putc(t, ':');
        tcx_xml_value(t, xs->ptype, xs->vb.p, vn);
    }
    tcp_call_delta(p, t->p, t->n);
    xs->np++;
    if (term == 0) {
        xs->st = XS_PARAMS;
    } else if (term == 1) {
        xs->st = XS_PNAME;
        xs->pname.n = 0;
    } else {
        xs_delta(p, "}");
        tcp_call_end(p);
        xs->in_call = 0;
        xs->st = XS_START;
    }
}

static void xs_byte(struct tc_parser *p, char c)
{
    struct tcs_xml *xs = &p->sx;
    if (xs->dead)
        return;
    switch (xs->st) {
    case XS_JSONARGS: /* the JSON tracker streams a JSON body (Llama's <function=n>{…}) */
        if (!p->sj.in_args) {
            xs->in_call = 0; /* it ended the call (this byte closed the object, or broke it) */
            xs->st = XS_ENDF;
        }
        return;
    case XS_ENDF: {
        if (xs->lit.n == 0 && is_ws(c))
            return;
        tcb_putc(&xs->lit, c);
        if (xs->lit.n > 11 || memcmp(xs->lit.p, "</function>", xs->lit.n) != 0)
            xs->dead = 1;
        else if (xs->lit.n == 11)
            xs->lit.n = 0, xs->st = XS_START;
        return;
    }
    case XS_START:
    case XS_PARAMS: {
        if (xs->lit.n == 0 && is_ws(c))
            return;
        if (xs->st == XS_PARAMS && xs->lit.n == 0 && c == '{' && xs->np == 0 && !xs->opened) {
            js_attach(p, p->span.n - 1);
            xs->st = XS_JSONARGS;
            return;
        }
        tcb_putc(&xs->lit, c);
        static const char *const A[] = {"<function=", NULL};
        static const char *const B[] = {"<parameter=", "</function>", NULL};
        const char *const *cand = xs->st == XS_START ? A : B;
        int prefix = 0;
        for (int i = 0; cand[i]; i++) {
            size_t l = strlen(cand[i]);
            if (xs->lit.n > l || memcmp(cand[i], xs->lit.p, xs->lit.n) != 0)
                continue;
            prefix = 1;
            if (xs->lit.n < l)
                continue;
            xs->lit.n = 0;
            if (cand[i][1] == 'f') { /* <function= */
                xs->st = XS_FNAME;
                xs->name.n = 0;
            } else if (cand[i][1] == 'p') { /* <parameter= */
                xs_open(p);
                xs->st = XS_PNAME;
                xs->pname.n = 0;
            } else { /* </function> */
                xs_open(p);
                xs_delta(p, "}");
                tcp_call_end(p);
                xs->in_call = 0;
                xs->st = XS_START;
            }
            return;
        }
        if (!prefix)
            xs_kill(p);
        return;
    }
    case XS_FNAME:
        if (c == '>') {
            size_t a, e;
            trim(&xs->name, &a, &e);
            if (e == a || memchr(xs->name.p + a, '\n', e - a) ||
                !tct_has(p->tools, xs->name.p + a, e - a)) {
                xs_kill(p);
                return;
            }
            if (tcp_call_begin(p, xs->name.p + a, e - a) < 0) {
                p->oom = 1;
                xs->dead = 1;
                return;
            }
            /* keep the trimmed name for the parameter types */
            memmove(xs->name.p, xs->name.p + a, e - a);
            xs->name.n = e - a;
            tcb_cstr(&xs->name);
            xs->in_call = 1;
            xs->np = 0;
            xs->opened = 0;
            xs->st = XS_PARAMS;
        } else if (xs->name.n >= NAME_MAX_LEN) {
            xs_kill(p);
        } else {
            tcb_putc(&xs->name, c);
        }
        return;
    case XS_PNAME:
        if (c == '>') {
            size_t a, e;
            trim(&xs->pname, &a, &e);
            if (e == a) {
                xs_kill(p);
                return;
            }
            xs->ptype = tct_param_type(p->tools, xs->name.p, xs->pname.p + a, e - a);
            xs->st = XS_VALUE;
            xs->vb.n = 0;
            xs->v_emit = 0;
            if (xs->ptype == TCT_STRING) {
                struct tcb *t = &p->sj.tmp;
                t->n = 0;
                if (xs->np)
                    tcb_putc(t, ',');
                tcj_escape(t, xs->pname.p + a, e - a);
                tcb_puts(t, ":\"");
                tcp_call_delta(p, t->p, t->n);
            }
        } else if (xs->pname.n >= NAME_MAX_LEN) {
            xs_kill(p);
        } else {
            tcb_putc(&xs->pname, c);
        }
        return;
    case XS_VALUE:
        tcb_putc(&xs->vb, c);
        for (int t = 0; t < 3; t++) {
            size_t l = strlen(VALUE_ENDS[t]);
            if (xs->vb.n >= l && memcmp(xs->vb.p + xs->vb.n - l, VALUE_ENDS[t], l) == 0) {
                xs_value_end(p, t);
                return;
            }
        }
        return;
    }
}

/* ---- entry points ---- */

void tcs_block_begin(struct tc_parser *p)
{
    struct tcs_json *js = &p->sj;
    struct tcs_xml *xs = &p->sx;
    js->dead = xs->dead = 1;
    js->started = js->args_top = js->in_args = js->obj_committed = js->name_ready = 0;
    js->name_start = NPOS;
    js->key_kind = 0;
    xs->st = XS_START;
    xs->in_call = xs->opened = 0;
    xs->lit.n = xs->name.n = xs->pname.n = xs->vb.n = 0;
    switch (p->cur->kind) {
    case K_TAG:
        js->dead = xs->dead = 0;
        break;
    case K_FUNC:
        xs->dead = 0;
        xs->st = XS_FNAME;
        break;
    case K_PYTAG:
    case K_FENCE_JSON:
        js->dead = 0;
        break;
    case K_BARE:
        js->dead = 0;
        js_byte(p, 0);
        break;
    default: /* Mistral starts at its JSON (tcs_json_start); Python/Gemma 4: whole only */
        break;
    }
}

void tcs_json_start(struct tc_parser *p, int args_top)
{
    p->sj.dead = 0;
    p->sj.args_top = args_top;
}

void tcs_byte(struct tc_parser *p)
{
    size_t pos = p->span.n - 1;
    js_byte(p, pos);
    xs_byte(p, p->span.p[pos]);
}

void tcs_emit(struct tc_parser *p)
{
    if (p->sj.in_args && p->open >= 0) {
        size_t lim = p->span.n - end_marker_tail(p);
        if (p->sj.a_safe <= lim)
            js_emit(p, p->sj.a_safe, 0);
    }
    if (p->sx.in_call && p->open >= 0)
        xs_emit_value(p);
}

void tcs_abort(struct tc_parser *p)
{
    if (p->open < 0)
        return;
    if (p->sj.in_args)
        js_abort(p);
    else if (p->sx.in_call)
        xs_abort(p);
    else
        tcp_call_end(p);
}

void tcs_free(struct tc_parser *p)
{
    tcb_free(&p->sj.name);
    tcb_free(&p->sj.tmp);
    tcb_free(&p->sx.lit);
    tcb_free(&p->sx.name);
    tcb_free(&p->sx.pname);
    tcb_free(&p->sx.vb);
}
