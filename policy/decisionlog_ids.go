package policy

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	mathrand "math/rand/v2"
	"strings"
	"sync/atomic"
	"time"
)

// randomUUID fills u with the random bytes of a decision id (a version 4
// UUID, as OPA's decision_id is) from the operating system's random source.
func randomUUID(u *[16]byte) { _, _ = rand.Read(u[:]) }

// uuidSource makes decision ids for one goroutine at a time: version 4
// UUIDs whose 122 random bits come from a ChaCha8 generator seeded from
// the operating system's random source (a cryptographically strong
// generator, as crypto/rand is), without a call into crypto/rand per id.
type uuidSource struct{ rng *mathrand.ChaCha8 }

func newUUIDSource() *uuidSource {
	var seed [32]byte
	_, _ = rand.Read(seed[:])
	return &uuidSource{rng: mathrand.NewChaCha8(seed)}
}

// fill sets u to the random bytes of the next id.
func (s *uuidSource) fill(u *[16]byte) {
	binary.LittleEndian.PutUint64(u[:8], s.rng.Uint64())
	binary.LittleEndian.PutUint64(u[8:], s.rng.Uint64())
}

// uuidLen is the length of a UUID in the 8-4-4-4-12 form.
const uuidLen = 36

// appendUUID sets u's version (4) and variant bits and appends it in the
// 8-4-4-4-12 form.
func appendUUID(b []byte, u *[16]byte) []byte {
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	var out [uuidLen]byte
	hex.Encode(out[0:8], u[0:4])
	out[8] = '-'
	hex.Encode(out[9:13], u[4:6])
	out[13] = '-'
	hex.Encode(out[14:18], u[6:8])
	out[18] = '-'
	hex.Encode(out[19:23], u[8:10])
	out[23] = '-'
	hex.Encode(out[24:], u[10:16])
	return append(b, out[:]...)
}

// timestampClock formats event timestamps as time.RFC3339Nano in UTC,
// keeping the date and time of the current second so that an event only
// writes its fraction. It is safe for concurrent use.
type timestampClock struct {
	second atomic.Pointer[stampSecond]
}

type stampSecond struct {
	unix   int64
	prefix string // "2006-01-02T15:04:05", without the zone
}

// appendFormat appends t.UTC().Format(time.RFC3339Nano) to b.
func (c *timestampClock) appendFormat(b []byte, t time.Time) []byte {
	t = t.UTC()
	sec := t.Unix()
	s := c.second.Load()
	if s == nil || s.unix != sec {
		whole := t.Truncate(time.Second).Format(time.RFC3339)
		s = &stampSecond{unix: sec, prefix: strings.TrimSuffix(whole, "Z")}
		c.second.Store(s)
	}
	b = append(b, s.prefix...)
	if ns := t.Nanosecond(); ns != 0 {
		var digits [9]byte
		for i := 8; i >= 0; i-- {
			digits[i] = byte('0' + ns%10)
			ns /= 10
		}
		n := 9
		for digits[n-1] == '0' {
			n--
		}
		b = append(append(b, '.'), digits[:n]...)
	}
	return append(b, 'Z')
}
