/* serve_testctl.c — test-only controls of `cinfer serve`, so that tests never race a clock.
 *
 * Installed only when the environment has CINFER_TEST_CONTROLS=1 (a warning says so at
 * start); otherwise these paths answer 404 like any unknown path. Routes:
 *   POST /debug/advance-clock {"seconds": S}  moves the Responses store's clock S > 0
 *        seconds ahead (entries whose TTL has then passed are gone); answers
 *        {"advanced_s": S}. 400 on a bad body.
 * Documented in docs/testing.md. Loop thread only, like the store.
 */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "server/serve.h"
#include "util/log.h"
#include "util/jsonfmt.h"

static void h_advance(struct http_req *r, void *ud)
{
    (void)ud;
    json_error_t je;
    json_t *b = json_loads(http_req_body(r, NULL), 0, &je);
    json_t *v = json_object_get(b, "seconds");
    double s = json_is_number(v) ? json_number_value(v) : -1;
    json_decref(b);
    if (!(s > 0) || !isfinite(s)) {
        http_reply_error(r, 400, "body must be {\"seconds\": S} with S > 0");
        return;
    }
    store_advance_clock(s);
    json_t *o = json_pack("{s:f}", "advanced_s", s);
    serve_reply_json(r, 200, o);
}

int serve_testctl_install(struct serve *sv)
{
    const char *e = getenv("CINFER_TEST_CONTROLS");
    if (!e || strcmp(e, "1"))
        return 0;
    log_warn("CINFER_TEST_CONTROLS=1: test-only route POST /debug/advance-clock is on");
    return http_route(sv->http, "POST", "/debug/advance-clock", 0, h_advance, sv) ? -1 : 0;
}
