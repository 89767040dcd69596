package hostcomm

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// hostsOf numbers each rank's host by the first rank on it, from what the
// ranks announced: ranks share a host when boot id, host name and pid
// namespace agree; ranks without a boot id are each on their own.
func TestHostsOf(t *testing.T) {
	p := func(host, boot string) peerInfo { return peerInfo{Host: host, BootID: boot, PidNS: "ns"} }
	for _, tc := range []struct {
		name  string
		peers []peerInfo
		want  []int
	}{
		{"one host", []peerInfo{p("a", "1"), p("a", "1")}, []int{0, 0}},
		{"two hosts interleaved", []peerInfo{p("a", "1"), p("b", "2"), p("a", "1"), p("b", "2")}, []int{0, 1, 0, 1}},
		{"same name, other boot", []peerInfo{p("a", "1"), p("a", "2")}, []int{0, 1}},
		{"no boot id", []peerInfo{p("a", ""), p("a", "")}, []int{0, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, hostsOf(tc.peers))
		})
	}
}
