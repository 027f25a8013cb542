/* serve_info.c — the server-description probes routers and gateways call:
 *
 * GET /server_info, /get_server_info, /model_info, /get_model_info — SGLang's probes, which
 *   sglang-router's gateway reads for the model path, context length and parallel sizes;
 *   /server_info also carries vLLM's `vllm_config` keys (model_config.model,
 *   cache_config.block_size), which vllm-router reads with ?config_format=json.
 * Loop thread only; nothing runs on the model.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "model/model.h"
#include "server/serve.h"
#include "util/jsonfmt.h"
#include "util/version.h"

static json_t *model_info(const struct serve *sv)
{
    return json_pack("{s:s, s:s, s:s, s:b, s:s, s:i, s:b, s:b, s:n, s:s}", "model_path",
                     sv->o.model, "tokenizer_path", sv->o.model, "served_model_name",
                     sv->model_id, "is_generation", 1, "model_type", sv->m->arch_name,
                     "context_length", engine_config_of(sv->eng)->n_ctx,
                     "has_image_understanding", 0, "has_audio_understanding", 0,
                     "preferred_sampling_params", "weight_version", "default");
}

static void h_model_info(struct http_req *r, void *ud)
{
    struct serve *sv = ud;
    sv->met.requests[EP_OTHER]++;
    serve_reply_json(r, 200, model_info(sv));
}

static void h_server_info(struct http_req *r, void *ud)
{
    struct serve *sv = ud;
    sv->met.requests[EP_OTHER]++;
    const struct engine_config *c = engine_config_of(sv->eng);
    json_t *o = model_info(sv);
    json_t *more = json_pack("{s:s, s:i, s:i, s:i, s:I, s:i, s:i, s:s, s:[]}", "version",
                             CINFER_VERSION, "tp_size", 1, "pp_size", 1, "dp_size", 1,
                             "max_total_num_tokens", (json_int_t)c->n_blocks * c->block_size,
                             "max_running_requests", sv->o.batch, "page_size", c->block_size,
                             "backend", sv->o.backend ? sv->o.backend : "cpu",
                             "internal_states");
    /* vLLM's /server_info?config_format=json keys, which vllm-router reads for a worker's
     * model identity and KV block size */
    json_t *vc = json_pack("{s:{s:s, s:s, s:i}, s:{s:i, s:b}}", "model_config", "model",
                           sv->model_id, "served_model_name", sv->model_id, "max_model_len",
                           c->n_ctx, "cache_config", "block_size", c->block_size,
                           "enable_prefix_caching", 1);
    if (o && more)
        json_object_update(o, more);
    if (o && vc)
        json_object_set(o, "vllm_config", vc);
    json_decref(vc);
    json_decref(more);
    serve_reply_json(r, 200, o);
}

int serve_info_install(struct serve *sv)
{
    struct http_server *h = sv->http;
    int rc = http_route(h, "GET", "/server_info", 0, h_server_info, sv);
    rc |= http_route(h, "GET", "/get_server_info", 0, h_server_info, sv);
    rc |= http_route(h, "GET", "/model_info", 0, h_model_info, sv);
    rc |= http_route(h, "GET", "/get_model_info", 0, h_model_info, sv);
    return rc ? -1 : 0;
}
