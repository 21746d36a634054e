package fs

// PortableWrites makes s write tool results the portable way, as on a filesystem without
// O_TMPFILE, so the tests cover both paths.
func PortableWrites(s *Store) { s.noTmpfile.Store(true) }

// WritesPortably reports whether s has stopped trying O_TMPFILE writes.
func WritesPortably(s *Store) bool { return s.noTmpfile.Load() }

// FastWrites is how many tool results s wrote the fast way (O_TMPFILE).
func FastWrites(s *Store) int64 { return s.fastWrites.Load() }
