// Package strictjson finds what encoding/json lets through silently in files we parse
// strictly: a key repeated in one object, of which encoding/json keeps the last value, so a
// file can show one value to a reviewer and another to the program.
package strictjson

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// maxDepth matches encoding/json's nesting limit, so a document it accepts is walked whole.
const maxDepth = 10000

// CheckUniqueKeys returns an error naming the first key that appears twice in one object, at
// any depth, with its path (e.g. `model.type`). data must be a single JSON value.
func CheckUniqueKeys(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber() // numbers are skipped, never converted
	w := walker{dec: dec}
	if err := w.value(); err != nil {
		return err
	}
	// Anything but white space after the value is an error (a Token call would stop at
	// the first invalid byte without saying so).
	if len(bytes.TrimLeft(data[dec.InputOffset():], " \t\r\n")) != 0 {
		return fmt.Errorf("data after the top-level JSON value")
	}
	return nil
}

type walker struct {
	dec  *json.Decoder
	path []string // keys and [index] of the enclosing values, formatted only for an error
}

func (w *walker) value() error {
	tok, err := w.dec.Token()
	if err != nil {
		return fmt.Errorf("invalid JSON at %s: %v", w.where(), err)
	}
	delim, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	if len(w.path) >= maxDepth {
		return fmt.Errorf("JSON nested deeper than %d levels at %s", maxDepth, w.where())
	}
	if delim == '[' {
		err = w.array()
	} else {
		err = w.object()
	}
	if err != nil {
		return err
	}
	_, err = w.dec.Token() // the closing delimiter
	return err
}

func (w *walker) array() error {
	for i := 0; w.dec.More(); i++ {
		w.path = append(w.path, "["+strconv.Itoa(i)+"]")
		if err := w.value(); err != nil {
			return err
		}
		w.path = w.path[:len(w.path)-1]
	}
	return nil
}

func (w *walker) object() error {
	seen := map[string]bool{}
	for w.dec.More() {
		tok, err := w.dec.Token()
		if err != nil {
			return fmt.Errorf("invalid JSON at %s: %v", w.where(), err)
		}
		key, _ := tok.(string)
		if seen[key] {
			return fmt.Errorf("key %q appears twice in %s; remove one of them", key, w.where())
		}
		seen[key] = true
		w.path = append(w.path, key)
		if err := w.value(); err != nil {
			return err
		}
		w.path = w.path[:len(w.path)-1]
	}
	return nil
}

// where formats the current path, "the top-level object" when empty.
func (w *walker) where() string {
	if len(w.path) == 0 {
		return "the top-level object"
	}
	var b strings.Builder
	for i, p := range w.path {
		if i > 0 && !strings.HasPrefix(p, "[") {
			b.WriteByte('.')
		}
		b.WriteString(p)
	}
	return strconv.Quote(b.String())
}
