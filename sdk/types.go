// Package sdk holds the types shared by every layer and by the C plugin ABI:
// data types, reduction operations and result codes (with the error
// sentinels ErrInvalidArgument and the rest), all numbered as in NCCL and
// FlagCX so that values cross the C boundary unchanged, and the plugin ABI
// version this build loads (PluginABIVersion).
//
// It also holds the one vocabulary of collectives: Collective and its table
// (colltable.go: buffers, in-place layout, reduction, root, bus bandwidth
// and plugin entry of each), Call with the one argument checker every entry
// validates with (check.go), and Dispatch, which runs a Call on any
// implementation of Collectives (collective.go). The C headers of both
// plugin ABIs are in sdk/include; sdk/loader and sdk/netplugin load them.
package sdk

import (
	"fmt"
	"strings"
)

// DataType is an element type, numbered as ncclDataType_t / flagcxDataType_t.
type DataType int32

// The data types, in NCCL's order.
const (
	Int8 DataType = iota
	Uint8
	Int32
	Uint32
	Int64
	Uint64
	Float16
	Float32
	Float64
	Bfloat16
	NumDataTypes
)

var dataTypeNames = [NumDataTypes]string{"int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64", "bfloat16"}

// aliases accepted on input, as nccl-tests and torch users spell them.
var dataTypeAliases = map[string]DataType{
	"char": Int8, "int": Int32, "half": Float16, "float": Float32, "double": Float64,
	"fp16": Float16, "fp32": Float32, "fp64": Float64, "bf16": Bfloat16,
}

// AllDataTypes lists every data type in numbering order.
func AllDataTypes() []DataType {
	all := make([]DataType, NumDataTypes)
	for i := range all {
		all[i] = DataType(i)
	}
	return all
}

// Valid reports whether t is one of the ten data types.
func (t DataType) Valid() bool { return t >= 0 && t < NumDataTypes }

// Size is the width of one element in bytes.
func (t DataType) Size() int {
	switch t {
	case Int8, Uint8:
		return 1
	case Float16, Bfloat16:
		return 2
	case Int32, Uint32, Float32:
		return 4
	case Int64, Uint64, Float64:
		return 8
	}
	return 0
}

// IsFloat reports whether t is a floating-point type.
func (t DataType) IsFloat() bool {
	return t == Float16 || t == Float32 || t == Float64 || t == Bfloat16
}

func (t DataType) String() string {
	if !t.Valid() {
		return fmt.Sprintf("datatype(%d)", int32(t))
	}
	return dataTypeNames[t]
}

// ParseDataType reads a data type name ("float32", "bf16", "half", ...).
func ParseDataType(s string) (DataType, error) {
	name := strings.ToLower(strings.TrimSpace(s))
	for i, n := range dataTypeNames {
		if n == name {
			return DataType(i), nil
		}
	}
	if t, ok := dataTypeAliases[name]; ok {
		return t, nil
	}
	return 0, fmt.Errorf("%w: unknown data type %q (use one of %s)", ErrInvalidArgument, s, strings.Join(dataTypeNames[:], ", "))
}

// MarshalText and UnmarshalText let flags, JSON and config files carry names.
func (t DataType) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

func (t *DataType) UnmarshalText(b []byte) error {
	v, err := ParseDataType(string(b))
	if err != nil {
		return err
	}
	*t = v
	return nil
}

// RedOp is a reduction operation, numbered as ncclRedOp_t / flagcxRedOp_t.
type RedOp int32

// The reduction operations, in NCCL's order.
const (
	Sum RedOp = iota
	Prod
	Max
	Min
	Avg
	NumRedOps
)

var redOpNames = [NumRedOps]string{"sum", "prod", "max", "min", "avg"}

// AllRedOps lists every reduction operation in numbering order.
func AllRedOps() []RedOp { return []RedOp{Sum, Prod, Max, Min, Avg} }

// Valid reports whether o is one of the five operations.
func (o RedOp) Valid() bool { return o >= 0 && o < NumRedOps }

func (o RedOp) String() string {
	if !o.Valid() {
		return fmt.Sprintf("redop(%d)", int32(o))
	}
	return redOpNames[o]
}

// ParseRedOp reads an operation name ("sum", "prod", "max", "min", "avg").
func ParseRedOp(s string) (RedOp, error) {
	name := strings.ToLower(strings.TrimSpace(s))
	for i, n := range redOpNames {
		if n == name {
			return RedOp(i), nil
		}
	}
	return 0, fmt.Errorf("%w: unknown reduction op %q (use one of %s)", ErrInvalidArgument, s, strings.Join(redOpNames[:], ", "))
}

func (o RedOp) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

func (o *RedOp) UnmarshalText(b []byte) error {
	v, err := ParseRedOp(string(b))
	if err != nil {
		return err
	}
	*o = v
	return nil
}
