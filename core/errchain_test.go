package core

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/sdk"
)

// TestErrorsKeepTheirCauses: a failure deep in hostnet stays visible to
// errors.Is through core's errors (wrapped with %w), and the result code
// is still the one core chose (sdk.ResultOf takes the outer sentinel).
func TestErrorsKeepTheirCauses(t *testing.T) {
	cfg := testNet(300 * time.Millisecond)
	for _, tc := range []struct {
		name    string
		run     func(t *testing.T) error
		result  sdk.Result
		causes  []error
		dialErr bool // a *net.OpError is in the chain
	}{
		{
			name: "nobody listens at the rendezvous",
			run: func(t *testing.T) error {
				l, err := net.Listen("tcp", "127.0.0.1:0")
				require.NoError(t, err)
				addr := l.Addr().String()
				require.NoError(t, l.Close())
				_, err = InitRank(NewUniqueID(addr, hostnet.Secret{}), 2, 1, WithNetConfig(cfg))
				return err
			},
			result:  sdk.RemoteError,
			causes:  []error{hostnet.ErrTimeout, ErrTimeout},
			dialErr: true, // the last attempt's own error, too
		},
		{
			name: "the rendezvous admits the rank, then never answers",
			run: func(t *testing.T) error {
				var secret hostnet.Secret
				secret[0] = 7
				l, err := hostnet.Listen(cfg, secret)
				require.NoError(t, err)
				t.Cleanup(func() { l.Close() })
				go func() {
					if c, _, err := l.Accept(); err == nil {
						t.Cleanup(func() { c.Close() })
					}
				}()
				_, err = InitRank(NewUniqueID(l.Addr(), secret), 2, 1, WithNetConfig(cfg))
				return err
			},
			result: sdk.RemoteError,
			causes: []error{hostnet.ErrTimeout},
		},
		{
			name: "a peer that never sends",
			run: func(t *testing.T) error {
				comms := startComms(t, 2, cfg)
				return comms[0].Recv(HostBuffer(make([]byte, 4)), 4, sdk.Uint8, 1, 0)
			},
			result: sdk.RemoteError,
			causes: []error{hostnet.ErrTimeout},
		},
		{
			name: "a rendezvous address that is not host:port",
			run: func(t *testing.T) error {
				_, err := InitRank(NewUniqueID("nowhere", hostnet.Secret{}), 2, 1, WithNetConfig(cfg))
				return err
			},
			result: sdk.InvalidArgument,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.run(t)
			require.Error(t, err)
			require.ErrorIs(t, err, tc.result.Err())
			require.Equal(t, tc.result, sdk.ResultOf(err), "%v", err)
			for _, cause := range tc.causes {
				require.ErrorIs(t, err, cause)
			}
			if tc.dialErr {
				var oe *net.OpError
				require.ErrorAs(t, err, &oe)
			}
		})
	}
}
