/* fuzz_lora.c — libFuzzer target for the LoRA adapter loader (adapter_config.json +
 * adapter_model.safetensors, model/lora.h).
 *
 * Input: a 2-byte little-endian length n, n bytes of adapter_config.json, then the
 * safetensors bytes. The base is a model built here with the shapes of the llama parity
 * model (2 layers, hidden 64, 4 heads / 2 KV heads of 16, intermediate 64) and no weights:
 * the loader reads only shapes and hparams. An accepted adapter has every projection's A
 * and B read back (ASan sees any read past what the checks let through). Seeds:
 * fuzz/corpus/fuzz_lora/ (the parity adapters of tests/data/lora/llama).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "model/lora.h"
#include "model/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile float g_sink;
static struct model g_m;
static struct model_layer g_layers[2];
static struct be *g_be;

static void mat(struct be_tensor *t, int64_t in, int64_t out)
{
    memset(t, 0, sizeof *t);
    t->dtype = DT_F32;
    t->ne[0] = in, t->ne[1] = out, t->ne[2] = t->ne[3] = 1;
}

static int setup(void)
{
    if (g_be)
        return 0;
    struct cerr e;
    struct be_config bc = {.n_threads = 1};
    g_be = be_new("cpu", &bc, &e);
    if (!g_be)
        return -1;
    g_m.be = g_be;
    g_m.hp = (struct model_hparams){.arch = ARCH_LLAMA,
                                    .n_layer = 2,
                                    .n_embd = 64,
                                    .n_head = 4,
                                    .n_kv_head = 2,
                                    .head_dim = 16,
                                    .n_ff = 64,
                                    .rope_mode = BE_ROPE_NORM};
    g_m.layers = g_layers;
    g_m.src_kind = 0; /* a GGUF base: the llama q/k permutation runs too */
    strcpy(g_m.arch_name, "llama");
    for (int i = 0; i < 2; i++) {
        struct model_layer *l = &g_layers[i];
        mat(&l->wq, 64, 64), mat(&l->wk, 64, 32), mat(&l->wv, 64, 32), mat(&l->wo, 64, 64);
        mat(&l->w_gate, 64, 64), mat(&l->w_up, 64, 64), mat(&l->w_down, 64, 64);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2 || setup())
        return 0;
    size_t n = (size_t)data[0] | (size_t)data[1] << 8;
    if (n > size - 2)
        return 0;
    struct lora_adapter *a = NULL;
    struct cerr e;
    if (lora_load_peft_mem(&a, &g_m, (const char *)data + 2, n, data + 2 + n, size - 2 - n, &e))
        return 0;
    for (int i = 0; i < a->n_layer * LORA_NT; i++) {
        const struct lora_proj *p = &a->p[i];
        if (!p->a)
            continue;
        const struct be_tensor *w[LORA_NT] = {
            &g_layers[0].wq,     &g_layers[0].wk,   &g_layers[0].wv,    &g_layers[0].wo,
            &g_layers[0].w_gate, &g_layers[0].w_up, &g_layers[0].w_down};
        const struct be_tensor *t = w[i % LORA_NT];
        size_t es = p->dtype == DT_F32 ? 4 : 2;
        g_sink += (float)((const unsigned char *)p->a)[(size_t)p->rank * t->ne[0] * es - 1] +
                  (float)((const unsigned char *)p->bt)[(size_t)p->rank * t->ne[1] * es - 1];
    }
    lora_unref(a);
    return 0;
}
