package syncdtest_test

import (
	"fmt"
	"net"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/syncdtest"
)

func TestBufferTakesConcurrentWrites(t *testing.T) {
	var b syncdtest.Buffer
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for range 50 {
				fmt.Fprintf(&b, "%d", i)
			}
		})
	}
	wg.Wait()
	require.Len(t, b.String(), 200)
}

func TestFreeAddrCanBeBound(t *testing.T) {
	ln, err := net.Listen("tcp", syncdtest.FreeAddr(t))
	require.NoError(t, err)
	require.NoError(t, ln.Close())
	ln, err = net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", syncdtest.FreePort(t)))
	require.NoError(t, err)
	require.NoError(t, ln.Close())
}
