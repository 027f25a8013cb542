/* cmd_bench.c — `cinfer bench MODEL`: throughput of one model on this machine, as JSON.
 *
 * Measures, in one process: load time, time from the command's start to the first token
 * of a short prompt (load + prefill + sample), decode tok/s (N tokens after that prompt, greedy, EOS ignored), prefill
 * tok/s (a P-token prompt in a fresh context), and peak RSS. Prompt ids are deterministic
 * pseudo-random ids from the middle of the vocabulary (as llama-bench does), so no
 * tokenizer is needed. bench/cpu_vs_llamacpp runs this beside llama.cpp.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/cpu/cpu.h"
#include "engine/gen.h"
#include "engine/sampler.h"
#include "model/lora.h"
#include "model/model.h"
#include "server/cli_kvq.h"
#include "server/cli_opts.h"
#include "server/commands.h"
#include "util/clock.h"

static void bench_usage(FILE *f)
{
    fprintf(f, "usage: cinfer bench MODEL [-t N] [-p PROMPT_TOKENS] [-n GEN_TOKENS]\n"
               "                    [--kv-dtype f16|f32] [--backend auto|cpu|cuda] [--device N]\n"
               "                    [--compiled-decode on|off] [-d DEPTH]\n"
               "                    [--kv-quant off|8|4|turbo[:k<b>v<b>]|config[:PATH]] [--kv-rotate on|off]\n"
               "                    [--adapter DIR|FILE ...]  (LoRA; repeat to stack)\n\n"
               "Prints one JSON object: load_s, ttft_s (start to the first token of an\n"
               "8-token prompt, load included), ttft_warm_s (the same without the load),\n"
               "decode_tok_s (GEN_TOKENS after it, default 128; with -d, after a DEPTH-token\n"
               "prompt instead, ttft then covering that prompt; depth_prefill_tok_s = DEPTH /\n"
               "ttft_warm_s),\n"
               "prefill_tok_s (a PROMPT_TOKENS prompt, default 512), peak_rss_bytes.\n"
               "Greedy decoding. --kv-dtype: the KV cache dtype (default f16, as llama.cpp's;\n"
               "aliases --kv f16|f32, --kv-f32, --kv-f16). --backend: default auto (cuda when a\n"
               "GPU answers, else cpu), as run and serve. --kv-quant / --kv-rotate: a quantized\n"
               "KV cache, as serve's (docs/kv-quant.md); \"kv\" then names the scheme.\n");
}

static void fill_ids(int32_t *ids, int n, int vocab, uint32_t seed)
{
    uint32_t x = seed * 2654435761u + 1;
    int lo = vocab / 4, span = vocab / 4 > 0 ? vocab / 4 : 1;
    for (int i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        ids[i] = lo + (int32_t)(x % (uint32_t)span);
    }
}

int cmd_bench(int argc, char **argv)
{
    const char *path = NULL;
    int threads = 0, n_prompt = 512, n_gen = 128, kv_dtype = DT_F16, device = 0, depth = 0;
    const char *backend = CLI_BACKEND_DEFAULT;
    int graphs = 0;
    const char *adapters[LORA_MAX_STACK];
    int n_adapters = 0;
    struct cli_kvq kvq;
    cli_kvq_init(&kvq);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int kv = cli_kv_flag("bench", a, v, &kv_dtype);
        if (!kv)
            kv = cli_kvq_flag("bench", a, v, &kvq);
        if (kv < 0)
            return 1;
        if (kv > 0) {
            i += kv - 1;
            continue;
        }
        if (!strcmp(a, "--backend") && cli_backend_ok(v)) {
            backend = v;
            i++;
            continue;
        }
        if ((!strcmp(a, "--adapter") || !strcmp(a, "--adapter-path")) && v &&
            n_adapters < LORA_MAX_STACK) {
            adapters[n_adapters++] = v;
            i++;
            continue;
        }
        if (!strcmp(a, "--compiled-decode") && v && (!strcmp(v, "on") || !strcmp(v, "off"))) {
            graphs = !strcmp(v, "on") ? 1 : -1;
            i++;
            continue;
        }
        int *dst = !strcmp(a, "-t") || !strcmp(a, "--threads") ? &threads
                   : !strcmp(a, "-p")                          ? &n_prompt
                   : !strcmp(a, "-n")                          ? &n_gen
                   : !strcmp(a, "--device")                    ? &device
                   : !strcmp(a, "-d") || !strcmp(a, "--depth") ? &depth
                                                               : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            bench_usage(stdout);
            return 0;
        } else if (dst) {
            char *end;
            errno = 0;
            long x = v ? strtol(v, &end, 10) : 0;
            int x_min = dst == &device || dst == &depth ? 0 : 1;
            if (!v || errno || *end || x < x_min || x > 1 << 20) {
                fprintf(stderr, "cinfer bench: %s expects an integer in [%d, 1048576]\n", a, x_min);
                return 1;
            }
            *dst = (int)x;
            i++;
        } else if (a[0] != '-' && !path) {
            path = a;
        } else {
            fprintf(stderr, "cinfer bench: unexpected argument '%s'\n", a);
            bench_usage(stderr);
            return 1;
        }
    }
    if (!path) {
        bench_usage(stderr);
        return 1;
    }
    struct cerr e = {0};
    struct be_config bc = {.n_threads = threads, .device = device, .graphs = graphs};
    struct be *be = be_new(backend, &bc, &e);
    struct model *m = NULL;
    struct gen *g = NULL;
    struct lora_set lset = {0};
    int status = 1;
    int32_t *ids = NULL;
    double t0 = clock_now_s();
    int is_cpu = be && !strcmp(be->ops->name, "cpu");
    if (!be || model_load(&m, path, be, &e)) {
        fprintf(stderr, "cinfer bench: %s\n", e.msg);
        goto done;
    }
    double load_s = clock_now_s() - t0;
    int first = depth > 0 ? depth : 8; /* the prompt decode follows */
    int ctx = (n_prompt > first + n_gen ? n_prompt : first + n_gen) + 16;
    int V = m->hp.n_vocab;
    ids = malloc((size_t)(n_prompt > first ? n_prompt : first) * sizeof *ids);
    int kv_code;
    const int *kv_ldt;
    if (cli_kvq_resolve("bench", &kvq, m, path, kv_dtype, &kv_code, &kv_ldt))
        goto done;
    if (!ids || gen_new_layers(&g, m, ctx, 512, kv_code, kv_ldt, &e) ||
        lora_set_load(&lset, m, adapters, n_adapters, &e)) {
        fprintf(stderr, "cinfer bench: %s\n", ids ? e.msg : "out of memory");
        goto done;
    }
    if (lset.n) { /* every step runs the stacked adapters */
        g->lora = &lset;
        g->lora_paths = lora_set_targets(&lset);
    }
    /* short prompt -> first token, then decode */
    fill_ids(ids, first, V, 1);
    double tw = clock_now_s();
    if (gen_feed(g, ids, first, NULL, &e))
        goto fail;
    int32_t tok = sampler_argmax(g->logits, V);
    double ttft = clock_now_s() - t0, ttft_warm = clock_now_s() - tw;
    double depth_tok_s = depth > 0 ? depth / ttft_warm : 0; /* the DEPTH-token prefill */
    double t1 = clock_now_s();
    for (int i = 0; i < n_gen; i++) {
        if (gen_feed(g, &tok, 1, NULL, &e))
            goto fail;
        tok = sampler_argmax(g->logits, V);
    }
    double decode_s = clock_now_s() - t1;
    /* prefill in a fresh context */
    gen_reset(g);
    fill_ids(ids, n_prompt, V, 2);
    t1 = clock_now_s();
    if (gen_feed(g, ids, n_prompt, NULL, &e))
        goto fail;
    double prefill_s = clock_now_s() - t1;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("{\"engine\": \"cinfer\", \"backend\": \"%s\", \"model\": \"%s\", \"arch\": \"%s\", \"threads\": %d, "
           "\"kv\": \"%s\", \"load_s\": %.4f, \"ttft_s\": %.4f, \"ttft_warm_s\": %.4f, \"decode_tokens\": %d, \"decode_tok_s\": %.3f, "
           "\"prefill_tokens\": %d, \"prefill_tok_s\": %.3f, \"peak_rss_bytes\": %lld, "
           "\"weight_bytes\": %zu, \"depth\": %d, \"depth_prefill_tok_s\": %.3f}\n",
           be->ops->name, path, m->arch_name, is_cpu ? be_cpu_threads(be) : 0, kvq.quant ? kvq.name : kv_dtype == DT_F16 ? "f16" : "f32", load_s, ttft, ttft_warm, n_gen, n_gen / decode_s, n_prompt,
           n_prompt / prefill_s, (long long)ru.ru_maxrss * 1024, model_weight_bytes(m), depth, depth_tok_s);
    status = 0;
    goto done;
fail:
    fprintf(stderr, "cinfer bench: %s\n", e.msg);
done:
    free(ids);
    gen_free(g);
    lora_set_unref(&lset);
    model_free(m);
    be_free(be);
    return status;
}
