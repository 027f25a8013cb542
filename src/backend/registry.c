/* registry.c — maps a backend name to its constructor. */
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu.h"

struct be *be_new(const char *name, const struct be_config *cfg, struct cerr *e)
{
    struct be_config def = {0};
    if (!cfg)
        cfg = &def;
    if (!name || strcmp(name, "cpu") == 0)
        return be_cpu_new(cfg, e);
    cerr_set(e, CERR_INVALID, "unknown backend '%s' (this build has: cpu)", name);
    return NULL;
}
