/* responses.h — the OpenAI Responses API (POST /v1/responses): request mapping, encoder.
 *
 * The request is mapped onto an OpenAI chat body (server-inventory §16.3): `input` (a
 * string or items: message, function_call, function_call_output; reasoning items dropped)
 * after the stored conversation of previous_response_id; `instructions` (or the stored
 * ones) and every system/developer item merged into one leading system message;
 * max_output_tokens; flat function tools (built-in tool types dropped); tool_choice;
 * sampling and extras. The encoder produces the response object or the streaming event
 * chain (response.created, .in_progress, output items with their part/text/arguments
 * events, response.completed), every event with a sequence_number. One per request.
 */
#ifndef CINFER_API_RESPONSES_H
#define CINFER_API_RESPONSES_H

#include <jansson.h>

#include "api/oai_out.h"
#include "api/oai_req.h"
#include "api/prompt.h"
#include "engine/engine.h"
#include "util/sbuf.h"

/* Looks up a stored response: a new reference to {messages, instructions} or NULL. */
typedef json_t *(*resp_lookup_fn)(const char *id, void *ud);

struct resp_req {
    json_t *chat;       /* the OpenAI chat body (owned) */
    json_t *convo;      /* the conversation without the system message (owned) */
    char *instructions; /* effective instructions, malloc'd or NULL */
    char *prev_id;      /* previous_response_id, malloc'd or NULL */
    json_t *echo;       /* fields echoed in the response object (owned) */
    int no_store;       /* "store": false — not saved for previous_response_id */
    char warning[256];  /* what was accepted and ignored (built-in tools), for a Warning
                           header; "" when nothing was */
};

/* Maps body[0..len). Unknown/expired previous_response_id -> 404 "previous_response_id
 * '<id>' not found or expired". Other problems -> 400. On failure q is left empty. */
int resp_to_chat(const char *body, size_t len, resp_lookup_fn lookup, void *ud, struct resp_req *q,
                 struct api_error *err);
void resp_req_deinit(struct resp_req *q);

struct resp_out;

/* r: the parsed chat request; echo: fields for the response object (borrowed reference is
 * taken: the encoder increfs it); family: enum tc_family (tools from r->tools). */
int resp_out_new(struct resp_out **out, const struct api_model *m, const struct oai_req *r,
                 const struct api_prompt *p, int family, json_t *echo, struct cerr *e);
void resp_out_free(struct resp_out *o);
/* Streaming: response.created and response.in_progress. */
int resp_out_begin(struct resp_out *o, struct sbuf *sse);
/* One engine event: SSE events, or at DONE the response object (non-streaming). */
int resp_out_event(struct resp_out *o, const struct engine_event *ev, struct sbuf *out);
/* The response id ("resp_" + 24 hex). */
const char *resp_out_id(const struct resp_out *o);
/* After DONE: the assistant turn as a chat message {role, content, tool_calls?} (new
 * reference) for the store, or NULL. */
json_t *resp_out_message(const struct resp_out *o);
/* oai_out_rerendered for a Responses turn (the message as resp_out_message gives it, in the
 * normalised chat shape). */
json_t *resp_out_rerendered(const struct resp_out *o);
/* The whole response object once the turn is done (borrowed; NULL before). */
json_t *resp_out_object(const struct resp_out *o);
/* The SSE error event (type "error"). */
int resp_error_frame(struct sbuf *out, const char *message);

#endif
