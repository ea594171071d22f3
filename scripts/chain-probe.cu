// The ceiling of a decode step's chain of launches on this GPU, without any
// arithmetic: launches that only stream bytes from HBM, shaped like one
// Llama-2-7B Q8_0 decode layer at 4k tokens of context (Q/K/V 53.5 MB, the
// attention's K and V 67.1 MB, O 17.8 MB, gate/up 95.8 MB, down 47.9 MB),
// 32 layers captured in one CUDA graph, launched with programmatic dependent
// launch as the engine launches its kernels. Each launch is one wave of
// blocks, each block a contiguous share, every thread U 16-byte loads in
// flight; before the launch wait a block issues its first U loads (as the
// GEMVs' first item) or none. Printed: the plain read bandwidth of a 2 GiB
// buffer per U, then each chain's time per layer against its bytes at that
// bandwidth, and the same bytes in fewer launches (what each launch
// boundary costs); once with blocks free to pile up on an SM (the early
// launched grids' blocks wait beside the running one) and once with 100 KB
// of shared memory per block (2 per SM, as the engine's GEMV and ring
// kernels). Last, at 2 per SM with the first loads issued before the wait,
// each block also reads a 16 KB activation after the wait and reduces it
// across the block (a GEMV prologue's dependent read and barrier), from one
// copy or from 8 (block b reads copy b % 8: whether one vector's L2 lines
// are the bottleneck). Then the one copy loaded plainly, through L2 only
// (__ldcg) and through the non-coherent path (__ldg), twice each. Last, the
// launch wait replaced by counts: each block waits for every block of the
// launch before to have counted itself done (g_flag; x then through L2
// only, as a kernel without the launch wait would have to read it).
// Results: median of 15 replays. (docs/PERF.md's session 20 and 28
// sections have the figures.)
//   nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -o /tmp/chain-probe scripts/chain-probe.cu
//   /tmp/chain-probe [x|f]   (x: only the runs with an activation read;
//                             f: the same without the 8 copies)
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

static void ck(cudaError_t e, const char *what) {
	if (e != cudaSuccess) {
		fprintf(stderr, "chain-probe: %s: %s\n", what, cudaGetErrorString(e));
		exit(1);
	}
}

template <int NA>
__device__ __forceinline__ uint4 ld16(const uint4 *p) {
	uint4 v;
	if (NA)
		asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
		             : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
		             : "l"(p));
	else
		v = __ldg(p);
	return v;
}

// Block b of the grid reads its share of p[0, n16) (16-byte units); dep is
// read after the launch wait and written at the end (the chain's data
// dependency, as x between the engine's kernels).
// x: the activation every block of a launch reads after the wait (16 KB,
// as a 4,096-column GEMV's), g_xrep copies of it 16 KB apart, block b reading
// copy b % g_xrep; each block also writes its slice of every copy at its
// end (the producer's epilogue). g_xrep 0: no x.
__device__ float *g_x;
__device__ int g_xrep;
// g_flag 1: no launch wait; each block waits instead for every block of the
// launch before to have counted itself done in g_cnt (thread 0 spins with an
// acquire load, then a block barrier), and counts itself done at its end
// (block barrier, then a release add by thread 0). The launch's index in the
// graph comes in pre's upper bits (0: the first, no wait); the graph zeroes
// g_cnt first.
__device__ int g_flag;
// how a block loads x: 0 plain loads, 1 __ldcg (L2 only), 2 __ldg (the
// non-coherent path; x is read-only once the launch wait returns)
__device__ int g_xmode;
__device__ unsigned *g_cnt;
__device__ __forceinline__ unsigned ld_acquire(const unsigned *p) {
	unsigned v;
	asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
	return v;
}
template <int U, int NA>
__global__ void __launch_bounds__(256, 2) k_read(const uint4 *__restrict__ p, size_t n16, unsigned *dep, int pre) {
	const size_t per = ((n16 + gridDim.x - 1) / gridDim.x + 255) & ~(size_t)255;
	const size_t beg = (size_t)blockIdx.x * per, end = min(n16, beg + per);
	unsigned acc = 0;
	uint4 v[U];
	size_t i = beg + threadIdx.x;
	bool have = false;
	const int li = pre >> 1;
	pre &= 1;
	if (pre && i < end) {
#pragma unroll
		for (int u = 0; u < U; u++) v[u] = ld16<NA>(p + min(i + (size_t)u * 256, end - 1));
		have = true;
	}
	asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
	const int flag = g_flag;
	if (!flag) {
		asm volatile("griddepcontrol.wait;" ::: "memory");
	} else {
		if (li > 0 && threadIdx.x == 0)
			while (ld_acquire(g_cnt + li - 1) < gridDim.x) {
			}
		__syncthreads();
	}
	acc ^= *(volatile unsigned *)dep;
	const int xrep = g_xrep;
	float *xb = g_x;
	if (xrep > 0) {
		__shared__ float red[8];
		const float4 *xc = (const float4 *)(xb + (size_t)(blockIdx.x % xrep) * 4096);
		float4 xv[4];
#pragma unroll
		for (int j = 0; j < 4; j++) {
			const float4 *q = xc + 4 * threadIdx.x + j;
			xv[j] = g_xmode == 1 ? __ldcg(q) : g_xmode == 2 ? __ldg(q) : *q;
		}
		float ss = 0.f;
#pragma unroll
		for (int j = 0; j < 4; j++) ss += xv[j].x * xv[j].x + xv[j].y * xv[j].y + xv[j].z * xv[j].z + xv[j].w * xv[j].w;
		for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
		if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = ss;
		__syncthreads();
		acc ^= __float_as_uint(red[0] + red[7]);
	}
	if (have) {
#pragma unroll
		for (int u = 0; u < U; u++) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
		i += (size_t)U * 256;
	}
	for (; i < end; i += (size_t)U * 256) {
#pragma unroll
		for (int u = 0; u < U; u++) v[u] = ld16<NA>(p + min(i + (size_t)u * 256, end - 1));
#pragma unroll
		for (int u = 0; u < U; u++) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
	}
	if (acc == 0x9e3779b9u) dep[1] = acc;  // (never: keeps the loads)
	if (xrep > 0) {  // this block's slice of every copy of the next launch's x
		const int per = (4096 + gridDim.x - 1) / gridDim.x;
		if (threadIdx.x < per && blockIdx.x * per + threadIdx.x < 4096)
			for (int r = 0; r < xrep; r++) xb[(size_t)r * 4096 + blockIdx.x * per + threadIdx.x] = (float)(acc & 7);
	}
	if (blockIdx.x == 0 && threadIdx.x == 0) dep[0] = 0;
	if (flag) {
		__syncthreads();
		if (threadIdx.x == 0) {
			__threadfence();
			asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(g_cnt + li) : "memory");
		}
	}
}

typedef void (*kfn)(const uint4 *, size_t, unsigned *, int);

static size_t g_smem = 0;  // dynamic shared memory per block: limits the blocks per SM
static unsigned *h_cnt = nullptr;  // g_cnt (zeroed at the start of each graph when g_flag)
static int h_flag = 0;

static void launch(kfn k, int grid, const uint4 *p, size_t n16, unsigned *dep, int pre, bool pdl, cudaStream_t s) {
	cudaLaunchConfig_t cfg = {};
	cfg.gridDim = dim3(grid);
	cfg.blockDim = dim3(256);
	cfg.stream = s;
	cfg.dynamicSmemBytes = g_smem;
	cudaLaunchAttribute attr[1] = {};
	attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
	attr[0].val.programmaticStreamSerializationAllowed = 1;
	cfg.attrs = attr;
	cfg.numAttrs = pdl ? 1 : 0;
	ck(cudaLaunchKernelEx(&cfg, k, p, n16, dep, pre), "launch");
}

// median time (us) of 15 replays of graph g
static double replay(cudaGraphExec_t g, cudaStream_t s) {
	cudaEvent_t a, b;
	ck(cudaEventCreate(&a), "event");
	ck(cudaEventCreate(&b), "event");
	std::vector<double> t;
	for (int r = 0; r < 18; r++) {
		ck(cudaEventRecord(a, s), "record");
		ck(cudaGraphLaunch(g, s), "graph launch");
		ck(cudaEventRecord(b, s), "record");
		ck(cudaEventSynchronize(b), "sync");
		float ms = 0;
		ck(cudaEventElapsedTime(&ms, a, b), "elapsed");
		if (r >= 3) t.push_back(ms * 1e3);
	}
	std::sort(t.begin(), t.end());
	cudaEventDestroy(a);
	cudaEventDestroy(b);
	return t[t.size() / 2];
}

// time per layer (us) of nl layers of the launches of sizes mb (MB) each,
// consecutive regions of buf
static double chain(kfn k, int grid, const char *buf, size_t bufbytes, const std::vector<double> &mb, int nl, int pre,
                    bool pdl, unsigned *dep, cudaStream_t s) {
	cudaGraph_t g;
	ck(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "capture");
	if (h_flag) ck(cudaMemsetAsync(h_cnt, 0, 4096 * sizeof(unsigned), s), "memset counters");
	size_t off = 0;
	int li = 0;
	for (int l = 0; l < nl; l++)
		for (double m : mb) {
			const size_t bytes = ((size_t)(m * 1e6) + 4095) & ~(size_t)4095;
			if (off + bytes > bufbytes) off = 0;
			launch(k, grid, (const uint4 *)(buf + off), bytes / 16, dep, pre | (li++ << 1), pdl, s);
			off += bytes;
		}
	ck(cudaStreamEndCapture(s, &g), "end capture");
	cudaGraphExec_t ge;
	ck(cudaGraphInstantiateWithFlags(&ge, g, 0), "instantiate");
	const double us = replay(ge, s) / nl;
	cudaGraphExecDestroy(ge);
	cudaGraphDestroy(g);
	return us;
}

int main(int argc, char **argv) {
	const bool fonly = argc > 1 && strcmp(argv[1], "f") == 0;  // x's loads and the counts, not the 8 copies
	const bool xonly = fonly || (argc > 1 && strcmp(argv[1], "x") == 0);  // only the runs with x
	cudaDeviceProp prop;
	ck(cudaGetDeviceProperties(&prop, 0), "props");
	const int sms = prop.multiProcessorCount;
	const size_t big = (size_t)10 << 30;  // 32 layers of 282 MB: the chain never rereads L2's bytes
	char *buf;
	ck(cudaMalloc(&buf, big), "malloc");
	ck(cudaMemset(buf, 1, big), "memset");
	unsigned *dep;
	ck(cudaMalloc(&dep, 64), "malloc");
	ck(cudaMemset(dep, 0, 64), "memset");
	cudaStream_t s;
	ck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
	printf("%s, %d SMs\n", prop.name, sms);
	ck(cudaMalloc(&h_cnt, 4096 * sizeof(unsigned)), "malloc counters");
	ck(cudaMemcpyToSymbol(g_cnt, &h_cnt, sizeof h_cnt), "symbol");

	struct K {
		const char *name;
		kfn k;
		int U;
	} ks[] = {{"U2", k_read<2, 0>, 2},   {"U4", k_read<4, 0>, 4},     {"U8", k_read<8, 0>, 8},
	          {"U16", k_read<16, 0>, 16}, {"U4na", k_read<4, 1>, 4}, {"U8na", k_read<8, 1>, 8}};
	const int grid = 2 * sms;
	double bw[6];
	for (int i = 0; i < 6; i++) {
		// plain read: 2 GiB in 8 launches of 256 MiB
		const double us = chain(ks[i].k, grid, buf, big, {268.435456}, 8, 0, false, dep, s);
		bw[i] = 268.435456e6 / (us * 1e-6) / 1e9;
		printf("plain read %-5s (%3d KB in flight per SM): %7.1f GB/s\n", ks[i].name, 2 * 256 * 16 * ks[i].U / 1024, bw[i]);
	}
	const std::vector<double> layer = {53.5, 67.1, 17.8, 95.8, 47.9}, fused2 = {53.5 + 67.1 + 17.8, 95.8 + 47.9},
	                          one = {282.1};
	const double lb = 282.1e6;
	for (int i = 0; i < 6; i++)
		ck(cudaFuncSetAttribute(ks[i].k, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 << 10), "smem attribute");
	for (int occ = 0; occ < 2 && !xonly; occ++) {
		for (int i : {1, 2, 3, 5}) {
			g_smem = occ ? 100 << 10 : 0;
			if (occ) printf("(100 KB of shared memory per block: at most 2 blocks per SM, as the engine's kernels)\n");
			for (int pdl = 0; pdl < 2; pdl++)
				for (int pre = 0; pre <= pdl; pre++) {
					const double t5 = chain(ks[i].k, grid, buf, big, layer, 32, pre, pdl, dep, s);
					const double t2 = chain(ks[i].k, grid, buf, big, fused2, 32, pre, pdl, dep, s);
					const double t1 = chain(ks[i].k, grid, buf, big, one, 32, pre, pdl, dep, s);
					printf("%-5s pdl %d pre %d: us per layer 5 launches %.1f, 2 launches %.1f, 1 launch %.1f (bytes at plain "
					       "read %.1f); per boundary %.2f us\n",
					       ks[i].name, pdl, pre, t5, t2, t1, lb / (bw[i] * 1e3), (t5 - t1) / 4);
				}
		}
	}
	float *xdev;
	ck(cudaMalloc(&xdev, 16 * 4096 * 4), "malloc x");
	ck(cudaMemset(xdev, 0, 16 * 4096 * 4), "memset x");
	ck(cudaMemcpyToSymbol(g_x, &xdev, sizeof xdev), "symbol");
	// with x: every block reads a 16 KB activation after the wait, one copy or 8
	g_smem = 100 << 10;
	printf("(100 KB of shared memory per block; each block reads x after the wait)\n");
	for (int xrep : {0, 1, 8})
		for (int i : {2, 3}) {
			if (fonly && xrep == 8) continue;
			ck(cudaMemcpyToSymbol(g_xrep, &xrep, sizeof xrep), "symbol");
			const double t5 = chain(ks[i].k, grid, buf, big, layer, 32, 1, true, dep, s);
			const double t1 = chain(ks[i].k, grid, buf, big, one, 32, 1, true, dep, s);
			printf("%-5s pdl 1 pre 1, x copies %d: us per layer 5 launches %.1f, 1 launch %.1f; per boundary %.2f us\n",
			       ks[i].name, xrep, t5, t1, (t5 - t1) / 4);
		}
	// x loaded plainly, through L2 only and through the non-coherent path, twice
	for (int rep = 0; rep < 2; rep++)
		for (int xm : {0, 1, 2})
			for (int i : {2, 3}) {
				const int one_copy = 1;
				ck(cudaMemcpyToSymbol(g_xrep, &one_copy, sizeof one_copy), "symbol");
				ck(cudaMemcpyToSymbol(g_xmode, &xm, sizeof xm), "symbol");
				const double t5 = chain(ks[i].k, grid, buf, big, layer, 32, 1, true, dep, s);
				const double t1 = chain(ks[i].k, grid, buf, big, one, 32, 1, true, dep, s);
				printf("%-5s pdl 1 pre 1, x copies 1, x loads %s: us per layer 5 launches %.1f, 1 launch %.1f; per boundary %.2f us\n",
				       ks[i].name, xm == 0 ? "plain" : xm == 1 ? "ldcg " : "ldg  ", t5, t1, (t5 - t1) / 4);
			}
	{
		const int xm = 1;  // (the flag runs below load x through L2 only)
		ck(cudaMemcpyToSymbol(g_xmode, &xm, sizeof xm), "symbol");
	}
	// the same with each launch waiting on the blocks' counts instead of the launch wait
	printf("(the same, each block waiting for the launch before's blocks to count themselves done, g_flag)\n");
	h_flag = 1;
	ck(cudaMemcpyToSymbol(g_flag, &h_flag, sizeof h_flag), "symbol");
	for (int xrep : {0, 1})
		for (int i : {2, 3}) {
			ck(cudaMemcpyToSymbol(g_xrep, &xrep, sizeof xrep), "symbol");
			const double t5 = chain(ks[i].k, grid, buf, big, layer, 32, 1, true, dep, s);
			const double t1 = chain(ks[i].k, grid, buf, big, one, 32, 1, true, dep, s);
			printf("%-5s pdl 1 pre 1 flags, x copies %d: us per layer 5 launches %.1f, 1 launch %.1f; per boundary %.2f us\n",
			       ks[i].name, xrep, t5, t1, (t5 - t1) / 4);
		}
	return 0;
}
