package core_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/core"
)

func TestCheckEnv(t *testing.T) {
	cases := []struct {
		env  map[string]string
		want string // "" when the settings are good
	}{
		{nil, ""},
		{map[string]string{core.EnvUseHostComm: "1", core.EnvNetChunkSize: "4M", core.EnvClusterSplitList: "1,1"}, ""},
		{map[string]string{core.EnvUseHostComm: "maybe"}, `FLAGCX_USE_HOST_COMM="maybe"`},
		{map[string]string{core.EnvNetChunkSize: "-3"}, `FLAGCX_NET_CHUNK_SIZE="-3"`},
		{map[string]string{core.EnvClusterSplitList: "two"}, "FLAGCX_CLUSTER_SPLIT_LIST"},
	}
	for _, c := range cases {
		err := core.CheckEnv(func(k string) (string, bool) { v, ok := c.env[k]; return v, ok })
		if c.want == "" {
			require.NoError(t, err, "%v", c.env)
		} else {
			require.ErrorContains(t, err, c.want, "%v", c.env)
		}
	}
}
