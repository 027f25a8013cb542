/* toolcall_int.h — internals shared by the toolcall_*.c files (not for other folders).
 *
 * tcj_*: a resumable byte-at-a-time JSON validator (finds where a JSON value ends in a
 * stream and says whether the text so far can still become JSON), plus minify/escape.
 * tcb_*: a growable byte buffer. tcx_*: whole-span parsers, one per markup format, that
 * turn the text of one complete markup block into calls.
 */
#ifndef CINFER_API_TOOLCALL_INT_H
#define CINFER_API_TOOLCALL_INT_H

#include <stddef.h>
#include <stdint.h>

#include "api/toolcall.h"

/* ---- growable buffer ---- */
struct tcb {
    char *p;
    size_t n, cap;
    int oom; /* sticky: a failed growth; contents are then truncated */
};
void tcb_put(struct tcb *b, const char *s, size_t n);
void tcb_putc(struct tcb *b, char c);
void tcb_puts(struct tcb *b, const char *s);
/* NUL-terminates (not counted in n) and returns b->p ("" when empty and never grown). */
const char *tcb_cstr(struct tcb *b);
void tcb_free(struct tcb *b);

/* ---- JSON validator ---- */
enum { TCJ_MORE = 0, TCJ_DONE = 1, TCJ_ERR = -1 };
#define TCJ_MAX_DEPTH 128

struct tcj {
    uint8_t st, lit_i, key, uhex, scalar_top, started;
    const char *lit;
    int depth;
    char stack[TCJ_MAX_DEPTH];
};
/* Resets; scalar_top != 0 also accepts a bare string/number/literal as the value. */
void tcj_init(struct tcj *j, int scalar_top);
/* Feeds one byte. TCJ_MORE: consumed; TCJ_DONE: consumed and it closed the top-level value
 * (objects/arrays/strings/literals end on their own last byte); TCJ_ERR: the byte cannot
 * continue any JSON value (it is not consumed). Whitespace before the value is skipped. */
int tcj_feed(struct tcj *j, unsigned char c);
/* At end of input: 1 when the bytes so far form a complete value (needed for numbers). */
int tcj_complete(const struct tcj *j);
/* 1 when s[0..n) is exactly one JSON value (surrounding whitespace allowed). */
int tcj_valid(const char *s, size_t n, int scalar_top);
/* Appends s[0..n) (one valid value) without insignificant whitespace; raw control bytes
 * inside strings (which the validator tolerates) are escaped; invalid UTF-8, NUL (raw or
 * escaped) and lone surrogate escapes become U+FFFD, so the result is strict JSON that
 * jansson accepts. */
void tcj_minify(struct tcb *out, const char *s, size_t n);
/* 1 when s[0..n) is non-empty, valid UTF-8 and free of control characters (a tool name). */
int tcj_name_ok(const char *s, size_t n);
/* Appends s[0..n) as a JSON string literal (quotes included); invalid UTF-8 becomes U+FFFD. */
void tcj_escape(struct tcb *out, const char *s, size_t n);

/* ---- tools (the request's declarations) ---- */
struct tc_tools; /* opaque: name -> parameter types */
int tct_load(struct tc_tools **out, const char *tools_json, struct cerr *e);
void tct_free(struct tc_tools *t);
/* 1 when no tools are known (accept any name) or `name` is declared. */
int tct_has(const struct tc_tools *t, const char *name, size_t n);
/* Type class of parameter `param` of tool `name`: */
enum { TCT_UNKNOWN = 0, TCT_STRING, TCT_OTHER };
int tct_param_type(const struct tc_tools *t, const char *name, const char *param, size_t pn);

/* ---- whole-span parsers ---- */
/* Receives one parsed call: name (NUL-terminated), final arguments JSON object. */
typedef int (*tcx_call_fn)(void *ctx, const char *name, const char *args, size_t an);

/* Each parses one complete markup body and reports its calls through `fn` only when the
 * whole body is valid (so a failure reports nothing). Return the number of calls (>= 1),
 * or 0 when the body is not valid markup. */
int tcx_json_calls(const struct tc_tools *t, const char *s, size_t n, tcx_call_fn fn, void *ctx);
int tcx_xml_calls(const struct tc_tools *t, const char *s, size_t n, tcx_call_fn fn, void *ctx);
int tcx_mistral_calls(const struct tc_tools *t, const char *s, size_t n, tcx_call_fn fn,
                      void *ctx);
int tcx_python_calls(const struct tc_tools *t, const char *s, size_t n, tcx_call_fn fn, void *ctx);
int tcx_gemma4_calls(const struct tc_tools *t, const char *s, size_t n, tcx_call_fn fn, void *ctx);

#endif
