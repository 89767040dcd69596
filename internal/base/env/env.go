// Package env is the one registry of the FLAGCX_* environment variables:
// each is declared once, in vars.go, with its name, default, parser and a
// one-line doc, and every package reads its variables through it. So a
// variable means the same everywhere (FLAGCX_TIMEOUT has one parser and
// one set of bounds, every byte size accepts 1.5M), its errors all name
// the variable, the bad value and what is allowed, and README.md's table
// cannot drift from what the code reads (a test compares them).
//
// Readers take a Lookup so that tests, and a launcher checking the
// settings its ranks will read, can pass a map instead of the process
// environment:
//
//	d, err := env.Timeout.Get(lookup) // nil lookup: the process environment
//
// It sits at the bottom of the module's layers (docs/architecture.md,
// Layers): it imports only the standard library and
// internal/base/bytesize, which writes byte-count defaults and bounds in
// the form ParseBytes reads back.
package env

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/flagcx/flagcx-go/internal/base/bytesize"
)

// Lookup reads one variable as os.LookupEnv does. nil means the process
// environment.
type Lookup func(name string) (string, bool)

func (l Lookup) get(name string) (string, bool) {
	if l == nil {
		l = os.LookupEnv
	}
	v, ok := l(name)
	v = strings.TrimSpace(v)
	// An empty value counts as unset, as FlagCX reads its variables: a
	// launcher that exports FLAGCX_X= means "no setting".
	return v, ok && v != ""
}

// Scope says who reads a variable.
type Scope int

const (
	// User variables are read by the Go code and set by users.
	User Scope = iota
	// Internal variables are set by flagcx for the processes it starts
	// (ranks of a local launch, plugin probes, conformance workers).
	Internal
	// C variables are read by the C plugins or the emulated runtimes, not
	// by the Go code; they are registered so that the documentation lists
	// them and Go code that sets them uses the same names.
	C
	// Removed variables no longer exist: setting one is an error that
	// says what replaced it.
	Removed
)

func (s Scope) String() string {
	switch s {
	case User:
		return "user"
	case Internal:
		return "internal"
	case C:
		return "C"
	case Removed:
		return "removed"
	}
	return "scope" + strconv.Itoa(int(s))
}

// Var is what the registry knows of one variable, whatever its type.
type Var struct {
	// Name is the variable's name; a family of variables (Family) has
	// a placeholder: FLAGCX_PLUGIN_<NAME>.
	Name string
	// Default is the value an unset variable means, as the documentation
	// writes it; "" when unset means nothing in particular.
	Default string
	// Doc says in one line what the variable does.
	Doc string
	// Form completes an error's "NAME=value: ": what is allowed, e.g.
	// "allowed is a whole number from 1 to 16".
	Form  string
	Scope Scope
}

// Raw is the variable's value, trimmed; ok is false when it is unset or
// empty.
func (v *Var) Raw(l Lookup) (value string, ok bool) { return l.get(v.Name) }

// IsSet reports whether the variable has a non-empty value.
func (v *Var) IsSet(l Lookup) bool {
	_, ok := l.get(v.Name)
	return ok
}

// errorf is the error for value: it names the variable, the value and
// what is allowed, and why the value is not (reason may be "").
func (v *Var) errorf(value, reason string) *Error {
	return &Error{Name: v.Name, Value: value, Form: v.Form, Reason: reason}
}

// Error is a malformed value of a registered variable.
type Error struct {
	Name, Value string
	Form        string // what is allowed ("allowed is ...")
	Reason      string // what is wrong with Value, or ""
}

func (e *Error) Error() string {
	s := fmt.Sprintf("%s=%q: %s", e.Name, e.Value, e.Form)
	if e.Reason != "" {
		s += "; " + e.Reason
	}
	return s
}

// Setting is a registered variable of type T.
type Setting[T any] struct {
	*Var
	def   T
	parse func(string) (T, error) // the error is the reason, or errRejected
}

// errRejected is a parse failure that the variable's Form explains alone.
var errRejected = errors.New("")

// Default is the value of the variable when it is unset or empty.
func (s *Setting[T]) Default() T { return s.def }

// Get reads the variable: its default when unset or empty, an *Error when
// malformed.
func (s *Setting[T]) Get(l Lookup) (T, error) {
	v, _, err := s.Find(l)
	return v, err
}

// Find is Get that also reports whether the variable was set (to a
// non-empty value); an unset one gives the default and set false.
func (s *Setting[T]) Find(l Lookup) (value T, set bool, err error) {
	raw, ok := l.get(s.Name)
	if !ok {
		return s.def, false, nil
	}
	v, perr := s.parse(raw)
	if perr != nil {
		reason := perr.Error()
		if errors.Is(perr, errRejected) {
			reason = ""
		}
		return s.def, true, s.errorf(raw, reason)
	}
	return v, true, nil
}

// Documented replaces the default as the documentation writes it, for
// defaults computed at run time ("256M / ranks").
func (s *Setting[T]) Documented(def string) *Setting[T] {
	s.Var.Default = def
	return s
}

// registry holds every declared variable, by name.
var registry = map[string]*Var{}

// register adds v; a name declared twice is a programming error caught by
// the first test or run of any binary.
func register(v *Var) *Var {
	if _, dup := registry[v.Name]; dup {
		panic("env: " + v.Name + " declared twice")
	}
	registry[v.Name] = v
	return v
}

// All lists the registered variables, sorted by name.
func All() []*Var {
	out := make([]*Var, 0, len(registry))
	for _, v := range registry {
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// ByName returns the registered variable of that name (a family by its
// placeholder name), or nil.
func ByName(name string) *Var { return registry[name] }

func newSetting[T any](scope Scope, name, def, form, doc string, defv T, parse func(string) (T, error)) *Setting[T] {
	v := register(&Var{Name: name, Default: def, Doc: doc, Form: form, Scope: scope})
	return &Setting[T]{Var: v, def: defv, parse: parse}
}

// String declares a variable whose value is a string, used as given
// (trimmed); the package that reads it checks it.
func String(name, def, doc string) *Setting[string] {
	return stringIn(User, name, def, doc)
}

func stringIn(scope Scope, name, def, doc string) *Setting[string] {
	return newSetting(scope, name, def, "allowed is any text", doc, def, func(s string) (string, error) { return s, nil })
}

// Bool declares a switch: 1, true, yes or on; 0, false, no or off (any
// case). Unset is false.
func Bool(name, doc string) *Setting[bool] { return boolIn(User, name, doc) }

// BoolOn declares a switch that is on when unset.
func BoolOn(name, doc string) *Setting[bool] {
	s := boolIn(User, name, doc)
	s.def, s.Var.Default = true, "1"
	return s
}

func boolIn(scope Scope, name, doc string) *Setting[bool] {
	return newSetting(scope, name, "0", "allowed are 1 (or true, yes, on) and 0 (or false, no, off)", doc, false, func(s string) (bool, error) {
		b, ok := ParseBool(s)
		if !ok {
			return false, errRejected
		}
		return b, nil
	})
}

// Int declares a whole number from lo to hi.
func Int(name string, def, lo, hi int, doc string) *Setting[int] {
	form := fmt.Sprintf("allowed is a whole number from %d to %d", lo, hi)
	return newSetting(User, name, strconv.Itoa(def), form, doc, def, func(s string) (int, error) {
		n, err := strconv.Atoi(s)
		switch {
		case err != nil:
			return 0, errors.New("not a whole number")
		case n < lo:
			return 0, fmt.Errorf("below %d", lo)
		case n > hi:
			return 0, fmt.Errorf("above %d", hi)
		}
		return n, nil
	})
}

// Bytes declares a byte count from lo to hi, read by ParseBytes (K, M, G
// 1024-based; 1.5M allowed).
func Bytes(name string, def, lo, hi int64, doc string) *Setting[int] {
	what := "a byte count"
	switch {
	case lo == 1 && hi >= MaxBytes:
		what = "a positive byte count"
	case lo > 0 || hi < MaxBytes:
		what = fmt.Sprintf("a byte count from %s to %s", bytesize.Compact(lo), bytesize.Compact(hi))
	}
	form := "allowed is " + what + " such as 262144, 512K or 1.5M (K, M and G are 1024-based)"
	return newSetting(User, name, bytesize.Compact(def), form, doc, int(def), func(s string) (int, error) {
		n, err := ParseBytes(s)
		switch {
		case err != nil:
			return 0, err
		case n < lo:
			return 0, fmt.Errorf("below %s", bytesize.Compact(lo))
		case n > hi:
			return 0, fmt.Errorf("above %s", bytesize.Compact(hi))
		}
		return int(n), nil
	})
}

// Duration declares a deadline read by ParseDuration: seconds ("30",
// "2.5") or a Go duration ("45s"), positive, at most MaxDuration.
func Duration(name string, def time.Duration, doc string) *Setting[time.Duration] {
	return newSetting(User, name, def.String(), "allowed is a positive number of seconds (30, 2.5) or a Go duration (45s, 1m30s)", doc, def, ParseDuration)
}

// Choice declares a variable that takes one of a few words (any case);
// choices maps each word to its value and form says which are allowed.
func Choice[T any](name string, def T, defText string, choices map[string]T, form, doc string) *Setting[T] {
	up := make(map[string]T, len(choices))
	for k, v := range choices {
		up[strings.ToUpper(k)] = v
	}
	return newSetting(User, name, defText, form, doc, def, func(s string) (T, error) {
		v, ok := up[strings.ToUpper(s)]
		if !ok {
			var zero T
			return zero, errRejected
		}
		return v, nil
	})
}

// Gone declares a variable that no longer exists; Get fails when it is
// set, and form says what replaced it ("this variable no longer exists:
// ...").
func Gone(name, form string) *Setting[struct{}] {
	return newSetting(Removed, name, "", form, "removed", struct{}{}, func(string) (struct{}, error) {
		return struct{}{}, errRejected
	})
}

// Family is a set of variables that share a prefix, each naming
// something: FLAGCX_PLUGIN_<NAME>.
type Family struct {
	*Var
	Prefix string
}

// NewFamily declares the family prefix + placeholder (FLAGCX_PLUGIN_ and
// <NAME>).
func NewFamily(prefix, placeholder, doc string) *Family {
	v := register(&Var{Name: prefix + placeholder, Doc: doc, Form: "allowed is any text", Scope: User})
	return &Family{Var: v, Prefix: prefix}
}

// Member is the name of the family's variable for suffix.
func (f *Family) Member(suffix string) string { return f.Prefix + suffix }

// Set lists the family's variables that environ (os.Environ() when nil)
// sets to a non-empty value, in environ's order, as name and value; other
// registered variables with the same prefix (FLAGCX_PLUGIN_DIR) are not
// members.
func (f *Family) Set(environ []string) [][2]string {
	if environ == nil {
		environ = os.Environ()
	}
	var out [][2]string
	for _, kv := range environ {
		key, val, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(key, f.Prefix) || key == f.Prefix || registry[key] != nil || val == "" {
			continue
		}
		out = append(out, [2]string{key, val})
	}
	return out
}
