/* bench_tok.c — cinfer tokenizer encode throughput, one thread.
 *
 * usage: bench_tok TOKENIZER CORPUS.jsonl [reps]
 * Encodes every chunk of the corpus (TOK_PARSE_SPECIAL, as HF's default), `reps` times,
 * and prints the best pass as: "cinfer <bytes> bytes <ids> ids <seconds> s <MB/s> MB/s".
 * Built and run by bench/tokenizer/bench.sh next to the HF `tokenizers` measurement.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tokenizer/tok.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: bench_tok TOKENIZER CORPUS.jsonl [reps]\n");
        return 2;
    }
    int reps = argc > 3 ? atoi(argv[3]) : 3;
    struct tok *t = NULL;
    struct cerr e = {0};
    double t0 = now();
    if (tok_load(&t, argv[1], &e) != 0) {
        fprintf(stderr, "load: %s\n", e.msg);
        return 1;
    }
    double load_s = now() - t0;
    FILE *f = fopen(argv[2], "r");
    if (!f) {
        perror(argv[2]);
        return 1;
    }
    size_t cap = 4096, n = 0;
    char **txt = malloc(cap * sizeof *txt);
    size_t *len = malloc(cap * sizeof *len);
    char *line = NULL;
    size_t lcap = 0;
    ssize_t r;
    size_t bytes = 0;
    while ((r = getline(&line, &lcap, f)) > 0) {
        json_error_t je;
        json_t *j = json_loadb(line, (size_t)r, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        if (!json_is_string(j)) {
            json_decref(j);
            continue;
        }
        if (n == cap) {
            cap *= 2;
            txt = realloc(txt, cap * sizeof *txt);
            len = realloc(len, cap * sizeof *len);
        }
        len[n] = json_string_length(j);
        txt[n] = malloc(len[n] + 1);
        memcpy(txt[n], json_string_value(j), len[n] + 1);
        bytes += len[n];
        n++;
        json_decref(j);
    }
    fclose(f);
    free(line);
    double best = 1e30;
    long ids_total = 0;
    for (int k = 0; k < reps; k++) {
        long nid = 0;
        double a = now();
        for (size_t i = 0; i < n; i++) {
            int32_t *ids = NULL;
            int m = 0;
            if (tok_encode(t, txt[i], len[i], TOK_PARSE_SPECIAL, &ids, &m, &e) != 0) {
                fprintf(stderr, "encode: %s\n", e.msg);
                return 1;
            }
            nid += m;
            free(ids);
        }
        double s = now() - a;
        if (s < best)
            best = s;
        ids_total = nid;
    }
    printf("cinfer %zu bytes %ld ids %.4f s %.2f MB/s (load %.2f s)\n", bytes, ids_total, best,
           bytes / best / 1e6, load_s);
    for (size_t i = 0; i < n; i++)
        free(txt[i]);
    free(txt);
    free(len);
    tok_free(t);
    return 0;
}
