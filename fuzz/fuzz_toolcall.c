/* fuzz_toolcall.c — libFuzzer target for the streaming tool-call parsers (api/toolcall.h).
 *
 * Input: byte 0 picks the family, whether the request declared tools (0x80) and stream
 * mode (0x40, tc_set_stream_args), byte 1 seeds
 * the chunking, the rest is the model output (any bytes). The text is fed whole and in a
 * pseudo-random chunking. Checks: no crash or leak; every stream follows BEGIN →
 * ARGS_DELTA* → END with deltas concatenating to the final arguments, which are a valid JSON
 * object (tcj_valid); no CONTENT inside a call; both feedings give identical events.
 * Seeds: fuzz/corpus/fuzz_toolcall/ (recorded outputs with the selector bytes prepended).
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/toolcall.h"
#include "api/toolcall_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char TOOLS[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":"
    "\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"}}}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"write_file\",\"parameters\":{\"type\":"
    "\"object\",\"properties\":{\"path\":{\"type\":\"string\"},\"options\":{\"type\":\"object\"},"
    "\"force\":{\"type\":\"boolean\"}}}}},{\"name\":\"x\",\"input_schema\":{}}]";

struct flog {
    struct tcb log;  /* serialized, merged event sequence */
    struct tcb args; /* the open call's joined deltas */
    int last;        /* kind of the last log entry, -1 none */
    int open, begun;
};

static void fail(const char *why)
{
    fprintf(stderr, "fuzz_toolcall: invariant broken: %s\n", why);
    abort();
}

static void on_event(const struct tc_event *ev, void *ud)
{
    struct flog *L = ud;
    switch (ev->kind) {
    case TC_EV_CONTENT:
        if (L->open >= 0 || ev->n == 0)
            fail("content inside a call or empty");
        if (L->last != TC_EV_CONTENT)
            tcb_put(&L->log, "\x01" "C", 2);
        tcb_put(&L->log, ev->text, ev->n);
        L->last = TC_EV_CONTENT;
        break;
    case TC_EV_CALL_BEGIN:
        if (L->open >= 0 || ev->index != L->begun || !ev->id || !ev->name || !ev->name[0])
            fail("bad CALL_BEGIN");
        L->open = ev->index;
        L->begun++;
        L->args.n = 0;
        tcb_put(&L->log, "\x01" "B", 2);
        tcb_puts(&L->log, ev->id);
        tcb_puts(&L->log, ev->name);
        L->last = TC_EV_CALL_BEGIN;
        break;
    case TC_EV_CALL_ARGS_DELTA:
        if (L->open != ev->index)
            fail("delta outside its call");
        tcb_put(&L->args, ev->text, ev->n);
        break;
    case TC_EV_CALL_END:
        if (L->open != ev->index)
            fail("END outside its call");
        if (ev->n != L->args.n || (ev->n && memcmp(ev->text, L->args.p, ev->n) != 0))
            fail("deltas do not concatenate to the final arguments");
        if (!tcj_valid(ev->text, ev->n, 0) || ev->text[0] != '{')
            fail("final arguments are not a JSON object");
        {
            /* numbers are copied as written: only an exponent beyond double is refused */
            json_error_t je;
            json_t *j = json_loadb(ev->text, ev->n, JSON_DECODE_INT_AS_REAL, &je);
            if (!json_is_object(j) && !(j == NULL && strstr(je.text, "overflow")))
                fail("final arguments rejected by jansson");
            json_decref(j);
        }
        tcb_put(&L->log, "\x01" "E", 2);
        tcb_put(&L->log, ev->text, ev->n);
        L->open = -1;
        L->last = TC_EV_CALL_END;
        break;
    }
}

static void run(int fam, const char *tools, int stream, const char *t, size_t n,
                uint32_t seed, struct flog *L)
{
    memset(L, 0, sizeof *L);
    L->last = -1;
    L->open = -1;
    struct tc_parser *p;
    if (tc_new(&p, (enum tc_family)fam, tools, NULL) != 0)
        abort();
    tc_set_id_seed(p, 42);
    tc_set_stream_args(p, stream);
    size_t i = 0;
    while (i < n) {
        size_t k = seed ? 1 + (seed % 7) : n - i;
        seed = seed * 1103515245u + 12345u;
        if (k > n - i)
            k = n - i;
        tc_push(p, t + i, k, on_event, L);
        i += k;
    }
    tc_flush(p, on_event, L);
    if (L->open >= 0)
        fail("call left open after flush");
    if (tc_call_count(p) != L->begun)
        fail("call count");
    tc_free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    int fam = (data[0] & 0x3f) % (TC_NONE + 1);
    int stream = (data[0] & 0x40) != 0;
    const char *tools = (data[0] & 0x80) ? NULL : TOOLS;
    uint32_t seed = data[1] | 1u;
    const char *t = (const char *)data + 2;
    size_t n = size - 2;
    struct flog a, b;
    run(fam, tools, stream, t, n, 0, &a);
    run(fam, tools, stream, t, n, seed, &b);
    if (a.log.n != b.log.n || (a.log.n && memcmp(a.log.p, b.log.p, a.log.n) != 0))
        fail("chunked feeding differs from the whole text");
    tcb_free(&a.log);
    tcb_free(&a.args);
    tcb_free(&b.log);
    tcb_free(&b.args);
    return 0;
}
