package convert

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"

	"github.com/sparkinfer/cc/engine/quant"
)

// Safetensors format (https://huggingface.co/docs/safetensors): a uint64
// little-endian header length N, N bytes of JSON mapping tensor names to
// {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the
// byte buffer after the header) plus an optional "__metadata__" object of
// strings, then the byte buffer.
//
// ParseSafetensors checks: the header length against the file and a 100 MiB
// cap; the JSON (duplicate names, unknown fields); dtypes (F32, F16 and BF16
// only: others are an error naming the tensor); shapes (at most 8 dims,
// element counts without overflow); that each tensor's byte range lies inside
// the buffer, has exactly the size of its shape and dtype, and that ranges
// neither overlap nor leave holes (as the format requires).

const maxSafetensorsHeader = 100 << 20

// STTensor is one tensor of a safetensors file.
type STTensor struct {
	Name  string
	DType string // "F32", "F16" or "BF16"
	Shape []int
	Data  []byte // little-endian elements (a slice of the file when parsed)
}

// Elements is the number of elements.
func (t *STTensor) Elements() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Float32s decodes the tensor to float32 (exactly).
func (t *STTensor) Float32s() []float32 {
	out := make([]float32, t.Elements())
	switch t.DType {
	case "F32":
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))
		}
	case "F16":
		for i := range out {
			out[i] = quant.F16ToF32(binary.LittleEndian.Uint16(t.Data[2*i:]))
		}
	case "BF16":
		for i := range out {
			out[i] = quant.BF16ToF32(binary.LittleEndian.Uint16(t.Data[2*i:]))
		}
	}
	return out
}

// SafetensorsError reports a malformed safetensors file.
type SafetensorsError struct {
	Tensor string // empty when not about one tensor
	Msg    string
}

func (e *SafetensorsError) Error() string {
	if e.Tensor != "" {
		return fmt.Sprintf("safetensors: tensor %q: %s", e.Tensor, e.Msg)
	}
	return "safetensors: " + e.Msg
}

func dtypeSize(dt string) int {
	switch dt {
	case "F32":
		return 4
	case "F16", "BF16":
		return 2
	}
	return 0
}

type stEntry struct {
	DType       string   `json:"dtype"`
	Shape       []int64  `json:"shape"`
	DataOffsets []uint64 `json:"data_offsets"`
}

// ParseSafetensors parses a safetensors file held in memory; tensor data is
// not copied. Tensors are returned sorted by name, with the metadata.
func ParseSafetensors(data []byte) ([]STTensor, map[string]string, error) {
	if len(data) < 8 {
		return nil, nil, &SafetensorsError{Msg: fmt.Sprintf("truncated: %d bytes", len(data))}
	}
	n := binary.LittleEndian.Uint64(data)
	if n > maxSafetensorsHeader || n > uint64(len(data)-8) {
		return nil, nil, &SafetensorsError{Msg: fmt.Sprintf("header length %d exceeds the file (%d bytes) or the 100 MiB cap", n, len(data))}
	}
	hdr := data[8 : 8+n]
	buf := data[8+n:]
	// Decode names in order to catch duplicates, which a map would hide.
	dec := json.NewDecoder(bytes.NewReader(hdr))
	dec.DisallowUnknownFields()
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return nil, nil, &SafetensorsError{Msg: "header is not a JSON object"}
	}
	seen := map[string]bool{}
	var tensors []STTensor
	var meta map[string]string
	type span struct {
		b, e uint64
		name string
	}
	var spans []span
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, &SafetensorsError{Msg: fmt.Sprintf("header: %v", err)}
		}
		name, _ := tok.(string)
		if seen[name] {
			return nil, nil, &SafetensorsError{Tensor: name, Msg: "duplicate name"}
		}
		seen[name] = true
		if name == "__metadata__" {
			if err := dec.Decode(&meta); err != nil {
				return nil, nil, &SafetensorsError{Msg: fmt.Sprintf("__metadata__: %v", err)}
			}
			continue
		}
		var e stEntry
		if err := dec.Decode(&e); err != nil {
			return nil, nil, &SafetensorsError{Tensor: name, Msg: fmt.Sprintf("header entry: %v", err)}
		}
		size := dtypeSize(e.DType)
		if size == 0 {
			return nil, nil, &SafetensorsError{Tensor: name, Msg: fmt.Sprintf("dtype %q is not supported (supported: F32, F16, BF16)", e.DType)}
		}
		if len(e.Shape) > 8 || len(e.DataOffsets) != 2 {
			return nil, nil, &SafetensorsError{Tensor: name, Msg: fmt.Sprintf("%d dims, %d data offsets", len(e.Shape), len(e.DataOffsets))}
		}
		elems := uint64(1)
		shape := make([]int, len(e.Shape))
		for i, d := range e.Shape {
			if d < 0 || (d > 0 && elems > uint64(len(buf))/uint64(d)) {
				return nil, nil, &SafetensorsError{Tensor: name, Msg: fmt.Sprintf("shape %v exceeds the file", e.Shape)}
			}
			elems *= uint64(d)
			shape[i] = int(d)
		}
		b, en := e.DataOffsets[0], e.DataOffsets[1]
		if b > en || en > uint64(len(buf)) {
			return nil, nil, &SafetensorsError{Tensor: name, Msg: fmt.Sprintf("data offsets [%d, %d) outside the %d-byte buffer", b, en, len(buf))}
		}
		if en-b != elems*uint64(size) {
			return nil, nil, &SafetensorsError{Tensor: name, Msg: fmt.Sprintf("%d bytes for shape %v of %s (want %d)", en-b, e.Shape, e.DType, elems*uint64(size))}
		}
		tensors = append(tensors, STTensor{Name: name, DType: e.DType, Shape: shape, Data: buf[b:en:en]})
		spans = append(spans, span{b, en, name})
	}
	if _, err := dec.Token(); err != nil {
		return nil, nil, &SafetensorsError{Msg: fmt.Sprintf("header: %v", err)}
	}
	if dec.More() {
		return nil, nil, &SafetensorsError{Msg: "trailing data after the header object"}
	}
	sort.Slice(spans, func(i, j int) bool {
		return spans[i].b < spans[j].b || (spans[i].b == spans[j].b && spans[i].e < spans[j].e)
	})
	var pos uint64
	for _, s := range spans {
		if s.b != pos {
			return nil, nil, &SafetensorsError{Tensor: s.name, Msg: fmt.Sprintf("data starts at %d, expected %d (overlap or hole)", s.b, pos)}
		}
		pos = s.e
	}
	if pos != uint64(len(buf)) {
		return nil, nil, &SafetensorsError{Msg: fmt.Sprintf("%d trailing bytes after the last tensor", uint64(len(buf))-pos)}
	}
	sort.Slice(tensors, func(i, j int) bool { return tensors[i].Name < tensors[j].Name })
	return tensors, meta, nil
}

// WriteSafetensors writes tensors (in name order) as a safetensors file; the
// header is padded with spaces to a multiple of 8 bytes.
func WriteSafetensors(w io.Writer, tensors []STTensor, meta map[string]string) error {
	ts := append([]STTensor(nil), tensors...)
	sort.Slice(ts, func(i, j int) bool { return ts[i].Name < ts[j].Name })
	hdr := map[string]any{}
	if len(meta) > 0 {
		hdr["__metadata__"] = meta
	}
	var off uint64
	for _, t := range ts {
		if dtypeSize(t.DType) == 0 || len(t.Data) != t.Elements()*dtypeSize(t.DType) {
			return fmt.Errorf("safetensors: tensor %q: %d bytes for %v %s", t.Name, len(t.Data), t.Shape, t.DType)
		}
		hdr[t.Name] = stEntry{DType: t.DType, Shape: toInt64(t.Shape), DataOffsets: []uint64{off, off + uint64(len(t.Data))}}
		off += uint64(len(t.Data))
	}
	j, err := json.Marshal(hdr) // map keys are sorted: deterministic
	if err != nil {
		return err
	}
	for len(j)%8 != 0 {
		j = append(j, ' ')
	}
	if err := binary.Write(w, binary.LittleEndian, uint64(len(j))); err != nil {
		return err
	}
	if _, err := w.Write(j); err != nil {
		return err
	}
	for _, t := range ts {
		if _, err := w.Write(t.Data); err != nil {
			return err
		}
	}
	return nil
}

func toInt64(s []int) []int64 {
	out := make([]int64, len(s))
	for i, v := range s {
		out[i] = int64(v)
	}
	return out
}
