package fault

import "context"

// Bucket is an object store as the uplink writes it: one whole object per
// call (uplink.Bucket).
type Bucket interface {
	WriteAll(ctx context.Context, key string, data []byte) error
}

// Store is a Bucket whose writes fail, stall or fail after the object was
// written, as Writes scripts.
type Store struct {
	Bucket
	Writes Faults
}

// WriteAll writes through to Bucket under the Writes script.
func (s *Store) WriteAll(ctx context.Context, key string, data []byte) error {
	return s.Writes.Do(ctx, func() error { return s.Bucket.WriteAll(ctx, key, data) })
}
