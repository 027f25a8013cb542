/* base64.c — see base64.h. */
#include "util/base64.h"

static const char g_tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t base64_encoded_len(size_t n) { return (n + 2) / 3 * 4 + 1; }

void base64_encode(const uint8_t *src, size_t n, char *out)
{
    size_t i = 0, o = 0;
    for (; i + 2 < n; i += 3) {
        uint32_t v = (uint32_t)src[i] << 16 | (uint32_t)src[i + 1] << 8 | src[i + 2];
        out[o++] = g_tab[v >> 18];
        out[o++] = g_tab[(v >> 12) & 63];
        out[o++] = g_tab[(v >> 6) & 63];
        out[o++] = g_tab[v & 63];
    }
    if (i < n) {
        uint32_t v = (uint32_t)src[i] << 16 | (i + 1 < n ? (uint32_t)src[i + 1] << 8 : 0);
        out[o++] = g_tab[v >> 18];
        out[o++] = g_tab[(v >> 12) & 63];
        out[o++] = i + 1 < n ? g_tab[(v >> 6) & 63] : '=';
        out[o++] = '=';
    }
    out[o] = 0;
}

static int val(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

long base64_decode(const char *s, size_t len, uint8_t *out, size_t cap)
{
    if (len % 4)
        return -1;
    size_t o = 0;
    for (size_t i = 0; i < len; i += 4) {
        int pad = 0;
        uint32_t v = 0;
        for (int k = 0; k < 4; k++) {
            char c = s[i + k];
            int d;
            if (c == '=' && i + 4 == len && k >= 2) {
                d = 0;
                pad++;
            } else {
                if (pad || (d = val(c)) < 0)
                    return -1;
            }
            v = v << 6 | (uint32_t)d;
        }
        size_t nb = 3 - (size_t)pad;
        if (o + nb > cap)
            return -1;
        out[o++] = (uint8_t)(v >> 16);
        if (nb > 1)
            out[o++] = (uint8_t)(v >> 8);
        if (nb > 2)
            out[o++] = (uint8_t)v;
    }
    return (long)o;
}
