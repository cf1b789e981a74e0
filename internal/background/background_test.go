package background

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestGroup(t *testing.T) {
	t.Run("a goroutine runs with the context Close cancels", func(t *testing.T) {
		var g Group
		got := make(chan context.Context, 1)
		require.True(t, g.Go(func(ctx context.Context) { got <- ctx; <-ctx.Done() }))
		ctx := <-got
		assert.Same(t, g.Context(), ctx)
		assert.NoError(t, ctx.Err())
		g.Close()
		assert.ErrorIs(t, ctx.Err(), context.Canceled)
	})
	t.Run("Close returns after every goroutine has", func(t *testing.T) {
		var g Group
		var started sync.WaitGroup
		var returned atomic.Int32
		for range 8 {
			started.Add(1)
			require.True(t, g.Go(func(ctx context.Context) {
				started.Done()
				<-ctx.Done()
				returned.Add(1)
			}))
		}
		started.Wait()
		g.Close()
		assert.Equal(t, int32(8), returned.Load())
	})
	t.Run("Cancel refuses and cancels without waiting; Close then waits", func(t *testing.T) {
		var g Group
		release := make(chan struct{})
		returned := make(chan struct{})
		require.True(t, g.Go(func(ctx context.Context) {
			<-ctx.Done()
			<-release // what the owner closes after Cancel
			close(returned)
		}))
		g.Cancel()
		assert.ErrorIs(t, g.Context().Err(), context.Canceled)
		assert.False(t, g.Go(func(context.Context) {}))
		select {
		case <-returned:
			t.Fatal("returned before release")
		default:
		}
		close(release)
		g.Close()
		select {
		case <-returned:
		default:
			t.Fatal("Close returned before the goroutine")
		}
	})
	t.Run("Go after Close is refused, and its function never runs", func(t *testing.T) {
		var g Group
		g.Close()
		ran := false
		assert.False(t, g.Go(func(context.Context) { ran = true }))
		g.Close() // a second Close has nothing to wait for
		assert.False(t, ran)
		assert.ErrorIs(t, g.Context().Err(), context.Canceled)
	})
	t.Run("a goroutine may start another until Close", func(t *testing.T) {
		var g Group
		inner := make(chan bool)
		release := make(chan struct{})
		require.True(t, g.Go(func(ctx context.Context) {
			inner <- g.Go(func(ctx context.Context) { <-ctx.Done() })
			<-release
			inner <- g.Go(func(context.Context) {})
		}))
		assert.True(t, <-inner, "started before Close")
		closed := make(chan struct{})
		go func() { g.Close(); close(closed) }()
		<-g.Context().Done() // Close refuses starts before it cancels
		close(release)
		assert.False(t, <-inner, "started after Close")
		<-closed
	})
	t.Run("Go racing Close: whatever starts is waited for", func(t *testing.T) {
		var g Group
		var started, finished atomic.Int32
		var callers sync.WaitGroup
		for range 16 {
			callers.Add(1)
			go func() {
				defer callers.Done()
				for g.Go(func(context.Context) { started.Add(1); finished.Add(1) }) {
				}
			}()
		}
		g.Close()
		assert.Equal(t, started.Load(), finished.Load())
		callers.Wait()
		assert.Equal(t, started.Load(), finished.Load(), "nothing started after Close")
	})
}
