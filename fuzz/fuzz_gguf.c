/* fuzz_gguf.c — libFuzzer target for the GGUF reader.
 *
 * Opens the input with gguf_open_mem() and, when it is accepted, walks every accessor:
 * each key through gguf_find and all typed getters, every array element (strings, numbers,
 * nested headers) and every tensor's first and last data byte, so ASan sees any read the
 * validation let through. Seeds: fuzz/corpus/fuzz_gguf/.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t g_sink;

static void walk_kv(const struct gguf *g, const struct gguf_kv *kv)
{
    char key[256];
    size_t kl = kv->key.len < sizeof key - 1 ? (size_t)kv->key.len : sizeof key - 1;
    memcpy(key, kv->key.ptr, kl);
    key[kl] = 0;
    struct cerr e;
    int64_t i;
    double d;
    int b;
    struct gguf_str s;
    const struct gguf_kv *a = NULL;
    g_sink += gguf_find(g, key) != NULL;
    g_sink += (uint64_t)gguf_get_int(g, key, &i, &e);
    g_sink += (uint64_t)gguf_get_float(g, key, &d, &e);
    g_sink += (uint64_t)gguf_get_bool(g, key, &b, &e);
    if (gguf_get_str(g, key, &s, &e) == 0 && s.len)
        g_sink += (uint8_t)s.ptr[0] + (uint8_t)s.ptr[s.len - 1];
    if (gguf_get_arr(g, key, &a, &e) != 0 || !a)
        return;
    uint64_t n = a->arr_n < 4096 ? a->arr_n : 4096;
    for (uint64_t k = 0; k < n; k++) {
        if (a->arr_type == GGUF_STRING) {
            struct gguf_str t = gguf_arr_str(a, k);
            if (t.len)
                g_sink += (uint8_t)t.ptr[0] + (uint8_t)t.ptr[t.len - 1];
        } else if (a->arr_type == GGUF_ARRAY) {
            uint32_t ty;
            memcpy(&ty, a->arr_data + a->arr_offs[k], 4);
            g_sink += ty;
        } else {
            double v = gguf_arr_num(a, k); /* any double: only a finite, small one converts */
            g_sink += v > -1e18 && v < 1e18 ? (uint64_t)(int64_t)v : 1;
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gguf *g = NULL;
    struct cerr e;
    if (gguf_open_mem(&g, data, size, "fuzz.gguf", &e) != 0)
        return 0;
    for (uint64_t i = 0; i < g->n_kv; i++)
        walk_kv(g, &g->kv[i]);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const struct gguf_tensor *t = &g->tensors[i];
        char name[256];
        size_t nl = t->name.len < sizeof name - 1 ? (size_t)t->name.len : sizeof name - 1;
        memcpy(name, t->name.ptr, nl);
        name[nl] = 0;
        g_sink += gguf_find_tensor(g, name) != NULL;
        g_sink += t->data[0] + t->data[t->nbytes - 1];
    }
    gguf_close(g);
    return 0;
}
