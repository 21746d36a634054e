//go:build linux

package fs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// linkNew writes data to an unnamed file in dir (O_TMPFILE) and links it at path, failing
// with an error wrapping io/fs.ErrExist when path exists. It takes 4 system calls where a
// named temporary file takes 6 (open, poller registration, write, close, link, unlink), and
// changes the directory once instead of three times: a first compaction offloads dozens
// of results into one directory. A reader never sees the file before it is whole.
//
// handled is false when nothing was written and the caller must write the portable way:
// the directory is missing, or the kernel, the filesystem or a missing /proc cannot do it
// (then s stops trying).
func (s *Store) linkNew(dir, path string, data []byte) (handled bool, err error) {
	if s.noTmpfile.Load() {
		return false, nil
	}
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, filePerm)
	if err != nil {
		// What open(2) answers when the kernel or the filesystem has no O_TMPFILE. Any other
		// error (a missing directory, a file in its way) the portable path meets and
		// handles or reports as before.
		if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EINVAL) {
			s.noTmpfile.Store(true)
		}
		return false, nil
	}
	closed := false
	defer func() {
		if !closed {
			_ = unix.Close(fd) // unnamed: closing it frees it, there is nothing to lose
		}
	}()
	for rest := data; len(rest) > 0; {
		n, err := unix.Write(fd, rest)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err == nil && n == 0 {
			err = io.ErrShortWrite // never for a regular file; not a loop forever if it were
		}
		if err != nil {
			return true, fmt.Errorf("write %s: %w", path, err)
		}
		rest = rest[n:]
	}
	// The documented way to name an O_TMPFILE file without CAP_DAC_READ_SEARCH (open(2)).
	err = unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), unix.AT_FDCWD, path, unix.AT_SYMLINK_FOLLOW)
	switch {
	case errors.Is(err, unix.EEXIST):
		return true, &os.LinkError{Op: "link", Old: "(unnamed)", New: path, Err: err}
	case err != nil:
		// Nothing is in place: the portable path writes this one. Only an error that says
		// the link cannot be made here at all stops the fast path for good; a full disk or
		// a directory removed meanwhile is this write's alone.
		if linkUnsupported(err) {
			s.noTmpfile.Store(true)
		}
		return false, nil
	}
	closed = true
	if err := unix.Close(fd); err != nil {
		// The bytes were written and named before: the file stays (a concurrent write of the
		// same content may have been told it exists), and the error is reported.
		return true, fmt.Errorf("close %s: %w", path, err)
	}
	s.fastWrites.Add(1)
	return true, nil
}

// linkUnsupported reports whether linkat's err means that an O_TMPFILE file cannot be named
// through /proc on this system: /proc is not mounted, or the filesystem or a security
// policy refuses the link.
func linkUnsupported(err error) bool {
	if errors.Is(err, unix.ENOENT) {
		_, serr := os.Stat("/proc/self/fd")
		return serr != nil
	}
	return errors.Is(err, unix.EPERM) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EXDEV) || errors.Is(err, unix.EACCES)
}
