package cuda

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/sparkinfer/cc/engine/quant"
)

// Kernel variants (see kernels/sparkinfer_kernels.h). A device runs one at
// a time; Gemm, AttentionDecode, Attention and models created afterwards
// dispatch on it. The default comes from the library (SK_VARIANT_DEFAULT)
// or the SPARKINFER_KERNEL_VARIANT environment variable at NewDevice.
const (
	// VariantV1 is one kernel per op with float activations.
	VariantV1 = int(C.SK_VARIANT_V1)
	// VariantV2 is the fused decode path (two-level int8 activations with dp4a,
	// norm/RoPE/KV-store/SwiGLU fused into the GEMVs, length-sized GQA
	// attention) and the tensor-core prefill.
	VariantV2 = int(C.SK_VARIANT_V2)
	// VariantDefault is the library's default variant.
	VariantDefault = int(C.SK_VARIANT_DEFAULT)
)

// Variants lists the selectable variants.
var Variants = []int{VariantV1, VariantV2}

// SetVariant selects the kernel variant of later calls on d.
func (d *Device) SetVariant(v int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.check("set variant", C.w_set_variant(d.c, C.int(v)))
}

// Variant reports the device's kernel variant.
func (d *Device) Variant() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return int(C.w_get_variant(d.c))
}

// RopePerm is the device row order that puts each RoPE pair of a Q or K
// matrix (heads x headDim rows) on adjacent rows 2k, 2k+1, as the QKV
// epilogue expects: entry i is the host row stored at device row i.
func RopePerm(heads, headDim, ropeDim int, neox bool) ([]int32, error) {
	if heads <= 0 || headDim <= 0 {
		return nil, fmt.Errorf("cuda: rope order of %d heads of %d", heads, headDim)
	}
	p := make([]int32, heads*headDim)
	nx := C.int(0)
	if neox {
		nx = 1
	}
	if rc := C.w_rope_perm(C.int(heads), C.int(headDim), C.int(ropeDim), nx, (*C.int32_t)(unsafe.Pointer(&p[0]))); rc != 0 {
		return nil, fmt.Errorf("cuda: rope order: heads %d, head_dim %d, rope_dim %d rejected", heads, headDim, ropeDim)
	}
	return p, nil
}

// UploadMatrixPerm uploads rows x cols GGUF weights with device row i
// holding host row perm[i].
func (d *Device) UploadMatrixPerm(t quant.Type, data []byte, rows, cols int, perm []int32) (*Matrix, error) {
	rb, err := quant.RowBytes(t, cols)
	if err != nil {
		return nil, err
	}
	if rows <= 0 || len(data) < rows*rb {
		return nil, fmt.Errorf("cuda: matrix %dx%d %v needs %d bytes, have %d", rows, cols, t, rows*rb, len(data))
	}
	if len(perm) != rows {
		return nil, fmt.Errorf("cuda: row order has %d entries for %d rows", len(perm), rows)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var m *C.sk_matrix
	if err := d.check("matrix upload", C.w_matrix_upload_perm(d.c, C.int(t), unsafe.Pointer(&data[0]), C.int(rows), C.int(cols),
		(*C.int32_t)(unsafe.Pointer(&perm[0])), &m)); err != nil {
		return nil, err
	}
	return &Matrix{d: d, m: m, Type: t, Rows: rows, Cols: cols}, nil
}

// EpilogueMode says what a fused GEMV/GEMM does with its results.
type EpilogueMode int

// Epilogue modes (SK_EPI_*).
const (
	EpiStore  EpilogueMode = C.SK_EPI_STORE  // Y[t*LdY + ROff + r] = v
	EpiAcc    EpilogueMode = C.SK_EPI_ACC    // Y[t*LdY + ROff + r] += v
	EpiSwiGLU EpilogueMode = C.SK_EPI_SWIGLU // Y[t*LdY + i] = silu(gate_i) * up_i
	EpiQKV    EpilogueMode = C.SK_EPI_QKV    // RoPE, Q to QOut, K and V into the caches
	// EpiSwiGLUF16 is EpiSwiGLU rounded to f16 (Y then holds 2-byte values,
	// LdY of them between tokens; GEMV only): the input of GemvFusedF16X.
	EpiSwiGLUF16 EpilogueMode = C.SK_EPI_SWIGLU_F16
)

// Epilogue describes the output of a fused GEMV or GEMM.
type Epilogue struct {
	Mode    EpilogueMode
	Y       *Buffer
	LdY     int // floats between tokens of Y
	ROff    int // row offset of the launch in the Q|K|V concatenation (QKV; STORE/ACC: into Y)
	QOut    *Buffer
	KCache  *Buffer // f16, KVHeads x MaxCtx x HeadDim
	VCache  *Buffer
	Heads   int
	KVHeads int
	HeadDim int
	RopeDim int
	MaxCtx  int
	Neox    bool
	Base    float32
	Scale   float32 // position multiplier
	Freq    *Buffer // optional RopeDim/2 divisors
	Pos0    *Buffer // one int32: the first token's position
}

// c converts e after checking that its buffers hold what n tokens of rows
// outputs need.
func (e *Epilogue) c(n, rows int) (C.sk_epilogue, error) {
	var ce C.sk_epilogue
	ce.mode = C.int(e.Mode)
	ce.ldy = C.int(e.LdY)
	ce.roff = C.int(e.ROff)
	switch e.Mode {
	case EpiStore, EpiAcc, EpiSwiGLU, EpiSwiGLUF16:
		last, size := e.ROff+rows, 4
		if e.Mode == EpiSwiGLU || e.Mode == EpiSwiGLUF16 {
			last = rows
		}
		if e.Mode == EpiSwiGLUF16 {
			size = 2
		}
		if e.LdY < last || e.ROff < 0 {
			return ce, fmt.Errorf("cuda: epilogue ldy %d too small for %d rows at offset %d", e.LdY, rows, e.ROff)
		}
		if err := need(e.Y, size*((n-1)*e.LdY+last), "y"); err != nil {
			return ce, err
		}
		ce.y = fptr(e.Y, 0)
	case EpiQKV:
		qd, kd := e.Heads*e.HeadDim, e.KVHeads*e.HeadDim
		if err := need(e.QOut, 4*n*qd, "q"); err != nil {
			return ce, err
		}
		if err := need(e.KCache, 2*kd*e.MaxCtx, "k cache"); err != nil {
			return ce, err
		}
		if err := need(e.VCache, 2*kd*e.MaxCtx, "v cache"); err != nil {
			return ce, err
		}
		if err := need(e.Pos0, 4, "pos"); err != nil {
			return ce, err
		}
		ce.q_out = fptr(e.QOut, 0)
		ce.k_cache = (*C.uint16_t)(e.KCache.p)
		ce.v_cache = (*C.uint16_t)(e.VCache.p)
		ce.pos0 = (*C.int32_t)(e.Pos0.p)
		if e.Freq != nil {
			if err := need(e.Freq, 4*(e.RopeDim/2), "freq"); err != nil {
				return ce, err
			}
			ce.freq = fptr(e.Freq, 0)
		}
	default:
		return ce, fmt.Errorf("cuda: unknown epilogue mode %d", e.Mode)
	}
	ce.n_head, ce.n_kv_head, ce.head_dim, ce.rope_dim = C.int(e.Heads), C.int(e.KVHeads), C.int(e.HeadDim), C.int(e.RopeDim)
	ce.max_ctx = C.int(e.MaxCtx)
	if e.Neox {
		ce.neox = 1
	}
	ce.freq_base, ce.freq_scale = C.float(e.Base), C.float(e.Scale)
	return ce, nil
}

// callFused runs one fused-op call of the library under the device lock,
// with ms copied into C memory for it.
func (d *Device) callFused(what string, ms []*C.sk_matrix, call func(n C.int, cm **C.sk_matrix) C.int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	cm := (**C.sk_matrix)(C.malloc(C.size_t(len(ms)) * C.size_t(unsafe.Sizeof(ms[0]))))
	defer C.free(unsafe.Pointer(cm))
	copy(unsafe.Slice(cm, len(ms)), ms)
	return d.check(what, call(C.int(len(ms)), cm))
}

// epiRows is the output rows of a fused op over W (all rows: rows) through
// e: gate and up's common rows for the SwiGLU epilogues.
func epiRows(W []*Matrix, rows int, e *Epilogue) int {
	if e.Mode == EpiSwiGLU || e.Mode == EpiSwiGLUF16 {
		return W[0].Rows
	}
	return rows
}

func matList(W []*Matrix) ([]*C.sk_matrix, int, error) {
	if len(W) == 0 || len(W) > 3 {
		return nil, 0, fmt.Errorf("cuda: %d matrices in a fused op", len(W))
	}
	ms := make([]*C.sk_matrix, len(W))
	rows := 0
	for i, w := range W {
		if w == nil || w.m == nil {
			return nil, 0, fmt.Errorf("cuda: matrix %d missing", i)
		}
		ms[i] = w.m
		rows += w.Rows
	}
	return ms, rows, nil
}

// fusedIn checks a fused op's matrices W and its input x of n tokens
// (elem bytes per value), returning W's C handles and the epilogue's rows.
func fusedIn(W []*Matrix, e *Epilogue, x *Buffer, n, elem int) ([]*C.sk_matrix, int, error) {
	ms, rows, err := matList(W)
	if err != nil {
		return nil, 0, err
	}
	rows = epiRows(W, rows, e) // (GemmFused: EpiSwiGLUF16 goes on to the library, which refuses it: GEMV only)
	if n <= 0 {
		return nil, 0, fmt.Errorf("cuda: gemm of %d tokens", n)
	}
	if err := need(x, elem*n*W[0].Cols, "x"); err != nil {
		return nil, 0, err
	}
	return ms, rows, nil
}

// GemvFused runs the fused GEMV of the v2 decode path (whatever the
// device's variant) on one token x: with normW, x is first RMS-normalised
// with those weights; quantized matrices see x rounded to int8 blocks of
// 32. W holds 1-3 matrices of equal cols whose rows are concatenated (two,
// gate and up, for EpiSwiGLU).
func (d *Device) GemvFused(W []*Matrix, x, normW *Buffer, eps float32, e *Epilogue) error {
	ms, rows, err := fusedIn(W, e, x, 1, 4)
	if err != nil {
		return err
	}
	var nw *C.float
	if normW != nil {
		if err := need(normW, 4*W[0].Cols, "norm"); err != nil {
			return err
		}
		nw = fptr(normW, 0)
	}
	ce, err := e.c(1, rows)
	if err != nil {
		return err
	}
	return d.callFused("gemv_fused", ms, func(n C.int, cm **C.sk_matrix) C.int {
		return C.w_gemv_fused(d.c, n, cm, fptr(x, 0), nw, C.float(eps), &ce)
	})
}

// GemvFusedF16X is GemvFused without a norm for an x of f16 values (as
// EpiSwiGLUF16 writes them; the decode step's down GEMV): W of one quantized
// type (Q8_0, Q4_K or Q6_K) with cols a multiple of 32, a float epilogue.
// Its results equal GemvFused's on the same values as floats.
func (d *Device) GemvFusedF16X(W []*Matrix, x *Buffer, e *Epilogue) error {
	ms, rows, err := fusedIn(W, e, x, 1, 2)
	if err != nil {
		return err
	}
	ce, err := e.c(1, rows)
	if err != nil {
		return err
	}
	return d.callFused("gemv_fused_f16x", ms, func(n C.int, cm **C.sk_matrix) C.int {
		return C.w_gemv_fused_f16x(d.c, n, cm, (*C.uint16_t)(x.p), &ce)
	})
}

// GemmFused runs the prefill GEMM (tensor cores with f16 operands for
// Q8_0/Q4_K/Q6_K/F16 weights when cols is a multiple of 32; otherwise the
// fused GEMV per token, in float for F32/BF16 weights) of n tokens X (n x cols, already normalised) through
// the epilogue. W holds 1-3 matrices of equal cols whose rows are
// concatenated (one launch when they share a type), or gate and up for
// EpiSwiGLU; for EpiQKV pass Q, K and V with ROff 0.
func (d *Device) GemmFused(W []*Matrix, X *Buffer, n int, e *Epilogue) error {
	ms, rows, err := fusedIn(W, e, X, n, 4)
	if err != nil {
		return err
	}
	ce, err := e.c(n, rows)
	if err != nil {
		return err
	}
	return d.callFused("gemm_fused", ms, func(nm C.int, cm **C.sk_matrix) C.int {
		return C.w_gemm_fused(d.c, nm, cm, fptr(X, 0), C.int(n), &ce)
	})
}

// QKVPost applies the per-head q/k RMSNorm (qNorm, kNorm: HeadDim weights,
// or nil), RoPE and the KV-cache store to n tokens of qkv (n x (q_dim +
// 2 kv_dim), natural row order), as the epilogue e (mode EpiQKV) says.
func (d *Device) QKVPost(qkv *Buffer, n int, qNorm, kNorm *Buffer, eps float32, e *Epilogue) error {
	if e.Mode != EpiQKV || n <= 0 {
		return fmt.Errorf("cuda: qkv post needs the qkv epilogue and tokens")
	}
	if err := need(qkv, 4*n*(e.Heads+2*e.KVHeads)*e.HeadDim, "qkv"); err != nil {
		return err
	}
	var qn, kn *C.float
	if qNorm != nil {
		if err := need(qNorm, 4*e.HeadDim, "q norm"); err != nil {
			return err
		}
		qn = fptr(qNorm, 0)
	}
	if kNorm != nil {
		if err := need(kNorm, 4*e.HeadDim, "k norm"); err != nil {
			return err
		}
		kn = fptr(kNorm, 0)
	}
	ce, err := e.c(n, 0)
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.check("qkv_post", C.w_qkv_post(d.c, fptr(qkv, 0), C.int(n), qn, kn, C.float(eps), &ce))
}

// Attention computes causal attention for ntok query tokens (q: ntok x
// heads x headDim) at positions *pos0+t over the caches into out.
func (d *Device) Attention(q, kc, vc, out *Buffer, ntok, heads, kvHeads, headDim, maxCtx int, pos0 *Buffer) error {
	if err := need(q, 4*ntok*heads*headDim, "q"); err != nil {
		return err
	}
	if err := need(out, 4*ntok*heads*headDim, "out"); err != nil {
		return err
	}
	if err := need(kc, 2*kvHeads*maxCtx*headDim, "k cache"); err != nil {
		return err
	}
	if err := need(vc, 2*kvHeads*maxCtx*headDim, "v cache"); err != nil {
		return err
	}
	if err := need(pos0, 4, "pos"); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.check("attention", C.w_attention(d.c, fptr(q, 0), (*C.uint16_t)(kc.p), (*C.uint16_t)(vc.p), fptr(out, 0),
		C.int(ntok), C.int(heads), C.int(kvHeads), C.int(headDim), C.int(maxCtx), (*C.int32_t)(pos0.p)))
}
