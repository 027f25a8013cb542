/* dtype.h — element/block types of weights and activations, and their sizes.
 *
 * The numeric values equal the GGML type ids used in GGUF files (a format fact), so the
 * GGUF reader maps a tensor's type by validation, not by table. Quantized types are stored
 * in blocks of dtype_block_elems() elements taking dtype_block_bytes() bytes.
 */
#ifndef CINFER_BACKEND_DTYPE_H
#define CINFER_BACKEND_DTYPE_H

#include <stddef.h>
#include <stdint.h>

enum dtype {
    DT_F32 = 0,
    DT_F16 = 1,
    DT_Q4_0 = 2,
    DT_Q4_1 = 3,
    DT_Q5_0 = 6,
    DT_Q5_1 = 7,
    DT_Q8_0 = 8,
    DT_Q8_1 = 9,
    DT_Q2_K = 10,
    DT_Q3_K = 11,
    DT_Q4_K = 12,
    DT_Q5_K = 13,
    DT_Q6_K = 14,
    DT_Q8_K = 15,
    DT_I8 = 24,
    DT_I16 = 25,
    DT_I32 = 26,
    DT_I64 = 27,
    DT_F64 = 28,
    DT_BF16 = 30,
    DT_COUNT = 31,
};

/* Elements per block (1 for plain types); 0 when the id is not a type cinfer knows. */
int dtype_block_elems(int dt);
/* Bytes per block; 0 when unknown. */
size_t dtype_block_bytes(int dt);
/* "F32", "Q4_K", ...; "?" for unknown ids. */
const char *dtype_name(int dt);
/* 1 if weights of this type can be used by the matmul/get_rows ops. */
int dtype_is_weight_type(int dt);
/* Bytes of a row of n elements; returns 0 when n is not a multiple of the block size
 * or the type is unknown. */
size_t dtype_row_bytes(int dt, int64_t n);

#endif
