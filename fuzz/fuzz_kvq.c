/* fuzz_kvq.c — libFuzzer target for the KV quantization scheme parsers (kv/kvq_scheme.h):
 * the --kv-quant / --kv-rotate values, and a kv_config.json (written to a temporary file and
 * resolved for a 12-layer model with sliding-window layers); every resolved layer dtype is
 * then used to quantize and dequantize a row (backend/kvq.h).
 * Input: <flag value> "\n" <kv_config.json text>. Errors are expected; crashes, leaks and
 * undefined behaviour are bugs. Seeds: fuzz/corpus/fuzz_kvq/.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/dtype.h"
#include "backend/kvq.h"
#include "kv/kvq_scheme.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nl = memchr(data, '\n', size);
    size_t n1 = nl ? (size_t)(nl - data) : size;
    char flag[256];
    if (n1 >= sizeof flag)
        n1 = sizeof flag - 1;
    memcpy(flag, data, n1);
    flag[n1] = 0;
    struct kvq_scheme s = {.rotate = -1};
    struct cerr e = {0};
    int r;
    kvq_rotate_parse(flag, &r, &e);
    if (kvq_scheme_parse(flag, &s, &e))
        return 0;
    char path[64] = "/tmp/fuzz_kvq_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return 0;
    /* the config is what follows the newline (n1 may have been cut to the flag buffer) */
    if (nl && write(fd, nl + 1, size - (size_t)(nl + 1 - data)) < 0) {
        close(fd);
        unlink(path);
        return 0;
    }
    close(fd);
    if (s.mode == KVQ_CONFIG)
        snprintf(s.config, sizeof s.config, "%s", path);
    struct model_hparams hp = {0};
    hp.n_layer = 12;
    hp.n_head = 4;
    hp.n_kv_head = 2;
    hp.head_dim = 64;
    hp.sliding_window = 32;
    for (int l = 0; l < 12; l++)
        hp.layer_swa[l] = l % 3 != 2;
    int ldt[12], code;
    struct kvq_layers_info info;
    if (!kvq_scheme_layers(&s, &hp, path, DT_F16, ldt, &code, &info, &e)) {
        float x[128], y[64];
        uint8_t buf[1024];
        for (int i = 0; i < 128; i++)
            x[i] = (float)((i * 37) % 19) - 9.0f;
        for (int l = 0; l < 12; l++)
            if (kvq_is(ldt[l]))
                for (int w = 0; w < 2; w++) {
                    kvq_store_row(ldt[l], w, buf, x, 128);
                    kvq_load_head(ldt[l], w, buf, 1, y);
                }
        char ns[256];
        kvq_ns_append(ns, sizeof ns, ldt, 12, DT_F16);
    }
    unlink(path);
    return 0;
}
