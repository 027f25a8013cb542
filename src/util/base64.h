/* base64.h — standard base64 (RFC 4648, with padding) encode/decode. */
#ifndef CINFER_UTIL_BASE64_H
#define CINFER_UTIL_BASE64_H

#include <stddef.h>
#include <stdint.h>

/* Bytes needed to encode n bytes, including the NUL terminator. */
size_t base64_encoded_len(size_t n);
/* Writes the encoding of src[0..n) plus NUL into out (base64_encoded_len(n) bytes). */
void base64_encode(const uint8_t *src, size_t n, char *out);
/* Decodes s[0..len) into out (cap bytes). Returns the decoded length, or -1 on a bad
 * character, bad padding or too small a buffer. Whitespace is not accepted. */
long base64_decode(const char *s, size_t len, uint8_t *out, size_t cap);

#endif
