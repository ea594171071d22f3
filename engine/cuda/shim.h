// shim.h: the C side of engine/cuda's binding (see shim.c).
#ifndef SPARKINFER_CUDA_SHIM_H
#define SPARKINFER_CUDA_SHIM_H
#include "sparkinfer_kernels.h"

int sk_load(const char *path, char *err, size_t errlen);
sk_ctx *w_create(int dev, char *err, size_t n);
void w_destroy(sk_ctx *c);
const char *w_error(const sk_ctx *c);
int w_sync(sk_ctx *c);
int w_info(sk_ctx *c, sk_device_info *o);
int w_alloc(sk_ctx *c, size_t n, void **o);
int w_free(sk_ctx *c, void *p);
int w_upload(sk_ctx *c, void *d, const void *s, size_t n);
int w_download(sk_ctx *c, void *d, const void *s, size_t n);
int w_memset(sk_ctx *c, void *d, int v, size_t n);
int w_copy_bandwidth(sk_ctx *c, size_t n, int reps, double *o);
int w_matrix_upload(sk_ctx *c, int t, const void *d, int r, int k, sk_matrix **o);
void w_matrix_free(sk_ctx *c, sk_matrix *m);
size_t w_matrix_bytes(const sk_matrix *m);
int w_gemv(sk_ctx *c, const sk_matrix *w, const float *x, float *y, int acc);
int w_gemm(sk_ctx *c, const sk_matrix *w, const float *x, float *y, int n, int acc);
int w_get_rows(sk_ctx *c, const sk_matrix *w, const int32_t *ids, float *y, int n);
int w_rmsnorm(sk_ctx *c, const float *x, const float *w, float *y, int n, int rows, float eps);
int w_rope(sk_ctx *c, float *x, int nt, int nh, int hd, int rd, const int32_t *p, float b, float s, int neox, const float *f);
int w_swiglu(sk_ctx *c, const float *g, const float *u, float *o, int n);
int w_argmax(sk_ctx *c, const float *x, int n, int32_t *o);
int w_attention_decode(sk_ctx *c, const float *q, const uint16_t *k, const uint16_t *v, float *o, int nh, int nkv, int hd, int mc, const int32_t *p);
int w_kv_store(sk_ctx *c, const float *k, const float *v, uint16_t *kc, uint16_t *vc, int nt, int nkv, int hd, int mc, const int32_t *p);
int w_model_create(sk_ctx *c, const sk_model_config *cfg, sk_model **o);
void w_model_free(sk_model *m);
int w_model_set(sk_model *m, int slot, int layer, int t, const void *d, int r, int k);
int w_model_decode(sk_model *m, int tok, int pos, float *logits, int32_t *next);
int w_model_prefill(sk_model *m, const int32_t *t, int n, int pos, float *logits, int32_t *next);
size_t w_model_weight_bytes(const sk_model *m);
int w_set_variant(sk_ctx *c, int v);
int w_get_variant(const sk_ctx *c);
int w_matrix_upload_perm(sk_ctx *c, int t, const void *d, int r, int k, const int32_t *perm, sk_matrix **o);
int w_rope_perm(int nh, int hd, int rd, int neox, int32_t *perm);
int w_gemv_fused(sk_ctx *c, int nmat, const sk_matrix *const *w, const float *x, const float *nw, float eps, const sk_epilogue *e);
int w_gemm_fused(sk_ctx *c, int nmat, const sk_matrix *const *w, const float *x, int n, const sk_epilogue *e);
int w_gemv_fused_f16x(sk_ctx *c, int nmat, const sk_matrix *const *w, const uint16_t *x, const sk_epilogue *e);
int w_qkv_post(sk_ctx *c, const float *qkv, int n, const float *qn, const float *kn, float eps, const sk_epilogue *e);
int w_attention(sk_ctx *c, const float *q, const uint16_t *k, const uint16_t *v, float *o, int nt, int nh, int nkv, int hd, int mc, const int32_t *p);
int w_model_variant(const sk_model *m);
int w_model_persistent(const sk_model *m);

#endif
