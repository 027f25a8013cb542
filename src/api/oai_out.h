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
#include "engine/engine.h"
#include "util/sbuf.h"

struct oai_out;

/* lane: "serial" or "batched" (usage.lane). */
int oai_out_new(struct oai_out **out, const struct api_model *m, const struct oai_req *r,
                const struct api_prompt *p, const char *lane, struct cerr *e);
void oai_out_free(struct oai_out *o);
/* Streaming only: the first chunk (role). */
int oai_out_begin(struct oai_out *o, struct sbuf *sse);
/* Feeds one engine event. Streaming: appends frames to out (after DONE: the final chunk and
 * [DONE]; after ERROR: an error frame, no [DONE]). Non-streaming: at DONE, out receives the
 * whole JSON body; at ERROR nothing (the caller replies 500 with ev->error). Returns 0 or
 * CERR_NOMEM. */
int oai_out_event(struct oai_out *o, const struct engine_event *ev, struct sbuf *out);
/* 1 once DONE or ERROR was fed. */
int oai_out_finished(const struct oai_out *o);

/* The OpenAI error body {"error":{"message","type","param","code"}} (malloc'd). */
char *oai_error_body(const struct api_error *err);
/* An SSE error frame: data: {"error":{"message":...}}\n\n */
int oai_error_frame(struct sbuf *out, const char *message);
/* A JSON string from bytes that may hold invalid UTF-8 (replaced by U+FFFD). */
json_t *api_json_text(const char *s, size_t n);
/* "prefix-" + 24 random hex digits (or a uuid-like form) into buf. */
void api_new_id(char *buf, size_t cap, const char *prefix);

#endif
