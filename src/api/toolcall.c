/* toolcall.c — the streaming tool-call parser (toolcall.h): a byte-at-a-time scanner that
 * streams content, holds back a possible marker prefix, collects each markup block until
 * it is complete (end tag, fence, or the end of its JSON value), then hands the block to a
 * whole-block parser (toolcall_parse.c). Byte-at-a-time makes the result independent of how
 * the text was cut into pieces. Also: family detection, call ids, the per-call records.
 */
#include "api/toolcall.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/toolcall_int.h"

/* ---- per-family markers ---- */

static const struct tc_marker M_TAG = {"<tool_call>", "</tool_call>", K_TAG};
static const struct tc_marker M_FUNC = {"<function=", "</function>", K_FUNC};
static const struct tc_marker M_PYTAG = {"<|python_tag|>", NULL, K_PYTAG};
static const struct tc_marker M_MISTRAL = {"[TOOL_CALLS]", NULL, K_MISTRAL};
static const struct tc_marker M_FENCE_PY = {"```tool_code", "```", K_FENCE_PY};
static const struct tc_marker M_FENCE_JSON = {"```json", "```", K_FENCE_JSON};
static const struct tc_marker M_GEMMA4 = {"<|tool_call>", "<tool_call|>", K_GEMMA4};
static const struct tc_marker M_BARE = {"{", NULL, K_BARE};
/* the Qwen2.5 templates list the tools inside <tools></tools>: small models (the
 * Qwen2.5-Coder 1.5B) wrap a call in those tags as often as in <tool_call> */
static const struct tc_marker M_TOOLS_TAG = {"<tools>", "</tools>", K_TAG};
static const struct tc_marker M_DEEPSEEK = {"<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>",
                                            "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>",
                                            K_DEEPSEEK};
static const struct tc_marker M_DEEPSEEK1 = {"<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>",
                                             "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>",
                                             K_DEEPSEEK1};

static const struct tc_marker *const MK_GENERIC[] = {
    &M_TAG,        &M_TOOLS_TAG, &M_FUNC,     &M_PYTAG,
    &M_MISTRAL,    &M_FENCE_JSON, &M_DEEPSEEK, &M_DEEPSEEK1, NULL};
static const struct tc_marker *const MK_HERMES[] = {&M_TAG, NULL};
static const struct tc_marker *const MK_QWEN3_XML[] = {&M_TAG, &M_FUNC, NULL};
static const struct tc_marker *const MK_LLAMA3[] = {&M_PYTAG, &M_FUNC, NULL};
static const struct tc_marker *const MK_MISTRAL[] = {&M_MISTRAL, NULL};
static const struct tc_marker *const MK_GEMMA[] = {&M_FENCE_PY, &M_FENCE_JSON, &M_GEMMA4, NULL};
static const struct tc_marker *const MK_DEEPSEEK[] = {&M_DEEPSEEK, &M_DEEPSEEK1, NULL};
static const struct tc_marker *const MK_NONE[] = {NULL};

static const struct {
    const struct tc_marker *const *m;
    int bare; /* a reply (or the text right after a call) that starts with '{' is markup */
} SPECS[] = {
    [TC_GENERIC] = {MK_GENERIC, 1}, [TC_HERMES] = {MK_HERMES, 0},
    [TC_QWEN3_XML] = {MK_QWEN3_XML, 0}, [TC_LLAMA3] = {MK_LLAMA3, 1},
    [TC_MISTRAL] = {MK_MISTRAL, 0}, [TC_GEMMA] = {MK_GEMMA, 1},
    [TC_DEEPSEEK] = {MK_DEEPSEEK, 0}, [TC_NONE] = {MK_NONE, 0},
};

/* ---- family detection ---- */

enum tc_family tc_family_detect(const char *tmpl, const char *arch)
{
    if (tmpl) {
        if (strstr(tmpl, "tool\xe2\x96\x81" "call\xe2\x96\x81" "begin")) /* tool▁call▁begin */
            return TC_DEEPSEEK;
        if (strstr(tmpl, "<function=") || strstr(tmpl, "<parameter="))
            return TC_QWEN3_XML;
        if (strstr(tmpl, "<tool_call>"))
            return TC_HERMES;
        if (strstr(tmpl, "[TOOL_CALLS]"))
            return TC_MISTRAL;
        if (strstr(tmpl, "<|python_tag|>") ||
            (strstr(tmpl, "ipython") && strstr(tmpl, "\"parameters\"")))
            return TC_LLAMA3;
        if (strstr(tmpl, "<|tool_call>") || strstr(tmpl, "tool_code"))
            return TC_GEMMA;
    }
    if (arch) {
        if (strncmp(arch, "gemma", 5) == 0)
            return TC_GEMMA;
        if (strncmp(arch, "mistral", 7) == 0)
            return TC_MISTRAL;
        if (strncmp(arch, "qwen3moe", 8) == 0 || strncmp(arch, "qwen2", 5) == 0 ||
            strncmp(arch, "qwen3", 5) == 0)
            return TC_HERMES;
        if (strncmp(arch, "llama", 5) == 0)
            return TC_LLAMA3;
    }
    return TC_GENERIC;
}

static const char *const FAMILY_NAMES[] = {
    [TC_GENERIC] = "generic", [TC_HERMES] = "hermes", [TC_QWEN3_XML] = "qwen3_xml",
    [TC_LLAMA3] = "llama3",   [TC_MISTRAL] = "mistral", [TC_GEMMA] = "gemma",
    [TC_DEEPSEEK] = "deepseek", [TC_NONE] = "none",
};

const char *tc_family_name(enum tc_family f)
{
    if ((int)f < 0 || f > TC_NONE)
        return "unknown";
    return FAMILY_NAMES[f];
}

int tc_family_from_name(const char *name)
{
    if (!name)
        return -1;
    for (int f = 0; f <= TC_NONE; f++)
        if (strcmp(name, FAMILY_NAMES[f]) == 0)
            return f;
    if (strcmp(name, "qwen") == 0)
        return TC_HERMES;
    if (strcmp(name, "qwen3_coder") == 0)
        return TC_QWEN3_XML;
    if (strcmp(name, "llama") == 0)
        return TC_LLAMA3;
    return -1;
}

/* ---- lifecycle ---- */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t default_seed(void)
{
    static _Atomic uint64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    x ^= atomic_fetch_add(&counter, 1) * 0xd1b54a32d192ed03ull;
    return splitmix64(&x);
}

int tc_new(struct tc_parser **out, enum tc_family family, const char *tools_json,
           struct cerr *e)
{
    *out = NULL;
    if ((int)family < 0 || family > TC_NONE)
        return cerr_set(e, CERR_INVALID, "tool parser: unknown family %d", (int)family);
    struct tc_parser *p = calloc(1, sizeof *p);
    if (!p)
        return cerr_set(e, CERR_NOMEM, "tool parser: out of memory");
    int rc = tct_load(&p->tools, tools_json, e);
    if (rc) {
        free(p);
        return rc;
    }
    p->family = family;
    p->markers = SPECS[family].m;
    p->bare = SPECS[family].bare;
    p->open = -1;
    p->seed = default_seed();
    p->at_start = 1;
    *out = p;
    return CERR_OK;
}

void tc_set_id_seed(struct tc_parser *p, uint64_t seed)
{
    p->seed = seed;
}

void tc_set_stream_args(struct tc_parser *p, int on)
{
    p->stream = on != 0;
}

void tc_free(struct tc_parser *p)
{
    if (!p)
        return;
    tct_free(p->tools);
    tcb_free(&p->mk);
    tcb_free(&p->ws);
    tcb_free(&p->pre_ws);
    tcb_free(&p->span);
    tcb_free(&p->out);
    for (int i = 0; i < p->ncalls; i++) {
        free(p->calls[i].name);
        tcb_free(&p->calls[i].args);
    }
    tcs_free(p);
    free(p->calls);
    for (int i = 0; i < p->nraws; i++)
        free(p->raws[i]);
    free(p->raws);
    free(p);
}

/* ---- accessors ---- */

int tc_call_count(const struct tc_parser *p)
{
    return p->open >= 0 ? p->ncalls - 1 : p->ncalls;
}

static const struct call_rec *rec(const struct tc_parser *p, int i)
{
    return i >= 0 && i < p->ncalls ? &p->calls[i] : NULL;
}

const char *tc_call_id(const struct tc_parser *p, int i)
{
    const struct call_rec *r = rec(p, i);
    return r ? r->id : NULL;
}

const char *tc_call_name(const struct tc_parser *p, int i)
{
    const struct call_rec *r = rec(p, i);
    return r ? r->name : NULL;
}

const char *tc_call_args(const struct tc_parser *p, int i)
{
    struct call_rec *r = (struct call_rec *)rec(p, i);
    return r && i != p->open ? tcb_cstr(&r->args) : NULL;
}

const char *tc_call_raw(const struct tc_parser *p, int i, int *first_in_block)
{
    const struct call_rec *r = rec(p, i);
    if (r && r->raw < 0)
        r = NULL; /* its block has not ended yet */
    if (first_in_block)
        *first_in_block = r ? r->first : 0;
    return r ? p->raws[r->raw] : NULL;
}

int tc_call_native(const struct tc_parser *p, int i)
{
    const struct call_rec *r = rec(p, i);
    if (!r || r->kind < 0)
        return 0;
    /* a fenced or bare JSON object is how a model imitates a call, not how a template
     * writes one, except in the families whose templates teach exactly that */
    if (r->kind == K_FENCE_JSON)
        return p->family == TC_GEMMA;
    if (r->kind == K_BARE)
        return p->family == TC_LLAMA3;
    return 1;
}

/* ---- events ---- */

static void flush_content(struct tc_parser *p)
{
    if (p->out.n == 0)
        return;
    struct tc_event ev = {.kind = TC_EV_CONTENT, .text = p->out.p, .n = p->out.n};
    if (p->cb)
        p->cb(&ev, p->ud);
    p->out.n = 0;
}

static char *dup_n(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

int tcp_call_begin(struct tc_parser *p, const char *name, size_t nn)
{
    if (p->ncalls == p->cap_calls) {
        int cap = p->cap_calls ? p->cap_calls * 2 : 4;
        struct call_rec *nc = realloc(p->calls, (size_t)cap * sizeof *nc);
        if (!nc)
            return CERR_NOMEM;
        p->calls = nc;
        p->cap_calls = cap;
    }
    struct call_rec *r = &p->calls[p->ncalls];
    memset(r, 0, sizeof *r);
    r->name = dup_n(name, nn);
    if (!r->name)
        return CERR_NOMEM;
    uint64_t x = p->seed ^ ((uint64_t)p->ncalls * 0x632be59bd9b4e019ull);
    uint64_t a = splitmix64(&x), b = splitmix64(&x);
    snprintf(r->id, sizeof r->id, "call_%016llx%08llx", (unsigned long long)a,
             (unsigned long long)(b & 0xffffffffull));
    r->raw = -1;
    r->kind = p->cur ? (int)p->cur->kind : -1;
    r->first = p->block_first;
    p->block_first = 0;
    p->block_calls++;
    p->open = p->ncalls++;
    flush_content(p);
    struct tc_event ev = {.kind = TC_EV_CALL_BEGIN, .index = p->open, .id = r->id,
                          .name = r->name};
    if (p->cb)
        p->cb(&ev, p->ud);
    return p->open;
}

void tcp_call_delta(struct tc_parser *p, const char *s, size_t n)
{
    if (p->open < 0 || n == 0)
        return;
    struct call_rec *r = &p->calls[p->open];
    tcb_put(&r->args, s, n);
    struct tc_event ev = {.kind = TC_EV_CALL_ARGS_DELTA, .index = p->open, .id = r->id,
                          .name = r->name, .text = s, .n = n};
    if (p->cb)
        p->cb(&ev, p->ud);
}

void tcp_call_end(struct tc_parser *p)
{
    if (p->open < 0)
        return;
    struct call_rec *r = &p->calls[p->open];
    if (r->args.oom)
        p->oom = 1;
    struct tc_event ev = {.kind = TC_EV_CALL_END, .index = p->open, .id = r->id,
                          .name = r->name, .text = tcb_cstr(&r->args), .n = r->args.n};
    p->open = -1;
    if (p->cb)
        p->cb(&ev, p->ud);
}

/* tcx_call_fn: one call of a block parsed whole; calls already streamed are skipped. */
static int on_call(void *ctx, const char *name, const char *args, size_t an)
{
    struct tc_parser *p = ctx;
    if (p->skip > 0) {
        p->skip--;
        return 0;
    }
    int rc = tcp_call_begin(p, name, strlen(name));
    if (rc < 0)
        return rc;
    tcp_call_delta(p, args, an);
    tcp_call_end(p);
    return 0;
}

/* ---- the byte scanner ---- */

static int is_ws(char c)
{
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

/* One byte of plain content: whitespace waits (it is dropped next to a call). */
static void content_byte(struct tc_parser *p, char c)
{
    if (is_ws(c)) {
        tcb_putc(&p->ws, c);
        return;
    }
    if (!p->after_call)
        tcb_put(&p->out, p->ws.p, p->ws.n);
    p->ws.n = 0;
    tcb_putc(&p->out, c);
    p->at_start = 0;
    p->after_call = 0;
}

static void content_bytes(struct tc_parser *p, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        content_byte(p, s[i]);
}

static void begin_block(struct tc_parser *p, const struct tc_marker *m)
{
    p->markup = 1;
    p->cur = m;
    p->pre_ws.n = 0;
    tcb_put(&p->pre_ws, p->ws.p, p->ws.n);
    p->ws.n = 0;
    p->mk.n = 0;
    p->span.n = 0;
    tcb_puts(&p->span, m->start);
    tcj_init(&p->json, 0);
    p->json_on = 0;
    p->block_first = 1;
    p->block_calls = 0;
    if (m->kind == K_BARE) {
        tcj_feed(&p->json, '{');
        p->json_on = 1;
    }
    if (p->stream)
        tcs_block_begin(p);
}

/* Keeps span[0..n) as the raw text of the calls of the current block; returns its index. */
static int add_raw(struct tc_parser *p, size_t n)
{
    char *raw = dup_n(tcb_cstr(&p->span), n);
    if (!raw)
        return CERR_NOMEM;
    if (p->nraws == p->cap_raws) {
        int cap = p->cap_raws ? p->cap_raws * 2 : 4;
        char **nr = realloc(p->raws, (size_t)cap * sizeof *nr);
        if (!nr) {
            free(raw);
            return CERR_NOMEM;
        }
        p->raws = nr;
        p->cap_raws = cap;
    }
    p->raws[p->nraws++] = raw;
    for (int i = 0; i < p->ncalls; i++)
        if (p->calls[i].raw < 0)
            p->calls[i].raw = p->nraws - 1;
    return p->nraws - 1;
}

/* Parses the finished block (end marker excluded from the body when `closed`) and reports
 * its calls, skipping the `skip` already streamed; returns the number of calls in the
 * block (0: not markup) or CERR_NOMEM. */
static int parse_block(struct tc_parser *p, int closed)
{
    const struct tc_marker *m = p->cur;
    const char *s = tcb_cstr(&p->span);
    size_t sl = strlen(m->start), n = p->span.n;
    size_t el = closed && m->end ? strlen(m->end) : 0;
    if (n < sl + el)
        return 0;
    const char *body = s + sl;
    size_t bn = n - sl - el;
    p->skip = p->block_calls;
    int r = 0;
    switch (m->kind) {
    case K_TAG:
        r = tcx_json_calls_repair(p->tools, body, bn, on_call, p);
        if (r == 0)
            r = tcx_xml_calls(p->tools, body, bn, on_call, p);
        break;
    case K_FUNC:
        r = closed ? tcx_xml_calls(p->tools, s, n, on_call, p) : 0;
        break;
    case K_PYTAG:
        r = tcx_json_calls(p->tools, body, bn, on_call, p);
        break;
    case K_FENCE_JSON:
        r = tcx_json_calls_repair(p->tools, body, bn, on_call, p);
        break;
    case K_BARE:
        r = tcx_json_calls_doubled(p->tools, s, n, on_call, p);
        break;
    case K_MISTRAL:
        r = tcx_mistral_calls(p->tools, body, bn, on_call, p);
        break;
    case K_FENCE_PY:
        r = tcx_python_calls(p->tools, body, bn, on_call, p);
        break;
    case K_GEMMA4:
        r = tcx_gemma4_calls(p->tools, body, bn, on_call, p);
        break;
    case K_DEEPSEEK:
        r = tcx_deepseek_calls(p->tools, body, bn, on_call, p);
        break;
    case K_DEEPSEEK1:
        r = closed ? tcx_deepseek_calls(p->tools, s, n, on_call, p) : 0;
        break;
    }
    p->skip = 0;
    return r;
}

/* After a block that produced calls: whitespace around calls is dropped. */
static void after_calls(struct tc_parser *p, size_t raw_n)
{
    if (add_raw(p, raw_n) < 0)
        p->oom = 1;
    p->at_start = 1;
    p->after_call = 1;
    p->ws.n = 0;
    p->markup = 0;
    p->span.n = 0;
    p->pre_ws.n = 0;
}

/* The block ended (or the generation did): calls, or the original text as content. In
 * stream mode a block that already began a call keeps it (closed with what arrived) and
 * drops whatever of the block does not parse. */
static void end_block(struct tc_parser *p, int closed)
{
    if (p->open >= 0)
        tcs_abort(p); /* the block ended inside the streamed arguments */
    int r = parse_block(p, closed);
    if (r < 0)
        p->oom = 1;
    if (r > 0 || p->block_calls > 0) {
        after_calls(p, p->span.n);
        return;
    }
    p->markup = 0;
    content_bytes(p, p->pre_ws.p, p->pre_ws.n);
    content_bytes(p, p->span.p, p->span.n);
    p->span.n = 0;
    p->pre_ws.n = 0;
}

static void text_byte(struct tc_parser *p, char c);

/* The block cannot be markup: its bytes so far (minus the last) are content, and the last
 * byte is scanned again as text. In stream mode, once a call began, the block's bytes are
 * that call's (closed with what arrived) and the breaking byte is dropped with them. */
static void break_block(struct tc_parser *p)
{
    char last = p->span.p[p->span.n - 1];
    p->span.n--;
    if (p->block_calls > 0) {
        if (p->open >= 0)
            tcs_abort(p);
        after_calls(p, p->span.n);
        return;
    }
    p->markup = 0;
    content_bytes(p, p->pre_ws.p, p->pre_ws.n);
    content_bytes(p, p->span.p, p->span.n);
    p->span.n = 0;
    p->pre_ws.n = 0;
    text_byte(p, last);
}

static int ends_with(const struct tcb *b, const char *lit, size_t min_len)
{
    size_t l = strlen(lit);
    return b->n >= l + min_len && memcmp(b->p + b->n - l, lit, l) == 0;
}

/* Mistral before its JSON: "[TOOL_CALLS]name[CALL_ID]id[ARGS]" or "[TOOL_CALLS][…]".
 * Returns 0 when the head cannot be Mistral markup; starts the validator at the JSON. */
static int mistral_head(struct tc_parser *p, char c)
{
    size_t sl = strlen(p->cur->start);
    const char *h = p->span.p + sl;
    size_t hn = p->span.n - sl - 1; /* head bytes before c */
    size_t k = 0, e = hn;
    while (k < hn && is_ws(h[k]))
        k++;
    while (e > k && is_ws(h[e - 1]))
        e--;
    int first = k == hn;
    int after_args = e - k >= 6 && memcmp(h + e - 6, "[ARGS]", 6) == 0;
    if ((first && (c == '[' || c == '{')) || (after_args && c == '{')) {
        p->json_on = 1;
        if (p->stream)
            tcs_json_start(p, after_args);
        return tcj_feed(&p->json, (unsigned char)c) != TCJ_ERR;
    }
    if (is_ws(c))
        return first || after_args;
    if (after_args || c == '{' || c == '}' || hn >= 256)
        return 0;
    return 1;
}

/* <tool_call> with a JSON body: follows the JSON so that "</tool_call>" inside one of its
 * strings (a file that documents tool calls) does not end the block. Returns 1 while the
 * body is inside a JSON string that has no raw newline so far: a string the model forgot
 * to close usually runs into a new line before the end tag, and then the tag counts. */
static int tag_json_in_string(struct tc_parser *p, unsigned char c)
{
    if (p->json_on == 0) { /* between values */
        if (is_ws((char)c) || c == ';' || c == ',')
            return 0;
        tcj_init(&p->json, 0);
        p->json_on = 1;
    }
    if (p->json_on < 0)
        return 0;
    int was_str = p->json.st == S_STR || p->json.st == S_ESC || p->json.st == S_U;
    int r = tcj_feed(&p->json, c);
    if (r == TCJ_ERR)
        p->json_on = -1; /* not JSON (XML, or broken): the first end tag ends the block */
    else if (r == TCJ_DONE)
        p->json_on = 0;
    int in_str = p->json_on == 1 &&
                 (p->json.st == S_STR || p->json.st == S_ESC || p->json.st == S_U);
    if (in_str && !was_str)
        p->json_str_nl = 0;
    else if (in_str && c == '\n')
        p->json_str_nl = 1;
    return in_str && !p->json_str_nl;
}

static void markup_byte(struct tc_parser *p, char c)
{
    tcb_putc(&p->span, c);
    const struct tc_marker *m = p->cur;
    if (m->end) {
        int in_str = m->kind == K_TAG && tag_json_in_string(p, (unsigned char)c);
        if (!in_str && ends_with(&p->span, m->end, strlen(m->start)))
            end_block(p, 1);
        else if (p->stream)
            tcs_byte(p);
        return;
    }
    if (m->kind == K_MISTRAL && !p->json_on) {
        if (!mistral_head(p, c))
            break_block(p);
        else if (p->stream && p->json_on)
            tcs_byte(p);
        return;
    }
    if (p->stream)
        tcs_byte(p);
    if (m->kind == K_BARE && c == '{' && p->span.n == 2)
        return; /* "{{": a doubled-brace call (tcx_json_calls_doubled); the object is inside */
    int r = tcj_feed(&p->json, (unsigned char)c); /* K_PYTAG skips whitespace before it */
    if (r == TCJ_DONE)
        end_block(p, 1);
    else if (r == TCJ_ERR)
        break_block(p);
}

static int is_marker_prefix(const struct tc_parser *p, const char *s, size_t n, int *full,
                            const struct tc_marker **which)
{
    int any = 0;
    *full = 0;
    for (int i = 0; p->markers[i]; i++) {
        const struct tc_marker *m = p->markers[i];
        size_t l = strlen(m->start);
        if (n <= l && memcmp(m->start, s, n) == 0) {
            any = 1;
            if (n == l) {
                *full = 1;
                *which = m;
            }
        }
    }
    return any;
}

static void text_byte(struct tc_parser *p, char c)
{
    int full = 0;
    const struct tc_marker *m = NULL;
    if (p->mk.n == 0) {
        if (p->bare && p->at_start && c == '{') {
            begin_block(p, &M_BARE);
            return;
        }
        /* Llama: {…}; {…} — and the stray braces of a doubled-brace call ({{…}}}}) */
        if (p->after_call && p->bare && (c == ';' || c == '}')) {
            tcb_putc(&p->ws, c);
            return;
        }
        if (!is_marker_prefix(p, &c, 1, &full, &m)) {
            content_byte(p, c);
            return;
        }
    }
    tcb_putc(&p->mk, c);
    if (is_marker_prefix(p, p->mk.p, p->mk.n, &full, &m)) {
        if (full)
            begin_block(p, m);
        return;
    }
    /* not a marker: release bytes up to the longest suffix that may still start one */
    size_t k = 1;
    while (k < p->mk.n && !is_marker_prefix(p, p->mk.p + k, p->mk.n - k, &full, &m))
        k++;
    content_bytes(p, p->mk.p, k);
    memmove(p->mk.p, p->mk.p + k, p->mk.n - k);
    p->mk.n -= k;
    if (p->mk.n && is_marker_prefix(p, p->mk.p, p->mk.n, &full, &m) && full)
        begin_block(p, m);
}

int tc_push(struct tc_parser *p, const char *text, size_t n, tc_event_fn cb, void *ud)
{
    if (p->oom)
        return CERR_NOMEM;
    p->cb = cb;
    p->ud = ud;
    for (size_t i = 0; i < n; i++) {
        if (p->markup)
            markup_byte(p, text[i]);
        else
            text_byte(p, text[i]);
    }
    if (p->stream && p->markup)
        tcs_emit(p);
    flush_content(p);
    if (p->oom || p->out.oom || p->span.oom || p->mk.oom || p->ws.oom || p->pre_ws.oom) {
        p->oom = 1;
        return CERR_NOMEM;
    }
    return CERR_OK;
}

int tc_flush(struct tc_parser *p, tc_event_fn cb, void *ud)
{
    if (p->oom)
        return CERR_NOMEM;
    p->cb = cb;
    p->ud = ud;
    if (p->markup)
        end_block(p, 0); /* a block may be complete without its end tag */
    size_t held = p->mk.n;
    p->mk.n = 0;
    content_bytes(p, p->mk.p, held);
    if (!p->after_call)
        tcb_put(&p->out, p->ws.p, p->ws.n);
    p->ws.n = 0;
    flush_content(p);
    return p->oom || p->out.oom ? CERR_NOMEM : CERR_OK;
}

int tc_parse_text(enum tc_family family, const char *tools_json, const char *text, size_t n,
                  uint64_t id_seed, tc_event_fn cb, void *ud, struct cerr *e)
{
    struct tc_parser *p;
    int rc = tc_new(&p, family, tools_json, e);
    if (rc)
        return rc;
    tc_set_id_seed(p, id_seed);
    rc = tc_push(p, text, n, cb, ud);
    if (!rc)
        rc = tc_flush(p, cb, ud);
    tc_free(p);
    if (rc)
        cerr_set(e, rc, "tool parser: out of memory");
    return rc;
}
