/* test_toolcall_native.c — tc_call_native (toolcall.h): a call in the template family's own
 * markup is native (its sampled text may be replayed in the next prompt); one the parser
 * recovered from a ```json fence or a bare JSON object is not (the template re-renders it). */
#include "harness.h"

#include "api/toolcall.h"

static void noop(const struct tc_event *ev, void *ud)
{
    (void)ev;
    (void)ud;
}

static int native_of(enum tc_family f, const char *text, int *n_calls)
{
    struct tc_parser *p = NULL;
    CHECK(tc_new(&p, f, NULL, NULL) == 0);
    if (!p)
        return -1;
    CHECK(tc_push(p, text, strlen(text), noop, NULL) == 0);
    CHECK(tc_flush(p, noop, NULL) == 0);
    *n_calls = tc_call_count(p);
    int nat = *n_calls > 0 ? tc_call_native(p, 0) : -1;
    tc_free(p);
    return nat;
}

static void test_native(void)
{
    int n = 0;
    const char *tag = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                      "\"Paris\"}}\n</tool_call>";
    const char *fence = "```json\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                        "\"Paris\"}}\n```";
    CHECK_EQ_INT(native_of(TC_GENERIC, tag, &n), 1);
    CHECK_EQ_INT(n, 1);
    CHECK_EQ_INT(native_of(TC_GENERIC, fence, &n), 0);
    CHECK_EQ_INT(n, 1);
    CHECK_EQ_INT(native_of(TC_GEMMA, fence, &n), 1); /* Gemma's templates teach the fence */
    CHECK_EQ_INT(n, 1);
}

int main(void)
{
    RUN(test_native);
    return harness_done();
}
