/* bytes.c — the bytes one token adds to the text (for grammar masks).
 *
 * Byte-level BPE: the piece decoded to bytes; SentencePiece: the piece with U+2581 as a
 * space, and a byte-fallback piece <0xXX> as its byte. Special (control), unused and
 * unknown tokens add no text a grammar can take: -1. A leading space a decoder would strip
 * at the very start of a text is kept (the grammar sees what the token means mid-text).
 */
#include <string.h>

#include "tokenizer/tok_int.h"

int tok_token_bytes(const struct tok *t, int32_t id, char *buf, int cap)
{
    if (!t || id < 0 || id >= t->n_vocab || !t->piece[id])
        return -1;
    uint8_t a = t->attr[id];
    if (a & (TOKA_CONTROL | TOKA_UNUSED | TOKA_UNKNOWN))
        return -1;
    const char *p = t->mtext[id];
    uint32_t n = t->mtext_len[id];
    if (a & TOKA_BYTE) {
        /* <0xXX> */
        if (n == 6 && p[0] == '<' && p[1] == '0' && p[2] == 'x' && p[5] == '>' && cap >= 1) {
            int v = 0;
            for (int k = 3; k < 5; k++) {
                char c = p[k];
                v = v * 16 + (c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                                          : c >= 'A' && c <= 'F' ? c - 'A' + 10 : 0);
            }
            buf[0] = (char)v;
            return 1;
        }
        return -1;
    }
    int o = 0;
    for (uint32_t k = 0; k < n; k++) {
        if (!t->byte_level && k + 2 < n && (uint8_t)p[k] == 0xE2 && (uint8_t)p[k + 1] == 0x96 &&
            (uint8_t)p[k + 2] == 0x81) {
            if (o >= cap)
                return -1;
            buf[o++] = ' ';
            k += 2;
            continue;
        }
        if (o >= cap)
            return -1;
        buf[o++] = p[k];
    }
    return o;
}
