package redisguard

import (
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The set-up marker says whether the server had answered, survives one
// level of unwrapping (go-redis strips one from a failed handshake), keeps
// the cause visible to errors.Is, and is removed before the caller sees it.
func TestSetupFailureMarker(t *testing.T) {
	unanswered := setupFailure(io.EOF, false)
	answered := setupFailure(io.EOF, true)
	assert.True(t, isSetupFailure(unanswered))
	assert.True(t, isUnansweredSetup(unanswered))
	assert.True(t, isSetupFailure(answered))
	assert.False(t, isUnansweredSetup(answered))
	assert.ErrorIs(t, unanswered, io.EOF)

	assert.True(t, isSetupFailure(errors.Unwrap(wrapOnce{unanswered})), "a marker lost to one Unwrap")
	assert.Same(t, unanswered, setupFailure(unanswered, true), "a marked error is marked again")
	assert.Nil(t, setupFailure(nil, false))
	assert.Equal(t, io.EOF, withoutSetup(unanswered))
	assert.Equal(t, io.EOF, withoutSetup(io.EOF))
	assert.False(t, isSetupFailure(io.EOF))
}

// wrapOnce wraps an error one level, as go-redis's handshake error does.
type wrapOnce struct{ err error }

func (w wrapOnce) Error() string { return "handshake: " + w.err.Error() }
func (w wrapOnce) Unwrap() error { return w.err }
