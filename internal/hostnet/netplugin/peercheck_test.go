package netplugin

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/hostnet/wire"
)

// FuzzNetNegotiation: a negotiation message (sendSmall's framing) holding
// a network offer. The fuzzer varies the length word n, the payload and
// whether the frame is cut short (cut), and the target builds the fixed
// 4+negotiationMax-byte frame itself: given the frame as one []byte, every
// mutation or minimisation step that changes its length is refused at the
// first check, so each input with new coverage was minimised (up to the
// 60 s -fuzzminimizetime) without ever getting shorter, and a 3 s
// fuzz-smoke window ran a handful of inputs.
func FuzzNetNegotiation(f *testing.F) {
	offer, _ := json.Marshal(netOffer{Want: "IB", Have: true, Device: "mlx5_0", Fabric: "InfiniBand"})
	f.Add(uint32(len(offer)), offer, false)
	f.Add(uint32(0xffffffff), []byte{}, false)
	f.Add(uint32(len(offer)), offer, true)
	f.Fuzz(func(t *testing.T, n uint32, payload []byte, cut bool) {
		msg := make([]byte, 4+negotiationMax) // zero past the payload, as sendSmall's
		putU32(msg, n)
		k := copy(msg[4:], payload)
		frame := msg
		if cut { // a peer that sends only what it means
			frame = msg[:4+k]
		}
		b, err := decodeNegotiation(frame)
		if err != nil {
			return
		}
		if len(b) > negotiationMax {
			t.Fatalf("a %d-byte negotiation payload", len(b))
		}
		o, err := decodeNetOffer(b, 1, "127.0.0.1:1")
		if err == nil && (o.Want != "IB" && o.Want != "auto" && o.Want != "no" || len(o.Device) > maxOfferName) {
			t.Fatalf("accepted offer %+v", o)
		}
	})
}

// FuzzNetChunk: a chunk of a NetLink message as the plugin delivers it.
func FuzzNetChunk(f *testing.F) {
	first := make([]byte, 64)
	binary.LittleEndian.PutUint64(first, 20)
	f.Add(first, 28, 0, 1, 0, 20)
	f.Add(first, 64, 1, 3, 40, 100)
	f.Fuzz(func(t *testing.T, slot []byte, got, i, n, off, want int) {
		buf, err := decodeChunk(slot, got, i, n, off, want, "127.0.0.1:1")
		if err == nil && (off < 0 || len(buf) > want-off || len(buf) > len(slot)) {
			t.Fatalf("accepted a %d-byte chunk at %d of %d", len(buf), off, want)
		}
	})
}

func TestDecodeNetOffer(t *testing.T) {
	good := netOffer{Want: "auto", Have: true, Device: "mlx5_0", Fabric: "InfiniBand"}
	for _, tc := range []struct {
		name string
		edit func(o *netOffer)
		want string
	}{
		{"valid", func(o *netOffer) {}, ""},
		{"unknown want", func(o *netOffer) { o.Want = "maybe" }, "wants maybe (IB, auto or no)"},
		{"long device", func(o *netOffer) { o.Device = strings.Repeat("d", maxOfferName+1) }, "device or fabric"},
		{"control in why", func(o *netOffer) { o.Why = "a\x00b" }, "reason"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := good
			tc.edit(&o)
			b, err := json.Marshal(o)
			require.NoError(t, err)
			got, err := decodeNetOffer(b, 3, "10.0.0.3:77")
			if tc.want == "" {
				require.NoError(t, err)
				require.Equal(t, o, got)
				return
			}
			require.ErrorIs(t, err, wire.ErrProtocol)
			require.ErrorContains(t, err, "rank 3 (10.0.0.3:77)'s network offer")
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestDecodeNegotiation(t *testing.T) {
	msg := make([]byte, 4+negotiationMax)
	putU32(msg, 3)
	copy(msg[4:], "abc")
	got, err := decodeNegotiation(msg)
	require.NoError(t, err)
	require.Equal(t, "abc", string(got))
	putU32(msg, negotiationMax+1)
	_, err = decodeNegotiation(msg)
	require.ErrorContains(t, err, "says 1025 bytes (at most 1024)")
	_, err = decodeNegotiation(msg[:10])
	require.ErrorContains(t, err, "a 10-byte negotiation message")
}

func TestDecodeChunk(t *testing.T) {
	slot := make([]byte, 64)
	binary.LittleEndian.PutUint64(slot, 20)
	buf, err := decodeChunk(slot, 28, 0, 1, 0, 20, "peer:1")
	require.NoError(t, err)
	require.Len(t, buf, 20)
	_, err = decodeChunk(slot, 28, 0, 1, 0, 16, "peer:1")
	var le *wire.LengthError
	require.True(t, errors.As(err, &le))
	require.Equal(t, wire.LengthError{Got: 20, Want: 16}, *le)
	_, err = decodeChunk(slot, 65, 0, 1, 0, 20, "peer:1")
	require.ErrorContains(t, err, "chunk 0 of 65 bytes in a 64-byte slot")
	_, err = decodeChunk(slot, 4, 0, 1, 0, 20, "peer:1")
	require.ErrorContains(t, err, "a 4-byte first chunk")
	_, err = decodeChunk(slot, 30, 1, 2, 0, 20, "peer:1")
	require.ErrorContains(t, err, "does not fit the message")
	binary.LittleEndian.PutUint64(slot, ^uint64(0))
	_, err = decodeChunk(slot, 28, 0, 1, 0, 20, "peer:1")
	require.True(t, errors.As(err, &le))
	require.Positive(t, le.Got)
}

func TestChooseNet(t *testing.T) {
	ib := netOffer{Want: "IB", Have: true, Device: "mlx5_0", Fabric: "InfiniBand"}
	auto := netOffer{Want: "auto", Have: true, Device: "mlx5_1", Fabric: "InfiniBand"}
	roce := netOffer{Want: "IB", Have: true, Device: "mlx5_2", Fabric: "RoCE"}
	autoRoce := netOffer{Want: "auto", Have: true, Device: "mlx5_2", Fabric: "RoCE"}
	autoNone := netOffer{Want: "auto", Why: "no RDMA device: none here"}
	no := netOffer{Want: "no", Why: "it uses TCP sockets"}
	emu := netOffer{Want: "auto", Have: true, Emulated: true}
	for _, tc := range []struct {
		name       string
		self, peer netOffer
		use        bool
		err        string
	}{
		{"both auto with devices", auto, auto, true, ""},
		{"auto without a device on one side", auto, autoNone, false, ""},
		{"socket on one side", auto, no, false, ""},
		{"IB and auto", ib, auto, true, ""},
		{"IB against socket", ib, no, false, "rank 1 cannot: it uses TCP sockets"},
		{"IB against no device", ib, autoNone, false, "rank 1 cannot: no RDMA device: none here"},
		{"emulated against real", emu, ib, false, "emulated fabric"},
		{"IB on InfiniBand and RoCE NICs", ib, roce, false, "rank 0's device mlx5_0 is InfiniBand and rank 1's mlx5_2 is RoCE, which cannot reach each other (set FLAGCX_IB_HCA"},
		{"auto on InfiniBand and RoCE NICs keeps TCP", auto, autoRoce, false, ""},
		{"RoCE on both", roce, autoRoce, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			use, err := chooseNet(tc.self, tc.peer, 0, 1)
			require.Equal(t, tc.use, use)
			if tc.err == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrNoNetDevice)
			require.ErrorContains(t, err, tc.err)
			use2, err2 := chooseNet(tc.peer, tc.self, 1, 0)
			require.Equal(t, use, use2)
			require.Error(t, err2, "both sides see the same verdict")
		})
	}
}
