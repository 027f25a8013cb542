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
enum tcj_state {
    S_VALUE,     /* expecting a value */
    S_OBJ_FIRST, /* after '{': key or '}' */
    S_OBJ_KEY,   /* after ',' in an object: key */
    S_COLON,     /* after a key */
    S_ARR_FIRST, /* after '[': value or ']' */
    S_AFTER,     /* after a value inside a container: ',' or the closer */
    S_STR,
    S_ESC,
    S_U,
    S_N_MINUS, /* '-' seen, digit needed */
    S_N_ZERO,  /* leading 0 */
    S_N_INT,
    S_N_DOT,
    S_N_FRAC,
    S_N_EXP,
    S_N_EXPSIGN,
    S_N_EXPD,
    S_LIT,
    S_DONE,
};
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
 * jansson accepts (with JSON_DECODE_INT_AS_REAL: numbers are copied, big ones included). */
void tcj_minify(struct tcb *out, const char *s, size_t n);
/* 1 when s[0..n) is non-empty, valid UTF-8 and free of control characters (a tool name). */
int tcj_name_ok(const char *s, size_t n);
/* Appends s[0..n) as a JSON string literal (quotes included); invalid UTF-8 becomes U+FFFD. */
void tcj_escape(struct tcb *out, const char *s, size_t n);
/* The same without the quotes (pieces cut at whole UTF-8 characters escape as the whole). */
void tcj_escape_body(struct tcb *out, const char *s, size_t n);
/* 1 when the bytes so far can be made a complete value by appending tcj_close(). */
int tcj_closable(const struct tcj *j);
/* Appends what completes a closable value: a quote inside a string, then the closers. */
void tcj_close(const struct tcj *j, struct tcb *out);
/* Number of bytes at the end of s[0..n) that start a UTF-8 sequence not yet complete. */
size_t tcj_utf8_tail(const char *s, size_t n);

/* Incremental tcj_minify: feeding a value in pieces gives the bytes of tcj_minify. */
struct tcm {
    int in_str;
};
/* Minifies s[0..n) from state m and returns the bytes consumed; unless `final`, it stops
 * before an escape or UTF-8 sequence that is not complete within n (feed it again). */
size_t tcm_feed(struct tcm *m, struct tcb *out, const char *s, size_t n, int final);

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
/* tcx_json_calls, else one call object inside an extra pair of braces with stray closing
 * braces after it: {{"name": …, "arguments": {…}}}}. The Qwen2.5-Coder template writes its
 * call example so ({{"name": <function-name>, …}}) and small models copy it; the inner
 * object counts only as a call of a declared tool, as any call. */
int tcx_json_calls_doubled(const struct tc_tools *t, const char *s, size_t n, tcx_call_fn fn,
                           void *ctx);
/* tcx_json_calls_doubled, then, when that finds no valid call, the same after converting
 * Python-style objects to JSON: single quotes, bare keys, True/False/None, trailing commas. */
int tcx_json_calls_repair(const struct tc_tools *t, const char *s, size_t n, tcx_call_fn fn,
                          void *ctx);
int tcx_xml_calls(const struct tc_tools *t, const char *s, size_t n, tcx_call_fn fn, void *ctx);
int tcx_mistral_calls(const struct tc_tools *t, const char *s, size_t n, tcx_call_fn fn,
                      void *ctx);
int tcx_python_calls(const struct tc_tools *t, const char *s, size_t n, tcx_call_fn fn, void *ctx);
/* One XML parameter value (one leading and one trailing newline stripped) as JSON: a
 * string-typed (TCT_STRING) value stays a string, others become JSON when valid. */
void tcx_xml_value(struct tcb *out, int type, const char *v, size_t vn);
int tcx_gemma4_calls(const struct tc_tools *t, const char *s, size_t n, tcx_call_fn fn, void *ctx);
/* A sequence of DeepSeek <｜tool▁call▁begin｜>…<｜tool▁call▁end｜> calls (R1 and V3.1 bodies). */
int tcx_deepseek_calls(const struct tc_tools *t, const char *s, size_t n, tcx_call_fn fn,
                       void *ctx);

/* ---- the parser (toolcall.c) and its streaming trackers (toolcall_stream.c) ---- */

enum tc_kind {
    K_TAG,        /* <tool_call> … </tool_call>: JSON object(s) or XML functions */
    K_FUNC,       /* <function=name> … </function> without the outer tag */
    K_PYTAG,      /* <|python_tag|> JSON object */
    K_BARE,       /* a JSON object as the first thing in the reply (or after a call) */
    K_MISTRAL,    /* [TOOL_CALLS] … */
    K_FENCE_PY,   /* ```tool_code … ``` */
    K_FENCE_JSON, /* ```json … ``` */
    K_GEMMA4,     /* <|tool_call> … <tool_call|> */
    K_DEEPSEEK,   /* <｜tool▁calls▁begin｜> … <｜tool▁calls▁end｜> */
    K_DEEPSEEK1,  /* one <｜tool▁call▁begin｜> … <｜tool▁call▁end｜> without the outer pair */
};

struct tc_marker {
    const char *start, *end; /* end NULL: the block ends where its JSON value ends */
    enum tc_kind kind;
};

struct call_rec {
    char id[32];
    char *name;
    struct tcb args; /* the arguments JSON as emitted so far (final after END) */
    int raw;         /* index into raws; -1 until its block ends */
    int first;       /* first call of its block */
    int kind;        /* enum tc_kind of its block's markup, -1 when unknown */
};

/* Follows JSON call objects while they arrive (stream mode). */
struct tcs_json {
    int dead, started, call_depth, args_top;
    struct tcj j;  /* the block's JSON (a call, an array of calls, or, args_top, the args) */
    struct tcj aj; /* the arguments value of the call being streamed */
    int key_kind;  /* member key at call depth: 0 other, 1 "name", 2 "arguments"/"parameters" */
    size_t key_start, name_start;
    struct tcb name;
    int name_ready, obj_committed, in_args;
    size_t a_emit, a_safe; /* span offsets: consumed by the minifier / last closable */
    struct tcm mz;
    struct tcb tmp;
};

/* Follows Qwen3-Coder XML functions while they arrive (stream mode). */
struct tcs_xml {
    int dead, st, ptype, np, in_call;
    int opened; /* the arguments' "{" was emitted (deferred: Llama's body may be JSON) */
    struct tcb lit, name, pname, vb;
    size_t v_emit; /* bytes of vb already emitted (string parameters) */
};

struct tc_parser {
    enum tc_family family;
    const struct tc_marker *const *markers; /* NULL-terminated */
    int bare;                               /* '{' opening a reply is markup */
    struct tc_tools *tools;
    uint64_t seed;
    int stream; /* tc_set_stream_args */

    int markup;                  /* 0: text; 1: inside a block */
    const struct tc_marker *cur; /* the block's marker */
    struct tcb mk;               /* text mode: bytes that may be the start of a marker */
    struct tcb ws;               /* text mode: trailing whitespace not yet emitted */
    struct tcb pre_ws;           /* whitespace that preceded the current block */
    struct tcb span;             /* the current block, marker included */
    struct tcj json;             /* JSON-ended blocks: the value's validator */
    int json_on;                 /* the validator has started (Mistral: after [ARGS]);
                                  * <tool_call>: 0 between values, 1 in one, -1 not JSON */
    int json_str_nl;             /* <tool_call>: the current JSON string has a raw newline */
    int at_start;                /* only whitespace since the reply began or since a call */
    int after_call;              /* the last thing seen was a call */

    struct tcb out; /* content resolved during this push, emitted in one event */
    tc_event_fn cb;
    void *ud;

    struct call_rec *calls;
    int ncalls, cap_calls;
    char **raws;
    int nraws, cap_raws;
    int block_first; /* the next call is the first of its block */
    int block_calls; /* calls begun inside the current block (stream mode) */
    int open;        /* index of the call between BEGIN and END, -1 if none */
    int skip;        /* whole-block parse: calls already streamed, not to report again */
    int oom;

    struct tcs_json sj;
    struct tcs_xml sx;
};

/* toolcall.c: call events, used by the trackers. begin returns the index or CERR_NOMEM. */
int tcp_call_begin(struct tc_parser *p, const char *name, size_t nn);
void tcp_call_delta(struct tc_parser *p, const char *s, size_t n);
void tcp_call_end(struct tc_parser *p);

/* toolcall_stream.c */
void tcs_block_begin(struct tc_parser *p);   /* after the block's marker is in span */
void tcs_byte(struct tc_parser *p);          /* the last span byte is new (block not ended) */
void tcs_json_start(struct tc_parser *p, int args_top); /* Mistral: JSON begins at the last byte */
void tcs_emit(struct tc_parser *p);          /* pushes out the argument bytes now safe */
void tcs_abort(struct tc_parser *p);         /* closes the open call with what arrived */
void tcs_free(struct tc_parser *p);

#endif
