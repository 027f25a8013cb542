/* toolcall.h — find tool calls in a model's decoded output, per model family, streaming.
 *
 * Pure text in, events out: CONTENT (plain text, streamed as it arrives; only a possible
 * markup prefix such as "<tool_c" is held back), CALL_BEGIN / CALL_ARGS_DELTA / CALL_END for
 * each call (several per turn). Markup that does not parse, or a call naming a tool the
 * request did not declare, falls back to CONTENT with the original bytes — never an error.
 * Formats per family and the exact rules: docs/tool-calling.md. One parser per request,
 * used by one thread; no engine, no HTTP.
 */
#ifndef CINFER_API_TOOLCALL_H
#define CINFER_API_TOOLCALL_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

enum tc_family {
    TC_GENERIC = 0, /* union of the formats below that are safe to look for anywhere */
    TC_HERMES,      /* Qwen2.5 / Qwen3 / Hermes: <tool_call>{"name":…,"arguments":…}</tool_call> */
    TC_QWEN3_XML,   /* Qwen3-Coder / Qwen3.5: <tool_call><function=n><parameter=p>v</parameter>… */
    TC_LLAMA3,      /* Llama 3.x: {"name":…,"parameters":…} as the reply or after <|python_tag|>;
                     * custom tools as <function=name>{…}</function> */
    TC_MISTRAL,     /* [TOOL_CALLS][{…}] and [TOOL_CALLS]name[ARGS]{…} */
    TC_GEMMA,       /* ```tool_code name(k=v) ```, ```json {…} ```, <|tool_call>call:n{…}<tool_call|> */
    TC_DEEPSEEK,    /* DeepSeek R1 / V3.1: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>…<｜tool▁sep｜>… */
    TC_NONE,        /* no tool calls: everything is content (keep last) */
};

enum tc_event_kind {
    TC_EV_CONTENT = 0,    /* text, n: plain content */
    TC_EV_CALL_BEGIN,     /* index, id, name */
    TC_EV_CALL_ARGS_DELTA, /* index, text, n: next piece of the arguments JSON */
    TC_EV_CALL_END,       /* index, id, name, text, n: the final arguments JSON (an object;
                           * numbers as the model wrote them: parse with jansson's
                           * JSON_DECODE_INT_AS_REAL to accept integers beyond 64 bits) */
};

/* One event. Every pointer is valid only during the callback; text is not NUL-terminated
 * (use n), id and name are. The ARGS_DELTA pieces of a call concatenate to its final JSON. */
struct tc_event {
    enum tc_event_kind kind;
    int index;        /* call number within the turn, from 0 */
    const char *id;   /* "call_" + 24 hex digits */
    const char *name; /* tool name */
    const char *text;
    size_t n;
};

typedef void (*tc_event_fn)(const struct tc_event *ev, void *ud);

struct tc_parser;

/* Picks the family from markers in the chat template source (preferred) and, when the
 * template says nothing, from the architecture name (e.g. "gemma3", "mistral"); either may
 * be NULL. Returns TC_GENERIC when nothing matches. */
enum tc_family tc_family_detect(const char *chat_template_source, const char *arch_name);

/* "generic", "hermes", "qwen3_xml", "llama3", "mistral", "gemma", "deepseek", "none". */
const char *tc_family_name(enum tc_family f);

/* Inverse of tc_family_name (also accepts "qwen", "qwen3_coder", "llama"); -1 if unknown. */
int tc_family_from_name(const char *name);

/* Creates a parser. `tools_json` is the request's tools array (OpenAI chat shape
 * {type,function:{name,parameters}}, Responses flat shape {type,name,parameters} or
 * Anthropic shape {name,input_schema}); NULL or "" means no tools known, and then any tool
 * name is accepted and XML parameter values are decoded as JSON when valid. With tools,
 * a call to an undeclared name is content. Returns 0, CERR_FORMAT (tools_json is not a
 * JSON array) or CERR_NOMEM, with `e` filled. Free with tc_free(). */
int tc_new(struct tc_parser **out, enum tc_family family, const char *tools_json,
           struct cerr *e);

/* Call ids are "call_" + 24 hex digits derived from (seed, call index): the same seed gives
 * the same ids, so a caller passing a per-request counter gets stable, unique ids. Default
 * seed: a process-wide counter mixed with the clock. Call before the first push. */
void tc_set_id_seed(struct tc_parser *p, uint64_t seed);

/* Stream mode (off by default): a call's arguments leave as several ARGS_DELTA events
 * while they arrive (JSON families and Qwen3-Coder XML; Python-style and Gemma 4 calls
 * still come whole). The call is committed at CALL_BEGIN, once its name is known and
 * declared; if its markup then breaks, or the generation ends inside it, the call still
 * ends, with the arguments that arrived closed into valid JSON, and the rest of that markup
 * block is dropped instead of becoming content. Markup that parses gives the same events
 * (deltas joined) in both modes. Call before the first push. */
void tc_set_stream_args(struct tc_parser *p, int on);

/* Feeds n bytes of decoded text; calls cb for every event now resolved, in order. Returns 0
 * or CERR_NOMEM (the parser is then unusable; free it). */
int tc_push(struct tc_parser *p, const char *text, size_t n, tc_event_fn cb, void *ud);

/* End of generation: resolves held text. Markup still open is parsed if it is complete
 * without its closing tag (a model that stops right after the JSON), else it is content.
 * Returns 0 or CERR_NOMEM. */
int tc_flush(struct tc_parser *p, tc_event_fn cb, void *ud);

/* Number of calls emitted so far (CALL_END seen). */
int tc_call_count(const struct tc_parser *p);

/* The id, name and final arguments JSON of call `index`, or NULL when out of range.
 * Owned by the parser, valid until tc_free. */
const char *tc_call_id(const struct tc_parser *p, int index);
const char *tc_call_name(const struct tc_parser *p, int index);
const char *tc_call_args(const struct tc_parser *p, int index);

/* The exact sampled text of the markup that produced call `index` (markers included), so a
 * server can replay it byte for byte in the next prompt (prefix-cache stability). Calls
 * that came from one markup block (a Mistral array, several functions in one <tool_call>)
 * share that block's text: *first_in_block (may be NULL) is 1 only for the first of them.
 * NULL when out of range. */
const char *tc_call_raw(const struct tc_parser *p, int index, int *first_in_block);
/* 1 when call `index` came in the markup its family's chat template writes (a <tool_call>
 * tag, [TOOL_CALLS], ...), 0 when the parser recovered it from another format (a ```json
 * fence, a bare JSON object) that the template would not render back. */
int tc_call_native(const struct tc_parser *p, int index);

/* Frees the parser; NULL is fine. */
void tc_free(struct tc_parser *p);

/* One-shot helper: tc_new + one push of the whole text + tc_flush + tc_free. */
int tc_parse_text(enum tc_family family, const char *tools_json, const char *text, size_t n,
                  uint64_t id_seed, tc_event_fn cb, void *ud, struct cerr *e);

#endif
