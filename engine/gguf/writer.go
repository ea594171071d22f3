package gguf

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"

	"github.com/sparkinfer/cc/engine/quant"
)

// Writer builds a GGUF v3 file. Metadata and tensors are written in the
// order they were added, so the same calls give the same bytes. Tensor data
// is either given as bytes (AddTensor) or streamed when the file is written
// (AddTensorFunc), so a writer need not hold a whole model in memory.
//
// Add methods record the first error (bad dims, wrong data size, duplicate
// names); WriteTo reports it before writing anything.
type Writer struct {
	Alignment uint64 // 0 means DefaultAlignment; written as general.alignment when not the default

	kvs     []KV
	keys    map[string]bool
	tensors []wtensor
	names   map[string]bool
	err     error
}

type wtensor struct {
	info TensorInfo
	data []byte
	fill func(w io.Writer) error
}

// NewWriter returns an empty writer.
func NewWriter() *Writer {
	return &Writer{keys: map[string]bool{}, names: map[string]bool{}}
}

func (w *Writer) setErr(format string, args ...any) {
	if w.err == nil {
		w.err = fmt.Errorf("gguf: "+format, args...)
	}
}

// AddKV appends a metadata entry.
func (w *Writer) AddKV(key string, v Value) {
	if w.keys == nil {
		w.keys, w.names = map[string]bool{}, map[string]bool{}
	}
	if w.keys[key] {
		w.setErr("duplicate key %q", key)
		return
	}
	if key == "general.alignment" {
		w.setErr("set Writer.Alignment instead of key %q", key)
		return
	}
	if err := checkValue(v, 0); err != nil {
		w.setErr("key %q: %v", key, err)
		return
	}
	w.keys[key] = true
	w.kvs = append(w.kvs, KV{key, v})
}

// AddTensor appends a tensor with its data, which must be exactly the
// tensor's size.
func (w *Writer) AddTensor(name string, typ quant.Type, dims []uint64, data []byte) {
	ti, ok := w.info(name, typ, dims)
	if !ok {
		return
	}
	if uint64(len(data)) != ti.Size {
		w.setErr("tensor %q: %d bytes of data, want %d", name, len(data), ti.Size)
		return
	}
	w.tensors = append(w.tensors, wtensor{info: ti, data: data})
}

// AddTensorFunc appends a tensor whose data fill writes when the file is
// written; fill must write exactly the tensor's size.
func (w *Writer) AddTensorFunc(name string, typ quant.Type, dims []uint64, fill func(w io.Writer) error) {
	if ti, ok := w.info(name, typ, dims); ok {
		w.tensors = append(w.tensors, wtensor{info: ti, fill: fill})
	}
}

func (w *Writer) info(name string, typ quant.Type, dims []uint64) (TensorInfo, bool) {
	if w.names == nil {
		w.keys, w.names = map[string]bool{}, map[string]bool{}
	}
	if w.names[name] {
		w.setErr("duplicate tensor %q", name)
		return TensorInfo{}, false
	}
	if len(dims) == 0 || len(dims) > maxDims {
		w.setErr("tensor %q: %d dimensions", name, len(dims))
		return TensorInfo{}, false
	}
	n := uint64(1)
	for _, d := range dims {
		if d == 0 || n > math.MaxInt64/d {
			w.setErr("tensor %q: bad dims %v", name, dims)
			return TensorInfo{}, false
		}
		n *= d
	}
	rb, err := quant.RowBytes(typ, int(dims[0]))
	if err != nil {
		w.setErr("tensor %q: %v", name, err)
		return TensorInfo{}, false
	}
	w.names[name] = true
	return TensorInfo{Name: name, Dims: append([]uint64(nil), dims...), Type: typ, Size: uint64(rb) * (n / dims[0])}, true
}

func checkValue(v Value, depth int) error {
	if !v.Type.valid() {
		return fmt.Errorf("unknown value type %d", uint32(v.Type))
	}
	if v.Type != TypeArray {
		return nil
	}
	if depth >= maxArrayDepth {
		return fmt.Errorf("arrays nested deeper than %d", maxArrayDepth)
	}
	if vs, ok := v.arr.([]Value); ok {
		for _, e := range vs {
			if e.Type != v.ElemType {
				return fmt.Errorf("array of %s holds a %s", v.ElemType, e.typeDesc())
			}
			if err := checkValue(e, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	if v.Len() > 0 && v.Index(0).Type != v.ElemType {
		return fmt.Errorf("array element type %s does not match its elements", v.ElemType)
	}
	return nil
}

type countWriter struct {
	w *bufio.Writer
	n uint64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += uint64(n)
	return n, err
}

// WriteTo writes the file.
func (w *Writer) WriteTo(out io.Writer) (int64, error) {
	if w.err != nil {
		return 0, w.err
	}
	align := w.Alignment
	if align == 0 {
		align = DefaultAlignment
	}
	if align&(align-1) != 0 || align > maxAlignment {
		return 0, fmt.Errorf("gguf: alignment %d is not a power of two up to %d", align, maxAlignment)
	}
	kvs := w.kvs
	if align != DefaultAlignment {
		kvs = append([]KV{{"general.alignment", Uint32Value(uint32(align))}}, kvs...)
	}
	// Offsets.
	var off uint64
	for i := range w.tensors {
		w.tensors[i].info.Offset = off
		off = alignUp(off+w.tensors[i].info.Size, align)
	}
	cw := &countWriter{w: bufio.NewWriterSize(out, 1<<20)}
	var b []byte
	b = append(b, Magic...)
	b = binary.LittleEndian.AppendUint32(b, Version)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(w.tensors)))
	b = binary.LittleEndian.AppendUint64(b, uint64(len(kvs)))
	for _, kv := range kvs {
		b = appendString(b, kv.Key)
		b = binary.LittleEndian.AppendUint32(b, uint32(kv.Value.Type))
		b = appendValue(b, kv.Value)
	}
	for _, t := range w.tensors {
		b = appendString(b, t.info.Name)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(t.info.Dims)))
		for _, d := range t.info.Dims {
			b = binary.LittleEndian.AppendUint64(b, d)
		}
		b = binary.LittleEndian.AppendUint32(b, uint32(t.info.Type))
		b = binary.LittleEndian.AppendUint64(b, t.info.Offset)
	}
	if len(w.tensors) > 0 {
		b = append(b, make([]byte, alignUp(uint64(len(b)), align)-uint64(len(b)))...)
	}
	if _, err := cw.Write(b); err != nil {
		return int64(cw.n), err
	}
	dataStart := cw.n
	for _, t := range w.tensors {
		if pad := dataStart + t.info.Offset - cw.n; pad > 0 {
			if _, err := cw.Write(make([]byte, pad)); err != nil {
				return int64(cw.n), err
			}
		}
		before := cw.n
		if t.fill != nil {
			if err := t.fill(cw); err != nil {
				return int64(cw.n), fmt.Errorf("gguf: tensor %q: %w", t.info.Name, err)
			}
		} else if _, err := cw.Write(t.data); err != nil {
			return int64(cw.n), err
		}
		if got := cw.n - before; got != t.info.Size {
			return int64(cw.n), fmt.Errorf("gguf: tensor %q: wrote %d bytes, want %d", t.info.Name, got, t.info.Size)
		}
	}
	if len(w.tensors) > 0 {
		if pad := alignUp(cw.n, align) - cw.n; pad > 0 {
			if _, err := cw.Write(make([]byte, pad)); err != nil {
				return int64(cw.n), err
			}
		}
	}
	return int64(cw.n), cw.w.Flush()
}

func appendString(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint64(b, uint64(len(s)))
	return append(b, s...)
}

func appendValue(b []byte, v Value) []byte {
	switch v.Type {
	case TypeUint8, TypeInt8, TypeBool:
		return append(b, byte(v.bits))
	case TypeUint16, TypeInt16:
		return binary.LittleEndian.AppendUint16(b, uint16(v.bits))
	case TypeUint32, TypeInt32, TypeFloat32:
		return binary.LittleEndian.AppendUint32(b, uint32(v.bits))
	case TypeUint64, TypeInt64, TypeFloat64:
		return binary.LittleEndian.AppendUint64(b, v.bits)
	case TypeString:
		return appendString(b, v.str)
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(v.ElemType))
	n := v.Len()
	b = binary.LittleEndian.AppendUint64(b, uint64(n))
	switch a := v.arr.(type) {
	case []string:
		for _, s := range a {
			b = appendString(b, s)
		}
	case []float32:
		for _, x := range a {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
		}
	case []int32:
		for _, x := range a {
			b = binary.LittleEndian.AppendUint32(b, uint32(x))
		}
	case []uint8:
		b = append(b, a...)
	default:
		for i := range n {
			b = appendValue(b, v.Index(i)) // nested arrays: element type, count, elements
		}
	}
	return b
}
