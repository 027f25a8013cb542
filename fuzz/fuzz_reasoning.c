/* fuzz_reasoning.c — libFuzzer target for the think-tag splitter (api/reasoning.h).
 *
 * Input: byte 0 picks the tags (<think>, a self-overlapping pair, disabled) and
 * start_inside, byte 1 seeds the chunking, the rest is the model output. Fed whole and
 * chunked; checks: no crash or leak, segments are non-empty, both feedings give the same
 * merged segments, and the output bytes are a subsequence of the input (nothing invented).
 * Also exercises reasoning_prompt_open on the same bytes.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/reasoning.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct buf {
    char *p;
    size_t n, cap;
};

struct rlog {
    struct buf log;   /* merged segments with kind markers */
    struct buf plain; /* output bytes only */
    int last;
};

static void put(struct buf *b, const char *s, size_t n)
{
    if (b->n + n > b->cap) {
        size_t cap = (b->n + n) * 2 + 16;
        char *nb = realloc(b->p, cap);
        if (!nb)
            abort();
        b->p = nb;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

static void on_emit(int kind, const char *t, size_t n, void *ud)
{
    struct rlog *L = ud;
    if (n == 0 || (kind != RSN_CONTENT && kind != RSN_REASONING))
        abort();
    if (kind != L->last) {
        put(&L->log, kind ? "\x01R" : "\x01C", 2);
        L->last = kind;
    }
    put(&L->log, t, n);
    put(&L->plain, t, n);
}

static void run(const char *open, const char *close, int inside, const char *t, size_t n,
                uint32_t seed, struct rlog *L)
{
    memset(L, 0, sizeof *L);
    L->last = -1;
    struct rsn_splitter *s;
    if (rsn_new(&s, open, close, inside, NULL) != 0)
        abort();
    size_t i = 0;
    while (i < n) {
        size_t k = seed ? 1 + (seed % 5) : n - i;
        seed = seed * 1103515245u + 12345u;
        if (k > n - i)
            k = n - i;
        rsn_push(s, t + i, k, on_emit, L);
        i += k;
    }
    rsn_flush(s, on_emit, L);
    rsn_free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    static const char *tags[3][2] = {{"<think>", "</think>"}, {"<<x", ">>x"}, {NULL, NULL}};
    int sel = data[0] % 3, inside = (data[0] >> 2) & 1;
    const char *t = (const char *)data + 2;
    size_t n = size - 2;
    struct rlog a, b;
    run(tags[sel][0], tags[sel][1], inside, t, n, 0, &a);
    run(tags[sel][0], tags[sel][1], inside, t, n, data[1] | 1u, &b);
    if (a.log.n != b.log.n || (a.log.n && memcmp(a.log.p, b.log.p, a.log.n) != 0)) {
        fprintf(stderr, "fuzz_reasoning: chunked feeding differs\n");
        abort();
    }
    /* output bytes (markers removed) appear in the input in order */
    size_t j = 0;
    for (size_t i = 0; i < a.plain.n; i++) {
        while (j < n && t[j] != a.plain.p[i])
            j++;
        if (j == n) {
            fprintf(stderr, "fuzz_reasoning: output byte not from the input\n");
            abort();
        }
        j++;
    }
    free(a.log.p);
    free(a.plain.p);
    free(b.log.p);
    free(b.plain.p);
    if (n < 4096) {
        char *z = malloc(n + 1);
        memcpy(z, t, n);
        z[n] = 0;
        (void)reasoning_prompt_open(z, "<think>");
        free(z);
    }
    return 0;
}
