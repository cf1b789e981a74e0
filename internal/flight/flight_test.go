package flight

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGroup(t *testing.T) {
	t.Run("the first caller leads; the others join its call", func(t *testing.T) {
		var g Group[string, int]
		c, leader := g.Join("k")
		require.True(t, leader)
		for range 3 {
			joined, leads := g.Join("k")
			assert.False(t, leads)
			assert.Same(t, c, joined)
		}
		select {
		case <-c.Done():
			t.Fatal("done before End")
		default:
		}
		g.End("k", c, 7)
		<-c.Done()
		assert.Equal(t, 7, c.Val())
	})
	t.Run("keys have calls of their own", func(t *testing.T) {
		var g Group[int, string]
		a, leadA := g.Join(1)
		b, leadB := g.Join(2)
		assert.True(t, leadA)
		assert.True(t, leadB)
		assert.NotSame(t, a, b)
		g.End(2, b, "b")
		joined, leads := g.Join(1)
		assert.False(t, leads, "ending one key's call leaves the other's")
		assert.Same(t, a, joined)
		g.End(1, a, "a")
		assert.Equal(t, "a", a.Val())
		assert.Equal(t, "b", b.Val())
	})
	t.Run("after End the next Join leads a new call", func(t *testing.T) {
		var g Group[string, bool]
		c, _ := g.Join("k")
		g.End("k", c, true)
		next, leader := g.Join("k")
		assert.True(t, leader)
		assert.NotSame(t, c, next)
		select {
		case <-next.Done():
			t.Fatal("a new call starts undone")
		default:
		}
		assert.True(t, c.Val(), "an ended call keeps its value")
	})
	t.Run("followers that wait see the leader's value", func(t *testing.T) {
		var g Group[string, []int]
		c, _ := g.Join("k")
		var wg sync.WaitGroup
		got := make([][]int, 8)
		for i := range got {
			f, leader := g.Join("k")
			require.False(t, leader)
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-f.Done()
				got[i] = f.Val()
			}()
		}
		g.End("k", c, []int{1, 2})
		wg.Wait()
		for _, v := range got {
			assert.Equal(t, []int{1, 2}, v)
		}
	})
}
