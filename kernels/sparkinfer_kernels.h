/*
 * sparkinfer_kernels.h — the C ABI of libsparkinfer_kernels.so.
 *
 * The Go engine (engine/cuda) opens this library with dlopen at run time, so
 * `go build` needs no CUDA and one binary runs with or without a GPU. The
 * library links the CUDA runtime statically; its only run-time dependency is
 * the driver (libcuda.so.1).
 *
 * Conventions:
 *  - Every function returns 0 on success or a negative SK_E* code; the
 *    message of the last failure on a context is sk_error(ctx).
 *  - All device work is enqueued on the context's one stream, in order.
 *    sk_sync waits for it. Pointers named d_* are device pointers.
 *  - Activations are float32. Weights are uploaded in their GGUF (ggml)
 *    layout and may be repacked on the device into an aligned layout.
 *  - A context must be used from one OS thread at a time; every entry point
 *    makes the context's CUDA context current on the calling thread.
 *  - Matrices are row-major in the ggml sense: a matrix of `rows` rows, each
 *    `cols` elements long (ggml dims {cols, rows}); y = W x has `rows` outputs.
 */
#ifndef SPARKINFER_KERNELS_H
#define SPARKINFER_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SK_ABI_VERSION 4

#define SK_OK 0
#define SK_E_CUDA (-1)     /* a CUDA call failed; see sk_error */
#define SK_E_ARG (-2)      /* invalid argument (shape, type, null) */
#define SK_E_NOMEM (-3)    /* device allocation failed */
#define SK_E_UNSUPPORTED (-4)

/* ggml tensor type ids. */
#define SK_F32 0
#define SK_F16 1
#define SK_Q8_0 8
#define SK_Q4_K 12
#define SK_Q6_K 14
#define SK_BF16 30

typedef struct sk_ctx sk_ctx;
typedef struct sk_matrix sk_matrix;
typedef struct sk_model sk_model;

int sk_abi_version(void);

/* Contexts. sk_create returns NULL and writes a message to err on failure. */
sk_ctx *sk_create(int device, char *err, size_t errlen);
void sk_destroy(sk_ctx *ctx);
const char *sk_error(const sk_ctx *ctx);
int sk_sync(sk_ctx *ctx);

typedef struct {
	char name[256];
	int cc_major, cc_minor;
	int sm_count;
	size_t mem_total;
	int clock_khz;       /* current SM clock if known, else max */
	int mem_clock_khz;
	int mem_bus_width;   /* bits */
	int driver_version;
	int runtime_version;
} sk_device_info;
int sk_info(sk_ctx *ctx, sk_device_info *out);

/* Memory. */
int sk_alloc(sk_ctx *ctx, size_t bytes, void **d_out);
int sk_free(sk_ctx *ctx, void *d);
int sk_upload(sk_ctx *ctx, void *d_dst, const void *src, size_t n);
int sk_download(sk_ctx *ctx, void *dst, const void *d_src, size_t n);
int sk_memset(sk_ctx *ctx, void *d, int value, size_t n);

/* Measured device-to-device copy bandwidth in bytes/s (read + written),
 * median of `reps` copies of `bytes` bytes. */
int sk_copy_bandwidth(sk_ctx *ctx, size_t bytes, int reps, double *bytes_per_s);

/* Weight matrices: `data` is the host GGUF tensor data of rows x cols. */
int sk_matrix_upload(sk_ctx *ctx, int type, const void *data, int rows, int cols, sk_matrix **out);
void sk_matrix_free(sk_ctx *ctx, sk_matrix *m);
size_t sk_matrix_bytes(const sk_matrix *m); /* device bytes read by one GEMV */

/* Ops (enqueued). */
/* y[r] = (accumulate ? y[r] : 0) + sum_c W[r][c] x[c] */
int sk_gemv(sk_ctx *ctx, const sk_matrix *W, const float *d_x, float *d_y, int accumulate);
/* Y[t][r] = (accumulate ? Y[t][r] : 0) + sum_c W[r][c] X[t][c], for t < n */
int sk_gemm(sk_ctx *ctx, const sk_matrix *W, const float *d_X, float *d_Y, int n, int accumulate);
/* y[t] = W[ids[t]] (row lookup, dequantized), for t < n; ids on the device */
int sk_get_rows(sk_ctx *ctx, const sk_matrix *W, const int32_t *d_ids, float *d_y, int n);
/* y[r] = x[r] * rsqrt(mean(x[r]^2) + eps) * w, rows of length n */
int sk_rmsnorm(sk_ctx *ctx, const float *d_x, const float *d_w, float *d_y, int n, int rows, float eps);
/*
 * Rotate the first rope_dim elements of each head of x (ntok tokens x nheads
 * heads x head_dim) for positions pos0+t (pos0 on the device):
 * angle_i = (pos0+t) * freq_scale * freq_base^(-2i/rope_dim) / freq[i], with
 * freq (rope_dim/2 divisors, on the device) optional. neox: rotate pairs
 * (i, i+rope_dim/2); else adjacent pairs (2i, 2i+1).
 */
int sk_rope(sk_ctx *ctx, float *d_x, int ntok, int nheads, int head_dim, int rope_dim, const int32_t *d_pos0,
            float freq_base, float freq_scale, int neox, const float *d_freq);
/* out = silu(gate) * up, n elements */
int sk_swiglu(sk_ctx *ctx, const float *d_gate, const float *d_up, float *d_out, int n);
/* out[0] = index of the largest element of x[0..n) (lowest index on ties) */
int sk_argmax(sk_ctx *ctx, const float *d_x, int n, int32_t *d_out);

/*
 * Decode attention over an f16 KV cache for one query token.
 * q: n_head x head_dim (float). k_cache, v_cache: n_kv_head x max_ctx x head_dim (f16, as uint16).
 * Attends to positions 0..*d_pos inclusive. out: n_head x head_dim.
 */
int sk_attention_decode(sk_ctx *ctx, const float *d_q, const uint16_t *d_k, const uint16_t *d_v,
                        float *d_out, int n_head, int n_kv_head, int head_dim, int max_ctx,
                        const int32_t *d_pos);
/* store k, v (ntok x n_kv_head x head_dim float) into the caches at positions pos0+t */
int sk_kv_store(sk_ctx *ctx, const float *d_k, const float *d_v, uint16_t *d_kc, uint16_t *d_vc,
                int ntok, int n_kv_head, int head_dim, int max_ctx, const int32_t *d_pos0);

/* ---- kernel variants (ABI 2) ----
 *
 * A context runs one kernel variant at a time; the op entry points above
 * (sk_gemv, sk_gemm, sk_attention_decode) and models created afterwards
 * dispatch on it:
 *   1  the v1 path: one kernel per op, float activations, one warp per
 *      GEMV row, split attention over max_ctx, batched GEMV for prefill.
 *   2  fused decode: RMSNorm folded into the GEMV prologue, activations
 *      as two int8 levels per block of 32 (v ~ d1*q1 + d2*q2: the second
 *      quantizes the first's residual) with dp4a for Q8_0/Q4_K/Q6_K, two
 *      rows per warp, Q/K/V in one launch with RoPE and the KV-cache store
 *      in its epilogue, gate/up in one launch with SwiGLU in its epilogue,
 *      O/down accumulating into the residual, programmatic dependent launch
 *      on Hopper and later (5 launches per layer); decode attention split
 *      by the actual length with GQA groups per block, combined by its last
 *      block; prefill through a tensor-core GEMM (mma.sync m16n8k16, f16
 *      operands, f32 accumulation) and a tiled causal attention, 512-token
 *      chunks.
 * The default is SK_VARIANT_DEFAULT, or the environment variable
 * SPARKINFER_KERNEL_VARIANT read by sk_create (an unknown value makes
 * sk_create fail).
 *
 * The default is v2 since its two-level activations pass the parity gate on
 * the H200 (2026-11-29, docs/PERF.md); v1 stays as the plain baseline. */
#define SK_VARIANT_V1 1
#define SK_VARIANT_V2 2
#define SK_VARIANT_DEFAULT 2
int sk_set_variant(sk_ctx *ctx, int variant);
int sk_get_variant(const sk_ctx *ctx);

/* Upload with a row order: device row i holds host row perm[i] (a
 * permutation of 0..rows-1; NULL = identity). Outputs of the matrix's GEMVs
 * come out in device row order. */
int sk_matrix_upload_perm(sk_ctx *ctx, int type, const void *data, int rows, int cols, const int32_t *perm,
                          sk_matrix **out);
/* The row order that puts each RoPE pair of a Q or K matrix (n_heads heads
 * of head_dim rows) on adjacent device rows 2k, 2k+1: pairs (k, k+rope_dim/2)
 * when neox, else (2k, 2k+1) (identity); rows from rope_dim on keep their
 * order. Writes n_heads*head_dim entries. */
int sk_rope_perm(int n_heads, int head_dim, int rope_dim, int neox, int32_t *perm);

/* Epilogues of the fused GEMV/GEMM. Row r of a launch is row roff + r of
 * the concatenation of its matrices; token t of n.
 *  STORE   y[t*ldy + roff + r] = v
 *  ACC     y[t*ldy + roff + r] += v
 *  SWIGLU  two matrices (gate, up) of equal rows: y[t*ldy + i] = silu(gate_i) * up_i
 *  SWIGLU_F16  the same rounded to f16 (y then holds uint16_t values: entry
 *          t*ldy + i of (uint16_t *)y); GEMV only (sk_gemv_fused): the input
 *          of sk_gemv_fused_f16x, as the decode step passes it to the down GEMV
 *  QKV     rows = [Q (sk_rope_perm order) | K (sk_rope_perm order) | V]:
 *          RoPE at position *pos0 + t, q_out[t][n_head*head_dim] (float, natural
 *          order), K and V stored as f16 into the caches at that position. */
#define SK_EPI_STORE 0
#define SK_EPI_ACC 1
#define SK_EPI_SWIGLU 2
#define SK_EPI_QKV 3
#define SK_EPI_SWIGLU_F16 4

typedef struct {
	int mode;
	float *y;
	int ldy;  /* floats between tokens of y (STORE/ACC/SWIGLU) */
	int roff; /* row offset of this launch in the concatenation (GEMM only; GEMV: 0) */
	float *q_out;
	uint16_t *k_cache, *v_cache; /* f16, n_kv_head x max_ctx x head_dim */
	int n_head, n_kv_head, head_dim, rope_dim, max_ctx, neox;
	float freq_base, freq_scale;
	const float *freq;    /* optional rope_dim/2 divisors */
	const int32_t *pos0;  /* device */
} sk_epilogue;

/*
 * Fused GEMV of one token over nmat (1..3) matrices with equal cols (rows
 * concatenated; two for SWIGLU). Prologue: x, or when d_norm_w is non-NULL
 * x * rsqrt(mean(x^2) + eps) * norm_w; for Q8_0/Q4_K/Q6_K matrices the
 * activation is rounded to int8 in blocks of 32 with a float scale
 * amax/127 (as llama.cpp's q8_1), float for F32/F16/BF16. Independent of
 * the context's variant.
 */
int sk_gemv_fused(sk_ctx *ctx, int nmat, const sk_matrix *const *W, const float *d_x, const float *d_norm_w,
                  float eps, const sk_epilogue *epi);
/* The same without a norm for x of f16 values (cols of them, 16-byte
 * aligned; matrices of one type, Q8_0, Q4_K or Q6_K, and cols % 32 == 0
 * only; a float epilogue): the values are widened to float and quantized as
 * sk_gemv_fused's, so the results equal sk_gemv_fused's on those values. */
int sk_gemv_fused_f16x(sk_ctx *ctx, int nmat, const sk_matrix *const *W, const uint16_t *d_x,
                       const sk_epilogue *epi);
/*
 * Fused GEMM of n tokens (X: n x cols float, already normalised): the
 * tensor-core kernel (f16 operands, f32 accumulation) for Q8_0/Q4_K/Q6_K/F16
 * weights when cols % 32 == 0, else sk_gemv_fused per token (F32/BF16
 * weights keep float arithmetic). W: 1-3 matrices of equal cols whose rows
 * are concatenated (every one before the last with even rows; one launch
 * when they share a type), or gate and up for SWIGLU. For QKV, pass Q, K
 * and V with roff 0 (or each alone with roff 0, q_dim, q_dim + kv_dim).
 */
int sk_gemm_fused(sk_ctx *ctx, int nmat, const sk_matrix *const *W, const float *d_X, int n,
                  const sk_epilogue *epi);
/* For qk-norm models: per-head RMSNorm of q and k (weights head_dim long, or
 * NULL for none), RoPE and the KV-cache store, for n tokens of
 * qkv[n][q_dim + 2*kv_dim] in natural row order; q goes to epi->q_out. */
int sk_qkv_post(sk_ctx *ctx, const float *d_qkv, int n, const float *d_q_norm, const float *d_k_norm, float eps,
                const sk_epilogue *epi);
/* Causal attention of ntok query tokens (q: ntok x n_head x head_dim) at
 * positions *d_pos0 + t over cache positions 0..*d_pos0 + t; out like q.
 * Dispatches on the context's variant. */
int sk_attention(sk_ctx *ctx, const float *d_q, const uint16_t *d_k, const uint16_t *d_v, float *d_out, int ntok,
                 int n_head, int n_kv_head, int head_dim, int max_ctx, const int32_t *d_pos0);

/* ---- whole-model decode (llama / qwen3 dense) ---- */

typedef struct {
	int n_layer, dim, n_head, n_kv_head, head_dim, ffn, vocab, max_ctx;
	int rope_dim;      /* rotated leading elements of each head (<= head_dim) */
	float eps, freq_base;
	float freq_scale;  /* position multiplier: 1 / linear scaling factor */
	int neox;    /* 1: NEOX halves rope (qwen3), 0: adjacent pairs (llama) */
	int qk_norm; /* qwen3 per-head q/k norm */
} sk_model_config;

/* tensor slots */
#define SK_T_TOKEN_EMBD 0
#define SK_T_OUTPUT_NORM 1
#define SK_T_OUTPUT 2
#define SK_T_ATTN_NORM 3
#define SK_T_Q 4
#define SK_T_K 5
#define SK_T_V 6
#define SK_T_O 7
#define SK_T_Q_NORM 8
#define SK_T_K_NORM 9
#define SK_T_FFN_NORM 10
#define SK_T_GATE 11
#define SK_T_UP 12
#define SK_T_DOWN 13
#define SK_T_ROPE_FREQ 14 /* optional F32 vector of rope_dim/2 frequency divisors */

/* The model runs the context's variant at the time of sk_model_create.
 * SPARKINFER_DOWN_F16=1 at creation (0 or unset: off; another value fails
 * with SK_E_ARG) passes each layer's SwiGLU activation from the gate/up GEMV
 * to the down GEMV as f16 (SK_EPI_SWIGLU_F16, sk_gemv_fused_f16x) in the
 * variant-2 decode step, where every down matrix is Q8_0/Q4_K/Q6_K and ffn
 * a multiple of 32; opt-in: it was slower on an H100 (docs/PERF.md). */
int sk_model_create(sk_ctx *ctx, const sk_model_config *cfg, sk_model **out);
/* The variant a model runs. */
int sk_model_variant(const sk_model *m);
/* 1 when the model's decode steps run as one persistent (cooperative) kernel
 * per step, 0 when as one kernel per op; known after the first decode. The
 * persistent step is used where it applies (variant 2, no qk-norm, head_dim
 * <= 128, cooperative launch supported) when SPARKINFER_PERSISTENT=1 was set
 * when the model was created (it is slower on the H200 so far: opt-in); its
 * logits are bit-identical to the other's. */
int sk_model_persistent(const sk_model *m);
void sk_model_free(sk_model *m);
/* layer is ignored for the global tensors (embd, output norm, output). Norm
 * weights are F32 vectors (rows = 1). */
int sk_model_set(sk_model *m, int slot, int layer, int type, const void *data, int rows, int cols);
/* Run one token at position pos. If logits is non-NULL, the vocab logits are
 * copied to it; *next receives the argmax token. The step is captured in a
 * CUDA graph on first use and replayed after. */
int sk_model_decode(sk_model *m, int token, int pos, float *logits, int32_t *next);
/* Prefill n tokens at positions pos..pos+n-1; logits of the last token are
 * written to logits if non-NULL and *next receives its argmax. */
int sk_model_prefill(sk_model *m, const int32_t *tokens, int n, int pos, float *logits, int32_t *next);
/* Bytes of weights read per decoded token (for the roofline). */
size_t sk_model_weight_bytes(const sk_model *m);

#ifdef __cplusplus
}
#endif
#endif
