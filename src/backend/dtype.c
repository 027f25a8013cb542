/* dtype.c — see dtype.h. Block sizes are the GGML quantization formats. */
#include "backend/dtype.h"

struct dt_info {
    const char *name;
    int elems;
    size_t bytes;
    int weight;
};

static const struct dt_info g_dt[DT_COUNT] = {
    [DT_F32] = {"F32", 1, 4, 1},
    [DT_F16] = {"F16", 1, 2, 1},
    [DT_Q4_0] = {"Q4_0", 32, 18, 1},
    [DT_Q4_1] = {"Q4_1", 32, 20, 1},
    [DT_Q5_0] = {"Q5_0", 32, 22, 1},
    [DT_Q5_1] = {"Q5_1", 32, 24, 1},
    [DT_Q8_0] = {"Q8_0", 32, 34, 1},
    [DT_Q8_1] = {"Q8_1", 32, 36, 0},
    [DT_Q2_K] = {"Q2_K", 256, 84, 1},
    [DT_Q3_K] = {"Q3_K", 256, 110, 1},
    [DT_Q4_K] = {"Q4_K", 256, 144, 1},
    [DT_Q5_K] = {"Q5_K", 256, 176, 1},
    [DT_Q6_K] = {"Q6_K", 256, 210, 1},
    [DT_Q8_K] = {"Q8_K", 256, 292, 0},
    [DT_I8] = {"I8", 1, 1, 0},
    [DT_I16] = {"I16", 1, 2, 0},
    [DT_I32] = {"I32", 1, 4, 0},
    [DT_I64] = {"I64", 1, 8, 0},
    [DT_F64] = {"F64", 1, 8, 0},
    [DT_BF16] = {"BF16", 1, 2, 1},
};

static const struct dt_info *info(int dt)
{
    if (dt < 0 || dt >= DT_COUNT || !g_dt[dt].name)
        return NULL;
    return &g_dt[dt];
}

int dtype_block_elems(int dt) { return info(dt) ? info(dt)->elems : 0; }
size_t dtype_block_bytes(int dt) { return info(dt) ? info(dt)->bytes : 0; }
const char *dtype_name(int dt) { return info(dt) ? info(dt)->name : "?"; }
int dtype_is_weight_type(int dt) { return info(dt) ? info(dt)->weight : 0; }

size_t dtype_row_bytes(int dt, int64_t n)
{
    const struct dt_info *d = info(dt);
    if (!d || n < 0 || n % d->elems)
        return 0;
    return (size_t)(n / d->elems) * d->bytes;
}
