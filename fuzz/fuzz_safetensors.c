/* fuzz_safetensors.c — libFuzzer target for the safetensors reader.
 *
 * Opens the input with st_open_mem() and, when accepted, walks every tensor through
 * st_get/st_find and touches its first and last data byte, so ASan sees any read the
 * validation let through. Seeds: fuzz/corpus/fuzz_safetensors/.
 */
#include <stdint.h>
#include <stdlib.h>

#include "format/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t g_sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct st_model *m = NULL;
    struct cerr e;
    if (st_open_mem(&m, data, size, "fuzz.safetensors", &e) != 0)
        return 0;
    for (int i = 0; i < st_count(m); i++) {
        const struct st_tensor *t = st_get(m, i);
        g_sink += st_find(m, t->name) == t;
        g_sink += (uint64_t)t->dtype + (uint64_t)t->n_dims + (uint64_t)t->ne[0];
        if (t->nbytes)
            g_sink += t->data[0] + t->data[t->nbytes - 1];
    }
    g_sink += st_get(m, st_count(m)) == NULL;
    st_close(m);
    return 0;
}
