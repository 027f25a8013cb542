/* cuda_kvq_mma.cuh — the decode kernel of 8-bit affine K and V (groups of 32, head_dim 64 /
 * 128) on the tensor cores: both products of attention as mma.sync.m16n8k16 (f16 in, f32
 * accumulate), so a cached element costs about one instruction (a byte permute into an f16)
 * where k_kvq_sd's decode and multiply-adds cost about nine. Included by cuda_kvq_dec.cu
 * alone (its args, round copies, splits and merge kernel are k_kvq_sd's).
 *
 * Block: KM_NT = 128 threads (4 warps), one token, one KV head and HG (<= 4) of its query
 * heads over one split of the token's positions; rounds of KD_ROUND = 64 positions copied by
 * cp.async into shared memory as in k_kvq_sd; warp w owns positions 16 w .. 16 w + 15 of
 * every round and keeps its own online softmax (no barrier between its scores and V); the 4
 * warps' maxima, sums and outputs are merged in warp order at the end of the split. Lanes:
 * gid = lane / 4, tig = lane % 4 (the PTX ISA's fragment maps for m16n8k16 .f16).
 *
 * Exactness: every code c is an f16 exactly (the bits 0x64cc are 1024 + c). Each head's q is
 * scaled by 2^e (its largest |q| into [2^9, 2^10)) and split into f16 hi + lo (2^-22 of q);
 * the 8 columns of an mma are hi of heads 0..3 and lo of heads 0..3, so both halves cost
 * nothing extra. The probabilities times V's scale, times KM_SA = 64 (P <= 1 and an f16 scale
 * d <= 65504 * 2 / 255 keep them under 65504), are split the same way.
 *
 * Scores: an mma per 16 dims: A = K codes minus 128 (16 positions x 16 dims), B = q hi / lo
 * (16 dims x 8 columns); a group of 32 dims (2 mmas into a fresh C) is scaled by its d, and
 * (m + 128 d) times the group's sum of the scaled q is added (hi columns only), so
 *   2^e s = sum_g d_g C_g + (m_g + 128 d_g) qsum_g,  with x = m + d c.
 * Column pairs hi / lo are summed by one shuffle, the scores pass through shared memory into
 * the probability layout (lane: head gid % 4, positions 2 tig, 2 tig + 1, 2 tig + 8, + 9).
 * Values: an mma per 16 dims of a group: A = (1024 + V codes) (16 dims x 16 positions),
 * B = 64 p d hi / lo (16 positions x 8 columns), C the output (dims x columns), and
 *   o = C / 64 + sum_p p (m_p - 1024 d_p)  (per group; the second term in registers).
 * Results differ from k_kvq_sd's in the last bits (another order of the sums); like it they
 * depend only on the token (its splits), never on the batch.
 *
 * VL4 (k8v4: turbo's 4-bit Lloyd-Max values, rotated; groups of 32 as an f16 scale s and 16
 * bytes of codes, KM_LB = 18 bytes): the scores as above; the values' A operand is the
 * codebook entry of each code, 64 cb[c] (exact in f32: a power of two), split into f16 hi and
 * lo tables (hi + lo within ~2^-22 of it), so two mmas per 16 dims of a group, both with
 * B = p s (hi / lo columns; p s <= 65504, no overflow), and o = C / 64 (no offset term). A
 * lane reads, per group, the 2 bytes of dims 4 gid .. 4 gid + 3 of its 4 positions; the
 * codebook is symmetric (cb[15 - c] = -cb[c]), so a code is a sign and one of 8 magnitudes,
 * whose f16 bytes (2 x 8) are looked up by byte permutes (km_l4). V records are 72 bytes at
 * head_dim 128: their bulk copies take 80 bytes from the 16-byte boundary at or before the
 * record (an even KV head count keeps every copy inside its cache row: kd_decode checks). */
#ifndef CINFER_BACKEND_CUDA_KVQ_MMA_CUH
#define CINFER_BACKEND_CUDA_KVQ_MMA_CUH

enum {
    KM_NT = 128,    /* threads a block (bulk copies: one record a thread, K's and V's) */
    KM_TARGET = 48, /* the split target with bulk copies (k_kvq_sd's KD_TARGET otherwise) */
    KM_WP = 16,     /* positions a warp a round */
    KM_GB = 36,     /* bytes of an 8-bit group of 32: f16 d, f16 m, 32 codes */
    KM_LB = 18,     /* bytes of a 4-bit Lloyd-Max group of 32: f16 s, 16 bytes of codes */
};
#define KM_SA 64.0f /* the probabilities' scale in the values' mma */

/* c += a b: m16n8k16, f16 A (row) and B (col), f32 C */
__device__ __forceinline__ void km_mma(float *c, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                       uint32_t b0, uint32_t b1)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#endif
}

/* two bytes of w (selector: 0x4140 bytes 0, 1; 0x4342 bytes 2, 3) as the f16 pair 1024 + c */
__device__ __forceinline__ uint32_t km_c2h(uint32_t w, unsigned sel)
{
    return __byte_perm(w, 0x64646464u, sel);
}
/* ... minus 1152: the codes minus 128, exact */
__device__ __forceinline__ uint32_t km_c2hc(uint32_t w, unsigned sel)
{
    const uint32_t h = km_c2h(w, sel);
    const __half2 r = __hsub2(*(const __half2 *)&h, __half2half2(__ushort_as_half((unsigned short)0x6480)));
    return *(const uint32_t *)&r;
}
/* the f16 pair (lo, hi) of two floats, rounded */
__device__ __forceinline__ uint32_t km_pack(float lo, float hi)
{
    const __half2 r = __floats2half2_rn(lo, hi);
    return *(const uint32_t *)&r;
}
/* x's f16 part hi (part 0) or the f16 of what hi leaves (part 1) */
__device__ __forceinline__ float km_part(float x, int part)
{
    const float h = __half2float(__float2half_rn(x));
    return part ? x - h : h;
}

/* the widest copy piece a record of hb bytes allows (the host checks the caches' bases) */
__host__ __device__ constexpr int km_piece(int hb) { return hb % 16 == 0 ? 16 : hb % 8 == 0 ? 8 : 4; }
/* a V record's slot in a round buffer: its bytes, or with bulk copies of a record that is
 * not a multiple of 16 bytes (its start 8 bytes past a 16-byte boundary or on one), the 16-byte
 * multiple a copy from the boundary at or before it takes */
__host__ __device__ constexpr int km_vslot(int hbv, int bulk)
{
    return bulk && hbv % 16 ? (hbv + 8 + 15) / 16 * 16 : hbv;
}
/* a round buffer: 64 K records of hb bytes, 64 V slots of sv bytes, 32 bytes of slack */
__host__ __device__ constexpr size_t km_bufsz(int hb, int sv)
{
    return ((size_t)KD_ROUND * (size_t)(hb + sv) + 32) & ~(size_t)15;
}

/* the f16 hi / lo byte tables of the 4-bit codebook's magnitudes, 64 cb[8 + k] (k < 8): per
 * table (hi, lo) the low bytes of k = 0..3, 4..7, then the high bytes (cu_kvq_decode_init) */
__constant__ uint32_t c_km_l4[2][4];

/* km_l4: the A operands of 8 codes, c0 = position P0's 2 bytes (nibbles: dims d0..d3 =
 * 4 gid + 0..3), c1 = position P1's: r[t][u][k] = the f16 pair (P0, P1) of dim 2 u + k from
 * table t (0: hi, 1: lo). The bytes are interleaved and the middle nibbles of each half
 * swapped, giving nibbles (P0 d0, P1 d0, P0 d1, P1 d1, P0 d2, ..), so that one permute of
 * the looked-up low and high bytes is an operand. A code c < 8 is -mag[7 - c], c >= 8 is
 * mag[c - 8]: selector nibble (c & 7) ^ (c < 8 ? 7 : 0); the sign (bit 3 of the code clear)
 * is xored into the high bytes (bit 7) before the operands are assembled. */
__device__ __forceinline__ void km_l4(uint32_t c0, uint32_t c1, uint32_t (&r)[2][2][2])
{
    uint32_t w = __byte_perm(c0, c1, 0x5140); /* nibbles P0d0 P0d1 P1d0 P1d1 P0d2 .. */
    const uint32_t x = ((w >> 4) ^ w) & 0x00F000F0u;
    w ^= x ^ (x << 4);                         /* nibbles P0d0 P1d0 P0d1 P1d1 P0d2 .. */
    const uint32_t n = (~w >> 3) & 0x11111111u; /* 1 where the code is negative */
    const uint32_t s = (w & 0x77777777u) ^ (n * 7u);
#pragma unroll
    for (int u = 0; u < 2; u++) {
        /* byte j: bit 7 set where nibble 4 u + j's code is negative */
        const uint32_t y = __byte_perm(w, 0u, u ? 0x3322 : 0x1100);
        const uint32_t sg = ~(((y << 4) & 0x00800080u) | (y & 0x80008000u)) & 0x80808080u;
        const unsigned sel = s >> (16 * u);
#pragma unroll
        for (int t = 0; t < 2; t++) {
            const uint32_t lo = __byte_perm(c_km_l4[t][0], c_km_l4[t][1], sel);
            const uint32_t hi = __byte_perm(c_km_l4[t][2], c_km_l4[t][3], sel) ^ sg;
            r[t][u][0] = __byte_perm(lo, hi, 0x5140);
            r[t][u][1] = __byte_perm(lo, hi, 0x7362);
        }
    }
}

/* One round's K and V records into the buffer at dst (V's 64 records after K's): kd_issue
 * with the record sizes and piece widths fixed at compile time (no run-time division). */
template <int NT, int HB, int HBV>
__device__ __forceinline__ void km_issue(const kd_args &a, uint8_t *dst, const int *rows,
                                         size_t hk, size_t hv)
{
    kd_issue_side<km_piece(HB), NT>(dst, a.kc, a.s[0].rb, hk, HB, rows);
    kd_issue_side<km_piece(HBV), NT>(dst + KD_ROUND * HB, a.vc, a.s[1].rb, hv, HBV, rows);
    kd_cp_commit();
}

/* ---- bulk copies (sm_90): a round's records by cp.async.bulk, one mbarrier a buffer ---- */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define KM_HAVE_BULK 1
#else
#define KM_HAVE_BULK 0
#endif

__device__ __forceinline__ uint32_t km_sa(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
/* the barrier b expects n arrivals a phase; made visible to the async proxy */
__device__ __forceinline__ void km_bar_init(uint64_t *b, unsigned n)
{
#if KM_HAVE_BULK
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(km_sa(b)), "r"(n) : "memory");
#else
    (void)b, (void)n;
#endif
}
__device__ __forceinline__ void km_bar_init_fence()
{
#if KM_HAVE_BULK
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
/* waits until the phase of parity ph of the barrier b completed */
__device__ __forceinline__ void km_bar_wait(uint64_t *b, unsigned ph)
{
#if KM_HAVE_BULK
    uint32_t ok = 0;
    do
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     " selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(ok)
                     : "r"(km_sa(b)), "r"(ph)
                     : "memory");
    while (!ok);
#else
    (void)b, (void)ph;
#endif
}
/* Thread i < 2 KD_ROUND of the block: position j = i % 64's K (i < 64) or V record (cache
 * row `row`) into the round buffer dst (V's 64 slots of SV bytes after K's; a V copy starts
 * vsk bytes before its record: km_vslot), its arrival at bar expecting its copy's bytes
 * first (so the phase ends only once all 128 threads arrived
 * and every copy landed). A bulk copy takes its addresses in uniform registers, so a warp
 * issues its lanes' copies one after another: all four warps issue, 32 copies each. The
 * buffer was last read by generic loads (ordered by the caller's barrier): the proxy fence
 * first. */
template <int HB, int SV>
__device__ __forceinline__ void km_issue_bulk(const kd_args &a, uint8_t *dst, int row, size_t hk,
                                              size_t hv, int vsk, uint64_t *bar)
{
#if KM_HAVE_BULK
    const int i = threadIdx.x, w = i >= KD_ROUND;
    const uint32_t sb = km_sa(bar);
    const uint8_t *src = w ? a.vc + (size_t)row * a.s[1].rb + hv - vsk : a.kc + (size_t)row * a.s[0].rb + hk;
    const unsigned nb = w ? SV : HB;
    uint8_t *d = w ? dst + KD_ROUND * HB + (i - KD_ROUND) * SV : dst + i * HB;
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(sb),
                 "r"(nb)
                 : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                     km_sa(d)),
                 "l"(src), "r"(nb), "r"(sb)
                 : "memory");
#else
    (void)a, (void)dst, (void)row, (void)hk, (void)hv, (void)vsk, (void)bar;
#endif
}

/* BULK: the round copies as cp.async.bulk (sm_90, K records of a multiple of 16 bytes: head_dim
 * 128), else cp.async pieces; VL4: 4-bit Lloyd-Max values (k8v4), else 8-bit affine */
template <int HD, int HG, int BULK, int VL4 = 0>
__global__ void __launch_bounds__(KM_NT) k_kvq_mm(struct kd_args a, int)
{
    constexpr int NT = KM_NT, NG = HD / 32, NW = NT / 32;
    constexpr int HB = NG * KM_GB;                /* a K record's bytes */
    constexpr int HBV = VL4 ? NG * KM_LB : HB;    /* a V record's bytes */
    static_assert(HD == 64 || HD == 128, "head_dim 64 / 128");
    static_assert(HG >= 1 && HG <= 4 && NW * KM_WP == KD_ROUND, "layout");
    constexpr bool TB = BULK && KM_HAVE_BULK && HB % 16 == 0;
    constexpr int SV = km_vslot(HBV, TB); /* a V slot in a round buffer */
    static_assert(NT == 2 * KD_ROUND, "bulk copies: a thread a record of a round");
    extern __shared__ __align__(16) uint8_t kd_sm[];
    __shared__ int rows[TB ? 1 : KD_MAX_STAGES][KD_ROUND];
    __shared__ __align__(8) uint64_t kbar[KD_MAX_STAGES]; /* TB: a round buffer's copies */
    __shared__ __align__(16) float qs[HG * HD];
    __shared__ __align__(16) float ssc[NW][4][KM_WP]; /* a warp's scores of a round, by head */
    __shared__ float qiv[4], qgs[4][NG]; /* each head's 2^-e and group sums of its scaled q */
    __shared__ float wml[NW][2][4];     /* each warp's max and sum, by head */

    cu_pdl_trigger();
    const int z = blockIdx.x, t = blockIdx.z;
    const int g = blockIdx.y / a.nsub, sub = blockIdx.y % a.nsub;
    const int h0 = g * (a.n_head / a.n_kv_head) + sub * HG;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int gid = lane >> 2, tig = lane & 3;
    /* pos, seq and the block tables were written before the step: read before the wait, so
     * the first rounds' rows are known when the previous kernel ends */
    const int pos = a.pos[t], sq = a.seq[t];
    int lo = 0, rb = 0, per = 1;
    const int n = cu_dec_splits<KD_ROUND>(pos, a.window, a.target, a.max_blocks * a.block_size,
                                         &lo, &rb, &per);
    float *orow = a.out + ((size_t)t * a.n_head + h0) * HD;
    if (z >= n) {
        if (n == 0 && z == 0) {
            cu_pdl_wait();
            for (int i = tid; i < HG * HD; i += NT)
                orow[i] = 0.0f;
        }
        return;
    }
    int r0 = 0, r1 = 0;
    kd_rounds(pos, rb, per, z, &r0, &r1);
    const int32_t *bt = a.bt + (size_t)sq * a.max_blocks;
    const int bs = a.block_size, bsh = a.bs_shift;
    const size_t hk = (size_t)g * HB, hv = (size_t)g * HBV;
    constexpr size_t bufsz = km_bufsz(HB, SV);
    /* TB: a V copy starts at the 16-byte boundary at or before its record (rows and the
     * cache's base are 16-byte multiples: kd_decode) */
    const int vsk = SV != HBV ? (int)(hv & 15) : 0;
    auto row_of = [&](int rd, int j) { return kd_row(bt, bs, bsh, lo, pos, rd, j, false); };
    /* the round buffers as in k_kvq_sd: round rd in buffer (rd - r0) % ns. TB: thread tid's
     * rows (position tid % 64) of rounds r0 .. r0 + ns - 1 in p0 .. p3 (the last, the loop's
     * first issue), and the buffers' barriers (128 arrivals a phase) */
    const int ns = a.stages;
    static_assert(KD_MAX_STAGES == 4, "the rows p0 .. p3");
    const int jr = tid & (KD_ROUND - 1); /* TB: the position whose record thread tid copies */
    auto prow = [&](int i) { return i < ns && r0 + i < r1 ? row_of(r0 + i, jr) : 0; };
    int nrow = 0, p0 = 0, p1 = 0, p2 = 0, p3 = 0; /* (scalars: an array went to local memory) */
    if (TB) {
        p0 = prow(0), p1 = prow(1), p2 = prow(2), p3 = prow(3);
        if (tid == 0) {
            for (int i = 0; i < ns; i++)
                km_bar_init(&kbar[i], NT);
            km_bar_init_fence();
        }
    } else {
        nrow = kd_prime_rows(rows, ns, r0, r1, tid, row_of);
    }
    __syncthreads();
    cu_pdl_wait(); /* q and the newest K/V records are the previous kernels' */
    float v[HD / 32];
    if (warp < HG) { /* q's loads in flight while the copies are issued */
        const float *qr = a.q + ((size_t)t * a.n_head + h0 + warp) * HD;
#pragma unroll
        for (int k = 0; k < HD / 32; k++)
            v[k] = qr[lane + 32 * k];
    }
    if (TB) {
        if (r0 < r1)
            km_issue_bulk<HB, SV>(a, kd_sm, p0, hk, hv, vsk, &kbar[0]);
        if (ns > 2 && r0 + 1 < r1)
            km_issue_bulk<HB, SV>(a, kd_sm + bufsz, p1, hk, hv, vsk, &kbar[1]);
        if (ns > 3 && r0 + 2 < r1)
            km_issue_bulk<HB, SV>(a, kd_sm + 2 * bufsz, p2, hk, hv, vsk, &kbar[2]);
        nrow = ns == 2 ? p1 : ns == 3 ? p2 : p3;
    } else {
        for (int i = 0; i < ns - 1; i++) {
            if (r0 + i < r1)
                km_issue<NT, HB, HBV>(a, kd_sm + i * bufsz, rows[i], hk, hv);
            else
                kd_cp_commit();
        }
    }
    if (warp < HG) { /* warp h: head h0 + h's q (rotated when the keys are), scaled by 2^e */
        float mx = 0.0f;
        if (a.rot_k)
            kd_rot_warp<HD>(v, lane);
#pragma unroll
        for (int k = 0; k < HD / 32; k++)
            mx = fmaxf(mx, fabsf(v[k]));
        mx = cu_warp_max(mx);
        int e = 0;
        if (mx > 0.0f && isfinite(mx))
            (void)frexpf(mx, &e); /* mx = f 2^e, f in [0.5, 1): mx 2^(10 - e) in [2^9, 2^10) */
        const float sc = ldexpf(1.0f, 10 - e);
#pragma unroll
        for (int k = 0; k < HD / 32; k++) { /* element lane + 32 k: group k */
            const float y = v[k] * sc;
            qs[warp * HD + lane + 32 * k] = y;
            const float gs = cu_warp_sum(km_part(y, 0) + km_part(y, 1));
            if (lane == 0)
                qgs[warp][k] = gs;
        }
        if (lane == 0)
            qiv[warp] = ldexpf(1.0f, e - 10);
    } else if (warp < 4) {
        if (lane < NG)
            qgs[warp][lane] = 0.0f;
        if (lane == 0)
            qiv[warp] = 0.0f;
    }
    __syncthreads();
    const int hh = gid & 3, part = gid >> 2;
    const int oh0 = (2 * tig) & 3, oh1 = (2 * tig + 1) & 3; /* the heads of the lane's C columns */
    /* B of the scores: column gid = head hh's hi (part 0) or lo part of its scaled q, dims
     * 16 s + 4 tig + 0, 1 (register 0) and + 2, 3 (register 1) of each 16; qsum: the group
     * sums of the lane's score columns 2 tig, 2 tig + 1 (hi columns, tig < 2; else zero);
     * qinv: those two heads' 2^-e */
    uint32_t qb[HD / 16][2];
    float qsum[NG][2], qinv[2];
#pragma unroll
    for (int ks = 0; ks < HD / 16; ks++) {
        float x[4];
#pragma unroll
        for (int i = 0; i < 4; i++)
            x[i] = hh < HG ? km_part(qs[hh * HD + 16 * ks + 4 * tig + i], part) : 0.0f;
        qb[ks][0] = km_pack(x[0], x[1]);
        qb[ks][1] = km_pack(x[2], x[3]);
    }
    qinv[0] = qiv[oh0], qinv[1] = qiv[oh1];
#pragma unroll
    for (int gi = 0; gi < NG; gi++)
        qsum[gi][0] = tig < 2 ? qgs[oh0][gi] : 0.0f, qsum[gi][1] = tig < 2 ? qgs[oh1][gi] : 0.0f;
    float o[HD / 16][4]; /* the values' C: m-tile 2 g + u, rows gid / gid + 8 */
#pragma unroll
    for (int i = 0; i < HD / 16; i++)
        o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float mt[NG]; /* sum p (m - 1024 d) of the lane's positions, head gid % 4, per group */
#pragma unroll
    for (int i = 0; i < NG; i++)
        mt[i] = 0.0f;
    float hm = -INFINITY, hl = 0.0f; /* head hh's running max, the lane's part of its sum */
    int buf = 0;
    unsigned ph = 0; /* TB: bit b, the parity of buffer b's next phase */
    for (int rd = r0; rd < r1; rd++, buf = buf + 1 == ns ? 0 : buf + 1) {
        if (TB) {
            km_bar_wait(&kbar[buf], (ph >> buf) & 1u);
            ph ^= 1u << buf;
        } else {
            kd_cp_wait_ahead(ns - 2);
        }
        __syncthreads(); /* (every warp is also done with the previous round's buffer) */
        const uint8_t *kb = kd_sm + buf * bufsz, *vb = kb + KD_ROUND * HB;
        const int pb = buf == 0 ? ns - 1 : buf - 1;
        if (TB) {
            if (rd + ns - 1 < r1) {
                km_issue_bulk<HB, SV>(a, kd_sm + pb * bufsz, nrow, hk, hv, vsk, &kbar[pb]);
                if (rd + ns < r1)
                    nrow = row_of(rd + ns, jr);
            }
        } else {
            if (rd + ns - 1 < r1) {
                uint8_t *nb = kd_sm + pb * bufsz;
                km_issue<NT, HB, HBV>(a, nb, rows[pb], hk, hv);
            } else {
                kd_cp_commit();
            }
            if (rd + ns < r1 && tid < KD_ROUND) {
                rows[buf][tid] = nrow;
                if (rd + ns + 1 < r1)
                    nrow = row_of(rd + ns + 1, tid);
            }
        }
        const int j0 = warp * KM_WP;
        /* ---- scores: rows gid, gid + 8 of the warp's 16 positions ---- */
        const uint8_t *ka = kb + (j0 + gid) * HB, *kc8 = kb + (j0 + gid + 8) * HB;
        float s4[4] = {0.0f, 0.0f, 0.0f, 0.0f}; /* (gid, 2tig) (gid, 2tig+1) (gid+8, ..) */
#pragma unroll
        for (int gi = 0; gi < NG; gi++) {
            float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int s = 0; s < 2; s++) {
                const int off = gi * KM_GB + 4 + 16 * s + 4 * tig;
                const uint32_t w0 = *(const uint32_t *)(ka + off), w1 = *(const uint32_t *)(kc8 + off);
                km_mma(c, km_c2hc(w0, 0x4140), km_c2hc(w1, 0x4140), km_c2hc(w0, 0x4342),
                       km_c2hc(w1, 0x4342), qb[2 * gi + s][0], qb[2 * gi + s][1]);
            }
            const uint32_t x0 = *(const uint32_t *)(ka + gi * KM_GB);
            const uint32_t x1 = *(const uint32_t *)(kc8 + gi * KM_GB);
            const float2 dm0 = __half22float2(*(const __half2 *)&x0);
            const float2 dm1 = __half22float2(*(const __half2 *)&x1);
            const float mm0 = fmaf(128.0f, dm0.x, dm0.y), mm1 = fmaf(128.0f, dm1.x, dm1.y);
            s4[0] = fmaf(dm0.x, c[0], fmaf(mm0, qsum[gi][0], s4[0]));
            s4[1] = fmaf(dm0.x, c[1], fmaf(mm0, qsum[gi][1], s4[1]));
            s4[2] = fmaf(dm1.x, c[2], fmaf(mm1, qsum[gi][0], s4[2]));
            s4[3] = fmaf(dm1.x, c[3], fmaf(mm1, qsum[gi][1], s4[3]));
        }
#pragma unroll
        for (int i = 0; i < 4; i++)
            s4[i] += __shfl_xor_sync(0xffffffffu, s4[i], 2); /* hi + lo columns */
        if (tig < 2) {
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int h = 2 * tig + (i & 1), j = gid + 8 * (i >> 1);
                const int p = rd * KD_ROUND + j0 + j;
                float x = s4[i] * qinv[i & 1] * a.scale;
                if (a.softcap > 0.0f)
                    x = a.softcap * tanhf(x / a.softcap);
                ssc[warp][h][j] = p >= lo && p <= pos ? x : -INFINITY;
            }
        }
        __syncwarp();
        /* ---- the warp's online softmax: lane = head hh, positions 2tig, 2tig+1, +8, +9 ---- */
        float sv[4], pv[4];
        const float2 sa = *(const float2 *)&ssc[warp][hh][2 * tig];
        const float2 sb = *(const float2 *)&ssc[warp][hh][2 * tig + 8];
        sv[0] = sa.x, sv[1] = sa.y, sv[2] = sb.x, sv[3] = sb.y;
        __syncwarp(); /* (read before the next round's scores are written) */
        float rmax = fmaxf(fmaxf(sv[0], sv[1]), fmaxf(sv[2], sv[3]));
        rmax = fmaxf(rmax, __shfl_xor_sync(0xffffffffu, rmax, 1));
        rmax = fmaxf(rmax, __shfl_xor_sync(0xffffffffu, rmax, 2));
        const float mn = fmaxf(hm, rmax);
        float f = 1.0f;
        if (mn != -INFINITY && hh < HG) {
            f = expf(hm - mn);
#pragma unroll
            for (int i = 0; i < 4; i++)
                pv[i] = expf(sv[i] - mn);
        } else {
#pragma unroll
            for (int i = 0; i < 4; i++)
                pv[i] = 0.0f;
        }
        hm = hh < HG ? mn : hm;
        hl = fmaf(hl, f, (pv[0] + pv[1]) + (pv[2] + pv[3]));
        if (!VL4 && f != 1.0f) {
#pragma unroll
            for (int i = 0; i < NG; i++)
                mt[i] *= f;
        }
        const float f0 = __shfl_sync(0xffffffffu, f, 4 * oh0);
        const float f1 = __shfl_sync(0xffffffffu, f, 4 * oh1);
        if (f0 != 1.0f || f1 != 1.0f) {
#pragma unroll
            for (int i = 0; i < HD / 16; i++)
                o[i][0] *= f0, o[i][1] *= f1, o[i][2] *= f0, o[i][3] *= f1;
        }
        /* ---- values: per group, B = 64 p d (hi / lo), A = 1024 + codes; VL4: B = p s,
         * A = 64 cb[c] (hi, then lo) ---- */
        const uint8_t *v0 = vb + vsk + (j0 + 2 * tig) * SV, *v1 = v0 + SV;
        const uint8_t *v2 = vb + vsk + (j0 + 2 * tig + 8) * SV, *v3 = v2 + SV;
        if constexpr (VL4) {
#pragma unroll
            for (int gi = 0; gi < NG; gi++) {
                const int ho = gi * KM_LB, co = ho + 2 + 2 * gid;
                const float y0 = pv[0] * __half2float(*(const __half *)(v0 + ho));
                const float y1 = pv[1] * __half2float(*(const __half *)(v1 + ho));
                const float y2 = pv[2] * __half2float(*(const __half *)(v2 + ho));
                const float y3 = pv[3] * __half2float(*(const __half *)(v3 + ho));
                const uint32_t b0 = km_pack(km_part(y0, part), km_part(y1, part));
                const uint32_t b1 = km_pack(km_part(y2, part), km_part(y3, part));
                uint32_t rx[2][2][2], ry[2][2][2];
                km_l4(*(const uint16_t *)(v0 + co), *(const uint16_t *)(v1 + co), rx);
                km_l4(*(const uint16_t *)(v2 + co), *(const uint16_t *)(v3 + co), ry);
#pragma unroll
                for (int t = 0; t < 2; t++)
#pragma unroll
                    for (int u = 0; u < 2; u++)
                        km_mma(o[2 * gi + u], rx[t][u][0], rx[t][u][1], ry[t][u][0], ry[t][u][1], b0, b1);
            }
        } else {
#pragma unroll
            for (int gi = 0; gi < NG; gi++) {
                const int ho = gi * KM_GB;
                const uint32_t x0 = *(const uint32_t *)(v0 + ho), x1 = *(const uint32_t *)(v1 + ho);
                const uint32_t x2 = *(const uint32_t *)(v2 + ho), x3 = *(const uint32_t *)(v3 + ho);
                const float2 e0 = __half22float2(*(const __half2 *)&x0);
                const float2 e1 = __half22float2(*(const __half2 *)&x1);
                const float2 e2 = __half22float2(*(const __half2 *)&x2);
                const float2 e3 = __half22float2(*(const __half2 *)&x3);
                const float y0 = pv[0] * e0.x * KM_SA, y1 = pv[1] * e1.x * KM_SA;
                const float y2 = pv[2] * e2.x * KM_SA, y3 = pv[3] * e3.x * KM_SA;
                const uint32_t b0 = km_pack(km_part(y0, part), km_part(y1, part));
                const uint32_t b1 = km_pack(km_part(y2, part), km_part(y3, part));
                mt[gi] = fmaf(pv[0], fmaf(-1024.0f, e0.x, e0.y), mt[gi]);
                mt[gi] = fmaf(pv[1], fmaf(-1024.0f, e1.x, e1.y), mt[gi]);
                mt[gi] = fmaf(pv[2], fmaf(-1024.0f, e2.x, e2.y), mt[gi]);
                mt[gi] = fmaf(pv[3], fmaf(-1024.0f, e3.x, e3.y), mt[gi]);
                const int co = ho + 4 + 4 * gid;
                const uint32_t w0 = *(const uint32_t *)(v0 + co), w1 = *(const uint32_t *)(v1 + co);
                const uint32_t w2 = *(const uint32_t *)(v2 + co), w3 = *(const uint32_t *)(v3 + co);
                const uint32_t t01a = __byte_perm(w0, w1, 0x5140), t23a = __byte_perm(w0, w1, 0x7362);
                const uint32_t t01b = __byte_perm(w2, w3, 0x5140), t23b = __byte_perm(w2, w3, 0x7362);
                km_mma(o[2 * gi], km_c2h(t01a, 0x4140), km_c2h(t01a, 0x4342), km_c2h(t01b, 0x4140),
                       km_c2h(t01b, 0x4342), b0, b1);
                km_mma(o[2 * gi + 1], km_c2h(t23a, 0x4140), km_c2h(t23a, 0x4342), km_c2h(t23b, 0x4140),
                       km_c2h(t23b, 0x4342), b0, b1);
            }
        }
    }
    /* ---- the warp's result: hi + lo, sums over the lanes, the min terms ---- */
#pragma unroll
    for (int i = 0; i < HD / 16; i++)
#pragma unroll
        for (int k = 0; k < 4; k++)
            o[i][k] += __shfl_xor_sync(0xffffffffu, o[i][k], 2);
    hl += __shfl_xor_sync(0xffffffffu, hl, 1);
    hl += __shfl_xor_sync(0xffffffffu, hl, 2);
#pragma unroll
    for (int i = 0; i < NG && !VL4; i++) {
        mt[i] += __shfl_xor_sync(0xffffffffu, mt[i], 1);
        mt[i] += __shfl_xor_sync(0xffffffffu, mt[i], 2);
    }
    __syncthreads(); /* every warp is done with the buffers: they hold the warps' outputs */
    float *wo = (float *)kd_sm; /* (NW, HG, HD) */
    if (tig == 0 && part == 0 && hh < HG)
        wml[warp][0][hh] = hm, wml[warp][1][hh] = hl;
#pragma unroll
    for (int gi = 0; gi < NG; gi++) {
        const float m0 = VL4 ? 0.0f : __shfl_sync(0xffffffffu, mt[gi], 4 * oh0);
        const float m1 = VL4 ? 0.0f : __shfl_sync(0xffffffffu, mt[gi], 4 * oh1);
        if (tig < 2) {
#pragma unroll
            for (int u = 0; u < 2; u++) {
                const int d0 = 32 * gi + 4 * gid + 2 * u;
                const float *c = o[2 * gi + u];
                if (oh0 < HG) {
                    wo[((size_t)warp * HG + oh0) * HD + d0] = fmaf(c[0], 1.0f / KM_SA, m0);
                    wo[((size_t)warp * HG + oh0) * HD + d0 + 1] = fmaf(c[2], 1.0f / KM_SA, m0);
                }
                if (oh1 < HG) {
                    wo[((size_t)warp * HG + oh1) * HD + d0] = fmaf(c[1], 1.0f / KM_SA, m1);
                    wo[((size_t)warp * HG + oh1) * HD + d0 + 1] = fmaf(c[3], 1.0f / KM_SA, m1);
                }
            }
        }
    }
    __syncthreads();
    /* ---- the block's result: the warps merged in order ---- */
    for (int i = tid; i < HG * HD; i += NT) {
        const int h = i / HD, d = i % HD;
        float mx = -INFINITY;
#pragma unroll
        for (int w = 0; w < NW; w++)
            if (wml[w][1][h] > 0.0f)
                mx = fmaxf(mx, wml[w][0][h]);
        float L = 0.0f, acc = 0.0f;
#pragma unroll
        for (int w = 0; w < NW; w++)
            if (wml[w][1][h] > 0.0f) {
                const float fw = expf(wml[w][0][h] - mx);
                L = fmaf(fw, wml[w][1][h], L);
                acc = fmaf(fw, wo[((size_t)w * HG + h) * HD + d], acc);
            }
        if (n == 1) {
            qs[i] = L > 0.0f ? acc * (1.0f / L) : 0.0f;
        } else {
            const size_t pr = ((size_t)t * a.n_head + h0 + h) * a.maxs + z;
            a.part[pr * HD + d] = acc;
            if (d == 0)
                a.ml[pr] = make_float2(mx, L);
        }
    }
    if (n > 1)
        return;
    if (a.rot_v)
        kq_rotate_rows(qs, HG, HD, 1);
    else
        __syncthreads();
    for (int i = tid; i < HG * HD; i += NT)
        orow[i] = qs[i];
}

#endif
