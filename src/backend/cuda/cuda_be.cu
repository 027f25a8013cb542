/* cuda_be.cu — the CUDA backend object: vtable, device memory, weights, errors, sync.
 *
 * One stream per backend; every op is queued on it. upload() is a stream-ordered copy
 * from host memory (the source may be reused at return), download() waits for it. A
 * failed cudaMalloc returns NULL (the caller fails that request); a kernel or cuBLAS
 * failure is latched and returned, then cleared, by the next sync(). Weights handed to
 * weight_prepare() in host memory are copied to device memory owned by the backend.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_int.cuh"
#include "backend/cuda/cuda_lora.cuh"

extern "C" {
#include "backend/cpu/quant.h"
#include "util/log.h"
}

void cu_latch(struct cu_be *cb, const char *what, cudaError_t rc)
{
    if (cb->err)
        return;
    cb->err = rc == cudaErrorMemoryAllocation ? CERR_NOMEM : CERR_IO;
    snprintf(cb->err_msg, sizeof cb->err_msg, "cuda: %s failed: %s (%s)", what,
             cudaGetErrorString(rc), cudaGetErrorName(rc));
}

void cu_latch_blas(struct cu_be *cb, const char *what, cublasStatus_t rc)
{
    if (cb->err)
        return;
    cb->err = rc == CUBLAS_STATUS_ALLOC_FAILED ? CERR_NOMEM : CERR_IO;
    snprintf(cb->err_msg, sizeof cb->err_msg, "cuda: %s failed: cuBLAS status %d", what, (int)rc);
}

static void note_used(struct cu_be *cb)
{
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) == cudaSuccess && tot - fr > cb->peak_used)
        cb->peak_used = tot - fr;
}

void *cu_scratch(struct cu_be *cb, int i, size_t n)
{
    if (n <= cb->scratch_cap[i])
        return cb->scratch[i];
    size_t cap = n + n / 4 + (1u << 20);
    if (cb->scratch[i]) {
        cudaFree(cb->scratch[i]); /* synchronizes: queued users of the old buffer are done */
        cb->scratch[i] = NULL;
        cb->scratch_cap[i] = 0;
    }
    cudaError_t rc = cudaMalloc(&cb->scratch[i], cap);
    if (rc != cudaSuccess) {
        cudaGetLastError();
        cb->scratch[i] = NULL;
        cu_latch(cb, "scratch allocation", rc);
        return NULL;
    }
    cb->scratch_cap[i] = cap;
    cb->scratch_epoch++;
    note_used(cb);
    return cb->scratch[i];
}

/* ---- memory ---- */

static void *cu_alloc(struct be *b, size_t bytes)
{
    struct cu_be *cb = cu_be(b);
    void *p = NULL;
    size_t n = (bytes + 255) & ~(size_t)255;
    if (n < bytes)
        return NULL;
    if (cudaMalloc(&p, n ? n : 256) != cudaSuccess) {
        cudaGetLastError(); /* not sticky: the caller reports it */
        return NULL;
    }
    note_used(cb);
    return p;
}

static void cu_free(struct be *b, void *p)
{
    struct cu_be *cb = cu_be(b);
    if (!p)
        return;
    cu_flush(cb);
    for (int i = 0; i < cb->n_weights; i++)
        if (cb->weights[i] == p) {
            cb->weights[i] = cb->weights[--cb->n_weights];
            break;
        }
    cudaFree(p);
}

static int cu_upload(struct be *b, void *dst, const void *src, size_t n, struct cerr *e)
{
    struct cu_be *cb = cu_be(b);
    if (!n)
        return 0;
    cu_flush(cb);
    cb->last_kernel = 0;
    cudaError_t rc = cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, cb->stream);
    if (rc != cudaSuccess) {
        cudaGetLastError();
        return cerr_set(e, CERR_IO, "cuda: upload of %zu bytes failed: %s", n,
                        cudaGetErrorString(rc));
    }
    return 0;
}

static void *cu_host_alloc(struct be *b, size_t n)
{
    (void)b;
    void *p = NULL;
    if (cudaMallocHost(&p, n ? n : 1) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    return p;
}

static void cu_host_free(struct be *b, void *p)
{
    (void)b;
    if (p)
        cudaFreeHost(p);
}

static int cu_download(struct be *b, void *dst, const void *src, size_t n, struct cerr *e)
{
    struct cu_be *cb = cu_be(b);
    if (!n)
        return 0;
    cu_flush(cb);
    cb->last_kernel = 0;
    cudaError_t rc = cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, cb->stream);
    if (rc == cudaSuccess)
        rc = cudaStreamSynchronize(cb->stream);
    if (rc != cudaSuccess) {
        cudaGetLastError();
        return cerr_set(e, CERR_IO, "cuda: download of %zu bytes failed: %s", n,
                        cudaGetErrorString(rc));
    }
    return 0;
}

/* be_ops.exact_rows: steps of up to inv_rows rows are row invariant for every op (see
 * CU_INV_DEFAULT); with inv_rows 0, the skinny kernel serves 16-bit weights up to sg_max_n
 * rows, the matvec kernels the other types up to 8 (cuda_mm.cu); beyond, cuBLAS. */
static int cu_exact_rows(struct be *b, int dtype)
{
    const struct cu_be *cb = cu_be(b);
    if (cb->inv_rows > 0)
        return cb->inv_rows;
    if (dtype == DT_BF16 || dtype == DT_F16)
        return cb->sg_max_n > 0 ? cb->sg_max_n : 1;
    return 8;
}

static int cu_fetch_start(struct be *b, int slot, const void *src, size_t n, struct cerr *e)
{
    struct cu_be *cb = cu_be(b);
    if (slot < 0 || slot > 1 || n > BE_FETCH_MAX)
        return cerr_set(e, CERR_INVALID, "cuda: fetch of %zu bytes into slot %d", n, slot);
    if (!cb->fetch_buf[slot]) { /* pinned, so the copy is asynchronous */
        cudaError_t rc = cudaMallocHost(&cb->fetch_buf[slot], BE_FETCH_MAX);
        if (rc == cudaSuccess &&
            (rc = cudaEventCreateWithFlags(&cb->fetch_ev[slot], cudaEventDisableTiming)) !=
                cudaSuccess) {
            cudaFreeHost(cb->fetch_buf[slot]);
            cb->fetch_buf[slot] = NULL;
        }
        if (rc != cudaSuccess) {
            cudaGetLastError();
            cb->fetch_buf[slot] = NULL;
            return cerr_set(e, CERR_NOMEM, "cuda: cannot allocate pinned host memory: %s",
                            cudaGetErrorString(rc));
        }
    }
    cu_flush(cb);
    cb->last_kernel = 0;
    cudaError_t rc = n ? cudaMemcpyAsync(cb->fetch_buf[slot], src, n, cudaMemcpyDeviceToHost,
                                         cb->stream)
                       : cudaSuccess;
    if (rc == cudaSuccess)
        rc = cudaEventRecord(cb->fetch_ev[slot], cb->stream);
    if (rc != cudaSuccess) {
        cudaGetLastError();
        return cerr_set(e, CERR_IO, "cuda: fetch of %zu bytes failed: %s", n,
                        cudaGetErrorString(rc));
    }
    return 0;
}

static int cu_fetch_wait(struct be *b, int slot, void *dst, size_t n, struct cerr *e)
{
    struct cu_be *cb = cu_be(b);
    if (slot < 0 || slot > 1 || n > BE_FETCH_MAX || !cb->fetch_buf[slot])
        return cerr_set(e, CERR_INVALID, "cuda: no fetch of %zu bytes in slot %d", n, slot);
    cudaError_t rc = cudaEventSynchronize(cb->fetch_ev[slot]);
    if (rc != cudaSuccess)
        cu_latch(cb, "a queued kernel", rc);
    if (cb->err) {
        int code = cb->err;
        cerr_set(e, code, "%s", cb->err_msg);
        cb->err = 0;
        cudaGetLastError();
        return code;
    }
    memcpy(dst, cb->fetch_buf[slot], n);
    return 0;
}

static int cu_sync(struct be *b, struct cerr *e)
{
    struct cu_be *cb = cu_be(b);
    cu_flush(cb);
    cudaError_t rc = cudaStreamSynchronize(cb->stream);
    if (rc != cudaSuccess)
        cu_latch(cb, "a queued kernel", rc);
    if (!cb->err)
        return 0;
    int code = cb->err;
    cerr_set(e, code, "%s", cb->err_msg);
    cb->err = 0;
    cudaGetLastError();
    return code;
}

static int native_type(int dt)
{
    return dt == DT_F32 || dt == DT_F16 || dt == DT_BF16 || dt == DT_Q8_0 || dt == DT_Q4_K ||
           dt == DT_Q6_K;
}

static int track_weight(struct cu_be *cb, void *p)
{
    if (cb->n_weights == cb->cap_weights) {
        int cap = cb->cap_weights ? 2 * cb->cap_weights : 64;
        void **nw = (void **)realloc(cb->weights, (size_t)cap * sizeof *nw);
        if (!nw)
            return -1;
        cb->weights = nw;
        cb->cap_weights = cap;
    }
    cb->weights[cb->n_weights++] = p;
    return 0;
}

/* Device copy of n host bytes, owned by the backend. */
static void *weight_copy(struct cu_be *cb, const void *host, size_t n, const char *nm,
                         struct cerr *e)
{
    void *d = cu_alloc(&cb->base, n);
    if (!d) {
        cerr_set(e, CERR_NOMEM, "cuda: out of device memory for weight %s (%zu bytes)", nm, n);
        return NULL;
    }
    cb->last_kernel = 0;
    if (cudaMemcpy(d, host, n, cudaMemcpyHostToDevice) != cudaSuccess || track_weight(cb, d)) {
        cudaGetLastError();
        cudaFree(d);
        cerr_set(e, CERR_IO, "cuda: cannot copy weight %s to the device", nm);
        return NULL;
    }
    return d;
}

static int cu_weight_prepare(struct be *b, struct be_tensor *t, struct cerr *e)
{
    struct cu_be *cb = cu_be(b);
    const char *nm = t->name ? t->name : "tensor";
    cu_flush(cb);
    if (!dtype_is_weight_type(t->dtype))
        return cerr_set(e, CERR_UNSUPPORTED, "%s: dtype %s is not supported for weights", nm,
                        dtype_name(t->dtype));
    if (t->ne[0] <= 0 || t->ne[1] <= 0 || t->ne[0] > INT32_MAX || t->ne[1] > INT32_MAX)
        return cerr_set(e, CERR_FORMAT, "%s: bad shape [%lld, %lld]", nm, (long long)t->ne[0],
                        (long long)t->ne[1]);
    size_t rb = dtype_row_bytes(t->dtype, t->ne[0]), need = rb * (size_t)t->ne[1];
    if (rb == 0)
        return cerr_set(e, CERR_FORMAT, "%s: row length %lld is not a multiple of the %s block",
                        nm, (long long)t->ne[0], dtype_name(t->dtype));
    if (!t->data || t->nbytes < need)
        return cerr_set(e, CERR_FORMAT, "%s: %zu bytes of data, need %zu", nm, t->nbytes, need);
    cudaPointerAttributes at;
    int on_dev = cudaPointerGetAttributes(&at, t->data) == cudaSuccess &&
                 (at.type == cudaMemoryTypeDevice || at.type == cudaMemoryTypeManaged);
    cudaGetLastError();
    if (native_type(t->dtype)) {
        if (on_dev)
            return 0;
        void *d = weight_copy(cb, t->data, need, nm, e);
        if (!d)
            return e ? e->code : CERR_NOMEM;
        t->data = d;
        return 0;
    }
    /* other quantized types: expanded to F32 rows once, on the host */
    const void *src = t->data;
    void *hcopy = NULL;
    if (on_dev) {
        hcopy = malloc(need);
        if (!hcopy || cudaMemcpy(hcopy, t->data, need, cudaMemcpyDeviceToHost) != cudaSuccess) {
            free(hcopy);
            return cerr_set(e, CERR_IO, "%s: cannot read the weight back from the device", nm);
        }
        src = hcopy;
    }
    size_t fb = (size_t)t->ne[0] * t->ne[1] * sizeof(float);
    float *f = (float *)malloc(fb);
    if (!f) {
        free(hcopy);
        return cerr_set(e, CERR_NOMEM, "%s: out of memory expanding %s to F32", nm,
                        dtype_name(t->dtype));
    }
    for (int64_t r = 0; r < t->ne[1]; r++)
        quant_dequant_row(t->dtype, (const char *)src + rb * (size_t)r, f + r * t->ne[0],
                          t->ne[0]);
    free(hcopy);
    void *d = weight_copy(cb, f, fb, nm, e);
    free(f);
    if (!d)
        return e ? e->code : CERR_NOMEM;
    log_debug("cuda: %s: %s weights expanded to F32 (no native kernel)", nm,
              dtype_name(t->dtype));
    t->dtype = DT_F32;
    t->data = d;
    t->nbytes = fb;
    return 0;
}

static void cu_destroy(struct be *b)
{
    struct cu_be *cb = cu_be(b);
    cu_flush(cb);
    cudaStreamSynchronize(cb->stream);
    cu_graphs_free(cb);
    for (int i = 0; i < cb->n_weights; i++)
        cudaFree(cb->weights[i]);
    free(cb->weights);
    for (int i = 0; i < CU_N_SCRATCH; i++)
        if (cb->scratch[i])
            cudaFree(cb->scratch[i]);
    cublasDestroy(cb->blas);
    if (cb->blas_ws)
        cudaFree(cb->blas_ws);
    if (cb->ss_buf)
        cudaFree(cb->ss_buf);
    if (cb->am_buf)
        cudaFree(cb->am_buf);
    for (int i = 0; i < 2; i++)
        if (cb->fetch_buf[i]) {
            cudaFreeHost(cb->fetch_buf[i]);
            cudaEventDestroy(cb->fetch_ev[i]);
        }
    cudaStreamDestroy(cb->stream);
    free(cb);
}

static int cu_mem_info(struct be *b, size_t *fr, size_t *tot, struct cerr *e)
{
    /* the calling thread may not have selected this backend's device (--device N) */
    cudaError_t rc = cudaSetDevice(((struct cu_be *)b)->device);
    if (rc == cudaSuccess)
        rc = cudaMemGetInfo(fr, tot);
    if (rc != cudaSuccess)
        return cerr_set(e, CERR_IO, "cuda: cudaMemGetInfo failed: %s", cudaGetErrorString(rc));
    return 0;
}

/* cudaSetDevice is per thread: the engine thread selects the backend's device. */
static int cu_bind_thread(struct be *b, struct cerr *e)
{
    struct cu_be *cb = (struct cu_be *)b;
    cudaError_t rc = cudaSetDevice(cb->device);
    if (rc != cudaSuccess)
        return cerr_set(e, CERR_IO, "cuda: cudaSetDevice(%d) failed: %s", cb->device,
                        cudaGetErrorString(rc));
    return 0;
}

static const struct be_ops g_cuda_ops = {
    .name = "cuda",
    .exact_rows = cu_exact_rows,
    .destroy = cu_destroy,
    .alloc = cu_alloc,
    .free = cu_free,
    .upload = cu_upload,
    .download = cu_download,
    .host_alloc = cu_host_alloc,
    .host_free = cu_host_free,
    .weight_prepare = cu_weight_prepare,
    .sync = cu_sync,
    .get_rows = cq_get_rows,
    .matmul = cq_matmul,
    .rmsnorm = cq_rmsnorm,
    .rope = cq_rope,
    .kv_store = cq_kv_store,
    .attention = cq_attention,
    .act_mul = cq_act_mul,
    .add = cq_add,
    .add_row = cq_add_row,
    .scale = cq_scale,
    .softcap = cq_softcap,
    .mem_info = cu_mem_info,
    .matmul_fused = cq_matmul_fused,
    .rope_kv_store = cq_rope_kv_store,
    .argmax = cq_argmax,
    .topcand = cq_topcand,
    .sample = cq_sample,
    .fetch_start = cu_fetch_start,
    .fetch_wait = cu_fetch_wait,
    .bind_thread = cu_bind_thread,
    .lora = cq_lora,
    .lora_norm = cq_lora_norm,
};
/* The same without lora_norm (CINFER_CUDA_LORA=v1 or CINFER_CUDA_LORA_NORM=0: the forward
 * norms into a buffer first), filled at the first backend creation. */
static struct be_ops g_cuda_ops_nonorm;

extern "C" struct be *be_cuda_new(const struct be_config *cfg, struct cerr *e)
{
    int dev = cfg ? cfg->device : 0, n = 0;
    cudaError_t rc = cudaGetDeviceCount(&n);
    if (rc != cudaSuccess || n == 0) {
        cudaGetLastError();
        cerr_set(e, CERR_UNSUPPORTED, "cuda: no usable GPU (%s)",
                 rc != cudaSuccess ? cudaGetErrorString(rc) : "no device found");
        return NULL;
    }
    if (dev < 0 || dev >= n) {
        cerr_set(e, CERR_INVALID, "cuda: --device %d is out of range (this machine has %d GPU%s)",
                 dev, n, n == 1 ? "" : "s");
        return NULL;
    }
    cudaDeviceProp prop;
    if ((rc = cudaSetDevice(dev)) != cudaSuccess ||
        (rc = cudaGetDeviceProperties(&prop, dev)) != cudaSuccess) {
        cudaGetLastError();
        cerr_set(e, CERR_IO, "cuda: cannot open GPU %d: %s", dev, cudaGetErrorString(rc));
        return NULL;
    }
    if (prop.major < 8) {
        cerr_set(e, CERR_UNSUPPORTED, "cuda: GPU %d (%s) has compute capability %d.%d; cinfer "
                 "needs 8.0 or newer", dev, prop.name, prop.major, prop.minor);
        return NULL;
    }
    struct cu_be *cb = (struct cu_be *)calloc(1, sizeof *cb);
    if (!cb) {
        cerr_set(e, CERR_NOMEM, "out of memory creating the CUDA backend");
        return NULL;
    }
    cb->base.ops = &g_cuda_ops;
    if (!cu_lora_norm_on()) {
        g_cuda_ops_nonorm = g_cuda_ops;
        g_cuda_ops_nonorm.lora_norm = NULL;
        cb->base.ops = &g_cuda_ops_nonorm;
    }
    cb->device = dev;
    cb->n_sm = prop.multiProcessorCount;
    cb->smem_optin = prop.sharedMemPerBlockOptin;
    if ((rc = cudaStreamCreateWithFlags(&cb->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        cudaGetLastError();
        cerr_set(e, CERR_IO, "cuda: cannot create a stream on GPU %d: %s", dev,
                 cudaGetErrorString(rc));
        free(cb);
        return NULL;
    }
    cublasStatus_t bs = cublasCreate(&cb->blas);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        cerr_set(e, CERR_IO, "cuda: cuBLAS initialisation failed (status %d)", (int)bs);
        cudaStreamDestroy(cb->stream);
        free(cb);
        return NULL;
    }
    cublasSetStream(cb->blas, cb->stream);
    cublasSetMathMode(cb->blas, CUBLAS_DEFAULT_MATH); /* F32 GEMMs stay F32 (no TF32) */
    /* a fixed workspace: GEMMs inside a captured graph must not allocate */
    size_t wsz = 64u << 20;
    if (cudaMalloc(&cb->blas_ws, wsz) == cudaSuccess)
        cublasSetWorkspace(cb->blas, cb->blas_ws, wsz);
    else
        cudaGetLastError(), cb->blas_ws = NULL;
    const char *pe = getenv("CINFER_CUDA_PRECISE");
    cb->precise = pe && !strcmp(pe, "1");
    const char *pd = getenv("CINFER_CUDA_PDL");
    cb->pdl = !(pd && !strcmp(pd, "0"));
    const char *fr = getenv("CINFER_CUDA_FUSE_ROPE");
    cb->fuse_rope = !(fr && !strcmp(fr, "0"));
    const char *sw = getenv("CINFER_CUDA_SG_WARPS_QKV");
    cb->sg_warps_qkv = sw && (!strcmp(sw, "8") || !strcmp(sw, "16")) ? atoi(sw) : 0;
    const char *sg = getenv("CINFER_CUDA_SG_WARPS_GLU");
    cb->sg_warps_glu = sg && (!strcmp(sg, "8") || !strcmp(sg, "16")) ? atoi(sg) : 0;
    cu_mmf_init();
    const char *wv = getenv("CINFER_CUDA_SG_WAVE");
    cb->sg_wave = wv && *wv >= '0' && *wv <= '3' && !wv[1] ? *wv - '0' : 1;
    const char *rp = getenv("CINFER_CUDA_REPEAT");
    static const char *const rep_names[] = {"qkv", "out", "glu", "down", "cls", "norm", "attn",
                                            "merge"};
    cb->repeat = 0;
    for (int i = 0; rp && i < 8; i++)
        if (strstr(rp, rep_names[i]))
            cb->repeat |= 1 << i;
    const char *fn = getenv("CINFER_CUDA_FUSE_NORM");
    cb->fuse_norm = fn && (!strcmp(fn, "0") || !strcmp(fn, "2")) ? atoi(fn) : 1;
    const char *iv = getenv("CINFER_CUDA_INVARIANT_ROWS");
    cb->inv_rows = CU_INV_DEFAULT;
    if (iv && !strcmp(iv, "all"))
        cb->inv_rows = CU_INV_ALL;
    else if (iv && *iv && atoi(iv) >= 0)
        cb->inv_rows = atoi(iv) > 65536 ? 65536 : atoi(iv);
    if (cb->inv_rows > 0 && cb->inv_rows < SG_MAX_N)
        cb->inv_rows = SG_MAX_N; /* the skinny kernel's own limit already holds */
    /* the chained norm's buffers hold ss_rows rows: a chain over more rows would change a
     * row's arithmetic with the row count, so with every step invariant it is off */
    cb->ss_rows = cb->inv_rows > SG_MAX_N ? cb->inv_rows : SG_MAX_N;
    if (cb->inv_rows == CU_INV_ALL)
        cb->fuse_norm = 0, cb->ss_rows = SG_MAX_N;
    /* the tile sums of squares, then the output times the next norm (16 rows a tile) */
    if (cudaMalloc((void **)&cb->ss_buf,
                   (size_t)cb->ss_rows * CU_SS_TILES * (1 + 16) * sizeof(float)) != cudaSuccess)
        cudaGetLastError(), cb->ss_buf = NULL; /* the norms then run on their own */
    cb->xg_buf = cb->ss_buf ? cb->ss_buf + (size_t)cb->ss_rows * CU_SS_TILES : NULL;
    const char *as = getenv("CINFER_CUDA_ARGMAX_SPLIT");
    cb->am_split = !(as && !strcmp(as, "0"));
    const char *ts = getenv("CINFER_CUDA_TOPCAND_SPLIT");
    cb->tc_split = !(ts && !strcmp(ts, "0"));
    const char *sp = getenv("CINFER_CUDA_SKINNY_PRECISE");
    cb->sg_precise = sp && !strcmp(sp, "1");
    const char *sk = getenv("CINFER_CUDA_SKINNY_MAX");
    cb->sg_max_n = sk && *sk ? atoi(sk) : SG_MAX_N;
    if (cb->sg_max_n < 0 || cb->sg_max_n > SG_MAX_N)
        cb->sg_max_n = SG_MAX_N;
    if (cu_graphs_init(cb, cfg ? cfg->graphs : 0)) {
        cerr_set(e, CERR_NOMEM, "out of memory creating the CUDA backend");
        if (cb->blas_ws)
            cudaFree(cb->blas_ws);
        if (cb->ss_buf)
            cudaFree(cb->ss_buf);
        cublasDestroy(cb->blas);
        cudaStreamDestroy(cb->stream);
        free(cb);
        return NULL;
    }
    if ((rc = cu_attn_init(cb)) != cudaSuccess) {
        cerr_set(e, CERR_IO, "cuda: kernel setup failed: %s", cudaGetErrorString(rc));
        cu_graphs_free(cb);
        if (cb->blas_ws)
            cudaFree(cb->blas_ws);
        if (cb->ss_buf)
            cudaFree(cb->ss_buf);
        cublasDestroy(cb->blas);
        cudaStreamDestroy(cb->stream);
        free(cb);
        return NULL;
    }
    note_used(cb);
    log_debug("cuda backend: GPU %d %s, %d SMs, cc %d.%d, graphs %s, GEMM inputs %s", dev,
              prop.name, cb->n_sm, prop.major, prop.minor, cb->graphs ? "on" : "off",
              cb->precise ? "split hi+lo" : "16-bit");
    return &cb->base;
}

extern "C" size_t be_cuda_mem_used(struct be *b, size_t *peak)
{
    struct cu_be *cb = cu_be(b);
    size_t fr = 0, tot = 0;
    cudaMemGetInfo(&fr, &tot);
    note_used(cb);
    if (peak)
        *peak = cb->peak_used;
    return tot - fr;
}

extern "C" void be_cuda_describe(struct be *b, char *buf, size_t n)
{
    struct cu_be *cb = cu_be(b);
    cudaDeviceProp prop;
    int drv = 0, rt = 0;
    cudaGetDeviceProperties(&prop, cb->device);
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    snprintf(buf, n, "%s (cc %d.%d, %d SMs), driver API %d.%d, runtime %d.%d", prop.name,
             prop.major, prop.minor, prop.multiProcessorCount, drv / 1000, drv % 1000 / 10,
             rt / 1000, rt % 1000 / 10);
}

extern "C" int64_t be_cuda_chained(struct be *b) { return cu_be(b)->n_chained; }

extern "C" void be_cuda_kvq_fused(struct be *b, int64_t *merges, int64_t *stores)
{
    *merges = cu_be(b)->n_kvq_fmerge;
    *stores = cu_be(b)->n_kvq_fstore;
}

extern "C" int64_t be_cuda_kvq_tc(struct be *b) { return cu_be(b)->n_kvq_tc; }

extern "C" int64_t be_cuda_kvq_one(struct be *b) { return cu_be(b)->n_kvq_one; }
extern "C" int64_t be_cuda_kvq_mma(struct be *b) { return cu_be(b)->n_kvq_mma; }
extern "C" int64_t be_cuda_kvq_bulk(struct be *b) { return cu_be(b)->n_kvq_bulk; }

extern "C" int be_cuda_replay_last(struct be *b, int k, int reps, double *us)
{
    return cu_graph_replay_last(cu_be(b), k, reps, us);
}

extern "C" void be_cuda_graph_counts(struct be *b, int64_t *replays, int64_t *captures)
{
    cu_graph_stats(cu_be(b), replays, captures);
}
