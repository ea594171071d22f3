// Package gguf reads and writes GGUF version 3 files, the container of
// llama.cpp models: metadata key/values, tensor infos and an aligned data
// section.
//
// Layout (little-endian): magic "GGUF", uint32 version (3), uint64 tensor
// count, uint64 metadata count; the metadata (key string, uint32 value type,
// value; strings are a uint64 length and bytes; arrays a uint32 element type,
// uint64 count and elements); the tensor infos (name, uint32 dimension count,
// uint64 dims, uint32 ggml type, uint64 offset relative to the data section);
// padding to general.alignment (default 32); the data section.
//
// What Parse checks: the magic and version (1 and 2 are refused; big-endian
// files are recognised and refused); every count, length and offset against
// the bytes that remain, so no allocation exceeds a small multiple of the
// file size and nothing is read out of range; value types; nesting depth of
// arrays (at most 4); duplicate keys and tensor names; general.alignment
// (uint32, a power of two); tensor dimension counts (1-4), element counts,
// types (supported by package quant), row lengths (whole blocks), offsets
// (aligned, inside the data section) and sizes. Errors are *FormatError
// naming the key or tensor. What it does not check: the meaning of the
// metadata (an architecture's required keys), overlapping tensors, and the
// values inside tensor data (NaNs dequantize as NaNs).
package gguf

import (
	"encoding/binary"

	"fmt"
	"math"
	"math/bits"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sparkinfer/cc/engine/quant"
)

// Magic is the first four bytes of a GGUF file.
const Magic = "GGUF"

// Version is the GGUF version this package reads and writes.
const Version = 3

// DefaultAlignment is the data alignment when general.alignment is absent.
const DefaultAlignment = 32

// Caps that bound what a hostile file can make the parser do.
const (
	maxDims       = 4
	maxArrayDepth = 4
	maxNameLen    = 1 << 16 // key and tensor-name length
	maxAlignment  = 1 << 20
)

// FormatError reports a malformed file: where (byte offset), what (the key
// or tensor, when known) and why.
type FormatError struct {
	Offset int64
	Key    string // metadata key, if the error is in one
	Tensor string // tensor name, if the error is in one
	Msg    string
}

func (e *FormatError) Error() string {
	var b strings.Builder
	b.WriteString("gguf: ")
	switch {
	case e.Key != "":
		fmt.Fprintf(&b, "key %q: ", e.Key)
	case e.Tensor != "":
		fmt.Fprintf(&b, "tensor %q: ", e.Tensor)
	}
	fmt.Fprintf(&b, "%s (at byte %d)", e.Msg, e.Offset)
	return b.String()
}

// KeyError reports a metadata key that is missing or has another type than
// the accessor asked for.
type KeyError struct {
	Key  string
	Want string // the type asked for
	Got  string // the type found; empty when the key is missing
}

func (e *KeyError) Error() string {
	if e.Got == "" {
		return fmt.Sprintf("gguf: missing key %q (want %s)", e.Key, e.Want)
	}
	return fmt.Sprintf("gguf: key %q has type %s, want %s", e.Key, e.Got, e.Want)
}

// KV is one metadata entry.
type KV struct {
	Key   string
	Value Value
}

// TensorInfo describes one tensor. Dims are in ggml order: Dims[0] is the
// contiguous (row) length; a matrix W[out][in] has Dims = {in, out}.
type TensorInfo struct {
	Name   string
	Dims   []uint64
	Type   quant.Type
	Offset uint64 // relative to the data section
	Size   uint64 // bytes
}

// Elements is the number of elements of the tensor.
func (t *TensorInfo) Elements() uint64 {
	n := uint64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// File is a parsed GGUF file.
type File struct {
	Version   uint32
	Alignment uint64
	KV        []KV         // metadata in file order
	Tensors   []TensorInfo // in file order

	// DataOffset is the file offset of the data section.
	DataOffset uint64

	data    []byte // the whole file
	mapped  bool
	keys    map[string]int
	tensors map[string]int
}

// Open memory-maps and parses the file at path. Close unmaps it; tensor data
// must not be used after Close. The mapping is read-only and shared: a file
// truncated by another process while mapped makes reads past its new end
// fault (SIGBUS), so model files must not be rewritten in place while open.
func Open(path string) (*File, error) {
	fd, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fd.Close()
	st, err := fd.Stat()
	if err != nil {
		return nil, err
	}
	size := st.Size()
	if size == 0 {
		return nil, &FormatError{Msg: "empty file"}
	}
	if size > math.MaxInt || int64(int(size)) != size {
		return nil, fmt.Errorf("gguf: %q is too large to map (%d bytes)", path, size)
	}
	data, err := unix.Mmap(int(fd.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("gguf: mmap %q: %w", path, err)
	}
	f, err := Parse(data)
	if err != nil {
		unix.Munmap(data)
		return nil, err
	}
	f.mapped = true
	return f, nil
}

// Close releases the mapping of a file opened with Open; for Parse it does nothing.
func (f *File) Close() error {
	if !f.mapped || f.data == nil {
		return nil
	}
	d := f.data
	f.data = nil
	f.mapped = false
	return unix.Munmap(d)
}

// Bytes returns the whole file.
func (f *File) Bytes() []byte { return f.data }

type reader struct {
	b   []byte
	off int
	key string // current key or tensor, for errors
	ten string
}

func (r *reader) fail(format string, args ...any) error {
	return &FormatError{Offset: int64(r.off), Key: r.key, Tensor: r.ten, Msg: fmt.Sprintf(format, args...)}
}

func (r *reader) remaining() int { return len(r.b) - r.off }

func (r *reader) need(n int, what string) error {
	if n < 0 || r.remaining() < n {
		return r.fail("truncated: %s needs %d bytes, %d remain", what, n, r.remaining())
	}
	return nil
}

func (r *reader) u32(what string) (uint32, error) {
	if err := r.need(4, what); err != nil {
		return 0, err
	}
	v := binary.LittleEndian.Uint32(r.b[r.off:])
	r.off += 4
	return v, nil
}

func (r *reader) u64(what string) (uint64, error) {
	if err := r.need(8, what); err != nil {
		return 0, err
	}
	v := binary.LittleEndian.Uint64(r.b[r.off:])
	r.off += 8
	return v, nil
}

// count reads a uint64 count of items each at least minSize bytes and checks
// it against the remaining bytes.
func (r *reader) count(what string, minSize int) (int, error) {
	n, err := r.u64(what)
	if err != nil {
		return 0, err
	}
	if n > uint64(r.remaining()/minSize) {
		return 0, r.fail("%s %d exceeds what the remaining %d bytes can hold", what, n, r.remaining())
	}
	return int(n), nil
}

func (r *reader) str(what string, maxLen int) (string, error) {
	n, err := r.u64(what + " length")
	if err != nil {
		return "", err
	}
	if n > uint64(maxLen) {
		return "", r.fail("%s length %d exceeds the limit %d", what, n, maxLen)
	}
	if err := r.need(int(n), what); err != nil {
		return "", err
	}
	s := string(r.b[r.off : r.off+int(n)])
	r.off += int(n)
	return s, nil
}

// Parse parses a GGUF file held in memory. Tensor data is not copied:
// TensorData returns slices of data.
func Parse(data []byte) (*File, error) {
	r := &reader{b: data}
	if len(data) < 4 {
		return nil, r.fail("truncated: %d bytes, not a gguf file", len(data))
	}
	if string(data[:4]) != Magic {
		return nil, r.fail("bad magic %q, not a gguf file", data[:4])
	}
	r.off = 4
	ver, err := r.u32("version")
	if err != nil {
		return nil, err
	}
	switch {
	case ver == Version:
	case ver == 1 || ver == 2:
		return nil, &FormatError{Offset: 4, Msg: fmt.Sprintf("gguf version %d is not supported (only version 3; re-convert the model with a current llama.cpp)", ver)}
	case bits.ReverseBytes32(ver) <= Version:
		return nil, &FormatError{Offset: 4, Msg: "big-endian gguf files are not supported"}
	default:
		return nil, &FormatError{Offset: 4, Msg: fmt.Sprintf("unknown gguf version %d (only version 3)", ver)}
	}
	nt, err := r.u64("tensor count")
	if err != nil {
		return nil, err
	}
	nkv, err := r.u64("metadata count")
	if err != nil {
		return nil, err
	}
	// A key/value needs at least 8+4+1 bytes, a tensor info 8+4+8+4+8.
	if nkv > uint64(r.remaining()/13) {
		return nil, r.fail("metadata count %d exceeds what the remaining %d bytes can hold", nkv, r.remaining())
	}
	f := &File{Version: ver, Alignment: DefaultAlignment, data: data, keys: make(map[string]int, nkv)}
	f.KV = make([]KV, 0, nkv)
	for i := uint64(0); i < nkv; i++ {
		r.key = ""
		key, err := r.str(fmt.Sprintf("key %d", i), maxNameLen)
		if err != nil {
			return nil, err
		}
		r.key = key
		if _, dup := f.keys[key]; dup {
			return nil, r.fail("duplicate key")
		}
		t, err := r.u32("value type")
		if err != nil {
			return nil, err
		}
		v, err := r.value(ValueType(t), 0)
		if err != nil {
			return nil, err
		}
		f.keys[key] = len(f.KV)
		f.KV = append(f.KV, KV{key, v})
	}
	r.key = ""
	if i, ok := f.keys["general.alignment"]; ok {
		v := f.KV[i].Value
		if v.Type != TypeUint32 {
			return nil, &FormatError{Key: "general.alignment", Msg: "type " + v.typeDesc() + ", want uint32"}
		}
		a := v.bits
		if a == 0 || a&(a-1) != 0 || a > maxAlignment {
			return nil, &FormatError{Key: "general.alignment", Msg: fmt.Sprintf("alignment %d is not a power of two up to %d", a, maxAlignment)}
		}
		f.Alignment = a
	}
	if nt > uint64(r.remaining()/32) {
		return nil, r.fail("tensor count %d exceeds what the remaining %d bytes can hold", nt, r.remaining())
	}
	f.Tensors = make([]TensorInfo, 0, nt)
	f.tensors = make(map[string]int, nt)
	for i := uint64(0); i < nt; i++ {
		r.ten = ""
		name, err := r.str(fmt.Sprintf("tensor %d name", i), maxNameLen)
		if err != nil {
			return nil, err
		}
		r.ten = name
		if _, dup := f.tensors[name]; dup {
			return nil, r.fail("duplicate tensor name")
		}
		nd, err := r.u32("dimension count")
		if err != nil {
			return nil, err
		}
		if nd == 0 || nd > maxDims {
			return nil, r.fail("%d dimensions (want 1 to %d)", nd, maxDims)
		}
		ti := TensorInfo{Name: name, Dims: make([]uint64, nd)}
		n := uint64(1)
		for j := range ti.Dims {
			d, err := r.u64("dimension")
			if err != nil {
				return nil, err
			}
			if d == 0 {
				return nil, r.fail("dimension %d is 0", j)
			}
			hi, lo := bits.Mul64(n, d)
			if hi != 0 || lo > math.MaxInt64 {
				return nil, r.fail("element count overflows")
			}
			n = lo
			ti.Dims[j] = d
		}
		typ, err := r.u32("tensor type")
		if err != nil {
			return nil, err
		}
		ti.Type = quant.Type(typ)
		if !ti.Type.Supported() {
			return nil, r.fail("%v", &quant.UnsupportedTypeError{Type: ti.Type})
		}
		if ti.Offset, err = r.u64("offset"); err != nil {
			return nil, err
		}
		if ti.Dims[0] > math.MaxInt32*64 || ti.Dims[0]%uint64(ti.Type.BlockSize()) != 0 {
			return nil, r.fail("row length %d is not a multiple of the %s block size %d", ti.Dims[0], ti.Type, ti.Type.BlockSize())
		}
		rowBytes := ti.Dims[0] / uint64(ti.Type.BlockSize()) * uint64(ti.Type.BlockBytes())
		hi, size := bits.Mul64(rowBytes, n/ti.Dims[0])
		if hi != 0 || size > uint64(len(data)) {
			return nil, r.fail("size of %d elements of %s exceeds the file", n, ti.Type)
		}
		ti.Size = size
		f.tensors[name] = len(f.Tensors)
		f.Tensors = append(f.Tensors, ti)
	}
	r.ten = ""
	start := alignUp(uint64(r.off), f.Alignment)
	f.DataOffset = start
	if len(f.Tensors) == 0 {
		return f, nil
	}
	if start > uint64(len(data)) {
		return nil, r.fail("truncated: data section starts at %d, file has %d bytes", start, len(data))
	}
	avail := uint64(len(data)) - start
	for i := range f.Tensors {
		t := &f.Tensors[i]
		if t.Offset%f.Alignment != 0 {
			return nil, &FormatError{Offset: int64(start), Tensor: t.Name, Msg: fmt.Sprintf("offset %d is not a multiple of the alignment %d", t.Offset, f.Alignment)}
		}
		if t.Offset > avail || t.Size > avail-t.Offset {
			return nil, &FormatError{Offset: int64(start), Tensor: t.Name, Msg: fmt.Sprintf("data [%d, +%d) lies outside the %d-byte data section (truncated file?)", t.Offset, t.Size, avail)}
		}
	}
	return f, nil
}

func alignUp(n, a uint64) uint64 { return (n + a - 1) / a * a }

// value reads one value of type t.
func (r *reader) value(t ValueType, depth int) (Value, error) {
	if !t.valid() {
		return Value{}, r.fail("unknown value type %d", uint32(t))
	}
	if sz := t.scalarSize(); sz > 0 {
		if err := r.need(sz, t.String()+" value"); err != nil {
			return Value{}, err
		}
		var b uint64
		switch sz {
		case 1:
			b = uint64(r.b[r.off])
		case 2:
			b = uint64(binary.LittleEndian.Uint16(r.b[r.off:]))
		case 4:
			b = uint64(binary.LittleEndian.Uint32(r.b[r.off:]))
		case 8:
			b = binary.LittleEndian.Uint64(r.b[r.off:])
		}
		if t == TypeBool && b > 1 {
			return Value{}, r.fail("bool value %d is neither 0 nor 1", b)
		}
		r.off += sz
		v := Value{Type: t, bits: b}
		// Sign-extend signed types so that bits is the int64's two's complement.
		switch t {
		case TypeInt8:
			v.bits = uint64(int64(int8(b)))
		case TypeInt16:
			v.bits = uint64(int64(int16(b)))
		case TypeInt32:
			v.bits = uint64(int64(int32(b)))
		}
		return v, nil
	}
	if t == TypeString {
		s, err := r.str("string", math.MaxInt32)
		return StringValue(s), err
	}
	// Array.
	if depth >= maxArrayDepth {
		return Value{}, r.fail("arrays nested deeper than %d", maxArrayDepth)
	}
	et32, err := r.u32("array element type")
	if err != nil {
		return Value{}, err
	}
	et := ValueType(et32)
	if !et.valid() {
		return Value{}, r.fail("unknown array element type %d", et32)
	}
	minSize := et.scalarSize()
	switch et {
	case TypeString:
		minSize = 8
	case TypeArray:
		minSize = 12
	}
	n, err := r.count("array length", minSize)
	if err != nil {
		return Value{}, err
	}
	v := Value{Type: TypeArray, ElemType: et}
	if sz := et.scalarSize(); sz > 0 {
		raw := r.b[r.off : r.off+n*sz]
		r.off += n * sz
		switch et {
		case TypeUint8:
			v.arr = append([]uint8(nil), raw...)
		case TypeInt8:
			a := make([]int8, n)
			for i := range a {
				a[i] = int8(raw[i])
			}
			v.arr = a
		case TypeBool:
			a := make([]bool, n)
			for i := range a {
				if raw[i] > 1 {
					return Value{}, r.fail("bool array element %d is %d", i, raw[i])
				}
				a[i] = raw[i] == 1
			}
			v.arr = a
		case TypeUint16:
			a := make([]uint16, n)
			for i := range a {
				a[i] = binary.LittleEndian.Uint16(raw[2*i:])
			}
			v.arr = a
		case TypeInt16:
			a := make([]int16, n)
			for i := range a {
				a[i] = int16(binary.LittleEndian.Uint16(raw[2*i:]))
			}
			v.arr = a
		case TypeUint32:
			a := make([]uint32, n)
			for i := range a {
				a[i] = binary.LittleEndian.Uint32(raw[4*i:])
			}
			v.arr = a
		case TypeInt32:
			a := make([]int32, n)
			for i := range a {
				a[i] = int32(binary.LittleEndian.Uint32(raw[4*i:]))
			}
			v.arr = a
		case TypeFloat32:
			a := make([]float32, n)
			for i := range a {
				a[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
			}
			v.arr = a
		case TypeUint64:
			a := make([]uint64, n)
			for i := range a {
				a[i] = binary.LittleEndian.Uint64(raw[8*i:])
			}
			v.arr = a
		case TypeInt64:
			a := make([]int64, n)
			for i := range a {
				a[i] = int64(binary.LittleEndian.Uint64(raw[8*i:]))
			}
			v.arr = a
		case TypeFloat64:
			a := make([]float64, n)
			for i := range a {
				a[i] = math.Float64frombits(binary.LittleEndian.Uint64(raw[8*i:]))
			}
			v.arr = a
		}
		return v, nil
	}
	if et == TypeString {
		a := make([]string, n)
		for i := range a {
			if a[i], err = r.str("string", math.MaxInt32); err != nil {
				return Value{}, err
			}
		}
		v.arr = a
		return v, nil
	}
	a := make([]Value, n)
	for i := range a {
		if a[i], err = r.value(TypeArray, depth+1); err != nil {
			return Value{}, err
		}
	}
	v.arr = a
	return v, nil
}

// Value returns the metadata value of key.
func (f *File) Value(key string) (Value, bool) {
	i, ok := f.keys[key]
	if !ok {
		return Value{}, false
	}
	return f.KV[i].Value, true
}

func (f *File) get(key, want string) (Value, error) {
	v, ok := f.Value(key)
	if !ok {
		return Value{}, &KeyError{Key: key, Want: want}
	}
	return v, nil
}

// String returns a string value.
func (f *File) String(key string) (string, error) {
	v, err := f.get(key, "string")
	if err != nil {
		return "", err
	}
	s, ok := v.AsString()
	if !ok {
		return "", &KeyError{Key: key, Want: "string", Got: v.typeDesc()}
	}
	return s, nil
}

// Uint returns a non-negative integer value of any integer type.
func (f *File) Uint(key string) (uint64, error) {
	v, err := f.get(key, "non-negative integer")
	if err != nil {
		return 0, err
	}
	u, ok := v.AsUint()
	if !ok {
		got := v.typeDesc()
		if _, isInt := v.AsInt(); isInt {
			got = "negative " + got
		}
		return 0, &KeyError{Key: key, Want: "non-negative integer", Got: got}
	}
	return u, nil
}

// Int returns an integer value of any integer type that fits in int64.
func (f *File) Int(key string) (int64, error) {
	v, err := f.get(key, "integer")
	if err != nil {
		return 0, err
	}
	i, ok := v.AsInt()
	if !ok {
		return 0, &KeyError{Key: key, Want: "integer", Got: v.typeDesc()}
	}
	return i, nil
}

// Float returns a float32 or float64 value.
func (f *File) Float(key string) (float64, error) {
	v, err := f.get(key, "float")
	if err != nil {
		return 0, err
	}
	x, ok := v.AsFloat()
	if !ok {
		return 0, &KeyError{Key: key, Want: "float", Got: v.typeDesc()}
	}
	return x, nil
}

// Bool returns a bool value.
func (f *File) Bool(key string) (bool, error) {
	v, err := f.get(key, "bool")
	if err != nil {
		return false, err
	}
	b, ok := v.AsBool()
	if !ok {
		return false, &KeyError{Key: key, Want: "bool", Got: v.typeDesc()}
	}
	return b, nil
}

// Strings returns an array of strings (shared; do not modify).
func (f *File) Strings(key string) ([]string, error) {
	v, err := f.get(key, "array of string")
	if err != nil {
		return nil, err
	}
	a, ok := v.Strings()
	if !ok {
		return nil, &KeyError{Key: key, Want: "array of string", Got: v.typeDesc()}
	}
	return a, nil
}

// Float32s returns an array of float32 (shared; do not modify).
func (f *File) Float32s(key string) ([]float32, error) {
	v, err := f.get(key, "array of float32")
	if err != nil {
		return nil, err
	}
	a, ok := v.Float32s()
	if !ok {
		return nil, &KeyError{Key: key, Want: "array of float32", Got: v.typeDesc()}
	}
	return a, nil
}

// Int32s returns an array of int32 (shared; do not modify).
func (f *File) Int32s(key string) ([]int32, error) {
	v, err := f.get(key, "array of int32")
	if err != nil {
		return nil, err
	}
	a, ok := v.Int32s()
	if !ok {
		return nil, &KeyError{Key: key, Want: "array of int32", Got: v.typeDesc()}
	}
	return a, nil
}

// Architecture returns general.architecture.
func (f *File) Architecture() (string, error) { return f.String("general.architecture") }

// Tensor returns the info of the named tensor.
func (f *File) Tensor(name string) (*TensorInfo, bool) {
	i, ok := f.tensors[name]
	if !ok {
		return nil, false
	}
	return &f.Tensors[i], true
}

// TensorData returns the bytes of tensor t (checked at parse time). It
// returns nil for a tensor that is not from this file or after Close.
func (f *File) TensorData(t *TensorInfo) []byte {
	i, ok := f.tensors[t.Name]
	if !ok || f.data == nil {
		return nil
	}
	t = &f.Tensors[i]
	start := f.DataOffset + t.Offset
	return f.data[start : start+t.Size : start+t.Size]
}
