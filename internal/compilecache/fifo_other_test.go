//go:build !unix

package compilecache

import "errors"

func mkfifo(string) error { return errors.New("no FIFOs") }
