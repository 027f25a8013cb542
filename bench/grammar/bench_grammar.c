/* bench_grammar.c — grammar compile time and per-token mask time over a real vocabulary.
 *
 * usage: bench_grammar TOKENIZER INPUTS.json OUT_DIR
 * INPUTS: [{"name", "kind": "schema"|"regex"|"ebnf", "source", "text"}]; text is a string
 * the grammar accepts. For each input: compile (best of 5, µs), tokenize text, then walk its
 * tokens: at each step time gram_matcher_mask (µs), check the token is allowed, accept it.
 * Writes OUT_DIR/cinfer.json (per input: compile_us, the per-step mask times, ids) and
 * OUT_DIR/vocab.bin (each id: u32 length or 0xFFFFFFFF, then the bytes) for the peers, and
 * OUT_DIR/ids.json. Not a test: numbers only.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/grammar/gram.h"
#include "engine/grammar/gram_schema.h"
#include "engine/grammar/gram_tok.h"
#include "tokenizer/tok.h"

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts); /* CPU time: the machine is shared */
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int compile(const char *kind, json_t *src, struct gram **g, struct cerr *e)
{
    if (!strcmp(kind, "schema"))
        return gram_from_schema(g, src, 0, NULL, e);
    const char *s = json_string_value(src);
    if (!strcmp(kind, "regex"))
        return gram_from_regex(g, s, strlen(s), e);
    return gram_from_ebnf(g, s, strlen(s), e);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: bench_grammar TOKENIZER INPUTS.json OUT_DIR\n");
        return 2;
    }
    struct cerr e = {0};
    struct tok *t;
    if (tok_load(&t, argv[1], &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    int V = tok_vocab_size(t);
    int32_t eog[8];
    int ne = 0;
    for (int i = 0; i < V && ne < 8; i++)
        if (tok_is_eog(t, i))
            eog[ne++] = i;
    double t0 = now_us();
    struct gram_vocab *v;
    if (gram_vocab_from_tok(&v, t, V, eog, ne, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    double vocab_us = now_us() - t0;
    char path[4096];
    snprintf(path, sizeof path, "%s/vocab.bin", argv[3]);
    FILE *vf = fopen(path, "wb");
    char buf[1024];
    for (int i = 0; vf && i < V; i++) {
        int n = tok_token_bytes(t, i, buf, sizeof buf);
        uint32_t l = n < 0 ? 0xFFFFFFFFu : (uint32_t)n;
        fwrite(&l, 4, 1, vf);
        if (n > 0)
            fwrite(buf, 1, (size_t)n, vf);
    }
    if (vf)
        fclose(vf);
    json_error_t je;
    json_t *in = json_load_file(argv[2], 0, &je);
    if (!in) {
        fprintf(stderr, "%s: %s\n", argv[2], je.text);
        return 1;
    }
    json_t *out = json_object(), *res = json_array();
    json_object_set_new(out, "vocab_size", json_integer(V));
    json_object_set_new(out, "eos", json_integer(ne ? eog[0] : -1));
    json_t *jeog = json_array();
    for (int i = 0; i < ne; i++)
        json_array_append_new(jeog, json_integer(eog[i]));
    json_object_set_new(out, "eog", jeog); /* every end id: the peers stop on the same ones */
    json_object_set_new(out, "vocab_build_us", json_real(vocab_us));
    json_object_set_new(out, "inputs", res);
    uint32_t *mask = malloc(((size_t)V + 31) / 32 * 4), *mask2 = malloc(((size_t)V + 31) / 32 * 4);
    int check = getenv("BENCH_CHECK") && atoi(getenv("BENCH_CHECK")) > 0;
    FILE *dump = getenv("BENCH_DUMP_MASKS") ? fopen(getenv("BENCH_DUMP_MASKS"), "w") : NULL;
    long mism = 0;
    size_t i;
    json_t *c;
    json_array_foreach(in, i, c) {
        const char *name = json_string_value(json_object_get(c, "name"));
        const char *kind = json_string_value(json_object_get(c, "kind"));
        json_t *src = json_object_get(c, "source");
        const char *text = json_string_value(json_object_get(c, "text"));
        struct gram *g = NULL;
        double best = 1e30;
        int rc = 0;
        for (int rep = 0; rep < 5 && !rc; rep++) {
            double a = now_us();
            rc = compile(kind, src, &g, &e);
            double d = now_us() - a;
            if (d < best)
                best = d;
            if (!rc && rep < 4) {
                gram_unref(g);
                g = NULL;
            }
        }
        json_t *r = json_object();
        json_object_set_new(r, "name", json_string(name));
        json_object_set_new(r, "kind", json_string(kind));
        json_array_append_new(res, r);
        if (rc) {
            json_object_set_new(r, "error", json_string(e.msg));
            continue;
        }
        json_object_set_new(r, "compile_us", json_real(best));
        int32_t *ids = NULL;
        int n = 0;
        tok_encode(t, text, strlen(text), 0, &ids, &n, &e);
        struct gram_matcher *m;
        gram_matcher_new(&m, g, v, &e);
        if (m && (getenv("BENCH_WALK_BUDGET") || getenv("BENCH_UNC_LIMIT"))) /* levers' A/B */
            gram_matcher_tune(m, getenv("BENCH_WALK_BUDGET") ? atol(getenv("BENCH_WALK_BUDGET")) : -1,
                              getenv("BENCH_UNC_LIMIT") ? atol(getenv("BENCH_UNC_LIMIT")) : -1);
        json_t *times = json_array(), *jids = json_array();
        int ok = 1;
        for (int k = 0; k <= n; k++) {
            double a = now_us();
            gram_matcher_mask(m, mask);
            json_array_append_new(times, json_real(now_us() - a));
            if (dump && strcmp(kind, "schema")) { /* BENCH_DUMP_MASKS=FILE: regex/EBNF masks */
                fprintf(dump, "%s %d ", name, k);
                for (int w = 0; w < (V + 31) / 32; w++)
                    fprintf(dump, "%08x", mask[w]);
                fputc('\n', dump);
            }
            if (check) { /* BENCH_CHECK=1: every mask against stepping each id alone */
                int c2 = gram_matcher_mask_naive(m, mask2);
                for (int w = 0; w < (V + 31) / 32; w++)
                    if (mask[w] != mask2[w]) {
                        for (int b = 0; b < 32; b++)
                            if (((mask[w] ^ mask2[w]) >> b) & 1) {
                                int len;
                                const char *tb = gram_vocab_token(v, w * 32 + b, &len);
                                fprintf(stderr, "%s step %d: id %d '%.*s' fast %d naive %d\n", name, k,
                                        w * 32 + b, len > 0 ? len : 0, tb ? tb : "", (mask[w] >> b) & 1,
                                        (mask2[w] >> b) & 1);
                            }
                        mism++;
                    }
                (void)c2;
            }
            int32_t id = k < n ? ids[k] : eog[0];
            if (!((mask[id >> 5] >> (id & 31)) & 1)) {
                ok = 0;
                break;
            }
            if (k < n) {
                json_array_append_new(jids, json_integer(id));
                gram_matcher_accept(m, id);
            }
        }
        long masks, hits;
        gram_matcher_stats(m, &masks, &hits);
        json_object_set_new(r, "ok", json_boolean(ok));
        json_object_set_new(r, "mask_us", times);
        json_object_set_new(r, "ids", jids);
        json_object_set_new(r, "cache_hits", json_integer(hits));
        gram_matcher_free(m);
        free(ids);
        gram_unref(g);
    }
    snprintf(path, sizeof path, "%s/cinfer.json", argv[3]);
    json_dump_file(out, path, 0);
    json_decref(out);
    json_decref(in);
    free(mask);
    gram_vocab_free(v);
    tok_free(t);
    if (check)
        fprintf(stderr, "BENCH_CHECK: %ld masks differ from the naive ones\n", mism);
    if (dump)
        fclose(dump);
    free(mask2);
    return mism ? 1 : 0;
}
