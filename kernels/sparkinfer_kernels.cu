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
//   Q4_K      ggml's 144-byte blocks {half d, half dmin, u8 scales[12], u8 qs[128]}, qs in another order
//             of its 16-byte pieces (Q4_REPACK: piece p of ggml's at q4k_poff(p))
//   Q6_K      208-byte blocks {u8 ql[128], u8 qh[64], i8 scales[16]} + half d[rows][cols/256]
//             (ggml: 210-byte blocks {ql, qh, scales, half d})

#include "sparkinfer_kernels.h"

#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cooperative_groups.h>

#include <algorithm>
#include <cctype>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace cg = cooperative_groups;

struct sk_ctx {
	int device;
	cudaStream_t stream;
	char err[512];
	// scratch for split attention partials
	float *scratch;
	size_t scratch_bytes;
	int variant;   // SK_VARIANT_*
	int sm_count;
	// scratch of the op-level fused GEMM fallback (never captured in a graph)
	float *tmp;
	size_t tmp_bytes;
	int g2_smem;   // dynamic shared memory limit set on k_gemv2
	int smem_optin;  // the device's dynamic shared memory limit per block
	// f16 copy of a GEMM's activations (never captured in a graph)
	__half *xh;
	size_t xh_bytes;
	// split-K partial sums of a GEMM (never captured in a graph)
	float *kpart;
	size_t kpart_bytes;
	int pdl;       // launch v2 GEMVs with programmatic dependent launch
	unsigned mm2_ready;  // k_gemm_mma2 instantiations whose attributes are set (mm2_go)
	// the device launches thread block clusters (decode attention's combine):
	// 0 no, 1 for contexts of up to one cluster of splits, 2 also for longer
	// ones (two-level combine)
	int clusters;
	// decode attention on the tensor cores may stage ATT_MMA_FAT keys per
	// block (its kernels' dynamic shared memory limit is set: ATT_MMA_FAT)
	int att_fat;
	// keys a block of the tensor-core attention kernels stages past the fat
	// splits' contexts: ATT_MMA_THIN2 where two such blocks fit an SM, else
	// ATT_MMA_THIN (att_thin_init)
	int att_thin;
	// clusters of ATT_CLN blocks of the tensor-core attention kernels, with the
	// thin staging, that the device places at once (0: no clusters, or the
	// device cannot say; att_mma_clusters), which caps their splits
	int att_mma_clu;
	int att_ring;  // the ring kernel's shared memory fits (att_ring_init)
	double g2_pf_max;  // bytes: the most a GEMV launch's start-of-block prefetch may ask for (g2_pf)
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

static bool att_clusters_fit();
static int att_fat_init(int optin);
static int att_thin_init(int optin, bool fat, bool clusters);
static int att_mma_clusters(int thin);
static int dec_carve_pct(int device);
static int att_ring_init(int optin, int carve);
static void dec_carve_init(int carve);

// the most MB a GEMV launch's start-of-block L2 prefetch may ask for (g2_pf)
#ifndef G2_PF_MAX_MB
#define G2_PF_MAX_MB 10
#endif
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
	int variant = SK_VARIANT_DEFAULT;
	const char *ev = getenv("SPARKINFER_KERNEL_VARIANT");
	if (ev && *ev) {
		if (strcmp(ev, "1") == 0) variant = SK_VARIANT_V1;
		else if (strcmp(ev, "2") == 0) variant = SK_VARIANT_V2;
		else {
			if (err && errlen)
				snprintf(err, errlen, "SPARKINFER_KERNEL_VARIANT=%.32s: unknown kernel variant (want 1 or 2)", ev);
			cudaStreamDestroy(s);
			return nullptr;
		}
	}
	// Thread block clusters for decode attention's combine (where the device
	// launches them and a cluster of the attention kernels fits): 2 also the
	// two-level combine beyond one cluster of splits (the default), 1 only
	// contexts of at most one cluster of splits, 0 none (tests of the
	// fallback, measurements)
	int clusters = 2;
	const char *cv = getenv("SPARKINFER_CLUSTERS");
	if (cv && *cv) {
		if (strlen(cv) == 1 && cv[0] >= '0' && cv[0] <= '2') clusters = cv[0] - '0';
		else {
			if (err && errlen) snprintf(err, errlen, "SPARKINFER_CLUSTERS=%.32s: unknown setting (want 0, 1 or 2)", cv);
			cudaStreamDestroy(s);
			return nullptr;
		}
	}
	// the GEMVs' start-of-block L2 prefetch: at most this many MB per launch
	// (g2_pf; for measurements: the results are the same either way)
	long pf_mb = G2_PF_MAX_MB;
	const char *pfv = getenv("SPARKINFER_G2_PF_MAX");
	if (pfv && *pfv) {
		char *endp = nullptr;
		pf_mb = strtol(pfv, &endp, 10);
		if (!isdigit((unsigned char)pfv[0]) || *endp || pf_mb > 1000000) {  // (a leading digit: not negative)
			if (err && errlen) snprintf(err, errlen, "SPARKINFER_G2_PF_MAX=%.32s: want a whole number of MB", pfv);
			cudaStreamDestroy(s);
			return nullptr;
		}
	}
	int sms = 0;
	if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || sms <= 0) sms = 1;
	sk_ctx *c = (sk_ctx *)calloc(1, sizeof(sk_ctx));
	if (!c) {
		if (err && errlen) snprintf(err, errlen, "out of host memory");
		cudaStreamDestroy(s);
		return nullptr;
	}
	c->device = device;
	c->stream = s;
	c->variant = variant;
	c->sm_count = sms;
	c->g2_pf_max = (double)pf_mb * 1e6;
	// shared memory one block may opt into (227 KB on the H100/H200, about
	// 99 KB on sm_120)
	int optin = 0;
	if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess || optin < 48 * 1024)
		optin = 48 * 1024;
	c->smem_optin = optin;
	// Programmatic dependent launch (Hopper and later, CUDA 12.3+ for graph
	// capture): a GEMV starts moving its weights while its predecessor
	// finishes. SPARKINFER_PDL=0 turns it off (for measurements).
	int major = 0;
	cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
	const char *pv = getenv("SPARKINFER_PDL");
	c->pdl = major >= 9 && !(pv && strcmp(pv, "0") == 0);
	int cl = 0;
	c->clusters = clusters > 0 && cudaDeviceGetAttribute(&cl, cudaDevAttrClusterLaunch, device) == cudaSuccess && cl &&
	                      att_clusters_fit()
	                  ? clusters
	                  : 0;
	c->att_fat = att_fat_init(optin);
	c->att_thin = att_thin_init(optin, c->att_fat, c->clusters);
	c->att_mma_clu = c->clusters ? att_mma_clusters(c->att_thin) : 0;
	// the ring's shared memory carveout, and with DEC_CARVE_KB the GEMVs' too
	const int carve = dec_carve_pct(device);
	c->att_ring = att_ring_init(optin, carve);
	dec_carve_init(carve);
	return c;
}

extern "C" void sk_destroy(sk_ctx *ctx) {
	if (!ctx) return;
	cudaSetDevice(ctx->device);
	if (ctx->scratch) cudaFree(ctx->scratch);
	if (ctx->tmp) cudaFree(ctx->tmp);
	if (ctx->xh) cudaFree(ctx->xh);
	if (ctx->kpart) cudaFree(ctx->kpart);
	cudaStreamDestroy(ctx->stream);
	free(ctx);
}

extern "C" const char *sk_error(const sk_ctx *ctx) { return ctx ? ctx->err : "null context"; }

extern "C" int sk_set_variant(sk_ctx *ctx, int variant) {
	if (!ctx) return SK_E_ARG;
	if (variant != SK_VARIANT_V1 && variant != SK_VARIANT_V2)
		return fail(ctx, SK_E_ARG, "sk_set_variant: unknown variant %d", variant);
	ctx->variant = variant;
	return SK_OK;
}

extern "C" int sk_get_variant(const sk_ctx *ctx) { return ctx ? ctx->variant : 0; }

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

extern "C" int sk_rope_perm(int n_heads, int head_dim, int rope_dim, int neox, int32_t *perm) {
	if (!perm || n_heads <= 0 || head_dim <= 0 || (head_dim & 1) || rope_dim <= 0 || (rope_dim & 1) ||
	    rope_dim > head_dim)
		return SK_E_ARG;
	const int half = rope_dim / 2;
	for (int h = 0; h < n_heads; h++) {
		int32_t *p = perm + (size_t)h * head_dim;
		for (int k = 0; k < half; k++) {
			p[2 * k] = h * head_dim + (neox ? k : 2 * k);
			p[2 * k + 1] = h * head_dim + (neox ? k + half : 2 * k + 1);
		}
		for (int s = rope_dim; s < head_dim; s++) p[s] = h * head_dim + s;
	}
	return SK_OK;
}

// Q4_K's qs on the device: ggml's 16-byte pieces 0..7 (piece p: bytes 16p..
// of qs, the low or high half of the 32 bytes of sub-blocks p & ~1, p | 1)
// stored as 0, 2, 4, 6, 1, 3, 5, 7, so that the four lanes that take a
// super-block in the decode GEMVs (lane g: sub-blocks 2g, 2g+1) read each
// other's neighbours: one 64-byte span per load instruction, every lane its
// own group's pieces, no shuffle (Q4_XCHG's exchange before it: the main
// loop of the Q4_K GEMV, nvcc 11.8, 547 -> 480 instructions per round, its
// 16 shuffles and 32 selects gone; 514 with X_SWZ's address arithmetic). Every reader of Q4_K on the device takes
// the pieces through q4k_poff. 0: ggml's order (A/B). With the activations
// in their old order (X_SWZ 0) this alone lost on the H200 (decode tok/s at
// 128 / 4k tokens of context, session 18): 7B Q4_K_M 419.0 / 337.9 against
// 455.4 / 357.6, TinyLlama Q4_K_M 1,254.2 / 1,142.3 against 1,296.0 /
// 1,179.2 (each lane then read its group's activations, four lanes of two
// super-blocks in a quarter warp the same bank group); with X_SWZ see there.
#ifndef Q4_REPACK
#define Q4_REPACK 1
#endif
// byte offset in a device Q4_K block of qs piece p (of ggml's order)
__host__ __device__ constexpr int q4k_poff(int p) { return Q4_REPACK ? 16 + 16 * ((p & 1) * 4 + (p >> 1)) : 16 + 16 * p; }

extern "C" int sk_matrix_upload(sk_ctx *ctx, int type, const void *data, int rows, int cols, sk_matrix **out) {
	return sk_matrix_upload_perm(ctx, type, data, rows, cols, nullptr, out);
}

extern "C" int sk_matrix_upload_perm(sk_ctx *ctx, int type, const void *data, int rows, int cols,
                                     const int32_t *perm, sk_matrix **out) {
	ENTER(ctx);
	if (!data || !out || rows <= 0 || cols <= 0)
		return fail(ctx, SK_E_ARG, "sk_matrix_upload: bad arguments (rows %d, cols %d)", rows, cols);
	int be = block_elems(type);
	if (be == 0) return fail(ctx, SK_E_UNSUPPORTED, "sk_matrix_upload: unsupported type %d", type);
	if (cols % be != 0) return fail(ctx, SK_E_ARG, "sk_matrix_upload: cols %d not a multiple of %d", cols, be);
	size_t rb = ggml_row_bytes(type, cols);
	const uint8_t *src0 = (const uint8_t *)data;
	std::vector<uint8_t> permuted;
	if (perm) {
		std::vector<char> seen((size_t)rows, 0);
		for (int r = 0; r < rows; r++) {
			if (perm[r] < 0 || perm[r] >= rows || seen[perm[r]])
				return fail(ctx, SK_E_ARG, "sk_matrix_upload: row order is not a permutation (entry %d = %d)", r,
				            perm[r]);
			seen[perm[r]] = 1;
		}
		permuted.resize(rb * rows);
		for (int r = 0; r < rows; r++) memcpy(&permuted[rb * r], src0 + rb * perm[r], rb);
		src0 = permuted.data();
	}
	sk_matrix *m = (sk_matrix *)calloc(1, sizeof(sk_matrix));
	if (!m) return fail(ctx, SK_E_NOMEM, "sk_matrix_upload: out of host memory");
	m->type = type;
	m->rows = rows;
	m->cols = cols;
	const uint8_t *src = src0;
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
		// d padded to an even count (a zero half): the prefill GEMM copies each
		// d as the 4-byte-aligned pair that holds it
		std::vector<uint16_t> d(((size_t)rows * nb + 1) & ~(size_t)1);
		for (size_t r = 0; r < (size_t)rows; r++) {
			for (size_t b = 0; b < nb; b++) {
				const uint8_t *blk = src + r * rb + b * 210;
				memcpy(&q[(r * nb + b) * 208], blk, 208);
				memcpy(&d[r * nb + b], blk + 208, 2);
			}
		}
		m->row_bytes = nb * 208;
		m->bytes = q.size() + (size_t)rows * nb * 2;
		e = cudaMalloc(&m->q, q.size());
		if (e == cudaSuccess) e = cudaMalloc((void **)&m->d, d.size() * 2);
		if (e == cudaSuccess) e = cudaMemcpy(m->q, q.data(), q.size(), cudaMemcpyHostToDevice);
		if (e == cudaSuccess) e = cudaMemcpy(m->d, d.data(), d.size() * 2, cudaMemcpyHostToDevice);
	} else {
		size_t n = rb * rows;
		std::vector<uint8_t> q4;  // Q4_K: the blocks with their quant pieces in the device's order
		if (type == SK_Q4_K && Q4_REPACK) {
			q4.resize(n);
			for (size_t b = 0; b < n / 144; b++) {
				const uint8_t *in = src + b * 144;
				uint8_t *o = &q4[b * 144];
				memcpy(o, in, 16);  // {d, dmin, scales[12]}
				for (int p = 0; p < 8; p++) memcpy(o + q4k_poff(p), in + 16 + 16 * p, 16);
			}
			src = q4.data();
		}
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

// Programmatic dependent launch. A kernel launched with it may start before
// its predecessor in the stream has finished: it must not read what the
// predecessor writes, nor write anything, before pdl_wait() (which waits
// for the predecessor's completion and memory flush; a no-op for a kernel
// launched normally). pdl_trigger() lets the successor be scheduled early.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

#if defined(CUDART_VERSION) && CUDART_VERSION >= 12030
#define SK_HAVE_PDL 1
#endif

// Launch k on the context's stream, with programmatic dependent launch when
// the context enables it and this build's runtime supports it.
template <typename... KArgs, typename... Args>
static cudaError_t launch_pdl(sk_ctx *ctx, void (*k)(KArgs...), dim3 grid, dim3 block, size_t smem, Args... args) {
#ifdef SK_HAVE_PDL
	if (ctx->pdl) {
		cudaLaunchConfig_t cfg;
		memset(&cfg, 0, sizeof cfg);
		cfg.gridDim = grid;
		cfg.blockDim = block;
		cfg.dynamicSmemBytes = smem;
		cfg.stream = ctx->stream;
		cudaLaunchAttribute attr[1];
		memset(attr, 0, sizeof attr);
		attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
		attr[0].val.programmaticStreamSerializationAllowed = 1;
		cfg.attrs = attr;
		cfg.numAttrs = 1;
		return cudaLaunchKernelEx(&cfg, k, args...);
	}
#endif
	k<<<grid, block, smem, ctx->stream>>>(args...);
	return cudaGetLastError();
}

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
		const int qi = g * 32 + l;  // byte of ggml's qs
		uint8_t qb = blk[q4k_poff(qi >> 4) + (qi & 15)];
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
			uint4 qv = *(const uint4 *)(blk + q4k_poff(2 * g + h));
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

// variant 2 (defined below)
static int gemv2_launch(sk_ctx *ctx, int nmat, const sk_matrix *const *W, const float *x, const float *normw,
                        float eps, const sk_epilogue *epi, int t0, bool xh = false);
static int gemm_fused(sk_ctx *ctx, int nmat, const sk_matrix *const *W, const float *X, int n,
                      const sk_epilogue *epi, float *tmp);

static sk_epilogue plain_epi(float *y, int ldy, int accumulate) {
	sk_epilogue e;
	memset(&e, 0, sizeof e);
	e.mode = accumulate ? SK_EPI_ACC : SK_EPI_STORE;
	e.y = y;
	e.ldy = ldy;
	return e;
}

extern "C" int sk_gemv(sk_ctx *ctx, const sk_matrix *W, const float *d_x, float *d_y, int accumulate) {
	ENTER(ctx);
	if (!W || !d_x || !d_y) return fail(ctx, SK_E_ARG, "sk_gemv: null argument");
	if (ctx->variant == SK_VARIANT_V2) {
		sk_epilogue e = plain_epi(d_y, W->rows, accumulate);
		return gemv2_launch(ctx, 1, &W, d_x, nullptr, 0.f, &e, 0);
	}
	return launch_gemv_b<1>(ctx, W, d_x, d_y, accumulate);
}

extern "C" int sk_gemm(sk_ctx *ctx, const sk_matrix *W, const float *d_X, float *d_Y, int n, int accumulate) {
	ENTER(ctx);
	if (!W || !d_X || !d_Y || n < 0) return fail(ctx, SK_E_ARG, "sk_gemm: bad argument");
	if (ctx->variant == SK_VARIANT_V2 && n > 0) {
		sk_epilogue e = plain_epi(d_Y, W->rows, accumulate);
		if (n == 1) return gemv2_launch(ctx, 1, &W, d_X, nullptr, 0.f, &e, 0);
		return gemm_fused(ctx, 1, &W, d_X, n, &e, nullptr);
	}
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

// Grow a context buffer to at least bytes (never under graph capture: the
// buffers belong to the op-level and prefill paths).
static int reserve(sk_ctx *ctx, void **buf, size_t *have, size_t bytes, const char *what) {
	if (*have >= bytes) return SK_OK;
	if (*buf) CK(ctx, cudaFree(*buf));
	*buf = nullptr;
	*have = 0;
	const cudaError_t e = cudaMalloc(buf, bytes);
	if (e != cudaSuccess) return fail(ctx, SK_E_NOMEM, "%s (%zu bytes): %s", what, bytes, cudaGetErrorString(e));
	*have = bytes;
	return SK_OK;
}

static int reserve_scratch(sk_ctx *ctx, size_t bytes) {
	return reserve(ctx, (void **)&ctx->scratch, &ctx->scratch_bytes, bytes, "attention scratch");
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
	if (ctx->variant == SK_VARIANT_V2)
		return sk_attention(ctx, d_q, d_k, d_v, d_out, 1, n_head, n_kv_head, head_dim, max_ctx, d_pos);
	return attention(ctx, d_q, (const __half *)d_k, (const __half *)d_v, d_out, 1, n_head, n_kv_head, head_dim,
	                 max_ctx, d_pos);
}

// ================================================================ variant 2
//
// Fused decode GEMV (prologue: RMSNorm + int8 activation quantization into
// shared memory; body: two rows per warp with dp4a; epilogue: store,
// accumulate, SwiGLU or RoPE + KV-cache store), a tensor-core GEMM for
// prefill with the same epilogues, length-sized GQA decode attention and a
// tiled causal prefill attention. The Go references in engine/cuda's tests
// are the specification of each.

static bool is_quant(int t) { return t == SK_Q8_0 || t == SK_Q4_K || t == SK_Q6_K; }

// Epilogue parameters on the device.
struct EpiDev {
	int mode;
	float *y;
	int ldy, roff;
	float *q_out;
	__half *kc, *vc;
	int n_head, n_kv, hd, rd, max_ctx, neox;
	float fscale;
	double lbase;  // log2 of the frequency base, for exp2 in place of pow
	const float *freq;
	const int32_t *pos0;
};

static EpiDev epidev(const sk_epilogue *e) {
	EpiDev d;
	d.mode = e->mode;
	d.y = e->y;
	d.ldy = e->ldy;
	d.roff = e->roff;
	d.q_out = e->q_out;
	d.kc = (__half *)e->k_cache;
	d.vc = (__half *)e->v_cache;
	d.n_head = e->n_head;
	d.n_kv = e->n_kv_head;
	d.hd = e->head_dim;
	d.rd = e->rope_dim;
	d.max_ctx = e->max_ctx;
	d.neox = e->neox;
	d.fscale = e->freq_scale;
	d.lbase = log2((double)e->freq_base);
	d.freq = e->freq;
	d.pos0 = e->pos0;
	return d;
}

__device__ __forceinline__ float silu_mul(float g, float u) { return g / (1.f + expf(-g)) * u; }

// The rotation angle of pair i at position p (as k_rope).
__device__ __forceinline__ void rope_cs(const EpiDev &e, int p, int i, double &sn, double &cs) {
	// base^(-2i/rd) as exp2(-2i/rd * log2(base)): the same value to a few
	// ulps of a double, far cheaper than pow (lane 0 of each GEMV warp runs
	// this for every row pair of Q and K)
	double theta = (double)p * (double)e.fscale * exp2(-2.0 * (double)i / (double)e.rd * e.lbase);
	if (e.freq) theta /= (double)e.freq[i];
	sincos(theta, &sn, &cs);
}

// Write the results v0, v1 of rows r, r+1 (r even, in launch rows) for token
// t. has1 is false when row r+1 does not exist (odd row counts, STORE/ACC).
__device__ __forceinline__ void epi_pair(const EpiDev &e, int t, int r, float v0, float v1, bool has1) {
	if (e.mode == SK_EPI_STORE || e.mode == SK_EPI_ACC) {
		float *o = e.y + (size_t)t * e.ldy + e.roff + r;
		if (e.mode == SK_EPI_ACC) {
			o[0] += v0;
			if (has1) o[1] += v1;
		} else {
			o[0] = v0;
			if (has1) o[1] = v1;
		}
		return;
	}
	if (e.mode == SK_EPI_SWIGLU) {
		e.y[(size_t)t * e.ldy + (r >> 1)] = silu_mul(v0, v1);
		return;
	}
	// QKV
	const int R = e.roff + r;
	const int qd = e.n_head * e.hd, kd = e.n_kv * e.hd;
	const int p = *e.pos0 + t;
	int rr, h, s;
	int region;
	if (R < qd) {
		region = 0;
		rr = R;
	} else if (R < qd + kd) {
		region = 1;
		rr = R - qd;
	} else {
		region = 2;
		rr = R - qd - kd;
	}
	h = rr / e.hd;
	s = rr - h * e.hd;
	int a = s, b = s + 1;
	if (region < 2 && s < e.rd) {
		const int k = s >> 1, half = e.rd >> 1;
		a = e.neox ? k : 2 * k;
		b = e.neox ? k + half : 2 * k + 1;
		double sn, cs;
		rope_cs(e, p, k, sn, cs);
		const float x0 = v0, x1 = v1;
		v0 = (float)(x0 * cs - x1 * sn);
		v1 = (float)(x0 * sn + x1 * cs);
	}
	if (region == 0) {
		float *q = e.q_out + (size_t)t * qd + (size_t)h * e.hd;
		q[a] = v0;
		q[b] = v1;
		return;
	}
	if (p < 0 || p >= e.max_ctx) return;
	__half *c = (region == 1 ? e.kc : e.vc) + ((size_t)h * e.max_ctx + p) * e.hd;
	c[a] = __float2half(v0);
	c[b] = __float2half(v1);
}

// The decode GEMVs' output of one row pair: YH, the SwiGLU as f16
// (SK_EPI_SWIGLU_F16, the f16 hand-off's kernels), else epi_pair.
template <bool YH>
__device__ __forceinline__ void epi_out(const EpiDev &e, int t, int r, float v0, float v1, bool has1) {
	if (YH) ((__half *)e.y)[(size_t)t * e.ldy + (r >> 1)] = __float2half_rn(silu_mul(v0, v1));
	else epi_pair(e, t, r, v0, v1, has1);
}

// ---------------------------------------------------------------- trace (development)

// -DSK_TRACE=1: every block of the decode GEMVs and of the decode attention
// records when it started and ended (%globaltimer, ns) and its phases
// (clock64 cycles: start to the programmatic-launch wait's end, to the end
// of the prologue, to the end); sk_model_free writes the records as CSV to
// $SK_TRACE_OUT. A measurement aid only: the records cost a barrier and an
// atomic per block.
#ifndef SK_TRACE
#define SK_TRACE 0
#endif
#if SK_TRACE
struct TraceRec {
	unsigned long long g0, g1;
	long long c1, c2, c3;
	int tag, grid, block, cols, rows, sm;
};
#define SK_TRACE_N (1 << 18)
__device__ TraceRec sk_trace[SK_TRACE_N];
__device__ unsigned int sk_trace_n;
__device__ __forceinline__ unsigned long long gtimer() {
	unsigned long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}
__device__ __forceinline__ void trace_rec(unsigned long long g0, long long k0, long long k1, long long k2, int tag,
                                          int grid, int block, int cols, int rows, long long k3 = -1) {
	__syncthreads();
	if (threadIdx.x) return;
	if (k3 < 0) k3 = clock64();
	const unsigned int i = atomicAdd(&sk_trace_n, 1u);
	if (i >= SK_TRACE_N) return;
	unsigned int sm;
	asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
	sk_trace[i] = TraceRec{g0, gtimer(), k1 - k0, k2 - k1, k3 - k2, tag, grid, block, cols, rows, (int)sm};
}
#define TRACE_START() const unsigned long long tr_g0 = gtimer(); const long long tr_k0 = clock64(); long long tr_k1 = tr_k0, tr_k2 = tr_k0, tr_kx = tr_k0, tr_ky = tr_k0; \
	(void)tr_k1, (void)tr_k2, (void)tr_kx, (void)tr_ky
#define TRACE_MARK(v) v = clock64()
// SK_TRACE=2: a GEMV block's record splits its prologue instead (c1: from the
// wait's end until thread 0 holds its x, c2: the norm's block reduction, c3:
// the quantization and the barrier after it). TRACE_USE waits for a loaded
// value before the next mark: a trap if it equals FLT_MAX, which ptxas keeps
// (until session 22 it was a move of the value into an unused register,
// which ptxas dropped, so that c1 timed the loads' issue, not their return).
#define TRACE_USE(v) asm volatile("{\n\t.reg .pred p;\n\tsetp.eq.f32 p, %0, 0f7F7FFFFF;\n\t@p trap;\n\t}" ::"f"(v))
// the decode attention's phases (thread 0 of the block): keys done, splits
// merged (in the cluster or into partials); its record's c1, c2, c3 are
// then keys, merge and the rest (the combine)
__shared__ long long tr_att1, tr_att2;
#define TRACE_ATT(v) \
	if (threadIdx.x == 0) v = clock64()
#else
#define TRACE_START()
#define TRACE_MARK(v)
#define TRACE_ATT(v)
#define TRACE_USE(v)
#endif

// ---------------------------------------------------------------- fused GEMV

// Warps per block of the decode GEMVs (k_gemv2; the persistent step keeps
// MK_WARPS). 16 with G2_MINB 1 (one block per SM, the same warps and
// registers per SM) is an A/B: every block loads and quantizes the whole
// activation, so half the blocks halve that replicated work (the down GEMV's
// x loads take 1-2 us, PERF.md). On the H200 (decode tok/s at 128 / 4k, 3
// runs, one machine start, two rounds): 7B Q4_K_M 463.1 / 351.6 and 460.3 /
// 348.7 against 451.6 / 349.6 and 451.2 / 347.8; 7B Q8_0 unchanged (394.0 /
// 309.6, 395.7 / 307.1 against 396.0 / 308.0, 397.5 / 305.8); TinyLlama
// Q4_K_M 1,238.0 / 982.6 and 1,222.9 / 982.2 against 1,247.8 / 987.4 and
// 1,261.8 / 992.9. With it the
// persistent step's logits may differ in the last bits from the per-op
// step's for a normed activation of more than 4,096 columns or of a length
// that is not a multiple of 32 (the norm's sum then adds in another order);
// TestDecodePersistent's models are narrower and aligned.
// And a GEMV of fewer than 16 x SMs row pairs runs on fewer SMs (TinyLlama's
// O and down: 64 blocks of 16 warps instead of 128 of 8).
#ifndef G2_WARPS
#define G2_WARPS 8
#endif
#define G2_MAXMAT 3
#define G2_Q4K_Q6K 100  // k_gemv2's T for Q4_K matrices followed by one Q6_K matrix
#ifndef G2_MINB
#define G2_MINB (G2_WARPS >= 16 ? 1 : 2)  // blocks per SM the register budget allows (3: no faster on the H200)
#endif
// Two threads per block of 32 in the prologue when the blocks fit one pass
// (0: one): TinyLlama's 2,048-column prologues then use 128 threads, not 64.
// A/B on the H200 (decode tok/s at 128 / 4k tokens of context): TinyLlama
// Q8_0 1,067 / 871 against 1,017 / 838, Q4_K_M 990 / 803 against 941 / 764,
// 7B Q4_K_M 396 / 302 against 383 / 296.
#ifndef G2_HALF
#define G2_HALF 1
#endif

struct Mats {
	MatDev m[G2_MAXMAT];
	int type[G2_MAXMAT];
	int end[G2_MAXMAT];  // cumulative rows
	int nmat;
	int swiglu;          // pairs are (row i of m[0], row i of m[1])
	int pf;              // bytes of a row the start-of-block L2 prefetch asks for (-1: all; 0: none; see g2_pf)
};

// Shared memory of the prologue. For quantized matrices the activation is
// held as two int8 levels per block of 32: v ~ d1*q1 + d2*q2, where q1 =
// round(v/d1), d1 = amax/127, and q2 quantizes the residual v - d1*q1 with
// d2 = amax(residual)/127 (about 1/250 of the error of one level: top-1
// agreement with float activations on flat random-weight logits), plus the
// float sum of each block (Q4_K's min term) and the integer sums of q1 and
// q2 over each half block (Q6_K's offset). Float matrices read f.
struct Xs {
	const int8_t *q, *q2;  // 16-byte pieces placed by xsw
	const float *d, *d2, *s;
	const int2 *s16;  // per 16 activations: the sums of q1 and of q2 (Q6_K's offset of 32)
	const float *f;
};

// X_SWZ: the activation levels' 16-byte pieces in shared memory placed with
// their index's bits 0-1 XORed by bits 3-4 (byte offsets: bits 4-5 by 7-8),
// so that the eight lanes of a quarter warp (two super-blocks, four lanes
// each) read eight different bank groups where the K-quant bodies read the
// same piece of each lane's group: conflict-free for Q4_K with Q4_REPACK
// (4-way without the swizzle, 2-way before with Q4_XCHG's exchange) and for
// Q6_K (4-way before); Q8_0 reads consecutive pieces, conflict-free either
// way. The levels take a multiple of 64 bytes, so every offset stays inside.
// 0: in order (A/B). With Q4_REPACK, A/B on the H200 against the session's
// start (decode tok/s at 128 / 4k tokens of context, 5 runs, one machine
// start, session 18): 7B Q4_K_M 486.6 / 379.9 against 455.7 / 357.7,
// TinyLlama Q4_K_M 1,400.1 / 1,265.2 against 1,292.3 / 1,175.8; the Q8_0
// models the same (7B 418.3 / 343.6 against 415.5 / 343.0, TinyLlama
// 1,327.4 / 1,194.0 against 1,326.9 / 1,193.7). Prefill 512 of 7B Q4_K_M
// lost 2.7% (12,073 against 12,407 tok/s: the GEMM's k-tile now reads two
// half sectors of a group's quants), TinyLlama Q4_K_M's gained 4.6%.
#ifndef X_SWZ
#define X_SWZ 1
#endif
__device__ __forceinline__ int xsw(int off) { return X_SWZ ? off ^ (((off >> 7) & 3) << 4) : off; }

// Each lane accumulates partial dot products of two rows at once (row ra of
// a and row rb of b, same type): the loads of both rows are in flight
// together. The sums are warp-reduced by the caller.

__device__ __forceinline__ int dp4x4(const int4 w, const int4 x) {
	return __dp4a(w.w, x.w, __dp4a(w.z, x.z, __dp4a(w.y, x.y, __dp4a(w.x, x.x, 0))));
}

// G2_EF: the streamed bytes are marked evict-first in L2 (a fractional
// createpolicy of 1.0), so that what each step reuses across launches (the
// kernels' code, the activations, the norm weights, the attention's partials,
// the lines the next launch asks of L2 before its wait) is not pushed out of L2
// by the weights and K/V that are read once per step: bit 0 the Q8_0 GEMVs'
// weights and scales, bit 1 the ring attention's K and V copies, bit 2 the
// K-quant GEMVs' (Q4_K, Q6_K) weights, headers and scales (0: none, A/B). A/B
// on an H100 (session 31, decode tok/s at 128 / 4k tokens of context, 3 runs,
// two rounds per machine start): 7B Q8_0 1 340.9 / 277.6 and 339.8 / 277.1, 3
// 340.9 / 277.6 and 340.8 / 277.6, against 334.1 / 276.5 and 333.9 / 275.7 with
// 0; in another start 3 340.8 / 277.9 and 338.3 / 276.6 against 333.1 / 276.0
// and 330.5 / 276.5, TinyLlama Q8_0 1,173.1 / 1,056.7 and 1,176.5 / 1,072.9
// against 1,171.5 / 1,064.2 and 1,174.9 / 1,063.4, 7B Q4_K_M (only the ring's
// hint applies) 421.4 / 324.7 and 417.9 / 321.7 against 424.0 / 325.0 and 421.0
// / 323.8; in a third start 1 341.0 / 277.6 and 340.3 / 277.4 against 330.8 /
// 274.3 and 331.5 / 274.9. The ring's hint gains nothing, so bit 1 is off.
// Session 32 (H100): 5 against 1, 7B Q4_K_M 424.6 / 320.2 and 424.7 / 320.4
// against 416.1 / 319.8 and 417.3 / 319.7, TinyLlama Q4_K_M 1,358.1 / 1,212.4
// and 1,354.4 / 1,207.2 against 1,355.5 / 1,219.7 and 1,362.8 / 1,213.4 (within
// its rounds' spread). 5 against 0 at 128 / 256 / 512 / 1,024 tokens of context
// (two rounds): 7B Q4_K_M +1.6-2.1% at each, 7B Q8_0 +1.7-2.0% up to 512 and
// +0.4-0.6% at 1,024 (the ring attention runs there for both); at 4k 7B
// Q4_K_M +0.1-0.2%, 7B Q8_0 -0.4 to +1.2% (sessions 31 and 32). Session 36
// (H100, two rounds): 7B Q8_0 333.1 / 273.4 and 332.8 / 273.2 with 5, 327.3 /
// 272.3 and 327.5 / 271.8 with 0, 333.2 / 273.0 and 332.5 / 273.0 with 7 (the
// ring's hint too: no gain again); without the graph (SPARKINFER_PROFILE=1,
// one run of 64 steps) 5 against 0 saved 35 us a step at 128 (Q/K/V 9, O 7,
// down 9) and 25 at 4k (gate/up 13, down 16, Q/K/V 1.6; the attention 6
// slower). Events between the launches (no graph,
// SPARKINFER_PROFILE=1, 7B Q4_K_M at 128) put 22 of the 37 us per step gained
// in the Q/K/V GEMV and 11 in the down GEMV; the graph's figures gain more (the
// bench's 1.6-2.0%, 38-49 us a step), so part of the gain may lie in the
// overlap of one launch with the next (PERF.md, session 32).
// Dropped in session 38 (an H100, 7B Q8_0 decode at 4k, 3 runs, two rounds,
// against 272.6 / 272.6 for the landed build in the same machine start):
// these loads with the L2 prefetch-size qualifier .L2::256B (LDG.LTC256B)
// 272.1 / 272.1; the device's L2 fetch granularity raised from its default
// of 64 bytes to 128 (cudaDeviceSetLimit(cudaLimitMaxL2FetchGranularity))
// 272.5 / 272.4: no change, likely because the Q8_0 loads already cover
// whole lines (512 contiguous bytes a warp).
#ifndef G2_EF
#define G2_EF 5
#endif
__device__ __forceinline__ uint64_t ef_policy() {
	uint64_t p;
	asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(p));
	return p;
}
__device__ __forceinline__ uint4 ldg_ef(const uint4 *a, uint64_t pol) {
	uint4 v;
	asm("ld.global.nc.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;\n"
	    : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
	    : "l"(a), "l"(pol));
	return v;
}
__device__ __forceinline__ uint2 ldg_ef(const uint2 *a, uint64_t pol) {
	uint2 v;
	asm("ld.global.nc.L2::cache_hint.v2.u32 {%0, %1}, [%2], %3;\n" : "=r"(v.x), "=r"(v.y) : "l"(a), "l"(pol));
	return v;
}
__device__ __forceinline__ __half ldg_ef(const __half *a, uint64_t pol) {
	unsigned short v;
	asm("ld.global.nc.L2::cache_hint.b16 %0, [%1], %2;\n" : "=h"(v) : "l"(a), "l"(pol));
	return __ushort_as_half(v);
}
// G2_EF's bits (the ring's, 2, is tested by the preprocessor at its copy)
constexpr int EF_Q8 = 1, EF_KQ = 4;
// the policy for the loads of G2_EF's bit BIT (0, unused, where it is off)
template <int BIT>
__device__ __forceinline__ uint64_t g2_pol() {
	return G2_EF & BIT ? ef_policy() : 0;
}
// a streamed load under G2_EF's bit BIT: evict-first with pol (g2_pol<BIT>)
// where the bit is set, else plain
template <int BIT, typename V>
__device__ __forceinline__ V ldg_hint(const V *a, uint64_t pol) {
	if (G2_EF & BIT) return ldg_ef(a, pol);
	return __ldg(a);
}

// Q8_0: lane covers 16 bytes per step of 512 elements. Steps go in groups
// of Q8_U: every load of a group is issued before any of its products (the
// compiler otherwise lets the first product wait on its load before the
// next loads go out: one memory latency per step instead of per group).
#ifndef Q8_U
#define Q8_U 4
#endif
__device__ __forceinline__ void dot2_q8_0(const MatDev &a, int ra, const MatDev &b, int rb, const Xs &x, int lane,
                                          float &sa, float &sb) {
	const int cols = a.cols;
	const int8_t *wa = (const int8_t *)a.q + (size_t)ra * cols, *wb = (const int8_t *)b.q + (size_t)rb * cols;
	const __half *da = a.d + (size_t)ra * (cols / 32), *db = b.d + (size_t)rb * (cols / 32);
	float s0 = 0.f, s1 = 0.f;
	for (int c0 = lane * 16; c0 < cols; c0 += 512 * Q8_U) {
		int4 va[Q8_U], vb[Q8_U];
		__half ha[Q8_U], hb[Q8_U];
		// unconditional loads (a step past the row reads the row's last 16
		// bytes and is not used): no branch keeps them apart
#pragma unroll
		for (int u = 0; u < Q8_U; u++) {
			const int c = min(c0 + 512 * u, cols - 16);
			va[u] = __ldg((const int4 *)(wa + c));
			vb[u] = __ldg((const int4 *)(wb + c));
			ha[u] = __ldg(da + (c >> 5));
			hb[u] = __ldg(db + (c >> 5));
		}
#pragma unroll
		for (int u = 0; u < Q8_U; u++) {
			// computed for every u, kept by a select: a branch here would let
			// the compiler sink the loads above into it
			const int c = min(c0 + 512 * u, cols - 16);
			const int4 xv = *(const int4 *)(x.q + xsw(c));
			const int4 xr = *(const int4 *)(x.q2 + xsw(c));
			const float d1 = x.d[c >> 5], d2 = x.d2[c >> 5];
			const float ta = __half2float(ha[u]) * (d1 * (float)dp4x4(va[u], xv) + d2 * (float)dp4x4(va[u], xr));
			const float tb = __half2float(hb[u]) * (d1 * (float)dp4x4(vb[u], xv) + d2 * (float)dp4x4(vb[u], xr));
			const bool ok = c0 + 512 * u < cols;
			s0 += ok ? ta : 0.f;
			s1 += ok ? tb : 0.f;
		}
	}
	sa = s0;
	sb = s1;
}

// Q4_K: 4 lanes per super-block; lane g covers the 32 bytes of qs of
// sub-blocks 2g and 2g+1 (low nibbles: elements g*64 + [0,32), high
// nibbles: g*64 + 32 + [0,32)), so it decodes one scale/min pair per 64
// weights. The block's 16-byte header {d, dmin, scales[12]} is one load.
// Scales and mins of sub-blocks 2g, 2g+1 (ggml's get_scale_min_k4), as
// two bytes each: bytes j < 4 of scales[] hold 6-bit scales (mins in bytes
// 4-7); sub-blocks 4-7 take 4 bits from bytes 8-11 and their top 2 from the
// top of bytes 0-3 (scales) or 4-7 (mins). g is fixed per lane, so both
// forms are computed and one selected (no divergent branch).
__device__ __forceinline__ void q4k_scales(const uint4 hd, int g, int &sc0, int &sc1, int &mn0, int &mn1) {
	const int sh = (g & 1) * 16;
	const uint32_t y = hd.y >> sh, z = hd.z >> sh, w = hd.w >> sh;
	const uint32_t sc = g < 2 ? (y & 0x3F3Fu) : ((w & 0x0F0Fu) | ((y >> 2) & 0x3030u));
	const uint32_t mn = g < 2 ? (z & 0x3F3Fu) : (((w >> 4) & 0x0F0Fu) | ((z >> 2) & 0x3030u));
	sc0 = sc & 0xFF;
	sc1 = sc >> 8;
	mn0 = mn & 0xFF;
	mn1 = mn >> 8;
}

__device__ __forceinline__ float q4k_part(const uint4 hd, const uint4 q0, const uint4 q1, int g, const int4 xl0,
                                          const int4 xl1, const int4 xh0, const int4 xh1, const int4 rl0,
                                          const int4 rl1, const int4 rh0, const int4 rh1, float dl, float dh,
                                          float d2l, float d2h, float sl, float sh) {
	int sc0, sc1, mn0, mn1;
	q4k_scales(hd, g, sc0, sc1, mn0, mn1);
	const uint32_t m = 0x0F0F0F0Fu;
	const int4 lo0 = make_int4(q0.x & m, q0.y & m, q0.z & m, q0.w & m);
	const int4 lo1 = make_int4(q1.x & m, q1.y & m, q1.z & m, q1.w & m);
	const int4 hi0 = make_int4((q0.x >> 4) & m, (q0.y >> 4) & m, (q0.z >> 4) & m, (q0.w >> 4) & m);
	const int4 hi1 = make_int4((q1.x >> 4) & m, (q1.y >> 4) & m, (q1.z >> 4) & m, (q1.w >> 4) & m);
	const int ql = dp4x4(lo1, xl1) + dp4x4(lo0, xl0), qh = dp4x4(hi1, xh1) + dp4x4(hi0, xh0);
	const int el = dp4x4(lo1, rl1) + dp4x4(lo0, rl0), eh = dp4x4(hi1, rh1) + dp4x4(hi0, rh0);
	const float d = __half2float(__ushort_as_half((unsigned short)(hd.x & 0xFFFF)));
	const float dmin = __half2float(__ushort_as_half((unsigned short)(hd.x >> 16)));
	const float s = (float)sc0 * (dl * (float)ql + d2l * (float)el) + (float)sc1 * (dh * (float)qh + d2h * (float)eh);
	return d * s - dmin * ((float)mn0 * sl + (float)mn1 * sh);
}

// Q4_XCHG: each load instruction of a warp takes 64 contiguous bytes of a
// super-block's quants (lane g of its four: 16-byte piece g, then piece
// g + 4) instead of every other 16 bytes (pieces 2g, then 2g + 1: each
// instruction half of every 32-byte sector); one shuffle with the lane's
// neighbour then gives lane g the pieces of group gq = q4x_group(g) (even
// lanes keep piece g and receive g + 1, odd lanes keep g + 4 and receive
// g + 3). Odd lanes hold the group's second piece first, so they read the
// activations' halves swapped: the integer sums are the same (the float
// products are those of lane gq before; the warp's sum adds the lanes in
// another order). 0: the lane's own 32 bytes (A/B). Nsight Compute had 40-46%
// excess sectors and an L1/TEX unit 63-79% busy in the Q4_K kernels before.
// (Superseded by Q4_REPACK, which gives the same loads without the shuffle;
// Q4_XCHG matters only with Q4_REPACK 0.)
// A/B on the H200, decode tok/s at 128 tokens of context, one machine start:
// 7B Q4_K_M 404 / 406 against 395 / 395, TinyLlama Q4_K_M 1,184 / 1,184
// against 1,158 / 1,163.
#ifndef Q4_XCHG
#define Q4_XCHG 1
#endif
// With Q4_REPACK the stored order gives each lane its group's pieces at
// these same offsets (q4k_poff): no exchange, lane g takes group g.
#define Q4_SHFL (Q4_XCHG && !Q4_REPACK)
__device__ __forceinline__ int q4x_group(int g) { return Q4_SHFL ? ((g & 1) << 1) | (g >> 1) : g; }
// byte offset in the super-block of lane g's first and second loads
// (q4k_poff: lane g's group's own two pieces, wherever the layout puts them)
__device__ __forceinline__ int q4x_off0(int g) { return Q4_SHFL ? 16 + 16 * g : q4k_poff(2 * g); }
__device__ __forceinline__ int q4x_off1(int g) { return Q4_SHFL ? 80 + 16 * g : q4k_poff(2 * g + 1); }
// the two loads (p0, p1) -> the lane's group pieces in q4k_part's q0, q1
// (every lane of the warp calls it)
__device__ __forceinline__ void q4x_pieces(uint4 p0, uint4 p1, int g, uint4 &q0, uint4 &q1) {
	if (!Q4_SHFL) {
		q0 = p0;
		q1 = p1;
		return;
	}
	const bool odd = g & 1;
	const uint4 send = odd ? p0 : p1;
	q0 = odd ? p1 : p0;
	q1.x = __shfl_xor_sync(0xffffffffu, send.x, 1);
	q1.y = __shfl_xor_sync(0xffffffffu, send.y, 1);
	q1.z = __shfl_xor_sync(0xffffffffu, send.z, 1);
	q1.w = __shfl_xor_sync(0xffffffffu, send.w, 1);
}
// activation piece k (int4 of 16 levels) of the lane's group, as q4k_part
// pairs them with q0, q1
__device__ __forceinline__ int q4x_ak(int g, int k) { return Q4_SHFL ? k ^ (g & 1) : k; }

// Super-block sb of a Q4_K row pair for lane g (of the super-block's four):
// headers ha, hb and the loads at q4x_off0 / q4x_off1 of rows a and b (pa0,
// pa1, pb0, pb1), against the activations of group gq = q4x_group(g); both
// bodies (dot2_q4_k and g2_mul) call it, every lane of the warp together.
__device__ __forceinline__ void q4k_pair(const Xs &x, int sb, int g, int gq, uint4 ha, uint4 hb, uint4 pa0,
                                         uint4 pa1, uint4 pb0, uint4 pb1, float &ta, float &tb) {
	const int c = sb * 256 + gq * 64;
	auto xp = [&](const int8_t *b, int k) { return *(const int4 *)(b + xsw(c + 16 * q4x_ak(g, k))); };
	const int4 xl0 = xp(x.q, 0), xl1 = xp(x.q, 1), xh0 = xp(x.q, 2), xh1 = xp(x.q, 3);
	const int4 rl0 = xp(x.q2, 0), rl1 = xp(x.q2, 1), rh0 = xp(x.q2, 2), rh1 = xp(x.q2, 3);
	const int bl = c >> 5, bh = bl + 1;
	const float dl = x.d[bl], dh = x.d[bh], d2l = x.d2[bl], d2h = x.d2[bh], sl = x.s[bl], sh = x.s[bh];
	uint4 a0, a1, b0, b1;
	q4x_pieces(pa0, pa1, g, a0, a1);
	q4x_pieces(pb0, pb1, g, b0, b1);
	ta = q4k_part(ha, a0, a1, gq, xl0, xl1, xh0, xh1, rl0, rl1, rh0, rh1, dl, dh, d2l, d2h, sl, sh);
	tb = q4k_part(hb, b0, b1, gq, xl0, xl1, xh0, xh1, rl0, rl1, rh0, rh1, dl, dh, d2l, d2h, sl, sh);
}

// Super-blocks go in groups of Q4_U per lane, loads first (see Q8_U).
#ifndef Q4_U
#define Q4_U 2
#endif
__device__ __forceinline__ void dot2_q4_k(const MatDev &a, int ra, const MatDev &b, int rb, const Xs &x, int lane,
                                          float &sa, float &sb) {
	const int nsb = a.cols / 256;
	const uint8_t *pa = (const uint8_t *)a.q + (size_t)ra * a.row_bytes;
	const uint8_t *pb = (const uint8_t *)b.q + (size_t)rb * b.row_bytes;
	const int g = lane & 3, gq = q4x_group(g), o0 = q4x_off0(g), o1 = q4x_off1(g);
	float s0 = 0.f, s1 = 0.f;
	const uint64_t pol = g2_pol<EF_KQ>();
	// warp-uniform trip count (the shuffles of q4x_pieces): lanes past the
	// row re-read its last super-block and add nothing
	for (int base = 0; base < nsb; base += 8 * Q4_U) {
		const int sb0 = base + (lane >> 2);
		uint4 ha[Q4_U], hb[Q4_U], qa0[Q4_U], qa1[Q4_U], qb0[Q4_U], qb1[Q4_U];
#pragma unroll
		for (int u = 0; u < Q4_U; u++) {
			const int sb = min(sb0 + 8 * u, nsb - 1);  // past the row: re-read, unused
			const uint8_t *ba = pa + (size_t)sb * 144, *bb = pb + (size_t)sb * 144;
			ha[u] = ldg_hint<EF_KQ>((const uint4 *)ba, pol);
			hb[u] = ldg_hint<EF_KQ>((const uint4 *)bb, pol);
			qa0[u] = ldg_hint<EF_KQ>((const uint4 *)(ba + o0), pol);
			qa1[u] = ldg_hint<EF_KQ>((const uint4 *)(ba + o1), pol);
			qb0[u] = ldg_hint<EF_KQ>((const uint4 *)(bb + o0), pol);
			qb1[u] = ldg_hint<EF_KQ>((const uint4 *)(bb + o1), pol);
		}
#pragma unroll
		for (int u = 0; u < Q4_U; u++) {
			const int sb = min(sb0 + 8 * u, nsb - 1);  // a select, not a branch (see dot2_q8_0)
			float ta, tb;
			q4k_pair(x, sb, g, gq, ha[u], hb[u], qa0[u], qa1[u], qb0[u], qb1[u], ta, tb);
			const bool ok = sb0 + 8 * u < nsb;
			s0 += ok ? ta : 0.f;
			s1 += ok ? tb : 0.f;
		}
	}
	sa = s0;
	sb = s1;
}

// Q6_K (rows of 208 bytes: ql[128], qh[64], scales[16]; d apart): 4 lanes
// per super-block; lane (n, p) covers l in [16p, 16p+16) of the four
// quarters of half n: elements n*128 + quarter*32 + 16p + [0,16), whose
// scales are bytes p, p+2, p+4, p+6 of the half's eight. The 6-bit values
// go to dp4a unsigned (0..63) and the offset of 32 comes off as 32 times
// the integer sums of the activation levels over each half block (Xs.s16).
__device__ __forceinline__ float q6k_part(const uint4 la, const uint4 lb, const uint4 qh, const uint2 scw, int p,
                                          float d, const Xs &x, int c0) {
	float part = 0.f;
	const uint32_t sx = scw.x >> (8 * p), sy = scw.y >> (8 * p);
#pragma unroll
	for (int quarter = 0; quarter < 4; quarter++) {
		const uint4 l = (quarter & 1) ? lb : la;
		const int shl = (quarter >= 2) ? 4 : 0, shh = 2 * quarter;
		int w[4];
		const uint32_t lw[4] = {l.x, l.y, l.z, l.w}, hw[4] = {qh.x, qh.y, qh.z, qh.w};
#pragma unroll
		for (int k = 0; k < 4; k++)
			w[k] = (int)(((lw[k] >> shl) & 0x0F0F0F0Fu) | (((hw[k] >> shh) & 0x03030303u) << 4));
		const int c = c0 + quarter * 32;
		const int4 xv = *(const int4 *)(x.q + xsw(c));
		const int4 xr = *(const int4 *)(x.q2 + xsw(c));
		const int2 o = x.s16[c >> 4];
		const int dq = __dp4a(w[3], xv.w, __dp4a(w[2], xv.z, __dp4a(w[1], xv.y, __dp4a(w[0], xv.x, -32 * o.x))));
		const int er = __dp4a(w[3], xr.w, __dp4a(w[2], xr.z, __dp4a(w[1], xr.y, __dp4a(w[0], xr.x, -32 * o.y))));
		const uint32_t sw = quarter < 2 ? sx : sy;
		const int sc = (int)(int8_t)(sw >> (16 * (quarter & 1)));
		part += (float)sc * (x.d[c >> 5] * (float)dq + x.d2[c >> 5] * (float)er);
	}
	return d * part;
}

// Super-blocks go in groups of Q6_U per lane, loads first (see Q8_U).
#ifndef Q6_U
#define Q6_U 2
#endif
__device__ __forceinline__ void dot2_q6_k(const MatDev &a, int ra, const MatDev &b, int rb, const Xs &x, int lane,
                                          float &sa, float &sb) {
	const int nsb = a.cols / 256;
	const uint8_t *pa = (const uint8_t *)a.q + (size_t)ra * a.row_bytes;
	const uint8_t *pb = (const uint8_t *)b.q + (size_t)rb * b.row_bytes;
	const __half *da = a.d + (size_t)ra * nsb, *db = b.d + (size_t)rb * nsb;
	const int n = (lane >> 1) & 1, p = lane & 1, l0 = p * 16;
	float s0 = 0.f, s1 = 0.f;
	const uint64_t pol = g2_pol<EF_KQ>();
	for (int sb0 = lane >> 2; sb0 < nsb; sb0 += 8 * Q6_U) {
		uint4 a0[Q6_U], a1[Q6_U], ah[Q6_U], b0[Q6_U], b1[Q6_U], bh[Q6_U];
		uint2 as[Q6_U], bs[Q6_U];
		__half fa[Q6_U], fb[Q6_U];
#pragma unroll
		for (int u = 0; u < Q6_U; u++) {
			const int sb = min(sb0 + 8 * u, nsb - 1);  // past the row: re-read, unused
			const uint8_t *ba = pa + (size_t)sb * 208, *bb = pb + (size_t)sb * 208;
			a0[u] = ldg_hint<EF_KQ>((const uint4 *)(ba + n * 64 + l0), pol);
			a1[u] = ldg_hint<EF_KQ>((const uint4 *)(ba + n * 64 + 32 + l0), pol);
			ah[u] = ldg_hint<EF_KQ>((const uint4 *)(ba + 128 + n * 32 + l0), pol);
			as[u] = ldg_hint<EF_KQ>((const uint2 *)(ba + 192 + n * 8), pol);
			b0[u] = ldg_hint<EF_KQ>((const uint4 *)(bb + n * 64 + l0), pol);
			b1[u] = ldg_hint<EF_KQ>((const uint4 *)(bb + n * 64 + 32 + l0), pol);
			bh[u] = ldg_hint<EF_KQ>((const uint4 *)(bb + 128 + n * 32 + l0), pol);
			bs[u] = ldg_hint<EF_KQ>((const uint2 *)(bb + 192 + n * 8), pol);
			fa[u] = ldg_hint<EF_KQ>(da + sb, pol);
			fb[u] = ldg_hint<EF_KQ>(db + sb, pol);
		}
#pragma unroll
		for (int u = 0; u < Q6_U; u++) {
			const int sb = min(sb0 + 8 * u, nsb - 1);  // a select, not a branch (see dot2_q8_0)
			const int c0 = sb * 256 + n * 128 + l0;
			const float ta = q6k_part(a0[u], a1[u], ah[u], as[u], p, __half2float(fa[u]), x, c0);
			const float tb = q6k_part(b0[u], b1[u], bh[u], bs[u], p, __half2float(fb[u]), x, c0);
			const bool ok = sb0 + 8 * u < nsb;
			s0 += ok ? ta : 0.f;
			s1 += ok ? tb : 0.f;
		}
	}
	sa = s0;
	sb = s1;
}

template <int T>
__device__ __forceinline__ float dot_float(const MatDev &m, int r, const Xs &x, int lane) {
	const int cols = m.cols;
	float sum = 0.f;
	if (T == SK_F32) {
		const float *w = (const float *)m.q + (size_t)r * cols;
		if ((cols & 3) == 0) {
#pragma unroll 4
			for (int c = lane * 4; c < cols; c += 128) {
				const float4 wv = __ldg((const float4 *)(w + c));
				const float4 xv = *(const float4 *)(x.f + c);
				sum += wv.x * xv.x + wv.y * xv.y + wv.z * xv.z + wv.w * xv.w;
			}
		} else {
			for (int c = lane; c < cols; c += 32) sum += w[c] * x.f[c];
		}
	} else {
		const uint16_t *w = (const uint16_t *)m.q + (size_t)r * cols;
		if ((cols & 7) == 0) {
#pragma unroll 4
			for (int c = lane * 8; c < cols; c += 256) {
				const uint4 wv = __ldg((const uint4 *)(w + c));
				const uint16_t *wh = (const uint16_t *)&wv;
				const float4 x0 = *(const float4 *)(x.f + c), x1 = *(const float4 *)(x.f + c + 4);
				float wf[8];
#pragma unroll
				for (int i = 0; i < 8; i++) wf[i] = T == SK_F16 ? f16_to_f(wh[i]) : bf16_to_f(wh[i]);
				sum += wf[0] * x0.x + wf[1] * x0.y + wf[2] * x0.z + wf[3] * x0.w + wf[4] * x1.x + wf[5] * x1.y +
				       wf[6] * x1.z + wf[7] * x1.w;
			}
		} else {
			for (int c = lane; c < cols; c += 32) sum += (T == SK_F16 ? f16_to_f(w[c]) : bf16_to_f(w[c])) * x.f[c];
		}
	}
	return sum;
}

// Partial dots of two rows of the same type (pass ra == rb, a == b for one).
__device__ __forceinline__ void dot2_row(int type, const MatDev &a, int ra, const MatDev &b, int rb, const Xs &x,
                                         int lane, float &sa, float &sb) {
	switch (type) {
	case SK_Q8_0: dot2_q8_0(a, ra, b, rb, x, lane, sa, sb); return;
	case SK_Q4_K: dot2_q4_k(a, ra, b, rb, x, lane, sa, sb); return;
	case SK_Q6_K: dot2_q6_k(a, ra, b, rb, x, lane, sa, sb); return;
	case SK_F32:
		sa = dot_float<SK_F32>(a, ra, x, lane);
		sb = dot_float<SK_F32>(b, rb, x, lane);
		return;
	case SK_F16:
		sa = dot_float<SK_F16>(a, ra, x, lane);
		sb = dot_float<SK_F16>(b, rb, x, lane);
		return;
	case SK_BF16:
		sa = dot_float<SK_BF16>(a, ra, x, lane);
		sb = dot_float<SK_BF16>(b, rb, x, lane);
		return;
	}
	sa = sb = 0.f;
}

// Where the rows of pair p live: rows 2p and 2p+1 of the concatenation
// (both in one matrix: every matrix but the last has even rows), or for
// SwiGLU row p of m[0] and row p of m[1]. Constant indices only: a run-time
// index into the parameter struct would copy it to local memory.
struct PairLoc {
	MatDev a, b;
	int ta, tb, ra, rb;
	bool has1;
};

__device__ __forceinline__ PairLoc locate(const Mats &ms, int p, int total) {
	PairLoc L;
	if (ms.swiglu) {
		L.a = ms.m[0];
		L.b = ms.m[1];
		L.ta = ms.type[0];
		L.tb = ms.type[1];
		L.ra = L.rb = p;
		L.has1 = true;
		return L;
	}
	const int R = 2 * p;
	if (ms.nmat == 1 || R < ms.end[0]) {
		L.a = ms.m[0];
		L.ta = ms.type[0];
		L.ra = R;
	} else if (ms.nmat == 2 || R < ms.end[1]) {
		L.a = ms.m[1];
		L.ta = ms.type[1];
		L.ra = R - ms.end[0];
	} else {
		L.a = ms.m[2];
		L.ta = ms.type[2];
		L.ra = R - ms.end[1];
	}
	L.b = L.a;
	L.tb = L.ta;
	L.has1 = R + 1 < total;
	L.rb = L.has1 ? L.ra + 1 : L.ra;
	return L;
}

// The rows of all matrices: ms.end[ms.nmat - 1] with constant indices. The
// run-time index copied the whole kernel parameter (Mats, 176 bytes) to
// local memory in every thread of every block, and locate() then read it
// from there (nvcc 11.8: the k_gemv2 kernels' stack frames 176 -> 48 bytes).
// A/B on the H200 (decode tok/s at 128 / 4k, 3 runs, twice each, both with
// Q_MAGIC): TinyLlama Q8_0 1,321 / 1,018 and 1,321 / 1,014 against 1,182 /
// 957 and 1,187 / 966; TinyLlama Q4_K_M 1,258 / 980 and 1,256 / 982 against
// 1,201 / 954 and 1,209 / 960; 7B Q4_K_M 433 / 326 and 432 / 328 against
// 412 / 313 and 414 / 313; 7B Q8_0 373 / 293 and 374 / 293 against 343 / 273
// and 344 / 274.
#ifndef G2_CONST_TOTAL
#define G2_CONST_TOTAL 1
#endif
__device__ __forceinline__ int mats_total(const Mats &ms) {
#if G2_CONST_TOTAL
	return ms.nmat == 1 ? ms.end[0] : ms.nmat == 2 ? ms.end[1] : ms.end[2];
#else
	return ms.end[ms.nmat - 1];
#endif
}

// Ask L2 for row r of m (its main data) ahead of use: the whole row (pf
// < 0) or its first pf bytes (0: nothing). gemv2_launch chooses pf (g2_pf).
__device__ __forceinline__ void prefetch_row(const MatDev &m, int r, int lane, int pf) {
	const char *base = (const char *)m.q + (size_t)r * m.row_bytes;
	const size_t end = pf < 0 ? m.row_bytes : min((size_t)pf, m.row_bytes);
	for (size_t off = (size_t)lane * 128; off < end; off += 32 * 128)
		asm volatile("prefetch.global.L2 [%0];" ::"l"(base + off));
}

// Software-pipelined GEMV body (k_gemv2's P > 0; the kernels compiled for
// Q8_0, Q4_K, Q6_K or Q4_K + Q6_K): a warp's row pairs are cut into items of
// g2_item_cols columns, and the loads of item i + 1 go out before item i's
// products, so every warp has loads in flight while it multiplies. Each lane
// adds the same products in the same order as dot2_row (its columns in
// increasing order), so the sums are the same bit for bit. The raw loads of
// two items must fit the registers beside the products: a K-quant item is
// 8 super-blocks (half of dot2_row's 16 in flight), a Q8_0 item P pieces of
// 16 bytes per lane and row. A/B on the H200 (decode tok/s at 128 / 4k
// tokens of context, against dot2_row): TinyLlama Q8_0 (P = 2) 1,185 / 908
// against 1,140 / 895; TinyLlama Q4_K_M (2,048-column rows: one item per
// pair) 1,177 / 902 against 1,051 / 818; 7B Q4_K_M (two items per pair)
// 377 / 292 against 395 / 303, so rows of more than one K-quant item keep
// dot2_row; 7B Q8_0 with P = 4 343 / 271, with 2 334 / 269, against
// 328 / 269. G2_PIPE 0: dot2_row everywhere.
#ifndef G2_PIPE
#define G2_PIPE 1
#endif
// Dropped (session 32, code not in the tree): the dot2_row body (the K-quant
// GEMVs of rows longer than one item) asking L2 for the whole rows of its
// warp's next N row pairs before a pair's loads, so that they move from HBM
// while the warp waits and multiplies. Slower on an H100 (7B Q4_K_M decode
// tok/s at 128 / 4k, 3 runs, two rounds, against the landed kernels in the
// same machine start): N = 1 410.4 / 316.2 and 412.6 / 315.4, N = 2 402.4 /
// 311.2 and 401.2 / 310.1, against 429.5 / 326.3 and 429.0 / 326.0.
// Q8_0 pipelines: the first item's loads go out before the programmatic
// launch wait when the two-thread prologue runs (TinyLlama Q8_0 1,185 / 908
// against 1,155 / 889 after the prologue; TinyLlama Q4_K_M lost 2.7% with
// it, so the K-quant kernels load after the prologue). 0: never.
// Measured on 7B Q8_0 at 4k tokens of context (session 20; decode tok/s, 3
// runs, two rounds, each against the landed kernels in the same machine
// start): 0 342.2 / 343.5 against 349.6 / 349.2; x taken by one bulk copy
// into shared memory 333.8 / 333.1 against the same (the copy took 3.3 us;
// the loads' prologue phases take 2.5-3 us); the first item's loads issued
// after x's, past the wait, 349.0 / 348.1 against 350.1 / 349.7 (TinyLlama
// Q8_0 at 128 / 4k lost: 1,280.2 / 1,173.6 against 1,332.2 / 1,194.9); the
// down GEMV (11,008 columns, no norm) issuing its first item before the
// wait too, x one block of 32 at a time (room for the item's registers),
// 324.9 / 328.1 against 347.5 / 346.6. The prologue is not long because its
// x loads queue behind the weights' (the trace kept it at 2.1-2.7 us with x
// loaded first); scripts/chain-probe.cu puts a dependent 16 KB read of x
// after the wait at 1 us per launch in a plain streaming chain, the same
// with 8 copies of x (so not the one vector's L2 lines either).
#ifndef G2_PRE
#define G2_PRE 1
#endif

// One item's raw loads for a lane (for both rows): Q8_0 r[u], r[U + u] and
// scales h[u], h[U + u]; Q4_K r[0..5] = header a, header b, qs a (2), qs b
// (2); Q6_K r[0..5] = ql a (2), qh a, ql b (2), qh b, s = their scales,
// h[0], h[1] = their d.
template <int U>
struct G2Raw {
	uint4 r[2 * U > 6 ? 2 * U : 6];
	uint2 s[2];
	__half h[2 * U > 2 ? 2 * U : 2];
};

template <int T, int U>
__host__ __device__ constexpr int g2_item_cols() {
	return T == SK_Q8_0 ? 512 * U : 2048;  // K-quants: 8 super-blocks (one per lane group of 4)
}

// Issue item c's loads of pair L (type t: T, or Q4_K / Q6_K in the mixed kernel).
template <int T, int U>
__device__ __forceinline__ void g2_ld(const PairLoc &L, int t, int c, int lane, G2Raw<U> &R) {
	if (T == SK_Q8_0) {
		const int cols = L.a.cols;
		const int8_t *wa = (const int8_t *)L.a.q + (size_t)L.ra * cols, *wb = (const int8_t *)L.b.q + (size_t)L.rb * cols;
		const __half *da = L.a.d + (size_t)L.ra * (cols / 32), *db = L.b.d + (size_t)L.rb * (cols / 32);
		const int c0 = c * 512 * U + lane * 16;
		const uint64_t pol = g2_pol<EF_Q8>();
#pragma unroll
		for (int u = 0; u < U; u++) {
			const int cc = min(c0 + 512 * u, cols - 16);  // past the row: re-read, unused
			R.r[u] = ldg_hint<EF_Q8>((const uint4 *)(wa + cc), pol);
			R.r[U + u] = ldg_hint<EF_Q8>((const uint4 *)(wb + cc), pol);
			R.h[u] = ldg_hint<EF_Q8>(da + (cc >> 5), pol);
			R.h[U + u] = ldg_hint<EF_Q8>(db + (cc >> 5), pol);
		}
		return;
	}
	const int nsb = L.a.cols / 256;
	const uint64_t pol = g2_pol<EF_KQ>();
	const int sb = min(c * 8 + (lane >> 2), nsb - 1);  // past the row: re-read, unused
	if (t == SK_Q4_K) {
		const uint8_t *ba = (const uint8_t *)L.a.q + (size_t)L.ra * L.a.row_bytes + (size_t)sb * 144;
		const uint8_t *bb = (const uint8_t *)L.b.q + (size_t)L.rb * L.b.row_bytes + (size_t)sb * 144;
		const int o0 = q4x_off0(lane & 3), o1 = q4x_off1(lane & 3);
		R.r[0] = ldg_hint<EF_KQ>((const uint4 *)ba, pol);
		R.r[1] = ldg_hint<EF_KQ>((const uint4 *)bb, pol);
		R.r[2] = ldg_hint<EF_KQ>((const uint4 *)(ba + o0), pol);
		R.r[3] = ldg_hint<EF_KQ>((const uint4 *)(ba + o1), pol);
		R.r[4] = ldg_hint<EF_KQ>((const uint4 *)(bb + o0), pol);
		R.r[5] = ldg_hint<EF_KQ>((const uint4 *)(bb + o1), pol);
	} else {
		const uint8_t *ba = (const uint8_t *)L.a.q + (size_t)L.ra * L.a.row_bytes + (size_t)sb * 208;
		const uint8_t *bb = (const uint8_t *)L.b.q + (size_t)L.rb * L.b.row_bytes + (size_t)sb * 208;
		const int n = (lane >> 1) & 1, l0 = (lane & 1) * 16;
		R.r[0] = ldg_hint<EF_KQ>((const uint4 *)(ba + n * 64 + l0), pol);
		R.r[1] = ldg_hint<EF_KQ>((const uint4 *)(ba + n * 64 + 32 + l0), pol);
		R.r[2] = ldg_hint<EF_KQ>((const uint4 *)(ba + 128 + n * 32 + l0), pol);
		R.s[0] = ldg_hint<EF_KQ>((const uint2 *)(ba + 192 + n * 8), pol);
		R.r[3] = ldg_hint<EF_KQ>((const uint4 *)(bb + n * 64 + l0), pol);
		R.r[4] = ldg_hint<EF_KQ>((const uint4 *)(bb + n * 64 + 32 + l0), pol);
		R.r[5] = ldg_hint<EF_KQ>((const uint4 *)(bb + 128 + n * 32 + l0), pol);
		R.s[1] = ldg_hint<EF_KQ>((const uint2 *)(bb + 192 + n * 8), pol);
		R.h[0] = ldg_hint<EF_KQ>(L.a.d + (size_t)L.ra * nsb + sb, pol);
		R.h[1] = ldg_hint<EF_KQ>(L.b.d + (size_t)L.rb * nsb + sb, pol);
	}
}

// Add item c's products (raw loads R, type t, rows of cols columns) to s0, s1.
template <int T, int U>
__device__ __forceinline__ void g2_mul(const G2Raw<U> &R, int t, int c, int cols, const Xs &x, int lane, float &s0,
                                       float &s1) {
	if (T == SK_Q8_0) {
		const int c0 = c * 512 * U + lane * 16;
#pragma unroll
		for (int u = 0; u < U; u++) {
			const int cu = c0 + 512 * u, cc = min(cu, cols - 16);
			const int4 xv = *(const int4 *)(x.q + xsw(cc));
			const int4 xr = *(const int4 *)(x.q2 + xsw(cc));
			const float d1 = x.d[cc >> 5], d2 = x.d2[cc >> 5];
			const int4 va = make_int4(R.r[u].x, R.r[u].y, R.r[u].z, R.r[u].w);
			const int4 vb = make_int4(R.r[U + u].x, R.r[U + u].y, R.r[U + u].z, R.r[U + u].w);
			const float ta = __half2float(R.h[u]) * (d1 * (float)dp4x4(va, xv) + d2 * (float)dp4x4(va, xr));
			const float tb = __half2float(R.h[U + u]) * (d1 * (float)dp4x4(vb, xv) + d2 * (float)dp4x4(vb, xr));
			const bool ok = cu < cols;
			s0 += ok ? ta : 0.f;
			s1 += ok ? tb : 0.f;
		}
		return;
	}
	const int nsb = cols / 256, su = c * 8 + (lane >> 2), sb = min(su, nsb - 1);
	const bool ok = su < nsb;
	float ta, tb;
	if (t == SK_Q4_K) {
		q4k_pair(x, sb, lane & 3, q4x_group(lane & 3), R.r[0], R.r[1], R.r[2], R.r[3], R.r[4], R.r[5], ta, tb);
	} else {
		const int n = (lane >> 1) & 1, p = lane & 1;
		const int c0 = sb * 256 + n * 128 + p * 16;
		ta = q6k_part(R.r[0], R.r[1], R.r[2], R.s[0], p, __half2float(R.h[0]), x, c0);
		tb = q6k_part(R.r[3], R.r[4], R.r[5], R.s[1], p, __half2float(R.h[1]), x, c0);
	}
	s0 += ok ? ta : 0.f;
	s1 += ok ? tb : 0.f;
}

// max |v[j]| over 32 values, as a tree
__device__ __forceinline__ float max32(const float v[32]) {
	float a[8];
#pragma unroll
	for (int j = 0; j < 8; j++)
		a[j] = fmaxf(fmaxf(fabsf(v[j]), fabsf(v[j + 8])), fmaxf(fabsf(v[j + 16]), fabsf(v[j + 24])));
	return fmaxf(fmaxf(fmaxf(a[0], a[1]), fmaxf(a[2], a[3])), fmaxf(fmaxf(a[4], a[5]), fmaxf(a[6], a[7])));
}

// Q_MAGIC: the prologue's roundings go through the float adder, not the
// conversion unit. Adding 1.5 x 2^23 to v (|v| < 2^22) leaves round(v), to
// nearest even as rintf and __float2int_rn, in the sum's low mantissa bits:
// its low byte is the int8 level, and subtracting the constant again gives
// the rounded float exactly. The separate _rn intrinsics keep the compiler
// from fusing the product into the add (one rounding instead of two). On
// sm_90 an SM converts 16 values per clock and adds 128: each activation
// took three conversions (rintf, its int, the second level's int). A/B on
// the H200 (decode tok/s at 128 / 4k tokens of context, 3 runs, one machine
// start, twice each): TinyLlama Q8_0 1,182 / 957 and 1,187 / 966 against
// 1,158 / 939 and 1,169 / 946; TinyLlama Q4_K_M 1,201 / 954 and 1,209 / 960
// against 1,179 / 944 and 1,177 / 946; 7B Q4_K_M 412 / 313 and 414 / 313
// against 407 / 307 and 406 / 308; 7B Q8_0 343 / 273 and 344 / 274 against
// 339 / 271 and 337 / 269. Parity over 256 positions is unchanged to the
// last digit (TinyLlama Q8_0 and Q4_K_M, 7B Q4_K_M).
#ifndef Q_MAGIC
#define Q_MAGIC 1
#endif
#define Q_MAGIC_C 12582912.f  // 1.5 x 2^23
// four low bytes (of a, b, c, d) as one word, a in byte 0
__device__ __forceinline__ uint32_t pack_lo4(uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
	return __byte_perm(__byte_perm(a, b, 0x0040), __byte_perm(c, d, 0x0040), 0x5410);
}

// The first int8 level of N activations e: q = round(e * id) packed into
// bytes w, and the residuals e - q d for the second.
template <int N>
__device__ __forceinline__ void level1(const float e[N], float d, float id, float res[N], uint32_t w[N / 4]) {
#if Q_MAGIC
#pragma unroll
	for (int j = 0; j < N; j += 4) {
		uint32_t t[4];
#pragma unroll
		for (int k = 0; k < 4; k++) {
			const float r = __fadd_rn(__fmul_rn(e[j + k], id), Q_MAGIC_C);
			res[j + k] = __fmaf_rn(-__fsub_rn(r, Q_MAGIC_C), d, e[j + k]);
			t[k] = __float_as_uint(r);
		}
		w[j >> 2] = pack_lo4(t[0], t[1], t[2], t[3]);
	}
#else
#pragma unroll
	for (int j = 0; j < N; j++) {
		const float q = rintf(e[j] * id);
		res[j] = __fmaf_rn(-q, d, e[j]);
		const uint32_t byte = (uint32_t)(int)q & 0xFFu;
		if ((j & 3) == 0) w[j >> 2] = byte;
		else w[j >> 2] |= byte << (8 * (j & 3));
	}
#endif
}

// The second level: round(res * id2) packed into bytes w.
template <int N>
__device__ __forceinline__ void level2(const float res[N], float id2, uint32_t w[N / 4]) {
#if Q_MAGIC
#pragma unroll
	for (int j = 0; j < N; j += 4) {
		uint32_t t[4];
#pragma unroll
		for (int k = 0; k < 4; k++) t[k] = __float_as_uint(__fadd_rn(__fmul_rn(res[j + k], id2), Q_MAGIC_C));
		w[j >> 2] = pack_lo4(t[0], t[1], t[2], t[3]);
	}
#else
#pragma unroll
	for (int j = 0; j < N; j++) {
		const uint32_t byte = (uint32_t)__float2int_rn(res[j] * id2) & 0xFFu;
		if ((j & 3) == 0) w[j >> 2] = byte;
		else w[j >> 2] |= byte << (8 * (j & 3));
	}
#endif
}

// The sum of the 16 signed bytes of w[0..4): dp4a with ones.
__device__ __forceinline__ int bytesum16(const uint32_t w[4]) {
	return __dp4a((int)w[3], 0x01010101,
	              __dp4a((int)w[2], 0x01010101, __dp4a((int)w[1], 0x01010101, __dp4a((int)w[0], 0x01010101, 0))));
}

// The two int8 levels of one block of 32 activations e (see Xs), held by
// one thread: no shuffles, 32 independent elements for the scheduler. The
// block sum adds in the order of the earlier 8-lane version, ((s0 + s4) +
// (s2 + s6)) + ((s1 + s5) + (s3 + s7)) over the lanes' sums of 4.
__device__ __forceinline__ void quant32(const float e[32], int b, int8_t *xq, int8_t *xq2, float *xd, float *xd2,
                                        float *xsum, int2 *xs16) {
	float s4[8];
#pragma unroll
	for (int l = 0; l < 8; l++) s4[l] = (e[4 * l] + e[4 * l + 1]) + (e[4 * l + 2] + e[4 * l + 3]);
	const float sum = ((s4[0] + s4[4]) + (s4[2] + s4[6])) + ((s4[1] + s4[5]) + (s4[3] + s4[7]));
	// maxima as trees (exact in any order; a chain of 32 is 32 dependent
	// instructions) and the reciprocal as rcp.rn (the same correctly
	// rounded value as 1.f / d, without the division's slow-path checks)
	const float amax = max32(e);
	const float d = amax / 127.f;
	const float id = d > 0.f ? __frcp_rn(d) : 0.f;
	float res[32];
	uint32_t w1[8];
	level1<32>(e, d, id, res, w1);
	const float amax2 = max32(res);
	const float d2 = amax2 / 127.f;
	const float id2 = d2 > 0.f ? __frcp_rn(d2) : 0.f;
	uint32_t w2[8];
	level2<32>(res, id2, w2);
	*(uint4 *)(xq + xsw(32 * b)) = make_uint4(w1[0], w1[1], w1[2], w1[3]);
	*(uint4 *)(xq + xsw(32 * b + 16)) = make_uint4(w1[4], w1[5], w1[6], w1[7]);
	*(uint4 *)(xq2 + xsw(32 * b)) = make_uint4(w2[0], w2[1], w2[2], w2[3]);
	*(uint4 *)(xq2 + xsw(32 * b + 16)) = make_uint4(w2[4], w2[5], w2[6], w2[7]);
	xd[b] = d;
	xd2[b] = d2;
	xsum[b] = sum;
	// byte sums of each half: dp4a with ones
	*(int4 *)(xs16 + 2 * b) = make_int4(bytesum16(w1), bytesum16(w2), bytesum16(w1 + 4), bytesum16(w2 + 4));
}

// quant32 of (x * scale) * w (the order of the Go reference's RMSNorm), or x
__device__ __forceinline__ void quant32n(const float4 xv[8], const float4 wv[8], bool hasw, float scale, int b,
                                         int8_t *xq, int8_t *xq2, float *xd, float *xd2, float *xsum, int2 *xs16) {
	float e[32];
#pragma unroll
	for (int i = 0; i < 8; i++) {
		e[4 * i] = hasw ? xv[i].x * scale * wv[i].x : xv[i].x;
		e[4 * i + 1] = hasw ? xv[i].y * scale * wv[i].y : xv[i].y;
		e[4 * i + 2] = hasw ? xv[i].z * scale * wv[i].z : xv[i].z;
		e[4 * i + 3] = hasw ? xv[i].w * scale * wv[i].w : xv[i].w;
	}
	quant32(e, b, xq, xq2, xd, xd2, xsum, xs16);
}

// The same levels with two threads per block of 32 (lanes 2k and 2k+1 of a
// warp; half h of block b, 16 elements each): the maxima and the block sum
// take one shuffle each. Every lane of the warp calls it; ok is false for
// lanes past the last block (their elements count as zeros, nothing is
// written).
__device__ __forceinline__ void quant16h(const float4 xv[4], const float4 wv[4], bool hasw, float scale, int b,
                                         int h, bool ok, int8_t *xq, int8_t *xq2, float *xd, float *xd2,
                                         float *xsum, int2 *xs16) {
	const unsigned full = 0xffffffffu;
	const int lane = threadIdx.x & 31;
	float e[16];
#pragma unroll
	for (int i = 0; i < 4; i++) {
		e[4 * i] = !ok ? 0.f : hasw ? xv[i].x * scale * wv[i].x : xv[i].x;
		e[4 * i + 1] = !ok ? 0.f : hasw ? xv[i].y * scale * wv[i].y : xv[i].y;
		e[4 * i + 2] = !ok ? 0.f : hasw ? xv[i].z * scale * wv[i].z : xv[i].z;
		e[4 * i + 3] = !ok ? 0.f : hasw ? xv[i].w * scale * wv[i].w : xv[i].w;
	}
	float s4[4];
#pragma unroll
	for (int l = 0; l < 4; l++) s4[l] = (e[4 * l] + e[4 * l + 1]) + (e[4 * l + 2] + e[4 * l + 3]);
	const float part = (s4[0] + s4[2]) + (s4[1] + s4[3]);
	// both lanes add the halves in the same order
	const float sum = __shfl_sync(full, part, lane & ~1) + __shfl_sync(full, part, lane | 1);
	float a4[4];
#pragma unroll
	for (int j = 0; j < 4; j++) a4[j] = fmaxf(fmaxf(fabsf(e[j]), fabsf(e[j + 4])), fmaxf(fabsf(e[j + 8]), fabsf(e[j + 12])));
	float amax = fmaxf(fmaxf(a4[0], a4[1]), fmaxf(a4[2], a4[3]));
	amax = fmaxf(amax, __shfl_xor_sync(full, amax, 1));
	const float d = amax / 127.f;
	const float id = d > 0.f ? __frcp_rn(d) : 0.f;
	float res[16];
	uint32_t w1[4];
	level1<16>(e, d, id, res, w1);
#pragma unroll
	for (int j = 0; j < 4; j++) a4[j] = fmaxf(fmaxf(fabsf(res[j]), fabsf(res[j + 4])), fmaxf(fabsf(res[j + 8]), fabsf(res[j + 12])));
	float amax2 = fmaxf(fmaxf(a4[0], a4[1]), fmaxf(a4[2], a4[3]));
	amax2 = fmaxf(amax2, __shfl_xor_sync(full, amax2, 1));
	const float d2 = amax2 / 127.f;
	const float id2 = d2 > 0.f ? __frcp_rn(d2) : 0.f;
	uint32_t w2[4];
	level2<16>(res, id2, w2);
	if (!ok) return;
	*(uint4 *)(xq + xsw(32 * b + 16 * h)) = make_uint4(w1[0], w1[1], w1[2], w1[3]);
	*(uint4 *)(xq2 + xsw(32 * b + 16 * h)) = make_uint4(w2[0], w2[1], w2[2], w2[3]);
	xs16[2 * b + h] = make_int2(bytesum16(w1), bytesum16(w2));
	if (h == 0) {
		xd[b] = d;
		xd2[b] = d2;
		xsum[b] = sum;
	}
}


// grid-stride over row pairs; block G2_WARPS warps; dynamic shared memory:
// [int8 q1: cols][int8 q2: cols][float d1, d2, sum: cols/32 each][int2 sums of q1, q2: cols/16][float f: cols]
// as needed (16-byte aligned).
// T: the type of every matrix when they share one (the dot products are
// then compiled for that type alone: fewer registers, more warps per SM),
// G2_Q4K_Q6K for Q4_K matrices with a Q6_K last one (see gemv2_pick), or
// -1 for any mix.
//
// k_gemv2's shared memory for a quantized activation of cols columns (g2_body's
// layout, g2_prologue_bytes): each int8 level takes g2_qbytes (a multiple of
// 64 bytes: xsw), each per-block-of-32 array g2_dbytes (int on the device,
// size_t on the host)
template <typename I>
__host__ __device__ constexpr I g2_qbytes(I cols) {
	return (cols + 63) & ~(I)63;
}
template <typename I>
__host__ __device__ constexpr I g2_dbytes(I cols) {
	return ((cols / 32) * 4 + 15) & ~(I)15;
}

// The body is a device function (g2_body) shared by k_gemv2 and the
// persistent decode kernel, which runs it for "virtual" block bid of nblk.
// MK: inside the persistent kernel, where x was written by other blocks of
// the same launch: its loads go through L2 (ld.global.cg), never the
// non-coherent read-only path, and the prefetch and the programmatic launch
// wait are the caller's.

// x as float4 for the prologue (see MK above). G2_XLD (A/B): how k_gemv2
// loads x after the launch wait: 0 plain loads, 1 the non-coherent path
// (__ldg; x is read-only from the wait on), 2 through L2 only (__ldcg).
// Measured on an H100 (session 28, decode tok/s at 128 / 4k, 3 runs, two
// rounds, against 0 in the same machine start): 7B Q8_0 1: 330.1 / 266.9
// and 328.1 / 267.3, 2: 311.1 / 255.6 and 310.5 / 255.5, against 328.0 /
// 269.6 and 327.5 / 269.7; TinyLlama Q8_0 1: 1,178.8 / 1,065.0 and 1,159.8
// / 1,049.7, 2: 1,085.5 / 998.7 and 1,080.8 / 989.1, against 1,154.4 /
// 1,044.3 and 1,165.2 / 1,057.3. The plain loads' L1 (two blocks per SM
// read the same x) is worth 4-6%; the non-coherent path is no faster.
// scripts/chain-probe.cu agrees: a dependent 16 KB read after the wait
// costs 1.57-1.62 us per launch plainly or by __ldg, 2.42 by __ldcg.
#ifndef G2_XLD
#define G2_XLD 0
#endif
template <bool MK, typename V>
__device__ __forceinline__ V ldxv(const V *p) {
	if (MK || G2_XLD == 2) return __ldcg(p);
	if (G2_XLD == 1) return __ldg(p);
	return *p;
}
template <bool MK>
__device__ __forceinline__ float4 ldx4(const float *x, int i) {
	return ldxv<MK>((const float4 *)x + i);
}
template <bool MK>
__device__ __forceinline__ float ldx1(const float *x, int i) {
	return ldxv<MK>(x + i);
}

// The FFN's hand-off in f16 (opt-in, SPARKINFER_DOWN_F16=1 when the model
// is created; slower on an H100, session 26: 7B Q8_0 decode at 128 / 4k
// 315.2-316.2 / 258.0-259.3 against 328.0 / 270.4-271.8 tok/s, 7B Q4_K_M
// 409.3-410.0 / 312.7-314.2 against 415.9-416.1 / 318.7-318.9; with
// G2_XPRE=1 the same within 1%; again in session 38, another H100, 3 runs,
// two rounds: 336.9 / 270.5 and 339.6 / 271.8 against 336.7 / 276.7 and
// 337.1 / 277.6, and 266.7 / 266.5 against 272.6 / 272.6 at 4k in a second
// start; G2_XPRE=1 within 0.7% of the landed build with either setting):
// the gate/up GEMV's SwiGLU written as f16
// (SK_EPI_SWIGLU_F16; k_gemv2's G2_IO_YH kernels) and read so by the down
// GEMV (sk_gemv_fused_f16x; G2_IO_XH). Every block of the down GEMV loads
// the whole activation (7B: 11,008 columns, 44 KB as floats, 256 blocks per
// launch); in session 23's knock-outs leaving half of those loads out was
// worth 1.3-1.8% of 7B Q8_0's decode at 4k. The values are rounded to f16
// once, as the prefill GEMMs' inputs are (k_to_f16), then quantized to the
// two int8 levels as before.
#define G2_IO_XH 1
#define G2_IO_YH 2
// (the Q/K/V GEMV inside k_qkv_ring: its successor is the ring's, which must
// not let the next kernel launch early; see ATT_RING_TRIGGER)
#define G2_IO_NOTRIG 4
// Where a GEMV lets its successor launch (A/B): 0 (the default) before its
// own wait, so the successor's blocks take their places and issue their
// first weight loads while this GEMV's predecessor still runs; 1 after the
// wait for the GEMVs with more columns than rows (the down GEMVs), so that
// the next layer's Q/K/V GEMV cannot launch before the gate/up GEMV has
// ended; 2 after the wait for every GEMV. Session 39's traces (an H100, 7B
// Q8_0 at 4k, SK_TRACE=1, scripts/decode-trace.py with TRACE_CO=1) of
// ATT_RING_TRIGGER = 2 had found a few gate/up and down blocks working
// beside a kernel two launches ahead (0.5-0.7% of them, 31-34% slower); 1
// was to keep that third kernel out. Session 40 (an H100, 7B Q8_0 at 4k, 3
// runs, two rounds): 1 read 269.3 / 269.3 against 272.3 / 272.1 (1.1%
// slower), and with ATT_RING_TRIGGER = 2 too 242.7 / 242.0 (11% slower
// than the default); with the f16 hand-off 268.5 / 267.8 against 265.9 /
// 267.0. Its trace has almost no third kernel left, and the early O
// launch's gate/up still lost 6.3 us a layer, most likely through the SMs'
// shared memory carveout (see DEC_CARVE_KB), not the third kernel.
#ifndef G2_TRIG_LATE
#define G2_TRIG_LATE 0
#endif
// The GEMV's programmatic-launch wait, with its successor's trigger before
// or after it (G2_TRIG_LATE; none with G2_IO_NOTRIG).
template <int IO>
__device__ __forceinline__ void g2_wait(int cols, int rows) {
	const bool trig = !(IO & G2_IO_NOTRIG);
	const bool late = G2_TRIG_LATE == 2 || (G2_TRIG_LATE == 1 && cols > rows);
	if (trig && !late) pdl_trigger();
	pdl_wait();
	if (trig && late) pdl_trigger();
}
// The f16-x kernels' first item before the wait (A/B, 1; the Q8_0 one then
// with P = 2: at P = 4 nvcc 11.8 spilled 128 bytes. TestSwiGLUFusedF16's
// bit-for-bit check against the float-x kernel (P = 4) passed with it:
// nvcc 13.0, an H100, session 26.)
#ifndef G2_XPRE
#define G2_XPRE 0
#endif
// 8 f16 values of x (16 bytes, index i) as two float4
template <bool MK>
__device__ __forceinline__ uint4 ldxh(const float *x, int i) {
	return ldxv<MK>((const uint4 *)x + i);
}
__device__ __forceinline__ void h8f(const uint4 u, float4 &a, float4 &b) {
	const float2 p0 = __half22float2(*(const __half2 *)&u.x), p1 = __half22float2(*(const __half2 *)&u.y);
	const float2 p2 = __half22float2(*(const __half2 *)&u.z), p3 = __half22float2(*(const __half2 *)&u.w);
	a = make_float4(p0.x, p0.y, p1.x, p1.y);
	b = make_float4(p2.x, p2.y, p3.x, p3.y);
}
// The f16 values 32b + 16h .. + 16N of x (N: 1 or 2 halves of a block of
// 32) into u[0 .. 2N), and u's values as floats into xr[0 .. 4N)
template <bool MK, int N>
__device__ __forceinline__ void ldxh_blk(const float *x, int b, int h, uint4 *u) {
#pragma unroll
	for (int i = 0; i < 2 * N; i++) u[i] = ldxh<MK>(x, 4 * b + 2 * h + i);
}
template <int N>
__device__ __forceinline__ void h8f_blk(const uint4 *u, float4 *xr) {
#pragma unroll
	for (int i = 0; i < 2 * N; i++) h8f(u[i], xr[2 * i], xr[2 * i + 1]);
}
// floats 32b + 16h .. + 16N of x into xr[0 .. 4N), from floats or (xh) halves
template <bool MK, int N>
__device__ __forceinline__ void ldx_blk(const float *x, bool xh, int b, int h, float4 *xr) {
	if (xh) {
		uint4 u[2 * N];
		ldxh_blk<MK, N>(x, b, h, u);
		h8f_blk<N>(u, xr);
	} else {
#pragma unroll
		for (int i = 0; i < 4 * N; i++) xr[i] = ldx4<MK>(x, 8 * b + 4 * h + i);
	}
}

// L2 prefetch of the rows of the first npf row pairs of each warp of
// virtual block bid (the weights do not depend on x).
template <int W>
__device__ __forceinline__ void g2_prefetch(const Mats &ms, int bid, int nblk, int npf) {
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int total = mats_total(ms);
	const int npairs = ms.swiglu ? ms.end[0] : (total + 1) / 2;
	for (int k = 0; k < npf; k++) {
		const int p = (bid + k * nblk) * W + warp;
		if (p >= npairs) break;
		const PairLoc L = locate(ms, p, total);
		prefetch_row(L.a, L.ra, lane, ms.pf);
		if (L.has1) prefetch_row(L.b, L.rb, lane, ms.pf);
	}
}

// RMSNorm's scale from each thread's sum of squares (the block's barrier
// included); red: W floats of shared memory. Measured and dropped (session
// 20): quantizing x * w without the scale and multiplying each row's sum by
// it before the epilogue (one prologue barrier instead of two; the scale is a
// factor of every product) lost, decode tok/s at 128 / 4k, 3 runs, against
// the landed kernels in the same machine start: 7B Q8_0 415.4 / 341.9 and
// 413.4 / 340.9 against 417.3 / 350.4 and 414.9 / 348.4, 7B Q4_K_M 473.9 /
// 372.3 against 485.3 / 382.1 (TinyLlama Q8_0 1,319.6 / 1,203.4 against
// 1,323.9 / 1,191.6).
template <int W>
__device__ __forceinline__ float g2_norm_scale(float ss, float *red, int cols, float eps) {
	ss = warp_sum(ss);
	if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = ss;
	__syncthreads();
	float tot = 0.f;
#pragma unroll
	for (int w = 0; w < W; w++) tot += red[w];
	return rsqrtf(tot / cols + eps);
}

// IO: G2_IO_XH, x holds f16 values and has no norm (the host checks that
// the matrices are quantized and cols % 32 == 0); G2_IO_YH, the epilogue is
// SK_EPI_SWIGLU_F16's (the host launches these kernels for it alone).
template <int T, bool MK, int P = 0, int W = G2_WARPS, int IO = 0>
__device__ __forceinline__ void g2_body(const Mats &ms, const float *x, const float *__restrict__ normw, float eps,
                                        int need_q, int need_f, int t0, const EpiDev &e, unsigned char *g2_smem,
                                        int bid, int nblk) {
	TRACE_START();
	constexpr bool XH = IO & G2_IO_XH, YH = IO & G2_IO_YH;
	if (XH) {  // (what the host checked, for the compiler)
		normw = nullptr;
		need_q = 1;
		need_f = 0;
	}
	const int cols = ms.m[0].cols;
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int qbytes = need_q ? g2_qbytes(cols) : 0;
	const int dbytes = need_q ? g2_dbytes(cols) : 0;
	int8_t *xq = (int8_t *)g2_smem;
	int8_t *xq2 = xq + qbytes;
	float *xd = (float *)(g2_smem + 2 * qbytes);
	float *xd2 = (float *)(g2_smem + 2 * qbytes + dbytes);
	float *xsum = (float *)(g2_smem + 2 * qbytes + 2 * dbytes);
	int2 *xs16 = (int2 *)(g2_smem + 2 * qbytes + 3 * dbytes);
	float *xf = (float *)(g2_smem + 2 * qbytes + 3 * dbytes + 4 * dbytes);
	__shared__ float red[W];
	const int total = mats_total(ms);
	const int npairs = ms.swiglu ? ms.end[0] : (total + 1) / 2;

	// Pairs go to warps block by block: a block's warps take neighbouring
	// pairs in each round of nblk * W (gemv2_launch sizes the grid so that
	// the warps' shares are equal: 7B's Q/K/V 3 pairs, O and down 1, gate/up
	// 6 on 230 blocks, its last 32 warps 5). Dropped in session 36:
	// warp-major (p0 = warp * nblk + bid), the same shares and rounds, but a
	// block's warps nblk pairs apart; on an H100, 7B Q8_0 decode tok/s at 128
	// / 4k, 3 runs, two rounds: 334.7 / 273.7 and 333.5 / 273.4 against 337.5
	// / 278.0 and 336.7 / 277.7. Why rows far apart within a block cost that
	// was not traced.
	const int p0 = bid * W + warp;
	// the weights do not depend on x: start their first rows moving to L2
	// while the prologue runs (how much of them: ms.pf)
	if (!MK && p0 < npairs) {
		const PairLoc L = locate(ms, p0, total);
		prefetch_row(L.a, L.ra, lane, ms.pf);
		if (L.has1) prefetch_row(L.b, L.rb, lane, ms.pf);
	}
	// prologue: thread t quantizes blocks of 32 t, t + 256, ..., each from
	// registers (quant32); the norm weights of its first block are weights
	// too, loaded before the wait. The version before it took 8 lanes per
	// block with shuffle reductions, one block per lane group at a time: a
	// knock-out build without any prologue ran TinyLlama Q8_0 at 1,174
	// instead of 938 tok/s and 7B Q4_K_M at 403 instead of 318; this one
	// runs them at 997 and 354 (the same build without it: 1,187 and 418).
	const bool pq = need_q && (cols & 31) == 0 && ((uintptr_t)x & 15) == 0 &&
	                (!normw || ((uintptr_t)normw & 15) == 0);
	const int nb32 = cols / 32, b0 = threadIdx.x;
	// at most 128 blocks of 32 (4,096 columns): two threads per block (quant16h),
	// so that every thread of the block quantizes
	// (at most 128 blocks: the same choice at 16 warps as at 8)
	// What this prologue costs (session 21, knock-out builds with wrong
	// output, 7B Q8_0 decode at 4k, 3 runs, two rounds, against 350.0 /
	// 350.2): no quantization 352.4 / 352.5; neither it nor the norm 351.5 /
	// 352.0 (another machine start, against 347.3 / 347.1); none of the
	// prologue (no x loads either) 361.3 / 358.9; the down GEMV's
	// quantization (the path below) left out 346.5 / 344.2.
	// Session 23 (7B Q8_0 at 4k, 2 rounds of 3 runs, against 354.3 / 351.8
	// and 353.0 / 353.5): half of each block's x loads left out (wrong
	// output) in the 4,096-column GEMVs 355.2 / 351.1, in the down GEMV too
	// 359.6 / 358.7; G2_WARPS 16 353.6 / 353.7. Dropped: the down GEMV in
	// thread block clusters of 2 (4) blocks, each loading and quantizing a
	// half (quarter) of x and storing it into every block's shared memory
	// (st.shared::cluster, two cluster barriers instead of the block's one):
	// 340.7 / 341.0 (320.8 / 318.0), with the first item's loads before the
	// wait 342.0 / 341.7; TinyLlama Q8_0 (down: 5,632 columns) 1,174.7 /
	// 1,190.9 against 1,197.1 / 1,198.9. Fewer x bytes per launch are not
	// what the knock-out gained. Session 26 (an H100, 2 rounds of 3 runs,
	// against the landed kernels): the down GEMV copying a pre-quantized x's
	// 31.6 KB into shared memory instead of loading and quantizing (wrong
	// output) 7B Q8_0 at 128 / 4k +0.1% / +0.6%, 7B Q4_K_M +1.6% / +1.7%.
	// Session 31 (an H100, 2 rounds of 3 runs): the down GEMV split by
	// columns, blocks [0, 128) on the left 5,504 and [128, 256) on the right
	// (each quantizing only its half of x: one block of 32 per thread), the
	// right half's sums added by the next Q/K/V GEMV's prologue and the O
	// GEMV's epilogue, 305.1 / 249.5 and 304.3 / 249.4 against 329.1 / 272.1
	// and 328.8 / 271.7; with its sums never added (wrong output) 257.7 /
	// 258.2 at 4k against 276.3 / 275.8. Its profile put the loss in the
	// next Q/K/V GEMV (+4.3-5.8 us a launch), not in the down GEMV (PERF.md).
	const bool ph = G2_HALF && pq && nb32 <= (W * 16 < 128 ? W * 16 : 128);
	const int hb = threadIdx.x >> 1, hh = threadIdx.x & 1;
	const bool hok = ph && hb < nb32;
	// P > 0: the pipelined body (kernels for Q8_0, Q4_K, Q6_K and Q4_K + Q6_K,
	// where every matrix is quantized: no float activations). Its first item's
	// loads go out before the wait (G2_PRE, Q8_0) when the two-thread prologue
	// runs (its registers leave room for them), else after the prologue.
	constexpr bool PIPE = P > 0 && !MK;
	// the f16-x kernels' first item before the wait (G2_XPRE; x's f16 loads
	// leave room for its registers)
	constexpr bool XPRE = PIPE && XH && G2_XPRE;
	static_assert(!PIPE || T == SK_Q8_0 || T == SK_Q4_K || T == SK_Q6_K || T == G2_Q4K_Q6K, "pipelined types");
	constexpr int U = P > 0 ? P : 1;
	G2Raw<U> A, B;
	int tA = T;
	auto first = [&]() {
		if (p0 < npairs) {
			const PairLoc L = locate(ms, p0, total);
			tA = T == G2_Q4K_Q6K ? L.ta : T;
			g2_ld<T, U>(L, tA, 0, lane, A);
		}
	};
	if (PIPE && G2_PRE && T == SK_Q8_0 && ph) {
		first();
		float4 wr[4], xr[4];
		if (hok && normw) {
#pragma unroll
			for (int i = 0; i < 4; i++) wr[i] = __ldg((const float4 *)normw + 8 * hb + 4 * hh + i);
		}
		g2_wait<IO>(cols, total);
		TRACE_MARK(tr_k1);
		if (hok) ldx_blk<MK, 1>(x, XH, hb, hh, xr);
#if SK_TRACE == 2
		if (hok) TRACE_USE(xr[0].x + xr[1].x + xr[2].x + xr[3].x);
#endif
		TRACE_MARK(tr_kx);
		float scale = 1.f;
		if (normw) {
			float ss = 0.f;
			if (hok) {
#pragma unroll
				for (int i = 0; i < 4; i++) ss += xr[i].x * xr[i].x + xr[i].y * xr[i].y + xr[i].z * xr[i].z + xr[i].w * xr[i].w;
			}
			scale = g2_norm_scale<W>(ss, red, cols, eps);
		}
		TRACE_MARK(tr_ky);
		if (hb < W * 16 && (hb & ~15) < nb32)  // warps with a valid lane (the shuffles need all 32)
			quant16h(xr, wr, normw != nullptr, scale, hb, hh, hok, xq, xq2, xd, xd2, xsum, xs16);
	} else {
		float4 wr[8], xr[8];
		if (pq && !ph && normw && b0 < nb32) {
#pragma unroll
			for (int i = 0; i < 8; i++) wr[i] = __ldg((const float4 *)normw + 8 * b0 + i);
		}
		if (hok && normw) {
#pragma unroll
			for (int i = 0; i < 4; i++) wr[i] = __ldg((const float4 *)normw + 8 * hb + 4 * hh + i);
		}
		// (launched with programmatic dependent launch: x and the epilogue's
		// outputs belong to the predecessor until here)
		if (XPRE) first();
		if (!MK) g2_wait<IO>(cols, total);
		TRACE_MARK(tr_k1);

		// the norm scale, then the activation in shared memory (two int8 levels
		// for quantized weights, floats for float weights)
		float scale = 1.f;
		// a thread's second block of 32 (more than 256 blocks: 7B's down GEMV)
		// is loaded with its first, not one L2 round trip later
		const int b1 = b0 + W * 32;
		const bool two = pq && !ph && b1 < nb32;
		float4 xr1[8];
		const bool one = pq && !ph && b0 < nb32;
		// XH: the f16 loads, every one issued before any conversion waits on
		// one, each block converted where it is quantized (fewer registers
		// live: x has no norm then)
		uint4 u0[4], u1[4];
		if (XH) {
			if (one) ldxh_blk<MK, 2>(x, b0, 0, u0);
			if (hok) ldxh_blk<MK, 1>(x, hb, hh, u0);
			if (two) ldxh_blk<MK, 2>(x, b1, 0, u1);
		} else {
			if (one) ldx_blk<MK, 2>(x, false, b0, 0, xr);
			if (hok) ldx_blk<MK, 1>(x, false, hb, hh, xr);
			if (two) ldx_blk<MK, 2>(x, false, b1, 0, xr1);
		}
		// u0 into xr (for blocks b0 / hb), u1 into xr1 (b1)
		auto cvt0 = [&]() {
			if (one) h8f_blk<2>(u0, xr);
			else h8f_blk<1>(u0, xr);
		};
		auto cvt1 = [&]() { h8f_blk<2>(u1, xr1); };
#if SK_TRACE == 2
		if (XH && (one || hok)) cvt0();
		if (XH && two) cvt1();
		if (hok) TRACE_USE(xr[0].x + xr[1].x + xr[2].x + xr[3].x);
		if (pq && !ph && b0 < nb32) TRACE_USE(xr[0].x + xr[1].x + xr[2].x + xr[3].x + xr[4].x + xr[5].x + xr[6].x + xr[7].x);
		if (two) TRACE_USE(xr1[0].x + xr1[1].x + xr1[2].x + xr1[3].x + xr1[4].x + xr1[5].x + xr1[6].x + xr1[7].x);
#endif
		TRACE_MARK(tr_kx);
		if (normw) {
			float ss = 0.f;
			if (ph) {
				if (hok) {
#pragma unroll
					for (int i = 0; i < 4; i++) ss += xr[i].x * xr[i].x + xr[i].y * xr[i].y + xr[i].z * xr[i].z + xr[i].w * xr[i].w;
				}
			} else if (pq) {
				if (b0 < nb32) {
#pragma unroll
					for (int i = 0; i < 8; i++) ss += xr[i].x * xr[i].x + xr[i].y * xr[i].y + xr[i].z * xr[i].z + xr[i].w * xr[i].w;
				}
				if (two) {
#pragma unroll
					for (int i = 0; i < 8; i++)
						ss += xr1[i].x * xr1[i].x + xr1[i].y * xr1[i].y + xr1[i].z * xr1[i].z + xr1[i].w * xr1[i].w;
				}
				for (int b = b1 + W * 32; b < nb32; b += W * 32) {  // more than 512 blocks of 32
					float4 v[8];
					ldx_blk<MK, 2>(x, XH, b, 0, v);
#pragma unroll
					for (int i = 0; i < 8; i++) ss += v[i].x * v[i].x + v[i].y * v[i].y + v[i].z * v[i].z + v[i].w * v[i].w;
				}
			} else {
				for (int i = threadIdx.x; i < cols; i += blockDim.x) ss += ldx1<MK>(x, i) * ldx1<MK>(x, i);
			}
			scale = g2_norm_scale<W>(ss, red, cols, eps);
		}
		TRACE_MARK(tr_ky);
		if (need_f) {
			for (int i = threadIdx.x; i < cols; i += blockDim.x) xf[i] = normw ? ldx1<MK>(x, i) * scale * normw[i] : ldx1<MK>(x, i);
		}
		if (ph) {
			if (SK_TRACE != 2 && XH && hok) cvt0();
			if (hb < W * 16 && (hb & ~15) < nb32)  // warps with a valid lane (the shuffles need all 32)
				quant16h(xr, wr, normw != nullptr, scale, hb, hh, hok, xq, xq2, xd, xd2, xsum, xs16);
		} else if (pq) {
			if (SK_TRACE != 2 && XH && one) cvt0();
			if (b0 < nb32) quant32n(xr, wr, normw != nullptr, scale, b0, xq, xq2, xd, xd2, xsum, xs16);
			if (two) {
				if (SK_TRACE != 2 && XH) cvt1();
				float4 wv[8];
#pragma unroll
				for (int i = 0; i < 8; i++) wv[i] = normw ? __ldg((const float4 *)normw + 8 * b1 + i) : make_float4(1.f, 1.f, 1.f, 1.f);
				quant32n(xr1, wv, normw != nullptr, scale, b1, xq, xq2, xd, xd2, xsum, xs16);
			}
			for (int b = b1 + W * 32; b < nb32; b += W * 32) {  // more than 512 blocks of 32
				float4 xv[8], wv[8];
				if (XH) ldx_blk<MK, 2>(x, true, b, 0, xv);
#pragma unroll
				for (int i = 0; i < 8; i++) {
					if (!XH) xv[i] = ldx4<MK>(x, 8 * b + i);
					wv[i] = normw ? __ldg((const float4 *)normw + 8 * b + i) : make_float4(1.f, 1.f, 1.f, 1.f);
				}
				quant32n(xv, wv, normw != nullptr, scale, b, xq, xq2, xd, xd2, xsum, xs16);
			}
		} else if (need_q) {
			// unaligned or odd lengths: 8 lanes per block of 32 (4 elements
			// each), 4 blocks per warp step; the loop is warp-uniform for the
			// shuffles
			const int ngroups = cols / 32;
			for (int base = warp * 4; base < ngroups; base += W * 4) {
				const int g = base + (lane >> 3);
				const bool ok = g < ngroups;
				const int i = g * 32 + (lane & 7) * 4;
				float v[4] = {0.f, 0.f, 0.f, 0.f};
				if (ok) {
#pragma unroll
					for (int k = 0; k < 4; k++) v[k] = normw ? ldx1<MK>(x, i + k) * scale * normw[i + k] : ldx1<MK>(x, i + k);
				}
				float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
#pragma unroll
				for (int o = 4; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
				const float d = amax / 127.f;
				const float id = d > 0.f ? 1.f / d : 0.f;
				float q[4], res[4];
#pragma unroll
				for (int k = 0; k < 4; k++) {
					q[k] = rintf(v[k] * id);
					res[k] = __fmaf_rn(-q[k], d, v[k]);
				}
				float amax2 = fmaxf(fmaxf(fabsf(res[0]), fabsf(res[1])), fmaxf(fabsf(res[2]), fabsf(res[3])));
#pragma unroll
				for (int o = 4; o > 0; o >>= 1) amax2 = fmaxf(amax2, __shfl_xor_sync(0xffffffffu, amax2, o));
				const float d2 = amax2 / 127.f;
				const float id2 = d2 > 0.f ? 1.f / d2 : 0.f;
				float s = (v[0] + v[1]) + (v[2] + v[3]);
#pragma unroll
				for (int o = 4; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
				char4 c1, c2;
				c1.x = (signed char)(int)q[0];
				c1.y = (signed char)(int)q[1];
				c1.z = (signed char)(int)q[2];
				c1.w = (signed char)(int)q[3];
				c2.x = (signed char)__float2int_rn(res[0] * id2);
				c2.y = (signed char)__float2int_rn(res[1] * id2);
				c2.z = (signed char)__float2int_rn(res[2] * id2);
				c2.w = (signed char)__float2int_rn(res[3] * id2);
				// the sums of each level over the half block (4 lanes)
				int h1 = (int)c1.x + c1.y + c1.z + c1.w, h2 = (int)c2.x + c2.y + c2.z + c2.w;
#pragma unroll
				for (int o = 2; o > 0; o >>= 1) {
					h1 += __shfl_xor_sync(0xffffffffu, h1, o);
					h2 += __shfl_xor_sync(0xffffffffu, h2, o);
				}
				if (ok) {
					*(char4 *)(xq + xsw(i)) = c1;
					*(char4 *)(xq2 + xsw(i)) = c2;
					if ((lane & 3) == 0) xs16[2 * g + ((lane >> 2) & 1)] = make_int2(h1, h2);
					if ((lane & 7) == 0) {
						xd[g] = d;
						xd2[g] = d2;
						xsum[g] = s;
					}
				}
			}
		}
		if (PIPE && !XPRE) first();
	}
	__syncthreads();
	TRACE_MARK(tr_k2);
	const Xs xs{xq, xq2, xd, xd2, xsum, xs16, xf};

	if (PIPE) {
		constexpr int IC = g2_item_cols<T, U>();
		const int nch = (cols + IC - 1) / IC, stride = nblk * W;
		int p = p0, c = 0, tc = tA;
		float s0 = 0.f, s1 = 0.f;
		// Dropped in session 29: a warp's pairs past its first taken by ticket
		// (atomicAdd on a counter per warp index, asked for an item before
		// the answer is needed; the warp with the last ticket zeroed it), so
		// that faster warps take more pairs, in the launches of more pairs
		// than warps (7B's Q/K/V, gate/up and output GEMVs). The sums were
		// the same bit for bit (TestGemvFused, TestSwiGLUFused,
		// TestDecodePersistent passed). On an H100, 7B Q8_0 decode tok/s at
		// 128 / 4k, 3 runs, two rounds: 326.4 / 269.2 twice, and with the
		// grids filled to 264 blocks 326.1 / 268.2 and 326.2 / 268.2, against
		// 329.4 / 271.8 and 329.6 / 272.2. The trace (H100, 4k) had the
		// fixed pairs' blocks end within 2.6-5.9 us of each other.
		// one item: the next item's loads into nxt, then cur's products (and
		// after a pair's last item its sums out); false past the warp's pairs
		auto step = [&](G2Raw<U> &cur, G2Raw<U> &nxt) {
			int pn = p, cn = c + 1;
			if (cn == nch) {
				cn = 0;
				pn += stride;
			}
			int tn = tc;
			if (pn < npairs) {
				const PairLoc Ln = locate(ms, pn, total);
				tn = T == G2_Q4K_Q6K ? Ln.ta : T;
				g2_ld<T, U>(Ln, tn, cn, lane, nxt);
			}
			g2_mul<T, U>(cur, tc, c, cols, xs, lane, s0, s1);
			if (cn == 0) {
				s0 = warp_sum(s0);
				s1 = warp_sum(s1);
				if (lane == 0) epi_out<YH>(e, t0, 2 * p, s0, s1, ms.swiglu || 2 * p + 1 < total);
				s0 = s1 = 0.f;
			}
			p = pn;
			c = cn;
			tc = tn;
			return p < npairs;
		};
		if (p < npairs)
			while (step(A, B) && step(B, A)) {
			}
	} else {
		for (int p = p0; p < npairs; p += nblk * W) {
			const PairLoc L = locate(ms, p, total);
			float s0, s1;
			if (T == G2_Q4K_Q6K) {
				// Q4_K matrices and a Q6_K one (no pair straddles two matrices)
				if (L.ta == SK_Q6_K) dot2_row(SK_Q6_K, L.a, L.ra, L.b, L.rb, xs, lane, s0, s1);
				else dot2_row(SK_Q4_K, L.a, L.ra, L.b, L.rb, xs, lane, s0, s1);
			} else if (T >= 0) {
				dot2_row(T, L.a, L.ra, L.b, L.rb, xs, lane, s0, s1);
			} else if (L.ta == L.tb) {
				dot2_row(L.ta, L.a, L.ra, L.b, L.rb, xs, lane, s0, s1);
			} else {
				float unused;
				dot2_row(L.ta, L.a, L.ra, L.a, L.ra, xs, lane, s0, unused);
				dot2_row(L.tb, L.b, L.rb, L.b, L.rb, xs, lane, s1, unused);
			}
			s0 = warp_sum(s0);
			s1 = warp_sum(s1);
			if (lane == 0) epi_out<YH>(e, t0, 2 * p, s0, s1, L.has1);
		}
	}
#if SK_TRACE
#if SK_TRACE == 2
	if (!MK) trace_rec(tr_g0, tr_k1, tr_kx, tr_ky, T, nblk, bid, cols, total, tr_k2);
#else
	if (!MK) trace_rec(tr_g0, tr_k0, tr_k1, tr_k2, T, nblk, bid, cols, total);
#endif
#endif
}

// P: 0 the dot2_row body, else the pipelined one (Q8_0: P pieces per item);
// IO: f16 input or output (see g2_body)
template <int T, int P = 0, int IO = 0>
__global__ void __launch_bounds__(G2_WARPS * 32, G2_MINB) k_gemv2(Mats ms, const float *__restrict__ x,
                                                         const float *__restrict__ normw, float eps, int need_q,
                                                         int need_f, int t0, EpiDev e) {
	extern __shared__ __align__(16) unsigned char g2_smem[];
	g2_body<T, false, P, G2_WARPS, IO>(ms, x, normw, eps, need_q, need_f, t0, e, g2_smem, blockIdx.x, gridDim.x);
}

typedef void (*gemv2_fn)(Mats, const float *, const float *, float, int, int, int, EpiDev);
// [0..4]: dot2_row bodies (any type, Q8_0, Q4_K, Q6_K, Q4_K + Q6_K); [5..9]
// pipelined: Q8_0 with 2 and 4 pieces per item, Q4_K, Q6_K, Q4_K + Q6_K
static const gemv2_fn gemv2_kernels[] = {k_gemv2<-1>,          k_gemv2<SK_Q8_0>,    k_gemv2<SK_Q4_K>,
                                         k_gemv2<SK_Q6_K>,     k_gemv2<G2_Q4K_Q6K>, k_gemv2<SK_Q8_0, 2>,
                                         k_gemv2<SK_Q8_0, 4>,  k_gemv2<SK_Q4_K, 1>, k_gemv2<SK_Q6_K, 1>,
                                         k_gemv2<G2_Q4K_Q6K, 1>,
                                         // f16 x: 5, 6, 7, 2, 8, 3 (g2_io_kernel)
                                         k_gemv2<SK_Q8_0, 2, G2_IO_XH>, k_gemv2<SK_Q8_0, 4, G2_IO_XH>,
                                         k_gemv2<SK_Q4_K, 1, G2_IO_XH>, k_gemv2<SK_Q4_K, 0, G2_IO_XH>,
                                         k_gemv2<SK_Q6_K, 1, G2_IO_XH>, k_gemv2<SK_Q6_K, 0, G2_IO_XH>,
                                         // f16 SwiGLU out: 0, 5, 6, 7, 2, 8, 3
                                         k_gemv2<-1, 0, G2_IO_YH>, k_gemv2<SK_Q8_0, 2, G2_IO_YH>,
                                         k_gemv2<SK_Q8_0, 4, G2_IO_YH>, k_gemv2<SK_Q4_K, 1, G2_IO_YH>,
                                         k_gemv2<SK_Q4_K, 0, G2_IO_YH>, k_gemv2<SK_Q6_K, 1, G2_IO_YH>,
                                         k_gemv2<SK_Q6_K, 0, G2_IO_YH>};

#ifndef G2_MIX
#define G2_MIX 1  // 0: the generic kernel for Q4_K + Q6_K too (A/B)
#endif

// The kernel for nmat matrices (validated by the caller): the one compiled
// for their common type; for Q4_K matrices followed by a Q6_K one (the
// Q/K/V of Q4_K_M layers whose V is Q6_K) the one with just those two dot
// products (ncu measured the generic kernel, every type compiled in, at
// 1.17 TB/s of weights there against 1.83 for uniform Q4_K; A/B on the
// H200: 7B Q4_K_M decode 371.6 instead of 356.3 tok/s); else the generic one.
// With G2_PIPE the quantized kernels pipeline their loads (see G2Raw): Q8_0
// with 2 pieces per item up to 2,048 columns and 4 beyond (A/B: TinyLlama
// Q8_0 1,185 / 908 with 2 against 1,136 / 884 with 4), the K-quants when a
// row is one item (2,048 columns or fewer) and when few is set (the GEMV
// has at most one row pair per warp of a wave) and a row takes dot2_row more
// than one round of loads (16 super-blocks per lane group: more than 4,096
// columns) and at most G2_KP_FEW columns. Such a warp has no second pair
// whose loads could overlap its products, so dot2_row's rounds ran back to
// back: TinyLlama's down GEMV (2,048 rows of 5,632 columns, Q4_K or Q6_K) on
// 1,024 warps. A/B on the H200 (decode tok/s at 128 / 4k tokens of context):
// - every few-pair GEMV up to 8,192 columns (3 runs, two rounds, one machine
//   start): TinyLlama Q4_K_M 1,287.5 / 1,176.6 and 1,293.3 / 1,176.1 against
//   1,229.3 / 1,124.8 and 1,248.5 / 1,140.7; 7B Q4_K_M, whose O GEMV (4,096 x
//   4,096, two items: one round of dot2_row) then changed too, 450.5 / 343.3
//   and 450.2 / 343.7 against 456.5 / 359.8 and 456.3 / 360.5, hence the lower
//   bound; the Q8_0 models do not use it;
// - without the upper bound 7B Q4_K_M's down GEMV (4,096 x 11,008, 43
//   super-blocks) ran it too (5 runs, three rounds): 452.7 / 356.1, 451.7 /
//   355.8, 450.2 / 355.4 against 458.6 / 360.9, 456.5 / 361.0, 458.1 / 360.2
//   with the bound of 8,192.
#ifndef G2_KP_FEW
#define G2_KP_FEW 8192  // the longest such rows (0: never)
#endif
// Dropped (session 32, an H100; decode tok/s at 128 / 4k, two rounds,
// against the landed kernels in the same machine start): every K-quant GEMV
// pipelined, 7B Q4_K_M 415.9 / 312.8 and 416.1 / 312.7 against 416.1 /
// 319.8 and 417.3 / 319.7, TinyLlama Q4_K_M 1,361.7 / 1,212.8 and 1,359.9 /
// 1,214.5 against 1,355.5 / 1,219.7 and 1,362.8 / 1,213.4.
// The f16-x (io G2_IO_XH) or f16-SwiGLU (G2_IO_YH) kernel of gemv2_pick's
// kernel f (null: none, e.g. for mixed types with f16 x).
static_assert(sizeof(gemv2_kernels) / sizeof(gemv2_kernels[0]) == 23, "g2_io_kernel's indices");
static gemv2_fn g2_io_kernel(gemv2_fn f, int io) {
	static const int xh_from[6] = {5, 6, 7, 2, 8, 3}, yh_from[7] = {0, 5, 6, 7, 2, 8, 3};
	if (io == 0) return f;
	if (io == G2_IO_XH) {
		for (int i = 0; i < 6; i++)
			if (f == gemv2_kernels[xh_from[i]]) return gemv2_kernels[10 + (G2_XPRE && i == 1 ? 0 : i)];
	} else if (io == G2_IO_YH) {
		for (int i = 0; i < 7; i++)
			if (f == gemv2_kernels[yh_from[i]]) return gemv2_kernels[16 + i];
	}
	return nullptr;
}

static gemv2_fn gemv2_pick(int nmat, const sk_matrix *const *W, bool swiglu, bool few) {
	int u = W[0]->type;
	for (int i = 1; i < nmat; i++)
		if (W[i]->type != u) u = -1;
	const int cols = W[0]->cols;
	constexpr int round_cols = 8 * (Q4_U > Q6_U ? Q4_U : Q6_U) * 256;  // one round of dot2_q4_k / dot2_q6_k
	const bool kp = G2_PIPE && (cols <= g2_item_cols<SK_Q4_K, 1>() || (few && cols > round_cols && cols <= G2_KP_FEW));
	switch (u) {
	case SK_Q8_0: return G2_PIPE ? gemv2_kernels[cols <= 2048 ? 5 : 6] : gemv2_kernels[1];
	case SK_Q4_K: return gemv2_kernels[kp ? 7 : 2];
	case SK_Q6_K: return gemv2_kernels[kp ? 8 : 3];
	}
	if (u != -1 || !G2_MIX || swiglu || nmat < 2 || W[nmat - 1]->type != SK_Q6_K) return gemv2_kernels[0];
	for (int i = 0; i + 1 < nmat; i++)
		if (W[i]->type != SK_Q4_K) return gemv2_kernels[0];
	return gemv2_kernels[kp ? 9 : 4];
}

// Raise the dynamic shared memory limit of every k_gemv2 instantiation.
static cudaError_t gemv2_set_smem(sk_ctx *ctx, int smem) {
	for (gemv2_fn f : gemv2_kernels) {
		const cudaError_t e = cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
		if (e != cudaSuccess) return e;
	}
	ctx->g2_smem = smem;
	return cudaSuccess;
}

// The rows of nmat matrices (validated by the caller) as k_gemv2 sees them,
// and whether any is quantized (need_q) or float (need_f).
static Mats g2_mats(int nmat, const sk_matrix *const *W, bool swiglu, int *need_q, int *need_f) {
	Mats ms;
	memset(&ms, 0, sizeof ms);
	ms.nmat = nmat;
	ms.swiglu = swiglu;
	ms.pf = -1;
	int total = 0;
	*need_q = *need_f = 0;
	for (int i = 0; i < nmat; i++) {
		ms.m[i] = matdev(W[i]);
		ms.type[i] = W[i]->type;
		total += W[i]->rows;
		ms.end[i] = total;
		if (is_quant(W[i]->type)) *need_q = 1;
		else *need_f = 1;
	}
	return ms;
}

// k_gemv2's dynamic shared memory for cols activations (see its layout).
static size_t g2_prologue_bytes(int cols, int need_q, int need_f) {
	const size_t c = (size_t)cols;
	size_t b = 0;
	if (need_q) b += 2 * g2_qbytes(c) + 7 * g2_dbytes(c);
	if (need_f) b += c * 4;
	return b;
}

static int check_epi(sk_ctx *ctx, const sk_epilogue *e, int rows, int nmat, int rows0) {
	if (!e) return fail(ctx, SK_E_ARG, "fused op: null epilogue");
	switch (e->mode) {
	case SK_EPI_STORE:
	case SK_EPI_ACC:
		if (!e->y || e->ldy < rows + e->roff || e->roff < 0) return fail(ctx, SK_E_ARG, "fused op: bad y/ldy/roff");
		return SK_OK;
	case SK_EPI_SWIGLU:
	case SK_EPI_SWIGLU_F16:
		if (nmat != 2 || !e->y || e->ldy < rows0) return fail(ctx, SK_E_ARG, "fused op: swiglu needs 2 matrices and y");
		return SK_OK;
	case SK_EPI_QKV: {
		if (!e->q_out || !e->k_cache || !e->v_cache || !e->pos0 || e->n_head <= 0 || e->n_kv_head <= 0 ||
		    e->head_dim <= 0 || (e->head_dim & 1) || e->rope_dim <= 0 || (e->rope_dim & 1) ||
		    e->rope_dim > e->head_dim || e->max_ctx <= 0 || (e->roff & 1) || e->roff < 0)
			return fail(ctx, SK_E_ARG, "fused op: bad qkv epilogue");
		const int all = (e->n_head + 2 * e->n_kv_head) * e->head_dim;
		if (e->roff + rows > all) return fail(ctx, SK_E_ARG, "fused op: qkv rows %d + %d exceed %d", e->roff, rows, all);
		return SK_OK;
	}
	}
	return fail(ctx, SK_E_ARG, "fused op: unknown epilogue mode %d", e->mode);
}

// Whether a GEMV launch's warps ask L2 for their first row pairs at their
// start (k_gemv2, while the prologue loads and quantizes x): -1 (whole rows)
// where those pairs hold at most ctx->g2_pf_max bytes (G2_PF_MAX_MB MB, or
// SPARKINFER_G2_PF_MAX when the context is created), else 0 (none). Asked
// for at once, tens of MB slowed the 7B models' GEMVs. The warps' first
// pairs on the H200 (one wave of 2 blocks of 8 warps per SM): 7B Q8_0 16-18
// MB for the Q/K/V, O, gate/up and output GEMVs, all 47.9 MB of the down one;
// 7B Q4_K_M 8.5-10.9 MB, down 25-37 MB; TinyLlama 2.4-12.3 MB. A/B on the
// H200 (decode tok/s at 128 / 4k tokens of context, 3 runs, two rounds in one
// machine start, session 17), at most 10 MB per launch against every launch:
// 7B Q8_0 416.0 / 340.6 and 416.9 / 342.1 against 402.4 / 326.2 and 403.3 /
// 327.1; 7B Q4_K_M 452.9 / 355.2 and 452.6 / 354.4 against 446.7 / 348.3 and
// 447.5 / 349.4; TinyLlama within noise: Q8_0 1,336.4 / 1,203.0 and 1,345.2 / 1,214.0
// against 1,331.6 / 1,207.1 and 1,335.2 / 1,178.7, Q4_K_M 1,292.9 / 1,173.5
// and 1,282.3 / 1,178.8 against 1,279.2 / 1,170.3 and 1,290.2 / 1,173.8. No
// prefetch at all (0) and limits of 8 and 13 MB read the same as 10 within
// 1.5% for the 7B models; TinyLlama's rounds of one setting differ by more
// than its settings do (PERF.md, sixteenth version). 7B Q8_0's first pairs
// (16-18 MB but the down GEMV's) are left out by 10 MB; session 21 tried
// them (7B Q8_0 at 4k, 3 runs, two rounds): SPARKINFER_G2_PF_MAX=20 read
// 343.2 / 342.6 against 348.1 / 350.1, and the first bytes of each first row
// up to 10 MB per launch (a partial prefetch) 351.3 / 351.3 against 353.5 /
// 353.9 (both with ATT_R1). With the 164 KB carveout (session 43, an H100,
// 7B Q8_0 at 128 / 4k, two rounds), 6 and 16 read as 10 does: 322.6 / 258.2
// and 324.0 / 258.0, 323.2 / 257.7 and 323.8 / 257.8, against 323.4 / 257.7
// and 323.6 / 256.3.
static int g2_pf(const sk_ctx *ctx, int nmat, const sk_matrix *const *W, int npairs, int grid) {
	double bytes = 0;
	for (int i = 0; i < nmat; i++) bytes += (double)W[i]->bytes;
	const int first = std::min(npairs, grid * G2_WARPS);
	return npairs > 0 && bytes * first / npairs <= ctx->g2_pf_max ? -1 : 0;
}

static bool epi_swiglu(const sk_epilogue *e) { return e && (e->mode == SK_EPI_SWIGLU || e->mode == SK_EPI_SWIGLU_F16); }

// Launch the fused GEMV for token t0 of the epilogue (x points at that token).
// xh: x holds f16 values (sk_gemv_fused_f16x: quantized matrices, cols % 32
// == 0, x 16-byte aligned, no norm).
static int gemv2_launch(sk_ctx *ctx, int nmat, const sk_matrix *const *W, const float *x, const float *normw,
                        float eps, const sk_epilogue *epi, int t0, bool xh) {
	if (nmat < 1 || nmat > G2_MAXMAT || !W || !x) return fail(ctx, SK_E_ARG, "sk_gemv_fused: bad arguments");
	for (int i = 0; i < nmat; i++) {
		if (!W[i]) return fail(ctx, SK_E_ARG, "sk_gemv_fused: null matrix %d", i);
		if (W[i]->cols != W[0]->cols) return fail(ctx, SK_E_ARG, "sk_gemv_fused: matrices differ in cols");
		if (!epi_swiglu(epi) && i + 1 < nmat && (W[i]->rows & 1))
			return fail(ctx, SK_E_ARG, "sk_gemv_fused: a matrix before the last has odd rows");
	}
	if (epi_swiglu(epi) && (nmat != 2 || W[0]->rows != W[1]->rows))
		return fail(ctx, SK_E_ARG, "sk_gemv_fused: swiglu needs two matrices of equal rows");
	int need_q, need_f;
	Mats ms = g2_mats(nmat, W, epi_swiglu(epi), &need_q, &need_f);
	const int total = ms.end[nmat - 1];
	int rc = check_epi(ctx, epi, ms.swiglu ? W[0]->rows : total, nmat, W[0]->rows);
	if (rc != SK_OK) return rc;
	const int cols = W[0]->cols;
	if (xh && (need_f || (cols & 31) || ((uintptr_t)x & 15) || normw))
		return fail(ctx, SK_E_ARG, "sk_gemv_fused_f16x: needs quantized matrices, cols %% 32 == 0 and a 16-byte aligned x");
	const size_t smem = g2_prologue_bytes(cols, need_q, need_f);
	if (smem > 48 * 1024 && (int)smem > ctx->g2_smem) {
		if (smem > 200 * 1024) return fail(ctx, SK_E_UNSUPPORTED, "sk_gemv_fused: %d cols too long", cols);
		CK(ctx, gemv2_set_smem(ctx, (int)smem));
	}
	const int npairs = ms.swiglu ? W[0]->rows : (total + 1) / 2;
	// (few: the warps of a wave at G2_MINB blocks per SM)
	const gemv2_fn kern = g2_io_kernel(gemv2_pick(nmat, W, ms.swiglu, npairs <= ctx->sm_count * G2_MINB * G2_WARPS),
	                                   (xh ? G2_IO_XH : 0) | (epi->mode == SK_EPI_SWIGLU_F16 ? G2_IO_YH : 0));
	if (!kern)
		return fail(ctx, SK_E_ARG, xh ? "sk_gemv_fused_f16x: the matrices must share one quantized type, and the epilogue be f32"
		                              : "sk_gemv_fused: no kernel for this f16 epilogue");
	const int tiles = (npairs + G2_WARPS - 1) / G2_WARPS;
	// one wave: as many blocks as fit on the GPU at once, each warp taking
	// an equal share of pairs (a second, partial wave would idle most SMs)
	// (equal shares per SM: scripts/gpc-probe.cu found the SMs' streaming
	// rates within a few percent of each other on an H100, and shares set
	// by each SM's measured rate no faster, session 30)
	int per_sm = 0;
	CK(ctx, cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, G2_WARPS * 32, smem));
	const int maxgrid = ctx->sm_count * std::max(per_sm, 1);
	const int per = (tiles + maxgrid - 1) / maxgrid;
	const int grid = (tiles + per - 1) / per;
	ms.pf = g2_pf(ctx, nmat, W, npairs, grid);
	CK(ctx, launch_pdl(ctx, kern, dim3(grid), dim3(G2_WARPS * 32), smem, ms, x, normw, eps, need_q, need_f, t0,
	                   epidev(epi)));
	return SK_OK;
}

extern "C" int sk_gemv_fused(sk_ctx *ctx, int nmat, const sk_matrix *const *W, const float *d_x,
                             const float *d_norm_w, float eps, const sk_epilogue *epi) {
	ENTER(ctx);
	return gemv2_launch(ctx, nmat, W, d_x, d_norm_w, eps, epi, 0, false);
}

extern "C" int sk_gemv_fused_f16x(sk_ctx *ctx, int nmat, const sk_matrix *const *W, const uint16_t *d_x,
                                  const sk_epilogue *epi) {
	ENTER(ctx);
	if (!d_x) return fail(ctx, SK_E_ARG, "sk_gemv_fused_f16x: null x");
	return gemv2_launch(ctx, nmat, W, (const float *)d_x, nullptr, 0.f, epi, 0, true);
}

// ---------------------------------------------------------------- tensor-core GEMM (prefill)
//
// Y = epilogue(X W^T): M = tokens (A = an f16 copy of X, made once per GEMM
// by k_to_f16), N = weight rows (B = W dequantized to f16), K = cols. Block
// tile BM (64 or 128) tokens x 128 rows x 32, 8 warps of BM/2 x 32, mma.sync.m16n8k16
// f16 -> f32. The loads of k-tile kt + ST - 1 go out (into a ring of
// registers) while k-tile kt is multiplied; two shared buffers, one barrier
// per k-tile. The thread holding (t, r) also holds (t, r+1): the pair
// epilogues run on accumulator registers. With fewer blocks than the GPU
// holds, the k range is split (split-K, below).
// A/B on the H200 (sm_90, nvcc 13.0), prefill 512 tok/s, TinyLlama Q8_0 /
// Q4_K_M / 7B Q4_K_M: f16 copy of X +6% / +3% / +3.5%; split-K +8.6% /
// +15% / 0; a ring of 3 instead of 2 for the small k-tiles +3% / +3.5% /
// +4%; two blocks per SM (MM_MINB 2) beat one by 40% at 7B.

// Tokens per block tile BM: 64, or 128 from MM_BM128_MIN tokens on (warp
// tiles of BM/2 x 32: each block dequantizes its weight rows once per 128
// tokens instead of per 64, and issues 3 instead of 4 ldmatrix per 4 mma).
// A/B at 512 tokens (every type at 128, a ring of 2): TinyLlama Q8_0 +6%,
// 7B Q4_K_M +10%; at 128 tokens the 64-token tiles won (more blocks). Q6_K
// and F32 keep 64 (their wider raw k-tiles spill at 128).
#ifndef MM_BM128_MIN
#define MM_BM128_MIN 256
#endif
#define MM_BN 128
#define MM_BK 32
#define MM_LD (MM_BK + 8)  // halves per shared row (16-byte pad: conflict-free ldmatrix)
#ifndef MM_MINB
#define MM_MINB 2
#endif
#ifndef MM_STQ
#define MM_STQ 3  // k-tiles in flight for Q8_0, Q4_K, F16 and BF16 weights
#endif
// Q6_K's raw k-tile (3 x 16 bytes + a scale) and F32's (64 bytes) hold a
// ring of 2; the others, 20-36 bytes with the f16 activations, of MM_STQ.
// With 128-token tiles every type holds a ring of 2 (3 spills).
__host__ __device__ constexpr int mm_stages(int t, int bm) { return t == SK_Q6_K || t == SK_F32 || bm > 64 ? 2 : MM_STQ; }

// The weight rows of one GEMM: up to three matrices of one type, rows
// concatenated (QKV), or two interleaved (gate/up: tile row j is row j/2 of
// m[0] when j is even, of m[1] when odd).
struct GMats {
	MatDev m[3];
	int end[3];  // cumulative rows
	int nmat, interleave;
};

// Raw bytes of 16 weights as loaded; every scale stays raw too, decoded in
// b_deq at store time, so that no load is used before the current k-tile's
// products (a scale decoded at load time made each k-tile wait one full
// memory latency).
struct BRaw {
	uint4 v[4];
	uint32_t s;  // Q8_0, Q6_K: the f16 scale's bits
};

// Q4_K sub-block j's 6-bit scale and min from the block header's bytes 4..15
// (hd.y, hd.z, hd.w), as ggml's get_scale_min_k4.
__device__ __forceinline__ void q4k_scale_min(const uint4 hd, int j, int &sc, int &mn) {
	const int sh = 8 * (j & 3);
	const int by = (hd.y >> sh) & 0xFF, bz = (hd.z >> sh) & 0xFF, bw = (hd.w >> sh) & 0xFF;
	const int slo = by & 63, mlo = bz & 63;
	const int shi = (bw & 0xF) | ((by >> 6) << 4), mhi = (bw >> 4) | ((bz >> 6) << 4);
	sc = j < 4 ? slo : shi;
	mn = j < 4 ? mlo : mhi;
}

// byte i (0..15) of v, sign-extended, without a local-memory array
__device__ __forceinline__ int s8_of(const uint4 v, int i) {
	const uint32_t w = (i >> 2) == 0 ? v.x : (i >> 2) == 1 ? v.y : (i >> 2) == 2 ? v.z : v.w;
	return (int)(int8_t)(w >> (8 * (i & 3)));
}

// Load 16 elements [k, k+16) of row r of m (raw, dequantized later).
template <int T>
__device__ __forceinline__ void b_load(const MatDev &m, int r, int k, BRaw &b) {
	if (T == SK_F32) {
		const float4 *p = (const float4 *)((const float *)m.q + (size_t)r * m.cols + k);
#pragma unroll
		for (int i = 0; i < 4; i++) {
			float4 f = __ldg(p + i);
			b.v[i] = make_uint4(__float_as_uint(f.x), __float_as_uint(f.y), __float_as_uint(f.z), __float_as_uint(f.w));
		}
	} else if (T == SK_F16 || T == SK_BF16) {
		const uint4 *p = (const uint4 *)((const uint16_t *)m.q + (size_t)r * m.cols + k);
		b.v[0] = __ldg(p);
		b.v[1] = __ldg(p + 1);
	} else if (T == SK_Q8_0) {
		b.v[0] = __ldg((const uint4 *)((const int8_t *)m.q + (size_t)r * m.cols + k));
		b.s = __half_as_ushort(__ldg(m.d + (size_t)r * (m.cols / 32) + k / 32));
	} else if (T == SK_Q4_K) {
		const uint8_t *blk = (const uint8_t *)m.q + (size_t)r * m.row_bytes + (size_t)(k / 256) * 144;
		const int i0 = k % 256, j = i0 / 32, g = j / 2, l0 = i0 % 32;
		b.v[0] = __ldg((const uint4 *)(blk + q4k_poff(2 * g + l0 / 16)));
		b.v[1] = __ldg((const uint4 *)blk);  // {d, dmin, scales[12]}
	} else if (T == SK_Q6_K) {
		const int nb = m.cols / 256, sb = k / 256, i0 = k % 256;
		const uint8_t *blk = (const uint8_t *)m.q + ((size_t)r * nb + sb) * 208;
		const int n = i0 / 128, j = i0 % 128, quarter = j / 32, l0 = j % 32;
		b.v[0] = __ldg((const uint4 *)(blk + n * 64 + (quarter & 1) * 32 + l0));
		b.v[1] = __ldg((const uint4 *)(blk + 128 + n * 32 + l0));
		b.v[2] = __ldg((const uint4 *)(blk + 192));  // scales[16]
		b.s = __half_as_ushort(__ldg(m.d + (size_t)r * nb + sb));
	}
}

__device__ __forceinline__ uint32_t pack_h2(float a, float b) {
	__half2 h = __floats2half2_rn(a, b);
	return *(uint32_t *)&h;
}

// Dequantize the raw 16 elements (starting at k) into 8 packed half2.
template <int T>
__device__ __forceinline__ void b_deq(const BRaw &b, int k, uint32_t out[8]) {
	if (T == SK_F32) {
		const float *f = (const float *)b.v;
#pragma unroll
		for (int i = 0; i < 8; i++) out[i] = pack_h2(f[2 * i], f[2 * i + 1]);
	} else if (T == SK_F16) {
		const uint32_t *w = (const uint32_t *)b.v;
#pragma unroll
		for (int i = 0; i < 8; i++) out[i] = w[i];
	} else if (T == SK_BF16) {
		const uint16_t *h = (const uint16_t *)b.v;
#pragma unroll
		for (int i = 0; i < 8; i++) out[i] = pack_h2(bf16_to_f(h[2 * i]), bf16_to_f(h[2 * i + 1]));
	} else if (T == SK_Q8_0) {
		const int8_t *q = (const int8_t *)b.v;
		const float s0 = __half2float(__ushort_as_half((unsigned short)b.s));
#pragma unroll
		for (int i = 0; i < 8; i++) out[i] = pack_h2(s0 * (float)q[2 * i], s0 * (float)q[2 * i + 1]);
	} else if (T == SK_Q4_K) {
		const uint8_t *q = (const uint8_t *)b.v;
		const int j = (k % 256) / 32, hi = j & 1;
		int sc, mn;
		q4k_scale_min(b.v[1], j, sc, mn);
		const float s0 = __half2float(__ushort_as_half((unsigned short)(b.v[1].x & 0xFFFF))) * sc;
		const float s1 = __half2float(__ushort_as_half((unsigned short)(b.v[1].x >> 16))) * mn;
#pragma unroll
		for (int i = 0; i < 8; i++) {
			const int a = hi ? (q[2 * i] >> 4) : (q[2 * i] & 15), c = hi ? (q[2 * i + 1] >> 4) : (q[2 * i + 1] & 15);
			out[i] = pack_h2(s0 * (float)a - s1, s0 * (float)c - s1);
		}
	} else if (T == SK_Q6_K) {
		const uint8_t *ql = (const uint8_t *)&b.v[0], *qh = (const uint8_t *)&b.v[1];
		const int i0 = k % 256, n = i0 / 128, quarter = (i0 % 128) / 32, l0 = i0 % 32;
		const int shl = quarter >= 2 ? 4 : 0, shh = 2 * quarter;
		const float s0 = __half2float(__ushort_as_half((unsigned short)b.s)) * s8_of(b.v[2], n * 8 + l0 / 16 + 2 * quarter);
#pragma unroll
		for (int i = 0; i < 8; i++) {
			const int a = (((ql[2 * i] >> shl) & 15) | (((qh[2 * i] >> shh) & 3) << 4)) - 32;
			const int c = (((ql[2 * i + 1] >> shl) & 15) | (((qh[2 * i + 1] >> shh) & 3) << 4)) - 32;
			out[i] = pack_h2(s0 * (float)a, s0 * (float)c);
		}
	}
}

__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3) {
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
	             : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
	             : "r"(addr));
}

__device__ __forceinline__ void ldsm_x4_t(uint32_t addr, uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3) {
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
	             : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
	             : "r"(addr));
}

__device__ __forceinline__ void mma_16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
	asm volatile(
	    "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
	    "{%0,%1,%2,%3};\n"
	    : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
	    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// A warp's MI x 4 accumulator tiles (both GEMM main loops)
template <int MI>
__device__ __forceinline__ void gemm_acc_zero(float (&acc)[MI][4][4]) {
#pragma unroll
	for (int i = 0; i < MI; i++)
#pragma unroll
		for (int j = 0; j < 4; j++)
#pragma unroll
			for (int c = 0; c < 4; c++) acc[i][j][c] = 0.f;
}

// acc += a b for one 16-deep k step: MI A fragments by 4 B fragments
template <int MI>
__device__ __forceinline__ void warp_mma(float (&acc)[MI][4][4], const uint32_t (&a)[MI][4], const uint32_t (&b)[4][2]) {
#pragma unroll
	for (int mi = 0; mi < MI; mi++)
#pragma unroll
		for (int ni = 0; ni < 4; ni++) mma_16816(acc[mi][ni], a[mi], b[ni][0], b[ni][1]);
}

// Tile row gr of a GEMM (in launch rows) as its matrix and row there.
__device__ __forceinline__ void gemm_row(const GMats &gm, int gr, MatDev &bm, int &brow) {
	if (gm.interleave) {
		bm = (gr & 1) ? gm.m[1] : gm.m[0];
		brow = gr >> 1;
	} else if (gm.nmat == 1 || gr < gm.end[0]) {
		bm = gm.m[0];
		brow = gr;
	} else if (gm.nmat == 2 || gr < gm.end[1]) {
		bm = gm.m[1];
		brow = gr - gm.end[0];
	} else {
		bm = gm.m[2];
		brow = gr - gm.end[1];
	}
}

// A warp's accumulators out (both GEMM main loops): c0,c1 at (token g, rows
// 2t4, 2t4+1), c2,c3 at token g+8; with split-K (part) this split's sums,
// added up (and the epilogue applied) by k_splitk_epi.
template <int MI, int BM>
__device__ __forceinline__ void gemm_epilogue(const float (&acc)[MI][4][4], const EpiDev &e, float *part, int n,
                                              int nrows, int n0, int m0t, int wm, int wn, int lane) {
#pragma unroll
	for (int mi = 0; mi < MI; mi++) {
#pragma unroll
		for (int ni = 0; ni < 4; ni++) {
			const int r = n0 + wn * 32 + ni * 8 + 2 * (lane & 3);
			if (r >= nrows) continue;
			const int t = m0t + wm * (BM / 2) + mi * 16 + (lane >> 2);
			if (part) {
				float *o = part + (size_t)blockIdx.z * n * nrows + r;
				if (t < n) {
					o[(size_t)t * nrows] = acc[mi][ni][0];
					if (r + 1 < nrows) o[(size_t)t * nrows + 1] = acc[mi][ni][1];
				}
				if (t + 8 < n) {
					o[(size_t)(t + 8) * nrows] = acc[mi][ni][2];
					if (r + 1 < nrows) o[(size_t)(t + 8) * nrows + 1] = acc[mi][ni][3];
				}
				continue;
			}
			if (t < n) epi_pair(e, t, r, acc[mi][ni][0], acc[mi][ni][1], r + 1 < nrows);
			if (t + 8 < n) epi_pair(e, t + 8, r, acc[mi][ni][2], acc[mi][ni][3], r + 1 < nrows);
		}
	}
}

// grid (ceil(nrows/128), ceil(n/BM)); nrows = the rows of all matrices.
template <int T, int BM>
__global__ void __launch_bounds__(256, MM_MINB) k_gemm_mma(GMats gm, const __half *__restrict__ Xh, int n, int nrows, EpiDev e,
                                                     int kt_per, float *__restrict__ part) {
	constexpr int ST = mm_stages(T, BM);
	constexpr int MM_MI = BM / 32;  // m16 tiles per warp
	constexpr int MM_AR = BM / 64;  // A-tile uint4 loads per thread per k-tile
	__shared__ __align__(16) __half As[2][BM][MM_LD];
	__shared__ __align__(16) __half Bs[2][MM_BN][MM_LD];
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const int wm = warp >> 2, wn = warp & 3;
	const int n0 = blockIdx.x * MM_BN, m0t = blockIdx.y * BM;
	const int K = gm.m[0].cols;
	// split-K: this block's k-tiles [kt0, kt0 + nk)
	const int ks = blockIdx.z * kt_per, nk = min(K / MM_BK - ks, kt_per);

	// A loader: row ia (token), 8 halves from ka of the f16 copy of X, stored
	// as loaded (the f32 X, loaded and converted by every block, kept the
	// load/store units 87% busy)
	const int ia = tid >> 2, ka = (tid & 3) * 8;
	const __half *xha = Xh + (size_t)(m0t + ia) * K + ka;
	// B loader: tile row jb, 16 elements from kb
	const int jb = tid >> 1, kb = (tid & 1) * 16;
	const int gr = n0 + jb;
	const bool b_ok = gr < nrows;
	MatDev bm;
	int brow;
	gemm_row(gm, gr, bm, brow);

	// a ring of ST k-tiles in registers (static indices: the k loop is
	// unrolled by ST)
	uint4 arr[ST][MM_AR];
	BRaw brr[ST];
#pragma unroll
	for (int i = 0; i < ST; i++) {
#pragma unroll
		for (int j = 0; j < MM_AR; j++) arr[i][j] = make_uint4(0u, 0u, 0u, 0u);
		memset(&brr[i], 0, sizeof brr[i]);
	}

	auto load = [&](int kt, uint4 (&a)[MM_AR], BRaw &br) {
		const int k0 = (ks + kt) * MM_BK;
#pragma unroll
		for (int j = 0; j < MM_AR; j++)
			if (m0t + ia + 64 * j < n) a[j] = __ldg((const uint4 *)(xha + (size_t)64 * j * K + k0));
		if (b_ok) b_load<T>(bm, brow, k0 + kb, br);
	};
	auto store = [&](int buf, int kt, const uint4 (&a)[MM_AR], const BRaw &br) {
#pragma unroll
		for (int j = 0; j < MM_AR; j++) *(uint4 *)&As[buf][ia + 64 * j][ka] = a[j];
		uint32_t h[8];
		if (b_ok) {
			b_deq<T>(br, (ks + kt) * MM_BK + kb, h);
		} else {
#pragma unroll
			for (int i = 0; i < 8; i++) h[i] = 0;
		}
		*(uint4 *)&Bs[buf][jb][kb] = make_uint4(h[0], h[1], h[2], h[3]);
		*(uint4 *)&Bs[buf][jb][kb + 8] = make_uint4(h[4], h[5], h[6], h[7]);
	};

	float acc[MM_MI][4][4];
	gemm_acc_zero(acc);

#pragma unroll
	for (int i = 0; i < ST - 1; i++)
		if (i < nk) load(i, arr[i], brr[i]);
	store(0, 0, arr[0], brr[0]);
	__syncthreads();
	for (int kt0 = 0; kt0 < nk; kt0 += ST) {
#pragma unroll
	for (int u = 0; u < ST; u++) {
		const int kt = kt0 + u;  // in ring slot u
		if (kt >= nk) break;
		const int buf = kt & 1;
		const int ahead = (u + ST - 1) % ST, next = (u + 1) % ST;
		if (kt + ST - 1 < nk) load(kt + ST - 1, arr[ahead], brr[ahead]);
#pragma unroll
		for (int kk = 0; kk < MM_BK; kk += 16) {
			uint32_t a[MM_MI][4], b[4][2];
#pragma unroll
			for (int mi = 0; mi < MM_MI; mi++) {
				const __half *p = &As[buf][wm * (BM / 2) + mi * 16 + (lane & 15)][kk + (lane >> 4) * 8];
				ldsm_x4((uint32_t)__cvta_generic_to_shared(p), a[mi][0], a[mi][1], a[mi][2], a[mi][3]);
			}
#pragma unroll
			for (int nj = 0; nj < 2; nj++) {
				const __half *p = &Bs[buf][wn * 32 + nj * 16 + (lane & 7) + (lane >> 4) * 8][kk + ((lane >> 3) & 1) * 8];
				ldsm_x4((uint32_t)__cvta_generic_to_shared(p), b[2 * nj][0], b[2 * nj][1], b[2 * nj + 1][0],
				        b[2 * nj + 1][1]);
			}
			warp_mma(acc, a, b);
		}
		if (kt + 1 < nk) store(buf ^ 1, kt + 1, arr[next], brr[next]);
		__syncthreads();
	}
	}

	gemm_epilogue<MM_MI, BM>(acc, e, part, n, nrows, n0, m0t, wm, wn, lane);
}

// ---- version 3 of the main loop: a cp.async ring in shared memory
//
// Why: k_gemm_mma waits one global-memory latency per 32-column k-tile (its
// register ring is 2 k-tiles deep at 128-token tiles): at 7B, 512 tokens,
// about 3,800 cycles per k-tile per SM for 500-1,000 cycles of tensor work.
// Here the loads are cp.async into a ring of S k-tiles of 64 columns in
// shared memory, so S - 1 k-tiles are in flight while one is multiplied and
// no register holds a load:
//   - A (Xh, already f16) goes straight into its stage, read by ldmatrix;
//   - B goes in as the k-tile's raw bytes (quants and the scale bytes that
//     k-tile needs), which each thread then dequantizes with b_deq into a
//     double-buffered f16 tile Bs.
// Iteration kt: wait for k-tile kt's copies; dequantize it; one barrier;
// issue the copies of k-tile kt + S - 1 into the stage k-tile kt - 1 left;
// multiply. Each thread copies exactly the raw bytes it dequantizes itself
// (the few header and scale bytes that two threads need are copied by both),
// so its own cp.async.wait_group suffices before the dequantization and the
// one barrier per k-tile serves A's visibility, Bs's, and the freeing of the
// oldest stage. Results are those of k_gemm_mma: the same f16 operands, the
// same mma order along k (split-K aside: its splits are counted in 64-column
// k-tiles here, so they may fall elsewhere). F32 weights stay on k_gemm_mma.
//
// Shared memory, 128-byte rows (64 halves) XOR-swizzled by 16-byte chunk
// (chunk c of row r at c ^ (r & 7): conflict-free ldmatrix without the pad,
// which would not leave room for 3 stages at two blocks per SM):
//   Bs[2][128 rows][64 halves]                          32 KB
//   S stages of { A[BM tokens][64 halves], raw B }      BM x 128 + raw
// raw B: one 16-byte slot per thread for each 16-byte piece, then one 4-byte
// slot per thread for each 4-byte piece (thread-major, conflict-free); thread
// tid takes tile row jb = tid / 2, half h = tid % 2 of the row's share:
//   Q8_0  2 x 16: quants [32h, 32h+32) of the k-tile; 4: the k-tile's two
//         f16 scales (both threads)                        9 KB
//   Q4_K  16: quant bytes [16h, 16h+16) of the 64-weight group (low nibbles
//         cols 16h.., high nibbles cols 32+16h..); 16: the super-block
//         header {d, dmin, scales[12]} (both threads)      8 KB
//   Q6_K  16, 16: ql bytes [16h, +16) and [32+16h, +16) of the 64 ql bytes
//         of the k-tile; 16: qh bytes [16h, +16); 4: the k-tile's four
//         scales; 4: the aligned f16 pair of m.d holding d (both threads)  14 KB
//   F16, BF16  4 x 16: halves [32h, 32h+32)               16 KB
#ifndef MM_V3
#define MM_V3 1  // 0: every type on k_gemm_mma (for A/B)
#endif
#ifndef MM_STAGES
#define MM_STAGES 4  // the most k-tiles in the ring; each instantiation takes the most that fit MM2_SMEM (>= 2)
#endif
#ifndef MM2_SMEM
#define MM2_SMEM (113 * 1024)  // shared bytes per block: two blocks per SM of 228 KB, less 1 KB each the system keeps
#endif
#ifndef MM2_Q6K_BM128
#define MM2_Q6K_BM128 0  // 1: Q6_K on 128-token tiles as the others (a ring of 2 then fits, not 3)
#endif
#ifndef MM2_CARVEOUT
#define MM2_CARVEOUT 1  // 0: leave the shared memory / L1 split to the driver
#endif
#define MM2_BK 64  // columns per k-tile: one barrier per 64 columns; K % 64 != 0 stays on k_gemm_mma
#define MM2_BS_BYTES (2 * MM_BN * MM2_BK * 2)

// Pieces of one thread's raw share of a k-tile: 16-byte and 4-byte ones.
__host__ __device__ constexpr int mm2_p16(int t) { return t == SK_Q8_0 || t == SK_Q4_K ? 2 : t == SK_Q6_K ? 3 : 4; }
__host__ __device__ constexpr int mm2_p4(int t) { return t == SK_Q8_0 ? 1 : t == SK_Q6_K ? 2 : 0; }
__host__ __device__ constexpr int mm2_stage_bytes(int t, int bm) {
	return bm * MM2_BK * 2 + 256 * (16 * mm2_p16(t) + 4 * mm2_p4(t));
}
__host__ __device__ constexpr int mm2_smem(int t, int bm, int s) { return MM2_BS_BYTES + s * mm2_stage_bytes(t, bm); }
__host__ __device__ constexpr int mm2_stages(int t, int bm) {
	int s = MM_STAGES;
	while (s > 2 && mm2_smem(t, bm, s) > MM2_SMEM) s--;
	return s;
}

// cp.async of 16 (or 4) bytes; src_bytes < the size zero-fills the rest (0:
// all zeros, nothing read; src must still be a valid, aligned address).
__device__ __forceinline__ void mm2_cp16(uint32_t dst, const void *src, int src_bytes) {
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void mm2_cp4(uint32_t dst, const void *src, int src_bytes) {
	asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void mm2_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void mm2_wait() {
	asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// 1 (CUDA 12 and later): decode attention's ring (ATT_RING) copies its
// stages with the bulk copies below; 0: with cp.async (16 bytes per thread
// and copy; the only way before CUDA 12). Alone at 7B's shape, 4k / 16k
// tokens of context (us), with 5 stages of 32 keys: 25.77 / 76.02 against
// 26.74 / 83.43 (and 26.44 / 81.34 in another machine start).
#ifndef ATT_RING_TMA
#if __CUDACC_VER_MAJOR__ >= 12
#define ATT_RING_TMA 1
#else
#define ATT_RING_TMA 0
#endif
#endif
// Bulk copies global -> shared memory (sm_90's tensor memory accelerator)
// completing on an mbarrier: init (count arrivals), the fence that makes the
// initialisation visible to the copy engine, one arrival that expects tx
// bytes, the copy (16-byte aligned, a multiple of 16 bytes) and the wait for
// a phase's completion (parity). (Empty before CUDA 12, whose PTX lacks them;
// ATT_RING_TMA is 0 there.)
__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbar_init(uint64_t *bar, unsigned count) {
#if ATT_RING_TMA
	asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count) : "memory");
#endif
}
__device__ __forceinline__ void mbar_fence_init() {
#if ATT_RING_TMA
	asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void fence_proxy_async() {
#if ATT_RING_TMA
	asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t *bar, uint32_t bytes) {
#if ATT_RING_TMA
	asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
#endif
}
__device__ __forceinline__ void bulk_g2s(void *dst, const void *src, uint32_t bytes, uint64_t *bar) {
#if ATT_RING_TMA && (G2_EF & 2)
	asm volatile(
	    "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;\n" ::"r"(
	        smem_u32(dst)),
	    "l"(src), "r"(bytes), "r"(smem_u32(bar)), "l"(ef_policy())
	    : "memory");
#elif ATT_RING_TMA
	asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
	                 smem_u32(dst)),
	             "l"(src), "r"(bytes), "r"(smem_u32(bar))
	             : "memory");
#endif
}
__device__ __forceinline__ void mbar_wait(uint64_t *bar, uint32_t parity) {
#if ATT_RING_TMA
	asm volatile(
	    "{\n"
	    ".reg .pred p;\n"
	    "MBAR_WAIT:\n"
	    "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
	    "@!p bra MBAR_WAIT;\n"
	    "}\n" ::"r"(smem_u32(bar)),
	    "r"(parity)
	    : "memory");
#endif
}

// grid (ceil(nrows/128), ceil(n/BM), splits); dynamic shared memory
// mm2_smem(T, BM, mm2_stages(T, BM)); K % 64 == 0.
template <int T, int BM>
__global__ void __launch_bounds__(256, MM_MINB) k_gemm_mma2(GMats gm, const __half *__restrict__ Xh, int n, int nrows,
                                                      EpiDev e, int kt_per, float *__restrict__ part) {
	constexpr int S = mm2_stages(T, BM);
	constexpr int MI = BM / 32;  // m16 tiles per warp
	constexpr int AR = BM / 32;  // A chunks (16 bytes) per thread per k-tile
	constexpr int P16 = mm2_p16(T);
	constexpr int SB = mm2_stage_bytes(T, BM);
	constexpr int RAW = BM * MM2_BK * 2;  // raw B's offset in a stage
	static_assert(T != SK_F32, "F32 weights stay on k_gemm_mma");
	static_assert(S >= 2 && mm2_smem(T, BM, S) <= 227 * 1024, "shared ring does not fit");
	extern __shared__ __align__(16) unsigned char mm2_sm[];
	const uint32_t bs0 = (uint32_t)__cvta_generic_to_shared(mm2_sm), st0 = bs0 + MM2_BS_BYTES;
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const int wm = warp >> 2, wn = warp & 3;
	const int n0 = blockIdx.x * MM_BN, m0t = blockIdx.y * BM;
	const int K = gm.m[0].cols;
	// split-K: this block's k-tiles [ks, ks + nk)
	const int ks = blockIdx.z * kt_per, nk = min(K / MM2_BK - ks, kt_per);

	// A copier: chunk tid % 8 of tokens tid / 8 + 32 j; tokens past n are
	// zero-filled from token 0's address
	const int ach = tid & 7, arow = tid >> 3;
	const uint32_t a_dst = arow * 128 + ((ach ^ (arow & 7)) << 4);  // + 4096 j (32 rows)
	const __half *xa = Xh + (size_t)(m0t + arow) * K + ach * 8, *xa0 = Xh + ach * 8;

	// B copier and dequantizer: tile row jb, half h
	const int jb = tid >> 1, h = tid & 1;
	const int gr = n0 + jb;
	const bool b_ok = gr < nrows;
	MatDev bm;
	int brow;
	if (!b_ok) {
		bm = gm.m[0];  // zero-filled from row 0's address
		brow = 0;
	} else {
		gemm_row(gm, gr, bm, brow);
	}
	const int b16 = b_ok ? 16 : 0;

	// the copies of k-tile kt into stage kt % S
	auto issue = [&](int kt) {
		const uint32_t sa = st0 + (kt % S) * SB;
		const int k0 = (ks + kt) * MM2_BK;
#pragma unroll
		for (int j = 0; j < AR; j++) {
			const bool ok = m0t + arow + 32 * j < n;
			mm2_cp16(sa + a_dst + 4096 * j, ok ? xa + (size_t)32 * j * K + k0 : xa0 + k0, ok ? 16 : 0);
		}
		const uint32_t r16 = sa + RAW + 16 * tid, r4 = sa + RAW + 256 * 16 * P16 + 4 * tid;
		if (T == SK_F16 || T == SK_BF16) {
			const uint16_t *p = (const uint16_t *)bm.q + (size_t)brow * K + k0 + 32 * h;
#pragma unroll
			for (int i = 0; i < 4; i++) mm2_cp16(r16 + 4096 * i, p + 8 * i, b16);
		} else if (T == SK_Q8_0) {
			// m.d index brow * K/32 + k0/32 is even (K, k0 multiples of 64): the
			// pair is 4-byte aligned and both halves are this row's
			const int8_t *p = (const int8_t *)bm.q + (size_t)brow * K + k0 + 32 * h;
			mm2_cp16(r16, p, b16);
			mm2_cp16(r16 + 4096, p + 16, b16);
			mm2_cp4(r4, bm.d + (size_t)brow * (K / 32) + k0 / 32, b_ok ? 4 : 0);
		} else if (T == SK_Q4_K) {
			const uint8_t *blk = (const uint8_t *)bm.q + (size_t)brow * bm.row_bytes + (size_t)(k0 / 256) * 144;
			mm2_cp16(r16, blk + q4k_poff(2 * ((k0 % 256) / 64) + h), b16);
			mm2_cp16(r16 + 4096, blk, b16);  // {d, dmin, scales[12]}
		} else if (T == SK_Q6_K) {
			const int nb = K / 256, sb = k0 / 256, t4 = (k0 % 256) / 64, nn = t4 >> 1;
			const uint8_t *blk = (const uint8_t *)bm.q + ((size_t)brow * nb + sb) * 208;
			mm2_cp16(r16, blk + nn * 64 + 16 * h, b16);
			mm2_cp16(r16 + 4096, blk + nn * 64 + 32 + 16 * h, b16);
			mm2_cp16(r16 + 8192, blk + 128 + nn * 32 + 16 * h, b16);
			mm2_cp4(r4, blk + 192 + nn * 8 + 4 * (t4 & 1), b_ok ? 4 : 0);
			// d is half idx of m.d (2-byte aligned): the aligned pair holding it
			// (the upload pads m.d to an even count, so the pair of the last d
			// is inside the allocation; a 4-byte copy with src-size 2 still
			// reads 4 bytes, compute-sanitizer found)
			const size_t idx = (size_t)brow * nb + sb;
			mm2_cp4(r4 + 1024, bm.d + (idx & ~(size_t)1), b_ok ? 4 : 0);
		}
	};

	// k-tile kt (stage st, its copies by this thread complete) into Bs[buf]
	// row jb, through b_deq as k_gemm_mma
	auto deq = [&](int st, int buf, int kt) {
		const unsigned char *raw = mm2_sm + MM2_BS_BYTES + st * SB + RAW;
		const uint4 *r16 = (const uint4 *)raw + tid;
		const uint32_t *r4 = (const uint32_t *)(raw + 256 * 16 * P16) + tid;
		unsigned char *dst = mm2_sm + buf * (MM_BN * 128) + jb * 128;
		const int sw = jb & 7;
		const int k0 = (ks + kt) * MM2_BK;
		uint32_t o[8];
		BRaw b;
		// chunk c (8 halves) of the row: v[0..4), then chunk c + 1: v[4..8)
		auto put2 = [&](int c, const uint32_t(&v)[8]) {
			*(uint4 *)(dst + ((c ^ sw) << 4)) = make_uint4(v[0], v[1], v[2], v[3]);
			*(uint4 *)(dst + (((c + 1) ^ sw) << 4)) = make_uint4(v[4], v[5], v[6], v[7]);
		};
		if (T == SK_F16 || T == SK_BF16) {
#pragma unroll
			for (int i = 0; i < 2; i++) {
				b.v[0] = r16[512 * i];
				b.v[1] = r16[512 * i + 256];
				b_deq<T>(b, 0, o);
				put2(4 * h + 2 * i, o);
			}
		} else if (T == SK_Q8_0) {
			const uint32_t w = r4[0];
			b.s = h ? w >> 16 : w & 0xFFFFu;
#pragma unroll
			for (int i = 0; i < 2; i++) {
				b.v[0] = r16[256 * i];
				b_deq<T>(b, 0, o);
				put2(4 * h + 2 * i, o);
			}
		} else if (T == SK_Q4_K) {
			// 32-column half p: sub-block 2g + p, nibble p of the same bytes.
			// Thread h takes half h first: the two threads of a row then store
			// chunks 4 apart, and the 8 threads of a quarter warp (4 rows)
			// reach 8 different bank groups
			b.v[0] = r16[0];
			b.v[1] = r16[256];
#pragma unroll
			for (int i = 0; i < 2; i++) {
				const int p = i ^ h;
				b_deq<T>(b, k0 + 32 * p + 16 * h, o);
				put2(4 * p + 2 * h, o);
			}
		} else if (T == SK_Q6_K) {
			// b_deq reads scale n*8 + l0/16 + 2*quarter of v[2]; the four copied
			// are scales[n*8 + 4(t4&1) ..], so every word of v[2] holds them and
			// the byte index (l0/16 + 2*(quarter&1)) picks the right one
			const uint32_t w = r4[0], dw = r4[256];
			b.v[2] = make_uint4(w, w, w, w);
			const unsigned idx = (unsigned)brow * (unsigned)(K / 256) + (unsigned)(k0 / 256);  // its parity
			b.s = (idx & 1) ? dw >> 16 : dw & 0xFFFFu;
			b.v[1] = r16[512];  // qh
			const uint4 ql0 = r16[0], ql1 = r16[256];
			// 32-column half p: quarter 2(t4&1) + p, ql piece p; half h first,
			// as Q4_K
#pragma unroll
			for (int i = 0; i < 2; i++) {
				const int p = i ^ h;
				b.v[0] = p ? ql1 : ql0;
				b_deq<T>(b, k0 + 32 * p + 16 * h, o);
				put2(4 * p + 2 * h, o);
			}
		}
	};

	// ldmatrix rows: A row wm*BM/2 + mi*16 + lane%16, chunk kk/8 + lane/16;
	// B row wn*32 + nj*16 + lane%8 + (lane/16)*8, chunk kk/8 + (lane/8)%2 (as
	// k_gemm_mma); every such row is lane%8 mod 8, hence the swizzle lane & 7
	const int sx = lane & 7;
	const uint32_t a_off = (wm * (BM / 2) + (lane & 15)) * 128, a_c = lane >> 4;
	const uint32_t b_off = (wn * 32 + (lane & 7) + (lane >> 4) * 8) * 128, b_c = (lane >> 3) & 1;

	float acc[MI][4][4];
	gemm_acc_zero(acc);

	// one commit group per k-tile, empty ones included, so that wait_group
	// S - 2 always means "k-tile kt has landed"
#pragma unroll
	for (int i = 0; i < S - 1; i++) {
		if (i < nk) issue(i);
		mm2_commit();
	}
	for (int kt = 0; kt < nk; kt++) {
		const int st = kt % S, buf = kt & 1;
		mm2_wait<S - 2>();
		deq(st, buf, kt);
		// A of k-tile kt (every thread's copies) and Bs[buf] complete; every
		// warp is past k-tile kt - 1's products: its stage may be refilled
		__syncthreads();
		if (kt + S - 1 < nk) issue(kt + S - 1);
		mm2_commit();
		const uint32_t sa = st0 + st * SB, sb = bs0 + buf * (MM_BN * 128);
#pragma unroll
		for (int kk = 0; kk < MM2_BK; kk += 16) {
			uint32_t a[MI][4], bf[4][2];
#pragma unroll
			for (int mi = 0; mi < MI; mi++)
				ldsm_x4(sa + a_off + mi * 16 * 128 + ((((kk >> 3) + a_c) ^ sx) << 4), a[mi][0], a[mi][1], a[mi][2],
				        a[mi][3]);
#pragma unroll
			for (int nj = 0; nj < 2; nj++)
				ldsm_x4(sb + b_off + nj * 16 * 128 + ((((kk >> 3) + b_c) ^ sx) << 4), bf[2 * nj][0], bf[2 * nj][1],
				        bf[2 * nj + 1][0], bf[2 * nj + 1][1]);
			warp_mma(acc, a, bf);
		}
	}

	gemm_epilogue<MI, BM>(acc, e, part, n, nrows, n0, m0t, wm, wn, lane);
}

// y[8i..8i+8) = f16(x[8i..8i+8)), i < n8
__global__ void k_to_f16(const float *__restrict__ x, __half *__restrict__ y, size_t n8) {
	const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n8) return;
	const float4 a = __ldg((const float4 *)x + 2 * i), b = __ldg((const float4 *)x + 2 * i + 1);
	((uint4 *)y)[i] = make_uint4(pack_h2(a.x, a.y), pack_h2(a.z, a.w), pack_h2(b.x, b.y), pack_h2(b.z, b.w));
}

// Split-K: the splits' sums of each (token, row pair), added in split order,
// through the GEMM's epilogue.
__global__ void k_splitk_epi(const float *__restrict__ part, int splits, int n, int nrows, EpiDev e) {
	const int npair = (nrows + 1) / 2;
	const int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n * npair) return;
	const int t = i / npair, r = 2 * (i - t * npair);
	const bool has1 = r + 1 < nrows;
	float v0 = 0.f, v1 = 0.f;
	for (int z = 0; z < splits; z++) {
		const float *p = part + ((size_t)z * n + t) * nrows + r;
		v0 += p[0];
		if (has1) v1 += p[1];
	}
	epi_pair(e, t, r, v0, v1, has1);
}

// Launch k_gemm_mma2<T, BM> with its ring's shared memory (the attributes
// set once per context and instantiation: the context's device).
template <int T, int BM>
static int mm2_go(sk_ctx *ctx, dim3 grid, const GMats &gm, const __half *Xh, int n, int nrows, const EpiDev &e,
                  int kt_per, float *part) {
	const int smem = mm2_smem(T, BM, mm2_stages(T, BM));
	constexpr unsigned bit = 1u << ((T == SK_F16 ? 0 : T == SK_BF16 ? 1 : T == SK_Q8_0 ? 2 : T == SK_Q4_K ? 3 : 4) * 2 +
	                                (BM == 128));
	if (!(ctx->mm2_ready & bit)) {
		if (smem > 48 * 1024)
			CK(ctx, cudaFuncSetAttribute(k_gemm_mma2<T, BM>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
#if MM2_CARVEOUT
		// the most shared memory (least L1): so that MM_MINB rings fit an SM
		// whatever the driver's own choice (the ring's copies bypass L1 anyway)
		CK(ctx, cudaFuncSetAttribute(k_gemm_mma2<T, BM>, cudaFuncAttributePreferredSharedMemoryCarveout,
		                             (int)cudaSharedmemCarveoutMaxShared));
#endif
		ctx->mm2_ready |= bit;
	}
	k_gemm_mma2<T, BM><<<grid, 256, smem, ctx->stream>>>(gm, Xh, n, nrows, e, kt_per, part);
	CKLAUNCH(ctx);
	return SK_OK;
}

#ifndef MM_SPLIT_MIN
#define MM_SPLIT_MIN 16  // fewest k-tiles per split
#endif
#ifndef MM_MAXSPLIT
#define MM_MAXSPLIT 4
#endif

// nmat matrices of one type: concatenated rows, or (interleave, nmat 2)
// gate/up pairs.
static int gemm_mma_launch(sk_ctx *ctx, int nmat, const sk_matrix *const *W, int interleave, const float *X, int n,
                           const EpiDev &e) {
	GMats gm;
	memset(&gm, 0, sizeof gm);
	gm.nmat = nmat;
	gm.interleave = interleave;
	int nrows = 0;
	for (int i = 0; i < nmat; i++) {
		gm.m[i] = matdev(W[i]);
		nrows += W[i]->rows;
		gm.end[i] = nrows;
	}
	const int t = W[0]->type;
	// version 3 (k_gemm_mma2) for every type but F32 when K is a multiple of
	// its 64-column k-tile and its ring fits the device
	bool v3 = MM_V3 && t != SK_F32 && W[0]->cols % MM2_BK == 0;
	auto tile_bm = [&](bool v) {
		return n >= MM_BM128_MIN && t != SK_F32 && (t != SK_Q6_K || (v && MM2_Q6K_BM128)) ? 128 : 64;
	};
	int bm = tile_bm(v3);
	if (v3 && mm2_smem(t, bm, mm2_stages(t, bm)) > ctx->smem_optin) {
		v3 = false;
		bm = tile_bm(false);
	}
	const int kbk = v3 ? MM2_BK : MM_BK;  // columns per k-tile
	dim3 grid((nrows + MM_BN - 1) / MM_BN, (n + bm - 1) / bm);
	cudaStream_t s = ctx->stream;
	// Split-K when the tiles leave SMs idle: with fewer blocks than the GPU
	// holds at once (MM_MINB per SM), each block's k loop is a chain of
	// k-tiles whose loads the ring hides only in part (TinyLlama's 2048-row
	// O and down GEMMs: 128 blocks for 264 places at 512 tokens). The splits
	// store their sums, k_splitk_epi adds them in a fixed order (the result
	// does not depend on scheduling) and runs the epilogue.
	// (MM_SPLIT_MIN counts 32-column k-tiles: the same columns per split at 64)
	const int nk = W[0]->cols / kbk, blocks = (int)(grid.x * grid.y);
	int splits = std::min(std::min(MM_MAXSPLIT, ctx->sm_count * MM_MINB / std::max(blocks, 1)),
	                      nk / std::max(MM_SPLIT_MIN * MM_BK / kbk, 1));
	if (splits < 2) splits = 1;
	const int kt_per = (nk + splits - 1) / splits;
	splits = (nk + kt_per - 1) / kt_per;
	float *part = nullptr;
	if (splits > 1) {
		const int rc = reserve(ctx, (void **)&ctx->kpart, &ctx->kpart_bytes, (size_t)splits * n * nrows * sizeof(float),
		                       "gemm split-K partials");
		if (rc != SK_OK) return rc;
		part = ctx->kpart;
		grid.z = splits;
	}
	// X to f16 once: every 128-row block reads the A tiles (half the bytes of
	// f32, no conversion in the k loop); X is n x K, K a multiple of MM_BK
	{
		const size_t elems = (size_t)n * W[0]->cols;
		const int rc = reserve(ctx, (void **)&ctx->xh, &ctx->xh_bytes, elems * sizeof(__half), "gemm f16 activations");
		if (rc != SK_OK) return rc;
		const size_t n8 = elems / 8;
		k_to_f16<<<(unsigned)((n8 + 255) / 256), 256, 0, s>>>(X, ctx->xh, n8);
		CKLAUNCH(ctx);
	}
	const __half *Xh = ctx->xh;
#if MM_V3
	if (v3) {
		int rc;
		switch (t) {
		case SK_F16: rc = bm == 128 ? mm2_go<SK_F16, 128>(ctx, grid, gm, Xh, n, nrows, e, kt_per, part)
		                            : mm2_go<SK_F16, 64>(ctx, grid, gm, Xh, n, nrows, e, kt_per, part); break;
		case SK_BF16: rc = bm == 128 ? mm2_go<SK_BF16, 128>(ctx, grid, gm, Xh, n, nrows, e, kt_per, part)
		                             : mm2_go<SK_BF16, 64>(ctx, grid, gm, Xh, n, nrows, e, kt_per, part); break;
		case SK_Q8_0: rc = bm == 128 ? mm2_go<SK_Q8_0, 128>(ctx, grid, gm, Xh, n, nrows, e, kt_per, part)
		                             : mm2_go<SK_Q8_0, 64>(ctx, grid, gm, Xh, n, nrows, e, kt_per, part); break;
		case SK_Q4_K: rc = bm == 128 ? mm2_go<SK_Q4_K, 128>(ctx, grid, gm, Xh, n, nrows, e, kt_per, part)
		                             : mm2_go<SK_Q4_K, 64>(ctx, grid, gm, Xh, n, nrows, e, kt_per, part); break;
		case SK_Q6_K:
#if MM2_Q6K_BM128
			rc = bm == 128 ? mm2_go<SK_Q6_K, 128>(ctx, grid, gm, Xh, n, nrows, e, kt_per, part)
			               : mm2_go<SK_Q6_K, 64>(ctx, grid, gm, Xh, n, nrows, e, kt_per, part);
#else
			rc = mm2_go<SK_Q6_K, 64>(ctx, grid, gm, Xh, n, nrows, e, kt_per, part);
#endif
			break;
		default: return fail(ctx, SK_E_UNSUPPORTED, "gemm: unsupported type %d", t);
		}
		if (rc != SK_OK) return rc;
	} else
#endif
	{
#define MM_LAUNCH(TT)                                                                                   \
	(bm == 128 ? k_gemm_mma<TT, 128> : k_gemm_mma<TT, 64>)<<<grid, 256, 0, s>>>(gm, Xh, n, nrows, e, kt_per, part)
	switch (t) {
	case SK_F32: k_gemm_mma<SK_F32, 64><<<grid, 256, 0, s>>>(gm, Xh, n, nrows, e, kt_per, part); break;
	case SK_F16: MM_LAUNCH(SK_F16); break;
	case SK_BF16: MM_LAUNCH(SK_BF16); break;
	case SK_Q8_0: MM_LAUNCH(SK_Q8_0); break;
	case SK_Q4_K: MM_LAUNCH(SK_Q4_K); break;
	case SK_Q6_K: k_gemm_mma<SK_Q6_K, 64><<<grid, 256, 0, s>>>(gm, Xh, n, nrows, e, kt_per, part); break;
	default: return fail(ctx, SK_E_UNSUPPORTED, "gemm: unsupported type %d", t);
	}
#undef MM_LAUNCH
	CKLAUNCH(ctx);
	}
	if (part) {
		const int items = n * ((nrows + 1) / 2);
		k_splitk_epi<<<(items + 255) / 256, 256, 0, s>>>(part, splits, n, nrows, e);
		CKLAUNCH(ctx);
	}
	return SK_OK;
}

static bool mma_type(int t) { return is_quant(t) || t == SK_F16; }

__global__ void k_swiglu_ld(const float *g, const float *u, float *o, int n, int rows, int ldy) {
	const int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n * rows) return;
	const int t = i / rows, r = i - t * rows;
	o[(size_t)t * ldy + r] = silu_mul(g[i], u[i]);
}

static int reserve_tmp(sk_ctx *ctx, size_t bytes);

// tmp: 2*n*rows floats for the gate/up fallback, or NULL for the context's.
static int gemm_fused(sk_ctx *ctx, int nmat, const sk_matrix *const *W, const float *X, int n,
                      const sk_epilogue *epi, float *tmp) {
	if (!W || !X || n <= 0 || nmat < 1 || nmat > 3 || !epi) return fail(ctx, SK_E_ARG, "sk_gemm_fused: bad arguments");
	for (int i = 0; i < nmat; i++)
		if (!W[i] || W[i]->cols != W[0]->cols) return fail(ctx, SK_E_ARG, "sk_gemm_fused: matrix %d missing or of other cols", i);
	if (epi->mode == SK_EPI_SWIGLU_F16) return fail(ctx, SK_E_ARG, "sk_gemm_fused: the f16 swiglu epilogue is the GEMV's");
	const bool sw = epi->mode == SK_EPI_SWIGLU;
	if (sw && nmat != 2) return fail(ctx, SK_E_ARG, "sk_gemm_fused: two matrices exactly for swiglu");
	if (sw && W[1]->rows != W[0]->rows) return fail(ctx, SK_E_ARG, "sk_gemm_fused: gate and up differ in shape");
	const int cols = W[0]->cols;
	if (!sw && nmat > 1) {
		// rows concatenated (Q, K, V): one GEMM when the types match and the
		// tensor-core kernel applies, else one per matrix at its row offset
		int total = 0, same = 1;
		for (int i = 0; i < nmat; i++) {
			if (i + 1 < nmat && (W[i]->rows & 1)) return fail(ctx, SK_E_ARG, "sk_gemm_fused: a matrix before the last has odd rows");
			total += W[i]->rows;
			same &= W[i]->type == W[0]->type;
		}
		int rc = check_epi(ctx, epi, total, nmat, W[0]->rows);
		if (rc != SK_OK) return rc;
		if (same && cols % MM_BK == 0 && mma_type(W[0]->type)) return gemm_mma_launch(ctx, nmat, W, 0, X, n, epidev(epi));
		sk_epilogue e = *epi;
		for (int i = 0; i < nmat && rc == SK_OK; i++) {
			rc = gemm_fused(ctx, 1, &W[i], X, n, &e, tmp);
			e.roff += W[i]->rows;
		}
		return rc;
	}
	int rc = check_epi(ctx, epi, W[0]->rows, nmat, W[0]->rows);
	if (rc != SK_OK) return rc;
	// tensor cores for quantized and F16 weights; F32/BF16 weights (tiny or
	// reference models, and bf16's range) keep float arithmetic
	const bool mma = cols % MM_BK == 0 && mma_type(W[0]->type) && (!sw || mma_type(W[1]->type));
	if (mma && (!sw || W[1]->type == W[0]->type)) return gemm_mma_launch(ctx, nmat, W, sw, X, n, epidev(epi));
	if (mma && sw) {
		// gate and up of different types: two GEMMs, then SwiGLU
		if (!tmp) {
			if ((rc = reserve_tmp(ctx, (size_t)2 * n * W[0]->rows * sizeof(float))) != SK_OK) return rc;
			tmp = ctx->tmp;
		}
		float *g = tmp, *u = tmp + (size_t)n * W[0]->rows;
		sk_epilogue st = *epi;
		st.mode = SK_EPI_STORE;
		st.roff = 0;
		st.ldy = W[0]->rows;
		st.y = g;
		if ((rc = gemm_mma_launch(ctx, 1, &W[0], 0, X, n, epidev(&st))) != SK_OK) return rc;
		st.y = u;
		if ((rc = gemm_mma_launch(ctx, 1, &W[1], 0, X, n, epidev(&st))) != SK_OK) return rc;
		const int tot = n * W[0]->rows;
		k_swiglu_ld<<<(tot + 255) / 256, 256, 0, ctx->stream>>>(g, u, epi->y, n, W[0]->rows, epi->ldy);
		CKLAUNCH(ctx);
		return SK_OK;
	}
	// cols not a multiple of 32, or float weights: the fused GEMV token by token
	for (int t = 0; t < n && rc == SK_OK; t++) rc = gemv2_launch(ctx, nmat, W, X + (size_t)t * cols, nullptr, 0.f, epi, t);
	return rc;
}

extern "C" int sk_gemm_fused(sk_ctx *ctx, int nmat, const sk_matrix *const *W, const float *d_X, int n,
                             const sk_epilogue *epi) {
	ENTER(ctx);
	return gemm_fused(ctx, nmat, W, d_X, n, epi, nullptr);
}

static int reserve_tmp(sk_ctx *ctx, size_t bytes) {
	return reserve(ctx, (void **)&ctx->tmp, &ctx->tmp_bytes, bytes, "op scratch");
}

// ---------------------------------------------------------------- decode attention v2
//
// grid (n_kv, nsplit): block (kv head, split) serves the G = n_head/n_kv
// query heads of the group, so each K/V row comes from DRAM once per group.
// The split length follows the actual length n = *pos + 1 (read on the
// device): chunk = max(att2_min(G), ceil(n / nsplit)) rounded up to 32; blocks
// past n exit. The last split block of a kv head to finish (an atomic
// counter per kv head) combines the splits' partials into the output.
#define ATT3_WARPS 8
// The fewest keys per split: one 32-key stripe for each of the block's
// ATT3_WARPS / G stripes (see att3_item), so no warp of a split idles:
// TinyLlama (G = 8) 32, 7B (G = 1) 256. A/B on the H200 at 128 tokens of
// context against the earlier fixed 64: TinyLlama Q8_0 1,020 instead of
// 938-952 tok/s (5 splits of 32 keys instead of 3 of 64: one key batch per
// warp), 7B Q4_K_M 380 instead of 373 (one split per kv head, no combine).
__host__ __device__ __forceinline__ int att2_min(int G) {
	return 32 * (ATT3_WARPS / G < 1 ? 1 : ATT3_WARPS / G);
}
// Decode attention splits per SM over the kv heads (at most). A/B at 128 /
// 4k tokens of context, 1 against 2 (decode tok/s): TinyLlama Q8_0 1,104 /
// 879 against 1,067 / 871 and in another machine start 1,082 / 826 against
// 1,046 / 841 (within noise); 7B Q4_K_M 394 / 288 against 395 / 303.
#ifndef ATT2_PER_SM
#define ATT2_PER_SM 2
#endif
// Decode attention's splits of a kv head in thread block clusters of up to
// ATT_CLN (grid rows rounded down to a multiple of it): when a context has at
// most ATT_CLN splits, the cluster merges them through distributed shared
// memory, with no partials in global memory, no fence and no counter; with
// more, each cluster merges its splits into one group partial the same way
// and the last group's first block combines the groups through L2 (one
// batch of loads for up to ATT_CB groups instead of one per ATT_CB splits).
// 2: only when heads share kv heads (G > 1); 1: always; 0: never (the last
// block's combine through L2). A/B on the H200 (decode tok/s at 128 / 4k
// tokens of context, same machine start): TinyLlama Q8_0 1,133 / 900 with
// it against 1,117 / 865, TinyLlama Q4_K_M 1,055 / 819 against 1,026 / 815;
// 7B Q4_K_M (G = 1, 8 splits at 4k) lost with clusters, 390 / 267 against
// 396 / 303 (why is not measured: a cluster's blocks must be placed
// together).
// The two-level combine (session 9, decode at 4k tokens of context, same
// machine start, against one cluster level): TinyLlama Q8_0 947 / 949
// against 905 / 906, TinyLlama Q4_K_M 921 / 925 against 891 / 892. With it in
// the only clustered kernel, 128 tokens of context lost 4% (1,124-1,134
// against 1,174-1,178), so short contexts keep the kernel without it (see
// attn2_decode's two).
// Also measured and dropped: launching the attention with programmatic
// dependent launch, its first key batch loaded before the wait (TinyLlama
// Q8_0 1,071 / 853 against 1,117 / 865, 7B Q4_K_M 379 / 297 against
// 396 / 303).
#ifndef ATT_CLU
#define ATT_CLU 2
#endif
#define ATT_CLN 8
#ifndef ATT_MAXSPLIT
// > 0: at most this many splits per kv head (A/B). 32 (4 groups at 4k)
// against 64: TinyLlama Q8_0 886 against 947 at 4k; 16: 803 against 937
#define ATT_MAXSPLIT 0
#endif
// Clusters' group partials (two-level combine, contexts of more than
// ATT_CLN splits): one per cluster of ATT_CLN splits.
__host__ __device__ constexpr int att2_ngroups(int nsplit) { return (nsplit + ATT_CLN - 1) / ATT_CLN; }
#ifndef ATT2_TRIGGER
#define ATT2_TRIGGER 1  // let the next GEMV launch while attention runs
#endif
#define ATT2_MAXG 8

__device__ __forceinline__ int att2_chunk(int n, int nsplit, int G) {
	int c = (n + nsplit - 1) / nsplit;
	const int mn = att2_min(G);
	if (c < mn) c = mn;
	return (c + 31) & ~31;
}

// whether decode attention for G heads per kv head runs in clusters
static bool att2_clu(const sk_ctx *ctx, int G) { return ctx->clusters && (ATT_CLU == 1 || (ATT_CLU == 2 && G > 1)); }
// and whether its combine of more than one cluster of splits is two-level
static bool att2_two(const sk_ctx *ctx, int G) { return att2_clu(ctx, G) && ctx->clusters == 2; }

static int att2_clu_max(const sk_ctx *ctx, int G, int hd);
static int att2_nsplit(const sk_ctx *ctx, int n_head, int n_kv, int hd, int max_ctx) {
	// one wave: k_attn3_split runs two blocks per SM (its register budget);
	// rounding up put 288 blocks on 264 places for 7B's 32 kv heads and
	// cost 4.5% of its decode speed at 4k tokens of context. Several whole
	// waves of shorter splits for the ring (so that the block scheduler
	// balances the SMs) lost too (session 21, 7B Q8_0 at 4k, 3 runs, two
	// rounds): 2, 3, 4 and 6 times the splits 329.4 / 332.1, 330.6 / 333.0,
	// 331.5 / 331.8 and 332.4 / 332.7 against 347.3 / 347.1 (7B Q4_K_M at 4k
	// 356.5, 355.8, 354.6 against 370.7); the trace at 3 times put the
	// attention at 27.8-30.5 us a layer against 24.7. Dropped in session 22: pieces
	// taken by ticket (each kv head's keys in 8 long pieces, one per block,
	// and 8 short ones of 1/R of a split that blocks take from a counter once
	// their long piece is issued; a partial slot per piece, combined in order)
	// 304.4 / 303.9 (R = 8), 311.3 / 312.2 (4), 301.2 / 301.3 (16) against
	// 351.5 / 351.8: its keys ended at 31.5 us (median) against 19.4
	int ns = ATT2_PER_SM * ctx->sm_count / n_kv;
	const int mn = att2_min(n_head / n_kv);
	const int cap = (max_ctx + mn - 1) / mn;
	if (ns > cap) ns = cap;
	if (ATT_MAXSPLIT > 0 && ns > ATT_MAXSPLIT) ns = ATT_MAXSPLIT;
	if (att2_clu(ctx, n_head / n_kv) && ns > ATT_CLN) {
		ns -= ns % ATT_CLN;  // whole clusters
		// in one wave (the tensor-core kernels: att2_clu_max): TinyLlama's 4 kv
		// heads x 64 splits are 32 clusters of 8, of which an H200 places 30 at
		// once (two blocks per SM; session 12), so two clusters ran after the
		// others had finished. With 56 splits (28 clusters) on an H100, decode
		// tok/s of TinyLlama Q4_K_M at 16k / 32k tokens of context (3 runs, two
		// rounds, with ATT_MMA_THIN2's pipelined staging): 1,016.1 / 878.0 and
		// 1,026.9 / 884.6 against 882.5 / 744.7 and 884.0 / 740.8 (48 splits:
		// 1,025.6 / 881.1 and 1,029.5 / 883.2).
		const int most = att2_clu_max(ctx, n_head / n_kv, hd);
		if (most >= n_kv && ns > most / n_kv * ATT_CLN) ns = most / n_kv * ATT_CLN;
	}
	return ns < 1 ? 1 : ns;
}

// dot of q rows (shared, G x hd, pre-scaled) with the f16 key row kp.
template <int MAXG>
__device__ __forceinline__ void qk_dots(const float *qs, int G, int hd, const __half *kp, float dot[MAXG]) {
#pragma unroll
	for (int g = 0; g < MAXG; g++) dot[g] = 0.f;
#pragma unroll 4
	for (int c = 0; c < hd; c += 8) {
		const uint4 kv = *(const uint4 *)(kp + c);
		const __half2 *k2 = (const __half2 *)&kv;
		float kf[8];
#pragma unroll
		for (int i = 0; i < 4; i++) {
			const float2 f = __half22float2(k2[i]);
			kf[2 * i] = f.x;
			kf[2 * i + 1] = f.y;
		}
#pragma unroll
		for (int g = 0; g < MAXG; g++) {
			if (g < G) {
				const float4 q0 = *(const float4 *)(qs + g * hd + c), q1 = *(const float4 *)(qs + g * hd + c + 4);
				dot[g] += q0.x * kf[0] + q0.y * kf[1] + q0.z * kf[2] + q0.w * kf[3] + q1.x * kf[4] + q1.y * kf[5] +
				          q1.z * kf[6] + q1.w * kf[7];
			}
		}
	}
}

// Combine the ns splits' partials of kv head kvh into out (every thread of
// the block; ends with a barrier-free write of out). Two steps, each one L2
// round trip deep for up to 32 (A) and ATT_CB (B) splits: A) warp w takes
// heads w, w + 8, ...: the maximum M and the sum L over the splits, and each
// split's factor exp(m_j - M) into shared memory; B) each thread sums its
// output dimensions' partials times the factors, ATT_CB splits per batch with
// every load of a batch issued before any is used.
#ifndef ATT_CB
#define ATT_CB 8
#endif
// The staged attention's copies of K and V into shared memory as cp.async
// (every copy of the block in flight at once, the query's loads beside
// them); 0: loads into registers, then stores (two 16-byte pieces per
// thread per round, one round after the other). A/B on the H200 (decode
// tok/s at 128 / 4k, 3 runs, twice each): TinyLlama Q8_0 1,327 / 1,048 and
// 1,314 / 1,037 against 1,303 / 1,017 and 1,330 / 1,026; TinyLlama Q4_K_M
// 1,249 / 976 and 1,264 / 994 against 1,262 / 983 and 1,260 / 983 (within
// noise). The attention trace at 4k put the keys phase at 6.6 of the
// blocks' 10.4 us (median), for 64 keys.
#ifndef ATT_STG_ASYNC
#define ATT_STG_ASYNC 1
#endif
#ifndef ATT_KB1
#define ATT_KB1 32  // V rows per load batch, head_dim <= 64
#endif
#ifndef ATT_KB2
#define ATT_KB2 8  // head_dim <= 128
#endif
// Unstaged decode attention at head_dim 128 (7B: one head per kv head) with
// eight lanes per key: each load instruction takes four whole 128-byte
// halves of key rows (the lane-per-key loads took 16 bytes of 32 rows, half
// a sector each, 32 lines per instruction), the eight partial dots of a lane
// are reduced and scattered over its eight lanes (7 shuffles for 32 keys),
// and the V rows of a batch are loaded into the registers the keys held (one
// 8-byte load per row and lane) in ATT_LD8_VR-row rounds: three round trips
// per 32 keys instead of five. 0: the lane-per-key loop for every head size
// (A/B). On the H200 (decode tok/s at 128 / 4k tokens of context, 3 runs, one
// machine start): 7B Q4_K_M 442.9 / 348.2 and 440.3 / 348.7 against 432.1 /
// 325.4 without it, 7B Q8_0 374.0 / 305.1; the kernel alone at 7B's shape
// (scripts/attn-probe.cu) 24.3 us at 4k and 75.6 at 16k against 29.3 and 81.5.
#ifndef ATT_LD8
#define ATT_LD8 1
#endif
// ATT_LD8's V rows per round: 16 (two rounds per batch) or 32 (one). With 32
// the loop needs more than 128 registers (it spilled 212-236 bytes; 16: 60-80) and was
// slower: 7B Q4_K_M 437.3 / 332.2, 7B Q8_0 372.5 / 288.1 (same machine start as
// above), the kernel alone 28.3 us at 4k and 88.5 at 16k.
#ifndef ATT_LD8_VR
#define ATT_LD8_VR 16
#endif
static_assert(ATT_LD8_VR == 32 || ATT_LD8_VR == 16, "ATT_LD8_VR: 32 or 16");
// Short contexts at one head per kv head (7B): while the active splits fit
// one block per SM (n_kv x splits <= SMs: 7B up to 1,024 tokens), the
// eight-lane loop runs in a kernel compiled for one block per SM, whose
// registers hold a batch's K rows and all 32 of its V rows at once: one
// round trip per 32 keys instead of three. The same arithmetic in the same
// order (the logits do not depend on which kernel ran). The model keeps it
// in its short-context decode graph (att2_long). 0: never (A/B).
#ifndef ATT_LD8_1SM
#define ATT_LD8_1SM 1
#endif
// 1: that kernel at every context (A/B of long contexts with -DATT2_PER_SM=1,
// whose splits then fit one block per SM). Decode tok/s at 128 / 4k (same
// machine start as G2_WARPS's A/B): 7B Q8_0 392.9 / 312.9 and 394.2 / 314.0
// against 396.0 / 308.0 and 397.5 / 305.8; 7B Q4_K_M 447.6 / 347.9 and
// 445.1 / 345.7 against 451.6 / 349.6 and 451.2 / 347.8.
#ifndef ATT_LD8_1SM_ALL
#define ATT_LD8_1SM_ALL 0
#endif
#define ATT_CF 2304  // factors in shared memory: G x ns <= 8 heads x 288 splits
// Decode attention with the keys of each batch staged in shared memory
// (when heads share kv heads, G > 1, and a batch of 32 keys per stripe fits
// att_stg_bytes): the block copies K and V once, coalesced, where each warp
// (one query head of the G) loaded its lanes' key rows itself, G times over
// and 32 rows per load instruction. 0: every kernel loads from global
// memory (A/B).
#ifndef ATT_STG
#define ATT_STG 1
#endif
// Staging bytes per block for head_dim <= 64 and <= 128. A block stages as
// many whole 32-key batches of its split at once as fit (TinyLlama: 96 keys,
// a 4k context's whole split), then computes them one by one: one round trip
// per staging instead of per batch.
#ifndef ATT_STG_BYTES1
#define ATT_STG_BYTES1 27648
#endif
#define ATT_STG_BYTES 18432
__host__ __device__ constexpr int att_stg_bytes(int maxd2) { return maxd2 == 1 ? ATT_STG_BYTES1 : ATT_STG_BYTES; }

// decode attention's head_dim class: 64-wide slots per lane pair (MAXD2)
__host__ __device__ constexpr int att2_md(int hd) { return hd <= 64 ? 1 : hd <= 128 ? 2 : 4; }
// whether decode attention stages the keys of a batch (ATT_STG)
__host__ __device__ inline bool att2_stg(int G, int hd) {
	const int md = att2_md(hd);
	return ATT_STG && md <= 2 && G > 1 && 32 * (ATT3_WARPS / G) * (2 * hd + 8) * 2 <= att_stg_bytes(md);
}
// Decode attention on the tensor cores at head_dim 64 when 2..8 heads share a
// kv head (TinyLlama's 8): the G query heads are the rows of an m16n8k16 A
// operand (rows G..15 zero), each warp takes 16-key tiles of the block's
// staged keys, S = Q K^T and O += P V in mma.sync. The lane-per-key loop it
// replaces ran one warp per head over the same keys, each converting and
// multiplying every key element itself: at 4k tokens of context the SMs were
// bound by issuing those instructions (fewer splits, more keys per block,
// were slower: ATT_MAXSPLIT below). No precision is given up: Q and P enter
// the products as f16 pairs hi + lo (hi = f16(x), lo = f16(x - hi)), so each
// product keeps about 22 bits, and the sums are f32 as before. 0: the
// lane-per-key loop (A/B). On the H200 (decode tok/s at 128 / 4k tokens of
// context, 3 runs, one machine start, two rounds): TinyLlama Q8_0 1,320.0 /
// 1,110.0 and 1,324.8 / 1,119.7 against 1,312.0 / 1,029.2 and 1,330.9 /
// 1,042.9; TinyLlama Q4_K_M 1,254.7 / 1,060.0 and 1,249.1 / 1,061.5 against
// 1,260.8 / 997.2 and 1,240.0 / 995.7. With it, half the splits
// (ATT2_PER_SM=1) read 1,114.8 / 1,114.2 and 1,067.3 / 1,049.5 at 4k, at most
// 16 (ATT_MAXSPLIT) 1,084.3 / 1,079.3 and 1,033.4 / 1,031.3.
#ifndef ATT_MMA
#define ATT_MMA 1
#endif
__host__ __device__ inline bool att2_mma(int G, int hd) { return ATT_MMA && hd == 64 && G >= 2 && G <= 8; }
// Its staging: keys per round in dynamic shared memory (K and V rows of 64 +
// 8 halves each). ATT_MMA_THIN: the two-blocks-per-SM budget of the other
// staged kernels. ATT_MMA_FAT > 0: contexts of up to ATT_CLN x ATT_MMA_FAT
// keys (4,608 at 576) take one cluster of ATT_CLN splits per kv head (one
// level of combine, no partials through L2), each block staging all of its
// split's keys at once (166 KB, one block per SM), where the device's opt-in
// limit holds it (not sm_120's 99 KB); longer contexts take the splits of
// att2_nsplit (TinyLlama: 64) in the second decode graph, as before. With the
// tensor cores the keys of a block cost little to compute, so fewer, longer
// splits win, while with the lane-per-key loop they lost (ATT_MAXSPLIT). A/B
// on the H200 (decode tok/s at 128 / 1k / 4k tokens of context, 3 runs, one
// machine start, two rounds): TinyLlama Q8_0 1,312.7 / 1,269.1 / 1,188.3 and
// 1,316.2 / 1,265.7 / 1,186.5 against 1,322.8 / 1,154.7 / 1,118.0 and 1,327.8
// / 1,152.0 / 1,117.6 without (0); TinyLlama Q4_K_M 1,245.8 / 1,210.1 /
// 1,145.9 and 1,252.5 / 1,212.0 / 1,145.8 against 1,244.3 / 1,094.6 / 1,053.6
// and 1,259.2 / 1,098.6 / 1,062.1.
// The decode attention's splits at a context of n keys: one cluster of fat
// splits up to fat_max (att2_fat_max, 0: none), else nsplit (att2_nsplit).
__host__ __device__ inline int att2_ctx_nsplit(int fat_max, int n, int nsplit) {
	return fat_max > 0 && n <= fat_max ? (nsplit < ATT_CLN ? nsplit : ATT_CLN) : nsplit;
}
#define ATT_MMA_KEYB (4 * 72)  // bytes per staged key
#define ATT_MMA_THIN 96
// ATT_MMA_THIN2: the thin staging where two blocks of it fit an SM (every
// sm_90 and sm_100 part; not sm_120's 99 KB): 256 keys in two stages of 128
// (one 16-key tile per warp each), the second stage's copies in flight while
// the first one's tiles are computed (ATT_MMA_PIPE; 0: one round of all of
// them, then the tiles, as the thin staging before). At TinyLlama's shape
// (64 splits per kv head, so 256 keys a split at 16k) on an H100 (decode
// tok/s of TinyLlama Q4_K_M at 8k / 16k / 32k tokens of context, 3 runs, two
// rounds): 96 keys 1,073.2 / 847.0 / 687.6 and 1,077.3 / 845.2 / 693.0; 256
// in one round 1,076.8 / 846.8 / 723.9 and 1,075.0 / 847.0 / 723.4; 256 in
// two stages 1,080.5 / 870.1 / 733.1 and 1,072.4 / 872.9 / 739.0.
#ifndef ATT_MMA_THIN2
#define ATT_MMA_THIN2 256
#endif
#ifndef ATT_MMA_PIPE
#define ATT_MMA_PIPE 1
#endif
#ifndef ATT_MMA_FAT
#define ATT_MMA_FAT 576
#endif
// (Dropped, measured: a staging round's copies in 2 or 4 cp.async groups,
// each part's tiles computed while the later parts' copies are in flight:
// TinyLlama Q8_0 1,174.0 / 1,164.2 and 1,155.1 / 1,149.0 at 4k against
// 1,189.8 / 1,177.6 in one group; .dev/wip/s13-mma-np.patch.)
// whether it runs the eight-lanes-per-key loop (ATT_LD8): the kernel-per-op
// step's choice of kernel and the persistent step's choice of loop, so that
// both compute the same bits
__host__ __device__ inline bool att2_ld8(int G, int hd) { return ATT_LD8 && hd == 128 && !att2_stg(G, hd); }
// Long contexts at one head per kv head and head_dim 128 (Llama-2-7B past
// att2_short_max: the long-context decode graph): each block streams its
// split through a ring of ATT_RING_ST stages of ATT_RING_KEYS keys in dynamic
// shared memory (each stage's K rows, then its V rows, copied by two bulk
// copies, ATT_RING_TMA; the next stage in flight while the warps compute one),
// every warp taking 4 J consecutive keys of each stage with eight lanes per
// key (rg_keys). The eight-lanes-per-key kernel it replaces there (ATT_LD8)
// loaded a warp's 32 keys, then their V rows in two rounds: three dependent
// round trips per batch, and 2.8 TB/s at 4k tokens of context. 0: that kernel
// (A/B). On the H200 (session 15), the kernel alone at 7B's shape
// (scripts/attn-probe.cu, us per launch at 4k / 16k tokens of context): 21.90
// / 65.61 against 24.24 / 75.47 (a plain read of the same 67 MB: 17.3 us);
// decode tok/s at 128 / 4k (5 runs): 7B Q4_K_M 458.6 / 359.9 and 457.8 /
// 359.7, 7B Q8_0 395.5 / 319.9, against 457.5 / 349.6 and 395.6 / 307.5
// without (3 runs, in the call before).
#ifndef ATT_RING
#define ATT_RING 1
#endif
// Two blocks per SM (att2_nsplit's one wave): 2 x (the kernel's 5 KB of
// static shared memory + the ring + 1 KB) within the H200's 228 KB. More in
// flight per block was slower, alone at 4k / 16k tokens of context (us):
// 64 x 2 21.90 / 65.61 (the default until ATT_RING_PDL: 32 KB in flight per block), 32 x 3
// 22.93 / 68.00, 32 x 5 25.77 / 76.02, 32 x 2 25.09 / 73.48; with one block
// per SM and half the splits (ATT2_PER_SM=1), 64 x 3 22.30 / 66.46 and 64 x 4
// 24.16 / 72.21. In the decode step (before ATT_RING_TRIGGER, 7B Q4_K_M at
// 2k / 4k) 32 x 3 read 362.5 / 332.1 and 32 x 2 358.4 / 326.0 against 64 x 2's
// 363.9 / 334.2. Session 43 (an H100, 7B Q8_0 at 128 / 4k, 3 runs, two
// rounds): 32 x 3 (2 x 54 KB per SM) with DEC_CARVE_KB = 132, which leaves
// the GEMVs 124 KB of L1, read 320.8 / 257.3 and 321.0 / 255.3 against the
// defaults' 324.1 / 257.0 and 323.6 / 257.8; 32 x 4 at the default 164 KB
// (another start) 323.0 / 253.6 and 323.3 / 253.3 against 323.4 / 257.7 and
// 323.6 / 256.3.
#ifndef ATT_RING_KEYS
#define ATT_RING_KEYS 64
#endif
// (2 stages since session 42, one of them in flight before the wait: 2 x 70
// KB per SM, so that one 164 KB carveout serves every decode kernel
// (DEC_CARVE_KB). From session 19, with ATT_RING_PDL, 3 stages, two in flight
// before the wait: 2 x (5 + 96 + 1) KB per SM.)
#ifndef ATT_RING_ST
#define ATT_RING_ST 2
#endif
// One shared memory carveout, in KB, for the decode GEMVs and the ring
// kernel (164 since session 42; 0 leaves the GEMVs' to the driver and gives
// the ring the largest). An SM can change its carveout only while no block is
// on it, so a block that lands beside another kernel's blocks most likely
// runs in theirs. Session 40's traces (an H100, 7B Q8_0 at 4k, SK_TRACE=1, with
// G2_TRIG_LATE = 1 in both) of ATT_RING_TRIGGER = 2 against 0: with the O
// GEMV launched before the ring's end, 178 gate/up blocks a step landed on
// an SM that had held a block ever since its ring blocks (TRACE_DRAIN=1):
// 37.6 us median against 30.2-30.5 for the rest, and 113 down blocks 26.4
// against 20.2-20.5. With 0 every SM empties between the ring and the O GEMV,
// and no block did.
// The ring's 2 x (5 + 96 + 1) KB take the H100/H200's largest carveout, 228
// KB, which leaves 28 KB of L1, and the GEMVs want theirs: every decode
// kernel at the largest carveout cost them 11% at 128 tokens of context
// (session 15). With ATT_RING_ST = 2 the ring needs 2 x 70 KB, so 164 KB
// (92 KB of L1) serves every decode kernel and lets each launch early
// without that cost. Session 41 (an H100, nvcc 11.8 sm_90 builds, decode
// tok/s at 128 / 4k, 3 runs, two rounds in one machine start): 7B Q8_0 with
// the 3-stage ring and 0 (the kernels until then) 315.2 / 249.0 and 314.5 /
// 247.3; the 2-stage ring alone 314.6 / 251.1 and 315.3 / 250.9; with 164,
// 318.1 / 251.7 and 318.0 / 251.7; with ATT_RING_TRIGGER = 2 too, 317.9 /
// 253.0 and 318.0 / 252.8 (1 instead: 318.1 / 252.5 and 318.0 / 251.9).
// 228 for every decode kernel, with the 3-stage ring: 295.8 / 238.1 and
// 296.5 / 238.4 (with trigger 2: 296.5 / 238.2 and 296.4 / 237.5). The same
// start, 3-stage ring and 0 against 164 with trigger 2: TinyLlama Q8_0
// 1,019.2 / 938.2 and 1,020.8 / 940.0 against 1,022.5 / 940.3 and 1,022.1 /
// 937.4; TinyLlama Q4_K_M 1,197.7 / 1,071.4 and 1,190.2 / 1,083.9 against
// 1,196.4 / 1,081.9 and 1,197.9 / 1,079.7; 7B Q4_K_M 392.8 / 289.6 and 393.3
// / 292.0 against 391.8 / 293.7 and 392.0 / 293.1. 164, with ATT_RING_ST = 2
// and ATT_RING_TRIGGER = 2, became the default in session 42, once the
// per-op tests and a memcheck had passed with them on a GPU (docs/PERF.md).
// Session 42's A/B on another H100, 7B Q8_0: 315.0 / 248.1 and 313.8 / 246.7
// with the kernels before it, 318.4 / 252.9 and 317.4 / 252.2 with them.
// Ignored where an SM has less shared memory (dec_carve_pct).
#ifndef DEC_CARVE_KB
#define DEC_CARVE_KB 164
#endif
// When the ring kernel lets the next kernel (the O projection's GEMV, a
// programmatic dependent launch) launch: 0 at its end, 1 once its keys are
// done, 2 (the default since session 42) in each kv head's last block after
// its arrival, before its combine (see below); never at its start, as the
// other attention kernels do (ATT2_TRIGGER).
// Launched early, the GEMV's blocks took the ring blocks' place as they
// finished and the layer's later GEMVs ran slower (the trace at 2k: gate/up
// 33.3 against 29.6 us, down 46.1 against 40.4), though the attention itself
// was faster (16.8 against 18.1 us). Decode tok/s at 128 / 4k: 7B Q4_K_M
// 458.2 / 360.4 with 0, 459.0 / 337.0 with 1, 457.5 / 349.6 for the
// eight-lanes-per-key kernel (which triggers at its start); 7B Q8_0 395.3 /
// 319.6, 396.2 / 301.8 and 395.6 / 307.5. (Triggering at the start as well:
// 7B Q4_K_M at 2k 365.0 against 386.4.) Again with the early ring launch and
// ATT_R1 (session 21, 7B Q8_0 at 4k): 1 read 324.7 / 324.7 against 353.5 /
// 353.9.
// The O projection folded into the ring kernel instead (session 30, a
// knock-out with wrong output, not in the tree): after its keys each block
// copied a 69,632-byte slice of the layer's O weights into its ring's shared
// memory (one bulk copy), waited on a counter for its kv head's splits,
// combined them itself, multiplied its 512 rows with the head's output and
// wrote them; the last of the 32 heads' blocks of each 512-row chunk summed
// them, and the step skipped the O GEMV. 7B Q8_0 at 128 / 4k on an H200, 3
// runs, two rounds: 418.3 / 303.6 and 418.2 / 303.2 against 417.3 / 354.3
// and 417.0 / 354.8. The trace put the blocks' tail after the keys at 18.3
// us (median); with the multiplication left out (an H100 trace) still 10.0
// us, and the attention launch 39.7 us a layer against 37.5 for the ring and
// the O GEMV together. The copy, the wait for the head and the chunks'
// last-arriver sums are a longer chain than the O GEMV's launch.
// 2 was first tried and dropped in session 36, before DEC_CARVE_KB (when the
// last block arrives the kv head's other blocks have left, so the GEMV's
// blocks take only free places, and its weights stream while the combine's
// L2 round trip runs). On an
// H100, 7B Q8_0 decode tok/s at 128 / 4k, 3 runs, two rounds: 336.9 / 247.3
// and 334.3 / 247.2 against 337.5 / 278.0 and 336.7 / 277.7: 11% slower at
// 4k (1 lost 6-8% on the H200).
// Session 37 (H200) ruled out the GEMV's 17.8 MB of early loads as the
// cause: the same trigger with that GEMV issuing no weight loads before its
// wait read 301.9 / 301.0 at 4k against 355.0 / 355.9 (15% slower; 419.6 /
// 419.2 against 420.9 / 419.8 at 128, where the ring does not run). So the
// loss comes with the early launch itself (the GEMV's blocks resident while
// the combine runs, or what the chain after it does). Session 38 (an
// H100) ruled out gate/up's early launch behind it: the same trigger with
// the O GEMV letting gate/up launch only after its own wait (so that
// gate/up's blocks and their L2 prefetch come no earlier than without the
// trigger) read 243.3 / 243.4 at 4k against 272.6 / 272.6 (10.7% slower).
// Session 39 traced 2 against 0 (an H100, 4k, SK_TRACE=1): the O GEMV's
// first blocks started 0.6 us before the ring's last block ended, against
// 0.6 us after it with 0 (medians over the step's layers), so the trigger
// hides about 1.2 us a layer (what 7B Q8_0 at 4k lacks on the H200); the
// loss is further down the chain, in the gate/up and down GEMVs. Session 40
// traced it to GEMV blocks on SMs that held a block ever since their ring
// blocks: most likely they run in the ring's shared memory carveout, with 28
// KB of L1 (see DEC_CARVE_KB).
// Session 41 (an H100): with one carveout for every decode kernel
// (DEC_CARVE_KB = 164, ATT_RING_ST = 2) 2 gains 0.5% at 4k (see DEC_CARVE_KB
// for the figures).
#ifndef ATT_RING_TRIGGER
#define ATT_RING_TRIGGER 2
#endif
// 1: the ring launched with programmatic dependent launch, its first
// ATT_RING_ST - 1 stages issued before it waits for the Q/K/V GEMV (all but
// the stage holding key n - 1, the row that GEMV stores: the other rows and
// *pos are older than the step). Measured with ATT_ACQREL (session 19, H200,
// decode tok/s at 4k, 3 runs, two rounds in one machine start): with 3
// stages 347.0 and 347.4 for 7B Q8_0, 379.3 and 379.1 for 7B Q4_K_M, against
// 340.6 and 340.4, 378.7 and 378.3 without either (2 stages); the same 3
// stages without it 336.6 and 339.9, 377.3 and 377.0. With 2 stages (one
// issued early) it lost: 339.2 (7B Q8_0) and 368.7 (7B Q4_K_M) against 341.3
// and 379.7. Also dropped: the next 2, 4 or 8 stages' rows asked of L2
// (prefetch.global.L2) before the wait, 338.2 / 341.3, 335.8 / 336.1 and
// 326.1 / 327.7 for 7B Q8_0 (7B Q4_K_M 374.7, 368.6, 359.5); and, with it,
// more stages before the wait: one block per SM with 6 stages
// (ATT2_PER_SM=1, five stages early) 340.2 / 340.1 and 371.9 / 371.6, stages
// of 32 keys x 6 338.9 / 339.8 and 371.4 / 371.7, against 347.8 / 346.5 and
// 380.2 / 380.2.
// Dropped in session 20 (7B Q8_0 at 4k, as above, against 347.5 / 346.6 in
// the same machine start): splits of equal length (rounded to 8 keys, not
// 32: the last split had 304 of 544 keys) 346.4 / 345.3; each block, once
// its keys are done, asking L2 for its share of the O GEMV's weights
// (prefetch.global.L2) 346.3 / 347.2, with the K and V copies evict-first
// 347.8 / 347.6; a kv head's splits in one cluster of 7 merged through
// distributed shared memory (the H200 places at most 32 such clusters at
// once, 30 of 8) 313.4 / 313.4 (7B Q4_K_M at 4k / 16k 349.2 / 207.3
// against 378.3 / 245.6; alone at 4k / 16k 23.22 / 86.30 us against 21.69 /
// 65.66): its blocks' starts spread over 18.4 us, as clusters wait for
// whole groups of free places.
#ifndef ATT_RING_PDL
#define ATT_RING_PDL 1
#endif
// 1: a split block's arrival at its kv head's counter (the last one to
// arrive combines the splits) by one acquire-release atomic in thread 0
// between two block barriers, instead of a sequentially consistent fence in
// every thread before the arrival and another after it. The barriers carry
// the ordering to and from the block's other threads (the partials are read
// with __ldcg, from L2). Alone it moved little: 7B Q8_0 at 4k with the
// early ring launch and 2 stages, 339.2 / 339.2 against 338.0 / 337.7.
#ifndef ATT_ACQREL
#define ATT_ACQREL 1
#endif
// 1: the ring at every context of those models (no one-block-per-SM
// kernel): alone, 5.90 / 11.64 us at 128 / 1k tokens of context against
// 4.35 / 9.32 (A/B)
#ifndef ATT_RING_ALL
#define ATT_RING_ALL 0
#endif
static_assert(ATT_RING_KEYS == 32 * ATT3_WARPS / 8 || ATT_RING_KEYS == 64 * ATT3_WARPS / 8,
              "ATT_RING_KEYS: 4 or 8 keys per warp");
static_assert(ATT_RING_ST >= 2, "ATT_RING_ST: at least two stages");
// (ATT_RING_TMA is defined with the bulk copies' helpers.)
#define ATT_RING_BYTES (ATT_RING_ST * ATT_RING_KEYS * 512)  // K and V rows of 128 halves
__host__ __device__ inline bool att2_ring(int G, int hd) { return ATT_RING && G == 1 && att2_ld8(G, hd); }

// R1 (the ring kernel's combine, ATT_R1): up to ATT_CB splits in one L2
// round trip instead of three (A's maximum, A's sums and factors, B's
// partials): every thread loads each split's maximum, sum and its output
// dimension's partial at once and computes the factors itself, in A's and
// B's arithmetic and order (the sum of l: warp_sum's butterfly over lanes
// 0..7, splits past ns as zeros). The last split block of a kv head runs it,
// at the end of the attention's tail. The persistent step keeps A and B, and
// TestDecodePersistent's ring case (a 1,030-token prompt) compares the two
// steps' logits bit for bit: it passes.
// A/B on the H200 (session 21, decode tok/s at 4k tokens of context, 3 runs,
// two rounds in one machine start, against the three-round-trip combine):
// 7B Q8_0 353.5 / 353.9 against 348.1 / 350.1; 7B Q4_K_M at 4k / 16k 376.4 /
// 246.4 against 372.4 / 244.7.
// Dropped (session 22): the same one-round-trip combine for the clustered
// two-level kernels' level 2 (TinyLlama's long contexts), decode tok/s at
// 16k, two rounds: TinyLlama Q8_0 843.7 / 842.3 against 845.0 / 835.8,
// TinyLlama Q4_K_M 888.9 / 889.4 against 889.0 / 889.4.
#ifndef ATT_R1
#define ATT_R1 1
#endif
// MU: the ring kernel's merge of its warps' stripes (after the keys, before
// the partials go out) with the stripe loop unrolled: each thread reads
// every stripe's maximum, sum and its dimension's accumulator from shared
// memory at once, then computes in the loop's arithmetic and order (the
// persistent step runs the loop; TestDecodePersistent's ring case compares
// the two steps' logits bit for bit, and passes). The loop's stripe count
// is only known at run time there. A/B on the H200 (session 22, decode
// tok/s at 4k tokens of context, 3 runs, one machine start per line):
// 7B Q8_0 352.0 / 353.1 against 350.5 / 350.9, and 350.0 / 352.6 / 352.9
// against 348.1 / 349.6 / 349.7; 7B Q4_K_M at 4k / 16k 380.2 / 246.0
// against 375.8 / 244.4, and 377.3 / 243.7, 379.5 / 244.0 against 375.3 /
// 243.8, 372.9 / 243.6. Dropped in the same calls: warp 0 alone merging
// (4 dimensions per lane), arriving and combining, the other warps leaving
// after the barrier (no barrier after the merge or the arrival): 350.3 /
// 350.4 / 350.3, 7B Q4_K_M 374.1 / 242.7, 375.5 / 243.4. Also measured: a
// knock-out that cut every split to at most 512 keys (8 stages; wrong
// output, 5.4% fewer keys at 4k) read 355.1 / 355.3 (357.3 / 356.3 with
// MU), about what the fewer bytes give.
#ifndef ATT_RING_MU
#define ATT_RING_MU 1
#endif
// (CF: the factors' room, at least ATT2_MAXG)
template <int CF = ATT_CF, bool R1 = false>
__device__ __forceinline__ void att2_combine(const float *part, float *out, int kvh, int G, int hd, int nsplit,
                                             int ns) {
	static_assert(CF >= ATT2_MAXG, "att2_combine: room for every head's maximum");
	if (R1 && ATT_R1 && ns <= ATT_CB) {
		constexpr int CB = ATT_CB;
		static_assert(CB == 8, "att2_combine: R1's sum of l is written for 8 splits");
		for (int idx = threadIdx.x; idx < G * hd; idx += blockDim.x) {
			const int g = idx / hd, d = idx - g * hd;
			const float *pb = part + (size_t)(kvh * G + g) * nsplit * (hd + 2);
			float mj[CB], lj[CB], vj[CB];
#pragma unroll
			for (int u = 0; u < CB; u++) {
				const bool in = u < ns;
				mj[u] = in ? __ldcg(pb + (size_t)u * (hd + 2)) : -INFINITY;
				lj[u] = in ? __ldcg(pb + (size_t)u * (hd + 2) + 1) : 0.f;
				vj[u] = in ? __ldcg(pb + (size_t)u * (hd + 2) + 2 + d) : 0.f;
			}
			float M = mj[0];
#pragma unroll
			for (int u = 1; u < CB; u++) M = fmaxf(M, mj[u]);
			float f[CB], x[CB];
#pragma unroll
			for (int u = 0; u < CB; u++) {
				f[u] = u < ns ? __expf(mj[u] - M) : 0.f;
				x[u] = u < ns ? 0.f + lj[u] * f[u] : 0.f;  // (A: L = 0 + l f in lane u)
			}
			const float L = ((x[0] + x[4]) + (x[2] + x[6])) + ((x[1] + x[5]) + (x[3] + x[7]));
			float a = 0.f;
#pragma unroll
			for (int u = 0; u < CB; u++)
				if (u < ns) a += vj[u] * f[u];
			out[(size_t)(kvh * G + g) * hd + d] = a / L;
		}
		return;
	}
	__shared__ float cf[CF];
	__shared__ float cl[ATT2_MAXG];
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const bool fits = G * ns <= CF;
	for (int g = warp; g < G; g += ATT3_WARPS) {
		const float *pb = part + (size_t)(kvh * G + g) * nsplit * (hd + 2);
		float M = -INFINITY;
#pragma unroll 4
		for (int j = lane; j < ns; j += 32) M = fmaxf(M, __ldcg(pb + (size_t)j * (hd + 2)));
		M = warp_max(M);
		float L = 0.f;
#pragma unroll 4
		for (int j = lane; j < ns; j += 32) {
			const float *pj = pb + (size_t)j * (hd + 2);
			const float f = __expf(__ldcg(pj) - M);
			L += __ldcg(pj + 1) * f;
			if (fits) cf[g * ns + j] = f;
		}
		L = warp_sum(L);
		if (lane == 0) cl[g] = L;
		if (!fits && lane == 0) cf[g] = M;  // no room for the factors: keep M, B recomputes them
	}
	__syncthreads();
	constexpr int CB = ATT_CB;
	const int nout = G * hd;
	for (int idx0 = threadIdx.x; idx0 < nout; idx0 += 2 * blockDim.x) {
		// two outputs per thread per pass, their loads in flight together;
		// splits past ns are not loaded (a clamped load of split ns - 1 was
		// CB - ns redundant L2 reads per output at short contexts)
		const int idx1 = idx0 + blockDim.x;
		const bool has1 = idx1 < nout;
		const int g0 = idx0 / hd, d0 = idx0 - g0 * hd;
		const int g1 = has1 ? idx1 / hd : g0, d1 = has1 ? idx1 - g1 * hd : d0;
		const float *pb0 = part + (size_t)(kvh * G + g0) * nsplit * (hd + 2) + 2 + d0;
		const float *pb1 = part + (size_t)(kvh * G + g1) * nsplit * (hd + 2) + 2 + d1;
		float a0 = 0.f, a1 = 0.f;
		for (int j0 = 0; j0 < ns; j0 += CB) {
			float v0[CB], v1[CB];
#pragma unroll
			for (int u = 0; u < CB; u++) {
				const int j = j0 + u;
				v0[u] = j < ns ? __ldcg(pb0 + (size_t)j * (hd + 2)) : 0.f;
				v1[u] = j < ns && has1 ? __ldcg(pb1 + (size_t)j * (hd + 2)) : 0.f;
			}
#pragma unroll
			for (int u = 0; u < CB; u++) {
				const int j = j0 + u;
				if (j < ns) {
					float f0, f1;
					if (fits) {
						f0 = cf[g0 * ns + j];
						f1 = cf[g1 * ns + j];
					} else {
						f0 = __expf(__ldcg(pb0 - 2 - d0 + (size_t)j * (hd + 2)) - cf[g0]);
						f1 = __expf(__ldcg(pb1 - 2 - d1 + (size_t)j * (hd + 2)) - cf[g1]);
					}
					a0 += v0[u] * f0;
					a1 += v1[u] * f1;
				}
			}
		}
		out[(size_t)(kvh * G + g0) * hd + d0] = a0 / cl[g0];
		if (has1) out[(size_t)(kvh * G + g1) * hd + d1] = a1 / cl[g1];
	}
}

// Decode attention, one warp per (query head, stripe of keys): grid
// (n_kv, nsplit), ATT3_WARPS warps; with G = n_head / n_kv heads per group,
// warp w serves head w % G over the split's keys k = start + 32 s + 32 S i
// (s = w / G, S = ATT3_WARPS / G stripes), one key per lane for the scores,
// then P V with the lanes over head dimensions. The kernel before this one
// gave each lane all G heads of its key (4 warps): G times the serial work
// per warp, which made TinyLlama's 8-head groups cost 35 us per layer at a
// 128-token context (its decode step ran 1.9x faster with attention left
// out); this one decodes TinyLlama Q8_0 at 880 instead of 604 tok/s.

//
// The work of block (kvh, s) is a device function (att3_item) shared with the
// persistent decode kernel (MK: the current token's K/V rows were written by
// the same launch, so they are read with plain loads, never through the
// non-coherent read-only path).
template <bool MK, typename V>
__device__ __forceinline__ V ldkv(const V *p) {
	return MK ? *p : __ldg(p);
}

// A volatile shared-memory load of four floats: read where it is used, never
// kept in registers across a loop (ATT_LD8's query: 16 more registers live
// through the key loop of a kernel held to 128).
__device__ __forceinline__ float4 lds4v(const float *p) {
	float4 v;
	asm volatile("ld.volatile.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
	             : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
	             : "r"((uint32_t)__cvta_generic_to_shared(p)));
	return v;
}

// Level 1 of the two-level combine (contexts of more than ATT_CLN splits when
// the kernel runs in clusters): the merges (m_j, l_j, a_j) of a group's cnt <=
// ATT_CLN consecutive splits into one group partial (M, L, a), in
// att2_combine's arithmetic (lane j: split j; the sum of l by butterfly; a
// summed over j in order), for outputs [i0, i1) of the G x hd; every thread of
// the block calls it. Src gives m(j, g), l(j, g) and a(j, idx) of split j of
// the group: from the cluster's shared memory (the kernel) or from the
// partials in global memory (the persistent step), the same values either way.
// go: the group partial of head 0 (heads gstride floats apart).
#ifndef ATT_L1NI
// level 1 out of line (a call): TinyLlama Q8_0 at 4k 944-948 against 938-939
// inlined (0), in one machine start
#define ATT_L1NI 1
#endif
#if ATT_L1NI
#define ATT_L1_INLINE __noinline__
#else
#define ATT_L1_INLINE __forceinline__
#endif
template <class Src>
__device__ ATT_L1_INLINE void att2_level1(const Src &src, int cnt, int G, int hd, int i0, int i1, float *go,
                                            size_t gstride, float *f8, float *M8, float *L8) {
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	for (int gg = warp; gg < G; gg += ATT3_WARPS) {
		const float mj = lane < cnt ? src.m(lane, gg) : -INFINITY;
		const float M = warp_max(mj);
		const float f = lane < cnt ? __expf(mj - M) : 0.f;
		const float L = warp_sum(lane < cnt ? src.l(lane, gg) * f : 0.f);
		if (lane < cnt) f8[gg * ATT_CLN + lane] = f;
		if (lane == 0) {
			M8[gg] = M;
			L8[gg] = L;
		}
	}
	__syncthreads();
	for (int idx = i0 + threadIdx.x; idx < i1; idx += blockDim.x) {
		const int gg = idx / hd, d = idx - gg * hd;
		float a = 0.f;
		for (int j = 0; j < cnt; j++) a += src.a(j, idx) * f8[gg * ATT_CLN + j];
		float *o = go + (size_t)gg * gstride;
		o[2 + d] = a;
		if (d == 0) {
			o[0] = M8[gg];
			o[1] = L8[gg];
		}
	}
}

// att2_level1's sources
struct Att2CluSrc {  // split j = cluster rank j: its block's merge in shared memory
	cooperative_groups::cluster_group c;
	float *a_, *m_, *l_;
	__device__ float m(int j, int g) const { return c.map_shared_rank(m_, j)[g]; }
	__device__ float l(int j, int g) const { return c.map_shared_rank(l_, j)[g]; }
	__device__ float a(int j, int idx) const { return c.map_shared_rank(a_, j)[idx]; }
};
struct Att2GlbSrc {  // split j0 + j: its partial in global memory
	const float *part;
	int G, hd, nsplit, kvh, j0;
	__device__ const float *p(int j, int g) const {
		return part + ((size_t)(kvh * G + g) * nsplit + j0 + j) * (hd + 2);
	}
	__device__ float m(int j, int g) const { return __ldcg(p(j, g)); }
	__device__ float l(int j, int g) const { return __ldcg(p(j, g) + 1); }
	__device__ float a(int j, int idx) const { return __ldcg(p(j, idx / hd) + 2 + idx % hd); }
};

// ATT_LD8's arithmetic, shared by the decode kernel and the persistent step,
// so that both give the same bits.
// The dot of 8 query values (q0, q1) with 8 f16 key values, in explicit
// roundings (as the compiler contracted the sum of products before): the
// same bits in every kernel that runs it (ATT_LD8 and ATT_RING).
__device__ __forceinline__ float dot8_rn(float4 q0, float4 q1, const uint4 &kv) {
	const __half2 *k2 = (const __half2 *)&kv;
	const float2 f0 = __half22float2(k2[0]), f1 = __half22float2(k2[1]), f2 = __half22float2(k2[2]),
	             f3 = __half22float2(k2[3]);
	float e = __fmul_rn(q0.x, f0.x);
	e = __fmaf_rn(q0.y, f0.y, e);
	e = __fmaf_rn(q0.z, f1.x, e);
	e = __fmaf_rn(q0.w, f1.y, e);
	e = __fmaf_rn(q1.x, f2.x, e);
	e = __fmaf_rn(q1.y, f2.y, e);
	e = __fmaf_rn(q1.z, f3.x, e);
	return __fmaf_rn(q1.w, f3.y, e);
}
// a4 *= corr, and a4 += pj x (4 f16 values of v), each rounded (never fused
// across the two)
__device__ __forceinline__ void scale4_rn(float4 &a4, float corr) {
	a4.x = __fmul_rn(a4.x, corr), a4.y = __fmul_rn(a4.y, corr), a4.z = __fmul_rn(a4.z, corr),
	a4.w = __fmul_rn(a4.w, corr);
}
__device__ __forceinline__ void pv4_rn(float pj, const uint2 &v, float4 &a4) {
	const __half2 *v2 = (const __half2 *)&v;
	const float2 f0 = __half22float2(v2[0]), f1 = __half22float2(v2[1]);
	a4.x = __fmaf_rn(pj, f0.x, a4.x);
	a4.y = __fmaf_rn(pj, f0.y, a4.y);
	a4.z = __fmaf_rn(pj, f1.x, a4.z);
	a4.w = __fmaf_rn(pj, f1.y, a4.w);
}
// The partial dots of a 32-key batch: lane t of key group kq, pd[j] over its
// 16 dimensions of key 4j + kq (qg: the pre-scaled query in shared memory).
__device__ __forceinline__ void ld8_dots(const uint4 (&k8)[8][2], const float *qg, int t, float (&pd)[8]) {
#pragma unroll
	for (int j = 0; j < 8; j++) {
		float d = 0.f;
#pragma unroll
		for (int i = 0; i < 2; i++)
			d = __fadd_rn(d, dot8_rn(lds4v(qg + 64 * i + 8 * t), lds4v(qg + 64 * i + 8 * t + 4), k8[j][i]));
		pd[j] = d;
	}
}

// The batch's online-softmax step: the partial dots reduced over the 8 lanes
// of a key group and scattered (after the xor-4, -2 and -1 steps lane t holds
// the whole dot of group j = t, key 4t + kq), gathered to one key per lane;
// returns the lane's weight p (0 past end) and rescales m, l and a4.
__device__ __forceinline__ float ld8_softmax(const float (&pd)[8], int k0, int end, int lane, float &m, float &l,
                                             float4 &a4) {
	const int t = lane & 7;
	float r4[4], r2[2];
	const bool h4 = t & 4, h2 = t & 2, h1 = t & 1;
#pragma unroll
	for (int i = 0; i < 4; i++) {
		const float send = h4 ? pd[i] : pd[i + 4], keep = h4 ? pd[i + 4] : pd[i];
		r4[i] = keep + __shfl_xor_sync(0xffffffffu, send, 4);
	}
#pragma unroll
	for (int i = 0; i < 2; i++) {
		const float send = h2 ? r4[i] : r4[i + 2], keep = h2 ? r4[i + 2] : r4[i];
		r2[i] = keep + __shfl_xor_sync(0xffffffffu, send, 2);
	}
	const float d1 = (h1 ? r2[1] : r2[0]) + __shfl_xor_sync(0xffffffffu, h1 ? r2[0] : r2[1], 1);
	// lane i: key k0 + i, held by lane 8 (i & 3) + (i >> 2)
	const float dsum = __shfl_sync(0xffffffffu, d1, 8 * (lane & 3) + (lane >> 2));
	const bool ok = k0 + lane < end;
	const float sc = ok ? dsum : -INFINITY;
	const float mn = fmaxf(m, warp_max(sc));  // finite: key k0 is valid
	const float corr = __expf(m - mn);
	const float p = ok ? __expf(sc - mn) : 0.f;
	l = l * corr + warp_sum(p);
	m = mn;
	// a rounded product (__fmul_rn is never fused): the next PV step's add
	// must not be contracted with it in one kernel and not in another
	scale4_rn(a4, corr);
	return p;
}

// N V rows of the batch at k0 from row u0 into v8 (the lane's 8 bytes of
// each: dimensions 4 lane..4 lane+3), rows at or past nv as zeros.
template <int N, bool MK>
__device__ __forceinline__ void ld8_ldv(const __half *vb, int k0, int u0, int nv, int lane, uint2 (&v8)[N]) {
	const uint2 *vp = (const uint2 *)(vb + (size_t)k0 * 128) + lane;
#pragma unroll
	for (int u = 0; u < N; u++) v8[u] = u0 + u < nv ? ldkv<MK>(vp + 32 * (u0 + u)) : make_uint2(0u, 0u);
}

// P x V for N V rows of the batch from row u0 (v8[u]: row k0 + u0 + u, the
// lane's dimensions 4 lane..4 lane+3; zeros past end), in row order.
template <int N>
__device__ __forceinline__ void ld8_pv(float p, const uint2 (&v8)[N], int u0, float4 &a4) {
#pragma unroll
	for (int u = 0; u < N; u++) {
		pv4_rn(__shfl_sync(0xffffffffu, p, u0 + u), v8[u], a4);  // (0 past end)
	}
}

// ATT_RING's arithmetic, shared by the kernel (keys from its shared-memory
// ring) and the persistent step (from global memory), so that both give the
// same bits: a warp's 4 J consecutive keys from base (< end), lane t of key
// group kq (lane 8 kq + t) holding dimensions 8t..8t+7 and 64+8t..64+8t+7 of
// keys base + 4j + kq, j < J (qv: the pre-scaled query's same dimensions).
// kld(j, i): the lane's 16 bytes i of key base + 4j + kq; vld(u): dimensions
// 4 lane..4 lane+3 of V row base + u. Keys at or past end are masked, whatever
// their rows hold: their scores are -inf and their V rows are read as zeros
// (the kernel's bulk copies leave those rows unset).
template <int J, class KL, class VL>
__device__ __forceinline__ void rg_keys(const float (&qv)[16], int base, int end, int lane, float &m, float &l,
                                        float4 &a4, KL kld, VL vld) {
	static_assert(J == 1 || J == 2, "rg_keys: 4 or 8 keys per warp");
	const int t = lane & 7, kq = lane >> 3;
	float pd[J];
#pragma unroll
	for (int j = 0; j < J; j++) {
		auto q4 = [&](int c) { return make_float4(qv[4 * c], qv[4 * c + 1], qv[4 * c + 2], qv[4 * c + 3]); };
		pd[j] = __fadd_rn(dot8_rn(q4(0), q4(1), kld(j, 0)), dot8_rn(q4(2), q4(3), kld(j, 1)));
	}
	// the dots summed over the key group's 8 lanes: with J = 2 the xor-4 step
	// also scatters (lanes t >= 4 keep key 4 + kq), so lane t ends with the dot
	// of key base + 4 (t / 4) + kq (J = 2) or base + kq (J = 1)
	float r;
	if constexpr (J == 2) {
		const bool h4 = t & 4;
		r = __fadd_rn(h4 ? pd[1] : pd[0], __shfl_xor_sync(0xffffffffu, h4 ? pd[0] : pd[1], 4));
	} else {
		r = __fadd_rn(pd[0], __shfl_xor_sync(0xffffffffu, pd[0], 4));
	}
	r = __fadd_rn(r, __shfl_xor_sync(0xffffffffu, r, 2));
	r = __fadd_rn(r, __shfl_xor_sync(0xffffffffu, r, 1));
	const bool ok = base + 4 * (J == 2 ? t >> 2 : 0) + kq < end;
	const float sc = ok ? r : -INFINITY;
	const float mn = fmaxf(m, warp_max(sc));  // finite: key base is valid
	const float corr = __expf(m - mn);
	const float p = ok ? __expf(sc - mn) : 0.f;
	// each key once in the sum: the first lane of its copies
	const bool first = J == 2 ? (t & 3) == 0 : t == 0;
	l = __fadd_rn(__fmul_rn(l, corr), warp_sum(first ? p : 0.f));
	m = mn;
	scale4_rn(a4, corr);
#pragma unroll
	for (int u = 0; u < 4 * J; u++)  // key base + u (p 0 past end)
		pv4_rn(__shfl_sync(0xffffffffu, p, 8 * (u & 3) + 4 * (u >> 2)),
		       base + u < end ? vld(u) : make_uint2(0u, 0u), a4);
}

// ATT_MMA's arithmetic (decode attention on the tensor cores, head_dim 64),
// shared by the kernel (fragments from the staged keys by ldmatrix) and the
// persistent step (the same fragments loaded from global memory), so that
// both give the same bits. Row r = lane / 4 of the A operands is query head
// r of the group (rows 8..15 stay zero); each lane holds two key (or output
// dimension) columns per 8-wide n-tile, 2 (lane % 4) and the next.
__device__ __forceinline__ uint32_t pack_hh(__half a, __half b) {
	__half2 h = __halves2half2(a, b);
	return *(uint32_t *)&h;
}
// x as f16 hi + lo (hi = f16(x), lo = f16(x - hi), the difference exact)
__device__ __forceinline__ void split_h(float x, __half &hi, __half &lo) {
	hi = __float2half_rn(x);
	lo = __float2half_rn(__fsub_rn(x, __half2float(hi)));
}
// The query's A fragments (hi and lo) of dimensions 16 kk..16 kk + 15 from the
// pre-scaled query in shared memory (qs: G x 64), rows past G zero.
__device__ __forceinline__ void attm_qfrags(const float *qs, int G, int lane, uint32_t (&qh)[4][2],
                                            uint32_t (&ql)[4][2]) {
	const int r = lane >> 2, t4 = lane & 3;
#pragma unroll
	for (int kk = 0; kk < 4; kk++)
#pragma unroll
		for (int j = 0; j < 2; j++) {
			const int d = 16 * kk + 8 * j + 2 * t4;
			const float a = r < G ? qs[r * 64 + d] : 0.f, b = r < G ? qs[r * 64 + d + 1] : 0.f;
			__half ah, al, bh, bl;
			split_h(a, ah, al);
			split_h(b, bh, bl);
			qh[kk][j] = pack_hh(ah, bh);
			ql[kk][j] = pack_hh(al, bl);
		}
}
// One 16-key tile from key kt (keys at or past end masked): the online
// softmax step of row r (m, l: this lane's part of the row sum) and O += P V
// into o (n-tile dn: dimensions 8 dn..8 dn + 7). kfr(kk, b): the K fragments
// of dimensions 16 kk.. for keys kt..kt+7 (b[0], b[1]) and kt+8.. (b[2],
// b[3]); vfr(dn, b): the V fragments of keys kt..kt+15 for n-tiles dn
// (b[0], b[1]) and dn + 1 (b[2], b[3]).
template <class KF, class VF>
__device__ __forceinline__ void attm_tile(const uint32_t (&qh)[4][2], const uint32_t (&ql)[4][2], int kt, int end,
                                          int lane, float &m, float &l, float (&o)[8][4], KF kfr, VF vfr) {
	const int t4 = lane & 3;
	float s[2][4];
#pragma unroll
	for (int j = 0; j < 2; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
	for (int kk = 0; kk < 4; kk++) {
		uint32_t b[4];
		kfr(kk, b);
		const uint32_t ah[4] = {qh[kk][0], 0u, qh[kk][1], 0u}, al[4] = {ql[kk][0], 0u, ql[kk][1], 0u};
		mma_16816(s[0], ah, b[0], b[1]);
		mma_16816(s[0], al, b[0], b[1]);
		mma_16816(s[1], ah, b[2], b[3]);
		mma_16816(s[1], al, b[2], b[3]);
	}
	// this lane's keys kt + 8 (i / 2) + 2 t4 + i % 2 of row r
	float x[4] = {s[0][0], s[0][1], s[1][0], s[1][1]};
	bool ok[4];
#pragma unroll
	for (int i = 0; i < 4; i++) {
		ok[i] = kt + 8 * (i >> 1) + 2 * t4 + (i & 1) < end;
		if (!ok[i]) x[i] = -INFINITY;
	}
	float mx = fmaxf(fmaxf(x[0], x[1]), fmaxf(x[2], x[3]));
	mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
	mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
	mx = fmaxf(m, mx);  // finite: key kt is valid (and in this quad)
	const float corr = __expf(m - mx);
	float p[4];
#pragma unroll
	for (int i = 0; i < 4; i++) p[i] = ok[i] ? __expf(x[i] - mx) : 0.f;
	l = __fadd_rn(__fmul_rn(l, corr), __fadd_rn(__fadd_rn(p[0], p[1]), __fadd_rn(p[2], p[3])));
	m = mx;
#pragma unroll
	for (int dn = 0; dn < 8; dn++)
#pragma unroll
		for (int c = 0; c < 4; c++) o[dn][c] = __fmul_rn(o[dn][c], corr);
	__half h[4], lo[4];
#pragma unroll
	for (int i = 0; i < 4; i++) split_h(p[i], h[i], lo[i]);
	const uint32_t ph[4] = {pack_hh(h[0], h[1]), 0u, pack_hh(h[2], h[3]), 0u};
	const uint32_t pl[4] = {pack_hh(lo[0], lo[1]), 0u, pack_hh(lo[2], lo[3]), 0u};
#pragma unroll
	for (int dn = 0; dn < 8; dn += 2) {
		uint32_t b[4];
		vfr(dn, b);
		mma_16816(o[dn], ph, b[0], b[1]);
		mma_16816(o[dn], pl, b[0], b[1]);
		mma_16816(o[dn + 1], ph, b[2], b[3]);
		mma_16816(o[dn + 1], pl, b[2], b[3]);
	}
}
// The warps' (m, l, o) of row r merged into warp 0's, in a fixed tree (warps
// 4..7 into 0..3, 2..3 into 0..1, 1 into 0) through shared memory (bo: 4 x 8
// x 64 floats; bm, bl: 4 x 8); every thread of the block calls it.
__device__ __forceinline__ void attm_merge(int warp, int lane, float &m, float &l, float (&o)[8][4], float *bo,
                                           float (*bm)[ATT2_MAXG], float (*bl)[ATT2_MAXG]) {
	const int r = lane >> 2, t4 = lane & 3;
#pragma unroll
	for (int h = ATT3_WARPS / 2; h >= 1; h >>= 1) {
		if (warp >= h && warp < 2 * h) {
			const int w = warp - h;
			if (t4 == 0) {
				bm[w][r] = m;
				bl[w][r] = l;
			}
#pragma unroll
			for (int dn = 0; dn < 8; dn++)
				*(float2 *)&bo[(w * 8 + r) * 64 + 8 * dn + 2 * t4] = make_float2(o[dn][0], o[dn][1]);
		}
		__syncthreads();
		if (warp < h) {
			const float mp = bm[warp][r], lp = bl[warp][r], M = fmaxf(m, mp);
			const float f = m == -INFINITY ? 0.f : __expf(m - M), fp = mp == -INFINITY ? 0.f : __expf(mp - M);
			l = __fmaf_rn(lp, fp, __fmul_rn(l, f));
#pragma unroll
			for (int dn = 0; dn < 8; dn++) {
				const float2 v = *(const float2 *)&bo[(warp * 8 + r) * 64 + 8 * dn + 2 * t4];
				o[dn][0] = __fmaf_rn(v.x, fp, __fmul_rn(o[dn][0], f));
				o[dn][1] = __fmaf_rn(v.y, fp, __fmul_rn(o[dn][1], f));
			}
			m = M;
		}
		__syncthreads();
	}
}

// CLU: 0 not in clusters; 1 in clusters, merging a context of at most
// ATT_CLN splits there (more go through L2 as without clusters); 2 in
// clusters, and the combine of more than ATT_CLN splits is two-level.
// two: the persistent step (CLU 0) combines two-level as CLU 2 would.
// LD: 0 the lane-per-key loop; 1 the ATT_LD8 loop (head_dim exactly 128,
// unstaged), in its own instantiations so that the lane-per-key loop's
// registers are not shared. The persistent step (MK) picks the LD8 loop at
// run time.
// MidT: what the ring kernel (LD 4) runs before its first copies, mid(0),
// and between them and its keys, mid(1): nothing, then the launch wait
// (AttNoMid); or in k_qkv_ring the Q/K/V GEMV, then the wait for the other
// blocks of its kv head (a functor; the block's q is then read from L2, and
// the combining block zeroes mflag[kvh] for the next launch). Every block
// runs mid(0), those past the context too.
struct AttNoMid {
	__device__ __forceinline__ void operator()(int ph) const {
		if (ph) pdl_wait();
	}
};
template <int MAXD2, bool MK, bool STG, int CLU = 0, int LD = 0, typename MidT = AttNoMid>
__device__ __forceinline__ void att3_item(const float *q, const __half *kc, const __half *vc, float *part, float *out,
                                          int *counter, int n_head, int n_kv, int hd, int max_ctx, int nsplit,
                                          const int32_t *pos, int kvh, int s, bool two, int ring_after = 0x7fffffff,
                                          const MidT &mid = MidT(), int *mflag = nullptr) {
	constexpr bool FUSED = !std::is_same<MidT, AttNoMid>::value;
	static_assert(!FUSED || (LD == 4 && !MK && !CLU), "the fused Q/K/V GEMV runs with the ring kernel only");
	// (the ring's kernel: one query of 128)
	__shared__ __align__(16) float qs[LD == 4 ? 128 : ATT2_MAXG * 256];
	__shared__ float sm[ATT3_WARPS], sl[ATT3_WARPS];
	__shared__ __align__(16) float sacc[ATT3_WARPS][MAXD2 * 64];
	const int G = n_head / n_kv, S = ATT3_WARPS / G;
	const int n = min(*pos + 1, max_ctx);
	const int chunk = att2_chunk(n, nsplit, G);
	const int start = s * chunk;
	const int ns = (n + chunk - 1) / chunk;
	// CLU (launched in clusters of the grid's consecutive splits): a context of
	// 2..cluster-size splits is merged in the first cluster of each kv head,
	// whose blocks past the context still take part in its two barriers
	const int csize = CLU ? (int)cooperative_groups::this_cluster().num_blocks() : 1;
	const bool cmerge = CLU && ns > 1 && ns <= csize;
	// more splits than a cluster: each cluster merges its splits into a group
	// partial (level 1), and one block combines the groups (level 2)
	const bool cgroup = CLU == 2 && ns > csize;
	const int ci = s / csize, ng = att2_ngroups(nsplit), nact = att2_ngroups(ns);
	float *gpart = part + (size_t)n_head * nsplit * (hd + 2);
	if (start >= n) {
		if constexpr (FUSED) mid(0);
		if ((cmerge && s < csize) || (cgroup && ci * csize < ns)) {
			cooperative_groups::this_cluster().sync();
			cooperative_groups::this_cluster().sync();
		}
		return;
	}
	const int end = min(n, start + chunk);
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int g = warp % G, stripe = warp / G;
	const float scale = rsqrtf((float)hd);
	const __half *kb = kc + (size_t)kvh * max_ctx * hd, *vb = vc + (size_t)kvh * max_ctx * hd;
	const float *qg = qs + g * hd;
	// the group's queries, pre-scaled, into qs (every thread of the block)
	auto load_q = [&]() {
		for (int i = threadIdx.x; i < G * hd; i += blockDim.x)
			qs[i] = (FUSED ? __ldcg(q + kvh * G * hd + i) : ldx1<MK>(q, kvh * G * hd + i)) * scale;
	};
	// Every load of an iteration goes out before any is used: the key row of
	// each lane (KR uint4 registers, the rest of a row past 128 dimensions
	// is read in the dot loop) and the V rows of the first KB keys. The loop
	// before read the key row four uint4 at a time and V after the scores,
	// eight keys per batch: 6 dependent L2 round trips per 32 keys at
	// TinyLlama's head size, 8 at 7B's; now 1 and 4. A/B with the two-step
	// combine: TinyLlama Q8_0 decode 938 / 783 tok/s at 128 / 4k tokens of
	// context instead of 874 / 716; 7B Q4_K_M unchanged.
	constexpr int KR = MAXD2 <= 2 ? MAXD2 * 8 : 16;
	constexpr int KB = MAXD2 == 1 ? ATT_KB1 : MAXD2 == 2 ? ATT_KB2 : 4;
	static_assert(!STG || MAXD2 <= 2, "staged keys are held in registers whole (head_dim <= 128)");
	static_assert(!STG || !MK, "staged copies do not see K and V written by the same launch");
	const int nkr = min(hd / 8, KR);
	uint4 kr[KR];
	__half2 vr[KB][MAXD2];
	// STG: the block's keys of up to cap keys (whole batches of 32 per stripe)
	// staged in shared memory, K rows padded to an odd multiple of 16 bytes
	// (each lane reads its own key's row without bank conflicts); kbase is the
	// first staged key, rows past end hold key end - 1 (as the clamped loads
	// below)
	__shared__ __align__(16) __half kvs[STG ? att_stg_bytes(MAXD2) / 2 : 8];
	const int ldk = hd + 8;
	const int cap = STG ? att_stg_bytes(MAXD2) / ((ldk + hd) * 2) / (32 * S) * (32 * S) : 0;
	const __half *Ks = kvs, *Vs = kvs + cap * ldk;
	int kbase = 0;
	auto issue_k = [&](int k0) {
		const uint4 *kp = STG ? (const uint4 *)(Ks + (k0 + lane - kbase) * ldk)
		                      : (const uint4 *)(kb + (size_t)min(k0 + lane, end - 1) * hd);
#pragma unroll
		for (int i = 0; i < KR; i++)
			kr[i] = i >= nkr ? make_uint4(0u, 0u, 0u, 0u) : STG ? kp[i] : ldkv<MK>(kp + i);
	};
	auto issue_v = [&](int kfirst) {
#pragma unroll
		for (int u = 0; u < KB; u++) {
			const __half2 *vp = STG ? (const __half2 *)(Vs + (kfirst + u - kbase) * hd)
			                        : (const __half2 *)(vb + (size_t)min(kfirst + u, end - 1) * hd);
#pragma unroll
			for (int i = 0; i < MAXD2; i++)
				vr[u][i] = 2 * lane + 64 * i >= hd ? __float2half2_rn(0.f)
				           : STG                   ? vp[lane + 32 * i]
				                                   : ldkv<MK>(vp + lane + 32 * i);
		}
	};

	float m = -INFINITY, l = 0.f;
	// ATT_LD8: head_dim 128 unstaged, eight lanes per key (acc in a4)
	static_assert(LD == 0 || ((LD == 1 || LD == 2 || LD == 4) && MAXD2 == 2 && !STG && !MK) ||
	                  (LD == 3 && MAXD2 == 1 && !STG && !MK),
	              "LD8, ring: head_dim 128, unstaged; MMA: head_dim 64, its own staging");
	// (the ring's accumulators are in ATT_LD8's form, a4)
	const bool ld8 = LD == 1 || LD == 2 || LD == 4 || (MK && MAXD2 == 2 && !STG && att2_ld8(G, hd));
	// LD 4 (ATT_RING): the ring; the persistent step takes its arithmetic past ring_after
	const bool ring = LD == 4 || (MK && MAXD2 == 2 && !STG && att2_ring(G, hd) && n > ring_after);
	// LD 3 (ATT_MMA): the tensor-core loop; the persistent step picks it at run time
	const bool mma = LD == 3 || (MK && MAXD2 == 1 && att2_mma(G, hd));
	float4 a4 = make_float4(0.f, 0.f, 0.f, 0.f);
	float2 acc[MAXD2];
#pragma unroll
	for (int i = 0; i < MAXD2; i++) acc[i] = make_float2(0.f, 0.f);
	// 32 keys from k0 (the key rows in kr, the first KB V rows in vr)
	auto keys32 = [&](int k0) {
		const int key = k0 + lane;
		const bool ok = key < end;
		float dsum = 0.f;
#pragma unroll
		for (int i = 0; i < KR; i++) {
			if (i < nkr) {
				const __half2 *k2 = (const __half2 *)&kr[i];
				const float2 f0 = __half22float2(k2[0]), f1 = __half22float2(k2[1]), f2 = __half22float2(k2[2]),
				             f3 = __half22float2(k2[3]);
				const float4 q0 = *(const float4 *)(qg + 8 * i), q1 = *(const float4 *)(qg + 8 * i + 4);
				dsum += q0.x * f0.x + q0.y * f0.y + q0.z * f1.x + q0.w * f1.y + q1.x * f2.x + q1.y * f2.y +
				        q1.z * f3.x + q1.w * f3.y;
			}
		}
		if (8 * KR < hd) {  // rows longer than the registers hold
			float rest[1];
			qk_dots<1>(qg + 8 * KR, 1, hd - 8 * KR, kb + (size_t)min(key, end - 1) * hd + 8 * KR, rest);
			dsum += rest[0];
		}
		const float sc = ok ? dsum : -INFINITY;
		const float mn = fmaxf(m, warp_max(sc));  // finite: key k0 is valid
		const float corr = __expf(m - mn);
		const float p = ok ? __expf(sc - mn) : 0.f;
		l = l * corr + warp_sum(p);
#pragma unroll
		for (int i = 0; i < MAXD2; i++) {
			acc[i].x *= corr;
			acc[i].y *= corr;
		}
		m = mn;
		const int nk = min(32, end - k0);
		for (int j0 = 0; j0 < nk; j0 += KB) {
			if (j0 > 0) issue_v(k0 + j0);
#pragma unroll
			for (int u = 0; u < KB; u++) {
				const float pj = __shfl_sync(0xffffffffu, p, (j0 + u) & 31);  // 0 past nk
#pragma unroll
				for (int i = 0; i < MAXD2; i++) {
					const float2 v = __half22float2(vr[u][i]);
					acc[i].x += pj * v.x;
					acc[i].y += pj * v.y;
				}
			}
		}
	};
	constexpr bool MMA_CODE = LD == 3 || (MK && MAXD2 == 1);  // instantiations that may run it
	constexpr bool RING_CODE = LD == 4 || (MK && MAXD2 == 2 && !STG);  // and the ring
	if (MMA_CODE && mma) {
		if constexpr (MMA_CODE) {
			// ATT_MMA: the block's 16-key tiles, tile i to warp i % 8 (the same tiles
			// in the kernel and the persistent step), then the warps' merge into slot
			// gg of head gg (the other stripes' slots empty)
			static_assert(ATT3_WARPS == 8, "ATT_MMA: 8 warps (the merge tree, qs as its buffer)");
			__shared__ float bm[ATT3_WARPS / 2][ATT2_MAXG], bl[ATT3_WARPS / 2][ATT2_MAXG];
			const int r = lane >> 2, t4 = lane & 3;
			float o[8][4];
#pragma unroll
			for (int dn = 0; dn < 8; dn++) o[dn][0] = o[dn][1] = o[dn][2] = o[dn][3] = 0.f;
			uint32_t qh[4][2], ql[4][2];
			if constexpr (LD == 3) {
				// staged rows of 64 + 8 halves (conflict-free ldmatrix), up to capm keys
				// at a time; rows past end hold key end - 1 (finite: p = 0 there)
				// (in dynamic shared memory: ctx->att_thin or ATT_MMA_FAT keys, the launch's choice)
				constexpr int LDS = 72;
				extern __shared__ __align__(16) unsigned char att_dsm[];
				uint32_t dsz;
				asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dsz));
				const int capm = (int)(dsz / ATT_MMA_KEYB) / 16 * 16;
				if (capm < 16) __trap();  // launched without its staging
				__half *Ks = (__half *)att_dsm, *Vs = Ks + capm * LDS;
				auto tiles = [&](int k0b, int nst, const __half *Kb, const __half *Vb) {
					const int t0 = (k0b - start) >> 4;  // the round's first tile
					for (int ti = (warp - t0 % ATT3_WARPS + ATT3_WARPS) % ATT3_WARPS; 16 * ti < nst; ti += ATT3_WARPS) {
						const __half *kt0 = Kb + 16 * ti * LDS, *vt0 = Vb + 16 * ti * LDS;
						auto kfr = [&](int kk, uint32_t(&b)[4]) {
							const __half *p = kt0 + ((lane & 7) + (lane >> 4) * 8) * LDS + 16 * kk + ((lane >> 3) & 1) * 8;
							ldsm_x4((uint32_t)__cvta_generic_to_shared(p), b[0], b[1], b[2], b[3]);
						};
						auto vfr = [&](int dn, uint32_t(&b)[4]) {
							const int mi = lane >> 3;
							const __half *p = vt0 + ((mi & 1) * 8 + (lane & 7)) * LDS + (dn + (mi >> 1)) * 8;
							ldsm_x4_t((uint32_t)__cvta_generic_to_shared(p), b[0], b[1], b[2], b[3]);
						};
						attm_tile(qh, ql, k0b + 16 * ti, end, lane, m, l, o, kfr, vfr);
					}
				};
				// the copies of keys k0b.. (nst rows) into Kd, Vd as one cp.async group
				auto stage = [&](int k0b, int nst, __half *Kd, __half *Vd) {
					for (int idx = threadIdx.x; idx < nst * 8; idx += blockDim.x) {
						const int rr = idx >> 3, c = idx & 7;
						const size_t src = (size_t)min(k0b + rr, end - 1) * 64 + 8 * c;
						mm2_cp16((uint32_t)__cvta_generic_to_shared(Kd + rr * LDS + 8 * c), kb + src, 16);
						mm2_cp16((uint32_t)__cvta_generic_to_shared(Vd + rr * LDS + 8 * c), vb + src, 16);
					}
					mm2_commit();
				};
				// ATT_MMA_THIN2's staging (the long contexts' splits) in two stages of
				// half of it, the next stage's copies in flight while this one's tiles
				// are computed; else rounds of all of it, each round's copies before
				// its tiles. The tiles go to the warps in the same order either way.
#if ATT_MMA_PIPE
				const bool pipe = capm >= ATT_MMA_THIN2 && capm < ATT_MMA_FAT;
#else
				constexpr bool pipe = false;
#endif
				if (pipe) {
					const int hk = capm / 32 * 16;
					auto nst = [&](int k0b) { return min(hk, (end - k0b + 15) & ~15); };
					if (start < end) {
						stage(start, nst(start), Ks, Vs);
						load_q();
					}
					int b = 0;
					for (int k0b = start; k0b < end; k0b += hk, b ^= 1) {
						if (k0b + hk < end) {
							stage(k0b + hk, nst(k0b + hk), Ks + (b ^ 1) * hk * LDS, Vs + (b ^ 1) * hk * LDS);
							mm2_wait<1>();
						} else {
							mm2_wait<0>();
						}
						__syncthreads();
						if (k0b == start) attm_qfrags(qs, G, lane, qh, ql);
						tiles(k0b, nst(k0b), Ks + b * hk * LDS, Vs + b * hk * LDS);
						__syncthreads();  // every warp is done with stage b before it is refilled
					}
				} else {
					for (int k0b = start; k0b < end; k0b += capm) {
						if (k0b != start) __syncthreads();  // every warp is done with the last staging
						const int nst = min(capm, (end - k0b + 15) & ~15);
						stage(k0b, nst, Ks, Vs);
						if (k0b == start) load_q();
						mm2_wait<0>();
						__syncthreads();
						if (k0b == start) attm_qfrags(qs, G, lane, qh, ql);
						tiles(k0b, nst, Ks, Vs);
					}
				}
			} else {
				// the persistent step: the same fragments from global memory (plain
				// loads: this launch wrote the step's K and V rows), keys clamped to
				// end - 1 as the staged rows
				load_q();
				__syncthreads();
				attm_qfrags(qs, G, lane, qh, ql);
				const unsigned short *kh = (const unsigned short *)kb, *vh = (const unsigned short *)vb;
				for (int kt = start + 16 * warp; kt < end; kt += 16 * ATT3_WARPS) {
					const size_t k0 = (size_t)min(kt + r, end - 1) * 64, k1 = (size_t)min(kt + 8 + r, end - 1) * 64;
					auto kfr = [&](int kk, uint32_t(&b)[4]) {
						const int d = 16 * kk + 2 * t4;
						b[0] = *(const uint32_t *)(kh + k0 + d);
						b[1] = *(const uint32_t *)(kh + k0 + d + 8);
						b[2] = *(const uint32_t *)(kh + k1 + d);
						b[3] = *(const uint32_t *)(kh + k1 + d + 8);
					};
					auto vfr = [&](int dn, uint32_t(&b)[4]) {
#pragma unroll
						for (int i = 0; i < 4; i++) {  // keys kt + 8 (i % 2) + 2 t4 (+1), dimension 8 (dn + i / 2) + r
							const int key = kt + 8 * (i & 1) + 2 * t4, d = 8 * (dn + (i >> 1)) + r;
							const uint32_t lo = vh[(size_t)min(key, end - 1) * 64 + d];
							const uint32_t hi = vh[(size_t)min(key + 1, end - 1) * 64 + d];
							b[i] = lo | hi << 16;
						}
					};
					attm_tile(qh, ql, kt, end, lane, m, l, o, kfr, vfr);
				}
			}
			l = __fadd_rn(l, __shfl_xor_sync(0xffffffffu, l, 1));
			l = __fadd_rn(l, __shfl_xor_sync(0xffffffffu, l, 2));
			__syncthreads();  // qs (the merge's buffer) read by every warp
			attm_merge(warp, lane, m, l, o, qs, bm, bl);
			if (warp == 0 && r < G) {
				if (t4 == 0) {
					sm[r] = m;
					sl[r] = l;
				}
#pragma unroll
				for (int dn = 0; dn < 8; dn++) {
					sacc[r][8 * dn + 2 * t4] = o[dn][0];
					sacc[r][8 * dn + 2 * t4 + 1] = o[dn][1];
				}
			}
			if (threadIdx.x >= G && threadIdx.x < ATT3_WARPS) sm[threadIdx.x] = -INFINITY;
		}
	} else if (RING_CODE && ring) {
		if constexpr (RING_CODE) {
			// ATT_RING: stage st holds keys start + RK st.. (K rows, then V rows, 256
			// bytes each; rows past end unset with bulk copies, key end - 1's with
			// cp.async); warp w takes its keys 4 J w..4 J w + 4 J - 1 of each stage
			// (the persistent step: the same keys from global memory)
			constexpr int RK = ATT_RING_KEYS, J = RK / (4 * ATT3_WARPS);
			const int t = lane & 7, kq = lane >> 3;
			float qv[16];
			auto ldq = [&]() {
#pragma unroll
				for (int i = 0; i < 8; i++) {
					qv[i] = qs[8 * t + i];
					qv[8 + i] = qs[64 + 8 * t + i];
				}
			};
			if constexpr (LD == 4) {
				extern __shared__ __align__(16) unsigned char att_dsm[];
				__half *R = (__half *)att_dsm;
				const int nst = (end - start + RK - 1) / RK;
				__shared__ __align__(8) uint64_t rbar[ATT_RING_ST];  // ATT_RING_TMA: stage slot i's copies landed
				if constexpr (ATT_RING_TMA) {
					if (threadIdx.x == 0) {
#pragma unroll 1
						for (int i = 0; i < ATT_RING_ST; i++) mbar_init(&rbar[i], 1);
						mbar_fence_init();
					}
					__syncthreads();
				}
				auto issue = [&](int st) {
					if constexpr (ATT_RING_TMA) {
						// the stage's valid rows only (rows past end are masked and, for V, read as zeros)
						if (threadIdx.x == 0 && st < nst) {
							const int slot = st % ATT_RING_ST, k0 = start + st * RK;
							__half *Kd = R + (size_t)slot * 2 * RK * 128;
							const uint32_t bytes = (uint32_t)min(RK, end - k0) * 256;
							fence_proxy_async();  // the slot's earlier reads (generic proxy) before the copy's writes
							mbar_expect_tx(&rbar[slot], 2 * bytes);
							bulk_g2s(Kd, kb + (size_t)k0 * 128, bytes, &rbar[slot]);
							bulk_g2s(Kd + RK * 128, vb + (size_t)k0 * 128, bytes, &rbar[slot]);
						}
					} else if (st < nst) {
						__half *Kd = R + (size_t)(st % ATT_RING_ST) * 2 * RK * 128, *Vd = Kd + RK * 128;
						const int k0 = start + st * RK;
						for (int idx = threadIdx.x; idx < RK * 16; idx += blockDim.x) {
							const int rr = idx >> 4, c = idx & 15;
							const size_t src = (size_t)min(k0 + rr, end - 1) * 128 + 8 * c;
							mm2_cp16(smem_u32(Kd + rr * 128 + 8 * c), kb + src, 16);
							mm2_cp16(smem_u32(Vd + rr * 128 + 8 * c), vb + src, 16);
						}
					}
					if (!ATT_RING_TMA) mm2_commit();  // (empty past the last stage: one group per stage)
				};
				// ATT_RING_PDL (launched with programmatic dependent launch): the
				// first stages go out before the wait unless they hold key n - 1,
				// the one row the predecessor (the Q/K/V GEMV's KV store) writes;
				// the other rows and *pos are older than the step
				int pre = 0;
				if (ATT_RING_PDL || FUSED) {
					mid(0);
					while (pre < ATT_RING_ST - 1 && !(end == n && pre == nst - 1)) issue(pre++);
					mid(1);
				}
#pragma unroll 1
				for (int st = pre; st < ATT_RING_ST - 1; st++) issue(st);
				load_q();
#pragma unroll 1
				for (int st = 0; st < nst; st++) {
					if constexpr (ATT_RING_TMA) mbar_wait(&rbar[st % ATT_RING_ST], (st / ATT_RING_ST) & 1);
					else mm2_wait<ATT_RING_ST - 2>();  // this thread's copies of stage st
					__syncthreads();  // everyone's; and every warp is done with stage st - 1's slot
					if (st == 0) ldq();
					issue(st + ATT_RING_ST - 1);
					const int base = start + st * RK + 4 * J * warp;
					if (base < end) {
						const __half *Kd = R + (size_t)(st % ATT_RING_ST) * 2 * RK * 128 + 4 * J * warp * 128,
						             *Vd = Kd + RK * 128;
						rg_keys<J>(
						    qv, base, end, lane, m, l, a4,
						    [&](int j, int i) { return *(const uint4 *)(Kd + (4 * j + kq) * 128 + 64 * i + 8 * t); },
						    [&](int u) { return *(const uint2 *)(Vd + u * 128 + 4 * lane); });
					}
				}
			} else {
				load_q();
				__syncthreads();
				ldq();
				for (int k0 = start; k0 < end; k0 += RK) {
					const int base = k0 + 4 * J * warp;
					if (base < end)
						rg_keys<J>(
						    qv, base, end, lane, m, l, a4,
						    [&](int j, int i) {
							    return *(const uint4 *)(kb + (size_t)min(base + 4 * j + kq, end - 1) * 128 + 64 * i + 8 * t);
						    },
						    [&](int u) { return *(const uint2 *)(vb + (size_t)min(base + u, end - 1) * 128 + 4 * lane); });
				}
			}
		}
	} else if (STG) {
		// up to cap keys at a time (batches of 32 S keys): every thread copies
		// 16-byte pieces of K and V rows (coalesced), then each warp reads its
		// stripe of each batch from shared memory
		const int c8 = hd / 8;
		for (int k0b = start; k0b < end; k0b += cap) {
			if (k0b != start) __syncthreads();  // every warp is done with the last staging
			const int nst = min(cap, (end - k0b + 32 * S - 1) / (32 * S) * (32 * S));  // whole batches
			for (int idx = threadIdx.x; idx < nst * c8; idx += blockDim.x) {
				const int r = idx / c8, c = idx - r * c8;
				const size_t src = (size_t)min(k0b + r, end - 1) * hd + 8 * c;
				if (ATT_STG_ASYNC) {
					mm2_cp16((uint32_t)__cvta_generic_to_shared(kvs + r * ldk + 8 * c), kb + src, 16);
					mm2_cp16((uint32_t)__cvta_generic_to_shared(kvs + cap * ldk + r * hd + 8 * c), vb + src, 16);
				} else {
					*(uint4 *)(kvs + r * ldk + 8 * c) = __ldg((const uint4 *)(kb + src));
					*(uint4 *)(kvs + cap * ldk + r * hd + 8 * c) = __ldg((const uint4 *)(vb + src));
				}
			}
			if (ATT_STG_ASYNC) mm2_commit();
			if (k0b == start)
				load_q();
			if (ATT_STG_ASYNC) mm2_wait<0>();
			__syncthreads();
			kbase = k0b;
			for (int k0s = k0b; k0s < k0b + nst; k0s += 32 * S) {
				const int k0 = k0s + stripe * 32;
				if (stripe < S && k0 < end) {
					issue_k(k0);
					issue_v(k0);
					keys32(k0);
				}
			}
		}
	} else if (ld8) {
		// eight lanes per key (ATT_LD8): lane t of key group kq holds dimensions
		// 8t..8t+7 and 64+8t..64+8t+7 of keys k0 + 4j + kq, j < 8
		const int t = lane & 7, kq = lane >> 3;
		uint4 k8[8][2];
		auto issue_k8 = [&](int k0) {
			// one base address, row j at a constant offset (clamped row addresses
			// took two registers each); keys past end read as zeros (masked)
			const uint4 *kp = (const uint4 *)(kb + (size_t)(k0 + kq) * 128) + t;
			const int nk = end - k0 - kq;
#pragma unroll
			for (int j = 0; j < 8; j++) {
				const bool in = 4 * j < nk;
				k8[j][0] = in ? ldkv<MK>(kp + 64 * j) : make_uint4(0u, 0u, 0u, 0u);
				k8[j][1] = in ? ldkv<MK>(kp + 64 * j + 8) : make_uint4(0u, 0u, 0u, 0u);
			}
		};
		// LD 2 (ATT_LD8_1SM): all 32 V rows of the batch with its keys
		uint2 vw[LD == 2 ? 32 : 1];
		auto issue_vw = [&](int k0) { ld8_ldv<LD == 2 ? 32 : 1, MK>(vb, k0, 0, end - k0, lane, vw); };
		const int kfirst = stripe < S ? start + stripe * 32 : end;
		if (kfirst < end) {
			issue_k8(kfirst);
			if constexpr (LD == 2) issue_vw(kfirst);
		}
		load_q();
		__syncthreads();
		for (int k0 = kfirst; k0 < end; k0 += S * 32) {
			if (k0 != kfirst) {
				issue_k8(k0);
				if constexpr (LD == 2) issue_vw(k0);
			}
			float pd[8];
			ld8_dots(k8, qg, t, pd);
			if constexpr (LD == 2) {
				const float p = ld8_softmax(pd, k0, end, lane, m, l, a4);
				ld8_pv(p, vw, 0, a4);
				continue;
			}
			// the batch's V rows, ATT_LD8_VR per round (lane: dimensions 4 lane..
			// 4 lane+3), rows past end as zeros (times p = 0). The loads depend on
			// every partial dot, so that ptxas does not hoist them above the dots
			// and hold K and V at once: with a NaN among the dots none is loaded,
			// and the output is NaN either way.
			const float chk = ((pd[0] + pd[1]) + (pd[2] + pd[3])) + ((pd[4] + pd[5]) + (pd[6] + pd[7]));
			const int nv = chk == chk ? end - k0 : 0;
			uint2 v8[ATT_LD8_VR];
			ld8_ldv<ATT_LD8_VR, MK>(vb, k0, 0, nv, lane, v8);
			const float p = ld8_softmax(pd, k0, end, lane, m, l, a4);
			ld8_pv(p, v8, 0, a4);
			if constexpr (ATT_LD8_VR < 32) {
				// the second round depends on the first one's sums (a NaN there
				// skips it: the output is NaN either way)
				const int nv2 = a4.x == a4.x ? nv : 0;
				ld8_ldv<ATT_LD8_VR, MK>(vb, k0, ATT_LD8_VR, nv2, lane, v8);
				ld8_pv(p, v8, ATT_LD8_VR, a4);
			}
		}
	} else {
		// stripe >= S: an idle warp (G does not divide the warps); k0 starts past end
		const int kfirst = stripe < S ? start + stripe * 32 : end;
		if (kfirst < end) {
			issue_k(kfirst);
			issue_v(kfirst);
		}
		load_q();
		__syncthreads();
		for (int k0 = kfirst; k0 < end; k0 += S * 32) {
			if (k0 != kfirst) {
				issue_k(k0);
				issue_v(k0);
			}
			keys32(k0);
		}
	}
	TRACE_ATT(tr_att1);
	if constexpr (LD == 4)
		if (ATT2_TRIGGER && ATT_RING_TRIGGER == 1) pdl_trigger();
	// merge the stripes of each head
	if (!(MMA_CODE && mma)) {
		if (lane == 0) {
			sm[warp] = m;
			sl[warp] = l;
		}
		if (ld8) {
			*(float4 *)&sacc[warp][4 * lane] = a4;
		} else {
#pragma unroll
			for (int i = 0; i < MAXD2; i++) {
				sacc[warp][2 * lane + 64 * i] = acc[i].x;
				sacc[warp][2 * lane + 64 * i + 1] = acc[i].y;
			}
		}
	}
	__syncthreads();
	// one split (a context of at most chunk keys): the block's merge is the
	// output, with no partials and no combine
	__shared__ float cm[ATT2_MAXG], cL[ATT2_MAXG], cf8[ATT2_MAXG * ATT_CLN], cL8[ATT2_MAXG], cM8[ATT2_MAXG];
	if constexpr (LD == 4 && CLU == 0 && ATT_RING_MU) {
		// ATT_RING_MU: the loop below for the ring kernel (G = 1, head_dim 128,
		// one stripe per warp), unrolled
		if (threadIdx.x < 128) {
			const int d = threadIdx.x;
			float mw[ATT3_WARPS], lw[ATT3_WARPS], vw[ATT3_WARPS];
#pragma unroll
			for (int t = 0; t < ATT3_WARPS; t++) {
				mw[t] = sm[t];
				lw[t] = sl[t];
				vw[t] = sacc[t][d];
			}
			float M = -INFINITY;
#pragma unroll
			for (int t = 0; t < ATT3_WARPS; t++) M = fmaxf(M, mw[t]);
			float a = 0.f, L = 0.f;
#pragma unroll
			for (int t = 0; t < ATT3_WARPS; t++) {
				if (mw[t] != -INFINITY) {
					const float f = __expf(mw[t] - M);
					a += vw[t] * f;
					L += lw[t] * f;
				}
			}
			if (ns == 1) {
				out[(size_t)kvh * 128 + d] = a / L;
			} else {
				float *o = part + ((size_t)kvh * nsplit + s) * (128 + 2);
				o[2 + d] = a;
				if (d == 0) {
					o[0] = M;
					o[1] = L;
				}
			}
		}
	} else
	for (int idx = threadIdx.x; idx < G * hd; idx += blockDim.x) {
		const int gg = idx / hd, d = idx - gg * hd;
		float M = -INFINITY;
		for (int t = 0; t < S; t++) M = fmaxf(M, sm[t * G + gg]);
		float a = 0.f, L = 0.f;
		for (int t = 0; t < S; t++) {
			const int w = t * G + gg;
			if (sm[w] != -INFINITY) {
				const float f = __expf(sm[w] - M);
				a += sacc[w][d] * f;
				L += sl[w] * f;
			}
		}
		if (ns == 1) {
			out[(size_t)(kvh * G + gg) * hd + d] = a / L;
			continue;
		}
		if (cmerge || cgroup) {  // for the cluster: qs is free once every warp is past its keys
			qs[idx] = a;
			if (d == 0) {
				cm[gg] = M;
				cL[gg] = L;
			}
			continue;
		}
		float *o = part + ((size_t)(kvh * G + gg) * nsplit + s) * (hd + 2);
		o[2 + d] = a;
		if (d == 0) {
			o[0] = M;
			o[1] = L;
		}
	}
	TRACE_ATT(tr_att2);
	if (ns == 1) return;
	if (cmerge) {
		// the ns splits' merges from the blocks' shared memory, in att2_combine's
		// arithmetic and order (the persistent kernel's results, bit for bit):
		// A) per head, the maximum and the factor of each split (lane j: split
		// j), the sum by butterfly; B) this block's share of the outputs
		namespace cg = cooperative_groups;
		cg::cluster_group cluster = cg::this_cluster();
		cluster.sync();
		TRACE_ATT(tr_att2);
		const int r = s;  // the first cluster: rank = split
		for (int gg = warp; gg < G; gg += ATT3_WARPS) {
			const float mj = lane < ns ? cluster.map_shared_rank(cm, lane)[gg] : -INFINITY;
			const float M = warp_max(mj);
			const float f = lane < ns ? __expf(mj - M) : 0.f;
			const float L = warp_sum(lane < ns ? cluster.map_shared_rank(cL, lane)[gg] * f : 0.f);
			if (lane < ns) cf8[gg * ATT_CLN + lane] = f;
			if (lane == 0) cL8[gg] = L;
		}
		__syncthreads();
		const int nout = G * hd, per = (nout + ns - 1) / ns;
		for (int idx = r * per + threadIdx.x; idx < min(nout, (r + 1) * per); idx += blockDim.x) {
			const int gg = idx / hd;
			float a = 0.f;
			for (int j = 0; j < ns; j++) a += cluster.map_shared_rank(qs, j)[idx] * cf8[gg * ATT_CLN + j];
			out[(size_t)kvh * G * hd + idx] = a / cL8[gg];
		}
		cluster.sync();  // the other blocks read this one's shared memory until here
		return;
	}
	if (cgroup) {
		// level 1: the cluster's cnt splits into group partial ci, each rank r < cnt
		// a share of the outputs; then rank 0 arrives at the counter
		cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
		cluster.sync();
		const int r = s - ci * csize, cnt = min(csize, ns - ci * csize);
		const int nout = G * hd, per = (nout + cnt - 1) / cnt;
		const Att2CluSrc src{cluster, qs, cm, cL};
		att2_level1(src, cnt, G, hd, min(nout, r * per), min(nout, (r + 1) * per),
		            gpart + ((size_t)kvh * G * ng + ci) * (hd + 2), (size_t)ng * (hd + 2), cf8, cM8, cL8);
		__threadfence();
		cluster.sync();  // peers' shared memory read, and every rank's share written
		if (r != 0) return;
	}
	TRACE_ATT(tr_att2);
	// the last block of this kv head to finish (of the groups' first blocks
	// with cgroup) combines the splits (the groups)
	const int narr = cgroup ? nact : ns;
	__shared__ int s_last;
	// ATT_ACQREL: the block's partial writes are ordered before thread 0's
	// arrival by the barrier, the arrival is a release (and, for the last
	// block, an acquire that the barrier after it extends to every thread)
	if (!ATT_ACQREL) __threadfence();
	__syncthreads();
	if (threadIdx.x == 0) {
		int done;
		if (ATT_ACQREL)
			asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], 1;" : "=r"(done) : "l"(&counter[kvh]) : "memory");
		else
			done = atomicAdd(&counter[kvh], 1);
		s_last = done == narr - 1;
		if (s_last) counter[kvh] = 0;
		if (FUSED && s_last) mflag[kvh] = 0;  // (every block of the kv head counted itself: see k_qkv_ring)
	}
	__syncthreads();
	if (!s_last) return;
	if constexpr (LD == 4)
		if (ATT2_TRIGGER && ATT_RING_TRIGGER == 2) pdl_trigger();
	if (!ATT_ACQREL) __threadfence();
	// the persistent step's two-level combine: level 1 of every group from the
	// partials here
	const bool pgroup = !CLU && two && ns > ATT_CLN;
	if (pgroup) {
		for (int k = 0; k < nact; k++) {
			const Att2GlbSrc src{part, G, hd, nsplit, kvh, k * ATT_CLN};
			att2_level1(src, min(ATT_CLN, ns - k * ATT_CLN), G, hd, 0, G * hd,
			            gpart + ((size_t)kvh * G * ng + k) * (hd + 2), (size_t)ng * (hd + 2), cf8, cM8, cL8);
			__syncthreads();
		}
	}
	// (one call: a second inlined copy of the combine made the kernel's code
	// larger and its short contexts slower)
	const bool grp = cgroup || pgroup;
	// (the ring's kernel: little static shared memory beside its ring, see ATT_RING)
	att2_combine<LD == 4 ? 64 : ATT_CF, LD == 4>(grp ? gpart : part, out, kvh, G, hd, grp ? ng : nsplit, grp ? nact : ns);
}

template <int MAXD2, bool STG, int CLU, int LD = 0>
__global__ void __launch_bounds__(ATT3_WARPS * 32, LD == 2 ? 1 : 2) k_attn3_split(const float *q, const __half *kc, const __half *vc,
                                                                 float *part, float *out, int *counter, int n_head,
                                                                 int n_kv, int hd, int max_ctx, int nsplit,
                                                                 const int32_t *pos) {
	TRACE_START();
#if SK_TRACE
	if (threadIdx.x == 0) tr_att1 = tr_att2 = tr_k0;
#endif
	if (ATT2_TRIGGER && LD != 4) pdl_trigger();  // (the ring: ATT_RING_TRIGGER)
	att3_item<MAXD2, false, STG, CLU, LD>(q, kc, vc, part, out, counter, n_head, n_kv, hd, max_ctx, nsplit, pos,
	                                      blockIdx.x, blockIdx.y, CLU == 2);
#if SK_TRACE
	trace_rec(tr_g0, tr_k0, tr_att1, tr_att2, 1000, gridDim.x * gridDim.y, blockIdx.y * gridDim.x + blockIdx.x, hd,
	          n_head);
#endif
}

// k_qkv_ring (QA_FUSE 1; measured slower, so compiled out by default): a
// layer's Q/K/V GEMV and its long-context decode attention (the ring
// kernel, LD 4) in one launch, each kv head's query, key and value rows
// computed by the blocks that then attend over its keys (Llama-2-7B: 32 kv
// heads of 128, one query head each; the 8 splits of a head are the 8
// blocks whose warps hold its 3 x 128 rows in k_gemv2's order). Block b
// (kv head b / nsplit, split b % nsplit) runs k_gemv2's body for virtual
// block b of gridDim.x (the same sums and epilogue: RoPE, q, the KV store),
// counts itself done on flag[kv head] (a release), issues its split's first
// ring stages, waits for the head's other blocks (an acquire; the whole grid
// is resident at once, which qkv_ring_launch checks) and attends as the
// ring kernel does; the combining block of a head zeroes its flag. The
// GEMV's shared memory is the ring's last stage slot, free until the keys
// start. The aim: no launch boundary between the two, and a head's keys
// start when its own 8 blocks are done, not the whole grid.
// Measured on the H200 (session 28, as built here, 7B Q8_0 decode tok/s at
// 128 / 4k, 3 runs, two rounds, against the landed kernels in the same
// machine start): 417.7 / 304.2 and 418.2 / 304.0 against 418.8 / 356.1 and
// 415.7 / 355.5; on an H100 with the ring's first stages issued before the
// GEMV, 328.7 / 238.9 and 328.8 / 237.1 against 329.2 / 271.5 and 328.9 /
// 271.2 (the context below 1,025 tokens runs none of it). The
// sums are the same bit for bit (TestDecodePersistent's ring case runs it,
// and passed; compute-sanitizer memcheck of that case: 0 errors). Session
// 29: a ring of 2 stages (-DQA_FUSE=1 -DATT_RING_ST=2, 2 x (64 + 5) KB per
// SM instead of 2 x (96 + 5)) still lost on an H100, 328.8 / 243.9 and
// 328.8 / 244.0 against 329.4 / 271.8 and 329.6 / 272.2 (TestDecodePersistent
// passed). Its trace on an H200 (SK_TRACE=1 at 4k) puts the cause in the
// GEMV phase: 26.9 us per layer from the launch to the blocks' GEMV ends
// (median body 18.0 us) against 15.9 for k_gemv2's launch (session 20's
// trace), while the attention after it (24.8-26.6 us to the O GEMV's start)
// takes about what the ring kernel does (22.9). The GEMV's blocks run slower
// beside the ring's shared memory. The likely reason (not measured
// directly): L1, what is left of the 228 KB, holds the loads in flight, and
// 16 warps per SM each keep an item of about 4 KB of weights in flight.
// A ring small enough to leave that (2 x 16 KB) was 3.2 us slower alone
// (ATT_RING_KEYS), more than the launch boundary the fusion saves.
#ifndef QA_FUSE
#define QA_FUSE 0
#endif
#if QA_FUSE
template <int T, int P>
__global__ void __launch_bounds__(ATT3_WARPS * 32, 2)
    k_qkv_ring(Mats ms, const float *__restrict__ x, const float *__restrict__ normw, float eps, int need_q, int need_f,
               EpiDev e, const float *q, const __half *kc, const __half *vc, float *part, float *out, int *counter,
               int *flag, int n_head, int n_kv, int hd, int max_ctx, int nsplit, const int32_t *pos) {
	static_assert(G2_WARPS == ATT3_WARPS, "one block size for both");
	extern __shared__ __align__(16) unsigned char att_dsm[];
	const int kvh = blockIdx.x / nsplit;
	auto mid = [&](int ph) {
		if (ph == 0) {
			g2_body<T, false, P, G2_WARPS, G2_IO_NOTRIG>(ms, x, normw, eps, need_q, need_f, 0, e,
			                                             att_dsm + (ATT_RING_ST - 1) * ATT_RING_KEYS * 512,
			                                             blockIdx.x, gridDim.x);
			__syncthreads();  // the block's rows stored (the release below carries them)
			if (threadIdx.x == 0)
				asm volatile("red.release.gpu.global.add.s32 [%0], 1;" ::"l"(flag + kvh) : "memory");
			return;
		}
		if (threadIdx.x == 0) {
			int v;
			for (long spin = 0;; spin++) {
				asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(flag + kvh) : "memory");
				if (v >= nsplit) break;
				if (spin > (1l << 25)) __trap();  // (seconds: a block of the head never ran)
			}
#if ATT_RING_TMA
			// the K/V rows the other blocks stored, before the bulk copies read them
			asm volatile("fence.proxy.async.global;" ::: "memory");
#endif
		}
		__syncthreads();
	};
	att3_item<2, false, false, 0, 4>(q, kc, vc, part, out, counter, n_head, n_kv, hd, max_ctx, nsplit, pos, kvh,
	                                 blockIdx.x % nsplit, false, 0x7fffffff, mid, flag);
}
#endif  // QA_FUSE

static bool att2_ok(int n_head, int n_kv, int hd) {
	return n_kv > 0 && n_head % n_kv == 0 && n_head / n_kv <= ATT2_MAXG && hd % 8 == 0 && hd <= 256 && hd > 0;
}

// scratch: partials of n_head x nsplit x (hd + 2) floats, the group partials
// of the two-level combine (n_head x att2_ngroups(nsplit) x (hd + 2)), then
// ATT2_INTS x n_kv ints: the counters, and in QA_FUSE builds k_qkv_ring's
// flags (zero between calls: the combining block resets its own)
constexpr int ATT2_INTS = QA_FUSE ? 2 : 1;
static size_t attn2_scratch_bytes(int n_head, int n_kv, int hd, int nsplit) {
	return (size_t)n_head * (nsplit + att2_ngroups(nsplit)) * (hd + 2) * sizeof(float) +
	       (size_t)ATT2_INTS * n_kv * sizeof(int);
}

// the counters' place in that scratch, after the partials
static int *attn2_counters(float *part, int n_head, int hd, int nsplit) {
	return (int *)(part + (size_t)n_head * (nsplit + att2_ngroups(nsplit)) * (hd + 2));
}

typedef void (*attn_fn)(const float *, const __half *, const __half *, float *, float *, int *, int, int, int, int, int,
                        const int32_t *);
// decode attention kernels: [CLU][head_dim <= 64 staged, <= 64, <= 128
// staged, <= 128, <= 256, 128 (ATT_LD8), 128 (ATT_LD8, one block per SM),
// 64 (ATT_MMA), 128 (ATT_RING)]
enum { ATT_COL_LD8 = 5, ATT_COL_LD8_1SM = 6, ATT_COL_MMA = 7, ATT_COL_RING = 8 };
#define ATT_KERN(C)                                                                                              \
	{k_attn3_split<1, true, C>, k_attn3_split<1, false, C>, k_attn3_split<2, true, C>, k_attn3_split<2, false, C>, \
	 k_attn3_split<4, false, C>, k_attn3_split<2, false, C, 1>, k_attn3_split<2, false, C, 2>,                      \
	 k_attn3_split<1, false, C, 3>, k_attn3_split<2, false, C, 4>}
static const attn_fn att_kern[3][9] = {ATT_KERN(0), ATT_KERN(1), ATT_KERN(2)};
// The column of att_kern that decode attention runs for G heads per kv head
// at head_dim hd; rcol: the ring kernel's shape and context, one: the
// one-block-per-SM kernel's (att2_ring_launch, att2_short_max)
static int att2_col(int G, int hd, bool rcol, bool one) {
	const int md = att2_md(hd);
	if (md == 1) return att2_mma(G, hd) ? ATT_COL_MMA : att2_stg(G, hd) ? 0 : 1;
	if (md == 2)
		return att2_stg(G, hd) ? 2 : rcol ? ATT_COL_RING : att2_ld8(G, hd) ? (one ? ATT_COL_LD8_1SM : ATT_COL_LD8) : 3;
	return 4;
}
#undef ATT_KERN

// The launch of a decode attention grid in clusters of csize consecutive
// splits of a kv head (cfg points at attr)
static void att_cluster_cfg(cudaLaunchConfig_t &cfg, cudaLaunchAttribute &attr, dim3 grid, int csize,
                            cudaStream_t s) {
	memset(&cfg, 0, sizeof cfg);
	memset(&attr, 0, sizeof attr);
	cfg.gridDim = grid;
	cfg.blockDim = dim3(ATT3_WARPS * 32);
	cfg.stream = s;
	attr.id = cudaLaunchAttributeClusterDimension;
	attr.val.clusterDim.x = 1;
	attr.val.clusterDim.y = csize;
	attr.val.clusterDim.z = 1;
	cfg.attrs = &attr;
	cfg.numAttrs = 1;
}

// How many clusters of ATT_CLN blocks of attention kernel k, with dyn bytes
// of dynamic shared memory each, the device places at once
// (cudaOccupancyMaxActiveClusters; 0 where it cannot say)
static int att_clusters_max(attn_fn k, size_t dyn) {
	cudaLaunchConfig_t cfg;
	cudaLaunchAttribute attr;
	att_cluster_cfg(cfg, attr, dim3(1, ATT_CLN), ATT_CLN, nullptr);
	cfg.dynamicSmemBytes = dyn;
	int n = 0;
	if (cudaOccupancyMaxActiveClusters(&n, k, &cfg) != cudaSuccess) {
		cudaGetLastError();  // not sticky: clear it for the context's later checks
		return 0;
	}
	return n;
}
// whether one cluster of ATT_CLN blocks of k, each with dyn bytes of dynamic
// shared memory, fits
static bool att_cluster_fits(attn_fn k, size_t dyn) { return att_clusters_max(k, dyn) >= 1; }
// The most clusters of ATT_CLN splits of the tensor-core decode attention
// (ATT_MMA) that the device places at once with thin keys of staging (the
// launches that take more than one cluster of splits): the fewer of the one-
// and two-level kernels' (asked once per context: ctx->att_mma_clu).
static int att_mma_clusters(int thin) {
	const size_t dyn = (size_t)thin * ATT_MMA_KEYB;
	return std::min(att_clusters_max(att_kern[1][ATT_COL_MMA], dyn), att_clusters_max(att_kern[2][ATT_COL_MMA], dyn));
}
// That count for decode attention with G heads per kv head at head_dim hd:
// ctx->att_mma_clu for the tensor-core kernels, 0 for the others (their
// splits are not capped: not measured).
static int att2_clu_max(const sk_ctx *ctx, int G, int hd) {
	return att2_col(G, hd, false, false) == ATT_COL_MMA ? ctx->att_mma_clu : 0;
}
// Whether a cluster of ATT_CLN blocks of every clustered attention kernel
// fits on one GPC of the current device (cudaOccupancyMaxActiveClusters >
// 0). Some devices and partitions (MIG, smaller GPCs) cannot place one; the
// context then runs the combine through L2 instead of failing the launch.
// (The one-block-per-SM and ring columns never run in clusters: att2_short_max,
// att2_ring_after.)
static bool att_clusters_fit() {
	for (int row = 1; row <= 2; row++)  // the clustered rows of att_kern
		for (int col = 0; col < (int)(sizeof att_kern[row] / sizeof att_kern[row][0]); col++) {
			if (col == ATT_COL_LD8_1SM || col == ATT_COL_RING) continue;
			if (!att_cluster_fits(att_kern[row][col], 0)) return false;
		}
	return true;
}

// Whether attention kernel k may take dyn bytes of dynamic shared memory
// beside its static shared memory within the device's opt-in limit: its
// limit raised to dyn (errors cleared: they are not sticky).
static bool att_dyn_smem(attn_fn k, size_t dyn, int optin) {
	cudaFuncAttributes fa;
	if (cudaFuncGetAttributes(&fa, k) != cudaSuccess || fa.sharedSizeBytes + dyn > (size_t)optin ||
	    cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dyn) != cudaSuccess) {
		cudaGetLastError();
		return false;
	}
	return true;
}

// Whether the tensor-core attention kernels may take ATT_MMA_FAT keys of
// staging (their static shared memory beside it within the device's opt-in
// limit; sm_120 has about 99 KB): their dynamic shared memory limit set.
static int att_fat_init(int optin) {
	if (ATT_MMA_FAT <= 0) return 0;
	const size_t dyn = (size_t)ATT_MMA_FAT * ATT_MMA_KEYB;
	for (int row = 0; row < 3; row++) {
		const attn_fn k = att_kern[row][ATT_COL_MMA];
		if (!att_dyn_smem(k, dyn, optin)) return 0;
		if (row == 0) continue;
		// the clustered kernels: a cluster of ATT_CLN fat blocks (one per SM) must
		// fit one GPC (as att_clusters_fit checks for the thin ones)
		if (!att_cluster_fits(k, dyn)) return 0;
	}
	return 1;
}

// The thin staging of the tensor-core attention kernels (their launches past
// the fat splits' contexts, and wherever fat staging does not fit): ATT_MMA_THIN2
// keys where ATT2_PER_SM blocks of it fit an SM (att2_nsplit's one wave) and,
// with clusters, a cluster of ATT_CLN of them fits one GPC; else ATT_MMA_THIN.
// fat: att_fat_init set a larger dynamic shared memory limit already.
static int att_thin_init(int optin, bool fat, bool clusters) {
	if (!ATT_MMA_PIPE || ATT_MMA_FAT <= ATT_MMA_THIN2) return ATT_MMA_THIN;
	const size_t dyn = (size_t)ATT_MMA_THIN2 * ATT_MMA_KEYB;
	for (int row = 0; row < 3; row++) {
		const attn_fn k = att_kern[row][ATT_COL_MMA];
		int nb = 0;
		if (!fat && !att_dyn_smem(k, dyn, optin)) return ATT_MMA_THIN;
		if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, k, ATT3_WARPS * 32, dyn) != cudaSuccess ||
		    nb < ATT2_PER_SM) {
			cudaGetLastError();
			return ATT_MMA_THIN;
		}
		if (row > 0 && clusters && !att_cluster_fits(k, dyn)) return ATT_MMA_THIN;
	}
	return ATT_MMA_THIN2;
}

// The decode kernels' cudaFuncAttributePreferredSharedMemoryCarveout:
// DEC_CARVE_KB as a percent of the device's shared memory per SM, which the
// driver rounds up to the next capacity the SM supports (so the percent is
// rounded down here); -1 where there is none (DEC_CARVE_KB = 0, or more than
// the SM has): the ring then takes the largest and the GEMVs the driver's.
static int dec_carve_pct(int device) {
	int smsm = 0;
	if (DEC_CARVE_KB <= 0) return -1;
	if (cudaDeviceGetAttribute(&smsm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device) != cudaSuccess || smsm <= 0) {
		cudaGetLastError();
		return -1;
	}
	if ((long)DEC_CARVE_KB * 1024 > smsm) return -1;
	return (int)((long)DEC_CARVE_KB * 1024 * 100 / smsm);
}

// DEC_CARVE_KB's carveout for every decode GEMV (the ring's is set in
// att_ring_init), carve from dec_carve_pct (-1: none set). A preference
// only: errors are cleared and ignored.
static void dec_carve_init(int carve) {
	if (carve < 0) return;
	for (gemv2_fn f : gemv2_kernels)
		if (cudaFuncSetAttribute(f, cudaFuncAttributePreferredSharedMemoryCarveout, carve) != cudaSuccess)
			cudaGetLastError();
}

// Whether the ring kernel (ATT_RING) may take its ATT_RING_BYTES of dynamic
// shared memory with ATT2_PER_SM blocks per SM (att2_nsplit's one wave): its
// limit set. Not on sm_120 (about 100 KB of shared memory per SM: one such
// block); the eight-lanes-per-key kernel runs instead. carve: its shared
// memory carveout (dec_carve_pct).
static int att_ring_init(int optin, int carve) {
	if (!ATT_RING) return 0;
	const attn_fn k = att_kern[0][ATT_COL_RING];
	int nb = 0;
	if (!att_dyn_smem(k, ATT_RING_BYTES, optin)) return 0;
	if (cudaFuncSetAttribute(k, cudaFuncAttributePreferredSharedMemoryCarveout,
	                         carve < 0 ? (int)cudaSharedmemCarveoutMaxShared : carve) != cudaSuccess ||
	    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, k, ATT3_WARPS * 32, ATT_RING_BYTES) != cudaSuccess ||
	    nb < ATT2_PER_SM) {
		cudaGetLastError();
		return 0;
	}
	return 1;
}

// The longest context whose decode attention takes one cluster of ATT_CLN
// fat splits per kv head (ATT_MMA_FAT); 0 where that does not apply.
static int att2_fat_max(const sk_ctx *ctx, int n_head, int n_kv, int hd) {
	return ctx->att_fat && att2_mma(n_head / n_kv, hd) ? ATT_CLN * ATT_MMA_FAT : 0;
}

// The longest context (n = position + 1) for which decode attention runs the
// one-block-per-SM kernel (ATT_LD8_1SM): the splits of every kv head at the
// shortest split length then fit one block per SM; 0 where it does not apply.
static int att2_short_max(const sk_ctx *ctx, int n_head, int n_kv, int hd) {
	const int G = n_head / n_kv;
	if (!ATT_LD8_1SM || G != 1 || !att2_ld8(G, hd) || att2_clu(ctx, G)) return 0;
	if (ATT_LD8_1SM_ALL) return std::numeric_limits<int>::max();
	if (ATT_RING_ALL && ctx->att_ring && att2_ring(G, hd)) return 0;
	return att2_min(G) * std::max(1, ctx->sm_count / n_kv);
}

// The longest context whose decode attention does not run the ring kernel
// (ATT_RING): the model's long-context graph (past att2_short_max) runs it;
// INT_MAX where it does not apply.
static int att2_ring_after(const sk_ctx *ctx, int n_head, int n_kv, int hd) {
	const int G = n_head / n_kv;
	if (!ctx->att_ring || !att2_ring(G, hd) || att2_clu(ctx, G)) return std::numeric_limits<int>::max();
	return att2_short_max(ctx, n_head, n_kv, hd);
}

// two: contexts of more than ATT_CLN splits may come (see att2_long): the
// clustered kernel that combines them in two levels. The other one is the
// same kernel without that path, whose smaller code ran TinyLlama Q8_0 4%
// faster at 128 tokens of context (1,175 against 1,126-1,134 tok/s). At one
// head per kv head, !two: no context past att2_short_max comes, and the
// one-block-per-SM kernel runs.
// Whether attn2_decode launches nsplit splits in clusters, and whether it
// runs the ring kernel (two: the long-context graph; see att2_ring_after)
static bool att2_clu_launch(const sk_ctx *ctx, int G, int nsplit) {
	const int csize = nsplit > ATT_CLN ? ATT_CLN : nsplit;
	return att2_clu(ctx, G) && nsplit > 1 && nsplit % csize == 0;
}
static bool att2_ring_launch(const sk_ctx *ctx, int n_head, int n_kv, int hd, int nsplit, bool two) {
	return two && !att2_clu_launch(ctx, n_head / n_kv, nsplit) &&
	       att2_ring_after(ctx, n_head, n_kv, hd) != std::numeric_limits<int>::max();
}

static int attn2_decode(sk_ctx *ctx, const float *q, const __half *kc, const __half *vc, float *out, int n_head,
                        int n_kv, int hd, int max_ctx, const int32_t *pos, float *part, int nsplit, bool two) {
	int *counter = attn2_counters(part, n_head, hd, nsplit);
	dim3 grid(n_kv, nsplit);
	cudaStream_t s = ctx->stream;
	const int G = n_head / n_kv;
	// clusters of ATT_CLN splits (nsplit is a multiple of it, see att2_nsplit),
	// or of all of them when there are fewer
	const int csize = nsplit > ATT_CLN ? ATT_CLN : nsplit;
	const bool clu = att2_clu_launch(ctx, G, nsplit);
	const int row = !clu ? 0 : two && att2_two(ctx, G) ? 2 : 1;
	const bool one = !two && att2_short_max(ctx, n_head, n_kv, hd) > 0;
	// the ring (past att2_short_max: the long-context graph)
	const bool rcol = att2_ring_launch(ctx, n_head, n_kv, hd, nsplit, two);
	const int col = att2_col(G, hd, rcol, one);
	const bool mcol = col == ATT_COL_MMA;
	const attn_fn k = att_kern[row][col];
	// the tensor-core kernel's staging (fat: one cluster of splits, see ATT_MMA_FAT)
	const bool fat = mcol && nsplit <= ATT_CLN && att2_fat_max(ctx, n_head, n_kv, hd) > 0;
	const size_t dyn = mcol ? (size_t)(fat ? ATT_MMA_FAT : ctx->att_thin) * ATT_MMA_KEYB : rcol ? ATT_RING_BYTES : 0;
	if (clu) {
		cudaLaunchConfig_t cfg;
		cudaLaunchAttribute attr;
		att_cluster_cfg(cfg, attr, grid, csize, s);
		cfg.dynamicSmemBytes = dyn;
		CK(ctx, cudaLaunchKernelEx(&cfg, k, q, kc, vc, part, out, counter, n_head, n_kv, hd, max_ctx, nsplit, pos));
		return SK_OK;
	}
	if (rcol && ATT_RING_PDL) {
		CK(ctx, launch_pdl(ctx, k, grid, dim3(ATT3_WARPS * 32), dyn, q, kc, vc, part, out, counter, n_head, n_kv, hd,
		                   max_ctx, nsplit, pos));
		return SK_OK;
	}
	k<<<grid, ATT3_WARPS * 32, dyn, s>>>(q, kc, vc, part, out, counter, n_head, n_kv, hd, max_ctx, nsplit, pos);
	CKLAUNCH(ctx);
	return SK_OK;
}

// ---------------------------------------------------------------- persistent decode step
//
// One cooperative launch runs a whole decode step: the embedding row, then
// per layer five phases separated by grid-wide barriers (QKV with RoPE and
// the KV store; attention; O accumulated into x; gate/up with SwiGLU; down
// accumulated into x), then the output GEMV. Every block runs the same
// device functions as k_gemv2 and k_attn3_split for a share of the work, so
// each output element is computed by the same instructions in the same
// order as in the kernel-per-op step and the logits are bit-identical to it
// (TestDecodePersistent). Before each barrier every warp asks L2 for the
// rows of its first row pairs of the next phase, so the weight stream keeps
// moving while the grid waits. The aim: no kernel boundary per phase (the
// drain of one grid and the launch and prologue of the next); the step of
// 22 layers x 5 kernels costs several microseconds per kernel more than its
// bytes. Measured on the H200 it is slower, so it is opt-in
// (SPARKINFER_PERSISTENT=1): TinyLlama Q8_0 771 instead of 1,003 tok/s at
// 128 tokens of context, 7B Q4_K_M 259 instead of 353. Its phases need more
// than 128 registers (they read their parameters from memory, not the
// constant bank), so one block of 8 warps fits per SM instead of the GEMVs'
// two; with two (MK_MINB 2) they spill and it runs at 411 and 196. One
// cooperative launch per layer with the parameters in the constant bank
// spilled as well (696 / 223 with one block per SM).
//
// Coherence: data written in the launch (x, q, att, g, the K/V rows of the
// step's token, the attention partials) is never read through the
// non-coherent read-only path (ldx4/ldkv with MK, __ldcg for partials); the
// barrier (cooperative_groups grid sync) orders the writes before the reads.

#ifndef MK_PF
#define MK_PF 1  // row pairs per warp prefetched into L2 before a barrier
#endif
#ifndef MK_MINB
#define MK_MINB 1  // 2 (128 registers) spills the GEMV phases
#endif
// warps per block: its blocks also run the attention items (att3_item's
// ATT3_WARPS), whatever the kernel-per-op GEMVs' G2_WARPS
#define MK_WARPS ATT3_WARPS

// One layer's phases (device memory, read-only during the step).
struct PLayer {
	Mats qkv, o, gu, down;
	int nq[4], nf[4];  // per phase: quantized / float matrices present
	EpiDev eq;         // RoPE + this layer's KV caches
	const float *attn_norm, *ffn_norm;
	const __half *kc, *vc;
};

struct PStep {
	const PLayer *__restrict__ L;
	int n_layer;
	Mats out;
	int out_q, out_f;
	const float *out_norm;
	EpiDev elog, eacc, esw;  // logits store, accumulate into x, SwiGLU into g
	MatDev embd;
	int embd_type;
	float *x, *q, *att, *g, *part;
	int *counter;
	const int32_t *tok, *pos;
	int dim, n_head, n_kv, hd, max_ctx, nsplit;
	int two;  // the attention combine is two-level (as the per-op step's clusters make it)
	int fat_max;  // contexts up to this take min(ATT_CLN, nsplit) splits (att2_fat_max)
	int ring_after;  // contexts past this take the ring's arithmetic (att2_ring_after)
	float eps;
	int down_f16;    // the FFN's hand-off in f16 (down_half)
};

__device__ __forceinline__ float deq_any(int type, const MatDev &m, int r, int c) {
	switch (type) {
	case SK_F32: return deq<SK_F32>(m, r, c);
	case SK_F16: return deq<SK_F16>(m, r, c);
	case SK_BF16: return deq<SK_BF16>(m, r, c);
	case SK_Q8_0: return deq<SK_Q8_0>(m, r, c);
	case SK_Q4_K: return deq<SK_Q4_K>(m, r, c);
	case SK_Q6_K: return deq<SK_Q6_K>(m, r, c);
	}
	return 0.f;
}

// The phases as calls (not inlined): each gets the register allocation of
// its own code instead of the whole step's live values.
template <int T, int IO = 0>
__device__ __noinline__ void mk_gemv(const Mats &ms, const float *x, const float *normw, float eps, int nq, int nf,
                                     const EpiDev &e, unsigned char *smem, int bid, int nb) {
	g2_body<T, true, 0, MK_WARPS, IO>(ms, x, normw, eps, nq, nf, 0, e, smem, bid, nb);
}

template <int MAXD2>
__device__ __noinline__ void mk_attn(const PStep &P, const PLayer &L, int bid, int nb) {
	const int items = P.n_kv * P.nsplit;
	// the splits the kernel-per-op step takes at this context (ATT_MMA_FAT);
	// items past them find their start past the context
	const int ns = att2_ctx_nsplit(P.fat_max, min(*P.pos + 1, P.max_ctx), P.nsplit);
	for (int it = bid; it < items; it += nb)
		att3_item<MAXD2, true, false>(P.q, L.kc, L.vc, P.part, P.att, P.counter, P.n_head, P.n_kv, P.hd, P.max_ctx, ns,
		                       P.pos, it % P.n_kv, it / P.n_kv, P.two != 0, P.ring_after);
}

__device__ __noinline__ void mk_prefetch(const Mats &ms, int bid, int nb) { g2_prefetch<MK_WARPS>(ms, bid, nb, MK_PF); }

// T: the type of every matrix of the model when they share one, else -1.
template <int T, int MAXD2>
__global__ void __launch_bounds__(MK_WARPS * 32, MK_MINB) k_decode_persistent(const PStep *__restrict__ Pp) {
	extern __shared__ __align__(16) unsigned char g2_smem[];
	const PStep &P = *Pp;
	cg::grid_group grid = cg::this_grid();
	const int bid = blockIdx.x, nb = gridDim.x;
	mk_prefetch(P.L[0].qkv, bid, nb);
	{
		int r = *P.tok;
		if (r < 0 || r >= P.embd.rows) r = 0;  // the host validates ids; never read out of range
		for (int c = bid * blockDim.x + threadIdx.x; c < P.dim; c += nb * blockDim.x)
			P.x[c] = deq_any(P.embd_type, P.embd, r, c);
	}
	grid.sync();
	for (int l = 0; l < P.n_layer; l++) {
		const PLayer &L = P.L[l];
		mk_gemv<T>(L.qkv, P.x, L.attn_norm, P.eps, L.nq[0], L.nf[0], L.eq, g2_smem, bid, nb);
		mk_prefetch(L.o, bid, nb);
		grid.sync();
		mk_attn<MAXD2>(P, L, bid, nb);
		grid.sync();
		mk_gemv<T>(L.o, P.att, nullptr, 0.f, L.nq[1], L.nf[1], P.eacc, g2_smem, bid, nb);
		mk_prefetch(L.gu, bid, nb);
		grid.sync();
		if (P.down_f16) mk_gemv<T, G2_IO_YH>(L.gu, P.x, L.ffn_norm, P.eps, L.nq[2], L.nf[2], P.esw, g2_smem, bid, nb);
		else mk_gemv<T>(L.gu, P.x, L.ffn_norm, P.eps, L.nq[2], L.nf[2], P.esw, g2_smem, bid, nb);
		mk_prefetch(L.down, bid, nb);
		grid.sync();
		if (P.down_f16) mk_gemv<T, G2_IO_XH>(L.down, P.g, nullptr, 0.f, L.nq[3], L.nf[3], P.eacc, g2_smem, bid, nb);
		else mk_gemv<T>(L.down, P.g, nullptr, 0.f, L.nq[3], L.nf[3], P.eacc, g2_smem, bid, nb);
		mk_prefetch(l + 1 < P.n_layer ? P.L[l + 1].qkv : P.out, bid, nb);
		grid.sync();
	}
	mk_gemv<T>(P.out, P.x, P.out_norm, P.eps, P.out_q, P.out_f, P.elog, g2_smem, bid, nb);
}

typedef void (*persist_fn)(const PStep *);

// ---------------------------------------------------------------- prefill attention v2
//
// grid (ceil(ntok/16), n_head), 4 warps of 4 queries; keys 32 at a time, one
// per lane (scores for the warp's 4 queries), then P V with the lanes over
// head dimensions. Query t (position *pos0 + t) sees keys 0..*pos0 + t.

#define ATP_Q 4
#define ATP_WARPS 4

template <int MAXD2>
__global__ void __launch_bounds__(ATP_WARPS * 32) k_attn_prefill(const float *q, const __half *kc, const __half *vc,
                                                                 float *out, int ntok, int n_head, int n_kv, int hd,
                                                                 int max_ctx, const int32_t *pos0) {
	__shared__ __align__(16) float qs[ATP_WARPS * ATP_Q * 256];
	const int h = blockIdx.y, kvh = h / (n_head / n_kv);
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int tb = blockIdx.x * ATP_WARPS * ATP_Q;
	const int p0 = *pos0;
	const float scale = rsqrtf((float)hd);
	for (int i = threadIdx.x; i < ATP_WARPS * ATP_Q * hd; i += blockDim.x) {
		const int j = i / hd, d = i - j * hd, t = tb + j;
		qs[j * hd + d] = t < ntok ? q[((size_t)t * n_head + h) * hd + d] * scale : 0.f;
	}
	__syncthreads();
	const float *qw = qs + warp * ATP_Q * hd;
	int P[ATP_Q];
	int pmax = -1;
#pragma unroll
	for (int j = 0; j < ATP_Q; j++) {
		const int t = tb + warp * ATP_Q + j;
		P[j] = t < ntok ? min(p0 + t, max_ctx - 1) : -1;
		pmax = max(pmax, P[j]);
	}
	float m[ATP_Q], l[ATP_Q];
	float2 acc[ATP_Q][MAXD2];
#pragma unroll
	for (int j = 0; j < ATP_Q; j++) {
		m[j] = -INFINITY;
		l[j] = 0.f;
#pragma unroll
		for (int i = 0; i < MAXD2; i++) acc[j][i] = make_float2(0.f, 0.f);
	}
	const __half *kb = kc + (size_t)kvh * max_ctx * hd, *vb = vc + (size_t)kvh * max_ctx * hd;
	for (int k0 = 0; k0 <= pmax; k0 += 32) {
		const int key = k0 + lane;
		const bool ok = key <= pmax;
		float dot[ATP_Q];
		qk_dots<ATP_Q>(qw, ATP_Q, hd, kb + (size_t)(ok ? key : k0) * hd, dot);
		float p[ATP_Q];
#pragma unroll
		for (int j = 0; j < ATP_Q; j++) {
			const float sc = key <= P[j] ? dot[j] : -INFINITY;
			const float mt = warp_max(sc);
			const float mn = fmaxf(m[j], mt);
			if (mn == -INFINITY) {  // no key yet (query beyond ntok)
				p[j] = 0.f;
				continue;
			}
			const float corr = __expf(m[j] - mn);
			p[j] = sc == -INFINITY ? 0.f : __expf(sc - mn);
			l[j] = l[j] * corr + warp_sum(p[j]);
#pragma unroll
			for (int i = 0; i < MAXD2; i++) {
				acc[j][i].x *= corr;
				acc[j][i].y *= corr;
			}
			m[j] = mn;
		}
		// P V, KB keys at a time with their V rows loaded together (as in
		// the decode kernel); keys past pmax have p = 0 and re-read row pmax
		const int nk = min(32, pmax - k0 + 1);
		constexpr int KB = MAXD2 <= 2 ? 8 : 4;
		for (int j0 = 0; j0 < nk; j0 += KB) {
			float2 vv[KB][MAXD2];
#pragma unroll
			for (int u = 0; u < KB; u++) {
				const int kk = min(k0 + j0 + u, pmax);
				const __half2 *vp = (const __half2 *)(vb + (size_t)kk * hd);
#pragma unroll
				for (int i = 0; i < MAXD2; i++) {
					const int d = 2 * lane + 64 * i;
					vv[u][i] = d < hd ? __half22float2(vp[lane + 32 * i]) : make_float2(0.f, 0.f);
				}
			}
#pragma unroll
			for (int u = 0; u < KB; u++) {
#pragma unroll
				for (int j = 0; j < ATP_Q; j++) {
					const float pj = __shfl_sync(0xffffffffu, p[j], (j0 + u) & 31);
#pragma unroll
					for (int i = 0; i < MAXD2; i++) {
						acc[j][i].x += pj * vv[u][i].x;
						acc[j][i].y += pj * vv[u][i].y;
					}
				}
			}
		}
	}
#pragma unroll
	for (int j = 0; j < ATP_Q; j++) {
		const int t = tb + warp * ATP_Q + j;
		if (t >= ntok) continue;
		float *o = out + ((size_t)t * n_head + h) * hd;
		const float inv = 1.f / l[j];
#pragma unroll
		for (int i = 0; i < MAXD2; i++) {
			const int d = 2 * lane + 64 * i;
			if (d < hd) {
				o[d] = acc[j][i].x * inv;
				o[d + 1] = acc[j][i].y * inv;
			}
		}
	}
}

// ---------------------------------------------------------------- prefill attention on tensor cores
//
// Flash attention with mma.sync.m16n8k16 (f16 operands, f32 accumulation):
// grid (ceil(ntok/64), n_head), 4 warps of 16 queries. Key/value tiles of 64
// rows go through shared memory with cp.async, double-buffered; each warp
// computes S = Q K^T (16 x 64) into accumulators, masks keys past each
// query's position, updates the running max and sum (exp2 of scores
// pre-scaled by log2(e)), and multiplies P (the accumulators repacked as
// f16 A fragments) by V (ldmatrix.trans). Q is rounded to f16 once, after
// the 1/sqrt(hd) scale; P to f16 per tile; the row sums use the f32 values.
// It replaced the CUDA-core kernel below for head sizes 64 and 128 (A/B on
// the H200, prefill tok/s of 512 tokens from empty / after 4k: TinyLlama
// Q8_0 37,585 / 9,729 -> 47,805 / 38,659; 7B Q4_K_M 6,996 / 3,147 -> 7,742
// / 7,207). -DATP_MMA=0: the CUDA-core kernel for every head size.

#define FA_BM 64
#define FA_BN 64

__device__ __forceinline__ void cp_async16(void *smem, const void *gmem) {
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"((uint32_t)__cvta_generic_to_shared(smem)),
	             "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
	asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

template <int HD>
__global__ void __launch_bounds__(128) k_attn_prefill_mma(const float *__restrict__ q, const __half *__restrict__ kc,
                                                          const __half *__restrict__ vc, float *__restrict__ out,
                                                          int ntok, int n_head, int n_kv, int max_ctx,
                                                          const int32_t *pos0) {
	constexpr int LD = HD + 8;  // halves per shared row (16-byte pad: conflict-free ldmatrix)
	constexpr int KS = HD / 16, NT = HD / 8;
	extern __shared__ __align__(16) unsigned char fa_smem[];
	__half(*Ks)[FA_BN][LD] = (__half(*)[FA_BN][LD])fa_smem;                      // [2][FA_BN][LD]
	__half(*Vs)[FA_BN][LD] = (__half(*)[FA_BN][LD])(fa_smem + 2 * FA_BN * LD * 2);  // [2][FA_BN][LD]
	const int h = blockIdx.y, kvh = h / (n_head / n_kv);
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const int g = lane >> 2, t4 = lane & 3;
	const int tb = blockIdx.x * FA_BM;
	const int p0 = *pos0;
	const int qr0 = tb + warp * 16 + g, qr1 = qr0 + 8;  // this thread's query rows
	const int P0 = qr0 < ntok ? min(p0 + qr0, max_ctx - 1) : -1;  // last key each one sees
	const int P1 = qr1 < ntok ? min(p0 + qr1, max_ctx - 1) : -1;
	const int pmax = min(p0 + min(tb + FA_BM, ntok) - 1, max_ctx - 1);  // the block's last key
	const __half *kb = kc + (size_t)kvh * max_ctx * HD, *vb = vc + (size_t)kvh * max_ctx * HD;

	auto load_tile = [&](int buf, int k0) {
		constexpr int CH = HD / 8;  // 16-byte chunks per row
		for (int i = tid; i < FA_BN * CH; i += 128) {
			const int r = i / CH, c = (i - r * CH) * 8;
			const size_t key = (size_t)min(k0 + r, pmax);  // past pmax: a valid row, masked
			cp_async16(&Ks[buf][r][c], kb + key * HD + c);
			cp_async16(&Vs[buf][r][c], vb + key * HD + c);
		}
		cp_async_commit();
	};
	load_tile(0, 0);

	// Q as A fragments, scaled by log2(e)/sqrt(hd)
	const float qscale = rsqrtf((float)HD) * 1.4426950408889634f;
	uint32_t qa[KS][4];
	{
		const float *q0 = q + ((size_t)min(qr0, ntok - 1) * n_head + h) * HD;
		const float *q1 = q + ((size_t)min(qr1, ntok - 1) * n_head + h) * HD;
		const float s0 = qr0 < ntok ? qscale : 0.f, s1 = qr1 < ntok ? qscale : 0.f;
#pragma unroll
		for (int kk = 0; kk < KS; kk++) {
			const int c = kk * 16 + 2 * t4;
			const float2 a = *(const float2 *)(q0 + c), b = *(const float2 *)(q1 + c);
			const float2 a8 = *(const float2 *)(q0 + c + 8), b8 = *(const float2 *)(q1 + c + 8);
			qa[kk][0] = pack_h2(a.x * s0, a.y * s0);
			qa[kk][1] = pack_h2(b.x * s1, b.y * s1);
			qa[kk][2] = pack_h2(a8.x * s0, a8.y * s0);
			qa[kk][3] = pack_h2(b8.x * s1, b8.y * s1);
		}
	}

	float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;
	float o[NT][4];
#pragma unroll
	for (int i = 0; i < NT; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
	const int ntiles = pmax / FA_BN + 1;
	for (int it = 0; it < ntiles; it++) {
		const int buf = it & 1, k0 = it * FA_BN;
		if (it + 1 < ntiles) {
			load_tile(buf ^ 1, k0 + FA_BN);
			cp_async_wait<1>();
		} else {
			cp_async_wait<0>();
		}
		__syncthreads();
		// S = Q K^T
		float s[8][4];
#pragma unroll
		for (int j = 0; j < 8; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
		for (int kk = 0; kk < KS; kk++) {
#pragma unroll
			for (int nj = 0; nj < 4; nj++) {
				uint32_t b0, b1, b2, b3;
				const __half *p = &Ks[buf][nj * 16 + (lane & 7) + (lane >> 4) * 8][kk * 16 + ((lane >> 3) & 1) * 8];
				ldsm_x4((uint32_t)__cvta_generic_to_shared(p), b0, b1, b2, b3);
				mma_16816(s[2 * nj], qa[kk], b0, b1);
				mma_16816(s[2 * nj + 1], qa[kk], b2, b3);
			}
		}
		// mask, running max (the quad of lanes sharing a row), P
		float mx0 = m0, mx1 = m1;
#pragma unroll
		for (int j = 0; j < 8; j++) {
			const int key = k0 + 8 * j + 2 * t4;
			if (key > P0) s[j][0] = -INFINITY;
			if (key + 1 > P0) s[j][1] = -INFINITY;
			if (key > P1) s[j][2] = -INFINITY;
			if (key + 1 > P1) s[j][3] = -INFINITY;
			mx0 = fmaxf(mx0, fmaxf(s[j][0], s[j][1]));
			mx1 = fmaxf(mx1, fmaxf(s[j][2], s[j][3]));
		}
		mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
		mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
		mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
		mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
		// a row with no visible key so far keeps max -inf: its p are 0, no rescale
		const float c0 = mx0 == -INFINITY ? 1.f : exp2f(m0 - mx0);
		const float c1 = mx1 == -INFINITY ? 1.f : exp2f(m1 - mx1);
		m0 = mx0;
		m1 = mx1;
		float r0 = 0.f, r1 = 0.f;
#pragma unroll
		for (int j = 0; j < 8; j++) {
			s[j][0] = s[j][0] == -INFINITY ? 0.f : exp2f(s[j][0] - mx0);
			s[j][1] = s[j][1] == -INFINITY ? 0.f : exp2f(s[j][1] - mx0);
			s[j][2] = s[j][2] == -INFINITY ? 0.f : exp2f(s[j][2] - mx1);
			s[j][3] = s[j][3] == -INFINITY ? 0.f : exp2f(s[j][3] - mx1);
			r0 += s[j][0] + s[j][1];
			r1 += s[j][2] + s[j][3];
		}
		l0 = l0 * c0 + r0;  // this thread's columns; the quad adds up at the end
		l1 = l1 * c1 + r1;
#pragma unroll
		for (int i = 0; i < NT; i++) {
			o[i][0] *= c0;
			o[i][1] *= c0;
			o[i][2] *= c1;
			o[i][3] *= c1;
		}
		// O += P V: P's accumulators are the A fragments of 16-key steps
#pragma unroll
		for (int kk = 0; kk < 4; kk++) {
			uint32_t pa[4];
			pa[0] = pack_h2(s[2 * kk][0], s[2 * kk][1]);
			pa[1] = pack_h2(s[2 * kk][2], s[2 * kk][3]);
			pa[2] = pack_h2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
			pa[3] = pack_h2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
			for (int dn = 0; dn < NT; dn += 2) {
				uint32_t b0, b1, b2, b3;
				const int mi = lane >> 3;
				const __half *p = &Vs[buf][kk * 16 + (mi & 1) * 8 + (lane & 7)][(dn + (mi >> 1)) * 8];
				ldsm_x4_t((uint32_t)__cvta_generic_to_shared(p), b0, b1, b2, b3);
				mma_16816(o[dn], pa, b0, b1);
				mma_16816(o[dn + 1], pa, b2, b3);
			}
		}
		__syncthreads();  // every warp is done with buf: the next iteration's load refills it
	}
	l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
	l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
	l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
	l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
	const float i0 = l0 > 0.f ? 1.f / l0 : 0.f, i1 = l1 > 0.f ? 1.f / l1 : 0.f;
#pragma unroll
	for (int dn = 0; dn < NT; dn++) {
		const int d = dn * 8 + 2 * t4;
		if (qr0 < ntok) *(float2 *)(out + ((size_t)qr0 * n_head + h) * HD + d) = make_float2(o[dn][0] * i0, o[dn][1] * i0);
		if (qr1 < ntok) *(float2 *)(out + ((size_t)qr1 * n_head + h) * HD + d) = make_float2(o[dn][2] * i1, o[dn][3] * i1);
	}
}

static size_t fa_smem_bytes(int hd) { return (size_t)4 * FA_BN * (hd + 8) * sizeof(__half); }

static int attn_prefill2(sk_ctx *ctx, const float *q, const __half *kc, const __half *vc, float *out, int ntok,
                         int n_head, int n_kv, int hd, int max_ctx, const int32_t *pos0) {
	cudaStream_t s = ctx->stream;
#ifndef ATP_MMA
#define ATP_MMA 1
#endif
	if (ATP_MMA && (hd == 64 || hd == 128)) {
		const dim3 g((ntok + FA_BM - 1) / FA_BM, n_head);
		const size_t sm = fa_smem_bytes(hd);
		auto *k = hd == 64 ? k_attn_prefill_mma<64> : k_attn_prefill_mma<128>;
		if (sm > 48 * 1024) CK(ctx, cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
		k<<<g, 128, sm, s>>>(q, kc, vc, out, ntok, n_head, n_kv, max_ctx, pos0);
		CKLAUNCH(ctx);
		return SK_OK;
	}
	dim3 grid((ntok + ATP_WARPS * ATP_Q - 1) / (ATP_WARPS * ATP_Q), n_head);
	if (hd <= 64) k_attn_prefill<1><<<grid, ATP_WARPS * 32, 0, s>>>(q, kc, vc, out, ntok, n_head, n_kv, hd, max_ctx, pos0);
	else if (hd <= 128) k_attn_prefill<2><<<grid, ATP_WARPS * 32, 0, s>>>(q, kc, vc, out, ntok, n_head, n_kv, hd, max_ctx, pos0);
	else k_attn_prefill<4><<<grid, ATP_WARPS * 32, 0, s>>>(q, kc, vc, out, ntok, n_head, n_kv, hd, max_ctx, pos0);
	CKLAUNCH(ctx);
	return SK_OK;
}

extern "C" int sk_attention(sk_ctx *ctx, const float *d_q, const uint16_t *d_k, const uint16_t *d_v, float *d_out,
                            int ntok, int n_head, int n_kv_head, int head_dim, int max_ctx, const int32_t *d_pos0) {
	ENTER(ctx);
	if (!d_q || !d_k || !d_v || !d_out || !d_pos0 || ntok <= 0 || n_head <= 0 || n_kv_head <= 0 || head_dim <= 0 ||
	    max_ctx <= 0 || n_head % n_kv_head != 0)
		return fail(ctx, SK_E_ARG, "sk_attention: bad argument");
	const __half *kc = (const __half *)d_k, *vc = (const __half *)d_v;
	if (ctx->variant == SK_VARIANT_V2 && att2_ok(n_head, n_kv_head, head_dim)) {
		if (ntok > 1) return attn_prefill2(ctx, d_q, kc, vc, d_out, ntok, n_head, n_kv_head, head_dim, max_ctx, d_pos0);
		// (contexts up to att2_fat_max: the fat splits, as a model's decode step)
		const int fmax = att2_fat_max(ctx, n_head, n_kv_head, head_dim);
		const bool fat = fmax > 0 && max_ctx <= fmax;
		const int ns = att2_ctx_nsplit(fmax, max_ctx, att2_nsplit(ctx, n_head, n_kv_head, head_dim, max_ctx));
		const size_t bytes = attn2_scratch_bytes(n_head, n_kv_head, head_dim, ns);
		int rc = reserve_scratch(ctx, bytes);
		if (rc != SK_OK) return rc;
		CK(ctx, cudaMemsetAsync((char *)ctx->scratch + bytes - (size_t)ATT2_INTS * n_kv_head * sizeof(int), 0,
		                        (size_t)ATT2_INTS * n_kv_head * sizeof(int), ctx->stream));
		// (the kernels of contexts up to max_ctx)
		return attn2_decode(ctx, d_q, kc, vc, d_out, n_head, n_kv_head, head_dim, max_ctx, d_pos0, ctx->scratch, ns,
		                    !fat && max_ctx > att2_short_max(ctx, n_head, n_kv_head, head_dim));
	}
	return attention(ctx, d_q, kc, vc, d_out, ntok, n_head, n_kv_head, head_dim, max_ctx, d_pos0);
}

// ---------------------------------------------------------------- qk-norm + rope + kv store

// grid (n, n_head + 2*n_kv); block: head_dim/2 threads rounded up to 32.
// Block (t, j): j < n_head: q head j; < n_head + n_kv: k head; else v head.
__global__ void k_qkv_post(const float *qkv, const float *qn, const float *kn, float eps, EpiDev e) {
	const int t = blockIdx.x, j = blockIdx.y;
	const int hd = e.hd, qd = e.n_head * hd, kd = e.n_kv * hd;
	const float *src = qkv + (size_t)t * (qd + 2 * kd) + (size_t)j * hd;
	const int region = j < e.n_head ? 0 : (j < e.n_head + e.n_kv ? 1 : 2);
	const int h = region == 0 ? j : (region == 1 ? j - e.n_head : j - e.n_head - e.n_kv);
	const float *nw = region == 0 ? qn : (region == 1 ? kn : nullptr);
	float scale = 1.f;
	if (nw) {
		__shared__ float red[32];
		float ss = 0.f;
		for (int i = threadIdx.x; i < hd; i += blockDim.x) ss += src[i] * src[i];
		ss = warp_sum(ss);
		if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = ss;
		__syncthreads();
		float tot = 0.f;
		for (int w = 0; w < (int)(blockDim.x >> 5); w++) tot += red[w];
		scale = rsqrtf(tot / hd + eps);
	}
	const int p = *e.pos0 + t;
	for (int k = threadIdx.x; k < hd / 2; k += blockDim.x) {
		int a, b;
		if (region < 2 && 2 * k < e.rd) {
			a = e.neox ? k : 2 * k;
			b = e.neox ? k + e.rd / 2 : 2 * k + 1;
		} else {
			a = 2 * k;
			b = 2 * k + 1;
		}
		float v0 = src[a], v1 = src[b];
		if (nw) {
			v0 = v0 * scale * nw[a];
			v1 = v1 * scale * nw[b];
		}
		if (region < 2 && 2 * k < e.rd) {
			double sn, cs;
			rope_cs(e, p, k, sn, cs);
			const float x0 = v0, x1 = v1;
			v0 = (float)(x0 * cs - x1 * sn);
			v1 = (float)(x0 * sn + x1 * cs);
		}
		if (region == 0) {
			float *o = e.q_out + (size_t)t * qd + (size_t)h * hd;
			o[a] = v0;
			o[b] = v1;
		} else if (p >= 0 && p < e.max_ctx) {
			__half *c = (region == 1 ? e.kc : e.vc) + ((size_t)h * e.max_ctx + p) * hd;
			c[a] = __float2half(v0);
			c[b] = __float2half(v1);
		}
	}
}

extern "C" int sk_qkv_post(sk_ctx *ctx, const float *d_qkv, int n, const float *d_q_norm, const float *d_k_norm,
                           float eps, const sk_epilogue *epi) {
	ENTER(ctx);
	if (!d_qkv || n <= 0 || !epi || epi->mode != SK_EPI_QKV) return fail(ctx, SK_E_ARG, "sk_qkv_post: bad argument");
	sk_epilogue e = *epi;
	e.roff = 0;
	int rc = check_epi(ctx, &e, 0, 1, 0);
	if (rc != SK_OK) return rc;
	int threads = ((e.head_dim / 2 + 31) / 32) * 32;
	if (threads > 256) threads = 256;
	k_qkv_post<<<dim3(n, e.n_head + 2 * e.n_kv_head), threads, 0, ctx->stream>>>(d_qkv, d_q_norm, d_k_norm, eps,
	                                                                               epidev(&e));
	CKLAUNCH(ctx);
	return SK_OK;
}

// ---------------------------------------------------------------- model

#define PREFILL_CHUNK 32      // v1
#define PREFILL_CHUNK_V2 512  // v2 (tensor-core GEMM)

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
	int variant;  // SK_VARIANT_* of the context at creation
	int chunk;    // prefill tokens per forward pass
	bool att2;    // v2 attention kernels apply to this shape
	int nsplit;   // v2 decode attention splits
	// activations for up to chunk tokens
	float *x, *xn, *q, *k, *v, *att, *g, *u, *logits;
	float *qkv;   // v2 with qk-norm: [chunk][q_dim + 2 kv_dim]
	float *part;  // v2 decode attention partials
	float *tmp2;  // v2 gate/up fallback: 2 x chunk x ffn
	int32_t *d_tok, *d_pos, *d_next;
	int32_t *h_step;  // pinned: [0..chunk) tokens, [chunk] pos, [chunk+1] next
	// decode step graphs: [1] for positions where decode attention may take
	// more than one cluster of splits (att2_long), [0] for the others
	cudaGraphExec_t graph[2];
	bool graph_ready[2];
	bool att_long;   // the step being enqueued is for graph[1]
	bool step_init;  // the persistent step was considered (persist_setup)
	// the persistent decode step (k_decode_persistent): allowed with
	// SPARKINFER_PERSISTENT=1 at creation; pers once set up for this model
	bool pers_allowed, pers;
	bool down_f16;  // SPARKINFER_DOWN_F16=1 at creation (down_half)
	PLayer *d_pl;
	PStep *d_ps;
	persist_fn pfn;
	int pgrid;
	size_t psmem;
	// SPARKINFER_PROFILE=1 (v2): decode steps run without the graph, with
	// an event after each kernel; the GPU time between consecutive events
	// (the kernel, plus any wait for the CPU's next launch) is summed by
	// kernel and printed to stderr when the model is freed. A measurement
	// aid: the graph's overlap, programmatic launch included, is lost.
	bool prof;
	int prof_n, prof_steps;
	long prof_ptok;  // prefill tokens profiled
	std::vector<cudaEvent_t> prof_ev;
	std::vector<const char *> prof_name;
	std::vector<std::pair<std::string, std::pair<int, double>>> prof_sum;  // name -> (count, us)
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
	for (int i = 0; i < 2; i++)
		if (m->graph_ready[i]) cudaGraphExecDestroy(m->graph[i]);
#if SK_TRACE
	if (const char *tp = getenv("SK_TRACE_OUT")) {
		unsigned int n = 0;
		cudaDeviceSynchronize();
		cudaMemcpyFromSymbol(&n, sk_trace_n, sizeof n);
		n = std::min(n, (unsigned int)SK_TRACE_N);
		std::vector<TraceRec> r(n);
		cudaMemcpyFromSymbol(r.data(), sk_trace, n * sizeof(TraceRec));
		if (FILE *f = fopen(tp, "w")) {
			fprintf(f, "g0,g1,c1,c2,c3,tag,grid,block,cols,rows,sm\n");
			for (const TraceRec &t : r)
				fprintf(f, "%llu,%llu,%lld,%lld,%lld,%d,%d,%d,%d,%d,%d\n", t.g0, t.g1, t.c1, t.c2, t.c3, t.tag, t.grid,
				        t.block, t.cols, t.rows, t.sm);
			fclose(f);
		}
	}
#endif
	if (m->prof && m->prof_steps > 0) {
		fprintf(stderr, "sparkinfer kernels profile: %d decode steps, GPU time per step by kernel (events between launches, no graph)\n",
		        m->prof_steps);
		double tot = 0;
		for (auto &e : m->prof_sum)
			if (e.first.compare(0, 2, "p.") != 0) tot += e.second.second;
		for (auto &e : m->prof_sum)
			if (e.first.compare(0, 2, "p.") != 0)
				fprintf(stderr, "  %-10s %4d launches/step %9.2f us/step %5.1f%%\n", e.first.c_str(),
				        e.second.first / m->prof_steps, e.second.second / m->prof_steps, 100.0 * e.second.second / tot);
		fprintf(stderr, "  %-10s %24.2f us/step\n", "total", tot / m->prof_steps);
	}
	if (m->prof && m->prof_ptok > 0) {
		fprintf(stderr, "sparkinfer kernels profile: %ld prefill tokens, GPU time per 512 tokens by kernel\n", m->prof_ptok);
		double tot = 0;
		for (auto &e : m->prof_sum)
			if (e.first.compare(0, 2, "p.") == 0) tot += e.second.second;
		for (auto &e : m->prof_sum)
			if (e.first.compare(0, 2, "p.") == 0)
				fprintf(stderr, "  %-12s %6d launches %11.1f us/512 %5.1f%%\n", e.first.c_str(), e.second.first,
				        e.second.second * 512.0 / m->prof_ptok, 100.0 * e.second.second / tot);
		fprintf(stderr, "  %-12s %26.1f us/512 tokens\n", "total", tot * 512.0 / m->prof_ptok);
	}
	for (cudaEvent_t e : m->prof_ev) cudaEventDestroy(e);
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
	m->variant = ctx->variant;
	{
		const char *pe = getenv("SPARKINFER_PROFILE");
		m->prof = pe && strcmp(pe, "1") == 0;
		const char *pp = getenv("SPARKINFER_PERSISTENT");
		m->pers_allowed = pp && strcmp(pp, "1") == 0;
		// the FFN's hand-off in f16 (G2_IO_XH): opt-in (slower on an H100)
		const char *pd = getenv("SPARKINFER_DOWN_F16");
		if (pd && *pd && strcmp(pd, "0") != 0 && strcmp(pd, "1") != 0) {
			delete m;
			return fail(ctx, SK_E_ARG, "SPARKINFER_DOWN_F16=%.32s: want 0 or 1", pd);
		}
		m->down_f16 = pd && strcmp(pd, "1") == 0;
	}
	m->att2 = m->variant == SK_VARIANT_V2 && att2_ok(c->n_head, c->n_kv_head, c->head_dim);
	// v1 prefill attention keeps per-token partials: its chunk stays small
	m->chunk = m->att2 ? PREFILL_CHUNK_V2 : PREFILL_CHUNK;
	m->nsplit = att2_nsplit(ctx, c->n_head, c->n_kv_head, c->head_dim, c->max_ctx);
	const size_t T = m->chunk, qd = (size_t)c->n_head * c->head_dim, kd = (size_t)c->n_kv_head * c->head_dim;
	int rc = SK_OK;
	if (m->variant == SK_VARIANT_V2) {
		rc = rc ? rc : model_alloc(m, T * (qd + 2 * kd) * 4, (void **)&m->qkv);
		const size_t pbytes = attn2_scratch_bytes(c->n_head, c->n_kv_head, c->head_dim, m->nsplit);
		rc = rc ? rc : model_alloc(m, pbytes, (void **)&m->part);
		rc = rc ? rc : sk_memset(ctx, m->part, 0, pbytes);
		rc = rc ? rc : model_alloc(m, 2 * T * c->ffn * 4, (void **)&m->tmp2);
		// the fused GEMV's shared memory, set before any graph capture
		size_t smem = 0;
		const int widths[] = {c->dim, (int)qd, c->ffn};
		for (int w : widths) smem = std::max(smem, (size_t)w * 7 + 96);
		if (rc == SK_OK && smem > 48 * 1024 && smem <= 200 * 1024 && (int)smem > ctx->g2_smem) {
			const cudaError_t e = gemv2_set_smem(ctx, (int)smem);
			if (e != cudaSuccess) rc = fail(ctx, SK_E_CUDA, "gemv shared memory: %s", cudaGetErrorString(e));
		}
	}
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
	if (rc == SK_OK && !m->att2) {
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
	if (m->step_init) return fail(ctx, SK_E_ARG, "sk_model_set: model already running");
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
	int rc;
	if (m->variant == SK_VARIANT_V2 && !c.qk_norm && (slot == SK_T_Q || slot == SK_T_K)) {
		// v2: RoPE pairs on adjacent rows, rotated in the QKV GEMV's epilogue
		std::vector<int32_t> perm((size_t)rows);
		rc = sk_rope_perm(slot == SK_T_Q ? c.n_head : c.n_kv_head, c.head_dim, c.rope_dim, c.neox, perm.data());
		if (rc != SK_OK) return fail(ctx, rc, "sk_model_set: rope row order");
		rc = sk_matrix_upload_perm(ctx, type, data, rows, cols, perm.data(), &mat);
	} else {
		rc = sk_matrix_upload(ctx, type, data, rows, cols, &mat);
	}
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

// ---------------------------------------------------------------- persistent decode step (host)

// The model's Q/K/V epilogue (RoPE, q out, the KV store at *d_pos); the
// caller sets the layer's caches.
static sk_epilogue qkv_epi(const sk_model *m) {
	const sk_model_config &c = m->cfg;
	sk_epilogue e;
	memset(&e, 0, sizeof e);
	e.mode = SK_EPI_QKV;
	e.q_out = m->q;
	e.n_head = c.n_head;
	e.n_kv_head = c.n_kv_head;
	e.head_dim = c.head_dim;
	e.rope_dim = c.rope_dim;
	e.max_ctx = c.max_ctx;
	e.neox = c.neox;
	e.freq_base = c.freq_base;
	e.freq_scale = c.freq_scale;
	e.freq = m->rope_freq;
	e.pos0 = m->d_pos;
	return e;
}

static const persist_fn persist_kernels[2][2] = {
	{k_decode_persistent<-1, 1>, k_decode_persistent<-1, 2>},
	{k_decode_persistent<SK_Q8_0, 1>, k_decode_persistent<SK_Q8_0, 2>},
};

// Whether the decode step passes the SwiGLU activation to the down GEMVs as
// f16 (SPARKINFER_DOWN_F16=1): every down matrix quantized, ffn a multiple
// of 32.
static bool down_half(const sk_model *m) {
	if (!m->down_f16 || !G2_PIPE || m->cfg.ffn % 32) return false;  // (G2_PIPE: g2_io_kernel's kernels)
	for (int l = 0; l < m->cfg.n_layer; l++)
		if (!is_quant(m->layers[l].down->type)) return false;
	return true;
}

// The Mats of a phase (as gemv2_launch), raising smem to its prologue's.
static Mats persist_mats(int nmat, const sk_matrix *const *W, bool swiglu, int *nq, int *nf, size_t *smem) {
	const Mats ms = g2_mats(nmat, W, swiglu, nq, nf);
	*smem = std::max(*smem, g2_prologue_bytes(W[0]->cols, *nq, *nf));
	return ms;
}

// Decide whether the decode step runs as one persistent kernel and prepare
// its parameters (on the first decode, after every weight is set). Any
// reason not to leaves m->pers false: the kernel-per-op step runs instead.
static int persist_setup(sk_model *m) {
	sk_ctx *ctx = m->ctx;
	const sk_model_config &c = m->cfg;
	m->pers = false;
	if (!m->pers_allowed || m->prof || m->variant != SK_VARIANT_V2 || !m->att2 || c.qk_norm || c.head_dim > 128)
		return SK_OK;
	int coop = 0;
	if (cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, ctx->device) != cudaSuccess || !coop) return SK_OK;
	const int qd = c.n_head * c.head_dim, kd = c.n_kv_head * c.head_dim;
	if ((qd & 1) || (kd & 1)) return SK_OK;
	// the uniform weight type, if every matrix has one
	const sk_matrix *out = m->output ? m->output : m->embd;
	int uniform = out->type;
	std::vector<PLayer> pl(c.n_layer);
	size_t smem = 0;
	sk_epilogue qkv = qkv_epi(m);
	for (int l = 0; l < c.n_layer; l++) {
		Layer &L = m->layers[l];
		PLayer &P = pl[l];
		const sk_matrix *wqkv[3] = {L.wq, L.wk, L.wv};
		const sk_matrix *wgu[2] = {L.gate, L.up};
		for (const sk_matrix *w : {L.wq, L.wk, L.wv, L.wo, L.gate, L.up, L.down})
			if (w->type != uniform) uniform = -1;
		P.qkv = persist_mats(3, wqkv, false, &P.nq[0], &P.nf[0], &smem);
		P.o = persist_mats(1, &L.wo, false, &P.nq[1], &P.nf[1], &smem);
		P.gu = persist_mats(2, wgu, true, &P.nq[2], &P.nf[2], &smem);
		P.down = persist_mats(1, &L.down, false, &P.nq[3], &P.nf[3], &smem);
		qkv.k_cache = (uint16_t *)L.kc;
		qkv.v_cache = (uint16_t *)L.vc;
		P.eq = epidev(&qkv);
		P.attn_norm = L.attn_norm;
		P.ffn_norm = L.ffn_norm;
		P.kc = L.kc;
		P.vc = L.vc;
	}
	PStep S;
	memset(&S, 0, sizeof S);
	S.out = persist_mats(1, &out, false, &S.out_q, &S.out_f, &smem);
	const sk_epilogue acc = plain_epi(m->x, c.dim, 1), lo = plain_epi(m->logits, c.vocab, 0);
	sk_epilogue sw = plain_epi(m->g, c.ffn, 0);
	sw.mode = SK_EPI_SWIGLU;
	S.eacc = epidev(&acc);
	S.esw = epidev(&sw);
	S.down_f16 = down_half(m);  // as the kernel-per-op step
	S.elog = epidev(&lo);
	S.n_layer = c.n_layer;
	S.out_norm = m->out_norm;
	S.embd = matdev(m->embd);
	S.embd_type = m->embd->type;
	S.x = m->x;
	S.q = m->q;
	S.att = m->att;
	S.g = m->g;
	S.part = m->part;
	S.counter = attn2_counters(m->part, c.n_head, c.head_dim, m->nsplit);
	S.tok = m->d_tok;
	S.pos = m->d_pos;
	S.dim = c.dim;
	S.n_head = c.n_head;
	S.n_kv = c.n_kv_head;
	S.hd = c.head_dim;
	S.max_ctx = c.max_ctx;
	S.nsplit = m->nsplit;
	S.two = att2_two(ctx, c.n_head / c.n_kv_head);
	S.fat_max = att2_fat_max(ctx, c.n_head, c.n_kv_head, c.head_dim);
	S.ring_after = att2_ring_after(ctx, c.n_head, c.n_kv_head, c.head_dim);
	S.eps = c.eps;
	const persist_fn fn = persist_kernels[uniform == SK_Q8_0 ? 1 : 0][c.head_dim <= 64 ? 0 : 1];
	smem = (smem + 15) & ~(size_t)15;
	if (smem > (size_t)ctx->smem_optin - 32 * 1024) return SK_OK;  // (beside the attention's static shared memory)
	if (smem > 48 * 1024)
		CK(ctx, cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
	int per_sm = 0;
	CK(ctx, cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, MK_WARPS * 32, smem));
	per_sm = std::min(per_sm, MK_MINB);
	if (per_sm < 1) return SK_OK;
	if (!m->d_pl) {
		int rc = model_alloc(m, sizeof(PLayer) * pl.size(), (void **)&m->d_pl);
		if (rc != SK_OK) return rc;
	}
	if (!m->d_ps) {
		int rc = model_alloc(m, sizeof(PStep), (void **)&m->d_ps);
		if (rc != SK_OK) return rc;
	}
	S.L = m->d_pl;
	int rc = sk_upload(ctx, m->d_pl, pl.data(), sizeof(PLayer) * pl.size());
	if (rc == SK_OK) rc = sk_upload(ctx, m->d_ps, &S, sizeof S);
	if (rc != SK_OK) return rc;
	m->pfn = fn;
	m->pgrid = ctx->sm_count * per_sm;
	m->psmem = smem;
	m->pers = true;
	return SK_OK;
}

static int persist_launch(sk_model *m) {
	sk_ctx *ctx = m->ctx;
	void *args[] = {&m->d_ps};
	CK(ctx, cudaLaunchCooperativeKernel((const void *)m->pfn, dim3(m->pgrid), dim3(MK_WARPS * 32), args, m->psmem,
	                                    ctx->stream));
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

// prof_mark records an event named after the kernel just enqueued (profile
// mode only).
static void prof_mark(sk_model *m, const char *name) {
	if (!m->prof) return;
	if (m->prof_n == (int)m->prof_ev.size()) {
		cudaEvent_t e;
		if (cudaEventCreate(&e) != cudaSuccess) return;
		m->prof_ev.push_back(e);
		m->prof_name.push_back(name);
	}
	m->prof_name[m->prof_n] = name;
	cudaEventRecord(m->prof_ev[m->prof_n++], m->ctx->stream);
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

// The decode attention's splits for the step being enqueued: one cluster of
// fat splits in the short-context graph where ATT_MMA_FAT applies.
static bool att2_long(const sk_model *m, int pos);
static int att2_step_nsplit(const sk_model *m) {
	const sk_model_config &c = m->cfg;
	if (!m->att_long && att2_fat_max(m->ctx, c.n_head, c.n_kv_head, c.head_dim) > 0)
		return std::min(ATT_CLN, m->nsplit);
	return m->nsplit;
}

// Layer L's Q/K/V GEMV and decode attention as one k_qkv_ring launch, in
// QA_FUSE builds where it applies (*done then): the long-context graph of a model whose decode
// attention runs the ring kernel, Q8_0 Q/K/V matrices taking k_gemv2's
// kernel of 4 pieces per item, and a grid of n_kv x nsplit blocks whose
// virtual GEMV blocks each hold the rows of one kv head (head_dim = 2 x
// G2_WARPS x nsplit, one query head per kv head), all resident at once.
// Elsewhere the caller launches the two kernels.
static int qkv_ring_launch(sk_model *m, const Layer &L, const sk_epilogue *qkv, bool *done) {
	*done = false;
#if QA_FUSE
	sk_ctx *ctx = m->ctx;
	const sk_model_config &c = m->cfg;
	if (!ATT_RING_PDL || !m->att2 || c.qk_norm) return SK_OK;
	const int nh = c.n_head, nkv = c.n_kv_head, hd = c.head_dim;
	const int nsplit = att2_step_nsplit(m), grid = nkv * nsplit;
	// (the ring: one head per kv head of 128)
	if (!att2_ring_launch(ctx, nh, nkv, hd, nsplit, m->att_long)) return SK_OK;
	if (hd != 2 * G2_WARPS * nsplit || 2 * G2_WARPS * grid != nh * hd) return SK_OK;
	const sk_matrix *W[3] = {L.wq, L.wk, L.wv};
	for (const sk_matrix *w : W)
		if (!w || w->type != SK_Q8_0 || w->cols != c.dim) return SK_OK;
	if (L.wq->rows != nh * hd || L.wk->rows != nkv * hd || L.wv->rows != nkv * hd) return SK_OK;
	int need_q, need_f;
	Mats ms = g2_mats(3, W, false, &need_q, &need_f);
	const int total = ms.end[2], npairs = (total + 1) / 2;
	if (gemv2_pick(3, W, false, npairs <= ctx->sm_count * G2_MINB * G2_WARPS) != gemv2_kernels[6]) return SK_OK;
	if (g2_prologue_bytes(c.dim, need_q, need_f) > (size_t)ATT_RING_KEYS * 512) return SK_OK;
	int rc = check_epi(ctx, qkv, total, 3, W[0]->rows);
	if (rc != SK_OK) return rc;
	void (*k)(Mats, const float *, const float *, float, int, int, EpiDev, const float *, const __half *,
	          const __half *, float *, float *, int *, int *, int, int, int, int, int, const int32_t *) =
	    k_qkv_ring<SK_Q8_0, 4>;
	// every block resident at once (the blocks of a kv head wait for each other)
	int nb = 0;
	cudaFuncAttributes fa;
	if (cudaFuncGetAttributes(&fa, k) != cudaSuccess || fa.sharedSizeBytes + ATT_RING_BYTES > (size_t)ctx->smem_optin ||
	    cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, ATT_RING_BYTES) != cudaSuccess ||
	    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, k, ATT3_WARPS * 32, ATT_RING_BYTES) != cudaSuccess) {
		cudaGetLastError();
		return SK_OK;
	}
	if (nb * ctx->sm_count < grid) return SK_OK;
	ms.pf = g2_pf(ctx, 3, W, npairs, grid);
	int *counter = attn2_counters(m->part, nh, hd, nsplit);
	CK(ctx, launch_pdl(ctx, k, dim3(grid), dim3(ATT3_WARPS * 32), (size_t)ATT_RING_BYTES, ms, (const float *)m->x,
	                   (const float *)L.attn_norm, c.eps, need_q, need_f, epidev(qkv), (const float *)m->q,
	                   (const __half *)L.kc, (const __half *)L.vc, m->part, m->att, counter, counter + nkv, nh, nkv, hd,
	                   c.max_ctx, nsplit, (const int32_t *)m->d_pos));
	*done = true;
#else
	(void)m;
	(void)L;
	(void)qkv;
#endif
	return SK_OK;
}

// The v2 forward pass: for one token the fused GEMVs (6 launches per layer),
// for more the tensor-core GEMMs and the tiled prefill attention.
static int enqueue_forward_v2(sk_model *m, int n) {
	sk_ctx *ctx = m->ctx;
	const sk_model_config &c = m->cfg;
	const int qd = c.n_head * c.head_dim, kd = c.n_kv_head * c.head_dim;
	const bool dec = n == 1;  // profile marks: "p." names for prefill
	m->prof_n = 0;
	prof_mark(m, "start");
	if (dec && m->pers) {
		int rc = persist_launch(m);
		return rc == SK_OK ? sk_argmax(ctx, m->logits, c.vocab, m->d_next) : rc;
	}
	int rc = sk_get_rows(ctx, m->embd, m->d_tok, m->x, n);
	prof_mark(m, dec ? "get_rows" : "p.get_rows");
	sk_epilogue qkv = qkv_epi(m);
	sk_epilogue acc = plain_epi(m->x, c.dim, 1);
	sk_epilogue sw = plain_epi(m->g, c.ffn, 0);
	sw.mode = SK_EPI_SWIGLU;
	sk_epilogue st = plain_epi(m->qkv, qd + 2 * kd, 0);
	// the decode GEMVs' FFN hand-off (f16 with SPARKINFER_DOWN_F16=1)
	const bool dh = n == 1 && down_half(m);
	sk_epilogue swd = sw;
	if (dh) swd.mode = SK_EPI_SWIGLU_F16;
	for (int l = 0; rc == SK_OK && l < c.n_layer; l++) {
		Layer &L = m->layers[l];
		qkv.k_cache = (uint16_t *)L.kc;
		qkv.v_cache = (uint16_t *)L.vc;
		const sk_matrix *wqkv[3] = {L.wq, L.wk, L.wv};
		const sk_matrix *wgu[2] = {L.gate, L.up};
		if (n == 1) {
			// the Q/K/V GEMV and the attention in one launch where it applies
			bool fused = false;
			if (!c.qk_norm) rc = qkv_ring_launch(m, L, &qkv, &fused);
			if (fused) prof_mark(m, "qkv+attention");
			if (rc == SK_OK && !fused) {
				if (!c.qk_norm) {
					rc = gemv2_launch(ctx, 3, wqkv, m->x, L.attn_norm, c.eps, &qkv, 0);
				} else {
					rc = gemv2_launch(ctx, 3, wqkv, m->x, L.attn_norm, c.eps, &st, 0);
					if (rc == SK_OK) rc = sk_qkv_post(ctx, m->qkv, 1, L.q_norm, L.k_norm, c.eps, &qkv);
				}
				prof_mark(m, "qkv");
				if (rc == SK_OK) {
					if (m->att2)
						rc = attn2_decode(ctx, m->q, L.kc, L.vc, m->att, c.n_head, c.n_kv_head, c.head_dim,
						                  c.max_ctx, m->d_pos, m->part, att2_step_nsplit(m), m->att_long);
					else
						rc = attention(ctx, m->q, L.kc, L.vc, m->att, 1, c.n_head, c.n_kv_head, c.head_dim,
						               c.max_ctx, m->d_pos);
				}
				prof_mark(m, "attention");
			}
			if (rc == SK_OK) rc = gemv2_launch(ctx, 1, &L.wo, m->att, nullptr, 0.f, &acc, 0);
			prof_mark(m, "o");
			if (rc == SK_OK) rc = gemv2_launch(ctx, 2, wgu, m->x, L.ffn_norm, c.eps, &swd, 0);
			prof_mark(m, "gate_up");
			if (rc == SK_OK) rc = gemv2_launch(ctx, 1, &L.down, m->g, nullptr, 0.f, &acc, 0, dh);
			prof_mark(m, "down");
			continue;
		}
		rc = sk_rmsnorm(ctx, m->x, L.attn_norm, m->xn, c.dim, n, c.eps);
		prof_mark(m, "p.norm");
		if (rc == SK_OK) rc = gemm_fused(ctx, 3, wqkv, m->xn, n, c.qk_norm ? &st : &qkv, m->tmp2);
		prof_mark(m, "p.qkv");
		if (rc == SK_OK && c.qk_norm) rc = sk_qkv_post(ctx, m->qkv, n, L.q_norm, L.k_norm, c.eps, &qkv);
		if (rc == SK_OK) {
			if (m->att2)
				rc = attn_prefill2(ctx, m->q, L.kc, L.vc, m->att, n, c.n_head, c.n_kv_head, c.head_dim, c.max_ctx,
				                   m->d_pos);
			else
				rc = attention(ctx, m->q, L.kc, L.vc, m->att, n, c.n_head, c.n_kv_head, c.head_dim, c.max_ctx,
				               m->d_pos);
		}
		prof_mark(m, "p.attention");
		if (rc == SK_OK) rc = gemm_fused(ctx, 1, &L.wo, m->att, n, &acc, m->tmp2);
		prof_mark(m, "p.o");
		if (rc == SK_OK) rc = sk_rmsnorm(ctx, m->x, L.ffn_norm, m->xn, c.dim, n, c.eps);
		prof_mark(m, "p.norm");
		if (rc == SK_OK) rc = gemm_fused(ctx, 2, wgu, m->xn, n, &sw, m->tmp2);
		prof_mark(m, "p.gate_up");
		if (rc == SK_OK) rc = gemm_fused(ctx, 1, &L.down, m->g, n, &acc, m->tmp2);
		prof_mark(m, "p.down");
	}
	const float *last = m->x + (size_t)(n - 1) * c.dim;
	const sk_matrix *out = m->output ? m->output : m->embd;
	sk_epilogue lo = plain_epi(m->logits, c.vocab, 0);
	if (rc == SK_OK) rc = gemv2_launch(ctx, 1, &out, last, m->out_norm, c.eps, &lo, 0);
	prof_mark(m, dec ? "output" : "p.output");
	if (rc == SK_OK) rc = sk_argmax(ctx, m->logits, c.vocab, m->d_next);
	prof_mark(m, dec ? "argmax" : "p.argmax");
	return rc;
}

static int enqueue(sk_model *m, int n) {
	return m->variant == SK_VARIANT_V2 ? enqueue_forward_v2(m, n) : enqueue_forward(m, n);
}

// enqueue_step enqueues one decode step: the token and position in, the
// forward pass, the argmax out (captured once into the decode graph).
static int enqueue_step(sk_model *m) {
	sk_ctx *ctx = m->ctx;
	CK(ctx, cudaMemcpyAsync(m->d_tok, m->h_step, 4, cudaMemcpyHostToDevice, ctx->stream));
	CK(ctx, cudaMemcpyAsync(m->d_pos, m->h_step + m->chunk, 4, cudaMemcpyHostToDevice, ctx->stream));
	int rc = enqueue(m, 1);
	if (rc != SK_OK) return rc;
	CK(ctx, cudaMemcpyAsync(m->h_step + m->chunk + 1, m->d_next, 4, cudaMemcpyDeviceToHost, ctx->stream));
	return SK_OK;
}

// prof_collect adds the times between a finished step's events to the
// per-kernel sums (profile mode).
static int prof_collect(sk_model *m, int ntok) {
	for (int i = 1; i < m->prof_n; i++) {
		float ms = 0.f;
		CK(m->ctx, cudaEventElapsedTime(&ms, m->prof_ev[i - 1], m->prof_ev[i]));
		auto it = m->prof_sum.begin();
		while (it != m->prof_sum.end() && it->first != m->prof_name[i]) ++it;
		if (it == m->prof_sum.end()) {
			m->prof_sum.push_back({m->prof_name[i], {0, 0.0}});
			it = m->prof_sum.end() - 1;
		}
		it->second.first++;
		it->second.second += 1000.0 * ms;
	}
	if (ntok == 1) m->prof_steps++;
	else m->prof_ptok += ntok;
	return SK_OK;
}

extern "C" int sk_model_variant(const sk_model *m) { return m ? m->variant : 0; }
extern "C" int sk_model_persistent(const sk_model *m) { return m && m->step_init && m->pers ? 1 : 0; }

// Whether decode attention at position pos may take more than one cluster of
// splits, so that the kernel-per-op step runs the two-level combine kernel
// (graph[1]; the persistent step combines the same way in one graph), or, at
// one head per kv head, is past att2_short_max (graph[1] without the
// one-block-per-SM kernel).
static bool att2_long(const sk_model *m, int pos) {
	const sk_model_config &c = m->cfg;
	const int G = c.n_head / c.n_kv_head;
	if (!m->att2) return false;
	const int fmax = att2_fat_max(m->ctx, c.n_head, c.n_kv_head, c.head_dim);
	if (fmax > 0) return pos + 1 > fmax;
	const int ra = att2_ring_after(m->ctx, c.n_head, c.n_kv_head, c.head_dim);
	if (ra != std::numeric_limits<int>::max()) return pos + 1 > ra;
	const int smax = att2_short_max(m->ctx, c.n_head, c.n_kv_head, c.head_dim);
	if (smax > 0) return pos + 1 > smax;
	return att2_two(m->ctx, G) && m->nsplit > ATT_CLN && pos + 1 > ATT_CLN * att2_min(G);
}

// the decode graph for the step being enqueued
static int step_graph(const sk_model *m) { return m->pers ? 0 : m->att_long; }

// Capture the decode step into m->graph[step_graph(m)].
static int capture_step(sk_model *m) {
	const int gi = step_graph(m);
	sk_ctx *ctx = m->ctx;
	cudaGraph_t g;
	CK(ctx, cudaStreamBeginCapture(ctx->stream, cudaStreamCaptureModeThreadLocal));
	int rc = enqueue_step(m);
	cudaError_t e = cudaStreamEndCapture(ctx->stream, &g);
	if (rc != SK_OK) {
		if (e == cudaSuccess) cudaGraphDestroy(g);
		return rc;
	}
	CK(ctx, e);
	e = cudaGraphInstantiateWithFlags(&m->graph[gi], g, 0);
	cudaGraphDestroy(g);
	CK(ctx, e);
	m->graph_ready[gi] = true;
	return SK_OK;
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
	m->h_step[m->chunk] = pos;
	// profile mode: the step's launches directly, an event after each
	const bool prof = m->prof && m->variant == SK_VARIANT_V2;
	if (!m->step_init) {
		rc = persist_setup(m);
		if (rc != SK_OK) return rc;
		m->step_init = true;
	}
	m->att_long = att2_long(m, pos);
	if (prof) {
		rc = enqueue_step(m);
		if (rc != SK_OK) return rc;
	} else {
		if (!m->graph_ready[step_graph(m)]) {
			rc = capture_step(m);
			if (rc != SK_OK && m->pers) {
				// a driver that cannot capture the cooperative launch: the
				// kernel-per-op step
				cudaGetLastError();
				m->pers = false;
				rc = capture_step(m);
			}
			if (rc != SK_OK) return rc;
		}
		CK(ctx, cudaGraphLaunch(m->graph[step_graph(m)], ctx->stream));
	}
	if (logits) CK(ctx, cudaMemcpyAsync(logits, m->logits, (size_t)c.vocab * 4, cudaMemcpyDeviceToHost, ctx->stream));
	CK(ctx, cudaStreamSynchronize(ctx->stream));
	if (prof) {
		rc = prof_collect(m, 1);
		if (rc != SK_OK) return rc;
	}
	if (next) *next = m->h_step[m->chunk + 1];
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
	for (int done = 0; done < n; done += m->chunk) {
		int k = std::min(m->chunk, n - done);
		memcpy(m->h_step, tokens + done, (size_t)k * 4);
		m->h_step[m->chunk] = pos + done;
		CK(ctx, cudaMemcpyAsync(m->d_tok, m->h_step, (size_t)k * 4, cudaMemcpyHostToDevice, ctx->stream));
		CK(ctx, cudaMemcpyAsync(m->d_pos, m->h_step + m->chunk, 4, cudaMemcpyHostToDevice, ctx->stream));
		// a chunk of one token runs decode attention: the kernel a decode step at
		// that position runs, so that its result does not depend on earlier calls
		m->att_long = att2_long(m, pos + done);
		rc = enqueue(m, k);
		if (rc != SK_OK) return rc;
		// the host buffer is reused by the next chunk: wait for the copies
		CK(ctx, cudaStreamSynchronize(ctx->stream));
		if (m->prof && m->variant == SK_VARIANT_V2 && k > 1) {
			rc = prof_collect(m, k);
			if (rc != SK_OK) return rc;
		}
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
