/* fuzz_hscan.c — libFuzzer target for src/http/hscan.c, the request-framing scan behind
 * the early 413. Input: <1 byte: split seed> <connection bytes>. The bytes are fed whole,
 * then in pieces cut where the seed says; both runs must agree (status, and for BIG the
 * request's start, index, length and path), the position must count every byte, and a
 * BIG request must start inside the input at a request line. Crashes, reads out of
 * bounds, undefined behaviour and a disagreement (abort) are bugs.
 * Seeds: fuzz/corpus/fuzz_hscan/.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http/hscan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned seed = data[0];
    const char *p = (const char *)data + 1;
    size_t n = size - 1;
    uint64_t max = 64u << (seed & 7);
    struct hscan a, b;
    hscan_init(&a);
    hscan_init(&b);
    int sa = hscan_feed(&a, p, n, max);
    int sb = HSCAN_MORE;
    size_t step = 1 + (seed >> 3), i = 0;
    while (i < n) {
        size_t m = n - i < step ? n - i : step;
        sb = hscan_feed(&b, p + i, m, max);
        i += m;
        step = step * 5 % 17 + 1; /* uneven pieces */
    }
    if (n == 0)
        sb = b.status;
    if (sa != sb || a.pos != n || b.pos != n)
        abort();
    if (sa == HSCAN_BIG) {
        if (a.req_start != b.req_start || a.n_req != b.n_req || a.cl != b.cl ||
            strcmp(a.path, b.path) != 0 || a.cl <= max || a.req_start >= n)
            abort();
        if (p[a.req_start] < 'A' || p[a.req_start] > 'Z')
            abort();
    }
    return 0;
}
