// shim.c: dlopen/dlsym of libsparkinfer_kernels.so and one C wrapper per
// entry point, so Go never calls through a function pointer itself.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include "shim.h"

static struct {
	int (*abi_version)(void);
	sk_ctx *(*create)(int, char *, size_t);
	void (*destroy)(sk_ctx *);
	const char *(*error)(const sk_ctx *);
	int (*sync)(sk_ctx *);
	int (*info)(sk_ctx *, sk_device_info *);
	int (*alloc)(sk_ctx *, size_t, void **);
	int (*free_)(sk_ctx *, void *);
	int (*upload)(sk_ctx *, void *, const void *, size_t);
	int (*download)(sk_ctx *, void *, const void *, size_t);
	int (*memset_)(sk_ctx *, void *, int, size_t);
	int (*copy_bandwidth)(sk_ctx *, size_t, int, double *);
	int (*matrix_upload)(sk_ctx *, int, const void *, int, int, sk_matrix **);
	void (*matrix_free)(sk_ctx *, sk_matrix *);
	size_t (*matrix_bytes)(const sk_matrix *);
	int (*gemv)(sk_ctx *, const sk_matrix *, const float *, float *, int);
	int (*gemm)(sk_ctx *, const sk_matrix *, const float *, float *, int, int);
	int (*get_rows)(sk_ctx *, const sk_matrix *, const int32_t *, float *, int);
	int (*rmsnorm)(sk_ctx *, const float *, const float *, float *, int, int, float);
	int (*rope)(sk_ctx *, float *, int, int, int, int, const int32_t *, float, float, int, const float *);
	int (*swiglu)(sk_ctx *, const float *, const float *, float *, int);
	int (*argmax)(sk_ctx *, const float *, int, int32_t *);
	int (*attention_decode)(sk_ctx *, const float *, const uint16_t *, const uint16_t *, float *, int, int, int, int, const int32_t *);
	int (*kv_store)(sk_ctx *, const float *, const float *, uint16_t *, uint16_t *, int, int, int, int, const int32_t *);
	int (*model_create)(sk_ctx *, const sk_model_config *, sk_model **);
	void (*model_free)(sk_model *);
	int (*model_set)(sk_model *, int, int, int, const void *, int, int);
	int (*model_decode)(sk_model *, int, int, float *, int32_t *);
	int (*model_prefill)(sk_model *, const int32_t *, int, int, float *, int32_t *);
	size_t (*model_weight_bytes)(const sk_model *);
	int (*set_variant)(sk_ctx *, int);
	int (*get_variant)(const sk_ctx *);
	int (*matrix_upload_perm)(sk_ctx *, int, const void *, int, int, const int32_t *, sk_matrix **);
	int (*rope_perm)(int, int, int, int, int32_t *);
	int (*gemv_fused)(sk_ctx *, int, const sk_matrix *const *, const float *, const float *, float, const sk_epilogue *);
	int (*gemm_fused)(sk_ctx *, int, const sk_matrix *const *, const float *, int, const sk_epilogue *);
	int (*gemv_fused_f16x)(sk_ctx *, int, const sk_matrix *const *, const uint16_t *, const sk_epilogue *);
	int (*qkv_post)(sk_ctx *, const float *, int, const float *, const float *, float, const sk_epilogue *);
	int (*attention)(sk_ctx *, const float *, const uint16_t *, const uint16_t *, float *, int, int, int, int, int, const int32_t *);
	int (*model_variant)(const sk_model *);
	int (*model_persistent)(const sk_model *);
} skf;

int sk_load(const char *path, char *err, size_t errlen) {
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		snprintf(err, errlen, "%s", dlerror());
		return -1;
	}
#define SKL(field, sym) \
	*(void **)(&skf.field) = dlsym(h, sym); \
	if (!skf.field) { snprintf(err, errlen, "symbol %s missing", sym); return -1; }
	SKL(abi_version, "sk_abi_version");
	if (skf.abi_version() != SK_ABI_VERSION) return skf.abi_version(); /* the caller reports the mismatch */
	SKL(create, "sk_create");
	SKL(destroy, "sk_destroy");
	SKL(error, "sk_error");
	SKL(sync, "sk_sync");
	SKL(info, "sk_info");
	SKL(alloc, "sk_alloc");
	SKL(free_, "sk_free");
	SKL(upload, "sk_upload");
	SKL(download, "sk_download");
	SKL(memset_, "sk_memset");
	SKL(copy_bandwidth, "sk_copy_bandwidth");
	SKL(matrix_upload, "sk_matrix_upload");
	SKL(matrix_free, "sk_matrix_free");
	SKL(matrix_bytes, "sk_matrix_bytes");
	SKL(gemv, "sk_gemv");
	SKL(gemm, "sk_gemm");
	SKL(get_rows, "sk_get_rows");
	SKL(rmsnorm, "sk_rmsnorm");
	SKL(rope, "sk_rope");
	SKL(swiglu, "sk_swiglu");
	SKL(argmax, "sk_argmax");
	SKL(attention_decode, "sk_attention_decode");
	SKL(kv_store, "sk_kv_store");
	SKL(model_create, "sk_model_create");
	SKL(model_free, "sk_model_free");
	SKL(model_set, "sk_model_set");
	SKL(model_decode, "sk_model_decode");
	SKL(model_prefill, "sk_model_prefill");
	SKL(model_weight_bytes, "sk_model_weight_bytes");
	SKL(set_variant, "sk_set_variant");
	SKL(get_variant, "sk_get_variant");
	SKL(matrix_upload_perm, "sk_matrix_upload_perm");
	SKL(rope_perm, "sk_rope_perm");
	SKL(gemv_fused, "sk_gemv_fused");
	SKL(gemm_fused, "sk_gemm_fused");
	SKL(gemv_fused_f16x, "sk_gemv_fused_f16x");
	SKL(qkv_post, "sk_qkv_post");
	SKL(attention, "sk_attention");
	SKL(model_variant, "sk_model_variant");
	SKL(model_persistent, "sk_model_persistent");
#undef SKL
	return skf.abi_version();
}

sk_ctx *w_create(int dev, char *err, size_t n) { return skf.create(dev, err, n); }
void w_destroy(sk_ctx *c) { skf.destroy(c); }
const char *w_error(const sk_ctx *c) { return skf.error(c); }
int w_sync(sk_ctx *c) { return skf.sync(c); }
int w_info(sk_ctx *c, sk_device_info *o) { return skf.info(c, o); }
int w_alloc(sk_ctx *c, size_t n, void **o) { return skf.alloc(c, n, o); }
int w_free(sk_ctx *c, void *p) { return skf.free_(c, p); }
int w_upload(sk_ctx *c, void *d, const void *s, size_t n) { return skf.upload(c, d, s, n); }
int w_download(sk_ctx *c, void *d, const void *s, size_t n) { return skf.download(c, d, s, n); }
int w_memset(sk_ctx *c, void *d, int v, size_t n) { return skf.memset_(c, d, v, n); }
int w_copy_bandwidth(sk_ctx *c, size_t n, int reps, double *o) { return skf.copy_bandwidth(c, n, reps, o); }
int w_matrix_upload(sk_ctx *c, int t, const void *d, int r, int k, sk_matrix **o) { return skf.matrix_upload(c, t, d, r, k, o); }
void w_matrix_free(sk_ctx *c, sk_matrix *m) { skf.matrix_free(c, m); }
size_t w_matrix_bytes(const sk_matrix *m) { return skf.matrix_bytes(m); }
int w_gemv(sk_ctx *c, const sk_matrix *w, const float *x, float *y, int acc) { return skf.gemv(c, w, x, y, acc); }
int w_gemm(sk_ctx *c, const sk_matrix *w, const float *x, float *y, int n, int acc) { return skf.gemm(c, w, x, y, n, acc); }
int w_get_rows(sk_ctx *c, const sk_matrix *w, const int32_t *ids, float *y, int n) { return skf.get_rows(c, w, ids, y, n); }
int w_rmsnorm(sk_ctx *c, const float *x, const float *w, float *y, int n, int rows, float eps) { return skf.rmsnorm(c, x, w, y, n, rows, eps); }
int w_rope(sk_ctx *c, float *x, int nt, int nh, int hd, int rd, const int32_t *p, float b, float s, int neox, const float *f) { return skf.rope(c, x, nt, nh, hd, rd, p, b, s, neox, f); }
int w_swiglu(sk_ctx *c, const float *g, const float *u, float *o, int n) { return skf.swiglu(c, g, u, o, n); }
int w_argmax(sk_ctx *c, const float *x, int n, int32_t *o) { return skf.argmax(c, x, n, o); }
int w_attention_decode(sk_ctx *c, const float *q, const uint16_t *k, const uint16_t *v, float *o, int nh, int nkv, int hd, int mc, const int32_t *p) { return skf.attention_decode(c, q, k, v, o, nh, nkv, hd, mc, p); }
int w_kv_store(sk_ctx *c, const float *k, const float *v, uint16_t *kc, uint16_t *vc, int nt, int nkv, int hd, int mc, const int32_t *p) { return skf.kv_store(c, k, v, kc, vc, nt, nkv, hd, mc, p); }
int w_model_create(sk_ctx *c, const sk_model_config *cfg, sk_model **o) { return skf.model_create(c, cfg, o); }
void w_model_free(sk_model *m) { skf.model_free(m); }
int w_model_set(sk_model *m, int slot, int layer, int t, const void *d, int r, int k) { return skf.model_set(m, slot, layer, t, d, r, k); }
int w_model_decode(sk_model *m, int tok, int pos, float *logits, int32_t *next) { return skf.model_decode(m, tok, pos, logits, next); }
int w_model_prefill(sk_model *m, const int32_t *t, int n, int pos, float *logits, int32_t *next) { return skf.model_prefill(m, t, n, pos, logits, next); }
size_t w_model_weight_bytes(const sk_model *m) { return skf.model_weight_bytes(m); }
int w_set_variant(sk_ctx *c, int v) { return skf.set_variant(c, v); }
int w_get_variant(const sk_ctx *c) { return skf.get_variant(c); }
int w_matrix_upload_perm(sk_ctx *c, int t, const void *d, int r, int k, const int32_t *perm, sk_matrix **o) { return skf.matrix_upload_perm(c, t, d, r, k, perm, o); }
int w_rope_perm(int nh, int hd, int rd, int neox, int32_t *perm) { return skf.rope_perm(nh, hd, rd, neox, perm); }
int w_gemv_fused(sk_ctx *c, int nmat, const sk_matrix *const *w, const float *x, const float *nw, float eps, const sk_epilogue *e) { return skf.gemv_fused(c, nmat, w, x, nw, eps, e); }
int w_gemm_fused(sk_ctx *c, int nmat, const sk_matrix *const *w, const float *x, int n, const sk_epilogue *e) { return skf.gemm_fused(c, nmat, w, x, n, e); }
int w_gemv_fused_f16x(sk_ctx *c, int nmat, const sk_matrix *const *w, const uint16_t *x, const sk_epilogue *e) { return skf.gemv_fused_f16x(c, nmat, w, x, e); }
int w_qkv_post(sk_ctx *c, const float *qkv, int n, const float *qn, const float *kn, float eps, const sk_epilogue *e) { return skf.qkv_post(c, qkv, n, qn, kn, eps, e); }
int w_attention(sk_ctx *c, const float *q, const uint16_t *k, const uint16_t *v, float *o, int nt, int nh, int nkv, int hd, int mc, const int32_t *p) { return skf.attention(c, q, k, v, o, nt, nh, nkv, hd, mc, p); }
int w_model_variant(const sk_model *m) { return skf.model_variant(m); }
int w_model_persistent(const sk_model *m) { return skf.model_persistent(m); }
