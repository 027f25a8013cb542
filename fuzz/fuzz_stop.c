/* fuzz_stop.c — libFuzzer target for the streaming stop matcher.
 *
 * Input: byte 0 = number of stops (mod 8); each stop = a length byte (mod 9) and that many
 * bytes (cut at a NUL); one byte seeding the push sizes; the rest is the text, pushed in
 * pieces of 1..16 bytes. Checked after every push: emitted + held == the text pushed so far,
 * and no stop occurs inside the emitted text; when a stop fires: emitted + that stop is a
 * prefix of the text and no stop ends earlier (nor a longer one at the same end); after the
 * flush without a stop: emitted == the whole text. Seeds: fuzz/corpus/fuzz_stop/.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/stop.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void require(int ok)
{
    if (!ok)
        __builtin_trap();
}

/* First end position (1-based) of s in t[0..n), or 0. */
static size_t first_end(const char *t, size_t n, const char *s)
{
    size_t l = strlen(s);
    if (!l || l > n)
        return 0;
    for (size_t i = 0; i + l <= n; i++)
        if (memcmp(t + i, s, l) == 0)
            return i + l;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    char sb[8][9];
    const char *stops[8];
    size_t pos = 1;
    int n = data[0] % 8;
    for (int i = 0; i < n; i++) {
        size_t l = pos < size ? data[pos++] % 9 : 0;
        if (l > size - pos)
            l = size - pos;
        memcpy(sb[i], data + pos, l);
        sb[i][l] = 0;
        pos += l;
        stops[i] = sb[i];
    }
    uint32_t rng = pos < size ? data[pos++] : 1;
    const char *text = (const char *)data + pos;
    size_t tn = size - pos;

    struct stop_matcher *m = NULL;
    struct cerr e;
    if (stop_new(&m, stops, n, &e))
        return 0;
    char *out = NULL;
    size_t len = 0, cap = 0, fed = 0;
    int which = -1, fired = 0;
    while (fed < tn && !fired) {
        rng = rng * 1103515245u + 12345u;
        size_t k = 1 + (rng >> 16) % 16;
        if (k > tn - fed)
            k = tn - fed;
        int rc = stop_push(m, text + fed, k, &out, &len, &cap, &which);
        require(rc == 0 || rc == 1);
        fed += k;
        fired = rc == 1;
        for (int i = 0; i < n; i++)
            require(first_end(out, len, stops[i]) == 0);
        require(len <= fed && (len == 0 || memcmp(out, text, len) == 0));
        if (!fired) {
            size_t hn;
            const char *h = stop_held(m, &hn);
            require(len + hn == fed && (hn == 0 || memcmp(h, text + len, hn) == 0));
        }
    }
    if (fired) {
        require(which >= 0 && which < n);
        size_t sl = strlen(stops[which]), end = len + sl;
        require(sl > 0 && end <= fed && memcmp(text + len, stops[which], sl) == 0);
        for (int i = 0; i < n; i++) {
            size_t fe = first_end(text, fed, stops[i]);
            require(fe == 0 || fe > end || (fe == end && strlen(stops[i]) <= sl));
        }
    } else {
        require(stop_flush(m, &out, &len, &cap) == 0);
        require(len == tn && (tn == 0 || memcmp(out, text, tn) == 0));
        for (int i = 0; i < n; i++)
            require(first_end(text, tn, stops[i]) == 0);
    }
    free(out);
    stop_free(m);
    return 0;
}
