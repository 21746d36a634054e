// Package faultstore wraps a compaction.Store for tests of the engine: it counts the writes
// that reach the wrapped store and makes chosen operations fail with a given error, so a test
// can check what the engine wrote and how it behaves when its store breaks.
package faultstore

import (
	"context"
	"io"
	"maps"
	"sync"

	"github.com/harness9/compaction-operator/compaction"
)

// Store is a compaction.Store that passes every call to the store it wraps unless a failure
// is set for that operation. It is a compaction.Store and nothing more: the optional
// interfaces of the wrapped store (compaction.ArchiveStore, compaction.StateRevalidator) are
// hidden, so the engine sees a plain store. It is safe for concurrent use.
type Store struct {
	inner compaction.Store

	mu       sync.Mutex
	puts     int
	putsByID map[string]int
	appends  int
	saves    int
	failPut  error
	failRec  error
	failLoad error
	failSave error
}

var _ compaction.Store = (*Store)(nil)

// New wraps inner; nothing fails until a Fail method says so.
func New(inner compaction.Store) *Store {
	return &Store{inner: inner, putsByID: map[string]int{}}
}

// FailPut makes PutToolResult return err without calling the wrapped store; nil ends it.
func (s *Store) FailPut(err error) { s.set(&s.failPut, err) }

// FailAppend makes AppendRecord return err without calling the wrapped store; nil ends it.
func (s *Store) FailAppend(err error) { s.set(&s.failRec, err) }

// FailLoad makes LoadState return err without calling the wrapped store; nil ends it.
func (s *Store) FailLoad(err error) { s.set(&s.failLoad, err) }

// FailSave makes SaveState return err without calling the wrapped store; nil ends it.
func (s *Store) FailSave(err error) { s.set(&s.failSave, err) }

func (s *Store) set(field *error, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	*field = err
}

func (s *Store) fault(field *error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return *field
}

// Puts is the number of tool results the wrapped store accepted, every session's.
func (s *Store) Puts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.puts
}

// PutsByID is the number of accepted puts per tool call ID (a copy).
func (s *Store) PutsByID() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.putsByID)
}

// Appends is the number of records the wrapped store accepted, every session's.
func (s *Store) Appends() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.appends
}

// Saves is the number of states the wrapped store accepted, every session's.
func (s *Store) Saves() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.saves
}

// PutToolResult stores content in the wrapped store and counts it, or returns the put failure.
func (s *Store) PutToolResult(ctx context.Context, sessionID, toolCallID, content string) (string, error) {
	if err := s.fault(&s.failPut); err != nil {
		return "", err
	}
	ref, err := s.inner.PutToolResult(ctx, sessionID, toolCallID, content)
	if err == nil {
		s.mu.Lock()
		s.puts++
		s.putsByID[toolCallID]++
		s.mu.Unlock()
	}
	return ref, err
}

// GetToolResult reads from the wrapped store.
func (s *Store) GetToolResult(ctx context.Context, sessionID, toolCallID string) ([]byte, error) {
	return s.inner.GetToolResult(ctx, sessionID, toolCallID)
}

// AppendRecord appends to the wrapped store and counts it, or returns the append failure.
func (s *Store) AppendRecord(ctx context.Context, rec *compaction.CompactionRecord) error {
	if err := s.fault(&s.failRec); err != nil {
		return err
	}
	err := s.inner.AppendRecord(ctx, rec)
	if err == nil {
		s.mu.Lock()
		s.appends++
		s.mu.Unlock()
	}
	return err
}

// ReadRecords reads from the wrapped store.
func (s *Store) ReadRecords(ctx context.Context, sessionID string, w io.Writer) error {
	return s.inner.ReadRecords(ctx, sessionID, w)
}

// LoadState reads from the wrapped store, or returns the load failure.
func (s *Store) LoadState(ctx context.Context, sessionID string) (*compaction.State, error) {
	if err := s.fault(&s.failLoad); err != nil {
		return nil, err
	}
	return s.inner.LoadState(ctx, sessionID)
}

// SaveState saves to the wrapped store and counts it, or returns the save failure.
func (s *Store) SaveState(ctx context.Context, sessionID string, st *compaction.State) error {
	if err := s.fault(&s.failSave); err != nil {
		return err
	}
	err := s.inner.SaveState(ctx, sessionID, st)
	if err == nil {
		s.mu.Lock()
		s.saves++
		s.mu.Unlock()
	}
	return err
}

// DeleteSession deletes from the wrapped store.
func (s *Store) DeleteSession(ctx context.Context, sessionID string) (int, error) {
	return s.inner.DeleteSession(ctx, sessionID)
}
