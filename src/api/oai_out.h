/* oai_out.h — turn engine events into OpenAI responses: SSE chunks or one JSON body.
 *
 * One struct oai_out per request, fed the request's engine events in order on one thread
 * (the HTTP loop). For chat, text goes through the think-tag splitter when the model has
 * think tags, giving `reasoning` / `reasoning_content` and `content`. Streaming appends
 * complete SSE frames (`data: {...}\n\n`) to the caller's buffer: a first chunk with the
 * role, deltas in generation order, a last chunk with finish_reason and usage, then
 * `data: [DONE]`. Non-streaming accumulates and produces the body at DONE, with the
 * mlx_lm.server logprobs block when asked. Shapes: server-inventory §3.3, §3.4, §4.3, §16.1.
 */
#ifndef CINFER_API_OAI_OUT_H
#define CINFER_API_OAI_OUT_H

#include "api/oai_req.h"
#include "api/prompt.h"
#include "api/reasoning.h"
#include "api/toolcall.h"
#include "engine/engine.h"
#include "util/sbuf.h"

struct oai_out;

/* lane: "serial" or "batched" (usage.lane). */
int oai_out_new(struct oai_out **out, const struct api_model *m, const struct oai_req *r,
                const struct api_prompt *p, const char *lane, struct cerr *e);
void oai_out_free(struct oai_out *o);
/* Streaming only: the first chunk (role). */
int oai_out_begin(struct oai_out *o, struct sbuf *sse);
/* Feeds one engine event (PROMPT events fill an echoed prompt's legacy logprobs). Streaming: appends frames to out (after DONE: the final chunk and
 * [DONE]; after ERROR: an error frame, no [DONE]). Non-streaming: at DONE, out receives the
 * whole JSON body; at ERROR nothing (the caller replies 500 with ev->error). Returns 0 or
 * CERR_NOMEM. */
int oai_out_event(struct oai_out *o, const struct engine_event *ev, struct sbuf *out);
/* Makes o one choice of several (api/openai/choices.h): its chunks and choice carry index,
 * the id and created time are the group's; the stream's end (usage, [DONE]) and the body
 * are the group's to write: a non-streaming DONE leaves the choice in oai_out_choice. */
void oai_out_group(struct oai_out *o, int index, const char *id, long created);
/* The response id ("chatcmpl-…" / "cmpl-…"). */
const char *oai_out_id(const struct oai_out *o);
/* Grouped, non-streaming: the finished choice object (borrowed), NULL before DONE. */
json_t *oai_out_choice(const struct oai_out *o);
/* The mean logprob of the generated tokens (best_of ranks by it; the engine request must ask
 * for logprobs), or -1e30 when none came. */
double oai_out_mean_logprob(const struct oai_out *o);
/* 1 once DONE or ERROR was fed. */
int oai_out_finished(const struct oai_out *o);
/* After DONE: the assistant message the client sends back with the next turn, in the
 * normalised chat shape (oai_req.h: content text, tool_calls[].function.arguments an
 * object), when this turn ended with a tool call that the chat template renders otherwise
 * than the model wrote it (a call the parser recovered from another format, such as a bare
 * JSON object: tc_call_native 0) — the next prompt then leaves the cached ids at that call.
 * NULL otherwise (no call, every call native, reasoning text in the turn, no memory).
 * New reference. */
json_t *oai_out_rerendered(const struct oai_out *o);
/* Turns on tool-call parsing (call before the first event): `family` is an enum tc_family,
 * `tools` the request's tools array (OpenAI chat shape). Calls become message.tool_calls
 * (content null when there is no other text) and finish_reason "tool_calls"; streaming sends
 * each call as tool_calls[i] deltas (id/name first, then arguments pieces). A NULL or empty
 * tools array leaves parsing off. Returns 0, CERR_NOMEM or CERR_FORMAT. */
int oai_out_tools(struct oai_out *o, int family, const json_t *tools, struct cerr *e);

/* ---- api_turn: one assistant turn split into reasoning, content and tool calls ----------
 * Shared by the OpenAI, Anthropic and Responses encoders. Decoded text goes through the
 * think-tag splitter (when the model has tags), then content goes through the tool-call
 * parser (when tools are on). The callback receives, in generation order: reasoning text,
 * content text and the tool-call events. A call opened inside the think block (the family's
 * explicit markup, e.g. <tool_call>) is a call too, as one right after it. The whole sampled
 * text is kept so that, at the end
 * of a turn with calls, it is registered in the replay store (api/replay.h) under the call
 * ids. One per request, one thread. */
enum turn_kind { TURN_REASONING = 0, TURN_CONTENT, TURN_CALL_BEGIN, TURN_CALL_DELTA, TURN_CALL_END };
/* tc is the tool-call event for the CALL kinds (NULL otherwise); t/n the text. */
typedef void (*turn_fn)(int kind, const struct tc_event *tc, const char *t, size_t n, void *ud);

struct api_turn {
    struct rsn_splitter *rsn;
    struct tc_parser *tc;
    struct sbuf raw;   /* tools on: every byte fed, in order */
    struct sbuf ws;    /* tools on: whitespace-only content not yet emitted */
    size_t n_reasoning_bytes;
    const char *primed; /* text to feed before the next push (api_turn_prime), or NULL */
    int max_calls;      /* 0: any number of calls; else the calls past it are dropped */
    /* a call written inside the think block (DeepSeek-R1 distills and Qwen3 do): reasoning
     * text is scanned for the family's call opening (rmark), held back while its end could
     * be the start of one (rbuf); from the opening on, the text goes to the call parser
     * (rcall) until the call ends, and the reasoning goes on after it */
    const char *rmark;
    struct sbuf rbuf;
    int rcall, in_rsn;
    turn_fn cb;
    void *ud;
    int err;
};

/* Sets up t (zeroed first). think tags from m; start_in_reasoning from the prompt; tools
 * (any of the three shapes toolcall.h accepts) or NULL for no tool parsing; family an enum
 * tc_family. Returns 0 or a CERR code with e filled. */
int api_turn_init(struct api_turn *t, const struct api_model *m, int start_in_reasoning,
                  int family, const json_t *tools, turn_fn cb, void *ud, struct cerr *e);
/* Feeds n decoded bytes. Returns 0 or CERR_NOMEM. */
int api_turn_push(struct api_turn *t, const char *s, size_t n);
/* Streaming responses: tool-call arguments are released in increments as they are
 * generated (toolcall.h stream mode) instead of whole when the call ends. Call right after
 * api_turn_init, before any push. */
void api_turn_stream_args(struct api_turn *t);
/* Text the prompt already wrote for the model (a forced tool call's opening markup): fed to
 * the parsers just before the next push (or at finish), i.e. once a stream's opening frames
 * are out. s must outlive t. */
void api_turn_prime(struct api_turn *t, const char *s);
/* At most n tool calls (parallel_tool_calls: false, Anthropic disable_parallel_tool_use):
 * the calls after the n-th are dropped from the events and from api_turn_calls. */
void api_turn_max_calls(struct api_turn *t, int n);
/* End of the turn: releases held text, then registers the raw text under the call ids in
 * the replay store when the turn produced calls. Returns 0 or CERR_NOMEM. */
int api_turn_finish(struct api_turn *t);
int api_turn_calls(const struct api_turn *t); /* calls parsed so far */
/* oai_out_rerendered for any protocol: content[0..n) is the turn's content text. */
json_t *api_turn_rerendered(const struct api_turn *t, const char *content, size_t n);
void api_turn_deinit(struct api_turn *t);
/* Anthropic's stop_reason / OpenAI's finish_reason helpers need the matched stop string:
 * the stop string of a DONE event (NULL unless finish is STOP and the index is valid). */
const char *api_stop_string(const struct engine_event *ev, char *const *stops, int n_stops);

/* The OpenAI error body {"error":{"message","type","param","code"}} (malloc'd). */
char *oai_error_body(const struct api_error *err);
/* An SSE error frame: data: {"error":{"message":...}}\n\n */
int oai_error_frame(struct sbuf *out, const char *message);
/* A JSON string from bytes that may hold invalid UTF-8 (replaced by U+FFFD). */
json_t *api_json_text(const char *s, size_t n);
/* "prefix-" + 24 random hex digits (or a uuid-like form) into buf. */
void api_new_id(char *buf, size_t cap, const char *prefix);

#endif
