/* fields.h — the OpenAI request fields that change no output, checked as OpenAI checks them,
 * and the ones cinfer cannot honour, refused.
 *
 * Chat completions (and the Responses API for metadata): `metadata` (16 string values at
 * most, keys up to 64 characters, values up to 512), `prompt_cache_key`, `safety_identifier`
 * (64 characters at most), `user`, `store` (a boolean: nothing is stored), `service_tier`
 * (auto, default, flex, scale, priority), `verbosity` (low, medium, high) and `prediction`
 * (predicted output: {"type": "content", "content": text or text parts}; a hint that only
 * changes latency upstream, unused here) are accepted when well-formed. Refused with a 400
 * naming the field, because cinfer cannot do what they ask: audio output (`audio`, or
 * "audio" in `modalities`), `web_search_options`, and the deprecated `functions` /
 * `function_call` (their replies have another shape; tools / tool_choice are supported).
 * Pure; any thread.
 */
#ifndef CINFER_API_OPENAI_FIELDS_H
#define CINFER_API_OPENAI_FIELDS_H

#include <jansson.h>

#include "api/oai_req.h"

/* metadata (NULL or JSON null: fine). 0, or -1 with a 400 in err (param "metadata"). */
int oai_check_metadata(json_t *md, struct api_error *err);

/* The fields above of a chat completions body o. 0, or -1 with a 400 in err. */
int oai_check_chat_fields(json_t *o, struct api_error *err);
/* Of a completions body: `user` (a string). 0, or -1 with a 400 in err. */
int oai_check_completion_fields(json_t *o, struct api_error *err);

#endif
