// Package bytesize writes byte counts, in the two forms the module shows:
// Human for people ("1.5 KiB", "32 MiB") and Compact for values a user
// may type back ("64K", "16M", "1536"; internal/base/env.ParseBytes reads it).
// It imports nothing of this module, so every layer can use it
// (docs/architecture.md, Layers).
package bytesize

import "strconv"

// Human writes n with the largest binary unit it reaches and at most four
// significant digits: "512 B", "1.5 KiB", "1.234 MiB", "8 GiB".
func Human(n int64) string {
	const units = "KMGTPE"
	if n < 1<<10 {
		return strconv.FormatInt(n, 10) + " B"
	}
	exp := 0
	for exp+1 < len(units) && n >= 1<<(10*(exp+2)) {
		exp++
	}
	v := float64(n) / float64(int64(1)<<(10*(exp+1)))
	return strconv.FormatFloat(v, 'g', 4, 64) + " " + units[exp:exp+1] + "iB"
}

// Compact writes n with the largest unit that divides it exactly, as
// internal/base/env.ParseBytes reads it: 8, 64K, 32M, 1G, 1536.
func Compact(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return strconv.FormatInt(n>>30, 10) + "G"
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + "M"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + "K"
	}
	return strconv.FormatInt(n, 10)
}
