/* body.h — load a request body as JSON the way the reference APIs accept it.
 *
 * Stricter parsers refused valid JSON that clients really send: strings with a `\u0000`
 * escape (a tool result read from a binary file) and integers beyond 64 bits (in fields
 * cinfer ignores). api_body_load accepts both: NUL bytes stay inside the string (read it
 * with json_string_length, never as a C string), and when an integer overflows, the body
 * is read again with every integer as a real and the integral reals within ±2^53 turned
 * back into integers (a field cinfer reads as an integer and that was beyond 2^53 in such a
 * body is then a real, which the field's own check refuses with its message). Pure.
 */
#ifndef CINFER_API_BODY_H
#define CINFER_API_BODY_H

#include <stddef.h>

#include <jansson.h>

/* The parsed value of body[0..len) (any JSON type; the caller checks it is an object), or
 * NULL with je filled when it is not JSON. */
json_t *api_body_load(const char *body, size_t len, json_error_t *je);

#endif
