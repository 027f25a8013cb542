/* test_iso_metrics.c — the --isolate supervisor's engine label on the relayed /metrics
 * (iso_metrics_relabel, src/server/isolate/iso_int.h): every sample gets engine="ID", with
 * or without labels of its own; comments, blank lines and the line count stay; a body
 * without a final newline, an empty body and an empty label set are handled; the pool's
 * merge keeps one HELP/TYPE per family with every engine's samples under it. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#include "server/isolate/iso_int.h"

static void check(const char *in, const char *want)
{
    char *out = iso_metrics_relabel(in, strlen(in), "m1");
    CHECK(out != NULL);
    if (out)
        CHECK_STR(out, want);
    free(out);
}

static void test_samples(void)
{
    check("# HELP a x\n# TYPE a counter\na 1\n",
          "# HELP a x\n# TYPE a counter\na{engine=\"m1\"} 1\n");
    check("b{k=\"v\",z=\"1\"} 2.5\n", "b{engine=\"m1\",k=\"v\",z=\"1\"} 2.5\n");
    check("c{} 3\n", "c{engine=\"m1\"} 3\n");
    check("d 4", "d{engine=\"m1\"} 4"); /* no final newline */
    check("\n\ne 5\n\n", "\n\ne{engine=\"m1\"} 5\n\n");
    check("", "");
    check("f_total{le=\"+Inf\"} 7 1700000000\n",
          "f_total{engine=\"m1\",le=\"+Inf\"} 7 1700000000\n");
}

static void test_lines_kept(void)
{
    const char *in = "# c\nx 1\ny{a=\"b\"} 2\n#\nz 3\n";
    char *out = iso_metrics_relabel(in, strlen(in), "id");
    CHECK(out != NULL);
    int nl_in = 0, nl_out = 0;
    for (const char *p = in; *p; p++)
        nl_in += *p == '\n';
    for (const char *p = out; p && *p; p++)
        nl_out += *p == '\n';
    CHECK_EQ_INT(nl_in, nl_out);
    CHECK(out && strstr(out, "x{engine=\"id\"} 1\n") && strstr(out, "z{engine=\"id\"} 3\n"));
    free(out);
}

static void test_merge(void)
{
    char a[] = "# HELP x X\n# TYPE x counter\nx{engine=\"a\"} 1\n"
               "# HELP h H\n# TYPE h histogram\nh_bucket{engine=\"a\",le=\"1\"} 2\n"
               "h_count{engine=\"a\"} 2\n";
    char b[] = "# HELP x X\n# TYPE x counter\nx{engine=\"b\"} 5\n"
               "# HELP y Y\n# TYPE y gauge\ny{engine=\"b\"} 6\n"
               "# HELP h H\n# TYPE h histogram\nh_bucket{engine=\"b\",le=\"1\"} 3\n";
    char c[] = "# HELP sup S\n# TYPE sup gauge\nsup 1\n";
    char *t[] = {a, b, c};
    char *m = iso_metrics_merge(t, 3);
    CHECK(m != NULL);
    if (!m)
        return;
    CHECK_STR(m, "# HELP x X\n# TYPE x counter\nx{engine=\"a\"} 1\nx{engine=\"b\"} 5\n"
                 "# HELP h H\n# TYPE h histogram\nh_bucket{engine=\"a\",le=\"1\"} 2\n"
                 "h_count{engine=\"a\"} 2\nh_bucket{engine=\"b\",le=\"1\"} 3\n"
                 "# HELP y Y\n# TYPE y gauge\ny{engine=\"b\"} 6\n"
                 "# HELP sup S\n# TYPE sup gauge\nsup 1\n");
    free(m);
    char *none[] = {NULL};
    m = iso_metrics_merge(none, 1);
    CHECK(m && !*m);
    free(m);
}

int main(void)
{
    RUN(test_samples);
    RUN(test_lines_kept);
    RUN(test_merge);
    return harness_done();
}
