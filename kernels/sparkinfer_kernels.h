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

#define SK_ABI_VERSION 1

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

int sk_model_create(sk_ctx *ctx, const sk_model_config *cfg, sk_model **out);
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
