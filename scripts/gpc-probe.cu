// Whether an SM's place on the chip sets its share of HBM bandwidth, and
// whether shares of a streaming launch weighted by it end sooner.
// 1. Groups of SMs: a thread block cluster's blocks are placed in one GPC,
//    so SMs that hold blocks of one cluster share a GPC. Launches of
//    clusters of 2, 4, 8 and 16 blocks (one block per SM: 150 KB of shared
//    memory), each block holding its SM for 30 us, 40 times per size, and
//    a union of the SMs of every cluster give the groups. A group is a GPC
//    or part of one: SMs that only ever land in clusters of 2 stay in pairs
//    (an H100: 7 groups of 16, one of 8 and 6 pairs). Printed: each group.
// 2. Streaming: one wave of 2 blocks per SM (100 KB of shared memory each)
//    reads T bytes; each block takes a unit by its SM (%smid) and an atomic
//    slot on that SM (0 or 1), before its timer starts. The units' lengths:
//    equal; equal per group (split over its SMs); or by each SM's measured
//    rate in 10 runs of the equal units. A block past its SM's 2 slots
//    reads nothing (counted: "extra"); a unit no block took is counted
//    ("orphans": its bytes unread, so that run's time is not comparable).
//    Also: units by block index (as the engine's launches, no atomic).
//    Printed per T: the median (over 30 launches, modes interleaved) of the
//    launch's event time and of its blocks' span (first start to last end,
//    %globaltimer), and the equal units' rate per SM, by group and its
//    spread. (docs/PERF.md's session 30 section has the figures.)
//   nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -o /tmp/gpc-probe scripts/gpc-probe.cu
//   /tmp/gpc-probe [map file to write: "sm group groupsize" lines]
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <vector>

static void ck(cudaError_t e, const char *what) {
	if (e != cudaSuccess) {
		fprintf(stderr, "gpc-probe: %s: %s\n", what, cudaGetErrorString(e));
		exit(1);
	}
}

__device__ __forceinline__ unsigned smid() {
	unsigned s;
	asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
	return s;
}
__device__ __forceinline__ unsigned long long gtime() {
	unsigned long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

__global__ void k_map(int *out) {
	if (threadIdx.x == 0) {
		out[blockIdx.x] = (int)smid();
		const unsigned long long t0 = gtime();
		while (gtime() - t0 < 30000) {
		}
	}
}

struct Rec {
	int sm, slot;
	unsigned long long t0, t1;
};

// mode 0: unit = block index; 1: unit = 2 * smid + slot (slot by atomic)
__global__ void __launch_bounds__(256, 2) k_stream(const uint4 *__restrict__ p, const unsigned long long *__restrict__ off,
                                                   int mode, int *ctr, Rec *rec, unsigned *sink) {
	__shared__ int s_unit, s_slot;
	const int sm = (int)smid();
	if (threadIdx.x == 0) {
		int slot = 0, unit = blockIdx.x;
		if (mode == 1) {
			slot = atomicAdd(ctr + sm, 1);
			unit = slot < 2 ? 2 * sm + slot : -1;
		}
		s_unit = unit;
		s_slot = slot;
	}
	__syncthreads();
	const int unit = s_unit;
	const unsigned long long t0 = gtime();
	unsigned acc = 0;
	if (unit >= 0) {
		const size_t beg = off[unit], end = off[unit + 1];
		constexpr int U = 8;
		for (size_t i = beg + threadIdx.x; i < end; i += (size_t)U * 256) {
			uint4 v[U];
#pragma unroll
			for (int u = 0; u < U; u++) v[u] = __ldg(p + min(i + (size_t)u * 256, end - 1));
#pragma unroll
			for (int u = 0; u < U; u++) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
		}
	}
	__syncthreads();
	if (acc == 0x9e3779b9u) sink[0] = acc;  // (never: keeps the loads)
	if (threadIdx.x == 0) rec[blockIdx.x] = Rec{sm, s_slot, t0, gtime()};
}

static int find(std::vector<int> &u, int a) { return u[a] == a ? a : u[a] = find(u, u[a]); }

int main(int argc, char **argv) {
	cudaDeviceProp prop;
	ck(cudaGetDeviceProperties(&prop, 0), "properties");
	const int nsm = prop.multiProcessorCount;
	printf("%s, %d SMs, L2 %d MB\n", prop.name, nsm, prop.l2CacheSize >> 20);

	// ---- 1. groups of SMs that share clusters
	std::vector<int> uf(nsm);
	std::iota(uf.begin(), uf.end(), 0);
	std::vector<int> seen(nsm, 0);
	int *d_map;
	ck(cudaMalloc(&d_map, 4096 * sizeof(int)), "malloc");
	const size_t msmem = 150 * 1024;
	ck(cudaFuncSetAttribute(k_map, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)msmem), "smem attr");
	ck(cudaFuncSetAttribute(k_map, cudaFuncAttributeNonPortableClusterSizeAllowed, 1), "nonportable attr");
	for (int cs : {2, 4, 8, 16}) {
		cudaLaunchConfig_t cfg = {};
		cfg.blockDim = dim3(32);
		cfg.dynamicSmemBytes = msmem;
		cudaLaunchAttribute at[1] = {};
		at[0].id = cudaLaunchAttributeClusterDimension;
		at[0].val.clusterDim.x = cs;
		at[0].val.clusterDim.y = 1;
		at[0].val.clusterDim.z = 1;
		cfg.attrs = at;
		cfg.numAttrs = 1;
		cfg.gridDim = dim3(cs);
		int maxc = 0;
		if (cudaOccupancyMaxActiveClusters(&maxc, k_map, &cfg) != cudaSuccess || maxc < 1) {
			cudaGetLastError();
			printf("clusters of %d: none placeable\n", cs);
			continue;
		}
		printf("clusters of %d: at most %d at once (%d SMs)\n", cs, maxc, maxc * cs);
		cfg.gridDim = dim3(maxc * cs);
		for (int r = 0; r < 40; r++) {
			ck(cudaLaunchKernelEx(&cfg, k_map, d_map), "map launch");
			std::vector<int> h(maxc * cs);
			ck(cudaMemcpy(h.data(), d_map, h.size() * sizeof(int), cudaMemcpyDeviceToHost), "map copy");
			for (int c = 0; c < maxc; c++)
				for (int b = 0; b < cs; b++) {
					const int s = h[c * cs + b];
					if (s < 0 || s >= nsm) continue;
					seen[s] = 1;
					const int a = find(uf, h[c * cs]), z = find(uf, s);
					if (a != z) uf[z] = a;
				}
		}
	}
	std::vector<int> grp(nsm, -1);
	std::vector<std::vector<int>> groups;
	for (int s = 0; s < nsm; s++) {
		const int r = find(uf, s);
		int g = -1;
		for (size_t k = 0; k < groups.size(); k++)
			if (find(uf, groups[k][0]) == r) g = (int)k;
		if (g < 0) {
			g = (int)groups.size();
			groups.push_back({});
		}
		groups[g].push_back(s);
		grp[s] = g;
	}
	int unseen = 0;
	for (int s = 0; s < nsm; s++) unseen += !seen[s];
	printf("groups (SMs sharing a cluster): %zu, SMs never seen in a cluster: %d\n", groups.size(), unseen);
	for (size_t g = 0; g < groups.size(); g++) {
		printf("  group %zu: %zu SMs:", g, groups[g].size());
		for (int s : groups[g]) printf(" %d", s);
		printf("\n");
	}
	if (argc > 1) {
		FILE *f = fopen(argv[1], "w");
		if (f) {
			for (int s = 0; s < nsm; s++) fprintf(f, "%d %d %zu\n", s, grp[s], groups[grp[s]].size());
			fclose(f);
		}
	}

	// ---- 2. streaming shares
	const size_t bufbytes = (size_t)1 << 30;
	uint4 *buf;
	ck(cudaMalloc(&buf, bufbytes), "malloc buf");
	ck(cudaMemset(buf, 1, bufbytes), "memset buf");
	const int nb = 2 * nsm;
	unsigned long long *d_off;
	int *d_ctr;
	Rec *d_rec;
	unsigned *d_sink;
	ck(cudaMalloc(&d_off, (nb + 1) * sizeof(unsigned long long)), "malloc");
	ck(cudaMalloc(&d_ctr, nsm * sizeof(int)), "malloc");
	ck(cudaMalloc(&d_rec, nb * sizeof(Rec)), "malloc");
	ck(cudaMalloc(&d_sink, 64), "malloc");
	const size_t ssmem = 100 * 1024;
	ck(cudaFuncSetAttribute(k_stream, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ssmem), "smem attr");
	cudaStream_t st;
	ck(cudaStreamCreate(&st), "stream");
	cudaEvent_t e0, e1;
	ck(cudaEventCreate(&e0), "event");
	ck(cudaEventCreate(&e1), "event");

	// offsets (16-byte units, rounded to 256) from per-unit weights
	auto offsets = [&](const std::vector<double> &w, size_t n16) {
		std::vector<unsigned long long> o(nb + 1, 0);
		const double tot = std::accumulate(w.begin(), w.end(), 0.0);
		double acc = 0;
		for (int u = 0; u < nb; u++) {
			acc += w[u];
			o[u + 1] = u + 1 == nb ? n16 : std::min<unsigned long long>(n16, (unsigned long long)(acc / tot * n16) & ~255ull);
		}
		return o;
	};
	struct Res {
		double ev, span;
		int extra, orphans;
	};
	std::vector<Rec> h(nb);
	auto run = [&](int mode, const std::vector<unsigned long long> &o, std::vector<double> *rate) {
		ck(cudaMemcpyAsync(d_off, o.data(), o.size() * sizeof(o[0]), cudaMemcpyHostToDevice, st), "copy off");
		ck(cudaMemsetAsync(d_ctr, 0, nsm * sizeof(int), st), "memset ctr");
		ck(cudaEventRecord(e0, st), "record");
		k_stream<<<nb, 256, ssmem, st>>>(buf, d_off, mode, d_ctr, d_rec, d_sink);
		ck(cudaEventRecord(e1, st), "record");
		ck(cudaMemcpyAsync(h.data(), d_rec, nb * sizeof(Rec), cudaMemcpyDeviceToHost, st), "copy rec");
		ck(cudaStreamSynchronize(st), "sync");
		float ms = 0;
		ck(cudaEventElapsedTime(&ms, e0, e1), "elapsed");
		unsigned long long a = ~0ull, z = 0;
		int extra = 0;
		std::vector<int> took(nb, 0);
		for (int b = 0; b < nb; b++) {
			a = std::min(a, h[b].t0);
			z = std::max(z, h[b].t1);
			int u = b;
			if (mode == 1) u = h[b].slot < 2 ? 2 * h[b].sm + h[b].slot : -1;
			if (u < 0) {
				extra++;
				continue;
			}
			took[u] = 1;
			if (rate && h[b].t1 > h[b].t0) {
				(*rate)[h[b].sm] += (double)(o[u + 1] - o[u]) * 16 / (double)(h[b].t1 - h[b].t0);  // bytes / ns
			}
		}
		int orphans = 0;
		for (int u = 0; u < nb; u++) orphans += !took[u] && o[u + 1] > o[u];
		return Res{ms * 1e3, (z - a) / 1e3, extra, orphans};
	};
	for (double mb : {17.8, 47.9, 95.8, 512.0}) {
		const size_t n16 = (size_t)(mb * 1e6 / 16) & ~(size_t)255;
		std::vector<double> eq(nb, 1.0), bygrp(nb), rate(nsm, 0.0);
		for (int u = 0; u < nb; u++) bygrp[u] = 1.0 / groups[grp[u / 2]].size();
		const auto oeq = offsets(eq, n16), ogrp = offsets(bygrp, n16);
		// warm-up and the measured rates of the equal shares
		for (int r = 0; r < 5; r++) run(1, oeq, nullptr);
		for (int r = 0; r < 10; r++) run(1, oeq, &rate);
		std::vector<double> byrate(nb);
		for (int u = 0; u < nb; u++) byrate[u] = rate[u / 2] > 0 ? rate[u / 2] : 1.0;
		const auto orate = offsets(byrate, n16);
		const char *names[4] = {"block index (no atomic)", "by SM, equal", "by SM, equal per group", "by SM, measured rates"};
		std::vector<std::vector<double>> ev(4), span(4);
		int extra[4] = {0, 0, 0, 0}, orph[4] = {0, 0, 0, 0};
		for (int r = 0; r < 30; r++)
			for (int m = 0; m < 4; m++) {
				const Res x = m == 0 ? run(0, oeq, nullptr) : run(1, m == 1 ? oeq : m == 2 ? ogrp : orate, nullptr);
				ev[m].push_back(x.ev);
				span[m].push_back(x.span);
				extra[m] += x.extra;
				orph[m] += x.orphans;
			}
		printf("%.1f MB (%.2f us at 4.4 TB/s):\n", mb, mb * 1e6 / 4.4e12 * 1e6);
		for (int m = 0; m < 4; m++) {
			std::sort(ev[m].begin(), ev[m].end());
			std::sort(span[m].begin(), span[m].end());
			printf("  %-26s event %8.2f us  span %8.2f us (min %.2f)  extra blocks %d  orphan units %d\n", names[m], ev[m][15],
			       span[m][15], span[m][0], extra[m], orph[m]);
		}
		// the equal shares' rate per SM (GB/s), by group
		printf("  equal shares, rate per SM (GB/s) by group:");
		for (size_t g = 0; g < groups.size(); g++) {
			double s = 0;
			for (int sm : groups[g]) s += rate[sm] / 10;  // 10 runs, 2 blocks each
			printf(" g%zu(%zu) %.1f", g, groups[g].size(), s / groups[g].size());
		}
		printf("\n");
		std::vector<double> rs(rate);
		std::sort(rs.begin(), rs.end());
		printf("  per-SM rate (GB/s, 2 blocks): min %.1f, 10%% %.1f, median %.1f, 90%% %.1f, max %.1f\n", rs[0] / 10,
		       rs[nsm / 10] / 10, rs[nsm / 2] / 10, rs[nsm * 9 / 10] / 10, rs[nsm - 1] / 10);
	}
	return 0;
}
