//go:build !linux

package fs

// linkNew is the Linux fast path of a createOnly write (see link_linux.go); elsewhere the
// portable path writes every file.
func (s *Store) linkNew(dir, path string, data []byte) (handled bool, err error) {
	return false, nil
}
