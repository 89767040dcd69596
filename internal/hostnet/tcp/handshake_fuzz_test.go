package tcp

import (
	"encoding/binary"
	"testing"
)

// FuzzHandshake: the listener's challenge and verdict (read by a dialer)
// and the dialer's answer (read by the listener).
func FuzzHandshake(f *testing.F) {
	chall := make([]byte, hsChallLen)
	copy(chall, hsMagic)
	binary.LittleEndian.PutUint16(chall[8:], hsVersion)
	ans := make([]byte, hsAnswerLen)
	copy(ans, hsMagic)
	binary.LittleEndian.PutUint16(ans[8:], hsVersion)
	binary.LittleEndian.PutUint32(ans[12:], 17)
	verdict := make([]byte, hsVerdictLen)
	f.Add(chall)
	f.Add(ans)
	f.Add(verdict)
	f.Add([]byte{verdictProtocol, 9, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = hsHead(b)
		if n, err := hsHelloLen(b); err == nil && (n < 0 || n > MaxHello) {
			t.Fatalf("accepted a hello of %d bytes", n)
		}
		mac := make([]byte, 32)
		if err := decodeVerdict(b, mac, "127.0.0.1:1"); err == nil && (len(b) != hsVerdictLen || b[0] != verdictOK) {
			t.Fatalf("accepted verdict % x", b)
		}
	})
}
