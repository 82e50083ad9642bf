package modelkit

import (
	"context"
	"errors"
	"sync"
)

// Guard serializes a model's calls with its Close: a call takes it (exclusively, or shared for calls
// that may run together) and fails once the model is closed; Close releases the model once.
type Guard struct {
	mu     sync.RWMutex
	closed bool
}

// Lock takes the guard for one exclusive call; once the model is closed it fails with closedErr,
// leaving the guard free.
func (g *Guard) Lock(closedErr string) (unlock func(), err error) {
	return g.take(g.mu.Lock, g.mu.Unlock, closedErr)
}

// RLock is Lock for a call that may run alongside other shared calls.
func (g *Guard) RLock(closedErr string) (unlock func(), err error) {
	return g.take(g.mu.RLock, g.mu.RUnlock, closedErr)
}

// LockContext is Lock for a call given ctx, which it returns with a nil one made
// context.Background(): the call checks it between the programs it runs.
func (g *Guard) LockContext(ctx context.Context, closedErr string) (context.Context, func(), error) {
	unlock, err := g.Lock(closedErr)
	return orBackground(ctx), unlock, err
}

// RLockContext is LockContext for a call that may run alongside other shared calls.
func (g *Guard) RLockContext(ctx context.Context, closedErr string) (context.Context, func(), error) {
	unlock, err := g.RLock(closedErr)
	return orBackground(ctx), unlock, err
}

func orBackground(ctx context.Context) context.Context {
	if ctx == nil {
		return context.Background()
	}
	return ctx
}

func (g *Guard) take(lock, unlock func(), closedErr string) (func(), error) {
	lock()
	if g.closed {
		unlock()
		return nil, errors.New(closedErr)
	}
	return unlock, nil
}

// Close runs release once, after the calls in flight; later calls to Close return nil.
func (g *Guard) Close(release func() error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil
	}
	g.closed = true
	return release()
}
