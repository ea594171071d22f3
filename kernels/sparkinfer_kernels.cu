// sparkinfer_kernels.cu — CUDA kernels behind sparkinfer_kernels.h.
//
// Every kernel here has a Go reference in engine/ (the specification); the
// per-op parity tests in engine/cuda run each against it on awkward shapes.
//
// Weight layouts on the device (uploaded from GGUF and repacked where the
// ggml block is not 16-byte aligned):
//   F32       float[rows][cols]
//   F16/BF16  uint16[rows][cols]
//   Q8_0      int8 q[rows][cols] + half d[rows][cols/32]     (ggml: 34-byte blocks {d, q[32]})
//   Q4_K      ggml blocks as is: 144 bytes {half d, half dmin, u8 scales[12], u8 qs[128]}
//   Q6_K      208-byte blocks {u8 ql[128], u8 qh[64], i8 scales[16]} + half d[rows][cols/256]
//             (ggml: 210-byte blocks {ql, qh, scales, half d})

#include "sparkinfer_kernels.h"

#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

struct sk_ctx {
	int device;
	cudaStream_t stream;
	char err[512];
	// scratch for split attention partials
	float *scratch;
	size_t scratch_bytes;
};

struct sk_matrix {
	int type, rows, cols;
	void *q;        // main data
	__half *d;      // separate scales (Q8_0, Q6_K) or null
	size_t bytes;   // device bytes read by one full GEMV
	size_t row_bytes;
};

static int fail(sk_ctx *ctx, int code, const char *fmt, ...) {
	if (ctx) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(ctx->err, sizeof ctx->err, fmt, ap);
		va_end(ap);
	}
	return code;
}

#define CK(ctx, call)                                                                      \
	do {                                                                                   \
		cudaError_t e_ = (call);                                                           \
		if (e_ != cudaSuccess)                                                             \
			return fail((ctx), SK_E_CUDA, "%s: %s (%s:%d)", #call, cudaGetErrorString(e_), \
			            __FILE__, __LINE__);                                               \
	} while (0)

#define CKLAUNCH(ctx) CK(ctx, cudaGetLastError())

static int enter(sk_ctx *ctx) {
	if (!ctx) return SK_E_ARG;
	CK(ctx, cudaSetDevice(ctx->device));
	return SK_OK;
}

#define ENTER(ctx)                        \
	do {                                  \
		int r_ = enter(ctx);              \
		if (r_ != SK_OK) return r_;       \
	} while (0)

extern "C" int sk_abi_version(void) { return SK_ABI_VERSION; }

extern "C" sk_ctx *sk_create(int device, char *err, size_t errlen) {
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess || device < 0 || device >= n) {
		if (err && errlen) {
			snprintf(err, errlen, "no cuda device %d (%d present): %s", device, n,
			         e == cudaSuccess ? "out of range" : cudaGetErrorString(e));
		}
		return nullptr;
	}
	e = cudaSetDevice(device);
	cudaStream_t s = nullptr;
	if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
	if (e != cudaSuccess) {
		if (err && errlen) snprintf(err, errlen, "cuda init: %s", cudaGetErrorString(e));
		return nullptr;
	}
	sk_ctx *c = (sk_ctx *)calloc(1, sizeof(sk_ctx));
	c->device = device;
	c->stream = s;
	return c;
}

extern "C" void sk_destroy(sk_ctx *ctx) {
	if (!ctx) return;
	cudaSetDevice(ctx->device);
	if (ctx->scratch) cudaFree(ctx->scratch);
	cudaStreamDestroy(ctx->stream);
	free(ctx);
}

extern "C" const char *sk_error(const sk_ctx *ctx) { return ctx ? ctx->err : "null context"; }

extern "C" int sk_sync(sk_ctx *ctx) {
	ENTER(ctx);
	CK(ctx, cudaStreamSynchronize(ctx->stream));
	return SK_OK;
}

extern "C" int sk_info(sk_ctx *ctx, sk_device_info *out) {
	ENTER(ctx);
	if (!out) return fail(ctx, SK_E_ARG, "sk_info: null output");
	cudaDeviceProp p;
	CK(ctx, cudaGetDeviceProperties(&p, ctx->device));
	memset(out, 0, sizeof *out);
	snprintf(out->name, sizeof out->name, "%s", p.name);
	out->cc_major = p.major;
	out->cc_minor = p.minor;
	out->sm_count = p.multiProcessorCount;
	out->mem_total = p.totalGlobalMem;
	int v = 0;
	if (cudaDeviceGetAttribute(&v, cudaDevAttrClockRate, ctx->device) == cudaSuccess) out->clock_khz = v;
	if (cudaDeviceGetAttribute(&v, cudaDevAttrMemoryClockRate, ctx->device) == cudaSuccess) out->mem_clock_khz = v;
	if (cudaDeviceGetAttribute(&v, cudaDevAttrGlobalMemoryBusWidth, ctx->device) == cudaSuccess) out->mem_bus_width = v;
	cudaDriverGetVersion(&out->driver_version);
	cudaRuntimeGetVersion(&out->runtime_version);
	return SK_OK;
}

extern "C" int sk_alloc(sk_ctx *ctx, size_t bytes, void **d_out) {
	ENTER(ctx);
	if (!d_out) return fail(ctx, SK_E_ARG, "sk_alloc: null output");
	cudaError_t e = cudaMalloc(d_out, bytes ? bytes : 1);
	if (e != cudaSuccess) return fail(ctx, SK_E_NOMEM, "cudaMalloc(%zu): %s", bytes, cudaGetErrorString(e));
	return SK_OK;
}

extern "C" int sk_free(sk_ctx *ctx, void *d) {
	ENTER(ctx);
	CK(ctx, cudaFree(d));
	return SK_OK;
}

extern "C" int sk_upload(sk_ctx *ctx, void *d_dst, const void *src, size_t n) {
	ENTER(ctx);
	CK(ctx, cudaMemcpyAsync(d_dst, src, n, cudaMemcpyHostToDevice, ctx->stream));
	CK(ctx, cudaStreamSynchronize(ctx->stream));
	return SK_OK;
}

extern "C" int sk_download(sk_ctx *ctx, void *dst, const void *d_src, size_t n) {
	ENTER(ctx);
	CK(ctx, cudaMemcpyAsync(dst, d_src, n, cudaMemcpyDeviceToHost, ctx->stream));
	CK(ctx, cudaStreamSynchronize(ctx->stream));
	return SK_OK;
}

extern "C" int sk_memset(sk_ctx *ctx, void *d, int value, size_t n) {
	ENTER(ctx);
	CK(ctx, cudaMemsetAsync(d, value, n, ctx->stream));
	return SK_OK;
}

extern "C" int sk_copy_bandwidth(sk_ctx *ctx, size_t bytes, int reps, double *out) {
	ENTER(ctx);
	if (!out || reps < 1 || bytes < 1024) return fail(ctx, SK_E_ARG, "sk_copy_bandwidth: bad arguments");
	void *a = nullptr, *b = nullptr;
	CK(ctx, cudaMalloc(&a, bytes));
	cudaError_t e = cudaMalloc(&b, bytes);
	if (e != cudaSuccess) {
		cudaFree(a);
		return fail(ctx, SK_E_NOMEM, "cudaMalloc(%zu): %s", bytes, cudaGetErrorString(e));
	}
	cudaMemsetAsync(a, 1, bytes, ctx->stream);
	cudaEvent_t e0, e1;
	cudaEventCreate(&e0);
	cudaEventCreate(&e1);
	std::vector<float> ms;
	for (int i = 0; i < reps + 2; i++) {
		cudaEventRecord(e0, ctx->stream);
		cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, ctx->stream);
		cudaEventRecord(e1, ctx->stream);
		cudaEventSynchronize(e1);
		float t = 0;
		cudaEventElapsedTime(&t, e0, e1);
		if (i >= 2) ms.push_back(t);  // two warm-ups
	}
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	cudaFree(a);
	cudaFree(b);
	CKLAUNCH(ctx);
	std::sort(ms.begin(), ms.end());
	double med = ms[ms.size() / 2];
	*out = 2.0 * (double)bytes / (med * 1e-3);
	return SK_OK;
}

// ---------------------------------------------------------------- weights

static int block_elems(int type) {
	switch (type) {
	case SK_F32: case SK_F16: case SK_BF16: return 1;
	case SK_Q8_0: return 32;
	case SK_Q4_K: case SK_Q6_K: return 256;
	}
	return 0;
}

static size_t ggml_row_bytes(int type, int cols) {
	switch (type) {
	case SK_F32: return (size_t)cols * 4;
	case SK_F16: case SK_BF16: return (size_t)cols * 2;
	case SK_Q8_0: return (size_t)cols / 32 * 34;
	case SK_Q4_K: return (size_t)cols / 256 * 144;
	case SK_Q6_K: return (size_t)cols / 256 * 210;
	}
	return 0;
}

extern "C" size_t sk_matrix_bytes(const sk_matrix *m) { return m ? m->bytes : 0; }

extern "C" void sk_matrix_free(sk_ctx *ctx, sk_matrix *m) {
	if (!m) return;
	if (ctx) cudaSetDevice(ctx->device);
	if (m->q) cudaFree(m->q);
	if (m->d) cudaFree(m->d);
	free(m);
}

extern "C" int sk_matrix_upload(sk_ctx *ctx, int type, const void *data, int rows, int cols, sk_matrix **out) {
	ENTER(ctx);
	if (!data || !out || rows <= 0 || cols <= 0)
		return fail(ctx, SK_E_ARG, "sk_matrix_upload: bad arguments (rows %d, cols %d)", rows, cols);
	int be = block_elems(type);
	if (be == 0) return fail(ctx, SK_E_UNSUPPORTED, "sk_matrix_upload: unsupported type %d", type);
	if (cols % be != 0) return fail(ctx, SK_E_ARG, "sk_matrix_upload: cols %d not a multiple of %d", cols, be);
	sk_matrix *m = (sk_matrix *)calloc(1, sizeof(sk_matrix));
	m->type = type;
	m->rows = rows;
	m->cols = cols;
	const uint8_t *src = (const uint8_t *)data;
	size_t rb = ggml_row_bytes(type, cols);
	cudaError_t e = cudaSuccess;
	if (type == SK_Q8_0) {
		size_t nb = (size_t)cols / 32;
		std::vector<int8_t> q((size_t)rows * cols);
		std::vector<uint16_t> d((size_t)rows * nb);
		for (size_t r = 0; r < (size_t)rows; r++) {
			for (size_t b = 0; b < nb; b++) {
				const uint8_t *blk = src + r * rb + b * 34;
				memcpy(&d[r * nb + b], blk, 2);
				memcpy(&q[r * cols + b * 32], blk + 2, 32);
			}
		}
		m->row_bytes = cols;
		m->bytes = q.size() + d.size() * 2;
		e = cudaMalloc(&m->q, q.size());
		if (e == cudaSuccess) e = cudaMalloc((void **)&m->d, d.size() * 2);
		if (e == cudaSuccess) e = cudaMemcpy(m->q, q.data(), q.size(), cudaMemcpyHostToDevice);
		if (e == cudaSuccess) e = cudaMemcpy(m->d, d.data(), d.size() * 2, cudaMemcpyHostToDevice);
	} else if (type == SK_Q6_K) {
		size_t nb = (size_t)cols / 256;
		std::vector<uint8_t> q((size_t)rows * nb * 208);
		std::vector<uint16_t> d((size_t)rows * nb);
		for (size_t r = 0; r < (size_t)rows; r++) {
			for (size_t b = 0; b < nb; b++) {
				const uint8_t *blk = src + r * rb + b * 210;
				memcpy(&q[(r * nb + b) * 208], blk, 208);
				memcpy(&d[r * nb + b], blk + 208, 2);
			}
		}
		m->row_bytes = nb * 208;
		m->bytes = q.size() + d.size() * 2;
		e = cudaMalloc(&m->q, q.size());
		if (e == cudaSuccess) e = cudaMalloc((void **)&m->d, d.size() * 2);
		if (e == cudaSuccess) e = cudaMemcpy(m->q, q.data(), q.size(), cudaMemcpyHostToDevice);
		if (e == cudaSuccess) e = cudaMemcpy(m->d, d.data(), d.size() * 2, cudaMemcpyHostToDevice);
	} else {
		size_t n = rb * rows;
		m->row_bytes = rb;
		m->bytes = n;
		e = cudaMalloc(&m->q, n);
		if (e == cudaSuccess) e = cudaMemcpy(m->q, src, n, cudaMemcpyHostToDevice);
	}
	if (e != cudaSuccess) {
		sk_matrix_free(ctx, m);
		return fail(ctx, e == cudaErrorMemoryAllocation ? SK_E_NOMEM : SK_E_CUDA,
		            "sk_matrix_upload(%d x %d, type %d): %s", rows, cols, type, cudaGetErrorString(e));
	}
	*out = m;
	return SK_OK;
}

// ---------------------------------------------------------------- device helpers

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

__device__ __forceinline__ float bf16_to_f(uint16_t h) { return __uint_as_float(((uint32_t)h) << 16); }
__device__ __forceinline__ float f16_to_f(uint16_t h) { return __half2float(__ushort_as_half(h)); }

__device__ __forceinline__ void scale_min_k4(int j, const uint8_t *q, int &d, int &m) {
	if (j < 4) {
		d = q[j] & 63;
		m = q[j + 4] & 63;
	} else {
		d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
		m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
	}
}

struct MatDev {
	const void *q;
	const __half *d;
	int rows, cols;
	size_t row_bytes;
};

static MatDev matdev(const sk_matrix *m) { return MatDev{m->q, m->d, m->rows, m->cols, m->row_bytes}; }

// Dequantize element c of row r (slow path: row lookups, reference-shaped).
template <int T>
__device__ float deq(const MatDev &m, int r, int c) {
	if (T == SK_F32) return ((const float *)m.q)[(size_t)r * m.cols + c];
	if (T == SK_F16) return f16_to_f(((const uint16_t *)m.q)[(size_t)r * m.cols + c]);
	if (T == SK_BF16) return bf16_to_f(((const uint16_t *)m.q)[(size_t)r * m.cols + c]);
	if (T == SK_Q8_0) {
		return __half2float(m.d[(size_t)r * (m.cols / 32) + c / 32]) *
		       (float)((const int8_t *)m.q)[(size_t)r * m.cols + c];
	}
	if (T == SK_Q4_K) {
		const uint8_t *blk = (const uint8_t *)m.q + (size_t)r * m.row_bytes + (size_t)(c / 256) * 144;
		float d = __half2float(*(const __half *)blk), dmin = __half2float(*(const __half *)(blk + 2));
		int i = c % 256, g = i / 64, w = i % 64, hi = w >= 32, l = w % 32;
		int sc, mn;
		scale_min_k4(2 * g + hi, blk + 4, sc, mn);
		uint8_t qb = blk[16 + g * 32 + l];
		int qv = hi ? (qb >> 4) : (qb & 0xF);
		return d * sc * qv - dmin * mn;
	}
	if (T == SK_Q6_K) {
		int nb = m.cols / 256, b = c / 256, i = c % 256;
		const uint8_t *blk = (const uint8_t *)m.q + ((size_t)r * nb + b) * 208;
		float d = __half2float(m.d[(size_t)r * nb + b]);
		int n = i / 128, j = i % 128, quarter = j / 32, l = j % 32;
		const uint8_t *ql = blk + n * 64, *qh = blk + 128 + n * 32;
		const int8_t *sc = (const int8_t *)(blk + 192) + n * 8;
		int low = (quarter & 1) ? ql[l + 32] : ql[l];
		low = (quarter >= 2) ? (low >> 4) : (low & 0xF);
		int high = (qh[l] >> (2 * quarter)) & 3;
		int q = (low | (high << 4)) - 32;
		return d * sc[l / 16 + 2 * quarter] * q;
	}
	return 0.f;
}

// ---------------------------------------------------------------- GEMV / small GEMM
//
// One warp per output row; 4 warps (rows) per block. B tokens share each
// weight load (B = 1 for decode). x is [B][cols], y is [B][rows].

#define GEMV_WARPS 4

template <int T, int B>
__global__ void __launch_bounds__(GEMV_WARPS * 32) k_gemv(MatDev m, const float *__restrict__ x,
                                                          float *__restrict__ y, int accumulate) {
	const int lane = threadIdx.x & 31;
	const int r = blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
	if (r >= m.rows) return;
	const int cols = m.cols;
	float sum[B];
#pragma unroll
	for (int b = 0; b < B; b++) sum[b] = 0.f;

	if (T == SK_F32) {
		const float *w = (const float *)m.q + (size_t)r * cols;
		if ((cols & 3) == 0) {
			for (int c = lane * 4; c < cols; c += 128) {
				float4 wv = *(const float4 *)(w + c);
#pragma unroll
				for (int b = 0; b < B; b++) {
					float4 xv = *(const float4 *)(x + (size_t)b * cols + c);
					sum[b] += wv.x * xv.x + wv.y * xv.y + wv.z * xv.z + wv.w * xv.w;
				}
			}
		} else {
			for (int c = lane; c < cols; c += 32) {
#pragma unroll
				for (int b = 0; b < B; b++) sum[b] += w[c] * x[(size_t)b * cols + c];
			}
		}
	} else if (T == SK_F16 || T == SK_BF16) {
		const uint16_t *w = (const uint16_t *)m.q + (size_t)r * cols;
		if ((cols & 7) == 0) {
			for (int c = lane * 8; c < cols; c += 256) {
				uint4 wv = *(const uint4 *)(w + c);
				const uint16_t *wh = (const uint16_t *)&wv;
				float wf[8];
#pragma unroll
				for (int i = 0; i < 8; i++) wf[i] = T == SK_F16 ? f16_to_f(wh[i]) : bf16_to_f(wh[i]);
#pragma unroll
				for (int b = 0; b < B; b++) {
					const float *xb = x + (size_t)b * cols + c;
					float4 x0 = *(const float4 *)xb, x1 = *(const float4 *)(xb + 4);
					sum[b] += wf[0] * x0.x + wf[1] * x0.y + wf[2] * x0.z + wf[3] * x0.w + wf[4] * x1.x +
					          wf[5] * x1.y + wf[6] * x1.z + wf[7] * x1.w;
				}
			}
		} else {
			for (int c = lane; c < cols; c += 32) {
				float wf = T == SK_F16 ? f16_to_f(w[c]) : bf16_to_f(w[c]);
#pragma unroll
				for (int b = 0; b < B; b++) sum[b] += wf * x[(size_t)b * cols + c];
			}
		}
	} else if (T == SK_Q8_0) {
		const int8_t *w = (const int8_t *)m.q + (size_t)r * cols;
		const __half *ds = m.d + (size_t)r * (cols / 32);
		for (int c = lane * 16; c < cols; c += 512) {
			int4 wv = *(const int4 *)(w + c);
			const int8_t *wb = (const int8_t *)&wv;
			float d = __half2float(ds[c >> 5]);
#pragma unroll
			for (int b = 0; b < B; b++) {
				const float4 *xb = (const float4 *)(x + (size_t)b * cols + c);
				float acc = 0.f;
#pragma unroll
				for (int i = 0; i < 4; i++) {
					float4 xv = xb[i];
					acc += wb[4 * i] * xv.x + wb[4 * i + 1] * xv.y + wb[4 * i + 2] * xv.z + wb[4 * i + 3] * xv.w;
				}
				sum[b] += d * acc;
			}
		}
	} else if (T == SK_Q4_K) {
		const int nsb = cols / 256;
		const uint8_t *row = (const uint8_t *)m.q + (size_t)r * m.row_bytes;
		const int l8 = lane & 7, g = l8 >> 1, h = l8 & 1;
		for (int sb = lane >> 3; sb < nsb; sb += 4) {
			const uint8_t *blk = row + (size_t)sb * 144;
			const __half2 dm = *(const __half2 *)blk;
			const float d = __low2float(dm), dmin = __high2float(dm);
			int sc1, m1, sc2, m2;
			scale_min_k4(2 * g, blk + 4, sc1, m1);
			scale_min_k4(2 * g + 1, blk + 4, sc2, m2);
			uint4 qv = *(const uint4 *)(blk + 16 + g * 32 + h * 16);
			const uint8_t *qb = (const uint8_t *)&qv;
			const int c_lo = sb * 256 + g * 64 + h * 16, c_hi = c_lo + 32;
#pragma unroll
			for (int b = 0; b < B; b++) {
				const float4 *xl = (const float4 *)(x + (size_t)b * cols + c_lo);
				const float4 *xh = (const float4 *)(x + (size_t)b * cols + c_hi);
				float al = 0.f, ah = 0.f, sl = 0.f, sh = 0.f;
#pragma unroll
				for (int i = 0; i < 4; i++) {
					float4 a = xl[i], c4 = xh[i];
					al += (qb[4 * i] & 15) * a.x + (qb[4 * i + 1] & 15) * a.y + (qb[4 * i + 2] & 15) * a.z +
					      (qb[4 * i + 3] & 15) * a.w;
					ah += (qb[4 * i] >> 4) * c4.x + (qb[4 * i + 1] >> 4) * c4.y + (qb[4 * i + 2] >> 4) * c4.z +
					      (qb[4 * i + 3] >> 4) * c4.w;
					sl += a.x + a.y + a.z + a.w;
					sh += c4.x + c4.y + c4.z + c4.w;
				}
				sum[b] += d * (sc1 * al + sc2 * ah) - dmin * (m1 * sl + m2 * sh);
			}
		}
	} else if (T == SK_Q6_K) {
		const int nsb = cols / 256;
		const uint8_t *row = (const uint8_t *)m.q + (size_t)r * m.row_bytes;
		const __half *ds = m.d + (size_t)r * nsb;
		const int l8 = lane & 7, n = l8 >> 2, p = l8 & 3, l0 = p * 8, is = p >> 1;
		for (int sb = lane >> 3; sb < nsb; sb += 4) {
			const uint8_t *blk = row + (size_t)sb * 208;
			const float d = __half2float(ds[sb]);
			uint2 qa = *(const uint2 *)(blk + n * 64 + l0);
			uint2 qc = *(const uint2 *)(blk + n * 64 + 32 + l0);
			uint2 qh2 = *(const uint2 *)(blk + 128 + n * 32 + l0);
			const uint8_t *A = (const uint8_t *)&qa, *C = (const uint8_t *)&qc, *H = (const uint8_t *)&qh2;
			const int8_t *sc = (const int8_t *)(blk + 192) + n * 8;
			const float s0 = sc[is], s2 = sc[is + 2], s4 = sc[is + 4], s6 = sc[is + 6];
			const int c0 = sb * 256 + n * 128 + l0;
#pragma unroll
			for (int b = 0; b < B; b++) {
				const float *xb = x + (size_t)b * cols + c0;
				float a1 = 0.f, a2 = 0.f, a3 = 0.f, a4 = 0.f;
#pragma unroll
				for (int i = 0; i < 8; i++) {
					int q1 = ((A[i] & 0xF) | (((H[i] >> 0) & 3) << 4)) - 32;
					int q2 = ((C[i] & 0xF) | (((H[i] >> 2) & 3) << 4)) - 32;
					int q3 = ((A[i] >> 4) | (((H[i] >> 4) & 3) << 4)) - 32;
					int q4 = ((C[i] >> 4) | (((H[i] >> 6) & 3) << 4)) - 32;
					a1 += q1 * xb[i];
					a2 += q2 * xb[i + 32];
					a3 += q3 * xb[i + 64];
					a4 += q4 * xb[i + 96];
				}
				sum[b] += d * (s0 * a1 + s2 * a2 + s4 * a3 + s6 * a4);
			}
		}
	}

#pragma unroll
	for (int b = 0; b < B; b++) {
		float s = warp_sum(sum[b]);
		if (lane == 0) {
			float *o = y + (size_t)b * m.rows + r;
			*o = accumulate ? *o + s : s;
		}
	}
}

template <int B>
static int launch_gemv_b(sk_ctx *ctx, const sk_matrix *W, const float *x, float *y, int acc) {
	MatDev m = matdev(W);
	dim3 grid((W->rows + GEMV_WARPS - 1) / GEMV_WARPS), block(GEMV_WARPS * 32);
	cudaStream_t s = ctx->stream;
	switch (W->type) {
	case SK_F32: k_gemv<SK_F32, B><<<grid, block, 0, s>>>(m, x, y, acc); break;
	case SK_F16: k_gemv<SK_F16, B><<<grid, block, 0, s>>>(m, x, y, acc); break;
	case SK_BF16: k_gemv<SK_BF16, B><<<grid, block, 0, s>>>(m, x, y, acc); break;
	case SK_Q8_0: k_gemv<SK_Q8_0, B><<<grid, block, 0, s>>>(m, x, y, acc); break;
	case SK_Q4_K: k_gemv<SK_Q4_K, B><<<grid, block, 0, s>>>(m, x, y, acc); break;
	case SK_Q6_K: k_gemv<SK_Q6_K, B><<<grid, block, 0, s>>>(m, x, y, acc); break;
	default: return fail(ctx, SK_E_UNSUPPORTED, "gemv: unsupported type %d", W->type);
	}
	CKLAUNCH(ctx);
	return SK_OK;
}

extern "C" int sk_gemv(sk_ctx *ctx, const sk_matrix *W, const float *d_x, float *d_y, int accumulate) {
	ENTER(ctx);
	if (!W || !d_x || !d_y) return fail(ctx, SK_E_ARG, "sk_gemv: null argument");
	return launch_gemv_b<1>(ctx, W, d_x, d_y, accumulate);
}

extern "C" int sk_gemm(sk_ctx *ctx, const sk_matrix *W, const float *d_X, float *d_Y, int n, int accumulate) {
	ENTER(ctx);
	if (!W || !d_X || !d_Y || n < 0) return fail(ctx, SK_E_ARG, "sk_gemm: bad argument");
	int t = 0, rc = SK_OK;
	const size_t xs = W->cols, ys = W->rows;
	while (rc == SK_OK && t < n) {
		int left = n - t;
		if (left >= 8) {
			rc = launch_gemv_b<8>(ctx, W, d_X + t * xs, d_Y + t * ys, accumulate);
			t += 8;
		} else if (left >= 4) {
			rc = launch_gemv_b<4>(ctx, W, d_X + t * xs, d_Y + t * ys, accumulate);
			t += 4;
		} else if (left >= 2) {
			rc = launch_gemv_b<2>(ctx, W, d_X + t * xs, d_Y + t * ys, accumulate);
			t += 2;
		} else {
			rc = launch_gemv_b<1>(ctx, W, d_X + t * xs, d_Y + t * ys, accumulate);
			t += 1;
		}
	}
	return rc;
}

template <int T>
__global__ void k_get_rows(MatDev m, const int32_t *ids, float *y) {
	const int t = blockIdx.x;
	int r = ids[t];
	if (r < 0 || r >= m.rows) r = 0;  // the host validates ids; never read out of range
	for (int c = threadIdx.x; c < m.cols; c += blockDim.x) y[(size_t)t * m.cols + c] = deq<T>(m, r, c);
}

extern "C" int sk_get_rows(sk_ctx *ctx, const sk_matrix *W, const int32_t *d_ids, float *d_y, int n) {
	ENTER(ctx);
	if (!W || !d_ids || !d_y || n <= 0) return fail(ctx, SK_E_ARG, "sk_get_rows: bad argument");
	MatDev m = matdev(W);
	cudaStream_t s = ctx->stream;
	switch (W->type) {
	case SK_F32: k_get_rows<SK_F32><<<n, 256, 0, s>>>(m, d_ids, d_y); break;
	case SK_F16: k_get_rows<SK_F16><<<n, 256, 0, s>>>(m, d_ids, d_y); break;
	case SK_BF16: k_get_rows<SK_BF16><<<n, 256, 0, s>>>(m, d_ids, d_y); break;
	case SK_Q8_0: k_get_rows<SK_Q8_0><<<n, 256, 0, s>>>(m, d_ids, d_y); break;
	case SK_Q4_K: k_get_rows<SK_Q4_K><<<n, 256, 0, s>>>(m, d_ids, d_y); break;
	case SK_Q6_K: k_get_rows<SK_Q6_K><<<n, 256, 0, s>>>(m, d_ids, d_y); break;
	default: return fail(ctx, SK_E_UNSUPPORTED, "get_rows: unsupported type %d", W->type);
	}
	CKLAUNCH(ctx);
	return SK_OK;
}

// ---------------------------------------------------------------- elementwise ops

__global__ void k_rmsnorm(const float *x, const float *w, float *y, int n, float eps) {
	const float *xr = x + (size_t)blockIdx.x * n;
	float *yr = y + (size_t)blockIdx.x * n;
	float ss = 0.f;
	for (int i = threadIdx.x; i < n; i += blockDim.x) ss += xr[i] * xr[i];
	__shared__ float red[32];
	ss = warp_sum(ss);
	if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = ss;
	__syncthreads();
	if (threadIdx.x < 32) {
		float v = threadIdx.x < (blockDim.x >> 5) ? red[threadIdx.x] : 0.f;
		v = warp_sum(v);
		if (threadIdx.x == 0) red[0] = v;
	}
	__syncthreads();
	const float scale = rsqrtf(red[0] / n + eps);
	for (int i = threadIdx.x; i < n; i += blockDim.x) yr[i] = xr[i] * scale * w[i];
}

extern "C" int sk_rmsnorm(sk_ctx *ctx, const float *d_x, const float *d_w, float *d_y, int n, int rows, float eps) {
	ENTER(ctx);
	if (!d_x || !d_w || !d_y || n <= 0 || rows <= 0) return fail(ctx, SK_E_ARG, "sk_rmsnorm: bad argument");
	int threads = n >= 1024 ? 1024 : ((n + 31) / 32) * 32;
	k_rmsnorm<<<rows, threads, 0, ctx->stream>>>(d_x, d_w, d_y, n, eps);
	CKLAUNCH(ctx);
	return SK_OK;
}

__global__ void k_rope(float *x, int ntok, int nheads, int hd, int rd, const int32_t *pos0, float base,
                       float fscale, int neox, const float *freq) {
	const int half = rd / 2;
	const int idx = blockIdx.x * blockDim.x + threadIdx.x;
	const int total = ntok * nheads * half;
	if (idx >= total) return;
	const int i = idx % half, h = (idx / half) % nheads, t = idx / (half * nheads);
	const double pos = (double)(*pos0 + t) * (double)fscale;
	double theta = pos * pow((double)base, -2.0 * (double)i / (double)rd);
	if (freq) theta /= (double)freq[i];
	double sn, cs;
	sincos(theta, &sn, &cs);
	float *v = x + ((size_t)t * nheads + h) * hd;
	const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
	const float x0 = v[a], x1 = v[b];
	v[a] = (float)(x0 * cs - x1 * sn);
	v[b] = (float)(x0 * sn + x1 * cs);
}

extern "C" int sk_rope(sk_ctx *ctx, float *d_x, int ntok, int nheads, int head_dim, int rope_dim,
                       const int32_t *d_pos0, float freq_base, float freq_scale, int neox, const float *d_freq) {
	ENTER(ctx);
	if (!d_x || !d_pos0 || ntok <= 0 || nheads <= 0 || head_dim <= 0 || rope_dim <= 0 || (rope_dim & 1) ||
	    rope_dim > head_dim)
		return fail(ctx, SK_E_ARG, "sk_rope: bad argument");
	int total = ntok * nheads * (rope_dim / 2);
	k_rope<<<(total + 255) / 256, 256, 0, ctx->stream>>>(d_x, ntok, nheads, head_dim, rope_dim, d_pos0, freq_base,
	                                                      freq_scale, neox, d_freq);
	CKLAUNCH(ctx);
	return SK_OK;
}

__global__ void k_swiglu(const float *g, const float *u, float *o, int n) {
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) {
		float a = g[i];
		o[i] = a / (1.f + expf(-a)) * u[i];
	}
}

extern "C" int sk_swiglu(sk_ctx *ctx, const float *d_gate, const float *d_up, float *d_out, int n) {
	ENTER(ctx);
	if (!d_gate || !d_up || !d_out || n <= 0) return fail(ctx, SK_E_ARG, "sk_swiglu: bad argument");
	k_swiglu<<<(n + 255) / 256, 256, 0, ctx->stream>>>(d_gate, d_up, d_out, n);
	CKLAUNCH(ctx);
	return SK_OK;
}

__global__ void k_argmax(const float *x, int n, int32_t *out) {
	float best = -INFINITY;
	int bi = 0x7fffffff;
	for (int i = threadIdx.x; i < n; i += blockDim.x) {
		float v = x[i];
		if (v > best || (v == best && i < bi)) {
			best = v;
			bi = i;
		}
	}
	__shared__ float sv[1024];
	__shared__ int si[1024];
	sv[threadIdx.x] = best;
	si[threadIdx.x] = bi;
	__syncthreads();
	for (int s = blockDim.x / 2; s > 0; s >>= 1) {
		if (threadIdx.x < s) {
			float ov = sv[threadIdx.x + s];
			int oi = si[threadIdx.x + s];
			if (ov > sv[threadIdx.x] || (ov == sv[threadIdx.x] && oi < si[threadIdx.x])) {
				sv[threadIdx.x] = ov;
				si[threadIdx.x] = oi;
			}
		}
		__syncthreads();
	}
	if (threadIdx.x == 0) out[0] = si[0] == 0x7fffffff ? 0 : si[0];
}

extern "C" int sk_argmax(sk_ctx *ctx, const float *d_x, int n, int32_t *d_out) {
	ENTER(ctx);
	if (!d_x || !d_out || n <= 0) return fail(ctx, SK_E_ARG, "sk_argmax: bad argument");
	k_argmax<<<1, 1024, 0, ctx->stream>>>(d_x, n, d_out);
	CKLAUNCH(ctx);
	return SK_OK;
}

// ---------------------------------------------------------------- attention

__global__ void k_kv_store(const float *k, const float *v, __half *kc, __half *vc, int ntok, int nkv, int hd,
                           int max_ctx, const int32_t *pos0) {
	const int idx = blockIdx.x * blockDim.x + threadIdx.x;
	const int total = ntok * nkv * hd;
	if (idx >= total) return;
	const int d = idx % hd, h = (idx / hd) % nkv, t = idx / (hd * nkv);
	const int p = *pos0 + t;
	if (p < 0 || p >= max_ctx) return;
	const size_t o = ((size_t)h * max_ctx + p) * hd + d;
	kc[o] = __float2half(k[idx]);
	vc[o] = __float2half(v[idx]);
}

extern "C" int sk_kv_store(sk_ctx *ctx, const float *d_k, const float *d_v, uint16_t *d_kc, uint16_t *d_vc,
                           int ntok, int n_kv_head, int head_dim, int max_ctx, const int32_t *d_pos0) {
	ENTER(ctx);
	if (!d_k || !d_v || !d_kc || !d_vc || !d_pos0 || ntok <= 0 || n_kv_head <= 0 || head_dim <= 0)
		return fail(ctx, SK_E_ARG, "sk_kv_store: bad argument");
	int total = ntok * n_kv_head * head_dim;
	k_kv_store<<<(total + 255) / 256, 256, 0, ctx->stream>>>(d_k, d_v, (__half *)d_kc, (__half *)d_vc, ntok,
	                                                          n_kv_head, head_dim, max_ctx, d_pos0);
	CKLAUNCH(ctx);
	return SK_OK;
}

#define ATT_SPLIT 256
#define ATT_WARPS 4
#define ATT_MAXD 8  // head_dim <= 256

// grid (n_head, nsplit, ntok). Query token t attends to positions 0..pos0+t.
// Partials: part[((t*n_head + h)*nsplit + s)*(hd+2)] = {m, l, acc[hd]}.
__global__ void __launch_bounds__(ATT_WARPS * 32) k_attn_split(const float *q, const __half *kc, const __half *vc,
                                                               float *part, int n_head, int n_kv, int hd,
                                                               int max_ctx, int nsplit, const int32_t *pos0) {
	const int h = blockIdx.x, s = blockIdx.y, t = blockIdx.z;
	const int n = min(*pos0 + t + 1, max_ctx);
	const int start = s * ATT_SPLIT;
	if (start >= n) return;
	const int end = min(n, start + ATT_SPLIT);
	const int kvh = h / (n_head / n_kv);
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const float scale = rsqrtf((float)hd);
	const float *qh = q + ((size_t)t * n_head + h) * hd;
	float qr[ATT_MAXD], acc[ATT_MAXD];
#pragma unroll
	for (int j = 0; j < ATT_MAXD; j++) {
		int d = lane + 32 * j;
		qr[j] = d < hd ? qh[d] * scale : 0.f;
		acc[j] = 0.f;
	}
	float m = -INFINITY, l = 0.f;
	const __half *kb = kc + (size_t)kvh * max_ctx * hd, *vb = vc + (size_t)kvh * max_ctx * hd;
	for (int p = start + warp; p < end; p += ATT_WARPS) {
		const __half *kp = kb + (size_t)p * hd;
		float dot = 0.f;
#pragma unroll
		for (int j = 0; j < ATT_MAXD; j++) {
			int d = lane + 32 * j;
			if (d < hd) dot += qr[j] * __half2float(kp[d]);
		}
		dot = warp_sum(dot);
		const float mn = fmaxf(m, dot);
		const float corr = __expf(m - mn), e = __expf(dot - mn);
		l = l * corr + e;
		const __half *vp = vb + (size_t)p * hd;
#pragma unroll
		for (int j = 0; j < ATT_MAXD; j++) {
			int d = lane + 32 * j;
			acc[j] = acc[j] * corr + (d < hd ? e * __half2float(vp[d]) : 0.f);
		}
		m = mn;
	}
	__shared__ float sm[ATT_WARPS], sl[ATT_WARPS];
	__shared__ float sacc[ATT_WARPS][ATT_MAXD * 32];
	if (lane == 0) {
		sm[warp] = m;
		sl[warp] = l;
	}
#pragma unroll
	for (int j = 0; j < ATT_MAXD; j++) sacc[warp][lane + 32 * j] = acc[j];
	__syncthreads();
	float M = -INFINITY;
	for (int w = 0; w < ATT_WARPS; w++) M = fmaxf(M, sm[w]);
	float *out = part + (((size_t)t * n_head + h) * nsplit + s) * (hd + 2);
	for (int d = threadIdx.x; d < hd; d += blockDim.x) {
		float a = 0.f;
		for (int w = 0; w < ATT_WARPS; w++)
			if (sm[w] != -INFINITY) a += sacc[w][d] * __expf(sm[w] - M);
		out[2 + d] = a;
	}
	if (threadIdx.x == 0) {
		float L = 0.f;
		for (int w = 0; w < ATT_WARPS; w++)
			if (sm[w] != -INFINITY) L += sl[w] * __expf(sm[w] - M);
		out[0] = M;
		out[1] = L;
	}
}

// grid (n_head, ntok)
__global__ void k_attn_combine(const float *part, float *out, int n_head, int hd, int max_ctx, int nsplit,
                               const int32_t *pos0) {
	const int h = blockIdx.x, t = blockIdx.y;
	const int n = min(*pos0 + t + 1, max_ctx);
	const int ns = (n + ATT_SPLIT - 1) / ATT_SPLIT;
	const float *pb = part + ((size_t)t * n_head + h) * nsplit * (hd + 2);
	float M = -INFINITY;
	for (int s = 0; s < ns; s++) M = fmaxf(M, pb[(size_t)s * (hd + 2)]);
	float L = 0.f;
	for (int s = 0; s < ns; s++) L += pb[(size_t)s * (hd + 2) + 1] * __expf(pb[(size_t)s * (hd + 2)] - M);
	for (int d = threadIdx.x; d < hd; d += blockDim.x) {
		float a = 0.f;
		for (int s = 0; s < ns; s++) a += pb[(size_t)s * (hd + 2) + 2 + d] * __expf(pb[(size_t)s * (hd + 2)] - M);
		out[((size_t)t * n_head + h) * hd + d] = a / L;
	}
}

static int reserve_scratch(sk_ctx *ctx, size_t bytes) {
	if (ctx->scratch_bytes >= bytes) return SK_OK;
	if (ctx->scratch) cudaFree(ctx->scratch);
	ctx->scratch = nullptr;
	ctx->scratch_bytes = 0;
	cudaError_t e = cudaMalloc((void **)&ctx->scratch, bytes);
	if (e != cudaSuccess) return fail(ctx, SK_E_NOMEM, "attention scratch (%zu bytes): %s", bytes, cudaGetErrorString(e));
	ctx->scratch_bytes = bytes;
	return SK_OK;
}

static int attention(sk_ctx *ctx, const float *q, const __half *kc, const __half *vc, float *out, int ntok,
                     int n_head, int n_kv, int hd, int max_ctx, const int32_t *pos0) {
	if (hd > ATT_MAXD * 32 || n_kv <= 0 || n_head % n_kv != 0)
		return fail(ctx, SK_E_UNSUPPORTED, "attention: head_dim %d / heads %d/%d unsupported", hd, n_head, n_kv);
	const int nsplit = (max_ctx + ATT_SPLIT - 1) / ATT_SPLIT;
	int rc = reserve_scratch(ctx, (size_t)ntok * n_head * nsplit * (hd + 2) * sizeof(float));
	if (rc != SK_OK) return rc;
	k_attn_split<<<dim3(n_head, nsplit, ntok), ATT_WARPS * 32, 0, ctx->stream>>>(q, kc, vc, ctx->scratch, n_head,
	                                                                              n_kv, hd, max_ctx, nsplit, pos0);
	CKLAUNCH(ctx);
	int threads = hd < 32 ? 32 : (hd > 256 ? 256 : hd);
	k_attn_combine<<<dim3(n_head, ntok), threads, 0, ctx->stream>>>(ctx->scratch, out, n_head, hd, max_ctx, nsplit,
	                                                                 pos0);
	CKLAUNCH(ctx);
	return SK_OK;
}

extern "C" int sk_attention_decode(sk_ctx *ctx, const float *d_q, const uint16_t *d_k, const uint16_t *d_v,
                                   float *d_out, int n_head, int n_kv_head, int head_dim, int max_ctx,
                                   const int32_t *d_pos) {
	ENTER(ctx);
	if (!d_q || !d_k || !d_v || !d_out || !d_pos || n_head <= 0 || head_dim <= 0 || max_ctx <= 0)
		return fail(ctx, SK_E_ARG, "sk_attention_decode: bad argument");
	return attention(ctx, d_q, (const __half *)d_k, (const __half *)d_v, d_out, 1, n_head, n_kv_head, head_dim,
	                 max_ctx, d_pos);
}

// ---------------------------------------------------------------- model

#define PREFILL_CHUNK 32

struct Layer {
	float *attn_norm, *ffn_norm, *q_norm, *k_norm;
	sk_matrix *wq, *wk, *wv, *wo, *gate, *up, *down;
	__half *kc, *vc;
};

struct sk_model {
	sk_ctx *ctx;
	sk_model_config cfg;
	sk_matrix *embd, *output;
	float *out_norm, *rope_freq;
	std::vector<Layer> layers;
	// activations for up to PREFILL_CHUNK tokens
	float *x, *xn, *q, *k, *v, *att, *g, *u, *logits;
	int32_t *d_tok, *d_pos, *d_next;
	int32_t *h_step;  // pinned: [0..PREFILL_CHUNK) tokens, [PREFILL_CHUNK] pos, [PREFILL_CHUNK+1] next
	cudaGraphExec_t graph;
	bool graph_ready;
	std::vector<void *> allocs;
};

static int model_alloc(sk_model *m, size_t bytes, void **out) {
	int rc = sk_alloc(m->ctx, bytes, out);
	if (rc == SK_OK) m->allocs.push_back(*out);
	return rc;
}

extern "C" void sk_model_free(sk_model *m) {
	if (!m) return;
	cudaSetDevice(m->ctx->device);
	if (m->graph_ready) cudaGraphExecDestroy(m->graph);
	sk_matrix_free(m->ctx, m->embd);
	if (m->output != m->embd) sk_matrix_free(m->ctx, m->output);
	for (auto &L : m->layers) {
		sk_matrix_free(m->ctx, L.wq);
		sk_matrix_free(m->ctx, L.wk);
		sk_matrix_free(m->ctx, L.wv);
		sk_matrix_free(m->ctx, L.wo);
		sk_matrix_free(m->ctx, L.gate);
		sk_matrix_free(m->ctx, L.up);
		sk_matrix_free(m->ctx, L.down);
	}
	for (void *p : m->allocs) cudaFree(p);
	if (m->h_step) cudaFreeHost(m->h_step);
	delete m;
}

extern "C" int sk_model_create(sk_ctx *ctx, const sk_model_config *c, sk_model **out) {
	ENTER(ctx);
	if (!c || !out || c->n_layer <= 0 || c->dim <= 0 || c->n_head <= 0 || c->n_kv_head <= 0 || c->head_dim <= 0 ||
	    c->ffn <= 0 || c->vocab <= 0 || c->max_ctx <= 0 || c->n_head % c->n_kv_head != 0 ||
	    c->head_dim > ATT_MAXD * 32 || c->rope_dim <= 0 || (c->rope_dim & 1) || c->rope_dim > c->head_dim)
		return fail(ctx, SK_E_ARG, "sk_model_create: bad config");
	sk_model *m = new sk_model();
	m->ctx = ctx;
	m->cfg = *c;
	m->layers.resize(c->n_layer);
	const size_t T = PREFILL_CHUNK, qd = (size_t)c->n_head * c->head_dim, kd = (size_t)c->n_kv_head * c->head_dim;
	int rc = SK_OK;
	rc = rc ? rc : model_alloc(m, T * c->dim * 4, (void **)&m->x);
	rc = rc ? rc : model_alloc(m, T * c->dim * 4, (void **)&m->xn);
	rc = rc ? rc : model_alloc(m, T * qd * 4, (void **)&m->q);
	rc = rc ? rc : model_alloc(m, T * kd * 4, (void **)&m->k);
	rc = rc ? rc : model_alloc(m, T * kd * 4, (void **)&m->v);
	rc = rc ? rc : model_alloc(m, T * qd * 4, (void **)&m->att);
	rc = rc ? rc : model_alloc(m, T * c->ffn * 4, (void **)&m->g);
	rc = rc ? rc : model_alloc(m, T * c->ffn * 4, (void **)&m->u);
	rc = rc ? rc : model_alloc(m, (size_t)c->vocab * 4, (void **)&m->logits);
	rc = rc ? rc : model_alloc(m, T * 4, (void **)&m->d_tok);
	rc = rc ? rc : model_alloc(m, 4, (void **)&m->d_pos);
	rc = rc ? rc : model_alloc(m, 4, (void **)&m->d_next);
	for (int l = 0; rc == SK_OK && l < c->n_layer; l++) {
		size_t kv = (size_t)c->n_kv_head * c->max_ctx * c->head_dim * 2;
		rc = model_alloc(m, kv, (void **)&m->layers[l].kc);
		if (rc == SK_OK) rc = model_alloc(m, kv, (void **)&m->layers[l].vc);
		if (rc == SK_OK) rc = sk_memset(ctx, m->layers[l].kc, 0, kv);
		if (rc == SK_OK) rc = sk_memset(ctx, m->layers[l].vc, 0, kv);
	}
	if (rc == SK_OK) {
		const int nsplit = (c->max_ctx + ATT_SPLIT - 1) / ATT_SPLIT;
		rc = reserve_scratch(ctx, T * c->n_head * nsplit * (c->head_dim + 2) * sizeof(float));
	}
	if (rc == SK_OK) {
		cudaError_t e = cudaMallocHost((void **)&m->h_step, (T + 2) * sizeof(int32_t));
		if (e != cudaSuccess) rc = fail(ctx, SK_E_NOMEM, "pinned step buffer: %s", cudaGetErrorString(e));
	}
	if (rc != SK_OK) {
		sk_model_free(m);
		return rc;
	}
	*out = m;
	return SK_OK;
}

extern "C" int sk_model_set(sk_model *m, int slot, int layer, int type, const void *data, int rows, int cols) {
	if (!m) return SK_E_ARG;
	sk_ctx *ctx = m->ctx;
	ENTER(ctx);
	const sk_model_config &c = m->cfg;
	bool global = slot == SK_T_TOKEN_EMBD || slot == SK_T_OUTPUT_NORM || slot == SK_T_OUTPUT || slot == SK_T_ROPE_FREQ;
	if (!global && (layer < 0 || layer >= c.n_layer)) return fail(ctx, SK_E_ARG, "sk_model_set: layer %d out of range", layer);
	if (m->graph_ready) return fail(ctx, SK_E_ARG, "sk_model_set: model already running");
	bool isvec = slot == SK_T_OUTPUT_NORM || slot == SK_T_ATTN_NORM || slot == SK_T_FFN_NORM ||
	             slot == SK_T_Q_NORM || slot == SK_T_K_NORM || slot == SK_T_ROPE_FREQ;
	if (isvec) {
		if (type != SK_F32 || rows != 1) return fail(ctx, SK_E_ARG, "sk_model_set: vector weights must be F32 with one row");
		int want = (slot == SK_T_Q_NORM || slot == SK_T_K_NORM) ? c.head_dim : c.dim;
		if (slot == SK_T_ROPE_FREQ) want = c.rope_dim / 2;
		if (cols != want) return fail(ctx, SK_E_ARG, "sk_model_set: norm slot %d has %d elements, want %d", slot, cols, want);
		float *d = nullptr;
		int rc = model_alloc(m, (size_t)cols * 4, (void **)&d);
		if (rc == SK_OK) rc = sk_upload(ctx, d, data, (size_t)cols * 4);
		if (rc != SK_OK) return rc;
		if (slot == SK_T_OUTPUT_NORM) m->out_norm = d;
		else if (slot == SK_T_ROPE_FREQ) m->rope_freq = d;
		else if (slot == SK_T_ATTN_NORM) m->layers[layer].attn_norm = d;
		else if (slot == SK_T_FFN_NORM) m->layers[layer].ffn_norm = d;
		else if (slot == SK_T_Q_NORM) m->layers[layer].q_norm = d;
		else m->layers[layer].k_norm = d;
		return SK_OK;
	}
	int wr = 0, wc = 0;
	const int qd = c.n_head * c.head_dim, kd = c.n_kv_head * c.head_dim;
	switch (slot) {
	case SK_T_TOKEN_EMBD: case SK_T_OUTPUT: wr = c.vocab; wc = c.dim; break;
	case SK_T_Q: wr = qd; wc = c.dim; break;
	case SK_T_K: case SK_T_V: wr = kd; wc = c.dim; break;
	case SK_T_O: wr = c.dim; wc = qd; break;
	case SK_T_GATE: case SK_T_UP: wr = c.ffn; wc = c.dim; break;
	case SK_T_DOWN: wr = c.dim; wc = c.ffn; break;
	default: return fail(ctx, SK_E_ARG, "sk_model_set: unknown slot %d", slot);
	}
	if (rows != wr || cols != wc)
		return fail(ctx, SK_E_ARG, "sk_model_set: slot %d layer %d is %dx%d, want %dx%d", slot, layer, rows, cols, wr, wc);
	sk_matrix *mat = nullptr;
	int rc = sk_matrix_upload(ctx, type, data, rows, cols, &mat);
	if (rc != SK_OK) return rc;
	Layer *L = global ? nullptr : &m->layers[layer];
	sk_matrix **dst = nullptr;
	switch (slot) {
	case SK_T_TOKEN_EMBD: dst = &m->embd; break;
	case SK_T_OUTPUT: dst = &m->output; break;
	case SK_T_Q: dst = &L->wq; break;
	case SK_T_K: dst = &L->wk; break;
	case SK_T_V: dst = &L->wv; break;
	case SK_T_O: dst = &L->wo; break;
	case SK_T_GATE: dst = &L->gate; break;
	case SK_T_UP: dst = &L->up; break;
	case SK_T_DOWN: dst = &L->down; break;
	}
	if (*dst) sk_matrix_free(ctx, *dst);
	*dst = mat;
	return SK_OK;
}

static int model_check(sk_model *m) {
	sk_ctx *ctx = m->ctx;
	if (!m->embd || !m->out_norm) return fail(ctx, SK_E_ARG, "model: token embedding or output norm not set");
	for (int l = 0; l < m->cfg.n_layer; l++) {
		Layer &L = m->layers[l];
		if (!L.attn_norm || !L.ffn_norm || !L.wq || !L.wk || !L.wv || !L.wo || !L.gate || !L.up || !L.down)
			return fail(ctx, SK_E_ARG, "model: layer %d incomplete", l);
		if (m->cfg.qk_norm && (!L.q_norm || !L.k_norm)) return fail(ctx, SK_E_ARG, "model: layer %d lacks q/k norm", l);
	}
	return SK_OK;
}

// Enqueue the forward pass for n tokens whose ids are in d_tok and whose
// first position is *d_pos; leaves the last token's logits in m->logits and
// its argmax in d_next.
static int enqueue_forward(sk_model *m, int n) {
	sk_ctx *ctx = m->ctx;
	const sk_model_config &c = m->cfg;
	const int qd = c.n_head * c.head_dim, kd = c.n_kv_head * c.head_dim;
	int rc = sk_get_rows(ctx, m->embd, m->d_tok, m->x, n);
	for (int l = 0; rc == SK_OK && l < c.n_layer; l++) {
		Layer &L = m->layers[l];
		rc = sk_rmsnorm(ctx, m->x, L.attn_norm, m->xn, c.dim, n, c.eps);
		if (rc == SK_OK) rc = sk_gemm(ctx, L.wq, m->xn, m->q, n, 0);
		if (rc == SK_OK) rc = sk_gemm(ctx, L.wk, m->xn, m->k, n, 0);
		if (rc == SK_OK) rc = sk_gemm(ctx, L.wv, m->xn, m->v, n, 0);
		if (rc == SK_OK && c.qk_norm) {
			rc = sk_rmsnorm(ctx, m->q, L.q_norm, m->q, c.head_dim, n * c.n_head, c.eps);
			if (rc == SK_OK) rc = sk_rmsnorm(ctx, m->k, L.k_norm, m->k, c.head_dim, n * c.n_kv_head, c.eps);
		}
		if (rc == SK_OK)
			rc = sk_rope(ctx, m->q, n, c.n_head, c.head_dim, c.rope_dim, m->d_pos, c.freq_base, c.freq_scale, c.neox,
			             m->rope_freq);
		if (rc == SK_OK)
			rc = sk_rope(ctx, m->k, n, c.n_kv_head, c.head_dim, c.rope_dim, m->d_pos, c.freq_base, c.freq_scale,
			             c.neox, m->rope_freq);
		if (rc == SK_OK)
			rc = sk_kv_store(ctx, m->k, m->v, (uint16_t *)L.kc, (uint16_t *)L.vc, n, c.n_kv_head, c.head_dim, c.max_ctx,
			                 m->d_pos);
		if (rc == SK_OK)
			rc = attention(ctx, m->q, L.kc, L.vc, m->att, n, c.n_head, c.n_kv_head, c.head_dim, c.max_ctx, m->d_pos);
		if (rc == SK_OK) rc = sk_gemm(ctx, L.wo, m->att, m->x, n, 1);
		if (rc == SK_OK) rc = sk_rmsnorm(ctx, m->x, L.ffn_norm, m->xn, c.dim, n, c.eps);
		if (rc == SK_OK) rc = sk_gemm(ctx, L.gate, m->xn, m->g, n, 0);
		if (rc == SK_OK) rc = sk_gemm(ctx, L.up, m->xn, m->u, n, 0);
		if (rc == SK_OK) rc = sk_swiglu(ctx, m->g, m->u, m->g, n * c.ffn);
		if (rc == SK_OK) rc = sk_gemm(ctx, L.down, m->g, m->x, n, 1);
		(void)qd;
		(void)kd;
	}
	const float *last = m->x + (size_t)(n - 1) * c.dim;
	if (rc == SK_OK) rc = sk_rmsnorm(ctx, last, m->out_norm, m->xn, c.dim, 1, c.eps);
	if (rc == SK_OK) rc = sk_gemv(ctx, m->output ? m->output : m->embd, m->xn, m->logits, 0);
	if (rc == SK_OK) rc = sk_argmax(ctx, m->logits, c.vocab, m->d_next);
	return rc;
}

extern "C" int sk_model_decode(sk_model *m, int token, int pos, float *logits, int32_t *next) {
	if (!m) return SK_E_ARG;
	sk_ctx *ctx = m->ctx;
	ENTER(ctx);
	const sk_model_config &c = m->cfg;
	if (token < 0 || token >= c.vocab) return fail(ctx, SK_E_ARG, "decode: token %d out of range", token);
	if (pos < 0 || pos >= c.max_ctx) return fail(ctx, SK_E_ARG, "decode: position %d outside the context of %d", pos, c.max_ctx);
	int rc = model_check(m);
	if (rc != SK_OK) return rc;
	m->h_step[0] = token;
	m->h_step[PREFILL_CHUNK] = pos;
	if (!m->graph_ready) {
		cudaGraph_t g;
		CK(ctx, cudaStreamBeginCapture(ctx->stream, cudaStreamCaptureModeThreadLocal));
		cudaMemcpyAsync(m->d_tok, m->h_step, 4, cudaMemcpyHostToDevice, ctx->stream);
		cudaMemcpyAsync(m->d_pos, m->h_step + PREFILL_CHUNK, 4, cudaMemcpyHostToDevice, ctx->stream);
		rc = enqueue_forward(m, 1);
		cudaMemcpyAsync(m->h_step + PREFILL_CHUNK + 1, m->d_next, 4, cudaMemcpyDeviceToHost, ctx->stream);
		cudaError_t e = cudaStreamEndCapture(ctx->stream, &g);
		if (rc != SK_OK) {
			if (e == cudaSuccess) cudaGraphDestroy(g);
			return rc;
		}
		CK(ctx, e);
		e = cudaGraphInstantiateWithFlags(&m->graph, g, 0);
		cudaGraphDestroy(g);
		CK(ctx, e);
		m->graph_ready = true;
	}
	CK(ctx, cudaGraphLaunch(m->graph, ctx->stream));
	if (logits) CK(ctx, cudaMemcpyAsync(logits, m->logits, (size_t)c.vocab * 4, cudaMemcpyDeviceToHost, ctx->stream));
	CK(ctx, cudaStreamSynchronize(ctx->stream));
	if (next) *next = m->h_step[PREFILL_CHUNK + 1];
	return SK_OK;
}

extern "C" int sk_model_prefill(sk_model *m, const int32_t *tokens, int n, int pos, float *logits, int32_t *next) {
	if (!m) return SK_E_ARG;
	sk_ctx *ctx = m->ctx;
	ENTER(ctx);
	const sk_model_config &c = m->cfg;
	if (!tokens || n <= 0) return fail(ctx, SK_E_ARG, "prefill: no tokens");
	if (pos < 0 || (long)pos + n > c.max_ctx)
		return fail(ctx, SK_E_ARG, "prefill: positions %d..%d outside the context of %d", pos, pos + n - 1, c.max_ctx);
	for (int i = 0; i < n; i++)
		if (tokens[i] < 0 || tokens[i] >= c.vocab) return fail(ctx, SK_E_ARG, "prefill: token %d out of range", tokens[i]);
	int rc = model_check(m);
	if (rc != SK_OK) return rc;
	for (int done = 0; done < n; done += PREFILL_CHUNK) {
		int k = std::min(PREFILL_CHUNK, n - done);
		memcpy(m->h_step, tokens + done, (size_t)k * 4);
		m->h_step[PREFILL_CHUNK] = pos + done;
		CK(ctx, cudaMemcpyAsync(m->d_tok, m->h_step, (size_t)k * 4, cudaMemcpyHostToDevice, ctx->stream));
		CK(ctx, cudaMemcpyAsync(m->d_pos, m->h_step + PREFILL_CHUNK, 4, cudaMemcpyHostToDevice, ctx->stream));
		rc = enqueue_forward(m, k);
		if (rc != SK_OK) return rc;
		// the host buffer is reused by the next chunk: wait for the copies
		CK(ctx, cudaStreamSynchronize(ctx->stream));
	}
	int32_t nx = 0;
	CK(ctx, cudaMemcpyAsync(&nx, m->d_next, 4, cudaMemcpyDeviceToHost, ctx->stream));
	if (logits) CK(ctx, cudaMemcpyAsync(logits, m->logits, (size_t)c.vocab * 4, cudaMemcpyDeviceToHost, ctx->stream));
	CK(ctx, cudaStreamSynchronize(ctx->stream));
	if (next) *next = nx;
	return SK_OK;
}

extern "C" size_t sk_model_weight_bytes(const sk_model *m) {
	if (!m) return 0;
	size_t b = m->out_norm ? (size_t)m->cfg.dim * 4 : 0;
	b += m->output ? m->output->bytes : (m->embd ? m->embd->bytes : 0);
	if (m->embd) b += m->embd->bytes / (size_t)m->cfg.vocab;  // one embedding row
	for (const Layer &L : m->layers) {
		const sk_matrix *ms[] = {L.wq, L.wk, L.wv, L.wo, L.gate, L.up, L.down};
		for (const sk_matrix *x : ms)
			if (x) b += x->bytes;
		b += (size_t)m->cfg.dim * 8;
	}
	return b;
}
