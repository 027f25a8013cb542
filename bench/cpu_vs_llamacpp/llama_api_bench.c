/* llama_api_bench.c — llama.cpp's prefill/decode speed through its public C API (llama.h),
 * for machines where the full llama-bench (which needs llama.cpp's C++ `common` library, a
 * long build) is not built: only libllama + libggml are needed.
 *
 * Takes llama-bench's arguments as run_llamacpp.py passes them (-m -t -p -n -d -r -ctk
 * -ctv -o json) and prints llama-bench-style JSON rows (n_prompt, n_gen, n_depth, avg_ts,
 * stddev_ts, samples_ts). Same settings as llama-bench's defaults: batch 2048, ubatch 512,
 * flash attention "auto", mmap; random token ids; one warm-up pass; a depth prompt (-d) is
 * decoded untimed before each timed run; the memory is cleared between runs.
 *
 * Build (LLAMA = a llama.cpp tree built with BUILD_SHARED_LIBS=ON):
 *   cc -O2 llama_api_bench.c -I$LLAMA/include -I$LLAMA/ggml/include -L$LLAMA/build/bin \
 *      -lllama -lggml -lggml-base -Wl,-rpath,$LLAMA/build/bin -o llama_api_bench
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "llama.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static unsigned g_seed = 12345;
static llama_token rand_tok(int n_vocab)
{
    g_seed = g_seed * 1103515245u + 12345u;
    return (llama_token)((g_seed >> 8) % (unsigned)n_vocab);
}

/* Decodes n random tokens in batches of nb; 0 on success. */
static int feed(struct llama_context *ctx, int n_vocab, int n, int nb)
{
    llama_token *t = malloc(sizeof *t * (size_t)(nb > 0 ? nb : 1));
    int rc = 0;
    for (int i = 0; i < n && !rc; i += nb) {
        int k = n - i < nb ? n - i : nb;
        for (int j = 0; j < k; j++)
            t[j] = rand_tok(n_vocab);
        rc = llama_decode(ctx, llama_batch_get_one(t, k)) != 0;
    }
    llama_synchronize(ctx);
    free(t);
    return rc;
}

static void noop_log(enum ggml_log_level level, const char *text, void *ud)
{
    (void)level, (void)text, (void)ud;
}

int main(int argc, char **argv)
{
    const char *model = NULL;
    int threads = 2, n_prompt = 0, n_gen = 0, depth = 0, reps = 3, f32 = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (!strcmp(a, "-m")) model = v;
        else if (!strcmp(a, "-t")) threads = atoi(v);
        else if (!strcmp(a, "-p")) n_prompt = atoi(v);
        else if (!strcmp(a, "-n")) n_gen = atoi(v);
        else if (!strcmp(a, "-d")) depth = atoi(v);
        else if (!strcmp(a, "-r")) reps = atoi(v);
        else if (!strcmp(a, "-ctk") || !strcmp(a, "-ctv")) f32 = !strcmp(v, "f32");
    }
    if (!model) {
        fprintf(stderr, "usage: llama_api_bench -m MODEL [-t N] [-p N] [-n N] [-d N] [-r N]\n");
        return 2;
    }
    llama_log_set(noop_log, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    struct llama_model *m = llama_model_load_from_file(model, mp);
    if (!m) {
        fprintf(stderr, "cannot load %s\n", model);
        return 1;
    }
    int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(m));
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)(depth + (n_prompt > n_gen ? n_prompt : n_gen) + 16);
    cp.n_batch = 2048;
    cp.n_ubatch = 512;
    cp.n_threads = cp.n_threads_batch = threads;
    cp.type_k = cp.type_v = f32 ? GGML_TYPE_F32 : GGML_TYPE_F16;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_AUTO;
    cp.no_perf = true;
    struct llama_context *ctx = llama_init_from_model(m, cp);
    if (!ctx) {
        fprintf(stderr, "cannot create a context\n");
        return 1;
    }
    printf("[");
    int first = 1;
    for (int test = 0; test < 2; test++) { /* 0: prefill n_prompt, 1: decode n_gen */
        int n = test == 0 ? n_prompt : n_gen;
        if (n <= 0)
            continue;
        /* warm-up */
        llama_memory_clear(llama_get_memory(ctx), true);
        if (feed(ctx, n_vocab, test == 0 ? (n < 16 ? n : 16) : 1, 2048))
            return 1;
        double *ts = calloc((size_t)reps, sizeof *ts), sum = 0, sq = 0;
        for (int r = 0; r < reps; r++) {
            llama_memory_clear(llama_get_memory(ctx), true);
            if (depth > 0 && feed(ctx, n_vocab, depth, 2048))
                return 1;
            double t0 = now();
            if (feed(ctx, n_vocab, n, test == 0 ? 2048 : 1))
                return 1;
            ts[r] = n / (now() - t0);
            sum += ts[r], sq += ts[r] * ts[r];
        }
        double avg = sum / reps, sd = reps > 1 ? sqrt(fmax(0, (sq - reps * avg * avg) / (reps - 1))) : 0;
        printf("%s\n  {\"build_commit\": \"libllama-api\", \"n_prompt\": %d, \"n_gen\": %d, "
               "\"n_depth\": %d, \"n_threads\": %d, \"avg_ts\": %.4f, \"stddev_ts\": %.4f, "
               "\"samples_ts\": [",
               first ? "" : ",", test == 0 ? n : 0, test == 1 ? n : 0, depth, threads, avg, sd);
        for (int r = 0; r < reps; r++)
            printf("%s%.4f", r ? ", " : "", ts[r]);
        printf("]}");
        first = 0;
        free(ts);
    }
    printf("\n]\n");
    llama_free(ctx);
    llama_model_free(m);
    llama_backend_free();
    return 0;
}
