package offlinequeue_test

import (
	"context"
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
		MoveWith: func(ctx context.Context, q offlinequeue.Queue, id offlinequeue.ID, reason string, record func(context.Context) error) error {
			return q.(*offlinequeue.Memory).MoveToDeadLettersWith(ctx, id, reason, record)
		},
	})
}
