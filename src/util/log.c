/* log.c — see log.h. */
#include "util/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static enum log_level g_level = LOG_WARN;

void log_set_level(enum log_level lvl) { g_level = lvl; }
enum log_level log_get_level(void) { return g_level; }

void log_init_from_env(void)
{
    const char *v = getenv("CINFER_LOG");
    if (!v)
        return;
    static const char *names[] = {"debug", "info", "warn", "error", "off"};
    for (int i = 0; i < 5; i++)
        if (strcmp(v, names[i]) == 0)
            g_level = (enum log_level)i;
}

void log_msg(enum log_level lvl, const char *fmt, ...)
{
    if (lvl < g_level)
        return;
    static const char *tags[] = {"debug", "info", "warn", "error"};
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    (void)n;
    fprintf(stderr, "cinfer %s: %s\n", tags[lvl < 4 ? lvl : 3], line);
}
