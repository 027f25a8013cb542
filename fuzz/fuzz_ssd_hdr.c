/* fuzz_ssd_hdr.c — libFuzzer target for the SSD tier's block-file header parser
 * (kv_ssd_hdr_parse, kv/ssd.h).
 *
 * Input: any bytes, parsed as a header. Checked: the parser never reads past the input
 * (ASan), and a header it accepts re-encodes to the same first 184 bytes (the encoder and
 * the parser agree on every field; the header hash covers the rest). Seeds:
 * fuzz/corpus/fuzz_ssd_hdr/.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kv/ssd.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *copy = malloc(size ? size : 1); /* exact-size buffer: ASan sees any over-read */
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    struct kv_ssd_hdr h;
    if (kv_ssd_hdr_parse(copy, size, &h, NULL) == 0) {
        uint8_t b[KV_SSD_HDR_BYTES];
        kv_ssd_hdr_encode(&h, b);
        if (memcmp(b, copy, KV_SSD_HDR_BYTES) != 0)
            __builtin_trap();
    }
    free(copy);
    return 0;
}
