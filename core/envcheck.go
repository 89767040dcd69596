package core

// CheckEnv returns the error InitRank gives for malformed
// FLAGCX_CLUSTER_SPLIT_LIST, FLAGCX_USE_HOST_COMM or FLAGCX_NET_CHUNK_SIZE
// read through lookup, or nil. A launcher calls it before starting its
// ranks, which would otherwise each report the same mistake.
func CheckEnv(lookup func(string) (string, bool)) error {
	_, err := settings(&options{lookup: lookup})
	return err
}
