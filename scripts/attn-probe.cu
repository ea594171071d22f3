// Decode attention alone: how many clusters of the attention kernels the GPU
// places at once (cudaOccupancyMaxActiveClusters; the ring kernel with its
// dynamic shared memory at cluster sizes 2-8), and the time of one decode
// attention launch at TinyLlama's and Llama-2-7B's shapes (32 heads; 4 kv
// heads at head_dim 64, 32 at 128) after 128, 1k, 4k and 16k tokens of
// context: the median of 15 replays of a CUDA graph of 20 launches, per
// launch, and the K/V bytes over that time; first, for scale, a plain read of
// 16, 64 and 256 MiB timed the same way. The kernels source is compiled in
// (its static functions are called directly), so any variant builds with -D:
//   nvcc -O3 -std=c++17 -Ikernels -gencode arch=compute_90,code=sm_90 -o /tmp/attn-probe scripts/attn-probe.cu \
//        -DKSRC='"'$PWD/kernels/sparkinfer_kernels.cu'"' [-DATT_LD8=0 ...]
//   /tmp/attn-probe            # everything
//   /tmp/attn-probe 7b 4095    # one shape at one position (for ncu)
#ifndef KSRC
#define KSRC "../kernels/sparkinfer_kernels.cu"
#endif
#include KSRC
#include <algorithm>
#include <vector>

static void ck(cudaError_t e, const char *what) {
	if (e != cudaSuccess) {
		fprintf(stderr, "attn-probe: %s: %s\n", what, cudaGetErrorString(e));
		exit(1);
	}
}

static void clusters_report() {
	// the columns of att_kern
	const char *names[] = {"hd64stg", "hd64", "hd128stg", "hd128", "hd256", "hd128ld8", "hd128ld8x1", "hd64mma", "hd128ring"};
	static_assert(sizeof names / sizeof names[0] == sizeof att_kern[0] / sizeof att_kern[0][0], "att_kern columns");
	for (int row = 1; row <= 2; row++)
		for (int col = 0; col < (int)(sizeof names / sizeof names[0]); col++)
			for (int cs : {4, 8}) {
				cudaLaunchConfig_t cfg;
				cudaLaunchAttribute attr;
				att_cluster_cfg(cfg, attr, dim3(1, cs), cs, nullptr);
				int n = -1;
				cudaError_t e = cudaOccupancyMaxActiveClusters(&n, att_kern[row][col], &cfg);
				printf("clusters row %d %-9s size %d: max active %d (%s)\n", row, names[col], cs, n,
				       cudaGetErrorString(e));
				cudaGetLastError();
			}
	// the ring kernel in clusters, with its dynamic shared memory (two blocks per SM)
	const attn_fn kr = att_kern[1][ATT_COL_RING];
	if (cudaFuncSetAttribute(kr, cudaFuncAttributeMaxDynamicSharedMemorySize, ATT_RING_BYTES) != cudaSuccess) {
		printf("clusters ring: %d B of dynamic shared memory do not fit (%s)\n", ATT_RING_BYTES,
		       cudaGetErrorString(cudaGetLastError()));
		return;
	}
	for (int cs = 2; cs <= 8; cs++) {
		cudaLaunchConfig_t cfg;
		cudaLaunchAttribute attr;
		att_cluster_cfg(cfg, attr, dim3(1, cs), cs, nullptr);
		cfg.dynamicSmemBytes = ATT_RING_BYTES;
		int n = -1;
		cudaError_t e = cudaOccupancyMaxActiveClusters(&n, kr, &cfg);
		printf("clusters ring (%d B dynamic) size %d: max active %d (%s)\n", ATT_RING_BYTES, cs, n, cudaGetErrorString(e));
		cudaGetLastError();
	}
}

// us per launch of 15 replays of a graph of 20 launches, sorted
static std::vector<float> replay_times(sk_ctx *ctx, cudaGraphExec_t ge) {
	cudaEvent_t a, b;
	cudaEventCreate(&a);
	cudaEventCreate(&b);
	std::vector<float> ts;
	for (int r = 0; r < 15; r++) {
		ck(cudaEventRecord(a, ctx->stream), "event");
		ck(cudaGraphLaunch(ge, ctx->stream), "graph launch");
		ck(cudaEventRecord(b, ctx->stream), "event");
		ck(cudaEventSynchronize(b), "replay");
		float ms;
		ck(cudaEventElapsedTime(&ms, a, b), "elapsed");
		ts.push_back(ms * 1000.f / 20);
	}
	std::sort(ts.begin(), ts.end());
	cudaEventDestroy(a), cudaEventDestroy(b);
	return ts;
}

// time decode attention for one shape at one position: median of reps of a
// graph of 20 launches
static void time_att(sk_ctx *ctx, const char *name, int n_head, int n_kv, int hd, int max_ctx, int pos) {
	size_t kvn = (size_t)n_kv * max_ctx * hd;
	std::vector<uint16_t> h(kvn);
	uint32_t x = 12345;
	for (auto &v : h) {
		x = x * 1664525u + 1013904223u;
		const __half hv = __float2half(((x >> 8) / 16777216.f - 0.5f) * 2.f);
		memcpy(&v, &hv, 2);
	}
	void *K, *V, *Q, *O, *P;
	ck(cudaMalloc(&K, kvn * 2), "cudaMalloc K");
	ck(cudaMalloc(&V, kvn * 2), "cudaMalloc V");
	ck(cudaMemcpy(K, h.data(), kvn * 2, cudaMemcpyHostToDevice), "upload K");
	ck(cudaMemcpy(V, h.data(), kvn * 2, cudaMemcpyHostToDevice), "upload V");
	std::vector<float> q(n_head * hd);
	for (auto &v : q) {
		x = x * 1664525u + 1013904223u;
		v = ((x >> 8) / 16777216.f - 0.5f);
	}
	ck(cudaMalloc(&Q, q.size() * 4), "cudaMalloc q");
	ck(cudaMemcpy(Q, q.data(), q.size() * 4, cudaMemcpyHostToDevice), "upload q");
	ck(cudaMalloc(&O, q.size() * 4), "cudaMalloc out");
	ck(cudaMalloc(&P, 4), "cudaMalloc pos");
	ck(cudaMemcpy(P, &pos, 4, cudaMemcpyHostToDevice), "upload pos");
	// one call through the API sets up scratch and counters
	if (sk_attention(ctx, (const float *)Q, (const uint16_t *)K, (const uint16_t *)V, (float *)O, 1, n_head, n_kv, hd,
	                 max_ctx, (const int32_t *)P) != SK_OK) {
		fprintf(stderr, "attn-probe: %s: %s\n", name, ctx->err);
		exit(1);
	}
	ck(cudaStreamSynchronize(ctx->stream), "first launch");
	const int ns = att2_nsplit(ctx, n_head, n_kv, max_ctx);
	cudaGraph_t g;
	cudaGraphExec_t ge;
	ck(cudaStreamBeginCapture(ctx->stream, cudaStreamCaptureModeThreadLocal), "capture");
	for (int i = 0; i < 20; i++)
		if (attn2_decode(ctx, (const float *)Q, (const __half *)K, (const __half *)V, (float *)O, n_head, n_kv, hd,
		                 max_ctx, (const int32_t *)P, ctx->scratch, ns,
		                 pos + 1 > att2_short_max(ctx, n_head, n_kv, hd)) != SK_OK) {  // the model's choice (att2_long)
			fprintf(stderr, "attn-probe: %s: %s\n", name, ctx->err);
			exit(1);
		}
	ck(cudaStreamEndCapture(ctx->stream, &g), "end capture");
	ck(cudaGraphInstantiateWithFlags(&ge, g, 0), "instantiate");
	const std::vector<float> ts = replay_times(ctx, ge);
	const int n = pos + 1;
	const double bytes = 2.0 * n_kv * n * hd * 2;
	printf("%-6s pos %5d splits %3d: %.2f us per launch (min %.2f), K+V %.2f MB = %.2f TB/s\n", name, pos, ns,
	       ts[ts.size() / 2], ts[0], bytes / 1e6, bytes / (ts[ts.size() / 2] * 1e-6) / 1e12);
	cudaGraphExecDestroy(ge);
	cudaGraphDestroy(g);
	cudaFree(K), cudaFree(V), cudaFree(Q), cudaFree(O), cudaFree(P);
}

// The read bandwidth ceiling: one launch reading n bytes (16 per thread per
// iteration, a grid of 4 blocks of 256 threads per SM), the median of 15
// replays of a graph of 20 launches, as time_att times the attention.
__global__ void k_read(const uint4 *p, size_t n16, unsigned *sink) {
	uint32_t acc = 0;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n16; i += (size_t)gridDim.x * blockDim.x) {
		const uint4 v = __ldcs(p + i);
		acc ^= v.x ^ v.y ^ v.z ^ v.w;
	}
	if (acc == 0x9e3779b9u) *sink = acc;  // (keeps the loads)
}
static void time_read(sk_ctx *ctx, size_t bytes) {
	void *buf, *sink;
	ck(cudaMalloc(&buf, bytes), "cudaMalloc read");
	ck(cudaMalloc(&sink, 4), "cudaMalloc sink");
	ck(cudaMemset(buf, 1, bytes), "memset read");
	cudaGraph_t g;
	cudaGraphExec_t ge;
	ck(cudaStreamBeginCapture(ctx->stream, cudaStreamCaptureModeThreadLocal), "capture");
	for (int i = 0; i < 20; i++)
		k_read<<<4 * ctx->sm_count, 256, 0, ctx->stream>>>((const uint4 *)buf, bytes / 16, (unsigned *)sink);
	ck(cudaStreamEndCapture(ctx->stream, &g), "end capture");
	ck(cudaGraphInstantiateWithFlags(&ge, g, 0), "instantiate");
	const std::vector<float> ts = replay_times(ctx, ge);
	printf("read   %.2f MB: %.2f us per launch = %.2f TB/s\n", bytes / 1e6, ts[ts.size() / 2],
	       bytes / (ts[ts.size() / 2] * 1e-6) / 1e12);
	cudaGraphExecDestroy(ge);
	cudaGraphDestroy(g);
	cudaFree(buf), cudaFree(sink);
}

int main(int argc, char **argv) {
	if (argc != 1 && argc != 3) {
		fprintf(stderr, "usage: attn-probe [tiny|7b POSITION (0..16383)]\n");
		return 2;
	}
	char err[256];
	sk_ctx *ctx = sk_create(0, err, sizeof err);
	if (!ctx) {
		fprintf(stderr, "attn-probe: %s\n", err);
		return 1;
	}
	sk_set_variant(ctx, SK_VARIANT_V2);
	if (argc == 3) {  // one shape (tiny|7b) at one position (for ncu)
		const int pos = atoi(argv[2]);
		if (pos < 0 || pos > 16383 || (strcmp(argv[1], "tiny") && strcmp(argv[1], "7b"))) {
			fprintf(stderr, "usage: attn-probe [tiny|7b POSITION (0..16383)]\n");
			return 2;
		}
		if (!strcmp(argv[1], "tiny")) time_att(ctx, "tiny", 32, 4, 64, 16384 + 256, pos);
		else time_att(ctx, "7b", 32, 32, 128, 16384 + 256, pos);
		sk_destroy(ctx);
		return 0;
	}
	printf("sm_count %d clusters %d att_fat %d att_ring %d\n", ctx->sm_count, ctx->clusters, ctx->att_fat, ctx->att_ring);
	for (size_t mb : {16, 64, 256}) time_read(ctx, mb << 20);
	clusters_report();
	for (int pos : {127, 1023, 4095, 16383}) {
		time_att(ctx, "tiny", 32, 4, 64, 16384 + 256, pos);
		time_att(ctx, "7b", 32, 32, 128, 16384 + 256, pos);
	}
	sk_destroy(ctx);
	return 0;
}
