/* anthropic.h — the Anthropic Messages API (POST /v1/messages): request mapping, encoder.
 *
 * The request is mapped onto an OpenAI chat body (server-inventory §16.2): system (string
 * or text blocks) -> a system message; text blocks -> content; tool_use -> assistant
 * tool_calls; tool_result -> tool messages; thinking blocks dropped; image/document blocks
 * refused; tools {name, description, input_schema} -> function tools (server tools dropped);
 * stop_sequences -> stop; thinking {type} -> enable_thinking. The caller then runs that body
 * through oai_parse, so sampling validation is shared. The encoder turns engine events into
 * an Anthropic message (non-streaming) or the exact SSE event grammar: message_start, ping,
 * content blocks (thinking_delta + signature_delta, text_delta, input_json_delta),
 * message_delta, message_stop. One encoder per request, one thread.
 */
#ifndef CINFER_API_ANTHROPIC_H
#define CINFER_API_ANTHROPIC_H

#include <jansson.h>

#include "api/oai_out.h"
#include "api/oai_req.h"
#include "api/prompt.h"
#include "engine/engine.h"
#include "util/sbuf.h"

/* Maps an Anthropic body[0..len) to a new OpenAI chat body (*out, owned by the caller).
 * for_count: count_tokens (max_tokens not needed, stream ignored). 400 with the reason on a
 * malformed request. */
/* warn (warn_cap bytes, may be NULL): what was accepted and ignored (server tools, beta
 * fields such as context_management / container / mcp_servers), for a Warning header; ""
 * when nothing was. */
int anth_to_chat(const char *body, size_t len, int for_count, json_t **out, char *warn,
                 size_t warn_cap, struct api_error *err);

struct anth_out;

/* r: the parsed (mapped) request (its stops are borrowed until the encoder is freed);
 * family: enum tc_family for tool calls (used only when r->tools is set). */
int anth_out_new(struct anth_out **out, const struct api_model *m, const struct oai_req *r,
                 const struct api_prompt *p, int family, struct cerr *e);
void anth_out_free(struct anth_out *o);
/* oai_out_rerendered for a Messages turn: the assistant message as the client's tool_use
 * blocks come back through anth_to_chat (thinking dropped, whitespace-only text dropped). */
json_t *anth_out_rerendered(const struct anth_out *o);
/* Streaming: message_start and a ping. */
int anth_out_begin(struct anth_out *o, struct sbuf *sse);
/* One engine event: SSE events, or at DONE the whole JSON message (non-streaming). At
 * ERROR (streaming) an `event: error` frame. Returns 0 or CERR_NOMEM. */
int anth_out_event(struct anth_out *o, const struct engine_event *ev, struct sbuf *out);

/* Anthropic error type for an HTTP status (invalid_request_error, authentication_error,
 * permission_error, not_found_error, request_too_large, rate_limit_error, api_error,
 * overloaded_error). */
const char *anth_error_type(int status);
/* {"type":"error","error":{"type","message"}} (malloc'd). */
char *anth_error_body(const struct api_error *err);
/* event: error\ndata: {...}\n\n with type api_error. */
int anth_error_frame(struct sbuf *out, const char *message);

#endif
