/* cmd_run.c — `cinfer run MODEL -p TEXT`: generate once from the command line.
 *
 * Streams only the continuation to stdout as it is produced (through the incremental
 * detokenizer, so no broken UTF-8), and prefill/decode speeds to stderr. `--ids` feeds ids
 * verbatim (no BOS) and works without tokenizer files; `--output-ids` prints the generated
 * ids as a JSON array instead of text. `--prompt-logprobs` prints, instead of generating,
 * each prompt token's logprob given the tokens before it (the log-softmax of this path's
 * logits, null for the first): the reference the server's echo scoring is checked against.
 */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "engine/gen.h"
#include "engine/sampler.h"
#include "model/lora.h"
#include "model/model.h"
#include "server/cli_opts.h"
#include "server/cli_kvq.h"
#include "server/commands.h"
#include "util/clock.h"
#include "template/tmpl.h"
#include "tokenizer/tok.h"

struct run_opts {
    const char *model, *prompt, *ids, *system, *chat_template, *backend;
    int chat, device, graphs;
    int n_predict, threads, ctx, output_ids, ignore_eos, kv_dtype, prompt_lp;
    struct sampler_params sp;
    int seed_set, temp_set, top_p_set, top_k_set;
    const char *adapters[LORA_MAX_STACK]; /* --adapter (repeat to stack) */
    int n_adapters;
    struct cli_kvq kvq; /* --kv-quant, --kv-rotate */
};

static void run_usage(FILE *f)
{
    fprintf(f,
            "usage: cinfer run MODEL (-p TEXT | --ids 1,2,3) [options]\n\n"
            "Generates a continuation of TEXT and streams it to stdout; speeds go to stderr.\n"
            "MODEL is a .gguf file or a Hugging Face model directory.\n\n"
            "options:\n"
            "  -p, --prompt TEXT     prompt text (tokenized with the model's tokenizer, BOS added\n"
            "                        when the model asks for it)\n"
            "  --chat                wrap the prompt as a user turn in the model's chat template\n"
            "  --system TEXT         system message for --chat\n"
            "  --chat-template FILE  a .jinja template for --chat instead of the model's own\n"
            "  --ids 1,2,3           prompt as token ids, fed verbatim (no BOS); needs no tokenizer\n"
            "  -n, --n-predict N     tokens to generate (default 128)\n"
            "  --temperature T       temperature, 0 = greedy (alias --temp)\n"
            "  --top-p P             nucleus sampling, 0 < P <= 1 (1 = off)\n"
            "  --top-k K             keep the K most likely tokens (0 = off)\n"
            "                        (unset sampling defaults come from the model's\n"
            "                        generation_config.json, else temperature 0.7, top-p 1,\n"
            "                        top-k 0: the same as cinfer serve)\n"
            "  --min-p P             drop tokens below P x the top probability (default 0)\n"
            "  --seed S              RNG seed (default: from the clock)\n"
            "  -t, --threads N       CPU threads (default: all cores)\n"
            "  --backend auto|cpu|cuda  where the model runs (default auto: cuda when a GPU\n"
            "                        answers, else cpu)\n"
            "  --device N            GPU index for --backend cuda (default 0)\n"
            "  --compiled-decode on|off  replay decode steps as CUDA graphs (default on)\n"
            "  -c, --ctx N           context length (default: min(model's, 4096))\n"
            "  --kv-dtype f16|f32    KV cache dtype (default f16; aliases --kv f16|f32,\n"
            "                        --kv-f32, --kv-f16)\n"
            "  --kv-quant off|8|4|turbo[:k<b>v<b>]|config[:PATH]  quantized KV cache (default\n"
            "                        off; docs/kv-quant.md)\n"
            "  --kv-rotate on|off    Hadamard rotation of the quantized K/V heads (default: on\n"
            "                        at 4 bits and for keys; docs/kv-quant.md)\n"
            "  --adapter DIR|FILE    run with a LoRA adapter (PEFT directory or GGUF LoRA\n"
            "                        file; alias --adapter-path); repeat to stack\n"
            "  --ignore-eos          keep generating past end-of-generation tokens\n"
            "  --output-ids          print the generated ids as a JSON array instead of text\n"
            "  --prompt-logprobs     print each prompt token's logprob (log-softmax of the\n"
            "                        logits before it; null for the first) as a JSON array\n"
            "                        instead of generating\n"
            "  -h, --help            this help\n");
}

static int parse_int(const char *flag, const char *v, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || errno || *end || x < lo || x > hi) {
        fprintf(stderr, "cinfer run: %s expects an integer in [%d, %d], got '%s'\n", flag, lo, hi,
                v ? v : "");
        return -1;
    }
    *out = (int)x;
    return 0;
}

static int parse_float(const char *flag, const char *v, double lo, double hi, float *out)
{
    char *end;
    errno = 0;
    double x = v ? strtod(v, &end) : 0;
    if (!v || errno || *end || !(x >= lo && x <= hi)) {
        fprintf(stderr, "cinfer run: %s expects a number in [%g, %g], got '%s'\n", flag, lo, hi,
                v ? v : "");
        return -1;
    }
    *out = (float)x;
    return 0;
}

static int parse_args(int argc, char **argv, struct run_opts *o)
{
    memset(o, 0, sizeof *o);
    o->n_predict = 128;
    o->kv_dtype = DT_F16;
    sampler_params_default(&o->sp);
    cli_kvq_init(&o->kvq);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int rc = 0, used = 1, kv;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            run_usage(stdout);
            exit(0);
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt"))
            o->prompt = v, rc = v ? 0 : -1;
        else if (!strcmp(a, "--chat"))
            o->chat = 1, used = 0;
        else if (!strcmp(a, "--chat-template"))
            o->chat_template = v, o->chat = 1, rc = v ? 0 : -1;
        else if (!strcmp(a, "--system"))
            o->system = v, rc = v ? 0 : -1;
        else if (!strcmp(a, "--ids"))
            o->ids = v, rc = v ? 0 : -1;
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict"))
            rc = parse_int(a, v, 0, 1 << 24, &o->n_predict);
        else if (!strcmp(a, "--temp") || !strcmp(a, "--temperature"))
            rc = parse_float(a, v, 0, 5, &o->sp.temperature), o->temp_set = 1;
        else if (!strcmp(a, "--top-p"))
            rc = parse_float(a, v, 1e-9, 1, &o->sp.top_p), o->top_p_set = 1;
        else if (!strcmp(a, "--top-k"))
            rc = parse_int(a, v, 0, INT_MAX, &o->sp.top_k), o->top_k_set = 1;
        else if (!strcmp(a, "--min-p"))
            rc = parse_float(a, v, 0, 1, &o->sp.min_p);
        else if (!strcmp(a, "--seed")) {
            int s;
            rc = parse_int(a, v, 0, INT_MAX, &s);
            o->sp.seed = (uint64_t)s;
            o->seed_set = 1;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads"))
            rc = parse_int(a, v, 1, 1024, &o->threads);
        else if (!strcmp(a, "--backend")) {
            o->backend = v, rc = v ? 0 : -1;
            if (v && !cli_backend_ok(v)) {
                fprintf(stderr, "cinfer run: --backend expects auto|cpu|cuda, got '%s'\n", v);
                rc = -1;
            }
        }
        else if (!strcmp(a, "--device"))
            rc = parse_int(a, v, 0, 1023, &o->device);
        else if (!strcmp(a, "--compiled-decode")) {
            rc = v && (!strcmp(v, "on") || !strcmp(v, "off")) ? 0 : -1;
            o->graphs = v && !strcmp(v, "on") ? 1 : -1;
            if (rc && v)
                fprintf(stderr, "cinfer run: --compiled-decode expects on or off\n");
        }
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx"))
            rc = parse_int(a, v, 1, 1 << 24, &o->ctx);
        else if ((kv = cli_kv_flag("run", a, v, &o->kv_dtype)) != 0) {
            if (kv < 0)
                return -1;
            used = kv - 1;
        }
        else if ((kv = cli_kvq_flag("run", a, v, &o->kvq)) != 0) {
            if (kv < 0)
                return -1;
            used = kv - 1;
        }
        else if (!strcmp(a, "--ignore-eos"))
            o->ignore_eos = 1, used = 0;
        else if (!strcmp(a, "--adapter") || !strcmp(a, "--adapter-path")) {
            rc = !v || o->n_adapters == LORA_MAX_STACK;
            if (rc && v)
                fprintf(stderr, "cinfer run: at most %d --adapter flags\n", LORA_MAX_STACK);
            if (!rc)
                o->adapters[o->n_adapters++] = v;
        }
        else if (!strcmp(a, "--output-ids"))
            o->output_ids = 1, used = 0;
        else if (!strcmp(a, "--prompt-logprobs"))
            o->prompt_lp = 1, used = 0;
        else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "cinfer run: unknown option '%s' (see cinfer run --help)\n", a);
            return -1;
        } else if (!o->model)
            o->model = a, used = 0;
        else {
            fprintf(stderr, "cinfer run: unexpected argument '%s'\n", a);
            return -1;
        }
        if (rc) {
            if (!v)
                fprintf(stderr, "cinfer run: %s needs a value\n", a);
            return -1;
        }
        i += used;
    }
    if (!o->model || (!o->prompt && !o->ids)) {
        run_usage(stderr);
        return -1;
    }
    if (!o->seed_set)
        o->sp.seed = (uint64_t)time(NULL);
    return 0;
}

/* Parses "1,2,3" into a malloc'd array. */
static int parse_ids(const char *s, int32_t **out, int *n)
{
    int cap = 16, k = 0;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    while (ids && *s) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || errno || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
            free(ids);
            return -1;
        }
        if (k == cap) {
            int32_t *ni = realloc(ids, (size_t)(cap *= 2) * sizeof *ids);
            if (!ni) {
                free(ids);
                return -1;
            }
            ids = ni;
        }
        ids[k++] = (int32_t)v;
        s = *end ? end + 1 : end;
    }
    if (!ids || k == 0) {
        free(ids);
        return -1;
    }
    *out = ids;
    *n = k;
    return 0;
}

/* Renders [system?, user] with the model's chat template and add_generation_prompt. */
static int render_chat(const char *model_path, const struct tok *tk, const struct run_opts *o,
                       char **out, struct cerr *e)
{
    char *src = NULL;
    struct tmpl *t = NULL;
    int rc = tmpl_source_load(o->chat_template ? o->chat_template : model_path, NULL, &src, e);
    if (rc && !o->chat_template)
        cerr_prefix(e, "--chat needs a chat template (give one with --chat-template FILE)");
    if (rc == 0)
        rc = tmpl_parse(&t, src, strlen(src), e);
    free(src);
    if (rc)
        return rc;
    json_t *msgs = json_array();
    if (o->system)
        json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "system", "content", o->system));
    json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "user", "content", o->prompt));
    int32_t bos = tok_bos(tk), eos = tok_eos(tk);
    json_t *ctx = json_pack("{s:o, s:b, s:s, s:s}", "messages", msgs, "add_generation_prompt", 1,
                            "bos_token", bos >= 0 ? tok_piece(tk, bos) : "", "eos_token",
                            eos >= 0 ? tok_piece(tk, eos) : "");
    size_t len;
    struct tmpl_opts topt = {0};
    rc = ctx ? tmpl_render(t, ctx, &topt, out, &len, e) : cerr_set(e, CERR_NOMEM, "out of memory");
    json_decref(ctx);
    tmpl_free(t);
    return rc;
}

static int is_stop(const struct model *m, const struct tok *t, const struct cli_gen_config *gc,
                   int32_t id)
{
    for (int i = 0; i < gc->n_eos; i++)
        if (gc->eos[i] == id)
            return 1;
    if (t)
        return tok_is_eog(t, id);
    for (int i = 0; i < m->hp.n_eos; i++)
        if (m->hp.eos_ids[i] == id)
            return 1;
    return 0;
}

/* --prompt-logprobs: feeds the prompt with every position's logits and prints
 * [null, logprob(ids[1] | ids[0]), ...] (log-softmax in double). 0 or 1. */
static int print_prompt_logprobs(struct gen *g, const int32_t *ids, int n, struct cerr *e)
{
    int V = g->m->hp.n_vocab;
    float *lg = malloc((size_t)n * V * sizeof *lg); /* (n, n_vocab) */
    if (!lg) {
        cerr_set(e, CERR_NOMEM, "out of memory");
        return 1;
    }
    if (gen_feed(g, ids, n, lg, e)) {
        free(lg);
        return 1;
    }
    printf("[null");
    for (int t = 1; t < n; t++) {
        const float *row = lg + (size_t)(t - 1) * V;
        double mx = row[0], sum = 0;
        for (int i = 1; i < V; i++)
            mx = row[i] > mx ? row[i] : mx;
        for (int i = 0; i < V; i++)
            sum += exp((double)row[i] - mx);
        printf(", %.9g", (double)row[ids[t]] - mx - log(sum));
    }
    printf("]\n");
    free(lg);
    return 0;
}

int cmd_run(int argc, char **argv)
{
    struct run_opts o;
    if (parse_args(argc, argv, &o))
        return 1;
    struct cerr e = {0};
    struct be_config bc = {.n_threads = o.threads, .device = o.device, .graphs = o.graphs};
    struct be *be = be_new(o.backend ? o.backend : CLI_BACKEND_DEFAULT, &bc, &e);
    if (!be) {
        fprintf(stderr, "cinfer run: %s\n", e.msg);
        return 1;
    }
    int status = 1;
    struct model *m = NULL;
    struct tok *tk = NULL;
    struct lora_set lset = {0};
    struct gen *g = NULL;
    struct sampler *smp = NULL;
    struct tok_stream *ts = NULL;
    int32_t *prompt = NULL, *out_ids = NULL;
    int n_prompt = 0;
    double t0 = clock_now_s();
    if (model_load(&m, o.model, be, &e)) {
        fprintf(stderr, "cinfer run: %s\n", e.msg);
        goto done;
    }
    int need_tok = !o.ids || !o.output_ids;
    if (need_tok && tok_load(&tk, o.model, &e)) {
        fprintf(stderr, "cinfer run: cannot load the tokenizer: %s\n%s", e.msg,
                o.ids ? "(use --output-ids to run without a tokenizer)\n" : "");
        goto done;
    }
    if (o.ids) {
        if (parse_ids(o.ids, &prompt, &n_prompt)) {
            fprintf(stderr, "cinfer run: --ids expects comma-separated token ids, got '%s'\n",
                    o.ids);
            goto done;
        }
    } else if (o.chat) {
        /* the template writes any BOS itself; its special-token strings become ids */
        char *text = NULL;
        if (render_chat(o.model, tk, &o, &text, &e) ||
            tok_encode(tk, text, strlen(text), TOK_PARSE_SPECIAL, &prompt, &n_prompt, &e)) {
            fprintf(stderr, "cinfer run: %s\n", e.msg);
            free(text);
            goto done;
        }
        free(text);
    } else if (tok_encode(tk, o.prompt, strlen(o.prompt), TOK_ADD_SPECIAL, &prompt, &n_prompt,
                          &e)) {
        fprintf(stderr, "cinfer run: %s\n", e.msg);
        goto done;
    }
    if (n_prompt == 0) {
        fprintf(stderr, "cinfer run: the prompt encodes to no tokens\n");
        goto done;
    }
    int ctx = o.ctx ? o.ctx : (m->hp.n_ctx_train < 4096 ? m->hp.n_ctx_train : 4096);
    if (n_prompt + o.n_predict > ctx && !o.ctx)
        ctx = n_prompt + o.n_predict;
    if (n_prompt >= ctx) {
        fprintf(stderr, "cinfer run: the prompt has %d tokens; the context holds %d (raise --ctx)\n",
                n_prompt, ctx);
        goto done;
    }
    /* sampling defaults the flags left unset: the model's generation_config.json, as serve */
    struct cli_gen_config gc;
    cli_gen_config_read(o.model, &gc);
    if (!o.temp_set && gc.has_temperature)
        o.sp.temperature = gc.temperature;
    if (!o.top_p_set && gc.has_top_p)
        o.sp.top_p = gc.top_p;
    if (!o.top_k_set && gc.has_top_k)
        o.sp.top_k = gc.top_k;
    if (gc.has_repetition_penalty)
        o.sp.repetition_penalty = gc.repetition_penalty;
    int kv_dtype;
    const int *kv_ldt;
    if (cli_kvq_resolve("run", &o.kvq, m, o.model, o.kv_dtype, &kv_dtype, &kv_ldt))
        goto done;
    if (gen_new_layers(&g, m, ctx, 512, kv_dtype, kv_ldt, &e) ||
        sampler_new(&smp, &o.sp, m->hp.n_vocab, &e) ||
        lora_set_load(&lset, m, o.adapters, o.n_adapters, &e)) {
        fprintf(stderr, "cinfer run: %s\n", e.msg);
        goto done;
    }
    if (lset.n) {
        g->lora = &lset;
        g->lora_paths = lora_set_targets(&lset);
    }
    out_ids = malloc((size_t)(o.n_predict + 1) * sizeof *out_ids);
    if (!out_ids || (!o.output_ids && !(ts = tok_stream_new(tk, TOK_SKIP_SPECIAL)))) {
        fprintf(stderr, "cinfer run: out of memory\n");
        goto done;
    }
    if (o.prompt_lp) {
        status = print_prompt_logprobs(g, prompt, n_prompt, &e);
        if (status)
            fprintf(stderr, "cinfer run: %s\n", e.msg);
        goto done;
    }
    double t_load = clock_now_s() - t0, t1 = clock_now_s();
    if (gen_feed(g, prompt, n_prompt, NULL, &e)) {
        fprintf(stderr, "cinfer run: %s\n", e.msg);
        goto done;
    }
    double t_prefill = clock_now_s() - t1, t_first = clock_now_s() - t0;
    t1 = clock_now_s();
    int n_gen = 0;
    char buf[1024];
    size_t bl;
    while (n_gen < o.n_predict) {
        int32_t id = sampler_sample(smp, g->logits, NULL);
        out_ids[n_gen++] = id;
        if (!o.ignore_eos && is_stop(m, tk, &gc, id))
            break;
        if (ts && tok_stream_push(ts, id, buf, sizeof buf, &bl) == 0 && bl) {
            fwrite(buf, 1, bl, stdout);
            fflush(stdout);
        }
        if (n_gen == o.n_predict || g->n_past >= ctx)
            break;
        if (gen_feed(g, &id, 1, NULL, &e)) {
            fprintf(stderr, "\ncinfer run: %s\n", e.msg);
            goto done;
        }
    }
    double t_decode = clock_now_s() - t1;
    if (ts && tok_stream_flush(ts, buf, sizeof buf, &bl) == 0 && bl)
        fwrite(buf, 1, bl, stdout);
    if (o.output_ids) {
        printf("[");
        for (int i = 0; i < n_gen; i++)
            printf(i ? ", %d" : "%d", out_ids[i]);
        printf("]");
    }
    printf("\n");
    fflush(stdout);
    int n_dec = n_gen > 1 ? n_gen - 1 : 0; /* the first token comes from the prefill */
    fprintf(stderr,
            "\ncinfer run: %s (%s), load %.2f s, first token after %.2f s\n"
            "prefill: %d tokens in %.3f s = %.1f tok/s\n"
            "decode:  %d tokens in %.3f s = %.1f tok/s\n",
            o.model, m->arch_name, t_load, t_first, n_prompt, t_prefill,
            t_prefill > 0 ? n_prompt / t_prefill : 0.0, n_dec, t_decode,
            t_decode > 0 && n_dec ? n_dec / t_decode : 0.0);
    status = 0;
done:
    free(prompt);
    free(out_ids);
    tok_stream_free(ts);
    sampler_free(smp);
    gen_free(g);
    lora_set_unref(&lset);
    tok_free(tk);
    model_free(m);
    be_free(be);
    return status;
}
