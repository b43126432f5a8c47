package offlinequeue_test

import (
	"testing"

	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/client/offlinequeue/queuetest"
)

func TestMemoryConformance(t *testing.T) {
	queuetest.Run(t, queuetest.Config{
		New: func(t *testing.T) func(offlinequeue.Options) (offlinequeue.Queue, error) {
			return func(opts offlinequeue.Options) (offlinequeue.Queue, error) {
				return offlinequeue.NewMemory(opts), nil
			}
		},
	})
}
