package gguf

import (
	"fmt"
	"math"
)

// ValueType is a GGUF metadata value type.
type ValueType uint32

// The GGUF metadata value types.
const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

var typeNames = [...]string{"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool", "string", "array", "uint64", "int64", "float64"}

func (t ValueType) String() string {
	if int(t) < len(typeNames) {
		return typeNames[t]
	}
	return fmt.Sprintf("value_type(%d)", uint32(t))
}

func (t ValueType) valid() bool { return t <= TypeFloat64 }

// scalarSize is the encoded size of a fixed-size scalar, 0 for string and array.
func (t ValueType) scalarSize() int {
	switch t {
	case TypeUint8, TypeInt8, TypeBool:
		return 1
	case TypeUint16, TypeInt16:
		return 2
	case TypeUint32, TypeInt32, TypeFloat32:
		return 4
	case TypeUint64, TypeInt64, TypeFloat64:
		return 8
	}
	return 0
}

// Value is one metadata value. Scalars keep their type; arrays keep their
// element type and their elements in a typed slice (nested arrays as
// []Value). Build values with the constructors (StringValue, ...).
type Value struct {
	Type     ValueType
	ElemType ValueType // element type when Type is TypeArray

	bits uint64 // integers (two's complement), bool, float bits
	str  string
	arr  any // []uint8 []int8 []uint16 []int16 []uint32 []int32 []float32 []bool []string []uint64 []int64 []float64 []Value
}

// Scalar constructors.
func Uint8Value(v uint8) Value   { return Value{Type: TypeUint8, bits: uint64(v)} }
func Int8Value(v int8) Value     { return Value{Type: TypeInt8, bits: uint64(v)} }
func Uint16Value(v uint16) Value { return Value{Type: TypeUint16, bits: uint64(v)} }
func Int16Value(v int16) Value   { return Value{Type: TypeInt16, bits: uint64(v)} }
func Uint32Value(v uint32) Value { return Value{Type: TypeUint32, bits: uint64(v)} }
func Int32Value(v int32) Value   { return Value{Type: TypeInt32, bits: uint64(v)} }
func Uint64Value(v uint64) Value { return Value{Type: TypeUint64, bits: v} }
func Int64Value(v int64) Value   { return Value{Type: TypeInt64, bits: uint64(v)} }
func Float32Value(v float32) Value {
	return Value{Type: TypeFloat32, bits: uint64(math.Float32bits(v))}
}
func Float64Value(v float64) Value { return Value{Type: TypeFloat64, bits: math.Float64bits(v)} }
func StringValue(v string) Value   { return Value{Type: TypeString, str: v} }
func BoolValue(v bool) Value {
	if v {
		return Value{Type: TypeBool, bits: 1}
	}
	return Value{Type: TypeBool}
}

// Array constructors.
func StringsValue(v []string) Value   { return Value{Type: TypeArray, ElemType: TypeString, arr: v} }
func Float32sValue(v []float32) Value { return Value{Type: TypeArray, ElemType: TypeFloat32, arr: v} }
func Int32sValue(v []int32) Value     { return Value{Type: TypeArray, ElemType: TypeInt32, arr: v} }
func Uint32sValue(v []uint32) Value   { return Value{Type: TypeArray, ElemType: TypeUint32, arr: v} }
func Int64sValue(v []int64) Value     { return Value{Type: TypeArray, ElemType: TypeInt64, arr: v} }
func Uint8sValue(v []uint8) Value     { return Value{Type: TypeArray, ElemType: TypeUint8, arr: v} }

// ArrayValue builds an array of arrays (or of any type) from values that
// must all have type elem.
func ArrayValue(elem ValueType, v []Value) Value {
	return Value{Type: TypeArray, ElemType: elem, arr: v}
}

// Len is the number of elements of an array, 0 for scalars.
func (v Value) Len() int {
	switch a := v.arr.(type) {
	case []uint8:
		return len(a)
	case []int8:
		return len(a)
	case []uint16:
		return len(a)
	case []int16:
		return len(a)
	case []uint32:
		return len(a)
	case []int32:
		return len(a)
	case []float32:
		return len(a)
	case []bool:
		return len(a)
	case []string:
		return len(a)
	case []uint64:
		return len(a)
	case []int64:
		return len(a)
	case []float64:
		return len(a)
	case []Value:
		return len(a)
	}
	return 0
}

// Index returns element i of an array as a Value; it panics if out of range.
func (v Value) Index(i int) Value {
	switch a := v.arr.(type) {
	case []uint8:
		return Uint8Value(a[i])
	case []int8:
		return Int8Value(a[i])
	case []uint16:
		return Uint16Value(a[i])
	case []int16:
		return Int16Value(a[i])
	case []uint32:
		return Uint32Value(a[i])
	case []int32:
		return Int32Value(a[i])
	case []float32:
		return Float32Value(a[i])
	case []bool:
		return BoolValue(a[i])
	case []string:
		return StringValue(a[i])
	case []uint64:
		return Uint64Value(a[i])
	case []int64:
		return Int64Value(a[i])
	case []float64:
		return Float64Value(a[i])
	case []Value:
		return a[i]
	}
	panic("gguf: Index of a non-array value")
}

// AsString returns a string value.
func (v Value) AsString() (string, bool) { return v.str, v.Type == TypeString }

// AsBool returns a bool value.
func (v Value) AsBool() (bool, bool) { return v.bits != 0, v.Type == TypeBool }

// AsFloat returns a float32 or float64 value.
func (v Value) AsFloat() (float64, bool) {
	switch v.Type {
	case TypeFloat32:
		return float64(math.Float32frombits(uint32(v.bits))), true
	case TypeFloat64:
		return math.Float64frombits(v.bits), true
	}
	return 0, false
}

// AsInt returns any integer value that fits in int64.
func (v Value) AsInt() (int64, bool) {
	switch v.Type {
	case TypeUint8, TypeUint16, TypeUint32:
		return int64(v.bits), true
	case TypeUint64:
		return int64(v.bits), v.bits <= math.MaxInt64
	case TypeInt8:
		return int64(int8(v.bits)), true
	case TypeInt16:
		return int64(int16(v.bits)), true
	case TypeInt32:
		return int64(int32(v.bits)), true
	case TypeInt64:
		return int64(v.bits), true
	}
	return 0, false
}

// AsUint returns any non-negative integer value.
func (v Value) AsUint() (uint64, bool) {
	if v.Type == TypeUint64 {
		return v.bits, true
	}
	i, ok := v.AsInt()
	return uint64(i), ok && i >= 0
}

// Strings returns an array of strings (the slice is shared, do not modify).
func (v Value) Strings() ([]string, bool) { a, ok := v.arr.([]string); return a, ok }

// Float32s returns an array of float32 (shared, do not modify).
func (v Value) Float32s() ([]float32, bool) { a, ok := v.arr.([]float32); return a, ok }

// Int32s returns an array of int32 (shared, do not modify).
func (v Value) Int32s() ([]int32, bool) { a, ok := v.arr.([]int32); return a, ok }

// Array returns the elements of an array as Values (a copy for typed arrays).
func (v Value) Array() []Value {
	if a, ok := v.arr.([]Value); ok {
		return a
	}
	out := make([]Value, v.Len())
	for i := range out {
		out[i] = v.Index(i)
	}
	return out
}

// typeDesc describes the value's type for error messages ("array of string").
func (v Value) typeDesc() string {
	if v.Type == TypeArray {
		return "array of " + v.ElemType.String()
	}
	return v.Type.String()
}
