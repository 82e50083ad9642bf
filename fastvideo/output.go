package fastvideo

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unicode"
)

// DefaultOutputPath is where Generate writes when Request.OutputPath is empty (FastVideo's
// "outputs/"): a folder, the file named after the prompt.
const DefaultOutputPath = "outputs/"

const videoExt = ".mp4"

// outputTarget resolves Request.OutputPath as FastVideo does: a path ending in .mp4 (any case) is the
// file, anything else a folder in which the file is named after the prompt. The folder is created.
// An existing file is never overwritten: the name gets _1, _2, ... before the extension.
func outputTarget(outputPath, prompt string) (string, error) {
	p := outputPath
	if p == "" {
		p = DefaultOutputPath
	}
	dir, name := p, ""
	st, statErr := os.Stat(p)
	isDir := statErr == nil && st.IsDir()
	switch {
	case strings.EqualFold(filepath.Ext(p), videoExt) && !isDir && !strings.HasSuffix(p, string(filepath.Separator)):
		dir, name = filepath.Dir(p), filepath.Base(p)
	case statErr == nil && !isDir:
		return "", &RequestError{Field: "output_path", Value: outputPath,
			Allowed: "a folder, or a file path ending in .mp4 (this path is an existing file of another kind)"}
	default:
		name = fileNameFromPrompt(prompt) + videoExt
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", &RequestError{Field: "output_path", Value: outputPath,
			Allowed: fmt.Sprintf("a folder that can be created (%v)", err)}
	}
	abs, err := filepath.Abs(filepath.Join(dir, name))
	if err != nil {
		return "", &RequestError{Field: "output_path", Value: outputPath, Allowed: fmt.Sprintf("a valid path (%v)", err)}
	}
	return freeName(abs)
}

// freeName returns path, or the first of path_1, path_2, ... (suffix before the extension) that
// does not exist.
func freeName(path string) (string, error) {
	ext := filepath.Ext(path)
	stem := strings.TrimSuffix(path, ext)
	for i := 0; i < 100000; i++ {
		p := path
		if i > 0 {
			p = fmt.Sprintf("%s_%d%s", stem, i, ext)
		}
		if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
			return p, nil
		} else if err != nil {
			return "", fmt.Errorf("fastvideo: checking the output path %s: %w", p, err)
		}
	}
	return "", fmt.Errorf("fastvideo: no free output name next to %s", path)
}

// fileNameFromPrompt is FastVideo's output name: the first 100 characters of the prompt without
// \ / : * ? " < > |, whitespace runs collapsed to one space, leading and trailing spaces and dots
// removed; "output" when nothing is left.
func fileNameFromPrompt(prompt string) string {
	rs := []rune(prompt)
	if len(rs) > 100 {
		rs = rs[:100]
	}
	var b strings.Builder
	space := false
	for _, r := range rs {
		switch {
		case strings.ContainsRune(`\/:*?"<>|`, r), r == 0:
			continue
		case unicode.IsSpace(r):
			space = true
			continue
		}
		if space && b.Len() > 0 {
			b.WriteByte(' ')
		}
		space = false
		b.WriteRune(r)
	}
	name := strings.Trim(b.String(), " .")
	if name == "" {
		return "output"
	}
	return name
}

// placeFile moves a finished file to dst without ever replacing an existing file: a hard link fails
// if dst exists (then the next free name is taken), and the source is removed afterwards. Where
// hard links are not supported the file is renamed after a last existence check. It returns the
// final path.
func placeFile(src, dst string) (string, error) {
	for attempt := 0; attempt < 1000; attempt++ {
		err := os.Link(src, dst)
		if err == nil {
			os.Remove(src)
			return dst, nil
		}
		if errors.Is(err, os.ErrExist) {
			next, ferr := freeName(dst)
			if ferr != nil {
				return "", ferr
			}
			dst = next
			continue
		}
		// No hard links here (some network and FUSE file systems): rename, which is atomic but
		// replaces, so check first.
		if _, serr := os.Lstat(dst); serr == nil {
			next, ferr := freeName(dst)
			if ferr != nil {
				return "", ferr
			}
			dst = next
			continue
		}
		if rerr := os.Rename(src, dst); rerr != nil {
			return "", fmt.Errorf("fastvideo: moving the finished video to %s: %w", dst, rerr)
		}
		return dst, nil
	}
	return "", fmt.Errorf("fastvideo: could not place the finished video next to %s", dst)
}

// stagingPath is a hidden, unique name in dst's folder for the MP4 writer: the writer renames its
// finished file there, and placeFile then gives it its final name.
func stagingPath(dst string) (string, error) {
	var token [6]byte
	if _, err := rand.Read(token[:]); err != nil {
		return "", err
	}
	return filepath.Join(filepath.Dir(dst), "."+filepath.Base(dst)+".fastvideo-"+hex.EncodeToString(token[:])+videoExt), nil
}
