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

// The op-level API: device buffers, weight matrices and one call per kernel.
// The model path (Backend) uses the same kernels through the library's
// whole-model entry points; these exist so that every kernel can be checked
// on its own against the Go reference (ops_test.go).

// Buffer is device memory.
type Buffer struct {
	d *Device
	p unsafe.Pointer
	n int
}

// Len is the buffer's size in bytes.
func (b *Buffer) Len() int { return b.n }

// Alloc allocates n bytes of device memory.
func (d *Device) Alloc(n int) (*Buffer, error) {
	if n <= 0 {
		return nil, fmt.Errorf("cuda: alloc of %d bytes", n)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var p unsafe.Pointer
	if err := d.check("alloc", C.w_alloc(d.c, C.size_t(n), &p)); err != nil {
		return nil, err
	}
	return &Buffer{d: d, p: p, n: n}, nil
}

// Free releases the buffer.
func (b *Buffer) Free() error {
	if b == nil || b.p == nil {
		return nil
	}
	b.d.mu.Lock()
	defer b.d.mu.Unlock()
	err := b.d.check("free", C.w_free(b.d.c, b.p))
	b.p = nil
	return err
}

func (b *Buffer) put(src unsafe.Pointer, n int) error {
	if n > b.n {
		return fmt.Errorf("cuda: upload of %d bytes into a %d-byte buffer", n, b.n)
	}
	if n == 0 {
		return nil
	}
	b.d.mu.Lock()
	defer b.d.mu.Unlock()
	return b.d.check("upload", C.w_upload(b.d.c, b.p, src, C.size_t(n)))
}

func (b *Buffer) get(dst unsafe.Pointer, n int) error {
	if n > b.n {
		return fmt.Errorf("cuda: download of %d bytes from a %d-byte buffer", n, b.n)
	}
	if n == 0 {
		return nil
	}
	b.d.mu.Lock()
	defer b.d.mu.Unlock()
	return b.d.check("download", C.w_download(b.d.c, dst, b.p, C.size_t(n)))
}

// PutFloat32 copies v to the start of the buffer.
func (b *Buffer) PutFloat32(v []float32) error {
	if len(v) == 0 {
		return nil
	}
	return b.put(unsafe.Pointer(&v[0]), 4*len(v))
}

// GetFloat32 copies the start of the buffer into v.
func (b *Buffer) GetFloat32(v []float32) error {
	if len(v) == 0 {
		return nil
	}
	return b.get(unsafe.Pointer(&v[0]), 4*len(v))
}

// PutInt32 copies v to the start of the buffer.
func (b *Buffer) PutInt32(v []int32) error {
	if len(v) == 0 {
		return nil
	}
	return b.put(unsafe.Pointer(&v[0]), 4*len(v))
}

// GetInt32 copies the start of the buffer into v.
func (b *Buffer) GetInt32(v []int32) error {
	if len(v) == 0 {
		return nil
	}
	return b.get(unsafe.Pointer(&v[0]), 4*len(v))
}

// PutUint16 copies v (e.g. f16 bit patterns) to the start of the buffer.
func (b *Buffer) PutUint16(v []uint16) error {
	if len(v) == 0 {
		return nil
	}
	return b.put(unsafe.Pointer(&v[0]), 2*len(v))
}

// GetUint16 copies the start of the buffer into v.
func (b *Buffer) GetUint16(v []uint16) error {
	if len(v) == 0 {
		return nil
	}
	return b.get(unsafe.Pointer(&v[0]), 2*len(v))
}

// Fill sets every byte of the buffer to v (guard patterns in tests).
func (b *Buffer) Fill(v byte) error {
	b.d.mu.Lock()
	defer b.d.mu.Unlock()
	if err := b.d.check("memset", C.w_memset(b.d.c, b.p, C.int(v), C.size_t(b.n))); err != nil {
		return err
	}
	return b.d.check("sync", C.w_sync(b.d.c))
}

func fptr(b *Buffer, off int) *C.float {
	return (*C.float)(unsafe.Add(b.p, 4*off))
}

// Matrix is a weight matrix resident on the device.
type Matrix struct {
	d          *Device
	m          *C.sk_matrix
	Type       quant.Type
	Rows, Cols int
}

// UploadMatrix uploads rows x cols weights given in their GGUF layout.
func (d *Device) UploadMatrix(t quant.Type, data []byte, rows, cols int) (*Matrix, error) {
	rb, err := quant.RowBytes(t, cols)
	if err != nil {
		return nil, err
	}
	if rows <= 0 || len(data) < rows*rb {
		return nil, fmt.Errorf("cuda: matrix %dx%d %v needs %d bytes, have %d", rows, cols, t, rows*rb, len(data))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var m *C.sk_matrix
	if err := d.check("matrix upload", C.w_matrix_upload(d.c, C.int(t), unsafe.Pointer(&data[0]), C.int(rows), C.int(cols), &m)); err != nil {
		return nil, err
	}
	return &Matrix{d: d, m: m, Type: t, Rows: rows, Cols: cols}, nil
}

// Free releases the matrix.
func (m *Matrix) Free() {
	if m == nil || m.m == nil {
		return
	}
	m.d.mu.Lock()
	defer m.d.mu.Unlock()
	C.w_matrix_free(m.d.c, m.m)
	m.m = nil
}

// DeviceBytes is what one GEMV over the matrix reads from device memory.
func (m *Matrix) DeviceBytes() int { return int(C.w_matrix_bytes(m.m)) }

func need(b *Buffer, bytes int, what string) error {
	if b == nil || b.p == nil {
		return fmt.Errorf("cuda: %s buffer missing", what)
	}
	if b.n < bytes {
		return fmt.Errorf("cuda: %s buffer has %d bytes, needs %d", what, b.n, bytes)
	}
	return nil
}

// Gemm computes Y[t] = W X[t] (+ Y[t] when accumulate) for t < n: X is
// [n][Cols] and Y [n][Rows] float32. n = 1 is the decode GEMV.
func (d *Device) Gemm(W *Matrix, X, Y *Buffer, n int, accumulate bool) error {
	if err := need(X, 4*n*W.Cols, "x"); err != nil {
		return err
	}
	if err := need(Y, 4*n*W.Rows, "y"); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	acc := C.int(0)
	if accumulate {
		acc = 1
	}
	if n == 1 {
		return d.check("gemv", C.w_gemv(d.c, W.m, fptr(X, 0), fptr(Y, 0), acc))
	}
	return d.check("gemm", C.w_gemm(d.c, W.m, fptr(X, 0), fptr(Y, 0), C.int(n), acc))
}

// GetRows writes the dequantized rows ids[t] of W to Y[t] (ids is an int32
// device buffer of n entries).
func (d *Device) GetRows(W *Matrix, ids *Buffer, Y *Buffer, n int) error {
	if err := need(ids, 4*n, "ids"); err != nil {
		return err
	}
	if err := need(Y, 4*n*W.Cols, "y"); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.check("get_rows", C.w_get_rows(d.c, W.m, (*C.int32_t)(ids.p), fptr(Y, 0), C.int(n)))
}

// RMSNorm normalises rows rows of n elements of x into y with weights w.
func (d *Device) RMSNorm(x, w, y *Buffer, n, rows int, eps float32) error {
	for _, c := range []struct {
		b    *Buffer
		n    int
		name string
	}{{x, n * rows, "x"}, {w, n, "w"}, {y, n * rows, "y"}} {
		if err := need(c.b, 4*c.n, c.name); err != nil {
			return err
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.check("rmsnorm", C.w_rmsnorm(d.c, fptr(x, 0), fptr(w, 0), fptr(y, 0), C.int(n), C.int(rows), C.float(eps)))
}

// Rope rotates x (ntok x heads x headDim) in place for positions pos0+t;
// pos0 is a one-entry int32 device buffer, freq an optional float32 buffer
// of ropeDim/2 divisors.
func (d *Device) Rope(x *Buffer, ntok, heads, headDim, ropeDim int, pos0 *Buffer, base, scale float32, neox bool, freq *Buffer) error {
	if err := need(x, 4*ntok*heads*headDim, "x"); err != nil {
		return err
	}
	if err := need(pos0, 4, "pos"); err != nil {
		return err
	}
	var fp *C.float
	if freq != nil {
		if err := need(freq, 4*(ropeDim/2), "freq"); err != nil {
			return err
		}
		fp = fptr(freq, 0)
	}
	nx := C.int(0)
	if neox {
		nx = 1
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.check("rope", C.w_rope(d.c, fptr(x, 0), C.int(ntok), C.int(heads), C.int(headDim), C.int(ropeDim),
		(*C.int32_t)(pos0.p), C.float(base), C.float(scale), nx, fp))
}

// SwiGLU sets out = silu(gate) * up over n elements.
func (d *Device) SwiGLU(gate, up, out *Buffer, n int) error {
	for _, b := range []*Buffer{gate, up, out} {
		if err := need(b, 4*n, "swiglu"); err != nil {
			return err
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.check("swiglu", C.w_swiglu(d.c, fptr(gate, 0), fptr(up, 0), fptr(out, 0), C.int(n)))
}

// Argmax writes the index of the largest of n floats of x into out[0].
func (d *Device) Argmax(x *Buffer, n int, out *Buffer) error {
	if err := need(x, 4*n, "x"); err != nil {
		return err
	}
	if err := need(out, 4, "out"); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.check("argmax", C.w_argmax(d.c, fptr(x, 0), C.int(n), (*C.int32_t)(out.p)))
}

// KVStore writes k and v (ntok x kvHeads x headDim float32) into the f16
// caches (kvHeads x maxCtx x headDim) at positions pos0+t.
func (d *Device) KVStore(k, v, kc, vc *Buffer, ntok, kvHeads, headDim, maxCtx int, pos0 *Buffer) error {
	if err := need(k, 4*ntok*kvHeads*headDim, "k"); err != nil {
		return err
	}
	if err := need(v, 4*ntok*kvHeads*headDim, "v"); err != nil {
		return err
	}
	if err := need(kc, 2*kvHeads*maxCtx*headDim, "k cache"); err != nil {
		return err
	}
	if err := need(vc, 2*kvHeads*maxCtx*headDim, "v cache"); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.check("kv_store", C.w_kv_store(d.c, fptr(k, 0), fptr(v, 0), (*C.uint16_t)(kc.p), (*C.uint16_t)(vc.p),
		C.int(ntok), C.int(kvHeads), C.int(headDim), C.int(maxCtx), (*C.int32_t)(pos0.p)))
}

// AttentionDecode computes one query token's attention (q: heads x headDim)
// over cache positions 0..*pos into out.
func (d *Device) AttentionDecode(q, kc, vc, out *Buffer, heads, kvHeads, headDim, maxCtx int, pos *Buffer) error {
	if err := need(q, 4*heads*headDim, "q"); err != nil {
		return err
	}
	if err := need(out, 4*heads*headDim, "out"); err != nil {
		return err
	}
	if err := need(kc, 2*kvHeads*maxCtx*headDim, "k cache"); err != nil {
		return err
	}
	if err := need(vc, 2*kvHeads*maxCtx*headDim, "v cache"); err != nil {
		return err
	}
	if err := need(pos, 4, "pos"); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.check("attention", C.w_attention_decode(d.c, fptr(q, 0), (*C.uint16_t)(kc.p), (*C.uint16_t)(vc.p), fptr(out, 0),
		C.int(heads), C.int(kvHeads), C.int(headDim), C.int(maxCtx), (*C.int32_t)(pos.p)))
}
